//! The watchdog of a leased run: a process apart from the wrapper that ends
//! the run if the wrapper dies first.
//!
//! On the lock directory a run's lock stays held while any process of the
//! run lives, so a wrapper killed with SIGKILL lets nobody in beside its
//! command. A lease is different: once the wrapper is gone nothing renews
//! it, and after L another host would run beside the orphaned command. So
//! a leased run has a watchdog: a process of its own (in a process group of
//! its own, so that a KILL to the wrapper's group spares it), linked to the
//! wrapper by a socket. The wrapper tells it the command (`cmd PID START`)
//! and each renewal's send time (`sent NS`), and `done` at the end. When
//! the socket closes without `done`, the wrapper has died: the watchdog
//! ends the run's processes (the command's group and every carrier of the
//! run's token) with TERM, then KILL by `t_send + L - M`, the deadline the
//! wrapper itself keeps (PROTOCOL.md invariant 6), and exits. It does the
//! same when that deadline comes with the wrapper still there but silent:
//! a wrapper stopped (SIGSTOP, a debugger) while its command runs on cannot
//! end the command itself (the model's `WATCHDOG_ON_EOF` mutant).
//!
//! Not covered: a watchdog killed together with the wrapper while the
//! command lives (a KILL sent to both by pid), and a process of the run
//! that leaves the command's group and clears its environment. The fence
//! (`ONLYONE_FENCE`) and a service manager that kills the whole cgroup
//! (systemd's `KillMode=control-group`) cover these.

use std::io::BufRead;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::lock::members::RunSpec;
use crate::place::store::timing::{LeaseTiming, boot_ns};
use crate::procfs::{Group, ProcId};
use crate::signal::GracefulStop;

/// The wrapper's end of the link to its watchdog.
#[derive(Debug)]
pub struct Link {
    sock: OwnedFd,
}

impl Link {
    /// The link over `sock`, one end of a Unix stream socket pair whose
    /// other end is the watchdog's standard input.
    pub fn new(sock: OwnedFd) -> Link {
        Link { sock }
    }

    /// Says one line; a watchdog that is gone is not an error (the run
    /// goes on, as it would without one).
    fn say(&self, line: &str) {
        let _ = rustix::net::send(
            self.sock.as_fd(),
            line.as_bytes(),
            rustix::net::SendFlags::NOSIGNAL,
        );
    }

    /// The command has started.
    pub fn command(&self, id: ProcId) {
        self.say(&format!("cmd {} {}\n", id.pid, id.start));
    }

    /// A renewal sent at `sent` (boot clock) succeeded.
    pub fn renewed(&self, sent: i64) {
        self.say(&format!("sent {sent}\n"));
    }

    /// The run is over (its processes ended, or left on purpose): the
    /// watchdog exits.
    pub fn done(&self) {
        self.say("done\n");
    }
}

impl crate::place::store::timing::Listener for Link {
    fn renewed(&self, sent: i64) {
        Link::renewed(self, sent);
    }
}

/// What a watchdog watches over.
#[derive(Debug, Clone)]
pub struct Watched {
    /// The run's token: its carriers are the run's.
    pub token: String,
    /// The run's user.
    pub uid: u32,
    /// The wrapper's start time (clock ticks since boot): no process of
    /// the run started before it.
    pub since: u64,
    /// The lease's timing (L, M and the grace G).
    pub timing: LeaseTiming,
    /// When the take was sent (boot clock).
    pub sent: i64,
}

/// How a watch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watch {
    /// The wrapper said `done`.
    Done,
    /// The wrapper died; these processes of the run were ended (and these
    /// would not die).
    Ended {
        /// Processes signalled.
        ended: Vec<u32>,
        /// Processes still alive at the end.
        survivors: Vec<u32>,
    },
}

/// Reads the wrapper's lines from `input` until `done` (the run is over),
/// the end (the wrapper died) or the time to send TERM with no renewal to
/// move it (the wrapper is stopped): in the last two the run is ended by
/// its deadline. For the watchdog's own process: it ignores HUP, INT, TERM
/// and PIPE from here on, so that only the end of the link (or KILL) ends
/// it.
pub fn watch(input: OwnedFd, w: &Watched) -> Watch {
    use rustix::process::Signal;
    for sig in [Signal::HUP, Signal::INT, Signal::TERM, Signal::PIPE] {
        crate::sys::ignore(sig.as_raw());
    }
    let mut reader = std::io::BufReader::new(std::fs::File::from(input));
    let mut command: Option<ProcId> = None;
    let mut sent = w.sent;
    let mut line = String::new();
    loop {
        // A whole line read ahead is taken at once; otherwise wait for the
        // next one until TERM is due.
        if !reader.buffer().contains(&b'\n') && !wait_for_line(reader.get_ref(), w, sent) {
            break;
        }
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("done"), ..) => return Watch::Done,
            (Some("sent"), Some(ns), _) => {
                if let Ok(ns) = ns.parse::<i64>() {
                    sent = sent.max(ns);
                }
            }
            (Some("cmd"), Some(pid), Some(start)) => {
                if let (Ok(pid), Ok(start)) = (pid.parse(), start.parse()) {
                    command = Some(ProcId { pid, start });
                }
            }
            _ => {}
        }
    }
    end_run(w, command, sent)
}

/// Waits until `input` is readable (a line, or the end) or TERM is due for
/// the deadline from `sent`: false when TERM is due.
fn wait_for_line(input: &std::fs::File, w: &Watched, sent: i64) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let term_by = w.timing.term_by(sent);
    loop {
        let left = term_by - boot_ns();
        if left <= 0 {
            return false;
        }
        let timeout = Timespec {
            tv_sec: left / 1_000_000_000,
            tv_nsec: left % 1_000_000_000,
        };
        let mut fds = [PollFd::new(input, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => {}
            // Readable, hung up, or a poll that cannot wait: read.
            Ok(_) | Err(_) => return true,
        }
    }
}

/// Ends the run of a wrapper that died or is stopped: TERM to its
/// processes, KILL by `sent + L - M` (at once when that has passed), then
/// KILL to whatever the run forked meanwhile.
fn end_run(w: &Watched, command: Option<ProcId>, sent: i64) -> Watch {
    let kill_by = w.timing.kill_by(sent);
    let left = kill_by - boot_ns();
    let deadline = Instant::now() + Duration::from_nanos(left.max(0) as u64);
    let me = std::process::id();
    let spec = RunSpec {
        token: Some(&w.token),
        since_start: Some(w.since),
        group: command.map(|c| Group {
            pgid: c.pid,
            leader_start: Some(c.start),
        }),
        uid: Some(w.uid),
        image: None,
        cgroup: None,
    };
    let members = || -> Vec<ProcId> {
        let mut out: Vec<ProcId> = command.filter(|c| c.is_alive()).into_iter().collect();
        if let Ok(scan) = crate::lock::members::run_members(&spec, &[me], false, None) {
            for id in scan.members.into_iter().map(|m| m.id) {
                if out.iter().all(|o| o.pid != id.pid) {
                    out.push(id);
                }
            }
        }
        out
    };
    let first = members();
    let stop = if left <= 0 {
        GracefulStop::KILL
    } else {
        GracefulStop::term(w.timing.grace)
    };
    let mut ended: Vec<u32> = first.iter().map(|p| p.pid).collect();
    let mut outcome = stop.end(&first, Some(deadline));
    // What the run forked while it was being ended.
    for _ in 0..3 {
        let rest = members();
        if rest.is_empty() {
            outcome.survivors.clear();
            break;
        }
        ended.extend(rest.iter().map(|p| p.pid));
        outcome = GracefulStop::KILL.end(&rest, None);
    }
    ended.sort_unstable();
    ended.dedup();
    Watch::Ended {
        ended,
        survivors: outcome.survivors,
    }
}
