//! Reaching a verdict: what a lock file holds, judged against `/proc`
//! (see [`crate::lock::verdict`] for what each verdict means), and the live
//! processes of the run a record describes.

use std::time::Instant;

use crate::lock::verdict::{Holder, StaleReason, UnknownReason, Verdict};
use crate::lock::work::{Lingered, Work};
use crate::procfs::{self, Probe, ProcId};
use crate::record::{FORMAT_VERSION, NotARecord, Record};

/// What was read at a lock path: the bytes, their parse, and whether the
/// writer's kernel lock is still held.
#[derive(Debug, Clone)]
pub struct Evidence {
    /// The raw bytes (at most `MAX_RECORD_BYTES + 1`).
    pub bytes: Vec<u8>,
    /// The parsed record, or why it is not one.
    pub record: Result<Record, NotARecord>,
    /// True when a kernel lock (flock) on the file is held by its writer.
    pub kernel_locked: bool,
    /// The file's modification time, Unix seconds.
    pub mtime: i64,
    /// True when the file could not be read (permission): its bytes are
    /// unknown, not empty.
    pub denied: bool,
    /// The file's owner (uid).
    pub owner: u32,
}

/// Judges the evidence. Reads `/proc`; takes nothing. A search of `/proc`
/// for the processes of a run stops at `deadline` (the verdict is then
/// unknown).
pub fn judge(ev: &Evidence, deadline: Option<Instant>) -> Verdict {
    let written_before_boot = procfs::boot_time().is_some_and(|b| ev.mtime < b as i64);
    let rec = match &ev.record {
        Ok(r) => r,
        Err(_) if ev.denied => {
            return Verdict::Unknown(UnknownReason::Denied {
                owner: crate::text::user_name(ev.owner),
            });
        }
        Err(why) => {
            if ev.kernel_locked {
                // Someone alive holds a kernel lock on it (flock(1) on an
                // empty file, for a user switching over): held.
                return Verdict::Held(Holder::Outside);
            }
            // Only what a power loss can leave of a record may go: a path
            // LOCK may name a user's file, and no age makes that stale.
            let torn = !ev.denied && crate::record::is_torn_record(&ev.bytes);
            return if written_before_boot && torn {
                Verdict::Stale(StaleReason::UnreadableFromPreviousBoot {
                    why: why.to_string(),
                })
            } else {
                Verdict::Unknown(UnknownReason::Unreadable {
                    why: why.to_string(),
                })
            };
        }
    };
    judge_record(rec, ev.kernel_locked, deadline)
}

/// Judges a record written in another PID namespace, whose pids mean
/// nothing here. A held flock on the record is proof of life (the owner
/// holds it, wherever it runs). Otherwise the namespace itself is looked
/// for: a PID namespace lives while its init does, and every process of
/// the run is in it (a process never leaves its PID namespace), so when no
/// process has it any more, the run is provably over. When some processes'
/// namespaces cannot be read (another user's, without privilege), that
/// cannot be told.
fn judge_other_pidns(rec: &Record, theirs: u64, ours: u64, kernel_locked: bool) -> Verdict {
    if kernel_locked {
        return Verdict::Held(Holder::OtherNamespace {
            pid: rec.pid,
            ns: theirs,
        });
    }
    match procfs::pidns_members(theirs) {
        procfs::NsSeen::Alive(member) => Verdict::Unknown(UnknownReason::OtherPidNamespace {
            theirs,
            ours,
            member: Some(member),
        }),
        procfs::NsSeen::Gone => Verdict::Stale(StaleReason::PidNamespaceGone { ns: theirs }),
        procfs::NsSeen::Unseen { unreadable, nested } => {
            Verdict::Unknown(UnknownReason::PidNamespaceUnseen {
                theirs,
                unreadable,
                nested,
            })
        }
    }
}

/// Judges a parsed record. `kernel_locked` is whether a flock on the file
/// is held. A bare pid file carries no boot id; its pid is probed like any
/// other (a live pid named by an older file is refused, not clobbered).
/// Every wait of the judgement draws on one budget
/// ([`ExitBudget`](crate::lock::members::ExitBudget)), within `deadline`.
pub fn judge_record(rec: &Record, kernel_locked: bool, deadline: Option<Instant>) -> Verdict {
    let budget = crate::lock::members::ExitBudget::new(deadline);
    if let Some(v) = judge_context(rec, kernel_locked) {
        return v;
    }
    let mut owner = procfs::probe(rec.pid, rec.start);
    // A live process the record may not name is not its owner: a forged
    // record, or a pid reused by another user.
    let foreign = owner.is_alive() && !rec.may_name(rec.pid);
    if foreign {
        owner = Probe::Exited;
    }
    if kernel_locked && owner.is_alive() {
        // The cheap common case: the writer holds its flock.
        return Verdict::Held(Holder::KernelLock { pid: rec.pid });
    }
    match owner {
        Probe::Alive if rec.start.is_some() => {
            return Verdict::Held(Holder::Owner { pid: rec.pid });
        }
        Probe::Alive | Probe::AliveUnverified => {
            return Verdict::Held(Holder::OwnerUnverified { pid: rec.pid });
        }
        _ => {}
    }
    let run = rec.scan_spec().is_some();
    if let Some(v) = judge_run(rec, &budget) {
        return v;
    }
    if kernel_locked {
        // The owner is gone, yet someone holds a kernel lock on its record:
        // the run's command between fork and exec (it inherits the flock
        // until exec closes it), a forked child of a library user, or a
        // foreign process. Someone alive holds it: never stale.
        return Verdict::Held(Holder::OtherKernelLock { owner: rec.pid });
    }
    if rec.format > FORMAT_VERSION {
        return Verdict::Unknown(UnknownReason::NewerFormat {
            version: rec.format,
        });
    }
    let pid = rec.pid;
    if foreign {
        return Verdict::Stale(StaleReason::Foreign {
            pid,
            user: crate::text::user_name(procfs::uid_of(pid).unwrap_or(u32::MAX)),
            writer: crate::text::user_name(rec.uid.unwrap_or(0)),
            run,
        });
    }
    Verdict::Stale(match owner {
        Probe::Reused { now } => StaleReason::Reused {
            pid,
            now,
            recorded: rec.start.unwrap_or(0),
            run,
        },
        Probe::Zombie => StaleReason::Zombie { pid, run },
        _ => StaleReason::Exited { pid, run },
    })
}

/// What the record's context proves before any of its pids is probed: a
/// `/proc` that cannot be trusted, another boot or host, another PID or
/// time namespace. `None`: judge its pids.
fn judge_context(rec: &Record, kernel_locked: bool) -> Option<Verdict> {
    // Without a working /proc nothing can be proven dead: a pid that does
    // not show is not a pid that exited.
    if let Err(why) = procfs::usable() {
        return Some(Verdict::Unknown(UnknownReason::NoProc { why }));
    }
    if let Some(theirs) = &rec.boot {
        match procfs::boot_id() {
            // Another boot id is another kernel: a reboot of this host, or
            // another host that shares the directory. Only the former is
            // proof; the same boot id means the same kernel, whatever the
            // host is called now.
            Ok(ours) if theirs != ours => {
                return Some(match &rec.host {
                    Some(host) if *host != procfs::host_name() => {
                        Verdict::Unknown(UnknownReason::OtherHost { host: host.clone() })
                    }
                    _ => Verdict::Stale(StaleReason::PreviousBoot),
                });
            }
            Ok(_) => {}
            Err(e) => {
                return Some(Verdict::Unknown(UnknownReason::NoProc {
                    why: e.to_string(),
                }));
            }
        }
    }
    if let Some(theirs) = rec.pidns {
        match procfs::own_pidns() {
            Some(ours) if theirs != ours => {
                return Some(judge_other_pidns(rec, theirs, ours, kernel_locked));
            }
            Some(_) => {}
            None => {
                return Some(Verdict::Unknown(UnknownReason::NoProc {
                    why: "this process's PID namespace cannot be read from /proc/self/ns/pid"
                        .into(),
                }));
            }
        }
    }
    // Start times of another time namespace that could not be moved onto
    // this one's clock: a live owner would look like another process.
    match rec.timens {
        Some(theirs) if procfs::own_timens().is_some_and(|ours| ours != theirs) => {
            Some(if kernel_locked {
                // Someone holds the flock. Name the owner only if its pid
                // lives (its start time cannot be compared across clocks).
                if procfs::probe(rec.pid, None).is_alive() {
                    Verdict::Held(Holder::KernelLock { pid: rec.pid })
                } else {
                    Verdict::Held(Holder::OtherKernelLock { owner: rec.pid })
                }
            } else {
                Verdict::Unknown(UnknownReason::OtherTimeNamespace { theirs })
            })
        }
        _ => None,
    }
}

/// The other processes of a run, once its owner is gone: the command, what
/// the record names as lingering, and (searching `/proc` until the
/// budget's deadline, waiting for processes in exit(2) within the budget)
/// its group and token carriers. `None`: none of them lives.
fn judge_run(rec: &Record, budget: &crate::lock::members::ExitBudget) -> Option<Verdict> {
    let deadline = budget.deadline();
    let named = |id: &ProcId| id.is_alive() && rec.may_name(id.pid);
    if let Some(c) = rec.cmd_id.filter(named) {
        return Some(Verdict::Held(Holder::Command { pid: c.pid }));
    }
    // Once a lingering run's command has exited, what descends from its
    // work holds too, whatever its environment. (What is not its own work,
    // a session its terminal server opened later, is never ended by reap
    // or stop, but still holds while it carries the token: onlyone cannot
    // tell it from work the run itself started there, and a wrong "stale"
    // would let a second run in beside it.)
    let work = match Lingered::of(rec).map(|l| Work::load(&l, deadline)) {
        None => None,
        Some(Ok(w)) => Some(w),
        Some(Err(e)) => {
            return Some(Verdict::Unknown(UnknownReason::CannotScan {
                why: e.to_string(),
            }));
        }
    };
    // A lingering run names the processes that outlived its command.
    if let Some(m) = rec.linger.iter().find(|m| named(m)) {
        return Some(Verdict::Held(Holder::Member {
            pid: m.pid,
            cmd: procfs::command_line(m.pid),
        }));
    }
    let spec = rec.scan_spec()?;
    // Two scans: a process that forks and exits while /proc is listed could
    // hide its child from one pass (after pid wrap-around).
    for _ in 0..2 {
        let scan = match crate::lock::members::run_members_within(&spec, &[], true, budget) {
            Ok(scan) => scan,
            Err(e) => {
                return Some(Verdict::Unknown(UnknownReason::CannotScan {
                    why: e.to_string(),
                }));
            }
        };
        if let Some(m) = scan.members.into_iter().next() {
            return Some(Verdict::Held(Holder::Member {
                pid: m.id.pid,
                cmd: procfs::command_line(m.id.pid),
            }));
        }
        // What descends from the work, whatever its environment.
        if let Some(id) = work
            .iter()
            .flat_map(Work::members)
            .find(|id| rec.may_name(id.pid))
        {
            return Some(Verdict::Held(Holder::Member {
                pid: id.pid,
                cmd: procfs::command_line(id.pid),
            }));
        }
        if let Some(pid) = scan.exiting.first() {
            return Some(Verdict::Unknown(UnknownReason::CannotScan {
                why: still_exiting(*pid, &scan.exiting[1..], rec.uid, deadline),
            }));
        }
        if let Some(pid) = scan.unreadable.first() {
            return Some(Verdict::Unknown(UnknownReason::CannotScan {
                why: format!(
                    "pid {pid} started after the run and may carry its token, but its \
                     environment cannot be read ({})",
                    who_may_read(*pid)
                ),
            }));
        }
    }
    None
}

/// Why a run cannot be judged while `pid` (and `more`), of the record's
/// user, are still in exit(2) with their memory gone.
fn still_exiting(pid: u32, more: &[u32], uid: Option<u32>, deadline: Option<Instant>) -> String {
    let whose = uid.map_or_else(String::new, |u| {
        format!(" of {}", crate::text::user_name(u))
    });
    let more = match more.len() {
        0 => String::new(),
        1 => format!(" (and pid {})", more[0]),
        n => format!(" (and {n} more processes{whose})"),
    };
    let given = if deadline.is_some_and(|d| Instant::now() >= d) {
        "the deadline ran out while it was waited for".to_owned()
    } else {
        format!(
            "past the {} a judgement waits for such processes in all",
            crate::text::compact_duration(crate::lock::members::EXIT_WAIT)
        )
    };
    format!(
        "pid {pid}{whose} started after the run and is still exiting{more}, {given}; what \
         it carried can no longer be read, and it may hold the run's files until it has exited"
    )
}

/// The live processes of the run (or lock) a record describes: the
/// wrapper or owner first, then the command, the processes the record
/// names as lingering, and the rest of the run (its group and token
/// carriers). `skip` names processes never to include (the caller). The
/// search of `/proc` stops at `deadline`.
pub(crate) fn processes_of(
    record: &Record,
    skip: &[u32],
    deadline: Option<Instant>,
) -> crate::error::Result<Vec<ProcId>> {
    let mut out: Vec<ProcId> = Vec::new();
    let mut push = |id: ProcId| {
        if !skip.contains(&id.pid) && !out.iter().any(|t| t.pid == id.pid) {
            out.push(id);
        }
    };
    // A lingering run's own work only (see `crate::lock::work`).
    let work = Lingered::of(record)
        .map(|l| Work::load(&l, deadline))
        .transpose()
        .map_err(|e| crate::error::Error::io("list processes in", "/proc", e))?;
    let of_work = |id: &ProcId| work.as_ref().is_none_or(|w| w.judge(*id).is_ok());
    record
        .owner_id()
        .into_iter()
        .chain(record.cmd_id)
        .chain(record.linger.iter().copied())
        .filter(|id| id.is_alive() && record.may_name(id.pid) && of_work(id))
        .for_each(&mut push);
    if let Some(spec) = record.scan_spec() {
        let scan = crate::lock::members::run_members(&spec, skip, false, deadline)
            .map_err(|e| crate::error::Error::io("list processes in", "/proc", e))?;
        scan.members
            .into_iter()
            .filter(|m| of_work(&m.id))
            .for_each(|m| push(m.id));
    }
    work.iter()
        .flat_map(Work::members)
        .filter(|id| record.may_name(id.pid))
        .for_each(&mut push);
    Ok(out)
}

/// Who may read a process's environment, for a message to this user:
/// never "its user" to that very user (a non-dumpable process of one's
/// own is readable by root alone).
fn who_may_read(pid: u32) -> String {
    let me = rustix::process::geteuid().as_raw();
    match procfs::uid_of(pid) {
        Some(uid) if uid == me => "it is yours but not dumpable: ask as root".to_owned(),
        Some(uid) => format!("ask as root or as {}", crate::text::user_name(uid)),
        None => "ask as root or as its user".to_owned(),
    }
}
