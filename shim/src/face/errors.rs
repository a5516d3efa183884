//! Error reporting. Real objects always carry MPI_ERRORS_RETURN; the program's error handlers
//! live in the shim and are applied here when a call fails, so user handlers see virtual
//! handles and a fatal error prints a readable message naming the MPI function.

use crate::core::kinds::errhandler;
use crate::core::state::{OBJ, WORLD_INDEX};
use crate::face::abi::*;
use crate::face::conv;
use crate::lower;
pub use crate::lower::{error_string, fatal};
use mpicr_virtid::{ErrhandlerRecipe, VErrhandler};
use std::os::raw::c_int;

type CommErrFn = unsafe extern "C" fn(*mut MPI_Comm, *mut c_int);
type FileErrFn = unsafe extern "C" fn(*mut MPI_File, *mut c_int);

/// The real library lacks a function the program called.
#[cold]
pub fn missing(name: &str) -> c_int {
    let lib = lower::current().path.display().to_string();
    // Under Open MPI, a function may be in the library and not adapted to its ABI yet.
    let what = match lower::ompi::not_adapted(name).filter(|_| lower::current().is_open_mpi()) {
        Some(why) => format!("{name} (not adapted to Open MPI underneath yet: {why}; {lib})"),
        None => format!("{name} (not provided by {lib})"),
    };
    raise_default(MPI_ERR_UNSUPPORTED_OPERATION, &what)
}

thread_local! {
    /// A function the real library lacks, noted by `real!` inside the gate and raised by the
    /// next `raise_*` (or the export's panic boundary) once the gate is left.
    static MISSING: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// Notes that the real library lacks `name`; see [`MISSING`].
#[cold]
pub fn note_missing(name: &'static str) {
    MISSING.with(|m| m.set(Some(name)));
}

/// Raises a noted missing function, if any: `Some(rc)` of that raise.
#[inline(always)]
fn raise_noted() -> Option<c_int> {
    // The common case only reads the thread-local.
    MISSING.with(|m| m.get())?;
    MISSING.with(|m| m.take()).map(missing)
}

/// The end of an export returning an error code: a missing function noted on the way is
/// raised now (the wrapper has returned, so the gate is left), replacing `rc`.
#[inline(always)]
pub fn settle(rc: c_int) -> c_int {
    raise_noted().unwrap_or(rc)
}

/// The end of an export returning something else: raises a noted missing function.
#[inline(always)]
pub fn settle_other() {
    let _ = raise_noted();
}

/// A function mpicr does not support.
#[cold]
pub fn unsupported(name: &str, reason: &str) -> c_int {
    let what = if reason.is_empty() { format!("{name} is not supported by mpicr") } else { format!("{name} is not supported by mpicr: {reason}") };
    eprintln!("mpicr: {what}");
    raise_default(MPI_ERR_UNSUPPORTED_OPERATION, name)
}

/// Applies the error handler of communicator `comm` (MPI_COMM_WORLD's if `comm` is not valid).
#[cold]
pub fn raise_comm(comm: MPI_Comm, rc: c_int, func: &str) -> c_int {
    if let Some(rc) = raise_noted() {
        return rc;
    }
    let (idx, handle) = match conv::comm_index(comm).filter(|&i| OBJ.comms.real(i).is_some()) {
        Some(i) => (i, comm),
        None => (WORLD_INDEX, MPI_COMM_WORLD),
    };
    let eh = OBJ.comms.with(idx, |c| c.errhandler).unwrap_or(VErrhandler::ERRORS_ARE_FATAL);
    dispatch(eh, rc, func, |f| {
        let mut h = handle;
        let mut code = rc;
        // SAFETY: a user function registered with MPI_Comm_create_errhandler (C ABI).
        unsafe { std::mem::transmute::<u64, CommErrFn>(f)(&mut h, &mut code) };
    })
}

/// Applies the error handler of window `win`.
#[cold]
pub fn raise_win(win: MPI_Win, rc: c_int, func: &str) -> c_int {
    if let Some(rc) = raise_noted() {
        return rc;
    }
    let eh = crate::core::kinds::win::with(conv::vwin(win), |w| w.errhandler);
    raise_int_object(win, eh, rc, func)
}

/// Applies the error handler of session `session`.
#[cold]
pub fn raise_session(session: MPI_Session, rc: c_int, func: &str) -> c_int {
    if let Some(rc) = raise_noted() {
        return rc;
    }
    let eh = conv::vsession(session).index().filter(|&i| OBJ.sessions.real(i).is_some()).and_then(|i| OBJ.sessions.with(i, |s| s.errhandler));
    raise_int_object(session, eh, rc, func)
}

/// Windows and sessions: int handles whose user handlers share the communicator signature.
fn raise_int_object(handle: c_int, eh: Option<VErrhandler>, rc: c_int, func: &str) -> c_int {
    let Some(eh) = eh else { return raise_default(rc, func) };
    dispatch(eh, rc, func, |f| {
        let mut h = handle;
        let mut code = rc;
        // SAFETY: a user function registered with MPI_{Win,Session}_create_errhandler (C ABI).
        unsafe { std::mem::transmute::<u64, CommErrFn>(f)(&mut h, &mut code) };
    })
}

/// Applies the error handler of file `file` (MPI_FILE_NULL's for an invalid file).
#[cold]
pub fn raise_file(file: MPI_File, rc: c_int, func: &str) -> c_int {
    if let Some(rc) = raise_noted() {
        return rc;
    }
    let eh = match crate::core::kinds::file::with(conv::vfile(file), |f| f.errhandler) {
        Some(eh) => eh,
        None => conv::verrhandler(crate::face::api::file_null_errhandler()),
    };
    dispatch(eh, rc, func, |f| {
        let mut h = file;
        let mut code = rc;
        // SAFETY: a user function registered with MPI_File_create_errhandler (C ABI).
        unsafe { std::mem::transmute::<u64, FileErrFn>(f)(&mut h, &mut code) };
    })
}

/// Errors not tied to a communicator, window, file or session go to MPI_COMM_WORLD's handler.
#[cold]
pub fn raise_default(rc: c_int, func: &str) -> c_int {
    raise_comm(MPI_COMM_WORLD, rc, func)
}

fn dispatch(eh: VErrhandler, rc: c_int, func: &str, call_user: impl FnOnce(u64)) -> c_int {
    match eh {
        VErrhandler::ERRORS_RETURN => rc,
        VErrhandler::ERRORS_ARE_FATAL | VErrhandler::ERRORS_ABORT => abort_with(rc, func),
        v => match errhandler::recipe(v) {
            Some(ErrhandlerRecipe::Comm { function })
            | Some(ErrhandlerRecipe::Win { function })
            | Some(ErrhandlerRecipe::File { function })
            | Some(ErrhandlerRecipe::Session { function }) => {
                call_user(function);
                // What the call returns after a user handler ran differs between MPICH
                // releases (4.x: the error code, 5.x: MPI_SUCCESS); match the library.
                if crate::core::renew::mpich_major() >= 5 {
                    MPI_SUCCESS
                } else {
                    rc
                }
            }
            None => abort_with(rc, func),
        },
    }
}

#[cold]
fn abort_with(rc: c_int, func: &str) -> ! {
    let func = func.strip_prefix("P").unwrap_or(func);
    flush_program_stdio();
    eprintln!("Fatal error in {func}: {} (error code {rc})", error_string(rc));
    let world = OBJ.comms.real(WORLD_INDEX);
    if let (Some(world), Some(abort)) = (world, lower::fns().MPI_Abort) {
        // SAFETY: aborting the job through the real library; does not return on success.
        unsafe { abort(world.raw(), rc) };
    }
    std::process::exit(if rc == 0 { 1 } else { rc & 0xff })
}

/// A panic inside the shim: reported once per call as MPI_ERR_INTERN.
#[cold]
pub fn internal_panic(func: &str) -> c_int {
    eprintln!("mpicr: internal error in {func} (a bug in mpicr; please report it)");
    raise_default(MPI_ERR_INTERN, func)
}

/// Flushes the program's stdio buffers. The real library lives in its own namespace with its
/// own libc, so its exit path would not flush what the program printed.
pub fn flush_program_stdio() {
    // SAFETY: fflush(NULL) flushes every open output stream of this (the program's) libc.
    unsafe { libc::fflush(std::ptr::null_mut()) };
}
