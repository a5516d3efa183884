//! Point-to-point: every send is counted per destination (the drain needs to know what is in
//! flight), every receive first looks at the drained-message buffer, and blocking calls are a
//! nonblocking call plus a gated wait, so a rank blocked in MPI_Recv can be checkpointed.

use crate::core::bsend::{self, Pool};
use crate::core::kinds::comm::{comm_gid, count_recv, count_send};
use crate::core::kinds::message::{self, MessageEntry, CLAIMED};
use crate::core::kinds::part;
use crate::core::kinds::request::{complete_at_once, complete_blocking, take_drained_into, unpack, YIELD_EVERY};
use crate::core::state::OBJ;
use crate::core::{drained, gate};
use crate::face::abi::*;
use crate::face::api::request::{register_done, register_request, wait_internal};
use crate::face::api::{library_status_in, put, put_library_status, put_status};
use crate::face::{conv, errors};
use crate::lower;
use crate::lower::handles::RealMessage;
use mpicr_virtid::{P2pArgs, RequestRecipe, SendMode, TypeRef, VDatatype, VMessage};
use std::os::raw::{c_int, c_void};

fn args(buf: *const c_void, count: i64, datatype: MPI_Datatype, peer: c_int, tag: c_int, comm: MPI_Comm) -> P2pArgs {
    P2pArgs { buf: buf as u64, count, datatype: TypeRef::Predefined(conv::vdatatype(datatype)), peer, tag, comm: conv::vcomm(comm) }
}

/// How long posting a request waits for it under the gate hold that posted it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Blocking {
    /// A nonblocking call: it becomes a virtual request.
    No,
    /// One test (the receive half of MPI_Sendrecv, whose send is not posted yet: waiting for the
    /// receive first would deadlock a ring).
    Once,
    /// Until it completes, or a checkpoint closes the gate ([`complete_blocking`]).
    Until,
}

impl Blocking {
    /// The completion test of a just-posted real request, as this mode asks.
    fn complete(self, real: &mut c_int, recv_comm: Option<mpicr_virtid::VComm>) -> Option<MPI_Status> {
        match self {
            Blocking::No => None,
            Blocking::Once => complete_at_once(real, recv_comm),
            Blocking::Until => complete_blocking(real, recv_comm),
        }
    }
}

/// What posting a request gave a call: a virtual request to complete later, or (for a
/// blocking call whose request completed at once) its final status.
enum Posted {
    Pending(MPI_Request),
    Done(MPI_Status),
}

impl Posted {
    /// The virtual request of a nonblocking call (which never asks for `Done`).
    fn request(self) -> MPI_Request {
        match self {
            Posted::Pending(v) => v,
            Posted::Done(_) => unreachable!("only blocking calls complete at once"),
        }
    }

    /// Waits for a blocking call's request; writes `status` and returns the call's error.
    ///
    /// # Safety
    /// `status` must be null, MPI_STATUS_IGNORE, or writable.
    unsafe fn finish_blocking(self, status: *mut MPI_Status) -> c_int {
        match self {
            // SAFETY: the caller's contract on `status`.
            Posted::Pending(v) => unsafe { wait_internal(v, status) },
            Posted::Done(st) => {
                // SAFETY: as above; MPI_ERROR is left alone, as a single completion does.
                unsafe { put_status(status, &st) };
                st.MPI_ERROR
            }
        }
    }
}

/// Posts a send. A blocking call gets `Done` when its send completed as `blocking` waits for
/// it ([`Blocking`]); otherwise the send becomes a virtual request. Safe: it only records `buf`'s address; the
/// buffer reaches the library through `real_call`, which its caller builds.
#[allow(clippy::too_many_arguments)]
fn post_send(
    mode: SendMode,
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    blocking: Blocking,
    real_call: impl FnOnce(c_int, c_int, &mut c_int) -> c_int,
) -> Result<Posted, c_int> {
    let (c, d) = (conv::comm_checked(comm)?, conv::datatype(dt));
    let mut r = MPI_REQUEST_NULL;
    let rc = real_call(c, d, &mut r);
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    count_send(conv::vcomm(comm), dest);
    if let Some(st) = blocking.complete(&mut r, None) {
        return Ok(Posted::Done(st));
    }
    Ok(Posted::Pending(register_request(r, RequestRecipe::Send { mode, args: args(buf, count, dt, dest, tag, comm) }, comm, false)))
}

/// Posts a receive (from the drained buffer when possible). A blocking call gets `Done` when
/// its receive completed as `blocking` waits for it ([`Blocking`]); otherwise the receive
/// becomes a virtual request.
///
/// # Safety
/// `buf` must be writable for `count` elements of `dt`: a drained message is copied into it
/// at once (and `real_call` hands it to the library).
#[allow(clippy::too_many_arguments)]
unsafe fn post_recv(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    blocking: Blocking,
    real_call: impl FnOnce(c_int, c_int, &mut c_int) -> c_int,
) -> Result<Posted, c_int> {
    let a = args(buf, count, dt, source, tag, comm);
    conv::comm_checked(comm)?;
    if source == MPI_PROC_NULL && conv::comm_index(comm).is_some() {
        if crate::face::api::ulfm::revoked_real(conv::comm(comm)) {
            return Err(crate::lower::ulfm::MPIX_ERR_REVOKED);
        }
        // Completes at once with the status MPI prescribes (no library round trip).
        let st = MPI_Status { MPI_SOURCE: MPI_PROC_NULL, MPI_TAG: MPI_ANY_TAG, ..Default::default() };
        return Ok(Posted::Pending(register_done(RequestRecipe::Recv { args: a }, comm, &st)));
    }
    if let Some(st) = take_drained_into(&a) {
        return Ok(Posted::Pending(register_done(RequestRecipe::Recv { args: a }, comm, &st)));
    }
    let (c, d) = (conv::comm(comm), conv::datatype(dt));
    let mut r = MPI_REQUEST_NULL;
    let rc = real_call(c, d, &mut r);
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    if let Some(st) = blocking.complete(&mut r, Some(conv::vcomm(comm))) {
        return Ok(Posted::Done(st));
    }
    Ok(Posted::Pending(register_request(r, RequestRecipe::Recv { args: a }, comm, true)))
}

macro_rules! isend {
    ($name:ident, $real:ident, $count:ty, $mode:ident) => {
        pub unsafe fn $name(
            buf: *const c_void,
            count: $count,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            let g = gate::enter();
            // `buf` goes to the library as the caller's send buffer, which the caller keeps
            // valid until the request completes (MPI's contract of this call).
            let r =
                post_send(SendMode::$mode, buf, count as i64, datatype, dest, tag, comm, Blocking::No, |c, d, r| real!($real(buf, count, d, dest, tag, c, r)));
            drop(g);
            match r.map(Posted::request) {
                Ok(v) => {
                    // SAFETY: `request` is the caller's out-pointer, valid for a write (MPI's
                    // contract of this call).
                    unsafe { put(request, v) };
                    MPI_SUCCESS
                }
                Err(rc) => errors::raise_comm(comm, rc, stringify!($name)),
            }
        }
    };
}

macro_rules! send {
    ($name:ident, $real:ident, $count:ty, $mode:ident) => {
        pub unsafe fn $name(buf: *const c_void, count: $count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) -> c_int {
            let g = gate::enter();
            // A blocking send to MPI_PROC_NULL on a revoked communicator fails in Open MPI (its
            // MPI_Isend, which the shim waits for, does not check).
            if dest == MPI_PROC_NULL && conv::comm_index(comm).is_some() && crate::face::api::ulfm::revoked_real(conv::comm(comm)) {
                drop(g);
                return errors::raise_comm(comm, crate::lower::ulfm::MPIX_ERR_REVOKED, stringify!($name));
            }
            // `buf` is the caller's send buffer, valid for the whole call, which waits for the send.
            let r = post_send(SendMode::$mode, buf, count as i64, datatype, dest, tag, comm, Blocking::Until, |c, d, r| {
                real!($real(buf, count, d, dest, tag, c, r))
            });
            drop(g);
            let rc = match r {
                // SAFETY: MPI_STATUS_IGNORE is a status argument `finish_blocking` accepts.
                Ok(p) => unsafe { p.finish_blocking(MPI_STATUS_IGNORE) },
                Err(rc) => rc,
            };
            if rc != MPI_SUCCESS {
                return errors::raise_comm(comm, rc, stringify!($name));
            }
            MPI_SUCCESS
        }
    };
}

/// A buffered send, carried by the shim (see [`crate::core::bsend`]): complete on return, so
/// MPI_Ibsend's request is born complete. Returns that request when `request` is asked for.
///
/// # Safety
/// `buf` must be readable for `count` elements of `datatype` during the call.
unsafe fn bsend(buf: *const c_void, count: i64, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: bool) -> Result<MPI_Request, c_int> {
    let _g = gate::enter();
    let c = conv::comm_checked(comm)?;
    let a = args(buf, count, datatype, dest, tag, comm);
    let recipe = RequestRecipe::Send { mode: SendMode::Buffered, args: a };
    let done = MPI_Status { MPI_SOURCE: MPI_ANY_SOURCE, MPI_TAG: MPI_ANY_TAG, ..Default::default() };
    if dest != MPI_PROC_NULL {
        // The communicator's buffer (MPI 4.1) when one is attached, else the process's.
        let idx = conv::comm_index(comm);
        let (pool, attached) = match idx.and_then(|i| OBJ.comms.with(i, |e| e.buffer)).flatten() {
            Some(b) => (Pool::Comm(idx.unwrap_or_default()), Some(b)),
            None => (Pool::Process, crate::core::kinds::library::attached_buffer()),
        };
        let capacity = attached.map(|(addr, size)| bsend::capacity(addr, size));
        // `buf` is the caller's, readable for the message (MPI's contract of the call).
        bsend::send(buf as usize, count, conv::datatype(datatype), dest, tag, c, pool, capacity)?;
        count_send(conv::vcomm(comm), dest);
    }
    Ok(if request { register_done(recipe, comm, &done) } else { MPI_REQUEST_NULL })
}

macro_rules! bsend {
    ($ibsend:ident, $bsend:ident, $count:ty) => {
        pub unsafe fn $ibsend(
            buf: *const c_void,
            count: $count,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            // SAFETY: `buf` is the caller's send buffer (MPI's contract of this call).
            match unsafe { bsend(buf, count as i64, datatype, dest, tag, comm, true) } {
                // SAFETY: `request` is the caller's out-pointer (MPI's contract of this call).
                Ok(v) => unsafe { put(request, v) },
                Err(rc) => return errors::raise_comm(comm, rc, stringify!($ibsend)),
            }
            MPI_SUCCESS
        }

        pub unsafe fn $bsend(buf: *const c_void, count: $count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) -> c_int {
            // SAFETY: `buf` is the caller's send buffer (MPI's contract of this call).
            match unsafe { bsend(buf, count as i64, datatype, dest, tag, comm, false) } {
                Ok(_) => MPI_SUCCESS,
                Err(rc) => errors::raise_comm(comm, rc, stringify!($bsend)),
            }
        }
    };
}

bsend!(MPI_Ibsend, MPI_Bsend, c_int);
bsend!(MPI_Ibsend_c, MPI_Bsend_c, MPI_Count);
isend!(MPI_Isend, MPI_Isend, c_int, Standard);
isend!(MPI_Issend, MPI_Issend, c_int, Synchronous);
isend!(MPI_Irsend, MPI_Irsend, c_int, Ready);
isend!(MPI_Isend_c, MPI_Isend_c, MPI_Count, Standard);
isend!(MPI_Issend_c, MPI_Issend_c, MPI_Count, Synchronous);
isend!(MPI_Irsend_c, MPI_Irsend_c, MPI_Count, Ready);
send!(MPI_Send, MPI_Isend, c_int, Standard);
send!(MPI_Ssend, MPI_Issend, c_int, Synchronous);
send!(MPI_Rsend, MPI_Irsend, c_int, Ready);
send!(MPI_Send_c, MPI_Isend_c, MPI_Count, Standard);
send!(MPI_Ssend_c, MPI_Issend_c, MPI_Count, Synchronous);
send!(MPI_Rsend_c, MPI_Irsend_c, MPI_Count, Ready);

macro_rules! recv {
    ($iname:ident, $name:ident, $real:ident, $count:ty) => {
        pub unsafe fn $iname(
            buf: *mut c_void,
            count: $count,
            datatype: MPI_Datatype,
            source: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            let g = gate::enter();
            let r =
                // SAFETY: `buf` is the caller's receive buffer, writable for `count` `datatype`s until
                // the request completes (MPI's contract of this call).
                unsafe { post_recv(buf, count as i64, datatype, source, tag, comm, Blocking::No, |c, d, r| real!($real(buf, count, d, source, tag, c, r))) };
            drop(g);
            match r.map(Posted::request) {
                Ok(v) => {
                    // SAFETY: `request` is the caller's out-pointer, valid for a write.
                    unsafe { put(request, v) };
                    MPI_SUCCESS
                }
                Err(rc) => errors::raise_comm(comm, rc, stringify!($iname)),
            }
        }

        pub unsafe fn $name(
            buf: *mut c_void,
            count: $count,
            datatype: MPI_Datatype,
            source: c_int,
            tag: c_int,
            comm: MPI_Comm,
            status: *mut MPI_Status,
        ) -> c_int {
            let g = gate::enter();
            let r =
                // SAFETY: `buf` is the caller's receive buffer, writable for `count` `datatype`s for
                // the whole call, which waits for the message.
                unsafe { post_recv(buf, count as i64, datatype, source, tag, comm, Blocking::Until, |c, d, r| real!($real(buf, count, d, source, tag, c, r))) };
            drop(g);
            let rc = match r {
                // SAFETY: `status` is the caller's: MPI_STATUS_IGNORE or writable.
                Ok(p) => unsafe { p.finish_blocking(status) },
                Err(rc) => rc,
            };
            if rc != MPI_SUCCESS {
                return errors::raise_comm(comm, rc, stringify!($name));
            }
            MPI_SUCCESS
        }
    };
}

recv!(MPI_Irecv, MPI_Recv, MPI_Irecv, c_int);
recv!(MPI_Irecv_c, MPI_Recv_c, MPI_Irecv_c, MPI_Count);

macro_rules! sendrecv {
    ($name:ident, $isend:ident, $irecv:ident, $count:ty) => {
        pub unsafe fn $name(
            sendbuf: *const c_void,
            sendcount: $count,
            sendtype: MPI_Datatype,
            dest: c_int,
            sendtag: c_int,
            recvbuf: *mut c_void,
            recvcount: $count,
            recvtype: MPI_Datatype,
            source: c_int,
            recvtag: c_int,
            comm: MPI_Comm,
            status: *mut MPI_Status,
        ) -> c_int {
            let g = gate::enter();
            // SAFETY: `recvbuf` is writable for `recvcount` `recvtype`s for the whole call, which
            // waits for both halves (MPI's contract of this call).
            let rr = unsafe {
                post_recv(recvbuf, recvcount as i64, recvtype, source, recvtag, comm, Blocking::Once, |c, d, r| {
                    real!($irecv(recvbuf, recvcount, d, source, recvtag, c, r))
                })
            };
            let sr = match rr {
                // `sendbuf` stays valid for the whole call likewise.
                Ok(_) => post_send(SendMode::Standard, sendbuf, sendcount as i64, sendtype, dest, sendtag, comm, Blocking::Until, |c, d, r| {
                    real!($isend(sendbuf, sendcount, d, dest, sendtag, c, r))
                }),
                Err(rc) => Err(rc),
            };
            drop(g);
            let rc = match (rr, sr) {
                (Ok(r), Ok(s)) => {
                    // SAFETY: MPI_STATUS_IGNORE is accepted; `status` is the caller's, ignored or
                    // writable.
                    let rs = unsafe { s.finish_blocking(MPI_STATUS_IGNORE) };
                    // SAFETY: as above.
                    let rr = unsafe { r.finish_blocking(status) };
                    if rs != MPI_SUCCESS {
                        rs
                    } else {
                        rr
                    }
                }
                (Err(rc), _) | (_, Err(rc)) => rc,
            };
            if rc != MPI_SUCCESS {
                return errors::raise_comm(comm, rc, stringify!($name));
            }
            MPI_SUCCESS
        }
    };
}

sendrecv!(MPI_Sendrecv, MPI_Isend, MPI_Irecv, c_int);
sendrecv!(MPI_Sendrecv_c, MPI_Isend_c, MPI_Irecv_c, MPI_Count);

/// Packs `count` elements of `dt` at `buf` into a new byte vector (for the *_replace calls).
fn pack(buf: *const c_void, count: i64, dt: MPI_Datatype, comm: MPI_Comm) -> Result<Vec<u8>, c_int> {
    let f = lower::fns();
    let (rdt, rc) = (conv::datatype(dt), conv::comm(comm));
    let mut size: MPI_Count = 0;
    // SAFETY: out-pointers are locals; the buffer is sized by the library's own answer.
    unsafe {
        let e = f.MPI_Pack_size_c.map_or(MPI_ERR_OTHER, |g| g(count, rdt, rc, &mut size));
        if e != MPI_SUCCESS {
            return Err(e);
        }
        let mut out = vec![0u8; size.max(0) as usize];
        let mut pos: MPI_Count = 0;
        let e = f.MPI_Pack_c.map_or(MPI_ERR_OTHER, |g| g(buf, count, rdt, out.as_mut_ptr() as *mut c_void, size, &mut pos, rc));
        if e != MPI_SUCCESS {
            return Err(e);
        }
        out.truncate(pos as usize);
        Ok(out)
    }
}

macro_rules! sendrecv_replace {
    ($name:ident, $count:ty) => {
        pub unsafe fn $name(
            buf: *mut c_void,
            count: $count,
            datatype: MPI_Datatype,
            dest: c_int,
            sendtag: c_int,
            source: c_int,
            recvtag: c_int,
            comm: MPI_Comm,
            status: *mut MPI_Status,
        ) -> c_int {
            let g = gate::enter();
            let packed = pack(buf, count as i64, datatype, comm);
            drop(g);
            let packed = match packed {
                Ok(p) => p,
                Err(rc) => return errors::raise_comm(comm, rc, stringify!($name)),
            };
            let n = packed.len() as MPI_Count;
            // SAFETY: `packed` is a local of `n` bytes, alive across the call; `buf` (writable for
            // `count` `datatype`s) and `status` are the caller's, as MPI requires of this call.
            unsafe {
                MPI_Sendrecv_c(packed.as_ptr() as *const c_void, n, MPI_PACKED, dest, sendtag, buf, count as MPI_Count, datatype, source, recvtag, comm, status)
            }
        }
    };
}

sendrecv_replace!(MPI_Sendrecv_replace, c_int);
sendrecv_replace!(MPI_Sendrecv_replace_c, MPI_Count);

/// MPI_Isendrecv(_replace): one library request for a send and a receive; the send is counted
/// now, the receive when the request completes.
///
/// # Safety
/// `request` must be valid for a write.
unsafe fn post_exchange(name: &str, comm: MPI_Comm, dest: c_int, request: *mut MPI_Request, call: impl FnOnce(c_int, &mut c_int) -> c_int) -> c_int {
    let g = gate::enter();
    let mut r = MPI_REQUEST_NULL;
    let rc = call(conv::comm(comm), &mut r);
    if rc == MPI_SUCCESS {
        count_send(conv::vcomm(comm), dest);
        let v = register_request(r, RequestRecipe::Other { function: name.into() }, comm, true);
        // SAFETY: this function's contract.
        unsafe { put(request, v) };
    }
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_comm(comm, rc, name);
    }
    MPI_SUCCESS
}

macro_rules! isendrecv {
    ($name:ident, $count:ty) => {
        pub unsafe fn $name(
            sendbuf: *const c_void,
            sendcount: $count,
            sendtype: MPI_Datatype,
            dest: c_int,
            sendtag: c_int,
            recvbuf: *mut c_void,
            recvcount: $count,
            recvtype: MPI_Datatype,
            source: c_int,
            recvtag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            let (st, rt) = (conv::datatype(sendtype), conv::datatype(recvtype));
            // SAFETY: `request` is the caller's out-pointer; the buffers go to the library as the
            // caller passed them, valid until the request completes (MPI's contract).
            unsafe {
                post_exchange(stringify!($name), comm, dest, request, |c, r| {
                    real!($name(sendbuf, sendcount, st, dest, sendtag, recvbuf, recvcount, rt, source, recvtag, c, r))
                })
            }
        }
    };
}

isendrecv!(MPI_Isendrecv, c_int);
isendrecv!(MPI_Isendrecv_c, MPI_Count);

macro_rules! isendrecv_replace {
    ($name:ident, $count:ty) => {
        pub unsafe fn $name(
            buf: *mut c_void,
            count: $count,
            datatype: MPI_Datatype,
            dest: c_int,
            sendtag: c_int,
            source: c_int,
            recvtag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            let d = conv::datatype(datatype);
            // SAFETY: as for MPI_Isendrecv: `request` is writable, `buf` valid until completion.
            unsafe { post_exchange(stringify!($name), comm, dest, request, |c, r| real!($name(buf, count, d, dest, sendtag, source, recvtag, c, r))) }
        }
    };
}

isendrecv_replace!(MPI_Isendrecv_replace, c_int);
isendrecv_replace!(MPI_Isendrecv_replace_c, MPI_Count);

/// Probe status for a drained message.
fn drained_status(source: c_int, tag: c_int, bytes: usize) -> MPI_Status {
    let mut st = MPI_Status { MPI_SOURCE: source, MPI_TAG: tag, ..Default::default() };
    st.set_bytes(bytes as i64);
    st
}

pub unsafe fn MPI_Iprobe(source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
    let g = gate::enter();
    if !drained::is_empty() {
        if let Some((s, t, n)) = comm_gid(conv::vcomm(comm)).and_then(|gid| drained::peek(gid, source, tag)) {
            // SAFETY: `flag` and `status` are the caller's out-pointers (`status` may be
            // MPI_STATUS_IGNORE), as MPI_Iprobe requires.
            unsafe {
                put(flag, 1);
                put_status(status, &drained_status(s, t, n));
            }
            return MPI_SUCCESS;
        }
    }
    let c = match conv::comm_checked(comm) {
        Ok(c) => c,
        Err(e) => {
            drop(g);
            return errors::raise_default(e, "MPI_Iprobe");
        }
    };
    let rc = real!(MPI_Iprobe(source, tag, c, flag, status));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_comm(comm, rc, "MPI_Iprobe");
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Probe(source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status) -> c_int {
    let mut flag = 0;
    let mut spins = 0u32;
    loop {
        // SAFETY: `flag` is a local; `status` is the caller's, as MPI_Probe requires.
        let rc = unsafe { MPI_Iprobe(source, tag, comm, &mut flag, status) };
        if rc != MPI_SUCCESS || flag != 0 {
            return rc;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(YIELD_EVERY) {
            std::thread::yield_now();
        }
    }
}

pub unsafe fn MPI_Improbe(source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int, message: *mut MPI_Message, status: *mut MPI_Status) -> c_int {
    let g = gate::enter();
    if !drained::is_empty() {
        if let Some(m) = comm_gid(conv::vcomm(comm)).and_then(|gid| drained::take(gid, source, tag)) {
            let st = drained_status(m.source, m.tag, m.data.len());
            let entry = MessageEntry { comm: conv::vcomm(comm), drained: Some(0), bytes: st.bytes() };
            let v = message::register(RealMessage(0), entry).unwrap_or_else(|_| errors::fatal("too many live messages"));
            CLAIMED.lock().push((v.index().expect("a registered message"), m));
            // SAFETY: `flag`, `message` and `status` are the caller's out-pointers, as MPI_Improbe
            // requires.
            unsafe {
                put(flag, 1);
                put(message, conv::message_abi(v));
                put_status(status, &st);
            }
            return MPI_SUCCESS;
        }
    }
    let c = match conv::comm_checked(comm) {
        Ok(c) => c,
        Err(e) => {
            drop(g);
            return errors::raise_default(e, "MPI_Improbe");
        }
    };
    let mut real_msg = MPI_MESSAGE_NULL;
    // SAFETY: `status` is the caller's, MPI_STATUS_IGNORE or a status (MPI_Improbe's contract).
    let mut st = unsafe { library_status_in(status) };
    let mut f = 0;
    let rc = real!(MPI_Improbe(source, tag, c, &mut f, &mut real_msg, &mut st));
    if rc == MPI_SUCCESS && f != 0 {
        let v = match crate::core::handles::predefined_vmessage(real_msg) {
            Some(p) => p,
            None => {
                // The message has left the library's queue: it counts as received now.
                count_recv(conv::vcomm(comm), st.MPI_SOURCE);
                let entry = MessageEntry { comm: conv::vcomm(comm), drained: None, bytes: st.bytes() };
                message::register(RealMessage(real_msg), entry).unwrap_or_else(|_| errors::fatal("too many live messages"))
            }
        };
        // SAFETY: as above: the caller's `message` and `status`.
        unsafe {
            put(message, conv::message_abi(v));
            put_library_status(status, &st);
        }
    }
    drop(g);
    // SAFETY: the caller's `flag`, as above.
    unsafe { put(flag, f) };
    if rc != MPI_SUCCESS {
        return errors::raise_comm(comm, rc, "MPI_Improbe");
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Mprobe(source: c_int, tag: c_int, comm: MPI_Comm, message: *mut MPI_Message, status: *mut MPI_Status) -> c_int {
    let mut flag = 0;
    let mut spins = 0u32;
    loop {
        // SAFETY: `flag` is a local; `message` and `status` are the caller's, as MPI_Mprobe
        // requires.
        let rc = unsafe { MPI_Improbe(source, tag, comm, &mut flag, message, status) };
        if rc != MPI_SUCCESS || flag != 0 {
            return rc;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(YIELD_EVERY) {
            std::thread::yield_now();
        }
    }
}

/// Receives a matched message: from the drained buffer, or the real library.
/// Returns the virtual request (already complete for drained messages).
///
/// # Safety
/// `message` must be readable and writable, and `buf` writable for `count` elements of `dt`
/// (a drained message is copied into it at once).
unsafe fn mrecv_start(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    message: *mut MPI_Message,
    real_call: impl FnOnce(c_int, &mut c_int, &mut c_int) -> c_int,
) -> Result<MPI_Request, (MPI_Comm, c_int)> {
    // SAFETY: this function's contract: `message` is readable and writable.
    let v = conv::vmessage(unsafe { *message });
    if v == VMessage::NO_PROC {
        // SAFETY: as above.
        unsafe { *message = MPI_MESSAGE_NULL };
        let st = MPI_Status { MPI_SOURCE: MPI_PROC_NULL, MPI_TAG: MPI_ANY_TAG, ..Default::default() };
        return Ok(register_done(RequestRecipe::Other { function: "MPI_Mrecv".into() }, MPI_COMM_NULL, &st));
    }
    let Some(idx) = v.index().filter(|&i| OBJ.messages.real(i).is_some()) else {
        // Null, freed or invented: the real library gives the native error.
        let mut raw = crate::core::handles::message(v).raw();
        let mut r = MPI_REQUEST_NULL;
        let rc = real_call(conv::datatype(dt), &mut raw, &mut r);
        return Err((MPI_COMM_WORLD, if rc == MPI_SUCCESS { MPI_ERR_REQUEST } else { rc }));
    };
    let mut real_msg = OBJ.messages.real(idx).map_or(0, |r| r.raw());
    let Some(entry) = OBJ.messages.remove(idx) else { return Err((MPI_COMM_WORLD, MPI_ERR_REQUEST)) };
    // SAFETY: as above.
    unsafe { *message = MPI_MESSAGE_NULL };
    if entry.drained.is_some() {
        let m = {
            let mut claimed = CLAIMED.lock();
            let pos = claimed.iter().position(|(i, _)| *i == idx).expect("claimed drained message");
            claimed.remove(pos).1
        };
        let st = unpack(&m.data, buf as usize, count, conv::vdatatype(dt), entry.comm, m.source, m.tag);
        return Ok(register_done(RequestRecipe::Other { function: "MPI_Mrecv".into() }, conv::comm_abi(entry.comm), &st));
    }
    let mut r = MPI_REQUEST_NULL;
    let rc = real_call(conv::datatype(dt), &mut real_msg, &mut r);
    if rc != MPI_SUCCESS {
        return Err((conv::comm_abi(entry.comm), rc));
    }
    Ok(register_request(r, RequestRecipe::Other { function: "MPI_Mrecv".into() }, conv::comm_abi(entry.comm), false))
}

macro_rules! mrecv {
    ($iname:ident, $name:ident, $real:ident, $count:ty) => {
        pub unsafe fn $iname(buf: *mut c_void, count: $count, datatype: MPI_Datatype, message: *mut MPI_Message, request: *mut MPI_Request) -> c_int {
            let g = gate::enter();
            // SAFETY: `buf` is writable for `count` `datatype`s until the request completes and
            // `message` is readable and writable: the caller's, as this call requires.
            let r = unsafe { mrecv_start(buf, count as i64, datatype, message, |d, m, r| real!($real(buf, count, d, m, r))) };
            drop(g);
            match r {
                Ok(v) => {
                    // SAFETY: `request` is the caller's out-pointer, valid for a write.
                    unsafe { put(request, v) };
                    MPI_SUCCESS
                }
                Err((comm, rc)) => errors::raise_comm(comm, rc, stringify!($iname)),
            }
        }

        pub unsafe fn $name(buf: *mut c_void, count: $count, datatype: MPI_Datatype, message: *mut MPI_Message, status: *mut MPI_Status) -> c_int {
            let g = gate::enter();
            // SAFETY: `buf` (writable for `count` `datatype`s for the whole call) and `message`
            // (readable and writable) are the caller's, as this call requires.
            let r = unsafe { mrecv_start(buf, count as i64, datatype, message, |d, m, r| real!($real(buf, count, d, m, r))) };
            drop(g);
            match r {
                Ok(v) => {
                    // SAFETY: `status` is the caller's, MPI_STATUS_IGNORE or writable.
                    let rc = unsafe { wait_internal(v, status) };
                    if rc != MPI_SUCCESS {
                        return errors::raise_default(rc, stringify!($name));
                    }
                    MPI_SUCCESS
                }
                Err((comm, rc)) => errors::raise_comm(comm, rc, stringify!($name)),
            }
        }
    };
}

mrecv!(MPI_Imrecv, MPI_Mrecv, MPI_Imrecv, c_int);
mrecv!(MPI_Imrecv_c, MPI_Mrecv_c, MPI_Imrecv_c, MPI_Count);

macro_rules! send_init {
    ($name:ident, $count:ty, $mode:ident) => {
        pub unsafe fn $name(
            buf: *const c_void,
            count: $count,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            let g = gate::enter();
            let (c, d) = (conv::comm(comm), conv::datatype(datatype));
            let mut r = MPI_REQUEST_NULL;
            let rc = real!($name(buf, count, d, dest, tag, c, &mut r));
            if rc == MPI_SUCCESS {
                let recipe = RequestRecipe::PersistentSend { mode: SendMode::$mode, args: args(buf, count as i64, datatype, dest, tag, comm), active: false };
                // SAFETY: `request` is the caller's out-pointer, valid for a write.
                unsafe { put(request, register_request(r, recipe, comm, false)) };
            }
            drop(g);
            if rc != MPI_SUCCESS {
                return errors::raise_comm(comm, rc, stringify!($name));
            }
            MPI_SUCCESS
        }
    };
}

send_init!(MPI_Send_init, c_int, Standard);
send_init!(MPI_Bsend_init, c_int, Buffered);
send_init!(MPI_Ssend_init, c_int, Synchronous);
send_init!(MPI_Rsend_init, c_int, Ready);
send_init!(MPI_Send_init_c, MPI_Count, Standard);
send_init!(MPI_Bsend_init_c, MPI_Count, Buffered);
send_init!(MPI_Ssend_init_c, MPI_Count, Synchronous);
send_init!(MPI_Rsend_init_c, MPI_Count, Ready);

macro_rules! recv_init {
    ($name:ident, $count:ty) => {
        pub unsafe fn $name(
            buf: *mut c_void,
            count: $count,
            datatype: MPI_Datatype,
            source: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            let g = gate::enter();
            let (c, d) = (conv::comm(comm), conv::datatype(datatype));
            let mut r = MPI_REQUEST_NULL;
            let rc = real!($name(buf, count, d, source, tag, c, &mut r));
            if rc == MPI_SUCCESS {
                let recipe = RequestRecipe::PersistentRecv { args: args(buf, count as i64, datatype, source, tag, comm), active: false };
                // SAFETY: `request` is the caller's out-pointer, valid for a write.
                unsafe { put(request, register_request(r, recipe, comm, true)) };
            }
            drop(g);
            if rc != MPI_SUCCESS {
                return errors::raise_comm(comm, rc, stringify!($name));
            }
            MPI_SUCCESS
        }
    };
}

recv_init!(MPI_Recv_init, c_int);
recv_init!(MPI_Recv_init_c, MPI_Count);

/// Registers the request of a partitioned operation, with the recipe a renewal makes it again
/// from (`core::kinds::part`).
///
/// # Safety
/// `request` must be valid for a write.
unsafe fn partitioned_init(
    name: &str,
    send: bool,
    a: &P2pArgs,
    partitions: c_int,
    info: MPI_Info,
    request: *mut MPI_Request,
    call: impl FnOnce(c_int, c_int, &mut c_int) -> c_int,
) -> c_int {
    let g = gate::enter();
    let mut r = MPI_REQUEST_NULL;
    let rc = call(crate::core::handles::comm(a.comm).raw(), crate::core::handles::datatype(dtype_of(a)).raw(), &mut r);
    if rc == MPI_SUCCESS {
        let TypeRef::Predefined(dt) = a.datatype else { unreachable!("args() keeps handles") };
        let ty = crate::core::kinds::datatype::typeref(dt);
        let recipe = part::recipe(send, a.buf, partitions, a.count, ty, a.peer, a.tag, a.comm, conv::vinfo(info));
        // SAFETY: this function's contract.
        unsafe { put(request, register_request(r, recipe, conv::comm_abi(a.comm), false)) };
    }
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_comm(conv::comm_abi(a.comm), rc, name);
    }
    MPI_SUCCESS
}

fn dtype_of(a: &P2pArgs) -> VDatatype {
    match a.datatype {
        TypeRef::Predefined(h) => h,
        TypeRef::Derived(_) => VDatatype::NULL,
    }
}

pub unsafe fn MPI_Psend_init(
    buf: *const c_void,
    partitions: c_int,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    let a = args(buf, count, datatype, dest, tag, comm);
    let i = conv::info(info);
    // SAFETY: `request` is the caller's out-pointer; `buf` goes to the library as the caller passed
    // it.
    unsafe {
        partitioned_init("MPI_Psend_init", true, &a, partitions, info, request, |c, d, r| real!(MPI_Psend_init(buf, partitions, count, d, dest, tag, c, i, r)))
    }
}

pub unsafe fn MPI_Precv_init(
    buf: *mut c_void,
    partitions: c_int,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    let a = args(buf, count, datatype, source, tag, comm);
    let i = conv::info(info);
    // SAFETY: `request` is the caller's out-pointer; `buf` goes to the library as the caller passed
    // it.
    unsafe {
        partitioned_init("MPI_Precv_init", false, &a, partitions, info, request, |c, d, r| {
            real!(MPI_Precv_init(buf, partitions, count, d, source, tag, c, i, r))
        })
    }
}

/// A partitioned-communication call on an existing request; `ready`: the partitions it makes
/// ready, recorded when it succeeds. Safe itself: what reaches the library goes through `call`.
fn on_request(name: &str, request: MPI_Request, ready: impl Iterator<Item = c_int>, call: impl FnOnce(c_int) -> c_int) -> c_int {
    let g = gate::enter();
    let rc = call(conv::request(request));
    if rc == MPI_SUCCESS {
        if let Some(idx) = conv::vrequest(request).index() {
            part::mark_ready(idx, ready);
        }
    }
    drop(g);
    if rc != MPI_SUCCESS {
        errors::raise_default(rc, name)
    } else {
        rc
    }
}

pub unsafe fn MPI_Pready(partition: c_int, request: MPI_Request) -> c_int {
    on_request("MPI_Pready", request, std::iter::once(partition), |r| real!(MPI_Pready(partition, r)))
}

pub unsafe fn MPI_Pready_range(lo: c_int, hi: c_int, request: MPI_Request) -> c_int {
    on_request("MPI_Pready_range", request, lo..=hi, |r| real!(MPI_Pready_range(lo, hi, r)))
}

pub unsafe fn MPI_Pready_list(length: c_int, list: *mut c_int, request: MPI_Request) -> c_int {
    let parts: Vec<c_int> = if list.is_null() || length <= 0 {
        Vec::new()
    } else {
        // SAFETY: MPI requires `list` to hold `length` partition numbers.
        unsafe { std::slice::from_raw_parts(list, length as usize) }.to_vec()
    };
    on_request("MPI_Pready_list", request, parts.into_iter(), |r| real!(MPI_Pready_list(length, list, r)))
}

pub unsafe fn MPI_Parrived(request: MPI_Request, partition: c_int, flag: *mut c_int) -> c_int {
    // A receive a checkpoint's drain completed: every partition arrived (the renewed library's
    // request is not started).
    let done = conv::vrequest(request).index().and_then(|i| OBJ.requests.with(i, |e| e.done.is_some())).unwrap_or(false);
    if done {
        // SAFETY: `flag` is the caller's out-pointer, valid for a write.
        unsafe { put(flag, 1) };
        return MPI_SUCCESS;
    }
    let active = conv::vrequest(request)
        .index()
        .and_then(|i| OBJ.requests.with(i, |e| matches!(e.recipe, RequestRecipe::Partitioned { active: true, init: ref i, .. } if !i.send)))
        .unwrap_or(false);
    on_request("MPI_Parrived", request, std::iter::empty(), |r| {
        let rc = real!(MPI_Parrived(r, partition, flag));
        // A receive made again by a renewal and started before its sender's init reached it:
        // MPICH 4.0.2 calls it "invalid or inactive" (seen right after restarts, where ranks
        // resume at different times). Nothing has arrived yet, which is what the program hears.
        if rc != MPI_SUCCESS && active && lower::generations_loaded() > 1 {
            // SAFETY: `flag` is the caller's out-pointer, valid for a write.
            unsafe { put(flag, 0) };
            return MPI_SUCCESS;
        }
        rc
    })
}
