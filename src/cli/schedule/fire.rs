//! What a fire (`run`, `precheck`) does about its schedule before it
//! takes the lock: it keeps the schedule in the lock's journal (a
//! `schedule` event, when the journal has none or another), records the
//! slots it finds passed unseen since the last fire (one `missed` event,
//! once), and, for `run --catch-up`, decides whether to run at all.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use onlyone::journal::{Event, History, Journal};
use onlyone::schedule::{CatchUp, Fire, Missed, Schedule};
use onlyone::text::for_terminal;

use super::super::format::{now, took};
use super::super::{Ctx, journal};

/// How late a fire may come and still be its slot's, and how long after a
/// slot `check` waits before it calls it missed, unless `--late` says
/// otherwise: five minutes, at most half the schedule's period.
const LATE: Duration = Duration::from_secs(300);

/// `--late`, or its default for `schedule` at `at`.
pub(in crate::cli) fn late_or_default(late: Option<Duration>, s: &Schedule, at: i64) -> Duration {
    late.unwrap_or_else(|| s.period_at(at).map_or(LATE, |p| LATE.min(p / 2)))
}

/// The spec a fire keeps in the journal: the canonical one, with the zone
/// a cron expression is read in named (`CRON_TZ=Europe/Berlin 0 2 * * *`)
/// when the local zone has a name, so that a reader in another zone reads
/// the same slots.
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

/// The schedule a command uses: the one given (it wins), else the one
/// the journal keeps; `None` when neither.
pub(in crate::cli) fn known(
    given: Option<&Schedule>,
    h: &History,
) -> Result<Option<Schedule>, String> {
    if let Some(s) = given {
        return Ok(Some(s.clone()));
    }
    let Some(spec) = h.scheduled.schedule.as_deref() else {
        return Ok(None);
    };
    Schedule::parse(spec).map(Some).map_err(|e| {
        format!(
            "the schedule its journal keeps, `{}`, cannot be read here: {e}; give it with \
             --schedule SPEC",
            for_terminal(spec)
        )
    })
}

/// A slot, as messages name it: `02:00` within the last 20 hours (or the
/// next), else `2025-03-30 02:00`, in the schedule's zone.
pub(in crate::cli) fn slot_words(s: &Schedule, slot: i64, now: f64) -> String {
    let full = s.wall_clock(slot).unwrap_or_else(|| slot.to_string());
    let mut parts = full.split(' ');
    let (date, time) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if (now - slot as f64).abs() < 20.0 * 3600.0 && !time.is_empty() {
        time.to_owned()
    } else {
        format!("{date} {time}")
    }
}

/// Missed slots, as messages name them: `the 02:00 fire`, `the 01:00 and
/// 02:00 fires`, `3 fires, from the 00:00 to the 02:00`.
pub(in crate::cli) fn missed_words(s: &Schedule, m: &Missed, now: f64) -> String {
    slots_words(s, m.first, m.last, (m.count, m.exact), now)
}

/// [`missed_words`] of the slots from `first` to `last`, how many and
/// whether all were counted.
pub(in crate::cli) fn slots_words(
    s: &Schedule,
    first: i64,
    last: i64,
    (count, exact): (u64, bool),
    now: f64,
) -> String {
    let first = slot_words(s, first, now);
    let last = slot_words(s, last, now);
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
    /// Whether a fire was already seen for the slot this one serves.
    pub served: bool,
    /// When the last fire was seen, if one was.
    pub last_fire: Option<f64>,
    /// The lock's name, as messages give it.
    pub name: String,
}

/// The longest a fire waits for another's look at the same state
/// directory: a look takes milliseconds; past this, it looks all the same.
const LOOK_WAIT: Duration = Duration::from_secs(1);

/// Takes an exclusive `flock` on the directory of the journal `log`
/// (the user's state directory), held while a fire reads what was missed
/// and records it: of fires at the same instant, one records the slots
/// and the others find them recorded. `None`, to look without it, when
/// the directory cannot be opened (no journal yet: nothing to record) or
/// another process holds it past [`LOOK_WAIT`].
fn look_guard(log: &Journal) -> Option<OwnedFd> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let dir = log.path().parent()?.to_owned();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::open(&dir, flags, Mode::empty()).ok()?;
    let until = Instant::now() + LOOK_WAIT;
    loop {
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Some(fd),
            Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR)
                if Instant::now() < until =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return None,
        }
    }
}

/// Reads the journal of `lock` and records what this fire found: the
/// schedule (given, else kept), the slots missed, once (under
/// [`look_guard`]). `Ok(None)` when no schedule is known.
pub(in crate::cli) fn look(
    ctx: &Ctx,
    lock: &str,
    given: Option<&Schedule>,
    late: Option<Duration>,
    quiet: bool,
) -> Result<Option<FireSeen>, String> {
    let (log, name, _) = ctx.journal_for_reading(lock).map_err(|e| e.to_string())?;
    let _guard = look_guard(&log);
    let h = read(&log)?;
    let Some(schedule) = known(given, &h)? else {
        return Ok(None);
    };
    let spec = recorded_spec(&schedule);
    let now = now();
    let at = now as i64;
    let since = h.scheduled.counting_from(&spec, now).unwrap_or(now);
    let grace = late_or_default(late, &schedule, at);
    let fire = schedule.fire(since.floor() as i64, &[], at, grace);
    let last_fire = h.scheduled.last_fire;
    let served = fire
        .slot
        .is_some_and(|s| last_fire.is_some_and(|t| t >= s as f64));
    if h.scheduled.schedule.as_deref() != Some(spec.as_str()) {
        journal::write(&log, &Event::schedule(&spec), quiet);
    }
    if let Some(m) = &fire.missed {
        journal::write(&log, &Event::missed(&spec, m), quiet);
    }
    Ok(Some(FireSeen {
        schedule,
        fire,
        now,
        served,
        last_fire,
        name,
    }))
}

/// The journal's history, or why it cannot be read.
fn read(log: &Journal) -> Result<History, String> {
    log.history()
        .map_err(|e| format!("cannot read the journal `{}`: {e}", log.path().display()))
}

/// What `run --catch-up` does: run, or not (and why, to say).
pub(in crate::cli) enum CatchUpDecision {
    /// Run: on its slot, or once for the slots missed (what to say of
    /// them).
    Run(Option<String>),
    /// Do not run: why.
    Not(String),
}

/// Whether a `run --catch-up` fire runs: on a slot no fire served yet, or
/// once for slots missed within `within` (default: one period).
pub(in crate::cli) fn catch_up(seen: &FireSeen, within: Option<Duration>) -> CatchUpDecision {
    let s = &seen.schedule;
    let at = seen.now as i64;
    let within = within
        .or_else(|| s.period_at(at))
        .unwrap_or(Duration::from_secs(86_400));
    let name = &seen.name;
    let last = match seen.last_fire {
        Some(t) => format!("the last fire was {} ago", took(seen.now - t)),
        None => "no fire recorded".to_owned(),
    };
    match seen.fire.catch_up(at, within) {
        CatchUp::OnSlot if seen.served => CatchUpDecision::Not(format!(
            "nothing to catch up for `{name}`: the {} fire already ran",
            seen.fire
                .slot
                .map_or_else(String::new, |t| slot_words(s, t, seen.now))
        )),
        CatchUp::OnSlot => CatchUpDecision::Run(None),
        CatchUp::MakeUp => {
            let m = seen.fire.missed.as_ref();
            let what = m.map_or_else(String::new, |m| missed_words(s, m, seen.now));
            CatchUpDecision::Run(Some(format!(
                "`{name}` missed {what}: running once to catch up"
            )))
        }
        CatchUp::TooOld => {
            let m = seen.fire.missed.as_ref();
            let what = m.map_or_else(String::new, |m| missed_words(s, m, seen.now));
            CatchUpDecision::Not(format!(
                "not catching up `{name}`: it missed {what}, longer ago than --catch-up-within {}",
                took(within.as_secs_f64())
            ))
        }
        _ => CatchUpDecision::Not(format!(
            "nothing to catch up for `{name}`: no fire missed ({last})"
        )),
    }
}
