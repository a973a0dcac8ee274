//! `onlyone metrics`: the Prometheus text format, for node_exporter's
//! textfile collector, over what the place knows of each lock; its
//! options.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;

use onlyone::journal::Outcome;

use super::exit::Ending;
use super::options::{Adjust, LateArg, ScheduleArg};
use super::place::Place;
use super::view::Seen;
use super::{fail, print_stdout, say};

#[derive(Debug, Args)]
pub struct Metrics {
    /// Locks to describe (default: every lock in DIR).
    #[arg(value_name = "LOCK")]
    pub locks: Vec<String>,
    /// Write to this file atomically instead of printing.
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
    // The schedule: the next fire and the fires missed.
    #[command(flatten)]
    pub schedule: ScheduleArg,
    #[command(flatten)]
    pub late: LateArg,
}

impl Adjust for Metrics {}

/// What `onlyone metrics --help` says after the options.
pub const AFTER_HELP: &str = "\
Every lock in DIR (or the ones named), each sample labelled lock=\"NAME\"
(escaped as the format requires): onlyone_last_start_timestamp_seconds,
onlyone_last_success_timestamp_seconds, onlyone_last_exit_code (128+N for
signal N, -1 when unknown), onlyone_last_duration_seconds (the last run is the
last to end, as history lists them), onlyone_running, onlyone_skipped_total,
onlyone_takeovers_total (the journal's counts); for a lock that has had slots
(run --slots N), onlyone_slots (N) and onlyone_slots_held (the slots live runs
hold), there while it is free too (N as its last run took it, 0 held); for a
last finished run that recorded them, onlyone_last_cpu_seconds (labelled
mode=\"user\" and mode=\"system\") and onlyone_last_max_rss_bytes (the largest
peak of one process of the run, not a sum). For a lock with a schedule
(--schedule, or the one its journal keeps): onlyone_missed_fires (the scheduled
fires passed --late ago with no fire since the last one, as check counts them,
live: 0 when none) and onlyone_oldest_missed_fire_timestamp_seconds (the first
of them), onlyone_missed_total (the fires that later fires recorded missed)
and onlyone_next_fire_timestamp_seconds. With
--textfile the metrics are
written atomically (a temp file beside it, then rename), for node_exporter's
textfile collector.

Examples:
  onlyone metrics
  onlyone metrics --textfile /var/lib/node_exporter/textfile/onlyone.prom";

/// A label value in the Prometheus text format: `\`, `"` and newlines
/// escaped.
fn label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The metrics, each with its HELP and TYPE, then one sample per lock
/// that has a value.
fn exposition(seen: &[Seen]) -> String {
    type Value = fn(&Seen) -> Option<f64>;
    let families: [(&str, &str, &str, Value); 8] = [
        (
            "onlyone_last_start_timestamp_seconds",
            "gauge",
            "When the lock's last run started, in Unix seconds.",
            |s| s.history.runs.last().map(|r| r.start),
        ),
        (
            "onlyone_last_success_timestamp_seconds",
            "gauge",
            "When the lock's last successful run ended (done when idle included), in Unix seconds; 0 while it has none.",
            |s| {
                Some(
                    s.history
                        .last_success()
                        .map_or(0.0, |r| r.end.unwrap_or(r.start)),
                )
            },
        ),
        (
            "onlyone_last_exit_code",
            "gauge",
            "The exit code of the lock's last finished run: 128+N for signal N, -1 when unknown (abandoned, ended by onlyone without one).",
            |s| {
                s.history
                    .last_over()
                    .map(|r| f64::from(exit_code(&r.outcome)))
            },
        ),
        (
            "onlyone_last_duration_seconds",
            "gauge",
            "How long the lock's last finished run lasted, in seconds.",
            |s| s.history.last_over().and_then(|r| r.duration),
        ),
        (
            "onlyone_running",
            "gauge",
            "1 while a live run holds the lock, else 0.",
            |s| Some(if s.running() { 1.0 } else { 0.0 }),
        ),
        (
            "onlyone_skipped_total",
            "counter",
            "Fires skipped because the lock was held, as the journal counts them.",
            |s| Some(s.history.skips as f64),
        ),
        (
            "onlyone_takeovers_total",
            "counter",
            "Stale locks taken over, as the journal counts them.",
            |s| Some(s.history.takeovers as f64),
        ),
        (
            "onlyone_last_max_rss_bytes",
            "gauge",
            "The largest peak resident set size of one process of the lock's last finished run, in bytes (the biggest process's peak, not a sum).",
            |s| last_usage(s).map(|u| u.max_rss as f64),
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for s in seen {
            if let Some(v) = value(s) {
                let _ = writeln!(out, "{name}{{lock=\"{}\"}} {v}", label_value(&s.name));
            }
        }
    }
    cpu_family(&mut out, seen);
    slots_families(&mut out, seen);
    out
}

/// One of the slot families' values, from N and the slots held.
type SlotsValue = fn((u32, u32)) -> u32;

/// `onlyone_slots` and `onlyone_slots_held`, for the locks that have had
/// several slots, held or free (written only when there is one).
fn slots_families(out: &mut String, seen: &[Seen]) {
    if seen.iter().all(|s| s.slots.is_none()) {
        return;
    }
    let families: [(&str, &str, SlotsValue); 2] = [
        (
            "onlyone_slots",
            "The lock's number of slots (run --slots N), as its holders recorded it (while it is free, as its last run took it).",
            |(n, _)| n,
        ),
        (
            "onlyone_slots_held",
            "How many of the lock's slots live runs hold.",
            |(_, held)| held,
        ),
    ];
    for (name, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for s in seen {
            if let Some(v) = s.slots {
                let _ = writeln!(
                    out,
                    "{name}{{lock=\"{}\"}} {}",
                    label_value(&s.name),
                    value(v)
                );
            }
        }
    }
}

/// What a lock's last finished run used, when its end says.
fn last_usage(s: &Seen) -> Option<onlyone::journal::Usage> {
    s.history.last_over().and_then(|r| r.usage)
}

/// The CPU time of each lock's last finished run, by mode (the one family
/// with a label beside `lock`).
fn cpu_family(out: &mut String, seen: &[Seen]) {
    let name = "onlyone_last_cpu_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} The CPU time of the lock's last finished run, in seconds, by mode (user, system): its command and the processes of the run onlyone reaped."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    for s in seen {
        if let Some(u) = last_usage(s) {
            let lock = label_value(&s.name);
            for (mode, t) in [("user", u.user), ("system", u.system)] {
                let _ = writeln!(
                    out,
                    "{name}{{lock=\"{lock}\",mode=\"{mode}\"}} {}",
                    t.as_secs_f64()
                );
            }
        }
    }
}

/// A finished run's exit code for the metric.
fn exit_code(o: &Outcome) -> i32 {
    match o {
        Outcome::Exited(c) => *c,
        Outcome::Released { exit: Some(c) } => *c,
        Outcome::Signaled(s) => onlyone::signal::parse_signal(s).map_or(-1, |s| 128 + s.as_raw()),
        Outcome::Ended { exit: Some(c), .. } => *c,
        _ => -1,
    }
}

/// `onlyone metrics`: the exposition, on stdout or written atomically
/// to `--textfile`.
pub fn metrics(place: &dyn Place, a: Metrics) -> Ending {
    let all = match place.seen(&a.locks, None) {
        Ok(all) => all,
        Err(e) => return fail(e),
    };
    let mut seen = Vec::new();
    for (t, s) in all {
        match s {
            Ok(s) => {
                // Exported all the same (its last success is 0): a job
                // that never ran is what the alert is for.
                if let Some(looked) = &s.missing {
                    say(format_args!("metrics: {t}: no such lock yet: {looked}"));
                }
                seen.push(s);
            }
            Err(e) => say(format_args!("metrics: {t}: {e}")),
        }
    }
    let mut text = exposition(&seen);
    text.push_str(&super::schedule::watch::metrics(
        &seen,
        a.schedule.schedule.as_ref(),
        a.late.late,
    ));
    match &a.textfile {
        None => {
            print_stdout(&text);
            Ending::Done
        }
        Some(path) => match write_atomically(path, text.as_bytes()) {
            Ok(()) => Ending::Done,
            Err(e) => fail(format_args!(
                "cannot write the metrics to `{}`: {e}",
                path.display()
            )),
        },
    }
}

/// Writes `bytes` to `path` as node_exporter's textfile collector wants: a
/// temp file in the same directory, then a rename over `path`; 0644, on
/// descriptors only ([`onlyone::atomic`]), so another account that can
/// write the collector's directory cannot turn the write against a file of
/// root's.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    onlyone::atomic::write_file(path, bytes, 0o644)
}
