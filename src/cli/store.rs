//! The commands with `--store URL`: the PostgreSQL store, for jobs that
//! run on several hosts. The lock is a lease (see
//! `onlyone::store::lease`); the journal is kept in the store, so that
//! every host sees every host's runs.

use std::time::{Duration, Instant};

use onlyone::journal::{Event, LockNow};
use onlyone::place::Kind;
use onlyone::place::lease::{self, Busy, Leased, Notice, Refused, RunLease};
use onlyone::place::store::{READ_TIMEOUT, history};
use onlyone::store::hold::LeaseHold;
use onlyone::store::lease::LeaseTiming;
use onlyone::store::{Claimant, LeaseRow, LeaseStore, StoreLog, WaiterRow};
use onlyone::supervise::{self, EndedBy, Exit, RunOutcome};

use super::exit::{self, Code, Ending};
use super::place::{Named, Place};
use super::run::{HeldLock, RunPlace};
use super::view::{LockStatus, Seen, Shown, WaiterStatus, Whence, describe_lease};
use super::{args, deadline_of, journal, say};

/// The store at `url`, every call given up after `timeout`.
pub fn open(url: &str, timeout: Duration) -> Result<Box<dyn LeaseStore>, String> {
    onlyone::store::open(url, timeout).map_err(|e| super::words::store_error(&e))
}

/// A lock name as the store keys it (see
/// [`onlyone::place::store::lock_name`]), or what the command says of it.
fn lock_name(lock: &str) -> Result<String, String> {
    onlyone::place::store::lock_name(lock).map_err(|e| super::place::words(&e))
}

fn host() -> String {
    onlyone::host_name()
}

/// Appends an event to the store's history of `name`; a failure is said
/// once (not with `quiet`).
fn record(store: &dyn LeaseStore, name: &str, ev: &Event, quiet: bool) {
    journal::write(&StoreLog { store, name }, ev, quiet);
}

/// The store, as the place of a run's lock.
pub struct StorePlace {
    /// The store as the library's place: precheck, stop and history.
    place: onlyone::place::store::StorePlace,
    /// The forwarded signals (TERM, INT, HUP, QUIT, USR1, USR2, ALRM) wait
    /// from the take to the exit: before the
    /// command starts (while waiting for the lease) one ends the wait,
    /// while it runs the supervisor forwards it, after its end it is
    /// dropped, so that the end is recorded and the lease released
    /// whatever comes. Held by the place, which lives until `run` returns.
    signals: std::cell::OnceCell<onlyone::store::HeldSignals>,
}

impl StorePlace {
    /// The store at `url`.
    pub fn new(url: &str) -> StorePlace {
        StorePlace {
            place: onlyone::place::store::StorePlace::new(url, super::notes()),
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

impl RunPlace for StorePlace {
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
        let store = open(self.place.url(), timing.call_timeout).map_err(super::fail)?;
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
        ev.slots = (hold.slot().of > 1).then_some(hold.slot().of);
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
        slots: a.slots.count(),
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
        Leased::SlotsDiffer { held } => Err(super::fail(slots_differ(name, held, run.slots))),
        Leased::Signalled(sig) => Err(Code::Signal(sig.as_raw())),
        Leased::Failed(e) => Err(super::fail(e)),
    }
}

/// Why a take of `asked` slots was refused: a live holder of `name` took
/// it with `held` (the words of a lock directory's refusal).
fn slots_differ(name: &str, held: u32, asked: u32) -> String {
    format!(
        "`{name}` is held with {held} slot{}, and this take asks for {asked}: a lock's number \
         of slots changes once no run holds it",
        if held == 1 { "" } else { "s" }
    )
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
                .map_or_else(|| "another holder".into(), describe_lease);
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
        .map_or_else(|| "another holder".into(), describe_lease);
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
    // Each lock's rows together, slot 0 first, where its first row is in
    // the store's order (which is its collation's: `sync-a` may come
    // between `sync` and `sync#1`).
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        first.entry(r.name.as_str()).or_insert(i);
    }
    let mut ordered: Vec<&LeaseRow> = rows
        .iter()
        .filter(|r| named.is_empty() || named.contains(&r.name))
        .collect();
    ordered.sort_by_key(|r| (first[r.name.as_str()], r.slot));
    let mut locks: Vec<LockStatus> = Vec::new();
    for r in ordered {
        // A slot's row above 0 is its lock's (`NAME[K]`, no history: the
        // runs are the lock's), after the lock's own row.
        if let Some(base) = locks.last_mut().filter(|b| b.name == r.name && r.slot > 0) {
            let mut slot = super::view::of_lease(r, &here, Err(String::new()));
            slot.name = format!("{}[{}]", r.name, r.slot);
            slot.journal_error = None;
            base.slot_holders.push(slot);
            continue;
        }
        // Every slot's live run, from the rows read after the history.
        let tokens: Vec<&str> = rows
            .iter()
            .filter(|x| x.name == r.name && x.is_live())
            .map(|x| x.token.as_str())
            .collect();
        let h = history(store.as_ref(), &r.name)
            .map(|mut h| {
                h.close_over(LockNow::Slots(&tokens));
                h
            })
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
        locks.push(s);
    }
    // N of a lock of several slots, as a live slot's row says it.
    for s in &mut locks {
        let n = rows
            .iter()
            .filter(|r| r.name == s.name && r.is_live() && r.slots > 1)
            .map(|r| r.slots)
            .next();
        s.slot_count = n;
    }
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
    // A name given that has no row and no history is nowhere (a typo).
    let missing = named
        .iter()
        .filter(|n| !rows.iter().any(|r| &r.name == *n))
        .filter(|n| history(store.as_ref(), n).is_ok_and(|h| super::view::nothing_in(&h)))
        .map(|n| {
            let looked = format!("no lease row and no history of `{n}` in the store");
            (n.clone(), looked)
        })
        .collect();
    Ok(Shown {
        locks,
        whence: Whence::Store(store.url().to_owned()),
        notes,
        none: format!("no leases in the store `{}`", store.url()),
        missing,
    })
}

impl Place for StorePlace {
    fn seam(&self) -> &dyn onlyone::place::Place {
        &self.place
    }

    fn seen(&self, locks: &[String]) -> Result<Vec<Named>, String> {
        let store = open(self.place.url(), READ_TIMEOUT)?;
        let names = if locks.is_empty() {
            store.names().map_err(|e| e.to_string())?
        } else {
            locks.to_vec()
        };
        let look = |n: &str| -> Result<Seen, String> {
            // The history first (see `History::close_over`).
            let mut history = history(store.as_ref(), n).map_err(|e| e.to_string())?;
            // Every slot's row, slot 0 first: the first live one is the
            // current run.
            let rows = store.inspect_slots(n).map_err(|e| e.to_string())?;
            let live: Vec<&LeaseRow> = rows.iter().filter(|r| r.is_live()).collect();
            let tokens: Vec<&str> = live.iter().map(|r| r.token.as_str()).collect();
            history.close_over(LockNow::Slots(&tokens));
            let missing = (rows.is_empty() && super::view::nothing_in(&history))
                .then(|| format!("no lease row and no history of `{n}` in the store"));
            let slots = live
                .iter()
                .map(|r| r.slots)
                .find(|&k| k > 1)
                .map(|k| (k, live.len() as u32));
            Ok(Seen {
                held: live.first().map(|r| (Some(r.token.clone()), Some(r.since))),
                unknown: None,
                history,
                name: n.to_owned(),
                missing,
                slots,
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
        shown(self.place.url(), named, deadline)
    }

    /// A store keeps no schedule yet: its fires look at none (the
    /// schedule's options are refused with a store, `plan`).
    fn schedule_log(&self, _lock: &str) -> Result<Option<super::place::ScheduleLogOf>, String> {
        Ok(None)
    }
}
