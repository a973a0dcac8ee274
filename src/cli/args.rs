//! The command line, as clap parses it.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use onlyone::place::Feature;

pub use super::duration::parse_duration;
use super::exit::{FailMode, HELD};
use super::schedule_args::{FireArgs, FireScheduleArg, LateArg, ScheduleArg};
use super::slots_args::SlotsArg;

/// The grace between TERM and KILL, unless told otherwise
/// (`onlyone::signal::DEFAULT_GRACE`).
const DEFAULT_GRACE: &str = "5s";

/// `check`'s deadline unless told otherwise: an answer, UNKNOWN at worst,
/// before the 10 s that monitoring agents give a plugin (NRPE's
/// `command_timeout`, `check_nrpe -t`), whatever another account keeps a
/// judgement waiting for.
const CHECK_DEADLINE: &str = "8s";

/// `status`'s deadline unless told otherwise.
const STATUS_DEADLINE: &str = "10s";

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

// The options of `onlyone` that every subcommand takes too, before or
// after its name (`onlyone --dir D status`, `onlyone status --dir D`).
// They are defined on each subcommand as it is built, rather than as
// clap's global options: clap copies each global option into every
// subcommand at every start (4 options into 15 subcommands, some 50 KB of
// heap that every `run` faults in). (A doc comment here would be every
// subcommand's about.)
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct Globals {
    /// The lock directory (default: $ONLYONE_DIR, else /run/onlyone for root,
    /// or /tmp/onlyone-$UID).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Where the journals (the history of runs) are kept, apart from the
    /// locks, so that they survive a reboot (default: $ONLYONE_STATE_DIR,
    /// else /var/lib/onlyone for root, else $XDG_STATE_HOME/onlyone or
    /// ~/.local/state/onlyone, else /var/tmp/onlyone-state-$UID). Written
    /// only when it is this user's and writable by no one else.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Write locks even on a network or FUSE filesystem (NFS, SMB, 9p,
    /// FUSE...), which onlyone otherwise refuses: only for one that this
    /// host alone uses.
    #[arg(long, env = "ONLYONE_ALLOW_SHARED_FS", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0, default_missing_value = "true", default_value = "false")]
    pub allow_shared_fs: bool,

    /// Keep the locks in a store that several hosts share, named by its
    /// URL (its engines: onlyone --help).
    #[arg(
        long,
        env = "ONLYONE_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub store: Option<String>,
}

impl Globals {
    /// These options as given to the subcommand (`sub`), where `typed`
    /// says they were typed there, else as given before it (`self`). Only
    /// those are read, each a small clone (clap's `from_arg_matches` would
    /// copy all of `sub`).
    fn with_subcommand(self, sub: &clap::ArgMatches, typed: &Typed) -> Globals {
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
            dir: theirs(sub, typed, "dir").or(self.dir),
            state_dir: theirs(sub, typed, "state_dir").or(self.state_dir),
            allow_shared_fs: theirs(sub, typed, "allow_shared_fs").unwrap_or(self.allow_shared_fs),
            store: theirs(sub, typed, "store").or(self.store),
        }
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
/// says which options were typed. The values are moved out of clap's
/// matches rather than copied (clap's `from_arg_matches` clones them all,
/// some 170 allocations at every start).
pub fn parse(argv: &[OsString]) -> Result<(Typed, Cli), clap::Error> {
    use clap::FromArgMatches;
    let mut m = command_for(argv).try_get_matches_from(argv)?;
    let mut typed = Typed::of(&m);
    let mut globals = Globals::from_arg_matches_mut(&mut m)?;
    // A subcommand defined without the global options (none is: each is
    // `Lazy`) has none of its own to merge.
    if let Some((_, sub)) = m.subcommand() {
        let typed_there = Typed::of(sub);
        if sub.try_contains_id("dir").is_ok() {
            globals = globals.with_subcommand(sub, &typed_there);
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

/// What a subcommand changes in its options once they are defined: the
/// options it shares ([`BusyArgs`], [`PingArgs`]) put where its help has
/// always shown them, with its own texts.
pub trait Adjust {
    /// `cmd`, the subcommand with its options defined, adjusted.
    fn adjust(cmd: clap::Command) -> clap::Command {
        cmd
    }
}

impl Adjust for Release {}
impl Adjust for Status {}
impl Adjust for Stop {}
impl Adjust for Reap {}
impl Adjust for History {}
impl Adjust for Check {}
impl Adjust for Metrics {}
impl Adjust for Completions {}
impl Adjust for Manpages {}
impl Adjust for Keeper {}
impl Adjust for LeaseWatchdog {}

impl Adjust for Run {
    fn adjust(cmd: clap::Command) -> clap::Command {
        in_order(
            cmd,
            &[
                "lock",
                "command",
                "slots",
                "wait",
                "replace",
                "queue",
                "max_time",
                "idle_timeout",
                "kill_after",
                "lease",
                "held_exit",
                "keep_strays",
                "linger",
                "schedule",
                "late",
                "catch_up",
                "catch_up_within",
                "jitter",
                "spread",
                "deadline",
                "ping",
                "ping_file",
                "quiet",
            ],
        )
    }
}

impl Adjust for Acquire {
    fn adjust(cmd: clap::Command) -> clap::Command {
        // Texts first: clap puts an option it changes last.
        let cmd = texts(
            cmd,
            &[
                (
                    "wait",
                    "Wait up to DUR for a running one to finish (waiters get the lock in the \
                     order they began to wait)",
                    None,
                ),
                (
                    "queue",
                    "At most one waits: wait (for ever, or up to --wait DUR) unless another \
                     caller already waits with --queue; then the lock counts as held",
                    None,
                ),
                ("held_exit", "Exit code when the lock is held", None),
                ("deadline", "One budget for the whole call", None),
                (
                    "ping",
                    "Ping URL with the healthchecks.io protocol: URL/start?rid=RID now, the end \
                     at `release --exit CODE` (repeatable)",
                    Some(
                        "Ping URL with the healthchecks.io protocol: URL/start?rid=RID now, the \
                         end at `release --exit CODE` (repeatable).\n\nWith --export, the \
                         assignments add ONLYONE_RUN_ID (RID) and ONLYONE_RELEASE_PING (these \
                         URLs), which `release` reads when it is given no --ping: the end goes \
                         where the start went. A skip is URL/log. Bounded and failing open as \
                         `run --ping`.",
                    ),
                ),
                (
                    "ping_file",
                    "Read ping URLs from FILE, one a line (`#` starts a comment), in place of \
                     $ONLYONE_PING (with --ping, both are pinged)",
                    Some(
                        "Read ping URLs from FILE, one a line (`#` starts a comment), in place \
                         of $ONLYONE_PING (with --ping, both are pinged).\n\nChecked as `run \
                         --ping-file` checks it. With --export, the assignments add \
                         ONLYONE_RELEASE_PING_FILE (the file's path, not its URLs), which \
                         `release` reads again.",
                    ),
                ),
            ],
        );
        in_order(
            cmd,
            &[
                "lock",
                "owner",
                "slots",
                "wait",
                "queue",
                "held_exit",
                "deadline",
                "export",
                "ping",
                "ping_file",
                "quiet",
            ],
        )
    }
}

impl Adjust for Precheck {
    fn adjust(cmd: clap::Command) -> clap::Command {
        let cmd = texts(
            cmd,
            &[
                (
                    "ping",
                    "Ping URL with the healthchecks.io protocol when the lock is held: \
                     URL/log?rid=RID, its body saying who holds it (a skip is not a failure); \
                     a free lock pings nothing (the fire's `run --ping` does). Repeatable; \
                     bounded and failing open as `run --ping`",
                    None,
                ),
                (
                    "ping_file",
                    "Read ping URLs from FILE, one a line (`#` starts a comment), in place of \
                     $ONLYONE_PING (with --ping, both are pinged); checked as `run \
                     --ping-file` checks it",
                    None,
                ),
            ],
        );
        in_order(
            cmd,
            &[
                "lock",
                "slots",
                "schedule",
                "late",
                "deadline",
                "ping",
                "ping_file",
                "quiet",
            ],
        )
    }
}

/// `cmd` with its options in `order` (their ids; one not listed goes
/// last), each shown in its place: the order in which clap lists them in
/// the help, the manual page and the completions. The options are moved,
/// not copied.
fn in_order(cmd: clap::Command, order: &[&str]) -> clap::Command {
    let rank = |a: &clap::Arg| {
        order
            .iter()
            .position(|id| a.get_id() == *id)
            .unwrap_or(order.len())
    };
    let mut args = Vec::with_capacity(order.len());
    let cmd = cmd.mut_args(|a| {
        args.push(a);
        clap::Arg::default()
    });
    debug_assert!(
        args.iter().all(|a| rank(a) < order.len()),
        "an option left out of the order"
    );
    args.sort_by_key(|a| rank(a));
    let mut args = args.into_iter();
    let mut shown = 0;
    cmd.mut_args(|_| {
        let a = args.next().expect("as many options");
        if a.is_positional() {
            a
        } else {
            shown += 1;
            a.display_order(shown - 1)
        }
    })
}

/// `cmd` with the help texts of `texts` (id, short help, long help):
/// a subcommand's own words for an option it shares.
fn texts(
    cmd: clap::Command,
    texts: &[(&str, &'static str, Option<&'static str>)],
) -> clap::Command {
    texts.iter().fold(cmd, |cmd, &(id, help, long)| {
        cmd.mut_arg(id, |a| a.help(help).long_help(long))
    })
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
    #[command(after_help = "\
The lock is held while onlyone or any process of the run lives (the command,
its process group, anything carrying $ONLYONE_TOKEN), even after kill -9 of
onlyone. When the command exits, its leftover processes are ended (TERM, then
KILL after --kill-after) before the lock is released.

Examples:
  onlyone run sync -- ./sync.sh --all
  onlyone run -q sync -- ./sync.sh          # cron: no mail on a skip
  onlyone run --wait 10m sync -- ./sync.sh  # wait for the running one
  onlyone run --replace sync -- ./sync.sh   # stop the running one, then run
  onlyone run --max-time 1h sync -- ./sync.sh
  onlyone run --held-exit 0 sync -- ./sync.sh  # a skip is not an error
  onlyone run --schedule '0 2 * * *' --spread 10m sync -- ./sync.sh
                                            # missed fires recorded; a stable wait
  onlyone run --catch-up sync -- ./sync.sh  # at boot: once, if the 02:00 was missed
  onlyone run --linger agent -- sh -c \
    'tmux -L agent new-session -d -e ONLYONE_TOKEN=\"$ONLYONE_TOKEN\" ./agent'
                                            # the agent, in a tmux server of its own
                                            # (-L: not yours), holds the lock")]
    Run(Lazy<Run>),
    /// Take a lock for the calling shell (for scripts; pair with release).
    #[command(after_help = "\
The owner is the calling shell (onlyone's parent) unless --owner says
otherwise. With --export the lock is held while the script or any process
that carries its ONLYONE_TOKEN lives (the script's workers, even after the
script is killed). Without it, the lock is held while the calling shell lives
and, when that shell leads its own process group (a script started by a
job-control shell or by systemd), while the processes it started in that group
live; a script that does not lead its group (any script run by cron) counts
alone: its group's other members are not its to hold a lock with. Use --export.

--export prints, on success, assignments for eval:
  ONLYONE_LOCK='...'; ONLYONE_TOKEN='...'; export ONLYONE_LOCK ONLYONE_TOKEN
and on failure `exit N` (N is its own exit code). Test the substitution's
status: when onlyone cannot be run at all (not in cron's PATH, not
executable) it prints nothing, and `eval` of nothing succeeds.

Example (a script run by cron):
  vars=$(onlyone acquire -q sync --export) || exit
  eval \"$vars\"
  trap 'onlyone release sync --exit $?' EXIT
  ./worker &                 # carries the token: part of the run")]
    Acquire(Lazy<Acquire>),
    /// Release a lock taken with acquire.
    #[command(after_help = "\
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
  onlyone release --force sync")]
    Release(Lazy<Release>),
    /// Should this fire run? 75 on proof of a live run, else 0 (fail open).
    #[command(after_help = "\
Exits 75 only when a live run provably holds the lock, and 0 otherwise, even on
errors (said on stderr). A provably stale lock is cleared. A precheck takes no
lock: what it lets through must still run under `onlyone run` (or acquire).

Examples:
  systemd:  ExecCondition=/usr/bin/onlyone precheck sync
            ExecStart=/usr/bin/onlyone run sync -- /usr/local/bin/sync.sh
            (exit 1-254 skips the unit without failing it)
  reaper:   onlyone reap sync && onlyone precheck sync")]
    Precheck(Lazy<Precheck>),
    /// Show every lock (or the named ones): free, held, stale or unknown.
    #[command(after_help = "\
Every lock in DIR (a lock file, or a journal: a free lock with a history), or
the ones named: free, held, stale or unknown, with the owner's pid, the
command's pid, since, age, the last finished run from the journal (how it
ended, when it started, how long it took), the fires skipped since the current
run began, and the command; for stale or unknown locks the reason (and for a
run kept alive by a leftover process, that process). The table is aligned on a
terminal and tab-separated otherwise. A name that is nowhere (no lock file, no
slot's file, nothing in its journal: a typo, the wrong user or --dir) is an
error, as for history; the locks that are there are shown all the same.

Examples:
  onlyone status
  onlyone status sync --json")]
    Status(Lazy<Status>),
    /// End the live run: signal, grace, KILL, then wait until the lock is free.
    #[command(after_help = "\
Sends --signal (default TERM) to the run's onlyone wrapper, which forwards it
to the command's group and ends the strays; if the wrapper is gone, to every
process of the run. After --kill-after (default 5s) everything of the run that
is left gets KILL. It waits until the lock is free, clears a record left by a
killed wrapper, and reports what it did. It never signals a process whose pid
and start time differ from the record: every signal goes through a pidfd
opened and checked against the recorded start time. Stopping a free lock
succeeds; a stale one is cleared. A lock of several slots (run --slots N):
the run of every slot, or with --pid PID only the run whose pid is PID.

Examples:
  onlyone stop sync
  onlyone stop --signal INT --kill-after 30s sync
  onlyone stop --pid 4242 sync              # one run of a lock of slots")]
    Stop(Lazy<Stop>),
    /// End the lingering processes of finished or idle runs of the named jobs.
    #[command(after_help = "\
A process is ended only when all three hold:

1. It belongs to a run of a named job: its environment carries that job's
ONLYONE_LOCK, or the ONLYONE_TOKEN of the run the lock names now (a process
a terminal server started for the run, run --linger), or it is in the
run's process group, or it owns the lock (a script that took it with
acquire, a program with the library), or it is the command recorded in the
lock. Nothing else is ever touched: not your shells, not your own sleep,
not the runs of jobs you did not name.

2. Its run is finished or idle: the lock no longer names its token (the
wrapper is gone, or the lock was released or taken over), or every process
of the run has been idle for the window.

3. It has itself been idle (no CPU time, no byte read or written) for at
least --idle. One call cannot watch for ten minutes, so reap remembers what
it saw in DIR/.onlyone-reap.json: per process, by pid and start time, its
counters and when they last changed. A process seen for the first time
counts as active now. The file is replaced atomically (temp + rename), and
DIR/.onlyone-reap.lock (flock) keeps two reaps from interleaving.

Ending is TERM, --grace, KILL, then a wait of up to 5 s until the processes are
really gone and, for a run whose wrapper lives, until it has released the lock:
a precheck right after never sees a finished run as alive.

--deadline is one budget for every call reap makes (/proc reads, signals,
waits): when it runs out, reap stops where it is and reports what it did. reap
always exits 0, even on errors (it prints them): it runs as a precheck, and a
reaper bug must never be the reason a fire is skipped. --dry-run sends no
signal and writes no state. -q is not for --json.

Examples:
  onlyone reap sync && onlyone precheck sync     # the precheck of a fire
  onlyone reap --dry-run --json sync")]
    Reap(Lazy<Reap>),
    /// The runs of a lock, the last to end first, from its journal.
    #[command(after_help = "\
The last to end first: the runs still running (the latest started first), then
the others by when they ended, as the journal has their ends (a run found over
with no end recorded, its wrapper killed, ended when it was found). The runs of
a lock of one slot never overlap, so this is the order they started in; with
--slots N, the first row is the last run that check, metrics and status speak
of. For each: when it started, how long it took, what it used (CPU:
user and system time of its command and of the processes of the run onlyone
reaped; PEAK: the largest peak memory of one of them, not a sum; - when not
recorded), how it ended (exit N, signal NAME, ended (max-time|idle|stop|reap),
abandoned: its wrapper died, released: a script's hold), its pid and host, and
the fires skipped while it ran; and the scheduled fires that passed with no
fire (missed: --schedule), as the fire that found them recorded them. The
journal is in the state directory
(--state-dir: /var/lib/onlyone for root), named from the lock's path:
/run/onlyone/sync.lock has run-onlyone-sync.lock.journal; an earlier version's
LOCKFILE.journal beside the lock is read first.

Examples:
  onlyone history sync
  onlyone history sync -n 5 --since 7d
  onlyone history sync --json | jq .")]
    History(Lazy<History>),
    /// A monitoring check (Nagios, Icinga, Sensu): 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    #[command(after_help = "\
CRITICAL: no success within --max-age (a lock that never succeeded counts; a
run done when idle, ended by reap or --idle-timeout, is a success), the
current run longer than --max-runtime, more than --max-skips fires skipped in
a row, or the last run failed (a non-zero exit, a signal, --max-time, a lost
lease, abandoned; a stopped run is no failure; the last run is the last to
end, also where runs overlap with --slots), or a scheduled fire (--schedule, or the
schedule the journal keeps) passed --late ago with no fire since the last one
(\"missed the 02:00 fire\"; a fire that came and waits out its --jitter or
--spread has served it). WARNING: a threshold at least 80% used, a lock whose
record cannot be judged (unknown), or a script's last hold released without
--exit. UNKNOWN: a name with neither a lock file nor a journal (a typo, the
wrong user or --dir), a lock not judged within --deadline (default 8s), or a
schedule the fires could not read where they ran (a TZ that names no zone),
until a fire reads it. With several locks the worst state wins and the
status line counts them; the first line is the status line, then perfdata
after `|`, then one line per lock.

Examples:
  onlyone check sync --max-age 25h --max-runtime 2h --max-skips 12
  onlyone check backup sync --max-age 2d")]
    Check(Lazy<Check>),
    /// Prometheus metrics (text format) for every lock (or the named ones).
    #[command(after_help = "\
Every lock in DIR (or the ones named), each sample labelled lock=\"NAME\"
(escaped as the format requires): onlyone_last_start_timestamp_seconds,
onlyone_last_success_timestamp_seconds, onlyone_last_exit_code (128+N for
signal N, -1 when unknown), onlyone_last_duration_seconds (the last run is the
last to end, as history lists them), onlyone_running, onlyone_skipped_total,
onlyone_takeovers_total (the journal's counts); for a lock that has had slots
(run --slots N), onlyone_slots (N) and onlyone_slots_held (the slots live runs
hold), there while it is free too (N as its last run took it, 0 held); for a
last finished run that recorded them, onlyone_last_cpu_seconds (labelled
mode=\"user\" and mode=\"system\") and onlyone_last_max_rss_bytes (the largest
peak of one process of the run, not a sum). For a lock with a schedule
(--schedule, or the one its journal keeps): onlyone_missed_fires (the scheduled
fires passed --late ago with no fire since the last one, as check counts them,
live: 0 when none) and onlyone_oldest_missed_fire_timestamp_seconds (the first
of them), onlyone_missed_total (the fires that later fires recorded missed)
and onlyone_next_fire_timestamp_seconds. With
--textfile the metrics are
written atomically (a temp file beside it, then rename), for node_exporter's
textfile collector.

Examples:
  onlyone metrics
  onlyone metrics --textfile /var/lib/node_exporter/textfile/onlyone.prom")]
    Metrics(Lazy<Metrics>),
    /// Print a shell's completion script (bash, zsh, fish, elvish, powershell)
    #[command(after_help = "\
Install:
  onlyone completions bash > /etc/bash_completion.d/onlyone
  onlyone completions zsh  > /usr/local/share/zsh/site-functions/_onlyone
  onlyone completions fish > ~/.config/fish/completions/onlyone.fish

Commands and options complete; lock names do not (`onlyone status` lists
them).")]
    Completions(Lazy<Completions>),
    /// Write the manual pages (onlyone.1, onlyone-COMMAND.1) into DIR
    #[command(after_help = "\
Example:
  onlyone manpages /usr/local/share/man/man1 && man onlyone")]
    Manpages(Lazy<Manpages>),
    /// (internal) Keep a lock taken by `acquire` fresh while it is held.
    #[command(hide = true)]
    Keeper(Lazy<Keeper>),
    /// (internal) End a leased run if its wrapper dies first.
    #[command(hide = true)]
    LeaseWatchdog(Lazy<LeaseWatchdog>),
}

// `run --store` starts this beside its command: it ends the run if the
// wrapper dies (nothing would renew the lease). (A doc comment here would
// be its help's about, over the variant's.)
#[derive(Debug, Args)]
pub struct LeaseWatchdog {
    /// The run's token.
    #[arg(long)]
    pub token: String,
    /// The run's user.
    #[arg(long)]
    pub uid: u32,
    /// The wrapper's start time (clock ticks since boot).
    #[arg(long)]
    pub since: u64,
    /// The lease, in milliseconds.
    #[arg(long)]
    pub lease_ms: u64,
    /// The grace, in milliseconds.
    #[arg(long)]
    pub grace_ms: u64,
    /// When the take was sent (boot clock, nanoseconds).
    #[arg(long)]
    pub sent: i64,
}

#[derive(Debug, Args)]
pub struct Completions {
    /// The shell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct Manpages {
    /// Where to write the pages (created if missing).
    // Its id is not `dir`: the global --dir has that one.
    #[arg(id = "pages_dir", value_name = "DIR")]
    pub dir: PathBuf,
}

// `acquire` starts this for a lock in a directory that age-based cleaners
// empty (/tmp): no other process of onlyone's lives to refresh it; and
// `release`, when the script's workers hold the lock on, to record the
// run's end once they have all exited. (A doc comment here would be its
// help's about, over the variant's.)
#[derive(Debug, Args)]
pub struct Keeper {
    /// The lock file.
    #[arg(value_name = "PATH")]
    pub lock: PathBuf,
    /// The acquisition's token.
    #[arg(long)]
    pub token: String,
    /// Once the hold ends, record the end of the script's run (a second
    /// `release` event, whose duration covers the workers).
    #[arg(long)]
    pub record_end: bool,
    /// With --record-end: the code the script gave `release --exit`.
    #[arg(long, value_name = "CODE")]
    pub exit: Option<u8>,
}

// What `run` and `acquire` do when the lock is held: each option defined
// once, with `run`'s texts (`acquire`'s own are put in by `Adjust::adjust`).
// (A doc comment here would be the subcommands' about.)
#[derive(Debug, Args)]
pub struct BusyArgs {
    /// Wait up to DUR for a running one to finish.
    ///
    /// The waiter wakes when the lock file is removed (inotify) or the
    /// holding process exits (pidfd), within milliseconds, and re-probes
    /// every 250 ms in case an owner died without a trace. Then 75.
    /// Waiters get the lock in the order they began to wait (`status`
    /// shows them).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub wait: Option<Duration>,
    /// At most one fire waits: wait for the running one (for ever, or up
    /// to --wait DUR) unless another fire already waits; then skip (75).
    ///
    /// For a sync job: whatever arrives during a run is picked up by
    /// exactly one more run, never by a pile of them (Temporal's
    /// BufferOne). A waiter that dies leaves its place to the next fire.
    /// One that gives up (--wait ran out) leaves undone what the fires
    /// that skipped on it came for: for a sync job, leave --wait out.
    /// Waiters, of --wait and --queue alike, get the lock in the order
    /// they began to wait.
    #[arg(long)]
    pub queue: bool,
    /// Exit code for a skip.
    ///
    /// `--held-exit 0` makes a skip a success.
    #[arg(long, value_name = "N", default_value_t = HELD)]
    pub held_exit: u8,
    /// One budget for acquiring (waiting and stopping included).
    ///
    /// For everything before the command starts (waiting, stopping a run
    /// to replace); when it runs out while the lock is held: 75, otherwise
    /// 125.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub deadline: Option<Duration>,
}

impl BusyArgs {
    /// What `--wait` and `--queue` ask of a held lock, as the library's
    /// one policy.
    pub fn policy(&self) -> onlyone::BusyPolicy {
        onlyone::BusyPolicy::of(self.wait, self.queue)
    }
}

// Where `run`, `acquire` and `precheck` ping: each option defined once,
// with `run`'s texts (`acquire`'s and `precheck`'s own are put in by
// `Adjust::adjust`). (A doc comment here would be the subcommands' about.)
#[derive(Debug, Args)]
pub struct PingArgs {
    /// Ping URL with the healthchecks.io protocol (repeatable).
    ///
    /// URL/start?rid=RID before the command starts, URL/N?rid=RID when it
    /// ends with exit code N, URL/fail?rid=RID when it ends with none (a
    /// signal, a lost lease), URL/log?rid=RID for a skip (a skip is not a
    /// failure; the body says who holds the lock). The end's body is the
    /// tail of what the run printed, within the server's Ping-Body-Limit
    /// (none when stdout or stderr is a terminal, or with --linger or
    /// --keep-strays). RID is the run's id, in its journal events and in
    /// the command's $ONLYONE_RUN_ID. Pings fail
    /// open: the start waits at most 2s, the end (sent once the lock is
    /// released) at most 10s, the start within --deadline; a ping never changes
    /// the exit code, and a failing server is said once on stderr (not with
    /// -q), the URL shown as its host only. A sentry+https:// URL (Sentry's
    /// cron check-in URL with `sentry+` before it) sends Sentry's check-ins
    /// instead: in_progress, then ok or error with the duration, RID as the
    /// check_in_id, nothing for a skip. The URL is the check's key: a URL
    /// here shows in `ps` until onlyone starts and masks it; --ping-file
    /// or $ONLYONE_PING never shows.
    #[arg(
        id = "ping",
        long = "ping",
        value_name = "URL",
        env = "ONLYONE_PING",
        hide_env_values = true
    )]
    pub urls: Vec<String>,
    /// Read ping URLs from FILE, one a line (`#` starts a comment), in
    /// place of $ONLYONE_PING (with --ping, both are pinged).
    ///
    /// A URL on the command line shows in `ps` for a moment (onlyone
    /// masks it once it starts); in a file only you and root can read, it
    /// never does. Refused before anything runs unless FILE (a link is
    /// followed) is a regular file of yours or root's that no one else
    /// may write and others may not read (chmod 600).
    #[arg(id = "ping_file", long = "ping-file", value_name = "FILE")]
    pub file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct Run {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
    // What to do when the lock is held.
    #[command(flatten)]
    pub busy: BusyArgs,
    #[command(flatten)]
    pub slots: SlotsArg,
    /// Stop the running one (TERM, grace, KILL), then run.
    ///
    /// As `onlyone stop` does (Kubernetes' `Replace`). With --slots N, a
    /// free slot is taken and nothing is stopped; when all N are held,
    /// one run is stopped, the oldest (held the longest), and a slot
    /// taken once one frees.
    #[arg(long, conflicts_with = "queue")]
    pub replace: bool,
    /// End the command after DUR (exit 124). More than 0: for no limit,
    /// leave it out.
    ///
    /// TERM to the command's process group, then KILL after --kill-after.
    /// 0 is refused: `timeout 0` means no limit, and neither reading is
    /// guessed.
    #[arg(long, value_name = "DUR", value_parser = parse_limit, allow_negative_numbers = true)]
    pub max_time: Option<Duration>,
    /// End the run once all its processes have used no CPU and done no I/O
    /// for DUR (exit 124). More than 0. Not with --linger (`onlyone reap
    /// --idle DUR` ends a lingering run once idle).
    ///
    /// The run is over when all its processes have been idle for DUR
    /// (doc/operations.md, "Idle"): TERM, grace, KILL, wait until they are
    /// gone, release; exit 124 with a message saying the run was idle for
    /// DUR. A busy run, or one only between steps, is never ended.
    #[arg(long, value_name = "DUR", value_parser = parse_limit, allow_negative_numbers = true)]
    pub idle_timeout: Option<Duration>,
    /// Grace between TERM and KILL (0: KILL right after TERM).
    ///
    /// For --max-time, --idle-timeout and for the run's leftover processes.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = DEFAULT_GRACE)]
    pub kill_after: Duration,
    /// With --store: the lease L the server grants at each renewal (every
    /// L/6). The command is ended before a lease not renewed in time can
    /// run out, so --kill-after must fit: L/6 + L/10 + grace + max(L/15,
    /// 100ms) < L (30s allows up to 19s).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = "30s")]
    pub lease: Duration,
    /// Leave the run's leftover processes running when the command exits
    /// (and release the lock).
    #[arg(long, conflicts_with = "linger")]
    pub keep_strays: bool,
    /// When the command exits, the run's processes that outlive it keep the
    /// lock held (work handed to tmux, screen, a terminal server); `onlyone
    /// reap` ends them once idle. Not with --max-time or --idle-timeout,
    /// which would apply to the command alone.
    ///
    /// The processes that outlive it are its descendants and the processes
    /// carrying its token; onlyone exits with the command's code (see
    /// doc/operations.md, "Runners that are not the work's parent"). When
    /// none is left, the record stays and is stale: the next run takes it
    /// over at once (quietly with -q). It is not released, because a
    /// terminal server may exec the work a moment after the command
    /// returned, and a release then would let the next fire in beside it.
    #[arg(long)]
    pub linger: bool,
    // The schedule, and what to do about it before the lock.
    #[command(flatten)]
    pub schedule: FireScheduleArg,
    #[command(flatten)]
    pub late: LateArg,
    #[command(flatten)]
    pub fire: FireArgs,
    // Where to ping.
    #[command(flatten)]
    pub ping: PingArgs,
    /// No message on a skip or a takeover (cron mails whatever a job
    /// prints).
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct Acquire {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// The owner's pid (default: the calling shell).
    #[arg(long, value_name = "PID")]
    pub owner: Option<u32>,
    // What to do when the lock is held.
    #[command(flatten)]
    pub busy: BusyArgs,
    #[command(flatten)]
    pub slots: SlotsArg,
    /// Print shell assignments of ONLYONE_LOCK and ONLYONE_TOKEN for eval
    /// (`exit N` on failure); processes that carry the token keep the lock
    /// held.
    #[arg(long)]
    pub export: bool,
    // Where to ping.
    #[command(flatten)]
    pub ping: PingArgs,
    /// No message when the lock is held or a stale lock is taken over.
    #[arg(short, long)]
    pub quiet: bool,
}

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

#[derive(Debug, Args)]
pub struct Precheck {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// One budget for the whole call; when it runs out, exit 0.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub deadline: Option<Duration>,
    #[command(flatten)]
    pub slots: SlotsArg,
    // The schedule: fires missed are recorded.
    #[command(flatten)]
    pub schedule: FireScheduleArg,
    #[command(flatten)]
    pub late: LateArg,
    // Where to ping.
    #[command(flatten)]
    pub ping: PingArgs,
    /// No message when the lock is held.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct Status {
    /// Locks to show (default: every lock in DIR).
    #[arg(value_name = "LOCK")]
    pub locks: Vec<String>,
    /// Print JSON (schema in doc/json.md).
    #[arg(long)]
    pub json: bool,
    /// One budget for the whole call.
    ///
    /// A lock not judged by then (its processes not listed in time, or
    /// not reached) is shown unknown, and says so.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = STATUS_DEADLINE)]
    pub deadline: Duration,
    // The schedule: the next fire.
    #[command(flatten)]
    pub schedule: ScheduleArg,
}

#[derive(Debug, Args)]
pub struct History {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// Show at most N runs.
    #[arg(short = 'n', long = "limit", value_name = "N")]
    pub limit: Option<usize>,
    /// Only runs that started within DUR.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub since: Option<Duration>,
    /// One JSON object per run and line (schema in doc/json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct Check {
    /// The locks to check.
    #[arg(value_name = "LOCK", required = true)]
    pub locks: Vec<String>,
    /// CRITICAL when no run succeeded within DUR.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub max_age: Option<Duration>,
    /// CRITICAL when the current run has lasted longer than DUR.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub max_runtime: Option<Duration>,
    /// CRITICAL when more than N fires in a row were skipped.
    #[arg(long, value_name = "N")]
    pub max_skips: Option<u64>,
    /// One budget for the whole call; a lock not judged by then is
    /// UNKNOWN.
    ///
    /// A lock whose processes could not be listed in time, or that was
    /// not reached, is UNKNOWN and says so. The default answers within
    /// the 10s that monitoring agents (NRPE, Icinga) give a plugin.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = CHECK_DEADLINE)]
    pub deadline: Duration,
    // The schedule: CRITICAL on a missed fire.
    #[command(flatten)]
    pub schedule: ScheduleArg,
    #[command(flatten)]
    pub late: LateArg,
}

#[derive(Debug, Args)]
pub struct Metrics {
    /// Locks to describe (default: every lock in DIR).
    #[arg(value_name = "LOCK")]
    pub locks: Vec<String>,
    /// Write to this file atomically instead of printing.
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
    // The schedule: the next fire and the fires missed.
    #[command(flatten)]
    pub schedule: ScheduleArg,
    #[command(flatten)]
    pub late: LateArg,
}

#[derive(Debug, Args)]
pub struct Stop {
    /// The lock: a name or a path with a `/`.
    #[arg(value_name = "LOCK")]
    pub lock: String,
    /// The first signal.
    #[arg(long, value_name = "SIG", default_value = "TERM", value_parser = parse_signal)]
    pub signal: SignalArg,
    /// Grace before KILL (0: KILL right after the first signal).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = DEFAULT_GRACE)]
    pub kill_after: Duration,
    /// One budget for the whole call.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub deadline: Option<Duration>,
    /// Stop only the run whose pid is PID (the PID `status` shows), of a
    /// lock of several slots or of one.
    ///
    /// PID is the run's onlyone wrapper (the owner, for a script's hold),
    /// or its command's pid when no other run of the lock has it. Only a
    /// run that the lock proves live is chosen. When none has PID,
    /// nothing is stopped and stop exits 125, naming the pids that hold
    /// the lock. With --store, the holder whose wrapper has PID (this
    /// host's first: a pid is its host's).
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Option<u32>,
}

#[derive(Debug, Args)]
pub struct Reap {
    /// The jobs (lock names or paths) whose lingering processes to end.
    #[arg(value_name = "LOCK", required = true)]
    pub locks: Vec<String>,
    /// How long a process must have been idle.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = "10m")]
    pub idle: Duration,
    /// Grace between TERM and KILL (0: KILL right after TERM).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = DEFAULT_GRACE)]
    pub grace: Duration,
    /// One budget for every call reap makes.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true, default_value = "90s")]
    pub deadline: Duration,
    /// Show what would be ended, and why; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print every candidate as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print nothing unless a process was ended (or would be, with
    /// --dry-run) or something failed (for cron, which mails any output).
    #[arg(short, long, conflicts_with = "json")]
    pub quiet: bool,
}

/// A signal given by name (`TERM`, `SIGTERM`) or number (`15`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalArg(pub rustix::process::Signal);

impl fmt::Display for SignalArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&onlyone::signal::signal_name(self.0))
    }
}

fn parse_signal(s: &str) -> Result<SignalArg, String> {
    onlyone::signal::parse_signal(s).map(SignalArg)
}

/// A limit (`--max-time`, `--idle-timeout`): a duration more than 0. `0`
/// would end the run at once, while `timeout 0` means no limit: refused,
/// so that neither reading is guessed.
fn parse_limit(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!(
            "`{s}` would end the run as soon as it starts: a limit is more than 0 (for no \
             limit, leave the option out)"
        ));
    }
    Ok(d)
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

impl Run {
    /// What the supervision needs of these options (`--linger` is set by
    /// the directory store's run alone: a lease has no lingering runs).
    pub fn run_options(&self) -> onlyone::supervise::RunOptions {
        let mut opts = onlyone::supervise::RunOptions::default();
        opts.max_time = self.max_time;
        opts.kill_after = self.kill_after;
        opts.keep_strays = self.keep_strays;
        opts.idle_timeout = self.idle_timeout;
        opts
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

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        for bad in ["", "-1", "x", "5 parsecs", "inf", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn signals() {
        for (s, n) in [("TERM", 15), ("SIGINT", 2), ("hup", 1), ("9", 9)] {
            assert_eq!(parse_signal(s).unwrap().0.as_raw(), n, "{s}");
        }
        assert_eq!(parse_signal("SIGTERM").unwrap().to_string(), "TERM");
        for bad in ["FOO", "0", "999", "-1"] {
            assert!(parse_signal(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_default_grace_is_the_librarys() {
        assert_eq!(
            parse_duration(DEFAULT_GRACE),
            Ok(onlyone::signal::DEFAULT_GRACE)
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
