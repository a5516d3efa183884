//! Virtual handles as the core knows them: a table index encoded by `mpicr_virtid`, or a
//! predefined handle of the lower ABI, which stands for itself (the two predefined
//! communicators stand for the real ones of the current generation). Recipes store handles in
//! this form. The face converts the program's handles to these at its edge (with MPICH's ABI on
//! both sides, that conversion is the identity).

use crate::core::state::{OBJ, SELF_INDEX, WORLD_INDEX};
use crate::lower::abi::{MPI_COMM_SELF, MPI_COMM_WORLD};
use mpicr_virtid::encoding::decode;
use mpicr_virtid::{Kind, VirtualHandle};
use std::os::raw::c_int;

/// What a freed virtual handle becomes on its way to the real library: a value of MPICH's
/// "invalid" handle kind that the library rejects with the object's error class.
pub const STALE: c_int = 0;

/// Set while the lower half runs a sessions-only generation (see `face::conv::comm_checked`).
pub static SESSIONS_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Table index of a communicator handle (virtual or predefined); `None` if not one of ours.
#[inline(always)]
pub fn comm_index(v: c_int) -> Option<u32> {
    match decode(v, Kind::Comm) {
        Some(i) => Some(i),
        None if v == MPI_COMM_WORLD => Some(WORLD_INDEX),
        None if v == MPI_COMM_SELF => Some(SELF_INDEX),
        None => None,
    }
}

/// The real communicator of a virtual one (a foreign value passes unchanged, a freed one
/// becomes [`STALE`]).
#[inline(always)]
pub fn comm(v: c_int) -> c_int {
    match comm_index(v) {
        Some(i) => OBJ.comms.real(i).map_or(STALE, |r| r.raw()),
        None => v,
    }
}

/// The real datatype of a virtual one (predefined types stand for themselves).
#[inline(always)]
pub fn datatype(v: c_int) -> c_int {
    match decode(v, Kind::Datatype) {
        Some(i) => OBJ.datatypes.real(i).map_or(STALE, |r| r.raw()),
        None => v,
    }
}

/// Encodes a new virtual handle.
pub fn handle(kind: Kind, index: u32) -> c_int {
    VirtualHandle { kind, index }.to_int()
}

/// The virtual handle of the communicator at `index` (the predefined ones for world and self).
pub fn comm_handle(index: u32) -> c_int {
    match index {
        WORLD_INDEX => MPI_COMM_WORLD,
        SELF_INDEX => MPI_COMM_SELF,
        i => handle(Kind::Comm, i),
    }
}

/// Index of a virtual handle of `kind`.
#[inline(always)]
pub fn index(v: c_int, kind: Kind) -> Option<u32> {
    decode(v, kind)
}
