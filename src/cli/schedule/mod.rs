//! Schedules, as the commands use them: what a fire does about its
//! schedule before it takes the lock (`fire`: the schedule kept, the
//! slots missed recorded, a catch-up decided; `wait`: a wait before the
//! lock), and what `check`, `metrics`, `status` and `history` show of it
//! (`watch`). The options are `super::schedule_args`; the schedule itself
//! (its slots, what was missed, the spread) is the library's
//! ([`onlyone::schedule`]).
//!
//! The hooks the commands call are here: [`run`] and [`precheck`] wrap
//! theirs.

mod fire;
mod wait;
pub mod watch;

use onlyone::text::for_terminal;

use super::args::Run;
use super::exit::{Code, Ending};
use super::place::{self, Place};
use super::{Ctx, fail, say};

/// `run` with its schedule: the schedule kept and what was missed
/// recorded, `--catch-up` decided, the wait of `--spread` and `--jitter`;
/// then the run. Without any of them, the run alone.
pub(super) fn run(ctx: &Ctx, place: &dyn Place, mut a: Run) -> Code {
    if scheduled(&a) {
        let given = a.schedule.schedule.as_ref();
        let seen = match fire::look(ctx, &a.lock, given, a.late.late, a.quiet) {
            Ok(Some(seen)) => Some(seen),
            Ok(None) if given.is_none() && (a.fire.catch_up || a.late.late.is_some()) => {
                let opt = if a.fire.catch_up {
                    "--catch-up"
                } else {
                    "--late"
                };
                return fail(needs_schedule(opt, &a.lock));
            }
            Ok(None) => None,
            Err(e) if a.fire.catch_up => return fail(format_args!("--catch-up: {e}")),
            Err(e) => {
                if !a.quiet {
                    say(format_args!("{e}; running without the schedule"));
                }
                None
            }
        };
        if let (true, Some(seen)) = (a.fire.catch_up, &seen) {
            match fire::catch_up(seen, a.fire.catch_up_within) {
                fire::CatchUpDecision::Run(why) => {
                    if let Some(why) = why.filter(|_| !a.quiet) {
                        say(for_terminal(&why));
                    }
                }
                fire::CatchUpDecision::Not(why) => {
                    if !a.quiet {
                        say(for_terminal(&why));
                    }
                    return Ending::Done.code();
                }
            }
        }
    }
    if let Err(code) = wait::before_lock(ctx, &mut a) {
        return code;
    }
    super::run::run(place, &a)
}

/// Whether `run` was given anything of a schedule to look at.
fn scheduled(a: &Run) -> bool {
    a.schedule.schedule.is_some() || a.fire.catch_up || a.late.late.is_some()
}

/// What an option that needs a schedule says when none is known.
fn needs_schedule(opt: &str, lock: &str) -> String {
    format!(
        "{opt} needs a schedule, and the journal of `{lock}` keeps none: give it with \
         --schedule SPEC (or $ONLYONE_SCHEDULE), e.g. --schedule '0 2 * * *'"
    )
}

/// `precheck` with its schedule: what was missed recorded (best effort,
/// and failing open: a precheck never blocks a fire), then the precheck.
pub(super) fn precheck(ctx: &Ctx, place: &dyn Place, a: &super::args::Precheck) -> Code {
    let given = a.schedule.schedule.as_ref();
    if given.is_some() || a.late.late.is_some() {
        match fire::look(ctx, &a.lock, given, a.late.late, a.quiet) {
            Ok(Some(_)) => {}
            Ok(None) => say(format_args!(
                "precheck: {}; going on without it",
                needs_schedule("--late", &a.lock)
            )),
            Err(e) => say(format_args!("precheck: {e}; going on without the schedule")),
        }
    }
    place::precheck(place.seam(), a)
}
