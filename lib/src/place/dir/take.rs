//! A run's lock in a lock directory: taken as the job's busy policy says
//! (a live run stopped first for `replace`), the skip or the start
//! recorded in the lock's journal, and the [`Held`] lock the run keeps:
//! its end recorded there, what it left told to the reaper, the lock let
//! go or left to what outlives the command.

use std::time::{Duration, Instant};

use super::DirPlace;
use crate::error::{Error, HeldBy};
use crate::journal::Journal;
use crate::lock::{AcquireOptions, LockFile, LockGuard};
use crate::observer::{self, RunEnd};
use crate::place::run::{Held, Job, Lingering, RunObserver, Skip, Started, Taken};
use crate::place::{Lock, PlaceError, log_event};
use crate::procfs::ProcId;
use crate::signal::GracefulStop;

/// How much longer than its grace a run stopped to be replaced is given
/// to let go, before the run that replaces it gives up.
pub(crate) const REPLACE_SLACK: Duration = Duration::from_secs(5);

/// Why a fire that asked for the queue was skipped, as its journal says.
pub const QUEUED: &str = "one already queued";

/// [`Place::take`](super::Place::take) of the lock directory.
pub(super) fn take<'p>(
    place: &'p DirPlace,
    lock: &Lock,
    job: &Job,
    observer: &mut dyn RunObserver,
) -> Result<Taken<'p>, PlaceError> {
    let file = place.open_lock(lock, true)?;
    let file = match job.deadline {
        Some(d) => file.with_deadline(d),
        None => file,
    };
    let mut opts = AcquireOptions::new()
        .run_mode()
        .command(crate::text::display_command(&job.command))
        .busy(job.busy)
        .slots(lock.slots());
    if let Some(d) = job.deadline {
        opts = opts.deadline(d);
    }
    let journal = place.journal(&file);
    let guard = match take_for_run(&file, &opts, job, &journal, place, observer) {
        Ok(g) => g,
        Err(TakeError::Stop(e)) => return Err(e.into()),
        Err(TakeError::Acquire(e)) => return skipped(place, &journal, e).map(Taken::Skipped),
    };
    if let Some(t) = guard.took_over() {
        observer.took_over(t);
    }
    started(place, &journal, &guard);
    Ok(Taken::Held(Box::new(DirHeld {
        place,
        guard,
        journal,
    })))
}

/// A take that found the lock busy: the skip recorded; any other error of
/// the lock, returned.
fn skipped(place: &DirPlace, journal: &Journal, e: Error) -> Result<Skip, PlaceError> {
    let (ev, skip) = match e {
        Error::Held(held) => (observer::skip_event(&held), Skip::Held(held)),
        Error::Timeout { waited, held } => {
            (observer::skip_event(&held), Skip::Waited { waited, held })
        }
        Error::Queued { held, waiter } => {
            let mut ev = observer::skip_event(&held);
            ev.reason = Some(QUEUED.to_owned());
            (ev, Skip::Queued { held, waiter })
        }
        e => return Err(e.into()),
    };
    log_event(journal, &ev, Some(place.notes()));
    Ok(skip)
}

/// A run (or a script's hold) began: with, first, the end of the stale run
/// it took over from (`abandoned`, unless the place closed it as it
/// removed its record) and the takeover.
pub(crate) fn started(place: &DirPlace, journal: &Journal, guard: &LockGuard) {
    let notes = Some(place.notes());
    if let Some(t) = guard.took_over()
        && let Some(old) = &t.record
    {
        let reason = t.reason.to_string();
        if !t.told()
            && let Some(ev) = observer::abandoned_event(old, &reason)
        {
            log_event(journal, &ev, notes);
        }
        if let Some(ev) = observer::takeover_event(old, &reason, guard.record().pid) {
            log_event(journal, &ev, notes);
        }
    }
    log_event(journal, &observer::start_event(guard.record()), notes);
}

/// A lock of the lock directory, taken for a run.
struct DirHeld<'p> {
    place: &'p DirPlace,
    guard: LockGuard,
    /// The lock's journal, found once for the run's start and end.
    journal: Journal,
}

impl Held for DirHeld<'_> {
    fn started(&self) -> Started {
        Started {
            token: self.guard.token().to_owned(),
            abandoned: crate::place::run::abandoned(self.guard.took_over()),
            fence: None,
        }
    }

    fn hold(&mut self) -> &mut dyn crate::supervise::Hold {
        &mut self.guard
    }

    /// Best effort, as the journal always is: a failure is told to the
    /// place's notes.
    fn record_end(&self, end: &RunEnd) -> Result<(), String> {
        let ev = observer::end_event(self.guard.record(), end);
        log_event(&self.journal, &ev, Some(self.place.notes()));
        Ok(())
    }

    fn note_kept(&self, kept: &[ProcId]) {
        if self.place.state_dir_exists() {
            crate::reap::note_kept(
                self.place.dir(),
                self.guard.lock().path(),
                self.guard.token(),
                kept,
            );
        }
    }

    fn release(self: Box<Self>) -> Result<(), String> {
        self.guard.release().map_err(|e| e.to_string())
    }

    /// They carry the run's token, or are named: the lock stays held, and
    /// the next run waits for them (their end is the run's).
    fn leave_to_survivors(self: Box<Self>, _: &RunEnd) {
        self.guard.leave_to_owner();
    }

    /// The work goes on in processes that outlive the command: they keep
    /// the lock held (they carry its token, and the record names them),
    /// and the reaper, told what they are doing now, ends them once idle.
    /// The record stays even when none is seen yet (a terminal server may
    /// exec the work a moment after the command returned): with no process
    /// of the run left, it is stale and the next fire takes it over.
    fn leave_to_lingerers(self: Box<Self>, kept: &[ProcId]) -> Lingering {
        let DirHeld {
            place, mut guard, ..
        } = *self;
        let mut lingering = Lingering {
            unnamed: None,
            noted: false,
        };
        if !kept.is_empty() {
            lingering.unnamed = guard.set_lingering(kept).err();
            lingering.noted = place.state_dir_exists()
                && crate::reap::note_lingering(place.dir(), kept, guard.record());
        }
        guard.leave_to_owner();
        lingering
    }
}

/// Why [`take_for_run`] took no lock.
#[derive(Debug)]
enum TakeError {
    /// Taking the lock failed: held by a live run ([`Error::Held`], or
    /// [`Error::Timeout`] after a wait, or [`Error::Queued`]), or another
    /// error of the lock.
    Acquire(Error),
    /// Stopping the live run to replace it failed.
    Stop(Error),
}

/// Takes `lock` for a run with `opts`. When a live run holds it and the
/// job gives a grace to replace it, that run is stopped first (TERM, then
/// KILL after the grace; `observer` told before and after, the stop
/// recorded) and the lock is taken out of line, before the waiters (the
/// run that replaces supersedes what they wait for), within the grace and
/// 5 seconds more. The stop is bounded by the job's deadline.
///
/// A lock of several slots is replaced only when every slot is held: a
/// free one is taken, nothing stopped. Then one run is stopped, the oldest
/// (the longest held, by its record), and a slot is taken once one frees.
/// Another account's holder is no run of this lock's to replace: held.
fn take_for_run(
    lock: &LockFile,
    opts: &AcquireOptions,
    job: &Job,
    journal: &Journal,
    place: &DirPlace,
    observer: &mut dyn RunObserver,
) -> Result<LockGuard, TakeError> {
    let (held, grace) = match (lock.acquire(opts), job.replace) {
        (Ok(g), _) => return Ok(g),
        (Err(Error::Held(h)) | Err(Error::Timeout { held: h, .. }), Some(grace)) => (h, grace),
        (Err(e), _) => return Err(TakeError::Acquire(e)),
    };
    let again = opts.clone().wait(grace + REPLACE_SLACK).fifo(false);
    if opts.slot_count() <= 1 && !held.record.is_ours() {
        return Err(TakeError::Acquire(Error::Held(held)));
    }
    let stopping = Stopping {
        deadline: job.deadline,
        grace,
        journal,
        place,
    };
    if opts.slot_count() > 1 {
        stopping.oldest(lock, opts.slot_count(), held, observer)?;
        return lock.acquire(&again).map_err(TakeError::Acquire);
    }
    observer.stopping(&held);
    crate::stop::stop(lock, GracefulStop::term(grace), job.deadline).map_err(TakeError::Stop)?;
    stopping.stopped(&held, observer);
    lock.acquire(&again).map_err(TakeError::Acquire)
}

/// A stop of a live run, so that a run takes its place.
struct Stopping<'a> {
    deadline: Option<Instant>,
    grace: Duration,
    journal: &'a Journal,
    place: &'a DirPlace,
}

impl Stopping<'_> {
    /// The run of `held` was stopped: told, and recorded.
    fn stopped(&self, held: &HeldBy, observer: &mut dyn RunObserver) {
        observer.stopped(held, "TERM");
        let ev = observer::stop_event(&held.record, Some("TERM"));
        log_event(self.journal, &ev, Some(self.place.notes()));
    }

    /// Stops the oldest run of `lock`'s `n` slots, told and recorded. None
    /// is held any more, or the oldest let go of its slot before the
    /// stop: nothing is stopped (a slot is free, or freeing, for the
    /// take). Another account's holders (`held`, every slot's at the look)
    /// are no runs of this lock's: when they alone hold the slots, the
    /// take is held.
    fn oldest(
        &self,
        lock: &LockFile,
        n: u32,
        held: Box<HeldBy>,
        observer: &mut dyn RunObserver,
    ) -> Result<(), TakeError> {
        let Some((slot, oldest)) = oldest_run(lock, n).map_err(TakeError::Stop)? else {
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
            crate::stop::stop_if(&slot, GracefulStop::term(self.grace), self.deadline, same)
                .map_err(TakeError::Stop)?
        {
            self.stopped(&oldest, observer);
        }
        Ok(())
    }
}

/// The slot of `lock`'s `n` held the longest by a live run of this
/// account's (the earliest `since` of its record; the earliest start of
/// its owner among runs that took their slots in the same second; then
/// the lowest slot), and its holder; `None` when no slot is held so.
fn oldest_run(lock: &LockFile, n: u32) -> Result<Option<(LockFile, HeldBy)>, Error> {
    let mut oldest: Option<(LockFile, HeldBy)> = None;
    for k in 0..n {
        let slot = lock.slot(k)?;
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
