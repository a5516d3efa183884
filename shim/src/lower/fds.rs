//! File descriptors: the released library's leftovers, the PMI
//! connection a new generation finds under the number `PMI_FD` names, the keeper's control
//! socket and the write tracker handed to it.

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

/// Takes descriptor `fd`, the control socket the keeper passed for this process's exclusive
/// use: made close-on-exec (the program's children must not inherit it), then owned.
pub fn adopt_socket(fd: c_int) -> std::os::unix::net::UnixStream {
    // SAFETY: F_GETFD/F_SETFD only change the flags of a descriptor number; on a number that is
    // not open they fail, and the failure shows when the socket is used.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
    // SAFETY: the keeper passed us this descriptor for our exclusive use, and nothing else in
    // the process owns it.
    unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) }
}

/// Which step of [`write_tracker`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UffdStep {
    /// userfaultfd(2) itself.
    Create,
    /// `UFFDIO_API` with `UFFD_FEATURE_WP_ASYNC`.
    Api,
}

/// A userfaultfd with `UFFD_FEATURE_WP_ASYNC` (Linux 6.7+), user-mode faults only (allowed
/// without privilege whatever `vm.unprivileged_userfaultfd` says).
pub fn write_tracker() -> Result<OwnedFd, (UffdStep, std::io::Error)> {
    const UFFD_USER_MODE_ONLY: libc::c_int = 1;
    const UFFD_API: u64 = 0xAA;
    const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
    // _IOWR(0xAA, 0x3F, struct uffdio_api)
    const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
    #[repr(C)]
    struct UffdioApi {
        api: u64,
        features: u64,
        ioctls: u64,
    }
    // SAFETY: userfaultfd(2) takes flags only and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY) };
    if fd < 0 {
        return Err((UffdStep::Create, std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor the kernel just created for us alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut api = UffdioApi { api: UFFD_API, features: UFFD_FEATURE_WP_ASYNC, ioctls: 0 };
    // SAFETY: UFFDIO_API reads and writes one struct uffdio_api, which `api` is (repr(C)).
    if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api as *mut UffdioApi) } != 0 {
        return Err((UffdStep::Api, std::io::Error::last_os_error()));
    }
    Ok(fd)
}
