//! What a caller does when the lock is held by a live run: one policy,
//! given to [`AcquireOptions::busy`], the same for every caller that takes
//! a lock (a run, a script, a library user) and for every place (the
//! store's lease takes the same policy).

use std::time::Duration;

use super::AcquireOptions;

/// What to do when a live run holds the lock. Every place matches it
/// whole (no arm for "the others"): a new policy is an error of the
/// compiler wherever it must be handled, in the library and in a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BusyPolicy {
    /// Give up at once: the caller skips.
    #[default]
    Skip,
    /// Wait in line for up to this long, then give up.
    Wait(Duration),
    /// At most one caller waits (up to this long, or for ever): one that
    /// finds another waiting gives up at once. What arrives during a run
    /// is picked up by exactly one more run, never by a pile of them.
    Queue(Option<Duration>),
}

impl BusyPolicy {
    /// The policy of a wait (`None`: none) and whether at most one may
    /// wait.
    pub fn of(wait: Option<Duration>, queue: bool) -> BusyPolicy {
        match (wait, queue) {
            (w, true) => BusyPolicy::Queue(w),
            (Some(w), false) => BusyPolicy::Wait(w),
            (None, false) => BusyPolicy::Skip,
        }
    }

    /// How long a caller under this policy waits (`None`: it does not
    /// wait, or, for [`BusyPolicy::Queue`] without a bound, for ever).
    pub fn wait(self) -> Option<Duration> {
        match self {
            BusyPolicy::Skip => None,
            BusyPolicy::Wait(w) => Some(w),
            BusyPolicy::Queue(w) => w,
        }
    }
}

impl AcquireOptions {
    /// What to do when a live run holds the lock (see [`BusyPolicy`]):
    /// the same as [`AcquireOptions::wait`] and [`AcquireOptions::queue`]
    /// as the policy says.
    pub fn busy(self, policy: BusyPolicy) -> Self {
        match policy {
            BusyPolicy::Skip => self,
            BusyPolicy::Wait(w) => self.wait(w),
            BusyPolicy::Queue(Some(w)) => self.wait(w).queue(),
            BusyPolicy::Queue(None) => self.queue(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_what_its_wait_and_queue_say() {
        let s = Duration::from_secs(5);
        assert_eq!(BusyPolicy::of(None, false), BusyPolicy::Skip);
        assert_eq!(BusyPolicy::of(Some(s), false), BusyPolicy::Wait(s));
        assert_eq!(BusyPolicy::of(Some(s), true), BusyPolicy::Queue(Some(s)));
        assert_eq!(BusyPolicy::of(None, true), BusyPolicy::Queue(None));
        for p in [
            BusyPolicy::Skip,
            BusyPolicy::Wait(s),
            BusyPolicy::Queue(None),
        ] {
            let queued = matches!(p, BusyPolicy::Queue(_));
            assert_eq!(BusyPolicy::of(p.wait(), queued), p);
        }
    }
}
