//! The commands with `--store URL`: the PostgreSQL store, for jobs that
//! run on several hosts. The lock is a lease (see
//! `onlyone::store::lease`); the journal is kept in the store, so that
//! every host sees every host's runs.

use std::time::{Duration, Instant};

use onlyone::journal::{Event, History, LockNow};
use onlyone::place::Kind;
use onlyone::place::lease::{self, Busy, Leased, Notice, Refused, RunLease, STORE_POLL};
use onlyone::store::hold::LeaseHold;
use onlyone::store::lease::{DEFAULT_LEASE, LeaseTiming};
use onlyone::store::{Claimant, LeaseRow, LeaseStore, StoreError, StoreLog, WaiterRow};
use onlyone::supervise::{self, EndedBy, Exit, RunOutcome};
use onlyone::{compact_duration, names};

use super::exit::{self, Code, Ending};
use super::place::{Found, Named, Place, Stopped};
use super::run::{HeldLock, RunPlace};
use super::view::{LockStatus, Seen, Shown, WaiterStatus, Whence};
use super::{args, deadline_of, journal, say};

/// How long a command that only reads the store waits for it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The store at `url`, every call given up after `timeout`.
pub fn open(url: &str, timeout: Duration) -> Result<Box<dyn LeaseStore>, String> {
    onlyone::store::open(url, timeout).map_err(|e| super::words::store_error(&e))
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
        let timing = LeaseTiming::new(a.lease, a.kill_after)
            .map_err(|e| super::fail(super::words::lease_timing_error(&e)))?;
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

/// Starts the run's watchdog (see `onlyone::place::lease::start_watchdog`):
/// this program's `lease-watchdog`, told what it watches over.
fn start_watchdog(
    hold: &LeaseHold,
    token: &str,
    timing: LeaseTiming,
) -> std::io::Result<std::process::Child> {
    let w = lease::watched(hold, token, timing)?;
    let mut program = std::process::Command::new(std::env::current_exe()?);
    program
        .arg("lease-watchdog")
        .args(["--token", &w.token])
        .args(["--uid", &w.uid.to_string()])
        .args(["--since", &w.since.to_string()])
        .args(["--lease-ms", &w.timing.lease.as_millis().to_string()])
        .args(["--grace-ms", &w.timing.grace.as_millis().to_string()])
        .args(["--sent", &w.sent.to_string()]);
    lease::start_watchdog(hold, program)
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

/// Takes the lease of `name`, waiting as `--wait`, `--queue` and
/// `--deadline` allow (see `onlyone::place::lease`); the exit code when it
/// stays held (the skip recorded) or the store fails.
fn take(
    store: &dyn LeaseStore,
    name: &str,
    who: &Claimant<'_>,
    timing: LeaseTiming,
    a: &args::Run,
    signals: &onlyone::store::HeldSignals,
) -> Result<LeaseHold, Code> {
    let run = RunLease {
        name,
        who,
        timing,
        busy: a.busy.policy(),
        deadline: deadline_of(a.busy.deadline),
        connect_within: READ_TIMEOUT,
    };
    // Said once (the library tells it once): on the first look that finds
    // the lease held.
    let mut notice = |n: Notice| match n {
        Notice::Unordered => say(format_args!(
            "the store `{}` has no {} that this role may use, so the waiters of \
             `{name}` are served in no order (the first to look once it is free takes \
             it); have it created with the SQL in doc/store.md (\"Setup and the least \
             privileges\")",
            store.url(),
            store.line_setup().what
        )),
    };
    match lease::take_for_run(store, &run, signals, &mut notice) {
        Leased::Taken(h) => Ok(h),
        Leased::Busy(b) => Err(skip(&b, name, a)),
        Leased::NoLine => Err(super::fail(no_line_for_queue(store))),
        Leased::Signalled(sig) => Err(Code::Signal(sig.as_raw())),
        Leased::Failed(e) => Err(super::fail(e)),
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
fn skip(busy: &Busy<'_>, name: &str, a: &args::Run) -> Code {
    let (store, row) = (busy.store(), &busy.holder);
    let (msg, ev) = match &busy.why {
        Refused::Queued(w) => return skip_queued(busy, name, w.as_deref(), a),
        Refused::Behind { ahead, first } => {
            let ev = first
                .as_ref()
                .map(|w| Event::skip(Some(&w.token), w.pid, w.cmd.as_deref()));
            let first = first
                .as_ref()
                .map_or_else(String::new, |w| format!(", first {}", w.describe()));
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
fn skip_queued(busy: &Busy<'_>, name: &str, w: Option<&WaiterRow>, a: &args::Run) -> Code {
    let (store, row) = (busy.store(), &busy.holder);
    let mut ev = match row {
        Some(r) => Event::skip(Some(&r.token), r.pid, r.cmd.as_deref()),
        None => Event::skip(None, None, None),
    };
    ev.reason = Some(super::QUEUED.to_owned());
    record(store, name, &ev, a.quiet);
    let waiter = w.map_or_else(|| "another fire".to_owned(), WaiterRow::describe);
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
        std::thread::sleep(STORE_POLL);
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
