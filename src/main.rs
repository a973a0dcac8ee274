//! The `onlyone` command line. The work is in the library; this is the
//! thin shell around it.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main().finish()
}
