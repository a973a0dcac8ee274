//! Pings (`run --ping`, `$ONLYONE_PING`, `acquire --ping`, `precheck
//! --ping`): the healthchecks.io protocol against a local server
//! (support::hc) that records what it got and can be slow, answer 5xx,
//! or be a closed port. One run id for the start, the end, the journal and
//! the command's `ONLYONE_RUN_ID`; a skip is a `/log`, never a `/fail`;
//! pings fail open, are bounded, and come after the lock is released.

use crate::support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::hc::PingServer;
use support::*;

const LIMIT: Duration = Duration::from_secs(60);

fn oo(sb: &Sandbox, args: &[&str]) -> Out {
    let mut c = sb.program(BIN);
    c.env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(args);
    finish(c, LIMIT)
}

/// The journal's events of `lock`.
fn events(sb: &Sandbox, lock: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(sb.journal_of(&sb.lock(lock))).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && s.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit())
}

/// Start and end carry one rid, which is the command's ONLYONE_RUN_ID and
/// the journal's; the end is the command's exit code (3, then 0).
#[test]
fn start_and_end_carry_one_run_id_and_the_exit_code() {
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let seen = sb.path("rid");
    let script = format!("echo \"$ONLYONE_RUN_ID\" > '{}'; exit 3", seen.display());
    let url = hc.url("check");
    oo(
        &sb,
        &["run", "--ping", &url, "job", "--", "sh", "-c", &script],
    )
    .expect(3)
    .quiet();
    let rid = std::fs::read_to_string(&seen).unwrap().trim().to_owned();
    assert!(is_uuid(&rid), "ONLYONE_RUN_ID is a UUID: {rid:?}");
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "3"], "{reqs:?}");
    for r in &reqs {
        assert_eq!(r.method, "POST", "{r:?}");
        assert_eq!(r.path().rsplit_once('/').unwrap().0, "/check", "{r:?}");
        assert_eq!(r.query("rid").as_deref(), Some(rid.as_str()), "{r:?}");
    }
    let evs = events(&sb, "job");
    for kind in ["start", "end"] {
        let ev = evs.iter().find(|e| e["event"] == kind).unwrap();
        assert_eq!(ev["rid"], rid.as_str(), "{kind} carries the rid: {evs:?}");
    }

    // $ONLYONE_PING names the check too; a success is /0, with a new rid.
    let mut c = sb.program(BIN);
    c.env("ONLYONE_PING", hc.url("other"))
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "job", "--", "true"]);
    finish(c, LIMIT).expect(0).quiet();
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "3", "start", "0"], "{reqs:?}");
    assert_eq!(reqs[3].path(), "/other/0");
    assert_eq!(reqs[2].query("rid"), reqs[3].query("rid"));
    assert_ne!(reqs[2].query("rid").as_deref(), Some(rid.as_str()));
}

/// A command killed by a signal has no exit code: /fail.
#[test]
fn a_signal_end_is_a_fail() {
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("c");
    let out = oo(
        &sb,
        &[
            "run",
            "--ping",
            &url,
            "job",
            "--",
            "sh",
            "-c",
            "kill -KILL $$",
        ],
    );
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(hc.whats(), ["start", "fail"], "{:?}", hc.requests());
}

/// A skip is a /log with who holds the lock, never a /fail (nor a start).
#[test]
fn a_skip_is_a_log_never_a_fail() {
    let mut sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("c");
    let mut holder = sb.program(BIN);
    holder
        .env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "job", "--", "sleep", "1000"]);
    let pid = sb.keep(holder);
    wait_until("the holder runs", LIMIT, || {
        oo(&sb, &["precheck", "-q", "job"]).code() == 75
    });
    oo(&sb, &["run", "-q", "--ping", &url, "job", "--", "true"])
        .expect(75)
        .quiet();
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["log"], "{reqs:?}");
    let body = String::from_utf8_lossy(&reqs[0].body);
    assert!(
        body.contains(&format!("pid {pid}")),
        "says who holds it: {body:?}"
    );
    assert!(reqs[0].query("rid").is_some_and(|r| is_uuid(&r)));

    // precheck's skip too.
    oo(&sb, &["precheck", "-q", "--ping", &url, "job"]).expect(75);
    assert_eq!(hc.whats(), ["log", "log"], "{:?}", hc.requests());

    // A fire skipped because one is already queued is a skip too, saying
    // so; the queued one has pinged nothing yet.
    let mut queued = sb.program(BIN);
    queued
        .env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "--queue", "job", "--", "true"]);
    let waiter = sb.keep(queued);
    wait_until("the queued fire waits", LIMIT, || {
        oo(&sb, &["status", "--json", "job"]).json()["locks"][0]["waiters"][0]["pid"] == waiter
    });
    oo(
        &sb,
        &["run", "-q", "--queue", "--ping", &url, "job", "--", "true"],
    )
    .expect(75)
    .quiet();
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["log", "log", "log"], "{reqs:?}");
    let body = String::from_utf8_lossy(&reqs[2].body);
    assert!(
        body.contains("one already queued") && body.contains(&format!("pid {waiter}")),
        "says who waits: {body:?}"
    );

    // A free lock's precheck pings nothing (the fire's run will).
    sb.end_processes();
    oo(&sb, &["precheck", "-q", "--ping", &url, "job"]).expect(0);
    assert_eq!(hc.whats(), ["log", "log", "log"], "{:?}", hc.requests());
}

/// A server that answers 503 twice gets the ping a third time; the run is
/// unchanged and nothing is said (it got through).
#[test]
fn pings_are_retried_after_5xx() {
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    hc.behaviour.lock().unwrap().errors = 2;
    let url = hc.url("c");
    oo(&sb, &["run", "--ping", &url, "job", "--", "true"])
        .expect(0)
        .quiet();
    assert_eq!(
        hc.whats(),
        ["start", "start", "start", "0"],
        "{:?}",
        hc.requests()
    );
}

/// A server that takes 30 s to answer: the command starts within the start
/// ping's bound, the run keeps its exit code, onlyone is done well before
/// the server would be, and the lock is free for the next fire as soon as
/// the end ping is on its way. The failure is said once.
#[test]
fn a_slow_server_is_bounded_and_the_lock_is_free_first() {
    let mut sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    hc.behaviour.lock().unwrap().slow = Some(Duration::from_secs(30));
    let url = hc.url("c");
    let started = Instant::now();
    let mut c = sb.program(BIN);
    c.env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "--ping", &url, "job", "--", "sh", "-c", "exit 3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut first = c.spawn().unwrap();
    wait_until("the end ping is sent", LIMIT, || {
        hc.whats().iter().any(|w| w == "3")
    });
    // The end ping is pending: the next fire takes the lock at once.
    oo(&sb, &["run", "job", "--", "true"]).expect(0).quiet();
    let (status, _, stderr) = wait_bounded(&mut first, started, LIMIT, "the first run");
    let took = started.elapsed();
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(took < Duration::from_secs(20), "bounded: took {took:?}");
    assert_eq!(stderr.lines().count(), 1, "said once: {stderr:?}");
    assert!(stderr.contains("ping to http://127.0.0.1:"), "{stderr:?}");
    assert!(hc.whats().iter().filter(|w| *w == "start").count() == 1);
    sb.kids.clear();
}

/// A closed port: the run keeps its own exit code, one line on stderr
/// (none with -q); a URL's secrets (userinfo, the path's key) are never
/// printed.
#[test]
fn a_closed_port_fails_open_and_masks_the_url() {
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://user:hunter2@127.0.0.1:{port}/KEY123/slug");
    let out = oo(
        &sb,
        &["run", "--ping", &url, "job", "--", "sh", "-c", "exit 3"],
    );
    out.expect(3).within(Duration::from_secs(20));
    assert_eq!(out.stderr.lines().count(), 1, "said once: {out:?}");
    assert!(out.stderr.contains("127.0.0.1"), "{out:?}");
    for secret in ["hunter2", "KEY123", "slug", "user"] {
        assert!(!out.stderr.contains(secret), "masked: {out:?}");
    }
    oo(
        &sb,
        &[
            "run", "-q", "--ping", &url, "job", "--", "sh", "-c", "exit 3",
        ],
    )
    .expect(3)
    .quiet();
}

/// A URL that is not one is refused before anything runs, naming the flag
/// and never showing its secrets.
#[test]
fn a_bad_ping_url_is_refused() {
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let ran = sb.path("ran");
    let touch = format!("touch '{}'", ran.display());
    for bad in ["notaurl", "ftp://user:hunter2@host/x"] {
        let out = oo(
            &sb,
            &["run", "--ping", bad, "job", "--", "sh", "-c", &touch],
        );
        assert_ne!(out.status.code(), Some(0), "{out:?}");
        out.says("--ping");
        assert!(!out.stderr.contains("hunter2"), "{out:?}");
        assert!(!ran.exists(), "the command did not run");
    }
}

/// Without --ping nothing is pinged and no thread is started: onlyone has
/// one thread while the command runs; the command still has its run id.
#[test]
fn no_ping_no_client() {
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let out = oo(
        &sb,
        &[
            "run",
            "job",
            "--",
            "sh",
            "-c",
            "ls /proc/$PPID/task | wc -l; echo \"$ONLYONE_RUN_ID\"",
        ],
    );
    out.expect(0);
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next().map(str::trim), Some("1"), "{out:?}");
    assert!(lines.next().is_some_and(is_uuid), "{out:?}");
}

/// A script: `acquire --export --ping` pings the start and hands the run
/// id and the URL to the script, `release --exit CODE` pings the end with
/// the same rid (the lock released first); a release without --exit is a
/// /log; a skip at acquire is a /log.
#[test]
fn a_scripts_acquire_and_release_ping_start_and_end() {
    let mut sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("s");
    let dir = sb.dir().to_str().unwrap().to_owned();
    let seen = sb.path("rid");
    let script = format!(
        "vars=$('{BIN}' --dir '{dir}' acquire job --export --ping '{url}') || exit; \
         eval \"$vars\"; echo \"$ONLYONE_RUN_ID\" > '{seen}'; \
         '{BIN}' --dir '{dir}' precheck -q job; echo held=$?; \
         '{BIN}' --dir '{dir}' release job --exit 4",
        seen = seen.display()
    );
    let mut c = sb.program("sh");
    c.env_remove("ONLYONE_PING").args(["-c", &script]);
    finish(c, LIMIT).expect(0).prints("held=75");
    let rid = std::fs::read_to_string(&seen).unwrap().trim().to_owned();
    assert!(is_uuid(&rid), "{rid:?}");
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "4"], "{reqs:?}");
    assert!(
        reqs.iter()
            .all(|r| r.query("rid").as_deref() == Some(&*rid)),
        "{reqs:?}"
    );
    // The lock was free when the end ping went out.
    oo(&sb, &["precheck", "-q", "job"]).expect(0);

    // Without --export, the release is given the URL; without --exit the
    // end is unknown: a /log.
    let script = format!(
        "'{BIN}' --dir '{dir}' acquire -q job --ping '{url}' || exit; \
         '{BIN}' --dir '{dir}' release job --ping '{url}'"
    );
    let mut c = sb.program("sh");
    c.env_remove("ONLYONE_PING").args(["-c", &script]);
    finish(c, LIMIT).expect(0);
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "4", "start", "log"], "{reqs:?}");
    assert_eq!(reqs[2].query("rid"), reqs[3].query("rid"));

    // A skip at acquire.
    let mut holder = sb.program(BIN);
    holder
        .env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "job", "--", "sleep", "1000"]);
    sb.keep(holder);
    wait_until("the holder runs", LIMIT, || {
        oo(&sb, &["precheck", "-q", "job"]).code() == 75
    });
    oo(&sb, &["acquire", "-q", "job", "--ping", &url]).expect(75);
    assert_eq!(hc.whats(), ["start", "4", "start", "log", "log"]);
}

/// A run whose wrapper was killed never said its end: the fire that takes
/// the lock over pings its /fail (with that run's rid) before its own start.
#[test]
fn an_abandoned_run_is_a_fail_at_the_takeover() {
    let mut sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("c");
    let mut first = sb.program(BIN);
    first
        .env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "--ping", &url, "job", "--", "sleep", "1000"]);
    let wrapper = sb.keep(first);
    wait_until("the start ping", LIMIT, || hc.whats() == ["start"]);
    // The start ping may come before the command is exec'd: a command
    // killed while it is being exec'd is not yet known by its mark.
    wait_until("the command runs", LIMIT, || {
        sb.marked().into_iter().any(|p| {
            p != wrapper
                && std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c == "sleep\n")
        })
    });
    kill9_pid(wrapper);
    sb.end_processes();
    oo(&sb, &["run", "-q", "--ping", &url, "job", "--", "true"]).expect(0);
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "fail", "start", "0"], "{reqs:?}");
    assert_eq!(reqs[0].query("rid"), reqs[1].query("rid"), "the old run's");
    assert_ne!(reqs[1].query("rid"), reqs[2].query("rid"));
    assert!(String::from_utf8_lossy(&reqs[1].body).starts_with("abandoned: "));
}

/// The end ping's body is the tail of what the run printed, within the
/// server's Ping-Body-Limit (the start ping's answer), with a notice of
/// what was cut; the output still reaches the run's own stdout and stderr
/// whole and in order (one file for both here: `>log 2>&1`).
#[test]
fn the_end_ping_carries_the_tail_within_the_limit() {
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    hc.behaviour.lock().unwrap().body_limit = Some(1000);
    let url = hc.url("c");
    let log = sb.path("log");
    let file = std::fs::File::create(&log).unwrap();
    let script =
        "i=0; while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); done; echo last >&2; exit 3";
    let mut c = sb.program(BIN);
    c.env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "--ping", &url, "job", "--", "sh", "-c", script])
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    let mut child = c.spawn().unwrap();
    let started = Instant::now();
    wait_until("the run ends", LIMIT, || {
        child.try_wait().unwrap().is_some()
    });
    assert_eq!(child.wait().unwrap().code(), Some(3));
    assert!(started.elapsed() < LIMIT);
    let mut expected: String = (0..3000).map(|i| format!("line{i}\n")).collect();
    expected.push_str("last\n");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        expected,
        "the output flows whole"
    );
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "3"], "{reqs:?}");
    assert!(reqs[0].body.is_empty());
    let body = String::from_utf8_lossy(&reqs[1].body).into_owned();
    assert!(body.len() <= 1000, "within the limit: {}", body.len());
    assert!(body.len() > 900, "the limit is used: {}", body.len());
    assert!(body.starts_with("[onlyone: the output's first "), "{body}");
    assert!(body.ends_with("line2999\nlast\n"), "{body}");

    // Without the header: 10,000 bytes; a short output is whole.
    hc.behaviour.lock().unwrap().body_limit = None;
    let out = oo(
        &sb,
        &["run", "--ping", &url, "job", "--", "sh", "-c", script],
    );
    out.expect(3).says("last");
    assert!(out.stdout.starts_with("line0\n") && out.stdout.ends_with("line2999\n"));
    let body = hc.requests()[3].body.clone();
    assert!(body.len() <= 10_000 && body.len() > 9_000, "{}", body.len());
    oo(&sb, &["run", "--ping", &url, "job", "--", "echo", "short"])
        .expect(0)
        .prints("short");
    assert_eq!(hc.requests()[5].body, b"short\n");
}

/// A command on a terminal still sees its terminal: nothing is captured,
/// and the end ping has no body.
#[test]
fn a_command_on_a_terminal_keeps_it_and_sends_no_tail() {
    use nix::fcntl::OFlag;
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
    use std::os::unix::fs::OpenOptionsExt;
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("c");
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(ptsname_r(&master).unwrap())
        .unwrap();
    let seen = sb.path("seen");
    let script = format!(
        "t=notty; [ -t 1 ] && [ -t 2 ] && t=tty; echo $t > '{}'; echo hello",
        seen.display()
    );
    let mut c = sb.program(BIN);
    c.env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "--ping", &url, "job", "--", "sh", "-c", &script])
        .stdout(slave.try_clone().unwrap())
        .stderr(slave);
    let mut child = c.spawn().unwrap();
    drop(c);
    wait_until("the run ends", LIMIT, || {
        child.try_wait().unwrap().is_some()
    });
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "tty\n");
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "0"], "{reqs:?}");
    assert!(reqs[1].body.is_empty(), "{reqs:?}");
    drop(master);
}

/// `sentry+https://` (here `sentry+http://`, to the local server) speaks
/// Sentry's cron check-ins: `in_progress`, then `ok` or `error` with the
/// duration, the run id as `check_in_id`; a skip sends no check-in.
#[test]
fn sentry_check_ins_with_the_run_id() {
    let mut sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = format!("sentry+{}", hc.url("api/7/cron/nightly/KEY/"));
    let seen = sb.path("rid");
    let script = format!("echo \"$ONLYONE_RUN_ID\" > '{}'", seen.display());
    oo(
        &sb,
        &["run", "--ping", &url, "job", "--", "sh", "-c", &script],
    )
    .expect(0)
    .quiet();
    oo(
        &sb,
        &["run", "--ping", &url, "job", "--", "sh", "-c", "exit 3"],
    )
    .expect(3);
    let rid = std::fs::read_to_string(&seen).unwrap().trim().to_owned();
    let reqs = hc.requests();
    let statuses: Vec<String> = reqs.iter().filter_map(|r| r.query("status")).collect();
    assert_eq!(
        statuses,
        ["in_progress", "ok", "in_progress", "error"],
        "{reqs:?}"
    );
    for r in &reqs {
        assert_eq!(r.method, "GET", "{r:?}");
        assert_eq!(r.path(), "/api/7/cron/nightly/KEY/", "{r:?}");
    }
    assert_eq!(reqs[0].query("check_in_id").as_deref(), Some(&*rid));
    assert_eq!(reqs[1].query("check_in_id").as_deref(), Some(&*rid));
    assert_ne!(reqs[2].query("check_in_id"), reqs[0].query("check_in_id"));
    let took: f64 = reqs[1].query("duration").unwrap().parse().unwrap();
    assert!((0.0..30.0).contains(&took), "{took}");
    assert!(reqs[0].query("duration").is_none());

    let mut holder = sb.program(BIN);
    holder
        .env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "job", "--", "sleep", "1000"]);
    sb.keep(holder);
    wait_until("the holder runs", LIMIT, || {
        oo(&sb, &["precheck", "-q", "job"]).code() == 75
    });
    oo(&sb, &["run", "-q", "--ping", &url, "job", "--", "true"]).expect(75);
    assert_eq!(hc.requests().len(), 4, "no check-in for a skip");
}

/// The same pings with the PostgreSQL store: start and end with one rid
/// (the command's ONLYONE_RUN_ID), a skip as a /log saying who holds the
/// lease, never a /fail.
#[test]
fn pings_with_the_store() {
    let pg = match support::pg::Db::new() {
        Ok(pg) => pg,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let mut sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("c");
    let store = |sb: &Sandbox, args: &[&str]| {
        let mut c = sb.program(BIN);
        c.env_remove("ONLYONE_PING")
            .env_remove("ONLYONE_STORE")
            .arg("--store")
            .arg(pg.url())
            .args(args);
        c
    };
    let seen = sb.path("rid");
    let script = format!("echo \"$ONLYONE_RUN_ID\" > '{}'; exit 3", seen.display());
    let c = store(
        &sb,
        &["run", "--ping", &url, "job", "--", "sh", "-c", &script],
    );
    finish(c, LIMIT).expect(3);
    let rid = std::fs::read_to_string(&seen).unwrap().trim().to_owned();
    assert!(is_uuid(&rid), "{rid:?}");
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "3"], "{reqs:?}");
    assert!(
        reqs.iter()
            .all(|r| r.query("rid").as_deref() == Some(&*rid)),
        "{reqs:?}"
    );

    let ready = sb.path("ready");
    let hold = format!("touch '{}'; sleep 1000", ready.display());
    let holder = store(&sb, &["run", "job", "--", "sh", "-c", &hold]);
    sb.keep(holder);
    wait_until("the holder runs", LIMIT, || ready.exists());
    let c = store(&sb, &["run", "-q", "--ping", &url, "job", "--", "true"]);
    finish(c, LIMIT).expect(75);
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "3", "log"], "{reqs:?}");
    assert!(String::from_utf8_lossy(&reqs[2].body).contains("holds the lease"));
}

/// `run --deadline` is a budget for what comes before the command starts:
/// a run that outlasts it still pings its end.
#[test]
fn runs_deadline_never_drops_the_end_ping() {
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("c");
    let args = [
        "run",
        "--deadline",
        "1s",
        "--ping",
        &url,
        "job",
        "--",
        "sleep",
        "1.5",
    ];
    oo(&sb, &args).expect(0).quiet();
    assert_eq!(hc.whats(), ["start", "0"], "{:?}", hc.requests());
}

/// What `seq -f %07g 1 N` prints, as the item-9 tests' commands print
/// it: N numbered lines of 8 bytes, so that a byte lost or out of order
/// shows.
fn numbered_lines(n: u32) -> Vec<u8> {
    (1..=n)
        .flat_map(|i| format!("{i:07}\n").into_bytes())
        .collect()
}

/// The command that prints [`numbered_lines`]`(15_000)`: 120,000 bytes.
const PRINT_LINES: &str = "seq -f %07g 1 15000";

/// Issue 34, item 9: a reader that lags (it reads one byte, then sleeps
/// 3 s before it reads the rest) gets every byte of the output, in order,
/// with --ping as without it; the end ping's tail ends with the last line.
#[test]
fn a_lagging_reader_gets_all_the_output_with_and_without_ping() {
    if !have_python3() {
        return;
    }
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("c");
    let reader = "import sys, time\n\
                  b = sys.stdin.buffer\n\
                  first = b.read(1)\n\
                  time.sleep(3)\n\
                  sys.stdout.buffer.write(first + b.read())\n";
    let dir = sb.dir().display().to_string();
    let outs: Vec<(String, Out)> = std::thread::scope(|s| {
        let runs: Vec<_> = [
            ("plain", String::new()),
            ("pinged", format!("--ping '{url}'")),
        ]
        .into_iter()
        .map(|(lock, ping)| {
            let got = sb.path(lock).display().to_string();
            let script = format!(
                "'{BIN}' --dir '{dir}' run {ping} {lock} -- {PRINT_LINES} \
                     | python3 -c \"$READER\" > '{got}'"
            );
            let mut c = sb.program("sh");
            c.env_remove("ONLYONE_PING")
                .env("READER", reader)
                .args(["-c", &script]);
            s.spawn(move || (got, finish(c, LIMIT)))
        })
        .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let expected = numbered_lines(15_000);
    assert_eq!(expected.len(), 120_000);
    for (got, out) in &outs {
        out.expect(0).quiet();
        let got_bytes = std::fs::read(got).unwrap();
        assert!(
            got_bytes == expected,
            "{got}: {} of {} bytes arrived, in order: {}",
            got_bytes.len(),
            expected.len(),
            expected.starts_with(&got_bytes)
        );
    }
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "0"], "{reqs:?}");
    assert!(
        reqs[1].body.ends_with(b"0014999\n0015000\n"),
        "the tail is whole: {:?}",
        String::from_utf8_lossy(&reqs[1].body)
    );
}

/// Item 9, a reader that stops reading (10,000 bytes, then nothing until
/// the run is over; the command's 120,000 bytes fit in the pipes and the
/// relay, so it ends): the lock is free and the end ping sent, its tail
/// whole, while onlyone still holds output the reader has not taken;
/// onlyone waits for it, as the command would have waited on its own
/// writes, and the reader then gets every byte in order. The exit code is
/// the command's.
#[test]
fn a_reader_that_stops_reading_holds_neither_the_lock_nor_the_end_ping() {
    use std::io::Read;
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("c");
    let mut c = sb.program(BIN);
    c.env_remove("ONLYONE_PING")
        .arg("--dir")
        .arg(sb.dir())
        .args(["run", "--ping", &url, "job", "--", "sh", "-c"])
        .arg(format!("{PRINT_LINES}; exit 3"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut run = Kid::new(c.spawn().unwrap());
    let mut out = run.stdout.take().unwrap();
    let mut got = vec![0u8; 10_000];
    out.read_exact(&mut got).unwrap();
    wait_until("the end ping", LIMIT, || {
        hc.whats().iter().any(|w| w == "3")
    });
    oo(&sb, &["precheck", "-q", "job"]).expect(0);
    oo(&sb, &["run", "job", "--", "true"]).expect(0).quiet();
    assert!(
        run.try_wait().unwrap().is_none(),
        "onlyone still holds output its reader has not read"
    );
    let body = hc.requests()[1].body.clone();
    assert!(
        body.ends_with(b"0014999\n0015000\n"),
        "the tail is whole: {:?}",
        String::from_utf8_lossy(&body)
    );
    out.read_to_end(&mut got).unwrap();
    let expected = numbered_lines(15_000);
    assert!(
        got == expected,
        "{} of {} bytes arrived, in order: {}",
        got.len(),
        expected.len(),
        expected.starts_with(&got)
    );
    let mut status = None;
    wait_until("onlyone exits", LIMIT, || {
        status = run.try_wait().unwrap();
        status.is_some()
    });
    assert_eq!(status.unwrap().code(), Some(3));
}

/// Item 9, a reader that is gone: onlyone is not held (the copy to the
/// tail goes on, the command is not stopped by SIGPIPE), it keeps the
/// command's exit code, and the end ping has the whole tail.
#[test]
fn a_reader_that_is_gone_holds_nothing() {
    let sb = Sandbox::new("ONLYONE_PINGS_MARK");
    let hc = PingServer::start();
    let url = hc.url("c");
    let dir = sb.dir().display().to_string();
    let script = format!(
        "'{BIN}' --dir '{dir}' run --ping '{url}' job -- sh -c '{PRINT_LINES}; exit 3' \
         | head -c 10 >/dev/null"
    );
    // pipefail: the pipeline's status is onlyone's.
    let mut c = sb.program("bash");
    c.env_remove("ONLYONE_PING")
        .args(["-c", &format!("set -o pipefail; {script}")]);
    let out = finish(c, LIMIT);
    out.expect(3).within(Duration::from_secs(20));
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "3"], "{reqs:?}");
    assert!(reqs[1].body.ends_with(b"0014999\n0015000\n"));
}
