//! Requests: completion, cancel, start, and the point-to-point ones made again.
//!
//! A buffer is the program's, given as the address (`usize`) its own call passed, with its
//! count and datatype: the library accesses it as that call did, while the request is pending,
//! under the program's contract (MPI's rules on pending buffers), as in a native run.

use super::real;
use crate::lower::abi::*;
use std::os::raw::{c_int, c_void};

/// `MPI_Test`.
pub fn test(r: &mut MPI_Request, flag: &mut c_int, st: &mut MPI_Status) -> Option<c_int> {
    real!(MPI_Test(r, flag, st))
}

/// `MPI_Request_get_status`, then `MPI_Wait` when it says the request is complete (which
/// returns at once): `None` where the library lacks either (then nothing is called), or the
/// request is not complete.
pub fn wait_if_complete(r: &mut MPI_Request, st: &mut MPI_Status) -> Option<c_int> {
    let f = crate::lower::fns();
    f.MPI_Request_get_status?;
    f.MPI_Wait?;
    let mut flag = 0;
    let rc = real!(MPI_Request_get_status(*r, &mut flag, &mut *st))?;
    if rc != MPI_SUCCESS {
        return Some(rc);
    }
    if flag != 0 {
        real!(MPI_Wait(r, st))
    } else {
        None
    }
}

/// `MPI_Cancel`.
pub fn cancel(r: &mut MPI_Request) -> Option<c_int> {
    real!(MPI_Cancel(r))
}

/// `MPI_Start`.
pub fn start(r: &mut MPI_Request) -> Option<c_int> {
    real!(MPI_Start(r))
}

/// The arguments of a point-to-point call in the library's handles: the program's buffer at
/// `buf`, `count` elements of `datatype`, the peer (source or destination), tag and communicator.
#[derive(Clone, Copy, Debug)]
pub struct RealP2p {
    pub buf: usize,
    pub count: MPI_Count,
    pub datatype: MPI_Datatype,
    pub peer: c_int,
    pub tag: c_int,
    pub comm: MPI_Comm,
}

/// `MPI_Irecv_c`.
pub fn irecv_c(a: &RealP2p, r: &mut MPI_Request) -> Option<c_int> {
    real!(MPI_Irecv_c(a.buf as *mut c_void, a.count, a.datatype, a.peer, a.tag, a.comm, r))
}

/// `MPI_Recv_init_c`.
pub fn recv_init_c(a: &RealP2p, r: &mut MPI_Request) -> Option<c_int> {
    real!(MPI_Recv_init_c(a.buf as *mut c_void, a.count, a.datatype, a.peer, a.tag, a.comm, r))
}

/// The mode of a persistent send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendInit {
    Standard,
    Buffered,
    Synchronous,
    Ready,
}

/// `MPI_{Send,Bsend,Ssend,Rsend}_init_c`.
pub fn send_init_c(mode: SendInit, a: &RealP2p, r: &mut MPI_Request) -> Option<c_int> {
    let (buf, RealP2p { count, datatype, peer, tag, comm, .. }) = (a.buf as *const c_void, *a);
    match mode {
        SendInit::Standard => real!(MPI_Send_init_c(buf, count, datatype, peer, tag, comm, r)),
        SendInit::Buffered => real!(MPI_Bsend_init_c(buf, count, datatype, peer, tag, comm, r)),
        SendInit::Synchronous => real!(MPI_Ssend_init_c(buf, count, datatype, peer, tag, comm, r)),
        SendInit::Ready => real!(MPI_Rsend_init_c(buf, count, datatype, peer, tag, comm, r)),
    }
}

/// `MPI_Unpack_c` of the bytes of `data` into `count` elements of `datatype` in the program's
/// buffer at `buf` (one that holds them: the program's receive of that many).
pub fn unpack_c(data: &[u8], pos: &mut MPI_Count, buf: usize, count: MPI_Count, datatype: MPI_Datatype, comm: MPI_Comm) -> Option<c_int> {
    real!(MPI_Unpack_c(data.as_ptr() as *const c_void, data.len() as MPI_Count, pos, buf as *mut c_void, count, datatype, comm))
}

/// `MPI_Psend_init` (`send`) or `MPI_Precv_init` on the program's buffer at `buf`.
pub fn partitioned_init(
    send: bool,
    buf: usize,
    partitions: c_int,
    count: MPI_Count,
    datatype: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    r: &mut MPI_Request,
) -> Option<c_int> {
    if send {
        real!(MPI_Psend_init(buf as *const c_void, partitions, count, datatype, peer, tag, comm, info, r))
    } else {
        real!(MPI_Precv_init(buf as *mut c_void, partitions, count, datatype, peer, tag, comm, info, r))
    }
}
