//! A lazily grown array of per-slot atomics, indexed like a [`Table`](crate::Table): chunks of
//! `CHUNK` cells are allocated on first use and never moved or freed before the array is
//! dropped, so a reference to a cell stays valid for as long as the array is borrowed. Readers
//! never lock.

use std::sync::atomic::{AtomicPtr, Ordering};

pub(crate) const CHUNK_BITS: u32 = 12;
pub(crate) const CHUNK: usize = 1 << CHUNK_BITS;
pub(crate) const MAX_CHUNKS: usize = 4096;
/// Slots an array (and so a table) can hold.
pub const CAPACITY: usize = CHUNK * MAX_CHUNKS;

struct Chunk<T>([T; CHUNK]);

pub(crate) struct Slots<T> {
    chunks: Box<[AtomicPtr<Chunk<T>>]>,
}

impl<T: Default> Slots<T> {
    pub(crate) fn new() -> Self {
        Slots { chunks: (0..MAX_CHUNKS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect() }
    }

    /// The cell of `index` if its chunk exists (never allocates).
    #[inline(always)]
    pub(crate) fn get(&self, index: u32) -> Option<&T> {
        let chunk = self.chunks.get((index >> CHUNK_BITS) as usize)?.load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        Some(&chunk_ref(chunk).0[index as usize & (CHUNK - 1)])
    }

    /// The cell of `index`, allocating its chunk on first use. Panics past [`CAPACITY`].
    pub(crate) fn get_or_alloc(&self, index: u32) -> &T {
        let cell = &self.chunks[(index >> CHUNK_BITS) as usize];
        let mut chunk = cell.load(Ordering::Acquire);
        if chunk.is_null() {
            let fresh = Box::into_raw(Box::new(Chunk(std::array::from_fn(|_| T::default()))));
            match cell.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => chunk = fresh,
                Err(winner) => {
                    // Another thread allocated this chunk first; ours was never shared.
                    #[allow(unsafe_code)]
                    // SAFETY: `fresh` came from `Box::into_raw` just above and was never published.
                    drop(unsafe { Box::from_raw(fresh) });
                    chunk = winner;
                }
            }
        }
        &chunk_ref(chunk).0[index as usize & (CHUNK - 1)]
    }

    /// Every allocated cell with its index, in index order.
    pub(crate) fn each(&self) -> impl Iterator<Item = (u32, &T)> {
        self.chunks.iter().enumerate().flat_map(|(c, cell)| {
            let p = cell.load(Ordering::Acquire);
            let cells: &[T] = if p.is_null() { &[] } else { &chunk_ref(p).0 };
            cells.iter().enumerate().map(move |(k, t)| (((c << CHUNK_BITS) + k) as u32, t))
        })
    }
}

/// Chunks are allocated with `Box::into_raw` in `get_or_alloc` and freed only by `Drop`, which
/// has exclusive access, so a shared reference derived while the array is borrowed is valid.
#[allow(unsafe_code)]
fn chunk_ref<'a, T>(p: *mut Chunk<T>) -> &'a Chunk<T> {
    // SAFETY: `p` is non-null and points to a live chunk owned by the borrowed array (see above).
    unsafe { &*p }
}

impl<T> Drop for Slots<T> {
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
