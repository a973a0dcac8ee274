//! `onlyone reap`: the reaper's command. Always exits 0; with `-q` it
//! prints only what it ended (or failed to end) and its errors.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;

use onlyone::names;
use onlyone::reap::{self, Fate, Job, ReapOptions};

use super::exit::Ending;
use super::options::{Adjust, DEFAULT_GRACE, parse_duration};
use super::{Ctx, journal, say};

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

impl Adjust for Reap {}

/// What `onlyone reap --help` says after the options.
pub const AFTER_HELP: &str = "\
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
  onlyone reap --dry-run --json sync";

pub fn reap(ctx: &Ctx, a: Reap) -> Ending {
    let deadline = Instant::now() + a.deadline;
    // A store holds no run reap could end (a store's run leaves nothing to
    // linger): reap works in a lock directory all the same, and says which
    // when the store may have made the user think otherwise.
    if ctx.store.is_some() && ctx.source() == names::DirSource::Default && !a.quiet {
        say(format_args!(
            "reap: a store is set (--store or $ONLYONE_STORE), but reap works on this host's \
             processes of the runs whose locks are in a lock directory, not on the store's \
             leases (a store's run leaves no lingering process: --linger is refused there); it \
             looks in the default lock directory `{}` (--dir or $ONLYONE_DIR names another)",
            ctx.dir().display()
        ));
    }
    let mut jobs = Vec::new();
    for l in &a.locks {
        match names::lock_path(l, ctx.dir()) {
            Ok(path) => {
                let name = names::display_name(&path, ctx.dir());
                // A lock of several slots: each slot's run is the job's
                // (under the job's name, so its journal is the lock's).
                let slots = onlyone::LockFile::open(&path)
                    .map(|lock| {
                        let numbers = lock.slot_numbers();
                        numbers
                            .into_iter()
                            .filter_map(|k| lock.slot(k).ok())
                            .map(|s| s.path().to_path_buf())
                            .collect()
                    })
                    .unwrap_or_else(|_| Vec::new());
                jobs.push(Job {
                    name: name.clone(),
                    lock: path,
                });
                jobs.extend(slots.into_iter().map(|lock| Job {
                    name: name.clone(),
                    lock,
                }));
            }
            Err(e) => say(format_args!("reap: {e}; skipping it")),
        }
    }
    if jobs.is_empty() {
        return Ending::FailedOpen;
    }
    if !a.dry_run
        && let Err(e) = names::ensure_dir(ctx.dir(), ctx.source())
    {
        say(format_args!("reap: {e}"));
        return Ending::FailedOpen;
    }
    let opts = ReapOptions::new(a.idle, a.grace, deadline).dry_run(a.dry_run);
    let report = reap::reap(&jobs, ctx.dir(), &opts);
    if a.json {
        let mut out = std::io::stdout().lock();
        // A closed stdout must not change the exit code.
        if let Err(e) = serde_json::to_writer_pretty(&mut out, &report) {
            say(format_args!("reap: {e}"));
        }
        let _ = writeln!(out);
    } else {
        for c in &report.candidates {
            let what = match (c.verdict, report.dry_run) {
                (Fate::Ended, true) => "would end",
                (Fate::Ended, false) => "ended",
                (Fate::Failed, _) => "failed to end",
                _ => "kept",
            };
            // Kept processes of jobs that were not named are not news;
            // with -q, no kept process is.
            // A reap that cannot end what it should (too short a
            // deadline) is news under cron too.
            let news = match c.verdict {
                Fate::KeptNotNamed => false,
                Fate::Ended | Fate::Failed | Fate::KeptNoTime => true,
                _ => !a.quiet,
            };
            if !news {
                continue;
            }
            let fix = if c.verdict == Fate::KeptNoTime {
                " (give reap a longer --deadline)"
            } else {
                ""
            };
            let _ = writeln!(
                std::io::stdout(),
                "{what} pid {} (`{}`) of `{}`: {}{fix}",
                c.pid,
                c.command.as_deref().unwrap_or("?"),
                c.job.as_deref().unwrap_or("?"),
                c.reason
            );
        }
    }
    if !report.dry_run {
        journal_reaped(ctx, &jobs, &report, deadline);
    }
    for e in &report.errors {
        say(format_args!("reap: {e}"));
    }
    Ending::Done
}

/// One `reap` event per run whose processes were ended, in its job's
/// journal (written by the deadline, or not at all).
fn journal_reaped(ctx: &Ctx, jobs: &[Job], report: &reap::ReapReport, deadline: Instant) {
    let mut done: Vec<&str> = Vec::new();
    for c in &report.candidates {
        let (Fate::Ended, Some(job), Some(token)) = (c.verdict, &c.job, &c.token) else {
            continue;
        };
        if done.contains(&token.as_str()) {
            continue;
        }
        done.push(token);
        if let Some(j) = jobs.iter().find(|j| &j.name == job)
            && let Ok(lock) = onlyone::LockFile::open(&j.lock)
        {
            journal::reaped(
                &ctx.journal(&lock.with_deadline(deadline)),
                token,
                c.pid,
                c.command.as_deref(),
            );
        }
    }
}
