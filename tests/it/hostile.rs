//! Hostile environments: the premises of the protocol that real hosts
//! break. A lock directory shared between hosts, one user with two
//! sessions, time and PID namespaces, `/tmp` cleaning, a path LOCK that
//! names a user's file, daemons that clear their environment, and
//! directories that are full, read-only or not ours. Each test reproduces
//! what a user ran into, with real processes, namespaces and filesystems
//! where the machine allows (as root), and says when it cannot.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;

const HANG: Duration = Duration::from_secs(30);

/// A test's [`Sandbox`]: a temp dir, and the processes a test started,
/// killed at the end. The onlyone commands it runs carry no marker.
struct World {
    sb: Sandbox,
}

derefs_to_sandbox!(World);

impl World {
    fn new() -> World {
        World {
            sb: Sandbox::new("ONLYONE_HOSTILE_MARK"),
        }
    }

    /// `onlyone --dir DIR`, with no directory from the environment.
    fn oo_cmd(&self) -> Command {
        self.oo_in(self.dir())
    }

    /// `onlyone --dir dir`, marked (what it starts is ended with the test).
    fn oo_in(&self, dir: &Path) -> Command {
        let mut c = self.program(BIN);
        c.arg("--dir")
            .arg(dir)
            .env_remove("ONLYONE_DIR")
            .env_remove("ONLYONE_ALLOW_SHARED_FS")
            .env_remove("ONLYONE_TEST_FSTYPE");
        c
    }

    fn oo(&self, args: &[&str]) -> Out {
        let mut c = self.oo_cmd();
        c.args(args);
        finish(c, HANG)
    }

    fn status(&self, name: &str) -> serde_json::Value {
        let out = self.oo(&["status", "--json", name]);
        out.expect(0);
        out.json()["locks"][0].clone()
    }
}

/// A record as another host writes it: its host name and boot id.
fn foreign_record(pid: u32, start: u64, host: &str, boot: &str) -> String {
    format!(
        "{pid}\nstart={start}\nboot={boot}\ntoken={}\nsince=1764400000\nhost={host}\n\
         mode=run\ncmd=the other host's run\nonlyone=1\n",
        "c".repeat(32)
    )
}

const OTHER_BOOT: &str = "00000000-1111-2222-3333-444444444444";

// ---------------------------------------------------------------------------
// 1. A lock directory shared between hosts

/// A record written by another host (its name and boot id both differ)
/// says nothing about this host's processes: never stale here. It is
/// unknown: run and acquire refuse it naming the host and the way out,
/// precheck fails open, status says so, and the file is left alone.
#[test]
fn a_record_of_another_host_is_never_taken_over() {
    let w = World::new();
    let path = w.lock("x");
    let text = foreign_record(4242, 1234, "otherhost", OTHER_BOOT);
    put(&path, &text);
    let ran = w.dir().join("ran");
    w.oo(&["run", "x", "--", "touch", ran.to_str().unwrap()])
        .expect(125)
        .says("another host, `otherhost`")
        .says(&format!("onlyone release --force {}", path.display()));
    assert!(!ran.exists(), "the command ran beside the other host's run");
    w.oo(&["acquire", "x"]).expect(125).says("`otherhost`");
    w.oo(&["precheck", "x"]).expect(0).says("cannot be judged");
    let s = w.status("x");
    assert_eq!(s["state"], "unknown", "{s:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    // Once the operator knows better: release --force clears it.
    w.oo(&["release", "--force", "x"]).expect(0);
    w.oo(&["run", "x", "--", "true"]).expect(0);
}

/// The same host name with another boot id is a reboot of this host: stale.
/// The same boot id is the same kernel, whatever the host is called now (a
/// renamed host): judged on its pids as always.
#[test]
fn a_reboot_of_this_host_is_stale_and_a_renamed_host_is_this_host() {
    let mut w = World::new();
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    put(
        &w.lock("rebooted"),
        foreign_record(4242, 1234, &host, OTHER_BOOT),
    );
    w.oo(&["run", "rebooted", "--", "true"])
        .expect(0)
        .says("the owner died with the previous boot");

    let sp = w.sleeper();
    let live = foreign_record(sp, start_of(sp), "old-name", &boot_id());
    put(&w.lock("renamed"), live);
    w.oo(&["run", "renamed", "--", "true"])
        .expect(75)
        .says(&format!("pid {sp}"));
    let (dead, start) = dead_process();
    put(
        &w.lock("renamed-dead"),
        foreign_record(dead, start, "old-name", &boot_id()),
    );
    w.oo(&["run", "renamed-dead", "--", "true"]).expect(0);
}

/// Writers refuse a lock directory on a network or FUSE filesystem. No
/// such filesystem can be mounted in CI, so the test injects its type
/// (`statfs` f_type 0x6969 is NFS; the test-hooks feature reads it).
/// `--allow-shared-fs` and `ONLYONE_ALLOW_SHARED_FS=1` override; readers
/// never refuse.
#[test]
fn writers_refuse_a_network_filesystem_unless_told_it_is_local() {
    let w = World::new();
    for (fstype, kind) in [("6969", "NFS"), ("65735546", "FUSE"), ("ff534d42", "CIFS")] {
        let mut c = w.oo_cmd();
        c.env("ONLYONE_TEST_FSTYPE", fstype)
            .args(["run", "x", "--", "true"]);
        finish(c, HANG)
            .expect(125)
            .says(&format!("network or FUSE filesystem ({kind})"))
            .says("--allow-shared-fs");
        assert!(!w.lock("x").exists());
    }
    let nfs = |args: &[&str], allow_env: bool| {
        let mut c = w.oo_cmd();
        c.env("ONLYONE_TEST_FSTYPE", "6969").args(args);
        if allow_env {
            c.env("ONLYONE_ALLOW_SHARED_FS", "1");
        }
        finish(c, HANG)
    };
    nfs(
        &["acquire", "x", "--owner", &std::process::id().to_string()],
        false,
    )
    .expect(125)
    .says("NFS");
    nfs(&["--allow-shared-fs", "run", "x", "--", "true"], false).expect(0);
    nfs(&["run", "x", "--", "true"], true).expect(0);
    nfs(&["precheck", "x"], false).expect(0).quiet();
    nfs(&["status", "x"], false).expect(0);
    // A local filesystem (tmpfs or ext4 here) is fine.
    w.oo(&["run", "x", "--", "true"]).expect(0);
}

// ---------------------------------------------------------------------------
// 5. A path LOCK that names a user's file

/// `onlyone run ./sync.sh -- --all`, a typo for the script itself: the
/// script is not a record, and however old it is, it is never removed.
/// Nor is a copy of /etc/passwd. `release --force` refuses them too.
#[test]
fn a_users_file_at_a_lock_path_is_never_removed() {
    let w = World::new();
    let script = w.dir().join("sync.sh");
    let passwd = w.dir().join("passwd");
    std::fs::write(&script, "#!/bin/sh\necho syncing\n").unwrap();
    std::fs::copy("/etc/passwd", &passwd).unwrap();
    for file in [&script, &passwd] {
        let before = std::fs::read(file).unwrap();
        let old = std::time::UNIX_EPOCH + Duration::from_secs(1_748_736_000); // 2025-06-01
        std::fs::File::options()
            .write(true)
            .open(file)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let p = file.to_str().unwrap();
        w.oo(&["run", p, "--", "--all"])
            .expect(125)
            .says("not a record onlyone wrote")
            .says(&format!("rm {p}"));
        w.oo(&["acquire", p, "--owner", &std::process::id().to_string()])
            .expect(125);
        w.oo(&["precheck", p]).expect(0);
        w.oo(&["release", "--force", p])
            .expect(125)
            .says("it is not a lock record")
            .says("never deletes a file that is not one");
        assert_eq!(std::fs::read(file).unwrap(), before, "{p} changed");
    }
}

/// A user switching over from flock(1): while `flock(1)` holds the (empty)
/// lock file, it is held: 75 for run and precheck, a message that names
/// a tool outside onlyone and `fuser -v`, and never the advice to remove
/// the file. `run --wait` runs once flock(1) lets go.
#[test]
fn a_file_flock1_holds_is_held() {
    if !have("flock") {
        eprintln!("a_file_flock1_holds_is_held: skipped: needs flock(1)");
        return;
    }
    let mut w = World::new();
    let lock = w.lock("job");
    let l = lock.to_str().unwrap().to_owned();
    for flag in ["-x", "-s"] {
        let mut c = w.program("flock");
        // -o: the lock is flock(1)'s own, not its command's too.
        c.args([flag, "-o", &l, "sleep", "100000"]);
        let holder = w.keep(c);
        wait_until("flock(1) holds the file", HANG, || {
            std::fs::read_to_string("/proc/locks").is_ok_and(|t| {
                t.lines()
                    .any(|x| !x.contains("->") && x.contains(&format!(" {holder} ")))
            })
        });
        let out = w.oo(&["run", "job", "--", "true"]);
        out.expect(75)
            .says("outside onlyone")
            .says(&format!("fuser -v {l}"));
        assert!(
            !out.stderr.contains("rm "),
            "{flag}: advises removing a held file: {out:#?}"
        );
        w.oo(&["precheck", "job"]).expect(75);
        let st = w.status("job");
        assert_eq!(st["state"], "held", "{st:#?}");
        assert_eq!(st["holder"], "outside", "{st:#?}");
        // Once flock(1) lets go, a waiting run runs (the file is still not
        // a record: refused, as any user's file at a lock path is).
        let mut c = w.oo_cmd();
        c.args(["run", "--wait", "20s", "job", "--", "true"]);
        let waiter = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        kill9_pid(holder);
        let out = waiter.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{out:?}");
    }
    // An empty file nobody holds is flock(1)'s leftover: not a record,
    // refused and left alone as before.
    assert!(lock.exists());
}

// ---------------------------------------------------------------------------
// 2. One user, two sessions

/// A login session sets `XDG_RUNTIME_DIR`; cron does not. The same user
/// with and without it meets in one directory, so a job run by hand
/// refuses its cron fire. As root the test runs as nobody (root's default
/// is /run/onlyone either way).
#[test]
fn one_user_with_and_without_xdg_runtime_dir_meets_in_one_directory() {
    let mut w = World::new();
    let name = format!("xdgjob-{}", std::process::id());
    let xdg = w.dir().join("xdg");
    std::fs::create_dir(&xdg).unwrap();
    let bin = bin_for_others(w.dir());
    let state = if is_root() {
        state_dir_of(w.dir(), 65534)
    } else {
        w.state_dir().to_path_buf()
    };
    let as_user = |env_xdg: bool, args: &[&str]| -> Command {
        let mut c = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--", "env"]);
            c
        } else {
            Command::new("env")
        };
        c.arg("-u").arg("ONLYONE_DIR");
        c.arg(format!("{STATE_VAR}={}", state.display()));
        if env_xdg {
            c.arg(format!("XDG_RUNTIME_DIR={}", xdg.display()));
        } else {
            c.args(["-u", "XDG_RUNTIME_DIR"]);
        }
        c.arg(&bin).args(args);
        c
    };
    if is_root() {
        std::fs::set_permissions(&xdg, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        if !finish(as_user(false, &["status"]), HANG).status.success() {
            eprintln!("skipped: runuser -u nobody cannot run the binary");
            return;
        }
    }
    w.keep(as_user(true, &["run", &name, "--", "sleep", "1000"]));
    let uid = if is_root() {
        65534
    } else {
        rustix::process::geteuid().as_raw()
    };
    let lock = PathBuf::from(format!("/tmp/onlyone-{uid}/{name}.lock"));
    wait_until("the terminal session's run", HANG, || {
        std::fs::read_to_string(&lock).is_ok_and(|t| t.contains("cmdpid="))
    });
    let text = std::fs::read_to_string(&lock).unwrap();
    let holder: u32 = text.lines().next().unwrap().parse().unwrap();
    let cmd: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("cmdpid="))
        .unwrap()
        .parse()
        .unwrap();
    w.foreign.extend([holder, cmd]);
    assert!(
        !xdg.join("onlyone").exists(),
        "it locked under $XDG_RUNTIME_DIR"
    );
    finish(as_user(false, &["run", &name, "--", "true"]), HANG)
        .expect(75)
        .says(&format!("pid {holder}"));
    kill9_pid(cmd);
    kill9_pid(holder);
    wait_until("the lock to be released or stale", HANG, || {
        finish(as_user(false, &["run", &name, "--", "true"]), HANG).code() == 0
    });
}

// ---------------------------------------------------------------------------
// 8. Held means 75 whatever the directory's state; who may clear what

/// A lock held by a live run gives 75 even when its directory is full or
/// read-only: onlyone looks before it reports the write error. A free lock
/// there is a 125 that names the error. A real tmpfs, in a mount namespace
/// of the test's own (as root).
#[test]
fn a_held_lock_is_75_on_a_full_or_read_only_filesystem() {
    let mut w = World::new();
    if !is_root() {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let sp = w.sleeper();
    std::fs::create_dir(w.dir().join("fs")).unwrap();
    let script = r#"
set -e
mount -t tmpfs -o size=256k,mode=0755 tmpfs "$D/fs"
"$OO" --dir "$D/fs" acquire L --owner "$SP"
dd if=/dev/zero of="$D/fs/fill" bs=4k 2>/dev/null || true
set +e
"$OO" --dir "$D/fs" run L -- true 2>"$D/full-held.err"; echo "full-held=$?"
"$OO" --dir "$D/fs" run M -- true 2>"$D/full-free.err"; echo "full-free=$?"
"$OO" --dir "$D/fs" precheck L 2>/dev/null; echo "full-precheck=$?"
mount -o remount,ro "$D/fs"
"$OO" --dir "$D/fs" run L -- true 2>"$D/ro-held.err"; echo "ro-held=$?"
"$OO" --dir "$D/fs" acquire L 2>/dev/null; echo "ro-acquire=$?"
"$OO" --dir "$D/fs" run M -- true 2>"$D/ro-free.err"; echo "ro-free=$?"
"#;
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env(STATE_VAR, w.state_dir())
        .env("OO", BIN)
        .env("D", w.dir())
        .env("SP", sp.to_string());
    let out = finish(c, HANG);
    if out.stdout.is_empty() {
        eprintln!("skipped: cannot mount a tmpfs here: {out:?}");
        return;
    }
    let rc = |k: &str| -> i32 {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {out:#?}"))
            .parse()
            .unwrap()
    };
    let err = |k: &str| std::fs::read_to_string(w.dir().join(format!("{k}.err"))).unwrap();
    assert_eq!(rc("full-held"), 75, "{}", err("full-held"));
    assert!(err("full-held").contains(&format!("pid {sp}")));
    assert_eq!(rc("full-free"), 125);
    assert!(
        err("full-free").contains("No space left"),
        "{}",
        err("full-free")
    );
    assert_eq!(rc("full-precheck"), 75);
    assert_eq!(rc("ro-held"), 75, "{}", err("ro-held"));
    assert_eq!(rc("ro-acquire"), 75);
    assert_eq!(rc("ro-free"), 125);
    assert!(err("ro-free").contains("Read-only"), "{}", err("ro-free"));
}

/// `runuser -u nobody -- onlyone ...` (`bin`: [`bin_for_others`]), or
/// None when that cannot run here.
fn as_nobody(bin: &Path, args: &[&std::ffi::OsStr]) -> Option<Out> {
    if !is_root() {
        return None;
    }
    let mut c = Command::new("runuser");
    c.args(["-u", "nobody", "--"])
        .arg(bin)
        .args(args)
        .env(STATE_VAR, state_dir_of(bin.parent().unwrap(), 65534));
    let out = finish(c, HANG);
    (!out.stderr.contains("runuser:")).then_some(out)
}

/// root holds `/run/onlyone/job.lock`-like locks in a directory another
/// user may read but not write: that user's run is a skip (75), not an
/// EACCES failure. And root's stale lock in a sticky directory: the user
/// is told that root must clear it, not to run a `release --force` that
/// would fail.
#[test]
fn another_users_locks_skip_and_say_who_may_clear_them() {
    let mut w = World::new();
    let root_dir = w.dir().join("root-owned");
    std::fs::create_dir(&root_dir).unwrap();
    let sp = w.sleeper();
    let mut c = w.oo_in(&root_dir);
    c.args(["acquire", "job", "--owner", &sp.to_string()]);
    finish(c, HANG).expect(0);
    let d = root_dir.as_os_str();
    let bin = bin_for_others(w.dir());
    let Some(out) = as_nobody(
        &bin,
        &[
            "--dir".as_ref(),
            d,
            "run".as_ref(),
            "job".as_ref(),
            "--".as_ref(),
            "true".as_ref(),
        ],
    ) else {
        eprintln!("skipped: needs root and runuser -u nobody");
        return;
    };
    out.expect(75).says(&format!("pid {sp}"));

    let sticky = w.dir().join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(
        &sticky,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let (dead, start) = dead_process();
    put(
        &sticky.join("job.lock"),
        format!(
            "{dead}\nstart={start}\nboot={}\ntoken={}\nsince=1764400000\ncmd=x\nonlyone=1\n",
            boot_id(),
            "d".repeat(32)
        ),
    );
    let s = sticky.as_os_str();
    as_nobody(
        &bin,
        &[
            "--dir".as_ref(),
            s,
            "run".as_ref(),
            "job".as_ref(),
            "--".as_ref(),
            "true".as_ref(),
        ],
    )
    .unwrap()
    .expect(125)
    .says("is stale (pid")
    .says("you (nobody) may not remove")
    .says("its directory is sticky and the file belongs to root")
    .says("root must clear it");
    as_nobody(
        &bin,
        &[
            "--dir".as_ref(),
            s,
            "release".as_ref(),
            "--force".as_ref(),
            "job".as_ref(),
        ],
    )
    .unwrap()
    .expect(125)
    .says("root must clear it");
    assert!(sticky.join("job.lock").exists());
}

// ---------------------------------------------------------------------------
// 7. A PID namespace that dies with its run

/// `onlyone run` as pid 1 of a PID namespace of its own: while it lives,
/// its kernel lock proves it (75 from the host, not the 125 of a pid that
/// cannot be checked). When the namespace's pid 1 is killed, the namespace
/// and every process of the run die with it: the host proves it gone (no
/// process has it) and takes the lock over, instead of refusing forever.
#[test]
fn a_lock_of_a_dead_pid_namespace_is_taken_over() {
    let mut w = World::new();
    if !is_root() {
        eprintln!("skipped: a PID namespace needs root");
        return;
    }
    let mut c = Command::new("setsid");
    c.env(STATE_VAR, w.state_dir());
    c.args(["unshare", "--pid", "--fork", "--mount-proc", BIN, "--dir"])
        .arg(w.dir())
        .args(["run", "j", "--", "sleep", "1000"]);
    let unshare = w.keep(c);
    let path = w.lock("j");
    let started = wait_for(HANG, || {
        std::fs::read_to_string(&path).is_ok_and(|t| t.contains("cmdpid="))
            || state_of(unshare).is_none_or(|s| s == 'Z')
    });
    if !started || !path.exists() {
        eprintln!("skipped: unshare --pid did not start a namespace here");
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("1\n"), "pid 1 of its namespace: {text}");
    let ns: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("pidns="))
        .unwrap()
        .parse()
        .unwrap();
    w.oo(&["run", "j", "--", "true"])
        .expect(75)
        .says(&format!("another PID namespace (pid:[{ns}])"));
    // Its pid 1, as the host numbers it: unshare's child.
    let init: u32 = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    kill9_pid(init);
    wait_gone(init);
    w.oo(&["run", "j", "--", "true"]).expect(0).says(&format!(
        "took over the stale lock `j` from pid 1: the owner's PID namespace (pid:[{ns}]) no \
         longer exists"
    ));
}

// ---------------------------------------------------------------------------
// 3. Time namespaces

/// `unshare -T --boottime 86400 --fork ARGS...`, or None when time
/// namespaces are not available here (no root, an old kernel).
fn in_time_namespace(args: &[&str]) -> Option<Command> {
    if !is_root() || !Path::new("/proc/self/ns/time").exists() {
        return None;
    }
    let mut c = Command::new("unshare");
    c.args(["-T", "--boottime", "86400", "--fork"]).args(args);
    Some(c)
}

/// In a time namespace `/proc/PID/stat` shows start times shifted by the
/// reader's boot-time offset. A live holder on one side must still be a
/// live holder from the other, both ways, for `acquire` (pid and start
/// time) and for a run whose wrapper was killed (its command's start
/// time), and the messages must say what is true.
#[test]
fn a_live_owner_is_live_from_either_side_of_a_time_namespace() {
    let mut w = World::new();
    if in_time_namespace(&["true"]).is_none_or(|mut c| !c.status().is_ok_and(|s| s.success())) {
        eprintln!("skipped: needs root and time namespaces (unshare -T)");
        return;
    }
    let d = w.dir().to_str().unwrap().to_owned();
    // An acquire outside, judged inside.
    let mut holder = Command::new("setsid");
    holder.env(STATE_VAR, w.state_dir()).args([
        "sh",
        "-c",
        r#""$0" --dir "$1" acquire j || exit 1; exec sleep 1000"#,
        BIN,
        &d,
    ]);
    let sh = w.keep(holder);
    wait_until("the outside holder", HANG, || w.lock("j").exists());
    let state = w.state_dir().to_path_buf();
    let inside = |args: &[&str]| {
        let mut full = vec![BIN, "--dir", &d];
        full.extend_from_slice(args);
        let mut c = in_time_namespace(&full).unwrap();
        c.env(STATE_VAR, &state);
        finish(c, HANG)
    };
    inside(&["run", "j", "--", "echo", "BOTH"])
        .expect(75)
        .says(&format!("pid {sh}"));
    let rec = std::fs::read_to_string(w.lock("j")).unwrap();
    assert!(rec.contains("\ntimens="), "{rec}");
    kill9_pid(sh);
    wait_gone(sh);

    // An acquire inside, judged outside.
    let script = format!(r#""{BIN}" --dir "{d}" acquire k || exit 1; exec sleep 1000"#);
    let mut c = in_time_namespace(&["setsid", "sh", "-c", &script]).unwrap();
    c.stdin(Stdio::null()).env(STATE_VAR, w.state_dir());
    w.keep(c);
    wait_until("the inside holder", HANG, || w.lock("k").exists());
    let rec = std::fs::read_to_string(w.lock("k")).unwrap();
    assert!(rec.contains("\nbootoff=86400000000000\n"), "{rec}");
    let owner: u32 = rec.lines().next().unwrap().parse().unwrap();
    w.foreign.push(owner);
    w.oo(&["run", "k", "--", "echo", "BOTH"])
        .expect(75)
        .says(&format!("pid {owner}"));
    kill9_pid(owner);
    wait_gone(owner);
    w.oo(&["run", "k", "--", "true"])
        .expect(0)
        .says(&format!("pid {owner} has exited"));

    // A run outside whose wrapper is killed: its command keeps it, and the
    // inside says so (not "a leftover process" or "has exited").
    let mut run = w.oo_cmd();
    run.args(["run", "r", "--", "sleep", "1000"]);
    let wrapper = w.keep(run);
    wait_until("the run's command", HANG, || {
        std::fs::read_to_string(w.lock("r")).is_ok_and(|t| t.contains("cmdpid="))
    });
    let cmd: u32 = std::fs::read_to_string(w.lock("r"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("cmdpid="))
        .unwrap()
        .parse()
        .unwrap();
    w.foreign.push(cmd);
    kill9_pid(wrapper);
    wait_gone(wrapper);
    inside(&["run", "r", "--", "true"])
        .expect(75)
        .says(&format!(
            "pid {cmd}, the command of the run started by pid {wrapper}"
        ));
}

/// A record whose clock cannot be matched exactly (an offset that is not
/// a whole number of clock ticks) is unknown, never stale.
#[test]
fn start_times_that_cannot_be_compared_are_unknown() {
    let mut w = World::new();
    let sp = w.sleeper();
    let text = format!(
        "{sp}\nstart={}\nboot={}\ntoken={}\nsince=1764400000\ntimens=1\nbootoff=5000000\n\
         cmd=x\nonlyone=1\n",
        start_of(sp),
        boot_id(),
        "e".repeat(32)
    );
    put(&w.lock("t"), &text);
    w.oo(&["run", "t", "--", "true"])
        .expect(125)
        .says("another time namespace");
    assert_eq!(std::fs::read_to_string(w.lock("t")).unwrap(), text);
}

// ---------------------------------------------------------------------------
// 6. Daemons that clear their environment

/// A command that starts a daemon through a launcher that clears the
/// environment (`runuser -l`, `su -`, `env -i`) or leaves the group
/// (`setsid`) leaves a process without the run's token or group. onlyone
/// is the run's subreaper: the daemon becomes its child when its parent
/// exits, so the end of the run finds it and ends it; the lock is free
/// only after, and the next run never starts beside it.
#[test]
fn daemons_that_clear_their_environment_are_still_ended_with_the_run() {
    let w = World::new();
    // Where the daemon says who it is (nobody must be able to write).
    let drop_box = w.dir().join("box");
    std::fs::create_dir(&drop_box).unwrap();
    std::fs::set_permissions(
        &drop_box,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let pidfile = drop_box.join("daemon.pid");
    let daemon = format!(
        "sh -c 'echo $$ > {}.tmp && mv {}.tmp {} && exec sleep 1000'",
        pidfile.display(),
        pidfile.display(),
        pidfile.display()
    );
    let mut launchers: Vec<(&str, String)> = vec![
        ("setsid", format!("setsid {daemon} >/dev/null 2>&1 &")),
        (
            "env -i",
            format!("setsid env -i {daemon} >/dev/null 2>&1 &"),
        ),
    ];
    if is_root() {
        for (name, prog, launcher) in [
            ("runuser -l", "runuser", "runuser -l"),
            ("su -", "su", "su -"),
        ] {
            if Command::new("sh")
                .args(["-c", &format!("command -v {prog}")])
                .output()
                .is_ok_and(|o| o.status.success())
            {
                launchers.push((
                    name,
                    format!(
                        "{launcher} nobody -s /bin/sh -c \"setsid {daemon} >/dev/null 2>&1 &\" \
                         2>/dev/null"
                    ),
                ));
            }
        }
    }
    for (name, line) in launchers {
        let _ = std::fs::remove_file(&pidfile);
        // The command returns once the daemon has said who it is.
        let script = format!(
            "{line}\nwhile [ ! -s {p} ]; do sleep 0.01; done",
            p = pidfile.display()
        );
        let out = w.oo(&["run", "d5", "--", "sh", "-c", &script]);
        out.expect(0)
            .says("ended 1 leftover process(es) of the run of `d5`");
        let daemon: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            !running(daemon),
            "{name}: the daemon {daemon} outlived its run"
        );
        assert_eq!(w.status("d5")["state"], "free", "{name}");
    }
}

// ---------------------------------------------------------------------------
// 4. Age-based cleaning of /tmp

/// systemd-tmpfiles removes files in /tmp whose times are all older than
/// its age rule (10 days on Fedora and Arch; 1 s here). A live holder keeps
/// its lock file young: a run's wrapper refreshes it, and for `acquire`
/// (whose owner is a script) a keeper process does. The refresh interval
/// is a day in real life; the test sets 200 ms (test-hooks feature).
#[test]
fn age_based_cleaning_of_tmp_never_removes_a_live_lock() {
    let mut w = World::new();
    if Command::new("systemd-tmpfiles")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: systemd-tmpfiles is not installed (.ci/run installs it)");
        return;
    }
    assert!(
        w.dir().starts_with("/tmp"),
        "the test needs a directory under /tmp"
    );
    let rule = w.dir().join("..").join(format!(
        "onlyone-tmpfiles-{}.conf",
        w.dir().file_name().unwrap().to_string_lossy()
    ));
    // `e`: clean the contents of an existing directory by age, and leave
    // its mode and owner alone.
    std::fs::write(&rule, format!("e {} - - - 1s\n", w.dir().display())).unwrap();
    let _rule = RemoveOnDrop(rule.clone());

    let mut run = w.oo_cmd();
    run.env("ONLYONE_TEST_REFRESH_MS", "200")
        .args(["run", "job", "--", "sleep", "1000"]);
    w.keep(run);
    let script = format!(
        r#""{BIN}" --dir "{}" acquire job2 || exit 1; exec sleep 1000"#,
        w.dir().display()
    );
    let mut acq = w.program("sh");
    acq.args(["-c", &script])
        .env("ONLYONE_TEST_REFRESH_MS", "200")
        .env_remove("ONLYONE_DIR");
    w.keep(acq);
    wait_until("both holders", HANG, || {
        w.lock("job2").exists()
            && std::fs::read_to_string(w.lock("job")).is_ok_and(|t| t.contains("cmdpid="))
    });
    let owner2: u32 = std::fs::read_to_string(w.lock("job2"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // A file nobody keeps young: cleaning has happened once it is gone.
    let control = w.dir().join("control");
    std::fs::write(&control, "x").unwrap();
    wait_until("the cleaner to remove an old file", HANG, || {
        let st = Command::new("systemd-tmpfiles")
            .arg("--clean")
            .arg(&rule)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        st.is_ok() && !control.exists()
    });
    assert!(w.lock("job").exists(), "the run's lock was cleaned away");
    assert!(
        w.lock("job2").exists(),
        "the script's lock was cleaned away"
    );
    w.oo(&["run", "job", "--", "echo", "SECOND"]).expect(75);
    w.oo(&["run", "job2", "--", "echo", "SECOND"])
        .expect(75)
        .says(&format!("pid {owner2}"));
    // The keeper ends with the lock: once the owner is gone and the lock
    // taken over, it exits.
    kill9_pid(owner2);
    wait_gone(owner2);
    w.oo(&["run", "job2", "--", "true"]).expect(0);
    wait_until("the keeper to exit", HANG, || {
        keepers_of(&w.lock("job2")).is_empty()
    });
}

/// Removes a file when the test ends.
struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ---------------------------------------------------------------------------
// 9. Unknown must stay rare: a later non-dumpable process of the same user

/// The cgroup directory (in the hierarchy onlyone reads: `name=systemd`,
/// else the unified one) where this process is, or None.
fn own_systemd_cgroup_dir() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let (named, rel) = match own.lines().find_map(|l| l.split_once(":name=systemd:")) {
        Some((_, rel)) => (true, rel.to_owned()),
        None => (
            false,
            own.lines().find_map(|l| l.strip_prefix("0::"))?.to_owned(),
        ),
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let point = mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let point = left.split_whitespace().nth(4)?;
        let mut r = right.split_whitespace();
        let fstype = r.next()?;
        let opts = r.nth(1).unwrap_or("");
        let ours = if named {
            fstype == "cgroup" && opts.split(',').any(|o| o == "name=systemd")
        } else {
            fstype == "cgroup2"
        };
        ours.then(|| point.to_owned())
    })?;
    Some(PathBuf::from(point).join(rel.trim_start_matches('/')))
}

/// A cgroup made for a test, removed (after its processes) at the end.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(parent: &Path, name: &str) -> Option<Cgroup> {
        let p = parent.join(name);
        std::fs::create_dir(&p).ok()?;
        Some(Cgroup(p))
    }

    fn procs(&self) -> String {
        self.0.join("cgroup.procs").display().to_string()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..200 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A run of nobody's is killed (SIGKILL: the OOM killer, `kill -9` of its
/// group); then nobody's ssh-agent starts (it makes itself non-dumpable and
/// daemonizes, so only root can read its environment) in a login session:
/// a cgroup of its own. It is not of the run: the next fire runs. The
/// control: the same process in the run's own cgroup may carry the token,
/// so the lock is unknown, never stale, and the message never tells nobody
/// to ask "as its user".
#[test]
fn a_later_non_dumpable_process_in_another_cgroup_is_not_of_the_run() {
    let test = "a_later_non_dumpable_process_in_another_cgroup_is_not_of_the_run";
    let mut w = World::new();
    if !is_root() || !have("setpriv") || !Path::new("/usr/bin/python3").exists() {
        eprintln!("{test}: skipped: needs root, setpriv and /usr/bin/python3");
        return;
    }
    let Some(base) = own_systemd_cgroup_dir() else {
        eprintln!("{test}: skipped: no systemd cgroup hierarchy here");
        return;
    };
    let tag = std::process::id();
    let (Some(run_cg), Some(login_cg)) = (
        Cgroup::new(&base, &format!("oo-test-{tag}-run.scope")),
        Cgroup::new(&base, &format!("oo-test-{tag}-login.scope")),
    ) else {
        eprintln!(
            "{test}: skipped: cannot make cgroups under {}",
            base.display()
        );
        return;
    };
    let bin = bin_for_others(w.dir()).display().to_string();
    let locks = w.subdir("locks");
    std::os::unix::fs::chown(&locks, Some(65534), Some(65534)).unwrap();
    let d = locks.display().to_string();
    let theirs = w.subdir("agent");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let ready = theirs.join("agent.pid");
    let as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups --";
    // An ssh-agent: daemonizes (its parent is gone), makes itself
    // non-dumpable, says its pid.
    let agent = "import ctypes, os, sys, time\n\
         if os.fork(): os._exit(0)\n\
         os.setsid()\n\
         ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n\
         open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n\
         os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n\
         time.sleep(100000)\n";
    for (cg, want) in [(&login_cg, 0), (&run_cg, 125)] {
        let _ = std::fs::remove_file(&ready);
        let mut c = w.program("sh");
        c.args([
            "-c",
            &format!(
                "echo $$ > {}; exec {as_nobody} {bin} --dir {d} run job -- sleep 100000",
                run_cg.procs()
            ),
        ]);
        let wrapper = w.keep(c);
        let lock = locks.join("job.lock");
        wait_until("the run names its command", HANG, || {
            std::fs::read_to_string(&lock).is_ok_and(|r| r.contains("\ncmdpid="))
        });
        let record = std::fs::read_to_string(&lock).unwrap();
        assert!(
            record.contains("\ncgroup="),
            "the record names its cgroup: {record}"
        );
        let cmd: u32 = record
            .lines()
            .find_map(|l| l.strip_prefix("cmdpid="))
            .unwrap()
            .parse()
            .unwrap();
        let mut c = w.program("sh");
        c.args([
            "-c",
            &format!(
                "echo $$ > {}; exec {as_nobody} /usr/bin/python3 -c \"$0\" {} >/dev/null 2>&1",
                cg.procs(),
                ready.display()
            ),
            agent,
        ]);
        finish(c, HANG).expect(0);
        wait_until("the agent runs", HANG, || ready.exists());
        let agent_pid: u32 = std::fs::read_to_string(&ready).unwrap().parse().unwrap();
        w.foreign.push(agent_pid);
        kill9_pid(wrapper);
        kill9_pid(cmd);
        wait_gone(cmd);
        let mut c = w.program("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args([&bin, "--dir", &d, "run", "job", "--", "true"]);
        let out = finish(c, HANG);
        out.expect(want);
        if want == 125 {
            out.says("left alone").says("ask as root");
            assert!(!out.stderr.contains("as its user"), "{out:#?}");
            std::fs::remove_file(&lock).unwrap();
        }
        kill9_pid(agent_pid);
        wait_gone(agent_pid);
    }
}
