//! Communicators: the entry (recipe: world ranks, remote group, topology; error handler,
//! attributes, name, counters), the lock-free counters of sends, receives and collectives the
//! drain and the alignment read, and the collective rebuild on a renewed library.

use super::{check, RebuildError, Renewable};
use crate::core::handles;
use crate::core::renew::real_world;
use crate::core::state::{Attrs, OBJ, SELF_INDEX, WORLD_INDEX};
use crate::lower;
use crate::lower::abi::*;
use crate::lower::handles::RealComm;
use mpicr_virtid::{CommCounters, CommRecipe, Counters, CountsSnapshot, Table, Topology, VComm, VErrhandler};
use serde::{Deserialize, Serialize};
use std::os::raw::{c_char, c_int};

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
    if let Some(f) = lower::fns().MPI_Comm_set_errhandler {
        // SAFETY: a live real communicator and a predefined error handler.
        unsafe { f(real_comm, MPI_ERRORS_RETURN) };
    }
}

/// The real group of MPI_COMM_WORLD in the current generation (caller frees).
pub(super) fn world_group() -> Result<c_int, RebuildError> {
    let mut g = MPI_GROUP_NULL;
    // SAFETY: valid out-pointer.
    let rc = unsafe { lower::fns().MPI_Comm_group.map_or(MPI_ERR_OTHER, |f| f(real_world(), &mut g)) };
    if rc != MPI_SUCCESS {
        return Err(RebuildError::WorldGroup);
    }
    Ok(g)
}

/// An intracommunicator with exactly `ranks` (world ranks, in order), collective over them.
fn comm_of_ranks(world_group: c_int, ranks: &[i32], tag: c_int) -> Result<c_int, RebuildError> {
    let f = lower::fns();
    let (mut g, mut c) = (MPI_GROUP_NULL, MPI_COMM_NULL);
    // SAFETY: arrays are live Vecs; out-pointers are locals.
    unsafe {
        check(f.MPI_Group_incl.map_or(MPI_ERR_OTHER, |h| h(world_group, ranks.len() as c_int, ranks.as_ptr(), &mut g)), "MPI_Group_incl")?;
        check(f.MPI_Comm_create_group.map_or(MPI_ERR_OTHER, |h| h(real_world(), g, tag, &mut c)), "MPI_Comm_create_group")?;
        f.MPI_Group_free.map(|h| h(&mut g));
    }
    Ok(c)
}

fn apply_topology(comm: c_int, t: &Topology) -> Result<c_int, RebuildError> {
    let f = lower::fns();
    let mut out = MPI_COMM_NULL;
    // SAFETY: arrays are live Vecs of the lengths passed; out-pointer is a local.
    unsafe {
        match t {
            Topology::None => return Ok(comm),
            Topology::Cart { dims, periods } => check(
                f.MPI_Cart_create.map_or(MPI_ERR_OTHER, |h| h(comm, dims.len() as c_int, dims.as_ptr(), periods.as_ptr(), 0, &mut out)),
                "MPI_Cart_create",
            )?,
            Topology::Graph { index, edges } => check(
                f.MPI_Graph_create.map_or(MPI_ERR_OTHER, |h| h(comm, index.len() as c_int, index.as_ptr(), edges.as_ptr(), 0, &mut out)),
                "MPI_Graph_create",
            )?,
            Topology::DistGraph { sources, source_weights, destinations, dest_weights } => {
                let unweighted = lower::real_unweighted() as *const c_int;
                let sw = source_weights.as_ref().map_or(unweighted, |w| w.as_ptr());
                let dw = dest_weights.as_ref().map_or(unweighted, |w| w.as_ptr());
                check(
                    f.MPI_Dist_graph_create_adjacent.map_or(MPI_ERR_OTHER, |h| {
                        h(
                            comm,
                            sources.len() as c_int,
                            sources.as_ptr(),
                            sw,
                            destinations.len() as c_int,
                            destinations.as_ptr(),
                            dw,
                            MPI_INFO_NULL,
                            0,
                            &mut out,
                        )
                    }),
                    "MPI_Dist_graph_create_adjacent",
                )?
            }
        }
        let mut c = comm;
        f.MPI_Comm_free.map(|h| h(&mut c));
    }
    errors_return_on(out);
    Ok(out)
}

/// Reads the name the program gave a real object (`MPI_Comm_get_name`, `MPI_Type_get_name`).
pub(super) fn name_of(get: Option<unsafe extern "C" fn(c_int, *mut c_char, *mut c_int) -> c_int>, h: c_int) -> Option<String> {
    let mut buf = vec![0 as c_char; 129];
    let mut len = 0;
    // SAFETY: MPI_MAX_OBJECT_NAME (128) + 1 bytes.
    unsafe { get.map(|g| g(h, buf.as_mut_ptr(), &mut len)) };
    // SAFETY: the library wrote a NUL-terminated name (or left the zeroed buffer).
    let s = unsafe { lower::cstr(buf.as_ptr()) };
    (!s.is_empty()).then_some(s)
}

/// Gives a rebuilt object the name it had (`MPI_Comm_set_name`, `MPI_Type_set_name`).
pub(super) fn restore_name(set: Option<unsafe extern "C" fn(c_int, *const c_char) -> c_int>, h: c_int, name: Option<String>) {
    if let Some(n) = name.and_then(|n| std::ffi::CString::new(n).ok()) {
        // SAFETY: a live real object and a NUL-terminated name.
        unsafe { set.map(|g| g(h, n.as_ptr())) };
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
    let f = lower::fns();
    let n = world_size().max(1) as usize;
    let mut counts = vec![0 as c_int; n];
    let my_bytes = (mine.len() * 8) as c_int;
    // SAFETY: one int out of each rank into `counts` (world size ints).
    let rc = unsafe {
        f.MPI_Allgather.map_or(MPI_ERR_OTHER, |h| h((&my_bytes as *const c_int).cast(), 1, MPI_INT, counts.as_mut_ptr().cast(), 1, MPI_INT, real_world()))
    };
    check(rc, "MPI_Allgather (communicators held)")?;
    let mut displs = Vec::with_capacity(n);
    let mut total = 0;
    for &c in &counts {
        displs.push(total);
        total += c;
    }
    let mut all = vec![0u64; total as usize / 8];
    // SAFETY: `mine` has `my_bytes` bytes; `all` has room for every rank's, at `displs`.
    let rc = unsafe {
        f.MPI_Allgatherv.map_or(MPI_ERR_OTHER, |h| {
            h(mine.as_ptr().cast(), my_bytes, MPI_BYTE, all.as_mut_ptr().cast(), counts.as_ptr(), displs.as_ptr(), MPI_BYTE, real_world())
        })
    };
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
        let f = lower::fns();
        for (idx, real, _) in OBJ.comms.snapshot() {
            let n = name_of(f.MPI_Comm_get_name, real.raw());
            OBJ.comms.with(idx, |c| c.name = n);
        }
    }

    fn free_real(&self) {
        let f = lower::fns();
        for (_, r, _) in OBJ.comms.snapshot() {
            // World and self are the library's own in the world model (not to be freed); the
            // `sessions` strategy made its own.
            if [MPI_COMM_WORLD, MPI_COMM_SELF, MPI_COMM_NULL].contains(&r.raw()) {
                continue;
            }
            let mut r = r.raw();
            // SAFETY: a live real communicator of the current generation, freed once.
            unsafe { f.MPI_Comm_free.map(|g| g(&mut r)) };
        }
    }

    /// Communicators (the renewal set up world and self) are rebuilt in the order of their
    /// job-wide ids, the same on every rank, so the collective creations of overlapping groups
    /// never wait on each other in a cycle; then every communicator gets its name back.
    fn rebuild(&self) -> Result<(), RebuildError> {
        let f = lower::fns();
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
                // SAFETY: live communicators; out-pointer is a local.
                unsafe {
                    check(f.MPI_Intercomm_create.map_or(MPI_ERR_OTHER, |h| h(local, 0, real_world(), remote_leader, tag, &mut inter)), "MPI_Intercomm_create")?;
                    f.MPI_Comm_free.map(|h| h(&mut comm));
                }
                comm = inter;
            }
            comm = apply_topology(comm, &r.topology)?;
            match idx {
                Some(idx) => {
                    OBJ.comms.set_real(idx, RealComm(comm));
                }
                // SAFETY: the communicator just made, freed once (a local operation in MPICH).
                None => unsafe {
                    f.MPI_Comm_free.map(|h| h(&mut comm));
                },
            }
        }
        // SAFETY: freeing the world group made above.
        unsafe { f.MPI_Group_free.map(|h| h(&mut { wg })) };
        for (_, real, c) in OBJ.comms.snapshot() {
            restore_name(f.MPI_Comm_set_name, real.raw(), c.name);
        }
        Ok(())
    }
}
