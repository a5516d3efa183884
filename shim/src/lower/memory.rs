//! Memory mappings the shim makes or removes itself: windows' memory (`MPI_Win_allocate`'s,
//! shared segments mapped again at their old addresses) and the released library's leftovers.
//!
//! Addresses are `usize`: these are ranges the callers keep records of (a window's entry, the
//! process's maps); each function says which ranges it may be given.

use std::os::raw::c_void;

/// The page size (at least 4096).
pub fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

/// A fresh private anonymous read-write mapping of `len` bytes, anywhere; `None` where mmap
/// failed.
pub fn map_anywhere(len: usize) -> Option<usize> {
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    (p != libc::MAP_FAILED).then_some(p as usize)
}

/// A fresh private anonymous mapping of `len` bytes at `at`, where nothing may be mapped
/// (`MAP_FIXED_NOREPLACE`): readable and writable, or inaccessible (a reservation). Returns
/// where mmap put it (`at` when it succeeded).
pub fn map_at(at: usize, len: usize, writable: bool) -> usize {
    let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_NONE };
    // SAFETY: a new mapping where nothing may be mapped (NOREPLACE): no existing memory is
    // affected.
    (unsafe { libc::mmap(at as *mut c_void, len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE, -1, 0) }) as usize
}

/// [`map_at`] (read-write) of `bytes.len()` bytes rounded up to pages, with `bytes` put in it.
/// `Err`: where mmap put it, and the error.
pub fn map_at_with(at: usize, bytes: &[u8]) -> Result<(), (usize, std::io::Error)> {
    let len = bytes.len().div_ceil(page()) * page();
    let p = map_at(at, len, true);
    if p != at {
        return Err((p, std::io::Error::last_os_error()));
    }
    // SAFETY: the mapping just made holds at least `bytes.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
    Ok(())
}

/// Unmaps `start..start + len`: a range only the shim or a released library used (a window's
/// memory the shim mapped and the program freed, a freed window's segment, a released
/// library's shared memory); no Rust object lives there.
pub fn unmap(start: usize, len: usize) {
    // SAFETY: as the caller guarantees above: nothing that runs any more refers to the range.
    unsafe { libc::munmap(start as *mut c_void, len) };
}

/// Maps the pages at `start..start + len` (a library's shared mapping) a second time at `at`,
/// over the reservation [`map_at`] made there (`mremap` of old size 0). Returns where it went
/// (`at` when it succeeded).
pub fn alias(start: usize, len: usize, at: usize) -> usize {
    // SAFETY: old size 0 asks for a second mapping of the same pages; MREMAP_FIXED places it
    // over `at`, the caller's reservation, which only the shim uses. (The system call itself:
    // glibc's variadic wrapper was seen to return null here.)
    (unsafe { libc::syscall(libc::SYS_mremap, start, 0usize, len, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, at) }) as usize
}

/// Copies `len` bytes at `at`: memory the caller's record says is mapped and that size (a
/// window's memory in this rank).
pub fn read(at: usize, len: usize) -> Vec<u8> {
    // SAFETY: as the caller guarantees: `len` readable bytes at `at`.
    unsafe { std::slice::from_raw_parts(at as *const u8, len) }.to_vec()
}

/// Puts `bytes` at `at`: memory the caller's record says is mapped, writable and at least
/// that large (this rank's part of a shared segment mapped again).
pub fn write(at: usize, bytes: &[u8]) {
    // SAFETY: as the caller guarantees: `bytes.len()` writable bytes at `at`, apart from `bytes`.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
}
