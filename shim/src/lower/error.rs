//! Why a generation of the real library could not be loaded (its messages are the ones users
//! see, inside "renewing the MPI library failed: ..." and the like).

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("memfd name")]
    MemfdName,
    #[error("memfd_create: {0}")]
    Memfd(io::Error),
    #[error("writing {name}: {err}")]
    WriteImage { name: String, err: io::Error },
    #[error("{0}: path has a NUL byte")]
    NulInPath(String),
    #[error("dlmopen {path}: {reason}")]
    Dlmopen { path: String, reason: String },
    #[error("dlinfo: {0}")]
    Dlinfo(String),
    #[error("{0}: library path is not UTF-8")]
    NotUtf8(String),
    #[error("the lower half's anchor has no {0}")]
    NoAnchorSymbol(String),
    #[error("cannot start a thread in the lower half's namespace: {0}")]
    NamespaceThread(io::Error),
    #[error("{0}: the MPI library underneath must be named by an absolute path of less than 512 bytes")]
    LibraryPath(String),
    #[error("the MPI library needs {0} NODELETE-free stand-ins, more than the anchor has room for (3)")]
    TooManyStandIns(usize),
    #[error("cannot give the lower half's namespace an environment of its own: {0}")]
    Environment(io::Error),
    #[error("{0} does not look like an MPI library (no MPI_Init)")]
    NotMpi(String),
    /// [`super::locate`]: a program of another ABI (named) and no MPICH-ABI library to run it on.
    #[error("the program speaks {0}, which mpicr runs on an MPICH-ABI library: none found (libmpich.so.12 or libmpi.so.12 in LD_LIBRARY_PATH or the system's library directories); set MPICR_MPI_LIB")]
    NoMpichFor(&'static str),
    #[error("{} is Open MPI: run the program under libmpicr_ompi.so (mpicr run chooses it), which translates Open MPI's ABI to an MPICH-ABI library underneath", .0.display())]
    OpenMpi(PathBuf),
    #[error("{} is the MPI-5 standard ABI: run the program under libmpicr_abi.so (mpicr run chooses it), which translates it to an MPICH-ABI library underneath", .0.display())]
    StandardAbi(PathBuf),
    #[error("the program is not linked to an MPICH-ABI library (libmpich.so.12 or libmpi.so.12); set MPICR_MPI_LIB")]
    NotLinked,
}

/// [`super::check_program_imports`]: the library lacks functions the program uses (their names).
#[derive(Debug, thiserror::Error)]
#[error("{} lacks {} the program uses: {}", .library.display(), if .names.len() == 1 { "a function" } else { "functions" }, .names.join(", "))]
pub struct MissingImports {
    pub library: PathBuf,
    pub names: Vec<String>,
}
