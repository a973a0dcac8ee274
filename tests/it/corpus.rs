//! The bad-input corpus (issue 5, part 2): hostile states of the lock file's
//! contents, of the lock path, of its directory and of the environment, each
//! a test with its expected outcome: a clear error that names the path and
//! the fix, the correct verdict, or a safe takeover.
//!
//! In every case, through the library (`LockFile`) and the command line
//! alike:
//!
//! - no panic: a library call never panics, the CLI never exits 101 and is
//!   never killed by a signal;
//! - no hang: each case (its hostile part, after the setup) finishes in under
//!   1 s, measured, and every single call is killed as a hang after 10 s;
//! - no signal to a wrong process: every process a case involves is alive
//!   with no signal pending afterwards, and where `strace` is available the
//!   CLI's `kill`/`pidfd_send_signal` calls are traced: no probe of a pid
//!   outside `1..=pid_max`, no signal at all where none is due. Every CLI
//!   call runs in the process group of a sentinel `sleep`, so a stray
//!   `kill(0, ...)` would show on the sentinel;
//! - nothing written through a symlink: targets are unchanged byte for byte,
//!   dangling targets are not created.
//!
//! Each case works in its own temp dir, and every process it starts carries a
//! marker in its environment: a guard kills every marked process when the
//! case ends, passed or failed. Cases that need root, `runuser`, `unshare`,
//! `mount` or `mknod` print a message and skip without them.

use crate::support;

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use onlyone::{Error, LockFile, Released, StaleReason, UnknownReason, Verdict};
use serde_json::Value;
use support::*;

const MARK: &str = "ONLYONE_CORPUS_MARK";
/// Each case's hostile part must finish within this.
const CASE_LIMIT: Duration = Duration::from_secs(1);
/// A single call that takes longer than this is a hang: it is killed and the
/// case fails.
const HANG: Duration = Duration::from_secs(10);
/// A boot id that is not this boot's.
const OTHER_BOOT: &str = "00000000-1111-2222-3333-444444444444";

// ---------------------------------------------------------------------------
// A case's world: its temp dirs, the processes it started, its mounts

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A case: the lock directory and the processes it started (a
/// [`Sandbox`]), its mounts, and the sentinel whose process group every CLI
/// call joins.
struct Case {
    name: &'static str,
    /// Mount points to unmount.
    mounts: Vec<PathBuf>,
    /// A `sleep` leading its own process group, which every CLI call joins.
    sentinel: u32,
    clock: Option<Instant>,
    /// Markers and traces: kept out of the lock directory.
    aux: tempfile::TempDir,
    /// The lock directory and the processes. Declared last: the directory
    /// is removed after the mounts are undone.
    sb: Sandbox,
}

impl Drop for Case {
    fn drop(&mut self) {
        self.sb.end_processes();
        for m in self.mounts.iter().rev() {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(m)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

derefs_to_sandbox!(Case);

/// Runs `cmd` to its end with its output captured; a hang (over [`HANG`])
/// is killed and fails the case, and so do a panic (101), a death by
/// signal and a call over [`CASE_LIMIT`].
fn finish(cmd: Command, what: &str) -> Out {
    let out = finish_checked(cmd, HANG, what);
    out.within(CASE_LIMIT);
    out
}

/// Runs a library call on a thread: a panic or a hang fails the case.
fn lib<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("library {what}: hung (still running after {HANG:?})")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("library {what}: panicked")
        }
    }
}

fn strace() -> Option<&'static str> {
    ["/usr/bin/strace", "/bin/strace", "/usr/local/bin/strace"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// A signal-related syscall seen by strace.
#[derive(Debug)]
struct Sent {
    call: String,
    target: i64,
    sig: String,
}

fn parse_strace(text: &str) -> Vec<Sent> {
    let mut out = Vec::new();
    for line in text.lines() {
        let rest = line
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start();
        let Some((call, args)) = rest.split_once('(') else {
            continue;
        };
        let args: Vec<&str> = args.split(',').map(str::trim).collect();
        let word = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect()
        };
        let (target, sig) = match call {
            "kill" | "tkill" | "rt_sigqueueinfo" if args.len() >= 2 => {
                (word(args[0]), word(args[1]))
            }
            "tgkill" | "rt_tgsigqueueinfo" if args.len() >= 3 => (word(args[0]), word(args[2])),
            "pidfd_send_signal" if args.len() >= 2 => {
                let t = args[0]
                    .split_once("<pid:")
                    .map(|(_, p)| word(p))
                    .unwrap_or_else(|| "-999999".into());
                (t, word(args[1]))
            }
            _ => continue,
        };
        out.push(Sent {
            call: call.to_owned(),
            target: target.parse().unwrap_or(-999_999),
            sig,
        });
    }
    out
}

/// No probe of a pid outside `1..=pid_max` (`kill(0|-1, 0)` answers for a
/// whole group).
fn assert_no_wild_probe(sent: &[Sent]) {
    let max = i64::from(onlyone::procfs::pid_max());
    for s in sent {
        if s.call == "kill" || s.call == "rt_sigqueueinfo" || s.call == "pidfd_send_signal" {
            assert!(
                s.target >= 1 && s.target <= max,
                "a pid outside 1..={max} was probed or signalled: {s:?}"
            );
        }
    }
}

fn assert_no_signal(sent: &[Sent]) {
    let real: Vec<&Sent> = sent.iter().filter(|s| s.sig != "0").collect();
    assert!(real.is_empty(), "signals were sent: {real:?}");
}

fn assert_not_signalled(sent: &[Sent], pid: u32) {
    let hit: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.sig != "0" && s.target == i64::from(pid))
        .collect();
    assert!(hit.is_empty(), "pid {pid} was signalled: {hit:?}");
}

/// What is at a path, to show it was left exactly as it was: the kind, the
/// inode, the size, the mode and the first 64 KiB.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    kind: String,
    ino: u64,
    len: u64,
    mode: u32,
    mtime: (i64, i64),
    head: Vec<u8>,
}

impl Snapshot {
    fn of(p: &Path) -> Snapshot {
        let m = std::fs::symlink_metadata(p)
            .unwrap_or_else(|e| panic!("{} should exist: {e}", p.display()));
        let mut head = Vec::new();
        if m.file_type().is_file() && m.mode() & 0o444 != 0 {
            if let Ok(f) = std::fs::File::open(p) {
                let _ = f.take(64 * 1024).read_to_end(&mut head);
            }
        } else if m.file_type().is_symlink() {
            head = std::fs::read_link(p)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes();
        }
        Snapshot {
            kind: format!("{:?}", m.file_type()),
            ino: m.ino(),
            len: m.len(),
            mode: m.mode(),
            mtime: (m.mtime(), m.mtime_nsec()),
            head,
        }
    }
}

impl Case {
    fn new(name: &'static str) -> Case {
        let mut sb = Sandbox::new(MARK);
        let mut sentinel = sb.program("sleep");
        sentinel.arg("1000").process_group(0);
        let pid = sb.keep(sentinel);
        wait_until("the sentinel to start", Duration::from_secs(10), || {
            onlyone::procfs::read_stat(pid)
                .ok()
                .flatten()
                .is_some_and(|s| s.pgrp == pid)
        });
        Case {
            name,
            mounts: Vec::new(),
            sentinel: pid,
            clock: None,
            aux: open_tempdir(),
            sb,
        }
    }

    /// A file outside the lock directory that a command may create.
    fn marker(&self, name: &str) -> PathBuf {
        self.aux.path().join(name)
    }

    /// Any program: marked, in the sentinel's process group, with no lock
    /// directory from the environment.
    fn program(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = self.sb.program(prog);
        c.process_group(self.sentinel as i32);
        c
    }

    /// `onlyone --dir DIR ARGS...`, run to its end.
    fn oo_in(&self, dir: &Path, args: &[&str]) -> Out {
        let mut c = self.program(BIN);
        c.arg("--dir").arg(dir).args(args);
        finish(c, &format!("{}: onlyone {args:?}", self.name))
    }

    fn oo(&self, args: &[&str]) -> Out {
        self.oo_in(self.dir(), args)
    }

    /// `onlyone --dir DIR ARGS...` as user nobody; `None` (with a message)
    /// when that cannot be done here.
    fn nobody_in(&self, dir: &Path, args: &[&str]) -> Option<Out> {
        let Some(ru) = runuser() else {
            eprintln!(
                "{}: skipped the part as nobody: needs root and runuser",
                self.name
            );
            return None;
        };
        let mut c = self.program(ru);
        c.args(["-u", "nobody", "--"])
            .arg(bin_for_others(self.dir()))
            .arg("--dir")
            .arg(dir)
            .args(args);
        Some(finish(
            c,
            &format!("{}: as nobody: onlyone {args:?}", self.name),
        ))
    }

    /// True when `runuser -u nobody` can run onlyone here.
    fn nobody_works(&self) -> bool {
        nobody_works(
            self.name,
            &bin_for_others(self.dir()),
            |ru| self.program(ru),
            finish,
        )
    }

    /// `onlyone --dir DIR ARGS...` under strace: its output and the
    /// signals it sent (signal 0 included). `None` without strace.
    fn traced(&self, args: &[&str]) -> Option<(Out, Vec<Sent>)> {
        let st = strace()?;
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let log = self.aux.path().join(format!("strace-{n}.txt"));
        let mut c = self.program(st);
        c.args(["-f", "-qq", "-yy", "-e", "signal=none", "-e"])
            .arg("trace=kill,tkill,tgkill,pidfd_send_signal,rt_sigqueueinfo,rt_tgsigqueueinfo")
            .arg("-o")
            .arg(&log)
            .args(["--", BIN, "--dir"])
            .arg(self.dir())
            .args(args);
        let out = finish(c, &format!("{}: strace onlyone {args:?}", self.name));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("PTRACE") || text.contains("Operation not permitted") {
            eprintln!("{}: strace cannot trace here: {text}", self.name);
            return None;
        }
        Some((out, parse_strace(&text)))
    }

    /// `sleep 1000` (outside the sentinel's group): its pid and start time.
    fn sleeper(&mut self) -> (u32, u64) {
        let pid = self.sb.sleeper();
        (pid, start_of(pid))
    }

    fn status(&self, lock: &str) -> Value {
        let out = self.oo(&["status", "--json", lock]);
        out.expect(0);
        out.json()["locks"][0].clone()
    }

    /// Starts the clock of the hostile part.
    fn go(&mut self) {
        self.clock = Some(Instant::now());
    }

    /// Checks the case finished in time and the sentinel was left alone.
    fn done(&self, outcome: &str) {
        let took = self.clock.expect("go() was called").elapsed();
        eprintln!("case {}: {outcome} ({took:?})", self.name);
        assert!(
            took < CASE_LIMIT,
            "case {} took {took:?}, over {CASE_LIMIT:?}",
            self.name
        );
        assert_untouched(self.sentinel);
    }
}

fn token() -> String {
    onlyone::command::new_token()
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A full record, as onlyone writes it, with the given fields.
fn record(pid: &str, start: &str, boot: &str, extra: &str) -> String {
    format!(
        "{pid}\nstart={start}\nboot={boot}\ntoken={}\nsince={}\nuid=0\nmode=lock\ncmd=corpus\n\
         {extra}onlyone=1\n",
        token(),
        now_unix()
    )
}

fn live_record(pid: u32, start: u64) -> String {
    record(&pid.to_string(), &start.to_string(), &boot_id(), "")
}

fn me() -> u32 {
    std::process::id()
}

// ---------------------------------------------------------------------------
// The three outcomes

/// A record that is not one, written during this boot: the verdict is
/// unknown; every writer refuses it (125) with a message that names the path
/// and the fix (`release --force`); precheck fails open (0); status says
/// unknown and why; the file is left exactly as it was.
fn expect_unknown(c: &mut Case, name: &str, why: &str) {
    let path = c.lock(name);
    let p = path.display().to_string();
    let before = Snapshot::of(&path);
    let ran = c.marker("ran");
    let sentinel = c.sentinel.to_string();
    c.go();

    let lock = LockFile::open(&path).unwrap();
    let l = lock.clone();
    let seen = lib("inspect", move || l.inspect())
        .expect("inspect")
        .expect("the file exists");
    // The fix it names: a file that is not a record is never onlyone's to
    // remove (`rm` it, if it is a stale lock of another tool); a record is
    // (a forced release, which the command says as `release --force`).
    let (lib_fix, fix) = match &seen.verdict {
        Verdict::Unknown(r) => {
            assert!(r.to_string().contains(why), "{why:?} not in {r}");
            match r {
                UnknownReason::Unreadable { .. } => (format!("rm {p}"), format!("rm {p}")),
                _ => (
                    format!("a forced release of `{p}`"),
                    "release --force".to_owned(),
                ),
            }
        }
        v => panic!("{}: expected unknown, got {v:?}", c.name),
    };
    let l = lock.clone();
    let e = lib("try_acquire", move || l.try_acquire().map(|_| ())).unwrap_err();
    assert!(matches!(e, Error::Unknown { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&p) && msg.contains(&lib_fix) && msg.contains(why),
        "{msg}"
    );
    // A release by a pid that is not the owner: refused, whatever the record.
    let l = lock.clone();
    let e = lib("release_owned_by", move || l.release_owned_by(me())).unwrap_err();
    assert!(
        matches!(e, Error::Unknown { .. } | Error::NotOwner { .. }),
        "{e:?}"
    );

    c.oo(&["run", name, "--", "touch", ran.to_str().unwrap()])
        .expect(125)
        .says(&p)
        .says(&fix)
        .says(why);
    assert!(!ran.exists(), "the command ran on an unknown lock");
    c.oo(&["acquire", "--owner", &sentinel, name])
        .expect(125)
        .says(&p)
        .says(why);
    c.oo(&["release", "--owner", &sentinel, name]).expect(125);
    c.oo(&["precheck", name])
        .expect(0)
        .says("cannot be judged")
        .says("fail open");
    let s = c.status(name);
    assert_eq!(s["state"], "unknown", "{s:#}");
    assert!(s["reason"].as_str().unwrap().contains(why), "{s:#}");
    if let Some((out, sent)) = c.traced(&["precheck", name]) {
        out.expect(0);
        assert_no_wild_probe(&sent);
        assert_no_signal(&sent);
    }
    c.done(&format!("unknown, refused ({why})"));
    assert_eq!(Snapshot::of(&path), before, "the file was changed");
}

/// A live owner: the verdict is held by `holder`; every writer refuses (75)
/// naming the pid and the hint; precheck says 75; nobody is signalled and
/// the file is left as it was.
fn expect_held(c: &mut Case, name: &str, holder: u32) {
    let path = c.lock(name);
    let before = Snapshot::of(&path);
    let ran = c.marker("ran");
    let sentinel = c.sentinel.to_string();
    let who = format!("pid {holder}");
    c.go();

    let lock = LockFile::open(&path).unwrap();
    let l = lock.clone();
    let seen = lib("inspect", move || l.inspect())
        .expect("inspect")
        .expect("the file exists");
    match &seen.verdict {
        Verdict::Held(h) => assert_eq!(h.pid(), holder, "{h:?}"),
        v => panic!("{}: expected held, got {v:?}", c.name),
    }
    let l = lock.clone();
    let e = lib("try_acquire", move || l.try_acquire().map(|_| ())).unwrap_err();
    match &e {
        Error::Held(h) => assert_eq!(h.holder.pid(), holder),
        e => panic!("{}: expected held, got {e:?}", c.name),
    }
    assert!(
        e.to_string().contains(&who) && e.to_string().contains("wait for it or stop it"),
        "{e}"
    );
    let l = lock.clone();
    let s = c.sentinel;
    let e = lib("release_owned_by", move || l.release_owned_by(s)).unwrap_err();
    assert!(matches!(e, Error::NotOwner { .. }), "{e:?}");

    c.oo(&["run", name, "--", "touch", ran.to_str().unwrap()])
        .expect(75)
        .says(&who)
        .says(&format!("onlyone stop {name}"));
    assert!(!ran.exists(), "the command ran beside a live owner");
    c.oo(&["acquire", "--owner", &sentinel, name])
        .expect(75)
        .says(&who);
    c.oo(&["precheck", name]).expect(75).says(&who);
    let s = c.status(name);
    assert_eq!(s["state"], "held", "{s:#}");
    assert_eq!(s["holder_pid"], holder, "{s:#}");
    if let Some((out, sent)) = c.traced(&["precheck", name]) {
        out.expect(75);
        assert_no_wild_probe(&sent);
        assert_no_signal(&sent);
    }
    c.done(&format!("held by pid {holder}"));
    assert_eq!(Snapshot::of(&path), before, "the file was changed");
    if holder != 1 {
        assert_untouched(holder);
    }
}

/// A provably stale record: each of the library, `run`, `precheck`,
/// `acquire` and `stop` takes it over or clears it, without a signal to
/// anyone. `write` puts the record in place again before each.
fn expect_stale(c: &mut Case, name: &str, write: &dyn Fn(&Path), is_reason: &dyn Fn(&StaleReason)) {
    let path = c.lock(name);
    let ran = c.marker("ran");
    let sentinel = c.sentinel.to_string();
    write(&path);
    c.go();

    let lock = LockFile::open(&path).unwrap();
    let l = lock.clone();
    let seen = lib("inspect", move || l.inspect())
        .expect("inspect")
        .expect("the file exists");
    match &seen.verdict {
        Verdict::Stale(r) => is_reason(r),
        v => panic!("{}: expected stale, got {v:?}", c.name),
    }
    assert_eq!(c.status(name)["state"], "stale");

    // The library takes it over.
    let l = lock.clone();
    let g = lib("try_acquire", move || l.try_acquire()).expect("a stale lock is taken over");
    assert_eq!(g.record().pid, me());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(&format!("{}\n", me())), "{text}");
    lib("release", move || g.release()).expect("release");
    assert!(!path.exists());

    // `run` takes it over and runs the command.
    write(&path);
    c.oo(&["run", name, "--", "touch", ran.to_str().unwrap()])
        .expect(0);
    assert!(ran.exists(), "the command did not run");
    assert!(!path.exists(), "run left its lock behind");

    // precheck clears it.
    write(&path);
    c.oo(&["precheck", name])
        .expect(0)
        .says("cleared the stale lock");
    assert!(!path.exists());

    // acquire takes it for its owner; release gives it back.
    write(&path);
    c.oo(&["acquire", "--owner", &sentinel, name]).expect(0);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(&format!("{sentinel}\n")), "{text}");
    c.oo(&["release", "--owner", &sentinel, name]).expect(0);
    assert!(!path.exists());

    // stop clears it and signals nobody.
    write(&path);
    match c.traced(&["stop", name]) {
        Some((out, sent)) => {
            out.expect(0).says("not running");
            assert_no_wild_probe(&sent);
            assert_no_signal(&sent);
        }
        None => {
            c.oo(&["stop", name]).expect(0).says("not running");
        }
    }
    assert!(!path.exists());
    c.done("stale, taken over");
}

/// Something at the lock path (or around it) that is no lock file: every
/// command is a clear error naming the path and `fix`, precheck fails open,
/// status says unknown, and nothing is changed.
fn expect_refused_path(c: &mut Case, name: &str, kind: &str, fix: &str) {
    let path = c.lock(name);
    let p = path.display().to_string();
    let before = Snapshot::of(&path);
    let ran = c.marker("ran");
    let sentinel = c.sentinel.to_string();
    c.go();

    let lock = LockFile::open(&path).unwrap();
    let check = |what: &str, e: Error| {
        let msg = e.to_string();
        assert!(
            msg.contains(&p) && msg.contains(kind) && msg.contains(fix),
            "library {what}: {msg}"
        );
    };
    let l = lock.clone();
    check("inspect", lib("inspect", move || l.inspect()).unwrap_err());
    let l = lock.clone();
    check(
        "try_acquire",
        lib("try_acquire", move || l.try_acquire().map(|_| ())).unwrap_err(),
    );
    let l = lock.clone();
    check(
        "release_owned_by",
        lib("release_owned_by", move || l.release_owned_by(me())).unwrap_err(),
    );
    let l = lock.clone();
    check(
        "force_release",
        lib("force_release", move || l.force_release().map(|_| ())).unwrap_err(),
    );

    c.oo(&["run", name, "--", "touch", ran.to_str().unwrap()])
        .expect(125)
        .says(&p)
        .says(kind)
        .says(fix);
    assert!(!ran.exists(), "the command ran");
    c.oo(&["acquire", "--owner", &sentinel, name])
        .expect(125)
        .says(&p)
        .says(kind);
    c.oo(&["release", "--owner", &sentinel, name])
        .expect(125)
        .says(kind);
    c.oo(&["release", "--force", name]).expect(125).says(kind);
    c.oo(&["stop", name]).expect(125).says(kind);
    c.oo(&["precheck", name])
        .expect(0)
        .says(kind)
        .says("fail open");
    let s = c.status(name);
    assert_eq!(s["state"], "unknown", "{s:#}");
    assert!(s["reason"].as_str().unwrap().contains(kind), "{s:#}");
    c.done(&format!("refused: {kind}"));
    assert_eq!(Snapshot::of(&path), before, "the lock path was changed");
}

// ---------------------------------------------------------------------------
// Lock file contents

/// `pid`, which is not a pid, as a bare pid file (L) and in a full record
/// (F): both unknown, for the reason `why`.
fn expect_bad_pid(c: &mut Case, pid: &str, why: &str) {
    put(&c.lock("L"), format!("{pid}\n"));
    expect_unknown(c, "L", why);
    put(&c.lock("F"), record(pid, "1", &boot_id(), ""));
    expect_unknown(c, "F", why);
}

#[test]
fn contents_empty() {
    let mut c = Case::new("contents_empty");
    put(&c.lock("L"), "");
    expect_unknown(&mut c, "L", "the file is empty");
}

#[test]
fn contents_whitespace() {
    let mut c = Case::new("contents_whitespace");
    put(&c.lock("L"), " \t \n  \n\t\n");
    expect_unknown(&mut c, "L", "line 1 (the pid) is missing");
}

#[test]
fn contents_pid_0() {
    let mut c = Case::new("contents_pid_0");
    expect_bad_pid(&mut c, "0", "not a valid pid");
}

#[test]
fn contents_pid_minus_1() {
    let mut c = Case::new("contents_pid_minus_1");
    expect_bad_pid(&mut c, "-1", "not a decimal number");
}

/// A bare pid file naming pid 1 (another tool's): pid 1 is alive, so the
/// lock is held; pid 1 is probed with signal 0 only.
#[test]
fn contents_pid_1_bare_is_held() {
    let mut c = Case::new("contents_pid_1_bare_is_held");
    put(&c.lock("L"), "1\n");
    expect_held(&mut c, "L", 1);
}

#[test]
fn contents_pid_max_plus_1() {
    let mut c = Case::new("contents_pid_max_plus_1");
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    expect_bad_pid(&mut c, &(max + 1).to_string(), "not a valid pid");
}

#[test]
fn contents_pid_2_pow_64() {
    let mut c = Case::new("contents_pid_2_pow_64");
    expect_bad_pid(&mut c, "18446744073709551616", "out of range");
}

#[test]
fn contents_negative_start_time() {
    let mut c = Case::new("contents_negative_start_time");
    let (sp, _) = c.sleeper();
    put(&c.lock("L"), record(&sp.to_string(), "-5", &boot_id(), ""));
    expect_unknown(&mut c, "L", "`start` is not a decimal number");
    assert_untouched(sp);
}

#[test]
fn contents_nul_bytes() {
    let mut c = Case::new("contents_nul_bytes");
    let (sp, st) = c.sleeper();
    let mut bytes = live_record(sp, st).into_bytes();
    bytes.insert(3, 0);
    put(&c.lock("L"), &bytes);
    expect_unknown(&mut c, "L", "NUL bytes");
    assert_untouched(sp);
}

#[test]
fn contents_invalid_utf8() {
    let mut c = Case::new("contents_invalid_utf8");
    let (sp, st) = c.sleeper();
    let mut bytes = live_record(sp, st).into_bytes();
    let at = bytes.len() - 12;
    bytes.splice(at..at, [0xff, 0xfe, 0xc3]);
    put(&c.lock("L"), &bytes);
    expect_unknown(&mut c, "L", "not valid UTF-8");
    assert_untouched(sp);
}

/// 100 MB (sparse): read only as far as a record may go, in bounded memory
/// (the CLI runs under a 32 MB address-space limit) and in time.
#[test]
fn contents_100_mb() {
    let mut c = Case::new("contents_100_mb");
    let path = c.lock("L");
    let (sp, st) = c.sleeper();
    std::fs::write(&path, live_record(sp, st)).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(100 << 20).unwrap();
    drop(f);
    expect_unknown(&mut c, "L", "larger than 8192 bytes");
    // Bounded memory: the CLI under `ulimit -v 32768` (32 MB).
    let limited = |args: &[&str]| {
        let mut cmd = c.program("sh");
        cmd.args(["-c", "ulimit -v 32768 && exec \"$@\"", "sh", BIN, "--dir"])
            .arg(c.dir())
            .args(args);
        finish(cmd, &format!("ulimit -v 32768: onlyone {args:?}"))
    };
    limited(&["precheck", "L"])
        .expect(0)
        .says("larger than 8192 bytes");
    limited(&["run", "L", "--", "true"])
        .expect(125)
        .says("larger than 8192 bytes");
    let out = limited(&["status", "--json", "--deadline", "5s", "L"]);
    out.expect(0);
    assert_eq!(out.json()["locks"][0]["state"], "unknown", "{out:#?}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 100 << 20);
    assert_untouched(sp);
}

/// A record cut short at a line boundary, before `boot`: not a record.
#[test]
fn contents_truncated_record() {
    let mut c = Case::new("contents_truncated_record");
    let (sp, st) = c.sleeper();
    put(&c.lock("L"), format!("{sp}\nstart={st}\n"));
    expect_unknown(&mut c, "L", "the required key `boot` is missing");
    // Cut in the middle of a line.
    put(&c.lock("M"), format!("{sp}\nstart={st}\nbo"));
    expect_unknown(&mut c, "M", "line 3 is not `key=value`");
    // Cut between cmdpid and cmdstart.
    let text = live_record(sp, st).replace("onlyone=1\n", "cmdpid=5\n");
    put(&c.lock("N"), text);
    expect_unknown(&mut c, "N", "`cmdpid` and `cmdstart` must appear together");
    assert_untouched(sp);
}

/// A record cut short inside the boot id, naming a live owner with its
/// right start time, written during this boot. The boot id is not a boot id
/// (a UUID has 36 characters), so this is a garbage record from this boot:
/// unknown, or held (the owner is alive), but never stale.
#[test]
fn contents_truncated_inside_the_boot_id_with_a_live_owner() {
    let mut c = Case::new("contents_truncated_inside_the_boot_id");
    let (sp, st) = c.sleeper();
    let boot = boot_id();
    put(
        &c.lock("L"),
        format!("{sp}\nstart={st}\nboot={}", &boot[..11]),
    );
    let lock = LockFile::open(c.lock("L")).unwrap();
    c.go();
    let seen = lib("inspect", move || lock.inspect()).unwrap().unwrap();
    assert!(
        !matches!(seen.verdict, Verdict::Stale(_)),
        "a live owner's (torn) record was judged stale: {:?}",
        seen.verdict
    );
    c.oo(&["precheck", "L"]);
    assert!(c.lock("L").exists(), "precheck removed a live owner's lock");
    // Refused either way: 75 (held) or 125 (unknown), never a takeover.
    let out = c.oo(&["run", "L", "--", "true"]);
    assert!(matches!(out.code(), 75 | 125), "{out:#?}");
    assert!(c.lock("L").exists(), "run took a live owner's lock over");
    c.done("not stale");
    assert_untouched(sp);
}

/// A garbage record whose file predates this boot: provably stale (its
/// writer died with the previous boot), so it is taken over.
#[test]
fn contents_torn_record_from_before_this_boot_is_stale() {
    let mut c = Case::new("contents_torn_record_from_before_boot");
    let (sp, st) = c.sleeper();
    let torn = format!("{sp}\nstart={st}\nbo");
    let write = move |p: &Path| {
        put(p, &torn);
        let f = std::fs::File::options().write(true).open(p).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(86_400))
            .unwrap();
    };
    expect_stale(&mut c, "L", &write, &|r| {
        assert!(
            matches!(r, StaleReason::UnreadableFromPreviousBoot { .. }),
            "{r:?}"
        )
    });
    assert_untouched(sp);
}

#[test]
fn contents_duplicate_keys() {
    let mut c = Case::new("contents_duplicate_keys");
    let (sp, st) = c.sleeper();
    let text = live_record(sp, st).replace("onlyone=1\n", &format!("start={st}\nonlyone=1\n"));
    put(&c.lock("L"), text);
    expect_unknown(&mut c, "L", "the key `start` appears twice");
    // A duplicate of an unknown key is still a duplicate.
    let text = live_record(sp, st).replace("onlyone=1\n", "x=1\nx=1\nonlyone=1\n");
    put(&c.lock("M"), text);
    expect_unknown(&mut c, "M", "the key `x` appears twice");
    assert_untouched(sp);
}

/// `onlyone=99` with a live owner: what this version can check proves it
/// alive, so it is held.
#[test]
fn contents_future_format_with_a_live_owner_is_held() {
    let mut c = Case::new("contents_future_format_live");
    let (sp, st) = c.sleeper();
    let text = live_record(sp, st).replace("onlyone=1\n", "newkey=whatever\nonlyone=99\n");
    put(&c.lock("L"), text);
    expect_held(&mut c, "L", sp);
}

/// `onlyone=99` with a dead owner: the newer format may name processes this
/// version cannot find, so it is unknown and refused, and the message says
/// to use the newer onlyone.
#[test]
fn contents_future_format_with_a_dead_owner_is_unknown() {
    let mut c = Case::new("contents_future_format_dead");
    let (dead, start) = dead_process();
    let text = record(&dead.to_string(), &start.to_string(), &boot_id(), "")
        .replace("onlyone=1\n", "onlyone=99\n");
    put(&c.lock("L"), text);
    expect_unknown(&mut c, "L", "use the newer onlyone");
    let lock = LockFile::open(c.lock("L")).unwrap();
    let seen = lock.inspect().unwrap().unwrap();
    assert_eq!(
        seen.verdict,
        Verdict::Unknown(UnknownReason::NewerFormat { version: 99 })
    );
}

/// CRLF line endings (a record edited on another system) parse: a live
/// owner is held, a dead one is stale.
#[test]
fn contents_crlf_line_endings() {
    let mut c = Case::new("contents_crlf_line_endings");
    let (sp, st) = c.sleeper();
    put(&c.lock("L"), live_record(sp, st).replace('\n', "\r\n"));
    expect_held(&mut c, "L", sp);

    let mut c = Case::new("contents_crlf_line_endings_dead");
    let (dead, start) = dead_process();
    let text = record(&dead.to_string(), &start.to_string(), &boot_id(), "").replace('\n', "\r\n");
    expect_stale(&mut c, "D", &move |p| put(p, &text), &|r| {
        assert_eq!(
            r,
            &StaleReason::Exited {
                pid: dead,
                run: false
            }
        )
    });
}

/// A record naming this very process, with its start time: held.
#[test]
fn contents_our_own_pid_is_held() {
    let mut c = Case::new("contents_our_own_pid_is_held");
    put(&c.lock("L"), live_record(me(), start_of(me())));
    expect_held(&mut c, "L", me());
}

/// A record naming pid 1 with a start time that is not pid 1's: pid 1 is
/// another process than the owner, so the lock is stale; pid 1 is never
/// signalled.
#[test]
fn contents_pid_1_with_a_wrong_start_time_is_stale() {
    let mut c = Case::new("contents_pid_1_with_a_wrong_start_time");
    let wrong = (start_of(1) + 123_456).to_string();
    let write = move |p: &Path| put(p, record("1", &wrong, &boot_id(), ""));
    expect_stale(&mut c, "L", &write, &|r| {
        assert!(matches!(r, StaleReason::Reused { pid: 1, .. }), "{r:?}")
    });
    // Once more under strace: precheck and run never signal pid 1.
    write(&c.lock("L"));
    if let Some((out, sent)) = c.traced(&["precheck", "L"]) {
        out.expect(0);
        assert_not_signalled(&sent, 1);
        assert_no_signal(&sent);
    }
    write(&c.lock("L"));
    if let Some((out, sent)) = c.traced(&["run", "L", "--", "true"]) {
        out.expect(0);
        assert_not_signalled(&sent, 1);
    }
}

// ---------------------------------------------------------------------------
// Hand-crafted records: another boot, a zombie, EPERM, another PID namespace

/// A live pid recorded under another boot id: the owner died with that
/// boot; the live process that has the pid now is never signalled.
#[test]
fn record_of_another_boot_is_stale() {
    let mut c = Case::new("record_of_another_boot");
    let (sp, st) = c.sleeper();
    let write = move |p: &Path| put(p, record(&sp.to_string(), &st.to_string(), OTHER_BOOT, ""));
    expect_stale(&mut c, "L", &write, &|r| {
        assert_eq!(r, &StaleReason::PreviousBoot)
    });
    assert_untouched(sp);
}

/// The owner is a zombie (exited, not yet reaped by its parent): stale.
#[test]
fn record_of_a_zombie_owner_is_stale() {
    let mut c = Case::new("record_of_a_zombie_owner");
    let (zp, zs) = c.sleeper();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(zp as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_until("the zombie", Duration::from_secs(10), || {
        state_of(zp) == Some('Z')
    });
    let write = move |p: &Path| put(p, live_record(zp, zs));
    expect_stale(&mut c, "L", &write, &|r| {
        assert_eq!(
            r,
            &StaleReason::Zombie {
                pid: zp,
                run: false
            }
        )
    });
    assert_eq!(state_of(zp), Some('Z'));
}

/// A root-owned live owner seen by user nobody: `kill(pid, 0)` answers
/// EPERM, which means alive: held. Once with `/proc` readable, once with
/// `/proc` mounted `hidepid=2` (only the EPERM of kill is left as proof).
#[test]
fn record_of_a_root_owner_seen_by_nobody_is_held() {
    let mut c = Case::new("record_of_a_root_owner_seen_by_nobody");
    if !c.nobody_works() {
        return;
    }
    let (sp, _) = c.sleeper();
    c.oo(&["acquire", "--owner", &sp.to_string(), "L"])
        .expect(0);
    let before = Snapshot::of(&c.lock("L"));
    c.go();
    let who = format!("pid {sp}");
    let dir = c.dir().to_path_buf();
    c.nobody_in(&dir, &["precheck", "L"])
        .unwrap()
        .expect(75)
        .says(&who);
    let out = c.nobody_in(&dir, &["status", "--json", "L"]).unwrap();
    out.expect(0);
    assert_eq!(out.json()["locks"][0]["state"], "held", "{out:#?}");
    assert_eq!(out.json()["locks"][0]["holder_pid"], sp, "{out:#?}");
    // The directory is root's and not writable by nobody, but the lock is
    // held: a skip, never a 0 (and not the EACCES of the write it never
    // needed to make).
    c.nobody_in(&dir, &["run", "L", "--", "true"])
        .unwrap()
        .expect(75)
        .says(&who);

    // hidepid=2: nobody cannot see the owner in /proc; kill(pid, 0) says
    // EPERM.
    let script = "mount -t proc -o hidepid=2 proc /proc || exit 200; \
                  exec \"$0\" -u nobody -- \"$@\"";
    let mut cmd = c.program("unshare");
    cmd.args(["-m", "--", "sh", "-c", script, runuser().unwrap()])
        .arg(bin_for_others(c.dir()))
        .args(["--dir"])
        .arg(&dir)
        .args(["precheck", "L"]);
    let out = finish(cmd, "precheck as nobody under hidepid=2");
    if out.code() == 200 || out.stderr.contains("unshare failed") {
        eprintln!("{}: skipped the hidepid part: {}", c.name, out.stderr);
    } else {
        out.expect(75).says(&who);
    }
    c.done("held (EPERM is alive)");
    assert_eq!(Snapshot::of(&c.lock("L")), before);
    assert_untouched(sp);
}

/// A real process in a new PID namespace (pid 1 in there) and a record with
/// its inner pid and its namespace: its pid means nothing here, so the lock
/// is unknown and refused, with a message naming the namespace; pid 1 of the
/// host (and the owner) are never signalled.
#[test]
fn record_from_another_pid_namespace_is_unknown() {
    let mut c = Case::new("record_from_another_pid_namespace");
    if !is_root() || which("unshare").is_none() {
        eprintln!("{}: skipped: needs root and unshare", c.name);
        return;
    }
    let mut cmd = c.program("unshare");
    cmd.args(["-p", "-f", "--kill-child", "--mount-proc", "sleep", "1000"]);
    let un = c.keep(cmd);
    // The namespace's pid 1: unshare's child, once it has exec'd sleep.
    let mut inner = None;
    let start = Instant::now();
    while inner.is_none() && start.elapsed() < Duration::from_secs(10) {
        let kids =
            std::fs::read_to_string(format!("/proc/{un}/task/{un}/children")).unwrap_or_default();
        inner = kids
            .split_whitespace()
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep"))
            });
        if inner.is_none() {
            if state_of(un).is_none_or(|s| s == 'Z') {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let Some(outer) = inner else {
        eprintln!("{}: skipped: unshare -p did not start a namespace", c.name);
        return;
    };
    c.foreign.push(outer);
    let ns = std::fs::metadata(format!("/proc/{outer}/ns/pid"))
        .unwrap()
        .ino();
    assert_ne!(Some(ns), onlyone::procfs::own_pidns());
    let st = start_of(outer);
    put(
        &c.lock("L"),
        record("1", &st.to_string(), &boot_id(), &format!("pidns={ns}\n")),
    );
    expect_unknown(&mut c, "L", "another PID namespace");
    let lock = LockFile::open(c.lock("L")).unwrap();
    match lock.inspect().unwrap().unwrap().verdict {
        Verdict::Unknown(UnknownReason::OtherPidNamespace { theirs, .. }) => {
            assert_eq!(theirs, ns)
        }
        v => panic!("{v:?}"),
    }
    c.oo(&["run", "L", "--", "true"])
        .expect(125)
        .says(&format!("pid:[{ns}]"));
    if let Some((out, sent)) = c.traced(&["stop", "--deadline", "500ms", "L"]) {
        out.expect(125).says("another PID namespace");
        assert_not_signalled(&sent, 1);
        assert_not_signalled(&sent, outer);
        assert_no_signal(&sent);
    }
    assert_untouched(outer);
    assert!(c.lock("L").exists());
}

fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.exists())
}

// ---------------------------------------------------------------------------
// The lock path

/// Restores a file if a test managed to change it.
struct Restore {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if std::fs::read(&self.path).ok().as_deref() != Some(self.bytes.as_slice()) {
            let _ = std::fs::write(&self.path, &self.bytes);
        }
    }
}

#[test]
fn path_symlink_to_etc_passwd() {
    let mut c = Case::new("path_symlink_to_etc_passwd");
    let passwd = Path::new("/etc/passwd");
    let before = std::fs::read(passwd).unwrap();
    let meta = std::fs::metadata(passwd).unwrap();
    let _restore = Restore {
        path: passwd.into(),
        bytes: before.clone(),
    };
    std::os::unix::fs::symlink(passwd, c.lock("L")).unwrap();
    expect_refused_path(
        &mut c,
        "L",
        "symbolic link",
        "remove the link or use another lock path",
    );
    assert_eq!(
        std::fs::read(passwd).unwrap(),
        before,
        "/etc/passwd changed"
    );
    let after = std::fs::metadata(passwd).unwrap();
    assert_eq!(
        (after.ino(), after.mode(), after.uid(), after.mtime()),
        (meta.ino(), meta.mode(), meta.uid(), meta.mtime())
    );
    assert_eq!(std::fs::read_link(c.lock("L")).unwrap(), passwd);
}

#[test]
fn path_dangling_symlink() {
    let mut c = Case::new("path_dangling_symlink");
    let target = c.dir().join("nowhere.lock");
    std::os::unix::fs::symlink(&target, c.lock("L")).unwrap();
    expect_refused_path(
        &mut c,
        "L",
        "symbolic link",
        "remove the link or use another lock path",
    );
    assert!(
        std::fs::symlink_metadata(&target).is_err(),
        "the dangling target was created"
    );
}

#[test]
fn path_symlink_to_dev_null() {
    let mut c = Case::new("path_symlink_to_dev_null");
    let before = std::fs::metadata("/dev/null").unwrap();
    std::os::unix::fs::symlink("/dev/null", c.lock("L")).unwrap();
    expect_refused_path(
        &mut c,
        "L",
        "symbolic link",
        "remove the link or use another lock path",
    );
    let after = std::fs::metadata("/dev/null").unwrap();
    assert!(after.file_type().is_char_device());
    assert_eq!((after.rdev(), after.mode()), (before.rdev(), before.mode()));
}

#[test]
fn path_directory() {
    let mut c = Case::new("path_directory");
    std::fs::create_dir(c.lock("L")).unwrap();
    expect_refused_path(
        &mut c,
        "L",
        "is a directory, not a regular file",
        "remove it or use another lock path",
    );
    assert_eq!(std::fs::read_dir(c.lock("L")).unwrap().count(), 0);
}

#[test]
fn path_fifo() {
    let mut c = Case::new("path_fifo");
    let out = finish(
        {
            let mut m = c.program("mkfifo");
            m.arg(c.lock("L"));
            m
        },
        "mkfifo",
    );
    out.expect(0);
    expect_refused_path(
        &mut c,
        "L",
        "is a FIFO, not a regular file",
        "remove it or use another lock path",
    );
}

#[test]
fn path_socket() {
    let mut c = Case::new("path_socket");
    let listener = std::os::unix::net::UnixListener::bind(c.lock("L")).unwrap();
    listener.set_nonblocking(true).unwrap();
    expect_refused_path(
        &mut c,
        "L",
        "is a socket, not a regular file",
        "remove it or use another lock path",
    );
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "someone connected to the socket"
    );
}

/// A character device (`mknod c 1 3`, a /dev/null) at the lock path.
#[test]
fn path_char_device() {
    let mut c = Case::new("path_char_device");
    if !is_root() {
        eprintln!("{}: skipped: mknod needs root", c.name);
        return;
    }
    let mut m = c.program("mknod");
    m.arg(c.lock("L")).args(["c", "1", "3"]);
    if finish(m, "mknod").code() != 0 {
        eprintln!("{}: skipped: mknod failed", c.name);
        return;
    }
    expect_refused_path(
        &mut c,
        "L",
        "is a character device, not a regular file",
        "remove it or use another lock path",
    );
    assert!(
        std::fs::symlink_metadata(c.lock("L"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

/// A live record with mode 000: root still reads it, so it is held.
#[test]
fn path_mode_000_read_as_root() {
    let mut c = Case::new("path_mode_000_read_as_root");
    if !is_root() {
        eprintln!("{}: skipped: needs root", c.name);
        return;
    }
    let (sp, st) = c.sleeper();
    put(&c.lock("L"), live_record(sp, st));
    std::fs::set_permissions(c.lock("L"), std::fs::Permissions::from_mode(0o000)).unwrap();
    expect_held(&mut c, "L", sp);
}

/// As nobody: a 000 lock file in a directory nobody can enter: every
/// command says what it cannot open; precheck fails open.
#[test]
fn path_mode_000_as_nobody_in_a_dir_nobody_can_enter() {
    let mut c = Case::new("path_mode_000_as_nobody_in_a_closed_dir");
    if !c.nobody_works() {
        return;
    }
    let (sp, st) = c.sleeper();
    let closed = c.subdir("closed");
    put(&closed.join("L.lock"), live_record(sp, st));
    std::fs::set_permissions(
        closed.join("L.lock"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let before = Snapshot::of(&closed.join("L.lock"));
    let d = closed.display().to_string();
    c.go();
    c.nobody_in(&closed, &["precheck", "L"])
        .unwrap()
        .expect(0)
        .says("Permission denied")
        .says(&d)
        .says("fail open");
    c.nobody_in(&closed, &["run", "L", "--", "true"])
        .unwrap()
        .expect(125)
        .says("Permission denied")
        .says(&d);
    c.nobody_in(&closed, &["acquire", "L"])
        .unwrap()
        .expect(125)
        .says("Permission denied");
    c.nobody_in(&closed, &["release", "L"])
        .unwrap()
        .expect(125)
        .says("Permission denied");
    let out = c.nobody_in(&closed, &["status", "--json", "L"]).unwrap();
    out.expect(0);
    let s = &out.json()["locks"][0];
    assert_eq!(s["state"], "unknown", "{out:#?}");
    assert!(
        s["reason"].as_str().unwrap().contains("Permission denied"),
        "{out:#?}"
    );
    c.nobody_in(&closed, &["status"])
        .unwrap()
        .expect(125)
        .says(&d);
    c.done("clear errors as nobody; precheck fails open");
    assert_eq!(Snapshot::of(&closed.join("L.lock")), before);
    // Root still sees the live owner.
    c.oo_in(&closed, &["precheck", "L"]).expect(75);
    assert_untouched(sp);
}

/// As nobody: root's 000 lock file in a sticky world-writable directory:
/// the record cannot be read and is from this boot, so it is unknown and
/// refused; precheck fails open.
#[test]
fn path_mode_000_as_nobody_in_a_sticky_dir() {
    let mut c = Case::new("path_mode_000_as_nobody_in_a_sticky_dir");
    if !c.nobody_works() {
        return;
    }
    let (sp, st) = c.sleeper();
    let sticky = c.subdir("sticky");
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    put(&sticky.join("L.lock"), live_record(sp, st));
    std::fs::set_permissions(
        sticky.join("L.lock"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    let before = Snapshot::of(&sticky.join("L.lock"));
    let p = sticky.join("L.lock").display().to_string();
    c.go();
    c.nobody_in(&sticky, &["precheck", "L"])
        .unwrap()
        .expect(0)
        .says("cannot be judged")
        .says("ermission denied");
    c.nobody_in(&sticky, &["run", "L", "--", "true"])
        .unwrap()
        .expect(125)
        .says(&p)
        .says("it belongs to root")
        .says("root can judge it");
    c.nobody_in(&sticky, &["acquire", "L"])
        .unwrap()
        .expect(125)
        .says(&p);
    let out = c.nobody_in(&sticky, &["status", "--json", "L"]).unwrap();
    out.expect(0);
    assert_eq!(out.json()["locks"][0]["state"], "unknown", "{out:#?}");
    c.done("unknown as nobody (permission denied), refused");
    assert_eq!(Snapshot::of(&sticky.join("L.lock")), before);
    let left: Vec<_> = std::fs::read_dir(&sticky)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 1, "temp files were left: {left:?}");
    assert_untouched(sp);
}

// ---------------------------------------------------------------------------
// The lock directory

/// As nobody, a root-owned 0755 directory: writers fail with a clear error
/// naming the directory; readers work; nothing is created.
#[test]
fn dir_unwritable() {
    let mut c = Case::new("dir_unwritable");
    if !c.nobody_works() {
        return;
    }
    let ro = c.subdir("ro");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = ro.display().to_string();
    c.go();
    c.nobody_in(&ro, &["run", "L", "--", "true"])
        .unwrap()
        .expect(125)
        .says(&d)
        .says("is it writable by you?");
    c.nobody_in(&ro, &["acquire", "L"])
        .unwrap()
        .expect(125)
        .says(&d)
        .says("is it writable by you?");
    c.nobody_in(&ro, &["precheck", "L"]).unwrap().expect(0);
    // Nothing of `L` anywhere: no such lock, as `history` says.
    let out = c.nobody_in(&ro, &["status", "--json", "L"]).unwrap();
    out.expect(125).says("L: no such lock: no lock file");
    c.nobody_in(&ro, &["reap", "L"]).unwrap().expect(0);
    c.done("writers refused naming the directory");
    assert_eq!(
        std::fs::read_dir(&ro).unwrap().count(),
        0,
        "files were created"
    );
}

/// A world-writable directory without the sticky bit: anyone could replace
/// the record, so every writer refuses it, naming it and the fix; readers
/// still work; with the sticky bit it is fine.
#[test]
fn dir_world_writable_without_the_sticky_bit() {
    let mut c = Case::new("dir_world_writable_without_sticky");
    let ww = c.subdir("ww");
    std::fs::set_permissions(&ww, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (sp, st) = c.sleeper();
    put(&ww.join("held.lock"), live_record(sp, st));
    let (dead, dstart) = dead_process();
    put(&ww.join("stale.lock"), live_record(dead, dstart));
    let d = ww.display().to_string();
    let sentinel = c.sentinel.to_string();
    c.go();

    let l = LockFile::open(ww.join("free.lock")).unwrap();
    let e = lib("try_acquire", move || l.try_acquire().map(|_| ())).unwrap_err();
    assert!(matches!(e, Error::UnsafeDir { .. }), "{e:?}");
    assert!(e.to_string().contains(&d), "{e}");
    let l = LockFile::open(ww.join("held.lock")).unwrap();
    let seen = lib("inspect", move || l.inspect()).unwrap().unwrap();
    assert!(matches!(seen.verdict, Verdict::Held(_)));

    for args in [
        &["run", "free", "--", "true"][..],
        &["acquire", "--owner", &sentinel, "free"],
        &["release", "--owner", &sentinel, "held"],
        &["release", "--force", "held"],
    ] {
        c.oo_in(&ww, args)
            .expect(125)
            .says(&d)
            .says("without the sticky bit")
            .says("fix its owner or mode, or use another directory");
    }
    c.oo_in(&ww, &["precheck", "held"]).expect(75);
    // A stale lock is not cleared in an unsafe directory, and the fire runs.
    c.oo_in(&ww, &["precheck", "stale"]).expect(0);
    assert!(ww.join("stale.lock").exists());
    let out = c.oo_in(&ww, &["status", "--json"]);
    out.expect(0);
    assert_eq!(out.json()["locks"].as_array().unwrap().len(), 2, "{out:#?}");
    // The sticky bit makes it safe.
    std::fs::set_permissions(&ww, std::fs::Permissions::from_mode(0o1777)).unwrap();
    c.oo_in(&ww, &["run", "free", "--", "true"]).expect(0);
    c.done("writers refused naming the directory; readers work");
    assert!(ww.join("held.lock").exists());
    assert_untouched(sp);
}

/// A directory owned by another user (not root): root refuses to write in
/// it, naming it and the owner.
#[test]
fn dir_owned_by_another_user() {
    let mut c = Case::new("dir_owned_by_another_user");
    if !is_root() {
        eprintln!("{}: skipped: chown needs root", c.name);
        return;
    }
    let theirs = c.subdir("theirs");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = theirs.display().to_string();
    c.go();
    let l = LockFile::open(theirs.join("L.lock")).unwrap();
    let e = lib("try_acquire", move || l.try_acquire().map(|_| ())).unwrap_err();
    assert!(matches!(e, Error::UnsafeDir { .. }), "{e:?}");
    assert!(e.to_string().contains("owned by nobody"), "{e}");
    c.oo_in(&theirs, &["run", "L", "--", "true"])
        .expect(125)
        .says(&d)
        .says("owned by nobody");
    c.oo_in(&theirs, &["acquire", "L"])
        .expect(125)
        .says("owned by nobody");
    c.oo_in(&theirs, &["precheck", "L"]).expect(0);
    c.done("writers refused naming the directory and its owner");
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
}

/// A full filesystem (a 4 KiB tmpfs, filled): a clear error naming the
/// directory, no temp file left, and the stale record that was there is not
/// lost before a new one could be written.
#[test]
fn dir_on_a_full_filesystem() {
    let mut c = Case::new("dir_on_a_full_filesystem");
    if !is_root() {
        eprintln!("{}: skipped: mount needs root", c.name);
        return;
    }
    let full = c.subdir("full");
    let mut m = c.program("mount");
    m.args(["-t", "tmpfs", "-o", "size=4k,mode=0755", "tmpfs"])
        .arg(&full);
    let out = finish(m, "mount tmpfs");
    if out.code() != 0 {
        eprintln!("{}: skipped: cannot mount a tmpfs: {}", c.name, out.stderr);
        return;
    }
    c.mounts.push(full.clone());
    let (dead, start) = dead_process();
    put(&full.join("stale.lock"), live_record(dead, start));
    let stale_before = Snapshot::of(&full.join("stale.lock"));
    let mut dd = c.program("dd");
    dd.args(["if=/dev/zero", "bs=1024", "count=64"])
        .arg(format!("of={}", full.join("fill").display()));
    finish(dd, "dd");
    let names = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let listing = names(&full);
    let d = full.display().to_string();
    c.go();
    let l = LockFile::open(full.join("L.lock")).unwrap();
    let e = lib("try_acquire", move || l.try_acquire().map(|_| ())).unwrap_err();
    assert!(
        e.to_string().contains(&d) && e.to_string().contains("No space left"),
        "{e}"
    );
    for lock in ["L", "stale"] {
        c.oo_in(&full, &["run", lock, "--", "true"])
            .expect(125)
            .says(&d)
            .says("No space left");
        c.oo_in(&full, &["acquire", lock])
            .expect(125)
            .says("No space left");
    }
    c.oo_in(&full, &["precheck", "L"]).expect(0);
    assert_eq!(names(&full), listing, "temp files were left behind");
    // reap keeps its (empty) state lock file; nothing else is left.
    c.oo_in(&full, &["reap", "L"]).expect(0);
    c.done("clear error naming the directory; nothing left behind");
    let mut after = names(&full);
    after.retain(|n| n != ".onlyone-reap.lock");
    assert_eq!(after, listing, "temp files were left behind");
    assert_eq!(Snapshot::of(&full.join("stale.lock")), stale_before);
}

/// The lock's directory does not exist, or a component is a file.
#[test]
fn dir_missing_or_a_file() {
    let mut c = Case::new("dir_missing_or_a_file");
    let missing = c.dir().join("missing/L.lock");
    let file = c.dir().join("afile");
    std::fs::write(&file, "x").unwrap();
    let under_file = file.join("L.lock");
    c.go();
    let e = LockFile::open(&missing).unwrap_err();
    assert!(matches!(e, Error::MissingDir { .. }), "{e:?}");
    assert!(e.to_string().contains("mkdir -p"), "{e}");
    let e = LockFile::open(&under_file).unwrap_err();
    assert!(e.to_string().contains("is not a directory"), "{e}");
    c.oo(&["run", missing.to_str().unwrap(), "--", "true"])
        .expect(125)
        .says("does not exist")
        .says("mkdir -p");
    c.oo(&["precheck", missing.to_str().unwrap()]).expect(0);
    c.oo(&["run", under_file.to_str().unwrap(), "--", "true"])
        .expect(125)
        .says("is not a directory");
    c.oo(&["precheck", under_file.to_str().unwrap()])
        .expect(0)
        .says("fail open");
    c.done("clear errors");
    assert!(!c.dir().join("missing").exists());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

// ---------------------------------------------------------------------------
// Environment and names

#[test]
fn env_onlyone_dir_is_a_file() {
    let mut c = Case::new("env_onlyone_dir_is_a_file");
    let file = c.dir().join("afile");
    std::fs::write(&file, "not a dir").unwrap();
    let with_env = |c: &Case, args: &[&str]| {
        let mut cmd = c.program(BIN);
        cmd.env("ONLYONE_DIR", &file).args(args);
        finish(cmd, &format!("ONLYONE_DIR=file onlyone {args:?}"))
    };
    let ran = c.marker("ran");
    c.go();
    with_env(&c, &["run", "L", "--", "touch", ran.to_str().unwrap()])
        .expect(125)
        .says("$ONLYONE_DIR")
        .says("not a directory")
        .says("point it elsewhere");
    assert!(!ran.exists());
    with_env(&c, &["acquire", "L"])
        .expect(125)
        .says("$ONLYONE_DIR");
    with_env(&c, &["release", "L"])
        .expect(125)
        .says("$ONLYONE_DIR");
    with_env(&c, &["precheck", "L"])
        .expect(0)
        .says("not a directory")
        .says("fail open");
    with_env(&c, &["status"])
        .expect(125)
        .says(&file.display().to_string());
    with_env(&c, &["reap", "L"]).expect(0);
    c.done("refused naming $ONLYONE_DIR");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a dir");
}

/// A LOCK with a `/` is a path, and it works: run, acquire, precheck,
/// status, release, through the library too.
#[test]
fn name_with_a_slash_is_a_path() {
    let mut c = Case::new("name_with_a_slash_is_a_path");
    let other = c.subdir("elsewhere");
    let path = other.join("job.lock");
    let p = path.to_str().unwrap().to_owned();
    let ran = c.marker("ran");
    let (sp, _) = c.sleeper();
    c.go();
    c.oo(&["run", &p, "--", "touch", ran.to_str().unwrap()])
        .expect(0);
    assert!(ran.exists());
    c.oo(&["acquire", "--owner", &sp.to_string(), &p]).expect(0);
    c.oo(&["precheck", &p]).expect(75).says(&format!("'{p}'"));
    let s = c.status(&p);
    assert_eq!(
        (s["state"].as_str(), s["path"].as_str()),
        (Some("held"), Some(p.as_str()))
    );
    let l = LockFile::open(&path).unwrap();
    let r = lib("release_owned_by", move || l.release_owned_by(sp)).unwrap();
    assert_eq!(r, Released::Removed);
    // A relative path, from the working directory.
    let mut cmd = c.program(BIN);
    cmd.arg("--dir")
        .arg(c.dir())
        .current_dir(&other)
        .args(["run", "./rel.lock", "--", "true"]);
    finish(cmd, "run ./rel.lock").expect(0);
    c.done("works as a path");
    assert!(!path.exists() && !other.join("rel.lock").exists());
    assert_eq!(
        std::fs::read_dir(c.dir()).unwrap().count(),
        1,
        "only `elsewhere` should be in DIR"
    );
    assert_untouched(sp);
}

fn expect_bad_name(c: &mut Case, name: &str) {
    let ran = c.marker("ran");
    let rule = "A name is an ASCII letter or digit, then up to 63";
    if name.starts_with('-') {
        // `run` cannot even be given such a LOCK: a usage error, 125.
        c.oo(&["run", "--", name, "--", "touch", ran.to_str().unwrap()])
            .expect(125);
    } else {
        c.oo(&["run", name, "--", "touch", ran.to_str().unwrap()])
            .expect(125)
            .says("is not a lock name")
            .says(rule);
    }
    assert!(!ran.exists());
    for cmd in ["acquire", "release", "stop", "status"] {
        c.oo(&[cmd, "--", name])
            .expect(125)
            .says("is not a lock name")
            .says(rule);
    }
    c.oo(&["precheck", "--", name])
        .expect(0)
        .says("is not a lock name")
        .says("fail open");
    c.oo(&["reap", "--", name]).expect(0);
    let e = onlyone::names::lock_path(name, c.dir()).unwrap_err();
    assert!(matches!(e, Error::BadName { .. }), "{e:?}");
}

/// Nothing is left in the directory but the removal guard, which is never
/// deleted (no lock file, no temp file; the journals are in the state
/// directory).
fn assert_dir_empty(c: &Case) {
    let left: Vec<_> = std::fs::read_dir(c.dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| {
            let n = n.to_string_lossy();
            !n.starts_with(".onlyone-guard.")
        })
        .collect();
    assert!(left.is_empty(), "files were created: {left:?}");
}

/// `..` is not a name, and nothing is created beside or above DIR; as a
/// path (`DIR/..`) it has no file name.
#[test]
fn name_dot_dot() {
    let mut c = Case::new("name_dot_dot");
    c.go();
    expect_bad_name(&mut c, "..");
    let as_path = format!("{}/..", c.dir().display());
    c.oo(&["run", &as_path, "--", "true"])
        .expect(125)
        .says("has no file name");
    c.oo(&["precheck", &as_path]).expect(0).says("fail open");
    let e = LockFile::open(&as_path).unwrap_err();
    assert!(e.to_string().contains("has no file name"), "{e}");
    c.done("refused: not a lock name");
    assert_dir_empty(&c);
    let above = c.dir().parent().unwrap().join(".lock");
    assert!(!above.exists(), "{} was created", above.display());
}

/// A leading dash: after `--` it is a bad name; without, a usage error
/// (125, never 75); precheck fails open either way.
#[test]
fn name_leading_dash() {
    let mut c = Case::new("name_leading_dash");
    c.go();
    expect_bad_name(&mut c, "-rf");
    for cmd in ["acquire", "release", "stop"] {
        c.oo(&[cmd, "-rf"]).expect(125);
    }
    c.oo(&["run", "-rf", "--", "true"]).expect(125);
    c.oo(&["precheck", "-rf"]).expect(0).says("fail open");
    c.done("refused: not a lock name / usage");
    assert_dir_empty(&c);
}

/// 300 characters: too long for a name; as a path whose file name is
/// longer than NAME_MAX, a clear I/O error (never a panic, never 75).
#[test]
fn name_300_characters() {
    let mut c = Case::new("name_300_characters");
    let long = "x".repeat(300);
    c.go();
    expect_bad_name(&mut c, &long);
    let path = c.dir().join(format!("{long}.lock"));
    let p = path.to_str().unwrap();
    c.oo(&["run", p, "--", "true"])
        .expect(125)
        .says("File name too long");
    c.oo(&["acquire", p]).expect(125).says("File name too long");
    c.oo(&["precheck", p]).expect(0).says("fail open");
    let out = c.oo(&["status", "--json", p]);
    out.expect(0);
    assert_eq!(out.json()["locks"][0]["state"], "unknown", "{out:#?}");
    c.done("refused: too long");
    assert_dir_empty(&c);
}

/// A lock path whose file name fits NAME_MAX (250 bytes) is a valid path:
/// it can be locked, or the error names the lock path.
#[test]
fn path_with_a_250_byte_file_name_can_be_locked() {
    let mut c = Case::new("path_with_a_250_byte_file_name");
    let path = c.dir().join(format!("{}.lock", "y".repeat(245)));
    let p = path.to_str().unwrap();
    c.go();
    let out = c.oo(&["run", p, "--", "true"]);
    assert!(
        out.code() == 0 || (out.code() == 125 && out.stderr.contains(p)),
        "{out:#?}"
    );
    c.done("works");
}

/// Non-ASCII: not a name; as a path it works.
#[test]
fn name_non_ascii() {
    let mut c = Case::new("name_non_ascii");
    c.go();
    expect_bad_name(&mut c, "é");
    expect_bad_name(&mut c, "sync→daily");
    let path = c.dir().join("é→ü.lock");
    let p = path.to_str().unwrap();
    let ran = c.marker("ran");
    c.oo(&["run", p, "--", "touch", ran.to_str().unwrap()])
        .expect(0);
    assert!(ran.exists());
    let (sp, _) = c.sleeper();
    c.oo(&["acquire", "--owner", &sp.to_string(), p]).expect(0);
    c.oo(&["precheck", p]).expect(75);
    let s = c.status(p);
    assert_eq!(s["state"], "held", "{s:#}");
    assert_eq!(s["name"], p, "{s:#}");
    c.oo(&["release", "--owner", &sp.to_string(), p]).expect(0);
    c.done("refused as a name; works as a path");
    assert_dir_empty(&c);
    assert_untouched(sp);
}

// Keep the helpers honest: the strace parser reads what strace prints.
#[test]
fn strace_lines_are_parsed() {
    if let Some(st) = strace() {
        let c = Case::new("strace_lines_are_parsed");
        let log = c.aux.path().join("self.txt");
        let mut cmd = c.program(st);
        cmd.args([
            "-f",
            "-qq",
            "-yy",
            "-e",
            "signal=none",
            "-e",
            "trace=kill",
            "-o",
        ])
        .arg(&log)
        .args(["--", "sh", "-c", "kill -0 $$"]);
        finish(cmd, "strace sh").expect(0);
        let sent = parse_strace(&std::fs::read_to_string(&log).unwrap());
        assert!(
            sent.iter()
                .any(|s| s.call == "kill" && s.sig == "0" && s.target > 1),
            "{sent:?}"
        );
    }
    let sent = parse_strace(
        "12  kill(1, 0)                        = 0\n\
         12  kill(-1, SIGTERM <unfinished ...>\n\
         13  pidfd_send_signal(3<pid:4242>, SIGKILL, NULL, 0) = 0\n\
         13  tgkill(77, 78, SIGINT) = 0\n\
         13  openat(AT_FDCWD, \"x\", O_RDONLY) = 3\n",
    );
    let got: Vec<(i64, &str)> = sent.iter().map(|s| (s.target, s.sig.as_str())).collect();
    assert_eq!(
        got,
        vec![(1, "0"), (-1, "SIGTERM"), (4242, "SIGKILL"), (77, "SIGINT")]
    );
}
