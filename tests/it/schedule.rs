//! Schedules: `--schedule` kept in the journal and used by every later
//! fire, fires missed (recorded once by a fire, named by `check`, counted
//! by `metrics` live and as recorded, shown by `history`, alerted on by
//! the rule doc/operations.md gives, under promtool), `run --catch-up`
//! (and what it declined), the waits of `--spread` and `--jitter` (a
//! waiting fire has served its fire), a `TZ` no zone reads (the job runs,
//! `check` says so), and `every`'s durations. Hand-written events set up what would take hours (a last
//! run three hours ago); every command runs with TZ=UTC, and the fires
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
        let token = onlyone::command::new_token();
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

    /// `status --json LOCK`, while it may not be there yet: `Null` until
    /// the lock is (status says no such lock, 125, before a fire wrote
    /// anything of it).
    fn status_json(&self, lock: &str) -> Value {
        let out = self.oo_utc(&["status", "--json", lock]);
        if out.code() == 125 && out.stderr.contains("no such lock") {
            return Value::Null;
        }
        out.json()
    }

    /// The schedule `spec` kept in the journal of `lock`, as a fire given
    /// it wrote it `ago` seconds ago.
    fn keep_schedule(&self, lock: &str, spec: &str, ago: f64) {
        let mut ev = Event::schedule(spec);
        ev.time -= ago;
        self.journal(lock).append(&ev).unwrap();
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

/// A journal whose last run is three hours old misses the hourly fires
/// since: `check --schedule '0 * * * *'` is CRITICAL naming the last
/// missed fire; once a run succeeds after it, OK.
#[test]
fn check_names_the_missed_fire_and_is_ok_after_a_later_success() {
    let w = World::new();
    w.past_run("j", 3.0 * 3600.0);
    let before = now();
    let out = w.oo_utc(&["check", "j", "--schedule", "0 * * * *", "--late", "0s"]);
    let after = now();
    out.expect(2).prints("ONLYONE CRITICAL - j: missed ");
    assert!(
        out.stdout.contains(&format!("to the {} ", hour_of(before)))
            || out.stdout.contains(&format!("to the {} ", hour_of(after))),
        "the last missed fire is named: {out:?}"
    );
    assert!(out.stdout.contains("(last run 3h"), "{out:?}");
    // Without --late, the default grace (five minutes): still CRITICAL,
    // two or more hourly fires passed.
    w.oo_utc(&["check", "j", "--schedule", "0 * * * *"])
        .expect(2)
        .prints("missed ");
    // A success after the last fire: OK.
    w.past_run("j", 2.0);
    w.oo_utc(&["check", "j", "--schedule", "0 * * * *", "--late", "0s"])
        .expect(0)
        .prints("ONLYONE OK - j: last run exit 0");
}

/// A fire records the fires it finds missed in one `missed` event, once:
/// the next fire finds none. The schedule is kept, so `check`, `metrics`
/// and `history` know it without being told.
#[test]
fn a_fire_records_the_missed_fires_once_and_the_schedule_is_kept() {
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
        .expect("a row of the missed fires");
    assert_eq!(row["missed_count"].as_u64(), Some(count));
    let text = w.oo_utc(&["history", "j"]);
    text.expect(0).prints(&format!("{count} fire(s) missed"));
    // Two fires are named ("missed the 13:00 and 14:00 fires"); more are
    // counted ("missed 3 fires, from the 12:00 to the 14:00").
    match count {
        2 => text
            .prints("missed the ")
            .prints(":00 and ")
            .prints(":00 fires"),
        n => text.prints(&format!("missed {n} fires, from the ")),
    };
    // The fire came after the missed fires: the check is OK.
    w.oo_utc(&["check", "j"]).expect(0);
}

/// A precheck given the schedule by `$ONLYONE_SCHEDULE` records the
/// fires missed; the run that follows it finds none left to record, and
/// `status` shows the next fire of the schedule kept.
#[test]
fn a_precheck_records_the_missed_fires_and_the_run_after_it_does_not() {
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

/// `run --catch-up` runs once for the fires missed, then not again; a
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
        w.status_json("j")["locks"][0]["starting"]["pid"] == pid
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

/// A finished run that started at `t` (Unix seconds), lasting a second,
/// exiting 0.
fn run_at(w: &World, lock: &str, t: i64) {
    let ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - t as f64;
    w.past_run(lock, ago);
}

/// `--late` that puts the end of `check`'s window (`now - late`) at `t`.
fn late_to(t: i64) -> String {
    format!("{}s", now() - t)
}

/// DST, in Berlin: `30 2 * * *` has one fire on the day a spring-forward
/// skips 02:30 (at 03:00 CEST) and one on the day a fall-back repeats it
/// (the first, CEST), so `check` counts two fires over each two days, as
/// cron fires; read in `CRON_TZ=` or in `TZ`. A job of every hour follows
/// the wall clock: both halves of the repeated hour are fires. (Each
/// journal's last run is set at noon UTC before the change, and `--late`
/// ends the window at noon UTC two days later.)
#[test]
fn a_fire_dst_skips_or_repeats_is_counted_once() {
    let w = World::new();
    // 2025-03-29 12:00Z .. 2025-03-31 12:00Z: 03:00 CEST on the 30th
    // (02:30 does not exist), 02:30 CEST on the 31st.
    let spring = (1_743_249_600, 1_743_422_400);
    // 2025-10-25 12:00Z .. 2025-10-27 12:00Z: 02:30 CEST on the 26th
    // (not again at 02:30 CET), 02:30 CET on the 27th.
    let fall = (1_761_393_600, 1_761_566_400);
    let cases = [
        (spring, "the 2025-03-30 03:00 and 2025-03-31 02:30 fires"),
        (fall, "the 2025-10-26 02:30 and 2025-10-27 02:30 fires"),
    ];
    for (i, ((last, end), said)) in cases.into_iter().enumerate() {
        for (zone, spec) in [
            ("UTC", "CRON_TZ=Europe/Berlin 30 2 * * *"),
            ("Europe/Berlin", "30 2 * * *"),
        ] {
            let lock = format!("dst{i}-{}", zone.len());
            run_at(&w, &lock, last);
            let mut c = w.cmd(&["check", &lock, "--schedule", spec, "--late", &late_to(end)]);
            c.env("TZ", zone);
            let out = finish(c, HANG);
            out.expect(2).prints(&format!(
                "ONLYONE CRITICAL - {lock}: missed {said} (last run "
            ));
        }
    }
    // Every hour at :30, 2025-10-25 23:45Z .. 2025-10-26 02:45Z: 02:30
    // CEST, 02:30 CET and 03:30 CET, three real hours.
    run_at(&w, "hourly", 1_761_435_900);
    let mut c = w.cmd(&[
        "check",
        "hourly",
        "--schedule",
        "CRON_TZ=Europe/Berlin 30 * * * *",
        "--late",
        &late_to(1_761_446_700),
    ]);
    c.env("TZ", "UTC");
    finish(c, HANG)
        .expect(2)
        .prints("missed 3 fires, from the 2025-10-26 02:30 to the 2025-10-26 03:30 (");
}

/// The hour (UTC) twelve hours from now, as a cron field: a daily fire
/// there was last 12 to 13 hours ago, and no fire now serves it.
fn hour_far_from_now() -> i64 {
    (now().div_euclid(3600) + 12).rem_euclid(24)
}

/// `run --catch-up` makes up only for fires within `--catch-up-within`:
/// a daily fire missed some 12 hours ago is too old for `6h` (no run, and
/// it says why), not for `14h` (one run).
#[test]
fn catch_up_refuses_fires_older_than_its_window() {
    let w = World::new();
    let spec = format!("0 {} * * *", hour_far_from_now());
    let mark = w.path("ran");
    let script = format!("echo x >> '{}'", mark.display());
    let ran = || {
        std::fs::read_to_string(&mark)
            .unwrap_or_default()
            .lines()
            .count()
    };
    for lock in ["old", "recent"] {
        w.past_run(lock, 3.0 * 86_400.0);
    }
    let fire = |lock: &str, within: &str| {
        w.oo_utc(&[
            "run",
            "--catch-up",
            "--catch-up-within",
            within,
            "--schedule",
            &spec,
            lock,
            "--",
            "sh",
            "-c",
            &script,
        ])
    };
    fire("old", "6h")
        .expect(0)
        .says("not catching up `old`: it missed 3 fires, from the ")
        .says(", longer ago than --catch-up-within 6h");
    assert_eq!(ran(), 0, "too old: no catch-up run");
    assert_eq!(w.events("old", "missed").len(), 1, "the fires are recorded");
    fire("recent", "14h")
        .expect(0)
        .says("`recent` missed 3 fires, from the ")
        .says(": running once to catch up");
    assert_eq!(ran(), 1);
}

/// Lets the `n` processes waiting at `go`'s line ([`on_go`]) leave, once
/// each is there (and lets them go anyway when they are not there in
/// time, so that none is left waiting, then fails).
pub(crate) fn let_go(go: &std::path::Path, n: usize) {
    let dir = go.parent().unwrap();
    let prefix = format!("{}.ready.", go.file_name().unwrap().to_string_lossy());
    let all_there = wait_for(HANG, || {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .count()
            == n
    });
    std::fs::write(go, "").unwrap();
    assert!(all_there, "{n} processes never all reached the start line");
}

/// `cmd`, started now but run only once `go` exists (a start line for
/// processes to leave together, to a few milliseconds); it says it waits
/// at the line with a file `GO.ready.PID` ([`let_go`]).
pub(crate) fn on_go(cmd: &Command, go: &std::path::Path) -> std::process::Child {
    let mut c = Command::new("sh");
    c.args([
        "-c",
        r#": > "$1.ready.$$"; while [ ! -e "$1" ]; do sleep 0.005; done; shift; exec "$@""#,
        "sh",
    ])
    .arg(go)
    .arg(cmd.get_program())
    .args(cmd.get_args())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.spawn().unwrap()
}

/// Puts ten thousand events of runs a month old before the journal's
/// lines: a fire then takes long enough to read it that fires leaving
/// together would all find the same fires missed, looking unguarded.
fn pad_journal(w: &World, lock: &str) {
    let path = w.journal_of(&w.lock(lock));
    let kept = std::fs::read_to_string(&path).unwrap();
    let old = now() - 30 * 86_400;
    let mut text = String::new();
    for i in 0..5_000 {
        let t = old + i;
        text.push_str(&format!(
            "{{\"v\":1,\"time\":{t},\"event\":\"start\",\"token\":\"t{i}\",\"pid\":7}}\n\
             {{\"v\":1,\"time\":{t}.5,\"event\":\"end\",\"token\":\"t{i}\",\"pid\":7,\"exit\":0}}\n"
        ));
    }
    text.push_str(&kept);
    std::fs::write(&path, text).unwrap();
}

/// Fires that leave together, `precheck`s and `run`s, record the fires
/// they find missed once between them: one `missed` event, counted once.
#[test]
fn fires_at_the_same_instant_record_the_missed_fires_once() {
    let w = World::new();
    for round in 0..8 {
        let lock = format!("j{round}");
        w.past_run(&lock, 3.0 * 3600.0);
        pad_journal(&w, &lock);
        let go = w.path(&format!("go{round}"));
        let kids: Vec<_> = (0..6)
            .map(|i| {
                let args: &[&str] = if i % 2 == 0 {
                    &["precheck", "--schedule", "0 * * * *", &lock]
                } else {
                    &["run", "--schedule", "0 * * * *", &lock, "--", "true"]
                };
                on_go(&w.cmd(args), &go)
            })
            .collect();
        let_go(&go, 6);
        for mut k in kids {
            k.wait().unwrap();
        }
        let missed = w.events(&lock, "missed");
        assert_eq!(missed.len(), 1, "{missed:?}");
        let count = missed[0]["count"].as_u64().unwrap();
        w.oo_utc(&["metrics", &lock]).expect(0).prints(&format!(
            "onlyone_missed_total{{lock=\"{lock}\"}} {count}\n"
        ));
    }
}

/// Catch-ups that leave together (two boot-time lines, a unit and a
/// cron line) run the command once between them for the fires missed.
#[test]
fn catch_ups_at_the_same_instant_run_once() {
    let w = World::new();
    w.past_run("j", 3.0 * 3600.0);
    pad_journal(&w, "j");
    let mark = w.path("ran");
    let script = format!("echo x >> '{}'", mark.display());
    let go = w.path("go");
    let kids: Vec<_> = (0..4)
        .map(|_| {
            let args = [
                "run",
                "--catch-up",
                "--schedule",
                "0 * * * *",
                "j",
                "--",
                "sh",
                "-c",
                &script,
            ];
            on_go(&w.cmd(&args), &go)
        })
        .collect();
    let_go(&go, 4);
    for mut k in kids {
        k.wait().unwrap();
    }
    let ran = std::fs::read_to_string(&mark).unwrap_or_default();
    assert_eq!(ran.lines().count(), 1, "{ran:?}");
    assert_eq!(w.events("j", "missed").len(), 1);
}

/// A signal that ends a `--jitter` wait: the command never runs,
/// onlyone ends by that signal and says so, and `status` shows no wait
/// any more. While it waits, the lock is not held, and `status --json`
/// shows when it starts.
fn jitter_ends_on(signal: rustix::process::Signal, name: &str) {
    use std::os::unix::process::ExitStatusExt;
    let mut w = World::new();
    let mark = w.path("ran");
    let mut c = w.cmd(&["run", "--jitter", "1h", "j", "--", "touch"]);
    c.arg(&mark);
    let pid = w.start_logged(c, "jitter");
    wait_until("status to show the wait", HANG, || {
        w.status_json("j")["locks"][0]["starting"]["pid"] == pid
    });
    let json = w.oo_utc(&["status", "--json", "j"]).json();
    assert_ne!(
        json["locks"][0]["state"], "held",
        "the wait is before the lock: {json}"
    );
    let starting = &json["locks"][0]["starting"];
    let in_s = starting["in_seconds"].as_f64().unwrap();
    assert!(in_s > 0.0 && in_s <= 3600.0, "{json}");
    let at = starting["at_unix"].as_f64().unwrap();
    assert!((at - (now() as f64 + in_s)).abs() < 5.0, "{json}");
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), signal)
        .unwrap();
    let status = w.exit_of_kid(pid, HANG);
    assert_eq!(status.signal(), Some(signal.as_raw()), "{status:?}");
    assert!(!mark.exists(), "the command never ran");
    let err = std::fs::read_to_string(w.path("jitter.err")).unwrap();
    assert!(
        err.contains(&format!("was ended by {name}; not running")),
        "{err}"
    );
    let out = w.oo_utc(&["status", "--json", "j"]);
    assert!(out.json()["locks"][0].get("starting").is_none(), "{out:?}");
}

/// INT ends a `--jitter` wait as TERM does.
#[test]
fn jitter_ends_on_int() {
    jitter_ends_on(rustix::process::Signal::INT, "INT");
}

/// HUP ends a `--jitter` wait as TERM does.
#[test]
fn jitter_ends_on_hup() {
    jitter_ends_on(rustix::process::Signal::HUP, "HUP");
}

/// `--jitter 1h` with `--deadline 1s` waits at most the second, and the
/// command runs; with the lock held (and `--wait`), the deadline is spent
/// by then and the fire skips at once, not an hour later.
#[test]
fn jitter_counts_toward_the_deadline() {
    let mut w = World::new();
    waits_no_longer_than_the_deadline(&w, "--jitter", "1h");
    assert_eq!(w.history_json("j").len(), 1, "the command ran");

    let holder = w.cmd(&["run", "j", "--", "sleep", "1000"]);
    w.start_logged(holder, "holder");
    wait_until("the holder to run", HANG, || {
        w.status_json("j")["locks"][0]["state"] == "held"
    });
    let out = w.oo_utc(&[
        "run",
        "--jitter",
        "1h",
        "--deadline",
        "1s",
        "--wait",
        "1h",
        "j",
        "--",
        "true",
    ]);
    out.expect(75).within(Duration::from_secs(10));
}

/// `--spread 10m` with `--deadline 1s`: the stable offset counts toward
/// the deadline as a jitter does.
#[test]
fn spread_counts_toward_the_deadline() {
    let w = World::new();
    waits_no_longer_than_the_deadline(&w, "--spread", "10m");
}

/// `run OPT DUR --deadline 1s j -- true` runs at once: its wait before the
/// lock, recorded, is cut to the deadline's second.
fn waits_no_longer_than_the_deadline(w: &World, opt: &str, dur: &str) {
    let start = std::time::Instant::now();
    w.oo_utc(&["run", opt, dur, "--deadline", "1s", "j", "--", "true"])
        .expect(0);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let waits = waits(w, "j");
    assert!(waits.iter().all(|x| *x <= 1.001), "{waits:?}");
}

/// `$ONLYONE_SCHEDULE` serves `check`, `metrics` and `status` as
/// `--schedule` does, and, as they only read, none of them keeps it.
#[test]
fn the_schedule_from_the_environment_serves_check_metrics_and_status() {
    let w = World::new();
    w.past_run("j", 3.0 * 3600.0);
    let with_env = |args: &[&str]| {
        let mut c = w.cmd(args);
        c.env("ONLYONE_SCHEDULE", "0 * * * *");
        finish(c, HANG)
    };
    with_env(&["check", "j"])
        .expect(2)
        .prints("ONLYONE CRITICAL - j: missed ");
    with_env(&["metrics", "j"])
        .expect(0)
        .prints("onlyone_missed_total{lock=\"j\"} 0\n")
        .prints("onlyone_next_fire_timestamp_seconds{lock=\"j\"} ");
    with_env(&["status", "j"])
        .expect(0)
        .prints("[next fire in ");
    let json = with_env(&["status", "--json", "j"]).json();
    assert_eq!(
        json["locks"][0]["schedule"]["spec"], "CRON_TZ=UTC 0 * * * *",
        "{json}"
    );
    assert!(w.events("j", "schedule").is_empty(), "readers keep nothing");
    // Without it, nothing is known of a schedule.
    w.oo_utc(&["check", "j"]).expect(0);
}

/// The schedule a fire gives wins over the one the journal keeps, and
/// replaces it: its fires count from then (none of the old schedule's are
/// called missed under it), and `check`, `status` and the next catch-up
/// know the new one. `check --schedule` wins for that check alone, and
/// keeps nothing.
#[test]
fn a_fire_with_another_schedule_replaces_the_one_kept() {
    let w = World::new();
    w.past_run("j", 3.0 * 3600.0);
    w.oo_utc(&["run", "--schedule", "0 * * * *", "j", "--", "true"])
        .expect(0);
    assert_eq!(w.events("j", "missed").len(), 1);
    w.past_run("j", 2.0 * 86_400.0);
    w.oo_utc(&["run", "--schedule", "every 1d", "j", "--", "true"])
        .expect(0);
    let schedules: Vec<_> = w
        .events("j", "schedule")
        .iter()
        .map(|e| e["schedule"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(schedules, ["CRON_TZ=UTC 0 * * * *", "every 1d"]);
    assert_eq!(
        w.events("j", "missed").len(),
        1,
        "nothing missed under the new one"
    );
    let json = w.oo_utc(&["status", "--json", "j"]).json();
    assert_eq!(json["locks"][0]["schedule"]["spec"], "every 1d", "{json}");
    w.oo_utc(&["check", "j"]).expect(0);
    // Given to check, another schedule wins there, and is not kept.
    // Once a second's fire has passed since the last run, it is missed.
    let args = ["check", "j", "--schedule", "every 1s", "--late", "0s"];
    wait_until("a 1s fire missed", Duration::from_secs(10), || {
        w.oo_utc(&args).code() == 2
    });
    w.oo_utc(&args).expect(2).prints("missed ");
    assert_eq!(w.events("j", "schedule").len(), 2);
    w.oo_utc(&["run", "--catch-up", "j", "--", "true"])
        .expect(0)
        .says("nothing to catch up for `j`");
}

/// Bad input to the schedule's options is refused, naming the option or
/// the value and the fix, never ignored: `--catch-up-within` without
/// `--catch-up`, a negative `--late`, `--jitter`, `--spread` or
/// `--catch-up-within`, `every 0s`, a `CRON_TZ=` zone that is none. (A
/// `TZ` that names no zone does not stop a fire:
/// `an_unreadable_tz_runs_the_job_and_check_names_the_zone_until_mended`.)
#[test]
fn bad_schedule_options_are_refused_naming_the_fix() {
    let w = World::new();
    w.oo_utc(&["run", "--catch-up-within", "1h", "j", "--", "true"])
        .expect(125)
        .says("the following required arguments were not provided:\n  --catch-up");
    for (opt, extra) in [
        ("--late", &["--schedule", "@hourly"][..]),
        ("--jitter", &[]),
        ("--spread", &[]),
        (
            "--catch-up-within",
            &["--catch-up", "--schedule", "@hourly"],
        ),
    ] {
        let mut args = vec!["run", opt, "-5m"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["j", "--", "true"]);
        w.oo_utc(&args)
            .expect(125)
            .says(&format!("invalid value '-5m' for '{opt} <DUR>'"))
            .says("`-5m` is negative: a duration is 0 or more, e.g. 90s");
    }
    w.oo_utc(&["check", "j", "--late", "-1s"])
        .expect(3)
        .says("`-1s` is negative");
    w.oo_utc(&["run", "--schedule", "every 0s", "j", "--", "true"])
        .expect(125)
        .says("`every 0s` is not a period: a period of zero; write `every` and a duration");
    let zone = "CRON_TZ=Mars/Olympus 0 2 * * *";
    let said = "`CRON_TZ=Mars/Olympus` is not a time zone of the system's database";
    let fix = "name one as `Area/City` (`Europe/Berlin`";
    w.oo_utc(&["run", "--schedule", zone, "j", "--", "true"])
        .expect(125)
        .says(said)
        .says(fix);
    w.oo_utc(&["check", "--schedule", zone, "j"])
        .expect(3)
        .says(said);
    w.oo_utc(&["precheck", "--schedule", zone, "j"])
        .expect(0)
        .says(said);
    let mut c = w.cmd(&["run", "j", "--", "true"]);
    c.env("ONLYONE_SCHEDULE", "");
    finish(c, HANG)
        .expect(125)
        .says("the schedule is empty")
        .says("An empty $ONLYONE_SCHEDULE is one too: unset it");
    // Nothing ran, nothing was kept.
    assert!(w.events("j", "start").is_empty());
    assert!(w.events("j", "schedule").is_empty());
}

/// `--jitter 0` and `--spread 0` are no wait (as systemd's
/// `RandomizedDelaySec=0`): the command runs at once, with no `delay`.
#[test]
fn a_zero_jitter_or_spread_is_no_wait() {
    let w = World::new();
    w.oo_utc(&["run", "--jitter", "0", "--spread", "0s", "j", "--", "true"])
        .expect(0);
    assert!(w.events("j", "delay").is_empty());
    assert_eq!(w.history_json("j").len(), 1);
}

/// Another account forges what a schedule reads: `nobody` plants, beside
/// root's lock in the shared `/run/lock`, an earlier version's journal
/// with a fire dated a month ahead (were it believed, root's fires would
/// count their missed fires from then, and record none), 777,777 fires
/// missed, and a fire waiting for a day (pid 1, which lives); and holds a
/// `flock` on root's state directory (made 0755), where fires record their
/// missed fires one at a time. Root's fire still finishes promptly and
/// records the fires its last run three hours ago left missed; `metrics`
/// counts those alone, `status` shows no waiting fire, and `check` is OK.
#[test]
fn another_account_cannot_forge_what_roots_schedule_reads() {
    use support::ns::{NOBODY, Ns};
    const LIMIT: Duration = Duration::from_secs(30);
    let Some(mut ns) = Ns::new("another_account_cannot_forge_what_roots_schedule_reads") else {
        return;
    };
    let root = |ns: &Ns, args: &[&str]| {
        let mut all = vec!["--dir", "/run/lock"];
        all.extend_from_slice(args);
        let mut c = ns.oo(None, &all);
        c.env("TZ", "UTC");
        ns.run(c, LIMIT, &all.join(" "))
    };
    root(
        &ns,
        &["run", "--schedule", "0 * * * *", "backup", "--", "true"],
    )
    .expect(0);
    // Root's own journal, three hours back.
    let journal = ns.host_path("/var/lib/onlyone/run-lock-backup.lock.journal");
    let text = std::fs::read_to_string(&journal).unwrap();
    let mut shifted = String::new();
    for line in text.lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let t = v["time"].as_f64().unwrap();
        v["time"] = (t - 3.0 * 3600.0).into();
        shifted.push_str(&format!("{v}\n"));
    }
    std::fs::write(&journal, shifted).unwrap();

    let t = now();
    let forged = format!(
        "{{\"v\":1,\"time\":{ahead},\"event\":\"start\",\"token\":\"f\",\"pid\":1}}\n\
         {{\"v\":1,\"time\":{t},\"event\":\"missed\",\"first\":{first},\"last\":{ahead},\
         \"count\":777777,\"exact\":true,\"schedule\":\"CRON_TZ=UTC 0 * * * *\"}}\n\
         {{\"v\":1,\"time\":{t},\"event\":\"delay\",\"pid\":1,\"cmd\":\"forged\",\"until\":{day}}}\n",
        ahead = t + 30 * 86_400,
        first = t - 86_400,
        day = t + 86_400,
    );
    std::fs::write(ns.host_path("/tmp/forged"), forged).unwrap();
    ns.must(None, "chmod 0755 /var/lib/onlyone");
    ns.attacker(
        NOBODY,
        "cd /run/lock && cp /tmp/forged backup.lock.journal && \
         cp /tmp/forged backup.lock.journal.1 && cd /var/lib/onlyone && exec 6<. && \
         flock -x 6 && touch /tmp/flocked && exec sleep 100000",
        "/tmp/flocked",
    );

    root(
        &ns,
        &["run", "--schedule", "0 * * * *", "backup", "--", "true"],
    )
    .expect(0)
    .within(Duration::from_secs(6));
    let text = std::fs::read_to_string(&journal).unwrap();
    let missed: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "missed")
        .collect();
    assert_eq!(
        missed.len(),
        1,
        "root's fire recorded its missed fires: {text}"
    );
    let count = missed[0]["count"].as_u64().unwrap();
    assert!((2..=3).contains(&count), "{missed:?}");

    let out = root(&ns, &["metrics", "backup"]);
    out.expect(0)
        .prints(&format!(
            "onlyone_missed_total{{lock=\"backup\"}} {count}\n"
        ))
        .says("/run/lock/backup.lock.journal`")
        .says("an earlier version's journal");
    let out = root(&ns, &["status", "backup"]);
    assert!(!out.stdout.contains("starting in"), "{out:#?}");
    let out = root(&ns, &["status", "--json", "backup"]);
    assert!(out.json()["locks"][0].get("starting").is_none(), "{out:#?}");
    assert!(!out.stdout.contains("777777"), "{out:#?}");
    root(&ns, &["check", "backup"])
        .expect(0)
        .prints("ONLYONE OK - backup");

    // The same lines in root's own earlier journal are believed: they
    // are what nobody's would have done.
    ns.must(
        None,
        "cd /run/lock && cp /tmp/forged mine.lock.journal && chmod 0600 mine.lock.journal",
    );
    root(&ns, &["metrics", "--schedule", "0 * * * *", "mine"])
        .expect(0)
        .prints("onlyone_missed_total{lock=\"mine\"} 777777\n");
    root(&ns, &["status", "mine"])
        .expect(0)
        .prints("starting in");
}

// ---------------------------------------------------------------------------
// Every fire uses the kept schedule, no false page, a live gauge, a
// declined catch-up said, a broken TZ that does not stop the job.

/// A fire given no `--schedule` uses the schedule the journal keeps: a
/// `run` by hand and a `precheck` (the second crontab line), three hours
/// after the last run, record the hourly fires missed since, once, as a
/// fire given it would; `history`, `metrics` and `check` then know them.
#[test]
fn a_fire_without_schedule_records_the_fires_the_kept_one_missed() {
    let w = World::new();
    for lock in ["j", "p"] {
        w.keep_schedule(lock, "CRON_TZ=UTC 0 * * * *", 3.0 * 3600.0 + 10.0);
        w.past_run(lock, 3.0 * 3600.0);
    }
    w.oo_utc(&["run", "j", "--", "true"]).expect(0);
    w.oo_utc(&["run", "j", "--", "true"]).expect(0);
    let missed = w.events("j", "missed");
    assert_eq!(missed.len(), 1, "recorded once: {missed:?}");
    let count = missed[0]["count"].as_u64().unwrap();
    assert!((2..=3).contains(&count), "{missed:?}");
    assert_eq!(missed[0]["schedule"], "CRON_TZ=UTC 0 * * * *");
    assert_eq!(
        w.events("j", "schedule").len(),
        1,
        "kept, not written again"
    );
    w.oo_utc(&["metrics", "j"])
        .expect(0)
        .prints(&format!("onlyone_missed_total{{lock=\"j\"}} {count}\n"));
    let rows = w.history_json("j");
    assert!(
        rows.iter()
            .any(|r| r["outcome"] == "missed" && r["missed_count"].as_u64() == Some(count)),
        "{rows:?}"
    );
    w.oo_utc(&["check", "j"]).expect(0);

    w.oo_utc(&["precheck", "p"]).expect(0);
    w.oo_utc(&["precheck", "p"]).expect(0);
    let missed = w.events("p", "missed");
    assert_eq!(missed.len(), 1, "recorded once: {missed:?}");
    assert!((2..=3).contains(&missed[0]["count"].as_u64().unwrap()));
    // A lock with no schedule kept records nothing.
    w.past_run("none", 3.0 * 3600.0);
    w.oo_utc(&["run", "none", "--", "true"]).expect(0);
    assert!(w.events("none", "missed").is_empty());
    assert!(w.events("none", "schedule").is_empty());
}

/// The start of the UTC day, as Unix seconds.
fn today() -> i64 {
    now().div_euclid(86_400) * 86_400
}

/// A fire that came on time and waits out its `--jitter` and `--spread`
/// has served its fire: while it waits (`status`: "starting in"),
/// `check` does not call that fire missed, `metrics` counts none, and a
/// fire by hand does not record it missed. Killed while it waits
/// (SIGKILL: no word in the journal), it served nothing: the fire it came
/// for is missed.
#[test]
fn a_fire_waiting_before_the_lock_has_served_its_fire_until_it_is_killed() {
    let mut w = World::new();
    let day = today();
    // The last run a minute before today's fire of `every 1d`.
    run_at(&w, "j", day - 60);
    let c = w.cmd(&[
        "run",
        "--schedule",
        "every 1d",
        "--late",
        "2d",
        "--jitter",
        "1h",
        "--spread",
        "1h",
        "j",
        "--",
        "true",
    ]);
    let pid = w.start_logged(c, "waiter");
    wait_until("status to show the wait", HANG, || {
        w.status_json("j")["locks"][0]["starting"]["pid"] == pid
    });
    // The window of `check` ends at today's fire (`--late` from the clock).
    let late = late_to(day);
    let check = ["check", "j", "--late", &late];
    w.oo_utc(&check).expect(0).prints("ONLYONE OK - j: ");
    w.oo_utc(&["metrics", "j", "--late", &late])
        .expect(0)
        .prints("onlyone_missed_fires{lock=\"j\"} 0\n");
    // A fire by hand meanwhile (no schedule given: the kept one) does not
    // record the fire the waiter came for as missed.
    run_at(&w, "k", day - 60);
    let c = w.cmd(&[
        "run",
        "--schedule",
        "every 1d",
        "--late",
        "2d",
        "--jitter",
        "1h",
        "--spread",
        "1h",
        "k",
        "--",
        "true",
    ]);
    let k_waiter = w.start_logged(c, "k-waiter");
    wait_until("status to show k's wait", HANG, || {
        w.status_json("k")["locks"][0]["starting"]["pid"] == k_waiter
    });
    w.oo_utc(&["run", "k", "--", "true"]).expect(0);
    assert!(
        w.events("k", "missed").is_empty(),
        "{:?}",
        w.events("k", "missed")
    );

    kill9_pid(pid);
    w.exit_of_kid(pid, HANG);
    w.oo_utc(&check)
        .expect(2)
        .prints("ONLYONE CRITICAL - j: missed the ")
        .prints("00:00 fire (last run ");
    w.oo_utc(&["metrics", "j", "--late", &late])
        .expect(0)
        .prints("onlyone_missed_fires{lock=\"j\"} 1\n")
        .prints(&format!(
            "onlyone_oldest_missed_fire_timestamp_seconds{{lock=\"j\"}} {day}\n"
        ));
}

/// The samples of a metrics text: `(series, value)`, comments left out.
fn samples(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.to_owned())
        })
        .collect()
}

/// `metrics` exports what `check` knows, live: for a lock whose fires
/// stopped (its crontab line gone: no later fire recorded anything, so
/// `onlyone_missed_total` is 0), `onlyone_missed_fires` counts the hourly
/// fires passed with no fire since, as `check` names them, and
/// `onlyone_oldest_missed_fire_timestamp_seconds` is the first of them;
/// for a lock whose fires come, 0. The alert doc/operations.md documents
/// (its block `alert-fire-missed`), run by `promtool test rules` over
/// every sample `metrics` printed, fires for the first lock and not for
/// the second.
#[test]
fn the_documented_alert_fires_for_a_lock_whose_fires_stopped() {
    let w = World::new();
    for lock in ["stopped", "fine"] {
        w.keep_schedule(lock, "CRON_TZ=UTC 0 * * * *", 3.0 * 3600.0 + 10.0);
    }
    w.past_run("stopped", 3.0 * 3600.0);
    w.past_run("fine", 60.0);
    let start = w.events("stopped", "start")[0]["time"].as_f64().unwrap() as i64;
    let first = (start / 3600 + 1) * 3600;
    let out = w.oo_utc(&["metrics", "stopped", "fine"]);
    out.expect(0)
        .prints("onlyone_missed_total{lock=\"stopped\"} 0\n")
        .prints("onlyone_missed_fires{lock=\"fine\"} 0\n")
        .prints("# TYPE onlyone_missed_fires gauge\n")
        .prints(&format!(
            "onlyone_oldest_missed_fire_timestamp_seconds{{lock=\"stopped\"}} {first}\n"
        ));
    let all = samples(&out.stdout);
    let gauge = |lock: &str| -> u64 {
        all.iter()
            .find(|(s, _)| *s == format!("onlyone_missed_fires{{lock=\"{lock}\"}}"))
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or_else(|| panic!("no gauge for {lock}: {out:?}"))
    };
    let n = gauge("stopped");
    let check = w.oo_utc(&["check", "stopped"]);
    check.expect(2);
    match n {
        2 => check.prints("missed the ").prints(":00 and "),
        3 => check.prints("missed 3 fires, from the "),
        n => panic!("{n} fires missed: {check:?}"),
    };
    assert_eq!(gauge("fine"), 0);

    if !have("promtool") {
        eprintln!("skipped promtool test rules: promtool is missing (.ci/run installs it)");
        return;
    }
    let rules = w.path("rules.yml");
    std::fs::write(&rules, readme_block("alert-fire-missed")).unwrap();
    let mut series = String::new();
    for (s, v) in &all {
        series.push_str(&format!(
            "      - series: '{}'\n        values: '{v}x30'\n",
            s.replace('\'', "''")
        ));
    }
    let test = format!(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    \
         input_series:\n{series}    alert_rule_test:\n      - eval_time: 20m\n        \
         alertname: OnlyoneFireMissed\n        exp_alerts:\n          - exp_labels:\n              \
         lock: stopped\n"
    );
    std::fs::write(w.path("test.yml"), &test).unwrap();
    for args in [
        &["check", "rules", "rules.yml"][..],
        &["test", "rules", "test.yml"],
    ] {
        let mut c = w.program("promtool");
        c.current_dir(w.dir()).args(args);
        let out = finish(c, HANG);
        assert_eq!(out.code(), 0, "promtool {args:?}:\n{out:#?}\n{test}");
    }
}

/// A catch-up that declined fires older than `--catch-up-within` leaves
/// them recorded, and nothing ran for them: the next catch-up says which
/// fires were declined and when they were found, not "no fire missed".
#[test]
fn a_declined_catch_up_says_what_was_declined_and_when() {
    let w = World::new();
    let spec = format!("0 {} * * *", hour_far_from_now());
    w.past_run("old", 3.0 * 86_400.0);
    let fire = || {
        w.oo_utc(&[
            "run",
            "--catch-up",
            "--catch-up-within",
            "6h",
            "--schedule",
            &spec,
            "old",
            "--",
            "true",
        ])
    };
    fire()
        .expect(0)
        .says("not catching up `old`: it missed 3 fires, from the ");
    let again = fire();
    again
        .expect(0)
        .says("nothing to catch up for `old`: ")
        .says("3 fires, from the ")
        .says(" found missed ")
        .says("older than --catch-up-within 6h");
    assert!(!again.stderr.contains("no fire missed"), "{again:?}");
    assert_eq!(
        w.history_json("old")
            .iter()
            .filter(|r| r["outcome"] != "missed")
            .count(),
        1
    );
}

/// A `TZ` that cannot be read, with `--schedule`: the job runs all the
/// same, saying why the schedule is left out; the error is recorded in
/// the journal, and `check` is UNKNOWN naming the zone and the fix until
/// a fire reads the schedule again. `precheck` records it too. A spec that
/// cannot be read in any zone is still refused (125), the job not run.
#[test]
fn an_unreadable_tz_runs_the_job_and_check_names_the_zone_until_mended() {
    let w = World::new();
    let mark = w.path("ran");
    let broken = |args: &[&str]| {
        let mut c = w.cmd(args);
        c.env("TZ", "Mars/Olympus");
        finish(c, HANG)
    };
    broken(&[
        "run",
        "--schedule",
        "0 2 * * *",
        "j",
        "--",
        "touch",
        mark.to_str().unwrap(),
    ])
    .expect(0)
    .says("the local time zone could not be read (TZ=Mars/Olympus)");
    assert!(mark.exists(), "the job ran");
    let kept = w.events("j", "schedule");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0]["schedule"], "0 2 * * *");
    assert!(
        kept[0]["reason"]
            .as_str()
            .unwrap()
            .contains("TZ=Mars/Olympus"),
        "{kept:?}"
    );
    // Recorded once while it lasts.
    broken(&["run", "--schedule", "0 2 * * *", "j", "--", "true"]).expect(0);
    assert_eq!(w.events("j", "schedule").len(), 1);
    for c in [&["check", "j"][..], &["check", "j", "--schedule", "@daily"]] {
        w.oo_utc(c)
            .expect(3)
            .prints("ONLYONE UNKNOWN - j: ")
            .prints("`0 2 * * *`")
            .prints("TZ=Mars/Olympus")
            .prints("set TZ to a zone's name");
    }
    // Mended: a fire that reads it.
    w.oo_utc(&["run", "--schedule", "0 2 * * *", "j", "--", "true"])
        .expect(0);
    w.oo_utc(&["check", "j"]).expect(0);
    assert_eq!(w.events("j", "schedule").len(), 2);

    // A catch-up must decide: with the schedule kept (it names its zone),
    // it runs for a fire missed; with none kept, it runs, saying why.
    w.past_run("c", 3.0 * 86_400.0);
    w.keep_schedule("c", "CRON_TZ=UTC 0 * * * *", 3.0 * 86_400.0 + 10.0);
    let catch_up = |lock: &str| {
        broken(&[
            "run",
            "--catch-up",
            "--catch-up-within",
            "2d",
            "--schedule",
            "0 * * * *",
            lock,
            "--",
            "true",
        ])
    };
    catch_up("c")
        .expect(0)
        .says("deciding the catch-up with the schedule the journal keeps, `CRON_TZ=UTC 0 * * * *`");
    assert_eq!(w.events("c", "missed").len(), 1);
    catch_up("c").expect(0).says("nothing to catch up for `c`");
    assert_eq!(
        w.history_json("c")
            .iter()
            .filter(|r| r["outcome"] == "exit")
            .count(),
        2
    );
    catch_up("d")
        .expect(0)
        .says("TZ=Mars/Olympus")
        .says("running without the schedule");
    assert_eq!(w.history_json("d").len(), 1, "it ran");
    w.oo_utc(&["check", "c"])
        .expect(3)
        .prints("TZ=Mars/Olympus");

    broken(&["precheck", "--schedule", "0 2 * * *", "p"])
        .expect(0)
        .says("TZ=Mars/Olympus");
    w.oo_utc(&["check", "p"])
        .expect(3)
        .prints("TZ=Mars/Olympus");

    broken(&[
        "run",
        "--schedule",
        "0 2 * * * *",
        "k",
        "--",
        "touch",
        mark.to_str().unwrap(),
    ])
    .expect(125)
    .says("has 6 fields");
    std::fs::remove_file(&mark).unwrap();
    broken(&[
        "run",
        "--schedule",
        "0 2 31 4 *",
        "k",
        "--",
        "touch",
        mark.to_str().unwrap(),
    ])
    .expect(125)
    .says("never fires");
    assert!(!mark.exists());
}

/// `every 90` is 90 seconds, as a bare number is for every other
/// duration: one grammar (`--late 90` too); a fraction of a second is no
/// period, nor is a month.
#[test]
fn every_takes_the_durations_every_option_takes() {
    let w = World::new();
    for spec in ["every 90", "every 1m30s", "every 1.5m", "every 1m 30s"] {
        w.oo_utc(&["run", "--schedule", spec, "--late", "90", "j", "--", "true"])
            .expect(0);
    }
    let kept: Vec<_> = w
        .events("j", "schedule")
        .iter()
        .map(|e| e["schedule"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kept, ["every 90s"], "one schedule, kept once");
    w.oo_utc(&["run", "--schedule", "every 500ms", "k", "--", "true"])
        .expect(125)
        .says("whole seconds");
    w.oo_utc(&["run", "--schedule", "every 1M", "k", "--", "true"])
        .expect(125)
        .says("@monthly");
}

/// A schedule whose fires are not on whole minutes names them to the
/// second: `every 10s`'s missed fires are `12:00:10` and so on, never
/// "the 12:00 and 12:00 fires".
#[test]
fn fires_under_a_minute_apart_are_named_to_the_second() {
    let w = World::new();
    w.past_run("j", 35.0);
    let out = w.oo_utc(&["check", "j", "--schedule", "every 10s", "--late", "0s"]);
    out.expect(2);
    let said = out.stdout.split("missed ").nth(1).unwrap_or_default();
    let times: Vec<&str> = said
        .split(|c: char| !(c.is_ascii_digit() || c == ':'))
        .filter(|t| t.len() == 8 && t.matches(':').count() == 2)
        .collect();
    assert_eq!(times.len(), 2, "two times, to the second: {out:?}");
    assert_ne!(times[0], times[1], "{out:?}");
    assert!(times.iter().all(|t| t.ends_with('0')), "{out:?}");
}

/// A schedule's times are fires (or scheduled times), never "slots" (a
/// lock's slots are `--slots N`'s): in the help of the schedule's options
/// and in the help of the families `metrics` adds for a schedule.
#[test]
fn a_schedules_times_are_called_fires() {
    let w = World::new();
    for sub in ["run", "check", "metrics", "status", "precheck", "history"] {
        let help = w.oo_utc(&[sub, "--help"]);
        help.expect(0);
        for para in help.stdout.split("\n\n") {
            let about_schedule = ["--schedule", "--late", "--catch-up", "missed", "schedule"]
                .iter()
                .any(|w| para.contains(w));
            let about_lock_slots = para.contains("--slots") || para.contains("ONLYONE_SLOT");
            assert!(
                !(about_schedule && !about_lock_slots && para.to_lowercase().contains("slot")),
                "{sub} --help calls a schedule's times slots:\n{para}"
            );
        }
    }
    w.past_run("j", 3.0 * 3600.0);
    let out = w.oo_utc(&["metrics", "j", "--schedule", "@hourly"]);
    for line in out.stdout.lines().filter(|l| l.starts_with("# HELP")) {
        if line.contains("missed") || line.contains("fire") {
            assert!(!line.contains("slot"), "{line}");
        }
    }
}
