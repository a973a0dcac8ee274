//! The journal's events of a run's moments, built here once for every
//! place that records them (what a program is told of those moments is
//! [`crate::place::run::RunObserver`]'s): a `start`; an `abandoned` and a `takeover`
//! before it when a stale lock was taken over; an `end`; a `skip`; a
//! `stop`; a script's `release`. None carries the token of a record
//! another account wrote.

use std::time::Duration;

use crate::error::HeldBy;
use crate::journal::{Event, Exit, Usage};
use crate::record::Record;
use crate::supervise::EndedBy;

/// How a run ended, as its observer is told.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunEnd {
    /// How the command ended: 127 when it was not found, 126 when it could
    /// not be executed (as a shell says).
    pub exit: Exit,
    /// Why the library ended it, when it did.
    pub ended_by: Option<EndedBy>,
    /// How long the run lasted.
    pub took: Duration,
    /// What it used, when the command ran.
    pub usage: Option<Usage>,
}

impl RunEnd {
    /// An end: `exit` (and why the library ended the run), after `took`.
    pub fn new(exit: Exit, ended_by: Option<EndedBy>, took: Duration) -> RunEnd {
        RunEnd {
            exit,
            ended_by,
            took,
            usage: None,
        }
    }

    /// The end with what the run used.
    pub fn with_usage(mut self, usage: Usage) -> RunEnd {
        self.usage = Some(usage);
        self
    }
}

/// The journal's event of the end of the run `run` (its token, wrapper
/// and command), as `end` says.
pub fn end_event(run: &Record, end: &RunEnd) -> Event {
    end_event_of(run.token.as_deref(), run.pid, run.cmd.as_deref(), end)
}

/// The journal's event of the end of the run of `token`, whose wrapper is
/// `pid` and command `cmd`, as `end` says.
pub fn end_event_of(token: Option<&str>, pid: u32, cmd: Option<&str>, end: &RunEnd) -> Event {
    let ev = Event::end(
        token,
        pid,
        cmd,
        end.exit,
        end.ended_by.map(Into::into),
        end.took,
    );
    match end.usage {
        Some(u) => ev.with_usage(u),
        None => ev,
    }
}

/// The token of `run` that this account's journal may carry: none of a
/// record another account wrote ([`Record::is_ours`]), which may carry a
/// token copied from one of this account's runs.
fn token_of(run: &Record) -> Option<&str> {
    run.token.as_deref().filter(|_| run.is_ours())
}

/// The journal's event of a skip: the lock was held by `held`'s run, or
/// by another account's holder (named by its pid and account alone).
pub fn skip_event(held: &HeldBy) -> Event {
    let r = &held.record;
    let mut ev = Event::skip(
        token_of(r),
        Some(held.holder.pid()),
        r.cmd.as_deref().filter(|_| r.is_ours()),
    );
    if let Some(uid) = r.other_account() {
        ev.reason = Some(format!(
            "held by another account ({})",
            crate::text::user_name(uid)
        ));
    }
    ev
}

/// The journal's event of a stop of `run` (by `signal`, when one was
/// sent).
pub fn stop_event(run: &Record, signal: Option<&str>) -> Event {
    Event::stop(token_of(run), Some(run.pid), run.cmd.as_deref(), signal)
}

/// The journal's event of the end of a stale run whose wrapper died
/// without a word (`reason`: why it was stale); `None` when it has none to
/// write (no token, or a script's hold it released, whose end is
/// recorded; or another account's record, which is no run of this
/// account's whatever token it carries).
pub fn abandoned_event(old: &Record, reason: &str) -> Option<Event> {
    if token_of(old).is_none() || old.released.is_some() {
        return None;
    }
    Some(Event::abandoned(
        token_of(old),
        old.pid,
        old.cmd.as_deref(),
        reason,
        age(old),
    ))
}

/// The journal's event of a takeover of the stale run `old` (`reason`:
/// why it was stale) by the run whose wrapper is `by`; `None` for another
/// account's record, which was no run of this account's.
pub fn takeover_event(old: &Record, reason: &str, by: u32) -> Option<Event> {
    old.is_ours().then(|| {
        Event::takeover(
            old.token.as_deref(),
            old.pid,
            old.cmd.as_deref(),
            reason,
            by,
        )
    })
}

/// The journal's event of the start of `run`.
pub fn start_event(run: &Record) -> Event {
    let mut ev = Event::start(
        run.token.as_deref(),
        run.pid,
        run.cmd.as_deref(),
        run.mode.as_str(),
    );
    ev.slots = run.slots;
    ev
}

/// The journal's event of a script's hold released (`exit`: the script's
/// exit code, when it gave one), `took` seconds after it began (`None`:
/// from the record's `since`).
pub fn release_event(run: &Record, took: Option<f64>, exit: Option<u8>) -> Event {
    Event::release(
        token_of(run),
        run.pid,
        run.cmd.as_deref(),
        took.or_else(|| age(run)),
        exit.map(i32::from),
    )
}

/// Seconds from a record's `since` until now.
fn age(record: &Record) -> Option<f64> {
    let since = record.since? as f64;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    Some((now - since).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::EventKind;
    use crate::verdict::{Holder, StaleReason};

    /// The record of a run of `cmd` by `pid`, with a token.
    fn record(pid: u32, cmd: &str) -> Record {
        let mut r = crate::Record::parse(format!("{pid}\n").as_bytes()).unwrap();
        r.token = Some(crate::new_token());
        r.cmd = Some(cmd.into());
        r.since = Some(1);
        r
    }

    /// A takeover closes the stale run (abandoned), unless that run's end
    /// was recorded already (a script's hold it released); the takeover
    /// names the taker.
    #[test]
    fn a_takeover_closes_the_stale_run_unless_it_was_released() {
        let old = record(10, "old");
        let reason = StaleReason::Exited { pid: 10, run: true }.to_string();
        let ev = abandoned_event(&old, &reason).expect("an abandoned run");
        assert_eq!(ev.event, EventKind::Abandoned);
        assert_eq!(ev.token, old.token);
        let ev = takeover_event(&old, &reason, 20).expect("a takeover");
        assert_eq!((ev.pid, ev.by), (Some(10), Some(20)));
        assert_eq!(ev.token, old.token);
        let mut released = old.clone();
        released.released = Some(2);
        assert!(abandoned_event(&released, &reason).is_none());
    }

    /// Another account's record carries a token of its choosing: no
    /// event of this account's journal carries it.
    #[test]
    fn another_accounts_token_is_never_recorded() {
        let mut theirs = record(10, "forged");
        theirs.uid = Some(if rustix::process::geteuid().is_root() {
            65534
        } else {
            0
        });
        if theirs.is_ours() {
            return;
        }
        let reason = "gone";
        assert!(abandoned_event(&theirs, reason).is_none());
        assert!(takeover_event(&theirs, reason, 20).is_none());
        assert_eq!(stop_event(&theirs, None).token, None);
        assert_eq!(release_event(&theirs, None, None).token, None);
        let held = HeldBy::new("/x.lock".into(), theirs, Holder::Owner { pid: 10 });
        let ev = skip_event(&held);
        assert_eq!((ev.token, ev.cmd), (None, None));
    }

    /// A skip names the process that proved the lock held, and the run it
    /// holds it for.
    #[test]
    fn a_skip_names_the_holder_and_its_run() {
        let held = HeldBy::new(
            "/x.lock".into(),
            record(10, "old"),
            Holder::Command { pid: 11 },
        );
        let ev = skip_event(&held);
        assert_eq!(ev.event, EventKind::Skip);
        assert_eq!(ev.pid, Some(11));
        assert_eq!(ev.token, held.record.token);
        assert_eq!(ev.by, Some(std::process::id()));
    }

    /// An end carries its exit, why the run was ended, its time and what
    /// it used.
    #[test]
    fn an_end_is_written_whole() {
        let run = record(10, "job");
        let used = Usage {
            max_rss: 4096,
            ..Usage::default()
        };
        let end = RunEnd::new(
            Exit::Signal(15),
            Some(EndedBy::MaxTime(Duration::from_secs(5))),
            Duration::from_secs(5),
        )
        .with_usage(used);
        let ev = end_event(&run, &end);
        assert_eq!(ev.event, EventKind::End);
        assert_eq!(ev.signal.as_deref(), Some("TERM"));
        assert_eq!(ev.ended_by, Some(crate::journal::EndReason::MaxTime));
        assert_eq!(ev.duration, Some(5.0));
        assert_eq!(ev.max_rss, Some(4096));
    }
}
