//! What every collective shares (the wrappers themselves are generated from one template in
//! `gen/collectives.rs`): the alignment check that lets a checkpoint stop every member of a
//! communicator after the same number of collectives, and the datatype arrays of `*w` calls.

use crate::core::state::OBJ;
use crate::core::{agent, gate};
use crate::face::abi::*;
use crate::face::conv;
use crate::lower;
use std::os::raw::c_int;

/// Enters the gate to start a collective on `comm` and counts it. While a checkpoint aligns
/// collectives, a rank that has reached its target waits here (outside the gate) until the
/// checkpoint is over. Returns the guard and the communicator's new collective count.
/// No lock on the way in: the counters are atomics (`agent::try_start_collective`).
pub fn begin_collective(comm: MPI_Comm) -> (gate::Guard, u64) {
    loop {
        let g = gate::enter();
        let Some(c) = conv::comm_index(comm).and_then(|i| OBJ.comms.counters(i)) else { return (g, 0) };
        match agent::try_start_collective(c) {
            Some(seq) => return (g, seq),
            None => wait_to_start(g),
        }
    }
}

/// As [`begin_collective`], for starts counted on counters of their own (a partitioned pair).
pub fn begin_counted(c: &mpicr_virtid::CommCounters) -> gate::Guard {
    loop {
        let g = gate::enter();
        if agent::try_start_collective(c).is_some() {
            return g;
        }
        wait_to_start(g);
    }
}

/// A start past its checkpoint target: drives the library once (inside the gate), leaves the
/// gate and yields before trying again, as MPI's own waits spin. Other ranks may need this
/// rank's progress to reach their own targets: a large message it sent moves only while it
/// progresses, and so do one-sided operations that target it (see `core::checkpoint::progress`).
fn wait_to_start(g: gate::Guard) {
    crate::core::checkpoint::progress();
    drop(g);
    std::thread::yield_now();
}

/// Which side of a `*w` collective a datatype array describes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Send,
    Recv,
}

/// Translates the per-peer datatype array of an `Alltoallw`-style call.
///
/// # Safety
/// `types` must hold one handle per peer (per neighbour for neighbourhood collectives).
pub unsafe fn coll_types(types: *const MPI_Datatype, real_comm: c_int, side: Side, neighbor: bool) -> Vec<MPI_Datatype> {
    let n = if neighbor {
        let (indeg, outdeg) = neighbor_degrees(real_comm);
        if side == Side::Send {
            outdeg
        } else {
            indeg
        }
    } else {
        crate::face::api::peer_count(real_comm)
    };
    // MPI_Alltoallw with MPI_IN_PLACE ignores the send types, which may then be garbage.
    // SAFETY: `types` holds one handle per peer (per neighbour), `n`, by this function's contract; null gives
    // an empty Vec.
    unsafe { conv::datatypes(types, n.max(0) as usize) }
}

/// In- and out-degree of a communicator's topology (as used by neighbourhood collectives).
pub fn neighbor_degrees(real_comm: c_int) -> (c_int, c_int) {
    let f = lower::fns();
    let mut kind = MPI_UNDEFINED;
    // SAFETY: out-pointers are valid locals.
    unsafe {
        f.MPI_Topo_test.map(|t| t(real_comm, &mut kind));
        // MPI_GRAPH = 1, MPI_CART = 2, MPI_DIST_GRAPH = 3 in the MPICH ABI.
        match kind {
            2 => {
                let mut nd = 0;
                f.MPI_Cartdim_get.map(|g| g(real_comm, &mut nd));
                (2 * nd, 2 * nd)
            }
            1 => {
                let (mut rank, mut n) = (0, 0);
                f.MPI_Comm_rank.map(|g| g(real_comm, &mut rank));
                f.MPI_Graph_neighbors_count.map(|g| g(real_comm, rank, &mut n));
                (n, n)
            }
            3 => {
                let (mut i, mut o, mut w) = (0, 0, 0);
                f.MPI_Dist_graph_neighbors_count.map(|g| g(real_comm, &mut i, &mut o, &mut w));
                (i, o)
            }
            _ => (0, 0),
        }
    }
}

/// How many entries a per-peer array of a collective on `comm` holds (`side`: whose peers).
fn per_peer(comm: MPI_Comm, side: Side, neighbor: bool) -> usize {
    let real = conv::comm(comm);
    let n = if neighbor {
        let (indeg, outdeg) = neighbor_degrees(real);
        if side == Side::Send {
            outdeg
        } else {
            indeg
        }
    } else {
        crate::face::api::peer_count(real)
    };
    n.max(0) as usize
}

/// A copy of a per-peer `int` array of a persistent collective's init, for its recipe.
///
/// # Safety
/// `p` is null or holds one entry per peer of `comm` on `side`.
pub unsafe fn coll_ints(p: *const c_int, comm: MPI_Comm, side: Side, neighbor: bool) -> Option<Vec<i32>> {
    // SAFETY: this function's contract.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, per_peer(comm, side, neighbor)) }.to_vec())
}

/// A copy of a per-peer `MPI_Count` or `MPI_Aint` array (both 64-bit here), for a recipe.
///
/// # Safety
/// As for [`coll_ints`], with 8-byte entries.
pub unsafe fn coll_counts<T: Wide>(p: *const T, comm: MPI_Comm, side: Side, neighbor: bool) -> Option<Vec<i64>> {
    // SAFETY: this function's contract.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, per_peer(comm, side, neighbor)) }.iter().map(|&v| v.wide()).collect())
}

/// `MPI_Count` and `MPI_Aint` entries, widened for a recipe.
pub trait Wide: Copy {
    fn wide(self) -> i64;
}
impl Wide for MPI_Count {
    fn wide(self) -> i64 {
        self
    }
}
impl Wide for MPI_Aint {
    fn wide(self) -> i64 {
        self as i64
    }
}

/// The per-peer datatypes of a `*w` persistent collective, as recipe references.
///
/// # Safety
/// As for [`coll_ints`].
pub unsafe fn coll_typerefs(p: *const MPI_Datatype, comm: MPI_Comm, side: Side, neighbor: bool) -> Option<Vec<mpicr_virtid::TypeRef>> {
    (!p.is_null()).then(|| {
        // SAFETY: `p` is non-null here and holds one handle per peer (per neighbour), the count
        // `per_peer` gives (this function's contract).
        unsafe { std::slice::from_raw_parts(p, per_peer(comm, side, neighbor)) }.iter().map(|&t| crate::face::api::datatype::typeref(t)).collect()
    })
}
