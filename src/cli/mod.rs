//! The `onlyone` command: parses arguments, calls the library, prints, and
//! maps every outcome to an exit code in one place ([`exit`]).

mod args;
mod docs;
mod duration;
pub mod exit;
mod format;
mod history;
mod journal;
mod monitor;
mod ping;
mod place;
mod plan;
mod reap;
mod run;
mod schedule;
mod schedule_args;
mod script;
mod status;
mod store;
mod tail;
mod view;

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use onlyone::journal::Journal;
use onlyone::names::{self, DirSource};
use onlyone::signal::GracefulStop;
use onlyone::state::StateDir;
use onlyone::stop::{self, Stopped};
use onlyone::{Error, HeldBy, Inspection, LockFile, StaleReason, Verdict, compact_duration};

use args::{Cli, Command};
use exit::{Code, Ending};

/// Runs the command line `argv` (the program's name first) and returns how
/// to exit.
pub fn main(argv: Vec<OsString>) -> Code {
    let (typed, cli) = match args::parse(&argv) {
        Ok(x) => x,
        Err(e) => {
            let _ = e.print();
            usage_hints(&argv, &e);
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    Ending::Done.code()
                }
                _ => plan::usage_failure(&argv),
            };
        }
    };
    if let Some(msg) = plan::ignored_options(&typed, &cli) {
        say(msg);
        return plan::usage_failure(&argv);
    }
    let ctx = Ctx::new(&cli);
    if let Some(refused) = plan::refuse_untrusted_dir(&ctx, &cli.command) {
        return refused;
    }
    let place = place_of(&ctx);
    let place = place.as_ref();
    if let Some(refused) = plan::refused_by_place(place.kind(), &cli.command) {
        return refused;
    }
    match cli.command {
        Command::Run(a) => schedule::run(&ctx, place, a.0),
        Command::Acquire(a) => ctx.acquire(a.0),
        Command::Release(a) => ctx.release(a.0),
        Command::Precheck(a) => schedule::precheck(&ctx, place, &a),
        Command::Status(a) => status::status(place, a.0),
        Command::Stop(a) => place::stop(place, &a),
        Command::Reap(a) => reap::reap(&ctx, a.0),
        Command::History(a) => history::history(place, a.0),
        Command::Check(a) => monitor::check(place, a.0),
        Command::Metrics(a) => monitor::metrics(place, a.0),
        Command::Keeper(a) => script::keeper(&ctx, a.0),
        Command::Completions(a) => docs::completions(&a),
        Command::Manpages(a) => docs::manpages(&a),
        Command::LeaseWatchdog(a) => store::watchdog(&a),
    }
}

/// The place the command line names: the store with `--store URL`, else
/// the lock directory.
fn place_of(ctx: &Ctx) -> Box<dyn place::Place + '_> {
    match ctx.store.as_deref() {
        Some(url) => Box::new(store::StorePlace::new(url)),
        None => Box::new(ctx.clone()),
    }
}

/// What clap cannot know: `run LOCK COMMAND` without `--`, and
/// `acquire --export`'s promise to print `exit N` on any failure.
fn usage_hints(argv: &[OsString], e: &clap::Error) {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let sub = subcommand(argv);
    if sub == Some("acquire") && argv.iter().any(|a| a == "--export") {
        print_stdout(&format!("exit {}\n", Ending::Failed.number()));
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
            // The global options that take a value.
            Some("--dir" | "--store" | "--state-dir") => {
                it.next();
            }
            Some(s) if s.starts_with('-') => {}
            Some(s) => return Some(s),
            None => return None,
        }
    }
    None
}

/// What every command shares: the lock directory and where it came from,
/// and the state directory that keeps the journals.
#[derive(Clone)]
pub struct Ctx {
    dir: PathBuf,
    source: DirSource,
    /// Resolved once: every journal of the command is there.
    state: StateDir,
    /// `--allow-shared-fs`: write even on a network or FUSE filesystem.
    allow_shared_fs: bool,
    /// `--store URL`: the PostgreSQL store.
    store: Option<String>,
}

/// How long a precheck may wait for the removal guard to clear a stale
/// lock: a courtesy that must not hold the answer up.
const PRECHECK_CLEARING: Duration = Duration::from_millis(100);

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
        let g = &cli.globals;
        let (dir, source) = names::lock_dir(g.dir.as_deref());
        Ctx {
            dir,
            source,
            state: StateDir::resolve(g.state_dir.as_deref()),
            allow_shared_fs: g.allow_shared_fs,
            store: g.store.clone().filter(|s| !s.is_empty()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The journal of `lock`, in the state directory. An earlier
    /// version's journal beside the lock that a read sets aside is said
    /// on stderr, once per read.
    pub fn journal(&self, lock: &LockFile) -> Journal {
        Journal::of(lock, &self.state).on_set_aside(|s| say(s))
    }

    /// The journal of the lock file `path`, found even when neither it nor
    /// its directory exists (`/run` after a reboot).
    pub fn journal_at(&self, path: &Path) -> Journal {
        Journal::at(path, &self.state).on_set_aside(|s| say(s))
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
        let lock = self.open_checked(&path)?;
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
        Ok((self.open_checked(&path)?, name))
    }

    /// The journal of LOCK for a command that only reads it, the lock's
    /// name, and the lock when its directory exists: found by name or path
    /// even when neither the lock file nor its directory exists (`/run` is
    /// emptied at boot).
    fn journal_for_reading(
        &self,
        lock: &str,
    ) -> Result<(Journal, String, Option<LockFile>), String> {
        match self.open_for_reading(lock) {
            Ok((l, name)) => Ok((self.journal(&l), name, Some(l))),
            Err(Error::MissingDir { .. }) => {
                let path = names::lock_path(lock, &self.dir).map_err(|e| e.to_string())?;
                let name = names::display_name(&path, &self.dir);
                Ok((self.journal_at(&path), name, None))
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Every lock of the lock directory: its lock files, and the locks
    /// that have a journal there (an earlier version's) or in the state
    /// directory, so that a job shows after a reboot before its next run;
    /// and which of them have a journal (`None`: any may).
    fn listing(&self) -> Result<(Vec<String>, Option<HashSet<String>>), String> {
        let (mut locks, mut journals) = view::lock_listing(&self.dir).map_err(|e| {
            format!(
                "cannot list the lock directory `{}`: {e}",
                self.dir.display()
            )
        })?;
        // A state directory that cannot be listed says why when each
        // lock's journal is read.
        let Ok(in_state) = self.state.locks_in(&self.dir) else {
            return Ok((locks, None));
        };
        for p in in_state {
            let p = p.display().to_string();
            journals.insert(p.clone());
            locks.push(p);
        }
        locks.sort();
        locks.dedup();
        Ok((locks, Some(journals)))
    }

    /// Opens a lock; in the default directory, checks the directory it
    /// holds open as well as the one [`Ctx::refuse_untrusted_dir`] looked
    /// at by path.
    fn open_checked(&self, path: &Path) -> Result<LockFile, Error> {
        let lock = LockFile::open(path)?;
        if self.source == DirSource::Default && path.parent() == Some(self.dir.as_path()) {
            names::check_default_dir_held(&lock)?;
        }
        Ok(lock)
    }

    /// Maps a failed acquire to a message and a code: held (or a wait that
    /// ran out while held) is the skip code; anything else is a failure.
    fn refused(&self, lock: &LockFile, e: Error, name: &str, quiet: bool, held: Code) -> Code {
        match &e {
            Error::Queued { held: h, waiter } => {
                journal::skipped_because(&self.journal(lock), h, Some(QUEUED), quiet);
                let msg = queued_message(name, &waiter.describe(), &h.describe());
                ping::note_skip(msg.clone());
                if !quiet {
                    say(format_args!("{msg}"));
                }
                held
            }
            Error::Held(h) | Error::Timeout { held: h, .. } => {
                journal::skipped(&self.journal(lock), h, quiet);
                let msg = held_message(name, h, None);
                ping::note_skip(msg.clone());
                if !quiet {
                    let waited = match &e {
                        Error::Timeout { waited, .. } => {
                            format!(" (waited {})", compact_duration(*waited))
                        }
                        _ => String::new(),
                    };
                    say(format_args!("{msg}{waited}"));
                }
                held
            }
            _ => fail(e),
        }
    }

    /// What a precheck finds in the lock directory.
    fn precheck_found(
        &self,
        lock_arg: &str,
        deadline: Option<Instant>,
    ) -> Result<(String, place::Found), String> {
        use place::Found;
        let (lock, name, seen, cleaned) = match self.precheck_look(lock_arg, deadline) {
            Ok(x) => x,
            // No lock directory (`/run` is emptied at boot): no lock.
            Err(Error::MissingDir { .. }) => return Ok((lock_arg.to_owned(), Found::Free(None))),
            Err(e) => return Err(e.to_string()),
        };
        let Some(s) = seen else {
            return Ok((name, Found::Free(None)));
        };
        let found = match (&s.verdict, s.held_by(lock.path())) {
            (Verdict::Held(_), held) => {
                // Best effort and silent: precheck answers 0 or 75.
                Found::Held(held.map(|h| {
                    journal::skipped(&self.journal(&lock), &h, true);
                    held_message(&name, &h, deadline)
                }))
            }
            (Verdict::Stale(r), _) => {
                if let (Some(reason), Ok(old)) = (&cleaned, &s.record) {
                    journal::abandoned(&self.journal(&lock), old, reason, true);
                }
                Found::Free(cleaned.is_some().then(|| r.to_string()))
            }
            (Verdict::Unknown(r), _) => Found::Unknown(r.to_string()),
        };
        Ok((name, found))
    }

    /// The lock a precheck asks about, its verdict, and whether a stale one
    /// was cleared: every call bounded by `deadline` (a search of `/proc`
    /// that runs out makes the verdict unknown, so the fire runs).
    fn precheck_look(
        &self,
        lock_arg: &str,
        deadline: Option<Instant>,
    ) -> Result<(LockFile, String, Option<Inspection>, Option<StaleReason>), Error> {
        let (lock, name) = self.open_for_reading(lock_arg)?;
        let lock = match deadline {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        let seen = lock.inspect()?;
        // Clearing is a courtesy: it must not hold the answer up when
        // another process holds the removal guard.
        let courtesy = Instant::now() + PRECHECK_CLEARING;
        let cleaned = match &seen {
            Some(s) if matches!(s.verdict, Verdict::Stale(_)) => lock
                .clone()
                .with_deadline(deadline.map_or(courtesy, |d| d.min(courtesy)))
                .reclaim_if_stale()
                .ok()
                .flatten(),
            _ => None,
        };
        Ok((lock, name, seen, cleaned))
    }

    fn stop_run(&self, a: &args::Stop) -> Result<(String, place::Stopped), String> {
        use place::Stopped as Done;
        let deadline = deadline_of(a.deadline);
        let (lock, name) = self.open_for_writing(&a.lock).map_err(|e| e.to_string())?;
        let lock = match deadline {
            Some(d) => lock.with_deadline(d),
            None => lock,
        };
        let how = GracefulStop {
            signal: a.signal.0,
            grace: a.kill_after,
        };
        // Held only by what is not the run's own work: nothing to signal.
        if let Some(keepers) = keepers_now(&lock, deadline) {
            let why = outside_message(&name, &keepers, false);
            return Ok((name, Done::KeptOutside(why)));
        }
        let stopped = match stop::stop(&lock, how, deadline) {
            Err(Error::Timeout { held, waited }) => {
                let keepers = view::keepers_of(&held.record, &held.holder, deadline);
                if keepers.is_empty() {
                    return Err(Error::Timeout { waited, held }.to_string());
                }
                return Ok((
                    name.clone(),
                    Done::KeptOutside(outside_message(&name, &keepers, true)),
                ));
            }
            other => other.map_err(|e| e.to_string())?,
        };
        let done = match stopped {
            Stopped::NotRunning => Done::NotRunning,
            Stopped::WasStale { reason } => Done::WasStale(reason.to_string()),
            Stopped::Ended {
                record,
                ended,
                took,
            } => {
                journal::stopped(
                    &self.journal(&lock),
                    &record,
                    Some(&a.signal.to_string()),
                    false,
                );
                let killed = if ended.killed.is_empty() {
                    String::new()
                } else {
                    format!("; KILL was needed for {}", pids(&ended.killed))
                };
                Done::Ended {
                    who: format!(
                        "pid {}, `{}`",
                        record.pid,
                        record.cmd.as_deref().unwrap_or("?")
                    ),
                    took,
                    how: format!(": {} to {}{killed}", a.signal, pids(&ended.signalled)),
                }
            }
            // A kind of outcome this onlyone does not know: the run is not
            // held any more.
            _ => Done::NotRunning,
        };
        Ok((name, done))
    }
}

/// What keeps `lock` held now when nothing of its run's own work lives
/// (see [`view::keepers_of`]); `None` when it is free, stale, unknown, or
/// its run's work holds it.
fn keepers_now(lock: &LockFile, deadline: Option<Instant>) -> Option<Vec<onlyone::reap::Keeper>> {
    let seen = lock.inspect().ok()??;
    let (Verdict::Held(h), Ok(r)) = (&seen.verdict, &seen.record) else {
        return None;
    };
    let keepers = view::keepers_of(r, h, deadline);
    (!keepers.is_empty()).then_some(keepers)
}

/// What `stop` says of a lock that `keepers`, outside its run's own work,
/// hold (`after`: once it ended what was left of that work).
fn outside_message(name: &str, keepers: &[onlyone::reap::Keeper], after: bool) -> String {
    let first = if after {
        format!("ended what was left of the run's own work of `{name}`, but the lock is still held")
    } else {
        format!("`{name}` is held, though nothing of its run's own work lives; nothing to stop")
    };
    format!(
        "{first}: by {}; {}",
        view::keepers_words(keepers),
        view::keepers_remedy(keepers)
    )
}

/// "another run of `sync` is active as pid 4242 (`./sync.sh --all`, for
/// 3m12s); wait for it (--wait) or stop it (onlyone stop sync)"
/// Why a fire that asked for the queue was skipped, as its journal says.
pub const QUEUED: &str = "one already queued";

/// What a fire that asked for the queue says when another already waits:
/// the waiter, then the holder.
pub fn queued_message(name: &str, waiter: &str, holder: &str) -> String {
    format!(
        "skipping `{name}`: {QUEUED} ({waiter} waits, and runs once the run of {holder} ends; \
         it picks up what this fire would have done)"
    )
}

/// Reads `/proc` (until `deadline`) when the holder is what a lingering
/// run left: what keeps it held may be outside the run's own work (a
/// session opened later on its terminal server), and then `stop` would
/// not end it.
pub fn held_message(name: &str, h: &HeldBy, deadline: Option<Instant>) -> String {
    let keepers = view::keepers_of(&h.record, &h.holder, deadline);
    if !keepers.is_empty() {
        return format!(
            "`{name}` is held, though nothing of its run's own work lives (the run started by \
             pid {}, `{}`): by {}; {}",
            h.record.pid,
            onlyone::text::for_terminal(h.record.cmd.as_deref().unwrap_or("?")),
            view::keepers_words(&keepers),
            view::keepers_remedy(&keepers)
        );
    }
    let what = match &h.holder {
        // Not onlyone's: `stop` cannot end it.
        onlyone::Holder::Outside => {
            return format!("`{name}` is held by {}; wait for it (--wait)", h.describe());
        }
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

fn pid_list(t: &[onlyone::ProcId]) -> String {
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
    Ending::Failed.code()
}

/// Writes to stdout; a closed stdout must not change the exit code.
fn print_stdout(s: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes()).and_then(|()| out.flush());
}

/// The calling shell: onlyone's parent.
fn parent_pid() -> u32 {
    rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get() as u32)
}
