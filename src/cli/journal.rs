//! What the commands write to a lock's event log: the journal beside a
//! lock file, or the store's history of a name (one
//! [`EventLog`](onlyone::journal::EventLog), the same events). Writing it is
//! best effort: a log that cannot be written never changes a run's outcome
//! or its exit code; the first failure is said once on stderr (never with
//! `-q`).

use std::sync::atomic::{AtomicBool, Ordering};

use onlyone::journal::{Event, EventLog, Journal};
use onlyone::observer;
use onlyone::{HeldBy, LockGuard, Record, StaleReason};

use super::say;

/// Set once a failure was said: one line per process is enough.
static SAID: AtomicBool = AtomicBool::new(false);

/// Set for `-q`: a failure to write an event log is not said.
static HUSHED: AtomicBool = AtomicBool::new(false);

/// With `quiet`, a failure to write an event log is not said.
pub(super) fn hush(quiet: bool) {
    HUSHED.store(quiet, Ordering::Relaxed);
}

/// Appends `ev` to `log`; a failure is said once unless `quiet`.
pub(super) fn write(log: &dyn EventLog, ev: &Event, quiet: bool) {
    if let Err(e) = log.append(ev)
        && !quiet
    {
        unlogged(&log.describe(), &e);
    }
}

/// Says that an event could not be written to `log`, once per process.
pub(super) fn unlogged(log: &str, e: &std::io::Error) {
    if !HUSHED.load(Ordering::Relaxed) && !SAID.swap(true, Ordering::Relaxed) {
        say(format_args!(
            "could not write {log} ({e}); the run goes on without it"
        ));
    }
}

/// A run (or a script's hold) began: with, first, the end of the stale run
/// it took over from (`abandoned`) and the takeover.
pub(super) fn started(log: &dyn EventLog, guard: &LockGuard, quiet: bool) {
    if let Some(t) = guard.took_over()
        && let Some(old) = &t.record
    {
        // Unless the place closed it as it removed its record.
        if !t.told() {
            abandoned(log, old, &t.reason, quiet);
        }
        if let Some(ev) = observer::takeover_event(old, &t.reason.to_string(), guard.record().pid) {
            write(log, &ev, quiet);
        }
    }
    write(log, &observer::start_event(guard.record()), quiet);
}

/// A run found stale was closed: its wrapper died without a word.
pub(super) fn abandoned(log: &dyn EventLog, old: &Record, reason: &StaleReason, quiet: bool) {
    if let Some(ev) = observer::abandoned_event(old, &reason.to_string()) {
        write(log, &ev, quiet);
    }
}

/// A fire skipped: the lock is held by `h`.
pub(super) fn skipped(log: &dyn EventLog, h: &HeldBy, quiet: bool) {
    skipped_because(log, h, None, quiet);
}

/// A skip with why, when it is not only that the lock was held ("one
/// already queued").
pub(super) fn skipped_because(log: &dyn EventLog, h: &HeldBy, why: Option<&str>, quiet: bool) {
    let mut ev = observer::skip_event(h);
    ev.reason = why.map(str::to_owned);
    write(log, &ev, quiet);
}

/// A script's hold was released, with the script's exit code when it gave
/// one (`release --exit`).
pub(super) fn released(log: &dyn EventLog, record: &Record, exit: Option<u8>, quiet: bool) {
    write(log, &observer::release_event(record, None, exit), quiet);
}

/// A script's hold that its workers carried on after its `release` has
/// ended: the last of them exited now. Its duration is counted from the
/// run's start as its journal has it (to the millisecond), else from the
/// record's `since`.
pub(super) fn carried_on(journal: &Journal, record: &Record, exit: Option<u8>) {
    let start = record.token.as_deref().and_then(|t| {
        let h = journal.history().ok()?;
        h.runs.iter().rev().find(|r| r.token == t).map(|r| r.start)
    });
    let took = start.map(|s| (super::format::now() - s).max(0.0));
    write(journal, &observer::release_event(record, took, exit), true);
}

/// `reap` ended the lingering processes of a run (by its token).
pub(super) fn reaped(log: &dyn EventLog, token: &str, pid: u32, cmd: Option<&str>) {
    write(log, &Event::reap(token, pid, cmd), false);
}
