//! Text for people: durations, times, user names and command lines, as
//! messages, `status` and the record show them. A leaf: it imports nothing
//! of the crate but the user names' lookup.

use std::time::Duration;

/// Where [`display_command`] stops adding arguments.
pub(crate) const MAX_DISPLAY_BYTES: usize = 1024;

/// Formats Unix seconds as RFC 3339 (UTC), or as `@SECONDS` for a time past
/// the year 9999, which RFC 3339 cannot write (a record may say anything).
pub fn format_unix_time(secs: u64) -> String {
    const YEAR_10000: u64 = 253_402_300_800;
    if secs >= YEAR_10000 {
        return format!("@{secs}");
    }
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The proleptic Gregorian date (year, month, day) `days` days after
/// 1970-01-01: the civil-from-days conversion (H. Hinnant's "chrono-Compatible
/// Low-Level Date Algorithms"), for days from 1970 on.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// A user's name (`root`, `backup`), or `uid N` when `/etc/passwd` has
/// none for it (a container's arbitrary uid, a user of a directory service:
/// onlyone never asks the C library, whose modules crash a static binary).
pub fn user_name(uid: u32) -> String {
    crate::sys::user_name(uid).unwrap_or_else(|| format!("uid {uid}"))
}

/// Formats a duration as `3m12s`, `2h5m`, `450ms`: two units at most (the
/// rest cut off), the second left out when it is 0 (`1h`, not `1h0m`).
pub fn compact_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return match d.as_millis() {
            0 => "0s".to_owned(),
            ms => format!("{ms}ms"),
        };
    }
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let days = h / 24;
    let (big, small) = match (days, h, m) {
        (d, h, _) if d > 0 => ((d, 'd'), (h % 24, 'h')),
        (_, h, m) if h > 0 => ((h, 'h'), (m, 'm')),
        (_, _, m) if m > 0 => ((m, 'm'), (s, 's')),
        _ => return format!("{s}s"),
    };
    match small {
        (0, _) => format!("{}{}", big.0, big.1),
        (n, unit) => format!("{}{}{n}{unit}", big.0, big.1),
    }
}

/// Renders an argument vector for display and for the record: each argument
/// that needs it is single-quoted as a POSIX shell would read it; non-UTF-8
/// bytes are shown as `\xNN`.
pub fn display_command<S: AsRef<std::ffi::OsStr>>(argv: &[S]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for (i, arg) in argv.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let bytes = arg.as_ref().as_bytes();
        let text: String = match std::str::from_utf8(bytes) {
            Ok(s) => s.to_owned(),
            Err(_) => bytes
                .iter()
                .map(|&b| {
                    if b.is_ascii() {
                        (b as char).to_string()
                    } else {
                        format!("\\x{b:02x}")
                    }
                })
                .collect(),
        };
        let plain = !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%^".contains(&b));
        if plain {
            out.push_str(&text);
        } else {
            out.push('\'');
            out.push_str(&text.replace('\'', "'\\''"));
            out.push('\'');
        }
        if out.len() > MAX_DISPLAY_BYTES {
            break;
        }
    }
    out
}

/// Text from a file, as a terminal may be given it: every control
/// character (C0 with tab and newline, DEL, C1), every format character
/// (Unicode's category Cf: the bidirectional marks, embeddings, overrides
/// and isolates, the zero-width characters, the soft hyphen, the tags),
/// and the line and paragraph separators are shown escaped (`\x1b`,
/// `\u{202e}`), so that what another account wrote cannot move the cursor,
/// retitle the window, clear the screen, reorder what is shown or hide
/// text in it. Anything else is unchanged.
pub fn for_terminal(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !escaped(c) {
            out.push(c);
        } else if c.is_ascii() {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:04x}}}", c as u32));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// What [`for_terminal`] escapes: controls, format characters, and the
/// line and paragraph separators.
fn escaped(c: char) -> bool {
    c.is_control() || is_format(c) || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Whether `c` is a format character (Unicode 15's general category Cf),
/// which a terminal does not show but may act on: the bidirectional marks,
/// embeddings, overrides and isolates reorder what follows them.
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

/// JSON (as serde writes it) with what [`for_terminal`] escapes written as
/// `\uXXXX`: the same JSON, and safe on a terminal. serde escapes C0 but
/// writes DEL, C1 and the bidirectional controls as they are; they can
/// only be inside strings, where a `\u` escape means the same (a newline,
/// a tab or a return there is the JSON's own white space, kept).
pub fn json_for_terminal(json: &str) -> std::borrow::Cow<'_, str> {
    let escaped = |c: char| escaped(c) && !matches!(c, '\n' | '\t' | '\r');
    if !json.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if escaped(c) {
            // One `\uXXXX` per UTF-16 unit: a tag (U+E0041) is a pair.
            for unit in c.encode_utf16(&mut [0u16; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The longest escaped value (a command line) one record line holds.
pub(crate) const MAX_VALUE_BYTES: usize = 1024;

/// Makes a value safe for one record line: control characters become
/// `\xNN`, and the result is cut at 1 KiB on a character boundary with a
/// trailing `…`.
pub fn escape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len().min(MAX_VALUE_BYTES));
    for c in v.chars() {
        let mut piece = String::new();
        push_escaped(&mut piece, c);
        if out.len() + piece.len() > MAX_VALUE_BYTES - '…'.len_utf8() {
            out.push('…');
            return out;
        }
        out.push_str(&piece);
    }
    out
}

pub(crate) fn push_escaped(out: &mut String, c: char) {
    if c.is_control() {
        let mut buf = [0u8; 4];
        for b in c.encode_utf8(&mut buf).bytes() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    } else {
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_times_are_rfc_3339_in_utc() {
        for (secs, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_796_144_437, "2026-12-01T17:00:37Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
            (253_402_300_800, "@253402300800"),
        ] {
            assert_eq!(format_unix_time(secs), text, "{secs}");
        }
    }

    proptest::proptest! {
        /// The same text as humantime's RFC 3339 formatter, the reference,
        /// for every time it can write.
        #[test]
        fn unix_times_read_as_humantime_writes_them(secs in 0u64..253_402_300_800) {
            let t = std::time::UNIX_EPOCH + Duration::from_secs(secs);
            let reference = humantime::format_rfc3339_seconds(t).to_string();
            proptest::prop_assert_eq!(format_unix_time(secs), reference);
        }
    }

    #[test]
    fn display_command_quotes_what_needs_it() {
        assert_eq!(display_command(&["./sync.sh", "--all"]), "./sync.sh --all");
        assert_eq!(
            display_command(&["echo", "a b", "it's"]),
            "echo 'a b' 'it'\\''s'"
        );
    }

    #[test]
    fn for_terminal_escapes_what_a_terminal_acts_on() {
        assert_eq!(for_terminal("build-01 ./sync.sh é"), "build-01 ./sync.sh é");
        assert_eq!(
            for_terminal("a\x1b]0;pwned\x07b\x1b[2J\u{9b}c\u{202e}d\te"),
            "a\\x1b]0;pwned\\x07b\\x1b[2J\\u{009b}c\\u{202e}d\\x09e"
        );
    }

    /// Every bidirectional control and every other format character
    /// (Unicode's category Cf), as a record's command or a host name
    /// another account wrote may carry them.
    const FORMAT: &[char] = &[
        '\u{ad}',
        '\u{600}',
        '\u{605}',
        '\u{61c}',
        '\u{6dd}',
        '\u{70f}',
        '\u{890}',
        '\u{8e2}',
        '\u{180e}',
        '\u{200b}',
        '\u{200c}',
        '\u{200d}',
        '\u{200e}',
        '\u{200f}',
        '\u{202a}',
        '\u{202b}',
        '\u{202c}',
        '\u{202d}',
        '\u{202e}',
        '\u{2060}',
        '\u{2064}',
        '\u{2066}',
        '\u{2067}',
        '\u{2068}',
        '\u{2069}',
        '\u{206a}',
        '\u{206f}',
        '\u{feff}',
        '\u{fff9}',
        '\u{fffb}',
        '\u{110bd}',
        '\u{110cd}',
        '\u{13430}',
        '\u{1343f}',
        '\u{1bca0}',
        '\u{1d173}',
        '\u{1d17a}',
        '\u{e0001}',
        '\u{e0020}',
        '\u{e0041}',
        '\u{e007f}',
    ];

    #[test]
    fn for_terminal_escapes_every_format_character() {
        for &c in FORMAT {
            let text = format!("a{c}b");
            assert_eq!(
                for_terminal(&text),
                format!("a\\u{{{:04x}}}b", c as u32),
                "U+{:04X}",
                c as u32
            );
        }
        // Letters, marks and symbols beside them are text.
        for text in ["é", "日本", "ש", "٣", "🙂", "\u{300}", "\u{fe0f}"] {
            assert_eq!(for_terminal(text), text);
        }
    }

    #[test]
    fn json_for_terminal_is_the_same_json() {
        let mut host = String::from("a\u{9b}b\u{202e}c\u{7f}\n\x1b");
        host.extend(FORMAT);
        let v = serde_json::json!({ "host": host });
        let text = serde_json::to_string_pretty(&v).unwrap();
        let safe = json_for_terminal(&text);
        assert!(
            !safe.contains(['\u{9b}', '\u{202e}', '\u{7f}', '\x1b']) && !safe.contains(FORMAT),
            "{safe}"
        );
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), v);
    }

    #[test]
    fn durations_are_compact() {
        assert_eq!(compact_duration(Duration::from_millis(450)), "450ms");
        assert_eq!(compact_duration(Duration::from_secs(192)), "3m12s");
        assert_eq!(compact_duration(Duration::from_secs(7500)), "2h5m");
        assert_eq!(compact_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(compact_duration(Duration::from_secs(120)), "2m");
        assert_eq!(compact_duration(Duration::from_secs(2 * 86400)), "2d");
        assert_eq!(compact_duration(Duration::from_secs(3600 + 1)), "1h");
        assert_eq!(
            compact_duration(Duration::from_secs(3 * 86400 + 3600)),
            "3d1h"
        );
    }
}
