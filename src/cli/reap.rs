//! `onlyone reap`: the reaper's command. Always exits 0; with `-q` it
//! prints only what it ended (or failed to end) and its errors.

use std::io::Write;
use std::time::Instant;

use onlyone::names;
use onlyone::reap::{self, Fate, Job, ReapOptions};

use super::exit::{Code, Ending};
use super::{Ctx, args, journal, say};

pub fn reap(ctx: &Ctx, a: args::Reap) -> Code {
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
        return Ending::FailedOpen.code();
    }
    if !a.dry_run
        && let Err(e) = names::ensure_dir(ctx.dir(), ctx.source())
    {
        say(format_args!("reap: {e}"));
        return Ending::FailedOpen.code();
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
    Ending::Done.code()
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
