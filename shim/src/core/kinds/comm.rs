//! Communicators: the entry (recipe: world ranks, remote group, topology; error handler,
//! attributes, name, counters), the lock-free counters of sends, receives and collectives the
//! drain and the alignment read, and the collective rebuild on a renewed library.

use super::{check, RebuildError, Renewable};
use crate::core::handles;
use crate::core::renew::real_world;
use crate::core::state::{Attrs, OBJ, SELF_INDEX, WORLD_INDEX};
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::object::{Kind, Named};
use crate::lower::handles::RealComm;
use mpicr_virtid::{CommCounters, CommRecipe, Counters, CountsSnapshot, Table, Topology, VComm, VErrhandler};
use serde::{Deserialize, Serialize};
use std::os::raw::c_int;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommEntry {
    pub recipe: CommRecipe,
    pub errhandler: VErrhandler,
    pub attrs: Attrs,
    /// Collectives started on this communicator (for checkpoint alignment), and messages sent
    /// to / received from each rank (of the remote group, for intercomms). The live counts are
    /// atomics in [`Comms`]; these fields hold a copy only in entries returned by
    /// [`Comms::snapshot`] and [`Comms::get`] (zero and empty in the table itself).
    pub coll_seq: u64,
    pub sent: Vec<u64>,
    pub recvd: Vec<u64>,
    /// `MPI_Comm_create_group` calls made with this parent (part of the child's id).
    pub create_group_seq: u64,
    /// Made by a call whose result cannot be rebuilt (spawn, connect, ...).
    pub restorable: bool,
    /// Name (MPI_Comm_set_name), read back at checkpoint time.
    pub name: Option<String>,
    /// The buffer for buffered sends attached to it (`MPI_Comm_attach_buffer`: address and
    /// size), kept by mpicr alone (`core::bsend`), so it needs no renewal.
    #[serde(default)]
    pub buffer: Option<(usize, i64)>,
}

impl CommEntry {
    pub fn new(recipe: CommRecipe, errhandler: VErrhandler) -> Self {
        CommEntry {
            recipe,
            errhandler,
            attrs: Vec::new(),
            coll_seq: 0,
            sent: Vec::new(),
            recvd: Vec::new(),
            create_group_seq: 0,
            restorable: true,
            name: None,
            buffer: None,
        }
    }

    /// Ranks the communicator sends to and receives from: its group, or its remote group.
    fn peers_of(recipe: &CommRecipe) -> usize {
        recipe.remote_world_ranks.as_ref().map_or(recipe.world_ranks.len(), |r| r.len())
    }

    /// One process and no remote group: its collectives hold no other rank back.
    fn alone(&self) -> bool {
        self.recipe.world_ranks.len() == 1 && self.recipe.remote_world_ranks.is_none()
    }
}

/// The communicator table: entries behind the table's lock, and the counters every send,
/// receive and collective updates, lock-free ([`Counters`]), attached to a slot for as long as
/// it is live. Reads and updates of other entry fields go through the table (`Deref`).
#[derive(Default)]
pub struct Comms {
    table: Table<CommEntry, RealComm>,
    counters: Counters,
}

impl std::ops::Deref for Comms {
    type Target = Table<CommEntry, RealComm>;
    fn deref(&self) -> &Table<CommEntry, RealComm> {
        &self.table
    }
}

impl Comms {
    /// The counters of a live communicator, without locking (the hot path).
    #[inline(always)]
    pub fn counters(&self, index: u32) -> Option<&CommCounters> {
        self.counters.get(index)
    }

    /// Stores a new communicator with zeroed counters.
    pub fn insert(&self, real: RealComm, entry: CommEntry) -> Result<u32, mpicr_virtid::table::Full> {
        self.table.insert_and(real, entry, |i, e| self.counters.attach(i, e.recipe.gid, e.alone(), CommEntry::peers_of(&e.recipe)))
    }

    /// Replaces every communicator with saved ones, counters included (a restarted app-mode
    /// process, `core::app`).
    pub fn restore_all(&self, items: Vec<(u32, RealComm, CommEntry)>) {
        for (i, _, _) in self.table.snapshot() {
            self.remove(i);
        }
        let counts: Vec<(u32, u64, bool, usize, CountsSnapshot)> = items
            .iter()
            .map(|(i, _, e)| {
                let c = CountsSnapshot { collectives: e.coll_seq, sent: e.sent.clone(), recvd: e.recvd.clone() };
                (*i, e.recipe.gid, e.alone(), CommEntry::peers_of(&e.recipe), c)
            })
            .collect();
        self.table.restore(items);
        for (i, gid, alone, peers, c) in counts {
            self.counters.attach(i, gid, alone, peers);
            if let Some(block) = self.counters.get(i) {
                block.load(&c);
            }
        }
    }

    /// Removes a communicator and its counters.
    pub fn remove(&self, index: u32) -> Option<CommEntry> {
        self.table.remove_and(index, |i, _| self.counters.detach(i))
    }

    /// A live entry, counters included.
    pub fn get(&self, index: u32) -> Option<CommEntry> {
        self.table.with(index, |e| self.with_counts(index, e.clone()))
    }

    /// Index, real handle and a copy of every live communicator, counters included (exact
    /// while the gate is closed; see `mpicr_virtid::counters`).
    pub fn snapshot(&self) -> Vec<(u32, RealComm, CommEntry)> {
        // Under the table's lock: a slot's counters cannot be swapped for another
        // communicator's between reading its entry and its counters.
        self.table.snapshot_map(|i, real, e| (i, real, self.with_counts(i, e.clone())))
    }

    fn with_counts(&self, index: u32, mut e: CommEntry) -> CommEntry {
        if let Some(c) = self.counters.get(index) {
            let CountsSnapshot { collectives, sent, recvd } = c.snapshot();
            (e.coll_seq, e.sent, e.recvd) = (collectives, sent, recvd);
        }
        e
    }
}

/// Counts a message sent to `dest` (rank in the communicator's remote/peer group). Lock-free.
#[inline]
pub fn count_send(comm: VComm, dest: c_int) {
    if let Some(c) = handles::comm_index(comm).and_then(|i| OBJ.comms.counters(i)) {
        c.count_sent(dest);
    }
}

/// Counts a message received from `src`. Lock-free.
#[inline]
pub fn count_recv(comm: VComm, src: c_int) {
    if let Some(c) = handles::comm_index(comm).and_then(|i| OBJ.comms.counters(i)) {
        c.count_recvd(src);
    }
}

/// The job-wide id of a communicator (the drained-message buffer's key).
pub fn comm_gid(comm: VComm) -> Option<u64> {
    handles::comm_index(comm).and_then(|i| OBJ.comms.counters(i)).map(|c| c.gid())
}

/// The ranks a communicator talks to, as world ranks (the remote group of an intercomm).
pub fn peers(c: &CommEntry) -> Vec<i32> {
    c.recipe.remote_world_ranks.clone().unwrap_or_else(|| c.recipe.world_ranks.clone())
}

pub fn world_rank() -> i32 {
    OBJ.comms.with(SELF_INDEX, |c| c.recipe.world_ranks.first().copied().unwrap_or(0)).unwrap_or(0)
}

pub fn world_size() -> i32 {
    OBJ.comms.with(WORLD_INDEX, |c| c.recipe.world_ranks.len() as i32).unwrap_or(0)
}

/// Sets MPI_ERRORS_RETURN on a real communicator: the shim applies the program's error
/// handlers itself.
pub fn errors_return_on(real_comm: c_int) {
    calls::comm::comm_set_errhandler(real_comm, MPI_ERRORS_RETURN);
}

/// The real group of MPI_COMM_WORLD in the current generation (caller frees).
pub(super) fn world_group() -> Result<c_int, RebuildError> {
    let mut g = MPI_GROUP_NULL;
    let rc = calls::comm::comm_group(real_world(), &mut g).unwrap_or(MPI_ERR_OTHER);
    if rc != MPI_SUCCESS {
        return Err(RebuildError::WorldGroup);
    }
    Ok(g)
}

/// An intracommunicator with exactly `ranks` (world ranks, in order), collective over them.
fn comm_of_ranks(world_group: c_int, ranks: &[i32], tag: c_int) -> Result<c_int, RebuildError> {
    let (mut g, mut c) = (MPI_GROUP_NULL, MPI_COMM_NULL);
    check(calls::comm::group_incl(world_group, ranks, &mut g).unwrap_or(MPI_ERR_OTHER), "MPI_Group_incl")?;
    check(calls::comm::comm_create_group(real_world(), g, tag, &mut c).unwrap_or(MPI_ERR_OTHER), "MPI_Comm_create_group")?;
    calls::object::free(Kind::Group, &mut g);
    Ok(c)
}

fn apply_topology(comm: c_int, t: &Topology) -> Result<c_int, RebuildError> {
    let mut out = MPI_COMM_NULL;
    match t {
        Topology::None => return Ok(comm),
        Topology::Cart { dims, periods } => check(calls::comm::cart_create(comm, dims, periods, &mut out).unwrap_or(MPI_ERR_OTHER), "MPI_Cart_create")?,
        Topology::Graph { index, edges } => check(calls::comm::graph_create(comm, index, edges, &mut out).unwrap_or(MPI_ERR_OTHER), "MPI_Graph_create")?,
        Topology::DistGraph { sources, source_weights, destinations, dest_weights } => check(
            calls::comm::dist_graph_create_adjacent(comm, sources, source_weights.as_deref(), destinations, dest_weights.as_deref(), &mut out)
                .unwrap_or(MPI_ERR_OTHER),
            "MPI_Dist_graph_create_adjacent",
        )?,
    }
    let mut c = comm;
    calls::object::free(Kind::Comm, &mut c);
    errors_return_on(out);
    Ok(out)
}

/// Reads the name the program gave a real object (`MPI_Comm_get_name`, `MPI_Type_get_name`).
pub(super) fn name_of(kind: Named, h: c_int) -> Option<String> {
    calls::object::name(kind, h)
}

/// Gives a rebuilt object the name it had (`MPI_Comm_set_name`, `MPI_Type_set_name`).
pub(super) fn restore_name(kind: Named, h: c_int, name: Option<String>) {
    if let Some(n) = name.and_then(|n| std::ffi::CString::new(n).ok()) {
        calls::object::set_name(kind, h, &n);
    }
}

/// Recipes of the communicators this rank freed that other members may still hold. MPICH
/// frees a communicator locally, so at a checkpoint some members may have freed one that the
/// others still use; its rebuild is collective over all its members, so the members that freed
/// it make it again too (and free it at once). A recipe goes once no rank holds its
/// communicator any more (the renewal asks, see [`held_anywhere`]); until then, one per
/// communicator freed since the last checkpoint.
static FREED: parking_lot::Mutex<Vec<CommRecipe>> = parking_lot::Mutex::new(Vec::new());

/// Notes a communicator the program freed (see [`FREED`]).
pub fn note_freed(e: &CommEntry) {
    if !e.alone() {
        FREED.lock().push(e.recipe.clone());
    }
}

/// The ids of the communicators some rank of the job still holds, `mine` being this rank's:
/// an exchange over the renewed library's world (every rank renews at once).
fn held_anywhere(mine: &[u64]) -> Result<std::collections::HashSet<u64>, RebuildError> {
    let n = world_size().max(1) as usize;
    let mut counts = vec![0 as c_int; n];
    let my_bytes = (mine.len() * 8) as c_int;
    // One int out of each rank into `counts` (world size ints).
    let rc = calls::comm::allgather_int(my_bytes, &mut counts, real_world()).unwrap_or(MPI_ERR_OTHER);
    check(rc, "MPI_Allgather (communicators held)")?;
    let mut displs = Vec::with_capacity(n);
    let mut total = 0;
    for &c in &counts {
        displs.push(total);
        total += c;
    }
    let mut all = vec![0u64; total as usize / 8];
    // `all` has room for every rank's, at `displs`.
    let rc = calls::comm::allgatherv_u64(mine, &mut all, &counts, &displs, real_world()).unwrap_or(MPI_ERR_OTHER);
    check(rc, "MPI_Allgatherv (communicators held)")?;
    Ok(all.into_iter().collect())
}

/// Set once the program revoked a communicator (ULFM's `MPIX_Comm_revoke`): a renewal cannot
/// make a communicator again revoked, so checkpoints are refused from then on.
static REVOKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn note_revoked() {
    REVOKED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The communicator kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    fn refusal(&self) -> Option<String> {
        if REVOKED.load(std::sync::atomic::Ordering::Relaxed) {
            return Some(
                "a communicator was revoked (MPIX_Comm_revoke): a renewed library cannot make it again revoked, so this job cannot be checkpointed".into(),
            );
        }
        let comms = OBJ.comms.snapshot();
        let (_, _, c) = comms.iter().find(|(_, _, c)| !c.restorable)?;
        Some(format!("a communicator made by {} reaches processes outside the job and cannot be restored", c.recipe.made_by))
    }

    /// Names are read back (the library keeps them).
    fn snapshot(&self) {
        for (idx, real, _) in OBJ.comms.snapshot() {
            let n = name_of(Named::Comm, real.raw());
            OBJ.comms.with(idx, |c| c.name = n);
        }
    }

    fn free_real(&self) {
        for (_, r, _) in OBJ.comms.snapshot() {
            // World and self are the library's own in the world model (not to be freed); the
            // `sessions` strategy made its own.
            if [MPI_COMM_WORLD, MPI_COMM_SELF, MPI_COMM_NULL].contains(&r.raw()) {
                continue;
            }
            let mut r = r.raw();
            // A live real communicator of the current generation, freed once.
            calls::object::free(Kind::Comm, &mut r);
        }
    }

    /// Communicators (the renewal set up world and self) are rebuilt in the order of their
    /// job-wide ids, the same on every rank, so the collective creations of overlapping groups
    /// never wait on each other in a cycle; then every communicator gets its name back.
    fn rebuild(&self) -> Result<(), RebuildError> {
        let wg = world_group()?;
        // The program's communicators, and those it freed that another rank still holds
        // (`None`: made again only for the others' sake, and freed), in id order.
        let mut comms: Vec<(Option<u32>, CommRecipe)> =
            OBJ.comms.snapshot().into_iter().filter(|(i, _, _)| *i != WORLD_INDEX && *i != SELF_INDEX).map(|(i, _, c)| (Some(i), c.recipe)).collect();
        let mine: Vec<u64> = comms.iter().map(|(_, r)| r.gid).collect();
        let held = held_anywhere(&mine)?;
        let freed = {
            let mut f = FREED.lock();
            f.retain(|r| held.contains(&r.gid));
            f.clone()
        };
        comms.extend(freed.into_iter().map(|r| (None, r)));
        comms.sort_by_key(|(_, r)| r.gid);
        for (idx, r) in comms {
            let tag = ((r.gid >> 17) & 0x3fff) as c_int;
            let local = comm_of_ranks(wg, &r.world_ranks, tag)?;
            let mut comm = local;
            if let Some(remote) = &r.remote_world_ranks {
                let mut inter = MPI_COMM_NULL;
                let remote_leader = *remote.first().ok_or(RebuildError::NoRemoteGroup)?;
                check(calls::comm::intercomm_create(local, 0, real_world(), remote_leader, tag, &mut inter).unwrap_or(MPI_ERR_OTHER), "MPI_Intercomm_create")?;
                calls::object::free(Kind::Comm, &mut comm);
                comm = inter;
            }
            comm = apply_topology(comm, &r.topology)?;
            match idx {
                Some(idx) => {
                    OBJ.comms.set_real(idx, RealComm(comm));
                }
                // The communicator just made, freed once (a local operation in MPICH).
                None => {
                    calls::object::free(Kind::Comm, &mut comm);
                }
            }
        }
        // Freeing the world group made above.
        calls::object::free(Kind::Group, &mut { wg });
        for (_, real, c) in OBJ.comms.snapshot() {
            restore_name(Named::Comm, real.raw(), c.name);
        }
        Ok(())
    }
}
