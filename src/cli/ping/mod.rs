//! Pings: the healthchecks.io ping protocol, spoken by the run itself, for
//! a dead man's switch that knows a skip from a failure.
//!
//! `URL/start?rid=RID` before the command starts, `URL/N?rid=RID` when it
//! ends with exit code N, `URL/fail?rid=RID` when it ends with none (a
//! signal, a lost lease, a stop), `URL/log?rid=RID` for a skip (the check's
//! state does not change), its body saying who holds the lock. RID is the
//! run's id ([`onlyone::journal::run_id`] of its token: the same in the
//! journal and in the command's `ONLYONE_RUN_ID`); a skip, which has no run
//! of its own, gets a fresh one.
//!
//! Who a URL speaks to is its provider, named by its scheme's prefix
//! (`sentry+https://`), each in a file of its own here ([`PROVIDERS`]):
//! how it words each moment as a URL, and whether it is sent as a GET.
//!
//! Pings fail open and never delay the lock: each is sent from a thread of
//! its own (the supervisor's signals blocked in it), retried on 408, 429,
//! 5xx and transport errors with backoff, and waited for only until one
//! deadline (`START_BOUND` for the start, `END_BOUND` for the end, both
//! capped by `--deadline`); a thread still waiting then is left behind and
//! ends with the process. The end ping is sent once the lock is released.
//! A ping never changes an exit code; its first failure is said once on
//! stderr (never with `-q`), with the URL masked to its scheme and host
//! (a ping URL's path is its secret: the check's UUID or ping key).
//!
//! A ping URL is its check's key, so where it comes from matters: a file
//! only its owner can read (`--ping-file`, checked by [`urls_of_file`]),
//! the environment (`$ONLYONE_PING`), or the command line (`--ping`,
//! which `main` masks in onlyone's own argv once it starts). The
//! variables that carry a secret ([`WITHHELD`]) never reach the command.
//!
//! The protocol lives here, in the command, not in the library: it is what
//! the command tells a person, over a client (ureq) the library has no use
//! for, and a run without `--ping` never touches it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use super::say;
use super::tail::Tail;

mod healthchecks;
mod sentry;

/// How long the command's start may wait for its start pings.
const START_BOUND: Duration = Duration::from_secs(2);
/// How long onlyone may wait for its end pings, once the lock is released.
const END_BOUND: Duration = Duration::from_secs(10);
/// One attempt's timeout.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts per ping (the first and its retries).
const ATTEMPTS: u32 = 4;
/// The first retry's backoff, doubled for each next one.
const BACKOFF: Duration = Duration::from_millis(250);
/// The most a ping's body carries when the server does not say
/// (healthchecks' default `Ping-Body-Limit`).
const BODY_LIMIT: usize = 10_000;
/// The most of a run's output kept in memory for its end ping, whatever a
/// server says it takes.
const MAX_TAIL: usize = 1 << 20;

/// Where `acquire --export --ping` leaves its URLs for `release`.
pub(super) const RELEASE_VAR: &str = "ONLYONE_RELEASE_PING";

/// Where `acquire --export --ping-file` leaves the file's path for
/// `release` (the path, so that the URLs stay out of the script's
/// environment).
pub(super) const RELEASE_FILE_VAR: &str = "ONLYONE_RELEASE_PING_FILE";

/// The variable `--ping` falls back to.
const PING_VAR: &str = "ONLYONE_PING";

/// The variables of onlyone's own environment that carry a secret of its
/// (a ping URL is its check's key, a store URL may hold a password), or
/// what a script's `release` is to ping: never passed on to a command,
/// which may run as another user (`runuser`, `setpriv`) or hand its
/// environment to anyone.
pub(super) const WITHHELD: &[&str] = &[PING_VAR, RELEASE_VAR, RELEASE_FILE_VAR, "ONLYONE_STORE"];

/// The most a ping file may hold.
const MAX_PING_FILE: u64 = 64 * 1024;

/// The URLs to ping: `given` (`--ping`, or `$ONLYONE_PING` when neither
/// option was typed) and those of `file` (`--ping-file`).
pub(super) fn urls(given: &[String], file: Option<&Path>) -> Result<Vec<String>, String> {
    let mut all = given.to_vec();
    if let Some(f) = file {
        all.extend(urls_of_file(f, "--ping-file")?);
    }
    Ok(all)
}

/// The URLs `release` pings: its `--ping`s and `--ping-file`'s, else those
/// `acquire --export` left for the lock `exported` says this
/// environment's `ONLYONE_LOCK` is (its URLs and its file's), else
/// `$ONLYONE_PING`.
pub(super) fn release_urls(
    given: &[String],
    file: Option<&Path>,
    exported: bool,
) -> Result<Vec<String>, String> {
    if !given.is_empty() || file.is_some() {
        return urls(given, file);
    }
    let from = |var| std::env::var_os(var).filter(|v| !v.is_empty());
    if exported {
        let mut left: Vec<String> = from(RELEASE_VAR)
            .map(|v| {
                v.to_string_lossy()
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if let Some(f) = from(RELEASE_FILE_VAR) {
            left.extend(urls_of_file(Path::new(&f), RELEASE_FILE_VAR)?);
        }
        if !left.is_empty() {
            return Ok(left);
        }
    }
    Ok(from(PING_VAR)
        .map(|v| v.to_string_lossy().into_owned())
        .into_iter()
        .collect())
}

/// The ping URLs in `path` (named `what` in errors), one a line, blank
/// lines and `#` comments skipped. The file's text decides where the
/// run's output goes (an end ping's body is its tail), so it is read only
/// from a regular file that its owner alone, this user or root, can
/// write; and, as it holds the check's secret, that others cannot read.
/// The checks are made on the descriptor read, so a link leads only to a
/// file that passes them. Errors name the file and the fix, never what
/// it holds.
pub(super) fn urls_of_file(path: &Path, what: &str) -> Result<Vec<String>, String> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::io::Read;
    let shown = path.display();
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| {
        format!(
            "{what} {shown}: cannot open it ({}); give a file holding the check's ping URL",
            std::io::Error::from(e)
        )
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| {
        format!(
            "{what} {shown}: cannot read its owner and mode ({})",
            std::io::Error::from(e)
        )
    })?;
    let mode = st.st_mode & 0o7777;
    let me = rustix::process::geteuid().as_raw();
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(format!(
            "{what} {shown}: not a regular file; give a file holding the check's ping URL, \
             one a line"
        ));
    }
    if st.st_uid != me && st.st_uid != 0 {
        return Err(format!(
            "{what} {shown}: it belongs to {} (uid {}), not to you or root, and whoever writes \
             it chooses where the run's output is sent; keep the URL in a file of your own \
             (`install -m 600 /dev/null FILE`, then write the URL into it)",
            onlyone::command::user_name(st.st_uid),
            st.st_uid
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "{what} {shown}: others may write it (mode {mode:04o}), and whoever writes it \
             chooses where the run's output is sent; `chmod go-w {shown}`"
        ));
    }
    if mode & 0o004 != 0 {
        return Err(format!(
            "{what} {shown}: every user may read it (mode {mode:04o}), and its URL is the \
             check's secret; `chmod 600 {shown}`"
        ));
    }
    let mut text = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_PING_FILE + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("{what} {shown}: cannot read it ({e})"))?;
    if text.len() as u64 > MAX_PING_FILE {
        return Err(format!(
            "{what} {shown}: over {} KiB, which no list of ping URLs is; give a file holding \
             the check's ping URL, one a line",
            MAX_PING_FILE / 1024
        ));
    }
    let text = String::from_utf8(text)
        .map_err(|_| format!("{what} {shown}: not text; write the check's ping URL into it"))?;
    let mut urls = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let source = format!("{what} {shown}, line {}", n + 1);
        parse_as(line, &source)?;
        urls.push(line.to_owned());
    }
    if urls.is_empty() {
        return Err(format!(
            "{what} {shown}: holds no URL; write the check's ping URL into it"
        ));
    }
    Ok(urls)
}

/// Set once a failure was said: one line per process is enough.
static SAID: AtomicBool = AtomicBool::new(false);

/// Who held the lock, when this process's fire was skipped ([`note_skip`]).
static SKIPPED: Mutex<Option<String>> = Mutex::new(None);

/// This process's fire was skipped, the lock held as `why` says: what a
/// refused run's pings tell ([`Pings::refused`]), wherever the lock lives.
pub(super) fn note_skip(why: String) {
    if let Ok(mut s) = SKIPPED.lock() {
        *s = Some(why);
    }
}

/// A ping URL, checked.
#[derive(Debug, Clone)]
struct Target {
    /// The URL before its query, without a trailing `/`.
    base: String,
    /// Its query (without `?`), kept on every ping (`create=1`).
    query: Option<String>,
    /// What messages show of it: the scheme and the host.
    shown: String,
    /// Who it speaks to.
    provider: &'static Provider,
}

/// Who a ping URL speaks to: each provider is a file of its own here and
/// an entry of [`PROVIDERS`].
#[derive(Debug)]
struct Provider {
    /// The prefix of the scheme that names it (`sentry` in
    /// `sentry+https://`); `None` for the plain `http://` and `https://`.
    prefix: Option<&'static str>,
    /// What a message says of its URLs, after the scheme
    /// (`sentry+https:// for Sentry's cron check-ins`); `None` for the
    /// plain schemes.
    about: Option<&'static str>,
    /// Whether its pings are GETs without a body, not POSTs.
    gets: bool,
    /// The URL of the ping `what` (`start`, an exit code, `fail`, `log`)
    /// about the run `rid`, `took` after its start, from the URL's `base`
    /// and its own `query`; `None` when the provider has no such ping.
    url: UrlOf,
}

/// How a provider words a ping as a URL: from the URL's base and its
/// own query, the ping `what` about the run `rid`, `took` after its start.
type UrlOf = fn(
    base: &str,
    query: Vec<String>,
    what: &str,
    rid: Option<&str>,
    took: Option<Duration>,
) -> Option<String>;

/// Every provider: the healthchecks.io protocol (the plain schemes) and
/// those a scheme's prefix names.
const PROVIDERS: &[&Provider] = &[&healthchecks::PROVIDER, &sentry::PROVIDER];

impl Provider {
    /// The provider a URL's scheme (lowercase) names by its prefix, and
    /// the scheme it is sent with.
    fn of_scheme(scheme: &str) -> (&'static Provider, &str) {
        let plain = PROVIDERS.iter().copied().find(|p| p.prefix.is_none());
        let plain = plain.expect("a provider of the plain schemes");
        match scheme.split_once('+') {
            Some((prefix, wire)) => PROVIDERS
                .iter()
                .copied()
                .find(|p| p.prefix == Some(prefix))
                .map_or((plain, scheme), |p| (p, wire)),
            None => (plain, scheme),
        }
    }

    /// The schemes pings use, for a message.
    fn schemes() -> String {
        let named: Vec<&str> = PROVIDERS.iter().filter_map(|p| p.about).collect();
        let mut said = "http:// or https://".to_owned();
        if !named.is_empty() {
            said.push_str(", or ");
            said.push_str(&named.join(", or "));
        }
        said
    }
}

/// How a run ended, as a ping says it.
pub(super) enum End {
    /// With this exit code: `URL/N`.
    Exit(u8),
    /// With none (a signal, a lost lease, a stop): `URL/fail`.
    Fail,
}

/// The pings of one onlyone call: none, or the URLs of `--ping` and
/// `$ONLYONE_PING`.
pub(super) struct Pings {
    targets: Vec<Target>,
    rid: Option<String>,
    quiet: bool,
    cap: Option<Instant>,
    /// Each target's `Ping-Body-Limit`, as its last answer gave it.
    limits: Mutex<Vec<usize>>,
    /// When the run started (its start ping), for Sentry's `duration`.
    started: Option<Instant>,
}

impl Pings {
    /// The pings of `urls`, every wait capped by `cap` (`--deadline`);
    /// an error naming the flag and the fix for a URL that is not one.
    pub(super) fn new(urls: &[String], quiet: bool, cap: Option<Instant>) -> Result<Pings, String> {
        let targets = urls
            .iter()
            .filter(|u| !u.is_empty())
            .map(|u| parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Pings {
            limits: Mutex::new(vec![BODY_LIMIT; targets.len()]),
            started: None,
            targets,
            rid: None,
            quiet,
            cap,
        })
    }

    /// True when there is nothing to ping.
    pub(super) fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// The run `token` starts: `URL/start`, waited for at most
    /// [`START_BOUND`].
    pub(super) fn start(&mut self, token: &str) {
        self.start_after(token, None);
    }

    /// [`Pings::start`], after the end of the run it took the lock over
    /// from, when that run's end was never said (its wrapper died):
    /// `URL/fail` with that run's id and `abandoned`'s reason, first.
    pub(super) fn start_after(&mut self, token: &str, abandoned: Option<&(String, String)>) {
        if self.is_empty() {
            return;
        }
        self.rid = onlyone::journal::run_id(token);
        self.started = Some(Instant::now());
        let mut msgs = Vec::new();
        if let Some((old, reason)) = abandoned {
            let body = format!("abandoned: {reason}").into_bytes();
            msgs.push(("fail".to_owned(), onlyone::journal::run_id(old), body));
        }
        msgs.push(("start".to_owned(), self.rid.clone(), Vec::new()));
        self.send_all(msgs, START_BOUND);
    }

    /// No cap from here on: `run`'s `--deadline` is a budget for what
    /// comes before the command starts, so it caps the start ping, never
    /// the end's, which has its own bound.
    pub(super) fn uncap(&mut self) {
        self.cap = None;
    }

    /// The pings are about the run `token` (a script's, at its release).
    pub(super) fn for_run(&mut self, token: &str) {
        self.rid = onlyone::journal::run_id(token);
    }

    /// A script's hold was released without an exit code: `URL/log`.
    pub(super) fn released_unknown(&self) {
        if self.is_empty() {
            return;
        }
        let body = b"released without --exit: the script's exit code is unknown".to_vec();
        self.send("log", body, END_BOUND);
    }

    /// The run ended (its lock released): `URL/N` or `URL/fail`.
    pub(super) fn end(&self, end: &End) {
        self.end_with(end, None);
    }

    /// [`Pings::end`], its body the tail of what the run printed (within
    /// each server's `Ping-Body-Limit`), when it was captured.
    pub(super) fn end_with(&self, end: &End, tail: Option<&Tail>) {
        if self.is_empty() {
            return;
        }
        let what = match end {
            End::Exit(n) => n.to_string(),
            End::Fail => "fail".to_owned(),
        };
        let limits = self.limits.lock().map(|l| l.clone()).unwrap_or_default();
        let posts = self
            .targets
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let limit = limits.get(i).copied().unwrap_or(BODY_LIMIT);
                let body = tail.map(|tl| tail_body(tl, limit)).unwrap_or_default();
                let took = self.started.map(|s| s.elapsed());
                t.url(&what, self.rid.as_deref(), took)
                    .map(|u| (u, body))
                    .into_iter()
                    .collect()
            })
            .collect();
        let mut until = Instant::now() + END_BOUND;
        if let Some(cap) = self.cap {
            until = until.min(cap);
        }
        self.send_each(posts, until);
    }

    /// The most a captured tail needs: the largest body a server takes.
    pub(super) fn tail_cap(&self) -> usize {
        let limits = self.limits.lock().map(|l| l.clone()).unwrap_or_default();
        limits.into_iter().max().unwrap_or(BODY_LIMIT).min(MAX_TAIL)
    }

    /// The run was refused: a skip ([`note_skip`]) is `URL/log`; anything
    /// else (an error before the command could start) is `URL/fail`.
    pub(super) fn refused(&mut self) {
        if self.is_empty() {
            return;
        }
        let skipped = SKIPPED.lock().ok().and_then(|mut s| s.take());
        match skipped {
            Some(why) => self.skipped(&why),
            None => {
                self.rid = onlyone::journal::run_id(&onlyone::command::new_token());
                let body = b"the run did not start (see its stderr)".to_vec();
                self.send("fail", body, END_BOUND);
            }
        }
    }

    /// A fire skipped, the lock held as `why` says: `URL/log`, with a run id
    /// of its own.
    pub(super) fn skipped(&mut self, why: &str) {
        if self.is_empty() {
            return;
        }
        self.rid = onlyone::journal::run_id(&onlyone::command::new_token());
        let mut body = format!("skipped: {why}").into_bytes();
        body.truncate(BODY_LIMIT);
        self.send("log", body, END_BOUND);
    }

    /// Sends `URL/what` with the run's id to every target.
    fn send(&self, what: &str, body: Vec<u8>, bound: Duration) {
        self.send_all(vec![(what.to_owned(), self.rid.clone(), body)], bound);
    }

    /// Sends the pings `msgs` (what, its rid, its body), in order, to every
    /// target at once, waiting for them until `bound` from now (or the
    /// cap).
    fn send_all(&self, msgs: Vec<(String, Option<String>, Vec<u8>)>, bound: Duration) {
        let mut until = Instant::now() + bound;
        if let Some(cap) = self.cap {
            until = until.min(cap);
        }
        let posts = self
            .targets
            .iter()
            .map(|t| {
                msgs.iter()
                    .filter_map(|(what, rid, body)| {
                        Some((t.url(what, rid.as_deref(), None)?, body.clone()))
                    })
                    .collect()
            })
            .collect();
        self.send_each(posts, until);
    }

    /// Sends each target its posts (URL, body), in order, all targets at
    /// once, waiting for them until `until`.
    fn send_each(&self, posts: Vec<Vec<(String, Vec<u8>)>>, until: Instant) {
        let (tx, rx) = mpsc::channel();
        // The targets not answered yet, by index.
        let mut waiting = vec![false; self.targets.len()];
        for (i, (t, posts)) in self.targets.iter().zip(posts).enumerate() {
            if posts.is_empty() {
                continue;
            }
            let (tx, shown, get) = (tx.clone(), t.shown.clone(), t.provider.gets);
            let spawned = onlyone::place::store::spawn_thread("onlyone-ping", move || {
                let mut r = Ok(None);
                for (url, body) in &posts {
                    let sent = post(url, body, get, until);
                    r = match (r, sent) {
                        (Ok(a), Ok(b)) => Ok(b.or(a)),
                        (Err(e), _) | (_, Err(e)) => Err(e),
                    };
                }
                let _ = tx.send((i, shown, r));
            });
            match spawned {
                Ok(_) => waiting[i] = true,
                Err(e) => self.failed(&t.shown, &format!("cannot start a thread: {e}")),
            }
        }
        drop(tx);
        while let Some(late) = waiting.iter().position(|w| *w) {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((i, shown, r)) => {
                    waiting[i] = false;
                    match r {
                        Ok(Some(limit)) => {
                            if let Ok(mut l) = self.limits.lock()
                                && let Some(slot) = l.get_mut(i)
                            {
                                *slot = limit;
                            }
                        }
                        Ok(None) => {}
                        Err(e) => self.failed(&shown, &e),
                    }
                }
                Err(_) => {
                    self.failed(&self.targets[late].shown, "no answer in time");
                    return;
                }
            }
        }
    }

    /// Says once (unless quiet) that a ping to `shown` failed.
    fn failed(&self, shown: &str, why: &str) {
        if self.quiet || SAID.swap(true, Ordering::Relaxed) {
            return;
        }
        say(format_args!(
            "a ping to {shown} failed ({why}); the run's outcome is unchanged"
        ));
    }
}

impl Target {
    /// The URL of the ping `what` (`start`, an exit code, `fail`, `log`)
    /// about the run `rid`, `took` after its start, as its provider words
    /// it (its own query kept); `None` when the provider has no such ping.
    fn url(&self, what: &str, rid: Option<&str>, took: Option<Duration>) -> Option<String> {
        let q: Vec<String> = self.query.iter().cloned().collect();
        (self.provider.url)(&self.base, q, what, rid, took)
    }
}

/// `url?a&b`, or `url` with no query.
pub(super) fn with_query(mut url: String, q: &[String]) -> String {
    if !q.is_empty() {
        url.push('?');
        url.push_str(&q.join("&"));
    }
    url
}

/// The body of an end ping: the tail, within `limit` bytes, after a line
/// saying how much was cut when something was.
fn tail_body(tail: &Tail, limit: usize) -> Vec<u8> {
    if tail.cut == 0 && tail.bytes.len() <= limit {
        return tail.bytes.clone();
    }
    // The notice's length depends on the count it gives: settle it.
    let mut start = 0;
    let mut notice = Vec::new();
    for _ in 0..3 {
        let cut = tail.cut as usize + start;
        notice = format!("[onlyone: the output's first {cut} bytes are cut]\n").into_bytes();
        notice.truncate(limit);
        start = tail.bytes.len().saturating_sub(limit - notice.len());
    }
    let room = limit - notice.len();
    let start = tail.bytes.len().saturating_sub(room);
    notice.extend_from_slice(&tail.bytes[start..]);
    notice
}

/// Checks a ping URL: `http://` or `https://`, a host; the error names the
/// flag and the fix, and never shows what could be a secret.
fn parse(url: &str) -> Result<Target, String> {
    parse_as(url, "--ping (or $ONLYONE_PING)")
}

/// [`parse`], its errors naming `source`: where the URL was given.
fn parse_as(url: &str, source: &str) -> Result<Target, String> {
    let fix = "give the check's ping URL, e.g. https://hc-ping.com/UUID";
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r))
            if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+') =>
        {
            (s, r)
        }
        _ => return Err(format!("{source}: not a URL; {fix}")),
    };
    let scheme = scheme.to_ascii_lowercase();
    let (provider, scheme) = Provider::of_scheme(&scheme);
    if scheme != "http" && scheme != "https" {
        return Err(format!(
            "{source}: {scheme}:// is not a scheme pings use ({}); {fix}",
            Provider::schemes()
        ));
    }
    if url.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(format!(
            "{source}: the URL holds a space or a control character; {fix}"
        ));
    }
    let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
    let (before_q, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q.to_owned()).filter(|q| !q.is_empty())),
        None => (rest, None),
    };
    let authority = before_q.split('/').next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("{source}: the URL names no host; {fix}"));
    }
    let path = before_q[authority.len()..].trim_end_matches('/');
    Ok(Target {
        base: format!("{scheme}://{authority}{path}"),
        query,
        shown: format!("{scheme}://{host}/…"),
        provider,
    })
}

/// POSTs `body` to `url`, retrying on 408, 429, 5xx and transport errors
/// with backoff, until `until`.
/// Its answer's `Ping-Body-Limit`, when it gave one. A GET, without the
/// body, with `get` (Sentry's check-ins, as its guide sends them).
fn post(url: &str, body: &[u8], get: bool, until: Instant) -> Result<Option<usize>, String> {
    let mut backoff = BACKOFF;
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(left.min(ATTEMPT_TIMEOUT)))
            .http_status_as_error(false)
            .user_agent(concat!("onlyone/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let answer = if get {
            agent.get(url).call()
        } else {
            agent.post(url).send(body)
        };
        match answer {
            Ok(r) => {
                let status = r.status().as_u16();
                if (200..300).contains(&status) {
                    let limit = r
                        .headers()
                        .get("ping-body-limit")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse().ok());
                    return Ok(limit);
                }
                last = format!("HTTP {status}");
                if !(status == 408 || status == 429 || status >= 500) {
                    return Err(last);
                }
            }
            Err(e) => last = transport(&e),
        }
        if attempt + 1 < ATTEMPTS {
            let nap = backoff.min(until.saturating_duration_since(Instant::now()));
            std::thread::sleep(nap);
            backoff *= 2;
        }
    }
    if last.is_empty() {
        last = "no time left".to_owned();
    }
    Err(last)
}

/// A transport error, said without the URL (ureq's messages may carry it).
fn transport(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(_) => "timed out".to_owned(),
        ureq::Error::Io(io) => io.kind().to_string(),
        ureq::Error::HostNotFound => "host not found".to_owned(),
        ureq::Error::ConnectionFailed => "connection failed".to_owned(),
        _ => "transport error".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_fits_its_limit_with_a_notice() {
        let tail = |n: usize, cut: u64| Tail {
            bytes: (0..n).map(|i| b'a' + (i % 26) as u8).collect(),
            cut,
        };
        assert_eq!(tail_body(&tail(100, 0), 100), tail(100, 0).bytes);
        for (n, cut, limit) in [
            (101, 0, 100),
            (5000, 7, 1000),
            (20, 0, 5),
            (99_999, 3, 9_999),
        ] {
            let t = tail(n, cut);
            let body = tail_body(&t, limit);
            assert_eq!(body.len(), limit.min(body.len()));
            assert!(body.len() <= limit);
            let text = String::from_utf8_lossy(&body);
            if limit > 60 {
                assert!(text.starts_with("[onlyone: the output's first "), "{text}");
                assert!(
                    t.bytes
                        .ends_with(text.split_once("]\n").unwrap().1.as_bytes())
                );
                let said: usize = text[29..].split(' ').next().unwrap().parse().unwrap();
                let kept = text.split_once("]\n").unwrap().1.len();
                assert_eq!(said + kept, n + cut as usize, "{text}");
                assert_eq!(body.len(), limit);
            }
        }
    }

    #[test]
    fn urls_are_checked_and_masked() {
        let t = parse("https://user:pw@hc.example.com:8000/ping/KEY/slug/?create=1").unwrap();
        assert_eq!(t.shown, "https://hc.example.com:8000/…");
        assert_eq!(
            t.url("start", Some("r"), None).unwrap(),
            "https://user:pw@hc.example.com:8000/ping/KEY/slug/start?create=1&rid=r"
        );
        let s = parse("sentry+https://o0.ingest.sentry.io/api/7/cron/nightly/KEY/").unwrap();
        assert_eq!(s.shown, "https://o0.ingest.sentry.io/…");
        let base = "https://o0.ingest.sentry.io/api/7/cron/nightly/KEY/";
        assert_eq!(
            s.url("start", Some("r"), None).unwrap(),
            format!("{base}?check_in_id=r&status=in_progress")
        );
        let took = Some(Duration::from_millis(1500));
        assert_eq!(
            s.url("0", Some("r"), took).unwrap(),
            format!("{base}?check_in_id=r&status=ok&duration=1.500")
        );
        for failed in ["3", "fail"] {
            assert!(
                s.url(failed, Some("r"), took)
                    .unwrap()
                    .contains("status=error")
            );
        }
        assert_eq!(s.url("log", Some("r"), None), None);
        assert_eq!(
            (t.provider.prefix, s.provider.prefix),
            (None, Some("sentry"))
        );
        let other = parse("nosuch+https://h/x").unwrap_err();
        assert!(
            other.contains("nosuch+https:// is not a scheme pings use (http:// or https://, or sentry+https:// for Sentry's cron check-ins"),
            "{other}"
        );
        let wrong = parse("sentry+ftp://h/x").unwrap_err();
        assert!(wrong.contains(" ftp:// is not a scheme"), "{wrong}");
        for bad in ["notaurl", "ftp://h/x", "https:///x", "http://a b/"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("--ping"), "{e}");
        }
        assert!(!parse("ftp://u:secret@h/x").unwrap_err().contains("secret"));
    }
}
