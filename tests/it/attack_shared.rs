//! Another account's files in a shared lock directory (issue 44): root's
//! job keeps its locks in `/run/lock` (1777, where the docs say a job may),
//! and `nobody` writes files there: a slot record carrying root's live
//! token, a live holder naming root's process, a slot file of its own, a
//! record naming root's script. A file speaks only for the account that
//! owns it (doc/security.md, "Shared lock directories"): another account's
//! record is that account's holder, never a run of root's job; it is never
//! closed, stopped or released as one, its token never reaches root's
//! journal, its `slots=` is never the lock's number of slots, and no
//! process it names is signalled. Each attack runs in a private mount
//! namespace with fresh tmpfs `/run` and `/tmp` ([`support::ns::Ns`]).

use crate::support;

use std::time::Duration;

use support::ns::{NOBODY, Ns, wait_for_exec};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);
const DIR: &str = "/run/lock";

/// Root's run of `job` in `/run/lock` with `--slots N` (or none): its
/// command says it is ready (`/tmp/NAME.ready`), waits for `/tmp/NAME.go`
/// and exits with `code`. Returns the wrapper's pid once the command runs.
fn roots_run(ns: &mut Ns, name: &str, slots: Option<&str>, code: i32) -> u32 {
    let script = format!(
        "touch /tmp/{name}.ready; until [ -e /tmp/{name}.go ]; do sleep 0.02; done; exit {code}"
    );
    let mut args = vec!["--dir", DIR, "run"];
    if let Some(n) = slots {
        args.extend(["--slots", n]);
    }
    args.extend(["job", "--", "sh", "-c", &script]);
    let pid = ns.keep(ns.oo(None, &args));
    let ready = ns.host_path(&format!("/tmp/{name}.ready"));
    wait_until(&format!("{name} to run"), LIMIT, || {
        ready.exists() || !running(pid)
    });
    assert!(ready.exists(), "root's run {name} did not start");
    pid
}

/// Lets root's run `name` (wrapper `pid`) end, and waits for its wrapper
/// to exit.
fn end_run(ns: &Ns, name: &str, pid: u32) {
    ns.must(None, &format!("touch /tmp/{name}.go"));
    wait_until(&format!("{name} to end"), LIMIT, || !running(pid));
}

/// The value of `key=` in the file at `path` of the namespace.
fn value(ns: &Ns, path: &str, key: &str) -> String {
    std::fs::read_to_string(ns.host_path(path))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_owned))
        .unwrap_or_else(|| panic!("{path} has no {key}="))
}

/// Writes `text` at `path` as nobody (the file is nobody's).
fn write_as_nobody(ns: &Ns, path: &str, text: &str) {
    ns.must(
        Some(NOBODY),
        &format!("cat > {path}.t <<'EOF'\n{text}EOF\nmv {path}.t {path}"),
    );
    let owner =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(ns.host_path(path)).unwrap());
    assert_eq!(owner, NOBODY, "{path} is nobody's");
}

/// A live process of nobody's own, and its start time.
fn nobodys_process(ns: &mut Ns) -> (u32, u64) {
    let pid = ns.keep(ns.cmd(Some(NOBODY), "sleep", &["100000"]));
    wait_for_exec(pid, "sleep");
    (pid, start_of(pid))
}

/// A record of a run as nobody writes it: owner `pid`/`start`, `token`,
/// `slots`, and any `more` lines.
fn forged(pid: u32, start: u64, token: &str, more: &str) -> String {
    format!(
        "{pid}\nstart={start}\nboot={}\ntoken={token}\nsince=1\nmode=run\ncmd=forged\n{more}\
         onlyone=1\n",
        boot_id()
    )
}

/// `history --json` of `job`, as root: each run's token and outcome.
fn runs(ns: &Ns) -> Vec<(String, String, Option<i64>)> {
    let out = ns.run(
        ns.oo(None, &["--dir", DIR, "history", "--json", "job"]),
        LIMIT,
        "history",
    );
    assert_eq!(out.code(), 0, "{out:#?}");
    out.stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["token"].is_string())
        .map(|r| {
            (
                r["token"].as_str().unwrap_or_default().to_owned(),
                r["outcome"].as_str().unwrap_or_default().to_owned(),
                r["exit"].as_i64(),
            )
        })
        .collect()
}

/// Root's `check` of `job`: its exit code and first line.
fn check(ns: &Ns, more: &[&str]) -> (i32, String) {
    let mut args = vec!["--dir", DIR, "check"];
    args.extend(more);
    args.push("job");
    let out = ns.run(ns.oo(None, &args), LIMIT, "check");
    (
        out.code(),
        out.stdout.lines().next().unwrap_or_default().to_owned(),
    )
}

/// A slot record that nobody wrote with root's live token and a dead
/// owner is another account's stale file: root's next fire takes the slot
/// without closing root's live run, whose real end (exit 3) is the one
/// history, check and metrics give.
#[test]
fn a_forged_slot_record_with_roots_token_never_closes_roots_run() {
    let Some(mut ns) = Ns::new("a_forged_slot_record_with_roots_token_never_closes_roots_run")
    else {
        return;
    };
    let a = roots_run(&mut ns, "a", Some("2"), 3);
    let token = value(&ns, "/run/lock/job.lock", "token");
    let (dead, start) = dead_process();
    write_as_nobody(
        &ns,
        "/run/lock/job.lock.slot.1",
        &forged(dead, start, &token, "slots=2\n"),
    );
    // Root's next fire takes the stale slot.
    let out = ns.run(
        ns.oo(
            None,
            &["--dir", DIR, "run", "--slots", "2", "job", "--", "true"],
        ),
        LIMIT,
        "root's next fire",
    );
    assert_eq!(out.code(), 0, "{out:#?}");
    end_run(&ns, "a", a);
    let all = runs(&ns);
    let mine: Vec<_> = all.iter().filter(|(t, _, _)| *t == token).collect();
    assert_eq!(mine.len(), 1, "root's run once in history: {all:?}");
    assert_eq!(
        (mine[0].1.as_str(), mine[0].2),
        ("exit", Some(3)),
        "root's run ended with exit 3, not closed by nobody's file: {all:?}"
    );
    let (code, line) = check(&ns, &[]);
    assert_eq!(code, 2, "check is CRITICAL: {line}");
    assert!(line.contains("exit 3"), "{line}");
    let metrics = ns.run(
        ns.oo(None, &["--dir", DIR, "metrics", "job"]),
        LIMIT,
        "metrics",
    );
    assert!(
        metrics
            .stdout
            .contains("onlyone_last_exit_code{lock=\"job\"} 3"),
        "{}",
        metrics.stdout
    );
}

/// A live holder that nobody forged with `since=1` and root's token is
/// never "the oldest run" that `run --replace --slots 2` stops: nobody's
/// process gets no signal, no stop is recorded under root's token for it,
/// and the run replaced is root's own.
#[test]
fn replace_never_stops_a_forged_holder_as_roots_run() {
    let Some(mut ns) = Ns::new("replace_never_stops_a_forged_holder_as_roots_run") else {
        return;
    };
    let a = roots_run(&mut ns, "a", Some("2"), 3);
    let token = value(&ns, "/run/lock/job.lock", "token");
    let (pid, start) = nobodys_process(&mut ns);
    write_as_nobody(
        &ns,
        "/run/lock/job.lock.slot.1",
        &forged(pid, start, &token, "slots=2\n"),
    );
    let out = ns.run(
        ns.oo(
            None,
            &[
                "--dir",
                DIR,
                "run",
                "--replace",
                "--kill-after",
                "5s",
                "--slots",
                "2",
                "job",
                "--",
                "true",
            ],
        ),
        LIMIT,
        "root's --replace",
    );
    assert!(running(pid), "nobody's process was never signalled");
    assert_eq!(state_of(pid), Some('S'), "nobody's sleep untouched");
    // Root's own run was the one replaced (or, all slots being held, the
    // fire skipped); either way no run of root's reads "stopped" while
    // it went on.
    if running(a) {
        assert_eq!(out.code(), 75, "{out:#?}");
        end_run(&ns, "a", a);
        let all = runs(&ns);
        let mine: Vec<_> = all.iter().filter(|(t, _, _)| *t == token).collect();
        assert_eq!(
            (mine[0].1.as_str(), mine[0].2),
            ("exit", Some(3)),
            "{all:?}"
        );
    } else {
        assert_eq!(out.code(), 0, "{out:#?}");
    }
}

/// A record whose wrapper is nobody's own live process and whose command
/// names a root process that leads its group: root's `stop` ends nobody's
/// holder as another account's (what the record may name: nobody's own
/// process), sends nothing to root's group (a stopped root daemon stays
/// stopped), and `status` never tells the admin to `kill -CONT` root's
/// process.
#[test]
fn stop_never_continues_a_group_a_forged_record_names() {
    let Some(mut ns) = Ns::new("stop_never_continues_a_group_a_forged_record_names") else {
        return;
    };
    // A root daemon that leads its own process group, stopped.
    let daemon = ns.keep(ns.cmd(None, "setsid", &["sleep", "100000"]));
    wait_for_exec(daemon, "sleep");
    let dstart = start_of(daemon);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(daemon as i32).unwrap(),
        rustix::process::Signal::STOP,
    )
    .unwrap();
    wait_until("the daemon to stop", LIMIT, || {
        state_of(daemon) == Some('T')
    });
    let (pid, start) = nobodys_process(&mut ns);
    write_as_nobody(
        &ns,
        "/run/lock/job.lock",
        &forged(
            pid,
            start,
            "0123456789abcdef0123456789abcdef",
            &format!("cmdpid={daemon}\ncmdstart={dstart}\n"),
        ),
    );
    let status = ns.run(
        ns.oo(None, &["--dir", DIR, "status", "job"]),
        LIMIT,
        "status",
    );
    assert!(
        !status.stdout.contains(&format!("kill -CONT {daemon}")),
        "{status:#?}"
    );
    assert!(status.stdout.contains("nobody"), "{status:#?}");
    let stop = ns.run(
        ns.oo(None, &["--dir", DIR, "stop", "--kill-after", "1s", "job"]),
        LIMIT,
        "root's stop",
    );
    assert_eq!(stop.code(), 0, "{stop:#?}");
    assert!(
        stop.stderr.contains("another account's (nobody)"),
        "{stop:#?}"
    );
    assert_eq!(state_of(daemon), Some('T'), "root's daemon still stopped");
    let journals = roots_journals(&ns);
    assert!(
        !journals.contains("0123456789abcdef0123456789abcdef"),
        "nobody's token is not in root's journal: {journals}"
    );
}

/// Everything in root's state directory's journals.
fn roots_journals(ns: &Ns) -> String {
    let dir = ns.host_path("/var/lib/onlyone");
    let mut all = String::new();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().contains("journal") {
            all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    all
}

/// A slot file of nobody's own (`job.lock.slot.1`, a live holder that says
/// `slots=2`) neither stops root's plain job (it runs, 0) nor counts as
/// root's run in `check`, which goes on reporting root's failure.
#[test]
fn another_accounts_slot_file_neither_stops_nor_hides_a_plain_job() {
    let Some(mut ns) = Ns::new("another_accounts_slot_file_neither_stops_nor_hides_a_plain_job")
    else {
        return;
    };
    let failed = ns.run(
        ns.oo(
            None,
            &["--dir", DIR, "run", "job", "--", "sh", "-c", "exit 4"],
        ),
        LIMIT,
        "root's failing run",
    );
    assert_eq!(failed.code(), 4, "{failed:#?}");
    let (code, line) = check(&ns, &["--max-runtime", "1h"]);
    assert_eq!(code, 2, "{line}");
    let (pid, start) = nobodys_process(&mut ns);
    write_as_nobody(
        &ns,
        "/run/lock/job.lock.slot.1",
        &forged(pid, start, "0123456789abcdef0123456789abcdef", "slots=2\n"),
    );
    let (code, line) = check(&ns, &["--max-runtime", "1h"]);
    assert_eq!(code, 2, "still CRITICAL: {line}");
    assert!(line.contains("exit 4"), "{line}");
    assert!(!line.contains("running now"), "{line}");
    assert!(
        !line.contains("lasted"),
        "nobody's since= is no runtime: {line}"
    );
    let out = ns.run(
        ns.oo(None, &["--dir", DIR, "run", "job", "--", "true"]),
        LIMIT,
        "root's plain run",
    );
    assert_eq!(out.code(), 0, "{out:#?}");
    let status = ns.run(
        ns.oo(None, &["--dir", DIR, "status", "--json", "job"]),
        LIMIT,
        "status",
    );
    let v: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let slot = &v["locks"][0]["slot_holders"][0];
    assert_eq!(slot["other_account"], "nobody", "{v:#}");
    assert!(slot["token"].is_null(), "{v:#}");
    assert!(v["locks"][0]["slot_count"].is_null(), "{v:#}");
}

/// Root's script holds slot 1; nobody writes slot 0 naming the script's
/// shell (its pid and start time, read from `/proc`). The script's
/// `release` lets its own slot go, leaves nobody's file alone and
/// journals its own run's release, never nobody's token.
#[test]
fn release_frees_the_scripts_own_slot_never_a_forged_one() {
    let Some(mut ns) = Ns::new("release_frees_the_scripts_own_slot_never_a_forged_one") else {
        return;
    };
    // Slot 0 is held by a run of root's while the script takes slot 1.
    let a = roots_run(&mut ns, "a", Some("2"), 0);
    let script = ns.keep(ns.sh(
        None,
        "eval \"$(onlyone --dir /run/lock acquire --slots 2 --export job)\" || exit 9; \
         echo \"$ONLYONE_SLOT\" > /tmp/s.slot; touch /tmp/s.ready; \
         until [ -e /tmp/s.go ]; do sleep 0.02; done; \
         onlyone --dir /run/lock release job; echo $? > /tmp/s.rc; \
         until [ -e /tmp/s.end ]; do sleep 0.02; done",
    ));
    let ready = ns.host_path("/tmp/s.ready");
    wait_until("the script to hold its slot", LIMIT, || {
        ready.exists() || !running(script)
    });
    assert!(ready.exists(), "the script could not acquire");
    let slot = std::fs::read_to_string(ns.host_path("/tmp/s.slot")).unwrap();
    assert_eq!(slot.trim(), "1");
    let own = value(&ns, "/run/lock/job.lock.slot.1", "token");
    end_run(&ns, "a", a);
    let start = start_of(script);
    write_as_nobody(
        &ns,
        "/run/lock/job.lock",
        &format!(
            "{script}\nstart={start}\nboot={}\ntoken=fedcba9876543210fedcba9876543210\n\
             since=1\nmode=script\ncmd=forged\nslots=2\nonlyone=1\n",
            boot_id()
        ),
    );
    ns.must(None, "touch /tmp/s.go");
    let rc = ns.host_path("/tmp/s.rc");
    wait_until("the script's release", LIMIT, || rc.exists());
    assert_eq!(std::fs::read_to_string(&rc).unwrap().trim(), "0");
    assert!(
        !ns.host_path("/run/lock/job.lock.slot.1").exists(),
        "the script's own slot is let go"
    );
    assert!(
        ns.host_path("/run/lock/job.lock").exists(),
        "nobody's file is left alone"
    );
    ns.must(None, "touch /tmp/s.end");
    let all = runs(&ns);
    assert!(
        all.iter()
            .all(|(t, _, _)| t != "fedcba9876543210fedcba9876543210"),
        "nobody's token is not in root's journal: {all:?}"
    );
    let mine: Vec<_> = all.iter().filter(|(t, _, _)| *t == own).collect();
    assert_eq!(mine.len(), 1, "{all:?}");
    assert_eq!(mine[0].1, "released", "{all:?}");
}

/// A symbolic link of nobody's at `job.lock.slot.1`, while slot 0 is free:
/// root's plain job and its job of 2 slots run (slot 0 is free), and
/// `status` shows the link, another account's, unknown, beside a free lock.
#[test]
fn a_link_at_a_slot_is_shown_and_blocks_no_free_slot() {
    let Some(ns) = Ns::new("a_link_at_a_slot_is_shown_and_blocks_no_free_slot") else {
        return;
    };
    ns.must(Some(NOBODY), "ln -s /etc/passwd /run/lock/job.lock.slot.1");
    for args in [vec!["run"], vec!["run", "--slots", "2"]] {
        let mut all = vec!["--dir", DIR];
        all.extend(args);
        all.extend(["job", "--", "true"]);
        let out = ns.run(ns.oo(None, &all), LIMIT, "root's run");
        assert_eq!(out.code(), 0, "{out:#?}");
    }
    let status = ns.run(
        ns.oo(None, &["--dir", DIR, "status", "--json", "job"]),
        LIMIT,
        "status",
    );
    assert_eq!(status.code(), 0, "{status:#?}");
    let v: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let lock = &v["locks"][0];
    assert_eq!(lock["state"], "free", "{v:#}");
    let slot = &lock["slot_holders"][0];
    assert_eq!(slot["name"], "job[1]", "{v:#}");
    assert_eq!(slot["other_account"], "nobody", "{v:#}");
    assert_eq!(slot["state"], "unknown", "{v:#}");
    let (code, line) = check(&ns, &[]);
    assert_eq!(code, 0, "{line}");
}
