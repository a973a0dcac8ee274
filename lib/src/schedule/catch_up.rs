//! Missed fires and catching up on them: the fires of a range, the ones
//! no fire was seen for, and what a fire does about them.

use std::time::Duration;

use super::{Schedule, secs};

/// The fires of a schedule in a range, in order ([`Schedule::fires`]).
#[derive(Debug, Clone)]
pub struct Fires<'a> {
    pub(super) schedule: &'a Schedule,
    pub(super) at: i64,
    pub(super) up_to: i64,
}

impl Iterator for Fires<'_> {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        let next = self.schedule.next_fire(self.at)?;
        if next > self.up_to {
            return None;
        }
        self.at = next;
        Some(next)
    }
}

/// Fires that passed unseen: the first and the last (Unix seconds) and
/// how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Missed {
    /// The first missed fire.
    pub first: i64,
    /// The last missed fire.
    pub last: i64,
    /// How many: all of them when [`Missed::exact`], else at least that
    /// many (counting stopped at [`MAX_COUNTED`](super::MAX_COUNTED) fires).
    pub count: u64,
    /// Whether every fire of the range was examined: `count` is then all
    /// of them.
    pub exact: bool,
}

/// The fires in `(last_seen, now - late]`: the fires a fire of the job should have
/// come for by now, allowing it `late`, that no fire seen since
/// `last_seen` (a run's start, a skip, a stop) covers. `None` when there
/// is none.
pub fn missed(schedule: &Schedule, last_seen: i64, now: i64, late: Duration) -> Option<Missed> {
    schedule.fires_between(last_seen, now.saturating_sub(secs(late)))
}

/// A fire, as its schedule sees it ([`Schedule::fire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fire {
    /// The scheduled fire it serves: the last at or before it, when that
    /// is within the grace; `None` for a fire at no scheduled time (at boot,
    /// by hand).
    pub serves: Option<i64>,
    /// The fires before it that passed unseen.
    pub missed: Option<Missed>,
}

/// What a fire that may catch up does ([`Fire::catch_up`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatchUp {
    /// It serves a scheduled fire: it runs as any fire does.
    OnTime,
    /// It serves none, and fires were missed within the window: it runs
    /// once for all of them.
    MakeUp,
    /// It serves none and nothing was missed: nothing to do.
    NothingMissed,
    /// It serves none, and the last fire missed is older than the
    /// window: nothing to do.
    TooOld,
}

impl Fire {
    /// What a fire at `now` that may catch up does, with missed fires made
    /// up for when the last of them is at most `within` old.
    pub fn catch_up(&self, now: i64, within: Duration) -> CatchUp {
        if self.serves.is_some() {
            return CatchUp::OnTime;
        }
        match self.missed {
            None => CatchUp::NothingMissed,
            Some(m) if now.saturating_sub(m.last) <= secs(within) => CatchUp::MakeUp,
            Some(_) => CatchUp::TooOld,
        }
    }
}
