//! Info objects: real objects underneath; their keys and values are read back at checkpoint
//! time to rebuild them.

use crate::core::state::OBJ;
use crate::face::abi::*;
use crate::face::call::{self, On, ToReal};
use crate::face::{conv, errors};
use crate::lower::handles::RealInfo;
use mpicr_virtid::{InfoRecipe, VInfo};
use std::os::raw::c_int;

pub fn register_info(real: c_int) -> MPI_Info {
    if real == MPI_INFO_NULL || is_builtin(real) {
        return real;
    }
    match OBJ.infos.insert(RealInfo(real), InfoRecipe::default()) {
        Ok(i) => conv::info_abi(VInfo::virtual_at(i)),
        Err(_) => errors::fatal("too many live info objects"),
    }
}

pub unsafe fn MPI_Info_free(info: *mut MPI_Info) -> c_int {
    call::run("MPI_Info_free", On::Default, || {
        if info.is_null() {
            return call::ok(real!(MPI_Info_free(info)));
        }
        // SAFETY: `info` points to the caller's handle, readable and writable (MPI's contract of
        // this call).
        let v = unsafe { *info };
        let mut r = call::Info(v).to_real()?;
        call::ok(real!(MPI_Info_free(&mut r)))?;
        if let Some(i) = conv::vinfo(v).index() {
            OBJ.infos.remove(i);
        }
        // SAFETY: as above.
        unsafe { *info = MPI_INFO_NULL };
        Ok(())
    })
}
