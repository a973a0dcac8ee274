//! Where a lock lives, as the commands see it: a lock directory ([`Ctx`],
//! over the library's `DirPlace`) or the store (`store::StorePlace`, over
//! the library's). `precheck` and `stop` are one function each over the
//! library's [`onlyone::place::Place`] (`super::precheck`, `super::stop`);
//! `history`, `check`, `metrics`, `status` and `run` take the command's
//! [`Place`], which adds the command's own views: here, what `check` and
//! `metrics` read of a lock directory ([`Place::seen`]). What a place
//! cannot do is refused first (`super::plan::refused_by_place`, in the
//! words of [`refusal`]). The command says what happened and exits.

use std::time::Instant;

use onlyone::place::{Feature, Kind, PlaceError};

use super::Ctx;
use super::view::{NOT_REACHED, Seen, Shown, judged_late, nothing_in};

/// A place's error as the command says it.
pub fn words(e: &PlaceError) -> String {
    match e {
        PlaceError::PathForName(lock) => format!(
            "`{lock}` is a path; with --store a lock is a name (an ASCII letter or digit, \
             then up to 63 ASCII letters, digits, `.`, `_` or `-`)"
        ),
        PlaceError::Store(e) => super::words::store_error(e),
        e => e.to_string(),
    }
}

/// What `check` and `metrics` know of one lock (or why nothing is).
pub type Named = (String, Result<Seen, String>);

/// A place where locks live, as the commands see it: the library's
/// [`onlyone::place::Place`] (its [`Place::seam`]) with what `check`,
/// `metrics` and `status` read of it. Those reads stay in the command:
/// their results ([`Seen`], [`Shown`]) are the command's own views.
pub trait Place {
    /// The place as the library knows it: take, precheck, stop, history.
    fn seam(&self) -> &dyn onlyone::place::Place;
    /// Which place this is.
    fn kind(&self) -> onlyone::place::Kind {
        self.seam().kind()
    }
    /// The store's URL, with a store.
    fn store_url(&self) -> Option<String> {
        None
    }
    /// What `check` and `metrics` need of each lock named (or of every
    /// lock, none named), every call bounded by `deadline`: a lock not
    /// reached by then is an error that says so.
    fn seen(&self, locks: &[String], deadline: Option<Instant>) -> Result<Vec<Named>, String>;
    /// What `status` shows of the locks named (or of every lock, none
    /// named), every call bounded by `deadline`.
    fn shown(&self, named: &[String], deadline: Option<Instant>) -> Result<Shown, String>;
}

impl Place for Ctx {
    fn seam(&self) -> &dyn onlyone::place::Place {
        &**self
    }

    fn seen(&self, locks: &[String], deadline: Option<Instant>) -> Result<Vec<Named>, String> {
        self.seen_in_dir(locks, deadline)
    }

    fn shown(&self, named: &[String], deadline: Option<Instant>) -> Result<Shown, String> {
        self.shown_in_dir(named, deadline)
    }
}

/// What `place` says when `flag` asks it for `feature` it cannot give:
/// the flag, why, and `instead`; `None` where it can.
pub(super) fn refusal(place: Kind, feature: Feature, flag: &str, instead: &str) -> Option<String> {
    let e = place.supports(feature).err()?;
    Some(format!(
        "{flag} is not supported with --store: {}; {instead}",
        e.why
    ))
}

/// What is known of LOCK: its record, when its directory exists, and its
/// journal, found even when it does not; `/proc` read until `deadline`.
fn look(ctx: &Ctx, lock: &str, deadline: Option<Instant>) -> Result<Seen, String> {
    let (journal, name, lock) = ctx.journal_for_reading(lock).map_err(|e| e.to_string())?;
    let lock = lock.map(|l| match deadline {
        Some(d) => l.with_deadline(d),
        None => l,
    });
    // Read before the lock is looked at (see `History::close_over`).
    let mut history = journal.history().map_err(|e| {
        format!(
            "cannot read the journal `{}`: {e}",
            journal.path().display()
        )
    })?;
    // Every slot file there is, slot 0's first, each looked at once
    // (the lock's deadline is its slots').
    let slots: Vec<(u32, onlyone::Inspection)> = match &lock {
        Some(l) => l
            .inspect_slots()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(k, _, i)| (k, i))
            .collect(),
        None => Vec::new(),
    };
    let inspection = slots.iter().find(|(k, _)| *k == 0).map(|(_, i)| i.clone());
    // Unknown for want of time: said as such (see `check`).
    let late = inspection
        .as_ref()
        .is_some_and(|i| judged_late(i, deadline));
    // Every slot file's live run (slot 0's among them).
    onlyone::place::dir::close_over(&mut history, slots.iter().map(|(_, i)| i));
    // Another user's lock, and nothing of it here: its runs are in that
    // user's state directory. Saying OK (no run recorded) would hide a
    // failing job from the monitoring that checks it as another user.
    let theirs = inspection
        .as_ref()
        .filter(|i| i.record.is_ok())
        .map(|i| i.owner)
        .filter(|&u| u != rustix::process::geteuid().as_raw());
    if let Some(uid) = theirs
        && nothing_in(&history)
    {
        let who = onlyone::command::user_name(uid);
        return Err(format!(
            "the lock is {who}'s, and its runs are recorded in {who}'s own state directory, not \
             in `{}`: check it as {who}, or point --state-dir at {who}'s",
            journal
                .path()
                .parent()
                .map_or_else(String::new, |p| p.display().to_string())
        ));
    }
    let missing = (inspection.is_none() && nothing_in(&history)).then(|| {
        format!(
            "no lock file `{}` and nothing in the journal `{}`",
            journal.lock_path().display(),
            journal.path().display()
        )
    });
    Ok(Seen {
        missing,
        late,
        ..Seen::of_dir(name, inspection, history).with_slots(&slots)
    })
}

impl Ctx {
    /// What is known of each lock named (or every lock, none named) in
    /// the lock directory, by `deadline`: a lock not reached by then is
    /// [`NOT_REACHED`].
    pub(super) fn seen_in_dir(
        &self,
        locks: &[String],
        deadline: Option<Instant>,
    ) -> Result<Vec<Named>, String> {
        let targets = if locks.is_empty() {
            self.listing().map_err(|e| e.to_string())?.0
        } else {
            locks.to_vec()
        };
        let mut out = Vec::new();
        onlyone::command::with_census(|| {
            for t in targets {
                let seen = if deadline.is_some_and(|d| Instant::now() >= d) {
                    Err(NOT_REACHED.to_owned())
                } else {
                    look(self, &t, deadline)
                };
                out.push((t, seen));
            }
        });
        Ok(out)
    }
}
