//! Missed slots and catching up on them: the slots of a range, the ones
//! no fire was seen for, and what a fire does about them.

use std::time::Duration;

use super::{Schedule, secs};

/// The slots of a schedule in a range, in order ([`Schedule::slots`]).
#[derive(Debug, Clone)]
pub struct Slots<'a> {
    pub(super) schedule: &'a Schedule,
    pub(super) at: i64,
    pub(super) up_to: i64,
}

impl Iterator for Slots<'_> {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        let next = self.schedule.next_slot(self.at)?;
        if next > self.up_to {
            return None;
        }
        self.at = next;
        Some(next)
    }
}

/// Slots that passed unseen: the first and the last (Unix seconds) and
/// how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Missed {
    /// The first missed slot.
    pub first: i64,
    /// The last missed slot.
    pub last: i64,
    /// How many: all of them when [`Missed::exact`], else at least that
    /// many (counting stopped at [`MAX_COUNTED`](super::MAX_COUNTED) slots).
    pub count: u64,
    /// Whether every slot of the range was examined: `count` is then all
    /// of them.
    pub exact: bool,
}

/// The slots in `(last_seen, now - late]`: the slots a fire should have
/// come for by now, allowing it `late`, that no fire seen since
/// `last_seen` (a run's start, a skip, a stop) covers. `None` when there
/// is none.
pub fn missed(schedule: &Schedule, last_seen: i64, now: i64, late: Duration) -> Option<Missed> {
    schedule.slots_between(last_seen, now.saturating_sub(secs(late)))
}

/// A fire, as its schedule sees it ([`Schedule::fire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fire {
    /// The slot it serves: the last slot at or before the fire, when that
    /// is within the grace; `None` for a fire outside any slot (at boot,
    /// by hand).
    pub slot: Option<i64>,
    /// The slots before it that passed unseen.
    pub missed: Option<Missed>,
}

/// What a fire that may catch up does ([`Fire::catch_up`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatchUp {
    /// It serves a slot: it runs as any fire does.
    OnSlot,
    /// It serves no slot, and slots were missed within the window: it runs
    /// once for all of them.
    MakeUp,
    /// It serves no slot and nothing was missed: nothing to do.
    NothingMissed,
    /// It serves no slot, and the last slot missed is older than the
    /// window: nothing to do.
    TooOld,
}

impl Fire {
    /// What a fire at `now` that may catch up does, with missed slots made
    /// up for when the last of them is at most `within` old.
    pub fn catch_up(&self, now: i64, within: Duration) -> CatchUp {
        if self.slot.is_some() {
            return CatchUp::OnSlot;
        }
        match self.missed {
            None => CatchUp::NothingMissed,
            Some(m) if now.saturating_sub(m.last) <= secs(within) => CatchUp::MakeUp,
            Some(_) => CatchUp::TooOld,
        }
    }
}
