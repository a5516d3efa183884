//! Virtual handles as the core knows them, one `#[repr(transparent)]` type per kind.
//!
//! A value is one of three things: a table index encoded by [`crate::encoding`] (the value the
//! program holds), one of the core's own predefined objects (constants above the 32-bit range,
//! so no program value can be mistaken for one), or a value nobody made, which the core carries
//! unchanged to the real library so that it is rejected there as in a native run. The face
//! converts the program's ABI integers to these and back; the core never sees an ABI's
//! predefined constants.

use crate::encoding::{decode, decode_file, Kind, VirtualHandle};
use serde::{Deserialize, Serialize};

macro_rules! virtual_kind {
    ($(#[$doc:meta])* $name:ident, $kind:ident { $($(#[$pdoc:meta])* $pre:ident = $n:literal),* $(,)? }) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(i64);

        impl $name {
            $($(#[$pdoc])* pub const $pre: $name = $name($n << 32);)*

            /// The handle of table index `index`.
            pub const fn virtual_at(index: u32) -> $name {
                $name(VirtualHandle { kind: Kind::$kind, index }.to_int() as i64)
            }

            /// A virtual handle's value as the program holds it, or a value nobody made.
            pub const fn from_int(v: i32) -> $name {
                $name(v as i64)
            }

            /// The value [`from_int`](Self::from_int) took; `None` for the core's predefined
            /// handles, which each face names in its own ABI.
            pub const fn to_int(self) -> Option<i32> {
                if self.0 >= i32::MIN as i64 && self.0 <= i32::MAX as i64 { Some(self.0 as i32) } else { None }
            }

            /// The table index of a virtual handle (`None` for predefined and foreign values).
            #[inline(always)]
            pub fn index(self) -> Option<u32> {
                match self.to_int() {
                    Some(v) => decode(v, Kind::$kind),
                    None => None,
                }
            }
        }
    };
}

virtual_kind!(
    /// A communicator (`virtual_at` is not for the predefined ones' table indices: the core
    /// maps those, `core::handles::comm_handle`).
    VComm, Comm {
        /// The world model's communicator of all processes (`MPI_COMM_WORLD` in a face).
        WORLD = 1,
        /// The world model's communicator of this process alone (`MPI_COMM_SELF`).
        SELF = 2,
        /// No communicator (`MPI_COMM_NULL`).
        NULL = 3,
    }
);

virtual_kind!(
    /// An info object.
    VInfo, Info {
        /// No info (`MPI_INFO_NULL`).
        NULL = 3,
        /// The process's environment (`MPI_INFO_ENV`).
        ENV = 4,
    }
);

virtual_kind!(
    /// A group.
    VGroup, Group {
        /// No group (`MPI_GROUP_NULL`).
        NULL = 3,
        /// The group of no process (`MPI_GROUP_EMPTY`).
        EMPTY = 4,
    }
);

virtual_kind!(
    /// A request.
    VRequest, Request {
        /// No request (`MPI_REQUEST_NULL`).
        NULL = 3,
    }
);

virtual_kind!(
    /// An error handler (the program's handlers live in the core: no real object).
    VErrhandler, Errhandler {
        /// No error handler (`MPI_ERRHANDLER_NULL`).
        NULL = 3,
        /// Errors abort the job (`MPI_ERRORS_ARE_FATAL`).
        ERRORS_ARE_FATAL = 5,
        /// Errors return their code (`MPI_ERRORS_RETURN`).
        ERRORS_RETURN = 6,
        /// Errors abort the processes of the object (`MPI_ERRORS_ABORT`).
        ERRORS_ABORT = 7,
    }
);

virtual_kind!(
    /// An MPI session.
    VSession, Session {
        /// No session (`MPI_SESSION_NULL`).
        NULL = 3,
    }
);

virtual_kind!(
    /// A reduction operation (the predefined ones are the core's own: each face names them in
    /// its ABI, the lower adapter in the library's).
    VOp, Op {
        /// No operation (`MPI_OP_NULL`).
        NULL = 3,
        /// `MPI_MAX`.
        MAX = 16,
        /// `MPI_MIN`.
        MIN = 17,
        /// `MPI_SUM`.
        SUM = 18,
        /// `MPI_PROD`.
        PROD = 19,
        /// `MPI_LAND`.
        LAND = 20,
        /// `MPI_BAND`.
        BAND = 21,
        /// `MPI_LOR`.
        LOR = 22,
        /// `MPI_BOR`.
        BOR = 23,
        /// `MPI_LXOR`.
        LXOR = 24,
        /// `MPI_BXOR`.
        BXOR = 25,
        /// `MPI_MINLOC`.
        MINLOC = 26,
        /// `MPI_MAXLOC`.
        MAXLOC = 27,
        /// `MPI_REPLACE`.
        REPLACE = 28,
        /// `MPI_NO_OP`.
        NO_OP = 29,
    }
);

virtual_kind!(
    /// An attribute key made by the program (the predefined attribute keys are the library's
    /// and never reach the core's tables).
    VKeyval, Keyval {
        /// No key (`MPI_KEYVAL_INVALID`).
        INVALID = 3,
    }
);

virtual_kind!(
    /// A datatype (the predefined ones are the core's own: each face names them in its ABI, the
    /// lower adapter in the library's; aliases such as `MPI_LONG_LONG` and `MPI_C_COMPLEX` are
    /// one of these; a predefined one of a newer library that this list lacks is a foreign value
    /// and passes unchanged).
    VDatatype, Datatype {
        /// No datatype (`MPI_DATATYPE_NULL`).
        NULL = 3,
        /// `MPI_CHAR`.
        CHAR = 16,
        /// `MPI_SIGNED_CHAR`.
        SIGNED_CHAR = 17,
        /// `MPI_UNSIGNED_CHAR`.
        UNSIGNED_CHAR = 18,
        /// `MPI_BYTE`.
        BYTE = 19,
        /// `MPI_WCHAR`.
        WCHAR = 20,
        /// `MPI_SHORT`.
        SHORT = 21,
        /// `MPI_UNSIGNED_SHORT`.
        UNSIGNED_SHORT = 22,
        /// `MPI_INT`.
        INT = 23,
        /// `MPI_UNSIGNED`.
        UNSIGNED = 24,
        /// `MPI_LONG`.
        LONG = 25,
        /// `MPI_UNSIGNED_LONG`.
        UNSIGNED_LONG = 26,
        /// `MPI_FLOAT`.
        FLOAT = 27,
        /// `MPI_DOUBLE`.
        DOUBLE = 28,
        /// `MPI_LONG_DOUBLE`.
        LONG_DOUBLE = 29,
        /// `MPI_LONG_LONG_INT`.
        LONG_LONG_INT = 30,
        /// `MPI_UNSIGNED_LONG_LONG`.
        UNSIGNED_LONG_LONG = 31,
        /// `MPI_PACKED`.
        PACKED = 32,
        /// `MPI_LB`.
        LB = 33,
        /// `MPI_UB`.
        UB = 34,
        /// `MPI_FLOAT_INT`.
        FLOAT_INT = 35,
        /// `MPI_DOUBLE_INT`.
        DOUBLE_INT = 36,
        /// `MPI_LONG_INT`.
        LONG_INT = 37,
        /// `MPI_SHORT_INT`.
        SHORT_INT = 38,
        /// `MPI_2INT`.
        TWO_INT = 39,
        /// `MPI_LONG_DOUBLE_INT`.
        LONG_DOUBLE_INT = 40,
        /// `MPI_COMPLEX`.
        COMPLEX = 41,
        /// `MPI_DOUBLE_COMPLEX`.
        DOUBLE_COMPLEX = 42,
        /// `MPI_LOGICAL`.
        LOGICAL = 43,
        /// `MPI_REAL`.
        REAL = 44,
        /// `MPI_DOUBLE_PRECISION`.
        DOUBLE_PRECISION = 45,
        /// `MPI_INTEGER`.
        INTEGER = 46,
        /// `MPI_2INTEGER`.
        TWO_INTEGER = 47,
        /// `MPI_2REAL`.
        TWO_REAL = 48,
        /// `MPI_2DOUBLE_PRECISION`.
        TWO_DOUBLE_PRECISION = 49,
        /// `MPI_CHARACTER`.
        CHARACTER = 50,
        /// `MPI_REAL4`.
        REAL4 = 51,
        /// `MPI_REAL8`.
        REAL8 = 52,
        /// `MPI_REAL16`.
        REAL16 = 53,
        /// `MPI_COMPLEX8`.
        COMPLEX8 = 54,
        /// `MPI_COMPLEX16`.
        COMPLEX16 = 55,
        /// `MPI_COMPLEX32`.
        COMPLEX32 = 56,
        /// `MPI_INTEGER1`.
        INTEGER1 = 57,
        /// `MPI_INTEGER2`.
        INTEGER2 = 58,
        /// `MPI_INTEGER4`.
        INTEGER4 = 59,
        /// `MPI_INTEGER8`.
        INTEGER8 = 60,
        /// `MPI_INTEGER16`.
        INTEGER16 = 61,
        /// `MPI_INT8_T`.
        INT8_T = 62,
        /// `MPI_INT16_T`.
        INT16_T = 63,
        /// `MPI_INT32_T`.
        INT32_T = 64,
        /// `MPI_INT64_T`.
        INT64_T = 65,
        /// `MPI_UINT8_T`.
        UINT8_T = 66,
        /// `MPI_UINT16_T`.
        UINT16_T = 67,
        /// `MPI_UINT32_T`.
        UINT32_T = 68,
        /// `MPI_UINT64_T`.
        UINT64_T = 69,
        /// `MPI_C_BOOL`.
        C_BOOL = 70,
        /// `MPI_C_FLOAT_COMPLEX`.
        C_FLOAT_COMPLEX = 71,
        /// `MPI_C_DOUBLE_COMPLEX`.
        C_DOUBLE_COMPLEX = 72,
        /// `MPI_C_LONG_DOUBLE_COMPLEX`.
        C_LONG_DOUBLE_COMPLEX = 73,
        /// `MPIX_C_FLOAT16`.
        MPIX_C_FLOAT16 = 74,
        /// `MPI_AINT`.
        AINT = 75,
        /// `MPI_OFFSET`.
        OFFSET = 76,
        /// `MPI_COUNT`.
        COUNT = 77,
        /// `MPI_CXX_BOOL`.
        CXX_BOOL = 78,
        /// `MPI_CXX_FLOAT_COMPLEX`.
        CXX_FLOAT_COMPLEX = 79,
        /// `MPI_CXX_DOUBLE_COMPLEX`.
        CXX_DOUBLE_COMPLEX = 80,
        /// `MPI_CXX_LONG_DOUBLE_COMPLEX`.
        CXX_LONG_DOUBLE_COMPLEX = 81,
        /// `MPI_REAL2`.
        REAL2 = 82,
        /// `MPI_COMPLEX4`.
        COMPLEX4 = 83,
        /// `MPI_LOGICAL1`.
        LOGICAL1 = 84,
        /// `MPI_LOGICAL2`.
        LOGICAL2 = 85,
        /// `MPI_LOGICAL4`.
        LOGICAL4 = 86,
        /// `MPI_LOGICAL8`.
        LOGICAL8 = 87,
        /// `MPI_LOGICAL16`.
        LOGICAL16 = 88,
        /// `MPIX_BFLOAT16`.
        MPIX_BFLOAT16 = 89,
    }
);

virtual_kind!(
    /// A message matched by `MPI_Mprobe`/`MPI_Improbe`.
    VMessage, Message {
        /// No message (`MPI_MESSAGE_NULL`).
        NULL = 3,
        /// The message of a probe from `MPI_PROC_NULL` (`MPI_MESSAGE_NO_PROC`).
        NO_PROC = 4,
    }
);

/// Calls `$m!` with every predefined datatype as `(core name, ABI name)` pairs, so that a face
/// and the lower adapter map the same list, each with its own ABI's constants in scope; the
/// tokens after `$m` come first, before a `;`.
#[macro_export]
macro_rules! predefined_datatypes {
    ($m:ident $(, $arg:tt)*) => {
        $m! { $($arg)* ; NULL MPI_DATATYPE_NULL, CHAR MPI_CHAR, SIGNED_CHAR MPI_SIGNED_CHAR, UNSIGNED_CHAR MPI_UNSIGNED_CHAR, BYTE MPI_BYTE, WCHAR MPI_WCHAR, SHORT MPI_SHORT, UNSIGNED_SHORT MPI_UNSIGNED_SHORT, INT MPI_INT, UNSIGNED MPI_UNSIGNED, LONG MPI_LONG, UNSIGNED_LONG MPI_UNSIGNED_LONG, FLOAT MPI_FLOAT, DOUBLE MPI_DOUBLE, LONG_DOUBLE MPI_LONG_DOUBLE, LONG_LONG_INT MPI_LONG_LONG_INT, UNSIGNED_LONG_LONG MPI_UNSIGNED_LONG_LONG, PACKED MPI_PACKED, LB MPI_LB, UB MPI_UB, FLOAT_INT MPI_FLOAT_INT, DOUBLE_INT MPI_DOUBLE_INT, LONG_INT MPI_LONG_INT, SHORT_INT MPI_SHORT_INT, TWO_INT MPI_2INT, LONG_DOUBLE_INT MPI_LONG_DOUBLE_INT, COMPLEX MPI_COMPLEX, DOUBLE_COMPLEX MPI_DOUBLE_COMPLEX, LOGICAL MPI_LOGICAL, REAL MPI_REAL, DOUBLE_PRECISION MPI_DOUBLE_PRECISION, INTEGER MPI_INTEGER, TWO_INTEGER MPI_2INTEGER, TWO_REAL MPI_2REAL, TWO_DOUBLE_PRECISION MPI_2DOUBLE_PRECISION, CHARACTER MPI_CHARACTER, REAL4 MPI_REAL4, REAL8 MPI_REAL8, REAL16 MPI_REAL16, COMPLEX8 MPI_COMPLEX8, COMPLEX16 MPI_COMPLEX16, COMPLEX32 MPI_COMPLEX32, INTEGER1 MPI_INTEGER1, INTEGER2 MPI_INTEGER2, INTEGER4 MPI_INTEGER4, INTEGER8 MPI_INTEGER8, INTEGER16 MPI_INTEGER16, INT8_T MPI_INT8_T, INT16_T MPI_INT16_T, INT32_T MPI_INT32_T, INT64_T MPI_INT64_T, UINT8_T MPI_UINT8_T, UINT16_T MPI_UINT16_T, UINT32_T MPI_UINT32_T, UINT64_T MPI_UINT64_T, C_BOOL MPI_C_BOOL, C_FLOAT_COMPLEX MPI_C_FLOAT_COMPLEX, C_DOUBLE_COMPLEX MPI_C_DOUBLE_COMPLEX, C_LONG_DOUBLE_COMPLEX MPI_C_LONG_DOUBLE_COMPLEX, MPIX_C_FLOAT16 MPIX_C_FLOAT16, AINT MPI_AINT, OFFSET MPI_OFFSET, COUNT MPI_COUNT, CXX_BOOL MPI_CXX_BOOL, CXX_FLOAT_COMPLEX MPI_CXX_FLOAT_COMPLEX, CXX_DOUBLE_COMPLEX MPI_CXX_DOUBLE_COMPLEX, CXX_LONG_DOUBLE_COMPLEX MPI_CXX_LONG_DOUBLE_COMPLEX, REAL2 MPI_REAL2, COMPLEX4 MPI_COMPLEX4, LOGICAL1 MPI_LOGICAL1, LOGICAL2 MPI_LOGICAL2, LOGICAL4 MPI_LOGICAL4, LOGICAL8 MPI_LOGICAL8, LOGICAL16 MPI_LOGICAL16, MPIX_BFLOAT16 MPIX_BFLOAT16 }
    };
}

/// Calls macro `$m` with the core's predefined ops, each with the name of its handle in an MPI
/// ABI (`NULL MPI_OP_NULL, MAX MPI_MAX, ...`): the one list from which a face and the lower
/// adapter each make their conversions.
#[macro_export]
macro_rules! predefined_ops {
    ($m:ident $(, $arg:tt)*) => {
        $m! { $($arg)* ; NULL MPI_OP_NULL, MAX MPI_MAX, MIN MPI_MIN, SUM MPI_SUM, PROD MPI_PROD, LAND MPI_LAND, BAND MPI_BAND, LOR MPI_LOR, BOR MPI_BOR, LXOR MPI_LXOR, BXOR MPI_BXOR, MINLOC MPI_MINLOC, MAXLOC MPI_MAXLOC, REPLACE MPI_REPLACE, NO_OP MPI_NO_OP }
    };
}

virtual_kind!(
    /// An RMA window.
    VWin, Win {
        /// No window (`MPI_WIN_NULL`).
        NULL = 3,
    }
);

/// An MPI file. The program's handle is a pointer (MPICH's ABI): a virtual one is
/// [`VirtualHandle::to_file_ptr`]'s non-canonical address, any other value is carried unchanged
/// to the real library. Held in 128 bits so that the core's own `NULL` lies above every 64-bit
/// value, as the integer kinds' predefined handles lie above every 32-bit one.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VFile(i128);

impl VFile {
    /// No file (`MPI_FILE_NULL`).
    pub const NULL: VFile = VFile(3 << 64);

    /// The handle of table index `index`.
    pub const fn virtual_at(index: u32) -> VFile {
        VFile(VirtualHandle { kind: Kind::File, index }.to_file_ptr() as i128)
    }

    /// A file handle's pointer value as the program holds it, or a value nobody made.
    pub const fn from_ptr(p: u64) -> VFile {
        VFile(p as i128)
    }

    /// The value [`from_ptr`](Self::from_ptr) took; `None` for `NULL`, which each face names
    /// in its own ABI.
    pub const fn to_ptr(self) -> Option<u64> {
        if self.0 >= 0 && self.0 <= u64::MAX as i128 {
            Some(self.0 as u64)
        } else {
            None
        }
    }

    /// The table index of a virtual handle (`None` for `NULL` and foreign values).
    #[inline(always)]
    pub fn index(self) -> Option<u32> {
        decode_file(self.to_ptr()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predefined_communicators_are_no_program_value() {
        for p in [VComm::WORLD, VComm::SELF, VComm::NULL] {
            assert_eq!(p.to_int(), None);
            assert_eq!(p.index(), None);
        }
        for v in [0, -1, i32::MIN, i32::MAX, 0x4400_0000] {
            assert_eq!(VComm::from_int(v).to_int(), Some(v));
            assert_ne!(VComm::from_int(v), VComm::WORLD);
        }
        assert_eq!(VComm::virtual_at(7).index(), Some(7));
        assert_eq!(VComm::from_int(VComm::virtual_at(7).to_int().unwrap()), VComm::virtual_at(7));
        assert_eq!(VInfo::virtual_at(7).index(), Some(7));
        assert_eq!(VComm::from_int(VInfo::virtual_at(7).to_int().unwrap()).index(), None, "kinds do not alias");
        assert_eq!(VInfo::ENV.to_int(), None);
        assert_eq!(VGroup::virtual_at(7).index(), Some(7));
        assert_eq!(VGroup::from_int(VComm::virtual_at(7).to_int().unwrap()).index(), None, "kinds do not alias");
        assert_eq!((VGroup::NULL.to_int(), VGroup::EMPTY.index()), (None, None));
        assert_eq!(VRequest::virtual_at(7).index(), Some(7));
        assert_eq!(VRequest::from_int(VGroup::virtual_at(7).to_int().unwrap()).index(), None, "kinds do not alias");
        assert_eq!(VRequest::NULL.to_int(), None);
        for p in [VErrhandler::NULL, VErrhandler::ERRORS_ARE_FATAL, VErrhandler::ERRORS_RETURN, VErrhandler::ERRORS_ABORT] {
            assert_eq!((p.to_int(), p.index()), (None, None));
        }
        assert_eq!(VErrhandler::virtual_at(7).index(), Some(7));
        assert_eq!((VSession::virtual_at(7).index(), VSession::NULL.to_int()), (Some(7), None));
        for p in [VOp::NULL, VOp::SUM, VOp::NO_OP] {
            assert_eq!((p.to_int(), p.index()), (None, None));
        }
        assert_eq!(VOp::virtual_at(7).index(), Some(7));
        assert_eq!(VOp::from_int(VSession::virtual_at(7).to_int().unwrap()).index(), None, "kinds do not alias");
        assert_eq!((VKeyval::virtual_at(7).index(), VKeyval::INVALID.to_int()), (Some(7), None));
        assert_eq!(VKeyval::from_int(VOp::virtual_at(7).to_int().unwrap()).index(), None, "kinds do not alias");
        for p in [VDatatype::NULL, VDatatype::INT, VDatatype::LONG_DOUBLE_INT, VDatatype::MPIX_BFLOAT16] {
            assert_eq!((p.to_int(), p.index()), (None, None));
        }
        assert_eq!(VDatatype::virtual_at(7).index(), Some(7));
        assert_eq!(VDatatype::from_int(VOp::virtual_at(7).to_int().unwrap()).index(), None, "kinds do not alias");
        assert_eq!(VDatatype::from_int(0x4c00_0405).index(), None, "a library's predefined value is foreign");
        assert_eq!((VMessage::virtual_at(7).index(), VMessage::NULL.to_int(), VMessage::NO_PROC.index()), (Some(7), None, None));
        assert_eq!(VMessage::from_int(VRequest::virtual_at(7).to_int().unwrap()).index(), None, "kinds do not alias");
        assert_eq!(VRequest::from_int(VMessage::virtual_at(7).to_int().unwrap()).index(), None, "kinds do not alias");
        assert_eq!((VWin::virtual_at(7).index(), VWin::NULL.to_int(), VWin::NULL.index()), (Some(7), None, None));
        assert_eq!(VWin::from_int(VKeyval::virtual_at(7).to_int().unwrap()).index(), None, "kinds do not alias");
    }

    #[test]
    fn files_are_pointers() {
        assert_eq!((VFile::NULL.to_ptr(), VFile::NULL.index()), (None, None));
        for p in [0, 1, u64::MAX, 0x7fff_1234_5678] {
            assert_eq!(VFile::from_ptr(p).to_ptr(), Some(p));
            assert_eq!(VFile::from_ptr(p).index(), None);
            assert_ne!(VFile::from_ptr(p), VFile::NULL);
        }
        assert_eq!(VFile::virtual_at(7).index(), Some(7));
        assert_eq!(VFile::from_ptr(VFile::virtual_at(7).to_ptr().unwrap()), VFile::virtual_at(7));
        assert_eq!(VFile::from_ptr(VWin::virtual_at(7).to_int().unwrap() as u32 as u64).index(), None, "kinds do not alias");
    }
}
