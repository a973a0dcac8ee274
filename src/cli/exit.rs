//! Every exit code of onlyone, in one place: [`TABLE`] is the table, and
//! the constants below are the codes the command uses. The table is
//! rendered from here into `onlyone --help` ([`help_text`]), the EXIT
//! STATUS section of onlyone(1) ([`roff`]) and the README (which a test
//! holds equal to the help). The library returns kinds of outcome; this
//! file alone turns them into numbers.

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
                  name, a usage error, a refused `release`, an unreachable store",
    },
    Row {
        code: "126 / 127",
        meaning: "`run`: the command could not be executed / was not found",
    },
    Row {
        code: "128+N",
        meaning: "`run`: the command was killed by signal N. For SIGINT, SIGTERM, SIGHUP and \
                  SIGPIPE onlyone ends itself with the same signal (as GNU `timeout` does), so \
                  a calling shell loop stops on Ctrl-C; a shell sees 128+N either way",
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
