//! Shared helpers for the integration tests: waiting on conditions, real
//! child processes, and hand-written records.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Polls `cond` until it holds, failing the test with `what` after
/// `timeout`. This is waiting on a condition, not a fixed sleep.
pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    while !cond() {
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Polls `cond` until it holds (true) or `timeout` passes (false), for a
/// test that must tell "not possible on this machine" from a failure.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    while !cond() {
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
    true
}

/// The start time of a live process, from `/proc/PID/stat`.
pub fn start_of(pid: u32) -> u64 {
    onlyone::procfs::read_stat(pid)
        .unwrap()
        .unwrap_or_else(|| panic!("pid {pid} is not running"))
        .start
}

/// The state letter of a process, or None when it is gone.
pub fn state_of(pid: u32) -> Option<char> {
    onlyone::procfs::read_stat(pid)
        .ok()
        .flatten()
        .map(|s| s.state)
}

/// Spawns `sleep 1000` and returns it.
pub fn sleeper() -> Child {
    Command::new("sleep")
        .arg("1000")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep")
}

/// A pid and start time of a process that has exited and been reaped.
pub fn dead_process() -> (u32, u64) {
    let mut c = sleeper();
    let pid = c.id();
    let start = start_of(pid);
    c.kill().unwrap();
    c.wait().unwrap();
    (pid, start)
}

pub fn boot_id() -> String {
    onlyone::procfs::boot_id().unwrap().to_owned()
}

/// A full record in the current boot.
pub fn record_text(pid: u32, start: u64, token: &str) -> String {
    format!(
        "{pid}\nstart={start}\nboot={}\ntoken={token}\nsince=1764400000\ncmd=test-owner\nonlyone=1\n",
        boot_id()
    )
}

/// Writes `text` at `path` atomically (temp + rename), as a foreign writer
/// would.
pub fn put(path: &Path, text: impl AsRef<[u8]>) {
    let tmp = path.with_extension("handwritten");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A temp dir whose mode lets other users in (for `runuser -u nobody`).
pub fn open_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .prefix("onlyone-test-")
        .tempdir_in(std::env::var_os("ONLYONE_TEST_TMP").unwrap_or_else(|| "/tmp".into()))
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Sends SIGKILL and reaps.
pub fn kill9(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends SIGKILL to a pid that is not our child.
pub fn kill9_pid(pid: u32) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    );
}

/// Waits until a pid that is not our child is gone (or a zombie).
pub fn wait_gone(pid: u32) {
    wait_until(
        &format!("pid {pid} to exit"),
        Duration::from_secs(10),
        || !matches!(state_of(pid), Some(s) if s != 'Z' && s != 'X'),
    );
}

/// Live (not zombie) processes other than this one whose environment
/// carries `name=value`: what a test started, however deep, so it can be
/// killed when the test ends.
pub fn processes_with_env(name: &str, value: &str) -> Vec<u32> {
    let me = std::process::id();
    onlyone::procfs::all_pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter(|&pid| onlyone::procfs::environ_has(pid, name, value) == Some(true))
        .filter(|&pid| matches!(state_of(pid), Some(s) if s != 'Z' && s != 'X'))
        .collect()
}

/// Waits for `child` (spawned with piped stdout and stderr) at most `limit`
/// after `start`, draining both pipes meanwhile; kills it and fails the
/// test, naming `what`, if it is still running then. Returns its status,
/// stdout and stderr.
pub fn wait_bounded(
    child: &mut Child,
    start: std::time::Instant,
    limit: Duration,
    what: &str,
) -> (std::process::ExitStatus, String, String) {
    use std::io::Read;
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let so = read(Box::new(child.stdout.take().expect("stdout piped")));
    let se = read(Box::new(child.stderr.take().expect("stderr piped")));
    let mut pause = Duration::from_millis(1);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            kill9(child);
            panic!("{what}: hung (still running after {limit:?})");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    };
    (status, so.join().unwrap(), se.join().unwrap())
}

/// The shell block of README.md that follows `<!-- readme-test: NAME -->`:
/// the tests run the README's examples as they are written.
pub fn readme_block(name: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let marker = format!("<!-- readme-test: {name} -->");
    let after = readme
        .split_once(&marker)
        .unwrap_or_else(|| panic!("README.md has no {marker}"))
        .1;
    let body = after
        .trim_start()
        .strip_prefix("```sh\n")
        .unwrap_or_else(|| panic!("{marker} is not followed by a ```sh block"));
    body.split_once("\n```")
        .unwrap_or_else(|| panic!("the block after {marker} does not end"))
        .0
        .to_owned()
}

/// A directory holding an `onlyone` that is the binary under test, to put
/// first in `PATH` when a README example says `onlyone`.
pub fn path_with_onlyone(dir: &Path) -> std::ffi::OsString {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("onlyone");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_onlyone"), &link).unwrap();
    }
    let mut path = bin.into_os_string();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    path
}

/// What a finished command did.
#[derive(Debug)]
pub struct Out {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Out {
    /// The exit code; a death by signal fails the test.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {self:?}"))
    }

    pub fn expect(&self, code: i32) -> &Self {
        assert_eq!(self.status.code(), Some(code), "exit code: {self:#?}");
        self
    }

    pub fn says(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "stderr should contain {needle:?}: {self:#?}"
        );
        self
    }

    pub fn quiet(&self) -> &Self {
        assert_eq!(self.stderr, "", "stderr should be empty: {self:#?}");
        self
    }
}

/// Runs `cmd` to its end (killing it and failing the test after `limit`),
/// with its output captured and stdin closed.
pub fn finish(mut cmd: Command, limit: Duration) -> Out {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let (status, stdout, stderr) = wait_bounded(&mut child, start, limit, &format!("{cmd:?}"));
    Out {
        status,
        stdout,
        stderr,
        took: start.elapsed(),
    }
}
