//! What a field trial found, run as a user would: the README's script
//! forms where onlyone cannot be run (cron's `PATH`), options that would be
//! silently ignored, `reap -q` under cron, a lock file's name given as the
//! lock, `--dir` beside a store, and `status` as another user of a lock
//! root holds. Every process a test starts is marked and killed when it
//! ends, passed or failed.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::ns::{NOBODY, Ns};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);
const MARK: &str = "ONLYONE_FIELD_MARK";
/// A store URL nothing answers at: the refusals come before any connection.
const NO_STORE: &str = "postgres://jobs@127.0.0.1:1/ops";

/// `onlyone --dir SANDBOX ARGS...`, run to its end.
fn oo(sb: &Sandbox, args: &[&str]) -> Out {
    let mut c = sb.program(BIN);
    c.arg("--dir").arg(sb.dir()).args(args);
    finish_checked(c, LIMIT, &format!("onlyone {}", args.join(" ")))
}

/// `onlyone ARGS...` with no `--dir` of the test's, and `env` added.
fn oo_env(sb: &Sandbox, env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut c = sb.program(BIN);
    c.env("ONLYONE_DIR", sb.dir()).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    finish_checked(c, LIMIT, &format!("onlyone {}", args.join(" ")))
}

/// Every fenced code block of README.md and the guides in doc/ that calls
/// `onlyone acquire`: the script forms the documents give, whatever their
/// marker.
fn readme_script_forms() -> Vec<String> {
    let mut blocks = Vec::new();
    for (_, text) in documents() {
        let text = format!("\n{text}");
        let mut rest = text.as_str();
        while let Some((_, after)) = rest.split_once("\n```") {
            let Some((_lang, body)) = after.split_once('\n') else {
                break;
            };
            let Some((block, tail)) = body.split_once("\n```") else {
                break;
            };
            if block.contains("onlyone acquire") {
                blocks.push(local_pings(block));
            }
            rest = tail;
        }
    }
    blocks
}

/// A form's `--ping URL`s pointed at a closed loopback port: the test
/// never reaches a monitor on another host (the ping fails open, said
/// once, as it would with that monitor down). A `--ping-file` is the work
/// dir's `sync.ping`, which names that port ([`script_dir`]).
fn local_pings(block: &str) -> String {
    let mut out = Vec::new();
    let mut words = block.split(' ').peekable();
    while let Some(w) = words.next() {
        out.push(w.to_owned());
        let local = match w {
            "--ping" => "http://127.0.0.1:1/check",
            "--ping-file" => "sync.ping",
            _ => continue,
        };
        if let Some(given) = words.next() {
            let tail: String = given
                .chars()
                .skip_while(|c| !matches!(c, ')' | '"'))
                .collect();
            out.push(format!("{local}{tail}"));
        }
    }
    out.join(" ")
}

/// The example of `onlyone acquire --help`.
fn help_script_form() -> String {
    let out = finish(
        {
            let mut c = Command::new(BIN);
            c.args(["acquire", "--help"]);
            c
        },
        LIMIT,
    );
    let example = out
        .stdout
        .split_once("Example (a script run by cron):\n")
        .expect("acquire --help has its example")
        .1;
    example
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split("   #").next().unwrap().trim())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A work dir for a script form: the script (the form, then its work:
/// `touch worked`) and the workers the forms start (`./fetch`, `./index`,
/// `./worker`), which do the same.
fn script_dir(sb: &Sandbox, n: usize, form: &str) -> PathBuf {
    let work = sb.subdir(&format!("work{n}"));
    for worker in ["fetch", "index", "worker"] {
        let p = work.join(worker);
        std::fs::write(&p, "#!/bin/sh\ntouch worked\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let pings = work.join("sync.ping");
    std::fs::write(&pings, "http://127.0.0.1:1/check\n").unwrap();
    std::fs::set_permissions(&pings, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = work.join("job.sh");
    std::fs::write(&script, format!("{form}\ntouch worked\n")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    work
}

/// Runs the script in `work` the ways cron and a user do (`sh -c
/// ./job.sh` as cron's line, `sh job.sh`, `bash job.sh`) with `path` as
/// `PATH`; returns each run's outcome and whether its work happened.
fn run_script(sb: &Sandbox, work: &Path, path: &str) -> Vec<(String, Out, bool)> {
    let mut outs = Vec::new();
    for how in [
        &["sh", "-c", "./job.sh"][..],
        &["sh", "job.sh"],
        &["bash", "job.sh"],
    ] {
        let _ = std::fs::remove_file(work.join("worked"));
        let mut c = sb.program(format!("/bin/{}", how[0]));
        c.args(&how[1..])
            .current_dir(work)
            .env("PATH", path)
            .env("ONLYONE_DIR", sb.dir());
        let out = finish_checked(c, LIMIT, &how.join(" "));
        // A form's background worker may outlive its script.
        wait_until("the script's workers to end", LIMIT, || {
            !sb.marked()
                .into_iter()
                .any(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|d| d == work))
        });
        let worked = work.join("worked").exists();
        outs.push((how.join(" "), out, worked));
    }
    outs
}

/// Item 4: under cron, whose `PATH` is `/usr/bin:/bin`, onlyone installed
/// in `/usr/local/bin` is not found. Every script form the README gives
/// (and `acquire --help`'s) must then stop before its work, with a non-zero
/// exit; the same when the `onlyone` found is not executable. With onlyone
/// found, the forms do their work when the lock is free and stop (75) when
/// it is held, so the test sees real scripts.
#[test]
fn every_readme_script_form_stops_when_onlyone_cannot_be_run() {
    let mut sb = Sandbox::new(MARK);
    let mut forms = readme_script_forms();
    assert!(
        forms.len() >= 2,
        "the README's script forms are found: {forms:#?}"
    );
    forms.push(help_script_form());
    for dir in ["/usr/bin", "/bin"] {
        assert!(
            !Path::new(dir).join("onlyone").exists(),
            "this test needs a cron PATH without onlyone; {dir}/onlyone exists"
        );
    }
    let cron_path = "/usr/bin:/bin";
    let noexec = sb.subdir("noexec");
    std::fs::copy(BIN, noexec.join("onlyone")).unwrap();
    std::fs::set_permissions(
        noexec.join("onlyone"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let noexec_path = format!("{}:{cron_path}", noexec.display());
    let with_onlyone = path_with_onlyone(sb.dir()).into_string().unwrap();
    let holder = sb.sleeper();

    for (n, form) in forms.iter().enumerate() {
        let work = script_dir(&sb, n, form);
        for (path, what) in [
            (cron_path, "onlyone not in PATH"),
            (noexec_path.as_str(), "onlyone not executable"),
        ] {
            for (how, out, worked) in run_script(&sb, &work, path) {
                assert!(
                    !worked,
                    "{what}: `{how}` did its work without the lock:\n{form}\n{out:#?}"
                );
                assert_ne!(out.code(), 0, "{what}: `{how}` exited 0:\n{form}\n{out:#?}");
            }
        }
        // The controls: free, the work is done; held, it is not (75).
        for (how, out, worked) in run_script(&sb, &work, &with_onlyone) {
            assert!(worked, "free: `{how}` did no work:\n{form}\n{out:#?}");
            assert_eq!(out.code(), 0, "free: `{how}`:\n{form}\n{out:#?}");
        }
        oo(&sb, &["acquire", "sync", "--owner", &holder.to_string()]).expect(0);
        for (how, out, worked) in run_script(&sb, &work, &with_onlyone) {
            assert!(!worked, "held: `{how}` did its work:\n{form}\n{out:#?}");
            assert_eq!(out.code(), 75, "held: `{how}`:\n{form}\n{out:#?}");
        }
        oo(&sb, &["release", "--force", "sync"]).expect(0);
    }
    sb.end_processes();
}

/// Item 8: `run --linger` with `--idle-timeout` (or `--max-time`) would
/// never apply the limit to the work that lingers: refused before the
/// command runs, naming both options and `reap --idle`.
#[test]
fn linger_with_a_limit_is_refused_naming_reap() {
    let sb = Sandbox::new(MARK);
    let ran = sb.path("ran");
    let script = format!("touch '{}'; sleep 1000 >/dev/null 2>&1 &", ran.display());
    for limit in ["--idle-timeout", "--max-time"] {
        let out = oo(
            &sb,
            &[
                "run", "--linger", limit, "1s", "agent", "--", "sh", "-c", &script,
            ],
        );
        out.expect(125)
            .says(limit)
            .says("--linger")
            .says("onlyone reap --idle");
        assert!(!ran.exists(), "{limit}: the command ran: {out:#?}");
        assert!(!sb.lock("agent").exists(), "{limit}: the lock was taken");
    }
    // Either alone still works.
    oo(&sb, &["run", "--idle-timeout", "5s", "a", "--", "true"]).expect(0);
    oo(&sb, &["run", "--linger", "a", "--", "true"]).expect(0);
}

/// Item 9: `reap -q` in a cron line prints nothing while it keeps
/// processes (the mail would come every minute), and says what it ended.
#[test]
fn reap_quiet_prints_only_what_it_ended() {
    let sb = Sandbox::new(MARK);
    let pid_file = sb.path("agent.pid");
    let out = oo(
        &sb,
        &[
            "run",
            "-q",
            "--linger",
            "agent",
            "--",
            "sh",
            "-c",
            &format!(
                "sleep 1000 >/dev/null 2>&1 & echo $! > '{}'",
                pid_file.display()
            ),
        ],
    );
    out.expect(0);
    let agent: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(running(agent));
    // Not idle long enough: kept. Loud says so; quiet says nothing.
    let loud = oo(&sb, &["reap", "--idle", "1h", "agent"]);
    loud.expect(0);
    assert!(loud.stdout.contains("kept pid"), "{loud:#?}");
    let cron_line = |idle: &str| {
        let mut c = sb.program("/bin/sh");
        c.args([
            "-c",
            &format!("\"$OO\" reap -q --idle {idle} --grace 1s agent"),
        ])
        .env("OO", BIN)
        .env("ONLYONE_DIR", sb.dir());
        finish_checked(c, LIMIT, "reap -q")
    };
    for _ in 0..2 {
        let out = cron_line("1h");
        out.expect(0);
        assert_eq!(out.stdout, "", "{out:#?}");
        assert_eq!(out.stderr, "", "{out:#?}");
    }
    assert!(running(agent), "kept");
    // Idle long enough: ended, and said.
    let mut said = String::new();
    wait_until("reap -q ends the idle agent", LIMIT, || {
        let out = cron_line("1s");
        said.push_str(&out.stdout);
        !running(agent)
    });
    assert!(
        said.contains(&format!("ended pid {agent}")),
        "reap -q says what it ended: {said:?}"
    );
    assert!(!said.contains("kept"), "{said:?}");
    // `-q` and `--json` together are refused (reap still exits 0).
    oo(&sb, &["reap", "-q", "--json", "agent"])
        .expect(0)
        .says("--json");
}

/// Item 11: `--max-time 0` and `--idle-timeout 0` would end the run at
/// once (`timeout 0` means no limit): refused before the command runs.
/// `--kill-after 0` is KILL right after TERM, as `--help` says.
#[test]
fn zero_limits_are_refused_and_a_zero_grace_is_kill_at_once() {
    let sb = Sandbox::new(MARK);
    let ran = sb.path("ran");
    let touch = format!("touch '{}'", ran.display());
    for limit in ["--max-time", "--idle-timeout"] {
        for zero in ["0", "0s", "0ms"] {
            let out = oo(&sb, &["run", limit, zero, "j", "--", "sh", "-c", &touch]);
            out.expect(125).says(limit).says("leave the option out");
            assert!(!ran.exists(), "{limit} {zero}: the command ran");
        }
    }
    let help = finish(
        {
            let mut c = Command::new(BIN);
            c.args(["run", "--help"]);
            c
        },
        LIMIT,
    );
    assert!(
        help.stdout.contains("0: KILL right after TERM"),
        "{}",
        help.stdout
    );
    let out = oo(
        &sb,
        &[
            "run",
            "--max-time",
            "300ms",
            "--kill-after",
            "0",
            "j",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 1000",
        ],
    );
    out.expect(124).within(Duration::from_secs(10));
}

/// Item 11: `NAME.lock`, the lock file's name as `ls` shows it, is the
/// lock NAME, not `NAME.lock.lock`.
#[test]
fn a_lock_files_name_is_the_lock() {
    let mut sb = Sandbox::new(MARK);
    let holder = sb.sleeper();
    oo(&sb, &["acquire", "--owner", &holder.to_string(), "sync"]).expect(0);
    for cmd in [
        &["run", "sync.lock", "--", "true"][..],
        &["acquire", "sync.lock"],
    ] {
        oo(&sb, cmd).expect(75).says("`sync`");
    }
    oo(&sb, &["precheck", "sync.lock"]).expect(75);
    let v = oo(&sb, &["status", "--json", "sync.lock"]).json();
    assert_eq!(v["locks"][0]["state"], "held", "{v:#}");
    assert_eq!(v["locks"][0]["name"], "sync", "{v:#}");
    oo(&sb, &["release", "--force", "sync.lock"]).expect(0);
    assert!(!sb.lock("sync").exists());
    assert!(!sb.path("sync.lock.lock").exists());
    let ls: Vec<String> = std::fs::read_dir(sb.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!ls.iter().any(|f| f.contains(".lock.lock")), "{ls:?}");
}

/// Item 11: with a store, `--dir` (and `--allow-shared-fs`) mean nothing to
/// the commands that work on the store's leases: refused, naming the
/// store's source, before any connection; a precheck still fails open;
/// `reap`, which works in the directory, takes them.
#[test]
fn dir_beside_a_store_is_refused_where_it_has_no_use() {
    let sb = Sandbox::new(MARK);
    let d = sb.dir().to_str().unwrap();
    let env = [("ONLYONE_STORE", NO_STORE)];
    for (args, code) in [
        (&["--dir", d, "status"][..], 125),
        (&["--dir", d, "history", "sync"], 125),
        (&["--dir", d, "run", "sync", "--", "true"], 125),
        (&["--dir", d, "stop", "sync"], 125),
        (&["--dir", d, "metrics"], 125),
        (&["--dir", d, "check", "sync"], 3),
        (&["--dir", d, "precheck", "sync"], 0),
        (&["--allow-shared-fs", "status"], 125),
    ] {
        let out = oo_env(&sb, &env, args);
        out.expect(code)
            .says("has no use with a store")
            .says("$ONLYONE_STORE");
        let mut typed = vec!["--store", NO_STORE];
        typed.extend_from_slice(args);
        let out = oo_env(&sb, &[], &typed);
        out.expect(code)
            .says("has no use with a store")
            .says("--store is set");
    }
    let out = oo_env(&sb, &env, &["--dir", d, "reap", "sync"]);
    out.expect(0);
    assert!(!out.stderr.contains("no use"), "{out:#?}");
    // From $ONLYONE_DIR, not typed: the store's commands go on (here to a
    // store that does not answer).
    let out = oo_env(&sb, &env, &["status"]);
    assert!(!out.stderr.contains("no use"), "{out:#?}");
}

/// Item 11: `--lease 5s` alone does not fit the default grace; the message
/// says it is the default, the largest grace that fits and a lease that
/// fits, and does not blame a `--kill-after` the user never typed.
#[test]
fn a_lease_too_short_for_the_default_grace_says_so() {
    let sb = Sandbox::new(MARK);
    let out = oo_env(
        &sb,
        &[],
        &[
            "--store", NO_STORE, "run", "--lease", "5s", "j", "--", "true",
        ],
    );
    out.expect(125)
        .says("the default --kill-after 5s")
        .says("--lease 5s")
        .says("pass --kill-after 3s")
        .says("--lease 8s");
    let out = oo_env(
        &sb,
        &[],
        &[
            "--store",
            NO_STORE,
            "run",
            "--lease",
            "5s",
            "--kill-after",
            "4s",
            "j",
            "--",
            "true",
        ],
    );
    out.expect(125).says("--kill-after 4s does not fit");
    assert!(!out.stderr.contains("default"), "{out:#?}");
}

/// Item 11: nobody asks about `sync`, which root's cron job holds in
/// `/run/onlyone`: nobody's own directory has no such lock (status says
/// so, and exits 125, as `history` does), and status says where root's
/// locks are; once nobody's own `sync` ran, it is free there, and root's
/// is still named.
#[test]
fn status_as_another_user_names_roots_dir_for_a_root_held_name() {
    let Some(mut ns) = Ns::new("status_as_another_user_names_roots_dir") else {
        return;
    };
    let job = ns.oo(None, &["run", "sync", "--", "sleep", "100000"]);
    ns.keep(job);
    let lock = ns.host_path("/run/onlyone/sync.lock");
    wait_until("root's run holds sync", LIMIT, || lock.exists());
    // Nothing of `sync` is nobody's: no such lock (125), and root's is
    // named.
    let out = ns.run(ns.oo(Some(NOBODY), &["status", "sync"]), LIMIT, "status");
    out.expect(125)
        .says("sync: no such lock: no lock file `/tmp/onlyone-65534/sync.lock`")
        .says("onlyone --dir /run/onlyone status sync");
    assert_eq!(out.stdout, "", "{out:#?}");
    // Once nobody's own `sync` ran, it is free there, and root's is named.
    ns.run(
        ns.oo(Some(NOBODY), &["run", "sync", "--", "true"]),
        LIMIT,
        "nobody's run",
    )
    .expect(0);
    let out = ns.run(ns.oo(Some(NOBODY), &["status", "sync"]), LIMIT, "status");
    out.expect(0)
        .says("`sync` is free in `/tmp/onlyone-65534`")
        .says("onlyone --dir /run/onlyone status sync");
    assert!(out.stdout.contains("free"), "{out:#?}");
    let out = ns.run(
        ns.oo(Some(NOBODY), &["status", "other"]),
        LIMIT,
        "status other",
    );
    out.expect(125).says("other: no such lock");
    assert!(!out.stderr.contains("/run/onlyone"), "{out:#?}");
}
