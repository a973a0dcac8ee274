//! Durations as the command line gives them (`90s`, `10m`, `1h30m`,
//! `500ms`, a bare number of seconds): one parser for every option that
//! takes one.

use std::time::Duration;

/// Parses `90s`, `10m`, `1h30m`, `500ms`, or a bare number of seconds
/// (`5`, `0.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if secs < 0.0 {
            return Err(format!(
                "`{s}` is negative: a duration is 0 or more, e.g. 90s, 10m, 1h30m or 500ms"
            ));
        }
        return if secs.is_finite() && (0.0..1e12).contains(&secs) {
            Ok(Duration::from_secs_f64(secs))
        } else {
            Err(format!(
                "`{s}` is not a duration: use e.g. 90s, 10m, 1h30m or 500ms"
            ))
        };
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration ({e}): use e.g. 90s, 10m, 1h30m or 500ms"))
}
