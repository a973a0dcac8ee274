//! `onlyone completions SHELL`: a shell's completion script, from the
//! same clap definitions as the command itself; its options.

use clap::Args;

use super::exit::Ending;
use super::options::Adjust;

#[derive(Debug, Args)]
pub struct Completions {
    /// The shell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

impl Adjust for Completions {}

/// What `onlyone completions --help` says after the options.
pub const AFTER_HELP: &str = "\
Install:
  onlyone completions bash > /etc/bash_completion.d/onlyone
  onlyone completions zsh  > /usr/local/share/zsh/site-functions/_onlyone
  onlyone completions fish > ~/.config/fish/completions/onlyone.fish

Commands and options complete; lock names do not (`onlyone status` lists
them).";

/// `onlyone completions SHELL`: the script, on stdout. The hidden
/// (internal) commands are left out: not every generator skips them.
/// `full` is the whole command line, every command's options defined.
pub fn completions(a: &Completions, full: &clap::Command) -> Ending {
    let shown = full.get_subcommands().filter(|s| !s.is_hide_set()).cloned();
    let mut cmd = clap::Command::new("onlyone")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .args(full.get_arguments().cloned())
        .subcommands(shown);
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "onlyone", &mut out);
    super::print_stdout(&String::from_utf8_lossy(&out));
    Ending::Done
}
