//! Every exit code of onlyone, in one place.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (`run`: the command exited 0) |
//! | 75 | skipped: held by a live run (`--held-exit N` changes it) |
//! | 124 | `run`: onlyone ended the command (`--max-time`) |
//! | 125 | onlyone itself failed (I/O, unknown record, bad DIR, usage) |
//! | 126 / 127 | the command could not be executed / was not found |
//! | 128+N | the command was killed by signal N |
//! | other | `run`: the command's own exit code |
//!
//! `precheck` exits only 0 or 75.

use std::process::ExitCode;

/// Skipped: held by a live run.
pub const HELD: u8 = 75;
/// `run`: onlyone ended the command.
pub const ENDED: u8 = 124;
/// onlyone itself failed.
pub const FAILURE: u8 = 125;

/// How onlyone ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Exit with this code.
    Exit(u8),
    /// The command died of this signal: end the same way, so that a calling
    /// shell loop stops on Ctrl-C (a shell sees 128+N either way).
    Signal(i32),
}

impl Code {
    /// Exits the process as described.
    pub fn finish(self) -> ExitCode {
        match self {
            Code::Exit(c) => ExitCode::from(c),
            Code::Signal(n) => {
                use nix::sys::signal::{SigHandler, SigSet, Signal, signal};
                // Only signals that end a process without a core dump are
                // raised again; the rest become 128+N.
                if let Ok(sig) = Signal::try_from(n)
                    && matches!(
                        sig,
                        Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP | Signal::SIGPIPE
                    )
                {
                    // SAFETY: restoring the default disposition installs no
                    // handler; nothing else in onlyone runs any longer.
                    let _ = unsafe { signal(sig, SigHandler::SigDfl) };
                    let mut set = SigSet::empty();
                    set.add(sig);
                    let _ = set.thread_unblock();
                    let _ = nix::sys::signal::raise(sig);
                }
                ExitCode::from((128 + n).clamp(0, 255) as u8)
            }
        }
    }
}
