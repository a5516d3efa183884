//! File descriptors the renewal handles: the released library's leftovers, and the PMI
//! connection a new generation finds under the number `PMI_FD` names.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::raw::c_int;

/// Closes descriptor `fd`, one the released library left open (its shared memory): nothing of
/// that generation uses it any more, and no Rust object owns it.
pub fn close_leftover(fd: c_int) {
    // SAFETY: closing a descriptor has no memory effects; the caller names one only the
    // released library held.
    unsafe { libc::close(fd) };
}

/// A connected pair of Unix stream sockets, close-on-exec.
pub fn socketpair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: socketpair just made both descriptors, and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Leaves `fd` open for good under its own number, without close-on-exec.
pub fn keep_open(fd: OwnedFd) {
    let fd = fd.into_raw_fd();
    // SAFETY: clearing the flags of a descriptor we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
}

/// `dup2` of `fd` onto the number `target` (the copy without close-on-exec); `fd` stays ours.
pub fn dup_onto(fd: &OwnedFd, target: c_int) -> std::io::Result<()> {
    // SAFETY: dup2 of a descriptor we own onto a number the caller chose for it.
    if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
