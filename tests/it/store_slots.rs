//! `--slots N` with the PostgreSQL store (a database of each test's own
//! on a throwaway cluster, see `support::pg`): a lock's N lease rows (`NAME`, `NAME#1`, ...), each a
//! lease with its own fence, taken by "hosts" that are processes. Counted
//! inside the commands, as for a lock directory (`slots.rs`). Each test
//! skips, saying why, where PostgreSQL is not installed (`.ci/run`
//! installs it).

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::*;

const HANG: Duration = Duration::from_secs(60);

store_world!("ONLYONE_STORE_SLOTS_MARK");

impl World {
    /// A run of `j` with `--slots N` (and `more`) whose command writes
    /// its slot and fence to `DIR/held.TAG`, then waits for `DIR/go.TAG`:
    /// its pid, once its command runs.
    fn hold(&mut self, n: &str, tag: &str, more: &[&str]) -> u32 {
        let pid = self.fire(n, tag, more);
        let held = self.path(&format!("held.{tag}"));
        wait_until(&format!("{tag}'s command"), HANG, || held.exists());
        pid
    }

    /// [`World::hold`], not waited for: its pid.
    fn fire(&mut self, n: &str, tag: &str, more: &[&str]) -> u32 {
        let script = format!(
            "echo \"$ONLYONE_SLOT $ONLYONE_FENCE\" > \"$DIR/held.{tag}.tmp\"; \
             mv \"$DIR/held.{tag}.tmp\" \"$DIR/held.{tag}\"; \
             while [ ! -e \"$DIR/go.{tag}\" ]; do sleep 0.02; done"
        );
        let mut args = vec!["run", "--slots", n];
        args.extend_from_slice(more);
        args.extend_from_slice(&["j", "--", "sh", "-c", &script]);
        let c = self.oo_at(&self.pg.url(), &args);
        self.start_logged(c, tag)
    }

    /// The slot and fence the run `tag` was given.
    fn held(&self, tag: &str) -> (u32, i64) {
        let s = std::fs::read_to_string(self.path(&format!("held.{tag}"))).unwrap();
        let (slot, fence) = s.trim().split_once(' ').unwrap();
        (slot.parse().unwrap(), fence.parse().unwrap())
    }

    /// Lets the run `tag` end.
    fn go(&self, tag: &str) {
        std::fs::write(self.path(&format!("go.{tag}")), "").unwrap();
    }

    /// The exit code of a child started in the background, if it has
    /// ended (a death by signal as 128 + N).
    fn exit_of(&mut self, pid: u32) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let kid = self.kids.iter_mut().find(|k| k.id() == pid).unwrap();
        kid.try_wait()
            .unwrap()
            .map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap()))
    }

    /// The exit code of a child started in the background, once it ends.
    fn exit(&mut self, pid: u32) -> i32 {
        let mut code = None;
        wait_until(&format!("pid {pid} to exit"), HANG, || {
            code = self.exit_of(pid);
            code.is_some()
        });
        code.unwrap()
    }
}

/// 8 "hosts" (processes, each its own connection) fire `run --slots 3`
/// 6 times each against one store: never more than 3 commands alive at
/// once, counted inside the commands, and 3 reached; every fire ran or
/// skipped (75), and the history counts each run once.
#[test]
fn store_slots_at_most_3_of_8_contenders_and_3_reached() {
    let Some(w) = World::new() else { return };
    let log = w.path("log");
    put(&log, "");
    let l = log.display();
    let cmd = format!(
        "echo \"S $$ $ONLYONE_SLOT\" >> {l}; sleep 0.3; echo \"E $$ $ONLYONE_SLOT\" >> {l}"
    );
    let fire = format!(
        "for i in $(seq 6); do {BIN} --store '{}' run -q --slots 3 j -- sh -c '{cmd}'; \
         c=$?; [ $c = 0 ] || [ $c = 75 ] || exit $c; done",
        w.pg.url()
    );
    let kids: Vec<_> = (0..8)
        .map(|_| {
            let mut c = w.program("sh");
            c.args(["-c", &fire]);
            c.spawn().unwrap()
        })
        .collect();
    let failed = kids
        .into_iter()
        .filter_map(|mut k| (!k.wait().unwrap().success()).then_some(()))
        .count();
    assert_eq!(failed, 0, "a contender failed");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        crate::slots::most_at_once(&text, 3),
        3,
        "three at once never: {text}"
    );
    let runs = text.lines().filter(|l| l.starts_with("S ")).count();
    let h = w.oo(&["history", "--json", "j"]).expect(0).stdout.clone();
    let ended = h
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["outcome"] == "exit" && r["exit"] == 0)
        .count();
    assert_eq!(ended, runs, "{h}");
    // Every slot's lease was let go.
    let live =
        w.pg.psql("SELECT count(*) FROM onlyone_lease WHERE lock_until > clock_timestamp()");
    assert_eq!(live, "0");
}

/// Three runs hold the three slots of `j`, each its own lease row and
/// slot (0, 1, 2 in `ONLYONE_SLOT`, a fence in `ONLYONE_FENCE`); a fourth
/// fire skips (75), naming `j`. status, metrics and check count all
/// three. The wrapper of slot 1's run is killed with SIGKILL: its watchdog
/// ends its command, and once its lease runs out the next fire takes slot
/// 1, its fence grown. A fire with another number of slots, or with none,
/// is refused (125) while runs hold slots.
#[test]
fn store_slots_full_pool_skips_a_dead_holders_slot_is_taken_and_n_is_the_locks() {
    let Some(mut w) = World::new() else { return };
    // A lease long enough that a busy host renews it in time.
    let lease = ["--lease", "5s", "--kill-after", "200ms"];
    for tag in ["a", "b", "c"] {
        w.hold("3", tag, &lease);
    }
    let slots: BTreeSet<u32> = ["a", "b", "c"].iter().map(|t| w.held(t).0).collect();
    assert_eq!(slots, [0, 1, 2].into());
    let rows =
        w.pg.psql("SELECT string_agg(name || ':' || slots, ',' ORDER BY name) FROM onlyone_lease");
    assert_eq!(rows, "j:3,j#1:3,j#2:3");
    w.oo(&["run", "--slots", "3", "j", "--", "true"])
        .expect(75)
        .says("`j`");

    let status = w.oo(&["status", "--json", "j"]).expect(0).json();
    let lock = &status["locks"][0];
    assert_eq!(lock["slot_count"], 3, "{status:#}");
    assert_eq!(
        lock["slot_holders"].as_array().unwrap().len(),
        2,
        "{status:#}"
    );
    let table = w.oo(&["status", "j"]).expect(0).stdout.clone();
    assert!(table.contains("j[1]") && table.contains("j[2]"), "{table}");
    let metrics = w.oo(&["metrics", "j"]).expect(0).stdout.clone();
    assert!(
        metrics.contains("onlyone_slots{lock=\"j\"} 3")
            && metrics.contains("onlyone_slots_held{lock=\"j\"} 3"),
        "{metrics}"
    );

    let check = w.oo(&["check", "j"]);
    check.expect(0);
    assert!(check.stdout.starts_with("ONLYONE OK - j"), "{check:#?}");

    // N is the lock's.
    w.oo(&["run", "--slots", "2", "j", "--", "true"])
        .expect(125)
        .says("`j` is held with 3 slots, and this take asks for 2");
    w.oo(&["run", "j", "--", "true"])
        .expect(125)
        .says("`j` is held with 3 slots, and this take asks for 1");

    // Slot 1's wrapper dies.
    let tag = ["a", "b", "c"]
        .into_iter()
        .find(|t| w.held(t).0 == 1)
        .unwrap();
    let fence = w.held(tag).1;
    let pid: u32 =
        w.pg.psql("SELECT pid FROM onlyone_lease WHERE name = 'j#1'")
            .parse()
            .unwrap();
    kill9_pid(pid);
    assert_eq!(w.exit(pid), 137);
    w.hold("3", "d", &["--wait", "30s"]);
    assert_eq!(w.held("d"), (1, fence + 1), "slot 1 again, its fence grown");
    // The killed run is over, though three runs hold the slots.
    let check = w.oo(&["check", "j"]);
    check.expect(2);
    assert!(check.stdout.contains("abandoned"), "{check:#?}");
    let history = w.oo(&["history", "--json", "j"]).expect(0).stdout.clone();
    let abandoned: Vec<u64> = history
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["outcome"] == "abandoned")
        .map(|r| r["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(abandoned, [u64::from(pid)]);
    let status = w.oo(&["status", "--json", "j"]).expect(0).json();
    assert_eq!(
        status["locks"][0]["last_run"]["outcome"], "abandoned",
        "{status:#}"
    );
    for t in ["a", "b", "c", "d"] {
        w.go(t);
    }
}

/// Both slots of 2 are held; fires A then B wait (`--wait`) in the lock's
/// one line. When a slot frees, A, the head, takes it while B waits on;
/// when A's run ends, B takes a slot. `status` lists the waiters in order.
#[test]
fn store_slots_waiters_are_served_in_order_as_slots_free() {
    let Some(mut w) = World::new() else { return };
    let a0 = w.hold("2", "h0", &[]);
    let a1 = w.hold("2", "h1", &[]);
    let out = w.path("out");
    // A fire that waits (`--wait 60s`), its command noting TAG in `out`
    // and holding its slot until `DIR/go.TAG`: its pid.
    let fire = |w: &mut World, tag: &str| {
        let script = format!(
            "echo {tag} >> \"{}\"; while [ ! -e \"$DIR/go.{tag}\" ]; do sleep 0.02; done",
            out.display()
        );
        let args = [
            "run", "--slots", "2", "--wait", "60s", "j", "--", "sh", "-c", &script,
        ];
        let c = w.oo_at(&w.pg.url(), &args);
        w.start_logged(c, tag)
    };
    let a = fire(&mut w, "A");
    let waiting = |w: &World| -> Vec<u64> {
        let s = w.oo(&["status", "--json", "j"]).expect(0).json();
        s["locks"][0]["waiters"]
            .as_array()
            .map(|a| a.iter().map(|x| x["pid"].as_u64().unwrap()).collect())
            .unwrap_or_default()
    };
    wait_until("A in line", HANG, || waiting(&w) == [u64::from(a)]);
    let b = fire(&mut w, "B");
    wait_until("B behind A", HANG, || {
        waiting(&w) == [u64::from(a), u64::from(b)]
    });
    let ran = || std::fs::read_to_string(&out).unwrap_or_default();

    w.go("h1");
    assert_eq!(w.exit(a1), 0);
    wait_until("A runs", HANG, || ran() == "A\n");
    wait_until("B alone in line", HANG, || waiting(&w) == [u64::from(b)]);
    assert_eq!(ran(), "A\n", "B ran before a second slot freed");

    w.go("A");
    assert_eq!(w.exit(a), 0);
    wait_until("B runs", HANG, || ran() == "A\nB\n");
    w.go("B");
    w.go("h0");
    assert_eq!(w.exit(b), 0);
    assert_eq!(w.exit(a0), 0);
    assert_eq!(w.pg.psql("SELECT count(*) FROM onlyone_waiter"), "0");
}

/// `stop --pid` asks only the holder whose wrapper has that pid; a pid
/// no holder has stops nothing (125, naming the holders); `stop` ends the
/// run of every slot. `precheck --slots 2` answers 75 only while both
/// slots are held.
#[test]
fn store_slots_stop_one_by_pid_or_all_and_precheck_counts_them() {
    let Some(mut w) = World::new() else { return };
    let a = w.hold("2", "a", &[]);
    w.oo(&["precheck", "--slots", "2", "j"]).expect(0);
    let b = w.hold("2", "b", &[]);
    let c = w.fire("2", "c", &["--wait", "60s"]);
    w.oo(&["precheck", "--slots", "2", "j"]).expect(75);

    w.oo(&["stop", "--pid", "999999", "j"])
        .expect(125)
        .says(&format!(
            "no run of `j` has pid 999999: it is held by pid {a}, pid {b}"
        ));
    assert!(w.exit_of(a).is_none() && w.exit_of(b).is_none());

    // c waits in line; b is stopped alone, and c takes its slot.
    w.oo(&["stop", "--pid", &b.to_string(), "j"]).expect(0);
    assert_ne!(w.exit(b), 0);
    let (slot_b, _) = w.held("b");
    let held_c = w.path("held.c");
    wait_until("c's command", HANG, || held_c.exists());
    assert_eq!(w.held("c").0, slot_b);
    assert!(w.exit_of(a).is_none(), "a was stopped with b");

    w.oo(&["stop", "j"]).expect(0).says("1 more run");
    assert_ne!(w.exit(a), 0);
    assert_ne!(w.exit(c), 0);
    w.oo(&["precheck", "--slots", "2", "j"]).expect(0);
    let live =
        w.pg.psql("SELECT count(*) FROM onlyone_lease WHERE lock_until > clock_timestamp()");
    assert_eq!(live, "0");
}

/// A store whose lease table was set up before slots, for a role that may
/// not change it: a plain run works as before; `--slots 2` is refused,
/// naming the column and the statement that adds it. Once added, it runs.
#[test]
fn store_slots_need_the_column_a_role_may_not_add() {
    let Some(w) = World::new() else { return };
    let url = w.pg.first_setup_for_jobs();
    finish(w.oo_at(&url, &["run", "j", "--", "true"]), HANG).expect(0);
    finish(
        w.oo_at(&url, &["run", "--slots", "2", "j", "--", "true"]),
        HANG,
    )
    .expect(125)
    .says("set up before slots")
    .says("ALTER TABLE onlyone_lease ADD COLUMN slots integer");
    w.pg.psql("ALTER TABLE onlyone_lease ADD COLUMN slots integer");
    let out = finish(
        w.oo_at(
            &url,
            &[
                "run",
                "--slots",
                "2",
                "j",
                "--",
                "sh",
                "-c",
                "echo $ONLYONE_SLOT",
            ],
        ),
        HANG,
    );
    out.expect(0);
    assert_eq!(out.stdout.trim(), "0");
}

/// `status` of a store whose database sorts by a language's collation
/// (ICU), where `sync-a` comes between `sync` and `sync#1`: each lock's
/// slot rows are still listed under it, never as a lock of their own.
#[test]
fn store_slots_status_groups_a_locks_rows_whatever_the_collation() {
    let Some(mut w) = World::new() else { return };
    // Beside the test's own database, and dropped with it.
    let icu = format!("{}_icu", w.pg.name());
    let made = std::panic::catch_unwind(|| {
        w.pg.psql(&format!(
            "CREATE DATABASE {icu} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' \
             LOCALE 'C.UTF-8'"
        ))
    });
    if made.is_err() {
        eprintln!("skipped: this PostgreSQL makes no ICU database");
        return;
    }
    let url =
        w.pg.url()
            .replace(&format!("/{}?", w.pg.name()), &format!("/{icu}?"));
    for (tag, n, name) in [("a", "2", "sync"), ("b", "2", "sync"), ("c", "1", "sync-a")] {
        let script = format!("touch \"$DIR/held.{tag}\"; exec sleep 1000");
        let args = ["run", "--slots", n, name, "--", "sh", "-c", &script];
        let c = w.oo_at(&url, &args);
        w.start_logged(c, tag);
        let held = w.path(&format!("held.{tag}"));
        wait_until(&format!("{tag}'s command"), HANG, || held.exists());
    }
    let status = finish(w.oo_at(&url, &["status", "--json"]), HANG)
        .expect(0)
        .json();
    let names: Vec<&str> = status["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sync", "sync-a"], "{status:#}");
    assert_eq!(status["locks"][0]["slot_holders"][0]["name"], "sync[1]");
    let table = finish(w.oo_at(&url, &["status"]), HANG)
        .expect(0)
        .stdout
        .clone();
    let rows: Vec<&str> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(rows, ["sync", "sync[1]", "sync-a"], "{table}");
}

/// "Last" is the last to end, in a store too: A starts first and ends last
/// with exit 3; B starts later, beside it, and ends first with exit 0.
/// `check` is CRITICAL (the last run failed), `onlyone_last_exit_code` 3,
/// `last_run` in `status --json` A's exit 3, `history` A first, then B.
/// Free, the lock keeps its slot families: `onlyone_slots` 2, 0 held.
#[test]
fn store_slots_the_last_run_is_the_last_to_end() {
    let Some(mut w) = World::new() else { return };
    let run = |w: &mut World, tag: &str, code: i32| {
        let script = format!(
            "touch \"$DIR/held.{tag}\"; while [ ! -e \"$DIR/go.{tag}\" ]; do sleep 0.02; done; \
             exit {code}"
        );
        let c = w.oo_at(
            &w.pg.url(),
            &["run", "--slots", "2", "j", "--", "sh", "-c", &script],
        );
        let pid = w.start_logged(c, tag);
        let held = w.path(&format!("held.{tag}"));
        w.wait_ready(pid, &held, HANG);
        pid
    };
    let a = run(&mut w, "a", 3);
    let b = run(&mut w, "b", 0);
    w.go("b");
    assert_eq!(w.exit(b), 0);
    w.go("a");
    assert_eq!(w.exit(a), 3);

    let check = w.oo(&["check", "j"]);
    check.expect(2);
    assert!(
        check
            .stdout
            .starts_with("ONLYONE CRITICAL - j: the last run failed (exit 3"),
        "{check:#?}"
    );
    w.oo(&["metrics", "j"])
        .expect(0)
        .prints("onlyone_last_exit_code{lock=\"j\"} 3\n")
        .prints("onlyone_slots{lock=\"j\"} 2\n")
        .prints("onlyone_slots_held{lock=\"j\"} 0\n");
    let status = w.oo(&["status", "--json", "j"]).expect(0).json();
    let last = &status["locks"][0]["last_run"];
    assert_eq!(
        (&last["exit"], &last["result"]),
        (&3.into(), &"failure".into()),
        "{status:#}"
    );
    let history = w.oo(&["history", "--json", "j"]).expect(0).stdout.clone();
    let runs: Vec<(u64, i64)> = history
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|r| (r["pid"].as_u64().unwrap(), r["exit"].as_i64().unwrap()))
        .collect();
    assert_eq!(runs, [(u64::from(a), 3), (u64::from(b), 0)], "{history}");
}

/// The plans that the server's `auto_explain` logged after byte `from` of
/// its log for the statements whose text has `marker`: each plan's lines.
fn plans_after(w: &World, from: usize, marker: &str) -> Vec<String> {
    let log = std::fs::read(w.pg.data().parent().unwrap().join("log")).unwrap();
    let log = String::from_utf8_lossy(&log[from..]).into_owned();
    // An entry is a line that starts the log's prefix, then its lines
    // indented (a plan's).
    let mut entries: Vec<String> = Vec::new();
    for line in log.lines() {
        match entries.last_mut() {
            Some(e) if line.starts_with([' ', '\t']) => {
                e.push('\n');
                e.push_str(line);
            }
            _ => entries.push(line.to_owned()),
        }
    }
    entries
        .into_iter()
        .filter(|e| e.contains("plan:") && e.contains(marker))
        .collect()
}

/// The store finds a lock's slot rows through an index, never by reading
/// the whole lease table: with 10,000 other locks in it (its statistics up
/// to date), the plans the server makes for the statements onlyone runs
/// (as `auto_explain` logs them) for a take of a slot (`run --slots 2`)
/// and for `check` of the lock read `onlyone_lease` through
/// `onlyone_lease_slots`, with no sequential scan of it; and the take
/// works.
#[test]
fn store_slots_a_take_finds_the_slot_rows_through_an_index() {
    let Some(w) = World::new() else { return };
    w.oo(&["run", "--slots", "2", "j", "--", "true"]).expect(0);
    w.pg.psql(
        "INSERT INTO onlyone_lease (name, epoch, token, since, lock_until) \
         SELECT 'lock-' || g, 1, 't', now(), now() FROM generate_series(1, 10000) g",
    );
    w.pg.psql("ANALYZE onlyone_lease");
    // In the test's database only: the server is shared.
    let db = w.pg.name();
    w.pg.psql(&format!(
        "ALTER ROLE onlyone IN DATABASE {db} SET session_preload_libraries = 'auto_explain'"
    ));
    w.pg.psql(&format!(
        "ALTER ROLE onlyone IN DATABASE {db} SET auto_explain.log_min_duration = 0"
    ));
    let from = std::fs::metadata(w.pg.data().parent().unwrap().join("log"))
        .unwrap()
        .len() as usize;
    let out = w.oo(&[
        "run",
        "--slots",
        "2",
        "j",
        "--",
        "sh",
        "-c",
        "echo $ONLYONE_SLOT",
    ]);
    assert_eq!(out.expect(0).stdout.trim(), "0");
    w.oo(&["check", "j"]).expect(0);
    let mut plans = Vec::new();
    wait_until("the plans logged", HANG, || {
        let take = plans_after(&w, from, "differ AS");
        let rows = plans_after(&w, from, "ORDER BY name LIMIT");
        plans = [take.clone(), rows.clone()].concat();
        !take.is_empty() && !rows.is_empty()
    });
    for plan in &plans {
        assert!(
            plan.contains("Index Scan on onlyone_lease_slots")
                && !plan.contains("Seq Scan on onlyone_lease "),
            "{plan}"
        );
    }
}

/// A store set up before the index of the lease rows' names, for a role
/// that may not create it: takes of slots work as before, and `status`
/// says what is missing and the statement that creates it. The first
/// onlyone that connects as the table's owner creates it; then `status`
/// says nothing of it.
#[test]
fn store_slots_an_older_store_gets_the_index_from_its_owner() {
    let Some(w) = World::new() else { return };
    let jobs = w.pg.first_setup_for_jobs();
    w.pg.psql("ALTER TABLE onlyone_lease ADD COLUMN slots integer");
    let run = ["run", "--slots", "2", "j", "--", "true"];
    finish(w.oo_at(&jobs, &run), HANG).expect(0);
    let status = finish(w.oo_at(&jobs, &["status"]), HANG);
    status
        .expect(0)
        .says("has no index onlyone_lease_slots and this role may not create it")
        .says("CREATE INDEX onlyone_lease_slots ON onlyone_lease (name COLLATE \"C\");");
    let indexed = "SELECT to_regclass('onlyone_lease_slots') IS NOT NULL";
    assert_eq!(w.pg.psql(indexed), "f");

    w.oo(&run).expect(0);
    assert_eq!(w.pg.psql(indexed), "t");
    finish(w.oo_at(&jobs, &run), HANG).expect(0);
    let status = finish(w.oo_at(&jobs, &["status"]), HANG);
    assert!(!status.expect(0).stderr.contains("index"), "{status:#?}");
}
