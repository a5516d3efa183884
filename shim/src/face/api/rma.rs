//! One-sided communication: windows are virtualised and counted as collectives on their
//! communicator; windows cannot be checkpointed yet (the agent refuses with a clear error).

use crate::lower::handles::RealWin;
use crate::face::abi::*;
use crate::face::api::put;
use crate::face::call::{self, On};
use crate::face::api::request::register_request;
use crate::core::kinds::win::WinEntry;
use crate::core::state::OBJ;
use crate::face::{conv, errors};
use crate::core::gate;
use mpicr_virtid::{Kind, RequestRecipe};
use std::os::raw::{c_int, c_void};

/// Registers a new real window (its errors come back to the shim) made by `made_by`.
pub fn register_win(real: c_int, made_by: &str) -> MPI_Win {
    if let Some(f) = crate::lower::fns().MPI_Win_set_errhandler {
        // SAFETY: a live real window and a predefined error handler.
        unsafe { f(real, MPI_ERRORS_RETURN) };
    }
    let e = WinEntry { errhandler: MPI_ERRORS_ARE_FATAL, attrs: Vec::new(), made_by: made_by.into() };
    match OBJ.wins.insert(RealWin(real), e) {
        Ok(i) => conv::handle(Kind::Win, i),
        Err(_) => errors::fatal("too many live windows"),
    }
}

pub unsafe fn MPI_Win_free(win: *mut MPI_Win) -> c_int {
    if win.is_null() {
        let _g = gate::enter();
        return errors::raise_default(real!(MPI_Win_free(win)), "MPI_Win_free");
    }
    let v = unsafe { *win };
    let rc = crate::face::api::attr::delete_all_win_attrs(v);
    if rc != MPI_SUCCESS {
        return errors::raise_win(v, rc, "MPI_Win_free");
    }
    let g = gate::enter();
    let mut r = conv::win(v);
    let rc = real!(MPI_Win_free(&mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_win(v, rc, "MPI_Win_free");
    }
    if let Some(i) = conv::index(v, Kind::Win) {
        OBJ.wins.remove(i);
    }
    unsafe { *win = MPI_WIN_NULL };
    MPI_SUCCESS
}

/// A request-based RMA call: runs `call` (handles are translated inside, under the gate) and
/// wraps the request it returns (not restorable while pending).
unsafe fn rma_request(name: &str, win: MPI_Win, request: *mut MPI_Request, real_call: impl FnOnce(&mut c_int) -> c_int) -> c_int {
    call::run(name, On::Win(win), || {
        let mut r = MPI_REQUEST_NULL;
        call::ok(real_call(&mut r))?;
        let v = register_request(r, RequestRecipe::Other { function: name.into() }, MPI_COMM_NULL, false);
        // SAFETY: `request` is the caller's out-pointer, null or valid for a write (this
        // function's contract: MPI's of the request-based RMA calls).
        unsafe { put(request, v) };
        Ok(())
    })
}

macro_rules! rput_like {
    ($name:ident, $count:ty, $($buf:ident : $bt:ty),*) => {
        pub unsafe fn $name(
            $($buf: $bt,)* origin_count: $count, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint,
            target_count: $count, target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request,
        ) -> c_int {
            unsafe { rma_request(stringify!($name), win, request, |r| real!($name($($buf,)* origin_count, conv::datatype(origin_datatype), target_rank, target_disp, target_count,
                conv::datatype(target_datatype), conv::win(win), r))) }
        }
    };
}

rput_like!(MPI_Rput, c_int, origin_addr: *const c_void);
rput_like!(MPI_Rput_c, MPI_Count, origin_addr: *const c_void);
rput_like!(MPI_Rget, c_int, origin_addr: *mut c_void);
rput_like!(MPI_Rget_c, MPI_Count, origin_addr: *mut c_void);

macro_rules! raccumulate {
    ($name:ident, $count:ty) => {
        pub unsafe fn $name(
            origin_addr: *const c_void, origin_count: $count, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint,
            target_count: $count, target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request,
        ) -> c_int {
            unsafe { rma_request(stringify!($name), win, request, |r| real!($name(origin_addr, origin_count, conv::datatype(origin_datatype), target_rank, target_disp, target_count,
                conv::datatype(target_datatype), conv::op(op), conv::win(win), r))) }
        }
    };
}

raccumulate!(MPI_Raccumulate, c_int);
raccumulate!(MPI_Raccumulate_c, MPI_Count);

macro_rules! rget_accumulate {
    ($name:ident, $count:ty) => {
        pub unsafe fn $name(
            origin_addr: *const c_void, origin_count: $count, origin_datatype: MPI_Datatype, result_addr: *mut c_void,
            result_count: $count, result_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: $count,
            target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request,
        ) -> c_int {
            unsafe { rma_request(stringify!($name), win, request, |r| real!($name(origin_addr, origin_count, conv::datatype(origin_datatype), result_addr, result_count,
                conv::datatype(result_datatype), target_rank, target_disp, target_count, conv::datatype(target_datatype),
                conv::op(op), conv::win(win), r))) }
        }
    };
}

rget_accumulate!(MPI_Rget_accumulate, c_int);
rget_accumulate!(MPI_Rget_accumulate_c, MPI_Count);
