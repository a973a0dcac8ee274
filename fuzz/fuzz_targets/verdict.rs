//! Fuzzes the judge, `internals::judge_record` and `internals::judge`, on
//! records that are parsed from the input or built from it, and the move of
//! a record's start times onto this process's clock,
//! `Record::in_local_clock`, which the reader applies before judging.
//!
//! Input layout: byte 0 is a set of flags, the rest is a lock file's content
//! (parsed with pid_max 4194304, which may be above this system's pid_max,
//! so the probe's own range guard is exercised too), or, with `BUILD`, raw
//! material for `arbitrary` to build a `Record` the parser would never
//! produce (pid 0, pids above `i32::MAX`, newlines in strings, `boot`
//! without `start`, more than `MAX_LINGER` lingering processes...).
//!
//! The flags steer records onto paths a random input cannot reach: a
//! record of the current boot, PID namespace and time namespace, or naming
//! this process; and, for a file that does not parse, one this user may not
//! read.
//!
//! The judge reads `/proc` and calls `kill(pid, 0)` for pids in
//! `1..=pid_max`; it never sends a real signal. A record of a run or a
//! script whose owner is gone makes it list `/proc` twice, and one of
//! another PID namespace once: slower, but those are paths to fuzz too.
//!
//! Checked on every input, following the judge's order of proofs:
//! - no panic, including when rendering the verdicts (`Display`);
//! - `in_local_clock` moves every start time by the same whole number of
//!   clock ticks (the difference of the boot-time offsets), changes nothing
//!   else, is `None` exactly when that cannot be done, and is idempotent;
//! - a record naming another boot is `Stale(PreviousBoot)` when its `host`
//!   is absent or this host's name, else `Unknown(OtherHost)`;
//! - a record of another PID namespace is `Held(OtherNamespace)` when
//!   kernel-locked; else `Stale(PidNamespaceGone)` only from the initial
//!   PID namespace and when no process has that namespace, or
//!   `Unknown(OtherPidNamespace)` naming a process in it, or
//!   `Unknown(PidNamespaceUnseen)`;
//! - a record of another time namespace (start times not moved) is
//!   `Held(KernelLock)` when kernel-locked and its pid lives,
//!   `Held(OtherKernelLock)` when kernel-locked and it does not, else
//!   `Unknown(OtherTimeNamespace)`;
//! - otherwise: a `Held` verdict names a live pid in `1..=pid_max` and the
//!   process that proved it (the owner's pid for `Owner`, `OwnerUnverified`
//!   and `KernelLock`; `cmdpid` for `Command`; a lingering pid or a scanned
//!   member for `Member`); `OtherKernelLock` only when a kernel lock is
//!   held, naming the recorded (gone) owner; `Stale` never when
//!   kernel-locked, never for a newer format, never while a process the
//!   record names by pid and start time is alive, and only as `Exited`,
//!   `Reused` or `Zombie` of the owner; `Unknown` only as `NewerFormat`,
//!   `CannotScan` (for a record with processes to scan) or `NoProc`;
//! - a record naming this very process (pid and start time) in this boot
//!   and namespaces is `Held` by this process;
//! - a record naming this pid with another start time is never held by its
//!   owner, and if stale it is `Reused` with both start times;
//! - `judge` on an unparsable file: `Unknown(Denied)` when it could not be
//!   read, `Unknown(Unreadable)` when kernel-locked, else
//!   `Stale(UnreadableFromPreviousBoot)` exactly when it is older than this
//!   boot and a torn record (`record::is_torn_record`).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use onlyone::internals::{self, Evidence};
use onlyone::procfs::{self, NsSeen};
use onlyone::record::{FORMAT_VERSION, MAX_LINGER, Mode, NotARecord, Record, is_torn_record};
use onlyone::{Group, Holder, ProcId, StaleReason, UnknownReason, Verdict};

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
/// On a file that does not parse, 3 means this user may not read it.
const PID_SHIFT: u8 = 3;
/// Build the record with `arbitrary` instead of parsing it.
const BUILD: u8 = 1 << 5;
/// The file's mtime is before this boot (else: now).
const BEFORE_BOOT: u8 = 1 << 6;
/// Replace the record's time namespace (when it has one) by ours.
const THIS_TIMENS: u8 = 1 << 7;

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
    r.timens = Option::<u64>::arbitrary(&mut u)?;
    r.bootoff_ns = i64::arbitrary(&mut u)?;
    r.host = Option::<String>::arbitrary(&mut u)?;
    r.uid = Option::<u32>::arbitrary(&mut u)?;
    r.mode = match u8::arbitrary(&mut u)? % 3 {
        0 => Mode::Lock,
        1 => Mode::Run,
        _ => Mode::Script,
    };
    r.cmd = Option::<String>::arbitrary(&mut u)?;
    r.cmd_id = Option::<(u32, u64)>::arbitrary(&mut u)?.map(|(pid, start)| ProcId { pid, start });
    r.group = Option::<(u32, Option<u64>)>::arbitrary(&mut u)?
        .map(|(pgid, leader_start)| Group { pgid, leader_start });
    let lingering = u.int_in_range(0..=MAX_LINGER + 2)?;
    for _ in 0..lingering {
        let (pid, start) = <(u32, u64)>::arbitrary(&mut u)?;
        r.linger.push(ProcId { pid, start });
    }
    r.image = Option::<(u64, u64, u64, u64)>::arbitrary(&mut u)?
        .and_then(|(a, b, c, d)| procfs::Image::new(a, b, c, d));
    r.format = u32::arbitrary(&mut u)?;
    Ok(r)
}

/// Renders a verdict as the CLI and the errors would, to catch panics in
/// the `Display` impls (a start time past year 9999 once panicked here:
/// fuzz/regressions/verdict/).
fn render(v: &Verdict) -> String {
    match v {
        Verdict::Held(h) => format!("held by {h:?} (pid {})", h.pid()),
        Verdict::Stale(r) => format!("stale: {r}"),
        Verdict::Unknown(r) => format!("unknown: {r}"),
    }
}

/// Every start time a record names, in a fixed order: the owner's, the
/// command's, the group leader's, the lingering processes'.
fn times(r: &Record) -> Vec<Option<u64>> {
    [
        r.start,
        r.cmd_id.map(|c| c.start),
        r.group.and_then(|g| g.leader_start),
    ]
    .into_iter()
    .chain(r.linger.iter().map(|l| Some(l.start)))
    .collect()
}

/// The record the reader judges: `in_local_clock`, or the record as is
/// when its start times cannot be moved. Checks the move against an exact
/// model of it.
fn local_clock(rec: &Record) -> Record {
    let got = rec.in_local_clock();
    let Some(theirs) = rec.timens else {
        assert_eq!(got, None, "a record without timens was moved");
        return rec.clone();
    };
    let ours = procfs::own_timens();
    if ours == Some(theirs) {
        assert_eq!(got.as_ref(), Some(rec), "a record of our clock was changed");
        return rec.clone();
    }
    let own_off = procfs::own_boottime_offset_ns();
    let tick_ns = 1_000_000_000 / i128::from(procfs::clock_ticks());
    let diff = i128::from(own_off) - i128::from(rec.bootoff_ns);
    let shift = (i64::try_from(diff).is_ok() && diff % tick_ns == 0).then_some(diff / tick_ns);
    let want = shift.and_then(|shift| {
        times(rec)
            .into_iter()
            .map(|t| match t {
                None => Some(None),
                Some(t) => {
                    let v = i128::from(t) + shift;
                    let fits = 0..=i128::from(i64::MAX);
                    (fits.contains(&i128::from(t)) && fits.contains(&v)).then_some(Some(v as u64))
                }
            })
            .collect::<Option<Vec<_>>>()
    });
    match (got, want) {
        (None, None) => rec.clone(),
        (Some(local), Some(want)) => {
            assert_eq!(times(&local), want, "start times moved wrong: {rec:?}");
            assert_eq!(local.timens, ours);
            assert_eq!(local.bootoff_ns, own_off);
            // Nothing but the clock changed.
            let mut back = local.clone();
            back.start = rec.start;
            if let (Some(b), Some(r)) = (&mut back.cmd_id, rec.cmd_id) {
                b.start = r.start;
            }
            if let (Some(b), Some(r)) = (&mut back.group, rec.group) {
                b.leader_start = r.leader_start;
            }
            for (b, r) in back.linger.iter_mut().zip(&rec.linger) {
                b.start = r.start;
            }
            back.timens = rec.timens;
            back.bootoff_ns = rec.bootoff_ns;
            assert_eq!(back, *rec, "in_local_clock changed more than the clock");
            if ours.is_some() {
                assert_eq!(
                    local.in_local_clock().as_ref(),
                    Some(&local),
                    "not idempotent"
                );
            }
            local
        }
        (got, want) => panic!("in_local_clock gave {got:?}, expected times {want:?}: {rec:?}"),
    }
}

/// Checks the verdict on a record of another PID namespace (`theirs`).
fn check_other_pidns(rec: &Record, theirs: u64, ours: u64, kernel_locked: bool, v: &Verdict) {
    if kernel_locked {
        let want = Holder::OtherNamespace {
            pid: rec.pid,
            ns: theirs,
        };
        assert_eq!(*v, Verdict::Held(want), "{rec:?}");
        return;
    }
    match v {
        Verdict::Unknown(UnknownReason::OtherPidNamespace {
            theirs: t,
            ours: o,
            member,
        }) => {
            assert_eq!((*t, *o), (theirs, ours));
            if let Some(m) = *member {
                let pid_max = procfs::pid_max();
                assert!((1..=pid_max).contains(&m), "member pid {m} of pid:[{t}]");
                // It may have exited since; if not, it is in that namespace.
                if let Ok(n) = procfs::pidns_of(m) {
                    assert_eq!(
                        n, theirs,
                        "pid {m}, named in pid:[{theirs}], is in pid:[{n}]"
                    );
                }
            }
        }
        Verdict::Unknown(UnknownReason::PidNamespaceUnseen {
            theirs: t, nested, ..
        }) => {
            assert_eq!(*t, theirs);
            assert_eq!(*nested, ours != procfs::INIT_PIDNS);
        }
        Verdict::Stale(StaleReason::PidNamespaceGone { ns }) => {
            assert_eq!(*ns, theirs);
            assert_eq!(
                ours,
                procfs::INIT_PIDNS,
                "gone as seen from a nested namespace"
            );
            assert!(
                !matches!(procfs::pidns_members(theirs), NsSeen::Alive(_)),
                "pid:[{theirs}] is alive, yet judged gone"
            );
        }
        other => panic!("a record of pid:[{theirs}] judged {other:?}: {rec:?}"),
    }
}

fn check(rec: &Record, kernel_locked: bool, v: &Verdict) {
    let _ = render(v);
    if procfs::usable().is_err() {
        assert!(
            matches!(v, Verdict::Unknown(UnknownReason::NoProc { .. })),
            "{v:?}"
        );
        return;
    }
    let pid_max = procfs::pid_max();
    let me = procfs::own_identity().expect("own identity").id;
    let boot = procfs::boot_id().expect("boot id");

    // Another kernel: a reboot of this host, or another host.
    if rec.boot.as_deref().is_some_and(|b| b != boot) {
        let want = match &rec.host {
            Some(host) if *host != procfs::host_name() => {
                Verdict::Unknown(UnknownReason::OtherHost { host: host.clone() })
            }
            _ => Verdict::Stale(StaleReason::PreviousBoot),
        };
        assert_eq!(*v, want, "{rec:?}");
        return;
    }
    if let Some(theirs) = rec.pidns {
        match procfs::own_pidns() {
            Some(ours) if ours != theirs => {
                return check_other_pidns(rec, theirs, ours, kernel_locked, v);
            }
            Some(_) => {}
            None => {
                assert!(
                    matches!(v, Verdict::Unknown(UnknownReason::NoProc { .. })),
                    "{v:?}"
                );
                return;
            }
        }
    }
    // Start times on another clock: the kernel lock alone proves it held,
    // and the owner is named only if its pid lives (start times cannot be
    // compared across clocks).
    if let Some(theirs) = rec.timens
        && procfs::own_timens().is_some_and(|ours| ours != theirs)
    {
        let want = if kernel_locked && procfs::probe(rec.pid, None).is_alive() {
            Verdict::Held(Holder::KernelLock { pid: rec.pid })
        } else if kernel_locked {
            Verdict::Held(Holder::OtherKernelLock { owner: rec.pid })
        } else {
            Verdict::Unknown(UnknownReason::OtherTimeNamespace { theirs })
        };
        assert_eq!(*v, want, "{rec:?}");
        return;
    }

    // This boot, PID namespace and clock: the pids are ours to probe.
    let run = rec.scan_spec().is_some();
    match v {
        Verdict::Held(h) => {
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
                    assert_eq!(Some(*pid), rec.cmd_id.map(|c| c.pid));
                    assert!((1..=pid_max).contains(pid), "held by command pid {pid}");
                }
                Holder::Member { pid, .. } => {
                    assert!(
                        run || rec.linger.iter().any(|l| l.pid == *pid),
                        "a record without members has one: {rec:?}"
                    );
                    assert!((1..=pid_max).contains(pid), "held by member pid {pid}");
                }
                // Someone holds the flock while the owner is gone: `owner` is
                // the recorded (dead) pid, not a live process.
                Holder::OtherKernelLock { owner } => {
                    assert!(kernel_locked, "held by a kernel lock nobody holds");
                    assert_eq!(*owner, rec.pid);
                }
                other => panic!("{other:?} for a record of this PID namespace: {rec:?}"),
            }
            if matches!(h, Holder::KernelLock { .. }) {
                assert!(kernel_locked, "held by a kernel lock nobody holds");
            }
            if matches!(h, Holder::Owner { .. }) {
                assert!(rec.start.is_some(), "a bare pid file verified");
            }
        }
        Verdict::Stale(r) => {
            assert!(!kernel_locked, "stale under a held kernel lock: {r:?}");
            assert!(
                rec.format <= FORMAT_VERSION,
                "stale in format {}",
                rec.format
            );
            match r {
                StaleReason::Exited { pid, run: r } | StaleReason::Zombie { pid, run: r } => {
                    assert_eq!((*pid, *r), (rec.pid, run), "{rec:?}");
                }
                StaleReason::Reused {
                    pid,
                    recorded,
                    run: r,
                    ..
                } => {
                    assert_eq!((*pid, *r), (rec.pid, run), "{rec:?}");
                    assert_eq!(Some(*recorded), rec.start);
                }
                other => panic!("stale ({other}) for a record of this boot and namespace"),
            }
            // A process named by pid and start time never comes back once
            // gone: none of them may be alive.
            for id in rec
                .owner_id()
                .into_iter()
                .chain(rec.cmd_id)
                .chain(rec.linger.iter().copied())
            {
                assert!(!id.is_alive(), "stale ({r}) while {id} lives: {rec:?}");
            }
        }
        Verdict::Unknown(r) => match r {
            UnknownReason::NewerFormat { version } => {
                assert!(!kernel_locked);
                assert_eq!(*version, rec.format);
                assert!(rec.format > FORMAT_VERSION);
            }
            UnknownReason::CannotScan { .. } => assert!(run, "a scan of nothing failed"),
            UnknownReason::NoProc { .. } => {}
            other => panic!("unknown ({other}) for a record of this boot and namespace"),
        },
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
                Verdict::Held(
                    Holder::Owner { .. }
                        | Holder::OwnerUnverified { .. }
                        | Holder::KernelLock { .. }
                )
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
                    run,
                }
            );
        }
    }
}

/// Judges a file that is not a record, as the reader would see it.
fn unparsable(rest: &[u8], why: NotARecord, flags: u8, mtime: i64) {
    let kernel_locked = flags & KERNEL_LOCKED != 0;
    if (flags >> PID_SHIFT) & 3 == 3 {
        // Not readable by this user: the reader has no bytes, no kernel
        // lock, only the file's owner.
        let owner = u32::arbitrary(&mut Unstructured::new(rest)).unwrap_or(0);
        let ev = Evidence {
            bytes: Vec::new(),
            record: Err(NotARecord::Denied {
                why: "Permission denied (os error 13)".into(),
            }),
            kernel_locked: false,
            mtime,
            denied: true,
            owner,
        };
        let v = internals::judge(&ev, None);
        let _ = render(&v);
        let want = UnknownReason::Denied {
            owner: onlyone::command::user_name(owner),
        };
        assert_eq!(v, Verdict::Unknown(want));
        return;
    }
    let why_text = why.to_string();
    let ev = Evidence {
        bytes: rest.to_vec(),
        record: Err(why),
        kernel_locked,
        mtime,
        denied: false,
        owner: 0,
    };
    let v = internals::judge(&ev, None);
    let _ = render(&v);
    let before_boot = procfs::boot_time().is_some_and(|b| mtime < b as i64);
    let want = if !kernel_locked && before_boot && is_torn_record(rest) {
        Verdict::Stale(StaleReason::UnreadableFromPreviousBoot { why: why_text })
    } else {
        Verdict::Unknown(UnknownReason::Unreadable { why: why_text })
    };
    assert_eq!(v, want, "{:?}", String::from_utf8_lossy(rest));
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
            Err(why) => return unparsable(rest, why, flags, mtime),
        }
    };

    let me = procfs::own_identity().expect("own identity");
    if flags & THIS_BOOT != 0 && rec.boot.is_some() {
        rec.boot = Some(procfs::boot_id().expect("boot id").to_owned());
    }
    if flags & THIS_PIDNS != 0 && rec.pidns.is_some() {
        rec.pidns = procfs::own_pidns();
    }
    if flags & THIS_TIMENS != 0 && rec.timens.is_some() {
        rec.timens = procfs::own_timens();
    }
    match (flags >> PID_SHIFT) & 3 {
        1 => rec.pid = me.id.pid,
        2 => {
            rec.pid = me.id.pid;
            rec.start = Some(me.id.start);
        }
        3 => rec.pid = 1,
        _ => {}
    }

    // The record as written, and as the reader hands it to the judge.
    let v = internals::judge_record(&rec, kernel_locked, None);
    check(&rec, kernel_locked, &v);

    let local = local_clock(&rec);
    let ev = Evidence {
        bytes: rest.to_vec(),
        record: Ok(local.clone()),
        kernel_locked,
        mtime,
        denied: false,
        owner: me.uid.unwrap_or(0),
    };
    let v2 = internals::judge(&ev, None);
    check(&local, kernel_locked, &v2);
});
