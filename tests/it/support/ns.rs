//! A private mount namespace with fresh tmpfs `/run`, `/tmp`, `/var/lib`
//! and `/var/tmp`, where root's default paths (`/run/onlyone`,
//! `/run/lock`, `/tmp/onlyone-UID`, the state directories
//! `/var/lib/onlyone` and `/var/tmp/onlyone-state-UID`) are real and
//! empty, for tests written as another account attacking a root job.
//!
//! The namespace lives while a holder process (`sleep`) lives in it; every
//! command enters it with `nsenter -m`. The binary under test is copied
//! into the namespace's `/run/.oo-test/`, so an unprivileged user can run
//! it whatever the mode of the checkout it was built in (a 0700 clone).
//! The test process sees the namespace's files through
//! `/proc/HOLDER/root` ([`Ns::host_path`]). Everything started in it is
//! marked and killed when the [`Ns`] is dropped, pass or fail.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{BIN, Out, Sandbox, finish_checked, have, is_root, wait_until};

/// The unprivileged attacker: `nobody`, who has a passwd entry.
pub const NOBODY: u32 = 65534;
/// A uid with no passwd entry at all (containers, LDAP users offline).
pub const NO_PASSWD: u32 = 4242;

/// Where the binary under test is inside the namespace.
pub const OO: &str = "/run/.oo-test/onlyone";

/// A private mount namespace with fresh `/run` and `/tmp`.
pub struct Ns {
    sb: Sandbox,
    /// The process that keeps the namespace: `sleep`, its PID namespace's
    /// init with [`Ns::with_pids`].
    holder: u32,
    /// Whether it has a PID namespace of its own ([`Ns::with_pids`]).
    pids: bool,
}

impl Ns {
    /// A new namespace, or `None` (saying why) where this is not root or
    /// the tools are missing.
    pub fn new(test: &str) -> Option<Ns> {
        Ns::make(test, false)
    }

    /// [`Ns::new`], and a PID namespace of its own too (`unshare -m -p`,
    /// with a `/proc` of its own): what runs in it sees only its own
    /// processes, and they all end with its init (the holder). The init
    /// ignores SIGCHLD, so that what it adopts is reaped at once.
    pub fn with_pids(test: &str) -> Option<Ns> {
        Ns::make(test, true)
    }

    fn make(test: &str, pids: bool) -> Option<Ns> {
        if !is_root() || !have("unshare") || !have("nsenter") || !have("setpriv") {
            eprintln!("{test}: skipped: needs root, unshare, nsenter and setpriv");
            return None;
        }
        let mut sb = Sandbox::new("ONLYONE_NS_MARK");
        // As a PID namespace's init, a sleep that reaps what it adopts
        // (env(1) of coreutils 8.31 and later), or one that does not.
        let ignores = pids
            && Command::new("env")
                .args(["--ignore-signal=CHLD", "true"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        let sleeper = if ignores {
            "env --ignore-signal=CHLD sleep"
        } else {
            "sleep"
        };
        let script = format!(
            // The binary is opened before the mounts: a checkout under
            // /tmp or /run is hidden by them.
            "set -e; exec 3< '{BIN}'; mount --make-rprivate / 2>/dev/null || true; \
             mount -t tmpfs -o mode=0755 onlyone-run /run; \
             mount -t tmpfs -o mode=1777 onlyone-tmp /tmp; \
             mount -t tmpfs -o mode=0755 onlyone-var-lib /var/lib; \
             mount -t tmpfs -o mode=1777 onlyone-var-tmp /var/tmp; \
             mkdir -m 1777 /run/lock; mkdir -m 0755 /run/.oo-test; \
             cat <&3 > {OO}; exec 3<&-; chmod 0755 {OO}; exec {sleeper} 100000"
        );
        let mut c = sb.program("unshare");
        c.args(["-m", "--propagation", "private"]);
        if pids {
            c.args(["-p", "-f", "--mount-proc"]);
        }
        c.args(["--", "sh", "-c", &script]);
        let unshare = sb.keep(c);
        // The holder: unshare itself, or with a PID namespace its child,
        // the namespace's init.
        let holder = || {
            if !pids {
                return Some(unshare);
            }
            onlyone::procfs::children_of(unshare).into_iter().next()
        };
        // Ready once the holder has exec'd sleep, after the set-up.
        let ready = || {
            holder().is_some_and(|h| {
                std::fs::read_to_string(format!("/proc/{h}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
            })
        };
        super::wait_for(Duration::from_secs(20), || {
            ready() || !super::running(unshare)
        });
        // As root with the tools here, a namespace that cannot be made is
        // a failure, not a skip: these tests must not pass unseen.
        assert!(
            ready(),
            "{test}: the private mount namespace could not be made"
        );
        let holder = holder().unwrap();
        if pids {
            // Killed first at the end: every process of the namespace
            // dies with it.
            sb.foreign.push(holder);
        }
        let ns = Ns { sb, holder, pids };
        assert!(
            ns.host_path(OO).exists(),
            "{test}: {OO} is missing in the namespace"
        );
        Some(ns)
    }

    /// A path of the namespace, as the test process reaches it.
    pub fn host_path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", self.holder))
    }

    /// `prog args...` inside the namespace, as root (`uid` None) or as
    /// `uid` (its gid the same number, no supplementary groups, `HOME`
    /// `/tmp`), marked and with stdin closed.
    pub fn cmd(&self, uid: Option<u32>, prog: &str, args: &[&str]) -> Command {
        let mut c = self.sb.program("nsenter");
        c.arg("-t")
            .arg(self.holder.to_string())
            .args(if self.pids {
                &["-m", "-p", "--"][..]
            } else {
                &["-m", "--"][..]
            })
            .env_remove("ONLYONE_STORE")
            .env_remove("ONLYONE_STATE_DIR")
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_RUNTIME_DIR")
            .env("PATH", "/run/.oo-test:/usr/sbin:/usr/bin:/sbin:/bin");
        if let Some(uid) = uid {
            c.args([
                "setpriv",
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "--",
            ])
            .env("HOME", "/tmp");
        }
        c.arg(prog).args(args);
        c
    }

    /// onlyone inside the namespace, as root or as `uid`.
    pub fn oo(&self, uid: Option<u32>, args: &[&str]) -> Command {
        self.cmd(uid, OO, args)
    }

    /// A shell script inside the namespace, as root or as `uid`.
    pub fn sh(&self, uid: Option<u32>, script: &str) -> Command {
        self.cmd(uid, "sh", &["-c", script])
    }

    /// Runs `cmd` to its end within `limit`; a crash (signal, panic)
    /// fails the test.
    pub fn run(&self, cmd: Command, limit: Duration, what: &str) -> Out {
        finish_checked(cmd, limit, what)
    }

    /// Runs a shell script to its end, which must exit 0.
    pub fn must(&self, uid: Option<u32>, script: &str) -> Out {
        let out = finish_checked(self.sh(uid, script), Duration::from_secs(30), script);
        assert_eq!(out.code(), 0, "{script}: {out:#?}");
        out
    }

    /// Starts a long-lived process (output discarded) and returns its pid;
    /// it is killed with the namespace.
    pub fn keep(&mut self, cmd: Command) -> u32 {
        self.sb.keep(cmd)
    }

    /// Starts `script` as `uid` in the background and waits until it has
    /// created `ready` (a path in the namespace): for attackers that must
    /// be in place before root's job runs.
    pub fn attacker(&mut self, uid: u32, script: &str, ready: &str) -> u32 {
        let c = self.sh(Some(uid), script);
        let pid = self.keep(c);
        let path = self.host_path(ready);
        wait_until(
            &format!("attacker ready ({ready})"),
            Duration::from_secs(20),
            || path.exists() || !super::running(pid),
        );
        assert!(path.exists(), "attacker script ended early: {script}");
        pid
    }

    /// A root daemon outside any lock: `sleep` as root, started in the
    /// namespace; the process an attacker wants root to kill.
    pub fn root_daemon(&mut self) -> (u32, u64) {
        let mut c = self.cmd(None, "sleep", &["100000"]);
        c.stdout(Stdio::null());
        let pid = self.keep(c);
        wait_for_exec(pid, "sleep");
        (pid, super::start_of(pid))
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        self.sb.end_processes();
    }
}

/// Waits until `pid` runs the program `comm` (it has exec'd it).
pub fn wait_for_exec(pid: u32, comm: &str) {
    wait_until(
        &format!("pid {pid} to run {comm}"),
        Duration::from_secs(20),
        || std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm),
    );
}
