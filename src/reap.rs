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
//!    the library). Nothing else is ever touched.
//! 2. **Its run is finished or idle**: the lock no longer names its token
//!    (the wrapper is gone, or the lock was released or taken over), or
//!    every process of the run has been idle for the window.
//! 3. **It has been idle for the window** ([`crate::idle`]: no CPU time, no
//!    byte read or written). One call cannot watch for ten minutes, so the
//!    reaper keeps a state file beside the locks (`.onlyone-reap.json`):
//!    per process, by pid and start time, the counters and when they last
//!    changed. A process seen for the first time counts as active now. The
//!    state file is replaced atomically and guarded by a flock on
//!    `.onlyone-reap.lock` against a concurrent reap.
//!
//! Ending is TERM, the grace, KILL, then a wait (up to 5 s) until the
//! processes are really gone, and for a run whose wrapper still lives, until
//! the wrapper has released the lock: a precheck right after must not see a
//! finished run as alive.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::idle::Counters;
use crate::lock::LockFile;
use crate::procfs::{self, LOCK_VAR, TOKEN_VAR};
use crate::terminate::{self, Target};

/// The state file's name, in the lock directory.
pub const STATE_FILE: &str = ".onlyone-reap.json";
/// The file whose flock serialises reaps, in the lock directory. Never
/// deleted.
pub const STATE_LOCK: &str = ".onlyone-reap.lock";

/// How long to wait, after the processes are gone, for a live wrapper to
/// release its lock.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

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
pub enum Fate {
    /// It used CPU or did I/O since the last look, or its run is active.
    KeptBusy,
    /// It belongs to a job that was not named.
    KeptNotNamed,
    /// Idle, but not yet for the whole window (or seen for the first time).
    KeptIdleTooShort,
    /// It was ended (with `--dry-run`: it would be).
    Ended,
    /// Ending it failed, or it would not die in time.
    Failed,
}

/// A process that carries a run's marker, and what became of it.
#[derive(Debug, Clone, Serialize)]
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

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// The boot the entries belong to.
    boot: String,
    /// "PID-START" → what was seen.
    procs: BTreeMap<String, Seen>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Seen {
    cpu: u64,
    io: Option<u64>,
    /// When the counters last changed, milliseconds since boot
    /// (`CLOCK_BOOTTIME`). Signed: a time before the boot is a time too.
    changed_ms: i64,
}

/// Takes the reap guard (flock on `dir/.onlyone-reap.lock`), waiting until
/// `deadline`.
fn lock_state(dir: &Path, deadline: Instant) -> Result<fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(STATE_LOCK);
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
    let mut pause = Duration::from_millis(1);
    loop {
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(f),
            Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(format!(
                        "another reap holds `{}`; the deadline ran out waiting for it",
                        path.display()
                    ));
                }
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("cannot lock `{}`: {e}", path.display())),
        }
    }
}

fn load_state(dir: &Path, errors: &mut Vec<String>) -> State {
    let path = dir.join(STATE_FILE);
    let boot = procfs::boot_id().unwrap_or_default().to_owned();
    let fresh = State {
        boot: boot.clone(),
        procs: BTreeMap::new(),
    };
    match fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice::<State>(&bytes) {
            Ok(s) if s.boot == boot => s,
            Ok(_) => fresh,
            Err(e) => {
                errors.push(format!(
                    "the reap state `{}` is unreadable ({e}); starting afresh",
                    path.display()
                ));
                fresh
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => fresh,
        Err(e) => {
            errors.push(format!("cannot read `{}`: {e}", path.display()));
            fresh
        }
    }
}

fn save_state(dir: &Path, state: &State) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(STATE_FILE);
    let tmp = dir.join(format!("{STATE_FILE}.{}.tmp", std::process::id()));
    let bytes = serde_json::to_vec(state).map_err(|e| e.to_string())?;
    let write = || -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("cannot write `{}`: {e}", path.display())
    })
}

/// One process that belongs, or may belong, to a run.
struct Marked {
    pid: u32,
    start: u64,
    /// The job it belongs to (index into the jobs), if a named one.
    job: Option<usize>,
    /// The lock its environment names, as it names it.
    lock: Option<String>,
    token: Option<String>,
    counters: Counters,
    /// Why it is not of a named job although it names one's path.
    foreign: Option<&'static str>,
}

/// A named job, with its lock as this reap sees it.
struct JobView<'a> {
    job: &'a Job,
    /// The lock path, absolute, its directory's symlinks resolved.
    key: PathBuf,
    /// The token the lock names now (`Ok(None)`: free), or why the lock
    /// cannot be read.
    live: Result<Option<String>, String>,
    /// The live run's processes could not all be measured.
    unmeasurable: bool,
}

/// The path `p`, absolute, with its directory's symlinks resolved, as seen
/// from the directory `cwd` (another process's `/proc/PID/cwd`).
fn canonical(p: &Path, cwd: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    };
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or(abs.clone()),
        _ => abs,
    }
}

fn mount_ns(pid: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| m.ino())
}

/// Lists the processes whose environment carries `ONLYONE_TOKEN` or
/// `ONLYONE_LOCK`, and the processes of the named jobs' live runs (their
/// process groups, whatever their environment).
fn scan(views: &mut [JobView<'_>], deadline: Instant, errors: &mut Vec<String>) -> Vec<Marked> {
    let me = std::process::id();
    let my_mnt = mount_ns("self");
    let mut out = Vec::new();
    let pids = match procfs::all_pids() {
        Ok(p) => p,
        Err(e) => {
            errors.push(format!("cannot list /proc: {e}"));
            return out;
        }
    };
    for pid in pids {
        if Instant::now() >= deadline {
            errors.push("the deadline ran out while listing processes".into());
            break;
        }
        if pid == me {
            continue;
        }
        let Some(vals) = procfs::environ_values(pid, &[TOKEN_VAR, LOCK_VAR]) else {
            continue;
        };
        let [token, lock] = [vals[0].clone(), vals[1].clone()];
        if token.is_none() && lock.is_none() {
            continue;
        }
        let Ok(Some(st)) = procfs::read_stat(pid) else {
            continue;
        };
        if procfs::is_dead_process(pid, &st) {
            continue;
        }
        // The same path in another mount namespace (a container) is
        // another file; a relative path is relative to that process.
        let mut foreign = None;
        let by_path = lock.as_deref().and_then(|l| {
            let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_else(|_| "/".into());
            let key = canonical(Path::new(l), &cwd);
            let i = views.iter().position(|v| v.key == key)?;
            if mount_ns(&pid.to_string()) != my_mnt {
                foreign =
                    Some("it runs in another mount namespace, where that path is another file");
                return None;
            }
            Some(i)
        });
        // A process handed only the token (`tmux new-window -e
        // ONLYONE_TOKEN=...`) belongs to the live run whose lock names it:
        // 128 random bits name one run, wherever its lock is.
        let job = by_path.or_else(|| {
            let t = token.as_deref()?;
            views
                .iter()
                .position(|v| matches!(&v.live, Ok(Some(live)) if live == t))
        });
        out.push(Marked {
            pid,
            start: st.start,
            job,
            lock,
            token,
            counters: Counters {
                cpu_ticks: st.cpu_ticks,
                io_bytes: procfs::io_bytes(pid),
            },
            foreign,
        });
    }
    // The live runs' other processes: their command's group (an
    // environment may have been cleared), and what cannot be read.
    for (i, view) in views.iter_mut().enumerate() {
        let Ok(Some(token)) = &view.live else {
            continue;
        };
        let Ok(lock) = LockFile::open(&view.job.lock) else {
            continue;
        };
        let Some(rec) = lock.inspect().ok().flatten().and_then(|s| s.record.ok()) else {
            continue;
        };
        // A run of another PID namespace: its pids are not ours to look at.
        if rec.token.as_deref() != Some(token.as_str())
            || rec
                .pidns
                .is_some_and(|ns| procfs::own_pidns().is_some_and(|ours| ours != ns))
        {
            continue;
        }
        // The owner of a lock taken by a script or a program (not a run's
        // wrapper, which ends when its command does) is part of the run.
        if rec.mode != crate::Mode::Run
            && let Some(start) = rec.start
            && rec.pid != me
            && !out.iter().any(|o| o.pid == rec.pid && o.start == start)
            && let Some(counters) = crate::idle::counters(rec.pid, start)
        {
            out.push(Marked {
                pid: rec.pid,
                start,
                job: Some(i),
                lock: Some(view.job.lock.display().to_string()),
                token: Some(token.clone()),
                counters,
                foreign: None,
            });
        }
        // Processes a lingering run named: they may carry neither token
        // nor group.
        for &(pid, start) in &rec.linger {
            if pid != me
                && !out.iter().any(|o| o.pid == pid && o.start == start)
                && let Some(counters) = crate::idle::counters(pid, start)
            {
                out.push(Marked {
                    pid,
                    start,
                    job: Some(i),
                    lock: Some(view.job.lock.display().to_string()),
                    token: Some(token.clone()),
                    counters,
                    foreign: None,
                });
            }
        }
        let Some(spec) = rec.scan_spec() else {
            continue;
        };
        match procfs::run_members(&spec, &[me, rec.pid], false) {
            Ok(found) => {
                view.unmeasurable |= !found.unreadable.is_empty();
                for m in found.members {
                    if out.iter().any(|o| o.pid == m.pid && o.start == m.start) {
                        continue;
                    }
                    out.push(Marked {
                        pid: m.pid,
                        start: m.start,
                        job: Some(i),
                        lock: Some(view.job.lock.display().to_string()),
                        token: Some(token.clone()),
                        counters: Counters {
                            cpu_ticks: m.stat.cpu_ticks,
                            io_bytes: procfs::io_bytes(m.pid),
                        },
                        foreign: None,
                    });
                }
            }
            Err(e) => {
                view.unmeasurable = true;
                errors.push(format!(
                    "cannot list the processes of `{}`: {e}",
                    view.job.name
                ));
            }
        }
    }
    out
}

/// Reaps the lingering processes of `jobs`; `state_dir` holds the state
/// file. Never fails as a whole: errors are in the report. When the
/// deadline passes, the report so far is returned with `complete: false`.
pub fn reap(jobs: &[Job], state_dir: &Path, opts: &ReapOptions) -> ReapReport {
    let shared = Arc::new(Mutex::new(ReapReport {
        dry_run: opts.dry_run,
        ..ReapReport::default()
    }));
    let worker = {
        let shared = shared.clone();
        let jobs = jobs.to_vec();
        let dir = state_dir.to_path_buf();
        let opts = opts.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            reap_inner(&jobs, &dir, &opts, &shared);
            let _ = tx.send(());
        });
        rx
    };
    let finished = worker
        .recv_timeout(opts.deadline.saturating_duration_since(Instant::now()))
        .is_ok();
    let mut report = shared.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if !finished {
        report.complete = false;
        report
            .errors
            .push("the deadline ran out; the reap stopped where it was".into());
    }
    report
}

/// Tells the reaper what the processes a lingering run left behind (`run
/// --linger`) are doing now: their counters go into the state file in
/// `state_dir` as of this moment, so the first reap after the window can
/// judge them, instead of counting them active at first sight. Best
/// effort: false when the state could not be written (the reaper then
/// needs two looks, as for any process it has not seen).
pub fn note_lingering(state_dir: &Path, procs: &[Target]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    let Ok(guard) = lock_state(state_dir, deadline) else {
        return false;
    };
    let mut errors = Vec::new();
    let mut state = load_state(state_dir, &mut errors);
    let now = clock_ms();
    for t in procs {
        if let Some(c) = crate::idle::counters(t.pid, t.start) {
            state.procs.insert(
                key(t.pid, t.start),
                Seen {
                    cpu: c.cpu_ticks,
                    io: c.io_bytes,
                    changed_ms: now,
                },
            );
        }
    }
    let saved = save_state(state_dir, &state).is_ok();
    drop(guard);
    saved && errors.is_empty()
}

fn key(pid: u32, start: u64) -> String {
    format!("{pid}-{start}")
}

fn reap_inner(jobs: &[Job], dir: &Path, opts: &ReapOptions, shared: &Mutex<ReapReport>) {
    let mut errors = Vec::new();
    let guard = match lock_state(dir, opts.deadline) {
        Ok(f) => Some(f),
        Err(e) => {
            shared
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .errors
                .push(e);
            return;
        }
    };
    let mut state = load_state(dir, &mut errors);
    let now = clock_ms();
    let window_ms = u64::try_from(opts.idle.as_millis()).unwrap_or(u64::MAX);
    let here = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let mut views: Vec<JobView<'_>> = jobs
        .iter()
        .map(|job| JobView {
            job,
            key: canonical(&job.lock, &here),
            live: live_token(&job.lock),
            unmeasurable: false,
        })
        .collect();
    let marked = scan(&mut views, opts.deadline, &mut errors);

    // Update what each process was last seen doing.
    let mut looks: HashMap<(u32, u64), Look> = HashMap::new();
    let mut next = BTreeMap::new();
    for m in &marked {
        let k = key(m.pid, m.start);
        let prev = state.procs.get(&k).copied();
        let same = prev.is_some_and(|p| {
            p.cpu == m.counters.cpu_ticks && p.io == m.counters.io_bytes && p.io.is_some()
        });
        let changed_ms = match prev {
            Some(p) if same => p.changed_ms,
            _ => now,
        };
        // First sight counts as active now; unmeasurable I/O is activity.
        looks.insert(
            (m.pid, m.start),
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
    state.procs = next;
    let idle_enough = |l: &Look| !l.first && !l.busy && l.idle_ms >= window_ms;
    let window = crate::text::compact_duration(opts.idle);

    let mut candidates = Vec::new();
    let mut to_end: Vec<(usize, Target)> = Vec::new();
    for m in &marked {
        let look = looks[&(m.pid, m.start)];
        let mut c = Candidate {
            pid: m.pid,
            start: m.start,
            job: None,
            lock: m.lock.clone(),
            token: m.token.clone(),
            command: procfs::command_line(m.pid),
            verdict: Fate::KeptNotNamed,
            reason: String::new(),
            idle_seconds: Some(look.idle_ms / 1000),
        };
        let Some(view) = m.job.map(|i| &views[i]) else {
            c.reason = match (&m.lock, m.foreign) {
                (Some(l), Some(why)) => format!("it names the lock `{l}`, but {why}"),
                (Some(l), None) => format!("it belongs to the lock `{l}`, which was not named"),
                (None, _) => "it carries a run token but names no lock".into(),
            };
            candidates.push(c);
            continue;
        };
        c.job = Some(view.job.name.clone());
        let idle_txt = crate::text::compact_duration(Duration::from_millis(look.idle_ms));
        let live = match &view.live {
            Ok(t) => t.clone(),
            Err(why) => {
                c.verdict = Fate::KeptBusy;
                c.reason = format!("its lock cannot be read ({why}), so its run counts as live");
                candidates.push(c);
                continue;
            }
        };
        if live.is_some() && live == m.token {
            // A live run: every process of it must have been idle for the
            // window, and all of them must be measurable.
            let run: Vec<Look> = marked
                .iter()
                .filter(|o| o.job == m.job && o.token == m.token)
                .map(|o| looks[&(o.pid, o.start)])
                .collect();
            if !view.unmeasurable && run.iter().all(idle_enough) {
                c.verdict = Fate::Ended;
                c.reason =
                    format!("its run is live but every process of it has been idle for {window}");
                to_end.push((
                    candidates.len(),
                    Target {
                        pid: m.pid,
                        start: m.start,
                    },
                ));
            } else if view.unmeasurable {
                c.verdict = Fate::KeptBusy;
                c.reason = "its run is live and not all its processes can be measured".into();
            } else if run.iter().any(|l| l.busy) {
                c.verdict = Fate::KeptBusy;
                c.reason = "its run is live and active".into();
            } else {
                let least = run.iter().map(|l| l.idle_ms).min().unwrap_or(0);
                c.verdict = Fate::KeptIdleTooShort;
                c.reason = format!(
                    "its run is live and has been idle for {} of {window}",
                    crate::text::compact_duration(Duration::from_millis(least))
                );
            }
        } else if idle_enough(&look) {
            c.verdict = Fate::Ended;
            c.reason = format!("its run is over and it has been idle for {idle_txt}");
            to_end.push((
                candidates.len(),
                Target {
                    pid: m.pid,
                    start: m.start,
                },
            ));
        } else if look.busy {
            c.verdict = Fate::KeptBusy;
            c.reason = "its run is over, but it used CPU or did I/O since the last look".into();
        } else if look.first {
            c.verdict = Fate::KeptIdleTooShort;
            c.reason = "its run is over; first seen now".into();
        } else {
            c.verdict = Fate::KeptIdleTooShort;
            c.reason = format!("its run is over; idle for {idle_txt} of {window}");
        }
        candidates.push(c);
    }
    {
        let mut r = shared.lock().unwrap_or_else(|p| p.into_inner());
        r.candidates = candidates.clone();
        r.errors.append(&mut errors);
    }

    if !opts.dry_run && !to_end.is_empty() {
        let targets: Vec<Target> = to_end.iter().map(|(_, t)| *t).collect();
        let ended = terminate::terminate(
            &targets,
            rustix::process::Signal::TERM,
            opts.grace,
            Some(opts.deadline),
        );
        for (i, t) in &to_end {
            let c = &mut candidates[*i];
            if ended.survivors.contains(&t.pid) {
                c.verdict = Fate::Failed;
                c.reason = format!("{}; it did not die in time", c.reason);
            } else if ended.skipped.contains(&t.pid) {
                // Gone before it could be signalled: ended all the same.
                c.reason = format!("{}; it had already exited", c.reason);
            }
        }
        // A wrapper that still lives releases the lock once its command is
        // gone: wait for that, so a precheck right after sees it free.
        let until = opts.deadline.min(Instant::now() + RELEASE_WAIT);
        for view in &views {
            let Ok(Some(token)) = &view.live else {
                continue;
            };
            if !to_end
                .iter()
                .any(|(i, _)| candidates[*i].token.as_deref() == Some(token.as_str()))
            {
                continue;
            }
            let Ok(lock) = LockFile::open(&view.job.lock) else {
                continue;
            };
            let mut pause = Duration::from_millis(1);
            while Instant::now() < until
                && matches!(live_token(&view.job.lock), Ok(Some(t)) if &t == token)
            {
                // A wrapper killed earlier leaves a stale record: clear it.
                if lock.reclaim_if_stale().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
        for (i, _) in &to_end {
            state
                .procs
                .remove(&key(candidates[*i].pid, candidates[*i].start));
        }
    }
    if !opts.dry_run
        && let Err(e) = save_state(dir, &state)
    {
        errors.push(e);
    }
    drop(guard);
    let out_of_time = Instant::now() >= opts.deadline;
    if out_of_time {
        errors.push("the deadline ran out; the reap stopped where it was".into());
    }
    let mut r = shared.lock().unwrap_or_else(|p| p.into_inner());
    r.candidates = candidates;
    r.errors.extend(errors);
    r.complete = !out_of_time;
}

/// The token a lock names now: `Ok(None)` when it is free, an error when it
/// cannot be read (then its runs count as live).
fn live_token(lock: &Path) -> Result<Option<String>, String> {
    let l = LockFile::open(lock).map_err(|e| e.to_string())?;
    match l.inspect() {
        Ok(None) => Ok(None),
        Ok(Some(seen)) => match seen.record {
            Ok(r) => Ok(r.token),
            Err(why) => Err(why.to_string()),
        },
        Err(crate::Error::MissingDir { .. }) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Milliseconds since boot (`CLOCK_BOOTTIME`): unlike the wall clock it
/// never jumps, it counts time suspended, and the state file belongs to
/// one boot.
fn clock_ms() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    t.tv_sec.saturating_mul(1000) + t.tv_nsec / 1_000_000
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
