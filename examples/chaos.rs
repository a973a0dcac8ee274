//! Chaos contention: many contenders loop on one lock while a killer sends
//! SIGKILL at random moments, and independent checks count what must never
//! happen.
//!
//! ```text
//! cargo run --release --example chaos -- [--mode run|shell|cron|lib|store|etcd|slots|mixed] [--seconds N]
//!     [--contenders N] [--kill-every-ms N] [--min-runs N] [--min-kills N]
//!     [--max-seconds N] [--dir DIR]
//! ```
//!
//! - **The critical section** is this program again (`--cs`): it takes its
//!   own kernel lock (`flock -n` on a separate file) for its whole life and
//!   exits 99 if it cannot, so an overlap is seen without trusting onlyone.
//!   It appends its run's token to a log (runs started) and lasts 0-3 ms.
//! - **Modes.** `run`: contenders loop `onlyone run --wait 10s`. `shell`:
//!   contenders loop `sh -c 'onlyone acquire … && CS; onlyone release …'`,
//!   and the killer kills the whole script (its process group). `cron`: as
//!   cron runs a script, `sh -c SCRIPT` leads the group and forks the
//!   script, which takes the lock with `acquire --export` and runs the CS
//!   as a background worker (a subshell that loops a little before it
//!   execs the CS, so that kills land between its fork and its exec, when
//!   its environment has no token yet); the killer kills the script alone
//!   (SIGKILL), so its worker goes on, and must keep the lock held. `lib`:
//!   worker processes of this program, each with several threads, loop on
//!   the library's `acquire`/`release`; the killer kills workers.
//!   `store`: the PostgreSQL store. The harness starts a throwaway
//!   cluster (as the store's tests do) behind a TCP proxy; contenders loop
//!   `onlyone --store URL run --lease 2s --kill-after 300ms --wait 30s`
//!   with critical sections of up to 6 s (three leases), the killer
//!   SIGKILLs the wrapper of a run (every second on average: its watchdog
//!   must end the command before the lease runs out), and a fault thread
//!   restarts the server (`pg_ctl stop -m immediate`, down for up to 3 s)
//!   or black-holes the proxy (up to 4 s) every few seconds. An overlap is
//!   seen as in the other modes, by the kernel lock on the detector file.
//!   A wrapper's exit 124 (its lease could not be renewed in time) and 125
//!   (the store was unreachable) are counted, not errors; neither is a
//!   contender that waited 30 s in vain (the lease's waiters poll, with no
//!   queue). `etcd`: as `store`, on the etcd store: the harness starts a
//!   three-member cluster (as the etcd store's tests do), and the fault
//!   thread SIGSTOPs a member (the leader half the time) or every member,
//!   for up to 3 s, every few seconds; an election follows a stopped
//!   leader. `slots`: as `run`, with `run --slots 3`; the critical section
//!   takes the kernel lock of its slot's own detector file (`CHECK.slotK`,
//!   K from ONLYONE_SLOT) and counts a slot outside 0..2 as an overlap, so
//!   a fourth run at once is one whatever slots onlyone hands out.
//!   `mixed`: fires of different N on one lock: each fire is `onlyone run
//!   --slots N` with N drawn from 1, 2 and 3 (N = 1 half the time as a
//!   plain `run job`), half of them with `--wait 10s`. Every command
//!   counts the commands alive from inside, under one kernel lock for all
//!   of them (`CHECK.count`): it takes its slot's kernel lock
//!   (`CHECK.slotK`, for its life: two in one slot, or a slot outside
//!   0..N-1, is an overlap) and writes its N there, and reads the N of
//!   every other slot whose kernel lock is held. More commands alive than
//!   the smallest N among theirs and its own is an **over-admission**,
//!   written with the N, slots and tokens of all of them to
//!   `CHECK.over`. A refusal (125, "held with 3 slots, and this take asks
//!   for 1") and a plain fire's "held" (75) are counted, not errors.
//! - **Closure** (slots and mixed modes). Once the storm is over (the
//!   contenders stopped, every command gone), one `onlyone precheck
//!   --slots 3` clears the stale slots; then every run in the lock's
//!   history (`history --json`) must have ended: a run still "running" is
//!   named with its token, pid and start, and fails the run.
//! - **Counts.** Overlaps (a CS that found its kernel lock taken: must be
//!   0); runs started; kills; stuck intervals (the lock file names a run
//!   none of whose processes is alive, and stays so for more than a second
//!   while contenders keep trying: must be 0); live takeovers (onlyone said
//!   it took over a lock from a pid that the killer had not killed, or
//!   killed only after the takeover: must be 0).
//!
//! - **Wait timeouts** (a contender waited 10 s in vain: must be 0, as
//!   critical sections last milliseconds; a lock held by a process that is
//!   not a run, such as init adopting an orphan, shows here).
//!
//! Exits 1 when a must-be-zero count is not zero, or fewer runs or kills
//! happened than `--min-runs` / `--min-kills`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use onlyone::{AcquireOptions, LockFile, procfs};

/// The throwaway server and the proxy of the store's tests.
#[path = "../tests/it/support/pg.rs"]
#[allow(dead_code)]
mod pg;

/// The throwaway etcd members of the etcd store's tests.
#[path = "../tests/it/support/etcd.rs"]
#[allow(dead_code)]
mod etcd;

const OVERLAP_EXIT: i32 = 99;
const STUCK_BOUND: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Run,
    Shell,
    Cron,
    Lib,
    Store,
    Etcd,
    Slots,
    Mixed,
}

/// The slots of slots mode's lock, and the largest N of mixed mode's
/// fires (each takes 1, 2 or 3).
const SLOTS: u32 = 3;

/// One fire of a contender: the N it asks for (1 outside slots and mixed
/// modes), whether it says `--slots` for N = 1, and whether it waits.
#[derive(Clone, Copy, Debug)]
struct Fire {
    n: u32,
    says_slots: bool,
    waits: bool,
}

struct Opts {
    mode: Mode,
    seconds: u64,
    contenders: usize,
    kill_every: Duration,
    min_runs: u64,
    min_kills: u64,
    max_seconds: u64,
    dir: Option<PathBuf>,
}

fn parse_args() -> Opts {
    let mut o = Opts {
        mode: Mode::Run,
        seconds: 20,
        contenders: 4,
        kill_every: Duration::from_millis(100),
        min_runs: 0,
        min_kills: 0,
        max_seconds: 0,
        dir: None,
    };
    let mut args = std::env::args().skip(1);
    let mut kill_every_set = false;
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--mode" => {
                o.mode = match val().as_str() {
                    "run" => Mode::Run,
                    "shell" => Mode::Shell,
                    "cron" => Mode::Cron,
                    "lib" => Mode::Lib,
                    "store" => Mode::Store,
                    "etcd" => Mode::Etcd,
                    "slots" => Mode::Slots,
                    "mixed" => Mode::Mixed,
                    m => usage(&format!("unknown mode {m}")),
                }
            }
            "--seconds" => o.seconds = num(&val()),
            "--contenders" => o.contenders = num(&val()) as usize,
            "--kill-every-ms" => {
                o.kill_every = Duration::from_millis(num(&val()));
                kill_every_set = true;
            }
            "--min-runs" => o.min_runs = num(&val()),
            "--min-kills" => o.min_kills = num(&val()),
            "--max-seconds" => o.max_seconds = num(&val()),
            "--dir" => o.dir = Some(PathBuf::from(val())),
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    if leased(o.mode) && !kill_every_set {
        o.kill_every = Duration::from_millis(1000);
    }
    o
}

fn num(s: &str) -> u64 {
    s.parse()
        .unwrap_or_else(|_| usage(&format!("`{s}` is not a number")))
}

fn usage(msg: &str) -> ! {
    eprintln!("chaos: {msg}");
    eprintln!(
        "usage: chaos [--mode run|shell|cron|lib|store|etcd|slots|mixed] [--seconds N] [--contenders N] \
         [--kill-every-ms N] [--min-runs N] [--min-kills N] [--max-seconds N] [--dir DIR]"
    );
    std::process::exit(2);
}

fn count_lines(p: &Path) -> u64 {
    std::fs::read(p)
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .unwrap_or(0)
}

/// The critical section: `chaos --cs CHECK LOG`.
fn critical_section(check: &Path, log: &Path) -> ! {
    if let Some(n) = std::env::var("CHAOS_N")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
    {
        mixed_section(check, log, n);
    }
    // Slots mode: one kernel lock per slot, and no slot outside 0..N-1,
    // so that more than N at once is an overlap whatever slots onlyone
    // says.
    let check = match std::env::var("CHAOS_SLOTS")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
    {
        Some(n) => match std::env::var("ONLYONE_SLOT")
            .ok()
            .and_then(|k| k.parse::<u32>().ok())
        {
            Some(k) if k < n => check.with_extension(format!("slot{k}")),
            _ => std::process::exit(OVERLAP_EXIT),
        },
        None => check.to_path_buf(),
    };
    let f = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&check)
        .expect("open the check file");
    if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        std::process::exit(OVERLAP_EXIT);
    }
    let token = std::env::var("ONLYONE_TOKEN").unwrap_or_else(|_| "lib".into());
    let mut l = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .expect("open the log");
    let _ = writeln!(l, "{token}");
    // Cron mode makes it longer, so that kills of the script land while
    // its worker is in the critical section.
    let max = std::env::var("CHAOS_CS_MAX_US")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(3000)
        .max(1);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let micros = u64::from(std::process::id().wrapping_mul(2_654_435_761) ^ nanos) % u64::from(max);
    std::thread::sleep(Duration::from_micros(micros));
    std::process::exit(0);
}

/// The kernel lock and the record of slot `k`'s commands in slots and
/// mixed modes: `CHECK.slotK`.
fn slot_check(check: &Path, k: u32) -> PathBuf {
    check.with_extension(format!("slot{k}"))
}

/// Where mixed mode's commands write each over-admission they see.
fn over_file(check: &Path) -> PathBuf {
    check.with_extension("over")
}

/// Mixed mode's critical section: the command of a take of `n` slots,
/// in the slot `ONLYONE_SLOT` says. Under one kernel lock that every
/// command's count takes (`CHECK.count`), it takes its slot's kernel lock
/// (held for its life: another command in its slot is an overlap, exit
/// 99), and writes its N and token in that file; every other slot whose
/// kernel lock is held is a live command (a killed one's lock is freed
/// with it), whose N its file says. More commands alive than the smallest
/// N among them is an over-admission: one line in `CHECK.over`.
fn mixed_section(check: &Path, log: &Path, n: u32) -> ! {
    use rustix::fs::{FlockOperation, flock};
    use std::os::unix::fs::FileExt;
    let k = match std::env::var("ONLYONE_SLOT")
        .ok()
        .and_then(|k| k.parse::<u32>().ok())
    {
        Some(k) if k < n => k,
        _ => std::process::exit(OVERLAP_EXIT),
    };
    let token = std::env::var("ONLYONE_TOKEN").unwrap_or_default();
    let open = |p: &Path| {
        std::fs::File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(p)
            .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
    };
    let count = open(&check.with_extension("count"));
    flock(&count, FlockOperation::LockExclusive).expect("lock the count");
    let mine = open(&slot_check(check, k));
    if flock(&mine, FlockOperation::NonBlockingLockExclusive).is_err() {
        std::process::exit(OVERLAP_EXIT);
    }
    let mut alive = vec![format!("N={n} in slot {k} (token {token}, this one)")];
    let mut smallest = n;
    for j in (0..SLOTS).filter(|&j| j != k) {
        let other = open(&slot_check(check, j));
        if flock(&other, FlockOperation::NonBlockingLockExclusive).is_ok() {
            continue; // no live command in slot j (dropping it unlocks)
        }
        let said = std::fs::read_to_string(slot_check(check, j)).unwrap_or_default();
        let mut words = said.split_whitespace();
        let m = words
            .next()
            .and_then(|m| m.parse::<u32>().ok())
            .unwrap_or(0);
        let their = words.next().unwrap_or("?");
        alive.push(format!("N={m} in slot {j} (token {their})"));
        smallest = smallest.min(m);
    }
    if alive.len() > smallest as usize {
        let mut over = std::fs::File::options()
            .create(true)
            .append(true)
            .open(over_file(check))
            .expect("open the over-admission file");
        let _ = writeln!(
            over,
            "{} commands alive, the smallest N {smallest}: {}",
            alive.len(),
            alive.join(", ")
        );
    }
    mine.set_len(0).expect("empty the slot's file");
    mine.write_all_at(format!("{n} {token}\n").as_bytes(), 0)
        .expect("write the slot's file");
    drop(count);
    let mut l = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .expect("open the log");
    let _ = writeln!(l, "{token} {n}");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let micros = u64::from(std::process::id().wrapping_mul(2_654_435_761) ^ nanos) % 10_000;
    std::thread::sleep(Duration::from_micros(micros));
    std::process::exit(0);
}

/// Shared counters and the kill book.
#[derive(Default)]
struct Stats {
    overlaps: AtomicU64,
    kills: AtomicU64,
    timeouts: AtomicU64,
    errors: AtomicU64,
    live_takeovers: AtomicU64,
    takeovers: AtomicU64,
    stuck: AtomicU64,
    /// Store mode: wrappers that ended their command on a lease they could
    /// not renew (124), or found the store unreachable (125).
    lease_losses: AtomicU64,
    store_errors: AtomicU64,
    restarts: AtomicU64,
    holes: AtomicU64,
    /// Etcd mode: members paused (SIGSTOP, then SIGCONT).
    pauses: AtomicU64,
    /// Mixed mode: fires refused for another N (125), and plain fires
    /// that found every slot of their N held (75).
    refusals: AtomicU64,
    held: AtomicU64,
    /// pid -> when the killer sent it SIGKILL (latest).
    killed: Mutex<HashMap<u32, Instant>>,
    /// The contender processes (wrappers) that the killer SIGKILLed
    /// themselves, not their command.
    wrappers_killed: Mutex<std::collections::HashSet<u32>>,
    /// Live contender processes: pid -> process group to kill.
    live: Mutex<HashMap<u32, i32>>,
    first_errors: Mutex<Vec<String>>,
}

impl Stats {
    fn error(&self, msg: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut v = self.first_errors.lock().unwrap();
        if v.len() < 10 {
            v.push(msg);
        }
    }
}

fn main() {
    run_role_if_asked();
    let o = parse_args();
    let exe = std::env::current_exe().expect("current_exe");
    let onlyone = onlyone_binary(&exe);
    let base = chaos_dir(&o);
    let _ = std::fs::remove_dir_all(&base);
    let locks = base.join("locks");
    std::fs::create_dir_all(&locks).expect("create the chaos dir");
    let check = base.join("check.flock");
    let log = base.join("runs.log");
    let state = base.join("state");
    let lock_path = locks.join("job.lock");

    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    if o.mode == Mode::Cron {
        cron_script(&locks);
    }
    let store = (o.mode == Mode::Store).then(start_store);
    let cluster = (o.mode == Mode::Etcd).then(start_etcd);
    let url = match (&store, &cluster) {
        (Some((pg, proxy)), _) => Some(pg.url_at(proxy.port)),
        (_, Some(e)) => Some(e.url("chaos")),
        _ => None,
    };
    let at = Paths {
        exe: &exe,
        onlyone: &onlyone,
        locks: &locks,
        check: &check,
        log: &log,
        state: &state,
        url: url.as_deref(),
    };
    let threads = spawn_contenders(&o, &at, &stats, &stop);
    let faults = store.as_ref().map(|(pg, proxy)| {
        let (stats, stop, pg, proxy) = (stats.clone(), stop.clone(), pg.clone(), proxy.clone());
        std::thread::spawn(move || store_faults(&pg, &proxy, &stats, &stop))
    });
    let etcd_faults = cluster.as_ref().map(|e| {
        let (stats, stop, e) = (stats.clone(), stop.clone(), e.clone());
        std::thread::spawn(move || member_faults(&e, &stats, &stop))
    });
    let killer = {
        let (stats, stop) = (stats.clone(), stop.clone());
        let every = o.kill_every;
        let mode = o.mode;
        std::thread::spawn(move || killer(mode, every, &stats, &stop))
    };
    let monitor = {
        let (stats, stop, lock_path) = (stats.clone(), stop.clone(), lock_path.clone());
        std::thread::spawn(move || monitor(&lock_path, &stats, &stop))
    };

    wait_for_enough(&o, started, &log, &stats);
    stop.store(true, Ordering::SeqCst);
    // Library workers loop until killed.
    if o.mode == Mode::Lib {
        kill_live(&stats);
    }
    for t in threads {
        let _ = t.join();
    }
    let _ = killer.join();
    let _ = monitor.join();
    if let Some(f) = faults {
        let _ = f.join();
    }
    if let Some(f) = etcd_faults {
        let _ = f.join();
    }

    let closure = matches!(o.mode, Mode::Slots | Mode::Mixed).then(|| closure(&at, &stats));
    let over = std::fs::read_to_string(over_file(&check)).unwrap_or_default();
    let runs = count_lines(&log);
    let secs = started.elapsed().as_secs_f64();
    print_report(&o, &stats, runs, secs);
    if o.mode == Mode::Mixed {
        print_mixed(&stats, &log, &over);
    }
    if let Some(c) = &closure {
        c.print();
    }
    let _ = std::fs::remove_dir_all(&base);
    let unclosed = closure.as_ref().is_some_and(|c| !c.ok());
    if failed(&o, &stats, runs) || !over.is_empty() || unclosed {
        println!("chaos: FAILED");
        std::process::exit(1);
    }
    println!("chaos: ok");
}

/// Plays the part a contender started this program for, and exits:
/// `--cs CHECK LOG` (the critical section) or `--lib-worker LOCK CHECK
/// LOG`. Returns when asked for neither.
fn run_role_if_asked() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("--cs") => {
            let check = PathBuf::from(args.next().expect("CHECK"));
            let log = PathBuf::from(args.next().expect("LOG"));
            critical_section(&check, &log);
        }
        Some("--lib-worker") => {
            let lock = PathBuf::from(args.next().expect("LOCK"));
            let check = PathBuf::from(args.next().expect("CHECK"));
            let log = PathBuf::from(args.next().expect("LOG"));
            lib_worker(&lock, &check, &log);
        }
        _ => {}
    }
}

/// The onlyone binary: next to the examples' directory, else
/// `$ONLYONE_BIN`.
fn onlyone_binary(exe: &Path) -> PathBuf {
    exe.parent()
        .and_then(Path::parent)
        .map(|p| p.join("onlyone"))
        .filter(|p| p.exists())
        .or_else(|| std::env::var_os("ONLYONE_BIN").map(PathBuf::from))
        .expect("the onlyone binary (build it, or set ONLYONE_BIN)")
}

/// The directory the chaos runs in: `--dir`, else one of this process in
/// `/dev/shm` (or `/tmp`).
fn chaos_dir(o: &Opts) -> PathBuf {
    o.dir.clone().unwrap_or_else(|| {
        let shm = Path::new("/dev/shm");
        let root = if shm.is_dir() { shm } else { Path::new("/tmp") };
        root.join(format!("onlyone-chaos-{}", std::process::id()))
    })
}

/// Store mode's server and the proxy in front of it; exits when the
/// server cannot start.
fn start_store() -> (Arc<pg::Pg>, Arc<pg::Proxy>) {
    let pg = Arc::new(pg::Pg::start().unwrap_or_else(|e| {
        eprintln!("chaos: cannot start PostgreSQL: {e}");
        std::process::exit(2)
    }));
    let proxy = Arc::new(pg::Proxy::start(pg.port));
    (pg, proxy)
}

/// Etcd mode's cluster of three; exits when it cannot start.
fn start_etcd() -> Arc<etcd::Etcd> {
    Arc::new(etcd::Etcd::cluster().unwrap_or_else(|e| {
        eprintln!("chaos: cannot start etcd: {e}");
        std::process::exit(2)
    }))
}

/// Whether `mode` runs on a store of leases.
fn leased(mode: Mode) -> bool {
    matches!(mode, Mode::Store | Mode::Etcd)
}

/// For the etcd members' support (`support::etcd`): whether a program is
/// on the PATH.
fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", "command -v \"$0\" >/dev/null", prog])
        .status()
        .is_ok_and(|s| s.success())
}

/// For the etcd members' support: waits up to `timeout` for `cond`.
fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Etcd mode's faults: every few seconds a member (the leader half the
/// time) or every member SIGSTOPped for up to 3 s, then SIGCONTed.
fn member_faults(e: &etcd::Etcd, stats: &Stats, stop: &AtomicBool) {
    let mut rng = u64::from(std::process::id()) ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move |lo: u64, hi: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        lo + rng % (hi - lo)
    };
    let pause = |d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let n = e.members.len();
    loop {
        pause(Duration::from_millis(next(3000, 8000)));
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let which: Vec<usize> = match next(0, 4) {
            0 => (0..n).collect(),
            1 | 2 => e.leader().into_iter().collect(),
            _ => vec![next(0, n as u64) as usize],
        };
        for &i in &which {
            e.signal(i, libc::SIGSTOP);
        }
        stats.pauses.fetch_add(1, Ordering::Relaxed);
        // SIGCONT even when stopped early: a member left stopped would
        // outlive the run.
        let d = Duration::from_millis(next(300, 3000));
        let until = Instant::now() + d;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &i in &which {
            e.signal(i, libc::SIGCONT);
        }
    }
}

/// Starts `--contenders` contenders, each in a thread of its own.
fn spawn_contenders(
    o: &Opts,
    at: &Paths<'_>,
    stats: &Arc<Stats>,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    for i in 0..o.contenders {
        let (stats, stop) = (stats.clone(), stop.clone());
        let (exe, onlyone, locks, check, log, state) = (
            at.exe.to_owned(),
            at.onlyone.to_owned(),
            at.locks.to_owned(),
            at.check.to_owned(),
            at.log.to_owned(),
            at.state.to_owned(),
        );
        let mode = o.mode;
        let url = at.url.map(str::to_owned);
        threads.push(std::thread::spawn(move || {
            let at = Paths {
                exe: &exe,
                onlyone: &onlyone,
                locks: &locks,
                check: &check,
                log: &log,
                state: &state,
                url: url.as_deref(),
            };
            contender(i, mode, &at, &stats, &stop)
        }));
    }
    threads
}

/// Runs for `--seconds`; then, up to `--max-seconds`, until the minimum
/// runs and kills are reached (a slower machine takes longer, not fewer).
fn wait_for_enough(o: &Opts, started: Instant, log: &Path, stats: &Stats) {
    let until = started + Duration::from_secs(o.seconds);
    let hard_until = started + Duration::from_secs(o.max_seconds.max(o.seconds));
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = Instant::now();
        if now >= hard_until {
            break;
        }
        if now >= until {
            let runs = count_lines(log);
            if runs >= o.min_runs && stats.kills.load(Ordering::Relaxed) >= o.min_kills {
                break;
            }
        }
    }
}

/// Sends SIGKILL to every live contender process.
fn kill_live(stats: &Stats) {
    for (pid, _) in stats.live.lock().unwrap().iter() {
        if let Some(p) = rustix::process::Pid::from_raw(*pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
}

/// Prints the counts of a chaos run of `secs` seconds that started `runs`
/// runs, and its first errors.
fn print_report(o: &Opts, s: &Stats, runs: u64, secs: f64) {
    let overlaps = s.overlaps.load(Ordering::Relaxed);
    let stuck = s.stuck.load(Ordering::Relaxed);
    let live = s.live_takeovers.load(Ordering::Relaxed);
    let kills = s.kills.load(Ordering::Relaxed);
    println!(
        "chaos mode={:?} contenders={} seconds={secs:.1}",
        o.mode, o.contenders
    );
    println!("  runs started     {runs} ({:.0}/s)", runs as f64 / secs);
    println!("  kills            {kills}");
    println!("  takeovers        {}", s.takeovers.load(Ordering::Relaxed));
    println!("  overlaps         {overlaps}");
    println!("  stuck intervals  {stuck}");
    println!("  live takeovers   {live}");
    println!("  wait timeouts    {}", s.timeouts.load(Ordering::Relaxed));
    if leased(o.mode) {
        println!(
            "  lease losses     {}",
            s.lease_losses.load(Ordering::Relaxed)
        );
        println!(
            "  store errors     {}",
            s.store_errors.load(Ordering::Relaxed)
        );
    }
    if o.mode == Mode::Store {
        println!("  server restarts  {}", s.restarts.load(Ordering::Relaxed));
        println!("  black holes      {}", s.holes.load(Ordering::Relaxed));
    }
    if o.mode == Mode::Etcd {
        println!("  member pauses    {}", s.pauses.load(Ordering::Relaxed));
    }
    println!("  other errors     {}", s.errors.load(Ordering::Relaxed));
    for e in s.first_errors.lock().unwrap().iter() {
        println!("    {e}");
    }
}

/// Whether the chaos run failed: an overlap, a stuck interval or a live
/// takeover; a wait that ran out (outside store mode); too few faults in a
/// store run of 20 s or more; or fewer runs or kills than asked for.
fn failed(o: &Opts, s: &Stats, runs: u64) -> bool {
    // A critical section lasts milliseconds: a 10 s wait that runs out
    // means the lock was held by something that was not a run.
    let timeouts = s.timeouts.load(Ordering::Relaxed);
    let faults = s.restarts.load(Ordering::Relaxed)
        + s.holes.load(Ordering::Relaxed)
        + s.pauses.load(Ordering::Relaxed);
    s.overlaps.load(Ordering::Relaxed) > 0
        || s.stuck.load(Ordering::Relaxed) > 0
        || s.live_takeovers.load(Ordering::Relaxed) > 0
        || (timeouts > 0 && !leased(o.mode))
        || (leased(o.mode) && o.seconds >= 20 && faults < 2)
        || runs < o.min_runs
        || s.kills.load(Ordering::Relaxed) < o.min_kills
}

/// Where a contender finds its programs, files and store.
struct Paths<'a> {
    exe: &'a Path,
    onlyone: &'a Path,
    locks: &'a Path,
    check: &'a Path,
    log: &'a Path,
    /// The journals' directory (`ONLYONE_STATE_DIR`) of every command.
    state: &'a Path,
    url: Option<&'a str>,
}

/// Contender `i`: starts runs of `mode` one after another until stopped,
/// and counts how each ended.
fn contender(i: usize, mode: Mode, at: &Paths<'_>, stats: &Stats, stop: &AtomicBool) {
    let mut rng = (u64::from(std::process::id()) << 8 | i as u64) ^ 0x9e37_79b9_7f4a_7c15;
    while !stop.load(Ordering::Relaxed) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let fire = match mode {
            Mode::Mixed => Fire {
                n: 1 + (rng % 3) as u32,
                says_slots: rng & 8 != 0,
                waits: rng & 16 != 0,
            },
            Mode::Slots => Fire {
                n: SLOTS,
                says_slots: true,
                waits: true,
            },
            _ => Fire {
                n: 1,
                says_slots: false,
                waits: true,
            },
        };
        let mut cmd = contender_command(mode, at, fire);
        cmd.env("ONLYONE_STATE_DIR", at.state);
        let spawned_at = Instant::now();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        let mut child: Child = match child {
            Ok(c) => c,
            Err(e) => {
                stats.error(format!("contender {i}: spawn: {e}"));
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let pid = child.id();
        let pgid = if mode == Mode::Shell {
            -(pid as i32)
        } else {
            pid as i32
        };
        stats.live.lock().unwrap().insert(pid, pgid);
        let mut stderr = String::new();
        if let Some(e) = child.stderr.take() {
            for line in BufReader::new(e).lines().map_while(Result::ok) {
                stderr.push_str(&line);
                stderr.push('\n');
            }
        }
        let status = child.wait();
        stats.live.lock().unwrap().remove(&pid);
        let finished_at = Instant::now();
        check_takeovers(&stderr, spawned_at, finished_at, stats);
        let Ok(status) = status else { continue };
        judge_exit(status, &stderr, (mode, fire), at.locks, stats, stop);
    }
}

/// The command a contender of `mode` starts for one run, `fire` (mixed
/// mode's N).
fn contender_command(mode: Mode, at: &Paths<'_>, fire: Fire) -> Command {
    let Paths {
        exe,
        onlyone,
        locks,
        check,
        log,
        url,
        ..
    } = *at;
    match mode {
        Mode::Run => {
            let mut c = Command::new(onlyone);
            c.arg("--dir")
                .arg(locks)
                .args(["run", "--wait", "10s", "job", "--"])
                .arg(exe)
                .arg("--cs")
                .arg(check)
                .arg(log);
            c
        }
        Mode::Slots => {
            let mut c = Command::new(onlyone);
            c.arg("--dir")
                .arg(locks)
                .args([
                    "run",
                    "--slots",
                    &SLOTS.to_string(),
                    "--wait",
                    "10s",
                    "job",
                    "--",
                ])
                .arg(exe)
                .arg("--cs")
                .arg(check)
                .arg(log)
                .env("CHAOS_SLOTS", SLOTS.to_string())
                .env("CHAOS_CS_MAX_US", "10000");
            c
        }
        Mode::Mixed => {
            let mut c = Command::new(onlyone);
            c.arg("--dir").arg(locks).arg("run");
            if fire.n > 1 || fire.says_slots {
                c.args(["--slots", &fire.n.to_string()]);
            }
            if fire.waits {
                c.args(["--wait", "10s"]);
            }
            c.args(["job", "--"])
                .arg(exe)
                .arg("--cs")
                .arg(check)
                .arg(log)
                .env("CHAOS_N", fire.n.to_string());
            c
        }
        Mode::Shell => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(
                    "\"$1\" --dir \"$2\" acquire --wait 10s job || exit $?; \
                     \"$3\" --cs \"$4\" \"$5\"; rc=$?; \
                     \"$1\" --dir \"$2\" release job; exit $rc",
                )
                .arg("sh")
                .arg(onlyone)
                .arg(locks)
                .arg(exe)
                .arg(check)
                .arg(log)
                .process_group(0);
            c
        }
        Mode::Cron => {
            // cron: `/bin/sh -c LINE` leads the group; dash forks the
            // script (`; exit` makes sure of it in any sh).
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg("\"$0\" \"$@\"; exit $?")
                .arg(cron_script(locks))
                .arg(onlyone)
                .arg(locks)
                .arg(exe)
                .arg(check)
                .arg(log)
                .env("CHAOS_CS_MAX_US", "20000")
                .process_group(0);
            c
        }
        Mode::Store | Mode::Etcd => {
            let mut c = Command::new(onlyone);
            c.arg("--store")
                .arg(url.expect("the store's URL"))
                .args(["run", "--lease", "2s", "--kill-after", "300ms"])
                .args(["--wait", "30s", "job", "--"])
                .arg(exe)
                .arg("--cs")
                .arg(check)
                .arg(log)
                .env("CHAOS_CS_MAX_US", "6000000");
            c
        }
        Mode::Lib => {
            let mut c = Command::new(exe);
            c.arg("--lib-worker")
                .arg(locks.join("job.lock"))
                .arg(check)
                .arg(log);
            c
        }
    }
}

/// Counts how one run of a contender ended: an overlap, a wait that ran
/// out, a lost lease, a store error, a kill, or an error to report.
fn judge_exit(
    status: std::process::ExitStatus,
    stderr: &str,
    (mode, fire): (Mode, Fire),
    locks: &Path,
    stats: &Stats,
    stop: &AtomicBool,
) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => {}
        (Some(OVERLAP_EXIT), _) => {
            stats.overlaps.fetch_add(1, Ordering::Relaxed);
            stats.error(format!("OVERLAP seen by a critical section: {stderr}"));
        }
        (Some(75), _) if !fire.waits => {
            stats.held.fetch_add(1, Ordering::Relaxed);
        }
        (Some(75), _) => {
            stats.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        (Some(125), _) if mode == Mode::Mixed && stderr.contains("and this take asks for") => {
            stats.refusals.fetch_add(1, Ordering::Relaxed);
        }
        (Some(124), _) if leased(mode) => {
            stats.lease_losses.fetch_add(1, Ordering::Relaxed);
        }
        (Some(125), _) if leased(mode) => {
            stats.store_errors.fetch_add(1, Ordering::Relaxed);
            // The server is down or cut off: try again in a moment.
            std::thread::sleep(Duration::from_millis(100));
        }
        // Killed by the killer: the process itself, or its command
        // (onlyone reports 128+9), or in shell mode the script.
        (_, Some(9)) | (Some(137), _) => {}
        (code, sig) => {
            if mode == Mode::Lib && stop.load(Ordering::Relaxed) {
                return;
            }
            let diag = if std::env::var_os("CHAOS_DIAG").is_some() {
                diagnose(stderr, &locks.join("job.lock"))
            } else {
                String::new()
            };
            stats.error(format!(
                "exit {code:?} signal {sig:?}: {} {diag}",
                stderr.trim()
            ))
        }
    }
}

/// Mixed mode's counts: refusals, plain fires held, the runs of each N,
/// and every over-admission the commands saw.
fn print_mixed(s: &Stats, log: &Path, over: &str) {
    let mut by_n = [0u64; SLOTS as usize + 1];
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        if let Some(n) = line
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse::<usize>().ok())
            && n < by_n.len()
        {
            by_n[n] += 1;
        }
    }
    println!("  refused (other N) {}", s.refusals.load(Ordering::Relaxed));
    println!("  held (no --wait) {}", s.held.load(Ordering::Relaxed));
    println!(
        "  runs by N        N=1: {}, N=2: {}, N=3: {}",
        by_n[1], by_n[2], by_n[3]
    );
    println!("  over-admissions  {}", over.lines().count());
    for line in over.lines().take(10) {
        println!("    OVER-ADMISSION: {line}");
    }
}

/// What the closure check found once the storm was over.
struct Closure {
    /// What the final `precheck` answered.
    precheck: String,
    /// The runs in the lock's history.
    runs: usize,
    /// Those still "running", each named: token, pid, start, what the
    /// killer did to it.
    running: Vec<String>,
    /// The slot files left in the lock directory after the precheck: once
    /// every command of the storm is gone, each is stale, and the lock is
    /// not free.
    left: Vec<String>,
    /// The lock's other files left (its waiters' tickets...).
    others: Vec<String>,
    /// A step that could not be done.
    error: Option<String>,
}

impl Closure {
    fn ok(&self) -> bool {
        self.error.is_none() && self.running.is_empty() && self.left.is_empty() && self.runs > 0
    }

    fn print(&self) {
        println!(
            "  closure          precheck --slots {SLOTS}: {}",
            self.precheck
        );
        println!(
            "  closure          {} runs in the history, {} still \"running\"",
            self.runs,
            self.running.len()
        );
        for r in self.running.iter().take(20) {
            println!("    STILL RUNNING: {r}");
        }
        if self.running.len() > 20 {
            println!("    ... and {} more", self.running.len() - 20);
        }
        if !self.left.is_empty() {
            println!(
                "  closure          STALE SLOTS LEFT after the precheck (every command gone): {}",
                self.left.join(" ")
            );
        }
        if !self.others.is_empty() {
            println!(
                "  closure          other files left: {}",
                self.others.join(" ")
            );
        }
        if let Some(e) = &self.error {
            println!("  closure          ERROR: {e}");
        }
    }
}

/// Slots and mixed modes, once the contenders have stopped: waits until
/// no command of the storm lives, lets one `precheck --slots 3` clear the
/// stale slots, and reads the lock's history: every run in it must have
/// ended, none "running".
fn closure(at: &Paths<'_>, stats: &Stats) -> Closure {
    let mut c = Closure {
        precheck: String::new(),
        runs: 0,
        running: Vec::new(),
        left: Vec::new(),
        others: Vec::new(),
        error: None,
    };
    if let Err(pids) = wait_commands_gone(at.check, Duration::from_secs(10)) {
        c.error = Some(format!(
            "commands of the storm still alive after 10 s: pids {pids:?}"
        ));
        return c;
    }
    let onlyone = |args: &[&str]| {
        Command::new(at.onlyone)
            .arg("--dir")
            .arg(at.locks)
            .args(args)
            .env("ONLYONE_STATE_DIR", at.state)
            .stdin(Stdio::null())
            .output()
    };
    let slots = SLOTS.to_string();
    match onlyone(&["precheck", "--slots", &slots, "job"]) {
        Ok(o) => {
            let said = String::from_utf8_lossy(&o.stderr);
            let code = o
                .status
                .code()
                .map_or("by a signal".into(), |c| c.to_string());
            c.precheck = format!("exit {code} {}", said.trim());
            if o.status.code() != Some(0) {
                c.error = Some(format!(
                    "the lock is not free after the storm: {}",
                    c.precheck
                ));
            }
        }
        Err(e) => c.error = Some(format!("precheck: {e}")),
    }
    let mut files: Vec<String> = std::fs::read_dir(at.locks)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("job.lock"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    (c.left, c.others) = files
        .into_iter()
        .partition(|n| n == "job.lock" || n.starts_with("job.lock.slot."));
    let out = match onlyone(&["history", "job", "--json"]) {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            c.error = Some(format!(
                "history: exit {:?} {}",
                o.status.code(),
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            return c;
        }
        Err(e) => {
            c.error = Some(format!("history: {e}"));
            return c;
        }
    };
    let wrappers_killed = stats.wrappers_killed.lock().unwrap();
    let killed = stats.killed.lock().unwrap();
    for line in out.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            c.error = Some(format!("history: not JSON: {line}"));
            continue;
        };
        let Some(token) = v["token"].as_str() else {
            continue; // a row of missed fires, not a run
        };
        c.runs += 1;
        if v["outcome"] != "running" {
            continue;
        }
        let pid = v["pid"].as_u64().map(|p| p as u32);
        let fate = match pid {
            Some(p) if wrappers_killed.contains(&p) => "its wrapper was SIGKILLed",
            Some(p) if killed.contains_key(&p) => "its command was SIGKILLed",
            Some(_) => "not killed",
            None => "no pid",
        };
        c.running.push(format!(
            "token {token}, pid {}, started {} ({fate})",
            pid.map_or("?".into(), |p| p.to_string()),
            v["start"].as_str().unwrap_or("?")
        ));
    }
    c
}

/// Waits until no process runs the critical section of this storm (its
/// command line names `check`), for up to `bound`; else the pids of those
/// left.
fn wait_commands_gone(check: &Path, bound: Duration) -> Result<(), Vec<u32>> {
    use std::os::unix::ffi::OsStrExt;
    let needle = check.as_os_str().as_bytes();
    let until = Instant::now() + bound;
    loop {
        let left: Vec<u32> = procfs::all_pids()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
                    c.split(|&b| b == 0).any(|a| a == b"--cs")
                        && c.split(|&b| b == 0).any(|a| a == needle)
                })
            })
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Store mode's faults, every 4-10 s: the server stopped at once
/// (`pg_ctl stop -m immediate`) and started again 0.2-3 s later, or the
/// proxy black-holed for 0.5-4 s (the holed connections stay dead).
fn store_faults(pg: &pg::Pg, proxy: &pg::Proxy, stats: &Stats, stop: &AtomicBool) {
    let mut rng = u64::from(std::process::id()) ^ 0x2545_f491_4f6c_dd1d;
    let mut next = move |lo: u64, hi: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        Duration::from_millis(lo + rng % (hi - lo))
    };
    let pause = |d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    loop {
        pause(next(4000, 10000));
        if stop.load(Ordering::Relaxed) {
            return;
        }
        if next(0, 2).as_millis() == 0 {
            pg.stop_immediate();
            stats.restarts.fetch_add(1, Ordering::Relaxed);
            pause(next(200, 3000));
            if let Err(e) = pg.start_again() {
                stats.error(format!("the server did not start again: {e}"));
                return;
            }
        } else {
            proxy.black_hole();
            stats.holes.fetch_add(1, Ordering::Relaxed);
            pause(next(500, 4000));
            proxy.heal();
        }
    }
}

/// For the store's test support (`support::pg`): a temp dir the cluster's
/// owner (`nobody`, under root) can enter.
fn open_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .prefix("onlyone-chaos-pg-")
        .tempdir()
        .expect("a temp dir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the temp dir");
    d
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The script a cron contender runs (written once beside the locks): it
/// takes the lock with `--export`, so its worker carries the token, and
/// runs the critical section as that worker.
fn cron_script(locks: &Path) -> PathBuf {
    let path = locks.with_file_name("cron-job.sh");
    if !path.exists() {
        let tmp = path.with_extension("tmp");
        std::fs::write(
            &tmp,
            "#!/bin/sh\n\
             vars=$(\"$1\" --dir \"$2\" acquire --wait 10s job --export) || exit $?\n\
             eval \"$vars\"\n\
             ( i=0; while [ \"$i\" -lt 300 ]; do i=$((i+1)); done; exec \"$3\" --cs \"$4\" \"$5\" ) &\n\
             wait $!\n\
             rc=$?\n\
             \"$1\" --dir \"$2\" release job\n\
             exit $rc\n",
        )
        .expect("write the cron script");
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod the cron script");
        std::fs::rename(&tmp, &path).expect("place the cron script");
    }
    path
}

/// Parses "took over the stale lock `job` from pid N: …" lines and checks
/// that pid N was killed before this contender finished (a holder that
/// exits normally releases; only a killed one leaves a stale lock).
fn check_takeovers(stderr: &str, spawned: Instant, finished: Instant, stats: &Stats) {
    for line in stderr.lines() {
        let Some(rest) = line.split("took over the stale lock").nth(1) else {
            continue;
        };
        stats.takeovers.fetch_add(1, Ordering::Relaxed);
        let pid = rest
            .split("from pid ")
            .nth(1)
            .and_then(|r| r.split(':').next())
            .and_then(|p| p.trim().parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        let killed = stats.killed.lock().unwrap().get(&pid).copied();
        let ok = killed.is_some_and(|k| k <= finished);
        if !ok {
            stats.live_takeovers.fetch_add(1, Ordering::Relaxed);
            stats.error(format!(
                "LIVE TAKEOVER? pid {pid} was not killed before the takeover \
                 (spawned {:?} ago): {line}",
                spawned.elapsed()
            ));
        }
    }
}

/// Every `every`, SIGKILLs a random live contender process, or one of its
/// children (the command of a run).
fn killer(mode: Mode, every: Duration, stats: &Stats, stop: &AtomicBool) {
    let mut rng = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    while !stop.load(Ordering::Relaxed) {
        let jitter = Duration::from_micros(next() % (every.as_micros() as u64 * 2).max(1));
        std::thread::sleep(jitter);
        let live: Vec<(u32, i32)> = stats
            .live
            .lock()
            .unwrap()
            .iter()
            .map(|(a, b)| (*a, *b))
            .collect();
        if live.is_empty() {
            continue;
        }
        let (pid, pgid) = live[(next() % live.len() as u64) as usize];
        let mut target = pgid;
        let first_child = || {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .ok()
                .and_then(|s| {
                    s.split_whitespace()
                        .next()
                        .and_then(|p| p.parse::<i32>().ok())
                })
        };
        if matches!(mode, Mode::Run | Mode::Slots | Mode::Mixed) && next() % 2 == 0 {
            // The run's command instead of onlyone itself.
            if let Some(c) = first_child() {
                target = c;
            }
        }
        if leased(mode) && first_child().is_none() {
            // A holder's wrapper (its command runs), not a waiter.
            continue;
        }
        if mode == Mode::Cron {
            // The script alone (cron's sh forked it), never its worker.
            match first_child() {
                Some(c) => target = c,
                None => continue,
            }
        }
        // Record first: a takeover can follow the kill at once.
        let now = Instant::now();
        {
            let mut k = stats.killed.lock().unwrap();
            k.insert(target.unsigned_abs(), now);
            k.insert(pid, now);
        }
        if target == pgid {
            stats.wrappers_killed.lock().unwrap().insert(pid);
        }
        let r = if target < 0 {
            rustix::process::Pid::from_raw(-target)
                .map(|p| rustix::process::kill_process_group(p, rustix::process::Signal::KILL))
        } else {
            rustix::process::Pid::from_raw(target)
                .map(|p| rustix::process::kill_process(p, rustix::process::Signal::KILL))
        };
        if matches!(r, Some(Ok(()))) {
            stats.kills.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Watches the lock: a record none of whose processes lives, that stays
/// for more than STUCK_BOUND while contenders try, is a stuck interval.
fn monitor(lock: &Path, stats: &Stats, stop: &AtomicBool) {
    let mut dead_since: Option<(String, Instant)> = None;
    let mut counted: Option<String> = None;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        let Ok(bytes) = std::fs::read(lock) else {
            dead_since = None;
            continue;
        };
        let Ok(rec) = onlyone::Record::parse(&bytes) else {
            continue;
        };
        let token = rec.token.clone().unwrap_or_default();
        let alive = |pid: u32, start: Option<u64>| {
            matches!(procfs::read_stat(pid), Ok(Some(st))
                if Some(st.start) == start.or(Some(st.start)) && !st.is_dead())
        };
        let mut any =
            alive(rec.pid, rec.start) || rec.cmd_id.is_some_and(|c| alive(c.pid, Some(c.start)));
        if !any && !token.is_empty() {
            any = procfs::all_pids().unwrap_or_default().into_iter().any(|p| {
                procfs::environ_has(p, onlyone::supervise::TOKEN_VAR, &token) == Some(true)
                    && alive(p, None)
            });
        }
        if any {
            dead_since = None;
            continue;
        }
        match &dead_since {
            Some((t, since)) if *t == token => {
                if since.elapsed() > STUCK_BOUND && counted.as_deref() != Some(token.as_str()) {
                    stats.stuck.fetch_add(1, Ordering::Relaxed);
                    stats.error(format!(
                        "STUCK: the lock names a dead run (pid {}) for {:?}",
                        rec.pid,
                        since.elapsed()
                    ));
                    counted = Some(token.clone());
                }
            }
            _ => dead_since = Some((token, Instant::now())),
        }
    }
}

/// A library worker: several threads loop acquire (waiting) → critical
/// section (in-process: its own flock on CHECK, on a fresh open file
/// description per pass) → release, until killed.
fn lib_worker(lock: &Path, check: &Path, log: &Path) -> ! {
    let lock = LockFile::open(lock).expect("open the lock");
    let mut threads = Vec::new();
    for _ in 0..4 {
        let (lock, check, log) = (lock.clone(), check.to_path_buf(), log.to_path_buf());
        threads.push(std::thread::spawn(move || {
            loop {
                let g = match lock.acquire(&AcquireOptions::new().wait(Duration::from_secs(10))) {
                    Ok(g) => g,
                    Err(onlyone::Error::Timeout { .. }) => continue,
                    Err(e) => {
                        eprintln!("lib worker: {e}");
                        std::process::exit(3);
                    }
                };
                let f = std::fs::File::options()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&check)
                    .expect("open the check file");
                if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                    .is_err()
                {
                    std::process::exit(OVERLAP_EXIT);
                }
                if let Ok(mut l) = std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(&log)
                {
                    let _ = writeln!(l, "{}", g.token());
                }
                std::thread::sleep(Duration::from_micros(200));
                drop(f);
                if let Err(e) = g.release() {
                    eprintln!("lib worker: release: {e}");
                    std::process::exit(3);
                }
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    std::process::exit(0);
}

/// With `CHAOS_DIAG` set: what the process named in an error looks like,
/// and who has the lock file open, with the kernel's flock table.
fn diagnose(stderr: &str, lock: &Path) -> String {
    let mut out = String::new();
    if let Some(rest) = stderr.split("cannot be listed: pid ").nth(1)
        && let Some(pid) = rest.split_whitespace().next()
    {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let head: Vec<&str> = status.lines().take(8).collect();
        out.push_str(&format!("[pid {pid}: {}]", head.join("|")));
    }
    if stderr.contains("kernel lock") {
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        let flocks: Vec<&str> = locks.lines().filter(|l| l.contains("FLOCK")).collect();
        out.push_str(&format!("[/proc/locks: {}]", flocks.join(" | ")));
        for p in procfs::all_pids().unwrap_or_default() {
            let Ok(fds) = std::fs::read_dir(format!("/proc/{p}/fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                if let Ok(t) = std::fs::read_link(fd.path())
                    && t.starts_with(lock.parent().unwrap_or(lock))
                {
                    out.push_str(&format!("[pid {p} has {} open]", t.display()));
                }
            }
        }
    }
    out
}
