//! One conformance suite, every engine: the store's behaviour, written
//! once and run against PostgreSQL (a database of the test's own on the
//! test binary's shared cluster, `support::pg`) and against etcd (a key
//! prefix of the test's own on the test binary's shared member,
//! `support::etcd`). Hosts are processes: each `onlyone` is one, and
//! "another host" runs in a UTS namespace of its own with another host
//! name (as root; else on this host's name). A test skips, saying why,
//! where an engine's server is not installed.
//!
//! `conformance! { fn NAME(w: &mut World) { ... } }` makes `pg::NAME`
//! and `etcd::NAME` of each.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

const HANG: Duration = Duration::from_secs(60);

/// The engines a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Pg,
    Etcd,
}

/// A test's world: a store of its own, a temp dir and its processes.
pub struct World {
    sb: Sandbox,
    /// The store's URL.
    pub url: String,
    pub engine: Engine,
    /// The PostgreSQL database, kept while the test runs.
    _db: Option<support::pg::Db>,
}

derefs_to_sandbox!(World);

impl World {
    /// A store of the test's own, or `None` (said) where the engine's
    /// server is not installed.
    pub fn new(engine: Engine) -> Option<World> {
        let made = match engine {
            Engine::Pg => support::pg::Db::new().map(|db| (db.url(), Some(db))),
            Engine::Etcd => support::etcd::Etcd::url_of_test().map(|u| (u, None)),
        };
        match made {
            Ok((url, db)) => Some(World {
                sb: Sandbox::new("ONLYONE_STORE_MARK"),
                url,
                engine,
                _db: db,
            }),
            Err(why) => {
                eprintln!("skipped: {why}");
                None
            }
        }
    }

    /// `onlyone --store URL ARGS...`, `DIR` the sandbox.
    pub fn cmd(&self, args: &[&str]) -> Command {
        self.store_cmd(&self.url, args)
    }

    /// The same, as host `host` (a UTS namespace of its own, as root).
    pub fn cmd_on(&self, host: &str, args: &[&str]) -> Command {
        let inner = self.cmd(args);
        if !is_root() || !have("unshare") {
            return inner;
        }
        let mut c = self.program("unshare");
        c.args(["--uts", "sh", "-c", "hostname \"$0\" && exec \"$@\"", host])
            .arg(inner.get_program())
            .args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }

    /// Runs `onlyone ARGS...` against the store, waited for.
    pub fn oo(&self, args: &[&str]) -> Out {
        finish(self.cmd(args), HANG)
    }

    /// Runs it as host `host`.
    pub fn oo_on(&self, host: &str, args: &[&str]) -> Out {
        finish(self.cmd_on(host, args), HANG)
    }

    /// Starts `onlyone run OPTS NAME -- sh -c SCRIPT` as host `host` in the
    /// background; `READY` is set to `DIR/TAG.ready`, its stderr goes to
    /// `DIR/TAG.err`. With `wait`, returns once the file exists.
    pub fn start(
        &mut self,
        host: &str,
        tag: &str,
        opts: &[&str],
        name: &str,
        script: &str,
        wait: bool,
    ) -> u32 {
        let ready = self.path(&format!("{tag}.ready"));
        let mut args = vec!["run"];
        args.extend_from_slice(opts);
        args.extend_from_slice(&[name, "--", "sh", "-c", script]);
        let mut c = self.cmd_on(host, &args);
        c.env("READY", &ready);
        let pid = self.start_logged(c, tag);
        if wait {
            self.wait_ready(pid, &ready, HANG);
        }
        pid
    }

    /// A holder of `name` until `DIR/go` exists, whose command writes its
    /// fence to `DIR/TAG.fence`.
    pub fn holder(&mut self, host: &str, tag: &str, opts: &[&str], name: &str) -> u32 {
        let script = format!(
            "echo $ONLYONE_FENCE > \"$DIR/{tag}.fence\"; touch \"$READY\"; \
             while [ ! -e \"$DIR/go\" ]; do sleep 0.02; done"
        );
        self.start(host, tag, opts, name, &script, true)
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    pub fn fence(&self, tag: &str) -> i64 {
        let f = self.read(&format!("{tag}.fence"));
        f.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{tag}'s fence: {f:?}"))
    }

    /// Lets the holders end.
    pub fn go(&self) {
        std::fs::write(self.path("go"), "").unwrap();
    }

    /// Waits for a child's exit: its code (a signal's as 128 + N).
    pub fn exit(&mut self, pid: u32, limit: Duration) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        let s = self.exit_of_kid(pid, limit);
        s.code().unwrap_or_else(|| 128 + s.signal().unwrap())
    }

    /// The exit code of a child started by [`World::start`], if it has
    /// exited (a signal's as 128 + N).
    pub fn exit_now(&mut self, pid: u32) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let kid = self.kids.iter_mut().find(|k| k.id() == pid).unwrap();
        kid.try_wait()
            .unwrap()
            .map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap()))
    }

    /// The waiters `status --json` shows for `name`.
    pub fn waiters(&self, name: &str) -> Vec<serde_json::Value> {
        let s = self.oo(&["status", "--json", name]).expect(0).json();
        s["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .map(|l| l["waiters"].as_array().unwrap().clone())
            .unwrap_or_default()
    }

    /// Waits until `status` shows exactly `pids` in `name`'s line, in order.
    pub fn wait_for_line(&self, name: &str, pids: &[u32]) {
        let want: Vec<u64> = pids.iter().map(|&p| u64::from(p)).collect();
        let mut seen = Vec::new();
        let ok = wait_for(HANG, || {
            seen = self.waiters(name);
            seen.iter()
                .map(|w| w["pid"].as_u64().unwrap_or(0))
                .collect::<Vec<_>>()
                == want
        });
        assert!(ok, "the line should be {want:?}: {seen:#?}");
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: rustix::process::Signal) {
    let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig);
}

/// Each test, once per engine: `pg::NAME` and `etcd::NAME`.
macro_rules! conformance {
    ($( $(#[doc = $doc:literal])* fn $name:ident($w:ident: &mut World) $body:block )*) => {
        $( $(#[doc = $doc])* fn $name($w: &mut World) $body )*

        mod pg {
            $( #[test] fn $name() {
                if let Some(mut w) = super::World::new(super::Engine::Pg) { super::$name(&mut w) }
            } )*
        }

        mod etcd {
            $( #[test] fn $name() {
                if let Some(mut w) = super::World::new(super::Engine::Etcd) { super::$name(&mut w) }
            } )*
        }
    };
}

conformance! {
    /// A second host skips (75, naming the holder and its host); `precheck`
    /// says 75 and `status --json` shows the holder; once it ends cleanly
    /// the next take is at once, and its fence is larger.
    fn take_skip_and_the_fence_grows(w: &mut World) {
        let a = w.holder("host-a", "a", &[], "job");
        let out = w.oo_on("host-b", &["run", "job", "--", "true"]);
        out.expect(75).says("holds the lease as pid").says(&format!("pid {a} on "));
        w.oo_on("host-b", &["precheck", "job"]).expect(75);
        let s = w.oo_on("host-b", &["status", "--json"]).json();
        let lock = &s["locks"][0];
        assert_eq!(lock["name"], "job", "{s:#}");
        assert_eq!(lock["state"], "held", "{s:#}");
        assert_eq!(lock["pid"], a, "{s:#}");
        assert_eq!(lock["fence"], w.fence("a"), "{s:#}");
        assert!(lock["lease_left_seconds"].as_f64().unwrap() > 0.0, "{s:#}");
        if is_root() {
            assert_eq!(lock["host"], "host-a", "{s:#}");
        }
        w.go();
        assert_eq!(w.exit(a, HANG), 0);
        let started = Instant::now();
        let script = "echo $ONLYONE_FENCE > \"$DIR/b.fence\"";
        w.oo_on("host-b", &["run", "job", "--", "sh", "-c", script]).expect(0);
        assert!(started.elapsed() < Duration::from_secs(5), "a clean end hands over at once");
        assert!(w.fence("b") > w.fence("a"), "the fence grows: {} then {}", w.fence("a"), w.fence("b"));
        w.oo(&["precheck", "job"]).expect(0);
    }

    /// Fences of one lock over many takes, from two hosts in turn: each
    /// larger than the one before.
    fn the_fence_is_strictly_increasing(w: &mut World) {
        let script = "echo $ONLYONE_FENCE >> \"$DIR/fences\"";
        for i in 0..12 {
            let host = if i % 2 == 0 { "host-a" } else { "host-b" };
            w.oo_on(host, &["run", "job", "--", "sh", "-c", script]).expect(0);
            // Another lock's takes between them change nothing.
            w.oo_on(host, &["run", "other", "--", "true"]).expect(0);
        }
        let fences: Vec<i64> = w.read("fences").lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(fences.len(), 12);
        let backwards = fences.windows(2).filter(|p| p[1] <= p[0]).count();
        assert_eq!(backwards, 0, "fences went backwards or repeated: {fences:?}");
    }

    /// Waiters (`--wait`) of several hosts, each started once the one
    /// before it is in line, run in that order once the holder ends.
    fn waiters_run_in_the_order_they_began_to_wait(w: &mut World) {
        let h = w.holder("host-a", "h", &[], "job");
        let mut pids = Vec::new();
        for i in 0..4 {
            let tag = format!("w{i}");
            let script = format!("echo {tag} >> \"$DIR/order\"");
            let host = format!("host-{i}");
            let pid = w.start(&host, &tag, &["--wait", "2m"], "job", &script, false);
            pids.push(pid);
            w.wait_for_line("job", &pids);
        }
        w.go();
        assert_eq!(w.exit(h, HANG), 0);
        for &p in &pids {
            assert_eq!(w.exit(p, HANG), 0);
        }
        assert_eq!(w.read("order"), "w0\nw1\nw2\nw3\n");
        assert!(w.waiters("job").is_empty());
    }

    /// `--queue`: the first fire that finds the lock held waits, the next
    /// skips (75, "one already queued"); the queued one runs when the
    /// holder ends.
    fn queue_one_waits_and_the_next_skips(w: &mut World) {
        let h = w.holder("host-a", "h", &[], "job");
        let q = w.start("host-b", "q", &["--queue"], "job", "echo q >> \"$DIR/order\"", false);
        w.wait_for_line("job", &[q]);
        let seen = w.waiters("job");
        assert_eq!(seen[0]["queued"], true, "{seen:#?}");
        let out = w.oo_on("host-c", &["run", "--queue", "job", "--", "true"]);
        out.expect(75).says("already queued");
        w.go();
        assert_eq!(w.exit(h, HANG), 0);
        assert_eq!(w.exit(q, HANG), 0);
        assert_eq!(w.read("order"), "q\n");
        // The seat is free again.
        w.oo(&["run", "--queue", "job", "--", "true"]).expect(0);
    }

    /// Two `--queue` fires arriving together at a held lease, from two
    /// hosts: exactly one waits, the other skips (75, "one already
    /// queued"), round after round; the waiter, ended by a signal, leaves
    /// the line.
    fn two_fires_racing_to_queue_exactly_one_waits(w: &mut World) {
        w.holder("host-a", "h", &[], "job");
        for round in 0..10 {
            let (ta, tb) = (format!("a{round}"), format!("b{round}"));
            let a = w.start("host-b", &ta, &["--queue"], "job", "true", false);
            let b = w.start("host-c", &tb, &["--queue"], "job", "true", false);
            let mut skipped = None;
            wait_until("one of the two fires to skip", HANG, || {
                skipped = [a, b].into_iter().find(|&p| w.exit_now(p).is_some());
                skipped.is_some()
            });
            let skipped = skipped.unwrap();
            let (waiter, tag) = if skipped == a { (b, &ta) } else { (a, &tb) };
            assert_eq!(w.exit_now(skipped), Some(75), "round {round}");
            w.wait_for_line("job", &[waiter]);
            assert!(w.exit_now(waiter).is_none(), "round {round}: both fires ended");
            let err = w.read(&format!("{tag}.err"));
            assert!(err.contains("one already queued"), "round {round}: {err}");
            signal(waiter, rustix::process::Signal::TERM);
            assert_eq!(w.exit(waiter, HANG), 128 + 15, "round {round}");
            assert!(w.waiters("job").is_empty(), "round {round}: the line is empty");
        }
    }

    /// A queued waiter SIGKILLed leaves its place live for a while; the
    /// next fire on its host sees its process gone and takes the seat at
    /// once (not after the place runs out), then runs when the holder ends.
    fn a_sigkilled_queued_waiter_is_replaced_at_once(w: &mut World) {
        let h = w.holder("host-a", "h", &[], "job");
        let q1 = w.start("host-b", "q1", &["--queue"], "job", "echo q1 >> \"$DIR/order\"", false);
        w.wait_for_line("job", &[q1]);
        signal(q1, rustix::process::Signal::KILL);
        assert_eq!(w.exit(q1, HANG), 128 + 9);
        let started = Instant::now();
        let q2 = w.start("host-b", "q2", &["--queue"], "job", "echo q2 >> \"$DIR/order\"", false);
        w.wait_for_line("job", &[q2]);
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "the dead waiter's seat is taken at once: {:?}",
            started.elapsed()
        );
        w.oo_on("host-c", &["run", "--queue", "job", "--", "true"])
            .expect(75)
            .says("one already queued");
        w.go();
        assert_eq!(w.exit(h, HANG), 0);
        assert_eq!(w.exit(q2, HANG), 0);
        assert_eq!(w.read("order"), "q2\n");
    }

    /// A fire that finds the lease free but a live waiter in line (one
    /// stopped with SIGSTOP as the holder ends) does not go ahead of it:
    /// it skips (75), saying waiters are ahead and naming the first; the
    /// waiter, let go on, takes the lease and runs.
    fn a_new_fire_does_not_go_ahead_of_the_line(w: &mut World) {
        let h = w.holder("host-a", "h", &[], "job");
        let waiter = w.start("host-b", "w", &["--wait", "1m"], "job", "echo w >> \"$DIR/order\"", false);
        w.wait_for_line("job", &[waiter]);
        signal(waiter, rustix::process::Signal::STOP);
        wait_until("the waiter to stop", HANG, || state_of(waiter) == Some('T'));
        w.go();
        assert_eq!(w.exit(h, HANG), 0);
        let out = w.oo_on("host-c", &["run", "job", "--", "sh", "-c", "echo new >> \"$DIR/order\""]);
        out.expect(75)
            .says("is free, but 1 waiter(s) are ahead in line")
            .says(&format!("pid {waiter} on "));
        signal(waiter, rustix::process::Signal::CONT);
        assert_eq!(w.exit(waiter, HANG), 0);
        assert_eq!(w.read("order"), "w\n");
    }

    /// `--replace` is refused with a store (the live run may be on
    /// another host, which no signal from here reaches), naming `stop`;
    /// the holder runs on, and after `stop` the next take's fence is
    /// larger.
    fn replace_is_refused_and_stop_then_run_takes_over(w: &mut World) {
        let a = w.holder("host-a", "a", &["--lease", "3s", "--kill-after", "1s"], "job");
        let script = "echo $ONLYONE_FENCE > \"$DIR/b.fence\"";
        let out = w.oo_on("host-b", &["run", "--replace", "job", "--", "sh", "-c", script]);
        out.expect(125).says("--replace is not supported with --store").says("stop");
        assert!(running(a), "the holder runs on");
        w.oo_on("host-b", &["stop", "job"]).expect(0);
        assert_eq!(w.exit(a, HANG), 128 + 15, "the holder's command ended by TERM");
        w.oo_on("host-b", &["run", "job", "--", "sh", "-c", script]).expect(0);
        assert!(w.fence("b") > w.fence("a"));
    }

    /// `--slots 2`: two holders at once, each its own slot and fence; a
    /// third skips; when one ends, a third takes its slot.
    fn slots_admit_n_holders_and_no_more(w: &mut World) {
        let slot = |tag: &str| format!(
            "echo $ONLYONE_SLOT > \"$DIR/{tag}.slot\"; echo $ONLYONE_FENCE > \"$DIR/{tag}.fence\"; \
             touch \"$READY\"; while [ ! -e \"$DIR/{tag}.go\" ]; do sleep 0.02; done"
        );
        let a = w.start("host-a", "a", &["--slots", "2"], "pool", &slot("a"), true);
        let b = w.start("host-b", "b", &["--slots", "2"], "pool", &slot("b"), true);
        let (sa, sb) = (w.read("a.slot"), w.read("b.slot"));
        assert_ne!(sa, sb, "two holders, two slots");
        for s in [&sa, &sb] {
            assert!(["0\n", "1\n"].contains(&s.as_str()), "{s:?}");
        }
        w.oo_on("host-c", &["run", "--slots", "2", "pool", "--", "true"]).expect(75);
        w.oo_on("host-c", &["run", "--slots", "3", "pool", "--", "true"])
            .expect(125)
            .says("2");
        let s = w.oo(&["status", "--json", "pool"]).expect(0).json();
        assert_eq!(s.to_string().matches("\"held\"").count(), 2, "{s:#}");
        std::fs::write(w.path("a.go"), "").unwrap();
        assert_eq!(w.exit(a, HANG), 0);
        let c = w.start("host-c", "c", &["--slots", "2"], "pool", &slot("c"), true);
        assert_eq!(w.read("c.slot"), sa, "the freed slot is taken");
        assert!(w.fence("c") > w.fence("a"));
        std::fs::write(w.path("b.go"), "").unwrap();
        std::fs::write(w.path("c.go"), "").unwrap();
        assert_eq!(w.exit(b, HANG), 0);
        assert_eq!(w.exit(c, HANG), 0);
    }

    /// `stop` from another host: the holder sees it at its next renewal,
    /// ends its command (TERM) and releases; `stop` waits for that.
    fn stop_from_another_host_ends_the_run(w: &mut World) {
        let a = w.start(
            "host-a", "a", &["--lease", "3s", "--kill-after", "1s"], "job",
            "touch \"$READY\"; exec sleep 1000", true,
        );
        let started = Instant::now();
        w.oo_on("host-b", &["stop", "job"]).expect(0).says("stopped the run of `job`");
        assert!(started.elapsed() < Duration::from_secs(20));
        assert_eq!(w.exit(a, HANG), 128 + 15);
        w.oo_on("host-b", &["precheck", "job"]).expect(0);
        w.oo_on("host-b", &["stop", "job"]).expect(0).says("not running");
    }

    /// TERM, INT and HUP to the wrapper reach the command, which ends of
    /// its own accord; the wrapper exits as it did and the lock is free.
    fn signals_to_the_wrapper_reach_the_command(w: &mut World) {
        for (sig, n) in [
            (rustix::process::Signal::TERM, 15),
            (rustix::process::Signal::INT, 2),
            (rustix::process::Signal::HUP, 1),
        ] {
            let tag = format!("s{n}");
            let script = format!(
                "trap 'echo got > \"$DIR/{tag}.got\"; exit 7' {n}; touch \"$READY\"; \
                 while :; do sleep 0.02; done"
            );
            let a = w.start("host-a", &tag, &[], "job", &script, true);
            signal(a, sig);
            assert_eq!(w.exit(a, HANG), 7, "the command's own exit");
            assert_eq!(w.read(&format!("{tag}.got")), "got\n");
            w.oo_on("host-b", &["precheck", "job"]).expect(0);
        }
    }

    /// A run's history is the store's: `history`, `check` and `metrics`
    /// from another host see every host's runs.
    fn history_check_and_metrics_from_any_host(w: &mut World) {
        w.oo_on("host-a", &["run", "job", "--", "true"]).expect(0);
        w.oo_on("host-a", &["run", "job", "--", "sh", "-c", "exit 3"]).expect(3);
        let h = w.oo_on("host-b", &["history", "job", "--json"]);
        h.expect(0);
        let runs: Vec<serde_json::Value> =
            h.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(runs.len(), 2, "{}", h.stdout);
        // Newest first.
        assert_eq!(runs[0]["exit"], 3, "{}", h.stdout);
        assert_eq!(runs[1]["exit"], 0, "{}", h.stdout);
        if is_root() {
            assert_eq!(runs[0]["host"], "host-a", "{}", h.stdout);
        }
        w.oo_on("host-b", &["check", "job"]).expect(2).prints("exit 3");
        w.oo_on("host-b", &["run", "job", "--", "true"]).expect(0);
        w.oo_on("host-c", &["check", "job"]).expect(0).prints("ONLYONE OK");
        let m = w.oo_on("host-c", &["metrics"]);
        m.expect(0).prints("onlyone_").prints("lock=\"job\"");
    }

    /// A schedule is the store's: kept by a fire of one host, used by
    /// fires of the others given none; after fires of `every 1s` passed
    /// unseen, fires of two hosts at once record them in one `missed`
    /// event between them, one row of `history` from any host; and
    /// `metrics` on a third knows the schedule.
    fn a_schedule_and_its_missed_fires_are_the_stores(w: &mut World) {
        let run = |host: &str, args: &[&str]| {
            let mut c = w.cmd_on(host, args);
            c.env("TZ", "UTC").env_remove("ONLYONE_SCHEDULE");
            finish(c, HANG)
        };
        run("host-a", &["run", "--schedule", "every 1s", "sch", "--", "true"]).expect(0);
        wait_until("fires of `every 1s` to pass unseen", HANG, || {
            run("host-b", &["check", "sch"]).stdout.contains(" fires")
        });
        std::thread::scope(|s| {
            for i in 0..4 {
                let host = ["host-a", "host-b"][i % 2];
                let run = &run;
                s.spawn(move || {
                    let code = run(host, &["run", "sch", "--", "true"]).code();
                    assert!(code == 0 || code == 75, "{code}");
                });
            }
        });
        for host in ["host-a", "host-b"] {
            let h = run(host, &["history", "sch", "--json"]);
            let missed = h
                .expect(0)
                .stdout
                .lines()
                .filter(|l| l.contains("\"outcome\":\"missed\""))
                .count();
            assert_eq!(missed, 1, "{host}: {}", h.stdout);
        }
        run("host-c", &["metrics", "sch"])
            .expect(0)
            .prints("onlyone_next_fire_timestamp_seconds{lock=\"sch\"} ");
    }

    /// `precheck` against a server that accepts connections and never
    /// answers: 0 (fail open) within its deadline.
    fn precheck_within_its_deadline_against_a_silent_server(w: &mut World) {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let url = match w.engine {
            Engine::Pg => format!("postgres://onlyone:pw@127.0.0.1:{port}/db?sslmode=disable"),
            Engine::Etcd => format!("etcd://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        let out = finish(w.store_cmd(&url, &["precheck", "--deadline", "1s", "job"]), HANG);
        let took = started.elapsed();
        out.expect(0);
        assert!(took < Duration::from_millis(2500), "precheck took {took:?}");
        drop(silent);
    }
}
