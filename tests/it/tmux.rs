//! A tmux server that a fire started (SPEC `reap`, "The run's own work
//! only"): the first fire after a boot starts the server with the agent's
//! window, so the server and every session a user opens on it later carry
//! the run's token. `reap` ends the agent's own work, never the user's
//! session, and never the server while the user's session lives in it; the
//! lock is free afterwards.
//!
//! tmux runs on its own socket in the test's temp dir; the server and
//! everything in it carry the sandbox's mark, so a failing test leaves
//! nothing behind (the server is also told to exit).

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::*;

const LIMIT: Duration = Duration::from_secs(30);

struct World {
    sb: Sandbox,
    locks: PathBuf,
    sock: PathBuf,
}

derefs_to_sandbox!(World);

impl World {
    fn new() -> Option<World> {
        if !have("tmux") {
            eprintln!("tmux is not installed: skipping (.ci/run installs it)");
            return None;
        }
        let sb = Sandbox::new("ONLYONE_TEST_TMUX");
        let locks = sb.path("locks");
        let sock = sb.path("tmux.sock");
        Some(World { sb, locks, sock })
    }

    /// `tmux` on the test's own socket, marked, outside any tmux.
    fn tmux(&self) -> Command {
        let mut c = self.program("tmux");
        c.arg("-S")
            .arg(&self.sock)
            .args(["-f", "/dev/null"])
            .env_remove("TMUX")
            .env_remove("ONLYONE_TOKEN")
            .env_remove("ONLYONE_LOCK")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn tmux_out(&self, args: &[&str]) -> Output {
        self.tmux().args(args).output().unwrap()
    }

    fn onlyone(&self, args: &[&str]) -> Output {
        let mut c = self.program(BIN);
        c.arg("--dir")
            .arg(&self.locks)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.output().unwrap()
    }

    /// The first fire: `onlyone run --linger agent -- tmux new-session -d
    /// -s agents AGENT`, which starts the server. The agent is a shell with
    /// a child, both idle; returns their pids once both are up.
    fn fire_starting_the_server(&self) -> (u32, u32) {
        let pids = self.path("agent.pids");
        let agent = format!(
            "sleep 100001 & echo $$ $! > {p}.tmp && mv {p}.tmp {p}; wait",
            p = pids.display()
        );
        let sock = self.sock.to_str().unwrap();
        let out = self.onlyone(&[
            "run",
            "--linger",
            "agent",
            "--",
            "tmux",
            "-S",
            sock,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "agents",
            &agent,
        ]);
        assert_eq!(out.status.code(), Some(0), "the fire: {out:?}");
        wait_until("the agent to start", LIMIT, || pids.exists());
        let text = std::fs::read_to_string(&pids).unwrap();
        let mut it = text.split_whitespace().map(|p| p.parse::<u32>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    }

    /// The user, later, on the fire's server: a session of their own, its
    /// shell's pid and start. Opened once the boot clock is two ticks past
    /// the command's exit that the lock's record gives (`lingered=`): a
    /// process started within the same tick could be the run's, and is
    /// judged so (start times have a 10 ms grain).
    fn user_session_later(&self) -> (u32, u64) {
        let record = std::fs::read_to_string(self.locks.join("agent.lock")).unwrap();
        let exited: u64 = record
            .lines()
            .find_map(|l| l.strip_prefix("lingered="))
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no lingered= in the record:\n{record}"));
        let hz = rustix::param::clock_ticks_per_second();
        let now = || {
            let up = std::fs::read_to_string("/proc/uptime").unwrap();
            let secs: f64 = up.split_whitespace().next().unwrap().parse().unwrap();
            (secs * hz as f64) as u64
        };
        wait_until("the clock past the command's exit", LIMIT, || {
            now() > exited + 2
        });
        let out = self.tmux_out(&["new-session", "-d", "-s", "user", "sleep 100002"]);
        assert!(out.status.success(), "{out:?}");
        let out = self.tmux_out(&["list-panes", "-t", "user:", "-F", "#{pane_pid}"]);
        let user: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        (user, start_of(user))
    }

    /// The user ends their session (`user`, started at `user_start`), the
    /// last on the `server`, which exits a moment after it: waits for both
    /// to be gone.
    fn end_user_session(&self, user: u32, user_start: u64, server: u32) {
        let server_start = start_of(server);
        let out = self.tmux_out(&["kill-session", "-t", "user"]);
        assert!(out.status.success(), "{out:?}");
        wait_until("the user's pane to go", LIMIT, || !alive(user, user_start));
        wait_until("the emptied server to exit", LIMIT, || {
            !alive(server, server_start)
        });
    }

    fn server_pid(&self) -> u32 {
        let out = self.tmux_out(&["display-message", "-p", "#{pid}"]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    /// Runs `reap agent --idle 1s --json` until `done` says it has acted
    /// (bounded), checking `always` after every call.
    fn reap_until(
        &self,
        what: &str,
        mut done: impl FnMut(&serde_json::Value) -> bool,
        always: impl Fn(),
    ) {
        let start = Instant::now();
        loop {
            let out = self.onlyone(&["reap", "agent", "--idle", "1s", "--json"]);
            assert_eq!(out.status.code(), Some(0), "{out:?}");
            let report: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("reap --json: {e}: {out:?}"));
            always();
            if done(&report) {
                return;
            }
            assert!(
                start.elapsed() < LIMIT,
                "timed out waiting for: {what}; last report: {report:#}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").output();
    }
}

fn verdict_of(report: &serde_json::Value, pid: u32) -> Option<String> {
    report["candidates"]
        .as_array()?
        .iter()
        .find(|c| c["pid"] == pid)
        .and_then(|c| c["verdict"].as_str())
        .map(str::to_owned)
}

fn carries(pid: u32, name: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|e| {
            e.split(|&b| b == 0)
                .any(|v| v.starts_with(format!("{name}=").as_bytes()))
        })
        .unwrap_or(false)
}

/// The scenario: the fire started the server; the user opened a
/// session of their own on it later (a tmux client outside onlyone); the
/// agent goes idle. `reap` ends the agent's window, never the user's
/// session nor the server it lives in; the session keeps the lock held
/// until the user ends it, and then the next fire runs.
#[test]
fn reap_never_ends_a_session_the_user_opened_on_a_server_a_fire_started() {
    let Some(w) = World::new() else {
        return;
    };
    let (agent, child) = w.fire_starting_the_server();
    let server = w.server_pid();
    let (agent_start, child_start, server_start) =
        (start_of(agent), start_of(child), start_of(server));
    assert!(carries(server, "ONLYONE_TOKEN"), "the server is the run's");

    // The user, later, on the same server: their own session, their shell.
    let (user, user_start) = w.user_session_later();
    // The premise: tmux gave the user's session the run's token.
    assert!(
        carries(user, "ONLYONE_TOKEN"),
        "the user's pane carries the token"
    );

    let user_lives = || {
        assert!(
            alive(user, user_start),
            "reap ended the user's own session (pid {user})"
        );
        assert!(
            alive(server, server_start),
            "reap ended the tmux server while the user's session lives in it"
        );
    };
    w.reap_until(
        "reap to end the agent's window",
        |_| !alive(agent, agent_start) && !alive(child, child_start),
        user_lives,
    );
    user_lives();

    // The user's session carries the run's token (tmux copied it), and
    // onlyone cannot tell it from work the run itself started there: it
    // still holds the lock (a wrong "stale" would let a second run in),
    // though nothing of onlyone's ever ends it.
    let out = w.onlyone(&["precheck", "agent"]);
    assert_eq!(
        out.status.code(),
        Some(75),
        "precheck after the reap: {out:?}"
    );

    // Later reaps still leave the user's session alone (reap decides
    // about it, idle as it is, and keeps it).
    let mut decided = false;
    w.reap_until(
        "reap to decide about the user's session",
        |r| {
            let v = verdict_of(r, user);
            // Past the first sight and the window: a decision.
            let settled = v.as_deref().is_some_and(|v| v != "kept-idle-too-short");
            decided |= settled;
            decided
        },
        user_lives,
    );
    user_lives();
    let out = w.onlyone(&["reap", "agent", "--idle", "1s", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        verdict_of(&r, user).as_deref(),
        Some("kept-not-work"),
        "{r:#}"
    );
    user_lives();
    // Once the user ends their session, the lock is free: the next fire runs.
    w.end_user_session(user, user_start, server);
    let out = w.onlyone(&["run", "agent", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "the next fire: {out:?}");
}

/// The control: with no session but the agent's, reap ends the agent's
/// work, the server goes with it (nothing else lives in it), and the lock
/// frees.
#[test]
fn reap_ends_the_agent_and_the_server_a_fire_started_when_nothing_else_lives_in_it() {
    let Some(w) = World::new() else {
        return;
    };
    let (agent, child) = w.fire_starting_the_server();
    let server = w.server_pid();
    let (agent_start, child_start, server_start) =
        (start_of(agent), start_of(child), start_of(server));
    let out = w.onlyone(&["precheck", "agent"]);
    assert_eq!(
        out.status.code(),
        Some(75),
        "the agent holds the lock: {out:?}"
    );
    w.reap_until(
        "reap to end the agent",
        |_| !alive(agent, agent_start) && !alive(child, child_start),
        || {},
    );
    wait_until("the server to go", LIMIT, || !alive(server, server_start));
    let out = w.onlyone(&["run", "agent", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "the next fire: {out:?}");
}

/// `stop` too ends the run's own work only: the agent's window, never the
/// session the user opened later on the server, nor that server.
#[test]
fn stop_never_ends_a_session_the_user_opened_on_a_server_a_fire_started() {
    let Some(w) = World::new() else {
        return;
    };
    let (agent, child) = w.fire_starting_the_server();
    let server = w.server_pid();
    let (agent_start, child_start, server_start) =
        (start_of(agent), start_of(child), start_of(server));
    let (user, user_start) = w.user_session_later();
    // stop ends the agent's work; the user's session, which carries the
    // token, keeps the lock held, and stop says so rather than claim it
    // stopped the run.
    let out = w.onlyone(&["stop", "--kill-after", "1s", "agent"]);
    wait_until("the agent to go", LIMIT, || {
        !alive(agent, agent_start) && !alive(child, child_start)
    });
    assert!(alive(user, user_start), "stop ended the user's session");
    assert!(
        alive(server, server_start),
        "stop ended the server the user's session lives in"
    );
    assert_eq!(out.status.code(), Some(125), "stop: {out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("ended what was left of the run's own work")
            && said.contains(&format!("still held: by pid {user}"))
            && said.contains(&format!("kill -HUP {user}"))
            && !said.contains("stop it"),
        "stop: {out:?}"
    );
    w.end_user_session(user, user_start, server);
    let out = w.onlyone(&["run", "agent", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "the next fire: {out:?}");
}

/// What keeps the lock held once the agent is reaped is the user's
/// session, outside the run's own work, which onlyone never ends: `status`
/// (the table and `--json`), the skip's message (`run`, `precheck`) and
/// `stop` name it (its pid, its command, its terminal, the server it lives
/// in) and the one thing to do, never "wait for it or stop it", which
/// `stop` cannot do. Closing the session frees the lock.
#[test]
fn status_the_skip_and_stop_name_the_session_that_keeps_the_lock_and_what_to_do() {
    let Some(w) = World::new() else {
        return;
    };
    let (agent, child) = w.fire_starting_the_server();
    let server = w.server_pid();
    let (agent_start, child_start) = (start_of(agent), start_of(child));
    let (user, user_start) = w.user_session_later();
    w.reap_until(
        "reap to end the agent's window",
        |_| !alive(agent, agent_start) && !alive(child, child_start),
        || {},
    );
    let names_it = |text: &str, what: &str| {
        for needle in [
            format!("pid {user} (`sleep 100002`, on /dev/pts/"),
            format!("a session that the run's terminal server (pid {server}) opened"),
            format!("`kill -HUP {user}`"),
        ] {
            assert!(text.contains(&needle), "{what} lacks {needle:?}:\n{text}");
        }
        assert!(!text.contains("stop it"), "{what} says to stop it:\n{text}");
    };
    let out = w.onlyone(&["status", "agent"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    names_it(&String::from_utf8_lossy(&out.stdout), "status");
    let out = w.onlyone(&["status", "--json", "agent"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kept = &v["locks"][0]["outside_work"];
    assert_eq!(kept.as_array().map(Vec::len), Some(1), "{v:#}");
    assert_eq!(kept[0]["pid"], user, "{v:#}");
    assert_eq!(kept[0]["server_pid"], server, "{v:#}");
    assert_eq!(kept[0]["command"], "sleep 100002", "{v:#}");
    assert!(
        kept[0]["terminal"]
            .as_str()
            .is_some_and(|t| t.starts_with("/dev/pts/")),
        "{v:#}"
    );
    let out = w.onlyone(&["run", "agent", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    names_it(&String::from_utf8_lossy(&out.stderr), "the skip");
    let out = w.onlyone(&["precheck", "agent"]);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    names_it(&String::from_utf8_lossy(&out.stderr), "precheck");
    // Nothing of the run's own work is left: stop signals nothing and
    // says so at once.
    let started = Instant::now();
    let out = w.onlyone(&["stop", "agent"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "{out:?}");
    names_it(&String::from_utf8_lossy(&out.stderr), "stop");
    assert!(alive(user, user_start), "the user's session was ended");
    // The one thing to do, done: the lock frees.
    w.end_user_session(user, user_start, server);
    let out = w.onlyone(&["run", "agent", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "the next fire: {out:?}");
}
