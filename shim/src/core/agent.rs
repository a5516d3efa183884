//! The agent thread: talks to the keeper over the control socket and runs the checkpoint
//! protocol (see `mpicr_proto` for the message sequence). Without a keeper (plain LD_PRELOAD)
//! it never starts and the shim is pure interposition.
//!
//! Alignment state lives here because every collective consults it: while a checkpoint is in
//! progress (`ALIGNING`), a collective may start only if the coordinator's target for its
//! communicator allows it; the others wait on `CHANGED` until the checkpoint ends.

use crate::core::{checkpoint, renew};
use mpicr_proto::{FromAgent, Hello, ToAgent, CTL_FD_ENV};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static ALIGNING: AtomicBool = AtomicBool::new(false);
/// Targets per communicator id; `None` until the coordinator sent them.
static TARGETS: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);
static CHANGED: Condvar = Condvar::new();

/// May a collective numbered `next` start on communicator `gid`? (`try_start_collective`
/// counts it only if so.)
#[inline(always)]
pub fn may_start_collective(gid: u64, next: u64) -> bool {
    if !ALIGNING.load(Ordering::SeqCst) {
        return true;
    }
    let t = TARGETS.lock();
    let ok = match t.as_ref() {
        None => false,
        Some(m) => next <= m.get(&gid).copied().unwrap_or(0),
    };
    if ok {
        // The agent waits for counters to reach their targets.
        CHANGED.notify_all();
    }
    ok
}

/// Blocks a program thread until the checkpoint in progress changes what may start.
pub fn wait_until_collectives_may_start() {
    let mut t = TARGETS.lock();
    if ALIGNING.load(Ordering::Acquire) {
        CHANGED.wait_for(&mut t, Duration::from_millis(100));
    }
}

/// Program threads between reading `ALIGNING` as false and counting their collective.
static STARTING: AtomicUsize = AtomicUsize::new(0);

/// Counts a collective on a communicator with counters `c` and returns its number, or `None`
/// (nothing counted) while a checkpoint's alignment does not allow it yet. No lock unless
/// aligning: the count is an atomic, and `begin_alignment` waits for the threads that saw
/// "not aligning" to finish counting, so the agent's read of the counters that follows
/// includes every collective started without a target, and none that had to wait.
#[inline]
pub fn try_start_collective(c: &mpicr_virtid::CommCounters) -> Option<u64> {
    // A communicator of one process involves no other rank: its collectives can never
    // hold another rank back, so they run on (a rank may need them to reach a target).
    if c.alone() {
        return Some(c.start_collective());
    }
    STARTING.fetch_add(1, Ordering::SeqCst);
    if !ALIGNING.load(Ordering::SeqCst) {
        let n = c.start_collective();
        STARTING.fetch_sub(1, Ordering::Release);
        return Some(n);
    }
    STARTING.fetch_sub(1, Ordering::Release);
    let gid = c.gid();
    c.start_collective_if(|next| may_start_collective(gid, next))
}

/// Starts aligning: from now on collectives need a target. Returns once no thread is still
/// counting a collective it started without one (see `try_start_collective`).
pub(crate) fn begin_alignment() {
    *TARGETS.lock() = None;
    ALIGNING.store(true, Ordering::SeqCst);
    while STARTING.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
}

pub(crate) fn set_targets(t: HashMap<u64, u64>) {
    *TARGETS.lock() = Some(t);
    CHANGED.notify_all();
}

pub(crate) fn targets() -> HashMap<u64, u64> {
    TARGETS.lock().clone().unwrap_or_default()
}

/// Waits (bounded) for a change of the collective counters.
pub(crate) fn wait_for_progress(timeout: Duration) {
    let mut t = TARGETS.lock();
    CHANGED.wait_for(&mut t, timeout);
}

pub(crate) fn end_alignment() {
    ALIGNING.store(false, Ordering::SeqCst);
    *TARGETS.lock() = None;
    CHANGED.notify_all();
}

/// The writing half of the control connection (the C API sends requests on it too).
static CTL: OnceLock<Mutex<UnixStream>> = OnceLock::new();

pub(crate) fn send(msg: &FromAgent) -> std::io::Result<()> {
    let Some(ctl) = CTL.get() else { return Err(std::io::Error::other("not running under mpicr run")) };
    let w = ctl.lock();
    // MSG_NOSIGNAL: program threads send here too (the C API), and the program may not ignore
    // SIGPIPE; a keeper that went away must be an error, not the end of the program.
    mpicr_proto::send_on(&w, msg)
}

/// Is this process supervised by a keeper (so that checkpoints are possible)?
pub fn supervised() -> bool {
    CTL.get().is_some()
}

/// Starts the agent when the program runs under `mpicr run` (a control fd in the environment).
pub fn start_if_supervised() {
    let Some(fd) = std::env::var(CTL_FD_ENV).ok().and_then(|v| v.parse::<i32>().ok()) else { return };
    if CTL.get().is_some() {
        return;
    }
    // The control socket is for this process only: the program's children must inherit neither
    // the descriptor nor its number. (Removing the variable races only with a program thread
    // calling setenv/getenv during MPI_Init, which nothing sane does.)
    std::env::remove_var(CTL_FD_ENV);
    // SAFETY: F_GETFD/F_SETFD only change the flags of a descriptor number; on a number that is
    // not open they fail, and the failure shows below when the socket is used.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
    // SAFETY: the keeper passed us this descriptor for our exclusive use.
    let sock = unsafe { UnixStream::from_raw_fd(fd) };
    let reader = match sock.try_clone() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mpicr: control socket (fd {fd}) unusable: {e}; checkpoints are disabled");
            return;
        }
    };
    if CTL.set(Mutex::new(sock)).is_err() {
        return;
    }
    if let Err(e) = send_hello() {
        eprintln!("mpicr: cannot reach the keeper: {e}; checkpoints are disabled");
        return;
    }
    quiet_agent_panics();
    let spawned = std::thread::Builder::new().name(AGENT_THREAD.into()).spawn(move || serve(reader));
    if let Err(e) = spawned {
        eprintln!("mpicr: cannot start the agent thread: {e}; checkpoints are disabled");
    }
}

/// Tells the keeper who this rank is and how many renewals it has left (again after each one).
pub(crate) fn send_hello() -> std::io::Result<()> {
    let hello = Hello {
        rank: crate::core::kinds::comm::world_rank(),
        size: crate::core::kinds::comm::world_size(),
        pid: std::process::id(),
        library: crate::lower::current().path.display().to_string(),
        renew_strategy: renew::strategy().name().to_string(),
        renewals_left: renew::renewals_left(),
    };
    send(&FromAgent::Hello(hello))
}

fn serve(mut reader: UnixStream) {
    block_sigpipe();
    loop {
        let msg: ToAgent = match mpicr_proto::recv(&mut reader) {
            Ok(Some(m)) => m,
            // The keeper went away: the job is ending.
            Ok(None) | Err(_) => return,
        };
        match msg {
            ToAgent::Checkpoint { epoch, stop, state_path } => checkpoint::run(&mut reader, epoch, stop, &state_path),
            ToAgent::Abort { .. }
            | ToAgent::Resume { .. }
            | ToAgent::Targets { .. }
            | ToAgent::ExpectedRecvs { .. }
            | ToAgent::Release => {
                // Out of sequence: nothing in progress.
            }
        }
    }
}

/// Blocks SIGPIPE on the calling thread (the agent's): a write into a socket whose peer is gone
/// then fails with EPIPE instead of killing the program. That covers the agent's own sockets and
/// the renewed library's PMI client, whose `MPI_Init` runs on this thread (a PMI connection the
/// keeper never got makes the renewal fail with a message, not the rank die of a signal), and
/// the threads the library starts from it, which inherit the mask. Program threads keep theirs.
fn block_sigpipe() {
    // SAFETY: a signal set local to this call, changing only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Takes a SIGPIPE left pending on the agent thread by a write that failed with EPIPE (see
/// [`block_sigpipe`]), so that it is not carried along (nor into an image) for nothing.
pub(crate) fn clear_pending_sigpipe() {
    // SAFETY: local signal set and a zero timeout; sigtimedwait only takes SIGPIPE if pending,
    // and it is blocked on this thread, as sigtimedwait requires.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        let mut pending: libc::sigset_t = std::mem::zeroed();
        if libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGPIPE) == 1 {
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
        }
    }
}

/// Receives the next message during a checkpoint.
pub(crate) fn recv(reader: &mut UnixStream) -> Result<ToAgent, String> {
    match mpicr_proto::recv(reader) {
        Ok(Some(m)) => Ok(m),
        Ok(None) => Err("the keeper closed the control connection".into()),
        Err(e) => Err(format!("control connection: {e}")),
    }
}

/// Receives the next message during a checkpoint, waiting at most `limit`; `Ok(None)` when it
/// ran out. Only time this process runs counts: a slice of the wait never counts more than its
/// own length, so the time CRIU keeps the process frozen for a dump, or the time between a dump
/// and a restore (even on a host whose clock is far ahead), is not taken from the wait.
pub(crate) fn recv_within(reader: &mut UnixStream, limit: Duration) -> Result<Option<ToAgent>, String> {
    use std::os::fd::AsRawFd;
    const SLICE: Duration = Duration::from_millis(250);
    let mut waited = Duration::ZERO;
    loop {
        let slice = SLICE.min(limit.saturating_sub(waited));
        let mut pfd = libc::pollfd { fd: reader.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let t = Instant::now();
        // SAFETY: one pollfd, a local, on our own socket.
        let n = unsafe { libc::poll(&mut pfd, 1, slice.as_millis() as libc::c_int) };
        if n > 0 {
            // Data, or the keeper hung up: the read says which.
            return recv(reader).map(Some);
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(format!("control connection: {e}"));
            }
        }
        waited += Instant::now().saturating_duration_since(t).min(slice);
        if waited >= limit {
            return Ok(None);
        }
    }
}

/// The agent thread's name (its panics are reported to the keeper, not printed).
pub(crate) const AGENT_THREAD: &str = "mpicr-agent";

thread_local! {
    /// Where the agent thread last panicked (set by the hook, read by the panic boundary).
    static PANIC_AT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Panics of the agent thread are caught by its panic boundary (`checkpoint::run`), which
/// reports them to the keeper in one line: the default hook's lines on the program's stderr would
/// only add noise. Every other thread keeps the previous hook.
fn quiet_agent_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(AGENT_THREAD) {
                let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
                PANIC_AT.with(|p| *p.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// One line saying what a caught panic said, and where (when the hook saw it).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    let at = PANIC_AT.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let line = if at.is_empty() { msg } else { format!("{msg} (at {at})") };
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Set once the program entered MPI_Finalize: no checkpoint may start after that.
static FINALIZING: AtomicBool = AtomicBool::new(false);

/// Called by MPI_Finalize from inside the gate (so after any checkpoint in progress ended).
pub fn stop() {
    FINALIZING.store(true, Ordering::SeqCst);
}

pub(crate) fn finalizing() -> bool {
    FINALIZING.load(Ordering::SeqCst)
}

/// The program asks for a checkpoint (C API).
pub fn request_checkpoint(stop: bool) -> Result<(), String> {
    if !supervised() {
        return Err("not running under `mpicr run`".into());
    }
    send(&FromAgent::Request { stop }).map_err(|e| e.to_string())
}

/// Hands the keeper its end of a fresh PMI socketpair for lower-half generation `generation`.
pub(crate) fn send_pmi_connect(generation: u32, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    let Some(ctl) = CTL.get() else { return Err(std::io::Error::other("not running under mpicr run")) };
    let w = ctl.lock();
    mpicr_proto::send_with_fd(&w, &FromAgent::PmiConnect { generation }, fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recv_within_runs_out_then_delivers() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = Instant::now();
        assert!(recv_within(&mut a, Duration::from_millis(300)).unwrap().is_none());
        assert!(t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_secs(5));
        assert!(recv_within(&mut a, Duration::ZERO).unwrap().is_none());
        mpicr_proto::send(&mut b, &ToAgent::Release).unwrap();
        assert_eq!(recv_within(&mut a, Duration::from_secs(5)).unwrap(), Some(ToAgent::Release));
        drop(b);
        let e = recv_within(&mut a, Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("closed"), "{e}");
    }

    #[test]
    fn panic_messages_are_one_line() {
        let p = std::panic::catch_unwind(|| panic!("two\nlines {}", 1)).unwrap_err();
        assert_eq!(panic_message(&*p), "two lines 1");
        let p = std::panic::catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(panic_message(&*p), "unknown panic");
    }
}
