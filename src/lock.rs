//! The lock protocol: atomic acquire, guarded takeover and release, inspect.
//!
//! **Acquire.** The record is written whole to a temp file in the lock's
//! directory (`O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC`, mode 0644), on which the
//! writer takes a kernel lock (`flock(LOCK_EX)`) that it keeps for as long as
//! it holds the lock. The temp file is then `link(2)`ed to the lock path:
//! the record appears there atomically and complete, and `EEXIST` is the
//! contention signal. The acquirer reads the path back and checks that it
//! holds its own record before it reports success. No fsync: a record torn
//! by a power loss predates the current boot, which makes it stale.
//!
//! **Contention.** The record at the path is judged ([`crate::verdict`]).
//! Held: an error naming the owner, or, when waiting, a sleep until the file
//! is removed (inotify), the holding process exits (pidfd), or a periodic
//! re-probe is due (a dead owner frees nothing). Unknown: an error. Stale:
//! a reclaim, then a new attempt.
//!
//! **Removal** of a lock file, a reclaim or a release alike, happens only
//! under the *removal guard*: `flock(LOCK_EX)` on the lock's directory. The
//! directory is never deleted by onlyone, and the kernel frees the flock when
//! its holder dies, so a crash inside the guard blocks nobody. Under the
//! guard the record is read again and removed only if it is still byte for
//! byte the record that was judged (reclaim) or still carries the
//! releaser's token (release). Inode numbers are never compared: they are
//! reused at once.
//!
//! **Retries** are bounded ([`MAX_TAKEOVER_TRIES`]). A look that finds the
//! path empty does not use one up. Running out of tries is
//! [`Error::Contended`], never "held": "held" is reported only when a probe
//! proved a live owner.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustix::fs::{AtFlags, FlockOperation, Mode as FsMode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, HeldBy, Result};
use crate::procfs;
use crate::record::{self, FORMAT_VERSION, MAX_RECORD_BYTES, Mode, NotARecord, Record};
use crate::test_hooks::{self, Point};
use crate::verdict::{self, Evidence, Verdict};

/// Takeover attempts before [`Error::Contended`].
pub const MAX_TAKEOVER_TRIES: u32 = 16;

/// Looks that find the path empty, after which an acquire without a deadline
/// reports [`Error::Contended`] instead of spinning on.
const MAX_EMPTY_LOOKS: u32 = 100_000;

/// How long the removal guard is waited for when no deadline is given. It is
/// held for microseconds by onlyone; a longer hold is a foreign process.
const GUARD_WAIT: Duration = Duration::from_secs(10);

/// The start of every temp file's name.
const TEMP_PREFIX: &str = ".onlyone.";

/// How often a waiter re-probes a held lock, to notice an owner that died
/// without removing its record.
pub const REPROBE_INTERVAL: Duration = Duration::from_millis(250);

/// How often a holder refreshes its lock file's times (`futimens`), so that
/// age-based cleaning of `/tmp` (systemd-tmpfiles, tmpreaper) never takes
/// a live lock: cleaners remove files whose times are all older than days.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(24 * 3600);

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

/// Who owns a lock being acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Owner {
    /// This process.
    #[default]
    Current,
    /// Another live process, named by pid (a shell that calls
    /// `onlyone acquire`). Its kernel lock cannot be held for it, so its
    /// liveness is proven by pid and start time alone.
    Pid(u32),
}

/// How to acquire.
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    owner: Owner,
    wait: Option<Duration>,
    deadline: Option<Instant>,
    mode: Option<Mode>,
    token: Option<String>,
    command: Option<String>,
}

impl AcquireOptions {
    /// Options for an immediate attempt by this process.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the owner (default: this process).
    pub fn owner(mut self, owner: Owner) -> Self {
        self.owner = owner;
        self
    }

    /// Waits up to `wait` for a live holder to finish.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// One budget for the whole call: waiting, the removal guard, retries.
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Marks the record as a run's (see [`Mode::Run`]).
    pub fn run_mode(mut self) -> Self {
        self.mode = Some(Mode::Run);
        self
    }

    /// Says which processes keep the lock held (default: [`Mode::Lock`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Uses the given token (32 lowercase hex digits from
    /// [`new_token`]) instead of a fresh one: a run hands its token to its
    /// command before the lock is taken.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Records this command line instead of the owner's own.
    pub fn command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }
}

/// What [`LockFile::inspect`] found at a lock path that exists.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The record, or why the file is not one.
    pub record: std::result::Result<Record, NotARecord>,
    /// The verdict.
    pub verdict: Verdict,
    /// The file's modification time (Unix seconds).
    pub mtime: i64,
}

impl Inspection {
    /// The owner, as the error type would carry it, when the verdict is held.
    pub fn held_by(&self, path: &Path) -> Option<HeldBy> {
        match (&self.verdict, &self.record) {
            (Verdict::Held(holder), Ok(record)) => Some(HeldBy {
                path: path.to_owned(),
                record: record.clone(),
                holder: holder.clone(),
            }),
            _ => None,
        }
    }
}

/// Who may release a lock on its owner's behalf (see
/// [`LockFile::release_as`]): any of several owner processes, or whoever
/// carries the acquisition's token.
#[derive(Debug, Clone, Default)]
pub struct Releaser {
    owners: Vec<u32>,
    token: Option<String>,
}

impl Releaser {
    /// Nobody yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts a record owned by the live process `pid` (pid and start
    /// time are both checked).
    pub fn owner(mut self, pid: u32) -> Self {
        self.owners.push(pid);
        self
    }

    /// Accepts a record that carries `token` (as `ONLYONE_TOKEN` hands it
    /// to a script's workers).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The record was removed.
    Removed,
    /// There was nothing to remove (released already: release is idempotent).
    AlreadyFree,
}

/// A fresh random token: 128 bits as 32 lowercase hex digits.
pub fn new_token() -> String {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(Errno::INTR) => {}
            Err(_) => {
                // getrandom(2) exists on every kernel onlyone supports; if it
                // fails anyway, fall back to what is unique on this host.
                let t = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos();
                let seed = t ^ (u128::from(std::process::id()) << 64);
                buf.copy_from_slice(&seed.to_le_bytes());
                break;
            }
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn file_kind(mode: u32) -> &'static str {
    use rustix::fs::FileType;
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "special file",
    }
}

impl LockFile {
    /// Names a lock file and opens its directory. The directory must exist;
    /// the file need not.
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

    fn open_sharing(path: impl AsRef<Path>, near: Option<&LockFile>) -> Result<LockFile> {
        // Absolute, so that what a run hands its command in ONLYONE_LOCK
        // names the same file from any directory.
        let given = path.as_ref();
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
        if let Some(near) = near.filter(|n| n.inner.dir_path == dir_path) {
            return Ok(LockFile {
                inner: Arc::new(Inner {
                    path,
                    dir_path,
                    name,
                    dir: near.inner.dir.clone(),
                    dir_ok: std::sync::OnceLock::new(),
                }),
                deadline: None,
                allow_shared_fs: near.allow_shared_fs,
            });
        }
        let dir = rustix::fs::open(
            &dir_path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            FsMode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOENT => Error::MissingDir {
                dir: dir_path.clone(),
            },
            Errno::NOTDIR => Error::BadPath {
                path: path.clone(),
                why: format!("`{}` is not a directory", dir_path.display()),
            },
            e => Error::io("open the lock directory", &dir_path, e),
        })?;
        Ok(LockFile {
            inner: Arc::new(Inner {
                path,
                dir_path,
                name,
                dir: Arc::new(dir),
                dir_ok: std::sync::OnceLock::new(),
            }),
            deadline: None,
            allow_shared_fs: false,
        })
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

    /// Reads what is at the lock path, and whether its writer's kernel lock
    /// is held: `None` when nothing is there.
    fn look(&self) -> Result<Option<Evidence>> {
        self.read_record(true)
    }

    /// Reads what is at the lock path; with `probe_lock`, also tests the
    /// writer's kernel lock (a release or a read-back has no use for it).
    fn read_record(&self, probe_lock: bool) -> Result<Option<Evidence>> {
        let path = self.path();
        if probe_lock {
            // Look before opening: opening a device can act on it (a tape
            // rewinds). A read-back or a release reads a file this process
            // expects to be its own, in a directory no one else may write.
            match rustix::fs::statat(&self.inner.dir, self.name(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => self.check_regular(st.st_mode)?,
                Err(Errno::NOENT) => return Ok(None),
                Err(_) => {} // the open below says what is wrong
            }
        }
        let fd = match rustix::fs::openat(
            &self.inner.dir,
            self.name(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            FsMode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err(Error::Symlink { path: path.into() }),
            Err(Errno::NXIO) => {
                return Err(Error::NotRegular {
                    path: path.into(),
                    kind: "socket",
                });
            }
            Err(e @ (Errno::ACCESS | Errno::PERM)) => {
                // A record we may not read: judge it on its age alone.
                let st = match rustix::fs::statat(
                    &self.inner.dir,
                    self.name(),
                    AtFlags::SYMLINK_NOFOLLOW,
                ) {
                    Ok(st) => st,
                    Err(Errno::NOENT) => return Ok(None),
                    Err(e) => return Err(Error::io("inspect", path, e)),
                };
                self.check_regular(st.st_mode)?;
                return Ok(Some(Evidence {
                    bytes: Vec::new(),
                    record: Err(NotARecord(format!(
                        "permission denied ({})",
                        io::Error::from(e)
                    ))),
                    kernel_locked: false,
                    mtime: st.st_mtime,
                    denied: true,
                    owner: st.st_uid,
                }));
            }
            Err(e) => return Err(Error::io("open", path, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("inspect", path, e))?;
        self.check_regular(st.st_mode)?;
        // Read what fstat says is there (records are never rewritten in
        // place), so a record takes one read(2) and no second one for EOF.
        // A file larger than a record is read only far enough to say so.
        let want = usize::try_from(st.st_size)
            .unwrap_or(usize::MAX)
            .min(MAX_RECORD_BYTES + 1);
        let mut bytes = vec![0u8; want];
        let mut len = 0;
        while len < want {
            match rustix::io::read(&fd, &mut bytes[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(Error::io("read", path, e)),
            }
        }
        bytes.truncate(len);
        let flock_held = || match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockShared) {
            Ok(()) => Ok(false),
            Err(Errno::WOULDBLOCK) => Ok(true),
            Err(e) => Err(Error::io("probe the kernel lock on", path, e)),
        };
        let mut kernel_locked = probe_lock && flock_held()?;
        let record = if len > MAX_RECORD_BYTES {
            Err(NotARecord(format!(
                "it is larger than {MAX_RECORD_BYTES} bytes"
            )))
        } else {
            // Start times on this process's clock, where that can be done;
            // otherwise the verdict sees another time namespace and says
            // unknown.
            Record::parse(&bytes).map(|r| r.in_local_clock().unwrap_or(r))
        };
        // The flock was seen held; if the owner has died since, look again:
        // a dying process drops its flocks before /proc shows it dead, so a
        // flock still held after that is not the owner's.
        if kernel_locked
            && let Ok(r) = &record
            && !procfs::probe(r.pid, r.start).is_alive()
        {
            kernel_locked = flock_held()?;
        }
        Ok(Some(Evidence {
            bytes,
            record,
            kernel_locked,
            mtime: st.st_mtime,
            denied: false,
            owner: st.st_uid,
        }))
    }

    fn check_regular(&self, mode: u32) -> Result<()> {
        let kind = file_kind(mode);
        if kind == "regular file" {
            Ok(())
        } else if kind == "symbolic link" {
            Err(Error::Symlink {
                path: self.path().into(),
            })
        } else {
            Err(Error::NotRegular {
                path: self.path().into(),
                kind,
            })
        }
    }

    /// Reports the owner and the verdict without taking anything: `None`
    /// when the lock is free. This is what `onlyone status` shows.
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
            verdict: verdict::judge(&ev),
            record: ev.record,
            mtime: ev.mtime,
        }))
    }

    /// Refuses a directory another user could tamper with: owned by another
    /// user other than root, or group/world-writable without the sticky bit.
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

    /// Refuses a directory another user could tamper with.
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

    /// Takes the lock now, as this process, or fails.
    ///
    /// ```
    /// use onlyone::{Error, LockFile};
    /// let dir = tempfile::tempdir()?;
    /// let lock = LockFile::open(dir.path().join("sync.lock"))?;
    ///
    /// let guard = lock.try_acquire()?;
    /// // A second attempt, here from the same process, is refused with the owner.
    /// match lock.try_acquire() {
    ///     Err(Error::Held(held)) => assert_eq!(held.record.pid, std::process::id()),
    ///     other => panic!("expected held, got {other:?}"),
    /// }
    /// guard.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire(&self) -> Result<LockGuard> {
        self.acquire(&AcquireOptions::new())
    }

    /// Takes the lock with options: another owner, waiting, a deadline.
    ///
    /// ```
    /// use std::time::Duration;
    /// use onlyone::{AcquireOptions, Error, LockFile};
    /// let dir = tempfile::tempdir()?;
    /// let lock = LockFile::open(dir.path().join("sync.lock"))?;
    /// let first = lock.try_acquire()?;
    ///
    /// // A waiter wakes as soon as the holder lets go.
    /// let waiter = {
    ///     let lock = lock.clone();
    ///     std::thread::spawn(move || lock.acquire(&AcquireOptions::new().wait(Duration::from_secs(10))))
    /// };
    /// std::thread::sleep(Duration::from_millis(50));
    /// first.release()?;
    /// let second = waiter.join().unwrap()?;
    /// second.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        self.check_dir_writable()?;
        let started = Instant::now();
        let deadline = self.deadline_or(opts.deadline);
        let writer = procfs::own_identity().map_err(|e| Error::io("read", "/proc/self/stat", e))?;
        let writer_pid = rustix::process::Pid::from_raw(writer.pid as i32)
            .unwrap_or_else(rustix::process::getpid);
        let owner = match opts.owner {
            Owner::Current => writer.clone(),
            Owner::Pid(pid) => procfs::identity_of(pid).map_err(|e| Error::BadOwner {
                pid,
                why: e.to_string(),
            })?,
        };
        let boot = procfs::boot_id()
            .map_err(|e| Error::io("read", "/proc/sys/kernel/random/boot_id", e))?;
        // An owner that leads its process group (a script run by cron,
        // systemd or a shell's job control) keeps the lock held through the
        // processes it starts in that group. An owner that does not lead its
        // group shares it with others (siblings), so only the owner counts.
        let (pgid, pgstart) = match opts.owner {
            Owner::Pid(pid) => match procfs::read_stat(pid) {
                Ok(Some(st)) if st.pgrp == pid => (Some(pid), Some(st.start)),
                _ => (None, None),
            },
            Owner::Current => (None, None),
        };
        let token = match &opts.token {
            Some(t) if is_token(t) => t.clone(),
            Some(t) => {
                return Err(Error::BadToken {
                    token: t.chars().take(80).collect(),
                });
            }
            None => new_token(),
        };
        let record = Record {
            pid: owner.pid,
            start: Some(owner.start),
            boot: Some(boot.to_owned()),
            token: Some(token),
            since: Some(unix_now()),
            pidns: owner.pidns,
            // Start times are as this process reads them: on its clock.
            timens: procfs::own_timens(),
            bootoff_ns: procfs::own_boottime_offset_ns(),
            host: Some(procfs::host_name()),
            uid: owner.uid,
            mode: opts.mode.unwrap_or(Mode::Lock),
            cmd: match (&opts.command, opts.owner) {
                (Some(c), _) => Some(c.clone()),
                (None, Owner::Current) => procfs::own_command_line(),
                (None, Owner::Pid(_)) => owner.cmd.clone(),
            }
            .as_deref()
            .map(record::escape_value),
            cmd_pid: None,
            cmd_start: None,
            pgid,
            pgstart,
            linger: Vec::new(),
            format: FORMAT_VERSION,
        };
        let bytes = record.to_bytes();
        // The temp file exists only while an attempt is under way: a waiter
        // killed while it sleeps leaves nothing behind.
        let mut temp: Option<TempFile<'_>> = None;

        let wait_until = match (opts.wait, deadline) {
            (Some(w), Some(d)) => Some((started + w).min(d)),
            (Some(w), None) => Some(started + w),
            (None, _) => None,
        };
        let mut tries = 0u32;
        let mut empty_looks = 0u32;
        let mut took_over: Option<TakeOver> = None;
        let mut waiter: Option<Waiter> = None;
        loop {
            // An owner named by pid (a script) that died while this call
            // waited wants no lock any more: a record for it would only be
            // stale the moment it appears.
            if let Owner::Pid(pid) = opts.owner
                && waiter.is_some()
                && !procfs::probe(pid, Some(owner.start)).is_alive()
            {
                return Err(Error::BadOwner {
                    pid,
                    why: "it exited while waiting for the lock".into(),
                });
            }
            // A directory that is full, read-only or not writable by this
            // user still answers "held" for a live run: the look below
            // decides before the write error is reported.
            let mut unwritable = None;
            let t = match temp.take() {
                Some(t) => Some(t),
                None => match self.write_temp(&writer, record.token_str(), &bytes) {
                    Ok(t) => Some(t),
                    Err(e) if is_unwritable(&e) => {
                        unwritable = Some(e);
                        None
                    }
                    Err(e) => return Err(e),
                },
            };
            if let Some(t) = t {
                test_hooks::fire(Point::BeforeLink, self.path());
                match t.link_into_place() {
                    Ok(()) => match self.reads_back(record.token_str()) {
                        Ok(true) => {
                            let fd = t.into_kept();
                            return Ok(LockGuard {
                                lock: self.clone(),
                                record,
                                fd: Some(fd),
                                creator: writer_pid,
                                done: false,
                                took_over,
                            });
                        }
                        // Our link landed but the path no longer holds it: a
                        // foreign process replaced it. Never report success.
                        Ok(false) => temp = Some(t),
                        Err(e) => {
                            // Never leave our record behind on an error.
                            drop(t);
                            let _ = self.release_token_until(record.token_str(), deadline);
                            return Err(e);
                        }
                    },
                    Err(Errno::EXIST) => temp = Some(t),
                    Err(e) => return Err(Error::io("link the record to", self.path(), e)),
                }
            }
            test_hooks::fire(Point::BeforeLook, self.path());
            let Some(ev) = self.look()? else {
                if let Some(e) = unwritable {
                    return Err(e);
                }
                empty_looks += 1;
                if empty_looks > MAX_EMPTY_LOOKS && deadline.is_none() {
                    return Err(Error::Contended {
                        path: self.path().into(),
                        tries,
                    });
                }
                if let Some(d) = deadline
                    && Instant::now() >= d
                {
                    return Err(Error::Contended {
                        path: self.path().into(),
                        tries,
                    });
                }
                continue;
            };
            match verdict::judge(&ev) {
                Verdict::Held(holder) => {
                    let held = Box::new(HeldBy {
                        path: self.path().into(),
                        record: ev.record.clone().unwrap_or_else(|_| record.clone()),
                        holder,
                    });
                    let Some(until) = wait_until else {
                        return Err(Error::Held(held));
                    };
                    let now = Instant::now();
                    if now >= until {
                        return Err(Error::Timeout {
                            waited: now - started,
                            held,
                        });
                    }
                    match &waiter {
                        // Arm the watch first, then look again, so that a
                        // release between the look and the watch is seen.
                        None => waiter = Some(Waiter::new(self)),
                        Some(w) => {
                            temp = None;
                            w.wait(held.holder.pid(), until.min(now + REPROBE_INTERVAL));
                        }
                    }
                }
                Verdict::Unknown(reason) => {
                    return Err(Error::Unknown {
                        path: self.path().into(),
                        reason,
                    });
                }
                Verdict::Stale(reason) => {
                    if let Some(e) = unwritable {
                        return Err(e);
                    }
                    if tries >= MAX_TAKEOVER_TRIES {
                        return Err(Error::Contended {
                            path: self.path().into(),
                            tries,
                        });
                    }
                    tries += 1;
                    test_hooks::fire(Point::BeforeReclaim, self.path());
                    let removed = self.reclaim(&ev, deadline).map_err(|e| match e {
                        Error::CannotRemove {
                            path,
                            why,
                            me,
                            owner,
                            ..
                        } => Error::CannotRemove {
                            path,
                            why,
                            me,
                            owner,
                            state: Some(format!("stale ({reason})")),
                        },
                        e => e,
                    })?;
                    if removed {
                        took_over = Some(TakeOver {
                            record: ev.record.ok(),
                            reason,
                        });
                    }
                    self.sweep_temp_files();
                }
            }
        }
    }

    /// Writes the record to a fresh temp file, locked, in the lock's
    /// directory.
    fn write_temp(
        &self,
        writer: &procfs::Identity,
        token: &str,
        bytes: &[u8],
    ) -> Result<TempFile<'_>> {
        // The name does not include the lock's, so a lock file name of up
        // to 255 bytes still leaves room for it.
        let tok: String = token.chars().take(8).collect();
        let name = OsString::from(format!(
            "{TEMP_PREFIX}{}-{}.{tok}.tmp",
            writer.pid, writer.start
        ));
        let fd = rustix::fs::openat(
            &self.inner.dir,
            &name,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            FsMode::from_raw_mode(0o644),
        )
        .map_err(|e| self.create_error(e))?;
        let temp = TempFile {
            lock: self,
            name: Some(name),
            fd: Some(fd),
        };
        let fd = temp
            .fd
            .as_ref()
            .map(|f| f.as_fd())
            .ok_or_else(|| Error::io("write", self.dir(), Errno::BADF))?;
        // The umask must not hide who holds a run from other users (it is
        // process-wide and may change, so it is not cached to skip this).
        rustix::fs::fchmod(fd, FsMode::from_raw_mode(0o644))
            .map_err(|e| Error::io("chmod", self.dir(), e))?;
        rustix::fs::flock(fd, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| Error::io("lock a temp file in", self.dir(), e))?;
        let mut off = 0;
        while off < bytes.len() {
            match rustix::io::write(fd, &bytes[off..]) {
                Ok(n) => off += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(Error::io("write a temp file in", self.dir(), e)),
            }
        }
        Ok(temp)
    }

    fn create_error(&self, e: Errno) -> Error {
        match e {
            Errno::ACCESS | Errno::PERM | Errno::ROFS => Error::io(
                "create a file in the lock directory (is it writable by you?)",
                self.dir(),
                e,
            ),
            e => Error::io("create a temp file in", self.dir(), e),
        }
    }

    /// True when the lock path holds a record with our token.
    fn reads_back(&self, token: &str) -> Result<bool> {
        Ok(self.holds_token(token)? == Some(true))
    }

    /// Whether the record at the lock path carries `token` (`None`: no
    /// file). The cheap read for a read-back and a release, of a file this
    /// process expects to be its own: one open, one read, no fstat (a short
    /// read of a regular file is its end; anything else there reads as not
    /// ours).
    fn holds_token(&self, token: &str) -> Result<Option<bool>> {
        let path = self.path();
        let fd = match rustix::fs::openat(
            &self.inner.dir,
            self.name(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            FsMode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err(Error::Symlink { path: path.into() }),
            Err(Errno::NXIO) => return Ok(Some(false)),
            Err(e) => return Err(Error::io("open", path, e)),
        };
        let mut buf = [0u8; MAX_RECORD_BYTES + 1];
        let n = loop {
            match rustix::io::read(&fd, &mut buf) {
                Ok(n) => break n,
                Err(Errno::INTR) => {}
                // A directory or a FIFO is not our record.
                Err(Errno::ISDIR | Errno::AGAIN | Errno::INVAL) => return Ok(Some(false)),
                Err(e) => return Err(Error::io("read", path, e)),
            }
        };
        if n > MAX_RECORD_BYTES || token.is_empty() {
            return Ok(Some(false));
        }
        // Only the token matters here: no need to read pid_max to check
        // line 1's range.
        Ok(Some(
            Record::parse_with_pid_max(&buf[..n], u32::MAX).is_ok_and(|r| r.token_str() == token),
        ))
    }

    /// Takes the removal guard: a kernel lock on the lock's directory, on a
    /// fresh open file description (flock locks belong to those, so two
    /// threads of one process exclude each other too).
    fn removal_guard(&self, deadline: Option<Instant>) -> Result<OwnedFd> {
        let deadline = self.deadline_or(deadline);
        let fd = rustix::fs::openat(
            &self.inner.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            FsMode::empty(),
        )
        .map_err(|e| Error::io("open the lock directory", self.dir(), e))?;
        let started = Instant::now();
        let limit = deadline.unwrap_or(started + GUARD_WAIT);
        let mut pause = Duration::from_micros(20);
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(fd),
                Err(Errno::WOULDBLOCK) | Err(Errno::INTR) => {
                    let now = Instant::now();
                    if now >= limit {
                        return Err(Error::GuardBusy {
                            dir: self.dir().into(),
                            waited: now - started,
                        });
                    }
                    std::thread::sleep(pause.min(limit - now));
                    pause = (pause * 2).min(Duration::from_millis(2));
                }
                Err(e) => return Err(Error::io("take the removal guard on", self.dir(), e)),
            }
        }
    }

    fn unlink(&self) -> Result<()> {
        match rustix::fs::unlinkat(&self.inner.dir, self.name(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e @ (Errno::PERM | Errno::ACCESS)) => Err(self.removal_denied(e)),
            Err(e) => Err(Error::io("remove", self.path(), e)),
        }
    }

    /// Says who may remove the lock file when this user may not: in a
    /// sticky directory only the file's owner (or the directory's, or
    /// root) may.
    fn removal_denied(&self, e: Errno) -> Error {
        let owner = rustix::fs::statat(&self.inner.dir, self.name(), AtFlags::SYMLINK_NOFOLLOW)
            .map(|st| st.st_uid)
            .ok();
        let dir = rustix::fs::fstat(&*self.inner.dir).ok();
        let sticky = dir.is_some_and(|d| d.st_mode & 0o1000 != 0);
        let owner_name = owner.map_or_else(|| "its owner".to_owned(), crate::text::user_name);
        let why = if e == Errno::PERM && sticky {
            format!("its directory is sticky and the file belongs to {owner_name}")
        } else {
            "its directory is not writable by you".to_owned()
        };
        Error::CannotRemove {
            path: self.path().into(),
            why,
            me: crate::text::user_name(rustix::process::geteuid().as_raw()),
            owner: owner_name,
            state: None,
        }
    }

    /// Removes the record judged stale, if it is still exactly that record.
    fn reclaim(&self, judged: &Evidence, deadline: Option<Instant>) -> Result<bool> {
        let _guard = self.removal_guard(deadline)?;
        test_hooks::fire(Point::ReclaimUnderGuard, self.path());
        // The same bytes, the same readability and the same mtime: an
        // unreadable file and an empty one both have no bytes.
        match self.read_record(false)? {
            Some(ev)
                if ev.bytes == judged.bytes
                    && ev.record.is_ok() == judged.record.is_ok()
                    && ev.mtime == judged.mtime =>
            {
                self.unlink()?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Removes the lock file if it is provably stale: judged, then re-read
    /// under the removal guard and removed only if unchanged. Returns why
    /// it was stale when it removed it.
    pub fn reclaim_if_stale(&self) -> Result<Option<verdict::StaleReason>> {
        self.check_dir_writable()?;
        let Some(ev) = self.look()? else {
            return Ok(None);
        };
        match verdict::judge(&ev) {
            Verdict::Stale(reason) => {
                let removed = self.reclaim(&ev, None)?;
                self.sweep_temp_files();
                Ok(removed.then_some(reason))
            }
            _ => Ok(None),
        }
    }

    /// Releases the lock held under `token`, under the removal guard. Gone
    /// already: [`Released::AlreadyFree`]. Held under another token:
    /// [`Error::Lost`].
    pub fn release_token(&self, token: &str) -> Result<Released> {
        self.check_dir_writable()?;
        self.release_token_until(token, None)
    }

    fn release_token_until(&self, token: &str, deadline: Option<Instant>) -> Result<Released> {
        let _guard = self.removal_guard(deadline)?;
        test_hooks::fire(Point::ReleaseUnderGuard, self.path());
        match self.holds_token(token)? {
            None => Ok(Released::AlreadyFree),
            Some(true) => {
                self.unlink()?;
                Ok(Released::Removed)
            }
            Some(false) => Err(Error::Lost {
                path: self.path().into(),
            }),
        }
    }

    /// Releases the lock on behalf of its owner `pid` (the shell that called
    /// `onlyone acquire`), under the removal guard. The record must name
    /// that pid *and* that process's start time.
    ///
    /// ```
    /// use onlyone::{AcquireOptions, LockFile, Owner, Released};
    /// let dir = tempfile::tempdir()?;
    /// let lock = LockFile::open(dir.path().join("sync.lock"))?;
    /// let me = std::process::id();
    /// // What `onlyone acquire` does for its calling shell...
    /// lock.acquire(&AcquireOptions::new().owner(Owner::Pid(me)))?.leave_to_owner();
    /// // ...and what `onlyone release` does.
    /// assert_eq!(lock.release_owned_by(me)?, Released::Removed);
    /// assert_eq!(lock.release_owned_by(me)?, Released::AlreadyFree);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn release_owned_by(&self, pid: u32) -> Result<Released> {
        self.release_as(&Releaser::new().owner(pid))
    }

    /// Releases the lock for whoever `releaser` says may: the record names
    /// one of its owner processes (pid and start time), or carries its
    /// token. Under the removal guard. Held by anyone else:
    /// [`Error::NotOwner`], naming the first owner pid.
    pub fn release_as(&self, releaser: &Releaser) -> Result<Released> {
        self.check_dir_writable()?;
        let owners: Vec<(u32, Option<u64>)> = releaser
            .owners
            .iter()
            .map(|&pid| (pid, procfs::identity_of(pid).ok().map(|id| id.start)))
            .collect();
        let _guard = self.removal_guard(None)?;
        test_hooks::fire(Point::ReleaseUnderGuard, self.path());
        let Some(ev) = self.look()? else {
            return Ok(Released::AlreadyFree);
        };
        let record = match ev.record {
            Ok(r) => r,
            Err(why) => {
                return Err(Error::Unknown {
                    path: self.path().into(),
                    reason: verdict::UnknownReason::Unreadable {
                        why: why.to_string(),
                    },
                });
            }
        };
        let same_boot = record
            .boot
            .as_deref()
            .is_none_or(|b| procfs::boot_id().ok() == Some(b));
        let owned = |&(pid, start): &(u32, Option<u64>)| {
            record.pid == pid
                && same_boot
                && match (record.start, start) {
                    (Some(recorded), Some(now)) => recorded == now,
                    (None, _) => true,
                    (Some(_), None) => false,
                }
        };
        let by_token = releaser
            .token
            .as_deref()
            .is_some_and(|t| record.token.as_deref() == Some(t));
        if by_token || owners.iter().any(owned) {
            self.unlink()?;
            return Ok(Released::Removed);
        }
        let holder = match verdict::judge_record(&record, ev.kernel_locked) {
            Verdict::Held(h) => h,
            _ => verdict::Holder::Owner { pid: record.pid },
        };
        Err(Error::NotOwner {
            pid: releaser.owners.first().copied().unwrap_or(0),
            held: Box::new(HeldBy {
                path: self.path().into(),
                record,
                holder,
            }),
        })
    }

    /// Removes the lock file whoever holds it, under the removal guard, and
    /// returns what it held (`None`: it was free). For an operator who knows
    /// better than the verdict. A file that is not a record is refused
    /// ([`Error::NotALock`]): a path LOCK may name a user's file.
    pub fn force_release(&self) -> Result<Option<Inspection>> {
        self.check_dir_writable()?;
        let _guard = self.removal_guard(None)?;
        let Some(ev) = self.look()? else {
            return Ok(None);
        };
        // A path LOCK may name any file: only a record is onlyone's to
        // remove.
        if let Err(why) = &ev.record {
            return Err(Error::NotALock {
                path: self.path().into(),
                why: why.to_string(),
            });
        }
        let seen = Inspection {
            verdict: verdict::judge(&ev),
            record: ev.record,
            mtime: ev.mtime,
        };
        self.unlink()?;
        Ok(Some(seen))
    }

    /// True when the lock directory is one that age-based cleaners empty:
    /// under `/tmp` or `/var/tmp`.
    pub fn in_cleaned_dir(&self) -> bool {
        let dir = std::fs::canonicalize(self.dir()).unwrap_or_else(|_| self.dir().to_path_buf());
        dir.starts_with("/tmp") || dir.starts_with("/var/tmp")
    }

    /// Keeps the lock file's times fresh (see [`REFRESH_INTERVAL`]) for as
    /// long as it holds `token` and is held, for an owner that is not this
    /// process (a shell script that called `onlyone acquire`): no process
    /// of onlyone's would otherwise live to do it. Wakes when the lock file
    /// is removed, when `owner` exits, and at each interval; returns once
    /// the lock is released, taken over or stale.
    pub fn keep_fresh(&self, token: &str, owner: u32) -> Result<()> {
        let waiter = Waiter::new(self);
        let mut owner = owner;
        let mut refresh_at = Instant::now() + refresh_interval();
        loop {
            let Some(ev) = self.look()? else {
                return Ok(());
            };
            if !ev.record.as_ref().is_ok_and(|r| r.token_str() == token)
                || !matches!(verdict::judge(&ev), Verdict::Held(_))
            {
                return Ok(());
            }
            // The file was just written when this began: the first refresh
            // is due an interval later.
            if Instant::now() >= refresh_at {
                if let Ok(fd) = rustix::fs::openat(
                    &self.inner.dir,
                    self.name(),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    FsMode::empty(),
                ) {
                    let _ = touch(&fd);
                }
                refresh_at = Instant::now() + refresh_interval();
            }
            // Once the owner has exited (its workers may hold the run on),
            // its pid is no reason to wake any more.
            if !procfs::probe(owner, None).is_alive() {
                owner = 0;
            }
            if waiter.inotify.is_none() {
                std::thread::sleep(refresh_at.saturating_duration_since(Instant::now()));
            } else {
                waiter.wait(owner, refresh_at);
            }
        }
    }

    /// Removes temp files left in the directory by writers that died
    /// between creating and linking them (`.onlyone.PID-START.TOKEN.tmp`).
    /// A temp file's name carries its writer's pid and start time; a live
    /// writer's file is kept, whichever lock it is for.
    pub fn sweep_temp_files(&self) -> usize {
        let prefix = TEMP_PREFIX.as_bytes();
        let Ok(entries) = std::fs::read_dir(self.dir()) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let name = file_name.as_bytes();
            let Some(middle) = name
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(b".tmp"))
            else {
                continue;
            };
            // middle = "PID-START.TOKEN8", exactly.
            let Some((pid, start)) = parse_temp_middle(middle) else {
                continue;
            };
            // A temp file lives for microseconds. One younger than a minute
            // is left alone whatever its name says: its writer may read
            // start times on another clock (a time namespace).
            let young = rustix::fs::statat(
                &self.inner.dir,
                file_name.as_os_str(),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .is_ok_and(|st| unix_now().saturating_sub(st.st_mtime.max(0) as u64) < 60);
            if !young
                && !procfs::probe(pid, Some(start)).is_alive()
                && rustix::fs::unlinkat(&self.inner.dir, file_name.as_os_str(), AtFlags::empty())
                    .is_ok()
            {
                removed += 1;
            }
        }
        removed
    }

    /// Replaces the record with `new`, if the path still holds `token`,
    /// under the removal guard. The new record is written to a temp file,
    /// kernel-locked, and renamed over the old one, so readers see either.
    fn replace_record(&self, token: &str, new: &Record) -> Result<OwnedFd> {
        let writer = procfs::own_identity().map_err(|e| Error::io("read", "/proc/self/stat", e))?;
        let bytes = new.to_bytes();
        let temp = self.write_temp(&writer, token, &bytes)?;
        let _guard = self.removal_guard(None)?;
        if self.holds_token(token)? != Some(true) {
            return Err(Error::Lost {
                path: self.path().into(),
            });
        }
        let name = temp.name.as_deref().unwrap_or_default();
        rustix::fs::renameat(&self.inner.dir, name, &self.inner.dir, self.name())
            .map_err(|e| Error::io("replace", self.path(), e))?;
        // Renamed: the temp name is gone already.
        let mut temp = temp;
        temp.name = None;
        Ok(temp.into_kept())
    }
}

/// True for an error that says the directory cannot take a new file
/// (full, read-only, not writable by this user), not that anything is
/// wrong with the lock.
fn is_unwritable(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if matches!(
        source.raw_os_error().map(Errno::from_raw_os_error),
        Some(Errno::NOSPC | Errno::ROFS | Errno::ACCESS | Errno::PERM | Errno::DQUOT)
    ))
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

/// Parses `PID-START.TOKEN8` (decimal, decimal, 8 lowercase hex digits).
fn parse_temp_middle(middle: &[u8]) -> Option<(u32, u64)> {
    let m = std::str::from_utf8(middle).ok()?;
    let (id, tok) = m.split_once('.')?;
    let (pid, start) = id.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid)
        || !digits(start)
        || tok.len() != 8
        || !tok.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// True for a token as [`new_token`] makes them: 32 lowercase hex digits.
fn is_token(t: &str) -> bool {
    t.len() == 32 && t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A temp file that is unlinked when dropped unless it was kept.
struct TempFile<'a> {
    lock: &'a LockFile,
    /// `None` once the name is gone (renamed over the lock file).
    name: Option<OsString>,
    fd: Option<OwnedFd>,
}

impl TempFile<'_> {
    /// Gives the file the lock's name (`link(2)`; EEXIST when taken).
    fn link_into_place(&self) -> rustix::io::Result<()> {
        let dir = &self.lock.inner.dir;
        let name = self.name.as_deref().ok_or(Errno::BADF)?;
        rustix::fs::linkat(dir, name, dir, self.lock.name(), AtFlags::empty())
    }

    /// Keeps the file (and its kernel lock): drops its temporary name, if
    /// any, and returns its fd.
    fn into_kept(mut self) -> OwnedFd {
        if let Some(name) = self.name.take() {
            let _ = rustix::fs::unlinkat(&self.lock.inner.dir, &name, AtFlags::empty());
        }
        self.fd.take().expect("a temp file has its fd until kept")
    }
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if let (Some(name), Some(_)) = (&self.name, &self.fd) {
            let _ = rustix::fs::unlinkat(&self.lock.inner.dir, name, AtFlags::empty());
        }
    }
}

/// Sleeps until the lock file is removed, the holding process exits, or a
/// time passes, whichever is first.
struct Waiter {
    inotify: Option<OwnedFd>,
    name: OsString,
}

impl Waiter {
    fn new(lock: &LockFile) -> Waiter {
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
        }
    }

    fn wait(&self, holder: u32, until: Instant) {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let pidfd = i32::try_from(holder)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
            });
        loop {
            let now = Instant::now();
            if now >= until {
                return;
            }
            let left = until - now;
            let timeout = Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            };
            let mut fds = Vec::with_capacity(2);
            if let Some(fd) = &self.inotify {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            if let Some(fd) = &pidfd {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            if fds.is_empty() {
                std::thread::sleep(left.min(Duration::from_millis(10)));
                return;
            }
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) => return,
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(_) => {
                    std::thread::sleep(left.min(Duration::from_millis(10)));
                    return;
                }
            }
            let pid_exited = pidfd.is_some() && fds.last().is_some_and(|f| !f.revents().is_empty());
            drop(fds);
            if pid_exited || self.drain_names_us() {
                return;
            }
        }
    }

    /// Reads pending inotify events; true if one concerns the lock file or
    /// the directory itself.
    fn drain_names_us(&self) -> bool {
        use rustix::fs::inotify;
        let Some(fd) = &self.inotify else {
            return false;
        };
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(fd, &mut buf);
        let mut ours = false;
        while let Ok(ev) = reader.next() {
            let name_matches = ev
                .file_name()
                .is_some_and(|n| n.to_bytes() == self.name.as_bytes());
            let self_event = ev
                .events()
                .intersects(inotify::ReadFlags::DELETE_SELF | inotify::ReadFlags::MOVE_SELF);
            ours |= name_matches || self_event;
        }
        ours
    }
}

/// A held lock. Dropping it releases the lock (ignoring errors); call
/// [`LockGuard::release`] to see them.
#[derive(Debug)]
pub struct LockGuard {
    lock: LockFile,
    record: Record,
    /// The record's inode, kernel-locked for as long as the lock is held.
    fd: Option<OwnedFd>,
    /// The process that acquired: a forked child must not release its
    /// parent's lock when its copy of the guard drops.
    creator: rustix::process::Pid,
    done: bool,
    took_over: Option<TakeOver>,
}

/// A stale lock this acquisition removed on its way in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeOver {
    /// The stale record, when it was readable.
    pub record: Option<Record>,
    /// Why it was stale.
    pub reason: verdict::StaleReason,
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
        self.record.token_str()
    }

    /// The lock file.
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
        let result = if rustix::process::getpid() == self.creator {
            self.lock
                .release_token_until(self.record.token_str(), None)
                .map(|_| ())
        } else {
            Ok(())
        };
        self.fd = None;
        result
    }

    /// Records the run's command (its pid and start time) in the lock file.
    /// The record is replaced atomically; its token stays the same.
    pub fn set_command(&mut self, pid: u32) -> Result<()> {
        let st = procfs::read_stat(pid)
            .ok()
            .flatten()
            .ok_or_else(|| Error::BadOwner {
                pid,
                why: "it is not running".into(),
            })?;
        let mut new = self.record.clone();
        new.cmd_pid = Some(pid);
        new.cmd_start = Some(st.start);
        let fd = self.lock.replace_record(self.record.token_str(), &new)?;
        self.fd = Some(fd);
        self.record = new;
        Ok(())
    }

    /// Refreshes the lock file's times, so that age-based cleaning of
    /// `/tmp` does not take it while it is held (see [`REFRESH_INTERVAL`]).
    pub fn refresh(&self) -> Result<()> {
        match &self.fd {
            Some(fd) => touch(fd).map_err(|e| Error::io("refresh", self.lock.path(), e)),
            None => Ok(()),
        }
    }

    /// Names in the record the processes (pid, start time) that outlive a
    /// lingering run's command (at most [`crate::record::MAX_LINGER`]), so
    /// that the verdict finds them once this process has exited, whatever
    /// their environment. The record is replaced atomically.
    pub fn set_lingering(&mut self, procs: &[(u32, u64)]) -> Result<()> {
        let mut new = self.record.clone();
        new.linger = procs
            .iter()
            .copied()
            .take(crate::record::MAX_LINGER)
            .collect();
        let fd = self.lock.replace_record(self.record.token_str(), &new)?;
        self.fd = Some(fd);
        self.record = new;
        Ok(())
    }

    /// Leaves the lock held, to its recorded owner (for
    /// [`Owner::Pid`]): nothing is released, and this process's kernel lock
    /// is dropped. Returns the record.
    pub fn leave_to_owner(mut self) -> Record {
        self.done = true;
        self.fd = None;
        self.record.clone()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done && rustix::process::getpid() == self.creator {
            let _ = self.lock.release_token_until(self.record.token_str(), None);
        }
    }
}
