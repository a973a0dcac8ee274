//! A lock held in a store of leases: the lease taken, renewed by a thread
//! of its own (see [`crate::place::store::timing`]), released at the end.

use std::time::Duration;

use super::{Claimant, Claimed, LeaseStore, Renewed, Slot, StoreError};
use crate::place::store::timing::{LeaseTiming, LeaseWatch, Renewals, boot_ns};
use crate::place::store::watchdog::Link;

/// How soon a call the end of a run needs is tried again.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// What [`LeaseHold::take_in_line`] came back with.
#[derive(Debug)]
pub(crate) enum Taking {
    /// The lease, held.
    Taken(Box<LeaseHold>),
    /// Not taken ([`Claimed::Held`] or [`Claimed::Behind`]): the store, for the
    /// next try.
    Busy {
        /// The store, its connection kept.
        store: Box<dyn LeaseStore>,
        /// Why it was not taken.
        why: Claimed,
    },
}

/// A lock held in a store of leases.
#[derive(Debug)]
pub struct LeaseHold {
    store: Box<dyn LeaseStore>,
    /// The lock's name.
    name: String,
    /// The slot held, and its lease row's name.
    slot: Slot,
    row: String,
    token: String,
    epoch: i64,
    watch: LeaseWatch,
    /// The run's watchdog, once attached.
    link: std::sync::OnceLock<std::sync::Arc<Link>>,
    released: bool,
}

impl LeaseHold {
    /// Takes `name`, or `Ok(None)` when it is held (or goes to a waiter in
    /// line first). The renewal thread starts at once.
    pub fn take(
        store: Box<dyn LeaseStore>,
        name: &str,
        who: &Claimant<'_>,
        timing: LeaseTiming,
    ) -> Result<Option<LeaseHold>, StoreError> {
        Ok(
            match LeaseHold::take_in_line(store, name, Slot::ONE, who, timing, None)? {
                Taking::Taken(h) => Some(*h),
                Taking::Busy { .. } => None,
            },
        )
    }

    /// Takes slot `slot` of `name` as the waiter of `ticket` in its line
    /// (see [`LeaseStore::take`]; no ticket: a newcomer, behind every live
    /// waiter). When it is not taken, the store comes back with why, for
    /// the waiter's next try on the same connection.
    pub(crate) fn take_in_line(
        store: Box<dyn LeaseStore>,
        name: &str,
        slot: Slot,
        who: &Claimant<'_>,
        timing: LeaseTiming,
        ticket: Option<i64>,
    ) -> Result<Taking, StoreError> {
        // The deadline counts from the send (PROTOCOL.md invariant 6).
        let sent = boot_ns();
        let epoch = match store.take(name, slot, who, timing.lease, ticket)? {
            Claimed::Taken(epoch) => epoch,
            why => return Ok(Taking::Busy { store, why }),
        };
        let renewer = store.fresh()?;
        let row = super::slot_row(name, slot.k);
        let owned = row.clone();
        let watch = LeaseWatch::start(timing, sent, move |r| {
            super::spawn_thread("onlyone-renew", move || {
                renew_loop(renewer, &owned, epoch, &r)
            })
        })
        .map_err(|source| StoreError::Runtime {
            what: "the renewals",
            source,
        })?;
        Ok(Taking::Taken(Box::new(LeaseHold {
            store,
            name: name.to_owned(),
            slot,
            row,
            token: who.token.to_owned(),
            epoch,
            watch,
            link: std::sync::OnceLock::new(),
            released: false,
        })))
    }

    /// The fence: the acquisition's epoch.
    pub fn fence(&self) -> i64 {
        self.epoch
    }

    /// The run's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The slot held: 0 for a lock of one slot.
    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// The lease, as the supervision watches it.
    pub(crate) fn watch(&self) -> &LeaseWatch {
        &self.watch
    }

    /// The store this lease is in.
    pub fn store(&self) -> &dyn LeaseStore {
        self.store.as_ref()
    }

    /// Stops renewing and ends the lease now (after the command has
    /// stopped: PROTOCOL.md invariant 7). A lease already lost is not
    /// touched. A store that cannot be reached (a server restarting, a
    /// connection closed under it) is tried again, on a new connection,
    /// until the lease would have run out anyway ([`LeaseHold::retry`]).
    pub fn release(mut self) -> Result<(), StoreError> {
        self.watch.stop_thread();
        self.released = true;
        self.watchdog_done();
        if self.watch.lost() {
            return Ok(());
        }
        let (store, name, epoch) = (&self.store, &self.row, self.epoch);
        self.retry(|| store.release(name, epoch)).map(|_| ())
    }

    /// Calls `f` until it succeeds, fails otherwise than by an unreachable
    /// store, or the lease would have run out (`t_send + L`, when nothing
    /// is left that a release could hand over early; at least one call).
    /// For what a run's end must still tell the store: its release, its
    /// end event.
    pub fn retry<T>(&self, mut f: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
        let until = self.watch.deadline();
        loop {
            match f() {
                Err(e) if e.is_unreachable() => {
                    let now = boot_ns();
                    if now >= until {
                        return Err(e);
                    }
                    let wait = Duration::from_nanos((until - now) as u64);
                    std::thread::sleep(wait.min(RETRY_EVERY));
                }
                done => return done,
            }
        }
    }

    /// Stops renewing and leaves the lease to run out (the run's
    /// processes would not die: the lock must not be handed over before
    /// its time).
    pub fn abandon(mut self) {
        self.watch.stop_thread();
        self.released = true;
        self.watchdog_done();
    }

    /// Links the run's watchdog (see [`crate::place::store::watchdog`]): it
    /// hears of every renewal.
    pub fn attach(&self, link: Link) {
        let link = std::sync::Arc::new(link);
        self.watch.attach(link.clone());
        let _ = self.link.set(link);
    }

    fn watchdog_done(&self) {
        if let Some(link) = self.link.get() {
            link.done();
        }
    }
}

impl Drop for LeaseHold {
    fn drop(&mut self) {
        if !self.released {
            self.watch.stop_thread();
            self.watchdog_done();
            if !self.watch.lost() {
                let _ = self.store.release(&self.row, self.epoch);
            }
        }
    }
}

/// Renews every R until told to stop or the lease is lost (a stop request
/// is reported, and renewals go on: the run ends itself, then releases).
fn renew_loop(store: Box<dyn LeaseStore>, name: &str, epoch: i64, r: &Renewals) {
    let t = r.timing();
    let mut next = boot_ns() + t.renew_every.as_nanos() as i64;
    loop {
        loop {
            if r.done() {
                return;
            }
            let now = boot_ns();
            if now >= next {
                break;
            }
            std::thread::park_timeout(Duration::from_nanos((next - now) as u64));
        }
        let sent = boot_ns();
        match store.renew(name, epoch, t.lease) {
            Ok(Renewed::Held { stop }) => {
                r.renewed(if mutant_deadline_from_reply() {
                    boot_ns()
                } else {
                    sent
                });
                if stop {
                    r.stop_requested();
                }
                next = sent + t.renew_every.as_nanos() as i64;
            }
            Ok(Renewed::Lost) => {
                r.lost();
                return;
            }
            // Unreachable, timed out: try again soon, on a new connection.
            Err(_) => next = boot_ns() + (t.renew_every / 4).as_nanos() as i64,
        }
    }
}

impl crate::supervise::Hold for LeaseHold {
    fn vars(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        let mut vars = vec![
            (
                crate::supervise::LOCK_VAR,
                format!("{}:{}", self.store.scheme(), self.name).into(),
            ),
            (crate::supervise::TOKEN_VAR, self.token.clone().into()),
            (crate::supervise::FENCE_VAR, self.epoch.to_string().into()),
        ];
        vars.extend(
            crate::journal::run_id(&self.token).map(|r| (crate::supervise::RUN_ID_VAR, r.into())),
        );
        vars.push((crate::supervise::SLOT_VAR, self.slot.k.to_string().into()));
        vars
    }

    fn set_command(&mut self, pid: u32) -> crate::Result<()> {
        if let (Some(link), Some(id)) = (self.link.get(), crate::ProcId::of(pid)) {
            link.command(id);
        }
        Ok(())
    }

    fn record(&self) -> Option<&crate::Record> {
        None
    }

    fn refresh(&self) -> crate::Result<()> {
        Ok(())
    }

    fn limit(&self) -> Option<&dyn crate::supervise::Limit> {
        Some(&self.watch)
    }
}

/// The mutant PROTOCOL.md names for invariant 6 (the deadline counted from
/// the reply), for the test that shows the invariant's test catches it.
/// Only with the `test-hooks` feature.
fn mutant_deadline_from_reply() -> bool {
    cfg!(feature = "test-hooks")
        && std::env::var_os("ONLYONE_TEST_LEASE_MUTANT").is_some_and(|v| v == "deadline-from-reply")
}
