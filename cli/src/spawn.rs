//! Starting the program with a clean descriptor table: 0 (/dev/null), 1 and 2 (pipes the keeper
//! relays), the control socket and the PMI socket, and nothing else (launchers leak listening
//! TCP and unix sockets into ranks; CRIU 4.1 cannot dump inet sockets on this kernel, and nothing
//! launcher-owned belongs in an image).

use crate::sys;
use anyhow::{Context, Result};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Descriptor number of the control socket in the program.
pub const PROGRAM_CTL_FD: RawFd = 3;
/// Descriptor number of the PMI socket in the program. High on purpose: MPICH 4.0.2 closes its
/// PMI socket at `PMI_Finalize`, and a renewed lower half must find a new socket under the same
/// number, which a low number would by then likely hold a file of the program.
pub const PROGRAM_PMI_FD: RawFd = 100;

/// How a spawn failed, for the exit code conventions of wrappers (126, 127).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("program not found: {0}")]
    NotFound(String),
    #[error("program is not executable: {0}")]
    NotExecutable(String),
    #[error("{0:#}")]
    Other(anyhow::Error),
}

/// Finds `program` the way `execvp` would, so that a missing program is reported before fork.
pub fn resolve_program(program: &OsStr) -> Result<PathBuf, SpawnError> {
    let p = Path::new(program);
    let shown = p.display().to_string();
    let check = |c: &Path| -> Result<PathBuf, SpawnError> {
        if c.is_dir() {
            return Err(SpawnError::NotExecutable(format!("{} (a directory)", c.display())));
        }
        if !sys::is_executable(c) {
            return Err(SpawnError::NotExecutable(c.display().to_string()));
        }
        Ok(c.to_path_buf())
    };
    if p.as_os_str().is_empty() {
        return Err(SpawnError::NotFound("(empty name)".into()));
    }
    if p.components().count() > 1 || shown.contains('/') {
        if !p.exists() {
            return Err(SpawnError::NotFound(shown));
        }
        return check(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let c = dir.join(p);
        if c.is_file() {
            return check(&c);
        }
    }
    Err(SpawnError::NotFound(shown))
}

/// What to start and which descriptors it gets.
pub struct Plan {
    pub program: PathBuf,
    pub argv: Vec<OsString>,
    pub set_env: Vec<(String, OsString)>,
    pub remove_env: Vec<String>,
    /// (descriptor in the keeper, number it gets in the program)
    pub fds: Vec<(OwnedFd, RawFd)>,
    /// Start the program under an init in a PID namespace of its own (see `pidns`), working in
    /// this directory.
    pub pidns: Option<PathBuf>,
    /// Working directory of the program (`None`: the keeper's).
    pub cwd: Option<PathBuf>,
    /// Start the program without address-space randomisation (app mode: a restarted process
    /// then has the program's functions at the addresses the saved MPI objects name).
    pub no_aslr: bool,
}

/// The started program and the keeper's ends of its stdio.
pub struct Spawned {
    /// The program, or the init of its PID namespace.
    pub pid: i32,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// With a PID namespace: the read end of the pipe the init writes the program's status into.
    pub status: Option<OwnedFd>,
}

pub fn spawn(plan: Plan) -> Result<Spawned, SpawnError> {
    let other = |e: std::io::Error, what: &str| SpawnError::Other(anyhow::Error::new(e).context(what.to_string()));
    let (out_r, out_w) = sys::pipe().map_err(|e| other(e, "creating the stdout pipe"))?;
    let (err_r, err_w) = sys::pipe().map_err(|e| other(e, "creating the stderr pipe"))?;
    // Park every source descriptor above any target number so the dup2s cannot clobber one another.
    let mut moves: Vec<(OwnedFd, RawFd)> = Vec::new();
    for (fd, target) in plan.fds {
        let high = sys::dup_at_least(fd.as_fd(), 200).map_err(|e| other(e, "duplicating a descriptor"))?;
        moves.push((high, target));
    }
    let mut status = None;
    let mut init = None;
    if let Some(dir) = &plan.pidns {
        let exe = crate::paths::runnable_exe()
            .ok_or_else(|| other(std::io::Error::from(std::io::ErrorKind::NotFound), "finding the mpicr executable for the init"))?;
        let (r, w) = sys::pipe().map_err(|e| other(e, "creating the status pipe"))?;
        let high = sys::dup_at_least(w.as_fd(), 200).map_err(|e| other(e, "duplicating a descriptor"))?;
        let target = moves.iter().map(|&(_, t)| t).max().unwrap_or(2) + 1;
        moves.push((high, target));
        status = Some(r);
        init = Some((exe, target, dir.clone()));
    }
    let pairs: Vec<(RawFd, RawFd)> = moves.iter().map(|(fd, t)| (fd.as_raw_fd(), *t)).collect();
    let keep: Vec<RawFd> = pairs.iter().map(|&(_, t)| t).collect();

    let mut cmd = match &init {
        Some((exe, status_fd, dir)) => {
            let mut c = Command::new(exe);
            c.arg0("mpicr");
            c.args(crate::pidns::init_args(*status_fd, dir, &plan.program, &plan.argv));
            c
        }
        None => {
            let mut c = Command::new(&plan.program);
            if let Some((first, rest)) = plan.argv.split_first() {
                c.arg0(first);
                c.args(rest);
            }
            c
        }
    };
    for k in &plan.remove_env {
        cmd.env_remove(k);
    }
    for (k, v) in &plan.set_env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::from(out_w)).stderr(Stdio::from(err_w));
    if let Some(d) = &plan.cwd {
        cmd.current_dir(d);
    }
    let no_aslr = plan.no_aslr;
    let keeper = std::process::id() as libc::pid_t;
    // SAFETY: the hook runs between fork and exec and only makes async-signal-safe system calls
    // (sigprocmask, signal, setsid, prctl, personality, dup2, close_range) on plain integers computed before fork.
    unsafe {
        cmd.pre_exec(move || {
            sys::child_reset_signals()?;
            sys::child_setsid()?;
            sys::child_set_pdeathsig(keeper)?;
            if no_aslr {
                sys::child_no_aslr()?;
            }
            for &(from, to) in &pairs {
                sys::child_dup2(from, to)?;
            }
            // Everything else from 3 up closes at exec (close-on-exec rather than close, so that
            // std's own exec-error pipe keeps working).
            sys::child_cloexec_from(3, &keep)
        });
    }
    let pid = if init.is_some() {
        // The namespace for children is a property of the thread, and so is the parent-death
        // signal: the init is killed when the thread that forked it ends. So a thread of its own
        // makes the namespace, starts the init and then stays parked for the keeper's life.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("pidns-parent".into())
            .spawn(move || {
                let r = crate::pidns::unshare_for_children()
                    .map_err(|e| other(e, "creating a PID namespace for the program"))
                    .and_then(|()| cmd.spawn().map_err(|e| other(e, "starting the init of the program's PID namespace")));
                // The command holds the keeper's copies of the program's stdout and stderr: the
                // relays see the end of the output only once they are closed.
                drop(cmd);
                let started = r.is_ok();
                let _ = tx.send(r.map(|c| c.id() as i32));
                if started {
                    loop {
                        std::thread::park();
                    }
                }
            })
            .map_err(|e| other(e, "starting the thread that starts the program"))?;
        rx.recv().unwrap_or_else(|_| Err(SpawnError::Other(anyhow::anyhow!("the thread starting the program ended"))))?
    } else {
        // The std handle is dropped unused: the keeper waits with waitpid itself (see keeper).
        cmd.spawn()
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) => SpawnError::NotFound(plan.program.display().to_string()),
                Some(libc::EACCES) | Some(libc::ENOEXEC) => SpawnError::NotExecutable(plan.program.display().to_string()),
                _ => other(e, &format!("starting {}", plan.program.display())),
            })?
            .id() as i32
    };
    drop(moves);
    Ok(Spawned { pid, stdout: out_r, stderr: err_r, status })
}

/// Copies everything from `from` to the keeper's own `to` (1 or 2) until end of file.
pub fn relay_output(from: OwnedFd, to: RawFd, name: &str) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("relay-{name}"))
        .spawn(move || {
            use std::io::{Read, Write};
            let mut src = std::fs::File::from(from);
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = match src.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => return,
                };
                let res = if to == 1 {
                    let mut o = std::io::stdout().lock();
                    o.write_all(&buf[..n]).and_then(|_| o.flush())
                } else {
                    let mut o = std::io::stderr().lock();
                    o.write_all(&buf[..n]).and_then(|_| o.flush())
                };
                if res.is_err() {
                    // Our own output is gone (launcher ended): keep draining so the program
                    // does not block on a full pipe.
                    continue;
                }
            }
        })
        .context("starting an output relay thread")
}
