//! One conversion per handle kind: virtual (program) handle -> real (library) handle.
//!
//! Translation is total: a live virtual handle maps to its real one, a predefined constant to
//! itself (or, for the two predefined communicators, to the real ones of the current lower
//! half), an invented value is passed on unchanged (the real library rejects it exactly as in
//! a native run), and a freed virtual handle becomes [`STALE`], a value of MPICH's "invalid"
//! handle kind that the library rejects with the object's error class without dereferencing.

use crate::core::state::OBJ;
use crate::face::abi::*;
use mpicr_virtid::{VComm, VDatatype, VErrhandler, VFile, VGroup, VInfo, VKeyval, VMessage, VOp, VRequest, VSession, VWin};
use std::os::raw::c_int;

// Windows' and files' handles are still the core's integers (MPICH's ABI on both sides): the
// core's own primitives serve the face as they are.
pub use crate::core::handles::{SESSIONS_ONLY, STALE};

/// The core's communicator for the program's handle: the predefined ones are the core's own,
/// any other value (virtual, or invented by the program) is carried as it is.
#[inline(always)]
pub fn vcomm(v: MPI_Comm) -> VComm {
    match v {
        MPI_COMM_WORLD => VComm::WORLD,
        MPI_COMM_SELF => VComm::SELF,
        MPI_COMM_NULL => VComm::NULL,
        v => VComm::from_int(v),
    }
}

/// The program's handle for the core's communicator.
#[inline(always)]
pub fn comm_abi(v: VComm) -> MPI_Comm {
    match v {
        VComm::WORLD => MPI_COMM_WORLD,
        VComm::SELF => MPI_COMM_SELF,
        VComm::NULL => MPI_COMM_NULL,
        v => v.to_int().unwrap_or(MPI_COMM_NULL),
    }
}

/// The core's info for the program's handle (as [`vcomm`]).
#[inline(always)]
pub fn vinfo(v: MPI_Info) -> VInfo {
    match v {
        MPI_INFO_NULL => VInfo::NULL,
        MPI_INFO_ENV => VInfo::ENV,
        v => VInfo::from_int(v),
    }
}

/// The program's handle for the core's info.
#[inline(always)]
pub fn info_abi(v: VInfo) -> MPI_Info {
    match v {
        VInfo::NULL => MPI_INFO_NULL,
        VInfo::ENV => MPI_INFO_ENV,
        v => v.to_int().unwrap_or(MPI_INFO_NULL),
    }
}

/// The core's group for the program's handle (as [`vcomm`]).
#[inline(always)]
pub fn vgroup(v: MPI_Group) -> VGroup {
    match v {
        MPI_GROUP_NULL => VGroup::NULL,
        MPI_GROUP_EMPTY => VGroup::EMPTY,
        v => VGroup::from_int(v),
    }
}

/// The program's handle for the core's group.
#[inline(always)]
pub fn group_abi(v: VGroup) -> MPI_Group {
    match v {
        VGroup::NULL => MPI_GROUP_NULL,
        VGroup::EMPTY => MPI_GROUP_EMPTY,
        v => v.to_int().unwrap_or(MPI_GROUP_NULL),
    }
}

/// The real group of the program's handle (see `core::handles::group`).
#[inline(always)]
pub fn group(v: MPI_Group) -> MPI_Group {
    crate::core::handles::group(vgroup(v)).raw()
}

/// The core's request for the program's handle (as [`vcomm`]).
#[inline(always)]
pub fn vrequest(v: MPI_Request) -> VRequest {
    match v {
        MPI_REQUEST_NULL => VRequest::NULL,
        v => VRequest::from_int(v),
    }
}

/// The program's handle for the core's request.
#[inline(always)]
pub fn request_abi(v: VRequest) -> MPI_Request {
    match v {
        VRequest::NULL => MPI_REQUEST_NULL,
        v => v.to_int().unwrap_or(MPI_REQUEST_NULL),
    }
}

/// The real request of the program's handle (see `core::handles::request`).
#[inline(always)]
pub fn request(v: MPI_Request) -> MPI_Request {
    crate::core::handles::request(vrequest(v)).raw()
}

/// The core's error handler for the program's handle (as [`vcomm`]).
#[inline(always)]
pub fn verrhandler(v: MPI_Errhandler) -> VErrhandler {
    match v {
        MPI_ERRHANDLER_NULL => VErrhandler::NULL,
        MPI_ERRORS_ARE_FATAL => VErrhandler::ERRORS_ARE_FATAL,
        MPI_ERRORS_RETURN => VErrhandler::ERRORS_RETURN,
        MPI_ERRORS_ABORT => VErrhandler::ERRORS_ABORT,
        v => VErrhandler::from_int(v),
    }
}

/// The program's handle for the core's error handler.
#[inline(always)]
pub fn errhandler_abi(v: VErrhandler) -> MPI_Errhandler {
    match v {
        VErrhandler::NULL => MPI_ERRHANDLER_NULL,
        VErrhandler::ERRORS_ARE_FATAL => MPI_ERRORS_ARE_FATAL,
        VErrhandler::ERRORS_RETURN => MPI_ERRORS_RETURN,
        VErrhandler::ERRORS_ABORT => MPI_ERRORS_ABORT,
        v => v.to_int().unwrap_or(MPI_ERRHANDLER_NULL),
    }
}

/// The core's session for the program's handle (as [`vcomm`]).
#[inline(always)]
pub fn vsession(v: MPI_Session) -> VSession {
    match v {
        MPI_SESSION_NULL => VSession::NULL,
        v => VSession::from_int(v),
    }
}

/// The program's handle for the core's session.
#[inline(always)]
pub fn session_abi(v: VSession) -> MPI_Session {
    match v {
        VSession::NULL => MPI_SESSION_NULL,
        v => v.to_int().unwrap_or(MPI_SESSION_NULL),
    }
}

/// The real session of the program's handle (see `core::handles::session`).
#[inline(always)]
pub fn session(v: MPI_Session) -> MPI_Session {
    crate::core::handles::session(vsession(v)).raw()
}

/// The two directions between the program's predefined handles of one kind and the core's,
/// made from one of `mpicr_virtid`'s lists (`predefined_ops!`, `predefined_datatypes!`): `$to`
/// (a value the list lacks becomes the core's foreign value) and `$from` (a core value without
/// a program integer becomes `$null`).
/// The two directions between the program's predefined handles of one kind and the core's,
/// called by one of `mpicr_virtid`'s lists (`predefined_ops!`, `predefined_datatypes!`): `$to`
/// (a value the list lacks becomes the core's foreign value) and `$from` (a core value without
/// a program integer becomes `$null`).
macro_rules! face_predefined {
    ([$v_ty:ident $abi_ty:ident $to:ident $from:ident $null:ident $to_doc:literal] ; $($v:ident $c:ident),* $(,)?) => {
        #[doc = $to_doc]
        #[inline(always)]
        pub fn $to(v: $abi_ty) -> $v_ty {
            match v {
                $($c => $v_ty::$v,)*
                v => $v_ty::from_int(v),
            }
        }

        /// The program's handle for the core's one.
        #[inline(always)]
        pub fn $from(v: $v_ty) -> $abi_ty {
            match v {
                $($v_ty::$v => $c,)*
                v => v.to_int().unwrap_or($null),
            }
        }
    };
}
mpicr_virtid::predefined_ops!(face_predefined, [VOp MPI_Op vop op_abi MPI_OP_NULL "The core's op for the program's handle (as [`vcomm`])."]);

/// The real op of the program's handle (see `core::handles::op`).
#[inline(always)]
pub fn op(v: MPI_Op) -> MPI_Op {
    crate::core::handles::op(vop(v)).raw()
}

mpicr_virtid::predefined_datatypes!(
    face_predefined,
    [VDatatype MPI_Datatype vdatatype datatype_abi MPI_DATATYPE_NULL
        "The core's datatype for the program's handle (as [`vcomm`]; aliases such as `MPI_LONG_LONG` are the same value in MPICH's ABI)."]
);

/// The real datatype of the program's handle (see `core::handles::datatype`).
#[inline(always)]
pub fn datatype(v: MPI_Datatype) -> MPI_Datatype {
    crate::core::handles::datatype(vdatatype(v)).raw()
}

/// The program's handle for a real datatype the library handed out (a derived one the core
/// made is its virtual handle, see `core::kinds::datatype::virtual_of_real`).
#[inline(always)]
pub fn datatype_of_real(r: MPI_Datatype) -> MPI_Datatype {
    datatype_abi(crate::core::kinds::datatype::virtual_of_real(crate::lower::handles::RealDatatype(r)))
}

/// The core's message for the program's handle (as [`vcomm`]).
#[inline(always)]
pub fn vmessage(v: MPI_Message) -> VMessage {
    match v {
        MPI_MESSAGE_NULL => VMessage::NULL,
        MPI_MESSAGE_NO_PROC => VMessage::NO_PROC,
        v => VMessage::from_int(v),
    }
}

/// The program's handle for the core's message.
#[inline(always)]
pub fn message_abi(v: VMessage) -> MPI_Message {
    match v {
        VMessage::NULL => MPI_MESSAGE_NULL,
        VMessage::NO_PROC => MPI_MESSAGE_NO_PROC,
        v => v.to_int().unwrap_or(MPI_MESSAGE_NULL),
    }
}

/// The core's keyval for the program's handle (as [`vcomm`]).
#[inline(always)]
pub fn vkeyval(v: c_int) -> VKeyval {
    match v {
        MPI_KEYVAL_INVALID => VKeyval::INVALID,
        v => VKeyval::from_int(v),
    }
}

/// The program's handle for the core's keyval.
#[inline(always)]
pub fn keyval_abi(v: VKeyval) -> c_int {
    match v {
        VKeyval::INVALID => MPI_KEYVAL_INVALID,
        v => v.to_int().unwrap_or(MPI_KEYVAL_INVALID),
    }
}

/// The core's window for the program's handle (as [`vcomm`]).
#[inline(always)]
pub fn vwin(v: MPI_Win) -> VWin {
    match v {
        MPI_WIN_NULL => VWin::NULL,
        v => VWin::from_int(v),
    }
}

/// The program's handle for the core's window.
#[inline(always)]
pub fn win_abi(v: VWin) -> MPI_Win {
    match v {
        VWin::NULL => MPI_WIN_NULL,
        v => v.to_int().unwrap_or(MPI_WIN_NULL),
    }
}

/// The real window of the program's handle (see `core::handles::win`).
#[inline(always)]
pub fn win(v: MPI_Win) -> MPI_Win {
    crate::core::handles::win(vwin(v)).raw()
}

/// The core's file for the program's handle, a pointer (as [`vcomm`]).
#[inline(always)]
pub fn vfile(v: MPI_File) -> VFile {
    if v == MPI_FILE_NULL {
        VFile::NULL
    } else {
        VFile::from_ptr(v as u64)
    }
}

/// The program's handle for the core's file.
#[inline(always)]
pub fn file_abi(v: VFile) -> MPI_File {
    v.to_ptr().map_or(MPI_FILE_NULL, |p| p as MPI_File)
}

/// The real file of the program's handle (see `core::handles::file`).
#[inline(always)]
pub fn file(v: MPI_File) -> MPI_File {
    crate::core::handles::file(vfile(v)).raw()
}

/// The program's handle of the communicator at table `index`.
pub fn comm_handle(index: u32) -> MPI_Comm {
    comm_abi(crate::core::handles::comm_handle(index))
}

/// Table index of the program's communicator handle; `None` if not one of ours.
#[inline(always)]
pub fn comm_index(v: MPI_Comm) -> Option<u32> {
    crate::core::handles::comm_index(vcomm(v))
}

/// The real communicator of the program's handle (see `core::handles::comm`).
#[inline(always)]
pub fn comm(v: MPI_Comm) -> MPI_Comm {
    crate::core::handles::comm(vcomm(v)).raw()
}

/// A communicator argument that a call's errors are reported on.
#[inline(always)]
pub fn comm_checked(v: MPI_Comm) -> Result<MPI_Comm, c_int> {
    match comm_index(v).and_then(|i| OBJ.comms.real(i)) {
        Some(r) => Ok(r.raw()),
        None if SESSIONS_ONLY.load(std::sync::atomic::Ordering::Relaxed) => Err(MPI_ERR_COMM),
        None => Ok(comm(v)),
    }
}

/// A window argument that a call's errors are reported on (see [`comm_checked`]).
#[inline(always)]
pub fn win_checked(v: MPI_Win) -> Result<MPI_Win, c_int> {
    match crate::core::kinds::win::real(vwin(v)) {
        Some(r) => Ok(r.raw()),
        None if SESSIONS_ONLY.load(std::sync::atomic::Ordering::Relaxed) => Err(MPI_ERR_WIN),
        None => Ok(win(v)),
    }
}

/// The real info of the program's handle for the library: a freed one becomes [`STALE`] (the
/// library's error for an invalid info), the predefined and foreign values pass unchanged.
#[inline(always)]
pub fn info(v: MPI_Info) -> MPI_Info {
    match vinfo(v).index() {
        Some(i) => OBJ.infos.real(i).map_or(STALE, |r| r.raw()),
        None => v,
    }
}

/// Translates an array of datatypes (e.g. `MPI_Alltoallw`, `MPI_Type_create_struct`).
///
/// # Safety
/// `types` must point to `n` readable handles.
pub unsafe fn datatypes(types: *const MPI_Datatype, n: usize) -> Vec<MPI_Datatype> {
    if types.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(types, n) }.iter().map(|&t| datatype(t)).collect()
}
