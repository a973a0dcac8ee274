//! Hand-off latency: the time from a holder's release to a waiting
//! command's acquisition. Used by `bench/run.sh`.
//!
//! ```text
//! bench_handoff KIND DIR N [ONLYONE]
//! ```
//!
//! Each of N rounds: this process takes the lock; it starts the waiter
//! (a separate command, as a user would run it); it waits until the waiter
//! is asleep (50 ms, then its `/proc/PID/stat` state is `S`); it notes the
//! time T0 and releases; it then polls until the lock is seen taken again
//! (T1, busy polling with `sched_yield`) and records T1 − T0. The waiter
//! holds the lock for 20 ms (`sleep 0.02` under it) and exits.
//!
//! KIND:
//! - `onlyone`: the lock is `DIR/handoff.lock`, taken here with
//!   `LockFile::try_acquire`; the waiter is
//!   `ONLYONE --dir DIR run --wait 30s handoff -- sleep 0.02`; taken again =
//!   a file is at the lock path (the release removed ours).
//! - `flock`: `flock(LOCK_EX)` here on `DIR/handoff.flock`; the waiter is
//!   `flock -w 30 DIR/handoff.flock sleep 0.02`, which sleeps in the kernel;
//!   taken again = the waiter holds a lock (`/proc/PID/fdinfo`).
//! - `lockfile`: `lockfile-create --retry 0 DIR/handoff` here (it makes
//!   `DIR/handoff.lock`); the waiter is `lockfile-create --retry 20
//!   DIR/handoff`, then `sleep 0.02` and `lockfile-remove`; the release is
//!   the unlink that `lockfile-remove` does; taken again = the file is back.
//!
//! Prints one Markdown row: median, p90, p99 and max (ms), and N.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, Mode, OFlags};

fn usage() -> ! {
    eprintln!("usage: bench_handoff onlyone|flock|lockfile DIR N [ONLYONE]");
    std::process::exit(2);
}

fn state_of(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = s.rfind(')')?;
    s[close + 1..].split_whitespace().next()?.chars().next()
}

/// Waits until the waiter is asleep: 50 ms, then state `S` (or gone).
fn until_asleep(child: &Child) {
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        match state_of(child.id()) {
            Some('S') | None => return,
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Polls `taken` until it says yes; returns the time it first did, or
/// `None` after 30 s.
fn poll_until(mut taken: impl FnMut() -> bool) -> Option<Instant> {
    let t = Instant::now();
    loop {
        if taken() {
            return Some(Instant::now());
        }
        if t.elapsed() > Duration::from_secs(30) {
            return None;
        }
        std::thread::yield_now();
    }
}

/// True when process `pid` holds a kernel lock on one of its open files:
/// a `lock:` line in `/proc/PID/fdinfo/FD` (a lock it is still waiting for
/// is not listed there). `/proc/locks` is not used: reading it takes the
/// kernel's global file-lock rwsem for writing, which stalls every flock
/// call on the machine for milliseconds and would distort the very wake-up
/// being measured.
fn holds_a_lock(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return false;
    };
    fds.flatten().any(|e| {
        std::fs::read_to_string(e.path()).is_ok_and(|t| t.lines().any(|l| l.starts_with("lock:")))
    })
}

fn round(kind: &str, dir: &Path, onlyone: &str) -> Option<Duration> {
    match kind {
        "onlyone" => {
            let path = dir.join("handoff.lock");
            let lock = onlyone::LockFile::open(&path).expect("open the lock");
            let guard = lock.try_acquire().expect("take the lock");
            let mut child = Command::new(onlyone)
                .arg("--dir")
                .arg(dir)
                .args(["run", "--wait", "30s", "handoff", "--", "sleep", "0.02"])
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn the waiter");
            until_asleep(&child);
            let t0 = Instant::now();
            guard.release().expect("release");
            let t1 = poll_until(|| std::fs::symlink_metadata(&path).is_ok());
            let ok = child.wait().map(|s| s.success()).unwrap_or(false);
            t1.filter(|_| ok).map(|t1| t1 - t0)
        }
        "flock" => {
            let path = dir.join("handoff.flock");
            let fd = rustix::fs::open(
                &path,
                OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .expect("open");
            rustix::fs::flock(&fd, FlockOperation::LockExclusive).expect("flock");
            let mut child = Command::new("flock")
                .args(["-w", "30"])
                .arg(&path)
                .args(["sleep", "0.02"])
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn the waiter");
            until_asleep(&child);
            let t0 = Instant::now();
            rustix::fs::flock(&fd, FlockOperation::Unlock).expect("unlock");
            let waiter = child.id();
            let t1 = poll_until(|| holds_a_lock(waiter));
            drop(fd);
            let ok = child.wait().map(|s| s.success()).unwrap_or(false);
            t1.filter(|_| ok).map(|t1| t1 - t0)
        }
        "lockfile" => {
            let base = dir.join("handoff");
            let path = dir.join("handoff.lock");
            let _ = std::fs::remove_file(&path);
            let held = Command::new("lockfile-create")
                .args(["--retry", "0"])
                .arg(&base)
                .status()
                .expect("lockfile-create");
            assert!(held.success(), "lockfile-create failed");
            let script = r#"lockfile-create --retry 20 "$1" && sleep 0.02 && lockfile-remove "$1""#;
            let mut child = Command::new("sh")
                .args(["-c", script, "sh"])
                .arg(&base)
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn the waiter");
            until_asleep(&child);
            // Let lockfile-create itself start and fail its first try.
            std::thread::sleep(Duration::from_millis(50));
            let t0 = Instant::now();
            std::fs::remove_file(&path).expect("release: unlink");
            let t1 = poll_until(|| std::fs::symlink_metadata(&path).is_ok());
            let ok = child.wait().map(|s| s.success()).unwrap_or(false);
            t1.filter(|_| ok).map(|t1| t1 - t0)
        }
        _ => usage(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (kind, dir, n, onlyone) = match args.as_slice() {
        [k, d, n] => (k, d, n, "onlyone".to_owned()),
        [k, d, n, o] => (k, d, n, o.clone()),
        _ => usage(),
    };
    let dir = PathBuf::from(dir);
    let n: usize = n.parse().unwrap_or_else(|_| usage());
    let mut ms: Vec<f64> = Vec::with_capacity(n);
    let mut failed = 0;
    for _ in 0..n {
        match round(kind, &dir, &onlyone) {
            Some(d) => ms.push(d.as_secs_f64() * 1e3),
            None => failed += 1,
        }
    }
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| -> String {
        if ms.is_empty() {
            return "-".into();
        }
        let rank = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len());
        format!("{:.2}", ms[rank - 1])
    };
    println!(
        "| {kind} | {} | {} | {} | {} | {} | {failed} |",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0),
        ms.len()
    );
}
