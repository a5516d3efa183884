//! One MPI job: `mpiexec -n N ... program args`, bounded in time, with every process it
//! started gone when `run` returns.
//!
//! Hydra (both MPICH builds) calls `setsid()` for its proxies and ranks, so killing the process
//! group of `mpiexec` is not enough to clean up after a hang. Each job therefore carries a
//! unique marker in its environment (`MPICR_TEST_JOB`, inherited by the proxies and passed to
//! the ranks with `-genv`); cleanup kills `mpiexec`'s group, its descendants and every process
//! whose environment holds the marker, until none is left.

use crate::error::Error;
use std::ffi::OsString;
use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Environment variable that marks every process of one job.
pub const MARKER_VAR: &str = "MPICR_TEST_JOB";
/// Exported to the ranks: the job's scratch directory (also what `{tmpdir}` expands to).
pub const TMPDIR_VAR: &str = "MPICR_TEST_TMPDIR";

const POLL: Duration = Duration::from_millis(20);
/// How long `mpiexec` gets to end a job by itself after SIGTERM, before everything is killed.
const GRACE: Duration = Duration::from_secs(5);

/// Which launcher `mpiexec` is: how a job asks it for one output file per rank and passes
/// environment variables to the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Launcher {
    /// MPICH's Hydra (`mpiexec.mpich`, the wheels' `mpiexec`, Intel MPI's).
    #[default]
    Hydra,
    /// Open MPI's `mpirun` (ORTE in 4.1, PRRTE in 5): `--output-filename`, `-x`,
    /// `--oversubscribe` (4 ranks on a 2-core machine).
    OpenMpi,
}

/// What to launch.
#[derive(Debug, Clone)]
pub struct Job {
    pub mpiexec: PathBuf,
    pub launcher: Launcher,
    pub ranks: u32,
    /// Words placed before the program on every rank (a keeper such as `mpicr run --`);
    /// empty for a plain launch.
    pub wrapper: Vec<OsString>,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Passed to every rank with Hydra's `-genv`, not set for `mpiexec` itself (so that an
    /// `LD_PRELOAD` reaches the ranks only).
    pub rank_env: Vec<(String, OsString)>,
    pub timeout: Duration,
}

/// What a finished job left behind.
#[derive(Debug, Clone)]
pub struct JobOutput {
    pub status: ExitStatus,
    /// Per rank, from Hydra's `-outfile-pattern`/`-errfile-pattern`.
    pub stdout: Vec<Vec<u8>>,
    pub stderr: Vec<Vec<u8>>,
    /// `mpiexec`'s own stdout and stderr.
    pub launcher: Vec<u8>,
    /// Names left in the ranks' working directory: tests must remove what they create.
    pub leftovers: Vec<String>,
    /// "pid (comm)" of processes of the job still alive after `mpiexec` exited (now killed).
    pub stray: Vec<String>,
    pub elapsed: Duration,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst); // async-signal-safe
}

/// Makes SIGINT/SIGTERM end the running jobs (killing their processes) instead of leaving
/// ranks behind: `mpiexec` sits in its own process group, so a terminal's Ctrl-C does not
/// reach it. Callers should stop launching once `interrupted()` is true.
pub fn install_interrupt_handler() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// A job's directory: `out.R`/`err.R` per rank, `mpiexec.log`, and `work/`, the ranks' working
/// and scratch directory. Removed on drop unless `keep`.
pub struct Scratch {
    root: PathBuf,
    keep: bool,
}

impl Scratch {
    pub fn new(label: &str, keep: bool) -> Result<Scratch, Error> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let safe: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let root = std::env::temp_dir().join(format!("mpicr-ctest-{}-{}-{safe}", std::process::id(), seq));
        fs::create_dir_all(root.join("work")).map_err(Error::io("create", &root))?;
        Ok(Scratch { root, keep })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The ranks' working directory; `{tmpdir}` in test arguments.
    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept {}", self.root.display());
        } else {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

/// Runs `job` in `scratch`. Err on a launch failure, a timeout or an interrupt; a non-zero exit
/// status, files left behind and processes outliving `mpiexec` are reported in the output for
/// callers to judge.
pub fn run(job: &Job, scratch: &Scratch) -> Result<JobOutput, Error> {
    run_driven(job, scratch, &mut |_| Ok(()))
}

/// `run`, calling `driver` with the ranks' working directory about every 20 ms while the job
/// runs: the hook for modes that act on a running job (e.g. checkpoint it once a test has
/// reached its pause point, see `t_pause_point` in c-tests/common.h). An error from the driver
/// ends the job like a timeout does.
pub fn run_driven(job: &Job, scratch: &Scratch, driver: &mut dyn FnMut(&Path) -> Result<(), Error>) -> Result<JobOutput, Error> {
    run_in(job, scratch, scratch.root(), &new_marker(), driver)
}

/// A fresh job marker (see the module docs): unique on this machine while we live.
pub fn new_marker() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!("{}.{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// `run_driven` for one of several launches that share a scratch directory (a checkpointed
/// job and its restarts: the restored ranks keep their working directory): this launch's
/// `out.R`, `err.R` and `mpiexec.log` go to `io_dir` (created if needed; Hydra appends to
/// existing files, so give every launch its own), and its processes carry `marker`. Restored
/// processes keep the environment of the job they were checkpointed in, so the launches of one
/// checkpointed job should share a marker.
pub fn run_in(job: &Job, scratch: &Scratch, io_dir: &Path, marker: &str, driver: &mut dyn FnMut(&Path) -> Result<(), Error>) -> Result<JobOutput, Error> {
    let out = run_once(job, scratch, io_dir, marker, driver)?;
    if !launcher_did_not_start(&out) {
        return Ok(out);
    }
    // No rank ran: the launcher itself failed to come up (seen once in a whole `make test`
    // with Open MPI 5's prterun). That says nothing of the program or of mpicr: launch again,
    // once, and say so.
    eprintln!("note: {} did not start (\"{LAUNCHER_START_FAILED}\"); launching again", job.mpiexec.display());
    std::thread::sleep(Duration::from_secs(1));
    run_once(job, scratch, io_dir, marker, driver)
}

/// What Open MPI 5's launcher prints when its PMIx server could not start.
const LAUNCHER_START_FAILED: &str = "The PMIx server's listener thread failed to start";

/// A launch that failed before any rank ran, because the launcher could not start.
fn launcher_did_not_start(out: &JobOutput) -> bool {
    !out.status.success() && out.stdout.iter().all(|s| s.is_empty()) && String::from_utf8_lossy(&out.launcher).contains(LAUNCHER_START_FAILED)
}

fn run_once(job: &Job, scratch: &Scratch, io_dir: &Path, marker: &str, driver: &mut dyn FnMut(&Path) -> Result<(), Error>) -> Result<JobOutput, Error> {
    fs::create_dir_all(io_dir).map_err(Error::io("create", &io_dir))?;
    let dir = io_dir;
    let log_path = dir.join("mpiexec.log");
    let log = File::create(&log_path).map_err(Error::io("create", &log_path))?;
    let log2 = log.try_clone().map_err(Error::io("duplicate the descriptor of", &log_path))?;

    let mut cmd = Command::new(&job.mpiexec);
    cmd.arg("-n").arg(job.ranks.to_string());
    match job.launcher {
        Launcher::Hydra => {
            // One file per rank, so ranks' lines never interleave. Hydra does not truncate
            // existing files, so every job gets a fresh directory.
            cmd.arg("-outfile-pattern").arg(dir.join("out.%r"));
            cmd.arg("-errfile-pattern").arg(dir.join("err.%r"));
            cmd.arg("-genv").arg(MARKER_VAR).arg(marker);
            cmd.arg("-genv").arg(TMPDIR_VAR).arg(scratch.work());
            for (k, v) in &job.rank_env {
                cmd.arg("-genv").arg(k).arg(v);
            }
        }
        Launcher::OpenMpi => {
            // Open MPI writes DIR/1/rank.R/{stdout,stderr} (collect_openmpi renames them);
            // `-x NAME=VALUE` reaches the ranks only. As root it needs to be told it may run.
            cmd.arg("--oversubscribe").arg("--output-filename").arg(dir.join("ompi"));
            let mut x = |k: &str, v: &std::ffi::OsStr| {
                let mut kv = std::ffi::OsString::from(format!("{k}="));
                kv.push(v);
                cmd.arg("-x").arg(kv);
            };
            x(MARKER_VAR, marker.as_ref());
            x(TMPDIR_VAR, scratch.work().as_os_str());
            for (k, v) in &job.rank_env {
                x(k, v);
            }
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                cmd.arg("--allow-run-as-root");
            }
        }
    }
    cmd.args(&job.wrapper).arg(&job.program).args(&job.args);
    cmd.current_dir(scratch.work()).env(MARKER_VAR, marker).stdin(Stdio::null()).stdout(log).stderr(log2).process_group(0);

    let start = Instant::now();
    let mut child = cmd.spawn().map_err(Error::spawn(job.mpiexec.display()))?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                kill_job(Some(child.id()), marker);
                let _ = child.wait();
                return Err(Error::os("waiting for mpiexec")(e));
            }
        }
        let over = start.elapsed() >= job.timeout;
        let driven = if over { Ok(()) } else { driver(&scratch.work()) };
        if over || interrupted() || driven.is_err() {
            // Ask Hydra to end the job itself first: it kills its ranks and removes its files
            // (MPICH 5's proxy leaves /tmp/hydra_hwloc_xmlfile_* behind when killed outright).
            // SAFETY: plain syscall; mpiexec is our unreaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let grace = Instant::now();
            let mut reaped = false;
            while grace.elapsed() < GRACE && !reaped {
                std::thread::sleep(POLL);
                reaped = matches!(child.try_wait(), Ok(Some(_)) | Err(_));
            }
            // Then kill whatever is left. While mpiexec is not reaped, its PID and process
            // group cannot have been reused; once reaped, only the marker is trustworthy.
            let killed = kill_job(if reaped { None } else { Some(child.id()) }, marker);
            let _ = child.wait();
            let cause = match driven {
                _ if over => Error::Timeout(job.timeout),
                Err(e) => e,
                Ok(()) => Error::Interrupted,
            };
            let partial = collect(job.ranks, dir, &log_path);
            return Err(Error::Stopped { cause: Box::new(cause), killed, tails: tails(&partial.0, &partial.1, &partial.2) });
        }
        std::thread::sleep(POLL);
    };
    let elapsed = start.elapsed();

    // Hydra waits for its ranks, so nothing should be left when it exits normally; after an
    // abort it may not wait. Whatever is left is killed and reported (callers judge it: after a
    // success it is a bug, e.g. a helper process started by the shim).
    let stray = kill_job(None, marker);
    if job.launcher == Launcher::OpenMpi {
        collect_openmpi(job.ranks, dir);
    }
    let (stdout, stderr, launcher) = collect(job.ranks, dir, &log_path);
    let mut leftovers: Vec<String> =
        fs::read_dir(scratch.work()).map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned())).collect()).unwrap_or_default();
    leftovers.sort();
    Ok(JobOutput { status, stdout, stderr, launcher, leftovers, stray, elapsed })
}

/// Where rank `r`'s stdout is while a job runs: Hydra's `out.R`, Open MPI 4.1's
/// `ompi/1/rank.R/stdout` or Open MPI 5's `ompi.<namespace>.R.out` (renamed to `out.R` when
/// the job ends).
pub fn rank_stdout(dir: &Path, r: u32) -> PathBuf {
    let hydra = dir.join(format!("out.{r}"));
    if hydra.exists() {
        return hydra;
    }
    let orte = dir.join("ompi").join("1").join(format!("rank.{r}")).join("stdout");
    if orte.exists() {
        return orte;
    }
    let suffix = format!(".{r}.out");
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("ompi.") && n.ends_with(&suffix))
        .map_or(hydra, |n| dir.join(n))
}

/// Moves Open MPI's per-rank output files to Hydra's `out.R` and `err.R`: Open MPI 4.1 writes
/// `ompi/1/rank.R/{stdout,stderr}`, Open MPI 5 (PRRTE) `ompi.<namespace>.R.{out,err}`.
fn collect_openmpi(ranks: u32, dir: &Path) {
    let base = dir.join("ompi").join("1");
    for r in 0..ranks {
        let rank = base.join(format!("rank.{r}"));
        let _ = fs::rename(rank.join("stdout"), dir.join(format!("out.{r}")));
        let _ = fs::rename(rank.join("stderr"), dir.join(format!("err.{r}")));
    }
    let _ = fs::remove_dir_all(dir.join("ompi"));
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("ompi.") else { continue };
        let (stem, to) = match (rest.strip_suffix(".out"), rest.strip_suffix(".err")) {
            (Some(s), _) => (s, "out"),
            (_, Some(s)) => (s, "err"),
            _ => continue,
        };
        // the rank is the last dot-separated word (the namespace before it may hold dots)
        if let Some(r) = stem.rsplit_once('.').and_then(|(_, r)| r.parse::<u32>().ok()) {
            let _ = fs::rename(e.path(), dir.join(format!("{to}.{r}")));
        }
    }
}

fn collect(ranks: u32, dir: &Path, log: &Path) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, Vec<u8>) {
    // A rank that printed nothing may have no file at all.
    let read = |p: PathBuf| fs::read(p).unwrap_or_default();
    let stdout = (0..ranks).map(|r| read(dir.join(format!("out.{r}")))).collect();
    let stderr = (0..ranks).map(|r| read(dir.join(format!("err.{r}")))).collect();
    (stdout, stderr, read(log.to_path_buf()))
}

/// The last lines of every rank's stdout and stderr and of the launcher's log, for messages.
pub fn tails(stdout: &[Vec<u8>], stderr: &[Vec<u8>], launcher: &[u8]) -> String {
    const LINES: usize = 8;
    let tail = |b: &[u8]| -> String {
        let s = String::from_utf8_lossy(b);
        let lines: Vec<&str> = s.lines().collect();
        let from = lines.len().saturating_sub(LINES);
        lines[from..].iter().map(|l| format!("    | {l}\n")).collect()
    };
    let mut out = String::new();
    for (r, (o, e)) in stdout.iter().zip(stderr).enumerate() {
        if !o.is_empty() {
            out += &format!("  rank {r} stdout (last lines):\n{}", tail(o));
        }
        if !e.is_empty() {
            out += &format!("  rank {r} stderr (last lines):\n{}", tail(e));
        }
    }
    if !launcher.is_empty() {
        out += &format!("  mpiexec output (last lines):\n{}", tail(launcher));
    }
    out
}

/// The `NAME=VALUE\0` entry of the job marker `marker` in a process's environment.
pub(crate) fn marker_needle(marker: &str) -> Vec<u8> {
    format!("{MARKER_VAR}={marker}\0").into_bytes()
}

/// Whether process `pid`'s environment holds `needle` (a [`marker_needle`]).
pub(crate) fn carries(pid: u32, needle: &[u8]) -> bool {
    fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
}

/// Kills `root`'s process group and every process of the job, repeating until all of them
/// are dead (a dying proxy may still fork). A process belongs to the job if it is `root`, carries
/// the job marker in its environment, or is the child of one that belongs: the marker alone is
/// not enough, as a process that is already exiting can no longer show its environment, and
/// the parent links alone are not either, as killing `mpiexec` orphans its proxies. Returns
/// "pid (comm)" of each process that was signalled.
fn kill_job(root: Option<u32>, marker: &str) -> Vec<String> {
    let needle = marker_needle(marker);
    let marked = |pid: u32| carries(pid, &needle);
    // (pid, start time): the start time guards against a PID being reused meanwhile
    let mut members: Vec<(u32, u64)> = Vec::new();
    let mut killed = Vec::new();
    if let Some(pid) = root {
        // SAFETY: plain syscall; the group is mpiexec's own (process_group(0)) and mpiexec is
        // not reaped yet, so neither its PID nor its group can have been reused.
        unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
    }
    for _ in 0..250 {
        let procs = scan_procs();
        let is_member = |members: &[(u32, u64)], pid: u32| procs.iter().any(|p| p.pid == pid && members.contains(&(p.pid, p.start)));
        // grow the member set to a fixpoint
        loop {
            let before = members.len();
            for p in &procs {
                if members.contains(&(p.pid, p.start)) || p.pid == std::process::id() {
                    continue;
                }
                if Some(p.pid) == root || is_member(&members, p.ppid) || (!p.dead && marked(p.pid)) {
                    members.push((p.pid, p.start));
                }
            }
            if members.len() == before {
                break;
            }
        }
        let alive: Vec<&Proc> = procs.iter().filter(|p| !p.dead && members.contains(&(p.pid, p.start))).collect();
        if alive.is_empty() {
            break;
        }
        kill_each(alive, &mut killed);
        std::thread::sleep(POLL);
    }
    killed
}

/// The resident memory, in bytes, of the job's live processes (those whose environment holds
/// the job marker): about what a checkpoint of it dumps, for the time it may take.
pub(crate) fn resident_bytes(marker: &str) -> u64 {
    let needle = marker_needle(marker);
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    scan_procs()
        .iter()
        .filter(|p| !p.dead)
        .filter(|p| carries(p.pid, &needle))
        .filter_map(|p| {
            // statm: size resident shared ... (pages)
            let statm = fs::read_to_string(format!("/proc/{}/statm", p.pid)).ok()?;
            statm.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum::<u64>()
        * page
}

/// SIGKILLs each process, by PID (each was seen alive and ours just now), and records
/// "pid (comm)" in `killed` once per process.
pub(crate) fn kill_each<'a>(procs: impl IntoIterator<Item = &'a Proc>, killed: &mut Vec<String>) {
    for p in procs {
        // SAFETY: plain syscall on a process identified as ours just now.
        unsafe { libc::kill(p.pid as libc::pid_t, libc::SIGKILL) };
        let name = format!("{} ({})", p.pid, p.comm);
        if !killed.contains(&name) {
            killed.push(name);
        }
    }
}

pub(crate) struct Proc {
    pub(crate) pid: u32,
    pub(crate) ppid: u32,
    /// start time in clock ticks since boot (field 22 of /proc/PID/stat)
    pub(crate) start: u64,
    pub(crate) comm: String,
    /// a zombie or dead task: it holds no resources but its PID, nothing left to kill
    pub(crate) dead: bool,
}

pub(crate) fn scan_procs() -> Vec<Proc> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may contain blanks and parentheses.
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let state = *rest.first()?;
        Some(Proc {
            pid,
            ppid: rest.get(1)?.parse().ok()?,
            start: rest.get(19)?.parse().ok()?,
            comm: stat[open + 1..close].to_string(),
            dead: state == "Z" || state == "X",
        })
    })
    .collect()
}
