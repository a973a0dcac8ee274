//! The directory place: a lock file in a lock directory of this host, its
//! journal in the user's state directory.
//!
//! A lock is named by a name (a file of the lock directory) or by a path
//! with a `/`. The lock directory is created when it is the place's to
//! create, and the default one is checked as it is held open
//! ([`names::check_default_dir_held`]).

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod take;

pub use take::QUEUED;

use super::{
    Found, HistoryRead, Holding, Kind, Note, Notes, Place, PlaceError, Prechecked, StopDone,
    StopRequest, Stopped, log_event,
};
use crate::journal::{Journal, LockNow};
use crate::lock::OnReclaim;
use crate::names::{self, DirSource};
use crate::reap::{Keeper, keepers_of};
use crate::signal::GracefulStop;
use crate::state::StateDir;
use crate::{Error, Inspection, LockFile, Record, StaleReason, Verdict, observer, stop};

/// How long a precheck may wait for the removal guard to clear a stale
/// lock: a courtesy that must not hold the answer up.
const PRECHECK_CLEARING: Duration = Duration::from_millis(100);

/// A lock directory of this host, and the state directory that keeps its
/// journals.
#[derive(Clone)]
pub struct DirPlace {
    dir: PathBuf,
    source: DirSource,
    /// Resolved once: every journal is there.
    state: StateDir,
    /// Write even on a network or FUSE filesystem.
    allow_shared_fs: bool,
    /// Who hears what is said on the side.
    notes: Notes,
}

impl DirPlace {
    /// The lock directory `dir` (where its path came from: `source`), the
    /// journals in `state`; `allow_shared_fs` writes even on a network or
    /// FUSE filesystem; `notes` hears what is said on the side.
    pub fn new(
        (dir, source): (PathBuf, DirSource),
        state: StateDir,
        allow_shared_fs: bool,
        notes: Notes,
    ) -> DirPlace {
        DirPlace {
            dir,
            source,
            state,
            allow_shared_fs,
            notes,
        }
    }

    /// The lock directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the lock directory's path came from.
    pub fn source(&self) -> DirSource {
        self.source
    }

    /// The state directory that keeps the journals.
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// The journal of `lock`, in the state directory. An earlier
    /// version's journal beside the lock that a read sets aside is told
    /// to the notes, once per read.
    /// A slot above 0 (`LOCK.slot.K`) records in its lock's journal.
    pub fn journal(&self, lock: &LockFile) -> Journal {
        let notes = self.notes.clone();
        let base = crate::lock::slot_of_path(lock.path())
            .and_then(|(path, _)| lock.sibling(path).ok())
            .map(|b| match lock.deadline() {
                Some(d) => b.with_deadline(d),
                None => b,
            });
        Journal::of(base.as_ref().unwrap_or(lock), &self.state)
            .on_set_aside(move |s| notes(Note::SetAside(s)))
    }

    /// The journal of the lock file `path`, found even when neither it nor
    /// its directory exists (`/run` after a reboot).
    pub fn journal_at(&self, path: &Path) -> Journal {
        let notes = self.notes.clone();
        Journal::at(path, &self.state).on_set_aside(move |s| notes(Note::SetAside(s)))
    }

    /// True when the lock directory exists (the reaper keeps its state
    /// there).
    pub fn state_dir_exists(&self) -> bool {
        self.dir.is_dir()
    }

    /// Resolves `lock` to write it: the directory is created when it is
    /// the place's to create. The lock and its name as messages give it.
    pub fn open_for_writing(&self, lock: &str) -> Result<(LockFile, String), Error> {
        let path = names::lock_path(lock, &self.dir)?;
        if path.parent() == Some(self.dir.as_path()) {
            names::ensure_dir(&self.dir, self.source)?;
        }
        let name = names::display_name(&path, &self.dir);
        let lock = self.open_checked(&path)?;
        let lock = if self.allow_shared_fs {
            lock.allow_shared_fs()
        } else {
            lock
        };
        Ok((lock, name))
    }

    /// Opens the lock file of `lock`: to write it (its directory created
    /// when it is the place's to create), or only to read it.
    pub fn open_lock(&self, lock: &super::Lock, writing: bool) -> Result<LockFile, Error> {
        let path = match lock.key() {
            super::LockKey::Path(p) => p,
            key => unreachable!("a lock directory's lock is a path: {key:?}"),
        };
        if writing && path.parent() == Some(self.dir.as_path()) {
            names::ensure_dir(&self.dir, self.source)?;
        }
        let file = self.open_checked(path)?;
        Ok(if writing && self.allow_shared_fs {
            file.allow_shared_fs()
        } else {
            file
        })
    }

    /// Who hears what this place says on the side.
    pub(crate) fn notes(&self) -> &Notes {
        &self.notes
    }

    /// Resolves `lock` only to read it.
    pub fn open_for_reading(&self, lock: &str) -> Result<(LockFile, String), Error> {
        let path = names::lock_path(lock, &self.dir)?;
        let name = names::display_name(&path, &self.dir);
        Ok((self.open_checked(&path)?, name))
    }

    /// The journal of `lock` only to read it, the lock's name, and the
    /// lock when its directory exists: found by name or path even when
    /// neither the lock file nor its directory exists (`/run` is emptied
    /// at boot).
    pub fn journal_for_reading(
        &self,
        lock: &str,
    ) -> Result<(Journal, String, Option<LockFile>), Error> {
        match self.open_for_reading(lock) {
            Ok((l, name)) => Ok((self.journal(&l), name, Some(l))),
            Err(Error::MissingDir { .. }) => {
                let path = names::lock_path(lock, &self.dir)?;
                let name = names::display_name(&path, &self.dir);
                Ok((self.journal_at(&path), name, None))
            }
            Err(e) => Err(e),
        }
    }

    /// Every lock of the lock directory: its lock files, and the locks
    /// that have a journal there (an earlier version's) or in the state
    /// directory, so that a job shows after a reboot before its next run;
    /// and which of them have a journal (`None`: any may).
    pub fn listing(&self) -> Result<(Vec<String>, Option<HashSet<String>>), PlaceError> {
        let (mut locks, mut journals) =
            lock_listing(&self.dir).map_err(|source| PlaceError::Listing {
                dir: self.dir.clone(),
                source,
            })?;
        // A state directory that cannot be listed says why when each
        // lock's journal is read.
        let Ok(in_state) = self.state.locks_in(&self.dir) else {
            return Ok((locks, None));
        };
        for p in in_state {
            let p = p.display().to_string();
            journals.insert(p.clone());
            locks.push(p);
        }
        locks.sort();
        locks.dedup();
        Ok((locks, Some(journals)))
    }

    /// Opens a lock; in the default directory, checks the directory it
    /// holds open as well as the one looked at by path before.
    fn open_checked(&self, path: &Path) -> Result<LockFile, Error> {
        let lock = LockFile::open(path)?;
        if self.source == DirSource::Default && path.parent() == Some(self.dir.as_path()) {
            names::check_default_dir_held(&lock)?;
        }
        Ok(lock.on_reclaim(self.closer()))
    }

    /// What closes a stale run in its lock's journal as its record is
    /// removed, by whichever call removes it (a take, a precheck, a stop),
    /// once: the `abandoned` event (none for another account's record, or
    /// a script's hold it released).
    fn closer(&self) -> OnReclaim {
        let place = self.clone();
        OnReclaim::new(move |lock, took| {
            if let Some(old) = &took.record
                && let Some(ev) = observer::abandoned_event(old, &took.reason.to_string())
            {
                log_event(&place.journal(lock), &ev, Some(&place.notes));
            }
        })
    }

    /// The lock a precheck asks about, its verdict, and whether a stale one
    /// was cleared: every call bounded by `deadline` (a search of `/proc`
    /// that runs out makes the verdict unknown, so the fire runs).
    fn precheck_look(
        &self,
        lock_arg: &str,
        deadline: Option<Instant>,
    ) -> Result<(LockFile, String, Option<Inspection>, Option<StaleReason>), Error> {
        let (lock, name) = self.open_for_reading(lock_arg)?;
        let lock = match deadline {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        let seen = lock.inspect()?;
        // Clearing is a courtesy: it must not hold the answer up when
        // another process holds the removal guard.
        let courtesy = Instant::now() + PRECHECK_CLEARING;
        let cleaned = match &seen {
            Some(s) if matches!(s.verdict, Verdict::Stale(_)) => lock
                .clone()
                .with_deadline(deadline.map_or(courtesy, |d| d.min(courtesy)))
                .reclaim_if_stale()
                .ok()
                .flatten(),
            _ => None,
        };
        Ok((lock, name, seen, cleaned))
    }
}

impl DirPlace {
    /// Stops the run that holds `slot` (a lock, or a slot of one): the stop
    /// recorded in the lock's journal. With `run`, only that run (its
    /// record as a look found it): when another holds the slot now, or
    /// none, nothing is signalled and the run is not running.
    fn stop_slot(
        &self,
        slot: &LockFile,
        how: &StopRequest,
        run: Option<&Record>,
    ) -> Result<Stopped, PlaceError> {
        let deadline = how.deadline;
        let wanted = |r: &Record| run.is_none_or(|run| stop::same_run(r, run));
        // Held only by what is not the run's own work: nothing to signal.
        if let Some(keepers) = keepers_now(slot, deadline, wanted) {
            return Ok(Stopped::KeptOutside {
                keepers,
                after: false,
            });
        }
        let graceful = GracefulStop {
            signal: how.signal,
            grace: how.grace,
        };
        let stopped = match stop::stop_if(slot, graceful, deadline, wanted) {
            // Another run holds the slot now, or none.
            Ok(None) => return Ok(Stopped::NotRunning),
            Err(Error::Timeout { held, waited }) => {
                let keepers = keepers_of(&held.record, &held.holder, deadline);
                if keepers.is_empty() {
                    return Err(Error::Timeout { waited, held }.into());
                }
                return Ok(Stopped::KeptOutside {
                    keepers,
                    after: true,
                });
            }
            Ok(Some(s)) => s,
            Err(e) => return Err(e.into()),
        };
        Ok(match stopped {
            stop::Stopped::NotRunning => Stopped::NotRunning,
            stop::Stopped::WasStale { reason } => Stopped::WasStale(reason),
            stop::Stopped::Ended {
                record,
                ended,
                took,
            } => {
                // Another account's holder, stopped (by root, say) as that
                // account's: no run of this lock's journal.
                if record.is_ours() {
                    let signal = crate::signal::signal_name(how.signal);
                    let ev = observer::stop_event(&record, Some(&signal));
                    log_event(&self.journal(slot), &ev, Some(&self.notes));
                }
                Stopped::Ended {
                    record,
                    took,
                    signal: how.signal,
                    signalled: ended.signalled,
                    killed: ended.killed,
                }
            }
        })
    }
}

impl DirPlace {
    /// Stops the run of `lock` (named `name`) that `pid` names, among the
    /// live runs its slots prove ([`runs_with_pid`]): every slot that run
    /// holds. None has it: nothing is stopped, and the live runs' pids
    /// are said.
    fn stop_pid(
        &self,
        lock: &LockFile,
        name: String,
        pid: u32,
        how: &StopRequest,
    ) -> Result<StopDone, PlaceError> {
        let runs = live_runs(lock)?;
        let chosen = runs_with_pid(&runs, pid);
        if chosen.is_empty() {
            let mut holders: Vec<u32> = Vec::new();
            for (_, r) in &runs {
                if !holders.contains(&r.pid) {
                    holders.push(r.pid);
                }
            }
            return Ok(StopDone {
                name,
                stopped: Stopped::NoRunWithPid { pid, holders },
                others: Vec::new(),
            });
        }
        let mut all = Vec::new();
        for (slot, run) in chosen {
            all.push(self.stop_slot(slot, how, Some(run))?);
        }
        let stopped = all.remove(0);
        all.retain(|s| !matches!(s, Stopped::NotRunning));
        Ok(StopDone {
            name,
            stopped,
            others: all,
        })
    }
}

/// The live runs of `lock`, slot 0 first: each slot that a live run
/// provably holds, with the run's record.
fn live_runs(lock: &LockFile) -> Result<Vec<(LockFile, Record)>, Error> {
    let mut out = Vec::new();
    for k in std::iter::once(0).chain(lock.slot_numbers()) {
        let slot = lock.slot(k)?;
        let Some(seen) = slot.inspect()? else {
            continue;
        };
        // Another account's holder is no run of this lock's.
        if let (Verdict::Held(_), Ok(record)) = (seen.verdict, seen.record)
            && record.is_ours()
        {
            out.push((slot, record));
        }
    }
    Ok(out)
}

/// The runs of `runs` that `pid` names: those whose owner (a run's
/// wrapper) has it; else the one whose command has it, when only one
/// does. Only a live run is chosen, and chosen only: what is signalled
/// is what its stop proves of it.
fn runs_with_pid(runs: &[(LockFile, Record)], pid: u32) -> Vec<(&LockFile, &Record)> {
    let owned: Vec<_> = runs
        .iter()
        .filter(|(_, r)| r.pid == pid)
        .map(|(l, r)| (l, r))
        .collect();
    if !owned.is_empty() {
        return owned;
    }
    let commanded: Vec<_> = runs
        .iter()
        .filter(|(_, r)| r.cmd_id.as_ref().is_some_and(|c| c.pid == pid))
        .map(|(l, r)| (l, r))
        .collect();
    if commanded.len() == 1 {
        commanded
    } else {
        Vec::new()
    }
}

impl DirPlace {
    /// [`Place::precheck`] of a lock of one slot.
    fn precheck_one(
        &self,
        lock_arg: &str,
        deadline: Option<Instant>,
    ) -> Result<Prechecked, PlaceError> {
        let (lock, name, seen, cleaned) = match self.precheck_look(lock_arg, deadline) {
            Ok(x) => x,
            Err(e) => return no_dir_is_free(lock_arg, e),
        };
        let Some(s) = seen else {
            return Ok(Prechecked {
                name,
                found: Found::Free(None),
            });
        };
        let found = match (&s.verdict, s.held_by(lock.path())) {
            (Verdict::Held(_), held) => {
                // Best effort and silent: a precheck answers held or not.
                Found::Held(held.map(|h| {
                    log_event(&self.journal(&lock), &observer::skip_event(&h), None);
                    Holding::Run(Box::new(h))
                }))
            }
            // A stale run cleared is closed in its journal as it is
            // removed (`closer`).
            (Verdict::Stale(r), _) => Found::Free(cleaned.is_some().then(|| r.clone())),
            (Verdict::Unknown(r), _) => Found::Unknown(r.clone()),
        };
        Ok(Prechecked { name, found })
    }
}

/// A precheck that could not look at `lock`: no lock directory (`/run`
/// is emptied at boot) is no lock, so free; anything else is the error.
fn no_dir_is_free(lock: &str, e: Error) -> Result<Prechecked, PlaceError> {
    match e {
        Error::MissingDir { .. } => Ok(Prechecked {
            name: lock.to_owned(),
            found: Found::Free(None),
        }),
        e => Err(e.into()),
    }
}

impl Place for DirPlace {
    fn kind(&self) -> Kind {
        Kind::Directory
    }

    fn lock(&self, given: &str, slots: NonZeroU32) -> Result<super::Lock, PlaceError> {
        let path = names::lock_path(given, &self.dir)?;
        let name = names::display_name(&path, &self.dir);
        Ok(super::Lock::new(name, super::LockKey::Path(path), slots))
    }

    fn take<'p>(
        &'p self,
        lock: &super::Lock,
        job: &super::run::Job,
        observer: &mut dyn crate::place::run::RunObserver,
    ) -> Result<super::run::Taken<'p>, PlaceError> {
        take::take(self, lock, job, observer)
    }

    /// Free when a slot has no file or a stale one (left for the run's
    /// take to take over); held, the skip recorded, when every slot is.
    fn precheck_slots(
        &self,
        lock_arg: &str,
        slots: u32,
        deadline: Option<Instant>,
    ) -> Result<Prechecked, PlaceError> {
        if slots <= 1 {
            return self.precheck_one(lock_arg, deadline);
        }
        let (lock, name) = match self.open_for_reading(lock_arg) {
            Ok(x) => x,
            Err(e) => return no_dir_is_free(lock_arg, e),
        };
        let lock = match deadline {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        // Clearing is a courtesy, as for a lock of one: a stale slot is
        // cleared (its run closed in the journal) and said, within a
        // bound that must not hold the answer up.
        let courtesy = Instant::now() + PRECHECK_CLEARING;
        let clearing = deadline.map_or(courtesy, |d| d.min(courtesy));
        // Every slot is looked at: each stale one cleared, the answer the
        // first that is not held.
        let mut held = None;
        let mut found: Option<Found> = None;
        for k in 0..slots {
            let slot = lock.slot(k)?;
            let here = match slot.inspect()? {
                None => Found::Free(None),
                Some(seen) => match &seen.verdict {
                    Verdict::Held(_) => {
                        held = held.or_else(|| seen.held_by(slot.path()));
                        continue;
                    }
                    Verdict::Stale(r) => {
                        let cleared = slot.with_deadline(clearing).reclaim_if_stale();
                        Found::Free(cleared.ok().flatten().map(|_| r.clone()))
                    }
                    Verdict::Unknown(r) => Found::Unknown(r.clone()),
                },
            };
            // A slot cleared is said rather than one merely free.
            found = match (found, here) {
                (None | Some(Found::Free(None)), h @ Found::Free(Some(_))) => Some(h),
                (None, h) => Some(h),
                (f, _) => f,
            };
        }
        if let Some(found) = found {
            return Ok(Prechecked { name, found });
        }
        if let Some(h) = &held {
            log_event(&self.journal(&lock), &observer::skip_event(h), None);
        }
        Ok(Prechecked {
            name,
            found: Found::Held(held.map(|h| Holding::Run(Box::new(h)))),
        })
    }

    fn stop(&self, lock: &str, how: &StopRequest) -> Result<StopDone, PlaceError> {
        let (lock, name) = self.open_for_writing(lock)?;
        let lock = match how.deadline {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        if let Some(pid) = how.pid {
            return self.stop_pid(&lock, name, pid, how);
        }
        // Every slot of a lock of several: each is a lock with its run.
        let mut all = vec![self.stop_slot(&lock, how, None)?];
        for k in lock.slot_numbers() {
            all.push(self.stop_slot(&lock.slot(k)?, how, None)?);
        }
        let main = all
            .iter()
            .position(|s| !matches!(s, Stopped::NotRunning))
            .unwrap_or(0);
        let stopped = all.remove(main);
        all.retain(|s| !matches!(s, Stopped::NotRunning));
        Ok(StopDone {
            name,
            stopped,
            others: all,
        })
    }

    fn history(&self, lock: &str) -> Result<HistoryRead, PlaceError> {
        let (journal, name, lock) = self.journal_for_reading(lock)?;
        let path = journal.path().to_path_buf();
        let mut h = journal.history().map_err(|source| PlaceError::Journal {
            path: path.clone(),
            source,
        })?;
        // Looked at after the journal is read (see `History::close_over`):
        // every slot file there is.
        match lock.as_ref().map(|l| l.inspect_slots()) {
            Some(Ok(slots)) => close_over(&mut h, slots.iter().map(|(_, _, i)| i)),
            None | Some(Err(Error::MissingDir { .. })) => h.close_over(LockNow::Free),
            Some(Err(_)) => {}
        }
        Ok(HistoryRead {
            name,
            history: h,
            source: path.display().to_string(),
        })
    }
}

/// Closes the runs of `history` that are over, from what every slot file
/// of the lock holds now (`slots`: the inspection of each file there is,
/// slot 0's among them; an absent file is a free slot), for
/// [`History::close_over`](crate::journal::History::close_over): the runs
/// of this account that no slot holds are over. Another account's files
/// hold no run of this account's, whatever token they carry. When one of
/// this account's slots cannot be told (its holder unknown, or a holder
/// without a token), nothing is closed.
pub fn close_over<'a, I>(history: &mut crate::journal::History, slots: I)
where
    I: IntoIterator<Item = &'a Inspection>,
{
    match runs_now(slots) {
        Some(live) => history.close_over(LockNow::Slots(&live)),
        None => history.close_over(LockNow::CannotTell),
    }
}

/// The tokens of this account's live runs of a lock, from every slot
/// file's inspection (see [`close_over`]); `None` when one of its slots
/// cannot be told.
pub fn runs_now<'a, I>(slots: I) -> Option<Vec<&'a str>>
where
    I: IntoIterator<Item = &'a Inspection>,
{
    let mut live = Vec::new();
    for i in slots {
        if !i.is_ours() {
            continue;
        }
        match (&i.verdict, &i.record) {
            (Verdict::Held(_), Ok(r)) => live.push(r.token.as_deref()?),
            (Verdict::Stale(_), _) => {}
            _ => return None,
        }
    }
    Some(live)
}

/// What keeps `lock` held now when nothing of its run's own work lives
/// (see [`keepers_of`]); `None` when it is free, stale, unknown, or its
/// run's work holds it, or its run is not one `wanted` accepts.
fn keepers_now(
    lock: &LockFile,
    deadline: Option<Instant>,
    wanted: impl Fn(&Record) -> bool,
) -> Option<Vec<Keeper>> {
    let seen = lock.inspect().ok()??;
    let (Verdict::Held(h), Ok(r)) = (&seen.verdict, &seen.record) else {
        return None;
    };
    if !wanted(r) {
        return None;
    }
    let keepers = keepers_of(r, h, deadline);
    (!keepers.is_empty()).then_some(keepers)
}

/// The locks of the lock directory `dir` (their paths): its lock files
/// and the journals of an earlier version beside them; and which of them
/// have such a journal. A directory that does not exist has none.
pub fn lock_listing(dir: &Path) -> std::io::Result<(Vec<String>, HashSet<String>)> {
    let mut out = Vec::new();
    let mut journals = HashSet::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((out, journals)),
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') {
            continue;
        }
        // A free lock has no lock file, but its journal says it exists.
        let journal = name
            .strip_suffix(".journal")
            .or_else(|| name.strip_suffix(".journal.1"));
        // A slot's file (`NAME.lock.slot.K`) is a slot of its lock, never
        // a lock of its own: the lock is listed, whatever its slot 0 is.
        let lock = journal.unwrap_or(name);
        let lock = crate::lock::slot_of_path(Path::new(lock))
            .and_then(|(l, _)| l.into_os_string().into_string().ok())
            .filter(|l| journal.is_none() && l.ends_with(".lock"));
        let lock = lock.as_deref().unwrap_or(journal.unwrap_or(name));
        if !lock.ends_with(".lock") {
            continue;
        }
        let path = dir.join(lock).display().to_string();
        if journal.is_some() {
            journals.insert(path.clone());
        }
        out.push(path);
    }
    out.sort();
    out.dedup();
    Ok((out, journals))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A place in a fresh lock directory, and what it said on the side.
    fn place() -> (tempfile::TempDir, DirPlace, Arc<Mutex<Vec<String>>>) {
        let tmp = tempfile::tempdir().unwrap();
        let said = Arc::new(Mutex::new(Vec::new()));
        let heard = said.clone();
        let notes: Notes = Arc::new(move |n: Note<'_>| {
            heard.lock().unwrap().push(format!("{n:?}"));
        });
        let place = DirPlace::new(
            (tmp.path().join("locks"), DirSource::Given),
            StateDir::resolve(Some(&tmp.path().join("state"))),
            false,
            notes,
        );
        (tmp, place, said)
    }

    #[test]
    fn a_lock_nobody_took_is_free_not_running_and_has_no_runs() {
        let (_tmp, place, said) = place();
        let found = place.precheck("job", None).unwrap();
        assert_eq!(found.name, "job");
        assert!(matches!(found.found, Found::Free(None)));
        let how = StopRequest {
            signal: rustix::process::Signal::TERM,
            grace: Duration::from_secs(1),
            deadline: None,
            pid: None,
        };
        let done = place.stop("job", &how).unwrap();
        assert!(matches!(done.stopped, Stopped::NotRunning));
        let read = place.history("job").unwrap();
        assert!(read.history.runs.is_empty());
        assert!(read.source.ends_with(".journal"), "{}", read.source);
        assert!(said.lock().unwrap().is_empty());
    }

    #[test]
    fn a_held_lock_is_found_held_by_its_run() {
        let (_tmp, place, _) = place();
        let (lock, _) = place.open_for_writing("job").unwrap();
        let guard = lock.try_acquire().unwrap();
        let found = place.precheck("job", None).unwrap();
        match found.found {
            Found::Held(Some(Holding::Run(h))) => assert_eq!(h.record.pid, std::process::id()),
            other => panic!("not held by this run: {other:?}"),
        }
        drop(guard);
    }
}
