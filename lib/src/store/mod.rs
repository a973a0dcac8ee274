//! Where locks live. The lock directory ([`crate::LockFile`]) keeps a run's
//! lock on this host; a store of leases ([`LeaseStore`]; the PostgreSQL
//! store, [`pg`], is one) keeps it in a database that several hosts share.
//!
//! A run sees either through [`crate::supervise::Hold`]: what the command
//! is told, how the lock names it, and what keeps the lock (a file whose
//! owner lives; a lease renewed in time).

/// The SQL of the line of waiters' table (part of the PostgreSQL store's `SCHEMA_SQL`): a
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
pub const WAITER_SQL: &str = waiter_sql!();

pub mod hold;
pub mod lease;
#[cfg(feature = "postgres")]
pub mod pg;
// The run's watchdog process: public only for the onlyone command, which
// is the program that runs it (`onlyone __watchdog`); not part of the API.
#[doc(hidden)]
pub mod watchdog;

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

/// Starts a thread with the supervisor's signals ([`crate::supervise::FORWARDED`]
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

/// The supervisor's signals ([`crate::supervise::FORWARDED`] and SIGCHLD)
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

    /// A forwarded signal ([`crate::supervise::FORWARDED`]) that came meanwhile, if
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

/// Why the store failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The server could not be reached (or did not answer in time).
    Unreachable(String),
    /// The server refused the credentials.
    Auth(String),
    /// Anything else the server or the URL said.
    Other(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Unreachable(s) | StoreError::Auth(s) | StoreError::Other(s) => {
                f.write_str(s)
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// A lease row, as `status` shows it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LeaseRow {
    /// The lock's name.
    pub name: String,
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

    /// For a live lease taken on this host (`here`, [`crate::host_name`]):
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
/// `check` and `metrics` need of one. The PostgreSQL store ([`pg`]) is one;
/// another engine is a new module that implements this, and a line in
/// [`open`].
///
/// Every call gives up after the store's timeout. A lease's end is decided
/// by the store's clock: `take` succeeds only once the last lease has run
/// out, `renew` only while it has not, each from the store's now.
pub trait LeaseStore: Send + std::fmt::Debug {
    /// The store's URL, without its password.
    fn url(&self) -> &str;
    /// Another handle on the same store, with a connection of its own (for
    /// a renewing thread).
    fn fresh(&self) -> Result<Box<dyn LeaseStore>, StoreError>;
    /// [`LeaseStore::fresh`], connected now, the connection given up to
    /// `within` (longer than the calls' timeout, which it keeps): for a
    /// holder about to take a lease, so that a slow connection (a busy
    /// host, a TLS handshake far away) is not taken for an unreachable
    /// store while nothing is held yet.
    fn fresh_connected(&self, within: Duration) -> Result<Box<dyn LeaseStore>, StoreError>;
    /// Takes `name` for `lease` if its last lease has run out and no live
    /// waiter is ahead of `ticket` in its line (with no ticket, none at
    /// all: a newcomer never goes ahead of those who wait); in a store
    /// without a line ([`LeaseStore::has_line`]), once its last lease has
    /// run out. The line is only a further condition: it never lets a
    /// lease be taken that has not run out. On success the waiter's row of
    /// `ticket` is gone, in the same step.
    fn take(
        &self,
        name: &str,
        who: &Claimant<'_>,
        lease: Duration,
        ticket: Option<i64>,
    ) -> Result<Claimed, StoreError>;
    /// Renews the lease of `epoch` for `lease` from the store's now, if it
    /// still holds.
    fn renew(&self, name: &str, epoch: i64, lease: Duration) -> Result<Renewed, StoreError>;
    /// Ends the lease of `epoch` now; false when it no longer held.
    fn release(&self, name: &str, epoch: i64) -> Result<bool, StoreError>;
    /// The lease of `name`, if it was ever taken.
    fn inspect(&self, name: &str) -> Result<Option<LeaseRow>, StoreError>;
    /// Every lease, by name.
    fn list(&self) -> Result<Vec<LeaseRow>, StoreError>;
    /// Asks the live holder of `name` to end its run: its epoch, or `None`
    /// when nothing holds it.
    fn request_stop(&self, name: &str) -> Result<Option<i64>, StoreError>;
    /// Appends a journal line to the history of `name`.
    fn append_event(&self, name: &str, line: &str) -> Result<(), StoreError>;
    /// The history of `name`, oldest first.
    fn events(&self, name: &str) -> Result<Vec<String>, StoreError>;
    /// Every name with a lease or a history.
    fn names(&self) -> Result<Vec<String>, StoreError>;

    /// Whether this store keeps a line of waiters (for the PostgreSQL
    /// store: its table `onlyone_waiter` exists and this role may use it).
    /// Without one, waiters are served in no order, `--queue` cannot be
    /// given, and the calls of the line below fail (but
    /// [`LeaseStore::waiters`]: none).
    fn has_line(&self) -> Result<bool, StoreError>;
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

/// The store a URL names, every call given up after `timeout`: a
/// `postgres://` or `postgresql://` URL is the PostgreSQL store (the only
/// one so far). Nothing is sent yet.
pub fn open(url: &str, timeout: Duration) -> Result<Box<dyn LeaseStore>, StoreError> {
    #[cfg(feature = "postgres")]
    return Ok(Box::new(pg::PgStore::new(url, timeout)?));
    #[cfg(not(feature = "postgres"))]
    {
        let _ = (url, timeout);
        Err(StoreError::Other(
            "this onlyone was built without the PostgreSQL store (cargo feature `postgres`), \
             so --store cannot be used; build it with the default features"
                .to_owned(),
        ))
    }
}
