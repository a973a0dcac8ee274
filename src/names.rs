//! Lock names and the directory they live in.
//!
//! A LOCK argument with a `/` is a path. Otherwise it is a name
//! (`[A-Za-z0-9][A-Za-z0-9._-]{0,63}`) and the path is `DIR/NAME.lock`, where
//! DIR is `--dir`, else `$ONLYONE_DIR`, else `/run/onlyone` for root, else
//! `/tmp/onlyone-$UID`: the same for every session of a user (never
//! `$XDG_RUNTIME_DIR`, which cron does not set). The directory is created
//! (0755 for root, 0700 otherwise) by the commands that write.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::Error;

/// The longest lock name.
pub const MAX_NAME: usize = 64;

/// root's default lock directory.
pub const ROOT_DIR: &str = "/run/onlyone";

/// The environment variable that overrides the lock directory.
pub const DIR_VAR: &str = "ONLYONE_DIR";

/// Where a DIR came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirSource {
    /// `--dir`.
    Flag,
    /// `$ONLYONE_DIR`.
    Env,
    /// The default for this user.
    Default,
}

/// The lock directory for this user: `explicit` (from `--dir`), else
/// `$ONLYONE_DIR`, else the default.
pub fn lock_dir(explicit: Option<&Path>) -> (PathBuf, DirSource) {
    if let Some(d) = explicit {
        return (d.to_path_buf(), DirSource::Flag);
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
        return Err(bad("it must start with a letter or a digit"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(bad(&format!("it contains {c:?}")));
    }
    Ok(())
}

/// Resolves a LOCK argument to a lock file path.
pub fn lock_path(lock: &str, dir: &Path) -> Result<PathBuf, Error> {
    if lock.contains('/') {
        return Ok(PathBuf::from(lock));
    }
    check_name(lock)?;
    Ok(dir.join(format!("{lock}.lock")))
}

/// The short name to show for a lock path: `NAME` for `DIR/NAME.lock`,
/// else the path.
pub fn display_name(path: &Path, dir: &Path) -> String {
    if path.parent() == Some(dir)
        && let Some(stem) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".lock"))
        && check_name(stem).is_ok()
    {
        return stem.to_owned();
    }
    path.display().to_string()
}

/// Creates the lock directory if it is missing (0755 for root, 0700
/// otherwise) and checks that it is a directory. Only the directory itself
/// is created: a missing parent is an error that names it, so that a typo
/// in `--dir` does not build a tree of directories as root.
pub fn ensure_dir(dir: &Path, source: DirSource) -> Result<(), Error> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(m) if m.file_type().is_symlink() => {
            // A link to a directory (`/var/run -> /run`) is fine.
            if fs::metadata(dir).is_ok_and(|t| t.is_dir()) {
                return Ok(());
            }
            return Err(not_a_dir(dir, source));
        }
        Ok(_) => return Err(not_a_dir(dir, source)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("inspect the lock directory", dir, e)),
    }
    let mode = if rustix::process::geteuid().is_root() {
        0o755
    } else {
        0o700
    };
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        // Another process created it meanwhile.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = dir.parent().unwrap_or(Path::new("/"));
            return Err(Error::BadPath {
                path: dir.to_path_buf(),
                why: format!(
                    "the lock directory{} cannot be created: its parent `{}` does not exist; \
                     create it (mkdir -p {}) or use another directory",
                    from(source),
                    parent.display(),
                    parent.display()
                ),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            return Err(not_a_dir(dir, source));
        }
        Err(e) => return Err(Error::io("create the lock directory", dir, e)),
    }
    // The umask may have narrowed the mode; widen it back for root, so
    // other users can see who holds a run.
    if mode == 0o755
        && let Ok(m) = fs::metadata(dir)
        && m.mode() & 0o777 != 0o755
        && m.uid() == 0
    {
        let _ = fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755));
    }
    Ok(())
}

fn from(source: DirSource) -> &'static str {
    match source {
        DirSource::Flag => " (from --dir)",
        DirSource::Env => " (from $ONLYONE_DIR)",
        DirSource::Default => "",
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
    fn display_names_are_short_when_they_can_be() {
        let dir = Path::new("/run/onlyone");
        assert_eq!(
            display_name(Path::new("/run/onlyone/sync.lock"), dir),
            "sync"
        );
        assert_eq!(display_name(Path::new("/tmp/x.lock"), dir), "/tmp/x.lock");
    }
}
