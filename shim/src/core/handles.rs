//! Virtual handles as the core knows them. Communicators, infos, groups, requests, error
//! handlers, sessions, ops, keyvals, datatypes, matched-probe messages, windows and files are
//! typed ([`VComm`], [`VInfo`], [`VGroup`], [`VRequest`], `VErrhandler`, [`VSession`], [`VOp`],
//! `VKeyval`, [`VDatatype`], [`VMessage`], [`VWin`], [`VFile`]): a table index, or the core's own
//! predefined handles (`WORLD`, `SELF`, `NULL`; `NULL`, `ENV`; `NULL`, `EMPTY`; `NULL`; `NULL` and
//! the three `ERRORS_*`; `NULL`; `NULL` and the fourteen predefined reductions; `INVALID`; `NULL`
//! and the predefined datatypes of `mpicr_virtid::predefined_datatypes!`; `NULL`, `NO_PROC`;
//! `NULL`; `NULL`), which stand for the real ones of the current generation (error handlers have
//! none: the core applies them); the face converts the program's ABI values to them
//! (`face::conv::vcomm`, `vinfo`, `vgroup`, `vrequest`, `verrhandler`, `vsession`, `vop`,
//! `vkeyval`, `vdatatype`, `vmessage`, `vwin`, `vfile`; a file's handle is a pointer).
//! What remains untyped (`handle`, `index`) is a table index encoded by
//! `mpicr_virtid`, or a predefined handle of the lower ABI, which stands for itself (with
//! MPICH's ABI on both sides, the face's conversion is the identity).

use crate::core::state::{OBJ, SELF_INDEX, WORLD_INDEX};
use crate::lower::abi::*;
use crate::lower::handles::{RealComm, RealDatatype, RealFile, RealGroup, RealInfo, RealMessage, RealOp, RealRequest, RealSession, RealWin};
use mpicr_virtid::{VComm, VDatatype, VFile, VGroup, VInfo, VMessage, VOp, VRequest, VSession, VWin};
use std::os::raw::c_int;

/// What a freed virtual handle becomes on its way to the real library: a value of MPICH's
/// "invalid" handle kind that the library rejects with the object's error class.
pub const STALE: c_int = 0;

/// Set while the lower half runs a sessions-only generation (see `face::conv::comm_checked`).
pub static SESSIONS_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Table index of a communicator (virtual or predefined); `None` if not one of ours.
#[inline(always)]
pub fn comm_index(v: VComm) -> Option<u32> {
    match v {
        VComm::WORLD => Some(WORLD_INDEX),
        VComm::SELF => Some(SELF_INDEX),
        v => v.index(),
    }
}

/// The real communicator of a virtual one (`NULL` is the library's null communicator, a
/// foreign value passes unchanged, a freed one becomes [`STALE`]).
#[inline(always)]
pub fn comm(v: VComm) -> RealComm {
    match comm_index(v) {
        Some(i) => OBJ.comms.real(i).unwrap_or(RealComm(STALE)),
        None if v == VComm::NULL => RealComm(MPI_COMM_NULL),
        None => RealComm(v.to_int().unwrap_or(STALE)),
    }
}

/// The real info of a virtual one (the predefined ones are the library's; hints only, so a
/// freed one becomes the library's null info, and a foreign value passes unchanged).
#[inline(always)]
pub fn info(v: VInfo) -> RealInfo {
    match v {
        VInfo::NULL => RealInfo(MPI_INFO_NULL),
        VInfo::ENV => RealInfo(MPI_INFO_ENV),
        v => match v.index() {
            Some(i) => OBJ.infos.real(i).unwrap_or(RealInfo(MPI_INFO_NULL)),
            None => RealInfo(v.to_int().unwrap_or(MPI_INFO_NULL)),
        },
    }
}

/// The real group of a virtual one (the predefined ones are the library's, a foreign value
/// passes unchanged, a freed one becomes [`STALE`]).
#[inline(always)]
pub fn group(v: VGroup) -> RealGroup {
    match v {
        VGroup::NULL => RealGroup(MPI_GROUP_NULL),
        VGroup::EMPTY => RealGroup(MPI_GROUP_EMPTY),
        v => match v.index() {
            Some(i) => OBJ.groups.real(i).unwrap_or(RealGroup(STALE)),
            None => RealGroup(v.to_int().unwrap_or(STALE)),
        },
    }
}

/// The real request of a virtual one (`NULL` is the library's null request, a foreign value
/// passes unchanged, a freed one becomes [`STALE`]).
#[inline(always)]
pub fn request(v: VRequest) -> RealRequest {
    match v {
        VRequest::NULL => RealRequest(MPI_REQUEST_NULL),
        v => match v.index() {
            Some(i) => OBJ.requests.real(i).unwrap_or(RealRequest(STALE)),
            None => RealRequest(v.to_int().unwrap_or(STALE)),
        },
    }
}

/// The real session of a virtual one (as [`request`]).
#[inline(always)]
pub fn session(v: VSession) -> RealSession {
    match v {
        VSession::NULL => RealSession(MPI_SESSION_NULL),
        v => match v.index() {
            Some(i) => OBJ.sessions.real(i).unwrap_or(RealSession(STALE)),
            None => RealSession(v.to_int().unwrap_or(STALE)),
        },
    }
}

macro_rules! lower_ops {
    (; $($v:ident $c:ident),* $(,)?) => {
        /// The real op of a virtual one (the predefined ones are the library's, a foreign value
        /// passes unchanged, a freed one becomes [`STALE`]).
        #[inline(always)]
        pub fn op(v: VOp) -> RealOp {
            RealOp(match v {
                $(VOp::$v => $c,)*
                v => match v.index() {
                    Some(i) => return OBJ.ops.real(i).unwrap_or(RealOp(STALE)),
                    None => v.to_int().unwrap_or(STALE),
                },
            })
        }
    };
}
mpicr_virtid::predefined_ops!(lower_ops);

/// The real window of a virtual one (as [`request`]).
#[inline(always)]
pub fn win(v: VWin) -> RealWin {
    match v {
        VWin::NULL => RealWin(MPI_WIN_NULL),
        v => match v.index() {
            Some(i) => OBJ.wins.real(i).unwrap_or(RealWin(STALE)),
            None => RealWin(v.to_int().unwrap_or(STALE)),
        },
    }
}

/// The real file of a virtual one (`NULL` is the library's null file, a foreign value passes
/// unchanged); files are pointers, so a freed one becomes the null file, which ROMIO rejects
/// with MPI_ERR_FILE instead of dereferencing it.
#[inline(always)]
pub fn file(v: VFile) -> RealFile {
    match v.index() {
        Some(i) => OBJ.files.real(i).unwrap_or(RealFile(std::ptr::null_mut())),
        None => RealFile(v.to_ptr().map_or(std::ptr::null_mut(), |p| p as MPI_File)),
    }
}

macro_rules! lower_datatypes {
    (; $($v:ident $c:ident),* $(,)?) => {
        /// The library's handle of one of the core's predefined datatypes (`None` for any other
        /// value).
        #[inline(always)]
        pub fn predefined_datatype(v: VDatatype) -> Option<MPI_Datatype> {
            match v {
                $(VDatatype::$v => Some($c),)*
                _ => None,
            }
        }

        /// The core's predefined datatype of the library's predefined handle `r` (`None` for any
        /// other value).
        #[inline(always)]
        pub fn predefined_vdatatype(r: MPI_Datatype) -> Option<VDatatype> {
            match r {
                $($c => Some(VDatatype::$v),)*
                _ => None,
            }
        }
    };
}
mpicr_virtid::predefined_datatypes!(lower_datatypes);

/// The real datatype of a virtual one (the predefined ones are the library's, a foreign value
/// passes unchanged, a freed one becomes [`STALE`], and so does a predefined one the library
/// lacks: MPICH 4.0 aborts on a builtin handle it does not know, so the call fails with
/// MPI_ERR_TYPE instead, through the program's error handler, as a library without the type
/// answers).
#[inline(always)]
pub fn datatype(v: VDatatype) -> RealDatatype {
    match v.index() {
        Some(i) => OBJ.datatypes.real(i).unwrap_or(RealDatatype(STALE)),
        None => RealDatatype(match predefined_datatype(v) {
            Some(r) if added_after_mpich_4_0(v) && crate::lower::current().lacks_datatype(r) => STALE,
            Some(r) => r,
            None => v.to_int().unwrap_or(STALE),
        }),
    }
}

/// Whether the library underneath has the predefined datatype of MPICH-ABI value `r` (false
/// for any other value): what the standard-ABI face's `MPI_Abi_get_fortran_info` reports.
pub fn library_has_datatype(r: MPI_Datatype) -> bool {
    predefined_vdatatype(r).is_some_and(|v| v != VDatatype::NULL && datatype(v).raw() != STALE)
}

/// Whether `v` is one of the predefined datatypes some MPICH-ABI libraries lack (see
/// `lower::lacking_datatypes`): only these ask the generation, the others cost nothing more.
#[inline(always)]
fn added_after_mpich_4_0(v: VDatatype) -> bool {
    matches!(
        v,
        VDatatype::INTEGER16
            | VDatatype::REAL2
            | VDatatype::COMPLEX4
            | VDatatype::LOGICAL1
            | VDatatype::LOGICAL2
            | VDatatype::LOGICAL4
            | VDatatype::LOGICAL8
            | VDatatype::LOGICAL16
            | VDatatype::MPIX_BFLOAT16
    )
}

/// The real message of a virtual one (as [`request`]; `NO_PROC` is the library's).
#[inline(always)]
pub fn message(v: VMessage) -> RealMessage {
    match v {
        VMessage::NULL => RealMessage(MPI_MESSAGE_NULL),
        VMessage::NO_PROC => RealMessage(MPI_MESSAGE_NO_PROC),
        v => match v.index() {
            Some(i) => OBJ.messages.real(i).unwrap_or(RealMessage(STALE)),
            None => RealMessage(v.to_int().unwrap_or(STALE)),
        },
    }
}

/// The core's message for a real one the library returned that the core does not keep: its
/// two predefined ones, else `None`.
#[inline(always)]
pub fn predefined_vmessage(r: MPI_Message) -> Option<VMessage> {
    match r {
        MPI_MESSAGE_NULL => Some(VMessage::NULL),
        MPI_MESSAGE_NO_PROC => Some(VMessage::NO_PROC),
        _ => None,
    }
}

/// The virtual handle of the communicator at `index` (the predefined ones for world and self).
pub fn comm_handle(index: u32) -> VComm {
    match index {
        WORLD_INDEX => VComm::WORLD,
        SELF_INDEX => VComm::SELF,
        i => VComm::virtual_at(i),
    }
}
