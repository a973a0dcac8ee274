//! The journal: what happened to a lock, in a JSON Lines file of the
//! user's state directory.
//!
//! A lock keeps its journal in the state directory of the user who wrote
//! it ([`crate::state`]: `/var/lib/onlyone` for root), named from the lock's
//! path (`/run/onlyone/sync.lock`: `run-onlyone-sync.lock.journal`), and
//! one older generation (`.journal.1`): a reboot that empties `/run` leaves
//! it. Earlier versions kept it beside the lock (`DIR/NAME.lock.journal`,
//! `.journal.1`): those are still read, in place, and never written
//! again. Every run, skip,
//! takeover, stop, reap and release is one [`Event`], one line of JSON
//! (schema [`SCHEMA`], documented in doc/json.md), appended with one
//! `write(2)` on a file opened with `O_APPEND`: concurrent writers never tear
//! or interleave a line, and a line is at most 2,048 bytes (the
//! command is cut to fit).
//!
//! **The owner's file.** A journal outlives its runs and holds their
//! command lines (a password on one, say), so it is its owner's: created
//! 0600, and one of ours found looser (written by an earlier version) is
//! made 0600 by descriptor when it is next appended to, its older
//! generation with it. A writer appends only to a regular file it owns,
//! opened without following a link and without blocking (a FIFO in its
//! place is refused, not waited on).
//!
//! **Rotation.** Once the journal passes [`ROTATE_AT`] bytes, the writer
//! that noticed renames it to `.journal.1` (the older generation goes). No
//! event a concurrent writer appends is lost: a writer holds a shared
//! `flock` on the file while it appends, and finds the file still linked
//! once it holds it and again once it has written (else it appends again,
//! to the journal that took its place); the rotator takes an
//! exclusive `flock` on the state directory's `.onlyone-rotation` (one
//! rotator at a time: a 0600 file of its user's, which no other account can
//! open to hold it) and one on the generation it is about to remove, so
//! that it waits for whoever is still appending to it. (The lock's own
//! removal guard is not used: the journal lives apart from the lock
//! directory, which may be another user's, or gone.)
//!
//! **Nothing waits forever.** A `flock` is something any process that can
//! open the file can take, and hold: every wait for one is bounded (by
//! a second, and by the lock handle's deadline,
//! [`LockFile::with_deadline`](crate::LockFile::with_deadline)). An
//! append whose shared lock does not come in time is not written (the
//! error says why); a rotator whose exclusive lock does not come in time
//! rotates all the same: a writer of that
//! generation would have to stall for the whole wait, after a journal's
//! worth of other appends, for its line to be lost.
//!
//! **Failure.** The journal is a record of runs, never a condition of
//! one: [`Journal::append`] returns the error, and callers say it once
//! and go on.
//!
//! **Reading.** [`Journal::events`] reads both generations beside the lock
//! (an earlier version's), then both in the state directory, oldest first,
//! each in the order the events were appended (not by their rounded
//! times); a last line still being written, and any line that is not an
//! event, are skipped.
//!
//! **An earlier version's journal is believed only from its writer.** It
//! sits in the lock's directory, which other accounts may write in
//! (`/run/lock`, `/tmp`), where anyone could have made one that vouches
//! for a run that never happened. An earlier version appended only to a
//! journal of its own user's, so one is read only when it is the caller's
//! or root's (not the lock file's owner's: whoever holds the lock may be
//! the forger), no one else may write to it (group and others have no
//! write bit), and it has no other name (a hard link could be any file of
//! the caller's). It is opened as every journal is (no link followed, a
//! regular file, without blocking). One that fails this is set aside, not
//! an error (a forger must not be able to blind `check` either): the
//! reading goes on without it, and [`Journal::on_set_aside`] is told which
//! file and why ([`SetAside`]), so the command can say so. [`Journal::history`] pairs them into runs. What is read is
//! input (another user's journal in a shared directory is too): a line
//! longer than 2,048 bytes is skipped, and so is an event whose time is
//! not a time (before 1970, past the year 9999, not a number); a duration
//! (or a CPU time) that is not one (negative, past that range) is dropped;
//! only the last 32 MiB (8 × [`ROTATE_AT`]) of a generation are read.
//!
//! **Schedules.** A fire given a schedule keeps it in the journal (a
//! `schedule` event, written when the journal has none or another), so
//! that readers know it without being told; a fire that finds scheduled
//! fires passed unseen records them once (a `missed` event), and a fire
//! that waits before it takes the lock says until when (a `delay` event).
//! [`History::scheduled`] reads them back ([`Scheduled`]). A journal of
//! an earlier version has none of them, and reads as one with no
//! schedule; an earlier version skips these lines as it skips any line
//! that is not an event it knows.
//!
//! A fire looks at its schedule through [`ScheduleLog`]: whether the
//! journal may keep one (a scan of its bytes, for the fires given none),
//! and its history read and what the fire found recorded, one fire at a
//! time (a `flock` on the state directory, waited for at most a second; a
//! store records it in one step of its own, on any host).
//!
//! Five parts: the events and their line (`event.rs`), the journal's
//! file, its rotation and its reading (`file.rs`), the runs its events
//! pair into (`history.rs`), what they say of the schedule
//! (`scheduled.rs`), and a fire's look at it (`look.rs`). A store keeps
//! the same events elsewhere ([`EventLog`]) and reads them back as the
//! same [`History`].

use std::io;

mod event;
mod file;
mod history;
mod look;
pub mod moments;
mod scheduled;

#[cfg(any(feature = "postgres", feature = "etcd"))]
pub(crate) use event::MAX_LINE;
pub use event::{EndReason, Event, EventKind, Exit, SCHEMA, Usage, run_id};
pub use file::{Journal, ROTATE_AT, SetAside};
pub use history::{Class, History, LockNow, Outcome, Run};
pub use look::ScheduleLog;
pub use scheduled::{CATCH_UP, Delay, MissedFires, START_SLACK, Scheduled, UnreadableSchedule};

pub(crate) use file::open_regular;

/// Where a place keeps the events of a lock: the [`Journal`] beside a
/// lock file, or the store's history of a name
/// ([`crate::place::store::StoreLog`]). Both places write the same [`Event`]s
/// through this, and read them back as one [`History`].
pub trait EventLog {
    /// Appends one event.
    fn append(&self, ev: &Event) -> io::Result<()>;
    /// What to call it in a message: "the journal `PATH`", "the store".
    fn describe(&self) -> String;
}
