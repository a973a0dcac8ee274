//! The healthchecks.io ping protocol, for `http://` and `https://` URLs:
//! `URL/start`, `URL/N`, `URL/fail` and `URL/log`, POSTed with a body,
//! each with the run's id as `rid`.

use std::time::Duration;

use super::{Provider, with_query};

/// The provider of the plain schemes.
pub(super) const PROVIDER: Provider = Provider {
    prefix: None,
    about: None,
    gets: false,
    url,
};

/// `base/what?QUERY&rid=RID`.
fn url(
    base: &str,
    mut query: Vec<String>,
    what: &str,
    rid: Option<&str>,
    _took: Option<Duration>,
) -> Option<String> {
    query.extend(rid.map(|r| format!("rid={r}")));
    Some(with_query(format!("{base}/{what}"), &query))
}
