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

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
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
