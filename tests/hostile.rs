//! Hostile environments: the premises of the protocol that real hosts
//! break. A lock directory shared between hosts, one user with two
//! sessions, time and PID namespaces, `/tmp` cleaning, a path LOCK that
//! names a user's file, daemons that clear their environment, and
//! directories that are full, read-only or not ours. Each test reproduces
//! what a user ran into, with real processes, namespaces and filesystems
//! where the machine allows (as root), and says when it cannot.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_onlyone");
const HANG: Duration = Duration::from_secs(30);

/// A temp dir, and the processes a test started: killed at the end.
struct World {
    dir: tempfile::TempDir,
    kids: Vec<Child>,
    pids: Vec<u32>,
}

impl Drop for World {
    fn drop(&mut self) {
        for k in &mut self.kids {
            kill9(k);
        }
        for &p in &self.pids {
            kill9_pid(p);
        }
    }
}

impl World {
    fn new() -> World {
        World {
            dir: open_tempdir(),
            kids: Vec::new(),
            pids: Vec::new(),
        }
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn lock(&self, name: &str) -> PathBuf {
        self.dir().join(format!("{name}.lock"))
    }

    /// `onlyone --dir DIR`, with no directory from the environment.
    fn oo_cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--dir")
            .arg(self.dir())
            .env_remove("ONLYONE_DIR")
            .env_remove("ONLYONE_ALLOW_SHARED_FS")
            .env_remove("ONLYONE_TEST_FSTYPE");
        c
    }

    fn oo(&self, args: &[&str]) -> Out {
        let mut c = self.oo_cmd();
        c.args(args);
        finish(c, HANG)
    }

    /// A long-lived process, killed when the test ends.
    fn keep(&mut self, mut cmd: Command) -> u32 {
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

    /// `sleep 1000`: its pid.
    fn sleeper(&mut self) -> u32 {
        let mut c = Command::new("sleep");
        c.arg("1000");
        self.keep(c)
    }

    fn status(&self, name: &str) -> serde_json::Value {
        let out = self.oo(&["status", "--json", name]);
        out.expect(0);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        v["locks"][0].clone()
    }
}

/// A record as another host writes it: its host name and boot id.
fn foreign_record(pid: u32, start: u64, host: &str, boot: &str) -> String {
    format!(
        "{pid}\nstart={start}\nboot={boot}\ntoken={}\nsince=1764400000\nhost={host}\n\
         mode=run\ncmd=the other host's run\nonlyone=1\n",
        "c".repeat(32)
    )
}

const OTHER_BOOT: &str = "00000000-1111-2222-3333-444444444444";

// ---------------------------------------------------------------------------
// 1. A lock directory shared between hosts

/// A record written by another host (its name and boot id both differ)
/// says nothing about this host's processes: never stale here. It is
/// unknown: run and acquire refuse it naming the host and the way out,
/// precheck fails open, status says so, and the file is left alone.
#[test]
fn a_record_of_another_host_is_never_taken_over() {
    let w = World::new();
    let path = w.lock("x");
    let text = foreign_record(4242, 1234, "otherhost", OTHER_BOOT);
    put(&path, &text);
    let ran = w.dir().join("ran");
    w.oo(&["run", "x", "--", "touch", ran.to_str().unwrap()])
        .expect(125)
        .says("another host, `otherhost`")
        .says(&format!("onlyone release --force {}", path.display()));
    assert!(!ran.exists(), "the command ran beside the other host's run");
    w.oo(&["acquire", "x"]).expect(125).says("`otherhost`");
    w.oo(&["precheck", "x"]).expect(0).says("cannot be judged");
    let s = w.status("x");
    assert_eq!(s["state"], "unknown", "{s:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    // Once the operator knows better: release --force clears it.
    w.oo(&["release", "--force", "x"]).expect(0);
    w.oo(&["run", "x", "--", "true"]).expect(0);
}

/// The same host name with another boot id is a reboot of this host: stale.
/// The same boot id is the same kernel, whatever the host is called now (a
/// renamed host): judged on its pids as always.
#[test]
fn a_reboot_of_this_host_is_stale_and_a_renamed_host_is_this_host() {
    let mut w = World::new();
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    put(
        &w.lock("rebooted"),
        foreign_record(4242, 1234, &host, OTHER_BOOT),
    );
    w.oo(&["run", "rebooted", "--", "true"])
        .expect(0)
        .says("the owner died with the previous boot");

    let sp = w.sleeper();
    let live = foreign_record(sp, start_of(sp), "old-name", &boot_id());
    put(&w.lock("renamed"), live);
    w.oo(&["run", "renamed", "--", "true"])
        .expect(75)
        .says(&format!("pid {sp}"));
    let (dead, start) = dead_process();
    put(
        &w.lock("renamed-dead"),
        foreign_record(dead, start, "old-name", &boot_id()),
    );
    w.oo(&["run", "renamed-dead", "--", "true"]).expect(0);
}

/// Writers refuse a lock directory on a network or FUSE filesystem. No
/// such filesystem can be mounted in CI, so the test injects its type
/// (`statfs` f_type 0x6969 is NFS; the test-hooks feature reads it).
/// `--allow-shared-fs` and `ONLYONE_ALLOW_SHARED_FS=1` override; readers
/// never refuse.
#[test]
fn writers_refuse_a_network_filesystem_unless_told_it_is_local() {
    let w = World::new();
    for (fstype, kind) in [("6969", "NFS"), ("65735546", "FUSE"), ("ff534d42", "CIFS")] {
        let mut c = w.oo_cmd();
        c.env("ONLYONE_TEST_FSTYPE", fstype)
            .args(["run", "x", "--", "true"]);
        finish(c, HANG)
            .expect(125)
            .says(&format!("network or FUSE filesystem ({kind})"))
            .says("--allow-shared-fs");
        assert!(!w.lock("x").exists());
    }
    let nfs = |args: &[&str], allow_env: bool| {
        let mut c = w.oo_cmd();
        c.env("ONLYONE_TEST_FSTYPE", "6969").args(args);
        if allow_env {
            c.env("ONLYONE_ALLOW_SHARED_FS", "1");
        }
        finish(c, HANG)
    };
    nfs(
        &["acquire", "x", "--owner", &std::process::id().to_string()],
        false,
    )
    .expect(125)
    .says("NFS");
    nfs(&["--allow-shared-fs", "run", "x", "--", "true"], false).expect(0);
    nfs(&["run", "x", "--", "true"], true).expect(0);
    nfs(&["precheck", "x"], false).expect(0).quiet();
    nfs(&["status", "x"], false).expect(0);
    // A local filesystem (tmpfs or ext4 here) is fine.
    w.oo(&["run", "x", "--", "true"]).expect(0);
}

// ---------------------------------------------------------------------------
// 5. A path LOCK that names a user's file

/// `onlyone run ./sync.sh -- --all`, a typo for the script itself: the
/// script is not a record, and however old it is, it is never removed.
/// Nor is a copy of /etc/passwd. `release --force` refuses them too.
#[test]
fn a_users_file_at_a_lock_path_is_never_removed() {
    let w = World::new();
    let script = w.dir().join("sync.sh");
    let passwd = w.dir().join("passwd");
    std::fs::write(&script, "#!/bin/sh\necho syncing\n").unwrap();
    std::fs::copy("/etc/passwd", &passwd).unwrap();
    for file in [&script, &passwd] {
        let before = std::fs::read(file).unwrap();
        let old = std::time::UNIX_EPOCH + Duration::from_secs(1_748_736_000); // 2025-06-01
        std::fs::File::options()
            .write(true)
            .open(file)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let p = file.to_str().unwrap();
        w.oo(&["run", p, "--", "--all"])
            .expect(125)
            .says("not a record onlyone wrote")
            .says(&format!("rm {p}"));
        w.oo(&["acquire", p, "--owner", &std::process::id().to_string()])
            .expect(125);
        w.oo(&["precheck", p]).expect(0);
        w.oo(&["release", "--force", p])
            .expect(125)
            .says("it is not a lock record")
            .says("never deletes a file that is not one");
        assert_eq!(std::fs::read(file).unwrap(), before, "{p} changed");
    }
}
