//! Waiting for a held lock: sleeps until the lock file is removed
//! (inotify on the directory), the holding process exits (pidfd), or a time
//! passes, whichever is first.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use rustix::io::Errno;

use super::LockFile;

/// Sleeps until the lock file is removed, the holding process exits, or a
/// time passes, whichever is first.
pub(super) struct Waiter {
    pub(super) inotify: Option<OwnedFd>,
    name: OsString,
    /// The start of the names of the lock's tickets, when the waiter is in
    /// line: a ticket's removal may make it the head.
    line: Option<Vec<u8>>,
    /// The start of the names of the lock's other slots, for a lock of
    /// several: the removal of any slot's file frees a slot.
    slots: Option<Vec<u8>>,
}

impl Waiter {
    pub(super) fn new(lock: &LockFile, in_line: bool) -> Waiter {
        use rustix::fs::inotify;
        let inotify = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .ok()
            .filter(|fd| {
                let dir = format!("/proc/self/fd/{}", lock.inner.dir.as_raw_fd());
                inotify::add_watch(
                    fd,
                    dir,
                    inotify::WatchFlags::DELETE
                        | inotify::WatchFlags::MOVED_FROM
                        | inotify::WatchFlags::DELETE_SELF
                        | inotify::WatchFlags::MOVE_SELF,
                )
                .is_ok()
            });
        Waiter {
            inotify,
            name: lock.name().to_os_string(),
            line: in_line.then(|| super::queue::ticket_prefix(lock)),
            slots: None,
        }
    }

    /// This waiter, woken also by the removal of a file whose name starts
    /// with `prefix` (`NAME.slot.`: another slot of the lock), as by the
    /// lock file's own.
    pub(super) fn watching_slots(mut self, prefix: Vec<u8>) -> Waiter {
        self.slots = Some(prefix);
        self
    }

    /// Waits until `until`, the removal of a slot's file (or of a ticket of
    /// its line), or the exit of one of `holders`. True when a slot's file
    /// was seen removed (a slot let go) meanwhile.
    pub(super) fn wait_any(&self, holders: &[u32], until: Instant) -> bool {
        let fds: Vec<OwnedFd> = holders.iter().filter_map(|&p| pidfd(p).ok()).collect();
        self.wait_on_all(&fds, until)
    }

    /// Waits until `until`, the removal of the lock file (or of a ticket of
    /// its line), or the exit of `holder` (none for 0). True when the lock
    /// file itself was seen removed (let go) meanwhile.
    pub(super) fn wait(&self, holder: u32, until: Instant) -> bool {
        self.wait_on(pidfd(holder).ok().as_ref(), until)
    }

    /// Waits until `until`, the removal of the lock file (or of a ticket of
    /// its line), or the exit of the process `pidfd` refers to. True when
    /// the lock file itself was seen removed meanwhile.
    pub(super) fn wait_on(&self, pidfd: Option<&OwnedFd>, until: Instant) -> bool {
        self.wait_on_all(pidfd.as_slice(), until)
    }

    /// Waits until `until`, the removal of the lock file (or of a ticket of
    /// its line, or of a slot's file), or the exit of one of the processes
    /// `pidfds` refer to. True when the lock file (or a slot's) was seen
    /// removed meanwhile.
    fn wait_on_all<F: AsFd>(&self, pidfds: &[F], until: Instant) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec};
        loop {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            let left = until - now;
            let timeout = Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            };
            let mut fds = Vec::with_capacity(1 + pidfds.len());
            if let Some(fd) = &self.inotify {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            for fd in pidfds {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            if fds.is_empty() {
                std::thread::sleep(left.min(Duration::from_millis(10)));
                return false;
            }
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(_) => {
                    std::thread::sleep(left.min(Duration::from_millis(10)));
                    return false;
                }
            }
            let pid_exited = fds[usize::from(self.inotify.is_some())..]
                .iter()
                .any(|f| !f.revents().is_empty());
            drop(fds);
            let (ours, lock_gone) = self.drain_names_us();
            if pid_exited || ours {
                return lock_gone;
            }
        }
    }

    /// Reads pending inotify events: whether one concerns the lock file, a
    /// ticket of its line, or the directory itself; and whether the lock
    /// file was removed.
    fn drain_names_us(&self) -> (bool, bool) {
        use rustix::fs::inotify;
        let Some(fd) = &self.inotify else {
            return (false, false);
        };
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(fd, &mut buf);
        let (mut ours, mut lock_gone) = (false, false);
        while let Ok(ev) = reader.next() {
            let is_lock = ev.file_name().is_some_and(|n| {
                let n = n.to_bytes();
                n == self.name.as_bytes() || self.slots.as_ref().is_some_and(|p| n.starts_with(p))
            });
            lock_gone |= is_lock;
            let name_matches = is_lock
                || ev.file_name().is_some_and(|n| {
                    self.line
                        .as_ref()
                        .is_some_and(|p| n.to_bytes().starts_with(p))
                });
            let self_event = ev
                .events()
                .intersects(inotify::ReadFlags::DELETE_SELF | inotify::ReadFlags::MOVE_SELF);
            ours |= name_matches || self_event;
        }
        (ours, lock_gone)
    }
}

/// A pidfd of `pid` (`Errno::SRCH` once it has exited; `Errno::INVAL` for
/// pid 0).
pub(super) fn pidfd(pid: u32) -> rustix::io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or(Errno::INVAL)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
}
