//! What the commands show of a lock, in either place: one status view
//! ([`LockStatus`], the `status --json` schema), what `check` and
//! `metrics` know ([`Seen`]), a run's outcome in one word, and the listing
//! of a lock directory.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use onlyone::command::compact_duration;
use onlyone::journal::{History, LockNow, Outcome, Usage};
use onlyone::reap::Keeper;
use onlyone::text::for_terminal;
use onlyone::{Inspection, Verdict};

use super::format::now_unix;

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
    /// What that process is: `owner`, `command`, `leftover`, `kernel-lock`,
    /// `outside` (not onlyone's: `flock(1)`), or `other-account` (another
    /// account's file: see `other_account`).
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
    /// The account that owns the lock file, when it is another than the
    /// one asking (and not root), in a directory other accounts may write
    /// in: its holder is that account's, not a run of this lock's (its
    /// command, age, token and number of slots are not shown). Left out
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_account: Option<String>,
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
    /// Who waits for the lock, first in line first.
    pub waiters: Vec<WaiterStatus>,
    /// What keeps a lingering run's lock held once nothing of its own
    /// work lives: sessions opened later on its terminal server, processes
    /// outside its work that carry its token. Empty otherwise.
    pub outside_work: Vec<OutsideWork>,
    /// With a store: the lease.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseStatus>,
    /// A fire waiting before it takes the lock (`run --jitter`,
    /// `--spread`). Left out when none waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starting: Option<Starting>,
    /// The lock's schedule (given, or kept in its journal). Left out when
    /// none is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleStatus>,
    /// For a lock of several slots (`--slots N`): N, as a holder's record
    /// says it. Left out for a lock of one slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot_count: Option<u32>,
    /// The slots above 0 whose files exist, each as a lock's status named
    /// `NAME[K]` (slot 0 is the lock's own fields). Left out when there
    /// are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slot_holders: Vec<LockStatus>,
    /// The journal's runs, while the status is put together.
    #[serde(skip)]
    pub(super) history: Option<onlyone::journal::History>,
    /// Unknown for want of time: its processes were not listed, or it
    /// was not looked at, by the deadline.
    #[serde(skip)]
    pub(super) late: bool,
    /// A lock named that is nowhere (no lock file, no slot's file, nothing
    /// in its journal: a typo): where it was looked for. Not shown: said.
    #[serde(skip)]
    pub(super) missing: Option<String>,
}

/// A fire waiting before it takes the lock, as `status --json` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Starting {
    /// The waiting process.
    pub pid: u32,
    /// The command it will run.
    pub command: Option<String>,
    /// When it takes the lock, Unix seconds.
    pub at_unix: f64,
    /// Seconds until then.
    pub in_seconds: f64,
}

/// A lock's schedule, as `status --json` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleStatus {
    /// The schedule's spec.
    pub spec: String,
    /// When it next fires, Unix seconds.
    pub next_fire_unix: Option<i64>,
    /// The slots recorded missed, all told.
    pub missed_total: u64,
}

/// One who waits for a lock (`run --wait`, `run --queue`), as `status
/// --json` prints it.
#[derive(Debug, Serialize)]
pub struct WaiterStatus {
    /// The waiting process (a run's wrapper).
    pub pid: u32,
    /// Its host.
    pub host: Option<String>,
    /// Its uid.
    pub uid: Option<u32>,
    /// The command it will run.
    pub command: Option<String>,
    /// When it began to wait, RFC 3339 (UTC).
    pub since: Option<String>,
    /// The same, in Unix seconds.
    pub since_unix: Option<u64>,
    /// True for the one that holds the queue's place (`--queue`).
    pub queued: bool,
}

impl WaiterStatus {
    /// A waiter, from what its place says of it.
    pub fn new(
        pid: u32,
        host: Option<String>,
        uid: Option<u32>,
        command: Option<String>,
        since_unix: Option<u64>,
        queued: bool,
    ) -> WaiterStatus {
        WaiterStatus {
            pid,
            host,
            uid,
            command,
            since: since_unix.map(onlyone::command::format_unix_time),
            since_unix,
            queued,
        }
    }

    /// How the table shows it: `pid N (queued) for AGE`; `pid N on HOST
    /// ...` with `host` (a store's waiters, whose pids are their hosts').
    pub fn cell(&self, host: bool) -> String {
        let on = match (&self.host, host) {
            (Some(h), true) => format!(" on {h}"),
            (None, true) => " on an unknown host".to_owned(),
            _ => String::new(),
        };
        let queued = if self.queued { " (queued)" } else { "" };
        let age = self
            .since_unix
            .map(|t| {
                format!(
                    " for {}",
                    compact_duration(Duration::from_secs(now_unix().saturating_sub(t)))
                )
            })
            .unwrap_or_default();
        format!("pid {}{on}{queued}{age}", self.pid)
    }
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
    /// What that counts as: `success`, `failure`, `done-when-idle`,
    /// `stopped` or `exit-unknown`.
    pub result: &'static str,
    /// Its exit code, when it exited (or the script gave one).
    pub exit: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<String>,
    /// How long it lasted, seconds.
    pub duration_seconds: Option<f64>,
    /// What it used.
    #[serde(flatten)]
    pub usage: UsageJson,
    /// How it ended, in the words `history` uses (`released, exit 0`).
    #[serde(skip)]
    pub described: String,
}

/// What a run used, as `history --json` and `status --json` print it:
/// null when its end does not say (a run that is not over, a script's
/// hold, an end written before these were recorded).
#[derive(Debug, Serialize)]
pub struct UsageJson {
    /// CPU time in user mode, seconds: the command and the processes of
    /// the run onlyone reaped.
    pub cpu_user_seconds: Option<f64>,
    /// CPU time in the kernel on their behalf, seconds.
    pub cpu_system_seconds: Option<f64>,
    /// The largest peak resident set size of one of those processes,
    /// bytes (the biggest process's peak, not a sum).
    pub max_rss_bytes: Option<u64>,
}

impl UsageJson {
    pub fn of(u: Option<&Usage>) -> UsageJson {
        UsageJson {
            cpu_user_seconds: u.map(|u| u.user.as_secs_f64()),
            cpu_system_seconds: u.map(|u| u.system.as_secs_f64()),
            max_rss_bytes: u.map(|u| u.max_rss),
        }
    }
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

/// One lease of the store as a lock's status: the same fields as a lock
/// file's, the lease's added; `here` is this host's name (a holder of this
/// host is looked for), `history` the store's history of the name.
pub fn of_lease(
    row: &onlyone::place::store::LeaseRow,
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
        since: Some(onlyone::command::format_unix_time(since)),
        since_unix: Some(since),
        age_seconds: Some(now_unix().saturating_sub(since)),
        command: row.cmd.clone(),
        mode: Some("run"),
        host: row.host.clone(),
        uid: row.uid,
        other_account: None,
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
        waiters: Vec::new(),
        outside_work: Vec::new(),
        starting: None,
        schedule: None,
        lease: Some(LeaseStatus {
            fence: row.epoch,
            lease_left_seconds: left,
            stop_requested: row.stop_requested,
            holder_alive,
        }),
        slot_count: None,
        slot_holders: Vec::new(),
        history: None,
        late: false,
        missing: None,
    };
    apply_history(&mut s, history);
    s
}

/// The last run, the last success and the history itself, from what a
/// place's event log gave (or why it could not be read).
pub fn apply_history(s: &mut LockStatus, h: Result<onlyone::journal::History, String>) {
    let mut h = match h {
        Ok(h) => h,
        Err(e) => {
            s.journal_error = Some(e);
            return;
        }
    };
    let token = s.token.as_deref();
    h.close_over(match (s.state, token) {
        ("held", Some(t)) => LockNow::HeldBy(t),
        ("free" | "stale", _) => LockNow::Free,
        _ => LockNow::CannotTell,
    });
    if let ("held", Some(t)) = (s.state, token) {
        s.skipped_since_start = Some(h.skips_of(t));
    }
    if let Some(r) = h.last_over() {
        let (exit, signal) = match &r.outcome {
            Outcome::Exited(c) => (Some(*c), None),
            Outcome::Signaled(sig) => (None, Some(sig.clone())),
            Outcome::Ended { exit, .. } | Outcome::Released { exit } => (*exit, None),
            _ => (None, None),
        };
        s.last_run = Some(LastRun {
            start_unix: r.start,
            outcome: outcome_word(&r.outcome),
            result: r.outcome.class().as_str(),
            exit,
            signal,
            duration_seconds: r.duration,
            usage: UsageJson::of(r.usage.as_ref()),
            described: r.outcome.describe(),
        });
    }
    s.last_success_unix = h.last_success().map(|r| r.end.unwrap_or(r.start));
    s.history = Some(h);
}

/// The outcome's one word: `exit`, `signal`, `ended`, `abandoned`,
/// `released` or `running`.
pub fn outcome_word(o: &Outcome) -> &'static str {
    match o {
        Outcome::Running => "running",
        Outcome::Exited(_) => "exit",
        Outcome::Signaled(_) => "signal",
        Outcome::Ended { .. } => "ended",
        Outcome::Abandoned => "abandoned",
        Outcome::Released { .. } => "released",
        _ => "unknown",
    }
}

/// What is known of one lock: whether a run holds it (since when, under
/// which token), whether it can be judged, and its journal.
pub(super) struct Seen {
    pub(super) name: String,
    /// Held by a live run: its token and since when (Unix seconds).
    pub(super) held: Option<(Option<String>, Option<f64>)>,
    /// Why it cannot be judged.
    pub(super) unknown: Option<String>,
    pub(super) history: History,
    /// Neither a lock nor an event of it was found: where onlyone looked
    /// (a typo, the wrong user or directory).
    pub(super) missing: Option<String>,
    /// A lock of several slots: N, and how many slots live runs hold.
    pub(super) slots: Option<(u32, u32)>,
    /// Unknown for want of time (see [`judged_late`]).
    pub(super) late: bool,
    /// Another account's file holds the lock itself (a shared lock
    /// directory): what it is, for `check` to warn of (the job's fires
    /// skip while it holds), never a run of this lock's.
    pub(super) other: Option<String>,
}

pub use onlyone::reap::keepers_of;

/// What `check` and `status` say of a lock their deadline ran out before.
pub(super) const NOT_REACHED: &str = "not looked at: the deadline ran out before it";

/// Whether `seen` is unknown for want of time: its run's processes could
/// not be listed, and `deadline` has passed (a search of `/proc` stops
/// there, and so does a wait for a process in exit(2)).
pub(super) fn judged_late(seen: &Inspection, deadline: Option<std::time::Instant>) -> bool {
    matches!(
        seen.verdict,
        Verdict::Unknown(onlyone::UnknownReason::CannotScan { .. })
    ) && deadline.is_some_and(|d| std::time::Instant::now() >= d)
}

/// What `check` and `history` say of a name that is nowhere: neither a
/// lock nor an event of it where they `looked` (a typo, the wrong user or
/// directory).
pub(super) fn no_such_lock(name: &str, looked: &str) -> String {
    format!(
        "{name}: no such lock: {looked} (is the name right, and the lock directory, --dir, and \
         the user the job runs as?)"
    )
}

/// True when a place's event log has nothing of a lock: no event of any
/// kind (a run, a skip, a stop, a schedule kept...), and no earlier
/// journal set aside (one refused is not a typo).
pub(super) fn nothing_in(h: &History) -> bool {
    h.events == 0 && h.set_aside.is_empty()
}

impl Seen {
    /// From the lock directory: the record's verdict and the journal.
    pub(super) fn of_dir(name: String, inspection: Option<Inspection>, history: History) -> Seen {
        let mut other = None;
        let (held, unknown) = match &inspection {
            // Another account's file holds no run of this lock's; held or
            // not judged, it stands in the job's way.
            Some(i) if !i.is_ours() => {
                let who = onlyone::command::user_name(i.owner);
                match &i.verdict {
                    Verdict::Held(h) => {
                        other = Some(format!(
                            "the lock is held by pid {} of another account ({who}), not by a run \
                             of this job: its fires skip while it holds it",
                            h.pid()
                        ));
                        (None, None)
                    }
                    Verdict::Unknown(r) => (None, Some(format!("{r}; the file is {who}'s"))),
                    _ => (None, None),
                }
            }
            Some(i) => match &i.verdict {
                Verdict::Held(_) => {
                    let r = i.record.as_ref().ok();
                    (
                        Some((
                            r.and_then(|r| r.token.clone()),
                            r.and_then(|r| r.since).map(|s| s as f64),
                        )),
                        None,
                    )
                }
                Verdict::Unknown(r) => (None, Some(r.to_string())),
                _ => (None, None),
            },
            None => (None, None),
        };
        Seen {
            name,
            held,
            unknown,
            history,
            missing: None,
            slots: None,
            late: false,
            other,
        }
    }

    /// Adds what the slots above 0 of a lock of several show (`slots`:
    /// each slot's inspection, slot 0 first): N, how many are held, and,
    /// when slot 0 is not, the first held slot's run as the current one.
    pub(super) fn with_slots(mut self, slots: &[(u32, Inspection)]) -> Seen {
        // Another account's files hold no run of this lock's, and say
        // nothing of its number of slots.
        let ours = || slots.iter().map(|(_, i)| i).filter(|i| i.is_ours());
        let n = ours().find_map(|i| i.record.as_ref().ok().and_then(|r| r.slots));
        let Some(n) = n else {
            return self.with_journals_slots();
        };
        let held: Vec<&Inspection> = ours()
            .filter(|i| matches!(i.verdict, Verdict::Held(_)))
            .collect();
        if self.held.is_none()
            && let Some(r) = held.first().and_then(|i| i.record.as_ref().ok())
        {
            self.held = Some((r.token.clone(), r.since.map(|s| s as f64)));
        }
        self.slots = Some((n, held.len() as u32));
        self
    }

    /// For a lock that has had several slots and whose holders' records
    /// say no N (it is free): N as its journal last knew it, and the slots
    /// held, so that its slot families stay while it is free (a series
    /// that comes and goes breaks `rate()` and alerts).
    pub(super) fn with_journals_slots(mut self) -> Seen {
        if self.slots.is_none()
            && let Some(n) = self.history.slots()
        {
            self.slots = Some((n, u32::from(self.held.is_some())));
        }
        self
    }

    /// The current run: since when (Unix seconds).
    pub(super) fn running_since(&self) -> Option<f64> {
        self.held.as_ref().and_then(|(_, since)| *since)
    }

    pub(super) fn running(&self) -> bool {
        self.held.is_some()
    }

    /// The fires skipped in a row: those of the current run when one is
    /// held (by its token), else since the last run began. A lock of
    /// several slots skips a fire only while every slot is held, and the
    /// skip names one of the runs: since the last run began, held or not.
    pub(super) fn skips_in_a_row(&self) -> u64 {
        let several = self.slots.is_some_and(|(n, _)| n > 1);
        match self.held.as_ref().and_then(|(t, _)| t.as_deref()) {
            Some(t) if !several => self.history.skips_of(t),
            _ => self.history.skips_in_a_row(),
        }
    }
}

/// The lock files in `dir`: regular `*.lock` files, not temp files.
pub(super) fn lock_files(dir: &Path) -> std::io::Result<Vec<String>> {
    onlyone::place::dir::lock_listing(dir).map(|(locks, _)| locks)
}

/// What a place shows for `status`: its locks, where they were read, and
/// what to say beside them.
pub struct Shown {
    /// The locks, described.
    pub locks: Vec<LockStatus>,
    /// The lock directory, or the store's URL (its password masked).
    pub whence: Whence,
    /// Said on stderr, one line each.
    pub notes: Vec<String>,
    /// Said when there is no lock to show (not with `--json`).
    pub none: String,
    /// The names given that are nowhere (a typo), each with where it was
    /// looked for: said as `history` says it, and the exit is 125.
    pub missing: Vec<(String, String)>,
}

/// Where a status was read.
pub enum Whence {
    /// A lock directory.
    Dir(String),
    /// A store.
    Store(String),
}

/// A process outside a lingering run's own work that keeps its lock held,
/// as `status --json` prints it (`outside_work`).
#[derive(Debug, Serialize)]
pub struct OutsideWork {
    /// The process: the leader of a session opened later on the run's
    /// terminal server, or a process outside the work that carries the
    /// run's token.
    pub pid: u32,
    /// Its command line.
    pub command: Option<String>,
    /// Its terminal (`/dev/pts/3`).
    pub terminal: Option<String>,
    /// The run's terminal server its session lives in.
    pub server_pid: Option<u32>,
}

impl OutsideWork {
    pub fn of(k: &Keeper) -> OutsideWork {
        OutsideWork {
            pid: k.pid,
            command: k.command.clone(),
            terminal: k.terminal.clone(),
            server_pid: k.server,
        }
    }
}

/// "pid 4321 (`bash`, on /dev/pts/3), a session that the run's terminal
/// server (pid 4200) opened after its command exited": each keeper, and
/// why it is not the run's.
pub fn keepers_words(keepers: &[Keeper]) -> String {
    let one = |k: &Keeper| {
        let cmd = for_terminal(k.command.as_deref().unwrap_or("?")).into_owned();
        let on = k
            .terminal
            .as_deref()
            .map(|t| format!(", on {t}"))
            .unwrap_or_default();
        match k.server {
            Some(s) => format!(
                "pid {} (`{cmd}`{on}), a session that the run's terminal server (pid {s}) opened \
                 after the run's command exited",
                k.pid
            ),
            None => format!(
                "pid {} (`{cmd}`{on}), which carries the run's token but started after its \
                 command exited, outside its work",
                k.pid
            ),
        }
    };
    let all: Vec<String> = keepers.iter().map(one).collect();
    all.join("; and by ")
}

/// The one thing to do about keepers: close the sessions, end the others.
/// onlyone never does it itself.
pub fn keepers_remedy(keepers: &[Keeper]) -> String {
    let list = |f: fn(&&Keeper) -> bool| {
        let p: Vec<String> = keepers
            .iter()
            .filter(f)
            .map(|k| k.pid.to_string())
            .collect();
        p.join(" ")
    };
    let sessions = list(|k| k.server.is_some());
    let others = list(|k| k.server.is_none());
    let mut todo = Vec::new();
    if !sessions.is_empty() {
        todo.push(format!(
            "close that session (exit its shell, or `kill -HUP {sessions}`)"
        ));
    }
    if !others.is_empty() {
        todo.push(format!("end that process (`kill {others}`)"));
    }
    format!(
        "not the run's own work, so onlyone never ends it: {}, and the lock is free",
        todo.join(" and ")
    )
}

/// "pid 4242 on build-01 (`./sync.sh`, for 3m12s, fence 17)".
pub(super) fn describe_lease(row: &onlyone::place::store::LeaseRow) -> String {
    describe_lease_ago(row, Duration::ZERO)
}

/// The holder of `row` as [`describe_lease`] says it, as it was `ago`.
pub(super) fn describe_lease_ago(row: &onlyone::place::store::LeaseRow, ago: Duration) -> String {
    let now = super::format::now() - ago.as_secs_f64();
    format!(
        "pid {} on {} (`{}`, for {}, fence {})",
        row.pid.map_or_else(|| "?".into(), |p| p.to_string()),
        onlyone::text::for_terminal(row.host.as_deref().unwrap_or("?")),
        onlyone::text::for_terminal(row.cmd.as_deref().unwrap_or("?")),
        compact_duration(onlyone::place::store::seconds(now - row.since)),
        row.epoch
    )
}
