//! The PostgreSQL store attacked: from the network between a host and the
//! store (a proxy that strips TLS and asks for the password in clear),
//! from the store's rows (NULLs and huge values where onlyone wrote
//! values, as a role that owns the table can leave them), through the
//! messages (a password in the URL, in every form), from another role
//! with the README's grants, and from another account on the host that
//! squats the server's Unix socket. Each test skips, saying why, where
//! PostgreSQL is not installed.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::pg::{Db, Pg};
use support::*;

const HANG: Duration = Duration::from_secs(60);

/// What a TLS-stripping proxy saw on one connection.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// The client asked for TLS (an SSLRequest) and was told "no".
    asked_tls: bool,
    /// The startup packet (user, database, ...), if one came.
    startup: Option<Vec<u8>>,
    /// Everything the client sent after it was asked for a cleartext
    /// password.
    after_auth: Vec<u8>,
}

/// A proxy on 127.0.0.1 as a network attacker runs it: it answers `N`
/// (no TLS) to an SSLRequest, reads the startup packet, asks for the
/// password in clear (AuthenticationCleartextPassword) and records
/// whatever comes back.
struct StripProxy {
    port: u16,
    /// Connections accepted so far.
    accepted: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl StripProxy {
    fn start() -> StripProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let accepted: Arc<AtomicUsize> = Arc::default();
        let (log, count) = (seen.clone(), accepted.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let log = log.clone();
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut s = Seen::default();
                    let packet = |c: &mut std::net::TcpStream| -> Option<Vec<u8>> {
                        let mut len = [0u8; 4];
                        c.read_exact(&mut len).ok()?;
                        let n = u32::from_be_bytes(len).checked_sub(4)? as usize;
                        let mut body = vec![0u8; n.min(1 << 16)];
                        c.read_exact(&mut body).ok()?;
                        Some(body)
                    };
                    let mut first = packet(&mut conn);
                    if first.as_deref() == Some(&[0x04, 0xd2, 0x16, 0x2f][..]) {
                        s.asked_tls = true;
                        let _ = conn.write_all(b"N");
                        first = packet(&mut conn);
                    }
                    s.startup = first;
                    if s.startup.is_some() {
                        // 'R', length 8, code 3: send the password in clear.
                        let _ = conn.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]);
                        let mut buf = [0u8; 4096];
                        while let Ok(n) = conn.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            s.after_auth.extend_from_slice(&buf[..n]);
                        }
                    }
                    log.lock().unwrap().push(s);
                });
            }
        });
        StripProxy {
            port,
            accepted,
            seen,
        }
    }

    /// What every accepted connection showed. A connection is logged once
    /// its client has closed it, which can come just after the client
    /// process exits: this waits until every accepted one is logged.
    fn seen(&self) -> Vec<Seen> {
        let logged = || self.seen.lock().unwrap().clone();
        wait_until("every proxy connection logged", HANG, || {
            logged().len() == self.accepted.load(Ordering::SeqCst)
        });
        logged()
    }
}

/// `onlyone --store URL ARGS...` with `PGPASSWORD` set to `password`.
fn oo_with(sb: &Sandbox, url: &str, password: &str, args: &[&str]) -> Out {
    let mut c = sb.program(BIN);
    c.arg("--store")
        .arg(url)
        .args(args)
        .env_remove("ONLYONE_STORE")
        .env_remove("PGPASSFILE")
        .env("PGPASSWORD", password);
    finish(c, HANG)
}

/// Item: `sslmode=prefer` could be stripped. A proxy that says "no TLS"
/// and asks for a cleartext password never gets it: the default
/// (`verify-full`) and `require` insist on TLS, `prefer` and `allow` are
/// refused before anything is sent, naming the fix. Only an explicit
/// `sslmode=disable` sends it, as the user asked.
#[test]
fn a_tls_stripping_proxy_never_gets_the_password() {
    let sb = Sandbox::new("ONLYONE_ATTACK_STORE_MARK");
    let proxy = StripProxy::start();
    let secret = "S3cret-pw";
    let base = format!("postgres://onlyone@127.0.0.1:{}/postgres", proxy.port);
    for url in [base.clone(), format!("{base}?sslmode=require")] {
        let out = oo_with(&sb, &url, secret, &["run", "job", "--", "true"]);
        out.expect(125).says("no password was sent");
        assert!(out.stderr.contains("sslmode=disable"), "{out:#?}");
        let out = oo_with(&sb, &url, secret, &["precheck", "job"]);
        out.expect(0).says("fail open");
    }
    let seen = proxy.seen();
    assert!(!seen.is_empty(), "the proxy was reached");
    for s in &seen {
        assert!(s.asked_tls, "TLS was asked for: {s:?}");
        assert_eq!(s.startup, None, "nothing past the refusal: {s:?}");
        assert!(!String::from_utf8_lossy(&s.after_auth).contains(secret));
    }
    let reached = seen.len();
    for weak in ["prefer", "allow"] {
        let url = format!("{base}?sslmode={weak}");
        oo_with(&sb, &url, secret, &["run", "job", "--", "true"])
            .expect(125)
            .says(&format!("sslmode={weak} is refused"))
            .says("sslmode=verify-full");
        oo_with(&sb, &url, secret, &["precheck", "job"])
            .expect(0)
            .says("sslmode=verify-full");
        oo_with(&sb, &url, secret, &["status"]).expect(125);
    }
    assert_eq!(
        proxy.seen().len(),
        reached,
        "a refused mode connects nowhere"
    );
    // Without TLS, as the URL says: the user's choice, and the proxy gets it.
    let out = oo_with(
        &sb,
        &format!("{base}?sslmode=disable"),
        secret,
        &["run", "job", "--", "true"],
    );
    out.expect(125);
    let plain = &proxy.seen()[reached..];
    assert!(
        plain
            .iter()
            .any(|s| !s.asked_tls && String::from_utf8_lossy(&s.after_auth).contains(secret)),
        "sslmode=disable sends the password as asked: {plain:?}"
    );
}

/// The default `verify-full` works against a server with TLS (the CA as
/// `sslrootcert`), by name and by address; `require` with
/// `channel_binding=require` too (SCRAM bound to the TLS channel: a proxy
/// that ends TLS itself cannot pass it on).
#[test]
fn the_default_verify_full_and_channel_binding_work_with_tls() {
    let pg = match Pg::start_tls() {
        Ok(pg) => pg,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let sb = Sandbox::new("ONLYONE_ATTACK_STORE_MARK");
    let ca = pg.ca().display().to_string();
    for host in ["localhost", "127.0.0.1"] {
        let url = format!(
            "postgres://onlyone@{host}:{}/postgres?sslrootcert={ca}",
            pg.port
        );
        oo_with(
            &sb,
            &url,
            support::pg::PASSWORD,
            &["run", "job", "--", "true"],
        )
        .expect(0);
        let st = oo_with(&sb, &url, support::pg::PASSWORD, &["status", "--json"]);
        let store = st.expect(0).json()["store"].as_str().unwrap().to_owned();
        assert!(store.ends_with("?sslmode=verify-full"), "{store}");
    }
    let bound = format!(
        "postgres://onlyone@127.0.0.1:{}/postgres?sslmode=require&channel_binding=require",
        pg.port
    );
    oo_with(
        &sb,
        &bound,
        support::pg::PASSWORD,
        &["run", "job", "--", "true"],
    )
    .expect(0);
}

/// A role that may create and grant: the README's tables, and a role
/// `role` with `password` and the README's grants.
fn readme_store(pg: &Db, role: &str, password: &str) {
    let sql = readme_block("store-schema");
    if !pg
        .psql("SELECT to_regclass('onlyone_lease') IS NOT NULL")
        .contains('t')
    {
        let tables: String = sql
            .lines()
            .filter(|l| !l.starts_with("GRANT"))
            .map(|l| format!("{l}\n"))
            .collect();
        pg.psql(&tables);
    }
    pg.psql(&format!(
        "CREATE ROLE {role} LOGIN PASSWORD '{}'",
        password.replace('\'', "''")
    ));
    let grants: String = sql
        .lines()
        .filter(|l| l.starts_with("GRANT"))
        .map(|l| l.replace(" TO jobs;", &format!(" TO {role};")) + "\n")
        .collect();
    pg.psql(&grants);
}

/// A password that needs escaping in a URL, and its pieces (none may show
/// anywhere).
const ODD_PW: &str = "p/ss@w:rd%S3";
const ODD_PIECES: [&str; 6] = ["p/ss", "ss@w", "w:rd", "rd%S3", "%2Fss", "%40w"];

fn assert_masked(out: &Out) {
    for piece in ODD_PIECES {
        assert!(
            !out.stdout.contains(piece) && !out.stderr.contains(piece),
            "`{piece}` of the password shows: {out:#?}"
        );
    }
}

/// Item: a password in `?password=`, or with `/`, `@`, `:` (escaped or
/// not) in the URL, was printed unmasked. In every form it works, and no
/// piece of it shows in `status --json`, in messages, or in the errors of
/// a refused login and of a connection that fails.
#[test]
fn a_password_in_the_url_never_shows_in_any_form() {
    // A cluster of its own: the role `jobs`, and the URLs as written.
    let pg = match Db::own(Pg::start()) {
        Ok(pg) => pg,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let sb = Sandbox::new("ONLYONE_ATTACK_STORE_MARK");
    readme_store(&pg, "jobs", ODD_PW);
    let encoded = "p%2Fss%40w%3Ard%25S3";
    let at = |port: u16, wrong: &str| {
        let h = format!("127.0.0.1:{port}/postgres");
        vec![
            format!("postgres://jobs:{encoded}{wrong}@{h}?sslmode=disable"),
            format!("postgres://jobs:p/ss@w:rd%25S3{wrong}@{h}?sslmode=disable"),
            format!("postgres://jobs@{h}?sslmode=disable&password={encoded}{wrong}"),
            format!("postgres://jobs@{h}?password=p/ss@w:rd%25S3{wrong}&sslmode=disable"),
        ]
    };
    for url in at(pg.port, "") {
        let out = oo_with(&sb, &url, "", &["run", "job", "--", "true"]);
        out.expect(0);
        assert_masked(&out);
        let st = oo_with(&sb, &url, "", &["status", "--json"]);
        assert_masked(st.expect(0));
        assert_eq!(
            st.json()["store"],
            format!(
                "postgres://jobs@127.0.0.1:{}/postgres?sslmode=disable",
                pg.port
            )
        );
        assert_masked(oo_with(&sb, &url, "", &["status"]).expect(0));
        assert_masked(oo_with(&sb, &url, "", &["history", "job"]).expect(0));
    }
    for url in at(pg.port, "-wrong") {
        let out = oo_with(&sb, &url, "", &["run", "job", "--", "true"]);
        out.expect(125).says("refused the credentials");
        assert_masked(&out);
        assert_masked(oo_with(&sb, &url, "", &["precheck", "job"]).expect(0));
    }
    for url in at(support::pg::free_port(), "") {
        let out = oo_with(&sb, &url, "", &["status", "--json"]);
        out.expect(125).says("cannot reach the store");
        assert_masked(&out);
    }
    for url in [
        format!("postgres://jobs:{ODD_PW}@127.0.0.1:1/postgres?sslmode=sometimes"),
        format!("postgres://jobs@127.0.0.1:1/postgres?password={ODD_PW}&port=x"),
    ] {
        let out = oo_with(&sb, &url, "", &["run", "job", "--", "true"]);
        out.expect(125);
        assert_masked(&out);
    }
}

/// Max RSS (KiB) of `onlyone ARGS` run under `/usr/bin/time`, and its
/// output.
fn measured(sb: &Sandbox, url: &str, args: &[&str]) -> (Out, u64) {
    let rss = sb.path("rss");
    let _ = std::fs::remove_file(&rss);
    let mut c = sb.program("/usr/bin/time");
    c.args(["-f", "%M", "-o"])
        .arg(&rss)
        .arg(BIN)
        .arg("--store")
        .arg(url)
        .args(args)
        .env_remove("ONLYONE_STORE");
    let out = finish(c, HANG);
    let kib = std::fs::read_to_string(&rss)
        .unwrap_or_default()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no max RSS from /usr/bin/time: {out:#?}"));
    (out, kib)
}

/// Item: a NULL or oversized column from the store panicked `precheck`
/// (fail-open broken) or made `status` hold a huge `cmd` several times.
/// As a role that owns the tables can: NULL in every column that allows
/// it once NOT NULL is dropped, times at ±infinity, negative numbers, a
/// 300 MB command and a 300 MB event. Every reader exits normally
/// (precheck 0 or 75), each under 100 MB.
#[test]
fn hostile_rows_in_the_store_crash_nothing_and_stay_small() {
    let pg = match Db::new() {
        Ok(pg) => pg,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let sb = Sandbox::new("ONLYONE_ATTACK_STORE_MARK");
    let url = pg.url();
    oo_with(&sb, &url, "", &["run", "seed", "--", "true"]).expect(0);
    pg.psql(
        "ALTER TABLE onlyone_lease ALTER COLUMN epoch DROP NOT NULL, \
         ALTER COLUMN token DROP NOT NULL, ALTER COLUMN since DROP NOT NULL, \
         ALTER COLUMN lock_until DROP NOT NULL, ALTER COLUMN stop_requested DROP NOT NULL; \
         ALTER TABLE onlyone_event ALTER COLUMN event DROP NOT NULL",
    );
    pg.psql(
        "INSERT INTO onlyone_lease VALUES \
           ('nulls', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), \
           ('live-nulls', NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'infinity', NULL), \
           ('odd', -5, 'x', E'h\\x1b[31m', -1, -7, E'c\\x1b]0;pwned\\x07', '-infinity', \
            'infinity', NULL), \
           ('huge', 7, 't', 'h', 42, 0, repeat('x', 300000000), now(), \
            now() + interval '1 hour', false); \
         INSERT INTO onlyone_event (name, event) VALUES ('nulls', NULL), \
           ('huge', repeat('y', 300000000))",
    );
    let limit_kib = 100 * 1024;
    for (args, codes) in [
        (&["precheck", "nulls"][..], &[0][..]),
        (&["precheck", "live-nulls"], &[75]),
        (&["precheck", "odd"], &[75]),
        (&["precheck", "huge"], &[75]),
        (&["status"], &[0]),
        (&["status", "--json"], &[0]),
        (&["status", "huge", "--json"], &[0]),
        (&["history", "huge"], &[0]),
        (&["history", "nulls", "--json"], &[0]),
        (&["check", "huge", "odd", "nulls", "live-nulls"], &[0, 1, 2]),
        (&["metrics"], &[0]),
        (&["stop", "odd", "--deadline", "1s"], &[0, 1, 124, 125]),
    ] {
        let (out, kib) = measured(&sb, &url, args);
        assert!(
            codes.contains(&out.code()),
            "{args:?}: exit {}: {out:#?}",
            out.code()
        );
        assert!(kib < limit_kib, "{args:?} used {kib} KiB: {out:#?}");
        assert!(!out.stdout.contains('\x1b') && !out.stderr.contains('\x1b'));
    }
    // A row whose lease end is NULL is free: the next run takes it (with a
    // fence after the NULL one).
    oo_with(&sb, &url, "", &["run", "nulls", "--", "true"]).expect(0);
    oo_with(&sb, &url, "", &["run", "live-nulls", "--", "true"]).expect(75);
}

/// Item: several roles sharing one store database can expire, stop and
/// erase each other's locks with the README's grants. The decided
/// behaviour, documented in the README: a store's roles trust each other.
/// Role `b`, with only the README's grants, stops role `a`'s run, ends its
/// lease and erases its history; one database (or schema) per trust
/// domain is the way to keep them apart.
#[test]
fn roles_sharing_a_store_trust_each_other() {
    let pg = match Db::new() {
        Ok(pg) => pg,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let mut sb = Sandbox::new("ONLYONE_ATTACK_STORE_MARK");
    let (role_a, role_b) = (pg.role("role_a"), pg.role("role_b"));
    readme_store(&pg, &role_a, "pw-a");
    readme_store(&pg, &role_b, "pw-b");
    let url = |role: &str, pw: &str| {
        format!(
            "postgres://{role}:{pw}@127.0.0.1:{}/{}?sslmode=disable",
            pg.port,
            pg.name()
        )
    };
    let (a, b) = (url(&role_a, "pw-a"), url(&role_b, "pw-b"));
    let ready = sb.path("ready");
    let mut c = sb.program(BIN);
    c.args(["--store", &a, "run", "--lease", "8s", "--kill-after", "1s"])
        .args(["job", "--", "sh", "-c", "touch \"$READY\"; exec sleep 1000"])
        .env("READY", &ready)
        .env_remove("ONLYONE_STORE");
    let holder = sb.keep(c);
    wait_until("role a's run", HANG, || ready.exists());
    oo_with(&sb, &b, "", &["precheck", "job"]).expect(75);
    // b stops a's run with onlyone itself...
    oo_with(&sb, &b, "", &["stop", "job"]).expect(0);
    let kid = sb.kids.iter_mut().find(|k| k.id() == holder).unwrap();
    wait_until("role a's run to end", HANG, || {
        kid.try_wait().unwrap().is_some()
    });
    // ...and, with plain SQL, ends a live lease of a's and erases its
    // history (the grants allow UPDATE on leases, DELETE on events).
    oo_with(&sb, &a, "", &["run", "other", "--", "true"]).expect(0);
    let sql = "UPDATE onlyone_lease SET lock_until = 'infinity' WHERE name = 'other'; \
               DELETE FROM onlyone_event WHERE name = 'other'";
    let out = Command::new(pg_bin("psql"))
        .args(["-h", "127.0.0.1", "-p", &pg.port.to_string()])
        .args(["-U", &role_b, "-d", pg.name(), "-XAtqc", sql])
        .env("PGPASSWORD", "pw-b")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    oo_with(&sb, &a, "", &["run", "other", "--", "true"]).expect(75);
    let h = oo_with(&sb, &a, "", &["history", "other", "--json"]);
    assert!(!h.stdout.contains("\"start\""), "{h:#?}");
}

/// A PostgreSQL program's path.
fn pg_bin(name: &str) -> String {
    let mut found: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().unwrap().display().to_string()
}

/// A squatter of a PostgreSQL socket, as `nobody` runs it: it listens on
/// upstream's default socket `/tmp/.s.PGSQL.5432`, asks every client for
/// its password in clear (AuthenticationCleartextPassword) after the first
/// bytes it sends, and logs everything it receives in `/tmp/seen`,
/// between `<conn>` and `<end>`.
const SQUATTER: &str = r#"
import socket
s = socket.socket(socket.AF_UNIX)
s.bind("/tmp/.s.PGSQL.5432")
s.listen(16)
open("/tmp/listening", "w").close()
log = open("/tmp/seen", "ab", buffering=0)
while True:
    c, _ = s.accept()
    log.write(b"<conn>")
    c.settimeout(10)
    asked = False
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            log.write(b)
            if not asked:
                asked = True
                c.sendall(b"R\0\0\0\x08\0\0\0\x03")
    except Exception:
        pass
    c.close()
    log.write(b"<end>")
"#;

/// Issue 34, item 10: nobody squats `/tmp/.s.PGSQL.5432` (upstream's
/// default socket directory, which anyone may write in). Root's `run
/// --store 'postgres://jobs:PW@%2Ftmp/ops'` fails with an error that names
/// the socket, its server's user and the fix; with `requirepeer=postgres`
/// (in the URL or `PGREQUIREPEER`) it fails saying who answered; `precheck`
/// fails open. The squatter never receives a byte: no startup packet, no
/// password.
#[test]
fn a_squatted_socket_never_gets_the_password() {
    use support::ns::{NOBODY, Ns};
    if !have_python3() {
        return;
    }
    let Some(mut ns) = Ns::new("a_squatted_socket_never_gets_the_password") else {
        return;
    };
    std::fs::write(ns.host_path("/tmp/squat.py"), SQUATTER).unwrap();
    ns.attacker(NOBODY, "exec python3 /tmp/squat.py", "/tmp/listening");
    let url = "postgres://jobs:S3cretPW@%2Ftmp/ops";
    let root = |url: &str, env: &[(&str, &str)], args: &[&str]| {
        let mut all = vec!["--store", url];
        all.extend_from_slice(args);
        let mut c = ns.oo(None, &all);
        c.env_remove("PGREQUIREPEER").envs(env.iter().copied());
        ns.run(c, HANG, &all.join(" "))
    };
    let out = root(url, &[], &["run", "j", "--", "true"]);
    out.expect(125)
        .says("`/tmp/.s.PGSQL.5432`")
        .says("nobody")
        .says("requirepeer=")
        .says("/tmp");
    root(url, &[], &["precheck", "j"])
        .expect(0)
        .says("fail open")
        .says("`/tmp/.s.PGSQL.5432`");
    let named = format!("{url}?requirepeer=postgres");
    for (url, env) in [
        (named.as_str(), &[][..]),
        (url, &[("PGREQUIREPEER", "postgres")][..]),
    ] {
        root(url, env, &["run", "j", "--", "true"])
            .expect(125)
            .says("`/tmp/.s.PGSQL.5432`")
            .says("requirepeer")
            .says("postgres")
            .says("nobody");
    }
    let seen = ns.host_path("/tmp/seen");
    let log = || std::fs::read(&seen).unwrap_or_default();
    wait_until("the squatter to log every connection", HANG, || {
        let l = String::from_utf8_lossy(&log()).into_owned();
        l.matches("<conn>").count() == l.matches("<end>").count()
    });
    let log = String::from_utf8_lossy(&log()).into_owned();
    assert!(!log.contains("S3cretPW"), "the password leaked: {log:?}");
    assert_eq!(
        log.replace("<conn>", "").replace("<end>", ""),
        "",
        "the squatter was sent nothing"
    );
}

/// Issue 34, item 10: a real server's socket. In a directory of its own
/// (no directory on its path that another account may write in), it works
/// with and without `requirepeer` naming the server's user (in the URL or
/// `PGREQUIREPEER`); `requirepeer` naming another user is refused. In a
/// world-writable sticky directory (as upstream's `/tmp`) a server that is
/// neither root nor the caller is trusted only with `requirepeer`.
#[test]
fn a_servers_own_socket_works_with_and_without_requirepeer() {
    let pg = match Pg::start_with_shared_socket_dir() {
        Ok(pg) => pg,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let sb = Sandbox::new("ONLYONE_ATTACK_STORE_MARK");
    let server = if is_root() {
        "nobody".to_owned()
    } else {
        onlyone::command::user_name(rustix::process::geteuid().as_raw())
    };
    let other = if server == "nobody" { "root" } else { "nobody" };
    let url = |dir: &std::path::Path, query: &str| {
        format!(
            "postgres://onlyone@{}:{}/postgres{query}",
            dir.display().to_string().replace('/', "%2F"),
            pg.port
        )
    };
    let own = url(pg.data(), "");
    let run = |url: &str, env: &[(&str, &str)]| {
        let mut c = sb.program(BIN);
        c.arg("--store")
            .arg(url)
            .args(["run", "job", "--", "true"])
            .env_remove("ONLYONE_STORE")
            .env_remove("PGREQUIREPEER")
            .envs(env.iter().copied());
        finish(c, HANG)
    };
    run(&own, &[]).expect(0);
    run(&url(pg.data(), &format!("?requirepeer={server}")), &[]).expect(0);
    run(&own, &[("PGREQUIREPEER", &server)]).expect(0);
    let socket = format!("`{}/.s.PGSQL.{}`", pg.data().display(), pg.port);
    for (u, env) in [
        (url(pg.data(), &format!("?requirepeer={other}")), vec![]),
        (own.clone(), vec![("PGREQUIREPEER", other)]),
    ] {
        run(&u, &env)
            .expect(125)
            .says(&socket)
            .says(&format!("requirepeer={other}"))
            .says(&server);
    }

    let shared = url(pg.shared_socket_dir(), "");
    let out = run(&shared, &[]);
    if is_root() {
        out.expect(125)
            .says(&format!("`{}", pg.shared_socket_dir().display()))
            .says("requirepeer=");
    } else {
        // The server is the caller's own.
        out.expect(0);
    }
    run(
        &url(pg.shared_socket_dir(), &format!("?requirepeer={server}")),
        &[],
    )
    .expect(0);
}
