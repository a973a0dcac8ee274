//! etcd's v3 API through its JSON gateway: every call one POST of JSON
//! to a member (`/v3/kv/txn`, `/v3/lease/keepalive`, ...), keys and
//! values in base64, 64-bit numbers as strings. A call goes to the member
//! that last answered; one that cannot be connected to (refused, not
//! found) is passed for the next, within the call's timeout. A call that
//! was sent and got no answer is not sent again (it may have been done):
//! its error goes to the caller, and the next call goes to the next member.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::address::Address;
use crate::place::store::StoreError;

/// The largest answer read (a lock's history at most, in base64).
const MAX_ANSWER: u64 = 64 << 20;

/// A store's members and how to talk to them.
pub(super) struct Wire {
    pub addr: Address,
    agent: ureq::Agent,
    /// The member the next call goes to.
    at: Cell<usize>,
    /// Every call's timeout.
    pub timeout: Cell<Duration>,
    /// The auth token, once the user's password got one.
    token: RefCell<Option<String>>,
}

/// Base64, as the gateway carries bytes.
pub(super) fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Base64's bytes; `None` for what is not base64.
pub(super) fn unb64(text: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let text = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= val(*c)? << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

/// A 64-bit number of an answer: a string or a number; absent (the
/// gateway leaves out zeros) is 0.
pub(super) fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// Where an etcd store's credentials come from.
const CHECK: &str = "the user in the URL and ETCDCTL_PASSWORD or its password_file";

/// What an answer's error means: gRPC's code and etcd's message.
fn classify(code: i64, message: &str, url: &str) -> StoreError {
    let url = url.to_owned();
    let detail = message.to_owned();
    let source = || -> crate::place::store::engine::BoxError { message.to_owned().into() };
    match code {
        // Unauthenticated, or a refused password.
        16 => StoreError::Credentials {
            url,
            detail,
            check: CHECK,
            source: source(),
        },
        3 if message.contains("authentication failed") => StoreError::Credentials {
            url,
            detail,
            check: CHECK,
            source: source(),
        },
        // PermissionDenied: the role's permissions.
        7 => StoreError::Server {
            url,
            detail: format!(
                "{detail}; the user's role needs readwrite on the store's prefix (doc/store.md, \
                 \"The etcd store\")"
            ),
            source: source(),
        },
        // Unavailable (no leader, leader changed, stopping), DeadlineExceeded
        // (the raft proposal timed out): another member, or later, may do.
        14 | 4 => StoreError::Unreachable {
            url,
            detail,
            hint: "",
            source: Some(source()),
        },
        _ => StoreError::Server {
            url,
            detail,
            source: source(),
        },
    }
}

/// Whether a transport error came before the request was sent: another
/// member may be tried with it.
fn not_sent(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => true,
        ureq::Error::Timeout(t) => matches!(t, ureq::Timeout::Resolve | ureq::Timeout::Connect),
        ureq::Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
        ),
        _ => false,
    }
}

/// Why a POST to one member failed.
enum Failed {
    /// Not sent, or sent to a member that closed the connection: the next
    /// member may be asked.
    NotSent(StoreError),
    /// The member answered that the cluster is between leaders.
    Unavailable(StoreError),
    /// Anything else: given to the caller.
    Final(StoreError),
}

/// Whether a transport error is a connection closed under the request.
fn closed(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::ConnectionAborted
        ),
        ureq::Error::Protocol(_) => true,
        _ => false,
    }
}

/// A transport error, said without the URL.
fn transport(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) => io.to_string(),
        ureq::Error::HostNotFound => "host not found".to_owned(),
        ureq::Error::ConnectionFailed => "connection failed".to_owned(),
        ureq::Error::Tls(t) => format!("TLS: {t}"),
        ureq::Error::Rustls(r) => format!("TLS: {r}"),
        other => other.to_string(),
    }
}

impl Wire {
    pub fn new(addr: Address, timeout: Duration) -> Wire {
        let agent = addr.agent();
        Wire {
            addr,
            agent,
            at: Cell::new(0),
            timeout: Cell::new(timeout),
            token: RefCell::new(None),
        }
    }

    /// The same store, on connections of its own, its next call to the
    /// member that answered this one's last.
    pub fn fresh(&self) -> Wire {
        let w = Wire::new(self.addr.clone(), self.timeout.get());
        w.at.set(self.at.get());
        w
    }

    fn url(&self) -> &str {
        &self.addr.display
    }

    /// Calls `path` (`kv/txn`) with `body`; its answer.
    pub fn call(&self, path: &str, body: &Value) -> Result<Value, StoreError> {
        if self.addr.auth.is_some() && self.token.borrow().is_none() {
            self.authenticate()?;
        }
        match self.post(path, body, true) {
            Err(StoreError::Credentials { detail, .. })
                if self.addr.auth.is_some() && detail.contains("invalid auth token") =>
            {
                self.authenticate()?;
                self.post(path, body, true)
            }
            other => other,
        }
    }

    /// Asks for a token with the user's password.
    fn authenticate(&self) -> Result<(), StoreError> {
        let Some((user, password)) = &self.addr.auth else {
            return Ok(());
        };
        let v = self.post(
            "auth/authenticate",
            &json!({"name": user, "password": password}),
            false,
        )?;
        let token = v["token"].as_str().unwrap_or("").to_owned();
        *self.token.borrow_mut() = Some(token);
        Ok(())
    }

    /// One POST, to the members in turn from the last that answered,
    /// within the timeout: on to the next member while one cannot be
    /// connected to, and while one answers that the cluster is between
    /// leaders (`Unavailable`), a moment later.
    fn post(&self, path: &str, body: &Value, with_token: bool) -> Result<Value, StoreError> {
        let deadline = Instant::now() + self.timeout.get();
        let n = self.addr.members.len();
        let text = body.to_string();
        let mut last: Option<StoreError> = None;
        let mut tries = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tries >= 4 * n {
                break;
            }
            tries += 1;
            let at = self.at.get();
            match self.post_to(at, path, &text, with_token, left) {
                Ok(v) => return Ok(v),
                Err(Failed::NotSent(e)) => {
                    self.at.set((at + 1) % n);
                    last = Some(e);
                }
                Err(Failed::Unavailable(e)) => {
                    self.at.set((at + 1) % n);
                    last = Some(e);
                    if tries % n == 0 {
                        let nap = Duration::from_millis(50)
                            .min(deadline.saturating_duration_since(Instant::now()));
                        std::thread::sleep(nap);
                    }
                }
                Err(Failed::Final(e)) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| StoreError::TimedOut {
            url: self.url().to_owned(),
            after: self.timeout.get(),
        }))
    }

    /// One POST to member `at`, given up after `left`.
    fn post_to(
        &self,
        at: usize,
        path: &str,
        text: &str,
        with_token: bool,
        left: Duration,
    ) -> Result<Value, Failed> {
        let mut req = self
            .agent
            .post(format!("{}/v3/{path}", self.addr.members[at]))
            .config()
            .timeout_global(Some(left))
            .build()
            .header("content-type", "application/json");
        if let Some(t) = self.token.borrow().as_deref().filter(|_| with_token) {
            req = req.header("authorization", t);
        }
        match req.send(text.as_bytes()) {
            Ok(mut r) => {
                let status = r.status().as_u16();
                let answer = r
                    .body_mut()
                    .with_config()
                    .limit(MAX_ANSWER)
                    .read_to_string()
                    .map_err(|e| Failed::Final(self.lost(at, &e)))?;
                self.answer(status, &answer).map_err(|e| {
                    if e.is_unreachable() {
                        Failed::Unavailable(e)
                    } else {
                        Failed::Final(e)
                    }
                })
            }
            Err(e) if not_sent(&e) => Err(Failed::NotSent(StoreError::Unreachable {
                url: self.url().to_owned(),
                detail: transport(&e),
                hint: "",
                source: None,
            })),
            // A connection closed under the request (a member that went
            // away): it may or may not have been done, and every call of
            // this store may be made again (a take finds its own key by
            // its token, an event's key is chosen once, the others set
            // what they set or find it set).
            Err(e) if closed(&e) => Err(Failed::NotSent(self.lost(at, &e))),
            Err(e) => Err(Failed::Final(self.lost(at, &e))),
        }
    }

    /// A call sent to member `at` that got no answer: the next call goes
    /// to the next member.
    fn lost(&self, at: usize, e: &ureq::Error) -> StoreError {
        self.at.set((at + 1) % self.addr.members.len());
        if matches!(e, ureq::Error::Timeout(_)) {
            return StoreError::TimedOut {
                url: self.url().to_owned(),
                after: self.timeout.get(),
            };
        }
        StoreError::Unreachable {
            url: self.url().to_owned(),
            detail: transport(e),
            hint: "",
            source: None,
        }
    }

    /// What an answer says: its JSON, or its error.
    fn answer(&self, status: u16, text: &str) -> Result<Value, StoreError> {
        let v: Value = serde_json::from_str(text).map_err(|_| StoreError::Unreachable {
            url: self.url().to_owned(),
            detail: format!(
                "HTTP {status} with an answer that is not etcd's: is this etcd's client port?"
            ),
            hint: "",
            source: None,
        })?;
        if status == 200 && v.get("error").is_none() {
            return Ok(v);
        }
        let err = if v.get("error").is_some_and(Value::is_object) {
            &v["error"]
        } else {
            &v
        };
        let message = err["message"]
            .as_str()
            .or(err["error"].as_str())
            .unwrap_or("an error")
            .to_owned();
        // A unary call's error says `code`; a stream's (a keep-alive's)
        // says `grpc_code`.
        let code = match int(&err["code"]) {
            0 => int(&err["grpc_code"]),
            c => c,
        };
        Err(classify(code, &message, self.url()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_both_ways() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("onlyone/lease/sync#2", "b25seW9uZS9sZWFzZS9zeW5jIzI="),
        ] {
            assert_eq!(b64(plain.as_bytes()), coded);
            assert_eq!(unb64(coded).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unb64(&b64(&all)).unwrap(), all);
        assert_eq!(unb64("Z"), None);
        assert_eq!(unb64("Zm9v!"), None);
    }

    #[test]
    fn numbers_as_the_gateway_writes_them() {
        assert_eq!(int(&json!("42")), 42);
        assert_eq!(int(&json!(7)), 7);
        assert_eq!(int(&Value::Null), 0);
        assert_eq!(int(&json!("x")), 0);
    }

    #[test]
    fn answers_of_a_call_and_of_a_stream() {
        let addr = Address::parse("etcd://h:1", &|_| None).unwrap();
        let w = Wire::new(addr, Duration::from_secs(1));
        let v = w.answer(200, r#"{"result":{"ID":"7","TTL":"3"}}"#).unwrap();
        assert_eq!(int(&v["result"]["TTL"]), 3);
        let stream = r#"{"error":{"grpc_code":14,"http_code":503,
            "message":"etcdserver: leader changed","http_status":"Service Unavailable"}}"#;
        assert!(w.answer(503, stream).unwrap_err().is_unreachable());
        let gone = r#"{"error":{"grpc_code":5,"message":"etcdserver: requested lease not found"}}"#;
        let e = w.answer(200, gone).unwrap_err();
        assert!(
            matches!(&e, StoreError::Server { detail, .. } if detail.contains("lease not found"))
        );
        let unary = r#"{"error":"etcdserver: permission denied","code":7,
            "message":"etcdserver: permission denied"}"#;
        let e = w.answer(403, unary).unwrap_err();
        assert!(
            e.to_string().contains("readwrite on the store's prefix"),
            "{e}"
        );
        let e = w.answer(404, "404 page not found").unwrap_err();
        assert!(e.to_string().contains("etcd's client port"), "{e}");
    }

    #[test]
    fn errors_by_their_code() {
        let u = "etcd://h:2379";
        assert!(classify(14, "etcdserver: no leader", u).is_unreachable());
        assert!(classify(4, "etcdserver: request timed out", u).is_unreachable());
        assert!(classify(16, "etcdserver: invalid auth token", u).is_refusal());
        assert!(
            classify(
                3,
                "etcdserver: authentication failed, invalid user ID or password",
                u
            )
            .is_refusal()
        );
        let e = classify(7, "etcdserver: permission denied", u);
        assert!(
            e.to_string().contains("readwrite on the store's prefix"),
            "{e}"
        );
        let e = classify(3, "etcdserver: too many operations in txn request", u);
        assert!(!e.is_unreachable() && !e.is_refusal());
    }
}
