//! User-defined reductions: the recipe (the program's function, commutativity, large count)
//! and the trampoline slot the real op calls. The real library calls a trampoline, which hands
//! the program's function the *virtual* datatype handle; MPI_User_function has no user-data
//! argument, so each live op occupies one of a fixed set of trampolines, kept across renewals.

use super::{RebuildError, Renewable};
use crate::core::gate;
use crate::core::kinds::datatype::virtual_of_real;
use crate::core::state::OBJ;
use crate::lower;
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::object::Kind;
use crate::lower::calls::op::UserOp;
use crate::lower::handles::{RealDatatype, RealOp};
use mpicr_virtid::table::Full;
use mpicr_virtid::{OpRecipe, VDatatype, VOp};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpEntry {
    pub recipe: OpRecipe,
    /// Trampoline slot the real op calls.
    pub slot: usize,
}

/// Registers an op the library made. `Err` when the table is full.
pub fn register(real: RealOp, entry: OpEntry) -> Result<VOp, Full> {
    OBJ.ops.insert(real, entry).map(VOp::virtual_at)
}

/// Forgets an op the program freed, releasing its trampoline slot.
pub fn forget(v: VOp) {
    if let Some(e) = v.index().and_then(|i| OBJ.ops.remove(i)) {
        release_slot(e.slot);
    }
}

type UserFn = calls::op::UserFunction;
type UserFnC = calls::op::UserFunctionC;

/// Number of user ops that may be live at once.
pub const SLOTS: usize = 128;

static FUNCS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static USED: Mutex<[bool; SLOTS]> = Mutex::new([false; SLOTS]);

/// How the program names a datatype, installed by the face (the trampolines hand the program's
/// function its own handle of the datatype; the core knows no ABI's values).
static PROGRAM_DATATYPE: std::sync::OnceLock<fn(VDatatype) -> MPI_Datatype> = std::sync::OnceLock::new();

/// Installs the face's conversion of the core's datatypes to the program's handles (before
/// the first op is made or restored).
pub fn set_program_datatype(f: fn(VDatatype) -> MPI_Datatype) {
    let _ = PROGRAM_DATATYPE.set(f);
}

/// The program's handle of the real datatype the library hands a trampoline.
fn program_datatype(real: MPI_Datatype) -> MPI_Datatype {
    let v = virtual_of_real(RealDatatype(real));
    match PROGRAM_DATATYPE.get() {
        Some(f) => f(v),
        None => lower::fatal("a user-defined reduction ran before the face named the program's datatypes"),
    }
}

#[allow(unsafe_code, reason = "a trampoline the library calls: the program's user function, called with its own datatype handle")]
unsafe extern "C" fn tramp<const N: usize>(a: *mut c_void, b: *mut c_void, len: *mut c_int, dt: *mut MPI_Datatype) {
    let f = FUNCS[N].load(Ordering::Acquire);
    // SAFETY: the slot holds the program's MPI_User_function while the op is live; `dt` points
    // to the real datatype handle provided by the library.
    unsafe {
        let mut v = program_datatype(*dt);
        let f = std::mem::transmute::<u64, UserFn>(f);
        gate::in_callback(|| f(a, b, len, &mut v));
    }
}

#[allow(unsafe_code, reason = "as `tramp`, for the large-count signature")]
unsafe extern "C" fn tramp_c<const N: usize>(a: *mut c_void, b: *mut c_void, len: *mut MPI_Count, dt: *mut MPI_Datatype) {
    let f = FUNCS[N].load(Ordering::Acquire);
    // SAFETY: as in `tramp`, for the large-count signature.
    unsafe {
        let mut v = program_datatype(*dt);
        let f = std::mem::transmute::<u64, UserFnC>(f);
        gate::in_callback(|| f(a, b, len, &mut v));
    }
}

macro_rules! table {
    ($f:ident, $t:ty; $($n:literal)*) => { [$($f::<$n> as $t),*] };
}

fn trampoline(slot: usize, large: bool) -> UserOp {
    static T: [UserFn; SLOTS] = table!(tramp, UserFn; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
        32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
        64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
        96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127);
    static TC: [UserFnC; SLOTS] = table!(tramp_c, UserFnC; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
        32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
        64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
        96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127);
    if large {
        UserOp::Large(TC[slot])
    } else {
        UserOp::Classic(T[slot])
    }
}

pub fn claim_slot(function: u64) -> Option<usize> {
    let mut used = USED.lock();
    let slot = used.iter().position(|u| !u)?;
    used[slot] = true;
    FUNCS[slot].store(function, Ordering::Release);
    Some(slot)
}

/// A restarted app-mode process (`core::app`): the restored ops hold their trampoline slots
/// again, pointing at the program's functions (the keeper starts app-mode programs without
/// address-space randomisation, so a fresh process has them at the same addresses).
pub fn restore_slots() {
    let mut used = USED.lock();
    for (_, _, op) in OBJ.ops.snapshot() {
        if let Some(u) = used.get_mut(op.slot) {
            *u = true;
            FUNCS[op.slot].store(op.recipe.function, Ordering::Release);
        }
    }
}

pub fn release_slot(slot: usize) {
    USED.lock()[slot] = false;
}

/// Creates the real op for a recipe (also used after a renewal) in an existing slot.
pub fn create_real(recipe: &OpRecipe, slot: usize) -> Result<c_int, c_int> {
    let mut r = MPI_OP_NULL;
    let t = trampoline(slot, recipe.large_count);
    let rc = calls::op::create(t, recipe.commute as c_int, &mut r).unwrap_or(MPI_ERR_OTHER);
    if rc == MPI_SUCCESS {
        Ok(r)
    } else {
        Err(rc)
    }
}

/// The op kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    fn free_real(&self) {
        for (_, r, _) in OBJ.ops.snapshot() {
            let mut r = r.raw();
            // A live real op of the current generation, freed once.
            calls::object::free(Kind::Op, &mut r);
        }
    }

    /// Each op is created again on its own trampoline slot.
    fn rebuild(&self) -> Result<(), RebuildError> {
        for (idx, _, op) in OBJ.ops.snapshot() {
            let real = create_real(&op.recipe, op.slot).map_err(|rc| RebuildError::mpi("rebuilding an op", rc))?;
            OBJ.ops.set_real(idx, RealOp(real));
        }
        Ok(())
    }
}
