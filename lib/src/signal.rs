//! Signalling processes without ever hitting the wrong one, and the one
//! graceful stop.
//!
//! A process is named by its identity ([`ProcId`]: pid *and* start time).
//! Before a signal, a pidfd is opened on the pid and the start time is read
//! again: if it matches, the pidfd is that process, and the signal goes
//! through the pidfd (`pidfd_send_signal(2)`), so a pid reused in between
//! cannot be hit.
//!
//! Ending is a [`GracefulStop`]: a first signal (TERM, then CONT, since a
//! stopped process acts on nothing but KILL until continued, as `kill` and
//! systemd do), a grace, then KILL, then a wait until every process is
//! really gone (a check right after must not see a finished run as alive).
//! Every wait is bounded by the grace and by an optional deadline. The
//! same sequence, for an event loop, ends a run's process group
//! (`GracefulStop::begin_group`).

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::procfs::{self, ProcId};

/// How long to wait for processes to vanish after KILL.
pub(crate) const AFTER_KILL: Duration = Duration::from_secs(5);

/// The grace between the first signal and KILL, unless told otherwise.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// A first signal, a grace, then KILL (watchexec's `GracefulStop`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GracefulStop {
    /// The first signal.
    pub signal: Signal,
    /// How long to wait after it before KILL.
    pub grace: Duration,
}

impl Default for GracefulStop {
    fn default() -> Self {
        GracefulStop {
            signal: Signal::TERM,
            grace: DEFAULT_GRACE,
        }
    }
}

/// What a [`GracefulStop`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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

impl ProcId {
    /// Opens a pidfd on it, and checks that it is still this process (the
    /// same start time, not dead).
    pub(crate) fn pidfd(self) -> Option<OwnedFd> {
        let pid = Pid::from_raw(i32::try_from(self.pid).ok()?)?;
        if self.pid > procfs::pid_max() {
            return None;
        }
        let fd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok()?;
        match procfs::read_stat(self.pid) {
            Ok(Some(st)) if st.start == self.start && !procfs::is_dead_process(self.pid, &st) => {
                Some(fd)
            }
            _ => None,
        }
    }

    /// Sends `sig`, only if it is still this process. `Ok(false)`: it is
    /// gone (or another process has its pid); EPERM is an error.
    pub(crate) fn signal(self, sig: Signal) -> Result<bool, Errno> {
        self.send(sig, false)
    }

    /// Sends `sig` as [`ProcId::signal`] does, marked as `onlyone stop`'s
    /// (see `sys::STOP_MARK`): the wrapper it is sent to records its run as
    /// stopped.
    pub(crate) fn signal_as_stop(self, sig: Signal) -> Result<bool, Errno> {
        self.send(sig, true)
    }

    fn send(self, sig: Signal, marked: bool) -> Result<bool, Errno> {
        let Some(fd) = self.pidfd() else {
            return Ok(false);
        };
        let sent = if marked {
            crate::sys::send_marked(fd.as_fd(), sig.as_raw())
        } else {
            rustix::process::pidfd_send_signal(&fd, sig)
        };
        match sent {
            Ok(()) => Ok(true),
            Err(Errno::PERM) => Err(Errno::PERM),
            Err(_) => Ok(false),
        }
    }
}

/// Parses a signal given by name (`TERM`, `SIGTERM`, in any case) or
/// number (`15`), with an error that says what a signal is.
pub fn parse_signal(s: &str) -> Result<Signal, String> {
    let n = match s.parse::<i32>() {
        Ok(n) => n,
        Err(_) => crate::sys::signal_by_name(s).ok_or_else(|| {
            format!("`{s}` is not a signal: use a name like TERM or INT, or a number")
        })?,
    };
    Signal::from_named_raw(n).ok_or_else(|| format!("`{s}` is not a signal onlyone can send"))
}

/// A signal's name without `SIG` (`TERM`), or `signal N`.
pub fn signal_name(sig: Signal) -> String {
    crate::sys::signal_name(sig.as_raw())
        .map_or_else(|| format!("signal {}", sig.as_raw()), str::to_owned)
}

/// Ends this process as the signal `sig` would by its default action, as a
/// wrapper whose command died of it should (GNU `timeout` does), so that a
/// calling shell loop stops on Ctrl-C. Returns if that does not end the
/// process (a signal whose default is to ignore or to stop).
pub fn die_by(sig: i32) {
    crate::sys::reraise(sig);
}

/// Ignores SIGPIPE, as Rust's own start does before `main`: a write to a
/// closed pipe then fails with EPIPE instead of ending the process, so that
/// a wrapper whose output went away still ends its run cleanly. For a
/// program that starts without Rust's start (`#![no_main]`, as the
/// `onlyone` command does). The command a run starts gets SIGPIPE back at
/// its default.
pub fn ignore_broken_pipe() {
    crate::sys::ignore(Signal::PIPE.as_raw());
}

/// Sleeps for `d`, unless one of `signals` comes first: then the signal
/// that ended the sleep. They are blocked meanwhile and read from a
/// signalfd, so that none ends the process by its default action while it
/// sleeps; the mask is restored after, and a signal taken is not left
/// pending. (A wait before something starts, that a stop must end.)
pub fn sleep_unless(d: Duration, signals: &[Signal]) -> std::io::Result<Option<Signal>> {
    let raw: Vec<i32> = signals.iter().map(|s| s.as_raw()).collect();
    let _blocked = crate::sys::Blocked::new(&raw)?;
    let reader = crate::sys::SignalReader::new(&raw)?;
    let until = Instant::now() + d;
    loop {
        while let Some((sig, _)) = reader.next() {
            if let Some(s) = signals.iter().find(|s| s.as_raw() == sig) {
                return Ok(Some(*s));
            }
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let timeout = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(&reader, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// A stopped process acts on no signal but KILL until it is continued:
/// after a signal that should end it, continue it.
pub(crate) fn needs_continue(sig: Signal) -> bool {
    !matches!(sig, Signal::KILL | Signal::CONT | Signal::STOP)
}

/// Sends `sig` to a process group (and CONT after it, when it needs one).
pub(crate) fn signal_group(group: u32, sig: Signal) {
    if let Some(pgid) = i32::try_from(group).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pgid, sig);
        if needs_continue(sig) {
            let _ = rustix::process::kill_process_group(pgid, Signal::CONT);
        }
    }
}

/// A graceful stop of a process group under way, for an event loop that
/// must keep forwarding signals and reaping while it waits: the KILL is
/// sent when [`Stopping::kill_if_due`] finds it due.
#[derive(Debug)]
pub(crate) struct Stopping {
    group: u32,
    kill_at: Option<Instant>,
}

impl Stopping {
    /// When KILL is due, if it still is.
    pub(crate) fn kill_at(&self) -> Option<Instant> {
        self.kill_at
    }

    /// Sends KILL to the group once its grace is over.
    pub(crate) fn kill_if_due(&mut self, now: Instant) {
        if self.kill_at.is_some_and(|k| now >= k) {
            signal_group(self.group, Signal::KILL);
            self.kill_at = None;
        }
    }
}

impl GracefulStop {
    /// KILL at once.
    pub const KILL: GracefulStop = GracefulStop {
        signal: Signal::KILL,
        grace: Duration::ZERO,
    };

    /// A stop with `grace` after TERM.
    pub fn term(grace: Duration) -> GracefulStop {
        GracefulStop {
            signal: Signal::TERM,
            grace,
        }
    }

    /// Sends the first signal to the process group `group` now; the KILL
    /// follows through the returned [`Stopping`].
    pub(crate) fn begin_group(self, group: u32) -> Stopping {
        signal_group(group, self.signal);
        Stopping {
            group,
            kill_at: (self.signal != Signal::KILL).then(|| Instant::now() + self.grace),
        }
    }

    /// Ends `targets`: the first signal (and CONT), up to the grace for them
    /// to exit, then KILL, then up to 5 s more (`AFTER_KILL`), all within
    /// `deadline`. Never signals a process whose identity has changed.
    pub fn end(self, targets: &[ProcId], deadline: Option<Instant>) -> Ended {
        let mut ended = Ended::default();
        let mut fds = Vec::new();
        for &t in targets {
            let Some(fd) = t.pidfd() else {
                ended.skipped.push(t.pid);
                continue;
            };
            match rustix::process::pidfd_send_signal(&fd, self.signal) {
                Ok(()) => {
                    ended.signalled.push(t.pid);
                    if needs_continue(self.signal) {
                        let _ = rustix::process::pidfd_send_signal(&fd, Signal::CONT);
                    }
                }
                Err(Errno::PERM) => ended.denied.push(t.pid),
                Err(_) => {}
            }
            fds.push((t.pid, fd));
        }
        let cap = |t: Instant| deadline.map_or(t, |d| d.min(t));
        let alive = wait_exit(&fds, cap(Instant::now() + self.grace));
        if alive.is_empty() || self.signal == Signal::KILL {
            ended.survivors = alive.iter().map(|&i| fds[i].0).collect();
            return ended;
        }
        for &i in &alive {
            let (pid, fd) = &fds[i];
            if rustix::process::pidfd_send_signal(fd, Signal::KILL).is_ok() {
                ended.killed.push(*pid);
            }
        }
        let left: Vec<(u32, OwnedFd)> = fds
            .into_iter()
            .enumerate()
            .filter(|(i, _)| alive.contains(i))
            .map(|(_, f)| f)
            .collect();
        let still = wait_exit(&left, cap(Instant::now() + AFTER_KILL));
        ended.survivors = still.iter().map(|&i| left[i].0).collect();
        ended
    }
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
        if polls.is_empty() {
            return alive;
        }
        // Once the time is up, one look without waiting: a process that
        // has exited by now is not reported alive.
        let left = until.saturating_duration_since(Instant::now());
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
        if left.is_zero() {
            return alive;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that has exited by the time a wait's time is up is not
    /// reported alive: one look is taken even then.
    #[test]
    fn a_wait_whose_time_is_up_still_sees_what_has_exited() {
        let mut child = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let pid = child.id();
        let id = ProcId::of(pid).unwrap();
        let fd = id.pidfd().unwrap();
        child.kill().unwrap();
        // Exited (a zombie until reaped): its pidfd polls readable.
        let t = Instant::now();
        while procfs::read_stat(pid)
            .ok()
            .flatten()
            .is_some_and(|s| s.state != 'Z')
        {
            assert!(t.elapsed() < Duration::from_secs(10), "it never exited");
            std::thread::sleep(Duration::from_millis(5));
        }
        let fds = [(pid, fd)];
        let past = Instant::now()
            .checked_sub(Duration::from_millis(1))
            .unwrap();
        assert!(wait_exit(&fds, past).is_empty());
        child.wait().unwrap();
    }
}
