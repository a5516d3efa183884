//! ULFM's fault-tolerance functions (`MPIX_Comm_revoke`, `_shrink`, `_agree`, ...): Open MPI
//! 5's `mpi-ext.h` and MPICH's `mpi.h` declare them, outside the ABI tables the rest of the
//! lower half is generated from, so each is looked up by name in the current generation (they
//! are rare calls). MPICH's take MPICH's handles as they are; Open MPI's go through the
//! adapter's conversions (`ompi::ulfm`). `None`: the library underneath lacks the function
//! (Debian's Open MPI 4.1.4 has none of them, MPICH 4.0.2 no `MPIX_Comm_get_failed`).

use super::ompi;
use std::os::raw::c_int;

/// The ULFM functions, by their MPI names (the `PMPIX_` name is looked up first).
pub const NAMES: [&str; 9] = [
    "MPIX_Comm_revoke",
    "MPIX_Comm_is_revoked",
    "MPIX_Comm_shrink",
    "MPIX_Comm_agree",
    "MPIX_Comm_iagree",
    "MPIX_Comm_failure_ack",
    "MPIX_Comm_failure_get_acked",
    "MPIX_Comm_get_failed",
    "MPIX_Comm_ack_failed",
];

/// The address of `name` in the current generation's library (its `P` name first), or null.
pub fn lookup(name: &str) -> *mut std::ffi::c_void {
    let g = super::current();
    let p = g.data(&format!("P{name}"));
    if p.is_null() {
        g.data(name)
    } else {
        p
    }
}

/// MPICH's `MPIX_ERR_REVOKED` (its mpi.h; Open MPI's `MPI_ERR_REVOKED` converts to it).
pub const MPIX_ERR_REVOKED: c_int = 103;

type F1 = unsafe extern "C" fn(c_int) -> c_int;
type F2 = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
type F3 = unsafe extern "C" fn(c_int, *mut c_int, *mut c_int) -> c_int;
type FAck = unsafe extern "C" fn(c_int, c_int, *mut c_int) -> c_int;

macro_rules! mpich_or_ompi {
    ($name:literal, $ty:ty, $ompi:path, ($($a:ident),*)) => {{
        if super::current().is_open_mpi() {
            // SAFETY: the caller's contract, which the adapter's function shares.
            return unsafe { $ompi($($a),*) };
        }
        let p = lookup($name);
        if p.is_null() {
            return None;
        }
        // SAFETY: MPICH's function of this name, with MPICH's C signature `$ty` (its mpi.h);
        // the arguments are MPICH handles and the caller's out-pointers.
        Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, $ty>(p)($($a),*) })
    }};
}

/// # Safety
/// For every function here: a real communicator of the current generation, and out-pointers
/// valid for a write.
pub unsafe fn comm_revoke(comm: c_int) -> Option<c_int> {
    mpich_or_ompi!("MPIX_Comm_revoke", F1, ompi::ulfm::revoke, (comm))
}
/// # Safety
/// See [`comm_revoke`].
pub unsafe fn comm_is_revoked(comm: c_int, flag: *mut c_int) -> Option<c_int> {
    mpich_or_ompi!("MPIX_Comm_is_revoked", F2, ompi::ulfm::is_revoked, (comm, flag))
}
/// # Safety
/// See [`comm_revoke`].
pub unsafe fn comm_shrink(comm: c_int, newcomm: *mut c_int) -> Option<c_int> {
    mpich_or_ompi!("MPIX_Comm_shrink", F2, ompi::ulfm::shrink, (comm, newcomm))
}
/// # Safety
/// See [`comm_revoke`].
pub unsafe fn comm_agree(comm: c_int, flag: *mut c_int) -> Option<c_int> {
    mpich_or_ompi!("MPIX_Comm_agree", F2, ompi::ulfm::agree, (comm, flag))
}
/// # Safety
/// See [`comm_revoke`]; `flag` stays valid until the request completes.
pub unsafe fn comm_iagree(comm: c_int, flag: *mut c_int, request: *mut c_int) -> Option<c_int> {
    mpich_or_ompi!("MPIX_Comm_iagree", F3, ompi::ulfm::iagree, (comm, flag, request))
}
/// # Safety
/// See [`comm_revoke`].
pub unsafe fn comm_failure_ack(comm: c_int) -> Option<c_int> {
    mpich_or_ompi!("MPIX_Comm_failure_ack", F1, ompi::ulfm::failure_ack, (comm))
}
/// # Safety
/// See [`comm_revoke`].
pub unsafe fn comm_failure_get_acked(comm: c_int, group: *mut c_int) -> Option<c_int> {
    mpich_or_ompi!("MPIX_Comm_failure_get_acked", F2, ompi::ulfm::failure_get_acked, (comm, group))
}
/// # Safety
/// See [`comm_revoke`].
pub unsafe fn comm_get_failed(comm: c_int, group: *mut c_int) -> Option<c_int> {
    mpich_or_ompi!("MPIX_Comm_get_failed", F2, ompi::ulfm::get_failed, (comm, group))
}
/// # Safety
/// See [`comm_revoke`].
pub unsafe fn comm_ack_failed(comm: c_int, num_to_ack: c_int, num_acked: *mut c_int) -> Option<c_int> {
    mpich_or_ompi!("MPIX_Comm_ack_failed", FAck, ompi::ulfm::ack_failed, (comm, num_to_ack, num_acked))
}
