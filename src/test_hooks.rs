//! Pause points inside the protocol, for tests that must force an
//! interleaving (a record swapped between a verdict and a reclaim, an owner
//! that dies while a release holds the removal guard). Not part of the API.
//!
//! With no hook installed a pause point costs one relaxed atomic load.

use std::path::Path;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// In a release, holding the removal guard, before the re-read.
    ReleaseUnderGuard,
}

type Hook = Box<dyn Fn(Point, &Path) + Send + Sync>;

static ARMED: AtomicBool = AtomicBool::new(false);
static HOOK: RwLock<Option<Hook>> = RwLock::new(None);

/// Installs `hook`, replacing any other.
pub fn set(hook: impl Fn(Point, &Path) + Send + Sync + 'static) {
    *HOOK.write().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(hook));
    ARMED.store(true, Ordering::SeqCst);
}

/// Removes the hook.
pub fn clear() {
    ARMED.store(false, Ordering::SeqCst);
    *HOOK.write().unwrap_or_else(|p| p.into_inner()) = None;
}

pub(crate) fn fire(point: Point, path: &Path) {
    if ARMED.load(Ordering::Relaxed)
        && let Some(hook) = HOOK.read().unwrap_or_else(|p| p.into_inner()).as_ref()
    {
        hook(point, path);
    }
}
