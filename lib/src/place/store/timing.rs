//! A held lease and its renewals: the holder ends its command before the
//! server could give the lock away.
//!
//! **The inequality.** Let `t_send` be the time, on the boot clock
//! (`CLOCK_BOOTTIME`, which counts a pause and a suspend too), when the
//! last renewal that succeeded was *sent*. The server set that lease's end
//! at its own `now + L`, later than `t_send` in any real order of events,
//! so it cannot hand the lock over before `t_send + L` (give or take the
//! clocks' rate drift). The holder sends TERM at `t_send + L - G - M` and
//! KILL at `t_send + L - M`, with G the grace (`--kill-after`) and M the
//! margin for drift and for how late a kill lands. It renews every R, each
//! call given up after T, and a failed call is tried again after R/4.
//! Overlap is excluded by the deadline and the margin alone, whatever R, T
//! and G. `R + T + G + M < L` is what keeps a healthy holder running: a
//! renewal sent on time and answered within T moves the deadline before
//! TERM is due (the model's `the_inequality_keeps_a_healthy_holder_running`;
//! breaking it gives a counterexample). From L: `R = L/6`, `T = L/10`,
//! `M = max(L/15, 100 ms)`, so G may be up to about 2/3 of L (defaults:
//! L = 30 s, R = 5 s, T = 3 s, M = 2 s, G = 5 s; these also leave room for
//! one failed call and its retry: `1.25 R + 2 T + G + M` = 19.25 s < 30 s).
//!
//! PROTOCOL.md invariants 6 to 9: the deadline counts from the send
//! (`LeaseWatch::deadline`), a clean end stops the command before the
//! release (the caller releases after the supervision returns), the
//! margin M covers a late kill, and the watchdog keeps the deadline when
//! the wrapper cannot (`store::watchdog`, a `Listener`).
//!
//! This module is the store-independent half: the timing and what the
//! supervision watches. A store renews through a `Renewals` handle.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

/// The lease's timing (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// L: the lease.
    pub lease: Duration,
    /// R: how often it is renewed.
    pub renew_every: Duration,
    /// T: how long one call may take.
    pub call_timeout: Duration,
    /// M: the margin for clock-rate drift and a late kill.
    pub margin: Duration,
    /// G: the grace between TERM and KILL.
    pub grace: Duration,
}

/// Why a lease and a grace make no timing (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseTimingError {
    /// The lease leaves no room: under 500 ms, or its renewals, a call's
    /// timeout and the margin fill it.
    #[error("the lease {} is too short: it must be at least 500ms", duration(.lease))]
    TooShort {
        /// L.
        lease: Duration,
    },
    /// The grace does not fit: `R + T + G + M < L` does not hold.
    #[error(
        "the grace {} does not fit in the lease {}: a holder must end its command before the \
         lease can run out (renew {} + call timeout {} + grace + margin {} < lease); the largest \
         grace that fits is {}, or lengthen the lease",
        duration(.grace),
        duration(.lease),
        duration(.renew),
        duration(.call),
        duration(.margin),
        duration(.largest)
    )]
    GraceTooLong {
        /// G.
        grace: Duration,
        /// L.
        lease: Duration,
        /// R.
        renew: Duration,
        /// T.
        call: Duration,
        /// M.
        margin: Duration,
        /// The largest grace that fits this lease.
        largest: Duration,
    },
}

fn duration(d: &Duration) -> String {
    crate::text::compact_duration(*d)
}

/// The default lease.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

impl LeaseTiming {
    /// R, T and M from L; refused when `R + T + G + M < L` does not hold,
    /// with the largest grace that would.
    pub fn new(lease: Duration, grace: Duration) -> Result<LeaseTiming, LeaseTimingError> {
        let t = LeaseTiming {
            lease,
            renew_every: lease / 6,
            call_timeout: lease / 10,
            margin: (lease / 15).max(Duration::from_millis(100)),
            grace,
        };
        let used = t.renew_every + t.call_timeout + t.margin;
        if lease < Duration::from_millis(500) || used >= lease {
            return Err(LeaseTimingError::TooShort { lease });
        }
        let room = lease - used;
        if grace >= room {
            return Err(LeaseTimingError::GraceTooLong {
                grace,
                lease,
                renew: t.renew_every,
                call: t.call_timeout,
                margin: t.margin,
                largest: room.saturating_sub(Duration::from_millis(1)),
            });
        }
        Ok(t)
    }

    /// The boot-clock time (ns) by which the command must be gone when the
    /// last good request was sent at `sent`: `sent + L - M`.
    pub fn kill_by(&self, sent: i64) -> i64 {
        sent + self.lease.as_nanos() as i64 - self.margin.as_nanos() as i64
    }

    /// The boot-clock time (ns) TERM must be sent by: `kill_by - G`.
    pub fn term_by(&self, sent: i64) -> i64 {
        self.kill_by(sent) - self.grace.as_nanos() as i64
    }
}

pub(crate) use crate::sys::boot_ns;

/// What the renewals have found so far, shared with the supervision.
#[derive(Debug)]
struct Shared {
    /// The boot-clock time the last successful renewal (or the take) was
    /// sent.
    sent_ok: AtomicI64,
    lost: AtomicBool,
    stop: AtomicBool,
    done: AtomicBool,
    /// Told of every renewal (the run's watchdog).
    listener: std::sync::OnceLock<Arc<dyn Listener>>,
}

/// What hears of every good renewal: the run's watchdog, which keeps the
/// deadline when the wrapper cannot.
pub(crate) trait Listener: Send + Sync + std::fmt::Debug {
    /// A renewal sent at `sent` (boot clock) succeeded.
    fn renewed(&self, sent: i64);
}

/// A lease held by this process, renewed by a thread of its own.
#[derive(Debug)]
pub(crate) struct LeaseWatch {
    shared: Arc<Shared>,
    timing: LeaseTiming,
    /// Readable when the renewals found something (lost, a stop request).
    wake_rx: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a renewing thread reports through.
#[derive(Debug)]
pub(crate) struct Renewals {
    shared: Arc<Shared>,
    wake_tx: OwnedFd,
    timing: LeaseTiming,
}

impl Renewals {
    /// A renewal sent at `sent` (boot clock) succeeded.
    pub fn renewed(&self, sent: i64) {
        self.shared.sent_ok.fetch_max(sent, Ordering::AcqRel);
        if let Some(l) = self.shared.listener.get() {
            l.renewed(sent);
        }
        // Past the kill deadline nothing a renewal says can help: let the
        // supervision look.
        if boot_ns()
            >= self.shared.sent_ok.load(Ordering::Acquire) + self.timing.lease.as_nanos() as i64
        {
            self.wake();
        }
    }

    /// The lease is gone.
    pub fn lost(&self) {
        self.shared.lost.store(true, Ordering::Release);
        self.wake();
    }

    /// A remote stop was asked for.
    pub fn stop_requested(&self) {
        if !self.shared.stop.swap(true, Ordering::AcqRel) {
            self.wake();
        }
    }

    /// True once the holder stopped renewing.
    pub fn done(&self) -> bool {
        self.shared.done.load(Ordering::Acquire)
    }

    /// The timing.
    pub fn timing(&self) -> LeaseTiming {
        self.timing
    }

    fn wake(&self) {
        let _ = rustix::io::write(&self.wake_tx, b"!");
    }
}

impl LeaseWatch {
    /// A lease taken by a request sent at `sent` (boot clock), renewed by
    /// the thread `start` starts with the [`Renewals`] it is given.
    pub fn start(
        timing: LeaseTiming,
        sent: i64,
        start: impl FnOnce(Renewals) -> std::io::Result<std::thread::JoinHandle<()>>,
    ) -> std::io::Result<LeaseWatch> {
        let shared = Arc::new(Shared {
            sent_ok: AtomicI64::new(sent),
            lost: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            done: AtomicBool::new(false),
            listener: std::sync::OnceLock::new(),
        });
        let (wake_rx, wake_tx) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )?;
        let thread = start(Renewals {
            shared: shared.clone(),
            wake_tx,
            timing,
        })?;
        Ok(LeaseWatch {
            shared,
            timing,
            wake_rx,
            thread: Some(thread),
        })
    }

    /// The boot-clock time by which the command must be gone: `t_send + L
    /// - M`.
    pub fn kill_by(&self) -> i64 {
        self.timing.kill_by(self.sent())
    }

    /// `t_send + L`: the earliest the server could hand the lock over.
    pub fn deadline(&self) -> i64 {
        self.shared.sent_ok.load(Ordering::Acquire) + self.timing.lease.as_nanos() as i64
    }

    /// The boot-clock time TERM must be sent by: `kill_by - G`.
    pub fn term_by(&self) -> i64 {
        self.timing.term_by(self.sent())
    }

    /// A renewal found the lease gone.
    pub fn lost(&self) -> bool {
        self.shared.lost.load(Ordering::Acquire)
    }

    /// A remote `stop` asked the run to end.
    pub fn stop_requested(&self) -> bool {
        self.shared.stop.load(Ordering::Acquire)
    }

    /// When the last good renewal (or the take) was sent (boot clock).
    pub fn sent(&self) -> i64 {
        self.shared.sent_ok.load(Ordering::Acquire)
    }

    /// Attaches what hears of every renewal from now on (the run's
    /// watchdog); it hears the take's send time now.
    pub fn attach(&self, listener: Arc<dyn Listener>) {
        listener.renewed(self.shared.sent_ok.load(Ordering::Acquire));
        let _ = self.shared.listener.set(listener);
    }

    /// Readable when the renewal thread has news.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake_rx.as_fd()
    }

    /// Empties the wake-up pipe.
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!(rustix::io::read(&self.wake_rx, &mut buf), Ok(n) if n > 0) {}
    }

    /// Stops the renewals (waiting for one under way).
    pub fn stop_thread(&mut self) {
        self.shared.done.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for LeaseWatch {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

impl crate::supervise::Limit for LeaseWatch {
    fn drain(&self) {
        LeaseWatch::drain(self);
    }

    fn lost(&self) -> bool {
        LeaseWatch::lost(self)
    }

    fn kill_by(&self) -> i64 {
        LeaseWatch::kill_by(self)
    }

    fn term_by(&self) -> i64 {
        LeaseWatch::term_by(self)
    }

    fn stop_requested(&self) -> bool {
        LeaseWatch::stop_requested(self)
    }

    fn wake_fd(&self) -> BorrowedFd<'_> {
        LeaseWatch::wake_fd(self)
    }
}
