//! A job run in a place: the one run flow, for every place.
//!
//! [`run`] asks the place to take the lock for the job ([`Place::take`]:
//! as the job's busy policy says, replacing the live run when asked, its
//! skip or its start recorded in the lock's event log); supervises the
//! command under it ([`crate::supervise`]: signals forwarded, the time
//! and idleness limits, a store's lease watched); records its end; and
//! lets the lock go, or leaves it to the run's processes that outlive the
//! command. What a program says of each moment, and the pings it sends,
//! are its [`RunObserver`]'s; how it exits is computed from the
//! [`JobEnd`] (or [`RunError`]) that `run` returns.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use super::{Lock, Place, PlaceError};
use crate::error::{Error, HeldBy};
use crate::lock::{BusyPolicy, TakeOver};
use crate::observer::RunEnd;
use crate::procfs::ProcId;
use crate::store::{LeaseRow, WaiterRow};
use crate::supervise::{self, Exit, RunOptions, RunOutcome};

/// What a program is told of a run's moments, as [`run`]
/// goes (what it records in the lock's event log is the place's). Every
/// method does nothing unless implemented.
pub trait RunObserver {
    /// The lock was busy: the job is skipped (the skip recorded).
    fn skipped(&mut self, skip: &Skip) {
        let _ = skip;
    }

    /// The live run of `held` is about to be stopped so that this one
    /// takes its place.
    fn stopping(&mut self, held: &HeldBy) {
        let _ = held;
    }

    /// The live run of `held` was stopped (with `signal`, by name) so
    /// that this one takes its place.
    fn stopped(&mut self, held: &HeldBy, signal: &str) {
        let _ = (held, signal);
    }

    /// A stale lock was taken over on the way in: `from` says whose it
    /// was (when its record was readable) and why it was stale. Told
    /// before [`RunObserver::started`].
    fn took_over(&mut self, from: &TakeOver) {
        let _ = from;
    }

    /// Something a waiter says once while it waits on.
    fn noticed(&mut self, notice: Notice) {
        let _ = notice;
    }

    /// The run began, holding the lock.
    fn started(&mut self, started: &Started) {
        let _ = started;
    }
}

/// Both, in order: the first, then the second.
impl<A: RunObserver, B: RunObserver> RunObserver for (A, B) {
    fn skipped(&mut self, skip: &Skip) {
        self.0.skipped(skip);
        self.1.skipped(skip);
    }

    fn stopping(&mut self, held: &HeldBy) {
        self.0.stopping(held);
        self.1.stopping(held);
    }

    fn stopped(&mut self, held: &HeldBy, signal: &str) {
        self.0.stopped(held, signal);
        self.1.stopped(held, signal);
    }

    fn took_over(&mut self, from: &TakeOver) {
        self.0.took_over(from);
        self.1.took_over(from);
    }

    fn noticed(&mut self, notice: Notice) {
        self.0.noticed(notice);
        self.1.noticed(notice);
    }

    fn started(&mut self, started: &Started) {
        self.0.started(started);
        self.1.started(started);
    }
}

/// An observer that is told nothing it acts on.
impl RunObserver for () {}

/// Something a waiter says once, while it waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// The store has no line that this role may use: the waiters are
    /// served in no order (the first to look once the lease is free takes
    /// it).
    Unordered {
        /// What the store lacks (its [`LineSetup`](crate::store::LineSetup)'s
        /// `what`).
        what: &'static str,
    },
}

/// Why a take of a store's lease gave up.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Refused {
    /// A live lease holds it.
    Held,
    /// The lease is free, but live waiters are ahead in line.
    Behind {
        /// How many.
        ahead: u64,
        /// The first of them, when it could be read.
        first: Option<WaiterRow>,
    },
    /// A queued take found the queue seat held by another waiter: this
    /// live one (not yet the lease's holder when last seen), or `None`
    /// for one that came and went while it looked.
    Queued(Option<Box<WaiterRow>>),
}

/// What a shell exits with when it cannot find a command.
const NOT_FOUND: i32 = 127;

/// What a shell exits with when it finds a command but cannot execute it.
const NOT_EXECUTABLE: i32 = 126;

/// A job: the command, and how it is run under its lock.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Job {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// What to do when a live run holds the lock.
    pub busy: BusyPolicy,
    /// Stop the live run (TERM, then KILL after this grace) and take its
    /// place, instead of what `busy` says (a place that cannot refuses
    /// it: [`super::Feature::Replace`]).
    pub replace: Option<Duration>,
    /// Gives up taking the lock at this instant, whatever the wait.
    pub deadline: Option<Instant>,
    /// How the command is supervised.
    pub run: RunOptions,
    /// A store's lease (the run's command is ended before it can run
    /// out); a lock directory's lock needs none.
    pub lease: Duration,
}

impl Job {
    /// The job of `command`: skipped when the lock is held, supervised
    /// with the default options, a lease of 30 seconds.
    pub fn new(command: Vec<OsString>) -> Job {
        Job {
            command,
            busy: BusyPolicy::Skip,
            replace: None,
            deadline: None,
            run: RunOptions::default(),
            lease: Duration::from_secs(30),
        }
    }
}

/// Why a job's command did not run: the lock was busy. (Not
/// `non_exhaustive`: a program words each, and a new one must be worded.)
#[derive(Debug)]
pub enum Skip {
    /// A live run holds the lock (a lock directory's: who, as its record
    /// and its probe say).
    Held(Box<HeldBy>),
    /// A wait ran out while a live run still held it.
    Waited {
        /// How long it waited.
        waited: Duration,
        /// Who still holds it.
        held: Box<HeldBy>,
    },
    /// A queued take found another already waiting in the queue seat.
    Queued {
        /// Who holds the lock.
        held: Box<HeldBy>,
        /// Who waits in the seat.
        waiter: Box<HeldBy>,
    },
    /// A store's lease is held, owed to waiters ahead, or queued for.
    Lease {
        /// Why.
        why: Refused,
        /// The lease's row, when it could be read (of a lock of several
        /// slots: the first live one).
        holder: Option<Box<LeaseRow>>,
    },
}

/// What [`Place::take`] gave.
pub enum Taken<'p> {
    /// The lock, held, the run's start recorded.
    Held(Box<dyn Held + 'p>),
    /// Not taken: the skip recorded.
    Skipped(Skip),
}

/// What a run told its observer it began with.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Started {
    /// The run's token (its run id's bits).
    pub token: String,
    /// The stale run whose lock this one took over, when its record was
    /// this account's and its end was never recorded (its wrapper died):
    /// its token and why it was stale.
    pub abandoned: Option<(String, String)>,
    /// The fence of a store's lease.
    pub fence: Option<i64>,
}

/// A lock taken for a run, in its place: what [`run`] needs of it.
pub trait Held {
    /// What the run began with.
    fn started(&self) -> Started;
    /// The lock side of the supervision.
    fn hold(&mut self) -> &mut dyn supervise::Hold;
    /// Records the run's end in the lock's event log; why it could not.
    fn record_end(&self, end: &RunEnd) -> Result<(), String>;
    /// What the run left running when its command exited (kept strays),
    /// told to the reaper where there is one (a lock directory's): a reap
    /// of the job ends them once idle.
    fn note_kept(&self, _kept: &[ProcId]) {}
    /// The run is over: the lock is let go.
    fn release(self: Box<Self>) -> Result<(), String>;
    /// Processes of the run outlived TERM and KILL: the run is not over,
    /// and the lock is left to them (its end, `end`, recorded where
    /// nothing would record it later).
    fn leave_to_survivors(self: Box<Self>, end: &RunEnd);
    /// The work goes on in processes that outlive the command (`kept`):
    /// the lock is left to them, named in it, and told to the reaper.
    fn leave_to_lingerers(self: Box<Self>, kept: &[ProcId]) -> Lingering;
}

/// A lock left to a run's processes that outlive its command.
#[derive(Debug)]
#[non_exhaustive]
pub struct Lingering {
    /// Why they could not be named in the lock, when they could not:
    /// those without the run's token are not seen once the wrapper exits.
    pub unnamed: Option<Error>,
    /// Whether the reaper was told what they are doing now (else it needs
    /// a second look).
    pub noted: bool,
}

/// What became of the lock once the run's command ended.
#[derive(Debug)]
pub enum Release {
    /// It was let go.
    Released,
    /// Letting it go failed, for this reason.
    Failed(String),
    /// Processes of the run would not die (the survivors of
    /// [`RunOutcome::strays`]): the lock is left to them.
    Survivors,
    /// It is left to the run's lingering processes
    /// ([`RunOutcome::lingers`]).
    Lingering(Lingering),
}

/// A job whose command ran.
#[derive(Debug)]
#[non_exhaustive]
pub struct Ran {
    /// How it ended.
    pub outcome: RunOutcome,
    /// Its end, as recorded.
    pub end: RunEnd,
    /// What became of the lock.
    pub lock: Release,
    /// Why its end could not be recorded, when it could not.
    pub unrecorded: Option<String>,
}

/// What became of a job.
#[derive(Debug)]
pub enum JobEnd {
    /// The lock was busy: the command did not run.
    Skipped(Skip),
    /// The command ran.
    Ran(Box<Ran>),
}

/// Why a job could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The lock could not be taken (other than busy).
    #[error(transparent)]
    Take(#[from] PlaceError),
    /// The command could not start (its end, 127 or 126, recorded when
    /// it was one of those), or the supervision failed.
    #[error(transparent)]
    Command(#[from] supervise::RunError),
}

impl RunError {
    /// The exit code a shell gives a command that could not start: 127
    /// (not found) or 126 (not executable); `None` for anything else.
    pub fn start_code(&self) -> Option<i32> {
        match self {
            RunError::Command(supervise::RunError::NotFound { .. }) => Some(NOT_FOUND),
            RunError::Command(supervise::RunError::NotExecutable { .. }) => Some(NOT_EXECUTABLE),
            _ => None,
        }
    }
}

/// Runs `job` under `lock` in `place`, telling `observer` of each moment
/// (see the module's docs).
///
/// The run's command is supervised by [`supervise::run`], whose terms
/// hold: the forwarded signals are blocked in the calling thread for the
/// run (block them in the program's other threads too), and the calling
/// process is the subreaper of the run (spawn nothing else meanwhile).
pub fn run(
    place: &dyn Place,
    lock: &Lock,
    job: &Job,
    observer: &mut dyn RunObserver,
) -> Result<JobEnd, RunError> {
    let mut held = match place.take(lock, job, observer)? {
        Taken::Held(h) => h,
        Taken::Skipped(skip) => {
            observer.skipped(&skip);
            return Ok(JobEnd::Skipped(skip));
        }
    };
    observer.started(&held.started());
    let started = Instant::now();
    let outcome = match supervise::run(held.hold(), &job.command, &job.run) {
        Ok(o) => o,
        Err(e) => {
            let e = RunError::Command(e);
            // A command that could not start has an end (127, 126).
            if let Some(code) = e.start_code() {
                let end = RunEnd::new(Exit::Code(code), None, started.elapsed());
                let _ = held.record_end(&end);
            }
            let _ = held.release();
            return Err(e);
        }
    };
    let end =
        RunEnd::new(outcome.exit, outcome.ended_by, started.elapsed()).with_usage(outcome.usage);
    if outcome.lingers {
        let lingering = held.leave_to_lingerers(&outcome.kept);
        return Ok(JobEnd::Ran(Box::new(Ran {
            outcome,
            end,
            lock: Release::Lingering(lingering),
            unrecorded: None,
        })));
    }
    if !outcome.strays.survivors.is_empty() {
        held.leave_to_survivors(&end);
        return Ok(JobEnd::Ran(Box::new(Ran {
            outcome,
            end,
            lock: Release::Survivors,
            unrecorded: None,
        })));
    }
    // The end is recorded before the release, so that the next run's
    // start follows it; and the command has stopped before the release
    // (PROTOCOL.md invariant 7).
    let unrecorded = held.record_end(&end).err();
    if !outcome.kept.is_empty() {
        held.note_kept(&outcome.kept);
    }
    let lock = match held.release() {
        Ok(()) => Release::Released,
        Err(e) => Release::Failed(e),
    };
    Ok(JobEnd::Ran(Box::new(Ran {
        outcome,
        end,
        lock,
        unrecorded,
    })))
}

/// The stale run a takeover closed, as [`Started::abandoned`] gives it:
/// its token and why it was stale, when its record was this account's
/// and its end never recorded.
pub(crate) fn abandoned(took: Option<&TakeOver>) -> Option<(String, String)> {
    let t = took?;
    let old = t.record.as_ref().filter(|r| r.released.is_none())?;
    let token = old.token.clone().filter(|_| old.is_ours())?;
    Some((token, t.reason.to_string()))
}
