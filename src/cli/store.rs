//! The commands with `--store URL`: the PostgreSQL store, for jobs that
//! run on several hosts. The lock is a lease (see
//! `onlyone::store::lease`); the journal is kept in the store, so that
//! every host sees every host's runs.

use std::time::{Duration, Instant};

use onlyone::journal::{Event, History, LockNow};
use onlyone::place::Kind;
use onlyone::store::hold::{LeaseHold, Taking};
use onlyone::store::lease::{DEFAULT_LEASE, LeaseTiming};
use onlyone::store::{Claimant, Claimed, LeaseRow, LeaseStore, StoreError, StoreLog};
use onlyone::supervise::{self, EndedBy, Exit, RunOutcome};
use onlyone::{compact_duration, names};

use super::exit::{self, Code, Ending};
use super::place::{Found, Named, Place, Stopped};
use super::run::{HeldLock, RunPlace};
use super::view::{LockStatus, Seen, Shown, WaiterStatus, Whence};
use super::{args, deadline_of, journal, say};

/// How often a waiter looks at a held lease again.
const WAIT_POLL: Duration = Duration::from_millis(100);

/// How long a command that only reads the store waits for it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The store at `url`, every call given up after `timeout`.
pub fn open(url: &str, timeout: Duration) -> Result<Box<dyn LeaseStore>, String> {
    onlyone::store::open(url, timeout).map_err(|e| e.to_string())
}

/// A lock name as the store keys it: the same names as the directory
/// store's (a path means nothing to a shared store).
fn lock_name(lock: &str) -> Result<String, String> {
    if lock.contains('/') {
        return Err(format!(
            "`{lock}` is a path; with --store a lock is a name (a letter or digit, then up \
             to 63 letters, digits, `.`, `_` or `-`)"
        ));
    }
    names::check_name(lock).map_err(|e| e.to_string())?;
    Ok(lock.to_owned())
}

fn host() -> String {
    onlyone::host_name()
}

/// Appends an event to the store's history of `name`; a failure is said
/// once (not with `quiet`).
fn record(store: &dyn LeaseStore, name: &str, ev: &Event, quiet: bool) {
    journal::write(&StoreLog { store, name }, ev, quiet);
}

/// "pid 4242 on build-01 (`./sync.sh`, for 3m12s, fence 17)".
fn describe(row: &LeaseRow) -> String {
    let now = super::format::now();
    format!(
        "pid {} on {} (`{}`, for {}, fence {})",
        row.pid.map_or_else(|| "?".into(), |p| p.to_string()),
        onlyone::text::for_terminal(row.host.as_deref().unwrap_or("?")),
        onlyone::text::for_terminal(row.cmd.as_deref().unwrap_or("?")),
        compact_duration(seconds(now - row.since)),
        row.epoch
    )
}

/// A span of seconds from the store as a duration (negative, NaN or huge
/// values read from a row are no panic: 0, or the largest).
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

/// The store, as the place of a run's lock.
pub struct StorePlace<'u> {
    url: &'u str,
    /// The forwarded signals (TERM, INT, HUP, QUIT, USR1, USR2, ALRM) wait
    /// from the take to the exit: before the
    /// command starts (while waiting for the lease) one ends the wait,
    /// while it runs the supervisor forwards it, after its end it is
    /// dropped, so that the end is recorded and the lease released
    /// whatever comes. Held by the place, which lives until `run` returns.
    signals: std::cell::OnceCell<onlyone::store::HeldSignals>,
}

impl<'u> StorePlace<'u> {
    pub fn new(url: &'u str) -> StorePlace<'u> {
        StorePlace {
            url,
            signals: std::cell::OnceCell::new(),
        }
    }
}

/// A lease taken for a run, its watchdog beside it.
struct LeaseHeld {
    name: String,
    hold: LeaseHold,
    watchdog: std::process::Child,
    token: String,
    cmd: String,
}

impl RunPlace for StorePlace<'_> {
    fn kind(&self) -> Kind {
        Kind::Store
    }

    fn take_for_run<'p>(&'p self, a: &args::Run) -> Result<Box<dyn HeldLock + 'p>, Code> {
        let name = lock_name(&a.lock).map_err(super::fail)?;
        let signals = onlyone::store::HeldSignals::new()
            .map_err(|e| super::fail(format_args!("cannot block the signals: {e}")))?;
        let signals = self.signals.get_or_init(|| signals);
        let timing = LeaseTiming::new(a.lease, a.kill_after).map_err(super::fail)?;
        let store = open(self.url, timing.call_timeout).map_err(super::fail)?;
        let token = onlyone::new_token();
        let cmd = onlyone::text::display_command(&a.command);
        let me = std::process::id();
        let host = host();
        let who = Claimant {
            token: &token,
            host: &host,
            pid: me,
            uid: rustix::process::geteuid().as_raw(),
            cmd: &cmd,
        };
        let hold = take(store.as_ref(), &name, &who, timing, a, signals)?;
        let watchdog = match start_watchdog(&hold, &token, timing) {
            Ok(w) => w,
            Err(e) => {
                let _ = hold.release();
                return Err(super::fail(format_args!(
                    "cannot start the run's watchdog ({e}); without it a killed wrapper would \
                     leave its command running past the lease, so the run was not started"
                )));
            }
        };
        let mut ev = Event::start(Some(&token), me, Some(&cmd), "run");
        ev.reason = Some(format!("fence {}", hold.fence()));
        record(hold.store(), &name, &ev, a.quiet);
        Ok(Box::new(LeaseHeld {
            name,
            hold,
            watchdog,
            token,
            cmd,
        }))
    }
}

impl HeldLock for LeaseHeld {
    fn name(&self) -> &str {
        &self.name
    }

    fn token(&self) -> &str {
        &self.token
    }

    fn hold(&mut self) -> &mut dyn supervise::Hold {
        &mut self.hold
    }

    fn end_event(&self, exit: Exit, ended_by: Option<EndedBy>, took: Duration) -> Event {
        let me = std::process::id();
        Event::end(
            Some(&self.token),
            me,
            Some(&self.cmd),
            exit,
            ended_by.map(Into::into),
            took,
        )
    }

    /// Retried on a new connection while the lease lasts (a server
    /// restarted just now loses no end).
    fn record_end(&self, end: &Event, quiet: bool) {
        let line = String::from_utf8_lossy(&end.to_line()).into_owned();
        let (hold, name) = (&self.hold, &self.name);
        if let Err(e) = hold.retry(|| hold.store().append_event(name, &line))
            && !quiet
        {
            say(format_args!(
                "the run of `{name}` ended, but its end could not be recorded in the store ({e})"
            ));
        }
    }

    /// The lease is left to run out rather than handed over beside them;
    /// nothing would record the end later, so it is recorded now.
    fn leave_to_survivors(self: Box<Self>, name: &str, _: &[u32], end: &Event, quiet: bool) {
        self.record_end(end, quiet);
        say(format_args!(
            "leftover process(es) of the run of `{name}` would not die; the lease is left to \
             run out"
        ));
        let LeaseHeld {
            hold, mut watchdog, ..
        } = *self;
        hold.abandon();
        let _ = watchdog.wait();
    }

    fn leave_to_lingerers(self: Box<Self>, o: &RunOutcome, _: &str, _: &args::Run) -> Code {
        // `--linger` is refused with a store (`Feature::Linger`): nothing
        // lingers. Were it to, the run is over for the lease.
        self.release();
        exit::command_exit(o.exit)
    }

    fn release(self: Box<Self>) {
        let LeaseHeld {
            hold, mut watchdog, ..
        } = *self;
        if let Err(e) = hold.release() {
            say(format_args!(
                "the run ended, but releasing its lease failed: {e}"
            ));
        }
        // The watchdog, told `done`, exits.
        let _ = watchdog.wait();
    }
}

/// Starts the run's watchdog (see `onlyone::store::watchdog`): a process
/// group of its own, no token in its environment (it is not the run), its
/// standard input the link.
fn start_watchdog(
    hold: &LeaseHold,
    token: &str,
    timing: LeaseTiming,
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let me = onlyone::ProcId::of(std::process::id())
        .ok_or_else(|| std::io::Error::other("cannot read this process's start time"))?;
    let child = std::process::Command::new(std::env::current_exe()?)
        .arg("lease-watchdog")
        .args(["--token", token])
        .args(["--uid", &rustix::process::getuid().as_raw().to_string()])
        .args(["--since", &me.start.to_string()])
        .args(["--lease-ms", &timing.lease.as_millis().to_string()])
        .args(["--grace-ms", &timing.grace.as_millis().to_string()])
        .args(["--sent", &hold.watch().sent().to_string()])
        .env_remove(onlyone::LOCK_VAR)
        .env_remove(onlyone::TOKEN_VAR)
        .env_remove(onlyone::FENCE_VAR)
        .stdin(std::os::fd::OwnedFd::from(theirs))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()?;
    hold.attach(onlyone::store::watchdog::Link::new(ours.into()));
    Ok(child)
}

/// `onlyone lease-watchdog`: watches over a leased run until its wrapper
/// says it is over, or dies.
pub fn watchdog(a: &args::LeaseWatchdog) -> Code {
    use onlyone::store::watchdog::{Watch, Watched, watch};
    use std::os::fd::AsFd;
    let Ok(timing) = LeaseTiming::new(
        Duration::from_millis(a.lease_ms),
        Duration::from_millis(a.grace_ms),
    ) else {
        return Ending::Failed.code();
    };
    let w = Watched {
        token: a.token.clone(),
        uid: a.uid,
        since: a.since,
        timing,
        sent: a.sent,
    };
    let input = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(_) => return Ending::Failed.code(),
    };
    match watch(input, &w) {
        Watch::Done => Ending::Done.code(),
        Watch::Ended { survivors, .. } if survivors.is_empty() => Ending::Done.code(),
        Watch::Ended { .. } => Ending::Failed.code(),
    }
}

/// How long a waiter's row in the line lasts unless refreshed (at every
/// look): a waiter killed with SIGKILL holds its place that long at most.
fn waiter_ttl(timing: LeaseTiming) -> Duration {
    (timing.call_timeout * 4).max(Duration::from_secs(3))
}

/// How long a fire that finds the queue seat held by a waiter that has
/// just taken the lease waits for that waiter to let the seat go.
const PLACE_HANDOVER: Duration = Duration::from_secs(2);

/// A waiter's place in the store's line: its row is removed when it is
/// dropped (the take removes it itself; a timeout, a signal, a failure
/// leave here), so that only a waiter killed outright leaves one, dead
/// once its `until` has passed.
struct LeaseTicket<'s> {
    store: &'s dyn LeaseStore,
    /// The connection the waiter looks through, between its tries.
    conn: Option<Box<dyn LeaseStore>>,
    name: &'s str,
    ticket: Option<i64>,
}

impl LeaseTicket<'_> {
    /// The store to speak through now: the waiter's connection, else the
    /// store's own.
    fn via(&self) -> &dyn LeaseStore {
        self.conn.as_deref().unwrap_or(self.store)
    }
}

impl Drop for LeaseTicket<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            let _ = self.via().leave_line(self.name, t);
        }
    }
}

/// What took the queue seat from this fire.
enum NoSeat {
    /// This live waiter (not yet the lease's holder when last seen).
    Waiter(Box<onlyone::store::WaiterRow>),
    /// One that came and went while this fire looked.
    Unknown,
}

/// Takes the queue seat of `name` for `who`: its ticket, or who has
/// it. A seat whose waiter is dead is taken over: a row past its end, or
/// one of this host whose waiter's process is gone (at once, not after its
/// end). A live waiter that has already taken the lease is letting the
/// seat go: that is waited for ([`PLACE_HANDOVER`]). Otherwise the fire
/// gives up: the waiter it saw had not yet begun its run, which will pick
/// up what this fire would have done.
fn take_queue_seat(
    c: &dyn LeaseStore,
    name: &str,
    who: &Claimant<'_>,
    ttl: Duration,
    signals: &onlyone::store::HeldSignals,
) -> Result<Result<i64, NoSeat>, Code> {
    let here = host();
    let mut replacing: Option<String> = None;
    for _ in 0..8 {
        if let Some(t) = c
            .take_queue_seat(name, who, ttl, replacing.as_deref())
            .map_err(super::fail)?
        {
            return Ok(Ok(t));
        }
        // The lease is looked at after the seat (see the directory's
        // queue: a fire gives up only while the waiter's run has not
        // begun).
        let Some(w) = c.queued(name).map_err(super::fail)? else {
            continue;
        };
        if !w.is_live() || w.alive_on(&here) == Some(false) {
            replacing = Some(w.token.clone());
            continue;
        }
        let lease = c.inspect(name).map_err(super::fail)?;
        if !lease.is_some_and(|l| l.is_live() && l.token == w.token) {
            return Ok(Err(NoSeat::Waiter(Box::new(w))));
        }
        let until = Instant::now() + PLACE_HANDOVER;
        while Instant::now() < until {
            std::thread::sleep(WAIT_POLL / 2);
            if let Some(sig) = signals.pending() {
                return Err(Code::Signal(sig.as_raw()));
            }
            if let Some(t) = c
                .take_queue_seat(name, who, ttl, Some(&w.token))
                .map_err(super::fail)?
            {
                return Ok(Ok(t));
            }
        }
        return Ok(Err(match c.queued(name).map_err(super::fail)? {
            Some(w) => NoSeat::Waiter(Box::new(w)),
            None => NoSeat::Unknown,
        }));
    }
    Ok(Err(NoSeat::Unknown))
}

/// Takes the lease of `name`, waiting as `--wait`, `--queue` and
/// `--deadline` allow, in line behind those who waited first; the exit
/// code when it stays held (the skip recorded) or the store fails.
fn take(
    store: &dyn LeaseStore,
    name: &str,
    who: &Claimant<'_>,
    timing: LeaseTiming,
    a: &args::Run,
    signals: &onlyone::store::HeldSignals,
) -> Result<LeaseHold, Code> {
    let deadline = deadline_of(a.busy.deadline);
    let wait_until = a.busy.wait.map(|w| Instant::now() + w);
    let waits = a.busy.wait.is_some() || a.busy.queue;
    let ttl = waiter_ttl(timing);
    let mut line = LeaseTicket {
        store,
        conn: None,
        name,
        ticket: None,
    };
    let mut has_line = None;
    let mut warned = false;
    loop {
        let conn = match line.conn.take() {
            Some(c) => c,
            // The connection may take longer than a call (nothing is held
            // yet): up to what is left of --deadline, and at least a
            // call's timeout.
            None => {
                let within = deadline.map_or(READ_TIMEOUT, |d| {
                    d.saturating_duration_since(Instant::now())
                        .min(READ_TIMEOUT)
                });
                store.fresh_connected(within).map_err(super::fail)?
            }
        };
        let usable = match has_line {
            Some(u) => u,
            None => {
                let u = conn.has_line().map_err(super::fail)?;
                if a.busy.queue && !u {
                    return Err(super::fail(no_line_for_queue(store)));
                }
                has_line = Some(u);
                u
            }
        };
        // A waiter keeps its row fresh at every look; one found gone (its
        // waiter paused past its end, and the row cleared or its seat
        // taken over) joins the line again, at its end.
        if let Some(t) = line.ticket
            && !conn.stay_in_line(name, t, ttl).map_err(super::fail)?
        {
            line.ticket = Some(conn.join_line(name, who, ttl).map_err(super::fail)?);
        }
        let why = match LeaseHold::take_in_line(conn, name, who, timing, line.ticket) {
            Ok(Taking::Taken(h)) => {
                // The take removed the waiter's row in the same statement
                // (only once it held the lease: a `--queue` fire that finds
                // the seat held looks at the lease next).
                line.ticket = None;
                return Ok(h);
            }
            Ok(Taking::Busy { store: c, why }) => {
                line.conn = Some(c);
                why
            }
            Err(e) => return Err(super::fail(e)),
        };
        let now = Instant::now();
        let waiting =
            waits && wait_until.is_none_or(|w| now < w) && deadline.is_none_or(|d| now < d);
        if !waiting {
            return Err(skip(line.via(), name, why, a));
        }
        if line.ticket.is_none() {
            if !usable {
                // Said once: on the first look that finds the lease held.
                if !warned {
                    warned = true;
                    say(format_args!(
                        "the store `{}` has no {} that this role may use, so the waiters of \
                         `{name}` are served in no order (the first to look once it is free takes \
                         it); have it created with the SQL in doc/store.md (\"Setup and the least \
                         privileges\")",
                        store.url(),
                        store.line_setup().what
                    ));
                }
            } else if a.busy.queue {
                match take_queue_seat(line.via(), name, who, ttl, signals)? {
                    Ok(t) => line.ticket = Some(t),
                    Err(w) => return Err(skip_queued(line.via(), name, w, a)),
                }
            } else {
                line.ticket = Some(line.via().join_line(name, who, ttl).map_err(super::fail)?);
            }
        }
        if let Claimed::Behind { .. } = why {
            clear_dead_ahead(line.via(), name, line.ticket);
        }
        std::thread::sleep(WAIT_POLL);
        // A signal ends the wait, as it would end a waiting onlyone
        // without a store; nothing was taken, and the place in line is
        // left (the guard).
        if let Some(sig) = signals.pending() {
            return Err(Code::Signal(sig.as_raw()));
        }
    }
}

/// Why `--queue` cannot be given with a store that has no line.
fn no_line_for_queue(store: &dyn LeaseStore) -> String {
    let setup = store.line_setup();
    format!(
        "--queue needs the store's {}, which the store `{}` does not have or this role may not \
         use (a store set up before it existed); have it created with:\n{}(doc/store.md, \
         \"Setup and the least privileges\"), or wait without the queue (--wait DUR)",
        setup.what,
        store.url(),
        setup.how
    )
}

/// A fire that did not get the lease (held, or free but owed to waiters
/// ahead): the skip recorded, pinged and said; the held exit code.
fn skip(store: &dyn LeaseStore, name: &str, why: Claimed, a: &args::Run) -> Code {
    let row = store.inspect(name).ok().flatten();
    let (msg, ev) = match why {
        Claimed::Behind { ahead } => {
            let first = store.waiters(name).ok().and_then(|w| w.into_iter().next());
            let ev = first
                .as_ref()
                .map(|w| Event::skip(Some(&w.token), w.pid, w.cmd.as_deref()));
            let first = first.map_or_else(String::new, |w| format!(", first {}", w.describe()));
            (
                format!(
                    "the lease of `{name}` is free, but {ahead} waiter(s) are ahead in line{first}; \
                     it goes to them first: wait in line (--wait DUR)"
                ),
                ev,
            )
        }
        _ => {
            let ev = row
                .as_ref()
                .map(|r| Event::skip(Some(&r.token), r.pid, r.cmd.as_deref()));
            let who = row
                .as_ref()
                .map_or_else(|| "another holder".into(), describe);
            (
                format!(
                    "another run of `{name}` holds the lease as {who}; wait for it (--wait) or \
                     stop it (onlyone --store URL stop {name})"
                ),
                ev,
            )
        }
    };
    if let Some(ev) = ev {
        record(store, name, &ev, a.quiet);
    }
    super::ping::note_skip(msg.clone());
    if !a.quiet {
        say(format_args!("{msg}"));
    }
    Ending::Skipped {
        held_exit: a.busy.held_exit,
    }
    .code()
}

/// A `--queue` fire that found a waiter already queued: the skip recorded
/// with why ([`super::QUEUED`]), pinged and said; the held exit code.
fn skip_queued(store: &dyn LeaseStore, name: &str, w: NoSeat, a: &args::Run) -> Code {
    let row = store.inspect(name).ok().flatten();
    let mut ev = match &row {
        Some(r) => Event::skip(Some(&r.token), r.pid, r.cmd.as_deref()),
        None => Event::skip(None, None, None),
    };
    ev.reason = Some(super::QUEUED.to_owned());
    record(store, name, &ev, a.quiet);
    let waiter = match &w {
        NoSeat::Waiter(w) => w.describe(),
        NoSeat::Unknown => "another fire".to_owned(),
    };
    let holder = row
        .as_ref()
        .filter(|r| r.is_live())
        .map_or_else(|| "another holder".into(), describe);
    let msg = super::queued_message(name, &waiter, &holder);
    super::ping::note_skip(msg.clone());
    if !a.quiet {
        say(format_args!("{msg}"));
    }
    Ending::Skipped {
        held_exit: a.busy.held_exit,
    }
    .code()
}

/// Removes the rows ahead of `mine` in `name`'s line whose waiters were
/// of this host and are gone (killed): they would keep the free lease from
/// the line until their end. Another host's rows are left to their end.
fn clear_dead_ahead(store: &dyn LeaseStore, name: &str, mine: Option<i64>) {
    let here = host();
    let Ok(waiters) = store.waiters(name) else {
        return;
    };
    for w in waiters {
        if mine.is_some_and(|t| w.ticket >= t) {
            break;
        }
        if w.alive_on(&here) == Some(false) {
            let _ = store.leave_line(name, w.ticket);
        }
    }
}

/// `status` with a store: every lease (or the named ones), in the schema
/// of a lock directory's status with the lease's fields added.
fn shown(url: &str, named: &[String], deadline: Option<Instant>) -> Result<Shown, String> {
    let timeout = deadline.map_or(READ_TIMEOUT, |d| {
        d.saturating_duration_since(Instant::now())
    });
    let store = open(url, timeout)?;
    let rows = store.list().map_err(|e| e.to_string())?;
    let here = host();
    let locks: Vec<LockStatus> = rows
        .iter()
        .filter(|r| named.is_empty() || named.contains(&r.name))
        .map(|r| {
            let h = history(store.as_ref(), &r.name)
                .map_err(|e| format!("cannot read the store's history of `{}`: {e}", r.name));
            let mut s = super::view::of_lease(r, &here, h);
            // Who waits, first in line first; a waiter of this host that is
            // gone is left out (its row only waits for its end).
            s.waiters = store
                .waiters(&r.name)
                .unwrap_or_default()
                .into_iter()
                .filter(|w| w.alive_on(&here) != Some(false))
                .map(|w| {
                    WaiterStatus::new(
                        w.pid.unwrap_or(0),
                        w.host,
                        w.uid,
                        w.cmd,
                        Some(w.since.max(0.0) as u64),
                        w.queued,
                    )
                })
                .collect();
            s
        })
        .collect();
    let notes = locks
        .iter()
        .filter_map(|s| {
            let why = s.reason.as_ref()?;
            Some(format!(
                "`{}` is {why}",
                onlyone::text::for_terminal(&s.name)
            ))
        })
        .collect();
    Ok(Shown {
        locks,
        whence: Whence::Store(store.url().to_owned()),
        notes,
        none: format!("no leases in the store `{}`", store.url()),
    })
}

/// `stop` with a store: a request the holder sees at its next renewal; it
/// ends its command, then releases. Waits for that, up to the deadline.
fn stop(url: &str, a: &args::Stop) -> Result<(String, Stopped), String> {
    let name = lock_name(&a.lock)?;
    let store = open(url, READ_TIMEOUT)?;
    let row = match store.inspect(&name).map_err(|e| e.to_string())? {
        Some(r) if r.is_live() => r,
        _ => return Ok((name, Stopped::NotRunning)),
    };
    // Judged now: once the lease is gone, a holder that ended cleanly is
    // gone too.
    let dead = row.holder_alive_on(&host()) == Some(false);
    if store
        .request_stop(&name)
        .map_err(|e| e.to_string())?
        .is_none()
    {
        return Ok((name, Stopped::NotRunning));
    }
    // The holder renews every L/6 at most; its command then gets its grace.
    let limit = deadline_of(a.deadline).unwrap_or_else(|| {
        let wait = seconds(row.left_ms as f64 / 1000.0)
            .saturating_add(a.kill_after)
            .saturating_add(DEFAULT_LEASE);
        let now = Instant::now();
        now.checked_add(wait)
            .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365))
    });
    let started = Instant::now();
    let who = describe(&row);
    loop {
        match store.inspect(&name).map_err(|e| e.to_string())? {
            Some(now) if now.epoch == row.epoch && now.is_live() => {}
            _ => break,
        }
        if Instant::now() >= limit {
            let waited = started.elapsed();
            return Ok((name, Stopped::NotLetGo { who, waited }));
        }
        std::thread::sleep(WAIT_POLL);
    }
    let ev = Event::stop(Some(&row.token), row.pid, row.cmd.as_deref(), None);
    record(store.as_ref(), &name, &ev, false);
    let took = started.elapsed();
    let done = if dead {
        Stopped::RanOut { who, took }
    } else {
        Stopped::Ended {
            who,
            took,
            how: String::new(),
        }
    };
    Ok((name, done))
}

/// The history of `name` in the store.
pub fn history(store: &dyn LeaseStore, name: &str) -> Result<History, StoreError> {
    let lines = store.events(name)?;
    Ok(History::from_lines(lines.iter().map(String::as_str)))
}

impl Place for StorePlace<'_> {
    /// Held only while a live lease exists; an unreachable server is an
    /// error (the fire runs).
    fn precheck(&self, lock: &str, deadline: Option<Instant>) -> Result<(String, Found), String> {
        let timeout = deadline
            .map_or(READ_TIMEOUT, |d| {
                d.saturating_duration_since(Instant::now())
            })
            .min(READ_TIMEOUT);
        let name = lock_name(lock)?;
        let store = open(self.url, timeout)?;
        let row = store.inspect(&name).map_err(|e| e.to_string())?;
        let found = match row {
            Some(row) if row.is_live() => {
                let ev = Event::skip(Some(&row.token), row.pid, row.cmd.as_deref());
                record(store.as_ref(), &name, &ev, true);
                Found::Held(Some(format!(
                    "another run of `{name}` holds the lease as {}",
                    describe(&row)
                )))
            }
            _ => Found::Free(None),
        };
        Ok((name, found))
    }

    fn history(&self, lock: &str) -> Result<(String, History, String), String> {
        let name = lock_name(lock)?;
        let store = open(self.url, READ_TIMEOUT)?;
        let mut h = history(store.as_ref(), &name).map_err(|e| e.to_string())?;
        // The row after the history (see `History::close_over`).
        if let Ok(row) = store.inspect(&name) {
            h.close_over(match &row {
                Some(r) if r.is_live() => LockNow::HeldBy(&r.token),
                _ => LockNow::Free,
            });
        }
        Ok((name, h, store.url().to_owned()))
    }

    fn seen(&self, locks: &[String]) -> Result<Vec<Named>, String> {
        let store = open(self.url, READ_TIMEOUT)?;
        let names = if locks.is_empty() {
            store.names().map_err(|e| e.to_string())?
        } else {
            locks.to_vec()
        };
        let look = |n: &str| -> Result<Seen, String> {
            // The history first (see `History::close_over`).
            let mut history = history(store.as_ref(), n).map_err(|e| e.to_string())?;
            let row = store.inspect(n).map_err(|e| e.to_string())?;
            history.close_over(match &row {
                Some(r) if r.is_live() => LockNow::HeldBy(&r.token),
                _ => LockNow::Free,
            });
            let missing = (row.is_none() && super::view::nothing_in(&history))
                .then(|| format!("no lease row and no history of `{n}` in the store"));
            Ok(Seen {
                held: row
                    .filter(LeaseRow::is_live)
                    .map(|r| (Some(r.token), Some(r.since))),
                unknown: None,
                history,
                name: n.to_owned(),
                missing,
            })
        };
        Ok(names
            .into_iter()
            .map(|n| {
                let seen = look(&n);
                (n, seen)
            })
            .collect())
    }

    fn shown(&self, named: &[String], deadline: Option<Instant>) -> Result<Shown, String> {
        shown(self.url, named, deadline)
    }

    fn stop(&self, a: &args::Stop) -> Result<(String, Stopped), String> {
        stop(self.url, a)
    }
}
