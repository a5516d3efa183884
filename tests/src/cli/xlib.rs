//! Restart on another MPI library of the same face (`mpicr restart --mpi-lib PATH`): a job of
//! `c-tests/ckpt_ring.c` checkpointed under one MPICH build and its `mpiexec` comes back under
//! the other build and its `mpiexec`, both ways, with the output of the uninterrupted native
//! run; a checkpoint-and-continue after the restart stays on the new library (`mpicr status`
//! names it). And the refusals, each before anything is restored: a missing file, another face
//! (Open MPI's `libmpi.so.40`), a shared library that is not MPI, a library that lacks a
//! function the program uses (MPI 4.1's `MPI_Status_set_source`, in MPICH 5, not in 4.0.2).
//! And an Open MPI program (`mpicc.openmpi`, under libmpicr_ompi.so) run on MPICH 4.0.2 and
//! restarted on the MPICH 5 wheel, with the output of its native run under `mpirun.openmpi`.
//! And a standard-ABI program (`mpicc_abi`, under libmpicr_abi.so) run on MPICH 4.0.2 and
//! restarted on the MPICH 5 wheel, with the output of its native run on the wheel's
//! `libmpi_abi.so.1`: one binary, checkpointed over one library, restarted over another.

use super::hangs::tails;
use super::{cat, CaseFn, LIMIT, T};
use crate::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn {
            name: "xlib-mpich4-to-mpich5",
            cases: &[
                "xlib-refuse-missing-file",
                "xlib-refuse-open-mpi",
                "xlib-refuse-not-mpi",
                "xlib-run-refuse-open-mpi",
                "xlib-mpich4-to-mpich5",
                "xlib-status-library",
            ],
            run: four_to_five,
        },
        CaseFn { name: "xlib-mpich5-to-mpich4", cases: &["xlib-mpich5-to-mpich4"], run: five_to_four },
        CaseFn { name: "xlib-mpich4-to-impi", cases: &["xlib-mpich4-to-impi"], run: four_to_impi },
        CaseFn { name: "xlib-ompi-mpich4-to-mpich5", cases: &["xlib-ompi-mpich4-to-mpich5"], run: ompi_four_to_five },
        CaseFn { name: "xlib-abi-mpich4-to-mpich5", cases: &["xlib-abi-mpich4-to-mpich5"], run: abi_four_to_five },
        CaseFn { name: "xlib-missing-function", cases: &["xlib-refuse-missing-function", "xlib-shim-backstop"], run: missing_function },
    ]
}

const ITERS: &str = "64";
/// Intel MPI (`.deps/impi`, when `scripts/deps.sh` installed it) in place of an MPICH version.
const IMPI: u32 = 0;
/// An Open MPI program (built by `mpicc.openmpi`, native under `mpirun.openmpi`) run under
/// mpicr on MPICH 4.0.2 and its `mpiexec.mpich`, in place of an MPICH version.
const OMPI: u32 = 40;
/// A standard-ABI program (built by the MPICH 5 wheel's `mpicc_abi`, native on its
/// `libmpi_abi.so.1` under its `mpiexec`) run under mpicr on MPICH 4.0.2 and `mpiexec.mpich`.
const ABI: u32 = 1;

fn impi_dir(t: &T) -> PathBuf {
    t.env.root.join(".deps/impi")
}

/// `mpiexec -n N` of MPICH `ver`, or of Intel MPI (its libraries found through `I_MPI_ROOT`).
fn launcher(t: &T, ver: u32, n: u32) -> Command {
    if ver == OMPI || ver == ABI {
        return t.mpi(4, n);
    }
    if ver != IMPI {
        return t.mpi(ver, n);
    }
    let mut c = t.cmd(impi_dir(t).join("bin/mpiexec"));
    c.env("I_MPI_ROOT", impi_dir(t)).arg("-n").arg(n.to_string());
    c
}

/// The MPI compiler wrapper of MPICH `ver` (MPICH 5's bin first on PATH, as it needs).
pub(super) fn mpicc(t: &T, ver: u32) -> Command {
    if ver == OMPI {
        t.cmd("mpicc.openmpi")
    } else if ver == ABI {
        t.cmd(t.env.mpich5.join("mpicc_abi"))
    } else if ver == 4 {
        t.cmd("mpicc.mpich")
    } else {
        let mut c = t.cmd(t.env.mpich5.join("mpicc"));
        let mut p = t.env.mpich5.clone().into_os_string();
        p.push(":");
        p.push(std::env::var_os("PATH").unwrap_or_default());
        c.env("PATH", p);
        c
    }
}

/// Compiles `src` with MPICH `ver`'s wrapper into `bin/OUT` (c-tests' common.h on the path).
pub(super) fn build(t: &T, ver: u32, src: &Path, out: &str) -> Result<PathBuf, Error> {
    build_with(t, mpicc(t, ver), src, out)
}

/// Compiles `src` with the compiler command `c` into `bin/OUT` (c-tests' common.h on the path).
pub(super) fn build_with(t: &T, mut c: Command, src: &Path, out: &str) -> Result<PathBuf, Error> {
    let bin = t.env.bin(out);
    c.args(["-std=gnu11", "-O2", "-I"]).arg(t.env.root.join("c-tests")).arg("-o").arg(&bin).arg(src).arg("-lm");
    match c.output() {
        Ok(o) if o.status.success() => Ok(bin),
        Ok(o) => Err(Error::Command(format!("{} failed: {}", src.display(), String::from_utf8_lossy(&o.stderr)))),
        Err(e) => Err(Error::spawn("mpicc")(e)),
    }
}

/// A library by soname from the loader's cache (`ldconfig -p`).
fn ldconfig(soname: &str) -> Option<PathBuf> {
    let o = Command::new("ldconfig").arg("-p").output().ok()?;
    String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
        let l = l.trim();
        (l.starts_with(soname) && l.contains("x86-64") || l.starts_with(&format!("{soname} ")))
            .then(|| l.rsplit("=> ").next().map(|p| PathBuf::from(p.trim())))
            .flatten()
    })
}

/// Debian's MPICH library: in a `-L` directory of `mpicc.mpich -show`, else the loader's cache.
fn mpich4_lib() -> Option<PathBuf> {
    let o = Command::new("mpicc.mpich").arg("-show").output().ok()?;
    let show = String::from_utf8_lossy(&o.stdout).into_owned();
    show.split_whitespace()
        .filter_map(|w| w.strip_prefix("-L"))
        .map(|d| Path::new(d).join("libmpich.so.12"))
        .find(|p| p.is_file())
        .or_else(|| ldconfig("libmpich.so.12"))
}

/// The MPICH 5 wheel's library, next to its `bin/`.
fn mpich5_lib(t: &T) -> PathBuf {
    t.env.mpich5.parent().unwrap_or(Path::new(".")).join("lib/libmpi.so.12")
}

fn lib_of(t: &T, ver: u32) -> Option<PathBuf> {
    if ver == IMPI {
        Some(impi_dir(t).join("lib/libmpi.so.12")).filter(|p| p.is_file() && impi_dir(t).join("bin/mpiexec").is_file())
    } else if ver == 4 || ver == OMPI || ver == ABI {
        mpich4_lib()
    } else {
        Some(mpich5_lib(t)).filter(|p| p.is_file())
    }
}

pub(super) fn wait_for(cond: impl Fn() -> bool, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Lines sorted (ranks' lines interleave differently from run to run).
pub(super) fn sorted(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// `mpiexec -n 2 mpicr restart --mpi-lib LIB DIR` under MPICH `ver`: (status, output).
fn restart_with(t: &T, ver: u32, lib: &Path, d: &Path) -> (i32, String) {
    let mut c = launcher(t, ver, 2);
    c.arg(&t.env.m).args(["restart", "--mpi-lib"]).arg(lib).arg(d);
    t.out(c, LIMIT)
}

/// ckpt_ring on 2 ranks under MPICH `from`, paused at iteration 20 and stopped there; restarted
/// under MPICH `to` with `--mpi-lib`, checkpointed again (continue) at iteration 40; the output
/// of both runs equals the native run's. `refusals`: first the refused restarts.
fn cross(t: &mut T, from: u32, to: u32, name: &str, refusals: bool) {
    if !t.require(&[t.env.criu_ok, t.env.have4, t.env.have5, t.env.is_root, t.env.shim_built], "needs MPICH 4 and 5, criu, root and libmpicr.so") {
        return;
    }
    let (Some(lib_to), Some(_)) = (lib_of(t, to), lib_of(t, from)) else {
        return t.skip_rest("cannot find both libraries (Intel MPI: scripts/deps.sh installs it in .deps/impi)");
    };
    let prog = match build(t, from, &t.env.root.join("c-tests/ckpt_ring.c"), &format!("ckpt_ring{from}")) {
        Ok(p) => p,
        Err(e) => return t.skip_rest(&e),
    };
    let mut c = if from == OMPI {
        // Open MPI's own launcher for the oracle (as root it must be told it may run).
        let mut c = t.cmd("mpirun.openmpi");
        c.args(["--oversubscribe", "--allow-run-as-root", "-n", "2"]);
        c
    } else if from == ABI {
        // The wheel's own launcher and libmpi_abi.so.1 (the program's RUNPATH) for the oracle.
        t.mpi(5, 2)
    } else {
        t.mpi(from, 2)
    };
    c.arg(&prog).arg(ITERS);
    let (rc0, native, _) = t.out2(c, LIMIT);
    if rc0 != 0 {
        return t.skip_rest(format!("the native run failed ({rc0})"));
    }
    let d = t.p(&format!("ck{from}{to}"));
    let pause = t.p(&format!("pause{from}{to}"));
    let _ = std::fs::create_dir_all(&pause);
    let (flag, go) = (pause.join("mpicr-test-paused"), pause.join("mpicr-test-resume"));
    let mut c = launcher(t, from, 2);
    c.env("MPICR_TEST_PAUSE_AT", "20,40").env("MPICR_TEST_TMPDIR", &pause).arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(&prog).arg(ITERS);
    let (o1, e1) = (t.p(&format!("x{from}{to}-1.out")), t.p(&format!("x{from}{to}-1.err")));
    let mut job = t.spawn(c, Some(&o1), Some(&e1));
    let paused = wait_for(|| flag.exists(), LIMIT);
    let (rcs, ck_out) = if paused { t.ckpt(&d, &["--stop"]) } else { (1, "the job never paused".into()) };
    let rc1 = job.wait(LIMIT);
    if rcs != 0 || rc1 != 0 {
        let why = format!("run/checkpoint --stop: rc={rcs}/{rc1} {ck_out}{}", tails(t, &[&format!("x{from}{to}-1.err")], 5));
        for c in t.cases_left() {
            t.bad(&c, why.clone());
        }
        return;
    }

    if refusals {
        let (rc, out) = restart_with(t, to, &t.p("nowhere/libmpi.so.12"), &d);
        t.check("xlib-refuse-missing-file", rc != 0 && out.contains("--mpi-lib") && out.contains("No such file"), |_| format!("rc={rc}: {out}"));
        match ldconfig("libmpi.so.40") {
            Some(ompi) => {
                let (rc, out) = restart_with(t, to, &ompi, &d);
                t.check("xlib-refuse-open-mpi", rc != 0 && out.contains("Open MPI's ABI") && out.contains("not the ABI"), |_| format!("rc={rc}: {out}"));
            }
            None => t.skip("xlib-refuse-open-mpi", "Open MPI's libmpi.so.40 is not installed"),
        }
        // The same checks when MPICR_MPI_LIB chooses the library of `mpicr run`.
        match ldconfig("libmpi.so.40") {
            Some(ompi) => {
                let mut c = t.mpi(from, 1);
                c.env("MPICR_MPI_LIB", &ompi).arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(t.p("ckrun")).arg("--").arg(&prog).arg("4");
                let (rc, out) = t.out(c, LIMIT);
                t.check("xlib-run-refuse-open-mpi", rc != 0 && out.contains("MPICR_MPI_LIB") && out.contains("Open MPI's ABI"), |_| format!("rc={rc}: {out}"));
            }
            None => t.skip("xlib-run-refuse-open-mpi", "Open MPI's libmpi.so.40 is not installed"),
        }
        let src = t.p("notmpi.c");
        let so = t.p("libnotmpi.so");
        let _ = std::fs::write(&src, "int not_mpi(void) { return 42; }\n");
        let built = t.cmd("cc").args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&src).status().is_ok_and(|s| s.success());
        if built {
            let (rc, out) = restart_with(t, to, &so, &d);
            t.check("xlib-refuse-not-mpi", rc != 0 && out.contains("not an MPI library"), |_| format!("rc={rc}: {out}"));
        } else {
            t.skip("xlib-refuse-not-mpi", "cc -shared failed");
        }
    }

    let mut c = launcher(t, to, 2);
    c.arg(&t.env.m).args(["restart", "--mpi-lib"]).arg(&lib_to).arg(&d);
    let (o2, e2) = (t.p(&format!("x{from}{to}-2.out")), t.p(&format!("x{from}{to}-2.err")));
    let mut job2 = t.spawn(c, Some(&o2), Some(&e2));
    // The restored rank 0 waits at iteration 20 for the go; then the job pauses at 40.
    let _ = std::fs::write(&go, "");
    let again = wait_for(|| !go.exists(), LIMIT) && wait_for(|| flag.exists(), LIMIT);
    let (rcc, cc_out) = if again { t.ckpt(&d, &[]) } else { (1, "the restarted job never paused again".into()) };
    let _ = std::fs::write(&go, "");
    let rc2 = job2.wait(LIMIT);
    let got = cat(&[&o1, &o2]);
    let same = sorted(&got) == sorted(&native);
    t.check(name, rc2 == 0 && rcc == 0 && same, |t| {
        format!(
            "rc={rc2}, continue checkpoint rc={rcc} {cc_out}; {}{}",
            if same { "same output".to_string() } else { format!("output differs:\n{got}\nnative:\n{native}") },
            tails(t, &[&format!("x{from}{to}-2.err")], 8)
        )
    });
    if t.cases_left().iter().any(|c| c == "xlib-status-library") {
        let mut c = t.m(["status"]);
        c.arg(&d);
        let status = t.stdout_of(c);
        let canon = std::fs::canonicalize(&lib_to).unwrap_or(lib_to.clone());
        let line2 = status.lines().find(|l| l.trim_start().starts_with("2 ")).unwrap_or("").to_string();
        t.check("xlib-status-library", line2.contains(&format!("library {}", canon.display())), |_| status.clone());
    }
}

fn four_to_five(t: &mut T) {
    cross(t, 4, 5, "xlib-mpich4-to-mpich5", true);
}

fn four_to_impi(t: &mut T) {
    cross(t, 4, IMPI, "xlib-mpich4-to-impi", false);
}

/// The Open MPI program's face (libmpicr_ompi.so, which `mpicr run` preloads for it from next to
/// `mpicr`) does not change at the restart; the MPICH library under it does.
fn abi_four_to_five(t: &mut T) {
    let have = t.env.mpich5.join("mpicc_abi").is_file() && t.env.m.with_file_name("libmpicr_abi.so").is_file();
    if !t.require(&[have], "needs the MPICH 5 wheel's mpicc_abi and libmpicr_abi.so next to mpicr") {
        return;
    }
    cross(t, ABI, 5, "xlib-abi-mpich4-to-mpich5", false);
}

fn ompi_four_to_five(t: &mut T) {
    let have = Command::new("mpicc.openmpi").arg("--showme:version").output().is_ok_and(|o| o.status.success())
        && t.env.m.with_file_name("libmpicr_ompi.so").is_file();
    if !t.require(&[have], "needs Open MPI's mpicc.openmpi and libmpicr_ompi.so next to mpicr") {
        return;
    }
    cross(t, OMPI, 5, "xlib-ompi-mpich4-to-mpich5", false);
}

fn five_to_four(t: &mut T) {
    cross(t, 5, 4, "xlib-mpich5-to-mpich4", false);
}

/// A program using MPI_Status_set_source, checkpointed on MPICH 5, restarted with MPICH 4.0.2:
/// refused by `mpicr restart` (the program imports it); then the same call from a shared library
/// of the program, which only the shim sees: the restored ranks end with its fatal message.
fn missing_function(t: &mut T) {
    let name = "xlib-refuse-missing-function";
    if !t.require(&[t.env.criu_ok, t.env.have4, t.env.have5, t.env.is_root, t.env.shim_built], "needs MPICH 4 and 5, criu, root and libmpicr.so") {
        return;
    }
    let Some(lib4) = mpich4_lib() else { return t.skip_rest("cannot find MPICH 4's library") };
    let prog = match build(t, 5, &t.env.root.join("tests/cli-programs/status_source.c"), "status_source5") {
        Ok(p) => p,
        Err(e) => return t.skip_rest(&e),
    };
    let d = t.p("ck41");
    let mut c = t.mpi(5, 2);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(&prog).arg("200");
    let mut job = t.spawn(c, None, Some(&t.p("m1.err")));
    let (rcs, ck_out) = t.ckpt(&d, &["--stop"]);
    let rc1 = job.wait(LIMIT);
    if rcs != 0 || rc1 != 0 {
        return t.bad(name, format!("run/checkpoint --stop: rc={rcs}/{rc1} {ck_out}{}", tails(t, &["m1.err"], 5)));
    }
    let (rc, out) = restart_with(t, 4, &lib4, &d);
    t.check(name, rc != 0 && out.contains("lacks a function the program uses: MPI_Status_set_source"), |_| format!("rc={rc}: {out}"));

    // The split build: the import is in a library of the program, not in the program.
    let name = "xlib-shim-backstop";
    let src = t.env.root.join("tests/cli-programs/status_source.c");
    let lib = t.env.bin("libsetsrc5.so");
    let mut c = mpicc(t, 5);
    c.args(["-shared", "-fPIC", "-DPART_LIB", "-o"]).arg(&lib).arg(&src);
    let built_lib = c.status().is_ok_and(|s| s.success());
    let prog = t.env.bin("status_source5_split");
    let mut c = mpicc(t, 5);
    let bin_dir = t.env.bin("");
    c.args(["-DPART_MAIN", "-o"])
        .arg(&prog)
        .arg(&src)
        .arg(format!("-L{}", bin_dir.display()))
        .arg("-lsetsrc5")
        .arg(format!("-Wl,-rpath,{}", bin_dir.display()));
    if !built_lib || !c.status().is_ok_and(|s| s.success()) {
        return t.skip(name, "cannot build the split program");
    }
    let d = t.p("ck41split");
    let mut c = t.mpi(5, 2);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(&prog).arg("200");
    let mut job = t.spawn(c, None, Some(&t.p("m2.err")));
    let (rcs, ck_out) = t.ckpt(&d, &["--stop"]);
    let rc1 = job.wait(LIMIT);
    if rcs != 0 || rc1 != 0 {
        return t.bad(name, format!("run/checkpoint --stop: rc={rcs}/{rc1} {ck_out}{}", tails(t, &["m2.err"], 5)));
    }
    let (rc, out) = restart_with(t, 4, &lib4, &d);
    t.check(
        name,
        rc != 0 && out.contains("mpicr: fatal: cannot renew the MPI library: ") && out.contains("lacks a function the program uses: MPI_Status_set_source"),
        |_| format!("rc={rc}: {out}"),
    );
}

/// The file `name` names on PATH.
pub(super) fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()))
}
