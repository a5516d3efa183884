//! Memory, buffers, user error classes, data representations and the ABI's data symbols.

use crate::core::bsend::{self, Pool};
use crate::core::gate;
use crate::core::kinds::library::{add_datarep, add_user_error, remove_user_error, set_attached_buffer, Datarep, Removed, UserError};
use crate::face::abi::*;
use crate::face::api::put;
use crate::face::call::{self, On};
use crate::face::{conv, errors};
use crate::lower;
use std::os::raw::{c_char, c_int, c_void};

/// Memory from MPI_Alloc_mem comes from the program's own allocator, so it stays valid across
/// lower-half renewals (the real library's allocation would not).
pub unsafe fn MPI_Alloc_mem(size: MPI_Aint, _info: MPI_Info, baseptr: *mut c_void) -> c_int {
    if size < 0 {
        return errors::raise_default(MPI_ERR_ARG, "MPI_Alloc_mem");
    }
    // SAFETY: plain allocation; a zero-byte request still returns a unique pointer.
    let p = unsafe { libc::malloc((size as usize).max(1)) };
    if p.is_null() {
        return errors::raise_default(MPI_ERR_NO_MEM, "MPI_Alloc_mem");
    }
    // SAFETY: `baseptr` is, by MPI's contract of MPI_Alloc_mem, the address of a pointer variable (null is
    // skipped).
    unsafe { put(baseptr as *mut *mut c_void, p) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Free_mem(base: *mut c_void) -> c_int {
    // SAFETY: `base` came from MPI_Alloc_mem above (or is null).
    unsafe { libc::free(base) };
    MPI_SUCCESS
}

/// Attaches or detaches the buffered-send buffer and records it for replay after renewals.
fn buffer_call(name: &str, attached: Option<(usize, i64)>, real_call: impl FnOnce() -> c_int) -> c_int {
    if let Err(rc) = call::try_run(name, On::Default, || call::ok(real_call())) {
        return rc;
    }
    set_attached_buffer(attached);
    MPI_SUCCESS
}

pub unsafe fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    buffer_call("MPI_Buffer_attach", Some((buffer as usize, size as i64)), || real!(MPI_Buffer_attach(buffer, size)))
}

pub unsafe fn MPI_Buffer_attach_c(buffer: *mut c_void, size: MPI_Count) -> c_int {
    buffer_call("MPI_Buffer_attach_c", Some((buffer as usize, size)), || real!(MPI_Buffer_attach_c(buffer, size)))
}

/// Waits, outside the gate, until every buffered message is sent (see `core::bsend`): the
/// library's detach would wait inside it, where a checkpoint cannot stop it.
pub fn wait_buffered_sends() -> Result<(), c_int> {
    wait_sends(bsend::in_flight)
}

/// As [`wait_buffered_sends`], for the messages charged to one buffer.
pub fn wait_pool(pool: Pool) -> Result<(), c_int> {
    wait_sends(|| bsend::in_flight_of(pool))
}

fn wait_sends(in_flight: impl Fn() -> Result<usize, c_int>) -> Result<(), c_int> {
    let mut idle_rounds = 0u32;
    loop {
        let g = gate::enter();
        let left = in_flight();
        drop(g);
        if left? == 0 {
            return Ok(());
        }
        idle_rounds = idle_rounds.saturating_add(1);
        if idle_rounds < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// Detaches once every buffered message is sent (waited for outside the gate).
fn detach_call(name: &str, real_call: impl FnOnce() -> c_int) -> c_int {
    if let Err(rc) = wait_pool(Pool::Process) {
        return errors::raise_default(rc, name);
    }
    buffer_call(name, None, real_call)
}

pub unsafe fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    detach_call("MPI_Buffer_detach", || real!(MPI_Buffer_detach(buffer_addr, size)))
}

pub unsafe fn MPI_Buffer_detach_c(buffer_addr: *mut c_void, size: *mut MPI_Count) -> c_int {
    detach_call("MPI_Buffer_detach_c", || real!(MPI_Buffer_detach_c(buffer_addr, size)))
}

pub unsafe fn MPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    if let Err(rc) = call::try_run("MPI_Add_error_class", On::Default, || call::ok(real!(MPI_Add_error_class(errorclass)))) {
        return rc;
    }
    // SAFETY: the library wrote the new class there (MPI's contract of this call).
    add_user_error(UserError::Class { value: unsafe { *errorclass } });
    MPI_SUCCESS
}

pub unsafe fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    if let Err(rc) = call::try_run("MPI_Add_error_code", On::Default, || call::ok(real!(MPI_Add_error_code(errorclass, errorcode)))) {
        return rc;
    }
    // SAFETY: as above.
    add_user_error(UserError::Code { class: errorclass, value: unsafe { *errorcode } });
    MPI_SUCCESS
}

pub unsafe fn MPI_Add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
    if let Err(rc) = call::try_run("MPI_Add_error_string", On::Default, || call::ok(real!(MPI_Add_error_string(errorcode, string)))) {
        return rc;
    }
    // SAFETY: `string` is null (read as empty) or the program's NUL-terminated string (MPI's contract); the
    // real call above accepted it.
    add_user_error(UserError::String { code: errorcode, text: unsafe { crate::face::api::cstr(string) } });
    MPI_SUCCESS
}

type RemoveFn = unsafe extern "C" fn(c_int) -> c_int;

/// Removes a user error class, code or string: with the library's MPI 4.1 function, or
/// MPICH 4.0's `MPIX_Delete_error_*` where it has only that (`mpix`), and forgets it so that no
/// renewal makes it again.
fn remove_error(name: &'static str, mpi41: Option<RemoveFn>, mpix: &str, value: c_int, removed: Removed) -> c_int {
    if let Err(rc) = call::try_run(name, On::Default, || {
        let f = match mpi41 {
            Some(f) => f,
            None => {
                let p = lower::current().data(mpix);
                if p.is_null() {
                    return call::missing(name);
                }
                // SAFETY: MPICH 4.0's MPIX_Delete_error_{class,code,string}(int) -> int.
                unsafe { std::mem::transmute::<*mut c_void, RemoveFn>(p) }
            }
        };
        // SAFETY: the real library's function of that signature; `value` is a plain integer.
        call::ok(unsafe { f(value) })
    }) {
        return rc;
    }
    remove_user_error(removed);
    MPI_SUCCESS
}

pub unsafe fn MPI_Remove_error_class(errorclass: c_int) -> c_int {
    let f = lower::fns().MPI_Remove_error_class;
    remove_error("MPI_Remove_error_class", f, "MPIX_Delete_error_class", errorclass, Removed::Class(errorclass))
}

pub unsafe fn MPI_Remove_error_code(errorcode: c_int) -> c_int {
    let f = lower::fns().MPI_Remove_error_code;
    remove_error("MPI_Remove_error_code", f, "MPIX_Delete_error_code", errorcode, Removed::Code(errorcode))
}

pub unsafe fn MPI_Remove_error_string(errorcode: c_int) -> c_int {
    let f = lower::fns().MPI_Remove_error_string;
    remove_error("MPI_Remove_error_string", f, "MPIX_Delete_error_string", errorcode, Removed::String(errorcode))
}

/// Data representations: the conversion callbacks go to the library as they are (they see only
/// buffers, counts and datatypes of the file view) and are recorded, so that every renewal
/// registers them again (`core::kinds::library`). Failures go to MPI_FILE_NULL's handler, as
/// ROMIO raises them.
fn register_datarep(name: &str, datarep: *const c_char, fns: [*mut c_void; 4], large: bool, real_call: impl FnOnce() -> c_int) -> c_int {
    if let Err(rc) = call::try_run(name, On::File(MPI_FILE_NULL), || call::ok(real_call())) {
        return rc;
    }
    let [read, write, extent, extra] = fns.map(|p| p as usize);
    // SAFETY: the library accepted `datarep`, a NUL-terminated string (MPI's contract).
    let name = unsafe { crate::face::api::cstr(datarep) };
    add_datarep(Datarep { name, read, write, extent, extra, large });
    MPI_SUCCESS
}

pub unsafe fn MPI_Register_datarep(datarep: *const c_char, r: *mut c_void, w: *mut c_void, e: *mut c_void, extra: *mut c_void) -> c_int {
    register_datarep("MPI_Register_datarep", datarep, [r, w, e, extra], false, || real!(MPI_Register_datarep(datarep, r, w, e, extra)))
}

pub unsafe fn MPI_Register_datarep_c(datarep: *const c_char, r: *mut c_void, w: *mut c_void, e: *mut c_void, extra: *mut c_void) -> c_int {
    register_datarep("MPI_Register_datarep_c", datarep, [r, w, e, extra], true, || real!(MPI_Register_datarep_c(datarep, r, w, e, extra)))
}

// The MPICH ABI's data symbols. Programs compare against these addresses, so the shim owns
// them and swaps in the real library's values where they are passed down.
static mut UNWEIGHTED_DUMMY: c_int = 0;
static mut WEIGHTS_EMPTY_DUMMY: c_int = 0;
static mut F_STATUS_IGNORE_DUMMY: [c_int; 6] = [0; 6];
static mut F_STATUSES_IGNORE_DUMMY: [c_int; 6] = [0; 6];
static mut F08_STATUS_IGNORE_DUMMY: [c_int; 6] = [0; 6];
static mut F08_STATUSES_IGNORE_DUMMY: [c_int; 6] = [0; 6];

#[no_mangle]
pub static mut MPI_UNWEIGHTED: *mut c_int = &raw mut UNWEIGHTED_DUMMY;
#[no_mangle]
pub static mut MPI_WEIGHTS_EMPTY: *mut c_int = &raw mut WEIGHTS_EMPTY_DUMMY;
#[no_mangle]
pub static mut MPI_F_STATUS_IGNORE: *mut c_int = &raw mut F_STATUS_IGNORE_DUMMY as *mut c_int;
#[no_mangle]
pub static mut MPI_F_STATUSES_IGNORE: *mut c_int = &raw mut F_STATUSES_IGNORE_DUMMY as *mut c_int;
#[no_mangle]
pub static mut MPI_F08_STATUS_IGNORE: *mut c_int = &raw mut F08_STATUS_IGNORE_DUMMY as *mut c_int;
#[no_mangle]
pub static mut MPI_F08_STATUSES_IGNORE: *mut c_int = &raw mut F08_STATUSES_IGNORE_DUMMY as *mut c_int;
static mut PVAR_ALL_HANDLES_DUMMY: c_int = 0;
/// A distinct address of the shim's (MPICH's value is its own), swapped for the real library's
/// value by the calls that accept it ([`pvar_handle`]).
#[no_mangle]
pub static mut MPI_T_PVAR_ALL_HANDLES: *mut c_void = &raw mut PVAR_ALL_HANDLES_DUMMY as *mut c_void;

/// A performance-variable handle on its way down: `MPI_T_PVAR_ALL_HANDLES` becomes the real
/// library's.
fn pvar_handle(h: *mut c_void) -> *mut c_void {
    // SAFETY: reading our own static's value.
    if h == unsafe { MPI_T_PVAR_ALL_HANDLES } {
        lower::real_sentinel("MPI_T_PVAR_ALL_HANDLES").cast()
    } else {
        h
    }
}

macro_rules! pvar_call {
    ($name:ident) => {
        pub unsafe fn $name(session: *mut c_void, handle: *mut c_void) -> c_int {
            let h = pvar_handle(handle);
            crate::face::call::run(stringify!($name), crate::face::call::On::Default, || {
                let Some(f) = lower::fns().$name else { return crate::face::call::missing(stringify!($name)) };
                // SAFETY: the real function of that name; the session is the caller's, the handle
                // the caller's or the real library's own MPI_T_PVAR_ALL_HANDLES.
                crate::face::call::ok(unsafe { f(session, h) })
            })
        }
    };
}

pvar_call!(MPI_T_pvar_start);
pvar_call!(MPI_T_pvar_stop);
pvar_call!(MPI_T_pvar_reset);

/// Translates a weights argument of the graph constructors.
pub fn weights_in(p: *const c_int) -> *const c_int {
    // SAFETY: reading our own statics' values.
    unsafe {
        if std::ptr::eq(p, MPI_UNWEIGHTED as *const c_int) {
            lower::real_sentinel("MPI_UNWEIGHTED")
        } else if std::ptr::eq(p, MPI_WEIGHTS_EMPTY as *const c_int) {
            lower::real_sentinel("MPI_WEIGHTS_EMPTY")
        } else {
            p
        }
    }
}

/// Program-side sentinel for a real one coming back (e.g. from MPI_Dist_graph_neighbors).
pub fn unweighted_out() -> *mut c_int {
    // SAFETY: reading our own static's value.
    unsafe { MPI_UNWEIGHTED }
}

/// Wraps the request of a buffer flush (not restorable while pending).
unsafe fn flush_request(name: &str, comm: MPI_Comm, request: *mut MPI_Request, real_call: impl FnOnce(&mut c_int) -> c_int) -> c_int {
    call::run(name, On::Comm(comm), || {
        let mut r = MPI_REQUEST_NULL;
        call::ok(real_call(&mut r))?;
        let v = crate::face::api::request::register_request(r, mpicr_virtid::RequestRecipe::Other { function: name.into() }, comm, false);
        // SAFETY: `request` is the caller's out-pointer, null or valid for a write (this
        // function's contract: MPI's of the flush calls).
        unsafe { put(request, v) };
        Ok(())
    })
}

/// Returns once every message in the process's buffer is sent (waited for outside the gate;
/// the library's buffer holds none, see `core::bsend`).
pub unsafe fn MPI_Buffer_flush() -> c_int {
    match wait_pool(Pool::Process) {
        Ok(()) => MPI_SUCCESS,
        Err(rc) => errors::raise_default(rc, "MPI_Buffer_flush"),
    }
}

pub unsafe fn MPI_Buffer_iflush(request: *mut MPI_Request) -> c_int {
    // SAFETY: `request` is the caller's out-pointer, passed through under MPI's contract of this call.
    unsafe { flush_request("MPI_Buffer_iflush", MPI_COMM_WORLD, request, |r| real!(MPI_Buffer_iflush(r))) }
}

pub unsafe fn MPI_Comm_iflush_buffer(comm: MPI_Comm, request: *mut MPI_Request) -> c_int {
    let c = conv::comm(comm);
    // SAFETY: `request` is the caller's out-pointer, passed through under MPI's contract of this call.
    unsafe { flush_request("MPI_Comm_iflush_buffer", comm, request, |r| real!(MPI_Comm_iflush_buffer(c, r))) }
}

pub unsafe fn MPI_Session_iflush_buffer(session: MPI_Session, request: *mut MPI_Request) -> c_int {
    let s = conv::session(session);
    // SAFETY: `request` is the caller's out-pointer, passed through under MPI's contract of this call.
    unsafe { flush_request("MPI_Session_iflush_buffer", MPI_COMM_WORLD, request, |r| real!(MPI_Session_iflush_buffer(s, r))) }
}

/// Returns a predefined pair type (MPI 4.1), named as the program names it.
pub unsafe fn MPI_Type_get_value_index(value_type: MPI_Datatype, index_type: MPI_Datatype, pair_type: *mut MPI_Datatype) -> c_int {
    if let Err(rc) = call::try_run("MPI_Type_get_value_index", On::Default, || {
        call::ok(real!(MPI_Type_get_value_index(conv::datatype(value_type), conv::datatype(index_type), pair_type)))
    }) {
        return rc;
    }
    if !pair_type.is_null() {
        // SAFETY: `pair_type` is the caller's out-pointer, valid for a read and a write (MPI's
        // contract of this call), which the library has just written.
        unsafe { *pair_type = conv::datatype_of_real(*pair_type) };
    }
    MPI_SUCCESS
}

/// MPI_Abi_get_version (MPI 5.0): a library without the standard ABI (MPICH 4.0.2 lacks the
/// function altogether) answers -1/-1, as MPICH 5's non-ABI build does.
pub unsafe fn MPI_Abi_get_version(major: *mut c_int, minor: *mut c_int) -> c_int {
    let Some(f) = lower::fns().MPI_Abi_get_version else {
        // SAFETY: `major` and `minor` are the caller's out-pointers, null or valid for a write.
        unsafe {
            put(major, -1);
            put(minor, -1);
        }
        return MPI_SUCCESS;
    };
    let g = gate::enter();
    // SAFETY: the program's out-pointers, passed through.
    let rc = unsafe { f(major, minor) };
    drop(g);
    check_default!(rc, "MPI_Abi_get_version");
    MPI_SUCCESS
}
