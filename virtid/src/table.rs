//! One table per handle kind: a slab of entries behind a mutex (creation, free, checkpoint) and
//! a parallel array of atomics holding the current real handle of each slot (the hot path).
//!
//! Invariant: `reals[i]` is `LIVE | real` exactly while slot `i` holds an entry (plus `HINT`
//! when the table's hint holds for that entry), and is rewritten in place when the lower half
//! is renewed. Readers never take the mutex.

use crate::slots::Slots;
pub use crate::slots::CAPACITY;
use parking_lot::Mutex;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

const LIVE: u64 = 1 << 63;
/// The table's hint holds for the entry (see [`Table::with_hint`]). Real handles keep clear of
/// it: 32-bit handles, and user-space addresses, which stay below bit 57.
const HINT: u64 = 1 << 62;

/// The type a table stores its real handles as: a kind's own handle type (the shim's lower
/// half has one per kind of object), kept in 63 bits. `u64` is the untyped default.
pub trait RealHandle: Copy {
    fn to_bits(self) -> u64;
    fn from_bits(bits: u64) -> Self;
}

impl RealHandle for u64 {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        self
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> Self {
        bits
    }
}

pub struct Table<E, R: RealHandle = u64> {
    reals: Slots<AtomicU64>,
    slab: Mutex<Slab<E>>,
    /// A property of entries that readers may see without the lock ([`Table::real_hinted`]):
    /// evaluated under the lock after every change of an entry, published with its real handle.
    hint: Option<fn(&E) -> bool>,
    _real: PhantomData<fn() -> R>,
}

struct Slab<E> {
    entries: Vec<Option<E>>,
    free: Vec<u32>,
}

/// The table is full (more live objects of one kind than [`CAPACITY`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl<E, R: RealHandle> Default for Table<E, R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E, R: RealHandle> Table<E, R> {
    pub fn new() -> Self {
        Table { reals: Slots::new(), slab: Mutex::new(Slab { entries: Vec::new(), free: Vec::new() }), hint: None, _real: PhantomData }
    }

    /// A table whose readers also learn, without the lock, whether `hint` holds for a live
    /// entry ([`Table::real_hinted`]). Every change of an entry goes through the table's
    /// methods, which evaluate `hint` again under the lock: it can never be stale.
    pub fn with_hint(hint: fn(&E) -> bool) -> Self {
        Table { hint: Some(hint), ..Self::new() }
    }

    /// The real handle of live slot `index`, without locking.
    #[inline(always)]
    pub fn real(&self, index: u32) -> Option<R> {
        self.real_hinted(index).map(|(r, _)| r)
    }

    /// The real handle of live slot `index` and whether the table's hint holds for its entry,
    /// without locking (always false without a hint).
    #[inline(always)]
    pub fn real_hinted(&self, index: u32) -> Option<(R, bool)> {
        let v = self.reals.get(index)?.load(Ordering::Acquire);
        (v & LIVE != 0).then(|| (R::from_bits(v & !(LIVE | HINT)), v & HINT != 0))
    }

    /// The slot word of a live entry with real handle bits `real`.
    fn word(&self, real: u64, entry: &E) -> u64 {
        let hinted = self.hint.is_some_and(|h| h(entry));
        LIVE | (real & !(LIVE | HINT)) | if hinted { HINT } else { 0 }
    }

    /// Publishes the hint of live slot `index` again after its entry changed (lock held).
    fn rehint(&self, index: u32, entry: &E) {
        if self.hint.is_some() {
            let slot = self.slot(index);
            slot.store(self.word(slot.load(Ordering::Relaxed), entry), Ordering::Release);
        }
    }

    fn slot(&self, index: u32) -> &AtomicU64 {
        self.reals.get_or_alloc(index)
    }

    /// Stores a new object and returns its index.
    pub fn insert(&self, real: R, entry: E) -> Result<u32, Full> {
        self.insert_and(real, entry, |_, _| {})
    }

    /// Stores a new object and, before its slot is published and while no other insert or
    /// remove can run, calls `f` with its index and entry (to attach per-slot side data).
    pub fn insert_and(&self, real: R, entry: E, f: impl FnOnce(u32, &E)) -> Result<u32, Full> {
        let mut slab = self.slab.lock();
        let index = match slab.free.pop() {
            Some(i) => i,
            None if slab.entries.len() < CAPACITY => {
                slab.entries.push(None);
                (slab.entries.len() - 1) as u32
            }
            None => return Err(Full),
        };
        f(index, &entry);
        self.slot(index).store(self.word(real.to_bits(), &entry), Ordering::Release);
        slab.entries[index as usize] = Some(entry);
        Ok(index)
    }

    /// Removes an object; `None` if the slot was not live.
    pub fn remove(&self, index: u32) -> Option<E> {
        self.remove_and(index, |_, _| {})
    }

    /// Removes an object and, if it was live, calls `f` with its index and entry while no other
    /// insert or remove can run (to detach per-slot side data before the slot is reused).
    pub fn remove_and(&self, index: u32, f: impl FnOnce(u32, &E)) -> Option<E> {
        let mut slab = self.slab.lock();
        let entry = slab.entries.get_mut(index as usize)?.take()?;
        // (the slot reads as not live before `f` detaches side data; no insert runs meanwhile)
        self.vacate(&mut slab, index);
        f(index, &entry);
        Some(entry)
    }

    /// Marks slot `index`, whose entry is gone, free for reuse (lock held).
    fn vacate(&self, slab: &mut Slab<E>, index: u32) {
        self.slot(index).store(0, Ordering::Release);
        slab.free.push(index);
    }

    /// Points a live slot at a new real handle (after the lower half was renewed).
    pub fn set_real(&self, index: u32, real: R) -> bool {
        let slab = self.slab.lock();
        let Some(Some(entry)) = slab.entries.get(index as usize) else { return false };
        self.slot(index).store(self.word(real.to_bits(), entry), Ordering::Release);
        true
    }

    /// Runs `f` on a live entry.
    pub fn with<T>(&self, index: u32, f: impl FnOnce(&mut E) -> T) -> Option<T> {
        let mut slab = self.slab.lock();
        let entry = slab.entries.get_mut(index as usize)?.as_mut()?;
        let out = f(entry);
        self.rehint(index, entry);
        Some(out)
    }

    /// Runs `f` on a live entry and removes the entry unless `f` returns true, under one lock
    /// (one pass where `with` then `remove` took two). `None` if the slot was not live, else
    /// whether the entry stays.
    pub fn with_or_remove(&self, index: u32, f: impl FnOnce(&mut E) -> bool) -> Option<bool> {
        let mut slab = self.slab.lock();
        let entry = slab.entries.get_mut(index as usize)?.as_mut()?;
        let keep = f(entry);
        if keep {
            self.rehint(index, entry);
        } else {
            slab.entries[index as usize] = None;
            self.vacate(&mut slab, index);
        }
        Some(keep)
    }

    /// Clones a live entry.
    pub fn get(&self, index: u32) -> Option<E>
    where
        E: Clone,
    {
        self.with(index, |e| e.clone())
    }

    /// `f` of every live entry (index, real handle, entry), in index order, all under the lock:
    /// no insert or remove (nor their `insert_and`/`remove_and` side work) happens meanwhile.
    pub fn snapshot_map<T>(&self, mut f: impl FnMut(u32, R, &E) -> T) -> Vec<T> {
        let slab = self.slab.lock();
        slab.entries.iter().enumerate().filter_map(|(i, e)| e.as_ref().map(|e| f(i as u32, self.real(i as u32).unwrap_or(R::from_bits(0)), e))).collect()
    }

    /// Index, real handle and a clone of every live entry, in index order.
    pub fn snapshot(&self) -> Vec<(u32, R, E)>
    where
        E: Clone,
    {
        let slab = self.slab.lock();
        slab.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i as u32, e.clone())))
            .map(|(i, e)| (i, self.real(i).unwrap_or(R::from_bits(0)), e))
            .collect()
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        let slab = self.slab.lock();
        slab.entries.len() - slab.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces the whole content (restoring saved state): entries keep their indices.
    pub fn restore(&self, items: Vec<(u32, R, E)>) {
        let mut slab = self.slab.lock();
        for i in 0..slab.entries.len() as u32 {
            self.slot(i).store(0, Ordering::Release);
        }
        slab.entries.clear();
        slab.free.clear();
        for (index, real, entry) in items {
            let i = index as usize;
            if slab.entries.len() <= i {
                slab.entries.resize_with(i + 1, || None);
            }
            self.slot(index).store(self.word(real.to_bits(), &entry), Ordering::Release);
            slab.entries[i] = Some(entry);
        }
        let free: Vec<u32> = (0..slab.entries.len() as u32).rev().filter(|&i| slab.entries[i as usize].is_none()).collect();
        slab.free = free;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_translate_remove_reuse() {
        let t: Table<&'static str> = Table::new();
        let a = t.insert(0x8400_0001, "a").unwrap();
        let b = t.insert(0x8400_0002, "b").unwrap();
        assert_eq!(t.real(a), Some(0x8400_0001));
        assert_eq!(t.real(b), Some(0x8400_0002));
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.real(a), None);
        assert_eq!(t.remove(a), None, "double free is reported");
        let c = t.insert(7, "c").unwrap();
        assert_eq!(c, a, "freed slots are reused");
        assert_eq!(t.with_or_remove(c, |e| *e == "c"), Some(true), "kept");
        assert_eq!(t.real(c), Some(7));
        assert_eq!(t.with_or_remove(c, |_| false), Some(false), "removed");
        assert_eq!((t.real(c), t.with_or_remove(c, |_| true)), (None, None));
        assert_eq!(t.insert(8, "d"), Ok(c), "a slot removed so is reused");
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn unknown_indices_translate_to_none() {
        let t: Table<()> = Table::new();
        assert_eq!(t.real(0), None);
        assert_eq!(t.real(u32::MAX), None);
        assert_eq!(t.real(CAPACITY as u32 + 5), None);
    }

    #[test]
    fn renewal_rewrites_reals_in_place() {
        let t: Table<u8> = Table::new();
        let i = t.insert(1, 0).unwrap();
        assert!(t.set_real(i, 99));
        assert_eq!(t.real(i), Some(99));
        t.remove(i);
        assert!(!t.set_real(i, 5), "dead slots are not revived");
    }

    #[test]
    fn zero_is_a_valid_real_handle() {
        let t: Table<()> = Table::new();
        let i = t.insert(0, ()).unwrap();
        assert_eq!(t.real(i), Some(0));
    }

    #[test]
    fn crosses_chunk_boundaries() {
        use crate::slots::CHUNK;
        let t: Table<u32> = Table::new();
        for n in 0..(CHUNK as u32 + 10) {
            assert_eq!(t.insert(n as u64, n).unwrap(), n);
        }
        assert_eq!(t.real(CHUNK as u32 + 3), Some(CHUNK as u64 + 3));
    }

    #[test]
    fn snapshot_and_restore_keep_indices() {
        let t: Table<String> = Table::new();
        let a = t.insert(10, "a".into()).unwrap();
        let b = t.insert(11, "b".into()).unwrap();
        t.remove(a);
        let snap = t.snapshot();
        assert_eq!(snap, vec![(b, 11, "b".to_string())]);
        let u: Table<String> = Table::new();
        u.restore(snap);
        assert_eq!(u.real(b), Some(11));
        assert_eq!(u.real(a), None);
        assert_eq!(u.insert(12, "c".into()).unwrap(), a, "holes are reused after restore");
    }

    #[test]
    fn concurrent_readers_see_consistent_values() {
        use std::sync::Arc;
        let t = Arc::new(Table::<u32>::new());
        let idx: Vec<u32> = (0..1000).map(|n| t.insert(n as u64 + 1, n).unwrap()).collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let t = t.clone();
                let idx = idx.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        for &i in &idx {
                            let r = t.real(i).unwrap();
                            assert!(r == i as u64 + 1 || r == i as u64 + 1001);
                        }
                    }
                })
            })
            .collect();
        for &i in &idx {
            t.set_real(i, i as u64 + 1001);
        }
        for r in readers {
            r.join().unwrap();
        }
    }
}
