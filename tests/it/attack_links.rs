//! Another account against the files root's jobs change in a shared lock
//! directory (issue 44, item 5): a hard link of a file of root's, planted
//! under a name onlyone opens there, never has its mode changed (nor is
//! used as the removal guard). The attacker is `nobody`, in a private
//! mount and PID namespace with fresh tmpfs `/run` and `/tmp`
//! ([`Ns::with_pids`]); the lock directory is the shared `/run/lock`
//! (1777).
//!
//! With `fs.protected_hardlinks=1` (the default), nobody may link a file
//! it does not own only when it may read and write it: the victim is a
//! root file of mode 0666 (with the protection off, any file of root's on
//! that filesystem would do: `/etc/passwd`, a setuid program).

use crate::support;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use support::ns::{NOBODY, Ns};

const LIMIT: Duration = Duration::from_secs(60);

/// The victim, on the filesystem of `/run/lock`: a root file nobody may
/// link (it may read and write it), of mode 0666.
const VICTIM: &str = "/run/victim";

/// Makes the victim, has nobody link it as `name` in `/run/lock`, and
/// returns the namespace, or `None` where it cannot be made.
fn planted(test: &str, name: &str) -> Option<Ns> {
    let ns = Ns::with_pids(test)?;
    ns.must(
        None,
        &format!("printf 'root data\\n' > {VICTIM} && chmod 0666 {VICTIM}"),
    );
    ns.must(Some(NOBODY), &format!("ln {VICTIM} /run/lock/{name}"));
    assert_eq!(victim(&ns).nlink(), 2);
    Some(ns)
}

fn victim(ns: &Ns) -> std::fs::Metadata {
    std::fs::metadata(ns.host_path(VICTIM)).unwrap()
}

/// The victim is as it was: root's, mode 0666, its content.
fn untouched(ns: &Ns, what: &str) {
    let v = victim(ns);
    assert_eq!(
        v.mode() & 0o7777,
        0o666,
        "{what} changed the mode of root's file through nobody's hard link"
    );
    assert_eq!(v.uid(), 0, "{what}");
    assert_eq!(
        std::fs::read_to_string(ns.host_path(VICTIM)).unwrap(),
        "root data\n",
        "{what}"
    );
}

/// nobody hard-links root's file as root's removal guard in `/run/lock`
/// (`.onlyone-guard.0`). Root's run there, its release and a `stop` of
/// it never change that file's mode, nor take the link for the guard:
/// the removal is refused, naming the guard and that it is a hard link.
#[test]
fn a_hard_link_planted_as_the_removal_guard_is_refused_and_never_chmodded() {
    let Some(ns) = planted(
        "a_hard_link_planted_as_the_removal_guard",
        ".onlyone-guard.0",
    ) else {
        return;
    };
    let out = ns.run(
        ns.oo(None, &["--dir", "/run/lock", "run", "job", "--", "true"]),
        LIMIT,
        "root's run",
    );
    untouched(&ns, "root's run and release");
    assert!(
        out.stderr.contains("/run/lock/.onlyone-guard.0")
            && out.stderr.contains("hard link")
            && out.stderr.contains("remove it"),
        "{out:#?}"
    );
    for args in [
        &["--dir", "/run/lock", "stop", "job"][..],
        &["--dir", "/run/lock", "run", "job", "--", "true"],
        &["--dir", "/run/lock", "release", "--force", "job"],
    ] {
        let out = ns.run(ns.oo(None, args), LIMIT, &args.join(" "));
        untouched(&ns, &args.join(" "));
        assert!(out.stderr.contains("hard link"), "{out:#?}");
    }
    // Once root removes nobody's name for its file, the directory works.
    ns.must(None, "rm /run/lock/.onlyone-guard.0");
    ns.run(
        ns.oo(None, &["--dir", "/run/lock", "run", "job", "--", "true"]),
        LIMIT,
        "root's run once the link is gone",
    )
    .expect(0);
    untouched(&ns, "root's run once the link is gone");
    let guard = std::fs::metadata(ns.host_path("/run/lock/.onlyone-guard.0")).unwrap();
    assert_eq!((guard.mode() & 0o7777, guard.nlink()), (0o600, 1));
}

/// nobody hard-links root's file as the journal an earlier version kept
/// beside root's lock (`job.lock.journal`, and its older generation). The
/// first event of root's job (its journal is new) makes an earlier
/// journal of root's that others can read 0600; never that link.
#[test]
fn a_hard_link_planted_as_an_earlier_journal_is_never_chmodded() {
    let Some(ns) = planted(
        "a_hard_link_planted_as_an_earlier_journal",
        "job.lock.journal",
    ) else {
        return;
    };
    ns.must(
        Some(NOBODY),
        &format!("ln {VICTIM} /run/lock/job.lock.journal.1"),
    );
    let out = ns.run(
        ns.oo(None, &["--dir", "/run/lock", "run", "job", "--", "true"]),
        LIMIT,
        "root's run",
    );
    out.expect(0);
    untouched(&ns, "root's first journal event");
    // An earlier journal that is root's alone (one name) is still made
    // root's alone, at the first event of another job.
    ns.must(
        None,
        "printf '' > /run/lock/other.lock.journal && chmod 0644 /run/lock/other.lock.journal",
    );
    ns.run(
        ns.oo(None, &["--dir", "/run/lock", "run", "other", "--", "true"]),
        LIMIT,
        "root's run of another job",
    )
    .expect(0);
    let own = std::fs::metadata(ns.host_path("/run/lock/other.lock.journal")).unwrap();
    assert_eq!(own.mode() & 0o7777, 0o600);
    untouched(&ns, "root's run of another job");
}
