//! The program's own MPI sessions (MPI-4), virtualised; the recipe (the info's entries) is
//! recorded here, the renewal is `core::kinds::session`'s.

use crate::core::gate;
use crate::core::kinds::session::SessionEntry;
use crate::face::abi::*;
use crate::face::api::put;
use crate::face::{conv, errors};
use crate::lower::handles::RealSession;
use std::os::raw::c_int;

pub unsafe fn MPI_Session_init(info: MPI_Info, errhandler: MPI_Errhandler, session: *mut MPI_Session) -> c_int {
    let g = gate::enter();
    let real_info = conv::info(info);
    // The first session of a program that has not called MPI_Init brings up the lower half's
    // world model: the agent and the renewal need it (`init::bring_up_lower`). Not after the
    // program's MPI_Finalize ended it (a library cannot be initialised again): such a session
    // is the library's alone, and checkpoints stay over (the agent stopped at MPI_Finalize).
    let brought_up =
        !crate::face::api::init::lower_up() && crate::core::renew::STAGE.load(std::sync::atomic::Ordering::Acquire) == 0 && !crate::core::app::enabled();
    if brought_up {
        let level = session_thread_level(real_info).max(MPI_THREAD_SERIALIZED);
        // SAFETY: null argc/argv are allowed.
        if let Err(rc) = unsafe { crate::face::api::init::bring_up_lower(std::ptr::null_mut(), std::ptr::null_mut(), level) } {
            drop(g);
            return errors::raise_default(rc, "MPI_Session_init");
        }
    }
    let mut r = MPI_SESSION_NULL;
    let rc = real!(MPI_Session_init(real_info, MPI_ERRORS_RETURN, &mut r));
    let recipe = if rc == MPI_SUCCESS { crate::core::kinds::info::entries(real_info) } else { Vec::new() };
    drop(g);
    if brought_up {
        crate::core::agent::start_if_supervised();
    }
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Session_init");
    }
    match crate::core::kinds::session::register(RealSession(r), SessionEntry { errhandler: conv::verrhandler(errhandler), info: recipe, buffer: None }) {
        Ok(v) => {
            // SAFETY: `session` is the program's output argument of MPI_Session_init.
            unsafe { put(session, conv::session_abi(v)) };
            MPI_SUCCESS
        }
        Err(_) => errors::fatal("too many live sessions"),
    }
}

pub unsafe fn MPI_Session_finalize(session: *mut MPI_Session) -> c_int {
    if session.is_null() {
        return errors::raise_default(MPI_ERR_ARG, "MPI_Session_finalize");
    }
    // SAFETY: `session` is not null (checked above) and points to the program's handle.
    let v = unsafe { *session };
    let g = gate::enter();
    let mut r = conv::session(v);
    let rc = real!(MPI_Session_finalize(&mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_session(v, rc, "MPI_Session_finalize");
    }
    crate::core::kinds::session::forget(conv::vsession(v));
    // SAFETY: as above, `session` is the program's valid, non-null handle pointer.
    unsafe { *session = MPI_SESSION_NULL };
    // The last session of a program outside the world model ends the lower half.
    crate::face::api::init::end_lower_if_unused("MPI_Session_finalize")
}

/// The thread level a session asks for in its info (`thread_level`, MPI-4), at least serialized
/// once raised by the caller (funneled and single alike).
fn session_thread_level(real_info: MPI_Info) -> c_int {
    let level = crate::core::kinds::info::entries(real_info).into_iter().find(|(k, _)| k == "thread_level").map(|(_, v)| v);
    match level.as_deref() {
        Some("MPI_THREAD_MULTIPLE") => MPI_THREAD_MULTIPLE,
        Some("MPI_THREAD_SERIALIZED") => MPI_THREAD_SERIALIZED,
        _ => MPI_THREAD_SINGLE,
    }
}
