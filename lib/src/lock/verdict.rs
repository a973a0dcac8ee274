//! The verdict on a lock file: held, stale, or unknown.
//!
//! - **Held** when any process the record names is alive: the same pid, the
//!   same start time, the same boot, and not a zombie. A kernel lock (flock)
//!   held on the record by its writer is proof of life too, and the cheapest
//!   one, so it is checked first. For a run's record, "any process" includes
//!   the command, its process group and every process carrying the run's
//!   token; that wider search runs only once the wrapper and the command are
//!   gone. A record speaks only for the user who owns its file: it may name
//!   only that user's processes (root's may name anyone's), a token carrier
//!   counts only as that user, and once the owner is gone a flock proves
//!   life only when a live process of that user holds it exclusively
//!   (`/proc/locks`): anyone who can open a file can flock it. A file that
//!   is not a record but that someone holds a flock on (`flock(1)`) is held
//!   by [`Holder::Outside`].
//! - **Stale** only on proof: every named process is gone, reused (another
//!   start time), a zombie, or a process of another user than the record's
//!   writer ([`StaleReason::Foreign`]: a forged record, or a reused pid); or the record was written under another boot;
//!   or the file is a record torn by a power loss (empty, or a prefix of a
//!   record) and older than the current boot. Any other file is never
//!   stale, whatever its age: a path LOCK may name a user's file.
//! - **Unknown** otherwise: a garbage record from this boot, an owner in
//!   another PID namespace, a record from a newer format whose owner is
//!   gone. onlyone never takes such a lock over; it says why and how to
//!   clear it.
//!
//! No age or TTL rule ever decides a holder is dead: a slow run is not a dead
//! run. This module says what a verdict is; `judge.rs` reaches it.

use std::fmt;

use crate::procfs;
use crate::record::FORMAT_VERSION;

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
#[non_exhaustive]
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
    /// The file is not a record, and a process holds a kernel lock
    /// (flock) on it: a tool other than onlyone (`flock(1)`) holds it.
    /// `fuser -v PATH` names the process.
    Outside,
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
    /// The pid of the process that proved the lock held (0 for
    /// [`Holder::Outside`], whose holder only `/proc/locks` names).
    pub fn pid(&self) -> u32 {
        match self {
            Holder::KernelLock { pid }
            | Holder::Owner { pid }
            | Holder::OwnerUnverified { pid }
            | Holder::Command { pid }
            | Holder::OtherNamespace { pid, .. }
            | Holder::Member { pid, .. } => *pid,
            Holder::OtherKernelLock { owner } => *owner,
            Holder::Outside => 0,
        }
    }

    /// The pid of the holder when it is a live process of this PID
    /// namespace, whose exit a pidfd tells: not the exited owner of
    /// [`Holder::OtherKernelLock`], nor a pid of another namespace's
    /// numbering.
    pub(crate) fn watchable_pid(&self) -> Option<u32> {
        match self {
            Holder::KernelLock { pid }
            | Holder::Owner { pid }
            | Holder::OwnerUnverified { pid }
            | Holder::Command { pid }
            | Holder::Member { pid, .. } => Some(*pid),
            Holder::OtherKernelLock { .. } | Holder::OtherNamespace { .. } | Holder::Outside => {
                None
            }
        }
    }
}

/// Why a lock is stale. Each renders as a sentence a user understands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The pid is a live process of another user than the one who wrote
    /// the record (the file's owner), who may name only its own: a forged
    /// record, or a pid reused by another user.
    Foreign {
        /// The recorded pid.
        pid: u32,
        /// Whose process it is.
        user: String,
        /// Who wrote the record.
        writer: String,
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
            StaleReason::Foreign {
                pid,
                user,
                writer,
                run,
            } => {
                write!(
                    f,
                    "pid {pid} is a process of {user}, and the record was written by {writer}, \
                     who may name only processes of its own (a forged record, or a reused pid)"
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
#[non_exhaustive]
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
