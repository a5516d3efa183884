//! The standard ABI's side of each conversion (the program's) to the MPICH face's (the shim's
//! implementation): handles, the status, and the integer constants the standard renumbered
//! (tags, thread levels, comparisons, file modes and positions). The conversions by kind that
//! both foreign faces share come from `faces/shared/xlate.rs`; every number from the generated
//! tables (`gen/tables.rs`, extracted from mpi_abi.h and MPICH's mpi.h).
//!
//! Handles. The standard ABI's handles are pointers; a predefined one is a small integer
//! constant (`MPI_COMM_WORLD` is 0x101), looked up in a dense table. Any other handle the
//! program holds was made here: the MPICH face's integer handle under a tag in the top 16 bits,
//! a non-canonical address that no object and no constant can have. Anything else converts to
//! 0, which the MPICH face rejects as an invalid handle.

use crate::gen::tables::{self, abi, mpich};
use mpicr_shim::face::abi as m;
use mpicr_virtid::Kind;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

#[path = "../../shared/xlate.rs"]
mod xlate;
pub use xlate::*;

/// The face, as messages name it.
pub(crate) const FACE: &str = "standard ABI face";
/// MPI_COMM_DUP_FN & co. are the pointer constant 1 (the null ones are null).
pub(crate) const DUP_FN: Option<usize> = Some(1);
/// MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY: `(int *)10` and `(int *)11`.
pub(crate) const UNWEIGHTED: usize = 10;
pub(crate) const WEIGHTS_EMPTY: usize = 11;
/// Error classes and codes the program adds keep the library's numbers here (still known as the
/// program's: MPICH 4.0.2's code of a predefined class looks like one of its own codes).
pub(crate) const USER_ERRORS_AFTER: Option<c_int> = None;

/// Every standard ABI handle type (`MPI_Comm` = `struct MPI_ABI_Comm *`, ...).
pub type OHandle = *mut c_void;

/// The standard ABI's `MPI_Status`: three public fields and five the library owns (here: MPICH's
/// count and cancelled bits).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct OStatus {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub internal: [c_int; 5],
}
const _: () = assert!(std::mem::size_of::<OStatus>() == 32);

/// The tag of handles made here (bits 48..63).
const TAG: u64 = 0x6d63 << 48;

struct Predefined {
    /// ABI value -> MPICH value (0: none)
    to_mpich: [c_int; tables::PREDEFINED_END],
    /// (kind, MPICH value) -> ABI value
    to_abi: HashMap<(u8, c_int), usize>,
}

fn predefined() -> &'static Predefined {
    static P: OnceLock<Predefined> = OnceLock::new();
    P.get_or_init(|| {
        let mut to_mpich = [0; tables::PREDEFINED_END];
        let mut to_abi = HashMap::new();
        for (a, kind, v, _) in tables::PREDEFINED {
            to_mpich[a] = v;
            if v != 0 {
                to_abi.entry((kind as u8, v)).or_insert(a);
            }
        }
        Predefined { to_mpich, to_abi }
    })
}

/// The program's handle -> the MPICH face's.
#[inline]
pub fn h_in(_kind: Kind, p: OHandle) -> c_int {
    let a = p as u64;
    if a >> 48 == TAG >> 48 {
        return a as u32 as c_int;
    }
    predefined().to_mpich.get(a as usize).copied().unwrap_or(0)
}

/// The MPICH face's handle -> the program's.
#[inline]
pub fn h_out(kind: Kind, v: c_int) -> OHandle {
    match predefined().to_abi.get(&(kind as u8, v)) {
        Some(&a) => a as OHandle,
        None => (TAG | v as u32 as u64) as OHandle,
    }
}

/// MPI_Comm_toint & co.: a predefined handle is its ABI value, any other the MPICH face's integer.
pub fn h_toint(kind: Kind, p: OHandle) -> c_int {
    if (p as usize) < tables::PREDEFINED_END {
        p as usize as c_int
    } else {
        h_in(kind, p)
    }
}

/// MPI_Comm_fromint & co., the inverse of [`h_toint`].
pub fn h_fromint(_kind: Kind, v: c_int) -> OHandle {
    if v >= 0 && (v as usize) < tables::PREDEFINED_END {
        v as usize as OHandle
    } else {
        (TAG | v as u32 as u64) as OHandle
    }
}

/// Files are pointers on both sides: only MPI_FILE_NULL differs.
#[inline]
pub fn file_in(p: OHandle) -> m::MPI_File {
    if p as usize == tables::FILE_NULL {
        std::ptr::null_mut()
    } else {
        p as m::MPI_File
    }
}

#[inline]
pub fn file_out(p: m::MPI_File) -> OHandle {
    if p.is_null() {
        tables::FILE_NULL as OHandle
    } else {
        p as OHandle
    }
}

/// A file's integer handle: the MPICH face's Fortran handle (MPI_FILE_NULL's is 0 there).
pub fn file_c2f(p: OHandle) -> c_int {
    // SAFETY: MPI_File_c2f takes any handle value.
    unsafe { mpicr_shim::face::api::MPI_File_c2f(file_in(p)) }
}

pub fn file_f2c(f: c_int) -> OHandle {
    // SAFETY: MPI_File_f2c takes any integer.
    file_out(unsafe { mpicr_shim::face::api::MPI_File_f2c(f) })
}

pub(crate) fn status_to_mpich(s: &OStatus) -> m::MPI_Status {
    m::MPI_Status {
        count_lo: s.internal[0],
        count_hi_and_cancelled: s.internal[1],
        MPI_SOURCE: rank_in(s.source),
        MPI_TAG: tag_in(s.tag),
        MPI_ERROR: err_in(s.error),
    }
}

pub(crate) fn status_to_face(s: &m::MPI_Status) -> OStatus {
    OStatus { source: rank_out(s.MPI_SOURCE), tag: tag_out(s.MPI_TAG), error: err_out(s.MPI_ERROR), internal: [s.count_lo, s.count_hi_and_cancelled, 0, 0, 0] }
}

pub(crate) fn zero_status() -> m::MPI_Status {
    m::MPI_Status { count_lo: 0, count_hi_and_cancelled: 0, MPI_SOURCE: 0, MPI_TAG: 0, MPI_ERROR: 0 }
}

/// MPI_ANY_TAG is -2 in the standard ABI, -1 in MPICH.
#[inline]
pub fn tag_in(t: c_int) -> c_int {
    if t == abi::MPI_ANY_TAG {
        mpich::MPI_ANY_TAG
    } else {
        t
    }
}

#[inline]
pub fn tag_out(t: c_int) -> c_int {
    if t == mpich::MPI_ANY_TAG {
        abi::MPI_ANY_TAG
    } else {
        t
    }
}

const THREADS: [(c_int, c_int); 4] = [
    (mpich::MPI_THREAD_SINGLE, abi::MPI_THREAD_SINGLE),
    (mpich::MPI_THREAD_FUNNELED, abi::MPI_THREAD_FUNNELED),
    (mpich::MPI_THREAD_SERIALIZED, abi::MPI_THREAD_SERIALIZED),
    (mpich::MPI_THREAD_MULTIPLE, abi::MPI_THREAD_MULTIPLE),
];

fn pair_in(pairs: &[(c_int, c_int)], v: c_int) -> c_int {
    pairs.iter().find(|p| p.1 == v).map_or(v, |p| p.0)
}

fn pair_out(pairs: &[(c_int, c_int)], v: c_int) -> c_int {
    pairs.iter().find(|p| p.0 == v).map_or(v, |p| p.1)
}

/// Thread levels are 0..3 in MPICH, 0/1024/2048/4096 in the standard ABI.
pub fn thread_in(v: c_int) -> c_int {
    pair_in(&THREADS, v)
}

pub fn thread_out(v: c_int) -> c_int {
    pair_out(&THREADS, v)
}

/// MPI_IDENT, MPI_CONGRUENT, MPI_SIMILAR, MPI_UNEQUAL.
pub fn compare_out(v: c_int) -> c_int {
    pair_out(
        &[
            (mpich::MPI_IDENT, abi::MPI_IDENT),
            (mpich::MPI_CONGRUENT, abi::MPI_CONGRUENT),
            (mpich::MPI_SIMILAR, abi::MPI_SIMILAR),
            (mpich::MPI_UNEQUAL, abi::MPI_UNEQUAL),
        ],
        v,
    )
}

const AMODES: [(c_int, c_int); 9] = [
    (mpich::MPI_MODE_APPEND, abi::MPI_MODE_APPEND),
    (mpich::MPI_MODE_CREATE, abi::MPI_MODE_CREATE),
    (mpich::MPI_MODE_DELETE_ON_CLOSE, abi::MPI_MODE_DELETE_ON_CLOSE),
    (mpich::MPI_MODE_EXCL, abi::MPI_MODE_EXCL),
    (mpich::MPI_MODE_RDONLY, abi::MPI_MODE_RDONLY),
    (mpich::MPI_MODE_RDWR, abi::MPI_MODE_RDWR),
    (mpich::MPI_MODE_SEQUENTIAL, abi::MPI_MODE_SEQUENTIAL),
    (mpich::MPI_MODE_UNIQUE_OPEN, abi::MPI_MODE_UNIQUE_OPEN),
    (mpich::MPI_MODE_WRONLY, abi::MPI_MODE_WRONLY),
];

/// File access modes, bit by bit (unknown bits pass, so MPICH rejects them as it would).
pub fn amode_in(v: c_int) -> c_int {
    let (mut out, mut rest) = (0, v);
    for &(mv, av) in AMODES.iter() {
        if v & av != 0 {
            out |= mv;
            rest &= !av;
        }
    }
    out | rest
}

pub fn amode_out(v: c_int) -> c_int {
    let (mut out, mut rest) = (0, v);
    for &(mv, av) in AMODES.iter() {
        if v & mv != 0 {
            out |= av;
            rest &= !mv;
        }
    }
    out | rest
}

/// MPI_SEEK_SET, MPI_SEEK_CUR, MPI_SEEK_END.
pub fn whence_in(v: c_int) -> c_int {
    pair_in(&[(mpich::MPI_SEEK_SET, abi::MPI_SEEK_SET), (mpich::MPI_SEEK_CUR, abi::MPI_SEEK_CUR), (mpich::MPI_SEEK_END, abi::MPI_SEEK_END)], v)
}

/// A view's displacement: MPI_DISPLACEMENT_CURRENT (-1 in the standard ABI, a displacement MPI
/// refuses otherwise) becomes MPICH's.
pub fn disp_in(v: m::MPI_Offset) -> m::MPI_Offset {
    if v == -1 {
        m::MPI_DISPLACEMENT_CURRENT
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displacement_current_is_mpichs() {
        assert_eq!(disp_in(-1), m::MPI_DISPLACEMENT_CURRENT);
        assert_eq!(disp_in(64), 64);
    }

    #[test]
    fn predefined_handles_map_both_ways() {
        let world = 0x101 as OHandle;
        assert_eq!(h_in(Kind::Comm, world), mpich_world());
        assert_eq!(h_out(Kind::Comm, mpich_world()), world);
        assert_eq!(h_toint(Kind::Comm, world), 0x101);
        assert_eq!(h_fromint(Kind::Comm, 0x101), world);
        // A handle made here round-trips through its integer form.
        let made = h_out(Kind::Comm, -2080374782);
        assert_eq!(h_fromint(Kind::Comm, h_toint(Kind::Comm, made)), made);
        assert_eq!(h_in(Kind::Comm, 0x7 as OHandle), 0);
    }

    fn mpich_world() -> c_int {
        tables::PREDEFINED.iter().find(|p| p.3 == "MPI_COMM_WORLD").unwrap().2
    }

    #[test]
    fn statuses_keep_source_tag_error_and_count() {
        let m0 = m::MPI_Status {
            count_lo: 12,
            count_hi_and_cancelled: 3,
            MPI_SOURCE: mpich::MPI_PROC_NULL,
            MPI_TAG: mpich::MPI_ANY_TAG,
            MPI_ERROR: mpich::MPI_ERR_TRUNCATE,
        };
        let a = status_to_face(&m0);
        assert_eq!((a.source, a.tag, a.error), (abi::MPI_PROC_NULL, abi::MPI_ANY_TAG, abi::MPI_ERR_TRUNCATE));
        let back = status_to_mpich(&a);
        assert_eq!(
            (back.count_lo, back.count_hi_and_cancelled, back.MPI_SOURCE, back.MPI_TAG, back.MPI_ERROR),
            (12, 3, m0.MPI_SOURCE, m0.MPI_TAG, m0.MPI_ERROR)
        );
    }

    #[test]
    fn renumbered_constants_translate() {
        assert_eq!(thread_in(abi::MPI_THREAD_MULTIPLE), mpich::MPI_THREAD_MULTIPLE);
        assert_eq!(thread_out(mpich::MPI_THREAD_FUNNELED), abi::MPI_THREAD_FUNNELED);
        assert_eq!(amode_in(abi::MPI_MODE_CREATE | abi::MPI_MODE_WRONLY), mpich::MPI_MODE_CREATE | mpich::MPI_MODE_WRONLY);
        assert_eq!(amode_out(amode_in(abi::MPI_MODE_RDWR | abi::MPI_MODE_APPEND)), abi::MPI_MODE_RDWR | abi::MPI_MODE_APPEND);
        assert_eq!(whence_in(abi::MPI_SEEK_END), mpich::MPI_SEEK_END);
        assert_eq!(compare_out(mpich::MPI_CONGRUENT), abi::MPI_CONGRUENT);
        assert_eq!(err_out(mpich::MPI_ERR_REQUEST), abi::MPI_ERR_REQUEST);
        assert_eq!(rank_in(abi::MPI_ANY_SOURCE), mpich::MPI_ANY_SOURCE);
    }
}
