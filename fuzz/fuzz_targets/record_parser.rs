//! Fuzzes the owner-record parser, `Record::parse_with_pid_max`, which is
//! pure: it reads nothing but its input.
//!
//! The input is the lock file's content, as is (so any lock file is a seed).
//! Checked on every input:
//! - it never panics (libFuzzer reports a panic as a crash);
//! - the pid_max bound is exact: the bytes parse under a given pid_max iff
//!   they parse under `u32::MAX` and every pid in the record (line 1 and
//!   `cmdpid`) is in `1..=pid_max`, and then to the same record;
//! - an accepted record keeps the documented shape: a bare pid file has
//!   nothing but a pid; a full record has `start` and `boot`; `cmdpid` and
//!   `cmdstart` come together; `boot` and `token` keep their alphabet;
//!   values hold no control characters and no newline;
//! - round trip: `to_bytes()` parses back to an equal record, and is a fixed
//!   point of parse + serialize. (Only when `to_bytes()` fits in
//!   `MAX_RECORD_BYTES`: serializing adds `mode=`, so an input of nearly
//!   8 KiB may grow past the limit. onlyone never writes such a record: its
//!   `cmd` is bounded to 1 KiB.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use onlyone::record::{MAX_RECORD_BYTES, Mode, Record};

/// PID_MAX_LIMIT on 64-bit Linux.
const PID_MAX_LIMIT: u32 = 4_194_304;

fn check_shape(r: &Record, pid_max: u32) {
    assert!(r.pid >= 1 && r.pid <= pid_max, "pid {} out of range", r.pid);
    if let Some(c) = r.cmd_pid {
        assert!(c >= 1 && c <= pid_max, "cmdpid {c} out of range");
    }
    assert_eq!(r.cmd_pid.is_some(), r.cmd_start.is_some());
    if r.is_bare() {
        assert_eq!(r.boot, None);
        assert_eq!(r.token, None);
        assert_eq!(r.since, None);
        assert_eq!(r.pidns, None);
        assert_eq!(r.host, None);
        assert_eq!(r.uid, None);
        assert_eq!(r.cmd, None);
        assert_eq!(r.cmd_pid, None);
        assert_eq!(r.mode, Mode::Lock);
        assert_eq!(r.format, 0);
    } else {
        assert!(r.boot.is_some(), "a full record without boot");
    }
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

fuzz_target!(|data: &[u8]| {
    let widest = Record::parse_with_pid_max(data, u32::MAX);
    if data.len() > MAX_RECORD_BYTES || data.is_empty() || data.contains(&0) {
        assert!(widest.is_err());
    }

    for pid_max in [1, 300, 32_768, PID_MAX_LIMIT, u32::MAX] {
        let got = Record::parse_with_pid_max(data, pid_max);
        match &widest {
            Ok(w) => {
                let fits = w.pid <= pid_max && w.cmd_pid.is_none_or(|c| c <= pid_max);
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
    }
});
