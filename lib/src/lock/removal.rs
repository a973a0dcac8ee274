//! Removing a lock file: the one critical section.
//!
//! Every removal of a lock file (a reclaim of a stale lock, a release by
//! token, by owner or by force) and every replacement of a record happens
//! in [`LockFile::under_guard`]: holding the *removal guard*
//! (`flock(LOCK_EX)` on `DIR/.onlyone-guard.UID`, the guard of the files UID
//! owns: mode 0600 and UID's, so no other account can open it, let alone
//! hold it; onlyone never deletes it
//! and the kernel frees when its holder dies), it reads the record again
//! and lets the caller decide on what it finds *now*: keep it, remove it,
//! or rename a new record over it. Nothing is ever removed on an earlier
//! read (PROTOCOL.md invariants 1 to 3).

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FlockOperation, Mode as FsMode, OFlags};
use rustix::io::Errno;

use super::read::Read;
use super::temp::TempFile;
use super::{Inspection, LockFile, TakeOver};
use crate::error::{Error, HeldBy, Result};
use crate::lock::judge::Evidence;
use crate::lock::verdict::{self, Holder, StaleReason, Verdict};
use crate::procfs::{self, ProcId};
use crate::record::{Mode, Record};
use crate::test_hooks::{self, Point};

/// How long the removal guard is waited for when no deadline is given. It is
/// held for microseconds by onlyone; a longer hold is a foreign process.
const GUARD_WAIT: Duration = Duration::from_secs(10);

/// What to do with the record found under the removal guard.
pub(super) enum Decision<'t, 'a> {
    /// Leave it.
    Keep,
    /// Remove it.
    Remove,
    /// Rename this temp file over it.
    Replace(&'t mut TempFile<'a>),
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The record was removed.
    Removed,
    /// There was nothing to remove (released already: release is idempotent).
    AlreadyFree,
    /// A script's owner released, but other processes of its run (its
    /// workers, which carry the token) still live: the lock stays held by
    /// them and is free once the last one exits. The record says it was
    /// released (`released=`), so its end is not recorded twice.
    StillHeld {
        /// A process of the run that holds it.
        pid: u32,
        /// How many more do.
        others: usize,
    },
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

impl LockFile {
    /// The critical section: takes the removal guard (waiting until
    /// `deadline`, or [`GUARD_WAIT`] from now: one budget, however often
    /// the file's owner changes), fires the test hook `point`, reads the
    /// lock path `how`, and carries out what `decide` makes of what is
    /// there now. Returns what `decide` returned with it.
    pub(super) fn under_guard<'t, 'a: 't, T>(
        &self,
        deadline: Option<Instant>,
        point: Point,
        how: Read,
        decide: impl FnOnce(Option<Evidence>) -> Result<(Decision<'t, 'a>, T)>,
    ) -> Result<T> {
        let deadline = Some(
            self.deadline_or(deadline)
                .unwrap_or_else(|| Instant::now() + GUARD_WAIT),
        );
        let me = rustix::process::geteuid().as_raw();
        // The guard is that of the file's owner: everyone who may remove
        // a file takes the same one. An own read (a release by token, a
        // replacement) removes only a record this user wrote.
        let mut uid = match how {
            Read::Own => me,
            _ => match self.stat_entry(self.name()) {
                Ok(st) => st.st_uid,
                Err(Errno::XDEV) => return Err(self.mount_point(self.name())),
                Err(_) => me,
            },
        };
        for _ in 0..MAX_OWNER_CHANGES {
            let _guard = self.removal_guard(uid, deadline)?;
            test_hooks::fire(point, self.path());
            let now = self.read_at_path(how)?;
            if let Some(ev) = &now
                && how != Read::Own
                && ev.owner != uid
            {
                // Another user's file is there now: its own guard decides.
                uid = ev.owner;
                continue;
            }
            let (decision, out) = decide(now)?;
            match decision {
                Decision::Keep => {}
                Decision::Remove => self.unlink()?,
                Decision::Replace(temp) => {
                    let name = temp.name().ok_or_else(|| {
                        Error::io("replace", self.path(), std::io::Error::from(Errno::BADF))
                    })?;
                    rustix::fs::renameat(&self.inner.dir, name, &self.inner.dir, self.name())
                        .map_err(|e| Error::io("replace", self.path(), e))?;
                    temp.renamed();
                }
            }
            return Ok(out);
        }
        Err(Error::Contended {
            path: self.path().into(),
            tries: MAX_OWNER_CHANGES,
        })
    }

    /// Takes the removal guard of the files `uid` owns in this directory:
    /// a kernel lock on the guard file (see [`guard_name`]), on a fresh
    /// open file description (flock locks belong to those, so two threads
    /// of one process exclude each other too).
    fn removal_guard(&self, uid: u32, deadline: Option<Instant>) -> Result<OwnedFd> {
        let deadline = self.deadline_or(deadline);
        let fd = self.open_guard(uid)?;
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
                            dir: self.dir().join(guard_name(uid)),
                            waited: now - started,
                        });
                    }
                    std::thread::sleep(pause.min(limit - now));
                    pause = (pause * 2).min(Duration::from_millis(2));
                }
                Err(e) => return Err(Error::io("take the removal guard", self.guard_path(uid), e)),
            }
        }
    }

    fn guard_path(&self, uid: u32) -> std::path::PathBuf {
        self.dir().join(guard_name(uid))
    }

    /// Opens (creating it when missing) the guard file of `uid`: a regular
    /// file of that user's, mode 0600, so that no other account can open
    /// it, let alone hold its lock. Root creates one for another user
    /// whole before it appears (temp file, chown, link).
    fn open_guard(&self, uid: u32) -> Result<OwnedFd> {
        let name = guard_name(uid);
        let path = self.guard_path(uid);
        let me = rustix::process::geteuid();
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let open = |extra: OFlags| {
            self.open_entry(name.as_ref(), flags | extra, FsMode::from_raw_mode(0o600))
        };
        let opened = if uid == me.as_raw() {
            open(OFlags::CREATE)
        } else {
            match open(OFlags::empty()) {
                Err(Errno::NOENT) if me.is_root() => {
                    self.create_guard_for(uid, &name)?;
                    open(OFlags::empty())
                }
                other => other,
            }
        };
        let fd = opened.map_err(|e| match e {
            Errno::LOOP => Error::UnsafeGuard {
                path: path.clone(),
                why: "it is a symbolic link".into(),
            },
            Errno::XDEV => Error::UnsafeGuard {
                path: path.clone(),
                why: "a file system is mounted on it, which onlyone never looks into".into(),
            },
            // Another user's guard, which only that user and root may
            // open: so are its files only theirs (and root's) to remove.
            Errno::NOENT | Errno::ACCESS | Errno::PERM if uid != me.as_raw() => {
                self.removal_denied(Errno::PERM)
            }
            e => Error::io("open the removal guard", &path, e),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("inspect", &path, e))?;
        let why = if rustix::fs::FileType::from_raw_mode(st.st_mode)
            != rustix::fs::FileType::RegularFile
        {
            Some("it is not a regular file".to_owned())
        } else if st.st_uid != uid {
            Some(format!(
                "it belongs to {}, not to {}",
                crate::text::user_name(st.st_uid),
                crate::text::user_name(uid)
            ))
        } else if st.st_nlink != 1 {
            // Another account may have linked a file of this user's there
            // (in a shared directory; any file where hard links are not
            // protected): whoever can open it elsewhere could hold the
            // guard, and its mode is that file's. Neither used nor
            // changed.
            Some(format!(
                "it has {} names: it is a hard link to a file elsewhere, which onlyone neither \
                 uses as its guard nor changes",
                st.st_nlink
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::UnsafeGuard { path, why });
        }
        if st.st_mode & 0o077 != 0 {
            // Made by another program (flock(1) on the name): close it to
            // others. It has no other name, so no other file's mode
            // changes with it.
            rustix::fs::fchmod(&fd, FsMode::from_raw_mode(0o600))
                .map_err(|e| Error::io("chmod", &path, e))?;
        }
        Ok(fd)
    }

    /// Root's creation of another user's guard file: written whole under a
    /// temp name, given to `uid`, then renamed into place without
    /// replacing anything (EEXIST: someone made it first, which is as
    /// good). Not linked, where the file system can rename so: a guard
    /// with two names is refused (see [`LockFile::open_guard`]), and
    /// another root process could open it between the link and the temp
    /// name's removal.
    fn create_guard_for(&self, uid: u32, name: &str) -> Result<()> {
        let temp = format!("{name}.{}.tmp", super::new_token());
        let path = self.guard_path(uid);
        let fd = rustix::fs::openat(
            &self.inner.dir,
            &temp,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            FsMode::from_raw_mode(0o600),
        )
        .map_err(|e| Error::io("create the removal guard", &path, e))?;
        let dir = &*self.inner.dir;
        // Whether the temp name went with the rename.
        let placed =
            rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(uid)), None).and_then(|()| {
                match rustix::fs::renameat_with(
                    dir,
                    &temp,
                    dir,
                    name,
                    rustix::fs::RenameFlags::NOREPLACE,
                ) {
                    Ok(()) => Ok(true),
                    // A file system without it: linked, as before, with a
                    // moment of two names.
                    Err(Errno::INVAL) => {
                        rustix::fs::linkat(dir, &temp, dir, name, AtFlags::empty()).map(|()| false)
                    }
                    Err(e) => Err(e),
                }
            });
        if !matches!(placed, Ok(true)) {
            let _ = rustix::fs::unlinkat(dir, &temp, AtFlags::empty());
        }
        match placed {
            Ok(_) | Err(Errno::EXIST) => Ok(()),
            Err(e) => Err(Error::io("create the removal guard", &path, e)),
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
        let owner = self.stat_entry(self.name()).map(|st| st.st_uid).ok();
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

    /// Removes the record judged stale, if it is still exactly that record:
    /// the same bytes, the same readability and the same modification time
    /// (an unreadable file and an empty one both have no bytes).
    pub(super) fn reclaim(&self, judged: &Evidence, deadline: Option<Instant>) -> Result<bool> {
        self.under_guard(deadline, Point::ReclaimUnderGuard, Read::Recheck, |now| {
            Ok(match now {
                Some(ev)
                    if ev.bytes == judged.bytes
                        && ev.record.is_ok() == judged.record.is_ok()
                        && ev.mtime == judged.mtime =>
                {
                    (Decision::Remove, true)
                }
                _ => (Decision::Keep, false),
            })
        })
    }

    /// Removes the lock file if it is provably stale: judged, then re-read
    /// under the removal guard and removed only if unchanged. Returns why
    /// it was stale when it removed it.
    pub fn reclaim_if_stale(&self) -> Result<Option<StaleReason>> {
        self.check_dir_writable()?;
        let Some(ev) = self.look()? else {
            return Ok(None);
        };
        match crate::lock::judge::judge(&ev, self.deadline) {
            Verdict::Stale(reason) => {
                let removed = self.reclaim(&ev, None)?;
                self.sweep_temp_files();
                if !removed {
                    return Ok(None);
                }
                let took = TakeOver {
                    record: ev.record.ok(),
                    reason,
                    told: false,
                };
                self.tell_reclaimed(&took);
                Ok(Some(took.reason))
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

    pub(super) fn release_token_until(
        &self,
        token: &str,
        deadline: Option<Instant>,
    ) -> Result<Released> {
        self.under_guard(
            deadline,
            Point::ReleaseUnderGuard,
            Read::Own,
            |now| match now {
                None => Ok((Decision::Keep, Released::AlreadyFree)),
                Some(ev) if carries_token(&ev, token) => Ok((Decision::Remove, Released::Removed)),
                Some(_) => Err(Error::Lost {
                    path: self.path().into(),
                }),
            },
        )
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
        let owners: Vec<(u32, Option<ProcId>)> = releaser
            .owners
            .iter()
            .map(|&pid| (pid, ProcId::of(pid)))
            .collect();
        // Never the releaser itself, nor the owners it releases for.
        let mut skip: Vec<u32> = releaser.owners.clone();
        skip.push(std::process::id());
        let found = self.under_guard(None, Point::ReleaseUnderGuard, Read::Look, |now| {
            let Some(ev) = now else {
                return Ok((Decision::Keep, None));
            };
            let record = ev.record.map_err(|why| Error::Unknown {
                path: self.path().into(),
                reason: verdict::UnknownReason::Unreadable {
                    why: why.to_string(),
                },
            })?;
            // Another account's file may name the releaser's pid and start
            // time, or carry its token: it is that account's, never this
            // one's hold.
            if let Some(uid) = record.other_account() {
                return Err(Error::OtherAccount {
                    path: self.path().into(),
                    owner: crate::text::user_name(uid),
                    pid: record.pid,
                });
            }
            let by_token = releaser
                .token
                .as_deref()
                .is_some_and(|t| record.token.as_deref() == Some(t));
            if by_token || owners.iter().any(|(pid, id)| owns(&record, *pid, *id)) {
                // Rule 1 holds for scripts too: a worker that carries the
                // token keeps the lock held after its script's release.
                if record.mode == Mode::Script {
                    skip.push(record.pid);
                    let others = crate::lock::judge::processes_of(&record, &skip, self.deadline)?;
                    if let Some(first) = others.first() {
                        let held = Released::StillHeld {
                            pid: first.pid,
                            others: others.len() - 1,
                        };
                        return Ok((Decision::Keep, Some((held, Some((record, ev.bytes))))));
                    }
                }
                return Ok((Decision::Remove, Some((Released::Removed, None))));
            }
            let holder =
                match crate::lock::judge::judge_record(&record, ev.kernel_locked, self.deadline) {
                    Verdict::Held(h) => h,
                    _ => Holder::Owner { pid: record.pid },
                };
            Err(Error::NotOwner {
                pid: releaser.owners.first().copied().unwrap_or(0),
                held: Box::new(HeldBy::new(self.path().into(), record, holder)),
            })
        })?;
        match found {
            None => Ok(Released::AlreadyFree),
            Some((held, Some((record, bytes)))) => {
                self.mark_released(&record, &bytes)?;
                Ok(held)
            }
            Some((released, None)) => Ok(released),
        }
    }

    /// Rewrites a script's record as released (`released=` added), if it
    /// still carries its token: what is left of the run holds it.
    fn mark_released(&self, record: &Record, bytes: &[u8]) -> Result<()> {
        let (Some(token), None) = (record.token.as_deref(), record.released) else {
            return Ok(());
        };
        // Only the writer rewrites its record: another user's (root
        // releasing it) would become root's, under another guard than the
        // one its owner's removals take.
        if record.uid != Some(rustix::process::geteuid().as_raw()) {
            return Ok(());
        }
        let me = procfs::own_identity()
            .map_err(|e| Error::io("read this process's identity in", "/proc/self/stat", e))?
            .id;
        let mut marked = bytes.to_vec();
        if !marked.ends_with(b"\n") {
            marked.push(b'\n');
        }
        marked.extend_from_slice(format!("released={}\n", super::unix_now()).as_bytes());
        let mut temp = self.write_temp(me, &marked)?;
        self.replace_record(token, &mut temp)
    }

    /// Removes the lock file whoever holds it, under the removal guard, and
    /// returns what it held (`None`: it was free). For an operator who knows
    /// better than the verdict. A file that is not a record is refused
    /// ([`Error::NotALock`]): a path LOCK may name a user's file.
    pub fn force_release(&self) -> Result<Option<Inspection>> {
        self.check_dir_writable()?;
        self.under_guard(None, Point::ReleaseUnderGuard, Read::Look, |now| {
            let Some(ev) = now else {
                return Ok((Decision::Keep, None));
            };
            if let Err(why) = &ev.record {
                return Err(Error::NotALock {
                    path: self.path().into(),
                    why: why.to_string(),
                });
            }
            let seen = Inspection {
                verdict: crate::lock::judge::judge(&ev, self.deadline),
                record: ev.record,
                mtime: ev.mtime,
                owner: ev.owner,
            };
            Ok((Decision::Remove, Some(seen)))
        })
    }

    /// Replaces the record held under `token` with the one written to
    /// `temp` (kernel-locked), renaming it over the old one, so readers see
    /// either.
    pub(super) fn replace_record(&self, token: &str, temp: &mut TempFile<'_>) -> Result<()> {
        self.under_guard(None, Point::ReplaceUnderGuard, Read::Own, |now| match now {
            Some(ev) if carries_token(&ev, token) => Ok((Decision::Replace(temp), ())),
            _ => Err(Error::Lost {
                path: self.path().into(),
            }),
        })
    }
}

/// How often a removal follows the lock file to another owner's guard
/// before it gives up ([`Error::Contended`]): each time, another user's
/// record replaced the one seen, between a look and the guard.
const MAX_OWNER_CHANGES: u32 = 4;

/// The name of the guard file for the lock files `uid` owns in a lock
/// directory: `.onlyone-guard.UID`, never deleted.
pub(crate) fn guard_name(uid: u32) -> String {
    format!(".onlyone-guard.{uid}")
}

/// True when the record read carries `token` (its bytes are enough: an
/// own read does not parse them).
fn carries_token(ev: &Evidence, token: &str) -> bool {
    crate::record::carries_token(&ev.bytes, token)
}

/// True when `record` is owned by the process `pid`, which has the identity
/// `now` (or is gone): the same pid, boot and start time. A bare pid file
/// names no start time.
fn owns(record: &Record, pid: u32, now: Option<ProcId>) -> bool {
    let same_boot = record
        .boot
        .as_deref()
        .is_none_or(|b| procfs::boot_id().ok() == Some(b));
    record.pid == pid
        && same_boot
        && match (record.start, now) {
            (Some(recorded), Some(now)) => recorded == now.start,
            (None, _) => true,
            (Some(_), None) => false,
        }
}
