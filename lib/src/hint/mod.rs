//! The parts of the library's messages that tell the user how to give a
//! setting. The library says each as a [`Hint`], a kind, in plain words
//! that name no program's options; the program that uses it may word them
//! with its own options once, for every message, with [`set_wording`].

use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

/// A part of a message that tells the user how to give a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint<'a> {
    /// Where a lock directory given explicitly came from, in the
    /// parentheses after it.
    LockDirGiven,
    /// Where a state directory given explicitly came from, in the
    /// parentheses after it.
    StateDirGiven,
    /// How to give another state directory (`DIR` standing for it), in
    /// the parentheses before the environment variable that also does.
    OtherStateDir,
    /// How to let the lock be written on a filesystem that other hosts
    /// may share, before the environment variable that also does.
    AllowSharedFs,
    /// How to remove a lock whoever it names, before "to remove it
    /// anyway".
    Force,
    /// What removes the lock at this path whoever holds it, as one of
    /// the user's own accounts may do it, or as root.
    ForcedRelease {
        /// The lock file.
        path: &'a Path,
        /// Whether root must do it.
        as_root: bool,
    },
}

/// How a program words the hints: every hint, as its messages say it.
pub type Wording = fn(&Hint<'_>) -> String;

static WORDING: OnceLock<Wording> = OnceLock::new();

/// Has every message from now on say its hints as `wording` does. Only the
/// first call counts: false when a wording was set already.
pub fn set_wording(wording: Wording) -> bool {
    WORDING.set(wording).is_ok()
}

impl Hint<'_> {
    /// The hint in the library's own words, which name no options.
    pub fn plain(&self) -> String {
        match *self {
            Hint::LockDirGiven | Hint::StateDirGiven => "as given".to_owned(),
            Hint::OtherStateDir => "another one given explicitly".to_owned(),
            Hint::AllowSharedFs => "allow shared filesystems".to_owned(),
            Hint::Force => "release it by force".to_owned(),
            Hint::ForcedRelease { path, as_root } => format!(
                "a forced release of `{}`{}",
                path.display(),
                if as_root { " as root" } else { "" }
            ),
        }
    }
}

impl fmt::Display for Hint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match WORDING.get() {
            Some(wording) => f.write_str(&wording(self)),
            None => f.write_str(&self.plain()),
        }
    }
}

#[cfg(test)]
mod tests;
