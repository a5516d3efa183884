//! One conversion per kind of argument between Open MPI's ABI (the program's) and the MPICH
//! face's (the shim's implementation): handles, statuses, ranks, buffers, error codes and the
//! integer constants whose values differ. Every number comes from the generated tables
//! (`gen/tables.rs`, extracted from both libraries' `mpi.h`).
//!
//! Handles. Open MPI's handles are pointers: a predefined one is the address of a data symbol
//! (`ompi_mpi_comm_world`, ...), which this library defines; the address a program holds is the
//! one ld.so resolved, the program's own copy for a non-PIE program (copy relocation), so the
//! addresses are looked up once with `dlsym(RTLD_DEFAULT)`, which finds the same definition. Any
//! other handle the program holds was made here: the MPICH face's integer handle under a tag in
//! the top 16 bits, which makes a non-canonical address that no object can have.
//! A null or foreign pointer converts to 0, which the MPICH face rejects as an invalid handle.

use crate::gen::tables::{self, mpich, ompi};
use mpicr_shim::face::abi as m;
use mpicr_virtid::Kind;
use std::collections::HashMap;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// Every Open MPI handle type (`MPI_Comm` = `struct ompi_communicator_t *`, ...).
pub type OHandle = *mut c_void;

/// Open MPI's `MPI_Status` (struct ompi_status_public_t).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct OStatus {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub cancelled: c_int,
    pub ucount: usize,
}
const _: () = assert!(std::mem::size_of::<OStatus>() == 24);

/// The tag of handles made here (bits 48..63).
const TAG: u64 = 0x6d63 << 48;

/// The hot path's hasher: the keys are distinct addresses and small tuples, so one multiply
/// spreads them well enough (std's SipHash costs more than the rest of a translation).
#[derive(Default)]
struct MulHasher(u64);

impl std::hash::Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }
    fn write_i32(&mut self, v: i32) {
        self.write_u64(v as u32 as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Map<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<MulHasher>>;

struct Predefined {
    /// address -> MPICH value
    to_mpich: Map<usize, c_int>,
    /// (kind, MPICH value) -> address
    to_ompi: Map<(u8, c_int), usize>,
    file_null: usize,
}

fn lookup(name: &std::ffi::CStr) -> usize {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the global scope, where
    // this library (preloaded) or the program's copy defines every name of the tables.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

fn predefined() -> &'static Predefined {
    static P: OnceLock<Predefined> = OnceLock::new();
    P.get_or_init(|| {
        let mut to_mpich = Map::default();
        let mut to_ompi = Map::default();
        for (sym, kind, v) in tables::PREDEFINED {
            let a = lookup(sym);
            if a == 0 {
                continue;
            }
            to_mpich.insert(a, v);
            if v != 0 {
                to_ompi.entry((kind as u8, v)).or_insert(a);
            }
        }
        Predefined { to_mpich, to_ompi, file_null: lookup(tables::FILE_NULL) }
    })
}

/// The program's handle -> the MPICH face's.
#[inline]
pub fn h_in(_kind: Kind, p: OHandle) -> c_int {
    let a = p as u64;
    if a >> 48 == TAG >> 48 {
        return a as u32 as c_int;
    }
    predefined().to_mpich.get(&(a as usize)).copied().unwrap_or(0)
}

/// The MPICH face's handle -> the program's.
#[inline]
pub fn h_out(kind: Kind, v: c_int) -> OHandle {
    match predefined().to_ompi.get(&(kind as u8, v)) {
        Some(&a) => a as OHandle,
        None => (TAG | v as u32 as u64) as OHandle,
    }
}

/// Files are pointers on both sides: only MPI_FILE_NULL differs.
#[inline]
pub fn file_in(p: OHandle) -> m::MPI_File {
    if p as usize == predefined().file_null {
        std::ptr::null_mut()
    } else {
        p as m::MPI_File
    }
}

#[inline]
pub fn file_out(p: m::MPI_File) -> OHandle {
    if p.is_null() {
        predefined().file_null as OHandle
    } else {
        p as OHandle
    }
}

/// A file's Fortran handle: the MPICH face's.
pub fn file_c2f(p: OHandle) -> m::MPI_Fint {
    // SAFETY: MPI_File_c2f takes any handle value.
    unsafe { mpicr_shim::face::api::MPI_File_c2f(file_in(p)) }
}

pub fn file_f2c(f: m::MPI_Fint) -> OHandle {
    // SAFETY: MPI_File_f2c takes any integer.
    file_out(unsafe { mpicr_shim::face::api::MPI_File_f2c(f) })
}

/// An array of `n` handles (null stays null: an empty vector with `null` set).
///
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

fn status_to_mpich(s: &OStatus) -> m::MPI_Status {
    let count = s.ucount as u64;
    m::MPI_Status {
        count_lo: count as u32 as c_int,
        count_hi_and_cancelled: (((count >> 32) as c_int) << 1) | (s.cancelled & 1),
        MPI_SOURCE: rank_in(s.source),
        MPI_TAG: s.tag,
        MPI_ERROR: err_in(s.error),
    }
}

fn status_to_ompi(s: &m::MPI_Status) -> OStatus {
    let count = (s.count_lo as u32 as u64) | (((s.count_hi_and_cancelled as u32 >> 1) as u64) << 32);
    OStatus {
        source: rank_out(s.MPI_SOURCE),
        tag: s.MPI_TAG,
        error: err_out(s.MPI_ERROR),
        cancelled: s.count_hi_and_cancelled & 1,
        ucount: count as usize,
    }
}

fn zero_status() -> m::MPI_Status {
    m::MPI_Status { count_lo: 0, count_hi_and_cancelled: 0, MPI_SOURCE: 0, MPI_TAG: 0, MPI_ERROR: 0 }
}

/// A status argument (read: the call may take it as input).
///
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
    let mut out = status_to_ompi(s);
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

fn from_pairs(pairs: &[(i32, i32)], v: c_int, ompi_side: bool) -> Option<c_int> {
    pairs.iter().find(|p| if ompi_side { p.1 == v } else { p.0 == v }).map(|p| if ompi_side { p.0 } else { p.1 })
}

/// MPI_ANY_SOURCE, MPI_PROC_NULL and MPI_ROOT differ.
#[inline]
pub fn rank_in(r: c_int) -> c_int {
    match r {
        ompi::MPI_ANY_SOURCE => mpich::MPI_ANY_SOURCE,
        ompi::MPI_PROC_NULL => mpich::MPI_PROC_NULL,
        ompi::MPI_ROOT => mpich::MPI_ROOT,
        r => r,
    }
}

#[inline]
pub fn rank_out(r: c_int) -> c_int {
    match r {
        mpich::MPI_ANY_SOURCE => ompi::MPI_ANY_SOURCE,
        mpich::MPI_PROC_NULL => ompi::MPI_PROC_NULL,
        mpich::MPI_ROOT => ompi::MPI_ROOT,
        mpich::MPI_UNDEFINED => ompi::MPI_UNDEFINED,
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
        ompi::MPI_UNDEFINED
    } else {
        v
    }
}

pub fn undefined_in(v: c_int) -> c_int {
    if v == ompi::MPI_UNDEFINED {
        mpich::MPI_UNDEFINED
    } else {
        v
    }
}

/// Bit of MPICH's error codes made by MPI_Add_error_class/code (ERROR_DYN_MASK).
const MPICH_DYNAMIC: c_int = 0x4000_0000;
/// MPICH's class of a code is its low 7 bits (ERROR_CLASS_MASK).
const MPICH_CLASS_MASK: c_int = 0x7f;

/// An MPICH return code -> Open MPI's class of it (a user-defined code passes unchanged, so
/// MPI_Error_class/string take it back).
#[inline]
pub fn err_out(rc: c_int) -> c_int {
    if rc == 0 || rc & MPICH_DYNAMIC != 0 {
        return rc;
    }
    from_pairs(&tables::ERROR_CLASSES, rc & MPICH_CLASS_MASK, false).unwrap_or(ompi::MPI_ERR_UNKNOWN)
}

/// An Open MPI error class (or a code made here) -> MPICH's.
#[inline]
pub fn err_in(rc: c_int) -> c_int {
    if rc == 0 || rc & MPICH_DYNAMIC != 0 {
        return rc;
    }
    from_pairs(&tables::ERROR_CLASSES, rc, true).unwrap_or(rc)
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
    if v == ompi::MPI_KEYVAL_INVALID {
        return mpich::MPI_KEYVAL_INVALID;
    }
    from_pairs(&tables::KEYVALS, v, true).unwrap_or(v)
}

pub fn keyval_out(v: c_int) -> c_int {
    if v == mpich::MPI_KEYVAL_INVALID {
        return ompi::MPI_KEYVAL_INVALID;
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
    if v == ompi::MPI_DISTRIBUTE_DFLT_DARG {
        mpich::MPI_DISTRIBUTE_DFLT_DARG
    } else {
        v
    }
}

fn darg_out(v: c_int) -> c_int {
    if v == mpich::MPI_DISTRIBUTE_DFLT_DARG {
        ompi::MPI_DISTRIBUTE_DFLT_DARG
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

/// A function mpicr cannot translate yet: Open MPI's MPI_ERR_UNSUPPORTED_OPERATION, named once.
#[cold]
pub fn unsupported(name: &str, reason: &str) -> c_int {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|n| n == name) {
        eprintln!("mpicr: {name} is not supported by mpicr's Open MPI face: {reason}");
        said.push(name.to_string());
    }
    ompi::MPI_ERR_UNSUPPORTED_OPERATION
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_keep_source_tag_error_count_and_cancelled() {
        let o = OStatus { source: ompi::MPI_PROC_NULL, tag: 7, error: ompi::MPI_ERR_TRUNCATE, cancelled: 1, ucount: (5 << 32) + 12 };
        let m = status_to_mpich(&o);
        assert_eq!(m.MPI_SOURCE, mpich::MPI_PROC_NULL);
        assert_eq!(m.MPI_ERROR, mpich::MPI_ERR_TRUNCATE);
        assert_eq!(m.count_lo, 12);
        assert_eq!(m.count_hi_and_cancelled, (5 << 1) | 1);
        let back = status_to_ompi(&m);
        assert_eq!((back.source, back.tag, back.error, back.cancelled, back.ucount), (o.source, o.tag, o.error, o.cancelled, o.ucount));
    }

    #[test]
    fn rank_sentinels_differ_and_ordinary_ranks_do_not() {
        for (o, m) in [(ompi::MPI_ANY_SOURCE, mpich::MPI_ANY_SOURCE), (ompi::MPI_PROC_NULL, mpich::MPI_PROC_NULL), (ompi::MPI_ROOT, mpich::MPI_ROOT)] {
            assert_ne!(o, m);
            assert_eq!(rank_in(o), m);
            assert_eq!(rank_out(m), o);
        }
        assert_eq!(rank_in(3), 3);
        assert_eq!(rank_out(3), 3);
    }

    #[test]
    fn error_codes_become_open_mpi_classes() {
        assert_eq!(err_out(0), 0);
        assert_eq!(err_out(mpich::MPI_ERR_RANK), ompi::MPI_ERR_RANK);
        // An MPICH error code carries its class in its low 7 bits (here 336174342: "Invalid rank").
        assert_eq!(err_out(336_174_342), ompi::MPI_ERR_RANK);
        assert_eq!(err_in(ompi::MPI_ERR_REQUEST), mpich::MPI_ERR_REQUEST);
        // Codes made by MPI_Add_error_code pass both ways unchanged.
        let user = 0x4000_0041;
        assert_eq!(err_in(err_out(user)), user);
    }

    #[test]
    fn rma_assertions_translate_bit_by_bit() {
        assert_eq!(mode_in(ompi::MPI_MODE_NOPRECEDE | ompi::MPI_MODE_NOSUCCEED), mpich::MPI_MODE_NOPRECEDE | mpich::MPI_MODE_NOSUCCEED);
        assert_eq!(mode_in(0), 0);
    }

    #[test]
    fn string_outputs_are_cut_to_open_mpis_maximum() {
        let mut dst = [1 as c_char; 8];
        let mut s = StrOut::new(dst.as_mut_ptr(), 8);
        let p = s.ptr();
        let text = b"a-long-communicator-name\0";
        // SAFETY: `p` is StrOut's own buffer, larger than `text`; `dst` has room for 8 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, p, text.len());
            assert_eq!(s.finish(), 7);
        }
        assert_eq!(&dst.map(|c| c as u8), b"a-long-\0");
    }

    #[test]
    fn in_place_is_one_in_open_mpi() {
        assert_eq!(buf_in(1 as *const c_void), m::MPI_IN_PLACE);
        assert!(buf_in(std::ptr::null::<c_void>()).is_null());
    }
}
