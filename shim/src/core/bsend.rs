//! Buffered sends carried by the shim. MPI_Bsend and MPI_Ibsend pack the message into memory of
//! the shim's and send the packed bytes with a plain nonblocking send, charging the space the
//! program attached (`MPI_Buffer_attach`) as the library would (packed size plus
//! `MPI_BSEND_OVERHEAD` per message; `MPI_ERR_BUFFER` when it does not fit). The reason is
//! `MPI_Buffer_detach`: the library's own waits *inside* the library until every buffered
//! message is delivered, which may need a checkpoint's drain on the receiving side, while the
//! checkpoint waits for the thread to leave the library. With the messages here, detach waits
//! outside the gate ([`in_flight`]).
//!
//! A buffer attached to a communicator or a session (MPI 4.1) is one more pool, charged the
//! same way ([`Pool`]); the library never sees it, so nothing of it needs renewing and MPICH 4.0
//! (which lacks those calls) underneath serves them too.
//!
//! A checkpoint's drain receives every counted message, so after it the sends here are
//! delivered: the release forgets them ([`forget`]).

use crate::lower::{self, abi::*};
use parking_lot::Mutex;
use std::os::raw::{c_int, c_void};

/// Where a buffered send's space is charged: the process's buffer (`MPI_Buffer_attach`), a
/// communicator's or a session's (by the index of their virtual handles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    Process,
    Comm(u32),
    Session(u32),
}

/// `MPI_BUFFER_AUTOMATIC` of the MPICH ABI ((void *)-2) and of the standard ABI ((void *)2):
/// the library grows the buffer as needed, the size is ignored. Neither is a real address.
pub fn automatic(addr: usize) -> bool {
    addr == usize::MAX - 1 || addr == 2
}

/// The space a buffer attached at `addr` with `size` bytes offers.
pub fn capacity(addr: usize, size: i64) -> i64 {
    if automatic(addr) {
        i64::MAX
    } else {
        size
    }
}

struct Pending {
    pool: Pool,
    real: MPI_Request,
    /// The packed message, sent from here (the heap block does not move with the struct).
    _bytes: Vec<u8>,
    charge: i64,
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());

/// Completes what the library finished sending; returns the space still charged to `pool`.
fn reap(pending: &mut Vec<Pending>, pool: Pool) -> Result<i64, c_int> {
    let f = lower::fns();
    let test = f.MPI_Test.ok_or(MPI_ERR_INTERN)?;
    let mut err = MPI_SUCCESS;
    pending.retain_mut(|p| {
        let mut flag = 0;
        // SAFETY: a request this module started; flag is a local, the status is ignored.
        let rc = unsafe { test(&mut p.real, &mut flag, MPI_STATUS_IGNORE) };
        if rc != MPI_SUCCESS {
            err = rc;
            return true;
        }
        flag == 0
    });
    if err != MPI_SUCCESS {
        return Err(err);
    }
    Ok(pending.iter().filter(|p| p.pool == pool).map(|p| p.charge).sum())
}

/// Sends `count` elements of `datatype` at `buf` to `dest` as a buffered send (real handles),
/// charged to `pool`, whose buffer offers `capacity` bytes (`None`: no buffer attached).
///
/// # Safety
/// `buf` must be readable for `count` elements of `datatype` for the duration of the call.
#[allow(clippy::too_many_arguments, reason = "MPI_Bsend's six arguments and the pool it is charged to")]
pub unsafe fn send(
    buf: *const c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    pool: Pool,
    capacity: Option<i64>,
) -> Result<(), c_int> {
    let f = lower::fns();
    let (pack_size, pack, isend) = match (f.MPI_Pack_size_c, f.MPI_Pack_c, f.MPI_Isend_c) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => return Err(MPI_ERR_INTERN),
    };
    let mut size: MPI_Count = 0;
    // SAFETY: out-pointer is a local; the handles are the caller's real ones.
    let rc = unsafe { pack_size(count, datatype, comm, &mut size) };
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    let mut pending = PENDING.lock();
    let used = reap(&mut pending, pool)?;
    let charge = size + MPI_BSEND_OVERHEAD as i64;
    match capacity {
        Some(cap) if used.saturating_add(charge) <= cap => {}
        _ => return Err(MPI_ERR_BUFFER),
    }
    let mut bytes = vec![0u8; size.max(1) as usize];
    let mut pos: MPI_Count = 0;
    // SAFETY: `bytes` holds `size` bytes, what MPI_Pack_size asked for; `buf` is the caller's.
    let rc = unsafe { pack(buf, count, datatype, bytes.as_mut_ptr() as *mut c_void, size, &mut pos, comm) };
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    let mut real = MPI_REQUEST_NULL;
    // SAFETY: the packed bytes stay allocated (in PENDING) until the request completes.
    let rc = unsafe { isend(bytes.as_ptr() as *const c_void, pos, MPI_PACKED, dest, tag, comm, &mut real) };
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    pending.push(Pending { pool, real, _bytes: bytes, charge });
    Ok(())
}

/// How many buffered messages the library is still sending (drives its progress). Finalize
/// waits for none; a checkpoint's drain waits for them as for the program's own sends, since
/// a receiver draining a large one needs this rank's progress to get it.
pub fn in_flight() -> Result<usize, c_int> {
    let mut pending = PENDING.lock();
    reap(&mut pending, Pool::Process)?;
    Ok(pending.len())
}

/// How many buffered messages charged to `pool` are still being sent (detach and flush wait
/// for none).
pub fn in_flight_of(pool: Pool) -> Result<usize, c_int> {
    let mut pending = PENDING.lock();
    reap(&mut pending, pool)?;
    Ok(pending.iter().filter(|p| p.pool == pool).count())
}

/// The library is released: every buffered message was delivered (the drain received it).
pub fn forget() {
    PENDING.lock().clear();
}
