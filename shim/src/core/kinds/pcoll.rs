//! Persistent collectives (`MPI_*_init`) through a renewal: each request keeps the arguments
//! of its init ([`CollInit`]), and the renewal calls the same init again on the new library.
//! Inits are collective, so every member makes its requests in one job-wide order: by the
//! communicator's id, then by the collective's number on it (`seq`, equal on every member).
//! A started one was counted as a collective by `MPI_Start` (alignment) and completed in the
//! drain, like a nonblocking collective; the program's wait then finds it done.

use super::RebuildError;
use crate::core::handles;
use crate::core::kinds::datatype::Built;
use crate::core::state::OBJ;
use crate::lower;
use crate::lower::abi::*;
use crate::lower::handles::RealRequest;
use mpicr_virtid::{CollArg, CollInit, RequestRecipe, VOp};
use std::os::raw::{c_int, c_void};

/// An argument resolved on the current lower half.
enum Val {
    Int(c_int),
    Count(i64),
    Ptr(*mut c_void),
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

/// The real handle of a virtual op; a freed op is an error.
fn op(v: VOp) -> Result<c_int, RebuildError> {
    match v.index() {
        Some(i) => OBJ.ops.real(i).map(|r| r.raw()).ok_or(RebuildError::OpFreed),
        None => Ok(handles::op(v).raw()),
    }
}

/// What the resolved arguments point to, alive until the init returned: built datatypes (freed
/// after the init: the request keeps its own reference) and arrays of real datatypes.
#[derive(Default)]
struct Keep {
    types: Vec<Built>,
    type_arrays: Vec<Vec<c_int>>,
    wide: Vec<Vec<MPI_Aint>>,
}

fn built(keep: &mut Keep, t: &mpicr_virtid::TypeRef) -> Result<c_int, RebuildError> {
    let b = Built::of(t).map_err(|rc| RebuildError::mpi("rebuilding its datatype", rc))?;
    let r = b.real;
    keep.types.push(b);
    Ok(r)
}

fn resolve(args: &[CollArg], keep: &mut Keep) -> Result<Vec<Val>, RebuildError> {
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        out.push(match a {
            CollArg::Buf(p) => Val::Ptr(*p as *mut c_void),
            CollArg::Int(v) => Val::Int(*v),
            CollArg::Count(v) => Val::Count(*v),
            CollArg::Ints(v) => Val::Ptr(v.as_ref().map_or(std::ptr::null_mut(), |v| v.as_ptr() as *mut c_void)),
            CollArg::Counts(v) => match v {
                // (MPI_Count and MPI_Aint are both 64-bit on the ABIs served: one copy does)
                Some(v) => {
                    keep.wide.push(v.iter().map(|&x| x as MPI_Aint).collect());
                    Val::Ptr(keep.wide.last().map_or(std::ptr::null_mut(), |w| w.as_ptr() as *mut c_void))
                }
                None => Val::Ptr(std::ptr::null_mut()),
            },
            CollArg::Type(t) => Val::Int(built(keep, t)?),
            CollArg::Types(ts) => match ts {
                Some(ts) => {
                    let reals = ts.iter().map(|t| built(keep, t)).collect::<Result<Vec<_>, _>>()?;
                    keep.type_arrays.push(reals);
                    Val::Ptr(keep.type_arrays.last().map_or(std::ptr::null_mut(), |a| a.as_ptr() as *mut c_void))
                }
                None => Val::Ptr(std::ptr::null_mut()),
            },
            CollArg::Op(o) => Val::Int(op(*o)?),
            CollArg::Comm(c) => Val::Int(handles::comm(*c).raw()),
            CollArg::Info(i) => Val::Int(handles::info(*i).raw()),
        });
    }
    Ok(out)
}

/// Calls the real init named by the recipe with the resolved arguments (their C types are
/// inferred from each init's signature).
macro_rules! inits {
    ($name:expr, $v:expr, $r:expr; $($f:ident: $($i:literal)*;)*) => {{
        let f = lower::fns();
        let get = |i: usize| $v.get(i).unwrap_or(&Val::Int(0));
        match $name {
            // SAFETY: the real init of that name, with arguments of the recipe recorded from the
            // same call (buffers the program keeps for the request's life, as MPI requires).
            $(stringify!($f) => f.$f.map_or(MPI_ERR_OTHER, |g| unsafe { g($(FromVal::from_val(get($i)),)* $r) }),)*
            _ => MPI_ERR_OTHER,
        }
    }};
}

/// Makes one persistent collective again; returns the real request.
fn remake(init: &CollInit) -> Result<c_int, RebuildError> {
    let mut keep = Keep::default();
    let v = resolve(&init.args, &mut keep)?;
    let mut r = MPI_REQUEST_NULL;
    let rc = inits!(init.function.as_str(), v, &mut r;
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
    );
    super::check(rc, &init.function)?;
    Ok(r)
}

/// The renewal: every persistent collective made again, in the job-wide order.
pub fn rebuild() -> Result<(), RebuildError> {
    let mut todo: Vec<(u32, Box<CollInit>)> = OBJ
        .requests
        .snapshot()
        .into_iter()
        .filter_map(|(idx, _, e)| match e.recipe {
            RequestRecipe::Collective { init: Some(init), .. } => Some((idx, init)),
            _ => None,
        })
        .collect();
    todo.sort_by_key(|(_, i)| (i.comm_gid, i.seq));
    for (idx, init) in todo {
        let r = remake(&init).map_err(|e| RebuildError::Collective { function: init.function.clone(), source: Box::new(e) })?;
        OBJ.requests.set_real(idx, RealRequest(r));
    }
    Ok(())
}
