//! Cron expressions: reading cron(8)'s five fields (and its nicknames),
//! refusing what cron does not read, and finding a cron schedule's fires
//! as cron fires them across a DST change.

use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, JobType};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

use super::ScheduleError;

/// A cron expression in a time zone: what a cron schedule is.
#[derive(Clone)]
pub(super) struct CronRule {
    /// The canonical expression: a nickname, or the five fields with one
    /// space between them.
    pub(super) text: String,
    /// The parsed expression (with cron's day rule made explicit).
    cron: Cron,
    /// The zone its times are wall-clock times of.
    pub(super) tz: TimeZone,
    /// The `CRON_TZ=` name, if one was given.
    pub(super) zone: Option<String>,
    /// A job of fixed times with more than one of them (`0,30 2 * * *`,
    /// `15 1-3 * * *`): cron's rule for DST is the fixed-time one (neither
    /// minute nor hour starts with `*`), croner's the one of jobs that
    /// follow the wall clock (more than one minute or hour), so its fires
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

/// The most fires of the later half of a repeated hour that a search
/// passes over (an hour of a job of every minute, and more).
const MAX_FOLD_STEPS: usize = 2_000;

impl CronRule {
    /// The first fire after `at`: croner's, but for a job of several fixed
    /// times, which cron runs as it runs a job of one (Vixie cron and
    /// cronie: the times a spring-forward skips, once, right after the
    /// gap; a repeated time, at its first occurrence only).
    pub(super) fn next(&self, at: i64) -> Option<i64> {
        if !self.fixed_times {
            return self.croner_next(at);
        }
        let mut from = at;
        for _ in 0..MAX_FOLD_STEPS {
            let next = self.croner_next(from)?;
            if let Some(gap) = self.gap_fire(from, next) {
                return Some(gap);
            }
            if !self.in_later_fold(next) {
                return Some(next);
            }
            from = next;
        }
        None
    }

    /// The last fire at or before `at` (the same fires as
    /// [`CronRule::next`], searched backwards).
    pub(super) fn previous(&self, at: i64) -> Option<i64> {
        if !self.fixed_times {
            return self.croner_previous(at);
        }
        let mut to = at;
        for _ in 0..MAX_FOLD_STEPS {
            let previous = self.croner_previous(to)?;
            if let Some(gap) = self.gap_fire(previous, to) {
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

    /// The fire of a spring-forward in `(after, up_to]` that skipped one of
    /// the job's times: the first instant after the gap.
    fn gap_fire(&self, after: i64, up_to: i64) -> Option<i64> {
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

/// Reads the cron part of a spec (after any `CRON_TZ=`).
pub(super) fn parse_cron(
    text: &str,
    tz: TimeZone,
    zone: Option<String>,
) -> Result<CronRule, ScheduleError> {
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
