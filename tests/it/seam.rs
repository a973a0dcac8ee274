//! What the command says where a lock lives meets how the lock is taken,
//! stopped and judged: sentences no other test holds whole, each one
//! triggered for real (a stale record, a live holder, a queued waiter, a
//! lease whose holder was killed or paused) and compared with its whole
//! shape, so that moving that seam into the library changes no word. Where
//! a part varies (a duration, a command as the record shows it), the
//! pattern has `*`; everything else is the sentence itself. The store's
//! cases start their own throwaway cluster (see `support::pg`) and skip,
//! saying why, where PostgreSQL is not installed.

use crate::support;

use std::time::Duration;

use rustix::process::Signal;
use support::*;

const HANG: Duration = Duration::from_secs(60);

/// Whether `line` is `pattern`, each `*` of which stands for any text
/// (none included).
fn fits(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = parts.split_first().unwrap();
    let Some(mut left) = line.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return left.is_empty();
    };
    for part in middle {
        match left.find(part) {
            Some(at) => left = &left[at + part.len()..],
            None => return false,
        }
    }
    left.len() >= last.len() && left.ends_with(last)
}

/// The one line of `stderr` that fits `pattern` (see [`fits`]); the test
/// fails, showing all of it, when no line or several do.
fn said<'a>(stderr: &'a str, pattern: &str) -> &'a str {
    let found: Vec<&str> = stderr.lines().filter(|l| fits(pattern, l)).collect();
    assert_eq!(
        found.len(),
        1,
        "one line of stderr should be {pattern:?}; stderr:\n{stderr}"
    );
    found[0]
}

#[test]
fn a_pattern_stands_for_the_whole_line() {
    assert!(fits("a `j` b", "a `j` b"));
    assert!(!fits("a `j` b", "a `j` bc"));
    assert!(!fits("a `j` b", "xa `j` b"));
    assert!(fits("pid * (`*`, for *)", "pid 4 (`sh -c x`, for 1s)"));
    assert!(fits("for *)", "for )"));
    assert!(!fits("pid * (`*`)", "pid 4 (`x)"));
    assert!(!fits("ab*ba", "aba"));
}

// ---------------------------------------------------------------------------
// A lock directory

/// A run of `j` in the sandbox's directory whose command sleeps: its
/// wrapper's pid, once the command runs.
fn dir_holder(sb: &mut Sandbox) -> u32 {
    let ready = sb.path("holder.ready");
    let mut c = sb.oo_cmd();
    c.args([
        "run",
        "j",
        "--",
        "sh",
        "-c",
        "touch \"$READY\"; exec sleep 1000",
    ])
    .env("READY", &ready);
    let pid = sb.keep(c);
    wait_until("the holder's command", HANG, || ready.exists());
    pid
}

/// `run --replace` says whom it stops before it stops them.
#[test]
fn replace_says_the_run_it_stops() {
    let mut sb = Sandbox::new("ONLYONE_SEAM_MARK");
    let holder = dir_holder(&mut sb);
    let out = sb.oo(&["run", "--replace", "j", "--", "true"]);
    out.expect(0);
    said(
        &out.stderr,
        &format!("onlyone: replacing the run of `j`: stopping pid {holder} (`*`, for *)"),
    );
}

/// `stop` of a lock whose holder is dead clears it and says why it was
/// stale.
#[test]
fn stop_of_a_stale_lock_says_it_cleared_it() {
    let sb = Sandbox::new("ONLYONE_SEAM_MARK");
    let (dead, start) = dead_process();
    put(&sb.lock("j"), record_text(dead, start, "0123456789abcdef"));
    let out = sb.oo(&["stop", "j"]);
    out.expect(0);
    said(
        &out.stderr,
        &format!("onlyone: `j` was not running (pid {dead} has exited); cleared its stale lock"),
    );
    assert!(!sb.lock("j").exists(), "the stale lock was not cleared");
}

/// `precheck` says the stale lock it cleared, and a lock it cannot judge
/// (the fire runs).
#[test]
fn precheck_says_the_stale_lock_it_cleared_and_the_one_it_cannot_judge() {
    let sb = Sandbox::new("ONLYONE_SEAM_MARK");
    let (dead, start) = dead_process();
    put(&sb.lock("j"), record_text(dead, start, "0123456789abcdef"));
    let out = sb.oo(&["precheck", "j"]);
    out.expect(0);
    said(
        &out.stderr,
        &format!("onlyone: precheck: cleared the stale lock `j`: pid {dead} has exited"),
    );

    put(&sb.lock("k"), "hello world\n");
    let out = sb.oo(&["precheck", "k"]);
    out.expect(0);
    said(
        &out.stderr,
        "onlyone: precheck: `k` cannot be judged (the record is not readable: *); letting the \
         fire run (fail open)",
    );
}

/// A `--queue` fire that finds a fire already queued says the whole of
/// why it skips: the waiter, the holder, and that the waiter's run picks
/// up its work.
#[test]
fn a_queued_skip_names_the_waiter_and_the_holder() {
    let mut sb = Sandbox::new("ONLYONE_SEAM_MARK");
    let holder = dir_holder(&mut sb);
    let mut c = sb.oo_cmd();
    c.args(["run", "--queue", "j", "--", "true"]);
    let waiter = sb.keep(c);
    wait_until("the first fire queued", HANG, || {
        let s = sb.oo(&["status", "--json", "j"]).json();
        s["locks"][0]["waiters"][0]["pid"] == waiter
            && s["locks"][0]["waiters"][0]["queued"] == true
    });
    let out = sb.oo(&["run", "--queue", "j", "--", "true"]);
    out.expect(75);
    said(
        &out.stderr,
        &format!(
            "onlyone: skipping `j`: one already queued (pid {waiter} (`*`, for *) waits, and runs \
             once the run of pid {holder} (`*`, for *) ends; it picks up what this fire would have \
             done)"
        ),
    );
}

// ---------------------------------------------------------------------------
// The store

store_world!("ONLYONE_SEAM_MARK");

impl World {
    /// Starts `onlyone --store URL run OPTS j -- sh -c SCRIPT` in the
    /// background, its stderr in `DIR/TAG.err`, and waits for `$READY`
    /// (the script must touch it): the wrapper's pid.
    fn holder(&mut self, tag: &str, opts: &[&str], script: &str) -> u32 {
        let ready = self.path(&format!("{tag}.ready"));
        let mut args = vec!["run"];
        args.extend_from_slice(opts);
        args.extend_from_slice(&["j", "--", "sh", "-c", script]);
        let mut c = self.oo_at(&self.pg.url(), &args);
        c.env("READY", &ready);
        let pid = self.start_logged(c, tag);
        self.wait_ready(pid, &ready, HANG);
        pid
    }

    /// Waits for the exit of a child started by [`World::holder`].
    fn exit_of(&mut self, pid: u32) -> std::process::ExitStatus {
        self.exit_of_kid(pid, HANG)
    }

    /// SIGKILLs a child started by [`World::holder`], and reaps it.
    fn kill_holder(&mut self, pid: u32) {
        let kid = self.kids.iter_mut().find(|k| k.id() == pid).unwrap();
        kill9(kid);
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }
}

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

fn signal(pid: i32, sig: Signal) {
    if pid < 0 {
        let _ =
            rustix::process::kill_process_group(rustix::process::Pid::from_raw(-pid).unwrap(), sig);
    } else {
        let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), sig);
    }
}

/// A lock given as a path with a store is refused as one, by `run` (125)
/// and by `precheck` (which lets the fire run). Nothing is sent to the
/// store before that: no server is needed.
#[test]
fn a_path_with_a_store_is_refused_as_a_path() {
    let sb = Sandbox::new("ONLYONE_SEAM_MARK");
    let url = "postgres://nobody@127.0.0.1:1/none";
    let oo = |args: &[&str]| {
        let mut c = sb.program(BIN);
        c.args(["--store", url])
            .args(args)
            .env_remove("ONLYONE_STORE");
        finish(c, HANG)
    };
    let sentence = "`a/j` is a path; with --store a lock is a name (an ASCII letter or digit, \
                    then up to 63 ASCII letters, digits, `.`, `_` or `-`)";
    let out = oo(&["run", "a/j", "--", "true"]);
    out.expect(125);
    said(&out.stderr, &format!("onlyone: {sentence}"));
    let out = oo(&["precheck", "a/j"]);
    out.expect(0);
    said(
        &out.stderr,
        &format!("onlyone: precheck: {sentence}; letting the fire run (fail open)"),
    );
}

/// A store's `precheck` of a live lease names its holder: its pid and
/// host, its command, for how long, and the lease's fence.
#[test]
fn a_store_precheck_names_the_holder_of_the_lease() {
    let Some(mut w) = World::new() else { return };
    let a = w.holder("a", &[], "touch \"$READY\"; exec sleep 1000");
    let out = w.oo(&["precheck", "j"]);
    out.expect(75);
    said(
        &out.stderr,
        &format!(
            "onlyone: another run of `j` holds the lease as pid {a} on {} (`*`, for *, fence *)",
            onlyone::command::host_name()
        ),
    );
}

/// A store's `--queue` fire that finds a fire already queued says the
/// whole of why it skips, naming both with their hosts.
#[test]
fn a_store_queued_skip_names_the_waiter_and_the_holder() {
    let Some(mut w) = World::new() else { return };
    let host = onlyone::command::host_name();
    let a = w.holder("a", &[], "touch \"$READY\"; exec sleep 1000");
    let queued = w.oo_at(&w.pg.url(), &["run", "--queue", "j", "--", "true"]);
    let waiter = w.start_logged(queued, "waiter");
    wait_until("the first fire queued", HANG, || {
        let s = w.oo(&["status", "--json", "j"]).json();
        s["locks"][0]["waiters"][0]["pid"] == waiter
            && s["locks"][0]["waiters"][0]["queued"] == true
    });
    let out = w.oo(&["run", "--queue", "j", "--", "true"]);
    out.expect(75);
    said(
        &out.stderr,
        &format!(
            "onlyone: skipping `j`: one already queued (pid {waiter} on {host} (`*`) waits, and \
             runs once the run of pid {a} on {host} (`*`, for *, fence *) ends; it picks up what \
             this fire would have done)"
        ),
    );
}

/// A store's `stop` of a lease whose wrapper was SIGKILLed (its watchdog
/// ends the command) says that nothing released the lease, which ran out.
#[test]
fn a_store_stop_of_a_dead_holder_says_the_lease_ran_out() {
    let Some(mut w) = World::new() else { return };
    let a = w.holder(
        "a",
        &["--lease", "4s", "--kill-after", "1s"],
        "touch \"$READY\"; exec sleep 1000",
    );
    w.kill_holder(a);
    let out = w.oo(&["stop", "j"]);
    out.expect(0);
    said(
        &out.stderr,
        &format!(
            "onlyone: the holder of `j` (pid {a} on {} (`*`, for *, fence *)) was dead: nothing \
             released its lease, which ran out after *",
            onlyone::command::host_name()
        ),
    );
}

/// A holder paused past its lease (SIGSTOP, wrapper and command) while
/// another run takes the lease: once resumed, its wrapper says that the
/// lease could not be renewed and that the command was ended (124).
#[test]
fn a_paused_holder_says_its_lease_could_not_be_renewed() {
    let Some(mut w) = World::new() else { return };
    let a = w.holder(
        "a",
        &["--lease", "2s", "--kill-after", "200ms"],
        "touch \"$READY\"; exec sleep 1000",
    );
    let cmd = command_of(a);
    signal(-(cmd as i32), Signal::STOP);
    signal(a as i32, Signal::STOP);
    w.oo(&["run", "--wait", "20s", "j", "--", "true"]).expect(0);
    signal(a as i32, Signal::CONT);
    signal(-(cmd as i32), Signal::CONT);
    assert_eq!(w.exit_of(a).code(), Some(124));
    said(
        &w.read("a.err"),
        "onlyone: the lease of `j` could not be renewed in time (or was taken): the command was \
         ended before another holder could start",
    );
}
