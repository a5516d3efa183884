//! A job of `c-tests/ckpt_ring.c` on 2 ranks that pauses where the test says
//! (`MPICR_TEST_PAUSE_AT`, common.h's `t_pause_point`), for the cases that checkpoint it at a
//! known iteration under some launcher and compare its output with the native run's.

use super::xlib::{sorted, wait_for};
use super::{Bg, LIMIT, T};
use crate::error::Error;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Iterations of every run (pauses at 20 and 40).
pub const ITERS: &str = "64";

/// The pause files of one job (`MPICR_TEST_TMPDIR`).
pub struct Pause {
    pub dir: PathBuf,
}

impl Pause {
    pub fn new(t: &T, name: &str) -> Pause {
        let dir = t.p(&format!("pause-{name}"));
        let _ = std::fs::create_dir_all(&dir);
        Pause { dir }
    }
    /// Sets the pause points (`20`, `20,40`) in the job's environment.
    pub fn arm(&self, c: &mut Command, at: &str) {
        c.env("MPICR_TEST_PAUSE_AT", at).env("MPICR_TEST_TMPDIR", &self.dir);
    }
    /// Waits (at most `LIMIT`) until the job is paused.
    pub fn wait(&self) -> bool {
        let flag = self.dir.join("mpicr-test-paused");
        wait_for(|| flag.exists(), LIMIT)
    }
    /// Lets the paused job (or the restored one, paused in its image) go on; waits until it did.
    pub fn resume(&self) -> bool {
        let go = self.dir.join("mpicr-test-resume");
        let _ = std::fs::write(&go, "");
        wait_for(|| !go.exists(), LIMIT)
    }
}

/// The output of `prog ITERS` natively under MPICH `ver`'s `mpiexec -n 2`.
pub fn native_on(t: &T, ver: u32, prog: &Path) -> Result<String, Error> {
    let mut c = t.mpi(ver, 2);
    c.arg(prog).arg(ITERS);
    let (rc, out, err) = t.out2(c, LIMIT);
    if rc != 0 {
        return Err(Error::Command(format!("the native run failed ({rc}): {err}")));
    }
    Ok(out)
}

/// Whether the outputs of the pieces of a run, put together, are the native run's (lines
/// sorted: ranks interleave differently each time).
pub fn same_output(pieces: &[&Path], native: &str) -> Result<(), Error> {
    let got = super::cat(pieces);
    if sorted(&got) == sorted(native) {
        Ok(())
    } else {
        Err(Error::Mismatch(format!("output differs:\n{got}\nnative:\n{native}")))
    }
}

/// The processes whose executable is `exe` (the ranks of a program).
pub fn pids_of(exe: &Path) -> Vec<u32> {
    let exe = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
    crate::job::scan_procs()
        .into_iter()
        .filter(|p| !p.dead && std::fs::read_link(format!("/proc/{}/exe", p.pid)).is_ok_and(|e| e == exe))
        .map(|p| p.pid)
        .collect()
}

/// `c-tests/ckpt_ring.c` built by `mpicc.mpich` into `bin/OUT`, and its native output.
pub fn ring_with_oracle(t: &T, out: &str) -> Result<(PathBuf, String), Error> {
    ring_with_oracle_on(t, 4, out)
}

/// `ring_with_oracle` built and run by MPICH `ver` (4: Debian's 4.0.2, 5: the wheel).
pub fn ring_with_oracle_on(t: &T, ver: u32, out: &str) -> Result<(PathBuf, String), Error> {
    let prog = super::xlib::build(t, ver, &t.env.root.join("c-tests/ckpt_ring.c"), out)?;
    let oracle = native_on(t, ver, &prog)?;
    Ok((prog, oracle))
}

/// Starts `LAUNCHER MPICR ARGS` (the launcher command `c`, `mpicr` at `m`) in the background,
/// armed to pause at `at`; stdout and stderr to `NAME.out` and `NAME.err`.
pub fn start(t: &T, mut c: Command, pause: &Pause, at: &str, m: &Path, args: &[&OsStr], name: &str) -> (Bg, PathBuf, PathBuf) {
    pause.arm(&mut c, at);
    c.arg(m).args(args);
    let (o, e) = (t.p(&format!("{name}.out")), t.p(&format!("{name}.err")));
    let job = t.spawn(c, Some(&o), Some(&e));
    (job, o, e)
}
