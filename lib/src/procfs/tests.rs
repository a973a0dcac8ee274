//! `/proc` parsing's unit tests.

use super::ns::{hidepid_in, mount_table_hides_processes, proc_mount_options};
use super::*;

#[test]
fn the_proc_mount_is_found_with_its_options() {
    let hid = b"proc /proc proc rw,nosuid,nodev,noexec,relatime,hidepid=invisible 0 0\n";
    assert_eq!(
        proc_mount_options(hid),
        Some(&b"rw,nosuid,nodev,noexec,relatime,hidepid=invisible"[..])
    );
    let plain = b"proc /proc proc rw,relatime 0 0";
    assert_eq!(proc_mount_options(plain), Some(&b"rw,relatime"[..]));
    let named = b"none /proc proc rw,hidepid=2 0 0";
    assert_eq!(proc_mount_options(named), Some(&b"rw,hidepid=2"[..]));
    for other in [
        "binfmt_misc /proc/sys/fs/binfmt_misc binfmt_misc rw 0 0",
        "tmpfs /proc tmpfs rw,hidepid=2 0 0",
        "proc /proc procfs rw,hidepid=2 0 0",
        "/dev/vda /proc\\040x ext4 rw,hidepid=2 0 0",
        "proc /proc/ proc rw,hidepid=2 0 0",
        "proc /proc proc ",
        "not a mount line",
        "",
    ] {
        assert_eq!(proc_mount_options(other.as_bytes()), None, "{other}");
    }
}

/// Gives what it holds a few bytes at a time, as a slow reader may.
struct Trickle<'a>(&'a [u8], usize);

impl io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.1.min(buf.len()).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn the_last_proc_mount_of_the_table_is_the_one_that_counts() {
    let hidden = "proc /proc proc rw,relatime,hidepid=invisible 0 0";
    let plain = "proc /proc proc rw,relatime 0 0";
    // An overlay line longer than the reader's buffer, whose layers
    // name "/proc proc hidepid=2" where a short line would have them.
    let long = format!(
        "overlay / overlay rw,lowerdir={}x /proc proc hidepid=2 0 0",
        "/l".repeat(3000)
    );
    let hides = |table: &str| {
        [1, 7, 4096, 10_000]
            .map(|step| mount_table_hides_processes(Trickle(table.as_bytes(), step)))
    };
    let cases = [
        (format!("{hidden}\n"), true),
        (format!("tmpfs /run tmpfs rw 0 0\n{hidden}"), true),
        (format!("{hidden}\n{plain}\n"), false),
        (format!("{plain}\n{long}\n{hidden}\n"), true),
        (format!("{plain}\n{long}\n"), false),
        (format!("{plain}\n{long}"), false),
        (format!("{hidden}\n{long}\n{plain}\n"), false),
        (String::new(), false),
    ];
    for (table, want) in cases {
        assert_eq!(hides(&table), [want; 4], "{:.200}", table);
    }
}

#[test]
fn hidepid_is_any_value_but_off() {
    for hides in [
        "hidepid=2",
        "rw,gid=4,hidepid=invisible",
        "rw,hidepid=1",
        "hidepid=ptraceable",
    ] {
        assert!(hidepid_in(hides.as_bytes()), "{hides}");
    }
    for shows in [
        "",
        "rw,relatime",
        "hidepid=0",
        "gid=4,hidepid=off",
        "nohidepid=2",
    ] {
        assert!(!hidepid_in(shows.as_bytes()), "{shows}");
    }
}

#[test]
fn stat_is_split_at_the_last_paren() {
    let line = "4242 (a) b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 987654 0 0";
    let st = parse_stat(line).unwrap();
    assert_eq!(st.comm, "a) b) c");
    assert_eq!(st.state, 'S');
    assert_eq!(st.ppid, 1);
    assert_eq!(st.pgrp, 4242);
    assert_eq!(st.cpu_ticks, 10);
    assert_eq!(st.start, 987_654);
}

#[test]
fn every_field_read_is_the_one_the_kernel_numbers() {
    // Field n holds n (field 3, the state, is `S`); 52 fields in all.
    let rest: Vec<String> = (4..=52).map(|n| n.to_string()).collect();
    let line = format!("1 (x y) S {}", rest.join(" "));
    let st = parse_stat(&line).unwrap();
    assert_eq!(
        (st.state, st.ppid, st.pgrp, st.session, st.tty, st.flags),
        ('S', 4, 5, 6, 7, 9)
    );
    assert_eq!((st.cpu_ticks, st.start), (14 + 15, 22));
    let image = st.image.unwrap();
    assert_eq!(
        (
            image.arg_start,
            image.arg_end,
            image.env_start,
            image.env_end
        ),
        (48, 49, 50, 51)
    );
    // A kernel that shows no image (before 3.5): the rest still reads.
    let short = format!("1 (x) S {}", rest[..19].join(" "));
    let st = parse_stat(&short).unwrap();
    assert_eq!((st.start, st.image), (22, None));
    // A negative tty or group (-1: none) reads as 0.
    let line = line.replace(" 7 8 ", " -1 8 ");
    assert_eq!(parse_stat(&line).unwrap().tty, 0);
}

#[test]
fn stat_with_spaces_in_name_and_zombie_state() {
    let line = "77 (my prog (x)) Z 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0";
    let st = parse_stat(line).unwrap();
    assert_eq!(st.comm, "my prog (x)");
    assert!(st.is_dead());
    assert_eq!(st.start, 55);
}

#[test]
fn truncated_stat_is_rejected() {
    assert!(parse_stat("1 (init) S 0 1").is_none());
    assert!(parse_stat("garbage").is_none());
    assert!(parse_stat(") (").is_none());
}

#[test]
fn real_stat_of_self_parses() {
    let me = own_identity().unwrap().id;
    let st = read_stat(me.pid).unwrap().unwrap();
    assert_eq!(st.start, me.start);
    assert!(!st.is_dead());
    assert_eq!(me.probe(), Probe::Alive);
    assert_eq!(ProcId::of(me.pid), Some(me));
    assert_eq!(
        probe(me.pid, Some(me.start + 1)),
        Probe::Reused { now: me.start }
    );
    assert_eq!(me.to_string().parse::<ProcId>(), Ok(me));
}

#[test]
fn invalid_pids_are_never_probed() {
    assert!(!kill_probe(0));
    assert!(!kill_probe(pid_max() + 1));
    assert!(!kill_probe(u32::MAX));
    assert_eq!(probe(0, None), Probe::Exited);
    assert_eq!(probe(u32::MAX, None), Probe::Exited);
}

#[test]
fn boot_id_and_time_are_read() {
    assert_eq!(boot_id().unwrap().len(), 36);
    assert!(boot_time().unwrap() > 1_000_000_000);
}
