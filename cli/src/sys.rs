//! Thin, checked wrappers over the system calls the keeper needs that `std` does not offer.
//! Every `unsafe` block of the crate outside `sockdiag` lives here.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A connected `SOCK_STREAM` unix socketpair, both ends close-on-exec.
pub fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    cvt(unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) })?;
    // SAFETY: on success both descriptors are freshly created and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A pipe `(read end, write end)`, both close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: on success both descriptors are freshly created and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Inode number of the object behind `fd` (what `/proc/PID/fd/N` shows as `socket:[INO]`).
pub fn inode(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: an all-zero `stat` is a valid value of a plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the duration of the borrow and `st` is writable.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_ino)
}

/// Duplicates `fd` to the lowest free number `>= min`, close-on-exec.
pub fn dup_at_least(fd: BorrowedFd<'_>, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a borrowed open fd creates a new descriptor we then own.
    let new = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
    // SAFETY: `new` was just created by the kernel for us.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Marks every inherited descriptor from 3 up close-on-exec, so that nothing the launcher leaked
/// into the keeper reaches the program or CRIU.
pub fn cloexec_inherited_fds() -> io::Result<()> {
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(fd) = entry?.file_name().to_string_lossy().parse::<RawFd>() else { continue };
        if fd < 3 {
            continue;
        }
        // SAFETY: F_GETFD/F_SETFD only change flags; a descriptor closed meanwhile (the one
        // read_dir itself used) just makes the call fail, which is ignored.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}

/// For `pre_exec` hooks: moves `from` to the number `to` (clearing close-on-exec). Only
/// async-signal-safe calls.
pub fn child_dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: dup2 is async-signal-safe; both numbers are plain integers.
    cvt(unsafe { libc::dup2(from, to) })?;
    Ok(())
}

/// For `pre_exec` hooks: marks every descriptor numbered `>= from` close-on-exec except those in
/// `keep` (at most 8). Async-signal-safe: raw `close_range(CLOSE_RANGE_CLOEXEC)` calls only.
pub fn child_cloexec_from(from: RawFd, keep: &[RawFd]) -> io::Result<()> {
    let mut sorted = [RawFd::MAX; 8];
    let n = keep.len().min(sorted.len());
    sorted[..n].copy_from_slice(&keep[..n]);
    sorted[..n].sort_unstable();
    let mut lo = from;
    for &k in &sorted[..n] {
        if k < lo {
            continue;
        }
        if k > lo {
            cloexec_range(lo as u32, (k - 1) as u32)?;
        }
        lo = k + 1;
    }
    cloexec_range(lo as u32, u32::MAX)
}

fn cloexec_range(first: u32, last: u32) -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags on this process's descriptors.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, CLOSE_RANGE_CLOEXEC) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// For `pre_exec` hooks: starts a new session so the program owns its session and process
/// group (CRIU then restores both without help from the caller's terminal).
pub fn child_setsid() -> io::Result<()> {
    // SAFETY: setsid has no memory effects.
    cvt(unsafe { libc::setsid() })?;
    Ok(())
}

/// For `pre_exec` hooks: the child is killed when the keeper (`parent`, its pid taken before
/// fork) dies: a launcher that kills the keeper with SIGKILL must leave neither the program nor
/// a CRIU behind. A keeper that died before the setting took effect ends the child here. CRIU
/// keeps this setting in the image; restoring with `--restore-sibling` makes the keeper the
/// restored program's parent again.
pub fn child_set_pdeathsig(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; async-signal-safe.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) })?;
    // SAFETY: getppid has no memory effects.
    let now = unsafe { libc::getppid() };
    // 0: the child is the first of a new PID namespace, its parent outside (no check possible).
    if now != parent && now != 0 {
        return Err(io::Error::other("the keeper died before its child could start"));
    }
    Ok(())
}

/// For `pre_exec` hooks: the program starts without address-space randomisation.
pub fn child_no_aslr() -> io::Result<()> {
    // SAFETY: personality with an integer argument; async-signal-safe.
    let cur = unsafe { libc::personality(0xffff_ffff) };
    cvt(cur)?;
    // SAFETY: as above.
    cvt(unsafe { libc::personality((cur as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong) })?;
    Ok(())
}

/// For `pre_exec` hooks: resets the signal mask and dispositions the keeper changed.
pub fn child_reset_signals() -> io::Result<()> {
    // SAFETY: sigset manipulation on a local set, sigprocmask and signal are async-signal-safe.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        for sig in [libc::SIGUSR1, libc::SIGUSR2, libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    Ok(())
}

/// Makes this process the reaper of its orphaned descendants (a restored program, whose
/// parent CRIU exits after `restore -d`, becomes our child).
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) })?;
    Ok(())
}

/// How a waited-for process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal(s) => write!(f, "signal {s} ({})", signal_name(*s)),
        }
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// Blocks until `pid` (a child of this process) ends; `None` if it is not our child (ECHILD).
pub fn wait_pid(pid: i32) -> io::Result<Option<Exit>> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local int.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Ok(None),
                _ => return Err(e),
            }
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Ok(Some(exit_from_status(status)));
        }
    }
}

/// A wait status of an ended process (exited or killed) as an `Exit`.
pub fn exit_from_status(status: libc::c_int) -> Exit {
    if libc::WIFSIGNALED(status) {
        Exit::Signal(libc::WTERMSIG(status))
    } else {
        Exit::Code(libc::WEXITSTATUS(status))
    }
}

/// Sends `sig` to `pid`. A process that is already gone is not an error.
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill has no memory effects.
    let r = unsafe { libc::kill(pid, sig) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Ok(());
        }
        return Err(e);
    }
    Ok(())
}

/// Ends this process by `sig` with its default action (so our parent sees the same death as
/// the program's), without a core dump. Falls back to `exit(128 + sig)`.
pub fn die_by_signal(sig: i32) -> ! {
    // SAFETY: resetting a disposition, unblocking and raising have no memory effects; the
    // zeroed rlimit disables core files for this process only.
    unsafe {
        let rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &rl);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig)
}

/// Blocks until `pid` (a child) has ended, leaving it to be reaped by a later wait.
pub fn wait_exited_no_reap(pid: i32) {
    loop {
        // SAFETY: waitid writes only into the zeroed siginfo it is given.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        if r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// A pidfd for `pid` (close-on-exec): it polls readable once the process has ended, and a
/// signal sent through it never reaches a later process that reuses the pid.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created by the kernel for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Takes ownership of descriptor `fd`, inherited from the parent at a number agreed on, if it is
/// open.
pub fn take_inherited(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: F_GETFD only reads the descriptor's flags.
    cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) }).ok()?;
    // SAFETY: the descriptor is open, and the caller's protocol gives it to this process alone.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `sig` through a pidfd. A process that has already ended is not an error.
pub fn pidfd_kill(fd: BorrowedFd<'_>, sig: i32) -> io::Result<()> {
    // SAFETY: pidfd_send_signal with an open descriptor, an integer and no siginfo.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), 0) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    Ok(())
}

/// Waits until one of `fds` polls readable (a pidfd: its process ended), at most `limit` (`None`:
/// without bound). The index of the first readable one, or `None` when the time ran out.
pub fn poll_readable(fds: &[BorrowedFd<'_>], limit: Option<std::time::Duration>) -> io::Result<Option<usize>> {
    let mut polled: Vec<libc::pollfd> = fds.iter().map(|f| libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    let ms = limit.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as libc::c_int);
    loop {
        // SAFETY: `polled` is a valid array of `polled.len()` pollfd structs for the kernel to fill.
        let r = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        return Ok(polled.iter().position(|p| p.revents != 0));
    }
}

/// The pid of the process at the other end of a connected unix socket (`SO_PEERCRED`).
pub fn peer_pid(sock: BorrowedFd<'_>) -> io::Result<i32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt fills at most `len` bytes of `cred`, a ucred that lives through the call.
    let r = unsafe { libc::getsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.pid)
}

/// The processes `tracer` ptraces (`TracerPid` of their /proc status).
pub fn tracees_of(tracer: i32) -> Vec<i32> {
    let traced_by = |pid: i32| -> Option<i32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status.lines().find_map(|l| l.strip_prefix("TracerPid:"))?.trim().parse().ok()
    };
    all_pids().filter(|&p| traced_by(p) == Some(tracer)).collect()
}

/// The parent pid of `pid`, from /proc.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields follow its last ')'.
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// The live children of this process.
pub fn own_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    all_pids().filter(|&p| parent_of(p) == Some(me)).collect()
}

/// The pids listed in /proc now (none when it cannot be read).
fn all_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc").into_iter().flatten().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
}

/// Every live process whose ancestry leads to `root` (root excluded).
fn descendants(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = all_pids().filter_map(|p| Some((p, parent_of(p)?))).collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parents.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    found.remove(0);
    found
}

/// Kills `root` and every process it forked. Each is stopped first, so none forks another
/// while the tree is collected; the main process is killed last (its helpers are its children
/// and would be reparented away from the tree once it is gone).
pub fn kill_tree(root: i32) {
    let _ = kill(root, libc::SIGSTOP);
    let mut tree: Vec<i32> = Vec::new();
    loop {
        let now = descendants(root);
        let new: Vec<i32> = now.into_iter().filter(|p| !tree.contains(p)).collect();
        if new.is_empty() {
            break;
        }
        for &p in &new {
            let _ = kill(p, libc::SIGSTOP);
        }
        tree.extend(new);
    }
    for &p in tree.iter().rev() {
        let _ = kill(p, libc::SIGKILL);
    }
    let _ = kill(root, libc::SIGKILL);
}

/// Whether a process or thread with this id exists.
pub fn pid_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// For `pre_exec` hooks: sets the file mode creation mask (async-signal-safe).
/// The file capabilities of `path` (its `security.capability` attribute, following symlinks):
/// `(permitted, effective)`, the permitted set as a 64-bit mask; `None` when it has none.
pub fn file_caps(path: &Path) -> io::Result<Option<(u64, bool)>> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = [0u8; 64];
    // SAFETY: both names are NUL-terminated strings and `buf` is writable for its length.
    let n = unsafe { libc::getxattr(c.as_ptr(), c"security.capability".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(parse_file_caps(&buf[..n as usize]))
}

/// Decodes a `vfs_cap_data` (revision 1, 2 or 3: magic_etc, then permitted/inheritable words).
pub fn parse_file_caps(b: &[u8]) -> Option<(u64, bool)> {
    let word = |i: usize| b.get(i * 4..i * 4 + 4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    let magic = word(0)?;
    let effective = magic & 1 != 0;
    let low = u64::from(word(1)?);
    let high = match magic & 0xFF00_0000 {
        0x0100_0000 => 0,
        _ => u64::from(word(3)?),
    };
    Some((low | high << 32, effective))
}

pub fn child_umask(mask: u32) -> io::Result<()> {
    // SAFETY: umask only changes a process attribute and cannot fail.
    unsafe { libc::umask(mask as libc::mode_t) };
    Ok(())
}

/// Flushes the filesystem holding `path` to stable storage (`syncfs(2)`).
pub fn syncfs(path: &Path) -> io::Result<()> {
    let f = std::fs::File::open(path)?;
    // SAFETY: syncfs on a descriptor that stays open for the call.
    cvt(unsafe { libc::syncfs(f.as_raw_fd()) })?;
    Ok(())
}

/// Random bytes from the kernel.
pub use mpicr_proto::coord::random_bytes;

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into the buffer.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Soft limit on open descriptors.
pub fn nofile_limit() -> u64 {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 1024;
    }
    rl.rlim_cur
}

/// `access(path, X_OK)`.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: `c` is a valid NUL-terminated string.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}
