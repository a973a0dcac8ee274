//! Another account attacks what makes a process one of a root run's
//! (issue 34): the owner's image (`image=`), a copied token, a lock path
//! in an environment, and the ids of processes, groups and sessions that
//! the run no longer holds. The attacker is `nobody`, in a private mount
//! namespace with fresh tmpfs `/run` and `/tmp` ([`support::ns::Ns`]).
//! What another account can copy or reuse counts only for processes of
//! the record's own user, and an id only while a process proven to be the
//! run's holds it: no such process makes root's run held or active, nor
//! makes root signal anything (doc/security.md, "Who is of a run").
//!
//! The tests that reuse a pid run in a PID namespace of their own whose
//! `pid_max` is lowered to 1000 ([`Pids`]; per PID namespace since Linux
//! 6.14): nobody forks until it has the pid it wants, as it would through
//! a host's 32768 pids in about ten seconds.

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::ns::{self, NOBODY, Ns, wait_for_exec};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// The value of `key=` in the lock file at `path` (in the namespace).
fn record_value(ns: &Ns, path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(ns.host_path(path)).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
}

/// The pid on line 1 of the record at `path` (in the namespace).
fn owner_of(ns: &Ns, path: &str) -> u32 {
    std::fs::read_to_string(ns.host_path(path))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits for the record at `path` to have a `key=` line, and returns it.
fn wait_value(ns: &Ns, path: &str, key: &str) -> String {
    wait_until(&format!("{path} names its {key}"), LIMIT, || {
        record_value(ns, path, key).is_some()
    });
    record_value(ns, path, key).unwrap()
}

/// Root's script, as cron runs one: it takes `sync` in root's directory
/// with `acquire --export` and then runs `rest`. Returns the script's pid
/// and the image its record names, or `None` (saying why) where the kernel
/// does not randomise where an exec places it, which leaves no image.
fn roots_script(ns: &mut Ns, rest: &str) -> Option<(u32, String)> {
    let script = ns.keep(ns.sh(
        None,
        &format!(
            "vars=$(onlyone acquire --owner $$ --export sync) || exit; eval \"$vars\"; {rest}"
        ),
    ));
    assert_eq!(wait_value(ns, "/run/onlyone/sync.lock", "mode"), "script");
    assert_eq!(owner_of(ns, "/run/onlyone/sync.lock"), script);
    match record_value(ns, "/run/onlyone/sync.lock", "image") {
        Some(image) => Some((script, image)),
        None => {
            eprintln!("the kernel does not randomise exec's layout here: no image; skipped");
            None
        }
    }
}

/// Item 1: nobody copies the image of root's running script (its 0644
/// record shows it) into a record of its own in a shared directory, with
/// a dead owner. Root's `stop`, `run --replace` and `reap` of that lock
/// never signal root's script: an image speaks only for processes of the
/// record's user.
#[test]
fn an_image_copied_into_another_users_record_never_makes_root_signal_its_script() {
    let Some(mut ns) = Ns::new("an_image_copied_into_another_users_record") else {
        return;
    };
    let Some((script, _)) = roots_script(&mut ns, "sleep 100000; echo done") else {
        return;
    };
    let start = start_of(script);
    let (dead, _) = dead_process();
    ns.must(
        Some(NOBODY),
        &format!(
            "img=$(sed -n 's/^image=//p' /run/onlyone/sync.lock) && [ -n \"$img\" ] && \
             printf '%s\\n' {dead} start=1 boot={} token={} since=1764400000 host={} uid={NOBODY} \
             mode=script cmd=sync.sh \"image=$img\" onlyone=1 > /run/lock/foo.lock",
            boot_id(),
            "d".repeat(32),
            onlyone::procfs::host_name()
        ),
    );
    let root = |args: &[&str], what: &str| {
        let mut full = vec!["--dir", "/run/lock"];
        full.extend_from_slice(args);
        let out = ns.run(ns.oo(None, &full), LIMIT, what);
        assert!(
            alive(script, start) && !signal_pending(script),
            "root's `{what}` of nobody's lock signalled root's script: {out:#?}"
        );
        out
    };
    for _ in 0..2 {
        root(&["reap", "--idle", "0s", "foo"], "reap").expect(0);
    }
    root(&["stop", "foo"], "stop");
    root(&["run", "--replace", "foo", "--", "true"], "run --replace").expect(0);
    // Root's own lock is still its script's.
    ns.run(ns.oo(None, &["precheck", "sync"]), LIMIT, "precheck")
        .expect(75);
    assert_untouched(script);
}

/// A process that gives itself the image `IMAGE` (what `/proc/PID/stat`
/// shows as fields 48-51: where its arguments and environment sit) with
/// `prctl(PR_SET_MM, PR_SET_MM_MAP)`, which needs no privilege; it keeps
/// its own code, data and stack bounds. Creates `READY`, then sleeps.
const TAKE_IMAGE: &str = r#"
import ctypes, os, sys, time
image, ready = sys.argv[1], sys.argv[2]
args, env = image.split(":")
a0, a1 = (int(x, 16) for x in args.split("-"))
e0, e1 = (int(x, 16) for x in env.split("-"))
stat = open("/proc/self/stat").read()
fields = stat[stat.rindex(")") + 2:].split()
field = lambda n: int(fields[n - 3])
libc = ctypes.CDLL(None, use_errno=True)
libc.sbrk.restype = ctypes.c_void_p
U64 = ctypes.c_uint64
class Map(ctypes.Structure):
    _fields_ = [(n, U64) for n in ("start_code", "end_code", "start_data", "end_data",
                "start_brk", "brk", "start_stack", "arg_start", "arg_end",
                "env_start", "env_end")] + [
        ("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]
m = Map(field(26), field(27), field(45), field(46), field(47), libc.sbrk(0), field(28),
        a0, a1, e0, e1, None, 0, 0xFFFFFFFF)
PR_SET_MM, PR_SET_MM_MAP = 35, 14
UL = ctypes.c_ulong
if libc.prctl(PR_SET_MM, UL(PR_SET_MM_MAP), ctypes.byref(m), UL(ctypes.sizeof(m)), UL(0)) != 0:
    sys.exit("PR_SET_MM_MAP: " + os.strerror(ctypes.get_errno()))
open(ready, "w").close()
while True:
    time.sleep(1000)
"#;

/// Item 2: nobody gives a parked process of its own the image that root's
/// script's record shows. When the script releases and exits, the lock is
/// free: the next fire runs, and nobody's process is not signalled.
#[test]
fn a_process_given_roots_image_keeps_no_script_lock_held() {
    if !have_python3() {
        return;
    }
    let Some(mut ns) = Ns::new("a_process_given_roots_image") else {
        return;
    };
    let Some((script, image)) = roots_script(
        &mut ns,
        "while [ ! -e /run/go ]; do sleep 0.05; done; onlyone release sync; \
         echo $? > /run/released.tmp && mv /run/released.tmp /run/released",
    ) else {
        return;
    };
    let ready = "/tmp/image-taken";
    let parked = ns.attacker(
        NOBODY,
        &format!("exec /usr/bin/python3 -c '{TAKE_IMAGE}' {image} {ready}"),
        ready,
    );
    let theirs = onlyone::procfs::read_stat(parked).unwrap().unwrap();
    assert_eq!(
        theirs.image.map(|i| i.to_string()).as_deref(),
        Some(image.as_str()),
        "nobody's process has root's image"
    );
    std::fs::write(ns.host_path("/run/go"), "").unwrap();
    wait_until("root's script to release", LIMIT, || {
        ns.host_path("/run/released").exists()
    });
    wait_gone(script);
    let out = ns.run(ns.oo(None, &["precheck", "sync"]), LIMIT, "precheck");
    assert_eq!(
        out.code(),
        0,
        "nobody's process with root's image holds root's lock: {out:#?}"
    );
    ns.run(
        ns.oo(None, &["run", "sync", "--", "true"]),
        LIMIT,
        "the next fire",
    )
    .expect(0);
    assert_untouched(parked);
}

/// Opens `PATH` read-only (a record is 0644), takes an exclusive flock on
/// it, creates `READY` and execs `PROG...` with the descriptor (and so the
/// flock) kept across the exec and a pipe that never gets a byte as its
/// stdin.
const FLOCK_THEN_EXEC: &str = r#"
import fcntl, os, sys
path, ready, prog = sys.argv[1], sys.argv[2], sys.argv[3:]
fd = os.open(path, os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
os.set_inheritable(fd, True)
r, w = os.pipe()
os.dup2(r, 0)
os.set_inheritable(w, True)
open(ready, "w").close()
os.execv(prog[0], prog)
"#;

/// The `Uid:` line of `/proc/PID/status`: real, effective, saved and
/// filesystem uids.
fn uids(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|v| {
            v.split_whitespace()
                .filter_map(|u| u.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Root's run crashed (its wrapper and its command killed), leaving its
/// record. nobody opens the 0644 record, takes an exclusive flock on it
/// and execs `su`, setuid root, which waits at its password prompt for
/// ever: a holder whose effective and saved uids are root's, its real uid
/// nobody's. Root's next fires run, and `precheck` lets them: a flock
/// proves a run alive once its owner is gone only when a process of the
/// record's user by its real uid holds it.
#[test]
fn a_flock_kept_through_a_setuid_program_keeps_no_crashed_run_held() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let su = "/usr/bin/su";
    let setuid_root =
        std::fs::metadata(su).is_ok_and(|m| m.uid() == 0 && m.permissions().mode() & 0o4000 != 0);
    if !setuid_root {
        eprintln!("no setuid-root {su}; skipped");
        return;
    }
    if !have_python3() {
        return;
    }
    let Some(mut ns) = Ns::new("a_flock_kept_through_a_setuid_program") else {
        return;
    };
    let lock = "/run/onlyone/backup.lock";
    let wrapper = ns.keep(ns.oo(None, &["run", "backup", "--", "sleep", "100000"]));
    let cmd: u32 = wait_value(&ns, lock, "cmdpid").parse().unwrap();
    wait_for_exec(cmd, "sleep");
    kill9_pid(wrapper);
    kill9_pid(cmd);
    wait_gone(wrapper);
    wait_gone(cmd);
    let ready = "/tmp/flocked";
    let held = ns.attacker(
        NOBODY,
        &format!("exec /usr/bin/python3 -c '{FLOCK_THEN_EXEC}' {lock} {ready} {su} root"),
        ready,
    );
    wait_for_exec(held, "su");
    assert_eq!(
        uids(held),
        [NOBODY, 0, 0, 0],
        "nobody's su runs setuid root"
    );
    let record = std::fs::metadata(ns.host_path(lock)).unwrap();
    let locks = std::fs::read_to_string("/proc/locks").unwrap();
    let file = format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(record.dev()),
        rustix::fs::minor(record.dev()),
        record.ino()
    );
    assert!(
        locks.lines().any(|l| l.contains(" FLOCK ")
            && l.contains(" WRITE ")
            && l.contains(&format!(" {held} {file} "))),
        "nobody's su holds the record's flock: {locks}"
    );
    let out = ns.run(ns.oo(None, &["precheck", "backup"]), LIMIT, "precheck");
    assert_eq!(
        out.code(),
        0,
        "a flock that nobody keeps through su skips root's fires: {out:#?}"
    );
    for _ in 0..2 {
        let out = ns.run(
            ns.oo(None, &["run", "-q", "backup", "--", "true"]),
            LIMIT,
            "root's fire",
        );
        assert_eq!(
            out.code(),
            0,
            "a flock that nobody keeps through su skips root's fires: {out:#?}"
        );
    }
    assert_untouched(held);
}

/// Root's `run --linger agent`, whose command leaves `sleep` behind,
/// leading a session of its own (the wrapper names it in the record and
/// exits). Returns the lingerer's pid, as the namespace numbers it.
fn roots_lingering_run(ns: &Ns, pids: Option<&Pids>) -> u32 {
    let args = [
        "run",
        "--linger",
        "agent",
        "--",
        "sh",
        "-c",
        "setsid sleep 100000 </dev/null >/dev/null 2>&1 &",
    ];
    let cmd = match pids {
        Some(p) => p.cmd(ns, None, ns::OO, &args),
        None => ns.oo(None, &args),
    };
    ns.run(cmd, LIMIT, "root's run --linger").expect(0);
    let linger = wait_value(ns, "/run/onlyone/agent.lock", "linger");
    let (pid, _) = linger.split_once(':').expect("one lingerer");
    let pid = pid.parse().unwrap();
    if pids.is_none() {
        settle(pid);
    }
    pid
}

/// Waits until `pid` runs `sleep` and its counters stop moving, so that
/// a reap sees it idle from its first look on.
fn settle(pid: u32) {
    wait_for_exec(pid, "sleep");
    let read = || {
        let st = onlyone::procfs::read_stat(pid).unwrap().unwrap();
        (st.cpu_ticks, onlyone::procfs::io_bytes(pid))
    };
    let mut last = read();
    wait_until("the process to settle", LIMIT, || {
        std::thread::sleep(Duration::from_millis(30));
        let now = read();
        std::mem::replace(&mut last, now) == now
    });
}

/// Root's `reap --json --idle 0s ARGS JOB`: its report, and how long it
/// took.
fn reap(ns: &Ns, job: &str, extra: &[&str]) -> (serde_json::Value, Duration) {
    let mut args = vec!["reap", "--json", "--idle", "0s"];
    args.extend_from_slice(extra);
    args.push(job);
    let out = ns.run(ns.oo(None, &args), Duration::from_secs(25), "root's reap");
    out.expect(0);
    (out.json(), out.took)
}

/// The candidate of a reap's report whose pid is `pid`.
fn candidate(report: &serde_json::Value, pid: u32) -> Option<serde_json::Value> {
    report["candidates"]
        .as_array()?
        .iter()
        .find(|c| c["pid"] == pid)
        .cloned()
}

/// Root's `run --linger JOB`, whose command leaves an idle `sleep` behind
/// and waits, while nobody reads the run's token from its record and
/// starts `sh -c COPY` with it (`ONLYONE_TOKEN`, and `ONLYONE_LOCK` naming
/// root's lock) in its environment. Then the command exits, and the
/// wrapper names what lingers and exits. Returns the lingerer's pid and
/// the copy's.
fn lingering_run_and_a_copy(ns: &mut Ns, job: &str, copy: &str, comm: &str) -> (u32, u32) {
    let lock = format!("/run/onlyone/{job}.lock");
    let go = format!("/run/{job}.go");
    let wrapper = ns.keep(ns.oo(
        None,
        &[
            "run",
            "--linger",
            job,
            "--",
            "sh",
            "-c",
            &format!(
                "setsid sleep 100000 </dev/null >/dev/null 2>&1 & \
                 while [ ! -e {go} ]; do sleep 0.05; done"
            ),
        ],
    ));
    wait_value(ns, &lock, "cmdpid");
    let theirs = ns.keep(ns.sh(
        Some(NOBODY),
        &format!(
            "t=$(sed -n 's/^token=//p' {lock}) && [ -n \"$t\" ] && \
             exec env ONLYONE_TOKEN=$t ONLYONE_LOCK={lock} {copy}"
        ),
    ));
    wait_for_exec(theirs, comm);
    std::fs::write(ns.host_path(&go), "").unwrap();
    wait_until("root's wrapper to exit", LIMIT, || !running(wrapper));
    let linger = wait_value(ns, &lock, "linger");
    let (pid, _) = linger.split_once(':').expect("one lingerer");
    let pid = pid.parse().unwrap();
    settle(pid);
    (pid, theirs)
}

/// Item 5: nobody copies the token from the record of root's live run
/// into a process of its own, before the command exits and leaves an idle
/// process behind (`run --linger`). An idle copy is never ended by root's
/// reap; a busy one (a shell that writes to /dev/null twice a second)
/// never makes the run look active, so the README's fire, `reap -q
/// agent; run -q --linger agent ...`, still ends root's idle leftover and
/// runs.
#[test]
fn a_token_copied_by_another_user_is_neither_reaped_nor_keeps_a_run_active() {
    let Some(mut ns) = Ns::new("a_token_copied_by_another_user_is_neither") else {
        return;
    };
    // An idle copy.
    let (lingerer, idle) = lingering_run_and_a_copy(&mut ns, "idle", "sleep 100000", "sleep");
    reap(&ns, "idle", &[]);
    let (report, _) = reap(&ns, "idle", &[]);
    assert!(
        running(idle) && !signal_pending(idle),
        "root's reap ended nobody's process that copied the token: {report:#}"
    );
    assert!(
        !running(lingerer),
        "root's idle leftover is ended: {report:#}"
    );
    let c = candidate(&report, idle).expect("nobody's copy is a candidate");
    assert_eq!(c["job"], serde_json::Value::Null, "{c:#}");
    assert!(
        c["reason"].as_str().unwrap().contains("nobody"),
        "the reason names nobody: {c:#}"
    );

    // A busy copy, and the README's fire.
    let (lingerer, busy) = lingering_run_and_a_copy(
        &mut ns,
        "agent",
        "sh -c 'while :; do echo x >/dev/null; sleep 0.5; done'",
        "sh",
    );
    reap(&ns, "agent", &[]);
    let before = onlyone::procfs::io_bytes(busy);
    wait_until("nobody's copy to do I/O", LIMIT, || {
        onlyone::procfs::io_bytes(busy) != before
    });
    let out = ns.run(
        ns.sh(
            None,
            "onlyone reap -q --idle 0s agent; onlyone run -q --linger agent -- true",
        ),
        LIMIT,
        "root's fire",
    );
    assert_eq!(
        out.code(),
        0,
        "nobody's busy process with root's token keeps root's run active: {out:#?}"
    );
    assert!(!running(lingerer), "root's idle leftover is ended");
    assert_untouched(busy);
}

/// Waits for the pid a script wrote to `path` (in the namespace).
fn pid_in(ns: &Ns, path: &str) -> u32 {
    wait_until(&format!("{path} to name a pid"), LIMIT, || {
        ns.host_path(path).exists()
    });
    std::fs::read_to_string(ns.host_path(path))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Root's reap of `job` twice (a process first seen by one is idle for
/// the next): the reports.
fn reap_twice(ns: &Ns, job: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    (0..2).map(|_| reap(ns, job, extra).0).collect()
}

/// The candidate `pid` that one of `reports` ended; it is gone.
fn ended_in(reports: &[serde_json::Value], pid: u32) -> serde_json::Value {
    wait_gone(pid);
    reports
        .iter()
        .find_map(|r| candidate(r, pid).filter(|c| c["verdict"] == "ended"))
        .unwrap_or_else(|| panic!("pid {pid} ended by a reap: {reports:#?}"))
}

/// Root's `run --keep-strays` whose command hands work to a worker that
/// drops to uid 4242 and leaves it running; meanwhile nobody copies the
/// run's token and lock path into an idle process of its own. Root's reap
/// of the job ends the worker once idle, known by what it is (the wrapper
/// noted it, by pid and start time), not by its environment, whatever its
/// user; nobody's copy stays foreign and untouched. A user's own run in
/// that user's own directory, reaped by root, the same: the user's kept
/// stray is ended, and the user's own reaps there still work.
#[test]
fn a_stray_a_run_kept_is_reaped_whatever_its_user_and_a_copy_never() {
    let Some(mut ns) = Ns::new("a_stray_a_run_kept_is_reaped") else {
        return;
    };
    let lock = "/run/onlyone/agent.lock";
    let wrapper = ns.keep(ns.oo(
        None,
        &[
            "run",
            "--keep-strays",
            "agent",
            "--",
            "sh",
            "-c",
            &format!(
                "setpriv --reuid={0} --regid={0} --clear-groups -- sleep 100000 \
                 </dev/null >/dev/null 2>&1 & echo $! > /run/stray.tmp && mv /run/stray.tmp \
                 /run/stray; while [ ! -e /run/go ]; do sleep 0.05; done",
                ns::NO_PASSWD
            ),
        ],
    ));
    let stray = pid_in(&ns, "/run/stray");
    let copy = ns.keep(ns.sh(
        Some(NOBODY),
        &format!(
            "t=$(sed -n 's/^token=//p' {lock}) && [ -n \"$t\" ] && \
             exec env ONLYONE_TOKEN=$t ONLYONE_LOCK={lock} sleep 100000"
        ),
    ));
    wait_for_exec(copy, "sleep");
    std::fs::write(ns.host_path("/run/go"), "").unwrap();
    wait_until("root's wrapper to exit", LIMIT, || !running(wrapper));
    assert!(!ns.host_path(lock).exists(), "the run released its lock");
    settle(stray);
    settle(copy);
    assert_eq!(onlyone::procfs::uid_of(stray), Some(ns::NO_PASSWD));
    let reports = reap_twice(&ns, "agent", &[]);
    let c = ended_in(&reports, stray);
    assert_eq!(c["job"], "agent", "{reports:#?}");
    assert_untouched(copy);
    for report in &reports {
        let c = candidate(report, copy).expect("nobody's copy is a candidate");
        assert_eq!(c["job"], serde_json::Value::Null, "{report:#}");
    }

    // A user's own run in the user's own directory, reaped by root.
    ns.must(Some(NOBODY), "mkdir -m 0700 /tmp/nd");
    ns.run(
        ns.oo(
            Some(NOBODY),
            &[
                "--dir",
                "/tmp/nd",
                "run",
                "--keep-strays",
                "job",
                "--",
                "sh",
                "-c",
                "sleep 100000 </dev/null >/dev/null 2>&1 & echo $! > /tmp/nd/stray.tmp && \
                 mv /tmp/nd/stray.tmp /tmp/nd/stray",
            ],
        ),
        LIMIT,
        "nobody's run --keep-strays",
    )
    .expect(0);
    let stray = pid_in(&ns, "/tmp/nd/stray");
    settle(stray);
    let reports = reap_twice(&ns, "job", &["--dir", "/tmp/nd"]);
    ended_in(&reports, stray);
    let out = ns.run(
        ns.oo(Some(NOBODY), &["--dir", "/tmp/nd", "reap", "--json", "job"]),
        LIMIT,
        "nobody's own reap",
    );
    out.expect(0);
    assert_eq!(out.json()["errors"], serde_json::json!([]), "{out:#?}");
}

/// A FUSE file system that never answers: a user's with `allow_other`
/// (as `fusermount3` mounts one where /etc/fuse.conf says
/// `user_allow_other`; without it, root is refused at once, which blocks
/// nothing). Mounts one at each `TARGET...`, creates `READY`, then holds
/// the devices open and never reads them.
const HUNG_FUSE: &str = r#"
import ctypes, os, sys, time
ready, targets = sys.argv[1], sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
fds = []
for target in targets:
    fd = os.open("/dev/fuse", os.O_RDWR)
    fds.append(fd)
    opts = "fd=%d,rootmode=40000,user_id=65534,group_id=65534,allow_other" % fd
    if libc.mount(b"onlyone-test-hang", target.encode(), b"fuse", 0, opts.encode()) != 0:
        sys.exit("mount %s: %s" % (target, os.strerror(ctypes.get_errno())))
open(ready, "w").close()
while True:
    time.sleep(1000)
"#;

/// Hung mounts: on drop, pass or fail, their devices are closed (the
/// kernel then fails whatever waits on them) and they are unmounted.
pub(crate) struct HungMount {
    server: u32,
    umount: Command,
}

impl Drop for HungMount {
    fn drop(&mut self) {
        kill9_pid(self.server);
        let _ = self
            .umount
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Mounts a FUSE file system that never answers (as root, standing in for
/// a user's `fusermount3` with `allow_other`) on each of `targets`, which
/// are directories of the namespace; `None` (saying why) where there is no
/// `python3` or `/dev/fuse`.
pub(crate) fn hang_at(ns: &mut Ns, targets: &[&str]) -> Option<HungMount> {
    if !have_python3() {
        return None;
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("no /dev/fuse; skipped");
        return None;
    }
    let ready = "/run/fuse-ready";
    let mut args = vec!["-c", HUNG_FUSE, ready];
    args.extend_from_slice(targets);
    let server = ns.keep(ns.cmd(None, "/usr/bin/python3", &args));
    let mut umount = vec!["-l"];
    umount.extend_from_slice(targets);
    let mount = HungMount {
        server,
        umount: ns.cmd(None, "umount", &umount),
    };
    wait_until("the FUSE mounts", LIMIT, || {
        ns.host_path(ready).exists() || !running(server)
    });
    assert!(running(server), "the FUSE mounts could not be made");
    Some(mount)
}

/// Item 6: nobody's process names a lock under a FUSE mount that never
/// answers. Root's `reap --deadline 3s` ends within its deadline, and
/// still ends root's idle leftover.
#[test]
fn a_lock_path_on_a_fuse_mount_that_never_answers_does_not_hold_up_reap() {
    let Some(mut ns) = Ns::new("a_lock_path_on_a_fuse_mount") else {
        return;
    };
    ns.must(Some(NOBODY), "mkdir /tmp/hang");
    let Some(_mount) = hang_at(&mut ns, &["/tmp/hang"]) else {
        return;
    };
    let lingerer = roots_lingering_run(&ns, None);
    let marked = ns.keep(ns.cmd(
        Some(NOBODY),
        "env",
        &["ONLYONE_LOCK=/tmp/hang/x/agent.lock", "sleep", "100000"],
    ));
    wait_for_exec(marked, "sleep");
    for _ in 0..2 {
        let (report, took) = reap(&ns, "agent", &["--deadline", "3s"]);
        assert!(
            took < Duration::from_secs(6),
            "reap --deadline 3s took {took:?}: {report:#}"
        );
    }
    assert!(!running(lingerer), "root's idle leftover is ended");
    assert_untouched(marked);
}

// ---------------------------------------------------------------------------
// Reused ids

/// The lowered `pid_max` of [`Pids`].
const PID_MAX: u32 = 1000;

/// A PID namespace inside an [`Ns`] (below its mount namespace, with a
/// `/proc` of its own and the same `/run`, `/tmp` and `/var`), whose
/// `pid_max` is [`PID_MAX`]. Its init ignores SIGCHLD, so what it adopts
/// is reaped at once (a zombie would keep its pid). Its first 300 pids are
/// used up at the start: past `pid_max` the kernel wraps back to 300, and
/// every process the tests look at has a pid that comes round again.
struct Pids {
    /// Its init, as the host numbers it.
    init: u32,
}

impl Pids {
    fn new(ns: &mut Ns, test: &str) -> Option<Pids> {
        let release = rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        if (v.next().unwrap_or(0), v.next().unwrap_or(0)) < (6, 14) {
            eprintln!("{test}: skipped: pid_max is per PID namespace from Linux 6.14 ({release})");
            return None;
        }
        if !have_python3() {
            return None;
        }
        let ignores = Command::new("env")
            .args(["--ignore-signal=CHLD", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ignores {
            eprintln!("{test}: skipped: env cannot start a program with SIGCHLD ignored");
            return None;
        }
        let script = format!(
            "echo {PID_MAX} > /proc/sys/kernel/pid_max && i=0 && \
             while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done && \
             exec env --ignore-signal=CHLD sleep 100000"
        );
        let unshare = ns.keep(ns.cmd(
            None,
            "unshare",
            &["-p", "-f", "--mount-proc", "--", "sh", "-c", &script],
        ));
        let init = || {
            onlyone::procfs::children_of(unshare)
                .into_iter()
                .find(|&c| {
                    std::fs::read_to_string(format!("/proc/{c}/comm"))
                        .is_ok_and(|c| c.trim() == "sleep")
                })
        };
        wait_for(LIMIT, || init().is_some() || !running(unshare));
        let init = init().unwrap_or_else(|| panic!("{test}: the PID namespace could not be made"));
        let pids = Pids { init };
        // A sysctl shows the reader's PID namespace's value: read inside.
        let out = ns.run(
            pids.cmd(ns, None, "cat", &["/proc/sys/kernel/pid_max"]),
            LIMIT,
            "pid_max",
        );
        assert_eq!(out.stdout.trim(), PID_MAX.to_string(), "{out:#?}");
        Some(pids)
    }

    /// A path of the namespace's `/proc`, as the test process reaches it.
    fn proc(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root/proc/{rel}", self.init))
    }

    /// `/proc/PID/stat` of a process of the namespace, by its pid there.
    fn stat(&self, pid: u32) -> Option<onlyone::procfs::ProcStat> {
        let text = std::fs::read_to_string(self.proc(&format!("{pid}/stat"))).ok()?;
        onlyone::procfs::parse_stat(&text)
    }

    /// True while the namespace's process `pid` lives, with no signal
    /// pending.
    fn untouched(&self, pid: u32) -> bool {
        self.stat(pid).is_some_and(|s| !s.is_dead())
            && std::fs::read_to_string(self.proc(&format!("{pid}/status"))).is_ok_and(|s| {
                s.lines()
                    .filter(|l| l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
                    .all(|l| {
                        l.split_whitespace()
                            .nth(1)
                            .is_some_and(|m| m.trim_start_matches('0').is_empty())
                    })
            })
    }

    /// Waits until the namespace has no process `pid` (its init reaps
    /// what it adopts).
    fn wait_gone(&self, pid: u32) {
        wait_until(&format!("pid {pid} to be gone"), LIMIT, || {
            !self.proc(&pid.to_string()).exists()
        });
    }

    /// `prog args...` in the namespace, as root or as `uid`.
    fn cmd(&self, ns: &Ns, uid: Option<u32>, prog: &str, args: &[&str]) -> Command {
        let init = self.init.to_string();
        let mut full = vec!["-t", &init, "-m", "-p", "--"];
        let ids;
        if let Some(uid) = uid {
            ids = [format!("--reuid={uid}"), format!("--regid={uid}")];
            full.extend(["setpriv", &ids[0], &ids[1], "--clear-groups", "--"]);
        }
        full.push(prog);
        full.extend_from_slice(args);
        let mut c = ns.cmd(None, "nsenter", &full);
        if uid.is_some() {
            c.env("HOME", "/tmp");
        }
        c
    }

    /// A shell script in the namespace, as root, which must exit 0.
    fn must(&self, ns: &Ns, script: &str) {
        ns.run(self.cmd(ns, None, "sh", &["-c", script]), LIMIT, script)
            .expect(0);
    }
}

/// nobody's fork loop: forks until a child gets the pid `TARGET` (it is
/// free: its process, and any group or session of that id, are gone).
/// That child leads a new process group (`group`) or session (`session`)
/// of that id, starts `PARK...` in it, writes its pid to `OUT` and exits,
/// leaving `PARK` alone in the group or session. Gives up after 60 s.
const REUSE: &str = r#"
import os, sys, time
target, how, out, park = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
end = time.monotonic() + 60
while time.monotonic() < end:
    pid = os.fork()
    if pid == 0:
        if os.getpid() == target:
            if how == "session":
                os.setsid()
            else:
                os.setpgid(0, 0)
            kid = os.fork()
            if kid == 0:
                null = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execvp(park[0], park)
            with open(out + ".tmp", "w") as f:
                f.write("%d\n" % kid)
            os.rename(out + ".tmp", out)
        os._exit(0)
    os.waitpid(pid, 0)
    if pid == target:
        sys.exit(0)
sys.exit("pid %d did not come round in 60 s" % target)
"#;

/// A parked process that stays idle.
const IDLE: &[&str] = &["sleep", "100000"];
/// A parked process that writes to /dev/null twice a second: busy, as
/// reap measures it.
const BUSY: &[&str] = &["sh", "-c", "while :; do echo x >/dev/null; sleep 0.5; done"];

/// nobody takes the pid `target` (free) and leaves `park` alone in a new
/// group or session of that id. Returns the parked process's pid.
fn nobody_reuses(ns: &Ns, pids: &Pids, target: u32, how: &str, park: &[&str]) -> u32 {
    let out = format!("/tmp/reused-{target}");
    let target_arg = target.to_string();
    let mut args = vec!["-c", REUSE, &target_arg, how, &out];
    args.extend_from_slice(park);
    let run = ns.run(
        pids.cmd(ns, Some(NOBODY), "/usr/bin/python3", &args),
        Duration::from_secs(90),
        "nobody's fork loop",
    );
    run.expect(0);
    let kid: u32 = std::fs::read_to_string(ns.host_path(&out))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let st = pids.stat(kid).expect("the parked process lives");
    match how {
        "session" => assert_eq!(st.session, target, "parked in session {target}"),
        _ => assert_eq!(st.pgrp, target, "parked in group {target}"),
    }
    kid
}

/// Root's lingering run whose lingerer (leading its own session) has
/// exited: the record still names it, and its session's id is free.
/// nobody takes that id for a session of its own with `park` in it.
/// Returns the parked process's pid.
fn lingerer_session_reused(ns: &Ns, pids: &Pids, park: &[&str]) -> u32 {
    let lingerer = roots_lingering_run(ns, Some(pids));
    // `setsid` makes the session, then execs `sleep`.
    wait_until("the lingerer to run sleep", LIMIT, || {
        pids.stat(lingerer).is_some_and(|s| s.comm == "sleep")
    });
    let st = pids.stat(lingerer).unwrap();
    assert_eq!(st.session, lingerer, "the lingerer leads its session");
    pids.must(ns, &format!("kill -9 {lingerer}"));
    pids.wait_gone(lingerer);
    nobody_reuses(ns, pids, lingerer, "session", park)
}

/// Item 3: root's lingering run leaves a process that leads a session,
/// and it exits. nobody forks until it has that pid, makes a session of
/// it, and parks an idle process there. Root's `reap agent` does not end
/// it as the run's work, and the lock is not held by it.
#[test]
fn a_session_id_reused_after_a_lingerer_exited_is_not_the_runs_work() {
    let Some(mut ns) = Ns::new("a_session_id_reused_after_a_lingerer") else {
        return;
    };
    let Some(pids) = Pids::new(&mut ns, "a_session_id_reused_after_a_lingerer") else {
        return;
    };
    let parked = lingerer_session_reused(&ns, &pids, IDLE);
    let root = |args: &[&str]| ns.run(pids.cmd(&ns, None, ns::OO, args), LIMIT, "root's onlyone");
    let reap = || {
        let out = root(&["reap", "--json", "--idle", "0s", "agent"]);
        out.expect(0);
        out.json()
    };
    reap();
    let report = reap();
    assert!(
        pids.untouched(parked),
        "root's reap ended nobody's process in a reused session: {report:#}"
    );
    assert!(
        candidate(&report, parked).is_none_or(|c| c["job"].is_null()),
        "nobody's process is not the run's: {report:#}"
    );
    let out = root(&["precheck", "agent"]);
    assert_eq!(
        out.code(),
        0,
        "a process in a reused session holds root's lock: {out:#?}"
    );
    assert!(pids.untouched(parked));
}

/// Item 4: once the process whose id a run's record names is gone, nobody
/// takes the id for a group (the command's, after the wrapper and the
/// command were killed) or a session (a lingerer's) of its own and parks a
/// busy process there. Root's next fire runs, and reap does not call the
/// run live and active.
#[test]
fn a_group_or_session_id_reused_by_another_user_keeps_no_run_held() {
    let Some(mut ns) = Ns::new("a_group_or_session_id_reused") else {
        return;
    };
    let Some(pids) = Pids::new(&mut ns, "a_group_or_session_id_reused") else {
        return;
    };
    ns.keep(pids.cmd(&ns, None, ns::OO, &["run", "job", "--", "sleep", "100000"]));
    let root = |args: &[&str]| ns.run(pids.cmd(&ns, None, ns::OO, args), LIMIT, "root's onlyone");
    let check = |parked: u32, job: &str| {
        let before = std::fs::read_to_string(pids.proc(&format!("{parked}/io"))).ok();
        let out = root(&["reap", "--json", "--idle", "0s", job]);
        out.expect(0);
        wait_until("the parked process to do I/O", LIMIT, || {
            std::fs::read_to_string(pids.proc(&format!("{parked}/io"))).ok() != before
        });
        let out = root(&["reap", "--json", "--idle", "0s", job]);
        out.expect(0);
        let report = out.json();
        assert!(
            candidate(&report, parked).is_none_or(|c| c["job"].is_null()),
            "{job}: nobody's process in a reused id is taken for the run's: {report:#}"
        );
        let out = root(&["precheck", job]);
        assert_eq!(out.code(), 0, "{job}: held by nobody's process: {out:#?}");
        root(&["run", job, "--", "true"]).expect(0);
        assert!(
            pids.untouched(parked),
            "{job}: nobody's process was signalled"
        );
    };

    // The group of a crashed run's command.
    let cmd: u32 = wait_value(&ns, "/run/onlyone/job.lock", "cmdpid")
        .parse()
        .unwrap();
    wait_until("the command to run sleep", LIMIT, || {
        pids.stat(cmd).is_some_and(|s| s.comm == "sleep")
    });
    let wrapper = owner_of(&ns, "/run/onlyone/job.lock");
    pids.must(&ns, &format!("kill -9 {wrapper} && kill -9 {cmd}"));
    pids.wait_gone(cmd);
    let parked = nobody_reuses(&ns, &pids, cmd, "group", BUSY);
    check(parked, "job");

    // The session of a lingering run's leftover.
    let parked = lingerer_session_reused(&ns, &pids, BUSY);
    check(parked, "agent");
}
