//! The supervisor of a run: the command under the lock, for exactly its
//! life.
//!
//! - The command is started as the leader of its own process group, with
//!   `ONLYONE_LOCK` and `ONLYONE_TOKEN` in its environment; its pid and start
//!   time go into the record.
//! - SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to onlyone are forwarded to the
//!   command's process group. They are blocked and read from a signalfd, so
//!   none is lost between checks; the command starts with an empty mask.
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
//! - `max_time`: TERM to the group, then KILL after `kill_after`.
//! - `idle_timeout`: the run is over when every process of it has been idle
//!   (no CPU time, no byte read or written: [`crate::idle`]) for that long;
//!   it is then ended like `max_time`.
//! - onlyone is the run's subreaper: a process the command leaves behind
//!   (a daemon started through `setsid`, `runuser -l`, `su -` or `env -i`,
//!   which clears the token) becomes onlyone's child when its parent exits.
//! - When the command exits, the processes of the run that are left
//!   (strays: onlyone's descendants, the command's group and whatever
//!   carries the token) are ended, TERM then KILL, before the caller
//!   releases the lock; `keep_strays` skips that.
//! - `linger`: for work handed to a process that is not the command's
//!   child (a terminal server, tmux, screen). When the command exits on
//!   its own, the run's processes that outlive it are left running and
//!   reported in [`RunOutcome::kept`]: the caller leaves the lock to them
//!   (they carry the token, so the verdict finds them), and the reaper
//!   ends them once idle.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
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
    /// Leave the run's leftover processes running when the command exits
    /// on its own, and report them in [`RunOutcome::kept`]: they keep the
    /// lock held (see the module docs).
    pub linger: bool,
    /// End the run once all its processes have been idle this long.
    pub idle_timeout: Option<Duration>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_time: None,
            kill_after: Duration::from_secs(5),
            keep_strays: false,
            linger: false,
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
    /// The leftover processes that were kept (with `keep_strays`, or with
    /// `linger` when the command exited on its own).
    pub kept: Vec<Target>,
    /// With `linger`, the command exited on its own: the lock is left to
    /// the run's remaining processes. The caller keeps the record in place
    /// even when none was seen yet: work handed to a terminal server may
    /// exec (and show the token) only after the command has returned. A
    /// record none of whose processes lives is stale, and the next acquire
    /// takes it over.
    pub lingers: bool,
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

/// The controlling terminal, if onlyone has one.
fn controlling_terminal() -> Option<OwnedFd> {
    rustix::fs::open(
        "/dev/tty",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
}

/// The controlling terminal, when onlyone's process group is its
/// foreground group (whoever else is in the group).
fn foreground_terminal() -> Option<OwnedFd> {
    let fd = controlling_terminal()?;
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
///
/// For the run's duration the calling process is the subreaper of its
/// descendants (`PR_SET_CHILD_SUBREAPER`): what the command's processes
/// leave behind becomes its child, is found at the end whatever its
/// environment, and is reaped once it exits. Children the caller had before
/// the run are never reaped; one that another thread starts during the run
/// may be, so spawn nothing else meanwhile.
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
    // Job control stops onlyone with its command (see `suspend_with`),
    // whatever disposition it inherited.
    // SAFETY: SIG_DFL installs no handler.
    let _ = unsafe {
        nix::sys::signal::signal(NixSignal::SIGTSTP, nix::sys::signal::SigHandler::SigDfl)
    };

    // onlyone is the subreaper of the run: what the command's processes
    // leave behind when they exit (a daemon started through `setsid`,
    // `runuser -l`, `su -` or `env -i`, which clears the token) becomes
    // onlyone's child, so it is found at the end of the run whatever its
    // environment or group. Unset again once the run is over.
    let subreaper = rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok();
    let result = supervise_command(guard, program, args, opts, &sigfd);
    if subreaper {
        let _ = rustix::process::set_child_subreaper(None);
    }
    result
}

/// Spawns the command and supervises it to its end and its leftovers'.
fn supervise_command(
    guard: &mut LockGuard,
    program: &OsString,
    args: &[OsString],
    opts: &RunOptions,
    sigfd: &SignalFd,
) -> Result<RunOutcome, RunError> {
    let spawn_error = |source| RunError::Spawn {
        program: program.to_string_lossy().into_owned(),
        source,
    };
    let exec = Exec::new(program, args, guard).map_err(spawn_error)?;
    // The caller's own children: never reaped here.
    let theirs = crate::procfs::children_of(std::process::id());
    let pid = exec.spawn().map_err(spawn_error)?;
    let npid = NixPid::from_raw(pid as i32);
    // The terminal goes to the command once it has exec'd: posix_spawn
    // returns only then.
    let tty = foreground_terminal();
    if let Some(t) = &tty {
        give_terminal(t.as_fd(), npid);
    }
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
    // The lock file's times are kept young, so that age-based cleaning of
    // /tmp never takes a run's lock, however long it runs.
    let mut refresh_at = started + crate::lock::refresh_interval();
    let exit = loop {
        match waitpid(npid, Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED)) {
            Ok(WaitStatus::Exited(_, code)) => break Exit::Code(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => break Exit::Signal(sig as i32),
            // It touched the terminal before the handover reached it: it
            // has the terminal now, so let it go on.
            Ok(WaitStatus::Stopped(_, NixSignal::SIGTTIN | NixSignal::SIGTTOU))
                if tty
                    .as_ref()
                    .is_some_and(|t| nix::unistd::tcgetpgrp(t).ok() == Some(npid)) =>
            {
                let _ = nix::sys::signal::killpg(npid, NixSignal::SIGCONT);
                continue;
            }
            // Stopped by job control (Ctrl-Z, or reading the terminal from
            // the background): stop with it, so the shell shows the job as
            // stopped. A plain SIGSTOP from someone else is theirs to undo.
            Ok(WaitStatus::Stopped(
                _,
                NixSignal::SIGTSTP | NixSignal::SIGTTIN | NixSignal::SIGTTOU,
            )) => {
                suspend_with(npid);
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
        if now >= refresh_at {
            let _ = guard.refresh();
            refresh_at = now + crate::lock::refresh_interval();
        }
        let sample_at = idle.as_ref().map(|(_, _, next)| *next);
        let next = if ended_by.is_some() {
            [kill_at, Some(refresh_at)].into_iter().flatten().min()
        } else {
            [term_at, sample_at, Some(refresh_at)]
                .into_iter()
                .flatten()
                .min()
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
        reap_orphans(npid, &theirs);
    };
    if let Some(t) = &tty
        && nix::unistd::tcgetpgrp(t).ok() == Some(npid)
    {
        give_terminal(t.as_fd(), nix::unistd::getpgrp());
    }

    // Every process of the run is looked for: its descendants, found as
    // onlyone's children (it is their subreaper) and theirs, whatever their
    // environment or group; and processes that carry the token without
    // descending from the command (a job handed to `at` keeps its
    // environment).
    let leftovers = |me: u32| -> Result<Vec<Target>, RunError> {
        reap_orphans(npid, &theirs);
        let mut all: Vec<Target> = terminate::processes_of(&run_record, &[me])
            .map_err(RunError::Lock)?
            .into_iter()
            .filter(|t| t.pid != me)
            .collect();
        for (pid, start) in crate::procfs::descendants_of(me) {
            if !all.iter().any(|t| t.pid == pid) {
                all.push(Target { pid, start });
            }
        }
        Ok(all)
    };
    let lingers = opts.linger && ended_by.is_none();
    let (strays, kept) = if opts.keep_strays || lingers {
        (Ended::default(), leftovers(me)?)
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
    reap_orphans(npid, &theirs);
    Ok(RunOutcome {
        exit,
        ended_by,
        strays,
        kept,
        lingers,
    })
}

/// Reaps the exited processes that were re-parented to onlyone (its
/// subreaper role), but never `command`, whose exit the loop reads, nor a
/// child the caller had before the run (`theirs`). Without this they would
/// stay zombies for the rest of the run.
fn reap_orphans(command: NixPid, theirs: &[u32]) {
    use nix::sys::wait::{Id, waitid};
    let me = std::process::id();
    for child in crate::procfs::children_of(me) {
        if child == command.as_raw() as u32 || theirs.contains(&child) {
            continue;
        }
        let pid = NixPid::from_raw(child as i32);
        // Only an exited one: WNOWAIT leaves it for the reap below.
        if matches!(
            waitid(
                Id::Pid(pid),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT
            ),
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
        ) {
            let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// A command ready for posix_spawn(3): the resolved path, argv and envp.
struct Exec {
    path: CString,
    args: Vec<CString>,
    env: Vec<CString>,
}

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
        Ok(Exec {
            path,
            args: all_args,
            env,
        })
    }

    /// Starts the command with posix_spawn(3): in a process group of its
    /// own, with an empty signal mask, and SIGPIPE (onlyone, as every Rust
    /// program, ignores it) and the job-control signals SIGTSTP, SIGTTIN
    /// and SIGTTOU (a terminal multiplexer may leave them ignored) at their
    /// defaults. No /bin/sh fallback on ENOEXEC.
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
        for sig in [
            NixSignal::SIGPIPE,
            NixSignal::SIGTSTP,
            NixSignal::SIGTTIN,
            NixSignal::SIGTTOU,
        ] {
            default.add(sig);
        }
        attr.set_sigdefault(&default)?;
        let actions = PosixSpawnFileActions::init()?;
        let pid =
            nix::spawn::posix_spawn(self.path.as_c_str(), &actions, &attr, &self.args, &self.env)?;
        Ok(pid.as_raw() as u32)
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

/// The command was stopped by job control (Ctrl-Z, or reading the
/// terminal from the background). Takes the terminal back if the command
/// holds it, and stops onlyone's own process group with SIGTSTP, as the
/// terminal would have stopped the job had the command been in it: the
/// shell that waits for the job (a script's shell too) sees it stopped. In
/// an orphaned group (no job-control shell above) the kernel discards the
/// SIGTSTP rather than leave a job stopped that nothing would continue:
/// onlyone then goes on at once. When continued (`fg`, `bg`), onlyone hands
/// the terminal back to the command if its group is in the foreground, and
/// continues the command.
fn suspend_with(child: NixPid) {
    let me = nix::unistd::getpgrp();
    if let Some(tty) = controlling_terminal()
        && nix::unistd::tcgetpgrp(&tty).ok() == Some(child)
    {
        give_terminal(tty.as_fd(), me);
    }
    let _ = nix::sys::signal::killpg(me, NixSignal::SIGTSTP);
    if let Some(tty) = foreground_terminal() {
        give_terminal(tty.as_fd(), child);
    }
    let _ = nix::sys::signal::killpg(child, NixSignal::SIGCONT);
}
