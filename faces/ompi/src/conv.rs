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

use crate::gen::tables;

#[path = "../../shared/xlate.rs"]
mod xlate;
pub use xlate::*;

/// The face, as messages name it.
pub(crate) const FACE: &str = "Open MPI face";
/// MPI_COMM_DUP_FN & co. are functions here (`OMPI_C_MPI_COMM_DUP_FN`), not a pointer constant.
pub(crate) const DUP_FN: Option<usize> = None;
/// MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY: `(int *)2` and `(int *)3`.
pub(crate) const UNWEIGHTED: usize = 2;
pub(crate) const WEIGHTS_EMPTY: usize = 3;
/// Error classes and codes the program adds are numbered as Open MPI does: one counter after
/// MPI_ERR_LASTCODE (92), shared by classes and codes (`xlate::err_out`).
pub(crate) const USER_ERRORS_AFTER: Option<c_int> = Some(tables::face::MPI_ERR_LASTCODE);
use mpicr_shim::face::abi as m;
use mpicr_virtid::Kind;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
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
pub(crate) fn status_to_mpich(s: &OStatus) -> m::MPI_Status {
    let count = s.ucount as u64;
    m::MPI_Status {
        count_lo: count as u32 as c_int,
        count_hi_and_cancelled: (((count >> 32) as c_int) << 1) | (s.cancelled & 1),
        MPI_SOURCE: rank_in(s.source),
        MPI_TAG: s.tag,
        MPI_ERROR: err_in(s.error),
    }
}

pub(crate) fn status_to_face(s: &m::MPI_Status) -> OStatus {
    let count = (s.count_lo as u32 as u64) | (((s.count_hi_and_cancelled as u32 >> 1) as u64) << 32);
    OStatus { source: rank_out(s.MPI_SOURCE), tag: s.MPI_TAG, error: err_out(s.MPI_ERROR), cancelled: s.count_hi_and_cancelled & 1, ucount: count as usize }
}

/// MPI_Status_c2f: Open MPI's Fortran status is its C status word by word (`MPI_STATUS_SIZE`
/// integers, `MPI_F_SOURCE` 0, `MPI_F_TAG` 1, `MPI_F_ERROR` 2, then the hidden words), so the
/// copy needs no library; MPI_STATUS_IGNORE (null) is erroneous here, as in Open MPI.
///
/// # Safety
/// `c` must be null or a readable status, `f` null or writable for `MPI_STATUS_SIZE` integers.
pub unsafe fn status_c2f(c: *const OStatus, f: *mut m::MPI_Fint) -> c_int {
    if c.is_null() || f.is_null() {
        return m::MPI_ERR_ARG;
    }
    // SAFETY: `c` is a status and `f` holds MPI_STATUS_SIZE integers (MPI's contract); both
    // are plain words of the same size.
    unsafe { std::ptr::copy_nonoverlapping(c as *const m::MPI_Fint, f, STATUS_WORDS) };
    m::MPI_SUCCESS
}

/// MPI_Status_f2c: the reverse of [`status_c2f`].
///
/// # Safety
/// `f` must be null or readable for `MPI_STATUS_SIZE` integers, `c` null or a writable status.
pub unsafe fn status_f2c(f: *const m::MPI_Fint, c: *mut OStatus) -> c_int {
    if c.is_null() || f.is_null() {
        return m::MPI_ERR_ARG;
    }
    // SAFETY: as in `status_c2f`, the other way round.
    unsafe { std::ptr::copy_nonoverlapping(f, c as *mut m::MPI_Fint, STATUS_WORDS) };
    m::MPI_SUCCESS
}
const STATUS_WORDS: usize = std::mem::size_of::<OStatus>() / std::mem::size_of::<m::MPI_Fint>();

pub(crate) fn zero_status() -> m::MPI_Status {
    m::MPI_Status { count_lo: 0, count_hi_and_cancelled: 0, MPI_SOURCE: 0, MPI_TAG: 0, MPI_ERROR: 0 }
}

/// A status argument (read: the call may take it as input).
///
#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::tables::{mpich, ompi};
    use std::os::raw::c_char;

    #[test]
    fn fortran_statuses_are_the_c_status_word_by_word() {
        let c = OStatus { source: 3, tag: 9, error: 0, cancelled: 1, ucount: (2 << 32) + 40 };
        let mut f = [0 as m::MPI_Fint; 6];
        // SAFETY: a status and six integers, Open MPI's MPI_STATUS_SIZE.
        assert_eq!(unsafe { status_c2f(&c, f.as_mut_ptr()) }, m::MPI_SUCCESS);
        assert_eq!(f, [3, 9, 0, 1, 40, 2]);
        let mut back = OStatus::default();
        // SAFETY: as above, the other way round.
        assert_eq!(unsafe { status_f2c(f.as_ptr(), &mut back) }, m::MPI_SUCCESS);
        assert_eq!((back.source, back.tag, back.error, back.cancelled, back.ucount), (3, 9, 0, 1, (2 << 32) + 40));
        // SAFETY: null pointers are refused before anything is read.
        assert_eq!(unsafe { status_c2f(std::ptr::null(), f.as_mut_ptr()) }, m::MPI_ERR_ARG);
    }

    #[test]
    fn statuses_keep_source_tag_error_count_and_cancelled() {
        let o = OStatus { source: ompi::MPI_PROC_NULL, tag: 7, error: ompi::MPI_ERR_TRUNCATE, cancelled: 1, ucount: (5 << 32) + 12 };
        let m = status_to_mpich(&o);
        assert_eq!(m.MPI_SOURCE, mpich::MPI_PROC_NULL);
        assert_eq!(m.MPI_ERROR, mpich::MPI_ERR_TRUNCATE);
        assert_eq!(m.count_lo, 12);
        assert_eq!(m.count_hi_and_cancelled, (5 << 1) | 1);
        let back = status_to_face(&m);
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
        // Codes made by MPI_Add_error_class/code get Open MPI's numbers, after MPI_ERR_LASTCODE,
        // and convert back.
        let (class, code) = (0x4000_0041, 0x4000_0141);
        let (oclass, ocode) = (err_out(class), err_out(code));
        assert!(oclass > ompi::MPI_ERR_LASTCODE && ocode == oclass + 1);
        assert_eq!(err_out(class), oclass);
        assert_eq!((err_in(oclass), err_in(ocode)), (class, code));
        assert_eq!(last_used_code(), Some(ocode));
        // A number nobody made passes unchanged.
        assert_eq!(err_in(ocode + 50), ocode + 50);
        // MPICH 4.0.2 makes a code of a predefined class without the dynamic bit.
        let odd = user_err_out(0x20c);
        assert_eq!((odd, err_out(0x20c), err_in(odd)), (ocode + 1, ocode + 1, 0x20c));
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
        assert_eq!(buf_in(std::ptr::without_provenance::<c_void>(1)), m::MPI_IN_PLACE);
        assert!(buf_in(std::ptr::null::<c_void>()).is_null());
    }
}
