//! `onlyone reap` and `run --idle-timeout` with real processes. The idle
//! window is driven through the reaper's state file (its "last changed"
//! times are moved back), never by sleeping for minutes.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// onlyone, with the state directory of the test's `d`.
fn bin(d: &Dir) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_onlyone"));
    c.env(STATE_VAR, &d.state);
    c
}

struct Dir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
    /// The state directory of the test's runs (never the host's).
    state: PathBuf,
}

fn dir() -> Dir {
    let t = open_tempdir();
    let path = t.path().join("locks");
    let state = t.path().join(".state");
    Dir {
        _tmp: t,
        path,
        state,
    }
}

fn onlyone(d: &Dir, args: &[&str]) -> Output {
    bin(d)
        .arg("--dir")
        .arg(&d.path)
        .args(args)
        .output()
        .unwrap()
}

/// A process that is killed when the test ends, pass or fail.
struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        kill9(&mut self.0);
    }
}

/// Spawns `argv` carrying a run's markers for `lock`.
fn marked(argv: &[&str], lock: &Path, token: &str) -> Proc {
    Proc(
        Command::new(argv[0])
            .args(&argv[1..])
            .env("ONLYONE_LOCK", lock)
            .env("ONLYONE_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn state_path(d: &Dir) -> PathBuf {
    d.path.join(".onlyone-reap.json")
}

/// Moves every "last changed" time in the state file back by `by`, as if
/// that much time had passed with nothing changing.
fn age_state(d: &Dir, by: Duration) {
    let p = state_path(d);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    for (_, seen) in v["procs"].as_object_mut().unwrap() {
        // Signed: on a machine booted a minute ago, eleven minutes ago is
        // before the boot.
        let t = seen["changed_ms"].as_i64().unwrap();
        seen["changed_ms"] = serde_json::json!(t - by.as_millis() as i64);
    }
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
}

fn reap_json(d: &Dir, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["reap", "--json"];
    full.extend_from_slice(args);
    let out = onlyone(d, &full);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

fn verdict_of(report: &serde_json::Value, pid: u32) -> Option<String> {
    report["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["pid"] == pid)
        .map(|c| c["verdict"].as_str().unwrap().to_owned())
}

/// Waits until a process's counters stop moving (it reached its idle
/// point: `sleep` after exec), so the first reap records final values.
fn settle(pid: u32) {
    let read = || {
        let st = onlyone::procfs::read_stat(pid).unwrap().unwrap();
        (st.cpu_ticks, onlyone::procfs::io_bytes(pid))
    };
    let mut last = read();
    wait_until("the process to settle", Duration::from_secs(10), || {
        std::thread::sleep(Duration::from_millis(30));
        let now = read();
        let same = now == last;
        last = now;
        same && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() != "sh")
    });
}

#[test]
fn the_seed_scenario_a_finished_run_that_lingers_is_reaped_and_the_next_fire_runs() {
    let d = dir();
    std::fs::create_dir_all(&d.path).unwrap();
    let lock = d.path.join("sync.lock");
    let lingering = leave_a_lingering_run(&d, &lock);

    // The next fire is refused: the run is still "alive".
    assert_eq!(onlyone(&d, &["precheck", "sync"]).status.code(), Some(75));

    // An unrelated idle `sleep` of the user's own, and a process of a job
    // that was not named.
    let mut own = Proc(sleeper().into_inner());
    let other = marked(
        &["sleep", "1000"],
        &d.path.join("other.lock"),
        &"b".repeat(32),
    );

    let first = reap_json(&d, &["--idle", "10m", "sync"]);
    assert_eq!(
        verdict_of(&first, lingering).as_deref(),
        Some("kept-idle-too-short")
    );
    assert_eq!(
        verdict_of(&first, other.0.id()).as_deref(),
        Some("kept-not-named")
    );
    assert_eq!(
        verdict_of(&first, own.0.id()),
        None,
        "no marker: not even a candidate"
    );

    age_state(&d, Duration::from_secs(11 * 60));
    let t = Instant::now();
    let out = onlyone(&d, &["reap", "--idle", "10m", "sync"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("ended pid {lingering}")), "{text}");
    assert!(
        !running(lingering),
        "the lingering process is gone when reap returns"
    );
    assert!(t.elapsed() < Duration::from_secs(6));

    // The seed's flow: reap && precheck, and the fire runs.
    let flow = Command::new("sh")
        .env(STATE_VAR, &d.state)
        .arg("-c")
        .arg(format!(
            "{b} --dir {d} reap sync && {b} --dir {d} precheck sync",
            b = env!("CARGO_BIN_EXE_onlyone"),
            d = d.path.display()
        ))
        .output()
        .unwrap();
    assert_eq!(flow.status.code(), Some(0), "{flow:?}");
    assert_eq!(
        onlyone(&d, &["run", "sync", "--", "true"]).status.code(),
        Some(0)
    );

    // Nothing else was touched.
    assert!(running(own.0.id()) && running(other.0.id()));
    kill9(&mut own.0);
}

/// A run of `sync` whose command leaves an idle process behind and whose
/// wrapper and command are then killed: the lingering process (its pid
/// returned) keeps the lock held.
fn leave_a_lingering_run(d: &Dir, lock: &Path) -> u32 {
    let pidfile = d.path.join("pid");
    let mut wrapper = Proc(
        bin(d)
            .arg("--dir")
            .arg(&d.path)
            .args(["run", "sync", "--", "sh", "-c"])
            .arg(format!(
                "sleep 1000 & echo $! > {}; wait",
                pidfile.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until(
        "the run to start its child",
        Duration::from_secs(10),
        || std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n')),
    );
    let lingering: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The wrapper names the command in the record once its spawn returns,
    // which may be after the command's child wrote its pid.
    wait_until(
        "the record to name the command",
        Duration::from_secs(10),
        || std::fs::read_to_string(lock).is_ok_and(|r| r.contains("\ncmdpid=")),
    );
    let rec = onlyone::LockFile::open(lock)
        .unwrap()
        .inspect()
        .unwrap()
        .unwrap()
        .record
        .unwrap();
    kill9(&mut wrapper.0);
    kill9_pid(rec.cmd_id.unwrap().pid);
    wait_gone(rec.cmd_id.unwrap().pid);
    settle(lingering);
    lingering
}

#[test]
fn busy_processes_of_a_named_job_are_kept() {
    let d = dir();
    std::fs::create_dir_all(&d.path).unwrap();
    let lock = d.path.join("sync.lock");
    let tok = "c".repeat(32);
    let cpu = marked(&["sh", "-c", "while :; do :; done"], &lock, &tok);
    let printer = marked(&["sh", "-c", "while :; do echo tick; done"], &lock, &tok);
    let idle = marked(&["sleep", "1000"], &lock, &tok);
    settle(idle.0.id());
    reap_json(&d, &["--idle", "1s", "sync"]);
    age_state(&d, Duration::from_secs(3600));
    // The busy ones must have moved their counters since the first reap
    // looked (on a loaded machine a loop may not be scheduled at once).
    let recorded = |pid: u32| {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(state_path(&d)).unwrap()).unwrap();
        let start = start_of(pid);
        let seen = &v["procs"][format!("{pid}-{start}")];
        (seen["cpu"].as_u64().unwrap(), seen["io"].as_u64())
    };
    let now = |pid: u32| {
        let st = onlyone::procfs::read_stat(pid).unwrap().unwrap();
        (st.cpu_ticks, onlyone::procfs::io_bytes(pid))
    };
    for pid in [cpu.0.id(), printer.0.id()] {
        let before = recorded(pid);
        wait_until("the busy process to move", Duration::from_secs(10), || {
            now(pid) != before
        });
    }
    let r = reap_json(&d, &["--idle", "1s", "sync"]);
    assert_eq!(verdict_of(&r, cpu.0.id()).as_deref(), Some("kept-busy"));
    assert_eq!(verdict_of(&r, printer.0.id()).as_deref(), Some("kept-busy"));
    assert_eq!(verdict_of(&r, idle.0.id()).as_deref(), Some("ended"));
    assert!(running(cpu.0.id()) && running(printer.0.id()));
    assert!(!running(idle.0.id()));
}

#[test]
fn a_dry_run_changes_nothing() {
    let d = dir();
    std::fs::create_dir_all(&d.path).unwrap();
    let lock = d.path.join("sync.lock");
    let p = marked(&["sleep", "1000"], &lock, &"d".repeat(32));
    settle(p.0.id());
    reap_json(&d, &["--idle", "1s", "sync"]);
    age_state(&d, Duration::from_secs(3600));
    let before = std::fs::read(state_path(&d)).unwrap();
    let r = reap_json(&d, &["--idle", "1s", "--dry-run", "sync"]);
    assert_eq!(r["dry_run"], true);
    assert_eq!(verdict_of(&r, p.0.id()).as_deref(), Some("ended"));
    let text = onlyone(&d, &["reap", "--idle", "1s", "--dry-run", "sync"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains(&format!("would end pid {}", p.0.id())),
        "{text:?}"
    );
    assert!(running(p.0.id()), "a dry run signals nothing");
    assert_eq!(
        std::fs::read(state_path(&d)).unwrap(),
        before,
        "nor writes the state"
    );
    // The real reap then does it.
    reap_json(&d, &["--idle", "1s", "sync"]);
    assert!(!running(p.0.id()));
}

#[test]
fn the_deadline_caps_a_reap_with_many_candidates() {
    let d = dir();
    std::fs::create_dir_all(&d.path).unwrap();
    let lock = d.path.join("sync.lock");
    let tok = "e".repeat(32);
    // Forty idle processes that ignore TERM: ending them would take the
    // whole 60 s grace, which a 1 s deadline cuts short.
    let procs: Vec<Proc> = (0..40)
        .map(|_| marked(&["sh", "-c", "trap '' TERM; exec sleep 1000"], &lock, &tok))
        .collect();
    for p in &procs {
        settle(p.0.id());
    }
    reap_json(&d, &["--idle", "1s", "sync"]);
    age_state(&d, Duration::from_secs(3600));
    let t = Instant::now();
    let out = onlyone(
        &d,
        &[
            "reap",
            "--idle",
            "1s",
            "--grace",
            "60s",
            "--deadline",
            "1s",
            "sync",
        ],
    );
    let took = t.elapsed();
    assert_eq!(out.status.code(), Some(0));
    assert!(took < Duration::from_millis(1800), "took {took:?}");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("deadline"), "{out:?}");
    drop(procs);
}

#[test]
fn concurrent_reaps_keep_the_state_file_whole() {
    let d = dir();
    std::fs::create_dir_all(&d.path).unwrap();
    let lock = d.path.join("sync.lock");
    let _procs: Vec<Proc> = (0..5)
        .map(|_| marked(&["sleep", "1000"], &lock, &"f".repeat(32)))
        .collect();
    for _round in 0..10 {
        let children: Vec<Child> = (0..4)
            .map(|_| {
                bin(&d)
                    .arg("--dir")
                    .arg(&d.path)
                    .args(["reap", "--idle", "10m", "sync"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0));
            assert!(
                !String::from_utf8_lossy(&out.stderr).contains("unreadable"),
                "{out:?}"
            );
        }
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(state_path(&d)).unwrap()).unwrap();
        let procs = v["procs"].as_object().unwrap();
        for p in &_procs {
            let k = format!("{}-{}", p.0.id(), start_of(p.0.id()));
            assert!(procs.contains_key(&k), "{k} missing from {procs:?}");
        }
    }
}

#[test]
fn reap_always_exits_0() {
    let d = dir();
    for args in [
        vec!["reap"],
        vec!["reap", "--bogus", "x"],
        vec!["reap", "bad name"],
        vec!["reap", "--idle", "soon", "x"],
    ] {
        let out = onlyone(&d, &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
    }
    // A lock directory that is a file.
    let f = d._tmp.path().join("file");
    std::fs::write(&f, "").unwrap();
    let out = bin(&d)
        .arg("--dir")
        .arg(&f)
        .args(["reap", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn idle_timeout_ends_an_idle_run_with_124_and_releases() {
    let d = dir();
    let t = Instant::now();
    let out = onlyone(
        &d,
        &["run", "--idle-timeout", "1s", "job", "--", "sleep", "1000"],
    );
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("idle for 1s"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(!d.path.join("job.lock").exists(), "released");
    assert_eq!(
        onlyone(&d, &["run", "job", "--", "true"]).status.code(),
        Some(0)
    );
}

/// `onlyone run --idle-timeout 1s job -- python3 ARGS...` in a fresh
/// directory, to its end; `None` (the test is skipped) without python3.
fn python_with_a_1s_idle_window(args: &[&str]) -> Option<Output> {
    if !have_python3() {
        return None;
    }
    let d = dir();
    let mut full = vec!["run", "--idle-timeout", "1s", "job", "--", "python3"];
    full.extend_from_slice(args);
    Some(onlyone(&d, &full))
}

#[test]
fn idle_timeout_never_ends_a_run_that_prints_between_idle_spells() {
    // One process, no forks: a line every 0.5 s for 4 s, with a 1 s window.
    // Only its bytes written show it is alive.
    let Some(out) = python_with_a_1s_idle_window(&[
        "-u",
        "-c",
        "import time\nfor i in range(8):\n    print(i)\n    time.sleep(0.5)\n",
    ]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 8);
}

#[test]
fn idle_timeout_never_ends_a_busy_silent_run() {
    // CPU for 3 s without a byte of output or a fork, with a 1 s window.
    let Some(out) = python_with_a_1s_idle_window(&[
        "-c",
        "import time\nend = time.time() + 3\nwhile time.time() < end:\n    pass\n",
    ]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

// ---------------------------------------------------------------------------
// Found in review

#[test]
fn a_relative_lock_directory_names_the_same_file_from_anywhere() {
    let d = dir();
    // Two directories, each with its own `locks/` subdirectory.
    let a = d._tmp.path().join("a");
    let b = d._tmp.path().join("b");
    std::fs::create_dir_all(a.join("locks")).unwrap();
    std::fs::create_dir_all(b.join("locks")).unwrap();
    // A live, idle run of `job` whose lock is b/locks/job.lock...
    let mut run = Proc(
        bin(&d)
            .current_dir(&b)
            .args(["--dir", "locks", "run", "job", "--", "sleep", "1000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lock = b.join("locks/job.lock");
    let cmd = wait_command_pid(&lock);
    let _cmd_guard = KillOnDrop(cmd);
    // ...is not the `job` of a/locks: reaping that one never touches it.
    for _ in 0..2 {
        let out = bin(&d)
            .current_dir(&a)
            .args(["--dir", "locks", "reap", "--idle", "0s", "job"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        age_state_at(&a.join("locks"), Duration::from_secs(3600));
    }
    assert!(
        run.0.try_wait().unwrap().is_none(),
        "the other directory's run was ended"
    );
    kill9(&mut run.0);
}

/// Waits for the run whose lock file is `lock` to start its command;
/// returns the command's pid.
fn wait_command_pid(lock: &Path) -> u32 {
    wait_until("the run to start", Duration::from_secs(10), || {
        onlyone::LockFile::open(lock)
            .ok()
            .and_then(|l| l.inspect().ok().flatten())
            .and_then(|s| s.record.ok())
            .is_some_and(|r| r.cmd_id.is_some())
    });
    onlyone::LockFile::open(lock)
        .unwrap()
        .inspect()
        .unwrap()
        .unwrap()
        .record
        .unwrap()
        .cmd_id
        .unwrap()
        .pid
}

/// Kills a pid (not our child) when dropped.
struct KillOnDrop(u32);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        kill9_pid(self.0);
    }
}

fn age_state_at(dir: &Path, by: Duration) {
    let p = dir.join(".onlyone-reap.json");
    let Ok(bytes) = std::fs::read(&p) else { return };
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    for (_, seen) in v["procs"].as_object_mut().unwrap() {
        // Signed: on a machine booted a minute ago, eleven minutes ago is
        // before the boot.
        let t = seen["changed_ms"].as_i64().unwrap();
        seen["changed_ms"] = serde_json::json!(t - by.as_millis() as i64);
    }
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn a_busy_live_run_whose_worker_cleared_its_environment_is_kept() {
    if !have_python3() {
        return;
    }
    let d = dir();
    std::fs::create_dir_all(&d.path).unwrap();
    // The worker carries no marker (env -i), but is in the run's group.
    let mut run = Proc(
        bin(&d)
            .arg("--dir")
            .arg(&d.path)
            .args([
                "run",
                "busy",
                "--",
                "env",
                "-i",
                "/usr/bin/env",
                "python3",
                "-c",
            ])
            .arg("while True: pass")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lock = d.path.join("busy.lock");
    let worker = wait_command_pid(&lock);
    // The worker outlives a SIGKILLed wrapper: it is ended with the test,
    // pass or fail.
    let _worker_guard = KillOnDrop(worker);
    reap_json(&d, &["--idle", "1s", "busy"]);
    age_state(&d, Duration::from_secs(3600));
    // The worker uses CPU between the looks (waited for, not assumed).
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state_path(&d)).unwrap()).unwrap();
    let seen = v["procs"][format!("{worker}-{}", start_of(worker))]["cpu"]
        .as_u64()
        .expect("the worker is in the state");
    wait_until("the worker to use CPU", Duration::from_secs(10), || {
        onlyone::procfs::read_stat(worker)
            .unwrap()
            .unwrap()
            .cpu_ticks
            > seen
    });
    let r = reap_json(&d, &["--idle", "1s", "busy"]);
    let ended: Vec<_> = r["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "ended")
        .collect();
    assert!(ended.is_empty(), "a busy run was reaped: {ended:?}");
    assert!(
        run.0.try_wait().unwrap().is_none(),
        "the busy run was ended"
    );
    kill9(&mut run.0);
}

#[test]
fn a_process_seen_for_the_first_time_is_never_ended() {
    let d = dir();
    std::fs::create_dir_all(&d.path).unwrap();
    let p = marked(
        &["sleep", "1000"],
        &d.path.join("sync.lock"),
        &"a".repeat(32),
    );
    settle(p.0.id());
    let r = reap_json(&d, &["--idle", "0s", "sync"]);
    assert_eq!(
        verdict_of(&r, p.0.id()).as_deref(),
        Some("kept-idle-too-short")
    );
    assert!(running(p.0.id()));
}

/// A private tmux server (its own `TMUX_TMPDIR`), killed when the test
/// ends, pass or fail.
struct Tmux {
    tmpdir: PathBuf,
}

impl Tmux {
    fn start(under: &Path) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!("tmux is not installed: skipping (.ci/run installs it)");
            return None;
        }
        let tmpdir = under.join("tmux");
        std::fs::create_dir_all(&tmpdir).unwrap();
        let t = Tmux { tmpdir };
        let st = t
            .cmd()
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "base",
                "sleep 100000",
            ])
            .status()
            .unwrap();
        assert!(st.success(), "tmux new-session: {st:?}");
        Some(t)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.env("TMUX_TMPDIR", &self.tmpdir)
            .env_remove("TMUX")
            .stdin(Stdio::null());
        c
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
        // The README's recipe keeps the agent on a server of its own.
        let _ = self
            .cmd()
            .args(["-L", "onlyone-agent", "kill-server"])
            .stderr(Stdio::null())
            .status();
    }
}

/// The seed's runner: each fire hands its work to a terminal server that
/// is not the work's parent, and the command returns at once. With
/// `--linger` (the README's line, run as written) the agent in the tmux
/// pane holds the lock: fires skip while it lives, and once it sits idle
/// at its prompt for the window, the reaper ends it and the next fire runs.
#[test]
fn an_agent_handed_to_tmux_holds_the_lock_until_reaped() {
    let d = dir();
    std::fs::create_dir_all(&d.path).unwrap();
    let Some(tmux) = Tmux::start(d._tmp.path()) else {
        return;
    };
    let work = d._tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let agent = work.join("agent.sh");
    std::fs::write(
        &agent,
        "#!/bin/sh\necho $$ > agent.pid.tmp && mv agent.pid.tmp agent.pid\necho at-the-prompt\nread answer\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let fire = || {
        Command::new("sh")
            .env(STATE_VAR, &d.state)
            .arg("-c")
            .arg(readme_block("tmux"))
            .current_dir(&work)
            .env("PATH", path_with_onlyone(d._tmp.path()))
            .env("ONLYONE_DIR", &d.path)
            .env("TMUX_TMPDIR", &tmux.tmpdir)
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = fire();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let pidfile = work.join("agent.pid");
    wait_until(
        "the agent to start in tmux",
        Duration::from_secs(10),
        || pidfile.exists(),
    );
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ppid = onlyone::procfs::read_stat(pid).unwrap().unwrap().ppid;
    assert!(
        onlyone::procfs::command_line(ppid).is_some_and(|c| c.starts_with("tmux")),
        "the agent is the tmux server's child, not the command's"
    );

    // Fires skip while the agent lives, whatever it is doing.
    let out = fire();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert_eq!(onlyone(&d, &["precheck", "agent"]).status.code(), Some(75));
    // Held by the agent, or by the tmux server the fire started for it,
    // which lingers too.
    let status = onlyone(&d, &["status", "--json", "agent"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let holder = v["locks"][0]["holder_pid"].as_u64();
    assert!(
        holder == Some(pid.into()) || holder == Some(ppid.into()),
        "{v:#}"
    );

    // Idle at its prompt for the window: the reaper ends it.
    settle_at_prompt(pid);
    let _ = reap_json(&d, &["--idle", "10m", "agent"]);
    age_state(&d, Duration::from_secs(11 * 60));
    let r = reap_json(&d, &["--idle", "10m", "agent"]);
    assert_eq!(verdict_of(&r, pid).as_deref(), Some("ended"), "{r:#}");
    assert!(!running(pid));
    std::fs::remove_file(&pidfile).unwrap();
    let out = fire();
    assert_eq!(out.status.code(), Some(0), "the next fire runs: {out:?}");
    wait_until("the next agent", Duration::from_secs(10), || {
        pidfile.exists()
    });
}

/// When a lingering run's command exits, onlyone tells the reaper what
/// its processes are doing, so the first reap after the window ends an
/// agent that has been idle since: no second look needed.
#[test]
fn reap_judges_a_lingering_run_from_its_first_call() {
    let d = dir();
    std::fs::create_dir_all(&d.path).unwrap();
    let Some(tmux) = Tmux::start(d._tmp.path()) else {
        return;
    };
    let go = d._tmp.path().join("go");
    let pidfile = d._tmp.path().join("agent.pid");
    // The command returns once the test says the agent has settled.
    let script = format!(
        "tmux new-window -d -e ONLYONE_TOKEN=\"$ONLYONE_TOKEN\" \
         'echo $$ > {p}.tmp && mv {p}.tmp {p}; read answer'; \
         while [ ! -e {go} ]; do sleep 0.01; done",
        p = pidfile.display(),
        go = go.display()
    );
    let mut run = Proc(
        bin(&d)
            .arg("--dir")
            .arg(&d.path)
            .args(["run", "--linger", "agent", "--", "sh", "-c", &script])
            .env("TMUX_TMPDIR", &tmux.tmpdir)
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_until("the agent to start", Duration::from_secs(10), || {
        pidfile.exists()
    });
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    settle_at_prompt(pid);
    std::fs::write(&go, "").unwrap();
    let (status, _, stderr) = wait_bounded(
        &mut run.0,
        Instant::now(),
        Duration::from_secs(20),
        "run --linger",
    );
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("the run of `agent` lingers in pid {pid}")),
        "{stderr}"
    );
    age_state(&d, Duration::from_secs(11 * 60));
    let r = reap_json(&d, &["--idle", "10m", "agent"]);
    assert_eq!(
        verdict_of(&r, pid).as_deref(),
        Some("ended"),
        "first call: {r:#}"
    );
    assert!(!running(pid));
    // Reaped once idle: the work was over. Done when idle, a success for
    // `check --max-age`, never "the last run failed".
    let h = onlyone(&d, &["history", "agent", "--json"]);
    let last: serde_json::Value =
        serde_json::from_slice(h.stdout.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert_eq!(last["result"], "done-when-idle", "{last:#}");
    assert_eq!(last["ended_by"], "reap", "{last:#}");
    let c = onlyone(&d, &["check", "agent", "--max-age", "1h"]);
    assert_eq!(
        c.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&c.stdout)
    );
    assert_eq!(
        onlyone(&d, &["run", "agent", "--", "true"]).status.code(),
        Some(0)
    );
}

/// Waits until an interactive process sits at its prompt: blocked in a
/// read, its counters still.
fn settle_at_prompt(pid: u32) {
    let read = || {
        let st = onlyone::procfs::read_stat(pid).unwrap().unwrap();
        (st.cpu_ticks, onlyone::procfs::io_bytes(pid), st.state)
    };
    let mut last = read();
    wait_until(
        "the agent to sit at its prompt",
        Duration::from_secs(10),
        || {
            std::thread::sleep(Duration::from_millis(30));
            let now = read();
            let same = now == last && now.2 == 'S';
            last = now;
            same
        },
    );
}

/// `--linger` with nothing left behind leaves a stale record that the next
/// run takes over; with a stray that carries the token, the lock stays
/// held by it. The wrapper exits with the command's code either way.
#[test]
fn linger_releases_when_nothing_is_left_and_holds_for_a_leftover() {
    let d = dir();
    assert_eq!(
        onlyone(&d, &["run", "--linger", "L", "--", "sh", "-c", "exit 3"])
            .status
            .code(),
        Some(3)
    );
    // Nothing lingers: the record is stale, and the next run takes it over.
    let v: serde_json::Value =
        serde_json::from_slice(&onlyone(&d, &["status", "--json", "L"]).stdout).unwrap();
    assert_eq!(v["locks"][0]["state"], "stale", "{v:#}");
    assert_eq!(
        onlyone(&d, &["run", "L", "--", "true"]).status.code(),
        Some(0)
    );
    assert!(!d.path.join("L.lock").exists(), "released");
    let pidfile = d.path.join("stray.pid");
    let out = onlyone(
        &d,
        &[
            "run",
            "--linger",
            "L",
            "--",
            "sh",
            "-c",
            &format!(
                "sleep 1000 >/dev/null 2>&1 & echo $! > {}; exit 4",
                pidfile.display()
            ),
        ],
    );
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let stray: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(stray);
    assert!(running(stray), "the leftover lives on");
    let again = onlyone(&d, &["run", "L", "--", "true"]);
    assert_eq!(again.status.code(), Some(75), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains(&format!("pid {stray}")),
        "{again:?}"
    );
    kill9_pid(stray);
    wait_gone(stray);
    assert_eq!(
        onlyone(&d, &["run", "L", "--", "true"]).status.code(),
        Some(0)
    );
}

/// A lock taken by a script (`acquire --owner`) is covered: its owner is
/// part of the run, ended once idle for the window.
#[test]
fn reap_covers_a_lock_taken_by_a_script() {
    let d = dir();
    let owner = Proc(sleeper().into_inner());
    let pid = owner.0.id();
    let out = onlyone(&d, &["acquire", "scr", "--owner", &pid.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    settle(pid);
    let first = reap_json(&d, &["--idle", "10m", "scr"]);
    assert_eq!(
        verdict_of(&first, pid).as_deref(),
        Some("kept-idle-too-short"),
        "{first:#}"
    );
    age_state(&d, Duration::from_secs(11 * 60));
    let r = reap_json(&d, &["--idle", "10m", "scr"]);
    assert_eq!(verdict_of(&r, pid).as_deref(), Some("ended"), "{r:#}");
    assert!(!running(pid));
    assert_eq!(onlyone(&d, &["precheck", "scr"]).status.code(), Some(0));
}

/// A lingering run's leftover that cleared its environment (a daemon
/// started through `env -i`) carries neither token nor group: the record
/// names it, so the lock stays held by it once the wrapper has exited, and
/// the reaper ends it once idle.
#[test]
fn a_lingering_daemon_without_the_token_holds_the_lock_and_is_reaped() {
    let d = dir();
    let pidfile = d._tmp.path().join("daemon.pid");
    let script = format!(
        "setsid env -i sh -c 'echo $$ > {p}.tmp && mv {p}.tmp {p} && exec sleep 1000' \
         >/dev/null 2>&1 &\nwhile [ ! -s {p} ]; do sleep 0.01; done",
        p = pidfile.display()
    );
    let out = onlyone(&d, &["run", "--linger", "L", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let daemon: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(daemon);
    assert_eq!(
        onlyone::procfs::environ_values(daemon, &["ONLYONE_TOKEN"]),
        Some(vec![None]),
        "the daemon carries no token"
    );
    let again = onlyone(&d, &["run", "L", "--", "true"]);
    assert_eq!(again.status.code(), Some(75), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains(&format!("pid {daemon}")),
        "{again:?}"
    );
    settle(daemon);
    let _ = reap_json(&d, &["--idle", "10m", "L"]);
    age_state(&d, Duration::from_secs(11 * 60));
    let r = reap_json(&d, &["--idle", "10m", "L"]);
    assert_eq!(verdict_of(&r, daemon).as_deref(), Some("ended"), "{r:#}");
    assert_eq!(
        onlyone(&d, &["run", "L", "--", "true"]).status.code(),
        Some(0)
    );
}
