//! Hand-written translations (tools/gen_ompi.py's `HAND`), shared by the foreign faces (Open
//! MPI's and the standard ABI's, each compiles this file over its own `conv`): functions that
//! take the program's callbacks, which must be called with the program's handles and codes, and
//! calls whose pointer or attribute values carry constants. Each returns the MPICH face's code (the export
//! converts it).
//!
//! Callbacks without a user-data argument (reduction ops, error handlers) go through a fixed
//! pool of trampolines, one slot per distinct function, kept for the process's life (an image
//! restores the same addresses); keyvals' callbacks are found by an index passed as the MPICH
//! face's `extra_state`, generalized requests' in a leaked box passed the same way. A restarted
//! app-mode process gets the pools and the keyvals back from `shim.state` ([`save_state`]).
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use crate::conv::{self, OHandle, OStatus};
use crate::gen::tables::{face, mpich};
use mpicr_shim::core::app::FaceStateError;
use mpicr_shim::face::abi as m;
use mpicr_shim::face::api as f;
use mpicr_virtid::Kind;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

const SLOTS: usize = 32;

/// The slot of `pool` that already holds `func` (a slot only calls its function, so every object
/// made from one function shares it: a program that creates and frees ops in a loop from a few
/// functions, as mpi4py does, never runs out), else a free one taken for it; None when the pool
/// is exhausted.
fn take_slot(pool: &[AtomicUsize; SLOTS], func: usize) -> Option<usize> {
    if let Some(i) = pool.iter().position(|s| func != 0 && s.load(Ordering::Acquire) == func) {
        return Some(i);
    }
    pool.iter().position(|s| s.compare_exchange(0, func, Ordering::AcqRel, Ordering::Acquire).is_ok())
}

fn exhausted(what: &str) -> c_int {
    eprintln!("mpicr: the {} holds at most {SLOTS} {what}; this one is refused", conv::FACE);
    m::MPI_ERR_INTERN
}

// ---- reduction ops -------------------------------------------------------------------------

type OUserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut OHandle);
static OPS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

unsafe fn op_call(slot: usize, a: *mut c_void, b: *mut c_void, len: *mut c_int, dt: *mut c_int) {
    let mut odt = conv::h_out(
        Kind::Datatype,
        if dt.is_null() {
            0
        } else {
            // SAFETY: MPICH passes a pointer to the datatype.
            unsafe { *dt }
        },
    );
    // SAFETY: the slot holds an MPI_User_function the program gave MPI_Op_create.
    unsafe { std::mem::transmute::<usize, OUserFn>(OPS[slot].load(Ordering::Acquire))(a, b, len, &mut odt) };
}

/// The pool's trampolines, one per slot: `fn::<0>`, `fn::<1>`, ...
macro_rules! pool {
    ($f:ident: $t:ty) => {
        [
            $f::<0> as $t,
            $f::<1>,
            $f::<2>,
            $f::<3>,
            $f::<4>,
            $f::<5>,
            $f::<6>,
            $f::<7>,
            $f::<8>,
            $f::<9>,
            $f::<10>,
            $f::<11>,
            $f::<12>,
            $f::<13>,
            $f::<14>,
            $f::<15>,
            $f::<16>,
            $f::<17>,
            $f::<18>,
            $f::<19>,
            $f::<20>,
            $f::<21>,
            $f::<22>,
            $f::<23>,
            $f::<24>,
            $f::<25>,
            $f::<26>,
            $f::<27>,
            $f::<28>,
            $f::<29>,
            $f::<30>,
            $f::<31>,
        ]
    };
}

unsafe extern "C" fn op_tramp<const I: usize>(a: *mut c_void, b: *mut c_void, len: *mut c_int, dt: *mut c_int) {
    // SAFETY: called by the MPICH face with MPI_User_function's arguments.
    unsafe { op_call(I, a, b, len, dt) }
}
type MUserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut c_int);
static OP_TRAMPS: [MUserFn; SLOTS] = pool!(op_tramp: MUserFn);

pub unsafe fn MPI_Op_create(user_fn: *mut c_void, commute: c_int, op: *mut OHandle) -> c_int {
    let Some(slot) = take_slot(&OPS, user_fn as usize) else { return exhausted("user reduction ops") };
    let mut v = 0;
    // SAFETY: the trampoline has MPI_User_function's MPICH signature; `v` is a local.
    let rc = unsafe { f::MPI_Op_create(OP_TRAMPS[slot] as *mut c_void, commute, &mut v) };
    if rc == 0 && !op.is_null() {
        // SAFETY: the program's out-parameter.
        unsafe { *op = conv::h_out(Kind::Op, v) };
    }
    rc
}

// ---- error handlers ------------------------------------------------------------------------

type OErrFn = unsafe extern "C" fn(*mut OHandle, *mut c_int);
static COMM_EH: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static WIN_EH: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static FILE_EH: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static SESSION_EH: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

unsafe fn eh_call(pool: &[AtomicUsize; SLOTS], slot: usize, h: OHandle, code: *mut c_int) {
    let mut oh = h;
    // SAFETY: MPICH passes a pointer to the error code.
    let mut oc = conv::err_out(unsafe { *code });
    // SAFETY: the slot holds an error handler function the program gave.
    unsafe { std::mem::transmute::<usize, OErrFn>(pool[slot].load(Ordering::Acquire))(&mut oh, &mut oc) };
}

unsafe fn comm_eh(slot: usize, c: *mut c_int, code: *mut c_int) {
    // SAFETY: MPICH passes pointers to the handle and the code.
    unsafe { eh_call(&COMM_EH, slot, conv::h_out(Kind::Comm, *c), code) }
}
unsafe fn win_eh(slot: usize, w: *mut c_int, code: *mut c_int) {
    // SAFETY: as above.
    unsafe { eh_call(&WIN_EH, slot, conv::h_out(Kind::Win, *w), code) }
}
unsafe fn file_eh(slot: usize, fh: *mut m::MPI_File, code: *mut c_int) {
    // SAFETY: as above.
    unsafe { eh_call(&FILE_EH, slot, conv::file_out(*fh), code) }
}

unsafe fn session_eh(slot: usize, s: *mut c_int, code: *mut c_int) {
    // SAFETY: as above.
    unsafe { eh_call(&SESSION_EH, slot, conv::h_out(Kind::Session, *s), code) }
}

unsafe extern "C" fn comm_eh_tramp<const I: usize>(c: *mut c_int, code: *mut c_int) {
    // SAFETY: called by the MPICH face with the handler's arguments.
    unsafe { comm_eh(I, c, code) }
}
unsafe extern "C" fn win_eh_tramp<const I: usize>(c: *mut c_int, code: *mut c_int) {
    // SAFETY: as above.
    unsafe { win_eh(I, c, code) }
}
unsafe extern "C" fn file_eh_tramp<const I: usize>(c: *mut m::MPI_File, code: *mut c_int) {
    // SAFETY: as above.
    unsafe { file_eh(I, c, code) }
}
unsafe extern "C" fn session_eh_tramp<const I: usize>(s: *mut c_int, code: *mut c_int) {
    // SAFETY: as above.
    unsafe { session_eh(I, s, code) }
}
type MErrFn = unsafe extern "C" fn(*mut c_int, *mut c_int);
type MFileErrFn = unsafe extern "C" fn(*mut m::MPI_File, *mut c_int);
static COMM_EH_TRAMPS: [MErrFn; SLOTS] = pool!(comm_eh_tramp: MErrFn);
static WIN_EH_TRAMPS: [MErrFn; SLOTS] = pool!(win_eh_tramp: MErrFn);
static FILE_EH_TRAMPS: [MFileErrFn; SLOTS] = pool!(file_eh_tramp: MFileErrFn);
static SESSION_EH_TRAMPS: [MErrFn; SLOTS] = pool!(session_eh_tramp: MErrFn);

unsafe fn create_eh(
    pool: &[AtomicUsize; SLOTS],
    tramp: *mut c_void,
    func: *mut c_void,
    eh: *mut OHandle,
    make: unsafe fn(*mut c_void, *mut c_int) -> c_int,
) -> c_int {
    let _ = func;
    let mut v = 0;
    // SAFETY: the trampoline has the MPICH handler signature; `v` is a local.
    let rc = unsafe { make(tramp, &mut v) };
    if rc == 0 && !eh.is_null() {
        // SAFETY: the program's out-parameter.
        unsafe { *eh = conv::h_out(Kind::Errhandler, v) };
    }
    let _ = pool;
    rc
}

pub unsafe fn MPI_Comm_create_errhandler(func: *mut c_void, eh: *mut OHandle) -> c_int {
    let Some(slot) = take_slot(&COMM_EH, func as usize) else { return exhausted("communicator error handlers") };
    // SAFETY: forwarded to the MPICH face.
    unsafe { create_eh(&COMM_EH, COMM_EH_TRAMPS[slot] as *mut c_void, func, eh, f::MPI_Comm_create_errhandler) }
}
pub unsafe fn MPI_Errhandler_create(func: *mut c_void, eh: *mut OHandle) -> c_int {
    // SAFETY: the same call under its MPI-1 name.
    unsafe { MPI_Comm_create_errhandler(func, eh) }
}
pub unsafe fn MPI_Win_create_errhandler(func: *mut c_void, eh: *mut OHandle) -> c_int {
    let Some(slot) = take_slot(&WIN_EH, func as usize) else { return exhausted("window error handlers") };
    // SAFETY: forwarded to the MPICH face.
    unsafe { create_eh(&WIN_EH, WIN_EH_TRAMPS[slot] as *mut c_void, func, eh, f::MPI_Win_create_errhandler) }
}
pub unsafe fn MPI_File_create_errhandler(func: *mut c_void, eh: *mut OHandle) -> c_int {
    let Some(slot) = take_slot(&FILE_EH, func as usize) else { return exhausted("file error handlers") };
    // SAFETY: forwarded to the MPICH face.
    unsafe { create_eh(&FILE_EH, FILE_EH_TRAMPS[slot] as *mut c_void, func, eh, f::MPI_File_create_errhandler) }
}
pub unsafe fn MPI_Session_create_errhandler(func: *mut c_void, eh: *mut OHandle) -> c_int {
    let Some(slot) = take_slot(&SESSION_EH, func as usize) else { return exhausted("session error handlers") };
    // SAFETY: forwarded to the MPICH face.
    unsafe { create_eh(&SESSION_EH, SESSION_EH_TRAMPS[slot] as *mut c_void, func, eh, f::MPI_Session_create_errhandler) }
}

// ---- attribute keyvals ---------------------------------------------------------------------

type OCopyFn = unsafe extern "C" fn(OHandle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
type ODeleteFn = unsafe extern "C" fn(OHandle, c_int, *mut c_void, *mut c_void) -> c_int;

/// What a keyval made here keeps: the program's functions and extra_state.
#[derive(Clone, Copy)]
struct KeyvalCb {
    kind: Kind,
    copy: usize,
    delete: usize,
    extra: usize,
}

/// Every keyval made here, for the process's life; the MPICH face's extra_state is the index + 1
/// (an index, not a box, so that [`save_state`] can carry them to a restarted app-mode process).
static KEYVALS: std::sync::Mutex<Vec<KeyvalCb>> = std::sync::Mutex::new(Vec::new());

fn keyval_cb(extra: *mut c_void) -> KeyvalCb {
    let keyvals = KEYVALS.lock().unwrap_or_else(|e| e.into_inner());
    keyvals[extra as usize - 1]
}

fn obj_out(kind: Kind, h: c_int) -> OHandle {
    conv::h_out(kind, h)
}

unsafe extern "C" fn copy_tramp(h: c_int, kv: c_int, extra: *mut c_void, a_in: *mut c_void, a_out: *mut c_void, flag: *mut c_int) -> c_int {
    let cb = keyval_cb(extra);
    if cb.copy == 0 {
        // SAFETY: MPICH's out-parameter.
        unsafe { *flag = 0 };
        return 0;
    }
    // SAFETY: the program's copy function with Open MPI's handle.
    let rc = unsafe { std::mem::transmute::<usize, OCopyFn>(cb.copy)(obj_out(cb.kind, h), kv, cb.extra as *mut c_void, a_in, a_out, flag) };
    conv::err_in(rc)
}

unsafe extern "C" fn delete_tramp(h: c_int, kv: c_int, a: *mut c_void, extra: *mut c_void) -> c_int {
    let cb = keyval_cb(extra);
    if cb.delete == 0 {
        return 0;
    }
    // SAFETY: the program's delete function with Open MPI's handle.
    let rc = unsafe { std::mem::transmute::<usize, ODeleteFn>(cb.delete)(obj_out(cb.kind, h), kv, a, cb.extra as *mut c_void) };
    conv::err_in(rc)
}

unsafe fn create_keyval(
    kind: Kind,
    copy: *mut c_void,
    delete: *mut c_void,
    keyval: *mut c_int,
    extra: *mut c_void,
    make: unsafe fn(*mut c_void, *mut c_void, *mut c_int, *mut c_void) -> c_int,
) -> c_int {
    // A face whose mpi.h defines MPI_*_DUP_FN as a pointer constant (the standard ABI's 1)
    // gets the dup function here; a null pointer is a null copy/delete function in both.
    let copy = if Some(copy as usize) == conv::DUP_FN { dup_fn as *const () as usize } else { copy as usize };
    let id = {
        let mut keyvals = KEYVALS.lock().unwrap_or_else(|e| e.into_inner());
        keyvals.push(KeyvalCb { kind, copy, delete: delete as usize, extra: extra as usize });
        keyvals.len()
    };
    // SAFETY: the trampolines have the MPICH callback signatures; `id` indexes `KEYVALS`.
    unsafe { make(copy_tramp as *mut c_void, delete_tramp as *mut c_void, keyval, id as *mut c_void) }
}

pub unsafe fn MPI_Comm_create_keyval(copy: *mut c_void, delete: *mut c_void, keyval: *mut c_int, extra: *mut c_void) -> c_int {
    // SAFETY: forwarded.
    unsafe { create_keyval(Kind::Comm, copy, delete, keyval, extra, f::MPI_Comm_create_keyval) }
}
pub unsafe fn MPI_Keyval_create(copy: *mut c_void, delete: *mut c_void, keyval: *mut c_int, extra: *mut c_void) -> c_int {
    // SAFETY: forwarded.
    unsafe { create_keyval(Kind::Comm, copy, delete, keyval, extra, f::MPI_Keyval_create) }
}
pub unsafe fn MPI_Type_create_keyval(copy: *mut c_void, delete: *mut c_void, keyval: *mut c_int, extra: *mut c_void) -> c_int {
    // SAFETY: forwarded.
    unsafe { create_keyval(Kind::Datatype, copy, delete, keyval, extra, f::MPI_Type_create_keyval) }
}
pub unsafe fn MPI_Win_create_keyval(copy: *mut c_void, delete: *mut c_void, keyval: *mut c_int, extra: *mut c_void) -> c_int {
    // SAFETY: forwarded.
    unsafe { create_keyval(Kind::Win, copy, delete, keyval, extra, f::MPI_Win_create_keyval) }
}

// The predefined copy/delete functions mpi.h names (MPI_COMM_DUP_FN is OMPI_C_MPI_COMM_DUP_FN):
// called through the trampolines above like the program's own.
macro_rules! null_copy {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(_h: OHandle, _kv: c_int, _x: *mut c_void, _i: *mut c_void, _o: *mut c_void, flag: *mut c_int) -> c_int {
            // SAFETY: MPI's out-parameter.
            unsafe { *flag = 0 };
            face::MPI_SUCCESS
        }
    )*};
}
macro_rules! dup_copy {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(_h: OHandle, _kv: c_int, _x: *mut c_void, i: *mut c_void, o: *mut c_void, flag: *mut c_int) -> c_int {
            // SAFETY: MPI's out-parameters: the attribute value is copied as is.
            unsafe {
                *(o as *mut *mut c_void) = i;
                *flag = 1;
            }
            face::MPI_SUCCESS
        }
    )*};
}
macro_rules! null_delete {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(_h: OHandle, _kv: c_int, _a: *mut c_void, _x: *mut c_void) -> c_int {
            face::MPI_SUCCESS
        }
    )*};
}
/// The dup function a pointer constant stands for (`conv::DUP_FN`).
unsafe extern "C" fn dup_fn(_h: OHandle, _kv: c_int, _x: *mut c_void, i: *mut c_void, o: *mut c_void, flag: *mut c_int) -> c_int {
    // SAFETY: MPI's out-parameters: the attribute value is copied as is.
    unsafe {
        *(o as *mut *mut c_void) = i;
        *flag = 1;
    }
    face::MPI_SUCCESS
}

null_copy!(OMPI_C_MPI_COMM_NULL_COPY_FN, OMPI_C_MPI_TYPE_NULL_COPY_FN, OMPI_C_MPI_WIN_NULL_COPY_FN, OMPI_C_MPI_NULL_COPY_FN);
dup_copy!(OMPI_C_MPI_COMM_DUP_FN, OMPI_C_MPI_TYPE_DUP_FN, OMPI_C_MPI_WIN_DUP_FN, OMPI_C_MPI_DUP_FN);
null_delete!(OMPI_C_MPI_COMM_NULL_DELETE_FN, OMPI_C_MPI_TYPE_NULL_DELETE_FN, OMPI_C_MPI_WIN_NULL_DELETE_FN, OMPI_C_MPI_NULL_DELETE_FN);

// ---- attribute values carrying constants ---------------------------------------------------

/// Values of predefined attributes whose constants differ, rewritten in Open MPI's numbering
/// (the attribute value is a pointer to an int the library owns: ours live here).
static HOST: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static IO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static APPNUM: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static WIN_MODEL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static WIN_FLAVOR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static LAST_USED_CODE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

unsafe fn fix_attr(keyval: c_int, value: *mut c_void, flag: *mut c_int) {
    // SAFETY: MPI's out-parameters, written by the call that just succeeded.
    unsafe {
        if flag.is_null() || *flag == 0 || value.is_null() {
            return;
        }
        let slot = match keyval {
            face::MPI_HOST => &HOST,
            face::MPI_IO => &IO,
            face::MPI_APPNUM => &APPNUM,
            face::MPI_WIN_MODEL => &WIN_MODEL,
            face::MPI_WIN_CREATE_FLAVOR => &WIN_FLAVOR,
            face::MPI_LASTUSEDCODE if conv::last_used_code().is_some() => &LAST_USED_CODE,
            _ => return,
        };
        let p = *(value as *mut *mut c_int);
        if p.is_null() {
            return;
        }
        let v = *p;
        let v = if keyval == face::MPI_LASTUSEDCODE {
            conv::last_used_code().unwrap_or(v)
        } else if keyval == face::MPI_WIN_MODEL {
            if v == mpich::MPI_WIN_UNIFIED {
                face::MPI_WIN_UNIFIED
            } else {
                face::MPI_WIN_SEPARATE
            }
        } else if keyval == face::MPI_WIN_CREATE_FLAVOR {
            conv::flavor_out(v)
        } else {
            conv::rank_out(v)
        };
        slot.store(v, Ordering::Relaxed);
        *(value as *mut *mut c_int) = slot.as_ptr();
    }
}

pub unsafe fn MPI_Comm_get_attr(comm: OHandle, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    // SAFETY: converted arguments, forwarded.
    let rc = unsafe { f::MPI_Comm_get_attr(conv::h_in(Kind::Comm, comm), conv::keyval_in(keyval), value, flag) };
    // SAFETY: the call's out-parameters.
    unsafe { fix_attr(keyval, value, flag) };
    rc
}
pub unsafe fn MPI_Attr_get(comm: OHandle, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    // SAFETY: converted arguments, forwarded.
    let rc = unsafe { f::MPI_Attr_get(conv::h_in(Kind::Comm, comm), conv::keyval_in(keyval), value, flag) };
    // SAFETY: the call's out-parameters.
    unsafe { fix_attr(keyval, value, flag) };
    rc
}
pub unsafe fn MPI_Win_get_attr(win: OHandle, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    // SAFETY: converted arguments, forwarded.
    let rc = unsafe { f::MPI_Win_get_attr(conv::h_in(Kind::Win, win), conv::keyval_in(keyval), value, flag) };
    // SAFETY: the call's out-parameters.
    unsafe { fix_attr(keyval, value, flag) };
    rc
}

// ---- graph weights -------------------------------------------------------------------------

/// The face's MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY are small pointer constants
/// (`conv::UNWEIGHTED`, `conv::WEIGHTS_EMPTY`); MPICH's are the addresses of the MPICH face's
/// data symbols.
fn weights_in(p: *const c_int) -> *const c_int {
    // SAFETY: reading the MPICH face's own pointer statics.
    unsafe {
        match p as usize {
            a if a == conv::UNWEIGHTED => f::MPI_UNWEIGHTED,
            a if a == conv::WEIGHTS_EMPTY => f::MPI_WEIGHTS_EMPTY,
            _ => p,
        }
    }
}

pub unsafe fn MPI_Dist_graph_create(
    comm_old: OHandle,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights: *const c_int,
    info: OHandle,
    reorder: c_int,
    comm_dist_graph: *mut OHandle,
) -> c_int {
    let mut v = 0;
    // SAFETY: converted arguments; `v` is a local.
    let rc = unsafe {
        mpicr_shim::face::gen::create::MPI_Dist_graph_create(
            conv::h_in(Kind::Comm, comm_old),
            n,
            sources,
            degrees,
            destinations,
            weights_in(weights),
            conv::h_in(Kind::Info, info),
            reorder,
            &mut v,
        )
    };
    if !comm_dist_graph.is_null() {
        // SAFETY: the program's out-parameter.
        unsafe { *comm_dist_graph = conv::h_out(Kind::Comm, v) };
    }
    rc
}

pub unsafe fn MPI_Dist_graph_create_adjacent(
    comm_old: OHandle,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    info: OHandle,
    reorder: c_int,
    comm_dist_graph: *mut OHandle,
) -> c_int {
    let mut v = 0;
    // SAFETY: converted arguments; `v` is a local.
    let rc = unsafe {
        mpicr_shim::face::gen::create::MPI_Dist_graph_create_adjacent(
            conv::h_in(Kind::Comm, comm_old),
            indegree,
            sources,
            weights_in(sourceweights),
            outdegree,
            destinations,
            weights_in(destweights),
            conv::h_in(Kind::Info, info),
            reorder,
            &mut v,
        )
    };
    if !comm_dist_graph.is_null() {
        // SAFETY: the program's out-parameter.
        unsafe { *comm_dist_graph = conv::h_out(Kind::Comm, v) };
    }
    rc
}

pub unsafe fn MPI_Dist_graph_neighbors(
    comm: OHandle,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    // SAFETY: converted arguments, forwarded.
    unsafe {
        mpicr_shim::face::gen::passthrough::MPI_Dist_graph_neighbors(
            conv::h_in(Kind::Comm, comm),
            maxindegree,
            sources,
            weights_in(sourceweights) as *mut c_int,
            maxoutdegree,
            destinations,
            weights_in(destweights) as *mut c_int,
        )
    }
}

// ---- generalized requests ------------------------------------------------------------------

type OQueryFn = unsafe extern "C" fn(*mut c_void, *mut OStatus) -> c_int;
type OFreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type OCancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

struct Greq {
    query: usize,
    free: usize,
    cancel: usize,
    extra: *mut c_void,
}

unsafe extern "C" fn greq_query(extra: *mut c_void, status: *mut m::MPI_Status) -> c_int {
    // SAFETY: `extra` is this request's Greq.
    let g = unsafe { &*(extra as *const Greq) };
    let mut os = OStatus::default();
    // SAFETY: the program's query function; `os` is a local.
    let rc = unsafe { std::mem::transmute::<usize, OQueryFn>(g.query)(g.extra, &mut os) };
    // SAFETY: `os` is a local; `status` is MPICH's out-parameter.
    unsafe { *status = conv::status_in(&os) };
    conv::err_in(rc)
}

unsafe extern "C" fn greq_free(extra: *mut c_void) -> c_int {
    // SAFETY: `extra` is this request's Greq, freed once here (MPI calls free_fn once).
    let g = unsafe { Box::from_raw(extra as *mut Greq) };
    // SAFETY: the program's free function.
    conv::err_in(unsafe { std::mem::transmute::<usize, OFreeFn>(g.free)(g.extra) })
}

unsafe extern "C" fn greq_cancel(extra: *mut c_void, complete: c_int) -> c_int {
    // SAFETY: `extra` is this request's Greq.
    let g = unsafe { &*(extra as *const Greq) };
    // SAFETY: the program's cancel function.
    conv::err_in(unsafe { std::mem::transmute::<usize, OCancelFn>(g.cancel)(g.extra, complete) })
}

pub unsafe fn MPI_Grequest_start(
    query_fn: *mut c_void,
    free_fn: *mut c_void,
    cancel_fn: *mut c_void,
    extra_state: *mut c_void,
    request: *mut OHandle,
) -> c_int {
    let g = Box::into_raw(Box::new(Greq { query: query_fn as usize, free: free_fn as usize, cancel: cancel_fn as usize, extra: extra_state }));
    let mut v = 0;
    // SAFETY: the trampolines have the MPICH callback signatures; `v` is a local.
    let rc = unsafe { f::MPI_Grequest_start(greq_query as *mut c_void, greq_free as *mut c_void, greq_cancel as *mut c_void, g as *mut c_void, &mut v) };
    if rc == 0 && !request.is_null() {
        // SAFETY: the program's out-parameter.
        unsafe { *request = conv::h_out(Kind::Request, v) };
    }
    rc
}

// ---- a restarted app-mode process ----------------------------------------------------------

/// The pools' slots and the keyvals, for `shim.state` (`mpicr_shim::core::app::FaceState`): a
/// restarted app-mode process gets its ops, error handlers and keyvals back under their old
/// trampolines and indices without the program making them again. Little-endian u64 words:
/// the four pools' slots, then per keyval its kind, copy, delete and extra_state.
pub fn save_state() -> Vec<u8> {
    let mut words: Vec<u64> = Vec::new();
    for pool in [&OPS, &COMM_EH, &WIN_EH, &FILE_EH] {
        words.extend(pool.iter().map(|s| s.load(Ordering::Acquire) as u64));
    }
    let keyvals = KEYVALS.lock().unwrap_or_else(|e| e.into_inner());
    for cb in keyvals.iter() {
        words.extend([kind_code(cb.kind), cb.copy as u64, cb.delete as u64, cb.extra as u64]);
    }
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Puts back what [`save_state`] wrote.
pub fn restore_state(bytes: &[u8]) -> Result<(), FaceStateError> {
    let bad = || FaceStateError::Damaged { face: conv::FACE, len: bytes.len() };
    if !bytes.len().is_multiple_of(8) || bytes.len() < 4 * SLOTS * 8 || !(bytes.len() / 8 - 4 * SLOTS).is_multiple_of(4) {
        return Err(bad());
    }
    let words: Vec<u64> = bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    let (slots, kvs) = words.split_at(4 * SLOTS);
    for (pool, saved) in [&OPS, &COMM_EH, &WIN_EH, &FILE_EH].into_iter().zip(slots.chunks_exact(SLOTS)) {
        for (slot, &w) in pool.iter().zip(saved) {
            slot.store(w as usize, Ordering::Release);
        }
    }
    let mut keyvals = KEYVALS.lock().unwrap_or_else(|e| e.into_inner());
    keyvals.clear();
    for k in kvs.chunks_exact(4) {
        let kind = kind_of(k[0]).ok_or_else(bad)?;
        keyvals.push(KeyvalCb { kind, copy: k[1] as usize, delete: k[2] as usize, extra: k[3] as usize });
    }
    Ok(())
}

fn kind_code(kind: Kind) -> u64 {
    match kind {
        Kind::Datatype => 1,
        Kind::Win => 2,
        _ => 0,
    }
}

fn kind_of(code: u64) -> Option<Kind> {
    match code {
        0 => Some(Kind::Comm),
        1 => Some(Kind::Datatype),
        2 => Some(Kind::Win),
        _ => None,
    }
}

/// Registers [`save_state`]/[`restore_state`] with the core (the face's load-time hook calls it).
pub fn register_state() {
    mpicr_shim::core::app::register_face_state(mpicr_shim::core::app::FaceState { save: save_state, restore: restore_state });
}
