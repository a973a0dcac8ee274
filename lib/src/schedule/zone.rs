//! Time zones: the `CRON_TZ=` prefix, the zones of the system's database,
//! and the local zone read as glibc (and so cron) reads it.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use jiff::tz::TimeZone;

use super::ScheduleError;

/// Splits a `CRON_TZ=Zone ` (or `TZ=Zone `) prefix off a spec.
pub(super) fn split_zone(spec: &str) -> (Option<&str>, &str) {
    for prefix in ["CRON_TZ=", "TZ="] {
        if let Some(rest) = spec.strip_prefix(prefix) {
            let (name, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            return (Some(name), rest.trim_start());
        }
    }
    (None, spec)
}

/// The largest zone file read: the system's are a few KiB.
const MAX_ZONE_FILE: u64 = 256 * 1024;

/// The directory of the system's zone files: `$TZDIR`, as glibc reads
/// it, else `/usr/share/zoneinfo`.
fn zoneinfo_dir() -> PathBuf {
    std::env::var_os("TZDIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/usr/share/zoneinfo"), PathBuf::from)
}

/// Whether `name` is a zone's name (`Europe/Berlin`, `Etc/GMT+5`), not a
/// path that climbs out of the zone directory.
fn is_zone_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && name
            .split('/')
            .all(|part| !(part.is_empty() || part == "." || part == ".."))
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_+-.".contains(c))
}

/// A zone from a TZif file (RFC 8536), named `name`. Opened without
/// blocking (a FIFO is refused, not waited on) and read to at most
/// [`MAX_ZONE_FILE`] bytes.
fn read_zone_file(path: &Path, name: &str) -> Result<TimeZone, String> {
    let said = |e: &dyn fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| said(&e))?;
    if !file.metadata().map_err(|e| said(&e))?.is_file() {
        return Err(said(&"not a file"));
    }
    let mut data = Vec::new();
    file.take(MAX_ZONE_FILE)
        .read_to_end(&mut data)
        .map_err(|e| said(&e))?;
    TimeZone::tzif(name, &data).map_err(|e| said(&e))
}

/// A `CRON_TZ=` zone: the system's zone file of that name. The name is
/// checked first to be a name, not a path.
pub(super) fn named_zone(name: &str) -> Result<TimeZone, ScheduleError> {
    let bad = |reason: &str| ScheduleError::Zone {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    if name.is_empty() {
        return Err(bad("no name after `CRON_TZ=`"));
    }
    if !is_zone_name(name) {
        return Err(bad(
            "a zone's name is letters, digits, `_`, `+`, `-` and `/`, not a path",
        ));
    }
    if name == "UTC" {
        return Ok(TimeZone::UTC);
    }
    read_zone_file(&zoneinfo_dir().join(name), name).map_err(|e| bad(&e))
}

/// The local time zone, read as glibc (and so cron) reads it: `TZ` (empty:
/// UTC; `:NAME`, `NAME` or `/path`: a zone file; else a POSIX rule such as
/// `EST5EDT,M3.2.0,M11.1.0`), else `/etc/localtime`, else UTC. A `TZ` or an
/// `/etc/localtime` that is there but cannot be read is an error, not
/// UTC as glibc would have it: a schedule read in the wrong zone would call
/// fires missed that were not.
pub(super) fn local_zone() -> Result<TimeZone, ScheduleError> {
    if let Some(tz) = std::env::var_os("TZ") {
        let tz = tz.to_string_lossy();
        return zone_of_tz(&tz).map_err(|reason| ScheduleError::LocalZone {
            source_name: format!("TZ={tz}"),
            reason,
        });
    }
    let localtime = Path::new("/etc/localtime");
    if std::fs::symlink_metadata(localtime).is_err() {
        return Ok(TimeZone::UTC);
    }
    // A link into the zone directory names the zone; a copy names none.
    let name = std::fs::read_link(localtime)
        .ok()
        .and_then(|target| name_in_zoneinfo(&target.to_string_lossy()));
    read_zone_file(localtime, name.as_deref().unwrap_or("")).map_err(|reason| {
        ScheduleError::LocalZone {
            source_name: "/etc/localtime".to_owned(),
            reason,
        }
    })
}

/// The zone `TZ` names.
fn zone_of_tz(tz: &str) -> Result<TimeZone, String> {
    let (file_only, body) = match tz.strip_prefix(':') {
        Some(body) => (true, body),
        None => (false, tz),
    };
    if body.is_empty() || body == "UTC" {
        return Ok(TimeZone::UTC);
    }
    if body.starts_with('/') {
        let name = name_in_zoneinfo(body).unwrap_or_default();
        return read_zone_file(Path::new(body), &name);
    }
    let file = zoneinfo_dir().join(body);
    if is_zone_name(body) && (file_only || file.is_file()) {
        return read_zone_file(&file, body);
    }
    TimeZone::posix(body).map_err(|e| {
        format!(
            "neither a zone file ({}) nor a POSIX rule: {e}",
            file.display()
        )
    })
}

/// The zone name in a path into a zone directory
/// (`/usr/share/zoneinfo/Europe/Berlin`: `Europe/Berlin`).
fn name_in_zoneinfo(path: &str) -> Option<String> {
    let (_, name) = path.rsplit_once("zoneinfo/")?;
    is_zone_name(name).then(|| name.to_owned())
}
