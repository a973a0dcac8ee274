//! The `onlyone` command: parses arguments, calls the library, prints, and
//! returns how it ended ([`Ending`]), which `main` alone turns into the
//! exit code ([`exit::code`]).

mod acquire;
mod args;
mod check;
mod completions;
pub mod exit;
mod format;
mod history;
mod journal;
mod keeper;
mod lease_watchdog;
mod manpages;
mod metrics;
mod options;
mod ping;
mod place;
mod plan;
mod precheck;
mod reap;
mod release;
mod run;
mod schedule;
mod status;
mod stop;
mod store;
mod tail;
mod view;
mod words;

use std::ffi::OsString;
use std::time::{Duration, Instant};

use onlyone::command::compact_duration;
use onlyone::names;
use onlyone::place::dir::DirPlace;
use onlyone::place::{Note, Notes};
use onlyone::state::StateDir;
use onlyone::{Error, HeldBy, LockFile};

use args::{Cli, Command};
use exit::Ending;

/// Runs the command line `argv` (the program's name first) and returns how
/// it ended (each command returns its own; the exit code is `main`'s).
pub fn main(argv: Vec<OsString>) -> Ending {
    onlyone::hint::set_wording(words::hint);
    let (typed, cli) = match args::parse(&argv) {
        Ok(x) => x,
        Err(e) => {
            let _ = e.print();
            usage_hints(&argv, &e);
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    Ending::Done
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
        Command::Run(a) => schedule::run(place, a.0),
        Command::Acquire(a) => ctx.acquire(a.0),
        Command::Release(a) => ctx.release(a.0),
        Command::Precheck(a) => schedule::precheck(place, &a),
        Command::Status(a) => status::status(place, a.0),
        Command::Stop(a) => stop::stop(place.seam(), &a),
        Command::Reap(a) => reap::reap(&ctx, a.0),
        Command::History(a) => history::history(place, a.0),
        Command::Check(a) => check::check(place, a.0),
        Command::Metrics(a) => metrics::metrics(place, a.0),
        Command::Keeper(a) => keeper::keeper(&ctx, a.0),
        Command::Completions(a) => completions::completions(&a, &args::full_command()),
        Command::Manpages(a) => manpages::manpages(&a, args::full_command(), args::after_help),
        Command::LeaseWatchdog(a) => lease_watchdog::watchdog(&a),
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

/// What every command shares: the lock directory place (the lock
/// directory and where it came from, and the state directory that keeps
/// the journals), which it derefs to, and the store the command line names.
#[derive(Clone)]
pub struct Ctx {
    /// The lock directory, as a place.
    place: DirPlace,
    /// `--store URL`: a store several hosts share.
    store: Option<String>,
}

impl std::ops::Deref for Ctx {
    type Target = DirPlace;

    fn deref(&self) -> &DirPlace {
        &self.place
    }
}

/// What a place says on the side, said on stderr: an earlier version's
/// journal set aside, an event that could not be written (once).
fn notes() -> Notes {
    std::sync::Arc::new(|n: Note<'_>| match n {
        Note::SetAside(s) => say(s),
        Note::Unlogged { log, error } => journal::unlogged(log, error),
        _ => {}
    })
}

/// Prints a message on stderr. A closed stderr must not change the exit
/// code (a precheck must still answer 0 or 75), so write errors are
/// ignored rather than panicking as `eprintln!` would. Every message goes
/// through [`onlyone::text::for_terminal`], line by line: what a record,
/// a journal or a file name another account wrote says (a command with a
/// bidi override, a host name) reaches the terminal escaped, whichever
/// message carries it.
fn say(msg: impl std::fmt::Display) {
    use std::io::Write;
    let msg = msg.to_string();
    let mut shown = String::with_capacity(msg.len() + 10);
    for (i, line) in msg.split('\n').enumerate() {
        if i > 0 {
            shown.push('\n');
        }
        shown.push_str(&onlyone::text::for_terminal(line));
    }
    let _ = writeln!(std::io::stderr().lock(), "onlyone: {shown}");
}

fn deadline_of(d: Option<Duration>) -> Option<Instant> {
    d.map(|d| Instant::now() + d)
}

impl Ctx {
    fn new(cli: &Cli) -> Ctx {
        let g = &cli.globals;
        Ctx {
            place: DirPlace::new(
                names::lock_dir(g.dir.as_deref()),
                StateDir::resolve(g.state_dir.as_deref()),
                g.allow_shared_fs,
                notes(),
            ),
            store: g.store.clone().filter(|s| !s.is_empty()),
        }
    }

    /// Maps a failed acquire to a message and a code: held (or a wait that
    /// ran out while held) is the skip code; anything else is a failure.
    fn refused(&self, lock: &LockFile, e: Error, name: &str, quiet: bool, held: Ending) -> Ending {
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
    if h.others.is_empty() && h.record.other_account().is_some() {
        // Not a run of this account's: `stop` does not end it.
        return format!(
            "`{name}` is held by {}, not by a run of yours; wait for it (--wait), or keep the \
             job's locks in a directory no other account can write in",
            h.describe()
        );
    }
    let keepers = match h.others.is_empty() {
        true => view::keepers_of(&h.record, &h.holder, deadline),
        false => Vec::new(),
    };
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
    let stop_arg = if name.contains('/') {
        format!("'{name}'")
    } else {
        name.to_owned()
    };
    if !h.others.is_empty() {
        // Every slot is held: `stop` would end every run, `stop --pid`
        // the one named.
        let all: Vec<String> = std::iter::once(h)
            .chain(&h.others)
            .map(onlyone::HeldBy::describe)
            .collect();
        return format!(
            "all {} slots of `{name}` are held, by {}; wait for one (--wait) or stop one \
             (onlyone stop {stop_arg} --pid PID)",
            all.len(),
            all.join("; ")
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

/// Says `e` and ends as onlyone's own failure.
fn fail(e: impl std::fmt::Display) -> Ending {
    say(e);
    Ending::Failed
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
