//! One table per handle kind: a slab of entries behind a mutex (creation, free, checkpoint) and
//! a parallel array of atomics holding the current real handle of each slot (the hot path).
//!
//! Invariant: `reals[i]` is `LIVE | real` exactly while slot `i` holds an entry, and is
//! rewritten in place when the lower half is renewed. Readers never take the mutex.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
const MAX_CHUNKS: usize = 4096;
/// Slots a table can hold at once.
pub const CAPACITY: usize = CHUNK * MAX_CHUNKS;
const LIVE: u64 = 1 << 63;

struct Chunk([AtomicU64; CHUNK]);

pub struct Table<E> {
    chunks: Box<[AtomicPtr<Chunk>]>,
    slab: Mutex<Slab<E>>,
}

struct Slab<E> {
    entries: Vec<Option<E>>,
    free: Vec<u32>,
}

/// The table is full (more live objects of one kind than [`CAPACITY`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl<E> Default for Table<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> Table<E> {
    pub fn new() -> Self {
        let chunks = (0..MAX_CHUNKS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect();
        Table { chunks, slab: Mutex::new(Slab { entries: Vec::new(), free: Vec::new() }) }
    }

    /// The real handle of live slot `index`, without locking.
    #[inline(always)]
    pub fn real(&self, index: u32) -> Option<u64> {
        let chunk = self.chunks.get((index >> CHUNK_BITS) as usize)?.load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        let chunk: &Chunk = chunk_ref(chunk);
        let v = chunk.0[index as usize & (CHUNK - 1)].load(Ordering::Acquire);
        (v & LIVE != 0).then_some(v & !LIVE)
    }

    fn slot(&self, index: u32) -> &AtomicU64 {
        let cell = &self.chunks[(index >> CHUNK_BITS) as usize];
        let mut chunk = cell.load(Ordering::Acquire);
        if chunk.is_null() {
            // Only called with the slab lock held, so no two threads allocate the same chunk.
            let fresh = Box::into_raw(Box::new(Chunk(std::array::from_fn(|_| AtomicU64::new(0)))));
            cell.store(fresh, Ordering::Release);
            chunk = fresh;
        }
        &chunk_ref(chunk).0[index as usize & (CHUNK - 1)]
    }

    /// Stores a new object and returns its index.
    pub fn insert(&self, real: u64, entry: E) -> Result<u32, Full> {
        let mut slab = self.slab.lock();
        let index = match slab.free.pop() {
            Some(i) => i,
            None if slab.entries.len() < CAPACITY => {
                slab.entries.push(None);
                (slab.entries.len() - 1) as u32
            }
            None => return Err(Full),
        };
        slab.entries[index as usize] = Some(entry);
        self.slot(index).store(LIVE | real, Ordering::Release);
        Ok(index)
    }

    /// Removes an object; `None` if the slot was not live.
    pub fn remove(&self, index: u32) -> Option<E> {
        let mut slab = self.slab.lock();
        let entry = slab.entries.get_mut(index as usize)?.take()?;
        self.slot(index).store(0, Ordering::Release);
        slab.free.push(index);
        Some(entry)
    }

    /// Points a live slot at a new real handle (after the lower half was renewed).
    pub fn set_real(&self, index: u32, real: u64) -> bool {
        let slab = self.slab.lock();
        if !matches!(slab.entries.get(index as usize), Some(Some(_))) {
            return false;
        }
        self.slot(index).store(LIVE | real, Ordering::Release);
        true
    }

    /// Runs `f` on a live entry.
    pub fn with<R>(&self, index: u32, f: impl FnOnce(&mut E) -> R) -> Option<R> {
        let mut slab = self.slab.lock();
        slab.entries.get_mut(index as usize)?.as_mut().map(f)
    }

    /// Clones a live entry.
    pub fn get(&self, index: u32) -> Option<E>
    where
        E: Clone,
    {
        self.with(index, |e| e.clone())
    }

    /// Index, real handle and a clone of every live entry, in index order.
    pub fn snapshot(&self) -> Vec<(u32, u64, E)>
    where
        E: Clone,
    {
        let slab = self.slab.lock();
        slab.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i as u32, e.clone())))
            .map(|(i, e)| (i, self.real(i).unwrap_or(0), e))
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
    pub fn restore(&self, items: Vec<(u32, u64, E)>) {
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
            slab.entries[i] = Some(entry);
            self.slot(index).store(LIVE | real, Ordering::Release);
        }
        let free: Vec<u32> = (0..slab.entries.len() as u32).rev().filter(|&i| slab.entries[i as usize].is_none()).collect();
        slab.free = free;
    }
}

/// Chunks are allocated with `Box::into_raw` in `slot` and freed only by `Drop`, which has
/// exclusive access, so a shared reference derived while the table is borrowed is valid.
#[allow(unsafe_code)]
fn chunk_ref<'a>(p: *mut Chunk) -> &'a Chunk {
    // SAFETY: `p` is non-null and points to a live chunk owned by the borrowed table (see above).
    unsafe { &*p }
}

impl<E> Drop for Table<E> {
    fn drop(&mut self) {
        for cell in self.chunks.iter() {
            let p = cell.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                #[allow(unsafe_code)]
                // SAFETY: `p` came from `Box::into_raw` and no reference outlives `&mut self`.
                drop(unsafe { Box::from_raw(p) });
            }
        }
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
