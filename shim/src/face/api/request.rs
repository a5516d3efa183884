//! Requests: every nonblocking operation gets a virtual request; completion goes through the
//! real library's test functions, one gated call at a time, so waiting ranks can be stopped.
//! A completion updates the drain accounting (receives count their source) and frees the
//! virtual handle, or deactivates it for persistent requests.

use crate::core::gate;
use crate::core::kinds::comm::count_send;
use crate::core::kinds::part;
use crate::core::kinds::request::{self, file_io_started, is_file_io, poll, take_drained_into, RequestEntry, YIELD_EVERY};
use crate::core::state::OBJ;
use crate::face::abi::*;
use crate::face::api::{begin_collective, begin_counted, put_status, put_status_error};
use crate::face::{conv, errors};
use crate::lower::handles::RealRequest;
use mpicr_virtid::{CollArg, CollInit, RequestRecipe};
use smallvec::{smallvec, SmallVec};
use std::os::raw::c_int;

/// Registers a real request under a virtual handle.
pub fn register_request(real: c_int, recipe: RequestRecipe, comm: MPI_Comm, counts_recv: bool) -> MPI_Request {
    let e = RequestEntry { recipe, comm: conv::vcomm(comm), counts_recv, done: None, repost: false, comm_freed: false };
    match request::register(RealRequest(real), e) {
        Ok(v) => conv::request_abi(v),
        Err(_) => errors::fatal("too many live requests"),
    }
}

/// A request the shim completed itself, reporting `status`.
pub fn register_done(recipe: RequestRecipe, comm: MPI_Comm, status: &MPI_Status) -> MPI_Request {
    let e = RequestEntry { recipe, comm: conv::vcomm(comm), counts_recv: false, done: Some(status.as_array()), repost: false, comm_freed: false };
    match request::register(RealRequest(MPI_REQUEST_NULL), e) {
        Ok(v) => conv::request_abi(v),
        Err(_) => errors::fatal("too many live requests"),
    }
}

pub fn register_collective(real: c_int, comm: MPI_Comm, function: &str, persistent: bool) -> MPI_Request {
    let recipe = RequestRecipe::Collective {
        function: function.trim_start_matches('P').to_string(),
        comm: conv::vcomm(comm),
        persistent,
        active: !persistent,
        init: None,
    };
    register_request(real, recipe, comm, false)
}

/// A persistent collective just made by `function` (collective number `seq` on `comm`), with
/// its arguments: the recipe a renewal makes it again from.
pub fn register_persistent_collective(real: c_int, comm: MPI_Comm, function: &str, seq: u64, args: Vec<CollArg>) -> MPI_Request {
    let function = function.trim_start_matches('P').to_string();
    let comm_gid = crate::core::kinds::comm::comm_gid(conv::vcomm(comm)).unwrap_or(0);
    let init = CollInit { function: function.clone(), comm_gid, seq, args };
    let recipe = RequestRecipe::Collective { function, comm: conv::vcomm(comm), persistent: true, active: false, init: Some(Box::new(init)) };
    register_request(real, recipe, comm, false)
}

/// Finishes the bookkeeping of a request whose completion was recorded (`done`). Returns the
/// handle the program keeps: MPI_REQUEST_NULL, or the same handle for persistent requests
/// (now inactive).
fn finish(v: MPI_Request, idx: u32) -> MPI_Request {
    match request::hand_over(idx) {
        Some(true) => v,
        _ => MPI_REQUEST_NULL,
    }
}

/// A request value that is not live: freed virtual handles become `conv::STALE`.
fn stale_or_raw(v: MPI_Request) -> MPI_Request {
    if conv::vrequest(v).index().is_some() {
        conv::STALE
    } else {
        v
    }
}

/// Status of an inactive or null request.
fn empty_status() -> MPI_Status {
    MPI_Status { MPI_SOURCE: MPI_ANY_SOURCE, MPI_TAG: MPI_ANY_TAG, ..Default::default() }
}

/// The empty status MPI_Request_get_status(_any) gives for a null or inactive request: written
/// whole, MPI_ERROR included, as MPICH writes it (the completions leave MPI_ERROR alone).
///
/// # Safety
/// As for [`put_status`].
unsafe fn put_whole_empty_status(p: *mut MPI_Status) {
    // SAFETY: the caller's contract.
    unsafe {
        put_status(p, &empty_status());
        crate::face::api::util::put_status_error(p, MPI_SUCCESS);
    }
}

/// What a request is, as seen by one completion attempt.
enum Slot {
    /// Null or inactive persistent: completes at once with an empty status.
    Inert,
    /// Completed (by the library or the shim), status recorded.
    Done(u32, MPI_Status),
    /// Pending in the real library.
    Real(u32, c_int),
    /// Not a live request of ours: hand it to the library for the native error.
    Invalid,
}

fn classify(v: MPI_Request) -> Slot {
    if v == MPI_REQUEST_NULL {
        return Slot::Inert;
    }
    let Some(idx) = conv::vrequest(v).index() else { return Slot::Invalid };
    let Some((real, in_library_only)) = OBJ.requests.real_hinted(idx) else { return Slot::Invalid };
    if in_library_only {
        // What the entry below would say, read without the table's lock (`request::in_library_only`).
        return Slot::Real(idx, real.raw());
    }
    let state = OBJ.requests.with(idx, |e| {
        let inactive = matches!(
            e.recipe,
            RequestRecipe::PersistentSend { active: false, .. }
                | RequestRecipe::PersistentRecv { active: false, .. }
                | RequestRecipe::Collective { persistent: true, active: false, .. }
                | RequestRecipe::Partitioned { active: false, .. }
        );
        (inactive, e.done)
    });
    match state {
        Some((_, Some(st))) => Slot::Done(idx, MPI_Status::from_array(st)),
        Some((true, None)) => Slot::Inert,
        Some((false, None)) => Slot::Real(idx, real.raw()),
        None => Slot::Invalid,
    }
}

/// Whether the library underneath is Open MPI, whose completions of several requests differ
/// from MPICH's where MPI leaves them open (`Mode::writes_error`, `test_many`).
fn open_mpi() -> bool {
    crate::lower::current().is_open_mpi()
}

/// Completion semantics of the test/wait families.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    All,
    /// As `All`, for MPI_Waitall: MPICH's MPI_Waitall (4.0.2 and 5) also sets MPI_ERROR to
    /// MPI_SUCCESS in the status of every request it completes, which the shim reproduces so
    /// that programs see what the library underneath would give them.
    WaitAll,
    /// As `All`, for MPI_Testall (Open MPI writes MPI_ERROR there too: `writes_error`).
    TestAll,
    Any,
    Some,
}

impl Mode {
    /// Whether a completion in this mode writes MPI_ERROR (MPI_SUCCESS) when nothing failed:
    /// MPI leaves it open, and the shim does what the library underneath does natively, where
    /// the shim completes each request on its own: MPICH's MPI_Waitall writes it, and Open
    /// MPI's completions of several requests (MPI_Waitall, MPI_Testall, MPI_Waitsome,
    /// MPI_Testsome) all do.
    fn writes_error(self) -> bool {
        match self {
            Mode::WaitAll => true,
            Mode::TestAll | Mode::Some => open_mpi(),
            Mode::All | Mode::Any => false,
        }
    }

    fn all(self) -> bool {
        matches!(self, Mode::All | Mode::TestAll | Mode::WaitAll)
    }
}

/// Outcome of a test call, already applied to the program's arrays.
struct Tested {
    flag: bool,
    /// For Any: the index (MPI_UNDEFINED as usize when all inert); for Some: the indices
    /// (usize::MAX when all inert).
    indices: SmallVec<[usize; 4]>,
    rc: c_int,
    /// The communicator of a failed request that was freed as it completed, when the caller
    /// did not look it up before (see [`MPI_Wait`]).
    err_comm: Option<MPI_Comm>,
}

/// One non-blocking completion attempt over `reqs` in `mode`; the gate must be held.
/// Each pending request is tested on its own (MPI_Test): completions are recorded and only
/// handed to the program when `mode` is satisfied, so Testall frees nothing early.
///
/// # Safety
/// `statuses` must be null, MPI_STATUSES_IGNORE (or MPI_STATUS_IGNORE), or writable for one
/// status per request (for Any: one status).
unsafe fn test_many(reqs: &mut [MPI_Request], statuses: *mut MPI_Status, mode: Mode) -> Tested {
    let n = reqs.len();
    let status_at = |i: usize| -> *mut MPI_Status {
        if statuses.is_null() || statuses == MPI_STATUSES_IGNORE {
            MPI_STATUS_IGNORE
        } else {
            // SAFETY: `statuses` is a real array with a status per request (this function's
            // contract) and every use of `status_at` passes an index `< n`.
            unsafe { statuses.add(i) }
        }
    };
    // Inline storage: the common calls (MPI_Test, MPI_Wait, the blocking calls' waits) pass one
    // request, and a heap allocation per test would be most of their cost.
    let mut slots: SmallVec<[Slot; 4]> = reqs.iter().map(|&v| classify(v)).collect();
    // Invalid handles: the real library reports the native error class.
    if let Some(i) = slots.iter().position(|s| matches!(s, Slot::Invalid)) {
        let mut raw = stale_or_raw(reqs[i]);
        let (mut flag, mut st) = (0, MPI_Status::default());
        let rc = match crate::lower::fns().MPI_Test {
            // SAFETY: the real MPI_Test; a request value and locals (an invalid request only makes
            // it fail).
            Some(f) => unsafe { f(&mut raw, &mut flag, &mut st) },
            None => MPI_ERR_REQUEST,
        };
        return Tested { flag: false, indices: SmallVec::new(), rc: if rc == MPI_SUCCESS { MPI_ERR_REQUEST } else { rc }, err_comm: None };
    }
    if slots.iter().all(|s| matches!(s, Slot::Inert)) {
        if mode.all() {
            for i in 0..n {
                // SAFETY: `status_at` gives MPI_STATUS_IGNORE or an element of the caller's array
                // (contract above).
                unsafe { put_status(status_at(i), &empty_status()) };
            }
        }
        let none = match mode {
            Mode::All | Mode::TestAll | Mode::WaitAll => SmallVec::new(),
            Mode::Any => smallvec![MPI_UNDEFINED as usize],
            Mode::Some => smallvec![usize::MAX],
        };
        return Tested { flag: true, indices: none, rc: MPI_SUCCESS, err_comm: None };
    }
    // One request pending in the library, to the program as soon as it completes (MPI_Test,
    // MPI_Wait, the waits of the blocking calls): tested, counted and handed over with one lock
    // of the table, the common case of every nonblocking message. The same outcome as below.
    if let (1, Mode::All, Slot::Real(idx, r)) = (n, mode, &slots[0]) {
        let Some((st, keep, comm)) = request::complete_one(*idx, *r) else {
            return Tested { flag: false, indices: SmallVec::new(), rc: MPI_SUCCESS, err_comm: None };
        };
        if !keep {
            reqs[0] = MPI_REQUEST_NULL;
        }
        // SAFETY: `status_at` gives MPI_STATUS_IGNORE or the caller's status (contract above).
        unsafe { put_status(status_at(0), &st) };
        let err_comm = (st.MPI_ERROR != MPI_SUCCESS).then(|| conv::comm_abi(comm));
        return Tested { flag: true, indices: smallvec![0], rc: st.MPI_ERROR, err_comm };
    }
    // Test what is pending, stopping at the first completion for Testany.
    for s in slots.iter_mut() {
        if mode == Mode::Any && matches!(s, Slot::Done(..)) {
            break;
        }
        if let Slot::Real(idx, r) = *s {
            if let Some(st) = poll(idx, r) {
                *s = Slot::Done(idx, st);
            } else if mode == Mode::WaitAll {
                // MPI_Waitall waits for every request, in the array's order as MPICH does (see
                // the hand-over at a failure below): the rest are tested once this one
                // completed. Each test drives the library's progress, so testing all of a
                // window of 64 on every turn cost 64 progress calls where the library's own
                // MPI_Waitall makes one.
                break;
            }
        }
    }
    let done: SmallVec<[usize; 4]> = (0..n).filter(|&i| matches!(slots[i], Slot::Done(..))).collect();
    let first_error = done.iter().copied().find(|&i| matches!(slots[i], Slot::Done(_, st) if st.MPI_ERROR != MPI_SUCCESS));
    let pending = slots.iter().any(|s| matches!(s, Slot::Real(..)));
    let take: SmallVec<[usize; 4]> = match (mode, first_error) {
        // Testall hands over everything only when everything completed, or stops at an error.
        (Mode::All | Mode::TestAll | Mode::WaitAll, None) if pending => {
            return Tested { flag: false, indices: SmallVec::new(), rc: MPI_SUCCESS, err_comm: None }
        }
        // At a failed request, Waitall and Testall hand over it and the completed requests
        // before it; those after it stay with the program, pending (as MPICH does).
        // Open MPI's MPI_Waitall completes every request even when one fails.
        (Mode::WaitAll, Some(_)) if pending && open_mpi() => return Tested { flag: false, indices: SmallVec::new(), rc: MPI_SUCCESS, err_comm: None },
        (Mode::WaitAll, Some(_)) if open_mpi() => done,
        (Mode::All | Mode::TestAll | Mode::WaitAll, Some(e)) => done.into_iter().filter(|&i| i <= e).collect(),
        (Mode::All | Mode::TestAll | Mode::WaitAll | Mode::Some, _) => done,
        (Mode::Any, _) => done.into_iter().take(1).collect(),
    };
    if take.is_empty() {
        return Tested { flag: false, indices: SmallVec::new(), rc: MPI_SUCCESS, err_comm: None };
    }
    // One request's failure is the call's error; among several (Waitall, Waitsome, ...) it is
    // MPI_ERR_IN_STATUS, and only then are the statuses' MPI_ERROR fields written (MPI 4.1,
    // section 3.2.5): the other completions leave that field as the program set it.
    let failed = take.iter().find_map(|&i| match slots[i] {
        Slot::Done(_, st) if st.MPI_ERROR != MPI_SUCCESS => Some(st.MPI_ERROR),
        _ => None,
    });
    let rc = match failed {
        None => MPI_SUCCESS,
        Some(e) if n == 1 || mode == Mode::Any => e,
        Some(_) => MPI_ERR_IN_STATUS,
    };
    let in_status = rc == MPI_ERR_IN_STATUS;
    let writes_error = !in_status && mode.writes_error();
    for (k, &i) in take.iter().enumerate() {
        let Slot::Done(idx, st) = slots[i] else { continue };
        reqs[i] = finish(reqs[i], idx);
        let out = match mode {
            Mode::All | Mode::TestAll | Mode::WaitAll => status_at(i),
            Mode::Some => status_at(k),
            Mode::Any => statuses,
        };
        // SAFETY: `out` is MPI_STATUS_IGNORE or an element of the caller's array (contract above).
        unsafe {
            put_status(out, &st);
            if in_status || writes_error {
                put_status_error(out, st.MPI_ERROR);
            }
        }
    }
    if mode.all() {
        for (i, slot) in slots.iter().enumerate().take(n) {
            let out = status_at(i);
            match slot {
                // SAFETY: `out` is MPI_STATUS_IGNORE or an element of the caller's status array (`status_at`,
                // contract above).
                Slot::Inert => unsafe {
                    put_status(out, &empty_status());
                    if in_status {
                        put_status_error(out, MPI_SUCCESS);
                    }
                },
                _ if take.contains(&i) => {}
                _ => {
                    if in_status {
                        // SAFETY: `out` is MPI_STATUS_IGNORE or an element of the caller's status array
                        // (`status_at`, contract above).
                        unsafe { put_status_error(out, MPI_ERR_PENDING) }
                    }
                }
            }
        }
    }
    Tested { flag: true, indices: take, rc, err_comm: None }
}

/// The communicator whose error handler reports a request's failure.
fn request_comm(v: MPI_Request) -> MPI_Comm {
    conv::vrequest(v).index().and_then(|i| OBJ.requests.with(i, |e| conv::comm_abi(e.comm))).unwrap_or(MPI_COMM_WORLD)
}

fn raise(reqs: &[MPI_Request], rc: c_int, name: &str) -> c_int {
    let comm = reqs.iter().map(|&r| request_comm(r)).find(|&c| c != MPI_COMM_NULL).unwrap_or(MPI_COMM_WORLD);
    errors::raise_comm(comm, rc, name)
}

/// Blocks, one gated test at a time, until `mode` is satisfied.
///
/// # Safety
/// As for [`test_many`].
unsafe fn wait_many(reqs: &mut [MPI_Request], statuses: *mut MPI_Status, mode: Mode) -> Tested {
    if mode.all() && file_io_started() {
        // MPI-IO requests complete one after the other, in the array's order, as in MPICH's
        // MPI_Waitall (see `is_file_io`): each is tested alone until it completes, one gated test
        // at a time, so that a checkpoint can stop this thread meanwhile (a collective one waits
        // for the other ranks, which a checkpoint may have stopped; its drain completes it).
        for &v in reqs.iter() {
            let mut spins = 0u32;
            loop {
                let g = gate::enter();
                let pending = match classify(v) {
                    Slot::Real(idx, r) if is_file_io(idx) => poll(idx, r).is_none(),
                    _ => false,
                };
                drop(g);
                if !pending {
                    break;
                }
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(YIELD_EVERY) {
                    std::thread::yield_now();
                }
            }
        }
    }
    let mut spins = 0u32;
    loop {
        let g = gate::enter();
        // SAFETY: `statuses` is the caller's: ignored, or room for a status per request, as
        // `test_many` requires.
        let t = unsafe { test_many(reqs, statuses, mode) };
        drop(g);
        if t.flag || t.rc != MPI_SUCCESS {
            return t;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(YIELD_EVERY) {
            std::thread::yield_now();
        }
    }
}

/// The program's request array.
///
/// # Safety
/// `p` must be null or point to `n` requests the caller lets us read and write for `'a`.
unsafe fn as_slice<'a>(p: *mut MPI_Request, n: c_int) -> &'a mut [MPI_Request] {
    if p.is_null() || n <= 0 {
        return &mut [];
    }
    // SAFETY: `p` is non-null and, by this function's contract, holds `n > 0` requests.
    unsafe { std::slice::from_raw_parts_mut(p, n as usize) }
}

pub unsafe fn MPI_Test(request: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
    if request.is_null() {
        return errors::raise_default(MPI_ERR_REQUEST, "MPI_Test");
    }
    // SAFETY: `request` is non-null (checked above) and points to the caller's request, which this
    // call may update.
    let reqs = unsafe { std::slice::from_raw_parts_mut(request, 1) };
    let g = gate::enter();
    // SAFETY: `status` is the caller's: ignored, or room for a status per request, as `test_many`
    // requires.
    let t = unsafe { test_many(reqs, status, Mode::All) };
    drop(g);
    // SAFETY: `flag` is the caller's out-pointer, valid for a write.
    unsafe { crate::face::api::put(flag, t.flag as c_int) };
    if t.rc != MPI_SUCCESS {
        return raise(reqs, t.rc, "MPI_Test");
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    if request.is_null() {
        return errors::raise_default(MPI_ERR_REQUEST, "MPI_Wait");
    }
    // SAFETY: `request` is non-null (checked above) and points to the caller's request, which this
    // call may update.
    let reqs = unsafe { std::slice::from_raw_parts_mut(request, 1) };
    // The communicator that reports a failure, looked up now (the request is freed as it
    // completes), except for a request of the library alone: its completion names it
    // (`Tested::err_comm`), and the common wait takes no lock for it.
    let in_library_only = conv::vrequest(reqs[0]).index().and_then(|i| OBJ.requests.real_hinted(i)).is_some_and(|(_, only)| only);
    let comm = (!in_library_only).then(|| request_comm(reqs[0]));
    // SAFETY: `status` is the caller's: ignored, or room for a status per request, as `wait_many`
    // requires.
    let t = unsafe { wait_many(reqs, status, Mode::All) };
    if t.rc != MPI_SUCCESS {
        return errors::raise_comm(t.err_comm.or(comm).unwrap_or(MPI_COMM_WORLD), t.rc, "MPI_Wait");
    }
    MPI_SUCCESS
}

/// Waits for one request on behalf of a blocking call (MPI_Send, MPI_Recv, ...).
///
/// # Safety
/// `status` must be null, MPI_STATUS_IGNORE, or writable.
pub unsafe fn wait_internal(mut v: MPI_Request, status: *mut MPI_Status) -> c_int {
    let reqs = std::slice::from_mut(&mut v);
    // SAFETY: one local request; `status` meets `wait_many`'s contract (it is this function's).
    unsafe { wait_many(reqs, status, Mode::All) }.rc
}

pub unsafe fn MPI_Testall(count: c_int, reqs: *mut MPI_Request, flag: *mut c_int, statuses: *mut MPI_Status) -> c_int {
    // SAFETY: `reqs` is the caller's array of `count` requests, readable and writable (MPI's
    // contract of this call).
    let reqs = unsafe { as_slice(reqs, count) };
    let g = gate::enter();
    // SAFETY: `statuses` is the caller's: ignored, or room for a status per request, as `test_many`
    // requires.
    let t = unsafe { test_many(reqs, statuses, Mode::TestAll) };
    drop(g);
    // SAFETY: `flag` is the caller's out-pointer, valid for a write.
    unsafe { crate::face::api::put(flag, t.flag as c_int) };
    if t.rc != MPI_SUCCESS {
        return raise(reqs, t.rc, "MPI_Testall");
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Waitall(count: c_int, reqs: *mut MPI_Request, statuses: *mut MPI_Status) -> c_int {
    // SAFETY: `reqs` is the caller's array of `count` requests, readable and writable (MPI's
    // contract of this call).
    let reqs = unsafe { as_slice(reqs, count) };
    // SAFETY: `statuses` is the caller's: ignored, or room for a status per request, as `wait_many`
    // requires.
    let t = unsafe { wait_many(reqs, statuses, Mode::WaitAll) };
    if t.rc != MPI_SUCCESS {
        return raise(reqs, t.rc, "MPI_Waitall");
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Testany(count: c_int, reqs: *mut MPI_Request, index: *mut c_int, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
    // SAFETY: `reqs` is the caller's array of `count` requests, readable and writable (MPI's
    // contract of this call).
    let reqs = unsafe { as_slice(reqs, count) };
    let g = gate::enter();
    // SAFETY: `status` is the caller's: ignored, or room for a status per request, as `test_many`
    // requires.
    let t = unsafe { test_many(reqs, status, Mode::Any) };
    drop(g);
    // SAFETY: `index` and `status` are the caller's out-pointers, as is `flag`.
    unsafe { any_result(&t, index, flag, status) };
    if t.rc != MPI_SUCCESS {
        return raise(reqs, t.rc, "MPI_Testany");
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Waitany(count: c_int, reqs: *mut MPI_Request, index: *mut c_int, status: *mut MPI_Status) -> c_int {
    // SAFETY: `reqs` is the caller's array of `count` requests, readable and writable (MPI's
    // contract of this call).
    let reqs = unsafe { as_slice(reqs, count) };
    // SAFETY: `status` is the caller's: ignored, or room for a status per request, as `wait_many`
    // requires.
    let t = unsafe { wait_many(reqs, status, Mode::Any) };
    // SAFETY: `index` and `status` are the caller's out-pointers; the flag is not wanted (null).
    unsafe { any_result(&t, index, std::ptr::null_mut(), status) };
    if t.rc != MPI_SUCCESS {
        return raise(reqs, t.rc, "MPI_Waitany");
    }
    MPI_SUCCESS
}

/// # Safety
/// `index`, `flag` and `status` must each be null (MPI_STATUS_IGNORE for `status`) or writable.
unsafe fn any_result(t: &Tested, index: *mut c_int, flag: *mut c_int, status: *mut MPI_Status) {
    // SAFETY: `flag` is the caller's out-pointer, valid for a write.
    unsafe { crate::face::api::put(flag, t.flag as c_int) };
    let i = match t.indices.first() {
        Some(&i) if i == MPI_UNDEFINED as usize => {
            // SAFETY: `status` is null, ignored or writable (contract above).
            unsafe { put_status(status, &empty_status()) };
            MPI_UNDEFINED
        }
        Some(&i) => i as c_int,
        None => MPI_UNDEFINED,
    };
    // SAFETY: `index` is null or writable (contract above).
    unsafe { crate::face::api::put(index, i) };
}

pub unsafe fn MPI_Testsome(incount: c_int, reqs: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MPI_Status) -> c_int {
    // SAFETY: `reqs` is the caller's array of `incount` requests, readable and writable (MPI's
    // contract of this call).
    let reqs = unsafe { as_slice(reqs, incount) };
    let g = gate::enter();
    // SAFETY: `statuses` is the caller's: ignored, or room for a status per request, as `test_many`
    // requires.
    let t = unsafe { test_many(reqs, statuses, Mode::Some) };
    drop(g);
    // SAFETY: `outcount` and `indices` (room for an index per request) are the caller's.
    unsafe { some_result(&t, outcount, indices) };
    if t.rc != MPI_SUCCESS {
        return raise(reqs, t.rc, "MPI_Testsome");
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Waitsome(incount: c_int, reqs: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MPI_Status) -> c_int {
    // SAFETY: `reqs` is the caller's array of `incount` requests, readable and writable (MPI's
    // contract of this call).
    let reqs = unsafe { as_slice(reqs, incount) };
    // SAFETY: `statuses` is the caller's: ignored, or room for a status per request, as `wait_many`
    // requires.
    let t = unsafe { wait_many(reqs, statuses, Mode::Some) };
    // SAFETY: `outcount` and `indices` (room for an index per request) are the caller's.
    unsafe { some_result(&t, outcount, indices) };
    if t.rc != MPI_SUCCESS {
        return raise(reqs, t.rc, "MPI_Waitsome");
    }
    MPI_SUCCESS
}

/// # Safety
/// `outcount` must be null or writable, `indices` null or writable for one index per request
/// that `t` covers.
unsafe fn some_result(t: &Tested, outcount: *mut c_int, indices: *mut c_int) {
    if t.indices.first() == Some(&usize::MAX) {
        // SAFETY: `outcount` is the caller's out-pointer (contract above).
        unsafe { crate::face::api::put(outcount, MPI_UNDEFINED) };
        return;
    }
    let n = if t.flag { t.indices.len() } else { 0 };
    // SAFETY: `outcount` is the caller's out-pointer (contract above).
    unsafe { crate::face::api::put(outcount, n as c_int) };
    if !indices.is_null() {
        for (k, &i) in t.indices.iter().take(n).enumerate() {
            // SAFETY: `indices` has room for an index per request (contract above) and `k < n <=
            // reqs`.
            unsafe { *indices.add(k) = i as c_int };
        }
    }
}

pub unsafe fn MPI_Request_get_status(request: MPI_Request, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
    let g = gate::enter();
    match classify(request) {
        Slot::Inert => {
            // SAFETY: `flag` and `status` are the caller's out-pointers, valid for a write (or
            // MPI_STATUS_IGNORE).
            // (MPICH's pt2pt/rqstatus checks the MPI_ERROR of this status.)
            unsafe {
                crate::face::api::put(flag, 1);
                put_whole_empty_status(status);
            }
            MPI_SUCCESS
        }
        Slot::Done(_, st) => {
            // SAFETY: `flag` and `status` are the caller's out-pointers, valid for a write (or
            // MPI_STATUS_IGNORE).
            unsafe {
                crate::face::api::put(flag, 1);
                put_status(status, &st);
            }
            MPI_SUCCESS
        }
        Slot::Real(_, r) => {
            let rc = real!(MPI_Request_get_status(r, flag, status));
            drop(g);
            if rc != MPI_SUCCESS {
                return errors::raise_comm(request_comm(request), rc, "MPI_Request_get_status");
            }
            rc
        }
        Slot::Invalid => {
            let rc = real!(MPI_Request_get_status(stale_or_raw(request), flag, status));
            drop(g);
            errors::raise_default(rc, "MPI_Request_get_status")
        }
    }
}

pub unsafe fn MPI_Cancel(request: *mut MPI_Request) -> c_int {
    if request.is_null() {
        return errors::raise_default(MPI_ERR_REQUEST, "MPI_Cancel");
    }
    // SAFETY: `request` is non-null (checked above) and, by MPI's contract of this call, points to a readable
    // request.
    let v = unsafe { *request };
    let g = gate::enter();
    let rc = match classify(v) {
        Slot::Real(_, mut r) => real!(MPI_Cancel(&mut r)),
        Slot::Done(..) => MPI_SUCCESS,
        Slot::Inert | Slot::Invalid => {
            let mut raw = stale_or_raw(v);
            real!(MPI_Cancel(&mut raw))
        }
    };
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_comm(request_comm(v), rc, "MPI_Cancel");
    }
    rc
}

pub unsafe fn MPI_Request_free(request: *mut MPI_Request) -> c_int {
    if request.is_null() {
        return errors::raise_default(MPI_ERR_REQUEST, "MPI_Request_free");
    }
    // SAFETY: `request` is non-null (checked above) and, by MPI's contract of this call, points to a readable
    // request.
    let v = unsafe { *request };
    let g = gate::enter();
    let rc = match classify(v) {
        Slot::Done(idx, _) => {
            OBJ.requests.remove(idx);
            MPI_SUCCESS
        }
        Slot::Real(idx, mut r) => {
            let rc = real!(MPI_Request_free(&mut r));
            if rc == MPI_SUCCESS {
                OBJ.requests.remove(idx);
            }
            rc
        }
        Slot::Inert => match conv::vrequest(v).index().filter(|&i| OBJ.requests.real(i).is_some()) {
            // An inactive persistent request.
            Some(idx) => {
                let mut r = OBJ.requests.real(idx).map_or(0, |r| r.raw());
                let rc = real!(MPI_Request_free(&mut r));
                OBJ.requests.remove(idx);
                rc
            }
            None => {
                let mut raw = stale_or_raw(v);
                real!(MPI_Request_free(&mut raw))
            }
        },
        Slot::Invalid => {
            let mut raw = stale_or_raw(v);
            real!(MPI_Request_free(&mut raw))
        }
    };
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_comm(request_comm(v), rc, "MPI_Request_free");
    }
    // SAFETY: `request` is non-null (checked at entry) and, by MPI's contract of this call, writable.
    unsafe { *request = MPI_REQUEST_NULL };
    MPI_SUCCESS
}

pub unsafe fn MPI_Start(request: *mut MPI_Request) -> c_int {
    if request.is_null() {
        return errors::raise_default(MPI_ERR_REQUEST, "MPI_Start");
    }
    // SAFETY: `request` is non-null (checked above) and readable (MPI's contract); `start_one` takes the
    // handle by value and passes the library only locals.
    unsafe { start_one(*request) }
}

pub unsafe fn MPI_Startall(count: c_int, reqs: *mut MPI_Request) -> c_int {
    // SAFETY: `reqs` is the caller's array of `count` requests, readable and writable (MPI's
    // contract of this call).
    for &v in unsafe { as_slice(reqs, count) }.iter() {
        // SAFETY: `start_one` takes a handle value and passes the library only locals and translated handles.
        let rc = unsafe { start_one(v) };
        if rc != MPI_SUCCESS {
            return rc;
        }
    }
    MPI_SUCCESS
}

/// Starts a persistent request: collectives go through the alignment check, sends are counted,
/// receives may be satisfied from drained messages.
unsafe fn start_one(v: MPI_Request) -> c_int {
    let Some(idx) = conv::vrequest(v).index().filter(|&i| OBJ.requests.real(i).is_some()) else {
        let _g = gate::enter();
        let mut raw = stale_or_raw(v);
        let rc = real!(MPI_Start(&mut raw));
        return errors::raise_default(if rc == MPI_SUCCESS { MPI_ERR_REQUEST } else { rc }, "MPI_Start");
    };
    let Some(entry) = OBJ.requests.get(idx) else { return errors::raise_default(MPI_ERR_REQUEST, "MPI_Start") };
    let g = match &entry.recipe {
        RequestRecipe::Collective { comm, .. } => begin_collective(conv::comm_abi(*comm)).0,
        // Aligned like a collective of the send/receive pair (see `core::kinds::part`).
        RequestRecipe::Partitioned { init, .. } => match part::counters(init) {
            Some(c) => begin_counted(&c),
            None => gate::enter(),
        },
        _ => gate::enter(),
    };
    if let RequestRecipe::PersistentRecv { args, .. } = &entry.recipe {
        if let Some(st) = take_drained_into(args) {
            OBJ.requests.with(idx, |e| {
                e.done = Some(st.as_array());
                if let RequestRecipe::PersistentRecv { active, .. } = &mut e.recipe {
                    *active = true;
                }
            });
            return MPI_SUCCESS;
        }
    }
    let mut r = OBJ.requests.real(idx).map_or(0, |r| r.raw());
    let rc = real!(MPI_Start(&mut r));
    if rc == MPI_SUCCESS {
        OBJ.requests.with(idx, |e| match &mut e.recipe {
            RequestRecipe::PersistentSend { active, args, .. } => {
                *active = true;
                count_send(args.comm, args.peer);
            }
            RequestRecipe::PersistentRecv { active, .. } | RequestRecipe::Collective { active, .. } => *active = true,
            RequestRecipe::Partitioned { active, ready, .. } => {
                *active = true;
                ready.clear();
            }
            _ => {}
        });
    }
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_comm(conv::comm_abi(entry.comm), rc, "MPI_Start");
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Grequest_start(
    query_fn: *mut std::os::raw::c_void,
    free_fn: *mut std::os::raw::c_void,
    cancel_fn: *mut std::os::raw::c_void,
    extra_state: *mut std::os::raw::c_void,
    request: *mut MPI_Request,
) -> c_int {
    let g = gate::enter();
    let mut r = MPI_REQUEST_NULL;
    // The callbacks see only extra_state and a status, never a handle: they go to the library as they are.
    let rc = real!(MPI_Grequest_start(query_fn, free_fn, cancel_fn, extra_state, &mut r));
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_default(rc, "MPI_Grequest_start");
    }
    let recipe =
        RequestRecipe::Generalized { query_fn: query_fn as u64, free_fn: free_fn as u64, cancel_fn: cancel_fn as u64, extra_state: extra_state as u64 };
    let v = register_request(r, recipe, MPI_COMM_WORLD, false);
    drop(g);
    // SAFETY: `request` is the caller's out-pointer, null or valid for a write (MPI's contract of this call).
    unsafe { crate::face::api::put(request, v) };
    MPI_SUCCESS
}

pub unsafe fn MPI_Grequest_complete(request: MPI_Request) -> c_int {
    let g = gate::enter();
    let r = conv::request(request);
    let rc = real!(MPI_Grequest_complete(r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Grequest_complete");
    }
    rc
}

/// MPI_Request_get_status_{all,any,some} (MPI 4.1): like the test family, but nothing is
/// freed or deactivated; completions stay recorded for the program's later test or wait.
unsafe fn get_status_many(reqs: &[MPI_Request]) -> Result<Vec<Option<MPI_Status>>, c_int> {
    let mut out = Vec::with_capacity(reqs.len());
    for &v in reqs {
        out.push(match classify(v) {
            Slot::Inert => Some(empty_status()),
            Slot::Done(_, st) => Some(st),
            Slot::Real(idx, r) => poll(idx, r),
            Slot::Invalid => return Err(MPI_ERR_REQUEST),
        });
    }
    Ok(out)
}

unsafe fn const_slice<'a>(p: *const MPI_Request, n: c_int) -> &'a [MPI_Request] {
    if p.is_null() || n <= 0 {
        return &[];
    }
    // SAFETY: `p` is non-null and `n > 0` (checked above); the callers pass the program's array of `n`
    // requests (MPI's contract of the get_status calls).
    unsafe { std::slice::from_raw_parts(p, n as usize) }
}

fn status_slot(statuses: *mut MPI_Status, i: usize) -> *mut MPI_Status {
    if statuses.is_null() || statuses == MPI_STATUSES_IGNORE {
        MPI_STATUS_IGNORE
    } else {
        // SAFETY: `statuses` is a real array with a status per request (this function's contract)
        // and `i < n`.
        unsafe { statuses.add(i) }
    }
}

pub unsafe fn MPI_Request_get_status_all(count: c_int, reqs: *const MPI_Request, flag: *mut c_int, statuses: *mut MPI_Status) -> c_int {
    // SAFETY: `reqs` is the program's array of `count` requests (MPI's contract of this call); null or `count
    // <= 0` gives an empty slice.
    let reqs = unsafe { const_slice(reqs, count) };
    let g = gate::enter();
    // SAFETY: `get_status_many` reads only the handle values in `reqs`; the library gets locals and
    // translated handles.
    let r = unsafe { get_status_many(reqs) };
    drop(g);
    let Ok(sts) = r else { return errors::raise_default(MPI_ERR_REQUEST, "MPI_Request_get_status_all") };
    let all = sts.iter().all(|s| s.is_some());
    // SAFETY: `flag` is the caller's out-pointer, null or valid for a write.
    unsafe { crate::face::api::put(flag, all as c_int) };
    if all {
        for (i, st) in sts.iter().enumerate() {
            // SAFETY: `status_slot` gives MPI_STATUS_IGNORE or element `i < count` of the caller's status
            // array (MPI: one status per request); `st` is Some since `all` holds.
            unsafe { put_status(status_slot(statuses, i), st.as_ref().unwrap()) };
        }
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Request_get_status_any(count: c_int, reqs: *const MPI_Request, index: *mut c_int, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
    // SAFETY: `reqs` is the program's array of `count` requests (MPI's contract of this call); null or `count
    // <= 0` gives an empty slice.
    let reqs = unsafe { const_slice(reqs, count) };
    let g = gate::enter();
    // SAFETY: `get_status_many` reads only the handle values in `reqs`; the library gets locals and
    // translated handles.
    let r = unsafe { get_status_many(reqs) };
    drop(g);
    let Ok(sts) = r else { return errors::raise_default(MPI_ERR_REQUEST, "MPI_Request_get_status_any") };
    let live = |i: usize| reqs[i] != MPI_REQUEST_NULL && !matches!(classify(reqs[i]), Slot::Inert);
    match (0..reqs.len()).find(|&i| live(i) && sts[i].is_some()) {
        // SAFETY: `flag` and `status` are the caller's out-pointers, valid for a write (or
        // MPI_STATUS_IGNORE).
        Some(i) => unsafe {
            crate::face::api::put(flag, 1);
            crate::face::api::put(index, i as c_int);
            put_status(status, sts[i].as_ref().unwrap());
        },
        // SAFETY: `flag` and `status` are the caller's out-pointers, valid for a write (or
        // MPI_STATUS_IGNORE).
        None if !(0..reqs.len()).any(live) => unsafe {
            crate::face::api::put(flag, 1);
            crate::face::api::put(index, MPI_UNDEFINED);
            put_whole_empty_status(status);
        },
        // SAFETY: `flag` is the caller's out-pointer, null or valid for a write.
        None => unsafe { crate::face::api::put(flag, 0) },
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Request_get_status_some(
    count: c_int,
    reqs: *const MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: `reqs` is the program's array of `count` requests (MPI's contract of this call); null or `count
    // <= 0` gives an empty slice.
    let reqs = unsafe { const_slice(reqs, count) };
    let g = gate::enter();
    // SAFETY: `get_status_many` reads only the handle values in `reqs`; the library gets locals and
    // translated handles.
    let r = unsafe { get_status_many(reqs) };
    drop(g);
    let Ok(sts) = r else { return errors::raise_default(MPI_ERR_REQUEST, "MPI_Request_get_status_some") };
    let live: Vec<usize> = (0..reqs.len()).filter(|&i| !matches!(classify(reqs[i]), Slot::Inert)).collect();
    if live.is_empty() {
        // SAFETY: `outcount` is the caller's out-pointer (contract above).
        unsafe { crate::face::api::put(outcount, MPI_UNDEFINED) };
        return MPI_SUCCESS;
    }
    let done: Vec<usize> = live.into_iter().filter(|&i| sts[i].is_some()).collect();
    // SAFETY: `outcount` is the caller's out-pointer (contract above).
    unsafe { crate::face::api::put(outcount, done.len() as c_int) };
    for (k, &i) in done.iter().enumerate() {
        // SAFETY: `k < done.len() <= count`: `indices` (when non-null) and `statuses` (unless ignored) hold
        // `count` elements by MPI's contract of this call.
        unsafe {
            if !indices.is_null() {
                *indices.add(k) = i as c_int;
            }
            put_status(status_slot(statuses, k), sts[i].as_ref().unwrap());
        }
    }
    MPI_SUCCESS
}
