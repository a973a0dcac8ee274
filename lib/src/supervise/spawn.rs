//! Starting the command: found as `execvp(3)` would find it, but never run
//! through `/bin/sh` on ENOEXEC, with the run's token and lock in its
//! environment (and without the variables the caller withholds, its
//! secrets), and started by `posix_spawn(3)` in a process group of its
//! own.

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::lock::members::{FENCE_VAR, LOCK_VAR, RUN_ID_VAR, SLOT_VAR, TOKEN_VAR};

/// The signals the command starts with at their default dispositions:
/// SIGPIPE (onlyone, as every Rust program, ignores it) and the
/// job-control signals SIGTSTP, SIGTTIN and SIGTTOU (a terminal
/// multiplexer may leave them ignored, and ignored signals survive exec).
const DEFAULTS: [i32; 4] = [
    rustix::process::Signal::PIPE.as_raw(),
    rustix::process::Signal::TSTP.as_raw(),
    rustix::process::Signal::TTIN.as_raw(),
    rustix::process::Signal::TTOU.as_raw(),
];

/// A command ready for `posix_spawn(3)`: the resolved path, argv and envp.
pub(super) struct Exec {
    path: CString,
    args: Vec<CString>,
    env: Vec<CString>,
}

impl Exec {
    pub(super) fn new(
        program: &OsString,
        args: &[OsString],
        vars: &[(&'static str, OsString)],
        withheld: &[&str],
    ) -> io::Result<Exec> {
        let resolved = resolve(program)?;
        // Each C string built once from its parts, with room for the NUL
        // that CString::new adds in place: a start copies the whole
        // environment.
        let cstr = |parts: &[&[u8]]| {
            let mut v = Vec::with_capacity(parts.iter().map(|p| p.len()).sum::<usize>() + 1);
            for p in parts {
                v.extend_from_slice(p);
            }
            CString::new(v).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an argument contains a NUL byte",
                )
            })
        };
        let path = cstr(&[resolved.as_os_str().as_bytes()])?;
        let mut all_args = Vec::with_capacity(1 + args.len());
        all_args.push(cstr(&[program.as_bytes()])?);
        for a in args {
            all_args.push(cstr(&[a.as_bytes()])?);
        }
        let inherited = std::env::vars_os();
        let mut env = Vec::with_capacity(inherited.size_hint().0 + vars.len());
        for (k, v) in inherited {
            if k == LOCK_VAR
                || k == TOKEN_VAR
                || k == FENCE_VAR
                || k == RUN_ID_VAR
                || k == SLOT_VAR
                || withheld.iter().any(|w| k == *w)
            {
                continue;
            }
            env.push(cstr(&[k.as_bytes(), b"=", v.as_bytes()])?);
        }
        for (k, v) in vars {
            env.push(cstr(&[k.as_bytes(), b"=", v.as_bytes()])?);
        }
        Ok(Exec {
            path,
            args: all_args,
            env,
        })
    }

    /// Starts the command in a process group of its own, with an empty
    /// signal mask and [`DEFAULTS`] at their defaults; returns its pid once
    /// it has exec'd.
    pub(super) fn spawn(&self) -> io::Result<u32> {
        crate::sys::spawn(&self.path, &self.args, &self.env, &DEFAULTS)
    }
}

/// Finds `program` as execvp(3) would: as given when it has a `/`, else in
/// each directory of `$PATH`. A file found but not executable is
/// PermissionDenied, nothing found is NotFound.
fn resolve(program: &OsString) -> io::Result<PathBuf> {
    use rustix::fs::Access;
    if program.as_bytes().contains(&b'/') {
        return Ok(program.into());
    }
    if program.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "an empty command name",
        ));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut denied = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            ".".into()
        } else {
            dir
        };
        let candidate = dir.join(program);
        match std::fs::metadata(&candidate) {
            Ok(m) if m.is_file() => {
                if rustix::fs::access(&candidate, Access::EXEC_OK).is_ok() {
                    return Ok(candidate);
                }
                denied.get_or_insert(candidate);
            }
            _ => {}
        }
    }
    match denied {
        Some(p) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("`{}` is not executable", p.display()),
        )),
        None => Err(io::Error::new(
            io::ErrorKind::NotFound,
            "not found in $PATH",
        )),
    }
}
