//! A job run one at a time with its journal, by the library alone: the
//! lock `DIR/NAME.lock`, the command supervised under it, and every moment
//! of the run (start, end, skip, takeover) written to the lock's journal
//! and said on stderr, through the library's run observer.
//!
//! ```text
//! cargo run -p onlyone --example journaled -- /tmp/jobs sync -- ./sync.sh --all
//! cargo run -p onlyone --example journaled -- --replace /tmp/jobs sync -- ./sync.sh --all
//! onlyone --dir /tmp/jobs history sync      # the same journal, read by the command
//! ```
//!
//! The journal is in the state directory (`$ONLYONE_STATE_DIR`, else the
//! user's default), where the command writes and reads it. With
//! `--replace`, a live run is stopped and this one takes its place, where
//! it would skip otherwise. Exits with the
//! command's code (128 + the signal that killed it), 75 when a live run
//! held the lock and this one skipped, 127 or 126 when the command could
//! not start, 1 on any other failure.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use onlyone::journal::{Exit, Journal, run_id};
use onlyone::observer::{JournalObserver, RunEnd, RunObserver};
use onlyone::runner::{self, JobEnd, JobOptions, Release};
use onlyone::state::StateDir;
use onlyone::supervise::RunError;
use onlyone::{HeldBy, LockFile, Record, TakeOver, compact_duration};

/// What a skipped run exits with (EX_TEMPFAIL).
const SKIPPED: u8 = 75;

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut opts = JobOptions::default();
    if args.first().is_some_and(|a| a == "--replace") {
        opts.replace = true;
        args.remove(0);
    }
    let (dir, name, argv) = match &args[..] {
        [dir, name, sep, argv @ ..] if sep == "--" && !argv.is_empty() => (dir, name, argv),
        _ => {
            eprintln!("usage: journaled [--replace] DIR NAME -- COMMAND [ARG...]");
            return ExitCode::from(2);
        }
    };
    match run(Path::new(dir), &name.to_string_lossy(), argv, &opts) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("journaled: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `argv` under the lock `name` of `dir`, journaled.
fn run(
    dir: &Path,
    name: &str,
    argv: &[OsString],
    opts: &JobOptions,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let lock = LockFile::open(onlyone::names::lock_path(name, dir)?)?;
    let journal = Journal::of(&lock, &StateDir::resolve(None));
    let mut observer = (JournalObserver::new(journal), Said { name });
    let ended = runner::run(&lock, argv, opts, &mut observer);
    if let Some(e) = observer.0.error() {
        eprintln!(
            "journaled: could not write {} ({e}); the run went on without it",
            onlyone::journal::EventLog::describe(observer.0.log())
        );
    }
    let ran = match ended {
        Ok(JobEnd::Ran(ran)) => ran,
        Ok(JobEnd::Skipped(_)) => return Ok(ExitCode::from(SKIPPED)),
        Err(e @ RunError::NotFound { .. }) => {
            eprintln!("journaled: {e}");
            return Ok(ExitCode::from(127));
        }
        Err(e @ RunError::NotExecutable { .. }) => {
            eprintln!("journaled: {e}");
            return Ok(ExitCode::from(126));
        }
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("the job ended in a way this example does not know".into()),
    };
    match ran.lock {
        Release::Released => {}
        Release::Left => {
            eprintln!("journaled: the lock of `{name}` is left to the run's processes")
        }
        Release::Failed(e) => eprintln!("journaled: the run ended, but releasing failed: {e}"),
        _ => {}
    }
    Ok(match ran.outcome.exit {
        Exit::Code(c) => ExitCode::from(c.clamp(0, 255) as u8),
        Exit::Signal(s) => ExitCode::from((128 + s).clamp(0, 255) as u8),
    })
}

/// The observer that says each moment of a run on stderr: where a
/// program's own messages (or pings) hook in.
struct Said<'a> {
    /// The lock's name.
    name: &'a str,
}

impl Said<'_> {
    /// The run id of `run`, or `?`.
    fn rid(run: &Record) -> String {
        run.token
            .as_deref()
            .and_then(run_id)
            .unwrap_or_else(|| "?".into())
    }
}

impl RunObserver for Said<'_> {
    fn skipped(&mut self, held: &HeldBy) {
        eprintln!(
            "journaled: `{}` is running as {}; skipped",
            self.name,
            held.describe()
        );
    }

    fn stopped(&mut self, held: &HeldBy, signal: &str) {
        eprintln!(
            "journaled: stopped the run of `{}` ({signal}): {}",
            self.name,
            held.describe()
        );
    }

    fn took_over(&mut self, _run: &Record, from: &TakeOver) {
        eprintln!("journaled: took over {from}");
    }

    fn started(&mut self, lock: &Path, run: &Record) {
        eprintln!(
            "journaled: run {} of `{}` started as pid {} ({})",
            Self::rid(run),
            self.name,
            run.pid,
            lock.display()
        );
    }

    fn ended(&mut self, run: &Record, end: &RunEnd) {
        let how = match end.exit {
            Exit::Code(c) => format!("exit {c}"),
            Exit::Signal(s) => format!("signal {s}"),
        };
        eprintln!(
            "journaled: run {} of `{}` ended: {how} after {}",
            Self::rid(run),
            self.name,
            compact_duration(end.took)
        );
    }
}
