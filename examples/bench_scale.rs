//! Fixtures for the scale benchmarks of `bench/run.sh`.
//!
//! ```text
//! bench_scale populate DIR N OWNER_PID   # N locks held by OWNER_PID
//! bench_scale populate-stale-run DIR N   # N stale records of a finished run
//! bench_scale spawn N                    # N extra idle processes
//! bench_scale populate-journal DIR N     # DIR/hist.lock.journal with N events
//! ```
//!
//! - `populate` writes `DIR/jobNNNNN.lock`, each a real record taken with
//!   `LockFile::acquire` for OWNER_PID (a live process), as
//!   `onlyone acquire --owner` would: `status` judges each one held.
//! - `populate-stale-run` takes one lock in run mode for a short-lived
//!   child, lets the child exit, and copies the record to
//!   `DIR/staleNNNNN.lock`: `status` must prove each one stale, which for a
//!   run means looking for the run's leftover processes in `/proc`.
//! - `populate-journal` writes a journal of N events as runs leave them
//!   (a start, two skips, an end, repeated; every 50th run abandoned), in
//!   one file: what `history`, `status`, `check` and `metrics` read.
//! - `spawn` forks N children that sleep on a pipe, prints `ready N`, and
//!   waits for EOF on its stdin; then it closes the pipe, the children
//!   exit, and it reaps them. If it dies, the children see EOF and exit
//!   too.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use onlyone::{AcquireOptions, LockFile, Owner};

fn usage() -> ! {
    eprintln!(
        "usage: bench_scale populate DIR N OWNER_PID | populate-stale-run DIR N | \
         populate-journal DIR N | spawn N"
    );
    std::process::exit(2);
}

fn populate(dir: &Path, n: usize, owner: u32) {
    let opts = AcquireOptions::new().owner(Owner::Pid(owner));
    for i in 0..n {
        let lock = LockFile::open(dir.join(format!("job{i:05}.lock"))).expect("open");
        lock.acquire(&opts).expect("acquire").leave_to_owner();
    }
}

fn populate_stale_run(dir: &Path, n: usize) {
    let mut child = Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let path = dir.join("stale-source.lock");
    let lock = LockFile::open(&path).expect("open");
    lock.acquire(
        &AcquireOptions::new()
            .owner(Owner::Pid(child.id()))
            .run_mode(),
    )
    .expect("acquire")
    .leave_to_owner();
    let _ = child.kill();
    let _ = child.wait();
    let bytes = std::fs::read(&path).expect("read the record");
    std::fs::remove_file(&path).expect("remove the source");
    for i in 0..n {
        std::fs::write(dir.join(format!("stale{i:05}.lock")), &bytes).expect("write");
    }
}

fn populate_journal(dir: &Path, n: usize) {
    use onlyone::journal::{Event, EventKind};
    let mut out = Vec::with_capacity(n * 260);
    let start = onlyone::journal::Event::now(EventKind::Start).time - n as f64 * 60.0;
    for i in 0..n {
        let run = i / 4;
        // The last run succeeds, so that `check` says OK.
        let last = run + 1 == n.div_ceil(4);
        let kind = match (i % 4, run % 50) {
            (0, _) => EventKind::Start,
            (1 | 2, _) => EventKind::Skip,
            (_, 49) if !last => EventKind::Abandoned,
            _ => EventKind::End,
        };
        let mut ev = Event::now(kind);
        ev.time = start + i as f64 * 60.0;
        ev.pid = Some(4000 + run as u32);
        ev.token = Some(format!("{run:032x}"));
        ev.cmd = Some("/usr/local/bin/sync.sh --all".into());
        if kind == EventKind::End {
            ev.exit = Some(if run % 10 == 0 && !last { 1 } else { 0 });
            ev.duration = Some(180.0);
        }
        out.extend_from_slice(&ev.to_line());
    }
    std::fs::write(dir.join("hist.lock.journal"), out).expect("write the journal");
}

fn spawn(n: usize) {
    let mut fds = [0; 2];
    // SAFETY: a valid array of two ints for pipe(2).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let (r, w) = (fds[0], fds[1]);
    let mut pids = Vec::with_capacity(n);
    for _ in 0..n {
        // SAFETY: this program has a single thread; the child calls only
        // async-signal-safe functions (close, read, _exit).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: plain system calls on descriptors this process owns.
            unsafe {
                libc::close(w);
                let mut b = 0u8;
                while libc::read(r, (&mut b as *mut u8).cast(), 1) != 0 {}
                libc::_exit(0);
            }
        }
        assert!(pid > 0, "fork failed after {} children", pids.len());
        pids.push(pid);
    }
    // SAFETY: closing our copy of the read end.
    unsafe { libc::close(r) };
    println!("ready {}", pids.len());
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    // SAFETY: closing the write end: every child reads EOF and exits.
    unsafe { libc::close(w) };
    for pid in pids {
        let mut status = 0;
        // SAFETY: each pid is our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |s: &String| s.parse::<usize>().unwrap_or_else(|_| usage());
    match args.as_slice() {
        [cmd, dir, n, owner] if cmd == "populate" => {
            populate(&PathBuf::from(dir), num(n), num(owner) as u32)
        }
        [cmd, dir, n] if cmd == "populate-stale-run" => {
            populate_stale_run(&PathBuf::from(dir), num(n))
        }
        [cmd, dir, n] if cmd == "populate-journal" => populate_journal(&PathBuf::from(dir), num(n)),
        [cmd, n] if cmd == "spawn" => spawn(num(n)),
        _ => usage(),
    }
}
