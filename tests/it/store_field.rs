//! The PostgreSQL store as a field trial used it: signals from `systemctl
//! stop`, `timeout` and `kill` to a store run's wrapper, a server restarted
//! as a run ends, options a store cannot honour, and libpq's variables.
//! Each test has a database of its own on a throwaway cluster (see
//! `support::pg`), the one that restarts it a cluster of its own, and
//! skips, saying why, where PostgreSQL is not installed.

use crate::support;

use std::time::{Duration, Instant};

use rustix::process::Signal;
use support::*;

const HANG: Duration = Duration::from_secs(60);

store_world!("ONLYONE_STORE_FIELD_MARK");

impl World {
    /// Starts `onlyone --store URL run OPTS NAME -- sh -c SCRIPT` in the
    /// background, `DIR` the sandbox, and waits for `$READY` (the script
    /// touches it): the wrapper's pid.
    fn holder(&mut self, name: &str, opts: &[&str], script: &str) -> u32 {
        let ready = self.path(&format!("{name}.ready"));
        let mut args = vec!["run"];
        args.extend_from_slice(opts);
        args.extend_from_slice(&[name, "--", "sh", "-c", script]);
        let mut c = self.oo_at(&self.pg.url(), &args);
        c.env("READY", &ready);
        let pid = self.start_logged(c, name);
        self.wait_ready(pid, &ready, HANG);
        pid
    }

    /// Waits for the wrapper `pid` (one of ours) to exit: its status and
    /// when it was seen gone.
    fn kid_exit(&mut self, pid: u32, limit: Duration) -> (i32, Instant) {
        use std::os::unix::process::ExitStatusExt;
        let s = self.exit_of_kid(pid, limit);
        let at = Instant::now();
        (s.code().unwrap_or_else(|| 128 + s.signal().unwrap()), at)
    }

    /// The runs of `name` in the store's history, oldest first.
    fn runs(&self, name: &str) -> Vec<serde_json::Value> {
        let h = self.oo(&["history", name, "--json"]);
        h.expect(0);
        let mut runs: Vec<serde_json::Value> = h
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        runs.reverse();
        runs
    }

    /// The next host: `run --wait 60s NAME -- true`; how long it took.
    fn next_host(&self, name: &str) -> Duration {
        let started = Instant::now();
        self.oo(&["run", "--wait", "60s", name, "--", "true"])
            .expect(0);
        started.elapsed()
    }
}

fn signal(pid: u32, sig: Signal) {
    let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig);
}

// ---------------------------------------------------------------------------
// Signals to a store run's wrapper

/// `sig` sent to a store run's wrapper, as `systemctl stop`, `timeout` and
/// `kill` send it: the command gets it (it traps it, notes it, exits 7),
/// the wrapper exits with the command's code as it does without a store,
/// the next host gets the lock within a second of the wrapper's exit (the
/// lease was released, not left to run out: 20 s), and the end is in the
/// store's history.
fn a_signal_reaches_the_command_and_the_lease_is_released(sig: Signal, name: &str) {
    let Some(mut w) = World::new() else { return };
    let script = format!(
        "trap 'echo {name} > \"$DIR/trapped\"; exit 7' {name}; touch \"$READY\"; \
         while :; do sleep 1 & wait $!; done"
    );
    let wrapper = w.holder("job", &["--lease", "20s", "--kill-after", "2s"], &script);
    signal(wrapper, sig);
    let (code, exited) = w.kid_exit(wrapper, HANG);
    assert_eq!(code, 7, "the wrapper exits with the command's code");
    assert_eq!(
        std::fs::read_to_string(w.path("trapped"))
            .unwrap_or_default()
            .trim(),
        name,
        "the command got {name}"
    );
    let took = w.next_host("job");
    let since_exit = exited.elapsed();
    assert!(
        since_exit < Duration::from_secs(1),
        "the next host got the lock {since_exit:?} after the wrapper's exit ({took:?} waiting)"
    );
    let runs = w.runs("job");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(runs[0]["outcome"], "exit", "{runs:#?}");
    assert_eq!(runs[0]["exit"], 7, "{runs:#?}");
}

#[test]
fn sigterm_to_a_store_wrapper_reaches_the_command_and_releases_the_lease() {
    a_signal_reaches_the_command_and_the_lease_is_released(Signal::TERM, "TERM");
}

#[test]
fn sigint_to_a_store_wrapper_reaches_the_command_and_releases_the_lease() {
    a_signal_reaches_the_command_and_the_lease_is_released(Signal::INT, "INT");
}

#[test]
fn sighup_to_a_store_wrapper_reaches_the_command_and_releases_the_lease() {
    a_signal_reaches_the_command_and_the_lease_is_released(Signal::HUP, "HUP");
}

#[test]
fn sigquit_to_a_store_wrapper_reaches_the_command_and_releases_the_lease() {
    a_signal_reaches_the_command_and_the_lease_is_released(Signal::QUIT, "QUIT");
}

/// A wrapper waiting for the lease (`--wait`) holds no lock yet: TERM ends
/// the wait at once, as it ends a waiting onlyone without a store (it dies
/// of it), and the holder runs on.
#[test]
fn sigterm_ends_a_wait_for_a_store_lease() {
    let Some(mut w) = World::new() else { return };
    let holder = w.holder(
        "job",
        &["--lease", "20s"],
        "touch \"$READY\"; exec sleep 1000",
    );
    let wait = w.oo_at(&w.pg.url(), &["run", "--wait", "60s", "job", "--", "true"]);
    let waiter = w.keep(wait);
    // Between two looks at the held lease, it sleeps.
    wait_until("the waiter to wait", HANG, || {
        std::fs::read_to_string(format!("/proc/{waiter}/wchan"))
            .is_ok_and(|c| c.contains("nanosleep"))
    });
    let sent = Instant::now();
    signal(waiter, Signal::TERM);
    let (code, _) = w.kid_exit(waiter, HANG);
    assert_eq!(code, 128 + 15, "the waiter dies of TERM");
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    assert!(running(holder), "the holder runs on");
}

/// A wrapper that died (SIGKILL) left its lease held: `status` says that
/// its holder, a pid of this host, is dead (text and `--json`), rather
/// than showing it as a live run.
#[test]
fn status_says_when_the_holder_of_a_store_lock_on_this_host_is_dead() {
    let Some(mut w) = World::new() else { return };
    let wrapper = w.holder(
        "job",
        &["--lease", "20s", "--kill-after", "1s"],
        "touch \"$READY\"; exec sleep 1000",
    );
    let s = w.oo(&["status", "--json"]).json();
    assert_eq!(s["locks"][0]["holder_alive"], true, "{s:#}");
    signal(wrapper, Signal::KILL);
    w.kid_exit(wrapper, HANG);
    let s = w.oo(&["status", "--json"]).json();
    assert_eq!(s["locks"][0]["state"], "held", "{s:#}");
    assert_eq!(s["locks"][0]["holder_alive"], false, "{s:#}");
    let out = w.oo(&["status"]);
    out.expect(0).says(&format!(
        "held by pid {wrapper} of this host, which is dead"
    ));
    assert!(out.stdout.contains("held (its pid is dead)"), "{out:#?}");
}

// ---------------------------------------------------------------------------
// A server restart as the run ends

/// The command ends while the server is down for a restart: the end event
/// and the release are tried again on a new connection once it is back,
/// so the next host gets the lock at once (not after the 20 s lease) and
/// history has the run's end with its exit code.
#[test]
fn a_run_that_ends_during_a_server_restart_records_its_end_and_releases() {
    let Some(mut w) = World::own() else { return };
    let wrapper = w.holder(
        "job",
        &["--lease", "20s", "--kill-after", "1s"],
        "echo $$ > \"$DIR/cmd.pid\"; touch \"$READY\"; \
         while [ ! -e \"$DIR/go\" ]; do sleep 0.02; done; exit 3",
    );
    let command: u32 = std::fs::read_to_string(w.path("cmd.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    w.pg.stop_immediate();
    let down = Instant::now();
    std::fs::write(w.path("go"), "").unwrap();
    // The command has ended, and the wrapper is at its end: it tries the
    // store, which is down.
    wait_until("the command's end", HANG, || !running(command));
    assert!(
        running(wrapper),
        "the wrapper waits for the store: {}",
        std::fs::read_to_string(w.path("job.err")).unwrap_or_default()
    );
    w.pg.start_again().unwrap();
    let (code, _) = w.kid_exit(wrapper, HANG);
    assert_eq!(code, 3, "the wrapper exits with the command's code");
    let took = w.next_host("job");
    assert!(
        down.elapsed() < Duration::from_secs(12),
        "the next host got the lock {:?} after the server went down ({took:?} waiting): the \
         lease was left to run out",
        down.elapsed()
    );
    let runs = w.runs("job");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(runs[0]["outcome"], "exit", "{runs:#?}");
    assert_eq!(runs[0]["exit"], 3, "{runs:#?}");
}

// ---------------------------------------------------------------------------
// Options a store cannot honour are refused, never ignored

#[test]
fn options_a_store_cannot_honour_are_refused_by_name() {
    let Some(mut w) = World::new() else { return };
    let ran = w.path("ran");
    let cmd = ["--", "touch", ran.to_str().unwrap()];
    for (opt, why) in [
        ("--linger", "--linger is not supported with --store"),
        ("--replace", "--replace is not supported with --store"),
    ] {
        let mut args = vec!["run", opt, "job"];
        args.extend(cmd);
        let out = w.oo(&args);
        out.expect(125).says(why);
        assert!(!ran.exists(), "{opt}: the command ran");
    }
    // `stop --signal` other than TERM: a stop request cannot carry it.
    w.holder(
        "job",
        &["--lease", "6s", "--kill-after", "1s"],
        "touch \"$READY\"; exec sleep 1000",
    );
    w.oo(&["stop", "--signal", "INT", "job"])
        .expect(125)
        .says("--signal INT is not supported with --store");
    let s = w.oo(&["status", "--json"]).json();
    assert_eq!(s["locks"][0]["state"], "held", "still running: {s:#}");
    assert_eq!(s["locks"][0]["stop_requested"], false, "{s:#}");
    // Nor can it carry a grace: the holder's own `run --kill-after` is it.
    w.oo(&["stop", "--kill-after", "1s", "job"])
        .expect(125)
        .says("--kill-after is not supported by `stop` with --store");
    let s = w.oo(&["status", "--json"]).json();
    assert_eq!(s["locks"][0]["stop_requested"], false, "{s:#}");
    // A script's hold has no wrapper to renew a lease; `acquire --export`
    // still prints its `exit N`.
    let out = w.oo(&["acquire", "--export", "job"]);
    out.expect(125)
        .says("acquire is not supported with --store");
    assert_eq!(out.stdout.trim(), "exit 125", "{out:#?}");
    w.oo(&["release", "job"])
        .expect(125)
        .says("release is not supported with --store");
    // TERM is what a stop request does: accepted.
    w.oo(&["stop", "--signal", "TERM", "job"])
        .expect(0)
        .says("stopped the run of `job`");
}

// ---------------------------------------------------------------------------
// libpq's variables

/// `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE` and `PGSSLMODE` fill in what
/// the URL leaves out, as libpq does (a path in `PGHOST` is the socket's
/// directory); `PGSSLMODE=prefer` is refused like the URL's, by name.
#[test]
fn libpq_variables_fill_in_what_the_url_leaves_out() {
    let Some(w) = World::new() else { return };
    let port = w.pg.port.to_string();
    let tcp = [
        ("PGHOST", "127.0.0.1"),
        ("PGPORT", port.as_str()),
        ("PGUSER", "onlyone"),
        ("PGDATABASE", w.pg.name()),
        ("PGPASSWORD", support::pg::PASSWORD),
    ];
    let oo = |vars: &[(&str, &str)], args: &[&str]| {
        let mut c = w.oo_at("postgres://", args);
        c.envs(vars.iter().copied());
        finish(c, HANG)
    };
    let mut with_mode = tcp.to_vec();
    with_mode.push(("PGSSLMODE", "disable"));
    oo(&with_mode, &["run", "viatcp", "--", "true"]).expect(0);
    let sock = w.pg.data().to_str().unwrap().to_owned();
    let local = [
        ("PGHOST", sock.as_str()),
        ("PGPORT", port.as_str()),
        ("PGUSER", "onlyone"),
        ("PGDATABASE", w.pg.name()),
    ];
    oo(&local, &["run", "viasocket", "--", "true"]).expect(0);
    let s = w.oo(&["status", "--json"]).json();
    let names: Vec<&str> = s["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["viasocket", "viatcp"], "{s:#}");
    let mut weak = tcp.to_vec();
    weak.push(("PGSSLMODE", "prefer"));
    oo(&weak, &["run", "weak", "--", "true"])
        .expect(125)
        .says("PGSSLMODE=prefer is refused");
}
