//! `onlyone acquire`: a lock taken for the calling shell, for scripts
//! (paired with `release`), and `--export`'s assignments; its options.

use std::path::PathBuf;

use clap::Args;

use onlyone::{AcquireOptions, Error, Owner};

use super::exit::Ending;
use super::keeper::start_keeper;
use super::options::{Adjust, BusyArgs, PingArgs, SlotsArg, in_order, texts};
use super::ping::{self, Pings};
use super::{Ctx, deadline_of, fail, journal, print_stdout, report_takeover, say};

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

/// What `onlyone acquire --help` says after the options.
pub const AFTER_HELP: &str = "\
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
  ./worker &                 # carries the token: part of the run";

impl Ctx {
    pub(super) fn acquire(&self, a: Acquire) -> Ending {
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
                Err(ending) => format!("exit {}\n", ending.number()),
            };
            print_stdout(&line);
        }
        code.map_or_else(|c| c, |_| Ending::Done)
    }

    /// Takes the lock for the calling shell; on success returns what
    /// `--export` prints.
    fn acquire_lock(&self, a: &Acquire) -> Result<Exported, Ending> {
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
                })
            }
            Err(e) => Err(self.refused(
                &lock,
                e,
                &name,
                a.quiet,
                Ending::Skipped {
                    held_exit: a.busy.held_exit,
                },
            )),
        }
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
