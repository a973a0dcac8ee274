//! Another account attacks the line of waiters: the tickets
//! (`DIR/.NAME.wait.NANOS.RAND8`) and the queue seat (`DIR/.NAME.queue`).
//! The attacker is `nobody`, in a lock directory it shares with root
//! (1777, as `/run/lock` or `/tmp`); the victim is a root job that waits
//! (`run --wait`) or asks for the queue (`run --queue`). Root's default
//! `/run/onlyone` (0755, root's) and a user's `/tmp/onlyone-UID` are not
//! shared: nobody can put no file there, so none of these attacks applies
//! to them.

use crate::support;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use onlyone::LockFile;
use support::*;

const HANG: Duration = Duration::from_secs(40);

/// How long a `--queue` fire waits for a seat that its waiter lets go as
/// its run begins (doc/how-it-works.md, "The queue seat").
const PLACE_HANDOVER: Duration = Duration::from_secs(2);

struct World {
    sb: Sandbox,
    sh: Shared,
}

derefs_to_sandbox!(World);

impl World {
    fn new(test: &str) -> Option<World> {
        let sb = Sandbox::new("ONLYONE_ATTACK_QUEUE_MARK");
        let sh = sb.shared_with_nobody(test)?;
        Some(World { sb, sh })
    }

    fn dir(&self) -> &Path {
        &self.sh.locks
    }

    fn lock(&self) -> LockFile {
        LockFile::open(self.dir().join("j.lock")).unwrap()
    }

    /// `name` in the shared directory.
    fn at(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// A ticket's name of `j`'s line, in the order `n`.
    fn ticket(n: u64) -> String {
        format!(".j.lock.wait.{n:020}.0badf00d")
    }

    /// `sh -c SCRIPT` as nobody (setpriv execs: the pid spawned is the
    /// process that ends up running the script's last exec).
    fn as_nobody_sh(&self, script: &str) -> Command {
        let mut c = self.program("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .current_dir(self.dir());
        c
    }

    /// Runs SCRIPT as nobody in the shared directory, to its end.
    fn nobody_must(&self, script: &str) {
        finish(self.as_nobody_sh(script), HANG).expect(0);
    }

    /// A flock(1) of nobody's holding a kernel lock on `name` (created by
    /// it, nobody's) for as long as it lives.
    fn nobody_flock(&self, name: &str) -> Kid {
        let kid = Kid::new(
            self.as_nobody_sh(&format!("exec flock '{name}' sleep 1000"))
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let pid = kid.id();
        wait_until("nobody's flock(1) under its kernel lock", HANG, || {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "flock")
                && std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .is_ok_and(|c| !c.trim().is_empty())
        });
        kid
    }

    /// A live ticket (or seat) of nobody's: a record naming `pid` with
    /// `token`, in a file of nobody's on which nobody's flock(1) holds a
    /// kernel lock. The record is written in place (the flock stays on
    /// the file).
    fn live_forgery(&self, name: &str, pid: Option<u32>, token: &str) -> Kid {
        let kid = self.nobody_flock(name);
        let pid = pid.unwrap_or(kid.id());
        write_in_place(&self.at(name), &record_text(pid, start_of(pid), token));
        assert_eq!(std::fs::metadata(self.at(name)).unwrap().uid(), 65534);
        kid
    }

    /// `onlyone --dir SHARED run ARGS j -- sh -c 'echo WORD >> out'`, as
    /// root.
    fn fire(&self, args: &[&str], word: &str) -> Child {
        let out = self.at("out");
        let mut c = self.program(BIN);
        c.arg("--dir")
            .arg(self.dir())
            .arg("run")
            .args(args)
            .args(["j", "--", "sh", "-c"])
            .arg(format!("echo {word} >> '{}'", out.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().expect("spawn onlyone")
    }

    /// `onlyone --dir SHARED ARGS` as root, to its end.
    fn oo_root(&self, args: &[&str]) -> Out {
        let mut c = self.program(BIN);
        c.arg("--dir").arg(self.dir()).args(args);
        finish(c, HANG)
    }

    fn ran(&self) -> Vec<String> {
        std::fs::read_to_string(self.at("out"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Rewrites an existing file's bytes without creating it (root may not
/// open another user's file with O_CREAT in a sticky directory under
/// `fs.protected_regular`), so that its inode, owner and flock stay.
fn write_in_place(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn ended(child: &mut Child, what: &str) -> (i32, String) {
    let (st, _, err) = wait_bounded(child, Instant::now(), HANG, what);
    (st.code().unwrap_or(-1), err)
}

fn line(lock: &LockFile) -> Vec<u32> {
    lock.waiters().into_iter().map(|w| w.record.pid).collect()
}

/// What a file is, to see it untouched: its kind, owner, mode, inode and
/// bytes (a regular file's).
fn fingerprint(path: &Path) -> (bool, bool, u32, u32, u64, Vec<u8>) {
    let m = std::fs::symlink_metadata(path).unwrap();
    let ft = m.file_type();
    let bytes = if ft.is_file() {
        std::fs::read(path).unwrap()
    } else {
        Vec::new()
    };
    (
        ft.is_symlink(),
        ft.is_fifo(),
        m.uid(),
        m.mode(),
        m.ino(),
        bytes,
    )
}

/// The token in the record at `path`.
fn token_of(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("token=").map(str::to_owned))
        .expect("a token")
}

/// Nobody keeps a forged head alive and renames it back and forth between
/// two names that sort before root's ticket, every few hundred
/// milliseconds, so that at each look root's waiter sees a head it had
/// not seen a moment ago. The grace is counted from the free lock, not
/// from each new head: root's waiter takes the free lock after about
/// [`onlyone::command::HEAD_GRACE`], not never.
#[test]
fn a_head_renamed_again_and_again_delays_a_hand_off_by_the_grace_at_most() {
    let Some(mut w) =
        World::new("a_head_renamed_again_and_again_delays_a_hand_off_by_the_grace_at_most")
    else {
        return;
    };
    let (a, b) = (World::ticket(1), World::ticket(2));
    let mut forged = w.live_forgery(&a, None, &"ab".repeat(16));
    let lock = w.lock();
    let held = lock.try_acquire().unwrap();
    let mut waiter = w.fire(&["--wait", "20s"], "root");
    let pid = waiter.id();
    wait_until("root's waiter in line behind the forged head", HANG, || {
        line(&lock) == [forged.id(), pid]
    });
    let renamer = w.as_nobody_sh(&format!(
        "while :; do mv {a} {b}; sleep 0.2; mv {b} {a}; sleep 0.2; done"
    ));
    w.keep(renamer);
    let t = Instant::now();
    held.release().unwrap();
    let (code, err) = ended(&mut waiter, "root's waiter");
    let took = t.elapsed();
    assert_eq!(code, 0, "after {took:?}: {err}");
    assert!(
        took < onlyone::command::HEAD_GRACE * 4,
        "root's waiter took the free lock after {took:?}"
    );
    assert_eq!(w.ran(), ["root"]);
    w.end_processes();
    kill9(&mut forged);
}

/// Nobody reads the token of root's running job (the record is 0644) and
/// forges the queue seat with it, kept alive by a flock of its own: to
/// a `--queue` fire the seat's waiter seems to have just become the
/// runner, and the fire waits for it to let the seat go. That wait is
/// bounded by [`PLACE_HANDOVER`]: the fire then skips (75, "one
/// already queued"), and the forged seat is left as it is. Accepted: a
/// forged seat that another account keeps alive makes `--queue` fires
/// skip, as a forged lock file makes every fire skip.
#[test]
fn a_forged_seat_with_the_runner_s_token_costs_a_queued_fire_the_hand_over_bound() {
    let Some(w) =
        World::new("a_forged_seat_with_the_runner_s_token_costs_a_queued_fire_the_hand_over_bound")
    else {
        return;
    };
    let lock = w.lock();
    let held = lock.try_acquire().unwrap();
    let token = token_of(lock.path());
    let seat = ".j.lock.queue";
    let _forged = w.live_forgery(seat, None, &token);
    let before = fingerprint(&w.at(seat));
    let t = Instant::now();
    let mut fire = w.fire(&["--queue"], "queued");
    let (code, err) = ended(&mut fire, "root's queued fire");
    let took = t.elapsed();
    assert_eq!(code, 75, "{err}");
    assert!(err.contains("one already queued"), "{err}");
    assert!(
        took < PLACE_HANDOVER + Duration::from_secs(3),
        "the queued fire skipped after {took:?}"
    );
    assert_eq!(fingerprint(&w.at(seat)), before);
    assert!(w.ran().is_empty());
    held.release().unwrap();
}

/// Nobody puts at the queue seat a symlink to a file of root's, a
/// FIFO, a directory, and a sparse file of 1 GiB. A `--queue` fire of
/// root's, while the lock is held, follows no link, opens no FIFO for
/// ever, reads no more than a record's size: it fails at once with an
/// error that names the seat and says what is wrong, and the file is
/// left as it is. A `--wait` fire does not look at the seat (it waits
/// and runs), and `status` (text and JSON) answers at once, with no
/// waiter. Accepted: a file another account keeps at the seat refuses
/// `--queue`, as one at the lock's path refuses every fire.
#[test]
fn a_planted_seat_is_refused_by_name_and_left_alone() {
    let Some(w) = World::new("a_planted_seat_is_refused_by_name_and_left_alone") else {
        return;
    };
    let secret = w.path("secret");
    put(&secret, "root's\n");
    let seat = ".j.lock.queue";
    let lock = w.lock();
    for (plant, says) in [
        (format!("ln -s '{}' {seat}", secret.display()), "link"),
        (format!("mkfifo {seat}"), "FIFO"),
        (format!("mkdir {seat}"), "directory"),
        (format!("truncate -s 1G {seat}"), seat),
    ] {
        w.nobody_must(&plant);
        let before = fingerprint(&w.at(seat));
        let held = lock.try_acquire().unwrap();
        let mut fire = w.fire(&["--queue"], "queued");
        let (code, err) = ended(&mut fire, "root's queued fire");
        assert!(code != 0 && code != 101, "{plant}: {code}: {err}");
        assert!(err.contains(seat) && err.contains(says), "{plant}: {err}");
        let mut waiter = w.fire(&["--wait", "20s"], "waited");
        let pid = waiter.id();
        wait_until("root's waiter in line", HANG, || line(&lock) == [pid]);
        w.oo_root(&["status", "j"])
            .within(Duration::from_secs(5))
            .prints("[waiting: pid");
        let status = w.oo_root(&["status", "--json", "j"]);
        status.within(Duration::from_secs(5));
        let json = status.json();
        let waiters = &json["locks"][0]["waiters"];
        assert_eq!(waiters.as_array().map(Vec::len), Some(1), "{json}");
        assert_eq!(waiters[0]["queued"], false, "{json}");
        held.release().unwrap();
        let (code, err) = ended(&mut waiter, "root's waiter");
        assert_eq!(code, 0, "{plant}: {err}");
        assert_eq!(fingerprint(&w.at(seat)), before, "{plant}");
        w.nobody_must(&format!("rm -rf {seat}"));
    }
    assert_eq!(w.ran(), ["waited"; 4]);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's\n");
}

/// Nobody plants, ahead of root's waiter, tickets that sort first: 2,000
/// that are not records (empty files), a FIFO, a symlink, a directory; a
/// record of its own naming root's live process (this test), with no
/// kernel lock on it; and a record naming a dead process, whose removal
/// guard (`.onlyone-guard.65534`) nobody then holds for ever. A record
/// speaks only for its writer: the one naming root's process is stale,
/// and so is the dead one; neither is waited for, and root's waiter does
/// not wait on nobody's guard to remove them: it takes the free lock at
/// once, well within [`onlyone::command::HEAD_GRACE`]. None of nobody's files is
/// touched, `status` answers at once and lists none of them as a waiter.
#[test]
fn forged_and_stale_tickets_of_another_account_are_passed_over_at_once() {
    let Some(w) = World::new("forged_and_stale_tickets_of_another_account_are_passed_over_at_once")
    else {
        return;
    };
    let me = std::process::id();
    let (dead, dead_start) = dead_process();
    let junk: Vec<String> = (10..2010).map(World::ticket).collect();
    w.nobody_must(&format!(
        "touch {} && mkfifo {} && ln -s /etc/shadow {} && mkdir {} && \
         touch {} {}",
        junk.join(" "),
        World::ticket(3),
        World::ticket(4),
        World::ticket(5),
        World::ticket(1),
        World::ticket(2),
    ));
    // The files are nobody's; root only writes the forged bytes in.
    write_in_place(
        &w.at(&World::ticket(1)),
        &record_text(me, start_of(me), &"cd".repeat(16)),
    );
    write_in_place(
        &w.at(&World::ticket(2)),
        &record_text(dead, dead_start, &"ef".repeat(16)),
    );
    let _guard = w.nobody_flock(".onlyone-guard.65534");
    let planted: Vec<_> = (1..6)
        .map(World::ticket)
        .chain(junk.iter().take(3).cloned())
        .map(|n| (n.clone(), fingerprint(&w.at(&n))))
        .collect();
    assert!(planted.iter().all(|(_, f)| f.2 == 65534));

    let lock = w.lock();
    let held = lock.try_acquire().unwrap();
    let mut waiter = w.fire(&["--wait", "20s"], "root");
    let pid = waiter.id();
    wait_until("root's ticket", HANG, || {
        std::fs::read_dir(w.dir()).unwrap().flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with(".j.lock.wait.")
                && e.metadata().is_ok_and(|m| m.uid() == 0)
        })
    });
    // `status` looks at the first 64 tickets only: behind 2,000 planted
    // ones it shows no waiter (accepted: it is bounded, and lists no
    // forged one).
    let status = w.oo_root(&["status", "--json", "j"]);
    status.within(Duration::from_secs(5));
    let json = status.json();
    let listed: Vec<_> = json["locks"][0]["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["pid"].as_u64().unwrap() as u32)
        .collect();
    assert!(listed.iter().all(|p| *p == pid), "{json}");
    let t = Instant::now();
    held.release().unwrap();
    let (code, err) = ended(&mut waiter, "root's waiter");
    let took = t.elapsed();
    assert_eq!(code, 0, "{err}");
    assert!(
        took < onlyone::command::HEAD_GRACE / 2,
        "root's waiter took the free lock after {took:?}"
    );
    assert_eq!(w.ran(), ["root"]);
    for (n, f) in planted {
        assert_eq!(fingerprint(&w.at(&n)), f, "{n}");
    }
}

/// Nobody plants tickets ahead of root's waiter: a FIFO, a symlink to a
/// file of root's, and a forged ticket naming its own live flock(1), which
/// holds a kernel lock on it for ever. Root's waiter reads none of them as
/// more than it is, follows no link, does not hang on the FIFO, and takes
/// the free lock once the forged head has had its grace
/// ([`onlyone::command::HEAD_GRACE`]), not before and not never.
#[test]
fn planted_tickets_delay_a_hand_off_by_the_grace_at_most() {
    let Some(w) = World::new("planted_tickets_delay_a_hand_off_by_the_grace_at_most") else {
        return;
    };
    let secret = w.sb.path("secret");
    put(&secret, "root's\n");
    let (fifo, link) = (World::ticket(1), World::ticket(2));
    w.nobody_must(&format!(
        "mkfifo '{fifo}' && ln -s '{}' '{link}'",
        secret.display()
    ));
    let mut forged = w.live_forgery(&World::ticket(3), None, &"ab".repeat(16));

    let lock = w.lock();
    let held = lock.try_acquire().unwrap();
    let mut waiter = w.fire(&["--wait", "60s"], "root");
    let pid = waiter.id();
    wait_until("root's waiter in line behind the forged head", HANG, || {
        line(&lock) == [forged.id(), pid]
    });
    let t = Instant::now();
    held.release().unwrap();
    let (code, err) = ended(&mut waiter, "root's waiter");
    let took = t.elapsed();
    assert_eq!(code, 0, "{err}");
    assert!(
        took >= onlyone::command::HEAD_GRACE.mul_f64(0.9)
            && took < onlyone::command::HEAD_GRACE * 10,
        "root's waiter took the free lock after {took:?}"
    );
    assert_eq!(w.ran(), ["root"]);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's\n");
    assert!(
        std::fs::symlink_metadata(w.at(&link))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::symlink_metadata(w.at(&fifo))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    kill9(&mut forged);
}
