//! A Unix socket's server, checked before anything is sent to it.
//!
//! A socket is a name in a directory: whoever may create names there can
//! listen on it before the server does, and would then be sent the
//! startup packet and the password (upstream PostgreSQL's default socket
//! directory is `/tmp`). So onlyone connects a store's Unix socket itself,
//! reads who listens on it (`SO_PEERCRED`, on that very connection), and
//! only then hands the connection to the driver; a refused peer is sent
//! nothing at all:
//!
//! - With `requirepeer=USER` (libpq's keyword, in the URL or
//!   `PGREQUIREPEER`), the peer's user must be USER, by name, as libpq
//!   checks it (and, as in libpq, it says nothing of a TCP host).
//! - Without it, a peer that is root or the caller is trusted. Another is
//!   trusted only where no one else could have listened first: every
//!   directory on the socket's path (the links followed included) is
//!   root's, the caller's or the peer's, and no one else may write in it
//!   (its group only when that is the peer's group, as Debian's
//!   `/run/postgresql`, `postgres:postgres 2775`); and every link on the
//!   way is root's, the caller's or the peer's. The sticky bit does not
//!   count: it keeps others from replacing a name, not from taking one
//!   first. A directory of the peer's own under `/tmp` is refused too:
//!   whoever made it first owns it.
//!
//! The path is judged after the connection is made, on what the directories
//! are then: only accounts the rule trusts could have changed it in
//! between, so what is judged is what was connected.

use std::path::{Path, PathBuf};

use tokio::net::UnixStream;

use crate::walk::{Seen, Walked};

/// Who listens on a socket, as `SO_PEERCRED` says.
#[derive(Debug, Clone, Copy)]
pub(super) struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

/// The socket of a server listening in `dir` on `port`, as libpq names it.
pub(super) fn socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

/// Connects to `socket`, then refuses (`Err(Ok(why))`) a peer the module
/// docs do not trust; `Err(Err(e))` when it cannot be reached.
pub(super) async fn connect(
    socket: &Path,
    require: Option<&str>,
) -> Result<UnixStream, Result<String, std::io::Error>> {
    let stream = UnixStream::connect(socket).await.map_err(Err)?;
    let cred = stream.peer_cred().map_err(Err)?;
    let peer = Peer {
        uid: cred.uid(),
        gid: cred.gid(),
        pid: cred.pid(),
    };
    let me = rustix::process::geteuid().as_raw();
    match refusal(socket, peer, require, me, |dir| {
        crate::walk::walk(dir, &|_| true).map_err(|e| e.to_string())
    }) {
        Some(why) => Err(Ok(why)),
        None => Ok(stream),
    }
}

/// Why the peer of `socket` is not trusted (see the module docs), or
/// `None`; `walk` walks the socket's directory.
pub(super) fn refusal(
    socket: &Path,
    peer: Peer,
    require: Option<&str>,
    me: u32,
    walk: impl FnOnce(&Path) -> Result<Walked, String>,
) -> Option<String> {
    let who = describe(peer);
    let s = socket.display();
    if let Some(want) = require {
        if crate::sys::user_name(peer.uid).as_deref() == Some(want) {
            return None;
        }
        return Some(format!(
            "the socket `{s}` is served by {who}, not by {want} as requirepeer={want} asks, so \
             nothing was sent to it (no password): another account may be listening in the \
             server's place; find which server should listen there (its \
             unix_socket_directories), or name its user in requirepeer"
        ));
    }
    if peer.uid == 0 || peer.uid == me {
        return None;
    }
    let dir = socket.parent().unwrap_or(Path::new("/"));
    let why = match walk(dir) {
        Ok(w) => open_to_others(&w, peer, me)?,
        Err(e) => format!("who may write on its path cannot be told ({e})"),
    };
    Some(format!(
        "the socket `{s}` is served by {who}, neither root nor you ({}), and {why}, so any \
         account could have listened there first to be sent the password; nothing was sent. \
         Name the server's user with requirepeer=USER in the URL (or PGREQUIREPEER; postgres \
         on most systems), or have the server listen in a directory only its user can write \
         (unix_socket_directories)",
        crate::text::user_name(me)
    ))
}

/// The first directory or link on a socket's path that another account
/// than root, `me` and the peer could have changed, said.
fn open_to_others(w: &Walked, peer: Peer, me: u32) -> Option<String> {
    let trusted = |uid: u32| uid == 0 || uid == me || uid == peer.uid;
    let owner = |d: &Seen| crate::text::user_name(d.uid);
    for link in &w.links {
        if !trusted(link.uid) {
            return Some(format!(
                "the symbolic link `{}` on its path is {}'s",
                link.path.display(),
                owner(link)
            ));
        }
    }
    for d in &w.dirs {
        let p = d.path.display();
        if !trusted(d.uid) {
            return Some(format!("`{p}` on its path is {}'s", owner(d)));
        }
        if d.mode & 0o002 != 0 {
            return Some(format!(
                "anyone may write in `{p}` on its path (mode {:04o})",
                d.mode & 0o7777
            ));
        }
        if d.mode & 0o020 != 0 && d.gid != peer.gid && d.gid != 0 {
            return Some(format!(
                "group {} may write in `{p}` on its path (mode {:04o}), and it is not the \
                 server's",
                d.gid,
                d.mode & 0o7777
            ));
        }
    }
    None
}

/// "nobody (uid 65534, pid 812)".
fn describe(peer: Peer) -> String {
    let pid = peer.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
    format!(
        "{} (uid {}{pid})",
        crate::text::user_name(peer.uid),
        peer.uid
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(path: &str, uid: u32, gid: u32, mode: u32) -> Seen {
        Seen {
            path: path.into(),
            uid,
            gid,
            mode: libc::S_IFDIR | mode,
        }
    }

    fn walked(dirs: Vec<Seen>, links: Vec<Seen>) -> Walked {
        Walked {
            fd: rustix::fs::open("/", rustix::fs::OFlags::PATH, rustix::fs::Mode::empty()).unwrap(),
            dirs,
            links,
        }
    }

    const ME: u32 = 1000;
    const PG: Peer = Peer {
        uid: 101,
        gid: 104,
        pid: Some(7),
    };

    fn judge(
        dirs: Vec<Seen>,
        links: Vec<Seen>,
        peer: Peer,
        require: Option<&str>,
    ) -> Option<String> {
        let sock = Path::new("/d/.s.PGSQL.5432");
        refusal(sock, peer, require, ME, |_| Ok(walked(dirs, links)))
    }

    /// Who may have listened first decides: a server's own directory (and
    /// Debian's group-writable one) is trusted; `/tmp`, a directory of
    /// the server's in `/tmp`, another account's directory or link on the
    /// way are not; root and the caller are trusted anywhere; requirepeer
    /// decides alone.
    #[test]
    fn a_socket_is_trusted_only_where_no_one_else_could_listen_first() {
        let root = dir("/", 0, 0, 0o755);
        let run = dir("/run", 0, 0, 0o755);
        let tmp = dir("/tmp", 0, 0, 0o1777);
        let own = || {
            vec![
                root.clone(),
                run.clone(),
                dir("/run/postgresql", 101, 104, 0o2775),
            ]
        };
        assert_eq!(judge(own(), vec![], PG, None), None);
        let why = judge(vec![root.clone(), tmp.clone()], vec![], PG, None).unwrap();
        assert!(
            why.contains("anyone may write in `/tmp` on its path (mode 1777)"),
            "{why}"
        );
        assert!(
            why.contains("`/d/.s.PGSQL.5432`") && why.contains("requirepeer=USER"),
            "{why}"
        );
        let squat = vec![root.clone(), tmp.clone(), dir("/tmp/pg", 101, 104, 0o700)];
        assert!(judge(squat, vec![], PG, None).unwrap().contains("`/tmp`"));
        let theirs = vec![root.clone(), dir("/home/alice", 1001, 1001, 0o755)];
        let why = judge(theirs, vec![], PG, None).unwrap();
        assert!(why.contains("`/home/alice` on its path is"), "{why}");
        let grouped = vec![root.clone(), dir("/srv", 0, 50, 0o775)];
        assert!(
            judge(grouped, vec![], PG, None)
                .unwrap()
                .contains("group 50")
        );
        let link = Seen {
            path: "/run/pg".into(),
            uid: 1001,
            gid: 1001,
            mode: libc::S_IFLNK | 0o777,
        };
        let why = judge(own(), vec![link], PG, None).unwrap();
        assert!(why.contains("the symbolic link `/run/pg`"), "{why}");
        for trusted in [0, ME] {
            let peer = Peer { uid: trusted, ..PG };
            assert_eq!(
                judge(vec![root.clone(), tmp.clone()], vec![], peer, None),
                None
            );
        }
        // requirepeer decides alone, by name.
        let nobody = Peer {
            uid: 65534,
            gid: 65534,
            pid: None,
        };
        if let Some(named) = crate::sys::user_name(65534) {
            assert_eq!(judge(vec![tmp.clone()], vec![], nobody, Some(&named)), None);
        }
        let why = judge(own(), vec![], nobody, Some("postgres")).unwrap();
        assert!(
            why.contains("not by postgres as requirepeer=postgres asks"),
            "{why}"
        );
        let root_peer = Peer { uid: 0, ..nobody };
        assert!(judge(own(), vec![], root_peer, Some("postgres")).is_some());
    }
}
