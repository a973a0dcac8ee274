//! What a fire (`run`, `precheck`) does about its schedule before it
//! takes the lock: it keeps the schedule in the lock's log (a `schedule`
//! event, when the log has none or another), records the scheduled fires
//! it finds passed unseen since the last fire (one `missed` event, once),
//! records a schedule it was given and could not read here (a `schedule`
//! event with why), and, for `run --catch-up`, decides whether to run at
//! all. It looks through the place's [`ScheduleLog`]: the journal of a
//! lock directory, or the store (its schedules' table and the lock's
//! history, for every host).

use std::time::Duration;

use onlyone::journal::{Event, EventLog, History, MissedFires, ScheduleLog};
use onlyone::schedule::{CatchUp, Fire, Missed, Schedule};
use onlyone::text::for_terminal;

use super::super::format::{now, took};
use super::super::journal;
use super::super::options::Given;

/// How late a fire may come and still serve its scheduled time, and how
/// long after one `check` waits before it calls it missed, unless `--late`
/// says otherwise: five minutes, at most half the schedule's period.
const LATE: Duration = Duration::from_secs(300);

/// `--late`, or its default for `schedule` at `at`.
pub(in crate::cli) fn late_or_default(late: Option<Duration>, s: &Schedule, at: i64) -> Duration {
    late.unwrap_or_else(|| s.period_at(at).map_or(LATE, |p| LATE.min(p / 2)))
}

/// The spec a fire keeps in the journal: the canonical one, with the zone
/// a cron expression is read in named (`CRON_TZ=Europe/Berlin 0 2 * * *`)
/// when the local zone has a name, so that a reader in another zone reads
/// the same fires.
pub(in crate::cli) fn recorded_spec(s: &Schedule) -> String {
    let spec = s.to_string();
    if s.is_every() || spec.starts_with("CRON_TZ=") {
        return spec;
    }
    match s.zone_name() {
        Some(zone) => format!("CRON_TZ={zone} {spec}"),
        None => spec,
    }
}

/// The schedule the journal keeps, read here: `None` when it keeps none;
/// the spec and why when it cannot be read here.
fn kept(h: &History) -> Result<Option<Schedule>, (String, String)> {
    let Some(spec) = h.scheduled.schedule.as_deref() else {
        return Ok(None);
    };
    Schedule::parse(spec)
        .map(Some)
        .map_err(|e| (spec.to_owned(), e.to_string()))
}

/// What a command says of a kept schedule it cannot read.
fn kept_unreadable(spec: &str, e: &str) -> String {
    format!(
        "the schedule its journal keeps, `{}`, cannot be read here: {e}; give it with \
         --schedule SPEC",
        for_terminal(spec)
    )
}

/// The schedule a command uses: the one given (it wins), else the one
/// the journal keeps; `None` when neither.
pub(in crate::cli) fn known(
    given: Option<&Schedule>,
    h: &History,
) -> Result<Option<Schedule>, String> {
    if let Some(s) = given {
        return Ok(Some(s.clone()));
    }
    kept(h).map_err(|(spec, e)| kept_unreadable(&spec, &e))
}

/// A scheduled time, as messages name it: `02:00` within the last 20
/// hours (or the next), else `2025-03-30 02:00`, in the schedule's zone;
/// to the second (`02:00:30`) for a schedule whose fires are not all on
/// whole minutes.
pub(in crate::cli) fn time_words(s: &Schedule, at: i64, now: f64) -> String {
    let full = s.wall_clock(at).unwrap_or_else(|| at.to_string());
    let mut parts = full.split(' ');
    let (date, time) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if (now - at as f64).abs() < 20.0 * 3600.0 && !time.is_empty() {
        time.to_owned()
    } else {
        format!("{date} {time}")
    }
}

/// Missed fires, as messages name them: `the 02:00 fire`, `the 01:00 and
/// 02:00 fires`, `3 fires, from the 00:00 to the 02:00`.
pub(in crate::cli) fn missed_words(s: &Schedule, m: &Missed, now: f64) -> String {
    fires_words(s, m.first, m.last, (m.count, m.exact), now)
}

/// [`missed_words`] of the fires from `first` to `last`, how many and
/// whether all were counted.
pub(in crate::cli) fn fires_words(
    s: &Schedule,
    first: i64,
    last: i64,
    (count, exact): (u64, bool),
    now: f64,
) -> String {
    let first = time_words(s, first, now);
    let last = time_words(s, last, now);
    match (count, exact) {
        (1, true) => format!("the {last} fire"),
        (2, true) => format!("the {first} and {last} fires"),
        (n, true) => format!("{n} fires, from the {first} to the {last}"),
        (n, false) => format!("at least {n} fires, from the {first} to the {last}"),
    }
}

/// What a fire found of its schedule, once it recorded it.
pub(in crate::cli) struct FireSeen {
    /// The schedule.
    pub schedule: Schedule,
    /// The fire, as its schedule sees it.
    pub fire: Fire,
    /// Now, Unix seconds.
    pub now: f64,
    /// Whether a fire was already seen for the scheduled time this one
    /// serves.
    pub served: bool,
    /// When the last fire was seen, if one was.
    pub last_fire: Option<f64>,
    /// The fires recorded missed last, when no run began since: nothing
    /// made up for them.
    pub unmade: Option<MissedFires>,
    /// The lock's name, as messages give it.
    pub name: String,
    /// Why the schedule given was not read here, when the one the journal
    /// keeps was used instead (a catch-up's decision).
    pub given_unreadable: Option<String>,
}

/// What a fire's look at its schedule found.
pub(in crate::cli) enum Looked {
    /// No schedule is given or kept.
    NoSchedule,
    /// The schedule, and what the fire recorded of it.
    Seen(Box<FireSeen>),
    /// The schedule given cannot be read here: why (recorded).
    Unreadable(String),
}

/// What a fire looks with: the schedule given, `--late`, and whether a
/// schedule given that cannot be read here falls back on the one the
/// journal keeps (a catch-up, which must decide).
pub(in crate::cli) struct Asked<'a> {
    /// `--schedule`.
    pub given: Option<&'a Given>,
    /// `--late`.
    pub late: Option<Duration>,
    /// Use the schedule kept when the one given cannot be read.
    pub fall_back: bool,
    /// `--catch-up`: a fire that serves a scheduled time no fire served
    /// yet says, as it records what it found, that it came for it.
    pub catch_up: bool,
    /// `-q`.
    pub quiet: bool,
}

/// Reads the log of the lock `name` and records what this fire found:
/// the schedule (given, else kept), the fires missed, once (the log's
/// look keeps fires of the same instant from recording them twice); a
/// schedule given that cannot be read here, with why. `Err` when the log
/// cannot be read, or the schedule it keeps cannot be read here (recorded
/// too, for `check`).
pub(in crate::cli) fn look(
    log: &dyn ScheduleLog,
    name: &str,
    asked: &Asked<'_>,
) -> Result<Looked, String> {
    let mut found = Ok(Looked::NoSchedule);
    log.look(&mut |h, log| found = record(h, log, name, asked))
        .map_err(|e| format!("cannot read {}: {e}", log.describe()))?;
    found
}

/// Records in `log`, whose history is `h`, what this fire found ([`look`]).
/// A fire that came and still waits before the lock (its jitter or
/// spread) is a fire seen, as `check` counts it.
fn record(
    h: &History,
    log: &dyn EventLog,
    name: &str,
    asked: &Asked<'_>,
) -> Result<Looked, String> {
    let quiet = asked.quiet;
    let unreadable = |spec: &str, reason: &str| {
        let same = h
            .scheduled
            .unreadable
            .as_ref()
            .is_some_and(|u| u.spec == spec && u.reason == reason);
        if !same {
            journal::write(log, &Event::unreadable_schedule(spec, reason), quiet);
        }
    };
    let mut given_unreadable = None;
    let schedule = match asked.given {
        Some(Given::Unreadable { spec, error }) => {
            let why = error.to_string();
            unreadable(spec, &why);
            match kept(h) {
                Ok(Some(s)) if asked.fall_back => {
                    given_unreadable = Some(why);
                    s
                }
                _ => return Ok(Looked::Unreadable(why)),
            }
        }
        Some(Given::Read(s)) => s.clone(),
        None => match kept(h) {
            Ok(Some(s)) => s,
            Ok(None) => return Ok(Looked::NoSchedule),
            Err((spec, e)) => {
                unreadable(&spec, &e);
                return Err(kept_unreadable(&spec, &e));
            }
        },
    };
    let spec = recorded_spec(&schedule);
    let now = now();
    let at = now as i64;
    let waiting = h.scheduled.waiting_since(now);
    let since = h
        .scheduled
        .counting_from(&spec, now)
        .map_or(now, |c| waiting.map_or(c, |w| c.max(w)));
    let grace = late_or_default(asked.late, &schedule, at);
    let fire = schedule.fire(since.floor() as i64, &[], at, grace);
    let last_fire = h.scheduled.last_fire;
    let came = [last_fire, waiting, h.scheduled.caught_up]
        .into_iter()
        .flatten()
        .reduce(f64::max);
    let served = fire
        .serves
        .is_some_and(|s| came.is_some_and(|t| t >= s as f64));
    // The schedule kept is written again when another was, or when the
    // last fire could not read its own (that is mended now); not when it
    // stands in for one given that cannot be read.
    let mends = h.scheduled.unreadable.is_some() && given_unreadable.is_none();
    if h.scheduled.schedule.as_deref() != Some(spec.as_str()) || mends {
        journal::write(log, &Event::schedule(&spec), quiet);
    }
    if let Some(m) = &fire.missed {
        journal::write(log, &Event::missed(&spec, m), quiet);
    }
    // A catch-up that will run for its scheduled time has come for it:
    // said now, with what it recorded (a `delay` until its take, marked
    // `catch-up`), so that a catch-up looking after it (on another host
    // too) finds that time served, and does not run for it again (even
    // once this one is over: its run may not be in what the other read).
    if asked.catch_up && fire.serves.is_some() && !served {
        let mut came = Event::delay(std::process::id(), None, 0.0);
        // Until its take, a moment later: a wait must end after it began.
        came.until = Some(came.time + 1.0);
        came.reason = Some(onlyone::journal::CATCH_UP.to_owned());
        journal::write(log, &came, quiet);
    }
    let last_start = h.runs.iter().map(|r| r.start).reduce(f64::max);
    let unmade = h
        .scheduled
        .missed
        .last()
        .filter(|m| last_start.is_none_or(|s| s < m.time))
        .cloned();
    Ok(Looked::Seen(Box::new(FireSeen {
        schedule,
        fire,
        now,
        served,
        last_fire,
        unmade,
        name: name.to_owned(),
        given_unreadable,
    })))
}

/// What `run --catch-up` does: run, or not (and why, to say).
pub(in crate::cli) enum CatchUpDecision {
    /// Run: on its scheduled time, or once for the fires missed (what to
    /// say of them).
    Run(Option<String>),
    /// Do not run: why.
    Not(String),
}

/// Whether a `run --catch-up` fire runs: on a scheduled time no fire
/// served yet, or once for fires missed within `within` (default: one
/// period).
pub(in crate::cli) fn catch_up(seen: &FireSeen, within: Option<Duration>) -> CatchUpDecision {
    let s = &seen.schedule;
    let at = seen.now as i64;
    let within = within
        .or_else(|| s.period_at(at))
        .unwrap_or(Duration::from_secs(86_400));
    let name = &seen.name;
    let missed = || {
        let m = seen.fire.missed.as_ref();
        m.map_or_else(String::new, |m| missed_words(s, m, seen.now))
    };
    match seen.fire.catch_up(at, within) {
        CatchUp::OnTime if seen.served => CatchUpDecision::Not(format!(
            "nothing to catch up for `{name}`: the {} fire already came",
            seen.fire
                .serves
                .map_or_else(String::new, |t| time_words(s, t, seen.now))
        )),
        CatchUp::OnTime => CatchUpDecision::Run(None),
        CatchUp::MakeUp => CatchUpDecision::Run(Some(format!(
            "`{name}` missed {}: running once to catch up",
            missed()
        ))),
        CatchUp::TooOld => CatchUpDecision::Not(format!(
            "not catching up `{name}`: it missed {}, longer ago than --catch-up-within {}",
            missed(),
            took(within.as_secs_f64())
        )),
        _ => CatchUpDecision::Not(nothing_missed(seen, within)),
    }
}

/// Why a catch-up that found no fire missed since the last look does not
/// run: the fires recorded missed last that nothing made up for (a
/// catch-up declined them: when they were found, and why), else that none
/// was missed.
fn nothing_missed(seen: &FireSeen, within: Duration) -> String {
    let name = &seen.name;
    let Some(m) = &seen.unmade else {
        let last = match seen.last_fire {
            Some(t) => format!("the last fire was {} ago", took(seen.now - t)),
            None => "no fire recorded".to_owned(),
        };
        return format!("nothing to catch up for `{name}`: no fire missed ({last})");
    };
    let first = m.first as i64;
    let last = m.last as i64;
    let what = match m.schedule.as_deref().and_then(|x| Schedule::parse(x).ok()) {
        Some(recorded) => fires_words(&recorded, first, last, (m.count, m.exact), seen.now),
        None => fires_words(&seen.schedule, first, last, (m.count, m.exact), seen.now),
    };
    let old = seen.now - m.last > within.as_secs_f64();
    let why = if old {
        format!(
            ": older than --catch-up-within {}",
            took(within.as_secs_f64())
        )
    } else {
        String::new()
    };
    // Found by another host's fire (a store's), which may be making up for
    // them as this one looks.
    let here = onlyone::command::host_name();
    let there = m.host.as_deref().filter(|h| *h != here);
    let (by, tail) = match there {
        Some(host) if !old => (
            format!(" by a fire on `{}`", for_terminal(host)),
            " (a catch-up there runs once for them)",
        ),
        Some(host) => (
            format!(" by a fire on `{}`", for_terminal(host)),
            " and not made up for",
        ),
        None => (String::new(), " and not made up for"),
    };
    format!(
        "nothing to catch up for `{name}`: it missed {what}, found missed {} ago{by}{tail}{why}; \
         none missed since",
        took(seen.now - m.time)
    )
}
