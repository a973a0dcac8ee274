//! `onlyone history`: the runs of a lock, from its journal, the last to
//! end first: those still running (the latest started first), then the
//! others by their ends in the journal's order, newest first
//! (`History::by_end`). A lock of one slot's runs never overlap: this is
//! the order they started in. The runs of a lock of several overlap, and
//! the first row is the last run `check` and `status` speak of.
//!
//! The JSON form (`--json`) is one object per run and line, in the same
//! order (schema 1, stable: fields are only ever added):
//!
//! ```text
//! { "v": 1, "lock", "token", "start_unix", "start", "duration_seconds",
//!   "outcome", "exit", "signal", "ended_by", "pid", "host", "command",
//!   "mode", "skipped", "took_over", "cpu_user_seconds",
//!   "cpu_system_seconds", "max_rss_bytes" }
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use onlyone::command::format_unix_time;
use onlyone::journal::{Class, Outcome, Run, Usage};
use onlyone::text::for_terminal;

use super::exit::Ending;
use super::format::{ago, now, took};
use super::options::{Adjust, parse_duration};
use super::place::Place;
use super::schedule::watch::{MissedRow, interleave, missed_cells, missed_shown};
use super::view::{Seen, UsageJson, no_such_lock, nothing_in, outcome_word};
use super::{fail, print_stdout};

#[derive(Debug, Args)]
pub struct History {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// Show at most N runs.
    #[arg(short = 'n', long = "limit", value_name = "N")]
    pub limit: Option<usize>,
    /// Only runs that started within DUR.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub since: Option<Duration>,
    /// One JSON object per run and line (schema in doc/json.md).
    #[arg(long)]
    pub json: bool,
}

impl Adjust for History {}

/// What `onlyone history --help` says after the options.
pub const AFTER_HELP: &str = "\
The last to end first: the runs still running (the latest started first), then
the others by when they ended, as the journal has their ends (a run found over
with no end recorded, its wrapper killed, ended when it was found). The runs of
a lock of one slot never overlap, so this is the order they started in; with
--slots N, the first row is the last run that check, metrics and status speak
of. For each: when it started, how long it took, what it used (CPU:
user and system time of its command and of the processes of the run onlyone
reaped; PEAK: the largest peak memory of one of them, not a sum; - when not
recorded), how it ended (exit N, signal NAME, ended (max-time|idle|stop|reap),
abandoned: its wrapper died, released: a script's hold), its pid and host, and
the fires skipped while it ran; and the scheduled fires that passed with no
fire (missed: --schedule), as the fire that found them recorded them. The
journal is in the state directory
(--state-dir: /var/lib/onlyone for root), named from the lock's path:
/run/onlyone/sync.lock has run-onlyone-sync.lock.journal; an earlier version's
LOCKFILE.journal beside the lock is read first.

Examples:
  onlyone history sync
  onlyone history sync -n 5 --since 7d
  onlyone history sync --json | jq .";

/// One run, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct RunJson<'a> {
    v: u32,
    lock: &'a str,
    token: &'a str,
    start_unix: f64,
    start: String,
    duration_seconds: Option<f64>,
    outcome: &'static str,
    result: &'static str,
    exit: Option<i32>,
    signal: Option<&'a str>,
    ended_by: Option<&'a str>,
    pid: Option<u32>,
    host: Option<&'a str>,
    command: Option<&'a str>,
    mode: Option<&'a str>,
    skipped: u64,
    took_over: bool,
    #[serde(flatten)]
    usage: UsageJson,
}

impl<'a> RunJson<'a> {
    fn of(lock: &'a str, r: &'a Run) -> RunJson<'a> {
        let (exit, signal, ended_by) = match &r.outcome {
            Outcome::Exited(c) => (Some(*c), None, None),
            Outcome::Signaled(s) => (None, Some(s.as_str()), None),
            Outcome::Ended { by, exit } => (*exit, None, Some(by.as_str())),
            Outcome::Released { exit } => (*exit, None, None),
            _ => (None, None, None),
        };
        RunJson {
            v: 1,
            lock,
            token: &r.token,
            start_unix: r.start,
            start: format_unix_time(r.start as u64),
            duration_seconds: r.duration,
            outcome: outcome_word(&r.outcome),
            result: r.outcome.class().as_str(),
            exit,
            signal,
            ended_by,
            pid: r.pid,
            host: r.host.as_deref(),
            command: r.cmd.as_deref(),
            mode: r.mode.as_deref(),
            skipped: r.skipped,
            took_over: r.took_over,
            usage: UsageJson::of(r.usage.as_ref()),
        }
    }
}

/// `history`, in either place.
pub fn history(place: &dyn Place, a: History) -> Ending {
    let read = place
        .seam()
        .lock(&a.lock, std::num::NonZeroU32::MIN)
        .and_then(|lock| place.seam().history(&lock));
    let (name, h, whence) = match read {
        Ok(r) => (r.name, r.history, r.source),
        Err(e) => return fail(super::place::words(&e)),
    };
    // Nothing at all: a typo (or the wrong user or directory) is an
    // error, as `check` makes it UNKNOWN, not an empty history.
    if nothing_in(&h)
        && let Ok(seen) = place.seen(std::slice::from_ref(&a.lock), None)
        && let Some((
            _,
            Ok(Seen {
                name,
                missing: Some(looked),
                ..
            }),
        )) = seen.into_iter().next()
    {
        return fail(no_such_lock(&name, &looked));
    }
    let since = a.since.map(|d| now() - d.as_secs_f64());
    let shown: Vec<&Run> = h
        .by_end()
        .into_iter()
        .rev()
        .filter(|r| since.is_none_or(|s| r.start >= s))
        .take(a.limit.unwrap_or(usize::MAX))
        .collect();
    let missed = missed_shown(&h, since, &shown, a.limit);
    if a.json {
        let mut out = String::new();
        let lines = interleave(
            shown
                .iter()
                .map(|r| (r.start, serde_json::to_string(&RunJson::of(&name, r)))),
            missed
                .iter()
                .map(|m| (m.last, serde_json::to_string(&MissedRow::of(&name, m)))),
        );
        for line in lines.into_iter().flatten() {
            out.push_str(&onlyone::text::json_for_terminal(&line));
            out.push('\n');
        }
        print_stdout(&out);
        return Ending::Done;
    }
    print_stdout(&table(&name, &shown, &missed, whence));
    Ending::Done
}

/// The human view: a summary line, then aligned columns.
fn table(
    name: &str,
    runs: &[&Run],
    missed: &[&onlyone::journal::MissedFires],
    journal: impl std::fmt::Display,
) -> String {
    let mut out = String::new();
    // What the journal says is shown escaped: another account may have
    // written it (see text::for_terminal).
    let name = for_terminal(name);
    if runs.is_empty() && missed.is_empty() {
        let journal = journal.to_string();
        let _ = writeln!(
            out,
            "{name}: no run in the journal ({})",
            for_terminal(&journal)
        );
        return out;
    }
    summary(&mut out, &name, runs, missed);
    out.push('\n');
    let rows: Vec<[String; 8]> = runs.iter().map(|r| cells(r)).collect();
    let rows = interleave(
        runs.iter().map(|r| r.start).zip(rows),
        missed.iter().map(|m| (m.last, missed_cells(m))),
    );
    let head = [
        "STARTED", "DURATION", "CPU", "PEAK", "OUTCOME", "PID", "HOST", "SKIPPED",
    ];
    let mut widths = head.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        l
    };
    let _ = writeln!(out, "{}", line(&head));
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        let _ = writeln!(out, "{}", line(&cells));
    }
    out
}

/// The table's summary line (without its newline): how many runs, how
/// many succeeded, the median, the fires skipped and missed.
fn summary(out: &mut String, name: &str, runs: &[&Run], missed: &[&onlyone::journal::MissedFires]) {
    let over: Vec<&&Run> = runs.iter().filter(|r| r.outcome.is_over()).collect();
    let count = |c: Class| over.iter().filter(|r| r.outcome.class() == c).count();
    let (idle, stopped, unknown) = (
        count(Class::DoneWhenIdle),
        count(Class::Stopped),
        count(Class::ExitUnknown),
    );
    let ok = count(Class::Success) + idle;
    // Judged: those that succeeded or failed (a stop, or a release that
    // gave no exit code, is neither).
    let judged = ok + count(Class::Failure);
    let mut durations: Vec<f64> = over.iter().filter_map(|r| r.duration).collect();
    durations.sort_by(f64::total_cmp);
    let median = durations.get(durations.len() / 2).copied();
    let skipped: u64 = runs.iter().map(|r| r.skipped).sum();
    let _ = write!(out, "{name}: {} run(s)", runs.len());
    if let Some(pct) = (ok * 100).checked_div(judged) {
        let _ = write!(out, ", {ok} of {judged} succeeded ({pct}%)");
        if idle > 0 {
            let _ = write!(out, " ({idle} done when idle)");
        }
    }
    if stopped > 0 {
        let _ = write!(out, ", {stopped} stopped");
    }
    if unknown > 0 {
        let _ = write!(out, ", {unknown} released with exit unknown");
    }
    if let Some(m) = median {
        let _ = write!(out, ", median {}", took(m));
    }
    let _ = write!(out, ", {skipped} fire(s) skipped");
    let missed_count: u64 = missed.iter().map(|m| m.count).sum();
    if missed_count > 0 {
        let _ = write!(out, ", {missed_count} fire(s) missed");
    }
}

/// One run's row of the table.
fn cells(r: &Run) -> [String; 8] {
    [
        ago(r.start),
        match (&r.outcome, r.duration) {
            (Outcome::Running, _) => format!("{}+", took(now() - r.start)),
            (_, Some(d)) => took(d),
            (_, None) => "?".into(),
        },
        r.usage.map_or_else(|| "-".into(), |u| cpu(&u)),
        r.usage.map_or_else(|| "-".into(), |u| bytes(u.max_rss)),
        for_terminal(&r.outcome.describe()).into_owned()
            + if r.took_over { " (took over)" } else { "" },
        r.pid.map_or_else(|| "?".into(), |p| p.to_string()),
        r.host
            .as_deref()
            .map_or_else(|| "?".into(), |h| for_terminal(h).into_owned()),
        r.skipped.to_string(),
    ]
}

/// A run's CPU time, user and system together: `0.41 s`, `2m 3s`.
fn cpu(u: &Usage) -> String {
    let secs = (u.user + u.system).as_secs_f64();
    match secs {
        s if s < 10.0 => format!("{s:.2} s"),
        s if s < 60.0 => format!("{s:.1} s"),
        s => took(s),
    }
}

/// A size in bytes, in binary units: `512 B`, `82 MiB`, `1.5 GiB`.
fn bytes(n: u64) -> String {
    let mut v = n as f64;
    let mut unit = "B";
    for next in ["KiB", "MiB", "GiB", "TiB"] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = next;
    }
    if unit == "B" || v >= 10.0 {
        format!("{v:.0} {unit}")
    } else {
        format!("{v:.1} {unit}")
    }
}
