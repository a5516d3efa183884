//! Communicators, groups and topologies, and the exchanges the core makes over them.

use super::real;
use crate::lower::abi::*;
use std::os::raw::c_int;

/// `MPI_Comm_size`.
pub fn comm_size(comm: MPI_Comm, size: &mut c_int) -> Option<c_int> {
    real!(MPI_Comm_size(comm, size))
}

/// `MPI_Comm_group`.
pub fn comm_group(comm: MPI_Comm, group: &mut MPI_Group) -> Option<c_int> {
    real!(MPI_Comm_group(comm, group))
}

/// `MPI_Comm_set_errhandler`.
pub fn comm_set_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler) -> Option<c_int> {
    real!(MPI_Comm_set_errhandler(comm, errhandler))
}

/// `MPI_Group_incl` of `ranks`.
pub fn group_incl(group: MPI_Group, ranks: &[c_int], out: &mut MPI_Group) -> Option<c_int> {
    real!(MPI_Group_incl(group, ranks.len() as c_int, ranks.as_ptr(), out))
}

/// `MPI_Comm_create_group`.
pub fn comm_create_group(comm: MPI_Comm, group: MPI_Group, tag: c_int, out: &mut MPI_Comm) -> Option<c_int> {
    real!(MPI_Comm_create_group(comm, group, tag, out))
}

/// `MPI_Intercomm_create`.
pub fn intercomm_create(local: MPI_Comm, local_leader: c_int, peer: MPI_Comm, remote_leader: c_int, tag: c_int, out: &mut MPI_Comm) -> Option<c_int> {
    real!(MPI_Intercomm_create(local, local_leader, peer, remote_leader, tag, out))
}

/// `MPI_Cart_create` with `dims.len()` dimensions, without reordering.
pub fn cart_create(comm: MPI_Comm, dims: &[c_int], periods: &[c_int], out: &mut MPI_Comm) -> Option<c_int> {
    assert_eq!(dims.len(), periods.len(), "MPI_Cart_create: one period per dimension");
    real!(MPI_Cart_create(comm, dims.len() as c_int, dims.as_ptr(), periods.as_ptr(), 0, out))
}

/// `MPI_Graph_create` of `index.len()` nodes, without reordering.
pub fn graph_create(comm: MPI_Comm, index: &[c_int], edges: &[c_int], out: &mut MPI_Comm) -> Option<c_int> {
    assert!(index.last().is_none_or(|&n| n >= 0 && n as usize <= edges.len()), "MPI_Graph_create: fewer edges than the index counts");
    real!(MPI_Graph_create(comm, index.len() as c_int, index.as_ptr(), edges.as_ptr(), 0, out))
}

/// `MPI_Dist_graph_create_adjacent` with no info and no reordering; weights `None` are the
/// library's `MPI_UNWEIGHTED`.
pub fn dist_graph_create_adjacent(
    comm: MPI_Comm,
    sources: &[c_int],
    source_weights: Option<&[c_int]>,
    destinations: &[c_int],
    dest_weights: Option<&[c_int]>,
    out: &mut MPI_Comm,
) -> Option<c_int> {
    assert!(source_weights.is_none_or(|w| w.len() >= sources.len()), "MPI_Dist_graph_create_adjacent: a weight per source");
    assert!(dest_weights.is_none_or(|w| w.len() >= destinations.len()), "MPI_Dist_graph_create_adjacent: a weight per destination");
    let unweighted = crate::lower::real_unweighted() as *const c_int;
    let sw = source_weights.map_or(unweighted, |w| w.as_ptr());
    let dw = dest_weights.map_or(unweighted, |w| w.as_ptr());
    real!(MPI_Dist_graph_create_adjacent(
        comm,
        sources.len() as c_int,
        sources.as_ptr(),
        sw,
        destinations.len() as c_int,
        destinations.as_ptr(),
        dw,
        MPI_INFO_NULL,
        0,
        out,
    ))
}

/// `MPI_Barrier`.
pub fn barrier(comm: MPI_Comm) -> Option<c_int> {
    real!(MPI_Barrier(comm))
}

/// `MPI_Allgather` of one int per rank of `comm` into `all`, which holds one per rank.
pub fn allgather_int(mine: c_int, all: &mut [c_int], comm: MPI_Comm) -> Option<c_int> {
    real!(MPI_Allgather((&mine as *const c_int).cast(), 1, MPI_INT, all.as_mut_ptr().cast(), 1, MPI_INT, comm))
}

/// `MPI_Allgatherv` of the bytes of `mine` into `all`, rank `i`'s `counts[i]` bytes at byte
/// `displs[i]` (one of each per rank of `comm`; `all` holds them all).
pub fn allgatherv_u64(mine: &[u64], all: &mut [u64], counts: &[c_int], displs: &[c_int], comm: MPI_Comm) -> Option<c_int> {
    assert_eq!(counts.len(), displs.len(), "MPI_Allgatherv: a displacement per count");
    assert!(counts.iter().zip(displs).all(|(&c, &d)| c >= 0 && d >= 0 && (c as usize + d as usize) <= all.len() * 8), "MPI_Allgatherv: every rank's part fits");
    let my_bytes = (mine.len() * 8) as c_int;
    real!(MPI_Allgatherv(mine.as_ptr().cast(), my_bytes, MPI_BYTE, all.as_mut_ptr().cast(), counts.as_ptr(), displs.as_ptr(), MPI_BYTE, comm))
}

/// `MPI_Comm_rank`.
pub fn comm_rank(comm: MPI_Comm, rank: &mut c_int) -> Option<c_int> {
    real!(MPI_Comm_rank(comm, rank))
}

/// `MPI_Group_size`.
pub fn group_size(group: MPI_Group, size: &mut c_int) -> Option<c_int> {
    real!(MPI_Group_size(group, size))
}

/// `MPI_Group_translate_ranks` of `ranks` of `group` into `other`, into `out` (one per rank).
pub fn group_translate_ranks(group: MPI_Group, ranks: &[c_int], other: MPI_Group, out: &mut [c_int]) -> Option<c_int> {
    assert!(out.len() >= ranks.len(), "MPI_Group_translate_ranks: a result per rank");
    real!(MPI_Group_translate_ranks(group, ranks.len() as c_int, ranks.as_ptr(), other, out.as_mut_ptr()))
}
