//! Where a lock lives, as the commands see it: a lock directory ([`Ctx`])
//! or the store (`store::StorePlace`). Each command is one function over a
//! [`Place`]: `run` ([`super::run::run`]), [`precheck`], `history`
//! ([`super::history::history`]), `check` and `metrics`
//! ([`super::monitor`]), `status` ([`super::status::status`]), [`stop`]
//! and the refusals of what a place cannot do ([`refuse`]). A place gives
//! what differs: how a lock is taken, looked at and stopped there; the
//! command says what happened and exits.

use std::time::Instant;

use onlyone::journal::{History, LockNow};

use super::exit::{self, Code, Ending};
use super::ping::Pings;
use super::run::RunPlace;
use super::view::Seen;
use super::view::Shown;
use super::{Ctx, args, deadline_of, say};

/// What `precheck` found, in either place.
pub enum Found {
    /// Held by a live run (the skip recorded): what to say of it, when
    /// its holder is known.
    Held(Option<String>),
    /// Free; a stale lock cleared first, for this reason.
    Free(Option<String>),
    /// It cannot be judged, for this reason: the fire runs.
    Unknown(String),
}

/// What `stop` did, in either place.
pub enum Stopped {
    /// Nothing held the lock.
    NotRunning,
    /// A stale lock, cleared, for this reason.
    WasStale(String),
    /// The run ended: who it was, how long it took, and how (the signals,
    /// where this process sent them).
    Ended {
        /// "pid 4242, `./sync.sh`".
        who: String,
        /// How long the stop took.
        took: std::time::Duration,
        /// ": TERM to pid 4242", or nothing for a request.
        how: String,
    },
    /// Its holder was dead: nothing released it, and it ran out.
    RanOut {
        /// Who held it.
        who: String,
        /// After how long.
        took: std::time::Duration,
    },
    /// Held by what is not the run's own work (a session opened later on
    /// its terminal server), which `stop` never ends: what holds it and
    /// what to do, as a sentence.
    KeptOutside(String),
    /// Asked, it has not let go by the deadline.
    NotLetGo {
        /// Who holds it.
        who: String,
        /// How long it was waited for.
        waited: std::time::Duration,
    },
}

/// `stop`, in either place: 0 once the run is over (or was not running),
/// 125 when it would not let go or the stop failed.
pub fn stop(place: &dyn Place, a: &args::Stop) -> Code {
    use onlyone::compact_duration;
    let (name, stopped) = match place.stop(a) {
        Ok(x) => x,
        Err(e) => return super::fail(e),
    };
    match stopped {
        Stopped::NotRunning => {
            say(format_args!("`{name}` is not running; nothing to stop"));
            Ending::Done.code()
        }
        Stopped::WasStale(reason) => {
            say(format_args!(
                "`{name}` was not running ({reason}); cleared its stale lock"
            ));
            Ending::Done.code()
        }
        Stopped::Ended { who, took, how } => {
            say(format_args!(
                "stopped the run of `{name}` ({who}) in {}{how}",
                compact_duration(took)
            ));
            Ending::Done.code()
        }
        Stopped::RanOut { who, took } => {
            say(format_args!(
                "the holder of `{name}` ({who}) was dead: nothing released its lease, which ran \
                 out after {}",
                compact_duration(took)
            ));
            Ending::Done.code()
        }
        Stopped::KeptOutside(why) => {
            say(why);
            Ending::Failed.code()
        }
        Stopped::NotLetGo { who, waited } => {
            say(format_args!(
                "asked the run of `{name}` ({who}) to stop; it has not let go after {}",
                compact_duration(waited)
            ));
            Ending::Failed.code()
        }
    }
}

/// What `check` and `metrics` know of one lock (or why nothing is).
pub type Named = (String, Result<Seen, String>);

/// A place where locks live.
pub trait Place: RunPlace {
    /// `precheck`: is `lock` held by a live run? Its name as messages
    /// give it, and what was found; every call bounded by `deadline` (an
    /// error is said, and the fire runs).
    fn precheck(&self, lock: &str, deadline: Option<Instant>) -> Result<(String, Found), String>;
    /// The runs of `lock`: its name as messages give it, its history, and
    /// where that was read.
    fn history(&self, lock: &str) -> Result<(String, History, String), String>;
    /// What `check` and `metrics` need of each lock named (or of every
    /// lock, none named).
    fn seen(&self, locks: &[String]) -> Result<Vec<Named>, String>;
    /// What `status` shows of the locks named (or of every lock, none
    /// named), every call bounded by `deadline`.
    fn shown(&self, named: &[String], deadline: Option<Instant>) -> Result<Shown, String>;
    /// `stop`: ends the live run of `a.lock` (the stop recorded); its
    /// name as messages give it, and what happened.
    fn stop(&self, a: &args::Stop) -> Result<(String, Stopped), String>;
}

/// `precheck`: 75 only while a live run holds the lock; 0 otherwise, on
/// any error included (fail open: it never blocks a fire).
pub fn precheck(place: &dyn Place, a: &args::Precheck) -> Code {
    let deadline = deadline_of(a.deadline);
    match place.precheck(&a.lock, deadline) {
        Ok((name, Found::Held(why))) => {
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
        Ok((_, Found::Free(None))) => Ending::Done.code(),
        Ok((name, Found::Free(Some(reason)))) => {
            say(format_args!(
                "precheck: cleared the stale lock `{name}`: {reason}"
            ));
            Ending::Done.code()
        }
        Ok((name, Found::Unknown(why))) => {
            say(format_args!(
                "precheck: `{name}` cannot be judged ({why}); letting the fire run (fail open)"
            ));
            Ending::FailedOpen.code()
        }
        Err(e) => {
            say(format_args!(
                "precheck: {e}; letting the fire run (fail open)"
            ));
            Ending::FailedOpen.code()
        }
    }
}

impl Place for Ctx {
    fn precheck(&self, lock: &str, deadline: Option<Instant>) -> Result<(String, Found), String> {
        self.precheck_found(lock, deadline)
    }

    fn history(&self, lock: &str) -> Result<(String, History, String), String> {
        let (journal, name, lock) = self.journal_for_reading(lock)?;
        let path = journal.path().display().to_string();
        let mut h = journal
            .history()
            .map_err(|e| format!("cannot read the journal `{path}`: {e}"))?;
        // Looked at after the journal is read (see `History::close_over`).
        match lock.map(|l| l.inspect()) {
            Some(Ok(seen)) => h.close_over(super::view::lock_now(seen.as_ref())),
            None | Some(Err(onlyone::Error::MissingDir { .. })) => h.close_over(LockNow::Free),
            Some(Err(_)) => {}
        }
        Ok((name, h, path))
    }

    fn seen(&self, locks: &[String]) -> Result<Vec<Named>, String> {
        self.seen_in_dir(locks)
    }

    fn shown(&self, named: &[String], deadline: Option<Instant>) -> Result<Shown, String> {
        self.shown_in_dir(named, deadline)
    }

    fn stop(&self, a: &args::Stop) -> Result<(String, Stopped), String> {
        self.stop_run(a)
    }
}
