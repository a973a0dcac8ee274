//! What the commands write to a lock's journal. Writing it is best effort:
//! a journal that cannot be written never changes a run's outcome or its
//! exit code; the first failure is said once on stderr (never with `-q`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use onlyone::journal::{Event, Kind};
use onlyone::signal::signal_name;
use onlyone::supervise::{EndedBy, Exit};
use onlyone::{HeldBy, LockFile, LockGuard, Record, StaleReason};

use super::say;

/// Set once a failure was said: one line per process is enough.
static SAID: AtomicBool = AtomicBool::new(false);

/// Appends `ev` to `lock`'s journal; a failure is said once unless `quiet`.
pub(super) fn write(lock: &LockFile, ev: &Event, quiet: bool) {
    let journal = lock.journal();
    if let Err(e) = journal.append(ev)
        && !quiet
        && !SAID.swap(true, Ordering::Relaxed)
    {
        say(format_args!(
            "could not write the journal `{}` ({e}); the run goes on without it",
            journal.path().display()
        ));
    }
}

/// An event about the run a record describes.
fn about(kind: Kind, record: &Record) -> Event {
    let mut ev = Event::now(kind);
    ev.pid = Some(record.pid);
    ev.token = record.token.clone();
    ev.cmd = record.cmd.clone();
    ev
}

/// Seconds from a record's `since` until now.
fn age(record: &Record) -> Option<f64> {
    let since = record.since? as f64;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some((now - since).max(0.0))
}

/// A run (or a script's hold) began: with, first, the end of the stale run
/// it took over from (`abandoned`) and the takeover.
pub(super) fn started(lock: &LockFile, guard: &LockGuard, quiet: bool) {
    if let Some(t) = guard.took_over()
        && let Some(old) = &t.record
    {
        abandoned(lock, old, &t.reason, quiet);
        let mut ev = about(Kind::Takeover, old);
        ev.by = Some(guard.record().pid);
        ev.reason = Some(t.reason.to_string());
        write(lock, &ev, quiet);
    }
    let rec = guard.record();
    let mut ev = about(Kind::Start, rec);
    ev.mode = Some(rec.mode.as_str().to_owned());
    write(lock, &ev, quiet);
}

/// A run found stale was closed: its wrapper died without a word.
pub(super) fn abandoned(lock: &LockFile, old: &Record, reason: &StaleReason, quiet: bool) {
    // A script released while its workers lived: its end is recorded.
    if old.token.is_none() || old.released.is_some() {
        return;
    }
    let mut ev = about(Kind::Abandoned, old);
    ev.by = Some(std::process::id());
    ev.duration = age(old);
    ev.reason = Some(reason.to_string());
    write(lock, &ev, quiet);
}

/// A fire skipped: the lock is held by `h`.
pub(super) fn skipped(lock: &LockFile, h: &HeldBy, quiet: bool) {
    let mut ev = about(Kind::Skip, &h.record);
    ev.pid = Some(h.holder.pid());
    ev.by = Some(std::process::id());
    write(lock, &ev, quiet);
}

/// A run ended: how, and after how long.
pub(super) fn ended(
    lock: &LockFile,
    record: &Record,
    exit: Exit,
    ended_by: Option<EndedBy>,
    took: Duration,
    quiet: bool,
) {
    let mut ev = about(Kind::End, record);
    match exit {
        Exit::Code(c) => ev.exit = Some(c),
        Exit::Signal(s) => {
            ev.signal = Some(match rustix::process::Signal::from_named_raw(s) {
                Some(sig) => signal_name(sig),
                None => s.to_string(),
            });
        }
    }
    ev.ended_by = match ended_by {
        Some(EndedBy::MaxTime(_)) => Some("max-time".into()),
        Some(EndedBy::Idle(_)) => Some("idle".into()),
        _ => None,
    };
    ev.duration = Some(took.as_secs_f64());
    write(lock, &ev, quiet);
}

/// A script's hold was released; or `stop` or `reap` ended a run.
pub(super) fn closed(
    lock: &LockFile,
    kind: Kind,
    record: &Record,
    signal: Option<&str>,
    quiet: bool,
) {
    let mut ev = about(kind, record);
    ev.by = Some(std::process::id());
    ev.signal = signal.map(str::to_owned);
    if kind == Kind::Release {
        ev.duration = age(record);
    }
    write(lock, &ev, quiet);
}

/// `reap` ended the lingering processes of a run (by its token).
pub(super) fn reaped(lock: &LockFile, token: &str, pid: u32, cmd: Option<&str>) {
    let mut ev = Event::now(Kind::Reap);
    ev.token = Some(token.to_owned());
    ev.pid = Some(pid);
    ev.cmd = cmd.map(str::to_owned);
    ev.by = Some(std::process::id());
    write(lock, &ev, false);
}
