//! The seed's scheduled agent in a terminal that is never closed, run as
//! the README says: each fire is the README's tmux recipe, read from the
//! README itself (`readme-test: tmux`), around an agent that works in
//! steps, then sits at a prompt; `reap` ends it once idle. What a user of
//! the same host does meanwhile (their own `tmux new-session`, opened
//! before or after the first fire; a client attached to watch the agent;
//! `tmux ls`) must never become part of the run, nor keep the agent from
//! being idle. And a reap whose deadline is shorter than its grace ends
//! the work within it and records it, never a false failure.
//!
//! tmux runs with `TMUX_TMPDIR` in the test's temp dir (its default
//! server and the recipe's own socket both live there) and a `HOME` with
//! no `.tmux.conf`; every process carries the sandbox's mark, so a failing
//! test leaves nothing behind (the servers are also told to exit).

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(30);

struct World {
    sb: Sandbox,
    locks: PathBuf,
    work: PathBuf,
    tmux_tmp: PathBuf,
    home: PathBuf,
    path: std::ffi::OsString,
}

derefs_to_sandbox!(World);

/// The agent: works in steps (printing), then sits at its prompt.
const AGENT: &str = "#!/bin/sh
echo $$ > agent.pid.tmp && mv agent.pid.tmp agent.pid
for step in 1 2 3 4 5; do echo \"step $step\"; sleep 0.1; done
: > at-prompt
printf 'your answer? '
read answer
";

impl World {
    fn new() -> Option<World> {
        for prog in ["tmux", "script"] {
            if !have(prog) {
                eprintln!("{prog} is not installed: skipping (.ci/run installs it)");
                return None;
            }
        }
        let sb = Sandbox::new("ONLYONE_TEST_AGENT_TERMINAL");
        let locks = sb.subdir("locks");
        let work = sb.subdir("work");
        let tmux_tmp = sb.subdir("tmux");
        let home = sb.subdir("home");
        let agent = work.join("agent.sh");
        std::fs::write(&agent, AGENT).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = path_with_onlyone(sb.dir());
        Some(World {
            sb,
            locks,
            work,
            tmux_tmp,
            home,
            path,
        })
    }

    /// A program of the host's user: marked, in the work directory, with
    /// the test's tmux directory, home and `PATH`, outside any tmux and
    /// any run.
    fn user_program(&self, prog: &str) -> Command {
        let mut c = self.program(prog);
        c.current_dir(&self.work)
            .env("TMUX_TMPDIR", &self.tmux_tmp)
            .env("HOME", &self.home)
            .env("PATH", &self.path)
            .env("ONLYONE_DIR", &self.locks)
            .env_remove("TMUX")
            .env_remove("ONLYONE_TOKEN")
            .env_remove("ONLYONE_LOCK")
            .env_remove("ONLYONE_RUN_ID");
        c
    }

    /// One fire: the README's recipe, as written.
    fn fire(&self) -> Out {
        let mut c = self.user_program("sh");
        c.arg("-c").arg(readme_block("tmux"));
        finish_as(c, LIMIT, "a fire of the README's tmux recipe")
    }

    /// `onlyone ARGS`, for the fires' lock directory.
    fn oo_here(&self, args: &[&str]) -> Out {
        let mut c = self.user_program(BIN);
        c.args(args);
        finish(c, LIMIT)
    }

    /// `tmux` as the recipe calls it: with the socket it names (`-L
    /// NAME`), or the default server when it names none.
    fn recipe_tmux(&self) -> Command {
        let recipe = readme_block("tmux");
        let mut c = self.user_program("tmux");
        let words: Vec<&str> = recipe.split_whitespace().collect();
        if let Some(i) = words.windows(2).position(|w| w == ["tmux", "-L"]) {
            c.args(["-L", words[i + 2]]);
        }
        c
    }

    /// The user's own plain `tmux`: the default server.
    fn user_tmux(&self) -> Command {
        self.user_program("tmux")
    }

    fn tmux_out(&self, mut c: Command, args: &[&str]) -> Out {
        c.args(args);
        finish(c, LIMIT)
    }

    /// The pid of the server `c` talks to.
    fn server_of(&self, c: Command) -> u32 {
        let out = self.tmux_out(c, &["display-message", "-p", "#{pid}"]);
        out.expect(0);
        out.stdout.trim().parse().unwrap()
    }

    /// The agent of the latest fire, once it sits at its prompt: its pid
    /// and start.
    fn agent_at_prompt(&self) -> (u32, u64) {
        let pidfile = self.work.join("agent.pid");
        let marker = self.work.join("at-prompt");
        wait_until("the agent to reach its prompt", LIMIT, || {
            pidfile.exists() && marker.exists()
        });
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let read = || {
            let st = onlyone::procfs::read_stat(pid).unwrap().unwrap();
            (st.cpu_ticks, onlyone::procfs::io_bytes(pid), st.state)
        };
        let mut last = read();
        wait_until("the agent to sit at its prompt", LIMIT, || {
            std::thread::sleep(Duration::from_millis(30));
            let now = read();
            let same = now == last && now.2 == 'S';
            last = now;
            same
        });
        (pid, start_of(pid))
    }

    /// Clears what the last agent left, so the next one is seen.
    fn forget_agent(&self) {
        let _ = std::fs::remove_file(self.work.join("agent.pid"));
        let _ = std::fs::remove_file(self.work.join("at-prompt"));
    }

    /// The user's plain `tmux new-session` on their own default server:
    /// the pid and start of its pane.
    fn user_session(&self, name: &str) -> (u32, u64) {
        self.tmux_out(
            self.user_tmux(),
            &["new-session", "-d", "-s", name, "sleep 100002"],
        )
        .expect(0);
        let out = self.tmux_out(
            self.user_tmux(),
            &["list-panes", "-t", &format!("{name}:"), "-F", "#{pane_pid}"],
        );
        out.expect(0);
        let pid: u32 = out.stdout.trim().parse().unwrap();
        (pid, start_of(pid))
    }

    /// A person watching the agent: a client attached to the recipe's
    /// server (`tmux attach` in a terminal of its own), kept until the
    /// test ends or the server exits.
    fn watch(&mut self) {
        let attach = {
            let c = self.recipe_tmux();
            let mut words = vec!["tmux".to_owned()];
            words.extend(c.get_args().map(|a| a.to_string_lossy().into_owned()));
            words.extend(["attach".into(), "-t".into(), "agents".into()]);
            words.join(" ")
        };
        // Its input stays open and silent (at the end of its input,
        // `script` would type an end of file into the agent's prompt).
        let child = self
            .user_program("script")
            .args(["-qfc", &attach, "/dev/null"])
            .env("TERM", "xterm")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.kids.push(child);
        wait_until("a client to attach", LIMIT, || {
            let out = self.tmux_out(self.recipe_tmux(), &["list-clients"]);
            out.status.success() && out.stdout.contains("agents")
        });
    }

    /// Runs `reap --idle 1s --json agent` until the agent is gone
    /// (bounded), checking `always` after every call.
    fn reap_until_gone(&self, agent: (u32, u64), always: impl Fn()) {
        wait_until("reap to end the agent", LIMIT, || {
            let out = self.oo_here(&["reap", "--idle", "1s", "--json", "agent"]);
            out.expect(0);
            always();
            if alive(agent.0, agent.1) {
                std::thread::sleep(Duration::from_millis(100));
                false
            } else {
                true
            }
        });
    }

    /// The counters of a process: CPU ticks and bytes read and written.
    fn counters(pid: u32) -> (u64, Option<u64>) {
        let st = onlyone::procfs::read_stat(pid).unwrap().unwrap();
        (st.cpu_ticks, onlyone::procfs::io_bytes(pid))
    }

    /// What the reaper's state remembers of process `pid`: its CPU ticks
    /// and bytes.
    fn remembered(&self, pid: u32) -> Option<(u64, Option<u64>)> {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.locks.join(".onlyone-reap.json")).ok()?)
                .ok()?;
        let id = format!("{pid}-{}", start_of(pid));
        let seen = &v["procs"][&id];
        Some((seen["cpu"].as_u64()?, seen["io"].as_u64()))
    }

    /// Moves every "last changed" time in the reaper's state back by
    /// `by`, as if that much time had passed with nothing changing.
    fn age_state(&self, by: Duration) {
        let p = self.locks.join(".onlyone-reap.json");
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        for (_, seen) in v["procs"].as_object_mut().unwrap() {
            let t = seen["changed_ms"].as_i64().unwrap();
            seen["changed_ms"] = serde_json::json!(t - by.as_millis() as i64);
        }
        std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for c in [self.recipe_tmux(), self.user_tmux()] {
            let mut c = c;
            c.arg("kill-server")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let _ = c.status();
        }
    }
}

fn carries(pid: u32, name: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|e| {
            e.split(|&b| b == 0)
                .any(|v| v.starts_with(format!("{name}=").as_bytes()))
        })
        .unwrap_or(false)
}

fn env_of(pid: u32, name: &str) -> Option<String> {
    let e = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    e.split(|&b| b == 0).find_map(|v| {
        let v = String::from_utf8_lossy(v);
        v.strip_prefix(&format!("{name}=")).map(str::to_owned)
    })
}

fn verdict_of(report: &serde_json::Value, pid: u32) -> Option<String> {
    report["candidates"]
        .as_array()?
        .iter()
        .find(|c| c["pid"] == pid)
        .and_then(|c| c["verdict"].as_str())
        .map(str::to_owned)
}

/// The afternoon: the first fire after a boot starts tmux; a
/// minute later the user opens a plain `tmux new-session` of their own,
/// and watches the agent with a client attached. The reaper ends the idle
/// agent, the next fire runs (0), and the user's session lives on, never
/// part of the run.
#[test]
fn a_users_session_opened_after_the_first_fire_never_becomes_part_of_the_run() {
    let Some(mut w) = World::new() else {
        return;
    };
    w.fire().expect(0);
    let agent = w.agent_at_prompt();
    let user = w.user_session("user");
    w.watch();
    let user_server = w.server_of(w.user_tmux());
    let user_lives = || {
        assert!(
            alive(user.0, user.1),
            "the user's own session (pid {}) was ended",
            user.0
        );
    };
    // Fires skip while the agent lives.
    w.fire().expect(75);
    w.reap_until_gone(agent, user_lives);
    w.forget_agent();
    let next = w.fire();
    assert_eq!(
        next.code(),
        0,
        "the next fire after the reap must run; status: {:#?}; the fire: {next:#?}",
        w.oo_here(&["status", "agent"])
    );
    w.agent_at_prompt();
    user_lives();
    // The user's server and session were never the run's.
    for (pid, what) in [
        (user_server, "the user's tmux server"),
        (user.0, "the user's pane"),
    ] {
        for var in ["ONLYONE_TOKEN", "ONLYONE_LOCK", "ONLYONE_RUN_ID"] {
            assert!(!carries(pid, var), "{what} (pid {pid}) carries {var}");
        }
    }
}

/// The user's own tmux server was there first (their login started it):
/// the fire leaves it alone, and the agent still gets its run's id.
#[test]
fn a_users_tmux_server_that_was_there_first_is_left_alone_and_the_agent_has_its_run_id() {
    let Some(w) = World::new() else {
        return;
    };
    let user = w.user_session("mine");
    let user_server = w.server_of(w.user_tmux());
    let sessions = |c: Command| {
        let out = w.tmux_out(c, &["list-sessions", "-F", "#{session_name}"]);
        out.stdout
    };
    w.fire().expect(0);
    let agent = w.agent_at_prompt();
    // The agent carries its own run's token, lock and id.
    let record = std::fs::read_to_string(w.locks.join("agent.lock")).unwrap();
    let token = record
        .lines()
        .find_map(|l| l.strip_prefix("token="))
        .unwrap()
        .to_owned();
    assert_eq!(env_of(agent.0, "ONLYONE_TOKEN").as_deref(), Some(&*token));
    let rid = format!(
        "{}-{}-{}-{}-{}",
        &token[..8],
        &token[8..12],
        &token[12..16],
        &token[16..20],
        &token[20..]
    );
    assert_eq!(
        env_of(agent.0, "ONLYONE_RUN_ID").as_deref(),
        Some(&*rid),
        "the agent's run id"
    );
    assert_eq!(
        sessions(w.user_tmux()).trim(),
        "mine",
        "the fire added to the user's own server"
    );
    w.reap_until_gone(agent, || assert!(alive(user.0, user.1)));
    w.forget_agent();
    w.fire().expect(0);
    w.agent_at_prompt();
    assert!(alive(user.0, user.1), "the user's session was ended");
    assert!(!carries(user_server, "ONLYONE_TOKEN"));
}

/// A person watching the agent (a client attached to its server, and
/// `tmux ls` now and then) makes the server redraw and answer: that is
/// the server's housekeeping, not the agent's work. With the default
/// window (10 minutes, the reaper's state aged past it), the reaper ends
/// the idle agent all the same, and the next fire runs.
#[test]
fn a_person_watching_the_agent_does_not_keep_it_from_being_idle() {
    let Some(mut w) = World::new() else {
        return;
    };
    w.fire().expect(0);
    let agent = w.agent_at_prompt();
    let server = w.server_of(w.recipe_tmux());
    let first = w.oo_here(&["reap", "--json", "agent"]);
    first.expect(0);
    let seen = w
        .remembered(server)
        .unwrap_or_else(|| panic!("the reaper saw no server: {first:#?}"));
    // Someone attaches to watch, and asks tmux what runs: the server
    // works for them (its counters move), the agent does not.
    let at_prompt = World::counters(agent.0);
    w.watch();
    w.tmux_out(w.recipe_tmux(), &["ls"]).expect(0);
    wait_until("the server to work for its client", LIMIT, || {
        World::counters(server) != seen
    });
    assert_eq!(
        World::counters(agent.0),
        at_prompt,
        "the agent itself did something: the test's premise is gone"
    );
    w.age_state(Duration::from_secs(11 * 60));
    let out = w.oo_here(&["reap", "--json", "agent"]);
    let report = out.json();
    assert_eq!(
        verdict_of(&report, agent.0).as_deref(),
        Some("ended"),
        "the watched agent, idle at its prompt: {report:#}"
    );
    assert!(!alive(agent.0, agent.1));
    wait_until("the agent's server to exit", LIMIT, || !running(server));
    w.forget_agent();
    w.fire().expect(0);
    w.agent_at_prompt();
}

/// A run that leaves a process ignoring TERM, lingering idle: its pid and
/// start, once the reaper would end it (`--idle 1s`).
fn lingering_deaf_process(sb: &Sandbox, lock: &str) -> (u32, u64) {
    sb.oo(&[
        "run",
        "-q",
        "--linger",
        lock,
        "--",
        "sh",
        "-c",
        "setsid sh -c \"trap \\\"\\\" TERM; exec sleep 300\" </dev/null >/dev/null 2>&1 &",
    ])
    .expect(0);
    let record = std::fs::read_to_string(sb.lock(lock)).unwrap();
    let linger = record
        .lines()
        .find_map(|l| l.strip_prefix("linger="))
        .unwrap_or_else(|| panic!("nothing lingers:\n{record}"));
    let pid: u32 = linger.split(':').next().unwrap().parse().unwrap();
    let start = start_of(pid);
    sb.oo(&["reap", "--idle", "1s", lock]).expect(0);
    sb.oo(&["reap", "--idle", "1s", lock]).expect(0);
    wait_until("a reap to find it idle for 1s", LIMIT, || {
        let r = sb.oo(&["reap", "--idle", "1s", "--dry-run", "--json", lock]);
        verdict_of(&r.json(), pid).as_deref() == Some("ended")
    });
    (pid, start)
}

/// The commands: a lingering process that ignores TERM, reaped
/// with a deadline (2 s) shorter than the grace (10 s). The deadline caps
/// the grace: TERM, then KILL with time left to see it gone; the reap
/// says so, and the run is recorded done when idle, never failed.
#[test]
fn a_reap_whose_deadline_is_shorter_than_its_grace_ends_the_work_and_records_it() {
    let sb = Sandbox::new("ONLYONE_TEST_AGENT_TERMINAL");
    let (pid, start) = lingering_deaf_process(&sb, "rp");
    let out = sb.oo(&[
        "reap",
        "--idle",
        "1s",
        "--grace",
        "10s",
        "--deadline",
        "2s",
        "rp",
    ]);
    out.expect(0);
    assert!(
        !out.stdout.contains("failed"),
        "it was ended: the reap must not say it failed: {out:#?}"
    );
    out.prints(&format!("ended pid {pid}"))
        .prints("which the deadline cut short");
    assert!(!alive(pid, start), "{out:#?}");
    let runs = sb.history_json("rp");
    assert_eq!(runs[0]["result"], "done-when-idle", "{runs:#?}");
    sb.oo(&["check", "rp"]).expect(0);
}

/// With too little of its deadline left to end anything and see it gone,
/// a reap starts nothing: the process is kept for the next reap, said
/// even with `-q`, and nothing is recorded as failed.
#[test]
fn a_reap_with_no_time_to_end_the_work_leaves_it_for_the_next_reap() {
    let sb = Sandbox::new("ONLYONE_TEST_AGENT_TERMINAL");
    let (pid, start) = lingering_deaf_process(&sb, "rp");
    let out = sb.oo(&["reap", "-q", "--idle", "1s", "--deadline", "300ms", "rp"]);
    out.expect(0);
    out.prints(&format!("kept pid {pid}"))
        .prints("left for the next reap")
        .prints("--deadline");
    assert!(!out.stdout.contains("failed"), "{out:#?}");
    assert!(alive(pid, start), "it was left alone: {out:#?}");
    sb.oo(&["check", "rp"]).expect(0);
    assert_eq!(sb.history_json("rp")[0]["result"], "running");
    let out = sb.oo(&["reap", "-q", "--idle", "1s", "--grace", "1s", "rp"]);
    out.expect(0).prints(&format!("ended pid {pid}"));
    assert!(!alive(pid, start));
    assert_eq!(sb.history_json("rp")[0]["result"], "done-when-idle");
}
