//! The PostgreSQL store's statements, what they bind ([`Binds`]) and how
//! their rows are read back ([`read_row`], [`read_waiter`]): every column
//! through a fallible getter, texts cut in SQL, a NULL or a number out of
//! range read as unknown (see the store's module docs).

use std::time::Duration;

use tokio_postgres::types::Type;

use crate::place::store::{Claimant, LeaseRow, WaiterRow};

/// The SQL of the line of waiters' table (part of [`SCHEMA_SQL`]): a
/// waiter's row is its place in line (its ticket), kept while it waits; at
/// most one per lock holds the queue seat (`queued`).
macro_rules! waiter_sql {
    () => {
        "\
CREATE TABLE IF NOT EXISTS onlyone_waiter (
    ticket bigserial PRIMARY KEY,
    name   text NOT NULL,
    token  text NOT NULL,
    host   text,
    pid    integer,
    uid    integer,
    cmd    text,
    since  timestamptz NOT NULL,
    until  timestamptz NOT NULL,
    queued boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX IF NOT EXISTS onlyone_waiter_queued ON onlyone_waiter (name) WHERE queued;
CREATE INDEX IF NOT EXISTS onlyone_waiter_name ON onlyone_waiter (name, ticket);
"
    };
}

/// The SQL of the line's table alone: what a store set up before the line
/// existed needs (with `GRANT SELECT, INSERT, UPDATE, DELETE ON
/// onlyone_waiter` and `GRANT USAGE ON SEQUENCE onlyone_waiter_ticket_seq`
/// to the jobs' role).
pub(super) const WAITER_SQL: &str = waiter_sql!();

/// The SQL of the schedules' table (part of [`SCHEMA_SQL`]): a lock's
/// row keeps the schedule its fires last recorded (`spec`) and a version
/// that every fire's record moves on, under which the fires of every host
/// record what they found once ([`RECORD_SCHEDULE`]).
macro_rules! schedule_sql {
    () => {
        "\
CREATE TABLE IF NOT EXISTS onlyone_schedule (
    name    text PRIMARY KEY,
    spec    text,
    version bigint NOT NULL
);
"
    };
}

/// The SQL of the schedules' table alone: what a store set up before
/// schedules needs (with `GRANT SELECT, INSERT, UPDATE ON
/// onlyone_schedule` to the jobs' role).
pub(super) const SCHEDULE_SQL: &str = schedule_sql!();

/// The index of the lease rows' names in the order of their bytes
/// (`COLLATE "C"`, whatever the database's collation): it serves
/// `rows_of_lock!`, the rows of a lock's slots, which every take of a
/// store with slots looks for (part of [`SCHEMA_SQL`]).
macro_rules! slots_index_sql {
    () => {
        "CREATE INDEX IF NOT EXISTS onlyone_lease_slots ON onlyone_lease (name COLLATE \"C\");\n"
    };
}

/// The index of the lease rows' names alone: what a store set up before
/// it needs; made by the first onlyone that connects as the table's
/// owner (see [`SLOTS_INDEX_NOW`]), else by a DBA.
pub(super) const SLOTS_INDEX_SQL: &str = slots_index_sql!();

/// [`SLOTS_INDEX_SQL`] as a connection runs it on the way: one
/// transaction that gives up at once when the table is locked (a
/// `CREATE INDEX` waiting for its lock would hold up every take queued
/// behind it), and within two seconds at most (longer, on a huge table,
/// it is the DBA's to make).
pub(super) const SLOTS_INDEX_NOW: &str = concat!(
    "SET LOCAL lock_timeout = '100ms'; SET LOCAL statement_timeout = '2s'; ",
    slots_index_sql!()
);

/// The rows of the lock `$name` (an SQL parameter) in the lease table,
/// `$col` their names' column: the lock's own (slot 0) and those of its
/// slots (`NAME#K`). The first through the primary key; the others, the
/// names from `NAME#` up to `NAME$` ('$' comes after '#') in the order of
/// their bytes, through `onlyone_lease_slots` ([`SLOTS_INDEX_SQL`]): a
/// range an index serves, where `left(name, ...) = NAME#` has every row
/// read.
macro_rules! rows_of_lock {
    ($col:literal, $name:literal) => {
        concat!(
            "(",
            $col,
            " = ",
            $name,
            " OR (",
            $col,
            " COLLATE \"C\" >= ",
            $name,
            " || '#' AND ",
            $col,
            " COLLATE \"C\" < ",
            $name,
            " || '$'))"
        )
    };
}

/// The SQL that creates the store's tables: run on first use when the role
/// may, else by a DBA (doc/store.md gives it with the least privileges).
pub const SCHEMA_SQL: &str = concat!(
    "\
CREATE TABLE IF NOT EXISTS onlyone_lease (
    name           text PRIMARY KEY,
    epoch          bigint NOT NULL,
    token          text NOT NULL,
    host           text,
    pid            integer,
    uid            integer,
    cmd            text,
    since          timestamptz NOT NULL,
    lock_until     timestamptz NOT NULL,
    stop_requested boolean NOT NULL DEFAULT false,
    slots          integer
);
",
    slots_index_sql!(),
    "\
CREATE TABLE IF NOT EXISTS onlyone_event (
    id    bigserial PRIMARY KEY,
    name  text NOT NULL,
    event text NOT NULL
);
CREATE INDEX IF NOT EXISTS onlyone_event_name ON onlyone_event (name, id);
",
    waiter_sql!(),
    schedule_sql!()
);

/// At most this many waiters of a lock are read back.
pub const MAX_WAITERS: i64 = 100;

/// At most this many events are kept per lock (the oldest go, as a
/// journal rotates), and read back.
pub const MAX_EVENTS: i64 = 30_000;

/// At most this many locks are read back by `status`, `check` and
/// `metrics` (each row cut to a few KiB: what a store's rows can make a
/// reader hold is bounded).
pub const MAX_NAMES: usize = 10_000;

/// Clears the rows of `$1`'s line that are past their end by more than 10
/// minutes (their waiters were killed long ago): the next waiter that
/// joins the line does it.
pub(super) const CLEAR_DEAD_WAITERS: &str = "DELETE FROM onlyone_waiter WHERE name = $1 \
    AND until < clock_timestamp() - interval '10 minutes'";

/// Whether the lease and event tables exist, whether the line's does,
/// whether the lease table has the column of slots, whether it has the
/// index of its names ([`SLOTS_INDEX_SQL`]), whether this role may
/// create that (it has the rights of the table's owner, and may create
/// in its schema, on a server that is not a standby), and whether the
/// schedules' table exists.
pub(super) const LOOK_TABLES: &str = "SELECT to_regclass('onlyone_lease') IS NOT NULL \
    AND to_regclass('onlyone_event') IS NOT NULL, \
    to_regclass('onlyone_waiter') IS NOT NULL, \
    EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('onlyone_lease') \
    AND attname = 'slots' AND NOT attisdropped), \
    to_regclass('onlyone_lease_slots') IS NOT NULL, \
    coalesce((SELECT pg_has_role(c.relowner, 'USAGE') \
    AND has_schema_privilege(c.relnamespace, 'CREATE') AND NOT pg_is_in_recovery() \
    FROM pg_class c WHERE c.oid = to_regclass('onlyone_lease')), false), \
    to_regclass('onlyone_schedule') IS NOT NULL";

/// What a lease table set up before slots lacks: run by the first take
/// of a lock of several slots when the role may, else by a DBA.
pub(super) const ADD_SLOTS: &str =
    "ALTER TABLE onlyone_lease ADD COLUMN IF NOT EXISTS slots integer";

/// [`ADD_SLOTS`] as the store's administrator runs it.
pub(super) const ADD_SLOTS_HOW: &str = "ALTER TABLE onlyone_lease ADD COLUMN slots integer;\n";

/// Whether this role may use the line's table and its sequence.
pub(super) const LINE_USABLE: &str = "SELECT CASE WHEN to_regclass('onlyone_waiter') IS NULL THEN false ELSE \
    coalesce(has_table_privilege('onlyone_waiter', 'SELECT') \
    AND has_table_privilege('onlyone_waiter', 'INSERT') \
    AND has_table_privilege('onlyone_waiter', 'UPDATE') \
    AND has_table_privilege('onlyone_waiter', 'DELETE') \
    AND has_sequence_privilege( \
    pg_get_serial_sequence('onlyone_waiter', 'ticket'), 'USAGE'), \
    false) END";

/// Takes a lease that has run out (or was never taken), in a store without
/// a line: `$1`-`$7` ([`Binds`]); the new epoch, or no row while it holds.
pub(super) const TAKE: &str = "INSERT INTO onlyone_lease AS l \
    (name, epoch, token, host, pid, uid, cmd, since, lock_until, stop_requested) \
    VALUES ($1, 1, $2, $3, $4, $5, $6, clock_timestamp(), \
    clock_timestamp() + $7 * interval '1 millisecond', false) \
    ON CONFLICT (name) DO UPDATE SET \
    epoch = coalesce(l.epoch, 0) + 1, token = EXCLUDED.token, host = EXCLUDED.host, \
    pid = EXCLUDED.pid, uid = EXCLUDED.uid, cmd = EXCLUDED.cmd, \
    since = clock_timestamp(), \
    lock_until = clock_timestamp() + $7 * interval '1 millisecond', \
    stop_requested = false \
    WHERE coalesce(l.lock_until <= clock_timestamp(), true) \
    RETURNING coalesce(epoch, 0)";

/// Takes a lease that has run out when no live waiter is ahead of the
/// ticket `$8` (none: no live waiter at all), and removes that waiter's
/// row in the same statement: the epoch (or NULL), how many are ahead,
/// and whether the lease holds.
pub(super) const TAKE_IN_LINE: &str = "WITH ahead AS ( \
    SELECT count(*) AS n FROM onlyone_waiter w \
    WHERE w.name = $1 AND w.until > clock_timestamp() \
    AND ($8::int8 IS NULL OR w.ticket < $8::int8) \
    ), took AS ( \
    INSERT INTO onlyone_lease AS l \
    (name, epoch, token, host, pid, uid, cmd, since, lock_until, stop_requested) \
    SELECT $1, 1, $2, $3, $4, $5, $6, clock_timestamp(), \
    clock_timestamp() + $7 * interval '1 millisecond', false \
    FROM ahead WHERE ahead.n = 0 \
    ON CONFLICT (name) DO UPDATE SET \
    epoch = coalesce(l.epoch, 0) + 1, token = EXCLUDED.token, host = EXCLUDED.host, \
    pid = EXCLUDED.pid, uid = EXCLUDED.uid, cmd = EXCLUDED.cmd, \
    since = clock_timestamp(), \
    lock_until = clock_timestamp() + $7 * interval '1 millisecond', \
    stop_requested = false \
    WHERE coalesce(l.lock_until <= clock_timestamp(), true) \
    RETURNING coalesce(epoch, 0) AS epoch \
    ), left_line AS ( \
    DELETE FROM onlyone_waiter \
    WHERE name = $1 AND ticket = $8::int8 AND EXISTS (SELECT 1 FROM took) \
    ) \
    SELECT (SELECT epoch FROM took), (SELECT n FROM ahead), \
    coalesce((SELECT lock_until > clock_timestamp() FROM onlyone_lease \
    WHERE name = $1), false)";

/// The parts of a take of a slot (`$1` the slot's row, `$2`-`$7`
/// [`Binds`], then the lock's name and its number of slots, NULL for
/// one): a live row of the lock taken with another number (`differ`), and
/// the take of the row, unless that or a waiter ahead (`WHERE`) stops it.
macro_rules! take_slot_sql {
    ($name:literal, $slots:literal, $from:literal, $where:literal) => {
        concat!(
            "differ AS ( \
    SELECT greatest(coalesce(o.slots, 1), 1) AS n FROM onlyone_lease o \
    WHERE ",
            rows_of_lock!("o.name", $name),
            " \
    AND o.lock_until > clock_timestamp() \
    AND greatest(coalesce(o.slots, 1), 1) <> coalesce(",
            $slots,
            "::int4, 1) LIMIT 1 \
    ), took AS ( \
    INSERT INTO onlyone_lease AS l \
    (name, epoch, token, host, pid, uid, cmd, since, lock_until, stop_requested, slots) \
    SELECT $1, 1, $2, $3, $4, $5, $6, clock_timestamp(), \
    clock_timestamp() + $7 * interval '1 millisecond', false, ",
            $slots,
            "::int4 \
    ",
            $from,
            " WHERE NOT EXISTS (SELECT 1 FROM differ) ",
            $where,
            " \
    ON CONFLICT (name) DO UPDATE SET \
    epoch = coalesce(l.epoch, 0) + 1, token = EXCLUDED.token, host = EXCLUDED.host, \
    pid = EXCLUDED.pid, uid = EXCLUDED.uid, cmd = EXCLUDED.cmd, \
    since = clock_timestamp(), \
    lock_until = clock_timestamp() + $7 * interval '1 millisecond', \
    stop_requested = false, slots = EXCLUDED.slots \
    WHERE coalesce(l.lock_until <= clock_timestamp(), true) \
    RETURNING coalesce(epoch, 0) AS epoch \
    )"
        )
    };
}

/// [`TAKE`] of a slot, in a lease table with the column of slots:
/// `$1`-`$7` ([`Binds`], `$1` the slot's row), `$8` the lock's name, `$9`
/// its number of slots (NULL for one); the new epoch (or NULL), and the
/// number a live holder of the lock took it with when it differs.
pub(super) const TAKE_SLOT: &str = concat!(
    "WITH ",
    take_slot_sql!("$8", "$9", "", ""),
    " SELECT (SELECT epoch FROM took), (SELECT n FROM differ)"
);

/// [`TAKE_IN_LINE`] of a slot, in a lease table with the column of slots:
/// `$1`-`$7` ([`Binds`], `$1` the slot's row), `$8` the ticket, `$9` the
/// lock's name (its line's), `$10` its number of slots (NULL for one); the
/// epoch (or NULL), how many are ahead, whether the slot holds, and the
/// number a live holder of the lock took it with when it differs.
pub(super) const TAKE_SLOT_IN_LINE: &str = concat!(
    "WITH ahead AS ( \
    SELECT count(*) AS n FROM onlyone_waiter w \
    WHERE w.name = $9 AND w.until > clock_timestamp() \
    AND ($8::int8 IS NULL OR w.ticket < $8::int8) \
    ), ",
    take_slot_sql!("$9", "$10", "FROM ahead", "AND ahead.n = 0"),
    ", left_line AS ( \
    DELETE FROM onlyone_waiter \
    WHERE name = $9 AND ticket = $8::int8 AND EXISTS (SELECT 1 FROM took) \
    ) \
    SELECT (SELECT epoch FROM took), (SELECT n FROM ahead), \
    coalesce((SELECT lock_until > clock_timestamp() FROM onlyone_lease \
    WHERE name = $1), false), (SELECT n FROM differ)"
);

/// Joins the end of a line: `$1`-`$7` ([`Binds`]), the duration the row's
/// life; its ticket.
pub(super) const JOIN_LINE: &str = "INSERT INTO onlyone_waiter \
    (name, token, host, pid, uid, cmd, since, until, queued) \
    VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), \
    clock_timestamp() + $7 * interval '1 millisecond', false) \
    RETURNING coalesce(ticket, 0)";

/// Takes the queue seat on the partial unique index of queued rows,
/// taking over only a dead row or the one of the token `$8`: the ticket,
/// or no row while a live waiter has it.
pub(super) const TAKE_QUEUE_SEAT: &str = "INSERT INTO onlyone_waiter AS o \
    (name, token, host, pid, uid, cmd, since, until, queued) \
    VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), \
    clock_timestamp() + $7 * interval '1 millisecond', true) \
    ON CONFLICT (name) WHERE queued DO UPDATE SET \
    ticket = EXCLUDED.ticket, token = EXCLUDED.token, host = EXCLUDED.host, \
    pid = EXCLUDED.pid, uid = EXCLUDED.uid, cmd = EXCLUDED.cmd, \
    since = EXCLUDED.since, until = EXCLUDED.until \
    WHERE coalesce(o.until <= clock_timestamp(), true) \
    OR coalesce(o.token = $8, false) \
    RETURNING coalesce(ticket, 0)";

/// Moves a waiter's row's end on (`$1` the name, `$2` the ticket, `$3`
/// milliseconds); no row when it is gone.
pub(super) const STAY_IN_LINE: &str = "UPDATE onlyone_waiter \
    SET until = clock_timestamp() + $3 * interval '1 millisecond' \
    WHERE name = $1 AND ticket = $2 RETURNING ticket";

/// Removes a waiter's row (`$1` the name, `$2` the ticket).
pub(super) const LEAVE_LINE: &str = "DELETE FROM onlyone_waiter WHERE name = $1 AND ticket = $2";

/// Renews a lease of epoch `$2` by `$3` milliseconds if it still holds:
/// whether a stop was asked for, or no row when it is lost.
pub(super) const RENEW: &str = "UPDATE onlyone_lease \
    SET lock_until = clock_timestamp() + $3 * interval '1 millisecond' \
    WHERE name = $1 AND epoch = $2 AND lock_until > clock_timestamp() \
    RETURNING coalesce(stop_requested, false)";

/// Ends a lease of epoch `$2` now, if it still holds.
pub(super) const RELEASE: &str = "UPDATE onlyone_lease SET lock_until = clock_timestamp(), \
    stop_requested = false \
    WHERE name = $1 AND epoch = $2 AND lock_until > clock_timestamp() \
    RETURNING epoch";

/// Asks the live holder of `$1` to end its run: its epoch, or no row.
pub(super) const REQUEST_STOP: &str = "UPDATE onlyone_lease SET stop_requested = true \
    WHERE name = $1 AND lock_until > clock_timestamp() \
    RETURNING coalesce(epoch, 0)";

/// Appends an event line `$2` to the history of `$1`: its id.
pub(super) const APPEND_EVENT: &str = "INSERT INTO onlyone_event (name, event) VALUES ($1, $2) \
    RETURNING coalesce(id, 0)";

/// Removes the events of `$1` older than its newest `$2`.
pub(super) const TRIM_EVENTS: &str = "DELETE FROM onlyone_event WHERE name = $1 AND id <= \
    (SELECT id FROM onlyone_event WHERE name = $1 \
    ORDER BY id DESC OFFSET $2 LIMIT 1)";

/// The newest `$3` events of `$1`, newest first, none longer than `$2`
/// bytes (a longer one is not one of ours).
pub(super) const EVENTS: &str = "SELECT event::text FROM onlyone_event \
    WHERE name = $1 AND octet_length(event) <= $2 \
    ORDER BY id DESC LIMIT $3";

/// The schedule kept for `$1` and its version (a text cut in SQL).
pub(super) const SCHEDULE_KEPT: &str = "SELECT left(spec::text, 1024), version \
    FROM onlyone_schedule WHERE name = $1";

/// Records what a fire found of the schedule of `$1`, if the version of
/// its row is still `$3` (0: no row yet): the version moved on, the spec
/// `$2` kept (NULL: the one kept stays), and the event lines `$4` appended
/// to its history in their order, all in one statement; the new version,
/// or NULL (nothing written) when another fire recorded first. Of two
/// fires that read the same version, the second's `ON CONFLICT` waits for
/// the first's row and finds it moved on.
pub(super) const RECORD_SCHEDULE: &str = "WITH kept AS ( \
    INSERT INTO onlyone_schedule AS s (name, spec, version) VALUES ($1, $2, 1) \
    ON CONFLICT (name) DO UPDATE SET spec = coalesce(EXCLUDED.spec, s.spec), \
    version = s.version + 1 WHERE s.version = $3 \
    RETURNING version \
    ), logged AS ( \
    INSERT INTO onlyone_event (name, event) \
    SELECT $1, e.line FROM unnest($4::text[]) WITH ORDINALITY AS e(line, i) \
    WHERE EXISTS (SELECT 1 FROM kept) ORDER BY e.i \
    RETURNING id \
    ) \
    SELECT (SELECT version FROM kept), (SELECT count(*) FROM logged)";

/// A waiter's row, every text cut in SQL, the time left as
/// milliseconds by the server's clock.
const WAITER_ROW: &str = "SELECT left(name::text, 256), ticket, left(token::text, 256), \
     left(host::text, 256), pid, uid, left(cmd::text, 1024), \
     extract(epoch from since)::float8, \
     (extract(epoch from until) - extract(epoch from clock_timestamp()))::float8 * 1000, \
     queued FROM onlyone_waiter";

/// The waiter of `$1` in the queue seat, live or dead.
pub(super) fn queued() -> String {
    format!("{WAITER_ROW} WHERE name = $1 AND queued ORDER BY ticket LIMIT 1")
}

/// The live waiters of `$1`, first in line first (at most [`MAX_WAITERS`]).
pub(super) fn waiters() -> String {
    format!(
        "{WAITER_ROW} WHERE name = $1 AND until > clock_timestamp() ORDER BY ticket LIMIT \
         {MAX_WAITERS}"
    )
}

/// Every column as text or a number, every text cut in SQL (a huge
/// value never crosses the wire whole), the lease's end and the
/// server's now as seconds, and the number of slots (`slots`: the table
/// has its column; a table set up before slots has none, and says 1).
fn row(slots: bool) -> String {
    format!(
        "SELECT left(name::text, 256), epoch, left(token::text, 256), \
         left(host::text, 256), pid, uid, left(cmd::text, 1024), \
         extract(epoch from since)::float8, extract(epoch from lock_until)::float8, \
         extract(epoch from clock_timestamp())::float8, stop_requested, {} \
         FROM onlyone_lease",
        if slots {
            "least(greatest(slots, 1), 1000000)"
        } else {
            "1"
        }
    )
}

/// The longest name of a slot's row: a lock's name, `#` and a number.
const MAX_ROW_NAME: usize = crate::names::MAX_NAME + 11;

/// The lease row of `$1` (`slots`: see [`row`]).
pub(super) fn lease(slots: bool) -> String {
    format!("{} WHERE name = $1", row(slots))
}

/// The rows of the lock `$1` (`rows_of_lock!`).
const ROWS_OF_LOCK: &str = rows_of_lock!("name", "$1");

/// The lease rows of every slot of the lock `$1` (at most [`MAX_NAMES`]).
pub(super) fn lease_slots(slots: bool) -> String {
    format!(
        "{} WHERE {ROWS_OF_LOCK} ORDER BY name LIMIT {MAX_NAMES}",
        row(slots)
    )
}

/// Every lease row, by name (at most [`MAX_NAMES`]).
pub(super) fn leases(slots: bool) -> String {
    format!(
        "{} WHERE octet_length(name) <= {MAX_ROW_NAME} ORDER BY name LIMIT {MAX_NAMES}",
        row(slots)
    )
}

/// Every lock name with a lease or events (at most [`MAX_NAMES`]): a
/// slot's row counts for its lock.
pub(super) fn names() -> String {
    format!(
        "SELECT n FROM (SELECT split_part(name::text, '#', 1) AS n FROM onlyone_lease \
         UNION SELECT DISTINCT name::text FROM onlyone_event) AS all_names \
         WHERE octet_length(n) <= {} ORDER BY 1 LIMIT {MAX_NAMES}",
        crate::names::MAX_NAME
    )
}

/// A lease row's values, each read with a fallible getter and checked.
pub(super) fn read_row(r: &tokio_postgres::Row) -> Result<LeaseRow, tokio_postgres::Error> {
    let time = |i: usize| unix_time(r, i);
    let (until, now) = (
        r.try_get::<_, Option<f64>>(8)?.filter(|t| !t.is_nan()),
        time(9)?,
    );
    let left_ms = match (until, now) {
        // An end at +infinity holds (acquire cannot take it); one at
        // -infinity or NULL does not.
        (Some(u), Some(n)) => ((u - n) * 1000.0).clamp(-1e15, 1e15) as i64,
        _ => -1,
    };
    let (host, pid, uid, cmd) = read_who(r)?;
    let row = r.try_get::<_, Option<String>>(0)?.unwrap_or_default();
    let (name, slot) = crate::place::store::lock_of_row(&row);
    let slots = r
        .try_get::<_, Option<i32>>(11)?
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    Ok(LeaseRow {
        name: name.to_owned(),
        slot,
        slots,
        epoch: r.try_get::<_, Option<i64>>(1)?.unwrap_or(0),
        token: r.try_get::<_, Option<String>>(2)?.unwrap_or_default(),
        host,
        pid,
        uid,
        cmd,
        since: time(7)?.unwrap_or(0.0),
        until: until.map_or(0.0, |u| u.clamp(0.0, 1e11)),
        left_ms,
        stop_requested: r.try_get::<_, Option<bool>>(10)?.unwrap_or(false),
    })
}

/// What a store set up before the line existed needs: its table, and
/// the grants of doc/store.md ("Setup and the least privileges") to the
/// jobs' role.
pub(super) fn line_setup() -> crate::place::store::LineSetup {
    crate::place::store::LineSetup {
        what: "table onlyone_waiter",
        how: format!(
            "{}GRANT SELECT, INSERT, UPDATE, DELETE ON onlyone_waiter TO <the jobs' role>;\n\
             GRANT USAGE ON SEQUENCE onlyone_waiter_ticket_seq TO <the jobs' role>;\n",
            WAITER_SQL.replace(" IF NOT EXISTS", "")
        ),
    }
}

/// What a store set up before schedules needs, for a role that may not
/// create it: the schedules' table and the grant of doc/store.md ("Setup
/// and the least privileges").
pub(super) fn schedule_setup() -> String {
    format!(
        "{}GRANT SELECT, INSERT, UPDATE ON onlyone_schedule TO <the jobs' role>;\n",
        SCHEDULE_SQL.replace(" IF NOT EXISTS", "")
    )
}

/// What a store set up before the index of the lease rows' names
/// needs, for a role that may not create it.
pub(super) fn index_setup() -> crate::place::store::LineSetup {
    crate::place::store::LineSetup {
        what: "index onlyone_lease_slots",
        how: SLOTS_INDEX_SQL.replace(" IF NOT EXISTS", ""),
    }
}

/// What every statement that writes a holder or a waiter binds first:
/// `$1` the name, `$2` the token, `$3` the host, `$4` the pid, `$5` the
/// uid, `$6` the command and `$7` a duration in milliseconds (the lease,
/// or the waiter's row's life).
pub(super) struct Binds {
    pub(super) name: String,
    token: String,
    host: String,
    pid: i32,
    uid: i32,
    cmd: String,
    ms: f64,
}

impl Binds {
    pub(super) fn new(name: &str, who: &Claimant<'_>, d: Duration) -> Binds {
        Binds {
            name: name.to_owned(),
            token: who.token.to_owned(),
            host: who.host.to_owned(),
            pid: who.pid as i32,
            uid: who.uid as i32,
            cmd: who.cmd.to_owned(),
            ms: d.as_millis() as f64,
        }
    }

    /// `$1` to `$7`, then `more` (`$8`...).
    pub(super) fn params<'a>(&'a self, more: &[Param<'a>]) -> Vec<Param<'a>> {
        let mut p: Vec<Param<'a>> = vec![
            (&self.name, Type::TEXT),
            (&self.token, Type::TEXT),
            (&self.host, Type::TEXT),
            (&self.pid, Type::INT4),
            (&self.uid, Type::INT4),
            (&self.cmd, Type::TEXT),
            (&self.ms, Type::FLOAT8),
        ];
        p.extend_from_slice(more);
        p
    }
}

/// A statement's parameter and its type.
pub(super) type Param<'a> = (&'a (dyn tokio_postgres::types::ToSql + Sync), Type);

/// Column `i` as Unix seconds, when it is one (not NULL, not infinite,
/// not before 1970 or past the year 5000).
fn unix_time(r: &tokio_postgres::Row, i: usize) -> Result<Option<f64>, tokio_postgres::Error> {
    Ok(r.try_get::<_, Option<f64>>(i)?
        .filter(|t| t.is_finite() && (0.0..1e11).contains(t)))
}

/// Who a lease's or a waiter's row names: its host, pid, uid and command
/// (columns 3 to 6), a pid or uid out of range read as unknown.
type Who = (Option<String>, Option<u32>, Option<u32>, Option<String>);

fn read_who(r: &tokio_postgres::Row) -> Result<Who, tokio_postgres::Error> {
    Ok((
        r.try_get(3)?,
        r.try_get::<_, Option<i32>>(4)?
            .and_then(|p| u32::try_from(p).ok())
            .filter(|&p| p > 0),
        r.try_get::<_, Option<i32>>(5)?
            .and_then(|u| u32::try_from(u).ok()),
        r.try_get(6)?,
    ))
}

/// A waiter's row's values, each read with a fallible getter and checked
/// (see [`read_row`]).
pub(super) fn read_waiter(r: &tokio_postgres::Row) -> Result<WaiterRow, tokio_postgres::Error> {
    let left = r.try_get::<_, Option<f64>>(8)?.filter(|t| !t.is_nan());
    let (host, pid, uid, cmd) = read_who(r)?;
    Ok(WaiterRow {
        name: r.try_get::<_, Option<String>>(0)?.unwrap_or_default(),
        ticket: r.try_get::<_, Option<i64>>(1)?.unwrap_or(0),
        token: r.try_get::<_, Option<String>>(2)?.unwrap_or_default(),
        host,
        pid,
        uid,
        cmd,
        since: unix_time(r, 7)?.unwrap_or(0.0),
        left_ms: left.map_or(-1, |l| l.clamp(-1e15, 1e15) as i64),
        queued: r.try_get::<_, Option<bool>>(9)?.unwrap_or(false),
    })
}
