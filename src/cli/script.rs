//! `acquire` and `release`, for shell scripts; `--export`'s assignments;
//! and the keeper that refreshes a script's lock in `/tmp`.

use std::path::{Path, PathBuf};

use onlyone::{AcquireOptions, Error, LockFile, Owner, Released, Releaser, Verdict};

use super::exit::{Code, Ending};
use super::ping::{self, End, Pings};
use super::{
    Ctx, args, deadline_of, fail, journal, parent_pid, print_stdout, report_takeover, say,
};

impl Ctx {
    pub(super) fn acquire(&self, a: args::Acquire) -> Code {
        let urls = ping::urls(&a.ping.urls, a.ping.file.as_deref());
        let mut pings =
            match urls.and_then(|u| Pings::new(&u, a.quiet, deadline_of(a.busy.deadline))) {
                Ok(p) => p,
                Err(e) => {
                    if a.export {
                        print_stdout(&format!("exit {}\n", Ending::Failed.number()));
                    }
                    return fail(e);
                }
            };
        let mut code = self.acquire_lock(&a);
        match &mut code {
            Ok(e) => {
                pings.start(&e.token);
                // What `release` pings: the URLs given here, and the file
                // by its path (its URLs stay out of the script's
                // environment, which its workers inherit).
                let given: Vec<&str> = a
                    .ping
                    .urls
                    .iter()
                    .map(String::as_str)
                    .filter(|u| !u.is_empty())
                    .collect();
                if !given.is_empty() {
                    e.pings = Some(given.join(" "));
                }
                e.ping_file = a
                    .ping
                    .file
                    .as_deref()
                    .and_then(|f| std::path::absolute(f).ok());
            }
            Err(_) => pings.refused(),
        }
        if a.export {
            // `eval "$(onlyone acquire NAME --export)"` must stop the script
            // when the lock was not taken: eval of nothing succeeds.
            let line = match &code {
                Ok(lock) => export_line(lock),
                Err(Code::Exit(n)) => format!("exit {n}\n"),
                Err(Code::Signal(n)) => format!("exit {}\n", 128 + n),
            };
            print_stdout(&line);
        }
        code.map_or_else(|c| c, |_| Ending::Done.code())
    }

    /// Takes the lock for the calling shell; on success returns what
    /// `--export` prints.
    fn acquire_lock(&self, a: &args::Acquire) -> Result<Exported, Code> {
        let deadline = deadline_of(a.busy.deadline);
        let (lock, name) = self.open_for_writing(&a.lock).map_err(fail)?;
        let owner = match a.owner {
            Some(pid) => pid,
            None => {
                let caller = Owner::calling_shell();
                // An orphan is adopted by pid 1: the calling shell is gone
                // (killed while onlyone started). init as the owner would
                // hold the lock forever.
                if caller == 1 {
                    return Err(fail(format_args!(
                        "not taking `{name}`: onlyone's parent is pid 1, so the shell that \
                         called it has exited; to make pid 1 the owner on purpose (a \
                         container's entry point), pass --owner 1"
                    )));
                }
                caller
            }
        };
        let mut opts = AcquireOptions::new()
            .owner(Owner::Pid(owner))
            .busy(a.busy.policy())
            .slots(a.slots.count());
        if a.export {
            opts = opts.mode(onlyone::Mode::Script);
        }
        if let Some(d) = deadline {
            opts = opts.deadline(d);
        }
        match lock.acquire(&opts) {
            Ok(g) => {
                if !a.quiet {
                    report_takeover(&name, &g);
                }
                journal::started(&self.journal(&lock), &g, a.quiet);
                let token = g.token().to_owned();
                // The slot's own file, as a run's command is told it.
                let path = g.lock().path().to_owned();
                let slot = g.record().slots.map(|_| g.slot());
                g.leave_to_owner();
                if lock.in_cleaned_dir() {
                    start_keeper(&path, &token, None);
                }
                Ok(Exported {
                    path,
                    slot,
                    token,
                    pings: None,
                    ping_file: None,
                })
            }
            // The owner holds it already (a second acquire in one script):
            // say so, not "another run", which would name the caller.
            Err(Error::Held(h)) if h.record.pid == owner && h.holder.pid() == owner => {
                if !a.quiet {
                    say(format_args!(
                        "`{name}` is already held by this shell (pid {owner}), which acquired \
                         it before{}; it holds it until it exits or runs `onlyone release {}`",
                        h.age()
                            .map(|t| format!(" ({} ago)", onlyone::text::compact_duration(t)))
                            .unwrap_or_default(),
                        a.lock
                    ));
                }
                Err(Ending::Skipped {
                    held_exit: a.busy.held_exit,
                }
                .code())
            }
            Err(e) => Err(self.refused(
                &lock,
                e,
                &name,
                a.quiet,
                Ending::Skipped {
                    held_exit: a.busy.held_exit,
                }
                .code(),
            )),
        }
    }

    /// `release`, then its pings (the end of the script's run), once the
    /// lock is let go.
    pub(super) fn release(&self, a: args::Release) -> Code {
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
    fn release_lock(
        &self,
        a: &args::Release,
        lock: LockFile,
        name: &str,
    ) -> (Code, Option<String>) {
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
                Ending::Done.code()
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
                Ending::Done.code()
            }
            Ok(Released::AlreadyFree) => {
                if !a.quiet {
                    say(format_args!("`{name}` was not held; nothing to release"));
                }
                Ending::Done.code()
            }
            Err(Error::NotOwner { pid, held }) => {
                say(format_args!(
                    "refusing to release `{name}`: it is held by {}, not by pid {pid}; \
                     `onlyone release --force {}` removes it anyway",
                    held.describe(),
                    a.lock
                ));
                Ending::Failed.code()
            }
            Err(e) => fail(e),
        };
        (code, released)
    }

    /// Removes the lock whoever holds it (`--force`), journaling the run
    /// it held: the exit code.
    fn force_release(&self, a: &args::Release, lock: LockFile, name: &str) -> Code {
        match lock.force_release() {
            Ok(None) => {
                say(format_args!("`{name}` was not held"));
                Ending::Done.code()
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
                Ending::Done.code()
            }
            Err(e) => fail(e),
        }
    }
}

/// Who may release the lock: the pid given, else the calling shell,
/// onlyone itself, and a worker carrying the exported token.
fn releaser_for(a: &args::Release, lock: &LockFile) -> Releaser {
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
fn own_slot(a: &args::Release, lock: LockFile) -> LockFile {
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

/// What a keeper records when the hold it keeps ends: the end of a
/// script's run that its workers carried on after `release`, in the
/// journal of this state directory.
struct RecordEnd<'a> {
    state: &'a Path,
    /// The code the script gave `release --exit`.
    exit: Option<u8>,
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
fn start_keeper(lock: &Path, token: &str, end: Option<&RecordEnd<'_>>) {
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
pub(super) fn keeper(ctx: &Ctx, a: args::Keeper) -> Code {
    let Ok(lock) = LockFile::open(&a.lock) else {
        return Ending::Failed.code();
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
        Ok(()) => Ending::Done.code(),
        Err(_) => Ending::Failed.code(),
    }
}

/// What `acquire --export` hands a script.
struct Exported {
    path: PathBuf,
    /// The slot taken, for a lock of several slots.
    slot: Option<u32>,
    token: String,
    /// The ping URLs, for `release` (`acquire --ping`).
    pings: Option<String>,
    /// The ping file, for `release` (`acquire --ping-file`).
    ping_file: Option<PathBuf>,
}

/// `ONLYONE_LOCK='...'; ONLYONE_TOKEN='...'; export ONLYONE_LOCK
/// ONLYONE_TOKEN`, each value quoted for sh; for a lock of several slots,
/// `ONLYONE_SLOT` too; with pings, the run id and the ping URLs for
/// `release` too.
fn export_line(e: &Exported) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut vars = vec![
        (
            onlyone::supervise::LOCK_VAR,
            sh_quote(e.path.as_os_str().as_bytes()),
        ),
        (onlyone::supervise::TOKEN_VAR, sh_quote(e.token.as_bytes())),
    ];
    if let Some(k) = e.slot {
        vars.push((onlyone::supervise::SLOT_VAR, k.to_string()));
    }
    // The line a script without pings gets stays what it was.
    if (e.pings.is_some() || e.ping_file.is_some())
        && let Some(rid) = onlyone::journal::run_id(&e.token)
    {
        vars.push((onlyone::supervise::RUN_ID_VAR, sh_quote(rid.as_bytes())));
    }
    if let Some(p) = &e.pings {
        vars.push((ping::RELEASE_VAR, sh_quote(p.as_bytes())));
    }
    if let Some(f) = &e.ping_file {
        vars.push((ping::RELEASE_FILE_VAR, sh_quote(f.as_os_str().as_bytes())));
    }
    let mut line = String::new();
    for (k, v) in &vars {
        line.push_str(&format!("{k}={v}; "));
    }
    let names: Vec<&str> = vars.iter().map(|(k, _)| *k).collect();
    line.push_str(&format!("export {}\n", names.join(" ")));
    line
}

/// Quotes bytes for a POSIX shell: inside single quotes everything is
/// literal but the single quote itself, written `'\''`. Bytes that are
/// not UTF-8 are kept as they are (the shell reads bytes).
fn sh_quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The token that `acquire --export` handed to this process's
/// environment, when `ONLYONE_LOCK` there names `path`.
fn exported_token_for(path: &Path) -> Option<String> {
    let lock = std::env::var_os(onlyone::supervise::LOCK_VAR)?;
    let token = std::env::var(onlyone::supervise::TOKEN_VAR).ok()?;
    let same = std::path::absolute(Path::new(&lock)).ok()? == path;
    same.then_some(token)
}
