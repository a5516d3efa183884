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
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::coll::InitArg;
use crate::lower::handles::RealRequest;
use mpicr_virtid::{CollArg, CollInit, RequestRecipe, VOp};
use std::os::raw::c_int;

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

/// What each argument becomes, before the arrays it needs are in [`Keep`].
enum Step<'a> {
    Arg(InitArg<'a>),
    Wide(usize),
    Types(usize),
}

/// The arguments of `args` on the current lower half; what they point to is in `keep`.
fn resolve<'a>(args: &'a [CollArg], keep: &'a mut Keep) -> Result<Vec<InitArg<'a>>, RebuildError> {
    let mut steps = Vec::with_capacity(args.len());
    for a in args {
        steps.push(match a {
            CollArg::Buf(p) => Step::Arg(InitArg::Buf(*p as usize)),
            CollArg::Int(v) => Step::Arg(InitArg::Int(*v)),
            CollArg::Count(v) => Step::Arg(InitArg::Count(*v)),
            CollArg::Ints(v) => Step::Arg(InitArg::Ints(v.as_deref())),
            CollArg::Counts(v) => match v {
                // (MPI_Count and MPI_Aint are both 64-bit on the ABIs served: one copy does)
                Some(v) => {
                    keep.wide.push(v.iter().map(|&x| x as MPI_Aint).collect());
                    Step::Wide(keep.wide.len() - 1)
                }
                None => Step::Arg(InitArg::Counts(None)),
            },
            CollArg::Type(t) => Step::Arg(InitArg::Int(built(keep, t)?)),
            CollArg::Types(ts) => match ts {
                Some(ts) => {
                    let reals = ts.iter().map(|t| built(keep, t)).collect::<Result<Vec<_>, _>>()?;
                    keep.type_arrays.push(reals);
                    Step::Types(keep.type_arrays.len() - 1)
                }
                None => Step::Arg(InitArg::Ints(None)),
            },
            CollArg::Op(o) => Step::Arg(InitArg::Int(op(*o)?)),
            CollArg::Comm(c) => Step::Arg(InitArg::Int(handles::comm(*c).raw())),
            CollArg::Info(i) => Step::Arg(InitArg::Int(handles::info(*i).raw())),
        });
    }
    let keep: &'a Keep = keep;
    Ok(steps
        .into_iter()
        .map(|s| match s {
            Step::Arg(a) => a,
            Step::Wide(i) => InitArg::Counts(Some(&keep.wide[i])),
            Step::Types(i) => InitArg::Ints(Some(&keep.type_arrays[i])),
        })
        .collect())
}

/// Makes one persistent collective again; returns the real request.
fn remake(init: &CollInit) -> Result<c_int, RebuildError> {
    let mut keep = Keep::default();
    let v = resolve(&init.args, &mut keep)?;
    let mut r = MPI_REQUEST_NULL;
    let rc = calls::coll::init(&init.function, &v, &mut r);
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
