//! Throwaway etcd members for the etcd store's tests: Debian's `etcd`
//! (etcd-server) on free loopback ports, its data in a temp dir (under
//! `/dev/shm` where there is one: etcd syncs every write), torn down when
//! dropped and when the test binary exits however it exits (a watchdog
//! process, whose stdin is a pipe only this process holds, kills the
//! members and removes their directory when that pipe closes).
//!
//! A test binary's tests share one member, started on first use
//! ([`Etcd::url_of_test`]: a key prefix of a test's own on it); a test that
//! kills, pauses or partitions members has a cluster of its own
//! ([`Etcd::cluster`]).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::pg::free_port;

/// One member: its name, ports and process.
pub struct Member {
    pub name: String,
    pub client: u16,
    pub child: Mutex<Option<Child>>,
    pub pid: u32,
}

/// A running cluster of one or more members.
pub struct Etcd {
    pub members: Vec<Member>,
    dir: PathBuf,
    watchdog: Mutex<Option<(Child, ChildStdin)>>,
}

/// The directory a cluster's data goes in.
fn base_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let parent = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    parent.join(format!("onlyone-etcd-{}-{n}", std::process::id()))
}

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

impl Etcd {
    /// Starts a cluster of `n` members, or says why it cannot (no etcd
    /// installed): the caller skips then. `heartbeat_ms` and
    /// `election_ms` are raft's timings.
    pub fn start(n: usize, heartbeat_ms: u32, election_ms: u32) -> Result<Etcd, String> {
        Etcd::start_with(n, heartbeat_ms, election_ms, false)
    }

    /// One member that speaks TLS only, with a certificate for
    /// `localhost` and `127.0.0.1` signed by a throwaway CA
    /// ([`Etcd::tls_file`]: `ca.crt`, and `server.crt`/`server.key`, which
    /// serve as a client's too), and asks clients for a certificate of
    /// that CA.
    pub fn start_tls() -> Result<Etcd, String> {
        Etcd::start_with(1, 25, 250, true)
    }

    /// A file of a TLS member's throwaway CA (`ca.crt`, `server.crt`,
    /// `server.key`).
    pub fn tls_file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn start_with(
        n: usize,
        heartbeat_ms: u32,
        election_ms: u32,
        tls: bool,
    ) -> Result<Etcd, String> {
        if !super::have("etcd") {
            return Err("etcd is not installed (Debian's etcd-server)".into());
        }
        let dir = base_dir();
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let watchdog = watchdog(&dir);
        let ports: Vec<(String, u16, u16)> = (0..n)
            .map(|i| (format!("m{i}"), free_port(), free_port()))
            .collect();
        let initial: Vec<String> = ports
            .iter()
            .map(|(name, _, peer)| format!("{name}=http://127.0.0.1:{peer}"))
            .collect();
        let mut etcd = Etcd {
            members: Vec::new(),
            dir,
            watchdog: Mutex::new(watchdog),
        };
        let scheme = if tls { "https" } else { "http" };
        if tls {
            super::pg::make_certificates(&etcd.dir)?;
        }
        for (name, client, peer) in ports {
            let log = std::fs::File::create(etcd.dir.join(format!("{name}.log"))).unwrap();
            let mut c = Command::new("etcd");
            if tls {
                c.arg(format!("--cert-file={}", etcd.tls_file("server.crt")))
                    .arg(format!("--key-file={}", etcd.tls_file("server.key")))
                    .arg(format!("--trusted-ca-file={}", etcd.tls_file("ca.crt")))
                    .arg("--client-cert-auth");
            }
            let child = c
                .args(["--name", &name])
                .arg("--data-dir")
                .arg(etcd.dir.join(&name))
                .arg(format!(
                    "--listen-client-urls={scheme}://127.0.0.1:{client}"
                ))
                .arg(format!(
                    "--advertise-client-urls={scheme}://127.0.0.1:{client}"
                ))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                ))
                .arg(format!("--initial-cluster={}", initial.join(",")))
                .arg("--initial-cluster-state=new")
                .arg(format!("--heartbeat-interval={heartbeat_ms}"))
                .arg(format!("--election-timeout={election_ms}"))
                .args(["--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .current_dir("/")
                .spawn()
                .map_err(|e| format!("etcd: {e}"))?;
            let pid = child.id();
            std::fs::write(etcd.dir.join(format!("{name}.pid")), pid.to_string()).unwrap();
            etcd.members.push(Member {
                name,
                client,
                child: Mutex::new(Some(child)),
                pid,
            });
        }
        for m in &etcd.members {
            let up = super::wait_for(Duration::from_secs(30), || {
                post(m.client, "/v3/kv/range", r#"{"key":"AA=="}"#)
                    .is_some_and(|v| v.get("header").is_some())
            });
            if !up {
                let log = std::fs::read_to_string(etcd.dir.join(format!("{}.log", m.name)))
                    .unwrap_or_default();
                return Err(format!("etcd member {} did not start: {log}", m.name));
            }
        }
        Ok(etcd)
    }

    /// A cluster of three members, as the fault tests want one.
    pub fn cluster() -> Result<Etcd, String> {
        Etcd::start(3, 50, 500)
    }

    /// The store's URL naming every member, keys under `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client))
            .collect();
        format!("etcd://{}/{prefix}", hosts.join(","))
    }

    /// The index of the member that leads now, once one does.
    pub fn leader(&self) -> Option<usize> {
        for m in &self.members {
            if let Some(v) = post(m.client, "/v3/maintenance/status", "{}") {
                let leader = v["leader"].as_str().unwrap_or("");
                let me = v["header"]["member_id"].as_str().unwrap_or("");
                if !leader.is_empty() && leader == me {
                    return self.members.iter().position(|x| x.name == m.name);
                }
            }
        }
        None
    }

    /// Sends `sig` to member `i`.
    pub fn signal(&self, i: usize, sig: i32) {
        // SAFETY: kill(2) with a pid of ours.
        unsafe { libc::kill(self.members[i].pid as i32, sig) };
    }

    /// Kills member `i` and reaps it.
    pub fn kill(&self, i: usize) {
        self.signal(i, libc::SIGKILL);
        if let Some(mut c) = self.members[i].child.lock().unwrap().take() {
            let _ = c.wait();
        }
    }

    /// Stops every member and removes the directory; once.
    fn finish(&self) {
        let w = self
            .watchdog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((mut child, stdin)) = w {
            drop(stdin);
            let _ = child.wait();
        }
        for m in &self.members {
            if let Some(mut c) = m.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A process that, when its stdin closes (this process exited, however),
/// kills every member whose pid is in `DIR/*.pid` (SIGCONT first: one
/// may be stopped) and removes `DIR`.
fn watchdog(dir: &Path) -> Option<(Child, ChildStdin)> {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new("sh");
    c.args([
        "-c",
        "cat >/dev/null; for f in \"$D\"/*.pid; do p=$(cat \"$f\"); kill -CONT \"$p\"; \
         kill -KILL \"$p\"; done 2>/dev/null; sleep 0.2; rm -rf -- \"$D\"",
    ])
    .env("D", dir)
    .current_dir("/")
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .process_group(0);
    let mut child = c.spawn().ok()?;
    let stdin = child.stdin.take()?;
    Some((child, stdin))
}

/// POSTs `body` to a member's `path` (HTTP/1.0: the answer ends with the
/// connection); its JSON, or none within a second.
pub fn post(port: u16, path: &str, body: &str) -> Option<serde_json::Value> {
    post_as(port, path, body, None)
}

/// [`post`] with an auth token.
pub fn post_as(
    port: u16,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> Option<serde_json::Value> {
    let mut s = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: {t}\r\n"));
    write!(
        s,
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         {auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let (_, json) = answer.split_once("\r\n\r\n")?;
    serde_json::from_str(json).ok()
}

static SHARED: OnceLock<Result<Etcd, String>> = OnceLock::new();
static NEXT_PREFIX: AtomicU32 = AtomicU32::new(1);

/// The test binary's shared member, started by the first test that asks.
fn shared() -> Result<&'static Etcd, String> {
    SHARED
        .get_or_init(|| {
            let e = Etcd::start(1, 25, 250)?;
            // SAFETY: registers a function that takes no argument and
            // returns, as atexit(3) asks.
            unsafe { libc::atexit(stop_shared) };
            Ok(e)
        })
        .as_ref()
        .map_err(Clone::clone)
}

extern "C" fn stop_shared() {
    if let Some(Ok(e)) = SHARED.get() {
        e.finish();
    }
}

impl Etcd {
    /// A store of a test's own on the shared member: its URL (a key prefix
    /// no other test uses), or why there is none.
    pub fn url_of_test() -> Result<String, String> {
        let e = shared()?;
        let n = NEXT_PREFIX.fetch_add(1, Ordering::Relaxed);
        Ok(e.url(&format!("test{n}")))
    }
}
