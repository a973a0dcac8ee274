//! Shared helpers for the integration tests: waiting on conditions, real
//! child processes, and hand-written records.

pub mod etcd;
pub mod hc;
pub mod ns;
pub mod pg;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_onlyone");

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

/// The `onlyone keeper` processes of a lock file.
pub fn keepers_of(lock: &Path) -> Vec<u32> {
    let needle = lock.to_string_lossy().into_owned();
    onlyone::procfs::all_pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|&p| {
            onlyone::procfs::command_line(p)
                .is_some_and(|c| c.contains(" keeper ") && c.contains(&needle))
        })
        .filter(|&p| matches!(state_of(p), Some(s) if s != 'Z'))
        .collect()
}

/// True while `pid` is alive and not a zombie.
pub fn running(pid: u32) -> bool {
    matches!(state_of(pid), Some(s) if s != 'Z' && s != 'X')
}

/// True while that process (the same pid, the same start time) is alive
/// and not a zombie.
pub fn alive(pid: u32, start: u64) -> bool {
    matches!(onlyone::procfs::read_stat(pid), Ok(Some(s))
        if s.start == start && s.state != 'Z' && s.state != 'X')
}

/// True when a signal is pending for `pid` (sent but not yet acted on).
pub fn signal_pending(pid: u32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    s.lines()
        .filter(|l| l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
        .any(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|m| !m.trim_start_matches('0').is_empty())
        })
}

/// `pid` is still alive, with no signal pending.
pub fn assert_untouched(pid: u32) {
    assert!(running(pid), "pid {pid} should still be alive");
    assert!(!signal_pending(pid), "pid {pid} has a signal pending");
}

/// A child that is killed (and reaped) when it is dropped: a test that
/// fails leaves it behind no more than one that passes.
#[derive(Debug)]
pub struct Kid(Option<Child>);

impl Kid {
    pub fn new(child: Child) -> Kid {
        Kid(Some(child))
    }

    /// The child, for a test that kills it its own way.
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("a child")
    }
}

impl std::ops::Deref for Kid {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("a child")
    }
}

impl std::ops::DerefMut for Kid {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("a child")
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            kill9(c);
        }
    }
}

/// Spawns `sleep 1000` and returns it, killed when dropped. Its output
/// goes nowhere: a sleep that held the test runner's stdout would keep
/// `cargo test | tail` waiting.
pub fn sleeper() -> Kid {
    Kid::new(
        Command::new("sleep")
            .arg("1000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sleep"),
    )
}

/// `src` where another user can run it: a hard link in `dir/.oo-bin`
/// (or, across filesystems or when its mode does not let others run it,
/// a copy, mode 0755). A checkout in a 0700 directory (`mktemp -d`, a
/// private home) is out of reach of `nobody`, and so is all it built.
/// `dir` is the test's own temp dir (0755 under /tmp), removed with it.
pub fn reachable_by_others(src: &Path, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join(".oo-bin");
    let _ = std::fs::create_dir(&bin);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let to = bin.join(src.file_name().expect("a file"));
    if to.exists() {
        return to;
    }
    let runnable = std::fs::metadata(src).is_ok_and(|m| m.permissions().mode() & 0o005 == 0o005);
    if !(runnable && std::fs::hard_link(src, &to).is_ok()) {
        std::fs::copy(src, &to).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    to
}

/// The binary under test, where another user can run it (see
/// [`reachable_by_others`]).
pub fn bin_for_others(dir: &Path) -> PathBuf {
    reachable_by_others(Path::new(BIN), dir)
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

/// The variable that names the state directory.
pub const STATE_VAR: &str = "ONLYONE_STATE_DIR";

/// A fresh state directory (0700, this user's) for a test's programs.
pub fn state_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("onlyone-state-")
        .tempdir_in(std::env::var_os("ONLYONE_TEST_TMP").unwrap_or_else(|| "/tmp".into()))
        .unwrap()
}

/// The journal of the lock file `lock` in the state directory `state`:
/// the lock's absolute path, its directory made canonical, escaped as
/// `systemd-escape --path` does, then `.journal`.
pub fn state_journal(state: &Path, lock: &Path) -> PathBuf {
    let dir = lock.parent().unwrap();
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let path = dir.join(lock.file_name().unwrap());
    let mut name = String::new();
    for (i, part) in path
        .to_str()
        .unwrap()
        .split('/')
        .filter(|p| !p.is_empty())
        .enumerate()
    {
        if i > 0 {
            name.push('-');
        }
        for b in part.bytes() {
            let plain = b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'.');
            if plain && !(name.is_empty() && b == b'.') {
                name.push(b as char);
            } else {
                name.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    state.join(format!("{name}.journal"))
}

/// A state directory of `uid`'s own in `dir` (made once, 0700), for an
/// onlyone run as another user: `$ONLYONE_STATE_DIR` for it.
pub fn state_dir_of(dir: &Path, uid: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(format!(".state-{uid}"));
    if std::fs::create_dir(&p).is_ok() {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
    }
    p
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

/// `runuser`, when it is here and this is root.
pub fn runuser() -> Option<&'static str> {
    if !is_root() {
        return None;
    }
    ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// True when `runuser -u nobody` can run `bin` (onlyone, from
/// [`bin_for_others`]) here; says why not (for the test `test`). The probe
/// is made by `program` from the path of `runuser` and run by `run`, as the
/// test makes and runs its commands.
pub fn nobody_works(
    test: &str,
    bin: &Path,
    program: impl FnOnce(&str) -> Command,
    run: impl FnOnce(Command, &str) -> Out,
) -> bool {
    let Some(ru) = runuser() else {
        eprintln!("{test}: skipped: needs root and runuser");
        return false;
    };
    let mut c = program(ru);
    c.args(["-u", "nobody", "--"]).arg(bin).arg("--version");
    let ok = run(c, "runuser probe").code() == 0;
    if !ok {
        eprintln!("{test}: skipped: runuser -u nobody cannot run onlyone");
    }
    ok
}

/// True when `prog` is in `PATH`.
pub fn have(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).exists()))
}

/// True when `python3` runs here; otherwise says the test is skipped.
pub fn have_python3() -> bool {
    let ok = Command::new("python3").arg("-V").output().is_ok();
    if !ok {
        eprintln!("python3 is not installed; skipped");
    }
    ok
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

/// The signals the tests send get their default action in `c`, whatever
/// the test process inherited: under `nohup` SIGHUP is ignored, and a
/// shell's background job may ignore SIGINT and SIGQUIT. A command that
/// inherits "ignore" is not ended by them, and a shell cannot undo it.
pub fn default_signals(c: &mut Command) {
    use nix::sys::signal::{SigHandler, Signal, signal};
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec this only calls sigaction, which is
    // async-signal-safe, and allocates nothing.
    unsafe {
        c.pre_exec(|| {
            for s in [
                Signal::SIGHUP,
                Signal::SIGINT,
                Signal::SIGQUIT,
                Signal::SIGTERM,
                Signal::SIGUSR1,
                Signal::SIGUSR2,
            ] {
                let _ = signal(s, SigHandler::SigDfl);
            }
            Ok(())
        });
    }
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
        .filter(|&pid| running(pid))
        .collect()
}

// ---------------------------------------------------------------------------
// A test's sandbox

/// A test's temp dir and the processes it started. Every process made by
/// [`Sandbox::program`] carries `VAR=MARK` in its environment (the mark is
/// the dir's path); when the sandbox is dropped, passed or failed, its
/// children, the foreign pids it was given and every marked process,
/// however deep, are killed, and the dir is made removable again (after a
/// chmod 000).
pub struct Sandbox {
    var: &'static str,
    mark: String,
    /// Children, killed and reaped at the end.
    pub kids: Vec<Child>,
    /// Processes that are not our children (inside a namespace, say),
    /// killed at the end.
    pub foreign: Vec<u32>,
    dir: tempfile::TempDir,
    /// The state directory every program of the sandbox is given
    /// (`$ONLYONE_STATE_DIR`): the tests never write the machine's.
    state: tempfile::TempDir,
}

impl Sandbox {
    /// A fresh temp dir, whose processes are marked with the variable `var`.
    pub fn new(var: &'static str) -> Sandbox {
        let dir = open_tempdir();
        Sandbox {
            var,
            mark: dir.path().to_string_lossy().into_owned(),
            kids: Vec::new(),
            foreign: Vec::new(),
            dir,
            state: state_tempdir(),
        }
    }

    /// The state directory its programs keep their journals in.
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// The journal of the lock file `lock` in the sandbox's state
    /// directory (its name, as `systemd-escape --path` gives it).
    pub fn journal_of(&self, lock: &Path) -> PathBuf {
        state_journal(self.state_dir(), lock)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `name` in the dir.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// The lock file of lock `name` in the dir.
    pub fn lock(&self, name: &str) -> PathBuf {
        self.path(&format!("{name}.lock"))
    }

    /// A fresh directory inside the dir.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::create_dir(&p).unwrap();
        p
    }

    /// Live processes that carry this sandbox's mark.
    pub fn marked(&self) -> Vec<u32> {
        processes_with_env(self.var, &self.mark)
    }

    /// Any program: marked, with no lock directory from the environment,
    /// stdin closed, the signals at their default action.
    pub fn program(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(prog);
        c.env(self.var, &self.mark)
            .env_remove("ONLYONE_DIR")
            .env(STATE_VAR, self.state_dir())
            .stdin(Stdio::null());
        default_signals(&mut c);
        c
    }

    /// `onlyone --dir DIR`, marked, for the sandbox's lock directory.
    pub fn oo_cmd(&self) -> Command {
        let mut c = self.program(BIN);
        c.arg("--dir").arg(self.dir());
        c
    }

    /// `onlyone --dir DIR ARGS`, run to its end (30 s at most).
    pub fn oo(&self, args: &[&str]) -> Out {
        let mut c = self.oo_cmd();
        c.args(args);
        finish(c, Duration::from_secs(30))
    }

    /// `history LOCK --json`: the runs, newest first.
    pub fn history_json(&self, lock: &str) -> Vec<serde_json::Value> {
        let out = self.oo(&["history", lock, "--json"]);
        out.expect(0);
        out.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// A lock directory root and nobody share (1777), onlyone where nobody
    /// can run it, `runuser`, and a state directory of nobody's; `None`
    /// (the test skipped, and why said) without root and runuser.
    pub fn shared_with_nobody(&self, test: &str) -> Option<Shared> {
        use std::os::unix::fs::PermissionsExt;
        let bin = bin_for_others(self.dir());
        if !nobody_works(
            test,
            &bin,
            |ru| self.program(ru),
            |c, what| finish_as(c, Duration::from_secs(30), what),
        ) {
            return None;
        }
        let locks = self.subdir("shared");
        std::fs::set_permissions(&locks, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Some(Shared {
            ru: runuser()?,
            bin,
            locks,
            state: state_dir_of(self.dir(), 65534),
        })
    }

    /// Starts a long-lived process (no output, killed at the end); returns
    /// its pid.
    pub fn keep(&mut self, mut cmd: Command) -> u32 {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let pid = child.id();
        self.kids.push(child);
        pid
    }

    /// `sleep 1000`, marked: its pid.
    pub fn sleeper(&mut self) -> u32 {
        let mut c = self.program("sleep");
        c.arg("1000");
        self.keep(c)
    }

    /// Kills the children, the foreign pids and, until none is left (a
    /// marked process may fork meanwhile), every marked process.
    pub fn end_processes(&mut self) {
        for mut k in self.kids.drain(..) {
            kill9(&mut k);
        }
        for pid in self.foreign.drain(..) {
            kill9_pid(pid);
        }
        let mut killed = Vec::new();
        for _ in 0..50 {
            let marked = self.marked();
            if marked.is_empty() {
                break;
            }
            for pid in marked {
                kill9_pid(pid);
                killed.push(pid);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // A killed process's environment goes before it is dead: in exit(2)
        // it still holds its files and its group. Done only once each is
        // gone or a zombie, so that what follows sees them dead.
        // (Quietly bounded: this runs in Drop too, perhaps in a panic.)
        let until = Instant::now() + Duration::from_secs(10);
        for pid in killed {
            while matches!(state_of(pid), Some(s) if s != 'Z' && s != 'X') && Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.end_processes();
        // Make everything removable again after a chmod 000 or a chown.
        let _ = Command::new("chmod")
            .args(["-R", "u+rwx"])
            .arg(self.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Makes `$world`, a suite's own sandbox (a struct with a field `sb:
/// Sandbox`), a [`Sandbox`] too, with its own fields and methods on top.
#[allow(unused_macros)]
macro_rules! derefs_to_sandbox {
    ($world:ty) => {
        impl std::ops::Deref for $world {
            type Target = $crate::support::Sandbox;
            fn deref(&self) -> &Self::Target {
                &self.sb
            }
        }

        impl std::ops::DerefMut for $world {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.sb
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use derefs_to_sandbox;

/// A store test's world, in the module that names it: `World`, a
/// database of its own (`pg`) and a sandbox marked `$mark` (`sb`, which it
/// derefs to), with `World::new()` (a database on the test binary's
/// shared server; `None`, said, where PostgreSQL is not installed),
/// `World::own()` (the same on a cluster of the test's own, for a test
/// that stops or restarts it), `oo_at(URL, ARGS)` (`onlyone --store URL ARGS...`, no libpq
/// variable from the test's own environment, `DIR` the sandbox) and
/// `oo(ARGS)` (run against the server, waited for up to a minute). The
/// module adds what its tests need in an `impl World` of its own.
macro_rules! store_world {
    ($mark:literal) => {
        /// A test's world: a database, a temp dir and the processes it
        /// started.
        struct World {
            sb: $crate::support::Sandbox,
            pg: $crate::support::pg::Db,
        }

        $crate::support::derefs_to_sandbox!(World);

        #[allow(dead_code)]
        impl World {
            fn new() -> Option<World> {
                Some(World {
                    pg: $crate::support::pg::Db::new_or_skip()?,
                    sb: $crate::support::Sandbox::new($mark),
                })
            }

            /// A world whose server is its own, to stop and restart.
            fn own() -> Option<World> {
                let pg = $crate::support::pg::Db::own($crate::support::pg::Pg::start());
                Some(World {
                    pg: pg.map_err(|why| eprintln!("skipped: {why}")).ok()?,
                    sb: $crate::support::Sandbox::new($mark),
                })
            }

            /// `onlyone --store URL ARGS...`, `DIR` the sandbox.
            fn oo_at(&self, url: &str, args: &[&str]) -> std::process::Command {
                self.store_cmd(url, args)
            }

            /// `onlyone --store URL ARGS...` against the server, waited for.
            fn oo(&self, args: &[&str]) -> $crate::support::Out {
                $crate::support::finish(
                    self.oo_at(&self.pg.url(), args),
                    std::time::Duration::from_secs(60),
                )
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use store_world;

/// What [`Sandbox::shared_with_nobody`] makes.
pub struct Shared {
    pub ru: &'static str,
    pub bin: PathBuf,
    /// The shared lock directory (1777).
    pub locks: PathBuf,
    /// Nobody's state directory.
    pub state: PathBuf,
}

impl Shared {
    /// `onlyone --dir LOCKS ARGS` as nobody, with nobody's state directory.
    pub fn as_nobody(&self, sb: &Sandbox, args: &[&str]) -> Command {
        let mut c = sb.program(self.ru);
        c.args(["-u", "nobody", "--"])
            .arg(&self.bin)
            .arg("--dir")
            .arg(&self.locks)
            .args(args)
            .env("ONLYONE_STATE_DIR", &self.state);
        c
    }
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

/// The documents whose examples the tests run: README.md and the guides
/// in doc/, each as (path from the crate's root, text).
pub fn documents() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = vec!["README.md".to_owned()];
    let mut guides: Vec<String> = std::fs::read_dir(root.join("doc"))
        .expect("read doc/")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("doc/{n}"))
        .collect();
    guides.sort();
    paths.extend(guides);
    paths
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(root.join(&p)).unwrap_or_else(|e| panic!("read {p}: {e}"));
            (p, text)
        })
        .collect()
}

/// The code block that follows `<!-- readme-test: NAME -->`, in README.md
/// or in the guide of doc/ that holds it (exactly one document may): the
/// tests run the documents' examples as they are written.
pub fn readme_block(name: &str) -> String {
    let marker = format!("<!-- readme-test: {name} -->");
    let docs = documents();
    let mut holders = docs.iter().filter(|(_, text)| text.contains(&marker));
    let (path, text) = holders
        .next()
        .unwrap_or_else(|| panic!("neither README.md nor doc/*.md has {marker}"));
    if let Some((other, _)) = holders.next() {
        panic!("{marker} is in both {path} and {other}");
    }
    doc_block(path, text, &marker)
}

/// The code block after `marker` in `text` (the document at `path`).
fn doc_block(path: &str, text: &str, marker: &str) -> String {
    let (_, after) = text
        .split_once(marker)
        .unwrap_or_else(|| panic!("{path} has no {marker}"));
    assert!(
        !after.contains(marker),
        "{path} has {marker} more than once"
    );
    let body = after
        .trim_start()
        .strip_prefix("```")
        .and_then(|b| b.split_once('\n'))
        .unwrap_or_else(|| panic!("{path}: {marker} is not followed by a ``` block"))
        .1;
    body.split_once("\n```")
        .unwrap_or_else(|| panic!("{path}: the block after {marker} does not end"))
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
        std::os::unix::fs::symlink(BIN, &link).unwrap();
    }
    let mut path = bin.into_os_string();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    path
}

/// What a finished command did.
#[derive(Debug)]
pub struct Out {
    /// What the command was, for messages.
    pub what: String,
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
        assert_eq!(
            self.status.code(),
            Some(code),
            "{}: exit code: {self:#?}",
            self.what
        );
        self
    }

    pub fn says(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "{}: stderr should contain {needle:?}: {self:#?}",
            self.what
        );
        self
    }

    pub fn prints(&self, needle: &str) -> &Self {
        assert!(
            self.stdout.contains(needle),
            "{}: stdout should contain {needle:?}: {self:#?}",
            self.what
        );
        self
    }

    pub fn quiet(&self) -> &Self {
        assert_eq!(
            self.stderr, "",
            "{}: stderr should be empty: {self:#?}",
            self.what
        );
        self
    }

    /// Returned within `limit`.
    pub fn within(&self, limit: Duration) -> &Self {
        assert!(
            self.took < limit,
            "{}: took {:?}, over {limit:?}: {self:#?}",
            self.what,
            self.took
        );
        self
    }

    /// Its stdout, as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {self:#?}", self.what))
    }
}

/// Runs `cmd` to its end (killing it and failing the test after `limit`),
/// with its output captured and stdin closed.
pub fn finish(cmd: Command, limit: Duration) -> Out {
    let what = format!("{cmd:?}");
    finish_as(cmd, limit, &what)
}

/// [`finish`] for a command called `what` in messages.
pub fn finish_as(mut cmd: Command, limit: Duration, what: &str) -> Out {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let (status, stdout, stderr) = wait_bounded(&mut child, start, limit, what);
    Out {
        what: what.to_owned(),
        status,
        stdout,
        stderr,
        took: start.elapsed(),
    }
}

/// [`finish_as`], and a panic (exit 101) or a death by signal fails the
/// test.
pub fn finish_checked(cmd: Command, limit: Duration, what: &str) -> Out {
    let out = finish_as(cmd, limit, what);
    assert!(
        out.status.code().is_some(),
        "{what}: killed by a signal: {out:#?}"
    );
    assert_ne!(out.code(), 101, "{what}: panicked: {out:#?}");
    out
}

/// Watches, from a thread of its own that wakes every 5 ms, whether this
/// machine stopped running the test's processes for a while (a virtual
/// machine paused or snapshotted, a host starved) or stepped its wall
/// clock: the longest such stall seen since it started. A timing bound that
/// holds only while processes run within a margin (a kill landing within
/// the store's M) cannot be judged across a stall longer than that margin.
pub struct StallWatch {
    worst_us: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StallWatch {
    pub fn start() -> StallWatch {
        use std::sync::atomic::Ordering;
        let worst_us = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (w, s) = (worst_us.clone(), stop.clone());
        std::thread::spawn(move || {
            let tick = Duration::from_millis(5);
            let (mut mono, mut wall) = (Instant::now(), std::time::SystemTime::now());
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                let (m, t) = (Instant::now(), std::time::SystemTime::now());
                let walked = t.duration_since(wall).map_err(|e| e.duration());
                let stall = stall_of(tick, m - mono, walked);
                w.fetch_max(stall.as_micros() as u64, Ordering::Relaxed);
                (mono, wall) = (m, t);
            }
        });
        StallWatch { worst_us, stop }
    }

    /// The longest stall seen so far.
    pub fn worst(&self) -> Duration {
        Duration::from_micros(self.worst_us.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Asserts `held` (a timing bound that allows processes `margin` of
    /// lateness), unless this machine stalled for longer than `margin`
    /// meanwhile: then the bound could not be judged, and that is said.
    pub fn assert_within(&self, held: bool, margin: Duration, what: &str) {
        if held {
            return;
        }
        let worst = self.worst();
        if worst > margin {
            eprintln!(
                "inconclusive: {what}; but this machine stalled for {worst:?} (more than the \
                 margin of {margin:?}), so the bound could not hold"
            );
            return;
        }
        panic!("{what} (longest stall seen: {worst:?})");
    }
}

/// How long a sleep of `tick` stalled, that took `ran` by the monotonic
/// clock and `walked` by the wall clock (`Err`: the wall clock went back
/// by that much): late beyond the tick on either clock, or the two clocks
/// apart (the wall clock stepped).
pub fn stall_of(tick: Duration, ran: Duration, walked: Result<Duration, Duration>) -> Duration {
    let late = ran.saturating_sub(tick);
    match walked {
        Ok(w) => late.max(w.saturating_sub(tick)).max(w.abs_diff(ran)),
        Err(back) => late.max(ran + back),
    }
}

impl Drop for StallWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the store's test modules do with a sandbox: their `onlyone
/// --store` commands and the runs they start in the background.
impl Sandbox {
    /// `onlyone --store URL ARGS...`: `DIR` is the sandbox, and no store
    /// or libpq variable comes from the test's own environment.
    pub fn store_cmd(&self, url: &str, args: &[&str]) -> Command {
        let mut c = self.program(BIN);
        c.arg("--store")
            .arg(url)
            .args(args)
            .env_remove("ONLYONE_STORE")
            .env("DIR", self.dir());
        for v in [
            "PGHOST",
            "PGPORT",
            "PGUSER",
            "PGDATABASE",
            "PGSSLMODE",
            "PGSSLROOTCERT",
            "PGPASSWORD",
            "PGPASSFILE",
            "ETCDCTL_PASSWORD",
        ] {
            c.env_remove(v);
        }
        c
    }

    /// Starts `cmd` in the background (killed at the end), its stdout
    /// closed and its stderr in `DIR/TAG.err`: its pid.
    pub fn start_logged(&mut self, mut cmd: Command, tag: &str) -> u32 {
        let err = std::fs::File::create(self.path(&format!("{tag}.err"))).unwrap();
        let child = cmd
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn onlyone");
        let pid = child.id();
        self.kids.push(child);
        pid
    }

    /// Waits until `ready` exists, while the child `pid` (one of ours)
    /// runs: a holder whose command has started.
    pub fn wait_ready(&mut self, pid: u32, ready: &Path, limit: Duration) {
        let kid = self.kids.iter_mut().find(|k| k.id() == pid).unwrap();
        wait_until("the holder's command", limit, || {
            if let Ok(Some(s)) = kid.try_wait() {
                panic!("the holder exited early: {s:?}");
            }
            ready.exists()
        });
    }

    /// Waits for the child `pid` (one of ours) to exit: its status.
    pub fn exit_of_kid(&mut self, pid: u32, limit: Duration) -> std::process::ExitStatus {
        let kid = self.kids.iter_mut().find(|k| k.id() == pid).unwrap();
        let mut status = None;
        wait_until("a holder to exit", limit, || {
            status = kid.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap()
    }
}
