//! Tests of the harness itself, with small MPI programs written on the fly: a hang is killed
//! at the timeout with every process of the job, processes outliving the job are found, the
//! program's own verdict and a mismatching output are reported, and the pause protocol for
//! checkpoint modes works. Needs every flavor, like the matrix.

use mpicr_tests::ckpt::{shm_entries, shm_orphans};
use mpicr_tests::{check_self_verdict, compare, job, Error, Flavor, Harness, Job, Scratch};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Compiles `src` with the mpich4 wrapper into `dir` and returns the binary.
fn compile(dir: &Path, name: &str, src: &str) -> PathBuf {
    compile_with(Flavor::Mpich4, dir, name, src)
}

fn compile_with(flavor: Flavor, dir: &Path, name: &str, src: &str) -> PathBuf {
    let root = Harness::workspace_root();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let bin = dir.join(name);
    let out = Command::new(flavor.mpicc(&root).unwrap()).envs(flavor.mpicc_env(&root)).arg("-o").arg(&bin).arg(&c).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    bin
}

fn job(program: PathBuf, ranks: u32, timeout: Duration) -> Job {
    job_with(Flavor::Mpich4, program, ranks, timeout)
}

fn job_with(flavor: Flavor, program: PathBuf, ranks: u32, timeout: Duration) -> Job {
    Job {
        mpiexec: flavor.mpiexec(&Harness::workspace_root()).unwrap(),
        launcher: mpicr_tests::Launcher::Hydra,
        ranks,
        wrapper: Vec::new(),
        program,
        args: Vec::new(),
        rank_env: Vec::new(),
        timeout,
    }
}

const HANG: &str = r#"
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int r, x;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    printf("rank %d waiting\n", r); fflush(stdout);
    MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); /* never sent */
    MPI_Finalize();
    return 0;
}
"#;

#[test]
fn a_hanging_job_is_killed_with_all_its_processes() {
    let root = Harness::workspace_root();
    for flavor in Flavor::ALL {
        if flavor.foreign_face() {
            // Its programs run natively under their own library's launcher only (the matrix).
            continue;
        }
        // Like the matrix: a flavor whose wrapper is missing is skipped, saying so (MPICH 4,
        // the one every other test here uses, is required).
        if let (false, Err(e)) = (flavor == Flavor::Mpich4, flavor.mpicc(&root)) {
            eprintln!("skip {flavor}: {e}");
            continue;
        }
        hanging_job_is_killed(flavor);
    }
}

fn hanging_job_is_killed(flavor: Flavor) {
    let build = Scratch::new("harness-build", false).unwrap();
    let bin = compile_with(flavor, build.root(), "hang", HANG);
    let scratch = Scratch::new("harness-hang", false).unwrap();
    let shm_before = shm_entries();
    let started = Instant::now();
    let err = job::run(&job_with(flavor, bin, 2, Duration::from_secs(3)), &scratch).unwrap_err();
    // the killed ranks could not remove their shared-memory segments (MPICH 5 leaves one)
    for o in shm_orphans(&shm_before) {
        let _ = std::fs::remove_file(Path::new("/dev/shm").join(o));
    }
    eprintln!("{err}");
    assert!(matches!(&err, Error::Stopped { cause, .. } if matches!(**cause, Error::Timeout(_))), "{err:?}");
    assert!(err.to_string().contains("timed out after 3 s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "cleanup took {:?}", started.elapsed());
    // (which processes the message lists depends on timing: Hydra's proxy may kill its ranks
    // itself once mpiexec is gone)
    // nothing of the job may be left: no process still runs our binary from this directory
    let leftover = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path().join("exe")).ok())
        .any(|exe| exe.starts_with(build.root()));
    assert!(!leftover, "a rank of the killed job is still running");
}

const WRONG: &str = r#"
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int r;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    printf("rank %d\n", r);
    FILE *f = fopen("stray.txt", "w"); /* a file left behind */
    if (f) fclose(f);
    MPI_Finalize();
    printf("PASS wrong\n");
    return 0;
}
"#;

#[test]
fn verdicts_and_comparisons() {
    let build = Scratch::new("harness-build2", false).unwrap();
    let bin = compile(build.root(), "wrong", WRONG);
    let s1 = Scratch::new("harness-ok", false).unwrap();
    let out = job::run(&job(bin.clone(), 2, Duration::from_secs(30)), &s1).unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout[1], b"rank 1\nPASS wrong\n");
    // the stray file fails the program's verdict
    let err = check_self_verdict("wrong", &out).unwrap_err();
    assert!(err.to_string().contains("stray.txt"), "{err}");
    // a different name means the PASS line is missing
    let mut clean = out.clone();
    clean.leftovers.clear();
    assert!(check_self_verdict("wrong", &clean).is_ok());
    assert!(check_self_verdict("other", &clean).unwrap_err().to_string().contains("PASS other"));
    // equal outputs compare equal; a changed rank is shown as a diff
    assert!(compare(&clean, &clean).is_none());
    let mut changed = clean.clone();
    changed.stdout[1] = b"rank 7\nPASS wrong\n".to_vec();
    let report = compare(&clean, &changed).unwrap();
    assert!(report.contains("rank 1 stdout"), "{report}");
    assert!(report.contains("- rank 1\n+ rank 7\n"), "{report}");
}

const STRAY: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (fork() == 0) { /* a helper that leaves its session and outlives the job */
        setsid();
        freopen("/dev/null", "r", stdin); /* without its stdio ... */
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        for (int fd = 3; fd < 1024; fd++) /* nor for the PMI socket */
            close(fd);
        sleep(60);
        _exit(0);
    }
    MPI_Finalize();
    printf("PASS stray\n");
    return 0;
}
"#;

#[test]
fn processes_outliving_the_job_are_killed_and_reported() {
    let build = Scratch::new("harness-build3", false).unwrap();
    let bin = compile(build.root(), "stray", STRAY);
    let scratch = Scratch::new("harness-stray", false).unwrap();
    let out = job::run(&job(bin, 1, Duration::from_secs(20)), &scratch).unwrap();
    assert!(out.status.success());
    assert_eq!(out.stray.len(), 1, "{:?}", out.stray);
    assert!(out.stray[0].ends_with("(stray)"), "{:?}", out.stray);
    let err = check_self_verdict("stray", &out).unwrap_err();
    assert!(err.to_string().contains("outlived mpiexec"), "{err}");
    std::thread::sleep(Duration::from_millis(100));
    let leftover = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path().join("exe")).ok())
        .any(|exe| exe.starts_with(build.root()));
    assert!(!leftover, "the stray process is still running");
}

/// The pause protocol of c-tests/common.h, driven as a checkpoint mode would: the job stops at
/// the requested step, goes on once told to, and prints exactly what an undisturbed run does.
#[test]
fn pause_point_stops_the_job_until_resumed_without_changing_its_output() {
    let harness = Harness::from_env(Harness::workspace_root());
    let tests = mpicr_tests::spec::discover(&harness.tests_dir()).unwrap();
    let halo = tests.iter().find(|t| t.name == "app_halo2d").unwrap();
    let bin = harness.build(halo, Flavor::Mpich4).unwrap();
    let with_args = |env: Vec<(String, std::ffi::OsString)>| Job { args: vec!["30".into()], rank_env: env, ..job(bin.clone(), 2, Duration::from_secs(60)) };

    let plain = job::run(&with_args(Vec::new()), &Scratch::new("harness-plain", false).unwrap()).unwrap();
    check_self_verdict("app_halo2d", &plain).unwrap();

    let mut polls_while_paused = 0;
    let mut resumed = false;
    let paused_job = with_args(vec![("MPICR_TEST_PAUSE_AT".into(), "10".into())]);
    let out = job::run_driven(&paused_job, &Scratch::new("harness-paused", false).unwrap(), &mut |work| {
        if resumed || !work.join("mpicr-test-paused").exists() {
            return Ok(());
        }
        // A checkpoint would be taken here. Stay paused a few polls to show the job waits.
        polls_while_paused += 1;
        if polls_while_paused == 5 {
            let resume = work.join("mpicr-test-resume");
            std::fs::write(&resume, b"").map_err(Error::io("write", &resume))?;
            resumed = true;
        }
        Ok(())
    })
    .unwrap();
    assert!(resumed, "the job never reached its pause point");
    assert!(compare(&plain, &out).is_none(), "{:?}", compare(&plain, &out));
    check_self_verdict("app_halo2d", &out).unwrap(); // includes: both files removed
}
