//! `--slots N`, as clap parses it (doc/operations.md, "Slots"): how many
//! runs may hold a lock at once (a lock directory's or a store's). Flattened into the
//! options of `run`, `acquire` and `precheck` (`super::args`).

use clap::Args;

/// The most slots a lock may have.
pub const MAX_SLOTS: u32 = 1000;

// `--slots`, for run, acquire and precheck. (A doc comment here would be
// the subcommands' about.)
#[derive(Debug, Args, Clone, Default)]
pub struct SlotsArg {
    /// Let up to N runs hold the lock at once, each in a slot of its own
    /// (default 1: one at a time).
    ///
    /// A fire takes the first free slot, 0 to N-1, and skips (75) when all
    /// are held; its command gets the number in ONLYONE_SLOT. N is the
    /// lock's: a fire with another N while a slot is held is refused. See
    /// doc/operations.md, "Slots".
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX_SLOTS as i64))]
    pub slots: Option<u32>,
}

impl SlotsArg {
    /// The number of slots asked for: 1 when none was.
    pub fn count(&self) -> u32 {
        self.slots.unwrap_or(1)
    }

    /// The number of slots asked for, never 0 (clap refuses it): 1 when
    /// none was.
    pub fn nonzero(&self) -> std::num::NonZeroU32 {
        std::num::NonZeroU32::new(self.count()).unwrap_or(std::num::NonZeroU32::MIN)
    }
}
