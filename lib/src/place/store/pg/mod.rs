//! The PostgreSQL store: locks for jobs that run on several hosts.
//!
//! A lock is a row of `onlyone_lease`, leased by the server's clock:
//!
//! - **Take**: one autocommit statement, `INSERT ... ON CONFLICT (name) DO
//!   UPDATE ... WHERE lock_until <= clock_timestamp() RETURNING epoch`. The
//!   epoch grows with every acquisition: it is the run's fence.
//! - **Renew**: `UPDATE ... SET lock_until = clock_timestamp() + L WHERE
//!   name = $1 AND epoch = $2 AND lock_until > clock_timestamp()`. No row:
//!   the lease is lost.
//! - **Release**: the same, setting `lock_until = clock_timestamp()`: the
//!   next holder gets it at once.
//!
//! - **The line**: a waiter (`run --wait`, `run --queue`) keeps a row of
//!   `onlyone_waiter`, its ticket its place, its `until` moved on at every
//!   look (a row past it is dead); the take above succeeds only when no
//!   live waiter has a smaller ticket (a newcomer has none: it is behind
//!   them all), and removes the taker's row in the same statement. At most
//!   one row per lock is `queued` (a partial unique index): the queue
//!   seat. A store set up before this table existed works without it
//!   ([`LeaseStore::has_line`]).
//!
//! - **Schedules**: a lock's row of `onlyone_schedule` keeps the schedule
//!   its fires last recorded and a version. A fire reads the version, then
//!   the history; what it found (the `schedule` and `missed` events) goes
//!   in one statement that moves the version on only if it is still the
//!   one read (`INSERT ... ON CONFLICT (name) DO UPDATE ... WHERE version =
//!   $read`) and appends the events only then: of fires on any hosts, one
//!   records the fires missed and the others, reading again, find them.
//!
//! The row outlives a server restart and needs no session, so it works
//! through PgBouncer. Every call has a client-side timeout (the statement
//! timeout T of the lease inequality, see [`crate::place::store::timing`]); a connection that
//! fails or times out is dropped and made again on the next call. Events
//! (the journal of a lock) go to `onlyone_event`, so every host sees every
//! host's runs.
//!
//! Every role that can use the tables can change any row, so what is read
//! back is checked like a file another account can write: every column
//! through a fallible getter, texts cut in SQL before they cross the wire,
//! at most [`MAX_EVENTS`] events and [`MAX_NAMES`](sql::MAX_NAMES) locks,
//! NULLs and numbers out of range read as unknown. A row never makes a
//! reader panic or grow.

mod conninfo;
mod socket;
mod sql;

use std::cell::RefCell;
use std::time::Duration;

use tokio_postgres::config::{Host, LoadBalanceHosts, SslMode, TargetSessionAttrs};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config, NoTls};

pub use conninfo::ConnInfo;

use super::{Claimant, Claimed, LeaseRow, LeaseStore, Renewed, Slot, StoreError, WaiterRow};
use sql::{Binds, read_row, read_waiter};

use sql::MAX_EVENTS;

/// A connection to the store (made when first needed, made again after a
/// failure), and the timeout of every call.
pub struct PgStore {
    info: ConnInfo,
    rt: tokio::runtime::Runtime,
    client: RefCell<Option<Client>>,
    timeout: std::cell::Cell<Duration>,
    schema_checked: RefCell<bool>,
    /// The line's table exists and this role may use it (known once the
    /// schema was checked).
    line: std::cell::Cell<bool>,
    /// The lease table has the column of slots (known once the schema was
    /// checked; added by the first take of a lock of several).
    slots: std::cell::Cell<bool>,
    /// The lease table lacks the index of its names, and this role could
    /// not create it (known once the schema was checked): every take
    /// reads the whole table to find a lock's slot rows.
    unindexed: std::cell::Cell<bool>,
    /// The index was tried once by this process ([`PgStore::index_lease_names`]).
    index_tried: std::cell::Cell<bool>,
}

/// What [`sql::LOOK_TABLES`] found.
struct Tables {
    /// The lease and event tables exist.
    present: bool,
    /// The line's table exists.
    line: bool,
    /// The lease table has the column of slots.
    slots: bool,
    /// The lease table has the index of its names.
    indexed: bool,
    /// This role may create that index.
    may_index: bool,
    /// The schedules' table exists.
    schedule: bool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.info.display)
            .finish()
    }
}

/// What the client's error `e` means, as a kind: a refusal, a server
/// going away or out of reach, or what the server said.
fn classify(e: tokio_postgres::Error, url: &str) -> StoreError {
    let code = e.code().cloned();
    let text = match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => {
            use std::error::Error;
            match e.source() {
                Some(s) => format!("{e}: {s}"),
                None => e.to_string(),
            }
        }
    };
    let (url, detail, source) = (url.to_owned(), text, Box::new(e));
    if code == Some(SqlState::INVALID_PASSWORD) {
        return StoreError::Credentials {
            url,
            detail,
            check: "the user and PGPASSWORD or ~/.pgpass",
            source,
        };
    }
    if code == Some(SqlState::INVALID_AUTHORIZATION_SPECIFICATION) {
        return StoreError::NotAllowed {
            url,
            detail,
            source,
        };
    }
    // A server shutting down or starting up ends or refuses the session:
    // it is unreachable for now, and a new connection may do.
    let going = [
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
    ];
    if code.as_ref().is_some_and(|c| going.contains(c)) {
        return StoreError::Unreachable {
            url,
            detail,
            hint: "",
            source: Some(source),
        };
    }
    if source.as_db_error().is_none() {
        let hint = if detail.contains("invalid peer certificate") {
            "; the server's certificate is not signed by a CA this host trusts (or not for this \
             host name): give its CA with sslrootcert=PATH in the URL"
        } else if detail.contains("does not support TLS") {
            "; no password was sent: turn TLS on at the server (ssl=on) and give its CA with \
             sslrootcert=PATH, or put sslmode=disable in the URL to connect without TLS \
             knowingly"
        } else {
            ""
        };
        return StoreError::Unreachable {
            url,
            detail,
            hint,
            source: Some(source),
        };
    }
    StoreError::Server {
        url,
        detail,
        source,
    }
}

/// A PostgreSQL store at `url` ([`super::ENGINES`]'s opener).
pub(crate) fn open_store(url: &str, timeout: Duration) -> Result<Box<dyn LeaseStore>, StoreError> {
    Ok(Box::new(PgStore::new(url, timeout)?))
}

impl PgStore {
    /// A store at `url`; every call (connecting included) gives up after
    /// `timeout`. Nothing is sent yet.
    pub fn new(url: &str, timeout: Duration) -> Result<PgStore, StoreError> {
        let mut info = ConnInfo::parse(url).map_err(StoreError::BadUrl)?;
        info.config.connect_timeout(timeout);
        info.config.keepalives(true);
        info.config.keepalives_idle(Duration::from_secs(10));
        let rt = runtime()?;
        Ok(PgStore {
            info,
            rt,
            client: RefCell::new(None),
            timeout: std::cell::Cell::new(timeout),
            schema_checked: RefCell::new(false),
            line: std::cell::Cell::new(false),
            slots: std::cell::Cell::new(false),
            unindexed: std::cell::Cell::new(false),
            index_tried: std::cell::Cell::new(false),
        })
    }

    /// A store like this one, with a connection of its own (for another
    /// thread).
    fn fresh_store(&self) -> Result<PgStore, StoreError> {
        let rt = runtime()?;
        Ok(PgStore {
            info: self.info.clone(),
            rt,
            client: RefCell::new(None),
            timeout: self.timeout.clone(),
            schema_checked: RefCell::new(*self.schema_checked.borrow()),
            line: self.line.clone(),
            slots: self.slots.clone(),
            unindexed: self.unindexed.clone(),
            index_tried: self.index_tried.clone(),
        })
    }

    /// Drops the connection: the next call makes a new one.
    fn disconnect(&self) {
        *self.client.borrow_mut() = None;
    }

    fn connect(&self) -> Result<(), StoreError> {
        if self.client.borrow().is_some() {
            return Ok(());
        }
        let url = self.info.display.clone();
        let tls = self.info.rustls().map_err(StoreError::BadUrl)?;
        let mut config = self.info.config.clone();
        let timeout = self.timeout.get();
        config.connect_timeout(timeout);
        let require = self.info.require_peer.clone();
        let client = self.rt.block_on(async move {
            tokio::time::timeout(timeout, open(&config, tls, require.as_deref(), &url))
                .await
                .map_err(|_| timed_out(&url, timeout))?
        })?;
        *self.client.borrow_mut() = Some(client);
        if !*self.schema_checked.borrow() {
            self.ensure_schema()?;
            *self.schema_checked.borrow_mut() = true;
        }
        Ok(())
    }

    /// Runs `q` with the connection, within the timeout; a failure drops
    /// the connection.
    fn with<T>(
        &self,
        q: impl for<'c> FnOnce(
            &'c Client,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<T, tokio_postgres::Error>> + 'c>,
        >,
    ) -> Result<T, StoreError> {
        self.connect()?;
        let guard = self.client.borrow();
        let client = guard.as_ref().ok_or_else(|| StoreError::Unreachable {
            url: self.info.display.clone(),
            detail: String::new(),
            hint: "",
            source: None,
        })?;
        let url = &self.info.display;
        let timeout = self.timeout.get();
        let result = self.rt.block_on(async {
            match tokio::time::timeout(timeout, q(client)).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(classify(e, url)),
                Err(_) => Err(timed_out(url, timeout)),
            }
        });
        let closed = client.is_closed();
        drop(guard);
        match result {
            Err(e) if e.is_unreachable() => {
                self.disconnect();
                Err(e)
            }
            // Whatever the error said, a connection the server closed is
            // one to make again.
            Err(StoreError::Server {
                url,
                detail,
                source,
            }) if closed => {
                self.disconnect();
                Err(StoreError::Dropped {
                    url,
                    detail,
                    source,
                })
            }
            r => r,
        }
    }

    /// Creates the tables when they are missing and the role may. A store
    /// set up before the line of waiters existed, whose role may not
    /// create its table, still works: without the line
    /// ([`LeaseStore::has_line`] is false).
    fn ensure_schema(&self) -> Result<(), StoreError> {
        let look = || {
            self.with(|c| {
                Box::pin(async move {
                    let row = c.query_typed_one(sql::LOOK_TABLES, &[]).await?;
                    Ok(Tables {
                        present: row.try_get(0)?,
                        line: row.try_get(1)?,
                        slots: row.try_get(2)?,
                        indexed: row.try_get(3)?,
                        may_index: row.try_get(4)?,
                        schedule: row.try_get(5)?,
                    })
                })
            })
        };
        let Tables {
            present,
            line,
            slots,
            indexed,
            may_index,
            schedule,
        } = look()?;
        self.slots.set(slots || !present);
        // A lease table set up before the index of its names gets it on
        // the way, when this role may make it.
        let made = may_index && !indexed && present && self.index_lease_names();
        self.unindexed.set(present && !indexed && !made);
        if !present {
            match self.with(|c| Box::pin(async move { c.batch_execute(sql::SCHEMA_SQL).await })) {
                Ok(()) => {}
                // Another process that made them at the same moment wins
                // the race of the catalogue's unique names: then they are
                // there.
                Err(e @ StoreError::Server { .. }) => {
                    if !look()?.present {
                        return Err(StoreError::NoTables {
                            what: "tables",
                            source: Box::new(e),
                        });
                    }
                }
                Err(e) => return Err(e),
            }
        } else {
            // An older setup: the line's and the schedules' tables are
            // made when the role may (else a call that needs one says so).
            let missing = [(!line, sql::WAITER_SQL), (!schedule, sql::SCHEDULE_SQL)];
            for (_, make) in missing.into_iter().filter(|(m, _)| *m) {
                match self.with(|c| Box::pin(async move { c.batch_execute(make).await })) {
                    Ok(()) | Err(StoreError::Server { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let usable = self.with(|c| {
            Box::pin(async move {
                let row = c.query_typed_one(sql::LINE_USABLE, &[]).await?;
                row.try_get::<_, bool>(0)
            })
        })?;
        self.line.set(usable);
        Ok(())
    }

    /// Creates the index of the lease rows' names in a table set up
    /// before it, for a role that may (a connection does it on the way,
    /// once per process): whether it is there now. Nothing depends on it
    /// but speed, so a failure (the table locked, another process making
    /// it at the same moment) is no error; the index is looked for again.
    fn index_lease_names(&self) -> bool {
        if self.index_tried.replace(true) {
            return false;
        }
        if self
            .with(|c| Box::pin(async move { c.batch_execute(sql::SLOTS_INDEX_NOW).await }))
            .is_ok()
        {
            return true;
        }
        self.with(|c| {
            Box::pin(async move {
                let row = c.query_typed_one(sql::LOOK_TABLES, &[]).await?;
                row.try_get::<_, bool>(3)
            })
        })
        .unwrap_or(false)
    }

    /// Adds the column of slots to a lease table set up before slots, for
    /// the first take of a lock of several; refused with what adds it
    /// when this role may not.
    fn ensure_slots(&self) -> Result<(), StoreError> {
        if self.slots.get() {
            return Ok(());
        }
        match self.with(|c| Box::pin(async move { c.batch_execute(sql::ADD_SLOTS).await })) {
            Ok(()) => {
                self.slots.set(true);
                Ok(())
            }
            Err(StoreError::Server { detail, .. }) => Err(StoreError::NoSlots {
                url: self.info.display.clone(),
                detail,
                how: sql::ADD_SLOTS_HOW,
            }),
            Err(e) => Err(e),
        }
    }

    /// Whether the lease table has the column of slots, once connected
    /// (the schema checked).
    fn slots_known(&self) -> Result<bool, StoreError> {
        self.connect()?;
        Ok(self.slots.get())
    }

    /// A take of a slot in a lease table with the column of slots (see
    /// [`LeaseStore::take`]): refused while a live holder of the lock took
    /// it with another number of slots.
    fn take_slot(
        &self,
        name: &str,
        slot: Slot,
        binds: Binds,
        ticket: Option<i64>,
    ) -> Result<Claimed, StoreError> {
        let lock = name.to_owned();
        // A lock of one writes no number (NULL: one), as before slots.
        let n: Option<i32> = (slot.of > 1).then(|| i32::try_from(slot.of).unwrap_or(i32::MAX));
        let line = self.line.get();
        self.with(move |c| {
            Box::pin(async move {
                if !line {
                    let row = c
                        .query_typed_one(
                            sql::TAKE_SLOT,
                            &binds.params(&[(&lock, Type::TEXT), (&n, Type::INT4)]),
                        )
                        .await?;
                    let epoch = row.try_get::<_, Option<i64>>(0)?;
                    let differ = row.try_get::<_, Option<i32>>(1)?;
                    return Ok(claimed(epoch, 0, true, differ));
                }
                let row = c
                    .query_typed_one(
                        sql::TAKE_SLOT_IN_LINE,
                        &binds.params(&[
                            (&ticket, Type::INT8),
                            (&lock, Type::TEXT),
                            (&n, Type::INT4),
                        ]),
                    )
                    .await?;
                let epoch = row.try_get::<_, Option<i64>>(0)?;
                let ahead = row.try_get::<_, Option<i64>>(1)?.unwrap_or(0);
                let held = row.try_get::<_, Option<bool>>(2)?.unwrap_or(false);
                let differ = row.try_get::<_, Option<i32>>(3)?;
                Ok(claimed(epoch, ahead, held, differ))
            })
        })
    }

    /// A call's error on the schedules' table: one that is not there, or
    /// that this role may not use, is [`StoreError::NoSchedule`], with
    /// what sets it up.
    fn schedule_error(&self, e: StoreError) -> StoreError {
        let StoreError::Server { detail, source, .. } = &e else {
            return e;
        };
        let code = source
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::code);
        if code != Some(&SqlState::UNDEFINED_TABLE)
            && code != Some(&SqlState::INSUFFICIENT_PRIVILEGE)
        {
            return e;
        }
        StoreError::NoSchedule {
            url: self.info.display.clone(),
            detail: detail.clone(),
            how: sql::schedule_setup(),
        }
    }

    fn waiter_row(&self, r: &tokio_postgres::Row) -> Result<WaiterRow, StoreError> {
        read_waiter(r).map_err(|e| StoreError::BadRow {
            url: self.info.display.clone(),
            what: "waiter's row",
            source: Box::new(e),
        })
    }

    /// A lease row read back, every value checked: a NULL, a number out
    /// of range, a time that is not one become "unknown" (a lease whose end
    /// is unknown does not hold, as `acquire` takes it), never a panic.
    fn row(&self, r: &tokio_postgres::Row) -> Result<LeaseRow, StoreError> {
        read_row(r).map_err(|e| StoreError::BadRow {
            url: self.info.display.clone(),
            what: "lease row",
            source: Box::new(e),
        })
    }
}

/// What a take's statement came back with: the new epoch, how many
/// waiters are ahead, whether the slot's lease holds, and the number of
/// slots a live holder of the lock took it with when it differs.
fn claimed(epoch: Option<i64>, ahead: i64, held: bool, differ: Option<i32>) -> Claimed {
    match (epoch, differ) {
        (Some(e), _) => Claimed::Taken(e),
        (None, Some(n)) => Claimed::SlotsDiffer {
            held: u32::try_from(n).unwrap_or(1).max(1),
        },
        (None, None) if !held && ahead > 0 => Claimed::Behind {
            ahead: ahead as u64,
        },
        (None, None) => Claimed::Held,
    }
}

/// Connects to the first of `config`'s hosts that answers, in their order
/// (shuffled with `load_balance_hosts=random`), as tokio-postgres does;
/// but a Unix socket is connected here, and its server checked before
/// anything is sent to it (`socket.rs`, with `require`: `requirepeer`).
/// When none answers, a refusal is the error given: it says more than an
/// unreachable host.
async fn open(
    config: &Config,
    tls: Option<rustls::ClientConfig>,
    require: Option<&str>,
    url: &str,
) -> Result<Client, StoreError> {
    let hosts = config.get_hosts();
    // A host with an address (`hostaddr`) is reached by TCP, whatever it
    // names.
    let unix = |i: usize| {
        matches!(hosts.get(i), Some(Host::Unix(_))) && config.get_hostaddrs().get(i).is_none()
    };
    if !(0..hosts.len()).any(unix) {
        return open_tcp(config, tls, url).await;
    }
    let mut order: Vec<usize> = (0..hosts.len()).collect();
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        shuffle(&mut order);
    }
    let (mut refused, mut last) = (None, None);
    for i in order {
        let made = match &hosts[i] {
            Host::Unix(dir) if unix(i) => {
                let ports = config.get_ports();
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                open_unix(config, &socket::socket_path(dir, port), require, url).await
            }
            _ => open_tcp(&one_host(config, i), tls.clone(), url).await,
        };
        match made {
            Ok(client) => return Ok(client),
            Err(e) if e.is_refusal() => {
                refused.get_or_insert(e);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(refused.or(last).unwrap_or_else(|| StoreError::Unreachable {
        url: url.to_owned(),
        detail: "it names no host".to_owned(),
        hint: "",
        source: None,
    }))
}

/// Connects through tokio-postgres, which finds the hosts itself.
async fn open_tcp(
    config: &Config,
    tls: Option<rustls::ClientConfig>,
    url: &str,
) -> Result<Client, StoreError> {
    let client = match tls {
        None => {
            let (client, conn) = config.connect(NoTls).await.map_err(|e| classify(e, url))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            client
        }
        Some(tls) => {
            let connector = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
            let (client, conn) = config
                .connect(connector)
                .await
                .map_err(|e| classify(e, url))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            client
        }
    };
    Ok(client)
}

/// Connects to the Unix socket `path`, its server checked first
/// (`socket.rs`), then hands the connection to tokio-postgres (no TLS on
/// a socket, as libpq) and checks `target_session_attrs` as it would.
async fn open_unix(
    config: &Config,
    path: &std::path::Path,
    require: Option<&str>,
    url: &str,
) -> Result<Client, StoreError> {
    let stream = socket::connect(path, require).await.map_err(|e| match e {
        Ok(why) => StoreError::Untrusted {
            url: url.to_owned(),
            why,
        },
        Err(e) => StoreError::Unreachable {
            url: url.to_owned(),
            detail: format!("`{}`: {e}", path.display()),
            hint: "",
            source: Some(Box::new(e)),
        },
    })?;
    let mut config = config.clone();
    config.ssl_mode(SslMode::Disable);
    let (client, conn) = config
        .connect_raw(stream, NoTls)
        .await
        .map_err(|e| classify(e, url))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let want = config.get_target_session_attrs();
    if want != TargetSessionAttrs::Any {
        let rows = client
            .simple_query("SHOW transaction_read_only")
            .await
            .map_err(|e| classify(e, url))?;
        let read_only = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(|v| v == "on"),
            _ => None,
        });
        let (fits, what) = match want {
            TargetSessionAttrs::ReadWrite => (read_only != Some(true), "read-write"),
            TargetSessionAttrs::ReadOnly => (read_only != Some(false), "read-only"),
            _ => (true, ""),
        };
        if !fits {
            return Err(StoreError::NotTarget {
                url: url.to_owned(),
                at: path.to_owned(),
                want: what,
            });
        }
    }
    Ok(client)
}

/// `config` with its `i`th host alone (and that host's port and address),
/// every other setting kept.
fn one_host(config: &Config, i: usize) -> Config {
    let mut c = Config::new();
    if let Some(v) = config.get_user() {
        c.user(v);
    }
    if let Some(v) = config.get_password() {
        c.password(v);
    }
    if let Some(v) = config.get_dbname() {
        c.dbname(v);
    }
    if let Some(v) = config.get_options() {
        c.options(v);
    }
    if let Some(v) = config.get_application_name() {
        c.application_name(v);
    }
    match &config.get_hosts()[i] {
        Host::Tcp(h) => c.host(h),
        Host::Unix(p) => c.host_path(p),
    };
    if let Some(&a) = config.get_hostaddrs().get(i) {
        c.hostaddr(a);
    }
    let ports = config.get_ports();
    if let Some(&p) = ports.get(i).or(ports.first()) {
        c.port(p);
    }
    if let Some(&t) = config.get_connect_timeout() {
        c.connect_timeout(t);
    }
    if let Some(&t) = config.get_tcp_user_timeout() {
        c.tcp_user_timeout(t);
    }
    if let Some(t) = config.get_keepalives_interval() {
        c.keepalives_interval(t);
    }
    if let Some(n) = config.get_keepalives_retries() {
        c.keepalives_retries(n);
    }
    c.ssl_mode(config.get_ssl_mode())
        .ssl_negotiation(config.get_ssl_negotiation())
        .keepalives(config.get_keepalives())
        .keepalives_idle(config.get_keepalives_idle())
        .target_session_attrs(config.get_target_session_attrs())
        .channel_binding(config.get_channel_binding())
        .load_balance_hosts(config.get_load_balance_hosts());
    c
}

/// Shuffles `v` (Fisher-Yates, from the kernel's random numbers).
fn shuffle(v: &mut [usize]) {
    for i in (1..v.len()).rev() {
        let mut b = [0u8; 8];
        let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
        let j = (u64::from_ne_bytes(b) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// The runtime of one connection: this thread's, plus the blocking threads
/// it starts for name lookups, which block the supervisor's signals (see
/// [`super::supervised_signals`]) as they start.
fn runtime() -> Result<tokio::runtime::Runtime, StoreError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .on_thread_start(super::block_in_this_thread)
        .build()
        .map_err(|source| StoreError::Runtime {
            what: "the store's I/O",
            source,
        })
}

fn timed_out(url: &str, t: Duration) -> StoreError {
    StoreError::TimedOut {
        url: url.to_owned(),
        after: t,
    }
}

impl LeaseStore for PgStore {
    fn url(&self) -> &str {
        &self.info.display
    }

    fn scheme(&self) -> &'static str {
        "postgres"
    }

    fn line_setup(&self) -> super::LineSetup {
        sql::line_setup()
    }

    fn fresh(&self) -> Result<Box<dyn LeaseStore>, StoreError> {
        Ok(Box::new(self.fresh_store()?))
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }

    /// [`LeaseStore::fresh`], connected now: the connection (and the schema's
    /// check) may take up to `within`, longer than the calls' timeout,
    /// which its calls keep. For a holder about to take a lease: nothing
    /// is held while it connects, and its acquire is then one call.
    fn fresh_connected(&self, within: Duration) -> Result<Box<dyn LeaseStore>, StoreError> {
        let s = self.fresh_store()?;
        s.timeout.set(within.max(self.timeout.get()));
        let made = s.connect();
        s.timeout.set(self.timeout.get());
        made.map(|()| Box::new(s) as Box<dyn LeaseStore>)
    }

    /// Takes the lock `name` for `lease`, if its lease has run out (or it
    /// never existed) and no live waiter is ahead of `ticket` in line (with
    /// no ticket: no live waiter at all). The line only adds a condition
    /// to the lease's: the `ON CONFLICT ... WHERE` the lease has run out
    /// decides, on the latest row, as without a line. The waiter's row of
    /// `ticket` goes in the same statement as the take.
    fn take(
        &self,
        name: &str,
        slot: Slot,
        who: &Claimant<'_>,
        lease: Duration,
        ticket: Option<i64>,
    ) -> Result<Claimed, StoreError> {
        let binds = Binds::new(&super::slot_row(name, slot.k), who, lease);
        self.connect()?;
        if slot.of > 1 {
            self.ensure_slots()?;
        }
        if self.slots.get() {
            return self.take_slot(name, slot, binds, ticket);
        }
        if !self.line.get() {
            return self.with(move |c| {
                Box::pin(async move {
                    let row = c.query_typed_opt(sql::TAKE, &binds.params(&[])).await?;
                    Ok(match row {
                        Some(r) => Claimed::Taken(r.try_get::<_, i64>(0)?),
                        None => Claimed::Held,
                    })
                })
            });
        }
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_one(sql::TAKE_IN_LINE, &binds.params(&[(&ticket, Type::INT8)]))
                    .await?;
                let epoch = row.try_get::<_, Option<i64>>(0)?;
                let ahead = row.try_get::<_, Option<i64>>(1)?.unwrap_or(0);
                let held = row.try_get::<_, Option<bool>>(2)?.unwrap_or(false);
                Ok(claimed(epoch, ahead, held, None))
            })
        })
    }

    /// Renews the lease of epoch `epoch` for `lease` more, from now by the
    /// server's clock, if it still holds.
    fn renew(&self, name: &str, epoch: i64, lease: Duration) -> Result<Renewed, StoreError> {
        let ms = lease.as_millis() as f64;
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(
                        sql::RENEW,
                        &[
                            (&name, Type::TEXT),
                            (&epoch, Type::INT8),
                            (&ms, Type::FLOAT8),
                        ],
                    )
                    .await?;
                Ok(match row {
                    Some(r) => Renewed::Held {
                        stop: r.try_get(0)?,
                    },
                    None => Renewed::Lost,
                })
            })
        })
    }

    /// Ends the lease of epoch `epoch` now: the next holder gets it at once.
    fn release(&self, name: &str, epoch: i64) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(sql::RELEASE, &[(&name, Type::TEXT), (&epoch, Type::INT8)])
                    .await?;
                Ok(row.is_some())
            })
        })
    }

    /// The lease row of `name`, if the lock was ever taken.
    fn inspect(&self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let name = name.to_owned();
        let slots = self.slots_known()?;
        let row = self.with(move |c| {
            Box::pin(async move {
                c.query_typed_opt(&sql::lease(slots), &[(&name, Type::TEXT)])
                    .await
            })
        })?;
        row.map(|r| self.row(&r)).transpose()
    }

    /// The lease rows of every slot of `name`, slot 0 first.
    fn inspect_slots(&self, name: &str) -> Result<Vec<LeaseRow>, StoreError> {
        let name = name.to_owned();
        let slots = self.slots_known()?;
        let rows = self.with(move |c| {
            Box::pin(async move {
                c.query_typed(&sql::lease_slots(slots), &[(&name, Type::TEXT)])
                    .await
            })
        })?;
        let mut rows = rows
            .iter()
            .map(|r| self.row(r))
            .collect::<Result<Vec<_>, _>>()?;
        rows.sort_by_key(|r| r.slot);
        Ok(rows)
    }

    /// Every lease row, by name (at most [`MAX_NAMES`](sql::MAX_NAMES)).
    fn list(&self) -> Result<Vec<LeaseRow>, StoreError> {
        let slots = self.slots_known()?;
        let rows =
            self.with(|c| Box::pin(async move { c.query_typed(&sql::leases(slots), &[]).await }))?;
        rows.iter().map(|r| self.row(r)).collect()
    }

    /// Asks the live holder of `name` to end its run: its epoch, or `None`
    /// when nothing holds it.
    fn request_stop(&self, name: &str) -> Result<Option<i64>, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(sql::REQUEST_STOP, &[(&name, Type::TEXT)])
                    .await?;
                row.map(|r| r.try_get::<_, i64>(0)).transpose()
            })
        })
    }

    /// Appends an event (a journal line) to `name`'s history; the oldest
    /// go past [`MAX_EVENTS`].
    fn append_event(&self, name: &str, line: &str) -> Result<(), StoreError> {
        let (name, line) = (name.to_owned(), line.trim_end().to_owned());
        self.with(move |c| {
            Box::pin(async move {
                let id: i64 = c
                    .query_typed_one(
                        sql::APPEND_EVENT,
                        &[(&name, Type::TEXT), (&line, Type::TEXT)],
                    )
                    .await?
                    .try_get(0)?;
                // Trimmed now and then, not on every event.
                if id % 512 == 0 {
                    c.query_typed(
                        sql::TRIM_EVENTS,
                        &[(&name, Type::TEXT), (&MAX_EVENTS, Type::INT8)],
                    )
                    .await?;
                }
                Ok(())
            })
        })
    }

    /// Every event of `name`, oldest first (the order they were appended).
    fn events(&self, name: &str) -> Result<Vec<String>, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                // The newest MAX_EVENTS, none longer than a journal line
                // (a longer one is not one of ours).
                let rows = c
                    .query_typed(
                        sql::EVENTS,
                        &[
                            (&name, Type::TEXT),
                            (&(crate::journal::MAX_LINE as i32), Type::INT4),
                            (&MAX_EVENTS, Type::INT8),
                        ],
                    )
                    .await?;
                let mut lines = Vec::with_capacity(rows.len());
                for r in rows.iter().rev() {
                    lines.extend(r.try_get::<_, Option<String>>(0)?);
                }
                Ok(lines)
            })
        })
    }

    /// Every lock name the store has events or a lease for.
    fn names(&self) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            Box::pin(async move {
                let rows = c.query_typed(&sql::names(), &[]).await?;
                let mut names = Vec::with_capacity(rows.len());
                for r in &rows {
                    names.extend(r.try_get::<_, Option<String>>(0)?);
                }
                Ok(names
                    .into_iter()
                    .filter(|n| crate::names::check_name(n).is_ok())
                    .collect())
            })
        })
    }

    /// Whether the line of waiters can be used: its table exists and this
    /// role may use it (connects to find out).
    fn has_line(&self) -> Result<bool, StoreError> {
        self.connect()?;
        Ok(self.line.get())
    }

    /// The index of the lease rows' names, when the table lacks it and
    /// this role could not create it (see [`sql::LOOK_TABLES`]).
    fn missing_index(&self) -> Result<Option<super::LineSetup>, StoreError> {
        self.connect()?;
        Ok(self.unindexed.get().then(sql::index_setup))
    }

    /// Joins the end of `name`'s line (see [`LeaseStore::join_line`]); rows
    /// dead for long are cleared on the way.
    fn join_line(&self, name: &str, who: &Claimant<'_>, ttl: Duration) -> Result<i64, StoreError> {
        let binds = Binds::new(name, who, ttl);
        self.with(move |c| {
            Box::pin(async move {
                c.query_typed(sql::CLEAR_DEAD_WAITERS, &[(&binds.name, Type::TEXT)])
                    .await?;
                let row = c
                    .query_typed_one(sql::JOIN_LINE, &binds.params(&[]))
                    .await?;
                row.try_get::<_, i64>(0)
            })
        })
    }

    /// Takes the queue seat of `name` (see
    /// [`LeaseStore::take_queue_seat`]): one `INSERT ... ON CONFLICT` on
    /// the partial unique index of queued rows, which takes over only a
    /// dead row (or the one of `replacing`).
    fn take_queue_seat(
        &self,
        name: &str,
        who: &Claimant<'_>,
        ttl: Duration,
        replacing: Option<&str>,
    ) -> Result<Option<i64>, StoreError> {
        let binds = Binds::new(name, who, ttl);
        let replacing = replacing.map(str::to_owned);
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(
                        sql::TAKE_QUEUE_SEAT,
                        &binds.params(&[(&replacing, Type::TEXT)]),
                    )
                    .await?;
                row.map(|r| r.try_get::<_, i64>(0)).transpose()
            })
        })
    }

    /// Keeps the row of `ticket` for `ttl` more (see
    /// [`LeaseStore::stay_in_line`]).
    fn stay_in_line(&self, name: &str, ticket: i64, ttl: Duration) -> Result<bool, StoreError> {
        let ms = ttl.as_millis() as f64;
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(
                        sql::STAY_IN_LINE,
                        &[
                            (&name, Type::TEXT),
                            (&ticket, Type::INT8),
                            (&ms, Type::FLOAT8),
                        ],
                    )
                    .await?;
                Ok(row.is_some())
            })
        })
    }

    /// Removes the row of `ticket` from `name`'s line.
    fn leave_line(&self, name: &str, ticket: i64) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                c.query_typed(
                    sql::LEAVE_LINE,
                    &[(&name, Type::TEXT), (&ticket, Type::INT8)],
                )
                .await?;
                Ok(())
            })
        })
    }

    /// The row that holds the queue seat of `name`, live or dead.
    fn queued(&self, name: &str) -> Result<Option<WaiterRow>, StoreError> {
        let name = name.to_owned();
        let row = self.with(move |c| {
            Box::pin(async move {
                c.query_typed_opt(&sql::queued(), &[(&name, Type::TEXT)])
                    .await
            })
        })?;
        row.map(|r| self.waiter_row(&r)).transpose()
    }

    /// The live waiters of `name`, first in line first (at most
    /// [`MAX_WAITERS`](sql::MAX_WAITERS)); none when the store keeps no line.
    fn waiters(&self, name: &str) -> Result<Vec<WaiterRow>, StoreError> {
        if !self.has_line()? {
            return Ok(Vec::new());
        }
        let name = name.to_owned();
        let rows = self.with(move |c| {
            Box::pin(async move { c.query_typed(&sql::waiters(), &[(&name, Type::TEXT)]).await })
        })?;
        rows.iter().map(|r| self.waiter_row(r)).collect()
    }

    /// The row of `name` in `onlyone_schedule`, if a fire kept one.
    fn schedule_kept(&self, name: &str) -> Result<Option<super::KeptSchedule>, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(sql::SCHEDULE_KEPT, &[(&name, Type::TEXT)])
                    .await?;
                row.map(|r| {
                    let spec = r.try_get::<_, Option<String>>(0)?;
                    let version = r.try_get::<_, Option<i64>>(1)?.unwrap_or(0);
                    Ok(super::KeptSchedule::new(spec, version))
                })
                .transpose()
            })
        })
        .map_err(|e| self.schedule_error(e))
    }

    /// One statement ([`sql::RECORD_SCHEDULE`]): the row of `name` moved on
    /// from `version`, and `events` appended, or nothing.
    fn record_schedule(
        &self,
        name: &str,
        version: i64,
        spec: Option<&str>,
        events: &[String],
    ) -> Result<bool, StoreError> {
        let name = name.to_owned();
        let spec = spec.map(str::to_owned);
        let lines: Vec<String> = events.iter().map(|l| l.trim_end().to_owned()).collect();
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_one(
                        sql::RECORD_SCHEDULE,
                        &[
                            (&name, Type::TEXT),
                            (&spec, Type::TEXT),
                            (&version, Type::INT8),
                            (&lines, Type::TEXT_ARRAY),
                        ],
                    )
                    .await?;
                Ok(row.try_get::<_, Option<i64>>(0)?.is_some())
            })
        })
        .map_err(|e| self.schedule_error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host taken alone keeps every other setting: for a URL of one
    /// host, it is the URL's own configuration (`Config` compares every
    /// field), so a setting tokio-postgres adds and `one_host` misses
    /// fails here.
    #[test]
    fn one_host_keeps_every_setting() {
        let url = "postgres://u:pw@db.example:6432/jobs?sslmode=require&options=-c%20x%3Dy\
                   &application_name=a&target_session_attrs=read-write&channel_binding=require\
                   &keepalives_idle=7&tcp_user_timeout=3&load_balance_hosts=random\
                   &hostaddr=10.0.0.1&sslnegotiation=direct";
        let mut info = ConnInfo::parse(url).unwrap();
        info.config.connect_timeout(Duration::from_secs(4));
        info.config.keepalives_interval(Duration::from_secs(2));
        info.config.keepalives_retries(5);
        assert_eq!(one_host(&info.config, 0), info.config);
        let two = ConnInfo::parse("postgres://u@a:1,%2Frun%2Fpg:2/db").unwrap();
        let first = one_host(&two.config, 0);
        assert_eq!(first.get_hosts(), &[Host::Tcp("a".into())]);
        assert_eq!(first.get_ports(), &[1]);
        let second = one_host(&two.config, 1);
        assert_eq!(second.get_hosts(), &[Host::Unix("/run/pg".into())]);
        assert_eq!(second.get_ports(), &[2]);
        let mut order: Vec<usize> = (0..10).collect();
        shuffle(&mut order);
        order.sort_unstable();
        assert_eq!(order, (0..10).collect::<Vec<_>>());
    }
}
