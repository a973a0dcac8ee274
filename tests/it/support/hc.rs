//! A ping server for the tests: the healthchecks.io ping endpoints on
//! 127.0.0.1, recording every request, that can be told to answer slowly,
//! to answer 5xx a number of times, or to give a `Ping-Body-Limit`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A request the server got.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    /// The path and query, as sent.
    pub target: String,
    pub body: Vec<u8>,
}

impl Req {
    /// The path without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// The value of `key` in the query.
    pub fn query(&self, key: &str) -> Option<String> {
        let q = self.target.split_once('?')?.1;
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_owned())
    }

    /// The last part of the path: `start`, `fail`, `log`, or an exit code.
    pub fn what(&self) -> &str {
        self.path().rsplit('/').next().unwrap_or_default()
    }
}

/// How the server answers.
#[derive(Debug, Default)]
pub struct Behaviour {
    /// Answer 503 to this many requests first.
    pub errors: u32,
    /// Wait this long before answering (and never answer before it).
    pub slow: Option<Duration>,
    /// The `Ping-Body-Limit` header to send.
    pub body_limit: Option<usize>,
}

/// The server; it stops accepting when dropped.
pub struct PingServer {
    port: u16,
    reqs: Arc<Mutex<Vec<Req>>>,
    pub behaviour: Arc<Mutex<Behaviour>>,
    stop: Arc<AtomicBool>,
}

impl PingServer {
    pub fn start() -> PingServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let reqs = Arc::new(Mutex::new(Vec::new()));
        let behaviour = Arc::new(Mutex::new(Behaviour::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, b, s) = (reqs.clone(), behaviour.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (r, b) = (r.clone(), b.clone());
                std::thread::spawn(move || serve(conn, &r, &b));
            }
        });
        PingServer {
            port,
            reqs,
            behaviour,
            stop,
        }
    }

    /// The ping URL of check `check`.
    pub fn url(&self, check: &str) -> String {
        format!("http://127.0.0.1:{}/{check}", self.port)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Req> {
        self.reqs.lock().unwrap().clone()
    }

    /// The last parts of the requests' paths, in order (`start`, `0`, ...).
    pub fn whats(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r.what().to_owned())
            .collect()
    }
}

impl Drop for PingServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Reads one request, records it, answers as told.
fn serve(conn: TcpStream, reqs: &Mutex<Vec<Req>>, b: &Mutex<Behaviour>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut rd = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if rd.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut len = 0;
    loop {
        let mut h = String::new();
        if rd.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.trim().eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    let _ = rd.read_exact(&mut body);
    reqs.lock().unwrap().push(Req {
        method,
        target,
        body,
    });
    let (status, slow, limit) = {
        let mut b = b.lock().unwrap();
        let status = if b.errors > 0 {
            b.errors -= 1;
            "503 Service Unavailable"
        } else {
            "200 OK"
        };
        (status, b.slow, b.body_limit)
    };
    if let Some(d) = slow {
        std::thread::sleep(d);
    }
    let limit = limit.map_or(String::new(), |l| format!("Ping-Body-Limit: {l}\r\n"));
    let mut w = conn;
    let _ = write!(
        w,
        "HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n{limit}\r\nOK"
    );
}
