//! The library's life (init, finalize, sessions), its version, infos and error classes.

use super::real;
use crate::lower::abi::*;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

/// The program's `argc`/`argv` for `MPI_Init_thread`, or none (a renewal).
#[derive(Clone, Copy)]
pub struct ProgramArgs {
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
}

impl ProgramArgs {
    /// No arguments (null `argc` and `argv`, which MPI allows).
    pub const NONE: ProgramArgs = ProgramArgs { argc: std::ptr::null_mut(), argv: std::ptr::null_mut() };

    /// The program's arguments, as its `MPI_Init`/`MPI_Init_thread` got them.
    ///
    /// # Safety
    /// `argc` and `argv` are null or the program's, as `MPI_Init_thread` requires.
    pub unsafe fn new(argc: *mut c_int, argv: *mut *mut *mut c_char) -> ProgramArgs {
        ProgramArgs { argc, argv }
    }
}

/// `MPI_Init_thread`.
pub fn init_thread(args: ProgramArgs, level: c_int, provided: &mut c_int) -> Option<c_int> {
    // `args` are null or the program's (`ProgramArgs::new`'s contract).
    real!(MPI_Init_thread(args.argc, args.argv, level, provided))
}

/// `MPI_Finalize`.
pub fn finalize() -> Option<c_int> {
    real!(MPI_Finalize())
}

/// `MPI_Session_init`.
pub fn session_init(info: MPI_Info, errhandler: MPI_Errhandler, session: &mut MPI_Session) -> Option<c_int> {
    real!(MPI_Session_init(info, errhandler, session))
}

/// `MPI_Session_finalize`.
pub fn session_finalize(session: &mut MPI_Session) -> Option<c_int> {
    real!(MPI_Session_finalize(session))
}

/// `MPI_Group_from_session_pset`.
pub fn group_from_session_pset(session: MPI_Session, pset: &CStr, group: &mut MPI_Group) -> Option<c_int> {
    real!(MPI_Group_from_session_pset(session, pset.as_ptr(), group))
}

/// `MPI_Comm_create_from_group`.
pub fn comm_create_from_group(group: MPI_Group, tag: &CStr, info: MPI_Info, errhandler: MPI_Errhandler, comm: &mut MPI_Comm) -> Option<c_int> {
    real!(MPI_Comm_create_from_group(group, tag.as_ptr(), info, errhandler, comm))
}

/// `MPI_Info_create`.
pub fn info_create(info: &mut MPI_Info) -> Option<c_int> {
    real!(MPI_Info_create(info))
}

/// `MPI_Info_set`.
pub fn info_set(info: MPI_Info, key: &CStr, value: &CStr) -> Option<c_int> {
    real!(MPI_Info_set(info, key.as_ptr(), value.as_ptr()))
}

/// `MPI_Error_class`.
pub fn error_class(code: c_int, class: &mut c_int) -> Option<c_int> {
    real!(MPI_Error_class(code, class))
}

/// The keys and values of the real info `info` (`MPI_Info_get_nkeys`, then for each key
/// `MPI_Info_get_nthkey` and `MPI_Info_get_string`); the keys without a value are left out.
pub fn info_entries(info: MPI_Info) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut n = 0;
    real!(MPI_Info_get_nkeys(info, &mut n));
    for k in 0..n {
        // Buffers sized per the MPI limits, and their NULs.
        let mut key = vec![0 as c_char; MPI_MAX_INFO_KEY + 1];
        real!(MPI_Info_get_nthkey(info, k, key.as_mut_ptr()));
        let mut len: c_int = MPI_MAX_INFO_VAL as c_int + 1;
        let mut val = vec![0 as c_char; MPI_MAX_INFO_VAL + 1];
        let mut flag = 0;
        real!(MPI_Info_get_string(info, key.as_ptr(), &mut len, val.as_mut_ptr(), &mut flag));
        if flag != 0 {
            entries.push((super::object::string_of(&key), super::object::string_of(&val)));
        }
    }
    entries
}

/// What a program's error class, code or string is made again by.
#[derive(Clone, Copy, Debug)]
pub enum AddError<'a> {
    /// `MPI_Add_error_class`.
    Class,
    /// `MPI_Add_error_code` in that class.
    Code(c_int),
    /// `MPI_Add_error_string` of that code.
    String(c_int, &'a CStr),
}

/// `MPI_Add_error_class`, `_code` or `_string`; `out` gets the new class or code.
pub fn add_error(what: AddError<'_>, out: &mut c_int) -> Option<c_int> {
    match what {
        AddError::Class => real!(MPI_Add_error_class(out)),
        AddError::Code(class) => real!(MPI_Add_error_code(class, out)),
        AddError::String(code, text) => real!(MPI_Add_error_string(code, text.as_ptr())),
    }
}

/// `MPI_Register_datarep` (or `_c`) with the program's conversion functions and extra state,
/// as the addresses its own call passed (the program's memory is the same after a renewal).
pub fn register_datarep(name: &CStr, large: bool, read: usize, write: usize, extent: usize, extra: usize) -> Option<c_int> {
    use std::os::raw::c_void;
    let (r, w, e, x) = (read as *mut c_void, write as *mut c_void, extent as *mut c_void, extra as *mut c_void);
    if large {
        real!(MPI_Register_datarep_c(name.as_ptr(), r, w, e, x))
    } else {
        real!(MPI_Register_datarep(name.as_ptr(), r, w, e, x))
    }
}

/// `MPI_Buffer_attach_c` of the program's buffer at `buf` (still attached from its point of
/// view), `size` bytes.
pub fn buffer_attach_c(buf: usize, size: MPI_Count) -> Option<c_int> {
    real!(MPI_Buffer_attach_c(buf as *mut std::os::raw::c_void, size))
}
