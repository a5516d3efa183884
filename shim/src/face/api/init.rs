//! Start and end of MPI: the lower half is initialised with at least MPI_THREAD_SERIALIZED so
//! the agent thread may drive it while the program's threads wait at the gate.

use crate::core::gate;
use crate::core::renew::{FINALIZED, INITIALIZED, STAGE};
use crate::face::abi::*;
use crate::face::api::comm::register_world_and_self;
use crate::face::conv;

use crate::core::state::OBJ;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicI32, Ordering};

/// The thread level the program was told it got.
static PROVIDED: AtomicI32 = AtomicI32::new(MPI_THREAD_SINGLE);

pub unsafe fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    let mut provided = 0;
    // SAFETY: `argc`/`argv` are the program's, passed through as MPI_Init allows (null or valid); `provided`
    // is a local.
    unsafe { init(argc, argv, MPI_THREAD_SINGLE, &mut provided, "MPI_Init") }
}

pub unsafe fn MPI_Init_thread(argc: *mut c_int, argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int) -> c_int {
    let mut got = 0;
    // SAFETY: `argc`/`argv` are the program's, passed through as MPI_Init_thread allows (null or valid);
    // `got` is a local.
    let rc = unsafe { init(argc, argv, required, &mut got, "MPI_Init_thread") };
    if rc == MPI_SUCCESS {
        // SAFETY: `provided` is the caller's out-pointer, null or valid for a write.
        unsafe { crate::face::api::put(provided, got) };
    }
    rc
}

unsafe fn init(argc: *mut c_int, argv: *mut *mut *mut c_char, required: c_int, provided: &mut c_int, name: &str) -> c_int {
    let g = gate::enter();
    if STAGE.load(Ordering::Acquire) != 0 {
        // A second MPI_Init: the real library gives the native error.
        let rc = real!(MPI_Init_thread(argc, argv, required, provided));
        drop(g);
        return crate::face::errors::raise_default(if rc == MPI_SUCCESS { MPI_ERR_OTHER } else { rc }, name);
    }
    let level = required.clamp(MPI_THREAD_SERIALIZED, MPI_THREAD_MULTIPLE);
    if let Some(dir) = crate::core::app::take_restore_dir() {
        // The restored user ops' trampolines name datatypes as this face does.
        crate::core::kinds::op::set_program_datatype(crate::face::conv::datatype_abi);
        // SAFETY: as below.
        let provided_now = unsafe { restore_app(&dir, argc, argv, level) };
        *provided = required.clamp(MPI_THREAD_SINGLE, provided_now.max(MPI_THREAD_SINGLE));
        PROVIDED.store(*provided, Ordering::Release);
        MAIN_THREAD.store(thread_id(), Ordering::Release);
        STAGE.store(INITIALIZED, Ordering::Release);
        LOWER_UP.store(true, Ordering::Release);
        drop(g);
        crate::core::agent::start_after_restart(mpicr_proto::Timings { phases_us: vec![] });
        return MPI_SUCCESS;
    }
    let brought_up = !LOWER_UP.load(Ordering::Acquire);
    if brought_up {
        // SAFETY: the program's argc/argv, as its MPI_Init call passed them.
        if let Err(rc) = unsafe { bring_up_lower(argc, argv, level) } {
            drop(g);
            return crate::face::errors::raise_default(rc, name);
        }
    }
    // A program asking for less than the library gives is told what a native run would say.
    *provided = required.clamp(MPI_THREAD_SINGLE, REAL_PROVIDED.load(Ordering::Acquire).max(MPI_THREAD_SINGLE));
    PROVIDED.store(*provided, Ordering::Release);
    MAIN_THREAD.store(thread_id(), Ordering::Release);
    STAGE.store(INITIALIZED, Ordering::Release);
    drop(g);
    if brought_up {
        crate::core::agent::start_if_supervised();
    }
    MPI_SUCCESS
}

use crate::core::state::LOWER_UP;
/// The thread level the lower half provided.
static REAL_PROVIDED: AtomicI32 = AtomicI32::new(MPI_THREAD_SINGLE);

pub use crate::core::state::lower_up;

/// Initialises the lower half and registers the world and self communicators. Called inside
/// the gate; the caller starts the agent once out of it.
///
/// # Safety
/// `argc` and `argv` are null or the program's, as MPI_Init_thread requires.
pub unsafe fn bring_up_lower(argc: *mut c_int, argv: *mut *mut *mut c_char, level: c_int) -> Result<(), c_int> {
    // SAFETY: passed through from the caller's contract.
    let args = unsafe { crate::lower::calls::init::ProgramArgs::new(argc, argv) };
    let (world, selfc, real_provided) = crate::core::renew::init_lower(args, level)?;
    REAL_PROVIDED.store(real_provided, Ordering::Release);
    let rc = register_world_and_self(world, selfc);
    LOWER_UP.store(true, Ordering::Release);
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    Ok(())
}

/// Ends the lower half once the program holds neither the world model nor a session: the
/// agent stops (counted as a collective on the world, as MPI_Finalize) and the library is
/// finalized. `name`: the program's call, for its errors.
pub fn end_lower_if_unused(name: &str) -> c_int {
    if !LOWER_UP.load(Ordering::Acquire) || STAGE.load(Ordering::Acquire) == INITIALIZED || !OBJ.sessions.is_empty() {
        return MPI_SUCCESS;
    }
    // An app-mode rank past its last safe point: a checkpoint waiting for one stops waiting.
    crate::core::app::finishing();
    {
        let (_g, _) = crate::face::api::coll::begin_collective(MPI_COMM_WORLD);
        crate::core::agent::stop();
    }
    crate::face::errors::flush_program_stdio();
    let g = gate::enter();
    let rc = crate::core::renew::finalize_lower();
    LOWER_UP.store(false, Ordering::Release);
    drop(g);
    if rc != MPI_SUCCESS {
        return crate::face::errors::raise_default(rc, name);
    }
    MPI_SUCCESS
}

/// `MPI_Init` of a restarted app-mode process (`core::app`): a failure ends it with its
/// message, which the keeper hears first (the restart stops there).
unsafe fn restore_app(dir: &str, argc: *mut c_int, argv: *mut *mut *mut c_char, level: c_int) -> c_int {
    // SAFETY: the program's argc/argv, passed through.
    let args = unsafe { crate::lower::calls::init::ProgramArgs::new(argc, argv) };
    match crate::core::app::restore_at_init(dir, args, level) {
        Ok(p) => p,
        Err(e) => {
            let e = e.to_string();
            crate::core::agent::report_failure(&e);
            crate::lower::fatal(&e)
        }
    }
}

static MAIN_THREAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

pub unsafe fn MPI_Finalize() -> c_int {
    // As the library's finalize would (it detaches the buffer), buffered messages go out first.
    if STAGE.load(Ordering::Acquire) == INITIALIZED {
        if let Err(rc) = crate::face::api::misc::wait_buffered_sends() {
            return crate::face::errors::raise_default(rc, "MPI_Finalize");
        }
    }
    if STAGE.load(Ordering::Acquire) != INITIALIZED {
        crate::face::errors::flush_program_stdio();
        let _g = gate::enter();
        let rc = real!(MPI_Finalize());
        return crate::face::errors::raise_default(if rc == MPI_SUCCESS { MPI_ERR_OTHER } else { rc }, "MPI_Finalize");
    }
    crate::face::api::attr::delete_self_attrs_at_finalize();
    if !OBJ.sessions.is_empty() {
        // Sessions stay open (MPI-4 allows it): the lower half and the agent go on, and end
        // with the last session (`end_lower_if_unused`). Counted as a collective on the world
        // all the same, as the library's finalize is one.
        let (_g, _) = crate::face::api::coll::begin_collective(MPI_COMM_WORLD);
        STAGE.store(FINALIZED, Ordering::Release);
        return MPI_SUCCESS;
    }
    // Inside the gate: a checkpoint in progress finishes first, none starts afterwards. Counted
    // as a collective on MPI_COMM_WORLD (the library's finalize is one): while a checkpoint
    // aligns, a rank past the cut waits here, outside the gate, and one that gets in makes the
    // checkpoint give up instead of waiting for it to leave the library.
    STAGE.store(FINALIZED, Ordering::Release);
    end_lower_if_unused("MPI_Finalize")
}

pub unsafe fn MPI_Initialized(flag: *mut c_int) -> c_int {
    // SAFETY: `flag` is the caller's out-pointer, null or valid for a write.
    unsafe { crate::face::api::put(flag, (STAGE.load(Ordering::Acquire) != 0) as c_int) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Finalized(flag: *mut c_int) -> c_int {
    // SAFETY: `flag` is the caller's out-pointer, null or valid for a write.
    unsafe { crate::face::api::put(flag, (STAGE.load(Ordering::Acquire) == FINALIZED) as c_int) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    if STAGE.load(Ordering::Acquire) != INITIALIZED {
        let _g = gate::enter();
        return real!(MPI_Query_thread(provided));
    }
    // SAFETY: `provided` is the caller's out-pointer, null or valid for a write.
    unsafe { crate::face::api::put(provided, PROVIDED.load(Ordering::Acquire)) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    if STAGE.load(Ordering::Acquire) != INITIALIZED {
        let _g = gate::enter();
        return real!(MPI_Is_thread_main(flag));
    }
    // SAFETY: `flag` is the caller's out-pointer, null or valid for a write.
    unsafe { crate::face::api::put(flag, (MAIN_THREAD.load(Ordering::Acquire) == thread_id()) as c_int) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Abort(comm: MPI_Comm, errorcode: c_int) -> c_int {
    crate::face::errors::flush_program_stdio();
    let _g = gate::enter();
    let c = conv::comm(comm);
    real!(MPI_Abort(c, errorcode))
}
