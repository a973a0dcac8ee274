//! onlyone: run a scheduled job, or the long-running mode of a program, as
//! one instance at a time, with a lock that says who holds it and is never
//! stuck on a run that is over.
//!
//! The lock is a file whose content is the owner record ([`Record`]): the
//! owner's pid on line 1, then its start time, the boot id, a token, the
//! command and more. The protocol ([`LockFile`]) makes the record appear
//! atomically, takes a stale lock over only on proof that its owner is gone
//! ([`Verdict`]), and serialises every removal under a kernel lock that dies
//! with its holder.
//!
//! ```
//! use onlyone::{Error, LockFile};
//!
//! let dir = tempfile::tempdir()?;
//! let lock = LockFile::open(dir.path().join("sync.lock"))?;
//! match lock.try_acquire() {
//!     Ok(guard) => {
//!         // ... the work; the lock is released when `guard` drops ...
//!         guard.release()?;
//!     }
//!     Err(Error::Held(held)) => eprintln!("{held}"), // names the pid and a hint
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Linux only: liveness is read from `/proc`. Single host: a lock on NFS is
//! not supported.

#[cfg(not(target_os = "linux"))]
compile_error!("onlyone reads process liveness from /proc and supports Linux only");

pub mod atomic;
mod error;
pub mod hint;
pub mod journal;
mod judge;
mod lock;
mod members;
pub mod names;
pub mod observer;
pub mod place;
pub mod reap;
pub mod record;
pub mod schedule;
pub mod signal;
pub mod state;
pub mod stop;
pub mod store;
pub mod supervise;
mod sys;
pub mod text;
pub mod verdict;
mod walk;
mod work;

// Internals: `/proc` parsing, idleness, the judge, pause points. Public
// only to the project's own tests, fuzzers and harnesses, which turn the
// `test-hooks` feature on.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod idle;
#[cfg(not(feature = "test-hooks"))]
mod idle;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod internals {
    //! The judge's entry points, for the fuzzers.
    pub use crate::judge::{Evidence, judge, judge_record};
}
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod procfs;
#[cfg(not(feature = "test-hooks"))]
mod procfs;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks;
#[cfg(not(feature = "test-hooks"))]
mod test_hooks;

pub use error::{Error, HeldBy, Result};
pub use lock::{
    AcquireOptions, Active, BusyPolicy, HEAD_GRACE, Inspection, LockFile, LockGuard,
    MAX_TAKEOVER_TRIES, Owner, Released, Releaser, SLOT_INFIX, TakeOver, Waiting, active_pid,
    new_token, slot_of_path,
};
pub use members::SLOT_VAR;
pub use members::{FENCE_VAR, LOCK_VAR, RUN_ID_VAR, TOKEN_VAR, with_census};
pub use procfs::{Group, Image, ProcId, host_name};
pub use record::{Mode, NotARecord, Record};
pub use text::{compact_duration, display_command, format_unix_time, user_name};
pub use verdict::{Holder, StaleReason, UnknownReason, Verdict};
