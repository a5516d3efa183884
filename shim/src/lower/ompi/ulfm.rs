//! ULFM's `MPIX_Comm_*` on Open MPI underneath (see `lower::ulfm`): Open MPI 5's functions
//! of `mpi-ext.h`, looked up by name, with the adapter's handle and error conversions.

use super::*;
use crate::lower::ulfm::lookup;

/// Open MPI's function `name` as `T`, or None where this Open MPI lacks it.
fn get<T: Copy>(name: &str) -> Option<T> {
    let p = lookup(name);
    // SAFETY: `T` is the C signature `mpi-ext.h` declares for `name` (each caller's own); a
    // non-null address is that function.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

type OComm = unsafe extern "C" fn(P) -> c_int;
type OCommInt = unsafe extern "C" fn(P, *mut c_int) -> c_int;
type OCommHandle = unsafe extern "C" fn(P, *mut P) -> c_int;
type OIagree = unsafe extern "C" fn(P, *mut c_int, *mut P) -> c_int;
type OAck = unsafe extern "C" fn(P, c_int, *mut c_int) -> c_int;

macro_rules! comm_or_bad {
    ($comm:expr, $name:literal) => {
        match h2p(K::Comm, $comm) {
            Some(c) => c,
            None => return Some(bad_handle(K::Comm, $name)),
        }
    };
}

/// # Safety
/// For every function here: the lower half's contract of the MPI function (a real
/// communicator; out-pointers valid for a write).
pub unsafe fn revoke(comm: c_int) -> Option<c_int> {
    let f: OComm = get("MPIX_Comm_revoke")?;
    let c = comm_or_bad!(comm, "MPIX_Comm_revoke");
    // SAFETY: Open MPI's function, a live communicator of this generation.
    Some(rc_back(unsafe { f(c) }))
}

/// # Safety
/// See [`revoke`].
pub unsafe fn failure_ack(comm: c_int) -> Option<c_int> {
    let f: OComm = get("MPIX_Comm_failure_ack")?;
    let c = comm_or_bad!(comm, "MPIX_Comm_failure_ack");
    // SAFETY: as in `revoke`.
    Some(rc_back(unsafe { f(c) }))
}

/// # Safety
/// `flag` is valid for a read and a write.
pub unsafe fn is_revoked(comm: c_int, flag: *mut c_int) -> Option<c_int> {
    let f: OCommInt = get("MPIX_Comm_is_revoked")?;
    let c = comm_or_bad!(comm, "MPIX_Comm_is_revoked");
    // SAFETY: Open MPI's function, a live communicator, the caller's out-pointer.
    Some(rc_back(unsafe { f(c, flag) }))
}

/// # Safety
/// `flag` is valid for a read and a write.
pub unsafe fn agree(comm: c_int, flag: *mut c_int) -> Option<c_int> {
    let f: OCommInt = get("MPIX_Comm_agree")?;
    let c = comm_or_bad!(comm, "MPIX_Comm_agree");
    // SAFETY: as in `is_revoked`.
    Some(rc_back(unsafe { f(c, flag) }))
}

/// # Safety
/// `num_acked` is valid for a write.
pub unsafe fn ack_failed(comm: c_int, num_to_ack: c_int, num_acked: *mut c_int) -> Option<c_int> {
    let f: OAck = get("MPIX_Comm_ack_failed")?;
    let c = comm_or_bad!(comm, "MPIX_Comm_ack_failed");
    // SAFETY: as in `is_revoked`.
    Some(rc_back(unsafe { f(c, num_to_ack, num_acked) }))
}

/// A call that makes a handle of kind `k` into `*out` (MPICH's value back).
unsafe fn making(name: &'static str, comm: c_int, k: K, out: *mut c_int) -> Option<c_int> {
    let f: OCommHandle = get(name)?;
    let c = match h2p(K::Comm, comm) {
        Some(c) => c,
        None => return Some(bad_handle(K::Comm, name)),
    };
    let mut o = null_of(k);
    // SAFETY: Open MPI's function, a live communicator, a local out-handle.
    let rc = unsafe { f(c, &mut o) };
    if !out.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *out = p2h_out(k, None, o) };
    }
    Some(rc_back(rc))
}

/// # Safety
/// `newcomm` is null or valid for a write.
pub unsafe fn shrink(comm: c_int, newcomm: *mut c_int) -> Option<c_int> {
    // SAFETY: the caller's contract.
    unsafe { making("MPIX_Comm_shrink", comm, K::Comm, newcomm) }
}

/// # Safety
/// `group` is null or valid for a write.
pub unsafe fn failure_get_acked(comm: c_int, group: *mut c_int) -> Option<c_int> {
    // SAFETY: the caller's contract.
    unsafe { making("MPIX_Comm_failure_get_acked", comm, K::Group, group) }
}

/// # Safety
/// `group` is null or valid for a write.
pub unsafe fn get_failed(comm: c_int, group: *mut c_int) -> Option<c_int> {
    // SAFETY: the caller's contract.
    unsafe { making("MPIX_Comm_get_failed", comm, K::Group, group) }
}

/// # Safety
/// `flag` stays valid until the request completes; `request` is valid for a write.
pub unsafe fn iagree(comm: c_int, flag: *mut c_int, request: *mut c_int) -> Option<c_int> {
    let f: OIagree = get("MPIX_Comm_iagree")?;
    let c = comm_or_bad!(comm, "MPIX_Comm_iagree");
    let mut r = null_of(K::Request);
    // SAFETY: Open MPI's function, a live communicator, the caller's flag, a local request.
    let rc = unsafe { f(c, flag, &mut r) };
    if !request.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *request = p2h_out(K::Request, None, r) };
    }
    Some(rc_back(rc))
}
