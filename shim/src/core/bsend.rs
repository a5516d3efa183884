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

use crate::lower::abi::*;
use crate::lower::calls::p2p::{self, PackedSend};
use parking_lot::Mutex;
use std::os::raw::c_int;

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
    /// The packed message and its request.
    send: PackedSend,
    charge: i64,
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());

/// Completes what the library finished sending; returns the space still charged to `pool`.
fn reap(pending: &mut Vec<Pending>, pool: Pool) -> Result<i64, c_int> {
    let mut err = MPI_SUCCESS;
    pending.retain_mut(|p| {
        let mut flag = 0;
        let rc = p.send.test(&mut flag).unwrap_or(MPI_ERR_INTERN);
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
/// charged to `pool`, whose buffer offers `capacity` bytes (`None`: no buffer attached). `buf`
/// is the program's, as its call passed it: readable for `count` elements of `datatype` for
/// the duration of the call (the program's contract of the call). A library without MPI 4's
/// large-count calls that it uses fails it with `MPI_ERR_INTERN` (the lower wrappers say `None`).
#[allow(clippy::too_many_arguments, reason = "MPI_Bsend's six arguments and the pool it is charged to")]
pub fn send(
    buf: usize,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    pool: Pool,
    capacity: Option<i64>,
) -> Result<(), c_int> {
    let mut size: MPI_Count = 0;
    let rc = p2p::pack_size_c(count, datatype, comm, &mut size).unwrap_or(MPI_ERR_INTERN);
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
    // `bytes` holds `size` bytes, what MPI_Pack_size asked for.
    let rc = p2p::pack_c(buf, count, datatype, &mut bytes[..size.max(0) as usize], &mut pos, comm).unwrap_or(MPI_ERR_INTERN);
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    // The packed bytes stay allocated (in PENDING) until the request completes.
    let (rc, send) = PackedSend::start(bytes, pos, dest, tag, comm);
    let rc = rc.unwrap_or(MPI_ERR_INTERN);
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    pending.push(Pending { pool, send, charge });
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
    for p in PENDING.lock().drain(..) {
        p.send.released();
    }
}
