//! Contention: P processes × C acquire/release cycles on one lock, with an
//! independent check that no two of them were ever inside at once. Used by
//! `bench/run.sh`.
//!
//! ```text
//! bench_contend KIND DIR PROCS CYCLES
//! ```
//!
//! KIND:
//! - `onlyone`: `LockFile::acquire` with a wait (inotify + pidfd wake-up),
//!   then `release`;
//! - `onlyone-try`: `try_acquire` in a loop, yielding the CPU after each
//!   "held", then `release`;
//! - `flock`: the same loop on a bare kernel lock: one fd per process,
//!   `flock(LOCK_EX)` (blocking), `flock(LOCK_UN)`.
//!
//! Inside the critical section each process (1) takes a *second*, unrelated
//! kernel lock, `flock(LOCK_EX|LOCK_NB)` on `DIR/witness`: if it is busy,
//! another process is inside too, and that is an overlap; (2) increments a
//! shared counter in `DIR/counter` by read, add, write (a lost update is an
//! overlap too); (3) appends its index to `DIR/seq`, the order in which the
//! lock was handed out. The workers start together (they block on a pipe
//! that the parent closes).
//!
//! Prints one Markdown table row: throughput, wall time, overlaps (witness
//! and lost updates), fairness (acquisitions per process at the moment the
//! first one finished: min, max, and coefficient of variation; the mean
//! run of consecutive acquisitions by one process; the spread of finish
//! times), and for `onlyone-try` the failed attempts per acquisition.

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rustix::fs::{FlockOperation, Mode, OFlags};

fn usage() -> ! {
    eprintln!("usage: bench_contend onlyone|onlyone-try|flock DIR PROCS CYCLES");
    std::process::exit(2);
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn open_rw(path: &Path) -> OwnedFd {
    rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// What one worker reports on stdout: `index finish_ns witness_overlaps
/// failed_attempts`.
fn worker(kind: &str, dir: &Path, index: usize, cycles: u64, go_fd: i32) {
    // SAFETY: the parent passed this fd, the read end of the start pipe,
    // open and not close-on-exec; nothing else in this process owns it.
    let go = unsafe { OwnedFd::from_raw_fd(go_fd) };
    let witness = open_rw(&dir.join("witness"));
    let counter = open_rw(&dir.join("counter"));
    let seq = rustix::fs::open(
        dir.join("seq"),
        OFlags::WRONLY | OFlags::APPEND | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open seq");
    let lock = onlyone::LockFile::open(dir.join("contend.lock")).expect("open the lock");
    let flock_fd = open_rw(&dir.join("contend.flock"));
    let wait = onlyone::AcquireOptions::new().wait(Duration::from_secs(120));
    let mut overlaps = 0u64;
    let mut failed = 0u64;
    let tag = [b'a' + index as u8];

    // Wait for the start: EOF on the pipe.
    let mut b = [0u8; 1];
    while let Ok(n) = rustix::io::read(&go, &mut b) {
        if n == 0 {
            break;
        }
    }
    drop(go);

    let critical = |overlaps: &mut u64| {
        match rustix::fs::flock(&witness, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(_) => {
                *overlaps += 1;
            }
        }
        let mut buf = [0u8; 8];
        let n = rustix::io::pread(&counter, &mut buf, 0).expect("read the counter");
        let v = if n == 8 { u64::from_le_bytes(buf) } else { 0 };
        rustix::io::pwrite(&counter, &(v + 1).to_le_bytes(), 0).expect("write the counter");
        rustix::io::write(&seq, &tag).expect("append to seq");
        let _ = rustix::fs::flock(&witness, FlockOperation::Unlock);
    };

    for _ in 0..cycles {
        match kind {
            "onlyone" => {
                let guard = lock.acquire(&wait).expect("acquire with a wait");
                critical(&mut overlaps);
                guard.release().expect("release");
            }
            "onlyone-try" => {
                let guard = loop {
                    match lock.try_acquire() {
                        Ok(g) => break g,
                        Err(onlyone::Error::Held(_)) => {
                            failed += 1;
                            std::thread::yield_now();
                        }
                        Err(e) => panic!("try_acquire: {e}"),
                    }
                };
                critical(&mut overlaps);
                guard.release().expect("release");
            }
            "flock" => {
                rustix::fs::flock(&flock_fd, FlockOperation::LockExclusive).expect("flock");
                critical(&mut overlaps);
                rustix::fs::flock(&flock_fd, FlockOperation::Unlock).expect("unlock");
            }
            _ => usage(),
        }
    }
    println!("{index} {} {overlaps} {failed}", now_ns());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        let [_, kind, dir, index, cycles, fd] = args.as_slice() else {
            usage()
        };
        let parse = |s: &String| s.parse::<u64>().unwrap_or_else(|_| usage());
        worker(
            kind,
            Path::new(dir),
            parse(index) as usize,
            parse(cycles),
            parse(fd) as i32,
        );
        return;
    }
    let [kind, dir, procs, cycles] = args.as_slice() else {
        usage()
    };
    let procs: usize = procs.parse().unwrap_or_else(|_| usage());
    let cycles: u64 = cycles.parse().unwrap_or_else(|_| usage());
    if !(1..=26).contains(&procs) {
        usage();
    }
    let dir = PathBuf::from(dir);
    for f in ["witness", "counter", "seq", "contend.lock", "contend.flock"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    std::fs::write(dir.join("seq"), b"").expect("create seq");
    std::fs::write(dir.join("counter"), 0u64.to_le_bytes()).expect("create counter");

    let (children, start) = start_workers(kind, &dir, procs, cycles);

    let Tally {
        finish,
        overlaps,
        failed,
        ok,
    } = tally(children, procs);
    let end = finish.iter().copied().max().unwrap_or(start);
    let first_done = finish.iter().copied().min().unwrap_or(start);
    let wall = (end.saturating_sub(start)) as f64 / 1e9;
    let total = procs as u64 * cycles;

    let counter = std::fs::read(dir.join("counter")).unwrap_or_default();
    let counted = counter
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .unwrap_or(0);
    let seq = std::fs::read(dir.join("seq")).unwrap_or_default();
    let lost = total.saturating_sub(counted);

    let (min, max, cv) = fairness(&seq, procs, cycles);
    let runs = 1 + seq.windows(2).filter(|w| w[0] != w[1]).count();
    let mean_run = seq.len() as f64 / runs as f64;
    let spread_ms = (end - first_done) as f64 / 1e6;

    println!(
        "| {kind} | {procs}×{cycles} | {:.0} | {:.2} | {} | {} | {min} / {max} | {:.2} | {:.1} | {:.0} | {} |{}",
        total as f64 / wall,
        wall,
        overlaps,
        lost,
        cv,
        mean_run,
        spread_ms,
        if kind == "onlyone-try" {
            format!("{:.1}", failed as f64 / total as f64)
        } else {
            "-".to_owned()
        },
        if ok && seq.len() as u64 == total {
            ""
        } else {
            " **a worker failed** |"
        }
    );
}

/// Starts `procs` workers of `kind`, each for `cycles` cycles, holds them
/// at a start line, then lets them all go: the workers, and when they
/// went (ns).
fn start_workers(kind: &str, dir: &Path, procs: usize, cycles: u64) -> (Vec<Child>, u64) {
    // The start pipe: only its read end is inherited by the workers, so
    // that closing the write end here is EOF for all of them.
    let (go_r, go_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
    rustix::io::fcntl_setfd(&go_r, rustix::io::FdFlags::empty()).expect("fcntl");
    let me = std::env::current_exe().expect("current exe");
    let mut children = Vec::new();
    for i in 0..procs {
        let child = Command::new(&me)
            .args(["--worker", kind])
            .arg(dir)
            .args([
                i.to_string(),
                cycles.to_string(),
                go_r.as_raw_fd().to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn a worker");
        children.push(child);
    }
    drop(go_r);
    // Give every worker time to reach the start line, then start them.
    std::thread::sleep(Duration::from_millis(300));
    let start = now_ns();
    drop(go_w);
    (children, start)
}

/// What the workers reported: when each finished (ns), the overlaps
/// they saw, their failed tries, and whether all of them exited well.
struct Tally {
    finish: Vec<u64>,
    overlaps: u64,
    failed: u64,
    ok: bool,
}

/// Reads every worker's report line and waits for it to exit.
fn tally(children: Vec<Child>, procs: usize) -> Tally {
    let mut finish = vec![0u64; procs];
    let mut overlaps = 0u64;
    let mut failed = 0u64;
    let mut ok = true;
    for mut c in children {
        let out = c.stdout.take().expect("stdout");
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let v: Vec<u64> = line
                .split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect();
            if let [i, t, o, f] = v[..] {
                finish[i as usize] = t;
                overlaps += o;
                failed += f;
            }
        }
        ok &= c.wait().map(|s| s.success()).unwrap_or(false);
    }
    Tally {
        finish,
        overlaps,
        failed,
        ok,
    }
}

/// Fairness: acquisitions per process when the first one reached
/// `cycles`, as the fewest, the most, and their coefficient of variation.
fn fairness(seq: &[u8], procs: usize, cycles: u64) -> (u64, u64, f64) {
    let mut counts = vec![0u64; procs];
    for &b in seq {
        let i = (b - b'a') as usize;
        if i < procs {
            counts[i] += 1;
            if counts[i] == cycles {
                break;
            }
        }
    }
    let min = counts.iter().copied().min().unwrap_or(0);
    let max = counts.iter().copied().max().unwrap_or(0);
    let mean = counts.iter().sum::<u64>() as f64 / procs as f64;
    let var = counts
        .iter()
        .map(|&c| (c as f64 - mean).powi(2))
        .sum::<f64>()
        / procs as f64;
    let cv = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
    (min, max, cv)
}
