//! The PostgreSQL store's benchmarks, against a throwaway cluster on
//! loopback (started and torn down here, as the store's tests do). Used by
//! `bench/run.sh`.
//!
//! ```text
//! bench_store BENCH_CMD ONLYONE ROUNDS HANDOFFS
//! ```
//!
//! Prints Markdown:
//! 1. `onlyone --store URL run j -- true` against a bare
//!    `psql -c 'select pg_try_advisory_lock(1)'`, the directory store's
//!    `onlyone run` and `flock -n`, alternated by `bench_cmd` (ROUNDS rounds).
//! 2. The library's take + release round trips on one connection
//!    (`LeaseStore::acquire` then `release`, 20 × ROUNDS cycles).
//! 3. How long the next holder waits: after a clean end (the holder's
//!    command writes its end time, the waiter's command its start time;
//!    HANDOFFS rounds), and after the holder's wrapper is SIGKILLed, with
//!    `--lease 4s` (from the kill to the waiter's start; a few rounds).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use onlyone::place::store::{Claimant, Claimed};

#[path = "../tests/it/support/pg.rs"]
#[allow(dead_code)]
mod pg;

/// For `pg`: a temp dir the cluster's owner (`nobody`, under root) can
/// enter.
fn open_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .prefix("onlyone-bench-pg-")
        .tempdir()
        .expect("a temp dir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the temp dir");
    d
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn usage() -> ! {
    eprintln!("usage: bench_store BENCH_CMD ONLYONE ROUNDS HANDOFFS");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bench_cmd, onlyone, rounds, handoffs] = args.as_slice() else {
        usage()
    };
    let rounds: usize = rounds.parse().unwrap_or_else(|_| usage());
    let handoffs: usize = handoffs.parse().unwrap_or_else(|_| usage());
    let pg = match pg::Pg::start() {
        Ok(pg) => pg,
        Err(why) => {
            println!("(skipped: {why})");
            return;
        }
    };
    let work = open_tempdir();
    let url = pg.url();
    // The password for psql; onlyone has it in the URL.
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("PGPASSWORD", pg::PASSWORD) };
    commands(bench_cmd, onlyone, &pg, &url, work.path(), rounds);
    round_trips(&url, rounds * 20);
    hand_offs(onlyone, &url, work.path(), handoffs);
}

/// Part 1: whole commands, alternated by `bench_cmd`.
fn commands(bench_cmd: &str, onlyone: &str, pg: &pg::Pg, url: &str, dir: &Path, rounds: usize) {
    let psql = pg_bin("psql");
    let psql_conn = format!(
        "host=127.0.0.1 port={} user=onlyone dbname=postgres sslmode=disable",
        pg.port
    );
    let tsv = dir.join("store.tsv");
    let locks = dir.join("locks");
    let rows = [
        format!("onlyone --store URL run\t{onlyone}\t--store\t{url}\trun\tj\t--\ttrue"),
        format!(
            "psql pg_try_advisory_lock(1)\t{}\t-XAtq\t-c\tselect pg_try_advisory_lock(1)\t{psql_conn}",
            psql.display()
        ),
        format!(
            "onlyone run (directory store)\t{onlyone}\t--dir\t{}\trun\tj\t--\ttrue",
            locks.display()
        ),
        format!(
            "flock -n\tflock\t-n\t{}\ttrue",
            dir.join("f.lock").display()
        ),
    ];
    std::fs::write(&tsv, rows.join("\n") + "\n").expect("write the commands");
    println!("### `run` with the store over loopback\n");
    println!(
        "Alternated by `bench_cmd` ({rounds} rounds after 5 warm-up rounds). A store run connects (TCP and SCRAM \
         authentication), takes the lease, starts its watchdog, records its start and end in \
         `onlyone_event`, and releases; the bare `psql` connects, authenticates and runs one \
         statement. Ratio: over `psql`.\n"
    );
    let out = Command::new(bench_cmd)
        .arg(&tsv)
        .arg(rounds.to_string())
        .arg("5")
        .arg("psql pg_try_advisory_lock(1)")
        .stderr(Stdio::inherit())
        .output()
        .expect("run bench_cmd");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    println!();
}

/// Part 2: the library's take + release on one open connection.
fn round_trips(url: &str, n: usize) {
    let store = onlyone::place::store::open(url, Duration::from_secs(5)).expect("the store");
    let token = onlyone::command::new_token();
    let who = Claimant {
        token: &token,
        host: "bench",
        pid: std::process::id(),
        uid: 0,
        cmd: "bench_store",
    };
    let lease = Duration::from_secs(30);
    // Connects and creates the tables once.
    let taken = |store: &dyn onlyone::place::store::LeaseStore| match store.take(
        "rt",
        onlyone::place::store::Slot::ONE,
        &who,
        lease,
        None,
    ) {
        Ok(Claimed::Taken(epoch)) => epoch,
        other => panic!("the lease is free: {other:?}"),
    };
    let e = taken(store.as_ref());
    store.release("rt", e).unwrap();
    let mut take = Vec::with_capacity(n);
    let mut release = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let epoch = taken(store.as_ref());
        let t1 = Instant::now();
        assert!(store.release("rt", epoch).unwrap());
        take.push((t1 - t0).as_secs_f64() * 1e6);
        release.push(t1.elapsed().as_secs_f64() * 1e6);
    }
    println!("### The library's round trips (one connection, {n} cycles)\n");
    println!("| call | median µs | p10 µs | p90 µs |");
    println!("|---|---:|---:|---:|");
    for (name, v) in [
        ("take (INSERT ... ON CONFLICT)", &mut take),
        ("release (UPDATE)", &mut release),
    ] {
        v.sort_by(f64::total_cmp);
        let at = |p: f64| v[((p * v.len() as f64) as usize).min(v.len() - 1)];
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} |",
            at(0.5),
            at(0.1),
            at(0.9)
        );
    }
    println!();
}

/// Part 3: how long the next holder waits.
fn hand_offs(onlyone: &str, url: &str, dir: &Path, n: usize) {
    println!("### How long the next holder waits\n");
    println!(
        "A waiter (`onlyone --store URL run --wait 60s j -- ...`) starts while the lock is held. After a clean \
         end: from the holder's command's last instant to the waiter's command's first ({n} rounds; waiters \
         poll every 100 ms). After a SIGKILL of the holder's wrapper (`--lease 4s`): from the kill to the \
         waiter's command's first instant; it cannot be less than the lease left since the last renewal \
         (between L - R and L, 3.3 to 4 s).\n"
    );
    println!("| case | median ms | min ms | max ms | rounds |");
    println!("|---|---:|---:|---:|---:|");
    let mut clean = Vec::new();
    for _ in 0..n {
        if let Some(ms) = clean_hand_off(onlyone, url, dir) {
            clean.push(ms);
        }
    }
    row("after a clean end", &mut clean, n);
    let kills = n.clamp(1, 5);
    let mut killed = Vec::new();
    for _ in 0..kills {
        if let Some(ms) = killed_hand_off(onlyone, url, dir) {
            killed.push(ms);
        }
    }
    row(
        "after a SIGKILL of the wrapper (--lease 4s)",
        &mut killed,
        kills,
    );
    println!();
}

fn row(name: &str, v: &mut [f64], n: usize) {
    if v.is_empty() {
        println!("| {name} | - | - | - | 0 of {n} |");
        return;
    }
    v.sort_by(f64::total_cmp);
    println!(
        "| {name} | {:.0} | {:.0} | {:.0} | {} of {n} |",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1],
        v.len()
    );
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn read_ns(p: &Path) -> Option<u128> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn waiter(onlyone: &str, url: &str, start: &Path) -> std::process::Child {
    Command::new(onlyone)
        .args([
            "--store", url, "run", "--wait", "60s", "j", "--", "sh", "-c",
        ])
        .arg("date +%s%N > \"$0\"")
        .arg(start)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the waiter")
}

/// Waits (polling) until `p` exists, up to a minute.
fn wait_file(p: &Path) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    while !p.exists() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

fn clean_hand_off(onlyone: &str, url: &str, dir: &Path) -> Option<f64> {
    let (ready, go, end, start) = paths(dir);
    let mut holder = Command::new(onlyone)
        .args(["--store", url, "run", "j", "--", "sh", "-c"])
        .arg("touch \"$0\"; while [ ! -e \"$1\" ]; do sleep 0.01; done; date +%s%N > \"$2\"")
        .args([&ready, &go, &end])
        .stdin(Stdio::null())
        .spawn()
        .ok()?;
    if !wait_file(&ready) {
        let _ = holder.kill();
        let _ = holder.wait();
        return None;
    }
    let mut w = waiter(onlyone, url, &start);
    // Let the waiter find the lock held and fall into its polling.
    std::thread::sleep(Duration::from_millis(300));
    let _ = std::fs::write(&go, "");
    let (hs, ws) = (holder.wait(), w.wait());
    let ok = hs.is_ok_and(|s| s.success()) && ws.is_ok_and(|s| s.success());
    let (e, s) = (read_ns(&end)?, read_ns(&start)?);
    ok.then(|| (s.saturating_sub(e)) as f64 / 1e6)
}

fn killed_hand_off(onlyone: &str, url: &str, dir: &Path) -> Option<f64> {
    let (ready, _, _, start) = paths(dir);
    let mut holder = Command::new(onlyone)
        .args([
            "--store",
            url,
            "run",
            "--lease",
            "4s",
            "--kill-after",
            "1s",
            "j",
            "--",
        ])
        .args(["sh", "-c", "touch \"$0\"; exec sleep 1000"])
        .arg(&ready)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    if !wait_file(&ready) {
        let _ = holder.kill();
        let _ = holder.wait();
        return None;
    }
    let mut w = waiter(onlyone, url, &start);
    std::thread::sleep(Duration::from_millis(300));
    let killed = now_ns();
    let _ = holder.kill();
    let _ = holder.wait();
    let ok = w.wait().is_ok_and(|s| s.success());
    let s = read_ns(&start)?;
    ok.then(|| (s.saturating_sub(killed)) as f64 / 1e6)
}

/// Fresh file names for one round.
fn paths(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    for f in ["ready", "go", "end", "start"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    (
        dir.join("ready"),
        dir.join("go"),
        dir.join("end"),
        dir.join("start"),
    )
}

/// A program of PostgreSQL's (`psql`), where the distribution puts it.
fn pg_bin(name: &str) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| PathBuf::from(name))
}
