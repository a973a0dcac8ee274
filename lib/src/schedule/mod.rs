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
//!   fires at the multiples of DUR since the Unix epoch, in real seconds.
//!   `every 15m` is at :00, :15, :30 and :45 of every hour, `every 2h` at
//!   the even hours of UTC, `every 1d` at 00:00 UTC, `every 7d` at 00:00
//!   UTC on Thursdays; a DST change moves none of them. Anchoring to the
//!   epoch makes the fires a function of the spec alone, with no state to
//!   keep or lose: that is what lets any process, at any time, say which
//!   fires have passed. For a time of day in a local zone, write cron.
//!
//! **Fires.** A schedule's fires (its scheduled times) are instants (Unix
//! seconds); a fire of the job is one process that comes for one of them.
//! [`Schedule::next_fire`] is the first fire after a time,
//! [`Schedule::previous_fire`] the last at or before it; [`Schedule::fires`]
//! walks them. A DST change is read as Vixie cron and cronie read it. A
//! job of fixed times (neither its minute nor its hour starts with `*`:
//! `30 2 * * *`, `0,30 2 * * *`, `15 1-3 * * *`) whose times a
//! spring-forward skips has one fire for them, at the first instant after
//! the gap (03:00 on the last Sunday of March in Berlin, when cron runs
//! them), and a time a fall-back repeats has one fire, at the first of the
//! two (02:30 CEST, not 02:30 CET). A job whose minute or hour starts with
//! `*` (`*/15 * * * *`, `30 * * * *`, `0 */2 * * *`) follows the wall
//! clock: no fire in the skipped hour, and fires in both halves of the
//! repeated one (two real hours, and cron fires in both).
//!
//! **Missed fires.** [`missed`] counts the fires in `(last_seen, now -
//! late]`; [`Schedule::fire`] tells a fire of the job which scheduled fire
//! it serves, if any, and which before it passed unseen. Counting is bounded: past
//! [`MAX_COUNTED`] fires the count stops and says so ([`Missed::exact`]),
//! the first and last fires still exact.
//!
//! **Spread and jitter.** [`spread_offset`] is a stable delay for a lock on
//! a host (systemd's `RandomizedOffsetSec=`): a fixed hash, written down
//! here, of the machine id ([`machine_id`]) and the lock, the same at every
//! fire and in every version. [`jitter`] is a fresh random delay from the
//! kernel's random source.
//!
//! Nothing here runs until it is called: no time zone is read, no file
//! opened, at start.

mod catch_up;
mod cron;
mod every;
mod spread;
#[cfg(test)]
mod tests;
mod zone;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;

pub use catch_up::{CatchUp, Fire, Fires, Missed, missed};
use cron::{CronRule, parse_cron};
use every::{canonical_period, parse_period, strip_every};
pub use spread::{jitter, machine_id, spread_offset};
use zone::{local_zone, named_zone, split_zone};

/// The most fires [`missed`] and [`Schedule::fires_between`] count one by
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
    /// The local time zone could not be read. Only a spec that is
    /// otherwise right gets this error: it would read in a zone that can
    /// be read.
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
    /// `CRON_TZ=` before `every`, whose fires no zone moves.
    #[error(
        "`CRON_TZ={name}` changes nothing for `{every}`: its fires are counted in real seconds from the Unix epoch. \
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
            None => local_zone().map_err(|e| {
                // The zone is the host's, not the spec's: a spec that is
                // wrong in any zone says that first.
                match parse_cron(rest, TimeZone::UTC, None) {
                    Ok(_) => e,
                    Err(wrong) => wrong,
                }
            })?,
        };
        let rule = parse_cron(rest, tz, zone.map(str::to_owned))?;
        Ok(Schedule {
            rule: Rule::Cron(Box::new(rule)),
        })
    }

    /// The first fire after `at` (Unix seconds); `None` past the year
    /// 9999.
    pub fn next_fire(&self, at: i64) -> Option<i64> {
        match &self.rule {
            Rule::Every { period } => at.div_euclid(*period).checked_add(1)?.checked_mul(*period),
            Rule::Cron(c) => c.next(at),
        }
    }

    /// The last fire at or before `at` (a fire at `at` itself is the
    /// previous one); `None` before the year 1 (or a cron schedule's before
    /// its first fire).
    pub fn previous_fire(&self, at: i64) -> Option<i64> {
        match &self.rule {
            Rule::Every { period } => at.div_euclid(*period).checked_mul(*period),
            Rule::Cron(c) => c.previous(at),
        }
    }

    /// The gap between the fire at or before `t` and the one after it:
    /// the schedule's period at `t` (an hour, a day, a day and an hour
    /// across a fall-back).
    pub fn period_at(&self, t: i64) -> Option<Duration> {
        if let Rule::Every { period } = self.rule {
            return Some(Duration::from_secs(period.unsigned_abs()));
        }
        let before = self.previous_fire(t)?;
        let after = self.next_fire(t)?;
        Some(Duration::from_secs(
            after.checked_sub(before)?.unsigned_abs(),
        ))
    }

    /// The fires in `(after, up_to]`, in order, found one at a time as the
    /// iterator is read (take what is shown).
    pub fn fires(&self, after: i64, up_to: i64) -> Fires<'_> {
        Fires {
            schedule: self,
            at: after,
            up_to,
        }
    }

    /// The fires in `(after, up_to]`: the first, the last and how many
    /// (counted up to [`MAX_COUNTED`]); `None` when there is none.
    pub fn fires_between(&self, after: i64, up_to: i64) -> Option<Missed> {
        self.unseen(after, up_to, &[])
    }

    /// The fires in `(after, up_to]` that no fire of the job was seen for:
    /// a fire is seen when a time of `seen` (sorted, oldest first: runs'
    /// starts, skips, stops) falls in its window, from the fire to the next
    /// one. A long run that began in one fire's window does not see the
    /// next: a fire of the job that came for it, found the lock held and
    /// skipped does. Fires are examined
    /// up to [`MAX_COUNTED`] of them; past that, [`Missed::exact`] is
    /// false and `count` a lower bound, and `last` is exact only when no
    /// time of `seen` lies past the fires examined (all the rest are then
    /// unseen), else the last one found.
    pub fn unseen(&self, after: i64, up_to: i64, seen: &[i64]) -> Option<Missed> {
        let first_fire = self.next_fire(after)?;
        if first_fire > up_to {
            return None;
        }
        debug_assert!(seen.is_sorted(), "seen times come oldest first");
        let mut seen = seen
            .iter()
            .copied()
            .skip_while(|t| *t < first_fire)
            .peekable();
        if let Rule::Every { period } = self.rule
            && seen.peek().is_none()
        {
            let last = self.previous_fire(up_to)?;
            return Some(Missed {
                first: first_fire,
                last,
                count: ((last - first_fire) / period + 1).unsigned_abs(),
                exact: true,
            });
        }
        let mut found: Option<Missed> = None;
        let mut fire = first_fire;
        let mut examined = 0;
        loop {
            let next = self.next_fire(fire);
            // Times before this fire's window saw earlier fires.
            while seen.next_if(|t| *t < fire).is_some() {}
            let covered = seen.peek().is_some_and(|t| next.is_none_or(|n| *t < n));
            if !covered {
                match &mut found {
                    Some(m) => {
                        m.last = fire;
                        m.count += 1;
                    }
                    None => {
                        found = Some(Missed {
                            first: fire,
                            last: fire,
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
                    last: self.previous_fire(up_to)?,
                    count: found.map_or(1, |m| m.count),
                    exact: false,
                });
            }
            fire = next;
        }
    }

    /// What a fire of the job at `now` is: the scheduled fire it serves,
    /// when the last one at or before `now` is at most `grace` old, and the
    /// fires after `since` (the last time a fire looked, or the schedule
    /// was first given) before it that no time of `seen` covers
    /// ([`Schedule::unseen`]).
    pub fn fire(&self, since: i64, seen: &[i64], now: i64, grace: Duration) -> Fire {
        let grace = secs(grace);
        let serves = self
            .previous_fire(now)
            .filter(|s| now.saturating_sub(*s) <= grace);
        let missed = match serves {
            // The fire it serves is not missed: the ones before it.
            Some(s) => self.unseen(since, s.saturating_sub(1), seen),
            None => self.unseen(since, now, seen),
        };
        Fire { serves, missed }
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

    /// `t` as a wall-clock time of the schedule's zone, to the minute
    /// (`2025-03-30 03:00 CEST`; UTC for `every`), or to the second for a
    /// schedule whose fires are not all on whole minutes (`every 10s`,
    /// `every 90s`: `2025-03-30 01:00:30 UTC`).
    pub fn wall_clock(&self, t: i64) -> Option<String> {
        let (tz, format) = match &self.rule {
            Rule::Every { period } if period % 60 != 0 => (TimeZone::UTC, "%Y-%m-%d %H:%M:%S %Z"),
            Rule::Every { .. } => (TimeZone::UTC, "%Y-%m-%d %H:%M %Z"),
            Rule::Cron(c) => (c.tz.clone(), "%Y-%m-%d %H:%M %Z"),
        };
        let z = Timestamp::from_second(t).ok()?.to_zoned(tz);
        Some(z.strftime(format).to_string())
    }

    /// Whether this is an `every` schedule (fires at fixed real-time
    /// intervals), not a cron expression.
    pub fn is_every(&self) -> bool {
        matches!(self.rule, Rule::Every { .. })
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

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}
