//! When the lock is busy, in a lock directory: `run --queue` lets one fire
//! wait and skips the next, two fires racing for the queue leave exactly
//! one waiting, a waiter killed with SIGKILL leaves its place to the next
//! fire, and waiters (of `--wait` and `--queue`, of root and of nobody)
//! get the lock in the order they began to wait (attacks on the line:
//! `attack_queue`).

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use onlyone::LockFile;
use support::*;

const HANG: Duration = Duration::from_secs(30);

struct World {
    sb: Sandbox,
}

derefs_to_sandbox!(World);

impl World {
    fn new() -> World {
        World {
            sb: Sandbox::new("ONLYONE_QUEUE_MARK"),
        }
    }

    /// The lock `j` in `dir`, as the library sees it.
    fn lock_in(&self, dir: &Path) -> LockFile {
        LockFile::open(dir.join("j.lock")).unwrap()
    }

    /// `onlyone run ARGS j -- sh -c 'echo WORD >> out'` from `cmd` (an
    /// `onlyone --dir DIR`, whoever runs it), its output piped.
    fn fire_with(&self, mut cmd: Command, args: &[&str], word: &str, dir: &Path) -> Child {
        let out = dir.join("out");
        cmd.arg("run")
            .args(args)
            .args(["j", "--", "sh", "-c"])
            .arg(format!("echo {word} >> '{}'", out.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn onlyone")
    }

    /// A fire of root's in the sandbox's directory.
    fn fire(&self, args: &[&str], word: &str) -> Child {
        self.fire_with(self.oo_cmd(), args, word, self.dir())
    }

    /// What the runs wrote, in order.
    fn ran(&self, dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("out"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Waits for `child` to end: its exit code and what it said.
fn ended(child: &mut Child, what: &str) -> (i32, String) {
    let (st, _, err) = wait_bounded(child, Instant::now(), HANG, what);
    (st.code().unwrap_or(-1), err)
}

/// The pids of `lock`'s waiters, first in line first, and which of them is
/// queued.
fn line(lock: &LockFile) -> Vec<(u32, bool)> {
    lock.waiters()
        .into_iter()
        .map(|w| (w.record.pid, w.queued))
        .collect()
}

/// Names in `dir` that belong to the line of `j` (tickets, the queue
/// seat): none once nobody waits.
fn line_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".j.lock."))
        .collect()
}

/// A fire that asks for the queue while the lock is held and nobody waits
/// waits, and runs once the lock is free; the next fire, while that one
/// waits, skips at once with 75, says why, and is journaled as a skip "one
/// already queued". What the skipped fire came for (a change written just
/// before it) is picked up by the waiter's run, which starts after it.
/// `status` shows the waiter, queued. Nothing of the line is left once
/// the waiter has run.
#[test]
fn invariant_12_a_skipped_fire_is_picked_up_by_a_run_started_after_it() {
    let w = World::new();
    let lock = w.lock_in(w.dir());
    let held = lock.try_acquire().unwrap();
    let change = w.path("change");
    let mut first = w.fire(
        &["--queue"],
        &format!("first:$(cat '{}')", change.display()),
    );
    let first_pid = first.id();
    wait_until("the first fire queued", HANG, || {
        line(&lock) == [(first_pid, true)]
    });

    put(&change, "2");
    let t = Instant::now();
    let out = w.oo(&[
        "run",
        "--queue",
        "j",
        "--",
        "sh",
        "-c",
        "echo second >> out",
    ]);
    out.expect(75)
        .says("one already queued")
        .says(&format!("pid {first_pid}"));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "a queued skip is at once"
    );

    let status = w.oo(&["status", "--json", "j"]).json();
    let waiters = &status["locks"][0]["waiters"];
    assert_eq!(waiters.as_array().map(Vec::len), Some(1), "{status}");
    assert_eq!(waiters[0]["pid"], first_pid, "{status}");
    assert_eq!(waiters[0]["queued"], true, "{status}");
    w.oo(&["status", "j"])
        .prints(&format!("[waiting: pid {first_pid} (queued)"));

    let journal = std::fs::read_to_string(w.journal_of(lock.path())).unwrap();
    let skip = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "skip")
        .unwrap_or_else(|| panic!("no skip journaled:\n{journal}"));
    assert_eq!(skip["reason"], "one already queued", "{skip}");

    held.release().unwrap();
    assert_eq!(ended(&mut first, "the queued fire").0, 0);
    assert_eq!(w.ran(w.dir()), ["first:2"]);
    assert_eq!(line_files(w.dir()), Vec::<String>::new());
}

/// Two fires that ask for the queue at the same moment, while the lock is
/// held: exactly one waits and the other skips, 50 times over; the one
/// that waited runs once the lock is free.
#[test]
fn invariant_10_at_most_one_fire_waits() {
    let w = World::new();
    let lock = w.lock_in(w.dir());
    for round in 0..50 {
        let held = lock.try_acquire().unwrap();
        let mut a = w.fire(&["--queue"], &format!("a{round}"));
        let mut b = w.fire(&["--queue"], &format!("b{round}"));
        let mut gone = None;
        wait_until("one of two racing fires to skip", HANG, || {
            if let Some(st) = a.try_wait().unwrap() {
                gone = Some((st, 'a'));
            } else if let Some(st) = b.try_wait().unwrap() {
                gone = Some((st, 'b'));
            }
            gone.is_some()
        });
        let (st, which) = gone.unwrap();
        let (skipped, waiting) = if which == 'a' {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        let (_, err) = ended(skipped, "the skipped fire");
        assert_eq!(st.code(), Some(75), "round {round}: {err}");
        assert!(err.contains("one already queued"), "round {round}: {err}");
        let pid = waiting.id();
        wait_until("the other fire queued", HANG, || {
            line(&lock) == [(pid, true)]
        });
        assert!(
            waiting.try_wait().unwrap().is_none(),
            "round {round}: both ended"
        );
        held.release().unwrap();
        let (code, err) = ended(waiting, "the queued fire");
        assert_eq!(code, 0, "round {round}: {err}");
    }
    let ran = w.ran(w.dir());
    assert_eq!(ran.len(), 50, "one run a round: {ran:?}");
    assert_eq!(line_files(w.dir()), Vec::<String>::new());
}

/// A queued waiter killed with SIGKILL blocks nothing: the next fire takes
/// its place (it waits, not skips), and runs once the lock is free; the
/// dead waiter's files are cleared.
#[test]
fn invariant_11_a_dead_waiter_never_blocks_the_queue() {
    let w = World::new();
    let lock = w.lock_in(w.dir());
    let held = lock.try_acquire().unwrap();
    let mut dead = w.fire(&["--queue"], "dead");
    let dead_pid = dead.id();
    wait_until("the first fire queued", HANG, || {
        line(&lock) == [(dead_pid, true)]
    });
    kill9(&mut dead);

    let mut next = w.fire(&["--queue"], "next");
    let next_pid = next.id();
    wait_until("the next fire queued in its place", HANG, || {
        line(&lock) == [(next_pid, true)]
    });
    assert!(next.try_wait().unwrap().is_none(), "the next fire skipped");
    held.release().unwrap();
    let (code, err) = ended(&mut next, "the next fire");
    assert_eq!(code, 0, "{err}");
    assert_eq!(w.ran(w.dir()), ["next"]);
    assert_eq!(line_files(w.dir()), Vec::<String>::new());
}

/// Starts `n` waiters one after another, each once the one before is seen
/// waiting, releases the lock, and checks that they ran in that order.
/// Every third one asks for the queue (the first of those holds its place,
/// the others skip): the line is one, whatever the policy.
fn waiters_run_in_order(n: usize) {
    let w = World::new();
    let lock = w.lock_in(w.dir());
    let held = lock.try_acquire().unwrap();
    let mut kids = Vec::new();
    let mut expected = Vec::new();
    let mut queued = false;
    for i in 0..n {
        let queue = i % 3 == 1;
        let args: &[&str] = if queue {
            &["--queue"]
        } else {
            &["--wait", "60s"]
        };
        let mut kid = w.fire(args, &format!("w{i}"));
        if queue && queued {
            let (code, err) = ended(&mut kid, "a second queued fire");
            assert_eq!(code, 75, "{err}");
            continue;
        }
        queued |= queue;
        let pid = kid.id();
        let before = kids.len();
        wait_until("the waiter in line", HANG, || {
            let l = line(&lock);
            l.len() == before + 1 && l.last().is_some_and(|x| x.0 == pid)
        });
        kids.push(kid);
        expected.push(format!("w{i}"));
    }
    held.release().unwrap();
    for (i, kid) in kids.iter_mut().enumerate() {
        let (code, err) = ended(kid, "a waiter");
        assert_eq!(code, 0, "waiter {i}: {err}");
    }
    assert_eq!(w.ran(w.dir()), expected);
    assert_eq!(line_files(w.dir()), Vec::<String>::new());
}

#[test]
fn four_waiters_run_in_the_order_they_began_to_wait() {
    waiters_run_in_order(4);
}

#[test]
fn twenty_waiters_run_in_the_order_they_began_to_wait() {
    waiters_run_in_order(20);
}

/// Root's and nobody's waiters in a directory they share (1777) are one
/// line: started root, nobody, root, nobody, they run in that order.
#[test]
fn root_s_and_nobody_s_waiters_share_one_line() {
    let w = World::new();
    let Some(sh) = w.shared_with_nobody("root_s_and_nobody_s_waiters_share_one_line") else {
        return;
    };
    let out = sh.locks.join("out");
    put(&out, "");
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let lock = w.lock_in(&sh.locks);
    let held = lock.try_acquire().unwrap();
    let mut kids = Vec::new();
    for (i, nobody) in [false, true, false, true].into_iter().enumerate() {
        let cmd = if nobody {
            sh.as_nobody(&w, &[])
        } else {
            let mut c = w.program(BIN);
            c.arg("--dir").arg(&sh.locks);
            c
        };
        kids.push(w.fire_with(cmd, &["--wait", "60s"], &format!("w{i}"), &sh.locks));
        wait_until("the waiter in line", HANG, || line(&lock).len() == i + 1);
    }
    held.release().unwrap();
    for kid in &mut kids {
        let (code, err) = ended(kid, "a waiter");
        assert_eq!(code, 0, "{err}");
    }
    assert_eq!(w.ran(&sh.locks), ["w0", "w1", "w2", "w3"]);
}

/// A queued waiter ended by TERM, INT, HUP or QUIT exits with the signal
/// (nothing was taken) and leaves its place to the next fire, which waits
/// in its stead.
#[test]
fn a_signalled_waiter_leaves_its_place_to_the_next_fire() {
    let w = World::new();
    let lock = w.lock_in(w.dir());
    let held = lock.try_acquire().unwrap();
    for (sig, n) in [("TERM", 15), ("INT", 2), ("HUP", 1), ("QUIT", 3)] {
        let mut waiter = w.fire(&["--queue"], sig);
        let pid = waiter.id();
        wait_until("the fire queued", HANG, || line(&lock) == [(pid, true)]);
        let kill = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status();
        assert!(kill.unwrap().success());
        let (st, _, err) = wait_bounded(&mut waiter, Instant::now(), HANG, "the signalled waiter");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&st).or(st.code().map(|c| c - 128)),
            Some(n),
            "{sig}: {st:?} {err}"
        );
    }
    let mut next = w.fire(&["--queue"], "next");
    let pid = next.id();
    wait_until("the next fire queued", HANG, || {
        line(&lock) == [(pid, true)]
    });
    held.release().unwrap();
    assert_eq!(ended(&mut next, "the next fire").0, 0);
    assert_eq!(w.ran(w.dir()), ["next"]);
    assert_eq!(line_files(w.dir()), Vec::<String>::new());
}
