//! The runs of a lock, as its events pair into them: a `start` opens a
//! run by its token, its end (or a release, a stop, a reap, an
//! abandonment) closes it, a skip counts against the run it names
//! ([`History`]). Events are read borrowed from their lines, without an
//! allocation per skip.
//!
//! The last run is the last to end ([`History::by_end`]): the runs of a
//! lock of several slots overlap, and one that started first may end
//! last. Ends are ordered as the journal has them (the order its events
//! were written, whatever their times say); a run whose end the journal
//! lacks ended, for this order, just before the next start when a later
//! start ended it (a lock of one), else when a reader found it over
//! (after every end in the journal, where the `abandoned` event that
//! closes it will be).

use std::borrow::Cow;

use serde::Deserialize;

use super::event::{
    MAX_LINE, lenient_bool, lenient_f64, lenient_u32, lenient_u64, sane_duration, sane_time,
};
use super::scheduled::{ScheduleFields, Scheduled};
use super::{EndReason, Event, EventKind, SetAside, Usage};

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
    /// A lock of several slots, every slot looked at: the tokens of the
    /// live runs that hold its slots (none: every slot is free or stale).
    /// A run of a slot whose token is not among them is over.
    Slots(&'a [&'a str]),
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
    /// The lock's number of slots, when more than one: runs of such a
    /// lock overlap, so a later start does not say this one is over.
    pub slots: Option<u32>,
    /// Where it started in the journal's order: the number of events
    /// read before its start.
    started_at: u64,
    /// Where it ended in the journal's order, once over: the event that
    /// ended it (for a run that a later start ended, that start). None
    /// while it runs, and for a run a reader found over
    /// ([`History::close_over`]), which ended after every event read.
    ended_at: Option<u64>,
}

impl Run {
    /// Where it ended in the journal's order (see [`History::by_end`]):
    /// a run found over by a reader, after every run whose end the
    /// journal has; a run not over, after those.
    fn end_order(&self) -> (bool, u64) {
        match self.ended_at {
            Some(at) => (false, at),
            None if self.outcome.is_over() => (false, u64::MAX),
            None => (true, self.started_at),
        }
    }
}

/// The runs of a lock, and what its journal counts.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct History {
    /// The runs in the order they started (their starts' order in the
    /// journal); [`History::by_end`] gives them in the order they ended.
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
    /// An earlier version's journals beside the lock that were not read
    /// (not believed): the lock is not unknown, its history is refused.
    pub set_aside: Vec<SetAside>,
    /// What the journal says of the lock's schedule: the schedule, the
    /// fires seen, the scheduled fires missed, the fires waiting to start.
    pub scheduled: Scheduled,
    /// The skips since the last start, in the journal's order.
    skips_since_start: u64,
    /// Every event taken in, of any kind: none is a lock the journal
    /// knows nothing of.
    pub events: u64,
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
    #[serde(default, borrow)]
    schedule: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reason: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "lenient_f64")]
    first: Option<f64>,
    #[serde(default, deserialize_with = "lenient_f64")]
    last: Option<f64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    count: Option<u64>,
    #[serde(default, deserialize_with = "lenient_bool")]
    exact: Option<bool>,
    #[serde(default, deserialize_with = "lenient_f64")]
    until: Option<f64>,
    #[serde(default, deserialize_with = "lenient_u32")]
    slots: Option<u32>,
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
            schedule: b(&e.schedule),
            reason: b(&e.reason),
            first: e.first,
            last: e.last,
            count: e.count,
            exact: e.exact,
            until: e.until,
            slots: e.slots,
        }
    }
}

/// Pairs events into runs, one at a time.
#[derive(Default)]
pub(super) struct Pairing {
    h: History,
    /// The run of each token.
    open: std::collections::HashMap<Box<str>, usize>,
    /// Takers whose start is yet to come: a takeover is followed by the
    /// taker's own start.
    takers: Vec<u32>,
    /// The events read so far: where the next is in the journal's order.
    read: u64,
}

impl Pairing {
    fn add(&mut self, ev: &RawEvent<'_>) {
        // Input (see "Reading" in `journal`'s docs): an event without a
        // time is none, and a string is kept to a line's worth.
        if !sane_time(ev.time) {
            return;
        }
        let at = self.read;
        self.read += 1;
        self.h.events += 1;
        let token = ev.token.as_deref().unwrap_or("");
        let owned = |s: &Option<Cow<'_, str>>| s.as_deref().map(|s| capped(s).to_owned());
        self.h.scheduled.add(
            &ScheduleFields {
                time: ev.time,
                event: ev.event,
                pid: ev.pid,
                by: ev.by,
                schedule: ev.schedule.as_deref(),
                reason: ev.reason.as_deref(),
                cmd: ev.cmd.as_deref(),
                host: ev.host.as_deref(),
                first: ev.first,
                last: ev.last,
                count: ev.count,
                exact: ev.exact,
                until: ev.until,
            },
            |s| capped(s).to_owned(),
        );
        match ev.event {
            EventKind::Start => {
                let h = &mut self.h;
                if let Some(i) = self.open.insert(token.into(), h.runs.len())
                    && !h.runs[i].outcome.is_over()
                {
                    // The same token started twice: the first is over.
                    h.runs[i].outcome = Outcome::Abandoned;
                    h.runs[i].ended_at = Some(at);
                }
                h.skips_since_start = 0;
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
                    slots: ev.slots.filter(|&n| n > 1),
                    started_at: at,
                    ended_at: None,
                });
            }
            EventKind::End
            | EventKind::Abandoned
            | EventKind::Release
            | EventKind::Reap
            | EventKind::Stop => self.close(ev, token, at),
            EventKind::Skip => {
                self.h.skips += 1;
                self.h.skips_since_start += 1;
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
            // Of the schedule: not of a run.
            EventKind::Schedule | EventKind::Missed | EventKind::Delay => {}
        }
    }

    /// An event that ends a run (an end, a release, a stop, a reap, an
    /// abandonment), the journal's `at`th: the run of `token`, when open,
    /// is over.
    fn close(&mut self, ev: &RawEvent<'_>, token: &str, at: u64) {
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
        run.ended_at = Some(at);
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
    pub(super) fn add_lines(&mut self, bytes: &[u8]) {
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

    /// The runs paired so far.
    pub(super) fn into_history(self) -> History {
        self.h
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
    /// the lock is not held under its token. A run of a lock of several
    /// slots is left as its events say, unless `now` gives every slot's
    /// live run ([`LockNow::Slots`]). Nothing is written: the
    /// process that next finds the lock stale writes the `abandoned` event;
    /// until then a reader still never shows a finished run as running.
    /// Read the journal before looking at the lock, so that a run that
    /// starts in between is not taken for over.
    ///
    /// Where a run closed here ended, in the order of [`History::by_end`]:
    /// one that a later start ended, just before that start; any other
    /// (found over now), after every run whose end the journal has, as
    /// the `abandoned` event that its finder writes will be.
    pub fn close_over(&mut self, now: LockNow<'_>) {
        let last = self.runs.len().saturating_sub(1);
        for i in 0..self.runs.len() {
            let next_start = self.runs.get(i + 1).map(|n| n.started_at);
            let r = &mut self.runs[i];
            let over = match now {
                // A run of a lock of several slots may outlive later
                // starts: it is over when no slot is held under its token,
                // when every slot was looked at; else when its end, or a
                // takeover of its slot, says so.
                LockNow::Slots(live) if r.slots.is_some() => !live.contains(&r.token.as_str()),
                _ if r.slots.is_some() => false,
                _ if i < last => true,
                LockNow::HeldBy(t) => r.token != t,
                LockNow::Slots(live) => !live.contains(&r.token.as_str()),
                LockNow::Free => true,
                LockNow::CannotTell => false,
            };
            if over && r.outcome == Outcome::Running {
                r.outcome = Outcome::Abandoned;
                if r.slots.is_none() {
                    r.ended_at = next_start;
                }
            }
        }
    }

    /// The runs in the order they ended, the first to end first (so the
    /// last is the last to end: what "the last run" means wherever runs
    /// overlap, as a lock of several slots' do): those over by where their
    /// end is in the journal's order (the order its events were written,
    /// not their rounded times; ties, which only runs found over by a
    /// reader have, by start), then those still running, by start. For a
    /// lock of one slot, whose runs never overlap, this is the order they
    /// started in.
    pub fn by_end(&self) -> Vec<&Run> {
        let mut runs: Vec<&Run> = self.runs.iter().collect();
        // Stable: runs of the same place keep the order they started in.
        runs.sort_by_key(|r| r.end_order());
        runs
    }

    /// The run over that ended last of those that pass `keep`.
    fn last_to_end(&self, keep: impl Fn(&Run) -> bool) -> Option<&Run> {
        self.runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.outcome.is_over() && keep(r))
            .max_by_key(|(i, r)| (r.end_order(), *i))
            .map(|(_, r)| r)
    }

    /// The last run to end that succeeded.
    pub fn last_success(&self) -> Option<&Run> {
        self.last_to_end(|r| r.outcome.is_success())
    }

    /// The last run to end (see [`History::by_end`]): what `check` calls
    /// the last run.
    pub fn last_over(&self) -> Option<&Run> {
        self.last_to_end(|_| true)
    }

    /// The fires skipped in a row at the end of the journal: since the
    /// last run began (its start, in the journal's order), whichever run
    /// each skip found holding the lock (of a lock of several slots, any
    /// of its runs).
    pub fn skips_in_a_row(&self) -> u64 {
        self.skips_since_start
    }

    /// The lock's number of slots as the journal last knew it, for a lock
    /// that has had several (`run --slots N`): the N its last run started
    /// with (1 for a run of a lock of one). None when no run the journal
    /// keeps had several.
    pub fn slots(&self) -> Option<u32> {
        if self.runs.iter().all(|r| r.slots.is_none()) {
            return None;
        }
        Some(self.runs.last()?.slots.unwrap_or(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of a lock of several slots overlap: a later start does not end
    /// one; with every slot looked at, one whose token no slot holds is
    /// over, the others run on; without, none is closed.
    #[test]
    fn slot_runs_are_over_when_no_slot_holds_them() {
        let start = |t: &str, at: f64| {
            let mut e = Event::of(EventKind::Start, t, at);
            e.slots = Some(3);
            e
        };
        let events = vec![start("a", 1.0), start("b", 2.0), start("c", 3.0)];
        let outcomes = |now: LockNow<'_>| {
            let mut h = History::of(&events);
            h.close_over(now);
            h.runs.iter().map(|r| r.outcome.clone()).collect::<Vec<_>>()
        };
        use Outcome::{Abandoned, Running};
        assert_eq!(
            outcomes(LockNow::Slots(&["c", "a"])),
            [Running, Abandoned, Running]
        );
        assert_eq!(
            outcomes(LockNow::Slots(&[])),
            [Abandoned, Abandoned, Abandoned]
        );
        assert_eq!(outcomes(LockNow::HeldBy("c")), [Running, Running, Running]);
        assert_eq!(outcomes(LockNow::Free), [Running, Running, Running]);
    }

    /// The last run is the last to end: of a lock of several slots, A
    /// starts first and ends last (exit 3), B starts later and ends first
    /// (exit 0), its end's time even a little later than A's (another
    /// host's clock): the journal's order decides. A run found over by a
    /// reader ended after every end the journal has; of a lock of one, a
    /// run that a later start ended ended before it.
    #[test]
    fn the_last_run_is_the_last_to_end() {
        let slot = |kind, t: &str, at: f64| {
            let mut e = Event::of(kind, t, at);
            e.slots = Some(2);
            e
        };
        let end = |t: &str, at: f64, code: i32| {
            let mut e = Event::of(EventKind::End, t, at);
            e.exit = Some(code);
            e
        };
        let mut events = vec![
            slot(EventKind::Start, "a", 1.0),
            slot(EventKind::Start, "b", 2.0),
            Event::of(EventKind::Skip, "a", 2.5),
            end("b", 5.1, 0),
            end("a", 5.0, 3),
        ];
        let tokens = |runs: Vec<&Run>| runs.iter().map(|r| r.token.clone()).collect::<Vec<_>>();
        let h = History::of(&events);
        assert_eq!(
            h.last_over().map(|r| r.outcome.clone()),
            Some(Outcome::Exited(3))
        );
        assert_eq!(h.last_success().map(|r| r.token.as_str()), Some("b"));
        assert_eq!(tokens(h.by_end()), ["b", "a"]);
        assert_eq!(h.slots(), Some(2));
        // Skipped since the last start (the skip named the other run).
        assert_eq!(h.skips_in_a_row(), 1);

        // C runs on after D ends; then C is found over: it ended last.
        events.extend([
            slot(EventKind::Start, "c", 6.0),
            slot(EventKind::Start, "d", 7.0),
            end("d", 8.0, 0),
        ]);
        let mut h = History::of(&events);
        assert_eq!(tokens(h.by_end()), ["b", "a", "d", "c"], "running last");
        assert_eq!(h.skips_in_a_row(), 0);
        h.close_over(LockNow::Slots(&[]));
        assert_eq!(h.last_over().map(|r| r.token.as_str()), Some("c"));
        assert_eq!(
            h.last_over().map(|r| r.outcome.clone()),
            Some(Outcome::Abandoned)
        );
        assert_eq!(h.last_success().map(|r| r.token.as_str()), Some("d"));

        // A lock of one: E, killed, ended before F started; G, running
        // when the lock was found free, ended last.
        let one = vec![
            Event::of(EventKind::Start, "e", 1.0),
            Event::of(EventKind::Start, "f", 2.0),
            end("f", 3.0, 0),
            Event::of(EventKind::Start, "g", 4.0),
        ];
        let mut h = History::of(&one);
        h.close_over(LockNow::Free);
        assert_eq!(tokens(h.by_end()), ["e", "f", "g"]);
        assert_eq!(h.last_over().map(|r| r.token.as_str()), Some("g"));
        assert_eq!(h.slots(), None);
    }

    #[test]
    fn runs_pair_by_token_and_count_their_skips() {
        let mut end = Event::of(EventKind::End, "a", 10.0);
        end.exit = Some(0);
        end.duration = Some(9.0);
        let mut end_b = Event::of(EventKind::End, "b", 30.0);
        end_b.signal = Some("KILL".into());
        let events = vec![
            Event::of(EventKind::Start, "a", 1.0),
            Event::of(EventKind::Skip, "a", 2.0),
            Event::of(EventKind::Skip, "a", 3.0),
            end,
            Event::of(EventKind::Skip, "zz", 11.0),
            Event::of(EventKind::Start, "b", 20.0),
            end_b,
            Event::of(EventKind::Start, "c", 40.0),
            Event::of(EventKind::Abandoned, "c", 50.0),
            Event::of(EventKind::Start, "d", 60.0),
            Event::of(EventKind::Skip, "d", 61.0),
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
}
