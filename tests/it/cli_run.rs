//! `onlyone run` end to end, with real processes: every exit code, the
//! command's environment, signal forwarding, `kill -9` of the wrapper,
//! strays, `--wait`, `--replace`, `--max-time`/`--kill-after`, and commands
//! that fail to exec or meet closed or broken pipes.
//!
//! Every process a test starts carries a marker variable naming the test's
//! temp dir; the test's [`Sandbox`] kills every process with that marker
//! when it is dropped, so nothing outlives a failing test.

use crate::support;

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::process::{Pid, Signal};
use support::{BIN, alive, running, wait_until};

/// Every process started by a test carries `MARKER=<its temp dir>`.
const MARKER: &str = "ONLYONE_CLI_TEST_SANDBOX";
/// The longest any single `onlyone` call may take before the test fails.
const LONG: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// Helpers

/// A test's [`support::Sandbox`] (its temp dir, and the killer of every
/// process started in it), which counts the calls it ran.
struct Sandbox {
    sb: support::Sandbox,
    calls: std::cell::Cell<u32>,
}

support::derefs_to_sandbox!(Sandbox);

/// How an `onlyone` call ended.
#[derive(Debug)]
struct Out {
    status: ExitStatus,
    stderr: String,
    took: Duration,
}

impl Out {
    /// The code a shell would see: the exit code, or 128+N for a death by
    /// signal N.
    fn code(&self) -> i32 {
        shell_code(self.status)
    }
}

fn shell_code(s: ExitStatus) -> i32 {
    match (s.code(), s.signal()) {
        (Some(c), _) => c,
        (None, Some(n)) => 128 + n,
        _ => panic!("neither a code nor a signal: {s:?}"),
    }
}

impl Sandbox {
    fn new() -> Sandbox {
        Sandbox {
            sb: support::Sandbox::new(MARKER),
            calls: std::cell::Cell::new(0),
        }
    }

    /// `onlyone --dir DIR ARGS...`, marked, stdin and output to /dev/null.
    fn cmd<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut c = self.program(BIN);
        c.arg("--dir")
            .arg(self.dir())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    }

    /// Runs `c` to its end (at most [`LONG`]), its stderr to a file (never
    /// a pipe a leftover could hold open).
    fn finish(&self, mut c: Command) -> Out {
        let n = self.calls.get() + 1;
        self.calls.set(n);
        let err_path = self.path(&format!("stderr.{n}"));
        c.stderr(File::create(&err_path).unwrap());
        let started = Instant::now();
        let mut kid = Kid::spawn(c);
        let status = kid.wait_for(LONG);
        let took = started.elapsed();
        let stderr = std::fs::read_to_string(&err_path).unwrap();
        Out {
            status,
            stderr,
            took,
        }
    }

    fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Out {
        self.finish(self.cmd(args))
    }

    /// `state` of LOCK in `onlyone status LOCK --json`; `nowhere` when
    /// status says there is no such lock (no file, nothing journaled).
    fn state(&self, lock: &str) -> String {
        let out = self
            .cmd(&["status", lock, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        if out.status.code() == Some(125)
            && String::from_utf8_lossy(&out.stderr).contains(&format!("{lock}: no such lock"))
        {
            return "nowhere".to_owned();
        }
        assert!(out.status.success(), "status failed: {out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["locks"][0]["state"].as_str().unwrap().to_owned()
    }

    /// LOCK is not held: free, or nowhere (nothing of it ever ran).
    fn assert_free(&self, lock: &str) {
        let state = self.state(lock);
        assert!(
            state == "free" || state == "nowhere",
            "`{lock}` should be free: {state}"
        );
    }

    /// Starts `onlyone run LOCK -- sh -c SCRIPT` in the background with
    /// `READY` set to a file the script must create once it runs, and waits
    /// for that file and the lock file.
    fn holder(&self, lock: &str, opts: &[&str], script: &str, env: &[(&str, &Path)]) -> Kid {
        let ready = self.path(&format!("{lock}.ready"));
        let mut args: Vec<&str> = vec!["run"];
        args.extend(opts);
        args.extend([lock, "--", "sh", "-c", script]);
        let mut c = self.cmd(&args);
        c.env("READY", &ready);
        for (k, v) in env {
            c.env(k, v);
        }
        let mut kid = Kid::spawn(c);
        let lock_file = self.lock(lock);
        wait_until("the holder's command to run", LONG, || {
            if let Ok(Some(s)) = kid.0.try_wait() {
                panic!("the holder exited early: {s:?}");
            }
            ready.exists() && lock_file.exists()
        });
        kid
    }
}

fn kill(pid: u32, sig: Signal) {
    let _ = rustix::process::kill_process(Pid::from_raw(pid as i32).unwrap(), sig);
}

/// A child that is killed and reaped when dropped.
struct Kid(Child);

impl Kid {
    fn spawn(mut c: Command) -> Kid {
        Kid(c.spawn().expect("spawn onlyone"))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Waits for the exit, failing the test after `timeout`.
    fn wait_for(&mut self, timeout: Duration) -> ExitStatus {
        let mut status = None;
        wait_until("onlyone to exit", timeout, || {
            status = self.0.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap()
    }

    /// Waits for the exit, polling every millisecond, and returns when it
    /// was seen (wall clock).
    fn wait_timed(&mut self, timeout: Duration) -> (ExitStatus, SystemTime) {
        let start = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return (s, SystemTime::now());
            }
            assert!(start.elapsed() < timeout, "onlyone did not exit in time");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A pid (with its start time) read from a file a command wrote.
fn read_pid(path: &Path) -> (u32, u64) {
    wait_until(&format!("{} to be written", path.display()), LONG, || {
        std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n'))
    });
    let pid: u32 = std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let start = onlyone::procfs::read_stat(pid)
        .unwrap()
        .unwrap_or_else(|| panic!("pid {pid} is not running"))
        .start;
    (pid, start)
}

fn wait_dead(pid: u32, start: u64) {
    wait_until(&format!("pid {pid} to die"), LONG, || !alive(pid, start));
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A pipe whose reading end is already closed.
fn broken_pipe() -> std::os::fd::OwnedFd {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    drop(r);
    w
}

// ---------------------------------------------------------------------------
// 1. Exit codes

#[test]
fn exit_code_is_the_commands_own() {
    let sb = Sandbox::new();
    assert_eq!(sb.run(&["run", "L", "--", "true"]).code(), 0);
    assert_eq!(sb.run(&["run", "L", "--", "false"]).code(), 1);
    for n in ["3", "42", "200"] {
        let out = sb.run(&["run", "L", "--", "sh", "-c", &format!("exit {n}")]);
        assert_eq!(out.status.code(), Some(n.parse().unwrap()), "{out:?}");
    }
    sb.assert_free("L");
    assert!(!sb.path("L.lock").exists(), "the lock file is left behind");
}

#[test]
fn exit_code_75_when_held_and_held_exit_and_quiet() {
    let sb = Sandbox::new();
    let holder = sb.holder("L", &[], "touch \"$READY\"; exec sleep 1000", &[]);
    let marker = sb.path("ran");
    let try_run = |opts: &[&str]| {
        let mut args = vec!["run"];
        args.extend(opts);
        args.extend(["L", "--", "sh", "-c", "touch \"$RAN\""]);
        let mut c = sb.cmd(&args);
        c.env("RAN", &marker);
        sb.finish(c)
    };

    let out = try_run(&[]);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(
        out.stderr.contains(&format!("pid {}", holder.pid())),
        "the held message names the holder: {:?}",
        out.stderr
    );
    assert!(out.stderr.contains("onlyone stop L"), "{:?}", out.stderr);

    let out = try_run(&["--held-exit", "9"]);
    assert_eq!(out.status.code(), Some(9), "{out:?}");

    let out = try_run(&["-q"]);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert_eq!(out.stderr, "", "-q prints nothing on a skip");

    let out = try_run(&["--quiet", "--held-exit", "0"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stderr, "");

    assert!(!marker.exists(), "a skipped run ran its command");
    assert_eq!(sb.state("L"), "held");
    drop(holder);
}

#[test]
fn exit_code_124_for_max_time() {
    let sb = Sandbox::new();
    let out = sb.run(&["run", "--max-time", "200ms", "L", "--", "sleep", "1000"]);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(out.stderr.contains("--max-time"), "{:?}", out.stderr);
    assert!(out.took < Duration::from_secs(5), "took {:?}", out.took);
    sb.assert_free("L");
}

#[test]
fn exit_code_125_for_onlyone_failures() {
    let sb = Sandbox::new();
    let marker = sb.path("ran");
    let not_a_dir = sb.path("plain-file");
    std::fs::write(&not_a_dir, "").unwrap();
    let cases: Vec<(&str, Command)> = vec![
        (
            "a bad lock name",
            sb.cmd(&["run", "bad name", "--", "sh", "-c", "touch \"$RAN\""]),
        ),
        (
            "a lock name starting with a dot",
            sb.cmd(&["run", ".L", "--", "sh", "-c", "touch \"$RAN\""]),
        ),
        (
            "an unknown flag",
            sb.cmd(&["run", "--bogus", "L", "--", "sh", "-c", "touch \"$RAN\""]),
        ),
        ("no command", sb.cmd(&["run", "L"])),
        (
            "a bad duration",
            sb.cmd(&[
                "run",
                "--max-time",
                "soon",
                "L",
                "--",
                "sh",
                "-c",
                "touch \"$RAN\"",
            ]),
        ),
        ("a --dir that is a regular file", {
            let mut c = sb.program(BIN);
            c.arg("--dir")
                .arg(&not_a_dir)
                .args(["run", "L", "--", "sh", "-c", "touch \"$RAN\""])
                .stdout(Stdio::null());
            c
        }),
    ];
    for (what, mut c) in cases {
        c.env("RAN", &marker);
        let out = sb.finish(c);
        assert_eq!(out.status.code(), Some(125), "{what}: {out:?}");
        assert!(!out.stderr.is_empty(), "{what}: no message");
        assert!(!marker.exists(), "{what}: the command ran");
    }
    sb.assert_free("L");
}

#[test]
fn exit_code_126_when_the_command_cannot_be_executed() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let no_x = sb.path("no-x.sh");
    std::fs::write(&no_x, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&no_x, std::fs::Permissions::from_mode(0o644)).unwrap();
    let a_dir = sb.path("a-dir");
    std::fs::create_dir(&a_dir).unwrap();
    for prog in [&no_x, &a_dir] {
        let out = sb.run(&[
            OsStr::new("run"),
            OsStr::new("L"),
            OsStr::new("--"),
            prog.as_os_str(),
        ]);
        assert_eq!(out.status.code(), Some(126), "{}: {out:?}", prog.display());
        assert!(
            out.stderr.contains(&*prog.to_string_lossy()),
            "the message names the program: {:?}",
            out.stderr
        );
        sb.assert_free("L");
    }
}

#[test]
fn exit_code_127_when_the_command_is_not_found() {
    let sb = Sandbox::new();
    let missing = sb.path("no-such-program");
    for prog in [
        OsStr::new("onlyone-test-no-such-command"),
        missing.as_os_str(),
    ] {
        let out = sb.run(&[OsStr::new("run"), OsStr::new("L"), OsStr::new("--"), prog]);
        assert_eq!(out.status.code(), Some(127), "{prog:?}: {out:?}");
        assert!(
            out.stderr.contains(&*prog.to_string_lossy()),
            "the message names the program: {:?}",
            out.stderr
        );
        sb.assert_free("L");
    }
}

#[test]
fn exit_code_128_plus_n_when_the_command_dies_of_a_signal() {
    let sb = Sandbox::new();
    for (sig, n) in [
        ("KILL", 9),
        ("TERM", 15),
        ("SEGV", 11),
        ("INT", 2),
        ("HUP", 1),
        ("USR1", 10),
    ] {
        let out = sb.run(&[
            "run",
            "L",
            "--",
            "sh",
            "-c",
            &format!("kill -{sig} $$; sleep 5"),
        ]);
        // A shell sees 128+N whether onlyone exits 128+N or re-raises N.
        assert_eq!(out.code(), 128 + n, "SIG{sig}: {out:?}");
        if let Some(raised) = out.status.signal() {
            assert_eq!(raised, n, "SIG{sig}: onlyone died of another signal");
        }
        sb.assert_free("L");
    }
}

// ---------------------------------------------------------------------------
// 2. The command's environment

#[test]
fn the_command_sees_onlyone_lock_and_onlyone_token() {
    let sb = Sandbox::new();
    let script = "printf '%s\\n%s\\n' \"$ONLYONE_LOCK\" \"$ONLYONE_TOKEN\" > \"$OUT\"; \
                  cat \"$ONLYONE_LOCK\" > \"$OUT.record\"";
    let seen = |lock: &str, out: &Path| {
        let mut c = sb.cmd(&["run", lock, "--", "sh", "-c", script]);
        c.env("OUT", out);
        let o = sb.finish(c);
        assert_eq!(o.code(), 0, "{o:?}");
        let text = read(out);
        let mut lines = text.lines();
        let (path, token) = (
            lines.next().unwrap().to_owned(),
            lines.next().unwrap().to_owned(),
        );
        let record = read(&out.with_extension("record"));
        (path, token, record)
    };

    let (path, token, record) = seen("L", &sb.path("env1"));
    assert_eq!(Path::new(&path), sb.path("L.lock"));
    assert_eq!(token.len(), 32, "token {token:?}");
    assert!(
        token.bytes().all(|b| b.is_ascii_hexdigit()),
        "token {token:?}"
    );
    assert!(
        record.lines().any(|l| l == format!("token={token}")),
        "the token is the record's: {record:?}"
    );

    let (_, token2, _) = seen("L", &sb.path("env2"));
    assert_ne!(token, token2, "each run has its own token");

    // A lock given as a path.
    let as_path = sb.path("by-path.lock");
    let (path, _, _) = seen(as_path.to_str().unwrap(), &sb.path("env3"));
    assert_eq!(Path::new(&path), as_path);
    sb.assert_free("L");
    assert!(!as_path.exists());
}

// ---------------------------------------------------------------------------
// 3. Signal forwarding

fn forwards(sig: Signal, name: &str) {
    let sb = Sandbox::new();
    let mark = sb.path("mark");
    let script = format!(
        "trap 'echo got > \"$MARK\"; exit 7' {name}; touch \"$READY\"; \
         while :; do sleep 0.05; done"
    );
    let mut run = sb.holder("L", &[], &script, &[("MARK", &mark)]);
    kill(run.pid(), sig);
    let status = run.wait_for(LONG);
    assert_eq!(
        read(&mark).trim(),
        "got",
        "the command did not get SIG{name}"
    );
    assert_eq!(
        status.code(),
        Some(7),
        "SIG{name}: onlyone exits with the command's code"
    );
    sb.assert_free("L");
    assert!(!sb.path("L.lock").exists());
}

#[test]
fn sigterm_is_forwarded_to_the_command() {
    forwards(Signal::TERM, "TERM");
}

#[test]
fn sigint_is_forwarded_to_the_command() {
    forwards(Signal::INT, "INT");
}

#[test]
fn sighup_is_forwarded_to_the_command() {
    forwards(Signal::HUP, "HUP");
}

// ---------------------------------------------------------------------------
// 4. kill -9 of onlyone

/// Another run of L is refused (75) with a message that names `pid`
/// (`who`), and L stays held.
fn assert_held_by(sb: &Sandbox, pid: u32, who: &str) {
    let out = sb.run(&["run", "L", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(
        out.stderr.contains(&format!("pid {pid}")),
        "the message names {who}: {:?}",
        out.stderr
    );
    assert_eq!(sb.state("L"), "held");
}

#[test]
fn kill_9_of_onlyone_keeps_the_lock_until_the_command_ends() {
    let sb = Sandbox::new();
    let stop = sb.path("stop");
    let cmd_pid = sb.path("cmd.pid");
    let mut run = sb.holder(
        "L",
        &[],
        "echo $$ > \"$CMDPID\"; touch \"$READY\"; \
         while [ ! -e \"$STOP\" ]; do sleep 0.02; done",
        &[("STOP", &stop), ("CMDPID", &cmd_pid)],
    );
    let (pid, start) = read_pid(&cmd_pid);
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    assert!(alive(pid, start), "the command died with onlyone");

    assert_held_by(&sb, pid, "the command");

    std::fs::write(&stop, "").unwrap();
    wait_dead(pid, start);
    let out = sb.run(&["run", "L", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    sb.assert_free("L");
}

#[test]
fn a_leftover_child_keeps_the_lock_after_kill_9_of_onlyone_and_its_command() {
    let sb = Sandbox::new();
    let cmd_pid = sb.path("cmd.pid");
    let bg_pid = sb.path("bg.pid");
    let mut run = sb.holder(
        "L",
        &[],
        "sleep 1000 >/dev/null 2>&1 & echo $! > \"$BGPID\"; echo $$ > \"$CMDPID\"; \
         touch \"$READY\"; exec sleep 2000",
        &[("CMDPID", &cmd_pid), ("BGPID", &bg_pid)],
    );
    let (cmd, cmd_start) = read_pid(&cmd_pid);
    let (bg, bg_start) = read_pid(&bg_pid);
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    kill(cmd, Signal::KILL);
    wait_dead(cmd, cmd_start);
    assert!(alive(bg, bg_start));

    assert_held_by(&sb, bg, &format!("the leftover pid {bg}"));

    kill(bg, Signal::KILL);
    wait_dead(bg, bg_start);
    let out = sb.run(&["run", "L", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.took < Duration::from_secs(2), "took {:?}", out.took);
    sb.assert_free("L");
}

// ---------------------------------------------------------------------------
// 5. Strays

/// `onlyone run OPTS... L -- sh -c SCRIPT`, where the script leaves a
/// `sleep` behind (a stray) and exits 0; and the file the script writes
/// the stray's pid to.
fn run_leaving_a_stray(sb: &Sandbox, opts: &[&str]) -> (Command, PathBuf) {
    let pidfile = sb.path("stray.pid");
    let mut args = vec!["run"];
    args.extend(opts);
    args.extend([
        "L",
        "--",
        "sh",
        "-c",
        "sleep 1000 >/dev/null 2>&1 & echo $! > \"$PIDFILE\"; exit 0",
    ]);
    let mut c = sb.cmd(&args);
    c.env("PIDFILE", &pidfile);
    (c, pidfile)
}

/// The stray whose pid is in `pidfile` is gone: its pid.
fn assert_stray_ended(pidfile: &Path) -> u32 {
    let pid: u32 = read(pidfile).trim().parse().unwrap();
    assert!(!running(pid), "the stray pid {pid} outlived the run");
    pid
}

#[test]
fn a_stray_child_is_ended_when_the_command_exits() {
    let sb = Sandbox::new();
    let (c, pidfile) = run_leaving_a_stray(&sb, &[]);
    let out = sb.finish(c);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let pid = assert_stray_ended(&pidfile);
    assert!(
        out.stderr.contains(&format!("pid {pid}")),
        "the stray is reported: {:?}",
        out.stderr
    );
    sb.assert_free("L");
}

#[test]
fn keep_strays_leaves_the_stray_running_and_releases() {
    let sb = Sandbox::new();
    let (c, pidfile) = run_leaving_a_stray(&sb, &["--keep-strays"]);
    let out = sb.finish(c);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (pid, start) = read_pid(&pidfile);
    assert!(alive(pid, start));
    sb.assert_free("L");
    // The kept stray does not block the next run.
    let out = sb.run(&["run", "L", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(alive(pid, start), "the next run ended the kept stray");
    kill(pid, Signal::KILL);
    wait_dead(pid, start);
}

// ---------------------------------------------------------------------------
// 6. --wait

/// True once `pid` holds an inotify or pidfd descriptor: it is waiting.
fn is_waiting(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|e| {
        std::fs::read_link(e.path()).is_ok_and(|l| {
            let l = l.to_string_lossy();
            l.contains("inotify") || l.contains("pidfd")
        })
    })
}

fn nanos_since_epoch(t: SystemTime) -> i128 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128
}

#[test]
fn wait_starts_the_command_promptly_when_the_holder_exits() {
    let sb = Sandbox::new();
    let stop = sb.path("stop");
    let ts = sb.path("ts");
    let mut holder = sb.holder(
        "L",
        &[],
        "touch \"$READY\"; while [ ! -e \"$STOP\" ]; do sleep 0.005; done",
        &[("STOP", &stop)],
    );
    let mut c = sb.cmd(&[
        "run",
        "--wait",
        "20s",
        "L",
        "--",
        "sh",
        "-c",
        "date +%s%N > \"$TS\"",
    ]);
    c.env("TS", &ts);
    let mut waiter = Kid::spawn(c);
    let wpid = waiter.pid();
    wait_until("the waiter to wait", LONG, || {
        if let Ok(Some(s)) = waiter.0.try_wait() {
            panic!("the waiter exited early: {s:?}");
        }
        is_waiting(wpid)
    });
    assert!(!ts.exists(), "the waiter ran beside the holder");

    std::fs::write(&stop, "").unwrap();
    let (status, exited_at) = holder.wait_timed(LONG);
    assert_eq!(status.code(), Some(0));
    let status = waiter.wait_for(LONG);
    assert_eq!(status.code(), Some(0), "the waiter failed");
    let started: i128 = read(&ts).trim().parse().unwrap();
    let lag_ms = (started - nanos_since_epoch(exited_at)) / 1_000_000;
    assert!(
        lag_ms < 200,
        "the waiter's command started {lag_ms} ms after the holder exited"
    );
    sb.assert_free("L");
}

#[test]
fn wait_gives_up_with_75_after_its_duration() {
    let sb = Sandbox::new();
    let holder = sb.holder("L", &[], "touch \"$READY\"; exec sleep 1000", &[]);
    let marker = sb.path("ran");
    let mut c = sb.cmd(&[
        "run",
        "--wait",
        "300ms",
        "L",
        "--",
        "sh",
        "-c",
        "touch \"$RAN\"",
    ]);
    c.env("RAN", &marker);
    let out = sb.finish(c);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(
        out.took >= Duration::from_millis(300),
        "gave up after {:?}",
        out.took
    );
    assert!(
        out.took < Duration::from_millis(1500),
        "gave up after {:?}",
        out.took
    );
    assert!(
        out.stderr.contains(&format!("pid {}", holder.pid())),
        "{:?}",
        out.stderr
    );
    assert!(!marker.exists());
    assert_eq!(sb.state("L"), "held");
}

// ---------------------------------------------------------------------------
// 7. --replace

#[test]
fn replace_stops_the_old_run_and_runs_the_new_one() {
    let sb = Sandbox::new();
    let old_mark = sb.path("old");
    let new_mark = sb.path("new");
    let mut old = sb.holder(
        "L",
        &[],
        "trap 'echo term > \"$MARK\"; exit 5' TERM; touch \"$READY\"; \
         while :; do sleep 0.05; done",
        &[("MARK", &old_mark)],
    );
    let mut c = sb.cmd(&[
        "run",
        "--replace",
        "L",
        "--",
        "sh",
        "-c",
        "echo new > \"$NEW\"",
    ]);
    c.env("NEW", &new_mark);
    let out = sb.finish(c);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(read(&new_mark).trim(), "new");
    assert_eq!(
        read(&old_mark).trim(),
        "term",
        "the old command did not get TERM"
    );
    let status = old.wait_for(LONG);
    assert_eq!(status.code(), Some(5), "the old onlyone: {status:?}");
    sb.assert_free("L");
}

// ---------------------------------------------------------------------------
// 8. --max-time with KILL escalation

#[test]
fn max_time_escalates_to_kill_for_a_command_that_ignores_term() {
    let sb = Sandbox::new();
    let pidfile = sb.path("cmd.pid");
    let started = Instant::now();
    let mut c = sb.cmd(&[
        "run",
        "--max-time",
        "300ms",
        "--kill-after",
        "300ms",
        "L",
        "--",
        "sh",
        "-c",
        "trap '' TERM; echo $$ > \"$PIDFILE\"; while :; do sleep 0.05; done",
    ]);
    c.env("PIDFILE", &pidfile);
    let mut run = Kid::spawn(c);
    let (pid, start) = read_pid(&pidfile);
    let status = run.wait_for(LONG);
    let took = started.elapsed();
    assert_eq!(status.code(), Some(124), "{status:?}");
    assert!(!alive(pid, start), "the command survived --max-time");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(took >= Duration::from_millis(600), "took only {took:?}");
    sb.assert_free("L");
}

// ---------------------------------------------------------------------------
// 9. Commands that fail to exec, closed and broken pipes

#[test]
fn a_file_that_fails_exec_gives_126() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    // Executable bits, no shebang, not a binary: execve fails with ENOEXEC.
    let garbage = sb.path("garbage");
    let mark = sb.path("interpreted");
    std::fs::write(
        &garbage,
        format!("\x7fELF\x01\x01\ntouch {}\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = sb.run(&[
        OsStr::new("run"),
        OsStr::new("L"),
        OsStr::new("--"),
        garbage.as_os_str(),
    ]);
    sb.assert_free("L");
    assert!(!mark.exists(), "the file was run as a shell script");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stderr.contains("cannot run"), "{:?}", out.stderr);
}

#[test]
fn a_command_that_closes_its_output_gives_its_code() {
    let sb = Sandbox::new();
    let out = sb.run(&["run", "L", "--", "sh", "-c", "exec >&- 2>&- <&-; exit 6"]);
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    sb.assert_free("L");
}

#[test]
fn a_broken_stdout_pipe_gives_the_right_code() {
    let sb = Sandbox::new();
    // `onlyone run L -- true | head -c0`: nothing is written, 0.
    let mut c = sb.cmd(&["run", "L", "--", "true"]);
    c.stdout(broken_pipe());
    let out = sb.finish(c);
    assert_eq!(out.code(), 0, "{out:?}");
    sb.assert_free("L");

    // The command writes to the broken pipe and dies of SIGPIPE: 128+13.
    let mut c = sb.cmd(&["run", "L", "--", "sh", "-c", "echo x; exit 4"]);
    c.stdout(broken_pipe());
    let out = sb.finish(c);
    assert_eq!(out.code(), 128 + 13, "{out:?}");
    sb.assert_free("L");

    // The command ignores SIGPIPE: its own code.
    let mut c = sb.cmd(&["run", "L", "--", "sh", "-c", "trap '' PIPE; echo x; exit 4"]);
    c.stdout(broken_pipe());
    let out = sb.finish(c);
    assert_eq!(out.code(), 4, "{out:?}");
    sb.assert_free("L");
}

/// `sh -c 'exec onlyone --dir DIR ARGS... <&- >&- 2>&-'`.
fn with_closed_fds(sb: &Sandbox, args: &[&str]) -> Out {
    let mut c = sb.program("sh");
    c.arg("-c")
        .arg("exec \"$@\" <&- >&- 2>&-")
        .arg("sh")
        .arg(BIN)
        .arg("--dir")
        .arg(sb.dir())
        .args(args)
        .stdout(Stdio::null());
    sb.finish(c)
}

#[test]
fn closed_stdin_stdout_stderr_give_the_right_code() {
    let sb = Sandbox::new();
    let out = with_closed_fds(&sb, &["run", "L", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.code(), 3, "{out:?}");
    sb.assert_free("L");
    let out = with_closed_fds(
        &sb,
        &["run", "L", "--", "sh", "-c", "echo x; echo y >&2; exit 0"],
    );
    assert_eq!(out.code(), 0, "{out:?}");
    sb.assert_free("L");

    // Held, with a message to say and nowhere to say it: 75, and the
    // holder's record is untouched.
    let holder = sb.holder("L", &[], "touch \"$READY\"; exec sleep 1000", &[]);
    // The command may say it is ready before its wrapper has named it in
    // the record: the record is complete once it names the command.
    wait_until(
        "the record to name the command",
        Duration::from_secs(10),
        || std::fs::read_to_string(sb.path("L.lock")).is_ok_and(|t| t.contains("\ncmdpid=")),
    );
    let before = std::fs::read(sb.path("L.lock")).unwrap();
    let out = with_closed_fds(&sb, &["run", "L", "--", "true"]);
    assert_eq!(out.code(), 75, "{out:?}");
    assert_eq!(
        std::fs::read(sb.path("L.lock")).unwrap(),
        before,
        "the record changed"
    );
    assert_eq!(sb.state("L"), "held");
    drop(holder);
}

#[test]
fn a_broken_stderr_pipe_does_not_change_the_held_code() {
    let sb = Sandbox::new();
    let _holder = sb.holder("L", &[], "touch \"$READY\"; exec sleep 1000", &[]);
    let mut c = sb.cmd(&["run", "L", "--", "true"]);
    c.stderr(broken_pipe());
    let mut kid = Kid::spawn(c);
    let status = kid.wait_for(LONG);
    assert_eq!(
        shell_code(status),
        75,
        "held, stderr a broken pipe: {status:?}"
    );
    assert_eq!(sb.state("L"), "held");
}

#[test]
fn a_broken_stderr_pipe_does_not_change_the_code_of_a_run_with_a_stray() {
    let sb = Sandbox::new();
    let (mut c, pidfile) = run_leaving_a_stray(&sb, &[]);
    c.stderr(broken_pipe());
    let mut kid = Kid::spawn(c);
    let status = kid.wait_for(LONG);
    assert_eq!(shell_code(status), 0, "stderr a broken pipe: {status:?}");
    assert_stray_ended(&pidfile);
    sb.assert_free("L");
}

/// The start time (clock ticks since boot) of the newest kernel thread.
fn newest_kernel_thread() -> Option<(u32, u64)> {
    const PF_KTHREAD: u64 = 0x0020_0000;
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            // Fields from 3 (state) on: flags is field 9, start field 22.
            let f: Vec<&str> = rest.split_whitespace().collect();
            let flags: u64 = f.get(6)?.parse().ok()?;
            let start: u64 = f.get(19)?.parse().ok()?;
            (flags & PF_KTHREAD != 0).then_some((pid, start))
        })
        .max_by_key(|&(_, start)| start)
}

#[test]
fn a_finished_run_is_not_kept_unknown_by_a_kernel_thread() {
    // The record of a run whose wrapper and command are both gone, as
    // `kill -9` leaves it, where the wrapper started just before the newest
    // kernel thread (kworkers come and go all the time). A kernel thread is
    // not a process of the run: the lock is stale, and the next run takes
    // it over.
    let sb = Sandbox::new();
    let (kthread, kstart) = newest_kernel_thread().expect("no kernel thread in /proc");
    let (wrapper, _) = support::dead_process();
    let (cmd, cmd_start) = support::dead_process();
    let record = format!(
        "{wrapper}\nstart={}\nboot={}\ntoken=0123456789abcdef0123456789abcdef\n\
         since=1764400000\nuid=0\nmode=run\ncmd=sleep 1000\ncmdpid={cmd}\n\
         cmdstart={cmd_start}\nonlyone=1\n",
        kstart.saturating_sub(1),
        support::boot_id()
    );
    support::put(&sb.path("L.lock"), record);
    let out = sb.run(&["run", "L", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "kernel thread {kthread} (start {kstart}): {out:?}"
    );
    sb.assert_free("L");
}

// ---------------------------------------------------------------------------
// Found in review

/// A parent that ignores SIGCHLD (the setting survives exec) must not make
/// the run wait forever: the kernel would reap the command unseen.
#[test]
fn an_inherited_ignored_sigchld_does_not_hang_the_run() {
    if !support::have_python3() {
        return;
    }
    let sb = Sandbox::new();
    let mut c = sb.program("python3");
    c.args([
        "-c",
        "import os, signal, sys\n\
         signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n\
         os.execv(sys.argv[1], sys.argv[1:])\n",
        BIN,
        "--dir",
    ])
    .arg(sb.dir())
    .args(["run", "L", "--", "sh", "-c", "sleep 0.2; exit 3"])
    .stdout(Stdio::null());
    let out = sb.finish(c);
    assert_eq!(out.code(), 3, "{out:?}");
    assert!(out.took < Duration::from_secs(5), "{out:?}");
    sb.assert_free("L");
}

/// A stray that forks on TERM (a trap that starts another process) is
/// followed: nothing of the run outlives it, and the lock is released only
/// then.
#[test]
fn a_stray_that_forks_when_ended_is_followed() {
    let sb = Sandbox::new();
    let pidfile = sb.path("late.pid");
    let mut c = sb.cmd(&[
        "run",
        "--kill-after",
        "2s",
        "L",
        "--",
        "sh",
        "-c",
        "sh -c 'trap \"sleep 300 & echo \\$! > $PIDFILE; exit 0\" TERM; \
         while :; do sleep 0.05; done' >/dev/null 2>&1 & \
         sleep 0.2; exit 0",
    ]);
    c.env("PIDFILE", &pidfile);
    let out = sb.finish(c);
    assert_eq!(out.code(), 0, "{out:?}");
    wait_until("the trap to write its pid", LONG, || {
        read_opt(&pidfile).is_some_and(|s| s.ends_with('\n'))
    });
    let late: u32 = read(&pidfile).trim().parse().unwrap();
    assert!(
        !running(late),
        "the process started by the stray's TERM trap outlived the run"
    );
    sb.assert_free("L");
}

fn read_opt(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The command starts with nothing blocked and SIGPIPE at its default,
/// whatever onlyone blocks or ignores itself.
#[test]
fn the_command_starts_with_no_signal_blocked_and_sigpipe_default() {
    let sb = Sandbox::new();
    let status = sb.path("status");
    let mut c = sb.cmd(&[
        "run",
        "L",
        "--",
        "sh",
        "-c",
        // `exec`: a shell blocks signals while it waits for a child, so
        // the mask is read by the process the command became.
        "exec cat /proc/self/status > \"$OUT\"",
    ]);
    c.env("OUT", &status);
    assert_eq!(sb.finish(c).code(), 0);
    let text = read(&status);
    let field = |k: &str| {
        let v = text
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} in {text}"));
        u64::from_str_radix(v.trim(), 16).unwrap()
    };
    assert_eq!(field("SigBlk:"), 0, "blocked signals leak into the command");
    let sigpipe = 1u64 << (13 - 1);
    assert_eq!(
        field("SigIgn:") & sigpipe,
        0,
        "SIGPIPE is ignored in the command"
    );
}

/// A process that carries the run's token without descending from the
/// command (as a job handed to `at` would) is a process of the run too: it
/// is ended before the lock is released.
/// A process that got the run's token without descending from the command
/// (a job handed to `at`) is not searched for when a run ends: that would
/// read every process's environment on every run (SPEC, "Cost"). The run
/// releases; if the wrapper dies instead, the carrier keeps the lock held,
/// and `stop` finds and ends it.
#[test]
fn a_token_carrier_that_is_not_a_descendant_is_left_to_stop() {
    let sb = Sandbox::new();
    let tok = sb.path("token");
    let cmd_pid = sb.path("cmd.pid");
    let mut run = sb.holder(
        "L",
        &[],
        "echo $$ > \"$CMDPID\"; echo \"$ONLYONE_TOKEN\" > \"$TOK\"; touch \"$READY\"; exec sleep 1000",
        &[("TOK", &tok), ("CMDPID", &cmd_pid)],
    );
    let token = read(&tok).trim().to_owned();
    let (cmd, cmd_start) = read_pid(&cmd_pid);
    // Started by the test, not by the run: it only carries the token.
    let carrier = Kid::spawn({
        let mut s = sb.program("sleep");
        s.arg("1000")
            .env("ONLYONE_TOKEN", &token)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        s
    });
    let carrier_pid = carrier.pid();
    // The wrapper and its command die: only the carrier is left of the run.
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    kill(cmd, Signal::KILL);
    wait_dead(cmd, cmd_start);
    assert_held_by(&sb, carrier_pid, "the token carrier");

    let out = sb.run(&["stop", "L", "--kill-after", "5s"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    wait_until("the carrier to be ended", LONG, || !running(carrier_pid));
    let out = sb.run(&["run", "L", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    sb.assert_free("L");
}

/// A run's end is found without a search of the host: the lock is released
/// as soon as the command and its descendants are gone, whatever else
/// carries the token.
#[test]
fn a_run_ends_without_waiting_for_a_token_carrier_outside_it() {
    let sb = Sandbox::new();
    let tok = sb.path("token");
    let go = sb.path("go");
    let mut run = sb.holder(
        "L",
        &[],
        "echo \"$ONLYONE_TOKEN\" > \"$TOK\"; touch \"$READY\"; \
         while [ ! -e \"$GO\" ]; do sleep 0.02; done",
        &[("TOK", &tok), ("GO", &go)],
    );
    let token = read(&tok).trim().to_owned();
    let carrier = Kid::spawn({
        let mut s = sb.program("sleep");
        s.arg("1000")
            .env("ONLYONE_TOKEN", &token)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        s
    });
    std::fs::write(&go, "").unwrap();
    let status = run.wait_for(LONG);
    assert_eq!(shell_code(status), 0);
    sb.assert_free("L");
    assert!(
        running(carrier.pid()),
        "a process outside the run is not the run's to end"
    );
}
