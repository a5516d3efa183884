//! The adapters that take a callback (hand-written; `tools/gen_ompi_lower.py`'s `HAND`): the
//! core gives MPICH-ABI functions, which Open MPI would call with its own handles and status.
//!
//! - `MPI_Op_create`: Open MPI calls a reduction with a pointer to its datatype handle; a
//!   trampoline of a fixed pool converts it to the MPICH value the core's function expects. The
//!   core creates every op on one of its own fixed trampolines, so a slot is found again by the
//!   function it holds (after a renewal) and the pool never runs out while the core's does not.
//! - `MPI_Grequest_start`: the three callbacks and their state travel in a box given to Open MPI
//!   as the extra state; the query converts the status, each converts its return code, and the
//!   free callback (Open MPI calls it exactly once) drops the box.

#![allow(non_snake_case)]

use super::*;
use std::sync::atomic::AtomicUsize;

/// The core's MPI_User_function, MPICH's ABI.
type MUserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut c_int);
/// The function Open MPI calls, its ABI.
type OUserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut P);

const SLOTS: usize = 128;
static FUNCS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

unsafe extern "C" fn op_tramp<const N: usize>(a: *mut c_void, b: *mut c_void, len: *mut c_int, dt: *mut P) {
    let f = FUNCS[N].load(Ordering::Acquire);
    // SAFETY: the slot holds the core's MPI_User_function (set before Open MPI got this
    // trampoline); `dt` points to Open MPI's datatype handle.
    unsafe {
        let mut m = if dt.is_null() { abi::MPI_DATATYPE_NULL } else { p2h_peek(K::Datatype, *dt) };
        std::mem::transmute::<usize, MUserFn>(f)(a, b, len, &mut m);
    }
}

macro_rules! table {
    ($f:ident, $t:ty; $($n:literal)*) => { [$($f::<$n> as $t),*] };
}
static TRAMPS: [OUserFn; SLOTS] = table!(op_tramp, OUserFn; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
    64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
    96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127);

/// The slot holding `func`, or a free one taken for it.
fn slot_of(func: usize) -> Option<usize> {
    if let Some(i) = FUNCS.iter().position(|s| s.load(Ordering::Acquire) == func) {
        return Some(i);
    }
    FUNCS.iter().position(|s| s.compare_exchange(0, func, Ordering::AcqRel, Ordering::Acquire).is_ok())
}

pub(super) unsafe extern "C" fn MPI_Op_create(user_fn: *mut c_void, commute: c_int, op: *mut abi::MPI_Op) -> c_int {
    let Some(f) = fns().MPI_Op_create else { return not_in_library("MPI_Op_create") };
    if user_fn.is_null() || op.is_null() {
        return abi::MPI_ERR_ARG;
    }
    let Some(slot) = slot_of(user_fn as usize) else {
        eprintln!("mpicr: the Open MPI adapter holds at most {SLOTS} reduction functions; MPI_Op_create is refused");
        return abi::MPI_ERR_INTERN;
    };
    let mut o = null_of(K::Op);
    // SAFETY: Open MPI's MPI_Op_create with its C signature; the trampoline has the signature
    // of its MPI_User_function; `op` is the caller's out-pointer (checked non-null).
    unsafe {
        let rc = f(TRAMPS[slot] as *mut c_void, commute, &mut o);
        if rc == 0 {
            *op = p2h_out(K::Op, None, o);
        }
        rc_back(rc)
    }
}

/// The core's generalized-request callbacks and their state (MPICH's ABI).
type QueryFn = unsafe extern "C" fn(*mut c_void, *mut MPI_Status) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type CancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

struct Greq {
    query: Option<QueryFn>,
    free: Option<FreeFn>,
    cancel: Option<CancelFn>,
    extra: *mut c_void,
}

unsafe extern "C" fn greq_query(g: *mut c_void, status: *mut OStatus) -> c_int {
    // SAFETY: `g` is the box given to Open MPI's MPI_Grequest_start, live until greq_free.
    let g = unsafe { &*(g as *const Greq) };
    let mut s = MPI_Status::default();
    // SAFETY: the core's query function with its state and a status of MPICH's layout.
    let rc = g.query.map_or(0, |q| unsafe { q(g.extra, &mut s) });
    if !status.is_null() {
        // SAFETY: Open MPI's status to fill.
        unsafe { *status = status_in(&s) };
    }
    error_in(rc)
}

unsafe extern "C" fn greq_free(g: *mut c_void) -> c_int {
    // SAFETY: the box given to MPI_Grequest_start; Open MPI calls the free callback once.
    let g = unsafe { Box::from_raw(g as *mut Greq) };
    // SAFETY: the core's free function with its state.
    error_in(g.free.map_or(0, |f| unsafe { f(g.extra) }))
}

unsafe extern "C" fn greq_cancel(g: *mut c_void, complete: c_int) -> c_int {
    // SAFETY: as in greq_query.
    let g = unsafe { &*(g as *const Greq) };
    // SAFETY: the core's cancel function with its state.
    error_in(g.cancel.map_or(0, |c| unsafe { c(g.extra, complete) }))
}

pub(super) unsafe extern "C" fn MPI_Grequest_start(
    query: *mut c_void,
    free: *mut c_void,
    cancel: *mut c_void,
    extra: *mut c_void,
    request: *mut abi::MPI_Request,
) -> c_int {
    let Some(f) = fns().MPI_Grequest_start else { return not_in_library("MPI_Grequest_start") };
    if request.is_null() {
        return abi::MPI_ERR_ARG;
    }
    // SAFETY: the core's callbacks (null or functions of MPI's generalized-request types).
    let g = unsafe {
        Box::into_raw(Box::new(Greq {
            query: std::mem::transmute::<*mut c_void, Option<QueryFn>>(query),
            free: std::mem::transmute::<*mut c_void, Option<FreeFn>>(free),
            cancel: std::mem::transmute::<*mut c_void, Option<CancelFn>>(cancel),
            extra,
        }))
    };
    type Q = unsafe extern "C" fn(*mut c_void, *mut OStatus) -> c_int;
    type F = unsafe extern "C" fn(*mut c_void) -> c_int;
    type C = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
    let mut o = null_of(K::Request);
    // SAFETY: Open MPI's MPI_Grequest_start with its C signature and trampolines of its
    // callback types; `request` is the caller's out-pointer (checked non-null).
    unsafe {
        let rc = f(greq_query as Q as *mut c_void, greq_free as F as *mut c_void, greq_cancel as C as *mut c_void, g as *mut c_void, &mut o);
        if rc != 0 {
            drop(Box::from_raw(g));
            return rc_back(rc);
        }
        *request = p2h_out(K::Request, None, o);
    }
    0
}
