//! Matched-probe messages (MPI_Improbe/MPI_Mprobe): the communicator, the size, and whether
//! the message came from the shim's buffer of drained messages. A checkpoint's drain receives
//! the messages still in the library into that buffer, where `MPI_Mrecv` finds them.

use super::{RebuildError, Renewable};
use crate::core::kinds::comm::comm_gid;
use crate::core::state::OBJ;
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::handles::RealMessage;
use mpicr_drain::Message;
use mpicr_virtid::table::Full;
use mpicr_virtid::{VComm, VMessage};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MessageEntry {
    pub comm: VComm,
    /// A message matched from the shim's buffer of drained messages, rather than the library.
    pub drained: Option<u64>,
    /// Size in bytes (from the probe's status), to receive it into the drain buffer.
    pub bytes: i64,
}

/// Registers a matched message (`RealMessage(0)` for one taken from the drained buffer).
/// `Err` when the table is full.
pub fn register(real: RealMessage, entry: MessageEntry) -> Result<VMessage, Full> {
    OBJ.messages.insert(real, entry).map(VMessage::virtual_at)
}

/// Drained messages claimed by a matched probe, by message index.
pub static CLAIMED: parking_lot::Mutex<Vec<(u32, Message)>> = parking_lot::Mutex::new(Vec::new());

/// Receives the matched-probe messages still in the library into [`CLAIMED`] (the drain's last
/// step, once every rank drained).
pub fn drain_matched() -> Result<(), RebuildError> {
    for (idx, real, m) in OBJ.messages.snapshot() {
        if m.drained.is_some() {
            continue;
        }
        let mut msg = real.raw();
        let mut data = vec![0u8; m.bytes.max(0) as usize];
        let mut st = MPI_Status::default();
        // `data` holds its bytes.
        let rc = calls::p2p::mrecv_bytes(&mut data, m.bytes, &mut msg, &mut st).unwrap_or(MPI_ERR_OTHER);
        if rc != MPI_SUCCESS {
            return Err(RebuildError::MatchedProbe);
        }
        let gid = comm_gid(m.comm).unwrap_or(0);
        OBJ.messages.with(idx, |x| x.drained = Some(0));
        OBJ.messages.set_real(idx, RealMessage(0));
        CLAIMED.lock().push((idx, Message { comm: gid, source: st.MPI_SOURCE, tag: st.MPI_TAG, data }));
    }
    Ok(())
}

/// Messages around a checkpoint: after the drain none is left in the library.
pub struct Renew;

impl Renewable for Renew {}
