//! A job under a lock directory's lock, its moments told to a
//! [`RunObserver`]: the library's own sequence of a run.
//!
//! [`run`] takes the lock (skipping when a live run holds it, after a wait
//! when one is asked for, or stopping that run first to take its place);
//! tells the observer of a stale lock taken over, then of the start; runs
//! the command under the lock with the supervisor ([`crate::supervise`]:
//! signals forwarded, time and idleness limits, the run's leftovers ended);
//! tells the observer of the end; and lets the lock go. With a
//! [`JournalObserver`](crate::observer::JournalObserver), the journal has
//! the same events as a run of the command's.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use crate::error::{Error, HeldBy};
use crate::lock::{AcquireOptions, BusyPolicy, LockFile, LockGuard};
use crate::observer::{RunEnd, RunObserver};
use crate::signal::GracefulStop;
use crate::supervise::{self, Exit, RunError, RunOptions, RunOutcome};

/// How much longer than its grace a run stopped to be replaced is given
/// to let go, before the run that replaces it gives up.
pub(crate) const REPLACE_SLACK: Duration = Duration::from_secs(5);

/// What a shell exits with when it cannot find a command.
const NOT_FOUND: i32 = 127;

/// What a shell exits with when it finds a command but cannot execute it.
const NOT_EXECUTABLE: i32 = 126;

/// How a job is run.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct JobOptions {
    /// What to do when a live run holds the lock (skip, the default; wait;
    /// queue).
    pub busy: BusyPolicy,
    /// Stop a live run (TERM, then KILL after `run.kill_after`) and take
    /// its place, instead of skipping.
    pub replace: bool,
    /// How the command is supervised.
    pub run: RunOptions,
}

/// What became of a job.
#[derive(Debug)]
#[non_exhaustive]
pub enum JobEnd {
    /// A live run held the lock: the command did not run.
    Skipped(Box<HeldBy>),
    /// The command ran.
    Ran(Box<Ran>),
}

/// A job whose command ran.
#[derive(Debug)]
#[non_exhaustive]
pub struct Ran {
    /// How it ended.
    pub outcome: RunOutcome,
    /// What became of the lock.
    pub lock: Release,
}

/// What became of the lock once a run's command ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Release {
    /// It was let go.
    Released,
    /// It is left to the processes of the run that outlive its command:
    /// lingering ones ([`RunOutcome::lingers`]), or leftovers that would
    /// not die (the survivors of [`RunOutcome::strays`]). The run is not
    /// over: no end is told, and the lock is free once they are gone.
    Left,
    /// Letting it go failed, or naming the lingering processes in it.
    Failed(Error),
}

/// Runs `argv` under `lock` as the module docs say, telling `observer`.
/// The lock is taken in the run's mode, naming the command.
///
/// The run's command is supervised by [`supervise::run`], whose terms
/// hold: the forwarded signals are blocked in the calling thread for the
/// run (block them in the program's other threads too), and the calling
/// process is the subreaper of the run (spawn nothing else meanwhile).
///
/// An error is one of the lock (other than being held) or of the
/// supervisor; a command that could not start is told ended (127 or 126)
/// before its error is returned, and the lock let go.
pub fn run(
    lock: &LockFile,
    argv: &[OsString],
    opts: &JobOptions,
    observer: &mut dyn RunObserver,
) -> Result<JobEnd, RunError> {
    let mut guard = match take(lock, argv, opts, observer)? {
        Ok(g) => g,
        Err(held) => return Ok(JobEnd::Skipped(held)),
    };
    if let Some(from) = guard.took_over() {
        observer.took_over(guard.record(), from);
    }
    observer.started(lock.path(), guard.record());
    let started = Instant::now();
    let outcome = match supervise::run(&mut guard, argv, &opts.run) {
        Ok(o) => o,
        Err(e) => {
            let code = match &e {
                RunError::NotFound { .. } => Some(NOT_FOUND),
                RunError::NotExecutable { .. } => Some(NOT_EXECUTABLE),
                _ => None,
            };
            if let Some(c) = code {
                let end = RunEnd::new(Exit::Code(c), None, started.elapsed());
                observer.ended(guard.record(), &end);
            }
            return Err(e);
        }
    };
    let lock = finish(guard, &outcome, started, observer);
    Ok(JobEnd::Ran(Box::new(Ran { outcome, lock })))
}

/// Takes the lock for the run: the guard, or who holds it (the skip
/// told).
fn take(
    lock: &LockFile,
    argv: &[OsString],
    opts: &JobOptions,
    observer: &mut dyn RunObserver,
) -> Result<Result<LockGuard, Box<HeldBy>>, RunError> {
    let acquire = AcquireOptions::new()
        .run_mode()
        .command(crate::text::display_command(argv))
        .busy(opts.busy);
    let replace = opts.replace.then_some(opts.run.kill_after);
    match take_for_run(lock, &acquire, replace, None, observer) {
        Ok(g) => Ok(Ok(g)),
        Err(TakeError::Acquire(Error::Held(h)))
        | Err(TakeError::Acquire(Error::Timeout { held: h, .. })) => {
            observer.skipped(&h);
            Ok(Err(h))
        }
        Err(TakeError::Acquire(e) | TakeError::Stop(e)) => Err(e.into()),
    }
}

/// Why [`take_for_run`] took no lock.
#[derive(Debug)]
pub enum TakeError {
    /// Taking the lock failed: held by a live run ([`Error::Held`], or
    /// [`Error::Timeout`] after a wait), or another error of the lock.
    Acquire(Error),
    /// Stopping the live run to replace it failed.
    Stop(Error),
}

/// Takes `lock` for a run with `opts`. When a live run holds it and
/// `replace` gives a grace, that run is stopped first (TERM, then KILL
/// after the grace; `observer` told before and after, as
/// [`RunObserver::stopping`] and [`RunObserver::stopped`]) and the lock is
/// taken out of line, before the waiters (the run that replaces supersedes
/// what they wait for), within the grace and 5 seconds more. The stop is
/// bounded by `deadline`. The skip is not told: the caller says it.
///
/// A lock of several slots ([`AcquireOptions::slots`]) is replaced only
/// when every slot is held: a free one is taken, nothing stopped. Then one
/// run is stopped, the oldest (the longest held, by its record), and a
/// slot is taken once one frees.
pub fn take_for_run(
    lock: &LockFile,
    opts: &AcquireOptions,
    replace: Option<Duration>,
    deadline: Option<Instant>,
    observer: &mut dyn RunObserver,
) -> Result<LockGuard, TakeError> {
    let (held, grace) = match (lock.acquire(opts), replace) {
        (Ok(g), _) => return Ok(g),
        (Err(Error::Held(h)) | Err(Error::Timeout { held: h, .. }), Some(grace)) => (h, grace),
        (Err(e), _) => return Err(TakeError::Acquire(e)),
    };
    let again = opts.clone().wait(grace + REPLACE_SLACK).fifo(false);
    // Another account's holder is no run of this lock's to replace: held.
    if opts.slot_count() <= 1 && !held.record.is_ours() {
        return Err(TakeError::Acquire(Error::Held(held)));
    }
    if opts.slot_count() > 1 {
        replace_oldest(lock, opts.slot_count(), held, grace, deadline, observer)?;
        return lock.acquire(&again).map_err(TakeError::Acquire);
    }
    observer.stopping(&held);
    crate::stop::stop(lock, GracefulStop::term(grace), deadline).map_err(TakeError::Stop)?;
    observer.stopped(&held, "TERM");
    lock.acquire(&again).map_err(TakeError::Acquire)
}

/// Stops the oldest run of `lock`'s `n` slots (TERM, then KILL after
/// `grace`; `observer` told before and after), bounded by `deadline`.
/// None is held any more, or the oldest let go of its slot before the
/// stop: nothing is stopped (a slot is free, or freeing, for the take).
/// Another account's holders (`held`, every slot's at the look) are no
/// runs of this lock's: when they alone hold the slots, the take is held.
fn replace_oldest(
    lock: &LockFile,
    n: u32,
    held: Box<HeldBy>,
    grace: Duration,
    deadline: Option<Instant>,
    observer: &mut dyn RunObserver,
) -> Result<(), TakeError> {
    let Some((slot, oldest)) = oldest_run(lock, n).map_err(TakeError::Stop)? else {
        // Every slot held by another account's holders, none a run of
        // this lock's to replace: held.
        let theirs = std::iter::once(&*held)
            .chain(&held.others)
            .all(|h| !h.record.is_ours());
        if theirs {
            return Err(TakeError::Acquire(Error::Held(held)));
        }
        return Ok(());
    };
    let same = |r: &crate::Record| crate::stop::same_run(r, &oldest.record);
    observer.stopping(&oldest);
    if let Some(crate::stop::Stopped::Ended { .. }) =
        crate::stop::stop_if(&slot, GracefulStop::term(grace), deadline, same)
            .map_err(TakeError::Stop)?
    {
        observer.stopped(&oldest, "TERM");
    }
    Ok(())
}

/// The slot of `lock`'s `n` held the longest by a live run (the earliest
/// `since` of its record; the earliest start of its owner among runs that
/// took their slots in the same second; then the lowest slot), and its
/// holder; `None` when no slot is held.
fn oldest_run(lock: &LockFile, n: u32) -> Result<Option<(LockFile, HeldBy)>, Error> {
    let mut oldest: Option<(LockFile, HeldBy)> = None;
    for k in 0..n {
        let slot = lock.slot(k)?;
        // Another account's holder is no run of this lock's.
        let Some(held) = slot
            .inspect()?
            .and_then(|s| s.held_by(slot.path()))
            .filter(|h| h.record.is_ours())
        else {
            continue;
        };
        let age = |h: &HeldBy| (h.record.since, h.record.start);
        if oldest.as_ref().is_none_or(|(_, o)| age(&held) < age(o)) {
            oldest = Some((slot, held));
        }
    }
    Ok(oldest)
}

/// The command has ended: the end told and the lock let go, or the lock
/// left to the run's processes that outlive the command.
fn finish(
    mut guard: LockGuard,
    outcome: &RunOutcome,
    started: Instant,
    observer: &mut dyn RunObserver,
) -> Release {
    if outcome.lingers {
        let named = if outcome.kept.is_empty() {
            Ok(())
        } else {
            let named = guard.set_lingering(&outcome.kept);
            // Best effort: the reaper then needs a second look.
            crate::reap::note_lingering(guard.lock().dir(), &outcome.kept, guard.record());
            named
        };
        guard.leave_to_owner();
        return named.map_or_else(Release::Failed, |()| Release::Left);
    }
    if !outcome.strays.survivors.is_empty() {
        // They carry the run's token, or are named: the lock stays held,
        // and the next run waits for them (their end is the run's).
        guard.leave_to_owner();
        return Release::Left;
    }
    // The end is told before the release, so that the next run's start
    // follows it; and the command has stopped before the release.
    let end =
        RunEnd::new(outcome.exit, outcome.ended_by, started.elapsed()).with_usage(outcome.usage);
    observer.ended(guard.record(), &end);
    if !outcome.kept.is_empty() {
        // Best effort: a reap of the job ends them once idle.
        crate::reap::note_kept(
            guard.lock().dir(),
            guard.lock().path(),
            guard.token(),
            &outcome.kept,
        );
    }
    match guard.release() {
        Ok(()) => Release::Released,
        Err(e) => Release::Failed(e),
    }
}
