//! The library's own run of a job, journaled through its observer
//! (lib/examples/journaled.rs, which cargo builds for the tests as the
//! binary `journaled`): a run is
//! journaled and the command reads the same journal; a second run while
//! the first holds the lock skips, and the skip is journaled; a stale lock
//! (its run killed with SIGKILL) is taken over, and the observer is told.
//! Real processes; every wait is for a condition, within [`LIMIT`].

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use onlyone::journal::{EndReason, EventKind, Journal, Outcome};
use onlyone::names::StateSource;
use onlyone::state::StateDir;
use onlyone::{LockFile, Verdict};

/// How long anything here may take.
const LIMIT: Duration = Duration::from_secs(60);

/// How often a condition is looked at again.
const LOOK: Duration = Duration::from_millis(10);

/// The example (lib/examples/journaled.rs), which cargo builds for the
/// tests as the binary `journaled`.
fn journaled() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_journaled"))
}

/// The command.
fn onlyone() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_onlyone"))
}

/// A lock directory and a state directory of a test's own.
struct Sandbox {
    tmp: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        Sandbox {
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn locks(&self) -> PathBuf {
        self.tmp.path().join("locks")
    }

    fn state(&self) -> PathBuf {
        self.tmp.path().join("state")
    }

    /// `journaled LOCKS NAME -- argv`, its stderr piped, its journal in
    /// the sandbox's state directory.
    fn job(&self, name: &str, argv: &[&str]) -> Command {
        self.job_with(&[], name, argv)
    }

    /// `journaled OPTIONS LOCKS NAME -- argv`, as [`Sandbox::job`].
    fn job_with(&self, options: &[&str], name: &str, argv: &[&str]) -> Command {
        let mut c = Command::new(journaled());
        c.args(options)
            .arg(self.locks())
            .arg(name)
            .arg("--")
            .args(argv)
            .env("ONLYONE_STATE_DIR", self.state())
            .env_remove("ONLYONE_TOKEN")
            .env_remove("ONLYONE_LOCK")
            .env_remove("ONLYONE_RUN_ID")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    /// The lock `name`.
    fn lock(&self, name: &str) -> LockFile {
        LockFile::open(self.locks().join(format!("{name}.lock"))).unwrap()
    }

    /// The journal of `name`, as the library reads it.
    fn journal(&self, name: &str) -> Journal {
        Journal::of(
            &self.lock(name),
            &StateDir::at(self.state(), StateSource::Env),
        )
    }

    /// What happened to `name`, by kind.
    fn kinds(&self, name: &str) -> Vec<EventKind> {
        let events = self.journal(name).events().unwrap();
        events.iter().map(|e| e.event).collect()
    }
}

/// A started `journaled`: ended (KILL) and waited for if the test stops
/// before it exits; its stderr read line by line.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    said: Vec<String>,
}

impl Running {
    fn start(mut c: Command) -> Running {
        let mut child = c.spawn().expect("journaled");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            said: Vec::new(),
        }
    }

    /// Waits for a line on stderr that contains `text`.
    fn wait_for_line(&mut self, text: &str) {
        let until = Instant::now() + LIMIT;
        while !self.said.iter().any(|l| l.contains(text)) {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.said.push(line),
                Err(e) => panic!("no `{text}` on stderr ({e}): {:#?}", self.said),
            }
        }
    }

    /// Waits for it to exit; its status, and all it said.
    fn finish(mut self) -> (ExitStatus, String) {
        let status = wait_until(|| self.child.try_wait().unwrap(), "journaled to exit");
        // Its stderr is closed once it and its command are gone.
        let until = Instant::now() + LIMIT;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.said.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("journaled's stderr stayed open ({e}): {:#?}", self.said),
            }
        }
        (status, self.said.join("\n"))
    }
}

/// A test that stops early ends the run: TERM, which the wrapper forwards
/// to its command (leaving nothing behind), then KILL.
impl Drop for Running {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        // Our own child, not reaped yet: its pid is still its own.
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let until = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(LOOK);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Looks at `cond` until it gives something, within [`LIMIT`].
fn wait_until<T>(mut cond: impl FnMut() -> Option<T>, what: &str) -> T {
    let until = Instant::now() + LIMIT;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(Instant::now() < until, "waited {LIMIT:?} for {what}");
        std::thread::sleep(LOOK);
    }
}

/// A run is journaled (its start and its end, with its exit), and the
/// command's `history --json` reads the same journal.
#[test]
fn a_run_is_journaled_and_the_command_reads_it() {
    let sb = Sandbox::new();
    let (status, said) = Running::start(sb.job("job", &["sh", "-c", "exit 3"])).finish();
    assert_eq!(status.code(), Some(3), "{said}");
    assert!(said.contains("ended: exit 3"), "{said}");
    assert_eq!(sb.kinds("job"), [EventKind::Start, EventKind::End]);
    let h = sb.journal("job").history().unwrap();
    assert_eq!(h.runs.len(), 1, "{h:#?}");
    let run = &h.runs[0];
    assert_eq!(run.outcome, Outcome::Exited(3));
    assert_eq!(run.cmd.as_deref(), Some("sh -c 'exit 3'"));
    assert_eq!(run.mode.as_deref(), Some("run"));
    assert!(run.usage.is_some(), "{run:#?}");

    let out = Command::new(onlyone())
        .arg("--dir")
        .arg(sb.locks())
        .arg("--state-dir")
        .arg(sb.state())
        .args(["history", "--json", "job"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let runs: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 1, "{stdout}");
    assert_eq!(runs[0]["token"], run.token.as_str(), "{stdout}");
    assert_eq!(runs[0]["outcome"], "exit", "{stdout}");
    assert_eq!(runs[0]["exit"], 3, "{stdout}");
}

/// A run while another holds the lock skips (75), is told who holds it,
/// and the skip is journaled against the live run.
#[test]
fn a_second_run_skips_and_the_skip_is_journaled() {
    let sb = Sandbox::new();
    // The first run's command reads its stdin, a pipe of this test's:
    // it ends when the pipe closes.
    let mut first = sb.job("job", &["cat"]);
    first.stdin(Stdio::piped());
    let mut first = Running::start(first);
    first.wait_for_line("started as pid");
    let pid = first.child.id();

    let (status, said) = Running::start(sb.job("job", &["true"])).finish();
    assert_eq!(status.code(), Some(75), "{said}");
    assert!(
        said.contains(&format!("`job` is running as pid {pid} (`cat`")),
        "{said}"
    );
    assert!(said.contains("skipped"), "{said}");

    drop(first.child.stdin.take());
    let (status, said) = first.finish();
    assert_eq!(status.code(), Some(0), "{said}");
    assert_eq!(
        sb.kinds("job"),
        [EventKind::Start, EventKind::Skip, EventKind::End]
    );
    let h = sb.journal("job").history().unwrap();
    assert_eq!(h.runs.len(), 1, "{h:#?}");
    assert_eq!(h.runs[0].skipped, 1, "{h:#?}");
    assert_eq!(h.runs[0].outcome, Outcome::Exited(0));
}

/// A run whose wrapper was killed (SIGKILL, by its own command) leaves a
/// stale lock: the next run takes it over, its observer is told whose it
/// was, and the journal closes the old run (abandoned) before the takeover
/// and the new run.
#[test]
fn a_stale_lock_is_taken_over_and_the_observer_is_told() {
    let sb = Sandbox::new();
    let killed = Running::start(sb.job("job", &["sh", "-c", "kill -KILL $PPID"]));
    let pid = killed.child.id();
    let (status, said) = killed.finish();
    assert_eq!(status.signal(), Some(9), "{said}");
    // Stale once no process of the run is left (its command exits on its
    // own).
    let lock = sb.lock("job");
    wait_until(
        || {
            let seen = lock.inspect().unwrap()?;
            matches!(seen.verdict, Verdict::Stale(_)).then_some(())
        },
        "the lock to be stale",
    );

    let (status, said) = Running::start(sb.job("job", &["true"])).finish();
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!(
            "took over a stale lock of pid {pid} (`sh -c 'kill -KILL $PPID'`)"
        )),
        "{said}"
    );
    assert_eq!(
        sb.kinds("job"),
        [
            EventKind::Start,
            EventKind::Abandoned,
            EventKind::Takeover,
            EventKind::Start,
            EventKind::End
        ]
    );
    let h = sb.journal("job").history().unwrap();
    assert_eq!(h.runs.len(), 2, "{h:#?}");
    assert_eq!(h.runs[0].outcome, Outcome::Abandoned);
    assert!(h.runs[1].took_over, "{h:#?}");
    assert_eq!(h.runs[1].outcome, Outcome::Exited(0));
    assert_eq!(h.takeovers, 1);
    assert!(lock.inspect().unwrap().is_none(), "the lock was let go");
}

/// A run that replaces stops the live one (TERM, forwarded to its
/// command), is told so, and takes its place; the stopped run's end is
/// journaled as the stop's, before the stop and the new run.
#[test]
fn a_replacing_run_stops_the_live_one_and_the_stop_is_journaled() {
    let sb = Sandbox::new();
    let mut first = Running::start(sb.job("job", &["sleep", "1000"]));
    first.wait_for_line("started as pid");
    let pid = first.child.id();

    let (status, said) = Running::start(sb.job_with(&["--replace"], "job", &["true"])).finish();
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!(
            "stopped the run of `job` (TERM): pid {pid} (`sleep 1000`"
        )),
        "{said}"
    );
    let (status, said) = first.finish();
    assert_eq!(status.code(), Some(128 + 15), "{said}");
    assert_eq!(
        sb.kinds("job"),
        [
            EventKind::Start,
            EventKind::End,
            EventKind::Stop,
            EventKind::Start,
            EventKind::End
        ]
    );
    let h = sb.journal("job").history().unwrap();
    assert_eq!(h.runs.len(), 2, "{h:#?}");
    assert!(
        matches!(
            h.runs[0].outcome,
            Outcome::Ended {
                by: EndReason::Stop,
                ..
            }
        ),
        "{h:#?}"
    );
    assert_eq!(h.runs[1].outcome, Outcome::Exited(0));
}
