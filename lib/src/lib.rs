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

mod error;
pub mod hint;
pub mod journal;
mod lock;
pub mod names;
pub mod place;
pub mod reap;
pub mod record;
pub mod schedule;
pub mod state;
pub mod supervise;
mod sys;
pub use lock::verdict;
mod walk;

// The onlyone command's toolbox: what the command needs beyond the
// library's API (text for a terminal, signals by name, an atomic file
// writer, durations as people type them, a census of the host's
// processes). Public only with the `command` feature, which the command
// turns on; not part of the API, and no promise is made of it.
/// Modules public only with the `command` feature (hidden from the
/// docs), the crate's own otherwise.
macro_rules! for_the_command {
    ($($m:ident),*) => {$(
        #[cfg(feature = "command")]
        #[doc(hidden)]
        pub mod $m;
        #[cfg(not(feature = "command"))]
        #[allow(dead_code)]
        mod $m;
    )*};
}
for_the_command!(atomic, duration, signal, text);
#[cfg(feature = "command")]
#[doc(hidden)]
pub mod command {
    //! The onlyone command's toolbox (see the `command` feature).
    pub use crate::lock::members::with_census;
    pub use crate::lock::{HEAD_GRACE, MAX_TAKEOVER_TRIES, SLOT_INFIX, new_token, slot_of_path};
    pub use crate::procfs::host_name;
    pub use crate::text::{compact_duration, display_command, format_unix_time, user_name};
}

// Internals: `/proc` parsing, idleness, the judge, pause points. Public
// only to the project's own tests, fuzzers and harnesses, which turn the
// `test-hooks` feature on.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod internals {
    //! The judge's entry points, for the fuzzers.
    pub use crate::lock::judge::{Evidence, judge, judge_record};
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
    AcquireOptions, Active, BusyPolicy, Inspection, LockFile, LockGuard, Owner, Released, Releaser,
    TakeOver, Waiting, active_pid,
};
pub use procfs::{Group, Image, ProcId};
pub use record::{Mode, NotARecord, Record};
pub use verdict::{Holder, StaleReason, UnknownReason, Verdict};
