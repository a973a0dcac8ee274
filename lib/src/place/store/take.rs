//! A run's lock in a store: its lease taken as the job's busy policy says
//! (in the store's line, [`super::lease`]), the skip or the start recorded
//! in the store's history, its watchdog started beside it, and the
//! [`Held`] lease the run keeps: its end recorded (retried on a new
//! connection while the lease lasts), the lease let go, or left to run
//! out beside processes that would not die.

use std::process::Child;
use std::sync::Arc;

use super::line::{self as lease, Busy, Leased, RunLease};
use super::{READ_TIMEOUT, StorePlace, lock_name};
use crate::journal::Event;
use crate::journal::moments::{self, RunEnd};
use crate::place::run::Refused;
use crate::place::run::{Held, Job, Lingering, RunObserver, Skip, Started, Taken};
use crate::place::store::hold::LeaseHold;
use crate::place::store::timing::LeaseTiming;
use crate::place::store::watchdog::Watched;
use crate::place::store::{Claimant, LeaseStore, StoreLog};
use crate::place::{Lock, PlaceError, QUEUED};

/// How a program starts a run's watchdog: the command that runs
/// [`watch`](crate::place::store::watchdog::watch) over what it is given (the
/// command line's is its own `lease-watchdog`). Its standard input is the
/// link; the place sets the rest (its own process group, no output).
pub type WatchdogProgram =
    Arc<dyn Fn(&Watched) -> std::io::Result<std::process::Command> + Send + Sync>;

/// [`Place::take`](super::Place::take) of the store.
pub(super) fn take<'p>(
    place: &'p StorePlace,
    lock: &Lock,
    job: &Job,
    observer: &mut dyn RunObserver,
) -> Result<Taken<'p>, PlaceError> {
    let name = lock_name(lock.name())?;
    let signals = place.held_signals()?;
    let timing = LeaseTiming::new(job.lease, job.run.kill_after)?;
    let store = place.open(timing.call_timeout)?;
    let token = crate::lock::new_token();
    let cmd = crate::text::display_command(&job.command);
    let me = std::process::id();
    let host = crate::procfs::host_name();
    let who = Claimant {
        token: &token,
        host: &host,
        pid: me,
        uid: rustix::process::geteuid().as_raw(),
        cmd: &cmd,
    };
    let run = RunLease {
        name: &name,
        who: &who,
        timing,
        slots: lock.slots(),
        busy: job.busy,
        deadline: job.deadline,
        connect_within: READ_TIMEOUT,
    };
    let mut notice = |n| observer.noticed(n);
    // The connection a look at the schedule made, if one did: no second.
    let conn = place.spare(timing.call_timeout);
    let hold = match lease::take_through(store.as_ref(), conn, &run, signals, &mut notice) {
        Leased::Taken(h) => h,
        Leased::Busy(b) => return Ok(Taken::Skipped(skipped(&b, &name))),
        Leased::NoLine => {
            return Err(PlaceError::NoLine {
                url: store.url().to_owned(),
                setup: store.line_setup(),
            });
        }
        Leased::SlotsDiffer { held } => {
            return Err(PlaceError::SlotsDiffer {
                name,
                held,
                asked: lock.slots(),
            });
        }
        Leased::Signalled(sig) => return Err(PlaceError::Signalled(sig)),
        Leased::Failed(e) => return Err(e.into()),
    };
    let watchdog = match start_watchdog(place, &hold, &token, timing) {
        Ok(w) => w,
        Err(e) => {
            let _ = hold.release();
            return Err(PlaceError::Watchdog(e));
        }
    };
    let mut ev = Event::start(Some(&token), me, Some(&cmd), "run");
    ev.reason = Some(format!("fence {}", hold.fence()));
    ev.slots = (hold.slot().of > 1).then_some(hold.slot().of);
    record(hold.store(), &name, &ev, place);
    Ok(Taken::Held(Box::new(LeaseHeld {
        name,
        hold,
        watchdog,
        token,
        cmd,
    })))
}

/// Appends an event to the store's history of `name`, best effort (a
/// failure told to the place's notes).
fn record(store: &dyn LeaseStore, name: &str, ev: &Event, place: &StorePlace) {
    crate::place::log_event(&StoreLog { store, name }, ev, Some(place.notes()));
}

/// A fire that did not get the lease (held, free but owed to waiters
/// ahead, queued for by another): the skip recorded, through the waiter's
/// connection.
fn skipped(busy: &Busy<'_>, name: &str) -> Skip {
    let row = busy.holder.as_ref();
    let mut ev = match &busy.why {
        Refused::Behind { first, .. } => first
            .as_ref()
            .map(|w| Event::skip(Some(&w.token), w.pid, w.cmd.as_deref())),
        _ => row.map(|r| Event::skip(Some(&r.token), r.pid, r.cmd.as_deref())),
    };
    if let Refused::Queued(_) = &busy.why {
        let mut skip = ev.unwrap_or_else(|| Event::skip(None, None, None));
        skip.reason = Some(QUEUED.to_owned());
        ev = Some(skip);
    }
    if let Some(ev) = ev {
        let line = String::from_utf8_lossy(&ev.to_line()).into_owned();
        let _ = busy.store().append_event(name, &line);
    }
    Skip::Lease {
        why: busy.why.clone(),
        holder: busy.holder.clone().map(Box::new),
    }
}

/// Starts the run's watchdog (see [`lease::start_watchdog`]), as the
/// place's program says.
fn start_watchdog(
    place: &StorePlace,
    hold: &LeaseHold,
    token: &str,
    timing: LeaseTiming,
) -> std::io::Result<Child> {
    let program = place.watchdog().ok_or_else(|| {
        std::io::Error::other("this program gives the store no watchdog to start")
    })?;
    let w = lease::watched(hold, token, timing)?;
    lease::start_watchdog(hold, program(&w)?)
}

/// A lease taken for a run, its watchdog beside it.
struct LeaseHeld {
    name: String,
    hold: LeaseHold,
    watchdog: Child,
    token: String,
    cmd: String,
}

impl Held for LeaseHeld {
    fn started(&self) -> Started {
        Started {
            token: self.token.clone(),
            abandoned: None,
            fence: Some(self.hold.fence()),
        }
    }

    fn hold(&mut self) -> &mut dyn crate::supervise::Hold {
        &mut self.hold
    }

    /// Retried on a new connection while the lease lasts (a server
    /// restarted just now loses no end).
    fn record_end(&self, end: &RunEnd) -> Result<(), String> {
        let me = std::process::id();
        let ev = moments::end_event_of(Some(&self.token), me, Some(&self.cmd), end);
        let line = String::from_utf8_lossy(&ev.to_line()).into_owned();
        let (hold, name) = (&self.hold, &self.name);
        hold.retry(|| hold.store().append_event(name, &line))
            .map_err(|e| e.to_string())
    }

    /// The watchdog, told `done` by the release, exits.
    fn release(self: Box<Self>) -> Result<(), String> {
        let LeaseHeld {
            hold, mut watchdog, ..
        } = *self;
        let released = hold.release().map_err(|e| e.to_string());
        let _ = watchdog.wait();
        released
    }

    /// The lease is left to run out rather than handed over beside them;
    /// nothing would record the end later, so it is recorded now.
    fn leave_to_survivors(self: Box<Self>, end: &RunEnd) {
        let _ = self.record_end(end);
        let LeaseHeld {
            hold, mut watchdog, ..
        } = *self;
        hold.abandon();
        let _ = watchdog.wait();
    }

    /// Nothing lingers with a store ([`super::Feature::Linger`] is
    /// refused there); were it to, the run is over for the lease.
    fn leave_to_lingerers(self: Box<Self>, _: &[crate::ProcId]) -> Lingering {
        let _ = self.release();
        Lingering {
            unnamed: None,
            noted: false,
        }
    }
}
