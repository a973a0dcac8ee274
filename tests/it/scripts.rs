//! Shell scripts under `acquire --export` / `release`, run as cron runs
//! them (`sh -c`, not leading their process group): rule 1 holds for a
//! script's workers as flock(1)'s inherited descriptor holds for them.

use crate::support;

use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// The README's form with an EXIT trap: the script starts a worker and
/// ends; its trap releases while the worker (which carries the token)
/// still works. The lock stays held by the worker, `release` says so,
/// and it is free once the worker exits; the run's end is recorded once.
#[test]
fn a_scripts_release_never_frees_the_lock_under_its_workers() {
    let mut sb = Sandbox::new("ONLYONE_SCRIPTS_MARK");
    let dir = sb.dir().to_str().unwrap().to_owned();
    let pidfile = sb.path("worker.pid");
    let errfile = sb.path("release.err");
    let script = format!(
        "vars=$('{BIN}' --dir '{dir}' acquire job --export) || exit; eval \"$vars\"; \
         trap \"'{BIN}' --dir '{dir}' release job 2>'{err}'\" EXIT; \
         sleep 100000 >/dev/null 2>&1 & echo $! > '{pid}.tmp'; mv '{pid}.tmp' '{pid}'; exit 0",
        err = errfile.display(),
        pid = pidfile.display()
    );
    let mut c = sb.program("sh");
    c.args(["-c", &script]);
    let out = finish(c, LIMIT);
    out.expect(0);
    let worker = pid_in(&pidfile);
    sb.foreign.push(worker);
    assert!(running(worker));
    let said = std::fs::read_to_string(&errfile).unwrap();
    assert!(
        said.contains(&format!("stays held by pid {worker}")),
        "release says who still holds it: {said:?}"
    );
    let oo = |args: &[&str]| {
        let mut c = sb.program(BIN);
        c.arg("--dir").arg(&dir).args(args);
        finish(c, LIMIT)
    };
    let out = oo(&["run", "job", "--", "true"]);
    out.expect(75).says(&format!("pid {worker}"));
    oo(&["precheck", "job"]).expect(75);
    kill9_pid(worker);
    wait_gone(worker);
    oo(&["run", "job", "--", "true"]).expect(0);
    let out = oo(&["history", "--json", "job"]);
    out.expect(0);
    let outcomes: Vec<String> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["outcome"].to_string())
        .collect();
    assert_eq!(outcomes.len(), 2, "{}", out.stdout);
    // Two runs, each closed once: the script's, released (its end, once
    // its worker is gone, is written by whoever sees it first, so the two
    // ends may be written in either order), and the next run's exit.
    assert_eq!(
        outcomes.iter().filter(|o| o.contains("released")).count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| o.contains("exit")).count(),
        1,
        "{outcomes:?}"
    );
    assert!(
        !outcomes.iter().any(|o| o.contains("abandoned")),
        "{outcomes:?}"
    );
}

/// A second `acquire` by the shell that holds the lock says so: not
/// "another run is active as pid N", which would name the caller itself.
#[test]
fn a_second_acquire_by_the_holding_shell_names_it_as_this_shell() {
    let sb = Sandbox::new("ONLYONE_SCRIPTS_MARK");
    let dir = sb.dir().to_str().unwrap().to_owned();
    let script = format!(
        "'{BIN}' --dir '{dir}' acquire job || exit 9; echo \"shell=$$\" >&2; \
         '{BIN}' --dir '{dir}' acquire job; echo \"second=$?\" >&2; \
         '{BIN}' --dir '{dir}' release job"
    );
    let mut c = sb.program("sh");
    c.args(["-c", &script]);
    let out = finish(c, LIMIT);
    out.expect(0).says("second=75");
    let shell = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("shell="))
        .unwrap();
    out.says(&format!("already held by this shell (pid {shell})"));
    assert!(!out.stderr.contains("another run"), "{out:#?}");
}

/// A script's lock in `/tmp` has a keeper, which keeps it young while it
/// is held and must end with the run however the run ends: when the
/// script exits without `release`, and when a worker that carried the run
/// on after the script is killed. Nothing touches the lock file then; a
/// keeper that waited for that would linger for its day-long refresh
/// interval.
#[test]
fn a_keeper_ends_with_the_run_it_keeps() {
    let mut sb = Sandbox::new("ONLYONE_SCRIPTS_MARK");
    assert!(
        sb.dir().starts_with("/tmp"),
        "the test needs a directory under /tmp, where scripts' locks get a keeper"
    );
    let dir = sb.dir().to_str().unwrap().to_owned();
    let acquire =
        format!("vars=$('{BIN}' --dir '{dir}' acquire job --export) || exit; eval \"$vars\"");
    // The script ends at once, its lock not released.
    let mut c = sb.program("sh");
    c.args(["-c", &format!("{acquire}; exit 0")]);
    finish(c, LIMIT).expect(0);
    wait_until(
        "the keeper of a script that has exited to end",
        LIMIT,
        || keepers_of(&sb.lock("job")).is_empty(),
    );

    // A worker carries the run on after the script.
    let pidfile = sb.path("worker.pid");
    let mut c = sb.program("sh");
    c.args([
        "-c",
        &format!(
            "{acquire}; sleep 100000 >/dev/null 2>&1 & echo $! > '{pid}.tmp'; mv '{pid}.tmp' '{pid}'; exit 0",
            pid = pidfile.display()
        ),
    ]);
    finish(c, LIMIT).expect(0);
    let worker = pid_in(&pidfile);
    sb.foreign.push(worker);
    let keepers = keepers_of(&sb.lock("job"));
    assert_eq!(keepers.len(), 1, "the held lock has its keeper");
    sb.foreign.extend(&keepers);
    let oo = |args: &[&str]| {
        let mut c = sb.program(BIN);
        c.arg("--dir").arg(&dir).args(args);
        finish(c, LIMIT)
    };
    oo(&["precheck", "job"]).expect(75);
    assert!(
        running(keepers[0]),
        "the keeper keeps the lock while the worker holds it"
    );
    kill9_pid(worker);
    wait_gone(worker);
    wait_until(
        "the keeper of a run whose worker was killed to end",
        LIMIT,
        || keepers_of(&sb.lock("job")).is_empty(),
    );
    oo(&["run", "job", "--", "true"]).expect(0);
}

/// The pid a script wrote to `path` (written whole: renamed into place).
fn pid_in(path: &std::path::Path) -> u32 {
    let text = std::fs::read_to_string(path).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

/// A worker that carried the run on after its script was killed holds the
/// lock until it has exited: all the way, files closed. While a process is
/// in exit(2) its memory goes first, and with it what made it the run's
/// (its environment reads as empty), and its files go after: a flock of
/// its own work is still held then. A contender that took the lock in
/// that window would run beside it. The worker here holds a flock on a
/// file of its own and a gigabyte of memory, whose release makes the
/// window long; a contender tries all through it, and its command checks
/// the worker's flock, with the lock held.
#[test]
fn a_worker_in_exit_holds_the_lock_until_its_files_are_closed() {
    if !have_python3() || !have("flock") {
        return;
    }
    let mut sb = Sandbox::new("ONLYONE_SCRIPTS_MARK");
    let dir = sb.dir().to_str().unwrap().to_owned();
    let (check, ready, go) = (sb.path("check"), sb.path("ready"), sb.path("go"));
    let worker = "import fcntl, mmap, os, sys, time\n\
                  f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n\
                  n = 1 << 30; m = mmap.mmap(-1, n)\n\
                  m.madvise(mmap.MADV_NOHUGEPAGE)\n\
                  for i in range(0, n, 4096): m[i] = 1\n\
                  open(sys.argv[2] + '.tmp', 'w').write(str(os.getpid()))\n\
                  os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n\
                  while not os.path.exists(sys.argv[3]): time.sleep(0.001)\n\
                  os._exit(0)\n";
    let script = format!(
        "vars=$('{BIN}' --dir '{dir}' acquire job --export) || exit; eval \"$vars\"; \
         python3 -c \"$1\" '{check}' '{ready}' '{go}' & wait",
        check = check.display(),
        ready = ready.display(),
        go = go.display()
    );
    let mut c = sb.program("sh");
    c.args(["-c", &script, "sh", worker]);
    let mut owner = Kid::new(c.spawn().unwrap());
    wait_until("the worker to be ready", LIMIT, || ready.exists());
    let pid = pid_in(&ready);
    sb.foreign.push(pid);
    kill9(&mut owner);
    let contend = || {
        let mut c = sb.program(BIN);
        c.arg("--dir")
            .arg(&dir)
            .args(["run", "job", "--", "flock", "-n", "-E", "42"]);
        c.arg(&check).arg("true");
        finish(c, LIMIT)
    };
    contend().expect(75).says(&format!("pid {pid}"));
    put(&go, "");
    let mut tries = 0;
    // The worker's exit is waited out within a try, or the try is 75.
    wait_until("a contender to take the lock", LIMIT, || {
        tries += 1;
        let out = contend();
        match out.code() {
            75 => false,
            0 => true,
            _ => panic!("after {tries} tries, a contender ran beside the worker: {out:#?}"),
        }
    });
}
