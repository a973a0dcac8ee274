//! The store place: a lease in a store that several hosts share, its
//! history kept in the store, so that every host sees every host's runs.
//!
//! A lock is a name (the same names as a lock directory's: a path means
//! nothing to a shared store). A stop is a request that the lease's
//! holder, on whatever host, sees at its next renewal: it ends its
//! command, then lets go.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

pub(crate) mod engine;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
pub mod hold;
mod line;
#[cfg(feature = "postgres")]
pub(crate) mod pg;
mod take;
pub mod timing;
// The run's watchdog process: public only for the onlyone command, which
// is the program that runs it (`onlyone lease-watchdog`); not part of
// the API.
#[doc(hidden)]
pub mod watchdog;

pub use engine::*;

pub use line::{Busy, Leased, RunLease, take_for_run};
pub use take::WatchdogProgram;

use super::{
    Found, HistoryRead, Holding, Kind, Notes, Place, PlaceError, Prechecked, StopDone, StopRequest,
    Stopped, log_event,
};
use crate::journal::{Event, EventKind, EventLog, History, LockNow};
use crate::names;
use crate::place::store::timing::DEFAULT_LEASE;
use line::STORE_POLL;

/// How long a look that only reads the store waits for it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The store at a URL, as a place.
#[derive(Clone)]
pub struct StorePlace {
    url: String,
    /// Who hears what is said on the side.
    notes: Notes,
    /// How a run's watchdog is started.
    watchdog: Option<WatchdogProgram>,
    /// The forwarded signals (TERM, INT, HUP, QUIT, USR1, USR2, ALRM),
    /// held from a run's take to the place's end: before the command
    /// starts (while waiting for the lease) one ends the wait, while it
    /// runs the supervisor forwards it, after its end it is dropped, so
    /// that the end is recorded, the lease released and the end told
    /// whatever comes.
    signals: std::rc::Rc<std::cell::OnceCell<HeldSignals>>,
    /// The connection a fire's look at its schedule made, given back when
    /// the look is done, for the fire's take or precheck: a fire makes one
    /// connection, not two.
    spare: Spare,
}

/// A connection kept for the next call of a place's.
type Spare = std::rc::Rc<std::cell::RefCell<Option<Box<dyn LeaseStore>>>>;

impl StorePlace {
    /// The store at `url`; `notes` hears what is said on the side.
    pub fn new(url: &str, notes: Notes) -> StorePlace {
        StorePlace {
            url: url.to_owned(),
            notes,
            watchdog: None,
            signals: std::rc::Rc::default(),
            spare: Spare::default(),
        }
    }

    /// Starts each run's watchdog with `program` (a run is refused
    /// without one: a killed wrapper would leave its command running past
    /// its lease).
    pub fn with_watchdog(mut self, program: WatchdogProgram) -> StorePlace {
        self.watchdog = Some(program);
        self
    }

    /// How a run's watchdog is started, if this place was told.
    pub(crate) fn watchdog(&self) -> Option<&WatchdogProgram> {
        self.watchdog.as_ref()
    }

    /// Who hears what this place says on the side.
    pub(crate) fn notes(&self) -> &Notes {
        &self.notes
    }

    /// The forwarded signals, held blocked from now until the place is
    /// dropped.
    pub(crate) fn held_signals(&self) -> Result<&HeldSignals, PlaceError> {
        if self.signals.get().is_none() {
            let held = HeldSignals::new().map_err(|e| {
                PlaceError::Lock(crate::Error::io("block the signals of", "this process", e))
            })?;
            let _ = self.signals.set(held);
        }
        Ok(self.signals.get().expect("set just now"))
    }

    /// The store's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The store, every call given up after `timeout`.
    pub fn open(&self, timeout: Duration) -> Result<Box<dyn LeaseStore>, StoreError> {
        crate::place::store::open(&self.url, timeout)
    }

    /// The connection a look at a schedule made and gave back, if there is
    /// one, every call now given up after `timeout`.
    pub(crate) fn spare(&self, timeout: Duration) -> Option<Box<dyn LeaseStore>> {
        let s = self.spare.borrow_mut().take()?;
        s.set_timeout(timeout);
        Some(s)
    }
}

impl StorePlace {
    /// Waits for the lease of `row` (a live lease of a slot of `name`,
    /// whose holder was asked to stop, `dead` if judged gone) to go, up
    /// to `limit`; the stop recorded.
    fn let_go(
        &self,
        store: &dyn LeaseStore,
        name: &str,
        (row, dead): (LeaseRow, bool),
        started: Instant,
        limit: Instant,
    ) -> Result<Stopped, PlaceError> {
        let key = crate::place::store::slot_row(name, row.slot);
        loop {
            match store.inspect(&key)? {
                Some(now) if now.epoch == row.epoch && now.is_live() => {}
                _ => break,
            }
            if Instant::now() >= limit {
                let waited = started.elapsed();
                let holder = Box::new(row);
                return Ok(Stopped::NotLetGo { holder, waited });
            }
            std::thread::sleep(STORE_POLL);
        }
        let ev = Event::stop(Some(&row.token), row.pid, row.cmd.as_deref(), None);
        let log = StoreLog { store, name };
        log_event(&log, &ev, Some(&self.notes));
        let took = started.elapsed();
        let holder = Box::new(row);
        Ok(if dead {
            Stopped::RanOut { holder, took }
        } else {
            Stopped::LetGo { holder, took }
        })
    }
}

/// When a stop of `rows` gives up: the deadline, else once the longest
/// lease left, the grace and a lease more have passed (the holder renews
/// every L/6 at most; its command then gets its grace).
fn stop_limit(rows: &[(LeaseRow, bool)], how: &StopRequest) -> Instant {
    how.deadline.unwrap_or_else(|| {
        let left = rows.iter().map(|(r, _)| r.left_ms).max().unwrap_or(0);
        let wait = seconds(left as f64 / 1000.0)
            .saturating_add(how.grace)
            .saturating_add(DEFAULT_LEASE);
        let now = Instant::now();
        now.checked_add(wait)
            .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365))
    })
}

/// A lock's name as the store keys it: a name, never a path.
pub fn lock_name(lock: &str) -> Result<String, PlaceError> {
    if lock.contains('/') {
        return Err(PlaceError::PathForName(lock.to_owned()));
    }
    names::check_name(lock)?;
    Ok(lock.to_owned())
}

/// The history of `name` in the store.
pub fn history(store: &dyn LeaseStore, name: &str) -> Result<History, StoreError> {
    let lines = store.events(name)?;
    Ok(History::from_lines(lines.iter().map(String::as_str)))
}

/// How long a fire given no schedule waits for the store to say whether
/// it keeps one of the lock (its connection made too), as a fire waits at
/// most a second for another's look at a journal.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How many times a fire reads its lock's schedule again when other fires
/// recorded theirs first: each time one did, so this many fires at the
/// same instant on as many hosts, each with something to record.
const LOOK_TRIES: usize = 32;

/// Where the fires of a lock in a store look at its schedule
/// ([`crate::journal::ScheduleLog`]): what the store keeps of it
/// ([`KeptSchedule`]) and the lock's history. What a fire found is
/// recorded in one step of the store's, and only if no fire recorded since
/// it read ([`LeaseStore::record_schedule`]); else it reads again and finds
/// theirs. So of fires at the same instant, on any hosts, one records the
/// fires missed and the others find them recorded: no local lock is
/// involved, and none would do, the fires being on several hosts.
struct ScheduleLog {
    /// Always there until dropped, when it goes back to `spare`.
    store: Option<Box<dyn LeaseStore>>,
    name: String,
    spare: Spare,
}

impl ScheduleLog {
    fn store(&self) -> &dyn LeaseStore {
        self.store.as_deref().expect("kept until dropped")
    }

    fn log(&self) -> StoreLog<'_> {
        StoreLog {
            store: self.store(),
            name: &self.name,
        }
    }
}

impl Drop for ScheduleLog {
    /// Its connection goes back to the place, for the fire's take.
    fn drop(&mut self) {
        *self.spare.borrow_mut() = self.store.take();
    }
}

impl crate::journal::EventLog for ScheduleLog {
    /// Appends alone (a fire's `delay`): not a record of what it found.
    fn append(&self, ev: &Event) -> std::io::Result<()> {
        self.log().append(ev)
    }

    fn describe(&self) -> String {
        self.log().describe()
    }
}

/// The events a fire's look found to record, kept until it records them
/// in one step.
#[derive(Default)]
struct ToRecord(std::cell::RefCell<Vec<Event>>);

impl crate::journal::EventLog for ToRecord {
    fn append(&self, ev: &Event) -> std::io::Result<()> {
        self.0.borrow_mut().push(ev.clone());
        Ok(())
    }

    fn describe(&self) -> String {
        "the store's history".to_owned()
    }
}

impl crate::journal::ScheduleLog for ScheduleLog {
    /// Whether the store keeps a schedule of the lock: a row of it, asked
    /// within [`PROBE_TIMEOUT`] (every fire asks, given a schedule or not:
    /// a store that does not answer costs a fire that second, no more).
    fn may_keep_schedule(&self) -> std::io::Result<bool> {
        let store = self.store();
        store.set_timeout(PROBE_TIMEOUT);
        let kept = store.schedule_kept(&self.name);
        store.set_timeout(READ_TIMEOUT);
        Ok(kept.map_err(std::io::Error::other)?.is_some())
    }

    /// Reads the kept schedule's version, then the history, and records
    /// what `record` found only if that version is still the store's;
    /// else again. A schedule kept that the history no longer has (its
    /// oldest events go) is the history's, and written to it again.
    fn look(&self, record: &mut dyn FnMut(&History, &dyn EventLog)) -> std::io::Result<()> {
        let io = std::io::Error::other;
        for _ in 0..LOOK_TRIES {
            let kept = self.store().schedule_kept(&self.name).map_err(io)?;
            let version = kept.as_ref().map_or(0, |k| k.version);
            let mut h = history(self.store(), &self.name).map_err(io)?;
            let lost = kept
                .and_then(|k| k.spec)
                .filter(|_| h.scheduled.schedule.is_none());
            if let Some(spec) = &lost {
                h.scheduled.schedule = Some(spec.clone());
            }
            let found = ToRecord::default();
            record(&h, &found);
            let mut events = found.0.into_inner();
            let kept_again = |e: &Event| e.event == EventKind::Schedule && e.reason.is_none();
            if let Some(spec) = lost.filter(|_| !events.iter().any(kept_again)) {
                events.insert(0, Event::schedule(&spec));
            }
            if events.is_empty() {
                return Ok(());
            }
            let spec = events
                .iter()
                .rev()
                .find(|e| kept_again(e))
                .and_then(|e| e.schedule.clone());
            let lines: Vec<String> = events
                .iter()
                .map(|e| String::from_utf8_lossy(&e.to_line()).into_owned())
                .collect();
            let recorded = self
                .store()
                .record_schedule(&self.name, version, spec.as_deref(), &lines)
                .map_err(io)?;
            if recorded {
                return Ok(());
            }
        }
        Err(std::io::Error::other(format!(
            "{LOOK_TRIES} other fires recorded what they found of its schedule while this one \
             looked; it records nothing"
        )))
    }
}

/// A span of seconds from the store as a duration (negative, NaN or huge
/// values read from a row are no panic: 0, or the largest).
pub fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

impl Place for StorePlace {
    fn kind(&self) -> Kind {
        Kind::Store
    }

    fn lock(&self, given: &str, slots: NonZeroU32) -> Result<super::Lock, PlaceError> {
        let name = lock_name(given)?;
        Ok(super::Lock::new(
            name.clone(),
            super::LockKey::Name(name),
            slots,
        ))
    }

    /// The store's: its schedules' table and the lock's history (a
    /// `journal::ScheduleLog` of its own), on a connection of its own
    /// (made at its first call).
    fn schedule_log(
        &self,
        lock: &super::Lock,
    ) -> Result<Option<Box<dyn crate::journal::ScheduleLog>>, PlaceError> {
        let store = match self.spare(READ_TIMEOUT) {
            Some(s) => s,
            None => self.open(READ_TIMEOUT)?,
        };
        Ok(Some(Box::new(ScheduleLog {
            store: Some(store),
            name: lock.name().to_owned(),
            spare: self.spare.clone(),
        })))
    }

    fn take<'p>(
        &'p self,
        lock: &super::Lock,
        job: &super::run::Job,
        observer: &mut dyn crate::place::run::RunObserver,
    ) -> Result<super::run::Taken<'p>, PlaceError> {
        take::take(self, lock, job, observer)
    }

    /// Held only while each of the lock's `slots` has a live lease; an
    /// unreachable server is an error (the fire runs).
    fn precheck(
        &self,
        lock: &super::Lock,
        deadline: Option<Instant>,
    ) -> Result<Prechecked, PlaceError> {
        let slots = lock.slots();
        let timeout = deadline
            .map_or(READ_TIMEOUT, |d| {
                d.saturating_duration_since(Instant::now())
            })
            .min(READ_TIMEOUT);
        let name = lock.name().to_owned();
        let store = match self.spare(timeout) {
            Some(s) => s,
            None => self.open(timeout)?,
        };
        let live: Vec<LeaseRow> = if slots == 1 {
            store.inspect(&name)?.into_iter().collect()
        } else {
            store.inspect_slots(&name)?
        };
        let live: Vec<LeaseRow> = live
            .into_iter()
            .filter(|r| r.is_live() && r.slot < slots)
            .collect();
        let every = (0..slots).all(|k| live.iter().any(|r| r.slot == k));
        let found = match live.into_iter().next() {
            Some(row) if every => {
                let ev = Event::skip(Some(&row.token), row.pid, row.cmd.as_deref());
                let log = StoreLog {
                    store: store.as_ref(),
                    name: &name,
                };
                log_event(&log, &ev, None);
                Found::Held(Some(Holding::Lease(Box::new(row))))
            }
            _ => Found::Free(None),
        };
        Ok(Prechecked { name, found })
    }

    /// A request each live holder (of every slot) sees at its next
    /// renewal; it ends its command, then releases. Every holder is asked
    /// first, then each let-go waited for, up to the deadline.
    fn stop(&self, lock: &super::Lock, how: &StopRequest) -> Result<StopDone, PlaceError> {
        let name = lock.name().to_owned();
        let store = self.open(READ_TIMEOUT)?;
        let here = crate::procfs::host_name();
        let live: Vec<LeaseRow> = store
            .inspect_slots(&name)?
            .into_iter()
            .filter(LeaseRow::is_live)
            .collect();
        let rows = match how.pid {
            None => live,
            // The holder whose wrapper has that pid: this host's first
            // (a pid is its host's), else another host's.
            Some(pid) => {
                let mine = |r: &&LeaseRow| r.pid == Some(pid);
                let chosen = live
                    .iter()
                    .filter(mine)
                    .find(|r| r.host.as_deref() == Some(here.as_str()))
                    .or_else(|| live.iter().find(mine))
                    .cloned();
                match chosen {
                    Some(r) => vec![r],
                    None => {
                        let holders = live.iter().filter_map(|r| r.pid).collect();
                        return Ok(StopDone {
                            name,
                            stopped: Stopped::NoRunWithPid { pid, holders },
                            others: Vec::new(),
                        });
                    }
                }
            }
        };
        let mut asked = Vec::new();
        for row in rows {
            // Judged now: once the lease is gone, a holder that ended
            // cleanly is gone too.
            let dead = row.holder_alive_on(&here) == Some(false);
            let key = crate::place::store::slot_row(&name, row.slot);
            if store.request_stop(&key)?.is_some() {
                asked.push((row, dead));
            }
        }
        let (started, limit) = (Instant::now(), stop_limit(&asked, how));
        let mut all = Vec::new();
        for row in asked {
            all.push(self.let_go(store.as_ref(), &name, row, started, limit)?);
        }
        let stopped = if all.is_empty() {
            Stopped::NotRunning
        } else {
            all.remove(0)
        };
        Ok(StopDone {
            name,
            stopped,
            others: all,
        })
    }

    fn history(&self, lock: &super::Lock) -> Result<HistoryRead, PlaceError> {
        let name = lock.name().to_owned();
        let store = self.open(READ_TIMEOUT)?;
        let mut h = history(store.as_ref(), &name)?;
        // The rows after the history (see `History::close_over`): every
        // slot's live run.
        if let Ok(rows) = store.inspect_slots(&name) {
            let live: Vec<&str> = rows
                .iter()
                .filter(|r| r.is_live())
                .map(|r| r.token.as_str())
                .collect();
            h.close_over(LockNow::Slots(&live));
        }
        Ok(HistoryRead {
            name,
            history: h,
            source: store.url().to_owned(),
        })
    }
}
