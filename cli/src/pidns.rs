//! Every program runs in a PID namespace of its own, under a small init (this binary, started as
//! `mpicr __pidns-init`). CRIU dumps the namespace from its init and restores it as a new
//! namespace, so the restored processes get their old ids *inside* it whatever runs on the node:
//! a restart never clashes with a live process. Without the namespace (no privilege to create
//! one, or with `MPICR_PIDNS=0`) restored processes need their old ids free in the node's
//! namespace.
//!
//! The init forwards the keeper's signals to the program (a namespace's init ignores every
//! signal it has no handler for, so the keeper cannot signal through it otherwise), reaps
//! orphans, and when the program ends writes its raw wait status into a pipe the keeper reads:
//! an init cannot die of an arbitrary signal, so its own exit status cannot carry the program's.

use crate::sys;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

/// The hidden first argument that makes `mpicr` the init of a program's namespace.
pub const INIT_ARG: &str = "__pidns-init";

/// Signals the init hands on to the program.
const FORWARDED: [libc::c_int; 9] =
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2, libc::SIGCONT, libc::SIGALRM, libc::SIGWINCH];

/// Whether `mpicr run` starts programs in a PID namespace: yes unless `MPICR_PIDNS=0` (and
/// where the namespace cannot be created, see [`available`]).
pub fn wanted() -> bool {
    std::env::var("MPICR_PIDNS").map_or(true, |v| v != "0")
}

/// Whether this process may create PID namespaces (root, or CAP_SYS_ADMIN): tried on a
/// throwaway thread, which changes nothing for any other.
pub fn available() -> bool {
    std::thread::spawn(|| unshare_for_children().is_ok()).join().unwrap_or(false)
}

/// Settings for the MPI library of a program in a PID namespace of its own, where a process id
/// means nothing outside the namespace and /proc is the node's: the library must not reach
/// other ranks by process id. `None`: mpicr wants the variable unset.
/// - UCX names its shared memory segments `/proc/<getpid()>/fd/N`: named segments instead.
/// - MPICH 5 copies large intranode messages with `process_vm_readv(peer's pid)` (CMA): in a
///   sibling namespace that id is another process, often the reader itself (measured: EFAULT,
///   and it could read the wrong memory without one). Copies through shared memory instead.
/// - UCX cannot use CMA between namespaces either, and then moves data between ranks of one
///   node over its TCP transport, whose endpoints Debian's MPICH 4.0.2 (UCX 1.13) disconnects
///   in MPI_Finalize before any barrier: a rank whose peer already waits in the PMI barrier
///   spins for ever. Measured under `mpicr run` (4 ranks on 2 cores): 14 of 30 jobs of 1 MiB
///   ring messages hung there, 0 of 60 without rendezvous (large messages sent eagerly through
///   shared memory); after a checkpoint 1 of 8 persistent-request jobs still hung, 0 of 16
///   without TCP. So: no rendezvous, and no TCP at all when every rank runs on this node.
/// - Open MPI 4.1's shared-memory transport (vader) copies large messages with CMA too, and
///   prints "Read -1, expected N, errno = 3" (ESRCH) for each before it falls back: no single
///   copy.
fn library_settings(all_local: bool) -> [(&'static str, Option<&'static str>); 5] {
    [
        ("OMPI_MCA_btl_vader_single_copy_mechanism", Some("none")),
        ("UCX_POSIX_USE_PROC_LINK", Some("n")),
        ("MPIR_CVAR_CH4_CMA_ENABLE", Some("0")),
        ("UCX_RNDV_THRESH", Some("inf")),
        ("UCX_TLS", all_local.then_some("^tcp")),
    ]
}

/// The library settings of a program started in a PID namespace: what to add to its
/// environment, and the names mpicr decides (those the user did not set), which the images
/// keep so that a restart can adapt them to where it runs ([`settings_at_restart`]).
pub fn settings_at_run(all_local: bool) -> (Vec<(String, OsString)>, Vec<String>) {
    let mut set = Vec::new();
    let mut managed = Vec::new();
    for (k, v) in library_settings(all_local) {
        if std::env::var_os(k).is_some() {
            continue;
        }
        managed.push(k.to_string());
        if let Some(v) = v {
            set.push((k.to_string(), OsString::from(v)));
        }
    }
    (set, managed)
}

/// At a restart, the values of the settings mpicr decided at run (`managed`) for this launch
/// (which may place the ranks otherwise: a job checkpointed on one node and restarted on
/// several needs TCP back), and the names it still decides. A variable the user sets for the
/// restart wins and is the user's from then on.
pub fn settings_at_restart(managed: &[String], all_local: bool) -> (Vec<(String, Option<String>)>, Vec<String>) {
    let mut env = Vec::new();
    let mut still = Vec::new();
    for (k, v) in library_settings(all_local) {
        if !managed.iter().any(|m| m == k) {
            continue;
        }
        match std::env::var(k) {
            Ok(user) => env.push((k.to_string(), Some(user))),
            Err(_) => {
                env.push((k.to_string(), v.map(str::to_string)));
                still.push(k.to_string());
            }
        }
    }
    (env, still)
}

/// Whether the launcher placed every rank of the job on this node: Hydra's `MPI_LOCALNRANKS`
/// against `PMI_SIZE`, Slurm's node count, Open MPI's local and world sizes; a program started
/// without a launcher runs alone.
pub fn all_ranks_local() -> bool {
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<u64>().ok());
    if let (Some(local), Some(size)) = (num("MPI_LOCALNRANKS"), num("PMI_SIZE")) {
        return local == size;
    }
    if let Some(nodes) = num("SLURM_STEP_NUM_NODES").or_else(|| num("SLURM_NNODES")) {
        return nodes == 1;
    }
    if let (Some(local), Some(size)) = (num("OMPI_COMM_WORLD_LOCAL_SIZE"), num("OMPI_COMM_WORLD_SIZE")) {
        return local == size;
    }
    num("PMI_SIZE").is_none_or(|n| n == 1)
}

/// Makes the calling thread's next child the init of a new PID namespace. Only this thread is
/// affected (the namespace for children is per thread), so callers do it on a thread of its own.
pub fn unshare_for_children() -> io::Result<()> {
    // SAFETY: unshare takes plain flags and has no memory effects.
    if unsafe { libc::unshare(libc::CLONE_NEWPID) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Arguments that turn `mpicr` into the init running `program` with `argv`. The init works in
/// `dir`: CRIU's parasite mounts the namespace's /proc in a fixed name (`proc.crtools`) under
/// the working directory of the init it dumps, so the inits of ranks dumped at the same time
/// must not share one; the directory must exist again when the image is restored.
pub fn init_args(status_fd: RawFd, dir: &std::path::Path, program: &std::path::Path, argv: &[OsString]) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![INIT_ARG.into(), status_fd.to_string().into(), dir.as_os_str().to_owned(), program.as_os_str().to_owned()];
    v.extend(argv.iter().cloned());
    v
}

/// The program's raw wait status as the init writes it into the status pipe.
pub fn encode_status(raw: libc::c_int) -> [u8; 4] {
    raw.to_le_bytes()
}

/// What the init wrote into the status pipe, if it wrote a whole status.
pub fn read_status(fd: BorrowedFd<'_>) -> Option<sys::Exit> {
    let mut b = [0u8; 4];
    // SAFETY: `b` is a writable buffer of 4 bytes; the descriptor stays open for the call.
    let n = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
    (n == 4).then(|| sys::exit_from_status(libc::c_int::from_le_bytes(b)))
}

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe and has no memory effects.
        unsafe { libc::kill(pid, sig) };
    }
}

/// With Open MPI underneath (`MPICR_MPI_LIB` names a `libmpi.so.40`), gives the program, inside
/// its namespace, the init's pid outside it (unique on the node) instead of 2 for every rank:
/// Open MPI's shared memory takes a segment whose creator's pid is its own for its own segment
/// and uses the creator's address (measured: SIGSEGV in `mca_btl_sm_sendi` at 2 ranks, each
/// program pid 2). Not for MPICH: with distinct pids a job restarted on the MPICH 5 wheel failed
/// in UCX's MPI_Init ("Endpoint timeout", CLI case xlib-mpich4-to-mpich5). Best effort: without
/// the privilege the program gets the next pid.
fn distinct_program_pid() {
    let lib = std::env::var_os("MPICR_MPI_LIB").unwrap_or_default();
    let open_mpi = std::path::Path::new(&lib).file_name().is_some_and(|n| n.as_bytes().starts_with(b"libmpi.so.40"));
    if !open_mpi {
        return;
    }
    let Ok(me) = std::fs::read_link("/proc/self") else { return };
    let Some(outer) = me.to_str().and_then(|s| s.parse::<u64>().ok()) else { return };
    // The sysctl acts on the writer's own PID namespace: the next fork gets `outer`.
    let _ = std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", outer.saturating_sub(1)));
}

/// `mpicr __pidns-init STATUS_FD DIR PROGRAM ARGV...`: runs in place of `main`, never returns.
/// The descriptor table is the program's already (the keeper set it up), plus the status pipe.
pub fn init_main(args: &[OsString]) -> ! {
    let fail = |what: &str| -> ! {
        crate::elog!("mpicr init: {what}");
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(125) }
    };
    let (Some(fd), Some(dir), Some(program), Some(_)) = (args.first(), args.get(1), args.get(2), args.get(3)) else {
        fail("usage: mpicr __pidns-init STATUS_FD DIR PROGRAM ARGV0 [ARGS...]")
    };
    let Some(status_fd) = fd.to_str().and_then(|s| s.parse::<RawFd>().ok()) else { fail("bad status descriptor") };
    let cstr = |s: &OsString| CString::new(s.as_bytes()).unwrap_or_else(|_| fail("an argument holds a NUL byte"));
    let path = cstr(program);
    let dir = cstr(dir);
    let argv: Vec<CString> = args[3..].iter().map(cstr).collect();
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());

    // Named apart from the keepers (`ps`, tests that look for them by name).
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"mpicr-init".as_ptr() as libc::c_ulong, 0, 0, 0) };
    // Signals stay blocked from here until the child's pid is known (a forward to pid 0 would
    // signal our own process group) and, in the child, until the program's dispositions are
    // the defaults again.
    // SAFETY: sigset manipulation on local sets; sigaction with a handler that only calls kill.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        for sig in FORWARDED {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    distinct_program_pid();
    // SAFETY: this process is single-threaded (nothing started a thread before init_main).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        fail(&format!("fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: between fork and exec only async-signal-safe calls on prepared data.
        unsafe {
            libc::close(status_fd);
            for sig in FORWARDED.iter().copied().chain([libc::SIGPIPE]) {
                libc::signal(sig, libc::SIG_DFL);
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            libc::execv(path.as_ptr(), argv_ptrs.as_ptr());
            let msg = b"mpicr init: cannot execute the program\n";
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
    }
    CHILD.store(pid, Ordering::SeqCst);
    // SAFETY: chdir with a NUL-terminated path.
    if unsafe { libc::chdir(dir.as_ptr()) } < 0 {
        crate::elog!("mpicr init: cannot work in {}: {}", dir.to_string_lossy(), io::Error::last_os_error());
    }
    // The init keeps nothing of the program's: stdio on /dev/null, everything else but the
    // status pipe closed (the images then hold the keeper's sockets in the program only).
    // SAFETY: plain descriptor calls on integers; the path is a NUL-terminated literal.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for n in 0..3 {
                libc::dup2(null, n);
            }
            if null > 2 {
                libc::close(null);
            }
        }
        if status_fd > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, (status_fd - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (status_fd.max(2) + 1) as u32, u32::MAX, 0u32);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes into a local int.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                _ => fail("lost the program (no child left)"),
            }
        }
        if r != pid {
            continue; // an orphan of the program, reaped
        }
        let bytes = encode_status(status);
        // SAFETY: writes 4 bytes from a local array; _exit ends the process at once (the kernel
        // then ends whatever else is left in the namespace).
        unsafe {
            libc::write(status_fd, bytes.as_ptr().cast(), bytes.len());
            let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
            libc::_exit(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trip() {
        let (r, w) = sys::pipe().unwrap();
        // 9 << 0: killed by SIGKILL; 3 << 8: exited with 3.
        for (raw, want) in [(9, sys::Exit::Signal(9)), (3 << 8, sys::Exit::Code(3))] {
            let b = encode_status(raw);
            // SAFETY: writes 4 bytes from a local array into an open pipe.
            assert_eq!(unsafe { libc::write(w.as_raw_fd(), b.as_ptr().cast(), 4) }, 4);
            assert_eq!(read_status(std::os::fd::AsFd::as_fd(&r)), Some(want));
        }
    }

    #[test]
    fn init_arguments() {
        let a = init_args(101, std::path::Path::new("/d"), std::path::Path::new("/bin/prog"), &["prog".into(), "-x".into()]);
        assert_eq!(a, vec![OsString::from(INIT_ARG), "101".into(), "/d".into(), "/bin/prog".into(), "prog".into(), "-x".into()]);
    }
}
