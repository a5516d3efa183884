//! The Open MPI face with a non-PIE program: `mpicc.openmpi -no-pie` makes the executable hold
//! copies of the predefined handles it uses (R_X86_64_COPY relocations of `ompi_mpi_comm_world`,
//! `ompi_mpi_int`, `ompi_mpi_op_sum`, ...), which ld.so fills from the first library defining
//! them, libmpicr_ompi.so when preloaded. The face must find those copies' addresses (the
//! handles the program passes) and give every symbol libmpi.so.40's size, or ld.so warns and
//! copies short. The program's output under mpicr (MPICH's Hydra, MPICH 4.0.2 underneath) must
//! equal its output under Open MPI's own `mpirun`. Skipped, saying so, where Open MPI's wrapper
//! or launcher is missing.
//!
//! And the datatypes MPICH 4.0.2 lacks: an Open MPI program's `MPI_LOGICAL1/2/4/8` under the
//! face over MPICH 4.0.2 fail with `MPI_ERR_TYPE` through the program's error handler (the core
//! keeps them from that library, which aborts on a builtin handle it does not know). The C
//! matrix leaves `dtype_logical` out on ompi-on-mpich4, whose oracle (Open MPI) has them.

use mpicr_tests::{compare, job, Flavor, Harness, Job, Launcher, Scratch};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Builds `c-tests/NAME.c` with Open MPI's wrapper `mpicc` (and `flags`) into `dir`.
fn build_c_test(mpicc: &Path, root: &Path, dir: &Scratch, name: &str, flags: &[&str]) -> PathBuf {
    let bin = dir.root().join(name);
    let out = Command::new(mpicc)
        .args(flags)
        .args(["-O2", "-I"])
        .arg(root.join("c-tests"))
        .arg("-o")
        .arg(&bin)
        .arg(root.join(format!("c-tests/{name}.c")))
        .arg("-lm")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    bin
}

#[test]
fn a_non_pie_open_mpi_program_runs_under_the_open_mpi_face() {
    let root = Harness::workspace_root();
    let flavor = Flavor::OmpiOnMpich4;
    let (mpicc, native) = match (flavor.mpicc(&root), flavor.native_launcher(&root)) {
        (Ok(c), Ok((l, _))) => (c, l),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("skip: {e}");
            return;
        }
    };
    let shim = root.join("target/release/libmpicr_ompi.so");
    assert!(shim.is_file(), "{} is missing: cargo build --release -p mpicr-face-ompi", shim.display());

    let build = Scratch::new("ompi-face-no-pie-build", false).unwrap();
    let bin = build_c_test(&mpicc, &root, &build, "coll_blocking", &["-no-pie"]);

    // The executable copies the handles: the case this test is about.
    let relocs = Command::new("readelf").arg("-rW").arg(&bin).output().unwrap();
    let relocs = String::from_utf8_lossy(&relocs.stdout);
    let copied: Vec<&str> = relocs.lines().filter(|l| l.contains("R_X86_64_COPY") && l.contains("ompi_mpi_")).collect();
    assert!(
        copied.iter().any(|l| l.contains("ompi_mpi_comm_world")) && copied.len() >= 3,
        "expected copy relocations of Open MPI's predefined handles in a -no-pie build:\n{relocs}"
    );

    let job = |mpiexec, launcher, rank_env| Job {
        mpiexec,
        launcher,
        ranks: 2,
        wrapper: Vec::new(),
        program: bin.clone(),
        args: Vec::new(),
        rank_env,
        timeout: Duration::from_secs(120),
    };
    let oracle = job::run(&job(native, Launcher::OpenMpi, Vec::new()), &Scratch::new("ompi-face-no-pie-native", false).unwrap()).unwrap();
    mpicr_tests::check_self_verdict("coll_blocking", &oracle).unwrap();
    let shimmed = job::run(
        &job(flavor.mpiexec(&root).unwrap(), Launcher::Hydra, vec![("LD_PRELOAD".into(), shim.into_os_string())]),
        &Scratch::new("ompi-face-no-pie-shim", false).unwrap(),
    )
    .unwrap();
    if let Some(diff) = compare(&oracle, &shimmed) {
        panic!("the -no-pie program under libmpicr_ompi.so differs from its native run: {diff}");
    }
    for (rank, err) in shimmed.stderr.iter().enumerate() {
        let err = String::from_utf8_lossy(err);
        assert!(!err.contains("different size"), "rank {rank}: ld.so found a symbol of another size:\n{err}");
    }
}

#[test]
fn datatypes_mpich_4_0_lacks_fail_with_mpi_err_type_under_the_open_mpi_face() {
    let root = Harness::workspace_root();
    let flavor = Flavor::OmpiOnMpich4;
    let (mpicc, mpiexec) = match (flavor.mpicc(&root), flavor.mpiexec(&root)) {
        (Ok(c), Ok(m)) => (c, m),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("skip: {e}");
            return;
        }
    };
    let shim = root.join("target/release/libmpicr_ompi.so");
    assert!(shim.is_file(), "{} is missing: cargo build --release -p mpicr-face-ompi", shim.display());
    let build = Scratch::new("ompi-face-logical-build", false).unwrap();
    let bin = build_c_test(&mpicc, &root, &build, "dtype_logical", &[]);
    let shimmed = job::run(
        &Job {
            mpiexec,
            launcher: Launcher::Hydra,
            ranks: 1,
            wrapper: Vec::new(),
            program: bin,
            args: Vec::new(),
            rank_env: vec![("LD_PRELOAD".into(), shim.into_os_string())],
            timeout: Duration::from_secs(120),
        },
        &Scratch::new("ompi-face-logical-shim", false).unwrap(),
    )
    .unwrap();
    mpicr_tests::check_self_verdict("dtype_logical", &shimmed).unwrap();
    let stdout = String::from_utf8_lossy(&shimmed.stdout[0]);
    for n in [1, 2, 4, 8] {
        let line = format!("MPI_LOGICAL{n}: MPI_Type_size MPI_ERR_TYPE");
        assert!(stdout.lines().any(|l| l == line), "expected `{line}` over MPICH 4.0.2:\n{stdout}");
    }
}
