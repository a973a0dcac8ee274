//! Another account against the time root's commands take to judge a lock
//! in a shared directory (issue 44, item 3): a judgement waits a while
//! for a process in exit(2) whose memory is gone (it may still hold the
//! run's files), and another account can keep any number of its own
//! processes in that state. Every wait of one judgement draws on one
//! budget, so K of them cost one budget, not K; and `check` and `status`
//! have a default deadline (doc/security.md, "Time").
//!
//! The attacker is `nobody`, in a private mount and PID namespace with
//! fresh tmpfs `/run` and `/tmp` ([`Ns::with_pids`]).

use crate::support;

use std::time::{Duration, Instant};

use support::ns::{NOBODY, Ns};
use support::*;

const LIMIT: Duration = Duration::from_secs(60);

/// How many processes nobody keeps in exit(2).
const STUCK: usize = 5;

/// What one judgement may wait for processes in exit(2), in all
/// (`EXIT_WAIT` in lib/src/members.rs).
const BUDGET: Duration = Duration::from_secs(2);

/// nobody's processes stuck in exit(2) with their memory gone, `$1` of
/// them, their pids written to `$2` once all are stuck. Each is the init of
/// a PID namespace of nobody's own (through an unprivileged user
/// namespace): an init in exit(2) waits until every other process of its
/// namespace is reaped, and one of them is a zombie whose parent is a
/// `sleep` outside the namespace (it joined with `nsenter --no-fork`,
/// forked, and exec'd a program that never reaps). The init's memory is
/// gone by then (its `/proc/PID/environ` cannot be read), and it stays so
/// for as long as that `sleep` lives.
const STUCK_EXITS: &str = r#"
set -e
n=$1 out=$2 i=0 pids=
# Bit 2 of /proc/PID/stat's flags (field 9): PF_EXITING.
exiting() { [ $(( $(cut -d' ' -f9 /proc/$1/stat 2>/dev/null || echo 0) & 4 )) -ne 0 ]; }
while [ $i -lt $n ]; do
    unshare -U -r -p -f sleep 100000 &
    u=$!
    init=
    while [ -z "$init" ]; do
        init=$(cat /proc/$u/task/$u/children 2>/dev/null | tr -d ' ')
        [ -n "$init" ] || sleep 0.01
    done
    nsenter -t "$init" -U -p --preserve-credentials --no-fork sh -c 'true & exec sleep 100000' &
    keeper=$!
    # Its child in the namespace has exited and is a zombie nobody reaps.
    until grep -qs '^State:.Z' /proc/$(cat /proc/$keeper/task/$keeper/children 2>/dev/null | tr -d ' ' || echo 0)/status; do
        sleep 0.01
    done
    kill -KILL "$init"
    until exiting "$init"; do sleep 0.01; done
    pids="$pids $init"
    i=$((i + 1))
done
echo $pids > "$out.tmp"
mv "$out.tmp" "$out"
wait
"#;

/// Starts nobody's [`STUCK_EXITS`] and returns the stuck pids, as the
/// namespace numbers them, once each is stuck; or `None` (said) where
/// this kernel lets nobody make no user namespace.
fn stuck_exits(ns: &mut Ns, test: &str) -> Option<Vec<u32>> {
    let userns = ns.run(
        ns.cmd(Some(NOBODY), "unshare", &["-U", "-r", "-p", "-f", "true"]),
        LIMIT,
        "unshare -U as nobody",
    );
    if userns.code() != 0 {
        eprintln!(
            "{test}: skipped: nobody cannot make a user namespace here ({})",
            userns.stderr.trim()
        );
        return None;
    }
    let c = ns.cmd(
        Some(NOBODY),
        "sh",
        &["-c", STUCK_EXITS, "stuck", &STUCK.to_string(), "/tmp/stuck"],
    );
    let pid = ns.keep(c);
    let out = ns.host_path("/tmp/stuck");
    wait_until("nobody's processes stuck in exit(2)", LIMIT, || {
        out.exists() || !running(pid)
    });
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|_| panic!("{test}: nobody's processes could not be made stuck"));
    let pids: Vec<u32> = text
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), STUCK, "{text}");
    // Stuck as a judgement sees them: in exit(2), not zombies, their
    // environment gone.
    for p in &pids {
        let stat = std::fs::read_to_string(ns.host_path(&format!("/proc/{p}/stat"))).unwrap();
        let stat = onlyone::procfs::parse_stat(&stat).unwrap();
        assert!(stat.is_exiting(), "pid {p} is not in exit(2): {stat:?}");
        let environ = std::fs::read(ns.host_path(&format!("/proc/{p}/environ")));
        assert!(
            environ.as_ref().map_or(true, Vec::is_empty),
            "pid {p}'s environment is still there: {environ:?}"
        );
    }
    Some(pids)
}

/// Item 3: nobody keeps [`STUCK`] of its processes in exit(2) with their
/// memory gone and plants a record of a dead run of its own at root's
/// lock in the shared `/run/lock`. Root's `check`, `status`, `precheck`
/// and `run` of that lock each wait for them one budget in all, not one
/// each (before, `STUCK` × 2 s), and say what they found: the lock cannot
/// be judged.
#[test]
fn processes_stuck_in_exit_cost_a_judgement_one_budget_not_one_each() {
    const TEST: &str = "processes_stuck_in_exit_cost_a_judgement_one_budget";
    let Some(mut ns) = Ns::with_pids(TEST) else {
        return;
    };
    // Root's job has run: its journal is root's.
    ns.run(
        ns.oo(None, &["--dir", "/run/lock", "run", "job", "--", "true"]),
        LIMIT,
        "root's first run",
    )
    .expect(0);
    let Some(stuck) = stuck_exits(&mut ns, TEST) else {
        return;
    };
    // A run of nobody's whose wrapper is dead, started before the stuck
    // processes (they count as its processes that may still be exiting).
    ns.must(
        Some(NOBODY),
        &format!(
            "printf '%s\\n' 999999 start=1 boot={} token={} since=1764400000 mode=run \
             cmd=job onlyone=1 > /run/lock/job.lock",
            boot_id(),
            "e".repeat(32),
        ),
    );
    let one_each = BUDGET * STUCK as u32;
    let root = |args: &[&str]| {
        let mut full = vec!["--dir", "/run/lock"];
        full.extend_from_slice(args);
        let what = format!("root's {}", args.join(" "));
        let started = Instant::now();
        let out = ns.run(ns.oo(None, &full), LIMIT, &what);
        let took = started.elapsed();
        assert!(
            took < one_each / 2,
            "{what} took {took:?} against {STUCK} stuck exits (one budget: {BUDGET:?}): {out:#?}"
        );
        out
    };
    let named = |text: &str| stuck.iter().any(|p| text.contains(&format!("pid {p} ")));
    let out = root(&["check", "job"]);
    assert_eq!(out.code(), 1, "{out:#?}");
    assert!(
        out.stdout.contains("cannot be judged") && named(&out.stdout),
        "{out:#?}"
    );
    let out = root(&["status", "--json", "job"]);
    let lock = &out.json()["locks"][0];
    assert_eq!(lock["state"], "unknown", "{out:#?}");
    assert!(named(lock["reason"].as_str().unwrap()), "{out:#?}");
    // Three such records: what is still exiting once one judgement's
    // budget is spent is not waited for again by the others.
    ns.must(
        Some(NOBODY),
        "cp /run/lock/job.lock /run/lock/job2.lock && cp /run/lock/job.lock /run/lock/job3.lock",
    );
    let started = Instant::now();
    let out = root(&["status", "--json"]);
    let took = started.elapsed();
    assert!(took < BUDGET * 2, "status of three took {took:?}: {out:#?}");
    for lock in out.json()["locks"].as_array().unwrap() {
        assert_eq!(lock["state"], "unknown", "{out:#?}");
        assert!(named(lock["reason"].as_str().unwrap()), "{out:#?}");
    }
    ns.must(None, "rm /run/lock/job3.lock");
    // A deadline shorter than the budget: UNKNOWN for want of time, with
    // how to give more; a second such lock is not even looked at.
    let out = root(&["check", "--deadline", "1s", "job", "job2"]);
    assert_eq!(out.code(), 3, "{out:#?}");
    assert!(
        out.stdout
            .contains("job: not judged within check's deadline of 1s (")
            && out.stdout.contains(
                "job2: not judged within check's deadline of 1s (not looked at: the deadline \
                 ran out before it); give it more time with --deadline"
            )
            && named(&out.stdout),
        "{out:#?}"
    );
    let out = root(&["status", "--json", "--deadline", "1s"]);
    let locks = out.json()["locks"].as_array().unwrap().clone();
    let reason_of = |name: &str| {
        let lock = locks.iter().find(|l| l["name"] == name).unwrap();
        assert_eq!(lock["state"], "unknown", "{name}: {out:#?}");
        lock["reason"].as_str().unwrap().to_owned()
    };
    let (job, job2) = (reason_of("job"), reason_of("job2"));
    for reason in [&job, &job2] {
        assert!(
            reason.starts_with("not judged within status's deadline of 1s (")
                && reason.contains("give it more time with --deadline"),
            "{out:#?}"
        );
    }
    assert!(named(&job) && job2.contains("not looked at"), "{out:#?}");
    assert!(out.stderr.contains("--deadline"), "{out:#?}");
    ns.must(None, "rm /run/lock/job2.lock");
    let out = root(&["precheck", "job"]);
    assert_eq!(out.code(), 0, "{out:#?}");
    assert!(out.stderr.contains("cannot be judged"), "{out:#?}");
    let out = root(&["run", "job", "--", "true"]);
    assert_eq!(out.code(), 125, "{out:#?}");
    assert!(named(&out.stderr), "{out:#?}");
    // nobody's record is left as it was: nothing was judged stale.
    let left = std::fs::read_to_string(ns.host_path("/run/lock/job.lock")).unwrap();
    assert!(left.starts_with("999999\n"), "{left}");
}
