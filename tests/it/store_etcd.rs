//! The etcd store under faults, with counts taken from inside the
//! commands: every command appends `S FENCE NS` as it starts, `B FENCE
//! NS` every 20 ms while it runs and `E FENCE NS` as it ends to one log
//! (`O_APPEND` lines); a run's interval is its first line to its last.
//! Overlaps (an interval that starts before the one before it ended) and
//! fences that go backwards (a later start with a smaller or equal fence)
//! are counted, and must be 0.
//!
//! The holder SIGKILLed (the lock free at most one lease later, plus
//! etcd's expiry tick); the holder SIGSTOPped past its lease (its command
//! ended by its watchdog before another host's take); the leader of a
//! three-member cluster SIGKILLed under three contending hosts (every run
//! goes on or ends with 124, never two holders); every member SIGSTOPped
//! (the holder ends its command before its lease can run out). Each skips,
//! saying why, where etcd is not installed.

use crate::support;

use std::time::{Duration, Instant};

use support::etcd::Etcd;
use support::*;

use crate::store_engines::{Engine, World, signal};

const HANG: Duration = Duration::from_secs(60);

/// Wall-clock now, in seconds.
fn wall() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A command that logs its start, beats every 20 ms for `beats` beats
/// (forever with none), ignoring TERM when `stubborn`, and logs its end.
fn logging(beats: Option<u32>, stubborn: bool) -> String {
    let trap = if stubborn { "trap '' TERM; " } else { "" };
    let lp = match beats {
        Some(n) => format!("i=0; while [ $i -lt {n} ]; do l B; sleep 0.02; i=$((i+1)); done"),
        None => "while :; do l B; sleep 0.02; done".to_owned(),
    };
    format!(
        "{trap}l() {{ echo \"$1 $ONLYONE_FENCE $(date +%s%N)\" >> \"$DIR/log\"; }}; l S; \
         [ -n \"$READY\" ] && touch \"$READY\"; {lp}; l E"
    )
}

/// A run seen in the log: its fence, first and last line (wall seconds).
#[derive(Debug, Clone, Copy)]
struct Seen {
    fence: i64,
    start: f64,
    end: f64,
}

/// The runs of the log, in the order they started.
fn runs(w: &World) -> Vec<Seen> {
    let mut by_fence: std::collections::BTreeMap<i64, Seen> = Default::default();
    for line in w.read("log").lines() {
        let mut f = line.split_whitespace();
        let (Some(_), Some(fence), Some(ns)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let (Ok(fence), Ok(ns)) = (fence.parse::<i64>(), ns.parse::<f64>()) else {
            continue;
        };
        let t = ns / 1e9;
        let e = by_fence.entry(fence).or_insert(Seen {
            fence,
            start: t,
            end: t,
        });
        e.start = e.start.min(t);
        e.end = e.end.max(t);
    }
    let mut v: Vec<Seen> = by_fence.into_values().collect();
    v.sort_by(|a, b| a.start.total_cmp(&b.start));
    v
}

/// Overlaps and fences that went backwards, over runs in start order.
fn counts(runs: &[Seen]) -> (usize, usize) {
    let mut overlaps = 0;
    let mut backwards = 0;
    let mut latest_end = f64::MIN;
    for (i, r) in runs.iter().enumerate() {
        if r.start < latest_end {
            overlaps += 1;
        }
        latest_end = latest_end.max(r.end);
        if i > 0 && r.fence <= runs[i - 1].fence {
            backwards += 1;
        }
    }
    (overlaps, backwards)
}

/// The run's command: the wrapper's child.
fn command_of(wrapper: u32) -> u32 {
    let mut found = 0;
    wait_until("the wrapper's child", HANG, || {
        found = std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
            .unwrap_or(0);
        found != 0
    });
    found
}

/// A world on a three-member cluster of the test's own.
fn on_cluster() -> Option<(World, Etcd)> {
    let etcd = match Etcd::cluster() {
        Ok(e) => e,
        Err(why) => {
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let mut w = World::new(Engine::Etcd)?;
    w.url = etcd.url("faults");
    Some((w, etcd))
}

/// The holder's wrapper SIGKILLed: its watchdog ends the command (which
/// ignores TERM) before the lease can run out, and a waiter on another
/// host takes the lock at most one lease (plus etcd's expiry tick, half
/// a second, and a second's rounding of the TTL) after the kill.
#[test]
fn a_sigkilled_holder_frees_the_lock_within_a_lease() {
    let Some(mut w) = World::new(Engine::Etcd) else {
        return;
    };
    let opts = ["--lease", "2s", "--kill-after", "200ms"];
    let a = w.start("host-a", "a", &opts, "job", &logging(None, true), true);
    let cmd = command_of(a);
    let killed = wall();
    signal(a, rustix::process::Signal::KILL);
    let b = w.oo_on(
        "host-b",
        &[
            "run",
            "--wait",
            "30s",
            "job",
            "--",
            "sh",
            "-c",
            &logging(Some(1), false),
        ],
    );
    b.expect(0);
    wait_gone(cmd);
    let rs = runs(&w);
    assert_eq!(rs.len(), 2, "{rs:?}");
    let free_after = rs[1].start - killed;
    eprintln!("the lock was free {free_after:.3}s after the SIGKILL (lease 2s)");
    assert!(
        free_after < 2.0 + 1.5,
        "free {free_after:.3}s after the kill"
    );
    assert_eq!(counts(&rs), (0, 0), "overlaps, fences backwards: {rs:?}");
}

/// The holder's wrapper SIGSTOPped past its lease, its command running
/// on: the run's watchdog ends the command before the lease runs out, so
/// before another host's take (its first line comes after the last beat
/// of the stopped one); resumed, the wrapper exits 124.
#[test]
fn a_sigstopped_holder_ends_its_command_before_another_take() {
    let Some(mut w) = World::new(Engine::Etcd) else {
        return;
    };
    let opts = ["--lease", "3s", "--kill-after", "300ms"];
    let a = w.start("host-a", "a", &opts, "job", &logging(None, true), true);
    let cmd = command_of(a);
    signal(a, rustix::process::Signal::STOP);
    let stopped = Instant::now();
    let b = w.oo_on(
        "host-b",
        &[
            "run",
            "--wait",
            "30s",
            "job",
            "--",
            "sh",
            "-c",
            &logging(Some(1), false),
        ],
    );
    b.expect(0);
    assert!(!running(cmd), "the stopped holder's command is gone");
    assert!(stopped.elapsed() < Duration::from_secs(10));
    signal(a, rustix::process::Signal::CONT);
    assert_eq!(w.exit(a, HANG), 124);
    let rs = runs(&w);
    assert_eq!(rs.len(), 2, "{rs:?}");
    assert_eq!(counts(&rs), (0, 0), "overlaps, fences backwards: {rs:?}");
}

/// Three hosts loop on one lock (`--wait`, a lease of 2s) on a
/// three-member cluster; its leader is SIGKILLed mid-run. Every run
/// exits 0 or 124 (its lease could not be renewed in time), never two at
/// once, the fences only grow, and runs go on after the kill.
#[test]
fn the_leader_killed_mid_run_never_makes_a_second_holder() {
    let Some((w, etcd)) = on_cluster() else {
        return;
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let script = logging(Some(5), false);
    let codes = std::sync::Mutex::new(Vec::new());
    let mut killed_at = 0.0;
    std::thread::scope(|s| {
        for host in ["host-a", "host-b", "host-c"] {
            let (w, stop, script, codes) = (&w, &stop, &script, &codes);
            s.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let args = [
                        "run",
                        "--wait",
                        "30s",
                        "--lease",
                        "2s",
                        "--kill-after",
                        "200ms",
                        "job",
                        "--",
                        "sh",
                        "-c",
                        script,
                    ];
                    let out = w.oo_on(host, &args);
                    if out.code() != 0 {
                        eprintln!("{host}: {} {}", out.code(), out.stderr.trim());
                    }
                    codes.lock().unwrap().push(out.code());
                }
            });
        }
        let ok = wait_for(HANG, || runs(&w).len() >= 8);
        let leader = etcd.leader();
        if ok && let Some(i) = leader {
            killed_at = wall();
            etcd.kill(i);
        }
        let before = runs(&w).len();
        let after = wait_for(HANG, || runs(&w).len() >= before + 8);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(ok && after, "runs stalled: {:?}", runs(&w));
        assert!(leader.is_some(), "no leader was found");
    });
    let rs = runs(&w);
    let codes = codes.into_inner().unwrap();
    let (overlaps, backwards) = counts(&rs);
    let after = rs.iter().filter(|r| r.start > killed_at).count();
    eprintln!(
        "{} runs, {after} after the leader's kill; exits {codes:?}; overlaps {overlaps}, \
         fences backwards {backwards}",
        rs.len()
    );
    assert_eq!((overlaps, backwards), (0, 0), "{rs:?}");
    assert!(
        codes.iter().all(|c| [0, 124].contains(c)),
        "every run goes on or ends 124: {codes:?}"
    );
}

/// Every member SIGSTOPped (a frozen cluster: calls time out): the holder
/// ends its command (which ignores TERM) before its lease can run out,
/// counted from the stop (its last renewal was sent before it); on
/// SIGCONT the wrapper exits 124 and the lock is taken again.
#[test]
fn every_member_stopped_ends_the_command_before_the_lease_runs_out() {
    let Some((mut w, etcd)) = on_cluster() else {
        return;
    };
    let lease = 3.0;
    let opts = ["--lease", "3s", "--kill-after", "300ms"];
    let a = w.start("host-a", "a", &opts, "job", &logging(None, true), true);
    let cmd = command_of(a);
    let stall = StallWatch::start();
    let frozen = wall();
    for i in 0..etcd.members.len() {
        etcd.signal(i, libc::SIGSTOP);
    }
    wait_gone(cmd);
    let last = runs(&w)[0].end;
    eprintln!(
        "the command's last beat {:.3}s after the members stopped (lease {lease}s)",
        last - frozen
    );
    stall.assert_within(
        last < frozen + lease,
        Duration::from_millis(200),
        &format!("the command beat {:.3}s after the freeze", last - frozen),
    );
    for i in 0..etcd.members.len() {
        etcd.signal(i, libc::SIGCONT);
    }
    assert_eq!(w.exit(a, HANG), 124);
    w.oo_on(
        "host-b",
        &[
            "run",
            "--wait",
            "30s",
            "job",
            "--",
            "sh",
            "-c",
            &logging(Some(1), false),
        ],
    )
    .expect(0);
    let rs = runs(&w);
    assert_eq!(counts(&rs), (0, 0), "{rs:?}");
}

/// Base64, as etcd's gateway takes keys.
fn b64(s: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in s.as_bytes().chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            out.push(if i <= c.len() {
                A[((n >> (18 - 6 * i)) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

/// doc/store.md's setup, on a member of the test's own: a user `jobs`
/// whose role may read and write `jobs/` only, authentication on. A run
/// with the password from `ETCDCTL_PASSWORD`, then from a password file,
/// takes, records and reads back; another prefix is refused naming the
/// role's permission; a wrong or missing password is a clear error (125,
/// no password shown; `precheck` 0); a password in the URL is refused.
#[test]
fn a_role_limited_to_its_prefix_with_its_password_from_the_environment_or_a_file() {
    let etcd = match Etcd::start(1, 25, 250) {
        Ok(e) => e,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let Some(w) = World::new(Engine::Etcd) else {
        return;
    };
    let port = etcd.members[0].client;
    let call = |path: &str, body: String| {
        let v = support::etcd::post(port, path, &body).unwrap();
        assert!(v.get("error").is_none(), "{path}: {v}");
    };
    call(
        "/v3/auth/user/add",
        r#"{"name":"root","password":"root-pw"}"#.into(),
    );
    call(
        "/v3/auth/user/grant",
        r#"{"user":"root","role":"root"}"#.into(),
    );
    call("/v3/auth/role/add", r#"{"name":"jobs-role"}"#.into());
    call(
        "/v3/auth/role/grant",
        format!(
            r#"{{"name":"jobs-role","perm":{{"permType":"READWRITE","key":"{}","range_end":"{}"}}}}"#,
            b64("jobs/"),
            b64("jobs0")
        ),
    );
    call(
        "/v3/auth/user/add",
        r#"{"name":"jobs","password":"jobs-pw"}"#.into(),
    );
    call(
        "/v3/auth/user/grant",
        r#"{"user":"jobs","role":"jobs-role"}"#.into(),
    );
    call("/v3/auth/enable", "{}".into());
    let url = format!("etcd://jobs@127.0.0.1:{port}/jobs");
    let run = |url: &str, pw: Option<&str>, args: &[&str]| {
        let mut c = w.store_cmd(url, args);
        if let Some(pw) = pw {
            c.env("ETCDCTL_PASSWORD", pw);
        }
        finish(c, HANG)
    };
    run(&url, Some("jobs-pw"), &["run", "job", "--", "true"]).expect(0);
    let pw = w.path("pw");
    std::fs::write(&pw, "jobs-pw\n").unwrap();
    let with_file = format!("{url}?password_file={}", pw.display());
    run(&with_file, None, &["run", "job", "--", "true"]).expect(0);
    let h = run(&with_file, None, &["history", "job", "--json"]);
    assert_eq!(h.expect(0).stdout.lines().count(), 2, "{h:#?}");
    run(&url, Some("jobs-pw"), &["check", "job"])
        .expect(0)
        .prints("ONLYONE OK");
    // Outside its prefix, the role may do nothing.
    let other = format!("etcd://jobs@127.0.0.1:{port}/other");
    run(&other, Some("jobs-pw"), &["run", "job", "--", "true"])
        .expect(125)
        .says("readwrite on the store's prefix");
    // Wrong, missing, or on the command line.
    let out = run(&url, Some("not-the-pw"), &["run", "job", "--", "true"]);
    out.expect(125)
        .says("refused the credentials")
        .says("ETCDCTL_PASSWORD");
    assert!(!out.stderr.contains("not-the-pw"), "{out:#?}");
    run(&url, Some("not-the-pw"), &["precheck", "job"]).expect(0);
    run(&url, None, &["run", "job", "--", "true"])
        .expect(125)
        .says("no password");
    let inline = format!("etcd://jobs:jobs-pw@127.0.0.1:{port}/jobs");
    let out = run(&inline, None, &["run", "job", "--", "true"]);
    out.expect(125).says("jobs:***@").says("password_file");
    assert!(!out.stderr.contains("jobs-pw"), "{out:#?}");
}

/// TLS: a member that speaks TLS only and asks for a client certificate.
/// With the CA and a client certificate a run works; without the
/// certificate, without the CA, or over plain HTTP it is a clear error
/// (125) and `precheck` lets the fire run (0).
#[test]
fn tls_with_a_ca_and_a_client_certificate() {
    let etcd = match Etcd::start_tls() {
        Ok(e) => e,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let Some(w) = World::new(Engine::Etcd) else {
        return;
    };
    let port = etcd.members[0].client;
    let (ca, cert, key) = (
        etcd.tls_file("ca.crt"),
        etcd.tls_file("server.crt"),
        etcd.tls_file("server.key"),
    );
    let good = format!("etcds://localhost:{port}/t?cacert={ca}&cert={cert}&key={key}");
    let run = |url: &str, args: &[&str]| finish(w.store_cmd(url, args), HANG);
    let mut first = None;
    // The member is up once it listens; its first answer may take a moment.
    wait_until("the TLS member's first answer", HANG, || {
        let out = run(&good, &["run", "job", "--", "true"]);
        let ok = out.code() == 0;
        first = Some(out);
        ok
    });
    run(&good, &["history", "job"]).expect(0).prints("exit 0");
    for bad in [
        format!("etcds://localhost:{port}/t?cacert={ca}"),
        format!("etcds://localhost:{port}/t?cert={cert}&key={key}"),
        format!("etcd://localhost:{port}/t"),
    ] {
        run(&bad, &["run", "job", "--", "true"])
            .expect(125)
            .says("the store");
        run(&bad, &["precheck", "job"]).expect(0);
    }
}

/// The history's retention: a lock keeps its newest 1000 events (a few
/// more at most, between two trims), read back oldest first, and another
/// lock's are its own.
#[test]
fn a_lock_keeps_its_newest_thousand_events() {
    let Ok(url) = Etcd::url_of_test() else {
        return eprintln!("skipped: etcd is not installed");
    };
    let store = onlyone::place::store::open(&url, Duration::from_secs(5)).unwrap();
    for i in 0..1300 {
        store
            .append_event("job", &format!("{{\"n\":{i}}}"))
            .unwrap();
    }
    store.append_event("other", "{\"n\":0}").unwrap();
    let events = store.events("job").unwrap();
    assert_eq!(events.len(), 1000);
    assert_eq!(events.last().unwrap(), "{\"n\":1299}");
    assert_eq!(events.first().unwrap(), "{\"n\":300}");
    // What the cluster keeps: the newest and at most a trim's worth more.
    let prefix = url.rsplit_once('/').unwrap().1;
    let port: u16 = url
        .trim_start_matches("etcd://127.0.0.1:")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let from = format!("{prefix}/event/job/");
    let to = format!("{prefix}/event/job0");
    let body = format!(
        r#"{{"key":"{}","range_end":"{}","count_only":true}}"#,
        b64(&from),
        b64(&to)
    );
    let kept: u64 = support::etcd::post(port, "/v3/kv/range", &body).unwrap()["count"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1000..=1100).contains(&kept), "{kept} events kept");
    assert_eq!(store.events("other").unwrap(), ["{\"n\":0}"]);
    let names = store.names().unwrap();
    assert_eq!(names, ["job", "other"]);
}
