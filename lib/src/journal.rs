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
//! or interleave a line, and a line is at most [`MAX_LINE`] bytes (the
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
//! [`LOCK_WAIT`], and by the lock handle's deadline,
//! [`LockFile::with_deadline`]). An append whose shared lock does not come
//! in time is not written (the error says why); a rotator whose exclusive
//! lock does not come in time rotates all the same: a writer of that
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
//! longer than [`MAX_LINE`] is skipped, and so is an event whose time is
//! not a time (before 1970, past the year 9999, not a number); a duration
//! (or a CPU time) that is not one (negative, past that range) is dropped;
//! only the last [`MAX_READ`] bytes of a generation are read.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FlockOperation, Mode as FsMode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::lock::LockFile;
use crate::state::StateDir;

/// The schema version every event carries (`"v"`).
pub const SCHEMA: u32 = 1;

/// The longest line an event takes, newline included: the command is cut
/// to fit.
pub const MAX_LINE: usize = 2048;

/// The size past which the journal is rotated: with the older generation,
/// a journal keeps at most about twice this much (some 30,000 events).
pub const ROTATE_AT: u64 = 4 << 20;

/// The most of a generation that is read: its last this many bytes (a
/// journal rotates long before; one that did not is someone else's doing).
pub const MAX_READ: u64 = 8 * ROTATE_AT;

/// The longest wait for a `flock` another process holds on a journal (see
/// "Nothing waits forever" in the module docs).
pub const LOCK_WAIT: Duration = Duration::from_secs(1);

/// The latest time an event may carry: the end of the year 9999.
const MAX_TIME: f64 = 253_402_300_799.0;

/// The mode of a journal: its owner's.
const MODE: u32 = 0o600;

/// The file of the state directory whose `flock` makes one rotator at a
/// time.
const ROTATION_GUARD: &str = ".onlyone-rotation";

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EventKind {
    /// A run (or a script's hold, `acquire`) began.
    Start,
    /// A run ended: its exit code or signal, its duration.
    End,
    /// A fire found the lock held, and skipped (exit 75).
    Skip,
    /// A stale lock was taken over.
    Takeover,
    /// `onlyone stop` ended a run.
    Stop,
    /// `onlyone reap` ended a run's lingering processes.
    Reap,
    /// A script's hold was released (`onlyone release`).
    Release,
    /// A run whose wrapper died without a word, closed by whoever next
    /// found its lock stale: its exit is unknown.
    Abandoned,
}

impl EventKind {
    /// The word the journal uses.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Start => "start",
            EventKind::End => "end",
            EventKind::Skip => "skip",
            EventKind::Takeover => "takeover",
            EventKind::Stop => "stop",
            EventKind::Reap => "reap",
            EventKind::Release => "release",
            EventKind::Abandoned => "abandoned",
        }
    }
}

/// Where a place keeps the events of a lock: the [`Journal`] beside a
/// lock file, or the store's history of a name
/// ([`crate::store::StoreLog`]). Both places write the same [`Event`]s
/// through this, and read them back as one [`History`].
pub trait EventLog {
    /// Appends one event.
    fn append(&self, ev: &Event) -> io::Result<()>;
    /// What to call it in a message: "the journal `PATH`", "the store".
    fn describe(&self) -> String;
}

impl EventLog for Journal {
    fn append(&self, ev: &Event) -> io::Result<()> {
        Journal::append(self, ev)
    }

    fn describe(&self) -> String {
        format!("the journal `{}`", self.path().display())
    }
}

/// How a run's command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

/// What a run used: the CPU time and the peak memory of its command and
/// of every process of the run that the supervisor reaped (each with the
/// descendants it reaped itself), as `wait4(2)` reports them. An `end`
/// event's `cpu_user`, `cpu_system` and `max_rss`.
///
/// Processes still running when the run ends (kept with `--keep-strays`
/// or `--linger`, or that would not die) are not in it, nor is a process
/// whose parent never waited for it (a parent that ignores `SIGCHLD`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Usage {
    /// CPU time in user mode, summed over the processes.
    pub user: Duration,
    /// CPU time in the kernel on their behalf, summed over the processes.
    pub system: Duration,
    /// The largest peak resident set size of any one of the processes,
    /// in bytes (`ru_maxrss`): the biggest process's peak, not a sum over
    /// processes that lived at the same time.
    pub max_rss: u64,
}

impl Usage {
    /// What one reaped process used (`ru_maxrss` is in KiB).
    pub(crate) fn of_rusage(ru: &libc::rusage) -> Usage {
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.clamp(0, 999_999) as u64)
        };
        Usage {
            user: time(ru.ru_utime),
            system: time(ru.ru_stime),
            max_rss: (ru.ru_maxrss.max(0) as u64).saturating_mul(1024),
        }
    }

    /// This and `other` together: times summed, the larger peak.
    pub fn add(&mut self, other: Usage) {
        self.user = self.user.saturating_add(other.user);
        self.system = self.system.saturating_add(other.system);
        self.max_rss = self.max_rss.max(other.max_rss);
    }

    /// As an `end` event gives it back: all three fields, the times each
    /// a duration ([`sane_duration`]); else none.
    fn read(user: Option<f64>, system: Option<f64>, max_rss: Option<u64>) -> Option<Usage> {
        let secs = |d: Option<f64>| sane_duration(d).map(Duration::from_secs_f64);
        Some(Usage {
            user: secs(user)?,
            system: secs(system)?,
            max_rss: max_rss?,
        })
    }
}

/// Why onlyone ended a run: an `end` event's `ended_by`, and the word a
/// [`Outcome::Ended`] run gives (`stop` and `reap` come from the events of
/// those names). One word per reason, here only: both places (the lock
/// directory and the store) write and read these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum EndReason {
    /// It ran for its `--max-time`.
    MaxTime,
    /// All its processes were idle for `--idle-timeout`.
    Idle,
    /// Its lease could not be renewed in time (the store).
    LeaseLost,
    /// `onlyone stop` ended it (a signal here, a request with a store).
    Stop,
    /// `onlyone reap` ended what it left.
    Reap,
    /// A word this version does not know (a newer writer's).
    #[serde(other)]
    Unknown,
}

impl EndReason {
    /// The word the journal uses.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::MaxTime => "max-time",
            EndReason::Idle => "idle",
            EndReason::LeaseLost => "lease-lost",
            EndReason::Stop => "stop",
            EndReason::Reap => "reap",
            EndReason::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The run id of the run `token`: its 128 bits as a UUID (8-4-4-4-12 hex
/// digits), for a token as [`crate::new_token`] makes them; `None` for
/// any other.
pub fn run_id(token: &str) -> Option<String> {
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if token.len() != 32 || !token.bytes().all(hex) {
        return None;
    }
    let t = token;
    Some(format!(
        "{}-{}-{}-{}-{}",
        &t[..8],
        &t[8..12],
        &t[12..16],
        &t[16..20],
        &t[20..]
    ))
}

/// One line of the journal. Fields that do not apply are left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Event {
    /// The schema version ([`SCHEMA`]).
    pub v: u32,
    /// When, in Unix seconds (to the millisecond).
    pub time: f64,
    /// What happened.
    pub event: EventKind,
    /// The run's process: its wrapper or owner (`start`, `end`,
    /// `abandoned`, `release`, `stop`, `reap`, `takeover`: the stale run's);
    /// for a `skip`, the live run's holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The run's token: the run this event is about (for a `skip`, the live
    /// run's; for a `takeover`, the stale run's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The run's id, a UUID ([`run_id`] of its token): what its pings and
    /// its command (`ONLYONE_RUN_ID`) call it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<String>,
    /// The host the event happened on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The user who wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The run's command line (cut to fit [`MAX_LINE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<String>,
    /// `run`, `script` or `lock` (`start`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The command's exit code (`end`), or the code a script gave `release
    /// --exit` (`release`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    /// The signal that killed the command (`end`), or that `stop` sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// How long the run lasted, seconds (`end`, `abandoned`: until it was
    /// found; `release`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    /// Why onlyone ended the run (`end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<EndReason>,
    /// Who did it: the skipper, the taker, the stopper, the reaper, the
    /// process that found a run abandoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<u32>,
    /// Why (a takeover's or an abandonment's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The run's CPU time in user mode, seconds (`end` of a command that
    /// ran; see [`Usage`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_f64"
    )]
    pub cpu_user: Option<f64>,
    /// The run's CPU time in the kernel, seconds (`end`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_f64"
    )]
    pub cpu_system: Option<f64>,
    /// The largest peak resident set size of one process of the run,
    /// bytes (`end`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_u64"
    )]
    pub max_rss: Option<u64>,
}

/// A number read back: `None` for anything else, so that a bad value in a
/// field added later costs that field, never the event (and its run's end).
fn lenient_f64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Option::<serde_json::Value>::deserialize(d)?.and_then(|v| v.as_f64()))
}

/// A whole number read back, as [`lenient_f64`]: `None` unless it is one.
fn lenient_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Option::<serde_json::Value>::deserialize(d)?.and_then(|v| v.as_u64()))
}

impl Event {
    /// An event of `kind`, now, on this host, by this user.
    pub fn now(kind: EventKind) -> Event {
        Event {
            v: SCHEMA,
            time: unix_now_ms(),
            event: kind,
            pid: None,
            token: None,
            rid: None,
            host: Some(crate::procfs::host_name()),
            uid: Some(rustix::process::geteuid().as_raw()),
            cmd: None,
            mode: None,
            exit: None,
            signal: None,
            duration: None,
            ended_by: None,
            by: None,
            reason: None,
            cpu_user: None,
            cpu_system: None,
            max_rss: None,
        }
    }

    /// An event of `kind` about the run `token` of process `pid`.
    fn about(kind: EventKind, token: Option<&str>, pid: Option<u32>, cmd: Option<&str>) -> Event {
        let mut ev = Event::now(kind);
        ev.token = token.map(str::to_owned);
        ev.rid = token.and_then(run_id);
        ev.pid = pid;
        ev.cmd = cmd.map(str::to_owned);
        ev
    }

    /// A run began (`mode`: `run`, `script` or `lock`), its wrapper or
    /// owner `pid`.
    pub fn start(token: Option<&str>, pid: u32, cmd: Option<&str>, mode: &str) -> Event {
        let mut ev = Event::about(EventKind::Start, token, Some(pid), cmd);
        ev.mode = Some(mode.to_owned());
        ev
    }

    /// A run ended: how (`exit`, and what onlyone ended it for), after
    /// `took`.
    pub fn end(
        token: Option<&str>,
        pid: u32,
        cmd: Option<&str>,
        exit: Exit,
        ended_by: Option<EndReason>,
        took: Duration,
    ) -> Event {
        let mut ev = Event::about(EventKind::End, token, Some(pid), cmd);
        match exit {
            Exit::Code(c) => ev.exit = Some(c),
            Exit::Signal(s) => {
                ev.signal = Some(match rustix::process::Signal::from_named_raw(s) {
                    Some(sig) => crate::signal::signal_name(sig),
                    None => s.to_string(),
                });
            }
        }
        ev.ended_by = ended_by;
        ev.duration = Some(took.as_secs_f64());
        ev
    }

    /// The event with what the run used (an `end`).
    pub fn with_usage(mut self, used: Usage) -> Event {
        self.cpu_user = Some(used.user.as_secs_f64());
        self.cpu_system = Some(used.system.as_secs_f64());
        self.max_rss = Some(used.max_rss);
        self
    }

    /// A fire found the run `token` of `holder` live, and skipped; this
    /// process is the skipper.
    pub fn skip(token: Option<&str>, holder: Option<u32>, cmd: Option<&str>) -> Event {
        Event::about(EventKind::Skip, token, holder, cmd).by_me()
    }

    /// This process took a stale lock over from the run `token` of `pid`,
    /// for `reason`.
    pub fn takeover(
        token: Option<&str>,
        pid: u32,
        cmd: Option<&str>,
        reason: &str,
        by: u32,
    ) -> Event {
        let mut ev = Event::about(EventKind::Takeover, token, Some(pid), cmd);
        ev.by = Some(by);
        ev.reason = Some(reason.to_owned());
        ev
    }

    /// The run `token` of `pid`, whose wrapper died without a word, found
    /// stale by this process for `reason`, `age` after it began.
    pub fn abandoned(
        token: Option<&str>,
        pid: u32,
        cmd: Option<&str>,
        reason: &str,
        age: Option<f64>,
    ) -> Event {
        let mut ev = Event::about(EventKind::Abandoned, token, Some(pid), cmd).by_me();
        ev.duration = age;
        ev.reason = Some(reason.to_owned());
        ev
    }

    /// This process stopped the run `token` of `pid` (with `signal`, when
    /// it sent one).
    pub fn stop(
        token: Option<&str>,
        pid: Option<u32>,
        cmd: Option<&str>,
        signal: Option<&str>,
    ) -> Event {
        let mut ev = Event::about(EventKind::Stop, token, pid, cmd).by_me();
        ev.signal = signal.map(str::to_owned);
        ev
    }

    /// This process ended what the run `token` of `pid` left (`reap`).
    pub fn reap(token: &str, pid: u32, cmd: Option<&str>) -> Event {
        Event::about(EventKind::Reap, Some(token), Some(pid), cmd).by_me()
    }

    /// A script's hold on the run `token` of `pid` was released, `age`
    /// after it began, with the script's exit code when it gave one
    /// (`release --exit`).
    pub fn release(
        token: Option<&str>,
        pid: u32,
        cmd: Option<&str>,
        age: Option<f64>,
        exit: Option<i32>,
    ) -> Event {
        let mut ev = Event::about(EventKind::Release, token, Some(pid), cmd).by_me();
        ev.duration = age;
        ev.exit = exit;
        ev
    }

    fn by_me(mut self) -> Event {
        self.by = Some(std::process::id());
        self
    }

    /// The event as one line, newline included, at most [`MAX_LINE`]
    /// bytes: the command, then the reason, are cut to fit.
    pub fn to_line(&self) -> Vec<u8> {
        let mut ev = self.clone();
        loop {
            let mut line = serde_json::to_vec(&ev).unwrap_or_default();
            line.push(b'\n');
            if line.len() <= MAX_LINE {
                return line;
            }
            let over = line.len() - MAX_LINE;
            let cut = |s: &mut Option<String>| match s {
                Some(v) if !v.is_empty() => {
                    // JSON escapes can make a character take up to 6 bytes.
                    let keep = v.len().saturating_sub(over.max(16));
                    let mut end = keep;
                    while !v.is_char_boundary(end) {
                        end -= 1;
                    }
                    v.truncate(end);
                    v.push('…');
                    true
                }
                _ => false,
            };
            if !(cut(&mut ev.cmd) || cut(&mut ev.reason) || cut(&mut ev.host)) {
                // Nothing left to cut (cannot happen with the fields above).
                line.truncate(MAX_LINE - 1);
                line.push(b'\n');
                return line;
            }
        }
    }
}

/// Now, in Unix seconds, to the millisecond.
pub(crate) fn unix_now_ms() -> f64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_millis() as f64) / 1000.0
}

/// A lock's journal (see the module docs).
#[derive(Debug, Clone)]
pub struct Journal {
    state: StateDir,
    name: OsString,
    older: OsString,
    /// The lock, when its directory exists: an earlier version's journal
    /// is read there.
    lock: Option<LockFile>,
    legacy: OsString,
    legacy_older: OsString,
    deadline: Option<Instant>,
    lock_path: std::path::PathBuf,
    on_set_aside: Option<Notice>,
}

/// An earlier version's journal beside a lock that is not read (see "An
/// earlier version's journal" in the module docs): which file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetAside {
    /// The file.
    pub path: std::path::PathBuf,
    /// Why it is not believed.
    pub why: String,
}

impl std::fmt::Display for SetAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}`, an earlier version's journal beside the lock, is not read: {}",
            self.path.display(),
            self.why
        )
    }
}

/// What [`Journal::on_set_aside`] calls.
#[derive(Clone)]
struct Notice(std::sync::Arc<dyn Fn(&SetAside) + Send + Sync>);

impl std::fmt::Debug for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notice")
    }
}

impl Journal {
    /// The journal of `lock` in the state directory `state`: every wait
    /// on its behalf ends by the lock handle's deadline too
    /// ([`LockFile::with_deadline`]).
    pub fn of(lock: &LockFile, state: &StateDir) -> Journal {
        let mut j = Journal::named(lock.path(), state);
        j.lock = Some(lock.clone());
        j.deadline = lock.deadline();
        j
    }

    /// The journal of the lock file `lock`, whether or not the lock or
    /// its directory exists (`/run` after a reboot).
    pub fn at(lock: &std::path::Path, state: &StateDir) -> Journal {
        let mut j = Journal::named(lock, state);
        j.lock = LockFile::open(lock).ok();
        j
    }

    fn named(lock: &std::path::Path, state: &StateDir) -> Journal {
        let (name, older) = crate::state::journal_name(lock);
        let mut legacy = lock.file_name().unwrap_or_default().to_owned();
        legacy.push(".journal");
        let mut legacy_older = legacy.clone();
        legacy_older.push(".1");
        Journal {
            state: state.clone(),
            name,
            older,
            lock: None,
            legacy,
            legacy_older,
            deadline: None,
            lock_path: lock.to_owned(),
            on_set_aside: None,
        }
    }

    /// Calls `notice` for each earlier version's journal beside the lock
    /// that a read sets aside (see [`SetAside`]).
    pub fn on_set_aside(mut self, notice: impl Fn(&SetAside) + Send + Sync + 'static) -> Journal {
        self.on_set_aside = Some(Notice(std::sync::Arc::new(notice)));
        self
    }

    /// The path of the lock file whose journal this is.
    pub fn lock_path(&self) -> &std::path::Path {
        &self.lock_path
    }

    /// The journal's path, in the state directory.
    pub fn path(&self) -> std::path::PathBuf {
        self.state.path().join(&self.name)
    }

    /// Where an earlier version kept it, beside the lock (read, never
    /// written).
    pub fn legacy_path(&self) -> Option<std::path::PathBuf> {
        self.lock.as_ref().map(|l| l.dir().join(&self.legacy))
    }

    /// Appends one event: one `write(2)` of one line (see the module docs).
    /// Every wait is bounded by [`LOCK_WAIT`] and the lock handle's
    /// deadline.
    pub fn append(&self, ev: &Event) -> io::Result<()> {
        let line = ev.to_line();
        let dir = self.state.writable()?;
        let until = self.until();
        // A writer that opened a generation just removed by a rotation
        // opens the journal again; a rotation is rare, so a few tries do.
        for _ in 0..8 {
            let (fd, st) = open_regular(
                dir,
                &self.name,
                OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE,
                MODE,
            )?;
            owned_by_us(&st)?;
            if st.st_mode & 0o777 != MODE {
                // 0600 whatever the umask made it.
                let _ = rustix::fs::fchmod(&fd, FsMode::from_raw_mode(MODE));
            }
            if st.st_mode & 0o077 != 0 {
                // Ours, but readable by others: the older generation is too.
                self.tighten(dir, &self.older);
            }
            if let Some(lock) = &self.lock
                && st.st_size == 0
            {
                // This user's first event here (the upgrade): an earlier
                // version's journal beside the lock, readable by others, is
                // never written again, but its secrets are kept. Once, not
                // on every append.
                self.tighten(lock.dir_fd(), &self.legacy);
                self.tighten(lock.dir_fd(), &self.legacy_older);
            }
            if !flock_until(&fd, FlockOperation::NonBlockingLockShared, until)? {
                return Err(io::Error::other(
                    "another process holds a lock on it (`fuser -v` on it names the process); \
                     this event is not written",
                ));
            }
            let st = rustix::fs::fstat(&fd)?;
            if st.st_nlink == 0 {
                continue;
            }
            write_all(fd.as_fd(), &line)?;
            // A rotation that ran out of patience may have removed it
            // after all: then the line goes to the journal in its place.
            if rustix::fs::fstat(&fd)?.st_nlink == 0 {
                continue;
            }
            drop(fd);
            if st.st_size as u64 + line.len() as u64 > ROTATE_AT {
                return self.rotate(dir).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("the event is written, but the journal could not be rotated: {e}"),
                    )
                });
            }
            return Ok(());
        }
        Err(io::Error::other("the journal kept being rotated away"))
    }

    /// When a wait on this journal's behalf ends: [`LOCK_WAIT`] from now,
    /// or the lock handle's deadline if that is sooner.
    fn until(&self) -> Instant {
        let bound = Instant::now() + LOCK_WAIT;
        self.deadline.map_or(bound, |d| d.min(bound))
    }

    /// Makes a generation of ours that others can read its owner's, by
    /// descriptor (best effort: it is tightened again on the next try).
    fn tighten(&self, dir: BorrowedFd<'_>, name: &OsStr) {
        if let Ok((fd, st)) = open_regular(dir, name, OFlags::RDONLY, 0)
            && owned_by_us(&st).is_ok()
            && st.st_mode & 0o077 != 0
        {
            let _ = rustix::fs::fchmod(&fd, FsMode::from_raw_mode(MODE));
        }
    }

    /// Renames the journal to its older generation, if it is still past
    /// [`ROTATE_AT`]: one rotator at a time (a `flock` on the state
    /// directory), after whoever is still appending to the generation it
    /// removes, waited for until [`Journal::until`] (see the module docs).
    fn rotate(&self, dir: BorrowedFd<'_>) -> io::Result<()> {
        let until = self.until();
        // A file of its own (0600), that no other account can open, let
        // alone hold a flock on.
        let (guard, st) = open_regular(
            dir,
            OsStr::new(ROTATION_GUARD),
            OFlags::RDONLY | OFlags::CREATE,
            MODE,
        )?;
        owned_by_us(&st)?;
        if !flock_until(&guard, FlockOperation::NonBlockingLockExclusive, until)? {
            return Err(io::Error::other(
                "another process of this user's is rotating a journal of the state directory",
            ));
        }
        match rustix::fs::statat(dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if st.st_size as u64 > ROTATE_AT => {}
            Ok(_) | Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let old = match open_regular(dir, &self.older, OFlags::RDONLY, 0) {
            Ok((fd, _)) => {
                // Not in time: rotated all the same (the module docs say
                // what that risks, and why it is next to nothing).
                let _ = flock_until(&fd, FlockOperation::NonBlockingLockExclusive, until)?;
                Some(fd)
            }
            // Not there, or not a file (the rename replaces it).
            Err(_) => None,
        };
        rustix::fs::renameat(dir, &self.name, dir, &self.older)?;
        drop(old);
        Ok(())
    }

    /// Every event, oldest first: the older generation, then the current
    /// one, in the order they were appended.
    pub fn events(&self) -> io::Result<Vec<Event>> {
        let mut out = Vec::new();
        self.each_generation(|lines| parse_lines(lines, &mut out))?;
        Ok(out)
    }

    /// Every generation, oldest first: the two beside the lock (an earlier
    /// version's, when they are believed), then the two in the state
    /// directory.
    fn each_generation(&self, mut f: impl FnMut(&[u8])) -> io::Result<()> {
        if let Some(lock) = &self.lock {
            for name in [&self.legacy_older, &self.legacy] {
                let path = lock.dir().join(name);
                let in_place = |e: io::Error| {
                    io::Error::new(
                        e.kind(),
                        format!("{e} (`{}`, an earlier version's journal)", path.display()),
                    )
                };
                let Some((file, st)) = self.open(lock.dir_fd(), name).map_err(in_place)? else {
                    continue;
                };
                if let Some(why) = not_believed(&st) {
                    if let Some(Notice(notice)) = &self.on_set_aside {
                        notice(&SetAside { path, why });
                    }
                    continue;
                }
                read_chunks(file, st.st_size as u64, &mut f).map_err(in_place)?;
            }
        }
        if let Some(dir) = self.state.readable()? {
            for name in [&self.older, &self.name] {
                if let Some((file, st)) = self.open(dir, name)? {
                    read_chunks(file, st.st_size as u64, &mut f)?;
                }
            }
        }
        Ok(())
    }

    /// The runs (see [`History`]): both generations read and paired
    /// line by line, without an [`Event`] for each.
    pub fn history(&self) -> io::Result<History> {
        let mut p = Pairing::default();
        self.each_generation(|lines| p.add_lines(lines))?;
        Ok(p.h)
    }

    /// Opens a generation for reading: `None` when it does not exist.
    fn open(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
    ) -> io::Result<Option<(std::fs::File, rustix::fs::Stat)>> {
        match open_regular(dir, name, OFlags::RDONLY, 0) {
            Ok((fd, st)) => Ok(Some((std::fs::File::from(fd), st))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                Err(self.unreadable(dir, name, e))
            }
            Err(e) => Err(e),
        }
    }

    /// Why a generation cannot be read, when it is another user's.
    fn unreadable(&self, dir: BorrowedFd<'_>, name: &OsStr, e: io::Error) -> io::Error {
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if st.st_uid != rustix::process::geteuid().as_raw() => io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "permission denied: it is {}'s (mode {:04o}); a journal can hold \
                         secrets from command lines, so only its owner (and root) can read it",
                    crate::text::user_name(st.st_uid),
                    st.st_mode & 0o7777
                ),
            ),
            _ => e,
        }
    }
}

/// Reads a generation in chunks of [`CHUNK`], handing each run of
/// complete lines to `f`: a journal of many megabytes costs a buffer
/// of one (page faults are most of what reading costs otherwise). Only
/// the last [`MAX_READ`] bytes are read; a line longer than a buffer is
/// dropped whole.
fn read_chunks(mut file: std::fs::File, size: u64, f: &mut impl FnMut(&[u8])) -> io::Result<()> {
    // Past the cap, reading starts mid-line: that line is dropped.
    let mut discarding = false;
    if size > MAX_READ {
        io::Seek::seek(&mut file, io::SeekFrom::Start(size - MAX_READ))?;
        discarding = true;
    }
    let mut buf = vec![0u8; CHUNK];
    let mut filled = 0;
    loop {
        let n = match io::Read::read(&mut file, &mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        filled += n;
        let mut start = 0;
        if discarding {
            match buf[..filled].iter().position(|&b| b == b'\n') {
                Some(i) => {
                    start = i + 1;
                    discarding = false;
                }
                None => filled = 0,
            }
        }
        let end = buf[start..filled]
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|i| start + i + 1);
        match end {
            Some(end) => {
                f(&buf[start..end]);
                buf.copy_within(end..filled, 0);
                filled -= end;
            }
            // A full buffer without a newline is no event: dropped, up
            // to the newline that ends it.
            None if filled == buf.len() => {
                filled = 0;
                discarding = true;
            }
            None => {
                buf.copy_within(start..filled, 0);
                filled -= start;
            }
        }
        if n == 0 {
            return Ok(());
        }
    }
}

/// How much of a journal is read at a time.
const CHUNK: usize = 256 * 1024;

/// Opens `name` in the directory `dir` as a regular file, never following
/// a symbolic link and never blocking (a FIFO in its place would hang an
/// open without `O_NONBLOCK`): a file in a lock directory is input, which
/// another account may have put there. Refused, anything else says what it
/// is and that it must go.
pub(crate) fn open_regular(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlags,
    mode: u32,
) -> io::Result<(OwnedFd, rustix::fs::Stat)> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, FsMode::from_raw_mode(mode)) {
        Ok(fd) => fd,
        // Refused (a link: `ELOOP`, or `EACCES` when creating; a FIFO
        // without a reader: `ENXIO`): say what is there.
        Err(e) => {
            return Err(
                match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFREG => not_a_file(st.st_mode),
                    _ => e.into(),
                },
            );
        }
    };
    let st = rustix::fs::fstat(&fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(not_a_file(st.st_mode));
    }
    Ok((fd, st))
}

/// Says what a file of `mode` is, and that it must go.
fn not_a_file(mode: u32) -> io::Error {
    let what = match mode & libc::S_IFMT {
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFDIR => "a directory",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        _ => "something else",
    };
    io::Error::other(format!(
        "it is {what}, not a regular file, and onlyone opens nothing else there: remove it"
    ))
}

/// A journal is written only by its owner: root's command lines never go
/// into a file another user owns (and can read).
fn owned_by_us(st: &rustix::fs::Stat) -> io::Result<()> {
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid == me {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "it belongs to {}, not to {}: onlyone writes only its own journals (remove it)",
            crate::text::user_name(st.st_uid),
            crate::text::user_name(me)
        ),
    ))
}

/// Why an earlier version's journal beside a lock is not believed (see
/// "An earlier version's journal" in the module docs): `None` when it is
/// the caller's or root's, no one else may write to it, and it has no
/// other name.
fn not_believed(st: &rustix::fs::Stat) -> Option<String> {
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me && st.st_uid != 0 {
        return Some(format!(
            "it is {}'s, not yours ({}) or root's, and anyone who may write in the lock's \
             directory could have made it; remove it",
            crate::text::user_name(st.st_uid),
            crate::text::user_name(me)
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Some(format!(
            "others may write to it (mode {:04o}), so anyone could have added to it; make it \
             yours alone (chmod go-w) if you trust what it holds, or remove it",
            st.st_mode & 0o7777
        ));
    }
    if st.st_nlink != 1 {
        return Some(format!(
            "it has {} names (hard links), so it may be another file; remove this one",
            st.st_nlink
        ));
    }
    None
}

/// Takes a `flock` without blocking, trying again until `until`: false
/// when it did not come in time.
fn flock_until(fd: &OwnedFd, op: FlockOperation, until: Instant) -> io::Result<bool> {
    let mut pause = Duration::from_millis(1);
    loop {
        match rustix::fs::flock(fd, op) {
            Ok(()) => return Ok(true),
            Err(Errno::WOULDBLOCK | Errno::INTR) => {
                let now = Instant::now();
                if now >= until {
                    return Ok(false);
                }
                std::thread::sleep(pause.min(until - now));
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Writes all of `bytes` with one `write(2)` when it can (a regular file
/// takes a short line whole).
fn write_all(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    let mut off = 0;
    while off < bytes.len() {
        match rustix::io::write(fd, &bytes[off..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => off += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// True for a time an event can carry: Unix seconds from 1970 to the end
/// of the year 9999.
fn sane_time(t: f64) -> bool {
    (0.0..=MAX_TIME).contains(&t)
}

/// A duration as read back: `None` unless it is one (not negative, not
/// past [`MAX_TIME`] seconds, a number).
fn sane_duration(d: Option<f64>) -> Option<f64> {
    d.filter(|d| (0.0..=MAX_TIME).contains(d))
}

/// The events in `bytes`, appended to `out`: complete lines that parse
/// and are within bounds (see "Reading" in the module docs).
fn parse_lines(bytes: &[u8], out: &mut Vec<Event>) {
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(i) => &bytes[..=i],
        None => return,
    };
    for line in complete.split(|&b| b == b'\n') {
        if line.is_empty() || line.len() > MAX_LINE {
            continue;
        }
        if let Ok(mut ev) = serde_json::from_slice::<Event>(line)
            && sane_time(ev.time)
        {
            ev.duration = sane_duration(ev.duration);
            ev.cpu_user = sane_duration(ev.cpu_user);
            ev.cpu_system = sane_duration(ev.cpu_system);
            out.push(ev);
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// No end in the journal yet: running (or its end is not known yet).
    Running,
    /// The command exited with this code.
    Exited(i32),
    /// The command was killed by this signal.
    Signaled(String),
    /// onlyone ended it, with the command's exit when it is known.
    Ended {
        /// Why.
        by: EndReason,
        /// The command's exit code, if it exited rather than died.
        exit: Option<i32>,
    },
    /// Its wrapper died without a word; found stale later.
    Abandoned,
    /// A script's hold, released: with the code the script gave
    /// `release --exit`, when it gave one.
    Released {
        /// The script's exit code.
        exit: Option<i32>,
    },
}

/// What an [`Outcome`] counts as: one of the four ends a run has (see
/// doc/operations.md, "Outcomes"), or not over yet, or a script's release
/// that gave no exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Class {
    /// Not over yet.
    Running,
    /// Exit 0 (a script's release with `--exit 0` included).
    Success,
    /// Another exit code, a signal, `--max-time`, a lost lease, a run
    /// whose wrapper or script died (abandoned).
    Failure,
    /// Ended by `reap` or `--idle-timeout` after sitting idle: the work
    /// was over (rule 3), so it counts as a success for `check --max-age`
    /// and is not a failure.
    DoneWhenIdle,
    /// Ended by `onlyone stop` or `run --replace`: neither a success nor
    /// a failure.
    Stopped,
    /// A script released its hold without saying how it ended (no
    /// `release --exit`): neither a success nor a failure.
    ExitUnknown,
}

impl Class {
    /// The word `history --json`, `status --json` and the docs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Running => "running",
            Class::Success => "success",
            Class::Failure => "failure",
            Class::DoneWhenIdle => "done-when-idle",
            Class::Stopped => "stopped",
            Class::ExitUnknown => "exit-unknown",
        }
    }
}

impl Outcome {
    /// What it counts as.
    pub fn class(&self) -> Class {
        match self {
            Outcome::Running => Class::Running,
            Outcome::Exited(0) | Outcome::Released { exit: Some(0) } => Class::Success,
            Outcome::Released { exit: None } => Class::ExitUnknown,
            Outcome::Ended { by, .. } => match by {
                EndReason::Idle | EndReason::Reap => Class::DoneWhenIdle,
                EndReason::Stop => Class::Stopped,
                EndReason::MaxTime | EndReason::LeaseLost | EndReason::Unknown => Class::Failure,
            },
            Outcome::Exited(_)
            | Outcome::Released { exit: Some(_) }
            | Outcome::Signaled(_)
            | Outcome::Abandoned => Class::Failure,
        }
    }

    /// True for a run whose work got done: a success, or done when idle
    /// (what `check --max-age` and the last-success metric count).
    pub fn is_success(&self) -> bool {
        matches!(self.class(), Class::Success | Class::DoneWhenIdle)
    }

    /// True for a run that failed (what `check` calls "the last run
    /// failed").
    pub fn is_failure(&self) -> bool {
        self.class() == Class::Failure
    }

    /// True once the run is over.
    pub fn is_over(&self) -> bool {
        !matches!(self, Outcome::Running)
    }

    /// A word or two for people: `exit 0`, `signal KILL`, `ended
    /// (max-time)`, `stopped (signal TERM)`, `done when idle (reap)`,
    /// `released, exit 3`, `released, exit unknown`.
    pub fn describe(&self) -> String {
        let code = |exit: &Option<i32>| match exit {
            Some(c) => format!("exit {c}"),
            None => "exit unknown".to_owned(),
        };
        match self {
            Outcome::Running => "running".into(),
            Outcome::Exited(c) => format!("exit {c}"),
            Outcome::Signaled(s) => format!("signal {s}"),
            Outcome::Ended {
                by: EndReason::Stop,
                ..
            } => "stopped".into(),
            Outcome::Ended {
                by: by @ (EndReason::Idle | EndReason::Reap),
                ..
            } => format!(
                "done when idle ({})",
                if *by == EndReason::Idle {
                    "idle-timeout"
                } else {
                    "reaped"
                }
            ),
            Outcome::Ended { by, .. } => format!("ended ({by})"),
            Outcome::Abandoned => "abandoned".into(),
            Outcome::Released { exit } => format!("released, {}", code(exit)),
        }
    }
}

/// What holds a lock now, as a reader of its history found it
/// ([`History::close_over`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockNow<'a> {
    /// A live run, under this token.
    HeldBy(&'a str),
    /// No live run (free, or stale).
    Free,
    /// Held by something without a token, or not known.
    CannotTell,
}

/// One run, as the journal tells it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Run {
    /// Its token.
    pub token: String,
    /// When it started (Unix seconds).
    pub start: f64,
    /// Its wrapper or owner.
    pub pid: Option<u32>,
    /// The host it ran on.
    pub host: Option<String>,
    /// Its command line.
    pub cmd: Option<String>,
    /// `run`, `script` or `lock`.
    pub mode: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
    /// How long it lasted (seconds), once over.
    pub duration: Option<f64>,
    /// When it ended (Unix seconds), once over.
    pub end: Option<f64>,
    /// The fires skipped while it ran.
    pub skipped: u64,
    /// Whether it began by taking over a stale lock.
    pub took_over: bool,
    /// What it used, when its end says (a command that ran).
    pub usage: Option<Usage>,
}

/// The runs of a lock, and what its journal counts.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct History {
    /// The runs, oldest first, in the journal's order.
    pub runs: Vec<Run>,
    /// Every skip in the journal.
    pub skips: u64,
    /// Every takeover in the journal.
    pub takeovers: u64,
    /// Skips of runs the journal has no start of (rotated out, or taken
    /// before the journal existed).
    pub skips_of_unknown_runs: u64,
    /// Those skips, by the token of the run they found holding the lock.
    unknown_run_skips: std::collections::HashMap<String, u64>,
}

/// What pairing needs of an event, borrowed from a line of the journal
/// (or from an [`Event`]): no allocation per skip.
#[derive(Deserialize)]
struct RawEvent<'a> {
    time: f64,
    event: EventKind,
    #[serde(default)]
    pid: Option<u32>,
    #[serde(default, borrow)]
    token: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    host: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    cmd: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    mode: Option<Cow<'a, str>>,
    #[serde(default)]
    exit: Option<i32>,
    #[serde(default, borrow)]
    signal: Option<Cow<'a, str>>,
    #[serde(default)]
    duration: Option<f64>,
    #[serde(default)]
    ended_by: Option<EndReason>,
    #[serde(default)]
    by: Option<u32>,
    #[serde(default, deserialize_with = "lenient_f64")]
    cpu_user: Option<f64>,
    #[serde(default, deserialize_with = "lenient_f64")]
    cpu_system: Option<f64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    max_rss: Option<u64>,
}

impl<'a> From<&'a Event> for RawEvent<'a> {
    fn from(e: &'a Event) -> RawEvent<'a> {
        let b = |s: &'a Option<String>| s.as_deref().map(Cow::Borrowed);
        RawEvent {
            time: e.time,
            event: e.event,
            pid: e.pid,
            token: b(&e.token),
            host: b(&e.host),
            cmd: b(&e.cmd),
            mode: b(&e.mode),
            exit: e.exit,
            signal: b(&e.signal),
            duration: e.duration,
            ended_by: e.ended_by,
            by: e.by,
            cpu_user: e.cpu_user,
            cpu_system: e.cpu_system,
            max_rss: e.max_rss,
        }
    }
}

/// Pairs events into runs, one at a time.
#[derive(Default)]
struct Pairing {
    h: History,
    /// The run of each token.
    open: std::collections::HashMap<Box<str>, usize>,
    /// Takers whose start is yet to come: a takeover is followed by the
    /// taker's own start.
    takers: Vec<u32>,
}

impl Pairing {
    fn add(&mut self, ev: &RawEvent<'_>) {
        // Input (see "Reading" in the module docs): an event without a
        // time is none, and a string is kept to a line's worth.
        if !sane_time(ev.time) {
            return;
        }
        let token = ev.token.as_deref().unwrap_or("");
        let owned = |s: &Option<Cow<'_, str>>| s.as_deref().map(|s| capped(s).to_owned());
        match ev.event {
            EventKind::Start => {
                let h = &mut self.h;
                if let Some(i) = self.open.insert(token.into(), h.runs.len())
                    && !h.runs[i].outcome.is_over()
                {
                    // The same token started twice: the first is over.
                    h.runs[i].outcome = Outcome::Abandoned;
                }
                let took_over = match self.takers.iter().position(|&t| Some(t) == ev.pid) {
                    Some(i) => {
                        self.takers.swap_remove(i);
                        true
                    }
                    None => false,
                };
                h.runs.push(Run {
                    token: capped(token).to_owned(),
                    start: ev.time,
                    pid: ev.pid,
                    host: owned(&ev.host),
                    cmd: owned(&ev.cmd),
                    mode: owned(&ev.mode),
                    outcome: Outcome::Running,
                    duration: None,
                    end: None,
                    skipped: 0,
                    took_over,
                    usage: None,
                });
            }
            EventKind::End
            | EventKind::Abandoned
            | EventKind::Release
            | EventKind::Reap
            | EventKind::Stop => self.close(ev, token),
            EventKind::Skip => {
                self.h.skips += 1;
                match self.run_of(token) {
                    Some(i) => self.h.runs[i].skipped += 1,
                    None => {
                        let h = &mut self.h;
                        h.skips_of_unknown_runs += 1;
                        *h.unknown_run_skips.entry(token.to_owned()).or_default() += 1;
                    }
                }
            }
            EventKind::Takeover => {
                self.h.takeovers += 1;
                self.takers.extend(ev.by);
            }
        }
    }

    /// An event that ends a run (an end, a release, a stop, a reap, an
    /// abandonment): the run of `token`, when open, is over.
    fn close(&mut self, ev: &RawEvent<'_>, token: &str) {
        let Some(i) = self.run_of(token) else {
            return;
        };
        let run = &mut self.h.runs[i];
        // A stop ends the run unless its wrapper says how (its
        // `end` follows); nothing else reopens a run.
        let stopped = matches!(
            run.outcome,
            Outcome::Ended {
                by: EndReason::Stop,
                ..
            }
        );
        // A script's hold that its workers carried on after the
        // release ends when the last of them exits: a second
        // `release`, written then, gives its whole duration.
        let carried_on =
            matches!(run.outcome, Outcome::Released { .. }) && ev.event == EventKind::Release;
        if run.outcome.is_over() && !(stopped && ev.event == EventKind::End) && !carried_on {
            return;
        }
        run.outcome = match ev.event {
            EventKind::Abandoned => Outcome::Abandoned,
            EventKind::Release => Outcome::Released { exit: ev.exit },
            EventKind::Reap => Outcome::Ended {
                by: EndReason::Reap,
                exit: None,
            },
            EventKind::Stop => Outcome::Ended {
                by: EndReason::Stop,
                exit: None,
            },
            // Stopped: the wrapper's end says how the command
            // went, and the run stays stopped (whichever process
            // wrote the stop, and even from a wrapper that did
            // not know it was stopped).
            _ if stopped => Outcome::Ended {
                by: EndReason::Stop,
                exit: ev.exit,
            },
            _ => match (ev.ended_by, ev.exit, &ev.signal) {
                (Some(by), exit, _) => Outcome::Ended { by, exit },
                (None, Some(c), _) => Outcome::Exited(c),
                (None, None, Some(s)) => Outcome::Signaled(capped(s).to_owned()),
                (None, None, None) => Outcome::Abandoned,
            },
        };
        run.end = Some(ev.time);
        run.duration = sane_duration(ev.duration).or(Some((ev.time - run.start).max(0.0)));
        if ev.event == EventKind::End {
            run.usage = Usage::read(ev.cpu_user, ev.cpu_system, ev.max_rss);
        }
    }

    /// The run a token names: most events are about the latest run, which
    /// is looked at before the map.
    fn run_of(&self, token: &str) -> Option<usize> {
        match self.h.runs.last() {
            Some(r) if r.token == token => Some(self.h.runs.len() - 1),
            _ => self.open.get(token).copied(),
        }
    }

    /// Adds every complete line of `bytes` that is an event.
    fn add_lines(&mut self, bytes: &[u8]) {
        let complete = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(i) => &bytes[..=i],
            None => return,
        };
        // UTF-8 is checked once for the whole file, not string by string
        // (a file with a bad byte somewhere is read line by line).
        if let Ok(text) = std::str::from_utf8(complete) {
            for line in text.split_terminator('\n') {
                self.add_line(line);
            }
            return;
        }
        for line in complete.split(|&b| b == b'\n') {
            if line.len() <= MAX_LINE
                && let Ok(ev) = serde_json::from_slice::<RawEvent<'_>>(line)
            {
                self.add(&ev);
            }
        }
    }

    /// Adds one line, if it is an event (and no longer than an event is).
    fn add_line(&mut self, line: &str) {
        if line.len() > MAX_LINE {
            return;
        }
        if let Ok(ev) = serde_json::from_str::<RawEvent<'_>>(line) {
            self.add(&ev);
        }
    }
}

/// A string read back, cut to a line's worth (at a character boundary).
fn capped(s: &str) -> &str {
    if s.len() <= MAX_LINE {
        return s;
    }
    let mut end = MAX_LINE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl History {
    /// Pairs events into runs: a `start` opens one, by its token; its
    /// `end`, `abandoned` or `release` (or a `stop` or `reap`) closes it; a
    /// `skip` counts against the run whose token it names.
    pub fn of(events: &[Event]) -> History {
        let mut p = Pairing::default();
        for ev in events {
            p.add(&RawEvent::from(ev));
        }
        p.h
    }

    /// Pairs journal lines (a store that keeps them elsewhere than in a
    /// file), in the order they were appended; a line that is not an event
    /// is skipped.
    pub fn from_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> History {
        let mut p = Pairing::default();
        for line in lines {
            p.add_line(line);
        }
        p.h
    }

    /// The fires skipped while the run with this token held the lock
    /// (whether or not the journal has its start).
    pub fn skips_of(&self, token: &str) -> u64 {
        match self.runs.iter().rev().find(|r| r.token == token) {
            Some(r) => r.skipped,
            None => self.unknown_run_skips.get(token).copied().unwrap_or(0),
        }
    }

    /// Closes, as abandoned, the runs the journal leaves running that are
    /// over: every one but the last (a run holds the lock alone, so a
    /// later start means it ended), and the last one too when `now` says
    /// the lock is not held under its token. Nothing is written: the
    /// process that next finds the lock stale writes the `abandoned` event;
    /// until then a reader still never shows a finished run as running.
    /// Read the journal before looking at the lock, so that a run that
    /// starts in between is not taken for over.
    pub fn close_over(&mut self, now: LockNow<'_>) {
        let last = self.runs.len().saturating_sub(1);
        for (i, r) in self.runs.iter_mut().enumerate() {
            let over = match now {
                _ if i < last => true,
                LockNow::HeldBy(t) => r.token != t,
                LockNow::Free => true,
                LockNow::CannotTell => false,
            };
            if over && r.outcome == Outcome::Running {
                r.outcome = Outcome::Abandoned;
            }
        }
    }

    /// The last run that succeeded.
    pub fn last_success(&self) -> Option<&Run> {
        self.runs.iter().rev().find(|r| r.outcome.is_success())
    }

    /// The last run that is over.
    pub fn last_over(&self) -> Option<&Run> {
        self.runs.iter().rev().find(|r| r.outcome.is_over())
    }

    /// The fires skipped in a row at the end of the journal: since the
    /// last run began.
    pub fn skips_in_a_row(&self) -> u64 {
        self.runs
            .last()
            .map_or(self.skips_of_unknown_runs, |r| r.skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_id_is_its_token_as_a_uuid() {
        let t = "5f0c2a6e0d9b4f0e8a1c3b7d9e2f4a6c";
        assert_eq!(
            run_id(t).as_deref(),
            Some("5f0c2a6e-0d9b-4f0e-8a1c-3b7d9e2f4a6c")
        );
        for other in [
            "",
            "abc",
            "5F0C2A6E0D9B4F0E8A1C3B7D9E2F4A6C",
            &format!("{t}00"),
        ] {
            assert_eq!(run_id(other), None, "{other}");
        }
        let ev = Event::start(Some(t), 1, None, "run");
        assert_eq!(ev.rid, run_id(t));
        let line = String::from_utf8(ev.to_line()).unwrap();
        assert!(line.contains("\"rid\":\"5f0c2a6e-0d9b-4f0e-8a1c-3b7d9e2f4a6c\""));
    }

    fn ev(kind: EventKind, token: &str, time: f64) -> Event {
        let mut e = Event::now(kind);
        e.token = Some(token.into());
        e.time = time;
        e
    }

    /// Every reason has one word, read back as itself; a word of a newer
    /// version still reads (as `Unknown`), and its run is still ended.
    #[test]
    fn end_reasons_have_one_word_each_and_unknown_words_still_read() {
        for r in [
            EndReason::MaxTime,
            EndReason::Idle,
            EndReason::LeaseLost,
            EndReason::Stop,
            EndReason::Reap,
        ] {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(serde_json::from_str::<EndReason>(&json).unwrap(), r);
        }
        let h = History::from_lines([
            r#"{"v":1,"time":1,"event":"start","token":"t","pid":1}"#,
            r#"{"v":1,"time":2,"event":"end","token":"t","pid":1,"ended_by":"cosmic-ray","exit":1}"#,
        ]);
        assert_eq!(
            h.runs[0].outcome,
            Outcome::Ended {
                by: EndReason::Unknown,
                exit: Some(1)
            }
        );
    }

    /// What a run used goes out in an `end` line (in base units) and comes
    /// back in its run, from a journal's bytes and from a store's lines; a
    /// value that is not one costs the usage, never the run's end.
    #[test]
    fn usage_survives_a_line_and_bad_values_cost_only_the_usage() {
        let used = Usage {
            user: Duration::from_micros(410_123),
            system: Duration::from_micros(20_005),
            max_rss: 86 << 20,
        };
        let mut start = Event::start(Some("t"), 7, Some("job"), "run");
        start.time = 1.0;
        let mut end = Event::end(
            Some("t"),
            7,
            Some("job"),
            Exit::Code(0),
            None,
            Duration::ZERO,
        )
        .with_usage(used);
        end.time = 2.0;
        let text: String = [&start, &end]
            .iter()
            .map(|e| String::from_utf8(e.to_line()).unwrap())
            .collect();
        assert!(text.contains(r#""cpu_user":0.410123,"cpu_system":0.020005,"max_rss":90177536"#));
        let mut events = Vec::new();
        parse_lines(text.as_bytes(), &mut events);
        let near = |a: Duration, b: Duration| a.abs_diff(b) < Duration::from_micros(1);
        for h in [History::from_lines(text.lines()), History::of(&events)] {
            let got = h.runs[0].usage.expect("the usage is read back");
            assert!(near(got.user, used.user) && near(got.system, used.system));
            assert_eq!(got.max_rss, used.max_rss);
        }
        for bad in [
            r#""cpu_user":-1,"cpu_system":0.1,"max_rss":5"#,
            r#""cpu_user":"x","cpu_system":0.1,"max_rss":5"#,
            r#""cpu_user":0.1,"cpu_system":1e300,"max_rss":5"#,
            r#""cpu_user":0.1,"cpu_system":0.1,"max_rss":-5"#,
            r#""cpu_user":0.1,"cpu_system":0.1,"max_rss":"big""#,
            r#""cpu_user":0.1,"cpu_system":0.1"#,
        ] {
            let h = History::from_lines([
                r#"{"v":1,"time":1,"event":"start","token":"t","pid":1}"#,
                &format!(r#"{{"v":1,"time":2,"event":"end","token":"t","pid":1,"exit":0,{bad}}}"#),
            ]);
            assert_eq!(h.runs[0].outcome, Outcome::Exited(0), "{bad}");
            assert_eq!(h.runs[0].usage, None, "{bad}");
        }
    }

    #[test]
    fn a_line_is_bounded_and_parses_back() {
        let mut e = ev(EventKind::Start, "t", 1.5);
        e.cmd = Some("x\"\\é\n".repeat(2000));
        let line = e.to_line();
        assert!(line.len() <= MAX_LINE, "{}", line.len());
        assert_eq!(line.last(), Some(&b'\n'));
        let back: Event = serde_json::from_slice(&line).unwrap();
        assert_eq!(back.event, EventKind::Start);
        assert!(back.cmd.unwrap().ends_with('…'));
    }

    #[test]
    fn runs_pair_by_token_and_count_their_skips() {
        let mut end = ev(EventKind::End, "a", 10.0);
        end.exit = Some(0);
        end.duration = Some(9.0);
        let mut end_b = ev(EventKind::End, "b", 30.0);
        end_b.signal = Some("KILL".into());
        let events = vec![
            ev(EventKind::Start, "a", 1.0),
            ev(EventKind::Skip, "a", 2.0),
            ev(EventKind::Skip, "a", 3.0),
            end,
            ev(EventKind::Skip, "zz", 11.0),
            ev(EventKind::Start, "b", 20.0),
            end_b,
            ev(EventKind::Start, "c", 40.0),
            ev(EventKind::Abandoned, "c", 50.0),
            ev(EventKind::Start, "d", 60.0),
            ev(EventKind::Skip, "d", 61.0),
        ];
        let h = History::of(&events);
        let outcomes: Vec<_> = h.runs.iter().map(|r| r.outcome.clone()).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Exited(0),
                Outcome::Signaled("KILL".into()),
                Outcome::Abandoned,
                Outcome::Running
            ]
        );
        assert_eq!(h.runs[0].skipped, 2);
        assert_eq!(h.runs[0].duration, Some(9.0));
        assert_eq!(h.runs[1].duration, Some(10.0));
        assert_eq!(h.skips, 4);
        assert_eq!(h.skips_of_unknown_runs, 1);
        assert_eq!(h.skips_in_a_row(), 1);
        assert_eq!(h.last_success().map(|r| r.token.as_str()), Some("a"));
        assert_eq!(h.last_over().map(|r| r.token.as_str()), Some("c"));
    }

    #[test]
    fn a_torn_last_line_and_foreign_lines_are_skipped() {
        let mut bytes = ev(EventKind::Start, "a", 1.0).to_line();
        bytes.extend_from_slice(b"not json\n{\"v\":1}\n");
        bytes.extend_from_slice(&ev(EventKind::Skip, "a", 2.0).to_line());
        let mut torn = ev(EventKind::Skip, "a", 3.0).to_line();
        torn.pop();
        bytes.extend_from_slice(&torn);
        let mut out = Vec::new();
        parse_lines(&bytes, &mut out);
        assert_eq!(out.len(), 2);
    }

    /// An earlier version's journal of this user's is read; one that
    /// others may write to, or that has another name (a hard link could
    /// be any file of this user's), is set aside and said, and the rest is
    /// still read. (Another user's is the attack tests' part.)
    #[test]
    fn an_earlier_journal_is_read_only_when_believed() {
        use std::os::unix::fs::PermissionsExt;
        use std::sync::{Arc, Mutex};
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(dir.path().join("state"), crate::names::StateSource::Flag);
        let lock = LockFile::open(dir.path().join("j.lock")).unwrap();
        let legacy = dir.path().join("j.lock.journal");
        let older = dir.path().join("j.lock.journal.1");
        std::fs::write(&older, ev(EventKind::Start, "a", 1.0).to_line()).unwrap();
        std::fs::write(&legacy, ev(EventKind::Start, "b", 2.0).to_line()).unwrap();
        let said: Arc<Mutex<Vec<SetAside>>> = Arc::default();
        let log = said.clone();
        let journal =
            Journal::of(&lock, &state).on_set_aside(move |s| log.lock().unwrap().push(s.clone()));
        let tokens = || -> Vec<String> {
            let events = journal.events().unwrap();
            events.into_iter().filter_map(|e| e.token).collect()
        };
        for mode in [0o600, 0o644] {
            std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(tokens(), ["a", "b"], "{mode:o}");
        }
        assert!(said.lock().unwrap().is_empty());
        for mode in [0o620, 0o602] {
            std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(tokens(), ["a"], "{mode:o}");
            let s = said.lock().unwrap().pop().unwrap();
            assert_eq!(s.path, legacy);
            assert!(s.why.contains(&format!("mode 0{mode:o}")), "{s}");
        }
        std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&older, dir.path().join("elsewhere")).unwrap();
        assert_eq!(tokens(), ["b"]);
        let s = said.lock().unwrap().pop().unwrap();
        assert_eq!(s.path, older);
        assert!(s.why.contains("2 names (hard links)"), "{s}");
        assert!(said.lock().unwrap().is_empty());
    }
}
