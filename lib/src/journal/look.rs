//! A fire's look at its lock's schedule ([`ScheduleLog`]): the schedule
//! kept and the fires recorded missed, read and recorded by one fire at a
//! time, in the journal (a `flock` on the state directory) or in a store
//! (what a fire found recorded in one step of the store's, only if no
//! fire recorded since it read: `crate::place::store`'s `ScheduleLog`).

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::fs::{FlockOperation, Mode, OFlags};

use super::{EventLog, History, Journal};

/// Where a place keeps what the fires of a lock find of its schedule: the
/// schedule kept, and the scheduled fires recorded missed. A fire reads it
/// and records what it found while the lock's other fires that look wait
/// ([`ScheduleLog::look`]): of fires at the same instant, one records what
/// was missed and the others find it recorded.
pub trait ScheduleLog: EventLog {
    /// False when the log surely keeps no schedule (nor a word of one): a
    /// look that costs less than reading its history, for the fires that
    /// are given no schedule (most fires of most locks).
    fn may_keep_schedule(&self) -> io::Result<bool>;
    /// Reads the history and hands it to `record`, which appends what the
    /// fire found to the log it is given, while the lock's other fires that
    /// look wait. The wait for them is bounded: past it the look goes on
    /// alone, and a fire that looked at the same instant may record the
    /// same fires missed again, which readers count once.
    fn look(&self, record: &mut dyn FnMut(&History, &dyn EventLog)) -> io::Result<()>;
}

/// What a `schedule` or `missed` event has in its line: `"schedule":` or
/// `"event":"schedule"`, however the line is spaced; any other line has
/// it only as the end of a string (a command `run-schedule`), which
/// costs a read of the history, never a fire missed.
const SCHEDULE_WORD: &[u8] = b"schedule\"";

impl ScheduleLog for Journal {
    /// Scans the generations' bytes for `schedule"` (a `schedule` or
    /// `missed` event's), without parsing a line: a journal of 4 MiB costs
    /// a millisecond or two where its history costs tens.
    fn may_keep_schedule(&self) -> io::Result<bool> {
        let finder = memchr::memmem::Finder::new(SCHEDULE_WORD);
        let mut found = false;
        self.each_generation(|lines| found = found || finder.find(lines).is_some(), None)?;
        Ok(found)
    }

    fn look(&self, record: &mut dyn FnMut(&History, &dyn EventLog)) -> io::Result<()> {
        let _guard = self.look_guard();
        let h = self.history()?;
        record(&h, self);
        Ok(())
    }
}

/// The longest a fire waits for another's look at the same state
/// directory: a look takes milliseconds; past this, it looks all the same.
const LOOK_WAIT: Duration = Duration::from_secs(1);

impl Journal {
    /// An exclusive `flock` on the state directory, held while a fire reads
    /// what was missed and records it. `None`, to look without it, when
    /// the directory cannot be opened (no journal yet: nothing to record)
    /// or another process holds it past [`LOOK_WAIT`] (another account's
    /// process, where the state directory is one others can open).
    fn look_guard(&self) -> Option<OwnedFd> {
        let dir = self.path().parent()?.to_owned();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(&dir, flags, Mode::empty()).ok()?;
        let until = std::time::Instant::now() + LOOK_WAIT;
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Some(fd),
                Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR)
                    if std::time::Instant::now() < until =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return None,
            }
        }
    }
}
