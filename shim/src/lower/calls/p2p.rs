//! Point-to-point calls the shim makes itself: the drain's probes and receives, and buffered
//! sends, packed by the shim.

use super::real;
use crate::lower::abi::*;
use std::os::raw::{c_int, c_void};

/// `MPI_Iprobe`.
pub fn iprobe(source: c_int, tag: c_int, comm: MPI_Comm, flag: &mut c_int, st: &mut MPI_Status) -> Option<c_int> {
    real!(MPI_Iprobe(source, tag, comm, flag, st))
}

/// `MPI_Recv_c` of `count` bytes (`MPI_BYTE`) into `data`, which holds them.
pub fn recv_bytes(data: &mut [u8], count: MPI_Count, source: c_int, tag: c_int, comm: MPI_Comm, st: &mut MPI_Status) -> Option<c_int> {
    assert!(count <= data.len() as MPI_Count, "MPI_Recv_c: {count} bytes into {}", data.len());
    real!(MPI_Recv_c(data.as_mut_ptr().cast(), count, MPI_BYTE, source, tag, comm, st))
}

/// `MPI_Pack_size_c`.
pub fn pack_size_c(count: MPI_Count, datatype: MPI_Datatype, comm: MPI_Comm, size: &mut MPI_Count) -> Option<c_int> {
    real!(MPI_Pack_size_c(count, datatype, comm, size))
}

/// `MPI_Pack_c` of `count` elements of `datatype` at `buf`, the program's buffer as its send
/// passed it (readable for them, the program's contract of the call), into `out`.
pub fn pack_c(buf: usize, count: MPI_Count, datatype: MPI_Datatype, out: &mut [u8], pos: &mut MPI_Count, comm: MPI_Comm) -> Option<c_int> {
    real!(MPI_Pack_c(buf as *const c_void, count, datatype, out.as_mut_ptr() as *mut c_void, out.len() as MPI_Count, pos, comm))
}

/// A send of packed bytes the shim owns (`MPI_PACKED`), in flight: the bytes stay allocated
/// and unmoved (a `Vec`'s heap block) until [`PackedSend::test`] saw the request complete.
pub struct PackedSend {
    real: MPI_Request,
    bytes: Vec<u8>,
    done: bool,
}

impl PackedSend {
    /// `MPI_Isend_c` of the first `count` bytes of `bytes`. The send is returned also where the
    /// call failed (its request then is the null request).
    pub fn start(bytes: Vec<u8>, count: MPI_Count, dest: c_int, tag: c_int, comm: MPI_Comm) -> (Option<c_int>, PackedSend) {
        assert!(count <= bytes.len() as MPI_Count, "MPI_Isend_c: {count} bytes of {}", bytes.len());
        let mut s = PackedSend { real: MPI_REQUEST_NULL, bytes, done: false };
        let rc = real!(MPI_Isend_c(s.bytes.as_ptr() as *const c_void, count, MPI_PACKED, dest, tag, comm, &mut s.real));
        (rc, s)
    }

    /// `MPI_Test` of its request, the status ignored.
    pub fn test(&mut self, flag: &mut c_int) -> Option<c_int> {
        let rc = real!(MPI_Test(&mut self.real, &mut *flag, MPI_STATUS_IGNORE));
        if rc == Some(MPI_SUCCESS) && *flag != 0 {
            self.done = true;
        }
        rc
    }

    /// Drops a send whose library was released (every such message was delivered; nothing
    /// reads the bytes any more): they are freed.
    pub fn released(mut self) {
        self.done = true;
    }
}

impl Drop for PackedSend {
    /// A send dropped before it completed leaks its bytes: the library may still read them.
    fn drop(&mut self) {
        if !self.done && self.real != MPI_REQUEST_NULL {
            std::mem::forget(std::mem::take(&mut self.bytes));
        }
    }
}

/// `MPI_Mrecv_c` of `count` bytes (`MPI_BYTE`) of the matched message `msg` into `data`, which
/// holds them.
pub fn mrecv_bytes(data: &mut [u8], count: MPI_Count, msg: &mut MPI_Message, st: &mut MPI_Status) -> Option<c_int> {
    assert!(count <= data.len() as MPI_Count, "MPI_Mrecv_c: {count} bytes into {}", data.len());
    real!(MPI_Mrecv_c(data.as_mut_ptr().cast(), count, MPI_BYTE, msg, st))
}
