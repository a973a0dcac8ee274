//! Schedules: `--schedule` kept in the journal, slots missed (recorded
//! once by a fire, named by `check`, counted by `metrics`, shown by
//! `history`), `run --catch-up`, and the waits of `--spread` and
//! `--jitter`. Hand-written events set up what would take hours (a last
//! run three hours ago); every command runs with TZ=UTC, and the slots
//! expected are computed from the clock around the command, never
//! assumed.

use crate::support;

use std::process::Command;
use std::time::Duration;

use onlyone::LockFile;
use onlyone::journal::{Event, EventKind, Journal};
use onlyone::names::StateSource;
use onlyone::state::StateDir;
use serde_json::Value;
use support::*;

const HANG: Duration = Duration::from_secs(30);

struct World {
    sb: Sandbox,
}

derefs_to_sandbox!(World);

impl World {
    fn new() -> World {
        World {
            sb: Sandbox::new("ONLYONE_SCHEDULE_MARK"),
        }
    }

    /// `onlyone --dir DIR ARGS`, in UTC, without a schedule from the
    /// environment.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.oo_cmd();
        c.env("TZ", "UTC").env_remove("ONLYONE_SCHEDULE").args(args);
        c
    }

    /// [`World::cmd`], run to its end.
    fn oo_utc(&self, args: &[&str]) -> Out {
        finish(self.cmd(args), HANG)
    }

    fn journal(&self, name: &str) -> Journal {
        let lock = LockFile::open(self.lock(name)).unwrap();
        Journal::of(&lock, &StateDir::at(self.state_dir(), StateSource::Env))
    }

    /// A finished run, started `ago` seconds ago, lasting a second,
    /// exiting 0.
    fn past_run(&self, lock: &str, ago: f64) {
        let token = onlyone::new_token();
        let mut start = Event::now(EventKind::Start);
        start.token = Some(token.clone());
        start.time -= ago;
        start.pid = Some(4242);
        let mut end = start.clone();
        end.event = EventKind::End;
        end.time += 1.0;
        end.exit = Some(0);
        end.duration = Some(1.0);
        let j = self.journal(lock);
        j.append(&start).unwrap();
        j.append(&end).unwrap();
    }

    /// The journal's lines of events of `kind`.
    fn events(&self, lock: &str, kind: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.journal_of(&self.lock(lock))).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == kind)
            .collect()
    }
}

/// Now, Unix seconds.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The hour (UTC) that began at or before `t`, as `check` names it.
fn hour_of(t: i64) -> String {
    let h = t.div_euclid(3600).rem_euclid(24);
    format!("{h:02}:00")
}

/// A journal whose last run is three hours old misses the hourly slots
/// since: `check --schedule '0 * * * *'` is CRITICAL naming the last
/// missed slot; once a run succeeds after it, OK.
#[test]
fn check_names_the_missed_slot_and_is_ok_after_a_later_success() {
    let w = World::new();
    w.past_run("j", 3.0 * 3600.0);
    let before = now();
    let out = w.oo_utc(&["check", "j", "--schedule", "0 * * * *", "--late", "0s"]);
    let after = now();
    out.expect(2).prints("ONLYONE CRITICAL - j: missed ");
    assert!(
        out.stdout.contains(&format!("to the {} ", hour_of(before)))
            || out.stdout.contains(&format!("to the {} ", hour_of(after))),
        "the last missed slot is named: {out:?}"
    );
    assert!(out.stdout.contains("(last run 3h"), "{out:?}");
    // Without --late, the default grace (five minutes): still CRITICAL,
    // two or more hourly slots passed.
    w.oo_utc(&["check", "j", "--schedule", "0 * * * *"])
        .expect(2)
        .prints("missed ");
    // A success after the last slot: OK.
    w.past_run("j", 2.0);
    w.oo_utc(&["check", "j", "--schedule", "0 * * * *", "--late", "0s"])
        .expect(0)
        .prints("ONLYONE OK - j: last run exit 0");
}

/// A fire records the slots it finds missed in one `missed` event, once:
/// the next fire finds none. The schedule is kept, so `check`, `metrics`
/// and `history` know it without being told.
#[test]
fn a_fire_records_the_missed_slots_once_and_the_schedule_is_kept() {
    let w = World::new();
    w.past_run("j", 3.0 * 3600.0);
    w.oo_utc(&["run", "--schedule", "0 * * * *", "j", "--", "true"])
        .expect(0);
    w.oo_utc(&["run", "--schedule", "0 * * * *", "j", "--", "true"])
        .expect(0);
    let missed = w.events("j", "missed");
    assert_eq!(missed.len(), 1, "{missed:?}");
    let count = missed[0]["count"].as_u64().unwrap();
    assert!((2..=3).contains(&count), "{missed:?}");
    assert_eq!(missed[0]["schedule"], "CRON_TZ=UTC 0 * * * *");
    let schedules = w.events("j", "schedule");
    assert_eq!(schedules.len(), 1, "written once: {schedules:?}");
    // Known without --schedule.
    let metrics = w.oo_utc(&["metrics", "j"]);
    metrics
        .expect(0)
        .prints(&format!("onlyone_missed_total{{lock=\"j\"}} {count}"));
    let next = (now() / 3600 + 1) * 3600;
    assert!(
        metrics.stdout.contains(&format!(
            "onlyone_next_fire_timestamp_seconds{{lock=\"j\"}} {next}"
        )) || metrics.stdout.contains(&format!(
            "onlyone_next_fire_timestamp_seconds{{lock=\"j\"}} {}",
            next - 3600
        )),
        "{metrics:?}"
    );
    let rows = w.history_json("j");
    let row = rows
        .iter()
        .find(|r| r["outcome"] == "missed")
        .expect("a row of the missed slots");
    assert_eq!(row["missed_count"].as_u64(), Some(count));
    let text = w.oo_utc(&["history", "j"]);
    text.expect(0)
        .prints(&format!("{count} fire(s) missed"))
        .prints(&format!("missed {count} fires"));
    // The fire came after the missed slots: the check is OK.
    w.oo_utc(&["check", "j"]).expect(0);
}

/// A precheck given the schedule by `$ONLYONE_SCHEDULE` records the
/// slots missed; the run that follows it finds none left to record, and
/// `status` shows the next fire of the schedule kept.
#[test]
fn a_precheck_records_the_missed_slots_and_the_run_after_it_does_not() {
    let w = World::new();
    w.past_run("j", 3.0 * 3600.0);
    for args in [&["precheck", "j"][..], &["run", "j", "--", "true"]] {
        let mut c = w.cmd(args);
        c.env("ONLYONE_SCHEDULE", "every 1h");
        finish(c, HANG).expect(0);
    }
    let missed = w.events("j", "missed");
    assert_eq!(missed.len(), 1, "{missed:?}");
    assert_eq!(missed[0]["schedule"], "every 1h");
    w.oo_utc(&["status", "j"])
        .expect(0)
        .prints("[next fire in ");
    let json = w.oo_utc(&["status", "--json", "j"]).json();
    assert_eq!(json["locks"][0]["schedule"]["spec"], "every 1h", "{json}");
}

/// `run --catch-up` runs once for the slots missed, then not again; a
/// catch-up with nothing missed exits 0 without running.
#[test]
fn catch_up_runs_once_then_not_again() {
    let w = World::new();
    w.past_run("j", 3.0 * 3600.0);
    let mark = w.path("ran");
    let script = format!("echo x >> '{}'", mark.display());
    let fire = || {
        w.oo_utc(&[
            "run",
            "--catch-up",
            "--schedule",
            "0 * * * *",
            "j",
            "--",
            "sh",
            "-c",
            &script,
        ])
    };
    fire().expect(0);
    let ran = || {
        std::fs::read_to_string(&mark)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!(ran(), 1);
    fire().expect(0).says("nothing to catch up for `j`");
    fire().expect(0);
    assert_eq!(ran(), 1, "a catch-up runs once");
    // The schedule kept serves the next catch-up without --schedule.
    w.oo_utc(&["run", "--catch-up", "j", "--", "sh", "-c", &script])
        .expect(0)
        .says("nothing to catch up");
    assert_eq!(ran(), 1);
}

/// `--catch-up` with no schedule given or kept is refused, naming it.
#[test]
fn catch_up_without_a_schedule_is_refused() {
    let w = World::new();
    w.oo_utc(&["run", "--catch-up", "j", "--", "true"])
        .expect(125)
        .says("--catch-up needs a schedule");
}

/// A spec that is not a schedule is refused, naming it and the fix, as
/// each command fails: run 125, precheck 0 (fail open), check UNKNOWN.
#[test]
fn a_bad_schedule_names_the_spec_and_the_fix() {
    let w = World::new();
    let bad = "0 0 31 4 *";
    w.oo_utc(&["run", "--schedule", bad, "j", "--", "true"])
        .expect(125)
        .says("`0 0 31 4 *` never fires");
    w.oo_utc(&["precheck", "--schedule", bad, "j"]).expect(0);
    w.oo_utc(&["check", "--schedule", "@reboot", "j"])
        .expect(3)
        .says("`@reboot` is not a schedule");
    let mut c = w.cmd(&["run", "j", "--", "true"]);
    c.env("ONLYONE_SCHEDULE", "every 0s");
    finish(c, HANG).expect(125).says("every 0s");
}

/// With a store, the schedule's options are refused, not ignored.
#[test]
fn the_schedule_options_are_refused_with_a_store() {
    let w = World::new();
    for args in [
        &["run", "--schedule", "@daily", "j", "--", "true"][..],
        &["run", "--spread", "1m", "j", "--", "true"],
    ] {
        let mut c = w.program(BIN);
        c.env("TZ", "UTC")
            .args(["--store", "postgres://nowhere.invalid/x"])
            .args(args);
        finish(c, HANG)
            .expect(125)
            .says("is not supported with --store yet");
    }
}

/// The wait of one fire, from its `delay` event: seconds (0 when it did
/// not wait).
fn waits(w: &World, lock: &str) -> Vec<f64> {
    w.events(lock, "delay")
        .iter()
        .map(|e| e["until"].as_f64().unwrap() - e["time"].as_f64().unwrap())
        .collect()
}

/// `--spread 2s` waits the same offset at every fire of a lock, and
/// another for another lock (each wait as its `delay` event records it).
#[test]
fn spread_is_the_same_at_every_fire_of_a_lock_and_differs_between_locks() {
    let w = World::new();
    for lock in ["a", "a", "b"] {
        w.oo_utc(&["run", "--spread", "2s", lock, "--", "true"])
            .expect(0);
    }
    let (a, b) = (waits(&w, "a"), waits(&w, "b"));
    // An offset of 0 (one chance in 2000) writes no event.
    let a0 = a.first().copied().unwrap_or(0.0);
    let b0 = b.first().copied().unwrap_or(0.0);
    assert!(a.len() == 2 || a.is_empty(), "{a:?}");
    assert!(a.iter().all(|x| (x - a0).abs() < 0.002), "{a:?}");
    assert!((a0 - b0).abs() >= 0.001, "{a:?} {b:?}");
    assert!((0.0..2.0).contains(&a0) && (0.0..2.0).contains(&b0));
}

/// A `--jitter` wait is shown by `status` ("starting in"), and TERM ends
/// it: the command never runs, onlyone ends by TERM, and `status` shows
/// no wait any more.
#[test]
fn jitter_ends_on_term() {
    use std::os::unix::process::ExitStatusExt;
    let mut w = World::new();
    let mark = w.path("ran");
    let mut c = w.cmd(&["run", "--jitter", "1h", "j", "--", "touch"]);
    c.arg(&mark);
    let pid = w.start_logged(c, "jitter");
    wait_until("status to show the wait", HANG, || {
        let out = w.oo_utc(&["status", "--json", "j"]);
        out.json()["locks"][0]["starting"]["pid"] == pid
    });
    let table = w.oo_utc(&["status", "j"]);
    table.expect(0).prints("[starting in ");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = w.exit_of_kid(pid, HANG);
    assert_eq!(status.signal(), Some(15), "{status:?}");
    assert!(!mark.exists(), "the command never ran");
    let err = std::fs::read_to_string(w.path("jitter.err")).unwrap();
    assert!(err.contains("was ended by TERM; not running"), "{err}");
    let out = w.oo_utc(&["status", "--json", "j"]);
    assert!(out.json()["locks"][0].get("starting").is_none(), "{out:?}");
}
