//! Spread and jitter: a stable offset of a lock's fires on a host, and a
//! fresh random delay.

use std::io::Read;
use std::time::Duration;

/// The stable offset of a lock's fires on a host, in `[0, max)` to the
/// millisecond: the same at every fire, different for another lock or
/// another host (systemd's `RandomizedOffsetSec=`).
///
/// The hash, fixed here for good (changing it moves every fleet's fires):
/// 64-bit FNV-1a (offset basis `0xcbf29ce484222325`, prime
/// `0x100000001b3`) over the machine id's bytes, one zero byte and the
/// lock's bytes, then MurmurHash3's 64-bit finaliser (`fmix64`) so that
/// names that differ in their last byte land far apart; the offset is
/// that value modulo `max` in milliseconds. (std's `DefaultHasher` is not
/// used: its algorithm may change between Rust releases.)
pub fn spread_offset(machine_id: &str, lock: &str, max: Duration) -> Duration {
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max_ms == 0 {
        return Duration::ZERO;
    }
    let mut h = fnv1a64(0xcbf2_9ce4_8422_2325, machine_id.as_bytes());
    h = fnv1a64(h, &[0]);
    h = fnv1a64(h, lock.as_bytes());
    Duration::from_millis(fmix64(h) % max_ms)
}

pub(super) fn fnv1a64(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// This host's machine id, for [`spread_offset`]: `/etc/machine-id`, else
/// `/var/lib/dbus/machine-id` (32 hexadecimal digits; an empty file or
/// systemd's `uninitialized` is passed over), else the host name. A
/// container started from an image with a machine id baked in shares it
/// with its siblings: their locks' names still spread them, the same job in
/// each of them is not.
pub fn machine_id() -> String {
    machine_id_from(&["/etc/machine-id", "/var/lib/dbus/machine-id"])
        .unwrap_or_else(crate::procfs::host_name)
}

pub(super) fn machine_id_from(files: &[&str]) -> Option<String> {
    files.iter().find_map(|path| {
        let mut text = String::new();
        std::fs::File::open(path)
            .ok()?
            .take(64)
            .read_to_string(&mut text)
            .ok()?;
        let id = text.trim();
        (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_owned())
    })
}

/// A random delay in `[0, max)` to the millisecond, from the kernel's
/// random source (`getrandom(2)`; should that fail, from the clock and the
/// pid: a jitter spreads fires, it guards no secret).
pub fn jitter(max: Duration) -> Duration {
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max_ms == 0 {
        return Duration::ZERO;
    }
    // Rejection sampling: no value is likelier than another.
    let zone = u64::MAX - u64::MAX % max_ms;
    loop {
        let r = random_u64();
        if r < zone {
            return Duration::from_millis(r % max_ms);
        }
    }
}

fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                return fmix64(nanos ^ u64::from(std::process::id()).rotate_left(32));
            }
        }
    }
    u64::from_ne_bytes(buf)
}
