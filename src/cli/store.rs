//! The commands with `--store URL`: a store, for jobs that
//! run on several hosts. The lock is a lease (see
//! `onlyone::place::store::timing`); the journal is kept in the store, so that
//! every host sees every host's runs.

use std::time::{Duration, Instant};

use onlyone::journal::LockNow;
use onlyone::place::store::watchdog::Watched;
use onlyone::place::store::{LeaseRow, LeaseStore};
use onlyone::place::store::{READ_TIMEOUT, history};

use super::place::{Named, Place};
use super::view::{LockStatus, Seen, Shown, WaiterStatus, Whence};

/// The store at `url`, every call given up after `timeout`.
pub fn open(url: &str, timeout: Duration) -> Result<Box<dyn LeaseStore>, String> {
    onlyone::place::store::open(url, timeout).map_err(|e| super::words::store_error(&e))
}

fn host() -> String {
    onlyone::command::host_name()
}

/// The store, as the place of a run's lock.
pub struct StorePlace {
    /// The store as the library's place: take, precheck, stop and history.
    place: onlyone::place::store::StorePlace,
}

impl StorePlace {
    /// The store at `url`: a run's watchdog is this program's
    /// `lease-watchdog`.
    pub fn new(url: &str) -> StorePlace {
        let program: onlyone::place::WatchdogProgram = std::sync::Arc::new(|w: &Watched| {
            let mut program = std::process::Command::new(std::env::current_exe()?);
            program
                .arg("lease-watchdog")
                .args(["--token", &w.token])
                .args(["--uid", &w.uid.to_string()])
                .args(["--since", &w.since.to_string()])
                .args(["--lease-ms", &w.timing.lease.as_millis().to_string()])
                .args(["--grace-ms", &w.timing.grace.as_millis().to_string()])
                .args(["--sent", &w.sent.to_string()]);
            Ok(program)
        });
        StorePlace {
            place: onlyone::place::store::StorePlace::new(url, super::notes())
                .with_watchdog(program),
        }
    }
}

/// `status` with a store: every lease (or the named ones), in the schema
/// of a lock directory's status with the lease's fields added.
fn shown(url: &str, named: &[String], deadline: Option<Instant>) -> Result<Shown, String> {
    let timeout = deadline.map_or(READ_TIMEOUT, |d| {
        d.saturating_duration_since(Instant::now())
            .min(READ_TIMEOUT)
    });
    let store = open(url, timeout)?;
    let rows = store.list().map_err(|e| e.to_string())?;
    let here = host();
    // Each lock's rows together, slot 0 first, where its first row is in
    // the store's order (which is its collation's: `sync-a` may come
    // between `sync` and `sync#1`).
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        first.entry(r.name.as_str()).or_insert(i);
    }
    let mut ordered: Vec<&LeaseRow> = rows
        .iter()
        .filter(|r| named.is_empty() || named.contains(&r.name))
        .collect();
    ordered.sort_by_key(|r| (first[r.name.as_str()], r.slot));
    let mut locks: Vec<LockStatus> = Vec::new();
    for r in ordered {
        // A slot's row above 0 is its lock's (`NAME[K]`, no history: the
        // runs are the lock's), after the lock's own row.
        if let Some(base) = locks.last_mut().filter(|b| b.name == r.name && r.slot > 0) {
            let mut slot = super::view::of_lease(r, &here, Err(String::new()));
            slot.name = format!("{}[{}]", r.name, r.slot);
            slot.journal_error = None;
            base.slot_holders.push(slot);
            continue;
        }
        // Every slot's live run, from the rows read after the history.
        let tokens: Vec<&str> = rows
            .iter()
            .filter(|x| x.name == r.name && x.is_live())
            .map(|x| x.token.as_str())
            .collect();
        let h = history(store.as_ref(), &r.name)
            .map(|mut h| {
                h.close_over(LockNow::Slots(&tokens));
                h
            })
            .map_err(|e| format!("cannot read the store's history of `{}`: {e}", r.name));
        let mut s = super::view::of_lease(r, &here, h);
        // Who waits, first in line first; a waiter of this host that is
        // gone is left out (its row only waits for its end).
        s.waiters = store
            .waiters(&r.name)
            .unwrap_or_default()
            .into_iter()
            .filter(|w| w.alive_on(&here) != Some(false))
            .map(|w| {
                WaiterStatus::new(
                    w.pid.unwrap_or(0),
                    w.host,
                    w.uid,
                    w.cmd,
                    Some(w.since.max(0.0) as u64),
                    w.queued,
                )
            })
            .collect();
        locks.push(s);
    }
    // N of a lock of several slots, as a live slot's row says it.
    for s in &mut locks {
        let n = rows
            .iter()
            .filter(|r| r.name == s.name && r.is_live() && r.slots > 1)
            .map(|r| r.slots)
            .next();
        s.slot_count = n;
    }
    let mut notes: Vec<String> = locks
        .iter()
        .filter_map(|s| {
            let why = s.reason.as_ref()?;
            Some(format!(
                "`{}` is {why}",
                onlyone::text::for_terminal(&s.name)
            ))
        })
        .collect();
    if let Ok(Some(setup)) = store.missing_index() {
        notes.push(format!(
            "the store `{}` has no {} and this role may not create it, so every take reads the \
             whole lease table to find a lock's slots; have it created with:\n{}(doc/store.md, \
             \"Setup and the least privileges\")",
            store.url(),
            setup.what,
            setup.how
        ));
    }
    // A name given that has no row and no history is nowhere (a typo).
    let missing = named
        .iter()
        .filter(|n| !rows.iter().any(|r| &r.name == *n))
        .filter(|n| history(store.as_ref(), n).is_ok_and(|h| super::view::nothing_in(&h)))
        .map(|n| {
            let looked = format!("no lease row and no history of `{n}` in the store");
            (n.clone(), looked)
        })
        .collect();
    Ok(Shown {
        locks,
        whence: Whence::Store(store.url().to_owned()),
        notes,
        none: format!("no leases in the store `{}`", store.url()),
        missing,
    })
}

impl Place for StorePlace {
    fn seam(&self) -> &dyn onlyone::place::Place {
        &self.place
    }

    fn store_url(&self) -> Option<String> {
        Some(self.place.url().to_owned())
    }

    fn seen(&self, locks: &[String], deadline: Option<Instant>) -> Result<Vec<Named>, String> {
        let timeout = deadline.map_or(READ_TIMEOUT, |d| {
            d.saturating_duration_since(Instant::now())
                .min(READ_TIMEOUT)
        });
        let store = open(self.place.url(), timeout)?;
        let names = if locks.is_empty() {
            store.names().map_err(|e| e.to_string())?
        } else {
            locks.to_vec()
        };
        let look = |n: &str| -> Result<Seen, String> {
            // The history first (see `History::close_over`).
            let mut history = history(store.as_ref(), n).map_err(|e| e.to_string())?;
            // Every slot's row, slot 0 first: the first live one is the
            // current run.
            let rows = store.inspect_slots(n).map_err(|e| e.to_string())?;
            let live: Vec<&LeaseRow> = rows.iter().filter(|r| r.is_live()).collect();
            let tokens: Vec<&str> = live.iter().map(|r| r.token.as_str()).collect();
            history.close_over(LockNow::Slots(&tokens));
            let missing = (rows.is_empty() && super::view::nothing_in(&history))
                .then(|| format!("no lease row and no history of `{n}` in the store"));
            let slots = live
                .iter()
                .map(|r| r.slots)
                .find(|&k| k > 1)
                .map(|k| (k, live.len() as u32));
            Ok(Seen {
                held: live.first().map(|r| (Some(r.token.clone()), Some(r.since))),
                unknown: None,
                history,
                name: n.to_owned(),
                missing,
                slots,
                late: false,
                other: None,
            }
            .with_journals_slots())
        };
        Ok(names
            .into_iter()
            .map(|n| {
                let seen = if deadline.is_some_and(|d| Instant::now() >= d) {
                    Err(super::view::NOT_REACHED.to_owned())
                } else {
                    look(&n)
                };
                (n, seen)
            })
            .collect())
    }

    fn shown(&self, named: &[String], deadline: Option<Instant>) -> Result<Shown, String> {
        shown(self.place.url(), named, deadline)
    }
}
