//! The state directory: where a user's journals live, apart from the locks.
//!
//! **Where.** [`crate::names::state_dir`] says which directory (root's
//! `/var/lib/onlyone`, a user's `~/.local/state/onlyone`...): one that
//! survives a reboot, where a journal beside a lock in `/run` or `/tmp`
//! does not. Each user writes its own: the events of a lock in a directory
//! several users share go to the state directory of the user who ran
//! (skipped, stopped...) it, and each user's `history` reads its own.
//!
//! **Names.** The journal of a lock is named from the lock file's absolute
//! path the way `systemd-escape --path` names a unit: the leading `/`
//! dropped, each `/` made `-`, and every byte outside `[A-Za-z0-9:_.]` (and
//! a leading `.`) written `\xNN`; then `.journal`, and `.journal.1` for the
//! older generation: `/run/onlyone/sync.lock` keeps its journal in
//! `run-onlyone-sync.lock.journal`. The lock's directory is made canonical
//! first where it exists (its longest existing ancestor resolved, the rest
//! appended), so that `/var/run/onlyone` and `/run/onlyone` share one
//! journal and a lock whose directory is gone (after a reboot) still finds
//! it. A name longer than a file name may be (255 bytes) is cut, and ends
//! with a hash of the whole path instead.
//!
//! **Trust.** Writers make the missing directories 0700 (what the XDG spec
//! asks of `~/.local/state`), on descriptors, in parents no other account
//! may rename entries in; they write only in a directory owned by this user
//! and writable by no one else, whatever its source: the refusal names the
//! directory and the fix. Readers take an explicit directory (`--state-dir`,
//! `$ONLYONE_STATE_DIR`) as the caller's choice, and refuse a default one
//! that another account made or could change, as
//! [`crate::names::check_default_dir`] does for the lock directory: a
//! journal found there could say anything. What is opened in it is opened
//! as [`crate::journal`] says (no links, no FIFOs, the owner checked).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustix::fs::{CWD, Mode, OFlags};
use rustix::io::Errno;

use crate::hint::Hint;
use crate::names::{self, Risk, STATE_DIR_VAR, StateSource};

/// The longest file name most filesystems take.
const NAME_MAX: usize = 255;

/// A user's state directory (see the module docs), opened when first
/// needed: once for writing, once for reading, whatever the number of
/// journals written or read through it. Clones share it.
#[derive(Debug, Clone)]
pub struct StateDir {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    source: StateSource,
    writable: OnceLock<Result<OwnedFd, String>>,
    readable: OnceLock<Result<Option<OwnedFd>, String>>,
}

impl StateDir {
    /// This user's state directory: `explicit` (from `--state-dir`), else
    /// `$ONLYONE_STATE_DIR`, else the default ([`names::state_dir`]).
    pub fn resolve(explicit: Option<&Path>) -> StateDir {
        let (path, source) = names::state_dir(explicit);
        StateDir::at(path, source)
    }

    /// The state directory `path`, from `source`.
    pub fn at(path: impl Into<PathBuf>, source: StateSource) -> StateDir {
        StateDir {
            inner: Arc::new(Inner {
                path: path.into(),
                source,
                writable: OnceLock::new(),
                readable: OnceLock::new(),
            }),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Where it came from.
    pub fn source(&self) -> StateSource {
        self.inner.source
    }

    /// The directory held open for writing: made if missing, and refused
    /// unless it is this user's alone (see "Trust" in the module docs).
    pub(crate) fn writable(&self) -> io::Result<BorrowedFd<'_>> {
        let opened = self
            .inner
            .writable
            .get_or_init(|| self.open_for_writing().map_err(|e| e.to_string()));
        match opened {
            Ok(fd) => Ok(fd.as_fd()),
            Err(e) => Err(io::Error::new(io::ErrorKind::PermissionDenied, e.clone())),
        }
    }

    /// The directory held open for reading: `None` when it does not exist.
    pub(crate) fn readable(&self) -> io::Result<Option<BorrowedFd<'_>>> {
        let opened = self
            .inner
            .readable
            .get_or_init(|| self.open_for_reading().map_err(|e| e.to_string()));
        match opened {
            Ok(fd) => Ok(fd.as_ref().map(AsFd::as_fd)),
            Err(e) => Err(io::Error::new(io::ErrorKind::PermissionDenied, e.clone())),
        }
    }

    fn open_for_writing(&self) -> io::Result<OwnedFd> {
        let path = self.path();
        make_missing(path).map_err(|e| self.refusal(&e))?;
        let fd = self
            .open_final()?
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let st = rustix::fs::fstat(&fd)?;
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me {
            return Err(self.refusal(&format!(
                "it is owned by {}, not by {}, and onlyone writes journals (which hold command \
                 lines) only in a directory of its user's; {}",
                crate::text::user_name(st.st_uid),
                crate::text::user_name(me),
                self.fix_owner()
            )));
        }
        if st.st_mode & 0o022 != 0 {
            return Err(self.refusal(&format!(
                "it is group- or world-writable (mode {:o}), so another account could put links \
                 or files where its journals go; make it yours alone (chmod go-w {}), or {}",
                st.st_mode & 0o7777,
                path.display(),
                self.elsewhere()
            )));
        }
        Ok(fd)
    }

    fn open_for_reading(&self) -> io::Result<Option<OwnedFd>> {
        let Some(fd) = self.open_final()? else {
            return Ok(None);
        };
        if matches!(self.source(), StateSource::Default | StateSource::Fallback) {
            let st = rustix::fs::fstat(&fd)?;
            let me = rustix::process::geteuid().as_raw();
            if let Some(risk) = names::others_can_change(st.st_uid, st.st_mode, me) {
                let fix = match risk {
                    Risk::Owner(_) => self.fix_owner(),
                    Risk::Mode(_) => format!(
                        "check what it holds and make it yours alone (chmod go-w {}), or {}",
                        self.path().display(),
                        self.elsewhere()
                    ),
                };
                return Err(self.refusal(&format!(
                    "{risk}, so a journal in it could say anything, and onlyone reads none \
                     there; {fix}"
                )));
            }
        }
        Ok(Some(fd))
    }

    /// Opens the directory itself; a link to it only when this user or
    /// root made the link (whoever owns a link chose its target).
    fn open_final(&self) -> io::Result<Option<OwnedFd>> {
        let path = self.path();
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                let me = rustix::process::geteuid().as_raw();
                if let Some(risk) = names::foreign_owner(m.uid(), me) {
                    return Err(self.refusal(&format!(
                        "it is a symbolic link and {risk}; {}",
                        self.fix_owner()
                    )));
                }
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::NOTDIR) => {
                Err(self.refusal(&format!("it is not a directory; {}", self.elsewhere())))
            }
            Err(e) => Err(io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot open the state directory `{}`: {e}", path.display()),
            )),
        }
    }

    fn refusal(&self, why: &str) -> io::Error {
        let from = match self.source() {
            StateSource::Given => format!(" ({})", Hint::StateDirGiven),
            StateSource::Env => format!(" (from ${STATE_DIR_VAR})"),
            StateSource::Default => String::new(),
            StateSource::Fallback => " (this user's, who has no home directory of its own)".into(),
        };
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the state directory `{}`{from} is refused: {why}",
                self.path().display()
            ),
        )
    }

    fn fix_owner(&self) -> String {
        let d = self.path().display();
        match self.source() {
            StateSource::Given | StateSource::Env => format!("use {}", self.elsewhere_words()),
            _ => format!(
                "remove it as root (sudo rm -r {d}) if another account made it, or {}",
                self.elsewhere()
            ),
        }
    }

    fn elsewhere(&self) -> String {
        format!("use {}", self.elsewhere_words())
    }

    fn elsewhere_words(&self) -> String {
        format!(
            "a directory of your own ({} or ${STATE_DIR_VAR})",
            Hint::OtherStateDir
        )
    }

    /// The locks of `lock_dir` (as paths in it, the way `lock_dir` is
    /// written) that have a journal in this state directory: those whose
    /// journal name is the directory's, then one file name ending in
    /// `.lock`. A missing state directory has none.
    pub fn locks_in(&self, lock_dir: &Path) -> io::Result<Vec<PathBuf>> {
        if self.readable()?.is_none() {
            return Ok(Vec::new());
        }
        let mut prefix = escape_path(&canonical(lock_dir));
        if !prefix.is_empty() {
            prefix.push(b'-');
        }
        let mut out = Vec::new();
        for entry in std::fs::read_dir(self.path())?.flatten() {
            let name = entry.file_name();
            let name = name.as_bytes();
            let Some(stem) = name
                .strip_suffix(b".journal")
                .or_else(|| name.strip_suffix(b".journal.1"))
            else {
                continue;
            };
            let Some(file) = stem.strip_prefix(prefix.as_slice()).and_then(unescape) else {
                continue;
            };
            if file.ends_with(b".lock") {
                let p = lock_dir.join(OsStr::from_bytes(&file));
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        out.sort();
        Ok(out)
    }
}

/// Makes the missing directories of `path`, 0700, each in its parent held
/// open, never in a parent that another account may rename entries in.
fn make_missing(path: &Path) -> Result<(), String> {
    let mut existing = path;
    let mut missing: Vec<&OsStr> = Vec::new();
    loop {
        match std::fs::metadata(existing) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot inspect `{}`: {e}", existing.display())),
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                existing = parent;
            }
            _ => return Err("none of its parents exists".into()),
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let base = if existing.as_os_str().is_empty() {
        Path::new(".")
    } else {
        existing
    };
    let mut parent = rustix::fs::openat(CWD, base, flags, Mode::empty())
        .map_err(|e| format!("cannot open `{}`: {e}", base.display()))?;
    let mut at = base.to_path_buf();
    let me = rustix::process::geteuid().as_raw();
    for name in missing.into_iter().rev() {
        let st = rustix::fs::fstat(&parent).map_err(|e| e.to_string())?;
        if let Some(risk) = names::others_can_change(st.st_uid, st.st_mode, me) {
            return Err(format!(
                "it is missing, and onlyone will not make it in `{}`: {risk}, so another account \
                 could put a directory of its choice in its place; make it yourself (mkdir -m 700 \
                 -p {}), or use a directory of your own ({} or ${STATE_DIR_VAR})",
                at.display(),
                path.display(),
                Hint::OtherStateDir
            ));
        }
        let made = match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(e) => {
                return Err(format!("cannot make `{}`: {e}", at.join(name).display()));
            }
        };
        let child = rustix::fs::openat(&parent, name, flags | OFlags::NOFOLLOW, Mode::empty())
            .map_err(|e| format!("cannot open `{}`: {e}", at.join(name).display()))?;
        let st = rustix::fs::fstat(&child).map_err(|e| e.to_string())?;
        // The umask may have narrowed it (a parent of mode 0500 takes no
        // child): 0700, on the descriptor.
        if made && st.st_uid == me && st.st_mode & 0o7777 != 0o700 {
            let _ = rustix::fs::fchmod(&child, Mode::from_raw_mode(0o700));
        }
        at.push(name);
        parent = child;
    }
    Ok(())
}

/// The journal's name (and its older generation's) in the state
/// directory, for the lock file `lock` (see "Names" in the module docs).
pub(crate) fn journal_name(lock: &Path) -> (OsString, OsString) {
    let path = canonical_lock(lock);
    let mut name = escape_path(&path);
    const LONGEST_SUFFIX: usize = ".journal.1".len();
    if name.len() + LONGEST_SUFFIX > NAME_MAX {
        let hash = format!("-{:016x}", fnv1a(path.as_os_str().as_bytes()));
        name.truncate(NAME_MAX - LONGEST_SUFFIX - hash.len());
        name.extend_from_slice(hash.as_bytes());
    }
    name.extend_from_slice(b".journal");
    let mut older = name.clone();
    older.extend_from_slice(b".1");
    (OsString::from_vec(name), OsString::from_vec(older))
}

/// The lock file's absolute path, its directory made canonical.
fn canonical_lock(lock: &Path) -> PathBuf {
    let abs = std::path::absolute(lock).unwrap_or_else(|_| lock.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(file)) => canonical(dir).join(file),
        _ => abs,
    }
}

/// `path` made absolute, its longest existing ancestor made canonical
/// and the rest appended (`.` dropped, `..` taking one component off).
fn canonical(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    for ancestor in abs.ancestors() {
        if let Ok(mut real) = std::fs::canonicalize(ancestor) {
            let rest = abs.strip_prefix(ancestor).unwrap_or(Path::new(""));
            for c in rest.components() {
                match c {
                    Component::Normal(n) => real.push(n),
                    Component::ParentDir => {
                        real.pop();
                    }
                    _ => {}
                }
            }
            return real;
        }
    }
    abs
}

/// `systemd-escape --path`: the leading and trailing `/` dropped (and
/// repeated ones), `/` made `-`, a byte outside `[A-Za-z0-9:_.]` or a
/// leading `.` made `\xNN`; `/` alone is `-`.
fn escape_path(path: &Path) -> Vec<u8> {
    let parts: Vec<&[u8]> = path
        .as_os_str()
        .as_bytes()
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .collect();
    if parts.is_empty() {
        return b"-".to_vec();
    }
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b'-');
        }
        for &b in *part {
            let plain = b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'.');
            if plain && !(out.is_empty() && b == b'.') {
                out.push(b);
            } else {
                out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
            }
        }
    }
    out
}

/// The file name one escaped component stands for: `None` when it is not
/// one (a `-` is a `/`: a deeper path, or a hash).
fn unescape(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\\' => {
                let hex = s.get(i + 1..i + 4)?;
                if hex[0] != b'x' {
                    return None;
                }
                let v = u8::from_str_radix(std::str::from_utf8(&hex[1..]).ok()?, 16).ok()?;
                out.push(v);
                i += 4;
            }
            b'-' => return None,
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    let ok = !out.is_empty() && out != b"." && out != b".." && !out.contains(&b'/');
    ok.then_some(out)
}

/// 64-bit FNV-1a: a short, stable hash of a long path.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(p: &str) -> String {
        journal_name(Path::new(p)).0.to_string_lossy().into_owned()
    }

    /// The names `systemd-escape --path` gives (checked against it).
    #[test]
    fn names_are_systemds_path_escaping() {
        assert_eq!(
            String::from_utf8(escape_path(Path::new("/run/onlyone/sync.lock"))).unwrap(),
            "run-onlyone-sync.lock"
        );
        assert_eq!(
            String::from_utf8(escape_path(Path::new("/x/.hidden/my-job é.lock"))).unwrap(),
            "x-.hidden-my\\x2djob\\x20\\xc3\\xa9.lock"
        );
        assert_eq!(
            String::from_utf8(escape_path(Path::new("/.a//b/"))).unwrap(),
            "\\x2ea-b"
        );
        assert_eq!(escape_path(Path::new("/")), b"-");
        assert_eq!(
            name("/nonexistent-dir-of-onlyone/sync.lock"),
            "nonexistent\\x2ddir\\x2dof\\x2donlyone-sync.lock.journal"
        );
    }

    #[test]
    fn a_file_name_reads_back() {
        for f in ["sync.lock", "my-job.lock", "a\\b.lock", "é x.lock"] {
            let e = escape_path(Path::new(&format!("/d/{f}")));
            let back = unescape(e.strip_prefix(b"d-").unwrap()).unwrap();
            assert_eq!(back, f.as_bytes());
        }
        assert_eq!(unescape(b"a-b.lock"), None);
        assert_eq!(unescape(b"\\x2"), None);
        assert_eq!(unescape(b"\\x2f"), None);
    }

    #[test]
    fn a_long_name_is_cut_and_hashed() {
        let long = format!("/d/{}/{}.lock", "x".repeat(200), "y".repeat(100));
        let (n, o) = journal_name(Path::new(&long));
        assert!(o.len() <= NAME_MAX, "{}", o.len());
        assert!(n.to_string_lossy().ends_with(".journal"));
        let other = format!("/d/{}/{}.lock", "x".repeat(200), "z".repeat(100));
        assert_ne!(journal_name(Path::new(&other)).0, n);
    }

    #[test]
    fn missing_parts_are_appended_to_the_canonical_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        let link = real.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let via = canonical_lock(&link.join("gone/./x/../sync.lock"));
        assert_eq!(via, real.join("gone/sync.lock"));
    }
}
