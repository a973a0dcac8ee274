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
//!
//! Once the arguments are copied, the secrets among them are masked in
//! place ([`mask_secrets`]): a ping URL's key and a store URL's password
//! are overwritten with `*` in the memory that `/proc/PID/cmdline` (what
//! `ps` shows every user) reads, for the rest of the run. Until then
//! (the exec, the dynamic loader, a fraction of a millisecond) they show:
//! the environment and `--ping-file` never do.
#![cfg_attr(not(test), no_main)]

mod cli;

use std::ffi::{CStr, OsString, c_char, c_int};
use std::io::Write;
use std::os::unix::ffi::OsStringExt;

/// The program's entry, as the C library calls it.
#[cfg(not(test))]
#[unsafe(no_mangle)]
extern "C" fn main(argc: c_int, argv: *const *mut c_char) -> c_int {
    // SAFETY: the C library passes `argc` valid, NUL-terminated strings.
    let args = unsafe { args(argc, argv.cast()) };
    // SAFETY: the same strings, which C lets a program modify; `args`
    // holds copies, and nothing else refers to them.
    unsafe { mask_secrets(argc, argv) };
    c_int::from(start(args))
}

/// Overwrites, in `argv`'s own strings, the secrets the arguments carry
/// ([`mask`]), so that `/proc/PID/cmdline` no longer shows them.
///
/// # Safety
///
/// `argv` points to `argc` pointers to writable NUL-terminated strings,
/// which nothing else refers to meanwhile.
#[cfg(not(test))]
unsafe fn mask_secrets(argc: c_int, argv: *const *mut c_char) {
    let n = usize::try_from(argc).unwrap_or(0);
    mask((0..n).map(|i| {
        // SAFETY: `i < argc`, each entry a writable C string (the
        // contract), its length up to its NUL; the slices are disjoint,
        // and each is made once.
        unsafe {
            let p = *argv.add(i);
            let len = CStr::from_ptr(p).count_bytes();
            std::slice::from_raw_parts_mut(p.cast::<u8>(), len)
        }
    }));
}

/// A secret an option's value carries.
#[derive(Clone, Copy)]
enum Secret {
    /// A ping URL (`--ping`): all but its scheme and host (its path is
    /// the check's key; its user and password too).
    Ping,
    /// A store URL (`--store`): its password.
    Store,
}

/// The options whose values carry a secret.
const SECRET_OPTIONS: [(&[u8], Secret); 2] =
    [(b"--ping", Secret::Ping), (b"--store", Secret::Store)];

/// Masks the secrets of onlyone's own options in `args` (the program's
/// name first), up to the `--` before the command, whose arguments are
/// its own: `--ping URL`, `--ping=URL`, `--store URL`, `--store=URL`.
/// The strings keep their lengths; what is masked becomes `*`.
fn mask<'a>(args: impl Iterator<Item = &'a mut [u8]>) {
    let mut next: Option<Secret> = None;
    for arg in args.skip(1) {
        if let Some(secret) = next.take() {
            mask_value(arg, secret);
            continue;
        }
        if *arg == *b"--" {
            break;
        }
        for (flag, secret) in SECRET_OPTIONS {
            if *arg == *flag {
                next = Some(secret);
            } else if arg.starts_with(flag) && arg.get(flag.len()) == Some(&b'=') {
                mask_value(&mut arg[flag.len() + 1..], secret);
            }
        }
    }
}

/// Masks `value`'s secret in place.
fn mask_value(value: &mut [u8], secret: Secret) {
    let Some(scheme_end) = value.windows(3).position(|w| w == b"://") else {
        // Not a URL (refused later): all of it, as it may be a key.
        if matches!(secret, Secret::Ping) {
            value.fill(b'*');
        }
        mask_password_params(value);
        return;
    };
    let start = scheme_end + 3;
    let info = user_part(&value[start..]).map(|len| start..start + len);
    let host = info.as_ref().map_or(start, |i| i.end + 1);
    let end = value[host..]
        .iter()
        .position(|b| matches!(b, b'/' | b'?' | b'#'))
        .map_or(value.len(), |i| host + i);
    match secret {
        Secret::Ping => {
            if let Some(info) = info {
                value[info].fill(b'*');
            }
            let rest = if value.get(end) == Some(&b'/') {
                end + 1
            } else {
                end
            };
            value[rest..].fill(b'*');
        }
        Secret::Store => {
            if let Some(info) = info {
                let text = &value[info.clone()];
                let url = !text.iter().any(|b| matches!(b, b'/' | b'?' | b'#'));
                match text.iter().position(|b| *b == b':') {
                    // A URL's user part: its password, after the user.
                    Some(colon) if url => value[info.start + colon + 1..info.end].fill(b'*'),
                    Some(_) => value[info].fill(b'*'),
                    None => {}
                }
            }
            mask_password_params(&mut value[host..]);
        }
    }
}

/// The length of the user part of `rest` (what follows `scheme://`), as
/// the store reads one: up to the last `@` before the query that follows
/// the first `@`, unless that `@` is in the query. A value with a `/` in
/// its password (`postgres://u:pa/ss@h/db`) is no URL, but the store
/// takes `pa/ss` as the password all the same: all of it up to the last
/// `@` is the user part.
fn user_part(rest: &[u8]) -> Option<usize> {
    let first = rest.iter().position(|b| *b == b'@')?;
    let query = rest[first..]
        .iter()
        .position(|b| *b == b'?')
        .map_or(rest.len(), |i| first + i);
    let last = rest[..query].iter().rposition(|b| *b == b'@')?;
    let in_query = rest[..last]
        .iter()
        .position(|b| *b == b'?')
        .is_some_and(|q| rest[q..last].contains(&b'='));
    if !in_query {
        return Some(last);
    }
    let query = rest.iter().position(|b| *b == b'?').unwrap_or(rest.len());
    rest[..query].iter().rposition(|b| *b == b'@')
}

/// Masks the value of every `password=` parameter in `text` (a URL's
/// query, or libpq's `key=value` words).
fn mask_password_params(text: &mut [u8]) {
    const KEY: &[u8] = b"password=";
    let mut i = 0;
    while i + KEY.len() <= text.len() {
        let starts = i == 0 || matches!(text[i - 1], b'?' | b'&' | b' ');
        if starts && text[i..].starts_with(KEY) {
            let from = i + KEY.len();
            let to = text[from..]
                .iter()
                .position(|b| matches!(b, b'&' | b'#' | b' '))
                .map_or(text.len(), |j| from + j);
            text[from..to].fill(b'*');
            i = to;
        } else {
            i += 1;
        }
    }
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
    let ending = std::panic::catch_unwind(|| cli::main(args));
    let _ = std::io::stdout().flush();
    match ending {
        // The one place the command's ending becomes the exit status.
        Ok(ending) => cli::exit::code(ending).finish(),
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

    /// `args` after [`mask`], as text.
    fn masked(args: &[&str]) -> Vec<String> {
        let mut owned: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        mask(owned.iter_mut().map(Vec::as_mut_slice));
        owned
            .into_iter()
            .map(|a| String::from_utf8(a).unwrap())
            .collect()
    }

    #[test]
    fn secrets_are_masked_in_place_up_to_the_command() {
        let uuid = "https://hc-ping.com/0f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f";
        let given = [
            "onlyone",
            "run",
            "--ping",
            uuid,
            "--ping=http://u:pw@h:8000/ping/KEY/slug?create=1",
            "--ping-file",
            "/etc/onlyone/sync.ping",
            "job",
            "--",
            "cmd",
            "--ping",
            "https://keep.example/KEY",
        ];
        let got = masked(&given);
        assert_eq!(got[2], "--ping");
        assert_eq!(got[3], format!("https://hc-ping.com/{}", "*".repeat(36)));
        assert_eq!(
            got[4],
            format!("--ping=http://****@h:8000/{}", "*".repeat(22))
        );
        assert_eq!(got[6], "/etc/onlyone/sync.ping", "a path is no secret");
        assert_eq!(got[11], "https://keep.example/KEY", "the command's own");
        for (a, b) in got.iter().zip(given) {
            assert_eq!(a.len(), b.len(), "lengths kept: {a}");
        }
        let got = masked(&[
            "onlyone",
            "--store",
            "postgres://jobs:S3cret@db:5432/ops?sslmode=verify-full&password=Two",
            "--store=postgresql://jobs@db/ops",
            "status",
            "--ping",
            "not a url",
        ]);
        assert_eq!(
            got[2],
            "postgres://jobs:******@db:5432/ops?sslmode=verify-full&password=***"
        );
        assert_eq!(got[3], "--store=postgresql://jobs@db/ops");
        assert_eq!(got[6], "*********");
        // A password with an unencoded `/`, `?` or `#` makes the value no
        // URL, yet the store reads it as the password: all of the user
        // part is masked, the host and the database kept.
        let got = masked(&[
            "onlyone",
            "--store",
            "postgres://u:pa/ss@h/db",
            "--store=postgresql://u:p?w#d@h:5432/db?sslmode=require&password=x",
            "--ping",
            "http://u:pa/ss@h/ping/KEY",
            "--store",
            "postgres://h/db?application_name=a@b&password=y",
        ]);
        assert_eq!(got[2], "postgres://*******@h/db");
        assert_eq!(
            got[3],
            "--store=postgresql://*******@h:5432/db?sslmode=require&password=*"
        );
        assert_eq!(got[5], "http://*******@h/********");
        assert_eq!(got[7], "postgres://h/db?application_name=a@b&password=*");
        // A flag at the end, with no value: nothing to mask.
        assert_eq!(masked(&["onlyone", "run", "--ping"])[2], "--ping");
    }

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
