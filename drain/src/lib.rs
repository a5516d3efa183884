//! Pure logic of the checkpoint drain, free of MPI so it can be unit-tested:
//!
//! * [`Buffer`]: messages received by the shim while draining, matched later by the program's
//!   receives and probes in MPI order (first arrival that matches the envelope; messages from
//!   one source on one communicator are never overtaken).
//! * [`expected_receives`]: the coordinator's transposition of every rank's send counts into
//!   what each rank must have received before the cut is consistent.
//! * [`Progress`]: per (communicator, source) accounting of a rank's drain.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Wildcards of the MPICH ABI.
pub const ANY_SOURCE: i32 = -2;
pub const ANY_TAG: i32 = -1;

/// A message taken out of the network by the drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Job-wide id of the communicator it was sent on.
    pub comm: u64,
    /// Source rank in that communicator (remote group for intercommunicators).
    pub source: i32,
    pub tag: i32,
    /// The payload in the library's packed (contiguous) form. Written as bytes, in one piece:
    /// as a sequence each byte is one write (it may be GiBs); read back as a sequence of `u8`,
    /// which postcard encodes the same way (a length, then the bytes).
    #[serde(serialize_with = "as_bytes")]
    pub data: Vec<u8>,
}

fn as_bytes<S: serde::Serializer>(data: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(data)
}

impl Message {
    pub fn matches(&self, comm: u64, source: i32, tag: i32) -> bool {
        self.comm == comm && (source == ANY_SOURCE || source == self.source) && (tag == ANY_TAG || tag == self.tag)
    }
}

/// Drained messages in arrival order.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Buffer {
    msgs: VecDeque<Message>,
}

impl Buffer {
    /// An empty buffer, usable in a `static`.
    pub const fn new_const() -> Self {
        Buffer { msgs: VecDeque::new() }
    }

    pub fn push(&mut self, m: Message) {
        self.msgs.push_back(m);
    }

    /// Removes and returns the earliest message matching the envelope.
    pub fn take(&mut self, comm: u64, source: i32, tag: i32) -> Option<Message> {
        let i = self.msgs.iter().position(|m| m.matches(comm, source, tag))?;
        self.msgs.remove(i)
    }

    /// The earliest message matching the envelope, left in place (probes).
    pub fn peek(&self, comm: u64, source: i32, tag: i32) -> Option<&Message> {
        self.msgs.iter().find(|m| m.matches(comm, source, tag))
    }

    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    pub fn bytes(&self) -> u64 {
        self.msgs.iter().map(|m| m.data.len() as u64).sum()
    }
}

/// (communicator id, world rank of the peer) -> messages.
pub type Counts = BTreeMap<(u64, i32), u64>;

/// Transposes send reports: `sent[r]` lists (comm, destination world rank, count) for rank `r`;
/// the result lists, for each rank, (comm, source world rank, count) it must receive.
pub fn expected_receives(sent: &[Vec<(u64, i32, u64)>]) -> Vec<Vec<(u64, i32, u64)>> {
    let mut out = vec![Vec::new(); sent.len()];
    for (src, list) in sent.iter().enumerate() {
        for &(comm, dest, n) in list {
            if n > 0 && dest >= 0 && (dest as usize) < out.len() {
                out[dest as usize].push((comm, src as i32, n));
            }
        }
    }
    for v in &mut out {
        v.sort_unstable();
    }
    out
}

/// A rank received more messages from a peer than the peer reported sending.
#[derive(Debug, thiserror::Error)]
#[error("rank received {got} messages from world rank {src} on communicator {comm:#x} but only {sent} were sent")]
pub struct TooManyReceived {
    pub got: u64,
    pub src: i32,
    pub comm: u64,
    pub sent: u64,
}

/// A rank's drain: how many messages it must still receive per (communicator, source).
#[derive(Debug, Default, Clone)]
pub struct Progress {
    missing: Counts,
}

impl Progress {
    /// `expected`: what peers sent; `received`: what this rank has received so far.
    pub fn new(expected: &[(u64, i32, u64)], received: &Counts) -> Result<Self, TooManyReceived> {
        let mut missing = Counts::new();
        for &(comm, src, n) in expected {
            let got = received.get(&(comm, src)).copied().unwrap_or(0);
            if got > n {
                return Err(TooManyReceived { got, src, comm, sent: n });
            }
            if got < n {
                missing.insert((comm, src), n - got);
            }
        }
        Ok(Progress { missing })
    }

    /// Records one more received message; false if none was expected from there.
    pub fn received(&mut self, comm: u64, src: i32) -> bool {
        match self.missing.get_mut(&(comm, src)) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.missing.remove(&(comm, src));
                }
                true
            }
            None => false,
        }
    }

    pub fn done(&self) -> bool {
        self.missing.is_empty()
    }

    pub fn outstanding(&self) -> u64 {
        self.missing.values().sum()
    }

    /// Communicators that still expect messages (to probe only those).
    pub fn comms(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.missing.keys().map(|k| k.0).collect();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(comm: u64, source: i32, tag: i32, byte: u8) -> Message {
        Message { comm, source, tag, data: vec![byte] }
    }

    #[test]
    fn matching_keeps_arrival_order_per_envelope() {
        let mut b = Buffer::default();
        b.push(msg(1, 0, 5, 1));
        b.push(msg(1, 1, 5, 2));
        b.push(msg(1, 0, 5, 3));
        b.push(msg(2, 0, 5, 4));
        assert_eq!(b.take(1, 0, 5).unwrap().data, vec![1], "first message from 0 first");
        assert_eq!(b.take(1, ANY_SOURCE, ANY_TAG).unwrap().data, vec![2]);
        assert_eq!(b.take(1, 0, ANY_TAG).unwrap().data, vec![3]);
        assert!(b.take(1, ANY_SOURCE, ANY_TAG).is_none(), "other communicators never match");
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn tags_select_without_overtaking_others() {
        let mut b = Buffer::default();
        b.push(msg(1, 0, 7, 1));
        b.push(msg(1, 0, 8, 2));
        assert_eq!(b.peek(1, 0, 8).unwrap().data, vec![2]);
        assert_eq!(b.take(1, 0, 8).unwrap().data, vec![2]);
        assert_eq!(b.take(1, 0, 7).unwrap().data, vec![1]);
        assert!(b.is_empty());
    }

    #[test]
    fn payload_encodes_as_a_sequence_of_bytes() {
        // (state files written before the payload was serialized as bytes still read back)
        #[derive(Serialize)]
        struct Seq {
            comm: u64,
            source: i32,
            tag: i32,
            data: Vec<u8>,
        }
        let m = Message { comm: 7, source: 1, tag: 3, data: (0..=255u8).collect() };
        let bytes = postcard::to_stdvec(&m).unwrap();
        let seq = Seq { comm: 7, source: 1, tag: 3, data: m.data.clone() };
        assert_eq!(bytes, postcard::to_stdvec(&seq).unwrap());
        assert_eq!(postcard::from_bytes::<Message>(&bytes).unwrap(), m);
    }

    #[test]
    fn transposition() {
        // rank 0 sent 3 to rank 1 on comm 9; rank 1 sent 1 to rank 0 on comm 9 and 2 on comm 4.
        let sent = vec![vec![(9, 1, 3)], vec![(9, 0, 1), (4, 0, 2)], vec![]];
        let exp = expected_receives(&sent);
        assert_eq!(exp[0], vec![(4, 1, 2), (9, 1, 1)]);
        assert_eq!(exp[1], vec![(9, 0, 3)]);
        assert!(exp[2].is_empty());
    }

    #[test]
    fn progress_counts_down_to_done() {
        let mut got = Counts::new();
        got.insert((9, 0), 1);
        let mut p = Progress::new(&[(9, 0, 3), (4, 2, 1)], &got).unwrap();
        assert_eq!(p.outstanding(), 3);
        assert!(p.received(9, 0));
        assert!(p.received(4, 2));
        assert!(!p.received(4, 2), "unexpected messages are reported");
        assert!(!p.done());
        assert!(p.received(9, 0));
        assert!(p.done());
    }

    #[test]
    fn more_received_than_sent_is_an_error() {
        let mut got = Counts::new();
        got.insert((9, 0), 5);
        assert!(Progress::new(&[(9, 0, 3)], &got).is_err());
    }
}
