//! The conversions both foreign faces share (Open MPI's, `faces/ompi`, and the standard ABI's,
//! `faces/abi`), compiled into each face's `conv` module: arrays of handles and statuses,
//! ranks, error codes, the integer constants that differ (by the pairs of each face's generated
//! `tables.rs`, under the names `face` and `mpich`), buffers, string outputs. What differs
//! between the faces (the handles' and the status's representation) is each face's own
//! `conv.rs`: `h_in`, `h_out`, `OHandle`, `OStatus`, `status_to_mpich`, `status_to_face`.

use super::{h_in, h_out, status_to_face, status_to_mpich, zero_status, OHandle, OStatus, FACE, USER_ERRORS_AFTER};
use crate::gen::tables::{self, face, mpich};
use mpicr_shim::face::abi as m;
use mpicr_virtid::Kind;
use std::os::raw::{c_char, c_int, c_void};

/// # Safety
/// `p` is null or points to `n` readable handles.
pub unsafe fn handles_in(kind: Kind, p: *const OHandle, n: usize) -> Vec<c_int> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|&h| h_in(kind, h)).collect()
}

pub fn vec_ptr<T>(v: &mut [T], null: bool) -> *mut T {
    if null {
        std::ptr::null_mut()
    } else {
        v.as_mut_ptr()
    }
}

/// Writes converted handles back.
///
/// # Safety
/// `p` is null or points to `v.len()` writable handles.
pub unsafe fn handles_out(kind: Kind, v: &[c_int], p: *mut OHandle) {
    if p.is_null() {
        return;
    }
    for (i, &h) in v.iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe { *p.add(i) = h_out(kind, h) };
    }
}

/// # Safety
/// `p` is null or points to a readable status.
pub unsafe fn status_in(p: *const OStatus) -> m::MPI_Status {
    if p.is_null() {
        zero_status()
    } else {
        // SAFETY: the caller's contract.
        status_to_mpich(unsafe { &*p })
    }
}

/// Open MPI's MPI_STATUS_IGNORE is null, MPICH's is 1.
pub fn status_ptr(s: &mut m::MPI_Status, ignore: bool) -> *mut m::MPI_Status {
    if ignore {
        m::MPI_STATUS_IGNORE
    } else {
        s
    }
}

/// The Open MPI status the call leaves: `s` converted, except an `MPI_ERROR` the call did not
/// touch (MPI leaves it alone in most completions), which keeps the program's own value even
/// where that is no error code (a conversion there and back is not the identity).
fn status_back(s: &m::MPI_Status, before: &OStatus) -> OStatus {
    let mut out = status_to_face(s);
    if s.MPI_ERROR == err_in(before.error) {
        out.error = before.error;
    }
    out
}

/// # Safety
/// `p` is null or points to a writable status (readable too: it is what [`status_in`] read).
pub unsafe fn status_out(s: &m::MPI_Status, p: *mut OStatus) {
    if !p.is_null() {
        // SAFETY: the caller's contract.
        unsafe { *p = status_back(s, &*p) };
    }
}

/// # Safety
/// `p` is null or points to `n` readable statuses.
pub unsafe fn statuses_in(p: *const OStatus, n: usize) -> Vec<m::MPI_Status> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }.iter().map(status_to_mpich).collect()
}

pub fn statuses_ptr(v: &mut [m::MPI_Status], ignore: bool) -> *mut m::MPI_Status {
    if ignore {
        m::MPI_STATUSES_IGNORE
    } else {
        v.as_mut_ptr()
    }
}

/// # Safety
/// `p` is null or points to `v.len()` writable statuses.
pub unsafe fn statuses_out(v: &[m::MPI_Status], p: *mut OStatus) {
    if p.is_null() {
        return;
    }
    for (i, s) in v.iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe { *p.add(i) = status_back(s, &*p.add(i)) };
    }
}

fn from_pairs(pairs: &[(i32, i32)], v: c_int, face_side: bool) -> Option<c_int> {
    pairs.iter().find(|p| if face_side { p.1 == v } else { p.0 == v }).map(|p| if face_side { p.0 } else { p.1 })
}

/// MPI_ANY_SOURCE, MPI_PROC_NULL and MPI_ROOT differ.
#[inline]
pub fn rank_in(r: c_int) -> c_int {
    match r {
        face::MPI_ANY_SOURCE => mpich::MPI_ANY_SOURCE,
        face::MPI_PROC_NULL => mpich::MPI_PROC_NULL,
        face::MPI_ROOT => mpich::MPI_ROOT,
        r => r,
    }
}

#[inline]
pub fn rank_out(r: c_int) -> c_int {
    match r {
        mpich::MPI_ANY_SOURCE => face::MPI_ANY_SOURCE,
        mpich::MPI_PROC_NULL => face::MPI_PROC_NULL,
        mpich::MPI_ROOT => face::MPI_ROOT,
        mpich::MPI_UNDEFINED => face::MPI_UNDEFINED,
        r => r,
    }
}

/// An array of `n` ranks (MPI_PROC_NULL may be among them).
///
/// # Safety
/// `p` is null or points to `n` readable ints.
pub unsafe fn ranks_in(p: *const c_int, n: usize) -> Vec<c_int> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|&r| rank_in(r)).collect()
}

/// # Safety
/// `p` is null or points to `n` writable ints.
pub unsafe fn ranks_out(p: *mut c_int, n: usize) {
    if p.is_null() {
        return;
    }
    for i in 0..n {
        // SAFETY: the caller's contract.
        unsafe { *p.add(i) = rank_out(*p.add(i)) };
    }
}

pub fn undefined_out(v: c_int) -> c_int {
    if v == mpich::MPI_UNDEFINED {
        face::MPI_UNDEFINED
    } else {
        v
    }
}

pub fn undefined_in(v: c_int) -> c_int {
    if v == face::MPI_UNDEFINED {
        mpich::MPI_UNDEFINED
    } else {
        v
    }
}

/// Bit of MPICH's error codes made by MPI_Add_error_class/code (ERROR_DYN_MASK).
const MPICH_DYNAMIC: c_int = 0x4000_0000;
/// MPICH's class of a code is its low 7 bits (ERROR_CLASS_MASK).
const MPICH_CLASS_MASK: c_int = 0x7f;

/// Error classes and codes the program made (`MPI_Add_error_class`/`_code`): MPICH's numbers
/// (with `MPICH_DYNAMIC`, except MPICH 4.0.2's codes of predefined classes), in the order the
/// face first saw them; known so that they are never read as MPICH's own codes. Where the face numbers them
/// itself (`USER_ERRORS_AFTER`: Open MPI's one counter for classes and codes after
/// `MPI_ERR_LASTCODE`), the i-th is `USER_ERRORS_AFTER + 1 + i`.
static USER_ERRORS: std::sync::Mutex<Vec<c_int>> = std::sync::Mutex::new(Vec::new());

fn user_errors() -> std::sync::MutexGuard<'static, Vec<c_int>> {
    USER_ERRORS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The face's number of an MPICH dynamic code (numbered on first sight, as it was just made);
/// the code itself where the face keeps the library's numbers.
fn user_out(rc: c_int) -> c_int {
    let mut v = user_errors();
    let i = v.iter().position(|&c| c == rc).unwrap_or_else(|| {
        v.push(rc);
        v.len() - 1
    });
    match USER_ERRORS_AFTER {
        Some(after) => after + 1 + i as c_int,
        None => rc,
    }
}

/// MPICH's code of a number the face gave (None: not one of them).
fn user_in(rc: c_int) -> Option<c_int> {
    let Some(after) = USER_ERRORS_AFTER else {
        return user_errors().contains(&rc).then_some(rc);
    };
    let i = usize::try_from(rc.checked_sub(after + 1)?).ok()?;
    user_errors().get(i).copied()
}

/// `MPI_LASTUSEDCODE`'s value in the face's numbering (None: the library's value stands).
pub fn last_used_code() -> Option<c_int> {
    USER_ERRORS_AFTER.map(|after| after + user_errors().len() as c_int)
}

/// The class or code `MPI_Add_error_class`/`_code` just made -> the face's number of it. Taken
/// as made by the program whatever its bits: MPICH 4.0.2 gives a code of a predefined class
/// without `MPICH_DYNAMIC` (`MPI_Add_error_code(MPI_ERR_ARG)` is 0x20c there).
pub fn user_err_out(made: c_int) -> c_int {
    user_out(made)
}

/// Is `rc` a class or code the program made (known to the face)?
fn user_known(rc: c_int) -> bool {
    user_errors().contains(&rc)
}

/// An MPICH return code -> the face's class of it; a code the program made -> the face's number
/// of it (unchanged where the face has no numbering of its own), so that MPI_Error_class/string
/// take it back.
#[inline]
pub fn err_out(rc: c_int) -> c_int {
    if rc == 0 {
        return 0;
    }
    if rc & MPICH_DYNAMIC != 0 || user_known(rc) {
        return user_out(rc);
    }
    from_pairs(&tables::ERROR_CLASSES, rc & MPICH_CLASS_MASK, false).unwrap_or(face::MPI_ERR_UNKNOWN)
}

/// A face error class (or a code the program made) -> MPICH's.
#[inline]
pub fn err_in(rc: c_int) -> c_int {
    if rc == 0 {
        return 0;
    }
    if let Some(c) = user_in(rc) {
        return c;
    }
    if rc & MPICH_DYNAMIC != 0 {
        return rc;
    }
    from_pairs(&tables::ERROR_CLASSES, rc, true).unwrap_or(rc)
}

/// `MPI_Comm_spawn(_multiple)`'s `array_of_errcodes`, MPICH's codes -> the face's classes:
/// as many as Open MPI writes (the spawned processes, or `n` where none came up).
///
/// # Safety
/// `codes` is null (`MPI_ERRCODES_IGNORE`) or points to that many writable ints (MPI's
/// contract of the call).
pub unsafe fn errcodes_out(codes: *mut c_int, intercomm: c_int, n: c_int) {
    if codes.is_null() {
        return;
    }
    let mut spawned = -1;
    if intercomm != 0 && intercomm != m::MPI_COMM_NULL {
        // SAFETY: a communicator handle the MPICH face just made, a local out-pointer.
        if unsafe { mpicr_shim::face::gen::passthrough::MPI_Comm_remote_size(intercomm, &mut spawned) } != 0 {
            spawned = -1;
        }
    }
    let n = if spawned >= 0 { spawned } else { n.max(0) };
    for i in 0..n as usize {
        // SAFETY: the caller's contract.
        unsafe { *codes.add(i) = err_out(*codes.add(i)) };
    }
}

/// The processes `MPI_Comm_spawn_multiple` asked for: the sum of `array_of_maxprocs`.
///
/// # Safety
/// `maxprocs` is null or points to `count` readable ints.
pub unsafe fn maxprocs_sum(count: c_int, maxprocs: *const c_int) -> c_int {
    if maxprocs.is_null() || count <= 0 {
        return 0;
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(maxprocs, count as usize) }.iter().map(|&n| n.max(0)).sum()
}

pub fn topo_out(v: c_int) -> c_int {
    from_pairs(&tables::TOPOLOGIES, v, false).unwrap_or_else(|| undefined_out(v))
}

pub fn combiner_out(v: c_int) -> c_int {
    from_pairs(&tables::COMBINERS, v, false).unwrap_or(v)
}

pub fn comm_type_in(v: c_int) -> c_int {
    from_pairs(&tables::COMM_TYPES, v, true).unwrap_or_else(|| undefined_in(v))
}

/// Predefined attribute keys (MPI_TAG_UB, ...) are small integers in Open MPI; a keyval made
/// here is the MPICH face's and passes unchanged.
pub fn keyval_in(v: c_int) -> c_int {
    if v == face::MPI_KEYVAL_INVALID {
        return mpich::MPI_KEYVAL_INVALID;
    }
    from_pairs(&tables::KEYVALS, v, true).unwrap_or(v)
}

pub fn keyval_out(v: c_int) -> c_int {
    if v == mpich::MPI_KEYVAL_INVALID {
        return face::MPI_KEYVAL_INVALID;
    }
    v
}

pub fn order_in(v: c_int) -> c_int {
    from_pairs(&tables::ORDERS, v, true).unwrap_or(v)
}

pub fn typeclass_in(v: c_int) -> c_int {
    from_pairs(&tables::TYPECLASSES, v, true).unwrap_or(v)
}

pub fn lock_in(v: c_int) -> c_int {
    from_pairs(&tables::LOCKS, v, true).unwrap_or(v)
}

/// RMA assertion bits.
pub fn mode_in(v: c_int) -> c_int {
    let mut out = 0;
    let mut rest = v;
    for &(mv, ov) in tables::RMA_MODES.iter() {
        if v & ov != 0 {
            out |= mv;
            rest &= !ov;
        }
    }
    out | rest
}

/// An array of `n` integer constants, each converted by `f`.
///
/// # Safety
/// `p` is null or points to `n` readable ints.
pub unsafe fn ints_in(p: *const c_int, n: usize, f: fn(c_int) -> c_int) -> Vec<c_int> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|&v| f(v)).collect()
}

pub fn distrib_in(v: c_int) -> c_int {
    from_pairs(&tables::DISTRIBUTIONS, v, true).unwrap_or(v)
}

fn distrib_out(v: c_int) -> c_int {
    from_pairs(&tables::DISTRIBUTIONS, v, false).unwrap_or(v)
}

pub fn darg_in(v: c_int) -> c_int {
    if v == face::MPI_DISTRIBUTE_DFLT_DARG {
        mpich::MPI_DISTRIBUTE_DFLT_DARG
    } else {
        v
    }
}

fn darg_out(v: c_int) -> c_int {
    if v == mpich::MPI_DISTRIBUTE_DFLT_DARG {
        face::MPI_DISTRIBUTE_DFLT_DARG
    } else {
        v
    }
}

fn order_out(v: c_int) -> c_int {
    from_pairs(&tables::ORDERS, v, false).unwrap_or(v)
}

/// MPI_Type_get_contents' integers of a subarray or darray carry constants (order,
/// distributions, default arguments): rewritten in Open MPI's numbering.
///
/// # Safety
/// `ints` is null or holds `max` writable ints that the call filled.
pub unsafe fn contents_out(dt: c_int, max: c_int, ints: *mut c_int) {
    if ints.is_null() || max <= 0 {
        return;
    }
    let (mut ni, mut na, mut nd, mut comb) = (0, 0, 0, 0);
    // SAFETY: out-parameters are locals.
    if unsafe { mpicr_shim::face::gen::passthrough::MPI_Type_get_envelope(dt, &mut ni, &mut na, &mut nd, &mut comb) } != 0 {
        return;
    }
    // SAFETY: the caller's contract; indices stay below min(max, ni).
    let v = unsafe { std::slice::from_raw_parts_mut(ints, max.min(ni).max(0) as usize) };
    let fix = |v: &mut [c_int], i: usize, f: fn(c_int) -> c_int| {
        if let Some(x) = v.get_mut(i) {
            *x = f(*x);
        }
    };
    if comb == mpich::MPI_COMBINER_SUBARRAY {
        let n = v.first().copied().unwrap_or(0).max(0) as usize;
        fix(v, 1 + 3 * n, order_out);
    } else if comb == mpich::MPI_COMBINER_DARRAY {
        let n = v.get(2).copied().unwrap_or(0).max(0) as usize;
        for i in 0..n {
            fix(v, 3 + n + i, distrib_out);
            fix(v, 3 + 2 * n + i, darg_out);
        }
        fix(v, 3 + 4 * n, order_out);
    }
}

/// MPI_IN_PLACE is 1 in Open MPI, -1 in MPICH; MPI_BOTTOM is 0 in both.
#[inline]
pub fn buf_in<T>(p: *const T) -> *mut c_void {
    if p as usize == 1 {
        m::MPI_IN_PLACE
    } else {
        p as *mut c_void
    }
}

/// A string output: the MPICH face writes up to MPICH's maximum, the program has room for
/// Open MPI's.
pub struct StrOut {
    dst: *mut c_char,
    cap: usize,
    buf: Vec<c_char>,
}

impl StrOut {
    pub fn new(dst: *mut c_char, cap: c_int) -> StrOut {
        StrOut { dst, cap: cap.max(1) as usize, buf: vec![0; 16384] }
    }
    pub fn ptr(&mut self) -> *mut c_char {
        if self.dst.is_null() {
            std::ptr::null_mut()
        } else {
            self.buf.as_mut_ptr()
        }
    }
    /// Copies the result, cut to the program's buffer (NUL-terminated); returns the length
    /// copied (without the NUL).
    ///
    /// # Safety
    /// `dst` (if not null) has room for `cap` bytes.
    pub unsafe fn finish(&mut self) -> c_int {
        if self.dst.is_null() {
            return 0;
        }
        let len = self.buf.iter().position(|&c| c == 0).unwrap_or(self.buf.len()).min(self.cap - 1);
        // SAFETY: `len < cap`, the program's buffer size; `buf` holds at least `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(self.buf.as_ptr(), self.dst, len);
            *self.dst.add(len) = 0;
        }
        len as c_int
    }
}

/// A function mpicr cannot translate yet: the face's MPI_ERR_UNSUPPORTED_OPERATION, named once.
#[cold]
pub fn unsupported(name: &str, reason: &str) -> c_int {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|n| n == name) {
        eprintln!("mpicr: {name} is not supported by mpicr's {FACE}: {reason}");
        said.push(name.to_string());
    }
    face::MPI_ERR_UNSUPPORTED_OPERATION
}

/// The number of datatypes MPI_Alltoallw's arrays hold: the (remote) group's size.
pub fn comm_size_for(comm: OHandle) -> c_int {
    let c = h_in(Kind::Comm, comm);
    let (mut inter, mut n) = (0, 0);
    // SAFETY: out-parameters are locals.
    unsafe {
        mpicr_shim::face::gen::passthrough::MPI_Comm_test_inter(c, &mut inter);
        if inter != 0 {
            mpicr_shim::face::gen::passthrough::MPI_Comm_remote_size(c, &mut n);
        } else {
            mpicr_shim::face::gen::passthrough::MPI_Comm_size(c, &mut n);
        }
    }
    n
}

fn degrees(comm: OHandle) -> (c_int, c_int) {
    let c = h_in(Kind::Comm, comm);
    let (mut topo, mut i, mut o, mut w) = (0, 0, 0, 0);
    // SAFETY: out-parameters are locals.
    unsafe {
        mpicr_shim::face::gen::passthrough::MPI_Topo_test(c, &mut topo);
        if topo == mpich::MPI_DIST_GRAPH {
            mpicr_shim::face::gen::passthrough::MPI_Dist_graph_neighbors_count(c, &mut i, &mut o, &mut w);
        } else if topo == mpich::MPI_CART {
            mpicr_shim::face::gen::passthrough::MPI_Cartdim_get(c, &mut i);
            i *= 2;
            o = i;
        } else if topo == mpich::MPI_GRAPH {
            let mut r = 0;
            mpicr_shim::face::gen::passthrough::MPI_Comm_rank(c, &mut r);
            mpicr_shim::face::gen::passthrough::MPI_Graph_neighbors_count(c, r, &mut i);
            o = i;
        }
    }
    (i, o)
}

pub fn in_degree(comm: OHandle) -> c_int {
    degrees(comm).0
}

pub fn out_degree(comm: OHandle) -> c_int {
    degrees(comm).1
}

/// A window's creation flavor (the MPI_WIN_CREATE_FLAVOR attribute's value).
pub fn flavor_out(v: c_int) -> c_int {
    match v {
        mpich::MPI_WIN_FLAVOR_CREATE => face::MPI_WIN_FLAVOR_CREATE,
        mpich::MPI_WIN_FLAVOR_ALLOCATE => face::MPI_WIN_FLAVOR_ALLOCATE,
        mpich::MPI_WIN_FLAVOR_DYNAMIC => face::MPI_WIN_FLAVOR_DYNAMIC,
        mpich::MPI_WIN_FLAVOR_SHARED => face::MPI_WIN_FLAVOR_SHARED,
        v => v,
    }
}
