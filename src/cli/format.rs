//! One clock, and the words the commands use for times: "3h ago",
//! "2m5s".

use std::time::Duration;

use onlyone::command::compact_duration;

/// Now, in Unix seconds: the commands' one clock.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Now, in whole Unix seconds.
pub fn now_unix() -> u64 {
    now() as u64
}

/// "3h ago", "just now".
pub fn ago(t: f64) -> String {
    let secs = (now() - t).max(0.0);
    if secs < 1.0 {
        return "just now".into();
    }
    format!("{} ago", compact_duration(Duration::from_secs(secs as u64)))
}

/// A duration in seconds, as people read it (whatever the number: one
/// past what a `Duration` holds is shown as the most it holds).
pub fn took(secs: f64) -> String {
    compact_duration(Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::MAX))
}
