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

use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, OnceLock};

use rustix::process::Pid;

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

fn is_gone(e: &io::Error) -> bool {
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

/// Checks that `/proc` shows this process as it is: its own stat is
/// readable and names its own pid. Checked once per process.
pub fn usable() -> Result<(), String> {
    static OK: OnceLock<Result<(), String>> = OnceLock::new();
    OK.get_or_init(|| {
        let pid = crate::sys::pid().as_raw_nonzero().get() as u32;
        match read_stat(pid) {
            Ok(Some(st)) if !st.is_dead() => {}
            Ok(_) => return Err(format!("/proc/{pid} (this process) is missing")),
            Err(e) => return Err(format!("/proc/{pid}/stat cannot be read: {e}")),
        }
        match fs::read_link("/proc/self") {
            Ok(p) if p.as_os_str() == pid.to_string().as_str() => Ok(()),
            Ok(p) => Err(format!(
                "/proc/self is {}, not this process ({pid}): /proc belongs to another PID \
                 namespace",
                p.display()
            )),
            Err(e) => Err(format!("/proc/self cannot be read: {e}")),
        }
    })
    .clone()
}

/// What a search of `/proc` found of a PID namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsSeen {
    /// This process is in it.
    Alive(u32),
    /// No process has it, and every process could be checked.
    Gone,
    /// Not found, but absence is no proof: this many processes could not
    /// be checked, or this process runs in a nested PID namespace, which
    /// does not see the processes of its parent's or its siblings'.
    Unseen {
        /// How many processes could not be checked.
        unreadable: usize,
        /// True when this process is not in the host's (initial) PID
        /// namespace.
        nested: bool,
    },
}

/// The inode of the initial PID namespace (the kernel's
/// `PROC_PID_INIT_INO`): a process in it sees every process of the host.
pub const INIT_PIDNS: u64 = 0xEFFF_FFFC;

/// Looks for a process whose PID namespace (`/proc/PID/ns/pid`) is the
/// one with inode `ns`, which is not ours. Absence proves the namespace
/// gone only from the initial namespace, with every process checked.
pub fn pidns_members(ns: u64) -> NsSeen {
    let nested = own_pidns() != Some(INIT_PIDNS);
    let Ok(pids) = all_pids() else {
        return NsSeen::Unseen {
            unreadable: 0,
            nested,
        };
    };
    let mut unreadable = 0;
    for pid in pids {
        match pidns_of(pid) {
            Ok(n) if n == ns => return NsSeen::Alive(pid),
            Ok(_) => {}
            Err(e) if is_gone(&e) => {}
            // Not ptrace-readable (another user's, or non-dumpable, like
            // init): /proc/PID/status, readable by all, still says whether
            // it runs in a nested namespace at all (one `NSpid` per level).
            Err(_) if nspid_levels(pid) == Some(1) => {}
            Err(_) => unreadable += 1,
        }
    }
    if unreadable == 0 && !nested {
        NsSeen::Gone
    } else {
        NsSeen::Unseen { unreadable, nested }
    }
}

/// How many PID namespaces, from this one down, a process is in (the
/// `NSpid:` line of `/proc/PID/status`).
fn nspid_levels(pid: u32) -> Option<usize> {
    let mut buf = [0u8; 4096];
    let n = read_small(&format!("/proc/{pid}/status"), &mut buf).ok()?;
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|v| v.split_whitespace().count())
}

/// The inode of this process's time namespace (`/proc/self/ns/time`;
/// `None` before Linux 5.6, which has none).
pub fn own_timens() -> Option<u64> {
    static NS: OnceLock<Option<u64>> = OnceLock::new();
    *NS.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata("/proc/self/ns/time").ok().map(|m| m.ino())
    })
}

/// The inode of the host's own (initial) time namespace, as the kernel
/// numbers it (`PROC_TIME_INIT_INO` in `include/linux/proc_ns.h`).
const INITIAL_TIMENS_INODE: u64 = 0xEFFF_FFFA;

/// This process's time namespace boot-time offset, nanoseconds (the
/// `boottime` line of `/proc/self/timens_offsets`; 0 without one).
pub fn own_boottime_offset_ns() -> i64 {
    static OFF: OnceLock<i64> = OnceLock::new();
    *OFF.get_or_init(|| {
        // The host's own time namespace has no offsets, and its inode is
        // fixed (`PROC_TIME_INIT_INO`; a namespace made later gets one from
        // 0xF0000000 up): no need to read them there.
        if own_timens() == Some(INITIAL_TIMENS_INODE) {
            return 0;
        }
        // Two short lines: one read.
        let mut buf = [0u8; 256];
        read_small("/proc/self/timens_offsets", &mut buf)
            .ok()
            .and_then(|n| std::str::from_utf8(&buf[..n]).ok())
            .and_then(|text| {
                text.lines().find_map(|l| {
                    let mut f = l.split_whitespace();
                    (f.next()? == "boottime").then_some(())?;
                    let secs: i64 = f.next()?.parse().ok()?;
                    let nanos: i64 = f.next()?.parse().ok()?;
                    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
                })
            })
            .unwrap_or(0)
    })
}

/// The pid namespace of this process.
pub fn own_pidns() -> Option<u64> {
    static NS: OnceLock<Option<u64>> = OnceLock::new();
    *NS.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
    })
}

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

/// A process group, and the start time of its leader when it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The group id: its leader's pid.
    pub pgid: u32,
    /// The leader's start time.
    pub leader_start: Option<u64>,
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

/// True when `/proc` is mounted so that other users' processes are hidden
/// (`hidepid=1`, `2`, `4`, or their names `noaccess`, `invisible`,
/// `ptraceable`), as `/proc/self/mounts` says of the mount at `/proc`.
/// That table costs the kernel less to write than `mountinfo` (about half,
/// 24 against 43 µs with this host's 21 mounts) and holds the same options.
pub fn proc_hides_processes() -> bool {
    fs::File::open("/proc/self/mounts").is_ok_and(mount_table_hides_processes)
}

/// Whether a mount table, as `/proc/self/mounts` gives it, mounts proc at
/// `/proc` hiding other users' processes. Read through a buffer on the
/// stack, line by line: a host's table may be long (containers), and the
/// last mount at /proc is the one that counts. A line longer than the
/// buffer (an overlay's layers) is not proc's and is skipped to its end.
fn mount_table_hides_processes(mut table: impl io::Read) -> bool {
    let mut buf = [0u8; 4096];
    let (mut len, mut skipping, mut hides) = (0, false, false);
    loop {
        let n = match table.read(&mut buf[len..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return hides,
        };
        len += n;
        let mut start = 0;
        while let Some(nl) = buf[start..len].iter().position(|&b| b == b'\n') {
            let line = &buf[start..start + nl];
            if !std::mem::take(&mut skipping)
                && let Some(opts) = proc_mount_options(line)
            {
                hides = hidepid_in(opts);
            }
            start += nl + 1;
        }
        if n == 0 {
            // A last line without its newline.
            if !skipping && let Some(opts) = proc_mount_options(&buf[start..len]) {
                hides = hidepid_in(opts);
            }
            return hides;
        }
        buf.copy_within(start..len, 0);
        len -= start;
        if len == buf.len() {
            (len, skipping) = (0, true);
        }
    }
}

/// Whether a proc mount's options hide other users' processes.
fn hidepid_in(options: &[u8]) -> bool {
    options.split(|&b| b == b',').any(|o| {
        o.strip_prefix(b"hidepid=")
            .is_some_and(|v| !matches!(v, b"0" | b"off"))
    })
}

/// The options of a line of the mount table (`/proc/self/mounts`, as
/// fstab has it) that mounts proc at `/proc` ("proc /proc proc
/// rw,nosuid,relatime,hidepid=invisible 0 0"). The kernel separates the
/// fields with one space and writes a space within one as `\040`; the
/// line is looked at as bytes, most of them skipped: a start of onlyone
/// reads this table for every new record.
fn proc_mount_options(line: &[u8]) -> Option<&[u8]> {
    let source_end = line.iter().position(|&b| b == b' ')?;
    let rest = line[source_end + 1..].strip_prefix(b"/proc proc ")?;
    let end = rest
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|o| !o.is_empty())
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
    /// The process is gone or exiting.
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
/// [`with_census`], one listing serves every search.
pub fn run_members(
    spec: &RunSpec<'_>,
    skip: &[u32],
    first_only: bool,
    deadline: Option<std::time::Instant>,
) -> io::Result<RunScan> {
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
                // A process in exit(2) whose memory is already gone cannot
                // say; it runs no more user code. (One in the command's
                // group counts above, exiting or not.)
                Environ::Has(false) | Environ::Gone => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proc_mount_is_found_with_its_options() {
        let hid = b"proc /proc proc rw,nosuid,nodev,noexec,relatime,hidepid=invisible 0 0\n";
        assert_eq!(
            proc_mount_options(hid),
            Some(&b"rw,nosuid,nodev,noexec,relatime,hidepid=invisible"[..])
        );
        let plain = b"proc /proc proc rw,relatime 0 0";
        assert_eq!(proc_mount_options(plain), Some(&b"rw,relatime"[..]));
        let named = b"none /proc proc rw,hidepid=2 0 0";
        assert_eq!(proc_mount_options(named), Some(&b"rw,hidepid=2"[..]));
        for other in [
            "binfmt_misc /proc/sys/fs/binfmt_misc binfmt_misc rw 0 0",
            "tmpfs /proc tmpfs rw,hidepid=2 0 0",
            "proc /proc procfs rw,hidepid=2 0 0",
            "/dev/vda /proc\\040x ext4 rw,hidepid=2 0 0",
            "proc /proc/ proc rw,hidepid=2 0 0",
            "proc /proc proc ",
            "not a mount line",
            "",
        ] {
            assert_eq!(proc_mount_options(other.as_bytes()), None, "{other}");
        }
    }

    /// Gives what it holds a few bytes at a time, as a slow reader may.
    struct Trickle<'a>(&'a [u8], usize);

    impl io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn the_last_proc_mount_of_the_table_is_the_one_that_counts() {
        let hidden = "proc /proc proc rw,relatime,hidepid=invisible 0 0";
        let plain = "proc /proc proc rw,relatime 0 0";
        // An overlay line longer than the reader's buffer, whose layers
        // name "/proc proc hidepid=2" where a short line would have them.
        let long = format!(
            "overlay / overlay rw,lowerdir={}x /proc proc hidepid=2 0 0",
            "/l".repeat(3000)
        );
        let hides = |table: &str| {
            [1, 7, 4096, 10_000]
                .map(|step| mount_table_hides_processes(Trickle(table.as_bytes(), step)))
        };
        let cases = [
            (format!("{hidden}\n"), true),
            (format!("tmpfs /run tmpfs rw 0 0\n{hidden}"), true),
            (format!("{hidden}\n{plain}\n"), false),
            (format!("{plain}\n{long}\n{hidden}\n"), true),
            (format!("{plain}\n{long}\n"), false),
            (format!("{plain}\n{long}"), false),
            (format!("{hidden}\n{long}\n{plain}\n"), false),
            (String::new(), false),
        ];
        for (table, want) in cases {
            assert_eq!(hides(&table), [want; 4], "{:.200}", table);
        }
    }

    #[test]
    fn hidepid_is_any_value_but_off() {
        for hides in [
            "hidepid=2",
            "rw,gid=4,hidepid=invisible",
            "rw,hidepid=1",
            "hidepid=ptraceable",
        ] {
            assert!(hidepid_in(hides.as_bytes()), "{hides}");
        }
        for shows in [
            "",
            "rw,relatime",
            "hidepid=0",
            "gid=4,hidepid=off",
            "nohidepid=2",
        ] {
            assert!(!hidepid_in(shows.as_bytes()), "{shows}");
        }
    }

    #[test]
    fn stat_is_split_at_the_last_paren() {
        let line =
            "4242 (a) b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 987654 0 0";
        let st = parse_stat(line).unwrap();
        assert_eq!(st.comm, "a) b) c");
        assert_eq!(st.state, 'S');
        assert_eq!(st.ppid, 1);
        assert_eq!(st.pgrp, 4242);
        assert_eq!(st.cpu_ticks, 10);
        assert_eq!(st.start, 987_654);
    }

    #[test]
    fn every_field_read_is_the_one_the_kernel_numbers() {
        // Field n holds n (field 3, the state, is `S`); 52 fields in all.
        let rest: Vec<String> = (4..=52).map(|n| n.to_string()).collect();
        let line = format!("1 (x y) S {}", rest.join(" "));
        let st = parse_stat(&line).unwrap();
        assert_eq!(
            (st.state, st.ppid, st.pgrp, st.session, st.tty, st.flags),
            ('S', 4, 5, 6, 7, 9)
        );
        assert_eq!((st.cpu_ticks, st.start), (14 + 15, 22));
        let image = st.image.unwrap();
        assert_eq!(
            (
                image.arg_start,
                image.arg_end,
                image.env_start,
                image.env_end
            ),
            (48, 49, 50, 51)
        );
        // A kernel that shows no image (before 3.5): the rest still reads.
        let short = format!("1 (x) S {}", rest[..19].join(" "));
        let st = parse_stat(&short).unwrap();
        assert_eq!((st.start, st.image), (22, None));
        // A negative tty or group (-1: none) reads as 0.
        let line = line.replace(" 7 8 ", " -1 8 ");
        assert_eq!(parse_stat(&line).unwrap().tty, 0);
    }

    #[test]
    fn stat_with_spaces_in_name_and_zombie_state() {
        let line = "77 (my prog (x)) Z 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0";
        let st = parse_stat(line).unwrap();
        assert_eq!(st.comm, "my prog (x)");
        assert!(st.is_dead());
        assert_eq!(st.start, 55);
    }

    #[test]
    fn truncated_stat_is_rejected() {
        assert!(parse_stat("1 (init) S 0 1").is_none());
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat(") (").is_none());
    }

    #[test]
    fn real_stat_of_self_parses() {
        let me = own_identity().unwrap().id;
        let st = read_stat(me.pid).unwrap().unwrap();
        assert_eq!(st.start, me.start);
        assert!(!st.is_dead());
        assert_eq!(me.probe(), Probe::Alive);
        assert_eq!(ProcId::of(me.pid), Some(me));
        assert_eq!(
            probe(me.pid, Some(me.start + 1)),
            Probe::Reused { now: me.start }
        );
        assert_eq!(me.to_string().parse::<ProcId>(), Ok(me));
    }

    #[test]
    fn invalid_pids_are_never_probed() {
        assert!(!kill_probe(0));
        assert!(!kill_probe(pid_max() + 1));
        assert!(!kill_probe(u32::MAX));
        assert_eq!(probe(0, None), Probe::Exited);
        assert_eq!(probe(u32::MAX, None), Probe::Exited);
    }

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

    #[test]
    fn boot_id_and_time_are_read() {
        assert_eq!(boot_id().unwrap().len(), 36);
        assert!(boot_time().unwrap() > 1_000_000_000);
    }
}
