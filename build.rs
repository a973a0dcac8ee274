//! Links the GCC runtime's unwinder (`libgcc_eh.a`) into `onlyone` itself
//! where the C library is glibc, as `gcc -static-libgcc` does for a C
//! program, so that the binary needs `libc.so.6` alone.
//!
//! Rust's standard library otherwise takes its unwinder from
//! `libgcc_s.so.1`, and every start of `onlyone` pays for that library:
//! the loader maps and relocates it, and its constructor asks the CPU for
//! its features (`cpuid`, which a virtual machine traps: about 8 µs each
//! on the machines the benchmarks ran on). That was 0.25-0.5 ms of every
//! `onlyone run`, as much as a static build saves (BENCHMARKS.md), while
//! the binary stays dynamically linked against glibc, whose NSS modules a
//! static binary cannot load.
//!
//! Nothing changes where the archive is not found (the build says so), for
//! musl, and for a static build (`+crt-static`), which links it already.
//!
//! It also hands the linker the order of the start's code,
//! `build/start-order.txt` (written by `bench/order.sh`): the functions a
//! fire runs, placed side by side, so that a start faults in a few blocks of
//! code rather than one for each function (BENCHMARKS.md, "The start's code
//! side by side"). Only a linker that takes `--symbol-ordering-file` (LLD,
//! rustc's default for x86_64 glibc) gets it: the build tries it on an empty
//! program first.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    order_the_start();
    let var = |k: &str| env::var(k).unwrap_or_default();
    let glibc = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    let static_crt = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|f| f == "crt-static");
    if !glibc || static_crt {
        return;
    }
    // The driver that links `onlyone` knows where its archive is; a bare
    // name back means it has none.
    let linker = env::var_os("RUSTC_LINKER").unwrap_or_else(|| "cc".into());
    let found = Command::new(&linker)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_absolute() && p.is_file());
    match found {
        // Named before the standard library's `-lgcc_s`, the archive
        // provides the unwinder, and the linker (`--as-needed`) then
        // leaves libgcc_s.so.1 out.
        Some(_) => println!("cargo:rustc-link-lib=static=gcc_eh"),
        None => println!(
            "cargo:warning=libgcc_eh.a not found by {}: onlyone links libgcc_s.so.1, which costs \
             every start a fraction of a millisecond",
            linker.to_string_lossy()
        ),
    }
}

/// Passes `build/start-order.txt` to the linker of `onlyone` where the
/// linker takes it. Names it does not find (another toolchain's hashes) are
/// left out quietly: the order costs speed when stale, never correctness.
fn order_the_start() {
    println!("cargo:rerun-if-changed=build/start-order.txt");
    let list = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
        .join("build/start-order.txt");
    if !list.is_file() {
        return;
    }
    let args = [
        format!("-Wl,--symbol-ordering-file={}", list.display()),
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ];
    if !links_with(&args) {
        if env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu") {
            println!(
                "cargo:warning=the linker takes no --symbol-ordering-file: onlyone's start \
                 faults in its code in more blocks (LLD takes it)"
            );
        }
        return;
    }
    for arg in args {
        println!("cargo:rustc-link-arg-bin=onlyone={arg}");
    }
}

/// Whether rustc links an empty program for the target, with the flags the
/// build gives it (RUSTFLAGS, a configured linker), and `args` besides.
fn links_with(args: &[String]) -> bool {
    let (Some(rustc), Some(out)) = (env::var_os("RUSTC"), env::var_os("OUT_DIR")) else {
        return false;
    };
    let out = PathBuf::from(out);
    let source = out.join("order_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut cmd = Command::new(rustc);
    cmd.arg("--crate-type=bin")
        .arg("--edition=2021")
        .arg("-o")
        .arg(out.join("order_probe"))
        .arg(&source);
    if let Ok(target) = env::var("TARGET") {
        cmd.arg("--target").arg(target);
    }
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        cmd.arg("-C")
            .arg(format!("linker={}", linker.to_string_lossy()));
    }
    if let Ok(flags) = env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    for arg in args {
        cmd.arg("-C").arg(format!("link-arg={arg}"));
    }
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
