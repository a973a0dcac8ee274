//! History survives a reboot (SPEC "Run history and alerts"; issue 23
//! item 1): journals live in a persistent state directory, found again by
//! name or path once `/run` (or `/tmp`) is emptied; an earlier version's
//! journal beside the lock is still read; the state directory is refused
//! when another account made it or may write in it. The reboots and the
//! attacks run in a private mount namespace ([`support::ns::Ns`]) whose
//! `/run`, `/tmp`, `/var/lib` and `/var/tmp` are fresh tmpfs.

use crate::support;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use support::ns::{NO_PASSWD, NOBODY, Ns};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);
/// What "promptly" is: a run takes a fraction of a second, the journal's
/// longest wait one second.
const PROMPT: Duration = Duration::from_secs(6);

/// The owner and mode of a path in the namespace.
fn owner_mode(ns: &Ns, path: &str) -> (u32, u32) {
    let m = std::fs::symlink_metadata(ns.host_path(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    (m.uid(), m.mode() & 0o7777)
}

/// onlyone as `uid` with `HOME` set to `home`.
fn oo_home(ns: &Ns, uid: u32, home: &str, args: &[&str]) -> std::process::Command {
    let mut c = ns.oo(Some(uid), args);
    c.env("HOME", home);
    c
}

/// After the "reboot" (the lock directory gone), `check --max-age`,
/// `history` (by name and by path), `metrics` and `status` with no lock
/// named still know the run.
fn knows_the_run(ns: &Ns, run: impl Fn(&[&str]) -> Out, name: &str, lock: &str) {
    assert!(
        !ns.host_path(lock).exists(),
        "the lock is gone with the reboot"
    );
    let out = run(&["check", name, "--max-age", "1h"]);
    out.expect(0);
    assert!(
        out.stdout
            .starts_with(&format!("ONLYONE OK - {name}: last run exit 0")),
        "{out:#?}"
    );
    for l in [name, lock] {
        let out = run(&["history", l]);
        out.expect(0);
        assert!(
            out.stdout.contains("1 run(s), 1 of 1 succeeded"),
            "history {l}: {out:#?}"
        );
    }
    let out = run(&["metrics"]);
    out.expect(0);
    assert!(
        out.stdout
            .contains(&format!("onlyone_last_exit_code{{lock=\"{name}\"}} 0")),
        "{out:#?}"
    );
    let out = run(&["status", "--json"]);
    out.expect(0);
    let locks = out.json()["locks"].clone();
    let me = locks
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("status lists {name}: {out:#?}"))
        .clone();
    assert_eq!(me["last_run"]["exit"], 0, "{me:#}");
}

/// (a) root's job in the default `/run/onlyone` runs; the boot empties
/// `/run`; its journal is in `/var/lib/onlyone` (0700, root's), under the
/// name `systemd-escape --path` gives the lock, and every reader finds it.
#[test]
fn a_root_jobs_history_survives_a_reboot() {
    let Some(ns) = Ns::new("a_root_jobs_history_survives_a_reboot") else {
        return;
    };
    let run = |args: &[&str]| ns.run(ns.oo(None, args), LIMIT, &args.join(" "));
    run(&["run", "nightly", "--", "true"]).expect(0).quiet();
    assert_eq!(owner_mode(&ns, "/var/lib/onlyone"), (0, 0o700));
    assert_eq!(
        owner_mode(&ns, "/var/lib/onlyone/run-onlyone-nightly.lock.journal"),
        (0, 0o600)
    );
    assert!(!ns.host_path("/run/onlyone/nightly.lock.journal").exists());
    ns.must(None, "rm -rf /run/onlyone");
    knows_the_run(&ns, run, "nightly", "/run/onlyone/nightly.lock");
    // The next run after the boot appends to the same journal.
    run(&["run", "nightly", "--", "true"]).expect(0).quiet();
    let out = run(&["history", "nightly"]);
    out.expect(0);
    assert!(out.stdout.contains("2 run(s)"), "{out:#?}");
}

/// (b) Ordinary users with the default directories: `nobody` with
/// `HOME=/nonexistent` (as `runuser -u nobody` leaves it) keeps its
/// journals in `/var/tmp/onlyone-state-65534`; a uid with no passwd entry
/// and a home of its own in `~/.local/state/onlyone`, each missing part
/// made 0700. Both survive the boot that empties `/tmp`.
#[test]
fn an_ordinary_users_history_survives_a_reboot() {
    let Some(ns) = Ns::new("an_ordinary_users_history_survives_a_reboot") else {
        return;
    };
    // nobody: no home of its own.
    let run = |args: &[&str]| {
        ns.run(
            oo_home(&ns, NOBODY, "/nonexistent", args),
            LIMIT,
            &args.join(" "),
        )
    };
    run(&["run", "job", "--", "true"]).expect(0).quiet();
    let state = "/var/tmp/onlyone-state-65534";
    assert_eq!(owner_mode(&ns, state), (NOBODY, 0o700));
    assert_eq!(
        owner_mode(
            &ns,
            &format!("{state}/tmp-onlyone\\x2d65534-job.lock.journal")
        ),
        (NOBODY, 0o600)
    );
    ns.must(None, "rm -rf /tmp/onlyone-65534");
    knows_the_run(&ns, run, "job", "/tmp/onlyone-65534/job.lock");

    // A uid with a home of its own (no passwd entry: HOME is all it has).
    let home = "/var/lib/home-4242";
    ns.must(
        None,
        &format!("mkdir -m 0755 {home} && chown {NO_PASSWD}:{NO_PASSWD} {home}"),
    );
    let run = |args: &[&str]| ns.run(oo_home(&ns, NO_PASSWD, home, args), LIMIT, &args.join(" "));
    run(&["run", "job", "--", "true"]).expect(0).quiet();
    for d in [".local", ".local/state", ".local/state/onlyone"] {
        assert_eq!(
            owner_mode(&ns, &format!("{home}/{d}")),
            (NO_PASSWD, 0o700),
            "{d}"
        );
    }
    assert!(
        ns.host_path(&format!(
            "{home}/.local/state/onlyone/tmp-onlyone\\x2d4242-job.lock.journal"
        ))
        .exists()
    );
    assert!(!ns.host_path("/var/tmp/onlyone-state-4242").exists());
    ns.must(None, "rm -rf /tmp/onlyone-4242");
    knows_the_run(&ns, run, "job", "/tmp/onlyone-4242/job.lock");
}

/// A journal line of an earlier version's run.
fn legacy_run(token: &str, start: f64) -> String {
    format!(
        "{{\"v\":1,\"time\":{start},\"event\":\"start\",\"token\":\"{token}\",\"pid\":7,\
         \"mode\":\"run\"}}\n\
         {{\"v\":1,\"time\":{},\"event\":\"end\",\"token\":\"{token}\",\"pid\":7,\"exit\":0,\
         \"duration\":1.0}}\n",
        start + 1.0
    )
}

/// (c) An earlier version's journal beside the lock (both generations) is
/// read in place and left as it was; the runs after it go to the state
/// directory; `history` shows all three, the oldest last.
#[test]
fn an_earlier_versions_journal_beside_the_lock_is_still_read() {
    let sb = Sandbox::new("ONLYONE_STATE_MARK");
    let older = legacy_run("old1", 1_700_000_000.0);
    let current = legacy_run("old2", 1_700_000_100.0);
    put(&sb.dir().join("j.lock.journal.1"), &older);
    put(&sb.dir().join("j.lock.journal"), &current);
    let oo = |args: &[&str]| {
        let mut c = sb.program(BIN);
        c.arg("--dir").arg(sb.dir()).args(args);
        finish(c, LIMIT)
    };
    oo(&["run", "j", "--", "true"]).expect(0).quiet();
    assert_eq!(
        std::fs::read_to_string(sb.dir().join("j.lock.journal")).unwrap(),
        current,
        "never written again"
    );
    assert_eq!(
        std::fs::read_to_string(sb.dir().join("j.lock.journal.1")).unwrap(),
        older
    );
    let ours = std::fs::read_to_string(sb.journal_of(&sb.lock("j"))).unwrap();
    assert_eq!(ours.lines().count(), 2, "{ours}");
    let out = oo(&["history", "j", "--json"]);
    out.expect(0);
    let tokens: Vec<String> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["token"].to_string())
        .collect();
    assert_eq!(tokens.len(), 3, "{out:#?}");
    assert_eq!(tokens[1], "\"old2\"", "{tokens:?}");
    assert_eq!(tokens[2], "\"old1\"", "{tokens:?}");
    // A free lock known only from its earlier journal is still listed.
    put(
        &sb.dir().join("k.lock.journal"),
        legacy_run("k1", 1_700_000_000.0),
    );
    let out = oo(&["metrics"]);
    out.expect(0);
    assert!(out.stdout.contains("lock=\"k\""), "{out:#?}");
    assert!(out.stdout.contains("lock=\"j\""), "{out:#?}");
}

/// (d) A uid with no home of its own: its fallback state directory
/// `/var/tmp/onlyone-state-4242` was made first by nobody, with a link in
/// it where the journal goes. The run runs, says once why nothing was
/// written (naming the directory and the fix), nothing is written through
/// the link, and `history` refuses to read what nobody could have put
/// there.
#[test]
fn a_squatted_fallback_state_directory_is_refused() {
    let Some(ns) = Ns::new("a_squatted_fallback_state_directory_is_refused") else {
        return;
    };
    let state = "/var/tmp/onlyone-state-4242";
    ns.must(
        Some(NOBODY),
        &format!(
            "mkdir -m 0777 {state} && touch /var/tmp/bait && \
             ln -s /var/tmp/bait '{state}/tmp-onlyone\\x2d4242-job.lock.journal'"
        ),
    );
    let run = |args: &[&str]| {
        ns.run(
            oo_home(&ns, NO_PASSWD, "/nonexistent", args),
            LIMIT,
            &args.join(" "),
        )
    };
    let out = run(&["run", "job", "--", "sh", "-c", "exit 3"]);
    out.expect(3).within(PROMPT).says(state).says("nobody");
    assert_eq!(
        out.stderr.matches("could not write the journal").count(),
        1,
        "said once: {out:#?}"
    );
    assert!(out.stderr.contains("sudo rm -r"), "the fix: {out:#?}");
    assert_eq!(
        std::fs::metadata(ns.host_path("/var/tmp/bait"))
            .unwrap()
            .len(),
        0,
        "nothing written through the link"
    );
    run(&["run", "-q", "job", "--", "true"]).expect(0).quiet();
    let out = run(&["history", "job"]);
    assert_ne!(out.code(), 0, "{out:#?}");
    out.says(state);
    let out = run(&["check", "job"]);
    out.expect(3);
    assert!(out.stdout.contains(state), "{out:#?}");
}

/// (d) root's `--state-dir` in a directory nobody may write (sticky or
/// not), or nobody's own: refused for writing, with the fix; nobody's
/// link and FIFO there are neither followed nor waited on. A link nobody
/// left in a directory root then made its own alone is refused as a
/// journal, and said.
#[test]
fn a_state_directory_others_can_write_is_refused_for_writing() {
    let Some(ns) = Ns::new("a_state_directory_others_can_write_is_refused") else {
        return;
    };
    ns.must(
        None,
        "mkdir -m 1777 /run/sticky && mkdir -m 0777 /run/open && echo root > /run/victim",
    );
    ns.must(
        Some(NOBODY),
        "mkdir -m 0700 /tmp/nobodys && \
         for d in /run/sticky /run/open; do \
           ln -s /run/victim $d/run-onlyone-job.lock.journal && \
           mkfifo $d/run-onlyone-fifo.lock.journal; done",
    );
    let root = |args: &[&str]| ns.run(ns.oo(None, args), LIMIT, &args.join(" "));
    for (dir, why) in [
        ("/run/sticky", "world-writable"),
        ("/run/open", "world-writable"),
        ("/tmp/nobodys", "owned by nobody"),
    ] {
        for job in ["job", "fifo"] {
            let out = root(&["--state-dir", dir, "run", job, "--", "true"]);
            out.expect(0)
                .within(PROMPT)
                .says(&format!(
                    "the state directory `{dir}` (from --state-dir) is refused"
                ))
                .says(why)
                .says("--state-dir DIR");
        }
    }
    assert_eq!(
        std::fs::read_to_string(ns.host_path("/run/victim")).unwrap(),
        "root\n"
    );
    // Made root's alone, with nobody's link and FIFO still in it: opened
    // without following, without waiting.
    ns.must(None, "chown root /run/open && chmod 0755 /run/open");
    for job in ["job", "fifo"] {
        let out = root(&["--state-dir", "/run/open", "run", job, "--", "true"]);
        out.expect(0)
            .within(PROMPT)
            .says("could not write the journal");
        assert!(
            out.stderr.contains("symbolic link") || out.stderr.contains("FIFO"),
            "{out:#?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ns.host_path("/run/victim")).unwrap(),
        "root\n"
    );
    // A state directory root made loose itself is refused as well.
    ns.must(None, "mkdir -m 0700 /run/mine && chmod g+w /run/mine");
    root(&["--state-dir", "/run/mine", "run", "job", "--", "true"])
        .expect(0)
        .says("chmod go-w /run/mine");
}

/// (e) `--state-dir` over `$ONLYONE_STATE_DIR` over the default
/// (`/var/lib/onlyone` for root; `$XDG_STATE_HOME/onlyone` for a user when
/// it is absolute, else the home's, else the fallback).
#[test]
fn the_state_directory_comes_from_the_flag_the_environment_or_the_default() {
    let Some(ns) = Ns::new("the_state_directory_comes_from_the_flag") else {
        return;
    };
    let journal = "run-onlyone-j.lock.journal";
    let with_env = |uid: Option<u32>, env: Option<&str>, args: &[&str]| {
        let mut c = ns.oo(uid, args);
        if let Some(e) = env {
            c.env(STATE_VAR, e);
        }
        ns.run(c, LIMIT, &args.join(" ")).expect(0);
    };
    with_env(None, None, &["run", "j", "--", "true"]);
    assert!(
        ns.host_path(&format!("/var/lib/onlyone/{journal}"))
            .exists()
    );
    with_env(None, Some("/run/env"), &["run", "j", "--", "true"]);
    assert!(ns.host_path(&format!("/run/env/{journal}")).exists());
    with_env(
        None,
        Some("/run/env"),
        &["--state-dir", "/run/flag", "run", "j", "--", "true"],
    );
    assert!(ns.host_path(&format!("/run/flag/{journal}")).exists());
    // Each read where it was written: one run each, the default's two.
    let runs = |env: Option<&str>, args: &[&str]| {
        let mut c = ns.oo(None, args);
        if let Some(e) = env {
            c.env(STATE_VAR, e);
        }
        let out = ns.run(c, LIMIT, "history");
        out.expect(0);
        out.stdout.lines().skip(2).count()
    };
    assert_eq!(runs(None, &["history", "j"]), 1);
    assert_eq!(runs(Some("/run/env"), &["history", "j"]), 1);
    assert_eq!(
        runs(
            Some("/run/env"),
            &["--state-dir", "/run/flag", "history", "j"]
        ),
        1
    );
    assert_eq!(runs(Some(""), &["history", "j"]), 1, "empty is unset");

    // A user: an absolute XDG_STATE_HOME; a relative one is none.
    let user = |xdg: &str| {
        let mut c = oo_home(&ns, NOBODY, "/nonexistent", &["run", "u", "--", "true"]);
        c.env("XDG_STATE_HOME", xdg);
        ns.run(c, LIMIT, "run u").expect(0).quiet();
    };
    ns.must(Some(NOBODY), "mkdir -m 0700 /var/tmp/xdg");
    user("/var/tmp/xdg");
    let name = "tmp-onlyone\\x2d65534-u.lock.journal";
    assert!(
        ns.host_path(&format!("/var/tmp/xdg/onlyone/{name}"))
            .exists()
    );
    assert!(!ns.host_path("/var/tmp/onlyone-state-65534").exists());
    user("xdg");
    assert!(
        ns.host_path(&format!("/var/tmp/onlyone-state-65534/{name}"))
            .exists()
    );
}
