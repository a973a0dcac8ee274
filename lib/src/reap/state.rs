//! What the reaper remembers between calls: per process (by identity), its
//! activity counters and when they last changed, on the boot-time clock.
//! The state file (`DIR/.onlyone-reap.json`) is replaced atomically (temp
//! and rename) under a flock on `DIR/.onlyone-reap.lock`, which keeps two
//! reaps from interleaving and is never deleted. Both are opened as
//! regular files of ours only, never through a link and never blocking: a
//! FIFO, a link or another user's file in their place is refused with an
//! error that names it, and the wait for the flock ends at the deadline.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::OFlags;

use serde::{Deserialize, Serialize};

use crate::procfs::{self, ProcId};
use crate::record::Record;
use crate::work::Lingered;

/// The state file's name, in the lock directory.
pub const STATE_FILE: &str = ".onlyone-reap.json";
/// The file whose flock serialises reaps, in the lock directory. Never
/// deleted.
pub const STATE_LOCK: &str = ".onlyone-reap.lock";

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
    let guard = lock_state(dir, deadline)?;
    Ok(Guarded {
        _guard: guard,
        state: load_state(dir, errors),
    })
}

/// Opens a file of the reaper's in `dir` (see [`crate::journal`]'s
/// `open_regular`: never a link, never blocking, a regular file only), and
/// only if it is ours: in a directory another account can write, it may
/// have put anything there.
fn open_ours(dir: &Path, name: &str, flags: OFlags, mode: u32) -> std::io::Result<fs::File> {
    let d = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let (fd, st) = crate::journal::open_regular(d.as_fd(), name.as_ref(), flags, mode)?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "it belongs to {}, not to {}, so what it says is not the reaper's: remove it",
                crate::text::user_name(st.st_uid),
                crate::text::user_name(me)
            ),
        ));
    }
    Ok(fs::File::from(fd))
}

fn lock_state(dir: &Path, deadline: Instant) -> Result<fs::File, String> {
    let path = dir.join(STATE_LOCK);
    let f = open_ours(dir, STATE_LOCK, OFlags::RDONLY | OFlags::CREATE, 0o600)
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

fn load_state(dir: &Path, errors: &mut Vec<String>) -> State {
    let path = dir.join(STATE_FILE);
    let boot = procfs::boot_id().unwrap_or_default().to_owned();
    let fresh = State {
        boot: boot.clone(),
        procs: BTreeMap::new(),
        runs: BTreeMap::new(),
    };
    let read = || -> std::io::Result<Vec<u8>> {
        let f = open_ours(dir, STATE_FILE, OFlags::RDONLY, 0)?;
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
    /// guess (`O_EXCL`: never one someone put there), then a rename.
    pub(super) fn save(&self, dir: &Path) -> Result<(), String> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(STATE_FILE);
        let tmp = dir.join(format!(
            "{STATE_FILE}.{}.{}.tmp",
            std::process::id(),
            crate::new_token()
        ));
        let bytes = serde_json::to_vec(&self.state).map_err(|e| e.to_string())?;
        let write = || -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
                .open(&tmp)?;
            f.write_all(&bytes)?;
            fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            format!("cannot write `{}`: {e}", path.display())
        })
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
    let now = clock_ms();
    for &id in procs {
        if let Some(c) = crate::idle::counters(id) {
            guarded.state.procs.insert(
                id.to_string(),
                Seen {
                    cpu: c.cpu_ticks,
                    io: c.io_bytes,
                    changed_ms: now,
                },
            );
        }
    }
    guarded.save(state_dir).is_ok() && errors.is_empty()
}
