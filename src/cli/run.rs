//! `run`: a command under the lock, in either place, as the library runs
//! it ([`onlyone::place::run::run`]); this file words its moments
//! ([`Words`], the run's observer), sends its pings (the end's once the
//! lock is let go) and says how the run exits ([`ending`]); and its
//! options ([`Run`]), with what is refused of them before anything runs
//! ([`refused_combination`], [`lease_misfit`], [`unsupported`]).

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;

use onlyone::command::compact_duration;
use onlyone::place::run::{
    self, Job, JobEnd, Notice, Ran, Refused, Release, RunError, RunObserver, Skip, Started,
};
use onlyone::place::{Feature, Kind, PlaceError};
use onlyone::supervise::{EndedBy, Exit, RunOutcome};
use onlyone::{HeldBy, TakeOver};

use super::exit::{self, Ending};
use super::options::{
    Adjust, BusyArgs, DEFAULT_GRACE, FireScheduleArg, LateArg, PingArgs, SlotsArg, in_order,
    parse_duration, parse_wait,
};
use super::ping::{self, End, Pings};
use super::place::Place;
use super::tail::Capture;
use super::view::describe_lease;
use super::{deadline_of, fail, pid_list, pids, say};

#[derive(Debug, Args)]
pub struct Run {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
    // What to do when the lock is held.
    #[command(flatten)]
    pub busy: BusyArgs,
    #[command(flatten)]
    pub slots: SlotsArg,
    /// Stop the running one (TERM, grace, KILL), then run.
    ///
    /// As `onlyone stop` does (Kubernetes' `Replace`). With --slots N, a
    /// free slot is taken and nothing is stopped; when all N are held,
    /// one run is stopped, the oldest (held the longest), and a slot
    /// taken once one frees.
    #[arg(long, conflicts_with = "queue")]
    pub replace: bool,
    /// End the command after DUR (exit 124). More than 0: for no limit,
    /// leave it out.
    ///
    /// TERM to the command's process group, then KILL after --kill-after.
    /// 0 is refused: `timeout 0` means no limit, and neither reading is
    /// guessed.
    #[arg(long, value_name = "DUR", value_parser = parse_limit, allow_negative_numbers = true)]
    pub max_time: Option<Duration>,
    /// End the run once all its processes have used no CPU and done no I/O
    /// for DUR (exit 124). More than 0. Not with --linger (`onlyone reap
    /// --idle DUR` ends a lingering run once idle).
    ///
    /// The run is over when all its processes have been idle for DUR
    /// (doc/operations.md, "Idle"): TERM, grace, KILL, wait until they are
    /// gone, release; exit 124 with a message saying the run was idle for
    /// DUR. A busy run, or one only between steps, is never ended.
    #[arg(long, value_name = "DUR", value_parser = parse_limit, allow_negative_numbers = true)]
    pub idle_timeout: Option<Duration>,
    /// Grace between TERM and KILL (0: KILL right after TERM).
    ///
    /// For --max-time, --idle-timeout and for the run's leftover processes.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = DEFAULT_GRACE)]
    pub kill_after: Duration,
    /// With --store: the lease L the server grants at each renewal (every
    /// L/6). The command is ended before a lease not renewed in time can
    /// run out, so --kill-after must fit: L/6 + L/10 + grace + max(L/15,
    /// 100ms) < L (30s allows up to 19s).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = "30s")]
    pub lease: Duration,
    /// Leave the run's leftover processes running when the command exits
    /// (and release the lock).
    #[arg(long, conflicts_with = "linger")]
    pub keep_strays: bool,
    /// When the command exits, the run's processes that outlive it keep the
    /// lock held (work handed to tmux, screen, a terminal server); `onlyone
    /// reap` ends them once idle. Not with --max-time or --idle-timeout,
    /// which would apply to the command alone.
    ///
    /// The processes that outlive it are its descendants and the processes
    /// carrying its token; onlyone exits with the command's code (see
    /// doc/operations.md, "Runners that are not the work's parent"). When
    /// none is left, the record stays and is stale: the next run takes it
    /// over at once (quietly with -q). It is not released, because a
    /// terminal server may exec the work a moment after the command
    /// returned, and a release then would let the next fire in beside it.
    #[arg(long)]
    pub linger: bool,
    // The schedule, and what to do about it before the lock.
    #[command(flatten)]
    pub schedule: FireScheduleArg,
    #[command(flatten)]
    pub late: LateArg,
    #[command(flatten)]
    pub fire: FireArgs,
    // Where to ping.
    #[command(flatten)]
    pub ping: PingArgs,
    /// No message on a skip or a takeover (cron mails whatever a job
    /// prints).
    #[arg(short, long)]
    pub quiet: bool,
}

/// A limit (`--max-time`, `--idle-timeout`): a duration more than 0. `0`
/// would end the run at once, while `timeout 0` means no limit: refused,
/// so that neither reading is guessed.
fn parse_limit(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!(
            "`{s}` would end the run as soon as it starts: a limit is more than 0 (for no \
             limit, leave the option out)"
        ));
    }
    Ok(d)
}

impl Adjust for Run {
    fn adjust(cmd: clap::Command) -> clap::Command {
        in_order(
            cmd,
            &[
                "lock",
                "command",
                "slots",
                "wait",
                "replace",
                "queue",
                "max_time",
                "idle_timeout",
                "kill_after",
                "lease",
                "held_exit",
                "keep_strays",
                "linger",
                "schedule",
                "late",
                "catch_up",
                "catch_up_within",
                "jitter",
                "spread",
                "deadline",
                "ping",
                "ping_file",
                "quiet",
            ],
        )
    }
}

impl Run {
    /// What the supervision needs of these options (`--linger` is set by
    /// the directory store's run alone: a lease has no lingering runs).
    pub fn run_options(&self) -> onlyone::supervise::RunOptions {
        let mut opts = onlyone::supervise::RunOptions::default();
        opts.max_time = self.max_time;
        opts.kill_after = self.kill_after;
        opts.keep_strays = self.keep_strays;
        opts.idle_timeout = self.idle_timeout;
        opts
    }
}

/// What `onlyone run --help` says after the options.
pub const AFTER_HELP: &str = "\
The lock is held while onlyone or any process of the run lives (the command,
its process group, anything carrying $ONLYONE_TOKEN), even after kill -9 of
onlyone. When the command exits, its leftover processes are ended (TERM, then
KILL after --kill-after) before the lock is released.

Examples:
  onlyone run sync -- ./sync.sh --all
  onlyone run -q sync -- ./sync.sh          # cron: no mail on a skip
  onlyone run --wait 10m sync -- ./sync.sh  # wait for the running one
  onlyone run --replace sync -- ./sync.sh   # stop the running one, then run
  onlyone run --max-time 1h sync -- ./sync.sh
  onlyone run --held-exit 0 sync -- ./sync.sh  # a skip is not an error
  onlyone run --schedule '0 2 * * *' --spread 10m sync -- ./sync.sh
                                            # missed fires recorded; a stable wait
  onlyone run --catch-up sync -- ./sync.sh  # at boot: once, if the 02:00 was missed
  onlyone run --linger agent -- sh -c \
    'tmux -L agent new-session -d -e ONLYONE_TOKEN=\"$ONLYONE_TOKEN\" ./agent'
                                            # the agent, in a tmux server of its own
                                            # (-L: not yours), holds the lock";

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
    /// or the store keeps); with a store, it runs on one host.
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

/// `run`, in either place, with its pings (the end's once the lock is
/// released).
pub(super) fn run(place: &dyn Place, lock: &onlyone::place::Lock, a: &Run) -> Ending {
    let urls = ping::urls(&a.ping.urls, a.ping.file.as_deref());
    let mut pings = match urls.and_then(|u| Pings::new(&u, a.quiet, deadline_of(a.busy.deadline))) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if let Some(why) = unsupported(place.kind(), a) {
        return fail(why);
    }
    super::journal::hush(a.quiet);
    let mut words = Words {
        name: lock.name().to_owned(),
        kind: place.kind(),
        store: place.store_url(),
        a,
        pings: &mut pings,
        capture: None,
    };
    let ended = run::run(place.seam(), lock, &job(a), &mut words);
    let capture = words.capture.take();
    let name = words.name.clone();
    let kind = words.kind;
    let (code, end) = match &ended {
        Ok(JobEnd::Skipped(_)) => {
            pings.refused();
            return Ending::Skipped {
                held_exit: a.busy.held_exit,
            };
        }
        Ok(JobEnd::Ran(ran)) => (ran_code(ran, &name, kind, a), end_ping(&ran.outcome, ran)),
        Err(e) => match e.start_code() {
            // The command could not start: its end (126, 127) is pinged.
            Some(c) => {
                say(e);
                (exit::start_failure(c), Some(End::Exit(c as u8)))
            }
            None => {
                let code = failed(e, &name, a);
                if matches!(e, RunError::Take(_)) {
                    pings.refused();
                    return code;
                }
                (code, None)
            }
        },
    };
    let (tail, delivery) = capture.map(Capture::finish).unzip();
    if let Some(end) = end {
        pings.end_with(&end, tail.as_ref());
    }
    // The output is written out before onlyone exits, however slow its
    // reader: the lock is free and the end pinged by now.
    if let Some(d) = delivery {
        d.wait();
    }
    code
}

/// The job `run`'s options describe.
fn job(a: &Run) -> Job {
    let mut job = Job::new(a.command.clone());
    job.busy = a.busy.policy();
    job.replace = a.replace.then_some(a.kill_after);
    job.deadline = deadline_of(a.busy.deadline);
    job.run = a.run_options();
    job.run.linger = a.linger;
    job.run.withheld_env = ping::WITHHELD;
    job.lease = a.lease;
    job
}

/// How a run that started ends, for its end ping.
fn end_ping(o: &RunOutcome, ran: &Ran) -> Option<End> {
    if matches!(ran.lock, Release::Survivors) {
        return Some(End::Fail);
    }
    Some(match (o.exit, o.ended_by) {
        (_, Some(EndedBy::Idle(_))) => End::Exit(0),
        (_, Some(EndedBy::LeaseLost)) | (Exit::Signal(_), _) => End::Fail,
        (Exit::Code(c), _) => End::Exit(c.clamp(0, 255) as u8),
    })
}

/// What a run that could not be taken or started says, and its code.
fn failed(e: &RunError, name: &str, a: &Run) -> Ending {
    match e {
        RunError::Take(PlaceError::Signalled(sig)) => Ending::Interrupted(*sig),
        RunError::Take(PlaceError::NoLine { url, setup }) => fail(format_args!(
            "--queue needs the store's {}, which the store `{url}` does not have or this role \
             may not use (a store set up before it existed); have it created with:\n{}\
             (doc/store.md, \"Setup and the least privileges\"), or wait without the queue \
             (--wait DUR)",
            setup.what, setup.how
        )),
        RunError::Take(PlaceError::LeaseTiming(e)) => fail(super::words::lease_timing_error(e)),
        RunError::Take(e) => fail(super::place::words(e)),
        RunError::Command(e) => {
            let _ = (name, a);
            say(e);
            exit::run_error(e)
        }
    }
}

/// What a run that ran says of how it ended, and its code.
fn ran_code(ran: &Ran, name: &str, kind: Kind, a: &Run) -> Ending {
    let o = &ran.outcome;
    if let Some(e) = ran.unrecorded.as_ref().filter(|_| !a.quiet) {
        say(format_args!(
            "the run of `{name}` ended, but its end could not be recorded in the store ({e})"
        ));
    }
    match &ran.lock {
        Release::Lingering(l) => {
            if let Some(e) = &l.unnamed {
                say(format_args!(
                    "could not name the lingering processes in the lock file ({e}); those \
                     without the run's token are not seen once onlyone exits"
                ));
            }
            if !o.kept.is_empty() && !a.quiet {
                say(format_args!(
                    "the run of `{name}` lingers in {}: the lock stays held until they exit, \
                     or `onlyone reap {}` ends them once idle{}",
                    pid_list(&o.kept),
                    a.lock,
                    if l.noted {
                        ""
                    } else {
                        " (the reaper's state could not be written: it needs a second look)"
                    }
                ));
            }
            return Ending::Command(o.exit);
        }
        Release::Survivors => {
            match kind {
                Kind::Store => say(format_args!(
                    "leftover process(es) of the run of `{name}` would not die; the lease is \
                     left to run out"
                )),
                _ => say(format_args!(
                    "leftover process(es) of the run of `{name}` would not die ({}); the lock \
                     stays held until they exit",
                    pids(&o.strays.survivors)
                )),
            }
            return Ending::Failed;
        }
        Release::Failed(e) => match kind {
            Kind::Store => say(format_args!(
                "the run ended, but releasing its lease failed: {e}"
            )),
            _ => say(format_args!("the run ended, but releasing failed: {e}")),
        },
        Release::Released => {}
    }
    if o.ended_by == Some(EndedBy::LeaseLost) {
        say(format_args!(
            "the lease of `{name}` could not be renewed in time (or was taken): the command was \
             ended before another holder could start"
        ));
        return Ending::EndedByOnlyone;
    }
    report_outcome(o, name)
}

/// Says what onlyone did to the run (strays ended, the run ended for its
/// time or idleness), and how to exit.
fn report_outcome(outcome: &RunOutcome, name: &str) -> Ending {
    let strays = &outcome.strays;
    if !strays.signalled.is_empty() || !strays.killed.is_empty() {
        say(format_args!(
            "ended {} leftover process(es) of the run of `{name}`: {}",
            strays.signalled.len().max(strays.killed.len()),
            pids(&strays.signalled)
        ));
    }
    match outcome.ended_by {
        Some(EndedBy::MaxTime(t)) => {
            say(format_args!(
                "the run of `{name}` reached --max-time {}; it was ended",
                compact_duration(t)
            ));
            Ending::EndedByOnlyone
        }
        Some(EndedBy::Idle(t)) => {
            say(format_args!(
                "the run of `{name}` was idle for {} (no CPU time, no byte read or written by \
                 any of its processes); it was ended",
                compact_duration(t)
            ));
            Ending::EndedByOnlyone
        }
        _ => Ending::Command(outcome.exit),
    }
}

/// The run's observer: what the command says of each moment, and the
/// pings it sends then.
struct Words<'a> {
    name: String,
    kind: Kind,
    /// The store's URL, with a store.
    store: Option<String>,
    a: &'a Run,
    pings: &'a mut Pings,
    /// The command's output, captured for the end ping.
    capture: Option<Capture>,
}

impl Words<'_> {
    /// Says `msg` unless quiet.
    fn say(&self, msg: impl std::fmt::Display) {
        if !self.a.quiet {
            say(msg);
        }
    }
}

impl RunObserver for Words<'_> {
    fn skipped(&mut self, skip: &Skip) {
        let msg = skip_message(&self.name, skip, self.store.is_some());
        ping::note_skip(msg.clone());
        self.say(msg);
    }

    fn stopping(&mut self, held: &HeldBy) {
        self.say(format_args!(
            "replacing the run of `{}`: stopping {}",
            self.name,
            held.describe()
        ));
    }

    fn took_over(&mut self, from: &TakeOver) {
        let from_pid = from
            .record
            .as_ref()
            .map(|r| format!(" from pid {}", r.pid))
            .unwrap_or_default();
        self.say(format_args!(
            "took over the stale lock `{}`{from_pid}: {}",
            self.name, from.reason
        ));
    }

    fn noticed(&mut self, notice: Notice) {
        // Said once (the library tells it once): on the first look that
        // finds the lease held.
        let Notice::Unordered { what } = notice;
        {
            say(format_args!(
                "the store `{}` has no {what} that this role may use, so the waiters of `{}` \
                 are served in no order (the first to look once it is free takes it); have it \
                 created with the SQL in doc/store.md (\"Setup and the least privileges\")",
                self.store.as_deref().unwrap_or("?"),
                self.name
            ));
        }
    }

    fn started(&mut self, started: &Started) {
        self.pings
            .start_after(&started.token, started.abandoned.as_ref());
        self.pings.uncap();
        let a = self.a;
        self.capture = (!self.pings.is_empty() && !a.linger && !a.keep_strays)
            .then(|| Capture::begin(self.pings.tail_cap()))
            .flatten();
    }
}

/// What a skipped fire says: who holds the lock (and who waits, for a
/// queued fire), and what to do.
fn skip_message(name: &str, skip: &Skip, store: bool) -> String {
    let stop = if store {
        format!("onlyone --store URL stop {name}")
    } else {
        format!("onlyone stop {name}")
    };
    match skip {
        Skip::Held(h) => super::held_message(name, h, None),
        Skip::Waited { waited, held } => format!(
            "{} (waited {})",
            super::held_message(name, held, None),
            compact_duration(*waited)
        ),
        Skip::Queued { held, waiter } => {
            super::queued_message(name, &waiter.describe(), &held.describe())
        }
        Skip::Lease { why, holder } => match why {
            Refused::Queued(w) => {
                let waiter = w
                    .as_deref()
                    .map_or_else(|| "another fire".to_owned(), |w| w.describe());
                let holder = holder
                    .as_deref()
                    .filter(|r| r.is_live())
                    .map_or_else(|| "another holder".into(), describe_lease);
                super::queued_message(name, &waiter, &holder)
            }
            Refused::Behind { ahead, first } => {
                let first = first
                    .as_ref()
                    .map_or_else(String::new, |w| format!(", first {}", w.describe()));
                format!(
                    "the lease of `{name}` is free, but {ahead} waiter(s) are ahead in line\
                     {first}; it goes to them first: wait in line (--wait DUR)"
                )
            }
            _ => {
                let who = holder
                    .as_deref()
                    .map_or_else(|| "another holder".into(), describe_lease);
                format!(
                    "another run of `{name}` holds the lease as {who}; wait for it (--wait) or \
                     stop it ({stop})"
                )
            }
        },
    }
}

/// Options given together that cannot both apply: refused rather than
/// one of them silently ignored. With `--linger` the wrapper exits with
/// the command and leaves the lock to the work that outlives it, which
/// nothing of the wrapper's then watches: a limit would bound the
/// command alone.
pub(super) fn refused_combination(a: &Run) -> Option<String> {
    if !a.linger {
        return None;
    }
    let limit = if a.idle_timeout.is_some() {
        "--idle-timeout"
    } else if a.max_time.is_some() {
        "--max-time"
    } else {
        return None;
    };
    Some(format!(
        "{limit} cannot be used with --linger: onlyone exits with the command and leaves \
         the lock to the work that outlives it, so the limit would never apply to that \
         work; end a lingering run once idle with `onlyone reap --idle DUR {lock}` before \
         each fire (e.g. `onlyone reap -q --idle 10m {lock}; onlyone run --linger {lock} \
         -- ...`), or drop --linger",
        lock = a.lock
    ))
}

/// With a store, a grace (`--kill-after`) that does not fit in the lease:
/// the message names what was typed and what is a default, and the fix.
pub(super) fn lease_misfit(a: &Run, grace_typed: bool) -> Option<String> {
    use onlyone::place::store::timing::LeaseTiming;
    let free = LeaseTiming::new(a.lease, Duration::ZERO).ok()?;
    if LeaseTiming::new(a.lease, a.kill_after).is_ok() {
        return None;
    }
    let used = free.renew_every + free.call_timeout + free.margin;
    let largest = a
        .lease
        .saturating_sub(used)
        .saturating_sub(Duration::from_millis(1));
    // The shortest whole-second lease that fits the grace.
    let fits = (1..=100_000u64)
        .map(Duration::from_secs)
        .find(|l| LeaseTiming::new(*l, a.kill_after).is_ok());
    // What is shown must fit as shown: whole seconds, or milliseconds.
    let largest = if largest >= Duration::from_secs(1) {
        Duration::from_secs(largest.as_secs())
    } else {
        Duration::from_millis(largest.as_millis() as u64)
    };
    let grace = compact_duration(a.kill_after);
    let what = if grace_typed {
        format!("--kill-after {grace}")
    } else {
        format!("the default --kill-after {grace} (the grace between TERM and KILL)")
    };
    Some(format!(
        "{what} does not fit in --lease {}: a holder must end its command before its lease can \
         run out, and this lease leaves room for a grace of at most {}; pass --kill-after {1} \
         (or less), {}",
        compact_duration(a.lease),
        compact_duration(largest),
        match fits {
            Some(l) => format!(
                "or lengthen the lease (--lease {} fits it)",
                compact_duration(l)
            ),
            None => "or lengthen the lease".to_owned(),
        }
    ))
}

/// The options of `run` that `place` cannot honour, refused with why and
/// what to do instead (never ignored).
pub(super) fn unsupported(place: Kind, a: &Run) -> Option<String> {
    let asked = [
        (a.linger, Feature::Linger, "--linger"),
        (a.replace, Feature::Replace, "--replace"),
    ];
    let (_, feature, flag) = asked.into_iter().find(|(on, _, _)| *on)?;
    let instead = match feature {
        Feature::Linger => "keep the work under the command (have it wait for what it started, \
                            e.g. `tmux wait-for`), or run it without --store"
            .to_owned(),
        _ => format!(
            "stop the live run first (onlyone --store URL stop {0}), then run, or wait for it \
             (--wait DUR)",
            a.lock
        ),
    };
    super::place::refusal(place, feature, flag, &instead)
}
