//! Waiting in line: waiters get a held lock in the order they began to
//! wait, and at most one caller waits when it asks for the queue
//! ([`AcquireOptions::queue`]).
//!
//! - **Tickets.** A caller that waits takes, on its first look at a held
//!   lock, a ticket: `DIR/.NAME.wait.NANOS.RAND8`, itself a lock file taken
//!   with the whole protocol (written whole, linked, read back, held by its
//!   writer's kernel lock), and released once the caller holds the lock,
//!   gives up or exits. `NANOS` is the wall clock when it began to wait (20
//!   digits, so that names sort as times do). Before each try at the lock
//!   the caller lists the tickets; while a live one is older than its own
//!   it does not try, and sleeps until a ticket or the lock file is
//!   removed, the head's process exits, or [`LINE_POLL`] passes. A ticket
//!   whose writer died is stale, passed over, and reclaimed (under the
//!   removal guard, briefly) by a later caller of the same user.
//! - **A head that does not come.** A live ticket ahead of a free lock for
//!   [`HEAD_GRACE`] is passed over: a ticket is a file, and an account that
//!   may write in a shared directory can keep a forged one alive; it then
//!   delays each hand-off by that much, never for ever.
//! - **The queue seat.** `DIR/.NAME.queue` is a lock file too, with the
//!   waiter's token. A caller that asks for the queue and finds the lock
//!   held takes it, or finds it held by a live waiter: it then looks at the
//!   lock again, and when the lock now carries that waiter's token the
//!   waiter has just begun its run and is letting the seat go: it waits
//!   [`PLACE_HANDOVER`] for the seat. Otherwise it gives up
//!   ([`Error::Queued`]). The seat is let go only once its holder holds
//!   the lock, so two callers never both wait, and one that gives up does
//!   so only while the waiter it saw had not begun its run: that run
//!   begins after the caller came, and picks up what it would have done. A
//!   waiter that dies leaves a stale seat, which the next caller reclaims.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::time::{Duration, Instant, SystemTime};

use super::{AcquireOptions, LockFile, LockGuard};
use crate::error::{Error, HeldBy, Result};
use crate::lock::verdict::Verdict;
use crate::record::{self, Record};

/// How long a live ticket ahead of a free lock keeps the waiters behind it
/// from trying.
pub const HEAD_GRACE: Duration = Duration::from_secs(1);

/// How often a waiter behind a free lock's head looks at the line again.
pub const LINE_POLL: Duration = Duration::from_millis(50);

/// How long a caller waits for the queue seat that a waiter lets go as
/// its run begins.
pub const PLACE_HANDOVER: Duration = Duration::from_secs(2);

/// How long a waiter waits for its own removal guard to clear a dead
/// ticket of its own (a guard is held for microseconds).
const RECLAIM_WAIT: Duration = Duration::from_millis(100);

/// Tickets looked at, oldest first, for a live one ahead: a directory full
/// of dead or forged ones costs a bounded look.
const MAX_TICKETS_LOOKED: usize = 64;

/// A lock name longer than this is named by its hash in the names of its
/// tickets and queue seat (a file name has at most 255 bytes).
const MAX_NAME_IN_LINE: usize = 200;

/// What a lock's tickets and queue seat are named after.
fn stem(lock: &LockFile) -> Vec<u8> {
    let name = lock.name().as_bytes();
    if name.len() <= MAX_NAME_IN_LINE {
        return name.to_vec();
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:016x}", h).into_bytes()
}

/// `.NAME.wait.`: the start of every ticket's name.
pub(super) fn ticket_prefix(lock: &LockFile) -> Vec<u8> {
    let mut p = b".".to_vec();
    p.extend(stem(lock));
    p.extend(b".wait.");
    p
}

/// The queue seat of `lock`: `DIR/.NAME.queue`.
pub(crate) fn seat_of(lock: &LockFile) -> Result<LockFile> {
    let mut name = b".".to_vec();
    name.extend(stem(lock));
    name.extend(b".queue");
    lock.sibling(lock.dir().join(OsStr::from_bytes(&name)))
}

/// A ticket's place in line, from its name: the time it began to wait.
fn order_of(prefix: &[u8], name: &[u8]) -> Option<u64> {
    let rest = name.strip_prefix(prefix)?;
    let (nanos, rand) = rest.split_at_checked(20)?;
    let rand = rand.strip_prefix(b".")?;
    if rand.len() != 8 || !rand.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    std::str::from_utf8(nanos).ok()?.parse().ok()
}

/// The ticket names of `lock`'s line with their order, oldest first.
fn tickets(lock: &LockFile) -> Vec<(u64, OsString)> {
    let prefix = ticket_prefix(lock);
    let Ok(entries) = rustix::fs::Dir::read_from(lock.dir_fd()) else {
        return Vec::new();
    };
    let mut line: Vec<(u64, OsString)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_bytes();
            order_of(&prefix, name).map(|o| (o, OsString::from_vec(name.to_vec())))
        })
        .collect();
    line.sort();
    line
}

/// One who waits in a lock's line, as [`LockFile::waiters`] reports them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Waiting {
    /// The waiter's ticket record: its pid, command, since.
    pub record: Record,
    /// It holds the queue seat (it came with `--queue`).
    pub queued: bool,
}

/// A waiter's place in line: its ticket, held while it waits.
pub(super) struct Ticket {
    /// Held while the waiter waits; let go when it is dropped.
    _guard: LockGuard,
    order: (u64, OsString),
    /// Since when this waiter stays behind a live head while the lock is
    /// free: counted from the free lock, not from each head (another
    /// account may rename a forged head, or plant one that sorts first,
    /// at every look), and started again only once the lock was seen
    /// taken or let go meanwhile.
    behind: Option<Instant>,
    /// Nothing live was ahead at a look: this waiter is the head, and
    /// stays it (a ticket is named by the time it was taken, so one taken
    /// later sorts after this one), with no look at the line any more.
    at_head: bool,
}

impl Ticket {
    /// Takes a ticket at the end of `lock`'s line with `token` (the
    /// waiter's); `None` when none can be written (an unwritable
    /// directory): the caller then waits out of line.
    pub(super) fn take(lock: &LockFile, token: &str, command: Option<&str>) -> Option<Ticket> {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut name = ticket_prefix(lock);
        name.extend(format!("{nanos:020}.{}", &super::new_token()[..8]).into_bytes());
        let name = OsString::from_vec(name);
        let file = lock.sibling(lock.dir().join(&name)).ok()?;
        let mut opts = AcquireOptions::new().token(token);
        if let Some(c) = command {
            opts = opts.command(c);
        }
        let guard = file.acquire(&opts).ok()?;
        Some(Ticket {
            _guard: guard,
            order: (nanos, name),
            behind: None,
            at_head: false,
        })
    }

    /// The pid of the live waiter ahead of this one, while it is the
    /// free lock's turn to go to it; `None` when this one may try.
    pub(super) fn ahead(&mut self, lock: &LockFile, deadline: Option<Instant>) -> Option<u32> {
        if self.at_head {
            return None;
        }
        let mut head = None;
        for (order, name) in tickets(lock).into_iter().take(MAX_TICKETS_LOOKED) {
            if (order, &name) >= (self.order.0, &self.order.1) {
                break;
            }
            let Ok(file) = lock.sibling(lock.dir().join(&name)) else {
                continue;
            };
            let Ok(Some(ev)) = file.look() else { continue };
            match crate::lock::judge::judge(&ev, deadline) {
                Verdict::Held(h) => {
                    head = Some(h.pid());
                    break;
                }
                // A waiter that died: out of the line, and its ticket
                // gone if it is this user's. Another user's is left to
                // them: its removal would wait on their removal guard,
                // which they may hold for ever.
                Verdict::Stale(_) => {
                    if ev.owner == rustix::process::geteuid().as_raw() {
                        let soon = Instant::now() + RECLAIM_WAIT;
                        let _ = file.reclaim(&ev, Some(deadline.map_or(soon, |d| d.min(soon))));
                    }
                }
                Verdict::Unknown(_) => {}
            }
        }
        let Some(pid) = head else {
            self.behind = None;
            self.at_head = true;
            return None;
        };
        let since = *self.behind.get_or_insert_with(Instant::now);
        (since.elapsed() < HEAD_GRACE).then_some(pid)
    }

    /// How long this waiter may still stay behind the head before it
    /// passes it over.
    pub(super) fn grace_left(&self) -> Duration {
        self.behind.map_or(HEAD_GRACE, |since| {
            HEAD_GRACE.saturating_sub(since.elapsed())
        })
    }

    /// The lock was seen held, or let go since the last look (a hand-off
    /// went by): the time behind a head counts only while the lock stays
    /// free.
    pub(super) fn lock_seen_held(&mut self) {
        self.behind = None;
    }
}

/// Takes the queue seat of `lock` (of `slots` slots) for the waiter with
/// `token`, or says who has it: [`Error::Queued`] with `held`, the lock's
/// holder.
pub(super) fn take_seat(
    lock: &LockFile,
    slots: u32,
    token: &str,
    command: Option<&str>,
    held: &HeldBy,
    deadline: Option<Instant>,
) -> Result<LockGuard> {
    let seat = seat_of(lock)?;
    let mut opts = AcquireOptions::new().token(token);
    if let Some(c) = command {
        opts = opts.command(c);
    }
    if let Some(d) = deadline {
        opts = opts.deadline(d);
    }
    let waiter = match seat.acquire(&opts) {
        Ok(g) => return Ok(g),
        Err(Error::Held(w)) => w,
        Err(e) => return Err(e),
    };
    // The seat's waiter may have just taken the lock (a slot of it), and be
    // letting the seat go: the lock, looked at after the seat, says so.
    if taken_by(lock, slots, waiter.record.token.as_deref())? {
        match seat.acquire(&opts.clone().wait(PLACE_HANDOVER).fifo(false)) {
            Ok(g) => return Ok(g),
            Err(Error::Held(w) | Error::Timeout { held: w, .. }) => {
                return Err(Error::Queued {
                    held: Box::new(held.clone()),
                    waiter: w,
                });
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::Queued {
        held: Box::new(held.clone()),
        waiter,
    })
}

/// Whether a slot of `lock`'s `slots` carries `token` now.
fn taken_by(lock: &LockFile, slots: u32, token: Option<&str>) -> Result<bool> {
    let Some(t) = token else {
        return Ok(false);
    };
    for k in 0..slots {
        if let Some(ev) = lock.slot(k)?.look()?
            && record::carries_token(&ev.bytes, t)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

impl LockFile {
    /// Who waits for this lock, first in line first: callers of
    /// [`LockFile::acquire`] with a wait, each with its ticket's record,
    /// and which of them holds the queue seat. Dead tickets and forged
    /// ones that are not records are left out.
    pub fn waiters(&self) -> Vec<Waiting> {
        let queued_token = seat_of(self)
            .and_then(|p| p.look())
            .ok()
            .flatten()
            .filter(|ev| {
                matches!(
                    crate::lock::judge::judge(ev, self.deadline),
                    Verdict::Held(_)
                )
            })
            .and_then(|ev| ev.record.ok())
            .and_then(|r| r.token);
        let mut out = Vec::new();
        for (_, name) in tickets(self).into_iter().take(MAX_TICKETS_LOOKED) {
            let Ok(file) = self.sibling(self.dir().join(&name)) else {
                continue;
            };
            let Ok(Some(ev)) = file.look() else { continue };
            if !matches!(
                crate::lock::judge::judge(&ev, self.deadline),
                Verdict::Held(_)
            ) {
                continue;
            }
            let Ok(record) = ev.record else { continue };
            let queued = queued_token.is_some() && record.token == queued_token;
            out.push(Waiting { record, queued });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticket_names_sort_as_their_times_and_forged_ones_are_not_tickets() {
        let p = b".sync.lock.wait.";
        assert_eq!(
            order_of(p, b".sync.lock.wait.00000000000000000042.0a1b2c3d"),
            Some(42)
        );
        for bad in [
            &b".sync.lock.wait.42.0a1b2c3d"[..],
            b".sync.lock.wait.00000000000000000042.0a1b2c3",
            b".sync.lock.wait.00000000000000000042.0a1b2c3g",
            b".sync.lock.wait.0000000000000000004x.0a1b2c3d",
            b".sync.lock.wait.00000000000000000042",
            b".other.lock.wait.00000000000000000042.0a1b2c3d",
        ] {
            assert_eq!(order_of(p, bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
