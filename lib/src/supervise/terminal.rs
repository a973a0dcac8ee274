//! The terminal: the command gets it when onlyone's process group is its
//! foreground group (whoever else is in the group: a script's shell too),
//! and job control (Ctrl-Z, `fg`, `bg`) stops and resumes the whole job.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::process::{Pid, Signal};

use crate::signal::signal_group;

/// The controlling terminal, if onlyone has one.
pub(super) fn controlling_terminal() -> Option<OwnedFd> {
    rustix::fs::open(
        "/dev/tty",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
}

/// The controlling terminal, when onlyone's process group is its
/// foreground group (whoever else is in the group).
pub(super) fn foreground_terminal() -> Option<OwnedFd> {
    let fd = controlling_terminal()?;
    let fg = rustix::termios::tcgetpgrp(&fd).ok()?;
    (fg == rustix::process::getpgrp()).then_some(fd)
}

/// True when `tty`'s foreground group is `group`.
pub(super) fn in_foreground(tty: BorrowedFd<'_>, group: Pid) -> bool {
    rustix::termios::tcgetpgrp(tty).ok() == Some(group)
}

/// Makes `pgrp` the terminal's foreground group without being stopped by
/// SIGTTOU (which a background caller would get).
pub(super) fn give_terminal(tty: BorrowedFd<'_>, pgrp: Pid) {
    crate::sys::with_blocked(Signal::TTOU.as_raw(), || {
        let _ = rustix::termios::tcsetpgrp(tty, pgrp);
    });
}

/// The command was stopped by job control (Ctrl-Z, or reading the
/// terminal from the background). Takes the terminal back if the command
/// holds it, and stops onlyone's own process group with SIGTSTP, as the
/// terminal would have stopped the job had the command been in it: the
/// shell that waits for the job (a script's shell too) sees it stopped. In
/// an orphaned group (no job-control shell above) the kernel discards the
/// SIGTSTP rather than leave a job stopped that nothing would continue:
/// onlyone then goes on at once. When continued (`fg`, `bg`), onlyone hands
/// the terminal back to the command if its group is in the foreground, and
/// continues the command.
pub(super) fn suspend_with(child: Pid) {
    let me = rustix::process::getpgrp();
    if let Some(tty) = controlling_terminal()
        && in_foreground(tty.as_fd(), child)
    {
        give_terminal(tty.as_fd(), me);
    }
    let _ = rustix::process::kill_process_group(me, Signal::TSTP);
    if let Some(tty) = foreground_terminal() {
        give_terminal(tty.as_fd(), child);
    }
    signal_group(child.as_raw_nonzero().get() as u32, Signal::CONT);
}
