//! One-sided communication: windows are virtualised and carried through checkpoints
//! (`core::kinds::win`): each is made on a private duplicate of the program's communicator, on
//! which fences and the free are counted as collectives for the checkpoint's alignment; the
//! synchronisation calls record the epochs they open and close; `MPI_Win_allocate` memory is
//! the shim's own mapping.

use crate::core::gate;
use crate::core::kinds::win::{self, Flavor, Segment, WinEntry};
use crate::core::state::OBJ;
use crate::face::abi::*;
use crate::face::api::coll::begin_collective;
use crate::face::api::put;
use crate::face::api::request::register_request;
use crate::face::call::{self, On, ToReal};
use crate::face::{conv, errors};
use mpicr_virtid::RequestRecipe;
use std::os::raw::{c_int, c_void};

/// Makes a window: duplicates `comm` (the window's own communicator, see `core::kinds::win`),
/// lets `make` create the real window on the duplicate (given the real info; it returns the
/// base, and whether that memory is the library's own where the shim meant to map it: see
/// `win_allocate`), and registers it. `size` and `disp_unit` are the program's.
#[allow(clippy::too_many_arguments)]
unsafe fn create_win(
    name: &'static str,
    comm: MPI_Comm,
    info: MPI_Info,
    flavor: Flavor,
    size: MPI_Aint,
    disp_unit: MPI_Aint,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
    make: impl FnOnce(MPI_Comm, MPI_Info, &mut MPI_Win) -> Result<(usize, bool), c_int>,
) -> c_int {
    let (g, seq) = begin_collective(comm);
    call::run_in(g, name, On::Comm(comm), || {
        let (c, i) = (call::Comm(comm).to_real()?, call::Info(info).to_real()?);
        let mut dup = MPI_COMM_NULL;
        call::ok(real!(MPI_Comm_dup(c, &mut dup)))?;
        let mut w = MPI_WIN_NULL;
        let (base, library_memory) = match make(dup, i, &mut w) {
            Ok(b) => b,
            Err(rc) => {
                // The communicator duplicated above, freed once.
                let _ = real!(MPI_Comm_free(&mut dup));
                return Err(rc);
            }
        };
        let _ = real!(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
        let own = crate::face::api::comm::register_derived(dup, name, comm, seq);
        let parent = conv::comm_index(comm).and_then(|p| OBJ.comms.with(p, |c| c.restorable)).unwrap_or(true);
        let gid = conv::comm_index(own)
            .and_then(|o| {
                OBJ.comms.with(o, |c| {
                    c.restorable = parent;
                    c.recipe.gid
                })
            })
            .unwrap_or(0);
        let mut e = WinEntry::new(name, flavor, base, size, disp_unit, conv::vcomm(own), gid, crate::core::kinds::info::entries(i));
        if flavor == Flavor::Shared {
            let mut n = 0;
            let _ = real!(MPI_Comm_size(dup, &mut n));
            e.segment = win::segment_of(w, n).map(|(start, len)| Segment { start, len, real_start: start, saved: Vec::new() });
        }
        let v = match win::register(crate::lower::handles::RealWin(w), e, library_memory) {
            Ok(v) => conv::win_abi(v),
            Err(_) => errors::fatal("too many live windows"),
        };
        // SAFETY: `win` and `baseptr` are the caller's out-pointers (for a handle and for a
        // `void *`), null or valid for a write as MPI requires (this function's contract).
        unsafe {
            put(win, v);
            if !baseptr.is_null() {
                put(baseptr as *mut *mut c_void, base as *mut c_void);
            }
        }
        Ok(())
    })
}

macro_rules! win_create {
    ($name:ident, $du:ty, $real:ident) => {
        pub unsafe fn $name(base: *mut c_void, size: MPI_Aint, disp_unit: $du, info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win) -> c_int {
            // SAFETY: the program's memory, passed on unchanged; out-pointers as MPI requires.
            unsafe {
                create_win(stringify!($name), comm, info, Flavor::Create, size, disp_unit as MPI_Aint, std::ptr::null_mut(), win, |c, i, w| {
                    call::ok(real!($real(base, size, disp_unit, i, c, w))).map(|_| (base as usize, false))
                })
            }
        }
    };
}
win_create!(MPI_Win_create, c_int, MPI_Win_create);
win_create!(MPI_Win_create_c, MPI_Aint, MPI_Win_create_c);

/// `MPI_Win_allocate`: the shim maps the memory (`core::kinds::win::map_owned`) and the real
/// window is made over it, so that it survives renewals at the same address. Open MPI
/// underneath may refuse that `MPI_Win_create` where it serves `MPI_Win_allocate`: Open MPI
/// 4.1 at 1 rank has no one-sided component for a created window (osc/rdma finds no transport
/// to itself, osc/pt2pt is off in Debian's configuration) but osc/sm allocates one. Then the
/// real window is the library's own `MPI_Win_allocate`, as natively, and a checkpoint is
/// refused while it lives (`core::kinds::win`: its memory is the library's).
macro_rules! win_allocate {
    ($name:ident, $du:ty, $real:ident, $alloc:ident) => {
        pub unsafe fn $name(size: MPI_Aint, disp_unit: $du, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) -> c_int {
            if size < 0 {
                return errors::raise_comm(comm, MPI_ERR_ARG, stringify!($name));
            }
            // SAFETY: out-pointers as MPI requires; the memory is the shim's fresh mapping, or
            // the library's (its base written to a local first).
            unsafe {
                create_win(stringify!($name), comm, info, Flavor::Allocate, size, disp_unit as MPI_Aint, baseptr, win, |c, i, w| {
                    let base = win::map_owned(size).ok_or(MPI_ERR_NO_MEM)?;
                    match call::ok(real!($real(base as *mut c_void, size, disp_unit, i, c, w))) {
                        Ok(()) => Ok((base, false)),
                        Err(rc) => {
                            win::unmap_owned(base, size);
                            if !crate::lower::current().is_open_mpi() {
                                return Err(rc);
                            }
                            // Every rank's Open MPI refuses alike (its component selection
                            // depends on the communicator only), so all ranks get here.
                            let mut base: *mut c_void = std::ptr::null_mut();
                            call::ok(real!($alloc(size, disp_unit, i, c, (&mut base as *mut *mut c_void).cast(), w))).map(|_| (base as usize, true))
                        }
                    }
                })
            }
        }
    };
}
win_allocate!(MPI_Win_allocate, c_int, MPI_Win_create, MPI_Win_allocate);
win_allocate!(MPI_Win_allocate_c, MPI_Aint, MPI_Win_create_c, MPI_Win_allocate_c);

macro_rules! win_allocate_shared {
    ($name:ident, $du:ty) => {
        pub unsafe fn $name(size: MPI_Aint, disp_unit: $du, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) -> c_int {
            // SAFETY: out-pointers as MPI requires; the base is written to a local first.
            unsafe {
                create_win(stringify!($name), comm, info, Flavor::Shared, size, disp_unit as MPI_Aint, baseptr, win, |c, i, w| {
                    let mut base: *mut c_void = std::ptr::null_mut();
                    call::ok(real!($name(size, disp_unit, i, c, (&mut base as *mut *mut c_void).cast(), w))).map(|_| (base as usize, false))
                })
            }
        }
    };
}
win_allocate_shared!(MPI_Win_allocate_shared, c_int);
win_allocate_shared!(MPI_Win_allocate_shared_c, MPI_Aint);

pub unsafe fn MPI_Win_create_dynamic(info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win) -> c_int {
    // SAFETY: out-pointers as MPI requires.
    unsafe {
        create_win("MPI_Win_create_dynamic", comm, info, Flavor::Dynamic, 0, 1, std::ptr::null_mut(), win, |c, i, w| {
            call::ok(real!(MPI_Win_create_dynamic(i, c, w))).map(|_| (0, false))
        })
    }
}

/// The private communicator of a window (`MPI_COMM_NULL` for a handle that is not a live
/// window's: nothing is counted, the library reports it).
fn win_comm(win: MPI_Win) -> MPI_Comm {
    conv::comm_abi(win::comm_of(conv::vwin(win)))
}

/// Runs a real call on a window inside the gate and, when it succeeds, updates the window's
/// entry.
fn on_win(name: &str, win: MPI_Win, g: gate::Guard, real_call: impl FnOnce(MPI_Win) -> c_int, then: impl FnOnce(&mut WinEntry)) -> c_int {
    call::run_in(g, name, On::Win(win), || {
        let w = call::CheckedWin(win).to_real()?;
        call::ok(real_call(w))?;
        win::with(conv::vwin(win), then);
        Ok(())
    })
}

pub unsafe fn MPI_Win_attach(win: MPI_Win, base: *mut c_void, size: MPI_Aint) -> c_int {
    on_win("MPI_Win_attach", win, gate::enter(), |w| real!(MPI_Win_attach(w, base, size)), |e| e.attached.push((base as usize, size)))
}

pub unsafe fn MPI_Win_detach(win: MPI_Win, base: *const c_void) -> c_int {
    on_win(
        "MPI_Win_detach",
        win,
        gate::enter(),
        |w| real!(MPI_Win_detach(w, base)),
        |e| {
            if let Some(k) = e.attached.iter().position(|&(b, _)| b == base as usize) {
                e.attached.remove(k);
            }
        },
    )
}

pub unsafe fn MPI_Win_set_info(win: MPI_Win, info: MPI_Info) -> c_int {
    let hints = std::cell::Cell::new(Vec::new());
    on_win(
        "MPI_Win_set_info",
        win,
        gate::enter(),
        |w| {
            let i = conv::info(info);
            hints.set(crate::core::kinds::info::entries(i));
            real!(MPI_Win_set_info(w, i))
        },
        |e| crate::core::kinds::file::merge_hints(&mut e.hints, hints.take()),
    )
}

/// A fence: collective on the window's group, counted on its communicator like a collective.
pub unsafe fn MPI_Win_fence(assert: c_int, win: MPI_Win) -> c_int {
    let (g, _) = begin_collective(win_comm(win));
    on_win("MPI_Win_fence", win, g, |w| real!(MPI_Win_fence(assert, w)), |e| e.epoch.fence = assert & MPI_MODE_NOSUCCEED == 0)
}

/// Enters the gate to open a passive-target epoch: while a checkpoint waits for this rank's
/// epochs to close, a rank that holds none opens no new one (nobody can be waiting for it).
fn enter_for_lock() -> gate::Guard {
    loop {
        let g = gate::enter();
        if !win::holding_epochs() || win::any_epoch_open() {
            return g;
        }
        drop(g);
        win::wait_while_holding();
    }
}

pub unsafe fn MPI_Win_lock(lock_type: c_int, rank: c_int, assert: c_int, win: MPI_Win) -> c_int {
    on_win("MPI_Win_lock", win, enter_for_lock(), |w| real!(MPI_Win_lock(lock_type, rank, assert, w)), |e| e.epoch.locks.push((lock_type, rank)))
}

pub unsafe fn MPI_Win_unlock(rank: c_int, win: MPI_Win) -> c_int {
    on_win(
        "MPI_Win_unlock",
        win,
        gate::enter(),
        |w| real!(MPI_Win_unlock(rank, w)),
        |e| {
            if let Some(k) = e.epoch.locks.iter().position(|&(_, r)| r == rank) {
                e.epoch.locks.remove(k);
            }
        },
    )
}

pub unsafe fn MPI_Win_lock_all(assert: c_int, win: MPI_Win) -> c_int {
    on_win("MPI_Win_lock_all", win, enter_for_lock(), |w| real!(MPI_Win_lock_all(assert, w)), |e| e.epoch.lock_all = true)
}

pub unsafe fn MPI_Win_unlock_all(win: MPI_Win) -> c_int {
    on_win("MPI_Win_unlock_all", win, gate::enter(), |w| real!(MPI_Win_unlock_all(w)), |e| e.epoch.lock_all = false)
}

pub unsafe fn MPI_Win_post(group: MPI_Group, assert: c_int, win: MPI_Win) -> c_int {
    on_win("MPI_Win_post", win, gate::enter(), |w| real!(MPI_Win_post(conv::group(group), assert, w)), |e| e.epoch.post = true)
}

pub unsafe fn MPI_Win_start(group: MPI_Group, assert: c_int, win: MPI_Win) -> c_int {
    on_win("MPI_Win_start", win, gate::enter(), |w| real!(MPI_Win_start(conv::group(group), assert, w)), |e| e.epoch.start = true)
}

pub unsafe fn MPI_Win_complete(win: MPI_Win) -> c_int {
    on_win("MPI_Win_complete", win, gate::enter(), |w| real!(MPI_Win_complete(w)), |e| e.epoch.start = false)
}

/// Tests for the end of the exposure epoch (the end of `MPI_Win_wait` too).
pub unsafe fn MPI_Win_test(win: MPI_Win, flag: *mut c_int) -> c_int {
    let done = std::cell::Cell::new(0);
    let rc = on_win(
        "MPI_Win_test",
        win,
        gate::enter(),
        |w| {
            let mut d = 0;
            let rc = real!(MPI_Win_test(w, &mut d));
            done.set(d);
            rc
        },
        |e| {
            if done.get() != 0 {
                e.epoch.post = false
            }
        },
    );
    // SAFETY: `flag` is the caller's out-pointer, null or valid for a write (MPI's contract).
    unsafe { put(flag, done.get()) };
    rc
}

/// `MPI_Win_wait` as a loop of `MPI_Win_test`, each in the gate: a rank waiting for its origins
/// can be stopped by a checkpoint (which lets the epoch end before closing the gate).
pub unsafe fn MPI_Win_wait(win: MPI_Win) -> c_int {
    let mut spins = 0u32;
    loop {
        let mut done = 0;
        // SAFETY: a local flag.
        let rc = unsafe { MPI_Win_test(win, &mut done) };
        if rc != MPI_SUCCESS || done != 0 {
            return rc;
        }
        spins = spins.saturating_add(1);
        if spins > 64 {
            std::thread::sleep(std::time::Duration::from_micros(20));
        } else {
            std::thread::yield_now();
        }
    }
}

/// Addresses of a shared window's segment as the program sees them (the renewal maps each new
/// segment at the first one's address).
macro_rules! shared_query {
    ($name:ident, $du:ty) => {
        pub unsafe fn $name(win: MPI_Win, rank: c_int, size: *mut MPI_Aint, disp_unit: *mut $du, baseptr: *mut c_void) -> c_int {
            let mut base: *mut c_void = std::ptr::null_mut();
            let rc = on_win(stringify!($name), win, gate::enter(), |w| real!($name(w, rank, size, disp_unit, (&mut base as *mut *mut c_void).cast())), |_| {});
            if rc == MPI_SUCCESS {
                let b = win::with(conv::vwin(win), |e| e.program_address(base as usize)).unwrap_or(base as usize);
                // SAFETY: `baseptr` is the caller's out-pointer for a `void *` (MPI's contract).
                unsafe { put(baseptr as *mut *mut c_void, b as *mut c_void) };
            }
            rc
        }
    };
}
shared_query!(MPI_Win_shared_query, c_int);
shared_query!(MPI_Win_shared_query_c, MPI_Aint);

/// Collective on the window's group: counted on its communicator, which is freed with it.
pub unsafe fn MPI_Win_free(win: *mut MPI_Win) -> c_int {
    if win.is_null() {
        let _g = gate::enter();
        return errors::raise_default(real!(MPI_Win_free(win)), "MPI_Win_free");
    }
    // SAFETY: `win` points to the caller's handle (MPI's contract of this call).
    let v = unsafe { *win };
    let rc = crate::face::api::attr::delete_all_win_attrs(v);
    if rc != MPI_SUCCESS {
        return errors::raise_win(v, rc, "MPI_Win_free");
    }
    let (g, _) = begin_collective(win_comm(v));
    let mut r = conv::win(v);
    let rc = real!(MPI_Win_free(&mut r));
    let entry = (rc == MPI_SUCCESS).then(|| win::forget(conv::vwin(v))).flatten();
    if let Some((e, _)) = &entry {
        if let Some(idx) = crate::core::handles::comm_index(e.comm) {
            let mut c = crate::core::handles::comm(e.comm).raw();
            let _ = real!(MPI_Comm_free(&mut c));
            OBJ.comms.remove(idx);
        }
    }
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_win(v, rc, "MPI_Win_free");
    }
    if let Some((e, library_memory)) = entry {
        if e.flavor == Flavor::Allocate && !library_memory {
            win::unmap_owned(e.base, e.size);
        }
    }
    // SAFETY: as above.
    unsafe { *win = MPI_WIN_NULL };
    MPI_SUCCESS
}

/// The answers of the predefined window attributes the shim changes: the flavor (an allocated
/// window is an `MPI_Win_create` underneath) and a shared window's base. `None`: the
/// library's answer stands.
pub fn predefined_attr(win: MPI_Win, keyval: c_int) -> Option<usize> {
    static FLAVORS: [c_int; 5] = [0, MPI_WIN_FLAVOR_CREATE, MPI_WIN_FLAVOR_ALLOCATE, MPI_WIN_FLAVOR_DYNAMIC, MPI_WIN_FLAVOR_SHARED];
    let (flavor, base) = win::with(conv::vwin(win), |e| (e.flavor.attr(), e.base))?;
    match keyval {
        MPI_WIN_CREATE_FLAVOR => Some(&FLAVORS[flavor as usize] as *const c_int as usize),
        MPI_WIN_BASE if flavor == MPI_WIN_FLAVOR_SHARED || flavor == MPI_WIN_FLAVOR_ALLOCATE => Some(base),
        _ => None,
    }
}

/// A request-based RMA call: runs `call` (handles are translated inside, under the gate) and
/// wraps the request it returns (not restorable while pending).
unsafe fn rma_request(name: &str, win: MPI_Win, request: *mut MPI_Request, real_call: impl FnOnce(&mut c_int) -> c_int) -> c_int {
    call::run(name, On::Win(win), || {
        let mut r = MPI_REQUEST_NULL;
        call::ok(real_call(&mut r))?;
        let v = register_request(r, RequestRecipe::Other { function: name.into() }, MPI_COMM_NULL, false);
        // SAFETY: `request` is the caller's out-pointer, null or valid for a write (this
        // function's contract: MPI's of the request-based RMA calls).
        unsafe { put(request, v) };
        Ok(())
    })
}

macro_rules! rput_like {
    ($name:ident, $count:ty, $($buf:ident : $bt:ty),*) => {
        pub unsafe fn $name(
            $($buf: $bt,)* origin_count: $count, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint,
            target_count: $count, target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request,
        ) -> c_int {
            // SAFETY: the caller's buffers and `request` are passed through under MPI's contract of this
            // call; the handles are translated.
            unsafe { rma_request(stringify!($name), win, request, |r| real!($name($($buf,)* origin_count, conv::datatype(origin_datatype), target_rank, target_disp, target_count,
                conv::datatype(target_datatype), conv::win(win), r))) }
        }
    };
}

rput_like!(MPI_Rput, c_int, origin_addr: *const c_void);
rput_like!(MPI_Rput_c, MPI_Count, origin_addr: *const c_void);
rput_like!(MPI_Rget, c_int, origin_addr: *mut c_void);
rput_like!(MPI_Rget_c, MPI_Count, origin_addr: *mut c_void);

macro_rules! raccumulate {
    ($name:ident, $count:ty) => {
        pub unsafe fn $name(
            origin_addr: *const c_void,
            origin_count: $count,
            origin_datatype: MPI_Datatype,
            target_rank: c_int,
            target_disp: MPI_Aint,
            target_count: $count,
            target_datatype: MPI_Datatype,
            op: MPI_Op,
            win: MPI_Win,
            request: *mut MPI_Request,
        ) -> c_int {
            // SAFETY: the caller's buffer and `request` are passed through under MPI's contract of this call;
            // the handles are translated.
            unsafe {
                rma_request(stringify!($name), win, request, |r| {
                    real!($name(
                        origin_addr,
                        origin_count,
                        conv::datatype(origin_datatype),
                        target_rank,
                        target_disp,
                        target_count,
                        conv::datatype(target_datatype),
                        conv::op(op),
                        conv::win(win),
                        r
                    ))
                })
            }
        }
    };
}

raccumulate!(MPI_Raccumulate, c_int);
raccumulate!(MPI_Raccumulate_c, MPI_Count);

macro_rules! rget_accumulate {
    ($name:ident, $count:ty) => {
        pub unsafe fn $name(
            origin_addr: *const c_void,
            origin_count: $count,
            origin_datatype: MPI_Datatype,
            result_addr: *mut c_void,
            result_count: $count,
            result_datatype: MPI_Datatype,
            target_rank: c_int,
            target_disp: MPI_Aint,
            target_count: $count,
            target_datatype: MPI_Datatype,
            op: MPI_Op,
            win: MPI_Win,
            request: *mut MPI_Request,
        ) -> c_int {
            // SAFETY: the caller's buffers and `request` are passed through under MPI's contract of this
            // call; the handles are translated.
            unsafe {
                rma_request(stringify!($name), win, request, |r| {
                    real!($name(
                        origin_addr,
                        origin_count,
                        conv::datatype(origin_datatype),
                        result_addr,
                        result_count,
                        conv::datatype(result_datatype),
                        target_rank,
                        target_disp,
                        target_count,
                        conv::datatype(target_datatype),
                        conv::op(op),
                        conv::win(win),
                        r
                    ))
                })
            }
        }
    };
}

rget_accumulate!(MPI_Rget_accumulate, c_int);
rget_accumulate!(MPI_Rget_accumulate_c, MPI_Count);
