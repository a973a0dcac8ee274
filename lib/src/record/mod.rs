//! The owner record: what a lock file says about who holds it.
//!
//! ```text
//! 4242                                   <- line 1: the owner's pid, alone
//! start=123456789                        <- owner's start time (clock ticks since boot)
//! boot=d1dce367-f09e-4b16-b699-8439646e535a
//! token=5f0c2a...                        <- 128 random bits naming this acquisition
//! since=1764406800                       <- acquisition time, Unix seconds
//! pidns=4026531836                       <- inode of the owner's PID namespace
//! host=build-01
//! uid=0
//! mode=run                               <- `run`, `script` or `lock` (see [`Mode`])
//! cmd=./sync.sh --all                    <- the owner's command line, escaped, bounded
//! cmdpid=4250                            <- run mode: the command's pid and start time
//! cmdstart=123456790
//! image=7ffd1000-7ffd1040:7ffd1040-7ffd1fe0  <- script mode: the owner's image
//! released=1764410400                    <- script mode: released while workers lived
//! cgroup=/user.slice/user-0.slice/session-4.scope  <- run/script: the owner's systemd cgroup
//! slots=3                                <- a lock of N slots: N (absent for one)
//! onlyone=1                              <- format version
//! ```
//!
//! Line 1 is the pid alone so that pidfile readers (`kill $(head -n1 f)`,
//! `pkill -F f`) keep working. A file that holds line 1 only (a bare pid
//! file written by another tool) is understood too.
//!
//! The parser is strict, because a record is evidence in a liveness
//! decision: it reads at most [`MAX_RECORD_BYTES`], never panics, and rejects
//! as "not a record" anything malformed: a pid outside `1..=pid_max`, an
//! empty file, NUL bytes, invalid UTF-8, numeric overflow, a line that is not
//! `key=value`, a duplicate key, or a record with keys but without `start`
//! and `boot`. Unknown keys are ignored, so later versions can add keys; a
//! later *format* version (`onlyone=2`) parses, and the verdict treats what
//! it cannot prove conservatively.

use std::fmt;

use crate::procfs::{Group, Image, ProcId};

/// The most bytes of a lock file that are ever read. A record written by
/// onlyone is well under 2 KiB; anything longer is not a record.
pub const MAX_RECORD_BYTES: usize = 8192;

/// The record format version this build writes and fully understands.
pub const FORMAT_VERSION: u32 = 1;

/// The most lingering processes a record names (`linger=`).
pub const MAX_LINGER: usize = 32;

/// Which processes keep a record's lock held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// A lock held by a process (the library, or `onlyone acquire`): the
    /// owner, and the members of its process group when it leads one.
    Lock,
    /// A lock held for the life of a run: the wrapper, the command and every
    /// process that carries the run's token.
    Run,
    /// A lock taken by `onlyone acquire --export` for a shell script: the
    /// owner (the script), its process group when it leads one, and every
    /// process that carries the token (the script's workers, which the
    /// exported `ONLYONE_TOKEN` reaches).
    Script,
}

impl Mode {
    /// The word the record and `status` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Lock => "lock",
            Mode::Run => "run",
            Mode::Script => "script",
        }
    }
}

/// A parsed owner record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// The owner's pid (line 1).
    pub pid: u32,
    /// The owner's start time in clock ticks since boot (`/proc/PID/stat`
    /// field 22). `None` only for a bare pid file.
    pub start: Option<u64>,
    /// The boot id the record was written under. `None` only for a bare pid
    /// file.
    pub boot: Option<String>,
    /// The random token of this acquisition.
    pub token: Option<String>,
    /// When the lock was acquired, in Unix seconds.
    pub since: Option<u64>,
    /// The inode number of the owner's PID namespace.
    pub pidns: Option<u64>,
    /// The inode number of the writer's time namespace: the start times
    /// in the record are on its clock.
    pub timens: Option<u64>,
    /// That namespace's boot-time offset, nanoseconds (`bootoff=`, written
    /// only when not 0): `/proc/PID/stat` start times read there are this
    /// much ahead of the host's.
    pub bootoff_ns: i64,
    /// The host name the owner ran on.
    pub host: Option<String>,
    /// The owner's user id. A record read from a lock file carries the
    /// file's owner here, whatever its `uid=` line says: whoever wrote the
    /// file speaks only for its own processes (and root's for anyone's).
    pub uid: Option<u32>,
    /// Lock or run.
    pub mode: Mode,
    /// The owner's command line, escaped for display.
    pub cmd: Option<String>,
    /// Run mode: the command (`cmdpid=`, `cmdstart=`).
    pub cmd_id: Option<ProcId>,
    /// Lock and script mode, for an owner named by pid (a shell script)
    /// that leads its process group: that group, whose members started
    /// after the owner keep the lock held (`pgid=`, `pgstart=`).
    pub group: Option<Group>,
    /// Run mode, `run --linger`: processes that outlived the command, and
    /// may carry neither its token nor its group (a daemon that cleared its
    /// environment), named so the verdict finds them once the wrapper has
    /// exited (`linger=PID:START,...`, at most [`MAX_LINGER`]).
    pub linger: Vec<ProcId>,
    /// Run mode, `run --linger`: when the wrapper named the lingering
    /// processes, right after the command exited (`lingered=`, clock ticks
    /// since boot, the clock of start times). What starts later is the
    /// run's work only by descent from it (see [`crate::reap`]'s "The
    /// run's own work").
    pub lingered: Option<u64>,
    /// Script mode: the owner's [`Image`] (`image=`), so that its forks
    /// that have not exec'd (subshell workers, a worker between fork and
    /// exec) keep the lock held when the script is killed. Written only
    /// where the kernel randomises images.
    pub image: Option<Image>,
    /// Script mode: when the owner released while other processes of the
    /// run still lived (`released=`, Unix seconds). The lock stays held by
    /// them, and is free once the last one exits; its end is already
    /// recorded, so whoever clears it then records no abandoned run.
    pub released: Option<u64>,
    /// Run and script mode: the owner's systemd cgroup when it acquired
    /// (`cgroup=`, escaped), where every process it starts stays unless
    /// moved. Evidence that a process of another cgroup whose environment
    /// cannot be read (a later ssh-agent, in a login session of its own) is
    /// not of the run.
    pub cgroup: Option<String>,
    /// How many slots the lock has when more than one (`slots=`): every
    /// slot's record says it, and a take with another number is refused
    /// while a slot is held. `None` is a lock of one slot.
    pub slots: Option<u32>,
    /// The format version (`onlyone=N`); 0 for a record without one.
    pub format: u32,
}

/// Why some bytes are not an owner record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotARecord {
    /// The file is empty.
    Empty,
    /// It is larger than [`MAX_RECORD_BYTES`].
    TooLarge,
    /// It contains NUL bytes.
    Nul,
    /// It is not valid UTF-8.
    NotUtf8,
    /// Line 1 (the pid) is missing.
    NoPid,
    /// A line is not `key=value`.
    NotKeyValue {
        /// The line number.
        line: usize,
    },
    /// A key is not lowercase letters, digits and `_`.
    BadKey {
        /// The line number.
        line: usize,
        /// The key.
        key: String,
    },
    /// A key appears twice.
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A value has control characters.
    ControlChars {
        /// The key.
        key: String,
    },
    /// A value is malformed: not a number, out of range, not a pid, not a
    /// boot id...
    BadValue {
        /// The key (`pid (line 1)` for line 1).
        key: String,
        /// What is wrong, as a sentence.
        why: String,
    },
    /// A required key is missing.
    MissingKey {
        /// The key.
        key: &'static str,
    },
    /// `cmdpid` and `cmdstart` do not appear together.
    Unpaired,
    /// The file could not be read (permission).
    Denied {
        /// The error.
        why: String,
    },
}

impl fmt::Display for NotARecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotARecord::Empty => f.write_str("the file is empty"),
            NotARecord::TooLarge => write!(f, "it is larger than {MAX_RECORD_BYTES} bytes"),
            NotARecord::Nul => f.write_str("it contains NUL bytes"),
            NotARecord::NotUtf8 => f.write_str("it is not valid UTF-8"),
            NotARecord::NoPid => f.write_str("line 1 (the pid) is missing"),
            NotARecord::NotKeyValue { line } => write!(f, "line {line} is not `key=value`"),
            NotARecord::BadKey { line, key } => {
                write!(f, "line {line} has a malformed key {key:?}")
            }
            NotARecord::DuplicateKey { key } => write!(f, "the key `{key}` appears twice"),
            NotARecord::ControlChars { key } => {
                write!(f, "the value of `{key}` has control characters")
            }
            NotARecord::BadValue { why, .. } => f.write_str(why),
            NotARecord::MissingKey { key } => write!(f, "the required key `{key}` is missing"),
            NotARecord::Unpaired => f.write_str("`cmdpid` and `cmdstart` must appear together"),
            NotARecord::Denied { why } => write!(f, "permission denied ({why})"),
        }
    }
}

impl std::error::Error for NotARecord {}

fn bad_value(key: &str, why: String) -> NotARecord {
    NotARecord::BadValue {
        key: key.to_owned(),
        why,
    }
}

/// Parses a decimal number made of ASCII digits only: no sign, no spaces,
/// no overflow.
fn parse_decimal(key: &str, value: &str) -> Result<u64, NotARecord> {
    if value.is_empty() {
        return Err(bad_value(key, format!("`{key}` is empty")));
    }
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_value(
            key,
            format!("`{key}` is not a decimal number: {value:?}"),
        ));
    }
    value
        .parse::<u64>()
        .map_err(|_| bad_value(key, format!("`{key}` is out of range: {value}")))
}

fn parse_pid(key: &str, value: &str, pid_max: u32) -> Result<u32, NotARecord> {
    let n = parse_decimal(key, value)?;
    if n == 0 || n > u64::from(pid_max) {
        return Err(bad_value(
            key,
            format!("`{key}` {n} is not a valid pid (1..={pid_max})"),
        ));
    }
    Ok(n as u32)
}

/// The halves of the record's pairs, as the lines give them.
#[derive(Default)]
struct Pairs {
    cmd_pid: Option<u32>,
    cmd_start: Option<u64>,
    pgid: Option<u32>,
    pgstart: Option<u64>,
}

/// Splits line `lineno` into a key and a value, checking what every line
/// must be: `key=value`, a key of lowercase letters, digits and `_` seen
/// once, a value without control characters.
fn key_value<'a>(
    raw: &'a str,
    lineno: usize,
    seen: &mut Vec<&'a str>,
) -> Result<(&'a str, &'a str), NotARecord> {
    let line = raw.strip_suffix('\r').unwrap_or(raw);
    let Some((key, value)) = line.split_once('=') else {
        return Err(NotARecord::NotKeyValue { line: lineno });
    };
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(NotARecord::BadKey {
            line: lineno,
            key: key.to_owned(),
        });
    }
    if seen.contains(&key) {
        return Err(NotARecord::DuplicateKey {
            key: key.to_owned(),
        });
    }
    seen.push(key);
    if value.chars().any(char::is_control) {
        return Err(NotARecord::ControlChars {
            key: key.to_owned(),
        });
    }
    Ok((key, value))
}

impl Record {
    /// Parses a record, validating pids against this system's `pid_max`.
    pub fn parse(bytes: &[u8]) -> Result<Record, NotARecord> {
        Record::parse_with_pid_max(bytes, crate::procfs::pid_max())
    }

    /// Parses a record, validating pids against the given `pid_max`. Pure:
    /// it reads nothing but `bytes`.
    pub fn parse_with_pid_max(bytes: &[u8], pid_max: u32) -> Result<Record, NotARecord> {
        if bytes.is_empty() {
            return Err(NotARecord::Empty);
        }
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(NotARecord::TooLarge);
        }
        if bytes.contains(&0) {
            return Err(NotARecord::Nul);
        }
        let text = std::str::from_utf8(bytes).map_err(|_| NotARecord::NotUtf8)?;
        let mut lines = text.split('\n');
        // A trailing newline leaves one empty last piece; a CR before the LF
        // (a pid file written on another system) is tolerated.
        let first = lines.next().unwrap_or("");
        let first = first
            .strip_suffix('\r')
            .unwrap_or(first)
            .trim_matches([' ', '\t']);
        if first.is_empty() {
            return Err(NotARecord::NoPid);
        }
        let pid = parse_pid("pid (line 1)", first, pid_max)?;

        let mut rec = Record {
            pid,
            start: None,
            boot: None,
            token: None,
            since: None,
            pidns: None,
            timens: None,
            bootoff_ns: 0,
            host: None,
            uid: None,
            mode: Mode::Lock,
            cmd: None,
            cmd_id: None,
            group: None,
            linger: Vec::new(),
            lingered: None,
            image: None,
            released: None,
            cgroup: None,
            slots: None,
            format: 0,
        };
        let mut pairs = Pairs::default();
        let mut seen: Vec<&str> = Vec::new();
        let mut rest: Vec<&str> = lines.collect();
        if rest.last() == Some(&"") {
            rest.pop();
        }
        let bare = rest.is_empty();
        for (i, raw) in rest.iter().enumerate() {
            let (key, value) = key_value(raw, i + 2, &mut seen)?;
            rec.set(key, value, pid_max, &mut pairs)?;
        }
        if !bare {
            if rec.start.is_none() {
                return Err(NotARecord::MissingKey { key: "start" });
            }
            if rec.boot.is_none() {
                return Err(NotARecord::MissingKey { key: "boot" });
            }
        }
        rec.cmd_id = match (pairs.cmd_pid, pairs.cmd_start) {
            (Some(pid), Some(start)) => Some(ProcId { pid, start }),
            (None, None) => None,
            _ => return Err(NotARecord::Unpaired),
        };
        // A leader's start time without its group says nothing.
        rec.group = pairs.pgid.map(|pgid| Group {
            pgid,
            leader_start: pairs.pgstart,
        });
        Ok(rec)
    }

    /// Sets the field that the line `key=value` names (an unknown key is
    /// ignored: forward compatibility). The halves of a pair wait in
    /// `pairs` until every line is read.
    fn set(
        &mut self,
        key: &str,
        value: &str,
        pid_max: u32,
        pairs: &mut Pairs,
    ) -> Result<(), NotARecord> {
        match key {
            "start" => self.start = Some(parse_decimal(key, value)?),
            "boot" => {
                if !crate::procfs::is_boot_id(value) {
                    return Err(bad_value(
                        key,
                        format!("`boot` is not a boot id: {value:?}"),
                    ));
                }
                self.boot = Some(value.to_owned());
            }
            "token" => {
                if value.is_empty()
                    || value.len() > 64
                    || !value.bytes().all(|b| b.is_ascii_alphanumeric())
                {
                    return Err(bad_value(key, format!("`token` is malformed: {value:?}")));
                }
                self.token = Some(value.to_owned());
            }
            "since" => self.since = Some(parse_decimal(key, value)?),
            "pidns" => self.pidns = Some(parse_decimal(key, value)?),
            "timens" => self.timens = Some(parse_decimal(key, value)?),
            "bootoff" => {
                let (neg, digits) = match value.strip_prefix('-') {
                    Some(d) => (true, d),
                    None => (false, value),
                };
                let n = i64::try_from(parse_decimal(key, digits)?)
                    .map_err(|_| bad_value(key, format!("`bootoff` is out of range: {value}")))?;
                self.bootoff_ns = if neg { -n } else { n };
            }
            "host" => self.host = Some(value.to_owned()),
            "uid" => {
                let uid = parse_decimal(key, value)?;
                self.uid = Some(
                    u32::try_from(uid)
                        .map_err(|_| bad_value(key, format!("`uid` is out of range: {uid}")))?,
                );
            }
            "mode" => {
                self.mode = match value {
                    "run" => Mode::Run,
                    "lock" => Mode::Lock,
                    "script" => Mode::Script,
                    // An unknown mode may name processes we do not know
                    // how to find; the verdict must not call it stale on
                    // the owner's death alone, so read it as a run.
                    _ => Mode::Run,
                }
            }
            "cmd" => self.cmd = Some(value.to_owned()),
            "released" => self.released = Some(parse_decimal(key, value)?),
            "cgroup" => self.cgroup = Some(value.to_owned()),
            "slots" => {
                let n = parse_decimal(key, value)?;
                self.slots = Some(
                    u32::try_from(n)
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| bad_value(key, format!("`slots` is out of range: {n}")))?,
                );
            }
            "cmdpid" => pairs.cmd_pid = Some(parse_pid(key, value, pid_max)?),
            "cmdstart" => pairs.cmd_start = Some(parse_decimal(key, value)?),
            "pgid" => pairs.pgid = Some(parse_pid(key, value, pid_max)?),
            "pgstart" => pairs.pgstart = Some(parse_decimal(key, value)?),
            "linger" => {
                for item in value.split(',') {
                    let (p, st) = item.split_once(':').ok_or_else(|| {
                        bad_value(key, format!("`linger` is malformed: {value:?}"))
                    })?;
                    self.linger.push(ProcId {
                        pid: parse_pid(key, p, pid_max)?,
                        start: parse_decimal(key, st)?,
                    });
                }
                if self.linger.len() > MAX_LINGER {
                    return Err(bad_value(
                        key,
                        format!("`linger` names more than {MAX_LINGER} processes"),
                    ));
                }
            }
            "lingered" => self.lingered = Some(parse_decimal(key, value)?),
            "image" => {
                self.image =
                    Some(value.parse().map_err(|()| {
                        bad_value(key, format!("`image` is malformed: {value:?}"))
                    })?);
            }
            "onlyone" => {
                let v = parse_decimal(key, value)?;
                self.format = u32::try_from(v).map_err(|_| {
                    bad_value(key, format!("`onlyone` version is out of range: {v}"))
                })?;
            }
            _ => {} // unknown keys: forward compatibility
        }
        Ok(())
    }

    /// The record with its start times on this process's clock. A
    /// process's start time in `/proc/PID/stat` is shown shifted by the
    /// *reader's* time namespace boot-time offset, so a record written in
    /// another time namespace names its processes by start times this one
    /// never sees. They are moved by the difference of the two offsets.
    /// `None` when that cannot be done exactly (the difference is not a
    /// whole number of clock ticks, or a time falls before the boot): the
    /// verdict is then unknown, never stale.
    pub fn in_local_clock(&self) -> Option<Record> {
        let theirs = self.timens?;
        if Some(theirs) == crate::procfs::own_timens() {
            return Some(self.clone());
        }
        let tick_ns = 1_000_000_000 / i64::try_from(crate::procfs::clock_ticks()).ok()?;
        let shift_ns = crate::procfs::own_boottime_offset_ns().checked_sub(self.bootoff_ns)?;
        if shift_ns % tick_ns != 0 {
            return None;
        }
        let shift = shift_ns / tick_ns;
        let moved = |t: Option<u64>| -> Option<Option<u64>> {
            match t {
                None => Some(None),
                Some(t) => i64::try_from(t)
                    .ok()?
                    .checked_add(shift)
                    .and_then(|v| u64::try_from(v).ok())
                    .map(Some),
            }
        };
        let mut local = self.clone();
        local.start = moved(self.start)?;
        let moved_id = |id: ProcId| {
            moved(Some(id.start)).map(|start| ProcId {
                pid: id.pid,
                start: start.unwrap_or(0),
            })
        };
        local.cmd_id = match self.cmd_id {
            Some(id) => Some(moved_id(id)?),
            None => None,
        };
        local.group = match self.group {
            Some(g) => Some(Group {
                pgid: g.pgid,
                leader_start: moved(g.leader_start)?,
            }),
            None => None,
        };
        local.linger = self
            .linger
            .iter()
            .map(|&id| moved_id(id))
            .collect::<Option<Vec<_>>>()?;
        local.lingered = moved(self.lingered)?;
        local.timens = crate::procfs::own_timens();
        local.bootoff_ns = crate::procfs::own_boottime_offset_ns();
        Some(local)
    }

    /// True for a file that holds only a pid (line 1), as written by other
    /// tools.
    pub fn is_bare(&self) -> bool {
        self.start.is_none()
    }

    /// Serializes the record in the format described in the module docs.
    pub fn to_bytes(&self) -> Vec<u8> {
        use std::fmt::Write as _;
        let mut s = String::with_capacity(256);
        let _ = writeln!(s, "{}", self.pid);
        if let Some(v) = self.start {
            let _ = writeln!(s, "start={v}");
        }
        if let Some(v) = &self.boot {
            let _ = writeln!(s, "boot={v}");
        }
        if let Some(v) = &self.token {
            let _ = writeln!(s, "token={v}");
        }
        if let Some(v) = self.since {
            let _ = writeln!(s, "since={v}");
        }
        if let Some(v) = self.pidns {
            let _ = writeln!(s, "pidns={v}");
        }
        if let Some(v) = self.timens {
            let _ = writeln!(s, "timens={v}");
        }
        if self.bootoff_ns != 0 {
            let _ = writeln!(s, "bootoff={}", self.bootoff_ns);
        }
        if let Some(v) = &self.host {
            let _ = writeln!(s, "host={}", escape_controls(v));
        }
        if let Some(v) = self.uid {
            let _ = writeln!(s, "uid={v}");
        }
        if !self.is_bare() {
            let _ = writeln!(s, "mode={}", self.mode.as_str());
        }
        if let Some(v) = &self.cmd {
            let _ = writeln!(s, "cmd={}", escape_controls(v));
        }
        if let Some(c) = self.cmd_id {
            let _ = writeln!(s, "cmdpid={}", c.pid);
            let _ = writeln!(s, "cmdstart={}", c.start);
        }
        if let Some(g) = self.group {
            let _ = writeln!(s, "pgid={}", g.pgid);
            if let Some(st) = g.leader_start {
                let _ = writeln!(s, "pgstart={st}");
            }
        }
        if !self.linger.is_empty() {
            let items: Vec<String> = self
                .linger
                .iter()
                .take(MAX_LINGER)
                .map(|id| format!("{}:{}", id.pid, id.start))
                .collect();
            let _ = writeln!(s, "linger={}", items.join(","));
        }
        if let Some(t) = self.lingered {
            let _ = writeln!(s, "lingered={t}");
        }
        if let Some(v) = self.released {
            let _ = writeln!(s, "released={v}");
        }
        if let Some(v) = &self.cgroup {
            let _ = writeln!(s, "cgroup={v}");
        }
        if let Some(v) = self.image {
            let _ = writeln!(s, "image={v}");
        }
        if let Some(v) = self.slots {
            let _ = writeln!(s, "slots={v}");
        }
        if self.format != 0 {
            let _ = writeln!(s, "onlyone={}", self.format);
        }
        s.into_bytes()
    }

    /// The owner, as an identity, when the record names its start time
    /// (a bare pid file does not).
    pub fn owner_id(&self) -> Option<ProcId> {
        self.start.map(|start| ProcId {
            pid: self.pid,
            start,
        })
    }

    /// Whether the record speaks for this process's account: its file is
    /// owned by this user or by root (a record read from a lock file
    /// carries its file's owner in [`Record::uid`]; one this process made
    /// carries its own). A file that another account wrote, in a lock
    /// directory it may write in (`/run/lock`, `/tmp`), is that account's
    /// holder and no more: its token, `since`, `slots` and pids are its
    /// own words, so it is never a run of this account's, never closed,
    /// stopped or released as one, never counted in its lock's number of
    /// slots, and its token never reaches this account's journal.
    pub fn is_ours(&self) -> bool {
        self.uid
            .is_none_or(|uid| uid == 0 || uid == rustix::process::geteuid().as_raw())
    }

    /// The account that wrote the record, when it is another than this
    /// process's and root ([`Record::is_ours`]).
    pub fn other_account(&self) -> Option<u32> {
        self.uid.filter(|_| !self.is_ours())
    }
}

/// True when `bytes` hold a record line `token=TOKEN`: how a writer knows
/// its own record (a read-back, a release) without parsing it. A token is
/// 128 random bits that only its writer puts in a record.
pub(crate) fn carries_token(bytes: &[u8], token: &str) -> bool {
    !token.is_empty()
        && bytes.len() <= MAX_RECORD_BYTES
        && bytes.split(|&b| b == b'\n').skip(1).any(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            line.strip_prefix(b"token=") == Some(token.as_bytes())
        })
}

/// True for what a power loss can leave of a record: nothing, or a prefix
/// of one (a pid line, then `key=value` lines, the last possibly cut), with
/// or without a tail of NUL bytes (blocks allocated but never written).
/// Only such a file may be judged stale on its age; a script, a document
/// or any other file at a lock path never is.
pub fn is_torn_record(bytes: &[u8]) -> bool {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let bytes = &bytes[..end];
    if bytes.contains(&0) {
        return false;
    }
    // A cut may split a multi-byte character at the very end.
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return false,
    };
    let lines: Vec<&str> = text.split('\n').collect();
    let first = lines[0].strip_suffix('\r').unwrap_or(lines[0]);
    if !first.bytes().all(|b| b.is_ascii_digit()) || (first.is_empty() && !text.is_empty()) {
        return false;
    }
    let last = lines.len() - 1;
    lines.iter().enumerate().skip(1).all(|(i, line)| {
        let line = line.strip_suffix('\r').unwrap_or(line);
        // Only the last line, cut short, may lack its `=`.
        let (key, value) = match line.split_once('=') {
            Some(kv) => kv,
            None if i == last => (line, ""),
            None => return false,
        };
        key.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !value.chars().any(char::is_control)
    })
}

pub use crate::text::escape_value;
use crate::text::push_escaped;

/// Replaces control characters only; used when writing, so that a value
/// that is already escaped is written unchanged.
fn escape_controls(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        push_escaped(&mut out, c);
    }
    out
}

#[cfg(test)]
mod tests;
