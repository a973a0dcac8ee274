//! What a program is told of a run's moments ([`RunObserver`]): it began,
//! took a stale lock over, ended, was skipped, stopped a live run. The
//! library calls it ([`crate::runner`]); what a program does then (a
//! journal, pings, messages) hooks in there.
//!
//! [`JournalObserver`] writes the journal's events for those moments, the
//! same events as the command's runs: a `start`; an `abandoned` and a
//! `takeover` before it when a stale lock was taken over; an `end`; a
//! `skip`; a `stop`. Writing is best effort, as the journal always is: a
//! failure never changes a run, and the first one is kept for the caller
//! to say ([`JournalObserver::error`]).
//!
//! Two observers are one as a pair: `(journal, messages)` tells both, in
//! that order.

use std::io;
use std::path::Path;
use std::time::Duration;

use crate::error::HeldBy;
use crate::journal::{Event, EventLog, Exit, Usage};
use crate::lock::TakeOver;
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

/// What a program is told of a run's moments. Every method does nothing
/// unless implemented; the record of a run (`run`) names its token (its run
/// id: [`crate::journal::run_id`]), its wrapper's pid, its command and its
/// mode.
pub trait RunObserver {
    /// The lock `held` was found held by a live run: this one is skipped.
    fn skipped(&mut self, held: &HeldBy) {
        let _ = held;
    }

    /// The live run of `held` is about to be stopped so that this one
    /// takes its place.
    fn stopping(&mut self, held: &HeldBy) {
        let _ = held;
    }

    /// The live run of `held` was stopped (with `signal`, by name) so
    /// that this one takes its place.
    fn stopped(&mut self, held: &HeldBy, signal: &str) {
        let _ = (held, signal);
    }

    /// The run `run` took a stale lock over on its way in: `from` says
    /// whose it was (when its record was readable) and why it was stale.
    /// Told before [`RunObserver::started`].
    fn took_over(&mut self, run: &Record, from: &TakeOver) {
        let _ = (run, from);
    }

    /// The run `run` began, holding the lock file `lock`.
    fn started(&mut self, lock: &Path, run: &Record) {
        let _ = (lock, run);
    }

    /// The run `run` ended, as `end` says. Told before the lock is let go.
    fn ended(&mut self, run: &Record, end: &RunEnd) {
        let _ = (run, end);
    }
}

/// Both, in order: the first, then the second.
impl<A: RunObserver, B: RunObserver> RunObserver for (A, B) {
    fn skipped(&mut self, held: &HeldBy) {
        self.0.skipped(held);
        self.1.skipped(held);
    }

    fn stopping(&mut self, held: &HeldBy) {
        self.0.stopping(held);
        self.1.stopping(held);
    }

    fn stopped(&mut self, held: &HeldBy, signal: &str) {
        self.0.stopped(held, signal);
        self.1.stopped(held, signal);
    }

    fn took_over(&mut self, run: &Record, from: &TakeOver) {
        self.0.took_over(run, from);
        self.1.took_over(run, from);
    }

    fn started(&mut self, lock: &Path, run: &Record) {
        self.0.started(lock, run);
        self.1.started(lock, run);
    }

    fn ended(&mut self, run: &Record, end: &RunEnd) {
        self.0.ended(run, end);
        self.1.ended(run, end);
    }
}

/// The observer that writes a run's moments to its lock's event log (a
/// [`crate::journal::Journal`], or a store's history), as the command's
/// runs write them.
#[derive(Debug)]
pub struct JournalObserver<L: EventLog> {
    log: L,
    error: Option<io::Error>,
}

impl<L: EventLog> JournalObserver<L> {
    /// An observer that writes to `log`.
    pub fn new(log: L) -> JournalObserver<L> {
        JournalObserver { log, error: None }
    }

    /// The log it writes to.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// The first write that failed, when one did (the runs went on).
    pub fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    /// Appends `ev`; the first failure is kept.
    fn write(&mut self, ev: &Event) {
        if let Err(e) = self.log.append(ev) {
            self.error.get_or_insert(e);
        }
    }
}

impl<L: EventLog> RunObserver for JournalObserver<L> {
    fn skipped(&mut self, held: &HeldBy) {
        self.write(&skip_event(held));
    }

    fn stopped(&mut self, held: &HeldBy, signal: &str) {
        self.write(&stop_event(&held.record, Some(signal)));
    }

    /// The stale run's end (`abandoned`: its wrapper died without a word),
    /// unless it had none to write (a script's hold it released), then the
    /// takeover.
    fn took_over(&mut self, run: &Record, from: &TakeOver) {
        let Some(old) = &from.record else {
            return;
        };
        let reason = from.reason.to_string();
        // Unless the lock's place closed it as it removed its record.
        if !from.told()
            && let Some(ev) = abandoned_event(old, &reason)
        {
            self.write(&ev);
        }
        if let Some(ev) = takeover_event(old, &reason, run.pid) {
            self.write(&ev);
        }
    }

    fn started(&mut self, _lock: &Path, run: &Record) {
        self.write(&start_event(run));
    }

    fn ended(&mut self, run: &Record, end: &RunEnd) {
        let ev = Event::end(
            run.token.as_deref(),
            run.pid,
            run.cmd.as_deref(),
            end.exit,
            end.ended_by.map(Into::into),
            end.took,
        );
        let ev = match end.usage {
            Some(u) => ev.with_usage(u),
            None => ev,
        };
        self.write(&ev);
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
    use std::cell::RefCell;

    use super::*;
    use crate::journal::EventKind;
    use crate::verdict::{Holder, StaleReason};

    /// An event log in memory.
    #[derive(Default)]
    struct Kept(RefCell<Vec<Event>>);

    impl EventLog for Kept {
        fn append(&self, ev: &Event) -> io::Result<()> {
            self.0.borrow_mut().push(ev.clone());
            Ok(())
        }

        fn describe(&self) -> String {
            "memory".into()
        }
    }

    /// An observer that notes the moments it is told, by name.
    #[derive(Default)]
    struct Noted(Vec<&'static str>);

    impl RunObserver for Noted {
        fn started(&mut self, _: &Path, _: &Record) {
            self.0.push("started");
        }

        fn ended(&mut self, _: &Record, _: &RunEnd) {
            self.0.push("ended");
        }
    }

    /// The record of a run of `cmd` by `pid`, with a token.
    fn record(pid: u32, cmd: &str) -> Record {
        let mut r = crate::Record::parse(format!("{pid}\n").as_bytes()).unwrap();
        r.token = Some(crate::new_token());
        r.cmd = Some(cmd.into());
        r.since = Some(1);
        r
    }

    fn kinds(o: &JournalObserver<Kept>) -> Vec<EventKind> {
        o.log().0.borrow().iter().map(|e| e.event).collect()
    }

    /// A takeover closes the stale run (abandoned) before it is written,
    /// unless that run's end was recorded already (a script's hold it
    /// released); both name the taker.
    #[test]
    fn a_takeover_closes_the_stale_run_unless_it_was_released() {
        let run = record(20, "new");
        let from = TakeOver {
            record: Some(record(10, "old")),
            reason: StaleReason::Exited { pid: 10, run: true },
            told: false,
        };
        let mut o = JournalObserver::new(Kept::default());
        o.took_over(&run, &from);
        assert_eq!(kinds(&o), [EventKind::Abandoned, EventKind::Takeover]);
        let events = o.log().0.borrow().clone();
        assert_eq!(events[1].pid, Some(10));
        assert_eq!(events[1].by, Some(20));
        assert_eq!(events[1].token, from.record.as_ref().unwrap().token);

        let mut released = from.clone();
        released.record.as_mut().unwrap().released = Some(2);
        let mut o = JournalObserver::new(Kept::default());
        o.took_over(&run, &released);
        assert_eq!(kinds(&o), [EventKind::Takeover]);
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
        let mut o = JournalObserver::new(Kept::default());
        o.skipped(&held);
        let ev = o.log().0.borrow()[0].clone();
        assert_eq!(ev.event, EventKind::Skip);
        assert_eq!(ev.pid, Some(11));
        assert_eq!(ev.token, held.record.token);
        assert_eq!(ev.by, Some(std::process::id()));
    }

    /// An end carries its exit, why the run was ended, its time and what
    /// it used; a pair tells both observers, the first first.
    #[test]
    fn an_end_is_written_whole_and_a_pair_tells_both() {
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
        let mut pair = (JournalObserver::new(Kept::default()), Noted::default());
        pair.started(Path::new("/x.lock"), &run);
        pair.ended(&run, &end);
        assert_eq!(pair.1.0, ["started", "ended"]);
        assert_eq!(kinds(&pair.0), [EventKind::Start, EventKind::End]);
        let ev = pair.0.log().0.borrow()[1].clone();
        assert_eq!(ev.signal.as_deref(), Some("TERM"));
        assert_eq!(ev.ended_by, Some(crate::journal::EndReason::MaxTime));
        assert_eq!(ev.duration, Some(5.0));
        assert_eq!(ev.max_rss, Some(4096));
        assert!(pair.0.error().is_none());
    }
}
