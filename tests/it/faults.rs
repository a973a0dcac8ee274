//! Fault injection for fail-open and deadlines (issue 5, part 4).
//!
//! - `precheck` answers 0 or 75 and nothing else under every injected fault
//!   (75 only on proof of a live owner), and `reap` exits 0 under the same
//!   faults: an unreadable directory, EACCES on the lock, a `/proc` that is
//!   empty or full of values that do not parse (a tmpfs mounted over `/proc`
//!   in a new mount namespace), a garbage record, a deadline too short to
//!   finish, a removal guard held by a foreign process.
//! - Every command with `--deadline` returns within the deadline plus a small
//!   bound when a call would block: a waiter on a lock that never frees, a
//!   stop of a process that ignores TERM, a release, run or acquire while a
//!   foreign process holds the removal guard (a flock on the lock's
//!   directory), status, precheck and reap.
//!
//! Real processes, no mocks. Each test works in its own temp dir; every
//! process it starts carries a marker in its environment and is killed when
//! the test ends, passed or failed. Tests that need root, `runuser`,
//! `unshare`, `mount` or `flock` print a message and skip without them.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::*;

const MARK: &str = "ONLYONE_FAULTS_MARK";
/// A call still running after this is a hang: it is killed, the test fails.
const HANG: Duration = Duration::from_secs(30);
/// How much past its deadline a command may return.
const SLACK: Duration = Duration::from_millis(600);
/// How long a command that should not block at all may take.
const QUICK: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------
// A test's world

/// A test's [`Sandbox`], named.
struct World {
    name: &'static str,
    sb: Sandbox,
}

derefs_to_sandbox!(World);

/// A precheck's answer.
trait Precheck {
    fn zero_or_75(&self) -> i32;
}

impl Precheck for Out {
    /// A precheck's answer: 0 or 75, nothing else.
    fn zero_or_75(&self) -> i32 {
        let code = self.code();
        assert!(
            code == 0 || code == 75,
            "{}: precheck answered {code}: {self:#?}",
            self.what
        );
        code
    }
}

/// Runs `cmd` to its end with its output captured; a hang is killed and
/// fails the test, and so do a panic (101) and a death by signal.
fn finish(cmd: Command, what: &str) -> Out {
    finish_checked(cmd, HANG, what)
}

fn dur(d: &str) -> Duration {
    humantime::parse_duration(d).unwrap()
}

impl World {
    fn new(name: &'static str) -> World {
        World {
            name,
            sb: Sandbox::new(MARK),
        }
    }

    /// `onlyone --dir DIR ARGS...`, run to its end.
    fn oo_in(&self, dir: &Path, args: &[&str]) -> Out {
        let mut c = self.program(BIN);
        c.arg("--dir").arg(dir).args(args);
        finish(c, &format!("{}: onlyone {args:?}", self.name))
    }

    fn oo(&self, args: &[&str]) -> Out {
        self.oo_in(self.dir(), args)
    }

    /// `onlyone --dir DIR ARGS...` as nobody.
    fn nobody_in(&self, dir: &Path, args: &[&str]) -> Out {
        let mut c = self.program(runuser().expect("runuser"));
        c.args(["-u", "nobody", "--"])
            .arg(bin_for_others(self.dir()))
            .arg("--dir")
            .arg(dir)
            .args(args);
        finish(c, &format!("{}: as nobody: onlyone {args:?}", self.name))
    }

    /// True when `runuser -u nobody` can run onlyone here; says why not.
    fn nobody_works(&self) -> bool {
        nobody_works(
            self.name,
            &bin_for_others(self.dir()),
            |ru| self.program(ru),
            finish,
        )
    }

    /// A lock `name` held by a live `sleep` (taken with `acquire --owner`).
    fn held(&mut self, name: &str) -> u32 {
        let sp = self.sleeper();
        self.oo(&["acquire", "--owner", &sp.to_string(), name])
            .expect(0);
        sp
    }

    /// A lock `name` left by a dead owner.
    fn stale(&self, name: &str) {
        let (pid, start) = dead_process();
        put(
            &self.lock(name),
            record_text(pid, start, &onlyone::command::new_token()),
        );
    }

    /// A garbage record at `name`.
    fn garbage(&self, name: &str) {
        put(&self.lock(name), "this is not a record\n");
    }

    /// The locks `held` (by the sleeper returned), `stale` and `garbage`.
    fn held_stale_garbage(&mut self) -> u32 {
        let sp = self.held("held");
        self.stale("stale");
        self.garbage("garbage");
        sp
    }

    /// Holds the removal guard (a flock on the lock directory) from a
    /// foreign process until the test ends; returns once it is held.
    fn hold_guard(&mut self) -> bool {
        if !have("flock") {
            eprintln!("{}: skipped: needs flock(1)", self.name);
            return false;
        }
        let guard = guard_file(self.dir());
        let mut c = self.program("flock");
        c.arg(&guard).args(["sleep", "1000"]);
        self.keep(c);
        wait_until("the guard to be held", Duration::from_secs(10), || {
            guard.exists() && guard_is_held(&guard)
        });
        true
    }
}

/// The removal guard of this user's lock files in `dir`.
fn guard_file(dir: &Path) -> std::path::PathBuf {
    dir.join(format!(
        ".onlyone-guard.{}",
        rustix::process::geteuid().as_raw()
    ))
}

/// True when someone holds an exclusive flock on the file `guard`.
fn guard_is_held(guard: &Path) -> bool {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let fd = rustix::fs::open(guard, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap();
    matches!(
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockShared),
        Err(rustix::io::Errno::WOULDBLOCK)
    )
}

/// Runs precheck and reap on each lock under `run` (which runs onlyone in
/// the faulty setting): precheck answers 0 or 75 (`want` when given), reap
/// exits 0. Returns the precheck answers.
fn precheck_and_reap(
    name: &str,
    locks: &[(&str, Option<i32>)],
    run: &dyn Fn(&[&str]) -> Out,
) -> Vec<i32> {
    let mut answers = Vec::new();
    for (lock, want) in locks {
        let out = run(&["precheck", lock]);
        let code = out.zero_or_75();
        if let Some(w) = want {
            assert_eq!(code, *w, "{name}: precheck {lock}: {out:#?}");
        }
        if code == 0 && *lock != "free" {
            assert!(
                !out.stderr.is_empty() || *lock == "stale",
                "{name}: a fail-open 0 should say why: {out:#?}"
            );
        }
        out.within(QUICK);
        eprintln!(
            "{name}: precheck {lock} -> {code} ({:?}) {}",
            out.took,
            out.stderr.trim()
        );
        answers.push(code);
        let out = run(&["reap", lock]);
        out.expect(0).within(QUICK);
        let out = run(&["reap", "--dry-run", "--json", lock]);
        out.expect(0).within(QUICK);
    }
    answers
}

// ---------------------------------------------------------------------------
// precheck answers 0 or 75, reap 0, under every fault

/// An unreadable directory: as nobody (mode 0700 and 0711) it cannot be
/// opened: fail open; as root (mode 000) it is read.
#[test]
fn fault_unreadable_directory() {
    let mut w = World::new("fault_unreadable_directory");
    if !w.nobody_works() {
        return;
    }
    let sp = w.sleeper();
    for mode in [0o700, 0o711, 0o000] {
        let d = w.subdir(&format!("closed{mode:o}"));
        w.oo_in(&d, &["acquire", "--owner", &sp.to_string(), "held"])
            .expect(0);
        put(&d.join("garbage.lock"), "garbage\n");
        let (dead, start) = dead_process();
        put(
            &d.join("stale.lock"),
            record_text(dead, start, &onlyone::command::new_token()),
        );
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        let locks = [
            ("held", Some(0)),
            ("stale", Some(0)),
            ("garbage", Some(0)),
            ("free", Some(0)),
        ];
        precheck_and_reap("unreadable dir, as nobody", &locks, &|a| w.nobody_in(&d, a));
        let out = w.nobody_in(&d, &["precheck", "held"]);
        out.says("Permission denied").says("fail open");
        // Root reads it.
        let locks = [("held", Some(75)), ("garbage", Some(0)), ("free", Some(0))];
        precheck_and_reap("unreadable dir, as root", &locks, &|a| w.oo_in(&d, a));
    }
    assert_untouched(sp);
}

/// EACCES on the lock file (mode 000, read as nobody): the record cannot be
/// judged: fail open.
#[test]
fn fault_eacces_on_the_lock() {
    let mut w = World::new("fault_eacces_on_the_lock");
    if !w.nobody_works() {
        return;
    }
    let sp = w.held("held");
    w.stale("stale");
    for l in ["held", "stale"] {
        std::fs::set_permissions(w.lock(l), std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    let locks = [("held", Some(0)), ("stale", Some(0))];
    precheck_and_reap("EACCES on the lock", &locks, &|a| w.nobody_in(w.dir(), a));
    w.nobody_in(w.dir(), &["precheck", "held"])
        .says("ermission denied")
        .says("fail open");
    assert!(w.lock("held").exists());
    // Root reads it.
    w.oo(&["precheck", "held"]).expect(75);
    assert_untouched(sp);
}

/// How `/proc` is faked inside a new mount namespace.
#[derive(Clone, Copy, Debug)]
enum FakeProc {
    /// An empty tmpfs over `/proc`.
    Empty,
    /// A tmpfs with files that do not parse: `pid_max`, `/proc/stat`, this
    /// process's and the owner's `stat`; the boot id is the real one.
    Garbage,
    /// Only a boot id that is not a boot id.
    BadBootId,
}

const FAKE_PROC: &str = r#"
B=$(cat /proc/sys/kernel/random/boot_id) || exit 201
mount -t tmpfs none /proc || exit 200
case "$FAKE" in
Empty) ;;
Garbage)
  mkdir -p /proc/sys/kernel/random "/proc/$$" "/proc/$OWNER" || exit 202
  echo "$B" > /proc/sys/kernel/random/boot_id
  echo zz > /proc/sys/kernel/pid_max
  echo garbage > /proc/stat
  echo 'garbage (x' > "/proc/$$/stat"
  printf '%s (sleep) S 1 2' "$OWNER" > "/proc/$OWNER/stat"
  echo garbage > "/proc/$$/status"
  ;;
BadBootId)
  mkdir -p /proc/sys/kernel/random || exit 202
  echo 'not a boot id' > /proc/sys/kernel/random/boot_id
  ;;
esac
exec "$@"
"#;

/// Runs onlyone with a fake `/proc`, in a new mount namespace (and a new
/// PID namespace with `pidns`). `None` when that cannot be done here.
fn with_fake_proc(
    w: &World,
    fake: FakeProc,
    pidns: bool,
    owner: u32,
    args: &[&str],
) -> Option<Out> {
    let mut c = w.program("unshare");
    if pidns {
        c.args(["-p", "-f"]);
    }
    c.args(["-m", "--", "sh", "-c", FAKE_PROC, "sh", BIN, "--dir"])
        .arg(w.dir())
        .args(args)
        .env("FAKE", format!("{fake:?}"))
        .env("OWNER", owner.to_string());
    let out = finish(c, &format!("{}: {fake:?} /proc: onlyone {args:?}", w.name));
    if (200..=202).contains(&out.code()) || out.stderr.contains("unshare failed") {
        eprintln!(
            "{}: skipped: cannot fake /proc here: {}",
            w.name, out.stderr
        );
        return None;
    }
    Some(out)
}

fn fake_proc_case(name: &'static str, fake: FakeProc, pidns: bool) {
    let mut w = World::new(name);
    if !is_root() || !have("unshare") {
        eprintln!("{name}: skipped: needs root and unshare");
        return;
    }
    let sp = w.held_stale_garbage();
    if with_fake_proc(&w, fake, pidns, sp, &["precheck", "free"]).is_none() {
        return;
    }
    // No proof of a live owner is possible for these: 0.
    let locks = [
        ("free", Some(0)),
        ("garbage", Some(0)),
        ("stale", None),
        ("held", None),
    ];
    let answers = precheck_and_reap(name, &locks, &|a| {
        with_fake_proc(&w, fake, pidns, sp, a).expect("the fake /proc worked once")
    });
    eprintln!("{name}: answers {answers:?}");
    // A deadline under the fault too.
    for d in ["1ms", "0s", "300ms"] {
        let out =
            with_fake_proc(&w, fake, pidns, sp, &["precheck", "--deadline", d, "held"]).unwrap();
        out.zero_or_75();
        out.within(dur(d) + SLACK);
        let out = with_fake_proc(&w, fake, pidns, sp, &["reap", "--deadline", d, "held"]).unwrap();
        out.expect(0).within(dur(d) + SLACK);
    }
    assert_untouched(sp);
}

#[test]
fn fault_empty_proc() {
    fake_proc_case("fault_empty_proc", FakeProc::Empty, false);
}

#[test]
fn fault_empty_proc_in_a_new_pid_namespace() {
    fake_proc_case(
        "fault_empty_proc_in_a_new_pid_namespace",
        FakeProc::Empty,
        true,
    );
}

#[test]
fn fault_unparseable_proc_values() {
    fake_proc_case("fault_unparseable_proc_values", FakeProc::Garbage, false);
}

#[test]
fn fault_unparseable_proc_values_in_a_new_pid_namespace() {
    fake_proc_case(
        "fault_unparseable_proc_values_in_a_new_pid_namespace",
        FakeProc::Garbage,
        true,
    );
}

#[test]
fn fault_boot_id_that_is_not_a_boot_id() {
    fake_proc_case(
        "fault_boot_id_that_is_not_a_boot_id",
        FakeProc::BadBootId,
        false,
    );
}

/// Under a faulty `/proc`, a precheck may fail open, but it must not take
/// the lock of a live owner away: removing it lets a second run in.
fn fake_proc_keeps_a_live_lock(name: &'static str, fake: FakeProc, pidns: bool) {
    let mut w = World::new(name);
    if !is_root() || !have("unshare") {
        eprintln!("{name}: skipped: needs root and unshare");
        return;
    }
    let sp = w.held("held");
    let before = std::fs::read(w.lock("held")).unwrap();
    let Some(out) = with_fake_proc(&w, fake, pidns, sp, &["precheck", "held"]) else {
        return;
    };
    out.zero_or_75();
    assert_eq!(
        std::fs::read(w.lock("held")).ok(),
        Some(before),
        "precheck removed a live owner's lock: {out:#?}"
    );
    w.oo(&["run", "held", "--", "true"]).expect(75);
    assert_untouched(sp);
}

#[test]
fn fault_empty_proc_in_a_new_pid_namespace_keeps_a_live_lock() {
    fake_proc_keeps_a_live_lock(
        "fault_empty_proc_in_a_new_pid_namespace_keeps_a_live_lock",
        FakeProc::Empty,
        true,
    );
    fake_proc_keeps_a_live_lock(
        "fault_unparseable_proc_values_in_a_new_pid_namespace_keeps_a_live_lock",
        FakeProc::Garbage,
        true,
    );
}

#[test]
fn fault_boot_id_that_is_not_a_boot_id_keeps_a_live_lock() {
    fake_proc_keeps_a_live_lock(
        "fault_boot_id_that_is_not_a_boot_id_keeps_a_live_lock",
        FakeProc::BadBootId,
        false,
    );
}

#[test]
fn fault_empty_proc_keeps_a_live_lock() {
    fake_proc_keeps_a_live_lock("fault_empty_proc_keeps_a_live_lock", FakeProc::Empty, false);
}

#[test]
fn fault_unparseable_proc_values_keep_a_live_lock() {
    fake_proc_keeps_a_live_lock(
        "fault_unparseable_proc_values_keep_a_live_lock",
        FakeProc::Garbage,
        false,
    );
}

/// Garbage records of many kinds: the fire runs (0), the record stays.
#[test]
fn fault_garbage_record() {
    let w = World::new("fault_garbage_record");
    let garbage: &[(&str, &[u8])] = &[
        ("text", b"hello world\n"),
        ("empty", b""),
        ("nul", b"12\0\nstart=1\n"),
        ("binary", &[0xff, 0xfe, 0x00, 0x01]),
        ("minus", b"-1\n"),
        ("half", b"42\nstart=1\n"),
        ("huge", &[b'9'; 20_000]),
    ];
    for (name, bytes) in garbage {
        put(&w.lock(name), bytes);
    }
    let locks: Vec<(&str, Option<i32>)> = garbage.iter().map(|(n, _)| (*n, Some(0))).collect();
    precheck_and_reap("garbage record", &locks, &|a| w.oo(a));
    for (name, bytes) in garbage {
        assert_eq!(
            std::fs::read(w.lock(name)).unwrap(),
            *bytes,
            "{name}: a garbage record was changed"
        );
        w.oo(&["precheck", name]).says("fail open");
    }
}

/// reap's own state: a garbage state file, and its state lock held by a
/// foreign process.
#[test]
fn fault_reap_state() {
    let mut w = World::new("fault_reap_state");
    let sp = w.held("held");
    std::fs::write(w.dir().join(".onlyone-reap.json"), "{ not json").unwrap();
    w.oo(&["reap", "held"]).expect(0).within(QUICK);
    w.oo(&["reap", "--json", "held"]).expect(0).within(QUICK);
    std::fs::write(w.dir().join(".onlyone-reap.json"), [0xff, 0, 1]).unwrap();
    w.oo(&["reap", "held"]).expect(0).within(QUICK);
    w.oo(&["precheck", "held"]).expect(75);
    // The state lock held by someone else: reap gives up at its deadline.
    if have("flock") {
        let state_lock = w.dir().join(".onlyone-reap.lock");
        std::fs::write(&state_lock, "").unwrap();
        let mut c = w.program("flock");
        c.arg(&state_lock).args(["sleep", "1000"]);
        w.keep(c);
        wait_until("the state lock to be held", Duration::from_secs(10), || {
            let f = std::fs::File::open(&state_lock).unwrap();
            matches!(
                rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared),
                Err(rustix::io::Errno::WOULDBLOCK)
            )
        });
        w.oo(&["reap", "--deadline", "300ms", "held"])
            .expect(0)
            .within(dur("300ms") + SLACK);
        w.oo(&["reap", "--deadline", "0s", "held"])
            .expect(0)
            .within(SLACK);
    }
    assert_untouched(sp);
}

/// A deadline too short to finish: precheck still answers 0 or 75, reap 0,
/// at once.
#[test]
fn fault_deadline_too_short() {
    let mut w = World::new("fault_deadline_too_short");
    let sp = w.held_stale_garbage();
    for d in ["1ms", "0s", "1ns"] {
        for lock in ["held", "stale", "garbage", "free"] {
            let out = w.oo(&["precheck", "--deadline", d, lock]);
            let code = out.zero_or_75();
            out.within(dur(d) + SLACK);
            if lock != "held" {
                assert_eq!(code, 0, "{out:#?}");
            }
            w.oo(&["reap", "--deadline", d, lock])
                .expect(0)
                .within(dur(d) + SLACK);
        }
    }
    // Whatever the stale one went through, a live owner was never removed.
    assert!(w.lock("held").exists());
    w.oo(&["precheck", "held"]).expect(75);
    assert_untouched(sp);
}

// ---------------------------------------------------------------------------
// --deadline: every command returns within the deadline plus a small bound

/// A waiter on a lock that never frees: `run --wait 1h --deadline 500ms`
/// answers 75 at the deadline, not an hour later.
#[test]
fn deadline_run_wait_on_a_lock_that_never_frees() {
    let mut w = World::new("deadline_run_wait");
    let sp = w.held("L");
    let ran = w.dir().join("ran");
    let out = w.oo(&[
        "run",
        "--wait",
        "1h",
        "--deadline",
        "500ms",
        "L",
        "--",
        "touch",
        ran.to_str().unwrap(),
    ]);
    out.expect(75)
        .says(&format!("pid {sp}"))
        .within(dur("500ms") + SLACK);
    assert!(out.took >= dur("450ms"), "gave up early: {out:#?}");
    assert!(!ran.exists());
    assert_untouched(sp);
}

#[test]
fn deadline_acquire_wait_on_a_lock_that_never_frees() {
    let mut w = World::new("deadline_acquire_wait");
    let sp = w.held("L");
    let other = w.sleeper();
    let out = w.oo(&[
        "acquire",
        "--wait",
        "1h",
        "--deadline",
        "500ms",
        "--owner",
        &other.to_string(),
        "L",
    ]);
    out.expect(75)
        .says(&format!("pid {sp}"))
        .within(dur("500ms") + SLACK);
    assert!(out.took >= dur("450ms"), "gave up early: {out:#?}");
    assert_untouched(sp);
    assert_untouched(other);
}

/// A process that ignores TERM: `sh -c "trap '' TERM; exec sleep 1000"`.
fn term_ignorer(w: &mut World) -> u32 {
    let mut c = w.program("sh");
    c.args(["-c", "trap '' TERM; exec sleep 1000"]);
    let pid = w.keep(c);
    wait_until("sleep, ignoring TERM", Duration::from_secs(10), || {
        ignores_term(pid)
            && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep"))
    });
    pid
}

fn ignores_term(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|m| m & (1 << (15 - 1)) != 0)
}

/// `stop --kill-after 1h --deadline 500ms L` returns by the deadline (plus
/// [`SLACK`]) with 0 or 125 and says what it did (logged as `what`).
fn stop_gives_up_by_the_deadline(w: &World, what: &str) {
    let out = w.oo(&["stop", "--kill-after", "1h", "--deadline", "500ms", "L"]);
    out.within(dur("500ms") + SLACK);
    let code = out.code();
    assert!(code == 0 || code == 125, "{out:#?}");
    assert!(!out.stderr.is_empty(), "{out:#?}");
    eprintln!(
        "stop ({what}): {code} in {:?}: {}",
        out.took,
        out.stderr.trim()
    );
}

/// `stop --kill-after 1h --deadline 500ms` of a lock owner that ignores
/// TERM returns within about a second (what it did, or what it left undone).
#[test]
fn deadline_stop_of_a_lock_owner_that_ignores_term() {
    let mut w = World::new("deadline_stop_lock_owner");
    let owner = term_ignorer(&mut w);
    w.oo(&["acquire", "--owner", &owner.to_string(), "L"])
        .expect(0);
    stop_gives_up_by_the_deadline(&w, "lock owner");
}

/// The same for a run whose command ignores TERM.
#[test]
fn deadline_stop_of_a_run_that_ignores_term() {
    let mut w = World::new("deadline_stop_run");
    let mut c = w.program(BIN);
    c.arg("--dir").arg(w.dir()).args([
        "run",
        "L",
        "--",
        "sh",
        "-c",
        "trap '' TERM; exec sleep 1000",
    ]);
    w.keep(c);
    let lock = w.lock("L");
    wait_until("the run's command", Duration::from_secs(10), || {
        std::fs::read_to_string(&lock)
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("cmdpid="))
                    .and_then(|p| p.parse::<u32>().ok())
            })
            .is_some_and(ignores_term)
    });
    stop_gives_up_by_the_deadline(&w, "run");
}

/// A release while a foreign process holds the removal guard (`flock GUARD`):
/// `release --force --deadline 300ms` gives up with 125 naming the guard;
/// the lock is left as it was.
#[test]
fn deadline_release_while_the_guard_is_held() {
    let mut w = World::new("deadline_release_guard_held");
    let sp = w.held("L");
    let before = std::fs::read(w.lock("L")).unwrap();
    if !w.hold_guard() {
        return;
    }
    let d = w.dir().display().to_string();
    w.oo(&["release", "--force", "--deadline", "300ms", "L"])
        .expect(125)
        .says("removal guard")
        .says(&d)
        .within(dur("300ms") + SLACK);
    w.oo(&[
        "release",
        "--owner",
        &sp.to_string(),
        "--deadline",
        "300ms",
        "L",
    ])
    .expect(125)
    .says("removal guard")
    .within(dur("300ms") + SLACK);
    assert_eq!(std::fs::read(w.lock("L")).unwrap(), before);
    assert_untouched(sp);
}

/// A stale lock needs the guard to be taken over: with the guard held,
/// `run`, `acquire` and `stop` give up at the deadline with 125 naming the
/// guard (the lock was not last seen held, so never 75).
#[test]
fn deadline_takeover_while_the_guard_is_held() {
    let mut w = World::new("deadline_takeover_guard_held");
    w.stale("S");
    let before = std::fs::read(w.lock("S")).unwrap();
    if !w.hold_guard() {
        return;
    }
    let ran = w.dir().join("ran");
    let other = w.sleeper().to_string();
    for args in [
        &[
            "run",
            "--deadline",
            "300ms",
            "S",
            "--",
            "touch",
            ran.to_str().unwrap(),
        ][..],
        &[
            "run",
            "--wait",
            "1h",
            "--deadline",
            "300ms",
            "S",
            "--",
            "true",
        ],
        &["acquire", "--deadline", "300ms", "--owner", &other, "S"],
        &["stop", "--deadline", "300ms", "S"],
    ] {
        w.oo(args)
            .expect(125)
            .says("removal guard")
            .within(dur("300ms") + SLACK);
    }
    assert!(!ran.exists());
    assert_eq!(std::fs::read(w.lock("S")).unwrap(), before);
}

/// status with a deadline: too short (it may give up, 125, or finish, 0),
/// and with the guard held (status takes no guard: 0 at once).
#[test]
fn deadline_status() {
    let mut w = World::new("deadline_status");
    let sp = w.held_stale_garbage();
    for d in ["1ms", "0s"] {
        let out = w.oo(&["status", "--json", "--deadline", d]);
        out.within(dur(d) + SLACK);
        assert!(matches!(out.code(), 0 | 125), "{out:#?}");
    }
    if !w.hold_guard() {
        return;
    }
    let out = w.oo(&["status", "--json", "--deadline", "300ms"]);
    out.expect(0).within(dur("300ms") + SLACK);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let states: Vec<&str> = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["state"].as_str().unwrap())
        .collect();
    // garbage.lock, held.lock, stale.lock, in that order.
    assert_eq!(states, ["unknown", "held", "stale"], "{out:#?}");
    assert_untouched(sp);
}

/// precheck with the guard held: a held lock answers 75 and a free one 0 at
/// once; a stale one (whose cleanup needs the guard) answers 0 by the
/// deadline.
#[test]
fn deadline_precheck_with_the_guard_held() {
    let mut w = World::new("deadline_precheck_guard_held");
    let sp = w.held_stale_garbage();
    if !w.hold_guard() {
        return;
    }
    w.oo(&["precheck", "held"]).expect(75).within(QUICK);
    w.oo(&["precheck", "free"]).expect(0).within(QUICK);
    w.oo(&["precheck", "garbage"]).expect(0).within(QUICK);
    for d in ["300ms", "1ms", "0s"] {
        w.oo(&["precheck", "--deadline", d, "stale"])
            .expect(0)
            .within(dur(d) + SLACK);
        w.oo(&["precheck", "--deadline", d, "held"]).zero_or_75();
    }
    // reap takes no removal guard either.
    w.oo(&["reap", "--deadline", "300ms", "stale", "held"])
        .expect(0)
        .within(dur("300ms") + SLACK);
    assert!(w.lock("held").exists());
    assert_untouched(sp);
}

/// Without a deadline, precheck on a stale lock whose cleanup needs the
/// guard should still answer quickly: the cleanup is optional, and a
/// scheduler waits on the answer.
#[test]
fn precheck_without_a_deadline_with_the_guard_held_answers_quickly() {
    let mut w = World::new("precheck_no_deadline_guard_held");
    w.stale("stale");
    if !w.hold_guard() {
        return;
    }
    w.oo(&["precheck", "stale"]).expect(0).within(QUICK);
}
