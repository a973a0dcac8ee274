//! `run --jitter` and `--spread`: a wait before the lock is taken. The
//! waiting fire is written to the lock's log (a `delay` event: when it
//! came, and until when it waits), so that `status` shows it ("starting in
//! 12s") and `check` knows that it came; the journal is the user's own
//! file, never one in a shared directory. TERM, INT and HUP
//! end the wait: the fire does not run, its wait is closed in the
//! journal, and onlyone ends by that signal (a shell sees 128+N).

use std::time::Duration;

use onlyone::journal::Event;
use onlyone::place::{Lock, LockKey};
use onlyone::schedule::{jitter, machine_id, spread_offset};
use rustix::process::Signal;

use super::super::exit::Ending;
use super::super::place::Place;
use super::super::run::Run;
use super::super::{journal, say};

/// The signals that end a wait before the lock.
const ENDING: [Signal; 3] = [Signal::TERM, Signal::INT, Signal::HUP];

/// How long a fire of `lock` (its path) waits: its stable spread, plus a
/// fresh jitter.
pub(in crate::cli) fn wait_of(
    lock: &str,
    spread: Option<Duration>,
    j: Option<Duration>,
) -> Duration {
    let stable = spread.map_or(Duration::ZERO, |max| {
        spread_offset(&machine_id(), lock, max)
    });
    stable + j.map_or(Duration::ZERO, jitter)
}

/// Waits before the lock, as `--spread` and `--jitter` ask: the wait is
/// cut short to what is left of `--deadline`, and what it used is taken
/// from it. `Err` with how to exit when a signal ended it.
pub(in crate::cli) fn before_lock(
    place: &dyn Place,
    lock: &Lock,
    a: &mut Run,
) -> Result<(), Ending> {
    let f = &a.fire;
    if f.jitter.is_none() && f.spread.is_none() {
        return Ok(());
    }
    // A fire's place in the spread is its lock's: its path, or its name.
    let key = match lock.key() {
        LockKey::Path(p) => p.display().to_string(),
        _ => lock.name().to_owned(),
    };
    let mut wait = wait_of(&key, f.spread, f.jitter);
    if let Some(d) = a.busy.deadline {
        wait = wait.min(d);
        a.busy.deadline = Some(d - wait);
    }
    if wait.is_zero() {
        return Ok(());
    }
    let log = place.seam().schedule_log(lock).ok().flatten();
    let cmd = onlyone::text::display_command(&a.command);
    let pid = std::process::id();
    let mut ev = Event::delay(pid, Some(&cmd), 0.0);
    ev.until = Some(((ev.time + wait.as_secs_f64()) * 1000.0).round() / 1000.0);
    if let Some(log) = &log {
        journal::write(&**log, &ev, a.quiet);
    }
    let ended = match onlyone::signal::sleep_unless(wait, &ENDING) {
        Ok(ended) => ended,
        Err(e) => {
            say(format_args!(
                "cannot watch for signals while waiting ({e}); waiting all the same"
            ));
            std::thread::sleep(wait);
            None
        }
    };
    let Some(sig) = ended else {
        return Ok(());
    };
    // The wait is over: `status` no longer shows it.
    let mut closed = Event::delay(pid, Some(&cmd), 0.0);
    closed.until = Some(closed.time);
    if let Some(log) = &log {
        journal::write(&**log, &closed, true);
    }
    if !a.quiet {
        say(format_args!(
            "the wait before `{}` was ended by {}; not running",
            lock.name(),
            onlyone::signal::signal_name(sig)
        ));
    }
    Err(Ending::Interrupted(sig))
}
