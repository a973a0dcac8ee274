//! `onlyone manpages DIR`: the manual pages, from the same clap
//! definitions as the command itself; its options.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::exit::Ending;
use super::options::Adjust;

#[derive(Debug, Args)]
pub struct Manpages {
    /// Where to write the pages (created if missing).
    // Its id is not `dir`: the global --dir has that one.
    #[arg(id = "pages_dir", value_name = "DIR")]
    pub dir: PathBuf,
}

impl Adjust for Manpages {}

/// What `onlyone manpages --help` says after the options.
pub const AFTER_HELP: &str = "\
Example:
  onlyone manpages /usr/local/share/man/man1 && man onlyone";

/// The sections clap does not write, for `onlyone(1)`, in roff, after
/// EXIT STATUS (which is [`super::exit::roff`]).
const TOP_SECTIONS: &str = r#".SH ENVIRONMENT
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
@STORE@.TP
\fBONLYONE_LOCK\fR, \fBONLYONE_TOKEN\fR
Set by \fBrun\fR for the command (and printed by \fBacquire \-\-export\fR for a
script): the lock, and the token of this acquisition. Every process that
carries the token belongs to the run and keeps the lock held.
.TP
\fBONLYONE_RUN_ID\fR
Set by \fBrun\fR for the command: the run's id, a UUID (its token's 128 bits),
as its journal events (\fBrid\fR) and its pings name it.
.TP
\fBONLYONE_SLOT\fR
Set by \fBrun\fR for the command: the slot its run holds, 0 to N\-1 with
\fB\-\-slots N\fR, 0 for a lock of one slot (and with a store); printed by
\fBacquire \-\-export \-\-slots N\fR (N above 1), whose \fBONLYONE_LOCK\fR
then names the slot's file. Two runs
that hold the lock at once never share a slot: one of N shards, N worker
directories.
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
\fBONLYONE_SCHEDULE\fR
The schedule (a cron expression or \fBevery DUR\fR) for \fBrun\fR,
\fBprecheck\fR, \fBcheck\fR, \fBmetrics\fR and \fBstatus\fR, when
\fB\-\-schedule\fR is not given. Cron expressions are read in \fBTZ\fR
(else \fI/etc/localtime\fR) unless prefixed with \fBCRON_TZ=\fIZone\fR.
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
\fINAME.lock.slot.K\fR
Slot K (1 to N\-1) of a lock of N slots (\fBrun \-\-slots N\fR), a whole lock
file of its own; slot 0 is \fINAME.lock\fR. Listed as its lock's, never as a
lock.
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
/// page per command, `onlyone-COMMAND.1`: from `full`, the whole command
/// line with every command's options defined, and its `after_help` (the
/// text after the options in `onlyone --help`, given what it says of the
/// exit codes).
pub fn manpages(a: &Manpages, full: clap::Command, after_help: fn(&str) -> String) -> Ending {
    match write_pages(&a.dir, full, after_help) {
        Ok(()) => Ending::Done,
        Err(e) => super::fail(format_args!(
            "cannot write the manual pages into `{}`: {e}",
            a.dir.display()
        )),
    }
}

fn write_pages(
    dir: &std::path::Path,
    full: clap::Command,
    after_help: fn(&str) -> String,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // No `help` command: it would be listed as a page that is not written.
    let cmd = full.disable_help_subcommand(true);
    // The exit codes have a section of their own here, not a place in the
    // text after the options as in `--help`; the examples are in
    // TOP_SECTIONS.
    let top = cmd
        .clone()
        .after_long_help(after_help("Exit codes: see EXIT STATUS below."));
    let mut page = render(top, false)?;
    page.extend_from_slice(super::exit::roff().as_bytes());
    page.extend_from_slice(TOP_SECTIONS.replace("@STORE@", &store_env()).as_bytes());
    std::fs::write(dir.join("onlyone.1"), page)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // A one-shot command: the page names live to its end.
        let name: &'static str = Box::leak(format!("onlyone-{}", sub.get_name()).into_boxed_str());
        let sub = sub.clone().name(name).version(env!("CARGO_PKG_VERSION"));
        let mut page = render(sub, true)?;
        page.extend_from_slice(b".SH \"SEE ALSO\"\n\\fBonlyone\\fR(1)\n");
        std::fs::write(dir.join(format!("{name}.1")), page)?;
    }
    Ok(())
}

/// One page: NAME, a SYNOPSIS with every option's argument, DESCRIPTION
/// (the text after the options in `--help` too), OPTIONS, SUBCOMMANDS,
/// EXAMPLES (from that text, when `examples`) and VERSION.
fn render(cmd: clap::Command, examples: bool) -> std::io::Result<Vec<u8>> {
    let mut cmd = cmd;
    cmd.build();
    let man = clap_mangen::Man::new(cmd.clone());
    let after = cmd
        .get_after_long_help()
        .or_else(|| cmd.get_after_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    let (more, example_lines) = split_examples(&after);
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    let mut part = |f: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| {
        let mut buf = Vec::new();
        f(&mut buf)?;
        page.extend_from_slice(without_preamble(&buf));
        Ok::<(), std::io::Error>(())
    };
    part(&|w| man.render_name_section(w))?;
    part(&|w| {
        w.write_all(b".SH SYNOPSIS\n")?;
        w.write_all(synopsis(&cmd).as_bytes())
    })?;
    part(&|w| {
        man.render_description_section(w)?;
        if !more.trim().is_empty() {
            w.write_all(b".PP\n")?;
            w.write_all(paragraphs(more).as_bytes())?;
        }
        Ok(())
    })?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        part(&|w| man.render_options_section(w))?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        part(&|w| man.render_subcommands_section(w))?;
    }
    if examples && let Some(lines) = example_lines {
        part(&|w| {
            w.write_all(b".SH EXAMPLES\n")?;
            w.write_all(paragraphs(lines).as_bytes())
        })?;
    }
    part(&|w| man.render_version_section(w))?;
    Ok(page)
}

/// A rendered part without the apostrophe preamble that the roff crate
/// writes before each (the title's, first, defines it for the page).
fn without_preamble(part: &[u8]) -> &[u8] {
    let mut rest = part;
    while rest.starts_with(b".ie ") || rest.starts_with(b".el ") {
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => rest = &rest[i + 1..],
            None => return &[],
        }
    }
    rest
}

/// The text after the options, and its examples: from a line `Examples:`,
/// `Example:` or `Example (...):` on.
fn split_examples(after: &str) -> (&str, Option<&str>) {
    let mut at = 0;
    for line in after.split_inclusive('\n') {
        let l = line.trim_end();
        if l.starts_with("Example") && l.ends_with(':') {
            return (&after[..at], Some(&after[at..]));
        }
        at += line.len();
    }
    (after, None)
}

/// Plain text as roff: a blank line starts a paragraph, lines indented by
/// two spaces (commands, assignments) are kept as they are, a line `Examples:`
/// (the section's own title) is left out.
fn paragraphs(text: &str) -> String {
    let mut out = String::new();
    let mut verbatim = false;
    for line in text.lines() {
        let code = line.starts_with("  ");
        if code != verbatim {
            out.push_str(if code { ".nf\n" } else { ".fi\n" });
            verbatim = code;
        }
        match line.trim_end() {
            "" if !verbatim => out.push_str(".PP\n"),
            "" => out.push('\n'),
            "Examples:" | "Example:" => {}
            l => {
                out.push_str(&roff_text(if code { &l[2..] } else { l }));
                out.push('\n');
            }
        }
    }
    if verbatim {
        out.push_str(".fi\n");
    }
    out
}

/// A line of text, escaped for roff: `\`, `-` and `'`, and a `.` or `'`
/// that would start a control line.
fn roff_text(line: &str) -> String {
    let escaped = line
        .replace('\\', "\\e")
        .replace('-', "\\-")
        .replace('\'', "\\*(Aq");
    if escaped.starts_with('.') || escaped.starts_with("\\*(Aq") {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// The synopsis, every option with its argument, as it is typed:
/// `onlyone run [--wait <DUR>] ... [-q|--quiet] <LOCK> -- <COMMAND>...`
/// (the page of a subcommand is named `onlyone-run`, as git's are).
fn synopsis(cmd: &clap::Command) -> String {
    let bold = |s: &str| format!("\\fB{}\\fR", roff_text(s));
    let value = |s: &str| format!("\\fI{}\\fR", roff_text(s));
    let name = cmd.get_name();
    let typed = match name.strip_prefix("onlyone-") {
        Some(sub) => format!("{} {}", bold("onlyone"), bold(sub)),
        None => bold(name),
    };
    let mut words = vec![typed];
    // The options first, then the operands, as the usage line has them.
    let (operands, options): (Vec<&clap::Arg>, Vec<&clap::Arg>) = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .partition(|a| a.is_positional());
    for arg in options.into_iter().chain(operands) {
        let takes = arg.get_num_args().is_some_and(|n| n.takes_values());
        let names = arg
            .get_value_names()
            .map(|v| v.join(" "))
            .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
        let (open, close) = if arg.is_required_set() {
            ("<", ">")
        } else {
            ("[", "]")
        };
        if arg.is_positional() {
            let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
            let dashes = if arg.is_last_set() { "\\-\\- " } else { "" };
            words.push(format!(
                "{dashes}{open}{}{close}{}",
                value(&names),
                if many { "..." } else { "" }
            ));
            continue;
        }
        let flag = match (arg.get_short(), arg.get_long()) {
            (Some(s), Some(l)) => format!("{}|{}", bold(&format!("-{s}")), bold(&format!("--{l}"))),
            (Some(s), None) => bold(&format!("-{s}")),
            (None, Some(l)) => bold(&format!("--{l}")),
            (None, None) => continue,
        };
        let arg_text = if takes {
            format!(" {}", value(&format!("<{names}>")))
        } else {
            String::new()
        };
        let (open, close) = if arg.is_required_set() {
            ("", "")
        } else {
            (open, close)
        };
        words.push(format!("{open}{flag}{arg_text}{close}"));
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        words.push(format!("<{}>", value("command")));
    }
    words.join(" ") + "\n"
}

/// The ENVIRONMENT entries of the store: `ONLYONE_STORE`, then what each
/// engine reads, from the library's list of engines.
fn store_env() -> String {
    let esc = |s: &str| s.replace('-', "\\-");
    let urls: Vec<String> = onlyone::place::store::ENGINES
        .iter()
        .map(|e| format!("{} ({})", esc(e.url), esc(e.about)))
        .collect();
    let mut out = format!(
        ".TP\n\\fBONLYONE_STORE\\fR\nA store's URL: keep the locks in a store that several hosts \
         share (\\fB\\-\\-store\\fR): {}. Not passed on to the command.\n",
        urls.join(", or ")
    );
    for e in onlyone::place::store::ENGINES {
        for (vars, what) in e.env {
            let vars: Vec<String> = vars
                .split(", ")
                .map(|v| format!("\\fB{}\\fR", esc(v)))
                .collect();
            out.push_str(&format!(".TP\n{}\n{}\n", vars.join(", "), esc(what)));
        }
    }
    out
}
