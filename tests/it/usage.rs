//! What a run used: its CPU time and peak memory, measured by the
//! supervisor as it reaps the run's processes, in the `end` event and in
//! `history --json`, `status --json` and `metrics` (through promtool and
//! the Prometheus Python client's parser). Each command reports what it
//! used itself (its own `getrusage(RUSAGE_SELF)` as it exits), and onlyone's
//! figures must be within 10% of that: a run that touches 80 MiB and spins
//! 0.4 s of CPU; a leftover grandchild that does the spinning and is
//! reaped by onlyone; the same run with the PostgreSQL store.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::*;

const HANG: Duration = Duration::from_secs(60);

/// The interpreter the commands run in: the system's, never a shim that
/// would add a process of its own.
const PYTHON: &str = "/usr/bin/python3";

/// `hog.py REPORT MIB SECS [stay]`: touches MIB MiB, spins SECS of CPU
/// time (not wall time), then writes what it used (RUSAGE_SELF, and its
/// peak from /proc/self/status) to REPORT, atomically; with `stay`, it
/// then sleeps until it is ended.
const HOG: &str = r#"
import json, os, resource, sys, time
report, mib, spin = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
b = bytearray(mib << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
t = time.process_time()
n = 0
while time.process_time() - t < spin:
    for _ in range(20000):
        n += 1
hwm = 0
with open('/proc/self/status') as f:
    for line in f:
        if line.startswith('VmHWM:'):
            hwm = int(line.split()[1]) * 1024
ru = resource.getrusage(resource.RUSAGE_SELF)
with open(report + '.tmp', 'w') as f:
    json.dump({'user': ru.ru_utime, 'system': ru.ru_stime,
               'max_rss': ru.ru_maxrss * 1024, 'hwm': hwm}, f)
os.rename(report + '.tmp', report)
if len(sys.argv) > 4:
    while True:
        time.sleep(1000)
"#;

/// `leaver.py DIR HOG`: leaves a grandchild behind (`hog.py DIR/stray.json
/// 80 0.4 stay`, its parent gone at once, so it is re-parented to the
/// subreaper), waits for its report, writes its own usage (itself and the
/// middle child it reaped) to DIR/leaver.json, and exits.
const LEAVER: &str = r#"
import json, os, resource, sys, time
d, hog = sys.argv[1], sys.argv[2]
report = os.path.join(d, 'stray.json')
pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, hog, report, '80', '0.4', 'stay'])
    os._exit(0)
os.waitpid(pid, 0)
while not os.path.exists(report):
    time.sleep(0.01)
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(os.path.join(d, 'leaver.json'), 'w') as f:
    json.dump({'user': me.ru_utime + kids.ru_utime,
               'system': me.ru_stime + kids.ru_stime,
               'max_rss': max(me.ru_maxrss, kids.ru_maxrss) * 1024}, f)
"#;

/// What a process said it used.
#[derive(Debug, Clone, Copy)]
struct Used {
    user: f64,
    system: f64,
    max_rss: f64,
}

impl Used {
    fn read(path: &Path) -> Used {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        Used {
            user: v["user"].as_f64().unwrap(),
            system: v["system"].as_f64().unwrap(),
            max_rss: v["max_rss"].as_f64().unwrap(),
        }
    }

    fn cpu(&self) -> f64 {
        self.user + self.system
    }

    /// Two processes' usage together: times summed, the larger peak.
    fn and(self, o: Used) -> Used {
        Used {
            user: self.user + o.user,
            system: self.system + o.system,
            max_rss: self.max_rss.max(o.max_rss),
        }
    }
}

/// Checks onlyone's figures (`user`, `system`, `max_rss`: as a view shows
/// them, null when missing) against what the processes said: each time
/// within 10% of the total CPU time, the total within 10%, the peak within
/// 10%.
fn within(what: &str, user: &Value, system: &Value, max_rss: &Value, want: Used, context: &str) {
    let num = |v: &Value, name: &str| {
        v.as_f64()
            .unwrap_or_else(|| panic!("{what}: `{name}` is not recorded: {context}"))
    };
    let (u, s, m) = (
        num(user, "user"),
        num(system, "system"),
        num(max_rss, "max_rss"),
    );
    let close = |got: f64, want: f64, of: f64| (got - want).abs() <= 0.1 * of;
    let cpu = want.cpu();
    assert!(
        close(u + s, cpu, cpu),
        "{what}: CPU {u} + {s} s, the processes said {cpu} s ({want:?}): {context}"
    );
    assert!(
        close(u, want.user, cpu) && close(s, want.system, cpu),
        "{what}: user {u} s, system {s} s; the processes said {want:?}: {context}"
    );
    assert!(
        close(m, want.max_rss, want.max_rss),
        "{what}: peak {m} bytes, the processes said {} ({want:?}): {context}",
        want.max_rss
    );
}

struct World {
    sb: Sandbox,
}

derefs_to_sandbox!(World);

impl World {
    /// A sandbox with the scripts in it; `None` (said) without the
    /// system's python3.
    fn new() -> Option<World> {
        if !Path::new(PYTHON).exists() {
            eprintln!("skipped: {PYTHON} is missing");
            return None;
        }
        let w = World {
            sb: Sandbox::new("ONLYONE_USAGE_MARK"),
        };
        put(&w.script("hog.py"), HOG);
        put(&w.script("leaver.py"), LEAVER);
        Some(w)
    }

    fn script(&self, name: &str) -> PathBuf {
        self.path(name)
    }

    fn p(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// `onlyone --dir DIR ARGS...` (or `--store URL`).
    fn oo_in(&self, store: Option<&str>, args: &[&str]) -> Out {
        let mut c = self.program(BIN);
        match store {
            Some(url) => c.arg("--store").arg(url).env_remove("ONLYONE_STORE"),
            None => c.arg("--dir").arg(self.dir()),
        };
        c.args(args);
        finish(c, HANG)
    }

    /// `run NAME -- python3 hog.py REPORT 80 0.4`: its exit checked.
    fn hog_run(&self, store: Option<&str>, name: &str, report: &str) {
        let hog = self.p("hog.py");
        self.oo_in(
            store,
            &["run", name, "--", PYTHON, &hog, report, "80", "0.4"],
        )
        .expect(0);
    }

    /// The newest run of `history --json`.
    fn last_history(&self, store: Option<&str>, name: &str) -> Value {
        let out = self.oo_in(store, &["history", name, "--json", "-n", "1"]);
        out.expect(0);
        let line = out
            .stdout
            .lines()
            .next()
            .unwrap_or_else(|| panic!("no run: {out:#?}"));
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// `status --json`'s `last_run` of `name`.
    fn last_run(&self, store: Option<&str>, name: &str) -> Value {
        let out = self.oo_in(store, &["status", "--json", name]);
        out.expect(0);
        out.json()["locks"][0]["last_run"].clone()
    }

    /// The checks of each view of the last run of `name` against `want`:
    /// `history --json`, `status --json`, `metrics`.
    fn views_say(&self, store: Option<&str>, name: &str, want: Used) {
        let h = self.last_history(store, name);
        let ctx = h.to_string();
        within(
            "history --json",
            &h["cpu_user_seconds"],
            &h["cpu_system_seconds"],
            &h["max_rss_bytes"],
            want,
            &ctx,
        );
        let r = self.last_run(store, name);
        let ctx = r.to_string();
        within(
            "status --json",
            &r["cpu_user_seconds"],
            &r["cpu_system_seconds"],
            &r["max_rss_bytes"],
            want,
            &ctx,
        );
        let out = self.oo_in(store, &["metrics", name]);
        out.expect(0);
        let m = parsed_metrics(&self.path("metrics.prom"), &out.stdout);
        let sample = |key: &str| m.get(key).cloned().unwrap_or(Value::Null);
        within(
            "metrics",
            &sample(&format!("onlyone_last_cpu_seconds/{name}/user")),
            &sample(&format!("onlyone_last_cpu_seconds/{name}/system")),
            &sample(&format!("onlyone_last_max_rss_bytes/{name}/")),
            want,
            &out.stdout,
        );
    }
}

/// The samples of `text`, by `NAME/LOCK/MODE`, as the Prometheus Python
/// client's parser reads them (or, without it, a plain reading of the
/// sample lines); promtool must accept the text too where it is installed.
fn parsed_metrics(file: &Path, text: &str) -> serde_json::Map<String, Value> {
    put(file, text);
    if have("promtool") {
        let mut c = Command::new("sh");
        c.args(["-c", "promtool check metrics < \"$1\"", "sh"])
            .arg(file);
        let out = finish(c, HANG);
        assert_eq!(out.code(), 0, "promtool check metrics:\n{out:#?}\n{text}");
    } else {
        eprintln!("skipped promtool check metrics: promtool is missing");
    }
    let py = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(open(sys.argv[1]).read()):
    for s in f.samples:
        out['/'.join([s.name, s.labels['lock'], s.labels.get('mode', '')])] = s.value
print(json.dumps(out))
"#;
    let has_parser = Command::new(PYTHON)
        .args(["-c", "import prometheus_client.parser"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if has_parser {
        let mut c = Command::new(PYTHON);
        c.args(["-c", py]).arg(file);
        let out = finish(c, HANG);
        assert_eq!(out.code(), 0, "the parser refused:\n{out:#?}\n{text}");
        return match serde_json::from_str(&out.stdout) {
            Ok(Value::Object(m)) => m,
            other => panic!("{other:?}"),
        };
    }
    eprintln!("the Prometheus Python client is missing: the samples are read as lines");
    let mut m = serde_json::Map::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('}').trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let key = format!("{name}/{}/{}", label("lock"), label("mode"));
        m.insert(key, value.parse::<f64>().map_or(Value::Null, Value::from));
    }
    m
}

/// A run that touches 80 MiB and spins 0.4 s of CPU: its end carries what
/// it used, and every view shows it within 10% of what the command says
/// it used.
#[test]
fn a_run_shows_its_cpu_time_and_peak_memory() {
    let Some(w) = World::new() else { return };
    let report = w.p("hog.json");
    w.hog_run(None, "job", &report);
    let said = Used::read(Path::new(&report));
    assert!(said.cpu() >= 0.4, "the command spun: {said:?}");
    assert!(
        said.max_rss >= 80.0 * 1048576.0,
        "it touched 80 MiB: {said:?}"
    );
    // The journal's own line, in base units.
    let journal = std::fs::read_to_string(w.journal_of(&w.lock("job"))).unwrap();
    let end: Value = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "end")
        .unwrap_or_else(|| panic!("no end: {journal}"));
    within(
        "the end event",
        &end["cpu_user"],
        &end["cpu_system"],
        &end["max_rss"],
        said,
        &journal,
    );
    assert!(end["max_rss"].is_u64(), "bytes, a whole number: {end}");
    w.views_say(None, "job", said);
    // The human view says it too.
    let out = w.oo_in(None, &["history", "job"]);
    out.expect(0);
    let head = out.stdout.lines().nth(1).unwrap_or_default();
    assert!(
        head.contains("CPU") && head.contains("PEAK"),
        "{}",
        out.stdout
    );
    let row = out.stdout.lines().nth(2).unwrap_or_default();
    assert!(
        row.contains(" s ") && row.contains(" MiB "),
        "{}",
        out.stdout
    );
}

/// The CPU time of a grandchild the command leaves behind (re-parented to
/// onlyone, ended and reaped by it at the end of the run) is counted, and
/// the peak is its own (the largest process's).
#[test]
fn a_leftover_grandchild_reaped_by_onlyone_is_counted() {
    let Some(w) = World::new() else { return };
    let (leaver, hog) = (w.p("leaver.py"), w.p("hog.py"));
    let d = w.dir().display().to_string();
    let out = w.oo_in(None, &["run", "job", "--", PYTHON, &leaver, &d, &hog]);
    out.expect(0);
    assert!(
        out.stderr.contains("leftover process"),
        "onlyone ended the grandchild: {out:#?}"
    );
    let stray = Used::read(&w.path("stray.json"));
    let command = Used::read(&w.path("leaver.json"));
    assert!(stray.cpu() >= 0.4, "the grandchild spun: {stray:?}");
    assert!(
        command.cpu() < 0.5 * stray.cpu(),
        "the command itself spun little, so the grandchild's time must be counted for the \
         total to fit: {command:?}"
    );
    w.views_say(None, "job", command.and(stray));
}

/// With the PostgreSQL store, the end event in the store carries the same
/// fields, and the views read them back from the store.
#[test]
fn the_store_records_what_a_run_used() {
    let Some(w) = World::new() else { return };
    let pg = match support::pg::Db::new() {
        Ok(pg) => pg,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let url = pg.url();
    let report = w.p("hog.json");
    w.hog_run(Some(&url), "job", &report);
    let said = Used::read(Path::new(&report));
    w.views_say(Some(&url), "job", said);
}
