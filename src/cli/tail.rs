//! The tail of what a pinged run printed, for its end ping's body.
//!
//! While the command runs, onlyone's stdout and stderr are pipes that a
//! relay thread copies to where they were (a file, cron's mail pipe, the
//! journal's socket), keeping the last bytes in a bounded buffer: the
//! output flows as before, and the tail is a copy. When stdout and stderr
//! are the same file (`>log 2>&1`) one pipe serves both, so their order is
//! kept. Nothing is captured when either is a terminal (the command must
//! still see its terminal, for its colours, its prompts and job control),
//! nor with `--linger` or `--keep-strays` (processes that outlive the
//! run must keep writing where it wrote): those end pings carry no body.
//!
//! Nothing the run wrote is dropped, and a slow reader never holds the
//! end ping back:
//!
//! - While the command runs, a relay reads a chunk only once it has
//!   written the last one out: a reader that lags holds the command back,
//!   as it would without the relay. It waits for room in `poll`, never in
//!   a `write` that could block, so it hears at once when the run is over.
//! - When the run is over ([`Capture::finish`]), each relay reads what the
//!   run left in its pipe at once (the pipe's size at most): the tail is
//!   whole, and the end ping goes without waiting for the reader.
//! - What was read is still written out, for as long as the destination
//!   has a reader, however slow ([`Delivery::wait`], before onlyone
//!   exits): the command, without the relay, would have waited on its own
//!   writes as long. A reader that is gone (`EPIPE`), or a destination
//!   that fails, ends the writing at once, and the copy to the tail goes
//!   on (the command is never stopped by SIGPIPE). A forwarded signal
//!   (TERM, INT, HUP...) ends the wait: the rest is dropped.
//! - What a process that outlived the run (one that escaped its end)
//!   writes to the pipes after it is relayed for [`DRAIN`], no longer.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;

/// How long, once the run is over, what is still written to the pipes (by
/// a process that outlived the run) is relayed.
const DRAIN: Duration = Duration::from_millis(500);
/// How long the end ping may wait for the tail: a relay reads what the
/// run left at once, unless another writer of its destination filled the
/// room it was about to write to.
const TAIL_WAIT: Duration = Duration::from_secs(1);
/// How often [`Delivery::wait`] looks for a signal.
const SIGNAL_LOOK: Duration = Duration::from_millis(100);
/// The most read at once.
const CHUNK: usize = 64 * 1024;
/// The most written at once to a destination that may block (a socket,
/// a pipe whose room is unknown): once `poll` says a pipe has room (a
/// page at least), a write of up to `PIPE_BUF` takes it without blocking.
const PIPE_BUF: usize = 4096;

/// The last bytes written, at most `cap`, and how many came before them.
#[derive(Default)]
struct Ring {
    bytes: VecDeque<u8>,
    cap: usize,
    cut: u64,
}

impl Ring {
    fn push(&mut self, b: &[u8]) {
        self.bytes.extend(b);
        while self.bytes.len() > self.cap {
            let over = self.bytes.len() - self.cap;
            self.bytes.drain(..over);
            self.cut += over as u64;
        }
    }
}

/// What a run printed: its last bytes, and how many were cut before them.
pub(super) struct Tail {
    pub(super) bytes: Vec<u8>,
    pub(super) cut: u64,
}

/// What a relay says, as it gets there.
enum Note {
    /// Everything the run wrote is read (and in the tail).
    Read,
    /// Everything read is written out (or can no longer be), and the relay
    /// is done.
    Delivered,
}

/// stdout and stderr captured, until [`Capture::finish`].
pub(super) struct Capture {
    saved_out: OwnedFd,
    saved_err: OwnedFd,
    ring: Arc<Mutex<Ring>>,
    notes: mpsc::Receiver<Note>,
    relays: usize,
    /// Closed when the run is over: every relay hears it (`POLLHUP`).
    over: OwnedFd,
}

/// The relays' writing out of what they read, once the tail is taken.
#[must_use = "onlyone must wait for its output to be written out before it exits"]
pub(super) struct Delivery {
    notes: mpsc::Receiver<Note>,
    left: usize,
}

impl Capture {
    /// Captures stdout and stderr, keeping the last `cap` bytes; `None`
    /// when either is a terminal, or a pipe or a thread cannot be had
    /// (nothing changed then).
    pub(super) fn begin(cap: usize) -> Option<Capture> {
        if std::io::stdout().is_terminal() || std::io::stderr().is_terminal() {
            return None;
        }
        let saved_out = rustix::io::fcntl_dupfd_cloexec(std::io::stdout(), 3).ok()?;
        let saved_err = rustix::io::fcntl_dupfd_cloexec(std::io::stderr(), 3).ok()?;
        let same = match (rustix::fs::fstat(&saved_out), rustix::fs::fstat(&saved_err)) {
            (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
            _ => false,
        };
        let ring = Arc::new(Mutex::new(Ring {
            cap,
            ..Ring::default()
        }));
        let (tx, notes) = mpsc::channel();
        let (over_r, over) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
        let (out_r, out_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
        let err_pipe = if same {
            None
        } else {
            Some(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?)
        };
        let mut relays = 0;
        let relay = |from: &OwnedFd, to: &OwnedFd| {
            Relay::start(
                from.try_clone()?,
                to.try_clone()?,
                over_r.try_clone()?,
                &ring,
                &tx,
            )
        };
        relay(&out_r, &saved_out).ok()?;
        relays += 1;
        if let Some((err_r, _)) = &err_pipe {
            relay(err_r, &saved_err).ok()?;
            relays += 1;
        }
        // From here on the command (and onlyone's own messages) write to
        // the pipes; the relays hold their read ends.
        let err_w = err_pipe.map_or_else(|| out_w.try_clone().ok(), |(_, w)| Some(w))?;
        let _ = std::io::stderr().flush();
        let _ = std::io::stdout().flush();
        if rustix::stdio::dup2_stdout(&out_w).is_err() {
            return None;
        }
        if rustix::stdio::dup2_stderr(&err_w).is_err() {
            let _ = rustix::stdio::dup2_stdout(&saved_out);
            return None;
        }
        Some(Capture {
            saved_out,
            saved_err,
            ring,
            notes,
            relays,
            over,
        })
    }

    /// The run is over: puts stdout and stderr back, has the relays read
    /// what the run left in the pipes, and gives the tail (waiting for it
    /// [`TAIL_WAIT`] at most), and what is still to be written out.
    pub(super) fn finish(self) -> (Tail, Delivery) {
        let _ = std::io::stderr().flush();
        let _ = std::io::stdout().flush();
        let _ = rustix::stdio::dup2_stdout(&self.saved_out);
        let _ = rustix::stdio::dup2_stderr(&self.saved_err);
        let Capture {
            ring,
            notes,
            relays,
            over,
            ..
        } = self;
        drop(over);
        let until = Instant::now() + TAIL_WAIT;
        let (mut read, mut delivered) = (0, 0);
        while read < relays {
            let left = until.saturating_duration_since(Instant::now());
            match notes.recv_timeout(left) {
                Ok(Note::Read) => read += 1,
                Ok(Note::Delivered) => delivered += 1,
                Err(_) => break,
            }
        }
        let tail = match ring.lock() {
            Ok(r) => Tail {
                bytes: r.bytes.iter().copied().collect(),
                cut: r.cut,
            },
            Err(_) => Tail {
                bytes: Vec::new(),
                cut: 0,
            },
        };
        let delivery = Delivery {
            notes,
            left: relays - delivered,
        };
        (tail, delivery)
    }
}

impl Delivery {
    /// Waits until the relays have written out all they read: for as long
    /// as a destination has a reader that has not read it all yet (one
    /// that is gone ends it at once). A forwarded signal that comes
    /// meanwhile ends the wait, and the rest is dropped; one that came
    /// before (a store's run holds them from its end) is not for it.
    pub(super) fn wait(mut self) {
        if self.left == 0 {
            return;
        }
        let signals = onlyone::place::store::HeldSignals::new().ok();
        if let Some(s) = &signals {
            while s.pending().is_some() {}
        }
        while self.left > 0 {
            match self.notes.recv_timeout(SIGNAL_LOOK) {
                Ok(Note::Delivered) => self.left -= 1,
                Ok(Note::Read) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if signals.as_ref().and_then(|s| s.pending()).is_some() {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// A relay: copies `from` (a pipe's read end, non-blocking) to `to`,
/// keeping the tail in `ring`, as the module says.
struct Relay {
    from: OwnedFd,
    to: OwnedFd,
    /// The run's end, until heard.
    over: Option<OwnedFd>,
    /// `to` is a regular file or a block device, which takes any write
    /// without waiting for a reader.
    whole_writes: bool,
    /// `to` is a pipe (or a FIFO) of this size, whose room is known.
    pipe_size: Option<usize>,
    ring: Arc<Mutex<Ring>>,
    notes: mpsc::Sender<Note>,
    /// Read, not yet written out.
    pending: Vec<u8>,
    /// How much of `pending` is written out.
    sent: usize,
    /// `to` still takes writes.
    writable: bool,
    /// Every writer of `from` is gone.
    eof: bool,
    /// Where a read lands.
    buf: Vec<u8>,
}

impl Relay {
    /// Starts the relay in a thread of its own (the supervisor's signals
    /// blocked in it).
    fn start(
        from: OwnedFd,
        to: OwnedFd,
        over: OwnedFd,
        ring: &Arc<Mutex<Ring>>,
        notes: &mpsc::Sender<Note>,
    ) -> std::io::Result<()> {
        use rustix::fs::{FileType, OFlags};
        let flags = rustix::fs::fcntl_getfl(&from)?;
        rustix::fs::fcntl_setfl(&from, flags | OFlags::NONBLOCK)?;
        let kind = rustix::fs::fstat(&to).map(|st| FileType::from_raw_mode(st.st_mode));
        let whole_writes = matches!(kind, Ok(FileType::RegularFile | FileType::BlockDevice));
        let pipe_size = match kind {
            Ok(FileType::Fifo) => rustix::pipe::fcntl_getpipe_size(&to).ok(),
            _ => None,
        };
        let relay = Relay {
            from,
            to,
            over: Some(over),
            whole_writes,
            pipe_size,
            ring: ring.clone(),
            notes: notes.clone(),
            pending: Vec::new(),
            sent: 0,
            writable: true,
            eof: false,
            buf: vec![0u8; CHUNK],
        };
        onlyone::place::store::spawn_thread("onlyone-tail", move || relay.run()).map(|_| ())
    }

    /// The relay's loop: read when all is written out, write when the
    /// destination has room, until every writer is gone (or, once the run
    /// is over, [`DRAIN`] has passed) and all that was read is written out.
    fn run(mut self) {
        // Set when the run is over: writes that come after are relayed
        // until then.
        let mut until: Option<Instant> = None;
        loop {
            if self.sent == self.pending.len() || !self.writable {
                self.pending.clear();
                self.sent = 0;
            }
            let idle = self.pending.is_empty();
            if idle && (self.eof || until.is_some_and(|u| Instant::now() >= u)) {
                break;
            }
            let timeout = match until {
                Some(u) if idle => Some(u.saturating_duration_since(Instant::now())),
                _ => None,
            };
            let (ready, heard) = match self.wait(idle, timeout) {
                Ok(x) => x,
                Err(Errno::INTR) => continue,
                // No poll: nothing can be relayed safely any more.
                Err(_) => break,
            };
            if heard {
                self.over = None;
                until = Some(Instant::now() + DRAIN);
                self.read_what_is_left();
                let _ = self.notes.send(Note::Read);
            } else if ready && idle {
                self.read_once();
            } else if ready {
                self.write_once();
            }
        }
        if self.over.is_some() {
            let _ = self.notes.send(Note::Read);
        }
        let _ = self.notes.send(Note::Delivered);
    }

    /// Waits until `from` has input (`idle`) or `to` has room, or the run
    /// is over: whether the one is ready, and whether the run's end was
    /// heard.
    fn wait(&self, idle: bool, timeout: Option<Duration>) -> rustix::io::Result<(bool, bool)> {
        let (fd, flags) = if idle {
            (self.from.as_fd(), PollFlags::IN)
        } else {
            (self.to.as_fd(), PollFlags::OUT)
        };
        let mut fds = vec![PollFd::from_borrowed_fd(fd, flags)];
        if let Some(o) = &self.over {
            fds.push(PollFd::from_borrowed_fd(o.as_fd(), PollFlags::IN));
        }
        let timeout = timeout.map(|t| Timespec {
            tv_sec: t.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: t.subsec_nanos().into(),
        });
        poll(&mut fds, timeout.as_ref())?;
        let ready = !fds[0].revents().is_empty();
        let heard = fds.get(1).is_some_and(|f| !f.revents().is_empty());
        Ok((ready, heard))
    }

    /// Reads one chunk into `pending` (and the tail).
    fn read_once(&mut self) {
        match rustix::io::read(&self.from, &mut self.buf) {
            Ok(0) => self.eof = true,
            Ok(n) => self.keep(n),
            Err(Errno::INTR | Errno::AGAIN) => {}
            Err(_) => self.eof = true,
        }
    }

    /// Reads all that is in the pipe now (what the run left: its writers
    /// are gone) into `pending` and the tail, without waiting.
    fn read_what_is_left(&mut self) {
        let mut owed = rustix::io::ioctl_fionread(&self.from).map_or(0, |n| n as usize);
        while owed > 0 {
            let want = owed.min(CHUNK);
            match rustix::io::read(&self.from, &mut self.buf[..want]) {
                Ok(0) => {
                    self.eof = true;
                    return;
                }
                Ok(n) => {
                    self.keep(n);
                    owed -= n.min(owed);
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return,
                Err(_) => {
                    self.eof = true;
                    return;
                }
            }
        }
    }

    /// `n` bytes were read into `buf`: into the tail, and to be written
    /// out.
    fn keep(&mut self, n: usize) {
        let bytes = &self.buf[..n];
        if let Ok(mut r) = self.ring.lock() {
            r.push(bytes);
        }
        if self.writable {
            self.pending.extend_from_slice(bytes);
        }
    }

    /// What `to` takes now without blocking: for a pipe, its size less
    /// what it holds and two pages (its first and last buffers may be
    /// partly used: each takes a page of the size), else [`PIPE_BUF`].
    /// (Another writer of the same pipe can take that room first; the
    /// write then waits for the reader.)
    fn room(&self) -> usize {
        let held = self
            .pipe_size
            .and_then(|size| Some((size, rustix::io::ioctl_fionread(&self.to).ok()?)));
        match held {
            Some((size, used)) => size
                .saturating_sub(usize::try_from(used).unwrap_or(usize::MAX))
                .saturating_sub(2 * PIPE_BUF)
                .max(PIPE_BUF),
            None => PIPE_BUF,
        }
    }

    /// Writes out what `to` takes now; a destination that fails (its
    /// reader gone) is written no more.
    fn write_once(&mut self) {
        let rest = &self.pending[self.sent..];
        let n = if self.whole_writes {
            rest.len()
        } else {
            rest.len().min(self.room())
        };
        match rustix::io::write(&self.to, &rest[..n]) {
            Ok(k) => self.sent += k,
            Err(Errno::INTR | Errno::AGAIN) => {}
            Err(_) => self.writable = false,
        }
    }
}
