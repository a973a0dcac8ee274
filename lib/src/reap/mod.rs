//! The reaper: ends the lingering processes of finished or idle runs of the
//! named jobs, so that "the process is alive" means "the run is working"
//! again (a lock that asks whether its owner is alive depends on processes
//! dying when their work is done).
//!
//! A process is ended only when all three hold:
//!
//! 1. **It belongs to a run of a named job**: its environment carries
//!    `ONLYONE_LOCK` naming that job's lock file, or the `ONLYONE_TOKEN` of
//!    the run that lock names now (a process a terminal server started for
//!    the run, `run --linger`), or it is in the run's process group, or it
//!    owns the lock (a script that took it with `acquire`, a program with
//!    the library), or a run of the job left it running with
//!    `--keep-strays` (its wrapper noted it, by pid and start time, in the
//!    state: `note_kept`). An environment counts only for processes of
//!    the job's user (see `scan.rs`); what a wrapper noted counts whatever
//!    the process's user. Nothing else is ever touched.
//! 2. **Its run is finished or idle**: the lock no longer names its token
//!    (the wrapper is gone, or the lock was released or taken over), or
//!    every process of the run has been idle for the window.
//! 3. **It has been idle for the window** (see "Idle" in doc/operations.md: no CPU time, no
//!    byte read or written). One call cannot watch for ten minutes, so the
//!    reaper keeps a state file beside the locks (`.onlyone-reap.json`):
//!    per process, by pid and start time, the counters and when they last
//!    changed. A process seen for the first time counts as active now. The
//!    state file is replaced atomically and guarded by a flock on
//!    `.onlyone-reap.lock` against a concurrent reap.
//!
//! A lingering run's terminal server (a lingerer without a terminal whose
//! children lead sessions on terminals of their own: tmux's server) is
//! judged by its panes, not by its own counters: redrawing a status line
//! for an attached client, answering `tmux ls`, is housekeeping for
//! whoever watches, not the run's work.
//!
//! Ending is TERM, the grace, KILL, then a wait (up to 5 s) until the
//! processes are really gone, and for a run whose wrapper still lives, until
//! the wrapper has released the lock: a precheck right after must not see a
//! finished run as alive. The deadline caps the grace, a second kept for
//! the KILL and the look after it; with less than that second left,
//! nothing is started (the processes are kept for the next reap). What is
//! ended is ended: never reported failed for want of time to see it go.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::lock::LockFile;
use crate::procfs::{self, ProcId};
use crate::signal::GracefulStop;

mod notes;
mod scan;

use notes::Seen;
use scan::{JobView, Marked, live_token};

use crate::lock::work;
pub use crate::lock::work::{Keeper, keepers};
pub use notes::{note_kept, note_lingering};

/// What keeps a lock held that `holder` proves held, when it is a
/// lingering run none of whose own work lives any more: the sessions
/// opened later on its terminal server, the processes outside its work
/// that carry its token. Empty otherwise (its work lives, it does not
/// linger, or `/proc` could not be listed by `deadline`).
pub fn keepers_of(
    record: &crate::Record,
    holder: &crate::Holder,
    deadline: Option<Instant>,
) -> Vec<Keeper> {
    if !matches!(holder, crate::Holder::Member { .. }) || record.lingered.is_none() {
        return Vec::new();
    }
    keepers(record, deadline).unwrap_or_default()
}

/// How long to wait, after the processes are gone, for a live wrapper to
/// release its lock.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// What ending needs beyond the grace: time for a KILL to take effect and
/// for the processes to be seen gone. A graceful stop is started only
/// when this is left of the deadline, and its grace is cut so that this
/// is left after it.
const KILL_RESERVE: Duration = Duration::from_secs(1);

/// A job to reap: its name and its lock file.
#[derive(Debug, Clone)]
pub struct Job {
    /// The name shown in reports.
    pub name: String,
    /// The lock file.
    pub lock: PathBuf,
}

/// How to reap.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReapOptions {
    /// How long a process must have been idle.
    pub idle: Duration,
    /// Grace between TERM and KILL.
    pub grace: Duration,
    /// One budget for every call.
    pub deadline: Instant,
    /// Show what would be ended; change nothing.
    pub dry_run: bool,
}

/// What became of a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Fate {
    /// It used CPU or did I/O since the last look, or its run is active.
    KeptBusy,
    /// It belongs to a job that was not named.
    KeptNotNamed,
    /// It carries a named job's token but is not its run's work: a session
    /// that the run's terminal server opened later, for someone else, or
    /// that server while such a session lives in it (see "The run's own
    /// work" in the module docs).
    KeptNotWork,
    /// Idle, but not yet for the whole window (or seen for the first time).
    KeptIdleTooShort,
    /// Idle for the window, but too little is left of the deadline to end
    /// it and see it gone (a second): left for the next reap.
    KeptNoTime,
    /// It was ended (with `--dry-run`: it would be).
    Ended,
    /// Ending it failed, or it would not die in time.
    Failed,
}

/// A process that carries a run's marker, and what became of it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Candidate {
    /// Its pid.
    pub pid: u32,
    /// Its start time, clock ticks since boot.
    pub start: u64,
    /// The named job it belongs to, if any.
    pub job: Option<String>,
    /// The lock its environment names.
    pub lock: Option<String>,
    /// Its run's token.
    pub token: Option<String>,
    /// Its command line.
    pub command: Option<String>,
    /// What became of it.
    pub verdict: Fate,
    /// Why, as a sentence.
    pub reason: String,
    /// How long it has been idle, as far as the reaper knows.
    pub idle_seconds: Option<u64>,
}

/// The result of a reap.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct ReapReport {
    /// Every candidate and its fate.
    pub candidates: Vec<Candidate>,
    /// Errors met on the way (a reap never fails as a whole).
    pub errors: Vec<String>,
    /// False when the deadline stopped the reap before the end.
    pub complete: bool,
    /// True for `--dry-run`.
    pub dry_run: bool,
}

impl ReapOptions {
    /// Reap processes idle for `idle`, with `grace` between TERM and KILL,
    /// and every call done by `deadline`.
    pub fn new(idle: Duration, grace: Duration, deadline: Instant) -> ReapOptions {
        ReapOptions {
            idle,
            grace,
            deadline,
            dry_run: false,
        }
    }

    /// Only say what would be ended.
    pub fn dry_run(mut self, dry_run: bool) -> ReapOptions {
        self.dry_run = dry_run;
        self
    }
}

/// What one reap saw of a process.
#[derive(Debug, Clone, Copy)]
struct Look {
    /// How long its counters have not changed.
    idle_ms: u64,
    /// Seen before, and active since.
    busy: bool,
    /// Seen for the first time.
    first: bool,
}

/// Reaps the lingering processes of `jobs`; `state_dir` holds the state
/// file. Never fails as a whole: errors are in the report. Every call it
/// makes is bounded by the deadline; when it passes, the reap stops where
/// it is and the report says so (`complete: false`). Nothing is left
/// running when it returns.
pub fn reap(jobs: &[Job], state_dir: &Path, opts: &ReapOptions) -> ReapReport {
    let mut report = ReapReport {
        dry_run: opts.dry_run,
        ..ReapReport::default()
    };
    let mut guarded = match notes::open(state_dir, opts.deadline, &mut report.errors) {
        Ok(g) => g,
        Err(e) => {
            report.errors.push(e);
            return report;
        }
    };
    let here = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let mut views: Vec<JobView<'_>> = jobs
        .iter()
        .map(|job| JobView::new(job, &here, guarded.owner))
        .collect();
    for view in &views {
        if let Some(why) = &view.unseen {
            report.errors.push(format!(
                "cannot look at the lock of `{}`: {why}; its runs count as live",
                view.job.name
            ));
        }
    }
    let state = &mut guarded.state;
    state
        .kept
        .retain(|id, _| id.parse::<ProcId>().is_ok_and(ProcId::is_alive));
    let marked = scan::scan(
        &mut views,
        &state.kept,
        guarded.owner,
        opts.deadline,
        &mut report.errors,
    );
    let looks = update_looks(&mut guarded.state.procs, &marked);
    let works = run_works(
        &mut views,
        &marked,
        &mut guarded.state.runs,
        opts.deadline,
        &mut report.errors,
    );
    let (mut candidates, mut to_end) = judge(&views, &marked, &looks, opts.idle, &works);
    keep_without_time(&mut candidates, &mut to_end, opts);
    if !opts.dry_run && !to_end.is_empty() {
        end_candidates(&mut candidates, &to_end, opts);
        wait_releases(&views, &candidates, &to_end, opts.deadline);
        for &i in &to_end {
            guarded.state.procs.remove(&candidates[i].id().to_string());
        }
    }
    if !opts.dry_run
        && let Err(e) = guarded.save(state_dir)
    {
        report.errors.push(e);
    }
    drop(guarded);
    let out_of_time = Instant::now() >= opts.deadline;
    if out_of_time {
        report
            .errors
            .push("the deadline ran out; the reap stopped where it was".into());
    }
    report.candidates = candidates;
    report.complete = !out_of_time;
    report
}

impl Candidate {
    fn id(&self) -> ProcId {
        ProcId {
            pid: self.pid,
            start: self.start,
        }
    }
}

/// Updates what each process was last seen doing (the state keeps only
/// the processes seen now), and says how each one looks: first seen, busy
/// since the last look, or idle for how long.
fn update_looks(procs: &mut BTreeMap<String, Seen>, marked: &[Marked]) -> HashMap<ProcId, Look> {
    let now = notes::clock_ms();
    let mut looks = HashMap::new();
    let mut next = BTreeMap::new();
    for m in marked {
        let k = m.id.to_string();
        let prev = procs.get(&k).copied();
        let same = prev.is_some_and(|p| {
            p.cpu == m.counters.cpu_ticks && p.io == m.counters.io_bytes && p.io.is_some()
        });
        let changed_ms = match prev {
            Some(p) if same => p.changed_ms,
            _ => now,
        };
        // First sight counts as active now; unmeasurable I/O is activity.
        looks.insert(
            m.id,
            Look {
                idle_ms: u64::try_from(now.saturating_sub(changed_ms)).unwrap_or(0),
                busy: prev.is_some() && !same,
                first: prev.is_none(),
            },
        );
        next.insert(
            k,
            Seen {
                cpu: m.counters.cpu_ticks,
                io: m.counters.io_bytes,
                changed_ms,
            },
        );
    }
    *procs = next;
    looks
}

/// The work of each lingering run a candidate belongs to, by token: the
/// live runs' from their records, the others' from what the state
/// remembers of them (a run's record is gone once the lock is freed or
/// taken over, and a session its terminal server opened later still
/// carries its token). The state keeps what a live lingering run left,
/// for as long as a process carries its token.
fn run_works(
    views: &mut [JobView<'_>],
    marked: &[Marked],
    runs: &mut BTreeMap<String, notes::Left>,
    deadline: Instant,
    errors: &mut Vec<String>,
) -> HashMap<String, work::Work> {
    let mut works = HashMap::new();
    for view in views.iter_mut() {
        if let (Ok(Some(token)), Some((left, w))) = (&view.live, view.work.take()) {
            runs.insert(token.clone(), notes::Left::of(&left));
            works.insert(token.clone(), w);
        }
    }
    runs.retain(|token, _| marked.iter().any(|m| m.token.as_ref() == Some(token)));
    for (token, left) in runs.iter() {
        if works.contains_key(token)
            || !marked
                .iter()
                .any(|m| m.job.is_some() && m.token.as_ref() == Some(token))
        {
            continue;
        }
        let Some(l) = left.lingered() else {
            continue;
        };
        match work::Work::load(&l, Some(deadline)) {
            Ok(w) => {
                works.insert(token.clone(), w);
            }
            Err(e) => errors.push(format!("cannot list the processes of a lingering run: {e}")),
        }
    }
    works
}

/// Decides the fate of every candidate: ended only when it belongs to a
/// named job, is its run's work, its run is over or wholly idle, and it has
/// been idle for the window. Returns the candidates and the indexes of
/// those to end.
fn judge(
    views: &[JobView<'_>],
    marked: &[Marked],
    looks: &HashMap<ProcId, Look>,
    idle: Duration,
    works: &HashMap<String, work::Work>,
) -> (Vec<Candidate>, Vec<usize>) {
    // Whether a process is its run's work (`Err`: why not).
    let work_of = |m: &Marked| match m.token.as_ref().and_then(|t| works.get(t)) {
        Some(w) => w.judge(m.id),
        None => Ok(()),
    };
    // Whether a process is one of its run's terminal servers.
    let server = |m: &Marked| {
        m.token
            .as_ref()
            .and_then(|t| works.get(t))
            .is_some_and(|w| w.is_terminal_server(m.id))
    };
    let window_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    let idle_enough = |l: &Look| !l.first && !l.busy && l.idle_ms >= window_ms;
    let window = crate::text::compact_duration(idle);
    let mut candidates = Vec::new();
    let mut to_end = Vec::new();
    for m in marked {
        let look = looks[&m.id];
        let mut c = Candidate {
            pid: m.id.pid,
            start: m.id.start,
            job: None,
            lock: m.lock.clone(),
            token: m.token.clone(),
            command: procfs::command_line(m.id.pid),
            verdict: Fate::KeptNotNamed,
            reason: String::new(),
            idle_seconds: Some(look.idle_ms / 1000),
        };
        let (verdict, reason) = match m.job.map(|i| &views[i]) {
            None => (Fate::KeptNotNamed, not_named(m)),
            Some(view) if work_of(m).is_err() => {
                c.job = Some(view.job.name.clone());
                let why = work_of(m).err().map(|w| w.to_string()).unwrap_or_default();
                (Fate::KeptNotWork, why)
            }
            Some(view) => {
                c.job = Some(view.job.name.clone());
                match &view.live {
                    Err(why) => (
                        Fate::KeptBusy,
                        format!("its lock cannot be read ({why}), so its run counts as live"),
                    ),
                    Ok(live) if live.is_some() && *live == m.token => {
                        // A live run: every process of it must have been
                        // idle for the window, and all must be measurable.
                        let (run, aside) = run_looks(m, marked, looks, &work_of, &server);
                        let (fate, why) =
                            run_fate(&run, view.unmeasurable, &idle_enough, &window, true);
                        (fate, with_servers_aside(why, aside))
                    }
                    // A terminal server goes with its panes: judged by
                    // them, its own housekeeping aside.
                    Ok(_) if server(m) => {
                        let (run, aside) = run_looks(m, marked, looks, &work_of, &server);
                        let (fate, why) = run_fate(&run, false, &idle_enough, &window, false);
                        (fate, with_servers_aside(why, aside))
                    }
                    Ok(_) => over_run_fate(&look, &idle_enough, &window),
                }
            }
        };
        c.verdict = verdict;
        c.reason = reason;
        if verdict == Fate::Ended {
            to_end.push(candidates.len());
        }
        candidates.push(c);
    }
    (candidates, to_end)
}

/// How the processes of `m`'s run that are its work look, its terminal
/// servers set aside (true when one was) unless nothing else of the run
/// is left: a server's own CPU time and I/O are housekeeping for whoever
/// watches (see [`work::Work::is_terminal_server`]).
fn run_looks(
    m: &Marked,
    marked: &[Marked],
    looks: &HashMap<ProcId, Look>,
    work_of: &impl Fn(&Marked) -> Result<(), work::NotWork>,
    server: &impl Fn(&Marked) -> bool,
) -> (Vec<Look>, bool) {
    let run: Vec<&Marked> = marked
        .iter()
        .filter(|o| o.job == m.job && o.token == m.token)
        .filter(|o| work_of(o).is_ok())
        .collect();
    let panes: Vec<Look> = run
        .iter()
        .filter(|o| !server(o))
        .map(|o| looks[&o.id])
        .collect();
    if panes.is_empty() || panes.len() == run.len() {
        (run.iter().map(|o| looks[&o.id]).collect(), false)
    } else {
        (panes, true)
    }
}

/// `why`, saying that the run's terminal server was set aside.
fn with_servers_aside(why: String, aside: bool) -> String {
    if aside {
        format!("{why} (its terminal server's own housekeeping aside)")
    } else {
        why
    }
}

/// Why a marked process is not of a named job.
fn not_named(m: &Marked) -> String {
    match (&m.lock, &m.foreign) {
        (_, Some(why)) => why.clone(),
        (Some(l), None) => format!("it belongs to the lock `{l}`, which was not named"),
        (None, _) => "it carries a run token but names no lock".into(),
    }
}

/// The fate of a process that goes with its whole run (any process of a
/// live run; a terminal server of a run that is over), from how every
/// process of the run looks.
fn run_fate(
    run: &[Look],
    unmeasurable: bool,
    idle_enough: &impl Fn(&Look) -> bool,
    window: &str,
    live: bool,
) -> (Fate, String) {
    let (its_run, yet) = if live {
        ("its run is live", "but")
    } else {
        ("its run is over", "and")
    };
    if !unmeasurable && run.iter().all(idle_enough) {
        (
            Fate::Ended,
            format!("{its_run} {yet} every process of it has been idle for {window}"),
        )
    } else if unmeasurable {
        (
            Fate::KeptBusy,
            format!("{its_run} and not all its processes can be measured"),
        )
    } else if run.iter().any(|l| l.busy) {
        (Fate::KeptBusy, format!("{its_run} and active"))
    } else {
        let least = run.iter().map(|l| l.idle_ms).min().unwrap_or(0);
        (
            Fate::KeptIdleTooShort,
            format!(
                "{its_run} and has been idle for {} of {window}",
                crate::text::compact_duration(Duration::from_millis(least))
            ),
        )
    }
}

/// The fate of a process of a run that is over.
fn over_run_fate(
    look: &Look,
    idle_enough: &impl Fn(&Look) -> bool,
    window: &str,
) -> (Fate, String) {
    let idle_txt = crate::text::compact_duration(Duration::from_millis(look.idle_ms));
    if idle_enough(look) {
        (
            Fate::Ended,
            format!("its run is over and it has been idle for {idle_txt}"),
        )
    } else if look.busy {
        (
            Fate::KeptBusy,
            "its run is over, but it used CPU or did I/O since the last look".into(),
        )
    } else if look.first {
        (
            Fate::KeptIdleTooShort,
            "its run is over; first seen now".into(),
        )
    } else {
        (
            Fate::KeptIdleTooShort,
            format!("its run is over; idle for {idle_txt} of {window}"),
        )
    }
}

/// Never starts a graceful stop without the time to finish it: what is
/// left of the deadline must hold at least the KILL and the wait to see
/// the processes gone ([`KILL_RESERVE`]), or its TERM would be left
/// unfinished, the processes alive or dying unseen and the run's end
/// unrecorded. Such candidates are kept, and the next reap, with a fresh
/// deadline, ends them.
fn keep_without_time(candidates: &mut [Candidate], to_end: &mut Vec<usize>, opts: &ReapOptions) {
    let left = opts.deadline.saturating_duration_since(Instant::now());
    if to_end.is_empty() || left >= KILL_RESERVE {
        return;
    }
    let text = crate::text::compact_duration;
    for &i in to_end.iter() {
        let c = &mut candidates[i];
        c.verdict = Fate::KeptNoTime;
        c.reason = format!(
            "{}; the deadline leaves {}, less than the {} it takes to end it and see it gone: \
             left for the next reap",
            c.reason,
            text(left),
            text(KILL_RESERVE)
        );
    }
    to_end.clear();
}

/// Ends the candidates chosen (a graceful stop, within the deadline), and
/// notes what did not die or had already gone. The grace is what is left
/// of the deadline once the KILL and the wait to see the processes gone
/// are kept aside, if that is shorter: the deadline caps every call, and
/// what the KILL ends is ended, and recorded so, never reported as a
/// failure for want of a look after it.
fn end_candidates(candidates: &mut [Candidate], to_end: &[usize], opts: &ReapOptions) {
    let targets: Vec<ProcId> = to_end.iter().map(|&i| candidates[i].id()).collect();
    let left = opts.deadline.saturating_duration_since(Instant::now());
    let grace = opts.grace.min(left.saturating_sub(KILL_RESERVE));
    let ended = GracefulStop::term(grace).end(&targets, Some(opts.deadline));
    let text = crate::text::compact_duration;
    for &i in to_end {
        let c = &mut candidates[i];
        if ended.survivors.contains(&c.pid) {
            c.verdict = Fate::Failed;
            c.reason = format!("{}; it did not die in time", c.reason);
        } else if ended.skipped.contains(&c.pid) {
            // Gone before it could be signalled: ended all the same.
            c.reason = format!("{}; it had already exited", c.reason);
        } else if ended.killed.contains(&c.pid) && grace < opts.grace {
            c.reason = format!(
                "{}; KILL after {} of its {} grace, which the deadline cut short",
                c.reason,
                text(grace),
                text(opts.grace)
            );
        }
    }
}

/// A wrapper that still lives releases the lock once its command is gone:
/// waits for that (up to [`RELEASE_WAIT`]), so a precheck right after sees
/// it free; a record left by a wrapper killed earlier is cleared.
fn wait_releases(
    views: &[JobView<'_>],
    candidates: &[Candidate],
    to_end: &[usize],
    deadline: Instant,
) {
    let until = deadline.min(Instant::now() + RELEASE_WAIT);
    for view in views {
        let Ok(Some(token)) = &view.live else {
            continue;
        };
        if !to_end
            .iter()
            .any(|&i| candidates[i].token.as_deref() == Some(token.as_str()))
        {
            continue;
        }
        let Ok(lock) = LockFile::open(&view.job.lock) else {
            continue;
        };
        let lock = lock.with_deadline(until);
        let mut pause = Duration::from_millis(1);
        while Instant::now() < until
            && matches!(live_token(&view.job.lock), Ok(Some(t)) if &t == token)
        {
            if lock.reclaim_if_stale().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(pause.min(until.saturating_duration_since(Instant::now())));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}
