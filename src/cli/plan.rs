//! What was typed, checked before anything runs: every refusal of an
//! option or a combination, of an untrusted lock directory, and of what a
//! place cannot give, in the order the command says them (the first that
//! applies wins), and how each command fails by its [`Command::spec`]:
//! a new command that is not handled here is a compile error.

use std::ffi::OsString;
use std::time::Duration;

use onlyone::command::compact_duration;
use onlyone::names::{self, DirSource};
use onlyone::place::{Feature, Kind};

use super::args::{self, Cli, Command, StoreUse};
use super::exit::{CheckState, Code, Ending, FailMode};
use super::{Ctx, fail, print_stdout, say, subcommand};

/// What to do instead of `acquire` and `release` with a store.
const SCRIPTS_WITH_A_STORE: &str = "put the work under `onlyone --store URL run NAME -- \
     COMMAND`, which renews the lease while the command runs";

/// How a usage error exits, by the subcommand's name (clap failed: there
/// is no [`Command`] to ask): a precheck fails open, and a reap always
/// exits 0; a monitoring plugin's usage error is UNKNOWN; else 125. A
/// unit test holds [`fails_by_name`] equal to every command's
/// [`Command::spec`].
pub(super) fn usage_failure(argv: &[OsString]) -> Code {
    match fails_by_name(subcommand(argv)) {
        FailMode::Open { .. } => {
            let c = subcommand(argv).unwrap_or_default();
            say(format_args!(
                "{c}: exiting 0 all the same (fail open: it never blocks a fire)"
            ));
            Ending::FailedOpen.code()
        }
        FailMode::Unknown => Ending::Check(CheckState::Unknown).code(),
        FailMode::Fail | FailMode::ExportLine => Ending::Failed.code(),
    }
}

/// How the command named `name` fails before its work, as its
/// [`Command::spec`] says (`acquire --export`'s `exit N` line is printed
/// by `usage_hints`, which sees the `--export`).
fn fails_by_name(name: Option<&str>) -> FailMode {
    match name {
        Some("precheck") => FailMode::Open {
            note: "; letting the fire run (fail open)",
        },
        Some("reap") => FailMode::Open { note: "" },
        Some("check") => FailMode::Unknown,
        _ => FailMode::Fail,
    }
}

/// Options that parse but would be silently ignored: refused, naming them
/// and the fix. With a store, `--dir` and `--allow-shared-fs` mean nothing
/// but to `reap` (the store's commands never look at a lock directory);
/// `run`'s own combinations are [`refused_combination`].
pub(super) fn ignored_options(typed: &args::Typed, cli: &Cli) -> Option<String> {
    let typed = |id: &str| typed.has(id);
    let store = cli.globals.store.as_deref().is_some_and(|s| !s.is_empty());
    let spec = cli.command.spec();
    let store_command = (spec.with_store == StoreUse::Works).then_some(spec.name);
    if store && let Some(sub) = store_command {
        let from = if typed("store") {
            ("--store", "leave --store out")
        } else {
            (
                "$ONLYONE_STORE",
                "unset ONLYONE_STORE (`env -u ONLYONE_STORE onlyone ...`)",
            )
        };
        if let Some(opt) = ["dir", "state_dir", "allow_shared_fs"]
            .into_iter()
            .find(|o| typed(o))
        {
            let works_on = if opt == "state_dir" {
                "keeps its history in the store, not in a state directory"
            } else {
                "works on the store's leases, not on a lock directory"
            };
            return Some(format!(
                "--{} has no use with a store ({} is set): `{sub}` {works_on}; drop --{0}, or \
                 to use the lock directory {}",
                opt.replace('_', "-"),
                from.0,
                from.1
            ));
        }
    }
    if store && let Some(refused) = refused_with_store(&cli.command) {
        return Some(refused);
    }
    if store
        && typed("kill_after")
        && let Err(e) = onlyone::place::Kind::Store.supports(Feature::StopGrace)
        && let Command::Stop(a) = &cli.command
    {
        return Some(format!(
            "--kill-after is not supported by `stop` with --store: {}; drop --kill-after (the \
             run's own grace is its `run --kill-after`), or end a run of this host sooner by \
             signalling its wrapper: kill -KILL PID (`onlyone --store URL status {}` shows it)",
            e.why, a.lock
        ));
    }
    let Command::Run(a) = &cli.command else {
        return None;
    };
    if let Some(refused) = refused_combination(a) {
        return Some(refused);
    }
    if store {
        return lease_misfit(a, typed("kill_after"));
    }
    None
}

/// The schedule's options given with a store, which keeps no schedule
/// yet: refused, naming them, rather than ignored.
fn refused_with_store(command: &Command) -> Option<String> {
    let (given, fire): (bool, Option<&super::schedule_args::FireArgs>) = match command {
        Command::Run(a) => (
            a.schedule.schedule.is_some() || a.late.late.is_some(),
            Some(&a.fire),
        ),
        Command::Precheck(a) => (a.schedule.schedule.is_some() || a.late.late.is_some(), None),
        Command::Check(a) => (a.schedule.schedule.is_some() || a.late.late.is_some(), None),
        Command::Metrics(a) => (a.schedule.schedule.is_some() || a.late.late.is_some(), None),
        Command::Status(a) => (a.schedule.schedule.is_some(), None),
        Command::Acquire(_)
        | Command::Release(_)
        | Command::Stop(_)
        | Command::Reap(_)
        | Command::History(_)
        | Command::Completions(_)
        | Command::Manpages(_)
        | Command::Keeper(_)
        | Command::LeaseWatchdog(_) => (false, None),
    };
    let opt = if given {
        "--schedule (or $ONLYONE_SCHEDULE, or --late)"
    } else {
        let f = fire?;
        if f.catch_up {
            "--catch-up"
        } else if f.jitter.is_some() {
            "--jitter"
        } else if f.spread.is_some() {
            "--spread"
        } else {
            return None;
        }
    };
    Some(format!(
        "{opt} is not supported with --store yet: a store keeps no schedule; drop it (unset \
         ONLYONE_SCHEDULE), or use the lock directory (leave --store out)"
    ))
}

/// Options given together that cannot both apply: refused rather than
/// one of them silently ignored. With `--linger` the wrapper exits with
/// the command and leaves the lock to the work that outlives it, which
/// nothing of the wrapper's then watches: a limit would bound the
/// command alone.
pub(super) fn refused_combination(a: &args::Run) -> Option<String> {
    if !a.linger {
        return None;
    }
    let limit = if a.idle_timeout.is_some() {
        "--idle-timeout"
    } else if a.max_time.is_some() {
        "--max-time"
    } else {
        return None;
    };
    Some(format!(
        "{limit} cannot be used with --linger: onlyone exits with the command and leaves \
         the lock to the work that outlives it, so the limit would never apply to that \
         work; end a lingering run once idle with `onlyone reap --idle DUR {lock}` before \
         each fire (e.g. `onlyone reap -q --idle 10m {lock}; onlyone run --linger {lock} \
         -- ...`), or drop --linger",
        lock = a.lock
    ))
}

/// With a store, a grace (`--kill-after`) that does not fit in the lease:
/// the message names what was typed and what is a default, and the fix.
fn lease_misfit(a: &args::Run, grace_typed: bool) -> Option<String> {
    use onlyone::place::store::timing::LeaseTiming;
    let free = LeaseTiming::new(a.lease, Duration::ZERO).ok()?;
    if LeaseTiming::new(a.lease, a.kill_after).is_ok() {
        return None;
    }
    let used = free.renew_every + free.call_timeout + free.margin;
    let largest = a
        .lease
        .saturating_sub(used)
        .saturating_sub(Duration::from_millis(1));
    // The shortest whole-second lease that fits the grace.
    let fits = (1..=100_000u64)
        .map(Duration::from_secs)
        .find(|l| LeaseTiming::new(*l, a.kill_after).is_ok());
    // What is shown must fit as shown: whole seconds, or milliseconds.
    let largest = if largest >= Duration::from_secs(1) {
        Duration::from_secs(largest.as_secs())
    } else {
        Duration::from_millis(largest.as_millis() as u64)
    };
    let grace = compact_duration(a.kill_after);
    let what = if grace_typed {
        format!("--kill-after {grace}")
    } else {
        format!("the default --kill-after {grace} (the grace between TERM and KILL)")
    };
    Some(format!(
        "{what} does not fit in --lease {}: a holder must end its command before its lease can \
         run out, and this lease leaves room for a grace of at most {}; pass --kill-after {1} \
         (or less), {}",
        compact_duration(a.lease),
        compact_duration(largest),
        match fits {
            Some(l) => format!(
                "or lengthen the lease (--lease {} fits it)",
                compact_duration(l)
            ),
            None => "or lengthen the lease".to_owned(),
        }
    ))
}

/// Refuses, before anything is read or signalled, a lock directory
/// reached through another account's symbolic link, and a default
/// one that another account made or could change, for every command
/// that looks in it; each command fails its own way (a precheck and a
/// reap exit 0, a check is UNKNOWN, `acquire --export` prints its
/// `exit N`). Otherwise an explicit `--dir` or `$ONLYONE_DIR` is the
/// caller's choice: readers read it, writers refuse it when they write.
pub(super) fn refuse_untrusted_dir(ctx: &Ctx, command: &Command) -> Option<Code> {
    let spec = command.spec();
    // With a store, only the reaper works in the directory.
    let local = ctx.store.is_none() || spec.with_store == StoreUse::DirAnyway;
    if !local || !spec.reads_dir {
        return None;
    }
    let default = ctx.source() == DirSource::Default;
    let e = default
        .then(|| names::check_default_dir(ctx.dir()).err())
        .flatten()
        .or_else(|| names::check_links(ctx.dir()).err())?;
    Some(match spec.fails {
        FailMode::Open { note } => {
            say(format_args!("{}: {e}{note}", spec.name));
            Ending::FailedOpen.code()
        }
        FailMode::Unknown => {
            print_stdout(&format!("ONLYONE UNKNOWN - {e}\n"));
            Ending::Check(CheckState::Unknown).code()
        }
        FailMode::ExportLine => {
            print_stdout(&format!("exit {}\n", Ending::Failed.number()));
            fail(e)
        }
        FailMode::Fail => fail(e),
    })
}

/// What the place refuses of the command before it starts: `acquire`
/// and `release` with a store, `stop --signal` other than TERM with a
/// store. (`run`'s own are [`unsupported`], after its ping URLs.)
pub(super) fn refused_by_place(place: Kind, command: &Command) -> Option<Code> {
    let spec = command.spec();
    if let StoreUse::Refused(feature) = spec.with_store {
        let code = refuse(place, feature, spec.name, SCRIPTS_WITH_A_STORE)?;
        if spec.fails == FailMode::ExportLine {
            print_stdout(&format!("exit {}\n", Ending::Failed.number()));
        }
        return Some(code);
    }
    if let Command::Stop(a) = command
        && a.signal.0 != rustix::process::Signal::TERM
    {
        let instead = format!(
            "to send {} to a run of this host, signal its wrapper (the pid `onlyone --store \
             URL status` shows), which forwards it to the command",
            a.signal
        );
        let flag = format!("--signal {}", a.signal);
        return refuse(place, Feature::StopSignal, &flag, &instead);
    }
    None
}

/// `flag` asks for `feature`: refused, with why and `instead`, where
/// `place` cannot give it.
fn refuse(place: Kind, feature: Feature, flag: &str, instead: &str) -> Option<Code> {
    refusal(place, feature, flag, instead).map(fail)
}

/// The options of `run` that `place` cannot honour, refused with why and
/// what to do instead (never ignored).
pub(super) fn unsupported(place: Kind, a: &args::Run) -> Option<String> {
    let asked = [
        (a.linger, Feature::Linger, "--linger"),
        (a.replace, Feature::Replace, "--replace"),
    ];
    let (_, feature, flag) = asked.into_iter().find(|(on, _, _)| *on)?;
    let instead = match feature {
        Feature::Linger => "keep the work under the command (have it wait for what it started, \
                            e.g. `tmux wait-for`), or run it without --store"
            .to_owned(),
        _ => format!(
            "stop the live run first (onlyone --store URL stop {0}), then run, or wait for it \
             (--wait DUR)",
            a.lock
        ),
    };
    refusal(place, feature, flag, &instead)
}

/// What `place` says when `flag` asks it for `feature` it cannot give:
/// the flag, why, and `instead`; `None` where it can.
pub(super) fn refusal(place: Kind, feature: Feature, flag: &str, instead: &str) -> Option<String> {
    let e = place.supports(feature).err()?;
    Some(format!(
        "{flag} is not supported with --store: {}; {instead}",
        e.why
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A usage error fails as the command's spec says: every subcommand,
    /// parsed from the least it takes (a value for each required
    /// argument), against its name.
    #[test]
    fn usage_errors_fail_as_each_commands_spec_says() {
        let full = args::full_command();
        let mut seen = 0;
        for sub in full.get_subcommands() {
            let name = sub.get_name();
            let mut argv: Vec<OsString> = vec!["onlyone".into(), name.into()];
            let mut last = Vec::new();
            for a in sub.get_arguments().filter(|a| a.is_required_set()) {
                let value: OsString = a
                    .get_possible_values()
                    .first()
                    .map_or_else(|| "1".into(), |v| v.get_name().into());
                if a.is_last_set() {
                    last.extend(["--".into(), value]);
                } else if let Some(long) = a.get_long() {
                    argv.extend([format!("--{long}").into(), value]);
                } else {
                    argv.push(value);
                }
            }
            argv.extend(last);
            let (_, cli) = args::parse(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            let spec = cli.command.spec();
            assert_eq!(spec.name, name, "{argv:?}");
            assert_eq!(fails_by_name(Some(name)), spec.fails, "{name}");
            seen += 1;
        }
        assert!(seen > 10, "{seen}");
    }
}
