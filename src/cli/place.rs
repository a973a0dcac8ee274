//! Where a lock lives, as the commands see it: a lock directory ([`Ctx`],
//! over the library's `DirPlace`) or the store (`store::StorePlace`, over
//! the library's). [`precheck`] and [`stop`] are one function each over
//! the library's [`onlyone::place::Place`], and word what it found or
//! did; `history` ([`super::history::history`]), `check` and `metrics`
//! ([`super::monitor`]), `status` ([`super::status::status`]) and `run`
//! ([`super::run::run`]) take the command's [`Place`], which adds the
//! command's own views; what a place cannot do is refused first
//! ([`super::plan::refused_by_place`]). The command says what happened
//! and exits.

use std::time::{Duration, Instant};

use onlyone::compact_duration;
use onlyone::place::{Found, Holding, PlaceError, StopRequest, Stopped};

use super::exit::{self, Code, Ending};
use super::ping::Pings;
use super::view::Seen;
use super::view::Shown;
use super::{Ctx, args, deadline_of, say};

/// A place's error as the command says it.
pub fn words(e: &PlaceError) -> String {
    match e {
        PlaceError::PathForName(lock) => format!(
            "`{lock}` is a path; with --store a lock is a name (a letter or digit, then up \
             to 63 letters, digits, `.`, `_` or `-`)"
        ),
        PlaceError::Store(e) => super::words::store_error(e),
        e => e.to_string(),
    }
}

/// `stop`, in either place: 0 once the run is over (or was not running),
/// 125 when it would not let go, the stop failed, or no run has the pid
/// `--pid` names.
pub fn stop(place: &dyn onlyone::place::Place, a: &args::Stop) -> Code {
    let how = StopRequest {
        signal: a.signal.0,
        grace: a.kill_after,
        deadline: deadline_of(a.deadline),
        pid: a.pid,
    };
    let done = match place.stop(&a.lock, &how) {
        Ok(x) => x,
        Err(e) => return super::fail(words(&e)),
    };
    let name = done.name;
    let code = stopped_code(&name, done.stopped);
    let others = others_code(&name, &done.others);
    if code == Ending::Done.code() {
        others
    } else {
        code
    }
}

/// What `stop` says of the runs of a lock's other slots, and its code:
/// how many were stopped, and any that would not let go.
fn others_code(name: &str, others: &[Stopped]) -> Code {
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
    let mut code = Ending::Done.code();
    for s in others {
        match s {
            Stopped::KeptOutside { keepers, after } => {
                say(super::outside_message(name, keepers, *after));
                code = Ending::Failed.code();
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
fn stopped_code(name: &str, stopped: Stopped) -> Code {
    let ended = |who: String, took: Duration, how: String| {
        say(format_args!(
            "stopped the run of `{name}` ({who}) in {}{how}",
            compact_duration(took)
        ));
        Ending::Done.code()
    };
    match stopped {
        Stopped::WasStale(reason) => {
            say(format_args!(
                "`{name}` was not running ({reason}); cleared its stale lock"
            ));
            Ending::Done.code()
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
                    onlyone::user_name(uid)
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
            Ending::Done.code()
        }
        Stopped::KeptOutside { keepers, after } => {
            say(super::outside_message(name, &keepers, after));
            Ending::Failed.code()
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
            Ending::Failed.code()
        }
        Stopped::NotLetGo { holder, waited } => {
            say(format_args!(
                "asked the run of `{name}` ({}) to stop; it has not let go after {}",
                super::view::describe_lease_ago(&holder, waited),
                compact_duration(waited)
            ));
            Ending::Failed.code()
        }
        // Not running, or a kind of outcome this command does not know:
        // the run is not held any more.
        _ => {
            say(format_args!("`{name}` is not running; nothing to stop"));
            Ending::Done.code()
        }
    }
}

/// What `check` and `metrics` know of one lock (or why nothing is).
pub type Named = (String, Result<Seen, String>);

/// A place where locks live, as the commands see it: the library's
/// [`onlyone::place::Place`] (its [`Place::seam`]) with what `check`,
/// `metrics` and `status` read of it. Those reads stay in the command:
/// their results ([`Seen`], [`Shown`]) are the command's own views.
pub trait Place {
    /// The place as the library knows it: take, precheck, stop, history.
    fn seam(&self) -> &dyn onlyone::place::Place;
    /// Which place this is.
    fn kind(&self) -> onlyone::place::Kind {
        self.seam().kind()
    }
    /// The store's URL, with a store.
    fn store_url(&self) -> Option<String> {
        None
    }
    /// What `check` and `metrics` need of each lock named (or of every
    /// lock, none named), every call bounded by `deadline`: a lock not
    /// reached by then is an error that says so.
    fn seen(&self, locks: &[String], deadline: Option<Instant>) -> Result<Vec<Named>, String>;
    /// What `status` shows of the locks named (or of every lock, none
    /// named), every call bounded by `deadline`.
    fn shown(&self, named: &[String], deadline: Option<Instant>) -> Result<Shown, String>;
}

/// `precheck`: 75 only while a live run holds the lock; 0 otherwise, on
/// any error included (fail open: it never blocks a fire).
pub fn precheck(place: &dyn onlyone::place::Place, a: &args::Precheck) -> Code {
    let deadline = deadline_of(a.deadline);
    let checked = match place.precheck_slots(&a.lock, a.slots.count(), deadline) {
        Ok(c) => c,
        Err(e) => {
            say(format_args!(
                "precheck: {}; letting the fire run (fail open)",
                words(&e)
            ));
            return Ending::FailedOpen.code();
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
            .code()
        }
        Found::Free(None) => Ending::Done.code(),
        Found::Free(Some(reason)) => {
            say(format_args!(
                "precheck: cleared the stale lock `{name}`: {reason}"
            ));
            Ending::Done.code()
        }
        Found::Unknown(why) => {
            say(format_args!(
                "precheck: `{name}` cannot be judged ({why}); letting the fire run (fail open)"
            ));
            Ending::FailedOpen.code()
        }
        // A finding this command does not know: the fire runs.
        _ => Ending::FailedOpen.code(),
    }
}

impl Place for Ctx {
    fn seam(&self) -> &dyn onlyone::place::Place {
        &**self
    }

    fn seen(&self, locks: &[String], deadline: Option<Instant>) -> Result<Vec<Named>, String> {
        self.seen_in_dir(locks, deadline)
    }

    fn shown(&self, named: &[String], deadline: Option<Instant>) -> Result<Shown, String> {
        self.shown_in_dir(named, deadline)
    }
}
