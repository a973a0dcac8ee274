//! Schedules with a store, on several hosts: each "host" is an onlyone
//! process in a UTS namespace of its own, named `host-a` or `host-b`
//! (`unshare --uts`, then `hostname`), with a state directory of its own,
//! against one PostgreSQL database. The schedule and the fires missed are
//! the store's: recorded once whichever host's fires find them (fires
//! racing on both hosts, many rounds), read the same by `check`,
//! `metrics` and `history` from either host, used by a fire given no
//! `--schedule`; a `--catch-up` runs once across the hosts; a store set up
//! before schedules says what to create. Events of the past (a last run
//! three hours ago) are written into the store's history with psql; every
//! command runs with TZ=UTC.

use crate::support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::*;

use crate::schedule::{let_go, on_go};

store_world!("ONLYONE_STORE_SCHEDULE_MARK");

const HANG: Duration = Duration::from_secs(60);

/// The two hosts.
const HOSTS: [&str; 2] = ["host-a", "host-b"];

/// Now, Unix seconds.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A world whose commands can play hosts: `None` (said) without root,
/// `unshare` or PostgreSQL.
fn hosts_world() -> Option<World> {
    if !is_root() || !have("unshare") || !have("hostname") {
        eprintln!("skipped: needs root, unshare and hostname to play two hosts");
        return None;
    }
    let w = World::new()?;
    for h in HOSTS {
        std::fs::create_dir(w.path(&format!("state-{h}"))).unwrap();
    }
    // The tables, as the first command to connect makes them.
    w.at(HOSTS[0], &["status"]).expect(0);
    Some(w)
}

impl World {
    /// `onlyone --store URL ARGS` on `host`: in a UTS namespace named so,
    /// with that host's own state directory, in UTC.
    fn on(&self, host: &str, args: &[&str]) -> Command {
        let inner = self.oo_at(&self.pg.url(), args);
        let mut c = self.program("unshare");
        c.args(["--uts", "sh", "-c", r#"hostname "$0" && exec "$@""#, host])
            .arg(inner.get_program())
            .args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.env("TZ", "UTC")
            .env_remove("ONLYONE_SCHEDULE")
            .env(STATE_VAR, self.path(&format!("state-{host}")));
        c
    }

    /// [`World::on`], its stderr appended to the file `err`.
    fn on_logged(&self, host: &str, args: &[&str], err: &std::path::Path) -> Command {
        let mut c = self.program("sh");
        c.args(["-c", r#"exec "$@" 2>>"$ERR""#, "sh"]);
        let inner = self.on(host, args);
        c.arg(inner.get_program()).args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.env("ERR", err);
        c
    }

    /// [`World::on`], run to its end.
    fn at(&self, host: &str, args: &[&str]) -> Out {
        finish(self.on(host, args), HANG)
    }

    /// Appends event lines (JSON) to the store's history of `lock`.
    fn put(&self, lock: &str, lines: &[String]) {
        let values: Vec<String> = lines
            .iter()
            .map(|l| format!("('{lock}', '{}')", l.replace('\'', "''")))
            .collect();
        self.pg.psql(&format!(
            "INSERT INTO onlyone_event (name, event) VALUES {}",
            values.join(", ")
        ));
    }

    /// A finished run of `lock` on `host-a`, started `ago` seconds ago,
    /// lasting a second, exiting 0.
    fn past_run(&self, lock: &str, ago: i64) {
        let t = now() - ago;
        let token = format!("past-{lock}-{t}");
        self.put(
            lock,
            &[
                format!(
                    r#"{{"v":1,"time":{t},"event":"start","token":"{token}","pid":4242,"host":"host-a"}}"#
                ),
                format!(
                    r#"{{"v":1,"time":{},"event":"end","token":"{token}","pid":4242,"host":"host-a","exit":0,"duration":1}}"#,
                    t + 1
                ),
            ],
        );
    }

    /// The schedule `spec` kept for `lock` as a fire on `host-a` kept it
    /// `ago` seconds ago: its `schedule` event (unless `lost`, as when the
    /// history's oldest events went) and the store's row of it.
    fn keep_schedule(&self, lock: &str, spec: &str, ago: i64, lost: bool) {
        if !lost {
            self.put(
                lock,
                &[format!(
                    r#"{{"v":1,"time":{},"event":"schedule","schedule":"{spec}","by":4242,"host":"host-a"}}"#,
                    now() - ago
                )],
            );
        }
        self.pg.psql(&format!(
            "INSERT INTO onlyone_schedule (name, spec, version) VALUES ('{lock}', '{spec}', 1)"
        ));
    }

    /// Ten thousand events of runs a month old: a fire then takes long
    /// enough to read the history that fires leaving together would all
    /// find the same fires missed, unless they record one at a time.
    fn pad(&self, lock: &str) {
        let old = now() - 30 * 86_400;
        self.pg.psql(&format!(
            "INSERT INTO onlyone_event (name, event) SELECT '{lock}', \
             CASE WHEN i % 2 = 0 THEN \
             '{{\"v\":1,\"time\":' || ({old} + i) || ',\"event\":\"start\",\"token\":\"t' || i / 2 || '\",\"pid\":7}}' \
             ELSE \
             '{{\"v\":1,\"time\":' || ({old} + i) || ',\"event\":\"end\",\"token\":\"t' || i / 2 || '\",\"pid\":7,\"exit\":0}}' \
             END FROM generate_series(0, 9999) AS i"
        ));
    }

    /// The store's history of `lock`: its events of `kind`, in order.
    fn events(&self, lock: &str, kind: &str) -> Vec<Value> {
        let text = self.pg.psql(&format!(
            "SELECT event FROM onlyone_event WHERE name = '{lock}' ORDER BY id"
        ));
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == kind)
            .collect()
    }

    /// The lines of `metrics LOCK` on `host` about its schedule.
    fn schedule_metrics(&self, host: &str, lock: &str) -> Vec<String> {
        let out = self.at(host, &["metrics", lock]);
        out.expect(0);
        out.stdout
            .lines()
            .filter(|l| {
                [
                    "onlyone_missed",
                    "onlyone_oldest_missed",
                    "onlyone_next_fire",
                ]
                .iter()
                .any(|p| l.starts_with(p))
            })
            .map(str::to_owned)
            .collect()
    }
}

/// Fires on two hosts that leave together (`precheck`s and `run`s of
/// `--schedule '0 * * * *'`, three hours after the last run, the history
/// padded so that reading it takes a while), over 12 rounds: each round,
/// the store's history has one `missed` event and one `schedule` event,
/// by a fire of one of the hosts, and `metrics` on either host counts the
/// fires once.
#[test]
fn fires_on_two_hosts_record_each_missed_fire_once() {
    let Some(w) = hosts_world() else { return };
    for round in 0..12 {
        let lock = format!("j{round}");
        w.past_run(&lock, 3 * 3600);
        w.pad(&lock);
        let go = w.path(&format!("go{round}"));
        let kids: Vec<_> = (0..6)
            .map(|i| {
                let host = HOSTS[i % 2];
                let args: &[&str] = if i / 2 % 2 == 0 {
                    &["precheck", "--schedule", "0 * * * *", &lock]
                } else {
                    &["run", "--schedule", "0 * * * *", &lock, "--", "true"]
                };
                on_go(&w.on(host, args), &go)
            })
            .collect();
        let_go(&go, 6);
        let codes: Vec<Option<i32>> = kids
            .into_iter()
            .map(|mut k| k.wait().unwrap().code())
            .collect();
        assert!(
            codes.iter().all(|c| matches!(c, Some(0 | 75))),
            "round {round}: {codes:?}"
        );
        let missed = w.events(&lock, "missed");
        assert_eq!(missed.len(), 1, "round {round}: {missed:#?}");
        let host = missed[0]["host"].as_str().unwrap_or_default();
        assert!(HOSTS.contains(&host), "{missed:?}");
        let count = missed[0]["count"].as_u64().unwrap();
        assert!((2..=3).contains(&count), "{missed:?}");
        assert_eq!(missed[0]["schedule"], "CRON_TZ=UTC 0 * * * *");
        assert_eq!(w.events(&lock, "schedule").len(), 1, "round {round}");
        let total = format!("onlyone_missed_total{{lock=\"{lock}\"}} {count}");
        for h in HOSTS {
            let lines = w.schedule_metrics(h, &lock);
            assert!(lines.contains(&total), "{h}: {lines:?}");
        }
    }
}

/// What one host's fire recorded, and what a lock whose fires stopped has
/// missed since, read the same from both hosts: `history --json` alike,
/// `metrics`' schedule families alike (the live `onlyone_missed_fires` and
/// `onlyone_oldest_missed_fire_timestamp_seconds` of the stopped lock
/// too), `check` OK for the one and CRITICAL naming the same missed fires
/// for the other.
#[test]
fn check_metrics_and_history_agree_from_every_host() {
    let Some(w) = hosts_world() else { return };
    w.past_run("j", 3 * 3600);
    w.at(
        HOSTS[0],
        &["run", "--schedule", "0 * * * *", "j", "--", "true"],
    )
    .expect(0);
    // `stopped` kept its schedule; its crontab line is gone since its
    // last run, three hours ago.
    w.keep_schedule("stopped", "CRON_TZ=UTC 0 * * * *", 3 * 3600 + 10, false);
    w.past_run("stopped", 3 * 3600);
    let seen: Vec<_> = HOSTS
        .iter()
        .map(|h| {
            let history = w.at(h, &["history", "--json", "j"]);
            history.expect(0);
            let stopped = w.at(h, &["history", "--json", "stopped"]);
            stopped.expect(0);
            w.at(h, &["check", "j"]).expect(0);
            let check = w.at(h, &["check", "stopped"]);
            check
                .expect(2)
                .prints("ONLYONE CRITICAL - stopped: missed ");
            let verdict = check.stdout.split(" (last run").next().unwrap().to_owned();
            let mut metrics = w.schedule_metrics(h, "j");
            metrics.extend(w.schedule_metrics(h, "stopped"));
            (
                history.stdout.clone(),
                stopped.stdout.clone(),
                verdict,
                metrics,
            )
        })
        .collect();
    assert_eq!(seen[0], seen[1], "host-a and host-b differ");
    let (history, _, _, metrics) = &seen[0];
    assert!(history.contains("\"outcome\":\"missed\""), "{history}");
    assert!(
        metrics
            .iter()
            .any(|l| l.starts_with("onlyone_missed_fires{lock=\"stopped\"} ") && !l.ends_with(" 0")),
        "{metrics:?}"
    );
    assert!(
        metrics.iter().any(
            |l| l.starts_with("onlyone_oldest_missed_fire_timestamp_seconds{lock=\"stopped\"}")
        ),
        "{metrics:?}"
    );
}

/// The hour (UTC) twelve hours from now, as a cron field: a daily fire
/// there was last 12 to 13 hours ago, and no fire now serves it.
fn hour_far_from_now() -> i64 {
    (now() / 3600 + 12) % 24
}

/// Catch-ups on two hosts that leave together (each host's boot-time
/// line, twice over), each with `--catch-up --schedule SPEC` and `extra`
/// options, on `lock` whose last run was `ago` seconds ago: the command
/// (which writes its host) runs once between them, and the others exit 0
/// and say why not. The lines the hosts said, and the one host that ran.
fn catch_ups_race(w: &World, lock: &str, spec: &str, extra: &[&str], ago: i64) -> Vec<String> {
    w.past_run(lock, ago);
    w.pad(lock);
    let mark = w.path(&format!("{lock}.ran"));
    let script = format!("echo $(hostname) >> '{}'", mark.display());
    let go = w.path(&format!("{lock}.go"));
    let errs: Vec<_> = (0..4).map(|i| w.path(&format!("{lock}.err{i}"))).collect();
    let kids: Vec<_> = (0..4)
        .map(|i| {
            let mut args = vec!["run", "--catch-up", "--schedule", spec];
            args.extend_from_slice(extra);
            args.extend_from_slice(&[lock, "--", "sh", "-c", &script]);
            on_go(&w.on_logged(HOSTS[i % 2], &args, &errs[i]), &go)
        })
        .collect();
    let_go(&go, 4);
    let codes: Vec<Option<i32>> = kids
        .into_iter()
        .map(|mut k| k.wait().unwrap().code())
        .collect();
    let said: Vec<String> = errs
        .iter()
        .map(|e| std::fs::read_to_string(e).unwrap_or_default())
        .collect();
    let ran = std::fs::read_to_string(&mark).unwrap_or_default();
    let dump = w.pg.psql(&format!("SELECT event FROM onlyone_event WHERE name = '{lock}' AND event NOT LIKE '%\"pid\":7%' ORDER BY id"));
    assert_eq!(
        ran.lines().count(),
        1,
        "{lock}: {ran:?} {codes:?} {said:#?} {dump}"
    );
    assert!(codes.iter().all(|c| *c == Some(0)), "{codes:?} {said:#?}");
    let declined = said
        .iter()
        .filter(|s| s.contains(&format!("nothing to catch up for `{lock}`")))
        .count();
    assert_eq!(declined, 3, "{said:#?}");
    said
}

/// Catch-ups on two hosts that leave together, over rounds: after a daily
/// fire missed some 12 hours ago, the one whose fire found it missed runs
/// the command once for it (`running once to catch up`), and the others
/// name the host that found it (or, once it ran, that no fire was
/// missed); at a scheduled time no fire served yet
/// (`--late 1h`: the hourly fire of this hour), the first to come runs,
/// and the others find that time served.
#[test]
fn a_catch_up_runs_once_across_hosts() {
    let Some(w) = hosts_world() else { return };
    let daily = format!("0 {} * * *", hour_far_from_now());
    for round in 0..4 {
        let lock = format!("c{round}");
        let said = catch_ups_race(&w, &lock, &daily, &[], 30 * 3600);
        let missed = w.events(&lock, "missed");
        assert_eq!(missed.len(), 1, "{missed:#?}");
        let finder = missed[0]["host"].as_str().unwrap().to_owned();
        let ran = std::fs::read_to_string(w.path(&format!("{lock}.ran"))).unwrap();
        assert_eq!(ran.trim(), finder, "the fire that found it ran it");
        assert_eq!(
            said.iter()
                .filter(|s| s.contains("running once to catch up"))
                .count(),
            1,
            "{said:#?}"
        );
        // One that looked before the run began names the host whose fire
        // found the fire missed; one after it, the run.
        for line in said.iter().filter(|s| s.contains("by a fire on")) {
            assert!(
                line.contains(&format!("by a fire on `{finder}` (")),
                "{said:#?}"
            );
        }
        assert!(
            said.iter().all(|s| s.contains("running once to catch up")
                || s.contains(&format!("by a fire on `{finder}` (a catch-up there"))
                || s.contains("and not made up for; none missed since")
                || s.contains("no fire missed (the last fire was")),
            "{said:#?}"
        );
    }
    for round in 0..4 {
        let lock = format!("t{round}");
        let said = catch_ups_race(&w, &lock, "0 * * * *", &["--late", "1h"], 3 * 3600);
        assert_eq!(
            said.iter()
                .filter(|s| s.contains(":00 fire already came"))
                .count(),
            3,
            "{said:#?}"
        );
    }
}

/// A fire given no `--schedule` uses the schedule the store keeps: on
/// another host than the one that kept it, a `run` by hand three hours
/// after the last run records the hourly fires missed since, once (a
/// `precheck` on the first host then finds none). When the history no
/// longer has the `schedule` event (its oldest events went), the store's
/// row still keeps it: the fire records the fires missed and writes the
/// schedule back, and `check` and `status` on the other host know it. A
/// fire given another schedule replaces the one kept.
#[test]
fn a_fire_given_no_schedule_uses_the_one_the_store_keeps() {
    let Some(w) = hosts_world() else { return };
    for (lock, lost) in [("j", false), ("lost", true)] {
        w.keep_schedule(lock, "CRON_TZ=UTC 0 * * * *", 3 * 3600 + 10, lost);
        w.past_run(lock, 3 * 3600);
        w.at(HOSTS[1], &["run", lock, "--", "true"]).expect(0);
        w.at(HOSTS[0], &["precheck", lock]).expect(0);
        w.at(HOSTS[1], &["run", lock, "--", "true"]).expect(0);
        let missed = w.events(lock, "missed");
        assert_eq!(missed.len(), 1, "{lock}: {missed:#?}");
        assert_eq!(missed[0]["host"], HOSTS[1]);
        assert_eq!(missed[0]["schedule"], "CRON_TZ=UTC 0 * * * *");
        let count = missed[0]["count"].as_u64().unwrap();
        assert!((2..=3).contains(&count), "{missed:?}");
        assert_eq!(w.events(lock, "schedule").len(), 1, "{lock}");
        w.at(HOSTS[0], &["check", lock]).expect(0);
        let status = w.at(HOSTS[0], &["status", "--json", lock]).json();
        assert_eq!(
            status["locks"][0]["schedule"]["spec"], "CRON_TZ=UTC 0 * * * *",
            "{status:#}"
        );
        assert_eq!(status["locks"][0]["schedule"]["missed_total"], count);
    }
    // A lock whose store keeps no schedule records none.
    w.past_run("none", 3 * 3600);
    w.at(HOSTS[0], &["run", "none", "--", "true"]).expect(0);
    assert!(w.events("none", "missed").is_empty());
    assert!(w.events("none", "schedule").is_empty());
    // Another schedule given replaces the one kept, for every host.
    w.at(
        HOSTS[0],
        &["run", "--schedule", "every 1h", "j", "--", "true"],
    )
    .expect(0);
    let kept =
        w.pg.psql("SELECT spec FROM onlyone_schedule WHERE name = 'j'");
    assert_eq!(kept, "every 1h");
    let status = w.at(HOSTS[1], &["status", "--json", "j"]).json();
    assert_eq!(status["locks"][0]["schedule"]["spec"], "every 1h");
}

/// A store set up before schedules, for a role that may not create
/// tables: a fire given a schedule runs without it, saying what to create
/// (doc/store.md's SQL); a `--catch-up` cannot decide, and is refused
/// (125) with it; a fire given none says nothing. Once the DBA ran the SQL
/// doc/store.md gives, the schedule is kept and the fires missed recorded.
#[test]
fn a_store_set_up_before_schedules_says_what_to_create() {
    let Some(w) = World::new() else { return };
    let url = w.pg.first_setup_for_jobs();
    let at = |args: &[&str]| {
        let mut c = w.oo_at(&url, args);
        c.env("TZ", "UTC").env_remove("ONLYONE_SCHEDULE");
        finish(c, HANG)
    };
    at(&["run", "j", "--", "true"]).expect(0);
    w.pg.psql("DELETE FROM onlyone_event");
    w.past_run("j", 3 * 3600);
    let out = at(&["run", "--schedule", "0 * * * *", "j", "--", "true"]);
    out.expect(0)
        .says("keeps no schedule")
        .says("CREATE TABLE onlyone_schedule")
        .says("GRANT SELECT, INSERT, UPDATE ON onlyone_schedule")
        .says("running without the schedule");
    let out = at(&[
        "run",
        "--catch-up",
        "--schedule",
        "0 * * * *",
        "j",
        "--",
        "true",
    ]);
    out.expect(125)
        .says("--catch-up: ")
        .says("CREATE TABLE onlyone_schedule");
    let plain = at(&["run", "j", "--", "true"]);
    plain.expect(0);
    assert_eq!(plain.stderr, "", "{plain:#?}");
    assert!(w.events("j", "missed").is_empty());
    // The DBA sets it up as doc/store.md says.
    let jobs = w.pg.role("jobs");
    w.pg.psql(&readme_block("store-schedule").replace(" TO jobs;", &format!(" TO {jobs};")));
    w.pg.psql("DELETE FROM onlyone_event");
    w.past_run("j", 3 * 3600);
    let out = at(&["run", "--schedule", "0 * * * *", "j", "--", "true"]);
    out.expect(0);
    assert_eq!(out.stderr, "", "{out:#?}");
    assert_eq!(w.events("j", "missed").len(), 1);
    assert_eq!(
        w.pg.psql("SELECT spec FROM onlyone_schedule WHERE name = 'j'"),
        "CRON_TZ=UTC 0 * * * *"
    );
}
