//! Shell completions and manual pages, from the same clap definitions as
//! the command itself.

use std::io::Write;

use super::args;
use super::exit::Code;

/// `onlyone completions SHELL`: the script, on stdout. The hidden
/// (internal) commands are left out: not every generator skips them.
pub fn completions(a: &args::Completions) -> Code {
    let full = args::full_command();
    let shown = full.get_subcommands().filter(|s| !s.is_hide_set()).cloned();
    let mut cmd = clap::Command::new("onlyone")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .args(full.get_arguments().cloned())
        .subcommands(shown);
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "onlyone", &mut out);
    super::print_stdout(&String::from_utf8_lossy(&out));
    Code::Exit(0)
}

/// The sections clap does not write, for `onlyone(1)`, in roff, after
/// EXIT STATUS (which is [`super::exit::roff`]).
const EXTRA: &str = r#".SH ENVIRONMENT
.TP
\fBONLYONE_DIR\fR
The lock directory, when \fB\-\-dir\fR is not given.
.TP
\fBONLYONE_STATE_DIR\fR
The state directory, which keeps the journals, when \fB\-\-state\-dir\fR is
not given.
.TP
\fBXDG_STATE_HOME\fR, \fBHOME\fR
A user's default state directory: \fI$XDG_STATE_HOME/onlyone\fR when it is an
absolute path, else \fI~/.local/state/onlyone\fR when \fBHOME\fR is the user's.
.TP
\fBONLYONE_STORE\fR
A postgres:// URL: keep the locks in a PostgreSQL database that several hosts
share (\fB\-\-store\fR). Not passed on to the command.
.TP
\fBPGPASSWORD\fR, \fBPGPASSFILE\fR
The store's password, as libpq reads them (else \fI~/.pgpass\fR).
.TP
\fBONLYONE_LOCK\fR, \fBONLYONE_TOKEN\fR
Set by \fBrun\fR for the command (and printed by \fBacquire \-\-export\fR for a
script): the lock, and the token of this acquisition. Every process that
carries the token belongs to the run and keeps the lock held.
.TP
\fBONLYONE_RUN_ID\fR
Set by \fBrun\fR for the command: the run's id, a UUID (its token's 128 bits),
as its journal events (\fBrid\fR) and its pings name it.
.TP
\fBONLYONE_PING\fR
A ping URL (healthchecks.io protocol) for \fBrun\fR, \fBacquire\fR,
\fBprecheck\fR and \fBrelease\fR, when neither \fB\-\-ping\fR nor
\fB\-\-ping\-file\fR is given. Not passed on to the command.
.TP
\fBONLYONE_RELEASE_PING\fR, \fBONLYONE_RELEASE_PING_FILE\fR
Printed by \fBacquire \-\-export \-\-ping\fR and \fB\-\-ping\-file\fR (with
\fBONLYONE_RUN_ID\fR): the URLs, and the ping file's path, that \fBrelease\fR
pings with the run's end, when \fBONLYONE_LOCK\fR names the lock it releases.
Not passed on to the command of a \fBrun\fR.
.TP
\fBONLYONE_FENCE\fR
With a store: the lease's epoch, which grows with every acquisition. Pass it
to the resource so that it can refuse a writer whose lease is gone.
.SH FILES
.TP
\fI/run/onlyone/NAME.lock\fR, \fI/tmp/onlyone\-$UID/NAME.lock\fR
The lock file (the owner record): the default directory for root, and for
other users.
.TP
\fI/var/lib/onlyone/\fR, \fI~/.local/state/onlyone/\fR, \fI/var/tmp/onlyone\-state\-$UID/\fR
The state directory, for root, for other users, and for a user with no home:
the journal of each lock's runs (JSON Lines, rotated at 4 MiB), named from the
lock's path as \fBsystemd\-escape \-\-path\fR names it, then \fI.journal\fR
(\fI/run/onlyone/sync.lock\fR: \fIrun\-onlyone\-sync.lock.journal\fR) and
\fI.journal.1\fR.
.TP
\fINAME.lock.journal\fR, \fINAME.lock.journal.1\fR
An earlier version's journal, beside the lock: still read, never written.
.TP
\fI.onlyone\-reap.json\fR, \fI.onlyone\-reap.lock\fR
The reaper's state and its lock, in the lock directory.
.SH EXAMPLES
.nf
onlyone run sync \-\- ./sync.sh \-\-all            # skip (75) while a sync runs
onlyone run \-q \-\-wait 10m sync \-\- ./sync.sh     # cron: wait up to 10 minutes
onlyone status                                 # who holds what
onlyone stop sync                              # end the running sync
onlyone history sync                           # its runs
vars=$(onlyone acquire sync \-\-export) || exit $?; eval "$vars"
onlyone \-\-store postgres://jobs@db/ops run \-\-lease 30s sync \-\- ./sync.sh
.fi
.SH "SEE ALSO"
\fBflock\fR(1), \fBsystemd.timer\fR(5), \fBcrontab\fR(5)
"#;

/// `onlyone manpages DIR`: `onlyone.1`, with the sections above, and one
/// page per command, `onlyone-COMMAND.1`.
pub fn manpages(a: &args::Manpages) -> Code {
    match write_pages(&a.dir) {
        Ok(()) => Code::Exit(0),
        Err(e) => super::fail(format_args!(
            "cannot write the manual pages into `{}`: {e}",
            a.dir.display()
        )),
    }
}

fn write_pages(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let cmd = args::full_command();
    let mut page = Vec::new();
    // The exit codes have a section of their own here, not a place in the
    // text after the options as in `--help`.
    let top = cmd
        .clone()
        .after_long_help(args::after_help("Exit codes: see EXIT STATUS below."));
    clap_mangen::Man::new(top).render(&mut page)?;
    page.write_all(super::exit::roff().as_bytes())?;
    page.write_all(EXTRA.as_bytes())?;
    std::fs::write(dir.join("onlyone.1"), page)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // A one-shot command: the page names live to its end.
        let name: &'static str = Box::leak(format!("onlyone-{}", sub.get_name()).into_boxed_str());
        let sub = sub.clone().name(name).version(env!("CARGO_PKG_VERSION"));
        let mut page = Vec::new();
        clap_mangen::Man::new(sub).render(&mut page)?;
        std::fs::write(dir.join(format!("{name}.1")), page)?;
    }
    Ok(())
}
