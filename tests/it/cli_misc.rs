//! The `onlyone` command against real processes: precheck's 0-or-75 promise
//! on broken inputs, the `status --json` schema, `stop`, `acquire`/`release`
//! from shell scripts, the "held" message, `--deadline`, and lock names.
//!
//! Every test works in its own temp dir (`--dir`). Every process a test
//! starts carries a marker in its environment; a guard kills every marked
//! process when the test ends, passed or failed.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::*;

const MARK: &str = "ONLYONE_CLI_MISC_MARK";
/// The most any single onlyone call may take before the test calls it a
/// hang.
const HANG: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// A test's world: its temp dir and the processes it started

/// A test's [`Sandbox`], whose children are named by their index.
struct World {
    sb: Sandbox,
}

derefs_to_sandbox!(World);

impl World {
    fn new() -> World {
        World {
            sb: Sandbox::new(MARK),
        }
    }

    /// `onlyone --dir DIR`.
    fn oo_in(&self, dir: &Path) -> Command {
        let mut c = self.program(BIN);
        c.arg("--dir").arg(dir);
        c
    }

    /// `onlyone --dir DIR ARGS...`, run to its end.
    fn oo(&self, args: &[&str]) -> Out {
        let mut c = self.oo_in(self.dir());
        c.args(args);
        finish(c, HANG)
    }

    /// Runs a command to its end.
    fn finish(&self, cmd: Command) -> Out {
        finish(cmd, HANG)
    }

    /// Starts a long-lived process (no output, killed at the end); returns
    /// its index.
    fn spawn(&mut self, cmd: Command) -> usize {
        self.keep(cmd);
        self.kids.len() - 1
    }

    fn pid(&self, kid: usize) -> u32 {
        self.kids[kid].id()
    }

    /// `sleep 1000`, started by this test: (index, pid).
    fn sleeper(&mut self) -> (usize, u32) {
        let pid = self.sb.sleeper();
        (self.kids.len() - 1, pid)
    }

    /// Waits for a child of this test to exit.
    fn wait_exit(&mut self, kid: usize, limit: Duration) -> ExitStatus {
        let mut status = None;
        let child = &mut self.kids[kid];
        wait_until("a child to exit", limit, || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap()
    }

    /// Kills a child of this test and reaps it.
    fn kill(&mut self, kid: usize) {
        kill9(&mut self.kids[kid]);
    }

    /// `onlyone run LOCK -- COMMAND...` in the background; returns once the
    /// run's record names its command.
    fn run_bg(&mut self, lock: &str, command: &[&str]) -> Run {
        let mut c = self.oo_in(self.dir());
        c.args(["run", lock, "--"]).args(command);
        let kid = self.spawn(c);
        let path = if lock.contains('/') {
            PathBuf::from(lock)
        } else {
            self.lock(lock)
        };
        let wrapper = self.pid(kid);
        wait_until("the run's record", Duration::from_secs(10), || {
            field(&path, "cmdpid").is_some()
        });
        let rec = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            rec.lines().next(),
            Some(wrapper.to_string().as_str()),
            "{rec}"
        );
        let cmd: u32 = field(&path, "cmdpid").unwrap().parse().unwrap();
        // The command has exec'd once its start time is recorded and its
        // command line is the one asked for.
        wait_until("the command to exec", Duration::from_secs(10), || {
            std::fs::read(format!("/proc/{cmd}/cmdline"))
                .is_ok_and(|c| c.starts_with(command[0].as_bytes()))
        });
        Run { kid, wrapper, cmd }
    }
}

/// A background `onlyone run`.
struct Run {
    kid: usize,
    wrapper: u32,
    cmd: u32,
}

/// The value of `key=` in a record, if the file and key exist.
fn field(path: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let prefix = format!("{key}=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
}

fn token() -> String {
    onlyone::command::new_token()
}

/// A full record written by hand.
fn record(pid: u32, start: u64, boot: &str, mode: &str, cmd: &str) -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    format!(
        "{pid}\nstart={start}\nboot={boot}\ntoken={}\nsince={since}\nuid=0\nmode={mode}\n\
         cmd={cmd}\nonlyone=1\n",
        token()
    )
}

fn status_json(w: &World, locks: &[&str]) -> Value {
    let mut args = vec!["status", "--json"];
    args.extend_from_slice(locks);
    let out = w.oo(&args);
    out.expect(0);
    out.json()
}

fn state_of_lock(w: &World, lock: &str) -> String {
    let v = status_json(w, &[lock]);
    v["locks"][0]["state"].as_str().unwrap().to_owned()
}

/// An age as `compact_duration` prints it: `450ms`, `12s`, `3m12s`, `2h5m`.
fn is_age(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
        && (s.ends_with('s') || s.ends_with('m') || s.ends_with('h'))
}

/// Checks the one-line "held" message: it names the pid, the command, the
/// age and the hint.
fn assert_held_message(stderr: &str, name: &str, who: &str, cmd: &str) {
    let line = stderr
        .lines()
        .find(|l| l.contains("is active as") || l.contains("is still active"))
        .unwrap_or_else(|| panic!("no held message in {stderr:?}"));
    let stop = if name.contains('/') {
        format!("'{name}'")
    } else {
        name.to_owned()
    };
    let head = format!("onlyone: another run of `{name}` is active as {who} (`{cmd}`, for ");
    let tail = format!("); wait for it (--wait) or stop it (onlyone stop {stop})");
    let age = line
        .strip_prefix(&head)
        .and_then(|r| r.split_once(&tail))
        .map(|(age, _)| age)
        .unwrap_or_else(|| panic!("held message {line:?} is not {head}AGE{tail}"));
    assert!(is_age(age), "bad age {age:?} in {line:?}");
}

// ---------------------------------------------------------------------------
// 1. precheck exits 0 or 75, and nothing else

/// Runs `onlyone --dir DIR precheck ARGS...` and checks the code is the
/// expected one of 0 and 75; a 0 for a broken input must say why.
fn precheck(w: &World, dir: &Path, args: &[&str], want: i32, needles: &[&str]) -> Out {
    let mut c = w.oo_in(dir);
    c.arg("precheck").args(args);
    let out = w.finish(c);
    let code = out.code();
    assert!(
        code == 0 || code == 75,
        "precheck {args:?} gave {code}: {out:#?}"
    );
    assert_eq!(code, want, "precheck {args:?}: {out:#?}");
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "precheck {args:?}: stderr should contain {n:?}: {out:#?}"
        );
    }
    out
}

#[test]
fn precheck_exits_0_or_75_whatever_the_input() {
    let mut w = World::new();
    let d = w.dir().to_path_buf();
    let boot = boot_id();

    // A free lock.
    precheck(&w, &d, &["free"], 0, &[]).quiet();

    // A live holder.
    let (_, sp) = w.sleeper();
    w.oo(&["acquire", "live", "--owner", &sp.to_string()])
        .expect(0);
    precheck(
        &w,
        &d,
        &["live"],
        75,
        &[&format!("pid {sp}"), "onlyone stop live"],
    );
    assert_untouched(sp);

    // A dead holder's record: 0, and the stale lock is cleared.
    let (dead, dead_start) = dead_process();
    put(&w.lock("dead"), record_text(dead, dead_start, &token()));
    precheck(&w, &d, &["dead"], 0, &["cleared the stale lock"]);
    assert!(!w.lock("dead").exists(), "the stale lock was not cleared");

    // A bare pid file of a live process (another tool's) is a live holder;
    // of a dead one it is stale.
    put(&w.lock("barelive"), format!("{sp}\n"));
    precheck(&w, &d, &["barelive"], 75, &[&format!("pid {sp}")]);
    put(&w.lock("baredead"), format!("{dead}\n"));
    precheck(&w, &d, &["baredead"], 0, &[]);

    // A live pid recorded under another boot is stale, and not signalled.
    put(
        &w.lock("otherboot"),
        record(
            sp,
            start_of(sp),
            "00000000-1111-2222-3333-444444444444",
            "lock",
            "x",
        ),
    );
    precheck(&w, &d, &["otherboot"], 0, &[]);
    assert_untouched(sp);

    precheck_fails_open_on_records_it_cannot_judge(&w, &d, &boot);
    precheck_fails_open_on_what_is_not_a_lock_file(&w, &d);
    precheck_fails_open_on_usage_errors(&w, &d);

    // Nothing above touched the live holder or its lock.
    assert_untouched(sp);
    precheck(&w, &d, &["live"], 75, &[]);
}

/// `precheck` on records that are not records: unknown, fail open, left
/// in place.
fn precheck_fails_open_on_records_it_cannot_judge(w: &World, d: &Path, boot: &str) {
    let garbage: &[(&str, &[u8])] = &[
        ("garbage", b"hello world\n"),
        ("empty", b""),
        ("nul", b"12\0\nstart=1\n"),
        ("pid0", b"0\n"),
        ("minus1", b"-1\n"),
        ("huge", b"99999999\n"),
        ("binary", &[0xff, 0xfe, 0x00, 0x01]),
    ];
    for (name, bytes) in garbage {
        put(&w.lock(name), bytes);
        precheck(w, d, &[name], 0, &["cannot be judged", "fail open"]);
        assert!(w.lock(name).exists(), "{name}: an unknown lock was removed");
    }
    put(&w.lock("pid0full"), record(0, 1, boot, "lock", "x"));
    precheck(w, d, &["pid0full"], 0, &["fail open"]);
}

/// `precheck` on a lock path that is not a lock file (a symlink, a FIFO, a
/// directory) and on a `--dir` that is not a directory one can use.
fn precheck_fails_open_on_what_is_not_a_lock_file(w: &World, d: &Path) {
    // A symlink at the lock path is never followed, even to a live record.
    std::os::unix::fs::symlink(w.lock("live"), w.lock("link")).unwrap();
    precheck(w, d, &["link"], 0, &["symbolic link", "fail open"]);
    std::os::unix::fs::symlink(d.join("nowhere"), w.lock("dangling")).unwrap();
    precheck(w, d, &["dangling"], 0, &["symbolic link", "fail open"]);

    // A FIFO at the lock path: a clear error, never a hang.
    let fifo = w.lock("fifo");
    let out = w.finish({
        let mut c = w.program("mkfifo");
        c.arg(&fifo);
        c
    });
    out.expect(0);
    let out = precheck(w, d, &["fifo"], 0, &["FIFO", "fail open"]);
    assert!(out.took < Duration::from_secs(2), "took {:?}", out.took);

    // A directory at the lock path.
    std::fs::create_dir(w.lock("adir")).unwrap();
    precheck(w, d, &["adir"], 0, &["directory", "fail open"]);

    // A --dir that is a regular file, or does not exist.
    let file = d.join("plainfile");
    std::fs::write(&file, "x").unwrap();
    precheck(w, &file, &["x"], 0, &["not a directory", "fail open"]);
    // A missing directory (`/run` after a reboot) means no lock: silent.
    precheck(w, &d.join("missing"), &["x"], 0, &[]).quiet();
    assert!(!d.join("missing").exists(), "precheck created the dir");

    // An unreadable directory: root still reads it.
    let locked = w.subdir("locked");
    put(
        &locked.join("held.lock"),
        std::fs::read(w.lock("live")).unwrap(),
    );
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    precheck(w, &locked, &["held"], if is_root() { 75 } else { 0 }, &[]);
    precheck(w, &locked, &["free"], 0, &[]);
}

/// `precheck` on bad lock names and usage errors: 0, failing open.
fn precheck_fails_open_on_usage_errors(w: &World, d: &Path) {
    precheck(w, d, &["a b"], 0, &["not a lock name", "fail open"]);
    precheck(w, d, &["--", "-x"], 0, &["not a lock name", "fail open"]);
    precheck(w, d, &["-x"], 0, &["fail open"]);
    precheck(w, d, &[&"x".repeat(300)], 0, &["not a lock name"]);
    precheck(w, d, &[".."], 0, &["not a lock name"]);
    precheck(w, d, &["é"], 0, &["not a lock name"]);
    precheck(w, d, &[""], 0, &["not a lock name"]);
    precheck(w, d, &["--bogus", "live"], 0, &["--bogus", "fail open"]);
    precheck(w, d, &[], 0, &["fail open"]);
    precheck(w, d, &["--deadline", "soon", "live"], 0, &["fail open"]);
    precheck(w, d, &["--deadline"], 0, &["fail open"]);
    precheck(w, d, &["--deadline", "0s", "free"], 0, &[]);
    // A global usage error before the subcommand is still a precheck.
    let mut c = w.program(BIN);
    c.args(["--bogus", "--dir"])
        .arg(d)
        .args(["precheck", "live"]);
    let out = w.finish(c);
    assert_eq!(out.status.code(), Some(0), "{out:#?}");
    assert!(out.stderr.contains("fail open"), "{out:#?}");
}

/// `precheck` whose stderr is a pipe nobody reads any more (cron's mailer
/// or a logger gone) must still exit 0 or 75.
#[test]
fn precheck_with_a_broken_stderr_still_exits_0_or_75() {
    let mut w = World::new();
    let (_, sp) = w.sleeper();
    w.oo(&["acquire", "live", "--owner", &sp.to_string()])
        .expect(0);
    for (args, want) in [
        (vec!["precheck", "live"], 75),
        (vec!["precheck", "a b"], 0),
        (vec!["precheck"], 0),
    ] {
        let (r, wr) = rustix::pipe::pipe().unwrap();
        drop(r);
        let mut c = w.oo_in(w.dir());
        c.args(&args).stdout(Stdio::null()).stderr(Stdio::from(wr));
        let st = c.status().unwrap();
        assert_eq!(st.code(), Some(want), "{args:?}: {st:?}");
    }
}

/// As an unprivileged user: a root-owned live holder is alive (EPERM), an
/// unreadable directory fails open, a stale lock that cannot be cleared is
/// still a 0.
#[test]
fn precheck_as_an_unprivileged_user() {
    let Some(runuser) = runuser() else {
        eprintln!("skipped: needs root and runuser");
        return;
    };
    let nobody = |w: &World, dir: &Path, lock: &str| {
        let mut c = w.program(runuser);
        c.args(["-u", "nobody", "--"])
            .arg(bin_for_others(w.dir()))
            .arg("--dir")
            .arg(dir)
            .args(["precheck", lock]);
        w.finish(c)
    };
    if nobody(&World::new(), Path::new("/nonexistent"), "x")
        .status
        .code()
        != Some(0)
    {
        eprintln!("skipped: runuser -u nobody cannot run the binary");
        return;
    }
    let mut w = World::new();
    let (_, sp) = w.sleeper();
    w.oo(&["acquire", "live", "--owner", &sp.to_string()])
        .expect(0);
    let out = nobody(&w, w.dir(), "live");
    assert_eq!(out.status.code(), Some(75), "{out:#?}");
    assert!(out.stderr.contains(&format!("pid {sp}")), "{out:#?}");

    let (dead, start) = dead_process();
    put(&w.lock("dead"), record_text(dead, start, &token()));
    let out = nobody(&w, w.dir(), "dead");
    assert_eq!(out.status.code(), Some(0), "{out:#?}");

    let locked = w.subdir("locked");
    put(
        &locked.join("live.lock"),
        std::fs::read(w.lock("live")).unwrap(),
    );
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let out = nobody(&w, &locked, "live");
    assert_eq!(out.status.code(), Some(0), "{out:#?}");
    assert!(out.stderr.contains("fail open"), "{out:#?}");
    assert!(out.stderr.contains("ermission denied"), "{out:#?}");
    // Root reads it.
    precheck(&w, &locked, &["live"], 75, &[]);
}

// ---------------------------------------------------------------------------
// 2. status

const KEYS: [&str; 22] = [
    "name",
    "path",
    "state",
    "pid",
    "command_pid",
    "holder_pid",
    "holder",
    "since",
    "since_unix",
    "age_seconds",
    "command",
    "mode",
    "host",
    "uid",
    "token",
    "reason",
    "stopped",
    "last_run",
    "last_success_unix",
    "skipped_since_start",
    "outside_work",
    "waiters",
];

/// Checks one entry of `locks[]` against the documented schema.
fn check_schema(l: &Value) {
    let o = l
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {l}"));
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort();
    let mut want = KEYS.to_vec();
    want.sort();
    assert_eq!(keys, want, "{l:#}");
    let opt = |k: &str, ok: fn(&Value) -> bool| {
        assert!(
            o[k].is_null() || ok(&o[k]),
            "`{k}` has the wrong type: {l:#}"
        );
    };
    let u32ish = |v: &Value| v.as_u64().is_some_and(|n| n <= u64::from(u32::MAX));
    assert!(o["name"].is_string() && o["path"].is_string(), "{l:#}");
    assert!(
        ["free", "held", "stale", "unknown"].contains(&o["state"].as_str().unwrap_or("")),
        "{l:#}"
    );
    for k in ["pid", "command_pid", "holder_pid", "uid"] {
        opt(k, u32ish);
    }
    for k in ["since_unix", "age_seconds"] {
        opt(k, Value::is_u64);
    }
    for k in ["since", "command", "host", "reason"] {
        opt(k, Value::is_string);
    }
    opt("holder", |v| {
        ["owner", "command", "leftover"].contains(&v.as_str().unwrap_or(""))
    });
    opt("mode", |v| {
        ["run", "lock", "script"].contains(&v.as_str().unwrap_or(""))
    });
    assert!(o["stopped"].is_boolean(), "`stopped` is a boolean: {l:#}");
    opt("last_success_unix", Value::is_f64);
    opt("skipped_since_start", Value::is_u64);
    opt("last_run", |v| {
        let r = &v;
        r["start_unix"].is_f64()
            && ["exit", "signal", "ended", "abandoned", "released"]
                .contains(&r["outcome"].as_str().unwrap_or(""))
            && (r["exit"].is_null() || r["exit"].is_i64())
            && (r["signal"].is_null() || r["signal"].is_string())
            && (r["duration_seconds"].is_null() || r["duration_seconds"].is_f64())
    });
    if o["stopped"] == true {
        assert_eq!(o["state"], "held", "only a held lock is stopped: {l:#}");
    }
    for k in o["outside_work"]
        .as_array()
        .unwrap_or_else(|| panic!("outside_work: {l:#}"))
    {
        assert!(u32ish(&k["pid"]), "{k:#}");
        assert!(
            k["server_pid"].is_null() || u32ish(&k["server_pid"]),
            "{k:#}"
        );
        for f in ["command", "terminal"] {
            assert!(k[f].is_null() || k[f].is_string(), "`{f}`: {k:#}");
        }
    }
    let waiters = o["waiters"]
        .as_array()
        .unwrap_or_else(|| panic!("waiters: {l:#}"));
    for w in waiters {
        assert!(u32ish(&w["pid"]) && w["queued"].is_boolean(), "{w:#}");
        for k in ["host", "command", "since"] {
            assert!(w[k].is_null() || w[k].is_string(), "`{k}`: {w:#}");
        }
        assert!(
            w["since_unix"].is_null() || w["since_unix"].is_u64(),
            "{w:#}"
        );
    }
    opt("token", |v| {
        v.as_str()
            .is_some_and(|t| t.len() == 32 && t.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    // `since` and `since_unix` are the same instant.
    if let (Some(s), Some(u)) = (o["since"].as_str(), o["since_unix"].as_u64()) {
        let t = humantime::parse_rfc3339(s).unwrap_or_else(|e| panic!("since {s:?}: {e}"));
        let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs, u, "{l:#}");
        assert!(s.ends_with('Z'), "since should be UTC: {s}");
    }
    // Held locks say which process proves it.
    let held = o["state"] == "held";
    assert_eq!(held, o["holder_pid"].is_u64(), "{l:#}");
    assert_eq!(held, o["holder"].is_string(), "{l:#}");
    if o["state"] == "stale" || o["state"] == "unknown" {
        assert!(
            o["reason"].is_string(),
            "a {} lock needs a reason: {l:#}",
            o["state"]
        );
    }
}

fn entry<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no lock `{name}` in {v:#}"))
}

/// `status` of a directory judges every record with one listing of the
/// host's processes: each record still finds its own run's processes.
/// Three runs whose wrappers and commands were killed: one is kept by a
/// process carrying its token, one by a process carrying another's, and
/// one by nothing. Together and one by one, `status` says the same.
#[test]
fn status_of_many_runs_finds_each_runs_carriers() {
    let mut w = World::new();
    let mut tokens = Vec::new();
    for lock in ["a", "b", "c"] {
        let run = w.run_bg(lock, &["sleep", "1000"]);
        tokens.push(field(&w.lock(lock), "token").unwrap());
        let kid = run.kid;
        w.kill(kid);
        kill9_pid(run.cmd);
        wait_gone(run.cmd);
    }
    // a's carrier, and one carrying b's token; c has none.
    for token in [&tokens[0], &tokens[1]] {
        let mut c = w.program("sleep");
        c.arg("1000").env("ONLYONE_TOKEN", token);
        w.keep(c);
    }
    let carriers = [w.pid(w.kids.len() - 2), w.pid(w.kids.len() - 1)];
    let all = status_json(&w, &[]);
    let states: Vec<(&str, &str)> = all["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [("a", "held"), ("b", "held"), ("c", "stale")],
        "{all:#}"
    );
    for (i, carrier) in carriers.iter().enumerate() {
        assert_eq!(all["locks"][i]["holder_pid"], *carrier, "{all:#}");
    }
    for lock in ["a", "b", "c"] {
        let one = status_json(&w, &[lock]);
        let i = ["a", "b", "c"].iter().position(|l| *l == lock).unwrap();
        assert_eq!(one["locks"][0]["state"], all["locks"][i]["state"], "{lock}");
        assert_eq!(
            one["locks"][0]["holder_pid"], all["locks"][i]["holder_pid"],
            "{lock}"
        );
    }
}

#[test]
fn status_json_follows_the_documented_schema() {
    let mut w = World::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // free: it ran, and is over (a name that never ran is no lock:
    // `status` says so, as `history` does)
    w.oo(&["run", "free", "--", "true"]).expect(0);
    // held by a run
    let run = w.run_bg("run", &["sleep", "1000"]);
    // held by acquire --owner
    let (_, sp) = w.sleeper();
    w.oo(&["acquire", "acq", "--owner", &sp.to_string()])
        .expect(0);
    // stale
    let (dead, dead_start) = dead_process();
    put(&w.lock("stale"), record_text(dead, dead_start, &token()));
    // unknown
    put(&w.lock("unknown"), "this is not a record\n");
    // held by the command of a run whose wrapper was killed
    let orphan = w.run_bg("orphan", &["sleep", "1000"]);
    w.kill(orphan.kid);

    let v = status_json(&w, &["free", "run", "acq", "stale", "unknown", "orphan"]);
    let top = v.as_object().unwrap();
    let mut keys: Vec<&str> = top.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["dir", "locks", "schema"], "{v:#}");
    assert_eq!(v["schema"], 1);
    assert_eq!(v["dir"], w.dir().display().to_string());
    let locks = v["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 6, "{v:#}");
    for l in locks {
        check_schema(l);
    }

    assert_the_free_lock_has_no_holder(&w, &v);

    let r = entry(&v, "run");
    assert_eq!(r["state"], "held", "{r:#}");
    assert_eq!(r["pid"], run.wrapper);
    assert_eq!(r["command_pid"], run.cmd);
    assert_eq!(r["holder"], "owner");
    assert_eq!(r["holder_pid"], run.wrapper);
    assert_eq!(r["mode"], "run");
    assert_eq!(r["command"], "sleep 1000");
    assert_eq!(r["uid"], rustix::process::geteuid().as_raw());
    assert_eq!(r["token"], field(&w.lock("run"), "token").unwrap());
    let since = r["since_unix"].as_u64().unwrap();
    assert!(since >= now && since <= now + 60, "{r:#}");
    assert!(r["age_seconds"].as_u64().unwrap() < 60, "{r:#}");
    assert!(r["host"].as_str().is_some_and(|h| !h.is_empty()), "{r:#}");

    let a = entry(&v, "acq");
    assert_eq!(a["state"], "held", "{a:#}");
    assert_eq!(a["pid"], sp);
    assert_eq!(a["holder_pid"], sp);
    assert_eq!(a["holder"], "owner");
    assert_eq!(a["mode"], "lock");
    assert!(a["command_pid"].is_null(), "{a:#}");
    assert_eq!(a["command"], "sleep 1000");

    let s = entry(&v, "stale");
    assert_eq!(s["state"], "stale", "{s:#}");
    assert_eq!(s["pid"], dead);

    let u = entry(&v, "unknown");
    assert_eq!(u["state"], "unknown", "{u:#}");
    assert!(u["pid"].is_null(), "{u:#}");

    let o = entry(&v, "orphan");
    assert_eq!(o["state"], "held", "{o:#}");
    assert_eq!(o["pid"], orphan.wrapper);
    assert_eq!(o["holder"], "command", "{o:#}");
    assert_eq!(o["holder_pid"], orphan.cmd, "{o:#}");
    // It says that the wrapper is gone and which process keeps the run.
    let why = o["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason: {o:#}"));
    assert!(
        why.contains(&format!("the wrapper (pid {}) is gone", orphan.wrapper))
            && why.contains(&format!("held by pid {}, the run's command", orphan.cmd)),
        "{o:#}"
    );
    assert_eq!(o["stopped"], false);

    // status only reads: the stale and unknown locks are still there.
    assert!(w.lock("stale").exists() && w.lock("unknown").exists());

    status_json_without_names_lists_every_lock(&w);
}

/// The free lock's entry in `status --json`'s `v`: its name and path, and
/// nothing of a holder.
fn assert_the_free_lock_has_no_holder(w: &World, v: &Value) {
    let free = entry(v, "free");
    assert_eq!(free["state"], "free");
    assert_eq!(free["path"], w.lock("free").display().to_string());
    for k in KEYS.iter().filter(|k| {
        ![
            "name",
            "path",
            "state",
            "stopped",
            "waiters",
            "outside_work",
            "last_run",
            "last_success_unix",
        ]
        .contains(k)
    }) {
        assert!(free[k].is_null(), "free lock has `{k}`: {free:#}");
    }
    assert_eq!(free["last_run"]["outcome"], "exit", "{free:#}");
    assert_eq!(free["stopped"], false);
    assert_eq!(free["waiters"], serde_json::json!([]));
    assert_eq!(free["outside_work"], serde_json::json!([]));
}

/// `status --json` without names: every `*.lock` of the directory and
/// every lock with a journal (`free`, whose file its run removed), sorted,
/// nothing else; and none for a directory that does not exist.
fn status_json_without_names_lists_every_lock(w: &World) {
    // Without names: every *.lock of DIR, sorted, nothing else.
    std::fs::write(w.dir().join("notes.txt"), "x").unwrap();
    let all = status_json(w, &[]);
    let names: Vec<&str> = all["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["acq", "free", "orphan", "run", "stale", "unknown"],
        "{all:#}"
    );
    for l in all["locks"].as_array().unwrap() {
        check_schema(l);
    }

    // A directory that does not exist has no locks.
    let mut c = w.oo_in(&w.dir().join("missing"));
    c.args(["status", "--json"]);
    let out = w.finish(c);
    out.expect(0);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["locks"], Value::Array(vec![]));
}

#[test]
fn status_table_is_tab_separated_when_not_a_terminal() {
    let mut w = World::new();
    let run = w.run_bg("job", &["sleep", "1000"]);
    put(&w.lock("junk"), "junk\n");
    let (dead, start) = dead_process();
    put(&w.lock("old"), record_text(dead, start, &token()));
    // A FIFO among the locks: listed as unknown, never a hang.
    let out = w.finish({
        let mut c = w.program("mkfifo");
        c.arg(w.lock("pipe"));
        c
    });
    out.expect(0);

    let out = w.oo(&["status"]);
    out.expect(0);
    assert!(out.took < Duration::from_secs(5), "{out:#?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0], "LOCK\tSTATE\tPID\tCMDPID\tSINCE\tAGE\tLAST RUN\tSKIPPED\tCOMMAND",
        "{out:#?}"
    );
    assert_eq!(lines.len(), 5, "{out:#?}");
    for l in &lines {
        assert_eq!(l.split('\t').count(), 9, "row {l:?}");
    }
    let row = |name: &str| -> Vec<&str> {
        lines
            .iter()
            .find(|l| l.split('\t').next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}: {out:#?}"))
            .split('\t')
            .collect()
    };
    let job = row("job");
    assert_eq!(job[1], "held");
    assert_eq!(job[2], run.wrapper.to_string());
    assert_eq!(job[3], run.cmd.to_string());
    assert!(is_age(job[5]), "{job:?}");
    assert_eq!(job[6], "-", "no run finished yet: {job:?}");
    assert_eq!(job[7], "0", "no fire skipped: {job:?}");
    assert_eq!(job[8], "sleep 1000");
    assert_eq!(row("junk")[1], "unknown");
    assert_eq!(row("old")[1], "stale");
    assert_eq!(row("old")[2], dead.to_string());
    assert_eq!(row("pipe")[1], "unknown");

    // A command with a tab and a newline does not break the table.
    let odd = w.run_bg("odd", &["sh", "-c", "sleep 1000\n#\tx", "arg"]);
    let out = w.oo(&["status", "odd"]);
    out.expect(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out:#?}");
    let cells: Vec<&str> = lines[1].split('\t').collect();
    assert_eq!(cells.len(), 9, "{out:#?}");
    assert_eq!(cells[2], odd.wrapper.to_string());
}

// ---------------------------------------------------------------------------
// 3. stop ends a live run

fn assert_free(w: &World, lock: &str) {
    assert!(!w.lock(lock).exists(), "the lock file is still there");
    assert_eq!(state_of_lock(w, lock), "free");
    w.oo(&["precheck", lock]).expect(0);
}

#[test]
fn stop_ends_a_live_run() {
    let mut w = World::new();
    let run = w.run_bg("L", &["sleep", "1000"]);
    let out = w.oo(&["stop", "L"]);
    out.expect(0).says(&format!(
        "stopped the run of `L` (pid {}, `sleep 1000`)",
        run.wrapper
    ));
    out.says(&format!("TERM to pid {}", run.wrapper));
    let st = w.wait_exit(run.kid, Duration::from_secs(10));
    assert!(!st.success(), "{st:?}");
    wait_gone(run.cmd);
    assert_free(&w, "L");

    // Stopping again: nothing to stop.
    w.oo(&["stop", "L"]).expect(0).says("not running");
}

#[test]
fn stop_with_signal_int() {
    let mut w = World::new();
    let run = w.run_bg("L", &["sleep", "1000"]);
    let out = w.oo(&["stop", "--signal", "INT", "L"]);
    out.expect(0)
        .says("stopped the run of `L`")
        .says(&format!("INT to pid {}", run.wrapper));
    let st = w.wait_exit(run.kid, Duration::from_secs(10));
    // The command died of INT; onlyone ends the same way (or exits 130).
    assert!(
        st.signal() == Some(2) || st.code() == Some(130),
        "wrapper: {st:?}"
    );
    wait_gone(run.cmd);
    assert_free(&w, "L");
}

#[test]
fn stop_escalates_to_kill_for_a_command_that_ignores_term() {
    let mut w = World::new();
    let run = w.run_bg("L", &["sh", "-c", "trap '' TERM; sleep 1000; :"]);
    // Wait for the trap to be in place: the shell has started its sleep.
    wait_until("the shell's sleep", Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", run.cmd, run.cmd))
            .is_ok_and(|c| !c.trim().is_empty())
    });
    let out = w.oo(&["stop", "--kill-after", "300ms", "L"]);
    out.expect(0)
        .says("stopped the run of `L`")
        .says("KILL was needed");
    assert!(out.took < Duration::from_secs(3), "took {:?}", out.took);
    assert!(
        out.took >= Duration::from_millis(250),
        "took {:?}",
        out.took
    );
    w.wait_exit(run.kid, Duration::from_secs(10));
    wait_gone(run.cmd);
    assert!(w.marked().is_empty(), "a process of the run lives");
    assert_free(&w, "L");
}

// ---------------------------------------------------------------------------
// 4. stop never signals a process whose start time does not match

#[test]
fn stop_never_signals_a_reused_pid() {
    let mut w = World::new();
    let (_, sp) = w.sleeper();
    let wrong = start_of(sp) + 12345;
    for mode in ["run", "lock"] {
        put(
            &w.lock("L"),
            record(sp, wrong, &boot_id(), mode, "sleep 1000"),
        );
        assert_eq!(state_of_lock(&w, "L"), "stale", "{mode}");
        let out = w.oo(&["stop", "L"]);
        out.expect(0).says("not running").says("stale");
        assert_untouched(sp);
        assert!(
            !w.lock("L").exists(),
            "{mode}: the stale lock is still there"
        );
    }
    // The same record under precheck: stale, cleared, not signalled.
    put(
        &w.lock("L"),
        record(sp, wrong, &boot_id(), "run", "sleep 1000"),
    );
    precheck(&w, w.dir(), &["L"], 0, &["stale"]);
    assert_untouched(sp);
    assert!(!w.lock("L").exists());
}

#[test]
fn stop_ends_a_lock_owner_whose_start_time_matches() {
    let mut w = World::new();
    // A hand-written record in lock mode.
    let (k, sp) = w.sleeper();
    put(
        &w.lock("L"),
        record(sp, start_of(sp), &boot_id(), "lock", "sleep 1000"),
    );
    assert_eq!(state_of_lock(&w, "L"), "held");
    w.oo(&["stop", "L"])
        .expect(0)
        .says(&format!("stopped the run of `L` (pid {sp}, `sleep 1000`)"));
    let st = w.wait_exit(k, Duration::from_secs(10));
    assert_eq!(st.signal(), Some(15), "{st:?}");
    assert_free(&w, "L");

    // Taken with acquire --owner.
    let (k, sp) = w.sleeper();
    w.oo(&["acquire", "L", "--owner", &sp.to_string()])
        .expect(0);
    w.oo(&["stop", "L"])
        .expect(0)
        .says(&format!("(pid {sp}, `sleep 1000`)"));
    let st = w.wait_exit(k, Duration::from_secs(10));
    assert_eq!(st.signal(), Some(15), "{st:?}");
    assert_free(&w, "L");
}

// ---------------------------------------------------------------------------
// 5. acquire / release for shell scripts

#[test]
fn acquire_and_release_in_a_shell_script() {
    let w = World::new();
    let out_dir = w.subdir("out");
    let script = r#"
B=$1; D=$2; O=$3
"$B" --dir "$D" acquire L || exit $?
trap '"$B" --dir "$D" release L' EXIT
echo "shell=$$"
"$B" --dir "$D" status --json L > "$O/status.json" || exit 1
bash -c '"$1" --dir "$2" acquire L; echo "second=$?"' other "$B" "$D"
"$B" --dir "$D" precheck -q L; echo "precheck=$?"
"#;
    let lockdir = w.subdir("locks");
    let mut c = w.program("bash");
    c.args(["-c", script, "script", BIN])
        .arg(&lockdir)
        .arg(&out_dir);
    let out = w.finish(c);
    out.expect(0);
    let get = |k: &str| -> String {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}= in {out:#?}"))
            .to_owned()
    };
    let shell: u32 = get("shell").parse().unwrap();
    assert_eq!(get("second"), "75", "{out:#?}");
    assert_eq!(get("precheck"), "75", "{out:#?}");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("status.json")).unwrap())
            .unwrap();
    let l = &v["locks"][0];
    check_schema(l);
    assert_eq!(l["state"], "held", "{v:#}");
    assert_eq!(l["pid"], shell, "the owner is the calling shell: {v:#}");
    assert_eq!(l["mode"], "lock");
    assert_held_message(
        &out.stderr,
        "L",
        &format!("pid {shell}"),
        l["command"].as_str().unwrap(),
    );
    // After the shell exits, the trap released the lock.
    assert!(!lockdir.join("L.lock").exists(), "{out:#?}");
    let mut c = w.oo_in(&lockdir);
    c.args(["status", "--json", "L"]);
    let st = w.finish(c);
    let v: Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(v["locks"][0]["state"], "free");
}

#[test]
fn release_refuses_a_lock_held_by_another_and_force_says_whose() {
    let mut w = World::new();
    let (_, sp) = w.sleeper();
    w.oo(&["acquire", "L", "--owner", &sp.to_string()])
        .expect(0);
    let me = std::process::id();
    w.oo(&["release", "L"])
        .expect(125)
        .says(&format!("held by pid {sp}"))
        .says(&format!("not by pid {me}"))
        .says("--force");
    assert!(w.lock("L").exists());
    assert_eq!(state_of_lock(&w, "L"), "held");
    // Another pid than the owner, named with --owner.
    w.oo(&["release", "L", "--owner", &me.to_string()])
        .expect(125)
        .says(&format!("pid {sp}"));

    w.oo(&["release", "--force", "L"])
        .expect(0)
        .says("removed `L`")
        .says("held")
        .says(&format!("pid {sp} (`sleep 1000`)"));
    assert!(!w.lock("L").exists());
    // --force removes; it signals nobody.
    assert_untouched(sp);
    // --force on a free lock is fine.
    w.oo(&["release", "--force", "L"])
        .expect(0)
        .says("not held");
}

#[test]
fn acquire_takes_over_when_the_owner_dies() {
    let mut w = World::new();
    let (k1, s1) = w.sleeper();
    w.oo(&["acquire", "L", "--owner", &s1.to_string()])
        .expect(0);
    let (_, s2) = w.sleeper();
    w.oo(&["acquire", "L", "--owner", &s2.to_string()])
        .expect(75)
        .says(&format!("pid {s1}"));
    w.kill(k1);
    w.oo(&["acquire", "L", "--owner", &s2.to_string()])
        .expect(0);
    let text = std::fs::read_to_string(w.lock("L")).unwrap();
    assert_eq!(text.lines().next(), Some(s2.to_string().as_str()), "{text}");
    let v = status_json(&w, &["L"]);
    assert_eq!(v["locks"][0]["pid"], s2);
    assert_eq!(v["locks"][0]["state"], "held");
}

#[test]
fn releasing_twice_is_fine() {
    let mut w = World::new();
    let (_, sp) = w.sleeper();
    let owner = sp.to_string();
    w.oo(&["acquire", "L", "--owner", &owner]).expect(0);
    w.oo(&["release", "L", "--owner", &owner]).expect(0).quiet();
    assert!(!w.lock("L").exists());
    w.oo(&["release", "L", "--owner", &owner])
        .expect(0)
        .says("not held");
    w.oo(&["release", "-q", "L", "--owner", &owner])
        .expect(0)
        .quiet();
    assert_untouched(sp);
}

// ---------------------------------------------------------------------------
// 5b. scripts as cron runs them: `acquire --export`, and `release` from the
// owner itself or a worker

impl World {
    /// A shell (`sh` is dash on Debian) with `$OO` and `$D` set.
    fn shell(&self, shell: &str, script: &str) -> Command {
        let mut c = self.program(shell);
        c.arg("-c").arg(script).env("OO", BIN).env("D", self.dir());
        c
    }
}

/// Debian's cron runs `/bin/sh -c 'LINE'` as the leader of a session and
/// process group of its own, and dash forks even a single command: the
/// script does not lead its group. The README's script, run that way, is
/// killed with SIGKILL while its workers work: they carry the token, so the
/// next `acquire`, `run` and `precheck` all skip until the last of them
/// ends, and then the next run takes over. Run to its end, its trap
/// releases the lock.
#[test]
fn the_readme_script_run_by_cron_is_held_by_its_workers_after_kill_9() {
    let mut w = World::new();
    let work = w.subdir("work");
    for worker in ["fetch", "index"] {
        let p = work.join(worker);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho $$ > {worker}.pid.tmp && mv {worker}.pid.tmp {worker}.pid\n\
                 exec sleep 1000\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let script = work.join("sync.sh");
    std::fs::write(&script, readme_block("acquire-script")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cron = |w: &mut World| {
        let mut c = w.program("setsid");
        c.args(["-w", "sh", "-c", "./sync.sh"])
            .current_dir(&work)
            .env("PATH", path_with_onlyone(w.dir()))
            .env("ONLYONE_DIR", w.dir());
        w.spawn(c)
    };
    let pid_of = |name: &str| -> u32 {
        let p = work.join(format!("{name}.pid"));
        wait_until(name, HANG, || p.exists());
        std::fs::read_to_string(&p).unwrap().trim().parse().unwrap()
    };

    let kid = cron(&mut w);
    let (fetch, index) = (pid_of("fetch"), pid_of("index"));
    let rec = std::fs::read_to_string(w.lock("sync")).unwrap();
    let owner: u32 = rec.lines().next().unwrap().parse().unwrap();
    assert!(rec.contains("\nmode=script\n"), "{rec}");
    let st = onlyone::procfs::read_stat(owner).unwrap().unwrap();
    assert_ne!(
        st.pgrp, owner,
        "the shape: the script does not lead its group"
    );
    assert_eq!(st.ppid, w.pid(kid), "the script is cron's sh's child");

    kill9_pid(owner);
    wait_gone(owner);
    for worker in [fetch, index] {
        w.oo(&["acquire", "sync"]).expect(75);
        w.oo(&["run", "sync", "--", "true"])
            .expect(75)
            .says("a leftover process of the run");
        precheck(&w, w.dir(), &["sync"], 75, &[]);
        let v = status_json(&w, &["sync"]);
        assert_eq!(v["locks"][0]["holder"], "leftover", "{v:#}");
        kill9_pid(worker);
        wait_gone(worker);
    }
    w.oo(&["run", "sync", "--", "true"])
        .expect(0)
        .says(&format!("took over the stale lock `sync` from pid {owner}"));

    // Run to its end, the trap releases the lock.
    for f in ["fetch.pid", "index.pid"] {
        std::fs::remove_file(work.join(f)).unwrap();
    }
    let kid = cron(&mut w);
    let workers = [pid_of("fetch"), pid_of("index")];
    assert_eq!(state_of_lock(&w, "sync"), "held");
    for pid in workers {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
    }
    assert!(w.wait_exit(kid, HANG).code().is_some());
    assert!(!w.lock("sync").exists(), "the trap released the lock");
}

/// A script's worker that never execs (a subshell running builtins) has
/// no token in its environment: a shell's exports reach a process only
/// through an exec. The same holds for any worker between its fork and
/// its exec. Run by cron (the script does not lead its group), the script
/// is killed with SIGKILL: the subshell, known by the script's image,
/// keeps the lock held until it ends; then the next run takes over.
#[test]
fn a_subshell_worker_of_a_killed_script_keeps_the_lock() {
    let mut w = World::new();
    let work = w.subdir("work");
    let fifo = work.join("go");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let script = work.join("job.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         vars=$(onlyone acquire job --export) || exit $?\n\
         eval \"$vars\"\n\
         ( echo $(exec sh -c 'echo $PPID') > sub.pid.tmp; mv sub.pid.tmp sub.pid; read x < go ) &\n\
         wait\n\
         onlyone release job\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = w.program("setsid");
    c.args(["-w", "sh", "-c", "./job.sh"])
        .current_dir(&work)
        .env("PATH", path_with_onlyone(w.dir()))
        .env("ONLYONE_DIR", w.dir());
    let kid = w.spawn(c);
    let sub_pid = work.join("sub.pid");
    wait_until("the subshell", HANG, || sub_pid.exists());
    let sub: u32 = std::fs::read_to_string(&sub_pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let rec = std::fs::read_to_string(w.lock("job")).unwrap();
    let owner: u32 = rec.lines().next().unwrap().parse().unwrap();
    assert!(
        rec.contains("\nimage="),
        "the script's image is recorded: {rec}"
    );
    let st = onlyone::procfs::read_stat(sub).unwrap().unwrap();
    assert_eq!(
        st.ppid, owner,
        "the shape: the subshell is the script's fork"
    );
    let env = std::fs::read(format!("/proc/{sub}/environ")).unwrap();
    assert!(
        !String::from_utf8_lossy(&env).contains("ONLYONE_TOKEN="),
        "the shape: the subshell's environment has no token"
    );

    kill9_pid(owner);
    wait_gone(owner);
    w.oo(&["acquire", "job"]).expect(75);
    w.oo(&["run", "job", "--", "true"]).expect(75);
    precheck(&w, w.dir(), &["job"], 75, &[]);
    assert_eq!(state_of_lock(&w, "job"), "held");

    // The subshell ends: the lock is stale, and taken over.
    std::fs::write(&fifo, "x\n").unwrap();
    wait_gone(sub);
    w.oo(&["run", "job", "--", "true"])
        .expect(0)
        .says(&format!("took over the stale lock `job` from pid {owner}"));
    let _ = w.wait_exit(kid, HANG);
}

/// `eval` of nothing succeeds, so both ways of writing it must stop the
/// script when the lock is held: `--export` prints `exit 75` then.
#[test]
fn both_export_forms_stop_a_script_when_the_lock_is_held() {
    let mut w = World::new();
    let (_, sp) = w.sleeper();
    w.oo(&["acquire", "scr", "--owner", &sp.to_string()])
        .expect(0);
    let readme_eval = readme_block("acquire-eval").replace("sync", "scr");
    for shell in ["sh", "bash"] {
        for form in [
            r#"vars=$("$OO" --dir "$D" acquire scr --export) || exit $?; eval "$vars"; echo RAN"#,
            r#"eval "$("$OO" --dir "$D" acquire scr --export)"; echo RAN"#,
            &format!("{readme_eval}\necho RAN"),
        ] {
            let mut c = w.shell(shell, form);
            c.env("PATH", path_with_onlyone(w.dir()))
                .env("ONLYONE_DIR", w.dir());
            let out = w.finish(c);
            assert_eq!(out.code(), 75, "{shell}: {form}: {out:#?}");
            assert!(!out.stdout.contains("RAN"), "{shell}: {form}: {out:#?}");
            if !form.contains(" -q ") {
                assert!(
                    out.stderr.contains(&format!("pid {sp}")),
                    "{shell}: {form}: {out:#?}"
                );
            }
        }
    }
    // Any other failure prints its own code, usage errors included.
    let out = w.finish(w.shell(
        "sh",
        r#"eval "$("$OO" --dir "$D" acquire 'bad name' --export)"; echo RAN"#,
    ));
    assert_eq!(out.code(), 125, "{out:#?}");
    assert!(!out.stdout.contains("RAN"), "{out:#?}");
    let out = w.oo(&["acquire", "scr", "--export", "--no-such-flag"]);
    out.expect(125);
    assert_eq!(out.stdout, "exit 125\n", "{out:#?}");
    assert_untouched(sp);
}

/// On success `--export` prints assignments quoted for sh, with the token
/// the record names, whatever the path holds; the owner is the script
/// itself, also when bash forks a subshell for the substitution
/// (`$(... 2>/dev/null)`), which exits at once.
#[test]
fn export_prints_quoted_assignments_and_the_script_owns_the_lock() {
    let w = World::new();
    let odd = w.subdir("it's a dir $HOME");
    let lock = odd.join("a \"lock\"");
    let out = w.oo(&[
        "acquire",
        lock.to_str().unwrap(),
        "--export",
        "--owner",
        &std::process::id().to_string(),
    ]);
    out.expect(0);
    let token = field(&lock, "token").unwrap();
    assert_eq!(
        out.stdout,
        format!(
            "ONLYONE_LOCK='{}'; ONLYONE_TOKEN='{token}'; export ONLYONE_LOCK ONLYONE_TOKEN\n",
            lock.display().to_string().replace('\'', r"'\''")
        )
    );
    std::fs::remove_file(&lock).unwrap();
    for shell in ["sh", "bash"] {
        for redirect in ["", " 2>/dev/null"] {
            let script = format!(
                r#"vars=$("$OO" --dir "$D" acquire "$0" --export{redirect}) || exit $?
eval "$vars"
printf 'me=%s lock=%s token=%s\n' "$$" "$ONLYONE_LOCK" "$ONLYONE_TOKEN"
head -n1 "$ONLYONE_LOCK""#
            );
            let mut c = w.shell(shell, &script);
            c.arg(&lock);
            let out = w.finish(c);
            out.expect(0);
            let mut lines = out.stdout.lines();
            let first = lines.next().unwrap_or_default();
            let me = first
                .strip_prefix("me=")
                .and_then(|r| r.split(' ').next())
                .unwrap_or_else(|| panic!("{out:#?}"));
            assert!(
                first.contains(&format!("lock={} token=", lock.display())),
                "{shell}{redirect}: {out:#?}"
            );
            assert_eq!(
                first.rsplit("token=").next(),
                field(&lock, "token").as_deref(),
                "{shell}{redirect}: {out:#?}"
            );
            assert_eq!(
                lines.next(),
                Some(me),
                "{shell}{redirect}: the owner: {out:#?}"
            );
            std::fs::remove_file(&lock).unwrap();
        }
    }
}

/// `bash -c '...; onlyone release L'` execs onlyone: the releasing process
/// is the owner itself. A worker that carries the exported token may
/// release too; a process with another token may not.
#[test]
fn release_by_the_owner_itself_or_a_worker_with_the_token() {
    let w = World::new();
    let out = w.finish(w.shell(
        "bash",
        r#""$OO" --dir "$D" acquire tk6 && "$OO" --dir "$D" release tk6"#,
    ));
    out.expect(0).quiet();
    assert!(!w.lock("tk6").exists());

    let out = w.finish(w.shell(
        "sh",
        r#"eval "$("$OO" --dir "$D" acquire tk7 --export)"
sh -c '"$OO" --dir "$D" release tk7' && echo released"#,
    ));
    out.expect(0);
    assert!(out.stdout.ends_with("released\n"), "{out:#?}");
    assert!(!w.lock("tk7").exists());

    // Another lock's token does not open this one.
    let out = w.finish(w.shell(
        "sh",
        r#"eval "$("$OO" --dir "$D" acquire tk8 --export)"
ONLYONE_TOKEN=0123456789abcdef0123456789abcdef sh -c '"$OO" --dir "$D" release tk8'
echo "rc=$?""#,
    ));
    assert!(out.stdout.ends_with("rc=125\n"), "{out:#?}");
    assert!(out.stderr.contains("refusing to release `tk8`"), "{out:#?}");
}

// ---------------------------------------------------------------------------
// 6. "held" messages

#[test]
fn held_messages_name_the_pid_the_command_the_age_and_the_hint() {
    let mut w = World::new();
    let run = w.run_bg("L", &["sleep", "1000"]);
    let who = format!("pid {}", run.wrapper);
    for args in [
        &["run", "L", "--", "true"][..],
        &["acquire", "L"],
        &["precheck", "L"],
    ] {
        let out = w.oo(args);
        out.expect(75);
        assert_held_message(&out.stderr, "L", &who, "sleep 1000");
        assert_eq!(out.stderr.lines().count(), 1, "{out:#?}");
    }
    // A wait that runs out says how long it waited.
    let out = w.oo(&["run", "--wait", "200ms", "L", "--", "true"]);
    out.expect(75).says("(waited ");
    assert_held_message(&out.stderr, "L", &who, "sleep 1000");
    // --held-exit changes the code, not the message.
    let out = w.oo(&["run", "--held-exit", "3", "L", "--", "true"]);
    out.expect(3);
    assert_held_message(&out.stderr, "L", &who, "sleep 1000");

    // -q silences every one of them.
    for args in [
        &["run", "-q", "L", "--", "true"][..],
        &["run", "--quiet", "--wait", "100ms", "L", "--", "true"],
        &["acquire", "-q", "L"],
        &["precheck", "-q", "L"],
    ] {
        w.oo(args).expect(75).quiet();
    }

    // Held by the command after the wrapper was killed: names the command.
    w.kill(run.kid);
    let out = w.oo(&["run", "L", "--", "true"]);
    out.expect(75)
        .says(&format!("pid {}, the command of the run", run.cmd))
        .says(&format!("started by pid {}", run.wrapper))
        .says("(`sleep 1000`, for ")
        .says("; wait for it (--wait) or stop it (onlyone stop L)");
    w.oo(&["run", "-q", "L", "--", "true"]).expect(75).quiet();

    // A lock given as a path: the hint quotes it.
    let other = open_tempdir();
    let path = other.path().join("p.lock");
    let p = path.to_str().unwrap();
    let run = w.run_bg(p, &["sleep", "1000"]);
    let out = w.oo(&["precheck", p]);
    out.expect(75);
    assert_held_message(
        &out.stderr,
        p,
        &format!("pid {}", run.wrapper),
        "sleep 1000",
    );
}

// ---------------------------------------------------------------------------
// 7. --deadline

#[test]
fn acquire_deadline_caps_the_wait() {
    let mut w = World::new();
    let (_, sp) = w.sleeper();
    w.oo(&["acquire", "L", "--owner", &sp.to_string()])
        .expect(0);
    let out = w.oo(&["acquire", "--wait", "10s", "--deadline", "300ms", "L"]);
    out.expect(75).says(&format!("pid {sp}"));
    assert!(out.took < Duration::from_secs(1), "took {:?}", out.took);
    assert!(
        out.took >= Duration::from_millis(250),
        "took {:?}",
        out.took
    );
    let out = w.oo(&[
        "run",
        "--wait",
        "10s",
        "--deadline",
        "300ms",
        "L",
        "--",
        "true",
    ]);
    out.expect(75);
    assert!(out.took < Duration::from_secs(1), "took {:?}", out.took);
}

#[test]
fn stop_deadline_caps_the_grace() {
    let mut w = World::new();
    let run = w.run_bg("L", &["sh", "-c", "trap '' TERM; sleep 1000; :"]);
    wait_until("the shell's sleep", Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", run.cmd, run.cmd))
            .is_ok_and(|c| !c.trim().is_empty())
    });
    let out = w.oo(&["stop", "--deadline", "500ms", "--kill-after", "10s", "L"]);
    assert!(
        out.took < Duration::from_millis(1500),
        "took {:?}",
        out.took
    );
    let code = out.code();
    assert!(code == 0 || code == 125, "{out:#?}");
    assert!(!out.stderr.is_empty(), "{out:#?}");
}

// ---------------------------------------------------------------------------
// 8. names and directories

#[test]
fn a_lock_with_a_slash_is_a_path() {
    let mut w = World::new();
    let other = open_tempdir();
    let path = other.path().join("x.lock");
    let p = path.to_str().unwrap();
    let (_, sp) = w.sleeper();
    w.oo(&["acquire", p, "--owner", &sp.to_string()]).expect(0);
    assert!(path.exists());
    assert_eq!(std::fs::read_dir(w.dir()).unwrap().count(), 0);
    w.oo(&["run", p, "--", "true"]).expect(75).says(p);
    w.oo(&["precheck", p])
        .expect(75)
        .says(&format!("onlyone stop '{p}'"));
    let v = status_json(&w, &[p]);
    assert_eq!(v["locks"][0]["name"], p);
    assert_eq!(v["locks"][0]["path"], p);
    assert_eq!(v["locks"][0]["state"], "held");
    w.oo(&["release", "--force", p]).expect(0);
    assert!(!path.exists());

    // A relative path is relative to the working directory; the command
    // sees it in ONLYONE_LOCK.
    let mut c = w.oo_in(w.dir());
    c.current_dir(other.path())
        .args(["run", "./rel.lock", "--", "sh", "-c"])
        .arg("test -f \"$ONLYONE_LOCK\" && echo \"lock=$ONLYONE_LOCK\"");
    let out = w.finish(c);
    out.expect(0);
    let seen = out.stdout.trim().strip_prefix("lock=").unwrap_or("");
    assert!(seen.ends_with("rel.lock"), "{out:#?}");
    assert!(!other.path().join("rel.lock").exists());
}

#[test]
fn bad_names_are_refused_with_125_and_the_rule() {
    let w = World::new();
    let long = "x".repeat(300);
    let names = [
        "..",
        "...",
        ".hidden",
        "-x",
        "--x",
        long.as_str(),
        "é",
        "aé",
        "a b",
        "a\nb",
        "",
        "a*",
    ];
    for name in names {
        for cmd in ["run", "acquire", "release", "stop", "status"] {
            let mut args = vec![cmd, "--", name];
            if cmd == "run" {
                // `run -- NAME` would make NAME the command.
                if name.starts_with('-') {
                    continue;
                }
                args = vec!["run", name, "--", "touch", "ran"];
            }
            let mut c = w.oo_in(w.dir());
            c.current_dir(w.dir()).args(&args);
            let out = w.finish(c);
            assert_eq!(out.status.code(), Some(125), "{args:?}: {out:#?}");
            assert!(
                out.stderr.contains("is not a lock name")
                    && out.stderr.contains(
                        "A name is an ASCII letter or digit, then up to 63 ASCII letters"
                    ),
                "{args:?}: {out:#?}"
            );
            assert!(!w.dir().join("ran").exists(), "{args:?} ran the command");
        }
    }
    // Without `--`, a leading dash is a usage error: 125 too, never 75.
    for cmd in ["acquire", "release", "stop"] {
        let out = w.oo(&[cmd, "-x"]);
        assert_eq!(out.status.code(), Some(125), "{out:#?}");
    }
    let out = w.oo(&["run", "-x", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{out:#?}");
    // The longest name is fine.
    let max = "y".repeat(64);
    w.oo(&["run", &max, "--", "true"]).expect(0);
    w.oo(&["run", "a..b", "--", "true"]).expect(0);
    // Nothing was created for a bad name: nothing in the directory (but
    // the removal guard the good ones' releases took), and in the state
    // directory only the journals of the two good ones.
    let list = |d: &std::path::Path| {
        let mut left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| d.join(e.file_name()))
            .filter(|n| !n.to_string_lossy().contains(".onlyone-guard."))
            .collect();
        left.sort();
        left
    };
    assert_eq!(list(w.dir()), Vec::<std::path::PathBuf>::new());
    let mut journals = vec![w.journal_of(&w.lock("a..b")), w.journal_of(&w.lock(&max))];
    journals.sort();
    assert_eq!(list(w.state_dir()), journals);
}

#[test]
fn onlyone_dir_is_honoured() {
    let mut w = World::new();
    let envdir = w.dir().join("fromenv");
    let (_, sp) = w.sleeper();
    let with_env = |args: &[&str]| {
        let mut c = w.program(BIN);
        c.env("ONLYONE_DIR", &envdir).args(args);
        w.finish(c)
    };
    with_env(&["acquire", "L", "--owner", &sp.to_string()]).expect(0);
    assert!(
        envdir.join("L.lock").exists(),
        "the lock is not in $ONLYONE_DIR"
    );
    with_env(&["precheck", "L"]).expect(75);
    let out = with_env(&["status", "--json"]);
    out.expect(0);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["dir"], envdir.display().to_string());
    assert_eq!(v["locks"][0]["state"], "held");
    // --dir wins over the environment.
    let mut c = w.program(BIN);
    c.env("ONLYONE_DIR", &envdir)
        .arg("--dir")
        .arg(w.dir())
        .args(["precheck", "L"]);
    w.finish(c).expect(0).quiet();
}

#[test]
fn onlyone_dir_pointing_at_a_file() {
    let w = World::new();
    let file = w.dir().join("afile");
    std::fs::write(&file, "not a dir").unwrap();
    let with_env = |args: &[&str]| {
        let mut c = w.program(BIN);
        c.env("ONLYONE_DIR", &file).current_dir(w.dir()).args(args);
        w.finish(c)
    };
    with_env(&["run", "L", "--", "touch", "ran"])
        .expect(125)
        .says("$ONLYONE_DIR")
        .says("not a directory");
    assert!(!w.dir().join("ran").exists(), "the command ran");
    with_env(&["acquire", "L"])
        .expect(125)
        .says("not a directory");
    with_env(&["precheck", "L"])
        .expect(0)
        .says("not a directory")
        .says("fail open");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a dir");
}

// ---------------------------------------------------------------------------
// 9. what a user runs into: permissions, noise, messages

impl World {
    /// `runuser -u nobody -- onlyone --dir DIR ARGS...`, when this test
    /// runs as root and nobody can run the binary.
    fn as_nobody(&self, dir: &Path, args: &[&str]) -> Option<Out> {
        let runuser = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .filter(|_| is_root())?;
        let mut c = self.program(runuser);
        c.args(["-u", "nobody", "--"])
            .arg(bin_for_others(self.dir()))
            .arg("--dir")
            .arg(dir)
            .args(args);
        let out = self.finish(c);
        if out.stderr.contains("runuser:") {
            return None;
        }
        Some(out)
    }
}

/// As nobody against root's run: `stop` says at once that it may not
/// signal it and who can, instead of waiting out a grace for nothing.
#[test]
fn stop_without_permission_names_who_can_stop_it() {
    let mut w = World::new();
    let run = w.run_bg("L", &["sleep", "1000"]);
    let Some(out) = w.as_nobody(w.dir(), &["stop", "L"]) else {
        eprintln!("skipped: needs root, runuser and a nobody that can run the binary");
        return;
    };
    out.expect(125)
        .says(&format!("pid {} runs as root", run.wrapper))
        .says("you (nobody) may not signal it")
        .says("only root can stop it");
    assert!(out.took < Duration::from_secs(3), "took {:?}", out.took);
    assert_eq!(state_of_lock(&w, "L"), "held");
}

/// `-q` keeps takeovers out of cron's mail, for `acquire` and `run`.
#[test]
fn quiet_silences_takeover_messages() {
    let w = World::new();
    let me = std::process::id().to_string();
    for quiet in [true, false] {
        let (dead, start) = dead_process();
        put(&w.lock("L"), record_text(dead, start, &token()));
        let q = if quiet { "-q" } else { "--wait=0" };
        let out = w.oo(&["acquire", q, "L", "--owner", &me]);
        out.expect(0);
        if quiet {
            out.quiet();
        } else {
            out.says(&format!("took over the stale lock `L` from pid {dead}"));
        }
        std::fs::remove_file(w.lock("L")).unwrap();
    }
    let (dead, start) = dead_process();
    put(&w.lock("R"), record_text(dead, start, &token()));
    w.oo(&["run", "-q", "R", "--", "true"]).expect(0).quiet();
}

/// `--dir` creates the directory itself, never a missing parent.
#[test]
fn dir_creates_only_its_last_component() {
    let w = World::new();
    let deep = w.dir().join("typo").join("locks");
    let out = w.finish({
        let mut c = w.oo_in(&deep);
        c.args(["run", "L", "--", "true"]);
        c
    });
    out.expect(125)
        .says(&format!(
            "its parent `{}` does not exist",
            w.dir().join("typo").display()
        ))
        .says("mkdir -p");
    assert!(!w.dir().join("typo").exists(), "a parent was created");
    let one = w.dir().join("locks");
    let mut c = w.oo_in(&one);
    c.args(["run", "L", "--", "true"]);
    w.finish(c).expect(0);
    assert!(one.is_dir());
}

/// Usage mistakes get the fix: the `--` before the command, a negative
/// duration.
#[test]
fn usage_mistakes_name_the_fix() {
    let w = World::new();
    w.oo(&["run", "L", "sleep", "1"]).expect(125).says(&format!(
        "the command goes after `--`: onlyone --dir {} run L -- sleep 1",
        w.dir().display()
    ));
    w.oo(&["run", "--max-time", "-5", "L", "--", "true"])
        .expect(125)
        .says("`-5` is negative");
    assert!(!w.lock("L").exists());
}

/// `status` on an empty directory says where it looked.
#[test]
fn status_says_where_it_looked() {
    let w = World::new();
    let out = w.oo(&["status"]);
    out.expect(0)
        .says(&format!("no locks in `{}`", w.dir().display()));
}

/// A script killed while its `onlyone acquire` starts leaves onlyone an
/// orphan, adopted by pid 1: init must never become the owner (the lock
/// would be held forever). Found by the chaos harness's cron mode.
#[test]
fn an_orphaned_acquire_never_makes_init_the_owner() {
    let w = World::new();
    let c = w.shell(
        "sh",
        r#"(sleep 0.2; exec "$OO" --dir "$D" acquire L 2> "$D/orphan.err") & exit 0"#,
    );
    w.finish(c).expect(0);
    let err = w.dir().join("orphan.err");
    wait_until("the orphan's answer", HANG, || {
        std::fs::read_to_string(&err).is_ok_and(|s| !s.is_empty()) || w.lock("L").exists()
    });
    if let Some(pid) = field_line1(&w.lock("L")) {
        // Adopted by a subreaper (a service manager) rather than init:
        // that process is alive and is the caller's ancestor; not this
        // test's case.
        assert_ne!(pid, 1, "init became the owner");
        eprintln!("skipped: the orphan was adopted by pid {pid}, a subreaper");
        return;
    }
    let text = std::fs::read_to_string(&err).unwrap();
    assert!(text.contains("onlyone's parent is pid 1"), "{text}");
    assert!(!w.lock("L").exists());
}

/// Line 1 of a lock file: its owner pid.
fn field_line1(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .next()?
        .parse()
        .ok()
}

/// Every start pays for each shared library the binary needs: built where
/// the C library is glibc and the GCC runtime's unwinder archive is there,
/// `onlyone` needs libc alone (build.rs links libgcc_eh in; libgcc_s.so.1
/// cost every `onlyone run` 0.25-0.5 ms, BENCHMARKS.md). A panic still
/// unwinds: the library's and the command's tests that catch one pass.
#[test]
fn the_binary_needs_no_shared_library_but_libc() {
    let archive = Command::new("cc")
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .expect("cc, which links onlyone, runs");
    let archive = PathBuf::from(String::from_utf8_lossy(&archive.stdout).trim());
    if !(cfg!(target_env = "gnu") && archive.is_absolute()) {
        eprintln!("skipped: not a glibc build with libgcc_eh.a ({archive:?})");
        return;
    }
    let out = Command::new("readelf")
        .args(["-d", BIN])
        .output()
        .expect("readelf (binutils, which links onlyone) runs");
    let dynamic = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    assert!(needed.contains(&"libc.so.6"), "{dynamic}");
    assert!(
        !needed.iter().any(|n| n.starts_with("libgcc_s")),
        "onlyone needs libgcc_s: {needed:?}"
    );
}
