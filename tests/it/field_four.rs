//! What a field trial found, as a new user meets it: `history` of a name
//! that is nowhere, the library's read-only "who is running?" before the
//! lock directory exists (the example CLI of doc/library.md, run end to
//! end), a script's run whose workers hold the lock after its release,
//! the words `status`, `check` and the "held" message use, a store's
//! waiters of other hosts, `reap` beside a store, the manual pages, and
//! the README's first command; and a later trial's smaller findings:
//! `run --help`'s tmux example, `status` of a name that is nowhere, a
//! name's first character. Every process a test starts is marked and
//! killed when it ends, passed or failed.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use support::ns::{Ns, OO};
use support::pg::Db;
use support::*;

const LIMIT: Duration = Duration::from_secs(30);
const MARK: &str = "ONLYONE_FIELD_FOUR_MARK";
/// A store URL nothing answers at.
const NO_STORE: &str = "postgres://jobs@127.0.0.1:1/ops";
/// What `check` adds to a name that is nowhere, and `history` too.
const NOWHERE_HINT: &str =
    "(is the name right, and the lock directory, --dir, and the user the job runs as?)";

/// `onlyone --dir SANDBOX ARGS...`, run to its end.
fn oo(sb: &Sandbox, args: &[&str]) -> Out {
    let mut c = sb.oo_cmd();
    c.args(args);
    finish_checked(c, LIMIT, &format!("onlyone {}", args.join(" ")))
}

/// A shell script with `$OO` (onlyone) and `$D` (the sandbox), run to its
/// end.
fn script(sb: &Sandbox, text: &str) -> Out {
    let mut c = sb.program("sh");
    c.args(["-c", text]).env("OO", BIN).env("D", sb.dir());
    finish_checked(c, LIMIT, text)
}

/// The pid a script wrote to `path` (written whole: renamed into place).
fn pid_in(path: &Path) -> u32 {
    let text = std::fs::read_to_string(path).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

// ---------------------------------------------------------------------------
// Item 4: `history` of a name that is nowhere

/// A typo is an error (125), with the hint `check` gives the same name
/// (whose answer is UNKNOWN); `--json` too. A lock with a run, and a lock
/// file with no journal, still have their history (exit 0).
#[test]
fn history_of_a_name_that_is_nowhere_is_an_error_with_checks_hint() {
    let sb = Sandbox::new(MARK);
    oo(&sb, &["run", "sync", "--", "true"]).expect(0);
    let check = oo(&sb, &["check", "synk"]);
    check
        .expect(3)
        .prints("synk: no such lock")
        .prints(NOWHERE_HINT);
    for args in [&["history", "synk"][..], &["history", "--json", "synk"]] {
        let out = oo(&sb, args);
        out.expect(125)
            .says("synk: no such lock")
            .says(NOWHERE_HINT);
        assert_eq!(out.stdout, "", "{out:#?}");
    }
    oo(&sb, &["history", "sync"]).expect(0).prints("1 run(s)");
    // A lock file of another tool's (a bare pid) has no run: it is there.
    put(&sb.lock("other"), format!("{}\n", std::process::id()));
    oo(&sb, &["history", "other"])
        .expect(0)
        .prints("other: no run in the journal");
}

// ---------------------------------------------------------------------------
// Item 5: the example CLI of doc/library.md

/// The example CLI (examples/seed_cli.rs), which cargo builds for these
/// tests as the binary `seed_cli` (Cargo.toml): nothing is built here.
const SEED_CLI: &str = env!("CARGO_BIN_EXE_seed_cli");

/// `seed_cli work LOCK`, its stdin a pipe (the work ends when it closes):
/// the child, once it says it works.
fn start_work(sb: &mut Sandbox, bin: &Path, lock: &Path) -> std::process::Child {
    let mut c = sb.program(bin);
    c.arg("work")
        .arg(lock)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut first = String::new();
    let stdout = child.stdout.take().unwrap();
    let mut reader = BufReader::new(stdout);
    // Bounded by the sandbox: a child that never says it works is killed
    // with it when the test fails.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = reader.read_line(&mut first);
        let _ = tx.send((first, reader));
    });
    let (first, reader) = rx
        .recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("`seed_cli work` said nothing"));
    assert_eq!(
        first.trim(),
        format!("seed_cli: working as pid {}", child.id()),
        "{first:?}"
    );
    child.stdout = Some(reader.into_inner());
    child
}

/// The example CLI end to end, as doc/library.md describes it: `status`
/// with no lock directory says nothing runs (and makes none); `work`
/// acquires; a second `work` says "already running as pid N" with the
/// hint and exits 75; `status` names the holder; a release is idempotent;
/// a holder killed with `kill -9` is taken over by the next `work`, which
/// says so; the new holder is the one `status` names.
#[test]
fn the_library_guides_cli_acquires_refuses_answers_releases_and_takes_over() {
    let bin = PathBuf::from(SEED_CLI);
    // That binary's source is the example's own file (a link to it).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert_eq!(
        root.join("tests/bin/seed_cli.rs").canonicalize().unwrap(),
        root.join("examples/seed_cli.rs").canonicalize().unwrap()
    );
    let mut sb = Sandbox::new(MARK);
    let state = sb.path("app");
    let lock = state.join("app.lock");
    let run = |sb: &Sandbox, args: &[&str]| {
        let mut c = sb.program(&bin);
        c.args(args).arg(&lock);
        finish_checked(c, LIMIT, &format!("seed_cli {}", args.join(" ")))
    };

    let out = run(&sb, &["status"]);
    out.expect(0).prints("nothing running");
    assert!(!state.exists(), "a read-only query made the lock directory");

    let mut first = start_work(&mut sb, &bin, &lock);
    let pid = first.id();
    let out = run(&sb, &["work"]);
    out.expect(75)
        .says(&format!("already running as pid {pid} ("))
        .says(&format!("wait for it, or stop it: kill {pid}"));
    run(&sb, &["status"])
        .expect(0)
        .prints(&format!("running as pid {pid}"));

    drop(first.stdin.take());
    let done = first.wait_with_output().unwrap();
    assert!(done.status.success(), "{done:?}");
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(
        said.contains("released; released again: AlreadyFree"),
        "{said:?}"
    );
    assert!(!lock.exists(), "released");
    run(&sb, &["status"]).expect(0).prints("nothing running");

    let mut crashed = start_work(&mut sb, &bin, &lock);
    let dead = crashed.id();
    kill9(&mut crashed);
    run(&sb, &["status"]).expect(0).prints("nothing running (");
    let mut next = start_work(&mut sb, &bin, &lock);
    run(&sb, &["status"])
        .expect(0)
        .prints(&format!("running as pid {}", next.id()));
    drop(next.stdin.take());
    let done = next.wait_with_output().unwrap();
    assert!(done.status.success(), "{done:?}");
    let said = String::from_utf8_lossy(&done.stderr);
    assert!(
        said.contains(&format!("took over a stale lock of pid {dead} (`"))
            && said.contains(&format!("`): pid {dead} has exited")),
        "{said:?}"
    );
}

/// doc/library.md shows the example's code as it is: the block after its
/// marker is examples/seed_cli.rs, whole.
#[test]
fn the_library_guide_shows_the_example_cli_as_it_is() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = std::fs::read_to_string(root.join("examples/seed_cli.rs")).unwrap();
    let shown = readme_block("seed-cli");
    assert_eq!(
        shown.trim_end(),
        file.trim_end(),
        "doc/library.md's block differs from examples/seed_cli.rs"
    );
    let guide = std::fs::read_to_string(root.join("doc/library.md")).unwrap();
    assert!(
        guide.contains("`examples/seed_cli.rs`"),
        "the guide names it"
    );
}

/// doc/library.md's second program, a job run in a place, is
/// lib/examples/journaled.rs as it is, after the first (the seed's use).
#[test]
fn the_library_guide_shows_the_run_in_a_place_as_it_is() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = std::fs::read_to_string(root.join("lib/examples/journaled.rs")).unwrap();
    let shown = readme_block("journaled");
    assert_eq!(
        shown.trim_end(),
        file.trim_end(),
        "doc/library.md's block differs from lib/examples/journaled.rs"
    );
    let guide = std::fs::read_to_string(root.join("doc/library.md")).unwrap();
    let seed = guide.find("<!-- readme-test: seed-cli -->").unwrap();
    let place = guide.find("<!-- readme-test: journaled -->").unwrap();
    assert!(seed < place, "the seed's use comes first");
}

/// `onlyone::active_pid` needs no lock directory and makes none; it names
/// the holder of a held lock, alive, and the recorded owner of a stale
/// one, dead.
#[test]
fn active_pid_answers_without_a_directory_and_takes_nothing() {
    let sb = Sandbox::new(MARK);
    let dir = sb.path("later");
    let lock = dir.join("job.lock");
    assert_eq!(onlyone::active_pid(&lock).unwrap(), None);
    assert!(!dir.exists());
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(onlyone::active_pid(&lock).unwrap(), None);
    let (pid, start) = dead_process();
    put(
        &lock,
        record_text(pid, start, &onlyone::command::new_token()),
    );
    let a = onlyone::active_pid(&lock).unwrap().expect("a lock file");
    assert_eq!((a.pid, a.alive), (Some(pid), false), "{a:?}");
    assert!(lock.exists(), "a read-only query removed the stale lock");
    let guard = onlyone::LockFile::open(&lock)
        .unwrap()
        .try_acquire()
        .unwrap();
    let a = onlyone::active_pid(&lock).unwrap().expect("a lock file");
    assert_eq!((a.pid, a.alive), (Some(std::process::id()), true), "{a:?}");
    let took = guard.took_over().expect("the stale lock was taken over");
    assert_eq!(
        took.to_string(),
        format!("a stale lock of pid {pid} (`test-owner`): pid {pid} has exited")
    );
}

// ---------------------------------------------------------------------------
// Item 6

/// A script releases (its EXIT trap) while a worker holds the lock on for
/// about 2 s: the run's duration covers the worker, and the next run,
/// after that clean end, took nothing over (no "took over" said, none in
/// its history, no takeover counted).
#[test]
fn a_scripts_duration_covers_its_workers_and_the_next_run_takes_nothing_over() {
    let mut sb = Sandbox::new(MARK);
    let pidfile = sb.path("worker.pid");
    let out = script(
        &sb,
        &format!(
            "vars=$(\"$OO\" --dir \"$D\" acquire job --export) || exit; eval \"$vars\"; \
             trap '\"$OO\" --dir \"$D\" release -q job --exit $?' EXIT; \
             sleep 2 & echo $! > '{p}.tmp'; mv '{p}.tmp' '{p}'; exit 0",
            p = pidfile.display()
        ),
    );
    out.expect(0);
    let worker = pid_in(&pidfile);
    sb.foreign.push(worker);
    wait_gone(worker);
    // The end is recorded once the worker is gone (by a process of
    // onlyone's that watched it).
    let journal = sb.journal_of(&sb.lock("job"));
    wait_until("the end of the workers' hold recorded", LIMIT, || {
        std::fs::read_to_string(&journal)
            .unwrap_or_default()
            .matches("\"event\":\"release\"")
            .count()
            == 2
    });
    let next = oo(&sb, &["run", "job", "--", "true"]);
    next.expect(0);
    assert!(!next.stderr.contains("took over"), "{next:#?}");
    let runs = sb.history_json("job");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let script_run = &runs[1];
    assert_eq!(script_run["outcome"], "released", "{runs:#?}");
    assert_eq!(script_run["exit"], 0, "{runs:#?}");
    let took = script_run["duration_seconds"].as_f64().unwrap();
    assert!(
        (1.9..20.0).contains(&took),
        "the worker held the lock for 2 s: {runs:#?}"
    );
    assert_eq!(runs[0]["took_over"], false, "{runs:#?}");
    let table = oo(&sb, &["history", "job"]);
    assert!(!table.stdout.contains("took over"), "{table:#?}");
    let metrics = oo(&sb, &["metrics", "job"]);
    metrics
        .expect(0)
        .prints("onlyone_takeovers_total{lock=\"job\"} 0");
}

/// A run kept held by a leftover process (its wrapper and command killed):
/// the "held" message puts each command beside its own pid, the
/// leftover's beside the leftover's and the run's beside the run's.
#[test]
fn the_held_message_names_a_leftovers_command_as_the_leftovers() {
    let mut sb = Sandbox::new(MARK);
    let pidfile = sb.path("leftover.pid");
    let cmd = format!(
        "sleep 100001 & echo $! > '{p}.tmp'; mv '{p}.tmp' '{p}'; exec sleep 100002",
        p = pidfile.display()
    );
    let mut c = sb.oo_cmd();
    c.args(["run", "job", "--", "sh", "-c", &cmd]);
    let wrapper = sb.keep(c);
    wait_until("the leftover started", LIMIT, || pidfile.exists());
    let leftover = pid_in(&pidfile);
    sb.foreign.push(leftover);
    let v = oo(&sb, &["status", "--json", "job"]).json();
    let command = v["locks"][0]["command_pid"].as_u64().unwrap() as u32;
    let recorded = v["locks"][0]["command"].as_str().unwrap().to_owned();
    kill9_pid(wrapper);
    kill9_pid(command);
    wait_gone(command);
    wait_until(
        "the wrapper gone",
        LIMIT,
        || !matches!(state_of(wrapper), Some(s) if s != 'Z' && s != 'X'),
    );
    let out = oo(&sb, &["run", "job", "--", "true"]);
    out.expect(75).says(&format!(
        "pid {leftover} (`sleep 100001`), a leftover process of the run started by pid \
             {wrapper} (`{recorded}`"
    ));
}

/// `status` says how the last run ended in the words `history` uses: a
/// script released with `--exit 0` is "released, exit 0" in both, and one
/// released without a code "released, exit unknown".
#[test]
fn status_says_how_a_released_script_ended_as_history_does() {
    let sb = Sandbox::new(MARK);
    for (lock, exit, words) in [
        ("ok", " --exit 0", "released, exit 0"),
        ("bare", "", "released, exit unknown"),
    ] {
        script(
            &sb,
            &format!(
                "\"$OO\" --dir \"$D\" acquire {lock} || exit 9; \
                 \"$OO\" --dir \"$D\" release {lock}{exit}"
            ),
        )
        .expect(0);
        oo(&sb, &["history", lock]).expect(0).prints(words);
        let status = oo(&sb, &["status", lock]);
        let row = status
            .expect(0)
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{lock}\t")))
            .unwrap_or_else(|| panic!("{status:#?}"))
            .to_owned();
        let last_run = row.split('\t').nth(6).unwrap();
        assert!(last_run.starts_with(&format!("{words}, ")), "{status:#?}");
    }
}

/// A store's waiters are of any host, and a pid means something only on
/// its own: `status` names each waiter's host beside its pid. The waiter
/// here runs in a UTS namespace of its own, as another host.
#[test]
fn store_status_names_each_waiters_host() {
    if !is_root() || !have("unshare") {
        eprintln!("skipped: needs root and unshare (a waiter on another host name)");
        return;
    }
    let Some(pg) = Db::new_or_skip() else {
        return;
    };
    let mut sb = Sandbox::new(MARK);
    let url = pg.url();
    let store = |sb: &Sandbox, args: &[&str]| {
        let mut c = sb.program(BIN);
        c.arg("--store").arg(&url).args(args);
        c
    };
    let holder = sb.keep(store(&sb, &["run", "job", "--", "sleep", "100000"]));
    // The holder first: a waiter started before it holds would take the
    // lease itself.
    // (Until its row is written, `job` is no such lock: 125.)
    wait_until("the holder holds the lease", LIMIT, || {
        let out = finish(store(&sb, &["status", "--json", "job"]), LIMIT);
        out.code() == 0 && out.json()["locks"][0]["pid"] == holder
    });
    let mut waiter = sb.program("unshare");
    waiter
        .args(["-u", "sh", "-c", "hostname waiter-b && exec \"$@\"", "sh"])
        .arg(BIN)
        .args(["--store", &url, "run", "--wait", "1h", "job", "--", "true"]);
    let waiter = sb.keep(waiter);
    let mut v = serde_json::Value::Null;
    wait_until("the waiter in the store's line", LIMIT, || {
        v = finish(store(&sb, &["status", "--json", "job"]), LIMIT).json();
        v["locks"][0]["waiters"]
            .as_array()
            .is_some_and(|w| w.len() == 1)
    });
    assert_eq!(v["locks"][0]["pid"], holder, "{v:#}");
    assert_eq!(v["locks"][0]["waiters"][0]["host"], "waiter-b", "{v:#}");
    let table = finish(store(&sb, &["status", "job"]), LIMIT);
    table
        .expect(0)
        .prints(&format!("[waiting: pid {waiter} on waiter-b for "));
}

/// `reap` with a store set (`$ONLYONE_STORE`) works on a lock directory
/// all the same: it says which (the default one here), once, unless `-q`;
/// with a directory named, it has nothing to say. In a namespace of its
/// own: the default directory is root's `/run/onlyone`.
#[test]
fn reap_with_a_store_set_says_which_directory_it_works_in() {
    let Some(ns) = Ns::new("reap_with_a_store_set_says_which_directory_it_works_in") else {
        return;
    };
    let reap = |args: &[&str]| {
        let mut c = ns.oo(None, args);
        c.env("ONLYONE_STORE", NO_STORE);
        ns.run(c, LIMIT, &format!("reap {}", args.join(" ")))
    };
    let out = reap(&["reap", "agent"]);
    out.expect(0)
        .says("reap: a store is set")
        .says("the default lock directory `/run/onlyone`");
    assert_eq!(out.stderr.matches("a store is set").count(), 1, "{out:#?}");
    reap(&["reap", "-q", "agent"]).expect(0).quiet();
    let out = reap(&["--dir", "/run/lock/jobs", "reap", "agent"]);
    out.expect(0);
    assert!(!out.stderr.contains("store"), "{out:#?}");
}

/// The manual pages, as `onlyone manpages` writes them: each synopsis
/// shows every option with its argument as OPTIONS lists it (`--dir
/// <DIR>`), no section is called EXTRA, and every page a page names is
/// one that is written (no `onlyone-help(1)`).
#[test]
fn the_manual_pages_show_option_arguments_and_name_only_written_pages() {
    let sb = Sandbox::new(MARK);
    let dir = sb.path("man");
    oo(&sb, &["manpages", dir.to_str().unwrap()]).expect(0);
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    assert!(pages.len() > 10, "{pages:?}");
    let mut options_seen = 0;
    for page in &pages {
        let roff = std::fs::read_to_string(dir.join(page)).unwrap();
        let sections = sections(&roff);
        let names: Vec<&str> = sections.iter().map(|(n, _)| n.as_str()).collect();
        assert!(!names.contains(&"EXTRA"), "{page}: {names:?}");
        let synopsis = &sections
            .iter()
            .find(|(n, _)| n == "SYNOPSIS")
            .unwrap_or_else(|| panic!("{page}: no SYNOPSIS"))
            .1;
        for (name, body) in &sections {
            if !name.ends_with("OPTIONS") {
                continue;
            }
            for option in option_headers(body) {
                assert!(
                    synopsis.contains(&option),
                    "{page}: the synopsis lacks `{option}`: {synopsis}"
                );
                options_seen += 1;
            }
        }
        let text = plain(&roff);
        for (at, _) in text.match_indices("(1)") {
            let start = text[..at]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .map_or(0, |i| i + 1);
            let named = &text[start..at];
            if named.starts_with("onlyone") {
                assert!(
                    pages.contains(&format!("{named}.1")),
                    "{page} names {named}(1), which is not written: {pages:?}"
                );
            }
        }
    }
    assert!(options_seen > 50, "only {options_seen} options found");
    let run = std::fs::read_to_string(dir.join("onlyone-run.1")).unwrap();
    let synopsis = plain(&sections(&run)[1].1);
    assert!(synopsis.starts_with("onlyone run ["), "{synopsis}");
    for page in pages.iter().filter(|p| p.starts_with("onlyone-")) {
        let sub = &page["onlyone-".len()..page.len() - ".1".len()];
        let roff = std::fs::read_to_string(dir.join(page)).unwrap();
        let synopsis = &sections(&roff)[1].1;
        assert!(
            synopsis.starts_with(&format!("onlyone {sub} ")),
            "{page}: the synopsis is to be typed as `onlyone {sub}`: {synopsis}"
        );
    }
    for want in [
        "[--wait <DUR>]",
        "[--held-exit <N>]",
        "<LOCK> -- <COMMAND>...",
    ] {
        assert!(synopsis.contains(want), "{want}: {synopsis}");
    }
}

/// roff as text: fonts and escapes undone, words joined by one space.
fn plain(roff: &str) -> String {
    let text = roff
        .replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "")
        .replace("\\-", "-")
        .replace("\\*(Aq", "'")
        .replace("\\&", "");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A page's sections: each `.SH` title and its body as text.
fn sections(roff: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in roff.lines() {
        if let Some(title) = line.strip_prefix(".SH ") {
            out.push((title.trim_matches('"').to_owned(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out.into_iter().map(|(n, b)| (n, plain(&b))).collect()
}

/// The options an OPTIONS section lists, each as the synopsis should show
/// it: `--wait <DUR>`, `--queue`, `-q|--quiet`. (The body is text: a
/// header is what follows `.TP`.)
fn option_headers(body: &str) -> Vec<String> {
    body.split(".TP")
        .skip(1)
        .filter_map(|item| {
            let header = item.trim().split(" [default").next()?;
            let mut words = header.split(' ');
            let first = words.next()?;
            if !first.starts_with('-') {
                return None;
            }
            let flag = match first.strip_suffix(',') {
                Some(short) => format!("{short}|{}", words.next()?),
                None => first.to_owned(),
            };
            Some(match words.next().filter(|w| w.starts_with('<')) {
                Some(value) => format!("{flag} {value}"),
                None => flag,
            })
        })
        .collect()
}

/// `check` says one hour as `1h`, the way `--max-age` takes it.
#[test]
fn check_says_one_hour_as_1h() {
    let sb = Sandbox::new(MARK);
    oo(&sb, &["run", "job", "--", "false"]).expect(1);
    let out = oo(&sb, &["check", "job", "--max-age", "1h"]);
    out.expect(2).prints("(max-age 1h)");
    assert!(!out.stdout.contains("1h0m"), "{out:#?}");
    let out = oo(&sb, &["check", "job", "--max-age", "2d"]);
    out.expect(2).prints("(max-age 2d)");
}

/// The README speaks to a user who has not read the design notes: no
/// "seed", and the runner `--linger` is for is said for what it is.
#[test]
fn the_readme_says_what_the_runner_is() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        !readme.to_lowercase().contains("seed"),
        "the README says seed"
    );
    let words = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("start each fire as an interactive session in a terminal and leave it open"),
        "the README says what the runner is"
    );
    let guide = std::fs::read_to_string(root.join("doc/library.md")).unwrap();
    assert!(!guide.contains("the seed"), "doc/library.md says the seed");
}

/// The README's first command, one command line, from a 0700 directory
/// (a `mktemp -d` clone) as root, with each `cargo run -q --` being the
/// binary under test: it runs, and shows a newcomer the run's record,
/// then the lock's `status` and its `history`; it writes nothing in the
/// machine's `/var/lib/onlyone` (a namespace's own, fresh, here): its
/// history is beside the demo's lock directory, where `history` found it.
#[test]
fn the_readmes_first_command_leaves_the_machines_state_alone() {
    let Some(ns) = Ns::new("the_readmes_first_command_leaves_the_machines_state_alone") else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let first_block = readme
        .split_once("```sh\n")
        .and_then(|(_, b)| b.split_once("\n```"))
        .unwrap()
        .0;
    let commands: Vec<&str> = first_block
        .lines()
        .filter(|l| l.starts_with("cargo run -q -- "))
        .collect();
    assert_eq!(commands.len(), 1, "one command line: {first_block}");
    let line = commands[0];
    let command = line.replace("cargo run -q --", OO);
    assert!(
        first_block.lines().any(|l| l == "cargo test"),
        "{first_block}"
    );
    let out = ns.run(
        ns.sh(
            None,
            &format!("mkdir -m 0700 /tmp/clone && cd /tmp/clone && {command}"),
        ),
        LIMIT,
        line,
    );
    out.expect(0);
    let mut record = out.stdout.lines();
    assert!(
        record.next().is_some_and(|l| l.parse::<u32>().is_ok()),
        "the record first: {out:#?}"
    );
    let (record, rest) = out.stdout.split_once("\nLOCK\t").expect("then status");
    assert!(record.contains("\nstart="), "{out:#?}");
    let (status, history) = rest.split_once("\ndemo: ").expect("then history");
    assert!(status.contains("\ndemo\tfree\t"), "{out:#?}");
    assert!(history.starts_with("1 run(s)"), "{out:#?}");
    assert!(history.contains("exit 0"), "{out:#?}");
    assert!(
        !ns.host_path("/var/lib/onlyone").exists(),
        "the demo wrote the machine's state directory: {line}"
    );
}

// ---------------------------------------------------------------------------
// Issue 47's smaller items: `run --help`'s tmux example, `status` of a
// name that is nowhere, a name's first character.

/// `run --help`'s tmux example, run as written (`./agent` an idle
/// script): the agent's tmux server is the job's own (`-L`), never the
/// default one a user's own sessions are on (the README warns against
/// it), and the agent, in its window, holds the lock.
#[test]
fn the_run_helps_tmux_example_uses_a_server_of_its_own() {
    if !have("tmux") {
        eprintln!("tmux is not installed: skipping (.ci/run installs it)");
        return;
    }
    let sb = Sandbox::new(MARK);
    let help = oo(&sb, &["run", "--help"]);
    help.expect(0);
    let lines: Vec<&str> = help.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("onlyone run --linger"))
        .expect("the tmux example");
    let example = format!(
        "{} {}",
        lines[at].trim().trim_end_matches('\\').trim_end(),
        lines[at + 1].trim()
    );
    assert!(example.contains("tmux"), "{example}");
    let work = sb.subdir("work");
    let tmux_tmp = sb.subdir("tmux");
    let pid_file = sb.path("agent.pid");
    put(
        &work.join("agent"),
        format!(
            "#!/bin/sh\necho $$ > {p}.tmp && mv {p}.tmp {p}\nexec sleep 100000\n",
            p = pid_file.display()
        ),
    );
    std::fs::set_permissions(
        work.join("agent"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let user = |prog: &str| {
        let mut c = sb.program(prog);
        c.current_dir(&work)
            .env("TMUX_TMPDIR", &tmux_tmp)
            .env("PATH", path_with_onlyone(sb.dir()))
            .env("ONLYONE_DIR", sb.dir())
            .env_remove("TMUX")
            .env_remove("ONLYONE_TOKEN")
            .env_remove("ONLYONE_LOCK");
        c
    };
    let mut c = user("sh");
    c.args(["-c", &example]);
    finish_checked(c, LIMIT, &example).expect(0);
    wait_until("the agent to start", LIMIT, || pid_file.exists());
    let mut status = user(BIN);
    status.args(["status", "--json", "agent"]);
    let json = finish(status, LIMIT).json();
    assert_eq!(json["locks"][0]["state"], "held", "{json}");
    let uid = rustix::process::geteuid().as_raw();
    let servers: Vec<String> = std::fs::read_dir(tmux_tmp.join(format!("tmux-{uid}")))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !servers.iter().any(|s| s == "default"),
        "the example used the default tmux server: {servers:?}\n{example}"
    );
    assert_eq!(servers.len(), 1, "one server of the job's own: {servers:?}");
    let mut kill = user("tmux");
    kill.args(["-L", &servers[0], "kill-server"]);
    let _ = finish(kill, LIMIT);
}

/// `status` of a name that is nowhere (no lock file, no journal, no slot
/// file: a typo) says there is no such lock, with `check`'s hint, and
/// exits 125 as `history` does (`--json` too, nothing on stdout). A lock
/// that ran and is free is "free" (0), its lock file gone (as after a
/// reboot that emptied `/run`) and its journal left; so is a lock file
/// with no journal, and a slot's file with neither. Of several names, the
/// ones that are there are shown and the exit is 125.
#[test]
fn status_of_a_name_that_is_nowhere_says_there_is_no_such_lock() {
    let sb = Sandbox::new(MARK);
    oo(&sb, &["run", "sync", "--", "true"]).expect(0);
    for args in [&["status", "synk"][..], &["status", "--json", "synk"]] {
        let out = oo(&sb, args);
        out.expect(125)
            .says("synk: no such lock")
            .says(NOWHERE_HINT);
        assert_eq!(out.stdout, "", "{out:#?}");
    }
    let both = oo(&sb, &["status", "sync", "synk"]);
    both.expect(125)
        .prints("sync\tfree\t")
        .says("synk: no such lock");
    assert!(!both.stdout.contains("synk"), "{both:#?}");
    // Its run released the lock and removed its file: its journal is left.
    assert!(!sb.lock("sync").exists());
    oo(&sb, &["status", "sync"])
        .expect(0)
        .prints("sync\tfree\t");
    put(&sb.lock("other"), format!("{}\n", std::process::id()));
    oo(&sb, &["status", "other"]).expect(0);
    // A slot's file alone (no lock file, no journal): the lock is there.
    let (pid, start) = dead_process();
    put(
        &sb.path("pool.lock.slot.1"),
        record_text(pid, start, &"ab".repeat(16)),
    );
    oo(&sb, &["status", "pool"]).expect(0).prints("pool");
}

/// The same with a store: a name with no lease row and no history there
/// is no such lock (125), a lock that ran is shown (0).
#[test]
fn store_status_of_a_name_that_is_nowhere_says_there_is_no_such_lock() {
    let Some(db) = Db::new_or_skip() else {
        return;
    };
    let sb = Sandbox::new(MARK);
    let url = db.url();
    let store = |args: &[&str]| {
        let mut c = sb.program(BIN);
        c.arg("--store").arg(&url).args(args);
        finish(c, LIMIT)
    };
    store(&["run", "job", "--", "true"]).expect(0);
    let out = store(&["status", "jbo"]);
    out.expect(125)
        .says("jbo: no such lock: no lease row and no history of `jbo` in the store")
        .says(NOWHERE_HINT);
    assert_eq!(out.stdout, "", "{out:#?}");
    store(&["status", "job"]).expect(0).prints("job");
}

/// A name whose first character is a letter of another alphabet, or
/// accented, is refused saying that a name starts with an ASCII letter or
/// a digit, not "a letter".
#[test]
fn a_name_must_start_with_an_ascii_letter_or_digit() {
    let sb = Sandbox::new(MARK);
    oo(&sb, &["run", "ünï", "--", "true"])
        .expect(125)
        .says("`ünï` is not a lock name: it must start with an ASCII letter or a digit")
        .says("A name is an ASCII letter or digit, then up to 63 ASCII letters, digits");
}
