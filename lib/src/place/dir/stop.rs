//! `stop`: ending the live run that holds a lock, and waiting until the
//! lock is free.
//!
//! The first signal goes to the run's onlyone wrapper, which forwards it to
//! its command, ends the strays and releases; when the wrapper is gone, to
//! every process of the run. Past the grace, everything of the run that is
//! left gets KILL. Every signal goes through [`crate::signal`]: never to a
//! process whose pid and start time differ from the record.

use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::error::{Error, Result};
use crate::lock::LockFile;
use crate::lock::verdict::{StaleReason, UnknownReason, Verdict};
use crate::procfs::{self, ProcId};
use crate::record::{Mode, Record};
use crate::signal::{AFTER_KILL, Ended, GracefulStop, needs_continue, signal_group};

/// What [`stop`] found and did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Stopped {
    /// Nothing held the lock.
    NotRunning,
    /// The lock was stale; it was cleared.
    WasStale {
        /// Why it was stale.
        reason: StaleReason,
    },
    /// The run was ended and the lock is free.
    Ended {
        /// The record of the run that was stopped.
        record: Box<Record>,
        /// The processes and what they needed.
        ended: Ended,
        /// How long it took.
        took: Duration,
    },
}

/// Ends the live run (or lock owner) recorded at `lock` with `how` (its
/// first signal to the wrapper, or, when the wrapper is gone, to every
/// process of the run; after its grace, KILL to all of them); then waits
/// until the lock is free and clears what is left, all within `deadline`.
/// Never signals a process whose pid and start time differ from the record.
pub fn stop(lock: &LockFile, how: GracefulStop, deadline: Option<Instant>) -> Result<Stopped> {
    stop_if(lock, how, deadline, |_| true).map(|s| s.unwrap_or(Stopped::NotRunning))
}

/// As [`stop`], for the live run whose record `wanted` accepts: `None`,
/// nothing signalled or cleared, when another run holds the lock. The
/// record is the one the stop acts on (read once, proven live), so a run
/// that took the lock after the caller chose is never the one signalled.
pub fn stop_if(
    lock: &LockFile,
    how: GracefulStop,
    deadline: Option<Instant>,
    wanted: impl Fn(&Record) -> bool,
) -> Result<Option<Stopped>> {
    let Some(record) = live_record(lock)? else {
        return match lock.reclaim_if_stale()? {
            Some(reason) => Ok(Some(Stopped::WasStale { reason })),
            None => Ok(Some(Stopped::NotRunning)),
        };
    };
    if !wanted(&record) {
        return Ok(None);
    }
    let started = Instant::now();
    let cap = |t: Instant| deadline.map_or(t, |d| d.min(t));
    let me = std::process::id();
    let denied = |pid: u32| Error::NotPermitted {
        path: lock.path().into(),
        pid,
        owner: crate::text::user_name(procfs::uid_of(pid).or(record.uid).unwrap_or(0)),
        me: crate::text::user_name(rustix::process::geteuid().as_raw()),
    };
    let mut ended = Ended::default();
    match record
        .owner_id()
        .filter(|w| w.is_alive() && record.mode == Mode::Run && record.may_name(w.pid))
    {
        // The wrapper forwards the signal to its command, ends the strays
        // and releases; give it the grace to do so.
        Some(wrapper) => {
            match wrapper.signal_as_stop(how.signal) {
                Ok(true) => ended.signalled.push(wrapper.pid),
                Ok(false) => {}
                Err(_) => return Err(denied(wrapper.pid)),
            }
            if needs_continue(how.signal) {
                continue_run(&record, wrapper);
            }
            wait_free(lock, &record, cap(Instant::now() + how.grace));
        }
        None => {
            let targets = crate::lock::judge::processes_of(&record, &[me], deadline)?;
            ended = how.end(&targets, deadline);
            if ended.signalled.is_empty()
                && let Some(&pid) = ended.denied.first()
            {
                return Err(denied(pid));
            }
        }
    }
    if still_held(lock, &record) {
        // Past the grace: KILL everything of the run that is left.
        let targets = crate::lock::judge::processes_of(&record, &[me], deadline)?;
        let more = GracefulStop::KILL.end(&targets, deadline);
        ended.killed.extend(more.signalled);
        ended.skipped.extend(more.skipped);
        ended.survivors = more.survivors;
        wait_free(lock, &record, cap(Instant::now() + AFTER_KILL));
    }
    if still_held(lock, &record) {
        let seen = lock.inspect()?;
        return Err(match seen.as_ref().and_then(|s| s.held_by(lock.path())) {
            Some(h) => Error::Timeout {
                waited: started.elapsed(),
                held: Box::new(h),
            },
            None => Error::NotStopped {
                path: lock.path().into(),
                waited: started.elapsed(),
            },
        });
    }
    // A wrapper killed by KILL leaves its record behind: clear it.
    lock.reclaim_if_stale()?;
    Ok(Some(Stopped::Ended {
        record: Box::new(record),
        ended,
        took: started.elapsed(),
    }))
}

/// True when `a` and `b` are the records of one run: its owner (pid and
/// start time) and its token. What [`stop_if`]'s callers ask for when
/// they chose a run by a look at its record.
pub(crate) fn same_run(a: &Record, b: &Record) -> bool {
    a.pid == b.pid && a.start == b.start && a.token == b.token
}

/// The record of the live run at `lock`; `None` when nothing holds it
/// (free, or stale). Refuses what cannot be stopped from here: an unknown
/// lock, a run of another PID namespace (its pids are another namespace's
/// numbers: signalling them here would hit unrelated processes), and this
/// process itself.
fn live_record(lock: &LockFile) -> Result<Option<Record>> {
    let Some(seen) = lock.inspect()? else {
        return Ok(None);
    };
    let record = match (seen.verdict, seen.record) {
        (Verdict::Unknown(reason), _) => {
            return Err(Error::Unknown {
                path: lock.path().into(),
                reason,
            });
        }
        (Verdict::Stale(_), _) => return Ok(None),
        (Verdict::Held(_), Ok(record)) => record,
        (Verdict::Held(_), Err(why)) => {
            return Err(Error::Unknown {
                path: lock.path().into(),
                reason: UnknownReason::Unreadable {
                    why: why.to_string(),
                },
            });
        }
    };
    if let Some(theirs) = record.pidns
        && let Some(ours) = procfs::own_pidns().filter(|&ours| ours != theirs)
    {
        return Err(Error::Unknown {
            path: lock.path().into(),
            reason: UnknownReason::OtherPidNamespace {
                theirs,
                ours,
                member: None,
            },
        });
    }
    if record.pid == std::process::id() {
        return Err(Error::StopSelf {
            path: lock.path().into(),
        });
    }
    Ok(Some(record))
}

/// Continues the wrapper and the command's process group of a run: a
/// stopped command (Ctrl-Z in a terminal that has since gone) acts on the
/// wrapper's forwarded TERM only once continued.
fn continue_run(record: &Record, wrapper: ProcId) {
    let _ = wrapper.signal(Signal::CONT);
    // The command leads its group, whose id is its pid; while the command
    // is this one (its pidfd is held), that group is the run's: when the
    // record may name it (a process of its file's owner, root's record
    // anyone's), as every process a stop signals.
    if let Some(cmd) = record.cmd_id
        && record.may_name(cmd.pid)
        && let Some(_held) = cmd.pidfd()
    {
        signal_group(cmd.pid, Signal::CONT);
    }
}

/// True while the lock still holds `record`'s token and is held.
fn still_held(lock: &LockFile, record: &Record) -> bool {
    match lock.inspect() {
        Ok(Some(seen)) => {
            matches!(seen.verdict, Verdict::Held(_))
                && seen.record.as_ref().is_ok_and(|r| r.token == record.token)
        }
        _ => false,
    }
}

/// Waits until the run of `record` no longer holds the lock, or `until`.
fn wait_free(lock: &LockFile, record: &Record, until: Instant) {
    let mut pause = Duration::from_millis(1);
    while still_held(lock, record) && Instant::now() < until {
        std::thread::sleep(pause.min(until.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
