//! What the commands that watch a lock show of its schedule: `check`'s
//! missed fire and unreadable schedule ([`graded`]), `metrics`' fires
//! missed, live and recorded, and next fire ([`metrics`]), `status`'s
//! waiting fire and next fire ([`annotate`]), `history`'s rows of missed
//! fires ([`MissedRow`]). The schedule is the one given (`--schedule`),
//! else the one the journal keeps. `check` and `metrics` count the fires
//! missed the same way ([`overdue`]).

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use onlyone::journal::{History, MissedFires};
use onlyone::schedule::{Missed, Schedule};

use super::super::exit::CheckState;
use super::super::format::{now, took};
use super::super::view::{LockStatus, ScheduleStatus, Seen, Starting};
use super::fire::{fires_words, known, late_or_default, missed_words, recorded_spec};

/// The scheduled fires of `s` passed `late` ago or more (or its default)
/// with no fire seen since the last one: none while a run holds the lock
/// (its scheduled times are its fires' to see: the skips), nor for the
/// fire a process that came and still waits before the lock (its
/// `--jitter` or `--spread`) has served. `Err` with why when `--late` was
/// given and no schedule is known, or the kept one cannot be read.
pub(in crate::cli) fn overdue(
    s: &Seen,
    given: Option<&Schedule>,
    late: Option<Duration>,
) -> Result<Option<(Schedule, Missed)>, String> {
    let schedule = match known(given, &s.history) {
        Ok(Some(schedule)) => schedule,
        Ok(None) if late.is_some() => {
            return Err(
                "--late needs a schedule, and the journal keeps none: give --schedule SPEC".into(),
            );
        }
        Ok(None) => return Ok(None),
        Err(e) => return Err(e),
    };
    if s.running() {
        return Ok(None);
    }
    let now = now();
    let scheduled = &s.history.scheduled;
    let Some(last_seen) = scheduled.last_seen() else {
        return Ok(None);
    };
    let last_seen = scheduled
        .waiting_since(now)
        .map_or(last_seen, |w| w.max(last_seen));
    let late = late_or_default(late, &schedule, now as i64);
    Ok(
        onlyone::schedule::missed(&schedule, last_seen.floor() as i64, now as i64, late)
            .map(|m| (schedule, m)),
    )
}

/// `check`'s verdicts on the schedule of `s`: UNKNOWN while the last
/// fire that recorded a schedule could not read it (a `TZ` that names no
/// zone: no fire it misses is recorded), naming the zone and the fix;
/// CRITICAL for the fires [`overdue`] finds, UNKNOWN when it cannot tell.
pub(in crate::cli) fn graded(
    s: &Seen,
    given: Option<&Schedule>,
    late: Option<Duration>,
) -> Vec<(CheckState, String)> {
    let mut out = Vec::new();
    if let Some(u) = &s.history.scheduled.unreadable {
        out.push((
            CheckState::Unknown,
            format!(
                "a fire {} ago could not read its schedule `{}`: {}; until a fire reads it, no \
                 fire it misses is recorded",
                took(now() - u.time),
                u.spec,
                u.reason
            ),
        ));
    }
    match overdue(s, given, late) {
        Ok(None) => {}
        Ok(Some((schedule, m))) => {
            let now = now();
            let last_run = match s.history.runs.last() {
                Some(r) => format!("last run {} ago", took(now - r.start)),
                None => "no run recorded".to_owned(),
            };
            out.push((
                CheckState::Critical,
                format!("missed {} ({last_run})", missed_words(&schedule, &m, now)),
            ));
        }
        Err(e) => out.push((CheckState::Unknown, e)),
    }
    out
}

/// The schedule of a watched lock, when one is known and can be read.
fn schedule_of(h: &History, given: Option<&Schedule>) -> Option<Schedule> {
    known(given, h).ok().flatten()
}

/// One of the families `metrics` adds for locks with a schedule: its
/// name, type, help, and each lock's value (none: no sample).
type Family<'a> = (&'a str, &'a str, &'a str, Vec<Option<String>>);

/// The families `metrics` adds for locks with a schedule (or fires
/// recorded missed): `onlyone_missed_fires` and
/// `onlyone_oldest_missed_fire_timestamp_seconds` (what `check` knows,
/// live: [`overdue`]), `onlyone_missed_total` (the fires that later fires
/// recorded missed) and `onlyone_next_fire_timestamp_seconds`. Nothing
/// when no lock has either.
pub(in crate::cli) fn metrics(
    seen: &[Seen],
    given: Option<&Schedule>,
    late: Option<Duration>,
) -> String {
    let now = now() as i64;
    let with: Vec<(&Seen, Option<Schedule>)> = seen
        .iter()
        .map(|s| (s, schedule_of(&s.history, given)))
        .filter(|(s, schedule)| schedule.is_some() || s.history.scheduled.missed_total > 0)
        .collect();
    let mut out = String::new();
    if with.is_empty() {
        return out;
    }
    let overdue: Vec<Option<Option<Missed>>> = with
        .iter()
        .map(|(s, schedule)| {
            schedule.as_ref()?;
            overdue(s, given, late).ok().map(|o| o.map(|(_, m)| m))
        })
        .collect();
    let families: [Family<'_>; 4] = [
        (
            "onlyone_missed_fires",
            "gauge",
            "Scheduled fires that passed --late ago or more (default 5 minutes, at most half the period) with no fire since the last one, as check counts them, now: 0 when none, or while a run holds the lock.",
            overdue
                .iter()
                .map(|o| o.map(|m| m.map_or(0, |m| m.count).to_string()))
                .collect(),
        ),
        (
            "onlyone_oldest_missed_fire_timestamp_seconds",
            "gauge",
            "When the first of the scheduled fires that onlyone_missed_fires counts was due, in Unix seconds (no sample when none is missed).",
            overdue
                .iter()
                .map(|o| o.flatten().map(|m| m.first.to_string()))
                .collect(),
        ),
        (
            "onlyone_missed_total",
            "counter",
            "Scheduled fires that passed with no fire seen, as the later fires that found them recorded them in the journal.",
            with.iter()
                .map(|(s, _)| Some(s.history.scheduled.missed_total.to_string()))
                .collect(),
        ),
        (
            "onlyone_next_fire_timestamp_seconds",
            "gauge",
            "When the lock's schedule next fires, in Unix seconds.",
            with.iter()
                .map(|(_, schedule)| {
                    schedule
                        .as_ref()
                        .and_then(|x| x.next_fire(now))
                        .map(|t| t.to_string())
                })
                .collect(),
        ),
    ];
    for (name, kind, help, values) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for ((s, _), v) in with.iter().zip(values) {
            if let Some(v) = v {
                let _ = writeln!(out, "{name}{{lock=\"{}\"}} {v}", prometheus_label(&s.name));
            }
        }
    }
    out
}

/// A label value in the Prometheus text format: `\`, `"` and newlines
/// escaped.
fn prometheus_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Adds to each lock's status the fire waiting to take it (a `delay` in
/// its journal whose process lives and whose wait is not over) and its
/// schedule.
pub(in crate::cli) fn annotate(locks: &mut [LockStatus], given: Option<&Schedule>) {
    let now = now();
    for l in locks {
        let Some(h) = &l.history else { continue };
        l.starting = h
            .scheduled
            .delays
            .iter()
            .rev()
            .find(|d| d.until > now && d.lives())
            .map(|d| Starting {
                pid: d.pid,
                command: d.cmd.clone(),
                at_unix: d.until,
                in_seconds: ((d.until - now) * 1000.0).round() / 1000.0,
            });
        l.schedule = schedule_of(h, given).map(|s| ScheduleStatus {
            spec: recorded_spec(&s),
            next_fire_unix: s.next_fire(now as i64),
            missed_total: h.scheduled.missed_total,
        });
    }
}

/// What the table adds to a lock's command: `  [starting in 12s, pid
/// 4242]` while a fire waits, else `  [next fire in 40m]` for a lock with
/// a schedule.
pub(in crate::cli) fn starting_cell(l: &LockStatus) -> String {
    if let Some(s) = &l.starting {
        return format!(
            "  [starting in {}, pid {}]",
            took(s.in_seconds.ceil()),
            s.pid
        );
    }
    match l.schedule.as_ref().and_then(|s| s.next_fire_unix) {
        Some(t) => format!("  [next fire in {}]", took((t as f64 - now()).ceil())),
        None => String::new(),
    }
}

/// Scheduled fires recorded missed, as `history --json` prints them: one
/// object a `missed` event, among the runs by time (its last fire's).
#[derive(Debug, Serialize)]
pub struct MissedRow<'a> {
    v: u32,
    lock: &'a str,
    outcome: &'static str,
    result: &'static str,
    start_unix: f64,
    start: String,
    missed_count: u64,
    missed_exact: bool,
    missed_first_unix: f64,
    missed_last_unix: f64,
    recorded_unix: f64,
    schedule: Option<&'a str>,
}

impl<'a> MissedRow<'a> {
    /// The row of the fires `m` of the lock `lock`.
    pub fn of(lock: &'a str, m: &'a MissedFires) -> MissedRow<'a> {
        MissedRow {
            v: 1,
            lock,
            outcome: "missed",
            result: "missed",
            start_unix: m.last,
            start: onlyone::command::format_unix_time(m.last as u64),
            missed_count: m.count,
            missed_exact: m.exact,
            missed_first_unix: m.first,
            missed_last_unix: m.last,
            recorded_unix: m.time,
            schedule: m.schedule.as_deref(),
        }
    }
}

/// The fires recorded missed since `since` (Unix seconds), newest first.
pub(in crate::cli) fn missed_since(h: &History, since: Option<f64>) -> Vec<&MissedFires> {
    h.scheduled
        .missed
        .iter()
        .rev()
        .filter(|m| since.is_none_or(|s| m.last >= s))
        .collect()
}

/// The table's cells of missed fires (those of `history`'s columns:
/// when, duration, CPU, peak, outcome, pid, host, skipped).
pub(in crate::cli) fn missed_cells(m: &MissedFires) -> [String; 8] {
    let schedule = m.schedule.as_deref().and_then(|s| Schedule::parse(s).ok());
    let what = match &schedule {
        Some(s) => fires_words(s, m.first as i64, m.last as i64, (m.count, m.exact), now()),
        None => format!("{} fire(s)", m.count),
    };
    let dash = || "-".to_owned();
    [
        super::super::format::ago(m.last),
        dash(),
        dash(),
        dash(),
        onlyone::text::for_terminal(&format!("missed {what}")).into_owned(),
        dash(),
        dash(),
        dash(),
    ]
}

/// Rows of runs (newest first, in the order given) with rows of missed
/// fires (newest first) put among them by time: a missed row goes before
/// the first run that started before it. Without missed rows, the runs'
/// rows as they are.
pub(in crate::cli) fn interleave<T>(
    runs: impl IntoIterator<Item = (f64, T)>,
    missed: impl IntoIterator<Item = (f64, T)>,
) -> Vec<T> {
    let mut missed = missed.into_iter().peekable();
    let mut out = Vec::new();
    for (t, row) in runs {
        while let Some((_, m)) = missed.next_if(|(mt, _)| *mt >= t) {
            out.push(m);
        }
        out.push(row);
    }
    out.extend(missed.map(|(_, m)| m));
    out
}

/// The fires recorded missed that `history` shows beside `shown` runs
/// (newest first): those since `since`, and when `limit` cut the runs,
/// none older than the oldest run shown.
pub(in crate::cli) fn missed_shown<'h>(
    h: &'h History,
    since: Option<f64>,
    shown: &[&onlyone::journal::Run],
    limit: Option<usize>,
) -> Vec<&'h MissedFires> {
    let cut = limit.is_some_and(|n| shown.len() >= n);
    // The runs are shown by their ends: the oldest start of them.
    let oldest = shown
        .iter()
        .map(|r| r.start)
        .min_by(f64::total_cmp)
        .filter(|_| cut);
    missed_since(h, since)
        .into_iter()
        .filter(|m| oldest.is_none_or(|o| m.last >= o))
        .collect()
}
