//! Opening a directory by its path without following another account's
//! symbolic links.
//!
//! Whoever owns a symbolic link chose where it leads. A path given to
//! onlyone (`--dir /tmp/jobs`, a lock's path, a store's socket directory)
//! may pass links anywhere along it: `/var/run` (root's, to `/run`) or one
//! of the caller's own is the caller's choice; one that another account
//! made in `/tmp` is that account's, and following it would let that
//! account choose which of root's locks a root job shares.
//!
//! [`open_dir`] opens a directory following only the links of the caller
//! and root ([`trusted_owner`]). It first tries one system call that
//! follows no link at all (`openat2(2)` with `RESOLVE_NO_SYMLINKS`: the
//! common path has none); a path with links is then walked one component
//! at a time on descriptors ([`walk`]): each component is opened with
//! `O_PATH | O_NOFOLLOW`, a link is judged by the owner of the link it
//! opened and read through that same descriptor, so no rename between a
//! look and its use can swap in another link. `..` is the parent of the
//! directory reached, as the kernel resolves it, not a name taken off the
//! text. At most [`MAX_LINKS`] links are followed (the kernel's own limit).
//! A link with more than one name is a hard link: where hard links are
//! not protected (`fs.protected_hardlinks=0`), any account may give root's
//! link (`/var/run`) a second name of its own choosing in a directory it
//! can write, and the new name is still root's. Such a link is followed
//! only where it sits in a directory no other account could have written
//! in (owned by the caller or root, writable by no one else).
//!
//! [`open_entry`] and [`stat_entry`] look up one name in a directory that
//! may hold what other accounts put there (a lock directory): never
//! following a link, never leaving the directory, and never crossing into
//! a file system mounted on the name (`RESOLVE_NO_XDEV`) unless only the
//! caller or root may write in the directory. Another account may mount
//! one where it may write (a FUSE file system of its own, with
//! `allow_other`, on a directory it made in `/tmp`), and one whose server
//! never answers would leave a `stat` or an `open` of the name waiting for
//! ever; the kernel refuses the crossing (`EXDEV`) without a word to that
//! file system. What is mounted in a directory only the caller or root
//! may write in is theirs (a read-only bind mount of a journal).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// The most links one path may lead through (Linux's `MAXSYMLINKS`).
pub(crate) const MAX_LINKS: usize = 40;

/// A directory or a link met on the way, as `fstat(2)` saw it on the
/// descriptor that was followed.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// Where it is: the directories reached, their names appended.
    pub path: PathBuf,
    pub uid: u32,
    /// Read by the store's socket check.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub gid: u32,
    pub mode: u32,
}

/// A walk's end: the directory (an `O_PATH` descriptor), and everything
/// met on the way.
pub(crate) struct Walked {
    pub fd: OwnedFd,
    /// Every directory an entry was looked up in, the last one included,
    /// in order.
    pub dirs: Vec<Seen>,
    /// Every link followed, in order (read by the store's socket check).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub links: Vec<Seen>,
}

/// Why a walk stopped.
#[derive(Debug)]
pub(crate) enum WalkError {
    /// A link whose owner the rule does not trust, or one with more than
    /// one name where other accounts may write.
    Refused(Seen),
    /// Nothing there, at this path.
    Missing(PathBuf),
    /// Not a directory, at this path.
    NotDir(PathBuf),
    /// Any other failure (`ELOOP` past [`MAX_LINKS`], `EACCES`), and where.
    Io(PathBuf, Errno),
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::Refused(l) if trusted_owner(l.uid) => write!(
                f,
                "the symbolic link `{}` has more than one name (a hard link) and sits where \
                 other accounts may write, so it is not followed",
                l.path.display(),
            ),
            WalkError::Refused(l) => write!(
                f,
                "the symbolic link `{}` is {}'s, so it is not followed",
                l.path.display(),
                crate::text::user_name(l.uid)
            ),
            WalkError::Missing(p) => write!(f, "`{}` does not exist", p.display()),
            WalkError::NotDir(p) => write!(f, "`{}` is not a directory", p.display()),
            WalkError::Io(p, e) => write!(f, "`{}`: {e}", p.display()),
        }
    }
}

/// True for a link's owner whose choice the caller makes its own: the
/// caller (effective uid) and root.
pub(crate) fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

/// Opens the directory `path` with `flags` (`O_RDONLY`, or `O_PATH` for
/// no more than a look; `O_DIRECTORY` and `O_CLOEXEC` are added),
/// following only the links of the caller and root (see the module docs).
pub(crate) fn open_dir(path: &Path, flags: OFlags) -> Result<OwnedFd, WalkError> {
    let flags = flags | OFlags::DIRECTORY | OFlags::CLOEXEC;
    // One system call when the path has no link at all; any failure (a
    // link: ELOOP; a kernel without openat2, or a filter that refuses it)
    // is decided by the walk.
    if let Ok(fd) = rustix::fs::openat2(CWD, path, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS)
    {
        return Ok(fd);
    }
    let walked = walk(path, &trusted_owner)?;
    if flags.contains(OFlags::PATH) {
        return Ok(walked.fd);
    }
    let at = walked
        .dirs
        .last()
        .map_or_else(|| path.to_path_buf(), |d| d.path.clone());
    rustix::fs::openat(&walked.fd, ".", flags, Mode::empty()).map_err(|e| WalkError::Io(at, e))
}

/// Walks `path` to a directory one component at a time, following a link
/// only when `trust` accepts its owner (see the module docs). A relative
/// path starts at the working directory.
pub(crate) fn walk(path: &Path, trust: &dyn Fn(u32) -> bool) -> Result<Walked, WalkError> {
    let bytes = path.as_os_str().as_bytes();
    let (start, mut at) = if bytes.starts_with(b"/") {
        ("/", PathBuf::from("/"))
    } else {
        (".", std::env::current_dir().unwrap_or_else(|_| ".".into()))
    };
    let opath = OFlags::PATH | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(start, opath | OFlags::DIRECTORY, Mode::empty())
        .map_err(|e| WalkError::Io(at.clone(), e))?;
    let mut dirs = vec![seen(&fd, &at)?];
    let mut links = Vec::new();
    let mut todo: VecDeque<OsString> = components(bytes).collect();
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            fd = rustix::fs::openat(&fd, "..", opath | OFlags::DIRECTORY, Mode::empty())
                .map_err(|e| WalkError::Io(at.join(".."), e))?;
            at.pop();
            dirs.push(seen(&fd, &at)?);
            continue;
        }
        let here = at.join(&name);
        let next = open_component(&fd, &name).map_err(|e| match e {
            Errno::NOENT => WalkError::Missing(here.clone()),
            e => WalkError::Io(here.clone(), e),
        })?;
        let st = seen(&next, &here)?;
        match st.mode & libc::S_IFMT {
            libc::S_IFDIR => {
                fd = next;
                at = here;
                dirs.push(st);
            }
            libc::S_IFLNK => {
                if !trust(st.uid) || (hard_linked(&next) && !only_trusted_write(&dirs, trust)) {
                    return Err(WalkError::Refused(st));
                }
                links.push(st);
                if links.len() > MAX_LINKS {
                    return Err(WalkError::Io(here, Errno::LOOP));
                }
                let target = rustix::fs::readlinkat(&next, "", Vec::new())
                    .map_err(|e| WalkError::Io(here.clone(), e))?;
                let target = target.as_bytes();
                if target.is_empty() {
                    return Err(WalkError::Missing(here));
                }
                if target.starts_with(b"/") {
                    fd = rustix::fs::open("/", opath | OFlags::DIRECTORY, Mode::empty())
                        .map_err(|e| WalkError::Io("/".into(), e))?;
                    at = PathBuf::from("/");
                    dirs.push(seen(&fd, &at)?);
                }
                for (i, c) in components(target).enumerate() {
                    todo.insert(i, c);
                }
            }
            _ => return Err(WalkError::NotDir(here)),
        }
    }
    Ok(Walked { fd, dirs, links })
}

/// True when the link `fd` has more than one name (see the module docs);
/// true too when that cannot be told.
fn hard_linked(fd: &OwnedFd) -> bool {
    rustix::fs::fstat(fd).map_or(true, |st| st.st_nlink > 1)
}

/// True when no account but those `trust` accepts could have made an
/// entry in the last directory of `dirs` (where the walk is): it is
/// theirs, and neither its group nor others may write in it.
fn only_trusted_write(dirs: &[Seen], trust: &dyn Fn(u32) -> bool) -> bool {
    dirs.last()
        .is_some_and(|d| private_to(d.uid, d.mode, trust))
}

/// True for a directory of `uid` and `mode` in which only owners `trust`
/// accepts may make an entry: theirs, writable by neither its group nor
/// others.
fn private_to(uid: u32, mode: u32, trust: &dyn Fn(u32) -> bool) -> bool {
    trust(uid) && mode & 0o022 == 0
}

/// The resolution of a name in a directory that stays there: no link
/// followed (the last component's own included), nothing outside it
/// reached, and no mount point crossed.
const IN_DIR: ResolveFlags = ResolveFlags::NO_XDEV
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::BENEATH);

/// Opens the entry `name` of the directory `dir` with `flags` (`O_NOFOLLOW`
/// and `O_CLOEXEC` are added; `mode` counts only with `O_CREAT`), without
/// following a link and without crossing into a file system mounted on it
/// (see the module docs): `EXDEV` when one is mounted there, unless only
/// the caller or root may write in `dir`. With
/// `O_PATH`, a link is opened as itself (`O_NOFOLLOW`); otherwise a link
/// is `ELOOP`, as `openat(2)` with `O_NOFOLLOW` has it. Where the kernel
/// has no `openat2(2)` (before Linux 5.6) or a filter refuses it, the name
/// is opened with `openat(2)`, which crosses a mount.
pub(crate) fn open_entry(
    dir: impl AsFd,
    name: &OsStr,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // openat2 refuses a mode without O_CREAT, where openat ignores it.
    let mode = if flags.contains(OFlags::CREATE) {
        mode
    } else {
        Mode::empty()
    };
    match rustix::fs::openat2(dir.as_fd(), name, flags, mode, IN_DIR) {
        Err(Errno::NOSYS | Errno::PERM) => rustix::fs::openat(dir, name, flags, mode),
        Err(Errno::XDEV) if only_trusted_may_write(dir.as_fd()) => {
            rustix::fs::openat(dir, name, flags, mode)
        }
        r => r,
    }
}

/// True when no one but the caller and root may make an entry in the
/// directory `dir` (or mount a file system on one).
fn only_trusted_may_write(dir: std::os::fd::BorrowedFd<'_>) -> bool {
    rustix::fs::fstat(dir).is_ok_and(|st| private_to(st.st_uid, st.st_mode, &trusted_owner))
}

/// What `fstat(2)` says of the entry `name` of the directory `dir`, not
/// following a link and never looking into a file system mounted on it
/// (`EXDEV`; as [`open_entry`] has it): [`open_entry`] with `O_PATH`, which
/// opens nothing (a device is not opened, a FIFO not waited on).
pub(crate) fn stat_entry(dir: impl AsFd, name: &OsStr) -> Result<rustix::fs::Stat, Errno> {
    let fd = open_entry(dir, name, OFlags::PATH, Mode::empty())?;
    rustix::fs::fstat(&fd)
}

/// Opens one component without following it: a directory as one (which
/// mounts an automounted one), anything else (a link) as itself.
fn open_component(dir: &OwnedFd, name: &OsString) -> Result<OwnedFd, Errno> {
    let opath = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(dir, name, opath | OFlags::DIRECTORY, Mode::empty()) {
        Err(Errno::NOTDIR) => rustix::fs::openat(dir, name, opath, Mode::empty()),
        r => r,
    }
}

/// What `fstat(2)` says of `fd`, at `path`.
fn seen(fd: &OwnedFd, path: &Path) -> Result<Seen, WalkError> {
    let st = rustix::fs::fstat(fd).map_err(|e| WalkError::Io(path.to_path_buf(), e))?;
    Ok(Seen {
        path: path.to_path_buf(),
        uid: st.st_uid,
        gid: st.st_gid,
        mode: st.st_mode,
    })
}

/// The names of a path, `.` and empty ones left out (`..` kept).
fn components(bytes: &[u8]) -> impl Iterator<Item = OsString> + '_ {
    bytes
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| OsString::from_vec(c.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn real(p: &Path) -> PathBuf {
        std::fs::canonicalize(p).unwrap()
    }

    #[test]
    fn links_are_followed_as_the_kernel_follows_them() {
        let d = tempfile::tempdir().unwrap();
        let base = real(d.path());
        std::fs::create_dir_all(base.join("a/b/c")).unwrap();
        symlink("a/b", base.join("rel")).unwrap();
        symlink(base.join("a/b/c"), base.join("abs")).unwrap();
        symlink("rel/c/..", base.join("chain")).unwrap();
        symlink("loop", base.join("loop")).unwrap();
        symlink("nowhere", base.join("dangling")).unwrap();
        std::fs::write(base.join("file"), "").unwrap();
        let ends = |p: PathBuf| {
            let w = walk(&p, &|_| true).unwrap();
            let st = rustix::fs::fstat(&w.fd).unwrap();
            let want = std::fs::metadata(&p).unwrap();
            use std::os::unix::fs::MetadataExt;
            assert_eq!((st.st_dev, st.st_ino), (want.dev(), want.ino()), "{p:?}");
            w
        };
        ends(base.join("rel"));
        ends(base.join("rel/c"));
        ends(base.join("abs/.."));
        ends(base.join("chain"));
        let w = ends(base.join("./a//b/../b/c/"));
        assert!(w.links.is_empty());
        assert_eq!(w.dirs.last().unwrap().path, base.join("a/b/c"));
        let w = ends(base.join("chain/c"));
        assert_eq!(w.links.len(), 2, "{:?}", w.links);
        assert_eq!(w.links[0].path, base.join("chain"));
        assert_eq!(w.links[1].path, base.join("rel"));
        assert_eq!(w.dirs.last().unwrap().path, base.join("a/b/c"));
        assert!(matches!(
            walk(&base.join("loop"), &|_| true),
            Err(WalkError::Io(_, Errno::LOOP))
        ));
        assert!(matches!(
            walk(&base.join("dangling"), &|_| true),
            Err(WalkError::Missing(p)) if p == base.join("nowhere")
        ));
        assert!(matches!(
            walk(&base.join("file"), &|_| true),
            Err(WalkError::NotDir(p)) if p == base.join("file")
        ));
        assert!(matches!(
            walk(&base.join("file/x"), &|_| true),
            Err(WalkError::NotDir(p)) if p == base.join("file")
        ));
        match walk(&base.join("rel/c"), &|_| false) {
            Err(WalkError::Refused(l)) => assert_eq!(l.path, base.join("rel")),
            other => panic!("{:?}", other.map(|w| w.dirs)),
        }
        // Both ways of opening agree; no link on the path needs no trust.
        assert!(open_dir(&base.join("rel/c"), OFlags::RDONLY).is_ok());
        assert!(open_dir(&base.join("a/b"), OFlags::PATH).is_ok());
    }
}
