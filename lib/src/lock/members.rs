//! Run membership: which live processes belong to a run, and which a
//! record may name.
//!
//! A run's processes are its command's process group, the carriers of its
//! token (`ONLYONE_TOKEN`), and a script owner's forks that have not
//! exec'd ([`run_members`], from a [`RunSpec`]); what another account can
//! copy or reuse counts only for the record's own user
//! ([`RunSpec::may_carry`]). The protocol's environment variables are
//! named here. Reports share one listing of the host's processes
//! ([`with_census`]). The `/proc` reading itself is [`crate::procfs`]'s.

use std::fs;
use std::io::{self, Read};
use std::time::{Duration, Instant};

use crate::procfs::{
    Environ, Group, Image, ProcId, ProcStat, all_pids, environ_has, is_dead_process, is_gone,
    read_stat, runs_as, systemd_cgroup, uid_of,
};
use crate::record::{Mode, Record};

/// A process found to belong to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The process.
    pub id: ProcId,
    /// Its `/proc/PID/stat` fields.
    pub stat: ProcStat,
    /// Why it belongs to the run.
    pub why: Membership,
}

/// How a process was found to belong to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// It is in the command's process group.
    ProcessGroup,
    /// Its environment carries the run's `ONLYONE_TOKEN`.
    Token,
    /// It is a fork of the script that owns the lock and has not exec'd
    /// (it has the owner's [`Image`]): a subshell worker, or a worker
    /// between its fork and its exec.
    OwnerFork,
}

/// The name of the environment variable that marks the processes of a run.
pub const TOKEN_VAR: &str = "ONLYONE_TOKEN";
/// The name of the environment variable that names a run's lock file.
pub const LOCK_VAR: &str = "ONLYONE_LOCK";
/// The name of the environment variable that gives a run its fence (the
/// PostgreSQL store's epoch: it grows with every acquisition).
pub const FENCE_VAR: &str = "ONLYONE_FENCE";
/// The name of the environment variable that gives a run's command its
/// run id ([`crate::journal::run_id`]): what its journal events and its
/// pings call it.
pub const RUN_ID_VAR: &str = "ONLYONE_RUN_ID";
/// The name of the environment variable that gives a run's command the
/// number of the slot it holds: 0..N-1 for a lock of N slots, 0 for a lock
/// of one.
pub const SLOT_VAR: &str = "ONLYONE_SLOT";

/// What is known of a run, to find its processes.
#[derive(Debug, Clone, Copy)]
pub struct RunSpec<'a> {
    /// The run's token (`ONLYONE_TOKEN`), when its carriers belong.
    pub token: Option<&'a str>,
    /// The wrapper's start time: no process of the run started before it.
    pub since_start: Option<u64>,
    /// A process group whose members (started no earlier than
    /// `since_start`) belong: a run's command leads its own group, whose
    /// id is its pid. Once its leader is gone, only its members of the
    /// record's user (see [`run_members`]).
    pub group: Option<Group>,
    /// The uid that owns the record's file: the only user whose processes
    /// it may name (root's may name anyone's), and whose processes alone
    /// count by a token, an image or a leaderless group (see
    /// [`RunSpec::may_name`], [`RunSpec::may_carry`]).
    pub uid: Option<u32>,
    /// A script owner's image: its forks that have not exec'd belong
    /// (those of the record's user).
    pub image: Option<Image>,
    /// The owner's systemd cgroup when it acquired (escaped as in the
    /// record): a process outside it was not started by the run.
    pub cgroup: Option<&'a str>,
}

impl RunSpec<'_> {
    /// Whether a live process may be named by the record (as its owner,
    /// its command, a lingerer or a member of its group): a record names
    /// only processes of the user who owns its file, except that root's
    /// record may name anyone's (a root job's command may change user).
    /// Where that cannot be told, it may.
    pub fn may_name(&self, pid: u32) -> bool {
        may_name_in(self.uid, self.cgroup, pid)
    }

    /// Whether evidence that another account can copy or reuse may make
    /// the live process `pid` one of the run's: only with the record's
    /// user as its real uid, root's included. That evidence is the token
    /// and the owner's image (both are in the 0644 record: anyone can put
    /// the token in an environment of its own, and give a process of its
    /// own the image with `PR_SET_MM_MAP`, which needs no privilege), and
    /// the id of a process group whose leader is gone (anyone can fork
    /// until it has that pid, then lead a group of that id). A setuid
    /// program keeps its caller's real uid, so nobody's `passwd` is
    /// nobody's.
    pub fn may_carry(&self, pid: u32) -> bool {
        may_carry(self.uid, pid)
    }
}

/// [`RunSpec::may_carry`] for a record whose file `uid` owns (`None`: not
/// known, which restricts nothing): the live process `pid` may be one of
/// its run's by evidence that another account can copy or reuse only when
/// its real uid is `uid`. A process whose real uid cannot be read (gone,
/// or hidden) carries nothing. The one rule for every such evidence: a
/// token, an image, a group's id without its leader, a flock on the record
/// once its owner is gone, and, for `reap`, a lock path or token in an
/// environment.
pub fn may_carry(uid: Option<u32>, pid: u32) -> bool {
    uid.is_none_or(|uid| uid_of(pid) == Some(uid))
}

/// [`RunSpec::may_name`] for a record whose file `uid` owns.
pub fn may_name(uid: Option<u32>, pid: u32) -> bool {
    match uid {
        None | Some(0) => true,
        Some(uid) => runs_as(pid, uid) != Some(false),
    }
}

/// [`may_name`], or a process in the run's own cgroup when that is one of
/// the writer's own (systemd's `/user.slice/user-UID.slice/...`), where no
/// other user can move a process: a non-root run's `sudo` command. (The
/// `cgroup=` line is the writer's word: a forged record may name any
/// cgroup, so only the writer's own slice is believed.)
pub fn may_name_in(uid: Option<u32>, cgroup: Option<&str>, pid: u32) -> bool {
    may_name(uid, pid)
        || uid.is_some_and(|uid| {
            let own = format!("/user.slice/user-{uid}.slice/");
            cgroup.is_some_and(|c| c.starts_with(&own)) && in_run_cgroup(cgroup, pid)
        })
}

/// True when `pid` lives in the run's systemd cgroup (`cgroup`, escaped as
/// the record has it), which another user cannot move a process into: a
/// non-root run's command that changed user (`sudo`) is still the run's.
pub fn in_run_cgroup(cgroup: Option<&str>, pid: u32) -> bool {
    cgroup.is_some_and(|run| {
        systemd_cgroup(pid)
            .is_some_and(|theirs| in_cgroup(&crate::text::escape_value(&theirs), run))
    })
}

/// Who holds a recorded group's id now (see [`run_members`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupId {
    /// The recorded leader (its pid and start time; a zombie too): the id
    /// is still the run's group's, whoever is in it.
    Led,
    /// No live process has the leader's pid, or its start time was never
    /// recorded: the group's processes are the run's only by an id that
    /// another process may have taken since.
    Leaderless,
    /// Another live process has the leader's pid: the run's group is
    /// empty (a pid is never handed out while a group of that id has a
    /// member), and a group of that id now is another's.
    Reused,
}

impl GroupId {
    fn of(g: Group) -> GroupId {
        GroupId::at(g, read_stat(g.pgid).ok().flatten().as_ref())
    }

    /// Who holds `g`'s id, from what has the leader's pid now (`None`:
    /// no process). A process there with another start time, a zombie
    /// too, was handed the pid after the leader: the run's group was empty
    /// by then.
    fn at(g: Group, at_leaders_pid: Option<&ProcStat>) -> GroupId {
        match (g.leader_start, at_leaders_pid) {
            (Some(start), Some(st)) if st.start == start => GroupId::Led,
            (Some(_), Some(_)) => GroupId::Reused,
            _ => GroupId::Leaderless,
        }
    }
}

/// Whether a live process (`stat`) is one of the run's by the run's group
/// (`group`: its id and who holds it now): in that group, and then any
/// process the record may name while the leader holds the id, only one
/// of the record's user once it is leaderless, none once the id was
/// reused (see [`run_members`]).
fn in_run_group(
    group: Option<(u32, GroupId)>,
    stat: &ProcStat,
    may_name: impl FnOnce() -> bool,
    may_carry: impl FnOnce() -> bool,
) -> bool {
    match group {
        Some((pgid, held)) if stat.pgrp == pgid => match held {
            GroupId::Led => may_name(),
            GroupId::Leaderless => may_carry(),
            GroupId::Reused => false,
        },
        _ => false,
    }
}

/// The processes of a run found in `/proc`, and those that could not be
/// checked.
#[derive(Debug, Clone, Default)]
pub struct RunScan {
    /// Live processes that belong to the run.
    pub members: Vec<Member>,
    /// Live processes of the owner's uid, started after the run, whose
    /// environment could not be read: they may carry the token.
    pub unreadable: Vec<u32>,
    /// Live processes of the owner's uid, started after the run, that are
    /// in exit(2) with their memory gone (what they carried can no longer
    /// be read) and did not finish exiting in time: they may still hold
    /// the run's files.
    pub exiting: Vec<u32>,
}

/// How long one judgement of a lock waits, in all, for the processes in
/// exit(2) whose memory is gone to finish exiting (letting go of its memory
/// can take a while for a large process; its files are closed after): one
/// budget for all of them, not one each (see [`ExitBudget`]).
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(2);

/// The time one judgement (one search, when nothing larger shares it) has
/// to wait for processes in exit(2): [`EXIT_WAIT`] from its start for all of
/// them together, within the caller's deadline. Another account can keep
/// any number of its own processes in exit(2) for as long as it likes (a
/// PID namespace's init waits in exit(2) for every process of its
/// namespace to be reaped, and a zombie whose parent is outside the
/// namespace is reaped only when that parent says so): a wait for each
/// would let it make a judgement of its record take as long as it likes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExitBudget {
    end: Instant,
    deadline: Option<Instant>,
}

impl ExitBudget {
    /// A budget that starts now, within `deadline`.
    pub(crate) fn new(deadline: Option<Instant>) -> ExitBudget {
        ExitBudget {
            end: Instant::now() + EXIT_WAIT,
            deadline,
        }
    }

    /// The caller's deadline.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// When waits end: the budget's end, or the deadline if sooner.
    fn until(&self) -> Instant {
        self.deadline.map_or(self.end, |d| d.min(self.end))
    }
}

/// The processes that were still in exit(2) when a budget of [`EXIT_WAIT`]
/// ran out on them: never waited for again by this process (the last
/// [`MAX_STUCK`] of them), so that the many judgements of one command
/// (a lock's slots, its waiters' tickets, every lock of a `status`) do
/// not each spend a budget on them.
static STUCK: std::sync::Mutex<std::collections::VecDeque<ProcId>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// How many stuck processes are remembered.
const MAX_STUCK: usize = 256;

fn known_stuck(id: ProcId) -> bool {
    STUCK.lock().is_ok_and(|s| s.contains(&id))
}

fn remember_stuck(id: ProcId) {
    if let Ok(mut s) = STUCK.lock()
        && !s.contains(&id)
    {
        if s.len() >= MAX_STUCK {
            s.pop_front();
        }
        s.push_back(id);
    }
}

/// Whether `id`, whose environment read as gone, is not a live process
/// in exit(2) any more, waiting for it to finish exiting within `budget`
/// (shared with every other wait of the judgement). A process that is
/// still exiting once the budget itself ran out is never waited for again.
fn exited(id: ProcId, budget: &ExitBudget) -> bool {
    let exiting =
        matches!(read_stat(id.pid), Ok(Some(st)) if st.start == id.start && st.is_exiting());
    if !exiting {
        return true;
    }
    if known_stuck(id) {
        return false;
    }
    if crate::procfs::wait_exited(id, budget.until()) {
        return true;
    }
    if Instant::now() >= budget.end {
        remember_stuck(id);
    }
    false
}

/// Whether a process whose environment could not be read may still carry
/// the run's token: it is still the same live process, of the owner's uid,
/// and its parent is not a readable process without the token. (A process
/// inherits its environment from its parent; one whose parent lacks the
/// token got it only if that parent put it there, which no process outside
/// the run does. An orphan, adopted by pid 1, keeps the doubt.)
fn may_carry_token(pid: u32, stat: &ProcStat, spec: &RunSpec<'_>) -> bool {
    if !matches!(read_stat(pid), Ok(Some(now)) if now.start == stat.start && !now.is_dead()) {
        return false;
    }
    if !spec.may_carry(pid) {
        return false;
    }
    // Every process the run starts stays in its cgroup unless moved: one
    // in another (a login session's scope, another cron fire's) is not
    // the run's.
    if let Some(run) = spec.cgroup
        && let Some(theirs) = systemd_cgroup(pid)
        && !in_cgroup(&crate::text::escape_value(&theirs), run)
    {
        return false;
    }
    let parent = stat.ppid;
    if parent <= 1 {
        return parent == 1;
    }
    spec.token
        .is_some_and(|token| !matches!(environ_has(parent, TOKEN_VAR, token), Some(false)))
}

/// True when cgroup `path` is `run` or below it.
fn in_cgroup(path: &str, run: &str) -> bool {
    path == run
        || path
            .strip_prefix(run)
            .is_some_and(|rest| rest.starts_with('/') || run.ends_with('/'))
}

/// A process's `ONLYONE_TOKEN`, as its environment shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TokenSeen {
    /// Read: the variable's value, if it is set.
    Read(Option<Box<str>>),
    /// The process is gone, or exiting with its memory gone (or has an
    /// empty environment).
    Gone,
    /// Not readable by this user.
    Denied,
}

impl TokenSeen {
    fn of(pid: u32) -> TokenSeen {
        let mut data = Vec::with_capacity(8192);
        let read = fs::File::open(format!("/proc/{pid}/environ"))
            .and_then(|f| f.take(1 << 20).read_to_end(&mut data));
        if let Err(e) = read {
            return if is_gone(&e) {
                TokenSeen::Gone
            } else {
                TokenSeen::Denied
            };
        }
        // Only a process whose memory is gone (in exit(2)) or one started
        // with no environment at all reads as empty.
        if data.is_empty() {
            return TokenSeen::Gone;
        }
        let prefix = TOKEN_VAR.len();
        TokenSeen::Read(
            data.split(|&b| b == 0)
                .find(|e| {
                    e.len() > prefix && e.starts_with(TOKEN_VAR.as_bytes()) && e[prefix] == b'='
                })
                .map(|e| String::from_utf8_lossy(&e[prefix + 1..]).into()),
        )
    }

    /// What it says of `token`.
    fn check(&self, token: &str) -> Environ {
        match self {
            TokenSeen::Read(v) => Environ::Has(v.as_deref() == Some(token)),
            TokenSeen::Gone => Environ::Gone,
            TokenSeen::Denied => Environ::Denied,
        }
    }
}

/// The host's processes, listed once for many searches (see
/// [`with_census`]), and each one's token, read at most once.
#[derive(Default)]
struct Census {
    listed: Option<std::rc::Rc<[(u32, ProcStat)]>>,
    tokens: std::collections::HashMap<ProcId, TokenSeen>,
}

std::thread_local! {
    static CENSUS: std::cell::RefCell<Option<Census>> = const { std::cell::RefCell::new(None) };
    static REPORTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with one census of the host's processes for the reports it
/// makes on this thread ([`LockFile::inspect`](crate::LockFile::inspect)):
/// `/proc` is listed once, and each process's environment read at most
/// once, however many records are judged (a `status` of a directory full
/// of stale run records). What a report sees is then the host as it was at
/// its first search. Only reports use the census: an acquisition, a
/// takeover, a release or a stop inside `f` reads `/proc` as it is.
#[cfg_attr(not(feature = "command"), allow(dead_code))]
pub fn with_census<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CENSUS.with(|c| *c.borrow_mut() = None);
        }
    }
    CENSUS.with(|c| *c.borrow_mut() = Some(Census::default()));
    let _reset = Reset;
    f()
}

/// Runs `f`, a report: its run searches use the census of [`with_census`]
/// when one is in force.
pub(crate) fn reporting<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            REPORTING.with(|r| r.set(self.0));
        }
    }
    let _reset = Reset(REPORTING.with(|r| r.replace(true)));
    f()
}

/// Whether the run searches made now use the census.
fn census_in_use() -> bool {
    REPORTING.with(std::cell::Cell::get) && CENSUS.with(|c| c.borrow().is_some())
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the deadline ran out while the processes were listed",
    )
}

/// Every live process: the census's listing when there is one (listed
/// now if it was not yet), else `/proc` as it is now, read as it goes.
/// `f` returns `true` to stop.
fn each_process(
    deadline: Option<std::time::Instant>,
    mut f: impl FnMut(u32, &ProcStat) -> bool,
) -> io::Result<()> {
    let late = || deadline.is_some_and(|d| std::time::Instant::now() >= d);
    if !census_in_use() {
        for pid in all_pids()? {
            if late() {
                return Err(timed_out());
            }
            if let Ok(Some(stat)) = read_stat(pid)
                && f(pid, &stat)
            {
                break;
            }
        }
        return Ok(());
    }
    let listed = match CENSUS.with(|c| c.borrow().as_ref().and_then(|c| c.listed.clone())) {
        Some(l) => l,
        None => {
            let mut all = Vec::new();
            for pid in all_pids()? {
                if late() {
                    return Err(timed_out());
                }
                if let Ok(Some(stat)) = read_stat(pid) {
                    all.push((pid, stat));
                }
            }
            let all: std::rc::Rc<[(u32, ProcStat)]> = all.into();
            CENSUS.with(|c| {
                if let Some(c) = c.borrow_mut().as_mut() {
                    c.listed = Some(all.clone());
                }
            });
            all
        }
    };
    for (pid, stat) in listed.iter() {
        if f(*pid, stat) {
            break;
        }
    }
    Ok(())
}

/// A process's token, from the census when there is one.
fn token_seen(id: ProcId) -> TokenSeen {
    if !census_in_use() {
        return TokenSeen::of(id.pid);
    }
    if let Some(seen) =
        CENSUS.with(|c| c.borrow().as_ref().and_then(|c| c.tokens.get(&id).cloned()))
    {
        return seen;
    }
    let seen = TokenSeen::of(id.pid);
    CENSUS.with(|c| {
        if let Some(c) = c.borrow_mut().as_mut() {
            c.tokens.insert(id, seen.clone());
        }
    });
    seen
}

/// Finds the live processes of a run: members of the command's process
/// group, processes whose environment carries `ONLYONE_TOKEN=token`, and a
/// script owner's forks that have not exec'd. Zombies are not members, and
/// neither is anything that started before the run.
///
/// What another account can copy or reuse counts only for processes of
/// the record's own user ([`RunSpec::may_carry`]): the token, the owner's
/// image, and a group's id once its leader is gone. A group's id is proven
/// to be the run's group only while the run's own process holds it:
///
/// - While the recorded leader (pid and start time) lives, or is a zombie,
///   its group is the run's: every member the record may name
///   ([`RunSpec::may_name`]) counts, of any user (a root job's command
///   may change user).
/// - Once the leader is gone, nothing proves that a group of that id is
///   still the run's: the kernel keeps the id while the group has a
///   member, so a command that exits leaving a background child keeps it
///   (invariant 4), but an emptied group's id goes back to the pool, and
///   any account can fork until it has that pid and lead a fresh group of
///   that id. The members count then only as the record's user's: another
///   account's fresh group holds nothing and is never signalled. (A later
///   group of the record's own user with that id is taken for the run's;
///   it cannot be told from the run's own without its leader.)
/// - While another process has the leader's pid, the run's group is empty
///   and that process's group is not the run.
///
/// With `first_only`, stops at the first member found. Inside
/// [`with_census`], one listing serves every search. The listing stops at
/// `deadline`; the waits for processes in exit(2) share one
/// [`ExitBudget`] (see [`run_members_within`]).
pub fn run_members(
    spec: &RunSpec<'_>,
    skip: &[u32],
    first_only: bool,
    deadline: Option<Instant>,
) -> io::Result<RunScan> {
    run_members_within(spec, skip, first_only, &ExitBudget::new(deadline))
}

/// [`run_members`] within `budget`, which a judgement shares between its
/// searches: the listing stops at its deadline, and every wait for a
/// process in exit(2) ends at its end.
pub(crate) fn run_members_within(
    spec: &RunSpec<'_>,
    skip: &[u32],
    first_only: bool,
    budget: &ExitBudget,
) -> io::Result<RunScan> {
    let deadline = budget.deadline();
    let group = spec.group.map(|g| (g.pgid, GroupId::of(g)));
    let mut scan = RunScan::default();
    each_process(deadline, |pid, stat| {
        if skip.contains(&pid)
            || spec.since_start.is_some_and(|s| stat.start < s)
            || stat.is_kernel_thread()
            || is_dead_process(pid, stat)
        {
            return false;
        }
        let id = ProcId {
            pid,
            start: stat.start,
        };
        let in_group = in_run_group(group, stat, || spec.may_name(pid), || spec.may_carry(pid));
        let why = if in_group {
            Some(Membership::ProcessGroup)
        } else if spec.image.is_some() && stat.image == spec.image && spec.may_carry(pid) {
            Some(Membership::OwnerFork)
        } else if let Some(token) = spec.token {
            match token_seen(id).check(token) {
                // Anyone may copy a token it can read into its own
                // environment: a carrier counts only as the record's user.
                Environ::Has(true) if spec.may_carry(pid) => Some(Membership::Token),
                Environ::Has(true) => None,
                Environ::Has(false) => None,
                // A process in exit(2) whose memory is already gone cannot
                // say, yet it still holds its files, and the flocks and
                // record locks of the run's own work with them: it is
                // waited out. (One in the command's group counts above,
                // exiting or not.)
                Environ::Gone => {
                    if spec.may_carry(pid) && !exited(id, budget) {
                        scan.exiting.push(pid);
                    }
                    None
                }
                Environ::Denied => {
                    if may_carry_token(pid, stat, spec) {
                        scan.unreadable.push(pid);
                    }
                    None
                }
            }
        } else {
            None
        };
        if let Some(why) = why {
            scan.members.push(Member {
                id,
                stat: stat.clone(),
                why,
            });
            return first_only;
        }
        false
    })?;
    Ok(scan)
}

impl Record {
    /// What to look for in `/proc` to find the processes that keep this
    /// record's lock held besides the owner: a run's command group and
    /// token carriers, a script's token carriers, or the process group of
    /// a script that acquired. `None` when the owner alone counts.
    pub fn scan_spec(&self) -> Option<RunSpec<'_>> {
        let spec = |token, group| RunSpec {
            token,
            since_start: self.start,
            group,
            uid: self.uid,
            image: self.image,
            cgroup: self.cgroup.as_deref(),
        };
        match (self.mode, self.group) {
            // A run's command leads its own group, whose id is its pid.
            (Mode::Run, _) => Some(spec(
                self.token.as_deref(),
                self.cmd_id.map(|c| Group {
                    pgid: c.pid,
                    leader_start: Some(c.start),
                }),
            )),
            (Mode::Script, group) => Some(spec(self.token.as_deref(), group)),
            (Mode::Lock, Some(group)) => Some(spec(None, Some(group))),
            (Mode::Lock, None) => None,
        }
    }

    /// Whether the record may name the live process `pid` (as its owner,
    /// command, lingerer or group member): a process of the user who owns
    /// the record's file (root's record: anyone's), or one in the run's own
    /// cgroup when that is in the writer's own systemd slice
    /// (`/user.slice/user-UID.slice/`), where no other user can move a
    /// process. A forged record may claim any cgroup: no other is believed.
    pub fn may_name(&self, pid: u32) -> bool {
        may_name_in(self.uid, self.cgroup.as_deref(), pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::pid_max;

    /// A live process in group `pgrp`, started at `start`, in `state`.
    fn proc_in(pgrp: u32, start: u64, state: char) -> ProcStat {
        ProcStat {
            comm: "x".into(),
            state,
            ppid: 1,
            pgrp,
            session: pgrp,
            tty: 0,
            flags: 0,
            cpu_ticks: 0,
            start,
            image: None,
        }
    }

    /// The members of the run's group (leader 100, started at 10) that
    /// count for a record of `record_uid`, as `run_members` decides them
    /// over the host as `table` lists it: (pid, stat, real uid). A record
    /// may name a process of its user (root's anyone's); a process carries
    /// the run's evidence by its real uid.
    fn group_members(record_uid: u32, table: &[(u32, ProcStat, u32)]) -> Vec<u32> {
        let g = Group {
            pgid: 100,
            leader_start: Some(10),
        };
        let at_leaders_pid = table
            .iter()
            .find(|(p, ..)| *p == g.pgid)
            .map(|(_, st, _)| st);
        let held = (g.pgid, GroupId::at(g, at_leaders_pid));
        table
            .iter()
            .filter(|(_, st, _)| !st.is_dead())
            .filter(|(_, st, uid)| {
                in_run_group(
                    Some(held),
                    st,
                    || record_uid == 0 || *uid == record_uid,
                    || *uid == record_uid,
                )
            })
            .map(|(p, ..)| *p)
            .collect()
    }

    #[test]
    fn a_group_is_the_runs_while_its_leader_holds_its_id_and_never_once_reused() {
        const ROOT: u32 = 0;
        const NOBODY: u32 = 65534;
        let members = |at_100: Option<ProcStat>| {
            let mut table = vec![
                (101, proc_in(100, 11, 'S'), ROOT),
                (102, proc_in(100, 12, 'S'), NOBODY),
                (103, proc_in(103, 13, 'S'), ROOT),
            ];
            if let Some(st) = at_100 {
                table.push((100, st, ROOT));
            }
            group_members(ROOT, &table)
        };
        // The leader lives, or is a zombie: every member (a root job's
        // command may change user).
        assert_eq!(members(Some(proc_in(100, 10, 'S'))), [101, 102, 100]);
        assert_eq!(members(Some(proc_in(100, 10, 'Z'))), [101, 102]);
        // No process has the leader's pid: the record's user's only.
        assert_eq!(members(None), [101]);
        // Another process has it, alive or a zombie: the pid was handed
        // out again, so the run's group was empty; a group of that id now
        // is another's.
        assert_eq!(members(Some(proc_in(100, 50, 'S'))), Vec::<u32>::new());
        assert_eq!(members(Some(proc_in(100, 50, 'Z'))), Vec::<u32>::new());
        // A record of nobody's names no process of root's, and a group
        // whose leader is gone counts for nobody's processes alone.
        let table = [
            (100, proc_in(100, 10, 'S'), NOBODY),
            (101, proc_in(100, 11, 'S'), ROOT),
            (102, proc_in(100, 12, 'S'), NOBODY),
        ];
        assert_eq!(group_members(NOBODY, &table), [100, 102]);
        assert_eq!(group_members(NOBODY, &table[1..]), [102]);
        // Without the leader's start time, its id proves nothing.
        let g = Group {
            pgid: 100,
            leader_start: None,
        };
        assert_eq!(
            GroupId::at(g, Some(&proc_in(100, 10, 'S'))),
            GroupId::Leaderless
        );
    }

    #[test]
    fn a_process_whose_uid_cannot_be_read_carries_nothing() {
        let me = rustix::process::getuid().as_raw();
        let own = std::process::id();
        let spec = |uid| RunSpec {
            token: None,
            since_start: None,
            group: None,
            uid,
            image: None,
            cgroup: None,
        };
        assert!(spec(Some(me)).may_carry(own));
        assert!(!spec(Some(me.wrapping_add(1))).may_carry(own));
        // No process has these pids: no real uid to read.
        for gone in [pid_max() + 1, u32::MAX] {
            assert!(!spec(Some(me)).may_carry(gone), "{gone}");
            assert!(!may_carry(Some(me), gone), "{gone}");
        }
        // A record whose user is not known restricts nothing.
        assert!(spec(None).may_carry(own));
    }
}
