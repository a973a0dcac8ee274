//! Reading what is at a lock path: one open-and-read for every caller.
//!
//! Four ways, from the most careful to the cheapest:
//! - **Look**: the verdict's read of a file anyone may have put there. It
//!   looks before it opens (opening a device can act on it: a tape
//!   rewinds), reads what `fstat` says is there, and tests whether the
//!   writer's kernel lock (flock) is still held.
//! - **Peek**: the bytes alone, for one line of them (a slot's number of
//!   slots), never parsed nor judged. It looks before it opens, as Look
//!   does (what Look refuses it refuses, a file it may not read it reads
//!   as Look does), then reads as Own does, one read and no `fstat`, and
//!   tests no kernel lock. A read that fails is left to Look, so that a
//!   peek fails as a look does.
//! - **Recheck**: the re-read under the removal guard: the bytes and the
//!   modification time, no kernel lock.
//! - **Own**: a read-back or a release of a file this process expects to be
//!   its own, in a directory no one else may write: one open, one read, no
//!   `fstat` (a short read of a regular file is its end; anything else
//!   there reads as not ours), and no parse: the caller looks for its token
//!   in the bytes ([`record::carries_token`](crate::record::carries_token)),
//!   and the evidence's `record` is `Err(NotARecord::Empty)`.

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{FlockOperation, Mode as FsMode, OFlags, Stat};
use rustix::io::Errno;

use super::LockFile;
use crate::error::{Error, Result};
use crate::lock::judge::Evidence;
use crate::procfs;
use crate::record::{MAX_RECORD_BYTES, NotARecord, Record};

/// How carefully to read (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    Look,
    Peek,
    Recheck,
    Own,
}

impl LockFile {
    /// What is at the lock path, and whether its writer's kernel lock is
    /// held: `None` when nothing is there.
    pub(super) fn look(&self) -> Result<Option<Evidence>> {
        self.read_at_path(Read::Look)
    }

    /// The bytes at the lock path, neither parsed nor judged: `None` when
    /// nothing is there (see the module docs: a peek fails where a look
    /// does). A file that a look could not read is no record: no bytes.
    pub(super) fn peek(&self) -> Result<Option<Vec<u8>>> {
        Ok(self.read_at_path(Read::Peek)?.map(|ev| ev.bytes))
    }

    /// `fstat(2)` of the entry `name` of the lock's directory, never
    /// following a link nor looking into a file system mounted on it
    /// (`EXDEV`): see [`crate::walk::stat_entry`]. Every name onlyone
    /// looks up in a lock directory (the lock path, its temp files, the
    /// removal guard, the queue's tickets and place) is looked up so.
    pub(super) fn stat_entry(&self, name: &OsStr) -> rustix::io::Result<Stat> {
        crate::walk::stat_entry(&*self.inner.dir, name)
    }

    /// Opens the entry `name` of the lock's directory, as
    /// [`crate::walk::open_entry`] does (`EXDEV`: a mount point).
    pub(super) fn open_entry(
        &self,
        name: &OsStr,
        flags: OFlags,
        mode: FsMode,
    ) -> rustix::io::Result<OwnedFd> {
        crate::walk::open_entry(&*self.inner.dir, name, flags, mode)
    }

    /// [`Error::MountPoint`] for the entry `name` of the lock's directory.
    pub(super) fn mount_point(&self, name: &OsStr) -> Error {
        Error::MountPoint {
            path: self.dir().join(name),
        }
    }

    /// Reads what is at the lock path (`None`: nothing).
    pub(super) fn read_at_path(&self, how: Read) -> Result<Option<Evidence>> {
        let path = self.path();
        if matches!(how, Read::Look | Read::Peek) {
            match self.stat_entry(self.name()) {
                Ok(st) => self.check_regular(st.st_mode)?,
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::XDEV) => return Err(self.mount_point(self.name())),
                Err(_) => {} // the open below says what is wrong
            }
        }
        let fd = match self.open_entry(
            self.name(),
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
            FsMode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err(Error::Symlink { path: path.into() }),
            Err(Errno::NXIO | Errno::XDEV) if how == Read::Own => return Ok(Some(not_ours())),
            Err(Errno::XDEV) => return Err(self.mount_point(self.name())),
            Err(Errno::NXIO) => {
                return Err(Error::NotRegular {
                    path: path.into(),
                    kind: "socket",
                });
            }
            Err(e @ (Errno::ACCESS | Errno::PERM)) if how != Read::Own => {
                return self.denied(e);
            }
            Err(e) => return Err(Error::io("open", path, e)),
        };
        // A peek reads as Own does: the look above found a regular file.
        let (want, mtime, owner) = if matches!(how, Read::Own | Read::Peek) {
            (MAX_RECORD_BYTES + 1, 0, 0)
        } else {
            let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("inspect", path, e))?;
            self.check_regular(st.st_mode)?;
            // Read what fstat says is there (records are never rewritten
            // in place), so a record takes one read(2) and no second one
            // for EOF. A file larger than a record is read only far enough
            // to say so.
            let size = usize::try_from(st.st_size).unwrap_or(usize::MAX);
            (size.min(MAX_RECORD_BYTES + 1), st.st_mtime, st.st_uid)
        };
        // Read into the vector's spare room, never zeroed first: a
        // read-back sizes it for the largest record, and a start reads
        // its record back twice.
        let mut bytes = Vec::with_capacity(want);
        while bytes.len() < want {
            match rustix::io::read(&fd, rustix::buffer::spare_capacity(&mut bytes)) {
                Ok(0) => break,
                Ok(_) => {
                    if matches!(how, Read::Own | Read::Peek) {
                        break;
                    }
                }
                Err(Errno::INTR) => {}
                // Whatever it is now, Look says what is wrong with it.
                Err(_) if how == Read::Peek => return self.read_at_path(Read::Look),
                // A directory or a FIFO is not our record.
                Err(Errno::ISDIR | Errno::AGAIN | Errno::INVAL) if how == Read::Own => {
                    return Ok(Some(not_ours()));
                }
                Err(e) => return Err(Error::io("read", path, e)),
            }
        }
        let len = bytes.len();
        let record = if len > MAX_RECORD_BYTES {
            Err(NotARecord::TooLarge)
        } else if matches!(how, Read::Own | Read::Peek) {
            // Only the token matters to a read-back or a release, and
            // `record::carries_token` finds it in the bytes: nothing is
            // parsed (see `Evidence::carries_token`); a peek's caller
            // reads the one line it wants.
            Err(NotARecord::Empty)
        } else {
            // Start times on this process's clock, where that can be done;
            // otherwise the verdict sees another time namespace and says
            // unknown.
            // The file's owner wrote it, and it speaks only for that
            // user's processes, whatever its `uid=` line claims.
            Record::parse(&bytes).map(|r| {
                let mut r = r.in_local_clock().unwrap_or(r);
                r.uid = Some(owner);
                r
            })
        };
        let kernel_locked = how == Read::Look && self.kernel_locked(&fd, &record, owner)?;
        Ok(Some(Evidence {
            bytes,
            record,
            kernel_locked,
            mtime,
            denied: false,
            owner,
        }))
    }

    /// Whether the writer's kernel lock (flock) on the file is held. If
    /// the owner has died since it was seen held, it is tested again: a
    /// dying process drops its flocks before /proc shows it dead. A flock
    /// held without a live owner of the file's user proves nothing by
    /// itself: anyone who can open a file can flock it (a 0644 record
    /// included), so it counts only when a process whose real uid is the
    /// file's owner holds it exclusively, as writers do (`/proc/locks`;
    /// [`members::may_carry`](crate::lock::members::may_carry)). Not any of its uids: another account can
    /// take the flock and exec a setuid program of the owner's that waits
    /// for ever (`su` at its password prompt), whose effective and saved
    /// uids are then the owner's. Who holds it legitimately once the
    /// owner is gone is the owner's fork (the run's command between its
    /// fork and its exec, a library user's child), of the owner's real
    /// uid; `acquire`'s owner holds none.
    fn kernel_locked(
        &self,
        fd: &OwnedFd,
        record: &std::result::Result<Record, NotARecord>,
        owner: u32,
    ) -> Result<bool> {
        let held = || match rustix::fs::flock(fd, FlockOperation::NonBlockingLockShared) {
            Ok(()) => Ok(false),
            Err(Errno::WOULDBLOCK) => Ok(true),
            Err(e) => Err(Error::io("probe the kernel lock on", self.path(), e)),
        };
        let Ok(r) = record else {
            // Not a record: whoever holds a kernel lock on it (flock(1),
            // another tool), shared or exclusive, holds it, as flock(1)
            // itself would say.
            if held()? {
                return Ok(true);
            }
            let _ = rustix::fs::flock(fd, FlockOperation::Unlock);
            let st = rustix::fs::fstat(fd).map_err(|e| Error::io("inspect", self.path(), e))?;
            return Ok(!procfs::flock_holders(st.st_dev, st.st_ino).is_empty());
        };
        if !held()? {
            return Ok(false);
        }
        if procfs::probe(r.pid, r.start).is_alive() && r.may_name(r.pid) {
            return Ok(true);
        }
        if !held()? {
            return Ok(false);
        }
        let st = rustix::fs::fstat(fd).map_err(|e| Error::io("inspect", self.path(), e))?;
        Ok(procfs::flock_holders(st.st_dev, st.st_ino)
            .into_iter()
            .any(|(pid, exclusive)| {
                exclusive
                    && match procfs::ProcId::of(pid) {
                        // /proc/locks names who took the lock: a holder
                        // it cannot show (another PID namespace), or the
                        // recorded owner, gone while its lock lives on in
                        // a process that inherited it (a fork), is the
                        // run's.
                        None => pid == 0 || pid == r.pid,
                        Some(_) => crate::lock::members::may_carry(Some(owner), pid),
                    }
            }))
    }

    /// A file this user may not read: judged without its bytes.
    fn denied(&self, e: Errno) -> Result<Option<Evidence>> {
        let st = match self.stat_entry(self.name()) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::XDEV) => return Err(self.mount_point(self.name())),
            Err(e) => return Err(Error::io("inspect", self.path(), e)),
        };
        self.check_regular(st.st_mode)?;
        Ok(Some(Evidence {
            bytes: Vec::new(),
            record: Err(NotARecord::Denied {
                why: io::Error::from(e).to_string(),
            }),
            kernel_locked: false,
            mtime: st.st_mtime,
            denied: true,
            owner: st.st_uid,
        }))
    }

    /// Refuses anything but a regular file at the lock path.
    pub(super) fn check_regular(&self, mode: u32) -> Result<()> {
        use rustix::fs::FileType;
        let kind = match FileType::from_raw_mode(mode) {
            FileType::RegularFile => return Ok(()),
            FileType::Symlink => {
                return Err(Error::Symlink {
                    path: self.path().into(),
                });
            }
            FileType::Directory => "directory",
            FileType::Fifo => "FIFO",
            FileType::Socket => "socket",
            FileType::CharacterDevice => "character device",
            FileType::BlockDevice => "block device",
            FileType::Unknown => "special file",
        };
        Err(Error::NotRegular {
            path: self.path().into(),
            kind,
        })
    }
}

/// What a read of one's own record makes of something that is not even a
/// regular file: not ours.
fn not_ours() -> Evidence {
    Evidence {
        bytes: Vec::new(),
        record: Err(NotARecord::Empty),
        kernel_locked: false,
        mtime: 0,
        denied: false,
        owner: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a peek and a look say of the same path: the bytes (or
    /// nothing), or the same error.
    fn both(lock: &LockFile) -> (String, String) {
        let peek = match lock.peek() {
            Ok(b) => format!("{:?}", b.map(|b| String::from_utf8_lossy(&b).into_owned())),
            Err(e) => e.to_string(),
        };
        let look = match lock.look() {
            Ok(ev) => format!(
                "{:?}",
                ev.map(|ev| String::from_utf8_lossy(&ev.bytes).into_owned())
            ),
            Err(e) => e.to_string(),
        };
        (peek, look)
    }

    #[test]
    fn a_peek_reads_what_a_look_reads_and_fails_where_it_fails() {
        let dir = tempfile::tempdir().unwrap();
        let lock = LockFile::open(dir.path().join("j.lock")).unwrap();
        let (peek, look) = both(&lock);
        assert_eq!(peek, "None");
        assert_eq!(peek, look);
        let guard = lock.try_acquire().unwrap();
        let (peek, look) = both(&lock);
        assert!(peek.contains("token="), "{peek}");
        assert_eq!(peek, look);
        drop(guard);
        let path = lock.path();
        for what in [
            "an empty file",
            "no record",
            "a large file",
            "a directory",
            "a link",
        ] {
            match what {
                "an empty file" => std::fs::write(path, "").unwrap(),
                "no record" => std::fs::write(path, "x\0y").unwrap(),
                "a large file" => std::fs::write(path, vec![b'7'; MAX_RECORD_BYTES + 10]).unwrap(),
                "a directory" => std::fs::create_dir(path).unwrap(),
                _ => std::os::unix::fs::symlink("/", path).unwrap(),
            }
            let (peek, look) = both(&lock);
            assert_eq!(peek, look, "{what}");
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
        }
    }
}
