//! `run`: a command under the lock, in either place, as the library runs
//! it ([`onlyone::place::run::run`]); this file words its moments
//! ([`Words`], the run's observer), sends its pings (the end's once the
//! lock is let go) and says how the run exits ([`ending`]).

use onlyone::compact_duration;
use onlyone::place::run::{
    self, Job, JobEnd, Notice, Ran, Refused, Release, RunError, RunObserver, Skip, Started,
};
use onlyone::place::{Kind, PlaceError};
use onlyone::supervise::{EndedBy, Exit, RunOutcome};
use onlyone::{HeldBy, TakeOver};

use super::exit::{self, Code, Ending};
use super::ping::{self, End, Pings};
use super::place::Place;
use super::tail::Capture;
use super::view::describe_lease;
use super::{args, deadline_of, fail, pid_list, pids, say};

/// `run`, in either place, with its pings (the end's once the lock is
/// released).
pub(super) fn run(place: &dyn Place, a: &args::Run) -> Code {
    let urls = ping::urls(&a.ping.urls, a.ping.file.as_deref());
    let mut pings = match urls.and_then(|u| Pings::new(&u, a.quiet, deadline_of(a.busy.deadline))) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if let Some(why) = super::plan::unsupported(place.kind(), a) {
        return fail(why);
    }
    let lock = match place.seam().lock(&a.lock, a.slots.nonzero()) {
        Ok(l) => l,
        Err(e) => return fail(super::place::words(&e)),
    };
    super::journal::hush(a.quiet);
    let mut words = Words {
        name: lock.name().to_owned(),
        kind: place.kind(),
        store: place.store_url(),
        a,
        pings: &mut pings,
        capture: None,
    };
    let ended = run::run(place.seam(), &lock, &job(a), &mut words);
    let capture = words.capture.take();
    let name = words.name.clone();
    let kind = words.kind;
    let (code, end) = match &ended {
        Ok(JobEnd::Skipped(_)) => {
            pings.refused();
            return Ending::Skipped {
                held_exit: a.busy.held_exit,
            }
            .code();
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
fn job(a: &args::Run) -> Job {
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
fn failed(e: &RunError, name: &str, a: &args::Run) -> Code {
    match e {
        RunError::Take(PlaceError::Signalled(sig)) => Code::Signal(sig.as_raw()),
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
fn ran_code(ran: &Ran, name: &str, kind: Kind, a: &args::Run) -> Code {
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
            return exit::command_exit(o.exit);
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
            return Ending::Failed.code();
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
        return Ending::EndedByOnlyone.code();
    }
    report_outcome(o, name)
}

/// Says what onlyone did to the run (strays ended, the run ended for its
/// time or idleness), and how to exit.
fn report_outcome(outcome: &RunOutcome, name: &str) -> Code {
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
            Ending::EndedByOnlyone.code()
        }
        Some(EndedBy::Idle(t)) => {
            say(format_args!(
                "the run of `{name}` was idle for {} (no CPU time, no byte read or written by \
                 any of its processes); it was ended",
                compact_duration(t)
            ));
            Ending::EndedByOnlyone.code()
        }
        _ => exit::command_exit(outcome.exit),
    }
}

/// The run's observer: what the command says of each moment, and the
/// pings it sends then.
struct Words<'a> {
    name: String,
    kind: Kind,
    /// The store's URL, with a store.
    store: Option<String>,
    a: &'a args::Run,
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
