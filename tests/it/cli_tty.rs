//! Interactive use of `onlyone run`: as a job of a real job-control shell
//! (`bash -i` on a pseudo-terminal), the command can read the terminal,
//! Ctrl-C ends the run and frees the lock, onlyone is never stopped by
//! SIGTTOU/SIGTTIN when it hands the terminal over or takes it back, and
//! Ctrl-Z / `fg` work.
//!
//! The pty comes from `nix::pty` and `rustix` (both already dependencies),
//! so nothing beyond bash is needed on the machine. Every wait is on a
//! condition: output read from the pty until a pattern appears, or a state
//! polled until it holds, each with a timeout. Every process started in
//! the shell's session is killed when the test ends, pass or fail.

use crate::support;

use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::pty::{PtyMaster, grantpt, posix_openpt, ptsname_r, unlockpt};
use nix::sys::signal::{SigHandler, Signal, signal};

use support::{BIN, alive, kill9_pid, open_tempdir, wait_until};

/// The shell's prompt: never part of a line the tests type.
const PROMPT: &str = "oo-tty-prompt> ";
/// How long one expected thing may take.
const TIMEOUT: Duration = Duration::from_secs(20);

/// One process's fields from `/proc/PID/stat`, as the library reads them.
fn stat(pid: u32) -> Option<onlyone::procfs::ProcStat> {
    onlyone::procfs::read_stat(pid).ok().flatten()
}

fn all_pids() -> Vec<u32> {
    onlyone::procfs::all_pids().unwrap_or_default()
}

/// An interactive `bash` on its own pty, in its own session, with `$OO`
/// (the onlyone binary) and `$D` (a fresh lock directory) set.
struct Shell {
    master: PtyMaster,
    bash: Child,
    /// Everything the terminal printed so far.
    out: Vec<u8>,
    /// How much of `out` the expectations have consumed.
    pos: usize,
    dir: tempfile::TempDir,
}

impl Shell {
    fn start() -> Shell {
        let dir = open_tempdir();
        let master =
            posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC).expect("posix_openpt");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname_r(&master).expect("ptsname_r");
        // CLOEXEC, so that no process spawned by a concurrent test keeps the
        // terminal open; the child gets it as 0/1/2 only.
        let slave: OwnedFd = rustix::fs::open(
            name.as_str(),
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .expect("open the pty's slave");
        let mut cmd = Command::new("bash");
        support::default_signals(&mut cmd);
        cmd.args(["--norc", "--noprofile", "-i"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env(support::STATE_VAR, dir.path().join(".state"))
            .env("TERM", "dumb")
            .env("LANG", "C")
            .env("COLUMNS", "1000")
            .env("HISTFILE", "/dev/null")
            .env("PS1", PROMPT)
            .env("OO", BIN)
            .env("D", dir.path())
            .current_dir(dir.path())
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: sigaction, setsid, ioctl and prctl are async-signal-safe
        // system calls; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                // A caller without job control (`cargo test &` in a script)
                // starts us with SIGINT and SIGQUIT ignored, and ignored
                // signals stay ignored across exec and in the shell's jobs:
                // give the shell the defaults an interactive login has.
                for sig in [
                    Signal::SIGINT,
                    Signal::SIGQUIT,
                    Signal::SIGTERM,
                    Signal::SIGHUP,
                    Signal::SIGTSTP,
                    Signal::SIGTTIN,
                    Signal::SIGTTOU,
                    Signal::SIGCHLD,
                    Signal::SIGCONT,
                ] {
                    signal(sig, SigHandler::SigDfl).map_err(io::Error::from)?;
                }
                rustix::process::setsid().map_err(io::Error::from)?;
                // stdin is already the pty's slave: make it the controlling
                // terminal of the new session.
                rustix::process::ioctl_tiocsctty(BorrowedFd::borrow_raw(0))
                    .map_err(io::Error::from)?;
                // Orphans of the session (once onlyone is killed) become
                // the shell's, which reaps any child, rather than init's,
                // which may not reap at all in a container.
                rustix::process::set_child_subreaper(rustix::process::Pid::from_raw(1))
                    .map_err(io::Error::from)?;
                Ok(())
            });
        }
        let bash = cmd.spawn().expect("spawn bash -i");
        let mut sh = Shell {
            master,
            bash,
            out: Vec::new(),
            pos: 0,
            dir,
        };
        sh.expect_prompt();
        sh
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn lock_path(&self) -> PathBuf {
        self.dir().join("L.lock")
    }

    /// Types `bytes` at the terminal.
    fn send(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            match rustix::io::write(self.master.as_fd(), rest) {
                Ok(n) => rest = &rest[n..],
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => panic!("writing to the pty: {e}"),
            }
        }
    }

    /// Types `line` and Enter.
    fn line(&mut self, line: &str) {
        self.send(format!("{line}\n").as_bytes());
    }

    /// Reads what the terminal prints, waiting until `deadline` at most;
    /// false once the terminal is closed (the shell is gone).
    fn fill(&mut self, deadline: Instant) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(&self.master, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => return true,
            Ok(_) => {}
            Err(e) => panic!("poll on the pty: {e}"),
        }
        let mut buf = [0u8; 4096];
        match rustix::io::read(self.master.as_fd(), &mut buf) {
            Ok(0) => false,
            Ok(n) => {
                self.out.extend_from_slice(&buf[..n]);
                true
            }
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => true,
            // EIO: every slave descriptor is closed.
            Err(_) => false,
        }
    }

    /// The whole transcript, for failure messages.
    fn transcript(&self) -> String {
        String::from_utf8_lossy(&self.out).into_owned()
    }

    /// Reads until `find` locates something in the unconsumed output;
    /// consumes up to the end of it and returns (unconsumed text before the
    /// match, the match).
    fn expect_with(
        &mut self,
        what: &str,
        find: impl Fn(&str) -> Option<(usize, usize)>,
    ) -> (String, String) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let text = String::from_utf8_lossy(&self.out[self.pos..]).into_owned();
            if let Some((start, end)) = find(&text) {
                // `text` is lossy: map its byte offsets back only when it is
                // the same as the raw bytes (the terminal prints ASCII here).
                assert_eq!(text.len(), self.out.len() - self.pos, "non-UTF-8 output");
                self.pos += end;
                return (text[..start].to_owned(), text[start..end].to_owned());
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {TIMEOUT:?} waiting for {what}; the terminal showed:\n{}",
                    self.transcript()
                );
            }
            if !self.fill(deadline) {
                panic!(
                    "the terminal closed while waiting for {what}; it showed:\n{}",
                    self.transcript()
                );
            }
        }
    }

    /// Waits for `s` in the output; returns what came before it.
    fn expect(&mut self, s: &str) -> String {
        let pat = s.to_owned();
        self.expect_with(&format!("{s:?}"), move |t| {
            t.find(&pat).map(|i| (i, i + pat.len()))
        })
        .0
    }

    /// Waits for the shell's next prompt; returns what came before it.
    fn expect_prompt(&mut self) -> String {
        self.expect(PROMPT)
    }

    /// The status of the last command, as `echo "rc=$?"` shows it (typed
    /// at a prompt, so the previous job has finished or stopped).
    fn rc(&mut self) -> i32 {
        self.line(r#"echo "rc=$?""#);
        let (_, m) = self.expect_with("rc=<number>", |t| {
            let mut from = 0;
            while let Some(i) = t[from..].find("rc=").map(|i| i + from) {
                let digits = t[i + 3..].bytes().take_while(u8::is_ascii_digit).count();
                let after = t.as_bytes().get(i + 3 + digits);
                if digits > 0 && matches!(after, Some(b'\r' | b'\n')) {
                    return Some((i, i + 3 + digits));
                }
                from = i + 3;
            }
            None
        });
        self.expect_prompt();
        m[3..].parse().unwrap()
    }

    /// Types a command line and waits for the prompt after it (the job has
    /// finished, or stopped); returns its status.
    fn run(&mut self, line: &str) -> i32 {
        self.line(line);
        self.expect_prompt();
        self.rc()
    }

    /// What `jobs -l` says, read from a file so that typed text cannot be
    /// mistaken for it.
    fn jobs(&mut self) -> String {
        self.line(r#"jobs -l > "$D/jobs.out" 2>&1"#);
        self.expect_prompt();
        fs::read_to_string(self.dir().join("jobs.out")).unwrap()
    }

    /// The terminal's foreground process group.
    fn foreground(&self) -> Option<u32> {
        nix::unistd::tcgetpgrp(&self.master)
            .ok()
            .map(|p| p.as_raw() as u32)
    }

    /// Waits until the lock records a command, then until that command's
    /// group is the terminal's foreground group; returns (pid, start).
    fn wait_command_in_foreground(&mut self) -> (u32, u64) {
        let path = self.lock_path();
        let mut cmd = None;
        wait_until("the lock to name its command", TIMEOUT, || {
            cmd = command_of(&path);
            cmd.is_some()
        });
        let (pid, start) = cmd.unwrap();
        let deadline = Instant::now() + TIMEOUT;
        while self.foreground() != Some(pid) {
            // Keep draining the terminal meanwhile.
            self.fill(Instant::now() + Duration::from_millis(10));
            if Instant::now() >= deadline {
                panic!(
                    "command {pid} never became the terminal's foreground group \
                     (it is {:?}); the terminal showed:\n{}",
                    self.foreground(),
                    self.transcript()
                );
            }
        }
        (pid, start)
    }

    /// `onlyone --dir DIR ARGS...`, outside the shell, to its end.
    fn onlyone(&self, args: &[&str]) -> Output {
        let mut c = Command::new(BIN);
        support::default_signals(&mut c);
        c.env(support::STATE_VAR, self.dir().join(".state"))
            .arg("--dir")
            .arg(self.dir())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run onlyone")
    }

    /// Types Ctrl-Z and waits for the shell to say the job stopped, and
    /// for its prompt.
    fn ctrl_z(&mut self) {
        self.send(b"\x1a");
        self.expect("Stopped");
        self.expect_prompt();
    }

    /// Waits until `pid` is in the terminal's foreground group and not
    /// stopped (after `fg`).
    fn wait_resumed_in_foreground(&mut self, pid: u32) {
        let deadline = Instant::now() + TIMEOUT;
        while !(self.foreground() == Some(pid) && stat(pid).is_some_and(|s| s.state != 'T')) {
            self.fill(Instant::now() + Duration::from_millis(10));
            assert!(
                Instant::now() < deadline,
                "fg did not resume the command in the foreground (foreground {:?}, state {:?}):\n{}",
                self.foreground(),
                stat(pid).map(|s| s.state),
                self.transcript()
            );
        }
    }

    /// `status --json L` says the lock is free, and the lock file is gone.
    fn assert_free(&self) {
        assert!(
            !self.lock_path().exists(),
            "the lock file is still there:\n{}",
            fs::read_to_string(self.lock_path()).unwrap_or_default()
        );
        let out = self.onlyone(&["status", "--json", "L"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "status --json: {e}: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        assert_eq!(v["locks"][0]["state"], "free", "status --json: {v}");
    }

    /// No job of the shell is stopped, and the terminal never said
    /// "Stopped".
    fn assert_nothing_stopped(&mut self) {
        let jobs = self.jobs();
        assert_eq!(jobs.trim(), "", "the shell has jobs left");
        assert!(
            !self.transcript().contains("Stopped"),
            "a job was stopped:\n{}",
            self.transcript()
        );
    }

    /// Every process of the shell's session (zombies too) but the shell,
    /// and every live process of a run in this test's lock directory.
    fn leftovers(&self) -> Vec<u32> {
        let sid = self.bash.id();
        let marker = format!("ONLYONE_LOCK={}/", self.dir().display());
        all_pids()
            .into_iter()
            .filter(|&pid| pid != sid)
            .filter(|&pid| {
                stat(pid).is_some_and(|s| s.session == sid)
                    || fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                        env.split(|&b| b == 0)
                            .any(|v| v.starts_with(marker.as_bytes()))
                    })
            })
            .collect()
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("ONLYONE_TTY_TRACE").is_some() {
            eprintln!("--- terminal transcript ---\n{:?}", self.transcript());
            // Who was where, for a hang: groups, states and wait channels.
            let sid = self.bash.id();
            let mut pids: Vec<u32> = all_pids()
                .into_iter()
                .filter(|&p| stat(p).is_some_and(|s| s.session == sid))
                .collect();
            pids.sort();
            if let Ok(ps) = Command::new("ps")
                .args(["-o", "pid,ppid,pgid,tpgid,stat,wchan:24,args", "-p"])
                .arg(
                    pids.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                )
                .output()
            {
                eprintln!(
                    "--- the session's processes ---\n{}",
                    String::from_utf8_lossy(&ps.stdout)
                );
            }
        }
        // Kill everything the shell started, and let the shell (their
        // subreaper) reap them, then kill the shell. The shell is our child
        // and unreaped, so its pid (the session id) is not reused meanwhile.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = self.leftovers();
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
            left.into_iter().for_each(kill9_pid);
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.bash.kill();
        let _ = self.bash.wait();
        // Anything that escaped the session (only by a bug) goes too.
        self.leftovers().into_iter().for_each(kill9_pid);
    }
}

/// The command pid and start time in the lock file, when it names one.
fn command_of(path: &Path) -> Option<(u32, u64)> {
    let text = fs::read_to_string(path).ok()?;
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("cmdpid=")? as u32, field("cmdstart=")?))
}

#[test]
fn a_command_reads_a_line_from_the_terminal() {
    let mut sh = Shell::start();
    sh.line(r#""$OO" --dir "$D" run L -- sh -c 'read x; echo "got:$x"'"#);
    sh.wait_command_in_foreground();
    sh.line("hello-from-the-tty");
    sh.expect("got:hello-from-the-tty");
    sh.expect_prompt();
    assert_eq!(sh.rc(), 0, "{}", sh.transcript());
    sh.assert_free();
    sh.assert_nothing_stopped();
}

#[test]
fn ctrl_c_ends_the_run_and_frees_the_lock() {
    let mut sh = Shell::start();
    sh.line(r#""$OO" --dir "$D" run L -- sleep 1000"#);
    let (pid, start) = sh.wait_command_in_foreground();
    assert!(sh.lock_path().exists());
    sh.send(b"\x03");
    sh.expect_prompt();
    assert_eq!(sh.rc(), 130, "{}", sh.transcript());
    sh.assert_free();
    assert!(!alive(pid, start), "the sleep {pid} is still alive");
    sh.assert_nothing_stopped();
}

#[test]
fn handing_the_terminal_over_and_back_never_stops_onlyone() {
    let mut sh = Shell::start();
    for i in 0..10 {
        let rc = sh.run(r#""$OO" --dir "$D" run L -- true"#);
        assert_eq!(rc, 0, "run {i}:\n{}", sh.transcript());
    }
    // The real code comes through, whatever it is.
    assert_eq!(sh.run(r#""$OO" --dir "$D" run L -- false"#), 1);
    assert_eq!(sh.run(r#""$OO" --dir "$D" run L -- sh -c 'exit 7'"#), 7);
    // A command that writes to the terminal and exits at once.
    sh.line(r#""$OO" --dir "$D" run L -- echo "said:$((6*7))""#);
    sh.expect("said:42");
    sh.expect_prompt();
    assert_eq!(sh.rc(), 0);
    sh.assert_free();
    sh.assert_nothing_stopped();
}

#[test]
fn ctrl_z_stops_the_job_and_fg_resumes_it() {
    let mut sh = Shell::start();
    sh.line(r#""$OO" --dir "$D" run L -- sleep 1000"#);
    let (pid, start) = sh.wait_command_in_foreground();
    sh.ctrl_z();
    let jobs = sh.jobs();
    assert!(jobs.contains("Stopped"), "jobs -l: {jobs:?}");
    assert_eq!(
        stat(pid).map(|s| s.state),
        Some('T'),
        "the sleep is not stopped"
    );
    assert!(
        sh.lock_path().exists(),
        "a stopped run still holds the lock"
    );

    sh.line("fg");
    // `fg` hands the terminal to onlyone, which hands it on to the command
    // and continues it.
    sh.wait_resumed_in_foreground(pid);
    sh.send(b"\x03");
    sh.expect_prompt();
    assert_eq!(sh.rc(), 130, "{}", sh.transcript());
    sh.assert_free();
    assert!(!alive(pid, start), "the sleep {pid} is still alive");
    let jobs = sh.jobs();
    assert_eq!(jobs.trim(), "", "the shell has jobs left");
}

/// Ctrl-Z then `bg`: the run goes on in the background and, when it ends,
/// onlyone does not take the terminal from the shell (the shell lives on).
#[test]
fn a_run_sent_to_the_background_leaves_the_terminal_to_the_shell() {
    let mut sh = Shell::start();
    // The command ends when the test says so, not after a time that a
    // loaded machine may spend before the Ctrl-Z is even typed. bash, not
    // dash: dash vforks, and a Ctrl-Z that lands between its vfork and the
    // exec stops the child while dash waits for it in the kernel, neither
    // stopped nor running, whoever its parent is (bash -i itself would
    // wait forever on such a job).
    sh.line(
        r#""$OO" --dir "$D" run L -- bash -c 'while [ ! -e "$D/go" ]; do sleep 0.05; done; echo bg-done'"#,
    );
    let (pid, start) = sh.wait_command_in_foreground();
    sh.ctrl_z();
    sh.line("bg");
    sh.expect_prompt();
    fs::write(sh.dir().join("go"), "").unwrap();
    sh.line("wait; echo \"waited-$?\"");
    sh.expect("bg-done");
    sh.expect("waited-0");
    sh.expect_prompt();
    assert!(!alive(pid, start));
    // The shell still has the terminal and answers.
    assert_eq!(sh.run("true"), 0, "{}", sh.transcript());
    sh.assert_free();
}

impl Shell {
    /// Writes a script into the lock directory; returns the line that runs
    /// it with bash (the script's shell leads the job, onlyone shares its
    /// group).
    fn script(&self, name: &str, body: &str) -> String {
        fs::write(self.dir().join(name), body).unwrap();
        format!(r#"bash "$D/{name}""#)
    }
}

/// The script that a user runs from a terminal: onlyone is not alone in
/// its process group (the script's shell is there too), and the command
/// still gets the terminal and reads a line from it.
const READER_SCRIPT: &str = r#"
"$OO" --dir "$D" run L -- sh -c 'read x; echo "got:$x"'
echo "done-$?"
"#;

#[test]
fn a_script_in_a_terminal_gives_its_command_the_terminal() {
    let mut sh = Shell::start();
    let line = sh.script("reader.sh", READER_SCRIPT);
    sh.line(&line);
    sh.wait_command_in_foreground();
    sh.line("typed-into-a-script");
    sh.expect("got:typed-into-a-script");
    sh.expect("done-0");
    sh.expect_prompt();
    assert_eq!(sh.rc(), 0, "{}", sh.transcript());
    sh.assert_free();
    sh.assert_nothing_stopped();
}

/// tmux starts its panes with SIGTTIN and SIGTTOU ignored, and ignored
/// signals survive exec: a command that inherited them would read EIO
/// from a terminal it does not own. onlyone starts its command with the
/// defaults and hands it the terminal.
#[test]
fn a_script_with_the_terminal_signals_ignored_as_tmux_leaves_them() {
    let mut sh = Shell::start();
    sh.script("reader.sh", READER_SCRIPT);
    sh.line(r#"bash -c 'trap "" TTIN TTOU TSTP; exec bash "$D/reader.sh"'"#);
    let (pid, _) = sh.wait_command_in_foreground();
    let ignored = fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        });
    // Bits 20, 21, 22: SIGTSTP, SIGTTIN, SIGTTOU (numbered from 1).
    if let Some(mask) = ignored {
        assert_eq!(mask & (0b111 << 19), 0, "the command still ignores them");
    }
    sh.line("through-tmux-like-signals");
    sh.expect("got:through-tmux-like-signals");
    sh.expect("done-0");
    sh.expect_prompt();
    sh.assert_free();
    sh.assert_nothing_stopped();
}

/// Ctrl-Z while a script's command has the terminal stops the whole job:
/// the shell sees it stopped, and `fg` gives the command the terminal
/// again.
#[test]
fn ctrl_z_stops_a_script_job_and_fg_resumes_it() {
    let mut sh = Shell::start();
    let line = sh.script(
        "sleeper.sh",
        "\"$OO\" --dir \"$D\" run L -- sleep 1000\necho \"done-$?\"\n",
    );
    sh.line(&line);
    let (pid, start) = sh.wait_command_in_foreground();
    sh.ctrl_z();
    let jobs = sh.jobs();
    assert!(jobs.contains("Stopped"), "jobs -l: {jobs:?}");
    assert_eq!(stat(pid).map(|s| s.state), Some('T'));
    // status says so.
    let out = sh.onlyone(&["status", "--json", "L"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["locks"][0]["stopped"], true, "{v:#}");
    assert!(
        v["locks"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("pid {pid} is stopped"))),
        "{v:#}"
    );

    sh.line("fg");
    sh.wait_resumed_in_foreground(pid);
    sh.send(b"\x03");
    sh.expect("done-130");
    sh.expect_prompt();
    sh.assert_free();
    assert!(!alive(pid, start));
    let jobs = sh.jobs();
    assert_eq!(jobs.trim(), "", "the shell has jobs left");
}

/// A run whose command was stopped and whose terminal then went away is
/// still ended by `stop`: it continues what it signals.
#[test]
fn stop_ends_a_stopped_run() {
    let mut sh = Shell::start();
    sh.line(r#""$OO" --dir "$D" run L -- sleep 1000"#);
    let (pid, start) = sh.wait_command_in_foreground();
    sh.ctrl_z();
    let t = Instant::now();
    let out = sh.onlyone(&["stop", "--kill-after", "20s", "L"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "stop needed KILL: {out:?}"
    );
    assert!(!alive(pid, start));
    sh.assert_free();
}
