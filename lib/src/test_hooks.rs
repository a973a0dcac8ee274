//! Pause points inside the protocol, for tests that must force an
//! interleaving (a record swapped between a verdict and a reclaim, an owner
//! that dies while a release holds the removal guard), and values a test
//! must inject that no real machine of CI can provide (a network
//! filesystem's type). Not part of the API: they exist only with the
//! `test-hooks` cargo feature, which only the project's own tests turn on.
//!
//! Without the feature a pause point compiles to nothing.

use std::path::Path;

/// Where a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// In acquire, before each attempt to link the record into place.
    BeforeLink,
    /// In acquire, after the link failed and before the record is read.
    BeforeLook,
    /// In acquire, after a stale verdict and before the removal guard.
    BeforeReclaim,
    /// In a reclaim, holding the removal guard, before the re-read.
    ReclaimUnderGuard,
    /// In a release (by token, by owner or by force), holding the removal
    /// guard, before the re-read.
    ReleaseUnderGuard,
    /// In a replacement of a record (a run naming its command), holding
    /// the removal guard, before the re-read.
    ReplaceUnderGuard,
}

#[cfg(feature = "test-hooks")]
mod armed {
    use super::{Path, Point};
    use std::sync::RwLock;
    use std::sync::atomic::{AtomicBool, Ordering};

    type Hook = Box<dyn Fn(Point, &Path) + Send + Sync>;

    static ARMED: AtomicBool = AtomicBool::new(false);
    /// The hook, and the one lock path it is for.
    static HOOK: RwLock<Option<(std::path::PathBuf, Hook)>> = RwLock::new(None);

    /// Installs `hook` for the lock at `lock` (it runs at the points of
    /// that lock only, so that the tests of other locks in the same
    /// process go on undisturbed), replacing any other.
    pub fn set(lock: &Path, hook: impl Fn(Point, &Path) + Send + Sync + 'static) {
        *HOOK.write().unwrap_or_else(|p| p.into_inner()) = Some((lock.to_owned(), Box::new(hook)));
        ARMED.store(true, Ordering::SeqCst);
    }

    /// Removes the hook.
    pub fn clear() {
        ARMED.store(false, Ordering::SeqCst);
        *HOOK.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    pub(crate) fn fire(point: Point, path: &Path) {
        if ARMED.load(Ordering::Relaxed)
            && let Some((lock, hook)) = HOOK.read().unwrap_or_else(|p| p.into_inner()).as_ref()
            && lock == path
        {
            hook(point, path);
        }
    }
}

#[cfg(feature = "test-hooks")]
pub use armed::{clear, set};

#[cfg(feature = "test-hooks")]
pub(crate) use armed::fire;

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn fire(_: Point, _: &Path) {}

/// The filesystem type (`statfs` `f_type`) a test says the lock directory
/// has: `ONLYONE_TEST_FSTYPE` in hex (`6969` is NFS). No network
/// filesystem can be mounted in CI.
#[cfg(feature = "test-hooks")]
pub(crate) fn fs_type() -> Option<i64> {
    let v = std::env::var("ONLYONE_TEST_FSTYPE").ok()?;
    i64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn fs_type() -> Option<i64> {
    None
}

/// How often holders refresh their lock files' times, when a test says
/// (`ONLYONE_TEST_REFRESH_MS`): the day of real life is too long for one.
#[cfg(feature = "test-hooks")]
pub(crate) fn refresh_interval() -> Option<std::time::Duration> {
    let ms = std::env::var("ONLYONE_TEST_REFRESH_MS")
        .ok()?
        .parse()
        .ok()?;
    Some(std::time::Duration::from_millis(ms))
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn refresh_interval() -> Option<std::time::Duration> {
    None
}
