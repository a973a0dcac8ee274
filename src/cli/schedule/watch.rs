//! What the commands that watch a lock show of its schedule: `check`'s
//! missed fire ([`graded`]), `metrics`' missed slots and next fire
//! ([`metrics`]), `status`'s waiting fire and next fire ([`annotate`]),
//! `history`'s rows of missed slots ([`MissedRow`]). The schedule is the
//! one given (`--schedule`), else the one the journal keeps.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use onlyone::journal::{History, MissedSlots};
use onlyone::schedule::Schedule;

use super::super::exit::CheckState;
use super::super::format::{now, took};
use super::super::view::{LockStatus, ScheduleStatus, Seen, Starting};
use super::fire::{known, late_or_default, missed_words, recorded_spec, slots_words};

/// `check`'s verdict on the schedule of `s`: CRITICAL when a slot passed
/// (`late` ago or more) with no fire seen since the last one; UNKNOWN when
/// `--late` was given and no schedule is known, or the kept one cannot
/// be read. `None` when nothing is wrong, no schedule is known, or a run
/// holds the lock (its slots are its fires' to see: the skips).
pub(in crate::cli) fn graded(
    s: &Seen,
    given: Option<&Schedule>,
    late: Option<Duration>,
) -> Option<(CheckState, String)> {
    let schedule = match known(given, &s.history) {
        Ok(Some(schedule)) => schedule,
        Ok(None) if late.is_some() => {
            return Some((
                CheckState::Unknown,
                "--late needs a schedule, and the journal keeps none: give --schedule SPEC".into(),
            ));
        }
        Ok(None) => return None,
        Err(e) => return Some((CheckState::Unknown, e)),
    };
    if s.running() {
        return None;
    }
    let now = now();
    let last_seen = s.history.scheduled.last_seen()?;
    let late = late_or_default(late, &schedule, now as i64);
    let m = onlyone::schedule::missed(&schedule, last_seen.floor() as i64, now as i64, late)?;
    let last_run = match s.history.runs.last() {
        Some(r) => format!("last run {} ago", took(now - r.start)),
        None => "no run recorded".to_owned(),
    };
    Some((
        CheckState::Critical,
        format!("missed {} ({last_run})", missed_words(&schedule, &m, now)),
    ))
}

/// The schedule of a watched lock, when one is known and can be read.
fn schedule_of(h: &History, given: Option<&Schedule>) -> Option<Schedule> {
    known(given, h).ok().flatten()
}

/// The families `metrics` adds for locks with a schedule (or slots
/// recorded missed): `onlyone_missed_total` (the slots recorded missed)
/// and `onlyone_next_fire_timestamp_seconds`. Nothing when no lock has
/// either.
pub(in crate::cli) fn metrics(seen: &[Seen], given: Option<&Schedule>) -> String {
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
    let label = |s: &Seen| prometheus_label(&s.name);
    let name = "onlyone_missed_total";
    let _ = writeln!(
        out,
        "# HELP {name} Scheduled slots that passed with no fire seen, as the fires that found them recorded them in the journal."
    );
    let _ = writeln!(out, "# TYPE {name} counter");
    for (s, _) in &with {
        let n = s.history.scheduled.missed_total;
        let _ = writeln!(out, "{name}{{lock=\"{}\"}} {n}", label(s));
    }
    let name = "onlyone_next_fire_timestamp_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} When the lock's schedule next fires, in Unix seconds."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    for (s, schedule) in &with {
        if let Some(t) = schedule.as_ref().and_then(|x| x.next_slot(now)) {
            let _ = writeln!(out, "{name}{{lock=\"{}\"}} {t}", label(s));
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
            .find(|d| d.until > now && alive(d.pid))
            .map(|d| Starting {
                pid: d.pid,
                command: d.cmd.clone(),
                at_unix: d.until,
                in_seconds: ((d.until - now) * 1000.0).round() / 1000.0,
            });
        l.schedule = schedule_of(h, given).map(|s| ScheduleStatus {
            spec: recorded_spec(&s),
            next_fire_unix: s.next_slot(now as i64),
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

/// Whether the process `pid` lives.
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Slots recorded missed, as `history --json` prints them: one object a
/// `missed` event, among the runs by time (its last slot's).
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
    /// The row of the slots `m` of the lock `lock`.
    pub fn of(lock: &'a str, m: &'a MissedSlots) -> MissedRow<'a> {
        MissedRow {
            v: 1,
            lock,
            outcome: "missed",
            result: "missed",
            start_unix: m.last,
            start: onlyone::format_unix_time(m.last as u64),
            missed_count: m.count,
            missed_exact: m.exact,
            missed_first_unix: m.first,
            missed_last_unix: m.last,
            recorded_unix: m.time,
            schedule: m.schedule.as_deref(),
        }
    }
}

/// The slots recorded missed since `since` (Unix seconds), newest first.
pub(in crate::cli) fn missed_since(h: &History, since: Option<f64>) -> Vec<&MissedSlots> {
    h.scheduled
        .missed
        .iter()
        .rev()
        .filter(|m| since.is_none_or(|s| m.last >= s))
        .collect()
}

/// The table's cells of missed slots (those of `history`'s columns:
/// when, duration, CPU, peak, outcome, pid, host, skipped).
pub(in crate::cli) fn missed_cells(m: &MissedSlots) -> [String; 8] {
    let schedule = m.schedule.as_deref().and_then(|s| Schedule::parse(s).ok());
    let what = match &schedule {
        Some(s) => slots_words(s, m.first as i64, m.last as i64, (m.count, m.exact), now()),
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
/// slots (newest first) put among them by time: a missed row goes before
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

/// The slots recorded missed that `history` shows beside `shown` runs
/// (newest first): those since `since`, and when `limit` cut the runs,
/// none older than the oldest run shown.
pub(in crate::cli) fn missed_shown<'h>(
    h: &'h History,
    since: Option<f64>,
    shown: &[&onlyone::journal::Run],
    limit: Option<usize>,
) -> Vec<&'h MissedSlots> {
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
