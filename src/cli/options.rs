//! The options several commands share, as clap parses them: the lock's
//! place (`--dir`, `--state-dir`, `--allow-shared-fs`, `--store`: every
//! command's, before or after its name), `--slots N` (`run`, `acquire`,
//! `precheck`; doc/operations.md, "Slots"), what to do when the lock is
//! held (`run`, `acquire`), where to ping (`run`, `acquire`, `precheck`),
//! a schedule (`--schedule`: every command that fires or watches a lock,
//! a fire's keeping a spec that only this host's zone cannot read; and
//! `--late`: which scheduled time a fire serves, and when `check` and
//! `metrics` call one missed; doc/operations.md, "Schedules"), and
//! durations as the command line gives them (`90s`, `10m`, `1h30m`,
//! `500ms`, a bare number of seconds: the library's one grammar,
//! [`onlyone::duration`], which a schedule's `every DUR` reads too, with
//! the command's words for a mistake). Each command's own options are in
//! its file, with [`Adjust`]: how it shows the shared ones.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use onlyone::duration::DurationError;
use onlyone::schedule::{Schedule, ScheduleError};

use super::exit::HELD;

/// The grace between TERM and KILL, unless told otherwise
/// (`onlyone::signal::DEFAULT_GRACE`).
pub const DEFAULT_GRACE: &str = "5s";

// The options of `onlyone` that every subcommand takes too, before or
// after its name (`onlyone --dir D status`, `onlyone status --dir D`).
// They are defined on each subcommand as it is built, rather than as
// clap's global options: clap copies each global option into every
// subcommand at every start (4 options into 15 subcommands, some 50 KB of
// heap that every `run` faults in). (A doc comment here would be every
// subcommand's about.)
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct Globals {
    /// The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root,
    /// or /tmp/onlyone-$UID).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Where the journals (the history of runs) are kept, apart from the
    /// locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR,
    /// else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or
    /// ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written
    /// only when it is this user's and writable by no one else.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Write locks even on a network or FUSE filesystem (NFS, SMB, 9p,
    /// FUSE...), which onlyone otherwise refuses: only for one that this
    /// host alone uses.
    #[arg(long, env = "ONLYONE_ALLOW_SHARED_FS", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0, default_missing_value = "true", default_value = "false")]
    pub allow_shared_fs: bool,

    /// Keep the locks in a store that several hosts share, named by its
    /// URL (its engines: onlyone --help).
    #[arg(
        long,
        env = "ONLYONE_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub store: Option<String>,
}

/// What a subcommand changes in its options once they are defined: the
/// options it shares ([`BusyArgs`], [`PingArgs`]) put where its help has
/// always shown them, with its own texts.
pub trait Adjust {
    /// `cmd`, the subcommand with its options defined, adjusted.
    fn adjust(cmd: clap::Command) -> clap::Command {
        cmd
    }
}

/// `cmd` with its options in `order` (their ids; one not listed goes
/// last), each shown in its place: the order in which clap lists them in
/// the help, the manual page and the completions. The options are moved,
/// not copied.
pub fn in_order(cmd: clap::Command, order: &[&str]) -> clap::Command {
    let rank = |a: &clap::Arg| {
        order
            .iter()
            .position(|id| a.get_id() == *id)
            .unwrap_or(order.len())
    };
    let mut args = Vec::with_capacity(order.len());
    let cmd = cmd.mut_args(|a| {
        args.push(a);
        clap::Arg::default()
    });
    debug_assert!(
        args.iter().all(|a| rank(a) < order.len()),
        "an option left out of the order"
    );
    args.sort_by_key(|a| rank(a));
    let mut args = args.into_iter();
    let mut shown = 0;
    cmd.mut_args(|_| {
        let a = args.next().expect("as many options");
        if a.is_positional() {
            a
        } else {
            shown += 1;
            a.display_order(shown - 1)
        }
    })
}

/// `cmd` with the help texts of `texts` (id, short help, long help):
/// a subcommand's own words for an option it shares.
pub fn texts(
    cmd: clap::Command,
    texts: &[(&str, &'static str, Option<&'static str>)],
) -> clap::Command {
    texts.iter().fold(cmd, |cmd, &(id, help, long)| {
        cmd.mut_arg(id, |a| a.help(help).long_help(long))
    })
}

// What `run` and `acquire` do when the lock is held: each option defined
// once, with `run`'s texts (`acquire`'s own are put in by `Adjust::adjust`).
// (A doc comment here would be the subcommands' about.)
#[derive(Debug, Args)]
pub struct BusyArgs {
    /// Wait up to DUR for a running one to finish.
    ///
    /// The waiter wakes when the lock file is removed (inotify) or the
    /// holding process exits (pidfd), within milliseconds, and re-probes
    /// every 250 ms in case an owner died without a trace. Then 75.
    /// Waiters get the lock in the order they began to wait (`status`
    /// shows them).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub wait: Option<Duration>,
    /// At most one fire waits: wait for the running one (for ever, or up
    /// to --wait DUR) unless another fire already waits; then skip (75).
    ///
    /// For a sync job: whatever arrives during a run is picked up by
    /// exactly one more run, never by a pile of them (Temporal's
    /// BufferOne). A waiter that dies leaves its place to the next fire.
    /// One that gives up (--wait ran out) leaves undone what the fires
    /// that skipped on it came for: for a sync job, leave --wait out.
    /// Waiters, of --wait and --queue alike, get the lock in the order
    /// they began to wait.
    #[arg(long)]
    pub queue: bool,
    /// Exit code for a skip.
    ///
    /// `--held-exit 0` makes a skip a success.
    #[arg(long, value_name = "N", default_value_t = HELD)]
    pub held_exit: u8,
    /// One budget for acquiring (waiting and stopping included).
    ///
    /// For everything before the command starts (waiting, stopping a run
    /// to replace); when it runs out while the lock is held: 75, otherwise
    /// 125.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub deadline: Option<Duration>,
}

impl BusyArgs {
    /// What `--wait` and `--queue` ask of a held lock, as the library's
    /// one policy.
    pub fn policy(&self) -> onlyone::BusyPolicy {
        onlyone::BusyPolicy::of(self.wait, self.queue)
    }
}

// Where `run`, `acquire` and `precheck` ping: each option defined once,
// with `run`'s texts (`acquire`'s and `precheck`'s own are put in by
// `Adjust::adjust`). (A doc comment here would be the subcommands' about.)
#[derive(Debug, Args)]
pub struct PingArgs {
    /// Ping URL with the healthchecks.io protocol (repeatable).
    ///
    /// URL/start?rid=RID before the command starts, URL/N?rid=RID when it
    /// ends with exit code N, URL/fail?rid=RID when it ends with none (a
    /// signal, a lost lease), URL/log?rid=RID for a skip (a skip is not a
    /// failure; the body says who holds the lock). The end's body is the
    /// tail of what the run printed, within the server's Ping-Body-Limit
    /// (none when stdout or stderr is a terminal, or with --linger or
    /// --keep-strays). RID is the run's id, in its journal events and in
    /// the command's $ONLYONE_RUN_ID. Pings fail
    /// open: the start waits at most 2s, the end (sent once the lock is
    /// released) at most 10s, the start within --deadline; a ping never changes
    /// the exit code, and a failing server is said once on stderr (not with
    /// -q), the URL shown as its host only. A sentry+https:// URL (Sentry's
    /// cron check-in URL with `sentry+` before it) sends Sentry's check-ins
    /// instead: in_progress, then ok or error with the duration, RID as the
    /// check_in_id, nothing for a skip. The URL is the check's key: a URL
    /// here shows in `ps` until onlyone starts and masks it; --ping-file
    /// or $ONLYONE_PING never shows.
    #[arg(
        id = "ping",
        long = "ping",
        value_name = "URL",
        env = "ONLYONE_PING",
        hide_env_values = true
    )]
    pub urls: Vec<String>,
    /// Read ping URLs from FILE, one a line (`#` starts a comment), in
    /// place of $ONLYONE_PING (with --ping, both are pinged).
    ///
    /// A URL on the command line shows in `ps` for a moment (onlyone
    /// masks it once it starts); in a file only you and root can read, it
    /// never does. Refused before anything runs unless FILE (a link is
    /// followed) is a regular file of yours or root's that no one else
    /// may write and others may not read (chmod 600).
    #[arg(id = "ping_file", long = "ping-file", value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// Parses `90s`, `10m`, `1h30m`, `500ms`, or a bare number of seconds
/// (`5`, `0.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    onlyone::duration::parse(s).map_err(|e| match e {
        DurationError::Negative => {
            format!("`{s}` is negative: a duration is 0 or more, e.g. 90s, 10m, 1h30m or 500ms")
        }
        e => format!("`{s}` is not a duration ({e}): use e.g. 90s, 10m, 1h30m or 500ms"),
    })
}

/// The most slots a lock may have.
pub const MAX_SLOTS: u32 = 1000;

// `--slots`, for run, acquire and precheck. (A doc comment here would be
// the subcommands' about.)
#[derive(Debug, Args, Clone, Default)]
pub struct SlotsArg {
    /// Let up to N runs hold the lock at once, each in a slot of its own
    /// (default 1: one at a time).
    ///
    /// A fire takes the first free slot, 0 to N-1, and skips (75) when all
    /// are held; its command gets the number in ONLYONE_SLOT. N is the
    /// lock's: a fire with another N while a slot is held is refused. See
    /// doc/operations.md, "Slots".
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX_SLOTS as i64))]
    pub slots: Option<u32>,
}

impl SlotsArg {
    /// The number of slots asked for: 1 when none was.
    pub fn count(&self) -> u32 {
        self.slots.unwrap_or(1)
    }

    /// The number of slots asked for, never 0 (clap refuses it): 1 when
    /// none was.
    pub fn nonzero(&self) -> std::num::NonZeroU32 {
        std::num::NonZeroU32::new(self.count()).unwrap_or(std::num::NonZeroU32::MIN)
    }
}

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
pub fn parse_wait(s: &str) -> Result<Duration, String> {
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
    /// over the one the lock's journal (or store) keeps, for this command
    /// alone. See doc/operations.md, "Schedules".
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
    /// the lock's journal (or the store, for every host), so that later
    /// fires, `check`, `metrics` and `status` know it without being told
    /// (given to them, it wins). A
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        for bad in ["", "-1", "x", "5 parsecs", "inf", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_default_grace_is_the_librarys() {
        assert_eq!(
            parse_duration(DEFAULT_GRACE),
            Ok(onlyone::signal::DEFAULT_GRACE)
        );
    }
}
