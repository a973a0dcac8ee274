//! Another account attacks a root job (SPEC "Files others can touch are
//! hostile"; issue: multi-user hosts). Every test runs in a private mount
//! namespace with fresh tmpfs `/run` and `/tmp` ([`support::ns::Ns`]), so
//! root's default paths are real, and the attacker is `nobody` or a uid
//! with no passwd entry, with nothing but an ordinary account.

mod support;

use std::time::Duration;

use support::ns::{NOBODY, Ns};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// A record as a forger writes it: a live process's real pid and start
/// time (public in /proc/PID/stat), this boot, this host.
fn forged_record(pid: u32, start: u64) -> String {
    format!(
        "{pid}\nstart={start}\nboot={}\ntoken={}\nsince=1764400000\nhost={}\nmode=run\n\
         cmd=sleep 100000\nonlyone=1\n",
        boot_id(),
        "f".repeat(32),
        onlyone::procfs::host_name()
    )
}

#[test]
fn the_namespace_has_fresh_defaults() {
    let Some(ns) = Ns::new("the_namespace_has_fresh_defaults") else {
        return;
    };
    let out = ns.must(None, "ls -A /run /tmp; stat -c %a /tmp /run/lock");
    assert!(!out.stdout.contains("onlyone"), "{out:#?}");
    assert!(out.stdout.ends_with("1777\n1777\n"), "{out:#?}");
    let out = ns.run(ns.oo(Some(NOBODY), &["--version"]), LIMIT, "onlyone as nobody");
    out.expect(0);
}

/// Item 1: nobody forges a record in a sticky world-writable directory
/// naming a root daemon with its real start time. Root's precheck does
/// not skip, and run --replace and stop never signal the daemon.
#[test]
fn a_forged_record_never_makes_root_signal_a_process_of_another_user() {
    let Some(mut ns) = Ns::new("a_forged_record_never_makes_root_signal") else {
        return;
    };
    let (daemon, start) = ns.root_daemon();
    for dir in ["/run/lock", "/tmp"] {
        let lock = format!("{dir}/job.lock");
        ns.must(
            Some(NOBODY),
            &format!("printf '%s' '{}' > {lock}", forged_record(daemon, start)),
        );
        let out = ns.run(ns.oo(None, &["--dir", dir, "precheck", "job"]), LIMIT, "precheck");
        out.expect(0);
        let out = ns.run(ns.oo(None, &["--dir", dir, "stop", "job"]), LIMIT, "stop");
        assert_ne!(out.code(), 0, "stop claims to have stopped a forged run: {out:#?}");
        assert_untouched(daemon);
        let out = ns.run(
            ns.oo(None, &["--dir", dir, "run", "--replace", "job", "--", "true"]),
            LIMIT,
            "run --replace",
        );
        out.expect(0);
        assert_untouched(daemon);
        let out = ns.run(ns.oo(None, &["--dir", dir, "run", "job", "--", "true"]), LIMIT, "run");
        out.expect(0);
        assert_untouched(daemon);
        assert!(alive(daemon, start));
    }
}
