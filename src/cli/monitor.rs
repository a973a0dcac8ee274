//! What monitoring reads: `onlyone check` (the monitoring-plugin
//! convention of Nagios, Icinga and Sensu) and `onlyone metrics` (the
//! Prometheus text format, for node_exporter's textfile collector).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use onlyone::journal::{Class, Outcome};

use super::exit::CheckState::{self, Critical, Ok as Fine, Unknown, Warning};
use super::exit::{Code, Ending};
use super::format::{now, took};
use super::place::{Named, Place};
use super::view::{NOT_REACHED, Seen, judged_late, no_such_lock, nothing_in};
use super::{Ctx, args, fail, print_stdout, say};

/// What is known of LOCK: its record, when its directory exists, and its
/// journal, found even when it does not; `/proc` read until `deadline`.
fn look(ctx: &Ctx, lock: &str, deadline: Option<Instant>) -> Result<Seen, String> {
    let (journal, name, lock) = ctx.journal_for_reading(lock).map_err(|e| e.to_string())?;
    let lock = lock.map(|l| match deadline {
        Some(d) => l.with_deadline(d),
        None => l,
    });
    // Read before the lock is looked at (see `History::close_over`).
    let mut history = journal.history().map_err(|e| {
        format!(
            "cannot read the journal `{}`: {e}",
            journal.path().display()
        )
    })?;
    // Every slot file there is, slot 0's first, each looked at once
    // (the lock's deadline is its slots').
    let slots: Vec<(u32, onlyone::Inspection)> = match &lock {
        Some(l) => l
            .inspect_slots()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(k, _, i)| (k, i))
            .collect(),
        None => Vec::new(),
    };
    let inspection = slots.iter().find(|(k, _)| *k == 0).map(|(_, i)| i.clone());
    // Unknown for want of time: said as such (see `check`).
    let late = inspection
        .as_ref()
        .is_some_and(|i| judged_late(i, deadline));
    // Every slot file's live run (slot 0's among them).
    onlyone::place::dir::close_over(&mut history, slots.iter().map(|(_, i)| i));
    // Another user's lock, and nothing of it here: its runs are in that
    // user's state directory. Saying OK (no run recorded) would hide a
    // failing job from the monitoring that checks it as another user.
    let theirs = inspection
        .as_ref()
        .filter(|i| i.record.is_ok())
        .map(|i| i.owner)
        .filter(|&u| u != rustix::process::geteuid().as_raw());
    if let Some(uid) = theirs
        && nothing_in(&history)
    {
        let who = onlyone::command::user_name(uid);
        return Err(format!(
            "the lock is {who}'s, and its runs are recorded in {who}'s own state directory, not \
             in `{}`: check it as {who}, or point --state-dir at {who}'s",
            journal
                .path()
                .parent()
                .map_or_else(String::new, |p| p.display().to_string())
        ));
    }
    let missing = (inspection.is_none() && nothing_in(&history)).then(|| {
        format!(
            "no lock file `{}` and nothing in the journal `{}`",
            journal.lock_path().display(),
            journal.path().display()
        )
    });
    Ok(Seen {
        missing,
        late,
        ..Seen::of_dir(name, inspection, history).with_slots(&slots)
    })
}

/// One lock's state, the reasons, and its perfdata.
struct Verdicts {
    state: CheckState,
    reasons: Vec<String>,
    perf: Vec<String>,
}

impl Verdicts {
    fn raise(&mut self, state: CheckState, why: String) {
        self.state = self.state.worst(state);
        self.reasons.push(why);
    }

    /// Raises for `used` of `limit`: CRITICAL past it, WARNING from 80%.
    fn threshold(&mut self, used: f64, limit: f64, critical: String, warning: String) {
        if used > limit {
            self.raise(Critical, critical);
        } else if used >= limit * 0.8 && used > 0.0 {
            self.raise(Warning, warning);
        }
    }
}

/// A perfdata label: quoted, a quote doubled (the plugin guidelines).
fn label(name: &str, what: &str) -> String {
    format!("'{}_{what}'", name.replace('\'', "''"))
}

/// `--max-age`: how long since the last success.
fn grade_age(v: &mut Verdicts, s: &Seen, a: &args::Check, now: f64) {
    let n = &s.name;
    if let Some(max) = a.max_age {
        let max = max.as_secs_f64();
        match s.history.last_success() {
            None => v.raise(
                Critical,
                format!("no success recorded (max-age {})", took(max)),
            ),
            Some(r) => {
                let at = r.end.unwrap_or(r.start);
                let age = (now - at).max(0.0);
                v.threshold(
                    age,
                    max,
                    format!("no success for {} (max-age {})", took(age), took(max)),
                    format!("last success {} ago (max-age {})", took(age), took(max)),
                );
                v.perf.push(format!(
                    "{}={:.0}s;{:.0};{:.0};0",
                    label(n, "success_age"),
                    age,
                    max * 0.8,
                    max
                ));
            }
        }
    }
}

/// The last run that is over: a failure is critical, a release without
/// its exit code a warning.
fn grade_last(v: &mut Verdicts, s: &Seen, now: f64) {
    if let Some(last) = s.history.last_over() {
        let when = last
            .end
            .map(|e| format!(", {} ago", took(now - e)))
            .unwrap_or_default();
        match last.outcome.class() {
            Class::Failure => v.raise(
                Critical,
                format!("the last run failed ({}{when})", last.outcome.describe()),
            ),
            Class::ExitUnknown => v.raise(
                Warning,
                format!(
                    "the last run was released without its exit code{when} (the script's \
                     trap should run `onlyone release {} --exit $?`)",
                    s.name
                ),
            ),
            _ => {}
        }
    }
}

fn grade(s: &Seen, a: &args::Check) -> Verdicts {
    let mut v = Verdicts {
        state: Fine,
        reasons: Vec::new(),
        perf: Vec::new(),
    };
    let n = &s.name;
    let now = now();
    grade_age(&mut v, s, a, now);
    let runtime = s.running_since().map(|t| (now - t).max(0.0));
    if let Some(max) = a.max_runtime {
        let max = max.as_secs_f64();
        let r = runtime.unwrap_or(0.0);
        v.threshold(
            r,
            max,
            format!(
                "the current run has lasted {} (max-runtime {})",
                took(r),
                took(max)
            ),
            format!(
                "the current run has lasted {} (max-runtime {})",
                took(r),
                took(max)
            ),
        );
        v.perf.push(format!(
            "{}={:.0}s;{:.0};{:.0};0",
            label(n, "runtime"),
            r,
            max * 0.8,
            max
        ));
    }
    let skips = s.skips_in_a_row();
    if let Some(max) = a.max_skips {
        v.threshold(
            skips as f64,
            max as f64,
            format!("{skips} fires skipped in a row (max-skips {max})"),
            format!("{skips} fires skipped in a row (max-skips {max})"),
        );
        v.perf.push(format!(
            "{}={skips};{};{max};0",
            label(n, "skips"),
            (max as f64 * 0.8).ceil() as u64
        ));
    }
    grade_last(&mut v, s, now);
    if let Some(o) = &s.other {
        v.raise(Warning, o.clone());
    }
    if let Some(r) = &s.unknown {
        v.raise(Warning, format!("the lock cannot be judged ({r})"));
    }
    let given = a.schedule.schedule.as_ref();
    for (state, why) in super::schedule::watch::graded(s, given, a.late.late) {
        v.raise(state, why);
    }
    v
}

impl Ctx {
    /// What is known of each lock named (or every lock, none named) in
    /// the lock directory, by `deadline`: a lock not reached by then is
    /// [`NOT_REACHED`].
    pub(super) fn seen_in_dir(
        &self,
        locks: &[String],
        deadline: Option<Instant>,
    ) -> Result<Vec<Named>, String> {
        let targets = if locks.is_empty() {
            self.listing().map_err(|e| e.to_string())?.0
        } else {
            locks.to_vec()
        };
        let mut out = Vec::new();
        onlyone::command::with_census(|| {
            for t in targets {
                let seen = if deadline.is_some_and(|d| Instant::now() >= d) {
                    Err(NOT_REACHED.to_owned())
                } else {
                    look(self, &t, deadline)
                };
                out.push((t, seen));
            }
        });
        Ok(out)
    }
}

/// What `check` says of a lock it could not judge by its deadline (`why`:
/// what it found by then), and how to give it more time.
fn not_in_time(name: &str, why: &str, given: std::time::Duration) -> String {
    format!(
        "{name}: not judged within check's deadline of {} ({why}); give it more time with \
         --deadline DUR",
        onlyone::command::compact_duration(given)
    )
}

pub fn check(place: &dyn Place, a: args::Check) -> Code {
    let mut worst = Fine;
    let mut lines: Vec<(CheckState, String)> = Vec::new();
    let mut perf: Vec<String> = Vec::new();
    let deadline = Instant::now() + a.deadline;
    let all = match place.seen(&a.locks, Some(deadline)) {
        Ok(all) => all,
        Err(e) => {
            print_stdout(&format!("ONLYONE UNKNOWN - {e}\n"));
            return Ending::Check(Unknown).code();
        }
    };
    for (l, seen) in all {
        let (state, text) = match seen {
            Ok(Seen {
                name,
                missing: Some(looked),
                ..
            }) => (Unknown, no_such_lock(&name, &looked)),
            // What could not be judged for want of time is UNKNOWN, not
            // a warning about the lock.
            Ok(Seen {
                name,
                late: true,
                unknown,
                ..
            }) => (
                Unknown,
                not_in_time(&name, unknown.as_deref().unwrap_or("?"), a.deadline),
            ),
            Err(e) if e == NOT_REACHED => (Unknown, not_in_time(&l, &e, a.deadline)),
            Ok(s) => {
                let v = grade(&s, &a);
                perf.extend(v.perf);
                let text = if v.reasons.is_empty() {
                    let mut ok = match s.history.last_over() {
                        Some(r) => format!(
                            "last run {} {} ago",
                            r.outcome.describe(),
                            took(now() - r.end.unwrap_or(r.start))
                        ),
                        None => "no run recorded".into(),
                    };
                    if s.running() {
                        ok.push_str("; running now");
                    }
                    format!("{}: {ok}", s.name)
                } else {
                    format!("{}: {}", s.name, v.reasons.join("; "))
                };
                (v.state, text)
            }
            Err(e) => (Unknown, format!("{l}: {e}")),
        };
        worst = worst.worst(state);
        lines.push((state, text));
    }
    let mut out = String::new();
    let summary = if lines.len() == 1 {
        lines[0].1.clone()
    } else {
        let count = |s: CheckState| lines.iter().filter(|(x, _)| *x == s).count();
        let mut parts = Vec::new();
        for s in [Critical, Warning, Unknown, Fine] {
            if count(s) > 0 {
                parts.push(format!("{} {}", count(s), s.word().to_lowercase()));
            }
        }
        format!("{} locks: {}", lines.len(), parts.join(", "))
    };
    let _ = write!(out, "ONLYONE {} - {summary}", worst.word());
    if !perf.is_empty() {
        let _ = write!(out, " | {}", perf.join(" "));
    }
    out.push('\n');
    if lines.len() > 1 {
        for (s, text) in &lines {
            let _ = writeln!(out, "{} {text}", s.word());
        }
    }
    // A journal's values reach the terminal (or the monitoring's web page)
    // escaped: another account may have written them.
    let mut shown = String::with_capacity(out.len());
    for line in out.lines() {
        shown.push_str(&onlyone::text::for_terminal(line));
        shown.push('\n');
    }
    print_stdout(&shown);
    Ending::Check(worst).code()
}

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

pub fn metrics(place: &dyn Place, a: args::Metrics) -> Code {
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
            Ending::Done.code()
        }
        Some(path) => match write_atomically(path, text.as_bytes()) {
            Ok(()) => Ending::Done.code(),
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
