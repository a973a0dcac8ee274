//! Where a lock lives, and what each place can do.
//!
//! A lock lives in a directory of this host (a [`LockFile`](crate::LockFile)
//! and its journal) or in a store that several hosts share (a lease of
//! [`crate::store`] and the store's history). The commands are written once
//! over both: each takes the lock for a run, inspects it, stops it and
//! logs its events ([`EventLog`](crate::journal::EventLog)) through the
//! place, and a [`Feature`] that a place cannot give is refused
//! ([`Kind::supports`]) with why, so that an option is never silently
//! ignored.
//!
//! [`lease`] takes a store's lease for a run under a busy policy.

pub mod lease;

/// Where a lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A directory of this host: a lock file (its journal in the user's
    /// state directory).
    Directory,
    /// A store shared by hosts: a lease, renewed while the run lasts.
    Store,
}

/// What a command may ask of a place beyond taking, inspecting and
/// stopping a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feature {
    /// Leaving the lock held for processes that outlive the command.
    Linger,
    /// Stopping the live run, then taking the lock in its place.
    Replace,
    /// Ending a run with a signal of the caller's choice.
    StopSignal,
    /// Choosing the grace between TERM and KILL when stopping a run.
    StopGrace,
    /// Holding the lock for a shell script, with no process of onlyone
    /// beside it.
    ScriptHold,
}

/// A feature a place cannot give, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{feature:?} is not supported by {place:?}: {why}")]
#[non_exhaustive]
pub struct Unsupported {
    /// The place.
    pub place: Kind,
    /// What was asked.
    pub feature: Feature,
    /// Why it cannot be given there.
    pub why: &'static str,
}

impl Kind {
    /// Whether this place can give `feature`; if not, why.
    pub fn supports(self, feature: Feature) -> Result<(), Unsupported> {
        let why = match (self, feature) {
            (Kind::Directory, _) => return Ok(()),
            (Kind::Store, Feature::Linger) => {
                "a lease is renewed by the wrapper, which exits with the command, so nothing \
                 would keep the lock for the processes that outlive it (they would run beside \
                 the next host's run)"
            }
            (Kind::Store, Feature::Replace) => {
                "the live run may be on another host, which no signal from here reaches; a \
                 stop is a request that its holder sees at its next renewal"
            }
            (Kind::Store, Feature::StopSignal) => {
                "a stop request asks the holder, on whatever host, to end its run, and it does \
                 so with TERM, then KILL after the grace it was started with"
            }
            (Kind::Store, Feature::StopGrace) => {
                "the holder, on whatever host, ends its command with the grace it was started \
                 with, which must fit in its lease"
            }
            (Kind::Store, Feature::ScriptHold) => {
                "a lease lasts only while a wrapper renews it, and a shell script's hold has no \
                 process of onlyone beside it"
            }
        };
        Err(Unsupported {
            place: self,
            feature,
            why,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_gives_everything_and_a_store_says_why_not() {
        let all = [
            Feature::Linger,
            Feature::Replace,
            Feature::StopSignal,
            Feature::StopGrace,
            Feature::ScriptHold,
        ];
        for f in all {
            assert_eq!(Kind::Directory.supports(f), Ok(()));
            let e = Kind::Store.supports(f).unwrap_err();
            assert_eq!((e.place, e.feature), (Kind::Store, f));
            assert!(
                !e.why.contains("--"),
                "the library names no flag: {}",
                e.why
            );
        }
    }
}
