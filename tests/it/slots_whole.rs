//! Slots made whole (issue 45): a lock of N slots is one lock whatever N a
//! take asks (a held slot anywhere refuses another N), every slot's run
//! that is over is closed once (its end, or `abandoned` by whichever call
//! clears its file), and every refusal names what a user can act on.

use std::path::Path;
use std::time::Duration;

use crate::support::{Sandbox, kill9_pid, wait_gone, wait_until};

/// How long a condition may take to hold.
const HANG: Duration = Duration::from_secs(30);

/// Starts `run --slots N j -- sh -c 'echo SLOT > MARK; exec sleep 1000'`
/// and waits until its command runs and has written its slot: the
/// wrapper's pid and the slot.
fn hold(sb: &mut Sandbox, n: &str, tag: &str) -> (u32, u32) {
    let mark = sb.path(&format!("held.{tag}"));
    let script = format!("echo $ONLYONE_SLOT > {}; exec sleep 1000", mark.display());
    let mut c = sb.oo_cmd();
    c.args(["run", "--slots", n, "j", "--", "sh", "-c", &script]);
    let pid = sb.keep(c);
    wait_until("the holder's command", HANG, || {
        std::fs::read_to_string(&mark).is_ok_and(|s| s.ends_with('\n'))
    });
    let slot = std::fs::read_to_string(&mark)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (pid, slot)
}

/// The file of slot `k` of `j`.
fn slot_file(sb: &Sandbox, k: u32) -> std::path::PathBuf {
    match k {
        0 => sb.lock("j"),
        k => sb.path(&format!("j.lock.slot.{k}")),
    }
}

/// The `key=` value of the record at `path`.
fn value(path: &Path, key: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_owned))
        .unwrap_or_else(|| panic!("{} has no {key}=", path.display()))
}

/// Ends a holder's run cleanly: TERM to its wrapper, which ends its
/// command and lets its slot go.
fn end_cleanly(pid: u32) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    wait_gone(pid);
}

/// Kills a holder's wrapper (SIGKILL), then its command: the slot's file
/// stays behind, stale. Returns the run's token.
fn kill_holder(sb: &Sandbox, pid: u32, slot: u32) -> String {
    let file = slot_file(sb, slot);
    // The wrapper names its command in the record once it has started it.
    wait_until("the record to name the command", HANG, || {
        std::fs::read_to_string(&file).is_ok_and(|r| r.contains("\ncmdpid="))
    });
    let token = value(&file, "token");
    let cmd: u32 = value(&file, "cmdpid").parse().unwrap();
    kill9_pid(pid);
    wait_gone(pid);
    kill9_pid(cmd);
    wait_gone(cmd);
    token
}

/// The journal's events of `j` whose kind is `kind` and token `token`.
fn events(sb: &Sandbox, kind: &str, token: &str) -> usize {
    std::fs::read_to_string(sb.journal_of(&sb.lock("j")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == kind && e["token"] == token)
        .count()
}

/// The outcome `history --json` gives the run `token`.
fn outcome(sb: &Sandbox, token: &str) -> String {
    sb.history_json("j")
        .into_iter()
        .find(|r| r["token"] == token)
        .unwrap_or_else(|| panic!("no run {token} in history"))["outcome"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Invariant 16 (PROTOCOL.md): the live runs of a lock never outnumber
/// the smallest N among them and the take's. A lock of 3 slots whose
/// slots 0 and 1 have ended and whose slot 2 is still held: a plain run
/// (a lock of one) and a run of 2 slots are refused (125), naming the
/// number held; a run of 3 takes a free slot.
#[test]
fn invariant_16_the_live_runs_never_outnumber_the_smallest_n() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let held: Vec<(u32, u32)> = ["a", "b", "c"]
        .iter()
        .map(|t| hold(&mut sb, "3", t))
        .collect();
    let mut slots: Vec<u32> = held.iter().map(|h| h.1).collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1, 2]);
    for (pid, slot) in &held {
        if *slot != 2 {
            end_cleanly(*pid);
        }
    }
    assert!(!sb.lock("j").exists() && !slot_file(&sb, 1).exists());
    assert!(slot_file(&sb, 2).exists());
    let ran = sb.path("ran");
    let script = format!("touch {}", ran.display());
    let plain = sb.oo(&["run", "j", "--", "sh", "-c", &script]);
    plain.expect(125).says("held with 3 slots");
    let two = sb.oo(&["run", "--slots", "2", "j", "--", "sh", "-c", &script]);
    two.expect(125).says("held with 3 slots");
    assert!(!ran.exists(), "no refused fire ran its command");
    // Nothing of the refused takes is left behind.
    assert!(!sb.lock("j").exists() && !slot_file(&sb, 1).exists());
    sb.oo(&["run", "--slots", "3", "j", "--", "sh", "-c", &script])
        .expect(0);
    assert!(ran.exists());
}

/// A run of a lock of 3 slots whose wrapper is SIGKILLed (its command then
/// ends) is over: `history` says abandoned, not running for ever; `check`
/// is CRITICAL; the next fire's take clears the slot and records the
/// abandoned run once.
#[test]
fn a_killed_slot_run_is_abandoned_in_history_and_check() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let (pid, slot) = hold(&mut sb, "3", "a");
    assert_eq!(slot, 0);
    let token = kill_holder(&sb, pid, slot);
    assert_eq!(outcome(&sb, &token), "abandoned");
    let check = sb.oo(&["check", "j"]);
    check.expect(2);
    assert!(check.stdout.contains("abandoned"), "{check:#?}");
    // Slots 1 and 2 taken, the next fire takes slot 0 over: the killed
    // run's end is recorded, once.
    hold(&mut sb, "3", "b");
    hold(&mut sb, "3", "c");
    sb.oo(&["run", "--slots", "3", "j", "--", "true"]).expect(0);
    assert_eq!(events(&sb, "abandoned", &token), 1);
    assert_eq!(outcome(&sb, &token), "abandoned");
}

/// Slot 0 live, slot 1 stale, six fires at once, ten times: whichever
/// fire clears slot 1 (the one that takes it, or one that loses the slot
/// to another after clearing it) records the killed run's end, once.
#[test]
fn every_stale_slot_cleared_by_a_take_is_closed_once() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let (keep, slot) = hold(&mut sb, "2", "keep");
    assert_eq!(slot, 0);
    for round in 0..10 {
        let (pid, slot) = hold(&mut sb, "2", &format!("r{round}"));
        assert_eq!(slot, 1);
        let token = kill_holder(&sb, pid, slot);
        let kids: Vec<_> = (0..6)
            .map(|_| {
                let mut c = sb.oo_cmd();
                c.args(["run", "--slots", "2", "j", "--", "true"]);
                c.stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped());
                crate::support::Kid::new(c.spawn().unwrap())
            })
            .collect();
        for k in kids {
            let out = k.into_inner().wait_with_output().unwrap();
            let code = out.status.code();
            assert!(
                matches!(code, Some(0 | 75)),
                "{code:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(
            events(&sb, "abandoned", &token),
            1,
            "round {round}: the killed run closed once"
        );
        assert_eq!(outcome(&sb, &token), "abandoned");
    }
    end_cleanly(keep);
    let running: Vec<_> = sb
        .history_json("j")
        .into_iter()
        .filter(|r| r["outcome"] == "running")
        .collect();
    assert!(running.is_empty(), "{running:?}");
}

/// With every slot held, the skip names each holder and how to stop one
/// (`stop --pid`), not `stop j`, which would stop them all.
#[test]
fn a_full_lock_names_every_holder_and_stop_pid() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let (a, _) = hold(&mut sb, "2", "a");
    let (b, _) = hold(&mut sb, "2", "b");
    let out = sb.oo(&["run", "--slots", "2", "j", "--", "true"]);
    out.expect(75)
        .says(&format!("pid {a}"))
        .says(&format!("pid {b}"))
        .says("--pid");
    assert!(!out.stderr.contains("(onlyone stop j)"), "{out:#?}");
}

/// `precheck --slots 2` with slot 0 live and slot 1 stale clears slot 1,
/// says so, and closes its run, as a precheck of a lock of one does.
#[test]
fn precheck_of_slots_clears_a_stale_slot_as_a_lock_of_one() {
    let mut sb = Sandbox::new("ONLYONE_SLOTS_MARK");
    let (_keep, slot) = hold(&mut sb, "2", "keep");
    assert_eq!(slot, 0);
    let (pid, slot) = hold(&mut sb, "2", "b");
    let token = kill_holder(&sb, pid, slot);
    let out = sb.oo(&["precheck", "--slots", "2", "j"]);
    out.expect(0);
    assert!(!slot_file(&sb, 1).exists(), "the stale slot is cleared");
    assert_eq!(events(&sb, "abandoned", &token), 1);
    // Said as a lock of one says it.
    out.says("cleared the stale lock `j`");
}
