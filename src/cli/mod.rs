//! The `onlyone` command: parses arguments, calls the library, prints, and
//! maps every outcome to an exit code in one place ([`exit`]).

mod args;
pub mod exit;
mod reap;
mod status;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use onlyone::names::{self, DirSource};
use onlyone::supervise::{self, EndedBy, Exit, RunOptions};
use onlyone::terminate::{self, Stopped};
use onlyone::{
    AcquireOptions, Error, HeldBy, LockFile, Owner, Released, Releaser, Verdict, compact_duration,
};

use args::{Cli, Command};
use exit::Code;

/// Runs the command line and returns how to exit.
pub fn main() -> Code {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let fails_open = subcommand(&argv).filter(|c| *c == "precheck" || *c == "reap");
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            usage_hints(&argv, &e);
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    Code::Exit(0)
                }
                // A precheck fails open, and a reap always exits 0, even on
                // a usage error.
                _ if fails_open.is_some() => {
                    say(format_args!(
                        "{}: exiting 0 all the same (fail open: it never blocks a fire)",
                        fails_open.unwrap_or_default()
                    ));
                    Code::Exit(0)
                }
                _ => Code::Exit(exit::FAILURE),
            };
        }
    };
    let ctx = Ctx::new(&cli);
    match cli.command {
        Command::Run(a) => ctx.run(a),
        Command::Acquire(a) => ctx.acquire(a),
        Command::Release(a) => ctx.release(a),
        Command::Precheck(a) => ctx.precheck(a),
        Command::Status(a) => status::status(&ctx, a),
        Command::Stop(a) => ctx.stop(a),
        Command::Reap(a) => reap::reap(&ctx, a),
        Command::Keeper(a) => keeper(a),
    }
}

/// What clap cannot know: `run LOCK COMMAND` without `--`, and
/// `acquire --export`'s promise to print `exit N` on any failure.
fn usage_hints(argv: &[OsString], e: &clap::Error) {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let sub = subcommand(argv);
    if sub == Some("acquire") && argv.iter().any(|a| a == "--export") {
        print_stdout(&format!("exit {}\n", exit::FAILURE));
    }
    if sub != Some("run")
        || e.kind() != ErrorKind::UnknownArgument
        || argv.iter().any(|a| a == "--")
    {
        return;
    }
    let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidArg) else {
        return;
    };
    // The command starts at the first word clap did not take.
    let Some(at) = argv.iter().skip(1).position(|a| a == bad.as_str()) else {
        return;
    };
    let mut fixed: Vec<OsString> = vec!["onlyone".into()];
    fixed.extend(argv[1..=at].iter().cloned());
    fixed.push("--".into());
    fixed.extend(argv[at + 1..].iter().cloned());
    say(format_args!(
        "the command goes after `--`: {}",
        onlyone::text::display_command(&fixed)
    ));
}

/// The subcommand: the first argument that is not an option or an option's
/// value.
fn subcommand(argv: &[OsString]) -> Option<&str> {
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--dir") => {
                it.next();
            }
            Some(s) if s.starts_with('-') => {}
            Some(s) => return Some(s),
            None => return None,
        }
    }
    None
}

/// What every command shares: the lock directory and where it came from.
#[derive(Clone)]
pub struct Ctx {
    dir: PathBuf,
    source: DirSource,
    /// `--allow-shared-fs`: write even on a network or FUSE filesystem.
    allow_shared_fs: bool,
}

/// Prints a message on stderr. A closed stderr must not change the exit
/// code (a precheck must still answer 0 or 75), so write errors are
/// ignored rather than panicking as `eprintln!` would.
fn say(msg: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "onlyone: {msg}");
}

fn deadline_of(d: Option<Duration>) -> Option<Instant> {
    d.map(|d| Instant::now() + d)
}

impl Ctx {
    fn new(cli: &Cli) -> Ctx {
        let (dir, source) = names::lock_dir(cli.dir.as_deref());
        Ctx {
            dir,
            source,
            allow_shared_fs: cli.allow_shared_fs,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// True when the lock directory exists (the reaper keeps its state
    /// there).
    fn state_dir_exists(&self) -> bool {
        self.dir.is_dir()
    }

    /// Resolves LOCK for a command that writes: the directory is created
    /// when it is ours to create.
    fn open_for_writing(&self, lock: &str) -> Result<(LockFile, String), Error> {
        let path = names::lock_path(lock, &self.dir)?;
        if path.parent() == Some(self.dir.as_path()) {
            names::ensure_dir(&self.dir, self.source)?;
        }
        let name = names::display_name(&path, &self.dir);
        let lock = LockFile::open(&path)?;
        let lock = if self.allow_shared_fs {
            lock.allow_shared_fs()
        } else {
            lock
        };
        Ok((lock, name))
    }

    /// Resolves LOCK for a command that only reads.
    pub fn open_for_reading(&self, lock: &str) -> Result<(LockFile, String), Error> {
        let path = names::lock_path(lock, &self.dir)?;
        let name = names::display_name(&path, &self.dir);
        Ok((LockFile::open(&path)?, name))
    }

    fn run(&self, a: args::Run) -> Code {
        let deadline = deadline_of(a.deadline);
        let (lock, name) = match self.open_for_writing(&a.lock) {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        let lock = match deadline {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        let mut opts = AcquireOptions::new()
            .run_mode()
            .command(onlyone::text::display_command(&a.command));
        if let Some(w) = a.wait {
            opts = opts.wait(w);
        }
        if let Some(d) = deadline {
            opts = opts.deadline(d);
        }
        let held_exit = Code::Exit(a.held_exit);
        let mut guard = match lock.acquire(&opts) {
            Ok(g) => g,
            Err(Error::Held(h)) | Err(Error::Timeout { held: h, .. }) if a.replace => {
                if !a.quiet {
                    say(format_args!(
                        "replacing the run of `{name}`: stopping {}",
                        h.describe()
                    ));
                }
                if let Err(e) =
                    terminate::stop(&lock, rustix::process::Signal::TERM, a.kill_after, deadline)
                {
                    return fail(e);
                }
                let again = opts.clone().wait(a.kill_after + Duration::from_secs(5));
                match lock.acquire(&again) {
                    Ok(g) => g,
                    Err(e) => return self.refused(e, &name, a.quiet, held_exit),
                }
            }
            Err(e) => return self.refused(e, &name, a.quiet, held_exit),
        };
        if !a.quiet {
            report_takeover(&name, &guard);
        }
        let run_opts = RunOptions {
            max_time: a.max_time,
            kill_after: a.kill_after,
            keep_strays: a.keep_strays,
            linger: a.linger,
            idle_timeout: a.idle_timeout,
        };
        let outcome = supervise::run(&mut guard, &a.command, &run_opts);
        if let Ok(o) = &outcome
            && o.lingers
        {
            // The work goes on in processes that outlive the command: they
            // keep the lock held (they carry its token), and the reaper,
            // told what they are doing now, ends them once idle. The record
            // stays even when none is seen yet (a terminal server may exec
            // the work a moment after the command returned): with no
            // process of the run left, it is stale and the next fire takes
            // it over.
            if !o.kept.is_empty() {
                let procs: Vec<(u32, u64)> = o.kept.iter().map(|t| (t.pid, t.start)).collect();
                if let Err(e) = guard.set_lingering(&procs) {
                    say(format_args!(
                        "could not name the lingering processes in the lock file ({e}); those \
                         without the run's token are not seen once onlyone exits"
                    ));
                }
                let noted =
                    self.state_dir_exists() && onlyone::reap::note_lingering(&self.dir, &o.kept);
                if !a.quiet {
                    say(format_args!(
                        "the run of `{name}` lingers in {}: the lock stays held until they \
                         exit, or `onlyone reap {}` ends them once idle{}",
                        pid_list(&o.kept),
                        a.lock,
                        if noted {
                            ""
                        } else {
                            " (the reaper's state could not be written: it needs a second look)"
                        }
                    ));
                }
            }
            guard.leave_to_owner();
            return match o.exit {
                Exit::Code(c) => Code::Exit(c.clamp(0, 255) as u8),
                Exit::Signal(s) => Code::Signal(s),
            };
        }
        if let Ok(o) = &outcome
            && !o.strays.survivors.is_empty()
        {
            // Processes of the run outlived TERM and KILL: the run is not
            // over, so the lock stays held (they carry its token) and the
            // next run waits for them.
            say(format_args!(
                "leftover process(es) of the run of `{name}` would not die ({}); the lock \
                 stays held until they exit",
                pids(&o.strays.survivors)
            ));
            guard.leave_to_owner();
            return Code::Exit(exit::FAILURE);
        }
        let released = guard.release();
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                say(&e);
                return Code::Exit(e.exit_code());
            }
        };
        if let Err(e) = released {
            say(format_args!("the run ended, but releasing failed: {e}"));
        }
        if !outcome.strays.signalled.is_empty() || !outcome.strays.killed.is_empty() {
            say(format_args!(
                "ended {} leftover process(es) of the run of `{name}`: {}",
                outcome
                    .strays
                    .signalled
                    .len()
                    .max(outcome.strays.killed.len()),
                pids(&outcome.strays.signalled)
            ));
        }
        match outcome.ended_by {
            Some(EndedBy::MaxTime(t)) => {
                say(format_args!(
                    "the run of `{name}` reached --max-time {}; it was ended",
                    compact_duration(t)
                ));
                return Code::Exit(exit::ENDED);
            }
            Some(EndedBy::Idle(t)) => {
                say(format_args!(
                    "the run of `{name}` was idle for {} (no CPU time, no byte read or \
                     written by any of its processes); it was ended",
                    compact_duration(t)
                ));
                return Code::Exit(exit::ENDED);
            }
            None => {}
        }
        match outcome.exit {
            Exit::Code(c) => Code::Exit(c.clamp(0, 255) as u8),
            Exit::Signal(s) => Code::Signal(s),
        }
    }

    /// Maps a failed acquire to a message and a code: held (or a wait that
    /// ran out while held) is the skip code; anything else is a failure.
    fn refused(&self, e: Error, name: &str, quiet: bool, held: Code) -> Code {
        match &e {
            Error::Held(h) | Error::Timeout { held: h, .. } => {
                if !quiet {
                    let waited = match &e {
                        Error::Timeout { waited, .. } => {
                            format!(" (waited {})", compact_duration(*waited))
                        }
                        _ => String::new(),
                    };
                    say(format_args!("{}{waited}", held_message(name, h)));
                }
                held
            }
            _ => fail(e),
        }
    }

    fn acquire(&self, a: args::Acquire) -> Code {
        let code = self.acquire_lock(&a);
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
        code.map_or_else(|c| c, |_| Code::Exit(0))
    }

    /// Takes the lock for the calling shell; on success returns what
    /// `--export` prints.
    fn acquire_lock(&self, a: &args::Acquire) -> Result<Exported, Code> {
        let deadline = deadline_of(a.deadline);
        let (lock, name) = self.open_for_writing(&a.lock).map_err(fail)?;
        let owner = match a.owner {
            Some(pid) => pid,
            None => {
                let caller = if a.export {
                    substitution_caller()
                } else {
                    parent_pid()
                };
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
        let mut opts = AcquireOptions::new().owner(Owner::Pid(owner));
        if a.export {
            opts = opts.mode(onlyone::Mode::Script);
        }
        if let Some(w) = a.wait {
            opts = opts.wait(w);
        }
        if let Some(d) = deadline {
            opts = opts.deadline(d);
        }
        match lock.acquire(&opts) {
            Ok(g) => {
                if !a.quiet {
                    report_takeover(&name, &g);
                }
                let token = g.token().to_owned();
                g.leave_to_owner();
                if lock.in_cleaned_dir() {
                    start_keeper(lock.path(), &token, owner);
                }
                Ok(Exported {
                    path: lock.path().to_owned(),
                    token,
                })
            }
            Err(e) => Err(self.refused(e, &name, a.quiet, Code::Exit(a.held_exit))),
        }
    }

    fn release(&self, a: args::Release) -> Code {
        let (lock, name) = match self.open_for_writing(&a.lock) {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        let lock = match deadline_of(a.deadline) {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        if a.force {
            return match lock.force_release() {
                Ok(None) => {
                    say(format_args!("`{name}` was not held"));
                    Code::Exit(0)
                }
                Ok(Some(seen)) => {
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
                    Code::Exit(0)
                }
                Err(e) => fail(e),
            };
        }
        let releaser = match a.owner {
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
        };
        match lock.release_as(&releaser) {
            Ok(Released::Removed) => Code::Exit(0),
            Ok(Released::AlreadyFree) => {
                if !a.quiet {
                    say(format_args!("`{name}` was not held; nothing to release"));
                }
                Code::Exit(0)
            }
            Err(Error::NotOwner { pid, held }) => {
                say(format_args!(
                    "refusing to release `{name}`: it is held by {}, not by pid {pid}; \
                     `onlyone release --force {}` removes it anyway",
                    held.describe(),
                    a.lock
                ));
                Code::Exit(exit::FAILURE)
            }
            Err(e) => fail(e),
        }
    }

    fn precheck(&self, a: args::Precheck) -> Code {
        let deadline = deadline_of(a.deadline);
        let lock_arg = a.lock.clone();
        let ctx = self.clone();
        let quiet = a.quiet;
        // Every call is bounded: the verdict runs on a worker, and a
        // precheck that cannot finish in time lets the fire run.
        let verdict = within(deadline, move || {
            let (lock, name) = ctx.open_for_reading(&lock_arg)?;
            let seen = lock.inspect()?;
            // Clearing is a courtesy: it must not hold the answer up when
            // another process holds the removal guard.
            let cleaned = match &seen {
                Some(s) if matches!(s.verdict, Verdict::Stale(_)) => lock
                    .clone()
                    .with_deadline(Instant::now() + Duration::from_millis(100))
                    .reclaim_if_stale()
                    .ok()
                    .flatten(),
                _ => None,
            };
            Ok::<_, Error>((lock, name, seen, cleaned))
        });
        match verdict {
            None => {
                say("precheck: the deadline ran out; letting the fire run (fail open)");
                Code::Exit(0)
            }
            // No lock directory (`/run` is emptied at boot): no lock.
            Some(Err(Error::MissingDir { .. })) => Code::Exit(0),
            Some(Err(e)) => {
                say(format_args!(
                    "precheck: {e}; letting the fire run (fail open)"
                ));
                Code::Exit(0)
            }
            Some(Ok((lock, name, seen, cleaned))) => match seen {
                None => Code::Exit(0),
                Some(s) => match (&s.verdict, s.held_by(lock.path())) {
                    (Verdict::Held(_), Some(h)) => {
                        if !quiet {
                            say(held_message(&name, &h));
                        }
                        Code::Exit(exit::HELD)
                    }
                    (Verdict::Held(_), None) => Code::Exit(exit::HELD),
                    (Verdict::Stale(r), _) => {
                        if cleaned.is_some() {
                            say(format_args!(
                                "precheck: cleared the stale lock `{name}`: {r}"
                            ));
                        }
                        Code::Exit(0)
                    }
                    (Verdict::Unknown(r), _) => {
                        say(format_args!(
                            "precheck: `{name}` cannot be judged ({r}); letting the fire run \
                             (fail open)"
                        ));
                        Code::Exit(0)
                    }
                },
            },
        }
    }

    fn stop(&self, a: args::Stop) -> Code {
        let deadline = deadline_of(a.deadline);
        let (lock, name) = match self.open_for_writing(&a.lock) {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        let lock = match deadline {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        match terminate::stop(&lock, a.signal.0, a.kill_after, deadline) {
            Ok(Stopped::NotRunning) => {
                say(format_args!("`{name}` is not running; nothing to stop"));
                Code::Exit(0)
            }
            Ok(Stopped::WasStale { reason }) => {
                say(format_args!(
                    "`{name}` was not running ({reason}); cleared its stale lock"
                ));
                Code::Exit(0)
            }
            Ok(Stopped::Ended {
                record,
                ended,
                took,
            }) => {
                let killed = if ended.killed.is_empty() {
                    String::new()
                } else {
                    format!("; KILL was needed for {}", pids(&ended.killed))
                };
                say(format_args!(
                    "stopped the run of `{name}` (pid {}, `{}`) in {}: {} to {}{killed}",
                    record.pid,
                    record.cmd.as_deref().unwrap_or("?"),
                    compact_duration(took),
                    a.signal,
                    pids(&ended.signalled),
                ));
                Code::Exit(0)
            }
            Err(e) => fail(e),
        }
    }
}

/// "another run of `sync` is active as pid 4242 (`./sync.sh --all`, for
/// 3m12s); wait for it (--wait) or stop it (onlyone stop sync)"
pub fn held_message(name: &str, h: &HeldBy) -> String {
    let what = match &h.holder {
        onlyone::Holder::Member { .. } | onlyone::Holder::Command { .. } => {
            format!("a run of `{name}` is still active: {}", h.describe())
        }
        _ => format!("another run of `{name}` is active as {}", h.describe()),
    };
    let stop_arg = if name.contains('/') {
        format!("'{name}'")
    } else {
        name.to_owned()
    };
    format!("{what}; wait for it (--wait) or stop it (onlyone stop {stop_arg})")
}

/// Says so when an acquisition took over a stale lock: a previous holder
/// crashed or was killed, which an operator wants to know.
fn report_takeover(name: &str, guard: &onlyone::LockGuard) {
    if let Some(t) = guard.took_over() {
        let from = t
            .record
            .as_ref()
            .map(|r| format!(" from pid {}", r.pid))
            .unwrap_or_default();
        say(format_args!(
            "took over the stale lock `{name}`{from}: {}",
            t.reason
        ));
    }
}

fn pid_list(t: &[onlyone::terminate::Target]) -> String {
    let p: Vec<u32> = t.iter().map(|t| t.pid).collect();
    pids(&p)
}

fn pids(p: &[u32]) -> String {
    let list: Vec<String> = p.iter().map(|p| format!("pid {p}")).collect();
    if list.is_empty() {
        "no process".into()
    } else {
        list.join(", ")
    }
}

fn fail(e: impl std::fmt::Display) -> Code {
    say(e);
    Code::Exit(exit::FAILURE)
}

/// Starts `onlyone keeper` for a lock that `acquire` left to a script in a
/// directory that age-based cleaners empty: it refreshes the lock file's
/// times while the lock is held (no other process of onlyone's lives to),
/// and exits once it is released, taken over or stale. It runs in a process
/// group of its own (the script's group must not count it), with nothing
/// of the script's output (a command substitution waits for its pipe to
/// close) and without the run's token (it is not the run).
fn start_keeper(lock: &Path, token: &str, owner: u32) {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let spawned = std::process::Command::new(exe)
        .arg("keeper")
        .arg("--token")
        .arg(token)
        .arg("--owner")
        .arg(owner.to_string())
        .arg("--")
        .arg(lock)
        .env_remove(onlyone::procfs::LOCK_VAR)
        .env_remove(onlyone::procfs::TOKEN_VAR)
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

/// `onlyone keeper`: keeps a lock fresh while it is held.
fn keeper(a: args::Keeper) -> Code {
    match LockFile::open(&a.lock).and_then(|l| l.keep_fresh(&a.token, a.owner)) {
        Ok(()) => Code::Exit(0),
        Err(_) => Code::Exit(exit::FAILURE),
    }
}

/// What `acquire --export` hands a script.
struct Exported {
    path: PathBuf,
    token: String,
}

/// `ONLYONE_LOCK='...'; ONLYONE_TOKEN='...'; export ONLYONE_LOCK
/// ONLYONE_TOKEN`, each value quoted for sh.
fn export_line(e: &Exported) -> String {
    use std::os::unix::ffi::OsStrExt;
    format!(
        "{lock}={}; {token}={}; export {lock} {token}\n",
        sh_quote(e.path.as_os_str().as_bytes()),
        sh_quote(e.token.as_bytes()),
        lock = onlyone::procfs::LOCK_VAR,
        token = onlyone::procfs::TOKEN_VAR,
    )
}

/// Quotes bytes for a POSIX shell: inside single quotes everything is
/// literal but the single quote itself, written `'\''`. Bytes that are
/// not UTF-8 are kept as they are (the shell reads bytes).
fn sh_quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Writes to stdout; a closed stdout must not change the exit code.
fn print_stdout(s: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes()).and_then(|()| out.flush());
}

/// The token that `acquire --export` handed to this process's
/// environment, when `ONLYONE_LOCK` there names `path`.
fn exported_token_for(path: &Path) -> Option<String> {
    let lock = std::env::var_os(onlyone::procfs::LOCK_VAR)?;
    let token = std::env::var(onlyone::procfs::TOKEN_VAR).ok()?;
    let same = std::path::absolute(Path::new(&lock)).ok()? == path;
    same.then_some(token)
}

/// The calling shell: onlyone's parent.
fn parent_pid() -> u32 {
    rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get() as u32)
}

/// The shell that called onlyone from a command substitution
/// (`vars=$(onlyone acquire L --export)`): most shells exec onlyone in the
/// substitution's child, so the caller is the parent, but bash forks a
/// subshell for `$(onlyone ... 2>/dev/null)`, and that subshell exits as
/// soon as onlyone does: it must not own the lock. The caller is the
/// nearest ancestor that reads the pipe onlyone writes to; every process
/// between is a subshell writing to the same pipe. Anything else: the
/// parent.
fn substitution_caller() -> u32 {
    use onlyone::procfs;
    let parent = parent_pid();
    let me = std::process::id();
    let Some(pipe) = procfs::pipe_of(me, 1) else {
        return parent;
    };
    let mut pid = parent;
    for _ in 0..8 {
        if procfs::reads_pipe(pid, pipe) {
            return pid;
        }
        // Not the reader: a subshell in between writes to the same pipe.
        if procfs::pipe_of(pid, 1) != Some(pipe) {
            break;
        }
        match procfs::read_stat(pid) {
            Ok(Some(st)) if st.ppid > 1 => pid = st.ppid,
            _ => break,
        }
    }
    parent
}

/// Runs `f` on a worker thread and waits for it until `deadline`; `None`
/// when the deadline passes first (the worker is abandoned; the process is
/// about to exit).
pub fn within<T: Send + 'static>(
    deadline: Option<Instant>,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let Some(deadline) = deadline else {
        return Some(f());
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .ok()
}
