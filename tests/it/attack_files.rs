//! Another account attacks the files and names around onlyone's locks:
//! the temp file of `metrics --textfile`, the lock directory onlyone
//! creates, a uid with no passwd entry, and a default directory squatted
//! before its user first runs. Every test runs in a private mount namespace
//! with fresh tmpfs `/run` and `/tmp` ([`support::ns::Ns`]); the attacker
//! is `nobody` or a uid without a passwd entry.

use crate::support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use support::ns::{NO_PASSWD, NOBODY, Ns};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// How many times each race is run.
const TRIES: usize = 20;

/// An inotify racer, run as the attacker: on each new entry of DIR it
/// swaps what onlyone just created for a symlink to TARGET. `file`: a new
/// `*.tmp` file is replaced by a link (rename over it); `dir`: a new
/// `locks` is renamed away and a link put in its place.
const RACER: &str = r#"
import ctypes, os, struct, sys
mode, d, target, ready = sys.argv[1:5]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
if fd < 0 or libc.inotify_add_watch(fd, d.encode(), 0x100) < 0:
    sys.exit("inotify: errno %d" % ctypes.get_errno())
open(ready, "w").close()
n = 0
while True:
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        _, mask, _, ln = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16 : i + 16 + ln].rstrip(b"\0").decode("utf-8", "replace")
        i += 16 + ln
        p = os.path.join(d, name)
        n += 1
        try:
            if mode == "file" and name.endswith(".tmp") and not os.path.islink(p):
                os.symlink(target, p + ".x")
                os.rename(p + ".x", p)
            elif mode == "dir" and name == "locks" and not os.path.islink(p):
                os.rename(p, "%s.moved.%d" % (p, n))
                os.symlink(target, p)
        except OSError:
            pass
"#;

/// Puts the racer at `/tmp/racer.py` in the namespace and starts it as
/// nobody on `dir`, swapping in links to `target`.
fn start_racer(ns: &mut Ns, mode: &str, dir: &str, target: &str) -> u32 {
    let script = ns.host_path("/tmp/racer.py");
    std::fs::write(&script, RACER).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let ready = format!("/tmp/racer-ready-{mode}-{}", dir.replace('/', "_"));
    ns.attacker(
        NOBODY,
        &format!("exec /usr/bin/python3 /tmp/racer.py {mode} {dir} {target} {ready}"),
        &ready,
    )
}

fn mode_of(ns: &Ns, path: &str) -> u32 {
    std::fs::metadata(ns.host_path(path)).unwrap().mode() & 0o7777
}

fn have_racer_python() -> bool {
    let ok = std::path::Path::new("/usr/bin/python3").exists();
    if !ok {
        eprintln!("/usr/bin/python3 is missing; skipped");
    }
    ok
}

/// Item: `metrics --textfile` in a directory another account can write.
/// nobody swaps each new temp file for a symlink to a root-only file the
/// moment it appears; the root-only file keeps its mode every time, and
/// metrics succeeds or fails cleanly.
#[test]
fn metrics_textfile_never_chmods_through_a_swapped_temp_file() {
    let Some(mut ns) = Ns::new("metrics_textfile_never_chmods_through_a_swapped_temp_file") else {
        return;
    };
    if !have_racer_python() {
        return;
    }
    ns.must(
        None,
        "umask 077; echo secret > /run/secret; chmod 0600 /run/secret; \
         mkdir -m 0777 /tmp/open; mkdir -m 1777 /tmp/shared; chmod 0777 /tmp/open",
    );
    ns.run(ns.oo(None, &["run", "job", "--", "true"]), LIMIT, "run")
        .expect(0);
    for dir in ["/tmp/open", "/tmp/shared"] {
        let racer = start_racer(&mut ns, "file", dir, "/run/secret");
        let textfile = format!("{dir}/onlyone.prom");
        for i in 0..TRIES {
            let out = ns.run(
                ns.sh(
                    None,
                    &format!(
                        "umask 077; exec {} metrics --textfile {textfile}",
                        support::ns::OO
                    ),
                ),
                LIMIT,
                "metrics --textfile",
            );
            assert!(running(racer), "the racer died");
            assert_eq!(
                mode_of(&ns, "/run/secret"),
                0o600,
                "try {i} in {dir}: metrics chmod'ed root's file through a swapped temp file: {out:#?}"
            );
            if out.code() == 0 {
                // What landed is what onlyone wrote, or the attacker's link.
                let meta = std::fs::symlink_metadata(ns.host_path(&textfile)).unwrap();
                assert!(
                    meta.file_type().is_symlink() || meta.mode() & 0o7777 == 0o644,
                    "try {i}: {meta:?}"
                );
            } else {
                assert!(out.stderr.contains("cannot write the metrics"), "{out:#?}");
            }
        }
        assert_eq!(
            std::fs::read_to_string(ns.host_path("/run/secret")).unwrap(),
            "secret\n"
        );
    }
}

/// Item: root, with umask 077, creates `--dir` in a parent another account
/// can write; nobody swaps the new directory for a symlink to a root-only
/// directory the moment it appears. The target's mode never changes; the
/// directory is refused where it could be swapped (0777) and made, root's
/// and 0755, where it cannot (1777).
#[test]
fn creating_the_lock_dir_never_chmods_through_a_swapped_path() {
    let Some(mut ns) = Ns::new("creating_the_lock_dir_never_chmods_through_a_swapped_path") else {
        return;
    };
    if !have_racer_python() {
        return;
    }
    ns.must(
        None,
        "mkdir -m 0700 /run/secret-dir; mkdir /tmp/open /tmp/shared; \
         chmod 0777 /tmp/open; chmod 1777 /tmp/shared",
    );
    for parent in ["/tmp/open", "/tmp/shared"] {
        let racer = start_racer(&mut ns, "dir", parent, "/run/secret-dir");
        let dir = format!("{parent}/locks");
        for i in 0..TRIES {
            ns.must(
                None,
                &format!(
                    "rm -rf {dir} {dir}.moved.*; rm -rf /run/secret-dir/* /run/secret-dir/.[!.]*"
                ),
            );
            let out = ns.run(
                ns.sh(
                    None,
                    &format!(
                        "umask 077; exec {} --dir {dir} run job -- true",
                        support::ns::OO
                    ),
                ),
                LIMIT,
                "run --dir (created)",
            );
            assert!(running(racer), "the racer died");
            assert_eq!(
                mode_of(&ns, "/run/secret-dir"),
                0o700,
                "try {i} in {parent}: creating the lock directory chmod'ed another: {out:#?}"
            );
            if parent == "/tmp/open" {
                out.expect(125).says("cannot be trusted").says(parent);
                assert!(!ns.host_path(&dir).exists(), "try {i}: {dir} was made");
            } else {
                out.expect(0);
                let meta = std::fs::symlink_metadata(ns.host_path(&dir)).unwrap();
                assert!(meta.is_dir(), "try {i}: {meta:?}");
                assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o755), "try {i}");
            }
        }
    }
}

/// `passwd: files systemd` (Debian's and Fedora's default), in this
/// namespace only: the lookup that crashed a static onlyone.
fn nss_with_modules(ns: &Ns) {
    ns.must(
        None,
        "printf 'passwd: files systemd\\ngroup: files systemd\\n' > /run/nsswitch.conf; \
         mount --bind /run/nsswitch.conf /etc/nsswitch.conf",
    );
}

/// Item: a uid with no passwd entry runs commands that name users (a
/// foreign-owned directory, root's lock in status and stop, the store's
/// default user); each exits with its normal code, never a signal, and
/// names the user by number.
#[test]
fn a_uid_without_a_passwd_entry_is_named_by_number_never_crashes() {
    let Some(mut ns) = Ns::new("a_uid_without_a_passwd_entry_is_named_by_number") else {
        return;
    };
    nss_with_modules(&ns);
    let me = Some(NO_PASSWD);
    let uid = format!("uid {NO_PASSWD}");
    ns.must(None, "mkdir -m 0755 /tmp/nb && chown 65534:65534 /tmp/nb");
    let out = ns.run(
        ns.oo(me, &["--dir", "/tmp/nb", "run", "job", "--", "true"]),
        LIMIT,
        "run",
    );
    out.expect(125).says("owned by nobody").says(&uid);
    // root's job, seen and stopped by the uid.
    let job = ns.oo(None, &["run", "job", "--", "sleep", "100000"]);
    ns.keep(job);
    let record = ns.host_path("/run/onlyone/job.lock");
    wait_until("root's job holds its lock", LIMIT, || {
        std::fs::read_to_string(&record).is_ok_and(|r| r.contains("token="))
    });
    let out = ns.run(
        ns.oo(me, &["--dir", "/run/onlyone", "status", "job"]),
        LIMIT,
        "status",
    );
    out.expect(0);
    assert!(out.stdout.contains("job"), "{out:#?}");
    let out = ns.run(
        ns.oo(me, &["--dir", "/run/onlyone", "stop", "job"]),
        LIMIT,
        "stop",
    );
    assert!(out.code() != 0, "{out:#?}");
    out.says(&uid);
    let out = ns.run(
        ns.oo(me, &["--dir", "/run/onlyone", "precheck", "job"]),
        LIMIT,
        "precheck",
    );
    out.expect(75);
    // The store's default user is the operating system's: none in
    // /etc/passwd, so the driver asks NSS once connected (where a static
    // glibc binary crashed; such a build refuses first, naming the fix).
    // A server that accepts the connection, then hangs up: the startup
    // message, with its user, is written first. A precheck fails open.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let store = format!(
        "postgres://127.0.0.1:{}/db?sslmode=disable",
        server.local_addr().unwrap().port()
    );
    std::thread::spawn(move || {
        for conn in server.incoming().flatten() {
            let mut conn = conn;
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let _ = std::io::Read::read(&mut conn, &mut [0u8; 512]);
        }
    });
    let out = ns.run(
        ns.oo(me, &["--store", &store, "status", "job"]),
        LIMIT,
        "status --store",
    );
    out.expect(125);
    assert!(
        out.stderr.contains("the store") || out.stderr.contains("has no name"),
        "{out:#?}"
    );
    let out = ns.run(
        ns.oo(me, &["--store", &store, "precheck", "job"]),
        LIMIT,
        "precheck --store",
    );
    out.expect(0).says("fail open");
}

/// A record as a forger writes it: a live process's real pid and start
/// time (public in /proc/PID/stat), this boot, this host.
fn forged_record(pid: u32, start: u64, uid: u32) -> String {
    format!(
        "{pid}\nstart={start}\nboot={}\ntoken={}\nsince=1764400000\nhost={}\nuid={uid}\n\
         mode=run\ncmd=sleep 100000\nonlyone=1\n",
        boot_id(),
        "f".repeat(32),
        onlyone::procfs::host_name()
    )
}

/// Item: nobody squats `/tmp/onlyone-4242` before uid 4242 first runs, and
/// plants a record naming a process of 4242 with its real start. Every
/// command of 4242 refuses the directory, naming its owner and the fix,
/// before it reads or signals anything: precheck still exits 0 (fail
/// open), a reap 0, check UNKNOWN; nothing is written there and the
/// process is untouched. With `--dir`, the same directory is the caller's
/// choice: status reads it.
#[test]
fn a_squatted_default_dir_is_refused_by_every_command() {
    let Some(mut ns) = Ns::new("a_squatted_default_dir_is_refused_by_every_command") else {
        return;
    };
    let me = Some(NO_PASSWD);
    let mut c = ns.cmd(me, "sleep", &["100000"]);
    c.stdout(std::process::Stdio::null());
    let victim = ns.keep(c);
    wait_until("the victim runs sleep", LIMIT, || {
        std::fs::read_to_string(format!("/proc/{victim}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    let start = start_of(victim);
    let dir = format!("/tmp/onlyone-{NO_PASSWD}");
    ns.must(
        Some(NOBODY),
        &format!(
            "mkdir -m 0755 {dir} && printf '%s' '{}' > {dir}/job.lock",
            forged_record(victim, start, NO_PASSWD)
        ),
    );
    let listing = || {
        let mut l: Vec<String> = std::fs::read_dir(ns.host_path(&dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        l.sort();
        l
    };
    let before = listing();
    let cases: &[(&[&str], i32)] = &[
        (&["precheck", "job"], 0),
        (&["stop", "job"], 125),
        (&["status"], 125),
        (&["status", "job"], 125),
        (&["history", "job"], 125),
        (&["check", "job"], 3),
        (&["metrics"], 125),
        (&["reap", "job"], 0),
        (&["run", "job", "--", "true"], 125),
        (&["run", "--replace", "job", "--", "true"], 125),
        (&["acquire", "--owner", "1", "job"], 125),
        (&["release", "--force", "job"], 125),
    ];
    for (args, code) in cases {
        let out = ns.run(ns.oo(me, args), LIMIT, &format!("{args:?}"));
        out.expect(*code);
        let said = format!("{}{}", out.stdout, out.stderr);
        assert!(
            said.contains("cannot be trusted") && said.contains("owned by nobody"),
            "{args:?}: {out:#?}"
        );
        assert!(
            said.contains("rm -r") && said.contains("ONLYONE_DIR"),
            "{args:?}: {out:#?}"
        );
        assert_untouched(victim);
        assert_eq!(
            listing(),
            before,
            "{args:?} wrote in the squatted directory"
        );
    }
    let out = ns.run(
        ns.oo(me, &["acquire", "--export", "job"]),
        LIMIT,
        "acquire --export",
    );
    out.expect(125);
    assert_eq!(out.stdout, "exit 125\n", "{out:#?}");
    assert!(alive(victim, start));
    // A link squatted at the default name is refused the same way.
    ns.must(
        Some(NOBODY),
        &format!("mv {dir} /tmp/nb-dir && ln -s /tmp/nb-dir {dir}"),
    );
    let out = ns.run(ns.oo(me, &["precheck", "job"]), LIMIT, "precheck (link)");
    out.expect(0).says("owned by nobody");
    let out = ns.run(
        ns.oo(me, &["run", "job", "--", "true"]),
        LIMIT,
        "run (link)",
    );
    out.expect(125).says("cannot be trusted");
    // Named explicitly, the directory is the caller's choice: readers read.
    let out = ns.run(
        ns.oo(me, &["--dir", "/tmp/nb-dir", "status", "job"]),
        LIMIT,
        "status --dir",
    );
    out.expect(0);
    assert_untouched(victim);
}
