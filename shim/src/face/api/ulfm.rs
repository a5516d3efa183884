//! ULFM's fault-tolerance functions (`MPIX_Comm_*`, MPICH's signatures), for every face (Open
//! MPI 5's `mpi-ext.h` declares them all; the MPICH face exports those MPICH's `mpi.h` declares,
//! `tools/gen_api.py`'s `MPIX_ULFM`): passed to the
//! library underneath where it has them (`lower::ulfm`), else the library's lack is raised as
//! for any function it does not provide (`MPI_ERR_UNSUPPORTED_OPERATION`, naming it).
//!
//! mpicr carries a job whose processes are all alive, so: `MPIX_Comm_shrink`'s communicator has
//! every process of its parent and is registered like a duplicate (its recipe is its
//! membership); `MPIX_Comm_agree` and `_iagree` are counted as collectives for the checkpoint's
//! alignment (a pending `_iagree` refuses the checkpoint like any other pending request of a
//! kind the shim cannot make again); the groups of failed processes are registered groups. A
//! revoked communicator cannot be made again revoked: once the program revoked one, checkpoints
//! are refused (`core::kinds::comm::note_revoked`).

use crate::face::abi::*;
use crate::face::api::coll::begin_collective;
use crate::face::api::comm::register_derived;
use crate::face::api::{put, register_group};
use crate::face::call::{self, Comm, On, ToReal};
use crate::lower::ulfm;
use std::os::raw::c_int;

/// Whether the library underneath says `comm` (a real communicator) is revoked, by this process
/// or another: asked only where the shim answers a call itself (point-to-point with
/// `MPI_PROC_NULL`, which Open MPI fails with `MPI_ERR_REVOKED` on a revoked communicator), and
/// only of Open MPI (the only library whose ULFM the faces reach; the function's address is
/// looked up once per generation).
pub fn revoked_real(c: c_int) -> bool {
    use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
    static GEN: AtomicU32 = AtomicU32::new(u32::MAX);
    static HAS: AtomicUsize = AtomicUsize::new(0);
    let g = crate::lower::current();
    if !g.is_open_mpi() {
        return false;
    }
    if GEN.load(Ordering::Acquire) != g.number {
        HAS.store(!ulfm::lookup("MPIX_Comm_is_revoked").is_null() as usize, Ordering::Release);
        GEN.store(g.number, Ordering::Release);
    }
    if HAS.load(Ordering::Acquire) == 0 {
        return false;
    }
    let mut flag = 0;
    // SAFETY: a live real communicator of the current generation, a local out-pointer.
    matches!(unsafe { ulfm::comm_is_revoked(c, &mut flag) }, Some(MPI_SUCCESS)) && flag != 0
}

/// The library's answer, or its lack raised as a missing function.
fn answer(name: &'static str, rc: Option<c_int>) -> Result<(), c_int> {
    match rc {
        Some(rc) => call::ok(rc),
        None => call::missing(name),
    }
}

/// # Safety
/// MPI's contract of `MPIX_Comm_revoke`.
pub unsafe fn MPIX_Comm_revoke(comm: MPI_Comm) -> c_int {
    call::run("MPIX_Comm_revoke", On::Comm(comm), || {
        let c = Comm(comm).to_real()?;
        // SAFETY: a live real communicator.
        answer("MPIX_Comm_revoke", unsafe { ulfm::comm_revoke(c) })?;
        crate::core::kinds::comm::note_revoked();
        Ok(())
    })
}

/// # Safety
/// MPI's contract of `MPIX_Comm_is_revoked`.
pub unsafe fn MPIX_Comm_is_revoked(comm: MPI_Comm, flag: *mut c_int) -> c_int {
    call::run("MPIX_Comm_is_revoked", On::Comm(comm), || {
        let c = Comm(comm).to_real()?;
        // SAFETY: a live real communicator, the caller's out-pointer.
        answer("MPIX_Comm_is_revoked", unsafe { ulfm::comm_is_revoked(c, flag) })
    })
}

/// # Safety
/// MPI's contract of `MPIX_Comm_failure_ack`.
pub unsafe fn MPIX_Comm_failure_ack(comm: MPI_Comm) -> c_int {
    call::run("MPIX_Comm_failure_ack", On::Comm(comm), || {
        let c = Comm(comm).to_real()?;
        // SAFETY: a live real communicator.
        answer("MPIX_Comm_failure_ack", unsafe { ulfm::comm_failure_ack(c) })
    })
}

/// # Safety
/// MPI's contract of `MPIX_Comm_ack_failed`.
pub unsafe fn MPIX_Comm_ack_failed(comm: MPI_Comm, num_to_ack: c_int, num_acked: *mut c_int) -> c_int {
    call::run("MPIX_Comm_ack_failed", On::Comm(comm), || {
        let c = Comm(comm).to_real()?;
        // SAFETY: a live real communicator, the caller's out-pointer.
        answer("MPIX_Comm_ack_failed", unsafe { ulfm::comm_ack_failed(c, num_to_ack, num_acked) })
    })
}

macro_rules! failed_group {
    ($name:ident, $lower:ident) => {
        /// # Safety
        /// MPI's contract of the function of this name.
        pub unsafe fn $name(comm: MPI_Comm, group: *mut MPI_Group) -> c_int {
            call::run(stringify!($name), On::Comm(comm), || {
                let c = Comm(comm).to_real()?;
                let mut g = MPI_GROUP_NULL;
                // SAFETY: a live real communicator, a local out-handle.
                answer(stringify!($name), unsafe { ulfm::$lower(c, &mut g) })?;
                let v = register_group(g);
                // SAFETY: the caller's out-pointer, null or valid for a write.
                unsafe { put(group, v) };
                Ok(())
            })
        }
    };
}
failed_group!(MPIX_Comm_failure_get_acked, comm_failure_get_acked);
failed_group!(MPIX_Comm_get_failed, comm_get_failed);

/// # Safety
/// MPI's contract of `MPIX_Comm_shrink`.
pub unsafe fn MPIX_Comm_shrink(comm: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
    let (g, seq) = begin_collective(comm);
    call::run_in(g, "MPIX_Comm_shrink", On::Comm(comm), || {
        let c = Comm(comm).to_real()?;
        let mut n = MPI_COMM_NULL;
        // SAFETY: a live real communicator, a local out-handle.
        answer("MPIX_Comm_shrink", unsafe { ulfm::comm_shrink(c, &mut n) })?;
        let v = register_derived(n, "MPIX_Comm_shrink", comm, seq);
        // SAFETY: the caller's out-pointer, null or valid for a write.
        unsafe { put(newcomm, v) };
        Ok(())
    })
}

/// # Safety
/// MPI's contract of `MPIX_Comm_agree`.
pub unsafe fn MPIX_Comm_agree(comm: MPI_Comm, flag: *mut c_int) -> c_int {
    let (g, _) = begin_collective(comm);
    call::run_in(g, "MPIX_Comm_agree", On::Comm(comm), || {
        let c = Comm(comm).to_real()?;
        // SAFETY: a live real communicator, the caller's flag.
        answer("MPIX_Comm_agree", unsafe { ulfm::comm_agree(c, flag) })
    })
}

/// # Safety
/// MPI's contract of `MPIX_Comm_iagree` (`flag` valid until the request completes).
pub unsafe fn MPIX_Comm_iagree(comm: MPI_Comm, flag: *mut c_int, request: *mut MPI_Request) -> c_int {
    let (g, _) = begin_collective(comm);
    call::run_in(g, "MPIX_Comm_iagree", On::Comm(comm), || {
        let c = Comm(comm).to_real()?;
        let mut r = MPI_REQUEST_NULL;
        // SAFETY: a live real communicator, the caller's flag, a local out-handle.
        answer("MPIX_Comm_iagree", unsafe { ulfm::comm_iagree(c, flag, &mut r) })?;
        let v = crate::face::api::register_collective(r, comm, "MPIX_Comm_iagree", false);
        // SAFETY: the caller's out-pointer, null or valid for a write.
        unsafe { put(request, v) };
        Ok(())
    })
}
