//! The temp file a record is written to before it is linked into place,
//! and the sweep of those that dead writers left behind.
//!
//! A temp file is `DIR/.onlyone.PID-START.RAND8.tmp`: the writer's
//! identity (so a sweeper can tell whether it is still alive) and 8 random
//! hex digits, which no other account can predict. The name does not include the lock's, so a
//! lock file name of up to 255 bytes still leaves room for it.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FlockOperation, Mode as FsMode, OFlags};
use rustix::io::Errno;

use super::{LockFile, unix_now};
use crate::error::{Error, Result};
use crate::procfs::ProcId;

/// The start of every temp file's name.
const TEMP_PREFIX: &str = ".onlyone.";

/// A temp file that is unlinked when dropped unless it was kept.
pub(super) struct TempFile<'a> {
    lock: &'a LockFile,
    /// `None` once the name is gone (renamed over the lock file).
    name: Option<OsString>,
    fd: Option<OwnedFd>,
}

impl TempFile<'_> {
    /// Gives the file the lock's name (`link(2)`; EEXIST when taken).
    pub(super) fn link_into_place(&self) -> rustix::io::Result<()> {
        let dir = &self.lock.inner.dir;
        let name = self.name.as_deref().ok_or(Errno::BADF)?;
        rustix::fs::linkat(dir, name, dir, self.lock.name(), AtFlags::empty())
    }

    /// Its current name (until it is renamed).
    pub(super) fn name(&self) -> Option<&std::ffi::OsStr> {
        self.name.as_deref()
    }

    /// Says that its name is gone (it was renamed over the lock file).
    pub(super) fn renamed(&mut self) {
        self.name = None;
    }

    /// Keeps the file (and its kernel lock): drops its temporary name, if
    /// any, and returns its fd.
    pub(super) fn into_kept(mut self) -> OwnedFd {
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

impl LockFile {
    /// Writes the record to a fresh temp file, locked, in the lock's
    /// directory.
    pub(super) fn write_temp(&self, writer: ProcId, bytes: &[u8]) -> Result<TempFile<'_>> {
        // Random, not the token's first digits: the token is in the 0644
        // record, and a name another account can predict it can take first
        // (O_EXCL then fails every fire) in a directory it may write.
        let tok: String = super::new_token().chars().take(8).collect();
        let name = OsString::from(format!("{TEMP_PREFIX}{writer}.{tok}.tmp"));
        // Created 0600, so that no other account can open it before this
        // writer's kernel lock is on it (a shared flock taken first would
        // fail the exclusive one); opened up once locked.
        let fd = rustix::fs::openat(
            &self.inner.dir,
            &name,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            FsMode::from_raw_mode(0o600),
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
        rustix::fs::flock(fd, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| Error::io("lock a temp file in", self.dir(), e))?;
        // The umask must not hide who holds a run from other users (it is
        // process-wide and may change, so it is not cached to skip this).
        rustix::fs::fchmod(fd, FsMode::from_raw_mode(record_mode()))
            .map_err(|e| Error::io("chmod", self.dir(), e))?;
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

    /// Removes temp files left in the directory by writers that died
    /// between creating and linking them (`.onlyone.PID-START.RAND8.tmp`).
    /// A temp file's name carries its writer's pid and start time; a live
    /// writer's file is kept, whichever lock it is for.
    pub fn sweep_temp_files(&self) -> usize {
        let prefix = TEMP_PREFIX.as_bytes();
        // The directory held open, listed without a look at any entry.
        let Ok(entries) = rustix::fs::Dir::read_from(&*self.inner.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let file_name = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes());
            let Some(writer) = file_name
                .as_bytes()
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(b".tmp"))
                .and_then(parse_temp_middle)
            else {
                continue;
            };
            // A temp file lives for microseconds. One younger than a minute
            // is left alone whatever its name says: its writer may read
            // start times on another clock (a time namespace).
            // Only a regular file is one (another account may have put
            // anything of that name there, a mount point included).
            let Ok(st) = self.stat_entry(file_name) else {
                continue;
            };
            let young = unix_now().saturating_sub(st.st_mtime.max(0) as u64) < 60;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
                && !young
                && !writer.is_alive()
                && rustix::fs::unlinkat(&self.inner.dir, file_name, AtFlags::empty()).is_ok()
            {
                removed += 1;
            }
        }
        removed
    }
}

/// The mode of a lock file: 0644, so that whoever can see the run in `ps`
/// sees who holds it; 0600 where `/proc` hides other users' processes
/// (`hidepid`), since a record shows the command line as `ps` would.
pub(crate) fn record_mode() -> u32 {
    static MODE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| {
        if crate::procfs::proc_hides_processes() {
            0o600
        } else {
            0o644
        }
    })
}

/// True for an error that says the directory cannot take a new file
/// (full, read-only, not writable by this user), not that anything is
/// wrong with the lock.
pub(super) fn is_unwritable(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if matches!(
        source.raw_os_error().map(Errno::from_raw_os_error),
        Some(Errno::NOSPC | Errno::ROFS | Errno::ACCESS | Errno::PERM | Errno::DQUOT)
    ))
}

/// Parses `PID-START.RAND8` (decimal, decimal, 8 lowercase hex digits).
fn parse_temp_middle(middle: &[u8]) -> Option<ProcId> {
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
    Some(ProcId {
        pid: pid.parse().ok()?,
        start: start.parse().ok()?,
    })
}
