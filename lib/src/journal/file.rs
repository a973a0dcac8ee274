//! The journal's file: where a lock's journal is ([`Journal::of`],
//! [`Journal::at`]), how an event is appended to it and how it rotates
//! ([`Journal::append`]), and how both generations (and an earlier
//! version's beside the lock, when believed) are read back
//! ([`Journal::events`], [`Journal::history`]). The rules are `journal`'s
//! docs: the owner's file, rotation, nothing waits forever, reading.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FlockOperation, Mode as FsMode, OFlags};
use rustix::io::Errno;

use super::event::{MAX_LINE, sane_duration, sane_time};
use super::history::Pairing;
use super::{Event, EventLog, History};
use crate::lock::LockFile;
use crate::state::StateDir;

/// The size past which the journal is rotated: with the older generation,
/// a journal keeps at most about twice this much (some 30,000 events).
pub const ROTATE_AT: u64 = 4 << 20;

/// The most of a generation that is read: its last this many bytes (a
/// journal rotates long before; one that did not is someone else's doing).
pub(crate) const MAX_READ: u64 = 8 * ROTATE_AT;

/// The longest wait for a `flock` another process holds on a journal (see
/// "Nothing waits forever" in `journal`'s docs).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(1);

/// The mode of a journal: its owner's.
const MODE: u32 = 0o600;

/// The file of the state directory whose `flock` makes one rotator at a
/// time.
const ROTATION_GUARD: &str = ".onlyone-rotation";

impl EventLog for Journal {
    fn append(&self, ev: &Event) -> io::Result<()> {
        Journal::append(self, ev)
    }

    fn describe(&self) -> String {
        format!("the journal `{}`", self.path().display())
    }
}

/// A lock's journal (see `journal`'s docs).
#[derive(Debug, Clone)]
pub struct Journal {
    state: StateDir,
    name: OsString,
    older: OsString,
    /// The lock, when its directory exists: an earlier version's journal
    /// is read there.
    lock: Option<LockFile>,
    legacy: OsString,
    legacy_older: OsString,
    deadline: Option<Instant>,
    lock_path: std::path::PathBuf,
    on_set_aside: Option<Notice>,
}

/// An earlier version's journal beside a lock that is not read (see "An
/// earlier version's journal" in `journal`'s docs): which file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetAside {
    /// The file.
    pub path: std::path::PathBuf,
    /// Why it is not believed.
    pub why: String,
}

impl std::fmt::Display for SetAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}`, an earlier version's journal beside the lock, is not read: {}",
            self.path.display(),
            self.why
        )
    }
}

/// What [`Journal::on_set_aside`] calls.
#[derive(Clone)]
struct Notice(std::sync::Arc<dyn Fn(&SetAside) + Send + Sync>);

impl std::fmt::Debug for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notice")
    }
}

impl Journal {
    /// The journal of `lock` in the state directory `state`: every wait
    /// on its behalf ends by the lock handle's deadline too
    /// ([`LockFile::with_deadline`]).
    pub fn of(lock: &LockFile, state: &StateDir) -> Journal {
        let mut j = Journal::named(lock.path(), state);
        j.lock = Some(lock.clone());
        j.deadline = lock.deadline();
        j
    }

    /// The journal of the lock file `lock`, whether or not the lock or
    /// its directory exists (`/run` after a reboot).
    pub fn at(lock: &std::path::Path, state: &StateDir) -> Journal {
        let mut j = Journal::named(lock, state);
        j.lock = LockFile::open(lock).ok();
        j
    }

    fn named(lock: &std::path::Path, state: &StateDir) -> Journal {
        let (name, older) = crate::state::journal_name(lock);
        let mut legacy = lock.file_name().unwrap_or_default().to_owned();
        legacy.push(".journal");
        let mut legacy_older = legacy.clone();
        legacy_older.push(".1");
        Journal {
            state: state.clone(),
            name,
            older,
            lock: None,
            legacy,
            legacy_older,
            deadline: None,
            lock_path: lock.to_owned(),
            on_set_aside: None,
        }
    }

    /// Calls `notice` for each earlier version's journal beside the lock
    /// that a read sets aside (see [`SetAside`]).
    pub fn on_set_aside(mut self, notice: impl Fn(&SetAside) + Send + Sync + 'static) -> Journal {
        self.on_set_aside = Some(Notice(std::sync::Arc::new(notice)));
        self
    }

    /// The path of the lock file whose journal this is.
    pub fn lock_path(&self) -> &std::path::Path {
        &self.lock_path
    }

    /// The journal's path, in the state directory.
    pub fn path(&self) -> std::path::PathBuf {
        self.state.path().join(&self.name)
    }

    /// Where an earlier version kept it, beside the lock (read, never
    /// written).
    pub fn legacy_path(&self) -> Option<std::path::PathBuf> {
        self.lock.as_ref().map(|l| l.dir().join(&self.legacy))
    }

    /// Appends one event: one `write(2)` of one line (see `journal`'s docs).
    /// Every wait is bounded by a second and the lock handle's
    /// deadline.
    pub fn append(&self, ev: &Event) -> io::Result<()> {
        let line = ev.to_line();
        let dir = self.state.writable()?;
        let until = self.until();
        // A writer that opened a generation just removed by a rotation
        // opens the journal again; a rotation is rare, so a few tries do.
        for _ in 0..8 {
            let (fd, st) = open_regular(
                dir,
                &self.name,
                OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE,
                MODE,
            )?;
            owned_by_us(&st)?;
            if st.st_mode & 0o777 != MODE && st.st_nlink == 1 {
                // 0600 whatever the umask made it (never a file with
                // another name: it would be that file's mode too).
                let _ = rustix::fs::fchmod(&fd, FsMode::from_raw_mode(MODE));
            }
            if st.st_mode & 0o077 != 0 {
                // Ours, but readable by others: the older generation is too.
                self.tighten(dir, &self.older);
            }
            if let Some(lock) = &self.lock
                && st.st_size == 0
            {
                // This user's first event here (the upgrade): an earlier
                // version's journal beside the lock, readable by others, is
                // never written again, but its secrets are kept. Once, not
                // on every append.
                self.tighten(lock.dir_fd(), &self.legacy);
                self.tighten(lock.dir_fd(), &self.legacy_older);
            }
            if !flock_until(&fd, FlockOperation::NonBlockingLockShared, until)? {
                return Err(io::Error::other(
                    "another process holds a lock on it (`fuser -v` on it names the process); \
                     this event is not written",
                ));
            }
            let st = rustix::fs::fstat(&fd)?;
            if st.st_nlink == 0 {
                continue;
            }
            write_all(fd.as_fd(), &line)?;
            // A rotation that ran out of patience may have removed it
            // after all: then the line goes to the journal in its place.
            if rustix::fs::fstat(&fd)?.st_nlink == 0 {
                continue;
            }
            drop(fd);
            if st.st_size as u64 + line.len() as u64 > ROTATE_AT {
                return self.rotate(dir).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("the event is written, but the journal could not be rotated: {e}"),
                    )
                });
            }
            return Ok(());
        }
        Err(io::Error::other("the journal kept being rotated away"))
    }

    /// When a wait on this journal's behalf ends: [`LOCK_WAIT`] from now,
    /// or the lock handle's deadline if that is sooner.
    fn until(&self) -> Instant {
        let bound = Instant::now() + LOCK_WAIT;
        self.deadline.map_or(bound, |d| d.min(bound))
    }

    /// Makes a generation of ours that others can read its owner's, by
    /// descriptor (best effort: it is tightened again on the next try).
    /// Only a file with no other name: in a directory another account may
    /// write in (an earlier version's journal beside a lock), a hard link
    /// of this user's file of another account's choosing (`/etc/passwd`,
    /// where hard links are not protected) may have that name, and the
    /// mode is the file's, whatever name it is changed by. A file with one
    /// name is no other file.
    fn tighten(&self, dir: BorrowedFd<'_>, name: &OsStr) {
        if let Ok((fd, st)) = open_regular(dir, name, OFlags::RDONLY, 0)
            && owned_by_us(&st).is_ok()
            && st.st_mode & 0o077 != 0
            && st.st_nlink == 1
        {
            let _ = rustix::fs::fchmod(&fd, FsMode::from_raw_mode(MODE));
        }
    }

    /// Renames the journal to its older generation, if it is still past
    /// [`ROTATE_AT`]: one rotator at a time (a `flock` on the state
    /// directory), after whoever is still appending to the generation it
    /// removes, waited for until [`Journal::until`] (see `journal`'s docs).
    fn rotate(&self, dir: BorrowedFd<'_>) -> io::Result<()> {
        let until = self.until();
        // A file of its own (0600), that no other account can open, let
        // alone hold a flock on.
        let (guard, st) = open_regular(
            dir,
            OsStr::new(ROTATION_GUARD),
            OFlags::RDONLY | OFlags::CREATE,
            MODE,
        )?;
        owned_by_us(&st)?;
        if !flock_until(&guard, FlockOperation::NonBlockingLockExclusive, until)? {
            return Err(io::Error::other(
                "another process of this user's is rotating a journal of the state directory",
            ));
        }
        match rustix::fs::statat(dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if st.st_size as u64 > ROTATE_AT => {}
            Ok(_) | Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let old = match open_regular(dir, &self.older, OFlags::RDONLY, 0) {
            Ok((fd, _)) => {
                // Not in time: rotated all the same (`journal`'s docs say
                // what that risks, and why it is next to nothing).
                let _ = flock_until(&fd, FlockOperation::NonBlockingLockExclusive, until)?;
                Some(fd)
            }
            // Not there, or not a file (the rename replaces it).
            Err(_) => None,
        };
        rustix::fs::renameat(dir, &self.name, dir, &self.older)?;
        drop(old);
        Ok(())
    }

    /// Every event, oldest first: the older generation, then the current
    /// one, in the order they were appended.
    pub fn events(&self) -> io::Result<Vec<Event>> {
        let mut out = Vec::new();
        self.each_generation(|lines| parse_lines(lines, &mut out), Some(&mut Vec::new()))?;
        Ok(out)
    }

    /// Every generation, oldest first: the two beside the lock (an earlier
    /// version's, when they are believed), then the two in the state
    /// directory. An earlier version's set aside is told (to
    /// [`Journal::on_set_aside`]) and kept in `set_aside`; with `None`,
    /// passed over without a word.
    pub(super) fn each_generation(
        &self,
        mut f: impl FnMut(&[u8]),
        mut set_aside: Option<&mut Vec<SetAside>>,
    ) -> io::Result<()> {
        if let Some(lock) = &self.lock {
            for name in [&self.legacy_older, &self.legacy] {
                let path = lock.dir().join(name);
                let in_place = |e: io::Error| {
                    io::Error::new(
                        e.kind(),
                        format!("{e} (`{}`, an earlier version's journal)", path.display()),
                    )
                };
                let Some((file, st)) = self.open(lock.dir_fd(), name).map_err(in_place)? else {
                    continue;
                };
                if let Some(why) = not_believed(&st) {
                    if let Some(set_aside) = set_aside.as_deref_mut() {
                        let aside = SetAside { path, why };
                        if let Some(Notice(notice)) = &self.on_set_aside {
                            notice(&aside);
                        }
                        set_aside.push(aside);
                    }
                    continue;
                }
                read_chunks(file, st.st_size as u64, &mut f).map_err(in_place)?;
            }
        }
        if let Some(dir) = self.state.readable()? {
            for name in [&self.older, &self.name] {
                if let Some((file, st)) = self.open(dir, name)? {
                    read_chunks(file, st.st_size as u64, &mut f)?;
                }
            }
        }
        Ok(())
    }

    /// The runs (see [`History`]): both generations read and paired
    /// line by line, without an [`Event`] for each.
    pub fn history(&self) -> io::Result<History> {
        let mut p = Pairing::default();
        let mut set_aside = Vec::new();
        self.each_generation(|lines| p.add_lines(lines), Some(&mut set_aside))?;
        let mut h = p.into_history();
        h.set_aside = set_aside;
        Ok(h)
    }

    /// Opens a generation for reading: `None` when it does not exist.
    fn open(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
    ) -> io::Result<Option<(std::fs::File, rustix::fs::Stat)>> {
        match open_regular(dir, name, OFlags::RDONLY, 0) {
            Ok((fd, st)) => Ok(Some((std::fs::File::from(fd), st))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                Err(self.unreadable(dir, name, e))
            }
            Err(e) => Err(e),
        }
    }

    /// Why a generation cannot be read, when it is another user's.
    fn unreadable(&self, dir: BorrowedFd<'_>, name: &OsStr, e: io::Error) -> io::Error {
        match crate::walk::stat_entry(dir, name) {
            Ok(st) if st.st_uid != rustix::process::geteuid().as_raw() => io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "permission denied: it is {}'s (mode {:04o}); a journal can hold \
                         secrets from command lines, so only its owner (and root) can read it",
                    crate::text::user_name(st.st_uid),
                    st.st_mode & 0o7777
                ),
            ),
            _ => e,
        }
    }
}

/// Reads a generation in chunks, handing each run of complete lines to
/// `f`: a journal of many megabytes costs a small buffer (page faults are
/// most of what reading costs otherwise; every fire scans its journal for
/// a kept schedule). The buffer starts at [`FIRST_CHUNK`] and grows, up
/// to [`CHUNK`], only for a line it cannot hold. Only the last
/// [`MAX_READ`] bytes are read; a line longer than [`CHUNK`] is dropped
/// whole.
fn read_chunks(mut file: std::fs::File, size: u64, f: &mut impl FnMut(&[u8])) -> io::Result<()> {
    // Past the cap, reading starts mid-line: that line is dropped.
    let mut discarding = false;
    if size > MAX_READ {
        io::Seek::seek(&mut file, io::SeekFrom::Start(size - MAX_READ))?;
        discarding = true;
    }
    let mut buf = vec![0u8; FIRST_CHUNK];
    let mut filled = 0;
    loop {
        let n = match io::Read::read(&mut file, &mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        filled += n;
        let mut start = 0;
        if discarding {
            match buf[..filled].iter().position(|&b| b == b'\n') {
                Some(i) => {
                    start = i + 1;
                    discarding = false;
                }
                None => filled = 0,
            }
        }
        let end = buf[start..filled]
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|i| start + i + 1);
        match end {
            Some(end) => {
                f(&buf[start..end]);
                buf.copy_within(end..filled, 0);
                filled -= end;
            }
            // A line the buffer cannot hold: room for it, up to CHUNK.
            None if filled == buf.len() && buf.len() < CHUNK => {
                buf.copy_within(start..filled, 0);
                filled -= start;
                buf.resize((buf.len() * 2).min(CHUNK), 0);
            }
            // A full buffer without a newline is no event: dropped, up
            // to the newline that ends it.
            None if filled == buf.len() => {
                filled = 0;
                discarding = true;
            }
            None => {
                buf.copy_within(start..filled, 0);
                filled -= start;
            }
        }
        if n == 0 {
            return Ok(());
        }
    }
}

/// How much of a journal is read at a time, at most: the longest line
/// read.
const CHUNK: usize = 256 * 1024;

/// How much of a journal is read at a time, at first: many events' lines
/// (an event is at most 2,048 bytes), in four pages.
const FIRST_CHUNK: usize = 16 * 1024;

/// Opens `name` in the directory `dir` as a regular file, never following
/// a symbolic link and never blocking (a FIFO in its place would hang an
/// open without `O_NONBLOCK`): a file in a lock directory is input, which
/// another account may have put there. Refused, anything else says what it
/// is and that it must go.
pub(crate) fn open_regular(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlags,
    mode: u32,
) -> io::Result<(OwnedFd, rustix::fs::Stat)> {
    let flags = flags | OFlags::NONBLOCK | OFlags::NOCTTY;
    // Never into a file system mounted on the name (`EXDEV`): another
    // account may have mounted one whose server never answers.
    let fd = match crate::walk::open_entry(dir, name, flags, FsMode::from_raw_mode(mode)) {
        Ok(fd) => fd,
        Err(Errno::XDEV) => return Err(mounted_on()),
        // Refused (a link: `ELOOP`, or `EACCES` when creating; a FIFO
        // without a reader: `ENXIO`): say what is there.
        Err(e) => {
            return Err(match crate::walk::stat_entry(dir, name) {
                Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFREG => not_a_file(st.st_mode),
                _ => e.into(),
            });
        }
    };
    let st = rustix::fs::fstat(&fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(not_a_file(st.st_mode));
    }
    Ok((fd, st))
}

/// Says that a file system is mounted on the name, which onlyone never
/// looks into.
fn mounted_on() -> io::Error {
    io::Error::other(
        "a file system is mounted on it, and onlyone never looks into one there (its server \
         could leave every look waiting for ever): unmount it (sudo umount -l) and remove it",
    )
}

/// Says what a file of `mode` is, and that it must go.
fn not_a_file(mode: u32) -> io::Error {
    let what = match mode & libc::S_IFMT {
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFDIR => "a directory",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        _ => "something else",
    };
    io::Error::other(format!(
        "it is {what}, not a regular file, and onlyone opens nothing else there: remove it"
    ))
}

/// A journal is written only by its owner: root's command lines never go
/// into a file another user owns (and can read).
fn owned_by_us(st: &rustix::fs::Stat) -> io::Result<()> {
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid == me {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "it belongs to {}, not to {}: onlyone writes only its own journals (remove it)",
            crate::text::user_name(st.st_uid),
            crate::text::user_name(me)
        ),
    ))
}

/// Why an earlier version's journal beside a lock is not believed (see
/// "An earlier version's journal" in `journal`'s docs): `None` when it is
/// the caller's or root's, no one else may write to it, and it has no
/// other name.
fn not_believed(st: &rustix::fs::Stat) -> Option<String> {
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me && st.st_uid != 0 {
        return Some(format!(
            "it is {}'s, not yours ({}) or root's, and anyone who may write in the lock's \
             directory could have made it; remove it",
            crate::text::user_name(st.st_uid),
            crate::text::user_name(me)
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Some(format!(
            "others may write to it (mode {:04o}), so anyone could have added to it; make it \
             yours alone (chmod go-w) if you trust what it holds, or remove it",
            st.st_mode & 0o7777
        ));
    }
    if st.st_nlink != 1 {
        return Some(format!(
            "it has {} names (hard links), so it may be another file; remove this one",
            st.st_nlink
        ));
    }
    None
}

/// Takes a `flock` without blocking, trying again until `until`: false
/// when it did not come in time.
fn flock_until(fd: &OwnedFd, op: FlockOperation, until: Instant) -> io::Result<bool> {
    let mut pause = Duration::from_millis(1);
    loop {
        match rustix::fs::flock(fd, op) {
            Ok(()) => return Ok(true),
            Err(Errno::WOULDBLOCK | Errno::INTR) => {
                let now = Instant::now();
                if now >= until {
                    return Ok(false);
                }
                std::thread::sleep(pause.min(until - now));
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Writes all of `bytes` with one `write(2)` when it can (a regular file
/// takes a short line whole).
fn write_all(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    let mut off = 0;
    while off < bytes.len() {
        match rustix::io::write(fd, &bytes[off..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => off += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The events in `bytes`, appended to `out`: complete lines that parse
/// and are within bounds (see "Reading" in `journal`'s docs).
pub(super) fn parse_lines(bytes: &[u8], out: &mut Vec<Event>) {
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(i) => &bytes[..=i],
        None => return,
    };
    for line in complete.split(|&b| b == b'\n') {
        if line.is_empty() || line.len() > MAX_LINE {
            continue;
        }
        if let Ok(mut ev) = serde_json::from_slice::<Event>(line)
            && sane_time(ev.time)
        {
            ev.duration = sane_duration(ev.duration);
            ev.cpu_user = sane_duration(ev.cpu_user);
            ev.cpu_system = sane_duration(ev.cpu_system);
            out.push(ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{EventKind, Exit, Outcome, Usage};

    /// What a run used goes out in an `end` line (in base units) and comes
    /// back in its run, from a journal's bytes and from a store's lines; a
    /// value that is not one costs the usage, never the run's end.
    #[test]
    fn usage_survives_a_line_and_bad_values_cost_only_the_usage() {
        let used = Usage {
            user: Duration::from_micros(410_123),
            system: Duration::from_micros(20_005),
            max_rss: 86 << 20,
        };
        let mut start = Event::start(Some("t"), 7, Some("job"), "run");
        start.time = 1.0;
        let mut end = Event::end(
            Some("t"),
            7,
            Some("job"),
            Exit::Code(0),
            None,
            Duration::ZERO,
        )
        .with_usage(used);
        end.time = 2.0;
        let text: String = [&start, &end]
            .iter()
            .map(|e| String::from_utf8(e.to_line()).unwrap())
            .collect();
        assert!(text.contains(r#""cpu_user":0.410123,"cpu_system":0.020005,"max_rss":90177536"#));
        let mut events = Vec::new();
        parse_lines(text.as_bytes(), &mut events);
        let near = |a: Duration, b: Duration| a.abs_diff(b) < Duration::from_micros(1);
        for h in [History::from_lines(text.lines()), History::of(&events)] {
            let got = h.runs[0].usage.expect("the usage is read back");
            assert!(near(got.user, used.user) && near(got.system, used.system));
            assert_eq!(got.max_rss, used.max_rss);
        }
        for bad in [
            r#""cpu_user":-1,"cpu_system":0.1,"max_rss":5"#,
            r#""cpu_user":"x","cpu_system":0.1,"max_rss":5"#,
            r#""cpu_user":0.1,"cpu_system":1e300,"max_rss":5"#,
            r#""cpu_user":0.1,"cpu_system":0.1,"max_rss":-5"#,
            r#""cpu_user":0.1,"cpu_system":0.1,"max_rss":"big""#,
            r#""cpu_user":0.1,"cpu_system":0.1"#,
        ] {
            let h = History::from_lines([
                r#"{"v":1,"time":1,"event":"start","token":"t","pid":1}"#,
                &format!(r#"{{"v":1,"time":2,"event":"end","token":"t","pid":1,"exit":0,{bad}}}"#),
            ]);
            assert_eq!(h.runs[0].outcome, Outcome::Exited(0), "{bad}");
            assert_eq!(h.runs[0].usage, None, "{bad}");
        }
    }

    #[test]
    fn a_torn_last_line_and_foreign_lines_are_skipped() {
        let mut bytes = Event::of(EventKind::Start, "a", 1.0).to_line();
        bytes.extend_from_slice(b"not json\n{\"v\":1}\n");
        bytes.extend_from_slice(&Event::of(EventKind::Skip, "a", 2.0).to_line());
        let mut torn = Event::of(EventKind::Skip, "a", 3.0).to_line();
        torn.pop();
        bytes.extend_from_slice(&torn);
        let mut out = Vec::new();
        parse_lines(&bytes, &mut out);
        assert_eq!(out.len(), 2);
    }

    /// Every line up to [`CHUNK`] long reaches the reader whole, whether
    /// it fits the first buffer or not; a longer one is dropped whole, and
    /// the lines after it still arrive.
    #[test]
    fn lines_arrive_whole_whatever_the_buffer() {
        let long = |n: usize, c: u8| {
            let mut l = vec![c; n - 1];
            l.push(b'\n');
            l
        };
        let lines: Vec<Vec<u8>> = vec![
            b"a\n".to_vec(),
            long(FIRST_CHUNK - 3, b'b'),
            long(FIRST_CHUNK + 1, b'c'),
            b"d\n".to_vec(),
            long(CHUNK, b'e'),
            long(CHUNK + 1, b'f'),
            b"g\n".to_vec(),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        std::fs::write(&path, lines.concat()).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let size = file.metadata().unwrap().len();
        let mut got: Vec<u8> = Vec::new();
        read_chunks(file, size, &mut |l| got.extend_from_slice(l)).unwrap();
        let want: Vec<u8> = lines
            .iter()
            .filter(|l| l.len() <= CHUNK)
            .flatten()
            .copied()
            .collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "lines lost or cut");
    }

    /// An earlier version's journal of this user's is read; one that
    /// others may write to, or that has another name (a hard link could
    /// be any file of this user's), is set aside and said, and the rest is
    /// still read. (Another user's is the attack tests' part.)
    #[test]
    fn an_earlier_journal_is_read_only_when_believed() {
        use std::os::unix::fs::PermissionsExt;
        use std::sync::{Arc, Mutex};
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(dir.path().join("state"), crate::names::StateSource::Given);
        let lock = LockFile::open(dir.path().join("j.lock")).unwrap();
        let legacy = dir.path().join("j.lock.journal");
        let older = dir.path().join("j.lock.journal.1");
        std::fs::write(&older, Event::of(EventKind::Start, "a", 1.0).to_line()).unwrap();
        std::fs::write(&legacy, Event::of(EventKind::Start, "b", 2.0).to_line()).unwrap();
        let said: Arc<Mutex<Vec<SetAside>>> = Arc::default();
        let log = said.clone();
        let journal =
            Journal::of(&lock, &state).on_set_aside(move |s| log.lock().unwrap().push(s.clone()));
        let tokens = || -> Vec<String> {
            let events = journal.events().unwrap();
            events.into_iter().filter_map(|e| e.token).collect()
        };
        for mode in [0o600, 0o644] {
            std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(tokens(), ["a", "b"], "{mode:o}");
        }
        assert!(said.lock().unwrap().is_empty());
        for mode in [0o620, 0o602] {
            std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(tokens(), ["a"], "{mode:o}");
            let s = said.lock().unwrap().pop().unwrap();
            assert_eq!(s.path, legacy);
            assert!(s.why.contains(&format!("mode 0{mode:o}")), "{s}");
        }
        std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&older, dir.path().join("elsewhere")).unwrap();
        assert_eq!(tokens(), ["b"]);
        let s = said.lock().unwrap().pop().unwrap();
        assert_eq!(s.path, older);
        assert!(s.why.contains("2 names (hard links)"), "{s}");
        assert!(said.lock().unwrap().is_empty());
    }
}
