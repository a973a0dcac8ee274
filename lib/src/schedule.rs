//! Schedules: the times a job is meant to fire at, so that a fire that
//! never came can be told from one that did.
//!
//! A [`Schedule`] is read from a spec ([`Schedule::parse`]):
//!
//! - **A cron expression** of cron(8)'s five fields (minute, hour, day of
//!   month, month, day of week): numbers, names (`JAN`, `MON`), `*`,
//!   ranges (`1-5`), steps (`*/15`, `0-30/10`) and lists (`1,15`); or one of
//!   the nicknames `@hourly`, `@daily` (`@midnight`), `@weekly`, `@monthly`,
//!   `@yearly` (`@annually`). The day of month and the day of week combine
//!   as in Vixie cron (and cronie): when both are restricted a day matching
//!   either fires, and when either starts with `*` a day must match both.
//!   Seconds, years and the Quartz extensions (`L`, `W`, `#`, `?`) are
//!   refused: the schedule describes the cron line that fires the job, and
//!   cron has none of them. `@reboot` is refused: it is one fire at boot,
//!   not a schedule of times, so no fire of it can be missed.
//!   Cron's times are wall-clock times of the local time zone (`TZ`, else
//!   `/etc/localtime`, else UTC as glibc does), or of the zone a
//!   `CRON_TZ=Zone` prefix names (`CRON_TZ=Europe/Berlin 0 2 * * *`, as
//!   cronie reads it; `TZ=` is taken too), read from the system's
//!   `/usr/share/zoneinfo` (or `$TZDIR`) when the spec is parsed: no
//!   time-zone database is built in.
//! - **`every DUR`** (`every 15m`, `every 2h`, `every 1d`, `every 90s`,
//!   `every 1h30m`; units `s`, `m`, `h`, `d`, `w` and their long names):
//!   slots at the multiples of DUR since the Unix epoch, in real seconds.
//!   `every 15m` is at :00, :15, :30 and :45 of every hour, `every 2h` at
//!   the even hours of UTC, `every 1d` at 00:00 UTC, `every 7d` at 00:00
//!   UTC on Thursdays; a DST change moves none of them. Anchoring to the
//!   epoch makes the slots a function of the spec alone, with no state to
//!   keep or lose: that is what lets any process, at any time, say which
//!   slots have passed. For a time of day in a local zone, write cron.
//!
//! **Slots.** A schedule's slots are instants (Unix seconds).
//! [`Schedule::next_slot`] is the first slot after a time,
//! [`Schedule::previous_slot`] the last at or before it; [`Schedule::slots`]
//! walks them. A DST change is read as Vixie cron and cronie read it. A
//! job of fixed times (neither its minute nor its hour starts with `*`:
//! `30 2 * * *`, `0,30 2 * * *`, `15 1-3 * * *`) whose times a
//! spring-forward skips has one slot for them, at the first instant after
//! the gap (03:00 on the last Sunday of March in Berlin, when cron runs
//! them), and a time a fall-back repeats has one slot, at the first of the
//! two (02:30 CEST, not 02:30 CET). A job whose minute or hour starts with
//! `*` (`*/15 * * * *`, `30 * * * *`, `0 */2 * * *`) follows the wall
//! clock: no slot in the skipped hour, and slots in both halves of the
//! repeated one (two real hours, and cron fires in both).
//!
//! **Missed slots.** [`missed`] counts the slots in `(last_seen, now -
//! late]`; [`Schedule::fire`] tells a fire which slot it serves, if any,
//! and which slots before it passed unseen. Counting is bounded: past
//! [`MAX_COUNTED`] slots the count stops and says so ([`Missed::exact`]),
//! the first and last slots still exact.
//!
//! **Spread and jitter.** [`spread_offset`] is a stable delay for a lock on
//! a host (systemd's `RandomizedOffsetSec=`): a fixed hash, written down
//! here, of the machine id ([`machine_id`]) and the lock, the same at every
//! fire and in every version. [`jitter`] is a fresh random delay from the
//! kernel's random source.
//!
//! Nothing here runs until it is called: no time zone is read, no file
//! opened, at start.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, JobType};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// The most slots [`missed`] and [`Schedule::slots_between`] count one by
/// one (a cron schedule's; an `every` schedule's are counted by
/// arithmetic, exactly). Past it, [`Missed::exact`] is false.
pub const MAX_COUNTED: u64 = 10_000;

/// The longest `every` period: one year of 366 days.
pub const MAX_EVERY: Duration = Duration::from_secs(366 * 86_400);

/// What is wrong with a schedule's spec, and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// Nothing was given.
    #[error(
        "the schedule is empty: give a cron expression (`0 2 * * *`, `@daily`) or `every DUR` (`every 15m`)"
    )]
    Empty,
    /// `@reboot`: one fire at boot, not a schedule of times.
    #[error(
        "`@reboot` is not a schedule: it fires once at boot, so no fire of it can be missed. \
         Give the times the job is meant to run at (`@daily`, `0 2 * * *`); \
         a fire at boot can then make up for a missed one"
    )]
    Reboot,
    /// An `@name` that is not one of cron's nicknames.
    #[error(
        "`{name}` is not a cron nickname: use @hourly, @daily (@midnight), @weekly, @monthly or @yearly (@annually), or five fields"
    )]
    UnknownNickname {
        /// The nickname as given.
        name: String,
    },
    /// Not five fields.
    #[error(
        "`{spec}` has {count} field{s}: a cron expression has 5 (minute hour day-of-month month day-of-week), without seconds or years",
        s = if *count == 1 { "" } else { "s" }
    )]
    FieldCount {
        /// The expression as given.
        spec: String,
        /// How many fields it has.
        count: usize,
    },
    /// A field uses syntax cron(8) does not have (Quartz's `L`, `W`, `#`,
    /// `?`, a name in a numeric field, an unknown name).
    #[error(
        "the {field} field `{value}` of `{spec}` has {what}: cron's fields take numbers{names}, `*`, ranges (`1-5`), steps (`*/15`) and lists (`1,15`)"
    )]
    NotCron {
        /// Which field (`minute`, `hour`, `day-of-month`, `month`,
        /// `day-of-week`).
        field: &'static str,
        /// The field as given.
        value: String,
        /// The expression as given.
        spec: String,
        /// What in it is not cron's.
        what: String,
        /// The names the field also takes, if any (`, names (JAN-DEC)`).
        names: &'static str,
    },
    /// A field that the cron parser refused (a value out of range, a step
    /// of zero, a reversed range).
    #[error("the {field} field `{value}` of `{spec}` is not valid: {reason}; it takes {range}")]
    Field {
        /// Which field.
        field: &'static str,
        /// The field as given.
        value: String,
        /// The expression as given.
        spec: String,
        /// Why, in the cron parser's words.
        reason: String,
        /// The values the field takes.
        range: &'static str,
    },
    /// The fields are each valid but no time matches them all (`0 0 31 4
    /// *`: April has no 31st).
    #[error(
        "`{spec}` never fires: no day in eight years matches its day of month and month (April, June, September and November have 30 days, February 28 or 29)"
    )]
    Never {
        /// The expression as given.
        spec: String,
    },
    /// A `CRON_TZ=` name that is not a name of the time-zone database.
    #[error(
        "`CRON_TZ={name}` is not a time zone of the system's database (/usr/share/zoneinfo, or $TZDIR): {reason}; \
         name one as `Area/City` (`Europe/Berlin`, `America/New_York`, `UTC`)"
    )]
    Zone {
        /// The name as given.
        name: String,
        /// Why it was not found.
        reason: String,
    },
    /// The local time zone could not be read.
    #[error(
        "the local time zone could not be read ({source_name}): {reason}; \
         set TZ to a zone's name (`TZ=Europe/Berlin`), or prefix the schedule with `CRON_TZ=Zone`"
    )]
    LocalZone {
        /// Where it was looked for: `TZ=…` or `/etc/localtime`.
        source_name: String,
        /// Why it failed.
        reason: String,
    },
    /// An `every` whose duration is not one.
    #[error(
        "`{spec}` is not a period: {reason}; write `every` and a duration such as `every 15m`, `every 2h`, `every 1d`, `every 90s`"
    )]
    Every {
        /// The spec as given.
        spec: String,
        /// What is wrong with the duration.
        reason: String,
    },
    /// `CRON_TZ=` before `every`, whose slots no zone moves.
    #[error(
        "`CRON_TZ={name}` changes nothing for `{every}`: its slots are counted in real seconds from the Unix epoch. \
         Drop the prefix, or write the times as a cron expression (`0 2 * * *`) to have them in that zone"
    )]
    ZoneWithEvery {
        /// The zone named.
        name: String,
        /// The `every` part.
        every: String,
    },
}

/// A schedule: a cron expression in a time zone, or a fixed period
/// anchored at the Unix epoch. See the [module](self) documentation.
#[derive(Clone)]
pub struct Schedule {
    rule: Rule,
}

#[derive(Clone)]
enum Rule {
    Cron(Box<CronRule>),
    Every { period: i64 },
}

#[derive(Clone)]
struct CronRule {
    /// The canonical expression: a nickname, or the five fields with one
    /// space between them.
    text: String,
    /// The parsed expression (with cron's day rule made explicit).
    cron: Cron,
    tz: TimeZone,
    /// The `CRON_TZ=` name, if one was given.
    zone: Option<String>,
    /// A job of fixed times with more than one of them (`0,30 2 * * *`,
    /// `15 1-3 * * *`): cron's rule for DST is the fixed-time one (neither
    /// minute nor hour starts with `*`), croner's the one of jobs that
    /// follow the wall clock (more than one minute or hour), so its slots
    /// are corrected ([`CronRule::next`]).
    fixed_times: bool,
}

/// The cron fields, their names and what each takes.
const FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 (0 and 7 are Sunday) or SUN-SAT"),
];
const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl Schedule {
    /// Reads a spec: a cron expression, with an optional `CRON_TZ=Zone`
    /// prefix, or `every DUR`. A cron expression without a prefix is read
    /// in the local time zone, looked up now.
    pub fn parse(spec: &str) -> Result<Schedule, ScheduleError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let (zone, rest) = split_zone(spec);
        if let Some(every) = strip_every(rest) {
            if let Some(name) = zone {
                return Err(ScheduleError::ZoneWithEvery {
                    name: name.to_owned(),
                    every: rest.to_owned(),
                });
            }
            let period = parse_period(every).map_err(|reason| ScheduleError::Every {
                spec: spec.to_owned(),
                reason,
            })?;
            return Ok(Schedule {
                rule: Rule::Every { period },
            });
        }
        let tz = match zone {
            Some(name) => named_zone(name)?,
            None => local_zone()?,
        };
        let rule = parse_cron(rest, tz, zone.map(str::to_owned))?;
        Ok(Schedule {
            rule: Rule::Cron(Box::new(rule)),
        })
    }

    /// The first slot after `at` (Unix seconds); `None` past the year
    /// 9999.
    pub fn next_slot(&self, at: i64) -> Option<i64> {
        match &self.rule {
            Rule::Every { period } => at.div_euclid(*period).checked_add(1)?.checked_mul(*period),
            Rule::Cron(c) => c.next(at),
        }
    }

    /// The last slot at or before `at` (a slot at `at` itself is the
    /// previous one); `None` before the year 1 (or a cron schedule's before
    /// its first slot).
    pub fn previous_slot(&self, at: i64) -> Option<i64> {
        match &self.rule {
            Rule::Every { period } => at.div_euclid(*period).checked_mul(*period),
            Rule::Cron(c) => c.previous(at),
        }
    }

    /// The gap between the slot at or before `t` and the one after it:
    /// the schedule's period at `t` (an hour, a day, a day and an hour
    /// across a fall-back).
    pub fn period_at(&self, t: i64) -> Option<Duration> {
        if let Rule::Every { period } = self.rule {
            return Some(Duration::from_secs(period.unsigned_abs()));
        }
        let before = self.previous_slot(t)?;
        let after = self.next_slot(t)?;
        Some(Duration::from_secs(
            after.checked_sub(before)?.unsigned_abs(),
        ))
    }

    /// The slots in `(after, up_to]`, in order, found one at a time as the
    /// iterator is read (take what is shown).
    pub fn slots(&self, after: i64, up_to: i64) -> Slots<'_> {
        Slots {
            schedule: self,
            at: after,
            up_to,
        }
    }

    /// The slots in `(after, up_to]`: the first, the last and how many
    /// (counted up to [`MAX_COUNTED`]); `None` when there is none.
    pub fn slots_between(&self, after: i64, up_to: i64) -> Option<Missed> {
        self.unseen(after, up_to, &[])
    }

    /// The slots in `(after, up_to]` that no fire was seen for: a slot is
    /// seen when a time of `seen` (sorted, oldest first: fires, skips,
    /// stops) falls in its window, from the slot to the next one. A long
    /// run that began in one slot does not see the next: a fire of that
    /// slot that found the lock held and skipped does. Slots are examined
    /// up to [`MAX_COUNTED`] of them; past that, [`Missed::exact`] is
    /// false and `count` a lower bound, and `last` is exact only when no
    /// time of `seen` lies past the slots examined (all the rest are then
    /// unseen), else the last one found.
    pub fn unseen(&self, after: i64, up_to: i64, seen: &[i64]) -> Option<Missed> {
        let first_slot = self.next_slot(after)?;
        if first_slot > up_to {
            return None;
        }
        debug_assert!(seen.is_sorted(), "seen times come oldest first");
        let mut seen = seen
            .iter()
            .copied()
            .skip_while(|t| *t < first_slot)
            .peekable();
        if let Rule::Every { period } = self.rule
            && seen.peek().is_none()
        {
            let last = self.previous_slot(up_to)?;
            return Some(Missed {
                first: first_slot,
                last,
                count: ((last - first_slot) / period + 1).unsigned_abs(),
                exact: true,
            });
        }
        let mut found: Option<Missed> = None;
        let mut slot = first_slot;
        let mut examined = 0;
        loop {
            let next = self.next_slot(slot);
            // Times before this slot's window saw earlier slots.
            while seen.next_if(|t| *t < slot).is_some() {}
            let covered = seen.peek().is_some_and(|t| next.is_none_or(|n| *t < n));
            if !covered {
                match &mut found {
                    Some(m) => {
                        m.last = slot;
                        m.count += 1;
                    }
                    None => {
                        found = Some(Missed {
                            first: slot,
                            last: slot,
                            count: 1,
                            exact: true,
                        });
                    }
                }
            }
            examined += 1;
            let Some(next) = next.filter(|n| *n <= up_to) else {
                return found;
            };
            if examined >= MAX_COUNTED as usize {
                // Not examined further. With no time of `seen` ahead, the
                // rest are all unseen: the last is known, not how many.
                if seen.peek().is_some() {
                    return found.map(|m| Missed { exact: false, ..m });
                }
                return Some(Missed {
                    first: found.map_or(next, |m| m.first),
                    last: self.previous_slot(up_to)?,
                    count: found.map_or(1, |m| m.count),
                    exact: false,
                });
            }
            slot = next;
        }
    }

    /// What a fire at `now` is: the slot it serves, when the last slot at
    /// or before `now` is at most `grace` old, and the slots after `since`
    /// (the last time a fire looked, or the schedule was first given)
    /// before it that no time of `seen` covers ([`Schedule::unseen`]).
    pub fn fire(&self, since: i64, seen: &[i64], now: i64, grace: Duration) -> Fire {
        let grace = secs(grace);
        let slot = self
            .previous_slot(now)
            .filter(|s| now.saturating_sub(*s) <= grace);
        let missed = match slot {
            // The slot the fire serves is not missed: the ones before it.
            Some(s) => self.unseen(since, s.saturating_sub(1), seen),
            None => self.unseen(since, now, seen),
        };
        Fire { slot, missed }
    }

    /// The time zone's name: the `CRON_TZ=` zone, else the local zone's
    /// name when it has one (`Europe/Berlin`; none for a POSIX `TZ` rule
    /// or a copied `/etc/localtime`); `None` for `every`, which has none.
    pub fn zone_name(&self) -> Option<&str> {
        match &self.rule {
            Rule::Every { .. } => None,
            Rule::Cron(c) => c
                .zone
                .as_deref()
                .or_else(|| c.tz.iana_name())
                .filter(|name| !name.is_empty()),
        }
    }

    /// `t` as a wall-clock time of the schedule's zone, to the minute:
    /// `2025-03-30 03:00 CEST` (UTC for `every`).
    pub fn wall_clock(&self, t: i64) -> Option<String> {
        let tz = match &self.rule {
            Rule::Every { .. } => TimeZone::UTC,
            Rule::Cron(c) => c.tz.clone(),
        };
        let z = Timestamp::from_second(t).ok()?.to_zoned(tz);
        Some(z.strftime("%Y-%m-%d %H:%M %Z").to_string())
    }

    /// Whether this is an `every` schedule (slots at fixed real-time
    /// intervals), not a cron expression.
    pub fn is_every(&self) -> bool {
        matches!(self.rule, Rule::Every { .. })
    }
}

/// The most slots of the later half of a repeated hour that a search
/// passes over (an hour of a job of every minute, and more).
const MAX_FOLD_STEPS: usize = 2_000;

impl CronRule {
    /// The first slot after `at`: croner's, but for a job of several fixed
    /// times, which cron runs as it runs a job of one (Vixie cron and
    /// cronie: the times a spring-forward skips, once, right after the
    /// gap; a repeated time, at its first occurrence only).
    fn next(&self, at: i64) -> Option<i64> {
        if !self.fixed_times {
            return self.croner_next(at);
        }
        let mut from = at;
        for _ in 0..MAX_FOLD_STEPS {
            let next = self.croner_next(from)?;
            if let Some(gap) = self.gap_slot(from, next) {
                return Some(gap);
            }
            if !self.in_later_fold(next) {
                return Some(next);
            }
            from = next;
        }
        None
    }

    /// The last slot at or before `at` (the same slots as
    /// [`CronRule::next`], searched backwards).
    fn previous(&self, at: i64) -> Option<i64> {
        if !self.fixed_times {
            return self.croner_previous(at);
        }
        let mut to = at;
        for _ in 0..MAX_FOLD_STEPS {
            let previous = self.croner_previous(to)?;
            if let Some(gap) = self.gap_slot(previous, to) {
                return Some(gap);
            }
            if !self.in_later_fold(previous) {
                return Some(previous);
            }
            to = previous.checked_sub(1)?;
        }
        None
    }

    fn croner_next(&self, at: i64) -> Option<i64> {
        let from = Timestamp::from_second(at).ok()?.to_zoned(self.tz.clone());
        let next = self.cron.find_next_occurrence(&from, false).ok()?;
        Some(next.timestamp().as_second())
    }

    fn croner_previous(&self, at: i64) -> Option<i64> {
        let from = Timestamp::from_second(at).ok()?.to_zoned(self.tz.clone());
        let previous = self.cron.find_previous_occurrence(&from, true).ok()?;
        Some(previous.timestamp().as_second())
    }

    /// The slot of a spring-forward in `(after, up_to]` that skipped one of
    /// the job's times: the first instant after the gap.
    fn gap_slot(&self, after: i64, up_to: i64) -> Option<i64> {
        let transition = self
            .tz
            .following(Timestamp::from_second(after).ok()?)
            .next()?;
        let at = transition.timestamp();
        if at.as_second() > up_to {
            return None;
        }
        let before = self
            .tz
            .to_offset(at.checked_sub(SignedDuration::from_secs(1)).ok()?);
        let after = transition.offset();
        // The wall-clock minutes that did not exist.
        let mut minute = before.to_datetime(at);
        let end = after.to_datetime(at);
        while minute < end {
            if self.cron.is_time_matching(&minute).unwrap_or(false) {
                return Some(at.as_second());
            }
            minute = minute.checked_add(SignedDuration::from_secs(60)).ok()?;
        }
        None
    }

    /// Whether `t` is in the later half of an hour a fall-back repeats.
    fn in_later_fold(&self, t: i64) -> bool {
        let Ok(t) = Timestamp::from_second(t) else {
            return false;
        };
        match self
            .tz
            .to_ambiguous_timestamp(self.tz.to_datetime(t))
            .offset()
        {
            AmbiguousOffset::Fold { after, .. } => self.tz.to_offset(t) == after,
            _ => false,
        }
    }
}

/// Reads a spec with [`Schedule::parse`].
impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schedule::parse(s)
    }
}

/// The canonical spec: what [`Schedule::parse`] reads back to the same
/// schedule (`CRON_TZ=Europe/Berlin 0 2 * * *`, `@daily`, `every 15m`).
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rule {
            Rule::Every { period } => write!(f, "every {}", canonical_period(*period)),
            Rule::Cron(c) => {
                if let Some(zone) = &c.zone {
                    write!(f, "CRON_TZ={zone} ")?;
                }
                f.write_str(&c.text)
            }
        }
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule({self})")
    }
}

/// Two schedules are equal when their canonical specs are (a schedule
/// without `CRON_TZ=` is read in whatever the local zone is).
impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}
impl Eq for Schedule {}

/// The slots of a schedule in a range, in order ([`Schedule::slots`]).
#[derive(Debug, Clone)]
pub struct Slots<'a> {
    schedule: &'a Schedule,
    at: i64,
    up_to: i64,
}

impl Iterator for Slots<'_> {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        let next = self.schedule.next_slot(self.at)?;
        if next > self.up_to {
            return None;
        }
        self.at = next;
        Some(next)
    }
}

/// Slots that passed unseen: the first and the last (Unix seconds) and
/// how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Missed {
    /// The first missed slot.
    pub first: i64,
    /// The last missed slot.
    pub last: i64,
    /// How many: all of them when [`Missed::exact`], else at least that
    /// many (counting stopped at [`MAX_COUNTED`] slots).
    pub count: u64,
    /// Whether every slot of the range was examined: `count` is then all
    /// of them.
    pub exact: bool,
}

/// The slots in `(last_seen, now - late]`: the slots a fire should have
/// come for by now, allowing it `late`, that no fire seen since
/// `last_seen` (a run's start, a skip, a stop) covers. `None` when there
/// is none.
pub fn missed(schedule: &Schedule, last_seen: i64, now: i64, late: Duration) -> Option<Missed> {
    schedule.slots_between(last_seen, now.saturating_sub(secs(late)))
}

/// A fire, as its schedule sees it ([`Schedule::fire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fire {
    /// The slot it serves: the last slot at or before the fire, when that
    /// is within the grace; `None` for a fire outside any slot (at boot,
    /// by hand).
    pub slot: Option<i64>,
    /// The slots before it that passed unseen.
    pub missed: Option<Missed>,
}

/// What a fire that may catch up does ([`Fire::catch_up`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatchUp {
    /// It serves a slot: it runs as any fire does.
    OnSlot,
    /// It serves no slot, and slots were missed within the window: it runs
    /// once for all of them.
    MakeUp,
    /// It serves no slot and nothing was missed: nothing to do.
    NothingMissed,
    /// It serves no slot, and the last slot missed is older than the
    /// window: nothing to do.
    TooOld,
}

impl Fire {
    /// What a fire at `now` that may catch up does, with missed slots made
    /// up for when the last of them is at most `within` old.
    pub fn catch_up(&self, now: i64, within: Duration) -> CatchUp {
        if self.slot.is_some() {
            return CatchUp::OnSlot;
        }
        match self.missed {
            None => CatchUp::NothingMissed,
            Some(m) if now.saturating_sub(m.last) <= secs(within) => CatchUp::MakeUp,
            Some(_) => CatchUp::TooOld,
        }
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Splits a `CRON_TZ=Zone ` (or `TZ=Zone `) prefix off a spec.
fn split_zone(spec: &str) -> (Option<&str>, &str) {
    for prefix in ["CRON_TZ=", "TZ="] {
        if let Some(rest) = spec.strip_prefix(prefix) {
            let (name, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            return (Some(name), rest.trim_start());
        }
    }
    (None, spec)
}

/// The duration of an `every DUR` (or `@every DUR`, as some schedulers
/// write it).
fn strip_every(spec: &str) -> Option<&str> {
    let word = spec.split_whitespace().next()?;
    if word.eq_ignore_ascii_case("every") || word.eq_ignore_ascii_case("@every") {
        Some(spec[word.len()..].trim())
    } else {
        None
    }
}

/// A period in seconds: terms of a number and a unit (`15m`, `1h30m`,
/// `2 hours`), at least one second, at most [`MAX_EVERY`].
fn parse_period(text: &str) -> Result<i64, String> {
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
fn canonical_period(period: i64) -> String {
    for (unit, scale) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if period % scale == 0 {
            return format!("{}{unit}", period / scale);
        }
    }
    format!("{period}s")
}

/// The largest zone file read: the system's are a few KiB.
const MAX_ZONE_FILE: u64 = 256 * 1024;

/// The directory of the system's zone files: `$TZDIR`, as glibc reads
/// it, else `/usr/share/zoneinfo`.
fn zoneinfo_dir() -> PathBuf {
    std::env::var_os("TZDIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/usr/share/zoneinfo"), PathBuf::from)
}

/// Whether `name` is a zone's name (`Europe/Berlin`, `Etc/GMT+5`), not a
/// path that climbs out of the zone directory.
fn is_zone_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && name
            .split('/')
            .all(|part| !(part.is_empty() || part == "." || part == ".."))
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_+-.".contains(c))
}

/// A zone from a TZif file (RFC 8536), named `name`. Opened without
/// blocking (a FIFO is refused, not waited on) and read to at most
/// [`MAX_ZONE_FILE`] bytes.
fn read_zone_file(path: &Path, name: &str) -> Result<TimeZone, String> {
    let said = |e: &dyn fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| said(&e))?;
    if !file.metadata().map_err(|e| said(&e))?.is_file() {
        return Err(said(&"not a file"));
    }
    let mut data = Vec::new();
    file.take(MAX_ZONE_FILE)
        .read_to_end(&mut data)
        .map_err(|e| said(&e))?;
    TimeZone::tzif(name, &data).map_err(|e| said(&e))
}

/// A `CRON_TZ=` zone: the system's zone file of that name. The name is
/// checked first to be a name, not a path.
fn named_zone(name: &str) -> Result<TimeZone, ScheduleError> {
    let bad = |reason: &str| ScheduleError::Zone {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    if name.is_empty() {
        return Err(bad("no name after `CRON_TZ=`"));
    }
    if !is_zone_name(name) {
        return Err(bad(
            "a zone's name is letters, digits, `_`, `+`, `-` and `/`, not a path",
        ));
    }
    if name == "UTC" {
        return Ok(TimeZone::UTC);
    }
    read_zone_file(&zoneinfo_dir().join(name), name).map_err(|e| bad(&e))
}

/// The local time zone, read as glibc (and so cron) reads it: `TZ` (empty:
/// UTC; `:NAME`, `NAME` or `/path`: a zone file; else a POSIX rule such as
/// `EST5EDT,M3.2.0,M11.1.0`), else `/etc/localtime`, else UTC. A `TZ` or an
/// `/etc/localtime` that is there but cannot be read is an error, not
/// UTC as glibc would have it: a schedule read in the wrong zone would call
/// fires missed that were not.
fn local_zone() -> Result<TimeZone, ScheduleError> {
    if let Some(tz) = std::env::var_os("TZ") {
        let tz = tz.to_string_lossy();
        return zone_of_tz(&tz).map_err(|reason| ScheduleError::LocalZone {
            source_name: format!("TZ={tz}"),
            reason,
        });
    }
    let localtime = Path::new("/etc/localtime");
    if std::fs::symlink_metadata(localtime).is_err() {
        return Ok(TimeZone::UTC);
    }
    // A link into the zone directory names the zone; a copy names none.
    let name = std::fs::read_link(localtime)
        .ok()
        .and_then(|target| name_in_zoneinfo(&target.to_string_lossy()));
    read_zone_file(localtime, name.as_deref().unwrap_or("")).map_err(|reason| {
        ScheduleError::LocalZone {
            source_name: "/etc/localtime".to_owned(),
            reason,
        }
    })
}

/// The zone `TZ` names.
fn zone_of_tz(tz: &str) -> Result<TimeZone, String> {
    let (file_only, body) = match tz.strip_prefix(':') {
        Some(body) => (true, body),
        None => (false, tz),
    };
    if body.is_empty() || body == "UTC" {
        return Ok(TimeZone::UTC);
    }
    if body.starts_with('/') {
        let name = name_in_zoneinfo(body).unwrap_or_default();
        return read_zone_file(Path::new(body), &name);
    }
    let file = zoneinfo_dir().join(body);
    if is_zone_name(body) && (file_only || file.is_file()) {
        return read_zone_file(&file, body);
    }
    TimeZone::posix(body).map_err(|e| {
        format!(
            "neither a zone file ({}) nor a POSIX rule: {e}",
            file.display()
        )
    })
}

/// The zone name in a path into a zone directory
/// (`/usr/share/zoneinfo/Europe/Berlin`: `Europe/Berlin`).
fn name_in_zoneinfo(path: &str) -> Option<String> {
    let (_, name) = path.rsplit_once("zoneinfo/")?;
    is_zone_name(name).then(|| name.to_owned())
}

/// Reads the cron part of a spec (after any `CRON_TZ=`).
fn parse_cron(text: &str, tz: TimeZone, zone: Option<String>) -> Result<CronRule, ScheduleError> {
    let (canonical, fields) = expand_nickname(text)?;
    let parts: Vec<&str> = fields.split_whitespace().collect();
    if parts.len() != 5 {
        return Err(ScheduleError::FieldCount {
            spec: text.to_owned(),
            count: parts.len(),
        });
    }
    for (i, part) in parts.iter().enumerate() {
        check_field(i, part, text)?;
    }
    // Vixie's day rule: a day field that starts with `*` (`*/2`) makes the
    // two combine with AND. croner reads only a bare `*` so; a `+` before
    // the day of week asks it for AND.
    let (dom, dow) = (parts[2], parts[4]);
    let and_days = (dom.starts_with('*') || dow.starts_with('*')) && dom != "*" && dow != "*";
    let mut given = parts.clone();
    let plus_dow;
    if and_days {
        plus_dow = format!("+{dow}");
        given[4] = &plus_dow;
    }
    let cron = croner_parser()
        .parse(&given.join(" "))
        .map_err(|e| field_error(&parts, text, &e.to_string()))?;
    let fixed_times = !(parts[0].starts_with('*') || parts[1].starts_with('*'))
        && cron.determine_job_type() == JobType::IntervalWildcard;
    let rule = CronRule {
        text: canonical.unwrap_or_else(|| parts.join(" ")),
        cron,
        tz,
        zone,
        fixed_times,
    };
    // Eight years from a fixed day hold every day of month and weekday a
    // satisfiable expression names (a 29th of February included).
    let from = Timestamp::from_second(1_704_067_200) // 2024-01-01T00:00:00Z
        .expect("a valid time")
        .to_zoned(rule.tz.clone());
    let found = rule.cron.find_next_occurrence(&from, true).ok();
    if found.is_none_or(|z| z.timestamp().as_second() > 1_704_067_200 + 8 * 366 * 86_400) {
        return Err(ScheduleError::Never {
            spec: text.to_owned(),
        });
    }
    Ok(rule)
}

fn croner_parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

/// A nickname's five fields, and its canonical name.
fn expand_nickname(text: &str) -> Result<(Option<String>, String), ScheduleError> {
    if !text.starts_with('@') {
        return Ok((None, text.to_owned()));
    }
    let name = text.trim();
    let (canonical, fields) = match name.to_ascii_lowercase().as_str() {
        "@reboot" => return Err(ScheduleError::Reboot),
        "@yearly" | "@annually" => ("@yearly", "0 0 1 1 *"),
        "@monthly" => ("@monthly", "0 0 1 * *"),
        "@weekly" => ("@weekly", "0 0 * * 0"),
        "@daily" | "@midnight" => ("@daily", "0 0 * * *"),
        "@hourly" => ("@hourly", "0 * * * *"),
        _ => {
            return Err(ScheduleError::UnknownNickname {
                name: name.to_owned(),
            });
        }
    };
    Ok((Some(canonical.to_owned()), fields.to_owned()))
}

/// Refuses what cron(8) does not read in field `i`: characters beyond
/// digits, `*`, `,`, `-` and `/`, and words other than the month and day
/// names where those are taken.
fn check_field(i: usize, value: &str, spec: &str) -> Result<(), ScheduleError> {
    let names: &[&str] = match i {
        3 => &MONTHS,
        4 => &DAYS,
        _ => &[],
    };
    let not_cron = |what: String| ScheduleError::NotCron {
        field: FIELDS[i].0,
        value: value.to_owned(),
        spec: spec.to_owned(),
        what,
        names: match i {
            3 => ", names (JAN-DEC)",
            4 => ", names (SUN-SAT)",
            _ => "",
        },
    };
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "*,-/".contains(*c)))
    {
        return Err(not_cron(format!("`{c}`")));
    }
    for word in value
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
    {
        if !names.iter().any(|n| n.eq_ignore_ascii_case(word)) {
            return Err(not_cron(format!("`{word}`")));
        }
    }
    Ok(())
}

/// The error of the first field that croner refuses alone (with every
/// other field `*`), else of the whole expression.
fn field_error(parts: &[&str], spec: &str, reason: &str) -> ScheduleError {
    for (i, part) in parts.iter().enumerate() {
        let mut alone = ["*"; 5];
        alone[i] = part;
        if let Err(e) = croner_parser().parse(&alone.join(" ")) {
            return ScheduleError::Field {
                field: FIELDS[i].0,
                value: (*part).to_owned(),
                spec: spec.to_owned(),
                reason: e.to_string(),
                range: FIELDS[i].1,
            };
        }
    }
    ScheduleError::Field {
        field: "day-of-week",
        value: parts[4].to_owned(),
        spec: spec.to_owned(),
        reason: reason.to_owned(),
        range: FIELDS[4].1,
    }
}

/// The stable offset of a lock's fires on a host, in `[0, max)` to the
/// millisecond: the same at every fire, different for another lock or
/// another host (systemd's `RandomizedOffsetSec=`).
///
/// The hash, fixed here for good (changing it moves every fleet's fires):
/// 64-bit FNV-1a (offset basis `0xcbf29ce484222325`, prime
/// `0x100000001b3`) over the machine id's bytes, one zero byte and the
/// lock's bytes, then MurmurHash3's 64-bit finaliser (`fmix64`) so that
/// names that differ in their last byte land far apart; the offset is
/// that value modulo `max` in milliseconds. (std's `DefaultHasher` is not
/// used: its algorithm may change between Rust releases.)
pub fn spread_offset(machine_id: &str, lock: &str, max: Duration) -> Duration {
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max_ms == 0 {
        return Duration::ZERO;
    }
    let mut h = fnv1a64(0xcbf2_9ce4_8422_2325, machine_id.as_bytes());
    h = fnv1a64(h, &[0]);
    h = fnv1a64(h, lock.as_bytes());
    Duration::from_millis(fmix64(h) % max_ms)
}

fn fnv1a64(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// This host's machine id, for [`spread_offset`]: `/etc/machine-id`, else
/// `/var/lib/dbus/machine-id` (32 hexadecimal digits; an empty file or
/// systemd's `uninitialized` is passed over), else the host name. A
/// container started from an image with a machine id baked in shares it
/// with its siblings: their locks' names still spread them, the same job in
/// each of them is not.
pub fn machine_id() -> String {
    machine_id_from(&["/etc/machine-id", "/var/lib/dbus/machine-id"])
        .unwrap_or_else(crate::procfs::host_name)
}

fn machine_id_from(files: &[&str]) -> Option<String> {
    files.iter().find_map(|path| {
        let mut text = String::new();
        std::fs::File::open(path)
            .ok()?
            .take(64)
            .read_to_string(&mut text)
            .ok()?;
        let id = text.trim();
        (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_owned())
    })
}

/// A random delay in `[0, max)` to the millisecond, from the kernel's
/// random source (`getrandom(2)`; should that fail, from the clock and the
/// pid: a jitter spreads fires, it guards no secret).
pub fn jitter(max: Duration) -> Duration {
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max_ms == 0 {
        return Duration::ZERO;
    }
    // Rejection sampling: no value is likelier than another.
    let zone = u64::MAX - u64::MAX % max_ms;
    loop {
        let r = random_u64();
        if r < zone {
            return Duration::from_millis(r % max_ms);
        }
    }
}

fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                return fmix64(nanos ^ u64::from(std::process::id()).rotate_left(32));
            }
        }
    }
    u64::from_ne_bytes(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UTC time, written as RFC 3339, in Unix seconds.
    fn at(rfc3339: &str) -> i64 {
        rfc3339.parse::<Timestamp>().expect("a time").as_second()
    }

    fn all(s: &Schedule, after: &str, up_to: &str) -> Vec<String> {
        s.slots(at(after), at(up_to))
            .map(|t| Timestamp::from_second(t).unwrap().to_string())
            .collect()
    }

    /// Whether the system has zone `name`; says so when it has not.
    fn have_zone(name: &str) -> bool {
        let ok = std::path::Path::new("/usr/share/zoneinfo")
            .join(name)
            .is_file();
        if !ok {
            eprintln!("skipped: /usr/share/zoneinfo/{name} is missing (install tzdata)");
        }
        ok
    }

    fn parse(spec: &str) -> Schedule {
        Schedule::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
    }

    fn err(spec: &str) -> String {
        match Schedule::parse(spec) {
            Ok(s) => panic!("{spec} was read as {s}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn nicknames_are_their_five_fields_and_read_back_canonical() {
        for (nick, canonical, fields) in [
            ("@hourly", "@hourly", "0 * * * *"),
            ("@daily", "@daily", "0 0 * * *"),
            ("@MIDNIGHT", "@daily", "0 0 * * *"),
            ("@weekly", "@weekly", "0 0 * * 0"),
            ("@monthly", "@monthly", "0 0 1 * *"),
            ("@yearly", "@yearly", "0 0 1 1 *"),
            ("@annually", "@yearly", "0 0 1 1 *"),
        ] {
            let a = parse(&format!("CRON_TZ=UTC {nick}"));
            let b = parse(&format!("CRON_TZ=UTC {fields}"));
            assert_eq!(a.to_string(), format!("CRON_TZ=UTC {canonical}"));
            assert_eq!(parse(&a.to_string()), a, "{nick} reads back");
            let from = at("2024-02-27T13:14:15Z");
            let got: Vec<i64> = a.slots(from, from + 5 * 366 * 86_400).take(5).collect();
            let want: Vec<i64> = b.slots(from, from + 5 * 366 * 86_400).take(5).collect();
            assert_eq!(got, want, "{nick}");
            assert_eq!(got.len(), 5, "{nick}");
        }
        let s = parse("CRON_TZ=UTC @weekly");
        assert_eq!(
            all(&s, "2024-09-24T13:06:52Z", "2024-10-08T00:00:00Z"),
            ["2024-09-29T00:00:00Z", "2024-10-06T00:00:00Z"],
            "Sundays at midnight"
        );
    }

    #[test]
    fn reboot_is_refused_as_no_schedule() {
        let e = err("@reboot");
        assert!(e.contains("`@reboot` is not a schedule"), "{e}");
        assert!(e.contains("no fire of it can be missed"), "{e}");
        assert!(e.contains("`@daily`, `0 2 * * *`"), "{e}");
        assert_eq!(Schedule::parse(" @Reboot "), Err(ScheduleError::Reboot));
    }

    #[test]
    fn bad_specs_say_what_is_wrong_and_what_to_write() {
        for (spec, said) in [
            ("", "the schedule is empty: give a cron expression"),
            ("   ", "the schedule is empty"),
            (
                "@fortnightly",
                "`@fortnightly` is not a cron nickname: use @hourly",
            ),
            (
                "0 0 2 * * *",
                "`0 0 2 * * *` has 6 fields: a cron expression has 5",
            ),
            ("0 2 * *", "has 4 fields"),
            (
                "0 2 L * *",
                "the day-of-month field `L` of `0 2 L * *` has `L`",
            ),
            (
                "0 2 15W * *",
                "the day-of-month field `15W` of `0 2 15W * *` has `W`",
            ),
            (
                "0 2 * * 5#3",
                "the day-of-week field `5#3` of `0 2 * * 5#3` has `#`",
            ),
            (
                "0 2 ? * MON",
                "the day-of-month field `?` of `0 2 ? * MON` has `?`",
            ),
            (
                "0 2 * * 5L",
                "has `L`: cron's fields take numbers, names (SUN-SAT)",
            ),
            (
                "0 2 * MON *",
                "the month field `MON` of `0 2 * MON *` has `MON`",
            ),
            (
                "MON 2 * * *",
                "the minute field `MON` of `MON 2 * * *` has `MON`",
            ),
            ("0 2 * * FRIDAY", "has `FRIDAY`"),
            (
                "60 2 * * *",
                "the minute field `60` of `60 2 * * *` is not valid",
            ),
            (
                "0 24 * * *",
                "the hour field `24` of `0 24 * * *` is not valid",
            ),
            (
                "0 2 32 * *",
                "the day-of-month field `32` of `0 2 32 * *` is not valid",
            ),
            (
                "0 2 * 13 *",
                "the month field `13` of `0 2 * 13 *` is not valid",
            ),
            (
                "0 2 * * 8",
                "the day-of-week field `8` of `0 2 * * 8` is not valid",
            ),
            (
                "*/0 2 * * *",
                "the minute field `*/0` of `*/0 2 * * *` is not valid",
            ),
            ("0 0 31 4 *", "`0 0 31 4 *` never fires"),
            ("0 0 30 2 *", "`0 0 30 2 *` never fires"),
            (
                "every",
                "`every` is not a period: no duration after `every`",
            ),
            (
                "every 15",
                "`every 15` is not a period: 15 has no unit (s, m, h, d, w)",
            ),
            ("every 15 parsecs", "`parsecs` is not a unit"),
            ("every 0s", "a period of zero"),
            ("every 400d", "longer than a year (366d)"),
            ("every 99999999999999999999s", "is too large"),
            ("every m", "`m` does not start with a number"),
            (
                "CRON_TZ=Europe/Berlin every 1h",
                "`CRON_TZ=Europe/Berlin` changes nothing for `every 1h`",
            ),
            (
                "CRON_TZ=Mars/Olympus 0 2 * * *",
                "`CRON_TZ=Mars/Olympus` is not a time zone",
            ),
            ("CRON_TZ=../../etc/passwd 0 2 * * *", "not a path"),
            ("CRON_TZ=/etc/localtime 0 2 * * *", "not a path"),
            ("CRON_TZ= 0 2 * * *", "no name after `CRON_TZ=`"),
        ] {
            let e = err(spec);
            assert!(e.contains(said), "{spec:?}: {e}");
        }
        // Each names the field's values, in the words of its fix.
        assert!(err("0 2 32 * *").contains("it takes 1-31"));
        assert!(err("0 2 * * 8").contains("0-7 (0 and 7 are Sunday) or SUN-SAT"));
    }

    #[test]
    fn names_ranges_steps_and_lists_are_cron_s() {
        let s = parse("CRON_TZ=UTC 0 9 * jan-Mar MON-FRI");
        assert_eq!(s.to_string(), "CRON_TZ=UTC 0 9 * jan-Mar MON-FRI");
        assert_eq!(
            all(&s, "2025-03-28T00:00:00Z", "2025-04-08T00:00:00Z"),
            ["2025-03-28T09:00:00Z", "2025-03-31T09:00:00Z"],
            "weekdays of January to March only"
        );
        let s = parse("CRON_TZ=UTC */15 * * * *");
        assert_eq!(
            all(&s, "2025-01-01T10:50:00Z", "2025-01-01T11:31:00Z"),
            [
                "2025-01-01T11:00:00Z",
                "2025-01-01T11:15:00Z",
                "2025-01-01T11:30:00Z"
            ]
        );
        let s = parse("CRON_TZ=UTC 0-30/10,45 8 * * *");
        assert_eq!(
            all(&s, "2025-01-01T00:00:00Z", "2025-01-01T23:00:00Z"),
            [
                "2025-01-01T08:00:00Z",
                "2025-01-01T08:10:00Z",
                "2025-01-01T08:20:00Z",
                "2025-01-01T08:30:00Z",
                "2025-01-01T08:45:00Z"
            ]
        );
        // 7 is Sunday, as 0 is.
        let (a, b) = (
            parse("CRON_TZ=UTC 0 0 * * 7"),
            parse("CRON_TZ=UTC 0 0 * * 0"),
        );
        assert_eq!(
            a.next_slot(at("2025-01-01T00:00:00Z")),
            b.next_slot(at("2025-01-01T00:00:00Z"))
        );
        // A schedule is shared between threads as it is.
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Schedule>();
        // Extra blanks are not part of the expression.
        assert_eq!(parse("  0   2 *  * * ").to_string(), "0 2 * * *");
        // A 29th of February fires, every four years.
        let s = parse("CRON_TZ=UTC 0 0 29 2 *");
        assert_eq!(
            all(&s, "2025-01-01T00:00:00Z", "2033-01-01T00:00:00Z"),
            ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_combine_as_in_vixie_cron() {
        // Both restricted: either matches (the 13th, and every Friday).
        let s = parse("CRON_TZ=UTC 0 12 13 * 5");
        assert_eq!(
            all(&s, "2025-06-01T00:00:00Z", "2025-06-21T00:00:00Z"),
            [
                "2025-06-06T12:00:00Z",
                "2025-06-13T12:00:00Z",
                "2025-06-20T12:00:00Z"
            ]
        );
        let s = parse("CRON_TZ=UTC 0 12 14 * 5");
        assert_eq!(
            all(&s, "2025-06-01T00:00:00Z", "2025-06-21T00:00:00Z"),
            [
                "2025-06-06T12:00:00Z",
                "2025-06-13T12:00:00Z",
                "2025-06-14T12:00:00Z",
                "2025-06-20T12:00:00Z"
            ]
        );
        // A day field that starts with `*` makes them combine with AND:
        // odd days that are weekend days, not odd days and weekend days.
        let s = parse("CRON_TZ=UTC 0 12 */2 * 0,6");
        assert_eq!(
            all(&s, "2024-09-24T13:06:52Z", "2024-10-20T00:00:00Z"),
            [
                "2024-09-29T12:00:00Z",
                "2024-10-05T12:00:00Z",
                "2024-10-13T12:00:00Z",
                "2024-10-19T12:00:00Z"
            ]
        );
        assert_eq!(
            s.to_string(),
            "CRON_TZ=UTC 0 12 */2 * 0,6",
            "the `+` is not shown"
        );
        let s = parse("CRON_TZ=UTC 0 12 1-31/2 * 0,6");
        assert_eq!(
            all(&s, "2024-09-24T13:06:52Z", "2024-10-02T00:00:00Z"),
            [
                "2024-09-25T12:00:00Z",
                "2024-09-27T12:00:00Z",
                "2024-09-28T12:00:00Z",
                "2024-09-29T12:00:00Z",
                "2024-10-01T12:00:00Z"
            ]
        );
        // A bare `*` leaves the other field alone.
        let s = parse("CRON_TZ=UTC 0 12 * * 2");
        assert_eq!(
            all(&s, "2024-09-24T13:06:52Z", "2024-10-09T00:00:00Z"),
            ["2024-10-01T12:00:00Z", "2024-10-08T12:00:00Z"]
        );
    }

    #[test]
    fn a_slot_the_spring_forward_skips_is_counted_once_after_the_gap() {
        if !have_zone("Europe/Berlin") || !have_zone("America/New_York") {
            return;
        }
        // Berlin, 2025-03-30: 02:00 CET is 03:00 CEST (01:00 UTC).
        let s = parse("CRON_TZ=Europe/Berlin 30 2 * * *");
        assert_eq!(
            all(&s, "2025-03-28T12:00:00Z", "2025-04-01T00:00:00Z"),
            [
                "2025-03-29T01:30:00Z", // 02:30 CET
                "2025-03-30T01:00:00Z", // 03:00 CEST, where cron runs it
                "2025-03-31T00:30:00Z"  // 02:30 CEST
            ]
        );
        assert_eq!(
            s.wall_clock(at("2025-03-30T01:00:00Z")).unwrap(),
            "2025-03-30 03:00 CEST"
        );
        // Backwards, the same slots.
        for (t, prev) in [
            ("2025-03-30T00:59:59Z", "2025-03-29T01:30:00Z"),
            ("2025-03-30T01:00:00Z", "2025-03-30T01:00:00Z"),
            ("2025-03-30T23:00:00Z", "2025-03-30T01:00:00Z"),
        ] {
            assert_eq!(s.previous_slot(at(t)), Some(at(prev)), "{t}");
        }
        // The day is 23 hours long, and the periods say so.
        assert_eq!(
            s.period_at(at("2025-03-30T12:00:00Z")),
            Some(Duration::from_secs(23 * 3600 + 1800))
        );
        // A job of several fixed times has one slot for those the gap
        // skipped, as cron runs them all once the clock has jumped.
        let s = parse("CRON_TZ=Europe/Berlin 0,30 2 * * *");
        assert_eq!(
            all(&s, "2025-03-29T00:00:00Z", "2025-03-31T03:00:00Z"),
            [
                "2025-03-29T01:00:00Z",
                "2025-03-29T01:30:00Z",
                "2025-03-30T01:00:00Z", // 02:00 and 02:30 CEST, at 03:00
                "2025-03-31T00:00:00Z",
                "2025-03-31T00:30:00Z"
            ]
        );
        let s = parse("CRON_TZ=Europe/Berlin 15 1-3 * * *");
        assert_eq!(
            all(&s, "2025-03-29T23:00:00Z", "2025-03-30T03:00:00Z"),
            [
                "2025-03-30T00:15:00Z", // 01:15 CET
                "2025-03-30T01:00:00Z", // 02:15 that was not: at 03:00 CEST
                "2025-03-30T01:15:00Z"  // 03:15 CEST
            ]
        );
        // A job of every hour has no slot in the hour that does not exist.
        let s = parse("CRON_TZ=Europe/Berlin 30 * * * *");
        assert_eq!(
            all(&s, "2025-03-29T23:00:00Z", "2025-03-30T02:00:00Z"),
            [
                "2025-03-29T23:30:00Z",
                "2025-03-30T00:30:00Z",
                "2025-03-30T01:30:00Z"
            ],
            "00:30 CET, 01:30 CET, 03:30 CEST"
        );
        // New York, 2025-03-09: 02:00 EST is 03:00 EDT (07:00 UTC).
        let s = parse("CRON_TZ=America/New_York 30 2 * * *");
        assert_eq!(
            all(&s, "2025-03-08T00:00:00Z", "2025-03-11T00:00:00Z"),
            [
                "2025-03-08T07:30:00Z",
                "2025-03-09T07:00:00Z",
                "2025-03-10T06:30:00Z"
            ]
        );
    }

    #[test]
    fn a_slot_the_fall_back_repeats_is_counted_once() {
        if !have_zone("Europe/Berlin") || !have_zone("America/New_York") {
            return;
        }
        // Berlin, 2025-10-26: 03:00 CEST is 02:00 CET (01:00 UTC); 02:30
        // comes twice, at 00:30 and at 01:30 UTC.
        let s = parse("CRON_TZ=Europe/Berlin 30 2 * * *");
        assert_eq!(
            all(&s, "2025-10-25T00:00:00Z", "2025-10-28T00:00:00Z"),
            [
                "2025-10-25T00:30:00Z",
                "2025-10-26T00:30:00Z", // 02:30 CEST, the first
                "2025-10-27T01:30:00Z"
            ]
        );
        let fold = at("2025-10-26T01:45:00Z"); // 02:45 CET, the second half
        assert_eq!(s.previous_slot(fold), Some(at("2025-10-26T00:30:00Z")));
        assert_eq!(s.next_slot(fold), Some(at("2025-10-27T01:30:00Z")));
        assert_eq!(
            s.period_at(fold),
            Some(Duration::from_secs(25 * 3600)),
            "a day of 25 hours"
        );
        assert_eq!(
            missed(
                &s,
                at("2025-10-25T00:31:00Z"),
                at("2025-10-27T00:00:00Z"),
                Duration::ZERO
            )
            .map(|m| m.count),
            Some(1)
        );
        // So do several fixed times: 02:00 and 02:30 CEST, not CET.
        let s = parse("CRON_TZ=Europe/Berlin 0,30 2 * * *");
        assert_eq!(
            all(&s, "2025-10-25T12:00:00Z", "2025-10-27T00:00:00Z"),
            ["2025-10-26T00:00:00Z", "2025-10-26T00:30:00Z"]
        );
        assert_eq!(
            s.previous_slot(at("2025-10-26T01:59:00Z")),
            Some(at("2025-10-26T00:30:00Z"))
        );
        let s = parse("CRON_TZ=Europe/Berlin 15 1-3 * * *");
        assert_eq!(
            all(&s, "2025-10-25T22:00:00Z", "2025-10-26T03:00:00Z"),
            [
                "2025-10-25T23:15:00Z", // 01:15 CEST
                "2025-10-26T00:15:00Z", // 02:15 CEST
                "2025-10-26T02:15:00Z"  // 03:15 CET
            ]
        );
        // A job of every hour fires in both of the repeated hours: two
        // real hours, two slots, as cron runs it.
        let s = parse("CRON_TZ=Europe/Berlin 30 * * * *");
        assert_eq!(
            all(&s, "2025-10-26T00:00:00Z", "2025-10-26T02:00:00Z"),
            ["2025-10-26T00:30:00Z", "2025-10-26T01:30:00Z"]
        );
        // New York, 2025-11-02: 02:00 EDT is 01:00 EST (06:00 UTC).
        let s = parse("CRON_TZ=America/New_York 30 1 * * *");
        assert_eq!(
            all(&s, "2025-11-01T00:00:00Z", "2025-11-04T00:00:00Z"),
            [
                "2025-11-01T05:30:00Z",
                "2025-11-02T05:30:00Z", // 01:30 EDT; not 01:30 EST
                "2025-11-03T06:30:00Z"
            ]
        );
        assert_eq!(
            s.previous_slot(at("2025-11-02T06:45:00Z")),
            Some(at("2025-11-02T05:30:00Z"))
        );
    }

    /// The backward search gives the slots the forward one gives, around
    /// the changes of Berlin and of Lord Howe Island (half an hour, at
    /// 02:00 and back at 02:00 local).
    #[test]
    fn previous_and_next_agree_around_every_slot() {
        if !have_zone("Europe/Berlin") || !have_zone("Australia/Lord_Howe") {
            return;
        }
        for spec in [
            "CRON_TZ=Europe/Berlin 30 2 * * *",
            "CRON_TZ=Europe/Berlin 0,30 1-3 * * *",
            "CRON_TZ=Europe/Berlin 0-59/7 2 * * *",
            "CRON_TZ=Australia/Lord_Howe 0,20,40 2 * * *",
            "CRON_TZ=Europe/Berlin */20 * * * *",
            "CRON_TZ=Australia/Lord_Howe 15 2 * * *",
            "CRON_TZ=Australia/Lord_Howe */10 1-2 * * *",
            "every 45m",
        ] {
            let s = parse(spec);
            for (from, to) in [
                ("2025-03-28T20:00:00Z", "2025-04-01T06:00:00Z"),
                ("2025-10-24T20:00:00Z", "2025-10-28T06:00:00Z"),
                ("2025-04-04T00:00:00Z", "2025-04-08T00:00:00Z"),
                ("2025-10-03T00:00:00Z", "2025-10-07T00:00:00Z"),
            ] {
                let slots: Vec<i64> = s.slots(at(from), at(to)).collect();
                assert!(slots.len() > 2, "{spec}");
                for pair in slots.windows(2) {
                    assert!(pair[0] < pair[1], "{spec}: in order");
                    for t in [pair[0], pair[0] + 1, pair[1] - 1] {
                        assert_eq!(s.previous_slot(t), Some(pair[0]), "{spec} at {t}");
                        assert_eq!(s.next_slot(t), Some(pair[1]), "{spec} at {t}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_is_anchored_at_the_epoch() {
        let s = parse("every 15m");
        assert!(s.is_every());
        assert_eq!(s.zone_name(), None);
        assert_eq!(
            all(&s, "2025-06-01T10:07:00Z", "2025-06-01T10:46:00Z"),
            [
                "2025-06-01T10:15:00Z",
                "2025-06-01T10:30:00Z",
                "2025-06-01T10:45:00Z"
            ]
        );
        // The slots are the spec's alone: the same from any start.
        assert_eq!(
            s.next_slot(at("2025-06-01T10:15:00Z")),
            Some(at("2025-06-01T10:30:00Z"))
        );
        assert_eq!(
            s.previous_slot(at("2025-06-01T10:15:00Z")),
            Some(at("2025-06-01T10:15:00Z"))
        );
        assert_eq!(
            s.previous_slot(at("2025-06-01T10:14:59Z")),
            Some(at("2025-06-01T10:00:00Z"))
        );
        assert_eq!(s.period_at(0), Some(Duration::from_secs(900)));
        assert_eq!(s.next_slot(-1), Some(0));
        assert_eq!(s.previous_slot(-1), Some(-900));
        // Every day is at 00:00 UTC, whatever the local zone; every week on
        // Thursdays, as the epoch was.
        assert_eq!(
            all(
                &parse("every 1d"),
                "2025-03-29T12:00:00Z",
                "2025-03-31T12:00:00Z"
            ),
            ["2025-03-30T00:00:00Z", "2025-03-31T00:00:00Z"]
        );
        assert_eq!(
            all(
                &parse("every 1w"),
                "2025-06-01T00:00:00Z",
                "2025-06-08T00:00:00Z"
            ),
            ["2025-06-05T00:00:00Z"]
        );
        for (spec, canonical) in [
            ("every 15m", "every 15m"),
            ("EVERY 90s", "every 90s"),
            ("every 120s", "every 2m"),
            ("every 1h30m", "every 90m"),
            ("every 1h 30m", "every 90m"),
            ("every 2 hours", "every 2h"),
            ("every 24h", "every 1d"),
            ("every 1w", "every 7d"),
            ("@every 1h", "every 1h"),
            ("every 366d", "every 366d"),
        ] {
            let s = parse(spec);
            assert_eq!(s.to_string(), canonical, "{spec}");
            assert_eq!(parse(canonical), s, "{spec}");
        }
    }

    #[test]
    fn counting_is_bounded_and_says_so() {
        let s = parse("CRON_TZ=UTC * * * * *");
        let (from, to) = (at("2025-01-01T00:00:00Z"), at("2025-01-31T00:00:00Z"));
        let m = s.slots_between(from, to).unwrap();
        assert_eq!(m.first, from + 60);
        assert_eq!(m.last, to, "the last slot is exact");
        assert_eq!(m.count, MAX_COUNTED);
        assert!(!m.exact);
        let m = s.slots_between(from, from + 3600).unwrap();
        assert_eq!((m.count, m.exact), (60, true));
        // With a fire seen past the slots examined, the last one found.
        let ahead = [from + 20_000 * 60];
        let m = s.unseen(from, to, &ahead).unwrap();
        assert_eq!((m.first, m.count, m.exact), (from + 60, MAX_COUNTED, false));
        assert_eq!(m.last, from + 60 * MAX_COUNTED as i64);
        // An `every` schedule counts by arithmetic, whatever the range.
        let m = parse("every 1m")
            .slots_between(0, 10 * 365 * 86_400)
            .unwrap();
        assert_eq!((m.count, m.exact), (10 * 365 * 1440, true));
        assert_eq!(parse("every 1m").slots_between(60, 119), None);
        assert_eq!(s.slots_between(to, to), None);
        assert_eq!(s.slots(from, to).take(3).count(), 3);
    }

    #[test]
    fn missed_slots_are_those_after_the_last_fire_seen() {
        let s = parse("CRON_TZ=UTC 0 * * * *");
        // The last success at 23:59; two hourly slots (00:00, 01:00) since,
        // and it is now 01:30.
        let seen = at("2025-05-04T23:59:00Z");
        let now = at("2025-05-05T01:30:00Z");
        let m = missed(&s, seen, now, Duration::ZERO).unwrap();
        assert_eq!(m.first, at("2025-05-05T00:00:00Z"));
        assert_eq!(m.last, at("2025-05-05T01:00:00Z"));
        assert_eq!((m.count, m.exact), (2, true));
        assert_eq!(s.wall_clock(m.last).unwrap(), "2025-05-05 01:00 UTC");
        // `late` leaves the last slot its grace.
        let m = missed(&s, seen, now, Duration::from_secs(45 * 60)).unwrap();
        assert_eq!((m.last, m.count), (at("2025-05-05T00:00:00Z"), 1));
        // A success after the last slot: nothing missed.
        assert_eq!(
            missed(&s, at("2025-05-05T01:00:05Z"), now, Duration::ZERO),
            None
        );
        // A run that started at the slot itself saw it.
        assert_eq!(
            missed(&s, at("2025-05-05T01:00:00Z"), now, Duration::ZERO),
            None
        );
    }

    #[test]
    fn a_slot_is_seen_by_a_fire_in_its_own_window() {
        let s = parse("CRON_TZ=UTC 0 * * * *");
        let since = at("2025-05-04T23:30:00Z");
        // A run began at 00:00 and lasted past 03:00; the 02:00 fire found
        // it running and skipped; nothing came at 01:00 or at 03:00.
        let seen = [at("2025-05-05T00:00:05Z"), at("2025-05-05T02:00:01Z")];
        let m = s.unseen(since, at("2025-05-05T03:30:00Z"), &seen).unwrap();
        assert_eq!(
            (m.first, m.last, m.count, m.exact),
            (
                at("2025-05-05T01:00:00Z"),
                at("2025-05-05T03:00:00Z"),
                2,
                true
            )
        );
        // The fire at 03:00 serves its slot: 01:00 is the one missed.
        let f = s.fire(
            since,
            &seen,
            at("2025-05-05T03:00:02Z"),
            Duration::from_secs(60),
        );
        assert_eq!(f.slot, Some(at("2025-05-05T03:00:00Z")));
        let m = f.missed.unwrap();
        assert_eq!(
            (m.first, m.last, m.count),
            (m.first, at("2025-05-05T01:00:00Z"), 1)
        );
        // Every slot seen: nothing.
        let all_seen = [
            at("2025-05-05T00:00:05Z"),
            at("2025-05-05T01:10:00Z"),
            at("2025-05-05T02:00:01Z"),
        ];
        assert_eq!(s.unseen(since, at("2025-05-05T02:30:00Z"), &all_seen), None);
        // Times before the range see nothing in it.
        assert_eq!(
            s.unseen(
                at("2025-05-05T00:30:00Z"),
                at("2025-05-05T01:30:00Z"),
                &all_seen[..1]
            )
            .map(|m| m.count),
            Some(1)
        );
        // The same for an `every` schedule.
        let s = parse("every 15m");
        let m = s
            .unseen(
                at("2025-05-05T00:00:00Z"),
                at("2025-05-05T01:00:00Z"),
                &[at("2025-05-05T00:15:03Z"), at("2025-05-05T00:44:59Z")],
            )
            .unwrap();
        assert_eq!(
            (m.first, m.last, m.count),
            (at("2025-05-05T00:45:00Z"), at("2025-05-05T01:00:00Z"), 2),
            "00:15 and 00:30 seen (00:44:59 is in 00:30's window)"
        );
    }

    #[test]
    fn a_fire_serves_its_slot_and_names_the_ones_before_it() {
        let s = parse("CRON_TZ=UTC 0 2 * * *");
        let grace = Duration::from_secs(60);
        let day: i64 = 86_400;
        let days = |n: i64| Duration::from_secs((n * day).unsigned_abs());
        let yesterday = at("2025-05-04T02:00:01Z");
        // On time: the slot is its own, nothing missed.
        let f = s.fire(yesterday, &[], at("2025-05-05T02:00:03Z"), grace);
        assert_eq!(f.slot, Some(at("2025-05-05T02:00:00Z")));
        assert_eq!(f.missed, None);
        assert_eq!(
            f.catch_up(at("2025-05-05T02:00:03Z"), days(1)),
            CatchUp::OnSlot
        );
        // On time, after two days without a fire: those two are missed.
        let f = s.fire(yesterday - 2 * day, &[], at("2025-05-05T02:00:03Z"), grace);
        let m = f.missed.unwrap();
        assert_eq!(
            (m.first, m.last, m.count),
            (at("2025-05-03T02:00:00Z"), at("2025-05-04T02:00:00Z"), 2)
        );
        // At boot, 07:00, the 02:00 fire never came: a catch-up runs once,
        // within a day of it, not after.
        let boot = at("2025-05-05T07:00:00Z");
        let f = s.fire(yesterday, &[yesterday], boot, grace);
        assert_eq!(f.slot, None);
        assert_eq!(f.missed.unwrap().last, at("2025-05-05T02:00:00Z"));
        assert_eq!(f.catch_up(boot, days(1)), CatchUp::MakeUp);
        assert_eq!(f.catch_up(boot, Duration::from_secs(3600)), CatchUp::TooOld);
        // Once it ran (at 07:00), the next boot has nothing to make up.
        let f = s.fire(boot, &[boot], boot + 600, grace);
        assert_eq!(f.missed, None);
        assert_eq!(f.catch_up(boot + 600, days(1)), CatchUp::NothingMissed);
        // The period, the default window.
        assert_eq!(s.period_at(boot), Some(days(1)));
    }

    #[test]
    fn zones_are_named_and_read_from_the_system() {
        if !have_zone("Europe/Berlin") {
            return;
        }
        let s = parse("CRON_TZ=Europe/Berlin 0 2 * * *");
        assert_eq!(s.zone_name(), Some("Europe/Berlin"));
        assert_eq!(s.to_string(), "CRON_TZ=Europe/Berlin 0 2 * * *");
        assert_eq!(parse("TZ=Europe/Berlin   0 2 * * *"), s, "TZ= is CRON_TZ=");
        assert_eq!(
            s.next_slot(at("2025-01-10T00:00:00Z")),
            Some(at("2025-01-10T01:00:00Z"))
        );
        assert_eq!(
            s.next_slot(at("2025-07-09T23:00:00Z")),
            Some(at("2025-07-10T00:00:00Z"))
        );
        assert_eq!(parse("CRON_TZ=UTC @daily").zone_name(), Some("UTC"));
        // Without a prefix, the local zone: it reads back without one.
        let local = parse("0 2 * * *");
        assert_eq!(local.to_string(), "0 2 * * *");
    }

    /// Run in a child of the test binary (its environment is the child's
    /// own): parses `$ONLYONE_TEST_SCHEDULE` and prints what it read.
    #[test]
    fn local_zone_child() {
        let Some(spec) = std::env::var_os("ONLYONE_TEST_SCHEDULE") else {
            return;
        };
        match Schedule::parse(spec.to_str().unwrap()) {
            Ok(s) => println!(
                "next={} zone={}",
                s.next_slot(at("2025-01-10T00:00:00Z")).unwrap(),
                s.zone_name().unwrap_or("-")
            ),
            Err(e) => println!("error: {e}"),
        }
    }

    /// What the `local_zone_child` test prints for `spec`, with `TZ` and
    /// `TZDIR` unset but for `env`.
    fn in_child(spec: &str, env: &[(&str, &str)]) -> String {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "schedule::tests::local_zone_child",
            "--nocapture",
        ])
        .env("ONLYONE_TEST_SCHEDULE", spec)
        .env_remove("TZ")
        .env_remove("TZDIR")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().unwrap();
        // A child that blocks (on a FIFO, say) is ended, and fails the test.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("the child reading {spec} with {env:?} did not finish in 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .find(|l| l.starts_with("next=") || l.starts_with("error: "))
            .unwrap_or_else(|| panic!("the child said {stdout}"))
            .to_owned()
    }

    #[test]
    fn the_local_zone_is_tz_else_etc_localtime() {
        if !have_zone("America/New_York") {
            return;
        }
        let tz = |tz: &str| in_child("0 2 * * *", &[("TZ", tz)]);
        // 02:00 EST is 07:00 UTC.
        let ny = format!("next={} zone=America/New_York", at("2025-01-10T07:00:00Z"));
        assert_eq!(tz("America/New_York"), ny);
        assert_eq!(tz(":America/New_York"), ny);
        assert_eq!(
            tz("/usr/share/zoneinfo/America/New_York"),
            ny,
            "a path names its zone"
        );
        let utc = format!("next={} zone=UTC", at("2025-01-10T02:00:00Z"));
        assert_eq!(tz(""), utc, "an empty TZ is UTC");
        assert_eq!(tz("UTC"), utc);
        for bad in ["America/Nowhere", ":America/Nowhere", "/nowhere/zone"] {
            let e = tz(bad);
            assert!(
                e.starts_with(&format!(
                    "error: the local time zone could not be read (TZ={bad})"
                )),
                "a zone TZ names that is not there is not taken for UTC: {e}"
            );
            assert!(e.contains("set TZ to a zone's name"), "{e}");
        }
        // A POSIX rule: five hours west of UTC, no name.
        assert_eq!(
            tz("EST5"),
            format!("next={} zone=-", at("2025-01-10T07:00:00Z"))
        );
        // Without TZ, /etc/localtime's zone.
        if let Ok(link) = std::fs::read_link("/etc/localtime") {
            let link = link.to_string_lossy().into_owned();
            if let Some((_, name)) = link.split_once("zoneinfo/") {
                let tz = named_zone(name).unwrap();
                let want = Timestamp::from_second(at("2025-01-10T00:00:00Z"))
                    .unwrap()
                    .to_zoned(tz);
                let first = if want.hour() < 2 {
                    want.date()
                } else {
                    want.date().tomorrow().unwrap()
                };
                let slot = first
                    .at(2, 0, 0, 0)
                    .to_zoned(want.time_zone().clone())
                    .unwrap();
                let got = in_child("0 2 * * *", &[]);
                assert_eq!(
                    got,
                    format!("next={} zone={name}", slot.timestamp().as_second()),
                    "/etc/localtime -> {link}"
                );
            }
        }
    }

    #[test]
    fn zone_files_come_from_tzdir_and_a_fifo_is_not_waited_on() {
        if !have_zone("America/New_York") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("Test")).unwrap();
        std::fs::copy(
            "/usr/share/zoneinfo/America/New_York",
            dir.path().join("Test/Zone"),
        )
        .unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            dir.path().join("Test/Fifo"),
            rustix::fs::Mode::from_raw_mode(0o644),
        )
        .unwrap();
        std::fs::write(dir.path().join("Test/Junk"), "not a zone").unwrap();
        let tzdir = dir.path().to_str().unwrap();
        let est = at("2025-01-10T07:00:00Z");
        assert_eq!(
            in_child("CRON_TZ=Test/Zone 0 2 * * *", &[("TZDIR", tzdir)]),
            format!("next={est} zone=Test/Zone")
        );
        assert_eq!(
            in_child("0 2 * * *", &[("TZDIR", tzdir), ("TZ", "Test/Zone")]),
            format!("next={est} zone=Test/Zone")
        );
        let e = in_child("CRON_TZ=Test/Fifo 0 2 * * *", &[("TZDIR", tzdir)]);
        assert!(
            e.starts_with("error: `CRON_TZ=Test/Fifo` is not a time zone")
                && e.contains("not a file"),
            "{e}"
        );
        let e = in_child("CRON_TZ=Test/Junk 0 2 * * *", &[("TZDIR", tzdir)]);
        assert!(
            e.starts_with("error: `CRON_TZ=Test/Junk` is not a time zone"),
            "{e}"
        );
    }

    #[test]
    fn the_spread_is_a_fixed_hash_of_the_machine_and_the_lock() {
        // FNV-1a 64's published vectors.
        assert_eq!(fnv1a64(0xcbf2_9ce4_8422_2325, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(0xcbf2_9ce4_8422_2325, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            fnv1a64(0xcbf2_9ce4_8422_2325, b"foobar"),
            0x8594_4171_f739_67e8
        );
        let id = "5f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c";
        let max = Duration::from_secs(2);
        // Fixed values (worked out apart from this code): a change of the
        // hash fails here.
        assert_eq!(
            spread_offset(id, "/run/onlyone/sync.lock", max),
            Duration::from_millis(380)
        );
        assert_eq!(
            spread_offset(id, "/run/onlyone/backup.lock", max),
            Duration::from_millis(4)
        );
        assert_eq!(
            spread_offset(id, "/run/onlyone/sync.lock", Duration::from_secs(3600)),
            Duration::from_millis(3_110_380)
        );
        // The same at every call; within [0, max); another lock, another
        // offset.
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..64 {
            let lock = format!("/run/onlyone/job{i}.lock");
            let a = spread_offset(id, &lock, max);
            assert_eq!(a, spread_offset(id, &lock, max));
            assert!(a < max);
            seen.insert(a);
        }
        assert!(
            seen.len() > 56,
            "64 locks over 2000 ms: {} offsets",
            seen.len()
        );
        assert_ne!(
            spread_offset(id, "/run/onlyone/sync.lock", max),
            spread_offset(
                "0123456789abcdef0123456789abcdef",
                "/run/onlyone/sync.lock",
                max
            ),
            "another host"
        );
        assert_eq!(spread_offset(id, "x", Duration::ZERO), Duration::ZERO);
        assert_eq!(
            spread_offset(id, "x", Duration::from_micros(999)),
            Duration::ZERO
        );
    }

    #[test]
    fn the_machine_id_comes_from_the_first_file_that_has_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
        std::fs::write(path("empty"), "").unwrap();
        std::fs::write(path("uninit"), "uninitialized\n").unwrap();
        std::fs::write(path("short"), "abc\n").unwrap();
        std::fs::write(path("good"), "5F3A2B1C0D9E8F7A6B5C4D3E2F1A0B9C\n").unwrap();
        let files = [
            path("missing"),
            path("empty"),
            path("uninit"),
            path("short"),
            path("good"),
        ];
        let files: Vec<&str> = files.iter().map(String::as_str).collect();
        assert_eq!(
            machine_id_from(&files).as_deref(),
            Some("5F3A2B1C0D9E8F7A6B5C4D3E2F1A0B9C")
        );
        assert_eq!(machine_id_from(&files[..4]), None);
        // This host's: one of the files', or its name.
        let id = machine_id();
        assert!(!id.is_empty());
        assert_eq!(id, machine_id());
    }

    #[test]
    fn jitter_is_random_within_its_bound() {
        let max = Duration::from_secs(3);
        let draws: Vec<Duration> = (0..200).map(|_| jitter(max)).collect();
        assert!(draws.iter().all(|d| *d < max));
        let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
        assert!(distinct.len() > 150, "{} distinct of 200", distinct.len());
        assert!(draws.iter().any(|d| *d < Duration::from_millis(1500)));
        assert!(draws.iter().any(|d| *d >= Duration::from_millis(1500)));
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }
}
