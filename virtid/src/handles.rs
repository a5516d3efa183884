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
        if self.0 >= 0 && self.0 <= u64::MAX as i128 { Some(self.0 as u64) } else { None }
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
