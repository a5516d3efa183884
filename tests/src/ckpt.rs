//! The checkpoint modes: a test's `long-args` run under `mpicr run`, are checkpointed with
//! `mpicr checkpoint` (at a random instant, or at a pause point), restarted with
//! `mpicr restart` in new `mpiexec`s, and what every rank printed is compared with the native
//! run's output, byte for byte.
//!
//! - Every step of the program is paced (`MPICR_TEST_PACE_US`, the test's `ckpt-pace`, see
//!   `t_pace` in c-tests/common.h), so a run with S steps (the first of `long-args`) lasts at
//!   least S x pace whatever the machine, rank count and MPI build; a random instant is drawn
//!   within 0-60 % of that after every rank printed its first line (right after MPI_Init),
//!   hence always inside the run.
//! - Pause points (`MPICR_TEST_PAUSE_AT`, see `t_pause_point`) stop every rank at a known step
//!   with everything before it printed: a checkpoint taken there cuts each rank's output at a
//!   known byte offset, so a restart from that epoch must print exactly the native output
//!   after it. Random draws come from `MPICR_TEST_SEED` and the case name: a failure names its
//!   seed, and `MPICR_TEST_SEED=S` repeats its choices.
//! - All launches of one case share the scratch directory (restored ranks keep their working
//!   directory) and the job marker (restored ranks keep their environment), each writes its
//!   output to its own subdirectory, and every one is bounded by the test's time limit; the
//!   checkpoint directory is `<scratch>/ckpt`. At the end the working directory must be empty,
//!   no process may be left (`JobOutput::stray`) and no new file may be left in /dev/shm (what
//!   is left there is removed, also after a failure: a killed MPICH job leaves its segment).
//! - A failure says what happened step by step, with the first lines of the output diff, the
//!   keepers' stderr, `mpicr status`, and the tails of CRIU's `dump.log` and `restore.log`.

mod faults;
mod foreign;
mod soak;

pub use foreign::{checkpoint_foreign, Foreign, ForeignRun, FINALIZING};
pub use soak::soak;

use crate::error::Error;
use crate::{compare, diff, job, Case, Harness, Job, JobOutput, Launcher, Mode, Scratch};
use std::collections::{BTreeSet, VecDeque};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `mpicr checkpoint --timeout` at least; more for a job with much memory to dump
/// ([`checkpoint_timeout`]).
const CKPT_TIMEOUT: Duration = Duration::from_secs(30);
/// What a GiB of the job's resident memory adds to [`CKPT_TIMEOUT`]: CRIU wrote 4 GiB images
/// in 17 s per rank on this 2-core machine under load (pt2pt/large_message of MPICH's suite,
/// 3 ranks dumping at once), and the drain before the dumps moves messages of GBs.
const CKPT_PER_GIB: Duration = Duration::from_secs(10);
/// How much longer than its own timeout `mpicr checkpoint` (and `mpicr status`) may take
/// before it is killed.
const CMD_GRACE: Duration = Duration::from_secs(20);
/// A restart that must fail has this long to do so.
const BAD_RESTART_LIMIT: Duration = Duration::from_secs(30);
/// Answers of `mpicr checkpoint` that mean "the job is not ready yet": asked again 100 ms later
/// while the job runs, at most this many times.
const NOT_READY: [&str; 7] = [
    "has no coordinator.json",
    "is still restarting from epoch",
    "are not connected (not started yet",
    "has not initialised MPI under mpicr yet",
    "does not answer",
    "does not exist",
    "ended while the checkpoint was asked for",
];
const MAX_ASKS: u32 = 300;
/// Restored ranks keep their PIDs; one in use by an unrelated process makes a restart fail
/// with this message. The harness waits and tries again (the PID space here is small).
const PID_CLASH: &str = "in use by live processes";
const PID_CLASH_RETRIES: u32 = 3;

const PAUSED: &str = "mpicr-test-paused";
const RESUME: &str = "mpicr-test-resume";

/// `mpicr checkpoint --timeout` for a job with `resident` bytes of memory and `left` of its
/// launch's time limit: [`CKPT_TIMEOUT`], plus [`CKPT_PER_GIB`] per GiB (dumping and draining
/// take time in proportion), but ending [`CMD_GRACE`] before the launch's limit, since the
/// launch is ended there anyway and a checkpoint that fails should say why before that.
fn checkpoint_timeout(resident: u64, left: Duration) -> Duration {
    let gib = resident as f64 / (1u64 << 30) as f64;
    let t = (CKPT_TIMEOUT + CKPT_PER_GIB.mul_f64(gib)).min(left.saturating_sub(CMD_GRACE)).max(CKPT_TIMEOUT);
    // (whole seconds: the command line says them)
    Duration::from_secs(t.as_secs())
}

/// A seed from the clock and our PID, for runs without `MPICR_TEST_SEED`.
pub fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    splitmix(t ^ (u64::from(std::process::id()) << 32)) % 1_000_000_000
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    x ^ (x >> 31)
}

/// The random choices of one case: a function of the seed and the case name only.
struct Rng(u64);

impl Rng {
    fn for_case(seed: u64, id: &str) -> Rng {
        let h = id.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3));
        Rng(splitmix(seed ^ h))
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 = splitmix(self.0);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi] (integers).
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + ((hi - lo + 1) as f64 * self.unit()) as u64
    }
}

/// `mpicr` and `libmpicr.so` copied side by side into `target/ctests/mpicr.<pid>/` (the CLI
/// preloads the shim found next to it), so that one run of the matrix tests one build even if
/// they are rebuilt meanwhile, and restored ranks find the very library they had mapped.
pub struct CliCopy {
    dir: PathBuf,
    mpicr: PathBuf,
    shim: PathBuf,
}

impl Drop for CliCopy {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Harness {
    fn cli(&self) -> Result<(PathBuf, PathBuf), Error> {
        crate::once(&self.cli_copy, || {
            for (p, what) in [(&self.mpicr, "mpicr-cli --bin mpicr"), (&self.shim, "mpicr-face-mpich")] {
                if !p.is_file() {
                    return Err(Error::Missing(format!("{} does not exist: build it with `cargo build --release -p {what}`", p.display())));
                }
            }
            let dir = self.root.join("target/ctests").join(format!("mpicr.{}", std::process::id()));
            let copy = CliCopy { mpicr: dir.join("mpicr"), shim: dir.join("libmpicr.so"), dir };
            fs::create_dir_all(&copy.dir)
                .and_then(|_| fs::copy(&self.mpicr, &copy.mpicr))
                .and_then(|_| fs::copy(&self.shim, &copy.shim))
                .map_err(Error::io("copy mpicr and libmpicr.so to", &copy.dir))?;
            // The Open MPI face, which mpicr preloads for Open MPI programs, when built.
            if self.shim_ompi.is_file() {
                fs::copy(&self.shim_ompi, copy.dir.join("libmpicr_ompi.so")).map_err(Error::io("copy", &self.shim_ompi))?;
            }
            if self.shim_abi.is_file() {
                fs::copy(&self.shim_abi, copy.dir.join("libmpicr_abi.so")).map_err(Error::io("copy", &self.shim_abi))?;
            }
            Ok(copy)
        })
        .map(|c| (c.mpicr.clone(), c.shim.clone()))
    }
}

/// Runs a case in a checkpoint mode; `oracle` is the native run with the same arguments.
pub(crate) fn run_case(h: &Harness, case: &Case, program: &Path, args: &[String], oracle: &JobOutput) -> Result<(), Error> {
    run_case_seeded(h, case, program, args, oracle, h.seed).verdict
}

/// What one case did: its verdict, and how many checkpoints it committed and restarts it ran
/// to their end (also when it failed).
pub(crate) struct Ran {
    pub verdict: Result<(), Error>,
    pub checkpoints: u64,
    pub restarts: u64,
}

/// `run_case` with the random choices drawn from `seed` (the soak gives each run its own).
pub(crate) fn run_case_seeded(h: &Harness, case: &Case, program: &Path, args: &[String], oracle: &JobOutput, seed: u64) -> Ran {
    let (mpicr, shim) = match h.cli() {
        Ok(c) => c,
        Err(e) => return Ran { verdict: Err(e), checkpoints: 0, restarts: 0 },
    };
    let steps: Result<u64, Error> =
        args.first().and_then(|a| a.parse().ok()).ok_or_else(|| Error::Invalid(format!("{}: the first of long-args is not a step count", case.test.name)));
    let setup = steps.and_then(|s| {
        let mpiexec = case.flavor.launcher(&h.root)?;
        Ok((s, Scratch::new(&case.id(), h.keep)?, mpiexec))
    });
    let (steps, scratch, (mpiexec, launcher)) = match setup {
        Ok(x) => x,
        Err(e) => return Ran { verdict: Err(e), checkpoints: 0, restarts: 0 },
    };
    let mut cx = Ctx {
        case,
        program: program.to_path_buf(),
        args: crate::spec::expand_args(args, &scratch.work()),
        oracle,
        mpiexec,
        launcher,
        ckdir: scratch.root().join("ckpt"),
        scratch,
        marker: job::new_marker(),
        mpicr,
        shim,
        steps,
        rng: Rng::for_case(seed, &case.id()),
        seed,
        timeout: h.timeout_of(case),
        story: Vec::new(),
        launches: Vec::new(),
        checkpoints: 0,
        restarts: 0,
        fill_dir: None,
        extra_env: case.flavor.ckpt_env(&h.root),
    };
    let shm_before = shm_entries();
    let verdict = match case.mode {
        Mode::CheckpointContinue => cx.continue_mode(),
        Mode::StopRestart => cx.stop_restart(),
        Mode::TwoEpochsOlder => cx.older_epoch(),
        Mode::RestartTwice => cx.restart_twice(),
        Mode::RestartErrors => cx.restart_errors(),
        Mode::Renewals => cx.renewals(),
        Mode::Faults => cx.faults(),
        m => Err(Error::Check(format!("{m} is not a checkpoint mode"))),
    }
    .and_then(|()| cx.check_workdir());
    // after a failure too: files the case's jobs left in /dev/shm are removed
    let orphans = shm_orphans(&shm_before);
    for o in &orphans {
        let _ = fs::remove_file(Path::new("/dev/shm").join(o));
    }
    let verdict = match verdict {
        // jobs SIGKILLed on purpose may leave MPICH's segments: not mpicr's doing
        Ok(()) if !orphans.is_empty() && case.mode == Mode::Faults => {
            cx.story.push(format!("removed what the killed jobs left in /dev/shm: {}", orphans.join(", ")));
            Ok(())
        }
        Ok(()) if !orphans.is_empty() => Err(Error::Check(format!("files left behind in /dev/shm (removed): {}", orphans.join(", ")))),
        Err(e) if !orphans.is_empty() => Err(Error::Check(format!("{e}\n  (removed what its jobs left in /dev/shm: {})", orphans.join(", ")))),
        v => v,
    };
    if verdict.is_ok() && std::env::var("MPICR_TEST_VERBOSE").is_ok_and(|v| !v.is_empty() && v != "0") {
        let mut s = String::new();
        for line in &cx.story {
            let _ = writeln!(s, "  {}: {line}", case.id());
        }
        print!("{s}");
    }
    Ran { verdict: verdict.map_err(|e| cx.report(e)), checkpoints: cx.checkpoints, restarts: cx.restarts }
}

/// A checkpoint to take during a launch.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    /// this long after every rank printed its first line (`t_init`, after MPI_Init)
    After(Duration),
    /// this long after the launch started: for programs that print nothing before their end
    /// (MPICH's test suite, `foreign`); a checkpoint asked for before MPI_Init is asked again
    Since(Duration),
    /// at the next pause point
    Pause,
    /// at the pause the job is in, which it stays in afterwards (many checkpoints of one pause)
    Held,
}

#[derive(Debug, Clone, Copy)]
struct Planned {
    trigger: Trigger,
    stop: bool,
    /// A fault injected into this checkpoint, which is then expected to fail: its answer is
    /// recorded (`Driver::answers`) for the case to judge, and the launch goes on.
    fault: Fault,
}

impl Planned {
    fn new(trigger: Trigger, stop: bool) -> Planned {
        Planned { trigger, stop, fault: Fault::None }
    }
}

/// A fault injected into a checkpoint (the faults mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// SIGKILL this process as soon as CRIU runs under a keeper (the dump has begun).
    Kill(Victim),
    /// Fill the file system of `Driver::fill_dir` to 256 KiB before asking, and empty it again
    /// once the checkpoint answered.
    Fill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    /// the program of the last rank
    Program,
    /// the keeper of the last rank
    Keeper,
    /// the keeper of rank 0, which hosts the coordinator
    Coordinator,
}

impl Victim {
    fn name(self) -> &'static str {
        match self {
            Victim::Program => "the program of the last rank",
            Victim::Keeper => "the keeper of the last rank",
            Victim::Coordinator => "the keeper of rank 0 (the coordinator)",
        }
    }
}

/// A checkpoint the driver took.
#[derive(Debug, Clone)]
struct Taken {
    epoch: u64,
    /// For a checkpoint at a pause that let the job go on: each rank's stdout size at the cut.
    cut: Option<Vec<u64>>,
}

enum State {
    Idle,
    /// ask (again) at this time
    Waiting {
        at: Instant,
        asks: u32,
    },
    Asking {
        child: Child,
        since: Instant,
        out: PathBuf,
        asks: u32,
        /// the command's `--timeout`
        timeout: Duration,
    },
    /// after a checkpoint at a pause: waiting for the output files to stop growing
    Settling {
        epoch: u64,
        last: Vec<u64>,
        stable: u32,
        since: Instant,
    },
}

/// Acts on a running launch, called every 20 ms by `job::run_in`: takes the planned
/// checkpoints in order, resumes pauses (every pause it does not checkpoint at once), and
/// records what happened.
struct Driver<'a> {
    mpicr: &'a Path,
    ckdir: &'a Path,
    /// this launch's output directory (`out.R`)
    io: &'a Path,
    label: &'a str,
    ranks: u32,
    plan: VecDeque<Planned>,
    /// the launch restores an epoch taken at a pause: let it go on at once
    resume_first: bool,
    started: Option<Instant>,
    /// when every rank had printed something
    ready: Option<Instant>,
    state: State,
    /// a resume file was written and the program has not taken it yet
    resuming: bool,
    /// resume pauses nobody checkpoints at; off once the job was stopped (its pause flag stays
    /// for the restart), and for launches that must not restore anything
    auto_resume: bool,
    taken: Vec<Taken>,
    failure: Option<String>,
    story: Vec<String>,
    seq: u32,
    /// the job marker of this launch's processes (to find its keepers for `Fault::Kill`)
    marker: &'a str,
    /// the program, whose name tells its processes from CRIU's under a keeper
    program: &'a Path,
    /// the file system `Fault::Fill` fills
    fill_dir: Option<PathBuf>,
    /// what `mpicr checkpoint` said for each checkpoint with a fault, in order
    answers: Vec<String>,
    /// the `Fault::Kill` of the current checkpoint is done (or was given up)
    struck: bool,
    /// the launch's time limit (`Job::timeout`), which bounds every checkpoint's timeout
    limit: Duration,
}

impl<'a> Driver<'a> {
    fn new(mpicr: &'a Path, ckdir: &'a Path, io: &'a Path, label: &'a str, ranks: u32, plan: Vec<Planned>) -> Driver<'a> {
        Driver {
            marker: "",
            program: Path::new(""),
            fill_dir: None,
            answers: Vec::new(),
            struck: false,
            limit: Duration::MAX,
            mpicr,
            ckdir,
            io,
            label,
            ranks,
            plan: plan.into(),
            resume_first: false,
            started: None,
            ready: None,
            state: State::Idle,
            resuming: false,
            auto_resume: true,
            taken: Vec::new(),
            failure: None,
            story: Vec::new(),
            seq: 0,
        }
    }

    fn at(&self) -> String {
        let t = self.started.map(|s| s.elapsed()).unwrap_or_default();
        format!("{}@{:.2}s", self.label, t.as_secs_f64())
    }

    fn note(&mut self, what: String) {
        let at = self.at();
        self.story.push(format!("{at}: {what}"));
    }

    fn resume(&mut self, work: &Path) -> Result<(), Error> {
        let path = work.join(RESUME);
        fs::write(&path, b"").map_err(Error::io("write the resume file", &path))?;
        self.resuming = true;
        Ok(())
    }

    fn ask(&mut self, asks: u32) -> Result<State, Error> {
        let p = self.plan.front().copied().expect("a planned checkpoint");
        self.seq += 1;
        let out = self.io.join(format!("checkpoint-{}-{}.txt", self.seq, if p.stop { "stop" } else { "continue" }));
        let file = fs::File::create(&out).map_err(Error::io("create", &out))?;
        let file2 = file.try_clone().map_err(Error::io("duplicate the descriptor of", &out))?;
        let mut cmd = Command::new(self.mpicr);
        cmd.arg("checkpoint");
        if p.stop {
            cmd.arg("--stop");
        }
        let left = self.limit.saturating_sub(self.started.map(|s| s.elapsed()).unwrap_or_default());
        let timeout = checkpoint_timeout(crate::job::resident_bytes(self.marker), left);
        cmd.arg("--timeout").arg(format!("{}s", timeout.as_secs())).arg(self.ckdir).stdin(Stdio::null()).stdout(file).stderr(file2);
        if p.fault == Fault::Fill && asks == 1 {
            self.fill()?;
        }
        self.struck = false;
        let child = cmd.spawn().map_err(Error::spawn(self.mpicr.display()))?;
        if asks == 1 {
            let stop = if p.stop { " --stop" } else { "" };
            let what =
                if timeout > CKPT_TIMEOUT { format!("mpicr checkpoint{stop} --timeout {}s", timeout.as_secs()) } else { format!("mpicr checkpoint{stop}") };
            self.note(what);
        }
        Ok(State::Asking { child, since: Instant::now(), out, asks, timeout })
    }

    fn poll(&mut self, work: &Path) -> Result<(), Error> {
        let now = Instant::now();
        self.started.get_or_insert(now);
        if self.resume_first {
            self.resume_first = false;
            self.note("resumed the restored pause".into());
            self.resume(work)?;
        }
        if self.resuming {
            if work.join(RESUME).exists() {
                return Ok(()); // the program has not taken it yet
            }
            self.resuming = false;
        }
        let paused = work.join(PAUSED).exists();
        let timed = self.plan.iter().any(|p| matches!(p.trigger, Trigger::After(_)));
        if timed && self.ready.is_none() && out_sizes(self.io, self.ranks).iter().all(|&n| n > 0) {
            self.ready = Some(now);
            self.note("every rank has printed its first line".into());
        }
        self.state = match std::mem::replace(&mut self.state, State::Idle) {
            State::Idle => match self.plan.front().map(|p| p.trigger) {
                Some(Trigger::Pause) if paused => {
                    self.note("paused".into());
                    self.ask(1)?
                }
                Some(Trigger::Held) if paused => self.ask(1)?,
                Some(Trigger::After(d)) if self.ready.is_some_and(|r| now - r >= d) => self.ask(1)?,
                Some(Trigger::Since(d)) if self.started.is_some_and(|s| now - s >= d) => self.ask(1)?,
                _ => {
                    if paused && self.auto_resume {
                        // a pause nobody checkpoints at (e.g. a later one reached again after
                        // a restart from an earlier epoch)
                        self.note("paused; resumed".into());
                        self.resume(work)?;
                    }
                    State::Idle
                }
            },
            State::Waiting { at, asks } if now >= at => self.ask(asks)?,
            s @ State::Waiting { .. } => s,
            State::Asking { mut child, since, out, asks, timeout } => {
                if let Some(Fault::Kill(v)) = self.plan.front().map(|p| p.fault) {
                    if !self.struck {
                        self.strike(v, &mut child);
                    }
                }
                match child.try_wait() {
                    Ok(None) if since.elapsed() > timeout + CMD_GRACE => {
                        let _ = child.kill();
                        let _ = child.wait();
                        self.give_up(work, paused, format!("`mpicr checkpoint` did not finish within {} s (killed)", (timeout + CMD_GRACE).as_secs()))?
                    }
                    Ok(None) => State::Asking { child, since, out, asks, timeout },
                    Ok(Some(status)) => self.answered(work, paused, status, &out, asks)?,
                    Err(e) => self.give_up(work, paused, format!("waiting for `mpicr checkpoint`: {e}"))?,
                }
            }
            State::Settling { epoch, last, stable, since } => {
                let sizes = out_sizes(self.io, self.ranks);
                let stable = if sizes == last { stable + 1 } else { 0 };
                if stable >= 25 && since.elapsed() >= Duration::from_millis(600) {
                    self.note(format!("cut of epoch {epoch} at stdout bytes {sizes:?}; resumed"));
                    self.taken.push(Taken { epoch, cut: Some(sizes) });
                    self.resume(work)?;
                    State::Idle
                } else {
                    State::Settling { epoch, last: sizes, stable, since }
                }
            }
        };
        Ok(())
    }

    fn answered(&mut self, work: &Path, paused: bool, status: ExitStatus, out: &Path, asks: u32) -> Result<State, Error> {
        let text = fs::read_to_string(out).unwrap_or_default();
        if let Some(p) = self.plan.front().copied().filter(|p| p.fault != Fault::None) {
            // a checkpoint with a fault: what it said is for the case to judge
            self.plan.pop_front();
            if p.fault == Fault::Fill {
                self.unfill();
            }
            self.note(format!("`mpicr checkpoint` answered ({status}): {}", one_line(&text)));
            self.answers.push(text);
            return Ok(State::Idle);
        }
        if status.success() {
            let p = self.plan.pop_front().expect("a planned checkpoint");
            let Some(epoch) = text.lines().find_map(|l| l.strip_prefix("epoch:")).and_then(|e| e.trim().parse().ok()) else {
                return self.give_up(work, paused, format!("`mpicr checkpoint` succeeded but printed no epoch:\n{text}"));
            };
            self.note(format!("epoch {epoch} committed: {}", one_line(&text)));
            if matches!(p.trigger, Trigger::Held) && !p.stop {
                self.taken.push(Taken { epoch, cut: None });
                return Ok(State::Idle);
            }
            if matches!(p.trigger, Trigger::Pause) && !p.stop {
                let last = out_sizes(self.io, self.ranks);
                return Ok(State::Settling { epoch, last, stable: 0, since: Instant::now() });
            }
            if p.stop {
                self.auto_resume = false; // the job ends; a restart resumes the pause
            }
            self.taken.push(Taken { epoch, cut: None });
            return Ok(State::Idle);
        }
        if asks < MAX_ASKS && NOT_READY.iter().any(|m| text.contains(m)) {
            if asks == 1 {
                self.note(format!("not ready, asking again every 100 ms: {}", one_line(&text)));
            }
            return Ok(State::Waiting { at: Instant::now() + Duration::from_millis(100), asks: asks + 1 });
        }
        self.give_up(work, paused, format!("`mpicr checkpoint` failed ({status}): {}", text.trim_end()))
    }

    /// `Fault::Kill`: waits (up to 10 s, while `mpicr checkpoint` runs) for CRIU to run under
    /// one of the job's keepers, then SIGKILLs the victim.
    fn strike(&mut self, victim: Victim, child: &mut Child) {
        self.struck = true;
        let needle = format!("{}={}\0", job::MARKER_VAR, self.marker).into_bytes();
        let name: String = self.program.file_name().map(|n| n.to_string_lossy().chars().take(15).collect()).unwrap_or_default();
        let mut keepers: Vec<(u32, u32)> = Vec::new(); // (rank, pid)
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            let procs = job::scan_procs();
            if keepers.len() < self.ranks as usize {
                keepers = procs
                    .iter()
                    .filter(|p| p.comm == "mpicr" && !p.dead)
                    .filter_map(|p| {
                        let env = fs::read(format!("/proc/{}/environ", p.pid)).ok()?;
                        if !env.windows(needle.len()).any(|w| w == needle.as_slice()) {
                            return None;
                        }
                        // Hydra's PMI_RANK, or Open MPI's PMIX_RANK (ORTE and PRRTE)
                        let rank = env
                            .split(|&b| b == 0)
                            .find_map(|v| v.strip_prefix(b"PMI_RANK=").or_else(|| v.strip_prefix(b"PMIX_RANK=")))
                            .and_then(|r| std::str::from_utf8(r).ok()?.parse().ok())?;
                        Some((rank, p.pid))
                    })
                    .collect();
                keepers.sort_unstable();
            }
            let criu = procs.iter().find(|p| !p.dead && p.comm != name && p.comm != "mpicr-init" && keepers.iter().any(|k| k.1 == p.ppid));
            if let (Some(c), Some(&first), Some(&last)) = (criu, keepers.first(), keepers.last()) {
                let target = match victim {
                    // The keeper's child, or the child of the init of its PID namespace.
                    Victim::Program => {
                        procs.iter().find(|p| p.comm == name && (p.ppid == last.1 || procs.iter().any(|q| q.pid == p.ppid && q.ppid == last.1))).map(|p| p.pid)
                    }
                    Victim::Keeper => Some(last.1),
                    Victim::Coordinator => Some(first.1),
                };
                let what = format!("CRIU ({} {}) runs under keeper {}", c.pid, c.comm, c.ppid);
                match target {
                    Some(pid) => {
                        // SAFETY: plain syscall on a process of this job found just now.
                        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                        self.note(format!("{what}: SIGKILLed {} (pid {pid})", victim.name()));
                    }
                    None => self.note(format!("{what}, but {} was not found", victim.name())),
                }
                return;
            }
            if matches!(child.try_wait(), Ok(Some(_))) {
                self.note("`mpicr checkpoint` ended before CRIU was seen: nothing was killed".into());
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.note("CRIU was not seen within 10 s: nothing was killed".into());
    }

    /// `Fault::Fill`: a file taking all but 256 KiB of the free space of `fill_dir`.
    fn fill(&mut self) -> Result<(), Error> {
        let dir = self.fill_dir.clone().ok_or_else(|| Error::Check("no file system to fill".into()))?;
        let free = free_bytes(&dir)?;
        let size = free.saturating_sub(256 << 10);
        let path = dir.join("filler");
        let f = fs::File::create(&path).map_err(Error::io("create", &path))?;
        use std::os::fd::AsRawFd;
        // SAFETY: plain syscall on a file we own.
        let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, size as libc::off_t) };
        if rc != 0 {
            return Err(Error::Check(format!("cannot fill {}: {}", dir.display(), std::io::Error::last_os_error())));
        }
        let left = free_bytes(&dir)?;
        self.note(format!("filled {}: {left} bytes left", dir.display()));
        Ok(())
    }

    fn unfill(&mut self) {
        if let Some(dir) = &self.fill_dir {
            let _ = fs::remove_file(dir.join("filler"));
        }
    }

    /// A checkpoint failed: no more are taken, and a paused job is let go on (so that its
    /// output shows whether it survived).
    fn give_up(&mut self, work: &Path, paused: bool, why: String) -> Result<State, Error> {
        self.note(why.clone());
        self.failure.get_or_insert(why);
        self.plan.clear();
        if paused {
            self.resume(work)?;
        }
        Ok(State::Idle)
    }

    /// After the launch ended: waits for a checkpoint command still running, and says which
    /// planned checkpoints were not taken.
    fn finish(&mut self, work: &Path) {
        if let State::Asking { mut child, since, out, asks, timeout } = std::mem::replace(&mut self.state, State::Idle) {
            let status = loop {
                match child.try_wait() {
                    Ok(Some(s)) => break Some(s),
                    Ok(None) if since.elapsed() > timeout + CMD_GRACE => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break None;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                    Err(_) => break None,
                }
            };
            let text = fs::read_to_string(&out).unwrap_or_default();
            let plain = self.plan.front().is_some_and(|p| p.fault == Fault::None);
            match status {
                // the job ended while the command was asking it (no coordinator any more, or
                // not ready yet): the checkpoint was not taken, which is said below
                Some(s) if !s.success() && plain && NOT_READY.iter().any(|m| text.contains(m)) => {
                    self.note(format!("`mpicr checkpoint` found no job to checkpoint any more: {}", one_line(&text)));
                }
                Some(s) => {
                    let _ = self.answered(work, false, s, &out, MAX_ASKS.max(asks));
                }
                None => {
                    let _ = self.give_up(work, false, "`mpicr checkpoint` did not finish (killed)".into());
                }
            }
        }
        if let State::Settling { epoch, .. } = self.state {
            self.failure.get_or_insert(format!("the job ended while paused after epoch {epoch} (it should have waited)"));
        }
        if let Some(p) = self.plan.front() {
            let when = match p.trigger {
                Trigger::After(d) => format!("{:.2} s after every rank printed", d.as_secs_f64()),
                Trigger::Since(d) => format!("{:.2} s after the launch", d.as_secs_f64()),
                Trigger::Pause | Trigger::Held => "at a pause point".to_string(),
            };
            let msg = format!(
                "the job ended before the checkpoint planned {when} was taken (it ran {:.2} s)",
                self.started.map(|s| s.elapsed()).unwrap_or_default().as_secs_f64()
            );
            self.note(msg.clone());
            self.failure.get_or_insert(msg);
        }
    }
}

/// Each rank's stdout size so far.
/// `MPICR_TEST_RENEWALS=BEFORE,AFTER`: checkpoints before and after the restart in the
/// renewals mode.
fn renewal_counts() -> Result<(u64, u64), Error> {
    let v = std::env::var("MPICR_TEST_RENEWALS").unwrap_or_else(|_| "25,10".into());
    let parsed = v.split_once(',').and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
    parsed.filter(|&(a, _)| a > 0).ok_or_else(|| Error::Invalid(format!("MPICR_TEST_RENEWALS={v}: expected BEFORE,AFTER (two counts, BEFORE > 0)")))
}

/// Bytes of the files of one epoch's images.
fn epoch_bytes(ckdir: &Path, epoch: u64) -> u64 {
    fn walk(p: &Path) -> u64 {
        let Ok(rd) = fs::read_dir(p) else { return 0 };
        rd.flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => walk(&e.path()),
                Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                _ => 0,
            })
            .sum()
    }
    walk(&ckdir.join(format!("epoch-{epoch:06}")))
}

fn out_sizes(io: &Path, ranks: u32) -> Vec<u64> {
    (0..ranks).map(|r| fs::metadata(job::rank_stdout(io, r)).map(|m| m.len()).unwrap_or(0)).collect()
}

/// Bytes free for us in the file system of `dir`.
fn free_bytes(dir: &Path) -> Result<u64, Error> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|e| Error::Invalid(format!("{}: {e}", dir.display())))?;
    // SAFETY: a plain C struct, for which all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs fills the struct we pass; the path is a valid C string.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(Error::io("statvfs", dir)(std::io::Error::last_os_error()));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One case in a checkpoint mode.
struct Ctx<'a> {
    case: &'a Case,
    program: PathBuf,
    args: Vec<String>,
    oracle: &'a JobOutput,
    mpiexec: PathBuf,
    /// how `mpiexec` takes its options (Hydra; Open MPI 5's `mpirun` for `ompi5`)
    launcher: Launcher,
    ckdir: PathBuf,
    scratch: Scratch,
    marker: String,
    mpicr: PathBuf,
    shim: PathBuf,
    steps: u64,
    rng: Rng,
    seed: u64,
    timeout: Duration,
    /// what happened, in order, for the report
    story: Vec<String>,
    /// (label, output) of every launch, for the report
    launches: Vec<(String, JobOutput)>,
    /// checkpoints committed and restarts that ended well (the soak's counts)
    checkpoints: u64,
    restarts: u64,
    /// what `Fault::Fill` fills (the faults mode's tmpfs)
    fill_dir: Option<PathBuf>,
    /// more environment for every rank of every launch (the flavor's `ckpt_env`; a foreign
    /// program's own, `foreign`)
    extra_env: Vec<(String, OsString)>,
}

/// How a launch treats pauses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// resume every pause that is not planned for a checkpoint
    Pauses,
    /// the same, and first of all the pause the restored epoch was taken at
    First,
    /// never (a restart that must fail restores nothing)
    Never,
}

/// What a launch under a driver gave.
struct Launched {
    out: JobOutput,
    taken: Vec<Taken>,
    /// what `mpicr checkpoint` said for each checkpoint with a fault
    answers: Vec<String>,
}

impl<'a> Ctx<'a> {
    fn ranks(&self) -> u32 {
        self.case.ranks
    }

    fn rank_env(&self) -> Vec<(String, OsString)> {
        let mut env = vec![
            ("MPICR_TEST_PACE_US".into(), self.case.test.ckpt_pace(self.case.ranks).to_string().into()),
            ("MPICR_SHIM".into(), self.shim.clone().into_os_string()),
        ];
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// A random instant inside the run: 0-60 % of its shortest possible duration after MPI_Init.
    fn random_instant(&mut self) -> Duration {
        let least = Duration::from_micros(self.steps * self.case.test.ckpt_pace(self.case.ranks));
        let at = least.mul_f64(0.6 * self.rng.unit());
        self.story.push(format!(
            "random instant: {:.2} s after every rank printed its first line (the run lasts at least {:.2} s from there)",
            at.as_secs_f64(),
            least.as_secs_f64()
        ));
        at
    }

    /// `n` increasing pause steps spread over 15-80 % of the run.
    fn pause_steps(&mut self, n: u64) -> Vec<u64> {
        let (lo, hi) = (self.steps * 15 / 100, self.steps * 80 / 100);
        let width = (hi - lo) / n;
        let steps: Vec<u64> = (0..n).map(|k| self.rng.between(lo + k * width, lo + (k + 1) * width - 1)).collect();
        self.story.push(format!("pause steps: {steps:?} of {}", self.steps));
        steps
    }

    /// Launches `job` under a driver with `plan`, records it, and requires the checkpoints to
    /// have been taken and the launch to have ended well (exit status 0, nothing left running).
    fn launch(&mut self, label: &str, job: Job, plan: Vec<Planned>, resume: Resume) -> Result<Launched, Error> {
        let io = self.scratch.root().join(label);
        let mut d = Driver::new(&self.mpicr, &self.ckdir, &io, label, job.ranks, plan);
        d.marker = &self.marker;
        d.limit = job.timeout;
        d.program = &self.program;
        d.fill_dir = self.fill_dir.clone();
        d.resume_first = resume == Resume::First;
        d.auto_resume = resume != Resume::Never;
        let result = job::run_in(&job, &self.scratch, &io, &self.marker, &mut |work| d.poll(work));
        d.finish(&self.scratch.work());
        d.unfill();
        let (story, taken, failure, answers) = (std::mem::take(&mut d.story), std::mem::take(&mut d.taken), d.failure.take(), std::mem::take(&mut d.answers));
        self.story.extend(story);
        self.checkpoints += taken.len() as u64;
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                let text = e.to_string();
                self.story.push(format!("{label}: {}", text.lines().next().unwrap_or("")));
                return Err(match failure {
                    // what went wrong first, then what became of the job
                    Some(f) => Error::Check(format!("{label}: {f}; then the job {text}")),
                    None => e.context(label),
                });
            }
        };
        self.story.push(format!("{label}: ended with {} after {:.2} s", out.status, out.elapsed.as_secs_f64()));
        self.launches.push((label.to_string(), out.clone()));
        if let Some(f) = failure {
            // A job that then failed by itself says so: a checkpoint it ended before (or that
            // was refused) must not hide a crash.
            if !out.status.success() {
                return Err(Error::Check(format!("{label}: {f}; then the job ended with {}", out.status)));
            }
            return Err(Error::Check(format!("{label}: {f}")));
        }
        if !out.stray.is_empty() {
            return Err(Error::Check(format!("{label}: processes outlived mpiexec (killed): {}", out.stray.join(", "))));
        }
        Ok(Launched { out, taken, answers })
    }

    fn run_job(&self, pause_at: &[u64]) -> Job {
        let mut wrapper: Vec<OsString> = vec![self.mpicr.clone().into(), "run".into(), "--ckpt-dir".into()];
        wrapper.push(self.ckdir.clone().into());
        wrapper.push("--".into());
        let mut rank_env = self.rank_env();
        if !pause_at.is_empty() {
            let list: Vec<String> = pause_at.iter().map(u64::to_string).collect();
            rank_env.push(("MPICR_TEST_PAUSE_AT".into(), list.join(",").into()));
        }
        Job {
            mpiexec: self.mpiexec.clone(),
            launcher: self.launcher,
            ranks: self.ranks(),
            wrapper,
            program: self.program.clone(),
            args: self.args.clone(),
            rank_env,
            timeout: self.timeout,
        }
    }

    fn restart_job(&self, ranks: u32, dir: &Path, epoch: Option<u64>, timeout: Duration) -> Job {
        let mut args = vec!["restart".to_string(), dir.to_string_lossy().into_owned()];
        if let Some(e) = epoch {
            args.push("--epoch".into());
            args.push(e.to_string());
        }
        Job {
            mpiexec: self.mpiexec.clone(),
            launcher: self.launcher,
            ranks,
            wrapper: Vec::new(),
            program: self.mpicr.clone(),
            args,
            rank_env: self.rank_env(),
            timeout,
        }
    }

    /// The first launch: `mpicr run` with `plan`; requires exit status 0 and output that
    /// the native output begins with.
    fn first_run(&mut self, pause_at: &[u64], plan: Vec<Planned>) -> Result<Launched, Error> {
        let job = self.run_job(pause_at);
        let planned = plan.len() as u64;
        let l = self.launch("run", job, plan, Resume::Pauses)?;
        if !l.out.status.success() {
            return Err(Error::Check(format!("run: exited with {} (a checkpointed job must end with 0)", l.out.status)));
        }
        let epochs: Vec<u64> = l.taken.iter().map(|t| t.epoch).collect();
        if epochs != (1..=planned).collect::<Vec<_>>() {
            return Err(Error::Check(format!("run: the checkpoints were committed as epochs {epochs:?}, expected 1 to {planned}")));
        }
        Ok(l)
    }

    /// `mpicr restart` of the whole job (from `epoch`, else the latest), which must end well;
    /// tried again when a restored PID is in use by an unrelated process.
    fn restart(&mut self, label: &str, epoch: Option<u64>, resume: Resume) -> Result<JobOutput, Error> {
        for attempt in 1..=PID_CLASH_RETRIES + 1 {
            let name = if attempt == 1 { label.to_string() } else { format!("{label}-try{attempt}") };
            let job = self.restart_job(self.ranks(), &self.ckdir, epoch, self.timeout);
            let l = self.launch(&name, job, Vec::new(), resume)?;
            let clash = l.out.stderr.iter().any(|e| String::from_utf8_lossy(e).contains(PID_CLASH));
            if clash && attempt <= PID_CLASH_RETRIES && !l.out.status.success() {
                self.story.push(format!("{name}: a restored PID is in use by another process; trying again in 2 s"));
                std::thread::sleep(Duration::from_secs(2));
                continue;
            }
            if !l.out.status.success() {
                return Err(Error::Check(format!("{name}: `mpicr restart` exited with {}", l.out.status)));
            }
            self.restarts += 1;
            return Ok(l.out);
        }
        unreachable!()
    }

    /// The epochs `mpicr status` reports complete must be exactly `want`.
    fn check_epochs(&mut self, want: &[u64]) -> Result<(), Error> {
        let (ok, text) = bounded(Command::new(&self.mpicr).arg("status").arg(&self.ckdir), CMD_GRACE);
        if !ok {
            return Err(Error::Check(format!("`mpicr status` failed:\n{text}")));
        }
        let complete: Vec<u64> = text
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let epoch = w.next()?.parse().ok()?;
                (w.next()? == "complete").then_some(epoch)
            })
            .collect();
        if complete != want {
            return Err(Error::Check(format!("`mpicr status` lists complete epochs {complete:?}, expected {want:?}:\n{text}")));
        }
        self.story.push(format!("mpicr status: complete epochs {complete:?}"));
        Ok(())
    }

    fn continue_mode(&mut self) -> Result<(), Error> {
        let at = self.random_instant();
        let l = self.first_run(&[], vec![Planned::new(Trigger::After(at), false)])?;
        if let Some(d) = compare(self.oracle, &l.out) {
            return Err(Error::Mismatch(format!("the checkpointed run differs from the native run: {d}")));
        }
        self.check_epochs(&[1])
    }

    fn stop_restart(&mut self) -> Result<(), Error> {
        let at = self.random_instant();
        let run = self.first_run(&[], vec![Planned::new(Trigger::After(at), true)])?.out;
        self.check_prefix("run", &run)?;
        self.check_epochs(&[1])?;
        let after = self.restart("restart", None, Resume::Pauses)?;
        let whole = concat(&run, &after);
        match compare(self.oracle, &whole) {
            None => Ok(()),
            Some(d) => Err(Error::Mismatch(format!("output before the stop + output after the restart differs from the native run: {d}"))),
        }
    }

    fn older_epoch(&mut self) -> Result<(), Error> {
        let pauses = self.pause_steps(2);
        let plan = vec![Planned::new(Trigger::Pause, false), Planned::new(Trigger::Pause, true)];
        let l = self.first_run(&pauses, plan)?;
        self.check_prefix("run", &l.out)?;
        let cut = l.taken.first().and_then(|t| t.cut.clone()).ok_or_else(|| Error::Check("epoch 1 has no recorded cut".into()))?;
        self.check_epochs(&[1, 2])?;
        let after = self.restart("restart-epoch1", Some(1), Resume::First)?;
        self.check_remainder("restart --epoch 1", &cut, &after)
    }

    fn restart_twice(&mut self) -> Result<(), Error> {
        let pause = self.pause_steps(1);
        let run = self.first_run(&pause, vec![Planned::new(Trigger::Pause, true)])?.out;
        self.check_prefix("run", &run)?;
        let cut = out_lengths(&run);
        self.check_epochs(&[1])?;
        let first = self.restart("restart1", None, Resume::First)?;
        self.check_remainder("first restart", &cut, &first)?;
        let second = self.restart("restart2", Some(1), Resume::First)?;
        self.check_remainder("second restart (--epoch 1)", &cut, &second)
    }

    /// The renewal torture: `before` checkpoints (continue) of one pause, `--stop`, a restart
    /// taking `after` more at the same pause, then the rest of the run. Every renewal must
    /// succeed, the output must equal the native one, and the last epoch's images must be no
    /// larger than the first's (plus a little slack for the shim's own state).
    fn renewals(&mut self) -> Result<(), Error> {
        let (before, after) = renewal_counts()?;
        let pause = self.pause_steps(1);
        let held = |n: u64, stop_last: bool| -> Vec<Planned> { (0..n).map(|k| Planned::new(Trigger::Held, stop_last && k + 1 == n)).collect() };
        let run = self.first_run(&pause, held(before + 1, true))?.out;
        self.check_prefix("run", &run)?;
        let job = self.restart_job(self.ranks(), &self.ckdir, None, self.timeout);
        let l = self.launch("restart", job, held(after, false), Resume::Pauses)?;
        if !l.out.status.success() {
            return Err(Error::Check(format!("restart: `mpicr restart` exited with {}", l.out.status)));
        }
        let epochs: Vec<u64> = l.taken.iter().map(|t| t.epoch).collect();
        let want: Vec<u64> = (before + 2..before + 2 + after).collect();
        if epochs != want {
            return Err(Error::Check(format!("restart: the checkpoints were committed as epochs {epochs:?}, expected {want:?}")));
        }
        if let Some(d) = compare(self.oracle, &concat(&run, &l.out)) {
            return Err(Error::Mismatch(format!("output before the stop + output after the restart differs from the native run: {d}")));
        }
        let sizes: Vec<(u64, u64)> = (1..before + 2 + after).map(|e| (e, epoch_bytes(&self.ckdir, e))).collect();
        // The baseline is the first epoch taken after a renewal (epoch 2): the program's own
        // heap grows once when a second copy of the library is brought up next to its state.
        let first = sizes.get(1).or(sizes.first()).map_or(0, |s| s.1);
        let largest = sizes.iter().max_by_key(|s| s.1).copied().unwrap_or_default();
        self.story.push(format!(
            "image bytes per epoch: epoch 1 {}, epoch 2 {first}, last {}, largest {} (epoch {})",
            sizes.first().map_or(0, |s| s.1),
            sizes.last().map_or(0, |s| s.1),
            largest.1,
            largest.0
        ));
        // Slack: the shim's own state and CRIU's bookkeeping vary a little between epochs.
        if largest.1 > first + first / 10 + (1 << 20) {
            return Err(Error::Check(format!("images grow with the number of epochs: epoch 2 has {first} bytes, epoch {} has {}", largest.0, largest.1)));
        }
        Ok(())
    }

    fn restart_errors(&mut self) -> Result<(), Error> {
        let pause = self.pause_steps(1);
        let run = self.first_run(&pause, vec![Planned::new(Trigger::Pause, true)])?.out;
        self.check_prefix("run", &run)?;
        let cut = out_lengths(&run);
        self.check_epochs(&[1])?;
        let n = self.ranks();
        let ckdir = self.ckdir.clone();
        let mut bad: Vec<(String, u32, PathBuf, Option<u64>, String)> =
            vec![("too-many-ranks".into(), n + 1, ckdir.clone(), None, format!("has {n} rank(s), but the launcher started {}", n + 1))];
        if n > 1 {
            bad.push(("too-few-ranks".into(), n - 1, ckdir.clone(), None, format!("has {n} rank(s), but the launcher started {}", n - 1)));
        }
        bad.push(("missing-epoch".into(), n, ckdir.clone(), Some(7), "epoch 7 does not exist".into()));
        let missing = self.scratch.root().join("no-such-ckpt");
        bad.push(("missing-dir".into(), n, missing.clone(), None, format!("checkpoint directory {} does not exist", missing.display())));
        let empty = self.scratch.root().join("not-a-ckpt");
        fs::create_dir_all(&empty).map_err(Error::io("create", &empty))?;
        bad.push(("not-a-ckpt-dir".into(), n, empty.clone(), None, "is not a checkpoint directory".into()));
        for (label, ranks, dir, epoch, want) in bad {
            self.bad_restart(&label, ranks, &dir, epoch, &want)?;
        }
        let _ = fs::remove_dir(&empty);
        for name in self.case.test.ckpt_files.clone() {
            self.file_errors(&name)?;
        }
        // the checkpoint is intact: a good restart still works
        let after = self.restart("restart", None, Resume::First)?;
        self.check_remainder("restart after the bad ones", &cut, &after)
    }

    /// An MPI file the program had open at the checkpoint (`ckpt-files`), removed and then
    /// truncated before a restart: each restart must fail naming it, with its size at the
    /// checkpoint; the file is put back afterwards.
    fn file_errors(&mut self, name: &str) -> Result<(), Error> {
        let path = self.scratch.work().join(name);
        let aside = self.scratch.root().join(format!("{name}.saved"));
        let size = fs::metadata(&path).map_err(Error::io("read the size of", &path))?.len();
        fs::copy(&path, &aside).map_err(Error::io("copy", &path))?;
        fs::remove_file(&path).map_err(Error::io("remove", &path))?;
        let (n, ckdir) = (self.ranks(), self.ckdir.clone());
        let removed = self.bad_restart(
            &format!("{name}-removed"),
            n,
            &ckdir,
            None,
            &format!("the MPI file {}, open in the program at the checkpoint ({size} bytes then), cannot be opened again", path.display()),
        );
        let put_back = || fs::copy(&aside, &path).map(|_| ()).map_err(Error::io("put back", &path));
        put_back()?;
        removed?;
        let short = size / 2;
        fs::OpenOptions::new().write(true).open(&path).and_then(|f| f.set_len(short)).map_err(Error::io("truncate", &path))?;
        let truncated = self.bad_restart(
            &format!("{name}-truncated"),
            n,
            &ckdir,
            None,
            &format!("the MPI file {}, open in the program at the checkpoint, has {short} bytes, fewer than the {size} it had then", path.display()),
        );
        put_back()?;
        let _ = fs::remove_file(&aside);
        truncated.map(|_| ())
    }

    /// A restart that must fail, restoring nothing, with an error containing `want` (on a
    /// rank's stderr or mpiexec's output): returns the line that says it.
    fn bad_restart(&mut self, label: &str, ranks: u32, dir: &Path, epoch: Option<u64>, want: &str) -> Result<String, Error> {
        let job = self.restart_job(ranks, dir, epoch, BAD_RESTART_LIMIT);
        let out = match self.launch(label, job, Vec::new(), Resume::Never) {
            Ok(l) => l.out,
            Err(e) => return Err(Error::Check(format!("a bad restart did not fail cleanly: {e}"))),
        };
        if out.status.success() {
            return Err(Error::Check(format!("{label}: `mpicr restart` succeeded (expected an error containing `{want}`)")));
        }
        if out.stdout.iter().any(|o| !o.is_empty()) {
            return Err(Error::Check(format!("{label}: a rank printed on stdout, so something was restored")));
        }
        let said: String = out.stderr.iter().chain(std::iter::once(&out.launcher)).map(|b| String::from_utf8_lossy(b).into_owned()).collect();
        let Some(first) = said.lines().find(|l| l.contains(want)) else {
            return Err(Error::Check(format!("{label}: the error does not say `{want}`; stderr and mpiexec said:\n{}", indent(&said))));
        };
        let first = first.trim().to_string();
        self.story.push(format!("{label}: {} with `{first}`", out.status));
        Ok(first)
    }

    /// Each rank's output of a launch that was stopped must be the start of its native output.
    fn check_prefix(&self, label: &str, out: &JobOutput) -> Result<(), Error> {
        stopped_prefix(self.oracle, label, out)
    }

    /// A restart from an epoch cut at `cut` must print the native output after the cut.
    fn check_remainder(&self, label: &str, cut: &[u64], after: &JobOutput) -> Result<(), Error> {
        let expected = remainder(self.oracle, cut)?;
        match compare(&expected, after) {
            None => Ok(()),
            Some(d) => {
                Err(Error::Mismatch(format!("the output of the {label} differs from the native output after the cut (line numbers count from the cut): {d}")))
            }
        }
    }

    /// Nothing left in the working directory.
    fn check_workdir(&self) -> Result<(), Error> {
        let mut left: Vec<String> = fs::read_dir(self.scratch.work())
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned())).collect())
            .unwrap_or_default();
        left.sort();
        if !left.is_empty() {
            return Err(Error::Check(format!("files left behind in the working directory: {}", left.join(", "))));
        }
        Ok(())
    }

    /// The failure message: the summary, the seed, what happened, and the launches' stderr,
    /// `mpicr status` and the CRIU logs.
    fn report(&self, e: Error) -> Error {
        let summary = e.to_string();
        let summary = summary.as_str();
        let mut s = String::new();
        let (head, rest) = summary.split_once('\n').unwrap_or((summary, ""));
        let _ = writeln!(s, "{head}");
        let _ = writeln!(s, "  (random choices from MPICR_TEST_SEED={}; pacing {} us per step)", self.seed, self.case.test.ckpt_pace(self.case.ranks));
        if !rest.is_empty() {
            let _ = writeln!(s, "{}", rest.trim_end());
        }
        let _ = writeln!(s, "  what happened:");
        for line in &self.story {
            let _ = writeln!(s, "    {line}");
        }
        for (label, out) in &self.launches {
            let no_stdout = vec![Vec::new(); out.stderr.len()];
            let t = job::tails(&no_stdout, &out.stderr, &out.launcher);
            if !t.is_empty() {
                let _ = writeln!(s, "  {label} ({}):", out.status);
                s += &t;
            }
        }
        if self.ckdir.is_dir() {
            let (_, text) = bounded(Command::new(&self.mpicr).arg("status").arg(&self.ckdir), CMD_GRACE);
            let _ = writeln!(s, "  mpicr status:\n{}", indent(&text));
            s += &criu_logs(&self.ckdir);
        }
        Error::Reported { report: s, cause: Box::new(e) }
    }
}

/// Checks that a stopped launch printed, on every rank, a proper start of the native output:
/// the same bytes, and not all of them (every rank's last line comes after the stop).
fn stopped_prefix(native: &JobOutput, label: &str, out: &JobOutput) -> Result<(), Error> {
    for (r, (native, got)) in native.stdout.iter().zip(&out.stdout).enumerate() {
        if !native.starts_with(got) {
            let end = native.len().min(got.len());
            let d = diff::line_diff(&native[..end], got).unwrap_or_default();
            return Err(Error::Mismatch(format!(
                "{label}: rank {r}'s output before the stop is not the start of its native output\n\
                 rank {r} stdout (- native, first {end} bytes; + {label}):\n{d}"
            )));
        }
        if got.len() == native.len() {
            return Err(Error::Mismatch(format!("{label}: rank {r} printed all of its native output although the job was stopped before its end")));
        }
    }
    Ok(())
}

/// The native output after the cut (`cut[r]` bytes of rank r's stdout).
fn remainder(native: &JobOutput, cut: &[u64]) -> Result<JobOutput, Error> {
    if cut.len() != native.stdout.len() {
        return Err(Error::Check(format!("a cut of {} ranks for a job of {}", cut.len(), native.stdout.len())));
    }
    let mut expected = native.clone();
    for (r, (out, &at)) in expected.stdout.iter_mut().zip(cut).enumerate() {
        let at = at as usize;
        if at > out.len() {
            return Err(Error::Mismatch(format!("rank {r}: the cut ({at} bytes) is beyond the native output ({} bytes)", out.len())));
        }
        out.drain(..at);
    }
    Ok(expected)
}

/// Each rank's stdout length (where a stopped launch cut it).
fn out_lengths(out: &JobOutput) -> Vec<u64> {
    out.stdout.iter().map(|o| o.len() as u64).collect()
}

/// Two launches as one job: outputs concatenated per rank, the second one's status and files.
fn concat(first: &JobOutput, second: &JobOutput) -> JobOutput {
    let join = |a: &[Vec<u8>], b: &[Vec<u8>]| -> Vec<Vec<u8>> { a.iter().zip(b).map(|(x, y)| [x.as_slice(), y.as_slice()].concat()).collect() };
    JobOutput {
        status: second.status,
        stdout: join(&first.stdout, &second.stdout),
        stderr: join(&first.stderr, &second.stderr),
        launcher: [first.launcher.as_slice(), second.launcher.as_slice()].concat(),
        leftovers: second.leftovers.clone(),
        stray: first.stray.iter().chain(&second.stray).cloned().collect(),
        elapsed: first.elapsed + second.elapsed,
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    | {l}\n")).collect()
}

/// Runs `cmd` with its output in a pipe, killing it after `limit`: (success, stdout+stderr).
fn bounded(cmd: &mut Command, limit: Duration) -> (bool, String) {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("mpicr-ctest-cmd-{}-{}", std::process::id(), job::new_marker()));
    let mut run = || -> Result<(bool, String), Error> {
        let f = fs::File::create(&path).map_err(Error::io("create", &path))?;
        let f2 = f.try_clone().map_err(Error::io("duplicate the descriptor of", &path))?;
        let program = format!("{cmd:?}");
        let mut child = cmd.stdin(Stdio::null()).stdout(f).stderr(f2).spawn().map_err(Error::spawn(program))?;
        let t = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if t.elapsed() > limit => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(Error::os("waiting for a command")(e)),
            }
        };
        let text = fs::read_to_string(&path).unwrap_or_default();
        Ok(match status {
            Some(s) => (s.success(), text),
            None => (false, format!("{text}(killed after {} s)", limit.as_secs())),
        })
    };
    let r = run();
    let _ = fs::remove_file(&path);
    r.unwrap_or_else(|e| (false, e.to_string()))
}

/// The last lines of CRIU's logs in every epoch and rank directory, error lines first.
fn criu_logs(ckdir: &Path) -> String {
    const LINES: usize = 8;
    let mut s = String::new();
    let mut epochs: Vec<PathBuf> = fs::read_dir(ckdir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    epochs.retain(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("epoch-")));
    epochs.sort();
    for e in epochs {
        if let Ok(failed) = fs::read_to_string(e.join("FAILED")) {
            let _ = writeln!(s, "  {}/FAILED:\n{}", e.display(), indent(&failed));
        }
        let mut ranks: Vec<PathBuf> = fs::read_dir(&e).map(|d| d.filter_map(|x| x.ok().map(|x| x.path())).collect()).unwrap_or_default();
        ranks.retain(|p| p.is_dir());
        ranks.sort();
        for r in ranks {
            for log in ["dump.log", "restore.log"] {
                let Ok(text) = fs::read_to_string(r.join(log)) else {
                    continue;
                };
                let lines: Vec<&str> = text.lines().collect();
                let errors: Vec<&str> = lines.iter().copied().filter(|l| l.contains("Error")).take(LINES).collect();
                let tail = &lines[lines.len().saturating_sub(LINES)..];
                let _ = writeln!(s, "  {} ({} lines):", r.join(log).display(), lines.len());
                if !errors.is_empty() {
                    let _ = writeln!(s, "    errors:");
                    s += &indent(&errors.join("\n"));
                    let _ = writeln!(s, "    last lines:");
                }
                s += &indent(&tail.join("\n"));
            }
        }
    }
    s
}

/// Files that appeared in /dev/shm since `before` and that no process holds: left behind (by
/// this case's jobs: another job on this machine that is still running holds its files).
pub fn shm_orphans(before: &BTreeSet<String>) -> Vec<String> {
    let new: Vec<String> = shm_entries().difference(before).cloned().collect();
    if new.is_empty() {
        return new;
    }
    std::thread::sleep(Duration::from_millis(300));
    let held = held_paths();
    new.into_iter()
        .filter(|n| {
            let p = format!("/dev/shm/{n}");
            Path::new(&p).exists() && !held.contains(&p)
        })
        .collect()
}

/// What /dev/shm holds now.
pub fn shm_entries() -> BTreeSet<String> {
    fs::read_dir("/dev/shm").map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned())).collect()).unwrap_or_default()
}

/// Every /dev/shm path some process has open or mapped.
fn held_paths() -> BTreeSet<String> {
    let mut held = BTreeSet::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return held;
    };
    for p in procs.filter_map(|e| e.ok()) {
        let dir = p.path();
        if !p.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(fds) = fs::read_dir(dir.join("fd")) {
            for fd in fds.filter_map(|e| e.ok()) {
                if let Ok(t) = fs::read_link(fd.path()) {
                    held.insert(t.to_string_lossy().trim_end_matches(" (deleted)").to_string());
                }
            }
        }
        if let Ok(maps) = fs::read_to_string(dir.join("maps")) {
            for l in maps.lines() {
                if let Some(i) = l.find("/dev/shm/") {
                    held.insert(l[i..].trim_end_matches(" (deleted)").to_string());
                }
            }
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_timeout_grows_with_memory_within_the_launch() {
        let gib = 1u64 << 30;
        let s = Duration::from_secs;
        // small jobs: the fixed minimum, also when the launch has little time left
        assert_eq!(checkpoint_timeout(100 << 20, s(600)), CKPT_TIMEOUT);
        assert_eq!(checkpoint_timeout(0, s(5)), CKPT_TIMEOUT);
        // 13 GiB (pt2pt/large_message, 3 ranks): 30 + 130 s, or what the launch has left
        assert_eq!(checkpoint_timeout(13 * gib, s(600)), s(160));
        assert_eq!(checkpoint_timeout(13 * gib, s(85)), s(65));
        assert_eq!(checkpoint_timeout(13 * gib, Duration::MAX), s(160));
    }

    #[test]
    fn random_choices_depend_on_seed_and_case_only() {
        let a: Vec<f64> = (0..4)
            .map({
                let mut r = Rng::for_case(7, "x/mpich4/np2/continue");
                move |_| r.unit()
            })
            .collect();
        let b: Vec<f64> = (0..4)
            .map({
                let mut r = Rng::for_case(7, "x/mpich4/np2/continue");
                move |_| r.unit()
            })
            .collect();
        assert_eq!(a, b);
        assert!(a.iter().all(|&u| (0.0..1.0).contains(&u)));
        let mut c = Rng::for_case(8, "x/mpich4/np2/continue");
        assert_ne!(a[0], c.unit());
        let mut r = Rng::for_case(1, "y");
        for _ in 0..1000 {
            let v = r.between(10, 12);
            assert!((10..=12).contains(&v));
        }
    }

    fn output(ranks: &[&str]) -> JobOutput {
        JobOutput {
            status: std::os::unix::process::ExitStatusExt::from_raw(0),
            stdout: ranks.iter().map(|s| s.as_bytes().to_vec()).collect(),
            stderr: vec![Vec::new(); ranks.len()],
            launcher: Vec::new(),
            leftovers: Vec::new(),
            stray: Vec::new(),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn stopped_output_must_be_a_proper_start_of_the_native_one() {
        let native = output(&["a\nb\nPASS\n", "x\ny\nPASS\n"]);
        assert!(stopped_prefix(&native, "run", &output(&["a\n", "x\ny\n"])).is_ok());
        assert!(stopped_prefix(&native, "run", &output(&["", ""])).is_ok());
        let e = stopped_prefix(&native, "run", &output(&["a\n", "x\nz\n"])).unwrap_err();
        assert!(e.to_string().contains("rank 1's output before the stop"), "{e}");
        assert!(e.to_string().contains("+ z"), "{e}");
        // a job that ran to its end was not stopped
        let e = stopped_prefix(&native, "run", &output(&["a\n", "x\ny\nPASS\n"])).unwrap_err();
        assert!(e.to_string().contains("rank 1 printed all"), "{e}");
    }

    #[test]
    fn restart_output_is_compared_with_the_native_remainder() {
        let native = output(&["a\nb\nPASS\n", "x\ny\nPASS\n"]);
        let rest = remainder(&native, &[2, 4]).unwrap();
        assert_eq!(rest.stdout, vec![b"b\nPASS\n".to_vec(), b"PASS\n".to_vec()]);
        assert!(compare(&rest, &output(&["b\nPASS\n", "PASS\n"])).is_none());
        // a restart that starts over, or repeats a line printed before the cut, differs
        assert!(compare(&rest, &output(&["a\nb\nPASS\n", "PASS\n"])).is_some());
        assert!(compare(&rest, &output(&["b\nPASS\n", "y\nPASS\n"])).is_some());
        assert!(remainder(&native, &[2]).is_err());
        assert!(remainder(&native, &[2, 99]).is_err());
    }

    #[test]
    fn files_left_in_dev_shm_are_found_unless_held() {
        let before = shm_entries();
        let name = format!("mpicr-tests-orphan-{}", std::process::id());
        let path = Path::new("/dev/shm").join(&name);
        let held = fs::File::create(&path).unwrap();
        let found = shm_orphans(&before);
        drop(held);
        let orphans = shm_orphans(&before);
        let _ = fs::remove_file(&path);
        assert!(!found.contains(&name), "a file open in this process counts as held");
        assert!(orphans.contains(&name), "{orphans:?}");
        assert!(!shm_orphans(&before).contains(&name));
    }

    #[test]
    fn concatenation_and_lengths() {
        let out = |s: &str| JobOutput {
            status: std::os::unix::process::ExitStatusExt::from_raw(0),
            stdout: vec![s.as_bytes().to_vec(), Vec::new()],
            stderr: vec![Vec::new(), b"e".to_vec()],
            launcher: Vec::new(),
            leftovers: Vec::new(),
            stray: Vec::new(),
            elapsed: Duration::ZERO,
        };
        let c = concat(&out("a\n"), &out("b\n"));
        assert_eq!(c.stdout[0], b"a\nb\n");
        assert_eq!(c.stderr[1], b"ee");
        assert_eq!(out_lengths(&c), vec![4, 0]);
    }
}
