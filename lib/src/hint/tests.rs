//! No message of the library names an option of a program.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::TakeOver;
use crate::error::{Error, HeldBy};
use crate::journal::{EndReason, SetAside};
use crate::lock::verdict::{Holder, StaleReason, UnknownReason};
use crate::lock::work::NotWork;
use crate::names::{self, DirSource, StateSource};
use crate::place::store::StoreError;
use crate::place::store::timing::LeaseTimingError;
use crate::record::{NotARecord, Record};
use crate::schedule::ScheduleError;
use crate::state::StateDir;
use crate::supervise::RunError;

/// What the library's messages say of another program's options:
/// nsenter's, not a program's that uses the library.
const OTHER_PROGRAMS: [&str; 1] = ["nsenter --pid --target PID"];

/// Whether `text` names an option: `--` then a letter, once the other
/// programs' commands are taken out.
fn names_an_option(text: &str) -> bool {
    let mut text = text.to_owned();
    for other in OTHER_PROGRAMS {
        text = text.replace(other, "");
    }
    text.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'-' && w[1] == b'-' && w[2].is_ascii_alphabetic())
}

/// A run's record of pid 4242.
fn record() -> Record {
    let mut r = Record::parse(b"4242\n").unwrap();
    r.cmd = Some("./sync.sh".into());
    r.since = Some(1);
    r
}

/// Every kind of holder.
fn holders() -> Vec<Holder> {
    vec![
        Holder::KernelLock { pid: 1 },
        Holder::Owner { pid: 1 },
        Holder::OwnerUnverified { pid: 1 },
        Holder::Command { pid: 1 },
        Holder::OtherKernelLock { owner: 1 },
        Holder::OtherNamespace { pid: 1, ns: 2 },
        Holder::Outside,
        Holder::Member {
            pid: 1,
            cmd: Some("sleep 300".into()),
        },
    ]
}

/// A lock held by `holder`.
fn held(holder: Holder) -> Box<HeldBy> {
    Box::new(HeldBy::new(
        PathBuf::from("/run/onlyone/j.lock"),
        record(),
        holder,
    ))
}

/// Every reason a lock is stale.
fn stale_reasons() -> Vec<StaleReason> {
    vec![
        StaleReason::Exited { pid: 1, run: true },
        StaleReason::Reused {
            pid: 1,
            now: 2,
            recorded: 3,
            run: false,
        },
        StaleReason::Foreign {
            pid: 1,
            user: "bob".into(),
            writer: "ann".into(),
            run: true,
        },
        StaleReason::Zombie { pid: 1, run: false },
        StaleReason::PreviousBoot,
        StaleReason::PidNamespaceGone { ns: 4 },
        StaleReason::UnreadableFromPreviousBoot {
            why: "empty".into(),
        },
    ]
}

/// Every reason a lock cannot be judged.
fn unknown_reasons() -> Vec<UnknownReason> {
    vec![
        UnknownReason::Unreadable {
            why: "empty".into(),
        },
        UnknownReason::OtherPidNamespace {
            theirs: 1,
            ours: 2,
            member: Some(3),
        },
        UnknownReason::PidNamespaceUnseen {
            theirs: 1,
            unreadable: 2,
            nested: true,
        },
        UnknownReason::PidNamespaceUnseen {
            theirs: 1,
            unreadable: 2,
            nested: false,
        },
        UnknownReason::NewerFormat { version: 9 },
        UnknownReason::NoProc {
            why: "no /proc".into(),
        },
        UnknownReason::CannotScan { why: "EIO".into() },
        UnknownReason::OtherHost { host: "b".into() },
        UnknownReason::OtherTimeNamespace { theirs: 1 },
        UnknownReason::Denied {
            owner: "root".into(),
        },
        UnknownReason::Denied {
            owner: "ann".into(),
        },
    ]
}

/// Every kind of error, each way its message differs.
fn errors() -> Vec<Error> {
    let path = PathBuf::from("/run/onlyone/j.lock");
    let dir = PathBuf::from("/run/onlyone");
    let mut out: Vec<Error> = holders()
        .into_iter()
        .map(|h| Error::Held(held(h)))
        .collect();
    out.extend(unknown_reasons().into_iter().map(|reason| Error::Unknown {
        path: path.clone(),
        reason,
    }));
    out.extend([
        Error::Timeout {
            waited: Duration::from_secs(3),
            held: held(Holder::Owner { pid: 1 }),
        },
        Error::Queued {
            held: held(Holder::Owner { pid: 1 }),
            waiter: held(Holder::Owner { pid: 2 }),
        },
        Error::Contended {
            path: path.clone(),
            tries: 3,
        },
        Error::NotALock {
            path: path.clone(),
            why: "empty".into(),
        },
        Error::Symlink { path: path.clone() },
        Error::NotRegular {
            path: path.clone(),
            kind: "directory",
        },
        Error::MissingDir { dir: dir.clone() },
        Error::UnsafeDir {
            dir: dir.clone(),
            why: "mode 777".into(),
        },
        Error::UntrustedDir {
            dir: dir.clone(),
            why: "mode 777".into(),
            fix: "chmod go-w it".into(),
        },
        Error::ForeignLink {
            dir: dir.clone(),
            link: dir.clone(),
            owner: "bob".into(),
            me: "ann".into(),
        },
        Error::HardLinkedLink {
            dir: dir.clone(),
            link: dir.clone(),
        },
        Error::MountPoint { path: path.clone() },
    ]);
    out.extend(errors_of_removal_and_runs(&path, &dir));
    out
}

/// The errors of removing, owning and stopping a lock, and of bad names.
fn errors_of_removal_and_runs(path: &Path, dir: &Path) -> Vec<Error> {
    let (path, dir) = (path.to_path_buf(), dir.to_path_buf());
    let io = || io::Error::from(io::ErrorKind::PermissionDenied);
    vec![
        Error::CannotRemove {
            path: path.clone(),
            why: "EPERM".into(),
            me: "ann".into(),
            owner: "root".into(),
            state: Some("stale (it exited)".into()),
        },
        Error::CannotRemove {
            path: path.clone(),
            why: "EPERM".into(),
            me: "ann".into(),
            owner: "bob".into(),
            state: None,
        },
        Error::SharedFs {
            dir: dir.clone(),
            kind: "nfs",
        },
        Error::UnsafeGuard {
            path: path.clone(),
            why: "a link".into(),
        },
        Error::GuardBusy {
            dir: dir.clone(),
            waited: Duration::from_secs(1),
        },
        Error::NotOwner {
            pid: 7,
            held: held(Holder::Owner { pid: 1 }),
        },
        Error::Lost { path: path.clone() },
        Error::NotPermitted {
            path: path.clone(),
            pid: 1,
            owner: "root".into(),
            me: "ann".into(),
        },
        Error::NotPermitted {
            path: path.clone(),
            pid: 1,
            owner: "bob".into(),
            me: "ann".into(),
        },
        Error::NotStopped {
            path: path.clone(),
            waited: Duration::from_secs(1),
        },
        Error::StopSelf { path: path.clone() },
        Error::OtherAccount {
            path: path.clone(),
            owner: "nobody".into(),
            pid: 1,
        },
        Error::BadOwner {
            pid: 1,
            why: "gone".into(),
            source: None,
        },
        Error::BadToken { token: "x".into() },
        Error::BadName {
            name: "-x".into(),
            why: "it starts with `-`".into(),
        },
        Error::BadPath {
            path: path.clone(),
            why: "empty".into(),
        },
        Error::Io {
            op: "open",
            path,
            source: io(),
        },
    ]
}

/// Every kind of store error.
fn store_errors() -> Vec<StoreError> {
    let url = || "postgres://u@h/d".to_owned();
    let source = || -> crate::place::store::BoxError { "boom".into() };
    vec![
        StoreError::Unreachable {
            url: url(),
            detail: "refused".into(),
            hint: "",
            source: None,
        },
        StoreError::TimedOut {
            url: url(),
            after: Duration::from_secs(2),
        },
        StoreError::Dropped {
            url: url(),
            detail: "bye".into(),
            source: source(),
        },
        StoreError::NotTarget {
            url: url(),
            at: PathBuf::from("/run/pg"),
            want: "read-write",
        },
        StoreError::Credentials {
            url: url(),
            detail: "no".into(),
            check: "the user and PGPASSWORD or ~/.pgpass",
            source: source(),
        },
        StoreError::NotAllowed {
            url: url(),
            detail: "no".into(),
            source: source(),
        },
        StoreError::Untrusted {
            url: url(),
            why: "no".into(),
        },
        StoreError::Server {
            url: url(),
            detail: "no".into(),
            source: source(),
        },
        StoreError::NoTables {
            what: "tables",
            source: Box::new(StoreError::NoLine),
        },
        StoreError::BadRow {
            url: url(),
            what: "lease row",
            source: source(),
        },
        StoreError::BadUrl("no".into()),
        StoreError::NoSlots {
            url: url(),
            detail: "must be owner of table onlyone_lease".into(),
            how: "ALTER TABLE onlyone_lease ADD COLUMN slots integer;\n",
        },
        StoreError::NoLine,
        StoreError::NotBuilt {
            engine: "PostgreSQL",
            feature: "postgres",
        },
        StoreError::UnknownScheme,
        StoreError::Runtime {
            what: "the renewals",
            source: io::Error::from(io::ErrorKind::OutOfMemory),
        },
    ]
}

/// The other messages: takeovers, lease timings, records, runs,
/// schedules, work and journals.
fn other_notices() -> Vec<String> {
    let mut out: Vec<String> = stale_reasons().iter().map(ToString::to_string).collect();
    out.extend(stale_reasons().into_iter().map(|reason| {
        TakeOver {
            record: Some(record()),
            reason,
            told: false,
        }
        .to_string()
    }));
    out.extend(
        [
            LeaseTimingError::TooShort {
                lease: Duration::from_millis(100),
            },
            LeaseTimingError::GraceTooLong {
                grace: Duration::from_secs(9),
                lease: Duration::from_secs(10),
                renew: Duration::from_secs(3),
                call: Duration::from_secs(2),
                margin: Duration::from_secs(1),
                largest: Duration::from_secs(4),
            },
        ]
        .iter()
        .map(ToString::to_string),
    );
    out.extend(
        [
            NotARecord::Empty,
            NotARecord::TooLarge,
            NotARecord::Nul,
            NotARecord::NotUtf8,
            NotARecord::NoPid,
            NotARecord::NotKeyValue { line: 2 },
            NotARecord::BadKey {
                line: 2,
                key: "k".into(),
            },
            NotARecord::DuplicateKey { key: "k".into() },
            NotARecord::ControlChars { key: "k".into() },
            NotARecord::BadValue {
                key: "k".into(),
                why: "no".into(),
            },
        ]
        .iter()
        .map(ToString::to_string),
    );
    out.extend(
        [
            RunError::Lock(Error::Lost {
                path: PathBuf::from("/x"),
            }),
            RunError::Supervise(io::Error::from(io::ErrorKind::Other)),
        ]
        .iter()
        .map(ToString::to_string),
    );
    out.extend(
        [
            ScheduleError::Empty,
            ScheduleError::Reboot,
            ScheduleError::UnknownNickname { name: "@x".into() },
        ]
        .iter()
        .map(ToString::to_string),
    );
    out.extend(
        [
            NotWork::LaterSession {
                server: 1,
                leader: 2,
            },
            NotWork::ServerInUse,
            NotWork::Outside,
        ]
        .iter()
        .map(ToString::to_string),
    );
    out.push(
        SetAside {
            path: PathBuf::from("/x"),
            why: "no".into(),
        }
        .to_string(),
    );
    out.extend(
        [EndReason::MaxTime, EndReason::LeaseLost]
            .iter()
            .map(ToString::to_string),
    );
    out
}

/// The messages about directories given explicitly: a lock directory
/// that is a file or has no parent, a state directory that is a file
/// or would be made where others may write.
fn given_dirs() -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, "").unwrap();
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let lock_dir = |p: &Path| {
        names::ensure_dir(p, DirSource::Given)
            .unwrap_err()
            .to_string()
    };
    let state = |p: &Path| {
        StateDir::at(p, StateSource::Given)
            .writable()
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    vec![
        lock_dir(&file),
        lock_dir(&tmp.path().join("none/dir")),
        state(&file),
        state(&open.join("state")),
    ]
}

/// No message of the library names an option of a program: each says
/// the kind, as a [`Hint`](super::Hint) where it tells how to give a
/// setting, and the program words it.
#[test]
fn no_message_names_an_option() {
    let mut messages: Vec<String> = errors().iter().map(ToString::to_string).collect();
    messages.extend(unknown_reasons().iter().map(ToString::to_string));
    messages.extend(store_errors().iter().map(ToString::to_string));
    messages.extend(other_notices());
    let given = given_dirs();
    assert!(given.iter().all(|m| m.contains("(as given)")), "{given:#?}");
    messages.extend(given);
    for m in &messages {
        assert!(!names_an_option(m), "{m}");
    }
    assert!(names_an_option("use --force"));
}
