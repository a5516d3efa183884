//! Windows.
//!
//! Window memory is given as an address (`usize`) and a size: the program's memory (created or
//! attached windows), the shim's own mapping (allocated ones) or the library's (shared ones).
//! The library records the range and touches it only for the one-sided operations made on the
//! window, which the program asked for, under its own contract, as in a native run.

use super::real;
use crate::lower::abi::*;
use std::os::raw::{c_int, c_void};

/// `MPI_Win_create` over `size` bytes at `base`.
pub fn create(base: usize, size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, win: &mut MPI_Win) -> Option<c_int> {
    real!(MPI_Win_create(base as *mut c_void, size, disp_unit, info, comm, win))
}

/// `MPI_Win_create_c` (a displacement unit beyond an int).
pub fn create_c(base: usize, size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, win: &mut MPI_Win) -> Option<c_int> {
    real!(MPI_Win_create_c(base as *mut c_void, size, disp_unit, info, comm, win))
}

/// `MPI_Win_create_dynamic`.
pub fn create_dynamic(info: MPI_Info, comm: MPI_Comm, win: &mut MPI_Win) -> Option<c_int> {
    real!(MPI_Win_create_dynamic(info, comm, win))
}

/// `MPI_Win_allocate_shared`: `base` gets the address of this rank's part.
pub fn allocate_shared(size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, base: &mut usize, win: &mut MPI_Win) -> Option<c_int> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // The base is written to a pointer-sized local, as MPI's `void *baseptr` of this call is.
    let rc = real!(MPI_Win_allocate_shared(size, disp_unit, info, comm, (&mut p as *mut *mut c_void).cast(), win));
    *base = p as usize;
    rc
}

/// `MPI_Win_allocate_shared_c` (a displacement unit beyond an int).
pub fn allocate_shared_c(size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, base: &mut usize, win: &mut MPI_Win) -> Option<c_int> {
    let mut p: *mut c_void = std::ptr::null_mut();
    let rc = real!(MPI_Win_allocate_shared_c(size, disp_unit, info, comm, (&mut p as *mut *mut c_void).cast(), win));
    *base = p as usize;
    rc
}

/// `MPI_Win_shared_query` of rank `rank`'s part: its size, displacement unit and address.
pub fn shared_query(win: MPI_Win, rank: c_int, size: &mut MPI_Aint, disp_unit: &mut c_int, base: &mut usize) -> Option<c_int> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // As in `allocate_shared`: a pointer-sized local.
    let rc = real!(MPI_Win_shared_query(win, rank, size, disp_unit, (&mut p as *mut *mut c_void).cast()));
    *base = p as usize;
    rc
}

/// `MPI_Win_attach` of `size` bytes at `base` to a dynamic window.
pub fn attach(win: MPI_Win, base: usize, size: MPI_Aint) -> Option<c_int> {
    real!(MPI_Win_attach(win, base as *mut c_void, size))
}

/// `MPI_Win_fence`.
pub fn fence(assert: c_int, win: MPI_Win) -> Option<c_int> {
    real!(MPI_Win_fence(assert, win))
}

/// `MPI_Win_set_errhandler`.
pub fn set_errhandler(win: MPI_Win, errhandler: MPI_Errhandler) -> Option<c_int> {
    real!(MPI_Win_set_errhandler(win, errhandler))
}
