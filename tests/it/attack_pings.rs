//! Another account against the secrets of root's pinged jobs (issue 34,
//! item 7): a ping URL's path is its check's key (whoever has it can send
//! `/0` or `/fail`), a store URL may hold a password. Each test runs in a
//! private mount namespace with fresh `/run` and `/tmp`
//! ([`support::ns::Ns`]), the other account `nobody`, the ping server
//! ([`support::hc`]) on the test's loopback.
//!
//! - A URL given on the command line is masked in onlyone's own argv once
//!   it starts: nobody reading every `/proc/PID/cmdline` while the run
//!   runs finds neither a ping key nor a store password.
//! - The variables that carry them (`ONLYONE_PING`, `ONLYONE_RELEASE_PING`,
//!   `ONLYONE_RELEASE_PING_FILE`, `ONLYONE_STORE`) are not passed on to the
//!   command, which may drop to another account.
//! - `--ping-file` reads only a regular file of root's (the caller's) that
//!   no one else may write or read; a script's `acquire --export` hands on
//!   the file's path, never its URLs.
//! - The documents' cron lines never put a URL on the command line.

use crate::support;

use std::net::TcpListener;
use std::time::Duration;

use support::hc::PingServer;
use support::ns::{NOBODY, Ns, OO};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// Every process's command line, as nobody reads them, one a line.
fn cmdlines_as_nobody(ns: &Ns) -> String {
    ns.must(
        Some(NOBODY),
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done",
    )
    .stdout
    .clone()
}

/// The lines of `all` that are root's `onlyone` runs of a lock whose name
/// starts with `locks` (other tests' runs are on the host too).
fn onlyone_lines<'a>(all: &'a str, locks: &str) -> Vec<&'a str> {
    all.lines()
        .filter(|l| l.starts_with(&format!("{OO} ")) && l.contains(&format!(" {locks}")))
        .collect()
}

/// `http://127.0.0.1:PORT/`, the server's URLs' common start.
fn server_of(hc: &PingServer) -> String {
    hc.url("").trim_end_matches('/').to_owned() + "/"
}

/// A ping URL's key, given as `--ping URL` or `--ping=URL`, is not in any
/// command line nobody can read while root's runs run, and onlyone's own
/// still shows where it pings (nobody sees the runs: the test could not
/// pass for not seeing them).
#[test]
fn a_ping_url_on_roots_command_line_is_masked_while_it_runs() {
    let Some(mut ns) = Ns::new("a_ping_url_on_roots_command_line_is_masked") else {
        return;
    };
    let hc = PingServer::start();
    let (key1, key2) = (
        "0f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f",
        "5e6f7a8b-1c2d-4e3f-9a0b-7c6d5e4f3a2b",
    );
    let joined = format!("--ping={}", hc.url(key2));
    ns.keep(ns.oo(
        None,
        &[
            "run",
            "--ping",
            &hc.url(key1),
            "masked-ping-1",
            "--",
            "sleep",
            "100000",
        ],
    ));
    ns.keep(ns.oo(
        None,
        &["run", &joined, "masked-ping-2", "--", "sleep", "100000"],
    ));
    wait_until("both runs' start pings", LIMIT, || {
        hc.whats().iter().filter(|w| *w == "start").count() == 2
    });
    let all = cmdlines_as_nobody(&ns);
    let runs = onlyone_lines(&all, "masked-ping-");
    assert_eq!(runs.len(), 2, "nobody sees root's two runs: {all}");
    let shown = server_of(&hc);
    assert!(
        runs.iter()
            .any(|l| l.contains(&format!("--ping {shown}{}", "*".repeat(key1.len())))),
        "{runs:?}"
    );
    assert!(
        runs.iter()
            .any(|l| l.contains(&format!("--ping={shown}{}", "*".repeat(key2.len())))),
        "{runs:?}"
    );
    for key in [key1, key2] {
        assert!(!all.contains(key), "nobody read the key {key}: {runs:?}");
    }
    // The pings themselves went to the URLs as given.
    let paths: Vec<String> = hc.requests().iter().map(|r| r.path().to_owned()).collect();
    for key in [key1, key2] {
        assert!(paths.contains(&format!("/{key}/start")), "{paths:?}");
    }
}

/// A store URL's password, in the URL's user part or as `password=`, is
/// not in any command line nobody can read while root's runs wait for the
/// store (a server that accepts and never answers).
#[test]
fn a_store_password_on_roots_command_line_is_masked_while_it_runs() {
    let Some(mut ns) = Ns::new("a_store_password_on_roots_command_line_is_masked") else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (pw1, pw2) = ("S3cretPw-One", "S3cretPw-Two");
    let user_part = format!("postgres://onlyone:{pw1}@127.0.0.1:{port}/postgres?sslmode=disable");
    let param = format!(
        "--store=postgres://onlyone@127.0.0.1:{port}/postgres?sslmode=disable&password={pw2}"
    );
    // A lease of 300 s gives each call 30 s: they wait that long for the
    // silent server.
    let run = ["run", "--lease", "300s", "masked-store", "--", "true"];
    ns.keep(ns.oo(None, &[&["--store", &user_part][..], &run].concat()));
    ns.keep(ns.oo(None, &[&[param.as_str()][..], &run].concat()));
    // Both connected: each is past its start (and its masking).
    listener.set_nonblocking(true).unwrap();
    let mut held = Vec::new();
    wait_until("both runs connect", LIMIT, || {
        if let Ok((conn, _)) = listener.accept() {
            held.push(conn);
        }
        held.len() == 2
    });
    let all = cmdlines_as_nobody(&ns);
    let runs = onlyone_lines(&all, "masked-store");
    assert_eq!(runs.len(), 2, "nobody sees root's two runs: {all}");
    let masked = format!(
        "postgres://onlyone:{}@127.0.0.1:{port}/",
        "*".repeat(pw1.len())
    );
    assert!(runs.iter().any(|l| l.contains(&masked)), "{runs:?}");
    let masked = format!("&password={} ", "*".repeat(pw2.len()));
    assert!(runs.iter().any(|l| l.contains(&masked)), "{runs:?}");
    for pw in [pw1, pw2] {
        assert!(!all.contains(pw), "nobody read the password {pw}: {runs:?}");
    }
}

/// The secret-bearing variables of root's environment (a crontab's
/// `ONLYONE_PING=...` line, what `acquire --export` left a script) are not
/// passed on to the command, which here drops to nobody and writes out its
/// `/proc/self/environ`; onlyone still pings through `$ONLYONE_PING`, and
/// every other variable reaches the command.
#[test]
fn the_command_never_inherits_the_ping_variables() {
    let Some(ns) = Ns::new("the_command_never_inherits_the_ping_variables") else {
        return;
    };
    let hc = PingServer::start();
    let key = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d";
    let dump = "tr '\\0' '\\n' < /proc/self/environ > /tmp/command-env";
    let mut c = ns.oo(
        None,
        &[
            "run",
            "job",
            "--",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
            "-c",
            dump,
        ],
    );
    c.env("ONLYONE_PING", hc.url(key))
        .env(
            "ONLYONE_RELEASE_PING",
            "http://127.0.0.1:9/release-key-7f3e",
        )
        .env("ONLYONE_RELEASE_PING_FILE", "/run/release.ping")
        .env("KEPT_FOR_THE_COMMAND", "yes");
    ns.run(c, LIMIT, "root's run").expect(0).quiet();
    assert_eq!(hc.whats(), ["start", "0"], "{:?}", hc.requests());
    let env = std::fs::read_to_string(ns.host_path("/tmp/command-env")).unwrap();
    for var in [
        "ONLYONE_PING=",
        "ONLYONE_RELEASE_PING=",
        "ONLYONE_RELEASE_PING_FILE=",
    ] {
        assert!(
            !env.lines().any(|l| l.starts_with(var)),
            "{var} reached the command: {env}"
        );
    }
    assert!(
        !env.contains(key) && !env.contains("release-key-7f3e"),
        "{env}"
    );
    assert!(
        env.lines().any(|l| l == "KEPT_FOR_THE_COMMAND=yes"),
        "{env}"
    );
    assert!(env.lines().any(|l| l.starts_with("ONLYONE_LOCK=")), "{env}");
}

/// The same for a store's run: `$ONLYONE_STORE` (the URL with its
/// password) takes the lock, and the command, dropped to nobody, has it
/// not. Needs PostgreSQL's server programs.
#[test]
fn a_store_runs_command_never_inherits_the_store_url() {
    let Some(pg) = support::pg::Db::new_or_skip() else {
        return;
    };
    let Some(ns) = Ns::new("a_store_runs_command_never_inherits_the_store_url") else {
        return;
    };
    let dump = "tr '\\0' '\\n' < /proc/self/environ > /tmp/command-env";
    let mut c = ns.oo(
        None,
        &[
            "run",
            "job",
            "--",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
            "-c",
            dump,
        ],
    );
    c.env("ONLYONE_STORE", pg.url());
    ns.run(c, LIMIT, "root's store run").expect(0).quiet();
    let env = std::fs::read_to_string(ns.host_path("/tmp/command-env")).unwrap();
    assert!(
        !env.lines().any(|l| l.starts_with("ONLYONE_STORE=")),
        "{env}"
    );
    assert!(!env.contains(&pg.url()), "{env}");
    assert!(
        env.lines().any(|l| l == "ONLYONE_LOCK=postgres:job"),
        "{env}"
    );
}

/// `--ping-file`: root's own 0600 file (a comment, blank lines, spaces
/// around the URL) is read and pinged; a file nobody planted or could
/// write, one every user may read, a FIFO, a file with something that is
/// no URL and a missing file are refused before the command runs (125),
/// naming the file and the fix and never what it holds, and nobody's
/// server hears nothing.
#[test]
fn a_ping_file_others_could_write_or_read_is_refused() {
    let Some(mut ns) = Ns::new("a_ping_file_others_could_write_or_read_is_refused") else {
        return;
    };
    let hc = PingServer::start();
    let theirs = PingServer::start();
    let key = "d4c3b2a1-0f9e-4d8c-b7a6-5f4e3d2c1b0a";
    ns.must(
        None,
        &format!(
            "umask 077; printf '# the sync check\\n\\n  {}  \\n' > /run/good.ping",
            hc.url(key)
        ),
    );
    let ran = "/run/ran";
    let touch = format!("touch {ran}");
    let run = |ns: &Ns, file: &str| {
        ns.run(
            ns.oo(
                None,
                &["run", "--ping-file", file, "job", "--", "sh", "-c", &touch],
            ),
            LIMIT,
            file,
        )
    };
    run(&ns, "/run/good.ping").expect(0).quiet();
    assert_eq!(hc.whats(), ["start", "0"], "{:?}", hc.requests());
    assert!(hc.requests()[0].path().contains(key));
    ns.must(None, &format!("rm {ran}"));

    // nobody's own file (with nobody's URL, to get root's output), and a
    // FIFO of nobody's.
    ns.attacker(
        NOBODY,
        &format!(
            "umask 077; echo '{}' > /tmp/theirs.ping; mkfifo /tmp/fifo.ping; \
             touch /tmp/planted; exec sleep 100000",
            theirs.url("steal")
        ),
        "/tmp/planted",
    );
    ns.must(
        None,
        &format!(
            "umask 022; echo '{url}' > /run/open.ping; chmod 0666 /run/open.ping; \
             echo '{url}' > /run/group.ping; chmod 0620 /run/group.ping; \
             echo '{url}' > /run/readable.ping; chmod 0644 /run/readable.ping; \
             printf 'https://hc.example/ok\\nnot a url S3cretLine\\n' > /run/bad.ping; \
             chmod 0600 /run/bad.ping",
            url = hc.url(key)
        ),
    );
    for (file, says) in [
        ("/tmp/theirs.ping", "it belongs to nobody (uid 65534)"),
        ("/tmp/fifo.ping", "not a regular file"),
        ("/run/open.ping", "chmod go-w /run/open.ping"),
        ("/run/group.ping", "chmod go-w /run/group.ping"),
        ("/run/readable.ping", "chmod 600 /run/readable.ping"),
        ("/run/bad.ping", "--ping-file /run/bad.ping, line 2"),
        ("/run/missing.ping", "cannot open it"),
    ] {
        let out = run(&ns, file);
        out.expect(125).says(says).says(file);
        out.within(Duration::from_secs(10));
        assert!(!out.stderr.contains("S3cretLine"), "{out:#?}");
        assert!(!ns.host_path(ran).exists(), "{file}: the command ran");
    }
    assert!(theirs.requests().is_empty(), "{:?}", theirs.requests());
    assert_eq!(hc.whats(), ["start", "0"], "{:?}", hc.requests());
}

/// A script's `acquire --export --ping-file`: the assignments carry the
/// file's path, never its URL, so the script's workers (one dropped to
/// nobody here, which cannot read the 0600 file) never have it, nor does
/// an `onlyone run` inside the script hand the path on; `release --exit`
/// reads the file again and pings the end with the run's id.
#[test]
fn a_scripts_ping_file_keeps_the_url_from_its_workers() {
    let Some(ns) = Ns::new("a_scripts_ping_file_keeps_the_url_from_its_workers") else {
        return;
    };
    let hc = PingServer::start();
    let key = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
    ns.must(
        None,
        &format!("umask 077; echo '{}' > /run/sync.ping", hc.url(key)),
    );
    let drop_to_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups --";
    let script = format!(
        "vars=$(onlyone acquire -q sync --export --ping-file /run/sync.ping) || exit; \
         eval \"$vars\"; \
         echo \"$vars\" > /tmp/vars; \
         {drop_to_nobody} sh -c 'env > /tmp/worker-env; cat \"$ONLYONE_RELEASE_PING_FILE\" \
           > /tmp/worker-read 2>&1; true'; \
         onlyone run inner -- sh -c 'env > /tmp/inner-env'; \
         onlyone release sync --exit 4"
    );
    ns.run(ns.sh(None, &script), LIMIT, "root's script")
        .expect(0)
        .quiet();
    let read = |p: &str| std::fs::read_to_string(ns.host_path(p)).unwrap();
    let vars = read("/tmp/vars");
    assert!(
        vars.contains("ONLYONE_RELEASE_PING_FILE='/run/sync.ping'"),
        "{vars}"
    );
    for (what, text) in [
        ("the assignments", vars),
        ("the worker's environment", read("/tmp/worker-env")),
        ("what the worker could read", read("/tmp/worker-read")),
        ("the inner run's command", read("/tmp/inner-env")),
    ] {
        assert!(!text.contains(key), "{what} hold the key: {text}");
    }
    assert!(
        !read("/tmp/inner-env").contains("ONLYONE_RELEASE_PING_FILE"),
        "the inner run's command has the script's release file"
    );
    let reqs = hc.requests();
    assert_eq!(hc.whats(), ["start", "4"], "{reqs:?}");
    assert_eq!(reqs[0].query("rid"), reqs[1].query("rid"));
}

/// The documents' examples never put a ping URL on a command line: no
/// code block of the README or a guide has `--ping` followed by a URL
/// (the cron lines take it from a root-only file or the crontab's
/// environment).
#[test]
fn the_documents_never_put_a_ping_url_on_a_command_line() {
    for (path, text) in documents() {
        let mut in_block = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_block = !in_block;
                continue;
            }
            if !in_block {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            for (i, w) in words.iter().enumerate() {
                let value = match w.strip_prefix("--ping=") {
                    Some(v) => Some(v),
                    None if *w == "--ping" => words.get(i + 1).copied(),
                    None => None,
                };
                if let Some(v) = value {
                    assert!(
                        !v.contains("://"),
                        "{path}:{}: a ping URL on a command line: {line}",
                        n + 1
                    );
                }
            }
        }
    }
}
