//! Durations as the command line gives them (`90s`, `10m`, `1h30m`,
//! `500ms`, a bare number of seconds): the library's one grammar
//! ([`onlyone::duration`], which a schedule's `every DUR` reads too), with
//! the command's words for a mistake.

use std::time::Duration;

use onlyone::duration::DurationError;

/// Parses `90s`, `10m`, `1h30m`, `500ms`, or a bare number of seconds
/// (`5`, `0.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    onlyone::duration::parse(s).map_err(|e| match e {
        DurationError::Negative => {
            format!("`{s}` is negative: a duration is 0 or more, e.g. 90s, 10m, 1h30m or 500ms")
        }
        e => format!("`{s}` is not a duration ({e}): use e.g. 90s, 10m, 1h30m or 500ms"),
    })
}
