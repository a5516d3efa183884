//! The agent thread's SIGPIPE: blocked, and a pending one taken.

/// The SIGPIPE set.
fn sigpipe() -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is a valid argument to sigemptyset, which initialises it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        set
    }
}

/// Blocks SIGPIPE on the calling thread (and the threads it starts from then on).
pub fn block_sigpipe() {
    let set = sigpipe();
    // SAFETY: a signal set local to this call, changing only this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Takes a SIGPIPE pending on the calling thread, where SIGPIPE is blocked.
pub fn clear_pending_sigpipe() {
    let set = sigpipe();
    // SAFETY: local signal sets and a zero timeout; sigtimedwait only takes SIGPIPE if pending,
    // and it is blocked on this thread, as sigtimedwait requires.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        if libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGPIPE) == 1 {
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
        }
    }
}
