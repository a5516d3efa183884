//! Requests: the recipe of every nonblocking operation the program started (enough to post
//! it again), its state (completed by the shim, to be reposted), and what the drain and the
//! renewal do with them: pending receives are cancelled and posted again, persistent requests
//! are created again, receives may be satisfied from the drained-message buffer; nonblocking
//! MPI-IO completes in the drain, in the order it was started ([`is_file_io`]).

use super::{check, RebuildError, Renewable};
use crate::core::drained;
use crate::core::handles;
use crate::core::kinds::comm::{comm_gid, count_recv};
use crate::core::kinds::datatype::Built;
use crate::core::state::OBJ;
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::object::Kind;
use crate::lower::calls::request::SendInit;
use crate::lower::handles::RealRequest;
use mpicr_virtid::table::Full;
use mpicr_virtid::{P2pArgs, RequestRecipe, SendMode, TypeRef, VComm, VDatatype, VRequest};
use serde::{Deserialize, Serialize};
use std::os::raw::c_int;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestEntry {
    pub recipe: RequestRecipe,
    /// Communicator (virtual) whose error handler reports failures; COMM_NULL for none.
    pub comm: VComm,
    /// Receives count their source when they complete (drain accounting).
    pub counts_recv: bool,
    /// Completed by the shim itself (e.g. from the drained-message buffer): the status to report.
    pub done: Option<[i32; 5]>,
    /// A receive cancelled by a checkpoint, to be posted again on the renewed library.
    pub repost: bool,
    /// The program freed the communicator this request uses while it was pending (or, for a
    /// persistent one, live): a renewal could not post it again.
    #[serde(default)]
    pub comm_freed: bool,
}

/// The hint of the request table ([`mpicr_virtid::table::Table::with_hint`]): the request is
/// one of the library's alone, pending there or complete but not yet tested (not persistent,
/// not completed by the shim), so a completion test needs nothing of its entry but the real
/// handle: the program's MPI_Test and MPI_Wait of such a request read no entry under the lock.
pub fn in_library_only(e: &RequestEntry) -> bool {
    e.done.is_none() && !e.recipe.is_persistent()
}

/// Registers a request: its real request (the library's null one for a request the shim
/// completed itself) and what the core keeps about it. `Err` when the table is full.
pub fn register(real: RealRequest, entry: RequestEntry) -> Result<VRequest, Full> {
    OBJ.requests.insert(real, entry).map(VRequest::virtual_at)
}

/// Tests one pending real request. On completion the status is recorded in the entry
/// (`done`) and a received message is counted for the drain; the program's handle stays
/// valid until `finish`. This is also how the agent completes requests during a drain.
pub fn poll(idx: u32, real: c_int) -> Option<MPI_Status> {
    let mut r = real;
    let st = test_real(&mut r)?;
    let counted = OBJ.requests.with(idx, |e| {
        e.done = Some(st.as_array());
        e.counts_recv.then_some(e.comm)
    });
    if let Some(Some(comm)) = counted {
        count_if_received(comm, &st);
    }
    Some(st)
}

/// Hands a completed request over to the program, under one lock of the table: a persistent
/// one becomes inactive and stays (true), any other is freed (false). `None`: not live.
pub fn hand_over(idx: u32) -> Option<bool> {
    OBJ.requests.with_or_remove(idx, settle)
}

/// A completed request's entry once handed over: no status kept, persistent ones inactive.
/// Whether the entry stays (persistent).
fn settle(e: &mut RequestEntry) -> bool {
    e.done = None;
    inactivate(&mut e.recipe);
    e.recipe.is_persistent()
}

/// A persistent request's recipe once its operation completed: inactive (and, partitioned,
/// no partition ready).
fn inactivate(recipe: &mut RequestRecipe) {
    match recipe {
        RequestRecipe::PersistentSend { active, .. } | RequestRecipe::PersistentRecv { active, .. } | RequestRecipe::Collective { active, .. } => {
            *active = false
        }
        RequestRecipe::Partitioned { active, ready, .. } => {
            *active = false;
            ready.clear();
        }
        _ => {}
    }
}

/// One test of pending request `idx` (real `real`) whose completion goes to the program at
/// once (its MPI_Test or MPI_Wait of this one request): when it completed, a received message
/// is counted and the request handed over in the same lock ([`hand_over`]), where [`poll`]
/// and then [`hand_over`] take the lock twice. Returns the status, whether the handle stays
/// (persistent) and the request's communicator (its error handler reports a failure). The
/// gate must be held: no drain can see the request between the test and the hand-over.
pub fn complete_one(idx: u32, real: c_int) -> Option<(MPI_Status, bool, VComm)> {
    let mut r = real;
    let st = test_real(&mut r)?;
    let (mut recv_comm, mut comm) = (None, VComm::NULL);
    let keep = OBJ.requests.with_or_remove(idx, |e| {
        comm = e.comm;
        recv_comm = e.counts_recv.then_some(e.comm);
        settle(e)
    });
    if let Some(comm) = recv_comm {
        count_if_received(comm, &st);
    }
    Some((st, keep.unwrap_or(false), comm))
}

/// One test of a request that a blocking call has just posted, before it is registered (see
/// [`complete_blocking`]); the gate must be held.
pub fn complete_at_once(real: &mut c_int, recv_comm: Option<VComm>) -> Option<MPI_Status> {
    let st = test_real(real)?;
    if let Some(comm) = recv_comm {
        count_if_received(comm, &st);
    }
    Some(st)
}

/// How many completion tests a waiting thread makes between two `sched_yield`s (every wait loop
/// of the shim): other threads and processes on its core get a turn, as an oversubscribed job
/// needs.
pub const YIELD_EVERY: u32 = 64;

/// Completes a request that a blocking call (MPI_Send, MPI_Recv, ...) has just posted, under
/// the caller's gate hold, without registering it: tests it until it completes, or until a
/// checkpoint closes the gate (then `None`, and the caller registers it before it leaves the
/// gate, so no checkpoint sees the real request unregistered, and waits for it as for any
/// request). Spinning inside an open gate holds no checkpoint back: the agent that closes it
/// waits for the threads inside, and this one leaves after its next test. It saves the table
/// entry and the gate round trip per test of the general wait loop, most of what the shim
/// added to a ping-pong's latency. On completion the real request is gone (freed by the
/// library) and a received message is counted on `recv_comm`.
pub fn complete_blocking(real: &mut c_int, recv_comm: Option<VComm>) -> Option<MPI_Status> {
    let mut spins = 0u32;
    loop {
        if let Some(st) = complete_at_once(real, recv_comm) {
            return Some(st);
        }
        if crate::core::gate::is_closed() {
            return None;
        }
        // As the general wait loop: other threads and processes on the core get a turn.
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(YIELD_EVERY) {
            std::thread::yield_now();
        }
    }
}

/// One completion test of a real request; Some(status) when it completed, with MPI_ERROR
/// holding the request's error (MPI_SUCCESS when none).
fn test_real(r: &mut c_int) -> Option<MPI_Status> {
    let (mut flag, mut st) = (0, MPI_Status::default());
    if !crate::core::renew::world_initialized() {
        if let Some(rc) = complete_without_progress(r, &mut st) {
            return completed(rc, 1, st);
        }
    }
    let rc = calls::request::test(r, &mut flag, &mut st).unwrap_or(MPI_ERR_OTHER);
    completed(rc, flag, st)
}

/// Completes `r` with MPI_Wait when MPI_Request_get_status says it is complete, or says None.
///
/// For programs of MPI sessions only (no MPI_Init): MPICH 4.0.2's MPI_Test runs the progress
/// engine even for a complete request, and in a process that used only the `mpi://self` process
/// set that engine faults (its network was never brought up: natively too, MPI_Test there dies
/// of SIGSEGV). A program's blocking call on a complete request never gets there natively
/// (MPI_Wait of a complete request does not progress), and the shim's blocking calls are
/// tests in a loop, so a complete request is found and completed without progress. Checkpoints
/// are refused while a session is open, so this path never meets a drain.
fn complete_without_progress(r: &mut c_int, st: &mut MPI_Status) -> Option<c_int> {
    calls::request::wait_if_complete(r, st)
}

/// Is this a nonblocking MPI-IO request? MPICH makes them generalized requests whose progress
/// functions are ROMIO's, and ROMIO's nonblocking collective I/O needs every rank to progress
/// them in the same order: tested in turns, two MPI_File_iwrite_all in flight interleave their
/// exchanges differently on different ranks (MPICH 4.0.2 hangs, MPICH 5 fails an assertion
/// unpacking a message of the other one). So the program's waits and the drain complete them
/// one after the other, in the order they were started (MPICH's own MPI_Waitall runs their wait
/// functions in the array's order).
///
/// Only asked once the program started one ([`file_io_started`]): every MPI_Wait would pay a
/// table lookup per request otherwise.
pub fn is_file_io(idx: u32) -> bool {
    OBJ.requests.with(idx, |e| matches!(&e.recipe, RequestRecipe::FileIo { .. })).unwrap_or(false)
}

/// Nonblocking MPI-IO requests started so far by this process (their `seq`).
static FILE_IO_STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The program starts a nonblocking MPI-IO request: its number in start order.
pub fn next_file_io() -> u64 {
    FILE_IO_STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Has the program ever started a nonblocking MPI-IO request (so that [`is_file_io`] may hold)?
#[inline]
pub fn file_io_started() -> bool {
    FILE_IO_STARTED.load(std::sync::atomic::Ordering::Relaxed) != 0
}

fn completed(rc: c_int, flag: c_int, mut st: MPI_Status) -> Option<MPI_Status> {
    if rc != MPI_SUCCESS {
        // The request completed in error.
        st.MPI_ERROR = rc;
    } else if flag == 0 {
        return None;
    } else if st.MPI_ERROR == MPI_ERR_PENDING {
        st.MPI_ERROR = MPI_SUCCESS;
    }
    Some(st)
}

fn count_if_received(comm: VComm, st: &MPI_Status) {
    if took_message(st) {
        count_recv(comm, st.MPI_SOURCE);
    }
}

/// Did a completed receive take a message from its sender (so that the drain counts it)? One
/// that succeeded did, and so did one that failed with MPI_ERR_TRUNCATE: the library matched
/// the message and delivered what fitted, and the message is gone from the channel. Counting
/// only successes left the drain waiting for ever for such messages (MPICH 4.0.2 over UCX
/// without rendezvous, as `mpicr run` sets it in a PID namespace, fails receives of large
/// messages into non-contiguous types with MPI_ERR_TRUNCATE: MPICH's pt2pt/sendself, whose
/// program does not look at MPI_Wait's result). A cancelled receive, or one that failed
/// otherwise (before matching), took nothing.
pub(crate) fn took_message(st: &MPI_Status) -> bool {
    if st.MPI_SOURCE < 0 || st.count_hi_and_cancelled & 1 != 0 {
        return false;
    }
    st.MPI_ERROR == MPI_SUCCESS || error_class(st.MPI_ERROR) == MPI_ERR_TRUNCATE
}

fn error_class(code: c_int) -> c_int {
    let mut class = MPI_ERR_OTHER;
    calls::init::error_class(code, &mut class);
    class
}

/// The program freed communicator `comm`: its requests still pending, or persistent, are
/// marked (see [`RequestEntry::comm_freed`]); the handle's slot may serve another
/// communicator from now on.
pub fn note_comm_freed(comm: VComm) {
    for (idx, _, e) in OBJ.requests.snapshot() {
        if e.comm == comm && (e.done.is_none() || e.recipe.is_persistent()) {
            OBJ.requests.with(idx, |x| x.comm_freed = true);
        }
    }
}

/// Satisfies a receive from the drained-message buffer, if a message matches.
/// Returns the status to report (with MPI_ERROR set on truncation).
pub fn take_drained_into(a: &P2pArgs) -> Option<MPI_Status> {
    if drained::is_empty() || a.peer == MPI_PROC_NULL {
        return None;
    }
    let gid = comm_gid(a.comm)?;
    // (a type the program freed, see `note_type_freed`, is built for the copy)
    let ty = Built::of(&a.datatype).ok()?;
    let m = drained::take(gid, a.peer, a.tag)?;
    Some(unpack_real(&m.data, a.buf as usize, a.count, ty.real, a.comm, m.source, m.tag))
}

/// Copies a drained message (packed bytes) into the program's typed buffer.
pub(crate) fn unpack(data: &[u8], buf: usize, count: i64, dt: VDatatype, comm: VComm, source: c_int, tag: c_int) -> MPI_Status {
    unpack_real(data, buf, count, handles::datatype(dt).raw(), comm, source, tag)
}

/// As [`unpack`], with the real datatype.
fn unpack_real(data: &[u8], buf: usize, count: i64, rdt: c_int, comm: VComm, source: c_int, tag: c_int) -> MPI_Status {
    let mut size: MPI_Count = 0;
    calls::datatype::size_c(rdt, &mut size);
    let capacity = size.saturating_mul(count);
    let mut st = MPI_Status { MPI_SOURCE: source, MPI_TAG: tag, MPI_ERROR: MPI_SUCCESS, ..Default::default() };
    let (n, err) = if data.len() as i64 > capacity { (capacity, MPI_ERR_TRUNCATE) } else { (data.len() as i64, MPI_SUCCESS) };
    if n > 0 && size > 0 {
        let mut pos: MPI_Count = 0;
        // The first `n` bytes of `data`; the program's buffer holds `count` elements of `dt`,
        // of which `n / size` are written.
        calls::request::unpack_c(&data[..n as usize], &mut pos, buf, n / size, rdt, handles::comm(comm).raw());
    }
    st.set_bytes(n);
    st.MPI_ERROR = err;
    st
}

/// The drain: tests every request the program has pending in the real library once
/// (completions are recorded for the program, see [`poll`]) and calls `received(comm, source)`
/// for each receive that completed with a message counted by the drain. Returns how many are
/// still pending.
pub fn test_pending(mut received: impl FnMut(VComm, c_int)) -> usize {
    let mut pending = 0;
    let requests = OBJ.requests.snapshot();
    // Nonblocking MPI-IO: only the first pending one in start order (see `is_file_io`).
    let first_io = requests
        .iter()
        .filter_map(|(_, _, e)| match &e.recipe {
            RequestRecipe::FileIo { seq, .. } if e.done.is_none() => Some(*seq),
            _ => None,
        })
        .min();
    for (idx, real, e) in requests {
        if e.done.is_some() || e.repost || !active(&e.recipe) {
            continue;
        }
        if matches!(&e.recipe, RequestRecipe::FileIo { seq, .. } if Some(*seq) != first_io) {
            pending += 1;
            continue;
        }
        let Some(st) = poll(idx, real.raw()) else {
            pending += 1;
            continue;
        };
        if e.counts_recv && took_message(&st) {
            received(e.comm, st.MPI_SOURCE);
        }
    }
    pending
}

/// The drain: sends and nonblocking collectives not completed yet.
pub fn pending_sends() -> usize {
    OBJ.requests.snapshot().into_iter().filter(|(_, _, e)| e.done.is_none() && !e.repost && active(&e.recipe) && !is_recv(&e.recipe)).count()
}

/// The drain's end: receives still pending are cancelled, to be posted again after the renewal
/// ([`Renew::rebuild`]); one that matched a message meanwhile is recorded and counted by `poll`.
pub fn cancel_receives(deadline: std::time::Instant) -> Result<(), RebuildError> {
    for (idx, real, e) in OBJ.requests.snapshot() {
        if e.done.is_some() || e.repost || !active(&e.recipe) || !is_recv(&e.recipe) {
            continue;
        }
        let mut r = real.raw();
        calls::request::cancel(&mut r);
        loop {
            if let Some(st) = poll(idx, real.raw()) {
                if st.count_hi_and_cancelled & 1 != 0 {
                    // Cancelled: posted again on the renewed library.
                    OBJ.requests.with(idx, |x| {
                        x.done = None;
                        x.repost = true;
                    });
                }
                // Otherwise it matched a message after all; `poll` recorded and counted it.
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(RebuildError::CancelReceive);
            }
        }
    }
    Ok(())
}

/// A checkpoint failed after its drain cancelled pending receives, before the library was
/// released: they are posted again on the same library (from the drained messages first, as
/// the renewal does), or the program would wait on requests the library has freed.
pub fn repost_cancelled() -> Result<(), RebuildError> {
    for (idx, real, e) in OBJ.requests.snapshot() {
        let args = match &e.recipe {
            RequestRecipe::Recv { args } | RequestRecipe::PersistentRecv { args, .. } if e.repost => args,
            _ => continue,
        };
        if let Some(st) = take_drained_into(args) {
            OBJ.requests.with(idx, |x| {
                x.done = Some(st.as_array());
                x.repost = false;
            });
            continue;
        }
        let mut r = real.raw();
        // The program's buffer (its receive is still pending for the program); a persistent
        // request is inactive since its cancel.
        let rc = if e.recipe.is_persistent() {
            calls::request::start(&mut r).unwrap_or(MPI_ERR_OTHER)
        } else {
            let ty = Built::of(&args.datatype).map_err(|rc| RebuildError::mpi("posting a receive again", rc))?;
            calls::request::irecv_c(&real_args(args, ty.real), &mut r).unwrap_or(MPI_ERR_OTHER)
        };
        check(rc, "posting a receive again")?;
        OBJ.requests.set_real(idx, RealRequest(r));
        OBJ.requests.with(idx, |x| x.repost = false);
    }
    Ok(())
}

/// A recipe's arguments in the current generation's handles, its datatype already built.
fn real_args(a: &P2pArgs, datatype: MPI_Datatype) -> calls::request::RealP2p {
    calls::request::RealP2p { buf: a.buf as usize, count: a.count, datatype, peer: a.peer, tag: a.tag, comm: handles::comm(a.comm).raw() }
}

/// Is the request started (persistent ones only when active)?
fn active(r: &RequestRecipe) -> bool {
    match r {
        RequestRecipe::PersistentSend { active, .. }
        | RequestRecipe::PersistentRecv { active, .. }
        | RequestRecipe::Collective { active, .. }
        | RequestRecipe::Partitioned { active, .. } => *active,
        _ => true,
    }
}

/// `MPI_Rput`, `MPI_Rget`, `MPI_Raccumulate`, `MPI_Rget_accumulate` and their `_c` variants.
fn is_rma(function: &str) -> bool {
    ["MPI_Rput", "MPI_Rget", "MPI_Raccumulate"].iter().any(|f| function.starts_with(f))
}

fn is_recv(r: &RequestRecipe) -> bool {
    matches!(r, RequestRecipe::Recv { .. } | RequestRecipe::PersistentRecv { .. })
}

/// The program frees datatype `v` (`recipe`: its recipe, None for a predefined one): requests
/// that may still be posted again (pending receives, persistent ones) keep the type's recipe
/// instead of its handle, whose slot may serve another type from now on.
pub fn note_type_freed(v: VDatatype, recipe: &mpicr_virtid::TypeRecipe) {
    let uses = |a: &P2pArgs| a.datatype == TypeRef::Predefined(v);
    for (idx, _, e) in OBJ.requests.snapshot() {
        let hit = match &e.recipe {
            RequestRecipe::Recv { args } => e.done.is_none() && uses(args),
            RequestRecipe::PersistentRecv { args, .. } | RequestRecipe::PersistentSend { args, .. } => uses(args),
            _ => false,
        };
        if hit {
            OBJ.requests.with(idx, |x| match &mut x.recipe {
                RequestRecipe::Recv { args } | RequestRecipe::PersistentRecv { args, .. } | RequestRecipe::PersistentSend { args, .. } => {
                    args.datatype = TypeRef::Derived(Box::new(recipe.clone()))
                }
                _ => {}
            });
        }
    }
}

/// The request kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    fn refusal(&self) -> Option<String> {
        for (_, _, r) in OBJ.requests.snapshot() {
            match &r.recipe {
                RequestRecipe::Collective { persistent: true, init: None, function, .. } => {
                    return Some(format!("a persistent collective request ({function}) has no recipe; free it before checkpointing"));
                }
                RequestRecipe::Generalized { .. } if r.done.is_none() => {
                    return Some("a generalized request (MPI_Grequest_start) is pending".into());
                }
                // Request-based RMA completes in the drain (tested with the sends).
                RequestRecipe::Other { function } if r.done.is_none() && !function.contains("Mrecv") && !is_rma(function) => {
                    return Some(format!("a pending {function} request cannot be checkpointed yet"));
                }
                // (a renewal would post it again, on a communicator the program no longer has)
                RequestRecipe::Recv { .. }
                | RequestRecipe::PersistentRecv { .. }
                | RequestRecipe::PersistentSend { .. }
                | RequestRecipe::Collective { persistent: true, .. }
                | RequestRecipe::Partitioned { .. }
                    if r.comm_freed && (r.done.is_none() || r.recipe.is_persistent()) =>
                {
                    return Some(
                        "a receive or persistent request is pending on a communicator the program freed (MPI_Comm_free); it cannot be checkpointed yet".into(),
                    );
                }
                _ => {}
            }
        }
        None
    }

    /// Persistent requests are freed (the others completed or were cancelled in the drain).
    fn free_real(&self) {
        for (_, r, e) in OBJ.requests.snapshot() {
            let mut r = r.raw();
            if e.recipe.is_persistent() && r != MPI_REQUEST_NULL {
                // A live real persistent request of the current generation, freed once.
                calls::object::free(Kind::Request, &mut r);
            }
        }
    }

    /// Posts cancelled receives again (or completes them from the drained messages) and
    /// re-creates persistent requests: point-to-point ones here, collective and partitioned
    /// ones in their own orders (`pcoll`, `part`).
    fn rebuild(&self) -> Result<(), RebuildError> {
        for (idx, _, e) in OBJ.requests.snapshot() {
            if matches!(e.recipe, RequestRecipe::Collective { init: Some(_), .. } | RequestRecipe::Partitioned { .. }) {
                continue;
            }
            let mut r = MPI_REQUEST_NULL;
            // The datatype, built from its recipe when the program freed it meanwhile.
            let ty = match &e.recipe {
                RequestRecipe::Recv { args } if e.repost => {
                    Some(Built::of(&args.datatype).map_err(|rc| RebuildError::mpi("rebuilding a request's datatype", rc))?)
                }
                RequestRecipe::PersistentRecv { args, .. } | RequestRecipe::PersistentSend { args, .. } => {
                    Some(Built::of(&args.datatype).map_err(|rc| RebuildError::mpi("rebuilding a request's datatype", rc))?)
                }
                _ => None,
            };
            let dt = || ty.as_ref().map_or(MPI_DATATYPE_NULL, |b| b.real);
            // The program's buffers and live translated handles.
            let rc = match &e.recipe {
                RequestRecipe::Recv { args } if e.repost => {
                    if let Some(st) = take_drained_into(args) {
                        OBJ.requests.with(idx, |x| {
                            x.done = Some(st.as_array());
                            x.repost = false;
                        });
                        continue;
                    }
                    calls::request::irecv_c(&real_args(args, dt()), &mut r).unwrap_or(MPI_ERR_OTHER)
                }
                RequestRecipe::PersistentRecv { args, active } => {
                    let rc = calls::request::recv_init_c(&real_args(args, dt()), &mut r).unwrap_or(MPI_ERR_OTHER);
                    if rc == MPI_SUCCESS && *active && e.repost {
                        if let Some(st) = take_drained_into(args) {
                            OBJ.requests.with(idx, |x| x.done = Some(st.as_array()));
                        } else {
                            calls::request::start(&mut r);
                        }
                    }
                    rc
                }
                RequestRecipe::PersistentSend { mode, args, .. } => {
                    let init = match mode {
                        SendMode::Standard => SendInit::Standard,
                        SendMode::Buffered => SendInit::Buffered,
                        SendMode::Synchronous => SendInit::Synchronous,
                        SendMode::Ready => SendInit::Ready,
                    };
                    calls::request::send_init_c(init, &real_args(args, dt()), &mut r).unwrap_or(MPI_ERR_OTHER)
                }
                _ => MPI_SUCCESS,
            };
            check(rc, "re-posting a request")?;
            OBJ.requests.set_real(idx, RealRequest(r));
            OBJ.requests.with(idx, |x| x.repost = false);
        }
        super::pcoll::rebuild()?;
        super::part::rebuild()
    }
}
