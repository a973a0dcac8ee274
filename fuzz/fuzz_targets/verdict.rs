//! Fuzzes the verdict logic, `verdict::judge_record` and `verdict::judge`,
//! on records that are parsed from the input or built from it.
//!
//! Input layout: byte 0 is a set of flags, the rest is a lock file's content
//! (parsed with pid_max 4194304, above this system's pid_max, so the probe's
//! own range guard is exercised too), or, with `BUILD`, raw material for
//! `arbitrary` to build a `Record` the parser would never produce (pid 0,
//! pids above `i32::MAX`, newlines in strings, `boot` without `start`...).
//!
//! The flags steer records onto paths a random input cannot reach: a
//! record of the current boot and PID namespace, or naming this process.
//!
//! The verdict reads `/proc` and calls `kill(pid, 0)` for pids in
//! `1..=pid_max`; it never sends a real signal. A `mode=run` record whose
//! owner is gone makes it list `/proc` twice: slower, but that is a path to
//! fuzz too.
//!
//! Checked on every input:
//! - no panic, including when rendering the reasons (`Display`);
//! - a record naming another boot is `Stale(PreviousBoot)`;
//! - a `Held` verdict names a live pid in `1..=pid_max`, and the process
//!   that proved it (the owner's pid for `Owner`, `OwnerUnverified` and
//!   `KernelLock`; `cmdpid` for `Command`); `OtherKernelLock` only when a
//!   kernel lock is held, naming the recorded (gone) owner;
//! - a record naming this very process (pid and start time) in this boot
//!   and namespace is `Held` by this process;
//! - a record naming this pid with another start time is never held by its
//!   owner, and if stale it is `Reused` with both start times;
//! - `judge` on an unparsable file: `Unknown` when kernel-locked, else
//!   `Stale(UnreadableFromPreviousBoot)` exactly when older than this boot.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use onlyone::procfs;
use onlyone::record::{Mode, Record};
use onlyone::verdict::{self, Evidence, Holder, StaleReason, UnknownReason, Verdict};

/// PID_MAX_LIMIT on 64-bit Linux.
const PID_MAX_LIMIT: u32 = 4_194_304;

/// A kernel lock (flock) is held on the file.
const KERNEL_LOCKED: u8 = 1 << 0;
/// Replace the record's boot id (when it has one) by the current boot's.
const THIS_BOOT: u8 = 1 << 1;
/// Replace the record's PID namespace (when it has one) by ours.
const THIS_PIDNS: u8 = 1 << 2;
/// Bits 3-4: 0 keep the pid; 1 this process's pid, start time kept;
/// 2 this process's pid and start time; 3 pid 1, start time kept.
const PID_SHIFT: u8 = 3;
/// Build the record with `arbitrary` instead of parsing it.
const BUILD: u8 = 1 << 5;
/// The file's mtime is before this boot (else: now).
const BEFORE_BOOT: u8 = 1 << 6;

fn build(data: &[u8]) -> arbitrary::Result<Record> {
    let mut u = Unstructured::new(data);
    // Start from a bare record, so a field added to `Record` later starts
    // as `None` here rather than breaking the build.
    let mut r = Record::parse_with_pid_max(b"1\n", 1).expect("a bare pid file parses");
    r.pid = u32::arbitrary(&mut u)?;
    r.start = Option::<u64>::arbitrary(&mut u)?;
    r.boot = Option::<String>::arbitrary(&mut u)?;
    r.token = Option::<String>::arbitrary(&mut u)?;
    r.since = Option::<u64>::arbitrary(&mut u)?;
    r.pidns = Option::<u64>::arbitrary(&mut u)?;
    r.host = Option::<String>::arbitrary(&mut u)?;
    r.uid = Option::<u32>::arbitrary(&mut u)?;
    r.mode = if bool::arbitrary(&mut u)? {
        Mode::Run
    } else {
        Mode::Lock
    };
    r.cmd = Option::<String>::arbitrary(&mut u)?;
    r.cmd_pid = Option::<u32>::arbitrary(&mut u)?;
    r.cmd_start = Option::<u64>::arbitrary(&mut u)?;
    r.pgid = Option::<u32>::arbitrary(&mut u)?;
    r.pgstart = Option::<u64>::arbitrary(&mut u)?;
    r.format = u32::arbitrary(&mut u)?;
    Ok(r)
}

/// Renders a verdict as the CLI and the errors would, to catch panics in
/// the `Display` impls (a start time past year 9999 once panicked here:
/// fuzz/regressions/verdict/).
fn render(v: &Verdict) -> String {
    match v {
        Verdict::Held(h) => format!("held by {h:?}"),
        Verdict::Stale(r) => format!("stale: {r}"),
        Verdict::Unknown(r) => format!("unknown: {r}"),
    }
}

fn check(rec: &Record, kernel_locked: bool, v: &Verdict) {
    let _ = render(v);
    let pid_max = procfs::pid_max();
    let me = procfs::own_identity().expect("own identity");
    let boot = procfs::boot_id().expect("boot id");
    let ours_ns = procfs::own_pidns();

    let other_boot = rec.boot.as_deref().is_some_and(|b| b != boot);
    if other_boot {
        assert_eq!(*v, Verdict::Stale(StaleReason::PreviousBoot), "{rec:?}");
        return;
    }
    let other_ns = matches!((rec.pidns, ours_ns), (Some(t), Some(o)) if t != o);

    if let Verdict::Held(h) = v {
        match h {
            Holder::KernelLock { pid }
            | Holder::Owner { pid }
            | Holder::OwnerUnverified { pid } => {
                assert_eq!(*pid, rec.pid, "held by an owner that is not the record's");
                assert!(
                    (1..=pid_max).contains(pid),
                    "held by owner pid {pid} outside 1..={pid_max}"
                );
            }
            Holder::Command { pid } => {
                assert_eq!(Some(*pid), rec.cmd_pid);
                assert!((1..=pid_max).contains(pid), "held by command pid {pid}");
            }
            Holder::Member { pid, .. } => {
                assert!(
                    rec.scan_spec().is_some(),
                    "a record without members has one"
                );
                assert!((1..=pid_max).contains(pid), "held by member pid {pid}");
            }
            // Someone holds the flock while the owner is gone: `owner` is
            // the recorded (dead) pid, not a live process.
            Holder::OtherKernelLock { owner } => {
                assert!(kernel_locked, "held by a kernel lock nobody holds");
                assert_eq!(*owner, rec.pid);
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
        if matches!(h, Holder::KernelLock { .. }) {
            assert!(kernel_locked);
        }
    }
    if other_ns {
        assert!(matches!(
            v,
            Verdict::Unknown(UnknownReason::OtherPidNamespace { .. })
        ));
        return;
    }

    if rec.pid == me.pid && rec.start == Some(me.start) {
        let want = if kernel_locked {
            Holder::KernelLock { pid: me.pid }
        } else {
            Holder::Owner { pid: me.pid }
        };
        assert_eq!(
            *v,
            Verdict::Held(want),
            "this live process is not held: {rec:?}"
        );
    }
    if let Some(s) = rec.start.filter(|&s| rec.pid == me.pid && s != me.start) {
        assert!(
            !matches!(
                v,
                Verdict::Held(Holder::Owner { .. } | Holder::OwnerUnverified { .. })
                    | Verdict::Held(Holder::KernelLock { .. })
            ),
            "a reused pid is held by its owner: {v:?}"
        );
        if let Verdict::Stale(r) = v {
            assert_eq!(
                *r,
                StaleReason::Reused {
                    pid: me.pid,
                    now: me.start,
                    recorded: s,
                    run: rec.scan_spec().is_some(),
                }
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let kernel_locked = flags & KERNEL_LOCKED != 0;
    let boot_time = procfs::boot_time().unwrap_or(0) as i64;
    let mtime = if flags & BEFORE_BOOT != 0 {
        boot_time - 1
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    };

    let mut rec = if flags & BUILD != 0 {
        match build(rest) {
            Ok(r) => r,
            Err(_) => return,
        }
    } else {
        match Record::parse_with_pid_max(rest, PID_MAX_LIMIT) {
            Ok(r) => r,
            Err(why) => {
                let ev = Evidence {
                    bytes: rest.to_vec(),
                    record: Err(why),
                    kernel_locked,
                    mtime,
                };
                let v = verdict::judge(&ev);
                let _ = render(&v);
                let expect_stale =
                    !kernel_locked && procfs::boot_time().is_some() && mtime < boot_time;
                match v {
                    Verdict::Stale(StaleReason::UnreadableFromPreviousBoot { .. }) => {
                        assert!(expect_stale)
                    }
                    Verdict::Unknown(UnknownReason::Unreadable { .. }) => assert!(!expect_stale),
                    other => panic!("an unparsable record judged {other:?}"),
                }
                return;
            }
        }
    };

    let me = procfs::own_identity().expect("own identity");
    if flags & THIS_BOOT != 0 && rec.boot.is_some() {
        rec.boot = Some(procfs::boot_id().expect("boot id").to_owned());
    }
    if flags & THIS_PIDNS != 0 && rec.pidns.is_some() {
        rec.pidns = procfs::own_pidns();
    }
    match (flags >> PID_SHIFT) & 3 {
        1 => rec.pid = me.pid,
        2 => {
            rec.pid = me.pid;
            rec.start = Some(me.start);
        }
        3 => rec.pid = 1,
        _ => {}
    }

    let v = verdict::judge_record(&rec, kernel_locked);
    check(&rec, kernel_locked, &v);

    let ev = Evidence {
        bytes: rest.to_vec(),
        record: Ok(rec.clone()),
        kernel_locked,
        mtime,
    };
    let v2 = verdict::judge(&ev);
    check(&rec, kernel_locked, &v2);
});
