//! The supervisor of a run: the command under the lock, for exactly its
//! life.
//!
//! - The command is started as the leader of its own process group, with
//!   `ONLYONE_LOCK` and `ONLYONE_TOKEN` in its environment; its pid and start
//!   time go into the record.
//! - SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to onlyone are forwarded to the
//!   command's process group, and so are SIGUSR1, SIGUSR2 and SIGALRM (a
//!   log rotator's or a timer's word, meant for the work: by default they
//!   would kill the wrapper, and the run's end would go unrecorded). They
//!   are blocked and read from a signalfd, so none is lost between checks;
//!   the command starts with an empty mask.
//! - From an interactive terminal (onlyone's process group is the
//!   terminal's foreground group, whoever else is in it: a script's shell
//!   too), the command's group is made the terminal's foreground group, so
//!   it can read the terminal and Ctrl-C reaches it directly; onlyone takes
//!   the terminal back when it stops or exits, with SIGTTOU blocked so it
//!   is never stopped doing so. The command starts with SIGTSTP, SIGTTIN
//!   and SIGTTOU at their defaults (tmux leaves them ignored). The handover
//!   happens after the exec, so a Ctrl-Z can never stop a child that has
//!   not exec'd yet; a command that reads the terminal before it has it
//!   stops on SIGTTIN and is continued. If the command is stopped by job
//!   control (Ctrl-Z), onlyone stops its own process group as the
//!   terminal would have (the shell sees the job stopped), and resumes the
//!   command on `fg` or `bg`. Every stop and continue of the command wakes
//!   onlyone: SIGCHLD is read from the same signalfd as the forwarded
//!   signals.
//! - `max_time`: a [`GracefulStop`] of the group: TERM, then KILL after
//!   `kill_after`.
//! - `idle_timeout`: the run is over when every process of it (the command
//!   and its descendants; a lingering run's token carriers too) has been idle
//!   (no CPU time, no byte read or written) for that long;
//!   it is then ended like `max_time`.
//! - onlyone is the run's subreaper: a process the command leaves behind
//!   (a daemon started through `setsid`, `runuser -l`, `su -` or `env -i`,
//!   which clears the token) becomes onlyone's child when its parent exits.
//! - When the command exits, the processes of the run that are left
//!   (strays: onlyone's descendants) are ended, TERM then KILL, before the
//!   caller releases the lock, and the kernel confirms that onlyone has no
//!   child left; `keep_strays` skips that. The search is in proportion to
//!   the run, never to the host: a process that got the token without
//!   descending from the command is found by `stop` and `reap`, not here.
//! - `linger`: for work handed to a process that is not the command's
//!   child (a terminal server, tmux, screen). When the command exits on
//!   its own, the run's processes that outlive it are left running and
//!   reported in [`RunOutcome::kept`]: the caller leaves the lock to them
//!   (they carry the token, so the verdict finds them), and the reaper
//!   ends them once idle.
//! - What the run used ([`RunOutcome::usage`]): the command's and every
//!   reaped leftover's CPU time and peak memory, read from `wait4(2)` as
//!   each is reaped (each with what it reaped itself). Summed per process
//!   rather than read from `getrusage(RUSAGE_CHILDREN)`, so that what else
//!   onlyone waits for (a store's lease watchdog, the caller's children)
//!   is never counted; the peak is the largest single process's.

pub use crate::lock::members::{FENCE_VAR, LOCK_VAR, RUN_ID_VAR, SLOT_VAR, TOKEN_VAR};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

use crate::error::Error;
use crate::lock::LockGuard;
use crate::lock::idle::{self, IdleWatch};
use crate::procfs::ProcId;
use crate::record::Record;
use crate::signal::{DEFAULT_GRACE, Ended, GracefulStop, Stopping, signal_group};
use crate::sys::{Blocked, SignalReader};

mod spawn;
mod strays;
mod terminal;

use spawn::Exec;

/// How a run is supervised.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunOptions {
    /// End the command after this long (TERM, then KILL after `kill_after`).
    pub max_time: Option<Duration>,
    /// The grace between TERM and KILL, for `max_time` and for strays.
    pub kill_after: Duration,
    /// Leave the run's leftover processes alone when the command exits.
    pub keep_strays: bool,
    /// Leave the run's leftover processes running when the command exits
    /// on its own, and report them in [`RunOutcome::kept`]: they keep the
    /// lock held (see the module docs).
    pub linger: bool,
    /// End the run once all its processes have been idle this long.
    pub idle_timeout: Option<Duration>,
    /// Variables of the caller's environment that the command does not
    /// inherit: the caller's secrets, which a command that runs as
    /// another user would otherwise hand on.
    pub withheld_env: &'static [&'static str],
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_time: None,
            kill_after: DEFAULT_GRACE,
            keep_strays: false,
            linger: false,
            idle_timeout: None,
            withheld_env: &[],
        }
    }
}

pub use crate::journal::{Exit, Usage};

/// Why onlyone ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndedBy {
    /// It ran for `max_time`.
    MaxTime(Duration),
    /// All its processes were idle for `idle_timeout`.
    Idle(Duration),
    /// Its lease could not be renewed in time (or was found gone): the
    /// command was ended before another holder could get the lock.
    LeaseLost,
    /// `onlyone stop` (or `run --replace`) ended the run: a request in the
    /// PostgreSQL store, or here the stop's signal, which carries a mark
    /// the wrapper reads.
    StopRequested,
}

impl From<EndedBy> for crate::journal::EndReason {
    fn from(by: EndedBy) -> Self {
        use crate::journal::EndReason;
        match by {
            EndedBy::MaxTime(_) => EndReason::MaxTime,
            EndedBy::Idle(_) => EndReason::Idle,
            EndedBy::LeaseLost => EndReason::LeaseLost,
            EndedBy::StopRequested => EndReason::Stop,
        }
    }
}

/// The lock side of a run: what the command is told, how it is named in
/// the lock, and what keeps the lock held. A [`LockGuard`] of the lock
/// directory is one; a lease of the PostgreSQL store is another.
pub trait Hold {
    /// The variables the command gets: `ONLYONE_LOCK`, `ONLYONE_TOKEN`,
    /// `ONLYONE_SLOT` (and `ONLYONE_FENCE`).
    fn vars(&self) -> Vec<(&'static str, OsString)>;
    /// Names the command in the lock once it has started.
    fn set_command(&mut self, pid: u32) -> crate::Result<()>;
    /// The record, for a store that keeps one on this host (the run's
    /// searches for lingering processes use it).
    fn record(&self) -> Option<&Record>;
    /// Keeps the lock's file fresh (age-based cleaners), when it has one.
    fn refresh(&self) -> crate::Result<()>;
    /// The time limit the lock puts on the run (a store's lease), to
    /// watch; none for a lock that holds as long as its processes live.
    fn limit(&self) -> Option<&dyn Limit>;
}

/// A time limit a lock puts on a run: a store's lease, renewed elsewhere
/// (see `crate::place::store::timing`). The command must be gone by
/// [`Limit::kill_by`], TERM from [`Limit::term_by`]; the supervisor wakes on
/// [`Limit::wake_fd`] when something changed. Times are on the boot clock
/// (`CLOCK_BOOTTIME`), in nanoseconds.
pub trait Limit {
    /// Empties the wake-up descriptor.
    fn drain(&self);
    /// The lock is known lost: end the command now.
    fn lost(&self) -> bool;
    /// When the command must be gone.
    fn kill_by(&self) -> i64;
    /// When the command gets TERM, to be gone by [`Limit::kill_by`].
    fn term_by(&self) -> i64;
    /// Another process asked for the run to end.
    fn stop_requested(&self) -> bool;
    /// Readable when something changed.
    fn wake_fd(&self) -> BorrowedFd<'_>;
}

impl Hold for LockGuard {
    fn vars(&self) -> Vec<(&'static str, OsString)> {
        let mut vars = vec![
            (
                crate::supervise::LOCK_VAR,
                self.lock().path().as_os_str().to_owned(),
            ),
            (crate::supervise::TOKEN_VAR, self.token().into()),
        ];
        vars.extend(
            crate::journal::run_id(self.token()).map(|r| (crate::supervise::RUN_ID_VAR, r.into())),
        );
        vars.push((crate::supervise::SLOT_VAR, self.slot().to_string().into()));
        vars
    }

    fn set_command(&mut self, pid: u32) -> crate::Result<()> {
        LockGuard::set_command(self, pid)
    }

    fn record(&self) -> Option<&Record> {
        Some(LockGuard::record(self))
    }

    fn refresh(&self) -> crate::Result<()> {
        LockGuard::refresh(self)
    }

    fn limit(&self) -> Option<&dyn Limit> {
        None
    }
}

/// What happened in a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunOutcome {
    /// How the command ended.
    pub exit: Exit,
    /// Set when onlyone ended it.
    pub ended_by: Option<EndedBy>,
    /// The leftover processes that were ended (empty with `keep_strays`).
    pub strays: Ended,
    /// The leftover processes that were kept (with `keep_strays`, or with
    /// `linger` when the command exited on its own).
    pub kept: Vec<ProcId>,
    /// With `linger`, the command exited on its own: the lock is left to
    /// the run's remaining processes. The caller keeps the record in place
    /// even when none was seen yet: work handed to a terminal server may
    /// exec (and show the token) only after the command has returned. A
    /// record none of whose processes lives is stale, and the next acquire
    /// takes it over.
    pub lingers: bool,
    /// What the command and the leftovers onlyone reaped used (see
    /// [`Usage`]; the processes kept, or that would not die, are not in
    /// it).
    pub usage: Usage,
}

/// Why a run could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The command was not found.
    #[error("cannot run `{program}`: {source}")]
    NotFound {
        /// The program.
        program: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The command was found but could not be executed.
    #[error("cannot run `{program}`: {source}")]
    NotExecutable {
        /// The program.
        program: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The lock failed.
    #[error(transparent)]
    Lock(#[from] Error),
    /// A system call of the supervisor failed.
    #[error("cannot supervise the command: {0}")]
    Supervise(#[source] io::Error),
}

impl RunError {
    fn spawn(program: &OsString, source: io::Error) -> RunError {
        let program = program.to_string_lossy().into_owned();
        if source.kind() == io::ErrorKind::NotFound {
            RunError::NotFound { program, source }
        } else {
            RunError::NotExecutable { program, source }
        }
    }
}

/// The signals onlyone forwards to the command's process group.
pub(crate) const FORWARDED: [Signal; 7] = [
    Signal::TERM,
    Signal::INT,
    Signal::HUP,
    Signal::QUIT,
    Signal::USR1,
    Signal::USR2,
    Signal::ALARM,
];

/// Runs `argv` under `guard` until it exits, as described in the module
/// docs. The caller releases the lock afterwards.
///
/// The forwarded signals are blocked in the calling thread for the run;
/// call it from a program whose other threads block them too (or that has
/// none), so that a signal is forwarded rather than killing onlyone.
///
/// For the run's duration the calling process is the subreaper of its
/// descendants (`PR_SET_CHILD_SUBREAPER`): what the command's processes
/// leave behind becomes its child, is found at the end whatever its
/// environment, and is reaped once it exits. Children the caller had before
/// the run are never reaped; one that another thread starts during the run
/// may be, so spawn nothing else meanwhile.
pub fn run(
    guard: &mut dyn Hold,
    argv: &[OsString],
    opts: &RunOptions,
) -> Result<RunOutcome, RunError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(RunError::NotFound {
            program: String::new(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "no command given"),
        });
    };
    let mut watched: Vec<i32> = FORWARDED.iter().map(|s| s.as_raw()).collect();
    watched.push(Signal::CHILD.as_raw());
    // Forwarded signals are consumed from the signalfd; what is still
    // pending when the mask is restored arrived after the command ended
    // and acts on onlyone.
    let _blocked = Blocked::new(&watched).map_err(RunError::Supervise)?;
    let signals = SignalReader::new(&watched).map_err(RunError::Supervise)?;
    // An inherited "ignore" for SIGCHLD would have the kernel reap the
    // command behind our back (its exit is also watched through a pidfd,
    // which works whatever SIGCHLD's disposition); job control stops
    // onlyone with its command (see `terminal::suspend_with`), whatever
    // disposition it inherited.
    crate::sys::default_disposition(Signal::CHILD.as_raw());
    crate::sys::default_disposition(Signal::TSTP.as_raw());
    // onlyone is the subreaper of the run: what the command's processes
    // leave behind when they exit (a daemon started through `setsid`,
    // `runuser -l`, `su -` or `env -i`, which clears the token) becomes
    // onlyone's child, so it is found at the end of the run whatever its
    // environment or group. Unset again once the run is over.
    let subreaper = rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok();
    let result =
        Supervision::start(guard, program, args, opts, &signals).and_then(|mut s| s.supervise());
    if subreaper {
        let _ = rustix::process::set_child_subreaper(None);
    }
    result
}

/// A run under way.
struct Supervision<'g> {
    guard: &'g mut dyn Hold,
    opts: &'g RunOptions,
    signals: &'g SignalReader,
    /// The command, which leads its own process group.
    command: ProcId,
    pid: Pid,
    pidfd: Option<OwnedFd>,
    /// The terminal, when the command was given it.
    tty: Option<OwnedFd>,
    /// The caller's own children: never reaped here.
    theirs: Vec<u32>,
    /// The record as the run's own searches read it (a store that keeps
    /// one on this host).
    record: Option<Record>,
    started: Instant,
    term_at: Option<Instant>,
    ended_by: Option<EndedBy>,
    stopping: Option<Stopping>,
    idle: Option<(Duration, IdleWatch, Instant)>,
    /// The lock file's times are kept young, so that age-based cleaning of
    /// /tmp never takes a run's lock, however long it runs.
    refresh_at: Instant,
    /// What the processes of the run reaped so far used.
    tally: strays::Tally,
}

impl<'g> Supervision<'g> {
    /// Spawns the command, gives it the terminal, and names it in the
    /// record.
    fn start(
        guard: &'g mut dyn Hold,
        program: &OsString,
        args: &[OsString],
        opts: &'g RunOptions,
        signals: &'g SignalReader,
    ) -> Result<Supervision<'g>, RunError> {
        let exec = Exec::new(program, args, &guard.vars(), opts.withheld_env)
            .map_err(|e| RunError::spawn(program, e))?;
        let theirs = match crate::sys::children() {
            crate::sys::Children::None => Vec::new(),
            _ => crate::procfs::children_of(std::process::id()),
        };
        let raw = exec.spawn().map_err(|e| RunError::spawn(program, e))?;
        let pid = i32::try_from(raw)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| RunError::Supervise(io::Error::other("posix_spawn gave pid 0")))?;
        // The terminal goes to the command once it has exec'd: posix_spawn
        // returns only then.
        let tty = terminal::foreground_terminal();
        if let Some(t) = &tty {
            terminal::give_terminal(t.as_fd(), pid);
        }
        // The child is ours until we reap it, so its pid cannot be reused.
        if let Err(e) = guard.set_command(raw) {
            signal_group(raw, Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
            return Err(e.into());
        }
        let command = guard
            .record()
            .and_then(|r| r.cmd_id)
            .or_else(|| ProcId::of(raw))
            .unwrap_or(ProcId { pid: raw, start: 0 });
        let started = Instant::now();
        Ok(Supervision {
            record: guard.record().cloned(),
            guard,
            opts,
            signals,
            command,
            pid,
            pidfd: rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok(),
            tty,
            theirs,
            started,
            term_at: opts.max_time.map(|d| started + d),
            ended_by: None,
            stopping: None,
            idle: opts
                .idle_timeout
                .map(|w| (w, IdleWatch::new(), started + idle::sample_interval(w))),
            refresh_at: started + crate::lock::refresh_interval(),
            tally: strays::Tally::default(),
        })
    }

    /// Supervises the command to its exit, then deals with its leftovers.
    fn supervise(&mut self) -> Result<RunOutcome, RunError> {
        let exit = loop {
            self.check_lease();
            if let Some(exit) = self.check_command()? {
                break exit;
            }
            // A lease first: after a pause, nothing else may run before
            // the command is ended if the lease may have run out.
            self.check_lease();
            let now = Instant::now();
            self.check_max_time(now);
            self.check_idle(now);
            if let Some(s) = &mut self.stopping {
                s.kill_if_due(now);
            }
            if now >= self.refresh_at {
                let _ = self.guard.refresh();
                self.refresh_at = now + crate::lock::refresh_interval();
            }
            self.sleep();
            self.forward_signals();
            strays::reap_orphans(self.command.pid, &self.theirs, &self.tally);
        };
        if let Some(t) = &self.tty
            && terminal::in_foreground(t.as_fd(), self.pid)
        {
            terminal::give_terminal(t.as_fd(), rustix::process::getpgrp());
        }
        self.finish(exit)
    }

    /// Whether the command has exited (and how), what it used added to the
    /// run's; a job-control stop of it stops onlyone's job too.
    fn check_command(&mut self) -> Result<Option<Exit>, RunError> {
        use crate::sys::Waited;
        let (exit, ru) = match crate::sys::wait4(self.command.pid, true) {
            Ok(Some((Waited::Exited(code), ru))) => (Exit::Code(code), ru),
            Ok(Some((Waited::Signaled(sig), ru))) => (Exit::Signal(sig), ru),
            Ok(Some((Waited::Stopped(sig), _))) => {
                self.stopped(sig);
                return Ok(None);
            }
            Ok(None) => return Ok(None),
            Err(e) => return Err(RunError::Supervise(e)),
        };
        self.tally.add(&ru);
        Ok(Some(exit))
    }

    /// The command was stopped by `sig`.
    fn stopped(&self, sig: i32) {
        let job_control = [Signal::TSTP, Signal::TTIN, Signal::TTOU].map(Signal::as_raw);
        match sig {
            // It touched the terminal before the handover reached it: it
            // has the terminal now, so let it go on.
            sig if (sig == Signal::TTIN.as_raw() || sig == Signal::TTOU.as_raw())
                && self
                    .tty
                    .as_ref()
                    .is_some_and(|t| terminal::in_foreground(t.as_fd(), self.pid)) =>
            {
                signal_group(self.command.pid, Signal::CONT);
            }
            // Stopped by job control (Ctrl-Z, or reading the terminal from
            // the background): stop with it, so the shell shows the job as
            // stopped. A plain SIGSTOP from someone else is theirs to undo.
            sig if job_control.contains(&sig) => terminal::suspend_with(self.pid),
            _ => {}
        }
    }

    /// Watches the lease (a store that leases): the command is gone by
    /// `kill_by` (`t_send + L - M`), TERM from `kill_by - G`; a lease found
    /// lost, or a wake-up past `kill_by` (a pause), is KILL at once. A
    /// remote stop is a graceful end.
    fn check_lease(&mut self) {
        let Some(lease) = self.guard.limit() else {
            return;
        };
        lease.drain();
        let now = crate::sys::boot_ns();
        let kill_by = lease.kill_by();
        if lease.lost() || now >= kill_by {
            signal_group(self.command.pid, Signal::KILL);
            self.ended_by = Some(EndedBy::LeaseLost);
            self.stopping = None;
            return;
        }
        let until_kill = Duration::from_nanos((kill_by - now) as u64);
        if now >= lease.term_by() {
            let kill_at = Instant::now() + until_kill;
            let late = self
                .stopping
                .as_ref()
                .and_then(Stopping::kill_at)
                .is_none_or(|k| k > kill_at);
            if late || self.ended_by != Some(EndedBy::LeaseLost) {
                self.ended_by = Some(EndedBy::LeaseLost);
                self.stopping = Some(
                    GracefulStop::term(until_kill.min(self.opts.kill_after))
                        .begin_group(self.command.pid),
                );
            }
        } else if lease.stop_requested() && self.ended_by.is_none() {
            self.end_run(EndedBy::StopRequested);
        }
    }

    /// When the lease next needs a look: TERM time, KILL time.
    fn lease_wake(&self) -> Option<Instant> {
        let lease = self.guard.limit()?;
        let now = crate::sys::boot_ns();
        let next = if now < lease.term_by() {
            lease.term_by()
        } else {
            lease.kill_by()
        };
        Some(Instant::now() + Duration::from_nanos(next.saturating_sub(now).max(0) as u64))
    }

    /// Ends the run once it has run for `max_time`.
    fn check_max_time(&mut self, now: Instant) {
        if let Some(t) = self.term_at
            && self.ended_by.is_none()
            && now >= t
        {
            self.end_run(EndedBy::MaxTime(t - self.started));
        }
    }

    /// Samples the run's activity when due, and ends it once every process
    /// of it has been idle for the window.
    fn check_idle(&mut self, now: Instant) {
        if self.ended_by.is_some() {
            return;
        }
        let me = std::process::id();
        let Some((window, watch, next)) = &mut self.idle else {
            return;
        };
        if now < *next {
            return;
        }
        // The command and what descends from it; a lingering run's token
        // carriers too (only `--linger` pays for that search).
        let procs = if self.opts.linger {
            strays::lingering(self.record.as_ref(), me, &self.theirs)
        } else {
            Ok(strays::leftovers(me, &self.theirs))
        };
        match procs {
            Ok(procs) => {
                watch.sample(&procs);
            }
            // What cannot be seen is never idle.
            Err(_) => watch.mark_active(),
        }
        *next = Instant::now() + idle::sample_interval(*window);
        if watch.idle_for() >= *window {
            let window = *window;
            self.end_run(EndedBy::Idle(window));
        }
    }

    /// onlyone ends the run: a graceful stop of the command's group.
    fn end_run(&mut self, why: EndedBy) {
        self.ended_by = Some(why);
        self.stopping =
            Some(GracefulStop::term(self.opts.kill_after).begin_group(self.command.pid));
    }

    /// Sleeps until a signal (the command's SIGCHLD included), the
    /// command's exit, or the next timer.
    fn sleep(&self) {
        let sample_at = self.idle.as_ref().map(|(_, _, next)| *next);
        let kill_at = self.stopping.as_ref().and_then(Stopping::kill_at);
        let lease_at = self.lease_wake();
        let next = if self.ended_by.is_some() {
            [kill_at, Some(self.refresh_at), lease_at]
                .into_iter()
                .flatten()
                .min()
        } else {
            [self.term_at, sample_at, Some(self.refresh_at), lease_at]
                .into_iter()
                .flatten()
                .min()
        };
        let timeout = next.map(|n| n.saturating_duration_since(Instant::now()));
        let mut fds = vec![self.signals.as_fd()];
        fds.extend(self.pidfd.as_ref().map(|f| f.as_fd()));
        fds.extend(self.guard.limit().map(|l| l.wake_fd()));
        wait_readable(&fds, timeout);
    }

    /// Forwards the signals sent to onlyone to the command's group.
    fn forward_signals(&mut self) {
        while let Some((sig, stop)) = self.signals.next() {
            // `onlyone stop`'s signal: the run ends stopped, however its
            // command takes the signal (the stopper sees to the KILL).
            if stop && self.ended_by.is_none() {
                self.ended_by = Some(EndedBy::StopRequested);
            }
            if let Some(s) = FORWARDED.iter().find(|s| s.as_raw() == sig)
                && let Some(group) = i32::try_from(self.command.pid).ok().and_then(Pid::from_raw)
            {
                let _ = rustix::process::kill_process_group(group, *s);
            }
        }
    }

    /// The command has exited: ends its leftovers (or keeps them), and
    /// drops what signals came after.
    fn finish(&mut self, exit: Exit) -> Result<RunOutcome, RunError> {
        let me = std::process::id();
        let (command, theirs, tally) = (self.command.pid, self.theirs.as_slice(), &self.tally);
        strays::reap_orphans(command, theirs, tally);
        let lingers = self.opts.linger && self.ended_by.is_none();
        let (strays, kept) = if lingers {
            (
                Ended::default(),
                strays::lingering(self.record.as_ref(), me, theirs)?,
            )
        } else if self.opts.keep_strays {
            (Ended::default(), strays::leftovers(me, theirs))
        } else {
            let scan = || {
                strays::reap_orphans(command, theirs, tally);
                strays::leftovers(me, theirs)
            };
            let settled = || strays::settled(command, theirs, tally);
            // A lost lease leaves no time for a grace: the run must be gone
            // before another holder may start.
            let grace = if self.ended_by == Some(EndedBy::LeaseLost) {
                Duration::ZERO
            } else {
                self.opts.kill_after
            };
            let ended = strays::end_strays(command, grace, scan, settled);
            (ended, Vec::new())
        };
        // Signals that came after the command ended were for the run, which
        // is over: consume them, so that onlyone still releases the lock
        // and reports the command's own exit.
        while self.signals.next().is_some() {}
        strays::reap_orphans(command, theirs, tally);
        Ok(RunOutcome {
            exit,
            ended_by: self.ended_by,
            strays,
            kept,
            lingers,
            usage: tally.get(),
        })
    }
}

/// Waits until one of `fds` is readable or `timeout` passes (forever:
/// `None`).
fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let ts = timeout.map(|t| Timespec {
        tv_sec: t.as_secs() as _,
        tv_nsec: t.subsec_nanos() as _,
    });
    let mut polled: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
    let _ = rustix::event::poll(&mut polled, ts.as_ref());
}
