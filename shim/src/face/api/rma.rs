//! One-sided communication: windows are virtualised and counted as collectives on their
//! communicator; windows cannot be checkpointed yet (the agent refuses with a clear error).

use crate::lower::handles::RealWin;
use crate::face::abi::*;
use crate::face::api::{begin_collective, put};
use crate::face::api::request::register_request;
use crate::core::kinds::win::WinEntry;
use crate::core::state::OBJ;
use crate::face::{conv, errors};
use crate::core::gate;
use mpicr_virtid::{Kind, RequestRecipe};
use std::os::raw::{c_int, c_void};

fn register_win(real: c_int, made_by: &str) -> MPI_Win {
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

unsafe fn make(comm: MPI_Comm, name: &'static str, win: *mut MPI_Win, call: impl FnOnce(c_int, &mut c_int) -> c_int) -> c_int {
    let (g, _) = begin_collective(comm);
    let mut r = MPI_WIN_NULL;
    let rc = call(conv::comm(comm), &mut r);
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_comm(comm, rc, name);
    }
    let v = register_win(r, name);
    drop(g);
    unsafe { put(win, v) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Win_create(base: *mut c_void, size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win) -> c_int {
    let i = conv::info(info);
    unsafe { make(comm, "MPI_Win_create", win, |c, w| real!(MPI_Win_create(base, size, disp_unit, i, c, w))) }
}
pub unsafe fn MPI_Win_create_c(base: *mut c_void, size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win) -> c_int {
    let i = conv::info(info);
    unsafe { make(comm, "MPI_Win_create_c", win, |c, w| real!(MPI_Win_create_c(base, size, disp_unit, i, c, w))) }
}
pub unsafe fn MPI_Win_allocate(size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) -> c_int {
    let i = conv::info(info);
    unsafe { make(comm, "MPI_Win_allocate", win, |c, w| real!(MPI_Win_allocate(size, disp_unit, i, c, baseptr, w))) }
}
pub unsafe fn MPI_Win_allocate_c(size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) -> c_int {
    let i = conv::info(info);
    unsafe { make(comm, "MPI_Win_allocate_c", win, |c, w| real!(MPI_Win_allocate_c(size, disp_unit, i, c, baseptr, w))) }
}
pub unsafe fn MPI_Win_allocate_shared(size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) -> c_int {
    let i = conv::info(info);
    unsafe { make(comm, "MPI_Win_allocate_shared", win, |c, w| real!(MPI_Win_allocate_shared(size, disp_unit, i, c, baseptr, w))) }
}
pub unsafe fn MPI_Win_allocate_shared_c(size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) -> c_int {
    let i = conv::info(info);
    unsafe { make(comm, "MPI_Win_allocate_shared_c", win, |c, w| real!(MPI_Win_allocate_shared_c(size, disp_unit, i, c, baseptr, w))) }
}
pub unsafe fn MPI_Win_create_dynamic(info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win) -> c_int {
    let i = conv::info(info);
    unsafe { make(comm, "MPI_Win_create_dynamic", win, |c, w| real!(MPI_Win_create_dynamic(i, c, w))) }
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

pub unsafe fn MPI_Win_get_group(win: MPI_Win, group: *mut MPI_Group) -> c_int {
    let g = gate::enter();
    let mut r = MPI_GROUP_NULL;
    let rc = real!(MPI_Win_get_group(conv::win(win), &mut r));
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_win(win, rc, "MPI_Win_get_group");
    }
    unsafe { put(group, crate::face::api::group::register_group(r)) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Win_get_info(win: MPI_Win, info: *mut MPI_Info) -> c_int {
    let g = gate::enter();
    let mut r = MPI_INFO_NULL;
    let rc = real!(MPI_Win_get_info(conv::win(win), &mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_win(win, rc, "MPI_Win_get_info");
    }
    unsafe { put(info, crate::face::api::info::register_info(r)) };
    MPI_SUCCESS
}

/// A request-based RMA call: runs `call` (handles are translated inside, under the gate) and
/// wraps the request it returns (not restorable while pending).
unsafe fn rma_request(name: &str, win: MPI_Win, request: *mut MPI_Request, call: impl FnOnce(&mut c_int) -> c_int) -> c_int {
    let g = gate::enter();
    let mut r = MPI_REQUEST_NULL;
    let rc = call(&mut r);
    if rc == MPI_SUCCESS {
        let v = register_request(r, RequestRecipe::Other { function: name.into() }, MPI_COMM_NULL, false);
        unsafe { put(request, v) };
    }
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_win(win, rc, name);
    }
    MPI_SUCCESS
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
