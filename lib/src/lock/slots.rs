//! Slots: a lock that up to N holders have at once, each in a slot that is
//! a whole lock of its own.
//!
//! Slot 0 is the lock file itself (`LOCK`); slot K (1..N-1) is the sibling
//! file `LOCK.slot.K`. No lock of a lock directory is called that: a named
//! lock's file ends in `.lock`, and listings of a directory's locks count
//! only such files, so a slot's file is never taken for a lock of its own.
//! Each slot is taken, held, judged, taken over and let go exactly as a lock
//! of one holder is ([`LockFile::acquire_slot`]).
//!
//! A take first tries the first slot whose file is absent, without judging
//! the holders of the slots before it (their records are read for their
//! number of slots, and a holder judged only when it differs); when there is none, or it was taken meanwhile,
//! it tries slot 0, 1, ... without waiting and keeps the first it gets (a
//! free slot, or a stale one taken over): holders are described only when
//! every slot is held. N is the lock's: every slot's record says it
//! (`slots=N`, absent for one), and a take that meets a held slot whose
//! record says another number is refused ([`Error::SlotsDiffer`]), as is
//! one that finds slot N (one past its own last) held, which a larger
//! number left: N changes once no run holds the lock.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Inspection, LockFile, LockGuard};
use crate::error::{Error, HeldBy, Result};
use crate::verdict::Verdict;

/// What separates a lock file's path from a slot's number in the slot's
/// file name: `sync.lock.slot.2`.
pub const SLOT_INFIX: &str = ".slot.";

/// How often a take that waits for a slot of a lock of several looks again.
const SLOT_POLL: Duration = Duration::from_millis(50);

/// The file of slot `k` of the lock at `path`: the lock file itself for 0,
/// else `PATH.slot.K`.
fn slot_file(path: &Path, k: u32) -> PathBuf {
    if k == 0 {
        return path.to_path_buf();
    }
    let mut name = path.as_os_str().to_os_string();
    name.push(format!("{SLOT_INFIX}{k}"));
    PathBuf::from(name)
}

/// The lock and the slot a slot's file names: `(LOCK, K)` for
/// `LOCK.slot.K` with K a number above 0 written without a leading zero;
/// `None` for any other path.
pub fn slot_of_path(path: &Path) -> Option<(PathBuf, u32)> {
    let bytes = path.as_os_str().as_bytes();
    let infix = SLOT_INFIX.as_bytes();
    let at = bytes.windows(infix.len()).rposition(|w| w == infix)?;
    let digits = &bytes[at + infix.len()..];
    let k = slot_number(digits)?;
    let lock = OsString::from_vec(bytes[..at].to_vec());
    (!lock.is_empty()).then(|| (PathBuf::from(lock), k))
}

/// A slot number above 0 as a slot's file name writes it.
fn slot_number(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || digits[0] == b'0' || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl LockFile {
    /// Slot `k` of this lock: the lock itself for 0, else its sibling file
    /// `LOCK.slot.K` (see [`AcquireOptions::slots`](super::AcquireOptions::slots)).
    pub fn slot(&self, k: u32) -> Result<LockFile> {
        if k == 0 {
            return Ok(self.clone());
        }
        self.sibling(slot_file(self.path(), k))
    }

    /// The numbers of this lock's slots above 0 whose files exist, in
    /// order: what a view of every holder looks at besides the lock file.
    pub fn slot_numbers(&self) -> Vec<u32> {
        let mut prefix = self.name().as_bytes().to_vec();
        prefix.extend_from_slice(SLOT_INFIX.as_bytes());
        let Ok(entries) = rustix::fs::Dir::read_from(self.dir_fd()) else {
            return Vec::new();
        };
        let mut out: Vec<u32> = entries
            .flatten()
            .filter_map(|e| slot_number(e.file_name().to_bytes().strip_prefix(prefix.as_slice())?))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// What [`LockFile::inspect`] finds at each slot whose file exists,
    /// slot 0 first, with the slot's number and path.
    pub fn inspect_slots(&self) -> Result<Vec<(u32, PathBuf, Inspection)>> {
        let mut out = Vec::new();
        for k in std::iter::once(0).chain(self.slot_numbers()) {
            let slot = self.slot(k)?;
            if let Some(seen) = slot.inspect()? {
                out.push((k, slot.path().to_path_buf(), seen));
            }
        }
        Ok(out)
    }
}

/// Takes a free slot of `lock`'s `opts.slot_count()`, waiting as `opts`
/// says while every slot is held (looking again every [`SLOT_POLL`]).
pub(super) fn acquire_any(lock: &LockFile, opts: &super::AcquireOptions) -> Result<LockGuard> {
    let started = Instant::now();
    let once = opts.at_once();
    let until = opts.waits_until(started, lock.deadline);
    loop {
        let held = match scan(lock, &once)? {
            Ok(guard) => return Ok(guard),
            Err(held) => held,
        };
        let now = Instant::now();
        match until {
            None => return Err(Error::Held(held)),
            Some(u) if now >= u => {
                return Err(Error::Timeout {
                    waited: now - started,
                    held,
                });
            }
            Some(u) => std::thread::sleep(SLOT_POLL.min(u - now)),
        }
    }
}

/// One look at the slots: the first free one taken, without judging the
/// holders of those before it ([`first_free`]); else every slot in order,
/// judged (a stale one is taken over), as [`scan_all`] does.
fn scan(
    lock: &LockFile,
    once: &super::AcquireOptions,
) -> Result<std::result::Result<LockGuard, Box<HeldBy>>> {
    match first_free(lock, once)? {
        Some(guard) => Ok(Ok(guard)),
        None => scan_all(lock, once),
    }
}

/// Takes the first slot whose file is absent. The slots before it are not
/// judged, but their records are read: one that says another number, when
/// its holder lives, refuses the take. `None` when no slot's file is
/// absent, or the one tried was taken meanwhile.
fn first_free(lock: &LockFile, once: &super::AcquireOptions) -> Result<Option<LockGuard>> {
    let n = once.slot_count();
    for k in 0..n {
        let slot = lock.slot(k)?;
        match slot.stat_entry(slot.name()) {
            Err(rustix::io::Errno::NOENT) => {}
            _ => {
                let Some(ev) = slot.look()? else { continue };
                let recorded = match &ev.record {
                    Ok(r) if r.slots.unwrap_or(1) != n => r.slots.unwrap_or(1),
                    _ => continue,
                };
                if matches!(crate::judge::judge(&ev, lock.deadline), Verdict::Held(_)) {
                    return Err(Error::SlotsDiffer {
                        path: lock.path().into(),
                        held: recorded,
                        asked: n,
                    });
                }
                continue;
            }
        }
        return match slot.acquire_slot(once) {
            Ok(mut guard) => {
                guard.slot = k;
                check_beyond(lock, &guard, n)?;
                Ok(Some(guard))
            }
            Err(Error::Held(_) | Error::Unknown { .. } | Error::Contended { .. }) => Ok(None),
            Err(e) => Err(e),
        };
    }
    Ok(None)
}

/// One look at every slot in order: the first one taken, or the holder of
/// the first held one when all are held. A slot that cannot be judged
/// fails the take when no slot is free.
fn scan_all(
    lock: &LockFile,
    once: &super::AcquireOptions,
) -> Result<std::result::Result<LockGuard, Box<HeldBy>>> {
    let n = once.slot_count();
    let mut first: Option<Box<HeldBy>> = None;
    let mut cannot_tell: Option<Error> = None;
    for k in 0..n {
        let slot = lock.slot(k)?;
        match slot.acquire_slot(once) {
            Ok(mut guard) => {
                guard.slot = k;
                check_beyond(lock, &guard, n)?;
                return Ok(Ok(guard));
            }
            Err(Error::Held(h)) => {
                first.get_or_insert(h);
            }
            Err(e @ (Error::Unknown { .. } | Error::Contended { .. })) => {
                cannot_tell.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    match (cannot_tell, first) {
        (Some(e), _) => Err(e),
        (None, Some(held)) => Ok(Err(held)),
        (None, None) => Err(Error::Contended {
            path: lock.path().into(),
            tries: 0,
        }),
    }
}

/// Refuses a take of a lock of `n` slots whose slot `n` (one past the
/// last) is held with another number: a larger number left it, and letting
/// both in could admit more holders than `n`. The guard is let go then.
pub(super) fn check_beyond(lock: &LockFile, guard: &LockGuard, n: u32) -> Result<()> {
    let beyond = slot_file(lock.path(), n);
    if std::fs::symlink_metadata(&beyond).is_err() {
        return Ok(());
    }
    let Some(seen) = lock.sibling(&beyond)?.inspect()? else {
        return Ok(());
    };
    match (&seen.verdict, &seen.record) {
        (Verdict::Held(_), Ok(r)) if r.slots.unwrap_or(1) != n => {
            let _ = guard.slot;
            Err(Error::SlotsDiffer {
                path: lock.path().into(),
                held: r.slots.unwrap_or(1),
                asked: n,
            })
        }
        _ => Ok(()),
    }
}

/// Refuses a take of `asked` slots that met a slot `held` by a holder
/// whose record says another number.
pub(super) fn check_held(held: &HeldBy, asked: u32) -> Result<()> {
    let recorded = held.record.slots.unwrap_or(1);
    if recorded == asked {
        return Ok(());
    }
    let path = match slot_of_path(&held.path) {
        Some((lock, _)) if recorded > 1 || asked > 1 => lock,
        _ => held.path.clone(),
    };
    Err(Error::SlotsDiffer {
        path,
        held: recorded,
        asked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slots_file_names_its_lock_and_number() {
        let lock = Path::new("/run/onlyone/sync.lock");
        assert_eq!(slot_file(lock, 0), lock);
        let two = slot_file(lock, 2);
        assert_eq!(two, Path::new("/run/onlyone/sync.lock.slot.2"));
        assert_eq!(slot_of_path(&two), Some((lock.to_path_buf(), 2)));
        for other in [
            "/d/sync.lock",
            "/d/x.slot.0",
            "/d/x.slot.01",
            "/d/x.slot.",
            "/d/x.slot.2a",
        ] {
            assert_eq!(slot_of_path(Path::new(other)), None, "{other}");
        }
    }
}
