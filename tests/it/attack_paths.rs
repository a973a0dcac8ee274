//! Another account attacks a root job through the paths it reads and opens
//! (issue 34, "Multi-user hosts, round two"): an earlier version's journal
//! beside a lock in a shared directory, forged to vouch for a job that
//! never ran; and a symbolic link that another account made, given as the
//! lock directory or as a part of it. Each test runs in a private mount
//! namespace with fresh tmpfs `/run` and `/tmp` ([`support::ns::Ns`]), the
//! attacker `nobody`.

use crate::support;

use std::time::Duration;

use support::ns::{NOBODY, Ns};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// A run an earlier version would have journaled beside its lock: started
/// and ended with exit 0 at the end of the year 9999, as a forger dates it.
const FORGED: &str = "{\"v\":1,\"time\":253402300000,\"event\":\"start\",\
     \"token\":\"ffffffffffffffffffffffffffffffff\",\"pid\":1,\"mode\":\"run\",\"cmd\":\"backup\"}\n\
     {\"v\":1,\"time\":253402300001,\"event\":\"end\",\
     \"token\":\"ffffffffffffffffffffffffffffffff\",\"pid\":1,\"exit\":0,\"duration\":1.0}\n";

/// True when `text` shows the forged run's times, in any of the forms a
/// number takes (`253402300001`, `2.53402300001e11`) or a date (9999).
fn shows_the_forgery(text: &str) -> bool {
    text.contains("25340230000") || text.contains("2.534023") || text.contains("9999-12-31")
}

/// Item 8: in a shared directory (`/run/lock`), nobody plants an earlier
/// version's journal beside root's lock, with a success dated 9999, and
/// holds the lock with flock(1) so that root's fires skip. Root's `check
/// --max-age 1h --max-skips 3` is not OK, and neither `metrics`, `history`
/// nor `status` shows the forged success; each says once, naming the file,
/// why it was set aside. Root's own earlier journal beside a lock is still
/// read, and one of root's that others may write is set aside too.
#[test]
fn a_forged_earlier_journal_never_vouches_for_a_root_job() {
    let Some(mut ns) = Ns::new("a_forged_earlier_journal_never_vouches_for_a_root_job") else {
        return;
    };
    std::fs::write(ns.host_path("/tmp/forged"), FORGED).unwrap();
    ns.attacker(
        NOBODY,
        "cd /run/lock && cp /tmp/forged backup.lock.journal && cp /tmp/forged \
         backup.lock.journal.1 && : > backup.lock && \
         exec flock backup.lock sh -c 'touch /tmp/held; exec sleep 100000'",
        "/tmp/held",
    );
    let root = |args: &[&str]| {
        let mut all = vec!["--dir", "/run/lock"];
        all.extend_from_slice(args);
        ns.run(ns.oo(None, &all), LIMIT, &all.join(" "))
    };
    for _ in 0..5 {
        root(&["run", "backup", "--", "true"]).expect(75);
    }
    let set_aside = |out: &Out| {
        for f in ["backup.lock.journal", "backup.lock.journal.1"] {
            let path = format!("/run/lock/{f}`");
            assert_eq!(
                out.stderr.matches(&path).count(),
                1,
                "{f} named once: {out:#?}"
            );
        }
        out.says("nobody").says("an earlier version's journal");
    };

    let out = root(&["check", "backup", "--max-age", "1h", "--max-skips", "3"]);
    assert_ne!(out.code(), 0, "{out:#?}");
    assert!(out.stdout.starts_with("ONLYONE CRITICAL"), "{out:#?}");
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");
    set_aside(&out);

    let out = root(&["metrics", "backup"]);
    out.expect(0);
    assert!(
        out.stdout
            .contains("onlyone_last_success_timestamp_seconds{lock=\"backup\"} 0\n"),
        "{out:#?}"
    );
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");
    assert!(
        out.stdout
            .contains("onlyone_skipped_total{lock=\"backup\"} 5\n"),
        "{out:#?}"
    );
    set_aside(&out);

    let out = root(&["history", "backup", "--json"]);
    out.expect(0);
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");
    set_aside(&out);

    let out = root(&["status", "backup", "--json"]);
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");

    // Root's own earlier journal is believed; made writable by others, it
    // is not.
    ns.must(
        None,
        "cd /run/lock && cp /tmp/forged mine.lock.journal && chmod 0600 mine.lock.journal && \
         cp /tmp/forged loose.lock.journal && chmod 0666 loose.lock.journal",
    );
    let out = root(&["history", "mine", "--json"]);
    out.expect(0).quiet();
    assert!(shows_the_forgery(&out.stdout), "{out:#?}");
    let out = root(&["history", "loose", "--json"]);
    out.expect(0)
        .says("/run/lock/loose.lock.journal")
        .says("0666");
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");
}

/// Item 11: nobody's `ln -s /run/onlyone /tmp/jobs` (and `/tmp/r` to
/// `/run`). Root's `--dir /tmp/jobs` (or `$ONLYONE_DIR`, a relative
/// `--dir`, one through `..`, a lock given as a path through the link, the
/// link as a part of the path) is refused by every command, with an error
/// that names the link, its owner and the fix: root's `run` does not skip
/// on its default `backup` (75 before), `stop` does not stop it, `precheck`
/// fails open, `reap` says why. Root's own links (`/var/run`, one it made)
/// and nobody's own link, used by nobody, still work.
#[test]
fn a_link_another_account_made_never_leads_a_root_job() {
    let Some(mut ns) = Ns::new("a_link_another_account_made_never_leads_a_root_job") else {
        return;
    };
    let holder = ns.oo(None, &["run", "backup", "--", "sleep", "100000"]);
    ns.keep(holder);
    let record = ns.host_path("/run/onlyone/backup.lock");
    wait_until("root's backup to run", LIMIT, || {
        std::fs::read_to_string(&record).is_ok_and(|r| r.contains("cmdpid="))
    });
    let held = std::fs::read_to_string(&record).unwrap();
    ns.must(
        Some(NOBODY),
        "ln -s /run/onlyone /tmp/jobs && ln -s /run /tmp/r && mkdir /tmp/x",
    );
    let root = |args: &[&str]| ns.run(ns.oo(None, args), LIMIT, &args.join(" "));
    let refused = |out: &Out, link: &str| {
        out.says(&format!("`{link}`"))
            .says("symbolic link")
            .says("owned by nobody, not by you (root) or root")
            .says("sudo rm");
    };

    for (dir, link) in [
        ("/tmp/jobs", "/tmp/jobs"),
        ("/tmp/jobs/", "/tmp/jobs"),
        ("/tmp/r/onlyone", "/tmp/r"),
        ("/tmp/x/../jobs", "/tmp/jobs"),
        ("/run/../tmp/jobs", "/tmp/jobs"),
    ] {
        let out = root(&["--dir", dir, "run", "backup", "--", "true"]);
        out.expect(125);
        refused(&out, link);
    }
    let mut c = ns.sh(
        None,
        &format!(
            "cd /tmp && exec {} --dir jobs run backup -- true",
            support::ns::OO
        ),
    );
    c.env_remove("ONLYONE_DIR");
    let out = ns.run(c, LIMIT, "relative --dir");
    out.expect(125);
    refused(&out, "/tmp/jobs");
    let mut c = ns.oo(None, &["run", "backup", "--", "true"]);
    c.env("ONLYONE_DIR", "/tmp/jobs");
    let out = ns.run(c, LIMIT, "ONLYONE_DIR=/tmp/jobs");
    out.expect(125);
    refused(&out, "/tmp/jobs");
    let out = root(&["run", "/tmp/jobs/backup.lock", "--", "true"]);
    out.expect(125);
    refused(&out, "/tmp/jobs");

    // The commands that read, stop, reap and hold.
    let out = root(&["--dir", "/tmp/jobs", "stop", "backup"]);
    assert_ne!(out.code(), 0, "{out:#?}");
    refused(&out, "/tmp/jobs");
    let out = root(&["stop", "/tmp/jobs/backup.lock"]);
    assert_ne!(out.code(), 0, "{out:#?}");
    refused(&out, "/tmp/jobs");
    let out = root(&["--dir", "/tmp/jobs", "precheck", "backup"]);
    out.expect(0);
    refused(&out, "/tmp/jobs");
    let out = root(&["--dir", "/tmp/jobs", "reap", "backup"]);
    out.expect(0);
    refused(&out, "/tmp/jobs");
    let out = root(&["--dir", "/tmp/jobs", "status"]);
    assert_ne!(out.code(), 0, "{out:#?}");
    refused(&out, "/tmp/jobs");
    let out = root(&["--dir", "/tmp/jobs", "acquire", "other"]);
    assert_ne!(out.code(), 0, "{out:#?}");
    refused(&out, "/tmp/jobs");
    assert!(!ns.host_path("/run/onlyone/other.lock").exists());
    let out = root(&["--dir", "/tmp/jobs", "check", "backup"]);
    out.expect(3);
    assert!(out.stdout.contains("`/tmp/jobs`"), "{out:#?}");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        held,
        "root's backup still holds its lock"
    );

    roots_own_links_and_nobodys_for_nobody_still_lead(&ns);
}

/// Root's own links, and nobody's own link used by nobody, still lead to
/// their directories; root's own dangling link is no directory.
fn roots_own_links_and_nobodys_for_nobody_still_lead(ns: &Ns) {
    let root = |args: &[&str]| ns.run(ns.oo(None, args), LIMIT, &args.join(" "));
    // Root's own links, and nobody's own used by nobody; root's own
    // dangling link is no directory, as before.
    ns.must(
        None,
        "ln -s /run/onlyone /run/mine && ln -s /run/nowhere /run/dangling",
    );
    root(&["--dir", "/run/dangling", "run", "x", "--", "true"])
        .expect(125)
        .says("exists but is not a directory");
    root(&["--dir", "/var/run/onlyone", "run", "backup", "--", "true"]).expect(75);
    root(&["--dir", "/run/mine", "run", "backup", "--", "true"]).expect(75);
    root(&["--dir", "/run/mine", "run", "other", "--", "true"]).expect(0);
    ns.must(
        Some(NOBODY),
        "mkdir -m 0700 /tmp/n && ln -s /tmp/n /tmp/nlink",
    );
    let out = ns.run(
        ns.oo(
            Some(NOBODY),
            &["--dir", "/tmp/nlink", "run", "x", "--", "true"],
        ),
        LIMIT,
        "nobody through its own link",
    );
    out.expect(0);
    assert!(ns.host_path("/tmp/n").read_dir().is_ok());
}

/// A name in a shared lock directory with a file system mounted on it:
/// nobody makes a directory of each name onlyone looks up beside root's
/// locks in `/run/lock` and `/tmp` (a lock file, an earlier version's
/// journal, a waiter's ticket, the queue seat, a dead writer's temp
/// file, the removal guard, the reaper's guard) and mounts on each a FUSE
/// file system that never answers (as `fusermount3` would with
/// `allow_other`; root stands in). No command of root's waits on one:
/// each answers at once, and one that needs the name says it is a mount
/// point (`run` with its error code, never 75; `precheck` 0), while what
/// does not need it (another lock's run, a waiter passing a ticket, a
/// takeover's sweep) works on.
#[test]
fn a_mount_point_at_a_name_in_a_lock_directory_hangs_nothing() {
    let Some(mut ns) = Ns::new("a_mount_point_at_a_name_in_a_lock_directory") else {
        return;
    };
    // Root's `q` runs; root's `t` crashed (its wrapper killed).
    ns.keep(ns.oo(
        None,
        &["--dir", "/run/lock", "run", "q", "--", "sleep", "100000"],
    ));
    let q = ns.host_path("/run/lock/q.lock");
    wait_until("root's q to run", LIMIT, || {
        std::fs::read_to_string(&q).is_ok_and(|r| r.contains("cmdpid="))
    });
    ns.must(
        None,
        &format!(
            "{} --dir /run/lock run t -- sh -c 'kill -9 $PPID'; [ -e /run/lock/t.lock ]",
            support::ns::OO
        ),
    );
    let names = [
        "/run/lock/backup.lock",
        "/run/lock/old.lock.journal",
        "/run/lock/.q.lock.wait.00000000000000000001.0000000a",
        "/run/lock/.q.lock.queue",
        "/run/lock/.onlyone.1-1.0000000a.tmp",
        "/tmp/.onlyone-guard.0",
        "/tmp/.onlyone-reap.lock",
    ];
    ns.must(Some(NOBODY), &format!("mkdir {}", names.join(" ")));
    let Some(_mounts) = crate::attack_members::hang_at(&mut ns, &names) else {
        return;
    };
    let root = |args: &str| root_waits_on_no_mount(&ns, args);
    let lock = "/run/lock/backup.lock";
    let out = root("--dir /run/lock run backup -- true");
    out.expect(125);
    named_as_mount_point(&out, lock);
    let out = root(&format!("run {lock} -- true"));
    out.expect(125);
    named_as_mount_point(&out, lock);
    let out = root("--dir /run/lock precheck backup");
    out.expect(0);
    named_as_mount_point(&out, lock);
    let out = root("--dir /run/lock acquire backup");
    out.expect(125);
    named_as_mount_point(&out, lock);
    let out = root("--dir /run/lock stop backup");
    assert_ne!(out.code(), 0, "{out:#?}");
    named_as_mount_point(&out, lock);
    named_as_mount_point(&root("--dir /run/lock status backup"), lock);
    named_as_mount_point(&root("--dir /run/lock status"), lock);
    let out = root("--dir /run/lock reap backup");
    out.expect(0);
    named_as_mount_point(&out, lock);
    let out = root("--dir /run/lock check backup");
    out.expect(3);
    named_as_mount_point(&out, lock);

    passes_or_names_the_other_mount_points(&ns);
}

/// Runs root's onlyone with `args` (split at spaces) in `ns`, and fails
/// when it waited on a mount point.
fn root_waits_on_no_mount(ns: &Ns, args: &str) -> Out {
    let args: Vec<&str> = args.split(' ').collect();
    let out = ns.run(ns.oo(None, &args), Duration::from_secs(20), &args.join(" "));
    assert!(
        out.took < Duration::from_secs(5),
        "root's `{}` waited on a mount point: {out:#?}",
        args.join(" ")
    );
    out
}

/// Fails unless `out` names `name` as a mount point.
fn named_as_mount_point(out: &Out, name: &str) {
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(
        text.contains(&format!("`{name}`")) && text.contains("mount"),
        "{name} named as a mount point: {out:#?}"
    );
}

/// The names beside the hung lock file: an earlier version's journal and
/// q's queue seat are named, a ticket ahead and a dead writer's temp file
/// are passed over, and the removal and reaper's guards are named.
fn passes_or_names_the_other_mount_points(ns: &Ns) {
    let root = |args: &str| root_waits_on_no_mount(ns, args);
    // An earlier version's journal beside a lock.
    let journal = "/run/lock/old.lock.journal";
    let out = root("--dir /run/lock check old");
    out.expect(3);
    named_as_mount_point(&out, journal);
    named_as_mount_point(&root("--dir /run/lock history old"), journal);
    named_as_mount_point(&root("--dir /run/lock metrics old"), journal);

    // A ticket ahead in q's line is passed over; q's queue seat is named.
    let out = root("--dir /run/lock run --wait 1s q -- true");
    out.expect(75);
    let out = root("--dir /run/lock run --queue --wait 1s q -- true");
    out.expect(125);
    named_as_mount_point(&out, "/run/lock/.q.lock.queue");

    // A takeover sweeps dead writers' temp files, passing the mount point.
    root("--dir /run/lock run t -- true")
        .expect(0)
        .says("took over");
    root("--dir /run/lock run other -- true").expect(0);

    // The removal guard and the reaper's guard.
    let out = root("--dir /tmp run g -- true");
    assert_ne!(out.code(), 75, "{out:#?}");
    named_as_mount_point(&out, "/tmp/.onlyone-guard.0");
    let out = root("--dir /tmp reap x");
    out.expect(0);
    named_as_mount_point(&out, "/tmp/.onlyone-reap.lock");
}

/// A hard link of root's symbolic link: where `fs.protected_hardlinks` is
/// 0, nobody can give root's link (`/var/run`, on the filesystem of
/// `/tmp`) a second name of its own choosing, `/tmp/jobs`, and that name
/// is still root's. Root's `--dir /tmp/jobs` is refused, naming the link
/// (it does not skip on root's own `backup`); a link of root's with two
/// names where only root writes is followed. (The sysctl is 1 here: root
/// makes the hard link, standing in for nobody.)
#[test]
fn a_hard_link_of_roots_link_in_a_shared_directory_never_leads_a_root_job() {
    let Some(mut ns) = Ns::new("a_hard_link_of_roots_link_in_a_shared_directory") else {
        return;
    };
    ns.keep(ns.oo(None, &["run", "backup", "--", "sleep", "100000"]));
    let record = ns.host_path("/run/onlyone/backup.lock");
    wait_until("root's backup to run", LIMIT, || {
        std::fs::read_to_string(&record).is_ok_and(|r| r.contains("cmdpid="))
    });
    ns.must(
        None,
        "ln -s /run/onlyone /tmp/.roots && ln -P /tmp/.roots /tmp/jobs && \
         [ \"$(stat -c %h%U /tmp/jobs)\" = 2root ] && \
         ln -s /run/onlyone /run/one && ln -P /run/one /run/two",
    );
    let root = |args: &[&str]| ns.run(ns.oo(None, args), LIMIT, &args.join(" "));
    for dir in ["/tmp/jobs", "/tmp/jobs/", "/tmp/.roots"] {
        let out = root(&["--dir", dir, "run", "backup", "--", "true"]);
        out.expect(125).says("hard link").says("sudo rm");
        assert!(
            out.stderr
                .contains(&format!("`{}`", dir.trim_end_matches('/'))),
            "{out:#?}"
        );
    }
    let out = root(&["run", "/tmp/jobs/backup.lock", "--", "true"]);
    out.expect(125).says("`/tmp/jobs`").says("hard link");
    let out = root(&["--dir", "/tmp/jobs", "precheck", "backup"]);
    out.expect(0).says("hard link");
    root(&["--dir", "/run/two", "run", "backup", "--", "true"]).expect(75);
}
