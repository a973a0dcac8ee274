//! Durations as people write them, in one grammar for every duration
//! onlyone reads: the command's options (`--wait 10m`, `--late 90`) and a
//! schedule's `every DUR` ([`crate::schedule`]).
//!
//! A duration is
//!
//! - **a bare number of seconds**: `90`, `0.5`; or
//! - **terms of a number and a unit**, written together or apart:
//!   `90s`, `1h30m`, `1h 30m`, `2 hours`, `1.5h`, `500ms`. The units, and
//!   their other names: `ns` (`nsec`, `nanos`), `us` (`usec`, `µs`), `ms`
//!   (`msec`, `millis`), `s` (`sec`, `secs`, `second`, `seconds`), `m`
//!   (`min`, `mins`, `minute`, `minutes`), `h` (`hr`, `hrs`, `hour`,
//!   `hours`), `d` (`day`, `days`), `w` (`wk`, `wks`, `week`, `weeks`),
//!   `M` (`month`, `months`: 30.44 days) and `y` (`yr`, `yrs`, `year`,
//!   `years`: 365.25 days). Units are case-sensitive: `m` is a minute, `M`
//!   a month.
//!
//! The terms are the grammar of the `humantime` crate, which the command
//! read its options with before: every value it took reads the same.

use std::time::Duration;

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// Nothing was given.
    #[error("it is empty")]
    Empty,
    /// A bare number below zero.
    #[error("it is negative")]
    Negative,
    /// A term that does not start with a number.
    #[error("`{rest}` does not start with a number")]
    NumberExpected {
        /// The text from there on.
        rest: String,
    },
    /// A number with no unit after it, where more than a bare number was
    /// given (`1h30`).
    #[error("{number} has no unit (s, m, h, d, w, ms...)")]
    NoUnit {
        /// The number.
        number: String,
    },
    /// A word that is not a unit.
    #[error("`{unit}` is not a unit (ns, us, ms, s, m, h, d, w, M for months, y for years)")]
    UnknownUnit {
        /// The word.
        unit: String,
    },
    /// More than a duration holds (some 584 billion years), or a bare
    /// number of a trillion seconds or more.
    #[error("it is too long")]
    TooLong,
}

/// A duration read from `text` (see the [module](self) documentation).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    parse_terms(text).map(|t| t.duration)
}

/// A duration as it was written: how long, and whether a unit of the
/// calendar (a month, a year: an average, no fixed length) was in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms {
    pub duration: Duration,
    pub calendar: bool,
}

/// The largest bare number of seconds read.
const MAX_BARE_SECS: f64 = 1e12;

const NANOS: u128 = 1_000_000_000;

/// [`parse`], saying whether a month or a year was in it.
pub(crate) fn parse_terms(text: &str) -> Result<Terms, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if let Ok(secs) = text.parse::<f64>() {
        if secs < 0.0 {
            return Err(DurationError::Negative);
        }
        if !secs.is_finite() || secs >= MAX_BARE_SECS {
            return Err(DurationError::TooLong);
        }
        return Ok(Terms {
            duration: Duration::from_secs_f64(secs),
            calendar: false,
        });
    }
    let mut total: u128 = 0;
    let mut calendar = false;
    let mut rest = text;
    while !rest.is_empty() {
        let (nanos, unit_scale, after) = term(rest)?;
        calendar |= unit_scale.1;
        total = total
            .checked_add(nanos)
            .filter(|t| *t / NANOS <= u128::from(u64::MAX))
            .ok_or(DurationError::TooLong)?;
        rest = after.trim_start();
    }
    let secs = u64::try_from(total / NANOS).map_err(|_| DurationError::TooLong)?;
    Ok(Terms {
        duration: Duration::new(secs, (total % NANOS) as u32),
        calendar,
    })
}

/// One term at the start of `text`: its nanoseconds, its unit's scale
/// (nanoseconds, and whether it is the calendar's), and the text after it.
fn term(text: &str) -> Result<(u128, (u128, bool), &str), DurationError> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if digits == 0 {
        return Err(DurationError::NumberExpected {
            rest: text.to_owned(),
        });
    }
    let whole = &text[..digits];
    let mut rest = &text[digits..];
    let mut fraction = "";
    if let Some(after_dot) = rest.strip_prefix('.') {
        let n = after_dot
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after_dot.len());
        if n == 0 {
            return Err(DurationError::NumberExpected {
                rest: after_dot.to_owned(),
            });
        }
        fraction = &after_dot[..n];
        rest = &after_dot[n..];
    }
    rest = rest.trim_start();
    let unit_len = rest
        .find(|c: char| !(c.is_ascii_alphabetic() || c == 'µ'))
        .unwrap_or(rest.len());
    let unit = &rest[..unit_len];
    let number = &text[..text.len() - rest.len()];
    if unit.is_empty() {
        return Err(DurationError::NoUnit {
            number: number.trim().to_owned(),
        });
    }
    let scale = unit_scale(unit).ok_or_else(|| DurationError::UnknownUnit {
        unit: unit.to_owned(),
    })?;
    let whole: u128 = whole.parse().map_err(|_| DurationError::TooLong)?;
    let mut nanos = whole.checked_mul(scale.0).ok_or(DurationError::TooLong)?;
    if !fraction.is_empty() {
        // 18 digits of fraction at most (more add nothing a nanosecond
        // holds): below 2^60, times a scale below 2^55, fits.
        let kept = &fraction[..fraction.len().min(18)];
        let numerator: u128 = kept.parse().map_err(|_| DurationError::TooLong)?;
        let part = numerator * scale.0 / 10u128.pow(kept.len() as u32);
        nanos = nanos.checked_add(part).ok_or(DurationError::TooLong)?;
    }
    Ok((nanos, scale, &rest[unit_len..]))
}

/// A unit's length in nanoseconds, and whether it is the calendar's (a
/// month, a year: an average length).
fn unit_scale(unit: &str) -> Option<(u128, bool)> {
    const SEC: u128 = NANOS;
    Some(match unit {
        "ns" | "nsec" | "nanos" => (1, false),
        "us" | "usec" | "µs" => (1_000, false),
        "ms" | "msec" | "millis" => (1_000_000, false),
        "s" | "sec" | "secs" | "second" | "seconds" => (SEC, false),
        "m" | "min" | "mins" | "minute" | "minutes" => (60 * SEC, false),
        "h" | "hr" | "hrs" | "hour" | "hours" => (3_600 * SEC, false),
        "d" | "day" | "days" => (86_400 * SEC, false),
        "w" | "wk" | "wks" | "week" | "weeks" => (7 * 86_400 * SEC, false),
        "M" | "month" | "months" => (2_630_016 * SEC, true),
        "y" | "yr" | "yrs" | "year" | "years" => (31_557_600 * SEC, true),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// The forms the documents give, each to its value.
    #[test]
    fn the_documented_forms_read() {
        for (text, want) in [
            ("90", secs(90)),
            ("0.5", Duration::from_millis(500)),
            ("90s", secs(90)),
            ("10m", secs(600)),
            ("1h30m", secs(5_400)),
            ("1h 30m", secs(5_400)),
            ("2 hours", secs(7_200)),
            ("1.5h", secs(5_400)),
            ("500ms", Duration::from_millis(500)),
            ("1d", secs(86_400)),
            ("2w", secs(14 * 86_400)),
            ("1M", secs(2_630_016)),
            ("1y", secs(31_557_600)),
            (" 5m ", secs(300)),
            ("0", secs(0)),
            ("0s", secs(0)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
        assert!(parse_terms("1M").unwrap().calendar);
        assert!(!parse_terms("1m").unwrap().calendar);
    }

    /// What is not a duration says what is wrong.
    #[test]
    fn what_is_not_a_duration_says_why() {
        assert_eq!(parse(""), Err(DurationError::Empty));
        assert_eq!(parse("-5"), Err(DurationError::Negative));
        assert_eq!(parse("1e12"), Err(DurationError::TooLong));
        assert!(matches!(parse("5x"), Err(DurationError::UnknownUnit { unit }) if unit == "x"));
        assert!(matches!(parse("1h30"), Err(DurationError::NoUnit { number }) if number == "30"));
        assert!(matches!(
            parse("h"),
            Err(DurationError::NumberExpected { .. })
        ));
        assert!(matches!(
            parse("-5m"),
            Err(DurationError::NumberExpected { .. })
        ));
        assert!(matches!(
            parse("1.h"),
            Err(DurationError::NumberExpected { .. })
        ));
        assert_eq!(
            parse("99999999999999999999999y"),
            Err(DurationError::TooLong)
        );
    }

    proptest::proptest! {
        /// Terms read as humantime, the grammar the command used, reads
        /// them.
        #[test]
        fn terms_read_as_humantime_reads_them(
            terms in proptest::collection::vec(
                (0u64..100_000, proptest::option::of(0u32..1000), 0usize..10, proptest::bool::ANY),
                1..4,
            )
        ) {
            let units = ["ns", "ms", "s", "m", "min", "h", "hours", "d", "w", "M"];
            let mut text = String::new();
            for (n, frac, unit, space) in terms {
                text.push_str(&n.to_string());
                // humantime keeps a fraction's nanoseconds for these units
                // only (of an hour, whole seconds).
                if let Some(f) = frac.filter(|_| (1..=4).contains(&unit)) {
                    text.push_str(&format!(".{f:03}"));
                }
                if space {
                    text.push(' ');
                }
                text.push_str(units[unit]);
                text.push(' ');
            }
            let ours = parse(&text).ok();
            let theirs = humantime::parse_duration(&text).ok();
            proptest::prop_assert_eq!(ours, theirs, "{}", text);
        }
    }
}
