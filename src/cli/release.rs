//! `onlyone release`: lets go of a lock a script took with `acquire`,
//! records how the script ended and pings its end; its options.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use onlyone::{Error, LockFile, Released, Releaser, Verdict};

use super::exit::Ending;
use super::keeper::{RecordEnd, start_keeper};
use super::options::{Adjust, parse_duration};
use super::ping::{self, End, Pings};
use super::{Ctx, deadline_of, fail, journal, parent_pid, say};

#[derive(Debug, Args)]
pub struct Release {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// Remove the lock whoever holds it.
    #[arg(long)]
    pub force: bool,
    /// The owner's pid (default: the calling shell).
    #[arg(long, value_name = "PID", conflicts_with = "force")]
    pub owner: Option<u32>,
    /// How the script ended, for the journal: its exit code, 0 to 255
    /// (`trap 'onlyone release L --exit $?' EXIT`). Without it the run is
    /// recorded as "released, exit unknown": neither a success nor a
    /// failure.
    #[arg(long = "exit", value_name = "CODE", value_parser = clap::value_parser!(u8), allow_negative_numbers = true)]
    pub exit: Option<u8>,
    /// Ping URL with the run's end once the lock is released: URL/CODE?rid=RID
    /// with --exit CODE, URL/log?rid=RID without (the exit is unknown).
    ///
    /// Repeatable; without it (and --ping-file), the URLs `acquire
    /// --export --ping` exported for this lock ($ONLYONE_RELEASE_PING,
    /// $ONLYONE_RELEASE_PING_FILE), else $ONLYONE_PING. RID is the run's,
    /// from the lock's record. Not with --force.
    #[arg(long = "ping", value_name = "URL", conflicts_with = "force")]
    pub ping: Vec<String>,
    /// Read ping URLs from FILE, one a line (`#` starts a comment), as
    /// `run --ping-file` does; with --ping, both are pinged. Not with
    /// --force.
    #[arg(long, value_name = "FILE", conflicts_with = "force")]
    pub ping_file: Option<PathBuf>,
    /// One budget for the whole call.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub deadline: Option<Duration>,
    /// No message when there was nothing to release.
    #[arg(short, long)]
    pub quiet: bool,
}

impl Adjust for Release {}

/// What `onlyone release --help` says after the options.
pub const AFTER_HELP: &str = "\
Removes the lock only if it is held by the calling shell (or --owner), by
onlyone's own process (`bash -c '...; onlyone release L'` execs it), or under
the ONLYONE_TOKEN in onlyone's environment (a script that used --export, with
ONLYONE_LOCK naming the same lock: a worker or a trap in a subshell may
release). A lock someone else holds is refused (exit 125) with a message
naming the holder. --force removes any lock, and says whose it was. Releasing
a free lock succeeds: release is idempotent.

A release never frees the lock under the script's workers. When the script's
trap releases while a worker that carries the token still runs (`./worker &`
and the script ends), the lock stays held by that worker: release says so
(`sync` stays held by pid 4321, still working for the run (carrying its
token): it is free once the last one exits), exits 0, and records the run's
end then; once the last worker exits, it is recorded again, with a duration
that covers the workers. The record is marked released=, the next fire skips
(75) while a worker lives, and once the last one exits the lock is free to the
next fire, which records no abandoned run and takes nothing over. flock(1) gives the same guarantee through the
inherited descriptor.

--exit CODE records how the script ended (the trap's `$?`): the run counts as
a success for `check --max-age` and the metrics only with --exit 0, and as a
failure with any other code. Without --exit the end is \"released, exit
unknown\", which is neither. A script that execs its last command never runs
its trap: its hold ends when that command exits, and the next fire (or `reap`)
records the run as abandoned, exit unknown.

Examples:
  onlyone release sync --exit $?
  onlyone release --force sync";

impl Ctx {
    /// `release`, then its pings (the end of the script's run), once the
    /// lock is let go.
    pub(super) fn release(&self, a: Release) -> Ending {
        let (lock, name) = match self.open_for_writing(&a.lock) {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        let lock = if a.force { lock } else { own_slot(&a, lock) };
        let exported = exported_token_for(lock.path()).is_some();
        let urls = if a.force {
            Ok(Vec::new())
        } else {
            ping::release_urls(&a.ping, a.ping_file.as_deref(), exported)
        };
        let mut pings = match urls.and_then(|u| Pings::new(&u, a.quiet, deadline_of(a.deadline))) {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let (code, token) = self.release_lock(&a, lock, &name);
        if let Some(t) = token {
            pings.for_run(&t);
            match a.exit {
                Some(n) => pings.end(&End::Exit(n)),
                None => pings.released_unknown(),
            }
        }
        code
    }

    /// Lets the lock go: the exit code, and the token of the run released.
    fn release_lock(&self, a: &Release, lock: LockFile, name: &str) -> (Ending, Option<String>) {
        let lock = match deadline_of(a.deadline) {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        if a.force {
            return (self.force_release(a, lock, name), None);
        }
        let releaser = releaser_for(a, &lock);
        // What is released, for the journal (read before: the file is gone
        // after), as carefully as any look at a lock path (a FIFO there is
        // never opened).
        let held = lock
            .inspect()
            .ok()
            .flatten()
            .and_then(|seen| seen.record.ok());
        // The run released, when it was: what its pings are about.
        let mut released = None;
        let code = match lock.release_as(&releaser) {
            Ok(Released::Removed) => {
                if let Some(r) = &held {
                    journal::released(&self.journal(&lock), r, a.exit, a.quiet);
                    released.clone_from(&r.token);
                }
                Ending::Done
            }
            Ok(Released::StillHeld { pid, others }) => {
                if let Some(r) = &held {
                    journal::released(&self.journal(&lock), r, a.exit, a.quiet);
                    released.clone_from(&r.token);
                    // The run goes on in its workers: its end is when the
                    // last of them exits, which a keeper records.
                    if let Some(t) = &r.token {
                        let end = RecordEnd {
                            state: self.state().path(),
                            exit: a.exit,
                        };
                        start_keeper(lock.path(), t, Some(&end));
                    }
                }
                if !a.quiet {
                    let more = match others {
                        0 => String::new(),
                        n => format!(" and {n} more"),
                    };
                    say(format_args!(
                        "`{name}` stays held by pid {pid}{more}, still working for the run \
                         (carrying its token): it is free once the last one exits"
                    ));
                }
                Ending::Done
            }
            Ok(Released::AlreadyFree) => {
                if !a.quiet {
                    say(format_args!("`{name}` was not held; nothing to release"));
                }
                Ending::Done
            }
            Err(Error::NotOwner { pid, held }) => {
                say(format_args!(
                    "refusing to release `{name}`: it is held by {}, not by pid {pid}; \
                     `onlyone release --force {}` removes it anyway",
                    held.describe(),
                    a.lock
                ));
                Ending::Failed
            }
            Err(e) => fail(e),
        };
        (code, released)
    }

    /// Removes the lock whoever holds it (`--force`), journaling the run
    /// it held: the exit code.
    fn force_release(&self, a: &Release, lock: LockFile, name: &str) -> Ending {
        match lock.force_release() {
            Ok(None) => {
                say(format_args!("`{name}` was not held"));
                Ending::Done
            }
            Ok(Some(seen)) => {
                if let Ok(r) = &seen.record {
                    journal::released(&self.journal(&lock), r, a.exit, a.quiet);
                }
                let state = match &seen.verdict {
                    Verdict::Held(_) => "held".to_owned(),
                    Verdict::Stale(r) => format!("stale: {r}"),
                    Verdict::Unknown(r) => format!("unknown: {r}"),
                };
                let whose = match &seen.record {
                    Ok(r) => format!("pid {} (`{}`)", r.pid, r.cmd.as_deref().unwrap_or("?")),
                    Err(_) => "no readable owner".to_owned(),
                };
                say(format_args!(
                    "removed `{name}`, which was {state}; it belonged to {whose}"
                ));
                Ending::Done
            }
            Err(e) => fail(e),
        }
    }
}

/// Who may release the lock: the pid given, else the calling shell,
/// onlyone itself, and a worker carrying the exported token.
fn releaser_for(a: &Release, lock: &LockFile) -> Releaser {
    match a.owner {
        Some(pid) => Releaser::new().owner(pid),
        // The calling shell, or onlyone itself when the shell exec'd it
        // (`bash -c '...; onlyone release L'`), or a script's worker
        // that carries the token `acquire --export` handed out.
        None => {
            let mut r = Releaser::new()
                .owner(parent_pid())
                .owner(std::process::id());
            if let Some(token) = exported_token_for(lock.path()) {
                r = r.token(token);
            }
            r
        }
    }
}

/// The slot of `lock` the releaser holds: the lock itself unless another
/// slot's record names the owner (`--owner`, else the calling shell or
/// this process) or carries the token exported for that slot.
fn own_slot(a: &Release, lock: LockFile) -> LockFile {
    let owners = match a.owner {
        Some(pid) => vec![pid],
        None => vec![parent_pid(), std::process::id()],
    };
    let ours = |slot: &LockFile| {
        let Ok(Some(seen)) = slot.inspect() else {
            return false;
        };
        // A file another account wrote may name the caller's shell: it
        // is that account's, never the caller's hold.
        let Ok(r) = &seen.record else { return false };
        r.is_ours()
            && (owners.contains(&r.pid)
                || exported_token_for(slot.path()).is_some_and(|t| r.token.as_deref() == Some(&t)))
    };
    if ours(&lock) {
        return lock;
    }
    lock.slot_numbers()
        .into_iter()
        .filter_map(|k| lock.slot(k).ok())
        .find(|slot| ours(slot))
        .unwrap_or(lock)
}

/// The token that `acquire --export` handed to this process's
/// environment, when `ONLYONE_LOCK` there names `path`.
fn exported_token_for(path: &Path) -> Option<String> {
    let lock = std::env::var_os(onlyone::supervise::LOCK_VAR)?;
    let token = std::env::var(onlyone::supervise::TOKEN_VAR).ok()?;
    let same = std::path::absolute(Path::new(&lock)).ok()? == path;
    same.then_some(token)
}
