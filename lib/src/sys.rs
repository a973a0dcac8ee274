//! The few system calls rustix has no wrapper for, and the only place
//! onlyone uses nix: blocking signals and reading them from a signalfd, a
//! signal's default disposition, `posix_spawn(3)`, the kernel's word on
//! whether any child is left, `wait4(2)` (what a reaped child used), signal
//! names, and this process's pid, cached until a fork. Nothing of nix
//! leaves this module. User names are read from `/etc/passwd` here too,
//! never through the C library.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal as NixSignal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

fn nix_signal(sig: i32) -> Option<NixSignal> {
    NixSignal::try_from(sig).ok()
}

fn set_of(signals: &[i32]) -> SigSet {
    let mut set = SigSet::empty();
    for s in signals.iter().filter_map(|&s| nix_signal(s)) {
        set.add(s);
    }
    set
}

/// Signals blocked in the calling thread until this is dropped, which
/// restores the mask it found.
pub(crate) struct Blocked {
    old: SigSet,
}

impl Blocked {
    /// Blocks `signals` in the calling thread.
    pub(crate) fn new(signals: &[i32]) -> io::Result<Blocked> {
        let mut old = SigSet::empty();
        nix::sys::signal::pthread_sigmask(
            SigmaskHow::SIG_BLOCK,
            Some(&set_of(signals)),
            Some(&mut old),
        )?;
        Ok(Blocked { old })
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        let _ = self.old.thread_set_mask();
    }
}

/// A signalfd: the blocked signals it names, read one at a time, never
/// lost between two looks.
pub(crate) struct SignalReader(SignalFd);

impl SignalReader {
    /// A non-blocking signalfd for `signals` (block them first).
    pub(crate) fn new(signals: &[i32]) -> io::Result<SignalReader> {
        Ok(SignalReader(SignalFd::with_flags(
            &set_of(signals),
            SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
        )?))
    }

    /// The next pending signal, if any: its number, and whether it is
    /// `onlyone stop`'s (sent with [`STOP_MARK`], see [`send_marked`]).
    pub(crate) fn next(&self) -> Option<(i32, bool)> {
        match self.0.read_signal() {
            Ok(Some(info)) => Some((
                info.ssi_signo as i32,
                info.ssi_code == libc::SI_QUEUE && info.ssi_int == STOP_MARK,
            )),
            _ => None,
        }
    }
}

/// The value `onlyone stop` (and `run --replace`) queues with the signal
/// it sends a run's wrapper, so that the wrapper records the run as
/// stopped whoever wrote the stop ("oost"). A process that can signal the
/// wrapper could forge it, and could as well kill the run: it gains
/// nothing but the word "stopped".
pub(crate) const STOP_MARK: i32 = 0x6f6f_7374;

/// The `siginfo_t` that `pidfd_send_signal(2)` takes, as the kernel lays
/// it out for `SI_QUEUE` on Linux (signo, errno, code, then the sender's
/// pid and uid and the queued value), padded to its 128 bytes.
#[repr(C)]
struct QueuedInfo {
    signo: i32,
    errno: i32,
    code: i32,
    pad: i32,
    pid: i32,
    uid: u32,
    value: libc::sigval,
    rest: [u8; 128 - 32],
}

/// Sends `sig` through the pidfd `fd` with [`STOP_MARK`] queued with it
/// (`SI_QUEUE`, as `sigqueue(3)` would: a pidfd so that a reused pid is
/// never hit). rustix's `pidfd_send_signal` takes no siginfo.
pub(crate) fn send_marked(fd: BorrowedFd<'_>, sig: i32) -> Result<(), rustix::io::Errno> {
    use std::os::fd::AsRawFd;
    const _: () = assert!(std::mem::size_of::<QueuedInfo>() == 128);
    // The kernel's `si_int` is the first 32 bits of the value.
    let mark = STOP_MARK as u32 as usize;
    let mark = if cfg!(target_endian = "big") {
        mark << (usize::BITS - 32)
    } else {
        mark
    };
    let info = QueuedInfo {
        signo: sig,
        errno: 0,
        code: libc::SI_QUEUE,
        pad: 0,
        pid: std::process::id() as i32,
        uid: rustix::process::getuid().as_raw(),
        value: libc::sigval {
            sival_ptr: mark as *mut libc::c_void,
        },
        rest: [0; 128 - 32],
    };
    // SAFETY: the kernel reads 128 bytes of `info`, which has them, laid
    // out as its siginfo; `fd` is a pidfd this call borrows.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            &info as *const QueuedInfo,
            0u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(
            rustix::io::Errno::from_io_error(&io::Error::last_os_error())
                .unwrap_or(rustix::io::Errno::INVAL),
        )
    }
}

impl AsFd for SignalReader {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Restores a signal's default disposition (an inherited "ignore" of
/// SIGCHLD would have the kernel reap children behind our back).
pub(crate) fn default_disposition(sig: i32) {
    if let Some(s) = nix_signal(sig) {
        // SAFETY: SIG_DFL installs no handler; nothing runs on delivery.
        let _ = unsafe { nix::sys::signal::signal(s, SigHandler::SigDfl) };
    }
}

/// Ignores a signal in this process (a watchdog that only its link's end
/// may end).
pub(crate) fn ignore(sig: i32) {
    if let Some(s) = nix_signal(sig) {
        // SAFETY: SIG_IGN installs no handler; nothing runs on delivery.
        let _ = unsafe { nix::sys::signal::signal(s, SigHandler::SigIgn) };
    }
}

/// Runs `f` with `sig` blocked in the calling thread (SIGTTOU, around a
/// `tcsetpgrp` from a background process group).
pub(crate) fn with_blocked<T>(sig: i32, f: impl FnOnce() -> T) -> T {
    let _blocked = Blocked::new(&[sig]);
    f()
}

/// Starts `path` with `posix_spawn(3)`: in a process group of its own, with
/// an empty signal mask and `defaults` at their default dispositions.
/// Returns its pid once it has exec'd (glibc's posix_spawn reports exec
/// errors itself).
pub(crate) fn spawn(
    path: &CStr,
    args: &[CString],
    env: &[CString],
    defaults: &[i32],
) -> io::Result<u32> {
    use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETPGROUP
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )?;
    attr.set_pgroup(nix::unistd::Pid::from_raw(0))?;
    attr.set_sigmask(&SigSet::empty())?;
    attr.set_sigdefault(&set_of(defaults))?;
    let actions = PosixSpawnFileActions::init()?;
    let pid = nix::spawn::posix_spawn(path, &actions, &attr, args, env)?;
    Ok(pid.as_raw() as u32)
}

/// This process's pid, cached: `getpid(2)` is a system call, and a lock
/// cycle asked for it four times. A fork clears the cache in the child
/// (`pthread_atfork`), so a forked library user gets its own pid.
pub(crate) fn pid() -> rustix::process::Pid {
    use std::sync::atomic::{AtomicI32, Ordering};
    static PID: AtomicI32 = AtomicI32::new(0);
    static HOOK: std::sync::Once = std::sync::Once::new();
    extern "C" fn forked() {
        PID.store(0, Ordering::Relaxed);
    }
    if let Some(p) = rustix::process::Pid::from_raw(PID.load(Ordering::Relaxed)) {
        return p;
    }
    HOOK.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic, which
        // is async-signal-safe, as a handler run in a forked child must be.
        unsafe {
            libc::pthread_atfork(None, None, Some(forked));
        }
    });
    let p = rustix::process::getpid();
    PID.store(p.as_raw_nonzero().get(), Ordering::Relaxed);
    p
}

/// What the kernel says of this process's children (`waitid(P_ALL)`,
/// without reaping; `__WALL`: whatever signal they report their exit with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Children {
    /// It has none at all, live or exited.
    None,
    /// This child has exited and waits to be reaped.
    Exited(u32),
    /// It has live children, and none waiting to be reaped.
    Live,
}

/// Asks the kernel whether any child is left. Unlike the `children` lists
/// of `/proc`, which a child re-parented mid-read may be missing from, the
/// answer is exact at the time of the call.
pub(crate) fn children() -> Children {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags =
        WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT | WaitPidFlag::__WALL;
    loop {
        return match waitid(Id::All, flags) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::ECHILD) => Children::None,
            // Cannot tell: as if some were left, so that they are looked for.
            Err(_) => Children::Live,
            Ok(WaitStatus::StillAlive) => Children::Live,
            Ok(status) => match status.pid() {
                Some(pid) => Children::Exited(pid.as_raw() as u32),
                None => Children::Live,
            },
        };
    }
}

/// How a child that [`wait4`] found is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// It exited with this code (and is reaped).
    Exited(i32),
    /// This signal killed it (and it is reaped).
    Signaled(i32),
    /// This signal stopped it (`untraced` only).
    Stopped(i32),
}

/// Reaps the child `pid` if it has exited (`wait4(2)`, `WNOHANG`; with
/// `untraced`, a stop is reported too): how it is, and what it used, its
/// own reaped descendants included (for a stop, what it used so far).
/// `None` while it runs.
pub(crate) fn wait4(pid: u32, untraced: bool) -> io::Result<Option<(Waited, libc::rusage)>> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::WNOHANG | if untraced { libc::WUNTRACED } else { 0 };
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; both pointers are to
        // locals that outlive the call.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above: the kernel writes only into `status` and `ru`.
        let got = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if got == 0 {
            return Ok(None);
        }
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let waited = if libc::WIFEXITED(status) {
            Waited::Exited(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            Waited::Signaled(libc::WTERMSIG(status))
        } else if libc::WIFSTOPPED(status) {
            Waited::Stopped(libc::WSTOPSIG(status))
        } else {
            // Nothing else is reported without WCONTINUED.
            return Ok(None);
        };
        return Ok(Some((waited, ru)));
    }
}

/// Ends this process as the signal would with its default action (the
/// mask and disposition restored first); returns if that does not end it.
#[cfg_attr(not(feature = "command"), allow(dead_code))]
pub(crate) fn reraise(sig: i32) {
    let Some(s) = nix_signal(sig) else {
        return;
    };
    default_disposition(sig);
    let mut set = SigSet::empty();
    set.add(s);
    let _ = set.thread_unblock();
    let _ = nix::sys::signal::raise(s);
}

/// The number of the signal named `name` (`TERM`, `SIGTERM`).
#[cfg_attr(not(feature = "command"), allow(dead_code))]
pub(crate) fn signal_by_name(name: &str) -> Option<i32> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse::<NixSignal>().ok().map(|s| s as i32)
}

/// The name of signal `sig` without `SIG` (`TERM`).
pub(crate) fn signal_name(sig: i32) -> Option<&'static str> {
    nix_signal(sig).map(|s| s.as_str().trim_start_matches("SIG"))
}

/// The passwd file [`user_name`] reads.
const PASSWD: &str = "/etc/passwd";

/// The most of the passwd file that is read: names are for messages, and a
/// lookup must stay cheap and bounded whatever the file holds.
const MAX_PASSWD_BYTES: u64 = 8 << 20;

/// A user's name from `/etc/passwd`, or `None` when it has no entry (or the
/// file cannot be read).
///
/// Not through the C library's user database: `getpwuid(3)` follows
/// `nsswitch.conf`, which loads modules (`nss_systemd`, `sss`, `ldap`) with
/// `dlopen`, and a statically linked binary that does so crashes. A name is
/// only ever shown to people, so a user known only to a directory service
/// is shown by number.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(PASSWD).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_PASSWD_BYTES).read_to_end(&mut text).ok()?;
    name_in_passwd(&text, uid)
}

/// The name of the first well-formed entry for `uid` in a passwd file's
/// text (`name:password:uid:gid:gecos:home:shell`), as the C library's
/// `files` source reads it; malformed lines and NIS markers (`+`, `-`) are
/// skipped.
fn name_in_passwd(text: &[u8], uid: u32) -> Option<String> {
    const MAX_NAME: usize = 256;
    text.split(|&b| b == b'\n').find_map(|line| {
        let mut fields = line.split(|&b| b == b':');
        let name = fields.next()?;
        let _password = fields.next()?;
        let id = std::str::from_utf8(fields.next()?).ok()?;
        let usable = !name.is_empty()
            && name.len() <= MAX_NAME
            && !name.starts_with(b"+")
            && !name.starts_with(b"-")
            && name.iter().all(|&b| b.is_ascii_graphic() || b >= 0x80);
        if !usable || id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        (id.parse::<u32>().ok()? == uid)
            .then(|| String::from_utf8(name.to_vec()).ok())
            .flatten()
    })
}

/// Now on the boot clock (`CLOCK_BOOTTIME`: counts a suspend, never set
/// back), nanoseconds.
pub fn boot_ns() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_well_formed_passwd_lines() {
        let text = b"root:x:0:0:root:/root:/bin/bash\n\
            broken line\n\
            +::::::\n\
            :x:7:7::/:/bin/sh\n\
            neg:x:-1:0::/:/bin/sh\n\
            big:x:99999999999:0::/:/bin/sh\n\
            short:x\n\
            esc\x1b[31m:x:8:8::/:/bin/sh\n\
            backup:x:34:34:backup:/var/backups:/usr/sbin/nologin\n\
            again:x:34:34::/:/bin/sh\n\
            last:x:1000";
        assert_eq!(name_in_passwd(text, 0).as_deref(), Some("root"));
        assert_eq!(name_in_passwd(text, 34).as_deref(), Some("backup"));
        assert_eq!(name_in_passwd(text, 1000).as_deref(), Some("last"));
        for uid in [7, 8, 4242, u32::MAX] {
            assert_eq!(name_in_passwd(text, uid), None, "uid {uid}");
        }
        assert_eq!(name_in_passwd(b"", 0), None);
        assert_eq!(name_in_passwd(&[0xff; 64], 0), None);
    }

    #[test]
    fn the_cached_pid_is_the_forked_childs_own() {
        let parent = pid();
        assert_eq!(parent, rustix::process::getpid());
        // SAFETY: the child calls only getpid, atomics and _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let ok = pid() == rustix::process::getpid() && pid() != parent;
            // SAFETY: ends the forked child without running the parent's
            // destructors or test harness.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        assert!(child > 0, "fork failed");
        let mut status = 0;
        // SAFETY: waits for the child this test forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(pid(), parent);
    }
}
