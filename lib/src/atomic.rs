//! One atomic file writer, working on descriptors: for files onlyone
//! writes whole where other accounts may reach them (`metrics --textfile`
//! in a collector's directory).
//!
//! The directory is opened once; the temp file is created in it under a
//! random name with `O_CREAT|O_EXCL|O_NOFOLLOW`, given its mode with
//! `fchmod(2)` on its descriptor (the umask does not narrow it), written,
//! synced and renamed over the file's name, all relative to the
//! directory's descriptor. Nothing is opened, followed or chmod'ed by path
//! after the temp file exists, so another account that can write the
//! directory and swaps the temp file for a symlink changes the mode of
//! nothing but what onlyone created. A symlink at the final name is
//! replaced, never followed.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use rustix::fs::{AtFlags, CWD, Mode, OFlags};
use rustix::io::Errno;

/// The longest name a file may have in a directory (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// How many random names are tried before giving up (each collision is a
/// chance of 2^-64, or another account that guessed it).
const TRIES: usize = 8;

/// Writes `bytes` to `path` atomically, with exactly `mode` (`0o644`): a
/// reader sees the old content or the new, never a part.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let (dir, name) = split(path)?;
    let dir = rustix::fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let (temp, fd) = create_temp(&dir, name, mode)?;
    let written = fill(&fd, bytes, mode)
        .and_then(|()| rustix::fs::renameat(&dir, &temp, &dir, name).map_err(io::Error::from));
    if written.is_err() {
        // By name, in the directory held open: unlink never follows a
        // link, so what is removed is the temp name, whatever it is now.
        let _ = rustix::fs::unlinkat(&dir, &temp, AtFlags::empty());
    }
    written
}

/// The directory (`.` for a bare name) and the file name of `path`.
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    let name = match path.file_name() {
        Some(n) if !path.as_os_str().as_bytes().ends_with(b"/") => n,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path names no file",
            ));
        }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// Creates a new temp file beside `name` in `dir`: `.NAME.RANDOM.tmp`.
fn create_temp(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<(OsString, OwnedFd)> {
    for _ in 0..TRIES {
        let temp = temp_name(name, random_suffix()?);
        match rustix::fs::openat(
            dir,
            &temp,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode & 0o7777),
        ) {
            Ok(fd) => return Ok((temp, fd)),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "every temp name tried was taken",
    ))
}

/// `.NAME.SUFFIX.tmp`, with NAME shortened to keep it a valid file name.
fn temp_name(name: &OsStr, suffix: u64) -> OsString {
    let tail = format!(".{suffix:016x}.tmp");
    let keep = NAME_MAX - 1 - tail.len();
    let mut bytes = Vec::with_capacity(NAME_MAX);
    bytes.push(b'.');
    bytes.extend(name.as_bytes().iter().take(keep));
    bytes.extend(tail.as_bytes());
    OsString::from_vec(bytes)
}

fn random_suffix() -> io::Result<u64> {
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        match rustix::rand::getrandom(&mut buf[got..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => got += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(u64::from_ne_bytes(buf))
}

/// Gives the new file its mode, its content, and syncs it.
fn fill(fd: &OwnedFd, bytes: &[u8], mode: u32) -> io::Result<()> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o7777))?;
    let mut off = 0;
    while off < bytes.len() {
        match rustix::io::write(fd.as_fd(), &bytes[off..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    rustix::fs::fsync(fd)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_whole_with_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.prom");
        write_file(&path, b"one\n", 0o640).unwrap();
        write_file(&path, b"two\n", 0o644).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
        // No temp file is left.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_symlink_at_the_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("secret");
        std::fs::write(&target, b"secret").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = dir.path().join("m.prom");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        write_file(&path, b"x\n", 0o644).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"secret");
        let meta = std::fs::metadata(&target).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    }

    #[test]
    fn temp_names_stay_valid_file_names() {
        let long = OsString::from("x".repeat(255));
        let t = temp_name(&long, u64::MAX);
        assert_eq!(t.len(), NAME_MAX);
        assert!(t.as_bytes().starts_with(b".x"));
        assert!(t.as_bytes().ends_with(b".ffffffffffffffff.tmp"));
        assert!(split(Path::new("dir/")).is_err());
        assert!(split(Path::new("/")).is_err());
        assert_eq!(
            split(Path::new("m.prom")).unwrap(),
            (Path::new("."), OsStr::new("m.prom"))
        );
    }
}
