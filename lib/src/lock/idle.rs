//! Idleness: a process is idle while it uses no CPU time and reads or writes
//! no byte.
//!
//! The evidence is two cumulative counters per process: `utime + stime`
//! (`/proc/PID/stat`, clock ticks) and `rchar + wchar` (`/proc/PID/io`,
//! bytes through system calls, terminals and pipes included). Because they
//! only grow, comparing two samples cannot miss activity between them,
//! however far apart the samples are. A process that appears or disappears
//! is activity too, and a process whose I/O counters cannot be read is
//! never taken for idle.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::procfs::{self, ProcId};

/// The activity counters of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// CPU time used, clock ticks.
    pub cpu_ticks: u64,
    /// Bytes read and written; `None` when `/proc/PID/io` is unreadable.
    pub io_bytes: Option<u64>,
}

/// Reads the counters of a process if it is still that process and is not
/// dead.
pub fn counters(id: ProcId) -> Option<Counters> {
    let st = procfs::read_stat(id.pid).ok().flatten()?;
    if st.start != id.start || procfs::is_dead_process(id.pid, &st) {
        return None;
    }
    Some(Counters {
        cpu_ticks: st.cpu_ticks,
        io_bytes: procfs::io_bytes(id.pid),
    })
}

/// Watches a set of processes that may change, and says how long all of
/// them together have been idle.
#[derive(Debug)]
pub struct IdleWatch {
    seen: HashMap<ProcId, Counters>,
    last_activity: Instant,
}

impl Default for IdleWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl IdleWatch {
    /// Starts watching; everything counts as active now.
    pub fn new() -> IdleWatch {
        IdleWatch {
            seen: HashMap::new(),
            last_activity: Instant::now(),
        }
    }

    /// Takes a sample of the processes `procs`; returns true when it shows
    /// activity since the previous sample.
    pub fn sample(&mut self, procs: &[ProcId]) -> bool {
        let mut now: HashMap<ProcId, Counters> = HashMap::with_capacity(procs.len());
        for &id in procs {
            if let Some(c) = counters(id) {
                now.insert(id, c);
            }
        }
        let active = now.len() != self.seen.len()
            || now
                .iter()
                .any(|(k, c)| c.io_bytes.is_none() || self.seen.get(k).is_none_or(|old| old != c));
        self.seen = now;
        if active {
            self.last_activity = Instant::now();
        }
        active
    }

    /// Counts as activity now (a sample that could not be taken).
    pub fn mark_active(&mut self) {
        self.last_activity = Instant::now();
    }

    /// How long every watched process has been idle.
    pub fn idle_for(&self) -> Duration {
        self.last_activity.elapsed()
    }

    /// How many processes the last sample saw.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// True when the last sample saw no process.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// How often to sample for an idle window: often enough to end an idle run
/// close to its window, rarely enough that the sampling costs nothing.
pub fn sample_interval(window: Duration) -> Duration {
    (window / 20).clamp(Duration::from_millis(50), Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_process_is_active_and_a_sleeping_one_goes_idle() {
        let mut sleeper = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let id = ProcId::of(sleeper.id()).unwrap();
        let mut w = IdleWatch::new();
        assert!(w.sample(&[id]), "first sight is activity");
        // `sleep` already exec'd or not, its counters settle; wait for two
        // equal samples in a row (condition, not a fixed delay).
        let t = Instant::now();
        while w.sample(&[id]) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "sleep never went idle"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(w.len(), 1);
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        assert!(w.sample(&[id]), "a process that went away is activity");
        assert!(w.is_empty());
    }

    #[test]
    fn sampling_interval_is_bounded() {
        assert_eq!(
            sample_interval(Duration::from_secs(1)),
            Duration::from_millis(50)
        );
        assert_eq!(
            sample_interval(Duration::from_secs(600)),
            Duration::from_secs(5)
        );
    }
}
