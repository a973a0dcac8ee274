//! `run`: a command under the lock, and what its outcome says.

use std::time::Duration;

use onlyone::signal::GracefulStop;
use onlyone::stop;
use onlyone::supervise::{self, EndedBy, RunOutcome};
use onlyone::{AcquireOptions, Error, LockFile, LockGuard, compact_duration};

use super::exit::{self, Code};
use super::{Ctx, args, deadline_of, fail, journal, pid_list, pids, report_takeover, say};

/// How much longer than its grace a replaced run is given to let go.
const REPLACE_SLACK: Duration = Duration::from_secs(5);

impl Ctx {
    pub(super) fn run(&self, a: args::Run) -> Code {
        let (lock, name) = match self.open_for_writing(&a.lock) {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        let deadline = deadline_of(a.deadline);
        let lock = match deadline {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        let mut guard = match self.take_for_run(&lock, &name, &a) {
            Ok(g) => g,
            Err(code) => return code,
        };
        if !a.quiet {
            report_takeover(&name, &guard);
        }
        journal::started(&lock.journal(), &guard, a.quiet);
        let started = std::time::Instant::now();
        let mut opts = a.run_options();
        opts.linger = a.linger;
        let outcome = match supervise::run(&mut guard, &a.command, &opts) {
            Ok(o) => o,
            Err(e) => {
                let code = exit::run_error(&e);
                if let Code::Exit(c) = code {
                    let exit = onlyone::supervise::Exit::Code(i32::from(c));
                    journal::ended(
                        &lock.journal(),
                        guard.record(),
                        exit,
                        None,
                        started.elapsed(),
                        a.quiet,
                    );
                }
                drop(guard);
                say(&e);
                return code;
            }
        };
        if outcome.lingers {
            return self.leave_to_lingerers(guard, &outcome, &name, &a);
        }
        if !outcome.strays.survivors.is_empty() {
            // Processes of the run outlived TERM and KILL: the run is not
            // over, so the lock stays held (they carry its token, or are
            // named) and the next run waits for them.
            say(format_args!(
                "leftover process(es) of the run of `{name}` would not die ({}); the lock \
                 stays held until they exit",
                pids(&outcome.strays.survivors)
            ));
            guard.leave_to_owner();
            return Code::Exit(exit::FAILURE);
        }
        // The end goes in the journal before the release, so that the next
        // run's start follows it.
        journal::ended(
            &lock.journal(),
            guard.record(),
            outcome.exit,
            outcome.ended_by,
            started.elapsed(),
            a.quiet,
        );
        if let Err(e) = guard.release() {
            say(format_args!("the run ended, but releasing failed: {e}"));
        }
        report_outcome(&outcome, &name)
    }

    /// Takes the lock for a run: waiting with `--wait`, stopping the live
    /// run first with `--replace`.
    fn take_for_run(&self, lock: &LockFile, name: &str, a: &args::Run) -> Result<LockGuard, Code> {
        let deadline = deadline_of(a.deadline);
        let mut opts = AcquireOptions::new()
            .run_mode()
            .command(onlyone::text::display_command(&a.command));
        if let Some(w) = a.wait {
            opts = opts.wait(w);
        }
        if let Some(d) = deadline {
            opts = opts.deadline(d);
        }
        let held_exit = Code::Exit(a.held_exit);
        match lock.acquire(&opts) {
            Ok(g) => Ok(g),
            Err(Error::Held(h)) | Err(Error::Timeout { held: h, .. }) if a.replace => {
                if !a.quiet {
                    say(format_args!(
                        "replacing the run of `{name}`: stopping {}",
                        h.describe()
                    ));
                }
                stop::stop(lock, GracefulStop::term(a.kill_after), deadline).map_err(fail)?;
                journal::stopped(&lock.journal(), &h.record, Some("TERM"), a.quiet);
                let again = opts.clone().wait(a.kill_after + REPLACE_SLACK);
                lock.acquire(&again)
                    .map_err(|e| self.refused(lock, e, name, a.quiet, held_exit))
            }
            Err(e) => Err(self.refused(lock, e, name, a.quiet, held_exit)),
        }
    }

    /// The work goes on in processes that outlive the command: they keep
    /// the lock held (they carry its token, and the record names them), and
    /// the reaper, told what they are doing now, ends them once idle. The
    /// record stays even when none is seen yet (a terminal server may exec
    /// the work a moment after the command returned): with no process of
    /// the run left, it is stale and the next fire takes it over.
    fn leave_to_lingerers(
        &self,
        mut guard: LockGuard,
        o: &RunOutcome,
        name: &str,
        a: &args::Run,
    ) -> Code {
        if !o.kept.is_empty() {
            if let Err(e) = guard.set_lingering(&o.kept) {
                say(format_args!(
                    "could not name the lingering processes in the lock file ({e}); those \
                     without the run's token are not seen once onlyone exits"
                ));
            }
            let noted = self.state_dir_exists()
                && onlyone::reap::note_lingering(self.dir(), &o.kept, guard.record());
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
}

/// Says what onlyone did to the run (strays ended, the run ended for its
/// time or idleness), and how to exit.
pub(super) fn report_outcome(outcome: &RunOutcome, name: &str) -> Code {
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
            Code::Exit(exit::ENDED)
        }
        Some(EndedBy::Idle(t)) => {
            say(format_args!(
                "the run of `{name}` was idle for {} (no CPU time, no byte read or written by \
                 any of its processes); it was ended",
                compact_duration(t)
            ));
            Code::Exit(exit::ENDED)
        }
        _ => exit::command_exit(outcome.exit),
    }
}
