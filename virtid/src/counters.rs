//! The hot-path bookkeeping of communicators, kept beside their [`Table`](crate::Table) and
//! updated without locks: how many collectives each communicator started (checkpoint
//! alignment) and how many messages it sent to and received from each peer (drain accounting).
//!
//! Each live slot points to one [`CommCounters`] block holding atomics, one send and one receive
//! counter per peer, sized by the communicator's (remote) group when it is created. Blocks are
//! attached and detached under the table's lock (`Table::insert_and` / `remove_and`) and are
//! never freed while the [`Counters`] lives: a detached block goes to a pool and is reused, zeroed,
//! by a later communicator with as many peers. A thread that still holds a block of a freed
//! communicator therefore touches valid memory; at worst it counts for the communicator that
//! reused the block, as it would have counted for one that reused the slot.
//!
//! Exactness: every update is made by a thread inside the shim's gate, and the gate's close waits
//! until every thread has left it (its leave is a release, the wait an acquire), so totals read
//! while the gate is closed are exact. Read while it is open, they are a moment's view.

use crate::slots::Slots;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Counters of one communicator. All fields are atomics: a block is shared by every thread
/// that uses the communicator, and reused after it is freed.
#[derive(Debug)]
pub struct CommCounters {
    gid: AtomicU64,
    alone: AtomicBool,
    collectives: AtomicU64,
    sent: Box<[AtomicU64]>,
    recvd: Box<[AtomicU64]>,
}

/// A plain copy of one communicator's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountsSnapshot {
    pub collectives: u64,
    pub sent: Vec<u64>,
    pub recvd: Vec<u64>,
}

impl CommCounters {
    fn new(peers: usize) -> Self {
        let zeros = || (0..peers).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        CommCounters { gid: AtomicU64::new(0), alone: AtomicBool::new(false), collectives: AtomicU64::new(0), sent: zeros(), recvd: zeros() }
    }

    /// Counters of no communicator's slot: collective-like starts of something else that must
    /// be aligned between processes (a partitioned send/receive pair), under id `gid`.
    pub fn detached(gid: u64, alone: bool) -> Self {
        let c = Self::new(0);
        c.reset(gid, alone);
        c
    }

    fn reset(&self, gid: u64, alone: bool) {
        self.gid.store(gid, Ordering::Relaxed);
        self.alone.store(alone, Ordering::Relaxed);
        self.collectives.store(0, Ordering::Relaxed);
        for n in self.sent.iter().chain(self.recvd.iter()) {
            n.store(0, Ordering::Relaxed);
        }
    }

    /// The communicator's global id (constant while it lives).
    #[inline(always)]
    pub fn gid(&self) -> u64 {
        self.gid.load(Ordering::Relaxed)
    }

    /// One process and no remote group: its collectives never wait for alignment.
    #[inline(always)]
    pub fn alone(&self) -> bool {
        self.alone.load(Ordering::Relaxed)
    }

    /// Counts a message sent to `peer` (ignored when out of range, e.g. MPI_PROC_NULL).
    #[inline(always)]
    pub fn count_sent(&self, peer: i32) {
        if let Some(n) = usize::try_from(peer).ok().and_then(|p| self.sent.get(p)) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a message received from `peer` (ignored when out of range).
    #[inline(always)]
    pub fn count_recvd(&self, peer: i32) {
        if let Some(n) = usize::try_from(peer).ok().and_then(|p| self.recvd.get(p)) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Collectives started so far (sequentially consistent: see `start_collective`).
    pub fn collectives(&self) -> u64 {
        self.collectives.load(Ordering::SeqCst)
    }

    /// Counts one more collective and returns its number. Sequentially consistent, so that a
    /// caller that counts first and then reads a flag (the shim's "aligning") and a reader that
    /// sets the flag and then reads this counter cannot both miss the other.
    #[inline]
    pub fn start_collective(&self) -> u64 {
        self.collectives.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Counts collective number `collectives() + 1` only if `may_start` allows that number, and
    /// returns it; `None` (nothing counted) when it may not start yet.
    #[inline]
    pub fn start_collective_if(&self, may_start: impl Fn(u64) -> bool) -> Option<u64> {
        let mut cur = self.collectives.load(Ordering::SeqCst);
        loop {
            if !may_start(cur + 1) {
                return None;
            }
            match self.collectives.compare_exchange_weak(cur, cur + 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Some(cur + 1),
                Err(now) => cur = now,
            }
        }
    }

    /// Sets every counter from a copy (a process restarted from saved state).
    pub fn load(&self, c: &CountsSnapshot) {
        self.collectives.store(c.collectives, Ordering::SeqCst);
        for (n, v) in self.sent.iter().zip(&c.sent) {
            n.store(*v, Ordering::Relaxed);
        }
        for (n, v) in self.recvd.iter().zip(&c.recvd) {
            n.store(*v, Ordering::Relaxed);
        }
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> CountsSnapshot {
        let load = |v: &[AtomicU64]| v.iter().map(|n| n.load(Ordering::Relaxed)).collect();
        CountsSnapshot { collectives: self.collectives(), sent: load(&self.sent), recvd: load(&self.recvd) }
    }
}

/// A block owned by [`Counters`]; shared read-only (its fields are atomics).
struct Block(NonNull<CommCounters>);
// SAFETY: a `Block` is only a pointer to a `CommCounters`, whose fields are all atomics (Sync),
// and the memory is freed only by `Counters::drop`, which has exclusive access.
#[allow(unsafe_code)]
unsafe impl Send for Block {}

/// Per-slot counters of a communicator table; see the module documentation.
pub struct Counters {
    slots: Slots<AtomicPtr<CommCounters>>,
    /// Detached blocks, by number of peers, waiting to be reused.
    pool: Mutex<HashMap<usize, Vec<Block>>>,
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

impl Counters {
    pub fn new() -> Self {
        Counters { slots: Slots::new(), pool: Mutex::new(HashMap::new()) }
    }

    /// The counters of live slot `index`, without locking.
    #[inline(always)]
    pub fn get(&self, index: u32) -> Option<&CommCounters> {
        let p = self.slots.get(index)?.load(Ordering::Acquire);
        // SAFETY: a non-null pointer in a slot came from `attach` (a leaked `Box`) and is freed
        // only by `drop`, which cannot run while `self` is borrowed.
        #[allow(unsafe_code)]
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Gives slot `index` zeroed counters for `peers` peers. Call it under the table's lock
    /// (`Table::insert_and`), so that it never races a detach of the same slot.
    pub fn attach(&self, index: u32, gid: u64, alone: bool, peers: usize) {
        let reused = self.pool.lock().get_mut(&peers).and_then(Vec::pop);
        let block = reused.unwrap_or_else(|| Block(NonNull::from(Box::leak(Box::new(CommCounters::new(peers))))));
        // SAFETY: blocks are valid until `drop` (see `get`); this one is not published yet, or was
        // detached, and its fields are atomics, so sharing it with stale readers is sound.
        #[allow(unsafe_code)]
        unsafe { block.0.as_ref() }.reset(gid, alone);
        let old = self.slots.get_or_alloc(index).swap(block.0.as_ptr(), Ordering::AcqRel);
        debug_assert!(old.is_null(), "counters attached twice to slot {index}");
        if let Some(old) = NonNull::new(old) {
            self.release(old);
        }
    }

    /// Takes slot `index`'s counters away (under the table's lock, `Table::remove_and`).
    pub fn detach(&self, index: u32) {
        let Some(cell) = self.slots.get(index) else { return };
        if let Some(old) = NonNull::new(cell.swap(std::ptr::null_mut(), Ordering::AcqRel)) {
            self.release(old);
        }
    }

    fn release(&self, block: NonNull<CommCounters>) {
        // SAFETY: see `get`.
        #[allow(unsafe_code)]
        let peers = unsafe { block.as_ref() }.sent.len();
        self.pool.lock().entry(peers).or_default().push(Block(block));
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        let attached = self.slots.each().filter_map(|(_, p)| NonNull::new(p.swap(std::ptr::null_mut(), Ordering::AcqRel)));
        let pooled = self.pool.get_mut().drain().flat_map(|(_, v)| v.into_iter().map(|b| b.0));
        for p in attached.collect::<Vec<_>>().into_iter().chain(pooled) {
            // SAFETY: every block came from `Box::leak` in `attach`, is owned by exactly one of
            // the slots or the pool, and `&mut self` proves no reference to it is alive.
            #[allow(unsafe_code)]
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Table;
    use std::sync::Arc;

    #[test]
    fn counts_per_peer_and_ignores_out_of_range() {
        let c = Counters::new();
        c.attach(3, 42, false, 2);
        let b = c.get(3).unwrap();
        b.count_sent(1);
        b.count_sent(1);
        b.count_sent(2);
        b.count_sent(-1);
        b.count_recvd(0);
        assert_eq!(b.gid(), 42);
        assert_eq!(b.snapshot(), CountsSnapshot { collectives: 0, sent: vec![0, 2], recvd: vec![1, 0] });
        assert!(c.get(4).is_none());
        assert!(c.get(u32::MAX).is_none());
    }

    #[test]
    fn collectives_are_numbered_from_one() {
        let c = Counters::new();
        c.attach(0, 1, false, 1);
        let b = c.get(0).unwrap();
        assert_eq!(b.start_collective(), 1);
        assert_eq!(b.start_collective(), 2);
        assert_eq!(b.collectives(), 2);
        assert_eq!(b.start_collective_if(|n| n <= 3), Some(3));
        assert_eq!(b.start_collective_if(|n| n <= 3), None);
        assert_eq!(b.collectives(), 3, "a collective that may not start is not counted");
    }

    #[test]
    fn detached_blocks_are_reused_zeroed() {
        let c = Counters::new();
        c.attach(0, 1, false, 3);
        let first = c.get(0).unwrap() as *const CommCounters;
        c.get(0).unwrap().count_sent(2);
        c.detach(0);
        assert!(c.get(0).is_none());
        c.attach(5, 2, true, 3);
        let b = c.get(5).unwrap();
        assert_eq!(b as *const CommCounters, first, "same size: the block is reused");
        assert_eq!(b.snapshot(), CountsSnapshot { collectives: 0, sent: vec![0; 3], recvd: vec![0; 3] });
        assert!(b.alone());
        c.attach(6, 3, false, 4);
        assert_ne!(c.get(6).unwrap() as *const CommCounters, first, "another size: a new block");
        assert_eq!(c.get(6).unwrap().snapshot().sent, vec![0; 4]);
    }

    /// Threads counting while a table's communicators come and go: no update is lost on a
    /// communicator that stays live, and freeing never disturbs the counters of another slot.
    #[test]
    fn concurrent_counting_is_exact() {
        let table = Arc::new(Table::<u64>::new());
        let counters = Arc::new(Counters::new());
        let keep = table.insert_and(0, 9, |i, g| counters.attach(i, *g, false, 4)).unwrap();
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let counters = counters.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let b = counters.get(keep).unwrap();
                        b.count_sent(t);
                        b.count_recvd(3 - t);
                        b.start_collective();
                    }
                })
            })
            .collect();
        for n in 0..1000 {
            let i = table.insert_and(0, n, |i, g| counters.attach(i, *g, false, 4)).unwrap();
            table.remove_and(i, |i, _| counters.detach(i));
        }
        for w in workers {
            w.join().unwrap();
        }
        let s = counters.get(keep).unwrap().snapshot();
        assert_eq!(s, CountsSnapshot { collectives: 40_000, sent: vec![10_000; 4], recvd: vec![10_000; 4] });
    }
}
