//! `onlyone stop`, in either place: one function over the library's
//! [`onlyone::place::Place`], which words what the place did; its options.

use std::fmt;
use std::time::Duration;

use clap::Args;

use onlyone::command::compact_duration;
use onlyone::place::{StopRequest, Stopped};

use super::exit::Ending;
use super::options::{Adjust, DEFAULT_GRACE, parse_duration};
use super::place::words;
use super::{deadline_of, say};

#[derive(Debug, Args)]
pub struct Stop {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// The first signal.
    #[arg(long, value_name = "SIG", default_value = "TERM", value_parser = parse_signal)]
    pub signal: SignalArg,
    /// Grace before KILL (0: KILL right after the first signal).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = DEFAULT_GRACE)]
    pub kill_after: Duration,
    /// One budget for the whole call.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub deadline: Option<Duration>,
    /// Stop only the run whose pid is PID (the PID `status` shows), of a
    /// lock of several slots or of one.
    ///
    /// PID is the run's onlyone wrapper (the owner, for a script's hold),
    /// or its command's pid when no other run of the lock has it. Only a
    /// run that the lock proves live is chosen. When none has PID,
    /// nothing is stopped and stop exits 125, naming the pids that hold
    /// the lock. With --store, the holder whose wrapper has PID (this
    /// host's first: a pid is its host's).
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Option<u32>,
}

/// A signal given by name (`TERM`, `SIGTERM`) or number (`15`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalArg(pub rustix::process::Signal);

impl fmt::Display for SignalArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&onlyone::signal::signal_name(self.0))
    }
}

fn parse_signal(s: &str) -> Result<SignalArg, String> {
    onlyone::signal::parse_signal(s).map(SignalArg)
}

impl Adjust for Stop {}

/// What `onlyone stop --help` says after the options.
pub const AFTER_HELP: &str = "\
Sends --signal (default TERM) to the run's onlyone wrapper, which forwards it
to the command's group and ends the strays; if the wrapper is gone, to every
process of the run. After --kill-after (default 5s) everything of the run that
is left gets KILL. It waits until the lock is free, clears a record left by a
killed wrapper, and reports what it did. It never signals a process whose pid
and start time differ from the record: every signal goes through a pidfd
opened and checked against the recorded start time. Stopping a free lock
succeeds; a stale one is cleared. A lock of several slots (run --slots N):
the run of every slot, or with --pid PID only the run whose pid is PID.

Examples:
  onlyone stop sync
  onlyone stop --signal INT --kill-after 30s sync
  onlyone stop --pid 4242 sync              # one run of a lock of slots";

/// `stop`, in either place: 0 once the run is over (or was not running),
/// 125 when it would not let go, the stop failed, or no run has the pid
/// `--pid` names.
pub fn stop(place: &dyn onlyone::place::Place, a: &Stop) -> Ending {
    let how = StopRequest {
        signal: a.signal.0,
        grace: a.kill_after,
        deadline: deadline_of(a.deadline),
        pid: a.pid,
    };
    let done = match place
        .lock(&a.lock, std::num::NonZeroU32::MIN)
        .and_then(|lock| place.stop(&lock, &how))
    {
        Ok(x) => x,
        Err(e) => return super::fail(words(&e)),
    };
    let name = done.name;
    let code = stopped_code(&name, done.stopped);
    let others = others_code(&name, &done.others);
    if code == Ending::Done { others } else { code }
}

/// What `stop` says of the runs of a lock's other slots, and its code:
/// how many were stopped, and any that would not let go.
fn others_code(name: &str, others: &[Stopped]) -> Ending {
    let ended = others
        .iter()
        .filter(|s| {
            matches!(
                s,
                Stopped::Ended { .. } | Stopped::LetGo { .. } | Stopped::RanOut { .. }
            )
        })
        .count();
    if ended > 0 {
        say(format_args!(
            "stopped {ended} more run(s) of `{name}`, in its other slots"
        ));
    }
    let mut code = Ending::Done;
    for s in others {
        match s {
            Stopped::KeptOutside { keepers, after } => {
                say(super::outside_message(name, keepers, *after));
                code = Ending::Failed;
            }
            // A store's holder that did not let go in time: said as for
            // the lock's first run.
            Stopped::NotLetGo { .. } => code = stopped_code(name, s.clone()),
            _ => {}
        }
    }
    code
}

/// What `stop` says of what happened to the lock's run, and its code.
fn stopped_code(name: &str, stopped: Stopped) -> Ending {
    let ended = |who: String, took: Duration, how: String| {
        say(format_args!(
            "stopped the run of `{name}` ({who}) in {}{how}",
            compact_duration(took)
        ));
        Ending::Done
    };
    match stopped {
        Stopped::WasStale(reason) => {
            say(format_args!(
                "`{name}` was not running ({reason}); cleared its stale lock"
            ));
            Ending::Done
        }
        Stopped::Ended {
            record,
            took,
            signal,
            signalled,
            killed,
        } => {
            let killed = if killed.is_empty() {
                String::new()
            } else {
                format!("; KILL was needed for {}", super::pids(&killed))
            };
            // Another account's file: named as that account's, its word
            // of a command not repeated.
            let who = match record.other_account() {
                Some(uid) => format!(
                    "pid {}, another account's ({})",
                    record.pid,
                    onlyone::command::user_name(uid)
                ),
                None => format!(
                    "pid {}, `{}`",
                    record.pid,
                    record.cmd.as_deref().unwrap_or("?")
                ),
            };
            let signal = onlyone::signal::signal_name(signal);
            let how = format!(": {signal} to {}{killed}", super::pids(&signalled));
            ended(who, took, how)
        }
        Stopped::LetGo { holder, took } => ended(
            super::view::describe_lease_ago(&holder, took),
            took,
            String::new(),
        ),
        Stopped::RanOut { holder, took } => {
            say(format_args!(
                "the holder of `{name}` ({}) was dead: nothing released its lease, which ran \
                 out after {}",
                super::view::describe_lease_ago(&holder, took),
                compact_duration(took)
            ));
            Ending::Done
        }
        Stopped::KeptOutside { keepers, after } => {
            say(super::outside_message(name, &keepers, after));
            Ending::Failed
        }
        Stopped::NoRunWithPid { pid, holders } => {
            let held = if holders.is_empty() {
                format!("`{name}` is not running")
            } else {
                format!(
                    "it is held by {} (`onlyone status {name}` shows its runs)",
                    super::pids(&holders)
                )
            };
            say(format_args!(
                "no run of `{name}` has pid {pid}: {held}; nothing was stopped"
            ));
            Ending::Failed
        }
        Stopped::NotLetGo { holder, waited } => {
            say(format_args!(
                "asked the run of `{name}` ({}) to stop; it has not let go after {}",
                super::view::describe_lease_ago(&holder, waited),
                compact_duration(waited)
            ));
            Ending::Failed
        }
        // Not running, or a kind of outcome this command does not know:
        // the run is not held any more.
        _ => {
            say(format_args!("`{name}` is not running; nothing to stop"));
            Ending::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals() {
        for (s, n) in [("TERM", 15), ("SIGINT", 2), ("hup", 1), ("9", 9)] {
            assert_eq!(parse_signal(s).unwrap().0.as_raw(), n, "{s}");
        }
        assert_eq!(parse_signal("SIGTERM").unwrap().to_string(), "TERM");
        for bad in ["FOO", "0", "999", "-1"] {
            assert!(parse_signal(bad).is_err(), "{bad}");
        }
    }
}
