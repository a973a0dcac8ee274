//! The PostgreSQL store's line of waiters against a real server (a
//! database of each test's own on a throwaway cluster, see `support::pg`): `run --queue` (at most one fire
//! waits, a dead waiter never blocks), waiters served in the order they
//! began to wait (`--wait` and `--queue` alike), contending "hosts" making
//! as many runs each, `status` showing the waiters, and a store set up
//! before the line existed. Each test skips, saying why, where PostgreSQL
//! is not installed (`.ci/run` installs it).

use crate::support;

use std::time::{Duration, Instant};

use support::*;

const HANG: Duration = Duration::from_secs(60);

store_world!("ONLYONE_STORE_QUEUE_MARK");

impl World {
    /// A waiter of `job` (`run --wait DUR`) whose command appends `tag`
    /// to the order file ([`appends`]).
    fn start_waiter(&mut self, url: &str, tag: &str, wait: &str) -> u32 {
        let script = appends(tag);
        self.start(
            url,
            tag,
            &["run", "--wait", wait, "job", "--", "sh", "-c", &script],
        )
    }

    /// A fire of `job` asking for the queue (`run --queue`) whose command
    /// appends `tag` to the order file.
    fn start_queued(&mut self, url: &str, tag: &str) -> u32 {
        let script = appends(tag);
        self.start(
            url,
            tag,
            &["run", "--queue", "job", "--", "sh", "-c", &script],
        )
    }

    /// Starts `onlyone --store URL ARGS...` in the background (killed at
    /// the end), its stderr in `DIR/TAG.err`: its pid.
    fn start(&mut self, url: &str, tag: &str, args: &[&str]) -> u32 {
        let c = self.oo_at(url, args);
        self.start_logged(c, tag)
    }

    /// A run of `job` that holds its lease until `DIR/go` exists: its pid,
    /// once its command runs.
    fn holder(&mut self) -> u32 {
        let ready = self.path("holder.ready");
        let script = "touch \"$DIR/holder.ready\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.02; done";
        let url = self.pg.url();
        let pid = self.start(&url, "holder", &["run", "job", "--", "sh", "-c", script]);
        wait_until("the holder's command", HANG, || {
            assert!(self.exit_of(pid).is_none(), "the holder exited early");
            ready.exists()
        });
        pid
    }

    /// The exit code of a child started by [`World::start`], if it has
    /// exited (a death by signal as 128 + N).
    fn exit_of(&mut self, pid: u32) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let kid = self.kids.iter_mut().find(|k| k.id() == pid).unwrap();
        kid.try_wait()
            .unwrap()
            .map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap()))
    }

    /// Waits for a child's exit: its code.
    fn exit(&mut self, pid: u32, limit: Duration) -> i32 {
        let mut code = None;
        wait_until(&format!("pid {pid} to exit"), limit, || {
            code = self.exit_of(pid);
            code.is_some()
        });
        code.unwrap()
    }

    /// The waiters of `job` as `status --json` shows them.
    fn waiters(&self) -> Vec<serde_json::Value> {
        let s = self.oo(&["status", "--json", "job"]);
        let s = s.expect(0).json();
        s["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == "job")
            .map(|l| l["waiters"].as_array().unwrap().clone())
            .unwrap_or_default()
    }

    /// Waits until `status --json` shows `pids` waiting, in that order.
    fn wait_for_line(&self, pids: &[u32]) {
        let want: Vec<u64> = pids.iter().map(|&p| u64::from(p)).collect();
        let mut seen = Vec::new();
        let ok = wait_for(HANG, || {
            seen = self.waiters();
            seen.iter()
                .map(|w| w["pid"].as_u64().unwrap())
                .collect::<Vec<_>>()
                == want
        });
        assert!(ok, "the line should be {want:?}: {seen:#?}");
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// Lets the holder end.
    fn go(&self) {
        std::fs::write(self.path("go"), "").unwrap();
    }

    /// The rows of the line left in the store.
    fn rows_left(&self) -> i64 {
        self.pg
            .psql("SELECT count(*) FROM onlyone_waiter")
            .parse()
            .unwrap()
    }
}

/// A command that appends `TAG` to `DIR/order`.
fn appends(tag: &str) -> String {
    format!("echo {tag} >> \"$DIR/order\"")
}

/// The fire that finds the lease held and nobody queued waits (and runs
/// once the holder ends); the next one skips at once with 75, says "one
/// already queued", and the store's journal has that skip with its reason.
/// `status` shows the waiter, as queued, in the table and in `--json`.
#[test]
fn store_one_waits_and_the_next_skips() {
    let Some(mut w) = World::new() else { return };
    let url = w.pg.url();
    let h = w.holder();
    let q1 = w.start_queued(&url, "q1");
    w.wait_for_line(&[q1]);
    let line = w.waiters();
    assert_eq!(line[0]["queued"], true, "{line:#?}");
    assert!(line[0]["host"].is_string(), "{line:#?}");
    assert!(line[0]["since_unix"].is_u64(), "{line:#?}");
    let table = w.oo(&["status", "job"]);
    let host = line[0]["host"].as_str().unwrap();
    let cell = format!("[waiting: pid {q1} on {host} (queued)");
    assert!(table.expect(0).stdout.contains(&cell), "{table:#?}");
    let started = Instant::now();
    let out = w.oo(&["run", "--queue", "job", "--", "sh", "-c", &appends("q2")]);
    out.expect(75).says("one already queued");
    assert!(out.stderr.contains(&format!("pid {q1} on ")), "{out:#?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the second fire should skip at once"
    );
    let skips = w.pg.psql(
        "SELECT count(*) FROM onlyone_event WHERE name = 'job' \
         AND event::json->>'event' = 'skip' AND event::json->>'reason' = 'one already queued'",
    );
    assert_eq!(
        skips,
        "1",
        "{}",
        w.pg.psql("SELECT string_agg(event, E'\\n') FROM onlyone_event")
    );
    w.go();
    assert_eq!(w.exit(h, HANG), 0);
    assert_eq!(w.exit(q1, HANG), 0);
    assert_eq!(w.read("order"), "q1\n");
    assert_eq!(
        w.rows_left(),
        0,
        "the waiter's row goes when it takes the lease"
    );
}

/// Two `--queue` fires arriving together at a held lease: exactly one
/// waits, the other skips (75), round after round. The waiter is then
/// ended by a signal, which leaves its place in line.
#[test]
fn store_two_fires_racing_to_queue_exactly_one_waits() {
    let Some(mut w) = World::new() else { return };
    let url = w.pg.url();
    w.holder();
    let rounds = 50;
    let started = Instant::now();
    for round in 0..rounds {
        let args = ["run", "--queue", "job", "--", "true"];
        let a = w.start(&url, &format!("a{round}"), &args);
        let b = w.start(&url, &format!("b{round}"), &args);
        let mut skipped = None;
        wait_until("one of the two fires to skip", HANG, || {
            skipped = [a, b].into_iter().find(|&p| w.exit_of(p).is_some());
            skipped.is_some()
        });
        let skipped = skipped.unwrap();
        let waiter = if skipped == a { b } else { a };
        assert_eq!(w.exit_of(skipped), Some(75), "round {round}");
        w.wait_for_line(&[waiter]);
        assert!(
            w.exit_of(waiter).is_none(),
            "round {round}: both fires ended"
        );
        let tag = if skipped == a { "a" } else { "b" };
        let err = w.read(&format!("{tag}{round}.err"));
        assert!(err.contains("one already queued"), "round {round}: {err}");
        signal(waiter, rustix::process::Signal::TERM);
        assert_eq!(w.exit(waiter, HANG), 128 + 15, "round {round}");
        assert_eq!(
            w.rows_left(),
            0,
            "round {round}: a waiter ended by a signal leaves the line"
        );
    }
    eprintln!("{rounds} rounds in {:?}", started.elapsed());
}

/// A queued waiter killed with SIGKILL leaves a row that has not run out;
/// the next fire on this host sees its process gone and takes its place at
/// once (not after the row's end), then runs once the holder ends.
#[test]
fn store_a_sigkilled_queued_waiter_is_replaced_by_the_next_fire() {
    let Some(mut w) = World::new() else { return };
    let url = w.pg.url();
    let h = w.holder();
    let q1 = w.start_queued(&url, "q1");
    w.wait_for_line(&[q1]);
    signal(q1, rustix::process::Signal::KILL);
    assert_eq!(w.exit(q1, HANG), 128 + 9);
    // Its row is still there, and live by the server's clock (the default
    // lease gives it 12 s).
    let live =
        w.pg.psql("SELECT count(*) FROM onlyone_waiter WHERE until > clock_timestamp()");
    assert_eq!(live, "1");
    let started = Instant::now();
    let q2 = w.start_queued(&url, "q2");
    w.wait_for_line(&[q2]);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the dead waiter's place should be taken at once, not after its row's end: {:?}",
        started.elapsed()
    );
    // The next one skips: q2 is queued.
    w.oo(&["run", "--queue", "job", "--", "true"])
        .expect(75)
        .says("one already queued");
    w.go();
    assert_eq!(w.exit(h, HANG), 0);
    assert_eq!(w.exit(q2, HANG), 0);
    assert_eq!(w.read("order"), "q2\n");
}

/// A fire that finds the lease free but a live waiter in line (here one
/// stopped with SIGSTOP as the holder ends, its row not yet run out) does
/// not go ahead of it: it skips (75), saying that the lease is free but
/// waiters are ahead; the waiter, let go on, takes the lease and runs.
#[test]
fn store_a_new_fire_does_not_go_ahead_of_the_line() {
    let Some(mut w) = World::new() else { return };
    let url = w.pg.url();
    let h = w.holder();
    let waiter = w.start_waiter(&url, "waiter", "1m");
    w.wait_for_line(&[waiter]);
    signal(waiter, rustix::process::Signal::STOP);
    wait_until("the waiter to stop", HANG, || state_of(waiter) == Some('T'));
    w.go();
    assert_eq!(w.exit(h, HANG), 0);
    let out = w.oo(&["run", "job", "--", "sh", "-c", &appends("newcomer")]);
    out.expect(75)
        .says("is free, but 1 waiter(s) are ahead in line")
        .says(&format!("pid {waiter} on "));
    signal(waiter, rustix::process::Signal::CONT);
    assert_eq!(w.exit(waiter, HANG), 0);
    assert_eq!(w.read("order"), "waiter\n");
}

/// `n` waiters, each started once the one before it is seen in line, run
/// in that order once the holder ends.
fn fifo(n: usize) {
    let Some(mut w) = World::new() else { return };
    let url = w.pg.url();
    let h = w.holder();
    let mut pids = Vec::new();
    for i in 0..n {
        let tag = format!("w{i:02}");
        let pid = w.start_waiter(&url, &tag, "2m");
        pids.push(pid);
        w.wait_for_line(&pids);
    }
    w.go();
    assert_eq!(w.exit(h, HANG), 0);
    for &p in &pids {
        assert_eq!(w.exit(p, HANG), 0);
    }
    let want: String = (0..n).map(|i| format!("w{i:02}\n")).collect();
    assert_eq!(w.read("order"), want);
    assert_eq!(w.rows_left(), 0);
}

#[test]
fn store_fifo_order_of_4_waiters() {
    fifo(4);
}

#[test]
fn store_fifo_order_of_20_waiters() {
    fifo(20);
}

/// Three loops contend for one lock, as three hosts whose cron fires again
/// as soon as a run ends: each run waits (`--wait`), so whoever just ran
/// finds the others in line and goes behind them. Over a fixed number of
/// runs, each loop makes as many as the others, give or take 2.
#[test]
fn store_three_contending_loops_make_as_many_runs_each() {
    let Some(w) = World::new() else { return };
    const RUNS: usize = 45;
    let url = w.pg.url();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let order = w.path("order");
    let count = || w.read("order").lines().count();
    std::thread::scope(|s| {
        let loops: Vec<_> = ["A", "B", "C"]
            .into_iter()
            .map(|tag| {
                let (w, url, stop) = (&w, &url, &stop);
                let script = format!("{}; sleep 0.1", appends(tag));
                s.spawn(move || {
                    let mut fires = 0;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        let out = finish(
                            w.oo_at(
                                url,
                                &["run", "--wait", "1m", "job", "--", "sh", "-c", &script],
                            ),
                            HANG,
                        );
                        out.expect(0);
                        fires += 1;
                    }
                    fires
                })
            })
            .collect();
        let ok = wait_for(Duration::from_secs(120), || count() >= RUNS);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for l in loops {
            l.join().unwrap();
        }
        assert!(ok, "{RUNS} runs were not made: {}", w.read("order"));
    });
    let text = std::fs::read_to_string(&order).unwrap();
    let first: Vec<&str> = text.lines().take(RUNS).collect();
    let per: Vec<usize> = ["A", "B", "C"]
        .iter()
        .map(|t| first.iter().filter(|l| *l == t).count())
        .collect();
    eprintln!(
        "runs per loop over the first {RUNS}: A {} B {} C {}",
        per[0], per[1], per[2]
    );
    let (lo, hi) = (per.iter().min().unwrap(), per.iter().max().unwrap());
    assert!(hi - lo <= 2, "runs per loop {per:?} (order {first:?})");
}

/// A store set up before the line existed, by a DBA, for a role that may
/// not create tables: `--queue` is refused, naming the table and its SQL;
/// `--wait` still works, unordered, with one warning that names
/// doc/store.md.
#[test]
fn store_without_the_line_refuses_queue_and_warns_on_wait() {
    let Some(mut w) = World::new() else { return };
    let url = w.pg.first_setup_for_jobs();
    let out = finish(
        w.oo_at(&url, &["run", "--queue", "job", "--", "true"]),
        HANG,
    );
    out.expect(125)
        .says("--queue needs the store's table onlyone_waiter")
        .says("CREATE TABLE onlyone_waiter")
        .says("GRANT USAGE ON SEQUENCE onlyone_waiter_ticket_seq");
    // A plain run works.
    finish(w.oo_at(&url, &["run", "job", "--", "true"]), HANG).expect(0);
    let script = "touch \"$DIR/holder.ready\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.02; done";
    let h = w.start(&url, "holder", &["run", "job", "--", "sh", "-c", script]);
    let ready = w.path("holder.ready");
    wait_until("the holder's command", HANG, || ready.exists());
    let waiter = w.start_waiter(&url, "waiter", "1m");
    let warned = "no table onlyone_waiter";
    wait_until("the waiter's warning", HANG, || {
        w.read("waiter.err").contains(warned)
    });
    w.go();
    assert_eq!(w.exit(h, HANG), 0);
    assert_eq!(w.exit(waiter, HANG), 0);
    let err = w.read("waiter.err");
    assert_eq!(err.matches(warned).count(), 1, "{err}");
    assert!(err.contains("doc/store.md"), "{err}");
    assert_eq!(w.read("order"), "waiter\n");
    let owners =
        w.pg.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'onlyone_waiter'");
    assert_eq!(owners, "0", "the role could not create the line's table");
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig)
        .unwrap();
}
