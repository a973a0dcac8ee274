//! The lock engine against real processes and real files: the five
//! invariants of PROTOCOL.md, takeover after `kill -9`, PID reuse, zombies,
//! other boots, invalid pids, EPERM, a 1000-round reclaim race, and hostile
//! things at the lock path.
//!
//! Child processes are this test binary re-executed with a role
//! (`child_entry`), so they run the library itself.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use onlyone::command::MAX_TAKEOVER_TRIES;
use onlyone::test_hooks::{self, Point};
use onlyone::{
    AcquireOptions, Error, Holder, LockFile, Owner, Released, StaleReason, UnknownReason, Verdict,
};
use support::*;

// ---------------------------------------------------------------------------
// Child processes

const ROLE: &str = "ONLYONE_TEST_ROLE";
const LOCK: &str = "ONLYONE_TEST_LOCK";
const READY: &str = "ONLYONE_TEST_READY";
const GO: &str = "ONLYONE_TEST_GO";
const ARG: &str = "ONLYONE_TEST_ARG";
/// The python3 that every user may run (a python under /root is out of
/// reach of nobody).
const PYTHON: &str = "/usr/bin/python3";

fn child(role: &str, lock: &Path, ready: &Path) -> Command {
    entry(
        Command::new(std::env::current_exe().unwrap()),
        role,
        lock,
        ready,
    )
}

/// Makes `c` (this test binary, or a program that runs it with the
/// arguments that follow) run `child_entry` in `role`. It carries the mark
/// of the test's [`Dir`] (the lock's directory), so that it and all it
/// starts are killed when the test ends, passed or failed.
fn entry(mut c: Command, role: &str, lock: &Path, ready: &Path) -> Command {
    c.env(MARK, lock.parent().unwrap_or(lock))
        .args([
            "--exact",
            "engine::child_entry",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(ROLE, role)
        .env(LOCK, lock)
        .env(READY, ready)
        .stdin(Stdio::null());
    c
}

/// Runs the role `inspect` of `lock` with `ARG=arg` under `wrapper` (a
/// program that runs this test binary, named next: `strace ...`,
/// `runuser -u nobody --`) to its end. The binary is run from the lock's
/// directory (the test's, 0755 under /tmp), where another user can reach
/// it whatever the mode of the checkout.
fn inspect_under(mut wrapper: Command, lock: &Path, ready: &Path, arg: &str) -> Output {
    let dir = lock.parent().expect("the lock's directory");
    wrapper
        .arg(reachable_by_others(&std::env::current_exe().unwrap(), dir))
        .current_dir(dir);
    entry(wrapper, "inspect", lock, ready)
        .env(ARG, arg)
        .output()
        .unwrap()
}

/// `runuser -u nobody --`.
fn as_nobody() -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "nobody", "--"]);
    c
}

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(name).unwrap_or_else(|| panic!("{name} is not set")))
}

fn touch(p: &Path, text: &str) {
    std::fs::write(p, text).unwrap();
}

fn wait_for_file(p: &Path) {
    wait_until(
        &format!("{} to appear", p.display()),
        Duration::from_secs(20),
        || p.exists(),
    );
}

/// The entry point of child processes; a no-op when run as a test.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let lock = LockFile::open(env_path(LOCK)).unwrap();
    let ready = env_path(READY);
    match role.as_str() {
        // Acquire, say so, and hold until killed.
        "hold" => {
            let _g = lock.try_acquire().unwrap();
            touch(&ready, "");
            loop {
                std::thread::park();
            }
        }
        // Acquire, then release, but freeze inside the removal guard.
        "freeze-in-release" => {
            let g = lock.try_acquire().unwrap();
            let ready2 = ready.clone();
            test_hooks::set(lock.path(), move |p, _| {
                if p == Point::ReleaseUnderGuard {
                    touch(&ready2, "");
                    loop {
                        std::thread::park();
                    }
                }
            });
            let _ = g.release();
            unreachable!();
        }
        // Release on behalf of a pid, pausing under the guard until GO exists.
        "release-for" => {
            let pid: u32 = std::env::var(ARG).unwrap().parse().unwrap();
            let go = env_path(GO);
            let ready2 = ready.clone();
            test_hooks::set(lock.path(), move |p, _| {
                if p == Point::ReleaseUnderGuard {
                    touch(&ready2, "");
                    wait_for_file(&go);
                }
            });
            let r = lock.release_owned_by(pid);
            println!("@@ {r:?}");
        }
        // Acquire (marking the moment a reclaim starts), report, then hold.
        "take" => take_and_hold(&lock, &ready),
        // A run's wrapper: acquire in run mode, start `sh` that leaves a
        // `sleep` grandchild, record the command, report both pids, hold.
        "wrapper" => be_a_wrapper(&lock, &ready),
        // One contender of the reclaim race: one try per byte on stdin.
        "racer" => race_for(&lock),
        // Print the verdict and what kill(pid, 0) says (run as `nobody`).
        "inspect" => {
            let seen = lock.inspect().unwrap();
            let pid: u32 = std::env::var(ARG).unwrap().parse().unwrap();
            println!(
                "@@ verdict={:?} kill_probe={}",
                seen.map(|s| s.verdict),
                onlyone::procfs::kill_probe(pid)
            );
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

/// The child role `take`: acquires (marking the moment a reclaim starts),
/// reports, then holds.
fn take_and_hold(lock: &LockFile, ready: &Path) {
    let marker = env_path(GO);
    test_hooks::set(lock.path(), move |p, _| {
        if p == Point::BeforeReclaim {
            touch(&marker, "");
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let g = lock.acquire(&AcquireOptions::new().deadline(deadline));
    match g {
        Ok(g) => {
            touch(ready, "acquired");
            let _keep = g;
            loop {
                std::thread::park();
            }
        }
        Err(e) => touch(ready, &format!("error: {e}")),
    }
}

/// The child role `wrapper`, a run's wrapper: acquires in run mode,
/// starts `sh` that leaves a `sleep` grandchild, records the command,
/// reports both pids, holds.
fn be_a_wrapper(lock: &LockFile, ready: &Path) -> ! {
    let token = onlyone::command::new_token();
    let mut g = lock
        .acquire(&AcquireOptions::new().run_mode().token(token.clone()))
        .unwrap();
    let sh = Command::new("sh")
        .args([
            "-c",
            // Written whole, then renamed: the parent waits for the name.
            "sleep 1000 & echo $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"; wait",
            "sh",
        ])
        .arg(ready.with_extension("grandchild"))
        .env("ONLYONE_TOKEN", &token)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    g.set_command(sh.id()).unwrap();
    wait_for_file(&ready.with_extension("grandchild"));
    touch(ready, &sh.id().to_string());
    // Hold until killed; the wait is for the lint: sh is killed too.
    let mut sh = sh;
    let _ = sh.wait();
    loop {
        std::thread::park();
    }
}

/// The child role `racer`, one contender of the reclaim race: one try
/// per `go` line on stdin.
fn race_for(lock: &LockFile) {
    let mut held = None;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        if line == "go" {
            if let Some(g) = held.take() {
                onlyone::LockGuard::leave_to_owner(g);
            }
            let verdict = match lock.try_acquire() {
                Ok(g) => {
                    // Keep the record (owner: this live process), so
                    // a slower racer of this round sees it held.
                    held = Some(g);
                    "won".to_owned()
                }
                Err(Error::Held(_)) => "held".to_owned(),
                Err(e) => format!("error {e}"),
            };
            writeln!(out, "@@ {verdict}").unwrap();
            out.flush().unwrap();
        }
    }
}

/// Reads the `@@ ` lines a child printed.
fn reports(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| l.strip_prefix("@@ ").map(str::to_owned))
        .collect()
}

struct Reaped(Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        kill9(&mut self.0);
    }
}

/// The variable that marks the processes of a test (its [`Dir`]'s path).
const MARK: &str = "ONLYONE_ENGINE_MARK";

/// A test's temp dir (0755, under /tmp). When it is dropped, passed or
/// failed, every process that carries its mark is killed, however deep:
/// the children [`entry`] and [`Dir::cmd`] make, and all they started.
struct Dir(Sandbox);

impl Dir {
    fn path(&self) -> &Path {
        self.0.dir()
    }

    /// `prog`, marked, stdin closed.
    fn cmd(&self, prog: &str) -> Command {
        self.0.program(prog)
    }
}

fn setup() -> (Dir, PathBuf, LockFile) {
    let dir = Dir(Sandbox::new(MARK));
    let path = dir.path().join("job.lock");
    let lock = LockFile::open(&path).unwrap();
    (dir, path, lock)
}

fn verdict_of(lock: &LockFile) -> Verdict {
    lock.inspect()
        .unwrap()
        .expect("the lock file exists")
        .verdict
}

/// Hooks are process-global: tests that set one run one at a time.
static HOOKED: std::sync::Mutex<()> = std::sync::Mutex::new(());

// ---------------------------------------------------------------------------
// The five invariants of PROTOCOL.md

#[test]
fn invariant_1_every_removal_is_justified_under_the_guard() {
    let _serial = HOOKED.lock().unwrap_or_else(|p| p.into_inner());
    let (_d, path, lock) = setup();
    let me = std::process::id();
    let my_start = start_of(me);
    // A stale record: our pid, but another start time (a reused pid).
    put(&path, record_text(me, my_start + 1, "aaaa"));
    assert!(matches!(
        verdict_of(&lock),
        Verdict::Stale(StaleReason::Reused { .. })
    ));

    // Between the verdict and the reclaim, a fresh live record with the
    // same pid takes its place.
    let fresh = record_text(me, my_start, "bbbb");
    let fresh2 = fresh.clone();
    let p2 = path.clone();
    test_hooks::set(lock.path(), move |point, _| {
        if point == Point::BeforeReclaim {
            put(&p2, &fresh2);
        }
    });
    let result = lock.try_acquire();
    test_hooks::clear();

    match result {
        Err(Error::Held(h)) => assert_eq!(h.record.token.as_deref(), Some("bbbb")),
        other => panic!("expected the fresh owner to hold the lock, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        fresh,
        "the fresh record survives"
    );
}

#[test]
fn invariant_2_the_guard_is_a_kernel_lock_freed_on_death() {
    let (d, path, lock) = setup();
    let ready = d.path().join("ready");
    let mut c = Reaped(child("freeze-in-release", &path, &ready).spawn().unwrap());
    wait_for_file(&ready);

    // The child is frozen inside the removal guard: a release cannot finish.
    let dir_fd = std::fs::File::open(d.path().join(format!(
        ".onlyone-guard.{}",
        rustix::process::geteuid().as_raw()
    )))
    .unwrap();
    assert_eq!(
        rustix::fs::flock(
            &dir_fd,
            rustix::fs::FlockOperation::NonBlockingLockExclusive
        ),
        Err(rustix::io::Errno::WOULDBLOCK),
        "the child holds the guard"
    );
    drop(dir_fd);

    kill9(&mut c.0);

    // Its record is stale now; taking it over needs the guard, and so does
    // the release after.
    let t = Instant::now();
    let g = lock
        .try_acquire()
        .expect("takeover after the guard holder died");
    g.release().expect("release after the guard holder died");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert!(lock.inspect().unwrap().is_none());
}

#[test]
fn invariant_3_release_is_guarded_always() {
    let (d, path, lock) = setup();
    // The owner is a shell-like process; the lock is acquired for it.
    let mut owner = sleeper();
    let owner_pid = owner.id();
    lock.acquire(&AcquireOptions::new().owner(Owner::Pid(owner_pid)))
        .unwrap()
        .leave_to_owner();

    // The releaser reads "ours" under the guard and pauses there.
    let ready = d.path().join("releaser-ready");
    let go = d.path().join("releaser-go");
    let releaser = child("release-for", &path, &ready)
        .env(GO, &go)
        .env(ARG, owner_pid.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&ready);

    // Now the owner dies, and another process sets out to take over.
    kill9(&mut owner);
    let taker_ready = d.path().join("taker-ready");
    let taker_reclaiming = d.path().join("taker-reclaiming");
    let _taker = Reaped(
        child("take", &path, &taker_ready)
            .env(GO, &taker_reclaiming)
            .spawn()
            .unwrap(),
    );
    wait_for_file(&taker_reclaiming);

    // The releaser goes on.
    touch(&go, "");
    let out = releaser.wait_with_output().unwrap();
    assert_eq!(reports(&out.stdout), vec!["Ok(Removed)".to_owned()]);

    wait_for_file(&taker_ready);
    wait_until("the taker to report", Duration::from_secs(10), || {
        std::fs::read_to_string(&taker_ready).is_ok_and(|s| !s.is_empty())
    });
    assert_eq!(std::fs::read_to_string(&taker_ready).unwrap(), "acquired");
    // The new record survives, and it is the taker's.
    match lock.try_acquire() {
        Err(Error::Held(h)) => assert_eq!(h.record.pid, _taker.0.id()),
        other => panic!("expected the taker to hold the lock, got {other:?}"),
    }
}

#[test]
fn invariant_4_a_run_is_alive_while_any_of_its_processes_is_alive() {
    let (d, path, lock) = setup();
    let ready = d.path().join("wrapper-ready");
    let mut wrapper = Reaped(child("wrapper", &path, &ready).spawn().unwrap());
    wait_until(
        "the wrapper to start its command",
        Duration::from_secs(20),
        || std::fs::read_to_string(&ready).is_ok_and(|s| !s.is_empty()),
    );
    let sh: u32 = std::fs::read_to_string(&ready)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let sleep: u32 = std::fs::read_to_string(ready.with_extension("grandchild"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let rec = lock.inspect().unwrap().unwrap().record.unwrap();
    assert_eq!(rec.cmd_id.map(|c| c.pid), Some(sh));

    // kill -9 the wrapper, then the command: the grandchild lives on.
    kill9(&mut wrapper.0);
    kill9_pid(sh);
    wait_gone(sh);
    match lock.try_acquire() {
        Err(Error::Held(h)) => assert_eq!(h.holder.pid(), sleep, "{h}"),
        other => panic!("a live grandchild must keep the run held, got {other:?}"),
    }
    let held = Error::Held(Box::new(
        lock.inspect().unwrap().unwrap().held_by(&path).unwrap(),
    ));
    assert!(held.to_string().contains("leftover"), "{held}");

    // Once the last process exits, a waiter acquires promptly.
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let r = lock.acquire(&AcquireOptions::new().wait(Duration::from_secs(20)));
            (r.map(|g| g.leave_to_owner()), Instant::now())
        })
    };
    kill9_pid(sleep);
    let killed = Instant::now();
    let (r, when) = waiter.join().unwrap();
    r.expect("the waiter acquires once the run is over");
    let lag = when.saturating_duration_since(killed);
    assert!(
        lag < Duration::from_secs(2),
        "acquired {lag:?} after the last process died"
    );
}

#[test]
fn invariant_5_running_out_of_retries_never_says_held() {
    let _serial = HOOKED.lock().unwrap_or_else(|p| p.into_inner());
    let (_d, path, lock) = setup();
    let (dead, dead_start) = dead_process();

    // Every takeover attempt finds a different stale record in its place.
    put(&path, record_text(dead, dead_start, "t0"));
    let n = Arc::new(AtomicU32::new(0));
    let (p2, n2) = (path.clone(), n.clone());
    test_hooks::set(lock.path(), move |point, _| {
        if point == Point::ReclaimUnderGuard {
            let i = n2.fetch_add(1, Ordering::SeqCst) + 1;
            put(&p2, record_text(dead, dead_start, &format!("t{i}")));
        }
    });
    let result = lock.try_acquire();
    test_hooks::clear();
    match result {
        Err(Error::Contended { tries, .. }) => assert_eq!(tries, MAX_TAKEOVER_TRIES),
        other => panic!("expected Contended, got {other:?}"),
    }
    assert_eq!(n.load(Ordering::SeqCst), MAX_TAKEOVER_TRIES);

    // A look that finds the path empty does not use up a try: far more
    // empty looks than tries still end in success.
    let n = Arc::new(AtomicU32::new(0));
    let (p2, n2) = (path.clone(), n.clone());
    let rounds = 3 * MAX_TAKEOVER_TRIES;
    test_hooks::set(lock.path(), move |point, _| {
        let i = n2.load(Ordering::SeqCst);
        if i >= rounds {
            return;
        }
        match point {
            Point::BeforeLink => put(&p2, record_text(dead, dead_start, "x")),
            Point::BeforeLook => {
                std::fs::remove_file(&p2).unwrap();
                n2.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
    });
    let result = lock.try_acquire();
    test_hooks::clear();
    result
        .expect("empty looks must not use up the tries")
        .release()
        .unwrap();
    assert_eq!(n.load(Ordering::SeqCst), rounds);
}

// ---------------------------------------------------------------------------
// Liveness against real processes

#[test]
fn kill_9_of_a_holder_lets_the_next_acquire_take_over() {
    let (d, path, lock) = setup();
    let ready = d.path().join("ready");
    let mut holder = Reaped(child("hold", &path, &ready).spawn().unwrap());
    wait_for_file(&ready);
    let pid = holder.0.id();
    match lock.try_acquire() {
        Err(Error::Held(h)) => {
            assert_eq!(h.holder, Holder::KernelLock { pid });
            let msg = h.to_string();
            assert!(
                msg.contains(&format!("pid {pid}")) && msg.contains("wait for it"),
                "{msg}"
            );
        }
        other => panic!("expected held, got {other:?}"),
    }
    kill9(&mut holder.0);
    assert_eq!(
        verdict_of(&lock),
        Verdict::Stale(StaleReason::Exited { pid, run: false })
    );
    let g = lock.try_acquire().expect("takeover");
    assert_eq!(g.record().pid, std::process::id());
    assert_eq!(std::fs::read(&path).unwrap(), g.record().to_bytes());
}

#[test]
fn pid_reuse_is_stale_and_the_right_start_time_is_held() {
    let (_d, path, lock) = setup();
    let mut other = sleeper();
    let pid = other.id();
    let start = start_of(pid);
    put(&path, record_text(pid, start - 1, "reuse"));
    match verdict_of(&lock) {
        Verdict::Stale(r @ StaleReason::Reused { .. }) => {
            let msg = r.to_string();
            assert!(
                msg.contains(&format!("pid {pid} is now a different process")),
                "{msg}"
            );
        }
        v => panic!("expected stale (reused), got {v:?}"),
    }
    put(&path, record_text(pid, start, "right"));
    assert_eq!(verdict_of(&lock), Verdict::Held(Holder::Owner { pid }));
    kill9(&mut other);
}

#[test]
fn zombie_owner_is_stale() {
    let (_d, path, lock) = setup();
    let mut z = Command::new("true").spawn().unwrap();
    let pid = z.id();
    // Not reaped yet: it stays a zombie.
    wait_until(
        "the child to become a zombie",
        Duration::from_secs(10),
        || state_of(pid) == Some('Z'),
    );
    let start = start_of(pid);
    put(&path, record_text(pid, start, "zombie"));
    let v = verdict_of(&lock);
    assert_eq!(v, Verdict::Stale(StaleReason::Zombie { pid, run: false }));
    if let Verdict::Stale(r) = v {
        assert!(r.to_string().contains("the owner is a zombie"));
    }
    lock.try_acquire()
        .expect("a zombie's lock is taken over")
        .release()
        .unwrap();
    z.wait().unwrap();
}

#[test]
fn another_boot_id_is_stale() {
    let (_d, path, lock) = setup();
    let me = std::process::id();
    put(
        &path,
        format!(
            "{me}\nstart={}\nboot=00000000-0000-4000-8000-000000000000\ntoken=old\n",
            start_of(me)
        ),
    );
    assert_eq!(verdict_of(&lock), Verdict::Stale(StaleReason::PreviousBoot));
    let v = verdict_of(&lock);
    if let Verdict::Stale(r) = v {
        assert_eq!(r.to_string(), "the owner died with the previous boot");
    }
}

#[test]
fn invalid_pids_are_never_alive_and_never_probed() {
    let (d, path, lock) = setup();
    for text in [
        "0\n",
        "-1\n",
        "99999999\n",
        "garbage\n",
        "0\nstart=1\nboot=ab\n",
    ] {
        put(&path, text);
        match verdict_of(&lock) {
            Verdict::Unknown(UnknownReason::Unreadable { why }) => {
                assert!(!why.is_empty(), "{text:?}")
            }
            v => panic!("{text:?}: expected unknown (not a record), got {v:?}"),
        }
        match lock.try_acquire() {
            Err(Error::Unknown { .. }) => {}
            other => panic!("{text:?}: expected a refusal, got {other:?}"),
        }
    }
    // Garbage from before this boot is still unknown: a path LOCK may name
    // a user's file, and no age makes that stale. What a power loss leaves
    // of a record (a prefix of one) is stale.
    let before_boot = |path: &Path, text: &str| {
        put(path, text);
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000))
            .unwrap();
    };
    before_boot(&path, "garbage\n");
    assert!(matches!(
        verdict_of(&lock),
        Verdict::Unknown(UnknownReason::Unreadable { .. })
    ));
    before_boot(&path, "4242\nstart=12");
    assert!(matches!(
        verdict_of(&lock),
        Verdict::Stale(StaleReason::UnreadableFromPreviousBoot { .. })
    ));

    // Never probed: no kill(2) with a pid <= 0 in the whole inspection.
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("strace is not installed; skipping the syscall check");
        return;
    }
    for text in ["0\n", "-1\n", "99999999\n"] {
        put(&path, text);
        let trace = d.path().join("trace");
        let mut strace = Command::new("strace");
        strace
            .args(["-f", "-qq", "-e", "trace=kill,tgkill,pidfd_open", "-o"])
            .arg(&trace);
        let out = inspect_under(strace, &path, &d.path().join("unused"), "1");
        assert!(out.status.success(), "{out:?}");
        let trace = std::fs::read_to_string(&trace).unwrap();
        for line in trace.lines() {
            assert!(
                !line.contains("kill(0,") && !line.contains("kill(-"),
                "{text:?}: probed an invalid pid: {line}"
            );
        }
    }
}

#[test]
fn eperm_means_alive_for_a_root_owned_holder_probed_as_nobody() {
    if !is_root() || Command::new("runuser").arg("--version").output().is_err() {
        eprintln!("needs root and runuser; skipped");
        return;
    }
    let (d, path, lock) = setup();
    let mut owner = sleeper();
    let pid = owner.id();
    lock.acquire(&AcquireOptions::new().owner(Owner::Pid(pid)))
        .unwrap()
        .leave_to_owner();
    // A bare pid file too: liveness by kill(pid, 0) alone.
    let bare = d.path().join("bare.lock");
    std::fs::write(&bare, format!("{pid}\n")).unwrap();
    for lockpath in [&path, &bare] {
        let out = inspect_under(
            as_nobody(),
            lockpath,
            &d.path().join("unused"),
            &pid.to_string(),
        );
        assert!(out.status.success(), "{out:?}");
        let r = reports(&out.stdout);
        assert_eq!(r.len(), 1, "{out:?}");
        assert!(
            r[0].contains("kill_probe=true"),
            "EPERM must read as alive: {}",
            r[0]
        );
        assert!(
            r[0].contains("Held("),
            "a live root owner must be held: {}",
            r[0]
        );
    }
    kill9(&mut owner);
}

#[test]
fn bare_pid_files_are_judged_by_the_pid() {
    let (_d, path, lock) = setup();
    let mut other = sleeper();
    put(&path, format!("{}\n", other.id()));
    assert_eq!(
        verdict_of(&lock),
        Verdict::Held(Holder::OwnerUnverified { pid: other.id() })
    );
    kill9(&mut other);
    assert!(matches!(
        verdict_of(&lock),
        Verdict::Stale(StaleReason::Exited { .. })
    ));
    lock.try_acquire()
        .expect("a dead pid file is taken over")
        .release()
        .unwrap();
}

/// A record of a PID namespace that no process has any more is stale:
/// every process of its run died with the namespace's init. Where that
/// cannot be seen (an unprivileged reader that cannot read other users'
/// namespaces), it is unknown, and says so.
#[test]
fn a_pid_namespace_that_no_longer_exists_is_stale() {
    let (_d, path, lock) = setup();
    let (dead, start) = dead_process();
    put(
        &path,
        format!("{}pidns=1\n", record_text(dead, start, "ns")),
    );
    match verdict_of(&lock) {
        Verdict::Stale(StaleReason::PidNamespaceGone { ns: 1 }) => {}
        Verdict::Unknown(UnknownReason::PidNamespaceUnseen { theirs: 1, .. }) if !is_root() => {}
        v => panic!("expected stale (namespace gone), got {v:?}"),
    }
}

#[test]
fn a_reclaim_race_has_exactly_one_winner_per_round() {
    let (d, path, _lock) = setup();
    const RACERS: usize = 4;
    const ROUNDS: usize = 1000;
    let mut racers: Vec<Child> = (0..RACERS)
        .map(|_| {
            child("racer", &path, &d.path().join("unused"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut inputs: Vec<_> = racers.iter_mut().map(|c| c.stdin.take().unwrap()).collect();
    let mut outputs: Vec<_> = racers
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()).lines())
        .collect();
    let me = std::process::id();
    let my_start = start_of(me);
    for round in 0..ROUNDS {
        // A stale record: our pid with another start time.
        put(&path, record_text(me, my_start + 1, &format!("r{round}")));
        for input in &mut inputs {
            input.write_all(b"go\n").unwrap();
            input.flush().unwrap();
        }
        let mut results = Vec::new();
        for out in &mut outputs {
            let line = loop {
                let l = out.next().expect("racer output").unwrap();
                if let Some(r) = l.strip_prefix("@@ ") {
                    break r.to_owned();
                }
            };
            results.push(line);
        }
        let wins = results.iter().filter(|r| *r == "won").count();
        assert_eq!(wins, 1, "round {round}: {results:?}");
        assert!(
            results.iter().all(|r| r == "won" || r == "held"),
            "round {round}: {results:?}"
        );
    }
    drop(inputs);
    for mut r in racers {
        r.wait().unwrap();
    }
}

// ---------------------------------------------------------------------------
// Path safety

fn assert_quick<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "{what} took {:?}",
        t.elapsed()
    );
    r
}

#[test]
fn a_symlink_at_the_lock_path_is_refused_and_never_followed() {
    let (d, path, lock) = setup();
    let target = d.path().join("precious");
    std::fs::write(&target, "do not touch\n").unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    for r in [
        assert_quick("acquire", || lock.try_acquire().map(drop)),
        assert_quick("inspect", || lock.inspect().map(drop)),
        assert_quick("release", || {
            lock.release_owned_by(std::process::id()).map(drop)
        }),
    ] {
        let e = r.expect_err("a symlink must be refused");
        assert!(matches!(e, Error::Symlink { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("symbolic link"),
            "{msg}"
        );
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "do not touch\n");
    assert!(
        std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // A dangling link: nothing is created at its target.
    std::fs::remove_file(&path).unwrap();
    let nowhere = d.path().join("nowhere");
    std::os::unix::fs::symlink(&nowhere, &path).unwrap();
    assert!(matches!(lock.try_acquire(), Err(Error::Symlink { .. })));
    assert!(!nowhere.exists());
}

#[test]
fn a_fifo_or_directory_at_the_lock_path_is_a_clear_error_without_hanging() {
    let (d, path, lock) = setup();
    let status = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(status.success());
    for r in [
        assert_quick("acquire on a FIFO", || lock.try_acquire().map(drop)),
        assert_quick("inspect a FIFO", || lock.inspect().map(drop)),
    ] {
        match r {
            Err(Error::NotRegular {
                kind: "FIFO",
                path: p,
            }) => assert_eq!(p, path),
            other => panic!("expected a FIFO error, got {other:?}"),
        }
    }
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let e = assert_quick("acquire on a directory", || lock.try_acquire().map(drop)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotRegular {
                kind: "directory",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("not a regular file"), "{e}");
    drop(d);
}

#[test]
fn a_missing_directory_is_named() {
    let e = LockFile::open("/nonexistent-onlyone/sub/job.lock").unwrap_err();
    assert!(matches!(e, Error::MissingDir { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("`/nonexistent-onlyone/sub`") && msg.contains("mkdir -p"),
        "{msg}"
    );
}

#[test]
fn an_unsafe_directory_is_refused_for_writing_but_readable() {
    use std::os::unix::fs::PermissionsExt;
    let (d, _path, lock) = setup();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = lock.try_acquire().unwrap_err();
    assert!(matches!(e, Error::UnsafeDir { .. }), "{e:?}");
    assert!(e.to_string().contains("sticky"), "{e}");
    assert!(lock.inspect().unwrap().is_none(), "reading never refuses");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    lock.try_acquire()
        .expect("sticky world-writable is fine")
        .release()
        .unwrap();
}

// ---------------------------------------------------------------------------
// Acquire, release, inspect

#[test]
fn release_is_idempotent_and_drop_releases() {
    let (_d, path, lock) = setup();
    let g = lock.try_acquire().unwrap();
    let token = g.token().to_owned();
    drop(g);
    assert!(!path.exists(), "drop releases");
    assert_eq!(lock.release_token(&token).unwrap(), Released::AlreadyFree);

    let g = lock.try_acquire().unwrap();
    let token = g.token().to_owned();
    g.release().unwrap();
    assert_eq!(lock.release_token(&token).unwrap(), Released::AlreadyFree);
}

#[test]
fn release_never_removes_someone_elses_record() {
    let (_d, path, lock) = setup();
    let g = lock.try_acquire().unwrap();
    // Someone forces it away and takes it.
    lock.force_release().unwrap().expect("it was held");
    let mut other = sleeper();
    lock.acquire(&AcquireOptions::new().owner(Owner::Pid(other.id())))
        .unwrap()
        .leave_to_owner();
    let theirs = std::fs::read(&path).unwrap();
    assert!(matches!(g.release(), Err(Error::Lost { .. })));
    assert_eq!(std::fs::read(&path).unwrap(), theirs);
    match lock.release_owned_by(std::process::id()) {
        Err(e @ Error::NotOwner { .. }) => {
            assert!(
                e.to_string().contains(&format!("pid {}", other.id())),
                "{e}"
            )
        }
        other => panic!("expected NotOwner, got {other:?}"),
    }
    assert_eq!(
        lock.release_owned_by(other.id()).unwrap(),
        Released::Removed
    );
    kill9(&mut other);
}

#[test]
fn a_dead_owner_pid_cannot_be_named() {
    let (_d, _path, lock) = setup();
    let (dead, _) = dead_process();
    match lock.acquire(&AcquireOptions::new().owner(Owner::Pid(dead))) {
        Err(e @ Error::BadOwner { .. }) => assert!(e.to_string().contains(&dead.to_string())),
        other => panic!("expected BadOwner, got {other:?}"),
    }
}

#[test]
fn the_record_is_complete_readable_and_mode_0644() {
    use std::os::unix::fs::PermissionsExt;
    let (d, path, lock) = setup();
    // 0644 whatever the umask: a holder under umask 077 (in a process of
    // its own: the umask is the whole process's).
    let other = d.path().join("other.lock");
    let ready = d.path().join("ready");
    let mut strict = Command::new("sh");
    strict
        .args(["-c", "umask 077; exec \"$0\" \"$@\""])
        .arg(std::env::current_exe().unwrap());
    let mut holder = Reaped(entry(strict, "hold", &other, &ready).spawn().unwrap());
    wait_for_file(&ready);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&other), 0o644, "under umask 077");
    let _ = holder.0.kill();
    let g = lock.try_acquire().unwrap();
    assert_eq!(mode(&path), 0o644);
    let text = std::fs::read_to_string(&path).unwrap();
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        std::process::id().to_string(),
        "line 1 is the pid alone"
    );
    let r = onlyone::Record::parse(text.as_bytes()).unwrap();
    assert_eq!(r.start, Some(start_of(std::process::id())));
    assert_eq!(r.boot.as_deref(), Some(boot_id().as_str()));
    assert_eq!(r.token.as_deref(), Some(g.token()));
    assert!(r.since.is_some() && r.host.is_some() && r.pidns.is_some() && r.cmd.is_some());
    g.release().unwrap();
}

#[test]
fn a_waiter_wakes_when_the_owner_dies_without_releasing() {
    let (d, path, lock) = setup();
    let ready = d.path().join("ready");
    let mut holder = Reaped(child("hold", &path, &ready).spawn().unwrap());
    wait_for_file(&ready);
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let r = lock.acquire(&AcquireOptions::new().wait(Duration::from_secs(20)));
            (r.map(|g| g.leave_to_owner()), Instant::now())
        })
    };
    // Give the waiter time to block; correctness does not depend on it.
    wait_until(
        "the waiter to start waiting",
        Duration::from_secs(5),
        || {
            std::fs::read_dir(format!("/proc/{}/fd", std::process::id()))
                .unwrap()
                .count()
                > 0
        },
    );
    kill9(&mut holder.0);
    let killed = Instant::now();
    let (r, when) = waiter.join().unwrap();
    r.expect("takes over after the owner died");
    let lag = when.saturating_duration_since(killed);
    assert!(lag < Duration::from_secs(2), "{lag:?}");
}

#[test]
fn waiting_times_out_with_the_holder_named() {
    let (_d, _path, lock) = setup();
    let _g = lock.try_acquire().unwrap();
    let other = lock.clone();
    let t = Instant::now();
    let e = std::thread::spawn(move || {
        other
            .acquire(&AcquireOptions::new().wait(Duration::from_millis(300)))
            .map(drop)
    })
    .join()
    .unwrap()
    .unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "{e}"
    );
}

#[test]
fn temp_files_of_dead_writers_are_swept() {
    let (d, path, lock) = setup();
    let (dead, start) = dead_process();
    let me = std::process::id();
    let leftover = d
        .path()
        .join(format!(".onlyone.{dead}-{start}.deadbeef.tmp"));
    let live = d
        .path()
        .join(format!(".onlyone.{me}-{}.cafebabe.tmp", start_of(me)));
    // Not temp files of ours: a name that only looks like one, a user's file.
    let lookalike = d.path().join(format!(".onlyone.{dead}-{start}.x.y.tmp"));
    let unrelated = d.path().join(".other.lock.1-1.x.tmp");
    // A dead writer's file younger than a minute is kept: its writer may
    // read start times on another clock (a time namespace).
    let (dead2, start2) = dead_process();
    let young = d
        .path()
        .join(format!(".onlyone.{dead2}-{start2}.0badf00d.tmp"));
    let a_while_ago = std::time::SystemTime::now() - Duration::from_secs(120);
    for p in [&leftover, &live, &lookalike, &unrelated, &young] {
        std::fs::write(p, "x").unwrap();
        if p != &young {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(a_while_ago)
                .unwrap();
        }
    }
    // A stale takeover sweeps.
    put(&path, record_text(dead, start, "stale"));
    lock.try_acquire().unwrap().release().unwrap();
    assert!(!leftover.exists(), "a dead writer's temp file is swept");
    assert!(
        live.exists() && lookalike.exists() && unrelated.exists() && young.exists(),
        "others are kept"
    );
}

// ---------------------------------------------------------------------------
// Cases found in review

#[test]
fn a_process_whose_main_thread_exited_is_still_alive() {
    if Command::new("python3").arg("-V").output().is_err() {
        eprintln!("python3 is not installed; skipped");
        return;
    }
    let (d, path, lock) = setup();
    // The main thread calls pthread_exit; another thread works on.
    let mut p = d
        .cmd("python3")
        .args([
            "-c",
            "import ctypes, threading, time\n\
             threading.Thread(target=time.sleep, args=(1000,)).start()\n\
             ctypes.CDLL(None).pthread_exit(None)\n",
        ])
        .spawn()
        .unwrap();
    let pid = p.id();
    wait_until("the main thread to exit", Duration::from_secs(10), || {
        state_of(pid) == Some('Z')
    });
    put(&path, record_text(pid, start_of(pid), "threads"));
    assert_eq!(verdict_of(&lock), Verdict::Held(Holder::Owner { pid }));
    kill9(&mut p);
}

#[test]
fn a_reused_command_pid_leading_a_new_group_is_not_the_run() {
    let (d, path, lock) = setup();
    let (dead, dead_start) = dead_process();
    let mut other = d.cmd("setsid").args(["sleep", "1000"]).spawn().unwrap();
    let pid = other.id();
    wait_until("setsid to exec sleep", Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    let start = start_of(pid);
    put(
        &path,
        format!(
            "{}mode=run\ncmdpid={pid}\ncmdstart={}\n",
            record_text(dead, dead_start, "0123456789abcdef0123456789abcdef"),
            start - 1
        ),
    );
    assert!(
        matches!(
            verdict_of(&lock),
            Verdict::Stale(StaleReason::Exited { run: true, .. })
        ),
        "{:?}",
        verdict_of(&lock)
    );
    kill9(&mut other);
}

#[test]
fn a_malformed_token_is_refused_without_panicking() {
    let (_d, path, lock) = setup();
    for t in [
        "",
        "€€€€€€€€",
        "ab/cd",
        "ab\ncd",
        "0123456789ABCDEF0123456789ABCDEF",
    ] {
        match lock.acquire(&AcquireOptions::new().token(t)) {
            Err(Error::BadToken { .. }) => {}
            other => panic!("{t:?}: expected BadToken, got {other:?}"),
        }
        assert!(!path.exists());
    }
}

#[test]
fn a_kernel_lock_held_after_the_owner_died_is_held_by_someone_else() {
    let (_d, path, lock) = setup();
    let (dead, start) = dead_process();
    put(&path, record_text(dead, start, "foreign"));
    let f = std::fs::File::open(&path).unwrap();
    // Another process (here: this one) holds a flock on the record.
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).unwrap();
    // Someone alive holds it: never stale, and the message says how to
    // find the holder.
    match lock.try_acquire() {
        Err(Error::Held(h)) => {
            assert_eq!(h.holder, Holder::OtherKernelLock { owner: dead });
            assert!(h.to_string().contains("fuser -v"), "{h}");
        }
        other => panic!("expected held, got {other:?}"),
    }
    drop(f);
    // A child that another test forks meanwhile holds a copy of the
    // descriptor (and so the flock) until its exec closes it.
    wait_until("the flock to be gone", Duration::from_secs(10), || {
        matches!(verdict_of(&lock), Verdict::Stale(_))
    });
}

#[test]
fn an_old_bare_pid_file_naming_a_live_pid_is_held() {
    let (_d, path, lock) = setup();
    let mut other = sleeper();
    put(&path, format!("{}\n", other.id()));
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000))
        .unwrap();
    drop(f);
    assert!(matches!(verdict_of(&lock), Verdict::Held(_)));
    kill9(&mut other);
}

#[test]
fn a_lock_file_name_of_255_bytes_can_be_taken() {
    let (d, _path, _lock) = setup();
    // The temp file's name does not grow with the lock's.
    let lock = LockFile::open(d.path().join("x".repeat(255))).unwrap();
    lock.try_acquire().unwrap().release().unwrap();
}

#[test]
fn an_unreadable_process_that_may_carry_the_token_makes_the_run_unknown() {
    if !is_root()
        || Command::new("runuser").arg("--version").output().is_err()
        || Command::new(PYTHON).arg("-V").output().is_err()
    {
        eprintln!("needs root, runuser and python3; skipped");
        return;
    }
    let (d, path, _lock) = setup();
    let token = onlyone::command::new_token();
    let nobody_uid = 65534;
    // The wrapper is gone: a record with a dead owner, written long ago
    // (start 1), for uid nobody.
    let (dead, _) = dead_process();
    put(
        &path,
        format!(
            "{dead}\nstart=1\nboot={}\ntoken={token}\nuid={nobody_uid}\nmode=run\nonlyone=1\n",
            boot_id()
        ),
    );
    // nobody wrote it: the file is nobody's, the only user whose token
    // carriers it speaks for.
    std::os::unix::fs::chown(&path, Some(nobody_uid), Some(nobody_uid)).unwrap();
    // A process of the run, as nobody, that no one but root may inspect.
    let shared = d.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let pidfile = shared.join("python.pid");
    // Debian's python3: nobody may run it (a python under /root may not).
    let mut p = d
        .cmd("runuser")
        .args(["-u", "nobody", "--", "env"])
        .arg(format!("ONLYONE_TOKEN={token}"))
        .args([PYTHON, "-c"])
        .arg(
            "import ctypes, os, sys, time\n\
             ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n\
             open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n\
             os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n\
             time.sleep(1000)\n",
        )
        .arg(&pidfile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&pidfile);
    let python: u32 = std::fs::read_to_string(&pidfile).unwrap().parse().unwrap();
    assert_eq!(onlyone::procfs::uid_of(python), Some(nobody_uid));
    // Root sees the token: held.
    let lock = LockFile::open(&path).unwrap();
    assert!(
        matches!(verdict_of(&lock), Verdict::Held(Holder::Member { pid, .. }) if pid == python),
        "{:?}",
        verdict_of(&lock)
    );
    // nobody cannot read it: unknown, never stale.
    let out = inspect_under(as_nobody(), &path, &d.path().join("unused"), "1");
    let r = reports(&out.stdout);
    assert_eq!(r.len(), 1, "{out:?}");
    assert!(r[0].contains("CannotScan"), "{}", r[0]);
    kill9_pid(python);
    kill9(&mut p);
}

/// Found by fuzzing: a start time or a `since` past the year 9999 made
/// printing the verdict panic (the CLI exited 101, and `run` never ran its
/// command).
#[test]
fn absurd_times_in_a_record_never_panic() {
    let (_d, path, lock) = setup();
    let me = std::process::id();
    put(
        &path,
        format!(
            "{me}\nstart=99999999999999999\nboot={}\nsince=18446744073709551615\nmode=lock\n",
            boot_id()
        ),
    );
    match verdict_of(&lock) {
        Verdict::Stale(r) => assert!(r.to_string().contains("different process"), "{r}"),
        v => panic!("our pid with another start time is reused: {v:?}"),
    }
    let bin = env!("CARGO_BIN_EXE_onlyone");
    let state = support::state_tempdir();
    let status = Command::new(bin)
        .env(support::STATE_VAR, state.path())
        .args(["status", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    assert!(String::from_utf8_lossy(&status.stdout).contains("\"stale\""));
    let run = Command::new(bin)
        .env(support::STATE_VAR, state.path())
        .args(["run"])
        .arg(&path)
        .args(["--", "echo", "RAN"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert_eq!(String::from_utf8_lossy(&run.stdout), "RAN\n");
}
