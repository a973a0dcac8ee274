//! N uncontended lock cycles in a row, for `strace -c` and `perf` (see
//! `bench/run.sh`): the criterion bench measures the time, this measures
//! what a cycle asks of the kernel.
//!
//! ```text
//! bench_cycle KIND DIR N
//! ```
//!
//! KIND is `onlyone` (`LockFile::try_acquire` + `release`, on one
//! `LockFile`), `flock` (open, `flock(LOCK_EX|LOCK_NB)`, `flock(LOCK_UN)`,
//! close) or `pidlock` (the `pidlock` crate). Prints the mean time per cycle
//! on stderr. Run it with N and N+1000 and subtract to get the cost of one
//! cycle without the one-time costs (process start, cached reads).

use std::path::{Path, PathBuf};
use std::time::Instant;

use rustix::fs::{FlockOperation, Mode, OFlags};

fn usage() -> ! {
    eprintln!("usage: bench_cycle onlyone|flock|pidlock DIR N");
    std::process::exit(2);
}

fn onlyone_cycles(dir: &Path, n: u64) {
    let lock = onlyone::LockFile::open(dir.join("cycle.lock")).expect("open the lock");
    for _ in 0..n {
        let guard = lock.try_acquire().expect("an uncontended acquire");
        guard.release().expect("release");
    }
}

fn flock_cycles(dir: &Path, n: u64) {
    let path = dir.join("cycle.flock");
    for _ in 0..n {
        let fd = rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .expect("open");
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).expect("flock");
        rustix::fs::flock(&fd, FlockOperation::Unlock).expect("unlock");
        drop(fd);
    }
}

fn pidlock_cycles(dir: &Path, n: u64) {
    let path = dir.join("cycle.pid");
    for _ in 0..n {
        let mut l = pidlock::Pidlock::new_validated(&path).expect("path");
        l.acquire().expect("pidlock acquire");
        l.release().expect("pidlock release");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, dir, n] = args.as_slice() else {
        usage()
    };
    let dir = PathBuf::from(dir);
    let n: u64 = n.parse().unwrap_or_else(|_| usage());
    let started = Instant::now();
    match kind.as_str() {
        "onlyone" => onlyone_cycles(&dir, n),
        "flock" => flock_cycles(&dir, n),
        "pidlock" => pidlock_cycles(&dir, n),
        _ => usage(),
    }
    if n > 0 {
        let per = started.elapsed().as_secs_f64() * 1e6 / n as f64;
        eprintln!("bench_cycle: {kind}: {n} cycles, {per:.1} µs per cycle");
    }
}
