//! What the seed's reaper must never do: report a failure for work it
//! ended. A reap whose deadline is shorter than its grace ends the work
//! within the deadline and records it done when idle; with no time left,
//! it starts nothing and leaves the work for the next reap.

use crate::support;

use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(30);

fn verdict_of(report: &serde_json::Value, pid: u32) -> Option<String> {
    report["candidates"]
        .as_array()?
        .iter()
        .find(|c| c["pid"] == pid)
        .and_then(|c| c["verdict"].as_str())
        .map(str::to_owned)
}

/// A run that leaves a process ignoring TERM, lingering idle: its pid and
/// start, once the reaper would end it (`--idle 1s`).
fn lingering_deaf_process(sb: &Sandbox, lock: &str) -> (u32, u64) {
    sb.oo(&[
        "run",
        "-q",
        "--linger",
        lock,
        "--",
        "sh",
        "-c",
        "setsid sh -c \"trap \\\"\\\" TERM; exec sleep 300\" </dev/null >/dev/null 2>&1 &",
    ])
    .expect(0);
    let record = std::fs::read_to_string(sb.lock(lock)).unwrap();
    let linger = record
        .lines()
        .find_map(|l| l.strip_prefix("linger="))
        .unwrap_or_else(|| panic!("nothing lingers:\n{record}"));
    let pid: u32 = linger.split(':').next().unwrap().parse().unwrap();
    let start = start_of(pid);
    sb.oo(&["reap", "--idle", "1s", lock]).expect(0);
    sb.oo(&["reap", "--idle", "1s", lock]).expect(0);
    wait_until("a reap to find it idle for 1s", LIMIT, || {
        let r = sb.oo(&["reap", "--idle", "1s", "--dry-run", "--json", lock]);
        verdict_of(&r.json(), pid).as_deref() == Some("ended")
    });
    (pid, start)
}

/// The commands: a lingering process that ignores TERM, reaped
/// with a deadline (2 s) shorter than the grace (10 s). The deadline caps
/// the grace: TERM, then KILL with time left to see it gone; the reap
/// says so, and the run is recorded done when idle, never failed.
#[test]
fn a_reap_whose_deadline_is_shorter_than_its_grace_ends_the_work_and_records_it() {
    let sb = Sandbox::new("ONLYONE_TEST_AGENT_TERMINAL");
    let (pid, start) = lingering_deaf_process(&sb, "rp");
    let out = sb.oo(&[
        "reap",
        "--idle",
        "1s",
        "--grace",
        "10s",
        "--deadline",
        "2s",
        "rp",
    ]);
    out.expect(0);
    assert!(
        !out.stdout.contains("failed"),
        "it was ended: the reap must not say it failed: {out:#?}"
    );
    out.prints(&format!("ended pid {pid}"))
        .prints("which the deadline cut short");
    assert!(!alive(pid, start), "{out:#?}");
    let runs = sb.history_json("rp");
    assert_eq!(runs[0]["result"], "done-when-idle", "{runs:#?}");
    sb.oo(&["check", "rp"]).expect(0);
}

/// With too little of its deadline left to end anything and see it gone,
/// a reap starts nothing: the process is kept for the next reap, said
/// even with `-q`, and nothing is recorded as failed.
#[test]
fn a_reap_with_no_time_to_end_the_work_leaves_it_for_the_next_reap() {
    let sb = Sandbox::new("ONLYONE_TEST_AGENT_TERMINAL");
    let (pid, start) = lingering_deaf_process(&sb, "rp");
    let out = sb.oo(&["reap", "-q", "--idle", "1s", "--deadline", "300ms", "rp"]);
    out.expect(0);
    out.prints(&format!("kept pid {pid}"))
        .prints("left for the next reap")
        .prints("--deadline");
    assert!(!out.stdout.contains("failed"), "{out:#?}");
    assert!(alive(pid, start), "it was left alone: {out:#?}");
    sb.oo(&["check", "rp"]).expect(0);
    assert_eq!(sb.history_json("rp")[0]["result"], "running");
    let out = sb.oo(&["reap", "-q", "--idle", "1s", "--grace", "1s", "rp"]);
    out.expect(0).prints(&format!("ended pid {pid}"));
    assert!(!alive(pid, start));
    assert_eq!(sb.history_json("rp")[0]["result"], "done-when-idle");
}
