//! The run's own work (SPEC `reap`, "The run's own work only"): which of
//! the processes that carry a lingering run's token, or live under its
//! lingerers, are that run's work, for `reap` and `stop`: what they may end.
//!
//! A terminal server that a fire started (the first fire after a boot
//! starts tmux) carries the run's token, and so does every session a user
//! opens on it later: tmux copies its server's environment into each new
//! session. So the token alone cannot say what the run's work is. When
//! the command of a `run --linger` exits, the wrapper names what lingers
//! (`linger=`, pid and start time) and when (`lingered=`). From then on a
//! process is the run's work when:
//!
//! - it is one of the lingerers (same pid, same start time), or
//! - it started no later than that moment (a process of the run then, that
//!   the wrapper did not name: a pane that had not exec'd yet, or past the
//!   [`MAX_LINGER`](crate::record::MAX_LINGER) names), or
//! - it started later and is in the session of a lingerer that leads one
//!   (a session outlives the parents in it, and its id is never reused
//!   while a member lives; once the lingerer is gone, only while a process
//!   that was in the session at that moment still holds it: after that, a
//!   session of that id may be another's, made with `setsid` by a process
//!   that reused the pid, as any account can by forking until it has it),
//!   or descends, parent by parent, from the work,
//!
//! except what a **terminal server** of the run opened later: a process
//! that started after the moment, leads a session of its own on a terminal
//! of its own, and whose parent is a lingerer without a terminal (tmux's,
//! screen's server: a pane or session someone opened on it), and all that
//! descends from it. The server itself is the run's work only while no such
//! session lives in it: it is never ended while it serves someone else.
//!
//! This decides only what `reap` and `stop` end. For the verdict a process
//! that carries the token still holds the lock, work or not (and what
//! descends from the work holds too, whatever its environment): a session
//! opened later looks exactly like work the run itself started there (an
//! agent's tools on ptys of their own), and a wrong "stale" would let a
//! second run in beside it. Rule 1 comes first.

use std::collections::{HashMap, HashSet};
use std::io;
use std::time::Instant;

use crate::procfs::{self, ProcId};
use crate::record::Record;

/// How far up the parents a process is followed.
const MAX_DEPTH: usize = 1024;

/// Now, in clock ticks since boot: the clock of process start times
/// (`/proc/PID/stat` field 22 counts boot time, suspend included, shifted
/// like this clock in a time namespace).
pub fn now_ticks() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let hz = procfs::clock_ticks();
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(hz)
        .saturating_add(nanos.saturating_mul(hz) / 1_000_000_000)
}

/// What a lingering run left: its lingerers and when they were named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lingered {
    pub(crate) linger: Vec<ProcId>,
    pub(crate) since: u64,
}

impl Lingered {
    /// What a record says lingered, if its command exited and left
    /// processes (a record written before `lingered=` existed has none:
    /// its token carriers are the run, as they were).
    pub(crate) fn of(rec: &Record) -> Option<Lingered> {
        let since = rec.lingered?;
        (!rec.linger.is_empty()).then(|| Lingered {
            linger: rec.linger.clone(),
            since,
        })
    }
}

/// Why a process is not the run's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotWork {
    /// A session the terminal server `server` opened after the command
    /// exited (or a process in one), led by `leader`.
    LaterSession { server: u32, leader: u32 },
    /// The run's terminal server, while a later session lives in it.
    ServerInUse,
    /// Started after the command exited, and not under the work.
    Outside,
}

impl std::fmt::Display for NotWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotWork::LaterSession { server, .. } => write!(
                f,
                "it is in a session that the run's terminal server (pid {server}) opened after \
                 the command exited, for someone else: not the run's work"
            ),
            NotWork::ServerInUse => f.write_str(
                "it is the run's terminal server, and a session opened on it later lives in it: \
                 it is not ended while it serves someone else",
            ),
            NotWork::Outside => f.write_str(
                "it started after the run's command exited and does not descend from the run's \
                 work: not the run's",
            ),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Node {
    ppid: u32,
    session: u32,
    tty: u32,
    start: u64,
}

/// The processes of the host, as the run's work sees them.
#[derive(Debug)]
pub(crate) struct Work {
    since: u64,
    /// Live lingerers, by pid.
    lingerers: HashSet<u32>,
    /// Lingerers with a later session in them.
    servers: HashSet<u32>,
    /// The sessions of the work: led by a lingerer (not a server in use).
    sessions: HashSet<u32>,
    /// Lingerers that are terminal servers: without a terminal, with a
    /// child that leads a session on a terminal of its own (a pane).
    terminal_servers: HashSet<u32>,
    table: HashMap<u32, Node>,
}

impl Work {
    /// Lists the host's processes (until `deadline`) and works out which of
    /// them are the work of the run that left `l`.
    pub(crate) fn load(l: &Lingered, deadline: Option<Instant>) -> io::Result<Work> {
        let mut table = HashMap::new();
        for pid in procfs::all_pids()? {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the deadline ran out while the processes were listed",
                ));
            }
            if let Ok(Some(st)) = procfs::read_stat(pid)
                && !st.is_kernel_thread()
                && !procfs::is_dead_process(pid, &st)
            {
                table.insert(
                    pid,
                    Node {
                        ppid: st.ppid,
                        session: st.session,
                        tty: st.tty,
                        start: st.start,
                    },
                );
            }
        }
        Ok(Work::of_table(l, table))
    }

    /// Works out, from the host's processes as `table` lists them, which
    /// of them are the work of the run that left `l`.
    fn of_table(l: &Lingered, table: HashMap<u32, Node>) -> Work {
        let lingerers: HashSet<u32> = l
            .linger
            .iter()
            .filter(|id| table.get(&id.pid).is_some_and(|n| n.start == id.start))
            .map(|id| id.pid)
            .collect();
        let mut w = Work {
            since: l.since,
            lingerers,
            servers: HashSet::new(),
            sessions: HashSet::new(),
            terminal_servers: HashSet::new(),
            table,
        };
        w.terminal_servers = w
            .table
            .iter()
            .filter(|(pid, n)| n.session == **pid && n.tty != 0)
            .map(|(_, n)| n.ppid)
            .filter(|p| w.lingerers.contains(p))
            .filter(|p| w.table.get(p).is_some_and(|s| s.tty == 0))
            .collect();
        w.servers = w
            .table
            .iter()
            .filter(|(pid, n)| w.later_session(**pid, n))
            .map(|(_, n)| n.ppid)
            .collect();
        w.sessions = l
            .linger
            .iter()
            .map(|id| id.pid)
            .filter(|p| !w.servers.contains(p))
            .filter(|p| w.holds_session(*p))
            .collect();
        w
    }

    /// Whether the session of id `sid` (a lingerer's pid) is the work's
    /// now: the lingerer leads it, or, once the lingerer is gone, a process
    /// that was already in it when the lingerers were named still holds
    /// it. A session's id is not handed out again while the session has a
    /// member, and at that moment pid `sid` was the lingerer, so a session
    /// of that id then was the lingerer's. Once only later processes are
    /// left in it, nothing tells it from a session that another process,
    /// which reused the pid (any account can fork until it has it), made
    /// with `setsid`: its processes are the work then only by descent.
    fn holds_session(&self, sid: u32) -> bool {
        match self.table.get(&sid) {
            Some(n) => self.lingerers.contains(&sid) && n.session == sid,
            None => self
                .table
                .values()
                .any(|n| n.session == sid && n.start <= self.since),
        }
    }

    /// A session that a lingerer without a terminal (a terminal server)
    /// opened after the command exited: `pid` leads it, on a terminal.
    fn later_session(&self, pid: u32, n: &Node) -> bool {
        n.start > self.since
            && n.session == pid
            && n.tty != 0
            && self.lingerers.contains(&n.ppid)
            && self.table.get(&n.ppid).is_some_and(|p| p.tty == 0)
    }

    /// Whether the process `id` is the run's work, or why not. A process
    /// that is gone (or not seen) counts as work: nothing is decided about
    /// it here.
    pub(crate) fn judge(&self, id: ProcId) -> Result<(), NotWork> {
        let Some(node) = self.table.get(&id.pid).filter(|n| n.start == id.start) else {
            return Ok(());
        };
        if self.lingerers.contains(&id.pid) {
            return if self.servers.contains(&id.pid) {
                Err(NotWork::ServerInUse)
            } else {
                Ok(())
            };
        }
        if node.start <= self.since {
            return Ok(());
        }
        let (mut pid, mut node) = (id.pid, *node);
        for _ in 0..MAX_DEPTH {
            if self.later_session(pid, &node) {
                return Err(NotWork::LaterSession {
                    server: node.ppid,
                    leader: pid,
                });
            }
            if self.sessions.contains(&node.session) {
                return Ok(());
            }
            let parent = node.ppid;
            let Some(up) = self.table.get(&parent).copied() else {
                return Err(NotWork::Outside);
            };
            if up.start > node.start {
                return Err(NotWork::Outside);
            }
            if self.lingerers.contains(&parent) {
                return if self.servers.contains(&parent) {
                    Err(NotWork::LaterSession {
                        server: parent,
                        leader: pid,
                    })
                } else {
                    Ok(())
                };
            }
            if up.start <= self.since {
                // Its parent was there when the command exited and is not
                // a lingerer: not the run's.
                return Err(NotWork::Outside);
            }
            (pid, node) = (parent, up);
        }
        Err(NotWork::Outside)
    }

    /// Whether the process `id` is one of the run's terminal servers (a
    /// lingerer without a terminal whose children lead sessions on
    /// terminals of their own: tmux's, screen's server). What it does on
    /// its own is housekeeping for whoever looks at it (a status line
    /// redrawn for an attached client every few seconds, an answer to
    /// `tmux ls`), not the run's work: what the agent in a pane prints
    /// goes through its terminal, and counts as the pane's own writes.
    pub(crate) fn is_terminal_server(&self, id: ProcId) -> bool {
        self.terminal_servers.contains(&id.pid)
            && self.table.get(&id.pid).is_some_and(|n| n.start == id.start)
    }

    /// The sessions opened on the terminal server `server` after the
    /// command exited, by their leaders' pids.
    fn later_sessions_of(&self, server: u32) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .table
            .iter()
            .filter(|(pid, n)| n.ppid == server && self.later_session(**pid, n))
            .map(|(&pid, _)| pid)
            .collect();
        out.sort_unstable();
        out
    }

    /// The live processes that are the run's work by the lingerers: the
    /// lingerers (but a server in use) and what started after them under
    /// them or in their sessions, whatever their environment.
    pub(crate) fn members(&self) -> Vec<ProcId> {
        let mut out: Vec<ProcId> = self
            .table
            .iter()
            .filter(|(pid, n)| self.lingerers.contains(pid) || n.start > self.since)
            .map(|(&pid, n)| ProcId {
                pid,
                start: n.start,
            })
            .filter(|id| self.judge(*id).is_ok())
            .collect();
        out.sort_by_key(|id| id.start);
        out
    }
}

/// A process that keeps a lingering run's lock held although it is not
/// the run's work: onlyone never ends it (neither `reap` nor `stop`), so
/// the lock is free only once it is gone. Its command and terminal are
/// what `/proc` shows: escape them before printing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Keeper {
    /// Its pid: the leader of a session opened later on the run's
    /// terminal server, or the first of a tree of processes outside the
    /// work.
    pub pid: u32,
    /// Its command line.
    pub command: Option<String>,
    /// Its controlling terminal (`/dev/pts/3`), if it has one.
    pub terminal: Option<String>,
    /// For a session opened later: the run's terminal server it lives in.
    pub server: Option<u32>,
}

/// What keeps the lock of the lingering run `rec` held once nothing of
/// the run's own work lives: the sessions opened later on its terminal
/// server (they carry its token, or keep the server, one of its
/// lingerers, alive), and the processes that carry its token from
/// outside its work. Empty when some of its own work (or its command)
/// still lives, or when the run does not linger: then it is the run
/// that holds. The host's processes are listed until `deadline`.
pub fn keepers(rec: &Record, deadline: Option<Instant>) -> io::Result<Vec<Keeper>> {
    let Some(l) = Lingered::of(rec) else {
        return Ok(Vec::new());
    };
    if rec.cmd_id.is_some_and(|c| c.is_alive()) || a_lingerer_works(rec, &l) {
        return Ok(Vec::new());
    }
    let w = Work::load(&l, deadline)?;
    let named = |id: &ProcId| rec.may_name(id.pid);
    let mut procs: Vec<ProcId> = w.members().into_iter().filter(named).collect();
    procs.extend(
        l.linger
            .iter()
            .filter(|id| w.lingerers.contains(&id.pid) && named(id)),
    );
    if let Some(spec) = rec.scan_spec() {
        let scan = crate::lock::members::run_members(&spec, &[], false, deadline)?;
        procs.extend(scan.members.into_iter().map(|m| m.id));
    }
    let mut sessions: Vec<(u32, u32)> = Vec::new();
    let mut outside: HashSet<u32> = HashSet::new();
    for id in procs {
        match w.judge(id) {
            Ok(()) => return Ok(Vec::new()),
            Err(NotWork::ServerInUse) => sessions.extend(
                w.later_sessions_of(id.pid)
                    .into_iter()
                    .map(|leader| (leader, id.pid)),
            ),
            Err(NotWork::LaterSession { server, leader }) => sessions.push((leader, server)),
            Err(NotWork::Outside) => {
                outside.insert(id.pid);
            }
        }
    }
    let keeper = |pid: u32, server: Option<u32>| Keeper {
        pid,
        command: procfs::command_line(pid),
        terminal: w.table.get(&pid).and_then(|n| tty_name(n.tty)),
        server,
    };
    let mut out: Vec<Keeper> = Vec::new();
    sessions.sort_unstable();
    sessions.dedup_by_key(|s| s.0);
    out.extend(sessions.into_iter().map(|(l, s)| keeper(l, Some(s))));
    // The first of each tree outside the work: its parent is not one.
    let mut tops: Vec<u32> = outside
        .iter()
        .copied()
        .filter(|p| w.table.get(p).is_none_or(|n| !outside.contains(&n.ppid)))
        .filter(|p| !out.iter().any(|k| k.pid == *p))
        .collect();
    tops.sort_unstable();
    out.extend(tops.into_iter().map(|p| keeper(p, None)));
    Ok(out)
}

/// Whether a lingerer of `l` is, for sure, still the run's work, from the
/// lingerers and their children alone (what a skipped fire pays while an
/// agent lingers, instead of a look at every process): one on a terminal
/// (a pane), or one without a terminal that serves no session opened
/// after the command exited (see [`Work::judge`]: a lingerer is the
/// work unless it is a server in use).
fn a_lingerer_works(rec: &Record, l: &Lingered) -> bool {
    let live = |id: &ProcId| match procfs::read_stat(id.pid) {
        Ok(Some(st)) if st.start == id.start && !procfs::is_dead_process(id.pid, &st) => Some(st),
        _ => None,
    };
    let later_session = |pid: u32| match procfs::read_stat(pid) {
        Ok(Some(st)) => st.start > l.since && st.session == pid && st.tty != 0,
        _ => false,
    };
    l.linger
        .iter()
        .filter(|id| rec.may_name(id.pid))
        .filter_map(|id| live(id).map(|st| (id.pid, st)))
        .any(|(pid, st)| st.tty != 0 || !procfs::children_of(pid).into_iter().any(later_session))
}

/// The name of the terminal whose device number `/proc/PID/stat` gives
/// (field 7): `/dev/pts/N`, `/dev/ttyN`, `/dev/ttySN`; `None` for none,
/// or one of another kind.
fn tty_name(nr: u32) -> Option<String> {
    let major = (nr >> 8) & 0xfff;
    let minor = (nr & 0xff) | ((nr >> 12) & 0xf_ff00);
    match major {
        0 => None,
        136..=143 => Some(format!("/dev/pts/{}", (major - 136) * 256 + minor)),
        4 if minor < 64 => Some(format!("/dev/tty{minor}")),
        4 => Some(format!("/dev/ttyS{}", minor - 64)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that started at `start`, child of `ppid`, in session
    /// `session`, without a terminal.
    fn node(ppid: u32, session: u32, start: u64) -> Node {
        Node {
            ppid,
            session,
            tty: 0,
            start,
        }
    }

    fn id(pid: u32, start: u64) -> ProcId {
        ProcId { pid, start }
    }

    /// A run that left the lingerer 500 (started at 10, leading its own
    /// session) at 100, and the host as `table` lists it now. Pid 1 is
    /// init, 20 a process outside the run.
    fn work(table: &[(u32, Node)]) -> Work {
        let l = Lingered {
            linger: vec![id(500, 10)],
            since: 100,
        };
        let mut all: HashMap<u32, Node> = table.iter().copied().collect();
        all.insert(1, node(0, 1, 0));
        all.insert(20, node(1, 20, 5));
        Work::of_table(&l, all)
    }

    #[test]
    fn a_lingerers_session_is_the_works_while_the_lingerer_leads_it() {
        let w = work(&[(500, node(1, 500, 10)), (600, node(1, 500, 200))]);
        assert_eq!(w.judge(id(600, 200)), Ok(()));
        assert_eq!(w.members(), vec![id(500, 10), id(600, 200)]);
    }

    #[test]
    fn a_gone_lingerers_session_is_the_works_while_a_process_of_that_moment_holds_it() {
        // 510 was in the lingerer's session when the run's command exited.
        let w = work(&[(510, node(1, 500, 50)), (600, node(1, 500, 200))]);
        assert_eq!(w.judge(id(600, 200)), Ok(()));
        assert!(w.members().contains(&id(600, 200)));
    }

    #[test]
    fn a_session_that_reused_a_gone_lingerers_id_is_not_the_works() {
        // Only later processes have session 500: one that took pid 500
        // after the lingerer and its session were gone made it (setsid),
        // then exited.
        let w = work(&[(600, node(1, 500, 200)), (601, node(600, 500, 201))]);
        assert_eq!(w.judge(id(600, 200)), Err(NotWork::Outside));
        assert_eq!(w.judge(id(601, 201)), Err(NotWork::Outside));
        assert!(w.members().is_empty());
        // The same while pid 500 is that other process, leading it.
        let w = work(&[(500, node(1, 500, 150)), (600, node(500, 500, 200))]);
        assert_eq!(w.judge(id(600, 200)), Err(NotWork::Outside));
        assert!(w.members().is_empty());
    }

    /// `/dev/pts/N` as `/proc/PID/stat` gives it (major 136, minor N).
    const PTS: u32 = 136 << 8;

    /// A process on a terminal, leading its own session.
    fn on_pts(ppid: u32, pid: u32, n: u32, start: u64) -> (u32, Node) {
        let tty = PTS | n;
        (
            pid,
            Node {
                ppid,
                session: pid,
                tty,
                start,
            },
        )
    }

    #[test]
    fn a_lingerer_without_a_terminal_whose_children_lead_sessions_on_terminals_is_a_server() {
        // 500: tmux's server, lingering, its pane 501 on /dev/pts/3.
        let w = work(&[(500, node(1, 500, 10)), on_pts(500, 501, 3, 50)]);
        assert!(w.is_terminal_server(id(500, 10)));
        assert!(!w.is_terminal_server(id(500, 11)), "another process");
        assert!(!w.is_terminal_server(id(501, 50)), "a pane is not");
        // A lingerer on a terminal of its own is not one, nor one whose
        // children share its session.
        let mut pane = on_pts(500, 501, 3, 50).1;
        let w = work(&[
            (
                500,
                Node {
                    tty: PTS | 2,
                    ..node(1, 500, 10)
                },
            ),
            (501, pane),
        ]);
        assert!(!w.is_terminal_server(id(500, 10)));
        pane.session = 500;
        let w = work(&[(500, node(1, 500, 10)), (501, pane)]);
        assert!(!w.is_terminal_server(id(500, 10)));
        // Nor is a process outside the run that looks the same.
        let w = work(&[(700, node(1, 700, 10)), on_pts(700, 701, 3, 50)]);
        assert!(!w.is_terminal_server(id(700, 10)));
    }

    #[test]
    fn a_session_opened_later_on_the_server_is_named_by_its_leader() {
        // The server 500 with the run's pane 501, and a user's session
        // 601 opened after the command exited (100), its shell's child
        // 602.
        let w = work(&[
            (500, node(1, 500, 10)),
            on_pts(500, 501, 3, 50),
            on_pts(500, 601, 4, 200),
            (
                602,
                Node {
                    ppid: 601,
                    session: 601,
                    tty: PTS | 4,
                    start: 201,
                },
            ),
        ]);
        assert_eq!(w.judge(id(501, 50)), Ok(()));
        let later = Err(NotWork::LaterSession {
            server: 500,
            leader: 601,
        });
        assert_eq!(w.judge(id(601, 200)), later);
        assert_eq!(w.judge(id(602, 201)), later);
        assert_eq!(w.judge(id(500, 10)), Err(NotWork::ServerInUse));
        assert_eq!(w.later_sessions_of(500), vec![601]);
        assert!(w.members().iter().all(|m| m.pid < 600), "{:?}", w.members());
    }

    #[test]
    fn terminals_are_named_from_their_device_numbers() {
        assert_eq!(tty_name(0), None);
        assert_eq!(tty_name(PTS | 3).as_deref(), Some("/dev/pts/3"));
        // Minor numbers past 255 are in the upper bits (and, on old
        // kernels, in the next majors).
        assert_eq!(
            tty_name(PTS | (1 << 20) | 5).as_deref(),
            Some("/dev/pts/261")
        );
        assert_eq!(tty_name(PTS | (1 << 24)).as_deref(), Some("/dev/pts/4096"));
        assert_eq!(tty_name((137 << 8) | 5).as_deref(), Some("/dev/pts/261"));
        assert_eq!(tty_name((4 << 8) | 1).as_deref(), Some("/dev/tty1"));
        assert_eq!(tty_name((4 << 8) | 64).as_deref(), Some("/dev/ttyS0"));
        assert_eq!(tty_name(5 << 8), None);
    }
}
