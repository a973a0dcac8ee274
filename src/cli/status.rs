//! `onlyone status`: every lock in DIR (or the named ones), as a table for
//! people or as JSON for machines.
//!
//! The JSON schema (version 1, stable: fields are only ever added), one
//! for both places: with `--store URL`, `"store"` in place of `"dir"`,
//! `path` null, and each lock's lease fields added.
//!
//! ```text
//! { "schema": 1, "dir": "/run/onlyone" | "store": "postgres://...",
//!   "locks": [ { "name", "path", "state", "pid", "command_pid", "holder_pid",
//!                "holder", "since", "since_unix", "age_seconds", "command",
//!                "mode", "host", "uid", "token", "reason", "stopped",
//!                "last_run", "last_success_unix", "skipped_since_start",
//!                "journal_error" (only when the journal cannot be read),
//!                with a store: "fence", "lease_left_seconds",
//!                "stop_requested", "holder_alive" } ] }
//! ```

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use std::collections::HashSet;

use onlyone::journal::Outcome;
use onlyone::text::for_terminal;
use onlyone::{Holder, Inspection, LockFile, Verdict, compact_duration, names};

use super::exit::{Code, FAILURE};
use super::{Ctx, args};

/// One lock, as `status --json` prints it.
#[derive(Debug, Serialize)]
pub struct LockStatus {
    /// `NAME` for `DIR/NAME.lock`, else the path.
    pub name: String,
    /// The lock file (null with a store).
    pub path: Option<String>,
    /// `free`, `held`, `stale` or `unknown`.
    pub state: &'static str,
    /// The owner's pid (the wrapper of a run).
    pub pid: Option<u32>,
    /// A run's command pid.
    pub command_pid: Option<u32>,
    /// The process that proves the lock held.
    pub holder_pid: Option<u32>,
    /// What that process is: `owner`, `command`, `leftover` or `kernel-lock`.
    pub holder: Option<&'static str>,
    /// When the lock was taken, RFC 3339 (UTC).
    pub since: Option<String>,
    /// The same, in Unix seconds.
    pub since_unix: Option<u64>,
    /// Seconds since then.
    pub age_seconds: Option<u64>,
    /// The recorded command line.
    pub command: Option<String>,
    /// `run` or `lock`.
    pub mode: Option<&'static str>,
    /// The owner's host.
    pub host: Option<String>,
    /// The owner's uid.
    pub uid: Option<u32>,
    /// The acquisition's token.
    pub token: Option<String>,
    /// Why a lock is stale or unknown, or what keeps a run held.
    pub reason: Option<String>,
    /// True when the holding process, or the run's command, is stopped
    /// (state `T`: Ctrl-Z, SIGSTOP): it holds the lock but does no work.
    pub stopped: bool,
    /// The last finished run, from the journal.
    pub last_run: Option<LastRun>,
    /// When the last successful run ended (Unix seconds), from the journal.
    pub last_success_unix: Option<f64>,
    /// For a held lock: the fires skipped since the current run began.
    pub skipped_since_start: Option<u64>,
    /// Why the journal cannot be read (another user's, say): then the
    /// last run and the last success are not known, rather than none.
    /// Left out when the journal was read (or there is none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_error: Option<String>,
    /// With a store: the lease.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseStatus>,
    /// The journal's runs, while the status is put together.
    #[serde(skip)]
    history: Option<onlyone::journal::History>,
}

/// A lease of the store, as `status --json` adds it to a lock.
#[derive(Debug, Serialize)]
pub struct LeaseStatus {
    /// The lease's epoch: the fence its command got.
    pub fence: i64,
    /// Seconds until it runs out (0 for a lease run out).
    pub lease_left_seconds: f64,
    /// Whether a `stop` asked its holder to end the run.
    pub stop_requested: bool,
    /// For a live lease of this host: whether its holder (the wrapper's
    /// pid) still lives; null for another host's, or a lease run out.
    pub holder_alive: Option<bool>,
}

/// The last finished run of a lock, as `status --json` prints it.
#[derive(Debug, Serialize)]
pub struct LastRun {
    /// When it started, Unix seconds.
    pub start_unix: f64,
    /// How it ended: `exit`, `signal`, `ended`, `abandoned` or `released`.
    pub outcome: &'static str,
    /// Its exit code, when it exited.
    pub exit: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<String>,
    /// How long it lasted, seconds.
    pub duration_seconds: Option<f64>,
}

/// `status --json`, for both places.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// The schema's version: 1.
    pub schema: u32,
    /// The lock directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// The store's URL (its password masked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// The locks.
    pub locks: &'a [LockStatus],
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Describes one lock path (its journal read when `journal` says there
/// may be one).
pub fn describe(
    path: &Path,
    name: String,
    lock: Result<LockFile, onlyone::Error>,
    journal: bool,
) -> LockStatus {
    let mut s = LockStatus {
        name,
        path: Some(path.display().to_string()),
        state: "free",
        pid: None,
        command_pid: None,
        holder_pid: None,
        holder: None,
        since: None,
        since_unix: None,
        age_seconds: None,
        command: None,
        mode: None,
        host: None,
        uid: None,
        token: None,
        reason: None,
        stopped: false,
        last_run: None,
        last_success_unix: None,
        skipped_since_start: None,
        journal_error: None,
        lease: None,
        history: None,
    };
    if let Ok(l) = &lock
        && journal
    {
        fill_history(&mut s, l);
    }
    let seen = match lock.and_then(|l| l.inspect()) {
        Ok(Some(seen)) => seen,
        Ok(None) | Err(onlyone::Error::MissingDir { .. }) => return s,
        Err(e) => {
            s.state = "unknown";
            s.reason = Some(e.to_string());
            return s;
        }
    };
    fill(&mut s, &seen);
    s
}

/// One lease of the store as a lock's status: the same fields as a lock
/// file's, the lease's added; `here` is this host's name (a holder of this
/// host is looked for), `history` the store's history of the name.
pub fn of_lease(
    row: &onlyone::store::LeaseRow,
    here: &str,
    history: Result<onlyone::journal::History, String>,
) -> LockStatus {
    let live = row.is_live();
    let since = row.since.max(0.0) as u64;
    let holder_alive = row.holder_alive_on(here);
    let left = (row.left_ms.max(0) as f64) / 1000.0;
    let mut s = LockStatus {
        name: row.name.clone(),
        path: None,
        state: if live { "held" } else { "free" },
        pid: row.pid,
        command_pid: None,
        holder_pid: row.pid.filter(|_| live),
        holder: live.then_some("owner"),
        since: Some(onlyone::format_unix_time(since)),
        since_unix: Some(since),
        age_seconds: Some(now_unix().saturating_sub(since)),
        command: row.cmd.clone(),
        mode: Some("run"),
        host: row.host.clone(),
        uid: row.uid,
        token: Some(row.token.clone()),
        reason: (holder_alive == Some(false)).then(|| {
            format!(
                "held by pid {} of this host, which is dead: its lease was not released and \
                 runs out in {} (no host can take it before)",
                row.pid.map_or_else(|| "?".into(), |p| p.to_string()),
                compact_duration(Duration::from_secs_f64(left))
            )
        }),
        stopped: false,
        last_run: None,
        last_success_unix: None,
        skipped_since_start: None,
        journal_error: None,
        lease: Some(LeaseStatus {
            fence: row.epoch,
            lease_left_seconds: left,
            stop_requested: row.stop_requested,
            holder_alive,
        }),
        history: None,
    };
    apply_history(&mut s, history);
    if live && let Some(h) = &s.history {
        s.skipped_since_start = Some(h.skips_of(&row.token));
    }
    s
}

/// What the journal says: the last run, the last success, and (filled in
/// once the record is read) the skips of the current run.
fn fill_history(s: &mut LockStatus, lock: &LockFile) {
    let h = lock.history().map_err(|e| {
        format!(
            "cannot read the journal `{}`: {e}",
            lock.journal().path().display()
        )
    });
    apply_history(s, h);
}

/// The last run, the last success and the history itself, from what a
/// place's event log gave (or why it could not be read).
pub fn apply_history(s: &mut LockStatus, h: Result<onlyone::journal::History, String>) {
    let h = match h {
        Ok(h) => h,
        Err(e) => {
            s.journal_error = Some(e);
            return;
        }
    };
    if let Some(r) = h.last_over() {
        let (exit, signal) = match &r.outcome {
            Outcome::Exited(c) => (Some(*c), None),
            Outcome::Signaled(sig) => (None, Some(sig.clone())),
            Outcome::Ended { exit, .. } => (*exit, None),
            _ => (None, None),
        };
        s.last_run = Some(LastRun {
            start_unix: r.start,
            outcome: super::history::outcome_word(&r.outcome),
            exit,
            signal,
            duration_seconds: r.duration,
        });
    }
    s.last_success_unix = h.last_success().map(|r| r.end.unwrap_or(r.start));
    s.history = Some(h);
}

fn fill(s: &mut LockStatus, seen: &Inspection) {
    if let Ok(r) = &seen.record {
        s.pid = Some(r.pid);
        s.command_pid = r.cmd_id.map(|c| c.pid);
        s.since_unix = r.since;
        s.since = r.since.map(onlyone::format_unix_time);
        s.age_seconds = r.since.map(|t| now_unix().saturating_sub(t));
        s.command = r.cmd.clone();
        s.mode = (!r.is_bare()).then_some(r.mode.as_str());
        s.host = r.host.clone();
        s.uid = r.uid;
        s.token = r.token.clone();
    }
    match &seen.verdict {
        Verdict::Held(h) => {
            s.state = "held";
            if let (Some(hist), Some(t)) = (&s.history, &s.token) {
                s.skipped_since_start = Some(hist.skips_of(t));
            }
            s.holder_pid = Some(h.pid()).filter(|&p| p != 0);
            s.holder = Some(match h {
                Holder::Command { .. } => "command",
                Holder::OtherKernelLock { .. } | Holder::OtherNamespace { .. } => "kernel-lock",
                Holder::Member { .. } => "leftover",
                Holder::Outside => "outside",
                // Non-exhaustive from this crate: a new holder reads as the owner.
                _ => "owner",
            });
            let wrapper_gone =
                |r: &onlyone::Record| format!("the {} (pid {}) is gone", owner_word(r), r.pid);
            let mut reasons = Vec::new();
            match (h, &seen.record) {
                (Holder::Member { pid, cmd }, Ok(r)) => reasons.push(format!(
                    "{}; held by pid {pid}, a leftover process of the run: `{}`",
                    wrapper_gone(r),
                    cmd.as_deref().unwrap_or("?")
                )),
                (Holder::Command { pid }, Ok(r)) => reasons.push(format!(
                    "{}; held by pid {pid}, the run's command: `{}`",
                    wrapper_gone(r),
                    r.cmd.as_deref().unwrap_or("?")
                )),
                (Holder::OtherKernelLock { owner }, _) => reasons.push(format!(
                    "the owner (pid {owner}) is gone, but a process holds a kernel lock on the \
                     lock file (`fuser -v {}` names it)",
                    s.path.as_deref().unwrap_or("?")
                )),
                (Holder::Outside, _) => reasons.push(format!(
                    "not a record: a process outside onlyone holds a kernel lock on it, as \
                     flock(1) does (`fuser -v {}` names it)",
                    s.path.as_deref().unwrap_or("?")
                )),
                _ => {}
            }
            for pid in seen.stopped() {
                s.stopped = true;
                reasons.push(format!(
                    "pid {pid} is stopped (state T): `kill -CONT {pid}` resumes it, `onlyone \
                     stop {}` ends the run",
                    s.name
                ));
            }
            if !reasons.is_empty() {
                s.reason = Some(reasons.join("; "));
            }
        }
        Verdict::Stale(r) => {
            s.state = "stale";
            s.reason = Some(r.to_string());
        }
        Verdict::Unknown(r) => {
            s.state = "unknown";
            s.reason = Some(r.to_string());
        }
    }
}

/// For a user's default directory: where root's locks are, when there
/// are any (cron jobs of root lock there).
fn other_dirs_hint(dir: &Path, source: names::DirSource) -> String {
    let root_dir = Path::new(names::ROOT_DIR);
    if source != names::DirSource::Default || dir == root_dir {
        return String::new();
    }
    match lock_files(root_dir) {
        Ok(l) if !l.is_empty() => format!(
            " (this user's default); root's locks are in `{}`: onlyone --dir {} status",
            root_dir.display(),
            root_dir.display()
        ),
        _ => " (this user's default)".to_owned(),
    }
}

/// For a lock that is free in a user's default directory: where root's
/// lock of that name is, when there is one (a cron job of root's), since
/// "free" alone reads as "root's job is not running".
fn roots_lock_hint(l: &LockStatus, dir: &Path, source: names::DirSource) -> Option<String> {
    let root_dir = Path::new(names::ROOT_DIR);
    if l.state != "free" || source != names::DirSource::Default || dir == root_dir {
        return None;
    }
    let path = Path::new(l.path.as_deref()?);
    let file = path.file_name().filter(|_| path.parent() == Some(dir))?;
    let theirs = root_dir.join(file);
    std::fs::symlink_metadata(&theirs).ok()?;
    Some(format!(
        "`{}` is free in `{}` (this user's default directory); root's locks are in `{}`, \
         which has one of that name: onlyone --dir {} status {}",
        l.name,
        dir.display(),
        root_dir.display(),
        root_dir.display(),
        l.name
    ))
}

/// Every lock named (or in DIR), described, all by `deadline`.
fn describe_all(
    ctx: &Ctx,
    named: &[String],
    deadline: Option<std::time::Instant>,
) -> Result<Vec<LockStatus>, String> {
    let dir = ctx.dir();
    // Named locks are looked up in full; listed ones have a journal only
    // when the listing showed one.
    let (targets, journals) = if named.is_empty() {
        let (locks, journals) = lock_listing(dir)
            .map_err(|e| format!("cannot list the lock directory `{}`: {e}", dir.display()))?;
        (locks, Some(journals))
    } else {
        (named.to_vec(), None)
    };
    let mut out = Vec::with_capacity(targets.len());
    // The locks of one directory share its handle, and their verdicts one
    // listing of the host's processes.
    let mut first: Option<LockFile> = None;
    onlyone::with_census(|| {
        for t in targets {
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err("status: the deadline ran out before every lock was read".into());
            }
            let journal = journals.as_ref().is_none_or(|j| j.contains(&t));
            let path = names::lock_path(&t, dir).map_err(|e| e.to_string())?;
            let name = names::display_name(&path, dir);
            let lock = match &first {
                Some(f) => f.sibling(&path),
                None => ctx
                    .open_for_reading(&path.display().to_string())
                    .map(|(l, _)| l),
            };
            if first.is_none()
                && let Ok(l) = &lock
            {
                first = Some(l.clone());
            }
            let lock = lock.map(|l| match deadline {
                Some(d) => l.with_deadline(d),
                None => l,
            });
            out.push(describe(&path, name, lock, journal));
        }
        Ok(out)
    })
}

/// What the record's owner is called: a run's wrapper, or the owner.
fn owner_word(r: &onlyone::Record) -> &'static str {
    match r.mode {
        onlyone::Mode::Run => "wrapper",
        _ => "owner",
    }
}

/// The lock files in `dir`: regular `*.lock` files, not temp files.
pub(super) fn lock_files(dir: &Path) -> std::io::Result<Vec<String>> {
    lock_listing(dir).map(|(locks, _)| locks)
}

/// The lock files in `dir` (as [`lock_files`]), and those of them that
/// have a journal (either generation): one listing, so that a lock without
/// a journal costs no attempt to open one.
fn lock_listing(dir: &Path) -> std::io::Result<(Vec<String>, HashSet<String>)> {
    let mut out = Vec::new();
    let mut journals = HashSet::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((out, journals)),
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') {
            continue;
        }
        // A free lock has no lock file, but its journal says it exists.
        let journal = name
            .strip_suffix(".journal")
            .or_else(|| name.strip_suffix(".journal.1"));
        let lock = journal.unwrap_or(name);
        if !lock.ends_with(".lock") {
            continue;
        }
        let path = dir.join(lock).display().to_string();
        if journal.is_some() {
            journals.insert(path.clone());
        }
        out.push(path);
    }
    out.sort();
    out.dedup();
    Ok((out, journals))
}

pub fn status(ctx: &Ctx, a: args::Status) -> Code {
    let deadline = a.deadline.map(|d| std::time::Instant::now() + d);
    let dir = ctx.dir().to_path_buf();
    let source = ctx.source;
    let locks = match describe_all(ctx, &a.locks, deadline) {
        Ok(l) => l,
        Err(e) => {
            super::say(e);
            return Code::Exit(FAILURE);
        }
    };
    for l in &locks {
        if let Some(hint) = roots_lock_hint(l, &dir, source) {
            super::say(hint);
        }
        if let Some(e) = &l.journal_error {
            super::say(format_args!("status: {}", for_terminal(e)));
        }
    }
    // One write(2) per buffer, not per line: stdout is line-buffered.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if a.json {
        let report = Report {
            schema: 1,
            dir: Some(dir.display().to_string()),
            store: None,
            locks: &locks,
        };
        serde_json::to_string_pretty(&report)
            .map_err(std::io::Error::from)
            .and_then(|json| writeln!(out, "{}", onlyone::text::json_for_terminal(&json)))
    } else {
        if locks.is_empty() {
            // Say where it looked: as another user, root's locks are
            // elsewhere.
            super::say(format_args!(
                "no locks in `{}`{}",
                dir.display(),
                other_dirs_hint(&dir, source)
            ));
        }
        print_table(&mut out, &locks, std::io::stdout().is_terminal())
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => Code::Exit(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Code::Exit(0),
        Err(e) => {
            super::say(format_args!("cannot write the status: {e}"));
            Code::Exit(FAILURE)
        }
    }
}

/// A table: aligned for a terminal, tab-separated otherwise (for `cut`).
fn print_table(out: &mut impl Write, locks: &[LockStatus], aligned: bool) -> std::io::Result<()> {
    let header = [
        "LOCK", "STATE", "PID", "CMDPID", "SINCE", "AGE", "LAST RUN", "SKIPPED", "COMMAND",
    ];
    let rows: Vec<[String; 9]> = locks
        .iter()
        .map(|l| {
            let opt = |v: Option<u32>| v.map_or("-".to_owned(), |v| v.to_string());
            let mut cmd = l.command.clone().unwrap_or_else(|| "-".into());
            if let Some(r) = &l.reason {
                cmd = format!("{cmd}  [{r}]");
            }
            // A tab or newline in a name or a command would break the
            // columns: control characters are shown escaped.
            let cmd = onlyone::record::escape_value(&cmd);
            let last_run = match (&l.last_run, &l.journal_error) {
                (Some(r), _) => last_run_cell(r),
                (None, Some(_)) => "? (journal unreadable)".into(),
                (None, None) => "-".into(),
            };
            // What a record or a journal says reaches a terminal escaped
            // (bidirectional overrides too).
            [
                onlyone::record::escape_value(&l.name),
                l.state.to_owned(),
                opt(l.pid),
                opt(l.command_pid),
                l.since.clone().unwrap_or_else(|| "-".into()),
                l.age_seconds
                    .map_or("-".into(), |s| compact_duration(Duration::from_secs(s))),
                last_run,
                l.skipped_since_start.map_or("-".into(), |n| n.to_string()),
                cmd,
            ]
            .map(|c| for_terminal(&c).into_owned())
        })
        .collect();
    if !aligned {
        writeln!(out, "{}", header.join("\t"))?;
        for r in &rows {
            writeln!(out, "{}", r.join("\t"))?;
        }
        return Ok(());
    }
    if rows.is_empty() {
        return Ok(());
    }
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; 9]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == cells.len() - 1 {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        s
    };
    writeln!(out, "{}", line(header))?;
    for r in &rows {
        writeln!(out, "{}", line(r.each_ref().map(String::as_str)))?;
    }
    Ok(())
}

/// "exit 0, 3h ago (2m5s)".
fn last_run_cell(r: &LastRun) -> String {
    let how = match (r.outcome, r.exit, &r.signal) {
        ("exit", Some(c), _) => format!("exit {c}"),
        ("signal", _, Some(sig)) => format!("signal {sig}"),
        (word, _, _) => word.to_owned(),
    };
    let took = r
        .duration_seconds
        .map(|d| format!(" ({})", super::history::took(d)))
        .unwrap_or_default();
    format!("{how}, {}{took}", super::history::ago(r.start_unix))
}
