//! Partitioned point-to-point (`MPI_Psend_init` / `MPI_Precv_init`) through a checkpoint.
//!
//! A started pair completes only when both sides started it and the sender made every
//! partition ready, which only the program does. So a checkpoint waits for that, bounded by
//! its alignment timeout, instead of refusing it:
//! - each send/receive pair has an id both sides compute alike ([`pair_id`]) and a counter of
//!   its starts, aligned like the collectives of a two-process communicator: a side behind runs
//!   on until it started as often as its peer, and a start past that waits (`MPI_Start` goes
//!   through the alignment check, see `face::api::request`);
//! - the alignment is reached only when every started send of this process has all its
//!   partitions ready ([`not_aligned`]); `MPI_Pready*` wakes the agent;
//! - the drain then completes every started pair (the library's test does it), and the
//!   program's wait finds it done.
//!
//! The renewal makes every partitioned request again in this process's init order, so that the
//! library matches sends and receives as it did before.

use super::RebuildError;
use crate::core::handles;
use crate::core::kinds::comm::{peers, world_rank};
use crate::core::kinds::datatype::Built;
use crate::core::state::OBJ;
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::handles::RealRequest;
use mpicr_virtid::{mix, CommCounters, PartInit, RequestRecipe};
use mpicr_virtid::{VComm, VInfo};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Start counters per pair id and side (send: true), kept while the process lives (a few words
/// per pair); both sides are here when a process sends to itself.
static COUNTERS: Mutex<Option<HashMap<PairSide, Arc<CommCounters>>>> = Mutex::new(None);
/// A pair id and a side (send: true).
type PairSide = (u64, bool);
/// Partitioned inits of this process so far (`PartInit::order`).
static INITS: AtomicU64 = AtomicU64::new(0);
/// Inits per (communicator, sender, receiver, tag) on this side, for [`pair_id`].
static ORDINALS: Mutex<Option<HashMap<PairKey, u64>>> = Mutex::new(None);
/// (communicator id, sender, receiver, tag).
type PairKey = (u64, i32, i32, i32);

/// Marks the start counters' ids apart from communicators' ids.
const PAIR_SALT: u64 = 0x5041_5254; // "PART"

/// The job-wide id of the send/receive pair an init of this side belongs to: the n-th
/// `MPI_Psend_init` from A to B with tag T on a communicator matches the n-th `MPI_Precv_init`
/// of B from A with tag T (partitioned receives take no wildcards).
fn pair_id(comm: VComm, peer: c_int, tag: c_int, send: bool) -> Option<u64> {
    let idx = handles::comm_index(comm)?;
    let c = OBJ.comms.get(idx)?;
    let peer_world = *peers(&c).get(usize::try_from(peer).ok()?)?;
    let me = world_rank();
    let (from, to) = if send { (me, peer_world) } else { (peer_world, me) };
    let key = (c.recipe.gid, from, to, tag);
    let n = {
        let mut o = ORDINALS.lock();
        let slot = o.get_or_insert_with(HashMap::new).entry(key).or_insert(0);
        *slot += 1;
        *slot
    };
    let mut h = mix(mix(PAIR_SALT, c.recipe.gid), from as u64);
    h = mix(mix(mix(h, to as u64), tag as u64), n);
    Some(h.max(3))
}

/// The recipe of a partitioned request just made by the program.
#[allow(clippy::too_many_arguments)]
pub fn recipe(
    send: bool,
    buf: u64,
    partitions: c_int,
    count: MPI_Count,
    datatype: mpicr_virtid::TypeRef,
    peer: c_int,
    tag: c_int,
    comm: VComm,
    info: VInfo,
) -> RequestRecipe {
    let order = INITS.fetch_add(1, Ordering::Relaxed);
    let pair = match pair_id(comm, peer, tag, send) {
        // Never "alone", even from a process to itself: its send and receive are two counters
        // under one id, aligned like any pair (started unaligned, the send could not complete).
        Some(id) => {
            COUNTERS.lock().get_or_insert_with(HashMap::new).insert((id, send), Arc::new(CommCounters::detached(id, false)));
            id
        }
        // (MPI_PROC_NULL, or a communicator that is not ours: nothing to align)
        None => 0,
    };
    let init = PartInit { send, buf, partitions, count, datatype, peer, tag, comm, info, order, pair };
    RequestRecipe::Partitioned { init: Box::new(init), active: false, ready: Vec::new() }
}

/// The start counter of one side of a pair (None: nothing to align).
pub fn counters(init: &PartInit) -> Option<Arc<CommCounters>> {
    COUNTERS.lock().as_ref()?.get(&(init.pair, init.send)).cloned()
}

/// Records partitions `parts` of request `idx` as ready; wakes a checkpoint that waits for them.
/// Outside a checkpoint's alignment nothing waits, and `MPI_Pready` pays one atomic load: the
/// mark is made under the table's lock before `aligning` is read, and the agent sets it before
/// it looks at the marks under that lock, so either it sees this mark or this call sees it
/// aligning.
pub fn mark_ready(idx: u32, parts: impl Iterator<Item = c_int>) {
    OBJ.requests.with(idx, |e| {
        if let RequestRecipe::Partitioned { init, ready, .. } = &mut e.recipe {
            let words = (init.partitions.max(0) as usize).div_ceil(64);
            ready.resize(words, 0);
            for p in parts {
                if let Some(w) = usize::try_from(p).ok().and_then(|p| ready.get_mut(p / 64)) {
                    *w |= 1 << (p % 64);
                }
            }
        }
    });
    if crate::core::agent::aligning() {
        crate::core::agent::notify_progress();
    }
}

fn all_ready(init: &PartInit, ready: &[u64]) -> bool {
    let n = init.partitions.max(0) as usize;
    (0..n).all(|p| ready.get(p / 64).is_some_and(|w| w & (1 << (p % 64)) != 0))
}

/// The counters of every live pair: (id, starts), for alignment (both sides of a pair within
/// this process report under the same id).
pub fn start_counts() -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for (_, _, e) in OBJ.requests.snapshot() {
        if let RequestRecipe::Partitioned { init, .. } = &e.recipe {
            if let Some(c) = counters(init) {
                out.push((init.pair, c.collectives()));
            }
        }
    }
    out
}

/// Why this process is not aligned yet as far as partitioned requests go: a pair started fewer
/// times than its peer did, or a started send with partitions not ready.
pub fn not_aligned(targets: &HashMap<u64, u64>) -> Option<String> {
    for (_, _, e) in OBJ.requests.snapshot() {
        let RequestRecipe::Partitioned { init, active, ready } = &e.recipe else { continue };
        if let Some(c) = counters(init) {
            let t = targets.get(&init.pair).copied().unwrap_or(0);
            if c.collectives() < t {
                let f = if init.send { "MPI_Psend_init" } else { "MPI_Precv_init" };
                return Some(format!("a partitioned request ({f}) was started {} times, its peer {t} times", c.collectives()));
            }
        }
        if init.send && *active && e.done.is_none() && !all_ready(init, ready) {
            return Some("a started partitioned send (MPI_Psend_init) has partitions not ready (MPI_Pready)".into());
        }
    }
    None
}

/// The renewal: every partitioned request made again, in this process's init order.
pub fn rebuild() -> Result<(), RebuildError> {
    let mut todo: Vec<(u32, Box<PartInit>)> = OBJ
        .requests
        .snapshot()
        .into_iter()
        .filter_map(|(idx, _, e)| match e.recipe {
            RequestRecipe::Partitioned { init, .. } => Some((idx, init)),
            _ => None,
        })
        .collect();
    todo.sort_by_key(|(_, i)| i.order);
    for (idx, i) in todo {
        let t = Built::of(&i.datatype).map_err(|rc| RebuildError::mpi("rebuilding a partitioned request's datatype", rc))?;
        let (c, inf) = (handles::comm(i.comm).raw(), handles::info(i.info).raw());
        let mut r = MPI_REQUEST_NULL;
        // The program's buffer (kept for the request's life, as MPI requires).
        let rc =
            calls::request::partitioned_init(i.send, i.buf as usize, i.partitions, i.count, t.real, i.peer, i.tag, c, inf, &mut r).unwrap_or(MPI_ERR_OTHER);
        super::check(rc, if i.send { "making a partitioned send again" } else { "making a partitioned receive again" })?;
        OBJ.requests.set_real(idx, RealRequest(r));
    }
    Ok(())
}
