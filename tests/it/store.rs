//! The PostgreSQL store against a real server (a database of each test's
//! own on a throwaway cluster, see `support::pg`), under real faults:
//! several onlyone processes play the hosts; the server is stopped,
//! restarted and black-holed; holders are paused and killed. Each test
//! skips, saying why, where PostgreSQL is not installed (`.ci/run`
//! installs it).

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::pg::{Db, Pg, Proxy};
use support::*;

const HANG: Duration = Duration::from_secs(60);

/// A test's world: a database, a temp dir and the processes it started.
struct World {
    sb: Sandbox,
    pg: Db,
    /// Whether the machine stalled past a lease's margin (see
    /// [`StallWatch`]).
    stall: StallWatch,
}

derefs_to_sandbox!(World);

impl World {
    /// A database on the test binary's shared server.
    fn new() -> Option<World> {
        World::with(Db::new())
    }

    /// The database of a cluster of the test's own (`Pg::start`,
    /// `Pg::start_tls`), for a test that stops, restarts or reconfigures
    /// it.
    fn own(pg: Result<Pg, String>) -> Option<World> {
        World::with(Db::own(pg))
    }

    fn with(pg: Result<Db, String>) -> Option<World> {
        match pg {
            Ok(pg) => Some(World {
                sb: Sandbox::new("ONLYONE_STORE_MARK"),
                pg,
                stall: StallWatch::start(),
            }),
            Err(why) => {
                eprintln!("skipped: {why}");
                None
            }
        }
    }

    /// `onlyone --store URL ARGS...` (the server's URL unless `url`).
    fn oo_at(&self, url: &str, args: &[&str]) -> Command {
        self.store_cmd(url, args)
    }

    fn oo(&self, args: &[&str]) -> Out {
        finish(self.oo_at(&self.pg.url(), args), HANG)
    }

    /// Starts `onlyone --store URL run ARGS NAME -- sh -c SCRIPT` in the
    /// background, with `DIR` set to the sandbox, and waits for `DIR/ready`
    /// (the script must touch it).
    fn holder(&mut self, url: &str, name: &str, opts: &[&str], script: &str) -> u32 {
        self.holder_env(url, name, opts, script, &[])
    }

    /// [`World::holder`] with more variables in the environment.
    fn holder_env(
        &mut self,
        url: &str,
        name: &str,
        opts: &[&str],
        script: &str,
        vars: &[(&str, &str)],
    ) -> u32 {
        let ready = self.path(&format!("{name}.ready"));
        let mut args = vec!["run"];
        args.extend_from_slice(opts);
        args.extend_from_slice(&[name, "--", "sh", "-c", script]);
        let mut c = self.oo_at(url, &args);
        c.env("READY", &ready);
        for (k, v) in vars {
            c.env(k, v);
        }
        let pid = self.keep(c);
        self.wait_ready(pid, &ready, HANG);
        pid
    }

    fn kid_exit(&mut self, pid: u32, limit: Duration) -> std::process::ExitStatus {
        self.exit_of_kid(pid, limit)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }
}

/// Wall-clock now, in seconds (the server runs on this host: its
/// `clock_timestamp()` is on the same clock).
fn wall() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A command that writes the wall time (ns) to `$DIR/NAME.beat` every 20 ms
/// and ignores TERM (so only KILL ends it): the last beat says when it died.
fn beating(name: &str) -> String {
    format!(
        "trap '' TERM; touch \"$READY\"; echo $ONLYONE_FENCE > \"$DIR/{name}.fence\"; \
         while :; do date +%s%N > \"$DIR/{name}.beat.tmp\"; mv \"$DIR/{name}.beat.tmp\" \"$DIR/{name}.beat\"; \
         sleep 0.02; done"
    )
}

/// The last beat, in wall seconds.
fn last_beat(w: &World, name: &str) -> f64 {
    w.read(&format!("{name}.beat"))
        .trim()
        .parse::<f64>()
        .map(|ns| ns / 1e9)
        .unwrap_or(0.0)
}

/// The lease's end by the server's clock (wall seconds), and its epoch.
fn server_lease(w: &World, name: &str) -> (f64, i64) {
    let row = w.pg.psql(&format!(
        "SELECT extract(epoch from lock_until), epoch FROM onlyone_lease WHERE name = '{name}'"
    ));
    let (until, epoch) = row.split_once('|').unwrap();
    (until.parse().unwrap(), epoch.parse().unwrap())
}

/// M, the margin of a lease of `lease`: how late a kill may land.
fn margin_of(lease: Duration) -> Duration {
    onlyone::place::store::timing::LeaseTiming::new(lease, Duration::ZERO)
        .unwrap()
        .margin
}

/// The stall watch's measure: a sleep that ran late, on either clock, or a
/// wall clock stepped while it slept, is a stall of that much; a sleep on
/// time is none.
#[test]
fn a_stall_is_lateness_on_either_clock_or_the_clocks_apart() {
    let ms = Duration::from_millis;
    let tick = ms(5);
    assert_eq!(stall_of(tick, ms(5), Ok(ms(5))), ms(0));
    assert_eq!(stall_of(tick, ms(4), Ok(ms(4))), ms(0));
    // A paused machine whose clocks both moved on.
    assert_eq!(stall_of(tick, ms(805), Ok(ms(805))), ms(800));
    // A wall clock stepped forward, or back, by 800 ms.
    assert_eq!(stall_of(tick, ms(5), Ok(ms(805))), ms(800));
    assert_eq!(stall_of(tick, ms(5), Err(ms(795))), ms(800));
    let watch = StallWatch::start();
    std::thread::sleep(ms(50));
    assert!(
        watch.worst() < ms(5000),
        "a watch of an ordinary 50 ms: {:?}",
        watch.worst()
    );
}

/// Asserts that the command `name` (see [`beating`]) last beat before the
/// server's lease of `job` (a lease of `lease`) ends; returns that end and
/// the epoch.
fn beats_ended_before_the_lease(w: &World, name: &str, lease: Duration) -> (f64, i64) {
    let (until, epoch) = server_lease(w, "job");
    let last = last_beat(w, name);
    w.stall.assert_within(
        last < until,
        margin_of(lease),
        &format!("{name} beat at {last:.3}, after the lease's end {until:.3}"),
    );
    (until, epoch)
}

/// Waits for `pid` to be gone, and asserts it went within `limit` of
/// `since` (when its wrapper was `what`).
fn gone_within(pid: u32, since: Instant, limit: Duration, what: &str) {
    wait_gone(pid);
    assert!(
        since.elapsed() < limit,
        "the command outlived its {what} wrapper by {:?}",
        since.elapsed()
    );
}

fn exit_code(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap())
}

// ---------------------------------------------------------------------------
// 1. The lease

/// Two "hosts" on one lock: the second skips (75, naming the holder), and
/// takes the lock the moment the first ends cleanly; each acquisition's
/// fence is larger than the last.
#[test]
fn two_holders_never_run_together_and_the_fence_grows() {
    let Some(mut w) = World::new() else { return };
    let go = w.path("go");
    let a = w.holder(
        &w.pg.url(),
        "job",
        &[],
        "echo $ONLYONE_FENCE > \"$DIR/a.fence\"; touch \"$READY\"; \
         while [ ! -e \"$DIR/go\" ]; do sleep 0.02; done",
    );
    let out = w.oo(&["run", "job", "--", "true"]);
    out.expect(75).says("holds the lease as pid");
    assert!(out.stderr.contains(&format!("pid {a} on ")), "{out:#?}");
    w.oo(&["precheck", "job"]).expect(75);
    let s = w.oo(&["status", "--json"]).json();
    assert_eq!(s["locks"][0]["state"], "held", "{s:#}");
    assert_eq!(s["locks"][0]["pid"], a, "{s:#}");
    std::fs::write(&go, "").unwrap();
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 0);
    // A clean end hands over at once: no waiting for the lease.
    let started = Instant::now();
    let out = w.oo(&[
        "run",
        "job",
        "--",
        "sh",
        "-c",
        "echo $ONLYONE_FENCE > \"$0\"",
        &w.path("b.fence").display().to_string(),
    ]);
    out.expect(0);
    assert!(started.elapsed() < Duration::from_secs(5), "{out:#?}");
    let fa: i64 = w.read("a.fence").trim().parse().unwrap();
    let fb: i64 = w.read("b.fence").trim().parse().unwrap();
    assert!(fb > fa, "the fence grows: {fa} then {fb}");
    w.oo(&["precheck", "job"]).expect(0);
    // Both runs and the skips are in the store's history.
    let h = w.oo(&["history", "job", "--json"]);
    h.expect(0);
    let runs: Vec<serde_json::Value> = h
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "{}", h.stdout);
    assert_eq!(runs[1]["skipped"], 2, "{}", h.stdout);
    assert_eq!(runs[0]["outcome"], "exit");
}

/// `stop` with a store: the holder sees the request at its next renewal,
/// ends its command and releases; `stop` waits for that and says so.
#[test]
fn a_remote_stop_ends_the_run_and_releases() {
    let Some(mut w) = World::new() else { return };
    // A lease long enough that a renewal slowed by a loaded machine (the
    // cluster is shared by the test binary's tests) is not taken for a
    // lost lease (124) before the stop is seen.
    let a = w.holder(
        &w.pg.url(),
        "job",
        &["--lease", "8s", "--kill-after", "1s"],
        "touch \"$READY\"; exec sleep 1000",
    );
    let started = Instant::now();
    let out = w.oo(&["stop", "job"]);
    out.expect(0).says("stopped the run of `job`");
    assert!(started.elapsed() < Duration::from_secs(10), "{out:#?}");
    // The command died of the TERM: the wrapper exits as it did.
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 128 + 15);
    w.oo(&["precheck", "job"]).expect(0);
    w.oo(&["run", "job", "--", "true"]).expect(0);
    w.oo(&["stop", "job"]).expect(0).says("not running");
}

/// The wrapper killed with SIGKILL, the way cron's jobs die: `sh -c`
/// leads the group, onlyone is its child, and the whole group gets KILL.
/// Nothing renews the lease any more, so the run's watchdog (a group of its
/// own) ends the command, which ignores TERM, within the grace and before
/// the lease runs out; the next holder starts after the lease's end, not
/// before.
#[test]
fn a_killed_wrapper_takes_its_command_with_it_before_the_lease_runs_out() {
    use std::os::unix::process::CommandExt;
    let Some(mut w) = World::new() else { return };
    let ready = w.path("a.ready");
    let line = format!(
        "'{}' --store '{}' run --lease 4s --kill-after 1s job -- sh -c '{}'; echo after",
        BIN,
        w.pg.url(),
        format!("echo $$ > \"$DIR/a.pid\"; {}", beating("a")).replace('\'', "'\\''")
    );
    let mut c = w.program("sh");
    c.args(["-c", &line])
        .env("DIR", w.dir())
        .env("READY", &ready)
        .process_group(0);
    let cron_sh = w.keep(c);
    wait_until("the command", HANG, || ready.exists());
    let command: u32 = w.read("a.pid").trim().parse().unwrap();
    assert_ne!(command_of(cron_sh), command, "onlyone sits between");
    signal(-(cron_sh as i32), rustix::process::Signal::KILL);
    gone_within(command, Instant::now(), Duration::from_secs(3), "killed");
    let (until, fa) = beats_ended_before_the_lease(&w, "a", Duration::from_secs(4));
    // The next holder waits for the lease to run out.
    let asked = wall();
    let b = w.oo(&[
        "run",
        "--wait",
        "30s",
        "job",
        "--",
        "sh",
        "-c",
        "date +%s%N > \"$0\"; echo $ONLYONE_FENCE > \"$0.fence\"",
        &w.path("b.start").display().to_string(),
    ]);
    b.expect(0);
    assert!(asked < until, "the test asked too late to show the wait");
    let b_start: f64 = w.read("b.start").trim().parse::<f64>().unwrap() / 1e9;
    assert!(
        b_start >= until,
        "the next run started at {b_start:.3}, before the lease's end {until:.3}"
    );
    let fb: i64 = w.read("b.start.fence").trim().parse().unwrap();
    assert!(fb > fa, "the fence grows: {fa} then {fb}");
}

/// TLS, as libpq's `sslmode` asks: against a server that refuses plain
/// TCP, `require` works, `verify-full` works with the CA as `sslrootcert`
/// and is refused (125, a clear error; precheck 0) without it; `disable` is
/// refused by the server. The password comes from `PGPASSWORD`, then from
/// a password file (`PGPASSFILE`), never from the URL.
#[test]
fn tls_require_and_verify_full_work_and_an_unknown_ca_is_refused() {
    let Some(w) = World::own(Pg::start_tls()) else {
        return;
    };
    let base = format!("postgres://onlyone@127.0.0.1:{}/postgres", w.pg.port);
    let ca = w.pg.ca().display().to_string();
    let with_pw = |url: &str, args: &[&str]| {
        let mut c = w.oo_at(url, args);
        c.env("PGPASSWORD", support::pg::PASSWORD)
            .env_remove("PGPASSFILE");
        finish(c, HANG)
    };
    with_pw(
        &format!("{base}?sslmode=require"),
        &["run", "job", "--", "true"],
    )
    .expect(0);
    let full = format!("{base}?sslmode=verify-full&sslrootcert={ca}");
    with_pw(&full, &["run", "job", "--", "true"]).expect(0);
    let out = with_pw(
        &format!("{base}?sslmode=verify-full"),
        &["run", "job", "--", "true"],
    );
    out.expect(125).says("sslrootcert=PATH");
    with_pw(&format!("{base}?sslmode=verify-full"), &["precheck", "job"]).expect(0);
    let out = with_pw(
        &format!("{base}?sslmode=disable"),
        &["run", "job", "--", "true"],
    );
    out.expect(125).says("pg_hba.conf");
    // The password from a password file (0600, as libpq requires).
    let pgpass = w.path("pgpass");
    std::fs::write(
        &pgpass,
        format!(
            "127.0.0.1:{}:postgres:onlyone:{}\n",
            w.pg.port,
            support::pg::PASSWORD
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut c = w.oo_at(&full, &["run", "job", "--", "true"]);
    c.env_remove("PGPASSWORD").env("PGPASSFILE", &pgpass);
    finish(c, HANG).expect(0);
    let h = w.oo_at(&full, &["history", "job", "--json"]);
    let mut h = h;
    h.env("PGPASSFILE", &pgpass);
    let h = finish(h, HANG);
    h.expect(0);
    assert_eq!(h.stdout.lines().count(), 3, "{}", h.stdout);
}

/// The README's SQL for a DBA, run as it is written: a role with only the
/// privileges it grants (it may not create tables) takes, renews, stops,
/// releases and records runs, and reads them back.
#[test]
fn the_readme_schema_and_grants_are_enough() {
    let Some(mut w) = World::new() else { return };
    // The role `jobs` of the README, under the test's own name for it.
    let jobs = w.pg.role("jobs");
    w.pg.psql(&format!("CREATE ROLE {jobs} LOGIN PASSWORD 'jobs-pw'"));
    w.pg.psql(&readme_block("store-schema").replace(" TO jobs;", &format!(" TO {jobs};")));
    let url = format!(
        "postgres://{jobs}:jobs-pw@127.0.0.1:{}/{}?sslmode=disable",
        w.pg.port,
        w.pg.name()
    );
    let out = finish(w.oo_at(&url, &["run", "job", "--", "true"]), HANG);
    out.expect(0);
    // A lease with room for a renewal slowed by a loaded machine: the
    // stop, not a lost lease (124), is what ends this run.
    let a = w.holder(
        &url,
        "job",
        &["--lease", "8s", "--kill-after", "1s"],
        "touch \"$READY\"; exec sleep 1000",
    );
    finish(w.oo_at(&url, &["run", "job", "--", "true"]), HANG).expect(75);
    finish(w.oo_at(&url, &["precheck", "job"]), HANG).expect(75);
    let st = finish(w.oo_at(&url, &["status"]), HANG);
    assert!(st.expect(0).stdout.contains("\theld\t"), "{st:#?}");
    finish(w.oo_at(&url, &["stop", "job"]), HANG).expect(0);
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 128 + 15);
    let h = finish(w.oo_at(&url, &["history", "job", "--json"]), HANG);
    h.expect(0);
    assert_eq!(h.stdout.lines().count(), 2, "{}", h.stdout);
    let m = finish(w.oo_at(&url, &["metrics"]), HANG);
    let skips = "onlyone_skipped_total{lock=\"job\"} 2";
    assert!(m.expect(0).stdout.contains(skips), "{m:#?}");
    // A fire keeps its schedule, and records what a later fire missed.
    let fire = |args: &[&str]| {
        let mut c = w.oo_at(&url, args);
        c.env("TZ", "UTC").env_remove("ONLYONE_SCHEDULE");
        finish(c, HANG)
    };
    let out = fire(&[
        "run",
        "--schedule",
        "every 1s",
        "--late",
        "0s",
        "sched",
        "--",
        "true",
    ]);
    out.expect(0);
    assert_eq!(out.stderr, "", "{out:#?}");
    // Two fires passed: the one before the next fire's second is missed.
    wait_until("two fires of `every 1s` to pass", HANG, || {
        fire(&["check", "sched"]).stdout.contains(" fires")
    });
    // Given no schedule: the one kept.
    let out = fire(&["run", "sched", "--", "true"]);
    assert_eq!(out.expect(0).stderr, "", "{out:#?}");
    let m = fire(&["metrics", "sched"]);
    assert!(
        m.expect(0)
            .stdout
            .contains("onlyone_missed_total{lock=\"sched\"} "),
        "{m:#?}"
    );
    assert!(
        !m.stdout
            .contains("onlyone_missed_total{lock=\"sched\"} 0\n"),
        "{m:#?}"
    );
    // Nothing was created by the role: the DBA's tables are the only ones.
    let owners = w
        .pg
        .psql("SELECT string_agg(tableowner, ',') FROM pg_tables WHERE tablename LIKE 'onlyone_%'");
    assert_eq!(owners, "onlyone,onlyone,onlyone,onlyone");
}

/// Wrong credentials and an unreachable server: clear errors and 125; a
/// precheck lets the fire run (0).
#[test]
fn bad_credentials_and_an_unreachable_server_are_clear_errors() {
    let Some(w) = World::new() else { return };
    let bad = w.pg.url().replace(support::pg::PASSWORD, "wrong");
    let out = finish(w.oo_at(&bad, &["run", "job", "--", "true"]), HANG);
    out.expect(125).says("refused the credentials");
    assert!(
        !out.stderr.contains("wrong"),
        "no password in messages: {out:#?}"
    );
    finish(w.oo_at(&bad, &["precheck", "job"]), HANG).expect(0);
    let nowhere = w.pg.url_at(support::pg::free_port());
    finish(w.oo_at(&nowhere, &["run", "job", "--", "true"]), HANG)
        .expect(125)
        .says("cannot reach the store");
    let out = finish(w.oo_at(&nowhere, &["precheck", "job"]), HANG);
    out.expect(0).says("fail open");
    finish(
        w.oo_at(
            "postgres://h/db?sslmode=maybe",
            &["run", "job", "--", "true"],
        ),
        HANG,
    )
    .expect(125)
    .says("sslmode `maybe`");
}

/// The lease inequality is checked: a grace that does not fit is refused,
/// naming the largest that would; a short lease with a short grace is fine.
#[test]
fn a_grace_that_does_not_fit_in_the_lease_is_refused() {
    let Some(w) = World::new() else { return };
    w.oo(&[
        "run",
        "--lease",
        "4s",
        "--kill-after",
        "3s",
        "job",
        "--",
        "true",
    ])
    .expect(125)
    .says("--kill-after 3s does not fit in --lease 4s")
    .says("leaves room for a grace of at most");
    w.oo(&[
        "run",
        "--lease",
        "4s",
        "--kill-after",
        "1s",
        "job",
        "--",
        "true",
    ])
    .expect(0);
    w.oo(&["acquire", "job"])
        .expect(125)
        .says("acquire is not supported with --store")
        .says("put the work under `onlyone --store URL run");
}

// ---------------------------------------------------------------------------
// 2. Faults

/// The holder and its command paused (SIGSTOP) past the lease: another
/// holder takes over; on SIGCONT the old command is gone within a second
/// (the watchdog, which was not stopped, killed it at the deadline) and its
/// wrapper exits 124.
#[test]
fn a_paused_holder_ends_its_command_as_soon_as_it_runs_again() {
    let Some(mut w) = World::new() else { return };
    let url = w.pg.url();
    let a = w.holder(
        &url,
        "job",
        &["--lease", "2s", "--kill-after", "200ms"],
        &beating("a"),
    );
    let cmd = command_of(a);
    signal(-(cmd as i32), rustix::process::Signal::STOP);
    signal(a as i32, rustix::process::Signal::STOP);
    // Another holder gets the lock once the lease has run out.
    let out = w.oo(&["run", "--wait", "20s", "job", "--", "true"]);
    out.expect(0);
    let resumed = wall();
    signal(a as i32, rustix::process::Signal::CONT);
    signal(-(cmd as i32), rustix::process::Signal::CONT);
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 124);
    wait_until("the old command to die", Duration::from_secs(2), || {
        !running(cmd)
    });
    let last = last_beat(&w, "a");
    assert!(
        last < resumed + 1.0,
        "the old command beat {:.3}s after SIGCONT",
        last - resumed
    );
}

/// Only the wrapper stopped (SIGSTOP, a debugger), its command running on:
/// the wrapper can neither renew nor end it, so its watchdog ends it (it
/// ignores TERM: KILL) before the lease runs out on the server. The next
/// holder starts after that, and the resumed wrapper exits 124. The
/// model's `WATCHDOG_ON_EOF` mutant is the watchdog that waited for the
/// wrapper to die.
#[test]
fn invariant_9_the_watchdog_keeps_the_deadline_when_the_wrapper_cannot() {
    let Some(mut w) = World::new() else { return };
    let url = w.pg.url();
    let a = w.holder(
        &url,
        "job",
        &["--lease", "3s", "--kill-after", "300ms"],
        &beating("a"),
    );
    let cmd = command_of(a);
    signal(a as i32, rustix::process::Signal::STOP);
    gone_within(cmd, Instant::now(), Duration::from_secs(4), "stopped");
    beats_ended_before_the_lease(&w, "a", Duration::from_secs(3));
    let out = w.oo(&["run", "--wait", "20s", "job", "--", "true"]);
    out.expect(0);
    signal(a as i32, rustix::process::Signal::CONT);
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 124);
}

/// The server stopped (as in a crash) for longer than the lease: the
/// command is gone before the lease could have run out on the server.
#[test]
fn a_server_stopped_past_the_lease_ends_the_command_in_time() {
    let Some(mut w) = World::own(Pg::start()) else {
        return;
    };
    let url = w.pg.url();
    let a = w.holder(
        &url,
        "job",
        &["--lease", "3s", "--kill-after", "300ms"],
        &beating("a"),
    );
    // The lease as the server last extended it: nothing extends it once
    // the server is down.
    std::thread::sleep(Duration::from_millis(100));
    let (until, _) = server_lease(&w, "job");
    w.pg.stop_immediate();
    let down = wall();
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 124);
    let last = last_beat(&w, "a");
    let (until_now, _) = {
        w.pg.start_again().unwrap();
        server_lease(&w, "job")
    };
    assert!(until_now >= until, "the server's lease only grows");
    w.stall.assert_within(
        last < until_now,
        margin_of(Duration::from_secs(3)),
        &format!(
            "the command beat at {last:.3}, after the lease's end {until_now:.3} (server down at \
             {down:.3})"
        ),
    );
}

/// A server restart shorter than the slack: the renewals reconnect and the
/// run goes on to its own end.
#[test]
fn a_server_restart_shorter_than_the_slack_does_not_end_the_run() {
    let Some(mut w) = World::own(Pg::start()) else {
        return;
    };
    let url = w.pg.url();
    let a = w.holder(
        &url,
        "job",
        &["--lease", "12s", "--kill-after", "200ms"],
        "touch \"$READY\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.02; done",
    );
    w.pg.stop_immediate();
    w.pg.start_again().unwrap();
    // Past a renewal or two after the restart.
    let (first_until, _) = server_lease(&w, "job");
    wait_until(
        "a renewal after the restart",
        Duration::from_secs(20),
        || server_lease(&w, "job").0 > first_until,
    );
    assert!(running(a), "the run goes on");
    std::fs::write(w.path("go"), "").unwrap();
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 0);
}

/// The server down when the command ends, and back within the lease: the
/// end event and the release are retried until they go through, so the
/// run is a success in the store's history (never left running) and the
/// next run takes the lock at once.
#[test]
fn a_store_down_at_the_end_still_gets_the_end_and_the_release() {
    let Some(mut w) = World::own(Pg::start()) else {
        return;
    };
    let url = w.pg.url();
    let a = w.holder(
        &url,
        "job",
        &["--lease", "12s", "--kill-after", "200ms"],
        "echo $$ > \"$DIR/cmd.pid.tmp\"; mv \"$DIR/cmd.pid.tmp\" \"$DIR/cmd.pid\"; \
         touch \"$READY\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.02; done",
    );
    let cmd: u32 = w.read("cmd.pid").trim().parse().unwrap();
    w.pg.stop_immediate();
    std::fs::write(w.path("go"), "").unwrap();
    // The command has ended while the server is down: the wrapper is
    // retrying what it must tell the store.
    wait_gone(cmd);
    assert!(running(a), "the wrapper waits for the store");
    w.pg.start_again().unwrap();
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 0);
    let out = w.oo(&["history", "job", "--json"]);
    out.expect(0);
    let run: serde_json::Value = serde_json::from_str(out.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(run["result"], "success", "{run:#}");
    assert_eq!(run["exit"], 0, "{run:#}");
    w.oo(&["run", "job", "--", "true"]).expect(0);
}

/// The connection black-holed by a proxy (nothing passes, nothing closes):
/// the renewals time out and the command is ended before the server's
/// lease ends.
#[test]
fn a_black_holed_connection_ends_the_command_in_time() {
    let Some(mut w) = World::new() else { return };
    let proxy = Proxy::start(w.pg.port);
    let url = w.pg.url_at(proxy.port);
    let a = w.holder(
        &url,
        "job",
        &["--lease", "3s", "--kill-after", "300ms"],
        &beating("a"),
    );
    std::thread::sleep(Duration::from_millis(200));
    proxy.black_hole();
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 124);
    beats_ended_before_the_lease(&w, "a", Duration::from_secs(3));
    // Another holder gets it once the lease has run out, not before.
    let out = w.oo(&["run", "--wait", "10s", "job", "--", "true"]);
    out.expect(0);
}

// ---------------------------------------------------------------------------
// 3. PROTOCOL.md invariants 6-8 against the real store

/// Invariant 6: the holder's deadline counts from the *send* of its last
/// successful renewal, not from its reply. Replies come back 1.8 s late (a
/// slow path: the server extends the lease 1.8 s before the holder hears
/// of it), and the path is cut just after a reply arrived: the command
/// still dies before the lease the server last set ends. Counted from the
/// reply, the holder would kill 1.8 s - M after it (M = L/15 = 1.33 s
/// here).
#[test]
fn invariant_6_the_deadline_counts_from_the_send() {
    let Some(mut w) = World::new() else { return };
    let (last, until) = slow_path_then_cut(&mut w, false);
    w.stall.assert_within(
        last < until,
        margin_of(Duration::from_secs(30)),
        &format!("beat at {last:.3} after the lease's end {until:.3}"),
    );
}

/// The same with PROTOCOL.md's mutant (the deadline counted from when the
/// reply arrived): the command outlives the server's lease, which the test
/// above would catch.
#[test]
fn invariant_6_fails_with_the_deadline_counted_from_the_reply() {
    let Some(mut w) = World::new() else { return };
    let (last, until) = slow_path_then_cut(&mut w, true);
    assert!(
        last > until,
        "the mutant should outlive the lease: beat at {last:.3}, lease end {until:.3}"
    );
}

/// Holds `job` (L = 30 s: R = 5 s, T = 3 s, M = 2 s) through a proxy
/// whose replies come back 2.6 s late (within T, later than M), then cuts
/// the path: (the command's last beat, the end of the lease the server last
/// set).
fn slow_path_then_cut(w: &mut World, mutant: bool) -> (f64, f64) {
    let proxy = Proxy::start(w.pg.port);
    let url = w.pg.url_at(proxy.port);
    let opts = ["--lease", "30s", "--kill-after", "100ms"];
    let a = if mutant {
        let mutant = [("ONLYONE_TEST_LEASE_MUTANT", "deadline-from-reply")];
        w.holder_env(&url, "job", &opts, &beating("a"), &mutant)
    } else {
        w.holder(&url, "job", &opts, &beating("a"))
    };
    // A first renewal makes the renewals' connection; then the path back
    // slows down, a renewal goes through it, and the path is cut.
    let (first, _) = server_lease(w, "job");
    wait_until("a renewal", HANG, || server_lease(w, "job").0 > first);
    proxy.delay_replies(Duration::from_millis(2600));
    let (slow, _) = server_lease(w, "job");
    wait_until("a renewal through the slow path", HANG, || {
        server_lease(w, "job").0 > slow
    });
    // Its reply (one round trip) reaches the holder 2.6 s after the server
    // extended the lease; then the path is cut, before the next renewal.
    let seen = proxy.delivered();
    wait_until("the renewal's reply", HANG, || proxy.delivered() > seen);
    proxy.black_hole();
    assert_eq!(exit_code(w.kid_exit(a, Duration::from_secs(90))), 124);
    let (until, _) = server_lease(w, "job");
    (last_beat(w, "a"), until)
}

/// Invariant 7: a clean end stops the command, then releases. The release
/// sets the lease's end to the server's now: it comes after the command's
/// last sign of life.
#[test]
fn invariant_7_a_clean_end_stops_the_command_before_it_releases() {
    let Some(mut w) = World::new() else { return };
    let url = w.pg.url();
    let a = w.holder(
        &url,
        "job",
        &[],
        "touch \"$READY\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.02; done; \
         date +%s%N > \"$DIR/end\"",
    );
    std::fs::write(w.path("go"), "").unwrap();
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 0);
    let end: f64 = w.read("end").trim().parse::<f64>().unwrap() / 1e9;
    let (until, _) = server_lease(&w, "job");
    assert!(
        until >= end,
        "released at {until:.3}, before the command's end {end:.3}"
    );
    assert!(until < wall(), "released, not left to run out");
}

/// Invariant 8: the margin covers a kill that lands late. A command that
/// ignores TERM needs KILL; even so it is gone before the server's lease
/// ends, with the grace as long as the lease allows.
#[test]
fn invariant_8_the_margin_covers_a_late_kill() {
    let Some(mut w) = World::new() else { return };
    let proxy = Proxy::start(w.pg.port);
    let url = w.pg.url_at(proxy.port);
    // L = 3s: R = 500ms, T = 300ms, M = 200ms; the largest grace is 1.99s.
    let a = w.holder(
        &url,
        "job",
        &["--lease", "3s", "--kill-after", "1900ms"],
        &beating("a"),
    );
    std::thread::sleep(Duration::from_millis(300));
    proxy.black_hole();
    assert_eq!(exit_code(w.kid_exit(a, HANG)), 124);
    beats_ended_before_the_lease(&w, "a", Duration::from_secs(3));
}

// ---------------------------------------------------------------------------

/// The command of a run: the wrapper's child.
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

fn signal(pid: i32, sig: rustix::process::Signal) {
    if pid < 0 {
        let _ =
            rustix::process::kill_process_group(rustix::process::Pid::from_raw(-pid).unwrap(), sig);
    } else {
        let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), sig);
    }
}

/// One `run` serves both places: the same command ends the same way, with
/// the same exit, the same words on stderr and the same run in `history
/// --json`, in a lock directory and in the store. A command that cannot
/// be spawned has its end recorded in both; `--max-time` is said and
/// recorded in both. And `status --json` is one schema: the store's has
/// every field of the directory's, the lease's added, the last run too.
#[test]
fn a_run_ends_the_same_way_in_a_directory_and_in_the_store() {
    let Some(w) = World::new() else { return };
    let dir = w.subdir("locks");
    let url = w.pg.url();
    let at = |store: bool, args: &[&str]| -> Out {
        let mut c = w.program(BIN);
        c.env_remove("ONLYONE_STORE");
        if store {
            c.arg("--store").arg(&url);
        } else {
            c.arg("--dir").arg(&dir);
        }
        c.args(args);
        finish(c, HANG)
    };
    // name, command, exit, said, outcome, ended_by
    type Case<'a> = (
        &'a str,
        &'a [&'a str],
        i32,
        &'a str,
        &'a str,
        Option<&'a str>,
    );
    let cases: [Case; 3] = [
        (
            "gone",
            &["/nonexistent/cmd"],
            127,
            "cannot run `/nonexistent/cmd`",
            "exit",
            None,
        ),
        ("three", &["sh", "-c", "exit 3"], 3, "", "exit", None),
        (
            "slow",
            &["sleep", "30"],
            124,
            "reached --max-time 1s",
            "ended",
            Some("max-time"),
        ),
    ];
    for (name, cmd, code, said, outcome, ended_by) in cases {
        for store in [false, true] {
            let place = if store { "store" } else { "directory" };
            let mut args = vec!["run", "--max-time", "1s", "--kill-after", "1s", name, "--"];
            args.extend_from_slice(cmd);
            let out = at(store, &args);
            assert_eq!(out.status.code(), Some(code), "{place}: {out:#?}");
            assert!(out.stderr.contains(said), "{place}: {out:#?}");
            let h = at(store, &["history", name, "--json"]);
            let runs: Vec<serde_json::Value> = h
                .expect(0)
                .stdout
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(runs.len(), 1, "{place}: {}", h.stdout);
            let r = &runs[0];
            assert_eq!(r["outcome"], outcome, "{place}: {r}");
            assert_eq!(r["ended_by"].as_str(), ended_by, "{place}: {r}");
            if ended_by.is_none() {
                assert_eq!(r["exit"], code, "{place}: {r}");
            }
        }
    }
    status_is_one_schema_and_one_table_in_both_places(&at);
}

/// `status` of a lock that ran `three` (exit 3), in the directory and in
/// the store (`at(store, args)` runs onlyone in one of them): one JSON
/// schema, the lease's fields added with a store, one table renderer, and
/// the last run in both.
fn status_is_one_schema_and_one_table_in_both_places(at: &dyn Fn(bool, &[&str]) -> Out) {
    // `status --json`: one schema, the lease's fields added with a store,
    // and the last run known in both.
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let dir_status = at(false, &["status", "--json", "three"]).expect(0).json();
    let store_status = at(true, &["status", "--json", "three"]).expect(0).json();
    let (d, s) = (&dir_status["locks"][0], &store_status["locks"][0]);
    let mut want = keys(d);
    want.extend(
        [
            "fence",
            "holder_alive",
            "lease_left_seconds",
            "stop_requested",
        ]
        .map(String::from),
    );
    want.sort();
    assert_eq!(keys(s), want, "{d:#}\n{s:#}");
    assert_eq!(store_status["schema"], dir_status["schema"]);
    assert!(store_status["store"].is_string() && dir_status["dir"].is_string());
    for st in [d, s] {
        assert_eq!(st["state"], "free", "{st:#}");
        assert_eq!(st["last_run"]["outcome"], "exit", "{st:#}");
        assert_eq!(st["last_run"]["exit"], 3, "{st:#}");
    }
    // One table renderer: the store's adds its host, lease and fence
    // columns, and both show the last run.
    let dir_table = at(false, &["status", "three"]).expect(0).stdout.clone();
    let store_table = at(true, &["status", "three"]).expect(0).stdout.clone();
    let header = |t: &str| t.lines().next().unwrap_or_default().to_owned();
    assert!(header(&dir_table).contains("CMDPID"), "{dir_table}");
    for col in ["HOST", "LEASE LEFT", "FENCE", "LAST RUN"] {
        assert!(header(&store_table).contains(col), "{store_table}");
    }
    for t in [&dir_table, &store_table] {
        assert!(
            t.lines().nth(1).is_some_and(|l| l.contains("exit 3")),
            "{t}"
        );
    }
}

/// A slow path to the store (each reply 120 ms late, as from far away or
/// on a busy host): connecting takes several round trips, longer than a
/// call may take with `--lease 3s` (300 ms). Nothing is held while it
/// connects, so the connection is given longer; the acquire that follows
/// is one call, and the run goes ahead.
#[test]
fn a_slow_connection_is_not_taken_for_an_unreachable_store() {
    let Some(w) = World::new() else { return };
    let proxy = Proxy::start(w.pg.port);
    proxy.delay_replies(Duration::from_millis(120));
    let url = w.pg.url_at(proxy.port);
    let started = Instant::now();
    let out = finish(
        w.oo_at(
            &url,
            &[
                "run",
                "--lease",
                "3s",
                "--kill-after",
                "1s",
                "job",
                "--",
                "true",
            ],
        ),
        HANG,
    );
    out.expect(0);
    assert!(started.elapsed() < Duration::from_secs(20), "{out:#?}");
    let h = finish(w.oo_at(&url, &["history", "job", "--json"]), HANG);
    assert!(
        h.expect(0).stdout.contains("\"outcome\":\"exit\""),
        "{h:#?}"
    );
}
