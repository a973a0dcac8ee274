//! The lock protocol: atomic acquire, guarded takeover and release, inspect.
//!
//! - **Acquire** ([`acquire`](LockFile::acquire), in `acquire.rs`). The
//!   record is written whole to a temp file in the lock's directory
//!   (`temp.rs`), on which the writer takes a kernel lock (`flock(LOCK_EX)`)
//!   that it keeps for as long as it holds the lock. The temp file is then
//!   `link(2)`ed to the lock path: the record appears there atomically and
//!   complete, and `EEXIST` is the contention signal. The acquirer reads the
//!   path back and checks that it holds its own record before it reports
//!   success. No fsync: a record torn by a power loss predates the current
//!   boot, which makes it stale.
//! - **Contention.** The record at the path is judged ([`crate::lock::verdict`]).
//!   Held: an error naming the owner, or, when waiting, a sleep until the
//!   file is removed (inotify), the holding process exits (pidfd), or a
//!   periodic re-probe is due (`waiter.rs`). Unknown: an error. Stale: a
//!   reclaim, then a new attempt.
//! - **Removal** of a lock file, a reclaim or a release alike, happens only
//!   in one critical section (`removal.rs`): under the *removal guard*,
//!   `flock(LOCK_EX)` on `DIR/.onlyone-guard.UID` for a file UID owns (mode
//!   0600 and UID's, so no other account can open it, let alone hold it;
//!   everyone who may remove the file takes that one), which onlyone never deletes
//!   and the kernel frees when its holder dies, so a crash inside the guard
//!   blocks nobody. Under the guard the record is read again and removed
//!   only if it is still byte for byte the record that was judged (reclaim)
//!   or still carries the releaser's token or owner (release). Inode
//!   numbers are never compared: they are reused at once.
//! - **Retries** are bounded ([`MAX_TAKEOVER_TRIES`]). A look that finds the
//!   path empty does not use one up. Running out of tries is
//!   [`Error::Contended`], never "held": "held" is reported only when a
//!   probe proved a live owner.
//! - **The guard** ([`LockGuard`], `guard.rs`) releases on drop, keeps the
//!   record's times young against age-based cleaning of `/tmp`, and records
//!   a run's command and what lingers after it.

mod acquire;
mod busy;
mod guard;
pub(crate) mod idle;
pub(crate) mod judge;
pub(crate) mod members;
pub(crate) mod queue;
mod read;
mod removal;
mod slots;
mod temp;
pub mod verdict;
mod waiter;
pub(crate) mod work;

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::OFlags;

use crate::error::{Error, HeldBy, Result};
use crate::lock::verdict::Verdict;
use crate::record::{NotARecord, Record};

pub use acquire::{AcquireOptions, Owner, new_token};
pub use busy::BusyPolicy;
pub use guard::LockGuard;
pub use guard::TakeOver;
#[cfg_attr(not(feature = "command"), allow(unused_imports))]
pub use queue::{HEAD_GRACE, Waiting};
pub use removal::{Released, Releaser};
#[cfg_attr(not(feature = "command"), allow(unused_imports))]
pub use slots::{SLOT_INFIX, slot_of_path};

pub(crate) use guard::refresh_interval;

/// Takeover attempts before [`Error::Contended`].
pub const MAX_TAKEOVER_TRIES: u32 = 16;

/// How often a waiter re-probes a held lock, to notice an owner that died
/// without removing its record.
pub(crate) const REPROBE_INTERVAL: Duration = Duration::from_millis(250);

/// A lock file, and an open handle on its directory.
///
/// Opening does not take the lock: see [`LockFile::try_acquire`],
/// [`LockFile::acquire`] and [`LockFile::inspect`].
#[derive(Clone, Debug)]
pub struct LockFile {
    inner: Arc<Inner>,
    /// Caps every wait for the removal guard (see [`LockFile::with_deadline`]).
    deadline: Option<Instant>,
    /// Write even on a network or FUSE filesystem (see
    /// [`LockFile::allow_shared_fs`]).
    allow_shared_fs: bool,
    /// Told of every stale record a call through this handle (or one of
    /// its slots) removes (see [`LockFile::on_reclaim`]).
    on_reclaim: Option<OnReclaim>,
}

/// What a removal of a stale record is told to: the lock (or slot) it was
/// removed from and what was taken over. The place that keeps the lock's
/// journal closes the stale run there, so that every stale run that any
/// call clears (a take, a precheck, a stop) is closed once, by the
/// process that removed its record, whether or not that process then
/// takes the lock.
#[derive(Clone)]
pub(crate) struct OnReclaim(Arc<Reclaimed>);

/// The hook [`OnReclaim`] calls.
type Reclaimed = dyn Fn(&LockFile, &TakeOver) + Send + Sync;

impl OnReclaim {
    /// Calls `f` for every stale record removed.
    pub(crate) fn new(f: impl Fn(&LockFile, &TakeOver) + Send + Sync + 'static) -> OnReclaim {
        OnReclaim(Arc::new(f))
    }
}

impl std::fmt::Debug for OnReclaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnReclaim")
    }
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    dir_path: PathBuf,
    name: OsString,
    /// The directory, shared by the handles of the locks in it.
    dir: Arc<OwnedFd>,
    /// Set once the directory was found safe to write in: its filesystem
    /// type (`statfs` `f_type`).
    dir_ok: std::sync::OnceLock<i64>,
}

/// What [`LockFile::inspect`] found at a lock path that exists.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Inspection {
    /// The record, or why the file is not one.
    pub record: std::result::Result<Record, NotARecord>,
    /// The verdict.
    pub verdict: Verdict,
    /// The file's modification time (Unix seconds).
    pub mtime: i64,
    /// The file's owner (uid).
    pub owner: u32,
}

impl Inspection {
    /// Whether the file speaks for this process's account: owned by this
    /// user or by root (see [`Record::is_ours`]). Another account's file
    /// is that account's holder: never a run of this account's.
    pub fn is_ours(&self) -> bool {
        self.owner == 0 || self.owner == rustix::process::geteuid().as_raw()
    }

    /// The account that owns the file, when it is another than this
    /// process's and root ([`Inspection::is_ours`]).
    pub fn other_account(&self) -> Option<u32> {
        (!self.is_ours()).then_some(self.owner)
    }

    /// The owner, as the error type would carry it, when the verdict is held.
    pub fn held_by(&self, path: &Path) -> Option<HeldBy> {
        match (&self.verdict, &self.record) {
            (Verdict::Held(holder), Ok(record)) => {
                Some(HeldBy::new(path.to_owned(), record.clone(), holder.clone()))
            }
            _ => None,
        }
    }

    /// The processes of a held lock that are stopped (state `T`: Ctrl-Z,
    /// SIGSTOP): the one that proves it held, and the run's command. They
    /// hold the lock and do no work.
    pub fn stopped(&self) -> Vec<u32> {
        let Verdict::Held(h) = &self.verdict else {
            return Vec::new();
        };
        let mut pids = vec![h.pid()];
        // The command, when the record may name it (a forged record may
        // name anyone's process).
        if let Ok(r) = &self.record
            && let Some(c) = r.cmd_id
            && c.pid != h.pid()
            && r.may_name(c.pid)
        {
            pids.push(c.pid);
        }
        pids.retain(|&p| crate::procfs::is_stopped(p));
        pids
    }
}

/// Who holds a lock, as [`active_pid`] tells it without taking anything:
/// the seed's `ActivePID`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Active {
    /// The process to name: the one that proves the lock held (its owner,
    /// or, once the owner is gone, the run's command or a leftover process
    /// of the run), else the owner the record names. `None` when no
    /// process can be named: the file is not a record (a process outside
    /// onlyone may hold a kernel lock on it, as `flock(1)` does).
    pub pid: Option<u32>,
    /// True when a live process holds the lock: a run is active.
    pub alive: bool,
    /// The verdict behind the answer. [`Verdict::Unknown`] is neither alive
    /// nor provably dead: a caller that would clean up after a run leaves
    /// that lock's state alone.
    pub verdict: Verdict,
}

impl Active {
    fn of(seen: &Inspection) -> Active {
        let pid = match &seen.verdict {
            Verdict::Held(h) => Some(h.pid()).filter(|&p| p != 0),
            _ => seen.record.as_ref().ok().map(|r| r.pid),
        };
        Active {
            pid,
            alive: matches!(seen.verdict, Verdict::Held(_)),
            verdict: seen.verdict.clone(),
        }
    }
}

/// Who holds the lock at `path`, read-only (the seed's `ActivePID`): for a
/// sibling command (`status`, a cleanup) that must report or avoid the
/// active run without taking the lock. `None` when nothing is running: no
/// lock file, or no lock directory yet (before the first run, or `/run`
/// after a reboot). Nothing is created, written or removed, not even a
/// stale lock: the next acquisition takes that over.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("state/sync.lock"); // its directory does not exist
/// assert_eq!(onlyone::active_pid(&path)?, None);
///
/// std::fs::create_dir(dir.path().join("state"))?;
/// let guard = onlyone::LockFile::open(&path)?.try_acquire()?;
/// let active = onlyone::active_pid(&path)?.expect("a lock file");
/// assert_eq!((active.pid, active.alive), (Some(std::process::id()), true));
/// guard.release()?;
/// assert_eq!(onlyone::active_pid(&path)?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn active_pid(path: impl AsRef<Path>) -> Result<Option<Active>> {
    let lock = match LockFile::open(path) {
        Ok(l) => l,
        Err(Error::MissingDir { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(lock.inspect()?.as_ref().map(Active::of))
}

impl LockFile {
    /// Names a lock file and opens its directory. The directory must exist;
    /// the file need not. To ask who holds a lock whose directory may not
    /// exist yet, without taking it, see [`active_pid`].
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let lock = onlyone::LockFile::open(dir.path().join("sync.lock"))?;
    /// assert_eq!(lock.path(), dir.path().join("sync.lock"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<LockFile> {
        Self::open_sharing(path, None)
    }

    /// Names another lock file. When it lives in the same directory as this
    /// one, the directory handle is shared instead of opened again (a
    /// `status` over thousands of locks opens it once).
    pub fn sibling(&self, path: impl AsRef<Path>) -> Result<LockFile> {
        Self::open_sharing(path, Some(self))
    }

    /// The lock file whose name is this one's followed by `suffix` (which
    /// holds no `/`), in the same directory: what [`LockFile::sibling`]
    /// makes of that path, without splitting it again (this one's path is
    /// already absolute, its directory and name already told apart).
    fn suffixed(&self, suffix: &str) -> LockFile {
        let mut path = self.inner.path.clone().into_os_string();
        path.push(suffix);
        let mut name = self.inner.name.clone();
        name.push(suffix);
        LockFile {
            inner: Arc::new(Inner {
                path: PathBuf::from(path),
                dir_path: self.inner.dir_path.clone(),
                name,
                dir: self.inner.dir.clone(),
                dir_ok: std::sync::OnceLock::new(),
            }),
            deadline: None,
            allow_shared_fs: self.allow_shared_fs,
            on_reclaim: None,
        }
    }

    fn open_sharing(path: impl AsRef<Path>, near: Option<&LockFile>) -> Result<LockFile> {
        let (path, dir_path, name) = split_lock_path(path.as_ref())?;
        let dir = match near.filter(|n| n.inner.dir_path == dir_path) {
            Some(near) => near.inner.dir.clone(),
            None => Arc::new(open_dir(&path, &dir_path)?),
        };
        Ok(LockFile {
            inner: Arc::new(Inner {
                path,
                dir_path,
                name,
                dir,
                dir_ok: std::sync::OnceLock::new(),
            }),
            deadline: None,
            allow_shared_fs: near.is_some_and(|n| n.allow_shared_fs),
            on_reclaim: None,
        })
    }

    /// Tells `hook` of every stale record that a call through this handle,
    /// or through a handle of one of its slots ([`LockFile::slot`]),
    /// removes: an acquisition's takeover (whether or not it then gets the
    /// lock), [`LockFile::reclaim_if_stale`]. A guard's
    /// [`took_over`](LockGuard::took_over) then says it was told
    /// ([`TakeOver::told`]).
    pub(crate) fn on_reclaim(mut self, hook: OnReclaim) -> LockFile {
        self.on_reclaim = Some(hook);
        self
    }

    /// Tells the hook, if any, that `took` was removed; whether there was
    /// one to tell.
    pub(crate) fn tell_reclaimed(&self, took: &TakeOver) -> bool {
        match &self.on_reclaim {
            Some(hook) => {
                (hook.0)(self, took);
                true
            }
            None => false,
        }
    }

    /// Sets one deadline for every call made through this handle (and the
    /// guards it hands out): waits for the removal guard end there with
    /// [`Error::GuardBusy`], and an acquire ends there too.
    pub fn with_deadline(mut self, deadline: Instant) -> LockFile {
        self.deadline = Some(deadline);
        self
    }

    /// Lets this handle write in a directory on a network or FUSE
    /// filesystem (NFS, SMB, 9p, FUSE, Ceph, AFS, Lustre, GPFS...), which
    /// writers otherwise refuse ([`Error::SharedFs`]): pids and boot ids mean
    /// nothing to another host that shares it. For a filesystem known to be
    /// used by this host alone.
    pub fn allow_shared_fs(mut self) -> LockFile {
        self.allow_shared_fs = true;
        self
    }

    /// The deadline set by [`LockFile::with_deadline`], if any: what else
    /// works on the lock's behalf (its journal) ends by it too.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn deadline_or(&self, other: Option<Instant>) -> Option<Instant> {
        match (self.deadline, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The lock file's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir_path
    }

    fn name(&self) -> &OsStr {
        &self.inner.name
    }

    /// The lock's directory, held open.
    pub(crate) fn dir_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.inner.dir.as_fd()
    }

    /// Reports the owner and the verdict without taking anything: `None`
    /// when the lock is free. This is what `onlyone status` shows;
    /// [`active_pid`] is its shortcut (a pid and whether it is alive), which
    /// needs no directory.
    ///
    /// ```
    /// use onlyone::{LockFile, Verdict};
    /// let dir = tempfile::tempdir()?;
    /// let lock = LockFile::open(dir.path().join("sync.lock"))?;
    /// assert!(lock.inspect()?.is_none());
    ///
    /// let guard = lock.try_acquire()?;
    /// let seen = lock.inspect()?.expect("the lock file exists");
    /// assert!(matches!(seen.verdict, Verdict::Held(_)));
    /// assert_eq!(seen.record?.pid, std::process::id());
    /// drop(guard);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn inspect(&self) -> Result<Option<Inspection>> {
        Ok(self.look()?.map(|ev| Inspection {
            // A report: inside `with_census`, one listing of the host's
            // processes serves every inspection.
            verdict: crate::lock::members::reporting(|| {
                crate::lock::judge::judge(&ev, self.deadline)
            }),
            record: ev.record,
            mtime: ev.mtime,
            owner: ev.owner,
        }))
    }

    /// Refuses what writers must not write in: a directory another user
    /// could tamper with, or one on a filesystem other hosts may share.
    fn check_dir_writable(&self) -> Result<()> {
        // Checked once per handle: the directory is held open, and its owner,
        // mode and filesystem do not change under a working onlyone.
        let fs_type = match self.inner.dir_ok.get() {
            Some(t) => *t,
            None => {
                self.check_dir_owner()?;
                let t = self.dir_fs_type()?;
                *self.inner.dir_ok.get_or_init(|| t)
            }
        };
        match shared_fs_name(fs_type) {
            Some(kind) if !self.allow_shared_fs => Err(Error::SharedFs {
                dir: self.dir().into(),
                kind,
            }),
            _ => Ok(()),
        }
    }

    /// The lock directory's filesystem type (`f_type` of `fstatfs(2)`).
    fn dir_fs_type(&self) -> Result<i64> {
        if let Some(t) = crate::test_hooks::fs_type() {
            return Ok(t);
        }
        let st = rustix::fs::fstatfs(&*self.inner.dir)
            .map_err(|e| Error::io("inspect the filesystem of", self.dir(), e))?;
        #[allow(clippy::unnecessary_cast)]
        Ok(st.f_type as i64)
    }

    /// Refuses a directory another user could tamper with: owned by another
    /// user other than root, or group/world-writable without the sticky bit.
    fn check_dir_owner(&self) -> Result<()> {
        let st = rustix::fs::fstat(&*self.inner.dir)
            .map_err(|e| Error::io("inspect the lock directory", self.dir(), e))?;
        let me = rustix::process::geteuid().as_raw();
        let why = if st.st_uid != me && st.st_uid != 0 {
            Some(format!(
                "it is owned by {}, not by you ({}) or root",
                crate::text::user_name(st.st_uid),
                crate::text::user_name(me)
            ))
        } else if st.st_mode & 0o022 != 0 && st.st_mode & 0o1000 == 0 {
            Some(format!(
                "it is group- or world-writable (mode {:o}) without the sticky bit",
                st.st_mode & 0o7777
            ))
        } else {
            None
        };
        match why {
            Some(why) => Err(Error::UnsafeDir {
                dir: self.dir().into(),
                why,
            }),
            None => Ok(()),
        }
    }

    /// True when the lock directory is one that age-based cleaners empty:
    /// under `/tmp` or `/var/tmp`.
    pub fn in_cleaned_dir(&self) -> bool {
        let dir = std::fs::canonicalize(self.dir()).unwrap_or_else(|_| self.dir().to_path_buf());
        dir.starts_with("/tmp") || dir.starts_with("/var/tmp")
    }
}

/// A lock path made absolute (what a run hands its command in
/// `ONLYONE_LOCK` names the same file from any directory), its directory
/// and its file name; refused when it cannot name a lock file.
fn split_lock_path(given: &Path) -> Result<(PathBuf, PathBuf, OsString)> {
    let path = if given.as_os_str().is_empty() {
        given.to_path_buf()
    } else {
        std::path::absolute(given).unwrap_or_else(|_| given.to_path_buf())
    };
    let bad = |why: &str| Error::BadPath {
        path: path.clone(),
        why: why.to_owned(),
    };
    let raw = path.as_os_str().as_bytes();
    if raw.is_empty() {
        return Err(bad("it is empty"));
    }
    if raw.ends_with(b"/") {
        return Err(bad("it ends with `/`, so it names a directory"));
    }
    let name = path
        .file_name()
        .ok_or_else(|| bad("it has no file name"))?
        .to_os_string();
    if name == ".." || name == "." {
        return Err(bad("it has no file name"));
    }
    let dir_path = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((path, dir_path, name))
}

/// Opens a lock's directory, with an error that says what is wrong:
/// following no symbolic link on its path that another account owns
/// ([`crate::walk`]), which would choose whose locks this one shares.
fn open_dir(path: &Path, dir_path: &Path) -> Result<OwnedFd> {
    use crate::walk::WalkError;
    crate::walk::open_dir(dir_path, OFlags::RDONLY).map_err(|e| match e {
        WalkError::Missing(_) => Error::MissingDir {
            dir: dir_path.to_path_buf(),
        },
        WalkError::NotDir(at) => Error::BadPath {
            path: path.to_path_buf(),
            why: format!("`{}` is not a directory", at.display()),
        },
        WalkError::Refused(link) => Error::foreign_link(dir_path, &link),
        WalkError::Io(_, e) => Error::io("open the lock directory", dir_path, e),
    })
}

/// The name of a filesystem type whose files other hosts may share (or
/// whose host cannot be known: FUSE), from `statfs(2)`'s `f_type`.
fn shared_fs_name(f_type: i64) -> Option<&'static str> {
    Some(match f_type {
        0x6969 => "NFS",
        0x517b => "SMB",
        0xff53_4d42 => "CIFS",
        0xfe53_4d42 => "SMB2",
        0x0102_1997 => "9p",
        0x6573_5546 => "FUSE",
        0x00c3_6400 => "Ceph",
        0x5346_414f | 0x6b41_4653 => "AFS",
        0x7375_7245 => "Coda",
        0x564c => "NCP",
        0x0bd0_0bd0 => "Lustre",
        0x4750_4653 => "GPFS",
        0x7461_636f => "OCFS2",
        0x0116_1970 => "GFS2",
        0x2003_0528 => "OrangeFS",
        0xaad7_aaea => "PanFS",
        _ => return None,
    })
}

/// Unix seconds now.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
