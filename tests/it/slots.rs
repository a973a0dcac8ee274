//! `--slots N`: at most N runs of one lock at once, each in a slot that is
//! a whole lock (`LOCK`, `LOCK.slot.1`, ...). Counted inside the commands:
//! each writes a start and an end line with its pid and ONLYONE_SLOT, and
//! the test replays them.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use onlyone::LockFile;

use crate::support::{
    BIN, Sandbox, finish, kill9_pid, put, running, wait_bounded, wait_gone, wait_until,
};

/// How long a condition may take to hold.
const HANG: Duration = Duration::from_secs(30);

/// A command that notes its start and end, with its slot, in `log`.
fn noting(log: &Path, pause: &str) -> String {
    let log = log.display();
    format!(
        "echo \"S $$ $ONLYONE_SLOT\" >> {log}; sleep {pause}; echo \"E $$ $ONLYONE_SLOT\" >> {log}"
    )
}

/// Replays a log of start and end lines: the most commands alive at once;
/// fails when a slot is outside 0..n or two live commands share one.
pub(crate) fn most_at_once(log: &str, n: u32) -> usize {
    let mut live: BTreeSet<u32> = BTreeSet::new();
    let mut most = 0;
    for line in log.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let slot: u32 = parts[2]
            .parse()
            .unwrap_or_else(|_| panic!("a slot: {line:?}"));
        assert!(slot < n, "slot {slot} of {n}: {log}");
        if parts[0] == "S" {
            assert!(live.insert(slot), "slot {slot} held twice at once: {log}");
            most = most.max(live.len());
        } else {
            assert!(live.remove(&slot), "an end without a start: {line:?}");
        }
    }
    most
}

/// The slot files of lock `name` in the sandbox that exist.
fn slot_files(sb: &Sandbox, name: &str) -> Vec<String> {
    let prefix = format!("{name}.lock.slot.");
    let mut out: Vec<String> = std::fs::read_dir(sb.dir())
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|f| f.starts_with(&prefix))
        .collect();
    out.sort();
    out
}

/// Starts `run --slots N LOCK -- sleep 1000` and waits until its command
/// runs and has written its slot to `STARTED.i`: the wrapper's pid.
fn hold(sb: &mut Sandbox, n: &str, started: &Path, i: usize) -> u32 {
    let mut c = sb.oo_cmd();
    let script = format!(
        "echo $ONLYONE_SLOT > {}.{i}; exec sleep 1000",
        started.display()
    );
    c.args(["run", "--slots", n, "j", "--", "sh", "-c", &script]);
    let pid = sb.keep(c);
    let mark = Path::new(&format!("{}.{i}", started.display())).to_path_buf();
    // The file is there once the shell opens it, its slot once written.
    wait_until("the holder's command", HANG, || {
        std::fs::read_to_string(&mark).is_ok_and(|s| s.ends_with('\n'))
    });
    pid
}

/// `run --slots 2 ARGS j -- sh -c SCRIPT`, its output piped.
fn fire(sb: &Sandbox, args: &[&str], script: &str) -> Child {
    let mut c = sb.oo_cmd();
    c.args(["run", "--slots", "2"])
        .args(args)
        .args(["j", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().expect("spawn onlyone")
}

/// Waits for `child` to end: its exit code and what it said.
fn ended(child: &mut Child, what: &str) -> (i32, String) {
    let (st, _, err) = wait_bounded(child, Instant::now(), HANG, what);
    (st.code().unwrap_or(-1), err)
}

/// The pids in the line of lock `j`, first first, and which is queued.
fn line(sb: &Sandbox) -> Vec<(u32, bool)> {
    LockFile::open(sb.lock("j"))
        .unwrap()
        .waiters()
        .into_iter()
        .map(|w| (w.record.pid, w.queued))
        .collect()
}

/// The names in the sandbox of the line of `j` (tickets, the queue seat).
fn line_files(sb: &Sandbox) -> Vec<String> {
    std::fs::read_dir(sb.dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".j.lock."))
        .collect()
}

/// The pid of the command of the run whose record is at `slot`.
fn command_of(slot: &Path) -> u32 {
    let record = std::fs::read_to_string(slot).unwrap();
    record
        .lines()
        .find_map(|l| l.strip_prefix("cmdpid="))
        .unwrap_or_else(|| panic!("no cmdpid: {record}"))
        .parse()
        .unwrap()
}

/// What the runs wrote to `out`, in order.
fn ran(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The pids `status --json` lists as waiting for `j`, and whether queued.
fn status_waiters(sb: &Sandbox) -> Vec<(u64, bool)> {
    let status = sb.oo(&["status", "--json", "j"]).json();
    status["locks"][0]["waiters"]
        .as_array()
        .unwrap_or_else(|| panic!("no waiters: {status}"))
        .iter()
        .map(|w| (w["pid"].as_u64().unwrap(), w["queued"] == true))
        .collect()
}

/// Runs `n` copies of the shell line `fire` at once and waits for every
/// one (none is left behind when one fails): how many failed.
fn contend(sb: &Sandbox, n: usize, fire: &str) -> usize {
    let kids: Vec<_> = (0..n)
        .map(|_| {
            let mut c = sb.program("sh");
            c.args(["-c", fire]);
            c.spawn().unwrap()
        })
        .collect();
    kids.into_iter()
        .filter_map(|mut k| (!k.wait().unwrap().success()).then_some(()))
        .count()
}

/// Invariant 15 (PROTOCOL.md): a waiter waits for every slot, not one,
/// and keeps its place in the line until it holds a slot. Both slots of 2
/// are held (slot 0's run outlasting everything); fires A then B wait
/// with `--wait`, in that order. When slot 1's run ends, A runs, in slot
/// 1, while slot 0 stays held and B still waits (as `status` lists it);
/// when A's run ends, B runs. Nothing of the line is left.
#[test]
fn invariant_15_a_waiter_is_served_when_any_slot_frees() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    hold(&mut sb, "2", &started, 0);
    hold(&mut sb, "2", &started, 1);
    let slot1 = sb.path("j.lock.slot.1");
    assert_eq!(
        std::fs::read_to_string(format!("{}.1", started.display())).unwrap(),
        "1\n"
    );
    let slot0 = std::fs::read_to_string(sb.lock("j")).unwrap();
    let out = sb.path("out");
    let o = out.display();
    let mut a = fire(
        &sb,
        &["--wait", "60s"],
        &format!("echo \"A $ONLYONE_SLOT\" >> {o}; exec sleep 1000"),
    );
    let a_pid = a.id();
    wait_until("A in line", HANG, || line(&sb) == [(a_pid, false)]);
    let mut b = fire(
        &sb,
        &["--wait", "60s"],
        &format!("echo \"B $ONLYONE_SLOT\" >> {o}"),
    );
    let b_pid = b.id();
    wait_until("B in line behind A", HANG, || {
        line(&sb) == [(a_pid, false), (b_pid, false)]
    });
    assert_eq!(
        status_waiters(&sb),
        [(a_pid.into(), false), (b_pid.into(), false)]
    );

    // Slot 1's run ends: A, the head, takes slot 1; B waits on.
    kill9_pid(command_of(&slot1));
    wait_until("A runs", HANG, || !ran(&out).is_empty());
    assert_eq!(ran(&out), ["A 1"]);
    assert_eq!(std::fs::read_to_string(sb.lock("j")).unwrap(), slot0);
    assert!(
        b.try_wait().unwrap().is_none(),
        "B ended before a slot freed"
    );
    wait_until("A out of the line", HANG, || line(&sb) == [(b_pid, false)]);
    assert_eq!(status_waiters(&sb), [(b_pid.into(), false)]);

    // A's run ends: B takes its slot.
    kill9_pid(command_of(&slot1));
    assert_eq!(ended(&mut b, "B").0, 0);
    assert_eq!(ran(&out), ["A 1", "B 1"]);
    ended(&mut a, "A");
    assert_eq!(std::fs::read_to_string(sb.lock("j")).unwrap(), slot0);
    assert_eq!(line_files(&sb), Vec::<String>::new());
}

/// Invariant 12 (PROTOCOL.md) for a lock of slots: with both slots of 2
/// held, a `--queue` fire waits (queued, as `status` lists it); the next
/// skips at once with 75, "one already queued", and what it came for (a
/// change written just before it) is picked up by the waiter's run, which
/// starts once a slot frees. Nothing of the line is left.
#[test]
fn a_queued_fire_of_slots_picks_up_a_skipped_one() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    hold(&mut sb, "2", &started, 0);
    hold(&mut sb, "2", &started, 1);
    let change = sb.path("change");
    let out = sb.path("out");
    let mut q = fire(
        &sb,
        &["--queue"],
        &format!(
            "echo \"first:$(cat {})\" >> {}",
            change.display(),
            out.display()
        ),
    );
    let q_pid = q.id();
    wait_until("the first fire queued", HANG, || {
        line(&sb) == [(q_pid, true)]
    });
    assert_eq!(status_waiters(&sb), [(q_pid.into(), true)]);

    put(&change, "2");
    let t = Instant::now();
    sb.oo(&["run", "--slots", "2", "--queue", "j", "--", "true"])
        .expect(75)
        .says("one already queued")
        .says(&format!("pid {q_pid}"));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "a queued skip is at once"
    );

    kill9_pid(command_of(&sb.path("j.lock.slot.1")));
    let (code, err) = ended(&mut q, "the queued fire");
    assert_eq!(code, 0, "{err}");
    assert_eq!(ran(&out), ["first:2"]);
    assert_eq!(line_files(&sb), Vec::<String>::new());
}

/// Invariant 13 (PROTOCOL.md): 8 contenders of `--slots 3`, 12 fires
/// each, never have more than 3 commands alive at once (counted inside
/// the commands), and do reach 3.
#[test]
fn invariant_13_at_most_n_runs_hold_slots_one_a_slot() {
    let sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let log = sb.path("log");
    put(&log, "");
    let cmd = noting(&log, "0.05");
    let fire = format!(
        "for i in $(seq 12); do {BIN} --dir {} run -q --slots 3 j -- sh -c '{cmd}'; \
         c=$?; [ $c = 0 ] || [ $c = 75 ] || exit $c; done",
        sb.dir().display()
    );
    assert_eq!(contend(&sb, 8, &fire), 0, "a contender failed");
    let text = std::fs::read_to_string(&log).unwrap();
    let most = most_at_once(&text, 3);
    assert_eq!(most, 3, "three at once was never reached: {text}");
    assert_eq!(slot_files(&sb, "j"), Vec::<String>::new());
}

/// Invariant 14 (PROTOCOL.md): a full pool skips (75); a SIGKILLed
/// holder's slot is taken at once by the next fire.
#[test]
fn invariant_14_a_dead_holders_slot_is_taken() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    let holders: Vec<u32> = (0..3).map(|i| hold(&mut sb, "3", &started, i)).collect();
    let slots: BTreeSet<String> = (0..3)
        .map(|i| std::fs::read_to_string(format!("{}.{i}", started.display())).unwrap())
        .map(|s| s.trim().to_owned())
        .collect();
    assert_eq!(slots, ["0", "1", "2"].map(String::from).into());
    assert_eq!(slot_files(&sb, "j"), ["j.lock.slot.1", "j.lock.slot.2"]);
    sb.oo(&["run", "--slots", "3", "j", "--", "true"])
        .expect(75)
        .says("`j`");
    // The holder of slot 1 (whichever it is) dies with its command.
    let record = std::fs::read_to_string(sb.path("j.lock.slot.1")).unwrap();
    let owner: u32 = record.lines().next().unwrap().parse().unwrap();
    let cmd: u32 = record
        .lines()
        .find_map(|l| l.strip_prefix("cmdpid="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(holders.contains(&owner), "{record}");
    kill9_pid(owner);
    kill9_pid(cmd);
    // SIGKILL is sent, not done: the next fire comes once both are dead
    // (the owner a zombie of this test at most).
    wait_gone(owner);
    wait_gone(cmd);
    // The dead run is over, though the two others hold their slots: check
    // says so, and history shows it abandoned, not running.
    let check = sb.oo(&["check", "j"]);
    check.expect(2);
    assert!(check.stdout.contains("abandoned"), "{check:#?}");
    let abandoned: Vec<u64> = sb
        .history_json("j")
        .into_iter()
        .filter(|r| r["outcome"] == "abandoned")
        .map(|r| r["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(abandoned, [u64::from(owner)]);
    let out = sb.oo(&[
        "run",
        "--slots",
        "3",
        "j",
        "--",
        "sh",
        "-c",
        "echo $ONLYONE_SLOT",
    ]);
    out.expect(0);
    assert_eq!(out.stdout.trim(), "1", "{out:#?}");
}

#[test]
fn a_fire_with_another_number_of_slots_is_refused() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    hold(&mut sb, "3", &started, 0);
    for other in [
        &["--slots", "2"][..],
        &["--slots", "4"],
        &["--slots", "1"],
        &[],
    ] {
        let mut args = vec!["run"];
        args.extend_from_slice(other);
        args.extend(["j", "--", "true"]);
        sb.oo(&args)
            .expect(125)
            .says("is held with 3 slots, and this take asks for")
            .says("a lock's number of slots changes once no run holds it");
    }
    // The same number is let in.
    sb.oo(&["run", "--slots", "3", "j", "--", "true"]).expect(0);
}

#[test]
fn a_smaller_number_is_refused_while_a_slot_above_it_is_held() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    hold(&mut sb, "3", &started, 0);
    hold(&mut sb, "3", &started, 1);
    hold(&mut sb, "3", &started, 2);
    // Free slot 0: its holder and command die.
    let record = std::fs::read_to_string(sb.lock("j")).unwrap();
    let owner: u32 = record.lines().next().unwrap().parse().unwrap();
    let cmd: u32 = record
        .lines()
        .find_map(|l| l.strip_prefix("cmdpid="))
        .unwrap()
        .parse()
        .unwrap();
    kill9_pid(owner);
    kill9_pid(cmd);
    wait_gone(owner);
    wait_gone(cmd);
    sb.oo(&["run", "--slots", "2", "j", "--", "true"])
        .expect(125)
        .says("is held with 3 slots, and this take asks for 2");
    sb.oo(&["run", "j", "--", "true"])
        .expect(125)
        .says("is held with 3 slots, and this take asks for 1");
}

#[test]
fn one_slot_is_the_lock_of_one_byte_for_byte() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    hold(&mut sb, "1", &started, 0);
    let record = std::fs::read_to_string(sb.lock("j")).unwrap();
    assert!(!record.contains("slots="), "{record}");
    assert_eq!(slot_files(&sb, "j"), Vec::<String>::new());
    let with = sb.oo(&["run", "--slots", "1", "j", "--", "true"]);
    let without = sb.oo(&["run", "j", "--", "true"]);
    with.expect(75);
    without.expect(75);
    let age = |s: &str| s.replace("for 1s", "for 0s");
    assert_eq!(age(&with.stderr), age(&without.stderr));
    let out = sb.oo(&[
        "run",
        "--slots",
        "1",
        "k",
        "--",
        "sh",
        "-c",
        "echo $ONLYONE_SLOT",
    ]);
    out.expect(0);
    assert_eq!(out.stdout, "0\n");
}

#[test]
fn root_s_and_nobody_s_fires_share_the_slots_of_a_shared_directory() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let Some(sh) = sb.shared_with_nobody("root_s_and_nobody_s_fires_share_the_slots") else {
        return;
    };
    let mark = sh.locks.join("nobody-started");
    let mut root = sb.program(BIN);
    root.arg("--dir")
        .arg(&sh.locks)
        .args(["run", "--slots", "2", "j", "--", "sleep", "1000"]);
    sb.keep(root);
    wait_until("root's run", HANG, || sh.locks.join("j.lock").exists());
    let script = format!("echo $ONLYONE_SLOT > {}; exec sleep 1000", mark.display());
    let nobody = sh.as_nobody(
        &sb,
        &["run", "--slots", "2", "j", "--", "sh", "-c", &script],
    );
    sb.keep(nobody);
    wait_until("nobody's run", HANG, || {
        std::fs::read_to_string(&mark).is_ok_and(|s| s.ends_with('\n'))
    });
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "1\n");
    let mut c = sb.program(BIN);
    c.arg("--dir")
        .arg(&sh.locks)
        .args(["run", "--slots", "2", "j", "--", "true"]);
    finish(c, HANG).expect(75);
    finish(
        sh.as_nobody(&sb, &["run", "--slots", "2", "j", "--", "true"]),
        HANG,
    )
    .expect(75);
}

/// With a store, `--slots` and `stop --pid` are the store's
/// (store_slots.rs): neither is refused for it (the store here is
/// unreachable: the fire fails on that, never on the option).
#[test]
fn slots_and_stop_pid_are_never_refused_with_a_store() {
    let sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    for args in [
        &["run", "--slots", "1", "j", "--", "true"][..],
        &["run", "--slots", "2", "j", "--", "true"],
        &["stop", "--pid", "4242", "j"],
    ] {
        let mut c = sb.program(BIN);
        c.env("ONLYONE_STORE", "postgres://nowhere.invalid/x")
            .args(args);
        let out = finish(c, HANG);
        assert_ne!(out.code(), 0, "{out:#?}");
        assert!(
            !out.stderr.contains("--slots") && !out.stderr.contains("--pid"),
            "{out:#?}"
        );
    }
}

#[test]
fn status_metrics_and_history_count_every_slot() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    for i in 0..3 {
        hold(&mut sb, "3", &started, i);
    }
    let out = sb.oo(&["status", "--json"]);
    out.expect(0);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let locks = v["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 1, "slot files are no locks: {v:#}");
    assert_eq!(locks[0]["slot_count"], 3, "{v:#}");
    let names: Vec<&str> = locks[0]["slot_holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            assert_eq!(h["state"], "held", "{h:#}");
            h["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(names, ["j[1]", "j[2]"]);
    let table = sb.oo(&["status"]);
    let first: Vec<&str> = table
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(first, ["j", "j[1]", "j[2]"], "{table:#?}");
    let metrics = sb.oo(&["metrics"]);
    metrics
        .expect(0)
        .prints("onlyone_slots{lock=\"j\"} 3\n")
        .prints("onlyone_slots_held{lock=\"j\"} 3\n")
        .prints("onlyone_running{lock=\"j\"} 1\n");
    sb.end_processes();

    // Runs that overlap are each a run of the lock, none abandoned.
    let log = sb.path("log");
    put(&log, "");
    let cmd = noting(&log, "0.3");
    let fire = format!(
        "{BIN} --dir {} run --slots 3 k -- sh -c '{cmd}'",
        sb.dir().display()
    );
    assert_eq!(contend(&sb, 3, &fire), 0, "a fire failed");
    assert_eq!(most_at_once(&std::fs::read_to_string(&log).unwrap(), 3), 3);
    let runs = sb.history_json("k");
    assert_eq!(runs.len(), 3, "{runs:#?}");
    for r in &runs {
        assert_eq!(
            (&r["outcome"], &r["exit"]),
            (&"exit".into(), &0.into()),
            "{runs:#?}"
        );
    }
}

#[test]
fn stop_ends_the_runs_of_every_slot_and_says_how_many() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    for i in 0..3 {
        hold(&mut sb, "3", &started, i);
    }
    sb.oo(&["stop", "j"])
        .expect(0)
        .says("stopped the run of `j`")
        .says("stopped 2 more run(s) of `j`, in its other slots");
    assert!(!sb.lock("j").exists());
    assert_eq!(slot_files(&sb, "j"), Vec::<String>::new());
    let runs = sb.history_json("j");
    assert_eq!(runs.len(), 3, "{runs:#?}");
    sb.oo(&["stop", "j"]).expect(0).says("is not running");
}

#[test]
fn reap_sees_the_lingering_work_of_every_slot() {
    let sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let mut lingering = Vec::new();
    for i in 0..2 {
        let pidfile = sb.path(&format!("pid{i}"));
        let script = format!(
            "sleep 1000 >/dev/null 2>&1 & echo $! > {}",
            pidfile.display()
        );
        sb.oo(&[
            "run", "--slots", "2", "--linger", "j", "--", "sh", "-c", &script,
        ])
        .expect(0);
        wait_until("the lingering process", HANG, || {
            std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
        });
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        lingering.push(pid);
    }
    assert_eq!(slot_files(&sb, "j"), ["j.lock.slot.1"]);
    let out = sb.oo(&["reap", "--json", "--idle", "10m", "j"]);
    out.expect(0);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    // Each is the job's (not yet idle long enough, or still busy under a
    // loaded host), never another job's.
    for pid in lingering {
        let candidate = report["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["pid"] == pid)
            .unwrap_or_else(|| panic!("{pid} is no candidate: {report:#}"));
        assert_eq!(candidate["job"], "j", "{pid}: {report:#}");
        assert_ne!(candidate["verdict"], "kept-not-named", "{pid}: {report:#}");
    }
}

#[test]
fn a_script_releases_the_slot_it_acquired() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    hold(&mut sb, "2", &started, 0);
    let script = format!(
        "{b} --dir {d} acquire --slots 2 j || exit 9; \
         test -e {d}/j.lock.slot.1 || exit 8; \
         {b} --dir {d} release --exit 0 j",
        b = BIN,
        d = sb.dir().display()
    );
    let mut c = sb.program("sh");
    c.args(["-c", &script]);
    finish(c, HANG).expect(0);
    assert_eq!(slot_files(&sb, "j"), Vec::<String>::new());
    assert!(sb.lock("j").exists(), "the run's slot 0 is left alone");
    let runs = sb.history_json("j");
    assert_eq!(runs.len(), 2, "{runs:#?}");
}

#[test]
fn acquire_export_names_the_slot_and_its_file() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    hold(&mut sb, "2", &started, 0);
    let script = format!(
        "eval \"$({b} --dir {d} acquire --slots 2 --export j)\" || exit 9; \
         echo \"$ONLYONE_SLOT $ONLYONE_LOCK\"; {b} --dir {d} release j",
        b = BIN,
        d = sb.dir().display()
    );
    let mut c = sb.program("sh");
    c.args(["-c", &script]);
    let out = finish(c, HANG);
    out.expect(0);
    let slot1 = sb.path("j.lock.slot.1");
    assert_eq!(out.stdout, format!("1 {}\n", slot1.display()), "{out:#?}");
    assert!(!slot1.exists());
    // A lock of one slot exports what it always did.
    let script = format!(
        "{b} --dir {d} acquire --export k; {b} --dir {d} release k",
        b = BIN,
        d = sb.dir().display()
    );
    let mut c = sb.program("sh");
    c.args(["-c", &script]);
    let out = finish(c, HANG);
    out.expect(0);
    assert!(!out.stdout.contains("ONLYONE_SLOT"), "{out:#?}");
}

#[test]
fn precheck_with_slots_is_free_while_a_slot_is() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    sb.oo(&["precheck", "--slots", "3", "j"]).expect(0);
    hold(&mut sb, "3", &started, 0);
    hold(&mut sb, "3", &started, 1);
    sb.oo(&["precheck", "--slots", "3", "j"]).expect(0);
    sb.oo(&["precheck", "j"]).expect(75);
    hold(&mut sb, "3", &started, 2);
    sb.oo(&["precheck", "--slots", "3", "j"])
        .expect(75)
        .says("`j`");
}

/// A run of lock `j` that holds a slot: its wrapper's pid, its slot (as
/// ONLYONE_SLOT said it) and the slot's file, and its command's pid.
struct Holding {
    wrapper: u32,
    slot: String,
    file: std::path::PathBuf,
    command: u32,
}

/// [`hold`], and waits until the slot's record names the run's command.
fn hold_run(sb: &mut Sandbox, n: &str, started: &Path, i: usize) -> Holding {
    let wrapper = hold(sb, n, started, i);
    let mark = format!("{}.{i}", started.display());
    let slot = std::fs::read_to_string(&mark).unwrap().trim().to_owned();
    let file = match slot.as_str() {
        "0" => sb.lock("j"),
        k => sb.path(&format!("j.lock.slot.{k}")),
    };
    let record = || std::fs::read_to_string(&file).unwrap_or_default();
    wait_until("the slot's record names the command", HANG, || {
        record().lines().any(|l| l.starts_with("cmdpid="))
    });
    assert_eq!(
        record().lines().next(),
        Some(wrapper.to_string().as_str()),
        "slot {slot}"
    );
    Holding {
        wrapper,
        slot,
        command: command_of(&file),
        file,
    }
}

/// True while the wrapper and the command of `run` both live.
fn alive(run: &Holding) -> bool {
    running(run.wrapper) && running(run.command)
}

/// True once the wrapper and the command of `run` are both gone.
fn gone(run: &Holding) -> bool {
    !running(run.wrapper) && !running(run.command)
}

/// `stop --pid PID` of one of three slots' runs ends that run only: the
/// other two wrappers and their commands live on, and their slots stay
/// theirs. A command's pid names its run too.
#[test]
fn stop_pid_ends_only_the_run_of_that_pid() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    let runs: Vec<Holding> = (0..3)
        .map(|i| hold_run(&mut sb, "3", &started, i))
        .collect();
    let slots: Vec<&str> = runs.iter().map(|r| r.slot.as_str()).collect();
    assert_eq!(slots, ["0", "1", "2"]);

    let out = sb.oo(&["stop", "--pid", &runs[1].wrapper.to_string(), "j"]);
    out.expect(0)
        .says(&format!("stopped the run of `j` (pid {}", runs[1].wrapper));
    assert!(!out.stderr.contains("more run(s)"), "{out:#?}");
    wait_until("the stopped run gone", HANG, || gone(&runs[1]));
    assert!(alive(&runs[0]) && alive(&runs[2]), "another run was ended");
    assert!(!runs[1].file.exists(), "its slot is free");
    assert!(runs[0].file.exists() && runs[2].file.exists());

    // By the pid of its command.
    sb.oo(&["stop", "--pid", &runs[2].command.to_string(), "j"])
        .expect(0)
        .says(&format!("stopped the run of `j` (pid {}", runs[2].wrapper));
    wait_until("the second stopped run gone", HANG, || gone(&runs[2]));
    assert!(alive(&runs[0]), "the last run was ended");
    let stopped: Vec<u64> = sb
        .history_json("j")
        .into_iter()
        .filter(|r| r["result"] == "stopped")
        .map(|r| r["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(
        stopped,
        [u64::from(runs[2].wrapper), u64::from(runs[1].wrapper)]
    );
}

/// `stop --pid PID` where no run of the lock has PID stops nothing and
/// exits 125, naming the lock, PID and the pids that hold it; PID's own
/// process (a sleeper of no run) is never signalled. A free lock says it
/// is not running, with 125 too.
#[test]
fn stop_pid_that_holds_no_slot_is_refused_naming_the_holders() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    let a = hold_run(&mut sb, "2", &started, 0);
    let b = hold_run(&mut sb, "2", &started, 1);
    let other = sb.sleeper();
    sb.oo(&["stop", "--pid", &other.to_string(), "j"])
        .expect(125)
        .says(&format!("no run of `j` has pid {other}"))
        .says(&format!("held by pid {}, pid {}", a.wrapper, b.wrapper))
        .says("nothing was stopped");
    assert!(alive(&a) && alive(&b), "a run was ended");
    assert!(running(other), "the process of no run was ended");
    sb.oo(&["stop", "--pid", &other.to_string(), "k"])
        .expect(125)
        .says(&format!(
            "no run of `k` has pid {other}: `k` is not running"
        ));
    assert!(running(other), "the process of no run was ended");
}

/// `stop --pid` on a lock of one slot: another pid is refused, the run's
/// pid stops it.
#[test]
fn stop_pid_stops_the_run_of_a_lock_of_one_slot() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    let run = hold_run(&mut sb, "1", &started, 0);
    let w = run.wrapper;
    let other = sb.sleeper();
    sb.oo(&["stop", "--pid", &other.to_string(), "j"])
        .expect(125)
        .says(&format!(
            "no run of `j` has pid {other}: it is held by pid {w} "
        ));
    assert!(alive(&run) && running(other));
    sb.oo(&["stop", "--pid", &w.to_string(), "j"])
        .expect(0)
        .says(&format!("stopped the run of `j` (pid {w}"));
    assert!(!sb.lock("j").exists());
    wait_until("the run gone", HANG, || gone(&run));
}

/// `run --slots 3 --replace j -- sh -c 'echo $ONLYONE_SLOT'`, waited for.
fn replace_fire(sb: &Sandbox) -> crate::support::Out {
    sb.oo(&[
        "run",
        "--slots",
        "3",
        "--replace",
        "j",
        "--",
        "sh",
        "-c",
        "echo $ONLYONE_SLOT",
    ])
}

/// The wrapper pids of the runs of `j` that history shows stopped.
fn stopped_pids(sb: &Sandbox) -> Vec<u64> {
    sb.history_json("j")
        .into_iter()
        .filter(|r| r["result"] == "stopped")
        .map(|r| r["pid"].as_u64().unwrap())
        .collect()
}

/// `run --replace --slots 3` with a slot free takes it: nothing is
/// stopped, the holder runs on.
#[test]
fn replace_with_a_free_slot_takes_it_and_stops_nothing() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    let run = hold_run(&mut sb, "3", &started, 0);
    let out = replace_fire(&sb);
    out.expect(0);
    assert_eq!(out.stdout, "1\n", "{out:#?}");
    assert!(!out.stderr.contains("replacing"), "{out:#?}");
    assert!(alive(&run), "the holder was stopped");
    assert_eq!(stopped_pids(&sb), Vec::<u64>::new());
}

/// `run --replace --slots 3` with every slot held stops exactly one run,
/// the oldest (it took its slot a second before the others), and runs in
/// the slot it freed; the two others run on.
#[test]
fn replace_with_every_slot_held_stops_the_oldest_and_runs() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let started = sb.path("started");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let oldest = hold_run(&mut sb, "3", &started, 0);
    let second = now();
    wait_until("the next second", HANG, || now() > second);
    let young = [
        hold_run(&mut sb, "3", &started, 1),
        hold_run(&mut sb, "3", &started, 2),
    ];
    let out = replace_fire(&sb);
    out.expect(0).says(&format!(
        "replacing the run of `j`: stopping pid {} ",
        oldest.wrapper
    ));
    assert_eq!(out.stdout.trim(), oldest.slot, "{out:#?}");
    assert_eq!(out.stderr.matches("replacing").count(), 1, "{out:#?}");
    wait_until("the oldest run gone", HANG, || gone(&oldest));
    for run in &young {
        assert!(alive(run), "a younger run was stopped");
    }
    assert_eq!(stopped_pids(&sb), [u64::from(oldest.wrapper)]);
}

/// `stop --pid` chooses only among runs the slots prove live: a record
/// that nobody wrote in a shared directory, naming a process of root's
/// (its real pid and start) in slot 1, is no run of root's. Root's `stop
/// --pid` of that process stops nothing and says the pid of the lock's
/// one live run; the process and the run live on.
#[test]
fn stop_pid_never_chooses_a_record_another_account_forged() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let Some(sh) = sb.shared_with_nobody("stop_pid_never_chooses_a_record_another_account_forged")
    else {
        return;
    };
    let mut root = sb.program(BIN);
    root.arg("--dir")
        .arg(&sh.locks)
        .args(["run", "--slots", "2", "j", "--", "sleep", "1000"]);
    let run = sb.keep(root);
    let slot0 = sh.locks.join("j.lock");
    wait_until("root's run", HANG, || {
        std::fs::read_to_string(&slot0).is_ok_and(|r| r.contains("cmdpid="))
    });
    let victim = sb.sleeper();
    let forged = format!(
        "{victim}\nstart={}\nboot={}\ntoken={}\nsince=1764400000\nhost={}\nuid=0\nmode=run\n\
         cmd=sleep 1000\nslots=2\nonlyone=1\n",
        crate::support::start_of(victim),
        crate::support::boot_id(),
        "f".repeat(32),
        onlyone::procfs::host_name()
    );
    let slot1 = sh.locks.join("j.lock.slot.1");
    let mut c = sb.program(sh.ru);
    c.args(["-u", "nobody", "--", "sh", "-c", "cat > \"$1\"", "sh"])
        .arg(&slot1)
        .stdin(Stdio::piped());
    let mut writer = c.spawn().unwrap();
    std::io::Write::write_all(&mut writer.stdin.take().unwrap(), forged.as_bytes()).unwrap();
    assert!(writer.wait().unwrap().success());
    let mut c = sb.program(BIN);
    c.arg("--dir")
        .arg(&sh.locks)
        .args(["stop", "--pid", &victim.to_string(), "j"]);
    finish(c, HANG).expect(125).says(&format!(
        "no run of `j` has pid {victim}: it is held by pid {run} "
    ));
    assert!(running(victim), "the forged record's process was signalled");
    assert!(running(run), "root's run was stopped");
}

/// `run --slots 2 j` whose command says it runs (`DIR/started.TAG`), then
/// waits for `DIR/go.TAG` and exits `code`: the wrapper's pid, once its
/// command runs.
fn run_until_go(sb: &mut Sandbox, tag: &str, code: i32) -> u32 {
    let d = sb.dir().display().to_string();
    let script = format!(
        "touch {d}/started.{tag}; while [ ! -e {d}/go.{tag} ]; do sleep 0.02; done; exit {code}"
    );
    let mut c = sb.oo_cmd();
    c.args(["run", "--slots", "2", "j", "--", "sh", "-c", &script]);
    let pid = sb.keep(c);
    let started = sb.path(&format!("started.{tag}"));
    sb.wait_ready(pid, &started, HANG);
    pid
}

/// The cell of column `head` in each row of a table below its head:
/// tab-separated (`status` to a pipe) or aligned (`history`), where a
/// cell starts where its head does.
fn column(table: &str, head: &str) -> Vec<String> {
    let mut lines = table.lines().skip_while(|l| !l.contains(head));
    let heads = lines.next().unwrap_or_default();
    if heads.contains('\t') {
        let i = heads.split('\t').position(|h| h == head).unwrap();
        return lines
            .map(|l| l.split('\t').nth(i).unwrap_or_default().to_owned())
            .collect();
    }
    let from = heads.find(head).unwrap();
    let to = heads[from + head.len()..]
        .find(|c: char| c != ' ')
        .map(|n| from + head.len() + n);
    lines
        .map(|l| {
            let cell = match to {
                Some(to) => l.get(from..to),
                None => l.get(from..),
            };
            cell.unwrap_or_default().trim().to_owned()
        })
        .collect()
}

/// "Last" is the last to end. A starts first and ends last with exit 3;
/// B starts later, beside it, and ends first with exit 0. The last run is
/// A's: `check` is CRITICAL (the last run failed), `onlyone_last_exit_code`
/// is 3, status's LAST RUN (and `last_run` in `--json`) is A's exit 3, and
/// `history` lists A first, then B (the table and `--json`).
#[test]
fn the_last_run_is_the_last_to_end_not_the_last_to_start() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let a = run_until_go(&mut sb, "a", 3);
    let b = run_until_go(&mut sb, "b", 0);
    put(&sb.path("go.b"), "");
    assert_eq!(sb.exit_of_kid(b, HANG).code(), Some(0));
    put(&sb.path("go.a"), "");
    assert_eq!(sb.exit_of_kid(a, HANG).code(), Some(3));

    let check = sb.oo(&["check", "j"]);
    check.expect(2);
    assert!(
        check
            .stdout
            .starts_with("ONLYONE CRITICAL - j: the last run failed (exit 3"),
        "{check:#?}"
    );
    sb.oo(&["metrics", "j"])
        .expect(0)
        .prints("onlyone_last_exit_code{lock=\"j\"} 3\n");
    let status = sb.oo(&["status", "--json", "j"]).json();
    let last = &status["locks"][0]["last_run"];
    assert_eq!(
        (&last["exit"], &last["result"]),
        (&3.into(), &"failure".into()),
        "{status:#}"
    );
    let table = sb.oo(&["status", "j"]).stdout.clone();
    let cells = column(&table, "LAST RUN");
    assert!(cells[0].starts_with("exit 3, "), "{table}");

    let runs: Vec<(u64, i64)> = sb
        .history_json("j")
        .iter()
        .map(|r| (r["pid"].as_u64().unwrap(), r["exit"].as_i64().unwrap()))
        .collect();
    assert_eq!(runs, [(u64::from(a), 3), (u64::from(b), 0)]);
    let table = sb.oo(&["history", "j"]).stdout.clone();
    let outcomes = column(&table, "OUTCOME");
    assert_eq!(outcomes, ["exit 3", "exit 0"], "{table}");
    let pids = column(&table, "PID");
    assert_eq!(pids, [a.to_string(), b.to_string()], "{table}");
}

/// `onlyone_slots` and `onlyone_slots_held` stay while a lock that has
/// had slots is free (no slot file left): N as its last run took it, 0
/// held. A series that comes and goes breaks `rate()` and alerts.
#[test]
fn the_slot_families_stay_while_the_lock_is_free() {
    let sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    sb.oo(&["run", "--slots", "3", "j", "--", "true"]).expect(0);
    assert!(!sb.lock("j").exists());
    assert_eq!(slot_files(&sb, "j"), Vec::<String>::new());
    sb.oo(&["metrics"])
        .expect(0)
        .prints("onlyone_slots{lock=\"j\"} 3\n")
        .prints("onlyone_slots_held{lock=\"j\"} 0\n")
        .prints("onlyone_running{lock=\"j\"} 0\n");
    // A lock that never had slots has neither.
    sb.oo(&["run", "k", "--", "true"]).expect(0);
    let out = sb.oo(&["metrics", "k"]);
    assert!(!out.stdout.contains("onlyone_slots"), "{out:#?}");
}
