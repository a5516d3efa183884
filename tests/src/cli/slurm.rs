//! Under Slurm (issue 11, items 1-3), on the local one-node cluster of `scripts/slurm-local.sh`
//! (started here when it is not running, and stopped again at the end): a 2-rank
//! `c-tests/ckpt_ring.c` on Debian's MPICH 4.0.2 launched by `srun --mpi=pmi2` (PMI-1 on
//! `PMI_FD`, served by Slurm's pmi2 plugin, relayed by each keeper) runs, checkpoints and
//! continues (so does the MPICH 5 wheel's), stops and restarts under a new srun job; a job stopped under srun restarts under
//! Hydra and one stopped under Hydra restarts under srun; and a batch job with a 1-minute limit
//! (`mpicr run --resume-if-any --stop-before 45s`, the script resubmitting itself until the job
//! has ended) runs to the end across allocations. Every output equals the native run's. Skipped,
//! with the reason, where Slurm is not installed or cannot start.

use super::paused::{self, ring_with_oracle, same_output, Pause, ITERS};
use super::xlib::wait_for;
use super::{CaseFn, LIMIT, T};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub fn cases() -> Vec<CaseFn> {
    vec![CaseFn {
        name: "slurm",
        cases: &[
            "srun-run",
            "srun-continue",
            "srun-mpich5-continue",
            "srun-stop-restart-srun",
            "srun-to-hydra",
            "hydra-to-srun",
            "sbatch-time-limit-two-allocations",
        ],
        run: slurm,
    }]
}

/// Starts the local Slurm unless it runs (stopped again when the guard is dropped, if started
/// here) and exports its `SLURM_CONF`; `None` (every case left skipped with the reason) when
/// Slurm is not installed or cannot start.
pub(super) fn up(t: &mut T) -> Option<Cluster> {
    if !["srun", "sbatch", "slurmd", "slurmctld", "munged"].iter().all(|b| super::find_in_path(b)) {
        t.skip_rest("Slurm is not installed (make deps installs slurm-wlm and munge)");
        return None;
    }
    let script = t.env.root.join("scripts/slurm-local.sh");
    let mut cluster = Cluster { script: script.clone(), started: false };
    let mut c = Command::new(&script);
    c.arg("status").stdin(std::process::Stdio::null());
    let up_already = c.output().is_ok_and(|o| o.status.success());
    if !up_already {
        let mut c = t.cmd(&script);
        // The daemons outlive this command by design: not marked as this function's.
        c.env_remove(crate::job::MARKER_VAR).arg("up");
        let (rc, out) = t.out(c, Duration::from_secs(120));
        cluster.started = true;
        if rc != 0 {
            // The script's own line says what failed (the daemons' log lines follow it).
            let why = out.lines().find(|l| l.starts_with("slurm-local:")).or(out.lines().last()).unwrap_or("").to_string();
            t.skip_rest(format!("the local Slurm cannot start: {why}"));
            return None;
        }
    }
    let conf = std::env::var("MPICR_SLURM_DIR").unwrap_or_else(|_| "/tmp/mpicr-slurm".into());
    t.export("SLURM_CONF", &format!("{conf}/slurm.conf"));
    Some(cluster)
}

/// Stops the local Slurm at the end when this function started it.
pub(super) struct Cluster {
    script: PathBuf,
    started: bool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.started {
            let _ = Command::new(&self.script).arg("down").stdin(std::process::Stdio::null()).output();
        }
    }
}

/// `srun --mpi=pmi2 -n 2 -t 5`.
fn srun(t: &T) -> Command {
    let mut c = t.cmd("srun");
    c.args(["--mpi=pmi2", "-n", "2", "-t", "5"]);
    c
}

fn slurm(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4, t.env.is_root, t.env.shim_built], "needs MPICH 4, criu, root and libmpicr.so") {
        return;
    }
    let Some(cluster) = up(t) else { return };

    let (prog, oracle) = match ring_with_oracle(t, "ring_slurm") {
        Ok(x) => x,
        Err(e) => return t.skip_rest(&e),
    };
    let m = t.env.m.clone();

    // A plain run, to its end (ENDED records it).
    let d0 = t.p("ck-run");
    let mut c = srun(t);
    c.arg(&m).args(["run", "--ckpt-dir"]).arg(&d0).arg("--").arg(&prog).arg(ITERS);
    let (o, e) = (t.p("run.out"), t.p("run.err"));
    let rc = t.to(c, Some(&o), Some(&e), LIMIT);
    let same = same_output(&[&o], &oracle);
    t.check("srun-run", rc == 0 && same.is_ok() && d0.join("ENDED").exists(), |_| {
        format!("rc={rc}; {}; {}", same.as_ref().err().map(ToString::to_string).unwrap_or_default(), super::tail(&e, 8))
    });

    srun_continue(t, "srun-continue", &prog, &oracle, "continue");
    mpich5_continue(t);
    chain_srun_srun_hydra(t, &prog, &oracle);
    hydra_to_srun(t, &prog, &oracle);
    batch(t, &prog, &oracle);
    drop(cluster);
}

/// `paused::start` with the mpicr under test.
fn start(t: &T, c: Command, pause: &Pause, at: &str, args: &[&std::ffi::OsStr], out: &str) -> (super::Bg, PathBuf, PathBuf) {
    paused::start(t, c, pause, at, &t.env.m, args, out)
}

/// The MPICH 5 wheel (PMI-1 on PMI_FD too, by default) under srun: checkpoint and continue.
fn mpich5_continue(t: &mut T) {
    let name = "srun-mpich5-continue";
    if !t.env.have5 {
        return t.skip(name, "the MPICH 5 wheel is not installed (.deps/mpich5)");
    }
    let (prog, oracle) = match paused::ring_with_oracle_on(t, 5, "ring_slurm5") {
        Ok(x) => x,
        Err(e) => return t.skip(name, e),
    };
    srun_continue(t, name, &prog, &oracle, "mpich5");
}

/// Under srun, paused at 20: `mpicr checkpoint`, then on to the end (one epoch, native output).
fn srun_continue(t: &mut T, name: &str, prog: &Path, oracle: &str, tag: &str) {
    let d = t.p(&format!("ck-{tag}"));
    let pause = Pause::new(t, tag);
    let args = ["run".as_ref(), "--ckpt-dir".as_ref(), d.as_os_str(), "--".as_ref(), prog.as_os_str(), ITERS.as_ref()];
    let (mut job, o, e) = start(t, srun(t), &pause, "20", &args, tag);
    let (rcc, ck) = if pause.wait() { t.ckpt(&d, &[]) } else { (1, "the job never paused".into()) };
    let resumed = pause.resume();
    let rc = job.wait(LIMIT);
    let same = same_output(&[&o], oracle);
    t.check(name, rcc == 0 && resumed && rc == 0 && same.is_ok() && t.epochs_complete(&d) == 1, |_| {
        format!("checkpoint rc={rcc} {ck}; job rc={rc}; {}; {}", same.as_ref().err().map(ToString::to_string).unwrap_or_default(), super::tail(&e, 8))
    });
}

/// srun run, stopped at 20; srun restart (another Slurm job), stopped at 40; Hydra restart to
/// the end.
fn chain_srun_srun_hydra(t: &mut T, prog: &Path, oracle: &str) {
    let d = t.p("ck-chain");
    let pause = Pause::new(t, "chain");
    let run = [d.as_os_str(), "--".as_ref(), prog.as_os_str(), ITERS.as_ref()];
    let mut args: Vec<&std::ffi::OsStr> = vec!["run".as_ref(), "--ckpt-dir".as_ref()];
    args.extend(run);
    let (mut j1, o1, e1) = start(t, srun(t), &pause, "20,40", &args, "chain-1");
    let (rs1, c1) = if pause.wait() { t.ckpt(&d, &["--stop"]) } else { (1, "the job never paused".into()) };
    let rc1 = j1.wait(LIMIT);
    if rs1 != 0 || rc1 != 0 {
        let why = format!("srun run/stop: rc={rs1}/{rc1} {c1}; {}", super::tail(&e1, 8));
        t.bad("srun-stop-restart-srun", why.clone());
        return t.bad("srun-to-hydra", why);
    }
    let (mut j2, o2, e2) = start(t, srun(t), &pause, "20,40", &["restart".as_ref(), d.as_os_str()], "chain-2");
    let again = pause.resume() && pause.wait();
    let (rs2, c2) = if again { t.ckpt(&d, &["--stop"]) } else { (1, "the restored job never paused at 40".into()) };
    let rc2 = j2.wait(LIMIT);
    t.check("srun-stop-restart-srun", again && rs2 == 0 && rc2 == 0, |_| format!("srun restart: stop rc={rs2} {c2}; job rc={rc2}; {}", super::tail(&e2, 8)));
    if rs2 != 0 || rc2 != 0 {
        return t.bad("srun-to-hydra", "the srun restart failed");
    }
    let (mut j3, o3, e3) = start(t, t.mpi(4, 2), &pause, "20,40", &["restart".as_ref(), d.as_os_str()], "chain-3");
    let resumed = pause.resume();
    let rc3 = j3.wait(LIMIT);
    let same = same_output(&[&o1, &o2, &o3], oracle);
    t.check("srun-to-hydra", resumed && rc3 == 0 && same.is_ok(), |_| {
        format!("Hydra restart rc={rc3}; {}; {}", same.as_ref().err().map(ToString::to_string).unwrap_or_default(), super::tail(&e3, 8))
    });
}

/// Hydra run, stopped at 20; srun restart to the end.
fn hydra_to_srun(t: &mut T, prog: &Path, oracle: &str) {
    let d = t.p("ck-h2s");
    let pause = Pause::new(t, "h2s");
    let args = ["run".as_ref(), "--ckpt-dir".as_ref(), d.as_os_str(), "--".as_ref(), prog.as_os_str(), ITERS.as_ref()];
    let (mut j1, o1, e1) = start(t, t.mpi(4, 2), &pause, "20", &args, "h2s-1");
    let (rs, c1) = if pause.wait() { t.ckpt(&d, &["--stop"]) } else { (1, "the job never paused".into()) };
    let rc1 = j1.wait(LIMIT);
    if rs != 0 || rc1 != 0 {
        return t.bad("hydra-to-srun", format!("Hydra run/stop: rc={rs}/{rc1} {c1}; {}", super::tail(&e1, 8)));
    }
    let (mut j2, o2, e2) = start(t, srun(t), &pause, "20", &["restart".as_ref(), d.as_os_str()], "h2s-2");
    let resumed = pause.resume();
    let rc2 = j2.wait(LIMIT);
    let same = same_output(&[&o1, &o2], oracle);
    t.check("hydra-to-srun", resumed && rc2 == 0 && same.is_ok(), |_| {
        format!("srun restart rc={rc2}; {}; {}", same.as_ref().err().map(ToString::to_string).unwrap_or_default(), super::tail(&e2, 8))
    });
}

/// The batch pattern of packaging/sbatch-example.sh with a 1-minute limit: the job is stopped
/// 45 s before it (about 15 s in), the script resubmits itself, the next allocation resumes.
fn batch(t: &mut T, prog: &Path, oracle: &str) {
    let name = "sbatch-time-limit-two-allocations";
    let dir = t.p("batch");
    let _ = std::fs::create_dir_all(&dir);
    let script = dir.join("job.sh");
    let text = format!(
        r#"#!/bin/bash
#SBATCH --ntasks=2 --time=1 --open-mode=append --output={dir}/job.out --error={dir}/job.err
ck={dir}/ck
echo "$SLURM_JOB_ID" >> {dir}/allocations
srun --mpi=pmi2 {m} run --resume-if-any --stop-before 45s --ckpt-dir "$ck" -- {prog} {iters}
# Stopped for the time limit (the job has not ended): the next job resumes it.
[ -e "$ck/ENDED" ] || sbatch --dependency=afterany:"$SLURM_JOB_ID" {script} >/dev/null
"#,
        dir = dir.display(),
        m = t.env.m.display(),
        prog = prog.display(),
        iters = ITERS,
        script = script.display()
    );
    if std::fs::write(&script, text).is_err() {
        return t.bad(name, "cannot write the batch script");
    }
    // Paced: 64 iterations of 400 ms, about 26 s, so that the stop falls in the middle.
    let mut c = t.cmd("sbatch");
    c.env("MPICR_TEST_PACE_US", "400000").arg(&script);
    let (rc, out) = t.out(c, LIMIT);
    if rc != 0 {
        return t.bad(name, format!("sbatch rc={rc}: {out}"));
    }
    let ended = dir.join("ck/ENDED");
    let done = wait_for(|| ended.exists(), Duration::from_secs(240));
    // Then the last allocation's output is written once its job has ended.
    let quiet = wait_for(
        || {
            let mut c = t.cmd("squeue");
            c.args(["-h", "-o", "%i", "-n", "job.sh"]);
            t.stdout_of(c).trim().is_empty()
        },
        Duration::from_secs(30),
    );
    let allocs = super::cat(&[&dir.join("allocations")]).lines().count();
    let same = same_output(&[&dir.join("job.out")], oracle);
    t.check(name, done && quiet && allocs >= 2 && same.is_ok(), |_| {
        format!(
            "ended: {done}, queue empty: {quiet}, allocations: {allocs}; {}; {}",
            same.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            super::tail(&dir.join("job.err"), 10)
        )
    });
    if !quiet {
        let mut c = t.cmd("scancel");
        c.args(["-n", "job.sh"]);
        t.to(c, None, None, LIMIT);
    }
}
