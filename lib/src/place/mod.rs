//! Where a lock lives, and what each place can do.
//!
//! A lock lives in a directory of this host (a [`LockFile`](crate::LockFile)
//! and its journal: [`dir::DirPlace`]) or in a store that several hosts
//! share (a lease of [`crate::store`] and the store's history:
//! [`store::StorePlace`]). A command is written once over both, as a
//! [`Place`]: it prechecks a lock, stops its run and reads its history
//! there, and a [`Feature`] that a place cannot give is refused
//! ([`Kind::supports`]) with why, so that an option is never silently
//! ignored. What a place finds or does is typed ([`Prechecked`],
//! [`StopDone`], [`HistoryRead`]); the caller words it.
//!
//! [`run::run`] runs a job in a place: the one run flow, for every place.

pub mod dir;
pub mod run;
pub mod store;

pub use dir::QUEUED;
pub use store::WatchdogProgram;

use std::io;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::journal::{Event, EventLog, History, SetAside};
use crate::reap::Keeper;
use crate::store::{LeaseRow, StoreError};
use crate::{HeldBy, Record, StaleReason, UnknownReason};
use run::RunObserver;
use run::{Job, Taken};

/// A place where locks live: what a command asks of a lock there.
pub trait Place {
    /// Which place this is.
    fn kind(&self) -> Kind;
    /// The lock that `given` (a name, or for a directory a path) names
    /// here, of `slots` slots: resolved once, for every call of a command.
    fn lock(&self, given: &str, slots: NonZeroU32) -> Result<Lock, PlaceError>;
    /// Takes `lock` for a run of `job`, as its busy policy says (a live
    /// run replaced first, when the job asks and the place can), the skip
    /// or the run's start recorded; `observer` hears what happens on the
    /// way (see [`run::run`], the one caller a program needs).
    fn take<'p>(
        &'p self,
        lock: &Lock,
        job: &Job,
        observer: &mut dyn RunObserver,
    ) -> Result<Taken<'p>, PlaceError>;
    /// Is `lock` held by a live run? A skip is recorded when it is; a
    /// stale lock is cleared. Every call is bounded by `deadline`.
    fn precheck(&self, lock: &str, deadline: Option<Instant>) -> Result<Prechecked, PlaceError> {
        self.precheck_slots(lock, 1, deadline)
    }
    /// As [`Place::precheck`], for a lock of `slots` slots: free when any
    /// slot is (or stale), held when every slot is.
    fn precheck_slots(
        &self,
        lock: &str,
        slots: u32,
        deadline: Option<Instant>,
    ) -> Result<Prechecked, PlaceError>;
    /// Ends the live run of `lock` as `how` asks (the stop recorded).
    fn stop(&self, lock: &str, how: &StopRequest) -> Result<StopDone, PlaceError>;
    /// The runs of `lock`, and where they were read.
    fn history(&self, lock: &str) -> Result<HistoryRead, PlaceError>;
}

/// A lock of a place, resolved once from what a command names: its name
/// as messages give it, what the place finds it by, and its number of
/// slots (never 0: a lock of one is the lock itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    name: String,
    key: LockKey,
    slots: NonZeroU32,
}

/// What a place finds a lock by.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKey {
    /// A lock file of a lock directory (its path made absolute).
    Path(std::path::PathBuf),
    /// A store's lock, by its name.
    Name(String),
}

impl Lock {
    /// The lock `key`, named `name` in messages, of `slots` slots.
    pub fn new(name: String, key: LockKey, slots: NonZeroU32) -> Lock {
        Lock { name, key, slots }
    }

    /// Its name, as messages give it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What its place finds it by.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// Its number of slots.
    pub fn slots(&self) -> u32 {
        self.slots.get()
    }
}

/// How to stop a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopRequest {
    /// The first signal (a directory's run; a store's holder uses TERM).
    pub signal: Signal,
    /// The grace between the signal and KILL.
    pub grace: Duration,
    /// Gives up at this instant.
    pub deadline: Option<Instant>,
    /// Only the run whose owner (a run's wrapper) has this pid, or whose
    /// command has it when no other run's owner or command does: chosen
    /// among the runs the lock's slots prove live, never signalled for
    /// itself. `None`: every run of the lock. In a store, the holder
    /// whose wrapper has this pid (a pid is its host's: this host's
    /// first, else another's).
    pub pid: Option<u32>,
}

/// Who holds a lock, as its place knows it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Holding {
    /// A live run of this host holds the lock file.
    Run(Box<HeldBy>),
    /// A live lease of the store.
    Lease(Box<LeaseRow>),
}

/// What a precheck found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Found {
    /// Held by a live run (the skip recorded): who, when it is known.
    Held(Option<Holding>),
    /// Free; a stale lock cleared first, for this reason.
    Free(Option<StaleReason>),
    /// It cannot be judged, for this reason: the fire runs.
    Unknown(UnknownReason),
}

/// A precheck of a lock: its name as messages give it, and what was
/// found.
#[derive(Debug, Clone)]
pub struct Prechecked {
    /// The lock's name.
    pub name: String,
    /// What was found.
    pub found: Found,
}

/// What a stop did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Stopped {
    /// Nothing held the lock.
    NotRunning,
    /// A stale lock, cleared, for this reason.
    WasStale(StaleReason),
    /// The run of this host ended.
    Ended {
        /// Its record.
        record: Box<Record>,
        /// How long the stop took.
        took: Duration,
        /// The first signal.
        signal: Signal,
        /// The pids it was sent to.
        signalled: Vec<u32>,
        /// The pids that needed KILL.
        killed: Vec<u32>,
    },
    /// Asked, the lease's holder ended its run and let go.
    LetGo {
        /// The lease as it was.
        holder: Box<LeaseRow>,
        /// How long the stop took.
        took: Duration,
    },
    /// The lease's holder was dead: nothing released the lease, and it
    /// ran out.
    RanOut {
        /// The lease as it was.
        holder: Box<LeaseRow>,
        /// After how long.
        took: Duration,
    },
    /// Held by what is not the run's own work (a session opened later on
    /// its terminal server), which a stop never ends.
    KeptOutside {
        /// What holds it.
        keepers: Vec<Keeper>,
        /// True once the stop ended what was left of the run's own work.
        after: bool,
    },
    /// No live run of the lock has the pid asked for: nothing was
    /// stopped.
    NoRunWithPid {
        /// The pid asked for.
        pid: u32,
        /// The owners' pids of the live runs of the lock (its wrappers',
        /// for runs), in slot order; empty when none holds it.
        holders: Vec<u32>,
    },
    /// Asked, the lease's holder has not let go by the deadline.
    NotLetGo {
        /// The lease as it was.
        holder: Box<LeaseRow>,
        /// How long it was waited for.
        waited: Duration,
    },
}

/// A stop of a lock: its name as messages give it, and what happened.
#[derive(Debug, Clone)]
pub struct StopDone {
    /// The lock's name.
    pub name: String,
    /// What happened.
    pub stopped: Stopped,
    /// What happened to the runs of the lock's other slots, those that
    /// held one (a lock of several slots); empty for a lock of one.
    pub others: Vec<Stopped>,
}

/// The runs of a lock: its name as messages give it, its history, and
/// where that was read (a journal's path, a store's URL).
#[derive(Debug, Clone)]
pub struct HistoryRead {
    /// The lock's name.
    pub name: String,
    /// Its runs.
    pub history: History,
    /// Where they were read.
    pub source: String,
}

/// Why a place could not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceError {
    /// The lock (its name, directory or file) failed.
    #[error(transparent)]
    Lock(#[from] crate::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A journal could not be read.
    #[error("cannot read the journal `{}`: {source}", path.display())]
    Journal {
        /// Its path.
        path: std::path::PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The lock directory could not be listed.
    #[error("cannot list the lock directory `{}`: {source}", dir.display())]
    Listing {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A path was given where a store keys its locks by name.
    #[error("`{0}` is a path; a store's lock is a name")]
    PathForName(String),
    /// A live holder of the lock took it with another number of slots.
    #[error(
        "`{name}` is held with {held} slot{}, and this take asks for {asked}: a lock's number \
         of slots changes once no run holds it",
        if *.held == 1 { "" } else { "s" }
    )]
    SlotsDiffer {
        /// The lock's name.
        name: String,
        /// The number a live holder took it with.
        held: u32,
        /// The number this take asked for.
        asked: u32,
    },
    /// A take that waits in the queue seat, and the store has no line
    /// this role may use.
    #[error(
        "a queued take needs the store's {}, which the store `{url}` does not have or this \
         role may not use (a store set up before it existed); have it created with:\n{}",
        .setup.what,
        .setup.how
    )]
    NoLine {
        /// The store's URL.
        url: String,
        /// What the line is and how to set it up.
        setup: crate::store::LineSetup,
    },
    /// The lease's timing cannot keep its promise.
    #[error(transparent)]
    LeaseTiming(#[from] crate::store::lease::LeaseTimingError),
    /// A forwarded signal came while the take waited; nothing was taken.
    #[error("a signal ({}) came while waiting for the lock", crate::signal::signal_name(*.0))]
    Signalled(Signal),
    /// The run's watchdog could not be started: without it a killed
    /// wrapper would leave its command running past the lease, so the run
    /// was not started.
    #[error(
        "cannot start the run's watchdog ({0}); without it a killed wrapper would leave its \
         command running past the lease, so the run was not started"
    )]
    Watchdog(#[source] io::Error),
}

/// Something a place says on the side while it answers, for the caller
/// to word (or not).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Note<'a> {
    /// An earlier version's journal beside a lock was set aside.
    SetAside(&'a SetAside),
    /// An event could not be written to a lock's event log.
    Unlogged {
        /// What the log is ("the journal `PATH`").
        log: &'a str,
        /// Why.
        error: &'a io::Error,
    },
}

/// Who hears a place's [`Note`]s.
pub type Notes = std::sync::Arc<dyn Fn(Note<'_>) + Send + Sync>;

/// Appends `ev` to `log`, best effort: a failure is told to `notes`
/// (none: said to nobody).
fn log_event(log: &dyn EventLog, ev: &Event, notes: Option<&Notes>) {
    if let Err(error) = log.append(ev)
        && let Some(n) = notes
    {
        n(Note::Unlogged {
            log: &log.describe(),
            error: &error,
        });
    }
}

/// Where a lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A directory of this host: a lock file (its journal in the user's
    /// state directory).
    Directory,
    /// A store shared by hosts: a lease, renewed while the run lasts.
    Store,
}

/// What a command may ask of a place beyond taking, inspecting and
/// stopping a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feature {
    /// Leaving the lock held for processes that outlive the command.
    Linger,
    /// Stopping the live run, then taking the lock in its place.
    Replace,
    /// Ending a run with a signal of the caller's choice.
    StopSignal,
    /// Choosing the grace between TERM and KILL when stopping a run.
    StopGrace,
    /// Holding the lock for a shell script, with no process of onlyone
    /// beside it.
    ScriptHold,
}

/// A feature a place cannot give, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{feature:?} is not supported by {place:?}: {why}")]
#[non_exhaustive]
pub struct Unsupported {
    /// The place.
    pub place: Kind,
    /// What was asked.
    pub feature: Feature,
    /// Why it cannot be given there.
    pub why: &'static str,
}

impl Kind {
    /// Whether this place can give `feature`; if not, why.
    pub fn supports(self, feature: Feature) -> Result<(), Unsupported> {
        let why = match (self, feature) {
            (Kind::Directory, _) => return Ok(()),
            (Kind::Store, Feature::Linger) => {
                "a lease is renewed by the wrapper, which exits with the command, so nothing \
                 would keep the lock for the processes that outlive it (they would run beside \
                 the next host's run)"
            }
            (Kind::Store, Feature::Replace) => {
                "the live run may be on another host, which no signal from here reaches; a \
                 stop is a request that its holder sees at its next renewal"
            }
            (Kind::Store, Feature::StopSignal) => {
                "a stop request asks the holder, on whatever host, to end its run, and it does \
                 so with TERM, then KILL after the grace it was started with"
            }
            (Kind::Store, Feature::StopGrace) => {
                "the holder, on whatever host, ends its command with the grace it was started \
                 with, which must fit in its lease"
            }
            (Kind::Store, Feature::ScriptHold) => {
                "a lease lasts only while a wrapper renews it, and a shell script's hold has no \
                 process of onlyone beside it"
            }
        };
        Err(Unsupported {
            place: self,
            feature,
            why,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_gives_everything_and_a_store_says_why_not() {
        let all = [
            Feature::Linger,
            Feature::Replace,
            Feature::StopSignal,
            Feature::StopGrace,
            Feature::ScriptHold,
        ];
        for f in all {
            assert_eq!(Kind::Directory.supports(f), Ok(()));
            let e = Kind::Store.supports(f).unwrap_err();
            assert_eq!((e.place, e.feature), (Kind::Store, f));
            assert!(
                !e.why.contains("--"),
                "the library names no flag: {}",
                e.why
            );
        }
    }
}
