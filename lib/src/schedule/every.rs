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

/// A period in seconds: terms of a number and a unit (`15m`, `1h30m`,
/// `2 hours`), at least one second, at most [`MAX_EVERY`].
pub(super) fn parse_period(text: &str) -> Result<i64, String> {
    if text.is_empty() {
        return Err("no duration after `every`".into());
    }
    let mut total: u64 = 0;
    let mut rest = text.trim();
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("`{rest}` does not start with a number"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("`{}` is too large", &rest[..digits]))?;
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let scale = match unit.to_ascii_lowercase().as_str() {
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
            "d" | "day" | "days" => 86_400,
            "w" | "week" | "weeks" => 7 * 86_400,
            "" => return Err(format!("{number} has no unit (s, m, h, d, w)")),
            other => return Err(format!("`{other}` is not a unit (s, m, h, d, w)")),
        };
        total = number
            .checked_mul(scale)
            .and_then(|s| total.checked_add(s))
            .filter(|t| *t <= MAX_EVERY.as_secs())
            .ok_or_else(|| "longer than a year (366d)".to_string())?;
        rest = rest[unit_len..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    if total == 0 {
        return Err("a period of zero".into());
    }
    Ok(i64::try_from(total).expect("at most MAX_EVERY"))
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
