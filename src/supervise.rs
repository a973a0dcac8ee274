//! The supervisor of a run: the command under the lock, for exactly its
//! life.
//!
//! - The command is started as the leader of its own process group, with
//!   `ONLYONE_LOCK` and `ONLYONE_TOKEN` in its environment; its pid and start
//!   time go into the record.
//! - SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to onlyone are forwarded to the
//!   command's process group. They are blocked and read from a signalfd, so
//!   none is lost between checks; the command starts with an empty mask.
//! - From an interactive terminal, the command's group is made the
//!   terminal's foreground group, so it can read the terminal and Ctrl-C
//!   reaches it directly; onlyone takes the terminal back when it stops or
//!   exits, with SIGTTOU blocked so it is never stopped doing so. If the
//!   command is stopped (Ctrl-Z), onlyone stops too, and resumes it on
//!   `fg`.
//! - `max_time`: TERM to the group, then KILL after `kill_after`.
//! - `idle_timeout`: the run is over when every process of it has been idle
//!   (no CPU time, no byte read or written: [`crate::idle`]) for that long;
//!   it is then ended like `max_time`.
//! - When the command exits, the processes of the run that are left
//!   (strays: its group and whatever carries the token) are ended, TERM then
//!   KILL, before the caller releases the lock; `keep_strays` skips that.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal as NixSignal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid as NixPid;

use crate::error::Error;
use crate::idle::{self, IdleWatch};
use crate::lock::LockGuard;
use crate::procfs::{LOCK_VAR, TOKEN_VAR};
use crate::terminate::{self, Ended, Target};

/// How a run is supervised.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// End the command after this long (TERM, then KILL after `kill_after`).
    pub max_time: Option<Duration>,
    /// The grace between TERM and KILL, for `max_time` and for strays.
    pub kill_after: Duration,
    /// Leave the run's leftover processes alone when the command exits.
    pub keep_strays: bool,
    /// End the run once all its processes have been idle this long.
    pub idle_timeout: Option<Duration>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_time: None,
            kill_after: Duration::from_secs(5),
            keep_strays: false,
            idle_timeout: None,
        }
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

/// Why onlyone ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndedBy {
    /// It ran for `max_time`.
    MaxTime(Duration),
    /// All its processes were idle for `idle_timeout`.
    Idle(Duration),
}

/// What happened in a run.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// How the command ended.
    pub exit: Exit,
    /// Set when onlyone ended it.
    pub ended_by: Option<EndedBy>,
    /// The leftover processes that were ended (empty with `keep_strays`).
    pub strays: Ended,
    /// The leftover processes that were kept (with `keep_strays`).
    pub kept: Vec<u32>,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The command could not be executed (exit 126) or found (127).
    #[error("cannot run `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The exec error.
        #[source]
        source: io::Error,
    },
    /// onlyone itself failed.
    #[error(transparent)]
    Lock(#[from] Error),
    /// A system call of the supervisor failed.
    #[error("cannot supervise the command: {0}")]
    Sys(#[from] nix::Error),
}

impl RunError {
    /// 127 for a command that was not found, 126 for one that could not be
    /// executed, 125 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound => 127,
            RunError::Spawn { .. } => 126,
            _ => 125,
        }
    }
}

/// The signals onlyone forwards to the command.
pub const FORWARDED: [NixSignal; 4] = [
    NixSignal::SIGTERM,
    NixSignal::SIGINT,
    NixSignal::SIGHUP,
    NixSignal::SIGQUIT,
];

fn supervised_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(NixSignal::SIGCHLD);
    set
}

/// The controlling terminal, when onlyone is in its foreground group.
fn foreground_terminal() -> Option<OwnedFd> {
    let fd = rustix::fs::open(
        "/dev/tty",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let fg = nix::unistd::tcgetpgrp(&fd).ok()?;
    (fg == nix::unistd::getpgrp()).then_some(fd)
}

/// Makes `pgrp` the terminal's foreground group without being stopped by
/// SIGTTOU (which a background caller would get).
fn give_terminal(tty: BorrowedFd<'_>, pgrp: NixPid) {
    let mut ttou = SigSet::empty();
    ttou.add(NixSignal::SIGTTOU);
    let mut old = SigSet::empty();
    if nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_BLOCK,
        Some(&ttou),
        Some(&mut old),
    )
    .is_ok()
    {
        let _ = nix::unistd::tcsetpgrp(tty, pgrp);
        let _ = old.thread_set_mask();
    }
}

/// Runs `argv` under `guard` until it exits, as described in the module
/// docs. The caller releases the lock afterwards.
///
/// The forwarded signals are blocked in the calling thread for the run;
/// call it from a program whose other threads block them too (or that has
/// none), so that a signal is forwarded rather than killing onlyone.
pub fn run(
    guard: &mut LockGuard,
    argv: &[OsString],
    opts: &RunOptions,
) -> Result<RunOutcome, RunError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(RunError::Spawn {
            program: String::new(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "no command given"),
        });
    };
    let signals = supervised_signals();
    let mut old_mask = SigSet::empty();
    nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_BLOCK,
        Some(&signals),
        Some(&mut old_mask),
    )?;
    let result = run_blocked(guard, program, args, opts, &signals);
    // Forwarded signals were consumed from the signalfd; what is still
    // pending now arrived after the command ended and acts on onlyone.
    let _ = old_mask.thread_set_mask();
    result
}

fn run_blocked(
    guard: &mut LockGuard,
    program: &OsString,
    args: &[OsString],
    opts: &RunOptions,
    signals: &SigSet,
) -> Result<RunOutcome, RunError> {
    let sigfd = SignalFd::with_flags(signals, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
    // An inherited "ignore" for SIGCHLD would have the kernel reap the
    // command behind our back; the command's exit is also watched through
    // a pidfd, which works whatever SIGCHLD's disposition.
    // SAFETY: SIG_DFL installs no handler.
    let _ = unsafe {
        nix::sys::signal::signal(NixSignal::SIGCHLD, nix::sys::signal::SigHandler::SigDfl)
    };
    let tty = foreground_terminal().filter(|_| alone_in_process_group());
    let tty_raw = tty.as_ref().map(|t| t.as_raw_fd());

    let spawn_error = |source| RunError::Spawn {
        program: program.to_string_lossy().into_owned(),
        source,
    };
    let exec = Exec::new(program, args, guard).map_err(spawn_error)?;
    let pid = match tty_raw {
        None => exec.spawn(),
        Some(raw) => exec.spawn_with_terminal(raw),
    }
    .map_err(spawn_error)?;
    let npid = NixPid::from_raw(pid as i32);
    // The child is ours until we reap it, so its pid cannot be reused.
    if let Err(e) = guard.set_command(pid) {
        let _ = nix::sys::signal::killpg(npid, NixSignal::SIGKILL);
        let _ = waitpid(npid, None);
        return Err(e.into());
    }
    let cmd_start = guard.record().cmd_start.unwrap_or(0);
    let child_fd = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());

    let started = Instant::now();
    let term_at = opts.max_time.map(|d| started + d);
    let mut kill_at: Option<Instant> = None;
    let mut ended_by: Option<EndedBy> = None;
    let me = std::process::id();
    let run_record = with_command(guard, pid, cmd_start);
    let mut idle = opts
        .idle_timeout
        .map(|w| (w, IdleWatch::new(), started + idle::sample_interval(w)));
    let exit = loop {
        match waitpid(npid, Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED)) {
            Ok(WaitStatus::Exited(_, code)) => break Exit::Code(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => break Exit::Signal(sig as i32),
            // Stopped by job control (Ctrl-Z, or reading the terminal from
            // the background): stop with it, so the shell shows the job as
            // stopped. A plain SIGSTOP from someone else is theirs to undo.
            Ok(WaitStatus::Stopped(
                _,
                NixSignal::SIGTSTP | NixSignal::SIGTTIN | NixSignal::SIGTTOU,
            )) => {
                suspend_with(tty.as_ref().map(|t| t.as_fd()), npid);
                continue;
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let now = Instant::now();
        if let Some(t) = term_at
            && ended_by.is_none()
            && now >= t
        {
            ended_by = Some(EndedBy::MaxTime(t - started));
            let _ = nix::sys::signal::killpg(npid, NixSignal::SIGTERM);
            kill_at = Some(now + opts.kill_after);
        }
        if let Some((window, watch, next)) = &mut idle
            && ended_by.is_none()
            && now >= *next
        {
            match terminate::processes_of(&run_record, &[me]) {
                Ok(t) => {
                    let procs: Vec<(u32, u64)> = t.into_iter().map(|t| (t.pid, t.start)).collect();
                    watch.sample(&procs);
                }
                // What cannot be seen is never idle.
                Err(_) => watch.mark_active(),
            }
            *next = Instant::now() + idle::sample_interval(*window);
            if watch.idle_for() >= *window {
                ended_by = Some(EndedBy::Idle(*window));
                let _ = nix::sys::signal::killpg(npid, NixSignal::SIGTERM);
                kill_at = Some(now + opts.kill_after);
            }
        }
        if let Some(k) = kill_at
            && now >= k
        {
            let _ = nix::sys::signal::killpg(npid, NixSignal::SIGKILL);
            kill_at = None;
        }
        let sample_at = idle.as_ref().map(|(_, _, next)| *next);
        let next = if ended_by.is_some() {
            kill_at
        } else {
            [term_at, sample_at].into_iter().flatten().min()
        };
        let timeout = next.map(|n| n.saturating_duration_since(Instant::now()));
        wait_readable(sigfd.as_fd(), child_fd.as_ref().map(|f| f.as_fd()), timeout);
        while let Ok(Some(info)) = sigfd.read_signal() {
            let signo = info.ssi_signo as i32;
            if let Ok(sig) = NixSignal::try_from(signo)
                && FORWARDED.contains(&sig)
            {
                let _ = nix::sys::signal::killpg(npid, sig);
            }
        }
    };
    if let Some(t) = &tty
        && nix::unistd::tcgetpgrp(t).ok() == Some(npid)
    {
        give_terminal(t.as_fd(), nix::unistd::getpgrp());
    }

    // Every process of the run is looked for, descendants or not: a
    // process can carry the token without descending from the command (a
    // job handed to `at` keeps its environment).
    let leftovers = |me: u32| -> Result<Vec<Target>, RunError> {
        Ok(terminate::processes_of(&run_record, &[me])
            .map_err(RunError::Lock)?
            .into_iter()
            .filter(|t| t.pid != me)
            .collect())
    };
    let (strays, kept) = if opts.keep_strays {
        (
            Ended::default(),
            leftovers(me)?.iter().map(|t| t.pid).collect(),
        )
    } else {
        (
            end_strays(npid, opts.kill_after, || leftovers(me))?,
            Vec::new(),
        )
    };
    // Signals that came after the command ended were for the run, which is
    // over: consume them, so that onlyone still releases the lock and
    // reports the command's own exit.
    while let Ok(Some(_)) = sigfd.read_signal() {}
    Ok(RunOutcome {
        exit,
        ended_by,
        strays,
        kept,
    })
}

/// A command ready for execve(2): the resolved path, argv and envp, built
/// before the fork so that the child allocates nothing.
struct Exec {
    resolved: std::path::PathBuf,
    path: CString,
    _args: Vec<CString>,
    _env: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the raw pointers point into the CStrings owned by the same
// value, which are never changed or dropped while it lives.
unsafe impl Send for Exec {}
// SAFETY: as above; the value is only read.
unsafe impl Sync for Exec {}

impl Exec {
    fn new(program: &OsString, args: &[OsString], guard: &LockGuard) -> io::Result<Exec> {
        let resolved = resolve(program)?;
        let cstr = |b: &[u8]| {
            CString::new(b).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an argument contains a NUL byte",
                )
            })
        };
        let path = cstr(resolved.as_os_str().as_bytes())?;
        let mut all_args = vec![cstr(program.as_bytes())?];
        for a in args {
            all_args.push(cstr(a.as_bytes())?);
        }
        let mut env = Vec::new();
        for (k, v) in std::env::vars_os() {
            if k == LOCK_VAR || k == TOKEN_VAR {
                continue;
            }
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            env.push(cstr(&kv)?);
        }
        let mut lock = format!("{LOCK_VAR}=").into_bytes();
        lock.extend_from_slice(guard.lock().path().as_os_str().as_bytes());
        env.push(cstr(&lock)?);
        env.push(cstr(format!("{TOKEN_VAR}={}", guard.token()).as_bytes())?);
        let ptrs = |v: &[CString]| {
            let mut p: Vec<*const libc::c_char> = v.iter().map(|c| c.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        Ok(Exec {
            resolved,
            path,
            argv: ptrs(&all_args),
            envp: ptrs(&env),
            _args: all_args,
            _env: env,
        })
    }

    /// Starts the command with posix_spawn(3): in a process group of its
    /// own, with an empty signal mask and SIGPIPE at its default (onlyone,
    /// as every Rust program, ignores it). No /bin/sh fallback on ENOEXEC.
    fn spawn(&self) -> io::Result<u32> {
        use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
        let mut attr = PosixSpawnAttr::init()?;
        attr.set_flags(
            PosixSpawnFlags::POSIX_SPAWN_SETPGROUP
                | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK
                | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
        )?;
        attr.set_pgroup(NixPid::from_raw(0))?;
        attr.set_sigmask(&SigSet::empty())?;
        let mut default = SigSet::empty();
        default.add(NixSignal::SIGPIPE);
        attr.set_sigdefault(&default)?;
        let actions = PosixSpawnFileActions::init()?;
        let pid = nix::spawn::posix_spawn(
            self.path.as_c_str(),
            &actions,
            &attr,
            &self._args,
            &self._env,
        )?;
        Ok(pid.as_raw() as u32)
    }

    /// Starts the command with fork and exec, handing it the terminal
    /// `tty_raw` (an open descriptor of /dev/tty) before the exec.
    fn spawn_with_terminal(self, tty_raw: i32) -> io::Result<u32> {
        let mut cmd = Command::new(&self.resolved);
        cmd.process_group(0);
        // SAFETY: the closure runs in the forked child before exec and
        // calls only async-signal-safe functions (sigprocmask, sigaction,
        // tcsetpgrp, getpid, execve); it allocates nothing: the exec's
        // arguments were built before the fork. The tty fd stays open in the
        // child until exec.
        unsafe {
            cmd.pre_exec(move || {
                // SAFETY: `tty_raw` is the parent's open /dev/tty
                // descriptor, inherited by this child and open until exec.
                let tty = BorrowedFd::borrow_raw(tty_raw);
                let mut ttou = SigSet::empty();
                ttou.add(NixSignal::SIGTTOU);
                let _ = ttou.thread_block();
                let _ = nix::unistd::tcsetpgrp(tty, nix::unistd::getpid());
                // SAFETY: SIG_DFL installs no handler.
                let _ = nix::sys::signal::signal(
                    NixSignal::SIGPIPE,
                    nix::sys::signal::SigHandler::SigDfl,
                );
                // The command starts with nothing blocked.
                SigSet::empty().thread_set_mask()?;
                // Exec here rather than let std call execvp(3), which runs
                // a file that fails with ENOEXEC through /bin/sh.
                Err(self.exec())
            });
        }
        Ok(cmd.spawn()?.id())
    }

    /// Replaces this process with the command; returns only on failure.
    fn exec(&self) -> io::Error {
        // SAFETY: path, argv and envp are NUL-terminated and point into
        // CStrings that this value owns (see `new`).
        unsafe { libc::execve(self.path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr()) };
        io::Error::last_os_error()
    }
}

/// Finds `program` as execvp(3) would: as given when it has a `/`, else in
/// each directory of `$PATH`. A file found but not executable is EACCES
/// (126), nothing found is ENOENT (127).
fn resolve(program: &OsString) -> io::Result<std::path::PathBuf> {
    use rustix::fs::Access;
    if program.as_bytes().contains(&b'/') {
        return Ok(program.into());
    }
    if program.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "an empty command name",
        ));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut denied = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            ".".into()
        } else {
            dir
        };
        let candidate = dir.join(program);
        match std::fs::metadata(&candidate) {
            Ok(m) if m.is_file() => {
                if rustix::fs::access(&candidate, Access::EXEC_OK).is_ok() {
                    return Ok(candidate);
                }
                denied.get_or_insert(candidate);
            }
            _ => {}
        }
    }
    match denied {
        Some(p) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("`{}` is not executable", p.display()),
        )),
        None => Err(io::Error::new(
            io::ErrorKind::NotFound,
            "not found in $PATH",
        )),
    }
}

fn with_command(guard: &LockGuard, pid: u32, start: u64) -> crate::record::Record {
    let mut r = guard.record().clone();
    r.cmd_pid = Some(pid);
    r.cmd_start = Some(start);
    r
}

/// Waits until `fd` (or `other`) is readable or `timeout` passes
/// (forever: `None`).
fn wait_readable(fd: BorrowedFd<'_>, other: Option<BorrowedFd<'_>>, timeout: Option<Duration>) {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let ts = timeout.map(|t| Timespec {
        tv_sec: t.as_secs() as _,
        tv_nsec: t.subsec_nanos() as _,
    });
    let mut fds = vec![PollFd::new(&fd, PollFlags::IN)];
    if let Some(o) = &other {
        fds.push(PollFd::new(o, PollFlags::IN));
    }
    let _ = rustix::event::poll(&mut fds, ts.as_ref());
}

/// Ends the run's leftover processes: TERM, grace, KILL, then looks again,
/// because a stray may fork while it is being ended (a TERM trap that
/// starts another process). A few rounds, then KILL to the whole process
/// group. What still lives is reported as a survivor: the lock must then
/// stay held.
fn end_strays(
    group: NixPid,
    grace: Duration,
    mut scan: impl FnMut() -> Result<Vec<Target>, RunError>,
) -> Result<Ended, RunError> {
    let mut all = Ended::default();
    for round in 0..4 {
        let targets = scan()?;
        if targets.is_empty() {
            return Ok(all);
        }
        let first = if round == 0 {
            rustix::process::Signal::TERM
        } else {
            rustix::process::Signal::KILL
        };
        let ended = terminate::terminate(&targets, first, grace, None);
        all.signalled.extend(ended.signalled);
        all.killed.extend(ended.killed);
        all.skipped.extend(ended.skipped);
        all.survivors = ended.survivors;
    }
    let _ = nix::sys::signal::killpg(group, NixSignal::SIGKILL);
    let left = scan()?;
    let fds: Vec<Target> = left;
    let ended = terminate::terminate(&fds, rustix::process::Signal::KILL, Duration::ZERO, None);
    all.survivors = ended.survivors;
    Ok(all)
}

/// True when no other process shares onlyone's process group: handing the
/// terminal to the command's group would otherwise stop the others (the
/// rest of a pipeline that reads the terminal).
fn alone_in_process_group() -> bool {
    let me = std::process::id();
    let Ok(Some(mine)) = crate::procfs::read_stat(me) else {
        return false;
    };
    crate::procfs::all_pids().is_ok_and(|pids| {
        !pids.into_iter().any(|p| {
            p != me
                && crate::procfs::read_stat(p)
                    .ok()
                    .flatten()
                    .is_some_and(|s| s.pgrp == mine.pgrp && !s.is_dead())
        })
    })
}

/// The command was stopped by job control (Ctrl-Z): take the terminal back
/// if it holds it, stop onlyone too so the shell sees a stopped job, and
/// when continued (`fg`, `bg`) hand the terminal back if onlyone has it and
/// continue the command.
fn suspend_with(tty: Option<BorrowedFd<'_>>, child: NixPid) {
    let me = nix::unistd::getpgrp();
    if let Some(tty) = tty
        && nix::unistd::tcgetpgrp(tty).ok() == Some(child)
    {
        give_terminal(tty, me);
    }
    let _ = nix::sys::signal::raise(NixSignal::SIGSTOP);
    if let Some(tty) = tty
        && nix::unistd::tcgetpgrp(tty).ok() == Some(me)
    {
        give_terminal(tty, child);
    }
    let _ = nix::sys::signal::killpg(child, NixSignal::SIGCONT);
}
