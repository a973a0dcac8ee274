//! Fuzzes the owner-record parser, `Record::parse_with_pid_max`, and the
//! torn-record test, `record::is_torn_record`; both are pure: they read
//! nothing but their input.
//!
//! The input is the lock file's content, as is (so any lock file is a seed).
//! Checked on every input:
//! - it never panics (libFuzzer reports a panic as a crash);
//! - the pid_max bound is exact: the bytes parse under a given pid_max iff
//!   they parse under `u32::MAX` and every pid in the record (line 1,
//!   `cmdpid`, `pgid` and each `linger` pid) is in `1..=pid_max`, and then
//!   to the same record;
//! - an accepted record keeps the documented shape: a bare pid file has
//!   nothing but a pid; a full record has `start` and `boot`; `boot` and
//!   `token` keep their alphabet; `linger` names at most `MAX_LINGER`
//!   processes; values hold no control characters and no newline;
//! - round trip: `to_bytes()` parses back to an equal record, and is a fixed
//!   point of parse + serialize. (Only when `to_bytes()` fits in
//!   `MAX_RECORD_BYTES`: serializing adds `mode=`, so an input of nearly
//!   8 KiB may grow past the limit. onlyone never writes such a record: its
//!   `cmd` is bounded to 1 KiB.)
//! - what a power loss can leave of a record onlyone writes is torn:
//!   `is_torn_record` holds for `to_bytes()` and for some of its prefixes
//!   (cut at input-chosen points, also inside a UTF-8 character), with and
//!   without a tail of NUL bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onlyone::record::{MAX_LINGER, MAX_RECORD_BYTES, Mode, Record, is_torn_record};

/// PID_MAX_LIMIT on 64-bit Linux.
const PID_MAX_LIMIT: u32 = 4_194_304;

/// Every pid the record names that the parser bounds by pid_max.
fn pids(r: &Record) -> impl Iterator<Item = u32> + '_ {
    std::iter::once(r.pid)
        .chain(r.cmd_id.map(|c| c.pid))
        .chain(r.group.map(|g| g.pgid))
        .chain(r.linger.iter().map(|l| l.pid))
}

fn check_shape(r: &Record, pid_max: u32) {
    for p in pids(r) {
        assert!(p >= 1 && p <= pid_max, "pid {p} out of range 1..={pid_max}");
    }
    assert!(r.linger.len() <= MAX_LINGER, "{} lingering", r.linger.len());
    if r.is_bare() {
        assert_eq!(r.boot, None);
        assert_eq!(r.token, None);
        assert_eq!(r.since, None);
        assert_eq!(r.pidns, None);
        assert_eq!(r.timens, None);
        assert_eq!(r.bootoff_ns, 0);
        assert_eq!(r.host, None);
        assert_eq!(r.uid, None);
        assert_eq!(r.cmd, None);
        assert_eq!(r.cmd_id, None);
        assert_eq!(r.group, None);
        assert!(r.linger.is_empty());
        assert_eq!(r.image, None);
        assert_eq!(r.mode, Mode::Lock);
        assert_eq!(r.format, 0);
    } else {
        assert!(r.boot.is_some(), "a full record without boot");
    }
    // An image is two ordered, non-null ranges.
    if let Some(i) = r.image {
        assert!(i.arg_start != 0 && i.arg_start <= i.arg_end, "{i:?}");
        assert!(i.env_start != 0 && i.env_start <= i.env_end, "{i:?}");
    }
    // The parser never yields a value `bootoff=` cannot spell back.
    assert_ne!(r.bootoff_ns, i64::MIN);
    if let Some(b) = &r.boot {
        assert!(!b.is_empty() && b.len() <= 64);
        assert!(b.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-'));
    }
    if let Some(t) = &r.token {
        assert!(!t.is_empty() && t.len() <= 64);
        assert!(t.bytes().all(|c| c.is_ascii_alphanumeric()));
    }
    for v in [&r.host, &r.cmd].into_iter().flatten() {
        assert!(!v.chars().any(char::is_control), "control char in {v:?}");
    }
}

/// What a power loss leaves of `bytes` is a torn record: a prefix, cut at
/// a few points the input chooses, maybe followed by NUL bytes.
fn check_torn(bytes: &[u8], data: &[u8]) {
    assert!(
        is_torn_record(bytes),
        "a whole record is not torn: {bytes:?}"
    );
    let cuts = data
        .iter()
        .take(4)
        .map(|&b| usize::from(b) * bytes.len() / 255)
        .chain([0, 1, bytes.len() / 2, bytes.len().saturating_sub(1)]);
    for cut in cuts {
        let prefix = &bytes[..cut.min(bytes.len())];
        assert!(
            is_torn_record(prefix),
            "a cut record is not torn: {prefix:?}"
        );
        let mut padded = prefix.to_vec();
        padded.extend_from_slice(&[0; 7]);
        assert!(is_torn_record(&padded), "NUL padding untears: {padded:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = is_torn_record(data);
    let widest = Record::parse_with_pid_max(data, u32::MAX);
    if data.len() > MAX_RECORD_BYTES || data.is_empty() || data.contains(&0) {
        assert!(widest.is_err());
    }

    for pid_max in [1, 300, 32_768, PID_MAX_LIMIT, u32::MAX] {
        let got = Record::parse_with_pid_max(data, pid_max);
        match &widest {
            Ok(w) => {
                let fits = pids(w).all(|p| p <= pid_max);
                match &got {
                    Ok(r) => {
                        assert!(fits, "accepted pids above pid_max {pid_max}: {r:?}");
                        assert_eq!(r, w, "the record depends on pid_max {pid_max}");
                    }
                    Err(e) => assert!(!fits, "rejected under pid_max {pid_max} ({e}): {w:?}"),
                }
            }
            Err(_) => assert!(got.is_err(), "accepted under {pid_max} only: {got:?}"),
        }
        if let Err(e) = &got {
            let _ = e.to_string();
        }
        let Ok(rec) = got else { continue };
        check_shape(&rec, pid_max);

        let bytes = rec.to_bytes();
        if bytes.len() > MAX_RECORD_BYTES {
            continue;
        }
        let again = Record::parse_with_pid_max(&bytes, pid_max)
            .unwrap_or_else(|e| panic!("to_bytes() does not parse back ({e}): {bytes:?}"));
        assert_eq!(again, rec, "round trip changed the record; bytes {bytes:?}");
        assert_eq!(again.to_bytes(), bytes, "to_bytes() is not a fixed point");
        if pid_max == u32::MAX {
            check_torn(&bytes, data);
        }
    }
});
