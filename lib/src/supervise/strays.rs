//! What a run leaves behind: found at the end of the run and ended before
//! the lock is released, and the exited processes re-parented to onlyone
//! (its subreaper role) reaped as they go, what each used added to the
//! run's [`Tally`].

use std::cell::Cell;
use std::time::Duration;

use super::RunError;
use crate::journal::Usage;
use crate::procfs::{self, ProcId};
use crate::record::Record;
use crate::signal::{Ended, GracefulStop, signal_group};
use crate::sys::Children;

/// What the processes of the run that onlyone reaped used (the command and
/// its re-parented leftovers, each with what it reaped itself): summed
/// here, one `wait4(2)` each, so that nothing else onlyone waits for (its
/// own helpers, the caller's children) is counted, as it would be in
/// `getrusage(RUSAGE_CHILDREN)`.
#[derive(Debug, Default)]
pub(super) struct Tally(Cell<Usage>);

impl Tally {
    /// Adds what a reaped process used.
    pub(super) fn add(&self, ru: &libc::rusage) {
        let mut u = self.0.get();
        u.add(Usage::of_rusage(ru));
        self.0.set(u);
    }

    /// What the run used so far.
    pub(super) fn get(&self) -> Usage {
        self.0.get()
    }
}

/// How many times the run's leftovers are looked for and ended: a stray
/// may fork while it is being ended (a TERM trap that starts another
/// process), so each round looks again. The first round is TERM and the
/// grace; the later ones, KILL.
const STRAY_ROUNDS: usize = 4;

/// The run's leftovers: onlyone's descendants, except the caller's own
/// children (`theirs`) and theirs. onlyone is their subreaper, so whatever
/// the command left behind, through `setsid`, double forks or a cleared
/// environment, is still below it. Found in proportion to the run, not to
/// the host: a process that got the token some other way (a job handed to
/// `at`) is not searched for here; it keeps a stale-looking lock held if
/// the wrapper dies, and `stop` and `reap` find it.
pub(super) fn leftovers(me: u32, theirs: &[u32]) -> Vec<ProcId> {
    procfs::descendants_of(me, theirs)
}

/// The processes a lingering run leaves holding its lock: its leftovers,
/// and the processes that carry its token without descending from it (the
/// work handed to a terminal server that was already running). Only
/// `--linger` pays for the search of every process this takes.
pub(super) fn lingering(
    record: Option<&Record>,
    me: u32,
    theirs: &[u32],
) -> Result<Vec<ProcId>, RunError> {
    let mut all = match record {
        Some(record) => crate::lock::judge::processes_of(record, &[me], None)?,
        None => Vec::new(),
    };
    for id in leftovers(me, theirs) {
        if !all.iter().any(|t| t.pid == id.pid) {
            all.push(id);
        }
    }
    Ok(all)
}

/// Whether the run has left nothing behind: after reaping what exited,
/// the kernel says onlyone has no child left (but the caller's own). Its
/// answer is exact, where a walk of `/proc` may miss a process re-parented
/// to onlyone while the walk read its old parent.
pub(super) fn settled(command: u32, theirs: &[u32], tally: &Tally) -> bool {
    if !theirs.is_empty() {
        // The caller has children of its own: the kernel's answer would
        // count them, so ask the children lists instead.
        reap_orphans(command, theirs, tally);
        return procfs::children_of(std::process::id())
            .iter()
            .all(|c| theirs.contains(c));
    }
    loop {
        match crate::sys::children() {
            Children::None => return true,
            Children::Live => return false,
            Children::Exited(pid) => {
                if !reap(pid, tally) {
                    return false;
                }
            }
        }
    }
}

/// Ends the run's leftovers (see [`STRAY_ROUNDS`]), then KILL to the
/// command's whole process group. What still lives is reported as a
/// survivor: the lock must then stay held. `settled` says when nothing is
/// left (the common case: one system call, no walk at all).
pub(super) fn end_strays(
    group: u32,
    grace: Duration,
    mut scan: impl FnMut() -> Vec<ProcId>,
    mut settled: impl FnMut() -> bool,
) -> Ended {
    let mut all = Ended::default();
    for round in 0..STRAY_ROUNDS {
        if settled() {
            return all;
        }
        let targets = scan();
        if targets.is_empty() {
            // A child is between parents: look again.
            std::thread::yield_now();
            continue;
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
    let ended = GracefulStop::KILL.end(&scan(), None);
    all.survivors = ended.survivors;
    all
}

/// Reaps the exited processes re-parented to onlyone, but never the
/// `command`, whose exit the supervision reads, nor a child the caller had
/// before the run (`theirs`). Without this they would stay zombies for the
/// rest of the run. What each used goes into `tally`.
pub(super) fn reap_orphans(command: u32, theirs: &[u32], tally: &Tally) {
    if theirs.is_empty() {
        // The kernel names each exited child: one call when there is none.
        while let Children::Exited(pid) = crate::sys::children() {
            if pid == command || !reap(pid, tally) {
                return;
            }
        }
        return;
    }
    for child in procfs::children_of(std::process::id()) {
        if child == command || theirs.contains(&child) {
            continue;
        }
        reap(child, tally);
    }
}

/// Reaps a child if it has exited, what it used added to `tally`; whether
/// it did.
fn reap(child: u32, tally: &Tally) -> bool {
    match crate::sys::wait4(child, false) {
        Ok(Some((_, ru))) => {
            tally.add(&ru);
            true
        }
        _ => false,
    }
}
