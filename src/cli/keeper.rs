//! `onlyone keeper` (internal): keeps a script's lock fresh in a
//! directory that age-based cleaners empty (`/tmp`), and records the end
//! of a script's run that its workers carried on after `release`; how
//! `acquire` and `release` start it; its options.

use std::path::{Path, PathBuf};

use clap::Args;

use onlyone::LockFile;

use super::exit::Ending;
use super::options::Adjust;
use super::ping;
use super::{Ctx, journal, say};

// `acquire` starts this for a lock in a directory that age-based cleaners
// empty (/tmp): no other process of onlyone's lives to refresh it; and
// `release`, when the script's workers hold the lock on, to record the
// run's end once they have all exited. (A doc comment here would be its
// help's about, over the variant's.)
#[derive(Debug, Args)]
pub struct Keeper {
    /// The lock file.
    #[arg(value_name = "PATH")]
    pub lock: PathBuf,
    /// The acquisition's token.
    #[arg(long)]
    pub token: String,
    /// Once the hold ends, record the end of the script's run (a second
    /// `release` event, whose duration covers the workers).
    #[arg(long)]
    pub record_end: bool,
    /// With --record-end: the code the script gave `release --exit`.
    #[arg(long, value_name = "CODE")]
    pub exit: Option<u8>,
}

impl Adjust for Keeper {}

/// What a keeper records when the hold it keeps ends: the end of a
/// script's run that its workers carried on after `release`, in the
/// journal of this state directory.
pub(super) struct RecordEnd<'a> {
    /// The state directory whose journal records it.
    pub state: &'a Path,
    /// The code the script gave `release --exit`.
    pub exit: Option<u8>,
}

/// Starts `onlyone keeper` for a lock that `acquire` left to a script in a
/// directory that age-based cleaners empty: it refreshes the lock file's
/// times while the lock is held (no other process of onlyone's lives to),
/// and exits once it is released, taken over or stale; with `end`, it then
/// records the run's end. It runs in a process group of its own (the
/// script's group must not count it), with nothing of the script's output
/// (a command substitution waits for its pipe to close), without the run's
/// token (it is not the run) and without the pings' secrets (it has no use
/// for them).
pub(super) fn start_keeper(lock: &Path, token: &str, end: Option<&RecordEnd<'_>>) {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut cmd = std::process::Command::new(exe);
    for var in ping::WITHHELD {
        cmd.env_remove(var);
    }
    if let Some(end) = end {
        cmd.arg("--state-dir").arg(end.state);
    }
    cmd.arg("keeper").arg("--token").arg(token);
    if let Some(end) = end {
        cmd.arg("--record-end");
        if let Some(code) = end.exit {
            cmd.arg("--exit").arg(code.to_string());
        }
    }
    let spawned = cmd
        .arg("--")
        .arg(lock)
        .env_remove(onlyone::supervise::LOCK_VAR)
        .env_remove(onlyone::supervise::TOKEN_VAR)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
    if let Err(e) = spawned {
        say(format_args!(
            "could not start the keeper of `{}` ({e}): age-based cleaning of its directory may \
             remove the lock after many days",
            lock.display()
        ));
    }
}

/// `onlyone keeper`: keeps a lock fresh while it is held; with
/// `--record-end`, then records the end of the script's run it was held
/// for.
pub(super) fn keeper(ctx: &Ctx, a: Keeper) -> Ending {
    let Ok(lock) = LockFile::open(&a.lock) else {
        return Ending::Failed;
    };
    // The run's record, read while it is still there.
    let held = lock
        .inspect()
        .ok()
        .flatten()
        .and_then(|seen| seen.record.ok())
        .filter(|r| a.record_end && r.is_ours() && r.token.as_deref() == Some(a.token.as_str()));
    let kept = lock.keep_fresh(&a.token);
    if let Some(r) = &held {
        journal::carried_on(&ctx.journal(&lock), r, a.exit);
    }
    match kept {
        Ok(()) => Ending::Done,
        Err(_) => Ending::Failed,
    }
}
