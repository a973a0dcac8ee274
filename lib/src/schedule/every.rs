//! `every DUR`: reading a period, and writing it back in its largest unit.

use super::MAX_EVERY;

/// The duration of an `every DUR` (or `@every DUR`, as some schedulers
/// write it).
pub(super) fn strip_every(spec: &str) -> Option<&str> {
    let word = spec.split_whitespace().next()?;
    if word.eq_ignore_ascii_case("every") || word.eq_ignore_ascii_case("@every") {
        Some(spec[word.len()..].trim())
    } else {
        None
    }
}

/// A period in seconds: a duration as every option reads one
/// ([`crate::duration`]: `15m`, `1h30m`, `2 hours`, `90`, a bare number of
/// seconds), of whole seconds, at least one, at most [`MAX_EVERY`]; not in
/// months or years, which have no fixed length.
pub(super) fn parse_period(text: &str) -> Result<i64, String> {
    if text.is_empty() {
        return Err("no duration after `every`".into());
    }
    let terms = crate::duration::parse_terms(text).map_err(|e| e.to_string())?;
    if terms.calendar {
        return Err(
            "a month or a year has no fixed length (`M` is a month, `m` a minute): for fires \
             on a day of the month or of the year, write cron (`@monthly`, `0 2 1 * *`)"
                .into(),
        );
    }
    let d = terms.duration;
    if d.subsec_nanos() != 0 {
        return Err("a period is whole seconds".into());
    }
    if d.is_zero() {
        return Err("a period of zero".into());
    }
    if d > MAX_EVERY {
        return Err("longer than a year (366d)".into());
    }
    Ok(i64::try_from(d.as_secs()).expect("at most MAX_EVERY"))
}

/// A period in the largest unit that divides it: `90s`, `15m`, `1d`.
pub(super) fn canonical_period(period: i64) -> String {
    for (unit, scale) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if period % scale == 0 {
            return format!("{}{unit}", period / scale);
        }
    }
    format!("{period}s")
}
