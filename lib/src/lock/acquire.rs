//! Taking a lock: write the record, link it into place, read it back; on
//! contention, judge what is there, and wait, refuse or reclaim.

use std::time::{Duration, Instant, SystemTime};

use rustix::io::Errno;

use super::guard::{LockGuard, TakeOver};
use super::queue::{self, Ticket};
use super::temp::{TempFile, is_unwritable};
use super::waiter::Waiter;
use super::{LockFile, MAX_TAKEOVER_TRIES, REPROBE_INTERVAL, unix_now};
use crate::error::{Error, HeldBy, Result};
use crate::lock::judge::Evidence;
use crate::lock::verdict::{self, StaleReason, Verdict};
use crate::procfs::{self, Group, Identity};
use crate::record::{self, FORMAT_VERSION, Mode, Record};
use crate::test_hooks::{self, Point};

/// Looks that find the path empty, after which an acquire without a deadline
/// reports [`Error::Contended`] instead of spinning on.
const MAX_EMPTY_LOOKS: u32 = 100_000;

/// Who owns a lock being acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Owner {
    /// This process.
    #[default]
    Current,
    /// Another live process, named by pid (a shell that calls
    /// `onlyone acquire`). Its kernel lock cannot be held for it, so its
    /// liveness is proven by pid and start time alone.
    Pid(u32),
}

impl Owner {
    /// The shell that called this process (`onlyone acquire`), by pid: its
    /// parent, unless this process writes to a command substitution
    /// (`vars=$(onlyone acquire L --export)`) whose reader is its
    /// grandparent. Most shells exec the command of a substitution in the
    /// substitution's child, so the reader is the parent; but bash forks a
    /// subshell for `$(onlyone ... 2>/dev/null)`, and that subshell exits as
    /// soon as onlyone does: it must not own the lock. The grandparent is
    /// taken only when it reads the pipe onlyone writes to and the parent
    /// is its forked copy (the same executable) writing to the same pipe;
    /// anything else (cron's pipe to its mailer, read by cron) is the
    /// parent's. 1 means the caller has exited and init adopted this
    /// process.
    pub fn calling_shell() -> u32 {
        let parent = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get() as u32);
        let me = std::process::id();
        let Some(pipe) = procfs::pipe_of(me, 1) else {
            return parent;
        };
        if procfs::reads_pipe(parent, pipe) || procfs::pipe_of(parent, 1) != Some(pipe) {
            return parent;
        }
        let Some(grandparent) = procfs::read_stat(parent).ok().flatten().map(|st| st.ppid) else {
            return parent;
        };
        let exe = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        if grandparent > 1
            && procfs::reads_pipe(grandparent, pipe)
            && exe(grandparent).is_some()
            && exe(grandparent) == exe(parent)
        {
            grandparent
        } else {
            parent
        }
    }
}

/// How to acquire.
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    owner: Owner,
    wait: Option<Duration>,
    deadline: Option<Instant>,
    mode: Option<Mode>,
    token: Option<String>,
    command: Option<String>,
    queue: bool,
    out_of_line: bool,
    slots: Option<std::num::NonZeroU32>,
}

impl AcquireOptions {
    /// Options for an immediate attempt by this process.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the owner (default: this process).
    pub fn owner(mut self, owner: Owner) -> Self {
        self.owner = owner;
        self
    }

    /// Waits up to `wait` for a live holder to finish. Waiters get the
    /// lock in the order they began to wait (see [`LockFile::waiters`]).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// At most one caller waits: one that finds the lock held while
    /// another waits with this option gives up with [`Error::Queued`];
    /// otherwise it waits (up to [`AcquireOptions::wait`], else for ever).
    /// A waiter that dies leaves its seat to the next caller.
    ///
    /// ```
    /// use std::time::Duration;
    /// use onlyone::{AcquireOptions, Error, LockFile};
    /// let dir = tempfile::tempdir()?;
    /// let lock = LockFile::open(dir.path().join("sync.lock"))?;
    /// let running = lock.try_acquire()?;
    ///
    /// let queued = {
    ///     let lock = lock.clone();
    ///     std::thread::spawn(move || lock.acquire(&AcquireOptions::new().queue()))
    /// };
    /// while lock.waiters().is_empty() {
    ///     std::thread::sleep(Duration::from_millis(5));
    /// }
    /// // One waits already: the next caller gives up.
    /// assert!(matches!(lock.acquire(&AcquireOptions::new().queue()), Err(Error::Queued { .. })));
    /// running.release()?;
    /// queued.join().unwrap()?.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn queue(mut self) -> Self {
        self.queue = true;
        self
    }

    /// Waits out of line: takes no ticket, and tries whenever the lock
    /// may be free (for a lock that only this process's threads wait for,
    /// or the queue seat itself).
    pub fn fifo(mut self, in_line: bool) -> Self {
        self.out_of_line = !in_line;
        self
    }

    /// One budget for the whole call: waiting, the removal guard, retries.
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Marks the record as a run's (see [`Mode::Run`]).
    pub fn run_mode(mut self) -> Self {
        self.mode = Some(Mode::Run);
        self
    }

    /// Says which processes keep the lock held (default: [`Mode::Lock`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Uses the given token (32 lowercase hex digits from
    /// [`new_token`]) instead of a fresh one: a run hands its token to its
    /// command before the lock is taken.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Records this command line instead of the owner's own.
    pub fn command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }

    /// Lets up to `n` holders have the lock at once, each in a slot of its
    /// own (see [`LockFile::slot`]); 0 and 1 are the lock of one holder.
    /// The number is the lock's: a take with another number while a slot
    /// is held fails with [`Error::SlotsDiffer`].
    pub fn slots(mut self, n: u32) -> Self {
        self.slots = std::num::NonZeroU32::new(n);
        self
    }

    /// The number of slots asked for: 1 unless more were.
    pub fn slot_count(&self) -> u32 {
        self.slots.map_or(1, std::num::NonZeroU32::get)
    }

    /// These options for one look at one slot: no wait, no queue, and
    /// `token` (the one every slot's take writes, and the waiter's).
    pub(super) fn at_once(&self, token: &str) -> AcquireOptions {
        AcquireOptions {
            wait: None,
            queue: false,
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }

    /// The token asked for, or a fresh one.
    pub(super) fn token_or_new(&self) -> String {
        self.token.clone().unwrap_or_else(new_token)
    }

    /// Whether a caller that waits takes the queue seat first.
    pub(super) fn queued(&self) -> bool {
        self.queue
    }

    /// Whether a caller that waits takes a ticket in the lock's line.
    pub(super) fn in_line(&self) -> bool {
        !self.out_of_line
    }

    /// The owner the record names.
    pub(super) fn owned_by(&self) -> Owner {
        self.owner
    }

    /// The deadline asked for, if any.
    pub(super) fn deadline_asked(&self) -> Option<Instant> {
        self.deadline
    }

    /// The command line asked for, if any.
    pub(super) fn command_asked(&self) -> Option<&str> {
        self.command.as_deref()
    }

    /// Until when a take that finds every slot held waits (`None`: it does
    /// not), from `started` and the handle's `deadline`.
    pub(super) fn waits_until(
        &self,
        started: Instant,
        deadline: Option<Instant>,
    ) -> Option<Instant> {
        let deadline = match (deadline, self.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (self.wait.or(self.queue.then_some(FOREVER)), deadline) {
            (Some(w), Some(d)) => Some(later(started, w).min(d)),
            (Some(w), None) => Some(later(started, w)),
            (None, _) => None,
        }
    }
}

/// A fresh random token: 128 bits as 32 lowercase hex digits.
pub fn new_token() -> String {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(Errno::INTR) => {}
            Err(_) => {
                // getrandom(2) exists on every kernel onlyone supports; if it
                // fails anyway, fall back to what is unique on this host.
                let t = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos();
                let seed = t ^ (u128::from(std::process::id()) << 64);
                buf.copy_from_slice(&seed.to_le_bytes());
                break;
            }
        }
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(2 * buf.len());
    for b in buf {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    hex
}

/// True for a token as [`new_token`] makes them: 32 lowercase hex digits.
fn is_token(t: &str) -> bool {
    t.len() == 32 && t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// How long a queued caller with no wait of its own waits: for ever.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `start + wait`, or as far as the clock goes.
fn later(start: Instant, wait: Duration) -> Instant {
    start
        .checked_add(wait)
        .or_else(|| start.checked_add(FOREVER))
        .unwrap_or(start)
}

/// One acquisition under way: what it writes, and how far it got.
struct Attempt<'l> {
    lock: &'l LockFile,
    opts: &'l AcquireOptions,
    writer: Identity,
    owner: Identity,
    record: Record,
    token: String,
    bytes: Vec<u8>,
    started: Instant,
    deadline: Option<Instant>,
    wait_until: Option<Instant>,
    tries: u32,
    empty_looks: u32,
    took_over: Option<TakeOver>,
    waiter: Option<Waiter>,
    /// This waiter's place in line, from its first look at a held lock.
    ticket: Option<Ticket>,
    /// The queue seat, held from the first look at a held lock until the
    /// lock is taken.
    seat: Option<LockGuard>,
    /// The temp file, kept between attempts that find the lock taken; it
    /// exists only while an attempt is under way, so a waiter killed while
    /// it sleeps leaves nothing behind.
    temp: Option<TempFile<'l>>,
}

/// Where a waiter stands in line before a try at the link.
enum Turn {
    /// It may try: it is not in line, or at its head.
    Try,
    /// Behind the head at a free lock: it slept; look again.
    Waited,
    /// Behind the head, and the lock is there: judge it without a try.
    Judge,
}

/// What the look after a failed link found, and what to do next.
enum Next {
    /// Try to link again.
    Retry,
    /// Give up with this error.
    Fail(Error),
}

impl LockFile {
    /// Takes the lock now, as this process, or fails.
    ///
    /// ```
    /// use onlyone::{Error, LockFile};
    /// let dir = tempfile::tempdir()?;
    /// let lock = LockFile::open(dir.path().join("sync.lock"))?;
    ///
    /// let guard = lock.try_acquire()?;
    /// // A second attempt, here from the same process, is refused with the owner.
    /// match lock.try_acquire() {
    ///     Err(Error::Held(held)) => assert_eq!(held.record.pid, std::process::id()),
    ///     other => panic!("expected held, got {other:?}"),
    /// }
    /// guard.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire(&self) -> Result<LockGuard> {
        self.acquire(&AcquireOptions::new())
    }

    /// Takes the lock with options: another owner, waiting, a deadline.
    ///
    /// ```
    /// use std::time::Duration;
    /// use onlyone::{AcquireOptions, Error, LockFile};
    /// let dir = tempfile::tempdir()?;
    /// let lock = LockFile::open(dir.path().join("sync.lock"))?;
    /// let first = lock.try_acquire()?;
    ///
    /// // A waiter wakes as soon as the holder lets go.
    /// let waiter = {
    ///     let lock = lock.clone();
    ///     std::thread::spawn(move || lock.acquire(&AcquireOptions::new().wait(Duration::from_secs(10))))
    /// };
    /// std::thread::sleep(Duration::from_millis(50));
    /// first.release()?;
    /// let second = waiter.join().unwrap()?;
    /// second.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        if opts.slot_count() > 1 {
            return super::slots::acquire_any(self, opts);
        }
        let guard = self.acquire_slot(opts)?;
        super::slots::check_others(self, &guard, 1)?;
        Ok(guard)
    }

    /// Takes this one file as [`LockFile::acquire`] does, whatever the
    /// number of slots asked for (a slot of a lock of several).
    pub(super) fn acquire_slot(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        self.check_dir_writable()?;
        let mut attempt = Attempt::new(self, opts)?;
        loop {
            attempt.check_owner()?;
            match attempt.turn()? {
                Turn::Try => {}
                Turn::Waited => continue,
                // Judged as any contention, without a try at the link: the
                // lock may be let go meanwhile, and not for this waiter.
                Turn::Judge => {
                    match attempt.contended(None)? {
                        Next::Retry => {}
                        Next::Fail(e) => return Err(e),
                    }
                    continue;
                }
            }
            // A directory that is full, read-only or not writable by this
            // user still answers "held" for a live run: the look below
            // decides before the write error is reported.
            let unwritable = match attempt.link() {
                Ok(Some(guard)) => return Ok(guard),
                Ok(None) => None,
                Err(e) if is_unwritable(&e) => Some(e),
                Err(e) => return Err(e),
            };
            test_hooks::fire(Point::BeforeLook, self.path());
            match attempt.contended(unwritable)? {
                Next::Retry => {}
                Next::Fail(e) => return Err(e),
            }
        }
    }
}

impl<'l> Attempt<'l> {
    fn new(lock: &'l LockFile, opts: &'l AcquireOptions) -> Result<Attempt<'l>> {
        let started = Instant::now();
        let deadline = lock.deadline_or(opts.deadline);
        let writer = procfs::own_identity().map_err(|e| Error::io("read", "/proc/self/stat", e))?;
        let owner = match opts.owner {
            Owner::Current => writer.clone(),
            Owner::Pid(pid) => procfs::identity_of(pid).map_err(|e| Error::BadOwner {
                pid,
                why: "it is not a running process".into(),
                source: Some(e),
            })?,
        };
        let token = match &opts.token {
            Some(t) if is_token(t) => t.clone(),
            Some(t) => {
                return Err(Error::BadToken {
                    token: t.chars().take(80).collect(),
                });
            }
            None => new_token(),
        };
        let record = new_record(opts, &owner, &token)?;
        Ok(Attempt {
            lock,
            opts,
            bytes: record.to_bytes(),
            writer,
            owner,
            record,
            token,
            started,
            deadline,
            wait_until: match (opts.wait.or(opts.queue.then_some(FOREVER)), deadline) {
                (Some(w), Some(d)) => Some(later(started, w).min(d)),
                (Some(w), None) => Some(later(started, w)),
                (None, _) => None,
            },
            tries: 0,
            empty_looks: 0,
            took_over: None,
            waiter: None,
            ticket: None,
            seat: None,
            temp: None,
        })
    }

    /// An owner named by pid (a script) that died while this call waited
    /// wants no lock any more: a record for it would only be stale the
    /// moment it appears.
    fn check_owner(&self) -> Result<()> {
        match self.opts.owner {
            Owner::Pid(pid) if self.waiter.is_some() && !self.owner.id.is_alive() => {
                Err(Error::BadOwner {
                    pid,
                    why: "it exited while waiting for the lock".into(),
                    source: None,
                })
            }
            _ => Ok(()),
        }
    }

    /// Writes the record (once) and links it into place. `Some(guard)` when
    /// it landed and reads back as ours; `None` when the path is taken.
    fn link(&mut self) -> Result<Option<LockGuard>> {
        let temp = match self.temp.take() {
            Some(t) => t,
            None => self.lock.write_temp(self.writer.id, &self.bytes)?,
        };
        test_hooks::fire(Point::BeforeLink, self.lock.path());
        match temp.link_into_place() {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                self.temp = Some(temp);
                return Ok(None);
            }
            Err(e) => return Err(Error::io("link the record to", self.lock.path(), e)),
        }
        match self.lock.read_at_path(super::read::Read::Own) {
            Ok(Some(ev)) if record::carries_token(&ev.bytes, &self.token) => {
                let fd = temp.into_kept();
                Ok(Some(LockGuard {
                    lock: self.lock.clone(),
                    record: self.record.clone(),
                    token: self.token.clone(),
                    fd: Some(fd),
                    creator: crate::sys::pid(),
                    done: false,
                    took_over: self.took_over.take(),
                    slot: 0,
                }))
            }
            // Our link landed but the path no longer holds it: a foreign
            // process replaced it. Never report success.
            Ok(_) => {
                self.temp = Some(temp);
                Ok(None)
            }
            Err(e) => {
                // Never leave our record behind on an error.
                drop(temp);
                let _ = self.lock.release_token_until(&self.token, self.deadline);
                Err(e)
            }
        }
    }

    /// The path was taken (or the record could not be written: `unwritable`
    /// holds why): judges what is there, and says what to do next.
    fn contended(&mut self, unwritable: Option<Error>) -> Result<Next> {
        let Some(ev) = self.lock.look()? else {
            if let Some(e) = unwritable {
                return Err(e);
            }
            return self.found_nothing();
        };
        match crate::lock::judge::judge(&ev, self.deadline) {
            Verdict::Held(holder) => self.held(&ev, holder),
            Verdict::Unknown(reason) => Ok(Next::Fail(Error::Unknown {
                path: self.lock.path().into(),
                reason,
            })),
            Verdict::Stale(reason) => match unwritable {
                Some(e) => Err(e),
                None => self.reclaim(ev, reason),
            },
        }
    }

    /// The path was empty on the look: a holder released meanwhile. That
    /// uses no try up, but an acquire without a deadline does not spin on
    /// forever.
    fn found_nothing(&mut self) -> Result<Next> {
        self.empty_looks += 1;
        let out_of_time = self.deadline.is_some_and(|d| Instant::now() >= d);
        if out_of_time || (self.empty_looks > MAX_EMPTY_LOOKS && self.deadline.is_none()) {
            return Ok(Next::Fail(self.contended_error()));
        }
        Ok(Next::Retry)
    }

    /// Held by a live owner: refuse, or wait until it lets go, dies, or a
    /// re-probe is due.
    fn held(&mut self, ev: &Evidence, holder: verdict::Holder) -> Result<Next> {
        let held = Box::new(HeldBy::new(
            self.lock.path().into(),
            ev.record.clone().unwrap_or_else(|_| self.record.clone()),
            holder,
        ));
        super::slots::check_held(&held, self.opts.slot_count())?;
        let Some(until) = self.wait_until else {
            return Ok(Next::Fail(Error::Held(held)));
        };
        let now = Instant::now();
        if now >= until {
            return Ok(Next::Fail(Error::Timeout {
                waited: now - self.started,
                held,
            }));
        }
        if let Some(t) = &mut self.ticket {
            t.lock_seen_held();
        }
        match &self.waiter {
            // Arm the watch first, then look again, so that a release
            // between the look and the watch is seen. A caller that asks
            // for the queue takes the queue seat first, or gives up; then
            // the caller takes its place in line.
            None => {
                if self.opts.queue {
                    let seat = queue::take_seat(
                        self.lock,
                        1,
                        &self.token,
                        self.line_command(),
                        &held,
                        self.deadline,
                    );
                    match seat {
                        Ok(p) => self.seat = Some(p),
                        Err(e @ Error::Queued { .. }) => return Ok(Next::Fail(e)),
                        Err(e) => return Err(e),
                    }
                }
                self.waiter = Some(Waiter::new(self.lock, !self.opts.out_of_line));
                if !self.opts.out_of_line {
                    self.ticket = Ticket::take(self.lock, &self.token, self.line_command());
                }
            }
            Some(w) => {
                self.temp = None;
                // A holder that is no process of this namespace is looked at
                // again at the interval.
                let holder = held.holder.watchable_pid().unwrap_or(0);
                let _ = w.wait(holder, until.min(now + REPROBE_INTERVAL));
            }
        }
        Ok(Next::Retry)
    }

    /// Stale: removes it under the guard if it is still what was judged,
    /// within the bounded tries.
    fn reclaim(&mut self, ev: Evidence, reason: StaleReason) -> Result<Next> {
        if self.tries >= MAX_TAKEOVER_TRIES {
            return Ok(Next::Fail(self.contended_error()));
        }
        self.tries += 1;
        test_hooks::fire(Point::BeforeReclaim, self.lock.path());
        let removed = self
            .lock
            .reclaim(&ev, self.deadline)
            .map_err(|e| with_state(e, &reason))?;
        // A script's record that its owner released while its workers
        // worked on (`released=`) ended cleanly once the last of them
        // exited: clearing it takes nothing over from a crashed holder.
        let released = ev.record.as_ref().is_ok_and(|r| r.released.is_some());
        if removed {
            let mut took = TakeOver {
                record: ev.record.ok(),
                reason,
                told: false,
            };
            took.told = self.lock.tell_reclaimed(&took);
            if !released {
                self.took_over = Some(took);
            }
        }
        self.lock.sweep_temp_files();
        Ok(Next::Retry)
    }

    /// Whether this caller may try the link now: one that is not in line,
    /// or at its head, may; one behind a live head may not. Behind a head,
    /// at a free lock, it sleeps until a ticket or the lock file goes, the
    /// head exits, or the next look at the line is due; at a lock that is
    /// there, the lock is judged (held: the caller sleeps as any waiter).
    fn turn(&mut self) -> Result<Turn> {
        let Some(t) = &mut self.ticket else {
            return Ok(Turn::Try);
        };
        let Some(head) = t.ahead(self.lock, self.deadline) else {
            return Ok(Turn::Try);
        };
        if self.lock.look()?.is_some() {
            return Ok(Turn::Judge);
        }
        // At the end of its wait, a free lock is better taken than given
        // up.
        let now = Instant::now();
        let until = self.wait_until.unwrap_or(now);
        if now >= until {
            return Ok(Turn::Try);
        }
        self.temp = None;
        // A release seen meanwhile is a hand-off gone by (the lock was
        // taken and let go between two looks): the grace starts again.
        if let Some(w) = &self.waiter
            && w.wait(head, until.min(now + queue::LINE_POLL.min(t.grace_left())))
        {
            t.lock_seen_held();
        }
        Ok(Turn::Waited)
    }

    /// The command a ticket and the queue seat record: the lock's.
    fn line_command(&self) -> Option<&str> {
        self.opts.command.as_deref().or(self.owner.cmd.as_deref())
    }

    fn contended_error(&self) -> Error {
        Error::Contended {
            path: self.lock.path().into(),
            tries: self.tries,
        }
    }
}

/// Says what a lock this user may not remove was judged.
fn with_state(e: Error, reason: &StaleReason) -> Error {
    match e {
        Error::CannotRemove {
            path,
            why,
            me,
            owner,
            ..
        } => Error::CannotRemove {
            path,
            why,
            me,
            owner,
            state: Some(format!("stale ({reason})")),
        },
        e => e,
    }
}

/// This process's command line, escaped for a record: escaped once per
/// process (a library that acquires in a loop writes it every time).
fn own_command_line_escaped() -> Option<String> {
    static OWN: std::sync::Mutex<Option<(u32, Option<String>)>> = std::sync::Mutex::new(None);
    let pid = crate::sys::pid().as_raw_nonzero().get() as u32;
    let mut cached = OWN.lock().unwrap_or_else(|p| p.into_inner());
    match cached.as_ref() {
        Some((p, cmd)) if *p == pid => cmd.clone(),
        _ => {
            let cmd = procfs::own_command_line()
                .as_deref()
                .map(record::escape_value);
            *cached = Some((pid, cmd.clone()));
            cmd
        }
    }
}

/// The record an acquisition writes.
fn new_record(opts: &AcquireOptions, owner: &Identity, token: &str) -> Result<Record> {
    let boot =
        procfs::boot_id().map_err(|e| Error::io("read", "/proc/sys/kernel/random/boot_id", e))?;
    // An owner that leads its process group (a script run by cron, systemd
    // or a shell's job control) keeps the lock held through the processes
    // it starts in that group. An owner that does not lead its group shares
    // it with others (siblings), so only the owner counts.
    let group = match opts.owner {
        Owner::Pid(pid) => match procfs::read_stat(pid) {
            Ok(Some(st)) if st.pgrp == pid => Some(Group {
                pgid: pid,
                leader_start: Some(st.start),
            }),
            _ => None,
        },
        Owner::Current => None,
    };
    Ok(Record {
        pid: owner.id.pid,
        start: Some(owner.id.start),
        boot: Some(boot.to_owned()),
        token: Some(token.to_owned()),
        since: Some(unix_now()),
        pidns: owner.pidns,
        // Start times are as this process reads them: on its clock.
        timens: procfs::own_timens(),
        bootoff_ns: procfs::own_boottime_offset_ns(),
        host: Some(procfs::host_name()),
        uid: owner.uid,
        mode: opts.mode.unwrap_or(Mode::Lock),
        cmd: match (&opts.command, opts.owner) {
            (Some(c), _) => Some(record::escape_value(c)),
            (None, Owner::Current) => own_command_line_escaped(),
            (None, Owner::Pid(_)) => owner.cmd.as_deref().map(record::escape_value),
        },
        cmd_id: None,
        group,
        linger: Vec::new(),
        lingered: None,
        // A script's forks that have not exec'd do not carry the token it
        // exported: they are known by the script's image.
        image: match (opts.mode, opts.owner) {
            (Some(Mode::Script), Owner::Pid(pid)) => procfs::Image::of_randomised(pid),
            _ => None,
        },
        released: None,
        // Where the run's processes stay: evidence for a later process
        // whose environment cannot be read (not paid by a plain lock).
        cgroup: match opts.mode {
            Some(Mode::Run | Mode::Script) => procfs::systemd_cgroup(owner.id.pid)
                .filter(|c| c != "/")
                .map(|c| record::escape_value(&c)),
            _ => None,
        },
        slots: Some(opts.slot_count()).filter(|&n| n > 1),
        format: FORMAT_VERSION,
    })
}

#[cfg(test)]
mod tests {
    use super::{is_token, new_token};

    #[test]
    fn a_token_is_32_lowercase_hex_digits_and_fresh_each_time() {
        let tokens: Vec<String> = (0..64).map(|_| new_token()).collect();
        assert!(tokens.iter().all(|t| is_token(t)), "{tokens:?}");
        let mut unique = tokens.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), tokens.len());
        // Both digits of each byte are written: all 16 digits turn up
        // among the 1,024 high digits and among the 1,024 low ones.
        for place in [0, 1] {
            let mut seen: Vec<u8> = tokens
                .iter()
                .flat_map(|t| t.bytes().skip(place).step_by(2))
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen, b"0123456789abcdef", "place {place}");
        }
    }
}
