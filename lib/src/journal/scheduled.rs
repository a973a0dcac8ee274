//! What a lock's journal keeps of its schedule ([`Scheduled`]): the
//! schedule its fires were given (or why a fire could not read the one it
//! was given), the fires seen, the scheduled fires
//! recorded missed, and the fires that wait before they take the lock. Read by
//! the pairing of events ([`super::History`]) from the `schedule`,
//! `missed` and `delay` events, and from the times of the fires
//! (`start`, `skip`, `stop`). A journal written before these events
//! existed reads as one with no schedule and nothing missed.

use super::EventKind;
use super::event::sane_time;

/// The `reason` of the `delay` a `run --catch-up` fire writes as it
/// decides to run for its scheduled fire ([`Scheduled::caught_up`]).
pub const CATCH_UP: &str = "catch-up";

/// The most fires kept waiting at once ([`Scheduled::delays`]): one per
/// process that waits, so a handful; more is a journal not to believe.
const MAX_DELAYS: usize = 64;

/// The most `missed` events kept ([`Scheduled::missed`]): the latest.
const MAX_MISSED: usize = 1_000;

/// Scheduled fires that a fire of the job found passed unseen, as its
/// `missed` event records them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MissedFires {
    /// When the fire that found them recorded them (Unix seconds).
    pub time: f64,
    /// The first fire missed (Unix seconds).
    pub first: f64,
    /// The last fire missed (Unix seconds).
    pub last: f64,
    /// How many: at least that many when not `exact`.
    pub count: u64,
    /// Whether every fire was counted.
    pub exact: bool,
    /// The schedule they are fires of (its canonical spec), when recorded.
    pub schedule: Option<String>,
    /// The host of the fire that found them, when recorded.
    pub host: Option<String>,
}

/// A fire that waits before it takes the lock, as its `delay` event says.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Delay {
    /// The waiting process.
    pub pid: u32,
    /// When it began to wait (Unix seconds): when the fire came.
    pub since: f64,
    /// When its wait ends (Unix seconds).
    pub until: f64,
    /// The command it will run.
    pub cmd: Option<String>,
    /// The host it waits on, when recorded (a store's fires are on
    /// several).
    pub host: Option<String>,
}

/// How long after its wait should have ended a fire that still has not
/// started, skipped or closed its wait may still be taking the lock: a
/// busy host's seconds. Past it, the fire is not believed to wait any
/// more, whatever lives at its pid.
pub const START_SLACK: f64 = 60.0;

impl Delay {
    /// Whether the waiting process lives (it is not gone, nor a zombie).
    /// A pid alone is not a process: [`Delay::waits_at`] bounds how long
    /// one is believed. A process of another host (a store's fire) cannot
    /// be asked here: it is believed for as long.
    pub fn lives(&self) -> bool {
        if self
            .host
            .as_deref()
            .is_some_and(|h| h != crate::procfs::host_name())
        {
            return true;
        }
        crate::procfs::ProcId::of(self.pid).is_some()
    }

    /// Whether this fire still waits before the lock at `now`: its process
    /// lives, and its wait is not over by more than [`START_SLACK`]. A
    /// waiter killed while it waits writes nothing more; it waits no more
    /// once its process is gone, and a process that took its pid is
    /// believed no longer than the wait it announced.
    pub fn waits_at(&self, now: f64) -> bool {
        now <= self.until + START_SLACK && self.lives()
    }
}

/// A schedule a fire was given and could not read where it ran (a `TZ`
/// that names no zone): its `schedule` event with a `reason`. The fire
/// ran without it; it is mended once a fire records a schedule it read.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct UnreadableSchedule {
    /// When a fire first recorded it (Unix seconds).
    pub time: f64,
    /// The spec as the fire was given it.
    pub spec: String,
    /// Why it could not be read, and the fix.
    pub reason: String,
}

/// What the journal says of the lock's schedule.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Scheduled {
    /// The schedule last recorded (its canonical spec).
    pub schedule: Option<String>,
    /// When that schedule was first recorded, since the journal last
    /// recorded another (Unix seconds).
    pub schedule_since: Option<f64>,
    /// The schedule the last fire that recorded one could not read, and
    /// why: `None` once a later fire recorded one it read.
    pub unreadable: Option<UnreadableSchedule>,
    /// The last fire: the latest `start`, `skip` or `stop` (Unix seconds).
    pub last_fire: Option<f64>,
    /// The last end of a run: the latest `end` or `release` (Unix
    /// seconds). A scheduled fire that passed while a run held the lock is
    /// not a fire that never came: had it come, it would have skipped.
    pub last_end: Option<f64>,
    /// The fires recorded missed, oldest first (the latest
    /// 1,000 events). An event whose fires, of the same schedule, end no
    /// later than the last recorded is a repeat, and not taken in.
    pub missed: Vec<MissedFires>,
    /// Every scheduled fire recorded missed (the counts of all `missed` events
    /// taken in).
    pub missed_total: u64,
    /// The latest time a `run --catch-up` fire said it came for the
    /// scheduled fire it serves, and would run for it (a `delay` whose
    /// `reason` is [`CATCH_UP`]): a later catch-up finds that fire served,
    /// whether or not the first lives on (Unix seconds).
    pub caught_up: Option<f64>,
    /// Fires still waiting before they take the lock, as far as the
    /// journal says: a `delay` with no later `start`, `skip` or `delay`
    /// of its process. Whether each still lives is for the reader to ask.
    pub delays: Vec<Delay>,
}

/// What the pairing reads of an event for [`Scheduled`].
pub(super) struct ScheduleFields<'a> {
    pub time: f64,
    pub event: EventKind,
    pub pid: Option<u32>,
    pub by: Option<u32>,
    pub schedule: Option<&'a str>,
    pub reason: Option<&'a str>,
    pub cmd: Option<&'a str>,
    pub host: Option<&'a str>,
    pub first: Option<f64>,
    pub last: Option<f64>,
    pub count: Option<u64>,
    pub exact: Option<bool>,
    pub until: Option<f64>,
}

impl Scheduled {
    /// Takes in one event (its time already found sane).
    pub(super) fn add(&mut self, ev: &ScheduleFields<'_>, cap: impl Fn(&str) -> String) {
        match ev.event {
            EventKind::Start | EventKind::Skip | EventKind::Stop => {
                self.last_fire = Some(self.last_fire.map_or(ev.time, |t| t.max(ev.time)));
                // The fire that waited has started, or skipped.
                let waiter = if ev.event == EventKind::Skip {
                    ev.by
                } else {
                    ev.pid
                };
                if let Some(p) = waiter {
                    self.delays.retain(|d| d.pid != p);
                }
            }
            EventKind::End | EventKind::Release => {
                self.last_end = Some(self.last_end.map_or(ev.time, |t| t.max(ev.time)));
            }
            EventKind::Schedule => {
                let Some(spec) = ev.schedule else { return };
                if let Some(reason) = ev.reason {
                    if self
                        .unreadable
                        .as_ref()
                        .is_none_or(|u| u.spec != cap(spec) || u.reason != cap(reason))
                    {
                        self.unreadable = Some(UnreadableSchedule {
                            time: ev.time,
                            spec: cap(spec),
                            reason: cap(reason),
                        });
                    }
                    return;
                }
                self.unreadable = None;
                if self.schedule.as_deref() != Some(cap(spec).as_str()) {
                    self.schedule = Some(cap(spec));
                    self.schedule_since = Some(ev.time);
                }
            }
            EventKind::Missed => self.add_missed(ev, cap),
            EventKind::Delay => {
                if ev.reason == Some(CATCH_UP) {
                    self.caught_up = Some(self.caught_up.map_or(ev.time, |t| t.max(ev.time)));
                }
                let Some(pid) = ev.pid else { return };
                self.delays.retain(|d| d.pid != pid);
                if let Some(until) = ev.until.filter(|u| sane_time(*u) && *u > ev.time) {
                    if self.delays.len() >= MAX_DELAYS {
                        self.delays.remove(0);
                    }
                    self.delays.push(Delay {
                        pid,
                        since: ev.time,
                        until,
                        cmd: ev.cmd.map(&cap),
                        host: ev.host.map(&cap),
                    });
                }
            }
            _ => {}
        }
    }

    fn add_missed(&mut self, ev: &ScheduleFields<'_>, cap: impl Fn(&str) -> String) {
        let (Some(first), Some(last)) = (ev.first, ev.last) else {
            return;
        };
        if !(sane_time(first) && sane_time(last)) || first > last {
            return;
        }
        // Fires already recorded missed (two fires that looked at the
        // same instant): counted once.
        if self.missed.last().is_some_and(|m| {
            last <= m.last && m.schedule.as_deref() == ev.schedule.map(&cap).as_deref()
        }) {
            return;
        }
        let count = ev.count.unwrap_or(1).max(1);
        self.missed_total = self.missed_total.saturating_add(count);
        if self.missed.len() >= MAX_MISSED {
            self.missed.remove(0);
        }
        self.missed.push(MissedFires {
            time: ev.time,
            first,
            last,
            count,
            exact: ev.exact.unwrap_or(true),
            schedule: ev.schedule.map(&cap),
            host: ev.host.map(cap),
        });
    }

    /// The last time the journal saw a fire, or a run: its last
    /// `start`, `skip` or `stop`, a fire's `missed` (which a fire writes,
    /// whatever else it does), or the end of a run (the scheduled fires while it
    /// ran were its own).
    pub fn last_seen(&self) -> Option<f64> {
        let missed = self.missed.last().map(|m| m.time);
        [self.last_fire, missed, self.last_end]
            .into_iter()
            .flatten()
            .reduce(f64::max)
    }

    /// When the latest fire still waiting before the lock at `now` came
    /// ([`Delay::waits_at`]): a fire that came for a scheduled time and
    /// waits out its jitter or spread has served it.
    pub fn waiting_since(&self, now: f64) -> Option<f64> {
        self.delays
            .iter()
            .filter(|d| d.waits_at(now))
            .map(|d| d.since)
            .reduce(f64::max)
    }

    /// From when a fire of `schedule` (its canonical spec) counts the
    /// fires it may have missed (Unix seconds): the last fire seen or the
    /// last end of a run, and never before a fire already recorded missed
    /// (each is recorded once). A schedule other than the one recorded counts from `now`:
    /// its fires were not due before it was given. `None` when the
    /// journal has seen no fire (nothing to count from).
    pub fn counting_from(&self, schedule: &str, now: f64) -> Option<f64> {
        if self.schedule.as_deref().is_some_and(|s| s != schedule) {
            return Some(now);
        }
        let recorded = self.missed.last().map(|m| m.last);
        let since = self
            .schedule
            .as_ref()
            .and(self.schedule_since)
            .filter(|_| self.last_fire.is_none());
        [self.last_fire, self.last_end, recorded, since]
            .into_iter()
            .flatten()
            .reduce(f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::{CATCH_UP, START_SLACK};
    use crate::journal::{Event, EventKind, History};

    /// An earlier version's lines read as before, with no schedule; the
    /// schedule, the missed fires and the waits read back from theirs,
    /// fires recorded twice count once, and a bad value costs its field,
    /// not the line.
    #[test]
    fn the_schedule_missed_slots_and_waits_read_back() {
        let old = [
            r#"{"v":1,"time":100,"event":"start","token":"a","pid":7}"#,
            r#"{"v":1,"time":110,"event":"end","token":"a","pid":7,"exit":0}"#,
        ];
        let h = History::from_lines(old);
        assert_eq!(h.runs.len(), 1);
        assert_eq!(h.scheduled.schedule, None);
        assert_eq!(h.scheduled.last_fire, Some(100.0));
        assert_eq!(h.scheduled.last_end, Some(110.0));
        assert_eq!(h.scheduled.last_seen(), Some(110.0));
        assert_eq!(h.scheduled.counting_from("@hourly", 500.0), Some(110.0));

        let mut lines: Vec<String> = old.iter().map(|s| (*s).to_owned()).collect();
        let mut sched = Event::schedule("@hourly");
        sched.time = 120.0;
        let m = crate::schedule::Missed {
            first: 3600,
            last: 7200,
            count: 2,
            exact: true,
        };
        let mut missed = Event::missed("@hourly", &m);
        missed.time = 7300.0;
        // A second fire that looked at the same instant records them again.
        let mut again = missed.clone();
        again.time = 7301.0;
        let mut delay = Event::delay(99, Some("job"), 7400.0);
        delay.time = 7310.0;
        for e in [&sched, &missed, &again, &delay] {
            lines.push(
                String::from_utf8(e.to_line())
                    .unwrap()
                    .trim_end()
                    .to_owned(),
            );
        }
        lines.push(r#"{"v":1,"time":7320,"event":"missed","first":"x","last":1}"#.into());
        let h = History::from_lines(lines.iter().map(String::as_str));
        let s = &h.scheduled;
        assert_eq!(s.schedule.as_deref(), Some("@hourly"));
        assert_eq!(s.schedule_since, Some(120.0));
        assert_eq!(s.missed_total, 2, "the repeat is counted once");
        assert_eq!(s.missed.len(), 1);
        assert_eq!((s.missed[0].first, s.missed[0].last), (3600.0, 7200.0));
        assert_eq!(s.last_seen(), Some(7300.0));
        assert_eq!(s.counting_from("@hourly", 8000.0), Some(7200.0));
        // Another schedule counts from now.
        assert_eq!(s.counting_from("@daily", 8000.0), Some(8000.0));
        assert_eq!(s.delays.len(), 1);
        assert_eq!(s.delays[0].until, 7400.0);

        // The waiting fire started: it waits no more.
        let mut start = Event::of(EventKind::Start, "b", 7400.0);
        start.pid = Some(99);
        lines.push(
            String::from_utf8(start.to_line())
                .unwrap()
                .trim_end()
                .to_owned(),
        );
        let h = History::from_lines(lines.iter().map(String::as_str));
        assert!(h.scheduled.delays.is_empty());
        assert_eq!(h.runs.len(), 2, "the schedule's events are not runs");
    }

    /// A store's history has every host's fires: a wait of another host's
    /// fire is believed (its pid means nothing here) until its end and the
    /// slack, one of this host's whose pid is gone is not; a catch-up's
    /// `delay` says it came for its fire, whatever became of it; the host
    /// that found missed fires is read back.
    #[test]
    fn another_hosts_wait_and_a_catch_ups_fire_read_back() {
        let dead = u32::MAX - 1;
        let line = |host: &str, time: f64, until: f64, reason: &str| {
            format!(
                r#"{{"v":1,"time":{time},"event":"delay","pid":{dead},"host":"{host}","until":{until}{reason}}}"#
            )
        };
        let here = crate::procfs::host_name();
        let there = format!("{here}-elsewhere");
        let h = History::from_lines([line(&there, 1000.0, 1100.0, "").as_str()]);
        let s = &h.scheduled;
        assert_eq!(s.delays[0].host.as_deref(), Some(there.as_str()));
        assert_eq!(s.waiting_since(1050.0), Some(1000.0));
        assert_eq!(s.waiting_since(1100.0 + START_SLACK), Some(1000.0));
        assert_eq!(s.waiting_since(1101.0 + START_SLACK), None);
        assert_eq!(s.caught_up, None);
        let h = History::from_lines([line(&here, 1000.0, 1100.0, "").as_str()]);
        assert_eq!(h.scheduled.waiting_since(1050.0), None, "its pid is gone");
        let reason = format!(r#","reason":"{CATCH_UP}""#);
        let h = History::from_lines([line(&here, 1000.0, 1001.0, &reason).as_str()]);
        assert_eq!(h.scheduled.caught_up, Some(1000.0));
        assert_eq!(h.scheduled.waiting_since(1000.5), None);
        let missed = format!(
            r#"{{"v":1,"time":2000,"event":"missed","host":"{there}","first":100,"last":200,"count":2}}"#
        );
        let h = History::from_lines([missed.as_str()]);
        assert_eq!(h.scheduled.missed[0].host.as_deref(), Some(there.as_str()));
    }
}
