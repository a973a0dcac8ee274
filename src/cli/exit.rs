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
//! `precheck` exits only 0 or 75. The library returns kinds of outcome;
//! this file alone turns them into numbers.

use std::process::ExitCode;

use onlyone::supervise::{Exit, RunError};
use rustix::process::Signal;

/// Skipped: held by a live run.
pub const HELD: u8 = 75;
/// `run`: onlyone ended the command.
pub const ENDED: u8 = 124;
/// onlyone itself failed.
pub const FAILURE: u8 = 125;
/// `run`: the command could not be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// `run`: the command was not found.
pub const NOT_FOUND: u8 = 127;

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
                // Only signals that end a process without a core dump are
                // raised again; the rest become 128+N.
                if [Signal::INT, Signal::TERM, Signal::HUP, Signal::PIPE]
                    .iter()
                    .any(|s| s.as_raw() == n)
                {
                    onlyone::signal::die_by(n);
                }
                ExitCode::from((128 + n).clamp(0, 255) as u8)
            }
        }
    }
}

/// How `run` ends when its command could not run: 127 when it was not
/// found, 126 when it could not be executed, 125 when onlyone failed.
pub fn run_error(e: &RunError) -> Code {
    Code::Exit(match e {
        RunError::NotFound { .. } => NOT_FOUND,
        RunError::NotExecutable { .. } => NOT_EXECUTABLE,
        _ => FAILURE,
    })
}

/// How `run` ends when its command ended.
pub fn command_exit(exit: Exit) -> Code {
    match exit {
        Exit::Code(c) => Code::Exit(c.clamp(0, 255) as u8),
        Exit::Signal(s) => Code::Signal(s),
    }
}
