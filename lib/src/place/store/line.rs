//! A store's lease taken for a run, under a busy policy.
//!
//! A run that finds the lease held either gives up at once, or waits for
//! it up to a time and a deadline, in the store's line behind those who
//! waited first, or waits in the line's queue seat, which one waiter holds
//! at most (a run that finds it held by a live waiter whose run has not
//! begun gives up: that run will do what it would have done). The store
//! tells no waiter when the lease is let go: a waiter polls it
//! ([`STORE_POLL`]). What came of the take is a [`Leased`], for the caller
//! to word. A lease taken is watched over by the run's watchdog
//! ([`start_watchdog`]).

use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::BusyPolicy;
use crate::lock::queue::PLACE_HANDOVER;
use crate::place::run::{Notice, Refused};
use crate::place::store::hold::{LeaseHold, Taking};
use crate::place::store::timing::LeaseTiming;
use crate::place::store::watchdog::{Link, Watched};
use crate::place::store::{
    Claimant, Claimed, HeldSignals, LeaseRow, LeaseStore, Slot, StoreError, WaiterRow,
};

/// How often a waiter looks at a held lease again: the store is polled,
/// as it tells no waiter when a lease is let go.
pub const STORE_POLL: Duration = Duration::from_millis(100);

/// A take of a lease for a run: which lease, by whom, for how long, and
/// what to do when it is held.
#[derive(Debug, Clone, Copy)]
pub struct RunLease<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// Who takes it.
    pub who: &'a Claimant<'a>,
    /// The lock's number of slots: the take holds any one of them (1: the
    /// lock's one lease).
    pub slots: u32,
    /// The lease's timing.
    pub timing: LeaseTiming,
    /// What to do when it is held.
    pub busy: BusyPolicy,
    /// Gives up at this instant, whatever the wait.
    pub deadline: Option<Instant>,
    /// How long a waiter's new connection may take at most (less when the
    /// deadline is nearer).
    pub connect_within: Duration,
}

/// What came of a take.
#[derive(Debug)]
pub enum Leased<'s> {
    /// The lease, held.
    Taken(LeaseHold),
    /// Not taken: held, owed to waiters ahead, or queued for by another.
    Busy(Busy<'s>),
    /// A queued take, and the store has no line that this role may use.
    NoLine,
    /// A live holder of the lock took it with another number of slots.
    SlotsDiffer {
        /// The number it took it with.
        held: u32,
    },
    /// A forwarded signal came while waiting; nothing was taken.
    Signalled(Signal),
    /// The store failed.
    Failed(StoreError),
}

/// A take that gave up: why, and the lease's row as read then. The
/// waiter's place in line, if it had one, is left when this is dropped.
#[derive(Debug)]
pub struct Busy<'s> {
    /// Why.
    pub why: Refused,
    /// The lease's row, when it could be read (of a lock of several slots:
    /// the first live one).
    pub holder: Option<LeaseRow>,
    /// The lock's number of slots, as the take asked.
    pub slots: u32,
    line: Line<'s>,
}

impl Busy<'_> {
    /// The store, through the waiter's connection (to record the skip).
    pub fn store(&self) -> &dyn LeaseStore {
        self.line.via()
    }
}

/// Takes the lease of `run.name` for `run.who`, waiting as `run.busy`
/// allows, in line behind those who waited first; `notice` hears what is
/// said once while waiting. A signal held by `signals` ends the wait.
pub fn take_for_run<'s>(
    store: &'s dyn LeaseStore,
    run: &RunLease<'_>,
    signals: &HeldSignals,
    notice: &mut dyn FnMut(Notice),
) -> Leased<'s> {
    take_through(store, None, run, signals, notice)
}

/// [`take_for_run`], its first try through `conn` (a connection made
/// already, with the calls' timeout) when one is given.
pub(super) fn take_through<'s>(
    store: &'s dyn LeaseStore,
    conn: Option<Box<dyn LeaseStore>>,
    run: &RunLease<'_>,
    signals: &HeldSignals,
    notice: &mut dyn FnMut(Notice),
) -> Leased<'s> {
    let mut waiter = Waiter::new(store, run);
    waiter.line.conn = conn;
    match waiter.wait(run, signals, notice) {
        Ok(l) => l,
        Err(Halt::Signal(s)) => Leased::Signalled(s),
        Err(Halt::Store(e)) => Leased::Failed(e),
    }
}

/// How a take under a busy policy waits in the store's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waits {
    /// It does not: it gives up at once.
    Not,
    /// In line, behind those who waited first.
    InLine,
    /// In the queue seat, which one waiter holds at most.
    Queued,
}

impl Waits {
    fn of(busy: BusyPolicy) -> Waits {
        match busy {
            BusyPolicy::Skip => Waits::Not,
            BusyPolicy::Wait(_) => Waits::InLine,
            BusyPolicy::Queue(_) => Waits::Queued,
        }
    }
}

/// What one look of a waiter found.
enum Look<'s> {
    /// The wait is over: this.
    Done(Box<Leased<'s>>),
    /// Not taken, and the policy waits no more: why.
    Refused(Claimed),
    /// A queued take that found the seat held.
    QueuedBy(NoSeat),
    /// Wait on.
    Again,
}

/// What ends a wait before its end.
enum Halt {
    /// A forwarded signal.
    Signal(Signal),
    /// A failure of the store.
    Store(StoreError),
}

impl From<StoreError> for Halt {
    fn from(e: StoreError) -> Halt {
        Halt::Store(e)
    }
}

/// The signal held by `signals`, if one came, as a halt.
fn signalled(signals: &HeldSignals) -> Result<(), Halt> {
    match signals.pending() {
        Some(sig) => Err(Halt::Signal(sig)),
        None => Ok(()),
    }
}

/// How long a waiter's row in the line lasts unless refreshed (at every
/// look): a waiter killed with SIGKILL holds its place that long at most.
fn waiter_ttl(timing: LeaseTiming) -> Duration {
    (timing.call_timeout * 4).max(Duration::from_secs(3))
}

/// A waiter's place in the store's line: its row is removed when it is
/// dropped (the take removes it itself; a timeout, a signal, a failure
/// leave here), so that only a waiter killed outright leaves one, dead
/// once its `until` has passed.
#[derive(Debug)]
struct Line<'s> {
    store: &'s dyn LeaseStore,
    /// The connection the waiter looks through, between its tries.
    conn: Option<Box<dyn LeaseStore>>,
    name: String,
    ticket: Option<i64>,
}

impl Line<'_> {
    /// The store to speak through now: the waiter's connection, else the
    /// store's own.
    fn via(&self) -> &dyn LeaseStore {
        self.conn.as_deref().unwrap_or(self.store)
    }
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            let _ = self.via().leave_line(&self.name, t);
        }
    }
}

/// A take under way: its place in line, and what it has learnt.
struct Waiter<'s> {
    line: Line<'s>,
    /// When the wait ends (the policy's `wait`).
    wait_until: Option<Instant>,
    /// How long its row in line lasts unless refreshed.
    ttl: Duration,
    /// Whether the store has a line this role may use, once asked.
    has_line: Option<bool>,
    /// Whether [`Notice::Unordered`] was said.
    warned: bool,
    /// Whether a try reached the store.
    reached: bool,
}

impl<'s> Waiter<'s> {
    /// A take of `run`'s lease in `store`, its wait counted from now.
    fn new(store: &'s dyn LeaseStore, run: &RunLease<'_>) -> Waiter<'s> {
        Waiter {
            line: Line {
                store,
                conn: None,
                name: run.name.to_owned(),
                ticket: None,
            },
            wait_until: run.busy.wait().map(|w| Instant::now() + w),
            ttl: waiter_ttl(run.timing),
            has_line: None,
            warned: false,
            reached: false,
        }
    }

    /// Tries, and waits between tries, until the lease is taken or the
    /// policy gives up. A store that answered once and then cannot be
    /// reached (a server restarting, a cluster between leaders) is tried
    /// again at the next look, on a new connection, while the wait lasts:
    /// nothing is held meanwhile.
    fn wait(
        mut self,
        run: &RunLease<'_>,
        signals: &HeldSignals,
        notice: &mut dyn FnMut(Notice),
    ) -> Result<Leased<'s>, Halt> {
        let waits = Waits::of(run.busy);
        loop {
            match self.look(run, waits, signals, notice) {
                Ok(Look::Done(leased)) => return Ok(*leased),
                Ok(Look::Refused(why)) => return Ok(self.refused(why, run.slots)),
                Ok(Look::QueuedBy(w)) => return Ok(self.queued_by(w, run.slots)),
                Ok(Look::Again) => {}
                Err(Halt::Store(e))
                    if e.is_unreachable() && self.reached && self.may_wait(run, waits) =>
                {
                    self.line.conn = None;
                }
                Err(halt) => return Err(halt),
            }
            std::thread::sleep(STORE_POLL);
            // A signal ends the wait, as it would end a waiting run without
            // a store; nothing was taken, and the place in line is left (the
            // line's drop).
            signalled(signals)?;
        }
    }

    /// Whether the policy waits on now.
    fn may_wait(&self, run: &RunLease<'_>, waits: Waits) -> bool {
        let now = Instant::now();
        waits != Waits::Not
            && self.wait_until.is_none_or(|w| now < w)
            && run.deadline.is_none_or(|d| now < d)
    }

    /// One look: the lease taken, or the policy's answer, or wait on.
    fn look(
        &mut self,
        run: &RunLease<'_>,
        waits: Waits,
        signals: &HeldSignals,
        notice: &mut dyn FnMut(Notice),
    ) -> Result<Look<'s>, Halt> {
        let (name, who) = (run.name, run.who);
        let conn = self.connection(run)?;
        let usable = match self.has_line {
            Some(u) => u,
            None => {
                let u = conn.has_line()?;
                if waits == Waits::Queued && !u {
                    return Ok(Look::Done(Box::new(Leased::NoLine)));
                }
                self.has_line = Some(u);
                u
            }
        };
        // A waiter keeps its row fresh at every look; one found gone (its
        // waiter paused past its end, and the row cleared or its seat
        // taken over) joins the line again, at its end.
        if let Some(t) = self.line.ticket
            && !conn.stay_in_line(name, t, self.ttl)?
        {
            self.line.ticket = Some(conn.join_line(name, who, self.ttl)?);
        }
        let tried = self.try_slots(conn, run)?;
        self.reached = true;
        let why = match tried {
            Ok(h) => {
                // The take removed the waiter's row in the same statement
                // (only once it held the lease: a queued take that finds
                // the seat held looks at the lease next).
                self.line.ticket = None;
                return Ok(Look::Done(Box::new(Leased::Taken(h))));
            }
            Err(Claimed::SlotsDiffer { held }) => {
                return Ok(Look::Done(Box::new(Leased::SlotsDiffer { held })));
            }
            Err(why) => why,
        };
        if !self.may_wait(run, waits) {
            return Ok(Look::Refused(why));
        }
        if self.line.ticket.is_none()
            && let Err(w) = self.join(run, usable, signals, notice)?
        {
            return Ok(Look::QueuedBy(w));
        }
        if let Claimed::Behind { .. } = why {
            clear_dead_ahead(self.line.via(), name, self.line.ticket);
        }
        Ok(Look::Again)
    }

    /// One try at each slot in turn, through `conn` (kept for the next
    /// try): the lease of the first taken, else why the last was not
    /// (a waiter ahead or a holder of another number of slots ends the
    /// tries: it stands for every slot).
    fn try_slots(
        &mut self,
        mut conn: Box<dyn LeaseStore>,
        run: &RunLease<'_>,
    ) -> Result<Result<LeaseHold, Claimed>, StoreError> {
        let mut why = Claimed::Held;
        for k in 0..run.slots {
            let slot = Slot { k, of: run.slots };
            match LeaseHold::take_in_line(
                conn,
                run.name,
                slot,
                run.who,
                run.timing,
                self.line.ticket,
            )? {
                Taking::Taken(h) => return Ok(Ok(*h)),
                Taking::Busy { store: c, why: w } => {
                    conn = c;
                    why = w;
                    if !matches!(w, Claimed::Held) {
                        break;
                    }
                }
            }
        }
        self.line.conn = Some(conn);
        Ok(Err(why))
    }

    /// The connection to try through: the waiter's, else a new one. It may
    /// take longer than a call (nothing is held yet): up to what is left
    /// before the deadline, and at most `run.connect_within`.
    fn connection(&mut self, run: &RunLease<'_>) -> Result<Box<dyn LeaseStore>, StoreError> {
        match self.line.conn.take() {
            Some(c) => Ok(c),
            None => {
                let within = run.deadline.map_or(run.connect_within, |d| {
                    d.saturating_duration_since(Instant::now())
                        .min(run.connect_within)
                });
                self.line.store.fresh_connected(within)
            }
        }
    }

    /// Takes a place in line, on the first look that finds the lease held:
    /// the queue seat for a queued take (or who has it), else a ticket at
    /// the line's end; with no line, [`Notice::Unordered`] once.
    fn join(
        &mut self,
        run: &RunLease<'_>,
        usable: bool,
        signals: &HeldSignals,
        notice: &mut dyn FnMut(Notice),
    ) -> Result<Result<(), NoSeat>, Halt> {
        if !usable {
            if !self.warned {
                self.warned = true;
                notice(Notice::Unordered {
                    what: self.line.store.line_setup().what,
                });
            }
        } else if Waits::of(run.busy) == Waits::Queued {
            match take_queue_seat(self.line.via(), run.name, run.who, self.ttl, signals)? {
                Ok(t) => self.line.ticket = Some(t),
                Err(w) => return Ok(Err(w)),
            }
        } else {
            let t = self.line.via().join_line(run.name, run.who, self.ttl)?;
            self.line.ticket = Some(t);
        }
        Ok(Ok(()))
    }

    /// A take that gave up on `why` (held, or free but owed to waiters
    /// ahead): the lease's row, and the first waiter when owed to them.
    fn refused(self, why: Claimed, slots: u32) -> Leased<'s> {
        let via = self.line.via();
        let holder = first_holder(via, &self.line.name, slots);
        let why = match why {
            Claimed::Behind { ahead } => Refused::Behind {
                ahead,
                first: via
                    .waiters(&self.line.name)
                    .ok()
                    .and_then(|w| w.into_iter().next()),
            },
            _ => Refused::Held,
        };
        Leased::Busy(Busy {
            why,
            holder,
            slots,
            line: self.line,
        })
    }

    /// A queued take that found the queue seat held: the lease's row.
    fn queued_by(self, w: NoSeat, slots: u32) -> Leased<'s> {
        let holder = first_holder(self.line.via(), &self.line.name, slots);
        let waiter = match w {
            NoSeat::Waiter(w) => Some(w),
            NoSeat::Unknown => None,
        };
        Leased::Busy(Busy {
            why: Refused::Queued(waiter),
            holder,
            slots,
            line: self.line,
        })
    }
}

/// The row a refusal names: the lease of `name`, or of a lock of several
/// slots the first live one (else slot 0's).
fn first_holder(store: &dyn LeaseStore, name: &str, slots: u32) -> Option<LeaseRow> {
    if slots <= 1 {
        return store.inspect(name).ok().flatten();
    }
    let rows = store.inspect_slots(name).ok()?;
    rows.iter()
        .find(|r| r.is_live() && r.slot < slots)
        .or_else(|| rows.first())
        .cloned()
}

/// What took the queue seat from this take.
enum NoSeat {
    /// This live waiter (not yet the lease's holder when last seen).
    Waiter(Box<WaiterRow>),
    /// One that came and went while this take looked.
    Unknown,
}

/// Takes the queue seat of `name` for `who`: its ticket, or who has
/// it. A seat whose waiter is dead is taken over: a row past its end, or
/// one of this host whose waiter's process is gone (at once, not after its
/// end). A live waiter that has already taken the lease is letting the
/// seat go: that is waited for ([`PLACE_HANDOVER`]). Otherwise the take
/// gives up: the waiter it saw had not yet begun its run, which will pick
/// up what this one would have done.
fn take_queue_seat(
    c: &dyn LeaseStore,
    name: &str,
    who: &Claimant<'_>,
    ttl: Duration,
    signals: &HeldSignals,
) -> Result<Result<i64, NoSeat>, Halt> {
    let here = crate::procfs::host_name();
    let mut replacing: Option<String> = None;
    for _ in 0..8 {
        if let Some(t) = c.take_queue_seat(name, who, ttl, replacing.as_deref())? {
            return Ok(Ok(t));
        }
        // The lease is looked at after the seat (see the directory's
        // queue: a take gives up only while the waiter's run has not
        // begun).
        let Some(w) = c.queued(name)? else {
            continue;
        };
        if !w.is_live() || w.alive_on(&here) == Some(false) {
            replacing = Some(w.token.clone());
            continue;
        }
        // The waiter's run may hold any slot of the lock.
        let holds = c
            .inspect_slots(name)?
            .iter()
            .any(|l| l.is_live() && l.token == w.token);
        if !holds {
            return Ok(Err(NoSeat::Waiter(Box::new(w))));
        }
        return seat_handed_over(c, name, who, ttl, &w.token, signals);
    }
    Ok(Err(NoSeat::Unknown))
}

/// Waits up to [`PLACE_HANDOVER`] for the waiter `token`, which holds the
/// lease now, to let the queue seat go, then takes it: its ticket, or who
/// has it still.
fn seat_handed_over(
    c: &dyn LeaseStore,
    name: &str,
    who: &Claimant<'_>,
    ttl: Duration,
    token: &str,
    signals: &HeldSignals,
) -> Result<Result<i64, NoSeat>, Halt> {
    let until = Instant::now() + PLACE_HANDOVER;
    while Instant::now() < until {
        std::thread::sleep(STORE_POLL / 2);
        signalled(signals)?;
        if let Some(t) = c.take_queue_seat(name, who, ttl, Some(token))? {
            return Ok(Ok(t));
        }
    }
    Ok(Err(match c.queued(name)? {
        Some(w) => NoSeat::Waiter(Box::new(w)),
        None => NoSeat::Unknown,
    }))
}

/// What the watchdog of the run of `token` under `hold` watches over (see
/// [`crate::place::store::watchdog`]): this process's user and start time, the
/// lease's timing and the take's send time.
pub fn watched(hold: &LeaseHold, token: &str, timing: LeaseTiming) -> std::io::Result<Watched> {
    let me = crate::ProcId::of(std::process::id())
        .ok_or_else(|| std::io::Error::other("cannot read this process's start time"))?;
    Ok(Watched {
        token: token.to_owned(),
        uid: rustix::process::getuid().as_raw(),
        since: me.start,
        timing,
        sent: hold.watch().sent(),
    })
}

/// Starts the run's watchdog: `program`, a process that runs
/// [`watch`](crate::place::store::watchdog::watch) over what [`watched`] gave, its
/// standard input the link. It gets a process group of its own, no run's
/// variables in its environment (it is not the run), and no output; the
/// link is attached to `hold`.
pub fn start_watchdog(
    hold: &LeaseHold,
    mut program: std::process::Command,
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let child = program
        .env_remove(crate::supervise::LOCK_VAR)
        .env_remove(crate::supervise::TOKEN_VAR)
        .env_remove(crate::supervise::FENCE_VAR)
        .env_remove(crate::supervise::SLOT_VAR)
        .stdin(std::os::fd::OwnedFd::from(theirs))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()?;
    hold.attach(Link::new(ours.into()));
    Ok(child)
}

/// Removes the rows ahead of `mine` in `name`'s line whose waiters were
/// of this host and are gone (killed): they would keep the free lease from
/// the line until their end. Another host's rows are left to their end.
fn clear_dead_ahead(store: &dyn LeaseStore, name: &str, mine: Option<i64>) {
    let here = crate::procfs::host_name();
    let Ok(waiters) = store.waiters(name) else {
        return;
    };
    for w in waiters {
        if mine.is_some_and(|t| w.ticket >= t) {
            break;
        }
        if w.alive_on(&here) == Some(false) {
            let _ = store.leave_line(name, w.ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiters_row_outlasts_a_few_calls_and_three_seconds() {
        let short = LeaseTiming::new(Duration::from_secs(6), Duration::from_secs(1)).unwrap();
        assert!(waiter_ttl(short) >= Duration::from_secs(3));
        assert!(waiter_ttl(short) >= short.call_timeout * 4);
    }
}
