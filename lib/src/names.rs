//! Lock names and the directory they live in.
//!
//! A LOCK argument with a `/` is a path. Otherwise it is a name
//! (`[A-Za-z0-9][A-Za-z0-9._-]{0,63}`) and the path is `DIR/NAME.lock`, where
//! DIR is `--dir`, else `$ONLYONE_DIR`, else `/run/onlyone` for root, else
//! `/tmp/onlyone-$UID`: the same for every session of a user (never
//! `$XDG_RUNTIME_DIR`, which cron does not set). The directory is created
//! (0755 for root, 0700 otherwise) by the commands that write, on
//! descriptors ([`ensure_dir`]). Anyone may take the name
//! `/tmp/onlyone-UID` first, so every command refuses a default directory
//! that another account made or could change ([`check_default_dir`]).
//! Whoever owns a symbolic link chooses where it leads, so no lock
//! directory, whatever its source, is reached through another account's
//! link anywhere on its path ([`check_links`]; opening a lock and making
//! its directory follow the same rule, `walk.rs`).
//!
//! **The state directory.** Journals live apart from the locks, in a
//! directory that survives a reboot (`/run` is a tmpfs, and `/tmp` often
//! is): `--state-dir`, else `$ONLYONE_STATE_DIR`, else `/var/lib/onlyone`
//! for root, else `$XDG_STATE_HOME/onlyone` when `XDG_STATE_HOME` is an
//! absolute path, else `$HOME/.local/state/onlyone` when `HOME` is an
//! absolute path to a directory of this user's, else
//! `/var/tmp/onlyone-state-$UID` (kept across reboots too; for an account
//! with no home of its own, as `nobody` or a uid without a passwd entry).
//! cron sets `HOME` from the passwd entry, so a job run by hand and its
//! cron fire share it ([`state_dir`]). How it is made and checked, and
//! what a journal there is called: [`crate::state`].

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::hint::Hint;

/// The longest lock name.
pub(crate) const MAX_NAME: usize = 64;

/// root's default lock directory.
pub const ROOT_DIR: &str = "/run/onlyone";

/// The environment variable that overrides the lock directory.
pub(crate) const DIR_VAR: &str = "ONLYONE_DIR";

/// root's default state directory.
pub(crate) const ROOT_STATE_DIR: &str = "/var/lib/onlyone";

/// The environment variable that overrides the state directory.
pub(crate) const STATE_DIR_VAR: &str = "ONLYONE_STATE_DIR";

/// Where a state directory came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSource {
    /// Given explicitly, by the program that uses the library.
    Given,
    /// `$ONLYONE_STATE_DIR`.
    Env,
    /// The default for this user: root's, or under its home.
    Default,
    /// `/var/tmp/onlyone-state-UID`, for a user with no home of its own: a
    /// name anyone may take first, checked as [`check_default_dir`] does.
    Fallback,
}

/// The state directory for this user: `explicit` (the one given), else `$ONLYONE_STATE_DIR`, else the default (see the module docs).
pub fn state_dir(explicit: Option<&Path>) -> (PathBuf, StateSource) {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if let Some(d) = explicit.filter(|d| !d.as_os_str().is_empty()) {
        return (absolute(d), StateSource::Given);
    }
    if let Some(d) = std::env::var_os(STATE_DIR_VAR).filter(|d| !d.is_empty()) {
        return (absolute(Path::new(&d)), StateSource::Env);
    }
    let uid = rustix::process::geteuid();
    if uid.is_root() {
        return (PathBuf::from(ROOT_STATE_DIR), StateSource::Default);
    }
    let var = |name: &str| std::env::var_os(name).map(PathBuf::from);
    if let Some(xdg) = var("XDG_STATE_HOME").filter(|p| p.is_absolute()) {
        return (xdg.join("onlyone"), StateSource::Default);
    }
    // `runuser -u nobody` leaves HOME=/nonexistent, `setpriv --reuid`
    // leaves root's: a home that is not this user's is none.
    if let Some(home) = var("HOME").filter(|p| p.is_absolute())
        && fs::metadata(&home).is_ok_and(|m| m.is_dir() && m.uid() == uid.as_raw())
    {
        return (home.join(".local/state/onlyone"), StateSource::Default);
    }
    (
        PathBuf::from(format!("/var/tmp/onlyone-state-{}", uid.as_raw())),
        StateSource::Fallback,
    )
}

/// Where a DIR came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirSource {
    /// Given explicitly, by the program that uses the library.
    Given,
    /// `$ONLYONE_DIR`.
    Env,
    /// The default for this user.
    Default,
}

/// The lock directory for this user: `explicit` (the one given), else
/// `$ONLYONE_DIR`, else the default.
pub fn lock_dir(explicit: Option<&Path>) -> (PathBuf, DirSource) {
    if let Some(d) = explicit {
        return (d.to_path_buf(), DirSource::Given);
    }
    if let Some(d) = std::env::var_os(DIR_VAR).filter(|d| !d.is_empty()) {
        return (PathBuf::from(d), DirSource::Env);
    }
    let uid = rustix::process::geteuid();
    if uid.is_root() {
        return (PathBuf::from(ROOT_DIR), DirSource::Default);
    }
    // The same for every process of the user, whatever its session:
    // $XDG_RUNTIME_DIR is set in a login session and not under cron, so a
    // job run by hand and its cron fire would lock in two places.
    (
        PathBuf::from(format!("/tmp/onlyone-{}", uid.as_raw())),
        DirSource::Default,
    )
}

/// Checks a lock name, with an error that says what a name may be.
pub fn check_name(name: &str) -> Result<(), Error> {
    let bad = |why: &str| Error::BadName {
        name: name.chars().take(100).collect(),
        why: why.to_owned(),
    };
    if name.is_empty() {
        return Err(bad("it is empty"));
    }
    if name.len() > MAX_NAME {
        return Err(bad("it is longer than 64 characters"));
    }
    let mut bytes = name.bytes();
    if !bytes.next().is_some_and(|b| b.is_ascii_alphanumeric()) {
        return Err(bad("it must start with an ASCII letter or a digit"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(bad(&format!("it contains {c:?}")));
    }
    Ok(())
}

/// Resolves a LOCK argument to a lock file path. `NAME.lock`, the lock
/// file's name as `ls` shows it, is the lock `NAME` (not `NAME.lock.lock`).
pub fn lock_path(lock: &str, dir: &Path) -> Result<PathBuf, Error> {
    if lock.contains('/') {
        return Ok(PathBuf::from(lock));
    }
    check_name(lock)?;
    let lock = lock
        .strip_suffix(".lock")
        .filter(|stem| check_name(stem).is_ok())
        .unwrap_or(lock);
    Ok(dir.join(format!("{lock}.lock")))
}

/// The short name to show for a lock path: `NAME` for `DIR/NAME.lock`
/// (the file's own name when NAME ends in `.lock`, which [`lock_path`]
/// reads back the same), else the path.
pub fn display_name(path: &Path, dir: &Path) -> String {
    if path.parent() == Some(dir)
        && let Some(file) = path.file_name().and_then(|n| n.to_str())
        && let Some(stem) = file.strip_suffix(".lock")
        && check_name(stem).is_ok()
    {
        return if stem.ends_with(".lock") { file } else { stem }.to_owned();
    }
    path.display().to_string()
}

/// Refuses this user's default lock directory when another account made
/// it or could change what it holds: owned by a user other than this one
/// or root (or a symlink that is), or group- or world-writable without the
/// sticky bit. `/tmp/onlyone-UID` is a name anyone can take first, so a
/// record found there is only believed when the directory is this user's;
/// readers check this as well as writers, before reading anything. A
/// missing directory is fine: the commands that write create it.
pub fn check_default_dir(dir: &Path) -> Result<(), Error> {
    let me = rustix::process::geteuid().as_raw();
    let link = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("inspect the lock directory", dir, e)),
    };
    let mut risk = if link.file_type().is_symlink() {
        // A link's own mode means nothing; whoever owns it chose its target.
        foreign_owner(link.uid(), me)
    } else {
        others_can_change(link.uid(), link.mode(), me)
    };
    if risk.is_none()
        && link.file_type().is_symlink()
        && let Ok(target) = fs::metadata(dir)
    {
        risk = others_can_change(target.uid(), target.mode(), me);
    }
    match risk {
        Some(risk) => Err(untrusted_default(dir, &risk)),
        None => Ok(()),
    }
}

/// Refuses a lock directory whose path passes a symbolic link that
/// another account owns (neither this user nor root): whoever owns a link
/// chooses where it leads. Every command checks this before it looks in
/// the directory, whatever its source (`--dir`, `$ONLYONE_DIR`, the
/// default); opening a lock checks it again on descriptors. A missing
/// directory, or one that cannot be walked, is left to the command.
pub fn check_links(dir: &Path) -> Result<(), Error> {
    match crate::walk::open_dir(dir, rustix::fs::OFlags::PATH) {
        Err(crate::walk::WalkError::Refused(link)) => Err(Error::foreign_link(dir, &link)),
        _ => Ok(()),
    }
}

/// [`check_default_dir`] on the directory `lock` holds open, for a lock in
/// the default directory: what is read there is what was checked, even
/// when the name was taken between the look by path and the open.
pub fn check_default_dir_held(lock: &crate::LockFile) -> Result<(), Error> {
    let st = rustix::fs::fstat(lock.dir_fd())
        .map_err(|e| Error::io("inspect the lock directory", lock.dir(), e))?;
    let me = rustix::process::geteuid().as_raw();
    match others_can_change(st.st_uid, st.st_mode, me) {
        Some(risk) => Err(untrusted_default(lock.dir(), &risk)),
        None => Ok(()),
    }
}

fn untrusted_default(dir: &Path, why: &Risk) -> Error {
    let d = dir.display();
    let fix = match why {
        Risk::Owner(_) => format!(
            "another account made it, and a record it holds could name any process, so onlyone \
             neither reads nor writes there; remove it as root (sudo rm -r {d}) or set \
             {DIR_VAR} to a directory of your own"
        ),
        Risk::Mode(_) => format!(
            "another account could have put records in it, so onlyone neither reads nor writes \
             there; check what it holds and remove it (rm -r {d}), or set {DIR_VAR} to a \
             directory of your own"
        ),
    };
    Error::UntrustedDir {
        dir: dir.to_path_buf(),
        why: format!("{why} (this user's default directory)"),
        fix,
    }
}

/// How another account could change a directory.
pub(crate) enum Risk {
    /// It owns it.
    Owner(String),
    /// It may write in it, and rename or remove what others put there.
    Mode(String),
}

impl std::fmt::Display for Risk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Risk::Owner(s) | Risk::Mode(s) => f.write_str(s),
        }
    }
}

pub(crate) fn foreign_owner(uid: u32, me: u32) -> Option<Risk> {
    (uid != me && uid != 0).then(|| {
        Risk::Owner(format!(
            "it is owned by {}, not by you ({}) or root",
            crate::text::user_name(uid),
            crate::text::user_name(me)
        ))
    })
}

/// Whether an account other than `me` and root may rename, remove or
/// replace the entries of a directory with this owner and mode.
pub(crate) fn others_can_change(uid: u32, mode: u32, me: u32) -> Option<Risk> {
    foreign_owner(uid, me).or_else(|| {
        (mode & 0o022 != 0 && mode & 0o1000 == 0).then(|| {
            Risk::Mode(format!(
                "it is group- or world-writable (mode {:o}) without the sticky bit",
                mode & 0o7777
            ))
        })
    })
}

/// Creates the lock directory if it is missing (0755 for root, 0700
/// otherwise) and checks that it is a directory. Only the directory itself
/// is created: a missing parent is an error that names it, so that a typo
/// in `--dir` does not build a tree of directories as root.
///
/// The directory is made in its parent held open, then opened without
/// following a link and given its mode on that descriptor, whatever the
/// umask: never by path. A parent in which another account may rename
/// entries (its owner, or anyone when it is writable without the sticky
/// bit) is refused, since no descriptor can tell the directory made from
/// one put in its place. A symbolic link on the way is followed only when
/// it is this user's or root's ([`check_links`]).
pub fn ensure_dir(dir: &Path, source: DirSource) -> Result<(), Error> {
    use crate::walk::WalkError;
    match crate::walk::open_dir(dir, rustix::fs::OFlags::PATH) {
        // A link to a directory (`/var/run -> /run`) is fine, when it is
        // this user's or root's.
        Ok(_) => return Ok(()),
        Err(WalkError::Missing(_)) => {}
        Err(WalkError::NotDir(_)) => return Err(not_a_dir(dir, source)),
        Err(WalkError::Refused(link)) => return Err(Error::foreign_link(dir, &link)),
        Err(WalkError::Io(at, e)) => return Err(Error::io("inspect the lock directory", at, e)),
    }
    let mode = if rustix::process::geteuid().is_root() {
        0o755
    } else {
        0o700
    };
    match create_dir(dir, source, mode) {
        // Another process created it meanwhile.
        Err(Error::Io { source: e, .. })
            if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() =>
        {
            Ok(())
        }
        // Something that is no directory (a dangling link, say).
        Err(Error::Io { source: e, .. }) if e.kind() == io::ErrorKind::AlreadyExists => {
            Err(not_a_dir(dir, source))
        }
        done => done,
    }
}

/// Makes `dir` with exactly `mode`, on descriptors.
fn create_dir(dir: &Path, source: DirSource, mode: u32) -> Result<(), Error> {
    use crate::walk::WalkError;
    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;
    let name = dir.file_name().ok_or_else(|| not_a_dir(dir, source))?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let parent_fd = match crate::walk::open_dir(parent, OFlags::RDONLY) {
        Ok(fd) => fd,
        Err(WalkError::Missing(_)) => return Err(missing_parent(dir, parent, source)),
        Err(WalkError::NotDir(_)) => return Err(not_a_dir(dir, source)),
        Err(WalkError::Refused(link)) => return Err(Error::foreign_link(dir, &link)),
        Err(WalkError::Io(_, e)) => {
            return Err(Error::io(
                "open the parent of the lock directory",
                parent,
                e,
            ));
        }
    };
    let st = rustix::fs::fstat(&parent_fd)
        .map_err(|e| Error::io("inspect the parent of the lock directory", parent, e))?;
    let me = rustix::process::geteuid().as_raw();
    if let Some(risk) = others_can_change(st.st_uid, st.st_mode, me) {
        return Err(Error::UntrustedDir {
            dir: dir.to_path_buf(),
            why: format!(
                "it is missing, and onlyone will not make it{} in `{}`: {risk}, so another \
                 account could put a directory of its choice in its place",
                from(source),
                parent.display()
            ),
            fix: format!(
                "make it yourself (mkdir -m {mode:o} {}), or use a directory whose parent \
                 only you or root can change",
                dir.display()
            ),
        });
    }
    match rustix::fs::mkdirat(&parent_fd, name, Mode::from_raw_mode(mode)) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Err(missing_parent(dir, parent, source)),
        Err(Errno::NOTDIR) => return Err(not_a_dir(dir, source)),
        Err(e) => return Err(Error::io("create the lock directory", dir, e)),
    }
    let fd = rustix::fs::openat(&parent_fd, name, flags | OFlags::NOFOLLOW, Mode::empty())
        .map_err(|e| Error::io("open the new lock directory", dir, e))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("inspect the lock directory", dir, e))?;
    if st.st_uid != me {
        // Only root or the parent's owner (this user) could have swapped
        // it: not a state to carry on in.
        return Err(Error::UntrustedDir {
            dir: dir.to_path_buf(),
            why: "it was replaced while onlyone made it".into(),
            fix: "find out what changes it, or use another directory".into(),
        });
    }
    // The umask may have narrowed the mode: widen it back for root, so
    // other users can see who holds a run.
    if st.st_mode & 0o7777 != mode {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(|e| Error::io("set the mode of the lock directory", dir, e))?;
    }
    Ok(())
}

fn missing_parent(dir: &Path, parent: &Path, source: DirSource) -> Error {
    Error::BadPath {
        path: dir.to_path_buf(),
        why: format!(
            "the lock directory{} cannot be created: its parent `{}` does not exist; \
             create it (mkdir -p {}) or use another directory",
            from(source),
            parent.display(),
            parent.display()
        ),
    }
}

fn from(source: DirSource) -> String {
    match source {
        DirSource::Given => format!(" ({})", Hint::LockDirGiven),
        DirSource::Env => format!(" (from ${DIR_VAR})"),
        DirSource::Default => String::new(),
    }
}

fn not_a_dir(dir: &Path, source: DirSource) -> Error {
    Error::BadPath {
        path: dir.to_path_buf(),
        why: format!(
            "the lock directory{} exists but is not a directory; point it elsewhere",
            from(source)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for good in ["sync", "a", "Job-1.daily_x", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-x",
            ".hidden",
            "a b",
            "x/y",
            "é",
            "a\n",
            &"x".repeat(65),
            "..",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_lock_with_a_slash_is_a_path() {
        let dir = Path::new("/run/onlyone");
        assert_eq!(lock_path("./x", dir).unwrap(), PathBuf::from("./x"));
        assert_eq!(
            lock_path("sync", dir).unwrap(),
            PathBuf::from("/run/onlyone/sync.lock")
        );
        assert!(lock_path("-rf", dir).is_err());
    }

    #[test]
    fn a_lock_files_name_is_its_lock() {
        let dir = Path::new("/run/onlyone");
        for (given, file) in [
            ("sync.lock", "sync.lock"),
            ("sync", "sync.lock"),
            ("a.lock.lock", "a.lock.lock"),
        ] {
            let path = lock_path(given, dir).unwrap();
            assert_eq!(path, dir.join(file), "{given}");
            let shown = display_name(&path, dir);
            assert_eq!(lock_path(&shown, dir).unwrap(), path, "{given}: {shown}");
        }
        assert!(lock_path(".lock", dir).is_err());
    }

    #[test]
    fn display_names_are_short_when_they_can_be() {
        let dir = Path::new("/run/onlyone");
        assert_eq!(
            display_name(Path::new("/run/onlyone/sync.lock"), dir),
            "sync"
        );
        assert_eq!(display_name(Path::new("/tmp/x.lock"), dir), "/tmp/x.lock");
    }
}
