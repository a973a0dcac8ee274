//! A throwaway PostgreSQL server for the store's tests: `initdb` in a temp
//! dir (as `nobody` when the tests run as root: the server refuses root),
//! a free port on 127.0.0.1, torn down when dropped, and when the process
//! that started it exits however it exits (a watchdog process stops it and
//! removes its directory). Nothing depends on a server someone started by
//! hand. And a TCP proxy that can black-hole a connection (stop
//! forwarding without closing).
//!
//! A test binary's store tests share one server, started on first use: a
//! [`Db`] is a database of a test's own on it (and roles of its own),
//! dropped with the test. A test that stops, restarts or reconfigures its
//! server has a cluster of its own ([`Db::own`], or a [`Pg`]).
//!
//! The server also listens on a Unix socket in its data directory. Under
//! root that directory is made in `/run`, so that no directory on the
//! socket's path is one another account can write in: onlyone trusts a
//! socket whose server is neither root nor its caller only there (or with
//! `requirepeer`). [`Pg::start_with_shared_socket_dir`] adds a socket in a
//! world-writable sticky directory, as upstream's default `/tmp` is.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The password of the cluster's superuser.
pub const PASSWORD: &str = "onlyone-test-pw";

/// PostgreSQL's programs (`initdb`, `pg_ctl`), where the distribution puts
/// them.
fn bin_dir() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists() && p.join("pg_ctl").exists())
        .collect();
    found.sort();
    found.pop()
}

/// A free port on 127.0.0.1 (bound then released: the server takes it at
/// once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running throwaway cluster.
pub struct Pg {
    data: PathBuf,
    bin: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    as_nobody: bool,
    /// More server settings (`-c` options): TLS, for one.
    extra: String,
    /// A world-writable sticky directory it listens in too, if any.
    shared_socket_dir: Option<PathBuf>,
    /// Stops the cluster and removes its directory.
    watchdog: Watchdog,
}

/// What a cluster is started with.
#[derive(Default)]
struct Setup {
    /// TLS with a throwaway CA's certificate; plain TCP refused.
    tls: bool,
    /// A socket in a world-writable sticky directory too.
    shared_socket_dir: bool,
    /// More `-c` settings.
    settings: &'static str,
}

impl Pg {
    /// Starts one, or says why it cannot (no PostgreSQL installed): the
    /// caller skips then.
    pub fn start() -> Result<Pg, String> {
        Pg::start_with(Setup::default())
    }

    /// Starts one that also listens in a world-writable sticky directory
    /// of its own ([`Pg::shared_socket_dir`]), as a server does in `/tmp`.
    pub fn start_with_shared_socket_dir() -> Result<Pg, String> {
        Pg::start_with(Setup {
            shared_socket_dir: true,
            ..Setup::default()
        })
    }

    /// The world-writable sticky directory a server started by
    /// [`Pg::start_with_shared_socket_dir`] listens in.
    pub fn shared_socket_dir(&self) -> &Path {
        self.shared_socket_dir.as_deref().unwrap()
    }

    /// Starts one that speaks TLS, with a certificate for `localhost` and
    /// `127.0.0.1` signed by a throwaway CA: [`Pg::ca`] is the CA's
    /// certificate (for `sslrootcert`). Plain TCP connections are refused.
    pub fn start_tls() -> Result<Pg, String> {
        Pg::start_with(Setup {
            tls: true,
            ..Setup::default()
        })
    }

    /// The throwaway CA's certificate of a server started by
    /// [`Pg::start_tls`].
    pub fn ca(&self) -> PathBuf {
        self.data.parent().unwrap().join("ca.crt")
    }

    fn start_with(setup: Setup) -> Result<Pg, String> {
        let bin = bin_dir().ok_or("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin)")?;
        let as_nobody = super::is_root();
        let dir = cluster_dir(as_nobody);
        let data = dir.join("data");
        // From here on the directory is the watchdog's to remove.
        let watchdog = Watchdog::start(&dir, &bin, as_nobody, &data);
        std::fs::create_dir(&data).unwrap();
        let pwfile = dir.join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        let mut extra = setup.settings.to_owned();
        if setup.tls {
            make_certificates(&dir)?;
            extra += &format!(
                " -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
                dir.display()
            );
        }
        if as_nobody {
            let ok = Command::new("chown")
                .args(["-R", "nobody:nogroup"])
                .arg(&dir)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err("cannot give the cluster's directory to nobody".into());
            }
        }
        let shared_socket_dir = setup.shared_socket_dir.then(|| {
            use std::os::unix::fs::PermissionsExt;
            let d = dir.join("shared");
            std::fs::create_dir(&d).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
            d
        });
        let pg = Pg {
            data,
            bin,
            port: free_port(),
            as_nobody,
            extra,
            shared_socket_dir,
            watchdog,
        };
        let out = pg
            .tool("initdb")
            .arg("-D")
            .arg(&pg.data)
            .args([
                "-U",
                "onlyone",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args(["-E", "UTF8", "--no-sync"])
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if setup.tls {
            // TCP connections must use TLS: a plain one is refused.
            let hba = pg.data.join("pg_hba.conf");
            let text = std::fs::read_to_string(&hba).unwrap();
            let text: String = text
                .lines()
                .map(|l| match l.strip_prefix("host ") {
                    Some(rest) => format!("hostssl {rest}\n"),
                    None => format!("{l}\n"),
                })
                .collect();
            std::fs::write(&hba, text).unwrap();
        }
        pg.start_again()?;
        Ok(pg)
    }

    /// A program of PostgreSQL's, as the cluster's owner.
    fn tool(&self, name: &str) -> Command {
        tool(&self.bin, self.as_nobody, name)
    }

    /// Starts the server (again), on the same port; waits until it accepts.
    pub fn start_again(&self) -> Result<(), String> {
        let log = self.data.parent().unwrap().join("log");
        let mut sockets = self.data.display().to_string();
        if let Some(shared) = &self.shared_socket_dir {
            sockets = format!("{sockets},{}", shared.display());
        }
        let out = self
            .tool("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&log)
            .arg("-o")
            .arg(format!(
                "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c max_connections=200{}",
                self.port, sockets, self.extra
            ))
            .args(["-w", "-t", "60", "start"])
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("pg_ctl start: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_ctl start failed: {}{}",
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// Stops the server at once (`-m immediate`: as a crash).
    pub fn stop_immediate(&self) {
        let _ = self
            .tool("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// The store URL (password in it) of the `postgres` database, for
    /// `port` (the server's, or a proxy's in front of it). (The chaos
    /// example's, which shares this file; a test's is its [`Db`]'s.)
    #[allow(dead_code)]
    pub fn url_at(&self, port: u16) -> String {
        format!("postgres://onlyone:{PASSWORD}@127.0.0.1:{port}/postgres?sslmode=disable")
    }

    /// The store URL.
    #[allow(dead_code)]
    pub fn url(&self) -> String {
        self.url_at(self.port)
    }

    /// Runs SQL with psql in database `db`, as the superuser over the
    /// socket: its output, or why it failed. Each of `sql` is a statement
    /// of its own (outside a transaction: `DROP DATABASE` may be one).
    fn try_psql(&self, db: &str, sql: &[&str]) -> Result<String, String> {
        let mut c = self.tool("psql");
        c.arg("-h").arg(&self.data).args([
            "-p",
            &self.port.to_string(),
            "-U",
            "onlyone",
            "-d",
            db,
            "-XAtq",
        ]);
        for s in sql {
            c.args(["-c", s]);
        }
        let out = c.stdin(Stdio::null()).output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }
}

/// A program of PostgreSQL's in `bin`, as the cluster's owner (`nobody`
/// when `as_nobody`).
fn tool(bin: &Path, as_nobody: bool, name: &str) -> Command {
    let prog = bin.join(name);
    if as_nobody {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"]).arg(prog);
        c.current_dir("/");
        c
    } else {
        Command::new(prog)
    }
}

/// A process that waits for the end of its stdin, a pipe whose other end
/// only this process holds, then stops the cluster at once and removes
/// its directory. The end comes when the cluster is done with
/// ([`Watchdog::finish`], which waits for that work: when it is dropped,
/// or as the process exits for the shared one), and when this process
/// ends in any other way: a test binary killed, or stopped with Ctrl-C,
/// drops nothing and runs no exit handler. It is in a process group of its
/// own, so that Ctrl-C at the terminal leaves it to do its work.
struct Watchdog {
    /// The process and its stdin's pipe, until the cluster is done with.
    process: Mutex<Option<(Child, ChildStdin)>>,
    /// What stops the cluster (a program and its arguments), and its
    /// directory, for [`Watchdog::finish`] to do itself if no process
    /// could start.
    fallback: Mutex<Option<(Vec<std::ffi::OsString>, PathBuf)>>,
}

impl Watchdog {
    fn start(dir: &Path, bin: &Path, as_nobody: bool, data: &Path) -> Watchdog {
        use std::os::unix::process::CommandExt;
        let mut c = tool(bin, as_nobody, "pg_ctl");
        c.arg("-D")
            .arg(data)
            .args(["-m", "immediate", "-w", "stop"]);
        let stop: Vec<std::ffi::OsString> = std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(ToOwned::to_owned)
            .collect();
        let mut c = Command::new("sh");
        c.args([
            "-c",
            "cat >/dev/null; \"$@\" >/dev/null 2>&1; rm -rf -- \"$CLUSTER_DIR\"",
            "sh",
        ])
        .args(&stop)
        .env("CLUSTER_DIR", dir)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
        let (process, fallback) = match c.spawn() {
            Ok(mut child) => {
                let stdin = child.stdin.take().unwrap();
                (Some((child, stdin)), None)
            }
            Err(_) => (None, Some((stop, dir.to_owned()))),
        };
        Watchdog {
            process: Mutex::new(process),
            fallback: Mutex::new(fallback),
        }
    }

    /// Stops the cluster and removes its directory, once; returns when
    /// that is done.
    fn finish(&self) {
        let process = self
            .process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((mut child, stdin)) = process {
            drop(stdin);
            let _ = child.wait();
        }
        let fallback = self
            .fallback
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((stop, dir)) = fallback {
            let _ = Command::new(&stop[0])
                .args(&stop[1..])
                .current_dir("/")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The cluster this test binary's store tests share, or why there is
/// none; set by the first test that asks.
static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();

/// The shared cluster, started by the first test that asks (the others
/// wait for it), or why it could not be. A static is never dropped: an
/// exit handler stops it, and waits for that, as the test binary exits
/// (its watchdog would, a moment later).
fn shared() -> Result<&'static Shared, String> {
    SHARED
        .get_or_init(|| {
            // Room for two tests' worth of contenders at a time, and more.
            let pg = Pg::start_with(Setup {
                settings: " -c max_connections=400",
                ..Setup::default()
            })?;
            // SAFETY: registers a function that takes no argument and
            // returns, as atexit(3) asks.
            unsafe { libc::atexit(stop_shared) };
            Ok(Shared {
                pg,
                next: AtomicU32::new(1),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// At exit: the shared cluster stopped and its directory removed.
extern "C" fn stop_shared() {
    if let Some(Ok(shared)) = SHARED.get() {
        shared.pg.watchdog.finish();
    }
}

/// The shared cluster and the number of the next test's database.
struct Shared {
    pg: Pg,
    next: AtomicU32,
}

/// Where a [`Db`] is.
enum Server {
    /// The test binary's shared cluster.
    Shared(&'static Pg),
    /// A cluster of the test's own.
    Own(Pg),
}

/// A test's own database: on the cluster the test binary shares
/// ([`Db::new`]), dropped with its roles when the test ends; or the
/// `postgres` database of a cluster of the test's own ([`Db::own`]), for a
/// test that stops, restarts or reconfigures its server.
pub struct Db {
    server: Server,
    name: String,
    /// The server's port on 127.0.0.1.
    pub port: u16,
}

impl Db {
    /// A new database on the shared cluster (started if it is not yet),
    /// or why there is none (no PostgreSQL installed): the caller skips
    /// then.
    pub fn new() -> Result<Db, String> {
        let shared = shared()?;
        let name = format!("test_{}", shared.next.fetch_add(1, Ordering::Relaxed));
        shared
            .pg
            .try_psql("postgres", &[&format!("CREATE DATABASE {name}")])
            .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
        Ok(Db {
            port: shared.pg.port,
            server: Server::Shared(&shared.pg),
            name,
        })
    }

    /// [`Db::new`], or says on stderr why it cannot ("skipped: ..."): the
    /// caller's test then skips.
    pub fn new_or_skip() -> Option<Db> {
        Db::new().map_err(|why| eprintln!("skipped: {why}")).ok()
    }

    /// The `postgres` database of a cluster of the test's own (`pg`, as
    /// [`Pg::start`] or [`Pg::start_tls`] gives it).
    pub fn own(pg: Result<Pg, String>) -> Result<Db, String> {
        let pg = pg?;
        Ok(Db {
            port: pg.port,
            server: Server::Own(pg),
            name: "postgres".to_owned(),
        })
    }

    /// The cluster.
    fn pg(&self) -> &Pg {
        match &self.server {
            Server::Shared(pg) => pg,
            Server::Own(pg) => pg,
        }
    }

    /// The cluster of the test's own, for what only such a test may do.
    fn own_pg(&self, what: &str) -> &Pg {
        match &self.server {
            Server::Own(pg) => pg,
            Server::Shared(_) => panic!(
                "{what}: only a test with a cluster of its own (`Db::own`) may; this one shares \
                 the test binary's"
            ),
        }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name of the test's role `base`: on the shared cluster, where
    /// roles are the cluster's, prefixed with the database's name (and
    /// dropped with it).
    pub fn role(&self, base: &str) -> String {
        match self.server {
            Server::Shared(_) => format!("{}_{base}", self.name),
            Server::Own(_) => base.to_owned(),
        }
    }

    /// The store URL (password in it), for `port` (the server's, or a
    /// proxy's in front of it).
    pub fn url_at(&self, port: u16) -> String {
        format!(
            "postgres://onlyone:{PASSWORD}@127.0.0.1:{port}/{}?sslmode=disable",
            self.name
        )
    }

    /// The store URL.
    pub fn url(&self) -> String {
        self.url_at(self.port)
    }

    /// Runs SQL with psql in the database, as the superuser over the
    /// socket.
    pub fn psql(&self, sql: &str) -> String {
        self.pg()
            .try_psql(&self.name, &[sql])
            .unwrap_or_else(|e| panic!("psql {sql}: {e}"))
    }

    /// The first setup of the store (before the line of waiters and
    /// before slots), made by a DBA for a role `jobs` that may not create
    /// or change tables: the URL of that role.
    pub fn first_setup_for_jobs(&self) -> String {
        let jobs = self.role("jobs");
        self.psql(&format!("CREATE ROLE {jobs} LOGIN PASSWORD 'jobs-pw'"));
        self.psql(&format!(
            "CREATE TABLE onlyone_lease (name text PRIMARY KEY, epoch bigint NOT NULL, \
               token text NOT NULL, host text, pid integer, uid integer, cmd text, \
               since timestamptz NOT NULL, lock_until timestamptz NOT NULL, \
               stop_requested boolean NOT NULL DEFAULT false); \
             CREATE TABLE onlyone_event (id bigserial PRIMARY KEY, name text NOT NULL, \
               event text NOT NULL); \
             CREATE INDEX onlyone_event_name ON onlyone_event (name, id); \
             GRANT SELECT, INSERT, UPDATE ON onlyone_lease TO {jobs}; \
             GRANT SELECT, INSERT, DELETE ON onlyone_event TO {jobs}; \
             GRANT USAGE ON SEQUENCE onlyone_event_id_seq TO {jobs}; \
             REVOKE CREATE ON SCHEMA public FROM PUBLIC"
        ));
        format!(
            "postgres://{jobs}:jobs-pw@127.0.0.1:{}/{}?sslmode=disable",
            self.port, self.name
        )
    }

    /// The cluster's data directory (its socket is there; its log,
    /// `log`, beside it).
    pub fn data(&self) -> &Path {
        self.pg().data()
    }

    /// The throwaway CA's certificate of a cluster of its own started by
    /// [`Pg::start_tls`].
    pub fn ca(&self) -> PathBuf {
        self.own_pg("its CA").ca()
    }

    /// Stops the test's own server at once (`-m immediate`: as a crash).
    pub fn stop_immediate(&self) {
        self.own_pg("stopping the server").stop_immediate();
    }

    /// Starts the test's own server again, on the same port.
    pub fn start_again(&self) -> Result<(), String> {
        self.own_pg("starting the server").start_again()
    }
}

impl Drop for Db {
    /// On the shared cluster, drops the database, those made beside it
    /// (named `NAME_...`), and the test's roles, as a test's own cluster
    /// would go. Quietly: this may run in a failed test's unwinding.
    fn drop(&mut self) {
        let Server::Shared(pg) = self.server else {
            return;
        };
        let prefix = format!("{}_", self.name);
        let list = |catalog: &str, column: &str| {
            pg.try_psql(
                "postgres",
                &[&format!(
                    "SELECT {column} FROM {catalog} WHERE {column} = '{0}' \
                     OR starts_with({column}, '{prefix}')",
                    self.name
                )],
            )
            .unwrap_or_default()
        };
        let dbs = list("pg_database", "datname");
        let roles = list("pg_roles", "rolname");
        let drops: Vec<String> = dbs
            .lines()
            .map(|d| format!("DROP DATABASE IF EXISTS \"{d}\" WITH (FORCE)"))
            .chain(
                roles
                    .lines()
                    .map(|r| format!("DROP ROLE IF EXISTS \"{r}\"")),
            )
            .collect();
        if !drops.is_empty() {
            let drops: Vec<&str> = drops.iter().map(String::as_str).collect();
            let _ = pg.try_psql("postgres", &drops);
        }
    }
}

/// The cluster's temp dir: under root in `/run` (root's, 0755, where no
/// other account may make or rename entries), so that the socket's path
/// passes no directory others can write; else where the tests keep
/// theirs. Nobody can enter it. Its [`Watchdog`] removes it.
fn cluster_dir(as_nobody: bool) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let in_run = as_nobody
        .then(|| {
            tempfile::Builder::new()
                .prefix("onlyone-test-pg-")
                .tempdir_in("/run")
                .ok()
        })
        .flatten();
    let d = in_run.unwrap_or_else(super::open_tempdir);
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d.keep()
}

/// A throwaway CA and a server certificate it signed (for `localhost` and
/// `127.0.0.1`), in `dir`: `ca.crt`, `server.crt`, `server.key` (0600, as
/// the server requires).
pub(crate) fn make_certificates(dir: &Path) -> Result<(), String> {
    let openssl = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .map_err(|e| format!("openssl is needed for the TLS tests: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=onlyone test CA"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    openssl(&ca)?;
    let mut csr = vec!["req", "-subj", "/CN=localhost"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(&csr)?;
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-days",
        "2",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ])?;
    use std::os::unix::fs::PermissionsExt;
    let key = dir.join("server.key");
    // The cluster's owner gets them with the rest of the directory.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    Ok(())
}

/// A TCP proxy on a free port of 127.0.0.1 in front of `target`; after
/// [`Proxy::black_hole`] it stops forwarding on every connection, without
/// closing anything, as a dead network path does. [`Proxy::heal`] lets new
/// connections through again (the holed ones stay dead, as a real
/// client's would after a partition).
pub struct Proxy {
    /// Its port.
    pub port: u16,
    /// New connections start holed while this is set.
    holed: Arc<AtomicBool>,
    /// Each connection's own flag.
    conns: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
    stop: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
}

impl Proxy {
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let p = Proxy {
            port,
            holed: Arc::default(),
            conns: Arc::default(),
            stop: Arc::default(),
            delay_ms: Arc::default(),
            delivered: Arc::default(),
        };
        listener.set_nonblocking(true).unwrap();
        let (h, c, s, d, n) = (
            p.holed.clone(),
            p.conns.clone(),
            p.stop.clone(),
            p.delay_ms.clone(),
            p.delivered.clone(),
        );
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                            continue;
                        };
                        let holed = Arc::new(AtomicBool::new(h.load(Ordering::SeqCst)));
                        c.lock().unwrap().push(holed.clone());
                        let up = Pump {
                            holed: holed.clone(),
                            delay_ms: Arc::default(),
                            delivered: Arc::default(),
                            close_when_holed: true,
                        };
                        up.run(client.try_clone().unwrap(), server.try_clone().unwrap());
                        let down = Pump {
                            holed,
                            delay_ms: d.clone(),
                            delivered: n.clone(),
                            close_when_holed: false,
                        };
                        down.run(server, client);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        p
    }

    /// How many chunks have reached the clients from the server so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::SeqCst)
    }

    /// From now on replies (server to client) arrive `delay` late: a slow
    /// path back.
    pub fn delay_replies(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// From now on nothing passes, and nothing is closed.
    pub fn black_hole(&self) {
        self.holed.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().iter() {
            c.store(true, Ordering::SeqCst);
        }
    }

    /// New connections pass again; the holed ones stay dead (the chaos
    /// example's, which shares this file).
    #[allow(dead_code)]
    pub fn heal(&self) {
        self.holed.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One direction of a proxied connection.
struct Pump {
    holed: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
    /// Close `to` when `from` ends even while holed: right for the way to
    /// the server (the client, which closed, cannot see it), wrong for the
    /// way back (a dead path never closes the client's connection).
    close_when_holed: bool,
}

impl Pump {
    /// Copies `from` to `to` until either closes, each chunk the delay
    /// after it was read; once holed, reads go on and the bytes are
    /// dropped (the peer's writes succeed into the void).
    fn run(self, mut from: TcpStream, mut to: TcpStream) {
        let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>();
        let Pump {
            holed,
            delay_ms,
            delivered,
            close_when_holed,
        } = self;
        let h = holed.clone();
        std::thread::spawn(move || {
            for (due, bytes) in rx {
                let now = std::time::Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if h.load(Ordering::SeqCst) {
                    continue;
                }
                if to.write_all(&bytes).is_err() {
                    break;
                }
                delivered.fetch_add(1, Ordering::SeqCst);
            }
            if close_when_holed || !h.load(Ordering::SeqCst) {
                let _ = to.shutdown(std::net::Shutdown::Both);
            } else {
                // A black hole keeps the client's connection open.
                std::thread::sleep(Duration::from_secs(3600));
            }
        });
        std::thread::spawn(move || {
            let mut buf = [0u8; 16384];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if holed.load(Ordering::SeqCst) {
                    continue;
                }
                let due = std::time::Instant::now()
                    + Duration::from_millis(delay_ms.load(Ordering::SeqCst));
                if tx.send((due, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        });
    }
}
