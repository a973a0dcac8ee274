//! Sentry's cron check-ins, for `sentry+https://` URLs (a cron monitor's
//! check-in URL): the same moments as GETs with `status=in_progress`, then
//! `ok` or `error` (with `duration`), `check_in_id=RID`. Sentry has no
//! check-in for a skip, so none is sent.

use std::time::Duration;

use super::{Provider, with_query};

/// Sentry's cron check-ins.
pub(super) const PROVIDER: Provider = Provider {
    prefix: Some("sentry"),
    about: Some("sentry+https:// for Sentry's cron check-ins"),
    gets: true,
    url,
};

/// `base/?QUERY&check_in_id=RID&status=S[&duration=SECONDS]`; none for a
/// `log`.
fn url(
    base: &str,
    mut query: Vec<String>,
    what: &str,
    rid: Option<&str>,
    took: Option<Duration>,
) -> Option<String> {
    let status = match what {
        "start" => "in_progress",
        "log" => return None,
        "0" => "ok",
        _ => "error",
    };
    query.extend(rid.map(|r| format!("check_in_id={r}")));
    query.push(format!("status={status}"));
    if status != "in_progress"
        && let Some(t) = took
    {
        query.push(format!("duration={:.3}", t.as_secs_f64()));
    }
    Some(with_query(format!("{base}/"), &query))
}
