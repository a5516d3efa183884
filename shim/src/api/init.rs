//! Start and end of MPI: the lower half is initialised with at least MPI_THREAD_SERIALIZED so
//! the agent thread may drive it while the program's threads wait at the gate.

use crate::abi::*;
use crate::api::comm::register_world_and_self;
use crate::{conv, gate, lower};

use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicI32, Ordering};

/// The thread level the program was told it got.
static PROVIDED: AtomicI32 = AtomicI32::new(MPI_THREAD_SINGLE);

pub unsafe fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    let mut provided = 0;
    unsafe { init(argc, argv, MPI_THREAD_SINGLE, &mut provided, "MPI_Init") }
}

pub unsafe fn MPI_Init_thread(argc: *mut c_int, argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int) -> c_int {
    let mut got = 0;
    let rc = unsafe { init(argc, argv, required, &mut got, "MPI_Init_thread") };
    if rc == MPI_SUCCESS {
        unsafe { crate::api::put(provided, got) };
    }
    rc
}

/// Where the program stands: before MPI_Init, between, or after MPI_Finalize. The shim
/// answers MPI_Initialized/MPI_Finalized itself: with the `sessions` strategy the real
/// library's world model is never initialised.
static STAGE: AtomicI32 = AtomicI32::new(0);
const INITIALIZED: c_int = 1;
const FINALIZED: c_int = 2;

unsafe fn init(argc: *mut c_int, argv: *mut *mut *mut c_char, required: c_int, provided: &mut c_int, name: &str) -> c_int {
    let g = gate::enter();
    if STAGE.load(Ordering::Acquire) != 0 {
        // A second MPI_Init: the real library gives the native error.
        let rc = real!(MPI_Init_thread(argc, argv, required, provided));
        drop(g);
        return crate::errors::raise_default(if rc == MPI_SUCCESS { MPI_ERR_OTHER } else { rc }, name);
    }
    let level = required.max(MPI_THREAD_SERIALIZED).min(MPI_THREAD_MULTIPLE);
    let (world, selfc, real_provided) = match crate::renew::init_lower(argc, argv, level) {
        Ok(x) => x,
        Err(rc) => {
            drop(g);
            return crate::errors::raise_default(rc, name);
        }
    };
    // A program asking for less than the library gives is told what a native run would say.
    *provided = required.clamp(MPI_THREAD_SINGLE, real_provided.max(MPI_THREAD_SINGLE));
    PROVIDED.store(*provided, Ordering::Release);
    MAIN_THREAD.store(thread_id(), Ordering::Release);
    let rc = register_world_and_self(world, selfc);
    STAGE.store(INITIALIZED, Ordering::Release);
    drop(g);
    if rc != MPI_SUCCESS {
        return crate::errors::raise_default(rc, name);
    }
    crate::agent::start_if_supervised();
    MPI_SUCCESS
}

/// Has the program called MPI_Finalize?
pub fn program_finalized() -> bool {
    STAGE.load(Ordering::Acquire) == FINALIZED
}

static MAIN_THREAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

/// Sets MPI_ERRORS_RETURN on the real predefined communicators: the shim applies the program's
/// error handlers itself.
pub fn errors_return_on(real_comm: c_int) {
    if let Some(f) = lower::fns().MPI_Comm_set_errhandler {
        // SAFETY: a live real communicator and a predefined error handler.
        unsafe { f(real_comm, MPI_ERRORS_RETURN) };
    }
}

pub unsafe fn MPI_Finalize() -> c_int {
    // Inside the gate: a checkpoint in progress finishes first, none starts afterwards.
    {
        let _g = gate::enter();
        crate::agent::stop();
    }
    crate::errors::flush_program_stdio();
    if STAGE.load(Ordering::Acquire) != INITIALIZED {
        let _g = gate::enter();
        let rc = real!(MPI_Finalize());
        return crate::errors::raise_default(if rc == MPI_SUCCESS { MPI_ERR_OTHER } else { rc }, "MPI_Finalize");
    }
    crate::api::attr::delete_self_attrs_at_finalize();
    let g = gate::enter();
    let rc = crate::renew::finalize_lower();
    STAGE.store(FINALIZED, Ordering::Release);
    drop(g);
    if rc != MPI_SUCCESS {
        return crate::errors::raise_default(rc, "MPI_Finalize");
    }
    rc
}

pub unsafe fn MPI_Initialized(flag: *mut c_int) -> c_int {
    unsafe { crate::api::put(flag, (STAGE.load(Ordering::Acquire) != 0) as c_int) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Finalized(flag: *mut c_int) -> c_int {
    unsafe { crate::api::put(flag, (STAGE.load(Ordering::Acquire) == FINALIZED) as c_int) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    if STAGE.load(Ordering::Acquire) != INITIALIZED {
        let _g = gate::enter();
        return real!(MPI_Query_thread(provided));
    }
    unsafe { crate::api::put(provided, PROVIDED.load(Ordering::Acquire)) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    if STAGE.load(Ordering::Acquire) != INITIALIZED {
        let _g = gate::enter();
        return real!(MPI_Is_thread_main(flag));
    }
    unsafe { crate::api::put(flag, (MAIN_THREAD.load(Ordering::Acquire) == thread_id()) as c_int) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Abort(comm: MPI_Comm, errorcode: c_int) -> c_int {
    crate::errors::flush_program_stdio();
    let _g = gate::enter();
    let c = conv::comm(comm);
    real!(MPI_Abort(c, errorcode))
}
