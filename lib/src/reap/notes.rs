//! What the reaper remembers between calls: per process (by identity), its
//! activity counters and when they last changed, on the boot-time clock;
//! what lingering runs left (their work), and what runs left with
//! `--keep-strays` (their strays, by identity, with the lock and the token
//! of the run). The state file (`DIR/.onlyone-reap.json`) is replaced
//! atomically (temp and rename) under a flock on `DIR/.onlyone-reap.lock`,
//! which keeps two reaps from interleaving and is never deleted. Both are
//! opened in the directory held open (reached as [`crate::walk`] reaches
//! a lock directory), as regular files of the state's user only, never
//! through a link, never blocking and never into a file system mounted on
//! their names: a FIFO, a link, a mount point or another user's file in
//! their place is refused with an error that names it, and the wait for
//! the flock ends at the deadline.
//!
//! **Whose state.** The state of a directory is its user's: the reaper's
//! own, except that root, reaping a directory of a user's own (that user's,
//! writable by no one else), works on that user's state as that user
//! would (the files stay that user's), so that what the user's runs noted
//! there counts, and the user's own reaps go on.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use serde::{Deserialize, Serialize};

use super::scan::{Kept, canonical};
use crate::lock::work::Lingered;
use crate::procfs::{self, ProcId};
use crate::record::Record;

/// The state file's name, in the lock directory.
pub(crate) const STATE_FILE: &str = ".onlyone-reap.json";
/// The file whose flock serialises reaps, in the lock directory. Never
/// deleted.
pub(crate) const STATE_LOCK: &str = ".onlyone-reap.lock";

#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct State {
    /// The boot the entries belong to.
    pub(super) boot: String,
    /// "PID-START" → what was seen.
    pub(super) procs: BTreeMap<String, Seen>,
    /// Token → what a lingering run left, kept while a process carries the
    /// token: once the lock is taken over or freed, the record that named
    /// the run's work is gone, and a session that its terminal server
    /// opened later still carries its token.
    #[serde(default)]
    pub(super) runs: BTreeMap<String, Left>,
    /// "PID-START" → the run that left it with `--keep-strays`: kept
    /// while the process lives.
    #[serde(default)]
    pub(super) kept: BTreeMap<String, Kept>,
}

/// What a lingering run left (see [`super::work`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Left {
    /// "PID-START" of each lingerer.
    pub(super) linger: Vec<String>,
    /// When they were named, clock ticks since boot.
    pub(super) since: u64,
}

impl Left {
    pub(super) fn of(l: &Lingered) -> Left {
        Left {
            linger: l.linger.iter().map(ProcId::to_string).collect(),
            since: l.since,
        }
    }

    /// `None` for an entry that does not parse (a state file is ours, but
    /// was written by some version).
    pub(super) fn lingered(&self) -> Option<Lingered> {
        let linger = self
            .linger
            .iter()
            .map(|s| s.parse().ok())
            .collect::<Option<Vec<ProcId>>>()?;
        (!linger.is_empty()).then_some(Lingered {
            linger,
            since: self.since,
        })
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Seen {
    pub(super) cpu: u64,
    pub(super) io: Option<u64>,
    /// When the counters last changed, milliseconds since boot
    /// (`CLOCK_BOOTTIME`). Signed: a time before the boot is a time too.
    pub(super) changed_ms: i64,
}

/// The state file, its reap guard held: saved on request, released on drop.
pub(super) struct Guarded {
    _guard: fs::File,
    dir: OwnedFd,
    /// Whose state it is (see "Whose state" in the module docs).
    pub(super) owner: u32,
    pub(super) state: State,
}

/// Takes the reap guard (flock on `dir/.onlyone-reap.lock`), waiting until
/// `deadline`, and loads the state (errors, such as an unreadable file, go
/// to `errors`: the reap starts afresh).
pub(super) fn open(
    dir: &Path,
    deadline: Instant,
    errors: &mut Vec<String>,
) -> Result<Guarded, String> {
    let fd = crate::walk::open_dir(dir, OFlags::RDONLY)
        .map_err(|e| format!("cannot open the reaper's directory: {e}"))?;
    let owner = state_owner(&fd);
    let guard = lock_state(fd.as_fd(), dir, owner, deadline)?;
    let state = load_state(fd.as_fd(), dir, owner, errors);
    Ok(Guarded {
        _guard: guard,
        dir: fd,
        owner,
        state,
    })
}

/// Whose state the directory `dir` holds: this user's, or, for root, the
/// user whose own directory it is (that user's, and no one else may
/// write in it).
fn state_owner(dir: &OwnedFd) -> u32 {
    let me = rustix::process::geteuid().as_raw();
    match rustix::fs::fstat(dir) {
        Ok(st) if me == 0 && st.st_uid != 0 && st.st_mode & 0o022 == 0 => st.st_uid,
        _ => me,
    }
}

/// Opens a file of the reaper's in `dir` (see [`crate::journal`]'s
/// `open_regular`: never a link, never blocking, a regular file only,
/// never into a mount point), and only if it is `owner`'s: in a directory
/// another account can write, it may have put anything there. With
/// `O_CREAT`, root makes a missing one for another user whole before it
/// appears (a temp file, given to the user, then linked into place).
fn open_ours(
    dir: BorrowedFd<'_>,
    name: &str,
    flags: OFlags,
    owner: u32,
) -> std::io::Result<fs::File> {
    let me = rustix::process::geteuid().as_raw();
    let opened = if flags.contains(OFlags::CREATE) && owner != me {
        match crate::journal::open_regular(dir, name.as_ref(), flags - OFlags::CREATE, 0) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create_for(dir, name, owner)?;
                crate::journal::open_regular(dir, name.as_ref(), flags - OFlags::CREATE, 0)
            }
            other => other,
        }
    } else {
        crate::journal::open_regular(dir, name.as_ref(), flags, 0o600)
    };
    let (fd, st) = opened?;
    if st.st_uid != owner {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "it belongs to {}, not to {}, so what it says is not the reaper's: remove it",
                crate::text::user_name(st.st_uid),
                crate::text::user_name(owner)
            ),
        ));
    }
    Ok(fs::File::from(fd))
}

/// A fresh file of the reaper's in `dir`, named by a name no one can guess
/// (`O_EXCL`: never one someone put there), mode 0600, `owner`'s.
fn create_temp(dir: BorrowedFd<'_>, owner: u32) -> std::io::Result<(OwnedFd, String)> {
    let name = format!(
        "{STATE_FILE}.{}.{}.tmp",
        std::process::id(),
        crate::lock::new_token()
    );
    let fd = crate::walk::open_entry(
        dir,
        OsStr::new(&name),
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::from_raw_mode(0o600),
    )?;
    if owner != rustix::process::geteuid().as_raw()
        && let Err(e) = rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(owner)), None)
    {
        let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty());
        return Err(e.into());
    }
    Ok((fd, name))
}

/// Root's creation of `owner`'s file `name` in `dir`: whole, then linked
/// into place (`EEXIST`: someone made it first, which is as good).
fn create_for(dir: BorrowedFd<'_>, name: &str, owner: u32) -> std::io::Result<()> {
    let (_fd, temp) = create_temp(dir, owner)?;
    let linked = match rustix::fs::linkat(dir, temp.as_str(), dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    };
    let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
    linked
}

fn lock_state(
    dir: BorrowedFd<'_>,
    path: &Path,
    owner: u32,
    deadline: Instant,
) -> Result<fs::File, String> {
    let path = path.join(STATE_LOCK);
    let f = open_ours(dir, STATE_LOCK, OFlags::RDONLY | OFlags::CREATE, owner)
        .map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
    let mut pause = Duration::from_millis(1);
    loop {
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(f),
            Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(format!(
                        "another reap holds `{}`; the deadline ran out waiting for it",
                        path.display()
                    ));
                }
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("cannot lock `{}`: {e}", path.display())),
        }
    }
}

/// The largest state file read: some 100,000 processes' worth.
const MAX_STATE: u64 = 16 << 20;

fn load_state(dir: BorrowedFd<'_>, path: &Path, owner: u32, errors: &mut Vec<String>) -> State {
    let path = path.join(STATE_FILE);
    let boot = procfs::boot_id().unwrap_or_default().to_owned();
    let fresh = State {
        boot: boot.clone(),
        ..State::default()
    };
    let read = || -> std::io::Result<Vec<u8>> {
        let f = open_ours(dir, STATE_FILE, OFlags::RDONLY, owner)?;
        let mut bytes = Vec::new();
        f.take(MAX_STATE + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_STATE {
            return Err(std::io::Error::other(format!(
                "it is over {} MiB, which no reap writes",
                MAX_STATE >> 20
            )));
        }
        Ok(bytes)
    };
    match read() {
        Ok(bytes) => match serde_json::from_slice::<State>(&bytes) {
            Ok(s) if s.boot == boot => s,
            Ok(_) => fresh,
            Err(e) => {
                errors.push(format!(
                    "the reap state `{}` is unreadable ({e}); starting afresh",
                    path.display()
                ));
                fresh
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => fresh,
        Err(e) => {
            errors.push(format!(
                "cannot read `{}`: {e}; starting afresh",
                path.display()
            ));
            fresh
        }
    }
}

impl Guarded {
    /// Writes the state atomically: a new temp file of a name no one can
    /// guess, the state's user's, then a rename over the state file.
    pub(super) fn save(&self, path: &Path) -> Result<(), String> {
        let path = path.join(STATE_FILE);
        let bytes = serde_json::to_vec(&self.state).map_err(|e| e.to_string())?;
        let dir = self.dir.as_fd();
        let mut temp = None;
        let mut write = || -> std::io::Result<()> {
            let (fd, name) = create_temp(dir, self.owner)?;
            let name = temp.insert(name);
            fs::File::from(fd).write_all(&bytes)?;
            rustix::fs::renameat(dir, name.as_str(), dir, STATE_FILE)?;
            Ok(())
        };
        write().map_err(|e| {
            if let Some(name) = &temp {
                let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty());
            }
            format!("cannot write `{}`: {e}", path.display())
        })
    }

    /// Counts `procs` as seen now, and active until now: their next look
    /// can judge them idle since this one.
    fn seen_now(&mut self, procs: &[ProcId]) {
        let now = clock_ms();
        for &id in procs {
            if let Some(c) = crate::lock::idle::counters(id) {
                self.state.procs.insert(
                    id.to_string(),
                    Seen {
                        cpu: c.cpu_ticks,
                        io: c.io_bytes,
                        changed_ms: now,
                    },
                );
            }
        }
    }
}

/// Milliseconds since boot (`CLOCK_BOOTTIME`): unlike the wall clock it
/// never jumps, it counts time suspended, and the state file belongs to
/// one boot.
pub(super) fn clock_ms() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    t.tv_sec.saturating_mul(1000) + t.tv_nsec / 1_000_000
}

/// Tells the reaper what the processes a lingering run left behind (`run
/// --linger`) are doing now: their counters go into the state file in
/// `state_dir` as of this moment, so the first reap after the window can
/// judge them, instead of counting them active at first sight; and, from
/// `record` (once it names them, `linger=` and `lingered=`), what the
/// run's work is, so that it is still known once the record is gone (see
/// "The run's own work" in [`crate::reap`]). Best effort: false when the state could not be
/// written (the reaper then needs two looks, as for any process it has not
/// seen).
pub fn note_lingering(state_dir: &Path, procs: &[ProcId], record: &Record) -> bool {
    let mut errors = Vec::new();
    let Ok(mut guarded) = open(
        state_dir,
        Instant::now() + Duration::from_secs(2),
        &mut errors,
    ) else {
        return false;
    };
    if let (Some(token), Some(l)) = (&record.token, Lingered::of(record)) {
        guarded.state.runs.insert(token.clone(), Left::of(&l));
    }
    guarded.seen_now(procs);
    guarded.save(state_dir).is_ok() && errors.is_empty()
}

/// Tells the reaper what a run left running with `--keep-strays` when it
/// released its lock `lock` (its token `token`): the processes, by pid and
/// start time, go into the state file in `state_dir` with the lock and the
/// run, and their counters as of this moment. A reap of that lock's job
/// then ends them once idle for its window, whatever their user (a root
/// job's worker that changed user included) and whatever their
/// environment says: they are the run's by what they are, which no other
/// account can copy, where a token or a lock path in an environment is
/// anyone's to copy. Best effort: false when the state could not be
/// written (the reaper then knows them only by their environment).
pub fn note_kept(state_dir: &Path, lock: &Path, token: &str, procs: &[ProcId]) -> bool {
    let mut errors = Vec::new();
    let Ok(mut guarded) = open(
        state_dir,
        Instant::now() + Duration::from_secs(2),
        &mut errors,
    ) else {
        return false;
    };
    let lock = canonical(lock, Path::new("/"));
    for id in procs {
        guarded.state.kept.insert(
            id.to_string(),
            Kept {
                lock: lock.display().to_string(),
                token: token.to_owned(),
            },
        );
    }
    guarded.seen_now(procs);
    guarded.save(state_dir).is_ok() && errors.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state is opened in the directory as the walk reaches it: never
    /// through another account's symbolic link (as root: the link is
    /// given to nobody).
    #[test]
    fn the_state_is_never_reached_through_another_accounts_link() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("needs root, to give a link to another account; skipped");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        rustix::fs::chownat(
            rustix::fs::CWD,
            &link,
            Some(rustix::fs::Uid::from_raw(65534)),
            Some(rustix::fs::Gid::from_raw(65534)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
        let mut errors = Vec::new();
        let far = Instant::now() + Duration::from_secs(5);
        let refused = open(&link, far, &mut errors).err().expect("refused");
        assert!(
            refused.contains(&format!("`{}`", link.display())) && refused.contains("nobody"),
            "{refused}"
        );
        assert!(!note_kept(&link, &link.join("j.lock"), "t", &[]));
        assert!(!real.join(STATE_LOCK).exists() && !real.join(STATE_FILE).exists());
        // The directory itself is fine.
        assert!(open(&real, far, &mut errors).is_ok(), "{errors:?}");
        assert!(real.join(STATE_LOCK).exists());
    }
}
