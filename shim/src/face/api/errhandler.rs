//! Error handlers live in the shim: real objects always use MPI_ERRORS_RETURN and `errors`
//! applies the program's handler (see errors.rs).

use crate::core::gate;
use crate::core::kinds::{self, errhandler, win};
use crate::core::state::OBJ;
use crate::face::abi::*;
use crate::face::api::put;
use crate::face::{conv, errors};
use mpicr_virtid::{ErrhandlerRecipe, VErrhandler, VFile};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

/// MPI_FILE_NULL's error handler: the default for files opened later.
static FILE_NULL_EH: AtomicI32 = AtomicI32::new(MPI_ERRORS_RETURN);

pub fn file_null_errhandler() -> MPI_Errhandler {
    FILE_NULL_EH.load(Ordering::Acquire)
}

/// # Safety
/// `out` must be null or valid for a write.
unsafe fn create(recipe: ErrhandlerRecipe, out: *mut MPI_Errhandler) -> c_int {
    match errhandler::register(recipe) {
        Ok(v) => {
            // SAFETY: `out` is null or valid for a write (this function's contract).
            unsafe { put(out, conv::errhandler_abi(v)) };
            MPI_SUCCESS
        }
        Err(_) => errors::raise_default(MPI_ERR_OTHER, "MPI_Comm_create_errhandler"),
    }
}

fn valid(eh: MPI_Errhandler) -> bool {
    errhandler::is_valid(conv::verrhandler(eh))
}

pub unsafe fn MPI_Comm_create_errhandler(f: *mut c_void, eh: *mut MPI_Errhandler) -> c_int {
    // SAFETY: `eh` is the program's out-pointer, null or writable (MPI's contract of this call).
    unsafe { create(ErrhandlerRecipe::Comm { function: f as u64 }, eh) }
}
pub unsafe fn MPI_Errhandler_create(f: *mut c_void, eh: *mut MPI_Errhandler) -> c_int {
    // SAFETY: `eh` is the program's out-pointer, null or writable (MPI's contract of this call).
    unsafe { create(ErrhandlerRecipe::Comm { function: f as u64 }, eh) }
}
pub unsafe fn MPI_Win_create_errhandler(f: *mut c_void, eh: *mut MPI_Errhandler) -> c_int {
    // SAFETY: `eh` is the program's out-pointer, null or writable (MPI's contract of this call).
    unsafe { create(ErrhandlerRecipe::Win { function: f as u64 }, eh) }
}
pub unsafe fn MPI_File_create_errhandler(f: *mut c_void, eh: *mut MPI_Errhandler) -> c_int {
    // SAFETY: `eh` is the program's out-pointer, null or writable (MPI's contract of this call).
    unsafe { create(ErrhandlerRecipe::File { function: f as u64 }, eh) }
}
pub unsafe fn MPI_Session_create_errhandler(f: *mut c_void, eh: *mut MPI_Errhandler) -> c_int {
    // SAFETY: `eh` is the program's out-pointer, null or writable (MPI's contract of this call).
    unsafe { create(ErrhandlerRecipe::Session { function: f as u64 }, eh) }
}

pub unsafe fn MPI_Errhandler_free(eh: *mut MPI_Errhandler) -> c_int {
    // SAFETY: `eh` is non-null (checked first, `||` short-circuits) and points to the program's handle (MPI's
    // contract).
    if eh.is_null() || !valid(unsafe { *eh }) {
        return errors::raise_default(MPI_ERR_ARG, "MPI_Errhandler_free");
    }
    // Objects may still use the handler; the entry stays (it is small) and only the
    // program's handle is cleared, as MPI prescribes.
    // SAFETY: `eh` is non-null (checked above) and writable (MPI's contract of this call).
    unsafe { *eh = MPI_ERRHANDLER_NULL };
    MPI_SUCCESS
}

/// Sets or gets the handler of a communicator; an invalid communicator gets the library's error.
fn comm_errhandler(comm: MPI_Comm, set: Option<MPI_Errhandler>, name: &str) -> Result<MPI_Errhandler, c_int> {
    if let Some(eh) = set {
        if !valid(eh) {
            return Err(errors::raise_comm(comm, MPI_ERR_ARG, name));
        }
    }
    let idx = conv::comm_index(comm).filter(|&i| OBJ.comms.real(i).is_some());
    match idx.and_then(|i| {
        OBJ.comms.with(i, |c| {
            if let Some(eh) = set {
                c.errhandler = conv::verrhandler(eh);
            }
            conv::errhandler_abi(c.errhandler)
        })
    }) {
        Some(eh) => Ok(eh),
        None => {
            let _g = gate::enter();
            let mut out = 0;
            let rc = match crate::lower::fns().MPI_Comm_get_errhandler {
                // SAFETY: `f` is the real library's MPI_Comm_get_errhandler from the lower half's table; its
                // arguments are a handle value and a local.
                Some(f) => unsafe { f(comm, &mut out) },
                None => MPI_ERR_COMM,
            };
            drop(_g);
            Err(errors::raise_default(if rc == MPI_SUCCESS { MPI_ERR_COMM } else { rc }, name))
        }
    }
}

pub unsafe fn MPI_Comm_set_errhandler(comm: MPI_Comm, eh: MPI_Errhandler) -> c_int {
    comm_errhandler(comm, Some(eh), "MPI_Comm_set_errhandler").map_or_else(|e| e, |_| MPI_SUCCESS)
}
pub unsafe fn MPI_Errhandler_set(comm: MPI_Comm, eh: MPI_Errhandler) -> c_int {
    comm_errhandler(comm, Some(eh), "MPI_Errhandler_set").map_or_else(|e| e, |_| MPI_SUCCESS)
}
pub unsafe fn MPI_Comm_get_errhandler(comm: MPI_Comm, eh: *mut MPI_Errhandler) -> c_int {
    match comm_errhandler(comm, None, "MPI_Comm_get_errhandler") {
        Ok(h) => {
            // SAFETY: `eh` is the caller's out-pointer, null or valid for a write (MPI's contract of this
            // call).
            unsafe { put(eh, h) };
            MPI_SUCCESS
        }
        Err(e) => e,
    }
}
pub unsafe fn MPI_Errhandler_get(comm: MPI_Comm, eh: *mut MPI_Errhandler) -> c_int {
    // SAFETY: the same arguments and contract as MPI_Comm_get_errhandler, of which this is the deprecated
    // name.
    unsafe { MPI_Comm_get_errhandler(comm, eh) }
}

pub unsafe fn MPI_Comm_call_errhandler(comm: MPI_Comm, errorcode: c_int) -> c_int {
    if conv::comm_index(comm).filter(|&i| OBJ.comms.real(i).is_some()).is_none() {
        return errors::raise_default(MPI_ERR_COMM, "MPI_Comm_call_errhandler");
    }
    errors::raise_comm(comm, errorcode, "MPI_Comm_call_errhandler");
    MPI_SUCCESS
}

/// The error handler of a live window (`None` for any other handle).
fn win_errhandler(w: MPI_Win) -> Option<VErrhandler> {
    win::with(conv::vwin(w), |e| e.errhandler)
}

pub unsafe fn MPI_Win_set_errhandler(w: MPI_Win, eh: MPI_Errhandler) -> c_int {
    if win_errhandler(w).is_none() {
        return errors::raise_default(MPI_ERR_WIN, "MPI_Win_set_errhandler");
    }
    if !valid(eh) {
        return errors::raise_win(w, MPI_ERR_ARG, "MPI_Win_set_errhandler");
    }
    win::with(conv::vwin(w), |e| e.errhandler = conv::verrhandler(eh));
    MPI_SUCCESS
}
pub unsafe fn MPI_Win_get_errhandler(w: MPI_Win, eh: *mut MPI_Errhandler) -> c_int {
    let Some(h) = win_errhandler(w) else { return errors::raise_default(MPI_ERR_WIN, "MPI_Win_get_errhandler") };
    // SAFETY: `eh` is the caller's out-pointer, null or valid for a write (MPI's contract of this call).
    unsafe { put(eh, conv::errhandler_abi(h)) };
    MPI_SUCCESS
}
pub unsafe fn MPI_Win_call_errhandler(win: MPI_Win, errorcode: c_int) -> c_int {
    if win_errhandler(win).is_none() {
        return errors::raise_default(MPI_ERR_WIN, "MPI_Win_call_errhandler");
    }
    errors::raise_win(win, errorcode, "MPI_Win_call_errhandler");
    MPI_SUCCESS
}

pub unsafe fn MPI_File_set_errhandler(file: MPI_File, eh: MPI_Errhandler) -> c_int {
    if !valid(eh) {
        return errors::raise_file(file, MPI_ERR_ARG, "MPI_File_set_errhandler");
    }
    let v = conv::vfile(file);
    if v == VFile::NULL {
        FILE_NULL_EH.store(eh, Ordering::Release);
        return MPI_SUCCESS;
    }
    match kinds::file::with(v, |f| f.errhandler = conv::verrhandler(eh)) {
        Some(()) => MPI_SUCCESS,
        None => errors::raise_file(MPI_FILE_NULL, MPI_ERR_FILE, "MPI_File_set_errhandler"),
    }
}
pub unsafe fn MPI_File_get_errhandler(file: MPI_File, eh: *mut MPI_Errhandler) -> c_int {
    let v = conv::vfile(file);
    if v == VFile::NULL {
        // SAFETY: `eh` is the caller's out-pointer, null or valid for a write (MPI's contract of this call).
        unsafe { put(eh, file_null_errhandler()) };
        return MPI_SUCCESS;
    }
    match kinds::file::with(v, |f| conv::errhandler_abi(f.errhandler)) {
        Some(h) => {
            // SAFETY: `eh` is the caller's out-pointer, null or valid for a write (MPI's contract of this
            // call).
            unsafe { put(eh, h) };
            MPI_SUCCESS
        }
        None => errors::raise_file(MPI_FILE_NULL, MPI_ERR_FILE, "MPI_File_get_errhandler"),
    }
}
pub unsafe fn MPI_File_call_errhandler(file: MPI_File, errorcode: c_int) -> c_int {
    errors::raise_file(file, errorcode, "MPI_File_call_errhandler");
    MPI_SUCCESS
}

pub unsafe fn MPI_Session_set_errhandler(session: MPI_Session, eh: MPI_Errhandler) -> c_int {
    match conv::vsession(session).index().filter(|&i| OBJ.sessions.real(i).is_some()) {
        Some(i) if valid(eh) => {
            OBJ.sessions.with(i, |s| s.errhandler = conv::verrhandler(eh));
            MPI_SUCCESS
        }
        Some(_) => errors::raise_session(session, MPI_ERR_ARG, "MPI_Session_set_errhandler"),
        None => errors::raise_default(MPI_ERR_SESSION, "MPI_Session_set_errhandler"),
    }
}
pub unsafe fn MPI_Session_get_errhandler(session: MPI_Session, eh: *mut MPI_Errhandler) -> c_int {
    match conv::vsession(session).index().and_then(|i| OBJ.sessions.with(i, |s| conv::errhandler_abi(s.errhandler))) {
        Some(h) => {
            // SAFETY: `eh` is the caller's out-pointer, null or valid for a write (MPI's contract of this
            // call).
            unsafe { put(eh, h) };
            MPI_SUCCESS
        }
        None => errors::raise_default(MPI_ERR_SESSION, "MPI_Session_get_errhandler"),
    }
}
pub unsafe fn MPI_Session_call_errhandler(session: MPI_Session, errorcode: c_int) -> c_int {
    errors::raise_session(session, errorcode, "MPI_Session_call_errhandler");
    MPI_SUCCESS
}
