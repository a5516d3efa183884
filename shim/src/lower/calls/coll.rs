//! Persistent collectives made again: the init a request was made by, called again with the
//! arguments recorded from the program's call.
//!
//! The arguments are those of the program's own call of the same init on the same communicator
//! (its size unchanged by a renewal), so its arrays are as long as the call reads, and its
//! buffers are the program's, which it keeps for the request's life as MPI requires.

use crate::lower::abi::*;
use std::os::raw::{c_int, c_void};

/// An argument of a persistent collective's init, resolved on the current library.
#[derive(Clone, Copy, Debug)]
pub enum InitArg<'a> {
    /// An `int`, or a real handle (datatype, op, communicator, info).
    Int(c_int),
    /// An `MPI_Count` or `MPI_Aint`.
    Count(i64),
    /// The program's buffer, as the address its call passed (`MPI_IN_PLACE`, `MPI_BOTTOM`
    /// included).
    Buf(usize),
    /// An `int` array (counts, displacements, real datatypes); `None`: a null pointer.
    Ints(Option<&'a [c_int]>),
    /// An `MPI_Count`/`MPI_Aint` array; `None`: a null pointer.
    Counts(Option<&'a [MPI_Aint]>),
}

/// An argument as a C value.
enum Val {
    Int(c_int),
    Count(i64),
    Ptr(*mut c_void),
}

impl Val {
    fn of(a: &InitArg<'_>) -> Val {
        match *a {
            InitArg::Int(v) => Val::Int(v),
            InitArg::Count(v) => Val::Count(v),
            InitArg::Buf(p) => Val::Ptr(p as *mut c_void),
            InitArg::Ints(v) => Val::Ptr(v.map_or(std::ptr::null_mut(), |v| v.as_ptr() as *mut c_void)),
            InitArg::Counts(v) => Val::Ptr(v.map_or(std::ptr::null_mut(), |v| v.as_ptr() as *mut c_void)),
        }
    }
}

/// Takes an argument as the C parameter type the real init expects (inferred at the call).
trait FromVal {
    fn from_val(v: &Val) -> Self;
}
impl FromVal for c_int {
    fn from_val(v: &Val) -> Self {
        if let Val::Int(x) = v {
            *x
        } else {
            0
        }
    }
}
impl FromVal for MPI_Count {
    fn from_val(v: &Val) -> Self {
        if let Val::Count(x) = v {
            *x
        } else {
            0
        }
    }
}
impl FromVal for MPI_Aint {
    fn from_val(v: &Val) -> Self {
        if let Val::Count(x) = v {
            *x as MPI_Aint
        } else {
            0
        }
    }
}
impl<T> FromVal for *const T {
    fn from_val(v: &Val) -> Self {
        if let Val::Ptr(p) = v {
            *p as *const T
        } else {
            std::ptr::null()
        }
    }
}
impl<T> FromVal for *mut T {
    fn from_val(v: &Val) -> Self {
        if let Val::Ptr(p) = v {
            *p as *mut T
        } else {
            std::ptr::null_mut()
        }
    }
}

/// Calls the real init named `$name` with the arguments (their C types are inferred from each
/// init's signature).
macro_rules! inits {
    ($name:expr, $v:expr, $r:expr; $($f:ident: $($i:literal)*;)*) => {{
        let f = crate::lower::fns();
        let get = |i: usize| $v.get(i).unwrap_or(&Val::Int(0));
        match $name {
            // SAFETY: the real init of that name, with the arguments recorded from the program's
            // call of it (the module's doc: arrays as long as it reads, the program's buffers),
            // the slices alive until it returns; `$r` is a reference.
            $(stringify!($f) => f.$f.map_or(MPI_ERR_OTHER, |g| unsafe { g($(FromVal::from_val(get($i)),)* $r) }),)*
            _ => MPI_ERR_OTHER,
        }
    }};
}

/// Calls the init `function` (`MPI_Bcast_init`, ...) with `args`; `r` gets the new request.
/// `MPI_ERR_OTHER` for a function it does not know, or the library lacks.
pub fn init(function: &str, args: &[InitArg<'_>], r: &mut MPI_Request) -> c_int {
    let v: Vec<Val> = args.iter().map(Val::of).collect();
    inits!(function, v, r;
        MPI_Barrier_init: 0 1;
        MPI_Bcast_init: 0 1 2 3 4 5;
        MPI_Bcast_init_c: 0 1 2 3 4 5;
        MPI_Gather_init: 0 1 2 3 4 5 6 7 8;
        MPI_Gather_init_c: 0 1 2 3 4 5 6 7 8;
        MPI_Gatherv_init: 0 1 2 3 4 5 6 7 8 9;
        MPI_Gatherv_init_c: 0 1 2 3 4 5 6 7 8 9;
        MPI_Scatter_init: 0 1 2 3 4 5 6 7 8;
        MPI_Scatter_init_c: 0 1 2 3 4 5 6 7 8;
        MPI_Scatterv_init: 0 1 2 3 4 5 6 7 8 9;
        MPI_Scatterv_init_c: 0 1 2 3 4 5 6 7 8 9;
        MPI_Allgather_init: 0 1 2 3 4 5 6 7;
        MPI_Allgather_init_c: 0 1 2 3 4 5 6 7;
        MPI_Allgatherv_init: 0 1 2 3 4 5 6 7 8;
        MPI_Allgatherv_init_c: 0 1 2 3 4 5 6 7 8;
        MPI_Alltoall_init: 0 1 2 3 4 5 6 7;
        MPI_Alltoall_init_c: 0 1 2 3 4 5 6 7;
        MPI_Alltoallv_init: 0 1 2 3 4 5 6 7 8 9;
        MPI_Alltoallv_init_c: 0 1 2 3 4 5 6 7 8 9;
        MPI_Alltoallw_init: 0 1 2 3 4 5 6 7 8 9;
        MPI_Alltoallw_init_c: 0 1 2 3 4 5 6 7 8 9;
        MPI_Reduce_init: 0 1 2 3 4 5 6 7;
        MPI_Reduce_init_c: 0 1 2 3 4 5 6 7;
        MPI_Allreduce_init: 0 1 2 3 4 5 6;
        MPI_Allreduce_init_c: 0 1 2 3 4 5 6;
        MPI_Reduce_scatter_init: 0 1 2 3 4 5 6;
        MPI_Reduce_scatter_init_c: 0 1 2 3 4 5 6;
        MPI_Reduce_scatter_block_init: 0 1 2 3 4 5 6;
        MPI_Reduce_scatter_block_init_c: 0 1 2 3 4 5 6;
        MPI_Scan_init: 0 1 2 3 4 5 6;
        MPI_Scan_init_c: 0 1 2 3 4 5 6;
        MPI_Exscan_init: 0 1 2 3 4 5 6;
        MPI_Exscan_init_c: 0 1 2 3 4 5 6;
        MPI_Neighbor_allgather_init: 0 1 2 3 4 5 6 7;
        MPI_Neighbor_allgather_init_c: 0 1 2 3 4 5 6 7;
        MPI_Neighbor_allgatherv_init: 0 1 2 3 4 5 6 7 8;
        MPI_Neighbor_allgatherv_init_c: 0 1 2 3 4 5 6 7 8;
        MPI_Neighbor_alltoall_init: 0 1 2 3 4 5 6 7;
        MPI_Neighbor_alltoall_init_c: 0 1 2 3 4 5 6 7;
        MPI_Neighbor_alltoallv_init: 0 1 2 3 4 5 6 7 8 9;
        MPI_Neighbor_alltoallv_init_c: 0 1 2 3 4 5 6 7 8 9;
        MPI_Neighbor_alltoallw_init: 0 1 2 3 4 5 6 7 8 9;
        MPI_Neighbor_alltoallw_init_c: 0 1 2 3 4 5 6 7 8 9;

    )
}
