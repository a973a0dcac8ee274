//! The journal: what happened to a lock, in a JSON Lines file beside it.
//!
//! `DIR/NAME.lock` keeps its journal in `DIR/NAME.lock.journal`, and one
//! older generation in `DIR/NAME.lock.journal.1`. Every run, skip,
//! takeover, stop, reap and release is one [`Event`], one line of JSON
//! (schema [`SCHEMA`], documented in the README), appended with one
//! `write(2)` on a file opened with `O_APPEND`: concurrent writers never tear
//! or interleave a line, and a line is at most [`MAX_LINE`] bytes (the
//! command is cut to fit).
//!
//! **Rotation.** Once the journal passes [`ROTATE_AT`] bytes, the writer
//! that noticed renames it to `.journal.1` (the older generation goes). No
//! event a concurrent writer appends is lost: a writer holds a shared
//! `flock` on the file while it appends, and finds the file still linked
//! once it holds it; the rotator takes the removal guard (one rotator at a
//! time) and an exclusive `flock` on the generation it is about to remove,
//! so that it waits for whoever is still appending to it. A writer that
//! opened that generation before it was removed sees it unlinked and
//! opens the journal again.
//!
//! **Failure.** The journal is a record of runs, never a condition of
//! one: [`Journal::append`] returns the error, and callers say it once
//! and go on.
//!
//! **Reading.** [`Journal::events`] reads both generations, oldest first, in
//! the order the events were appended (not by their rounded times); a last
//! line still being written, and any line that is not an event, are
//! skipped. [`Journal::history`] pairs them into runs.

use std::borrow::Cow;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FlockOperation, Mode as FsMode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::lock::LockFile;

/// The schema version every event carries (`"v"`).
pub const SCHEMA: u32 = 1;

/// The longest line an event takes, newline included: the command is cut
/// to fit.
pub const MAX_LINE: usize = 2048;

/// The size past which the journal is rotated: with the older generation,
/// a journal keeps at most about twice this much (some 30,000 events).
pub const ROTATE_AT: u64 = 4 << 20;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Kind {
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

impl Kind {
    /// The word the journal uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Start => "start",
            Kind::End => "end",
            Kind::Skip => "skip",
            Kind::Takeover => "takeover",
            Kind::Stop => "stop",
            Kind::Reap => "reap",
            Kind::Release => "release",
            Kind::Abandoned => "abandoned",
        }
    }
}

/// One line of the journal. Fields that do not apply are left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The schema version ([`SCHEMA`]).
    pub v: u32,
    /// When, in Unix seconds (to the millisecond).
    pub time: f64,
    /// What happened.
    pub event: Kind,
    /// The run's process: its wrapper or owner (`start`, `end`,
    /// `abandoned`, `release`, `stop`, `reap`, `takeover`: the stale run's);
    /// for a `skip`, the live run's holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The run's token: the run this event is about (for a `skip`, the live
    /// run's; for a `takeover`, the stale run's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
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
    /// The command's exit code (`end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    /// The signal that killed the command (`end`), or that `stop` sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// How long the run lasted, seconds (`end`, `abandoned`: until it was
    /// found; `release`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    /// Why onlyone ended the run: `max-time` or `idle` (`end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
    /// Who did it: the skipper, the taker, the stopper, the reaper, the
    /// process that found a run abandoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<u32>,
    /// Why (a takeover's or an abandonment's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Event {
    /// An event of `kind`, now, on this host, by this user.
    pub fn now(kind: Kind) -> Event {
        Event {
            v: SCHEMA,
            time: unix_now_ms(),
            event: kind,
            pid: None,
            token: None,
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
        }
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
    lock: LockFile,
    name: OsString,
    older: OsString,
}

impl LockFile {
    /// This lock's journal.
    pub fn journal(&self) -> Journal {
        let mut name = self.file_name().to_owned();
        name.push(".journal");
        let mut older = name.clone();
        older.push(".1");
        Journal {
            lock: self.clone(),
            name,
            older,
        }
    }

    /// The runs in this lock's journal (see [`Journal::history`]).
    pub fn history(&self) -> io::Result<History> {
        self.journal().history()
    }
}

impl Journal {
    /// The journal's path.
    pub fn path(&self) -> std::path::PathBuf {
        self.lock.dir().join(&self.name)
    }

    /// Appends one event: one `write(2)` of one line (see the module docs).
    pub fn append(&self, ev: &Event) -> io::Result<()> {
        let line = ev.to_line();
        let dir = self.lock.dir_fd();
        // A writer that opened a generation just removed by a rotation
        // opens the journal again; a rotation is rare, so a few tries do.
        for _ in 0..8 {
            let fd = rustix::fs::openat(
                dir,
                &self.name,
                OFlags::WRONLY
                    | OFlags::APPEND
                    | OFlags::CREATE
                    | OFlags::NOFOLLOW
                    | OFlags::NOCTTY
                    | OFlags::NONBLOCK
                    | OFlags::CLOEXEC,
                FsMode::from_raw_mode(0o644),
            )?;
            rustix::fs::flock(&fd, FlockOperation::LockShared)?;
            let st = rustix::fs::fstat(&fd)?;
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(io::Error::other("the journal is not a regular file"));
            }
            if st.st_nlink == 0 {
                continue;
            }
            if st.st_size == 0 && st.st_mode & 0o777 != 0o644 {
                // Readable by other users, as the lock file is, whatever
                // the umask.
                let _ = rustix::fs::fchmod(&fd, FsMode::from_raw_mode(0o644));
            }
            write_all(fd.as_fd(), &line)?;
            drop(fd);
            if st.st_size as u64 + line.len() as u64 > ROTATE_AT {
                self.rotate()?;
            }
            return Ok(());
        }
        Err(io::Error::other("the journal kept being rotated away"))
    }

    /// Renames the journal to its older generation, if it is still past
    /// [`ROTATE_AT`]: one rotator at a time (the removal guard), after
    /// whoever is still appending to the generation it removes.
    fn rotate(&self) -> io::Result<()> {
        let _guard = self.lock.hold_removal_guard()?;
        let dir = self.lock.dir_fd();
        match rustix::fs::statat(dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if st.st_size as u64 > ROTATE_AT => {}
            Ok(_) | Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let old: Option<OwnedFd> = match rustix::fs::openat(
            dir,
            &self.older,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            FsMode::empty(),
        ) {
            Ok(fd) => {
                rustix::fs::flock(&fd, FlockOperation::LockExclusive)?;
                Some(fd)
            }
            Err(Errno::NOENT) => None,
            Err(e) => return Err(e.into()),
        };
        rustix::fs::renameat(dir, &self.name, dir, &self.older)?;
        drop(old);
        Ok(())
    }

    /// Every event, oldest first: the older generation, then the current
    /// one, in the order they were appended.
    pub fn events(&self) -> io::Result<Vec<Event>> {
        let mut out = Vec::new();
        for name in [&self.older, &self.name] {
            if let Some(bytes) = self.read(name)? {
                parse_lines(&bytes, &mut out);
            }
        }
        Ok(out)
    }

    /// The runs (see [`History`]): both generations read and paired
    /// line by line, without an [`Event`] for each.
    pub fn history(&self) -> io::Result<History> {
        let mut p = Pairing::default();
        for name in [&self.older, &self.name] {
            self.each_chunk(name, |lines| p.add_lines(lines))?;
        }
        Ok(p.h)
    }

    /// Opens a generation for reading: `None` when it does not exist.
    fn open(&self, name: &OsString) -> io::Result<Option<std::fs::File>> {
        let fd = match rustix::fs::openat(
            self.lock.dir_fd(),
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            FsMode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let st = rustix::fs::fstat(&fd)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(io::Error::other("the journal is not a regular file"));
        }
        Ok(Some(std::fs::File::from(fd)))
    }

    /// Reads a generation in chunks of [`CHUNK`], handing each run of
    /// complete lines to `f`: a journal of many megabytes costs a buffer
    /// of one (page faults are most of what reading costs otherwise).
    fn each_chunk(&self, name: &OsString, mut f: impl FnMut(&[u8])) -> io::Result<()> {
        let Some(mut file) = self.open(name)? else {
            return Ok(());
        };
        let mut buf = vec![0u8; CHUNK];
        let mut filled = 0;
        loop {
            let n = match io::Read::read(&mut file, &mut buf[filled..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            filled += n;
            let end = buf[..filled]
                .iter()
                .rposition(|&b| b == b'\n')
                .map(|i| i + 1);
            match end {
                Some(end) => {
                    f(&buf[..end]);
                    buf.copy_within(end..filled, 0);
                    filled -= end;
                }
                // A full buffer without a newline is no event: dropped.
                None if filled == buf.len() => filled = 0,
                None => {}
            }
            if n == 0 {
                return Ok(());
            }
        }
    }

    fn read(&self, name: &OsString) -> io::Result<Option<Vec<u8>>> {
        let Some(mut file) = self.open(name)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut file, &mut bytes)?;
        Ok(Some(bytes))
    }
}

/// How much of a journal is read at a time.
const CHUNK: usize = 256 * 1024;

/// Writes all of `bytes` with one `write(2)` when it can (a regular file
/// takes a short line whole).
fn write_all(fd: std::os::fd::BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
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

/// The events in `bytes`, appended to `out`: complete lines that parse.
fn parse_lines(bytes: &[u8], out: &mut Vec<Event>) {
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(i) => &bytes[..=i],
        None => return,
    };
    for line in complete.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        if let Ok(ev) = serde_json::from_slice::<Event>(line) {
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
    /// onlyone ended it (`max-time`, `idle`, `stop`, `reap`), with the
    /// command's exit when it is known.
    Ended {
        /// Why: `max-time`, `idle`, `stop` or `reap`.
        by: String,
        /// The command's exit code, if it exited rather than died.
        exit: Option<i32>,
    },
    /// Its wrapper died without a word; found stale later.
    Abandoned,
    /// A script's hold, released.
    Released,
}

impl Outcome {
    /// True for a run that succeeded: exit 0, or a released hold.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Exited(0) | Outcome::Released)
    }

    /// True once the run is over.
    pub fn is_over(&self) -> bool {
        !matches!(self, Outcome::Running)
    }

    /// A word or two for people: `exit 0`, `signal KILL`, `ended (max-time)`.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Running => "running".into(),
            Outcome::Exited(c) => format!("exit {c}"),
            Outcome::Signaled(s) => format!("signal {s}"),
            Outcome::Ended { by, .. } => format!("ended ({by})"),
            Outcome::Abandoned => "abandoned".into(),
            Outcome::Released => "released".into(),
        }
    }
}

/// One run, as the journal tells it.
#[derive(Debug, Clone, PartialEq)]
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
}

/// The runs of a lock, and what its journal counts.
#[derive(Debug, Clone, Default, PartialEq)]
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
struct Line<'a> {
    time: f64,
    event: Kind,
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
    #[serde(default, borrow)]
    ended_by: Option<Cow<'a, str>>,
    #[serde(default)]
    by: Option<u32>,
}

impl<'a> From<&'a Event> for Line<'a> {
    fn from(e: &'a Event) -> Line<'a> {
        let b = |s: &'a Option<String>| s.as_deref().map(Cow::Borrowed);
        Line {
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
            ended_by: b(&e.ended_by),
            by: e.by,
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
    fn add(&mut self, ev: &Line<'_>) {
        let token = ev.token.as_deref().unwrap_or("");
        let owned = |s: &Option<Cow<'_, str>>| s.as_deref().map(str::to_owned);
        match ev.event {
            Kind::Start => {
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
                    token: token.to_owned(),
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
                });
            }
            Kind::End | Kind::Abandoned | Kind::Release | Kind::Reap | Kind::Stop => {
                let Some(i) = self.run_of(token) else {
                    return;
                };
                let run = &mut self.h.runs[i];
                // A stop ends the run unless its wrapper says how (its
                // `end` follows); nothing else reopens a run.
                let stopped = matches!(&run.outcome, Outcome::Ended { by, .. } if by == "stop");
                if run.outcome.is_over() && !(stopped && ev.event == Kind::End) {
                    return;
                }
                run.outcome = match ev.event {
                    Kind::Abandoned => Outcome::Abandoned,
                    Kind::Release => Outcome::Released,
                    Kind::Reap | Kind::Stop => Outcome::Ended {
                        by: ev.event.as_str().to_owned(),
                        exit: None,
                    },
                    _ => match (&ev.ended_by, ev.exit, &ev.signal) {
                        (Some(by), exit, _) => Outcome::Ended {
                            by: by.to_string(),
                            exit,
                        },
                        (None, Some(c), _) => Outcome::Exited(c),
                        (None, None, Some(s)) => Outcome::Signaled(s.to_string()),
                        (None, None, None) => Outcome::Abandoned,
                    },
                };
                run.end = Some(ev.time);
                run.duration = ev.duration.or(Some((ev.time - run.start).max(0.0)));
            }
            Kind::Skip => {
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
            Kind::Takeover => {
                self.h.takeovers += 1;
                self.takers.extend(ev.by);
            }
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
                if let Ok(ev) = serde_json::from_str::<Line<'_>>(line) {
                    self.add(&ev);
                }
            }
            return;
        }
        for line in complete.split(|&b| b == b'\n') {
            if let Ok(ev) = serde_json::from_slice::<Line<'_>>(line) {
                self.add(&ev);
            }
        }
    }
}

impl History {
    /// Pairs events into runs: a `start` opens one, by its token; its
    /// `end`, `abandoned` or `release` (or a `stop` or `reap`) closes it; a
    /// `skip` counts against the run whose token it names.
    pub fn of(events: &[Event]) -> History {
        let mut p = Pairing::default();
        for ev in events {
            p.add(&Line::from(ev));
        }
        p.h
    }

    /// Pairs journal lines (a store that keeps them elsewhere than in a
    /// file), in the order they were appended; a line that is not an event
    /// is skipped.
    pub fn from_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> History {
        let mut p = Pairing::default();
        for line in lines {
            if let Ok(ev) = serde_json::from_str::<Line<'_>>(line) {
                p.add(&ev);
            }
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

    fn ev(kind: Kind, token: &str, time: f64) -> Event {
        let mut e = Event::now(kind);
        e.token = Some(token.into());
        e.time = time;
        e
    }

    #[test]
    fn a_line_is_bounded_and_parses_back() {
        let mut e = ev(Kind::Start, "t", 1.5);
        e.cmd = Some("x\"\\é\n".repeat(2000));
        let line = e.to_line();
        assert!(line.len() <= MAX_LINE, "{}", line.len());
        assert_eq!(line.last(), Some(&b'\n'));
        let back: Event = serde_json::from_slice(&line).unwrap();
        assert_eq!(back.event, Kind::Start);
        assert!(back.cmd.unwrap().ends_with('…'));
    }

    #[test]
    fn runs_pair_by_token_and_count_their_skips() {
        let mut end = ev(Kind::End, "a", 10.0);
        end.exit = Some(0);
        end.duration = Some(9.0);
        let mut end_b = ev(Kind::End, "b", 30.0);
        end_b.signal = Some("KILL".into());
        let events = vec![
            ev(Kind::Start, "a", 1.0),
            ev(Kind::Skip, "a", 2.0),
            ev(Kind::Skip, "a", 3.0),
            end,
            ev(Kind::Skip, "zz", 11.0),
            ev(Kind::Start, "b", 20.0),
            end_b,
            ev(Kind::Start, "c", 40.0),
            ev(Kind::Abandoned, "c", 50.0),
            ev(Kind::Start, "d", 60.0),
            ev(Kind::Skip, "d", 61.0),
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
        let mut bytes = ev(Kind::Start, "a", 1.0).to_line();
        bytes.extend_from_slice(b"not json\n{\"v\":1}\n");
        bytes.extend_from_slice(&ev(Kind::Skip, "a", 2.0).to_line());
        let mut torn = ev(Kind::Skip, "a", 3.0).to_line();
        torn.pop();
        bytes.extend_from_slice(&torn);
        let mut out = Vec::new();
        parse_lines(&bytes, &mut out);
        assert_eq!(out.len(), 2);
    }
}
