//! Every exit code of onlyone, in one place: [`TABLE`] is the table, and
//! the constants below are the codes the command uses. The table is
//! rendered from here into `onlyone --help` ([`help_text`]), the EXIT
//! STATUS section of onlyone(1) ([`roff`]) and the README (which a test
//! holds equal to the help). The library returns kinds of outcome, and
//! each command returns how it ended ([`Ending`]); [`code`], which `main`
//! calls once, alone turns them into numbers.

use onlyone::supervise::{Exit, RunError};
use rustix::process::Signal;

/// One row of the exit-code table.
pub struct Row {
    /// The code, or codes (`126 / 127`, `128+N`, `other`).
    pub code: &'static str,
    /// What it means, in Markdown: plain words and `code spans`.
    pub meaning: &'static str,
}

/// The exit codes of onlyone, as every document shows them.
pub const TABLE: &[Row] = &[
    Row {
        code: "0",
        meaning: "success (`run`: the command exited 0)",
    },
    Row {
        code: "75",
        meaning: "skipped: held by a live run (`--held-exit N` changes it, like `flock -E`). \
                  Nothing else in onlyone exits 75.",
    },
    Row {
        code: "124",
        meaning: "`run`: onlyone ended the command (`--max-time` or `--idle-timeout`; with a \
                  store, a lease it could not renew in time)",
    },
    Row {
        code: "125",
        meaning: "onlyone itself failed: an I/O error, a lock it cannot judge, a bad DIR or \
                  name, a usage error, a refused `release`, a `stop --pid` that names no run, \
                  an unreachable store",
    },
    Row {
        code: "126 / 127",
        meaning: "`run`: the command could not be executed / was not found",
    },
    Row {
        code: "128+N",
        meaning: "`run`: the command was killed by signal N. For SIGINT, SIGTERM, SIGHUP and \
                  SIGPIPE onlyone ends itself with the same signal (as GNU `timeout` does), so \
                  a calling shell loop stops on Ctrl-C; a shell sees 128+N either way. A \
                  `--jitter` or `--spread` wait that SIGINT, SIGTERM or SIGHUP ends ends so too, \
                  the command not started",
    },
    Row {
        code: "other",
        meaning: "`run`: the command's own exit code",
    },
];

/// What follows the table: the commands whose codes are their own.
pub const EXCEPTIONS: &str = "`precheck` exits only 0 or 75, whatever happens, and `reap` \
                              always 0. `check` alone uses the monitoring-plugin convention: 0 \
                              OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (a usage error included).";

/// The table as `onlyone --help` shows it: a row per code, its meaning
/// wrapped under itself at 80 columns.
pub fn help_text() -> String {
    const WIDTH: usize = 80;
    let code_w = TABLE.iter().map(|r| r.code.len()).max().unwrap_or(0);
    let indent = 2 + code_w + 2;
    let mut out = String::from("Exit status:\n");
    for row in TABLE {
        let lines = wrap(row.meaning, WIDTH - indent);
        for (i, line) in lines.iter().enumerate() {
            let code = if i == 0 { row.code } else { "" };
            out.push_str(&format!("  {code:<code_w$}  {line}\n"));
        }
    }
    out.push('\n');
    out.push_str(&wrap(EXCEPTIONS, WIDTH).join("\n"));
    out
}

/// The EXIT STATUS section of onlyone(1), in roff: `code spans` in bold.
pub fn roff() -> String {
    let mut out = String::from(".SH \"EXIT STATUS\"\n");
    for row in TABLE {
        out.push_str(&format!(".TP\n\\fB{}\\fR\n", roff_text(row.code)));
        out.push_str(&roff_text(row.meaning));
        out.push('\n');
    }
    out.push_str(".PP\n");
    out.push_str(&roff_text(EXCEPTIONS));
    out.push('\n');
    out
}

/// Markdown text as roff: escapes, and `code` in bold.
fn roff_text(s: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    for c in s.chars() {
        match c {
            '`' => {
                out.push_str(if code { "\\fR" } else { "\\fB" });
                code = !code;
            }
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            c => out.push(c),
        }
    }
    if out.starts_with(['.', '\'']) {
        out.insert_str(0, "\\&");
    }
    out
}

/// Words into lines of at most `width` columns (a longer word alone).
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// `--held-exit`'s default: the code of a skip (held by a live run).
pub const HELD: u8 = 75;

/// How onlyone ends, as a kind: what every command returns. [`code`] is
/// the one place the kinds become the numbers of [`TABLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Success (`run`: the command exited 0).
    Done,
    /// Skipped: held by a live run; `held_exit` is `--held-exit` ([`HELD`]
    /// unless told otherwise).
    Skipped {
        /// The code a skip exits with.
        held_exit: u8,
    },
    /// `run`: onlyone ended the command (`--max-time`, `--idle-timeout`, a
    /// lease it could not renew in time).
    EndedByOnlyone,
    /// onlyone itself failed.
    Failed,
    /// `run`: the command could not be executed.
    NotExecutable,
    /// `run`: the command was not found.
    NotFound,
    /// `run`: the command ended so.
    Command(Exit),
    /// `precheck` and `reap`: something failed, and the fire goes on.
    FailedOpen,
    /// `check`: the monitoring plugin's state.
    Check(CheckState),
    /// `run`: a signal (TERM, INT, HUP) ended onlyone before the command
    /// started (a `--jitter` or `--spread` wait, the wait for the lock): it
    /// ends by that signal, as the command would have.
    Interrupted(Signal),
}

/// The exit status `ending` is: the one place an ending becomes a number,
/// which `main` asks once, of the ending the command returned.
pub fn code(ending: Ending) -> Code {
    Code::Exit(match ending {
        Ending::Done | Ending::FailedOpen => 0,
        Ending::Skipped { held_exit } => held_exit,
        Ending::EndedByOnlyone => 124,
        Ending::Failed => 125,
        Ending::NotExecutable => 126,
        Ending::NotFound => 127,
        Ending::Command(Exit::Code(c)) => c.clamp(0, 255) as u8,
        Ending::Command(Exit::Signal(s)) => return Code::Signal(s),
        Ending::Interrupted(s) => return Code::Signal(s.as_raw()),
        Ending::Check(state) => match state {
            CheckState::Ok => 0,
            CheckState::Warning => 1,
            CheckState::Critical => 2,
            CheckState::Unknown => 3,
        },
    })
}

impl Ending {
    /// The number this ending exits with, as `acquire --export`'s `exit
    /// N` line says it (a signal as 128+N): [`code`]'s.
    pub fn number(self) -> u8 {
        match code(self) {
            Code::Exit(n) => n,
            Code::Signal(n) => (128 + n).clamp(0, 255) as u8,
        }
    }
}

/// How a command fails before it does its work (a usage error, an
/// untrusted lock directory, a refused option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// 125 ([`Ending::Failed`]).
    Fail,
    /// 0, said with `note` after the error: `precheck` and `reap` never
    /// block a fire ([`Ending::FailedOpen`]).
    Open {
        /// What follows the error in its message.
        note: &'static str,
    },
    /// `check`: UNKNOWN, on stdout as the plugin's status line.
    Unknown,
    /// `acquire --export`: 125, and `exit 125` on stdout for its `eval`.
    ExportLine,
}

/// A monitoring plugin's state (`check`), from the best to the worst: an
/// aggregate is the worst of its parts, and UNKNOWN is worse than WARNING
/// but not than CRITICAL (the plugin guidelines' order: CRITICAL, UNKNOWN,
/// WARNING, OK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CheckState {
    /// OK (0).
    Ok,
    /// WARNING (1).
    Warning,
    /// UNKNOWN (3).
    Unknown,
    /// CRITICAL (2).
    Critical,
}

impl CheckState {
    /// The worst of two states.
    pub fn worst(self, other: CheckState) -> CheckState {
        self.max(other)
    }

    /// The state's word, as the status line says it.
    pub fn word(self) -> &'static str {
        match self {
            CheckState::Ok => "OK",
            CheckState::Warning => "WARNING",
            CheckState::Critical => "CRITICAL",
            CheckState::Unknown => "UNKNOWN",
        }
    }
}

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
    /// The process's exit status, as described; first, for a signal that
    /// ends a process without a core dump, dies of it.
    pub fn finish(self) -> u8 {
        match self {
            Code::Exit(c) => c,
            Code::Signal(n) => {
                // Only signals that end a process without a core dump are
                // raised again; the rest become 128+N.
                if [Signal::INT, Signal::TERM, Signal::HUP, Signal::PIPE]
                    .iter()
                    .any(|s| s.as_raw() == n)
                {
                    onlyone::signal::die_by(n);
                }
                (128 + n).clamp(0, 255) as u8
            }
        }
    }
}

/// How `run` ends when its command could not run: not found (127), not
/// executable (126), or onlyone failed (125).
pub fn run_error(e: &RunError) -> Ending {
    match e {
        RunError::NotFound { .. } => Ending::NotFound,
        RunError::NotExecutable { .. } => Ending::NotExecutable,
        _ => Ending::Failed,
    }
}

/// How `run` ends when its command could not start, as a shell says it
/// (`code`: 126 or 127).
pub fn start_failure(code: i32) -> Ending {
    match code {
        127 => Ending::NotFound,
        126 => Ending::NotExecutable,
        _ => Ending::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind's number is the table's.
    #[test]
    fn the_kinds_are_the_tables_codes() {
        let listed = |code: u8| {
            TABLE
                .iter()
                .any(|r| r.code.split(" / ").any(|c| c == code.to_string()))
        };
        for e in [
            Ending::Done,
            Ending::Skipped { held_exit: HELD },
            Ending::EndedByOnlyone,
            Ending::Failed,
            Ending::NotExecutable,
            Ending::NotFound,
        ] {
            let Code::Exit(n) = code(e) else {
                panic!("{e:?}")
            };
            assert!(listed(n), "{e:?}: {n}");
        }
        assert_eq!(code(Ending::Command(Exit::Signal(9))), Code::Signal(9));
        assert_eq!(code(Ending::Interrupted(Signal::TERM)), Code::Signal(15));
        assert_eq!(code(Ending::Command(Exit::Code(300))), Code::Exit(255));
        let check: Vec<Code> = [
            CheckState::Ok,
            CheckState::Warning,
            CheckState::Critical,
            CheckState::Unknown,
        ]
        .map(|s| code(Ending::Check(s)))
        .into();
        assert_eq!(check, (0..=3).map(Code::Exit).collect::<Vec<_>>());
        assert!(EXCEPTIONS.contains("0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN"));
        // The aggregate's order: CRITICAL, UNKNOWN, WARNING, OK.
        use CheckState::*;
        assert_eq!(Unknown.worst(Warning), Unknown);
        assert_eq!(Unknown.worst(Critical), Critical);
        assert_eq!(Ok.worst(Warning), Warning);
    }
}
