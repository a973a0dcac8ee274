//! A CLI whose long-running mode runs as one instance at a time, and whose
//! sibling command says who is running: `work` holds the lock while it
//! works, a second `work` is refused with the first one's pid, `status`
//! answers read-only, and a `work` killed with `kill -9` is taken over.
//!
//! ```text
//! cargo run --example seed_cli -- work /tmp/app/app.lock      # works until stdin closes
//! cargo run --example seed_cli -- work /tmp/app/app.lock      # already running as pid N
//! cargo run --example seed_cli -- status /tmp/app/app.lock    # running as pid N
//! ```

use std::io::Read;
use std::process::ExitCode;

use onlyone::{Error, LockFile, Verdict};

/// What a second instance exits with: skipped, not failed (EX_TEMPFAIL).
const ALREADY_RUNNING: u8 = 75;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let done = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["work", lock] => work(lock),
        ["status", lock] => status(lock),
        _ => {
            eprintln!("usage: seed_cli work LOCK | seed_cli status LOCK");
            return ExitCode::from(2);
        }
    };
    done.unwrap_or_else(|e| {
        eprintln!("seed_cli: {e}");
        ExitCode::FAILURE
    })
}

/// The long-running mode: holds the lock while it works (here, until its
/// standard input closes), then releases it.
fn work(path: &str) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // The lock lives in the program's state directory, made on first use.
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let lock = LockFile::open(path)?;
    let guard = match lock.try_acquire() {
        Ok(guard) => guard,
        Err(Error::Held(held)) => {
            let hint = match held.holder.pid() {
                0 => "wait for it".to_owned(),
                pid => format!("wait for it, or stop it: kill {pid}"),
            };
            eprintln!("seed_cli: already running as {}; {hint}", held.describe());
            return Ok(ExitCode::from(ALREADY_RUNNING));
        }
        Err(e) => return Err(e.into()),
    };
    // A holder that crashed (kill -9) left its lock: taken over, and said.
    if let Some(stale) = guard.took_over() {
        eprintln!("seed_cli: took over {stale}");
    }
    println!("seed_cli: working as pid {}", std::process::id());
    std::io::stdin().read_to_end(&mut Vec::new())?;
    let token = guard.token().to_owned();
    guard.release()?;
    // Release is idempotent: one more (a cleanup that runs twice) finds
    // the lock free, and is no error.
    let again = lock.release_token(&token)?;
    println!("seed_cli: released; released again: {again:?}");
    Ok(ExitCode::SUCCESS)
}

/// The sibling command: who is running, without taking the lock, even
/// before the first run has made the lock's directory.
fn status(path: &str) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let Some(active) = onlyone::active_pid(path)? else {
        println!("nothing running");
        return Ok(ExitCode::SUCCESS);
    };
    match (active.alive, active.pid, &active.verdict) {
        (true, Some(pid), _) => println!("running as pid {pid}"),
        (true, None, _) => println!("running: a process outside onlyone holds the lock"),
        (false, _, Verdict::Unknown(why)) => println!("cannot tell who is running: {why}"),
        (false, _, _) => println!("nothing running (the last run left its lock to take over)"),
    }
    Ok(ExitCode::SUCCESS)
}
