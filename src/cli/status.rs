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
//!                "mode", "host", "uid", "other_account" (only for
//!                another account's file), "token", "reason", "stopped",
//!                "last_run", "last_success_unix", "skipped_since_start",
//!                "outside_work": [ { "pid", "command", "terminal",
//!                                    "server_pid" } ],
//!                "journal_error" (only when the journal cannot be read),
//!                "waiters": [ { "pid", "host", "uid", "command", "since",
//!                               "since_unix", "queued" } ],
//!                with a store: "fence", "lease_left_seconds",
//!                "stop_requested", "holder_alive" } ] }
//! ```

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use clap::Args;

use onlyone::command::compact_duration;
use onlyone::text::for_terminal;
use onlyone::{Holder, Inspection, LockFile, Verdict, names};

use super::Ctx;
use super::exit::Ending;
use super::format::{ago, now_unix, took};
use super::options::{Adjust, ScheduleArg, parse_duration};
use super::place::Place;
use super::view::{
    LastRun, LockStatus, NOT_REACHED, OutsideWork, Report, Shown, WaiterStatus, Whence,
    apply_history, judged_late, keepers_of, keepers_remedy, keepers_words, lock_files,
    no_such_lock, nothing_in,
};
use onlyone::journal::Journal;

/// `status`'s deadline unless told otherwise.
const STATUS_DEADLINE: &str = "10s";

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

impl Adjust for Status {}

/// What `onlyone status --help` says after the options.
pub const AFTER_HELP: &str = "\
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
  onlyone status sync --json";

/// Describes one lock path (its journal read when there may be one),
/// `/proc` read until `deadline`.
pub fn describe(
    path: &Path,
    name: String,
    lock: Result<LockFile, onlyone::Error>,
    journal: Option<Journal>,
    deadline: Option<std::time::Instant>,
) -> LockStatus {
    let mut s = blank(path, name);
    // The journal is read before the lock is looked at (see
    // `History::close_over`), and applied once the lock's state is known.
    let history = journal.as_ref().map(read_history);
    // Every slot file there is, slot 0's first: each one looked at once.
    // (An error: `None` when there is no lock directory, which is no lock.)
    let slots = match &lock {
        Ok(l) => l.inspect_slots().map_err(|e| match e {
            onlyone::Error::MissingDir { .. } => None,
            e => Some(e.to_string()),
        }),
        Err(onlyone::Error::MissingDir { .. }) => Err(None),
        Err(e) => Err(Some(e.to_string())),
    };
    if let (Ok(l), Ok(slots)) = (&lock, &slots) {
        s.slot_holders = slot_holders(path, &s.name, slots, deadline);
        // A lock of several slots has waiters only while every slot is
        // held; slot 0 may be free a moment before its head takes it.
        if !slots.is_empty() {
            s.waiters = l
                .waiters()
                .into_iter()
                .map(|w| {
                    let r = w.record;
                    WaiterStatus::new(r.pid, r.host, r.uid, r.cmd, r.since, w.queued)
                })
                .collect();
        }
    }
    match &slots {
        Ok(slots) => {
            if let Some((_, _, seen)) = slots.iter().find(|(k, _, _)| *k == 0) {
                s.late = judged_late(seen, deadline);
                fill(&mut s, seen, deadline);
            }
        }
        Err(None) => {}
        Err(Some(e)) => {
            s.state = "unknown";
            s.reason = Some(e.clone());
        }
    }
    if let Some(h) = history {
        let h = h.map(|mut h| {
            match &slots {
                Ok(slots) => {
                    onlyone::place::dir::close_over(&mut h, slots.iter().map(|(_, _, i)| i));
                }
                Err(None) => h.close_over(onlyone::journal::LockNow::Free),
                Err(Some(_)) => h.close_over(onlyone::journal::LockNow::CannotTell),
            }
            h
        });
        apply_history(&mut s, h);
    }
    s.slot_count = slot_count(&s);
    s
}

/// A lock's status where nothing is known of it yet: free.
fn blank(path: &Path, name: String) -> LockStatus {
    LockStatus {
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
        other_account: None,
        token: None,
        reason: None,
        stopped: false,
        last_run: None,
        last_success_unix: None,
        skipped_since_start: None,
        journal_error: None,
        waiters: Vec::new(),
        outside_work: Vec::new(),
        lease: None,
        starting: None,
        schedule: None,
        slot_count: None,
        slot_holders: Vec::new(),
        history: None,
        late: false,
        missing: None,
    }
}

/// The slots above 0 of a lock whose files exist (`slots`: every slot
/// file's inspection, looked at by the lock's deadline), each described
/// as a lock (no journal: the runs are the lock's) named `NAME[K]`.
fn slot_holders(
    lock: &Path,
    name: &str,
    slots: &[(u32, std::path::PathBuf, Inspection)],
    deadline: Option<std::time::Instant>,
) -> Vec<LockStatus> {
    let _ = lock;
    slots
        .iter()
        .filter(|(k, _, _)| *k > 0)
        .map(|(k, path, seen)| {
            let mut s = blank(path, format!("{name}[{k}]"));
            s.late = judged_late(seen, deadline);
            fill(&mut s, seen, deadline);
            s
        })
        .collect()
}

/// N of a lock of several slots, as a held slot's record of this account
/// says it (the lock's own first).
fn slot_count(s: &LockStatus) -> Option<u32> {
    std::iter::once(s)
        .chain(&s.slot_holders)
        .filter(|l| l.other_account.is_none())
        .find_map(|l| l.slot_count)
}

/// What the journal says: the runs (the last, the last success, the
/// skips of the current run).
fn read_history(journal: &Journal) -> Result<onlyone::journal::History, String> {
    journal.history().map_err(|e| {
        format!(
            "cannot read the journal `{}`: {e}",
            journal.path().display()
        )
    })
}

fn fill(s: &mut LockStatus, seen: &Inspection, deadline: Option<std::time::Instant>) {
    if let Some(uid) = seen.other_account() {
        fill_other(s, seen, uid);
        return;
    }
    if let Ok(r) = &seen.record {
        s.pid = Some(r.pid);
        s.command_pid = r.cmd_id.map(|c| c.pid);
        s.since_unix = r.since;
        s.since = r.since.map(onlyone::command::format_unix_time);
        s.age_seconds = r.since.map(|t| now_unix().saturating_sub(t));
        s.command = r.cmd.clone();
        s.mode = (!r.is_bare()).then_some(r.mode.as_str());
        s.host = r.host.clone();
        s.uid = r.uid;
        s.slot_count = r.slots;
        s.token = r.token.clone();
    }
    match &seen.verdict {
        Verdict::Held(h) => {
            s.state = "held";
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
            let keepers = match &seen.record {
                Ok(r) => keepers_of(r, h, deadline),
                Err(_) => Vec::new(),
            };
            s.outside_work = keepers.iter().map(OutsideWork::of).collect();
            match (h, &seen.record) {
                (Holder::Member { .. }, Ok(r)) if !keepers.is_empty() => reasons.push(format!(
                    "{}, and nothing of the run's own work lives; held by {}: {}",
                    wrapper_gone(r),
                    keepers_words(&keepers),
                    keepers_remedy(&keepers)
                )),
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

/// Another account's file (`uid`'s) at a lock path: its state and the
/// process that proves it held, named as that account's; nothing it says
/// of a run (command, age, token, slots) is shown as this lock's.
fn fill_other(s: &mut LockStatus, seen: &Inspection, uid: u32) {
    let who = onlyone::command::user_name(uid);
    s.other_account = Some(who.clone());
    s.uid = Some(uid);
    if let Ok(r) = &seen.record {
        s.pid = Some(r.pid);
        s.host = r.host.clone();
    }
    let (state, what) = match &seen.verdict {
        Verdict::Held(h) => {
            s.holder_pid = Some(h.pid()).filter(|&p| p != 0);
            s.holder = Some("other-account");
            ("held", format!("held by pid {}", h.pid()))
        }
        Verdict::Stale(r) => ("stale", format!("stale ({r})")),
        Verdict::Unknown(r) => ("unknown", format!("not judged ({r})")),
    };
    s.state = state;
    s.reason = Some(format!(
        "another account's file ({who}), {what}: not a run of this lock's; keep the job's locks \
         in a directory no other account can write in"
    ));
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

/// For a lock that is free (or nowhere) in a user's default directory:
/// where root's lock of that name is, when there is one (a cron job of
/// root's), since "free" alone reads as "root's job is not running". The
/// words after the lock's own: `root's locks are in ...`.
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
        "root's locks are in `{}`, which has one of that name: onlyone --dir {} status {}",
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
        ctx.listing().map_err(|e| e.to_string())?
    } else {
        (named.to_vec(), None)
    };
    let mut out = Vec::with_capacity(targets.len());
    // The locks of one directory share its handle, and their verdicts one
    // listing of the host's processes.
    let mut first: Option<LockFile> = None;
    onlyone::command::with_census(|| {
        for t in targets {
            let has_journal = journals.as_ref().is_none_or(|j| j.contains(&t));
            let path = names::lock_path(&t, dir).map_err(|e| e.to_string())?;
            let name = names::display_name(&path, dir);
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                let mut s = blank(&path, name);
                s.state = "unknown";
                s.reason = Some(NOT_REACHED.to_owned());
                s.late = true;
                out.push(s);
                continue;
            }
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
            let journal = has_journal.then(|| match &lock {
                Ok(l) => ctx.journal(l),
                Err(_) => ctx.journal_at(&path),
            });
            let looked_in = journal.as_ref().map(Journal::path);
            let mut s = describe(&path, name, lock, journal, deadline);
            if !named.is_empty() {
                s.missing = nowhere(&s, &path, looked_in.as_deref());
            }
            out.push(s);
        }
        Ok(out)
    })
}

/// Where a lock named was looked for, when it is nowhere: no lock file (of
/// any kind: a bare pid is another tool's lock; a lock file makes its
/// state held, stale or unknown, never free), no slot's file, and nothing
/// in a journal that could be read. A lock that ran and is free now, its
/// file gone (its run removed it, or a reboot emptied `/run`), is there.
fn nowhere(s: &LockStatus, path: &Path, journal: Option<&Path>) -> Option<String> {
    let there = s.state != "free"
        || !s.slot_holders.is_empty()
        || s.journal_error.is_some()
        || s.history.as_ref().is_some_and(|h| !nothing_in(h));
    (!there).then(|| match journal {
        Some(j) => format!(
            "no lock file `{}` and nothing in the journal `{}`",
            path.display(),
            j.display()
        ),
        None => format!("no lock file `{}`", path.display()),
    })
}

/// What the record's owner is called: a run's wrapper, or the owner.
fn owner_word(r: &onlyone::Record) -> &'static str {
    match r.mode {
        onlyone::Mode::Run => "wrapper",
        _ => "owner",
    }
}

/// Says, of each lock (and slot) shown unknown for want of time, that it
/// was not judged within `status`'s deadline (`given`) and how to give
/// more: how many there were.
fn not_in_time(locks: &mut [LockStatus], given: Duration) -> usize {
    let mut n = 0;
    for l in locks {
        n += not_in_time(&mut l.slot_holders, given);
        if l.late {
            let why = l.reason.take().unwrap_or_default();
            l.reason = Some(format!(
                "not judged within status's deadline of {} ({why}); give it more time with \
                 --deadline DUR",
                compact_duration(given)
            ));
            n += 1;
        }
    }
    n
}

/// `status`, in either place: one schema for `--json`, one table.
pub fn status(place: &dyn Place, a: Status) -> Ending {
    let deadline = std::time::Instant::now() + a.deadline;
    let mut shown = match place.shown(&a.locks, Some(deadline)) {
        Ok(s) => s,
        Err(e) => {
            super::say(e);
            return Ending::Failed;
        }
    };
    // What could not be judged for want of time says so.
    {
        let n = not_in_time(&mut shown.locks, a.deadline);
        if n > 0 {
            shown.notes.push(format!(
                "status: the deadline of {} ran out before {n} lock(s) were judged: they are \
                 shown unknown; give it more time with --deadline DUR",
                compact_duration(a.deadline)
            ));
        }
    }
    for n in &shown.notes {
        super::say(n);
    }
    // A name that is nowhere is a mistake, said as `history` and `check`
    // say it; the locks that are there are shown all the same.
    let missing = shown.missing.len();
    for (name, looked) in &shown.missing {
        super::say(no_such_lock(name, looked));
    }
    if missing > 0 && shown.locks.is_empty() {
        return Ending::Failed;
    }
    super::schedule::watch::annotate(&mut shown.locks, a.schedule.schedule.as_ref());
    let locks = &shown.locks;
    // One write(2) per buffer, not per line: stdout is line-buffered.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if a.json {
        let (dir, store) = match &shown.whence {
            Whence::Dir(d) => (Some(d.clone()), None),
            Whence::Store(s) => (None, Some(s.clone())),
        };
        let report = Report {
            schema: 1,
            dir,
            store,
            locks,
        };
        serde_json::to_string_pretty(&report)
            .map_err(std::io::Error::from)
            .and_then(|json| writeln!(out, "{}", onlyone::text::json_for_terminal(&json)))
    } else {
        if locks.is_empty() {
            super::say(&shown.none);
        }
        print_table(&mut out, locks, std::io::stdout().is_terminal())
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) if missing > 0 => Ending::Failed,
        Ok(()) => Ending::Done,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ending::Done,
        Err(e) => {
            super::say(format_args!("cannot write the status: {e}"));
            Ending::Failed
        }
    }
}

impl Ctx {
    /// The lock directory's status: its locks, and the hints a user's
    /// default directory needs (root's locks are elsewhere).
    pub(super) fn shown_in_dir(
        &self,
        named: &[String],
        deadline: Option<std::time::Instant>,
    ) -> Result<Shown, String> {
        let dir = self.dir().to_path_buf();
        let mut locks = describe_all(self, named, deadline)?;
        let mut notes = Vec::new();
        for l in &mut locks {
            if let Some(hint) = roots_lock_hint(l, &dir, self.source()) {
                match &mut l.missing {
                    Some(looked) => *looked = format!("{looked}; {hint}"),
                    None => notes.push(format!(
                        "`{}` is free in `{}` (this user's default directory); {hint}",
                        l.name,
                        dir.display()
                    )),
                }
            }
            if let Some(e) = &l.journal_error {
                notes.push(format!("status: {}", for_terminal(e)));
            }
        }
        // Say where it looked: as another user, root's locks are
        // elsewhere.
        let none = format!(
            "no locks in `{}`{}",
            dir.display(),
            other_dirs_hint(&dir, self.source())
        );
        let (missing, locks): (Vec<LockStatus>, Vec<LockStatus>) =
            locks.into_iter().partition(|l| l.missing.is_some());
        Ok(Shown {
            locks,
            whence: Whence::Dir(dir.display().to_string()),
            notes,
            none,
            missing: missing
                .into_iter()
                .filter_map(|l| Some((l.name, l.missing?)))
                .collect(),
        })
    }
}

/// A table: aligned for a terminal, tab-separated otherwise (for `cut`).
fn print_table(out: &mut impl Write, locks: &[LockStatus], aligned: bool) -> std::io::Result<()> {
    if locks.iter().any(|l| l.lease.is_some()) {
        return print_leases(out, locks, aligned);
    }
    let header = [
        "LOCK", "STATE", "PID", "CMDPID", "SINCE", "AGE", "LAST RUN", "SKIPPED", "COMMAND",
    ];
    let rows: Vec<Vec<String>> = locks
        .iter()
        .flat_map(|l| std::iter::once(l).chain(&l.slot_holders))
        .map(|l| {
            let opt = |v: Option<u32>| v.map_or("-".to_owned(), |v| v.to_string());
            let mut cmd = l.command.clone().unwrap_or_else(|| "-".into());
            if let Some(r) = &l.reason {
                cmd = format!("{cmd}  [{r}]");
            }
            cmd.push_str(&waiting_cell(l));
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
            .to_vec()
        })
        .collect();
    write_table(out, &header, &rows, aligned)
}

/// The store's locks: its host, lease and fence columns.
fn print_leases(out: &mut impl Write, locks: &[LockStatus], aligned: bool) -> std::io::Result<()> {
    let header = [
        "LOCK",
        "STATE",
        "HOST",
        "PID",
        "SINCE",
        "LEASE LEFT",
        "FENCE",
        "LAST RUN",
        "SKIPPED",
        "COMMAND",
    ];
    let rows: Vec<Vec<String>> = locks
        .iter()
        .flat_map(|l| std::iter::once(l).chain(&l.slot_holders))
        .filter_map(|l| Some((l, l.lease.as_ref()?)))
        .map(|(l, lease)| {
            let state = if lease.holder_alive == Some(false) {
                "held (its pid is dead)"
            } else {
                l.state
            };
            let left = if l.state == "held" {
                compact_duration(Duration::from_secs_f64(lease.lease_left_seconds.max(0.0)))
            } else {
                "-".into()
            };
            [
                onlyone::record::escape_value(&l.name),
                state.to_owned(),
                onlyone::record::escape_value(l.host.as_deref().unwrap_or("-")),
                l.pid.map_or("-".into(), |p| p.to_string()),
                l.since.clone().unwrap_or_else(|| "-".into()),
                left,
                lease.fence.to_string(),
                l.last_run.as_ref().map_or("-".into(), last_run_cell),
                l.skipped_since_start.map_or("-".into(), |n| n.to_string()),
                onlyone::record::escape_value(&format!(
                    "{}{}",
                    l.command.as_deref().unwrap_or("-"),
                    waiting_cell(l)
                )),
            ]
            .map(|c| for_terminal(&c).into_owned())
            .to_vec()
        })
        .collect();
    write_table(out, &header, &rows, aligned)
}

/// Who waits for a lock, as the table adds it to the command: `  [waiting:
/// pid N (queued) for AGE, ...]`, or nothing. A store's waiters may be of
/// any host: each is named with its host.
fn waiting_cell(l: &LockStatus) -> String {
    let starting = super::schedule::watch::starting_cell(l);
    if l.waiters.is_empty() {
        return starting;
    }
    let with_host = l.lease.is_some();
    let w: Vec<String> = l.waiters.iter().map(|w| w.cell(with_host)).collect();
    format!("  [waiting: {}]{starting}", w.join(", "))
}

/// One table renderer: aligned columns for a terminal, tab-separated
/// otherwise (for `cut`).
fn write_table(
    out: &mut impl Write,
    header: &[&str],
    rows: &[Vec<String>],
    aligned: bool,
) -> std::io::Result<()> {
    if !aligned {
        writeln!(out, "{}", header.join("\t"))?;
        for r in rows {
            writeln!(out, "{}", r.join("\t"))?;
        }
        return Ok(());
    }
    if rows.is_empty() {
        return Ok(());
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[&str]| {
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
    for r in rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        writeln!(out, "{}", line(&cells))?;
    }
    Ok(())
}

/// "exit 0, 3h ago (2m5s)", "released, exit 0, 1m ago (5s)": how it
/// ended in the words of `history`.
fn last_run_cell(r: &LastRun) -> String {
    let how = &r.described;
    let took = r
        .duration_seconds
        .map(|d| format!(" ({})", took(d)))
        .unwrap_or_default();
    format!("{how}, {}{took}", ago(r.start_unix))
}
