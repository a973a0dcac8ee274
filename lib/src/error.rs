//! Errors. Each names what failed (the path or the pid) and what to do next.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::hint::Hint;
use crate::lock::verdict::{Holder, UnknownReason};
use crate::record::Record;
use crate::text::compact_duration;

/// A lock is held by a live owner. Carries the owner record and the process
/// that proved it alive; its message names the pid, the command, the age and
/// a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldBy {
    /// The lock file.
    pub path: PathBuf,
    /// The owner record.
    pub record: Record,
    /// The process that proved it held.
    pub holder: Holder,
    /// The holders of the lock's other slots, when every slot of a lock of
    /// several is held (this one holds the first): each a run to stop on
    /// its own (`stop --pid`). Empty otherwise.
    pub others: Vec<HeldBy>,
}

impl HeldBy {
    /// The lock file `path`, held by `holder` of the run `record`.
    pub fn new(path: PathBuf, record: Record, holder: Holder) -> HeldBy {
        HeldBy {
            path,
            record,
            holder,
            others: Vec::new(),
        }
    }

    /// How long the lock has been held, from the record's `since`.
    pub fn age(&self) -> Option<Duration> {
        let since = self.record.since?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs();
        Some(Duration::from_secs(now.saturating_sub(since)))
    }

    /// "pid 4242 (`./sync.sh --all`, for 3m12s)", or, when a leftover
    /// process keeps a run alive, "pid 812 (`sleep 300`), a leftover process
    /// of the run started by pid 4242 (`./sync.sh --all`, for 3m12s)": each
    /// command beside its own pid.
    pub fn describe(&self) -> String {
        // Another account's file: its pid is what it proves; what it says
        // of a command or an age is that account's word.
        if let Some(uid) = self.record.other_account() {
            return format!(
                "pid {} of another account ({}), whose file `{}` it is",
                self.holder.pid(),
                crate::text::user_name(uid),
                self.path.display()
            );
        }
        let age = self.age().map(|a| format!(", for {}", compact_duration(a)));
        let age = age.unwrap_or_default();
        match &self.holder {
            Holder::Member { pid, cmd } => format!(
                "pid {pid} (`{}`), a leftover process of the run started by pid {} (`{}`{age})",
                cmd.as_deref().unwrap_or("?"),
                self.record.pid,
                self.record.cmd.as_deref().unwrap_or("?")
            ),
            Holder::Command { pid } => format!(
                "pid {pid}, the command of the run started by pid {} (`{}`{age})",
                self.record.pid,
                self.record.cmd.as_deref().unwrap_or("?")
            ),
            Holder::OtherNamespace { pid, ns } => format!(
                "pid {pid} of another PID namespace (pid:[{ns}]), which holds its kernel lock on \
                 the lock file (`{}`{age})",
                self.record.cmd.as_deref().unwrap_or("?")
            ),
            Holder::OtherKernelLock { owner } => format!(
                "a process that holds a kernel lock on the lock file (the recorded owner, pid \
                 {owner} running `{}`, has exited{age}; `fuser -v {}` names the holder)",
                self.record.cmd.as_deref().unwrap_or("?"),
                self.path.display()
            ),
            Holder::Outside => format!(
                "a process outside onlyone that holds a kernel lock (flock) on `{}`, as \
                 `flock(1)` does; `fuser -v {}` names it",
                self.path.display(),
                self.path.display()
            ),
            h => format!(
                "pid {} (`{}`{age})",
                h.pid(),
                self.record.cmd.as_deref().unwrap_or("?")
            ),
        }
    }
}

impl fmt::Display for HeldBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is held by {}; wait for it or stop it",
            self.path.display(),
            self.describe()
        )
    }
}

/// Everything that can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock is held by a live owner.
    #[error("{0}")]
    Held(Box<HeldBy>),

    /// A wait ran out while the lock was still held.
    #[error("gave up after {}: {held}", compact_duration(*.waited))]
    Timeout {
        /// How long it waited.
        waited: Duration,
        /// Who still holds it.
        held: Box<HeldBy>,
    },

    /// The lock is held, and another caller already waits for it in the
    /// queue seat ([`AcquireOptions::queue`](crate::AcquireOptions::queue)):
    /// the run that caller starts next picks up what this one would have.
    #[error("one already queued: {} waits for `{}`, held by {}", .waiter.describe(), .held.path.display(), .held.describe())]
    Queued {
        /// Who holds the lock.
        held: Box<HeldBy>,
        /// Who waits in the queue seat.
        waiter: Box<HeldBy>,
    },

    /// The lock's owner can be judged neither alive nor dead.
    #[error("`{}` is left alone: {reason}. {}", .path.display(), unknown_remedy(.path, .reason))]
    Unknown {
        /// The lock file.
        path: PathBuf,
        /// Why.
        reason: UnknownReason,
    },

    /// Stale takeover kept losing races and retries ran out; no live owner
    /// was seen on the last look.
    #[error(
        "`{}` is contended: it changed under us {tries} times in a row without a live \
         owner; try again",
        .path.display()
    )]
    Contended {
        /// The lock file.
        path: PathBuf,
        /// Takeover attempts made.
        tries: u32,
    },

    /// `release --force` on a file that is not a lock record.
    #[error(
        "refusing to remove `{}`: it is not a lock record ({why}); onlyone never deletes a file \
         that is not one. If it is a lock left by another tool, remove it with `rm {}`; if it \
         is a file of yours, use another lock path",
        .path.display(), .path.display()
    )]
    NotALock {
        /// The file.
        path: PathBuf,
        /// Why it is not a record.
        why: String,
    },

    /// A symbolic link sits at the lock path.
    #[error(
        "`{}` is a symbolic link; onlyone never follows a link at the lock path: \
         remove the link or use another lock path",
        .path.display()
    )]
    Symlink {
        /// The lock path.
        path: PathBuf,
    },

    /// Something other than a regular file sits at the lock path.
    #[error(
        "`{}` is a {kind}, not a regular file: remove it or use another lock path",
        .path.display()
    )]
    NotRegular {
        /// The lock path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },

    /// The lock's directory does not exist.
    #[error(
        "the lock directory `{0}` does not exist: create it (mkdir -p {0}) or use another \
         directory",
        .dir.display()
    )]
    MissingDir {
        /// The directory.
        dir: PathBuf,
    },

    /// The lock's directory could be tampered with by another user.
    #[error(
        "the lock directory `{}` is unsafe to write in: {why}; fix its owner or mode, or \
         use another directory",
        .dir.display()
    )]
    UnsafeDir {
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        why: String,
    },

    /// A lock directory that another account made or could have changed:
    /// what it holds is not used, nor is anything written there.
    #[error("the lock directory `{}` cannot be trusted: {why}; {fix}", .dir.display())]
    UntrustedDir {
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        why: String,
        /// What to do about it.
        fix: String,
    },

    /// The lock's directory is reached through a symbolic link that
    /// another account owns: that account chose where it leads (which of
    /// this user's locks it would share), so it is not followed.
    #[error("{}", foreign_link(.dir, .link, .owner, .me))]
    ForeignLink {
        /// The directory, as given.
        dir: PathBuf,
        /// The link, where the path reaches it.
        link: PathBuf,
        /// The link's owner's name.
        owner: String,
        /// This process's user's name.
        me: String,
    },

    /// The lock's directory is reached through a symbolic link of the
    /// caller's or root's that has more than one name, in a directory
    /// another account may write in: where hard links are not protected,
    /// that account may have given the link that name.
    #[error(
        "the lock directory `{}` is reached through the symbolic link `{}`, which has more \
         than one name (a hard link) and sits where other accounts may write: whoever made this name \
         of it chose where it leads, so onlyone does not follow it; give the directory's own \
         path, or remove the link (sudo rm {})",
        .dir.display(),
        .link.display(),
        .link.display()
    )]
    HardLinkedLink {
        /// The directory, as given.
        dir: PathBuf,
        /// The link, where the path reaches it.
        link: PathBuf,
    },

    /// A file system is mounted on a name in the lock's directory (the
    /// lock path, or a file kept beside it): another account may have
    /// mounted one whose server never answers, so onlyone never looks
    /// into it.
    #[error(
        "`{}` is a mount point: a file system is mounted on it, and onlyone never looks into \
         one there (its server could leave every look waiting for ever); unmount it (sudo \
         umount -l {}) and remove it, or use another lock path",
        .path.display(),
        .path.display()
    )]
    MountPoint {
        /// The name, in the lock's directory.
        path: PathBuf,
    },

    /// This user may not remove the lock file.
    #[error(
        "{}you ({me}) may not remove `{}`: {why}; {} must clear it ({})",
        .state.as_ref().map(|s| format!("`{}` is {s}, but ", .path.display())).unwrap_or_default(),
        .path.display(),
        if .owner == "root" { "root".to_owned() } else { format!("{} or root", .owner) },
        forced_release(.path, true)
    )]
    CannotRemove {
        /// The lock file.
        path: PathBuf,
        /// Why not.
        why: String,
        /// This process's user.
        me: String,
        /// The file's owner.
        owner: String,
        /// What the lock was judged, when known (`stale (...)`).
        state: Option<String>,
    },

    /// The lock directory is on a filesystem other hosts may share.
    #[error(
        "the lock directory `{}` is on a network or FUSE filesystem ({kind}): another host \
         that shares it cannot see this host's processes, nor this host its, so two hosts \
         could both run. Use a local directory (the default is), and for a job shared between \
         hosts a lock that all of them see (a database, not a file); if this filesystem is \
         used by this host alone, {}",
        .dir.display(), Hint::AllowSharedFs
    )]
    SharedFs {
        /// The directory.
        dir: PathBuf,
        /// The filesystem.
        kind: &'static str,
    },

    /// The removal guard's file is not one onlyone can trust.
    #[error(
        "the removal guard `{}` is unsafe to use: {why}; remove it as its directory's owner \
         or root, or use a lock directory of your own",
        .path.display()
    )]
    UnsafeGuard {
        /// The guard file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },

    /// The removal guard (a kernel lock on the guard file) stayed taken.
    #[error(
        "could not take the removal guard (flock on `{}`) within {}: another process holds \
         it (find it with `fuser -v {}`)",
        .dir.display(), compact_duration(*.waited), .dir.display()
    )]
    GuardBusy {
        /// The guard file.
        dir: PathBuf,
        /// How long it tried.
        waited: Duration,
    },

    /// A release by pid found the lock held by someone else.
    #[error(
        "`{}` is not held by pid {pid}: {}; {} to remove it anyway",
        .held.path.display(), held_or_record(.held), Hint::Force
    )]
    NotOwner {
        /// The pid that asked to release.
        pid: u32,
        /// Who does hold it.
        held: Box<HeldBy>,
    },

    /// The lock this guard held was removed or replaced by someone else.
    #[error(
        "`{}` no longer holds this owner's record: it was removed or taken over",
        .path.display()
    )]
    Lost {
        /// The lock file.
        path: PathBuf,
    },

    /// The processes of a run belong to another user, whom this one may not
    /// signal.
    #[error(
        "cannot stop `{}`: pid {pid} runs as {owner}, and you ({me}) may not signal it; {}",
        .path.display(), who_can_stop(.owner)
    )]
    NotPermitted {
        /// The lock file.
        path: PathBuf,
        /// The process that could not be signalled.
        pid: u32,
        /// Its user's name.
        owner: String,
        /// This process's user's name.
        me: String,
    },

    /// A stop ended its signals, yet the lock stayed held by a run it could
    /// not name (it changed under the stop).
    #[error(
        "`{}` is still held after {} of stopping, by a run that could not be named; look \
         with `onlyone status` and try again",
        .path.display(), compact_duration(*.waited)
    )]
    NotStopped {
        /// The lock file.
        path: PathBuf,
        /// How long the stop tried.
        waited: Duration,
    },

    /// A stop asked to end the run of the process that asks.
    #[error("`{}` is held by this process itself: it cannot stop itself", .path.display())]
    StopSelf {
        /// The lock file.
        path: PathBuf,
    },

    /// The lock file is another account's (not this user's, not root's),
    /// in a directory other accounts may write in: what it says is that
    /// account's word, so it is never released as a hold of this
    /// account's, whatever pid or token it names.
    #[error(
        "`{}` is another account's file ({owner}'s), naming pid {pid}: not a hold of yours, so \
         it is not released as one; keep the job's locks in a directory no other account can \
         write in",
        .path.display()
    )]
    OtherAccount {
        /// The lock file.
        path: PathBuf,
        /// The account that owns it.
        owner: String,
        /// The pid its record names.
        pid: u32,
    },

    /// A pid given as the owner is not a live process.
    #[error("pid {pid} cannot own the lock: {why}")]
    BadOwner {
        /// The pid.
        pid: u32,
        /// Why.
        why: String,
        /// The error behind it, when there is one.
        #[source]
        source: Option<io::Error>,
    },

    /// A token given to [`crate::AcquireOptions::token`] that is not one.
    #[error("`{token}` is not a token: a token is 32 lowercase hex digits (onlyone::new_token)")]
    BadToken {
        /// The token given (cut at 80 characters).
        token: String,
    },

    /// A lock name that breaks the naming rule.
    #[error(
        "`{name}` is not a lock name: {why}. A name is an ASCII letter or digit, then up to \
         63 ASCII letters, digits, `.`, `_` or `-`; to use any other file, give its path \
         (one with a `/`)"
    )]
    BadName {
        /// The name given (cut at 100 characters).
        name: String,
        /// What is wrong with it.
        why: String,
    },

    /// A take with one number of slots while a slot of the lock is held
    /// with another: letting both in could admit more holders than either
    /// number allows.
    #[error(
        "`{}` is held with {held} slot{}, and this take asks for {asked}: a lock's number of \
         slots changes once no run holds it",
        .path.display(),
        if *.held == 1 { "" } else { "s" }
    )]
    SlotsDiffer {
        /// The lock file (slot 0's).
        path: PathBuf,
        /// The number a holder recorded.
        held: u32,
        /// The number this take asked for.
        asked: u32,
    },

    /// A lock path that cannot name a lock file.
    #[error("`{}` cannot be a lock path: {why}", .path.display())]
    BadPath {
        /// The path.
        path: PathBuf,
        /// Why.
        why: String,
    },

    /// An I/O error, with the operation and the path.
    #[error("could not {op} `{}`: {source}", .path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn unknown_remedy(path: &std::path::Path, reason: &UnknownReason) -> String {
    let p = path.display();
    match reason {
        UnknownReason::Unreadable { .. } => format!(
            "It is not a record onlyone wrote, so onlyone never removes it: if it is a lock \
             left by another tool, remove it with `rm {p}`; if it is a file of yours, use \
             another lock path"
        ),
        UnknownReason::Denied { owner } => {
            let who = if owner == "root" {
                "root".to_owned()
            } else {
                format!("{owner} or root")
            };
            format!("{who} can judge it (`sudo onlyone status {p}`) and clear it if it is stale")
        }
        UnknownReason::OtherHost { host } => format!(
            "Once you know the run on `{host}` is over, remove it with {}; a job shared between \
             hosts needs a lock that all of them see (a database, not a file)",
            forced_release(path, false)
        ),
        _ => format!(
            "If no run is active, remove it with {}",
            forced_release(path, false)
        ),
    }
}

/// The hint that removes `path` whoever holds it, as root or as the user.
fn forced_release(path: &std::path::Path, as_root: bool) -> Hint<'_> {
    Hint::ForcedRelease { path, as_root }
}

fn foreign_link(dir: &std::path::Path, link: &std::path::Path, owner: &str, me: &str) -> String {
    let l = link.display();
    let what = if dir == link {
        format!("the lock directory `{l}` is a symbolic link")
    } else {
        format!(
            "the lock directory `{}` is reached through the symbolic link `{l}`",
            dir.display()
        )
    };
    format!(
        "{what}, owned by {owner}, not by you ({me}) or root: whoever owns a link chooses \
         where it leads, so onlyone does not follow it; give the directory's own path if you \
         trust where it leads, or remove the link (sudo rm {l})"
    )
}

fn who_can_stop(owner: &str) -> String {
    if owner == "root" {
        "only root can stop it (sudo onlyone stop ...)".to_owned()
    } else {
        format!("{owner} or root can stop it (sudo -u {owner} onlyone stop ...)")
    }
}

fn held_or_record(h: &HeldBy) -> String {
    format!("it is held by {}", h.describe())
}

impl Error {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: impl Into<io::Error>,
    ) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source: source.into(),
        }
    }

    /// [`Error::ForeignLink`]: the lock directory `dir` reaches `link`, a
    /// link the walk refused; [`Error::HardLinkedLink`] when its owner is
    /// trusted (the caller or root), for then it was refused for its
    /// names.
    pub(crate) fn foreign_link(dir: &std::path::Path, link: &crate::walk::Seen) -> Error {
        if crate::walk::trusted_owner(link.uid) {
            return Error::HardLinkedLink {
                dir: dir.to_path_buf(),
                link: link.path.clone(),
            };
        }
        Error::ForeignLink {
            dir: dir.to_path_buf(),
            link: link.path.clone(),
            owner: crate::text::user_name(link.uid),
            me: crate::text::user_name(rustix::process::geteuid().as_raw()),
        }
    }

    /// The owner, when the error is [`Error::Held`] or [`Error::Timeout`].
    pub fn held_by(&self) -> Option<&HeldBy> {
        match self {
            Error::Held(h) | Error::Timeout { held: h, .. } | Error::Queued { held: h, .. } => {
                Some(h)
            }
            _ => None,
        }
    }
}

/// A shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
