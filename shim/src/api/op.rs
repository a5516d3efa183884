//! User-defined reductions. The real library calls a trampoline, which hands the program's
//! function the *virtual* datatype handle. MPI_User_function has no user-data argument, so
//! each live op occupies one of a fixed set of trampolines.

use crate::abi::*;
use crate::api::datatype::virtual_of_real;
use crate::api::put;
use crate::state::{OpEntry, OBJ};
use crate::{conv, errors, gate};
use mpicr_virtid::{Kind, OpRecipe};
use parking_lot::Mutex;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype);
type UserFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut MPI_Datatype);

/// Number of user ops that may be live at once.
pub const SLOTS: usize = 128;

static FUNCS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static USED: Mutex<[bool; SLOTS]> = Mutex::new([false; SLOTS]);

unsafe extern "C" fn tramp<const N: usize>(a: *mut c_void, b: *mut c_void, len: *mut c_int, dt: *mut MPI_Datatype) {
    let f = FUNCS[N].load(Ordering::Acquire);
    // SAFETY: the slot holds the program's MPI_User_function while the op is live; `dt` points
    // to the real datatype handle provided by the library.
    unsafe {
        let mut v = virtual_of_real(*dt);
        let f = std::mem::transmute::<u64, UserFn>(f);
        gate::in_callback(|| f(a, b, len, &mut v));
    }
}

unsafe extern "C" fn tramp_c<const N: usize>(a: *mut c_void, b: *mut c_void, len: *mut MPI_Count, dt: *mut MPI_Datatype) {
    let f = FUNCS[N].load(Ordering::Acquire);
    // SAFETY: as in `tramp`, for the large-count signature.
    unsafe {
        let mut v = virtual_of_real(*dt);
        let f = std::mem::transmute::<u64, UserFnC>(f);
        gate::in_callback(|| f(a, b, len, &mut v));
    }
}

macro_rules! table {
    ($f:ident, $t:ty; $($n:literal)*) => { [$($f::<$n> as $t),*] };
}

fn trampoline(slot: usize, large: bool) -> *mut c_void {
    static T: [UserFn; SLOTS] = table!(tramp, UserFn; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
        32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
        64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
        96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127);
    static TC: [UserFnC; SLOTS] = table!(tramp_c, UserFnC; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
        32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
        64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
        96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127);
    if large { TC[slot] as *mut c_void } else { T[slot] as *mut c_void }
}

fn claim_slot(function: u64) -> Option<usize> {
    let mut used = USED.lock();
    let slot = used.iter().position(|u| !u)?;
    used[slot] = true;
    FUNCS[slot].store(function, Ordering::Release);
    Some(slot)
}

fn release_slot(slot: usize) {
    USED.lock()[slot] = false;
}

/// Creates the real op for a recipe (also used after a renewal) in an existing slot.
pub fn create_real(recipe: &OpRecipe, slot: usize) -> Result<c_int, c_int> {
    let f = crate::lower::fns();
    let mut r = MPI_OP_NULL;
    let t = trampoline(slot, recipe.large_count);
    // SAFETY: the trampoline has the signature the library expects for this op kind.
    let rc = unsafe {
        if recipe.large_count {
            f.MPI_Op_create_c.map_or(MPI_ERR_OTHER, |g| g(t, recipe.commute as c_int, &mut r))
        } else {
            f.MPI_Op_create.map_or(MPI_ERR_OTHER, |g| g(t, recipe.commute as c_int, &mut r))
        }
    };
    if rc == MPI_SUCCESS { Ok(r) } else { Err(rc) }
}

unsafe fn create(function: *mut c_void, commute: c_int, op: *mut MPI_Op, large: bool, name: &str) -> c_int {
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
            let v = match OBJ.ops.insert(r as u32 as u64, OpEntry { recipe, slot }) {
                Ok(i) => conv::handle(Kind::Op, i),
                Err(_) => errors::fatal("too many live ops"),
            };
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
    unsafe { create(user_fn, commute, op, false, "MPI_Op_create") }
}

pub unsafe fn MPI_Op_create_c(user_fn: *mut c_void, commute: c_int, op: *mut MPI_Op) -> c_int {
    unsafe { create(user_fn, commute, op, true, "MPI_Op_create_c") }
}

pub unsafe fn MPI_Op_free(op: *mut MPI_Op) -> c_int {
    let g = gate::enter();
    if op.is_null() {
        return errors::raise_default(real!(MPI_Op_free(op)), "MPI_Op_free");
    }
    let v = unsafe { *op };
    let mut r = conv::op(v);
    let rc = real!(MPI_Op_free(&mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Op_free");
    }
    if let Some(e) = conv::index(v, Kind::Op).and_then(|i| OBJ.ops.remove(i)) {
        release_slot(e.slot);
    }
    unsafe { *op = MPI_OP_NULL };
    MPI_SUCCESS
}
