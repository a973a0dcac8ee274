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

use std::collections::VecDeque;
use std::io::{IsTerminal, Read, Write};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// How long the relay may take to drain the pipes once the run is over.
const DRAIN: Duration = Duration::from_millis(500);

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

/// stdout and stderr captured, until [`Capture::finish`].
pub(super) struct Capture {
    saved_out: OwnedFd,
    saved_err: OwnedFd,
    ring: Arc<Mutex<Ring>>,
    done: mpsc::Receiver<()>,
    relays: usize,
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
        let (tx, done) = mpsc::channel();
        let (out_r, out_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
        let err_pipe = if same {
            None
        } else {
            Some(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?)
        };
        let mut relays = 0;
        let to_out = saved_out.try_clone().ok()?;
        relay(out_r, to_out, &ring, &tx).ok()?;
        relays += 1;
        if let Some((err_r, _)) = &err_pipe {
            let to_err = saved_err.try_clone().ok()?;
            let r = err_r.try_clone().ok()?;
            if relay(r, to_err, &ring, &tx).is_err() {
                return None;
            }
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
            done,
            relays,
        })
    }

    /// Puts stdout and stderr back, waits a moment for the relays to drain
    /// what is left (every writer gone), and gives the tail.
    pub(super) fn finish(self) -> Tail {
        let _ = std::io::stderr().flush();
        let _ = std::io::stdout().flush();
        let _ = rustix::stdio::dup2_stdout(&self.saved_out);
        let _ = rustix::stdio::dup2_stderr(&self.saved_err);
        let until = std::time::Instant::now() + DRAIN;
        for _ in 0..self.relays {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if self.done.recv_timeout(left).is_err() {
                break;
            }
        }
        match self.ring.lock() {
            Ok(r) => Tail {
                bytes: r.bytes.iter().copied().collect(),
                cut: r.cut,
            },
            Err(_) => Tail {
                bytes: Vec::new(),
                cut: 0,
            },
        }
    }
}

/// Copies `from` to `to` until every writer is gone, keeping the tail in
/// `ring`; a destination that fails is left alone and the copy goes on (the
/// command is never blocked on a full pipe).
fn relay(
    from: OwnedFd,
    to: OwnedFd,
    ring: &Arc<Mutex<Ring>>,
    done: &mpsc::Sender<()>,
) -> std::io::Result<()> {
    let (ring, done) = (ring.clone(), done.clone());
    onlyone::store::spawn_thread("onlyone-tail", move || {
        let mut from = std::fs::File::from(from);
        let mut to = std::fs::File::from(to);
        let mut writable = true;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            if writable && to.write_all(&buf[..n]).is_err() {
                writable = false;
            }
            if let Ok(mut r) = ring.lock() {
                r.push(&buf[..n]);
            }
        }
        let _ = done.send(());
    })
    .map(|_| ())
}
