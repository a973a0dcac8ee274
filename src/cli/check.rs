//! `onlyone check`: a monitoring check, in the monitoring-plugin
//! convention of Nagios, Icinga and Sensu (0 OK, 1 WARNING, 2 CRITICAL, 3
//! UNKNOWN), over what the place knows of each lock; its options.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use clap::Args;

use onlyone::journal::Class;

use super::exit::CheckState::{self, Critical, Ok as Fine, Unknown, Warning};
use super::exit::Ending;
use super::format::{now, took};
use super::options::{Adjust, LateArg, ScheduleArg, parse_duration};
use super::place::Place;
use super::print_stdout;
use super::view::{NOT_REACHED, Seen, no_such_lock};

/// `check`'s deadline unless told otherwise: an answer, UNKNOWN at worst,
/// before the 10 s that monitoring agents give a plugin (NRPE's
/// `command_timeout`, `check_nrpe -t`), whatever another account keeps a
/// judgement waiting for.
const CHECK_DEADLINE: &str = "8s";

#[derive(Debug, Args)]
pub struct Check {
    /// The locks to check.
    #[arg(value_name = "LOCK", required = true)]
    pub locks: Vec<String>,
    /// CRITICAL when no run succeeded within DUR.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub max_age: Option<Duration>,
    /// CRITICAL when the current run has lasted longer than DUR.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub max_runtime: Option<Duration>,
    /// CRITICAL when more than N fires in a row were skipped.
    #[arg(long, value_name = "N")]
    pub max_skips: Option<u64>,
    /// One budget for the whole call; a lock not judged by then is
    /// UNKNOWN.
    ///
    /// A lock whose processes could not be listed in time, or that was
    /// not reached, is UNKNOWN and says so. The default answers within
    /// the 10s that monitoring agents (NRPE, Icinga) give a plugin.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = CHECK_DEADLINE)]
    pub deadline: Duration,
    // The schedule: CRITICAL on a missed fire.
    #[command(flatten)]
    pub schedule: ScheduleArg,
    #[command(flatten)]
    pub late: LateArg,
}

impl Adjust for Check {}

/// What `onlyone check --help` says after the options.
pub const AFTER_HELP: &str = "\
CRITICAL: no success within --max-age (a lock that never succeeded counts; a
run done when idle, ended by reap or --idle-timeout, is a success), the
current run longer than --max-runtime, more than --max-skips fires skipped in
a row, or the last run failed (a non-zero exit, a signal, --max-time, a lost
lease, abandoned; a stopped run is no failure; the last run is the last to
end, also where runs overlap with --slots), or a scheduled fire (--schedule, or the
schedule the journal keeps) passed --late ago with no fire since the last one
(\"missed the 02:00 fire\"; a fire that came and waits out its --jitter or
--spread has served it). WARNING: a threshold at least 80% used, a lock whose
record cannot be judged (unknown), or a script's last hold released without
--exit. UNKNOWN: a name with neither a lock file nor a journal (a typo, the
wrong user or --dir), a lock not judged within --deadline (default 8s), or a
schedule the fires could not read where they ran (a TZ that names no zone),
until a fire reads it. With several locks the worst state wins and the
status line counts them; the first line is the status line, then perfdata
after `|`, then one line per lock.

Examples:
  onlyone check sync --max-age 25h --max-runtime 2h --max-skips 12
  onlyone check backup sync --max-age 2d";

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
fn grade_age(v: &mut Verdicts, s: &Seen, a: &Check, now: f64) {
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

fn grade(s: &Seen, a: &Check) -> Verdicts {
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

/// What `check` says of a lock it could not judge by its deadline (`why`:
/// what it found by then), and how to give it more time.
fn not_in_time(name: &str, why: &str, given: std::time::Duration) -> String {
    format!(
        "{name}: not judged within check's deadline of {} ({why}); give it more time with \
         --deadline DUR",
        onlyone::command::compact_duration(given)
    )
}

/// `onlyone check`: the status line, perfdata and a line per lock, and
/// the plugin's state as the exit.
pub fn check(place: &dyn Place, a: Check) -> Ending {
    let mut worst = Fine;
    let mut lines: Vec<(CheckState, String)> = Vec::new();
    let mut perf: Vec<String> = Vec::new();
    let deadline = Instant::now() + a.deadline;
    let all = match place.seen(&a.locks, Some(deadline)) {
        Ok(all) => all,
        Err(e) => {
            print_stdout(&format!("ONLYONE UNKNOWN - {e}\n"));
            return Ending::Check(Unknown);
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
    Ending::Check(worst)
}
