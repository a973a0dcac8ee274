//! `onlyone precheck`, in either place: should this fire run? One
//! function over the library's [`onlyone::place::Place`] (after the fire's
//! schedule, `super::schedule::precheck`), which words what the place
//! found; its options.

use std::time::Duration;

use clap::Args;

use onlyone::place::{Found, Holding};

use super::exit::{self, Ending};
use super::options::{
    Adjust, FireScheduleArg, LateArg, PingArgs, SlotsArg, in_order, parse_duration, texts,
};
use super::ping::Pings;
use super::place::words;
use super::{deadline_of, say};

#[derive(Debug, Args)]
pub struct Precheck {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// One budget for the whole call; when it runs out, exit 0.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub deadline: Option<Duration>,
    #[command(flatten)]
    pub slots: SlotsArg,
    // The schedule: fires missed are recorded.
    #[command(flatten)]
    pub schedule: FireScheduleArg,
    #[command(flatten)]
    pub late: LateArg,
    // Where to ping.
    #[command(flatten)]
    pub ping: PingArgs,
    /// No message when the lock is held.
    #[arg(short, long)]
    pub quiet: bool,
}

impl Adjust for Precheck {
    fn adjust(cmd: clap::Command) -> clap::Command {
        let cmd = texts(
            cmd,
            &[
                (
                    "ping",
                    "Ping URL with the healthchecks.io protocol when the lock is held: \
                     URL/log?rid=RID, its body saying who holds it (a skip is not a failure); \
                     a free lock pings nothing (the fire's `run --ping` does). Repeatable; \
                     bounded and failing open as `run --ping`",
                    None,
                ),
                (
                    "ping_file",
                    "Read ping URLs from FILE, one a line (`#` starts a comment), in place of \
                     $ONLYONE_PING (with --ping, both are pinged); checked as `run \
                     --ping-file` checks it",
                    None,
                ),
            ],
        );
        in_order(
            cmd,
            &[
                "lock",
                "slots",
                "schedule",
                "late",
                "deadline",
                "ping",
                "ping_file",
                "quiet",
            ],
        )
    }
}

/// What `onlyone precheck --help` says after the options.
pub const AFTER_HELP: &str = "\
Exits 75 only when a live run provably holds the lock, and 0 otherwise, even on
errors (said on stderr). A provably stale lock is cleared. A precheck takes no
lock: what it lets through must still run under `onlyone run` (or acquire).

Examples:
  systemd:  ExecCondition=/usr/bin/onlyone precheck sync
            ExecStart=/usr/bin/onlyone run sync -- /usr/local/bin/sync.sh
            (exit 1-254 skips the unit without failing it)
  reaper:   onlyone reap sync && onlyone precheck sync";

/// `precheck`: 75 only while a live run holds the lock; 0 otherwise, on
/// any error included (fail open: it never blocks a fire).
pub fn precheck(
    place: &dyn onlyone::place::Place,
    lock: &onlyone::place::Lock,
    a: &Precheck,
) -> Ending {
    let deadline = deadline_of(a.deadline);
    let checked = match place.precheck(lock, deadline) {
        Ok(c) => c,
        Err(e) => {
            say(format_args!(
                "precheck: {}; letting the fire run (fail open)",
                words(&e)
            ));
            return Ending::FailedOpen;
        }
    };
    let name = checked.name;
    match checked.found {
        Found::Held(holding) => {
            let why = holding.map(|h| match h {
                Holding::Run(h) => super::held_message(&name, &h, deadline),
                Holding::Lease(row) => format!(
                    "another run of `{name}` holds the lease as {}",
                    super::view::describe_lease(&row)
                ),
                _ => format!("`{name}` is held"),
            });
            // Fail open: a bad URL is said, and the answer stays 75.
            match super::ping::urls(&a.ping.urls, a.ping.file.as_deref())
                .and_then(|u| Pings::new(&u, a.quiet, deadline))
            {
                Ok(mut p) => {
                    let held = format!("`{name}` is held");
                    p.skipped(why.as_deref().unwrap_or(&held));
                }
                Err(e) => say(format_args!("precheck: {e}")),
            }
            if let Some(why) = why.filter(|_| !a.quiet) {
                say(why);
            }
            Ending::Skipped {
                held_exit: exit::HELD,
            }
        }
        Found::Free(None) => Ending::Done,
        Found::Free(Some(reason)) => {
            say(format_args!(
                "precheck: cleared the stale lock `{name}`: {reason}"
            ));
            Ending::Done
        }
        Found::Unknown(why) => {
            say(format_args!(
                "precheck: `{name}` cannot be judged ({why}); letting the fire run (fail open)"
            ));
            Ending::FailedOpen
        }
        // A finding this command does not know: the fire runs.
        _ => Ending::FailedOpen,
    }
}
