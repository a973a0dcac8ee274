//! PID and time namespaces as `/proc` shows them, whether `/proc` itself
//! is this process's, and whether it hides other users' processes
//! (`hidepid`).

use std::fs;
use std::io;
use std::sync::OnceLock;

use super::{all_pids, is_gone, pidns_of, read_small, read_stat};

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
pub(super) fn mount_table_hides_processes(mut table: impl io::Read) -> bool {
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
pub(super) fn hidepid_in(options: &[u8]) -> bool {
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
pub(super) fn proc_mount_options(line: &[u8]) -> Option<&[u8]> {
    let source_end = line.iter().position(|&b| b == b' ')?;
    let rest = line[source_end + 1..].strip_prefix(b"/proc proc ")?;
    let end = rest
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|o| !o.is_empty())
}
