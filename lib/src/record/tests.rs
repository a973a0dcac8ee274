//! The record's parser and writer against captured, hand-made and
//! generated input: every malformed form refused by name, never a panic.

use super::*;
use proptest::prelude::*;

const PID_MAX: u32 = 4_194_304;

fn full() -> Record {
    Record {
        pid: 4242,
        start: Some(123_456_789),
        boot: Some("d1dce367-f09e-4b16-b699-8439646e535a".into()),
        token: Some("0123456789abcdef0123456789abcdef".into()),
        since: Some(1_764_406_800),
        pidns: Some(4_026_531_836),
        timens: Some(4_026_531_834),
        bootoff_ns: -86_400_000_000_000,
        host: Some("build-01".into()),
        uid: Some(0),
        mode: Mode::Run,
        cmd: Some("./sync.sh --all".into()),
        cmd_id: Some(ProcId {
            pid: 4250,
            start: 123_456_790,
        }),
        group: None,
        linger: vec![ProcId {
            pid: 4251,
            start: 123_456_800,
        }],
        lingered: Some(123_456_900),
        image: Image::new(
            0x7ffd_0000_1000,
            0x7ffd_0000_1040,
            0x7ffd_0000_1040,
            0x7ffd_0000_1fe0,
        ),
        released: Some(1_764_410_400),
        cgroup: Some("/user.slice/user-0.slice/session-4.scope".into()),
        slots: None,
        format: FORMAT_VERSION,
    }
}

#[test]
fn full_record_round_trips() {
    let r = full();
    assert_eq!(Record::parse_with_pid_max(&r.to_bytes(), PID_MAX), Ok(r));
}

#[test]
fn a_record_carries_its_token_line_and_nothing_like_it() {
    let r = full();
    let tok = r.token.clone().unwrap();
    let bytes = r.to_bytes();
    assert!(carries_token(&bytes, &tok));
    assert!(!carries_token(&bytes, &tok[..tok.len() - 1]), "a prefix");
    assert!(!carries_token(&bytes, &format!("{tok}0")), "a longer one");
    assert!(!carries_token(&bytes, ""));
    let crlf = String::from_utf8(bytes.clone())
        .unwrap()
        .replace('\n', "\r\n");
    assert!(carries_token(crlf.as_bytes(), &tok));
    // Only a line of its own: not in another value, not on line 1.
    let elsewhere = format!("token={tok}\nstart=1\ncmd=echo token={tok}\n");
    assert!(!carries_token(elsewhere.as_bytes(), &tok));
    let mut big = bytes.clone();
    big.resize(MAX_RECORD_BYTES + 1, b'\n');
    assert!(!carries_token(&big, &tok), "larger than a record");
}

#[test]
fn a_malformed_image_is_not_a_record() {
    let base = "7\nstart=5\nboot=d1dce367-f09e-4b16-b699-8439646e535a\nimage=";
    for bad in [
        "",
        "1-2",
        "1-2:3",
        "0-0:0-0",
        "2-1:3-4",
        "g-1:2-3",
        "1-2:3-4:5",
        "11111111111111111-2:3-4",
    ] {
        let input = format!("{base}{bad}\n");
        assert!(
            Record::parse_with_pid_max(input.as_bytes(), PID_MAX).is_err(),
            "{bad:?}"
        );
    }
    let ok = format!("{base}7ffd1000-7ffd1040:7ffd1040-7ffd1fe0\n");
    let r = Record::parse_with_pid_max(ok.as_bytes(), PID_MAX).unwrap();
    assert_eq!(
        r.image,
        Image::new(0x7ffd_1000, 0x7ffd_1040, 0x7ffd_1040, 0x7ffd_1fe0)
    );
}

#[test]
fn the_spec_example_parses() {
    let r = Record::parse_with_pid_max(
        b"4242\nstart=123456789\nboot=d1dce367-f09e-4b16-b699-8439646e535a\nfuture_key=anything at all\n",
        PID_MAX,
    )
    .unwrap();
    assert_eq!(r.pid, 4242);
    assert_eq!(r.start, Some(123_456_789));
    assert_eq!(r.mode, Mode::Lock);
    assert!(!r.is_bare());
}

#[test]
fn bare_pid_files_are_understood() {
    for input in [&b"4242"[..], b"4242\n", b"4242\r\n", b" 4242 \n"] {
        let r = Record::parse_with_pid_max(input, PID_MAX).unwrap();
        assert_eq!(r.pid, 4242, "{input:?}");
        assert!(r.is_bare());
    }
}

#[test]
fn crlf_records_parse() {
    let r = Record::parse_with_pid_max(
        b"7\r\nstart=5\r\nboot=d1dce367-f09e-4b16-b699-8439646e535a\r\n",
        PID_MAX,
    )
    .unwrap();
    assert_eq!((r.pid, r.start), (7, Some(5)));
    assert_eq!(
        r.boot.as_deref(),
        Some("d1dce367-f09e-4b16-b699-8439646e535a")
    );
}

#[test]
fn malformed_inputs_are_not_records() {
    let cases: &[(&[u8], &str)] = &[
        (b"", "empty"),
        (b"\n", "missing"),
        (b"   \n", "missing"),
        (b"0\n", "not a valid pid"),
        (b"-1\n", "not a decimal"),
        (b"+5\n", "not a decimal"),
        (b"99999999\n", "not a valid pid"),
        (b"18446744073709551616\n", "out of range"),
        (b"12a\n", "not a decimal"),
        (b"42\0\n", "NUL"),
        (b"42\n\xff\xfe\n", "UTF-8"),
        (b"42\nstart=1\n", "`boot` is missing"),
        (
            b"42\nboot=d1dce367-f09e-4b16-b699-8439646e535a\n",
            "`start` is missing",
        ),
        (
            b"42\nstart=-5\nboot=d1dce367-f09e-4b16-b699-8439646e535a\n",
            "not a decimal",
        ),
        (
            b"42\nstart=1\nstart=2\nboot=d1dce367-f09e-4b16-b699-8439646e535a\n",
            "twice",
        ),
        (
            b"42\nstart=1\nboot=d1dce367-f09e-4b16-b699-8439646e535a\ngarbage\n",
            "not `key=value`",
        ),
        (
            b"42\nstart=1\nboot=d1dce367-f09e-4b16-b699-8439646e535a\n\n",
            "not `key=value`",
        ),
        (b"42\nstart=1\nboot=zz\n", "not a boot id"),
        (b"42\nstart=1\nboot=d1dce367-f0\n", "not a boot id"),
        (
            b"42\nstart=1\nboot=D1DCE367-F09E-4B16-B699-8439646E535A\n",
            "not a boot id",
        ),
        (
            b"42\nstart=1\nboot=d1dce367-f09e-4b16-b699-8439646e535a\ncmdpid=5\n",
            "together",
        ),
        (
            b"42\nstart=1\nboot=d1dce367-f09e-4b16-b699-8439646e535a\nKey=v\n",
            "malformed key",
        ),
        (
            b"42\nstart=1\nboot=d1dce367-f09e-4b16-b699-8439646e535a\ncmd=a\x07b\n",
            "control",
        ),
        (
            b"42\nstart=99999999999999999999\nboot=d1dce367-f09e-4b16-b699-8439646e535a\n",
            "out of range",
        ),
    ];
    for (input, why) in cases {
        let err = Record::parse_with_pid_max(input, PID_MAX)
            .expect_err(&format!("{input:?} should be rejected"));
        assert!(
            err.to_string().contains(why),
            "{input:?}: {err} (wanted {why:?})"
        );
    }
}

#[test]
fn oversized_input_is_rejected_without_parsing() {
    let big = vec![b'1'; MAX_RECORD_BYTES + 1];
    assert_eq!(
        Record::parse_with_pid_max(&big, PID_MAX),
        Err(NotARecord::TooLarge)
    );
}

#[test]
fn pid_max_bounds_the_pid() {
    assert!(Record::parse_with_pid_max(b"32768\n", 32768).is_ok());
    assert!(Record::parse_with_pid_max(b"32769\n", 32768).is_err());
}

#[test]
fn unknown_mode_is_read_as_run() {
    let r = Record::parse_with_pid_max(
        b"1\nstart=1\nboot=d1dce367-f09e-4b16-b699-8439646e535a\nmode=batch\n",
        PID_MAX,
    )
    .unwrap();
    assert_eq!(r.mode, Mode::Run);
}

#[test]
fn only_what_a_power_loss_leaves_is_a_torn_record() {
    for torn in [
        &b""[..],
        b"42",
        b"42\n",
        b"42\nsta",
        b"42\nstart=1",
        b"42\nstart=123\nboot=d1dce367-f09e",
        b"42\nstart=123\n\0\0\0\0",
        b"\0\0\0\0",
        b"42\ncmd=caf\xc3",
    ] {
        assert!(is_torn_record(torn), "{:?}", String::from_utf8_lossy(torn));
    }
    for file in [
        &b"#!/bin/sh\n"[..],
        b"root:x:0:0:root:/root:/bin/bash\n",
        b"\n42\n",
        b"hello world",
        b"42\nnot a key value\n",
        b"42\nStart=1\n",
        b"42\nstart\nboot=x\n",
        b"42\n\0start=1\n",
        b"\xff\xfe",
    ] {
        assert!(!is_torn_record(file), "{:?}", String::from_utf8_lossy(file));
    }
}

#[test]
fn escape_value_bounds_and_escapes() {
    assert_eq!(escape_value("a\nb\\c"), "a\\x0ab\\c");
    let long = "x".repeat(5000);
    let e = escape_value(&long);
    assert!(e.len() <= crate::text::MAX_VALUE_BYTES && e.ends_with('…'));
}

fn arb_record() -> impl Strategy<Value = Record> {
    (
        1u32..=PID_MAX,
        any::<u64>(),
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        proptest::option::of("[0-9a-zA-Z]{1,64}"),
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
        proptest::option::of("[a-z0-9.-]{1,40}"),
        proptest::option::of(any::<u32>()),
        prop_oneof![Just(Mode::Lock), Just(Mode::Run), Just(Mode::Script)],
        proptest::option::of("[ -~]{0,200}"),
        proptest::option::of((1u32..=PID_MAX, any::<u64>())),
    )
        .prop_map(
            |(pid, start, boot, token, since, pidns, host, uid, mode, cmd, cmdp)| Record {
                pid,
                start: Some(start),
                boot: Some(boot),
                token,
                since,
                pidns,
                timens: pidns.map(|n| n ^ 1),
                bootoff_ns: since.map_or(0, |t| (t % 1_000_000) as i64 - 500_000),
                host,
                uid,
                mode,
                cmd: cmd.map(|c| escape_value(&c)),
                cmd_id: cmdp.map(|(pid, start)| ProcId { pid, start }),
                group: cmdp.map(|(pgid, start)| Group {
                    pgid,
                    leader_start: (start % 2 == 0).then_some(start / 2),
                }),
                linger: cmdp
                    .map(|(pid, start)| {
                        vec![
                            ProcId { pid, start },
                            ProcId {
                                pid,
                                start: start / 3,
                            },
                        ]
                    })
                    .unwrap_or_default(),
                lingered: cmdp.map(|(_, start)| start / 2),
                image: since.and_then(|t| Image::new(t | 1, t | 1, t | 3, u64::MAX)),
                released: since.filter(|t| t % 3 == 0),
                cgroup: since.map(|t| format!("/system.slice/cron-{t}.scope")),
                slots: since.map(|t| (t % 7) as u32 + 1).filter(|&n| n > 1),
                format: FORMAT_VERSION,
            },
        )
}

proptest! {
    #[test]
    fn records_round_trip(r in arb_record()) {
        let bytes = r.to_bytes();
        prop_assert!(bytes.len() <= MAX_RECORD_BYTES);
        prop_assert_eq!(Record::parse_with_pid_max(&bytes, PID_MAX), Ok(r));
    }

    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Record::parse_with_pid_max(&bytes, PID_MAX);
    }

    #[test]
    fn parse_never_panics_on_near_records(
        pid in "[0-9-]{0,22}",
        lines in proptest::collection::vec("[a-z]{0,6}=?[0-9a-f -]{0,24}", 0..6),
    ) {
        let text = format!("{pid}\n{}", lines.join("\n"));
        if let Ok(r) = Record::parse_with_pid_max(text.as_bytes(), PID_MAX) {
            prop_assert!(r.pid >= 1 && r.pid <= PID_MAX);
        }
    }
}
