//! What a run leaves behind: found at the end of the run and ended before
//! the lock is released, and the exited processes re-parented to onlyone
//! (its subreaper role) reaped as they go.

use std::time::Duration;

use rustix::process::{Pid, WaitId, WaitIdOptions};

use super::RunError;
use crate::procfs::{self, ProcId};
use crate::record::Record;
use crate::signal::{Ended, GracefulStop, signal_group};

/// How many times the run's leftovers are looked for and ended: a stray
/// may fork while it is being ended (a TERM trap that starts another
/// process), so each round looks again. The first round is TERM and the
/// grace; the later ones, KILL.
const STRAY_ROUNDS: usize = 4;

/// The run's leftovers: onlyone's descendants (it is their subreaper, so
/// whatever the command left behind became its child, whatever its
/// environment or group), and the processes that the record's run search
/// finds (its group and token carriers, which need not descend from the
/// command: a job handed to `at` keeps its environment).
pub(super) fn leftovers(record: &Record, me: u32) -> Result<Vec<ProcId>, RunError> {
    let mut all = crate::judge::processes_of(record, &[me], None)?;
    for id in procfs::descendants_of(me) {
        if !all.iter().any(|t| t.pid == id.pid) {
            all.push(id);
        }
    }
    Ok(all)
}

/// Ends the run's leftovers (see [`STRAY_ROUNDS`]), then KILL to the
/// command's whole process group. What still lives is reported as a
/// survivor: the lock must then stay held.
pub(super) fn end_strays(
    group: u32,
    grace: Duration,
    mut scan: impl FnMut() -> Result<Vec<ProcId>, RunError>,
) -> Result<Ended, RunError> {
    let mut all = Ended::default();
    for round in 0..STRAY_ROUNDS {
        let targets = scan()?;
        if targets.is_empty() {
            return Ok(all);
        }
        let stop = if round == 0 {
            GracefulStop::term(grace)
        } else {
            GracefulStop {
                grace,
                ..GracefulStop::KILL
            }
        };
        let ended = stop.end(&targets, None);
        all.signalled.extend(ended.signalled);
        all.killed.extend(ended.killed);
        all.skipped.extend(ended.skipped);
        all.survivors = ended.survivors;
    }
    signal_group(group, rustix::process::Signal::KILL);
    let ended = GracefulStop::KILL.end(&scan()?, None);
    all.survivors = ended.survivors;
    Ok(all)
}

/// Reaps the exited processes re-parented to onlyone, but never the
/// `command`, whose exit the supervision reads, nor a child the caller had
/// before the run (`theirs`). Without this they would stay zombies for the
/// rest of the run.
pub(super) fn reap_orphans(command: u32, theirs: &[u32]) {
    for child in procfs::children_of(std::process::id()) {
        if child == command || theirs.contains(&child) {
            continue;
        }
        if let Some(pid) = i32::try_from(child).ok().and_then(Pid::from_raw) {
            // Reaps it only if it has exited.
            let _ = rustix::process::waitid(
                WaitId::Pid(pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            );
        }
    }
}
