//! Buffers for buffered sends attached to a communicator or a session (MPI 4.1). mpicr keeps
//! them itself, as it sends buffered messages itself (`core::bsend`): the address and size
//! live in the object's entry, a send is charged to them, and the library never sees them, so
//! a checkpoint has nothing of them to renew and MPICH 4.0 underneath serves them too. The
//! answers are MPICH 5's: a second attach fails (`MPI_ERR_OTHER`), a negative size is
//! `MPI_ERR_ARG`, detaching none gives a null address and size 0.

use crate::core::bsend::Pool;
use crate::core::state::OBJ;
use crate::face::abi::*;
use crate::face::api::misc::wait_pool;
use crate::face::api::put;
use crate::face::call::{self, On, ToReal};
use crate::face::{conv, errors};
use std::os::raw::{c_int, c_void};

/// The buffer slot of a communicator or a session: reads and writes its entry's record.
#[derive(Clone, Copy)]
enum Slot {
    Comm(MPI_Comm),
    Session(MPI_Session),
}

impl Slot {
    fn on(self) -> On {
        match self {
            Slot::Comm(c) => On::Comm(c),
            Slot::Session(s) => On::Session(s),
        }
    }

    /// The pool the slot's sends are charged to; `Err` for an invalid handle (raised by the
    /// caller on the object's handler, as the library would).
    fn pool(self) -> Result<Pool, c_int> {
        match self {
            Slot::Comm(c) => {
                call::CheckedComm(c).to_real()?;
                conv::comm_index(c).map(Pool::Comm).ok_or(MPI_ERR_COMM)
            }
            Slot::Session(s) => {
                let i = conv::vsession(s).index().ok_or(MPI_ERR_SESSION)?;
                OBJ.sessions.with(i, |_| Pool::Session(i)).ok_or(MPI_ERR_SESSION)
            }
        }
    }

    /// Replaces the slot's record with `new`, returning what was there.
    fn swap(pool: Pool, new: Option<(usize, i64)>) -> Option<(usize, i64)> {
        match pool {
            Pool::Comm(i) => OBJ.comms.with(i, |e| std::mem::replace(&mut e.buffer, new)).flatten(),
            Pool::Session(i) => OBJ.sessions.with(i, |e| std::mem::replace(&mut e.buffer, new)).flatten(),
            Pool::Process => None,
        }
    }

    fn get(pool: Pool) -> Option<(usize, i64)> {
        match pool {
            Pool::Comm(i) => OBJ.comms.with(i, |e| e.buffer).flatten(),
            Pool::Session(i) => OBJ.sessions.with(i, |e| e.buffer).flatten(),
            Pool::Process => None,
        }
    }
}

fn attach(name: &str, slot: Slot, buffer: *mut c_void, size: i64) -> c_int {
    call::run(name, slot.on(), || {
        let pool = slot.pool()?;
        if size < 0 {
            return Err(MPI_ERR_ARG);
        }
        if Slot::get(pool).is_some() {
            return Err(MPI_ERR_OTHER);
        }
        Slot::swap(pool, Some((buffer as usize, size)));
        Ok(())
    })
}

/// Detaches once every message charged to the buffer is sent (waited for outside the gate, as
/// `MPI_Buffer_detach`). Writes the address and the size the program attached.
fn detach(name: &str, slot: Slot, buffer_addr: *mut c_void, put_size: impl FnOnce(i64)) -> c_int {
    let pool = match call::try_run(name, slot.on(), || slot.pool().map(|_| ())) {
        Ok(()) => slot.pool().unwrap_or(Pool::Process),
        Err(rc) => return rc,
    };
    if let Err(rc) = wait_pool(pool) {
        return raise(slot, rc, name);
    }
    call::run(name, slot.on(), || {
        let (addr, size) = Slot::swap(pool, None).unwrap_or((0, 0));
        let size = if crate::core::bsend::automatic(addr) { 0 } else { size };
        // SAFETY: `buffer_addr` is, by MPI's contract of the detach calls, the address of a
        // pointer variable (null is skipped).
        unsafe { put(buffer_addr as *mut *mut c_void, addr as *mut c_void) };
        put_size(size);
        Ok(())
    })
}

/// Returns once every message charged to the buffer is sent (waited for outside the gate).
fn flush(name: &str, slot: Slot) -> c_int {
    let pool = match call::try_run(name, slot.on(), || slot.pool().map(|_| ())) {
        Ok(()) => slot.pool().unwrap_or(Pool::Process),
        Err(rc) => return rc,
    };
    match wait_pool(pool) {
        Ok(()) => MPI_SUCCESS,
        Err(rc) => raise(slot, rc, name),
    }
}

fn raise(slot: Slot, rc: c_int, name: &str) -> c_int {
    match slot {
        Slot::Comm(c) => errors::raise_comm(c, rc, name),
        Slot::Session(s) => errors::raise_session(s, rc, name),
    }
}

pub unsafe fn MPI_Comm_attach_buffer(comm: MPI_Comm, buffer: *mut c_void, size: c_int) -> c_int {
    attach("MPI_Comm_attach_buffer", Slot::Comm(comm), buffer, size as i64)
}

pub unsafe fn MPI_Comm_attach_buffer_c(comm: MPI_Comm, buffer: *mut c_void, size: MPI_Count) -> c_int {
    attach("MPI_Comm_attach_buffer_c", Slot::Comm(comm), buffer, size)
}

pub unsafe fn MPI_Comm_detach_buffer(comm: MPI_Comm, buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    // SAFETY: `size` is the caller's out-pointer (MPI's contract of this call).
    detach("MPI_Comm_detach_buffer", Slot::Comm(comm), buffer_addr, |n| unsafe { put(size, n as c_int) })
}

pub unsafe fn MPI_Comm_detach_buffer_c(comm: MPI_Comm, buffer_addr: *mut c_void, size: *mut MPI_Count) -> c_int {
    // SAFETY: as above.
    detach("MPI_Comm_detach_buffer_c", Slot::Comm(comm), buffer_addr, |n| unsafe { put(size, n) })
}

pub unsafe fn MPI_Comm_flush_buffer(comm: MPI_Comm) -> c_int {
    flush("MPI_Comm_flush_buffer", Slot::Comm(comm))
}

pub unsafe fn MPI_Session_attach_buffer(session: MPI_Session, buffer: *mut c_void, size: c_int) -> c_int {
    attach("MPI_Session_attach_buffer", Slot::Session(session), buffer, size as i64)
}

pub unsafe fn MPI_Session_attach_buffer_c(session: MPI_Session, buffer: *mut c_void, size: MPI_Count) -> c_int {
    attach("MPI_Session_attach_buffer_c", Slot::Session(session), buffer, size)
}

pub unsafe fn MPI_Session_detach_buffer(session: MPI_Session, buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    // SAFETY: `size` is the caller's out-pointer (MPI's contract of this call).
    detach("MPI_Session_detach_buffer", Slot::Session(session), buffer_addr, |n| unsafe { put(size, n as c_int) })
}

pub unsafe fn MPI_Session_detach_buffer_c(session: MPI_Session, buffer_addr: *mut c_void, size: *mut MPI_Count) -> c_int {
    // SAFETY: as above.
    detach("MPI_Session_detach_buffer_c", Slot::Session(session), buffer_addr, |n| unsafe { put(size, n) })
}

pub unsafe fn MPI_Session_flush_buffer(session: MPI_Session) -> c_int {
    flush("MPI_Session_flush_buffer", Slot::Session(session))
}
