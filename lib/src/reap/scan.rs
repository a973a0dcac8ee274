//! Finding the processes that belong, or may belong, to a run of a named
//! job: those whose environment carries `ONLYONE_TOKEN` or `ONLYONE_LOCK`,
//! and the processes of the named jobs' live runs (owners, lingering
//! processes, process groups), whatever their environment.
//!
//! An environment is its process's own word: any account can put a token
//! it read in a 0644 record, or any lock path, in one of its own. So a
//! marked process is a job's only when it runs (by its real uid) as the
//! user whose record the lock holds, or as this reaper's user when the
//! lock holds none; what another user's process carries makes nothing of
//! a job's live or active, and is never ended (a record's own evidence, a
//! lingerer named by pid and start time, still counts for any user its
//! record may name). The lock path it names is never looked up in a way
//! that can block: it may lie on a filesystem another user mounted (FUSE)
//! that never answers.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::Job;
use crate::lock::LockFile;
use crate::lock::idle::Counters;
use crate::lock::members::{self, LOCK_VAR, TOKEN_VAR};
use crate::lock::work::{Lingered, Work};
use crate::procfs::{self, ProcId};
use crate::record::{Mode, Record};

/// One process that belongs, or may belong, to a run.
pub(super) struct Marked {
    pub(super) id: ProcId,
    /// The job it belongs to (index into the jobs), if a named one.
    pub(super) job: Option<usize>,
    /// The lock its environment names, as it names it.
    pub(super) lock: Option<String>,
    pub(super) token: Option<String>,
    pub(super) counters: Counters,
    /// Why it is not of a named job although it names one's lock or
    /// carries its live token, as a sentence.
    pub(super) foreign: Option<String>,
}

/// What a run left with `--keep-strays`, as the reaper's state keeps it
/// by process (see `state::note_kept`): which lock and which run, so that
/// the reaper knows the process for the run's by what it is, not by what
/// its environment says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Kept {
    /// The lock's path, its directory's links resolved.
    pub(super) lock: String,
    /// The run's token.
    pub(super) token: String,
}

/// A named job, with its lock as this reap sees it.
pub(super) struct JobView<'a> {
    pub(super) job: &'a Job,
    /// The lock path, absolute, its directory's symlinks resolved.
    pub(super) key: PathBuf,
    /// The lock path as the reaper was given it, absolute, `.` and `..`
    /// taken lexically: what a run started with that path names, where
    /// its directory's names are not in the kernel's cache.
    named: PathBuf,
    /// The token the lock names now (`Ok(None)`: free), or why the lock
    /// cannot be read.
    pub(super) live: Result<Option<String>, String>,
    /// Why the lock file could not be looked at, when that is so (not why
    /// what it holds is not a record): a reap says it.
    pub(super) unseen: Option<String>,
    /// The user whose marked processes may be the job's: the owner of the
    /// lock's record, or, when the lock holds none, the user whose state
    /// the reap works on (this reaper's user, or for root in a directory
    /// of a user's own, that user: see `state.rs`).
    pub(super) user: u32,
    /// The live run's processes could not all be measured.
    pub(super) unmeasurable: bool,
    /// The live run lingers (its command exited): what it left, and which
    /// processes are its work.
    pub(super) work: Option<(Lingered, Work)>,
}

impl<'a> JobView<'a> {
    /// `job`, as seen from the directory `here`, in a reap of `state_user`'s
    /// state.
    pub(super) fn new(job: &'a Job, here: &Path, state_user: u32) -> JobView<'a> {
        let (live, owner) = live_run(&job.lock);
        let unseen = match &live {
            Err(LiveErr::Lock(e)) => Some(e.clone()),
            _ => None,
        };
        JobView {
            job,
            key: canonical(&job.lock, here),
            named: lexical(&absolute(&job.lock, here)),
            live: live.map_err(LiveErr::into_string),
            unseen,
            user: owner.unwrap_or(state_user),
            unmeasurable: false,
            work: None,
        }
    }
}

/// The token a lock names now: `Ok(None)` when it is free, an error when it
/// cannot be read (then its runs count as live).
pub(super) fn live_token(lock: &Path) -> Result<Option<String>, String> {
    live_run(lock).0.map_err(LiveErr::into_string)
}

/// Why a lock's live token is not known.
enum LiveErr {
    /// The lock file could not be looked at (opened, or read): a reap
    /// says so.
    Lock(String),
    /// What it holds is not a record (or its directory is missing).
    Content(String),
}

impl LiveErr {
    fn into_string(self) -> String {
        match self {
            LiveErr::Lock(s) | LiveErr::Content(s) => s,
        }
    }
}

/// [`live_token`], and the owner of the lock's record when it holds one.
fn live_run(lock: &Path) -> (Result<Option<String>, LiveErr>, Option<u32>) {
    let l = match LockFile::open(lock) {
        Ok(l) => l,
        // As before it existed: its runs count as live, said nowhere.
        Err(e @ crate::Error::MissingDir { .. }) => {
            return (Err(LiveErr::Content(e.to_string())), None);
        }
        Err(e) => return (Err(LiveErr::Lock(e.to_string())), None),
    };
    match l.inspect() {
        Ok(None) => (Ok(None), None),
        Ok(Some(seen)) => match seen.record {
            Ok(r) => (Ok(r.token), r.uid),
            Err(why) => (Err(LiveErr::Content(why.to_string())), None),
        },
        Err(crate::Error::MissingDir { .. }) => (Ok(None), None),
        Err(e) => (Err(LiveErr::Lock(e.to_string())), None),
    }
}

/// The path `p` of a lock this reaper was named, absolute, with its
/// directory's symlinks resolved, as seen from the directory `cwd`.
pub(super) fn canonical(p: &Path, cwd: &Path) -> PathBuf {
    let abs = absolute(p, cwd);
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or(abs.clone()),
        _ => abs,
    }
}

/// `p`, absolute, as seen from the directory `cwd`.
fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// The lock path `p` that another process's environment names, as
/// [`canonical`] would make it, from that process's directory `cwd`
/// (`/proc/PID/cwd`), but without any lookup that reaches a filesystem:
/// its directory is resolved only from the names the kernel has cached
/// (`openat2` with `RESOLVE_CACHED`), and where that is not enough, `p`
/// is compared as written, `.` and `..` taken lexically. Its writer chose
/// the path: it may lie on a filesystem another user mounted (FUSE) that
/// never answers, where a `stat` would wait for ever. A job's own lock
/// directory has just been looked up by this reaper, so its names are
/// cached.
fn canonical_theirs(p: &Path, cwd: &Path) -> PathBuf {
    let abs = absolute(p, cwd);
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => cached_real_path(dir)
            .unwrap_or_else(|| lexical(dir))
            .join(name),
        _ => lexical(&abs),
    }
}

/// The directory `dir` resolved (symlinks and `..`) from the kernel's
/// cache of names alone; `None` when a name is not cached, or the kernel
/// cannot resolve that way (before Linux 5.12).
fn cached_real_path(dir: &Path) -> Option<PathBuf> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let fd = rustix::fs::openat2(
        rustix::fs::CWD,
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::CACHED,
    )
    .ok()?;
    // What the descriptor names, from the kernel's own record of it: no
    // lookup.
    use std::os::fd::AsRawFd;
    fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

/// `p` with `.` and `..` taken lexically.
fn lexical(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn mount_ns(pid: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| m.ino())
}

/// Every candidate: the marked processes of the host, then the other
/// processes of the named jobs' live runs, then what runs of the named
/// jobs left with `--keep-strays` (`kept`, from the state of `state_user`).
pub(super) fn scan(
    views: &mut [JobView<'_>],
    kept: &BTreeMap<String, Kept>,
    state_user: u32,
    deadline: Instant,
    errors: &mut Vec<String>,
) -> Vec<Marked> {
    let mut out = marked_processes(views, deadline, errors);
    for (i, view) in views.iter_mut().enumerate() {
        live_run_processes(i, view, deadline, &mut out, errors);
    }
    kept_strays(views, kept, state_user, &mut out);
    out
}

/// The processes that a run of a named job left with `--keep-strays`, as
/// its wrapper noted them (by pid and start time, with the run's lock and
/// token): that job's, whatever their user or their environment, when
/// the state's user may name them as a record of theirs may (root's
/// state: anyone's).
fn kept_strays(
    views: &[JobView<'_>],
    kept: &BTreeMap<String, Kept>,
    state_user: u32,
    out: &mut Vec<Marked>,
) {
    for (id, k) in kept {
        let Ok(id) = id.parse::<ProcId>() else {
            continue;
        };
        let lock = Path::new(&k.lock);
        let Some(i) = views.iter().position(|v| v.key == lock) else {
            continue;
        };
        if !members::may_name(Some(state_user), id.pid) {
            continue;
        }
        if let Some(o) = out.iter_mut().find(|o| o.id == id) {
            o.job = Some(i);
            o.token = Some(k.token.clone());
            o.foreign = None;
            continue;
        }
        if let Some(counters) = crate::lock::idle::counters(id) {
            out.push(Marked {
                id,
                job: Some(i),
                lock: Some(k.lock.clone()),
                token: Some(k.token.clone()),
                counters,
                foreign: None,
            });
        }
    }
}

/// The processes whose environment carries `ONLYONE_TOKEN` or
/// `ONLYONE_LOCK`, with the named job each belongs to.
fn marked_processes(
    views: &[JobView<'_>],
    deadline: Instant,
    errors: &mut Vec<String>,
) -> Vec<Marked> {
    let me = std::process::id();
    let my_mnt = mount_ns("self");
    let mut out = Vec::new();
    let pids = match procfs::all_pids() {
        Ok(p) => p,
        Err(e) => {
            errors.push(format!("cannot list /proc: {e}"));
            return out;
        }
    };
    for pid in pids {
        if Instant::now() >= deadline {
            errors.push("the deadline ran out while listing processes".into());
            break;
        }
        if pid == me {
            continue;
        }
        let Some(vals) = procfs::environ_values(pid, &[TOKEN_VAR, LOCK_VAR]) else {
            continue;
        };
        let [token, lock] = [vals[0].clone(), vals[1].clone()];
        if token.is_none() && lock.is_none() {
            continue;
        }
        let Ok(Some(st)) = procfs::read_stat(pid) else {
            continue;
        };
        if procfs::is_dead_process(pid, &st) {
            continue;
        }
        // The same path in another mount namespace (a container) is
        // another file; a relative path is relative to that process.
        let mut foreign = None;
        let by_path = lock.as_deref().and_then(|l| {
            let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_else(|_| "/".into());
            let key = canonical_theirs(Path::new(l), &cwd);
            let i = views.iter().position(|v| v.key == key || v.named == key)?;
            if mount_ns(&pid.to_string()) != my_mnt {
                foreign = Some(format!(
                    "it names the lock `{l}`, but it runs in another mount namespace, where that \
                     path is another file"
                ));
                return None;
            }
            Some(i)
        });
        // A process handed only the token (`tmux new-window -e
        // ONLYONE_TOKEN=...`) belongs to the live run whose lock names it:
        // 128 random bits name one run, wherever its lock is.
        let job = by_path.or_else(|| {
            let t = token.as_deref()?;
            views
                .iter()
                .position(|v| matches!(&v.live, Ok(Some(live)) if live == t))
        });
        // Both are the process's own word: only the job's user's count.
        let job = job.filter(|&i| {
            let carried = members::may_carry(Some(views[i].user), pid);
            if !carried {
                foreign = Some(another_users(&views[i], procfs::uid_of(pid)));
            }
            carried
        });
        out.push(Marked {
            id: ProcId {
                pid,
                start: st.start,
            },
            job,
            lock,
            token,
            counters: Counters {
                cpu_ticks: st.cpu_ticks,
                io_bytes: procfs::io_bytes(pid),
            },
            foreign,
        });
    }
    out
}

/// Why a marked process of user `uid` is not of `view`'s job.
fn another_users(view: &JobView<'_>, uid: Option<u32>) -> String {
    let who = uid.map_or_else(|| "an unknown user".to_owned(), crate::text::user_name);
    format!(
        "it names `{}` or carries its run's token, but it runs as {who} and the job's run is \
         {}'s: what another user's environment says is not the run's",
        view.job.name,
        crate::text::user_name(view.user)
    )
}

/// The other processes of job `i`'s live run: the owner of a lock taken by
/// a script or a program (not a run's wrapper, which ends when its command
/// does), the processes a lingering run named (they may carry neither
/// token nor group), and the run's group and what cannot be read.
fn live_run_processes(
    i: usize,
    view: &mut JobView<'_>,
    deadline: Instant,
    out: &mut Vec<Marked>,
    errors: &mut Vec<String>,
) {
    let me = std::process::id();
    let Ok(Some(token)) = view.live.clone() else {
        return;
    };
    let Some(rec) = live_record(view.job, &token) else {
        return;
    };
    let push = |id: ProcId, counters: Option<Counters>, out: &mut Vec<Marked>| {
        if id.pid == me {
            return;
        }
        if let Some(o) = out.iter_mut().find(|o| o.id == id) {
            // Marked, but of another user than the record's: the record's
            // own evidence (its lingerers, its group) makes it the run's.
            if o.job.is_none() && o.foreign.is_some() {
                o.job = Some(i);
                o.token = Some(token.clone());
                o.foreign = None;
            }
            return;
        }
        if let Some(counters) = counters.or_else(|| crate::lock::idle::counters(id)) {
            out.push(Marked {
                id,
                job: Some(i),
                lock: Some(view.job.lock.display().to_string()),
                token: Some(token.clone()),
                counters,
                foreign: None,
            });
        }
    };
    // A record names only its writer's processes (root's: anyone's).
    let named = |id: &ProcId| rec.may_name(id.pid);
    if rec.mode != Mode::Run
        && let Some(owner) = rec.owner_id().filter(named)
    {
        push(owner, None, out);
    }
    for id in rec.linger.iter().filter(|id| named(id)) {
        push(*id, None, out);
    }
    // What descends from a lingering run's work, whatever its environment.
    if let Some(l) = Lingered::of(&rec) {
        match Work::load(&l, Some(deadline)) {
            Ok(w) => {
                for id in w.members().into_iter().filter(named) {
                    push(id, None, out);
                }
                view.work = Some((l, w));
            }
            Err(e) => {
                view.unmeasurable = true;
                errors.push(format!(
                    "cannot list the processes of `{}`: {e}",
                    view.job.name
                ));
            }
        }
    }
    let Some(spec) = rec.scan_spec() else {
        return;
    };
    match members::run_members(&spec, &[me, rec.pid], false, Some(deadline)) {
        Ok(found) => {
            view.unmeasurable |= !found.unreadable.is_empty() || !found.exiting.is_empty();
            for m in found.members {
                let counters = Counters {
                    cpu_ticks: m.stat.cpu_ticks,
                    io_bytes: procfs::io_bytes(m.id.pid),
                };
                push(m.id, Some(counters), out);
            }
        }
        Err(e) => {
            view.unmeasurable = true;
            errors.push(format!(
                "cannot list the processes of `{}`: {e}",
                view.job.name
            ));
        }
    }
}

/// The record of the live run of `job` that carries `token`, unless it is
/// a run of another PID namespace, whose pids are not ours to look at.
fn live_record(job: &Job, token: &str) -> Option<Record> {
    let rec = LockFile::open(&job.lock)
        .ok()?
        .inspect()
        .ok()
        .flatten()?
        .record
        .ok()?;
    let foreign_ns = rec
        .pidns
        .is_some_and(|ns| procfs::own_pidns().is_some_and(|ours| ours != ns));
    (rec.token.as_deref() == Some(token) && !foreign_ns).then_some(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_another_process_names_is_resolved_from_cached_names_or_as_written() {
        let d = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(d.path()).unwrap();
        fs::create_dir(base.join("real")).unwrap();
        std::os::unix::fs::symlink("real", base.join("link")).unwrap();
        // Just made: its names are cached, its symlink resolved.
        assert_eq!(
            canonical_theirs(Path::new("link/j.lock"), &base),
            base.join("real/j.lock")
        );
        assert_eq!(
            canonical_theirs(&base.join("real/../link/./j.lock"), Path::new("/")),
            base.join("real/j.lock")
        );
        // Names the kernel does not know: as written, lexically.
        assert_eq!(
            canonical_theirs(Path::new("gone/../x/./y/j.lock"), &base),
            base.join("x/y/j.lock")
        );
    }
}
