//! Running CRIU: dump of the program (sockets to the keeper declared external) and restore
//! (`restore -d`, new sockets and pipes substituted with `--inherit-fd`). CRIU's log stays in the
//! rank's image directory; its last lines are part of every failure message.

use anyhow::{bail, Context, Result};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Unlinked-but-open files up to this size are kept in the image (MPICH keeps a 2 MiB file in
/// /dev/shm; a released lower half may still leave some behind).
pub const GHOST_LIMIT: &str = "64M";

pub struct Criu {
    pub bin: PathBuf,
}

impl Criu {
    /// `$MPICR_CRIU`, else `.deps/criu/criu` of the source tree the mpicr binary was built in
    /// (`target/release/../../.deps/criu/criu`), else `criu` on PATH.
    pub fn locate() -> Result<Criu> {
        if let Some(p) = std::env::var_os("MPICR_CRIU").filter(|v| !v.is_empty()) {
            let p = PathBuf::from(p);
            if !crate::sys::is_executable(&p) {
                bail!("MPICR_CRIU names {}, which is not an executable file", p.display());
            }
            return Ok(Criu { bin: p });
        }
        if let Some(dir) = crate::paths::exe_dir() {
            for rel in ["../../.deps/criu/criu", "../../../.deps/criu/criu"] {
                let c = dir.join(rel);
                if crate::sys::is_executable(&c) {
                    return Ok(Criu { bin: c });
                }
            }
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        for d in std::env::split_paths(&path) {
            let c = d.join("criu");
            if crate::sys::is_executable(&c) {
                return Ok(Criu { bin: c });
            }
        }
        bail!("criu not found: set MPICR_CRIU, or install it (scripts/deps.sh puts one in .deps/criu)")
    }

    /// Dumps the process tree rooted at `pid` into `dir` (log: `dir/dump.log`). The tree is left
    /// running, or stopped (`leave_stopped`, for `checkpoint --stop`: nothing the program does
    /// after the dump may happen twice once it is restarted; SIGCONT undoes it on an abort).
    pub fn dump(&self, pid: i32, dir: &Path, external_unix: &[u64], leave_stopped: bool, timeout: Duration) -> Result<()> {
        let dir = &dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("dump").arg("-t").arg(pid.to_string()).arg("-D").arg(dir).arg("-o").arg("dump.log").arg("-v4");
        cmd.args(dump_flags(external_unix, leave_stopped));
        run(cmd, "dump", &dir.join("dump.log"), timeout, Vec::new())
    }

    /// Restores the image in `dir` detached (`restore -d`); `inherit` maps resources of the image
    /// (`socket:[INO]`, `pipe:[INO]`) to descriptors of the keeper. Returns the restored pid.
    pub fn restore(&self, dir: &Path, inherit: Vec<(OwnedFd, String)>, timeout: Duration) -> Result<i32> {
        // CRIU changes directory: every path it gets must be absolute.
        let dir = &dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
        let pidfile = dir.join("restore.pid");
        let _ = std::fs::remove_file(&pidfile);
        let mut cmd = Command::new(&self.bin);
        // --restore-sibling: the restored program becomes the keeper's child directly (not
        // CRIU's), so its parent-death signal refers to the keeper and CRIU's exit is harmless.
        cmd.arg("restore").arg("-d").arg("--restore-sibling").arg("-D").arg(dir).arg("-o").arg("restore.log").arg("-v4");
        cmd.arg("--pidfile").arg(&pidfile);
        let mut fds = Vec::new();
        for (next, (fd, res)) in (10..).zip(inherit) {
            cmd.args(restore_inherit_flag(next, &res));
            fds.push((fd, next));
        }
        cmd.args(restore_flags());
        run(cmd, "restore", &dir.join("restore.log"), timeout, fds)?;
        let text = std::fs::read_to_string(&pidfile).with_context(|| format!("criu restore wrote no {}", pidfile.display()))?;
        let _ = std::fs::remove_file(&pidfile);
        text.trim().parse().with_context(|| format!("criu restore wrote a bad pid file: {text:?}"))
    }
}

pub fn dump_flags(external_unix: &[u64], leave_stopped: bool) -> Vec<String> {
    let mut v = vec!["--shell-job".to_string(), "--ghost-limit".into(), GHOST_LIMIT.into(), "--file-locks".into()];
    v.push(if leave_stopped { "--leave-stopped" } else { "--leave-running" }.into());
    for ino in external_unix {
        v.push("--external".into());
        v.push(format!("unix[{ino}]"));
    }
    v
}

pub fn restore_flags() -> Vec<String> {
    vec!["--shell-job".into(), "--file-locks".into()]
}

pub fn restore_inherit_flag(fd: RawFd, resource: &str) -> Vec<String> {
    vec!["--inherit-fd".into(), format!("fd[{fd}]:{resource}")]
}

/// Runs CRIU with `fds` placed at the given numbers, bounded by `timeout`.
fn run(mut cmd: Command, what: &str, log: &Path, timeout: Duration, fds: Vec<(OwnedFd, RawFd)>) -> Result<()> {
    let pairs: Vec<(RawFd, RawFd)> = fds.iter().map(|(fd, n)| (fd.as_raw_fd(), *n)).collect();
    // Park sources above the target numbers first.
    let parked: Vec<OwnedFd> = fds
        .iter()
        .map(|(fd, _)| crate::sys::dup_at_least(std::os::fd::AsFd::as_fd(fd), 300))
        .collect::<std::io::Result<_>>()
        .context("duplicating descriptors for criu")?;
    let parked_pairs: Vec<(RawFd, RawFd)> = parked.iter().map(|p| p.as_raw_fd()).zip(pairs.iter().map(|p| p.1)).collect();
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    // SAFETY: only umask and dup2 (async-signal-safe) on integers computed before fork.
    unsafe {
        cmd.pre_exec(move || {
            // Images hold the program's memory: nothing CRIU creates may be readable by others.
            crate::sys::child_umask(0o077)?;
            for &(from, to) in &parked_pairs {
                crate::sys::child_dup2(from, to)?;
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().with_context(|| format!("starting {}", cmd.get_program().to_string_lossy()))?;
    drop(fds);
    drop(parked);
    let stderr = child.stderr.take();
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id() as i32;
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let mut err_text = String::new();
    if let Some(mut e) = stderr {
        use std::io::Read;
        let (etx, erx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = e.read_to_string(&mut s);
            let _ = etx.send(s);
        });
        match rx.recv_timeout(timeout) {
            Ok(status) => {
                err_text = erx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
                let status = status.context("waiting for criu")?;
                if status.success() {
                    return Ok(());
                }
                bail!("criu {what} failed ({status}){}", describe_failure(&err_text, log));
            }
            Err(_) => {
                let _ = crate::sys::kill(pid, libc::SIGKILL);
                let _ = rx.recv_timeout(Duration::from_secs(10));
                bail!("criu {what} did not finish within {}s and was killed{}", timeout.as_secs(), describe_failure(&err_text, log));
            }
        }
    }
    bail!("criu {what}: no stderr pipe")
}

fn describe_failure(stderr: &str, log: &Path) -> String {
    let mut s = String::new();
    let stderr = stderr.trim();
    if !stderr.is_empty() {
        s.push_str(&format!("; criu said: {}", stderr.lines().last().unwrap_or("")));
    }
    let tail = log_tail(log, 12);
    if !tail.is_empty() {
        s.push_str(&format!("\n  last lines of {}:\n{}", log.display(), tail));
    }
    s
}

/// The last `n` lines of a CRIU log, errors first when there are any, indented.
pub fn log_tail(log: &Path, n: usize) -> String {
    let Ok(text) = std::fs::read_to_string(log) else { return String::new() };
    // CRIU always logs this one as an error (it cannot raise its own descriptor limit); noise.
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("Can't setup RLIMIT_NOFILE")).collect();
    let errors: Vec<&str> = lines.iter().copied().filter(|l| l.contains("Error") || l.contains("error")).collect();
    let pick: Vec<&str> = if errors.is_empty() {
        lines.iter().rev().take(n).rev().copied().collect()
    } else {
        errors.iter().rev().take(n).rev().copied().collect()
    };
    pick.iter().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        let f = dump_flags(&[11, 12], false);
        assert!(f.windows(2).any(|w| w[0] == "--external" && w[1] == "unix[11]"));
        assert!(f.windows(2).any(|w| w[0] == "--external" && w[1] == "unix[12]"));
        assert!(f.contains(&"--leave-running".to_string()));
        assert!(f.contains(&"--shell-job".to_string()));
        assert!(dump_flags(&[], true).contains(&"--leave-stopped".to_string()));
        assert!(!dump_flags(&[], true).contains(&"--leave-running".to_string()));
        assert_eq!(restore_inherit_flag(10, "socket:[5]"), vec!["--inherit-fd", "fd[10]:socket:[5]"]);
    }

    #[test]
    fn log_tail_prefers_errors() {
        let d = crate::images::tests::tempdir("log");
        let p = d.join("dump.log");
        std::fs::write(&p, "a\nb\n(00.1) Error (criu/sk-unix.c:1): boom\nc\n").unwrap();
        let t = log_tail(&p, 5);
        assert!(t.contains("boom") && !t.contains(" a"), "{t}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
