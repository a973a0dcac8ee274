//! The journal and what reads it: `history`, `status`, `check`, `metrics`.
//! Real runs write the journal; hand-written events set up what a real run
//! would take hours to (a success 26 hours ago).

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use onlyone::LockFile;
use onlyone::journal::{EndReason, Event, EventKind, Journal};
use onlyone::names::StateSource;
use onlyone::state::StateDir;
use serde_json::Value;
use support::*;

const HANG: Duration = Duration::from_secs(30);

struct World {
    sb: Sandbox,
}

derefs_to_sandbox!(World);

impl World {
    fn new() -> World {
        World {
            sb: Sandbox::new("ONLYONE_JOURNAL_MARK"),
        }
    }

    /// `history --json`: the runs, newest first.
    fn history(&self, lock: &str) -> Vec<Value> {
        self.history_json(lock)
    }

    fn status(&self, lock: &str) -> Value {
        let out = self.oo(&["status", "--json", lock]);
        out.expect(0);
        out.json()["locks"][0].clone()
    }

    fn lockfile(&self, name: &str) -> LockFile {
        LockFile::open(self.lock(name)).unwrap()
    }

    /// The state directory the commands write in.
    fn state(&self) -> StateDir {
        StateDir::at(self.state_dir(), StateSource::Env)
    }

    fn journal(&self, name: &str) -> Journal {
        Journal::of(&self.lockfile(name), &self.state())
    }

    /// Appends a hand-written event `ago` seconds in the past.
    fn event(
        &self,
        lock: &str,
        kind: EventKind,
        token: &str,
        ago: f64,
        f: impl FnOnce(&mut Event),
    ) {
        let mut ev = Event::now(kind);
        ev.token = Some(token.into());
        ev.time -= ago;
        ev.pid = Some(4242);
        f(&mut ev);
        self.journal(lock).append(&ev).unwrap();
    }

    /// A finished run: start `ago` seconds ago, lasting `took`, exiting `code`.
    fn past_run(&self, lock: &str, token: &str, ago: f64, took: f64, code: i32) {
        self.event(lock, EventKind::Start, token, ago, |_| {});
        self.event(lock, EventKind::End, token, ago - took, |e| {
            e.exit = Some(code);
            e.duration = Some(took);
        });
    }

    /// A record held by a live process of this test (a sleeper), taken
    /// `ago` seconds ago: (pid, token).
    fn held(&mut self, lock: &str, ago: u64) -> (u32, String) {
        let pid = self.sleeper();
        let token = onlyone::command::new_token();
        let since = now() - ago;
        put(
            &self.lock(lock),
            format!(
                "{pid}\nstart={}\nboot={}\ntoken={token}\nsince={since}\nuid=0\nmode=lock\n\
                 cmd=sleep 1000\nonlyone=1\n",
                start_of(pid),
                boot_id()
            ),
        );
        (pid, token)
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Every line of a journal parses as an event.
fn assert_every_line_parses(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    for line in text.lines() {
        let _: Event = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    }
    text.lines().count()
}

// ---------------------------------------------------------------------------
// 1. Outcomes

/// Five runs, five ways to end: each is in `history --json` as it ended,
/// and `status` shows the last one.
#[test]
fn each_outcome_is_in_history_and_status() {
    let mut w = World::new();
    w.oo(&["run", "j", "--", "true"]).expect(0);
    w.oo(&["run", "j", "--", "sh", "-c", "exit 3"]).expect(3);
    w.oo(&["run", "j", "--", "sh", "-c", "kill -9 $$"])
        .expect(137);
    w.oo(&["run", "j", "--max-time", "300ms", "--", "sleep", "100"])
        .expect(124);
    // A run whose wrapper and command are killed, then taken over.
    let mut c = w.oo_cmd();
    c.args(["run", "j", "--", "sleep", "1000"]);
    let wrapper = w.keep(c);
    let lock = w.lock("j");
    wait_until("the run's command", HANG, || {
        std::fs::read_to_string(&lock).is_ok_and(|r| r.contains("cmdpid="))
    });
    let rec = std::fs::read_to_string(&lock).unwrap();
    let cmd: u32 = rec
        .lines()
        .find_map(|l| l.strip_prefix("cmdpid="))
        .unwrap()
        .parse()
        .unwrap();
    kill9_pid(wrapper);
    kill9_pid(cmd);
    wait_gone(cmd);
    w.oo(&["run", "j", "--", "true"])
        .expect(0)
        .says("took over the stale lock");

    let runs = w.history("j");
    let got: Vec<(String, Value, Value, Value)> = runs
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_owned(),
                r["exit"].clone(),
                r["signal"].clone(),
                r["ended_by"].clone(),
            )
        })
        .collect();
    use serde_json::json;
    let want = [
        ("exit", json!(0), json!(null), json!(null)),
        ("abandoned", json!(null), json!(null), json!(null)),
        ("ended", json!(null), json!(null), json!("max-time")),
        ("signal", json!(null), json!("KILL"), json!(null)),
        ("exit", json!(3), json!(null), json!(null)),
        ("exit", json!(0), json!(null), json!(null)),
    ];
    let want: Vec<(String, Value, Value, Value)> = want
        .into_iter()
        .map(|(o, e, s, b)| (o.to_owned(), e, s, b))
        .collect();
    assert_eq!(got, want, "{runs:#?}");
    assert_eq!(runs[0]["took_over"], true, "{runs:#?}");
    assert_eq!(runs[1]["pid"], wrapper, "{runs:#?}");
    for r in &runs {
        assert_eq!(r["v"], 1);
        assert!(r["duration_seconds"].as_f64().is_some(), "{r}");
        assert_eq!(r["host"], onlyone::procfs::host_name().as_str());
    }
    // The max-time run lasted its 300 ms at least.
    assert!(runs[2]["duration_seconds"].as_f64().unwrap() >= 0.3);

    let s = w.status("j");
    assert_eq!(s["state"], "free");
    assert_eq!(s["last_run"]["outcome"], "exit", "{s:#}");
    assert_eq!(s["last_run"]["exit"], 0, "{s:#}");
    assert!(s["last_success_unix"].as_f64().is_some(), "{s:#}");
    assert_every_line_parses(&w.journal("j").path());

    // The human view: a summary first, then one line per run.
    let out = w.oo(&["history", "j"]);
    out.expect(0);
    let first = out.stdout.lines().next().unwrap();
    assert!(
        first.starts_with("j: 6 run(s), 2 of 6 succeeded (33%), median "),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("abandoned"), "{}", out.stdout);
    assert_eq!(out.stdout.lines().count(), 8, "{}", out.stdout);
    let two = w.oo(&["history", "j", "-n", "2", "--json"]);
    assert_eq!(two.stdout.lines().count(), 2);
}

/// `status` of a held lock says how many fires were skipped since its run
/// began; `history` counts them against that run.
#[test]
fn skips_count_against_the_live_run() {
    let mut w = World::new();
    let (_, token) = w.held("j", 5);
    for _ in 0..3 {
        w.oo(&["run", "-q", "j", "--", "true"]).expect(75);
    }
    // precheck records its skip too (silently).
    w.oo(&["precheck", "j"]).expect(75);
    let s = w.status("j");
    assert_eq!(s["state"], "held");
    assert_eq!(s["skipped_since_start"], 4, "{s:#}");
    let h = w.journal("j").history().unwrap();
    assert_eq!(h.skips, 4);
    // No start of this run in the journal (it was written by hand).
    assert_eq!(h.skips_of_unknown_runs, 4);
    let events = w.journal("j").events().unwrap();
    assert!(
        events
            .iter()
            .all(|e| e.token.as_deref() == Some(token.as_str()))
    );
}

/// Eight fires at once against one live run: every line of the journal
/// parses, and the run has exactly eight skips.
#[test]
fn concurrent_skippers_are_counted_exactly() {
    let mut w = World::new();
    let mut c = w.oo_cmd();
    let ready = w.path("ready");
    c.args([
        "run",
        "j",
        "--",
        "sh",
        "-c",
        "touch \"$1\"; exec sleep 1000",
        "sh",
    ])
    .arg(&ready);
    w.keep(c);
    wait_until("the run", HANG, || ready.exists());
    let kids: Vec<_> = (0..8)
        .map(|_| {
            let mut c = w.oo_cmd();
            c.args(["run", "-q", "j", "--", "true"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            c.spawn().unwrap()
        })
        .collect();
    for mut k in kids {
        assert_eq!(k.wait().unwrap().code(), Some(75));
    }
    let runs = w.history("j");
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["outcome"], "running");
    assert_eq!(runs[0]["skipped"], 8);
    assert_eq!(assert_every_line_parses(&w.journal("j").path()), 9);
}

// ---------------------------------------------------------------------------
// 2. Failure to write it changes nothing

/// A directory where the journal should be: runs exit as they would, one
/// line says so (none with -q), and a skip is still a skip.
#[test]
fn an_unwritable_journal_changes_no_exit_code() {
    let w = World::new();
    std::fs::create_dir(w.journal_of(&w.lock("j"))).unwrap();
    w.oo(&["run", "j", "--", "true"])
        .expect(0)
        .says("could not write the journal");
    let out = w.oo(&["run", "j", "--", "sh", "-c", "exit 3"]);
    out.expect(3);
    assert_eq!(
        out.stderr.matches("could not write the journal").count(),
        1,
        "said once: {}",
        out.stderr
    );
    w.oo(&["run", "-q", "j", "--", "true"]).expect(0).quiet();
    w.oo(&["history", "j"])
        .expect(125)
        .says("cannot read the journal");
}

/// A journal on a read-only mount (a read-only bind mount of the file, in
/// a mount namespace of its own): the run's exit code is its command's.
#[test]
fn a_journal_on_a_read_only_mount_changes_no_exit_code() {
    if !is_root() || !have("unshare") {
        eprintln!("skipped: needs root and unshare for a mount namespace");
        return;
    }
    let w = World::new();
    let journal = w.journal_of(&w.lock("j"));
    std::fs::write(&journal, "").unwrap();
    let script = format!(
        "mount --bind '{j}' '{j}' && mount -o remount,ro,bind '{j}' '{j}' || exit 99; \
         '{bin}' --dir '{d}' run j -- sh -c 'exit 7'",
        j = journal.display(),
        bin = BIN,
        d = w.dir().display()
    );
    let mut c = w.program("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c", &script]);
    let out = finish(c, HANG);
    if out.code() == 99 {
        eprintln!(
            "skipped: cannot make a read-only bind mount here: {}",
            out.stderr
        );
        return;
    }
    out.expect(7).says("could not write the journal");
    assert!(out.stderr.contains("Read-only"), "{}", out.stderr);
}

// ---------------------------------------------------------------------------
// 3. Rotation

/// Eight writers append while the journal rotates again and again: every
/// line parses, each writer's events that remain are a contiguous run
/// ending at its last (nothing recent lost in a rotation), and both
/// generations stay bounded.
#[test]
fn rotation_under_concurrent_writers_loses_nothing_recent() {
    let w = World::new();
    let lock = w.lockfile("j");
    let state = w.state();
    let per_writer = 4000;
    // The writers keep within 100 events of each other (about 400 KB of
    // journal, against 4 MiB generations), so every writer's last events
    // are recent ones, however the threads are scheduled.
    let step = std::sync::Barrier::new(8);
    std::thread::scope(|s| {
        for writer in 0..8u32 {
            let lock = lock.clone();
            let state = state.clone();
            let step = &step;
            s.spawn(move || {
                let journal = Journal::of(&lock, &state);
                for seq in 0..per_writer {
                    if seq % 100 == 0 {
                        step.wait();
                    }
                    let mut ev = Event::now(EventKind::Skip);
                    ev.pid = Some(writer);
                    ev.by = Some(seq);
                    ev.cmd = Some("x".repeat(400));
                    journal.append(&ev).unwrap();
                }
            });
        }
    });
    let journal = Journal::of(&lock, &state);
    let current = journal.path();
    let mut older = current.clone().into_os_string();
    older.push(".1");
    assert!(Path::new(&older).exists(), "it rotated");
    for p in [Path::new(&older), current.as_path()] {
        assert_every_line_parses(p);
        let size = std::fs::metadata(p).unwrap().len();
        // Writers may append a little past the mark while one rotates.
        assert!(size <= 2 * onlyone::journal::ROTATE_AT, "{p:?}: {size}");
    }
    let events = journal.events().unwrap();
    for writer in 0..8u32 {
        let mut seqs: Vec<u32> = events
            .iter()
            .filter(|e| e.pid == Some(writer))
            .map(|e| e.by.unwrap())
            .collect();
        seqs.sort_unstable();
        assert_eq!(seqs.last(), Some(&(per_writer - 1)), "writer {writer}");
        let first = seqs[0];
        assert_eq!(
            seqs,
            (first..per_writer).collect::<Vec<_>>(),
            "writer {writer}: a gap means a lost event"
        );
    }
}

// ---------------------------------------------------------------------------
// 4. check

fn check(w: &World, args: &[&str]) -> Out {
    let mut a = vec!["check"];
    a.extend_from_slice(args);
    w.oo(&a)
}

#[test]
fn check_says_ok_when_the_last_run_succeeded_recently() {
    let w = World::new();
    w.past_run("j", "a", 3600.0, 60.0, 0);
    let out = check(&w, &["j", "--max-age", "25h", "--max-skips", "12"]);
    out.expect(0);
    let first = out.stdout.lines().next().unwrap();
    assert!(
        first.starts_with("ONLYONE OK - j: last run exit 0 "),
        "{first}"
    );
    assert!(first.contains(" | 'j_success_age'="), "{first}");
    assert!(first.contains("'j_skips'=0;10;12;0"), "{first}");
}

#[test]
fn check_is_critical_without_a_success_within_max_age_and_warns_at_80_percent() {
    let w = World::new();
    w.past_run("old", "a", 26.0 * 3600.0 + 60.0, 60.0, 0);
    let out = check(&w, &["old", "--max-age", "25h"]);
    out.expect(2);
    let first = out.stdout.lines().next().unwrap();
    assert!(
        first.starts_with("ONLYONE CRITICAL - old: no success for 1d2h (max-age 1d1h)"),
        "{first}"
    );
    w.past_run("warm", "b", 21.0 * 3600.0, 60.0, 0);
    let out = check(&w, &["warm", "--max-age", "25h"]);
    out.expect(1);
    assert!(
        out.stdout
            .starts_with("ONLYONE WARNING - warm: last success 20h59m ago (max-age 1d1h)"),
        "{}",
        out.stdout
    );
    // Never succeeded: critical.
    w.past_run("never", "c", 60.0, 10.0, 1);
    let out = check(&w, &["never", "--max-age", "25h"]);
    out.expect(2);
    assert!(out.stdout.contains("no success recorded"), "{}", out.stdout);
}

#[test]
fn check_is_critical_when_the_last_run_failed() {
    let w = World::new();
    w.past_run("j", "a", 7200.0, 60.0, 0);
    w.past_run("j", "b", 3600.0, 60.0, 3);
    let out = check(&w, &["j"]);
    out.expect(2);
    assert!(
        out.stdout
            .starts_with("ONLYONE CRITICAL - j: the last run failed (exit 3, "),
        "{}",
        out.stdout
    );
}

#[test]
fn check_is_critical_for_a_run_past_max_runtime_and_warns_before() {
    let mut w = World::new();
    w.held("long", 3 * 3600);
    let out = check(&w, &["long", "--max-runtime", "2h"]);
    out.expect(2);
    assert!(
        out.stdout.contains("the current run has lasted 3h"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("'long_runtime'=108"), "{}", out.stdout);
    w.held("near", 100 * 60);
    check(&w, &["near", "--max-runtime", "2h"]).expect(1);
    w.held("young", 60);
    check(&w, &["young", "--max-runtime", "2h"]).expect(0);
}

#[test]
fn check_counts_skips_in_a_row_against_max_skips() {
    let mut w = World::new();
    let (_, token) = w.held("j", 60);
    w.event("j", EventKind::Start, &token, 60.0, |_| {});
    for i in 0..13 {
        w.event("j", EventKind::Skip, &token, 50.0 - f64::from(i), |_| {});
    }
    let out = check(&w, &["j", "--max-skips", "12"]);
    out.expect(2);
    assert!(
        out.stdout
            .contains("13 fires skipped in a row (max-skips 12)"),
        "{}",
        out.stdout
    );
    check(&w, &["j", "--max-skips", "16"]).expect(1);
    check(&w, &["j", "--max-skips", "20"]).expect(0);
}

#[test]
fn check_warns_when_the_lock_cannot_be_judged() {
    let w = World::new();
    put(
        &w.lock("j"),
        format!(
            "4242\nstart=1\nboot=00000000-1111-2222-3333-444444444444\ntoken={}\n\
             since=1764400000\nhost=another-host\nmode=run\nonlyone=1\n",
            "c".repeat(32)
        ),
    );
    let out = check(&w, &["j"]);
    out.expect(1);
    assert!(out.stdout.contains("cannot be judged"), "{}", out.stdout);
}

#[test]
fn check_of_several_locks_says_the_worst_and_one_line_each() {
    let w = World::new();
    w.past_run("good", "a", 60.0, 10.0, 0);
    w.past_run("bad", "b", 60.0, 10.0, 1);
    let out = check(&w, &["good", "bad", "--max-age", "1d"]);
    out.expect(2);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("ONLYONE CRITICAL - 2 locks: 1 critical, 1 ok |"),
        "{}",
        out.stdout
    );
    assert!(lines[1].starts_with("OK good: "), "{}", out.stdout);
    assert!(lines[2].starts_with("CRITICAL bad: "), "{}", out.stdout);
    assert_eq!(lines.len(), 3);
}

#[test]
fn check_usage_errors_are_unknown() {
    let w = World::new();
    check(&w, &[]).expect(3);
    check(&w, &["j", "--max-age", "soon"]).expect(3);
    check(&w, &["j", "--nonsense"]).expect(3);
}

// ---------------------------------------------------------------------------
// 5. metrics

/// The metrics parse with the official Python client's parser, labels
/// escaped, for a lock whose name holds `"` and `\`.
#[test]
fn metrics_parse_with_the_prometheus_parser() {
    let w = World::new();
    let odd = "we\"ird\\name";
    w.past_run("plain", "a", 120.0, 30.0, 0);
    w.past_run(odd, "b", 60.0, 5.0, 2);
    w.event(odd, EventKind::Skip, "b", 55.0, |_| {});
    w.event(odd, EventKind::Takeover, "z", 50.0, |_| {});
    let out = w.oo(&["metrics"]);
    out.expect(0);
    let text = out.stdout;
    // A name that is not a plain name is shown as its path, as `status` does.
    let label = w.lock(odd).display().to_string();
    let escaped = label.replace('\\', "\\\\").replace('"', "\\\"");
    assert!(
        text.contains(&format!("onlyone_last_exit_code{{lock=\"{escaped}\"}} 2")),
        "{text}"
    );
    let odd = label.as_str();
    let file = w.path("onlyone.prom");
    w.oo(&["metrics", "--textfile", file.to_str().unwrap()])
        .expect(0);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    // promtool's linter, where it is installed (.ci/run installs it).
    if have("promtool") {
        // (finish() closes stdin: the file goes in through the shell.)
        let mut c = Command::new("sh");
        c.args(["-c", "promtool check metrics < \"$1\"", "sh"])
            .arg(&file);
        let out = finish(c, HANG);
        assert_eq!(out.code(), 0, "promtool check metrics:\n{out:#?}\n{text}");
    } else {
        eprintln!("skipped promtool check metrics: promtool is missing");
    }
    let leftovers: Vec<_> = std::fs::read_dir(w.dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let Some(python) = prometheus_python() else {
        eprintln!("skipped the parser check: python3 with prometheus_client is missing");
        return;
    };
    let py = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    for s in f.samples:
        out.setdefault(f.name + '/' + f.type, {})[s.labels['lock']] = s.value
print(json.dumps(out))
"#;
    let mut c = Command::new(python);
    c.args(["-c", py])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "the parser refused:\n{text}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["onlyone_last_exit_code/gauge"][odd], 2.0, "{v:#}");
    assert_eq!(v["onlyone_last_exit_code/gauge"]["plain"], 0.0, "{v:#}");
    assert_eq!(v["onlyone_skipped/counter"][odd], 1.0, "{v:#}");
    assert_eq!(v["onlyone_takeovers/counter"][odd], 1.0, "{v:#}");
    assert_eq!(v["onlyone_running/gauge"]["plain"], 0.0, "{v:#}");
    assert_eq!(
        v["onlyone_last_duration_seconds/gauge"]["plain"], 30.0,
        "{v:#}"
    );
    // Broken since its first run: 0, so that `time() - ... > N` fires.
    assert_eq!(
        v["onlyone_last_success_timestamp_seconds/gauge"][odd], 0.0,
        "{v:#}"
    );
}

/// A Python that has the official client's parser (Debian's
/// python3-prometheus-client is for /usr/bin/python3, which a pyenv shim
/// may hide).
fn prometheus_python() -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import prometheus_client.parser"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

// ---------------------------------------------------------------------------
// 6. The other writers: stop, release, precheck's clearing

/// `stop` says so in the journal, and the run's wrapper says how it ended;
/// a script's hold ends with `release`; a run found stale by `precheck` is
/// closed as abandoned.
#[test]
fn stop_release_and_a_cleared_stale_lock_close_their_runs() {
    let mut w = World::new();
    let mut c = w.oo_cmd();
    let ready = w.path("ready");
    c.args([
        "run",
        "s",
        "--",
        "sh",
        "-c",
        "touch \"$1\"; exec sleep 1000",
        "sh",
    ])
    .arg(&ready);
    w.keep(c);
    wait_until("the run", HANG, || ready.exists());
    w.oo(&["stop", "s"]).expect(0);
    let events = w.journal("s").events().unwrap();
    let kinds: Vec<EventKind> = events.iter().map(|e| e.event).collect();
    // The wrapper's end comes first: `stop` says what it did once the run
    // has let go.
    assert_eq!(
        kinds,
        [EventKind::Start, EventKind::End, EventKind::Stop],
        "{events:#?}"
    );
    assert_eq!(events[1].signal.as_deref(), Some("TERM"));
    // The wrapper knew the TERM was a stop's (its mark), and says so.
    assert_eq!(events[1].ended_by, Some(EndReason::Stop), "{events:#?}");
    assert_eq!(events[2].signal.as_deref(), Some("TERM"));
    assert_eq!(events[2].token, events[0].token);
    let runs = w.history("s");
    assert_eq!(runs[0]["outcome"], "ended", "{runs:#?}");
    assert_eq!(runs[0]["ended_by"], "stop", "{runs:#?}");
    assert_eq!(runs[0]["result"], "stopped", "{runs:#?}");

    // A script's hold: acquire for a shell, then release.
    let owner = w.sleeper();
    w.oo(&["acquire", "--owner", &owner.to_string(), "a"])
        .expect(0);
    w.oo(&["release", "--owner", &owner.to_string(), "a"])
        .expect(0);
    let runs = w.history("a");
    assert_eq!(runs[0]["outcome"], "released", "{runs:#?}");
    assert_eq!(runs[0]["mode"], "lock", "{runs:#?}");

    // A run whose wrapper and command died: precheck clears it, and the
    // run is abandoned.
    let mut c = w.oo_cmd();
    let ready = w.path("ready2");
    c.args([
        "run",
        "p",
        "--",
        "sh",
        "-c",
        "touch \"$1\"; exec sleep 1000",
        "sh",
    ])
    .arg(&ready);
    let wrapper = w.keep(c);
    wait_until("the run", HANG, || ready.exists());
    let lock = w.lock("p");
    wait_until("the record to name the command", HANG, || {
        std::fs::read_to_string(&lock).is_ok_and(|r| r.contains("\ncmdpid="))
    });
    let cmd: u32 = std::fs::read_to_string(&lock)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("cmdpid="))
        .unwrap()
        .parse()
        .unwrap();
    // Once the command has exec'd sleep, its `touch` child has been waited
    // for: no other process of the run is left to keep it held.
    wait_until("the command to exec sleep", HANG, || {
        std::fs::read_to_string(format!("/proc/{cmd}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    kill9_pid(wrapper);
    kill9_pid(cmd);
    wait_gone(cmd);
    w.oo(&["precheck", "p"]).expect(0);
    let runs = w.history("p");
    assert_eq!(runs[0]["outcome"], "abandoned", "{runs:#?}");
    assert_eq!(runs[0]["pid"], wrapper, "{runs:#?}");
}
