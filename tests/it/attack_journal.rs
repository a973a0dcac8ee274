//! Another account attacks root's journals and the reaper's files (SPEC
//! "Files others can touch are hostile"; issue: multi-user hosts): a flock
//! held on a journal, a secret on a command line, FIFOs and links planted
//! where the reaper keeps its state, hostile values and terminal escapes in
//! a journal another user wrote, and bidi and other format characters in
//! the command of a record another user wrote. Each runs in a private mount
//! namespace with fresh `/run` and `/tmp` ([`support::ns::Ns`]), the
//! attacker `nobody`.

use crate::support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use support::ns::{NOBODY, Ns};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);
/// What "promptly" is: the journal's longest wait for a foreign flock is
/// one second, a run takes a fraction of one.
const PROMPT: Duration = Duration::from_secs(6);

fn mode_of(ns: &Ns, path: &str) -> u32 {
    std::fs::metadata(ns.host_path(path))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Item 5: nobody holds `flock -x` on root's journal (root's state
/// directory made 0755 and the journal left 0644, so nobody could open it)
/// and `flock -s` on an older generation. Root's runs finish promptly with
/// exit 0, `precheck` answers within its deadline, a rotation does not hang,
/// and an unrelated job in the same directory runs.
#[test]
fn a_flock_on_roots_journal_never_hangs_root() {
    let Some(mut ns) = Ns::new("a_flock_on_roots_journal_never_hangs_root") else {
        return;
    };
    for job in ["job", "held"] {
        ns.run(ns.oo(None, &["run", job, "--", "true"]), LIMIT, "first run")
            .expect(0);
    }
    // Readable by everyone. `big` is past the rotation size, its older
    // generation readable too.
    ns.must(
        None,
        "cd /var/lib/onlyone && chmod 0755 . && \
         chmod 0644 run-onlyone-job.lock.journal run-onlyone-held.lock.journal && \
         yes '{\"v\":1}' | head -c 4300000 > run-onlyone-big.lock.journal && \
         chmod 0600 run-onlyone-big.lock.journal && \
         echo '{\"v\":1}' > run-onlyone-big.lock.journal.1 && \
         chmod 0644 run-onlyone-big.lock.journal.1",
    );
    ns.attacker(
        NOBODY,
        "cd /var/lib/onlyone; exec 3<run-onlyone-job.lock.journal \
         4<run-onlyone-held.lock.journal 5<run-onlyone-big.lock.journal.1 6<.; \
         flock -x 3 && flock -x 4 && flock -s 5 && flock -x 6 && touch /tmp/flocked && \
         exec sleep 100000",
        "/tmp/flocked",
    );

    let out = ns.run(ns.oo(None, &["run", "job", "--", "true"]), LIMIT, "run job");
    out.expect(0).within(PROMPT).says("journal");
    assert_eq!(
        mode_of(&ns, "/var/lib/onlyone/run-onlyone-job.lock.journal"),
        0o600
    );

    // A held lock: precheck writes a skip to a journal nobody holds.
    let holder = ns.oo(None, &["run", "held", "--", "sleep", "100000"]);
    ns.keep(holder);
    let record = ns.host_path("/run/onlyone/held.lock");
    wait_until("the held run's record", LIMIT, || {
        std::fs::read_to_string(&record).is_ok_and(|r| r.contains("cmdpid="))
    });
    let out = ns.run(
        ns.oo(None, &["precheck", "held", "--deadline", "2s"]),
        LIMIT,
        "precheck",
    );
    out.expect(75).within(Duration::from_millis(3500));

    // A rotation whose older generation nobody share-locks, and an
    // unrelated job in the same directory at the same time.
    let big = ns.oo(None, &["run", "big", "--", "true"]);
    let rotating = std::thread::spawn(move || finish_checked(big, LIMIT, "run big"));
    let out = ns.run(
        ns.oo(None, &["run", "other", "--", "true"]),
        LIMIT,
        "run other",
    );
    out.expect(0).within(PROMPT);
    let out = rotating.join().unwrap();
    out.expect(0).within(PROMPT);
    let current =
        std::fs::metadata(ns.host_path("/var/lib/onlyone/run-onlyone-big.lock.journal")).unwrap();
    assert!(
        current.len() < 4096,
        "the journal was not rotated: {current:?}"
    );
    let out = ns.run(
        ns.oo(None, &["history", "big", "--json"]),
        LIMIT,
        "history big",
    );
    out.expect(0);
    assert_eq!(out.stdout.lines().count(), 1, "{out:#?}");
}

/// Item 8: a secret on root's command line is in no file under
/// /run/onlyone or /var/lib/onlyone that nobody can read, an earlier
/// version's 0644 journal beside the lock (both generations) is made 0600,
/// a journal nobody planted beside a lock gets none of root's events, and
/// nobody's `history`, `status` and `check` of a lock whose earlier journal
/// is root's say they cannot read the journal, not that there is no run.
#[test]
fn a_secret_on_roots_command_line_is_not_readable_by_another_user() {
    let Some(ns) = Ns::new("a_secret_on_roots_command_line_is_not_readable") else {
        return;
    };
    ns.run(
        ns.oo(None, &["run", "backup", "--", "true", "--password=S3cret"]),
        LIMIT,
        "run backup",
    )
    .expect(0);
    assert_eq!(
        mode_of(&ns, "/var/lib/onlyone/run-onlyone-backup.lock.journal"),
        0o600
    );
    assert_eq!(mode_of(&ns, "/var/lib/onlyone"), 0o700);
    // An earlier version's journal, with a secret in both generations.
    ns.must(
        None,
        "cd /run/onlyone && \
         echo '{\"v\":1,\"time\":1.5,\"event\":\"start\",\"cmd\":\"x --password=S3cret\"}' > old.lock.journal && \
         cp old.lock.journal old.lock.journal.1 && chmod 0644 old.lock.journal old.lock.journal.1",
    );
    ns.run(ns.oo(None, &["run", "old", "--", "true"]), LIMIT, "run old")
        .expect(0);
    for f in ["old.lock.journal", "old.lock.journal.1"] {
        assert_eq!(mode_of(&ns, &format!("/run/onlyone/{f}")), 0o600, "{f}");
    }
    let out = ns.must(
        Some(NOBODY),
        "cat /run/onlyone/* /run/onlyone/.[!.]* /var/lib/onlyone/* /var/lib/onlyone/.[!.]* \
         2>/dev/null | grep -c S3cret; true",
    );
    assert_eq!(out.stdout.trim(), "0", "nobody read the secret: {out:#?}");

    // A journal nobody made ready for root's job in a sticky directory, to
    // catch its command lines: root writes nothing to it, says so, and runs.
    ns.must(
        Some(NOBODY),
        "touch /run/lock/backup.lock.journal && chmod 0666 /run/lock/backup.lock.journal",
    );
    let out = ns.run(
        ns.oo(
            None,
            &[
                "--dir",
                "/run/lock",
                "run",
                "backup",
                "--",
                "true",
                "--password=S3cret",
            ],
        ),
        LIMIT,
        "run backup in /run/lock",
    );
    out.expect(0).quiet();
    let planted = std::fs::read_to_string(ns.host_path("/run/lock/backup.lock.journal")).unwrap();
    assert!(!planted.contains("S3cret"), "{planted}");
    let theirs = "/var/lib/onlyone/run-lock-backup.lock.journal";
    let ours = std::fs::read_to_string(ns.host_path(theirs)).unwrap();
    assert!(
        ours.contains("S3cret"),
        "root's run is in root's journal: {ours}"
    );

    let dir = ["--dir", "/run/onlyone"];
    let as_nobody = |args: &[&str]| {
        let all: Vec<&str> = dir.iter().chain(args).copied().collect();
        ns.run(ns.oo(Some(NOBODY), &all), LIMIT, &args.join(" "))
    };
    let out = as_nobody(&["history", "old"]);
    assert_ne!(out.code(), 0, "{out:#?}");
    out.says("cannot read the journal")
        .says("root")
        .says("/run/onlyone/old.lock.journal");
    assert!(!out.stdout.contains("no run"), "{out:#?}");
    let out = as_nobody(&["status"]);
    out.expect(0).says("cannot read the journal");
    assert!(out.stdout.contains("journal unreadable"), "{out:#?}");
    let out = as_nobody(&["status", "--json", "old"]);
    out.expect(0);
    let locks = out.json()["locks"].clone();
    assert!(
        locks
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["journal_error"].is_string()),
        "{out:#?}"
    );
    let out = as_nobody(&["check", "old", "--max-age", "1h"]);
    out.expect(3);
    assert!(out.stdout.contains("cannot read the journal"), "{out:#?}");
}

/// Item 13: nobody plants a FIFO, a link, or a file of its own (flocked
/// forever) where the reaper keeps its lock and its state, in the sticky
/// directories onlyone accepts. Root's reap returns within its deadline and
/// says which file and why.
#[test]
fn planted_reaper_files_never_hang_reap_past_its_deadline() {
    let Some(mut ns) = Ns::new("planted_reaper_files_never_hang_reap") else {
        return;
    };
    for dir in ["/run/lock", "/tmp"] {
        let lock = format!("{dir}/.onlyone-reap.lock");
        let state = format!("{dir}/.onlyone-reap.json");
        let reap = |ns: &Ns, why: &str, path: &str| {
            let out = ns.run(
                ns.oo(None, &["--dir", dir, "reap", "job", "--deadline", "2s"]),
                LIMIT,
                &format!("reap in {dir} ({why})"),
            );
            out.expect(0)
                .within(Duration::from_millis(3500))
                .says(path)
                .says(why);
        };
        ns.must(Some(NOBODY), &format!("mkfifo {lock}"));
        reap(&ns, "FIFO", &lock);
        ns.must(
            Some(NOBODY),
            &format!("rm {lock} && ln -s /etc/passwd {lock}"),
        );
        reap(&ns, "symbolic link", &lock);
        let ready = format!("/tmp/flocked-{}", dir.replace('/', "_"));
        ns.must(
            Some(NOBODY),
            &format!("rm {lock} && touch {lock} && chmod 0666 {lock}"),
        );
        ns.attacker(
            NOBODY,
            &format!("exec 3<{lock}; flock -x 3 && touch {ready} && exec sleep 100000"),
            &ready,
        );
        reap(&ns, "belongs to nobody", &lock);
        ns.must(Some(NOBODY), &format!("rm {lock}"));
        // The lock is root's now; the state file is a FIFO.
        ns.must(Some(NOBODY), &format!("mkfifo {state}"));
        reap(&ns, "FIFO", &state);
    }
}

/// Lines another user can put in a journal: numbers past any range, not
/// numbers, huge strings, deep nesting.
fn hostile_journal() -> String {
    let deep = format!("{}1{}", "[".repeat(1000), "]".repeat(1000));
    let huge = "x".repeat(300_000);
    [
        r#"{"v":1,"time":-1e300,"event":"start","token":"a","pid":1}"#.to_owned(),
        r#"{"v":1,"time":1e300,"event":"end","token":"a","exit":0,"duration":1e300}"#.into(),
        r#"{"v":1,"time":1700000000,"event":"start","token":"b"}"#.into(),
        r#"{"v":1,"time":-1e300,"event":"end","token":"b","exit":0,"duration":-1e300}"#.into(),
        r#"{"v":1,"time":1700000000,"event":"start","token":"c"}"#.into(),
        r#"{"v":1,"time":1700000001,"event":"end","token":"c","signal":"KILL","duration":1.7976931348623157e308}"#.into(),
        r#"{"v":1,"time":1e400,"event":"start","token":"d"}"#.into(),
        r#"{"v":1,"time":NaN,"event":"start","token":"d"}"#.into(),
        r#"{"v":1,"time":1700000002,"event":"end","token":"c","exit":99999999999999999999}"#.into(),
        r#"{"v":1,"time":1700000002,"event":"skip","token":"c","pid":1e30}"#.into(),
        format!(r#"{{"v":1,"time":1700000003,"event":"start","token":"n","x":{deep}}}"#),
        format!(r#"{{"v":1,"time":1700000004,"event":"start","token":"h","cmd":"{huge}"}}"#),
        r#"{"v":1,"time":1.8e19,"event":"start","token":"f"}"#.into(),
        r#"{"v":1,"time":-1e19,"event":"start","token":"g"}"#.into(),
    ]
    .join("\n")
        + "\n"
}

/// Item 14: an earlier version's journal in a shared directory, full of
/// hostile values: root's `history`, `status`, `check` and `metrics` exit
/// normally (no panic, no signal) and say something sensible. It is
/// root's: one nobody wrote is not read at all (`attack_paths`), but what
/// a journal holds is input all the same.
#[test]
fn hostile_journal_values_crash_no_reader() {
    let Some(ns) = Ns::new("hostile_journal_values_crash_no_reader") else {
        return;
    };
    std::fs::write(ns.host_path("/run/.oo-test/hostile"), hostile_journal()).unwrap();
    ns.must(
        None,
        "cp /run/.oo-test/hostile /run/lock/job.lock.journal && \
         cp /run/.oo-test/hostile /run/lock/job.lock.journal.1",
    );
    let root = |args: &[&str]| {
        let all: Vec<&str> = ["--dir", "/run/lock"].iter().chain(args).copied().collect();
        ns.run(ns.oo(None, &all), LIMIT, &args.join(" "))
    };
    let out = root(&["history", "job"]);
    out.expect(0);
    assert!(out.stdout.starts_with("job: "), "{out:#?}");
    let out = root(&["history", "job", "--json"]);
    out.expect(0);
    for line in out.stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let start = v["start_unix"].as_f64().unwrap();
        assert!((0.0..3e11).contains(&start), "{line}");
        if let Some(d) = v["duration_seconds"].as_f64() {
            assert!((0.0..3e11).contains(&d), "{line}");
        }
    }
    root(&["status"]).expect(0);
    root(&["status", "--json"]).expect(0);
    let out = root(&["check", "job", "--max-age", "1h", "--max-runtime", "1h"]);
    assert!(out.stdout.starts_with("ONLYONE "), "{out:#?}");
    root(&["metrics", "job"]).expect(0);
}

/// Item 15: a journal whose host, command and signal carry terminal
/// escapes (a title change, a screen clear, a bidi override): root's
/// `history`, `status` and `check` print no ESC, BEL or override; the JSON
/// stays JSON. An earlier version's journal of root's (one nobody wrote is
/// not read at all, `attack_paths`): a command line's and a host's text
/// come from elsewhere.
#[test]
fn terminal_escapes_in_a_journal_never_reach_the_terminal() {
    let Some(ns) = Ns::new("terminal_escapes_in_a_journal_never_reach_the_terminal") else {
        return;
    };
    let bad = r#"\u001b]0;pwned\u0007\u001b[2J\u009b1m\u202e"#;
    let journal = format!(
        "{{\"v\":1,\"time\":1700000000,\"event\":\"start\",\"token\":\"t\",\"pid\":7,\
         \"host\":\"{bad}\",\"cmd\":\"{bad}\"}}\n\
         {{\"v\":1,\"time\":1700000001,\"event\":\"end\",\"token\":\"t\",\"signal\":\"{bad}\"}}\n"
    );
    std::fs::write(ns.host_path("/run/.oo-test/escapes"), journal).unwrap();
    ns.must(None, "cp /run/.oo-test/escapes /run/lock/job.lock.journal");
    let raw = ['\x1b', '\x07', '\u{9b}', '\u{202e}'];
    for args in [
        &["history", "job"][..],
        &["history", "job", "--json"],
        &["status"],
        &["status", "--json"],
        &["check", "job"],
    ] {
        let all: Vec<&str> = ["--dir", "/run/lock"].iter().chain(args).copied().collect();
        let out = ns.run(ns.oo(None, &all), LIMIT, &args.join(" "));
        assert!(
            !out.stdout.contains(raw),
            "{args:?} printed a terminal escape: {out:#?}"
        );
        assert!(
            out.stdout.contains("\\x1b") || out.stdout.contains("\\u001b"),
            "{out:#?}"
        );
    }
}

/// Issue 44: nobody's live run holds `job` in the shared `/run/lock`, its
/// record's command carrying a right-to-left override and other format
/// characters (bidi isolates and marks, zero-width ones, a tag, a soft
/// hyphen), which a record may hold (it refuses only control characters).
/// Root's `run` (its skip message), `precheck`, `status` (table and
/// JSON), `check` and `stop` print none of them raw: another account's
/// word of a command is not shown at all; root's own run whose command
/// carries them (a file name may) is shown with each escaped.
#[test]
fn format_characters_in_a_records_command_never_reach_the_terminal() {
    let Some(mut ns) = Ns::with_pids("format_characters_in_a_records_command") else {
        return;
    };
    let format = [
        '\u{202e}',
        '\u{2066}',
        '\u{200f}',
        '\u{61c}',
        '\u{200b}',
        '\u{feff}',
        '\u{e0041}',
        '\u{ad}',
    ];
    let cmd: String = format.iter().map(|c| format!("x{c}")).collect();
    ns.attacker(
        NOBODY,
        &format!(
            "sleep 100000 & p=$!; start=$(cut -d' ' -f22 /proc/$p/stat); \
             printf '%s\\n' $p start=$start boot={} token={} since=1764400000 mode=run \
             'cmd={cmd}' onlyone=1 > /run/lock/.forged && mv /run/lock/.forged /run/lock/job.lock; \
             wait",
            boot_id(),
            "f".repeat(32)
        ),
        "/run/lock/job.lock",
    );
    // Root's own run of `own`, whose command carries them.
    let own = ns.keep(ns.oo(
        None,
        &[
            "--dir",
            "/run/lock",
            "run",
            "own",
            "--",
            "sh",
            "-c",
            "exec sleep 100000",
            &cmd,
        ],
    ));
    let lock = ns.host_path("/run/lock/own.lock");
    wait_until("root's own run", LIMIT, || {
        std::fs::read_to_string(&lock).is_ok_and(|r| r.contains("cmdpid="))
    });
    let root = |args: &[&str]| {
        let all: Vec<&str> = ["--dir", "/run/lock"].iter().chain(args).copied().collect();
        let out = ns.run(ns.oo(None, &all), LIMIT, &args.join(" "));
        for c in format {
            assert!(
                !out.stdout.contains(c) && !out.stderr.contains(c),
                "{args:?} printed U+{:04X} raw: {out:#?}",
                c as u32
            );
        }
        out
    };
    let escaped = |text: &str| text.contains("\\u{202e}") || text.contains("\\u202e");
    let out = root(&["run", "job", "--", "true"]);
    out.expect(75);
    assert!(out.stderr.contains("another account"), "{out:#?}");
    assert!(
        !escaped(&out.stderr),
        "nobody's command is not shown: {out:#?}"
    );
    let out = root(&["precheck", "job"]);
    out.expect(75);
    let out = root(&["run", "own", "--", "true"]);
    out.expect(75);
    assert!(escaped(&out.stderr), "{out:#?}");
    let out = root(&["precheck", "own"]);
    out.expect(75);
    assert!(escaped(&out.stderr), "{out:#?}");
    for args in [&["status"][..], &["status", "--json"]] {
        let out = root(args);
        out.expect(0);
        assert!(escaped(&out.stdout), "{out:#?}");
    }
    root(&["check", "job", "own", "--max-runtime", "1s"]);
    root(&["stop", "job"]);
    root(&["stop", "own"]);
    wait_until("root's own run to end", LIMIT, || !running(own));
}

/// Item 14, as a property: whatever numbers a line carries, the runs read
/// back have times and durations in range (what every reader relies on).
mod props {
    use onlyone::journal::History;
    use proptest::prelude::*;

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<f64>().prop_map(|f| format!("{f:e}")),
            any::<i64>().prop_map(|i| i.to_string()),
            Just("1e300".to_owned()),
            Just("-1e300".to_owned()),
            Just("1e400".to_owned()),
            Just("\"x\"".to_owned()),
        ]
    }

    proptest! {
        #[test]
        fn read_back_runs_are_in_range(
            t1 in number(), t2 in number(), d in number(), exit in number()
        ) {
            let lines = [
                format!(r#"{{"v":1,"time":{t1},"event":"start","token":"a"}}"#),
                format!(
                    r#"{{"v":1,"time":{t2},"event":"end","token":"a","exit":{exit},"duration":{d}}}"#
                ),
            ];
            let h = History::from_lines(lines.iter().map(String::as_str));
            for r in &h.runs {
                prop_assert!((0.0..3e11).contains(&r.start), "{r:?}");
                if let Some(d) = r.duration {
                    prop_assert!((0.0..3e11).contains(&d), "{r:?}");
                }
                if let Some(e) = r.end {
                    prop_assert!((0.0..3e11).contains(&e), "{r:?}");
                }
            }
        }
    }
}

/// A journal is its owner's (0600) whatever the umask: a loose one makes
/// it no looser, a strict one does not keep the owner from appending.
#[test]
fn a_new_journal_is_0600_whatever_the_umask() {
    let sb = Sandbox::new("ONLYONE_ATTACK_JOURNAL_MARK");
    let mut c = sb.program("sh");
    c.args(["-c", "umask 000; exec \"$0\" --dir \"$1\" run j -- true"])
        .arg(BIN)
        .arg(sb.dir());
    finish_checked(c, LIMIT, "run with umask 000").expect(0);
    let journal = sb.journal_of(&sb.lock("j"));
    let meta = std::fs::metadata(&journal).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    // A umask that takes the owner's write away: the next run still writes.
    std::fs::remove_file(&journal).unwrap();
    let mut c = sb.program("sh");
    c.args(["-c", "umask 277; exec \"$0\" --dir \"$1\" run j -- true"])
        .arg(BIN)
        .arg(sb.dir());
    finish_checked(c, LIMIT, "run with umask 277").expect(0);
    let mut c = sb.program(BIN);
    c.arg("--dir")
        .arg(sb.dir())
        .args(["run", "j", "--", "true"]);
    finish_checked(c, LIMIT, "run").expect(0).quiet();
    let meta = std::fs::metadata(&journal).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(text.lines().count(), 4, "{text}");
}
