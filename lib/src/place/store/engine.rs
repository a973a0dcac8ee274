//! A store's engine, as the store place uses it: what a store of leases
//! does ([`LeaseStore`]), what it reads back (its rows), how it fails
//! ([`StoreError`]), and [`open`], where the URL's scheme chooses the
//! engine (the PostgreSQL engine, `pg`, is one). The engine's own words
//! (SQL, its client's errors) stay inside it.
//!
//! A run sees a lease, as a lock file, through [`crate::supervise::Hold`]:
//! what the command is told, how the lock names it, and what keeps the
//! lock (a lease renewed in time).

use std::time::Duration;

/// The signals every thread the store starts keeps blocked: those the
/// supervisor forwards to the command (read from its signalfd) and
/// SIGCHLD. A signal mask is per thread, and a process-directed signal
/// goes to any thread that has it unblocked: a renewing thread that let
/// SIGTERM in would have it kill the wrapper (the default action) instead
/// of reaching the command, and one that let SIGCHLD in would eat the
/// command's stops.
pub(crate) fn supervised_signals() -> Vec<i32> {
    let mut sigs: Vec<i32> = crate::supervise::FORWARDED
        .iter()
        .map(|s| s.as_raw())
        .collect();
    sigs.push(rustix::process::Signal::CHILD.as_raw());
    sigs
}

/// Starts a thread with the supervisor's signals (those it forwards
/// and SIGCHLD) blocked from its first instruction: they are blocked in
/// the caller around the spawn (a new thread inherits its creator's mask),
/// then the caller's mask is back. For any thread that may outlive a
/// moment in a process that supervises a command (the store's, the
/// command's pings): one that let SIGTERM in would have it kill the
/// wrapper instead of reaching the command.
pub fn spawn_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let _blocked = crate::sys::Blocked::new(&supervised_signals())?;
    std::thread::Builder::new().name(name.to_owned()).spawn(f)
}

/// The supervisor's signals (those it forwards, and SIGCHLD)
/// held blocked in the calling thread, for a program that runs a leased
/// command from it: one that comes before the command starts or after it
/// ended waits here instead of killing the wrapper with its lease held and
/// its end not recorded. [`HeldSignals::pending`] says whether one came;
/// when this is dropped, what is still pending is dropped too (it came
/// after the run), then the mask is back as it was.
pub struct HeldSignals {
    reader: crate::sys::SignalReader,
    _blocked: crate::sys::Blocked,
}

impl std::fmt::Debug for HeldSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldSignals")
    }
}

impl HeldSignals {
    /// Blocks them in the calling thread.
    pub fn new() -> std::io::Result<HeldSignals> {
        let sigs = supervised_signals();
        let blocked = crate::sys::Blocked::new(&sigs)?;
        Ok(HeldSignals {
            reader: crate::sys::SignalReader::new(&sigs)?,
            _blocked: blocked,
        })
    }

    /// A signal the supervisor forwards that came meanwhile, if
    /// any (taken: asked again, it is the next one).
    pub fn pending(&self) -> Option<rustix::process::Signal> {
        while let Some((sig, _)) = self.reader.next() {
            if let Some(s) = crate::supervise::FORWARDED
                .iter()
                .find(|s| s.as_raw() == sig)
            {
                return Some(*s);
            }
        }
        None
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        while self.reader.next().is_some() {}
    }
}

/// Blocks [`supervised_signals`] in the calling thread for good (a
/// runtime's worker, as it starts).
#[cfg(feature = "postgres")]
pub(crate) fn block_in_this_thread() {
    if let Ok(b) = crate::sys::Blocked::new(&supervised_signals()) {
        std::mem::forget(b);
    }
}

/// What a store's client said went wrong underneath (its own error), kept
/// as a [`StoreError`]'s source: a message is the error's `Display`, which
/// says it already, without a password.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why the store failed: a kind, with what it names (the store's URL,
/// without its password) and, where one came, the client's own error as
/// its source. Each `Display` is a whole sentence; the command prints it
/// alone, never the chain.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The server could not be reached (refused, not found, closed, shut
    /// down): a connection made again may do ([`StoreError::is_unreachable`]).
    #[error("cannot reach the store `{url}`{}", after_colon(.detail, .hint))]
    Unreachable {
        /// The store's URL.
        url: String,
        /// What happened, as the client or the system said it (none: it
        /// could not be told).
        detail: String,
        /// What to do about it, where that is known ("; ..."), or nothing.
        hint: &'static str,
        /// The client's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The server did not answer within the call's timeout.
    #[error("the store `{url}` did not answer within {}", duration(.after))]
    TimedOut {
        /// The store's URL.
        url: String,
        /// The timeout.
        after: std::time::Duration,
    },
    /// The server said something, then closed the connection: a
    /// connection made again may do.
    #[error("the store `{url}` said: {detail}")]
    Dropped {
        /// The store's URL.
        url: String,
        /// What it said.
        detail: String,
        /// The client's error.
        #[source]
        source: BoxError,
    },
    /// The server at a socket is not the session the URL asks for
    /// (`target_session_attrs`): another host may be.
    #[error(
        "the store `{url}` at `{}` is not {want}, as target_session_attrs={want} asks",
        .at.display()
    )]
    NotTarget {
        /// The store's URL.
        url: String,
        /// The socket.
        at: std::path::PathBuf,
        /// What was asked: `read-write` or `read-only`.
        want: &'static str,
    },
    /// The server refused the credentials.
    #[error("the store `{url}` refused the credentials: {detail}; check {check}")]
    Credentials {
        /// The store's URL.
        url: String,
        /// What the server said.
        detail: String,
        /// Where the credentials come from, in the engine's words ("the
        /// user and PGPASSWORD or ~/.pgpass").
        check: &'static str,
        /// The client's error.
        #[source]
        source: BoxError,
    },
    /// The server does not let this user, database, host or encryption in.
    #[error(
        "the store `{url}` refused the connection: {detail}; the server's pg_hba.conf decides \
         which user, database, host and encryption (sslmode) may connect"
    )]
    NotAllowed {
        /// The store's URL.
        url: String,
        /// What the server said.
        detail: String,
        /// The client's error.
        #[source]
        source: BoxError,
    },
    /// What listens where the URL points is not trusted with anything
    /// (a socket whose server is not who it must be): nothing was sent.
    #[error("cannot use the store `{url}`: {why}")]
    Untrusted {
        /// The store's URL.
        url: String,
        /// Why, and what to do.
        why: String,
    },
    /// The server refused a statement.
    #[error("the store `{url}` said: {detail}")]
    Server {
        /// The store's URL.
        url: String,
        /// What it said.
        detail: String,
        /// The client's error.
        #[source]
        source: BoxError,
    },
    /// What the store keeps its locks in does not exist, and this role
    /// may not create it.
    #[error(
        "the store's {what} do not exist and this role cannot create them ({source}); have them \
         created as doc/store.md says (\"Setup and the least privileges\")"
    )]
    NoTables {
        /// What is missing, in the engine's words ("tables").
        what: &'static str,
        /// Why they could not be created.
        source: Box<StoreError>,
    },
    /// A row that does not read as the store's own (changed outside
    /// onlyone).
    #[error(
        "the store `{url}` has a {what} onlyone cannot read ({source}); it was changed outside \
         onlyone: have the store set up again as doc/store.md says (\"Setup and the least \
         privileges\")"
    )]
    BadRow {
        /// The store's URL.
        url: String,
        /// "lease row", "waiter's row".
        what: &'static str,
        /// What could not be read.
        source: BoxError,
    },
    /// The URL, or what it names (a certificate file), cannot be used: why.
    #[error("{0}")]
    BadUrl(String),
    /// A take of a lock of several slots in a store set up before slots,
    /// which this role may not change.
    #[error(
        "the store `{url}` keeps one lease per lock: it was set up before slots and this role \
         cannot change it ({detail}); have it changed with:\n{how}(doc/store.md, \"Setup and \
         the least privileges\")"
    )]
    NoSlots {
        /// The store's URL.
        url: String,
        /// Why it could not be added, as the server said.
        detail: String,
        /// What changes it, for the store's administrator, in the
        /// engine's words: statements, each line ended.
        how: &'static str,
    },
    /// What keeps the schedules of locks is not in the store, or this
    /// role may not use it (a store set up before schedules).
    #[error(
        "the store `{url}` keeps no schedule: it was set up before schedules, or this role may \
         not use what keeps them ({detail}); have it set up with:\n{how}(doc/store.md, \"Setup \
         and the least privileges\")"
    )]
    NoSchedule {
        /// The store's URL.
        url: String,
        /// What the store said.
        detail: String,
        /// What sets it up, for the store's administrator, in the
        /// engine's words: statements, each line ended.
        how: String,
    },
    /// A call of the line of waiters to a store that keeps none
    /// ([`LeaseStore::has_line`]).
    #[error("this store keeps no line of waiters")]
    NoLine,
    /// This onlyone was built without the engine the URL names.
    #[error(
        "this onlyone was built without the {engine} store (cargo feature `{feature}`), so \
         it cannot use one; build it with the default features"
    )]
    NotBuilt {
        /// The engine.
        engine: &'static str,
        /// The cargo feature that builds it.
        feature: &'static str,
    },
    /// The URL names no store this onlyone knows.
    #[error("the store's URL names no store onlyone knows: use {}", known_urls())]
    UnknownScheme,
    /// A thread or the I/O the store needs could not be started.
    #[error("cannot start {what}: {source}")]
    Runtime {
        /// "the store's I/O", "the renewals".
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

impl StoreError {
    /// The store could not be reached, for now: a call made again on a new
    /// connection may do (what [`super::hold::LeaseHold::retry`] retries).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable { .. }
                | StoreError::TimedOut { .. }
                | StoreError::Dropped { .. }
                | StoreError::NotTarget { .. }
        )
    }

    /// The store refused this client (its credentials, its address, or it
    /// is not to be trusted): a refusal says more than an unreachable host
    /// when several were tried.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            StoreError::Credentials { .. }
                | StoreError::NotAllowed { .. }
                | StoreError::Untrusted { .. }
        )
    }
}

/// ": DETAIL HINT", or nothing when there is no detail.
fn after_colon(detail: &str, hint: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}{hint}")
    }
}

fn duration(d: &std::time::Duration) -> String {
    crate::text::compact_duration(*d)
}

/// What a store needs for a line of waiters (or another part of its
/// setup it lacks: [`LeaseStore::missing_index`]): for a message to a
/// store that has none.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LineSetup {
    /// What it lacks: "table onlyone_waiter", "index onlyone_lease_slots".
    pub what: &'static str,
    /// What makes it, for the store's administrator: statements, each
    /// line ended.
    pub how: String,
}

/// What separates a lock's name from a slot's number in the name of the
/// slot's lease row: slot 2 of `sync` is the row `sync#2`. No lock name
/// has it ([`crate::names`]: letters, digits, `.`, `_` and `-`), so no
/// lock's row is taken for a slot's. Slot 0 is the lock's own row.
pub const SLOT_MARK: char = '#';

/// The name of the lease row of slot `k` of the lock `name`: the lock's
/// own for 0, else `NAME#K`.
pub fn slot_row(name: &str, k: u32) -> String {
    if k == 0 {
        name.to_owned()
    } else {
        format!("{name}{SLOT_MARK}{k}")
    }
}

/// The lock and the slot a lease row's name says: `("sync", 2)` for
/// `sync#2`, `(NAME, 0)` for any name without a slot number.
pub fn lock_of_row(row: &str) -> (&str, u32) {
    match row.rsplit_once(SLOT_MARK) {
        Some((name, k))
            if !name.is_empty()
                && !k.starts_with('0')
                && !k.is_empty()
                && k.bytes().all(|b| b.is_ascii_digit()) =>
        {
            match k.parse() {
                Ok(k) => (name, k),
                Err(_) => (row, 0),
            }
        }
        _ => (row, 0),
    }
}

/// Which slot of how many a take asks for: slot `k` (0..`of`) of a lock
/// of `of` slots. A lock of one slot has one row, its own; a lock of N
/// has N, each a lease with its own fence, and every row says N
/// ([`LeaseRow::slots`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The slot: 0..`of`.
    pub k: u32,
    /// The lock's number of slots.
    pub of: u32,
}

impl Slot {
    /// The one slot of a lock of one.
    pub const ONE: Slot = Slot { k: 0, of: 1 };
}

/// A lease row, as `status` shows it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LeaseRow {
    /// The lock's name (for a slot's row, its lock's: see [`SLOT_MARK`]).
    pub name: String,
    /// The slot this row is: 0 for a lock of one slot.
    pub slot: u32,
    /// The lock's number of slots, as the row's holder took it (1 for a
    /// lock of one, and for a row of a store set up before slots).
    pub slots: u32,
    /// The fence: grows with every acquisition.
    pub epoch: i64,
    /// The holder's token.
    pub token: String,
    /// The holder's host, pid, uid and command.
    pub host: Option<String>,
    /// The holder's pid (on its host).
    pub pid: Option<u32>,
    /// The holder's uid.
    pub uid: Option<u32>,
    /// The holder's command line.
    pub cmd: Option<String>,
    /// When it was taken (Unix seconds).
    pub since: f64,
    /// When the lease runs out (Unix seconds, the server's clock).
    pub until: f64,
    /// Milliseconds of lease left by the server's clock (negative: run out).
    pub left_ms: i64,
    /// A `stop` asked the holder to end its run.
    pub stop_requested: bool,
}

impl LeaseRow {
    /// True while the lease holds.
    pub fn is_live(&self) -> bool {
        self.left_ms > 0
    }

    /// For a live lease taken on this host (`here`, [`crate::procfs::host_name`]):
    /// whether its holder still lives, its pid a process that started no
    /// later than the lease was taken (a later one has only reused the
    /// pid). `None` for another host's lease, or one that ran out.
    pub fn holder_alive_on(&self, here: &str) -> Option<bool> {
        alive_on(
            self.is_live(),
            self.host.as_deref(),
            self.pid,
            self.since,
            here,
        )
    }
}

/// For a live row of host `here`: whether its pid is a process that
/// started no later than `since` (a later one has only reused the pid).
/// `None` for another host's row, or one that is not live.
fn alive_on(
    live: bool,
    host: Option<&str>,
    pid: Option<u32>,
    since: f64,
    here: &str,
) -> Option<bool> {
    if !live || host != Some(here) {
        return None;
    }
    let id = crate::ProcId::of(pid?);
    Some(id.is_some_and(|id| {
        id.is_alive()
            && crate::procfs::start_to_unix(id.start)
                .is_none_or(|started| started as f64 <= since + 1.0)
    }))
}

/// A waiter's row in a lock's line (`run --wait`, `run --queue` with a
/// store), as the store keeps it: its place is its ticket, and it counts
/// while the waiter keeps it fresh (a row past its end is dead).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WaiterRow {
    /// The lock's name.
    pub name: String,
    /// Its place in line: smaller tickets go first.
    pub ticket: i64,
    /// The waiter's token (the one its run will have).
    pub token: String,
    /// The waiter's host.
    pub host: Option<String>,
    /// The waiter's pid (on its host).
    pub pid: Option<u32>,
    /// The waiter's uid.
    pub uid: Option<u32>,
    /// The command it will run.
    pub cmd: Option<String>,
    /// When it began to wait (Unix seconds, the server's clock).
    pub since: f64,
    /// Milliseconds until the row is dead unless refreshed (the server's
    /// clock; negative: dead).
    pub left_ms: i64,
    /// It holds the queue seat (`--queue`).
    pub queued: bool,
}

impl WaiterRow {
    /// True while the waiter keeps its row fresh.
    pub fn is_live(&self) -> bool {
        self.left_ms > 0
    }

    /// For a live row of this host (`here`): whether its waiter still
    /// lives (its pid a process that started no later than it began to
    /// wait). `None` for another host's row, or a dead one.
    pub fn alive_on(&self, here: &str) -> Option<bool> {
        alive_on(
            self.is_live(),
            self.host.as_deref(),
            self.pid,
            self.since,
            here,
        )
    }

    /// "pid 4242 on build-01 (`./sync.sh`)".
    pub fn describe(&self) -> String {
        format!(
            "pid {} on {} (`{}`)",
            self.pid.map_or_else(|| "?".into(), |p| p.to_string()),
            crate::text::for_terminal(self.host.as_deref().unwrap_or("?")),
            crate::text::for_terminal(self.cmd.as_deref().unwrap_or("?")),
        )
    }
}

/// What a try at a lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claimed {
    /// Taken: the new epoch (the fence).
    Taken(i64),
    /// A live lease holds it.
    Held,
    /// The lease is free, but live waiters are ahead in line: it is theirs
    /// first.
    Behind {
        /// How many.
        ahead: u64,
    },
    /// A live holder of the lock took it with another number of slots:
    /// letting both in could admit more holders than either allows.
    SlotsDiffer {
        /// The number that holder took it with.
        held: u32,
    },
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewed {
    /// Still ours; `stop` is set when someone asked the run to end.
    Held {
        /// A remote stop was requested.
        stop: bool,
    },
    /// No longer ours (another epoch, or the lease ran out).
    Lost,
}

/// Who takes a lease.
#[derive(Debug, Clone)]
pub struct Claimant<'a> {
    /// The run's token.
    pub token: &'a str,
    /// This host's name.
    pub host: &'a str,
    /// The wrapper's pid.
    pub pid: u32,
    /// The user.
    pub uid: u32,
    /// The command line.
    pub cmd: &'a str,
}

/// A store of leases: what `run`, `precheck`, `status`, `stop`, `history`,
/// `check` and `metrics` need of one. The PostgreSQL store (`pg`) is one;
/// another engine is a new module that implements this, and a line in
/// [`open`].
///
/// Every call gives up after the store's timeout. A lease's end is decided
/// by the store's clock: `take` succeeds only once the last lease has run
/// out, `renew` only while it has not, each from the store's now.
pub trait LeaseStore: Send + std::fmt::Debug {
    /// The store's URL, without its password.
    fn url(&self) -> &str;
    /// The engine's name, as a run's lock is named in its environment
    /// (`ONLYONE_LOCK=postgres:NAME`).
    fn scheme(&self) -> &'static str;
    /// What this store needs for a line of waiters, for a message to say
    /// when it has none ([`LeaseStore::has_line`]).
    fn line_setup(&self) -> LineSetup;
    /// Another handle on the same store, with a connection of its own (for
    /// a renewing thread).
    fn fresh(&self) -> Result<Box<dyn LeaseStore>, StoreError>;
    /// [`LeaseStore::fresh`], connected now, the connection given up to
    /// `within` (longer than the calls' timeout, which it keeps): for a
    /// holder about to take a lease, so that a slow connection (a busy
    /// host, a TLS handshake far away) is not taken for an unreachable
    /// store while nothing is held yet.
    fn fresh_connected(&self, within: Duration) -> Result<Box<dyn LeaseStore>, StoreError>;
    /// Every later call of this handle (and of the handles
    /// [`LeaseStore::fresh`] makes from it) gives up after `timeout`: for
    /// a handle whose connection a fire's look made, that its take then
    /// uses with the lease's call timeout.
    fn set_timeout(&self, timeout: Duration);
    /// Takes slot `slot` of `name` for `lease` if its last lease has run
    /// out and no live waiter is ahead of `ticket` in the lock's line
    /// (with no ticket, none at all: a newcomer never goes ahead of those
    /// who wait); in a store without a line ([`LeaseStore::has_line`]),
    /// once its last lease has run out. The line is only a further
    /// condition: it never lets a lease be taken that has not run out. A
    /// slot is not taken while a live holder of another of the lock's
    /// slots took it with another number of slots
    /// ([`Claimed::SlotsDiffer`]). On success the waiter's row of `ticket`
    /// is gone, in the same step.
    fn take(
        &self,
        name: &str,
        slot: Slot,
        who: &Claimant<'_>,
        lease: Duration,
        ticket: Option<i64>,
    ) -> Result<Claimed, StoreError>;
    /// Renews the lease of `epoch` for `lease` from the store's now, if it
    /// still holds (`name`: the row's, [`slot_row`]; so for the calls
    /// below that name one lease).
    fn renew(&self, name: &str, epoch: i64, lease: Duration) -> Result<Renewed, StoreError>;
    /// Ends the lease of `epoch` now; false when it no longer held.
    fn release(&self, name: &str, epoch: i64) -> Result<bool, StoreError>;
    /// The lease of `name`, if it was ever taken.
    fn inspect(&self, name: &str) -> Result<Option<LeaseRow>, StoreError>;
    /// The lease of every slot of the lock `name` that was ever taken,
    /// slot 0 first.
    fn inspect_slots(&self, name: &str) -> Result<Vec<LeaseRow>, StoreError>;
    /// Every lease, by name (a lock's slots in order after it).
    fn list(&self) -> Result<Vec<LeaseRow>, StoreError>;
    /// Asks the live holder of `name` to end its run: its epoch, or `None`
    /// when nothing holds it.
    fn request_stop(&self, name: &str) -> Result<Option<i64>, StoreError>;
    /// Appends a journal line to the history of `name`.
    fn append_event(&self, name: &str, line: &str) -> Result<(), StoreError>;
    /// The history of `name`, oldest first.
    fn events(&self, name: &str) -> Result<Vec<String>, StoreError>;
    /// Every lock name with a lease or a history (a slot's row counts for
    /// its lock).
    fn names(&self) -> Result<Vec<String>, StoreError>;

    /// Whether this store keeps a line of waiters (for the PostgreSQL
    /// store: its table `onlyone_waiter` exists and this role may use it).
    /// Without one, waiters are served in no order, `--queue` cannot be
    /// given, and the calls of the line below fail (but
    /// [`LeaseStore::waiters`]: none).
    fn has_line(&self) -> Result<bool, StoreError>;
    /// What this store lacks that only makes it faster, when it lacks it
    /// and this role could not make it (for the PostgreSQL store: the
    /// index of the lease rows' names, without which every take reads the
    /// whole lease table to find a lock's slots), for a note to its
    /// administrator; none when nothing is lacking (connects to find out).
    fn missing_index(&self) -> Result<Option<LineSetup>, StoreError>;
    /// Joins the end of `name`'s line: the waiter's ticket. The row is
    /// dead `ttl` from now unless [`LeaseStore::stay_in_line`] refreshes it.
    fn join_line(&self, name: &str, who: &Claimant<'_>, ttl: Duration) -> Result<i64, StoreError>;
    /// Takes the queue seat of `name` (a row of the line that says so):
    /// its ticket, or `None` while a live waiter has it. A seat whose row
    /// is dead is taken over, and so is the one of the waiter `replacing`
    /// (a token the caller found dead: a waiter of this host whose process
    /// is gone).
    fn take_queue_seat(
        &self,
        name: &str,
        who: &Claimant<'_>,
        ttl: Duration,
        replacing: Option<&str>,
    ) -> Result<Option<i64>, StoreError>;
    /// Keeps the waiter's row of `ticket` for `ttl` more from now (a dead
    /// row that is still there comes back); false when it is gone.
    fn stay_in_line(&self, name: &str, ticket: i64, ttl: Duration) -> Result<bool, StoreError>;
    /// Leaves `name`'s line: the row of `ticket` is removed.
    fn leave_line(&self, name: &str, ticket: i64) -> Result<(), StoreError>;
    /// The waiter that holds the queue seat of `name`, live or dead.
    fn queued(&self, name: &str) -> Result<Option<WaiterRow>, StoreError>;
    /// The live waiters of `name`, first in line first (a bounded number).
    fn waiters(&self, name: &str) -> Result<Vec<WaiterRow>, StoreError>;

    /// What the store keeps of the schedule of `name` ([`KeptSchedule`]),
    /// or `None` when no fire of it recorded a schedule; a store set up
    /// before schedules, or a role that may not use what keeps them, is
    /// [`StoreError::NoSchedule`].
    fn schedule_kept(&self, name: &str) -> Result<Option<KeptSchedule>, StoreError>;
    /// Records what a fire found of the schedule of `name`, in one step,
    /// only if no fire recorded since this one read `version`
    /// ([`KeptSchedule::version`]; 0: none was kept): `events` (journal
    /// lines, in order) appended to its history, and `spec`, when given,
    /// kept as its schedule; the version grows. False, with nothing
    /// written, when another fire recorded first: the fire reads again.
    /// Fires on every host that record through this record each missed
    /// fire once.
    fn record_schedule(
        &self,
        name: &str,
        version: i64,
        spec: Option<&str>,
        events: &[String],
    ) -> Result<bool, StoreError>;
}

/// What a store keeps of a lock's schedule, beside the `schedule` and
/// `missed` events of its history: the schedule its fires last recorded
/// (so that it outlives the history's oldest events), and a version that
/// every record of a fire moves on ([`LeaseStore::record_schedule`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeptSchedule {
    /// The schedule last kept (its canonical spec), if a fire gave one it
    /// could read.
    pub spec: Option<String>,
    /// Grows with every record: a fire's record names the one it read.
    pub version: i64,
}

impl KeptSchedule {
    /// What a store read back: `spec` and `version`.
    pub fn new(spec: Option<String>, version: i64) -> KeptSchedule {
        KeptSchedule { spec, version }
    }
}

/// The history of one name in a store, as an [`EventLog`]: the events
/// `run`, `precheck` and `stop` write with a store.
///
/// [`EventLog`]: crate::journal::EventLog
#[derive(Debug, Clone, Copy)]
pub struct StoreLog<'a> {
    /// The store.
    pub store: &'a dyn LeaseStore,
    /// The lock's name.
    pub name: &'a str,
}

impl crate::journal::EventLog for StoreLog<'_> {
    fn append(&self, ev: &crate::journal::Event) -> std::io::Result<()> {
        let line = String::from_utf8_lossy(&ev.to_line()).into_owned();
        self.store
            .append_event(self.name, &line)
            .map_err(std::io::Error::other)
    }

    fn describe(&self) -> String {
        format!("the store's history of `{}`", self.name)
    }
}

/// An engine a store may be: the URL schemes that name it, what it is
/// called, the URL it takes, the cargo feature that builds it, and how a
/// store of it is opened (none when this onlyone was built without it).
#[derive(Debug, Clone, Copy)]
pub struct Engine {
    /// The URL schemes that name it (`postgres`).
    pub schemes: &'static [&'static str],
    /// Its name (`PostgreSQL`).
    pub name: &'static str,
    /// The URL it takes, as help shows it.
    pub url: &'static str,
    /// The cargo feature that builds it.
    pub feature: &'static str,
    /// What a store of it is, for help: where it keeps the locks, and
    /// where it finds its secrets.
    pub about: &'static str,
    /// The environment variables it reads, and what each is, for a
    /// manual page.
    pub env: &'static [(&'static str, &'static str)],
    /// Opens a store of it; `None` when this onlyone was built without it.
    open: Option<Opener>,
}

/// How an engine opens a store: its URL, every call given up after a
/// timeout.
type Opener = fn(&str, Duration) -> Result<Box<dyn LeaseStore>, StoreError>;

/// Every engine onlyone knows, built or not: one entry an engine.
pub const ENGINES: &[Engine] = &[
    Engine {
        schemes: &["postgres", "postgresql"],
        name: "PostgreSQL",
        url: "postgres://USER@HOST[:PORT]/DATABASE",
        feature: "postgres",
        about: "a PostgreSQL database; its password from PGPASSWORD or ~/.pgpass",
        env: &[(
            "PGPASSWORD, PGPASSFILE",
            "The password of a postgres:// store, as libpq reads them (else ~/.pgpass).",
        )],
        #[cfg(feature = "postgres")]
        open: Some(super::pg::open_store),
        #[cfg(not(feature = "postgres"))]
        open: None,
    },
    Engine {
        schemes: &["etcd", "etcds"],
        name: "etcd",
        url: "etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX]",
        feature: "etcd",
        about: "an etcd v3 cluster, its keys under PREFIX, onlyone/ by default; etcds:// for TLS, \
                ?cacert=PATH&cert=PATH&key=PATH; a user's password from ETCDCTL_PASSWORD or \
                ?password_file=PATH",
        env: &[(
            "ETCDCTL_PASSWORD",
            "The password of the user an etcd:// store names (else ?password_file=PATH).",
        )],
        #[cfg(feature = "etcd")]
        open: Some(super::etcd::open_store),
        #[cfg(not(feature = "etcd"))]
        open: None,
    },
];

/// The URLs of every engine, as an error or help lists them.
pub fn known_urls() -> String {
    let urls: Vec<&str> = ENGINES.iter().map(|e| e.url).collect();
    urls.join(" or ")
}

/// The store a URL names, every call given up after `timeout`: its scheme
/// picks the engine ([`ENGINES`]). Nothing is sent yet.
pub fn open(url: &str, timeout: Duration) -> Result<Box<dyn LeaseStore>, StoreError> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    let engine = ENGINES
        .iter()
        .find(|e| scheme.is_some_and(|s| e.schemes.contains(&s)))
        .ok_or(StoreError::UnknownScheme)?;
    match engine.open {
        Some(open) => open(url, timeout),
        None => Err(StoreError::NotBuilt {
            engine: engine.name,
            feature: engine.feature,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::place::store::timing::{LeaseTiming, LeaseTimingError};

    fn source() -> BoxError {
        Box::new(std::io::Error::other("connection refused"))
    }

    /// Each kind says what the store's errors said when they were only
    /// their sentences: the command prints `Display` alone.
    #[test]
    fn every_kind_says_its_sentence() {
        let url = "postgres://u@db/jobs";
        for (e, said) in connection_kinds(url).into_iter().chain(setup_kinds(url)) {
            assert_eq!(e.to_string(), said, "{e:?}");
        }
        lease_timing_says_its_sentences();
    }

    /// The kinds of a connection that failed, each with its sentence.
    fn connection_kinds(url: &str) -> Vec<(StoreError, &'static str)> {
        let url = url.to_owned();
        vec![
            (
                StoreError::Unreachable {
                    url: url.clone(),
                    detail: "error connecting to server: connection refused".into(),
                    hint: "",
                    source: Some(source()),
                },
                "cannot reach the store `postgres://u@db/jobs`: error connecting to server: \
                 connection refused",
            ),
            (
                StoreError::Unreachable {
                    url: url.clone(),
                    detail: String::new(),
                    hint: "",
                    source: None,
                },
                "cannot reach the store `postgres://u@db/jobs`",
            ),
            (
                StoreError::TimedOut {
                    url: url.clone(),
                    after: Duration::from_secs(5),
                },
                "the store `postgres://u@db/jobs` did not answer within 5s",
            ),
            (
                StoreError::Dropped {
                    url: url.clone(),
                    detail: "terminating connection".into(),
                    source: source(),
                },
                "the store `postgres://u@db/jobs` said: terminating connection",
            ),
            (
                StoreError::NotTarget {
                    url: url.clone(),
                    at: "/run/pg/.s.PGSQL.5432".into(),
                    want: "read-write",
                },
                "the store `postgres://u@db/jobs` at `/run/pg/.s.PGSQL.5432` is not read-write, \
                 as target_session_attrs=read-write asks",
            ),
            (
                StoreError::Credentials {
                    url: url.clone(),
                    detail: "password authentication failed".into(),
                    check: "the user and PGPASSWORD or ~/.pgpass",
                    source: source(),
                },
                "the store `postgres://u@db/jobs` refused the credentials: password \
                 authentication failed; check the user and PGPASSWORD or ~/.pgpass",
            ),
            (
                StoreError::NotAllowed {
                    url: url.clone(),
                    detail: "no pg_hba.conf entry".into(),
                    source: source(),
                },
                "the store `postgres://u@db/jobs` refused the connection: no pg_hba.conf entry; \
                 the server's pg_hba.conf decides which user, database, host and encryption \
                 (sslmode) may connect",
            ),
            (
                StoreError::Untrusted {
                    url: url.clone(),
                    why: "nobody listens there".into(),
                },
                "cannot use the store `postgres://u@db/jobs`: nobody listens there",
            ),
        ]
    }

    /// The kinds of a store that cannot be used as it is set up or built,
    /// each with its sentence.
    fn setup_kinds(url: &str) -> Vec<(StoreError, &'static str)> {
        let url = url.to_owned();
        vec![
            (
                StoreError::NoTables {
                    what: "tables",
                    source: Box::new(StoreError::Server {
                        url: url.clone(),
                        detail: "permission denied for schema public".into(),
                        source: source(),
                    }),
                },
                "the store's tables do not exist and this role cannot create them (the store \
                 `postgres://u@db/jobs` said: permission denied for schema public); have them \
                 created as doc/store.md says (\"Setup and the least privileges\")",
            ),
            (
                StoreError::BadRow {
                    url: url.clone(),
                    what: "lease row",
                    source: source(),
                },
                "the store `postgres://u@db/jobs` has a lease row onlyone cannot read \
                 (connection refused); it was changed outside onlyone: have the store set up \
                 again as doc/store.md says (\"Setup and the least privileges\")",
            ),
            (
                StoreError::NoSlots {
                    url: url.clone(),
                    detail: "must be owner of table onlyone_lease".into(),
                    how: "ALTER TABLE onlyone_lease ADD COLUMN slots integer;\n",
                },
                "the store `postgres://u@db/jobs` keeps one lease per lock: it was set up before \
                 slots and this role cannot change it (must be owner of table onlyone_lease); \
                 have it changed with:\nALTER TABLE onlyone_lease ADD COLUMN slots integer;\n\
                 (doc/store.md, \"Setup and the least privileges\")",
            ),
            (
                StoreError::NoSchedule {
                    url: url.clone(),
                    detail: "relation \"onlyone_schedule\" does not exist".into(),
                    how: "CREATE TABLE onlyone_schedule (...);\n".into(),
                },
                "the store `postgres://u@db/jobs` keeps no schedule: it was set up before \
                 schedules, or this role may not use what keeps them (relation \
                 \"onlyone_schedule\" does not exist); have it set up with:\nCREATE TABLE \
                 onlyone_schedule (...);\n(doc/store.md, \"Setup and the least privileges\")",
            ),
            (
                StoreError::NotBuilt {
                    engine: "PostgreSQL",
                    feature: "postgres",
                },
                "this onlyone was built without the PostgreSQL store (cargo feature `postgres`), \
                 so it cannot use one; build it with the default features",
            ),
            (
                StoreError::UnknownScheme,
                "the store's URL names no store onlyone knows: use \
                 postgres://USER@HOST[:PORT]/DATABASE or \
                 etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX]",
            ),
            (
                StoreError::Runtime {
                    what: "the renewals",
                    source: std::io::Error::other("no threads"),
                },
                "cannot start the renewals: no threads",
            ),
        ]
    }

    /// A lease timing that cannot work says why, and what fits.
    fn lease_timing_says_its_sentences() {
        assert_eq!(
            LeaseTiming::new(Duration::from_millis(400), Duration::ZERO)
                .unwrap_err()
                .to_string(),
            "the lease 400ms is too short: it must be at least 500ms"
        );
        let e = LeaseTiming::new(Duration::from_secs(4), Duration::from_secs(3)).unwrap_err();
        assert!(matches!(e, LeaseTimingError::GraceTooLong { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "the grace 3s does not fit in the lease 4s: a holder must end its command before \
             the lease can run out (renew 666ms + call timeout 400ms + grace + margin 266ms < \
             lease); the largest grace that fits is 2s, or lengthen the lease"
        );
    }

    /// What a lease's holder tries again (a new connection may do), and
    /// what a connection to several hosts prefers to say.
    #[test]
    fn unreachable_and_refusals_are_kinds() {
        let url = || "postgres://u@db/jobs".to_owned();
        let unreachable = [
            StoreError::Unreachable {
                url: url(),
                detail: String::new(),
                hint: "",
                source: None,
            },
            StoreError::TimedOut {
                url: url(),
                after: Duration::from_secs(1),
            },
            StoreError::Dropped {
                url: url(),
                detail: String::new(),
                source: source(),
            },
            StoreError::NotTarget {
                url: url(),
                at: "/s".into(),
                want: "read-only",
            },
        ];
        for e in &unreachable {
            assert!(e.is_unreachable() && !e.is_refusal(), "{e:?}");
        }
        let refusals = [
            StoreError::Credentials {
                url: url(),
                detail: String::new(),
                check: "",
                source: source(),
            },
            StoreError::NotAllowed {
                url: url(),
                detail: String::new(),
                source: source(),
            },
            StoreError::Untrusted {
                url: url(),
                why: String::new(),
            },
        ];
        for e in &refusals {
            assert!(e.is_refusal() && !e.is_unreachable(), "{e:?}");
        }
        let server = StoreError::Server {
            url: url(),
            detail: String::new(),
            source: source(),
        };
        assert!(!server.is_unreachable() && !server.is_refusal());
        assert!(!StoreError::UnknownScheme.is_unreachable());
    }

    /// A slot's row is named after its lock, and read back as its lock's;
    /// no lock name is taken for a slot's, and a name that only looks like
    /// one keeps its slot 0.
    #[test]
    fn a_slots_row_is_its_locks() {
        assert_eq!(slot_row("sync", 0), "sync");
        assert_eq!(slot_row("sync", 2), "sync#2");
        for k in [0, 1, 7, 999] {
            assert_eq!(lock_of_row(&slot_row("a.b-c_d", k)), ("a.b-c_d", k));
        }
        for odd in [
            "sync#",
            "sync#0",
            "sync#01",
            "sync#x",
            "#3",
            "sync#99999999999",
        ] {
            assert_eq!(lock_of_row(odd), (odd, 0), "{odd}");
        }
        assert_eq!(lock_of_row("a#b#3"), ("a#b", 3));
    }

    /// The scheme picks the engine; a URL of none is refused as before,
    /// without a look at the rest of it.
    #[test]
    fn open_goes_by_the_scheme() {
        for url in ["mysql://u@db/jobs", "POSTGRES://u@db/jobs", "db/jobs", ""] {
            let e = open(url, Duration::from_secs(1)).unwrap_err();
            assert!(
                matches!(e, StoreError::UnknownScheme | StoreError::NotBuilt { .. }),
                "{url}: {e:?}"
            );
        }
        #[cfg(feature = "postgres")]
        for url in ["postgres://u@db/jobs", "postgresql://u@db/jobs"] {
            let store = open(url, Duration::from_secs(1)).unwrap();
            assert_eq!(store.scheme(), "postgres", "{url}");
            assert_eq!(store.line_setup().what, "table onlyone_waiter");
        }
        #[cfg(feature = "etcd")]
        for url in ["etcd://h:2379", "etcds://h:2379,h2:2379/jobs"] {
            let store = open(url, Duration::from_secs(1)).unwrap();
            assert_eq!(store.scheme(), "etcd", "{url}");
            assert_eq!(store.url(), url);
        }
    }
}
