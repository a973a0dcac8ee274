//! One uncontended lock cycle (acquire, then release), with criterion, on
//! each lock directory given, beside two baselines measured in the same run:
//!
//! - `onlyone`: `LockFile::try_acquire()` then `LockGuard::release()`, on a
//!   `LockFile` opened once (the directory handle is reused, as a program
//!   that guards a loop would);
//! - `flock`: the floor, a bare kernel lock cycle: `open(O_CREAT)`,
//!   `flock(LOCK_EX|LOCK_NB)`, `flock(LOCK_UN)`, `close`;
//! - `pidlock`: the `pidlock` crate, the closest peer (a pid file created
//!   with `O_EXCL`, removed on release).
//!
//! Directories: `ONLYONE_BENCH_DIRS="tmpfs=/dev/shm/x,ext4=/var/tmp/y"`
//! (each must exist), else a fresh `/dev/shm/onlyone-bench-criterion-PID`
//! labelled `tmpfs`. Group names are `cycle-LABEL`, so criterion's estimates
//! land in `target/criterion/cycle-LABEL/{onlyone,flock,pidlock}/new/`.
//!
//! `bench/run.sh` runs this and turns the medians into a table.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use rustix::fs::{FlockOperation, Mode, OFlags};

/// The lock directories to measure, as (label, dir, remove when done).
fn dirs() -> Vec<(String, PathBuf, bool)> {
    if let Ok(spec) = std::env::var("ONLYONE_BENCH_DIRS")
        && !spec.trim().is_empty()
    {
        return spec
            .split(',')
            .filter_map(|item| {
                let (label, dir) = item.split_once('=')?;
                Some((label.trim().to_owned(), PathBuf::from(dir.trim()), false))
            })
            .collect();
    }
    let dir = PathBuf::from(format!(
        "/dev/shm/onlyone-bench-criterion-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create a lock directory under /dev/shm");
    vec![("tmpfs".to_owned(), dir, true)]
}

fn cycles(c: &mut Criterion) {
    for (label, dir, remove) in dirs() {
        let mut group = c.benchmark_group(format!("cycle-{label}"));

        let lock = onlyone::LockFile::open(dir.join("cycle.lock")).expect("open the lock");
        group.bench_function("onlyone", |b| {
            b.iter(|| {
                let guard = lock.try_acquire().expect("an uncontended acquire");
                guard.release().expect("release");
            })
        });

        let flock_path = dir.join("cycle.flock");
        group.bench_function("flock", |b| {
            b.iter(|| {
                let fd = rustix::fs::open(
                    black_box(&flock_path),
                    OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o644),
                )
                .expect("open");
                rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).expect("flock");
                rustix::fs::flock(&fd, FlockOperation::Unlock).expect("unlock");
                drop(fd);
            })
        });

        let pid_path = dir.join("cycle.pid");
        group.bench_function("pidlock", |b| {
            b.iter(|| {
                let mut l = pidlock::Pidlock::new_validated(black_box(&pid_path)).expect("path");
                l.acquire().expect("pidlock acquire");
                l.release().expect("pidlock release");
            })
        });

        group.finish();
        if remove {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

criterion_group!(benches, cycles);
criterion_main!(benches);
