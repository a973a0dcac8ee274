//! Another account attacks a root job (SPEC "Files others can touch are
//! hostile"; issue: multi-user hosts). Every test runs in a private mount
//! namespace with fresh tmpfs `/run` and `/tmp` ([`support::ns::Ns`]), so
//! root's default paths are real, and the attacker is `nobody` or a uid
//! with no passwd entry, with nothing but an ordinary account.

use crate::support;

use std::time::Duration;

use support::ns::{NOBODY, Ns, wait_for_exec};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// A record as a forger writes it: a live process's real pid and start
/// time (public in /proc/PID/stat), this boot, this host.
fn forged_record(pid: u32, start: u64) -> String {
    format!(
        "{pid}\nstart={start}\nboot={}\ntoken={}\nsince=1764400000\nhost={}\nmode=run\n\
         cmd=sleep 100000\nonlyone=1\n",
        boot_id(),
        "f".repeat(32),
        onlyone::procfs::host_name()
    )
}

#[test]
fn the_namespace_has_fresh_defaults() {
    let Some(ns) = Ns::new("the_namespace_has_fresh_defaults") else {
        return;
    };
    let out = ns.must(None, "ls -A /run /tmp; stat -c %a /tmp /run/lock");
    assert!(!out.stdout.contains("onlyone"), "{out:#?}");
    assert!(out.stdout.ends_with("1777\n1777\n"), "{out:#?}");
    let out = ns.run(
        ns.oo(Some(NOBODY), &["--version"]),
        LIMIT,
        "onlyone as nobody",
    );
    out.expect(0);
}

/// Item 1: nobody forges a record in a sticky world-writable directory
/// naming a root daemon with its real start time. Root's precheck does
/// not skip, and run --replace and stop never signal the daemon.
#[test]
fn a_forged_record_never_makes_root_signal_a_process_of_another_user() {
    let Some(mut ns) = Ns::new("a_forged_record_never_makes_root_signal") else {
        return;
    };
    let (daemon, start) = ns.root_daemon();
    for dir in ["/run/lock", "/tmp"] {
        let lock = format!("{dir}/job.lock");
        ns.must(
            Some(NOBODY),
            &format!("printf '%s' '{}' > {lock}", forged_record(daemon, start)),
        );
        let out = ns.run(
            ns.oo(None, &["--dir", dir, "precheck", "job"]),
            LIMIT,
            "precheck",
        );
        out.expect(0);
        let out = ns.run(ns.oo(None, &["--dir", dir, "stop", "job"]), LIMIT, "stop");
        assert!(
            !out.stderr.contains("stopped the run"),
            "stop claims to have stopped a forged run: {out:#?}"
        );
        assert_untouched(daemon);
        let out = ns.run(
            ns.oo(
                None,
                &["--dir", dir, "run", "--replace", "job", "--", "true"],
            ),
            LIMIT,
            "run --replace",
        );
        out.expect(0);
        assert_untouched(daemon);
        let out = ns.run(
            ns.oo(None, &["--dir", dir, "run", "job", "--", "true"]),
            LIMIT,
            "run",
        );
        out.expect(0);
        assert_untouched(daemon);
        assert!(alive(daemon, start));
    }
}

/// The value of `key=` in the lock file at `path` (in the namespace).
fn record_value(ns: &Ns, path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(ns.host_path(path)).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
}

/// Root's `run job -- sleep 100000` in the default directory, and its
/// wrapper's and command's pids once its record names the command.
fn root_run(ns: &mut Ns, name: &str, extra: &[&str]) -> (u32, u32) {
    let mut args = vec!["run"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[name, "--", "sleep", "100000"]);
    let wrapper = ns.keep(ns.oo(None, &args));
    let path = format!("/run/onlyone/{name}.lock");
    wait_until("root's run names its command", LIMIT, || {
        record_value(ns, &path, "cmdpid").is_some()
    });
    let cmd = record_value(ns, &path, "cmdpid").unwrap().parse().unwrap();
    wait_for_exec(cmd, "sleep");
    (wrapper, cmd)
}

/// Root's next fire of `name` runs (exit 0) within the limit.
fn next_fire_runs(ns: &Ns, name: &str) {
    let out = ns.run(
        ns.oo(None, &["run", name, "--", "true"]),
        LIMIT,
        "root's next fire",
    );
    assert_eq!(out.code(), 0, "root's next fire did not run: {out:#?}");
}

/// Item 7: nobody reads the token from root's 0644 record and runs a
/// process that carries it. After root's run is killed, that process is
/// not a process of the run: the next fire runs, and nothing signals it.
#[test]
fn a_token_copied_by_another_user_does_not_hold_roots_lock() {
    let Some(mut ns) = Ns::new("a_token_copied_by_another_user") else {
        return;
    };
    let (wrapper, cmd) = root_run(&mut ns, "job", &[]);
    let token = record_value(&ns, "/run/onlyone/job.lock", "token").unwrap();
    let squatter = ns.keep(ns.cmd(
        Some(NOBODY),
        "env",
        &[&format!("ONLYONE_TOKEN={token}"), "sleep", "100000"],
    ));
    wait_for_exec(squatter, "sleep");
    let squatter_start = start_of(squatter);
    kill9_pid(wrapper);
    kill9_pid(cmd);
    wait_gone(cmd);
    let out = ns.run(ns.oo(None, &["status", "--json", "job"]), LIMIT, "status");
    assert_ne!(out.json()["locks"][0]["state"], "held", "{out:#?}");
    let out = ns.run(ns.oo(None, &["reap", "job"]), LIMIT, "reap");
    out.expect(0);
    next_fire_runs(&ns, "job");
    assert!(
        alive(squatter, squatter_start),
        "nobody's process was signalled"
    );
    assert_untouched(squatter);

    // Nor does a setuid program nobody runs with it (its effective and
    // saved uids are root's; its real uid stays nobody's): a script's
    // release is not kept waiting on it, nor is a crashed run held.
    ns.must(
        None,
        "cp /bin/sleep /run/.oo-test/suid-sleep; chmod 4755 /run/.oo-test/suid-sleep",
    );
    let out = ns.run(
        ns.sh(
            None,
            "vars=$(onlyone acquire --owner $$ --export script) || exit; eval \"$vars\"; \
             echo \"$ONLYONE_TOKEN\"",
        ),
        LIMIT,
        "root's script acquires",
    );
    out.expect(0);
    let token = out.stdout.trim().to_owned();
    let suid = ns.keep(ns.cmd(
        Some(NOBODY),
        "env",
        &[
            &format!("ONLYONE_TOKEN={token}"),
            "/run/.oo-test/suid-sleep",
            "100000",
        ],
    ));
    wait_until("the setuid sleep runs", LIMIT, || {
        std::fs::read_to_string(format!("/proc/{suid}/status")).is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.contains("65534"))
                && s.contains("suid-sleep")
        })
    });
    // The script's shell is gone: only nobody's setuid process carries
    // the token now. (Where root lacks CAP_SYS_PTRACE, as in some
    // containers, root cannot read a setuid process's environment at all,
    // and this passes either way.)
    let out = ns.run(ns.oo(None, &["precheck", "script"]), LIMIT, "precheck");
    assert_eq!(
        out.code(),
        0,
        "nobody's setuid process holds root's lock: {out:#?}"
    );
    next_fire_runs(&ns, "script");
    assert_untouched(suid);

    // With --linger and no crash at all: the copied token keeps nothing.
    let out = ns.run(
        ns.oo(None, &["run", "--linger", "agent", "--", "true"]),
        LIMIT,
        "run --linger",
    );
    out.expect(0);
    let token = record_value(&ns, "/run/onlyone/agent.lock", "token");
    if let Some(token) = token {
        ns.keep(ns.cmd(
            Some(NOBODY),
            "env",
            &[&format!("ONLYONE_TOKEN={token}"), "sleep", "100000"],
        ));
    }
    next_fire_runs(&ns, "agent");
}

/// Item 11: root's run is killed, and nobody holds a flock on its 0644
/// record (taken the moment the wrapper's own lock went). Only a flock of
/// the run proves it alive: the next fire runs.
#[test]
fn another_users_flock_on_a_dead_runs_record_is_no_proof_of_life() {
    let Some(mut ns) = Ns::new("another_users_flock_on_a_dead_run") else {
        return;
    };
    for (kind, flag) in [("shared", "-s"), ("exclusive", "-x")] {
        let (wrapper, cmd) = root_run(&mut ns, "job", &[]);
        // flock(1) waits for the wrapper's exclusive lock, and takes its
        // own the moment the wrapper dies.
        let holder = ns.keep(ns.cmd(
            Some(NOBODY),
            "flock",
            &[flag, "/run/onlyone/job.lock", "sleep", "100000"],
        ));
        wait_until("nobody's flock(1) waits", LIMIT, || {
            std::fs::read_to_string("/proc/locks").is_ok_and(|l| {
                l.lines()
                    .any(|l| l.contains("->") && l.contains(&holder.to_string()))
            }) || !running(holder)
        });
        assert!(
            running(holder),
            "nobody's flock(1) could not open the record"
        );
        kill9_pid(wrapper);
        kill9_pid(cmd);
        wait_gone(cmd);
        wait_until("nobody holds the flock", LIMIT, || {
            std::fs::read_to_string("/proc/locks").is_ok_and(|l| {
                l.lines()
                    .any(|l| !l.contains("->") && l.contains(&format!(" {holder} ")))
            })
        });
        let out = ns.run(ns.oo(None, &["precheck", "job"]), LIMIT, "precheck");
        assert_eq!(
            out.code(),
            0,
            "{kind}: precheck skips for a dead run: {out:#?}"
        );
        next_fire_runs(&ns, "job");
        kill9_pid(holder);
    }
}

/// Item 4: nobody holds a flock on root's lock directory (0755, which
/// anyone may open) forever. The removal guard is a file no other account
/// can open: every run, takeover and release goes on, promptly.
#[test]
fn a_flock_on_roots_lock_directory_stops_nothing() {
    let Some(mut ns) = Ns::new("a_flock_on_roots_lock_directory") else {
        return;
    };
    next_fire_runs(&ns, "job");
    let holder = ns.keep(ns.cmd(Some(NOBODY), "flock", &["/run/onlyone", "sleep", "100000"]));
    wait_until("nobody holds the directory's flock", LIMIT, || {
        std::fs::read_to_string("/proc/locks").is_ok_and(|l| {
            l.lines()
                .any(|l| !l.contains("->") && l.contains(&format!(" {holder} ")))
        }) || !running(holder)
    });
    assert!(running(holder));
    // Nor can nobody take the guard itself.
    let out = ns.run(
        ns.cmd(
            Some(NOBODY),
            "flock",
            &["-n", "/run/onlyone/.onlyone-guard.0", "true"],
        ),
        LIMIT,
        "nobody's flock on the guard",
    );
    assert_ne!(
        out.code(),
        0,
        "nobody could lock root's removal guard: {out:#?}"
    );
    let quick = Duration::from_secs(5);
    // A run, its release included.
    let out = ns.run(ns.oo(None, &["run", "job", "--", "true"]), LIMIT, "run");
    out.expect(0).within(quick);
    // A takeover of a killed run.
    let (wrapper, cmd) = root_run(&mut ns, "job", &[]);
    kill9_pid(wrapper);
    kill9_pid(cmd);
    wait_gone(cmd);
    let out = ns.run(
        ns.oo(None, &["run", "job", "--", "true"]),
        LIMIT,
        "takeover",
    );
    out.expect(0).within(quick);
    // release --force of a live run's lock.
    let (_wrapper, _cmd) = root_run(&mut ns, "other", &[]);
    let out = ns.run(
        ns.oo(None, &["release", "--force", "other"]),
        LIMIT,
        "release --force",
    );
    out.expect(0).within(quick);
}

/// An inotify racer, as nobody: share-locks every file created in `dir`
/// the moment it appears, and holds it; writes `ready` once watching.
const SHARE_LOCK_RACER: &str = r#"
import ctypes, fcntl, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
dir, ready = sys.argv[1], sys.argv[2]
fd = libc.inotify_init1(0)
libc.inotify_add_watch(fd, dir.encode(), 0x100)  # IN_CREATE
open(ready, "w").close()
held = []
while True:
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        wd, mask, cookie, n = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + n].rstrip(b"\0").decode()
        i += 16 + n
        try:
            f = os.open(os.path.join(dir, name), os.O_RDONLY | os.O_NONBLOCK)
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held.append(f)
            if len(held) > 200:
                os.close(held.pop(0))
        except OSError:
            pass
"#;

/// Item 6: a watcher share-locks each new temp file before root's
/// exclusive flock can be taken. Temp files are created 0600: no other
/// account can open them, and every one of root's runs goes through.
#[test]
fn a_watcher_that_locks_new_temp_files_fails_no_run() {
    let Some(mut ns) = Ns::new("a_watcher_that_locks_new_temp_files") else {
        return;
    };
    for dir in ["/run/lock", "/tmp"] {
        let ready = format!("{dir}/.racer-ready");
        ns.attacker(
            NOBODY,
            &format!("exec /usr/bin/python3 -c '{SHARE_LOCK_RACER}' {dir} {ready}"),
            &ready,
        );
        for i in 0..30 {
            let out = ns.run(
                ns.oo(None, &["--dir", dir, "run", "job", "--", "true"]),
                LIMIT,
                "root's run beside the racer",
            );
            assert_eq!(out.code(), 0, "{dir}: run {i} failed: {out:#?}");
        }
    }
}

/// Item 8: a record shows a run's command line, as `ps` does to whoever
/// may see the process: 0644 where /proc shows every user's processes,
/// 0600 where it hides them (hidepid), so nobody never reads root's
/// secret from it.
#[test]
fn the_record_is_as_visible_as_the_process() {
    let Some(mut ns) = Ns::new("the_record_is_as_visible_as_the_process") else {
        return;
    };
    let mode = |ns: &Ns, path: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(ns.host_path(path))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    let secret = "--password=S3cret";
    let w = ns.keep(ns.oo(
        None,
        &[
            "run",
            "open",
            "--",
            "sh",
            "-c",
            "sleep 100000",
            "sh",
            secret,
        ],
    ));
    wait_until("the run's record", LIMIT, || {
        record_value(&ns, "/run/onlyone/open.lock", "cmdpid").is_some() || !running(w)
    });
    assert_eq!(mode(&ns, "/run/onlyone/open.lock"), 0o644);
    // A /proc that hides other users' processes.
    ns.must(None, "mount -t proc -o hidepid=2 proc /proc");
    let w = ns.keep(ns.oo(
        None,
        &[
            "run",
            "hidden",
            "--",
            "sh",
            "-c",
            "sleep 100000",
            "sh",
            secret,
        ],
    ));
    wait_until("the run's record", LIMIT, || {
        record_value(&ns, "/run/onlyone/hidden.lock", "cmdpid").is_some() || !running(w)
    });
    assert_eq!(mode(&ns, "/run/onlyone/hidden.lock"), 0o600);
    let out = ns.run(
        ns.sh(Some(NOBODY), "cat /run/onlyone/hidden.lock"),
        LIMIT,
        "nobody reads the record",
    );
    assert!(!out.stdout.contains("S3cret"), "{out:#?}");
    // Root still sees it held, and so does its own status.
    let out = ns.run(ns.oo(None, &["precheck", "hidden"]), LIMIT, "precheck");
    out.expect(75);
}

/// Item 1, for the reaper and stop: nobody's own live record in a sticky
/// directory names a root daemon as what lingers after its run. Root's `reap` and `stop` end only what the
/// record may name: nobody's own processes, never root's.
#[test]
fn a_record_names_only_its_writers_processes_to_reap_and_stop() {
    let Some(mut ns) = Ns::new("a_record_names_only_its_writers_processes") else {
        return;
    };
    let (daemon, dstart) = ns.root_daemon();
    let own = ns.keep(ns.cmd(Some(NOBODY), "sleep", &["100000"]));
    wait_for_exec(own, "sleep");
    let ostart = start_of(own);
    let record = format!(
        "{own}\nstart={ostart}\nboot={}\ntoken={}\nsince=1764400000\nhost={}\nmode=script\n\
         cmd=sleep 100000\nlinger={daemon}:{dstart}\nonlyone=1\n",
        boot_id(),
        "e".repeat(32),
        onlyone::procfs::host_name()
    );
    ns.must(
        Some(NOBODY),
        &format!("printf '%s' '{record}' > /run/lock/agent.lock"),
    );
    let out = ns.run(
        ns.oo(
            None,
            &["--dir", "/run/lock", "reap", "--dry-run", "--json", "agent"],
        ),
        LIMIT,
        "reap --dry-run",
    );
    out.expect(0);
    let candidates = out.json()["candidates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        candidates.iter().any(|c| c["pid"] == own),
        "nobody's own process is the run's: {out:#?}"
    );
    assert!(
        !candidates.iter().any(|c| c["pid"] == daemon),
        "reap takes root's daemon for a process of nobody's run: {out:#?}"
    );
    let out = ns.run(
        ns.oo(
            None,
            &["--dir", "/run/lock", "reap", "agent", "--idle", "0s"],
        ),
        LIMIT,
        "reap",
    );
    out.expect(0);
    assert_untouched(daemon);
    let out = ns.run(
        ns.oo(None, &["--dir", "/run/lock", "stop", "agent"]),
        LIMIT,
        "stop",
    );
    assert_untouched(daemon);
    assert!(alive(daemon, dstart), "{out:#?}");
}
