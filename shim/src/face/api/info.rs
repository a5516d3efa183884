//! Info objects: real objects underneath; their keys and values are read back at checkpoint
//! time to rebuild them.

use crate::lower::handles::RealInfo;
use crate::face::abi::*;
use crate::face::api::put;
use crate::core::state::OBJ;
use crate::face::{conv, errors};
use crate::core::gate;
use mpicr_virtid::{InfoRecipe, Kind};
use std::os::raw::c_int;

pub fn register_info(real: c_int) -> MPI_Info {
    if real == MPI_INFO_NULL || is_builtin(real) {
        return real;
    }
    match OBJ.infos.insert(RealInfo(real), InfoRecipe::default()) {
        Ok(i) => conv::handle(Kind::Info, i),
        Err(_) => errors::fatal("too many live info objects"),
    }
}

pub unsafe fn MPI_Info_create(info: *mut MPI_Info) -> c_int {
    let g = gate::enter();
    let mut r = MPI_INFO_NULL;
    let rc = real!(MPI_Info_create(&mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Info_create");
    }
    unsafe { put(info, register_info(r)) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Info_create_env(argc: c_int, argv: *mut *mut std::os::raw::c_char, info: *mut MPI_Info) -> c_int {
    let g = gate::enter();
    let mut r = MPI_INFO_NULL;
    let rc = real!(MPI_Info_create_env(argc, argv, &mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Info_create_env");
    }
    unsafe { put(info, register_info(r)) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Info_dup(info: MPI_Info, newinfo: *mut MPI_Info) -> c_int {
    let g = gate::enter();
    let mut r = MPI_INFO_NULL;
    let rc = real!(MPI_Info_dup(conv::info(info), &mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Info_dup");
    }
    unsafe { put(newinfo, register_info(r)) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Info_free(info: *mut MPI_Info) -> c_int {
    let g = gate::enter();
    if info.is_null() {
        return errors::raise_default(real!(MPI_Info_free(info)), "MPI_Info_free");
    }
    let v = unsafe { *info };
    let mut r = conv::info(v);
    let rc = real!(MPI_Info_free(&mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Info_free");
    }
    if let Some(i) = conv::index(v, Kind::Info) {
        OBJ.infos.remove(i);
    }
    unsafe { *info = MPI_INFO_NULL };
    MPI_SUCCESS
}

/// Runs a real call that returns a new info object and registers it.
unsafe fn info_out(name: &str, info: *mut MPI_Info, call: impl FnOnce(&mut c_int) -> c_int) -> c_int {
    let g = gate::enter();
    let mut r = MPI_INFO_NULL;
    let rc = call(&mut r);
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, name);
    }
    unsafe { put(info, register_info(r)) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Abi_get_info(info: *mut MPI_Info) -> c_int {
    unsafe { info_out("MPI_Abi_get_info", info, |r| real!(MPI_Abi_get_info(r))) }
}

pub unsafe fn MPI_Abi_get_fortran_info(info: *mut MPI_Info) -> c_int {
    unsafe { info_out("MPI_Abi_get_fortran_info", info, |r| real!(MPI_Abi_get_fortran_info(r))) }
}

pub unsafe fn MPI_Get_hw_resource_info(info: *mut MPI_Info) -> c_int {
    unsafe { info_out("MPI_Get_hw_resource_info", info, |r| real!(MPI_Get_hw_resource_info(r))) }
}
