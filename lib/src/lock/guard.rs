//! A held lock: released on drop, kept young against age-based cleaning
//! of `/tmp`, and told a run's command and what lingers after it.

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::fs::{Mode as FsMode, OFlags};

use super::LockFile;
use super::read::Read;
use super::waiter::{self, Waiter};
use crate::error::{Error, Result};
use crate::procfs::{self, ProcId};
use crate::record::Record;
use crate::verdict::Verdict;

/// A stale lock this acquisition removed on its way in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TakeOver {
    /// The stale record, when it was readable.
    pub record: Option<Record>,
    /// Why it was stale.
    pub reason: crate::StaleReason,
    /// Whether the lock's place was told of it (`LockFile::on_reclaim`),
    /// which closes the stale run in its journal.
    pub(crate) told: bool,
}

impl TakeOver {
    /// Whether the lock's place was told of this removal (a lock handed
    /// out by a place is): then the stale run's end is recorded already,
    /// and must not be again.
    pub fn told(&self) -> bool {
        self.told
    }
}

/// "a stale lock of pid 4242 (`./sync.sh --all`): pid 4242 has exited", or,
/// when the stale file could not be read as a record, "a stale lock: the
/// record is torn (...)".
impl std::fmt::Display for TakeOver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.record {
            Some(r) => write!(
                f,
                "a stale lock of pid {} (`{}`): {}",
                r.pid,
                r.cmd.as_deref().unwrap_or("?"),
                self.reason
            ),
            None => write!(f, "a stale lock: {}", self.reason),
        }
    }
}

/// How often a holder refreshes its lock file's times (`futimens`), so that
/// age-based cleaning of `/tmp` (systemd-tmpfiles, tmpreaper) never takes
/// a live lock: cleaners remove files whose times are all older than days.
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// [`REFRESH_INTERVAL`], or what a test sets.
pub(crate) fn refresh_interval() -> Duration {
    crate::test_hooks::refresh_interval().unwrap_or(REFRESH_INTERVAL)
}

/// Sets a file's access and modification times to now.
fn touch(fd: impl AsFd) -> rustix::io::Result<()> {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    rustix::fs::futimens(
        fd,
        &rustix::fs::Timestamps {
            last_access: now,
            last_modification: now,
        },
    )
}

/// A held lock. Dropping it releases the lock (ignoring errors); call
/// [`LockGuard::release`] to see them.
#[derive(Debug)]
pub struct LockGuard {
    pub(super) lock: LockFile,
    pub(super) record: Record,
    /// This acquisition's token (the record's).
    pub(super) token: String,
    /// The record's inode, kernel-locked for as long as the lock is held.
    pub(super) fd: Option<OwnedFd>,
    /// The process that acquired: a forked child must not release its
    /// parent's lock when its copy of the guard drops.
    pub(super) creator: rustix::process::Pid,
    pub(super) done: bool,
    pub(super) took_over: Option<TakeOver>,
    /// Which slot of the lock this is (0 for a lock of one slot).
    pub(super) slot: u32,
}

impl LockGuard {
    /// The stale lock this acquisition took over, if it did: worth telling
    /// an operator (a previous holder crashed).
    pub fn took_over(&self) -> Option<&TakeOver> {
        self.took_over.as_ref()
    }

    /// The record this guard wrote.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// This acquisition's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Which slot of its lock this guard holds: 0..N-1 for a lock of N
    /// slots, 0 for a lock of one.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The lock file (for a slot above 0, the slot's own file).
    pub fn lock(&self) -> &LockFile {
        &self.lock
    }

    /// Releases the lock and reports what went wrong, if anything.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = onlyone::LockFile::open(dir.path().join("sync.lock"))?;
    /// lock.try_acquire()?.release()?;
    /// assert!(lock.inspect()?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn release(mut self) -> Result<()> {
        self.done = true;
        let result = if crate::sys::pid() == self.creator {
            self.lock.release_token_until(&self.token, None).map(|_| ())
        } else {
            Ok(())
        };
        self.fd = None;
        result
    }

    /// Records the run's command (its pid and start time) in the lock file.
    /// The record is replaced atomically; its token stays the same.
    pub fn set_command(&mut self, pid: u32) -> Result<()> {
        // It may have exited already: a zombie child of the caller still
        // has its identity until it is reaped.
        let st = procfs::read_stat(pid)
            .ok()
            .flatten()
            .ok_or_else(|| Error::BadOwner {
                pid,
                why: "it is not running".into(),
                source: None,
            })?;
        let id = ProcId {
            pid,
            start: st.start,
        };
        let mut new = self.record.clone();
        new.cmd_id = Some(id);
        self.replace(new)
    }

    /// Names in the record the processes that outlive a lingering run's
    /// command (at most [`crate::record::MAX_LINGER`]), so that the verdict
    /// finds them once this process has exited, whatever their environment,
    /// and when (`lingered=`, now): what starts later is the run's work only
    /// by descent from them. The record is replaced atomically.
    pub fn set_lingering(&mut self, procs: &[ProcId]) -> Result<()> {
        let mut new = self.record.clone();
        new.linger = procs
            .iter()
            .copied()
            .take(crate::record::MAX_LINGER)
            .collect();
        new.lingered = Some(crate::work::now_ticks());
        self.replace(new)
    }

    /// Writes `new` to a temp file, kernel-locked, and renames it over the
    /// record under the removal guard, if the path still holds this token.
    fn replace(&mut self, new: Record) -> Result<()> {
        let writer = procfs::own_identity()
            .map_err(|e| Error::io("read", "/proc/self/stat", e))?
            .id;
        let mut temp = self.lock.write_temp(writer, &new.to_bytes())?;
        self.lock.replace_record(&self.token, &mut temp)?;
        self.fd = Some(temp.into_kept());
        self.record = new;
        Ok(())
    }

    /// Refreshes the lock file's times, so that age-based cleaning of
    /// `/tmp` does not take it while it is held (once a day is enough).
    pub fn refresh(&self) -> Result<()> {
        match &self.fd {
            Some(fd) => touch(fd).map_err(|e| Error::io("refresh", self.lock.path(), e)),
            None => Ok(()),
        }
    }

    /// Leaves the lock held, to its recorded owner (for
    /// [`super::Owner::Pid`]): nothing is released, and this process's
    /// kernel lock is dropped. Returns the record.
    pub fn leave_to_owner(mut self) -> Record {
        self.done = true;
        self.fd = None;
        self.record.clone()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done && crate::sys::pid() == self.creator {
            let _ = self.lock.release_token_until(&self.token, None);
        }
    }
}

impl LockFile {
    /// Keeps the lock file's times fresh (once a day) for as
    /// long as it holds `token` and is held, for an owner that is not this
    /// process (a shell script that called `onlyone acquire`): no process
    /// of onlyone's would otherwise live to do it. Wakes when the lock file
    /// is removed, when the process that proves it held (the owner, then
    /// each worker that carries the run on) exits, and at each interval;
    /// returns once the lock is released, taken over or stale.
    pub fn keep_fresh(&self, token: &str) -> Result<()> {
        let waiter = Waiter::new(self, false);
        let mut refresh_at = Instant::now() + refresh_interval();
        // A holder found gone as it was to be watched: the next look should
        // not name it again; if it does, it is watched by looking again.
        let mut gone = None;
        loop {
            let Some(ev) = self.read_at_path(Read::Look)? else {
                return Ok(());
            };
            if !ev
                .record
                .as_ref()
                .is_ok_and(|r| r.token.as_deref() == Some(token))
            {
                return Ok(());
            }
            let Verdict::Held(held) = crate::judge::judge(&ev, None) else {
                return Ok(());
            };
            // The file was just written when this began: the first refresh
            // is due an interval later.
            if Instant::now() >= refresh_at {
                if let Ok(fd) = self.open_entry(
                    self.name(),
                    OFlags::RDONLY | OFlags::NONBLOCK,
                    FsMode::empty(),
                ) {
                    let _ = touch(&fd);
                }
                refresh_at = Instant::now() + refresh_interval();
            }
            let watched = held.watchable_pid().filter(|&p| gone != Some(p));
            match watched.map(waiter::pidfd) {
                // Gone between the look and now: look again.
                Some(Err(rustix::io::Errno::SRCH)) => {
                    gone = watched;
                    continue;
                }
                Some(Ok(fd)) => {
                    gone = None;
                    waiter.wait_on(Some(&fd), refresh_at);
                }
                // Nothing here to watch (a holder in another PID namespace,
                // a foreign kernel lock): look again now and then.
                _ => {
                    let relook = refresh_at.min(Instant::now() + KEEPER_RELOOK);
                    if waiter.inotify.is_none() {
                        std::thread::sleep(relook.saturating_duration_since(Instant::now()));
                    } else {
                        waiter.wait_on(None, relook);
                    }
                }
            }
        }
    }
}

/// How often [`LockFile::keep_fresh`] looks again at a lock whose holder
/// it cannot watch exit.
const KEEPER_RELOOK: Duration = Duration::from_secs(60);
