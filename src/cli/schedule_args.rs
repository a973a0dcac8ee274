//! The options of schedules, as clap parses them (doc/operations.md,
//! "Schedules"): `--schedule` (every command that fires or watches a
//! lock; a fire's keeps a spec that only this host's zone cannot read),
//! `--late` (which scheduled time a fire serves, and when `check` and
//! `metrics` call one missed), and `run`'s `--catch-up`,
//! `--catch-up-within`, `--jitter` and `--spread`. Each is flattened into the subcommands' own options
//! (`super::args`).

use std::time::Duration;

use clap::Args;

use onlyone::schedule::{Schedule, ScheduleError};

use super::duration::parse_duration;

/// Reads `--schedule`: a parse error names the spec and the fix (clap
/// puts it after "invalid value `SPEC` for `--schedule <SPEC>`"); an
/// empty one says how to give none.
fn parse_schedule(s: &str) -> Result<Schedule, String> {
    Schedule::parse(s).map_err(|e| {
        if s.trim().is_empty() {
            // Most often an empty $ONLYONE_SCHEDULE, set to mean none.
            format!(
                "{e}. An empty $ONLYONE_SCHEDULE is one too: unset it (`unset \
                 ONLYONE_SCHEDULE`; in a unit, `UnsetEnvironment=ONLYONE_SCHEDULE`) for none"
            )
        } else {
            e.to_string()
        }
    })
}

/// Reads the duration of `--late`, `--catch-up-within`, `--jitter` or
/// `--spread`. A negative one (`-5m`, which clap would otherwise take for
/// flags) is refused as negative, naming it.
fn parse_wait(s: &str) -> Result<Duration, String> {
    let negative = s
        .trim_start()
        .strip_prefix('-')
        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit() || c == '.'));
    if negative {
        return Err(format!(
            "`{s}` is negative: a duration is 0 or more, e.g. 90s, 10m, 1h30m or 500ms"
        ));
    }
    parse_duration(s)
}

/// A schedule a fire (`run`, `precheck`) was given: read, or a spec
/// that is right but could not be read in this host's local time zone
/// (an unreadable `TZ` or `/etc/localtime`), which the fire records and
/// runs without, rather than not run at all.
#[derive(Debug, Clone)]
pub enum Given {
    /// Read.
    Read(Schedule),
    /// Not read here: the spec, and why.
    Unreadable {
        /// The spec as given.
        spec: String,
        /// Why, with the fix.
        error: ScheduleError,
    },
}

/// Reads a fire's `--schedule`: as [`parse_schedule`], except that a spec
/// read in no local zone because that zone cannot be read is kept, with
/// why, for the fire to run and record it.
fn parse_fire_schedule(s: &str) -> Result<Given, String> {
    match Schedule::parse(s) {
        Ok(schedule) => Ok(Given::Read(schedule)),
        Err(error @ ScheduleError::LocalZone { .. }) => Ok(Given::Unreadable {
            spec: s.trim().to_owned(),
            error,
        }),
        Err(_) => parse_schedule(s).map(Given::Read),
    }
}

// `--schedule`, for check, metrics and status, which only read. (A doc
// comment here would be the subcommands' about.)
#[derive(Debug, Args, Clone, Default)]
pub struct ScheduleArg {
    /// The times the job is meant to fire at: a cron expression (`0 2 * *
    /// *`, `@daily`, `CRON_TZ=Europe/Berlin 0 2 * * *`) or `every DUR`.
    ///
    /// Cron's five fields in the local time zone (or CRON_TZ=), its
    /// @hourly-style names, ranges, steps and lists; or `every 15m`, fires
    /// at the multiples of DUR since the Unix epoch. Given here, it wins
    /// over the one the lock's journal keeps, for this command alone. See
    /// doc/operations.md, "Schedules".
    #[arg(long, env = "ONLYONE_SCHEDULE", value_name = "SPEC", value_parser = parse_schedule)]
    pub schedule: Option<Schedule>,
}

// `--schedule`, for run and precheck, which keep it.
#[derive(Debug, Args, Clone, Default)]
pub struct FireScheduleArg {
    /// The times the job is meant to fire at: a cron expression (`0 2 * *
    /// *`, `@daily`, `CRON_TZ=Europe/Berlin 0 2 * * *`) or `every DUR`.
    ///
    /// Cron's five fields in the local time zone (or CRON_TZ=), its
    /// @hourly-style names, ranges, steps and lists; or `every 15m`, fires
    /// at the multiples of DUR since the Unix epoch. The fire keeps it in
    /// the lock's journal, so that later fires, `check`, `metrics` and
    /// `status` know it without being told (given to them, it wins). A
    /// local time zone that cannot be read (a wrong TZ) does not stop the
    /// fire: it runs without the schedule, and the error is recorded for
    /// `check` to report. See doc/operations.md, "Schedules".
    #[arg(long, env = "ONLYONE_SCHEDULE", value_name = "SPEC", value_parser = parse_fire_schedule)]
    pub schedule: Option<Given>,
}

// `--late`, for run, precheck, check and metrics.
#[derive(Debug, Args, Clone, Default)]
pub struct LateArg {
    /// How late a fire may come and still be its scheduled time's
    /// (default: 5 minutes, at most half the schedule's period).
    ///
    /// A fire (`run`, `precheck`) up to DUR after a scheduled time serves
    /// it; a later one serves none, and the fires before it that no fire
    /// came for are recorded missed. `check` and `metrics` call a fire
    /// missed once DUR has passed after its time with no fire seen.
    #[arg(long, value_name = "DUR", value_parser = parse_wait, allow_hyphen_values = true)]
    pub late: Option<Duration>,
}

// What `run` does about its schedule before it takes the lock.
#[derive(Debug, Args, Clone, Default)]
pub struct FireArgs {
    /// Make up for missed fires: a fire that serves no scheduled time runs
    /// once for all the fires missed within --catch-up-within (never a
    /// backlog), else not at all.
    ///
    /// For a boot-time line (`@reboot`, a unit's `OnBootSec=`) beside the
    /// scheduled one: a fire that serves no scheduled time runs once when
    /// fires were missed within the window, and not again; one that serves
    /// a scheduled time runs as any fire does. Otherwise it exits 0 without running,
    /// saying why. Needs a schedule (--schedule, or the one the journal
    /// keeps).
    #[arg(long)]
    pub catch_up: bool,
    /// How old the last missed fire may be for --catch-up to make up for
    /// it (default: one period of the schedule).
    #[arg(long, value_name = "DUR", value_parser = parse_wait, allow_hyphen_values = true, requires = "catch_up")]
    pub catch_up_within: Option<Duration>,
    /// Wait a random time up to DUR before taking the lock, so that a
    /// fleet does not fire at the same second.
    ///
    /// The wait counts toward --deadline (cut short to what is left of
    /// it); `status` shows the fire as "starting in 12s" meanwhile; TERM,
    /// INT or HUP end it, and onlyone ends by that signal without running
    /// (a shell sees 128+N).
    #[arg(long, value_name = "DUR", value_parser = parse_wait, allow_hyphen_values = true)]
    pub jitter: Option<Duration>,
    /// Wait a stable offset up to DUR before taking the lock: hashed from
    /// the host's machine id and the lock, the same at every fire
    /// (systemd's RandomizedOffsetSec=).
    ///
    /// Added to --jitter's wait, and waited as it is.
    #[arg(long, value_name = "DUR", value_parser = parse_wait, allow_hyphen_values = true)]
    pub spread: Option<Duration>,
}
