//! Groups: every group is recorded as the world ranks it contains, in order.

use crate::core::kinds::group;
use crate::face::abi::*;
use crate::face::call::{self, On, ToReal};
use crate::face::{conv, errors};
use crate::lower::handles::RealGroup;
use std::os::raw::c_int;

/// Registers a real group under a virtual handle (predefined and null groups pass through).
pub fn register_group(real: c_int) -> MPI_Group {
    match group::register(RealGroup(real)) {
        Ok(v) => conv::group_abi(v),
        Err(_) => errors::fatal("too many live groups"),
    }
}

pub unsafe fn MPI_Group_free(group: *mut MPI_Group) -> c_int {
    call::run("MPI_Group_free", On::Default, || {
        if group.is_null() {
            return call::ok(real!(MPI_Group_free(group)));
        }
        // SAFETY: `group` points to the caller's handle, readable and writable (MPI's contract of
        // this call).
        let v = unsafe { *group };
        let mut real = call::Group(v).to_real()?;
        call::ok(real!(MPI_Group_free(&mut real)))?;
        group::forget(conv::vgroup(v));
        // SAFETY: as above.
        unsafe { *group = MPI_GROUP_NULL };
        Ok(())
    })
}
