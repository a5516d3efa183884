//! The program's ABI: handle types, the status layout and the constants of `mpi.h` as the
//! program was compiled against them. Today that is MPICH's, the same ABI as the real library
//! underneath, so the face takes the lower half's definitions as they are; a face for another
//! ABI (Open MPI's, the MPI-5 standard ABI) defines its own here and converts at its edge.
pub use crate::lower::abi::*;
