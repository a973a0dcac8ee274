//! Process identity and liveness, read from `/proc`.
//!
//! A process is identified by its pid *and* its start time (field 22 of
//! `/proc/PID/stat`, clock ticks since boot) within one boot (the kernel's
//! random `boot_id`). A pid alone is not an identity: pids are reused.
//!
//! - `/proc/PID/stat` is split at the *last* `)`, because the command name in
//!   field 2 may itself contain spaces and `)`.
//! - A zombie (state `Z`) or a dead task (`X`) answers `kill(pid, 0)` but is
//!   not alive.
//! - `kill(pid, 0)` is the fallback when `/proc/PID` cannot be read (a
//!   `hidepid` mount): EPERM means alive. It is never called with a pid
//!   outside `1..=pid_max`, because `kill(0, 0)` and `kill(-1, 0)` answer for
//!   a whole group of processes.
//!
//! Values that never change while a process lives (the boot id, `pid_max`,
//! the clock tick rate, this process's own identity) are read once and
//! cached.
//!
//! What makes a process one of a run's (the token, the group, the census)
//! is [`crate::lock::members`]'s; the namespaces, the time offsets and the
//! `hidepid` scan are in `ns`.

use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, OnceLock};

use rustix::process::Pid;

mod ns;
#[cfg(test)]
mod tests;

// The initial namespace's inode, for the fuzzers (the `test-hooks` feature).
#[cfg(feature = "test-hooks")]
pub use ns::INIT_PIDNS;
pub use ns::{
    NsSeen, own_boottime_offset_ns, own_pidns, own_timens, pidns_members, proc_hides_processes,
    usable,
};

/// The highest pid this kernel hands out (`/proc/sys/kernel/pid_max`).
pub fn pid_max() -> u32 {
    static PID_MAX: OnceLock<u32> = OnceLock::new();
    *PID_MAX.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            // PID_MAX_LIMIT on 64-bit Linux: no pid is ever above it.
            .unwrap_or(4_194_304)
    })
}

/// The current boot's id (`/proc/sys/kernel/random/boot_id`).
pub fn boot_id() -> io::Result<&'static str> {
    static BOOT: OnceLock<Result<String, io::ErrorKind>> = OnceLock::new();
    match BOOT.get_or_init(|| {
        // 37 bytes: one read, where reading to the end would take four
        // calls more.
        let mut buf = [0u8; 64];
        match read_small("/proc/sys/kernel/random/boot_id", &mut buf) {
            Ok(n) => match std::str::from_utf8(&buf[..n]).map(str::trim) {
                Ok(s) if is_boot_id(s) => Ok(s.to_owned()),
                _ => Err(io::ErrorKind::InvalidData),
            },
            Err(e) => Err(e.kind()),
        }
    }) {
        Ok(s) => Ok(s.as_str()),
        Err(kind) => Err(io::Error::new(
            *kind,
            "cannot read this boot's id from /proc/sys/kernel/random/boot_id (is /proc mounted?)",
        )),
    }
}

/// True for a boot id as the kernel writes it: a UUID in lowercase,
/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. A truncated one is not one: it
/// must never compare as "another boot".
pub fn is_boot_id(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        })
}

/// The time the system booted, in Unix seconds (`btime` in `/proc/stat`).
pub fn boot_time() -> Option<u64> {
    static BTIME: OnceLock<Option<u64>> = OnceLock::new();
    *BTIME.get_or_init(|| {
        let stat = fs::read_to_string("/proc/stat").ok()?;
        stat.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Clock ticks per second, the unit of process start times.
pub fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| rustix::param::clock_ticks_per_second().max(1))
}

/// Converts a start time in clock ticks since boot to Unix seconds.
pub fn start_to_unix(start_ticks: u64) -> Option<u64> {
    boot_time().and_then(|b| b.checked_add(start_ticks / clock_ticks()))
}

/// The fields of `/proc/PID/stat` that onlyone uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 2, without the parentheses.
    pub comm: String,
    /// Field 3: `R`, `S`, `D`, `Z`, `T`, `X`, ...
    pub state: char,
    /// Field 4.
    pub ppid: u32,
    /// Field 5: the process group.
    pub pgrp: u32,
    /// Field 6: the session.
    pub session: u32,
    /// Field 7: the controlling terminal's device number; 0 for none.
    pub tty: u32,
    /// Field 9: the kernel's flags for the process (`PF_*`).
    pub flags: u64,
    /// Fields 14 and 15: user and system CPU time, in clock ticks.
    pub cpu_ticks: u64,
    /// Field 22: start time in clock ticks since boot.
    pub start: u64,
    /// Fields 48-51: where its arguments and environment sit in memory.
    /// `None` when they are not shown (a zombie, a kernel thread, another
    /// user's process, a kernel older than 3.5).
    pub image: Option<Image>,
}

/// Where a process's arguments and environment sit in its memory
/// (`/proc/PID/stat` fields 48-51). `exec` places them afresh, at an
/// address the kernel randomises; `fork` copies them. A process with the
/// owner's image, started after it, is therefore the owner's fork that has
/// not exec'd: a subshell worker of a script, or a worker between its fork
/// and its exec, whose environment does not carry the token the script
/// exported (a shell's exports reach a process only through an exec).
/// Any process may also be given any image on purpose (`prctl(PR_SET_MM,
/// PR_SET_MM_MAP)`, unprivileged): an image speaks only for processes of
/// the record's own user (`RunSpec::may_carry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Image {
    /// Field 48, `arg_start`.
    pub arg_start: u64,
    /// Field 49, `arg_end`.
    pub arg_end: u64,
    /// Field 50, `env_start`.
    pub env_start: u64,
    /// Field 51, `env_end`.
    pub env_end: u64,
}

impl std::fmt::Display for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:x}-{:x}:{:x}-{:x}",
            self.arg_start, self.arg_end, self.env_start, self.env_end
        )
    }
}

impl std::str::FromStr for Image {
    type Err = ();

    /// Parses what `Display` writes: `ARGSTART-ARGEND:ENVSTART-ENVEND`, hex.
    fn from_str(s: &str) -> Result<Image, ()> {
        let (args, env) = s.split_once(':').ok_or(())?;
        let range = |r: &str| -> Result<(u64, u64), ()> {
            let (a, b) = r.split_once('-').ok_or(())?;
            let hex = |h: &str| {
                if h.is_empty() || h.len() > 16 || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return Err(());
                }
                u64::from_str_radix(h, 16).map_err(|_| ())
            };
            Ok((hex(a)?, hex(b)?))
        };
        let (arg_start, arg_end) = range(args)?;
        let (env_start, env_end) = range(env)?;
        Image::new(arg_start, arg_end, env_start, env_end).ok_or(())
    }
}

impl Image {
    /// An image from its four addresses; `None` when they are not shown
    /// (all zero) or are not two ordered ranges.
    pub fn new(arg_start: u64, arg_end: u64, env_start: u64, env_end: u64) -> Option<Image> {
        (arg_start != 0 && arg_start <= arg_end && env_start != 0 && env_start <= env_end)
            .then_some(Image {
                arg_start,
                arg_end,
                env_start,
                env_end,
            })
    }

    /// The image of a process, only when the kernel randomises where an
    /// exec places it (`kernel.randomize_va_space` not 0, and the process
    /// not run with `setarch -R`): without that, unrelated processes of one
    /// program can share an image.
    pub fn of_randomised(pid: u32) -> Option<Image> {
        let mut buf = [0u8; 64];
        let n = read_small("/proc/sys/kernel/randomize_va_space", &mut buf).ok()?;
        if std::str::from_utf8(&buf[..n]).ok()?.trim() == "0" {
            return None;
        }
        let n = read_small(&format!("/proc/{pid}/personality"), &mut buf).ok()?;
        let persona = u64::from_str_radix(std::str::from_utf8(&buf[..n]).ok()?.trim(), 16).ok()?;
        // ADDR_NO_RANDOMIZE, from <sys/personality.h>.
        const ADDR_NO_RANDOMIZE: u64 = 0x0040000;
        if persona & ADDR_NO_RANDOMIZE != 0 {
            return None;
        }
        read_stat(pid).ok()??.image
    }
}

/// `PF_KTHREAD`: the process is a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;
/// `PF_EXITING`: the process is in exit(2). It is set before the process
/// lets go of its memory, and the process closes its files (and so lets go
/// of its flocks and record locks) only after that.
const PF_EXITING: u64 = 0x0000_0004;

impl ProcStat {
    /// True for a kernel thread: it has no environment and runs no command.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    /// True when the *main thread* is a zombie or being torn down. The
    /// process may still have live threads: see [`is_dead_process`]. A task
    /// in exit(2) that is not a zombie yet still holds its files and counts
    /// as alive.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// True while the process is in exit(2) and not a zombie yet: it runs
    /// no more code of its own, but may still hold its files. Once its
    /// memory is gone, its environment reads as empty and its image as
    /// `None`: what it carried can no longer be read.
    pub fn is_exiting(&self) -> bool {
        self.flags & PF_EXITING != 0 && !self.is_dead()
    }
}

/// Waits until `id`, a process in exit(2), has finished exiting (it is a
/// zombie, or gone, or its pid is another process's), polling `/proc`
/// until `until`. True when it has: its files, and the locks they held,
/// are closed.
pub fn wait_exited(id: ProcId, until: std::time::Instant) -> bool {
    let mut pause = std::time::Duration::from_micros(200);
    loop {
        match read_stat(id.pid) {
            Ok(Some(st)) if st.start == id.start && !is_dead_process(id.pid, &st) => {}
            Ok(_) => return true,
            Err(_) => return false,
        }
        let now = std::time::Instant::now();
        if now >= until {
            return false;
        }
        std::thread::sleep(pause.min(until - now));
        pause = (pause * 2).min(std::time::Duration::from_millis(20));
    }
}

/// True when process `pid`, whose main thread reads as dead in `stat`, has
/// no live thread either. A process whose main thread called
/// `pthread_exit` shows `Z` in `/proc/PID/stat` while its other threads
/// work on.
pub fn is_dead_process(pid: u32, stat: &ProcStat) -> bool {
    if !stat.is_dead() {
        return false;
    }
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    !tasks.flatten().any(|t| {
        let mut buf = [0u8; 1024];
        let path = t.path().join("stat");
        read_small(&path.to_string_lossy(), &mut buf)
            .ok()
            .and_then(|n| parse_stat(&String::from_utf8_lossy(&buf[..n])))
            .is_some_and(|st| !st.is_dead())
    })
}

/// Parses the text of `/proc/PID/stat`. The command name is taken between
/// the first `(` and the *last* `)`, and the remaining fields are counted
/// after that `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let comm = text[open + 1..close].to_owned();
    // The fields after the name, from field 3, read in one pass: a census
    // parses one line per process on the host.
    let mut f = text[close + 1..].split_ascii_whitespace();
    let signed =
        |v: Option<&str>| -> Option<u32> { Some(v?.parse::<i64>().ok()?.try_into().unwrap_or(0)) };
    let num = |v: Option<&str>| v?.parse::<u64>().ok();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = signed(f.next())?;
    let session = signed(f.next())?;
    let tty = signed(f.next())?;
    let flags = num(f.nth(1))?; // field 9
    let utime = num(f.nth(4))?; // field 14
    let cpu_ticks = utime.checked_add(num(f.next())?)?;
    let start = num(f.nth(6))?; // field 22
    let mut image = [0u64; 4]; // fields 48-51
    image[0] = num(f.nth(25)).unwrap_or(0);
    for v in &mut image[1..] {
        *v = num(f.next()).unwrap_or(0);
    }
    Some(ProcStat {
        comm,
        state,
        ppid,
        pgrp,
        session,
        tty,
        flags,
        cpu_ticks,
        start,
        image: Image::new(image[0], image[1], image[2], image[3]),
    })
}

/// Reads `/proc/PID/stat`. `Ok(None)` when there is no such process.
pub fn read_stat(pid: u32) -> io::Result<Option<ProcStat>> {
    let mut buf = [0u8; 1024];
    let n = match read_small(&format!("/proc/{pid}/stat"), &mut buf) {
        Ok(n) => n,
        Err(e) if is_gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let text = String::from_utf8_lossy(&buf[..n]);
    parse_stat(&text).map(Some).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("cannot parse /proc/{pid}/stat"),
        )
    })
}

pub(crate) fn is_gone(e: &io::Error) -> bool {
    let code = e.raw_os_error();
    code == Some(rustix::io::Errno::NOENT.raw_os_error())
        || code == Some(rustix::io::Errno::SRCH.raw_os_error())
}

/// Reads a small `/proc` file. Its files are produced whole on the first
/// read, so a read that does not fill the buffer is the end: no second
/// read(2) just to see end of file (it counts in every /proc scan).
fn read_small(path: &str, buf: &mut [u8]) -> io::Result<usize> {
    let mut f = fs::File::open(path)?;
    let mut total = 0;
    while total < buf.len() {
        let n = f.read(&mut buf[total..])?;
        total += n;
        if n == 0 || total < buf.len() {
            break;
        }
    }
    Ok(total)
}

/// What `kill(pid, 0)` says. The pid must be in `1..=pid_max`; anything
/// else is never probed and reads as gone.
pub fn kill_probe(pid: u32) -> bool {
    if pid == 0 || pid > pid_max() {
        return false;
    }
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    match rustix::process::test_kill_process(p) {
        Ok(()) => true,
        Err(rustix::io::Errno::PERM) => true,
        Err(_) => false,
    }
}

/// A process: its pid *and* its start time (field 22 of `/proc/PID/stat`,
/// clock ticks since boot, on this process's clock), within the current
/// boot. A pid alone is not an identity: pids are reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcId {
    /// The pid.
    pub pid: u32,
    /// The start time, clock ticks since boot.
    pub start: u64,
}

impl ProcId {
    /// The identity of the live process that has `pid` now.
    pub fn of(pid: u32) -> Option<ProcId> {
        if pid == 0 || pid > pid_max() {
            return None;
        }
        let st = read_stat(pid).ok().flatten()?;
        (!is_dead_process(pid, &st)).then_some(ProcId {
            pid,
            start: st.start,
        })
    }

    /// Whether it is alive: the same pid with the same start time, and
    /// not a zombie.
    pub fn probe(self) -> Probe {
        probe(self.pid, Some(self.start))
    }

    /// True while it is alive ([`ProcId::probe`]).
    pub fn is_alive(self) -> bool {
        self.probe().is_alive()
    }
}

/// `PID-START`, as the reaper's state names processes.
impl std::fmt::Display for ProcId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.pid, self.start)
    }
}

impl std::str::FromStr for ProcId {
    type Err = ();

    fn from_str(s: &str) -> Result<ProcId, ()> {
        let (pid, start) = s.split_once('-').ok_or(())?;
        Ok(ProcId {
            pid: pid.parse().map_err(|_| ())?,
            start: start.parse().map_err(|_| ())?,
        })
    }
}

/// The answer to "is the process with this pid (and start time) alive?"
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Alive, with its start time checked (or no start time to check).
    Alive,
    /// `kill(pid, 0)` answers (EPERM or success) but `/proc/PID` is hidden,
    /// so the start time could not be checked. Counted as alive: better to
    /// refuse than to clobber.
    AliveUnverified,
    /// No process has that pid.
    Exited,
    /// The pid now belongs to a process that started at another time.
    Reused {
        /// The start time of the process that has the pid now.
        now: u64,
    },
    /// The process is a zombie: it has exited and waits to be reaped.
    Zombie,
}

impl Probe {
    /// Alive in any form.
    pub fn is_alive(&self) -> bool {
        matches!(self, Probe::Alive | Probe::AliveUnverified)
    }
}

/// Probes a pid, checking its start time when one is given.
pub fn probe(pid: u32, start: Option<u64>) -> Probe {
    if pid == 0 || pid > pid_max() {
        return Probe::Exited;
    }
    match read_stat(pid) {
        Ok(Some(st)) => {
            if is_dead_process(pid, &st) {
                Probe::Zombie
            } else if start.is_some_and(|s| s != st.start) {
                Probe::Reused { now: st.start }
            } else {
                Probe::Alive
            }
        }
        // No /proc entry: gone, unless /proc hides it from us (hidepid).
        Ok(None) | Err(_) => {
            if kill_probe(pid) {
                Probe::AliveUnverified
            } else {
                Probe::Exited
            }
        }
    }
}

/// The inode number of a process's PID namespace.
pub fn pidns_of(pid: u32) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(fs::metadata(format!("/proc/{pid}/ns/pid"))?.ino())
}

/// The inode of the pipe that a process's descriptor `fd` is, if it is
/// one (`/proc/PID/fd/FD` reads `pipe:[INODE]`).
pub fn pipe_of(pid: u32, fd: u32) -> Option<u64> {
    let target = fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    let text = target.to_str()?;
    text.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok()
}

/// True when process `pid` holds the read end of the pipe `inode` (a
/// descriptor on it opened read-only, per `/proc/PID/fdinfo`).
pub fn reads_pipe(pid: u32, inode: u64) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        let Some(n) = fd.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            return false;
        };
        pipe_of(pid, n) == Some(inode)
            && fs::read_to_string(format!("/proc/{pid}/fdinfo/{n}")).is_ok_and(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                    .is_some_and(|flags| flags & 0o3 == 0)
            })
    })
}

/// A process's command line for display, or its `comm` if the command line
/// is empty (kernel threads, zombies) or unreadable.
pub fn command_line(pid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    let n = read_small(&format!("/proc/{pid}/cmdline"), &mut buf).unwrap_or(0);
    let args: Vec<&std::ffi::OsStr> = buf[..n]
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(std::ffi::OsStr::from_bytes)
        .collect();
    if !args.is_empty() {
        return Some(crate::text::display_command(&args));
    }
    read_stat(pid)
        .ok()
        .flatten()
        .map(|s| format!("[{}]", s.comm))
}

/// A process identity: pid and start time within the current boot, plus
/// what is recorded about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The process.
    pub id: ProcId,
    /// The PID namespace inode.
    pub pidns: Option<u64>,
    /// The effective user id (from `/proc/PID/status` for others).
    pub uid: Option<u32>,
    /// The command line, for display (`None` in [`own_identity`]: see
    /// [`own_command_line`]).
    pub cmd: Option<String>,
}

/// Reads the identity of another live process.
pub fn identity_of(pid: u32) -> io::Result<Identity> {
    let not_running = || {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("pid {pid} is not a running process"),
        )
    };
    if pid == 0 || pid > pid_max() {
        return Err(not_running());
    }
    let st = read_stat(pid)?.ok_or_else(not_running)?;
    if is_dead_process(pid, &st) {
        return Err(not_running());
    }
    use std::os::unix::fs::MetadataExt;
    let uid = fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid());
    Ok(Identity {
        id: ProcId {
            pid,
            start: st.start,
        },
        pidns: pidns_of(pid).ok(),
        uid,
        cmd: command_line(pid),
    })
}

/// This process's identity, read once per process (it is re-read after a
/// fork, when the pid changes).
pub fn own_identity() -> io::Result<Identity> {
    static OWN: Mutex<Option<Identity>> = Mutex::new(None);
    let pid = crate::sys::pid().as_raw_nonzero().get() as u32;
    let mut cached = OWN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(id) = cached.as_ref().filter(|id| id.id.pid == pid) {
        return Ok(id.clone());
    }
    let st = read_stat(pid)?.ok_or_else(|| io::Error::other("cannot read /proc/self/stat"))?;
    let id = Identity {
        id: ProcId {
            pid,
            start: st.start,
        },
        pidns: pidns_of(pid).ok(),
        uid: Some(rustix::process::geteuid().as_raw()),
        // Read on demand: see `own_command_line` (a run records its
        // command's line, not its own).
        cmd: None,
    };
    *cached = Some(id.clone());
    Ok(id)
}

/// This process's command line, for display; read once per process.
pub fn own_command_line() -> Option<String> {
    static OWN: Mutex<Option<(u32, Option<String>)>> = Mutex::new(None);
    let pid = crate::sys::pid().as_raw_nonzero().get() as u32;
    let mut cached = OWN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((p, cmd)) = cached.as_ref()
        && *p == pid
    {
        return cmd.clone();
    }
    let cmd = command_line(pid);
    *cached = Some((pid, cmd.clone()));
    cmd
}

/// This host's name.
pub fn host_name() -> String {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned()
    })
    .clone()
}

/// A process group, and the start time of its leader when it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The group id: its leader's pid.
    pub pgid: u32,
    /// The leader's start time.
    pub leader_start: Option<u64>,
}

/// Lists the live pids in `/proc`.
pub fn all_pids() -> io::Result<Vec<u32>> {
    let mut pids = Vec::with_capacity(512);
    for entry in fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        if let Some(pid) = std::str::from_utf8(entry.file_name().as_bytes())
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
        {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// The children of a process: every thread's `children` list (a process
/// whose creating thread exited is still listed under the thread group).
/// Where the kernel has no such list (built without `CONFIG_PROC_CHILDREN`),
/// one pass over every process's parent.
pub fn children_of(pid: u32) -> Vec<u32> {
    if !has_children_lists() {
        return parents().remove(&pid).unwrap_or_default();
    }
    let mut out = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let mut buf = [0u8; 4096];
        let path = task.path().join("children");
        // A long list does not fit a fixed buffer: read it all then.
        let text = match read_small(&path.to_string_lossy(), &mut buf) {
            Ok(n) if n < buf.len() => String::from_utf8_lossy(&buf[..n]).into_owned(),
            Ok(_) => fs::read_to_string(&path).unwrap_or_default(),
            Err(_) => continue,
        };
        out.extend(
            text.split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether the kernel lists each thread's children in `/proc`.
fn has_children_lists() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| fs::metadata("/proc/thread-self/children").is_ok())
}

/// Every process's children, from one pass over `/proc` (the fallback
/// where the kernel keeps no children lists).
fn parents() -> std::collections::HashMap<u32, Vec<u32>> {
    let mut map: std::collections::HashMap<u32, Vec<u32>> = std::collections::HashMap::new();
    for pid in all_pids().unwrap_or_default() {
        if let Ok(Some(st)) = read_stat(pid) {
            map.entry(st.ppid).or_default().push(pid);
        }
    }
    map
}

/// The live descendants of `pid` (not itself), with their start times:
/// children, their children, and so on, except the subtrees of the
/// children named in `except`. Zombies and kernel threads are left out.
/// Found in proportion to the tree, not to the host (one pass over `/proc`
/// where the kernel keeps no children lists).
pub fn descendants_of(pid: u32, except: &[u32]) -> Vec<ProcId> {
    let tree = (!has_children_lists()).then(parents);
    let children = |p: u32| match &tree {
        Some(t) => t.get(&p).cloned().unwrap_or_default(),
        None => children_of(p),
    };
    let mut out: Vec<ProcId> = Vec::new();
    let mut todo = children(pid);
    todo.retain(|c| !except.contains(c));
    while let Some(p) = todo.pop() {
        if out.iter().any(|q| q.pid == p) {
            continue;
        }
        let Ok(Some(st)) = read_stat(p) else {
            continue;
        };
        if st.is_kernel_thread() || is_dead_process(p, &st) {
            continue;
        }
        out.push(ProcId {
            pid: p,
            start: st.start,
        });
        todo.extend(children(p));
    }
    out
}

/// The I/O totals of a process: `rchar + wchar` from `/proc/PID/io` (every
/// byte read or written through a system call, terminals and pipes
/// included). `None` when it cannot be read (another user's process,
/// without privilege).
pub fn io_bytes(pid: u32) -> Option<u64> {
    let mut buf = [0u8; 1024];
    let n = read_small(&format!("/proc/{pid}/io"), &mut buf).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    field("rchar:")?.checked_add(field("wchar:")?)
}

/// The values of the given variables in a process's initial environment
/// (`None` for one that is not set). `None` when the environment cannot be
/// read.
pub fn environ_values(pid: u32, names: &[&str]) -> Option<Vec<Option<String>>> {
    let mut data = Vec::with_capacity(8192);
    fs::File::open(format!("/proc/{pid}/environ"))
        .ok()?
        .take(1 << 20)
        .read_to_end(&mut data)
        .ok()?;
    let mut out = vec![None; names.len()];
    for entry in data.split(|&b| b == 0) {
        for (i, name) in names.iter().enumerate() {
            if out[i].is_none()
                && entry.len() > name.len()
                && entry.starts_with(name.as_bytes())
                && entry[name.len()] == b'='
            {
                out[i] = Some(String::from_utf8_lossy(&entry[name.len() + 1..]).into_owned());
            }
        }
    }
    Some(out)
}

/// Whether a process's initial environment holds `name=value`. `None` when
/// the environment cannot be read (another user's process, without
/// privilege).
pub fn environ_has(pid: u32, name: &str, value: &str) -> Option<bool> {
    match environ_check(pid, name, value) {
        Environ::Has(b) => Some(b),
        Environ::Gone | Environ::Denied => None,
    }
}

/// What reading a process's environment for a variable found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environ {
    /// Read: whether it holds the variable with that value.
    Has(bool),
    /// The process is gone or exiting (its memory is already released).
    Gone,
    /// Not readable by this user (another user's, or non-dumpable).
    Denied,
}

/// Reads `/proc/PID/environ` for `name=value`, telling a process that is
/// gone from one that may not be read.
pub fn environ_check(pid: u32, name: &str, value: &str) -> Environ {
    let classify = |e: io::Error| {
        if is_gone(&e) {
            Environ::Gone
        } else {
            Environ::Denied
        }
    };
    // The environment block is bounded by the kernel's ARG_MAX budget; read
    // at most 1 MiB of it.
    let mut data = Vec::with_capacity(8192);
    let mut f = match fs::File::open(format!("/proc/{pid}/environ")) {
        Ok(f) => f,
        Err(e) => return classify(e),
    };
    if let Err(e) = (&mut f).take(1 << 20).read_to_end(&mut data) {
        return classify(e);
    }
    let found = data.split(|&b| b == 0).any(|entry| {
        entry.len() == name.len() + 1 + value.len()
            && entry.starts_with(name.as_bytes())
            && entry[name.len()] == b'='
            && entry.ends_with(value.as_bytes())
    });
    Environ::Has(found)
}

/// The real uid of a process (`Uid:` in `/proc/PID/status`, readable by
/// anyone).
pub fn uid_of(pid: u32) -> Option<u32> {
    let mut buf = [0u8; 4096];
    let n = read_small(&format!("/proc/{pid}/status"), &mut buf).ok()?;
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Whether a process runs as `uid`: any of its real, effective, saved and
/// filesystem uids (`Uid:` in `/proc/PID/status`) is `uid`. A setuid
/// program keeps its caller's real uid, so it is its caller's too. `None`
/// when it cannot be told: the process is gone, or `/proc` hides it
/// (`hidepid`).
pub fn runs_as(pid: u32, uid: u32) -> Option<bool> {
    let mut buf = [0u8; 4096];
    match read_small(&format!("/proc/{pid}/status"), &mut buf) {
        Ok(n) => {
            let text = String::from_utf8_lossy(&buf[..n]);
            let line = text.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            let mut any = false;
            for v in line.split_whitespace() {
                any = true;
                if v.parse::<u32>().ok()? == uid {
                    return Some(true);
                }
            }
            any.then_some(false)
        }
        // Gone, or hidden (`hidepid=invisible` answers ENOENT too): even a
        // process of this very user may be hidden from it (a setgid or
        // non-dumpable one), so that cannot be told.
        Err(_) => None,
    }
}

/// The processes that hold a flock on the file `dev`:`ino`, from
/// `/proc/locks` (each with whether its lock is exclusive), in this
/// process's PID numbering; waiters are not holders. Read only when a
/// flock is the last evidence left, so its cost (a line per lock on the
/// host) is off the common path.
pub fn flock_holders(dev: u64, ino: u64) -> Vec<(u32, bool)> {
    let Ok(text) = fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    let file = format!(
        "{:02x}:{:02x}:{ino}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev)
    );
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF"; a waiter
            // has "->" after the number.
            match f.as_slice() {
                [_, "FLOCK", _, kind, pid, at, ..] if *at == file => {
                    Some((pid.parse().ok()?, *kind == "WRITE"))
                }
                _ => None,
            }
        })
        .collect()
}

/// True when the process is stopped (state `T` or `t`: job control,
/// SIGSTOP, a tracer).
pub fn is_stopped(pid: u32) -> bool {
    read_stat(pid)
        .ok()
        .flatten()
        .is_some_and(|st| matches!(st.state, 'T' | 't'))
}

/// The systemd cgroup of a process, from `/proc/PID/cgroup` (readable for
/// every process, a non-dumpable one included): the `name=systemd`
/// hierarchy's path where there is one (cgroup v1 and hybrid), else the
/// unified hierarchy's (`0::`).
pub fn systemd_cgroup(pid: u32) -> Option<String> {
    let mut buf = [0u8; 8192];
    let n = read_small(&format!("/proc/{pid}/cgroup"), &mut buf).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let path = |prefix: &str| {
        text.lines()
            .find_map(|l| {
                l.split_once(':')
                    .and_then(|(_, rest)| rest.strip_prefix(prefix))
            })
            .map(str::to_owned)
    };
    path("name=systemd:").or_else(|| path(":"))
}
