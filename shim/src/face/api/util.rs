//! Small helpers shared by the hand-written wrappers.

use crate::face::abi::*;
use crate::lower;
use std::os::raw::c_int;

/// Calls a real MPI function by name. If the library lacks it, returns from the enclosing
/// function (a wrapper returning `c_int`, or a skeleton body returning `Result<_, c_int>`) with
/// MPI_ERR_UNSUPPORTED_OPERATION, the function noted so that it is raised as "not provided"
/// once the gate is left (`face::call::FromMissing`): nothing is raised while the gate is held.
///
/// The call is unsafe and the macro holds the `unsafe` block: use it only where the arguments
/// are valid for that MPI function, i.e. in the wrappers (`unsafe fn`s whose callers owe MPI's
/// contract for their pointers), passing the caller's pointers, locals, or translated handles.
macro_rules! real {
    ($name:ident ( $($arg:expr),* $(,)? )) => {
        match $crate::lower::fns().$name {
            Some(f) => {
                // Some users already sit in an unsafe block (the block below is then nested).
                #[allow(unused_unsafe)]
                // SAFETY: `f` is the real library's entry point of that name, resolved with the C
                // signature of the ABI table; the arguments' validity is the user's duty (above).
                let rc = unsafe { f($($arg),*) };
                rc
            }
            None => return $crate::face::call::missing(stringify!($name)),
        }
    };
}

/// Returns from the wrapper through the communicator's error handler when `rc` is an error.
macro_rules! check_comm {
    ($comm:expr, $rc:expr, $name:expr) => {{
        let rc = $rc;
        if rc != $crate::face::abi::MPI_SUCCESS {
            return $crate::face::errors::raise_comm($comm, rc, $name);
        }
    }};
}

macro_rules! check_default {
    ($rc:expr, $name:expr) => {{
        let rc = $rc;
        if rc != $crate::face::abi::MPI_SUCCESS {
            return $crate::face::errors::raise_default(rc, $name);
        }
    }};
}

/// Reads a C array argument into a Vec (empty for null or non-positive length).
///
/// # Safety
/// `p` must point to `n` readable elements when non-null and `n > 0`.
pub unsafe fn slice<T: Copy>(p: *const T, n: i64) -> Vec<T> {
    if p.is_null() || n <= 0 {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec()
}

/// Writes through an out-pointer if it is not null.
///
/// # Safety
/// `p` must be null or valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: guaranteed by the caller.
        unsafe { p.write(v) }
    }
}

/// Writes a status the shim completed unless the program passed MPI_STATUS_IGNORE, leaving its
/// MPI_ERROR field as the program set it: MPI updates that field only in the calls that complete
/// several requests, and only when they return MPI_ERR_IN_STATUS ([`put_status_error`]).
///
/// # Safety
/// `p` must be MPI_STATUS_IGNORE, null, or valid for a write.
pub unsafe fn put_status(p: *mut MPI_Status, s: &MPI_Status) {
    if !p.is_null() && p != MPI_STATUS_IGNORE {
        // SAFETY: guaranteed by the caller; each field is written on its own so that MPI_ERROR
        // is never touched.
        unsafe {
            (*p).count_lo = s.count_lo;
            (*p).count_hi_and_cancelled = s.count_hi_and_cancelled;
            (*p).MPI_SOURCE = s.MPI_SOURCE;
            (*p).MPI_TAG = s.MPI_TAG;
        }
    }
}

/// Sets the MPI_ERROR field of one status of a multiple completion that returns
/// MPI_ERR_IN_STATUS.
///
/// # Safety
/// As for [`put_status`].
pub unsafe fn put_status_error(p: *mut MPI_Status, error: c_int) {
    if !p.is_null() && p != MPI_STATUS_IGNORE {
        // SAFETY: guaranteed by the caller.
        unsafe { (*p).MPI_ERROR = error };
    }
}

/// The program's status as the real library would find it, for a call the shim makes into a
/// local on the program's behalf: the library then leaves (or sets) MPI_ERROR exactly as it
/// would in the program's own status, and [`put_library_status`] hands the result back whole.
///
/// # Safety
/// As for [`put_status`] (read instead of written).
pub unsafe fn library_status_in(p: *const MPI_Status) -> MPI_Status {
    if p.is_null() || std::ptr::eq(p, MPI_STATUS_IGNORE) {
        return MPI_Status::default();
    }
    // SAFETY: guaranteed by the caller. The program may not have initialised it: a status is
    // plain integers, any bit pattern is a value.
    unsafe { p.read() }
}

/// Writes back a status that the real library filled in from [`library_status_in`].
///
/// # Safety
/// As for [`put_status`].
pub unsafe fn put_library_status(p: *mut MPI_Status, s: &MPI_Status) {
    if !p.is_null() && p != MPI_STATUS_IGNORE {
        // SAFETY: guaranteed by the caller.
        unsafe { p.write(*s) }
    }
}

/// The real size of a (real) communicator, or of its remote group for intercomms.
pub fn peer_count(real_comm: c_int) -> c_int {
    let f = lower::fns();
    let mut inter = 0;
    let mut n = 0;
    // SAFETY: out-pointers are valid locals.
    unsafe {
        if let Some(t) = f.MPI_Comm_test_inter {
            t(real_comm, &mut inter);
        }
        if inter != 0 {
            if let Some(rs) = f.MPI_Comm_remote_size {
                rs(real_comm, &mut n);
            }
        } else if let Some(sz) = f.MPI_Comm_size {
            sz(real_comm, &mut n);
        }
    }
    n
}

pub fn is_inter(real_comm: c_int) -> bool {
    let mut inter = 0;
    if let Some(t) = lower::fns().MPI_Comm_test_inter {
        // SAFETY: valid out-pointer.
        unsafe { t(real_comm, &mut inter) };
    }
    inter != 0
}

pub use crate::lower::cstr;
