//! `onlyone lease-watchdog` (internal): what `run --store` starts beside
//! its command, ending the run if the wrapper dies (nothing would renew
//! the lease); its options.

use std::time::Duration;

use clap::Args;

use onlyone::place::store::timing::LeaseTiming;

use super::exit::Ending;
use super::options::Adjust;

// `run --store` starts this beside its command: it ends the run if the
// wrapper dies (nothing would renew the lease). (A doc comment here would
// be its help's about, over the variant's.)
#[derive(Debug, Args)]
pub struct LeaseWatchdog {
    /// The run's token.
    #[arg(long)]
    pub token: String,
    /// The run's user.
    #[arg(long)]
    pub uid: u32,
    /// The wrapper's start time (clock ticks since boot).
    #[arg(long)]
    pub since: u64,
    /// The lease, in milliseconds.
    #[arg(long)]
    pub lease_ms: u64,
    /// The grace, in milliseconds.
    #[arg(long)]
    pub grace_ms: u64,
    /// When the take was sent (boot clock, nanoseconds).
    #[arg(long)]
    pub sent: i64,
}

impl Adjust for LeaseWatchdog {}

/// `onlyone lease-watchdog`: watches over a leased run until its wrapper
/// says it is over, or dies.
pub fn watchdog(a: &LeaseWatchdog) -> Ending {
    use onlyone::place::store::watchdog::{Watch, Watched, watch};
    use std::os::fd::AsFd;
    let Ok(timing) = LeaseTiming::new(
        Duration::from_millis(a.lease_ms),
        Duration::from_millis(a.grace_ms),
    ) else {
        return Ending::Failed;
    };
    let w = Watched {
        token: a.token.clone(),
        uid: a.uid,
        since: a.since,
        timing,
        sent: a.sent,
    };
    let input = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(_) => return Ending::Failed,
    };
    match watch(input, &w) {
        Watch::Done => Ending::Done,
        Watch::Ended { survivors, .. } if survivors.is_empty() => Ending::Done,
        Watch::Ended { .. } => Ending::Failed,
    }
}
