//! One checkpoint of a program that is not one of `c-tests/` (MPICH's own test suite, see
//! `conformance/`): such a program has no step count, no pacing and no pause points, and
//! prints nothing before its end, so its checkpoint is asked for at a random instant counted
//! from the launch, drawn within a window the caller gives (a part of its native run time). A
//! checkpoint asked for before the program initialised MPI under mpicr is asked again every
//! 100 ms (as for `c-tests/`); a program that ends well (status 0) before any checkpoint
//! could be committed is reported as `Missed`, not as a failure: what was run is then only a
//! run under `mpicr run`, whose output the caller still judges. One that ends with another
//! status fails, with that status.
//!
//! What the program printed (per rank, over the launch and, for `stop`, the restart) comes
//! back for the caller to judge with the program's own rules; this module judges only what
//! belongs to mpicr: the checkpoint was committed as epoch 1, `mpicr restart` ended well,
//! nothing outlived `mpiexec`, nothing was left in /dev/shm (removed in any case).

use super::{concat, shm_entries, shm_orphans, Ctx, Planned, Resume, Rng, Trigger};
use crate::error::Error;
use crate::{job, Case, Flavor, Harness, JobOutput, Mode, Scratch, TestSpec};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What to run and checkpoint.
#[derive(Debug, Clone)]
pub struct Foreign {
    /// Names the case in messages and scratch directories, and with the seed fixes the
    /// random instant.
    pub id: String,
    pub flavor: Flavor,
    pub ranks: u32,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The program's own environment (every rank, every launch).
    pub env: Vec<(String, OsString)>,
    pub timeout: Duration,
    /// The checkpoint is asked for at a random instant in [0, window) after the launch.
    pub window: Duration,
    /// `--stop` and `mpicr restart` (else the job continues).
    pub stop: bool,
}

/// What the agent says when a checkpoint comes while the program is in MPI_Finalize: the
/// program was ending, as when it ends before the checkpoint (`ForeignRun::Missed`).
pub const FINALIZING: &str = "the program is finalizing MPI";

/// How a foreign checkpoint went.
#[derive(Debug)]
pub enum ForeignRun {
    /// The checkpoint was committed (and the restart ended well): the program's output over
    /// every launch, for the caller to judge.
    Done(JobOutput),
    /// The program ended by itself with status 0 before a checkpoint could be committed (or
    /// was in MPI_Finalize when it came): its output, for the caller to judge.
    Missed(JobOutput),
    /// Something of mpicr failed: the report (first line: what), with the story, the keepers'
    /// stderr, `mpicr status` and CRIU's logs.
    Failed(Error),
}

/// Runs `f` under `mpicr run` with one checkpoint at a random instant (seeded: `h.seed()`).
/// `oracle` is the program's native output (it goes into the report only).
pub fn checkpoint_foreign(h: &Harness, f: &Foreign, oracle: &JobOutput) -> ForeignRun {
    let (mpicr, shim) = match h.cli() {
        Ok(c) => c,
        Err(e) => return ForeignRun::Failed(e),
    };
    let scratch = match Scratch::new(&f.id, h.keep) {
        Ok(s) => s,
        Err(e) => return ForeignRun::Failed(e),
    };
    let (mpiexec, launcher) = match f.flavor.launcher(&h.root) {
        Ok(m) => m,
        Err(e) => return ForeignRun::Failed(e),
    };
    // The checkpoint machinery speaks of cases of c-tests/: this one, described as such.
    let case = Case {
        test: Arc::new(TestSpec {
            name: f.id.clone(),
            source: f.program.clone(),
            ranks: vec![f.ranks],
            args: f.args.clone(),
            long_args: None,
            long_args_for: BTreeMap::new(),
            timeout: Some(f.timeout),
            ckpt_ranks: vec![f.ranks],
            ckpt_modes: Vec::new(),
            ckpt_pace_us: 0,
            ckpt_pace_for: BTreeMap::new(),
            ckpt_files: Vec::new(),
        }),
        flavor: f.flavor,
        ranks: f.ranks,
        mode: if f.stop { Mode::StopRestart } else { Mode::CheckpointContinue },
    };
    let mut cx = Ctx {
        case: &case,
        program: f.program.clone(),
        args: f.args.clone(),
        oracle,
        mpiexec,
        launcher,
        ckdir: scratch.root().join("ckpt"),
        scratch,
        marker: job::new_marker(),
        mpicr,
        shim,
        steps: 0,
        rng: Rng::for_case(h.seed, &f.id),
        seed: h.seed,
        timeout: f.timeout,
        story: Vec::new(),
        launches: Vec::new(),
        checkpoints: 0,
        restarts: 0,
        fill_dir: None,
        extra_env: f.env.clone(),
    };
    let shm_before = shm_entries();
    let result = cx.foreign(f.window, f.stop);
    let orphans = shm_orphans(&shm_before);
    for o in &orphans {
        let _ = fs::remove_file(Path::new("/dev/shm").join(o));
    }
    match result {
        Ok(ForeignRun::Done(_)) if !orphans.is_empty() => {
            ForeignRun::Failed(cx.report(Error::Check(format!("files left behind in /dev/shm (removed): {}", orphans.join(", ")))))
        }
        Ok(run) => run,
        Err(e) => ForeignRun::Failed(cx.report(e)),
    }
}

impl Ctx<'_> {
    fn foreign(&mut self, window: Duration, stop: bool) -> Result<ForeignRun, Error> {
        let at = window.mul_f64(self.rng.unit());
        self.story.push(format!("random instant: {:.2} s after the launch (window {:.2} s)", at.as_secs_f64(), window.as_secs_f64()));
        let job = self.run_job(&[]);
        let l = self.launch("run", job, vec![Planned::new(Trigger::Since(at), stop)], Resume::Pauses);
        let l = match l {
            Ok(l) => l,
            // the program ended first (or was in MPI_Finalize when asked): it was only run
            // under `mpicr run`, and counts as missed only if it ended well by itself (the
            // caller judges its output); a crash is a failure, whatever it printed
            Err(e) if self.checkpoints == 0 && self.missed(&e) => {
                let (_, out) = self.launches.last().cloned().ok_or_else(|| Error::Check("no launch recorded".into()))?;
                if !out.status.success() {
                    return Err(e);
                }
                return Ok(ForeignRun::Missed(out));
            }
            Err(e) => return Err(e),
        };
        let epochs: Vec<u64> = l.taken.iter().map(|t| t.epoch).collect();
        if epochs != [1] {
            return Err(Error::Check(format!("run: the checkpoint was committed as epochs {epochs:?}, expected [1]")));
        }
        self.check_epochs(&[1])?;
        let out = if stop {
            let after = self.restart("restart", None, Resume::Pauses)?;
            concat(&l.out, &after)
        } else {
            l.out
        };
        // what the program left in its working directory is its own business, not mpicr's
        self.clear_workdir();
        Ok(ForeignRun::Done(out))
    }

    /// The launch ended by itself (not by a time limit) without a checkpoint: it ended
    /// before the planned one, or the checkpoint came while it was in MPI_Finalize (`e`: the
    /// launch's error).
    fn missed(&self, e: &Error) -> bool {
        let ended_first = self.story.iter().any(|l| l.contains("the job ended before the checkpoint planned"));
        let ended_by_itself = self.launches.last().is_some_and(|(label, _)| label == "run");
        ended_by_itself && (ended_first || e.to_string().contains(FINALIZING))
    }

    fn clear_workdir(&self) {
        if let Ok(d) = fs::read_dir(self.scratch.work()) {
            for e in d.flatten() {
                let p = e.path();
                let _ = if p.is_dir() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
            }
        }
    }
}
