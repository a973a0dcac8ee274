//! Times commands by alternating them, round after round, so that a noisy
//! machine's drift hits every command alike (what `hyperfine` does one
//! command at a time). Used by `bench/run.sh`.
//!
//! ```text
//! bench_cmd FILE ROUNDS WARMUP BASELINE
//! ```
//!
//! FILE has one command a line: a name, then the program and its
//! arguments, all separated by tabs (no shell unless the command is one).
//! Each round runs every command once, in the file's order, after WARMUP
//! rounds that are not counted. Each run is a fork+exec with stdin, stdout
//! and stderr on /dev/null; its wall time is taken around spawn and
//! `wait4`, and its peak RSS is `ru_maxrss` from `wait4` (the largest of
//! the process and the descendants it waited for, as `/usr/bin/time -f %M`
//! reports). A run that exits non-zero counts as a failure.
//!
//! Prints a Markdown table: median, p10, p90 (ms), the ratio of medians to
//! BASELINE (a name in FILE, or `-` for none), the largest peak RSS (KiB),
//! the number of runs and of failures.

use std::process::{Command, Stdio};
use std::time::Instant;

struct Cmd {
    name: String,
    argv: Vec<String>,
    wall_ms: Vec<f64>,
    rss_kib: Vec<i64>,
    failures: usize,
}

fn usage() -> ! {
    eprintln!("usage: bench_cmd FILE ROUNDS WARMUP BASELINE|-");
    std::process::exit(2);
}

/// Runs once; returns (wall ms, peak RSS KiB, success).
fn run_once(argv: &[String]) -> (f64, i64, bool) {
    let started = Instant::now();
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        return (0.0, 0, false);
    };
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our own child, and both pointers are valid for
    // the call.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let wall = started.elapsed().as_secs_f64() * 1e3;
    let ok = r > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (wall, usage.ru_maxrss, ok)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = p * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, rounds, warmup, baseline] = args.as_slice() else {
        usage()
    };
    let rounds: usize = rounds.parse().unwrap_or_else(|_| usage());
    let warmup: usize = warmup.parse().unwrap_or_else(|_| usage());
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| {
        eprintln!("bench_cmd: cannot read {file}: {e}");
        std::process::exit(2);
    });
    let mut cmds: Vec<Cmd> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut fields = l.split('\t').map(str::to_owned);
            let name = fields.next()?;
            let argv: Vec<String> = fields.collect();
            (!argv.is_empty()).then_some(Cmd {
                name,
                argv,
                wall_ms: Vec::with_capacity(rounds),
                rss_kib: Vec::with_capacity(rounds),
                failures: 0,
            })
        })
        .collect();
    for _ in 0..warmup {
        for c in &cmds {
            run_once(&c.argv);
        }
    }
    for _ in 0..rounds {
        for c in &mut cmds {
            let (wall, rss, ok) = run_once(&c.argv);
            if ok {
                c.wall_ms.push(wall);
                c.rss_kib.push(rss);
            } else {
                c.failures += 1;
            }
        }
    }
    let medians: Vec<f64> = cmds
        .iter_mut()
        .map(|c| {
            c.wall_ms.sort_by(f64::total_cmp);
            percentile(&c.wall_ms, 0.5)
        })
        .collect();
    let base = cmds
        .iter()
        .position(|c| c.name == *baseline)
        .map(|i| medians[i]);
    let ratio_head = match base {
        Some(_) => format!("ratio to {baseline}"),
        None => "ratio".to_owned(),
    };
    println!(
        "| command | median ms | p10 ms | p90 ms | {ratio_head} | peak RSS KiB | runs | failed |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (c, med) in cmds.iter().zip(&medians) {
        let ratio = base.map_or("-".to_owned(), |b| format!("{:.2}", med / b));
        let rss = c.rss_kib.iter().max().copied().unwrap_or(0);
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} |",
            c.name,
            med,
            percentile(&c.wall_ms, 0.1),
            percentile(&c.wall_ms, 0.9),
            ratio,
            rss,
            c.wall_ms.len(),
            c.failures
        );
    }
}
