//! `run`: a command under the lock, wherever the lock lives, and what its
//! outcome says. One function serves both places ([`run`]); what differs
//! is how the lock is taken and let go ([`RunPlace`], [`HeldLock`]): here for
//! a lock directory, in [`super::store`] for the store.

use std::time::{Duration, Instant};

use onlyone::ProcId;
use onlyone::journal::Event;
use onlyone::observer::RunObserver;
use onlyone::place::Kind;
use onlyone::runner::{self, TakeError};
use onlyone::supervise::{self, EndedBy, Exit, RunOutcome};
use onlyone::{AcquireOptions, HeldBy, LockFile, LockGuard, compact_duration};

use super::exit::{self, Code, Ending};
use super::ping::{self, End, Pings};
use super::tail::{Capture, Delivery, Tail};
use super::{Ctx, args, deadline_of, fail, journal, pid_list, pids, report_takeover, say};

/// Where a run's lock lives: a lock directory ([`Ctx`]) or the store.
pub(super) trait RunPlace {
    /// Which kind of place this is.
    fn kind(&self) -> Kind;
    /// Takes the lock for the run (waiting, replacing, as the options
    /// say), its start recorded; the exit code when it is not taken (the
    /// skip recorded and said).
    fn take_for_run<'p>(&'p self, a: &args::Run) -> Result<Box<dyn HeldLock + 'p>, Code>;
}

/// A lock taken for a run, in either place: what [`run`] needs of it.
pub(super) trait HeldLock {
    /// The lock's name, as messages give it.
    fn name(&self) -> &str;
    /// The run's token (its run id's bits).
    fn token(&self) -> &str;
    /// The token of the stale run this one took the lock over from, and
    /// why it was stale, when that run's end was never recorded (its
    /// wrapper died): its pings say it ended without an exit code.
    fn abandoned(&self) -> Option<(String, String)> {
        None
    }
    /// The lock side of the supervision.
    fn hold(&mut self) -> &mut dyn supervise::Hold;
    /// The run's event of its end (token, wrapper pid, command).
    fn end_event(&self, exit: Exit, ended_by: Option<EndedBy>, took: Duration) -> Event;
    /// Records the run's end.
    fn record_end(&self, end: &Event, quiet: bool);
    /// Processes of the run outlived TERM and KILL: the run is not over,
    /// and the lock is left to them (said how).
    fn leave_to_survivors(self: Box<Self>, name: &str, survivors: &[u32], end: &Event, quiet: bool);
    /// The work goes on in processes that outlive the command
    /// (`--linger`, which [`RunPlace::kind`] must support).
    fn leave_to_lingerers(self: Box<Self>, o: &RunOutcome, name: &str, a: &args::Run) -> Code;
    /// What the run left running when its command exited (`--keep-strays`),
    /// told to the reaper where there is one (a lock directory's): a reap
    /// of the job ends them once idle, whatever their user.
    fn note_kept(&self, _kept: &[ProcId]) {}
    /// The run is over: the lock is let go.
    fn release(self: Box<Self>);
}

/// `run`, in either place, with its pings (the end's once the lock is
/// released: [`ping`]).
pub(super) fn run(place: &dyn RunPlace, a: &args::Run) -> Code {
    let urls = ping::urls(&a.ping.urls, a.ping.file.as_deref());
    let mut pings = match urls.and_then(|u| Pings::new(&u, a.quiet, deadline_of(a.busy.deadline))) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let (code, ended) = run_pinged(place, a, &mut pings);
    if let Some(e) = ended {
        pings.end_with(&e.end, e.tail.as_ref());
        // The output is written out before onlyone exits, however slow its
        // reader: the lock is free and the end pinged by now.
        if let Some(d) = e.delivery {
            d.wait();
        }
    }
    code
}

/// How a run that started ended, for its end ping.
struct Ended {
    end: End,
    /// The tail of what it printed, when that was captured.
    tail: Option<Tail>,
    /// What of it is still to be written out.
    delivery: Option<Delivery>,
}

/// `run`: its exit code, and how a ping tells its end, with the tail of
/// what it printed when that was captured ([`super::tail`]) and what of
/// it is still to be written out; no end when it did not start (the
/// refusal is pinged here).
fn run_pinged(place: &dyn RunPlace, a: &args::Run, pings: &mut Pings) -> (Code, Option<Ended>) {
    if let Some(why) = super::plan::unsupported(place.kind(), a) {
        return (fail(why), None);
    }
    let taken = match place.take_for_run(a) {
        Ok(t) => t,
        Err(code) => {
            pings.refused();
            return (code, None);
        }
    };
    let abandoned = taken.abandoned();
    pings.start_after(taken.token(), abandoned.as_ref());
    pings.uncap();
    let capture = (!pings.is_empty() && !a.linger && !a.keep_strays)
        .then(|| Capture::begin(pings.tail_cap()))
        .flatten();
    let (code, ended_by, exit) = run_taken(taken, a);
    let (tail, delivery) = capture.map(Capture::finish).unzip();
    let end = match (exit, ended_by) {
        (_, Some(EndedBy::Idle(_))) => End::Exit(0),
        (_, Some(EndedBy::LeaseLost)) | (None | Some(Exit::Signal(_)), _) => End::Fail,
        (Some(Exit::Code(c)), _) => End::Exit(c.clamp(0, 255) as u8),
    };
    (
        code,
        Some(Ended {
            end,
            tail,
            delivery,
        }),
    )
}

/// `run` once the lock is taken: its exit code, and what onlyone ended
/// it for and how the command exited, when it ran.
fn run_taken(
    mut taken: Box<dyn HeldLock + '_>,
    a: &args::Run,
) -> (Code, Option<EndedBy>, Option<Exit>) {
    let name = taken.name().to_owned();
    let name = name.as_str();
    let started = Instant::now();
    let mut opts = a.run_options();
    opts.linger = a.linger;
    opts.withheld_env = ping::WITHHELD;
    let outcome = match supervise::run(taken.hold(), &a.command, &opts) {
        Ok(o) => o,
        Err(e) => {
            // The command could not start: its end (126, 127) is recorded.
            let code = exit::run_error(&e);
            let mut exit = None;
            if let Code::Exit(c) = code {
                let end = taken.end_event(Exit::Code(i32::from(c)), None, started.elapsed());
                taken.record_end(&end, a.quiet);
                exit = Some(Exit::Code(i32::from(c)));
            }
            drop(taken);
            say(&e);
            return (code, None, exit);
        }
    };
    if outcome.lingers {
        let code = taken.leave_to_lingerers(&outcome, name, a);
        return (code, outcome.ended_by, Some(outcome.exit));
    }
    let end = taken
        .end_event(outcome.exit, outcome.ended_by, started.elapsed())
        .with_usage(outcome.usage);
    if !outcome.strays.survivors.is_empty() {
        taken.leave_to_survivors(name, &outcome.strays.survivors, &end, a.quiet);
        return (Ending::Failed.code(), outcome.ended_by, None);
    }
    // The end is recorded before the release, so that the next run's
    // start follows it; and the command has stopped before the release
    // (PROTOCOL.md invariant 7).
    taken.record_end(&end, a.quiet);
    if !outcome.kept.is_empty() {
        taken.note_kept(&outcome.kept);
    }
    taken.release();
    if outcome.ended_by == Some(EndedBy::LeaseLost) {
        say(format_args!(
            "the lease of `{name}` could not be renewed in time (or was taken): the command was \
             ended before another holder could start"
        ));
        return (
            Ending::EndedByOnlyone.code(),
            outcome.ended_by,
            Some(outcome.exit),
        );
    }
    (
        report_outcome(&outcome, name),
        outcome.ended_by,
        Some(outcome.exit),
    )
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

/// A lock of the lock directory, taken for a run.
struct DirHeld<'p> {
    ctx: &'p Ctx,
    name: String,
    guard: LockGuard,
    /// The lock's journal, found once for the run's start and end.
    journal: onlyone::journal::Journal,
}

impl RunPlace for Ctx {
    fn kind(&self) -> Kind {
        Kind::Directory
    }

    fn take_for_run<'p>(&'p self, a: &args::Run) -> Result<Box<dyn HeldLock + 'p>, Code> {
        let (lock, name) = self.open_for_writing(&a.lock).map_err(fail)?;
        let lock = match deadline_of(a.busy.deadline) {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        let guard = self.take_for_run(&lock, &name, a)?;
        if !a.quiet {
            report_takeover(&name, &guard);
        }
        let log = self.journal(&lock);
        journal::started(&log, &guard, a.quiet);
        Ok(Box::new(DirHeld {
            ctx: self,
            name,
            guard,
            journal: log,
        }))
    }
}

impl HeldLock for DirHeld<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn token(&self) -> &str {
        self.guard.token()
    }

    fn abandoned(&self) -> Option<(String, String)> {
        let t = self.guard.took_over()?;
        let old = t.record.as_ref().filter(|r| r.released.is_none())?;
        Some((old.token.clone()?, t.reason.to_string()))
    }

    fn hold(&mut self) -> &mut dyn supervise::Hold {
        &mut self.guard
    }

    fn end_event(&self, exit: Exit, ended_by: Option<EndedBy>, took: Duration) -> Event {
        let r = self.guard.record();
        Event::end(
            r.token.as_deref(),
            r.pid,
            r.cmd.as_deref(),
            exit,
            ended_by.map(Into::into),
            took,
        )
    }

    fn record_end(&self, end: &Event, quiet: bool) {
        journal::write(&self.journal, end, quiet);
    }

    fn leave_to_survivors(self: Box<Self>, name: &str, survivors: &[u32], _: &Event, _: bool) {
        // They carry the run's token, or are named: the lock stays held,
        // and the next run waits for them (their end is the run's).
        say(format_args!(
            "leftover process(es) of the run of `{name}` would not die ({}); the lock stays \
             held until they exit",
            pids(survivors)
        ));
        self.guard.leave_to_owner();
    }

    /// The work goes on in processes that outlive the command: they keep
    /// the lock held (they carry its token, and the record names them), and
    /// the reaper, told what they are doing now, ends them once idle. The
    /// record stays even when none is seen yet (a terminal server may exec
    /// the work a moment after the command returned): with no process of
    /// the run left, it is stale and the next fire takes it over.
    fn leave_to_lingerers(self: Box<Self>, o: &RunOutcome, name: &str, a: &args::Run) -> Code {
        let DirHeld { ctx, mut guard, .. } = *self;
        if !o.kept.is_empty() {
            if let Err(e) = guard.set_lingering(&o.kept) {
                say(format_args!(
                    "could not name the lingering processes in the lock file ({e}); those \
                     without the run's token are not seen once onlyone exits"
                ));
            }
            let noted = ctx.state_dir_exists()
                && onlyone::reap::note_lingering(ctx.dir(), &o.kept, guard.record());
            if !a.quiet {
                say(format_args!(
                    "the run of `{name}` lingers in {}: the lock stays held until they exit, \
                     or `onlyone reap {}` ends them once idle{}",
                    pid_list(&o.kept),
                    a.lock,
                    if noted {
                        ""
                    } else {
                        " (the reaper's state could not be written: it needs a second look)"
                    }
                ));
            }
        }
        guard.leave_to_owner();
        exit::command_exit(o.exit)
    }

    fn note_kept(&self, kept: &[ProcId]) {
        if self.ctx.state_dir_exists() {
            onlyone::reap::note_kept(
                self.ctx.dir(),
                self.guard.lock().path(),
                self.guard.token(),
                kept,
            );
        }
    }

    fn release(self: Box<Self>) {
        if let Err(e) = self.guard.release() {
            say(format_args!("the run ended, but releasing failed: {e}"));
        }
    }
}

impl Ctx {
    /// Takes the lock for a run: waiting with `--wait`, stopping the live
    /// run first with `--replace`.
    fn take_for_run(&self, lock: &LockFile, name: &str, a: &args::Run) -> Result<LockGuard, Code> {
        let deadline = deadline_of(a.busy.deadline);
        let mut opts = AcquireOptions::new()
            .run_mode()
            .command(onlyone::text::display_command(&a.command))
            .busy(a.busy.policy())
            .slots(a.slots.count());
        if let Some(d) = deadline {
            opts = opts.deadline(d);
        }
        let held_exit = Ending::Skipped {
            held_exit: a.busy.held_exit,
        }
        .code();
        let mut words = Replacing {
            ctx: self,
            lock,
            name,
            quiet: a.quiet,
        };
        let replace = a.replace.then_some(a.kill_after);
        match runner::take_for_run(lock, &opts, replace, deadline, &mut words) {
            Ok(g) => Ok(g),
            Err(TakeError::Stop(e)) => Err(fail(e)),
            Err(TakeError::Acquire(e)) => Err(self.refused(lock, e, name, a.quiet, held_exit)),
        }
    }
}

/// What a run that replaces another says and records of the stop.
struct Replacing<'a> {
    ctx: &'a Ctx,
    lock: &'a LockFile,
    name: &'a str,
    quiet: bool,
}

impl RunObserver for Replacing<'_> {
    fn stopping(&mut self, held: &HeldBy) {
        if !self.quiet {
            say(format_args!(
                "replacing the run of `{}`: stopping {}",
                self.name,
                held.describe()
            ));
        }
    }

    fn stopped(&mut self, held: &HeldBy, signal: &str) {
        let log = self.ctx.journal(self.lock);
        journal::stopped(&log, &held.record, Some(signal), self.quiet);
    }
}
