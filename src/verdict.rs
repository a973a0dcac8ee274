//! The verdict on a lock file: held, stale, or unknown.
//!
//! - **Held** when any process the record names is alive: the same pid, the
//!   same start time, the same boot, and not a zombie. A kernel lock (flock)
//!   held on the record by its writer is proof of life too, and the cheapest
//!   one, so it is checked first. For a run's record, "any process" includes
//!   the command, its process group and every process carrying the run's
//!   token; that wider search runs only once the wrapper and the command are
//!   gone.
//! - **Stale** only on proof: every named process is gone, reused (another
//!   start time) or a zombie; or the record was written under another boot;
//!   or the file is a record torn by a power loss (empty, or a prefix of a
//!   record) and older than the current boot. Any other file is never
//!   stale, whatever its age: a path LOCK may name a user's file.
//! - **Unknown** otherwise: a garbage record from this boot, an owner in
//!   another PID namespace, a record from a newer format whose owner is
//!   gone. onlyone never takes such a lock over; it says why and how to
//!   clear it.
//!
//! No age or TTL rule ever decides a holder is dead: a slow run is not a dead
//! run.

use std::fmt;
use std::time::Instant;

use crate::procfs::{self, Probe, ProcId};
use crate::record::{FORMAT_VERSION, NotARecord, Record};

/// The verdict on a lock file that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A live owner was proven.
    Held(Holder),
    /// The owner is provably gone; the lock may be taken over.
    Stale(StaleReason),
    /// Neither could be proven; the lock is left alone.
    Unknown(UnknownReason),
}

/// Which process proved a lock held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// The writer still holds its kernel lock (flock) on the record.
    KernelLock {
        /// The recorded owner pid.
        pid: u32,
    },
    /// The recorded owner is alive with the recorded start time.
    Owner {
        /// Its pid.
        pid: u32,
    },
    /// The owner answers `kill(pid, 0)` (EPERM included) but `/proc` hides
    /// its start time, or the record is a bare pid file.
    OwnerUnverified {
        /// Its pid.
        pid: u32,
    },
    /// The run's command is alive.
    Command {
        /// Its pid.
        pid: u32,
    },
    /// The recorded owner is gone, but another process holds a kernel lock
    /// on the record (a child between fork and exec, or a foreign process:
    /// `fuser -v` on the file names it).
    OtherKernelLock {
        /// The recorded owner, which has exited.
        owner: u32,
    },
    /// The owner runs in another PID namespace and holds its kernel lock
    /// (flock) on the record.
    OtherNamespace {
        /// The recorded pid (in that namespace's numbering).
        pid: u32,
        /// The namespace's inode.
        ns: u64,
    },
    /// A leftover process of the run: in the command's process group or
    /// carrying the run's token.
    Member {
        /// Its pid.
        pid: u32,
        /// Its command line.
        cmd: Option<String>,
    },
}

impl Holder {
    /// The pid of the process that proved the lock held.
    pub fn pid(&self) -> u32 {
        match self {
            Holder::KernelLock { pid }
            | Holder::Owner { pid }
            | Holder::OwnerUnverified { pid }
            | Holder::Command { pid }
            | Holder::OtherNamespace { pid, .. }
            | Holder::Member { pid, .. } => *pid,
            Holder::OtherKernelLock { owner } => *owner,
        }
    }
}

/// Why a lock is stale. Each renders as a sentence a user understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaleReason {
    /// The owner pid has no process.
    Exited {
        /// The recorded pid.
        pid: u32,
        /// True when the record is a run's and no process of it is left.
        run: bool,
    },
    /// The pid belongs to another process now.
    Reused {
        /// The recorded pid.
        pid: u32,
        /// The start time (ticks since boot) of the process with the pid now.
        now: u64,
        /// The recorded start time.
        recorded: u64,
        /// True when the record is a run's and no process of it is left.
        run: bool,
    },
    /// The owner is a zombie.
    Zombie {
        /// The recorded pid.
        pid: u32,
        /// True when the record is a run's and no process of it is left.
        run: bool,
    },
    /// The record names another boot.
    PreviousBoot,
    /// The owner's PID namespace no longer exists: no process has it, and
    /// nothing holds the record's kernel lock.
    PidNamespaceGone {
        /// The namespace's inode.
        ns: u64,
    },
    /// The file is what a power loss leaves of a record (empty, or a
    /// prefix of one) and is older than this boot.
    UnreadableFromPreviousBoot {
        /// Why it could not be read.
        why: String,
    },
}

fn clock(ticks: u64) -> String {
    match procfs::start_to_unix(ticks) {
        Some(secs) => crate::text::format_unix_time(secs),
        None => format!("{ticks} ticks after boot"),
    }
}

impl fmt::Display for StaleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tail = |f: &mut fmt::Formatter<'_>, run: bool| {
            if run {
                f.write_str(", and no process of its run is left")
            } else {
                Ok(())
            }
        };
        match self {
            StaleReason::Exited { pid, run } => {
                write!(f, "pid {pid} has exited")?;
                tail(f, *run)
            }
            StaleReason::Reused {
                pid,
                now,
                recorded,
                run,
            } => {
                write!(
                    f,
                    "pid {pid} is now a different process (started {}; the record says {})",
                    clock(*now),
                    clock(*recorded)
                )?;
                tail(f, *run)
            }
            StaleReason::Zombie { pid, run } => {
                write!(
                    f,
                    "the owner is a zombie (pid {pid} has exited and awaits its parent)"
                )?;
                tail(f, *run)
            }
            StaleReason::PreviousBoot => f.write_str("the owner died with the previous boot"),
            StaleReason::PidNamespaceGone { ns } => write!(
                f,
                "the owner's PID namespace (pid:[{ns}]) no longer exists, and every process \
                 of the run died with it"
            ),
            StaleReason::UnreadableFromPreviousBoot { why } => write!(
                f,
                "the record is torn ({why}) and was written before this boot: a power loss \
                 cut it short"
            ),
        }
    }
}

/// Why a lock can be judged neither held nor stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownReason {
    /// The file is not an owner record, and it was written during this boot.
    Unreadable {
        /// Why it is not a record.
        why: String,
    },
    /// The owner ran in another PID namespace, which is alive: its pid
    /// means nothing here.
    OtherPidNamespace {
        /// The record's namespace inode.
        theirs: u64,
        /// Ours.
        ours: u64,
        /// A process seen in that namespace.
        member: Option<u32>,
    },
    /// The owner ran in another PID namespace, and whether it still exists
    /// cannot be told: some processes' namespaces are not readable by this
    /// user.
    PidNamespaceUnseen {
        /// The record's namespace inode.
        theirs: u64,
        /// How many processes could not be checked.
        unreadable: usize,
        /// True when this process runs in a nested PID namespace (a
        /// container), which cannot see the others.
        nested: bool,
    },
    /// The record is from a newer onlyone, and what this version can check is
    /// gone; the newer format may name processes this version cannot find.
    NewerFormat {
        /// The record's format version.
        version: u32,
    },
    /// `/proc` does not show this process itself, or this boot's id: no
    /// liveness can be proven either way.
    NoProc {
        /// What is wrong.
        why: String,
    },
    /// The processes of the run could not be listed.
    CannotScan {
        /// The error.
        why: String,
    },
    /// The record was written on another host (a directory shared over the
    /// network): its pids and boot id say nothing about this host.
    OtherHost {
        /// The host named in the record.
        host: String,
    },
    /// The record's start times are on the clock of another time namespace
    /// and cannot be compared exactly with this one's.
    OtherTimeNamespace {
        /// The writer's time namespace inode.
        theirs: u64,
    },
    /// This user may not read the file.
    Denied {
        /// The file's owner.
        owner: String,
    },
}

impl fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnknownReason::Unreadable { why } => write!(f, "the record is not readable: {why}"),
            UnknownReason::OtherPidNamespace {
                theirs,
                ours,
                member,
            } => {
                write!(
                    f,
                    "the owner ran in another PID namespace (pid:[{theirs}], this process is in \
                     pid:[{ours}]), which is alive"
                )?;
                if let Some(m) = member {
                    write!(f, " (pid {m} is in it)")?;
                }
                f.write_str(
                    ", and its pids cannot be checked from here; run onlyone in that namespace \
                     (nsenter --pid --target PID)",
                )
            }
            UnknownReason::PidNamespaceUnseen {
                theirs,
                nested: true,
                ..
            } => write!(
                f,
                "the owner ran in another PID namespace (pid:[{theirs}]), and whether it still \
                 exists cannot be told from this one, which is nested (a container) and does \
                 not see the others; onlyone on the host can tell"
            ),
            UnknownReason::PidNamespaceUnseen {
                theirs, unreadable, ..
            } => write!(
                f,
                "the owner ran in another PID namespace (pid:[{theirs}]), and whether it still \
                 exists cannot be told: the namespaces of {unreadable} process(es) are not \
                 readable by you; root can tell (sudo onlyone status)"
            ),
            UnknownReason::NewerFormat { version } => write!(
                f,
                "the record has format version {version}, newer than this onlyone \
                 ({FORMAT_VERSION}); its owner has exited but it may name processes this \
                 version cannot check; use the newer onlyone"
            ),
            UnknownReason::NoProc { why } => write!(
                f,
                "/proc cannot be trusted here ({why}); run onlyone where /proc is mounted for \
                 this PID namespace"
            ),
            UnknownReason::CannotScan { why } => {
                write!(f, "the processes of the run cannot be listed: {why}")
            }
            UnknownReason::OtherHost { host } => write!(
                f,
                "the owner ran on another host, `{host}` (the lock directory is shared between \
                 hosts), whose processes this host cannot see"
            ),
            UnknownReason::OtherTimeNamespace { theirs } => write!(
                f,
                "the record was written in another time namespace (time:[{theirs}]) whose \
                 boot-time offset differs from this one's by a fraction of a clock tick, so its \
                 start times cannot be compared; run onlyone in that namespace"
            ),
            UnknownReason::Denied { owner } => write!(
                f,
                "the lock file cannot be read by you (permission denied); it belongs to {owner}"
            ),
        }
    }
}

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
                // Someone alive holds a kernel lock on it: not ours to judge.
                return Verdict::Unknown(UnknownReason::Unreadable {
                    why: why.to_string(),
                });
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
pub fn judge_record(rec: &Record, kernel_locked: bool, deadline: Option<Instant>) -> Verdict {
    // Without a working /proc nothing can be proven dead: a pid that does
    // not show is not a pid that exited.
    if let Err(why) = procfs::usable() {
        return Verdict::Unknown(UnknownReason::NoProc { why });
    }
    if let Some(theirs) = &rec.boot {
        match procfs::boot_id() {
            // Another boot id is another kernel: a reboot of this host, or
            // another host that shares the directory. Only the former is
            // proof; the same boot id means the same kernel, whatever the
            // host is called now.
            Ok(ours) if theirs != ours => {
                return match &rec.host {
                    Some(host) if *host != procfs::host_name() => {
                        Verdict::Unknown(UnknownReason::OtherHost { host: host.clone() })
                    }
                    _ => Verdict::Stale(StaleReason::PreviousBoot),
                };
            }
            Ok(_) => {}
            Err(e) => return Verdict::Unknown(UnknownReason::NoProc { why: e.to_string() }),
        }
    }
    if let Some(theirs) = rec.pidns {
        match procfs::own_pidns() {
            Some(ours) if theirs != ours => {
                return judge_other_pidns(rec, theirs, ours, kernel_locked);
            }
            Some(_) => {}
            None => {
                return Verdict::Unknown(UnknownReason::NoProc {
                    why: "this process's PID namespace cannot be read from /proc/self/ns/pid"
                        .into(),
                });
            }
        }
    }
    // Start times of another time namespace that could not be moved onto
    // this one's clock: a live owner would look like another process.
    if let Some(theirs) = rec.timens
        && procfs::own_timens().is_some_and(|ours| ours != theirs)
    {
        return if kernel_locked {
            Verdict::Held(Holder::KernelLock { pid: rec.pid })
        } else {
            Verdict::Unknown(UnknownReason::OtherTimeNamespace { theirs })
        };
    }
    let owner = procfs::probe(rec.pid, rec.start);
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
    if let Some(c) = rec.cmd_id.filter(|c| c.is_alive()) {
        return Verdict::Held(Holder::Command { pid: c.pid });
    }
    // A lingering run names the processes that outlived its command.
    if let Some(m) = rec.linger.iter().find(|m| m.is_alive()) {
        return Verdict::Held(Holder::Member {
            pid: m.pid,
            cmd: procfs::command_line(m.pid),
        });
    }
    if let Some(spec) = rec.scan_spec() {
        // Two scans: a process that forks and exits while /proc is listed
        // could hide its child from one pass (after pid wrap-around).
        for _ in 0..2 {
            match procfs::run_members(&spec, &[], true, deadline) {
                Ok(scan) => {
                    if let Some(m) = scan.members.into_iter().next() {
                        return Verdict::Held(Holder::Member {
                            pid: m.id.pid,
                            cmd: procfs::command_line(m.id.pid),
                        });
                    }
                    if let Some(pid) = scan.unreadable.first() {
                        return Verdict::Unknown(UnknownReason::CannotScan {
                            why: format!(
                                "pid {pid} started after the run and may carry its token, but its \
                                 environment cannot be read (ask as root or as its user)"
                            ),
                        });
                    }
                }
                Err(e) => {
                    return Verdict::Unknown(UnknownReason::CannotScan { why: e.to_string() });
                }
            }
        }
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
    record
        .owner_id()
        .into_iter()
        .chain(record.cmd_id)
        .chain(record.linger.iter().copied())
        .filter(|id| id.is_alive())
        .for_each(&mut push);
    if let Some(spec) = record.scan_spec() {
        let scan = procfs::run_members(&spec, skip, false, deadline)
            .map_err(|e| crate::error::Error::io("list processes in", "/proc", e))?;
        scan.members.into_iter().for_each(|m| push(m.id));
    }
    Ok(out)
}
