//! The `onlyone` command line. The work is in the library; this is the
//! thin shell around it.
//!
//! It starts without Rust's own start (`#![no_main]`): every fire of a job
//! pays for its start, and Rust's reads `/proc/self/maps` to place a guard
//! for the main thread's stack, about a tenth of a millisecond here
//! (BENCHMARKS.md). `main` below does the rest of what that start does:
//! the standard descriptors are open (on `/dev/null` if they were closed,
//! so that no lock or journal file is ever opened as fd 1), SIGPIPE is
//! ignored, a panic exits with 101, and stdout is flushed at the end. A
//! stack overflow is then a plain SIGSEGV, without Rust's message.
#![cfg_attr(not(test), no_main)]

mod cli;

use std::ffi::{CStr, OsString, c_char, c_int};
use std::io::Write;
use std::os::unix::ffi::OsStringExt;

/// The program's entry, as the C library calls it.
#[cfg(not(test))]
#[unsafe(no_mangle)]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    // SAFETY: the C library passes `argc` valid, NUL-terminated strings.
    let args = unsafe { args(argc, argv) };
    c_int::from(start(args))
}

/// The arguments `argv[0..argc]`, which C's start passes `main` (Rust's
/// `std::env::args` relies on its own start on some C libraries).
///
/// # Safety
///
/// `argv` points to `argc` pointers to NUL-terminated strings that live
/// for the rest of the process.
unsafe fn args(argc: c_int, argv: *const *const c_char) -> Vec<OsString> {
    let n = usize::try_from(argc).unwrap_or(0);
    (0..n)
        .map(|i| {
            // SAFETY: `i < argc`, each entry is a C string (the contract).
            let arg = unsafe { CStr::from_ptr(*argv.add(i)) };
            OsString::from_vec(arg.to_bytes().to_vec())
        })
        .collect()
}

/// What Rust's start does around `main` (but the stack guard), then the
/// command line. (Under `cargo test` the harness has the entry; this stays
/// the root of what the command runs.)
#[cfg_attr(test, allow(dead_code))]
fn start(args: Vec<OsString>) -> u8 {
    standard_fds_open();
    onlyone::signal::ignore_broken_pipe();
    let code = std::panic::catch_unwind(|| cli::main(args));
    let _ = std::io::stdout().flush();
    match code {
        Ok(code) => code.finish(),
        // The panic's message is out; 101 is Rust's status for it.
        Err(_) => 101,
    }
}

/// Opens `/dev/null` on whichever of fds 0, 1 and 2 is closed, as Rust's
/// start does: a closed stdout would otherwise be the next file opened.
fn standard_fds_open() {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [
        PollFd::from_borrowed_fd(rustix::stdio::stdin(), PollFlags::empty()),
        PollFd::from_borrowed_fd(rustix::stdio::stdout(), PollFlags::empty()),
        PollFd::from_borrowed_fd(rustix::stdio::stderr(), PollFlags::empty()),
    ];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let closed: [bool; 3] = match poll(&mut fds, Some(&now)) {
        Ok(_) => std::array::from_fn(|i| fds[i].revents().contains(PollFlags::NVAL)),
        // No poll (a seccomp filter, a sandbox): ask each descriptor.
        Err(_) => [
            rustix::io::fcntl_getfd(rustix::stdio::stdin()).is_err(),
            rustix::io::fcntl_getfd(rustix::stdio::stdout()).is_err(),
            rustix::io::fcntl_getfd(rustix::stdio::stderr()).is_err(),
        ],
    };
    // The lowest closed descriptor is the one `open` returns, so that
    // opening in order fills each one.
    for _ in closed.iter().filter(|c| **c) {
        match rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDWR,
            rustix::fs::Mode::empty(),
        ) {
            // Kept open for the life of the process, as a standard fd.
            Ok(fd) => std::mem::forget(fd),
            // Rust's start aborts too: nothing safe is left to do.
            Err(_) => std::process::abort(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_are_read_from_argv_as_given() {
        let owned = [c"onlyone", c"run", c"j", c"--", c"\xff"];
        let ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        // SAFETY: five valid C strings behind five valid pointers.
        let got = unsafe { args(c_int::try_from(ptrs.len()).unwrap(), ptrs.as_ptr()) };
        let want: Vec<OsString> = vec![
            "onlyone".into(),
            "run".into(),
            "j".into(),
            "--".into(),
            OsString::from_vec(vec![0xff]),
        ];
        assert_eq!(got, want);
    }
}
