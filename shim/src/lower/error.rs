//! Why a generation of the real library could not be loaded (its messages are the ones users
//! see, inside "renewing the MPI library failed: ..." and the like).

use std::io;

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
}
