//! `--store URL` in a build without the PostgreSQL store (the `postgres`
//! feature off): every command that would use it says so. `precheck` still
//! fails open (0).

use std::time::Duration;

use onlyone::journal::History;

use super::args;
use super::exit::Code;
use super::monitor::Seen;

/// As in the store's build.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A store that cannot exist in this build.
pub enum NoStore {}

impl NoStore {
    pub fn url(&self) -> &str {
        match *self {}
    }
}

fn why(_url: &str) -> String {
    "this onlyone was built without the PostgreSQL store (cargo feature `postgres`), so \
     --store cannot be used; build it with the default features"
        .to_owned()
}

pub fn open(url: &str, _timeout: Duration) -> Result<NoStore, String> {
    Err(why(url))
}

pub fn history(store: &NoStore, _name: &str) -> Result<History, String> {
    match *store {}
}

pub fn run(url: &str, _a: &args::Run) -> Code {
    super::fail(why(url))
}

pub fn watchdog(_a: &args::LeaseWatchdog) -> Code {
    super::fail(why(""))
}

pub fn precheck(url: &str, a: &args::Precheck) -> Code {
    if !a.quiet {
        super::say(why(url));
    }
    Code::Exit(0)
}

pub fn status(url: &str, _a: &args::Status) -> Code {
    super::fail(why(url))
}

pub fn stop(url: &str, _a: &args::Stop) -> Code {
    super::fail(why(url))
}

pub fn seen(url: &str, _locks: &[String]) -> Result<Vec<Result<Seen, String>>, String> {
    Err(why(url))
}
