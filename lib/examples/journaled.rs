//! A job run one at a time with its journal, by the library alone: the
//! lock `DIR/NAME.lock` of a lock directory as a place
//! ([`onlyone::place::dir::DirPlace`]), the job run there by the library's
//! one run flow ([`onlyone::place::run::run`]), which records every moment
//! (start, end, skip, takeover, stop) in the lock's journal; its observer
//! says each on stderr.
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
use std::num::NonZeroU32;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use onlyone::journal::{Exit, run_id};
use onlyone::names::DirSource;
use onlyone::place::dir::DirPlace;
use onlyone::place::run::RunObserver;
use onlyone::place::run::{self, Job, JobEnd, Release, Skip, Started};
use onlyone::place::{Note, Place};
use onlyone::state::StateDir;
use onlyone::{HeldBy, TakeOver, compact_duration};

/// What a skipped run exits with (EX_TEMPFAIL).
const SKIPPED: u8 = 75;

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let replace = args.first().is_some_and(|a| a == "--replace");
    if replace {
        args.remove(0);
    }
    let (dir, name, argv) = match &args[..] {
        [dir, name, sep, argv @ ..] if sep == "--" && !argv.is_empty() => (dir, name, argv),
        _ => {
            eprintln!("usage: journaled [--replace] DIR NAME -- COMMAND [ARG...]");
            return ExitCode::from(2);
        }
    };
    let mut job = Job::new(argv.to_vec());
    if replace {
        job.replace = Some(job.run.kill_after);
    }
    match run(Path::new(dir), &name.to_string_lossy(), &job) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("journaled: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `job` under the lock `name` of `dir`, journaled.
fn run(dir: &Path, name: &str, job: &Job) -> Result<ExitCode, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    // What the place says on the side (a journal it could not write).
    let notes = Arc::new(|n: Note<'_>| {
        if let Note::Unlogged { log, error } = n {
            eprintln!("journaled: could not write {log} ({error}); the run went on without it");
        }
    });
    let place = DirPlace::new(
        (dir.to_path_buf(), DirSource::Given),
        StateDir::resolve(None),
        false,
        notes,
    );
    let lock = place.lock(name, NonZeroU32::MIN)?;
    let mut said = Said { name, rid: None };
    let ran = match run::run(&place, &lock, job, &mut said) {
        Ok(JobEnd::Ran(ran)) => ran,
        Ok(JobEnd::Skipped(_)) => return Ok(ExitCode::from(SKIPPED)),
        Err(e) => {
            eprintln!("journaled: {e}");
            return Ok(match e.start_code() {
                Some(code) => ExitCode::from(code as u8),
                None => ExitCode::FAILURE,
            });
        }
    };
    let how = match ran.end.exit {
        Exit::Code(c) => format!("exit {c}"),
        Exit::Signal(s) => format!("signal {s}"),
    };
    eprintln!(
        "journaled: run {} of `{name}` ended: {how} after {}",
        said.rid.as_deref().unwrap_or("?"),
        compact_duration(ran.end.took)
    );
    match ran.lock {
        Release::Released => {}
        Release::Survivors | Release::Lingering(_) => {
            eprintln!("journaled: the lock of `{name}` is left to the run's processes")
        }
        Release::Failed(e) => eprintln!("journaled: the run ended, but releasing failed: {e}"),
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
    /// The run's id, once it started.
    rid: Option<String>,
}

impl RunObserver for Said<'_> {
    fn skipped(&mut self, skip: &Skip) {
        let held: Option<&HeldBy> = match skip {
            Skip::Held(h) | Skip::Waited { held: h, .. } | Skip::Queued { held: h, .. } => Some(h),
            Skip::Lease { .. } => None,
        };
        eprintln!(
            "journaled: `{}` is running as {}; skipped",
            self.name,
            held.map_or_else(|| "another run".to_owned(), HeldBy::describe)
        );
    }

    fn stopped(&mut self, held: &HeldBy, signal: &str) {
        eprintln!(
            "journaled: stopped the run of `{}` ({signal}): {}",
            self.name,
            held.describe()
        );
    }

    fn took_over(&mut self, from: &TakeOver) {
        eprintln!("journaled: took over {from}");
    }

    fn started(&mut self, started: &Started) {
        let rid = run_id(&started.token).unwrap_or_else(|| "?".into());
        eprintln!(
            "journaled: run {rid} of `{}` started as pid {}",
            self.name,
            std::process::id()
        );
        self.rid = Some(rid);
    }
}
