//! Reduction operations made again on their trampolines.

use super::real;
use crate::lower::abi::*;
use std::os::raw::{c_int, c_void};

/// A user reduction function as `MPI_Op_create` takes it.
pub type UserFunction = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype);
/// A user reduction function as `MPI_Op_create_c` takes it.
pub type UserFunctionC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut MPI_Datatype);

/// A user function of either signature.
#[derive(Clone, Copy)]
pub enum UserOp {
    Classic(UserFunction),
    Large(UserFunctionC),
}

/// `MPI_Op_create` (or `MPI_Op_create_c` for a large-count function).
pub fn create(function: UserOp, commute: c_int, op: &mut MPI_Op) -> Option<c_int> {
    // The function has the signature the library expects of the call it goes to.
    match function {
        UserOp::Classic(f) => real!(MPI_Op_create(f as *mut c_void, commute, op)),
        UserOp::Large(f) => real!(MPI_Op_create_c(f as *mut c_void, commute, op)),
    }
}
