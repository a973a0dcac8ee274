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
//! every slot is held. A take that waits while every slot is held waits in
//! the lock's one line (the tickets and queue seat of a lock of one), and
//! the head takes whichever slot frees first. N is the lock's: every slot's record says it
//! (`slots=N`, absent for one), and a take that meets a held slot whose
//! record says another number is refused ([`Error::SlotsDiffer`]), as is
//! one that finds slot N (one past its own last) held, which a larger
//! number left: N changes once no run holds the lock.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::queue::{self, Ticket};
use super::waiter::Waiter;
use super::{Inspection, LockFile, LockGuard, Owner, REPROBE_INTERVAL};
use crate::error::{Error, HeldBy, Result};
use crate::lock::verdict::Verdict;

/// What separates a lock file's path from a slot's number in the slot's
/// file name: `sync.lock.slot.2`.
pub const SLOT_INFIX: &str = ".slot.";

/// What follows a lock file's name in the name of its slot `k` (above 0):
/// `.slot.K`.
fn slot_suffix(k: u32) -> String {
    format!("{SLOT_INFIX}{k}")
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
        let mut slot = self.suffixed(&slot_suffix(k));
        slot.on_reclaim = self.on_reclaim.clone();
        slot.deadline = self.deadline;
        Ok(slot)
    }

    /// The numbers of this lock's slots above 0 whose files exist, in
    /// order: what a view of every holder looks at besides the lock file.
    pub fn slot_numbers(&self) -> Vec<u32> {
        let mut out = self.present_slots();
        out.retain(|&k| k > 0);
        out
    }

    /// The numbers of this lock's slots whose files exist, slot 0 (the
    /// lock file) included, in order: one listing of the directory (one
    /// `getdents(2)` for a directory of a few hundred entries), which
    /// every take makes after its link, so that no holder of the lock is
    /// missed whatever slot it holds.
    pub(super) fn present_slots(&self) -> Vec<u32> {
        let name = self.name().as_bytes();
        let infix = SLOT_INFIX.as_bytes();
        let Ok(entries) = rustix::fs::Dir::read_from(self.dir_fd()) else {
            return Vec::new();
        };
        let mut out: Vec<u32> = entries
            .flatten()
            .filter_map(|e| {
                let rest = e.file_name().to_bytes().strip_prefix(name)?;
                if rest.is_empty() {
                    return Some(0);
                }
                slot_number(rest.strip_prefix(infix)?)
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// What [`LockFile::inspect`] finds at each slot whose file exists,
    /// slot 0 first, with the slot's number and path. A slot file above 0
    /// that is no file a record can be (a symbolic link, a FIFO, a
    /// directory, a mount point) is there, unknown, with its owner (no
    /// take can hold that slot, and another account's says nothing of the
    /// lock): it fails no view of the lock's other slots.
    pub fn inspect_slots(&self) -> Result<Vec<(u32, PathBuf, Inspection)>> {
        let mut out = Vec::new();
        for k in std::iter::once(0).chain(self.slot_numbers()) {
            let slot = self.slot(k)?;
            let seen = match slot.inspect() {
                Ok(seen) => seen,
                Err(e) if k > 0 => slot.not_a_record(&e),
                Err(e) => return Err(e),
            };
            if let Some(seen) = seen {
                out.push((k, slot.path().to_path_buf(), seen));
            }
        }
        Ok(out)
    }

    /// What a view shows of a slot file that could not be inspected
    /// (`why`): unknown, owned by whoever owns the name (`None`: gone).
    fn not_a_record(&self, why: &Error) -> Option<Inspection> {
        let st = self.stat_entry(self.name()).ok()?;
        Some(Inspection {
            record: Err(crate::record::NotARecord::Empty),
            verdict: Verdict::Unknown(crate::lock::verdict::UnknownReason::Unreadable {
                why: why.to_string(),
            }),
            mtime: st.st_mtime,
            owner: st.st_uid,
        })
    }
}

/// Every slot held, at one look: the holder of the first (what a
/// refusal names, with the holders of the others in its
/// [`HeldBy::others`]), and the pids of all, which a waiter watches.
struct AllHeld {
    first: Box<HeldBy>,
    pids: Vec<u32>,
}

/// Takes a free slot of `lock`'s `opts.slot_count()`. While every slot is
/// held, a take that waits waits in the lock's line ([`SlotLine`]).
pub(super) fn acquire_any(lock: &LockFile, opts: &super::AcquireOptions) -> Result<LockGuard> {
    let started = Instant::now();
    let token = opts.token_or_new();
    let once = opts.at_once(&token);
    let held = match scan(lock, &once)? {
        Ok(guard) => return Ok(guard),
        Err(held) => held,
    };
    let Some(until) = opts.waits_until(started, lock.deadline) else {
        return Err(Error::Held(held.first));
    };
    let now = Instant::now();
    if now >= until {
        return Err(Error::Timeout {
            waited: now - started,
            held: held.first,
        });
    }
    SlotLine::join(lock, opts, once, &token, &held)?.wait(started, until)
}

/// A take of a slot that waits: in the lock's line (the tickets and the
/// queue seat of slot 0's name, as for a lock of one), woken when any slot
/// frees, its holder exits, or a ticket goes. The head of the line tries
/// every slot; a waiter behind it waits while it is the head's turn. The
/// ticket and the seat are let go only once a slot is held.
struct SlotLine<'l> {
    lock: &'l LockFile,
    /// One look at one slot, with the waiter's token.
    once: super::AcquireOptions,
    deadline: Option<Instant>,
    /// An owner named by pid: it must live while the take waits.
    owner: Option<crate::procfs::ProcId>,
    waiter: Waiter,
    ticket: Option<Ticket>,
    /// The queue seat, for a queued take.
    _seat: Option<LockGuard>,
}

impl<'l> SlotLine<'l> {
    /// Takes the queue seat (for a queued take: or gives up with
    /// [`Error::Queued`]), then a place at the end of the line.
    fn join(
        lock: &'l LockFile,
        opts: &super::AcquireOptions,
        once: super::AcquireOptions,
        token: &str,
        held: &AllHeld,
    ) -> Result<SlotLine<'l>> {
        let deadline = lock.deadline_or(once.deadline_asked());
        let owner = match opts.owned_by() {
            Owner::Current => None,
            Owner::Pid(pid) => {
                Some(
                    crate::procfs::identity_of(pid).map_err(|e| Error::BadOwner {
                        pid,
                        why: "it is not a running process".into(),
                        source: Some(e),
                    })?,
                )
            }
        };
        let command = opts
            .command_asked()
            .or(owner.as_ref().and_then(|o| o.cmd.as_deref()));
        let seat = if opts.queued() {
            let n = opts.slot_count();
            Some(queue::take_seat(
                lock,
                n,
                token,
                command,
                &held.first,
                deadline,
            )?)
        } else {
            None
        };
        let mut prefix = lock.name().as_bytes().to_vec();
        prefix.extend_from_slice(SLOT_INFIX.as_bytes());
        let waiter = Waiter::new(lock, opts.in_line()).watching_slots(prefix);
        let ticket = opts
            .in_line()
            .then(|| Ticket::take(lock, token, command))
            .flatten();
        Ok(SlotLine {
            lock,
            once,
            deadline,
            owner: owner.map(|o| o.id),
            waiter,
            ticket,
            _seat: seat,
        })
    }

    /// Waits its turn and a free slot, until `until`: the slot taken, or
    /// [`Error::Timeout`] with the holder of the first slot.
    fn wait(mut self, started: Instant, until: Instant) -> Result<LockGuard> {
        loop {
            self.check_owner()?;
            if Instant::now() < until && self.behind_head(until)? {
                continue;
            }
            let held = match scan(self.lock, &self.once)? {
                Ok(guard) => return Ok(guard),
                Err(held) => held,
            };
            let now = Instant::now();
            if now >= until {
                return Err(Error::Timeout {
                    waited: now - started,
                    held: held.first,
                });
            }
            if let Some(t) = &mut self.ticket {
                t.lock_seen_held();
            }
            let _ = self
                .waiter
                .wait_any(&held.pids, until.min(now + REPROBE_INTERVAL));
        }
    }

    /// Whether a live waiter is ahead of this one: it then waited (for
    /// the head to take a free slot, up to the grace, or for a slot to
    /// free while all are held), and the caller looks again.
    fn behind_head(&mut self, until: Instant) -> Result<bool> {
        let Some(t) = &mut self.ticket else {
            return Ok(false);
        };
        let Some(head) = t.ahead(self.lock, self.deadline) else {
            return Ok(false);
        };
        let now = Instant::now();
        match held_slots(self.lock, self.once.slot_count(), self.deadline)? {
            // A slot is free (or stale, for the head to take over): the
            // head's turn. A slot let go meanwhile is a hand-off gone by.
            None => {
                let soon = now + queue::LINE_POLL.min(t.grace_left());
                if self.waiter.wait_any(&[head], until.min(soon)) {
                    t.lock_seen_held();
                }
            }
            Some(pids) => {
                t.lock_seen_held();
                let _ = self
                    .waiter
                    .wait_any(&pids, until.min(now + REPROBE_INTERVAL));
            }
        }
        Ok(true)
    }

    /// An owner named by pid (a script) that died while this call waited
    /// wants no slot any more.
    fn check_owner(&self) -> Result<()> {
        match &self.owner {
            Some(id) if !id.is_alive() => Err(Error::BadOwner {
                pid: id.pid,
                why: "it exited while waiting for the lock".into(),
                source: None,
            }),
            _ => Ok(()),
        }
    }
}

/// The pids of the holders of `lock`'s `n` slots when every slot is held
/// (a slot that cannot be judged counts as held, with no pid to watch);
/// `None` when a slot has no file or a stale one.
fn held_slots(lock: &LockFile, n: u32, deadline: Option<Instant>) -> Result<Option<Vec<u32>>> {
    let mut pids = Vec::new();
    for k in 0..n {
        let Some(ev) = lock.slot(k)?.look()? else {
            return Ok(None);
        };
        match crate::lock::judge::judge(&ev, deadline) {
            Verdict::Held(h) => pids.extend(h.watchable_pid()),
            Verdict::Stale(_) => return Ok(None),
            Verdict::Unknown(_) => {}
        }
    }
    Ok(Some(pids))
}

/// One look at the slots: the first one whose file is absent taken (one
/// listing of the directory says which), without judging the holders of
/// the others; else every slot in order, judged (a stale one is taken
/// over), as [`scan_all`] does. Whatever slot is taken, every other slot
/// file is read once it is held ([`check_others`]).
fn scan(
    lock: &LockFile,
    once: &super::AcquireOptions,
) -> Result<std::result::Result<LockGuard, AllHeld>> {
    match first_free(lock, once)? {
        Some(guard) => Ok(Ok(guard)),
        None => scan_all(lock, once),
    }
}

/// Takes the first slot below N whose file is absent. `None` when every
/// slot's file is there, or the one tried was taken meanwhile.
fn first_free(lock: &LockFile, once: &super::AcquireOptions) -> Result<Option<LockGuard>> {
    let n = once.slot_count();
    let present = lock.present_slots();
    let Some(k) = (0..n).find(|k| present.binary_search(k).is_err()) else {
        return Ok(None);
    };
    match lock.slot(k)?.acquire_slot(once) {
        Ok(mut guard) => {
            guard.slot = k;
            check_others(lock, &guard, n)?;
            Ok(Some(guard))
        }
        Err(Error::Held(_) | Error::Unknown { .. } | Error::Contended { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The number of slots that the record `bytes` says, read from its
/// `slots=` line alone (1 when it has none), without parsing the rest:
/// whenever [`Record::parse`](crate::record::Record::parse) reads a record
/// from the bytes, its `slots` (or 1). `None` for bytes that no record
/// is (empty, too large, a `slots=` line that is no number above 0):
/// whatever else the bytes hold, a record read from them would not differ.
fn recorded_slots(bytes: &[u8]) -> Option<u32> {
    if bytes.is_empty() || bytes.len() > crate::record::MAX_RECORD_BYTES {
        return None;
    }
    // Line 1 is the pid; a record has at most one `slots=` line.
    let Some(value) = bytes.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.strip_prefix(b"slots=")
    }) else {
        return Some(1);
    };
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value)
        .ok()?
        .parse::<u64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
}

/// One look at every slot in order: the first one taken, or the holder of
/// the first held one (with the others') when all are held. A slot that
/// cannot be judged fails the take when no slot is free.
fn scan_all(
    lock: &LockFile,
    once: &super::AcquireOptions,
) -> Result<std::result::Result<LockGuard, AllHeld>> {
    let n = once.slot_count();
    let mut holders: Vec<HeldBy> = Vec::new();
    let mut pids = Vec::new();
    let mut cannot_tell: Option<Error> = None;
    for k in 0..n {
        let slot = lock.slot(k)?;
        match slot.acquire_slot(once) {
            Ok(mut guard) => {
                guard.slot = k;
                check_others(lock, &guard, n)?;
                return Ok(Ok(guard));
            }
            Err(Error::Held(h)) => {
                pids.extend(h.holder.watchable_pid());
                holders.push(*h);
            }
            Err(e @ (Error::Unknown { .. } | Error::Contended { .. })) => {
                cannot_tell.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(e) = cannot_tell {
        return Err(e);
    }
    let mut holders = holders.into_iter();
    match holders.next() {
        Some(mut first) => {
            first.others = holders.collect();
            Ok(Err(AllHeld {
                first: Box::new(first),
                pids,
            }))
        }
        None => Err(Error::Contended {
            path: lock.path().into(),
            tries: 0,
        }),
    }
}

/// Once `guard` holds its slot of a lock of `n` slots: reads every other
/// slot file there is (one listing of the directory, then each file's
/// `slots=` line), and refuses the take, letting the slot go, when one
/// is held by a live run of this account (or root) whose record says
/// another number. Every take reads after its own link, so of two takes
/// of different numbers, the later to link sees the other: the live
/// holders never outnumber the smallest number among them (PROTOCOL.md
/// invariant 16). A stale slot file met on the way is cleared (its run
/// closed in the journal by the lock's place); another account's files
/// count for nothing here (see [`Record::is_ours`](crate::Record::is_ours)).
pub(super) fn check_others(lock: &LockFile, guard: &LockGuard, n: u32) -> Result<()> {
    for k in lock.present_slots() {
        if k == guard.slot {
            continue;
        }
        let slot = lock.slot(k)?;
        // What no record is (a link, a FIFO, a mount point) holds nothing
        // this take must heed; a slot below N is judged when tried.
        let Ok(Some(bytes)) = slot.peek() else {
            continue;
        };
        // The same number, or no record: nothing this take must heed
        // (a slot below N is judged when it is tried).
        match recorded_slots(&bytes) {
            Some(m) if m != n => {}
            _ => continue,
        }
        let Ok(Some(ev)) = slot.look() else {
            continue;
        };
        let held = match &ev.record {
            Ok(r) if r.is_ours() && r.slots.unwrap_or(1) != n => r.slots.unwrap_or(1),
            _ => continue,
        };
        match crate::lock::judge::judge(&ev, lock.deadline) {
            Verdict::Held(_) => {
                return Err(Error::SlotsDiffer {
                    path: lock.path().into(),
                    held,
                    asked: n,
                });
            }
            // Left by a run of another number that is over: cleared, its
            // run closed, so that it is not judged at every take.
            Verdict::Stale(_) => {
                let _ = slot.reclaim_if_stale();
            }
            Verdict::Unknown(_) => {}
        }
    }
    Ok(())
}

/// Refuses a take of `asked` slots that met a slot `held` by a live run
/// of this account (or root) whose record says another number. Another
/// account's holder is no run of this lock's, whatever it says: it only
/// keeps its slot.
pub(super) fn check_held(held: &HeldBy, asked: u32) -> Result<()> {
    let recorded = held.record.slots.unwrap_or(1);
    if recorded == asked || !held.record.is_ours() {
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

    /// The file of slot `k` of the lock at `path`: the lock file itself
    /// for 0, else `PATH.slot.K`.
    fn slot_file(path: &Path, k: u32) -> PathBuf {
        if k == 0 {
            return path.to_path_buf();
        }
        let mut name = path.as_os_str().to_os_string();
        name.push(slot_suffix(k));
        PathBuf::from(name)
    }

    #[test]
    fn the_number_of_slots_read_from_one_line_is_the_parsed_records() {
        use crate::record::Record;
        let head = "4242\nstart=1\nboot=844656b7-8a16-4ff4-b321-afea097e0c3f\n";
        let mut cases: Vec<String> = vec![
            String::new(),
            "4242\n".into(),
            head.into(),
            format!("{head}slots=3\n"),
            format!("{head}slots=3"),
            format!("{head}slots=3\r\n"),
            format!("{head}cmd=x slots=9\nslots=2\n"),
            format!("{head}slots=3\nslots=3\n"),
            format!("{head}slots=0\n"),
            format!("{head}slots=\n"),
            format!("{head}slots=+3\n"),
            format!("{head}slots= 3\n"),
            format!("{head}slots=4294967296\n"),
            format!("{head}slots=4294967295\n"),
            format!("{head}slots=007\n"),
            format!("{head}xslots=5\n"),
            format!("{head}slots_x=5\n"),
            format!("slots=5\n{head}"),
            format!("{head}slots=5\nbad line\n"),
        ];
        cases.push(format!("{head}cmd={}\nslots=2\n", "y".repeat(9000)));
        let mut records = 0;
        for case in &cases {
            let seen = recorded_slots(case.as_bytes());
            if let Ok(r) = Record::parse_with_pid_max(case.as_bytes(), 4_194_304) {
                assert_eq!(seen, Some(r.slots.unwrap_or(1)), "{case:?}");
                // As a writer writes it, too.
                assert_eq!(recorded_slots(&r.to_bytes()), seen, "{case:?}");
                records += 1;
            }
        }
        assert_eq!(records, 10);
        assert_eq!(
            recorded_slots(format!("{head}slots=3\n").as_bytes()),
            Some(3)
        );
        assert_eq!(recorded_slots(head.as_bytes()), Some(1));
        assert_eq!(recorded_slots(b""), None);
        assert_eq!(recorded_slots(format!("{head}slots=0\n").as_bytes()), None);
    }

    #[test]
    fn a_slot_is_the_sibling_its_file_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("x")).unwrap();
        for given in [
            dir.path().join("sync.lock"),
            dir.path().join("./x/../sync.lock"),
        ] {
            let lock = LockFile::open(&given).unwrap();
            for k in [1, 2, 17] {
                let slot = lock.slot(k).unwrap();
                let sibling = lock.sibling(slot_file(lock.path(), k)).unwrap();
                assert_eq!(slot.path(), sibling.path());
                assert_eq!(slot.dir(), sibling.dir());
                assert_eq!(slot.name(), sibling.name());
                assert_eq!(slot_of_path(slot.path()), Some((lock.path().into(), k)));
            }
        }
    }

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
