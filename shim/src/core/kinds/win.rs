//! Windows: what a checkpoint needs to make every RMA window again on a renewed library, over
//! the same memory and in the same synchronisation state.
//!
//! - Every window is made on a private duplicate of the program's communicator, registered
//!   among the communicators (`comm`) like a file's: the communicator kind rebuilds it, and
//!   `MPI_Win_fence` and `MPI_Win_free` are counted on it as collectives for the alignment.
//! - Memory: `MPI_Win_create` windows are made again over the program's memory;
//!   `MPI_Win_allocate` memory is mapped by the shim (so it is in the CRIU image and stays at
//!   its address) and the real window is an `MPI_Win_create` over it; dynamic windows get their
//!   attachments again; `MPI_Win_allocate_shared` segments are the library's: a checkpoint saves
//!   this rank's part, and the renewal allocates a new segment on the same ranks and maps it
//!   again at the old segment's address (`mremap` of a shared mapping with old size 0 aliases
//!   the same pages), so that every address the program holds (its base, `MPI_Win_shared_query`
//!   answers) stays valid.
//! - Epochs: the gate closes only while this rank has no passive-target or PSCW epoch open
//!   ([`open_epoch`], asked by the checkpoint); a fence epoch may be open (fences are aligned
//!   like collectives): operations issued since the last fence are completed by one more fence
//!   in [`Renew::snapshot`], and the renewal opens a fence epoch again with `MPI_MODE_NOPRECEDE`.
//!
//! Windows are walked in the order of their communicators' job-wide ids, the same on every
//! rank: fences, frees and creations are collective.

use super::{check, info, RebuildError, Renewable};
use crate::core::handles;
use crate::core::state::{Attrs, OBJ};
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::object::{Kind, Named};
use crate::lower::handles::RealWin;
use crate::lower::memory;
use mpicr_virtid::table::Full;
use mpicr_virtid::{VComm, VErrhandler, VWin};
use serde::{Deserialize, Serialize};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

/// Registers a window the library made; `library_memory`: its memory is the library's own
/// where the shim meant to map it (see [`Renew::refusal`]). `Err` when the table is full.
pub fn register(real: RealWin, entry: WinEntry, library_memory: bool) -> Result<VWin, Full> {
    let i = OBJ.wins.insert(real, entry)?;
    set_library_memory(i, library_memory);
    Ok(VWin::virtual_at(i))
}

/// The real window of a live one, without locking (`None` for a foreign, freed or null one).
#[inline(always)]
pub fn real(v: VWin) -> Option<RealWin> {
    OBJ.wins.real(v.index()?)
}

/// Runs `f` on the entry of a live window (`None` for a foreign, freed or null one).
pub fn with<T>(v: VWin, f: impl FnOnce(&mut WinEntry) -> T) -> Option<T> {
    OBJ.wins.with(v.index()?, f)
}

/// Forgets a window the program freed: its entry, and whether its memory was the library's.
pub fn forget(v: VWin) -> Option<(WinEntry, bool)> {
    let i = v.index()?;
    OBJ.wins.remove(i).map(|e| (e, set_library_memory(i, false)))
}

/// The private communicator of a window (`NULL` for a handle that is not a live window's).
pub fn comm_of(v: VWin) -> VComm {
    with(v, |e| e.comm).unwrap_or(VComm::NULL)
}

/// How the window's memory came to be (`MPI_WIN_FLAVOR_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Flavor {
    Create,
    Allocate,
    Dynamic,
    Shared,
}

impl Flavor {
    pub fn attr(self) -> c_int {
        match self {
            Flavor::Create => MPI_WIN_FLAVOR_CREATE,
            Flavor::Allocate => MPI_WIN_FLAVOR_ALLOCATE,
            Flavor::Dynamic => MPI_WIN_FLAVOR_DYNAMIC,
            Flavor::Shared => MPI_WIN_FLAVOR_SHARED,
        }
    }
}

/// A shared window's segment as this process maps it: page-aligned, every rank's part in it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Segment {
    pub start: usize,
    pub len: usize,
    /// Where the library mapped the current generation's segment (the renewal aliases it at
    /// `start`); `start` itself before the first renewal.
    pub real_start: usize,
    /// This rank's part, saved at the checkpoint (its bytes are not in the image otherwise).
    pub saved: Vec<u8>,
}

/// The synchronisation state of the window on this rank.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Epoch {
    /// A fence epoch is open: the last fence lacked `MPI_MODE_NOSUCCEED`.
    pub fence: bool,
    /// `MPI_Win_lock`s held: (lock type, target rank).
    pub locks: Vec<(c_int, c_int)>,
    pub lock_all: bool,
    /// An exposure epoch (`MPI_Win_post`) not yet waited for, and an access epoch
    /// (`MPI_Win_start`) not yet completed.
    pub post: bool,
    pub start: bool,
}

impl Epoch {
    /// The passive-target or PSCW epoch open, named as the user sees it.
    pub fn open(&self) -> Option<&'static str> {
        if !self.locks.is_empty() {
            Some("an MPI_Win_lock epoch")
        } else if self.lock_all {
            Some("an MPI_Win_lock_all epoch")
        } else if self.start {
            Some("an MPI_Win_start access epoch")
        } else if self.post {
            Some("an MPI_Win_post exposure epoch")
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WinEntry {
    pub errhandler: VErrhandler,
    pub attrs: Attrs,
    pub made_by: String,
    pub flavor: Flavor,
    /// The base the program was given (or gave), its size in bytes and displacement unit.
    pub base: usize,
    pub size: MPI_Aint,
    pub disp_unit: MPI_Aint,
    /// The private communicator the real window is made on (virtual handle), and its job-wide id.
    pub comm: VComm,
    pub gid: u64,
    /// Hints given at the creation and by `MPI_Win_set_info`.
    pub hints: Vec<(String, String)>,
    /// The name read back at the checkpoint (`MPI_Win_set_name`).
    pub name: Option<String>,
    /// Memory attached to a dynamic window: (base, size).
    pub attached: Vec<(usize, MPI_Aint)>,
    pub segment: Option<Segment>,
    pub epoch: Epoch,
    /// An app-mode rank's `MPI_Win_allocate` memory, saved at the checkpoint: a restarted
    /// app-mode process is not restored from an image, so the bytes travel in `shim.state`
    /// ([`map_saved`]). Empty otherwise.
    pub saved: Vec<u8>,
}

impl WinEntry {
    #[allow(clippy::too_many_arguments, reason = "one argument per property a window is made with")]
    pub fn new(made_by: &str, flavor: Flavor, base: usize, size: MPI_Aint, disp_unit: MPI_Aint, comm: VComm, gid: u64, hints: Vec<(String, String)>) -> Self {
        WinEntry {
            errhandler: VErrhandler::ERRORS_ARE_FATAL,
            attrs: Vec::new(),
            made_by: made_by.into(),
            flavor,
            base,
            size,
            disp_unit,
            comm,
            gid,
            hints,
            name: None,
            attached: Vec::new(),
            segment: None,
            epoch: Epoch::default(),
            saved: Vec::new(),
        }
    }

    /// An address the current generation's library gave for this shared window, as the
    /// program sees it (the segment aliased at its first address).
    pub fn program_address(&self, real: usize) -> usize {
        match &self.segment {
            Some(s) if real >= s.real_start && real < s.real_start + s.len => real - s.real_start + s.start,
            _ => real,
        }
    }
}

fn page() -> usize {
    memory::page()
}

/// Memory for `MPI_Win_allocate`, mapped by the shim: private, so in the CRIU image, and at an
/// address no renewal touches. Null for zero bytes.
pub fn map_owned(size: MPI_Aint) -> Option<usize> {
    if size <= 0 {
        return Some(0);
    }
    let len = (size as usize).div_ceil(page()) * page();
    memory::map_anywhere(len)
}

/// A restarted app-mode process (`core::app`), before the library is loaded: maps the memory
/// of each `MPI_Win_allocate` window at its old address (the program keeps that address in its
/// saved data) and puts the saved bytes back. A fresh process has nothing there yet; it runs
/// without address-space randomisation, like the one that made the window.
pub fn map_saved() -> Result<(), RebuildError> {
    for (_, _, e) in ordered() {
        if e.flavor != Flavor::Allocate || e.saved.is_empty() {
            continue;
        }
        if let Err((_, err)) = memory::map_at_with(e.base, &e.saved) {
            return Err(RebuildError::WinMemory { made_by: e.made_by.clone(), base: e.base, len: e.saved.len(), err });
        }
    }
    Ok(())
}

/// Windows (table indices) from `MPI_Win_allocate` whose memory is the library's own: Open MPI
/// refused a window over the shim's mapping (`face::api::rma`). Kept beside the entries, not in
/// them: a checkpoint is refused while one lives ([`Renew::refusal`]), so none is ever saved.
static LIBRARY_MEMORY: parking_lot::Mutex<Vec<u32>> = parking_lot::Mutex::new(Vec::new());

/// Marks window `idx` as holding the library's memory (its creation), or forgets it (its free);
/// returns whether it was marked.
fn set_library_memory(idx: u32, on: bool) -> bool {
    let mut v = LIBRARY_MEMORY.lock();
    let was = v.contains(&idx);
    v.retain(|&i| i != idx);
    if on {
        v.push(idx);
    }
    was
}

/// Unmaps memory of [`map_owned`] (at the program's `MPI_Win_free`).
pub fn unmap_owned(base: usize, size: MPI_Aint) {
    if base != 0 && size > 0 {
        let len = (size as usize).div_ceil(page()) * page();
        // The mapping made by `map_owned` for a window the program freed.
        memory::unmap(base, len);
    }
}

/// The page-aligned extent of a shared window's segment: every rank's part, as
/// `MPI_Win_shared_query` reports it on the real window `w` of `n` ranks.
pub fn segment_of(w: MPI_Win, n: c_int) -> Option<(usize, usize)> {
    let (mut lo, mut hi) = (usize::MAX, 0usize);
    for r in 0..n {
        let (mut size, mut du, mut base): (MPI_Aint, c_int, usize) = (0, 0, 0);
        let rc = calls::win::shared_query(w, r, &mut size, &mut du, &mut base)?;
        if rc != MPI_SUCCESS {
            return None;
        }
        if size > 0 && base != 0 {
            lo = lo.min(base);
            hi = hi.max(base + size as usize);
        }
    }
    if lo >= hi {
        return None;
    }
    let p = page();
    let start = lo / p * p;
    Some((start, hi.div_ceil(p) * p - start))
}

/// The passive-target or PSCW epoch open on this rank, if any, named for the user: the
/// checkpoint closes its gate only when there is none (operations of such an epoch cannot be
/// completed by the shim alone, and a peer may wait for its end).
pub fn open_epoch() -> Option<String> {
    OBJ.wins.snapshot().into_iter().find_map(|(_, _, w)| {
        w.epoch.open().map(|what| format!("{what} is open on the window from {} ({})", w.made_by, w.name.as_deref().unwrap_or("unnamed")))
    })
}

/// Does this rank hold any window epoch other than a fence's? New locks wait while a
/// checkpoint closes the gate only where this is false (nobody can wait for this rank then).
pub fn any_epoch_open() -> bool {
    OBJ.wins.snapshot().iter().any(|(_, _, w)| w.epoch.open().is_some())
}

/// Set by the checkpoint while it waits for this rank's epochs to end (see [`open_epoch`]).
static HOLDING: AtomicBool = AtomicBool::new(false);

/// Holds new passive-target epochs of a rank that has none open, or lets them go again.
pub fn hold_epochs(on: bool) {
    HOLDING.store(on, Ordering::SeqCst);
}

pub fn holding_epochs() -> bool {
    HOLDING.load(Ordering::SeqCst)
}

/// Waits (outside the gate) a moment for the checkpoint to stop holding new epochs.
pub fn wait_while_holding() {
    std::thread::sleep(std::time::Duration::from_millis(1));
}

/// Windows in the order every rank walks them (their communicators' job-wide ids).
fn ordered() -> Vec<(u32, RealWin, WinEntry)> {
    let mut w = OBJ.wins.snapshot();
    w.sort_by_key(|(_, _, e)| e.gid);
    w
}

/// The window kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    /// A window whose memory is the library's (see [`set_library_memory`]) cannot be carried:
    /// that memory goes with the released library, and Open MPI 4.1's osc/sm at 1 rank
    /// `malloc`s it, so it cannot be mapped again at the address the program holds.
    fn refusal(&self) -> Option<String> {
        let idx = *LIBRARY_MEMORY.lock().first()?;
        let made_by = OBJ.wins.with(idx, |e| e.made_by.clone()).unwrap_or_else(|| "MPI_Win_allocate".into());
        Some(format!(
            "the RMA window from {made_by} cannot be checkpointed: its memory is the MPI library's own (the library refused a window over mpicr's memory, as Open MPI 4.1 does for a 1-process window), free it before the checkpoint"
        ))
    }

    /// Every rank drained and no passive-target or PSCW epoch is open: fence epochs are
    /// completed, names read back and shared segments saved.
    fn snapshot(&self) {
        let t = std::time::Instant::now();
        let wins = ordered();
        for (idx, real, e) in &wins {
            let w = real.raw();
            if e.epoch.fence {
                // Collective, in the same order on every rank (fences are aligned).
                calls::win::fence(MPI_MODE_NOSUCCEED, w);
            }
            let name = calls::object::name(Named::Win, w);
            let keep = e.size > 0 && (e.flavor == Flavor::Shared || (e.flavor == Flavor::Allocate && crate::core::app::enabled()));
            // This rank's part of the live shared segment, or the shim's own mapping of an
            // allocated window: `size` bytes at `base`.
            let saved = keep.then(|| memory::read(e.base, e.size as usize));
            OBJ.wins.with(*idx, |x| {
                x.name = name;
                match (x.segment.as_mut(), saved) {
                    (Some(s), Some(b)) => s.saved = b,
                    (None, Some(b)) => x.saved = b,
                    _ => {}
                }
            });
        }
        if !wins.is_empty() {
            tracing::debug!(target: "renew", windows = wins.len(), us = t.elapsed().as_micros() as u64, "completed fence epochs and saved the windows");
        }
    }

    /// Frees every real window (collective, in the same order on every rank).
    fn free_real(&self) {
        for (idx, real, _) in ordered() {
            let mut w = real.raw();
            if w == MPI_WIN_NULL {
                continue;
            }
            calls::object::free(Kind::Win, &mut w);
            OBJ.wins.set_real(idx, RealWin(MPI_WIN_NULL));
            if let Some(s) = OBJ.wins.with(idx, |e| e.segment.clone()).flatten() {
                // The program's view of the segment goes with it (its part was saved): the
                // renewal maps the new one there. The segment's range, which only the freed
                // window used.
                memory::unmap(s.start, s.len);
            }
        }
    }

    /// Shared segments: their old ranges are reserved before the library maps anything, so
    /// that the renewal can map the new segments there.
    fn before_renewal(&self) -> Result<(), RebuildError> {
        for (_, _, e) in ordered() {
            let Some(s) = &e.segment else { continue };
            // A new inaccessible mapping where nothing may be mapped (NOREPLACE).
            let p = memory::map_at(s.start, s.len, false);
            if p != s.start {
                let err = std::io::Error::last_os_error();
                return Err(RebuildError::SharedReserve { made_by: e.made_by.clone(), start: s.start, len: s.len, err });
            }
        }
        Ok(())
    }

    fn rebuild(&self) -> Result<(), RebuildError> {
        let t = std::time::Instant::now();
        let wins = ordered();
        for (idx, _, e) in &wins {
            let w = make(e).map_err(|why| RebuildError::Window { made_by: e.made_by.clone(), source: Box::new(why) })?;
            OBJ.wins.set_real(*idx, RealWin(w));
            restore(w, *idx, e).map_err(|why| RebuildError::Window { made_by: e.made_by.clone(), source: Box::new(why) })?;
        }
        if !wins.is_empty() {
            tracing::debug!(target: "renew", windows = wins.len(), us = t.elapsed().as_micros() as u64, "made the windows again");
        }
        Ok(())
    }
}

/// Makes the real window of `e` on the renewed library (collective on its communicator).
fn make(e: &WinEntry) -> Result<MPI_Win, RebuildError> {
    let comm = handles::comm(e.comm).raw();
    let hints = info::build(&e.hints)?;
    let mut w = MPI_WIN_NULL;
    let du = e.disp_unit;
    // The memory is the program's (create), the shim's own mapping (allocate), or the
    // library's (shared), valid for `size` bytes.
    let rc = match e.flavor {
        Flavor::Create | Flavor::Allocate => match c_int::try_from(du) {
            Ok(du) => calls::win::create(e.base, e.size, du, hints, comm, &mut w),
            Err(_) => calls::win::create_c(e.base, e.size, du, hints, comm, &mut w),
        }
        .unwrap_or(MPI_ERR_OTHER),
        Flavor::Dynamic => calls::win::create_dynamic(hints, comm, &mut w).unwrap_or(MPI_ERR_OTHER),
        Flavor::Shared => {
            let mut base = 0usize;
            let rc = match c_int::try_from(du) {
                Ok(du) => calls::win::allocate_shared(e.size, du, hints, comm, &mut base, &mut w),
                Err(_) => calls::win::allocate_shared_c(e.size, du, hints, comm, &mut base, &mut w),
            }
            .unwrap_or(MPI_ERR_OTHER);
            if rc == MPI_SUCCESS {
                info::free(hints);
                return alias_segment(e, w, base).map(|_| w);
            }
            rc
        }
    };
    info::free(hints);
    check(rc, "making the window again")?;
    Ok(w)
}

/// Maps the renewed shared segment at the old one's address and puts this rank's part back.
fn alias_segment(e: &WinEntry, w: MPI_Win, new_base: usize) -> Result<(), RebuildError> {
    let Some(s) = &e.segment else { return Ok(()) };
    let mut n = 0;
    calls::comm::comm_size(handles::comm(e.comm).raw(), &mut n);
    let (start, len) = segment_of(w, n).ok_or(RebuildError::SegmentQuery)?;
    if len != s.len || new_base.wrapping_sub(start) != e.base.wrapping_sub(s.start) {
        return Err(RebuildError::SegmentLayout { len, part: new_base - start, old_len: s.len });
    }
    // `start..start+len` is the library's shared mapping of the new segment, mapped again over
    // the reservation made by `before_renewal` (which only the shim uses).
    let p = memory::alias(start, len, s.start);
    if p != s.start {
        let err = std::io::Error::last_os_error();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let seg = maps
            .lines()
            .filter(|l| {
                let a = l.split('-').next().and_then(|a| usize::from_str_radix(a, 16).ok()).unwrap_or(0);
                a <= start + len && a + (1 << 24) >= start
            })
            .collect::<Vec<_>>()
            .join(" | ");
        return Err(RebuildError::SegmentMap { start, len, at: s.start, err, got: p, maps: seg });
    }
    if !s.saved.is_empty() {
        // This rank's part of the segment, now mapped at its old address, is as large as what
        // was saved from it.
        memory::write(e.base, &s.saved);
    }
    Ok(())
}

/// Gives a renewed real window what the program had set and the state it was in.
fn restore(w: MPI_Win, idx: u32, e: &WinEntry) -> Result<(), RebuildError> {
    // `w` is the live real window just made; the attached memory is the program's, still
    // attached in its view.
    calls::win::set_errhandler(w, MPI_ERRORS_RETURN);
    for &(base, size) in &e.attached {
        check(calls::win::attach(w, base, size).unwrap_or(MPI_ERR_OTHER), "MPI_Win_attach")?;
    }
    if let Some(name) = e.name.as_ref().and_then(|n| std::ffi::CString::new(n.as_str()).ok()) {
        calls::object::set_name(Named::Win, w, &name);
    }
    if let Some(s) = &e.segment {
        // Every rank's part is back before any rank's program reads it.
        check(calls::comm::barrier(handles::comm(e.comm).raw()).unwrap_or(MPI_ERR_OTHER), "MPI_Barrier")?;
        let start = segment_of(w, comm_size(e.comm)).map_or(s.start, |(st, _)| st);
        OBJ.wins.with(idx, |x| {
            if let Some(seg) = x.segment.as_mut() {
                seg.real_start = start;
                seg.saved = Vec::new();
            }
        });
    }
    if !e.saved.is_empty() {
        OBJ.wins.with(idx, |x| x.saved = Vec::new());
    }
    if e.epoch.fence {
        check(calls::win::fence(MPI_MODE_NOPRECEDE, w).unwrap_or(MPI_ERR_OTHER), "MPI_Win_fence")?;
    }
    Ok(())
}

fn comm_size(comm: VComm) -> c_int {
    let mut n = 0;
    calls::comm::comm_size(handles::comm(comm).raw(), &mut n);
    n
}
