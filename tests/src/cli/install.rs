//! `make install PREFIX=...` into a scratch prefix, then only installed files: the files are
//! there (man pages, completions, pkg-config, module file, CRIU), a 2-rank `ckpt_ring` job runs
//! under the installed `mpicr` (its libmpicr.so from PREFIX/lib, its CRIU from
//! PREFIX/libexec/mpicr; PATH without the source tree nor /usr/sbin), is stopped by a checkpoint
//! and restarted, with the native run's output. A job whose mpicr is replaced under it (as a
//! second `make install` does) gets a checkpoint refused with the reason, and runs on. And the wrapper compiler: `mpicrcc --showme`,
//! a program built by `mpicrcc` (libmpicr.so before libmpich.so.12, an rpath to PREFIX/lib) runs
//! plainly under mpiexec and, under `mpicr run` without LD_PRELOAD, checkpoints and continues.

use super::paused::{pids_of, ring_with_oracle, same_output, start, Pause, ITERS};
use super::xlib::build_with;
use super::{Bg, CaseFn, LIMIT, T};
use crate::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub fn cases() -> Vec<CaseFn> {
    vec![CaseFn {
        name: "install",
        cases: &[
            "install-files",
            "install-man-completions",
            "install-pkgconfig",
            "install-replaced-under-job",
            "install-ckpt-restart",
            "install-wrapper-showme",
            "install-wrapper-plain-run",
            "install-wrapper-ckpt-no-preload",
        ],
        run: install,
    }]
}

/// What `make install` must write (relative to PREFIX).
const FILES: &[&str] = &[
    "bin/mpicr",
    "bin/mpicrcc",
    "bin/mpicrcxx",
    "bin/mpicrfort",
    "lib/libmpicr.so",
    "lib/libmpicr_ompi.so",
    "lib/pkgconfig/mpicr.pc",
    "include/mpicr.h",
    "libexec/mpicr/criu",
    "share/man/man1/mpicr.1",
    "share/man/man1/mpicr-run.1",
    "share/man/man1/mpicr-checkpoint.1",
    "share/man/man1/mpicr-restart.1",
    "share/man/man1/mpicr-status.1",
    "share/bash-completion/completions/mpicr",
    "share/zsh/site-functions/_mpicr",
    "share/fish/vendor_completions.d/mpicr.fish",
    "share/doc/mpicr/README.md",
];

/// PATH for commands that must use only installed files: PREFIX/bin and the system's bin
/// directories (mpiexec.mpich, the compilers), not /usr/sbin (no system criu) nor anything of
/// the source tree.
fn installed_path(prefix: &Path) -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", prefix.join("bin").display())
}

/// A command that sees only the installed mpicr: no MPICR_SHIM/MPICR_CRIU, PATH as above.
fn installed(t: &T, prefix: &Path, mut c: Command) -> Command {
    for v in ["MPICR_SHIM", "MPICR_CRIU", "MPICR_TEST_MPICR", "LD_PRELOAD", "LD_LIBRARY_PATH"] {
        c.env_remove(v);
    }
    c.env("PATH", installed_path(prefix));
    let _ = t;
    c
}

fn install(t: &mut T) {
    if !t.require(&[t.env.criu_ok, t.env.have4, t.env.is_root, t.env.shim_built], "needs MPICH 4, criu (make deps), root and libmpicr.so") {
        return;
    }
    let prefix = t.p("prefix");
    let mut c = t.cmd("make");
    c.arg("-C").arg(&t.env.root).arg("install").arg(format!("PREFIX={}", prefix.display()));
    let (rc, out) = t.out(c, LIMIT);
    // The write-tracking CRIU goes with the rest when `make deps-incremental` built one.
    let wt = t.env.root.join(".deps/criu-wt/criu").is_file().then_some("libexec/mpicr/criu-wt");
    let missing: Vec<&str> = FILES.iter().copied().chain(wt).filter(|f| !prefix.join(f).exists()).collect();
    let modfile = std::fs::read_dir(prefix.join("share/modulefiles/mpicr")).ok().and_then(|mut d| d.next()).is_some();
    t.check("install-files", rc == 0 && missing.is_empty() && modfile, |_| format!("make install rc={rc}, missing {missing:?}, module file: {modfile}\n{out}"));
    if rc != 0 {
        return t.skip_rest("make install failed");
    }

    // Man pages: roff with a title; completions name the subcommands.
    let man_ok = ["mpicr.1", "mpicr-run.1", "mpicr-checkpoint.1"]
        .iter()
        .all(|m| std::fs::read_to_string(prefix.join("share/man/man1").join(m)).is_ok_and(|s| s.contains("\n.TH ") && s.contains("EXIT STATUS")));
    let bash = std::fs::read_to_string(prefix.join("share/bash-completion/completions/mpicr")).unwrap_or_default();
    t.check("install-man-completions", man_ok && bash.contains("checkpoint") && bash.contains("restart"), |_| {
        format!("man pages well formed: {man_ok}; bash completion: {} bytes", bash.len())
    });

    let mut c = t.cmd("pkg-config");
    c.env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")).args(["--cflags", "--libs", "mpicr"]);
    let (rc, pc) = t.out(c, LIMIT);
    let want_i = format!("-I{}", prefix.join("include").display());
    t.check("install-pkgconfig", rc == 0 && pc.contains("-lmpicr") && pc.contains(&want_i), |_| format!("rc={rc}: {pc}"));

    let ring_src = t.env.root.join("c-tests/ckpt_ring.c");
    let (plain, oracle) = match ring_with_oracle(t, "ring_plain") {
        Ok(x) => x,
        Err(e) => return t.skip_rest(&e),
    };
    ckpt_restart(t, &prefix, &plain, &oracle);
    wrapper(t, &prefix, &ring_src, &oracle);
    replaced_under_job(t, &prefix);
}

/// `PREFIX/bin/mpicr` replaced (a new copy renamed over it, as `install` does) while two ranks
/// of a job run on it: the keepers still find their CRIU, the checkpoints carry the deleted binary
/// (which each rank's PID-namespace init still runs) as a ghost file of the same name in both
/// images, the job runs on after the first, and the restart, whose ranks restore in turn on this
/// node (`ghosts`), brings back every tick.
fn replaced_under_job(t: &mut T, prefix: &Path) {
    let m = prefix.join("bin/mpicr");
    let d = t.p("ck-replaced");
    let mut c = installed(t, prefix, t.mpi(4, 2));
    // 126 ticks of 50 ms: exit status 0, time for two checkpoints.
    c.arg(&m).args(["run", "--no-mpi", "--ckpt-dir"]).arg(&d).arg("--").arg(t.env.bin("counter")).arg("126");
    let (o1, e1) = (t.p("replaced-1.out"), t.p("replaced-1.err"));
    let mut job = t.spawn(c, Some(&o1), Some(&e1));
    // Replaced once the keepers run (the coordinator is up), not before their exec.
    t.wait_coordinator(&d, true);
    let copy = prefix.join("bin/.mpicr.new");
    let replaced = std::fs::copy(&m, &copy).and_then(|_| std::fs::rename(&copy, &m));
    let ckpt = |t: &T, stop: bool| {
        t.ckpt_with(|| {
            let mut c = installed(t, prefix, t.cmd(&m));
            c.arg("checkpoint").args(stop.then_some("--stop")).arg(&d);
            c
        })
    };
    let (rc_go, go) = ckpt(t, false);
    let runs = job.try_status().is_none();
    let (rc_stop, stop) = ckpt(t, true);
    let rc1 = job.wait(LIMIT);
    let mut c = installed(t, prefix, t.mpi(4, 2));
    c.arg(&m).arg("restart").arg(&d);
    let (o2, e2) = (t.p("replaced-2.out"), t.p("replaced-2.err"));
    let rc2 = t.to(c, Some(&o2), Some(&e2), LIMIT);
    let msg = super::complete(&super::cat(&[&o1, &o2]), 2, 126);
    let good = replaced.is_ok() && rc_go == 0 && runs && rc_stop == 0 && rc1 == 0 && rc2 == 0 && msg.is_ok();
    t.check("install-replaced-under-job", good, |_| {
        format!(
            "replacing {}: {replaced:?}; checkpoint rc={rc_go} {go}; job ran on: {runs}; checkpoint --stop rc={rc_stop} {stop}; job rc={rc1}; restart rc={rc2} {}; {}",
            m.display(),
            msg.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            super::tail(&e2, 8)
        )
    });
}

/// The installed mpicr's library in the program, every rank.
fn maps_name(pid: u32, lib: &Path) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(&lib.display().to_string()))
}

/// `mpiexec -n 2 PREFIX/bin/mpicr run --ckpt-dir D -- PROG`, once it has paused at 20.
fn run_paused(t: &T, prefix: &Path, pause: &Pause, d: &Path, prog: &Path, name: &str) -> Result<(Bg, PathBuf, PathBuf), Error> {
    let c = installed(t, prefix, t.mpi(4, 2));
    let args = ["run".as_ref(), "--ckpt-dir".as_ref(), d.as_os_str(), "--".as_ref(), prog.as_os_str(), ITERS.as_ref()];
    let (mut job, o, e) = start(t, c, pause, "20", &prefix.join("bin/mpicr"), &args, name);
    if !pause.wait() {
        job.wait(Duration::from_secs(1));
        return Err(Error::Check(format!("the job never paused: {}", super::tail(&e, 5))));
    }
    Ok((job, o, e))
}

/// `mpiexec -n 2 PREFIX/bin/mpicr run`, paused at 20: stop, restart with the installed mpicr.
fn ckpt_restart(t: &mut T, prefix: &Path, prog: &Path, oracle: &str) {
    let name = "install-ckpt-restart";
    let m = prefix.join("bin/mpicr");
    let d = t.p("ck-installed");
    let pause = Pause::new(t, "installed");
    let (mut job, o1, e1) = match run_paused(t, prefix, &pause, &d, prog, "inst-1") {
        Ok(x) => x,
        Err(why) => return t.bad(name, why),
    };
    let lib = prefix.join("lib/libmpicr.so");
    let pids = pids_of(prog);
    let from_prefix = pids.len() == 2 && pids.iter().all(|&p| maps_name(p, &lib));
    let (rcs, ck) = t.ckpt_with(|| {
        let mut c = installed(t, prefix, t.cmd(&m));
        c.args(["checkpoint", "--stop"]).arg(&d);
        c
    });
    let rc1 = job.wait(LIMIT);
    if rcs != 0 || rc1 != 0 || !from_prefix {
        return t
            .bad(name, format!("checkpoint --stop rc={rcs} {ck}; job rc={rc1}; ranks {pids:?} map {}: {from_prefix}; {}", lib.display(), super::tail(&e1, 5)));
    }
    let mut c = installed(t, prefix, t.mpi(4, 2));
    c.arg(&m).arg("restart").arg(&d);
    let (o2, e2) = (t.p("inst-2.out"), t.p("inst-2.err"));
    let mut job2 = t.spawn(c, Some(&o2), Some(&e2));
    let resumed = pause.resume();
    let rc2 = job2.wait(LIMIT);
    let same = same_output(&[&o1, &o2], oracle);
    t.check(name, resumed && rc2 == 0 && same.is_ok(), |_| {
        format!("restart rc={rc2} (resumed: {resumed}); {}; {}", same.as_ref().err().map(ToString::to_string).unwrap_or_default(), super::tail(&e2, 8))
    });
}

/// mpicrcc: --showme; a program it built runs plainly, then checkpoints under mpicr run
/// without LD_PRELOAD.
fn wrapper(t: &mut T, prefix: &Path, src: &Path, oracle: &str) {
    let cc = prefix.join("bin/mpicrcc");
    let lib = prefix.join("lib");
    let mut c = installed(t, prefix, t.cmd(&cc));
    c.env("MPICR_CC", "mpicc.mpich").args(["--showme", "-o", "x", "x.c"]);
    let (rc, show) = t.out(c, LIMIT);
    // The Open MPI wrapper (mpicc on PATH here is Open MPI's when it is installed) gets the
    // Open MPI face.
    let mut c = installed(t, prefix, t.cmd(&cc));
    c.env("MPICR_CC", "mpicc.openmpi").arg("--showme:mpicr");
    let (_, ompi) = t.out(c, LIMIT);
    let ompi_ok = !Path::new("/usr/bin/mpicc.openmpi").exists() || ompi.contains("-lmpicr_ompi");
    let rpath = format!("-Wl,-rpath,{}", lib.display());
    t.check("install-wrapper-showme", rc == 0 && show.contains("-lmpicr ") && show.contains(&rpath) && show.contains("-lmpich") && ompi_ok, |_| {
        format!("rc={rc}: {show}\nopenmpi: {ompi}")
    });

    let mut c = installed(t, prefix, t.cmd(&cc));
    c.env("MPICR_CC", "mpicc.mpich");
    let prog: PathBuf = match build_with(t, c, src, "ring_mpicrcc") {
        Ok(p) => p,
        Err(e) => return t.skip_rest(&e),
    };
    // libmpicr.so is needed before the MPI library, and found through the run path.
    let needed = elf_needed(&prog);
    let order = needed.iter().position(|n| n == "libmpicr.so").zip(needed.iter().position(|n| n.starts_with("libmpich.so")));
    let runpath = Command::new("readelf").arg("-d").arg(&prog).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let linked = matches!(order, Some((a, b)) if a < b) && runpath.contains(&lib.display().to_string());
    // Without mpicr: the shim only interposes, and the program runs as it would.
    let mut c = installed(t, prefix, t.mpi(4, 2));
    c.arg(&prog).arg(ITERS);
    let (rc, out, err) = t.out2(c, LIMIT);
    t.check("install-wrapper-plain-run", linked && rc == 0 && super::xlib::sorted(&out) == super::xlib::sorted(oracle), |_| {
        format!("needed {needed:?}, run path listed: {}; plain run rc={rc}: {err}", runpath.contains(&lib.display().to_string()))
    });

    let name = "install-wrapper-ckpt-no-preload";
    let d = t.p("ck-wrapper");
    let pause = Pause::new(t, "wrapper");
    let (mut job, o1, e1) = match run_paused(t, prefix, &pause, &d, &prog, "wrap") {
        Ok(x) => x,
        Err(why) => return t.bad(name, why),
    };
    let pids = pids_of(&prog);
    let no_preload = pids.len() == 2
        && pids.iter().all(|p| std::fs::read(format!("/proc/{p}/environ")).is_ok_and(|e| !e.split(|&b| b == 0).any(|v| v.starts_with(b"LD_PRELOAD="))));
    let (rcc, ck) = t.ckpt_with(|| {
        let mut c = installed(t, prefix, t.cmd(prefix.join("bin/mpicr")));
        c.arg("checkpoint").arg(&d);
        c
    });
    let resumed = pause.resume();
    let rc = job.wait(LIMIT);
    let same = same_output(&[&o1], oracle);
    t.check(name, no_preload && rcc == 0 && resumed && rc == 0 && same.is_ok() && t.epochs_complete(&d) == 1, |_| {
        format!(
            "ranks {pids:?} without LD_PRELOAD: {no_preload}; checkpoint rc={rcc} {ck}; job rc={rc}; {}; {}",
            same.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            super::tail(&e1, 8)
        )
    });
}

/// DT_NEEDED of an ELF file, in order (`readelf -d`).
fn elf_needed(p: &Path) -> Vec<String> {
    let Ok(o) = Command::new("readelf").arg("-d").arg(p).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).and_then(|r| r.split(']').next()).map(str::to_string))
        .collect()
}
