//! A program that guards its long-running mode with onlyone.
//!
//! Run two at once and the second is refused with the first one's pid:
//!
//! ```text
//! cargo run --example guarded -- /tmp/guarded.lock 5 &
//! cargo run --example guarded -- /tmp/guarded.lock 5
//! ```

use std::time::Duration;

use onlyone::{Error, LockFile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "/tmp/onlyone-guarded.lock".into());
    let secs: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1);

    let lock = LockFile::open(&path)?;
    let guard = match lock.try_acquire() {
        Ok(g) => g,
        Err(Error::Held(held)) => {
            eprintln!("guarded: {held}");
            std::process::exit(75);
        }
        Err(e) => return Err(e.into()),
    };
    println!("guarded: acquired {path} as pid {}", guard.record().pid);

    // What `onlyone status` shows, from the same process.
    if let Some(seen) = lock.inspect()? {
        println!("guarded: verdict {:?}", seen.verdict);
    }
    println!("--- the lock file ---");
    print!("{}", std::fs::read_to_string(&path)?);
    println!("---------------------");

    std::thread::sleep(Duration::from_secs(secs));
    guard.release()?;
    println!("guarded: released");
    Ok(())
}
