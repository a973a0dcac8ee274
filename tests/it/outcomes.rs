//! Outcomes that tell the truth: a script's end carries its exit code
//! (`release --exit`), a run ended once idle is done (not failed), a
//! stopped run is stopped whoever stopped it, a lock broken since its
//! first run exports a last success of 0, a typo is UNKNOWN, and a run
//! that ended is never shown running.

use crate::support;

use std::process::Command;
use std::time::Duration;

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
            sb: Sandbox::new("ONLYONE_OUTCOMES_MARK"),
        }
    }

    /// The sample of `metric` for `lock` in `onlyone metrics`.
    fn metric(&self, metric: &str, lock: &str) -> Option<f64> {
        let out = self.oo(&["metrics", lock]);
        out.expect(0);
        let prefix = format!("{metric}{{lock=\"{lock}\"}} ");
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|v| v.parse().unwrap())
    }

    /// Runs the script `body` as cron would (`sh -c ./s.sh`), onlyone in
    /// its PATH and the sandbox's lock directory in its environment: its
    /// exit code.
    fn script(&self, body: &str) -> i32 {
        use std::os::unix::fs::PermissionsExt;
        let script = self.path("s.sh");
        std::fs::write(&script, body).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = self.program("sh");
        c.args(["-c", "./s.sh"])
            .current_dir(self.dir())
            .env("PATH", path_with_onlyone(self.dir()))
            .env("ONLYONE_DIR", self.dir());
        finish(c, HANG).code()
    }
}

/// The README's trap line, as the README gives it.
fn readme_trap() -> String {
    let block = readme_block("acquire-script");
    let line = block
        .lines()
        .find(|l| l.starts_with("trap "))
        .expect("the README's script has a trap")
        .to_owned();
    assert!(line.contains("--exit $?"), "{line}");
    line
}

/// A `set -e` script that fails, with the README's trap, is a failure
/// with its exit code in `history`, `check` and `metrics`; one that
/// succeeds is a success; one whose trap gives no code is "released, exit
/// unknown", which `check` warns about (and never counts as a success).
#[test]
fn a_script_s_end_carries_its_exit_code() {
    let w = World::new();
    let trap = readme_trap();
    let script = |last: &str| {
        format!(
            "#!/bin/sh\nset -e\nvars=$(onlyone acquire -q sync --export) || exit\n\
             eval \"$vars\"\n{trap}\n{last}\n"
        )
    };
    assert_eq!(w.script(&script("sh -c 'exit 3'")), 3);
    let runs = w.history_json("sync");
    assert_eq!(runs[0]["outcome"], "released", "{runs:#?}");
    assert_eq!(runs[0]["result"], "failure", "{runs:#?}");
    assert_eq!(runs[0]["exit"], 3, "{runs:#?}");
    let check = w.oo(&["check", "sync", "--max-age", "1h"]);
    check
        .expect(2)
        .prints("the last run failed (released, exit 3");
    check.prints("no success recorded");
    assert_eq!(w.metric("onlyone_last_exit_code", "sync"), Some(3.0));
    assert_eq!(
        w.metric("onlyone_last_success_timestamp_seconds", "sync"),
        Some(0.0)
    );
    let text = w.oo(&["history", "sync"]);
    text.expect(0).prints("0 of 1 succeeded");

    assert_eq!(w.script(&script("true")), 0);
    let runs = w.history_json("sync");
    assert_eq!(runs[0]["result"], "success", "{runs:#?}");
    assert_eq!(runs[0]["exit"], 0, "{runs:#?}");
    w.oo(&["check", "sync", "--max-age", "1h"]).expect(0);
    assert!(w.metric("onlyone_last_success_timestamp_seconds", "sync") > Some(0.0));

    // An earlier version's trap: no code given.
    let old = script("true").replace(" --exit $?", "");
    assert_eq!(w.script(&old), 0);
    let runs = w.history_json("sync");
    assert_eq!(runs[0]["result"], "exit-unknown", "{runs:#?}");
    assert!(runs[0]["exit"].is_null(), "{runs:#?}");
    w.oo(&["check", "sync"])
        .expect(1)
        .prints("release sync --exit $?");
    w.oo(&["history", "sync"])
        .expect(0)
        .prints("1 of 2 succeeded (50%), 1 released with exit unknown");
}

/// `--exit` takes an exit code and nothing else.
#[test]
fn release_exit_refuses_what_is_not_an_exit_code() {
    let w = World::new();
    for bad in ["256", "-1", "x"] {
        w.oo(&["release", "sync", "--exit", bad])
            .expect(125)
            .says("--exit");
    }
}

/// A run ended by `--idle-timeout` exits 124 and is done when idle: a
/// success for `check --max-age` and the last-success metric, not "the
/// last run failed".
#[test]
fn an_idle_end_is_done_not_failed() {
    let w = World::new();
    w.oo(&[
        "run",
        "--idle-timeout",
        "1s",
        "agent",
        "--",
        "sleep",
        "1000",
    ])
    .expect(124);
    let runs = w.history_json("agent");
    assert_eq!(runs[0]["outcome"], "ended", "{runs:#?}");
    assert_eq!(runs[0]["ended_by"], "idle", "{runs:#?}");
    assert_eq!(runs[0]["result"], "done-when-idle", "{runs:#?}");
    let check = w.oo(&["check", "agent", "--max-age", "1h"]);
    check.expect(0).prints("done when idle");
    assert!(w.metric("onlyone_last_success_timestamp_seconds", "agent") > Some(0.0));
    w.oo(&["history", "agent"])
        .expect(0)
        .prints("1 of 1 succeeded (100%) (1 done when idle)");
}

/// `--replace` stops the live run: the old run is stopped, neither a
/// success nor a failure.
#[test]
fn a_replaced_run_is_stopped() {
    let mut w = World::new();
    let ready = w.path("ready");
    let mut c = w.oo_cmd();
    c.args([
        "run",
        "j",
        "--",
        "sh",
        "-c",
        "touch \"$1\"; exec sleep 1000",
        "sh",
    ])
    .arg(&ready);
    w.keep(c);
    wait_until("the first run", HANG, || ready.exists());
    w.oo(&["run", "--replace", "j", "--", "true"]).expect(0);
    let runs = w.history_json("j");
    assert_eq!(runs[0]["result"], "success", "{runs:#?}");
    assert_eq!(runs[1]["result"], "stopped", "{runs:#?}");
    assert_eq!(runs[1]["ended_by"], "stop", "{runs:#?}");
    w.oo(&["check", "j"]).expect(0);
}

/// root stops a run of nobody's: the stop's event is root's, but the run's
/// own end, in nobody's journal, says stopped (the wrapper read the mark
/// on the signal), and nobody's `check` does not call it a failure.
#[test]
fn a_run_stopped_by_another_user_is_stopped_in_its_own_history() {
    let mut w = World::new();
    let Some(sh) =
        w.shared_with_nobody("a_run_stopped_by_another_user_is_stopped_in_its_own_history")
    else {
        return;
    };
    let (locks, as_nobody) = (&sh.locks, |w: &World, args: &[&str]| sh.as_nobody(w, args));
    let ready = locks.join("ready");
    let mut c = as_nobody(&w, &["run", "job", "--", "sh", "-c"]);
    c.arg("touch \"$1\"; exec sleep 1000").arg("sh").arg(&ready);
    w.keep(c);
    wait_until("nobody's run", HANG, || ready.exists());
    let mut stop = w.program(BIN);
    stop.arg("--dir").arg(locks).args(["stop", "job"]);
    finish(stop, HANG).expect(0);
    let out = finish(as_nobody(&w, &["history", "job", "--json"]), HANG);
    out.expect(0);
    let run: Value = serde_json::from_str(out.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(run["result"], "stopped", "{run:#}");
    assert_eq!(run["ended_by"], "stop", "{run:#}");
    finish(as_nobody(&w, &["check", "job"]), HANG).expect(0);
}

/// `check` of a name with neither a lock file nor a journal is UNKNOWN,
/// and says where it looked.
#[test]
fn check_of_a_name_that_is_nowhere_is_unknown() {
    let w = World::new();
    let out = w.oo(&["check", "nosuch", "--max-runtime", "1h"]);
    out.expect(3).prints("no such lock");
    out.prints(&w.lock("nosuch").display().to_string());
    out.prints("journal");
    // A lock that ran is judged as before.
    w.oo(&["run", "real", "--", "true"]).expect(0);
    w.oo(&["check", "real", "--max-runtime", "1h"]).expect(0);
    // Of several, the missing one is UNKNOWN and the rest are judged.
    w.oo(&["check", "real", "nosuch"])
        .expect(3)
        .prints("OK real")
        .prints("UNKNOWN nosuch");
}

/// A run whose wrapper and command were killed is abandoned in `history`,
/// `status` and `check` at once, before anything found its lock stale.
#[test]
fn a_run_that_ended_is_never_shown_running() {
    let mut w = World::new();
    let ready = w.path("ready");
    let mut c = w.oo_cmd();
    c.args([
        "run",
        "k",
        "--",
        "sh",
        "-c",
        "echo $$ > \"$1\"; exec sleep 1000",
        "sh",
    ])
    .arg(&ready);
    let wrapper = w.keep(c);
    wait_until("the run", HANG, || {
        std::fs::read_to_string(&ready).is_ok_and(|s| s.ends_with('\n'))
    });
    let cmd: u32 = std::fs::read_to_string(&ready)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(w.history_json("k")[0]["outcome"], "running");
    kill9_pid(wrapper);
    kill9_pid(cmd);
    wait_gone(cmd);
    wait_gone(wrapper);
    let runs = w.history_json("k");
    assert_eq!(runs[0]["outcome"], "abandoned", "{runs:#?}");
    assert_eq!(runs[0]["result"], "failure", "{runs:#?}");
    let st = w.oo(&["status", "--json", "k"]);
    st.expect(0);
    assert_eq!(st.json()["locks"][0]["last_run"]["outcome"], "abandoned");
    w.oo(&["check", "k"])
        .expect(2)
        .prints("the last run failed (abandoned");
}

/// USR1, USR2 and ALRM sent to the wrapper reach the command (a log
/// rotator's word is for the work) instead of killing the wrapper: the
/// run goes on, and its end is recorded.
#[test]
fn usr1_usr2_and_alrm_reach_the_command_and_the_end_is_recorded() {
    for sig in ["USR1", "USR2", "ALRM"] {
        let w = World::new();
        let ready = w.path("ready");
        let got = w.path("got");
        let mut c = w.oo_cmd();
        c.args(["run", "r", "--", "sh", "-c"])
            .arg(format!(
                "trap 'echo {sig} > \"$2\"' {sig}; touch \"$1\"; \
                 while [ ! -e \"$2\" ]; do sleep 0.01; done; exit 0"
            ))
            .arg("sh")
            .arg(&ready)
            .arg(&got);
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut run = Kid::new(c.spawn().unwrap());
        wait_until("the run", HANG, || ready.exists());
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(run.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let (st, _, err) = wait_bounded(&mut run, std::time::Instant::now(), HANG, sig);
        assert_eq!(
            st.code(),
            Some(0),
            "{sig}: the wrapper must live and exit 0: {st:?} {err}"
        );
        assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), sig);
        let runs = w.history_json("r");
        assert_eq!(runs[0]["result"], "success", "{sig}: {runs:#?}");
    }
}

/// Another user's `check` of a root job (a monitoring agent's account)
/// finds root's lock and nothing of it in its own journal: UNKNOWN, naming
/// whose runs they are and the fix, never "OK - no run recorded".
#[test]
fn another_user_s_check_of_a_root_job_is_unknown_not_ok() {
    let mut w = World::new();
    let Some(sh) = w.shared_with_nobody("another_user_s_check_of_a_root_job_is_unknown_not_ok")
    else {
        return;
    };
    let locks = &sh.locks;
    let ready = locks.join("ready");
    let mut c = w.program(BIN);
    c.arg("--dir")
        .arg(locks)
        .args([
            "run",
            "job",
            "--",
            "sh",
            "-c",
            "touch \"$1\"; exec sleep 1000",
            "sh",
        ])
        .arg(&ready);
    w.keep(c);
    wait_until("root's run", HANG, || ready.exists());
    let out = finish(sh.as_nobody(&w, &["check", "job", "--max-age", "1d"]), HANG);
    out.expect(3)
        .prints("the lock is root's")
        .prints("--state-dir");
}
