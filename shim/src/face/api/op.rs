//! User-defined reductions: MPI_Op_create/free and the queries. The trampolines and their slots
//! live with the op kind (`core::kinds::op`).

use crate::core::gate;
use crate::core::kinds::op::{claim_slot, create_real, release_slot, OpEntry, SLOTS};
use crate::face::abi::*;
use crate::face::api::put;
use crate::face::call::{self, On, ToReal};
use crate::face::{conv, errors};
use crate::lower::handles::RealOp;
use mpicr_virtid::OpRecipe;
use std::os::raw::{c_int, c_void};

unsafe fn create(function: *mut c_void, commute: c_int, op: *mut MPI_Op, large: bool, name: &str) -> c_int {
    crate::core::kinds::op::set_program_datatype(conv::datatype_abi);
    let Some(slot) = claim_slot(function as u64) else {
        eprintln!("mpicr: {name}: more than {SLOTS} user-defined operations are live at once");
        return errors::raise_default(MPI_ERR_OTHER, name);
    };
    let recipe = OpRecipe { function: function as u64, commute: commute != 0, large_count: large };
    let g = gate::enter();
    let r = create_real(&recipe, slot);
    drop(g);
    match r {
        Ok(r) => {
            let v = match crate::core::kinds::op::register(RealOp(r), OpEntry { recipe, slot }) {
                Ok(v) => conv::op_abi(v),
                Err(_) => errors::fatal("too many live ops"),
            };
            // SAFETY: `op` is the caller's out-pointer, null or valid for a write (MPI's contract of the op-
            // creating calls).
            unsafe { put(op, v) };
            MPI_SUCCESS
        }
        Err(rc) => {
            release_slot(slot);
            errors::raise_default(rc, name)
        }
    }
}

pub unsafe fn MPI_Op_create(user_fn: *mut c_void, commute: c_int, op: *mut MPI_Op) -> c_int {
    // SAFETY: `user_fn` and `op` are the caller's, passed through under MPI's contract of MPI_Op_create.
    unsafe { create(user_fn, commute, op, false, "MPI_Op_create") }
}

pub unsafe fn MPI_Op_create_c(user_fn: *mut c_void, commute: c_int, op: *mut MPI_Op) -> c_int {
    // SAFETY: `user_fn` and `op` are the caller's, passed through under MPI's contract of MPI_Op_create_c.
    unsafe { create(user_fn, commute, op, true, "MPI_Op_create_c") }
}

pub unsafe fn MPI_Op_free(op: *mut MPI_Op) -> c_int {
    call::run("MPI_Op_free", On::Default, || {
        if op.is_null() {
            return call::ok(real!(MPI_Op_free(op)));
        }
        // SAFETY: `op` points to the caller's handle, readable and writable (MPI's contract of
        // this call).
        let v = unsafe { *op };
        let mut r = call::Op(v).to_real()?;
        call::ok(real!(MPI_Op_free(&mut r)))?;
        crate::core::kinds::op::forget(conv::vop(v));
        // SAFETY: as above.
        unsafe { *op = MPI_OP_NULL };
        Ok(())
    })
}
