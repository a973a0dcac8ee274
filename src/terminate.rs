//! Ending processes without ever signalling the wrong one, and stopping a
//! run.
//!
//! A process is named by pid *and* start time. Before a signal, a pidfd is
//! opened on the pid and the start time is read again: if it matches, the
//! pidfd is that process, and the signal goes through the pidfd
//! (`pidfd_send_signal`), so a pid reused in between cannot be hit.
//!
//! Ending is a graceful stop: a first signal (TERM), a grace period, then
//! KILL, then a wait until every process is really gone (a check right
//! after must not see a finished run as alive). Every wait is bounded by
//! the grace and by an optional deadline.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::error::{Error, Result};
use crate::lock::LockFile;
use crate::procfs;
use crate::record::{Mode, Record};
use crate::verdict::Verdict;

/// How long to wait for processes to vanish after KILL.
const AFTER_KILL: Duration = Duration::from_secs(5);

/// A process to end: its pid and the start time it must still have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The pid.
    pub pid: u32,
    /// Its start time, clock ticks since boot.
    pub start: u64,
}

/// What [`terminate`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ended {
    /// Processes that got the first signal.
    pub signalled: Vec<u32>,
    /// Processes that needed KILL.
    pub killed: Vec<u32>,
    /// Processes still alive when the time ran out.
    pub survivors: Vec<u32>,
    /// Processes not signalled because their pid now names another process
    /// (or none).
    pub skipped: Vec<u32>,
    /// Processes this user may not signal (EPERM).
    pub denied: Vec<u32>,
}

impl Ended {
    /// True when every target is gone.
    pub fn all_gone(&self) -> bool {
        self.survivors.is_empty()
    }
}

/// Opens a pidfd on `t.pid` and checks that it is still the process that
/// started at `t.start`.
pub fn open_verified(t: Target) -> Option<OwnedFd> {
    let pid = Pid::from_raw(i32::try_from(t.pid).ok()?)?;
    if t.pid > procfs::pid_max() {
        return None;
    }
    let fd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok()?;
    match procfs::read_stat(t.pid) {
        Ok(Some(st)) if st.start == t.start && !procfs::is_dead_process(t.pid, &st) => Some(fd),
        _ => None,
    }
}

/// Sends `sig` to the process `t`, only if it is still that process.
/// Returns whether the signal was sent; EPERM is an error.
pub fn signal_verified(t: Target, sig: Signal) -> std::result::Result<bool, rustix::io::Errno> {
    match open_verified(t) {
        None => Ok(false),
        Some(fd) => match rustix::process::pidfd_send_signal(&fd, sig) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::PERM) => Err(rustix::io::Errno::PERM),
            Err(_) => Ok(false),
        },
    }
}

/// A stopped process acts on no signal but KILL until it is continued:
/// after a signal that should end it, continue it, as `kill` and systemd
/// do.
fn needs_continue(sig: Signal) -> bool {
    !matches!(sig, Signal::KILL | Signal::CONT | Signal::STOP)
}

/// Waits until every pidfd reports its process gone, or `until`. Returns
/// the indexes of those still alive.
fn wait_exit(fds: &[(u32, OwnedFd)], until: Instant) -> Vec<usize> {
    let mut alive: Vec<usize> = (0..fds.len()).collect();
    loop {
        // A pidfd polls readable once its process has exited.
        let mut polls: Vec<PollFd<'_>> = alive
            .iter()
            .map(|&i| PollFd::new(&fds[i].1, PollFlags::IN))
            .collect();
        let now = Instant::now();
        if polls.is_empty() || now >= until {
            return alive;
        }
        let left = until - now;
        let ts = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let _ = rustix::event::poll(&mut polls, Some(&ts));
        let done: Vec<bool> = polls.iter().map(|p| !p.revents().is_empty()).collect();
        drop(polls);
        alive = alive
            .into_iter()
            .zip(done)
            .filter_map(|(i, d)| (!d).then_some(i))
            .collect();
    }
}

/// Ends `targets`: `first` signal, up to `grace` for them to exit, then
/// KILL, then up to 5 s more, all within `deadline`.
pub fn terminate(
    targets: &[Target],
    first: Signal,
    grace: Duration,
    deadline: Option<Instant>,
) -> Ended {
    let mut ended = Ended::default();
    let mut fds = Vec::new();
    for &t in targets {
        match open_verified(t) {
            Some(fd) => {
                match rustix::process::pidfd_send_signal(&fd, first) {
                    Ok(()) => {
                        ended.signalled.push(t.pid);
                        if needs_continue(first) {
                            let _ = rustix::process::pidfd_send_signal(&fd, Signal::CONT);
                        }
                    }
                    Err(rustix::io::Errno::PERM) => ended.denied.push(t.pid),
                    Err(_) => {}
                }
                fds.push((t.pid, fd));
            }
            None => ended.skipped.push(t.pid),
        }
    }
    let cap = |t: Instant| deadline.map_or(t, |d| d.min(t));
    let alive = wait_exit(&fds, cap(Instant::now() + grace));
    if alive.is_empty() || first == Signal::KILL {
        ended.survivors = alive.iter().map(|&i| fds[i].0).collect();
        return ended;
    }
    let mut rest = Vec::new();
    for i in alive {
        let (pid, fd) = &fds[i];
        if rustix::process::pidfd_send_signal(fd, Signal::KILL).is_ok() {
            ended.killed.push(*pid);
        }
        rest.push(i);
    }
    let left: Vec<(u32, OwnedFd)> = fds
        .into_iter()
        .enumerate()
        .filter(|(i, _)| rest.contains(i))
        .map(|(_, f)| f)
        .collect();
    let alive = wait_exit(&left, cap(Instant::now() + AFTER_KILL));
    ended.survivors = alive.iter().map(|&i| left[i].0).collect();
    ended
}

/// The live processes of the run (or lock) a record describes, wrapper or
/// owner first, then the command, then the rest of the run. `skip` names
/// processes never to include (the caller).
pub fn processes_of(record: &Record, skip: &[u32]) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    let push = |pid: u32, start: u64, out: &mut Vec<Target>| {
        if !skip.contains(&pid) && !out.iter().any(|t: &Target| t.pid == pid) {
            out.push(Target { pid, start });
        }
    };
    if let Some(start) = record.start
        && procfs::probe(record.pid, Some(start)).is_alive()
    {
        push(record.pid, start, &mut out);
    }
    if let (Some(pid), Some(start)) = (record.cmd_pid, record.cmd_start)
        && procfs::probe(pid, Some(start)).is_alive()
    {
        push(pid, start, &mut out);
    }
    for &(pid, start) in &record.linger {
        if procfs::probe(pid, Some(start)).is_alive() {
            push(pid, start, &mut out);
        }
    }
    if let Some(spec) = record.scan_spec() {
        let scan = procfs::run_members(&spec, skip, false)
            .map_err(|e| Error::io("list processes in", "/proc", e))?;
        for m in scan.members {
            push(m.pid, m.start, &mut out);
        }
    }
    Ok(out)
}

/// What [`stop`] found and did.
#[derive(Debug, Clone)]
pub enum Stopped {
    /// Nothing held the lock.
    NotRunning,
    /// The lock was stale; it was cleared.
    WasStale {
        /// Why it was stale.
        reason: crate::verdict::StaleReason,
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

/// Ends the live run (or lock owner) recorded at `lock`: `first` to the
/// wrapper (which forwards it to its command and cleans up) or, when the
/// wrapper is gone, to every process of the run; after `grace`, KILL to all
/// of them; then waits until the lock is free and clears what is left.
/// Never signals a process whose pid and start time differ from the record.
pub fn stop(
    lock: &LockFile,
    first: Signal,
    grace: Duration,
    deadline: Option<Instant>,
) -> Result<Stopped> {
    let me = std::process::id();
    let Some(seen) = lock.inspect()? else {
        return Ok(Stopped::NotRunning);
    };
    let record = match (seen.verdict, seen.record) {
        (Verdict::Unknown(reason), _) => {
            return Err(Error::Unknown {
                path: lock.path().into(),
                reason,
            });
        }
        (Verdict::Stale(reason), _) => {
            lock.reclaim_if_stale()?;
            return Ok(Stopped::WasStale { reason });
        }
        (Verdict::Held(_), Ok(record)) => record,
        (Verdict::Held(_), Err(why)) => {
            return Err(Error::Unknown {
                path: lock.path().into(),
                reason: crate::verdict::UnknownReason::Unreadable { why: why.0 },
            });
        }
    };
    // Its pids are another namespace's numbers: signalling them here would
    // hit unrelated processes.
    if let Some(theirs) = record.pidns
        && procfs::own_pidns().is_some_and(|ours| ours != theirs)
    {
        return Err(Error::Unknown {
            path: lock.path().into(),
            reason: crate::verdict::UnknownReason::OtherPidNamespace {
                theirs,
                ours: procfs::own_pidns().unwrap_or(0),
                member: None,
            },
        });
    }
    if record.pid == me {
        return Err(Error::BadOwner {
            pid: me,
            why: "the run to stop is this process itself".into(),
        });
    }
    let started = Instant::now();
    let cap = |t: Instant| deadline.map_or(t, |d| d.min(t));
    let wrapper_alive = record
        .start
        .is_some_and(|s| procfs::probe(record.pid, Some(s)).is_alive());
    let mut ended = Ended::default();
    let denied = |pid: u32| Error::NotPermitted {
        path: lock.path().into(),
        pid,
        owner: crate::text::user_name(procfs::uid_of(pid).or(record.uid).unwrap_or(0)),
        me: crate::text::user_name(rustix::process::geteuid().as_raw()),
    };
    if wrapper_alive && record.mode == Mode::Run {
        // The wrapper forwards the signal to its command, ends the strays
        // and releases; give it the grace to do so.
        let t = Target {
            pid: record.pid,
            start: record.start.unwrap_or(0),
        };
        match signal_verified(t, first) {
            Ok(true) => ended.signalled.push(t.pid),
            Ok(false) => {}
            Err(_) => return Err(denied(t.pid)),
        }
        if needs_continue(first) {
            continue_run(&record);
        }
        wait_free(lock, &record, cap(Instant::now() + grace));
    } else {
        let targets = processes_of(&record, &[me])?;
        ended = terminate(&targets, first, grace, deadline);
        if ended.signalled.is_empty()
            && let Some(&pid) = ended.denied.first()
        {
            return Err(denied(pid));
        }
    }
    if still_held(lock, &record) {
        // Past the grace: KILL everything of the run that is left.
        let targets = processes_of(&record, &[me])?;
        let more = terminate(&targets, Signal::KILL, Duration::ZERO, deadline);
        ended.killed.extend(more.signalled);
        ended.skipped.extend(more.skipped);
        ended.survivors = more.survivors;
        wait_free(lock, &record, cap(Instant::now() + AFTER_KILL));
    }
    if still_held(lock, &record) {
        let seen = lock.inspect()?;
        let holder = seen.as_ref().and_then(|s| s.held_by(lock.path()));
        return match holder {
            Some(h) => Err(Error::Timeout {
                waited: started.elapsed(),
                held: Box::new(h),
            }),
            None => Err(Error::Contended {
                path: lock.path().into(),
                tries: 0,
            }),
        };
    }
    // A wrapper killed by KILL leaves its record behind: clear it.
    lock.reclaim_if_stale()?;
    Ok(Stopped::Ended {
        record: Box::new(record),
        ended,
        took: started.elapsed(),
    })
}

/// Continues the wrapper and the command's process group of a run: a
/// stopped command (Ctrl-Z in a terminal that has since gone) acts on the
/// wrapper's forwarded TERM only once continued.
fn continue_run(record: &Record) {
    let wrapper = Target {
        pid: record.pid,
        start: record.start.unwrap_or(0),
    };
    let _ = signal_verified(wrapper, Signal::CONT);
    if let (Some(pid), Some(start)) = (record.cmd_pid, record.cmd_start)
        && let Some(fd) = open_verified(Target { pid, start })
    {
        // The command leads its group, whose id is its pid; while the
        // command is this one (the pidfd is held), that group is the run's.
        let _ = rustix::process::pidfd_send_signal(&fd, Signal::CONT);
        if let Some(group) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process_group(group, Signal::CONT);
        }
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
