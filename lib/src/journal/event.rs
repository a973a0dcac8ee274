//! The journal's events: what happened to a lock ([`EventKind`]), as one
//! [`Event`] a line of JSON (schema [`SCHEMA`], documented in
//! doc/json.md), built by its constructors and written whole within
//! [`MAX_LINE`] bytes ([`Event::to_line`]); how a run's command ended
//! ([`Exit`]), what it used ([`Usage`]) and why onlyone ended it
//! ([`EndReason`]). What is read back is input: a time or a duration
//! that is not one is dropped ([`sane_time`], [`sane_duration`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The schema version every event carries (`"v"`).
pub const SCHEMA: u32 = 1;

/// The longest line an event takes, newline included: the command is cut
/// to fit.
pub(crate) const MAX_LINE: usize = 2048;

/// The latest time an event may carry: the end of the year 9999.
const MAX_TIME: f64 = 253_402_300_799.0;

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
    /// The schedule the lock's fires were given (`schedule`), kept so that
    /// a reader knows it without being told: written by a fire when the
    /// journal has none, or another.
    Schedule,
    /// A fire found scheduled fires passed with no fire seen for them:
    /// the first and last (`first`, `last`) and how many (`count`).
    Missed,
    /// A fire waits (`pid`) before it takes the lock, until `until`.
    Delay,
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
            EventKind::Schedule => "schedule",
            EventKind::Missed => "missed",
            EventKind::Delay => "delay",
        }
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
    pub(super) fn read(
        user: Option<f64>,
        system: Option<f64>,
        max_rss: Option<u64>,
    ) -> Option<Usage> {
        let secs = |d: Option<f64>| sane_duration(d).map(Duration::from_secs_f64);
        Some(Usage {
            user: secs(user)?,
            system: secs(system)?,
            max_rss: max_rss?,
        })
    }
}

/// Why onlyone ended a run: an `end` event's `ended_by`, and the word a
/// [`Outcome::Ended`](super::Outcome::Ended) run gives (`stop` and `reap`
/// come from the events of those names). One word per reason, here only:
/// both places (the lock directory and the store) write and read these.
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
/// digits), for a token as [`crate::lock::new_token`] makes them; `None` for
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
    /// The run's command line (cut to fit a line of 2,048 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<String>,
    /// `run`, `script` or `lock` (`start`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The lock's number of slots, when more than one (`start`): its runs
    /// may overlap.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_u32"
    )]
    pub slots: Option<u32>,
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
    /// Why (a takeover's or an abandonment's reason; a skip's, when it is
    /// more than the lock held; a `schedule` a fire could not read: why).
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
    /// The schedule, as its canonical spec (`schedule`, `missed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The first fire missed, Unix seconds (`missed`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_f64"
    )]
    pub first: Option<f64>,
    /// The last fire missed, Unix seconds (`missed`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_f64"
    )]
    pub last: Option<f64>,
    /// How many fires were missed (`missed`): at least that many when
    /// `exact` is false.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_u64"
    )]
    pub count: Option<u64>,
    /// False when the fires were too many to count (`missed`): `count` is
    /// then a lower bound. Left out when they were all counted.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_bool"
    )]
    pub exact: Option<bool>,
    /// When a fire's wait before the lock ends, Unix seconds (`delay`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_f64"
    )]
    pub until: Option<f64>,
}

/// A count read back, as [`lenient_f64`]: `None` unless it is a number
/// that fits in 32 bits.
pub(super) fn lenient_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Ok(Option::<serde_json::Value>::deserialize(d)?
        .and_then(|v| v.as_u64())
        .and_then(|n| u32::try_from(n).ok()))
}

/// A boolean read back, as [`lenient_f64`]: `None` unless it is one.
pub(super) fn lenient_bool<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<bool>, D::Error> {
    Ok(Option::<serde_json::Value>::deserialize(d)?.and_then(|v| v.as_bool()))
}

/// A number read back: `None` for anything else, so that a bad value in a
/// field added later costs that field, never the event (and its run's end).
pub(super) fn lenient_f64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Option::<serde_json::Value>::deserialize(d)?.and_then(|v| v.as_f64()))
}

/// A whole number read back, as [`lenient_f64`]: `None` unless it is one.
pub(super) fn lenient_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
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
            slots: None,
            exit: None,
            signal: None,
            duration: None,
            ended_by: None,
            by: None,
            reason: None,
            cpu_user: None,
            cpu_system: None,
            max_rss: None,
            schedule: None,
            first: None,
            last: None,
            count: None,
            exact: None,
            until: None,
        }
    }

    /// An event of a run's token at a chosen time, for the tests.
    #[cfg(test)]
    pub(crate) fn of(kind: EventKind, token: &str, time: f64) -> Event {
        let mut e = Event::now(kind);
        e.token = Some(token.into());
        e.time = time;
        e
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

    /// The lock's fires are given `schedule` (its canonical spec).
    pub fn schedule(schedule: &str) -> Event {
        let mut ev = Event::now(EventKind::Schedule).by_me();
        ev.schedule = Some(schedule.to_owned());
        ev
    }

    /// A fire was given `schedule` and could not read it where it ran
    /// (`reason`: why, and the fix); it ran without it.
    pub fn unreadable_schedule(schedule: &str, reason: &str) -> Event {
        let mut ev = Event::schedule(schedule);
        ev.reason = Some(reason.to_owned());
        ev
    }

    /// A fire of `schedule` found scheduled fires passed unseen: `missed`.
    pub fn missed(schedule: &str, missed: &crate::schedule::Missed) -> Event {
        let mut ev = Event::now(EventKind::Missed).by_me();
        ev.schedule = Some(schedule.to_owned());
        ev.first = Some(missed.first as f64);
        ev.last = Some(missed.last as f64);
        ev.count = Some(missed.count);
        ev.exact = (!missed.exact).then_some(false);
        ev
    }

    /// The fire `pid` (this process), of the command `cmd`, waits before
    /// it takes the lock, until `until` (Unix seconds).
    pub fn delay(pid: u32, cmd: Option<&str>, until: f64) -> Event {
        let mut ev = Event::about(EventKind::Delay, None, Some(pid), cmd);
        ev.until = Some(until);
        ev
    }

    fn by_me(mut self) -> Event {
        self.by = Some(std::process::id());
        self
    }

    /// The event as one line, newline included, at most 2,048
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
            if !(cut(&mut ev.cmd)
                || cut(&mut ev.reason)
                || cut(&mut ev.host)
                || cut(&mut ev.schedule))
            {
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

/// True for a time an event can carry: Unix seconds from 1970 to the end
/// of the year 9999.
pub(super) fn sane_time(t: f64) -> bool {
    (0.0..=MAX_TIME).contains(&t)
}

/// A duration as read back: `None` unless it is one (not negative, not
/// past [`MAX_TIME`] seconds, a number).
pub(super) fn sane_duration(d: Option<f64>) -> Option<f64> {
    d.filter(|d| (0.0..=MAX_TIME).contains(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{History, Outcome};

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
}
