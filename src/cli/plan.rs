//! What was typed, checked before anything runs: every refusal of an
//! option or a combination, of an untrusted lock directory, and of what a
//! place cannot give, in the order the command says them (the first that
//! applies wins), and how each command fails by its [`Command::spec`]:
//! a new command that is not handled here is a compile error.

use std::ffi::OsString;

use onlyone::names::{self, DirSource};
use onlyone::place::{Feature, Kind};

use super::args::{self, Cli, Command, StoreUse};
use super::exit::{CheckState, Ending, FailMode};
use super::{Ctx, fail, print_stdout, say, subcommand};

/// What to do instead of `acquire` and `release` with a store.
const SCRIPTS_WITH_A_STORE: &str = "put the work under `onlyone --store URL run NAME -- \
     COMMAND`, which renews the lease while the command runs";

/// How a usage error exits, by the subcommand's name (clap failed: there
/// is no [`Command`] to ask): a precheck fails open, and a reap always
/// exits 0; a monitoring plugin's usage error is UNKNOWN; else 125. A
/// unit test holds [`fails_by_name`] equal to every command's
/// [`Command::spec`].
pub(super) fn usage_failure(argv: &[OsString]) -> Ending {
    match fails_by_name(subcommand(argv)) {
        FailMode::Open { .. } => {
            let c = subcommand(argv).unwrap_or_default();
            say(format_args!(
                "{c}: exiting 0 all the same (fail open: it never blocks a fire)"
            ));
            Ending::FailedOpen
        }
        FailMode::Unknown => Ending::Check(CheckState::Unknown),
        FailMode::Fail | FailMode::ExportLine => Ending::Failed,
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
/// `run`'s own combinations are `run::refused_combination`.
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
    if let Some(refused) = super::run::refused_combination(a) {
        return Some(refused);
    }
    if store {
        return super::run::lease_misfit(a, typed("kill_after"));
    }
    None
}

/// Refuses, before anything is read or signalled, a lock directory
/// reached through another account's symbolic link, and a default
/// one that another account made or could change, for every command
/// that looks in it; each command fails its own way (a precheck and a
/// reap exit 0, a check is UNKNOWN, `acquire --export` prints its
/// `exit N`). Otherwise an explicit `--dir` or `$ONLYONE_DIR` is the
/// caller's choice: readers read it, writers refuse it when they write.
pub(super) fn refuse_untrusted_dir(ctx: &Ctx, command: &Command) -> Option<Ending> {
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
            Ending::FailedOpen
        }
        FailMode::Unknown => {
            print_stdout(&format!("ONLYONE UNKNOWN - {e}\n"));
            Ending::Check(CheckState::Unknown)
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
/// store. (`run`'s own are `run::unsupported`, after its ping URLs.)
pub(super) fn refused_by_place(place: Kind, command: &Command) -> Option<Ending> {
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
fn refuse(place: Kind, feature: Feature, flag: &str, instead: &str) -> Option<Ending> {
    super::place::refusal(place, feature, flag, instead).map(fail)
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
