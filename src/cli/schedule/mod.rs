//! Schedules, as the commands use them: what a fire does about its
//! schedule before it takes the lock (`fire`: the schedule kept, the
//! fires missed recorded, a catch-up decided; `wait`: a wait before the
//! lock), and what `check`, `metrics`, `status` and `history` show of it
//! (`watch`). The options are `super::options` (`--schedule`, `--late`)
//! and `super::run` (`--catch-up`, `--jitter`, `--spread`); the schedule itself
//! (its fires, what was missed, the spread) is the library's
//! ([`onlyone::schedule`]).
//!
//! Every fire looks: one given a schedule (or `--catch-up`, or `--late`)
//! reads its lock's log, and one given none reads it when the log may
//! keep one (a scan of its bytes,
//! [`may_keep_schedule`](onlyone::journal::ScheduleLog::may_keep_schedule)),
//! so that a fire by hand, or the crontab's second line, records the
//! fires missed as the line given the schedule would.
//!
//! The hooks the commands call are here: [`run`] and [`precheck`] wrap
//! theirs.

mod fire;
mod wait;
pub mod watch;

use onlyone::text::for_terminal;

use super::exit::Ending;
use super::place::Place;
use super::run::Run;
use super::{fail, say};
use onlyone::place::Lock;

/// What a fire found of its schedule, as it goes on.
enum Found {
    /// A schedule is known: what the fire recorded of it.
    Seen(Box<fire::FireSeen>),
    /// No schedule, or none that could be read (said).
    Without,
    /// Nothing more to do: how to exit.
    Exit(Ending),
}

/// The look of a fire of `lock` at its schedule, in `place`: given one
/// (or asked for one: `asked`), always; given none, only when the lock's
/// log may keep one. `None` when it does not look.
fn look_of(
    place: &dyn Place,
    lock: &Lock,
    with: &fire::Asked<'_>,
    asked: bool,
) -> Option<Result<fire::Looked, String>> {
    let log = match place.seam().schedule_log(lock) {
        Ok(Some(log)) => log,
        Ok(None) => return None,
        // Said when the command itself meets it, unless asked for.
        Err(e) => return asked.then_some(Err(super::place::words(&e))),
    };
    if !asked && !log.may_keep_schedule().unwrap_or(false) {
        return None;
    }
    Some(fire::look(&*log, lock.name(), with))
}

/// What `run` found of its schedule, and whether to go on.
fn found_by_run(place: &dyn Place, lock: &Lock, a: &Run) -> Found {
    let given = a.schedule.schedule.as_ref();
    let asked = given.is_some() || a.fire.catch_up || a.late.late.is_some();
    let with = fire::Asked {
        given,
        late: a.late.late,
        fall_back: a.fire.catch_up,
        catch_up: a.fire.catch_up,
        quiet: a.quiet,
    };
    let Some(looked) = look_of(place, lock, &with, asked) else {
        return Found::Without;
    };
    let quiet = a.quiet;
    let without = |why: &str, recorded: bool| {
        if !quiet {
            let recorded = if recorded {
                " (recorded for `onlyone check`)"
            } else {
                ""
            };
            say(format_args!(
                "{why}; running without the schedule{recorded}"
            ));
        }
        Found::Without
    };
    match looked {
        Ok(fire::Looked::Seen(seen)) => {
            if let Some(why) = seen.given_unreadable.as_deref().filter(|_| !quiet) {
                say(format_args!(
                    "{why}; deciding the catch-up with the schedule the journal keeps, `{}` \
                     (recorded for `onlyone check`)",
                    for_terminal(&fire::recorded_spec(&seen.schedule))
                ));
            }
            Found::Seen(seen)
        }
        Ok(fire::Looked::NoSchedule) if a.fire.catch_up || a.late.late.is_some() => {
            let opt = if a.fire.catch_up {
                "--catch-up"
            } else {
                "--late"
            };
            Found::Exit(fail(needs_schedule(opt, &a.lock)))
        }
        Ok(fire::Looked::NoSchedule) => Found::Without,
        // A catch-up that cannot tell what was missed runs: the job's
        // line asked for it, and the zone is this host's mistake.
        Ok(fire::Looked::Unreadable(why)) => without(&why, true),
        Err(why) if a.fire.catch_up => Found::Exit(fail(format_args!("--catch-up: {why}"))),
        Err(e) => without(&e, false),
    }
}

/// `run` with its schedule: the schedule kept and what was missed
/// recorded, `--catch-up` decided, the wait of `--spread` and `--jitter`;
/// then the run. Without any of them (and no schedule kept), the run
/// alone.
pub(super) fn run(place: &dyn Place, mut a: Run) -> Ending {
    // The lock, resolved once for the fire's look, its wait and its run.
    let lock = match place.seam().lock(&a.lock, a.slots.nonzero()) {
        Ok(l) => l,
        Err(e) => return fail(super::place::words(&e)),
    };
    match found_by_run(place, &lock, &a) {
        Found::Exit(code) => return code,
        Found::Seen(seen) if a.fire.catch_up => match fire::catch_up(&seen, a.fire.catch_up_within)
        {
            fire::CatchUpDecision::Run(why) => {
                if let Some(why) = why.filter(|_| !a.quiet) {
                    say(for_terminal(&why));
                }
            }
            fire::CatchUpDecision::Not(why) => {
                if !a.quiet {
                    say(for_terminal(&why));
                }
                return Ending::Done;
            }
        },
        Found::Seen(_) | Found::Without => {}
    }
    if let Err(code) = wait::before_lock(place, &lock, &mut a) {
        return code;
    }
    super::run::run(place, &lock, &a)
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
pub(super) fn precheck(place: &dyn Place, a: &super::precheck::Precheck) -> Ending {
    let lock = match place.seam().lock(&a.lock, a.slots.nonzero()) {
        Ok(l) => l,
        Err(e) => {
            say(format_args!(
                "precheck: {}; letting the fire run (fail open)",
                super::place::words(&e)
            ));
            return Ending::FailedOpen;
        }
    };
    let given = a.schedule.schedule.as_ref();
    let asked = given.is_some() || a.late.late.is_some();
    let with = fire::Asked {
        given,
        late: a.late.late,
        fall_back: false,
        catch_up: false,
        quiet: a.quiet,
    };
    match look_of(place, &lock, &with, asked) {
        None | Some(Ok(fire::Looked::Seen(_))) => {}
        Some(Ok(fire::Looked::NoSchedule)) if a.late.late.is_some() => say(format_args!(
            "precheck: {}; going on without it",
            needs_schedule("--late", &a.lock)
        )),
        Some(Ok(fire::Looked::NoSchedule)) => {}
        Some(Ok(fire::Looked::Unreadable(e))) => say(format_args!(
            "precheck: {e}; going on without the schedule (recorded for `onlyone check`)"
        )),
        Some(Err(e)) => say(format_args!("precheck: {e}; going on without the schedule")),
    }
    super::precheck::precheck(place.seam(), &lock, a)
}
