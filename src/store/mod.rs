//! Where locks live. The lock directory ([`crate::LockFile`]) keeps a run's
//! lock on this host; the PostgreSQL store ([`pg`]) keeps it in a database
//! that several hosts share, as a lease.
//!
//! A run sees either through [`crate::supervise::Hold`]: what the command
//! is told, how the lock names it, and what keeps the lock (a file whose
//! owner lives; a lease renewed in time).

pub mod lease;
#[cfg(feature = "postgres")]
pub mod pg;
pub mod watchdog;
