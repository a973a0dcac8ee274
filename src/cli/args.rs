//! The command line, as clap parses it: the commands ([`Command`], each
//! one's options in its own file, the options several share in
//! `super::options`), what each is ([`Command::spec`]), and the parse,
//! which defines only the options of the command given ([`Lazy`]).

use std::ffi::OsString;

use clap::{Args, Parser, Subcommand};

use onlyone::place::Feature;

use super::acquire::{self, Acquire};
use super::check::{self, Check};
use super::completions::{self, Completions};
use super::exit::FailMode;
use super::history::{self, History};
use super::keeper::Keeper;
use super::lease_watchdog::LeaseWatchdog;
use super::manpages::{self, Manpages};
use super::metrics::{self, Metrics};
use super::options::{Adjust, Globals, PingArgs};
use super::precheck::{self, Precheck};
use super::reap::{self, Reap};
use super::release::{self, Release};
use super::run::{self, Run};
use super::status::{self, Status};
use super::stop::{self, Stop};

/// What follows the options in `onlyone --help` and `-h`, with
/// `exit_codes` between the lock names and the examples: the table of
/// src/cli/exit.rs in `--help`, a pointer to it elsewhere.
pub fn after_help(exit_codes: &str) -> String {
    format!(
        "\
LOCK is a name (sync) for DIR/NAME.lock, or a path with a `/`. DIR is --dir,
else $ONLYONE_DIR, else /run/onlyone (root) or /tmp/onlyone-$UID (the same for
every session of a user: cron's and a terminal's).

{exit_codes}

Examples:
  onlyone run sync -- ./sync.sh --all      skip (75) if a sync is running
  onlyone run --wait 10m sync -- ./sync.sh wait up to 10 minutes for it
  onlyone status                           who holds what
  onlyone stop sync                        end the running sync"
    )
}

/// Run a scheduled job, or the long-running mode of a CLI, as one instance at
/// a time.
#[derive(Debug, Parser)]
#[command(
    name = "onlyone",
    version,
    propagate_version = true,
    after_help = after_help("Exit codes: `onlyone --help` lists them.")
)]
pub struct Cli {
    #[command(flatten)]
    pub globals: Globals,

    #[command(subcommand)]
    pub command: Command,
}

/// The global options as given to the subcommand (`sub`), where `typed`
/// says they were typed there, else as given before it (`globals`). Only
/// those are read, each a small clone (clap's `from_arg_matches` would
/// copy all of `sub`).
fn with_subcommand(globals: Globals, sub: &clap::ArgMatches, typed: &Typed) -> Globals {
    fn theirs<T: Clone + Send + Sync + 'static>(
        sub: &clap::ArgMatches,
        typed: &Typed,
        id: &str,
    ) -> Option<T> {
        typed
            .has(id)
            .then(|| sub.get_one::<T>(id).cloned())
            .flatten()
    }
    Globals {
        dir: theirs(sub, typed, "dir").or(globals.dir),
        state_dir: theirs(sub, typed, "state_dir").or(globals.state_dir),
        allow_shared_fs: theirs(sub, typed, "allow_shared_fs").unwrap_or(globals.allow_shared_fs),
        store: theirs(sub, typed, "store").or(globals.store),
    }
}

/// The options typed on the command line, before the subcommand or after
/// it (not those from the environment or defaults), by their ids
/// (`state_dir`, `kill_after`): read before the values are taken out of
/// clap's matches.
#[derive(Debug, Default)]
pub struct Typed(Vec<clap::Id>);

impl Typed {
    fn of(m: &clap::ArgMatches) -> Typed {
        Typed(
            m.ids()
                .filter(|id| {
                    m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
                })
                .cloned()
                .collect(),
        )
    }

    /// Whether the option `id` was typed.
    pub fn has(&self, id: &str) -> bool {
        self.0.iter().any(|t| t == id)
    }
}

/// Parses `argv` (the program's name first) as the command does, and
/// says which options were typed. A command line that names its command
/// is parsed by that command alone ([`quick`]); what it refuses, and any
/// other command line, by the whole command line, which says what is
/// wrong. The values are moved out of clap's matches rather than copied
/// (clap's `from_arg_matches` clones them all, some 170 allocations at
/// every start).
pub fn parse(argv: &[OsString]) -> Result<(Typed, Cli), clap::Error> {
    let m = match quick(argv) {
        Some(m) => m,
        None => command_for(argv).try_get_matches_from(argv)?,
    };
    taken(m)
}

/// The command line in `m`, as the command takes it.
fn taken(mut m: clap::ArgMatches) -> Result<(Typed, Cli), clap::Error> {
    use clap::FromArgMatches;
    let mut typed = Typed::of(&m);
    let mut globals = Globals::from_arg_matches_mut(&mut m)?;
    // A subcommand defined without the global options (none is: each is
    // `Lazy`) has none of its own to merge.
    if let Some((_, sub)) = m.subcommand() {
        let typed_there = Typed::of(sub);
        if sub.try_contains_id("dir").is_ok() {
            globals = with_subcommand(globals, sub, &typed_there);
        }
        typed.0.extend(typed_there.0);
    }
    // A ping file given takes the place of $ONLYONE_PING, as a typed
    // --ping does (clap reads the variable whenever --ping is not typed).
    let env_ping = m.subcommand().is_some_and(|(_, sub)| {
        sub.try_contains_id("ping_file").is_ok_and(|has| has)
            && sub.value_source("ping") == Some(clap::parser::ValueSource::EnvVariable)
    });
    let mut command = Command::from_arg_matches_mut(&mut m)?;
    if env_ping {
        command.forget_env_ping();
    }
    Ok((typed, Cli { globals, command }))
}

/// `argv` parsed by the one command it names (`onlyone [--dir D ...]
/// NAME ...`): a command line of the global options and that command,
/// its options defined as clap derives them, none of the other commands'
/// and none of what only a help or an error shows (their order in the
/// help, the help's texts, `--help` and `--version` themselves). Its
/// options are the whole command line's, so what it parses is parsed
/// the same (`tests::quick_parses_as_the_whole_command_line`); `None`
/// when it refuses `argv` (a help, a mistake, another command), which the
/// whole command line then parses and says. Every start of `run` pays
/// for what clap builds: the whole command line was twice this one's.
fn quick(argv: &[OsString]) -> Option<clap::ArgMatches> {
    let (name, define) = definition(super::subcommand(argv)?)?;
    let bare = |cmd: clap::Command| {
        cmd.disable_help_flag(true)
            .disable_version_flag(true)
            .disable_help_subcommand(true)
    };
    let sub = bare(define(clap::Command::new(name)));
    bare(Globals::augment_args(clap::Command::new("onlyone")))
        .subcommand_required(true)
        .subcommand(sub)
        .try_get_matches_from(argv)
        .ok()
}

/// What defines a command's options on it.
type Define = fn(clap::Command) -> clap::Command;

/// The command named `name`, and its options as [`quick`] defines them.
/// A command missing here is parsed by the whole command line, as
/// before (`tests::every_command_has_a_quick_definition`).
fn definition(name: &str) -> Option<(&'static str, Define)> {
    fn define<T: Args>(cmd: clap::Command) -> clap::Command {
        Globals::augment_args(T::augment_args(cmd))
    }
    Some(match name {
        "run" => ("run", define::<Run> as Define),
        "acquire" => ("acquire", define::<Acquire> as Define),
        "release" => ("release", define::<Release> as Define),
        "precheck" => ("precheck", define::<Precheck> as Define),
        "status" => ("status", define::<Status> as Define),
        "stop" => ("stop", define::<Stop> as Define),
        "reap" => ("reap", define::<Reap> as Define),
        "history" => ("history", define::<History> as Define),
        "check" => ("check", define::<Check> as Define),
        "metrics" => ("metrics", define::<Metrics> as Define),
        "completions" => ("completions", define::<Completions> as Define),
        "manpages" => ("manpages", define::<Manpages> as Define),
        "keeper" => ("keeper", define::<Keeper> as Define),
        "lease-watchdog" => ("lease-watchdog", define::<LeaseWatchdog> as Define),
        _ => return None,
    })
}

/// A subcommand's arguments, defined only once that subcommand is the one
/// given ([`clap::Command::defer`]): every start of `onlyone` would
/// otherwise build every subcommand's options, most of its start-up's
/// memory. Manual pages and completions ask for them all
/// ([`full_command`]).
#[derive(Debug)]
pub struct Lazy<T>(pub T);

impl<T> std::ops::Deref for Lazy<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

thread_local! {
    /// Set while [`full_command`] builds: every subcommand's options
    /// defined at once.
    static EAGER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The whole command line with every subcommand's options defined, for
/// what reads them without parsing (manual pages, completions).
pub fn full_command() -> clap::Command {
    EAGER.set(true);
    let cmd = with_long_help(true);
    EAGER.set(false);
    cmd
}

/// The command line, with the exit-code table after `onlyone --help` when
/// `long_help`: it is rendered only for a command line that may show it.
/// (Without it, `-h`'s text stands in, unseen: clap offers "see more with
/// '--help'" only where a long help is set.)
fn with_long_help(long_help: bool) -> clap::Command {
    use clap::CommandFactory;
    let cmd = Cli::command();
    if long_help {
        cmd.after_long_help(after_help(&super::exit::help_text()))
    } else {
        let short = cmd.get_after_help().cloned().unwrap_or_default();
        cmd.after_long_help(short)
    }
}

/// The command line that parses `argv`: `onlyone --help` and `onlyone
/// help` show the exit codes, so any `--help` or `help` before `--` asks
/// for them.
fn command_for(argv: &[OsString]) -> clap::Command {
    let long_help = argv
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--help" || a == "help");
    with_long_help(long_help)
}

/// `cmd` with the help of `--store` listing the engines a store may be
/// (the library's [`onlyone::place::store::ENGINES`]).
fn store_help(cmd: clap::Command) -> clap::Command {
    cmd.mut_arg("store", |a| a.help(super::words::store_help()))
}

impl<T: Args + Adjust> Args for Lazy<T> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        fn define<T: Args + Adjust>(cmd: clap::Command) -> clap::Command {
            store_help(Globals::augment_args(T::adjust(T::augment_args(cmd))))
        }
        if EAGER.get() {
            define::<T>(cmd)
        } else {
            cmd.defer(define::<T>)
        }
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        fn define<T: Args + Adjust>(cmd: clap::Command) -> clap::Command {
            Globals::augment_args_for_update(T::adjust(T::augment_args_for_update(cmd)))
        }
        if EAGER.get() {
            define::<T>(cmd)
        } else {
            cmd.defer(define::<T>)
        }
    }
    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }
}

impl<T: clap::FromArgMatches> clap::FromArgMatches for Lazy<T> {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(m).map(Lazy)
    }
    fn from_arg_matches_mut(m: &mut clap::ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches_mut(m).map(Lazy)
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(m)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command holding the lock for exactly its life.
    #[command(after_help = run::AFTER_HELP)]
    Run(Lazy<Run>),
    /// Take a lock for the calling shell (for scripts; pair with release).
    #[command(after_help = acquire::AFTER_HELP)]
    Acquire(Lazy<Acquire>),
    /// Release a lock taken with acquire.
    #[command(after_help = release::AFTER_HELP)]
    Release(Lazy<Release>),
    /// Should this fire run? 75 on proof of a live run, else 0 (fail open).
    #[command(after_help = precheck::AFTER_HELP)]
    Precheck(Lazy<Precheck>),
    /// Show every lock (or the named ones): free, held, stale or unknown.
    #[command(after_help = status::AFTER_HELP)]
    Status(Lazy<Status>),
    /// End the live run: signal, grace, KILL, then wait until the lock is free.
    #[command(after_help = stop::AFTER_HELP)]
    Stop(Lazy<Stop>),
    /// End the lingering processes of finished or idle runs of the named jobs.
    #[command(after_help = reap::AFTER_HELP)]
    Reap(Lazy<Reap>),
    /// The runs of a lock, the last to end first, from its journal.
    #[command(after_help = history::AFTER_HELP)]
    History(Lazy<History>),
    /// A monitoring check (Nagios, Icinga, Sensu): 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    #[command(after_help = check::AFTER_HELP)]
    Check(Lazy<Check>),
    /// Prometheus metrics (text format) for every lock (or the named ones).
    #[command(after_help = metrics::AFTER_HELP)]
    Metrics(Lazy<Metrics>),
    /// Print a shell's completion script (bash, zsh, fish, elvish, powershell)
    #[command(after_help = completions::AFTER_HELP)]
    Completions(Lazy<Completions>),
    /// Write the manual pages (onlyone.1, onlyone-COMMAND.1) into DIR
    #[command(after_help = manpages::AFTER_HELP)]
    Manpages(Lazy<Manpages>),
    /// (internal) Keep a lock taken by `acquire` fresh while it is held.
    #[command(hide = true)]
    Keeper(Lazy<Keeper>),
    /// (internal) End a leased run if its wrapper dies first.
    #[command(hide = true)]
    LeaseWatchdog(Lazy<LeaseWatchdog>),
}

/// What a command is, for the checks made before it runs: one arm per
/// command in [`Command::spec`], which the compiler asks of a new one.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Its name on the command line.
    pub name: &'static str,
    /// Whether it looks in the lock directory (an untrusted one is
    /// refused before it does).
    pub reads_dir: bool,
    /// What it does with a store.
    pub with_store: StoreUse,
    /// How it fails before its work.
    pub fails: FailMode,
}

/// What a command does with a store (`--store`, `$ONLYONE_STORE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreUse {
    /// It works on the store's leases: the lock directory's options
    /// (`--dir`, `--state-dir`, `--allow-shared-fs`) mean nothing to it.
    Works,
    /// The store cannot give what it needs: refused.
    Refused(Feature),
    /// It works in the lock directory all the same (`reap`).
    DirAnyway,
    /// It has nothing to do with locks.
    Ignores,
}

impl Command {
    /// What this command is (see [`Spec`]).
    pub fn spec(&self) -> Spec {
        use StoreUse::{DirAnyway, Ignores, Refused, Works};
        let (name, reads_dir, with_store, fails) = match self {
            Command::Run(_) => ("run", true, Works, FailMode::Fail),
            Command::Acquire(a) => (
                "acquire",
                true,
                Refused(Feature::ScriptHold),
                if a.export {
                    FailMode::ExportLine
                } else {
                    FailMode::Fail
                },
            ),
            Command::Release(_) => (
                "release",
                true,
                Refused(Feature::ScriptHold),
                FailMode::Fail,
            ),
            Command::Precheck(_) => (
                "precheck",
                true,
                Works,
                FailMode::Open {
                    note: "; letting the fire run (fail open)",
                },
            ),
            Command::Status(_) => ("status", true, Works, FailMode::Fail),
            Command::Stop(_) => ("stop", true, Works, FailMode::Fail),
            Command::Reap(_) => ("reap", true, DirAnyway, FailMode::Open { note: "" }),
            Command::History(_) => ("history", true, Works, FailMode::Fail),
            Command::Check(_) => ("check", true, Works, FailMode::Unknown),
            Command::Metrics(_) => ("metrics", true, Works, FailMode::Fail),
            Command::Completions(_) => ("completions", false, Ignores, FailMode::Fail),
            Command::Manpages(_) => ("manpages", false, Ignores, FailMode::Fail),
            Command::Keeper(_) => ("keeper", false, Ignores, FailMode::Fail),
            Command::LeaseWatchdog(_) => ("lease-watchdog", false, Ignores, FailMode::Fail),
        };
        Spec {
            name,
            reads_dir,
            with_store,
            fails,
        }
    }

    /// Its ping options, for the commands that ping.
    fn ping_args(&mut self) -> Option<&mut PingArgs> {
        match self {
            Command::Run(a) => Some(&mut a.0.ping),
            Command::Acquire(a) => Some(&mut a.0.ping),
            Command::Precheck(a) => Some(&mut a.0.ping),
            Command::Release(_)
            | Command::Status(_)
            | Command::Stop(_)
            | Command::Reap(_)
            | Command::History(_)
            | Command::Check(_)
            | Command::Metrics(_)
            | Command::Completions(_)
            | Command::Manpages(_)
            | Command::Keeper(_)
            | Command::LeaseWatchdog(_) => None,
        }
    }

    /// Drops the URLs `--ping` took from $ONLYONE_PING.
    fn forget_env_ping(&mut self) {
        if let Some(p) = self.ping_args() {
            p.urls.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `onlyone ARGS` prints for help or a usage error, parsed the
    /// way the command parses (each subcommand's options defined once it
    /// is given) or from the full definitions.
    fn rendered(full: bool, args: &[&str]) -> String {
        let argv: Vec<OsString> = std::iter::once("onlyone")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let cmd = if full {
            full_command()
        } else {
            command_for(&argv)
        };
        match cmd.try_get_matches_from(argv) {
            Ok(_) => "parsed".to_owned(),
            Err(e) => format!("{:?}: {}", e.kind(), e.render()),
        }
    }

    /// Options defined only once their subcommand is given change nothing
    /// a user sees: the help of every subcommand, and the errors, are
    /// those of the full definitions that the manual pages show.
    #[test]
    fn lazy_subcommands_say_what_the_full_definitions_say() {
        let full = full_command();
        let names: Vec<String> = full
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .collect();
        assert!(names.len() > 10, "{names:?}");
        assert!(
            full.find_subcommand("run")
                .unwrap()
                .get_arguments()
                .any(|a| a.get_id() == "wait"),
            "the full definitions have run's options"
        );
        for args in [
            &["--help"][..],
            &["help"],
            &["-h"],
            &["--version"],
            &["nosuch"],
            &[],
        ] {
            assert_eq!(rendered(false, args), rendered(true, args), "{args:?}");
        }
        for name in &names {
            for tail in [
                &["--help"][..],
                &["-h"],
                &["--no-such-option"],
                &["--wiat", "1s", "j"],
            ] {
                let args: Vec<&str> = std::iter::once(name.as_str())
                    .chain(tail.iter().copied())
                    .collect();
                assert_eq!(rendered(false, &args), rendered(true, &args), "{args:?}");
            }
        }
    }

    fn parsed(args: &[&str]) -> (Typed, Cli) {
        let argv: Vec<OsString> = std::iter::once("onlyone")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        parse(&argv).unwrap()
    }

    /// The global options work before the subcommand and after it, the
    /// later one winning, as clap's global options did.
    #[test]
    fn global_options_go_before_or_after_the_subcommand() {
        let dir = |args: &[&str]| parsed(args).1.globals.dir;
        assert_eq!(dir(&["--dir", "/a", "status"]), Some("/a".into()));
        assert_eq!(dir(&["status", "--dir", "/b"]), Some("/b".into()));
        assert_eq!(
            dir(&["--dir", "/a", "status", "--dir", "/b"]),
            Some("/b".into())
        );
        assert_eq!(dir(&["status"]), None);
        let (m, cli) = parsed(&["run", "j", "--state-dir", "/s", "--", "true", "--dir", "/x"]);
        assert_eq!(cli.globals.state_dir, Some("/s".into()));
        assert_eq!(cli.globals.dir, None, "after `--` it is the command's");
        let Command::Run(run) = &cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(run.command, ["true", "--dir", "/x"]);
        assert!(m.has("state_dir"));
        assert!(!m.has("dir"));
        let (m, cli) = parsed(&[
            "--store",
            "postgres://h/d",
            "stop",
            "--allow-shared-fs",
            "j",
        ]);
        assert_eq!(cli.globals.store.as_deref(), Some("postgres://h/d"));
        assert!(cli.globals.allow_shared_fs);
        assert!(m.has("store") && m.has("allow_shared_fs"));
        let (m, _) = parsed(&["--store", "postgres://h/d", "status"]);
        assert!(m.has("store") && !m.has("dir"));
    }

    /// The whole command line's parse of `args`, as the command took it
    /// before [`quick`], or its error.
    fn whole(args: &[OsString]) -> Result<(Typed, Cli), clap::error::ErrorKind> {
        command_for(args)
            .try_get_matches_from(args)
            .map_err(|e| e.kind())
            .and_then(|m| taken(m).map_err(|e| e.kind()))
    }

    /// What a command line names only its command for is parsed by that
    /// command alone as by the whole command line, the same values and
    /// the same options typed; what the whole command line refuses (or
    /// shows help for), it refuses too, so that the whole one says it.
    #[test]
    fn quick_parses_as_the_whole_command_line() {
        let parsed: &[&[&str]] = &[
            &["run", "j", "--", "true"],
            &["--dir", "/d", "run", "j", "--", "true"],
            &[
                "--dir=/d",
                "--state-dir",
                "/s",
                "run",
                "-q",
                "j",
                "--",
                "sh",
                "-c",
                "x",
            ],
            &["--allow-shared-fs", "run", "j", "--", "true"],
            &[
                "run", "--wait", "5s", "--queue", "--slots", "3", "j", "--", "true", "--dir", "x",
            ],
            &[
                "run",
                "--replace",
                "--max-time",
                "1h",
                "--kill-after",
                "0",
                "j",
                "--",
                "t",
            ],
            &[
                "run",
                "--schedule",
                "@daily",
                "--late",
                "10m",
                "--catch-up",
                "j",
                "--",
                "t",
            ],
            &[
                "run",
                "--jitter",
                "1s",
                "--spread",
                "2s",
                "--held-exit",
                "0",
                "j",
                "--",
                "t",
            ],
            &[
                "run",
                "--ping",
                "https://h/p",
                "--ping-file",
                "/f",
                "--deadline",
                "1s",
                "j",
                "--",
                "t",
            ],
            &[
                "run",
                "--linger",
                "--lease",
                "9s",
                "--idle-timeout",
                "1m",
                "j",
                "--",
                "t",
            ],
            &["run", "j", "--dir", "/b", "--", "true"],
            &[
                "--store",
                "postgres://h/d",
                "run",
                "--store",
                "postgres://h/e",
                "j",
                "--",
                "t",
            ],
            &["acquire", "--export", "-q", "--owner", "1", "j"],
            &["release", "--exit", "3", "--ping", "https://h/p", "j"],
            &["release", "--force", "j"],
            &["precheck", "--schedule", "0 2 * * *", "--slots", "2", "j"],
            &["status"],
            &["--dir", "run", "status"],
            &["status", "--json", "--deadline", "1s", "a", "b"],
            &["stop", "--signal", "INT", "--pid", "4", "j"],
            &["reap", "--dry-run", "--json", "j"],
            &["history", "-n", "3", "--since", "1d", "j"],
            &["check", "--max-age", "25h", "--max-skips", "2", "a", "b"],
            &["metrics", "--textfile", "/t.prom"],
            &["completions", "bash"],
            &["manpages", "/m"],
            &[
                "keeper",
                "--token",
                "t",
                "--record-end",
                "--exit",
                "3",
                "--",
                "/l",
            ],
            &[
                "lease-watchdog",
                "--token",
                "t",
                "--uid",
                "0",
                "--since",
                "1",
                "--lease-ms",
                "30000",
                "--grace-ms",
                "5000",
                "--sent",
                "2",
            ],
        ];
        // Refused, or help: the whole command line says it.
        let refused: &[&[&str]] = &[
            &["run", "--help"],
            &["run", "-h"],
            &["run", "--version"],
            &["run", "-V"],
            &["run", "j", "--help", "--", "t"],
            &["run", "--late", "--help", "j", "--", "t"],
            &["run", "--wiat", "1s", "j", "--", "t"],
            &["run", "j", "true"],
            &["run", "j"],
            &["run"],
            &["run", "--replace", "--queue", "j", "--", "t"],
            &["run", "--slots", "0", "j", "--", "t"],
            &["run", "--max-time", "0", "j", "--", "t"],
            &["release", "--force", "--ping", "u", "j"],
            &["reap", "-q", "--json", "j"],
            &["status", "-h"],
            &["history"],
            &["help", "run"],
            &["help"],
            &["nosuch"],
            &["--dir"],
            &["--dir", "run"],
            &["--help", "run"],
            &["--version"],
            &[],
        ];
        let argv = |case: &[&str]| -> Vec<OsString> {
            std::iter::once("onlyone")
                .chain(case.iter().copied())
                .map(OsString::from)
                .collect()
        };
        for case in parsed {
            let argv = argv(case);
            let whole = whole(&argv).unwrap_or_else(|e| panic!("{case:?}: {e:?}"));
            let quick = quick(&argv).unwrap_or_else(|| panic!("{case:?}: not parsed alone"));
            let quick = taken(quick).unwrap_or_else(|e| panic!("{case:?}: {e}"));
            assert_eq!(format!("{quick:?}"), format!("{whole:?}"), "{case:?}");
        }
        for case in refused {
            let argv = argv(case);
            assert!(
                whole(&argv).is_err(),
                "{case:?}: the whole command line takes it"
            );
            assert!(quick(&argv).is_none(), "{case:?}: parsed alone");
        }
    }

    /// Every command the whole command line has is parsed alone.
    #[test]
    fn every_command_has_a_quick_definition() {
        for sub in full_command().get_subcommands() {
            assert!(definition(sub.get_name()).is_some(), "{}", sub.get_name());
        }
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
