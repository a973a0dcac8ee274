//! Another account attacks a root job through the paths it reads and opens
//! (issue 34, "Multi-user hosts, round two"): an earlier version's journal
//! beside a lock in a shared directory, forged to vouch for a job that
//! never ran. Each test runs in a private mount
//! namespace with fresh tmpfs `/run` and `/tmp` ([`support::ns::Ns`]), the
//! attacker `nobody`.

use crate::support;

use std::time::Duration;

use support::ns::{NOBODY, Ns};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// A run an earlier version would have journaled beside its lock: started
/// and ended with exit 0 at the end of the year 9999, as a forger dates it.
const FORGED: &str = "{\"v\":1,\"time\":253402300000,\"event\":\"start\",\
     \"token\":\"ffffffffffffffffffffffffffffffff\",\"pid\":1,\"mode\":\"run\",\"cmd\":\"backup\"}\n\
     {\"v\":1,\"time\":253402300001,\"event\":\"end\",\
     \"token\":\"ffffffffffffffffffffffffffffffff\",\"pid\":1,\"exit\":0,\"duration\":1.0}\n";

/// True when `text` shows the forged run's times, in any of the forms a
/// number takes (`253402300001`, `2.53402300001e11`) or a date (9999).
fn shows_the_forgery(text: &str) -> bool {
    text.contains("25340230000") || text.contains("2.534023") || text.contains("9999-12-31")
}

/// Item 8: in a shared directory (`/run/lock`), nobody plants an earlier
/// version's journal beside root's lock, with a success dated 9999, and
/// holds the lock with flock(1) so that root's fires skip. Root's `check
/// --max-age 1h --max-skips 3` is not OK, and neither `metrics`, `history`
/// nor `status` shows the forged success; each says once, naming the file,
/// why it was set aside. Root's own earlier journal beside a lock is still
/// read, and one of root's that others may write is set aside too.
#[test]
fn a_forged_earlier_journal_never_vouches_for_a_root_job() {
    let Some(mut ns) = Ns::new("a_forged_earlier_journal_never_vouches_for_a_root_job") else {
        return;
    };
    std::fs::write(ns.host_path("/tmp/forged"), FORGED).unwrap();
    ns.attacker(
        NOBODY,
        "cd /run/lock && cp /tmp/forged backup.lock.journal && cp /tmp/forged \
         backup.lock.journal.1 && : > backup.lock && \
         exec flock backup.lock sh -c 'touch /tmp/held; exec sleep 100000'",
        "/tmp/held",
    );
    let root = |args: &[&str]| {
        let mut all = vec!["--dir", "/run/lock"];
        all.extend_from_slice(args);
        ns.run(ns.oo(None, &all), LIMIT, &all.join(" "))
    };
    for _ in 0..5 {
        root(&["run", "backup", "--", "true"]).expect(75);
    }
    let set_aside = |out: &Out| {
        for f in ["backup.lock.journal", "backup.lock.journal.1"] {
            let path = format!("/run/lock/{f}`");
            assert_eq!(
                out.stderr.matches(&path).count(),
                1,
                "{f} named once: {out:#?}"
            );
        }
        out.says("nobody").says("an earlier version's journal");
    };

    let out = root(&["check", "backup", "--max-age", "1h", "--max-skips", "3"]);
    assert_ne!(out.code(), 0, "{out:#?}");
    assert!(out.stdout.starts_with("ONLYONE CRITICAL"), "{out:#?}");
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");
    set_aside(&out);

    let out = root(&["metrics", "backup"]);
    out.expect(0);
    assert!(
        out.stdout
            .contains("onlyone_last_success_timestamp_seconds{lock=\"backup\"} 0\n"),
        "{out:#?}"
    );
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");
    assert!(
        out.stdout
            .contains("onlyone_skipped_total{lock=\"backup\"} 5\n"),
        "{out:#?}"
    );
    set_aside(&out);

    let out = root(&["history", "backup", "--json"]);
    out.expect(0);
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");
    set_aside(&out);

    let out = root(&["status", "backup", "--json"]);
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");

    // Root's own earlier journal is believed; made writable by others, it
    // is not.
    ns.must(
        None,
        "cd /run/lock && cp /tmp/forged mine.lock.journal && chmod 0600 mine.lock.journal && \
         cp /tmp/forged loose.lock.journal && chmod 0666 loose.lock.journal",
    );
    let out = root(&["history", "mine", "--json"]);
    out.expect(0).quiet();
    assert!(shows_the_forgery(&out.stdout), "{out:#?}");
    let out = root(&["history", "loose", "--json"]);
    out.expect(0)
        .says("/run/lock/loose.lock.journal")
        .says("0666");
    assert!(!shows_the_forgery(&out.stdout), "{out:#?}");
}
