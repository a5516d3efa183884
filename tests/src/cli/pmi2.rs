//! PMI-2 on the wire (issue 11, item 2). The one PMI-2 client on the test machines is Intel MPI
//! with Slurm's `libpmi2.so` (`I_MPI_PMI=pmi2 I_MPI_PMI_LIBRARY=...`), and only under srun: the
//! MPICH 5 wheel is built without PMI-2 (`MPIR_CVAR_PMI_VERSION=2` fails in `MPI_Init` with no
//! PMI traffic), Intel's Hydra ignores the library, and under MPICH 4.0.2's Hydra Intel MPI fails
//! natively (that Hydra's PMI-2 `PMI_process_mapping` puts one rank on the node), and so it does
//! under the wheel's Hydra. So: a 2-rank
//! `ckpt_ring` built by Intel MPI under `srun --mpi=pmi2` runs, checkpoints and continues, stops
//! and restarts under a new srun job (the keeper told PMI-2 by job.json alone), each with the
//! native srun output; under Hydra the keeper's own PMI-2 session (init, fullinit, job-getid,
//! kvs-put, kvs-fence, kvs-get, info-getjobattr, finalize) runs a job, and a program that asks
//! for another PMI version than the keeper's is refused with one line. (`srun --mpi=pmix`:
//! `slurm_pmix.rs`.)

use super::paused::{self, same_output, Pause, ITERS};
use super::{CaseFn, LIMIT, T};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn { name: "pmi2-hydra", cases: &["hydra-pmi2-keeper", "hydra-pmi-version-refused"], run: hydra },
        CaseFn { name: "slurm-pmi2", cases: &["srun-pmi2-run", "srun-pmi2-continue", "srun-pmi2-stop-restart-srun"], run: srun_pmi2 },
    ]
}

/// Under MPICH 4.0.2's Hydra with `MPIR_CVAR_PMI_VERSION=2`: the keepers speak PMI-2 with Hydra
/// (a `--no-mpi` job, whose keepers exchange the coordinator over PMI-2); MPICH 4.0.2 itself
/// ignores the variable and asks for PMI-1, which the keeper refuses with one line.
fn hydra(t: &mut T) {
    if !t.require(&[t.env.have4, t.env.is_root, t.env.shim_built, t.env.criu_ok], "needs MPICH 4, criu, root and libmpicr.so") {
        return;
    }
    let d = t.p("ck-keeper");
    let mut c = t.mpi(4, 2);
    c.env("MPIR_CVAR_PMI_VERSION", "2").arg(&t.env.m).args(["run", "--no-mpi", "--ckpt-dir"]).arg(&d).args(["--", "echo", "pmi2"]);
    let (rc, out, err) = t.out2(c, LIMIT);
    let job = std::fs::read_to_string(d.join("job.json")).unwrap_or_default();
    t.check(
        "hydra-pmi2-keeper",
        rc == 0 && out.lines().filter(|l| *l == "pmi2").count() == 2 && job.contains("\"pmi_version\": 2") && d.join("ENDED").exists(),
        |_| format!("rc={rc}; out {out:?}; job.json {job}; {err}"),
    );

    let (prog, _) = match paused::ring_with_oracle(t, "ring_pmi2_h") {
        Ok(x) => x,
        Err(e) => return t.skip("hydra-pmi-version-refused", e),
    };
    let mut c = t.mpi(4, 2);
    c.env("MPIR_CVAR_PMI_VERSION", "2").arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(t.p("ck-refused")).arg("--").arg(&prog).arg(ITERS);
    let (rc, _, err) = t.out2(c, LIMIT);
    let said = err.contains("the program asks for PMI-1 but the keeper initialised PMI-2 with the launcher");
    t.check("hydra-pmi-version-refused", rc != 0 && said, |_| format!("rc={rc}; {err}"));
}

/// Slurm's PMI-2 client library, from the loader's cache (`make deps` installs libpmi2-0).
fn libpmi2() -> Option<PathBuf> {
    let o = Command::new("ldconfig").arg("-p").output().ok()?;
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("libpmi2.so.0 ") && l.contains("x86-64"))
        .and_then(|l| l.rsplit("=> ").next())
        .map(|p| PathBuf::from(p.trim()))
}

/// `srun --mpi=pmi2 -n 2 -t 5`, with Intel MPI told to speak PMI-2 through `lib` when given.
fn srun(t: &T, impi: &Path, lib: Option<&Path>) -> Command {
    let mut c = t.cmd("srun");
    c.args(["--mpi=pmi2", "-n", "2", "-t", "5"]).env("I_MPI_ROOT", impi);
    if let Some(lib) = lib {
        c.env("I_MPI_PMI", "pmi2").env("I_MPI_PMI_LIBRARY", lib);
    }
    c
}

fn srun_pmi2(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.is_root, t.env.shim_built], "needs criu, root and libmpicr.so") {
        return;
    }
    let impi = t.env.root.join(".deps/impi");
    if !impi.join("bin/mpicc").is_file() {
        return t.skip_rest("Intel MPI is not installed (scripts/deps.sh installs it in .deps/impi)");
    }
    let Some(lib) = libpmi2() else { return t.skip_rest("Slurm's libpmi2.so.0 is not installed (make deps installs libpmi2-0)") };
    let Some(cluster) = super::slurm::up(t) else { return };

    let mut cc = t.cmd(impi.join("bin/mpicc"));
    cc.env("I_MPI_ROOT", &impi);
    let prog = match super::xlib::build_with(t, cc, &t.env.root.join("c-tests/ckpt_ring.c"), "ring_impi_pmi2") {
        Ok(p) => p,
        Err(e) => return t.skip_rest(&e),
    };
    let mut c = srun(t, &impi, Some(&lib));
    c.arg(&prog).arg(ITERS);
    let (rc, oracle, err) = t.out2(c, LIMIT);
    if rc != 0 {
        return t.skip_rest(format!("the native srun run of Intel MPI over libpmi2 failed ({rc}): {err}"));
    }

    // To its end: the keepers initialised PMI-2 with srun (job.json says so).
    let d0 = t.p("ck-run");
    let mut c = srun(t, &impi, Some(&lib));
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d0).arg("--").arg(&prog).arg(ITERS);
    let (o, e) = (t.p("run.out"), t.p("run.err"));
    let rc = t.to(c, Some(&o), Some(&e), LIMIT);
    let same = same_output(&[&o], &oracle);
    let job = std::fs::read_to_string(d0.join("job.json")).unwrap_or_default();
    t.check("srun-pmi2-run", rc == 0 && same.is_ok() && job.contains("\"pmi_version\": 2"), |_| {
        format!("rc={rc}; {}; job.json {job}; {}", same.as_ref().err().map(ToString::to_string).unwrap_or_default(), super::tail(&e, 8))
    });

    // Paused at 20: checkpoint, then on to the end.
    let d = t.p("ck-continue");
    let pause = Pause::new(t, "continue");
    let args = ["run".as_ref(), "--ckpt-dir".as_ref(), d.as_os_str(), "--".as_ref(), prog.as_os_str(), ITERS.as_ref()];
    let (mut job, o, e) = paused::start(t, srun(t, &impi, Some(&lib)), &pause, "20", &t.env.m, &args, "continue");
    let (rcc, ck) = if pause.wait() { t.ckpt(&d, &[]) } else { (1, "the job never paused".into()) };
    let resumed = pause.resume();
    let rc = job.wait(LIMIT);
    let same = same_output(&[&o], &oracle);
    t.check("srun-pmi2-continue", rcc == 0 && resumed && rc == 0 && same.is_ok() && t.epochs_complete(&d) == 1, |_| {
        format!("checkpoint rc={rcc} {ck}; job rc={rc}; {}; {}", same.as_ref().err().map(ToString::to_string).unwrap_or_default(), super::tail(&e, 8))
    });

    stop_restart(t, &impi, &lib, &prog, &oracle);

    drop(cluster);
}

/// Stopped at 20 under srun; restarted under another srun job whose keepers are told nothing
/// of PMI-2 (job.json is), checkpointed again at 40 and on to the end.
fn stop_restart(t: &mut T, impi: &Path, lib: &Path, prog: &Path, oracle: &str) {
    let name = "srun-pmi2-stop-restart-srun";
    let d = t.p("ck-chain");
    let pause = Pause::new(t, "chain");
    let args = ["run".as_ref(), "--ckpt-dir".as_ref(), d.as_os_str(), "--".as_ref(), prog.as_os_str(), ITERS.as_ref()];
    let (mut j1, o1, e1) = paused::start(t, srun(t, impi, Some(lib)), &pause, "20,40", &t.env.m, &args, "chain-1");
    let (rs1, c1) = if pause.wait() { t.ckpt(&d, &["--stop"]) } else { (1, "the job never paused".into()) };
    let rc1 = j1.wait(LIMIT);
    if rs1 != 0 || rc1 != 0 {
        return t.bad(name, format!("srun run/stop: rc={rs1}/{rc1} {c1}; {}", super::tail(&e1, 8)));
    }
    let (mut j2, o2, e2) = paused::start(t, srun(t, impi, None), &pause, "20,40", &t.env.m, &["restart".as_ref(), d.as_os_str()], "chain-2");
    let again = pause.resume() && pause.wait();
    let (rs2, c2) = if again { t.ckpt(&d, &[]) } else { (1, "the restored job never paused at 40".into()) };
    let resumed = pause.resume();
    let rc2 = j2.wait(LIMIT);
    let same = same_output(&[&o1, &o2], oracle);
    t.check(name, again && rs2 == 0 && resumed && rc2 == 0 && same.is_ok() && t.epochs_complete(&d) == 2, |_| {
        format!(
            "srun restart: checkpoint rc={rs2} {c2}; job rc={rc2}; {}; {}",
            same.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            super::tail(&e2, 8)
        )
    });
}
