//! Process-wide tables of virtual objects and what the shim keeps about each.

use crate::abi::*;
use mpicr_virtid::{
    CommCounters, CommRecipe, Counters, CountsSnapshot, DatatypeEntry, ErrhandlerRecipe, GroupRecipe, InfoRecipe, KeyvalRecipe,
    OpRecipe, RequestRecipe, Table,
};
use serde::{Deserialize, Serialize};
use std::os::raw::c_int;
use std::sync::LazyLock;

/// Index of MPI_COMM_WORLD and MPI_COMM_SELF in the communicator table.
pub const WORLD_INDEX: u32 = 0;
pub const SELF_INDEX: u32 = 1;

/// Attribute values cached on an object: (keyval handle, value).
pub type Attrs = Vec<(c_int, usize)>;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommEntry {
    pub recipe: CommRecipe,
    pub errhandler: MPI_Errhandler,
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
}

impl CommEntry {
    pub fn new(recipe: CommRecipe, errhandler: MPI_Errhandler) -> Self {
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
    table: Table<CommEntry>,
    counters: Counters,
}

impl std::ops::Deref for Comms {
    type Target = Table<CommEntry>;
    fn deref(&self) -> &Table<CommEntry> {
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
    pub fn insert(&self, real: u64, entry: CommEntry) -> Result<u32, mpicr_virtid::table::Full> {
        self.table.insert_and(real, entry, |i, e| {
            self.counters.attach(i, e.recipe.gid, e.alone(), CommEntry::peers_of(&e.recipe))
        })
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
    pub fn snapshot(&self) -> Vec<(u32, u64, CommEntry)> {
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TypeEntry {
    pub dt: DatatypeEntry,
    pub attrs: Attrs,
    /// Name (MPI_Type_set_name), read back at checkpoint time.
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpEntry {
    pub recipe: OpRecipe,
    /// Trampoline slot the real op calls.
    pub slot: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestEntry {
    pub recipe: RequestRecipe,
    /// Communicator (virtual) whose error handler reports failures; COMM_NULL for none.
    pub comm: MPI_Comm,
    /// Receives count their source when they complete (drain accounting).
    pub counts_recv: bool,
    /// Completed by the shim itself (e.g. from the drained-message buffer): the status to report.
    pub done: Option<[i32; 5]>,
    /// A receive cancelled by a checkpoint, to be posted again on the renewed library.
    pub repost: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MessageEntry {
    pub comm: MPI_Comm,
    /// A message matched from the shim's buffer of drained messages, rather than the library.
    pub drained: Option<u64>,
    /// Size in bytes (from the probe's status), to receive it into the drain buffer.
    pub bytes: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WinEntry {
    pub errhandler: MPI_Errhandler,
    pub attrs: Attrs,
    pub made_by: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileEntry {
    pub errhandler: MPI_Errhandler,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionEntry {
    pub errhandler: MPI_Errhandler,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyvalEntry {
    pub recipe: KeyvalRecipe,
    /// Objects still holding an attribute with this key (+1 while the program has not freed it).
    pub refs: u32,
}

pub struct Objects {
    pub comms: Comms,
    pub groups: Table<GroupRecipe>,
    pub datatypes: Table<TypeEntry>,
    pub ops: Table<OpEntry>,
    pub infos: Table<InfoRecipe>,
    pub errhandlers: Table<ErrhandlerRecipe>,
    pub requests: Table<RequestEntry>,
    pub messages: Table<MessageEntry>,
    pub wins: Table<WinEntry>,
    pub files: Table<FileEntry>,
    pub sessions: Table<SessionEntry>,
    pub keyvals: Table<KeyvalEntry>,
}

pub static OBJ: LazyLock<Objects> = LazyLock::new(|| Objects {
    comms: Comms::default(),
    groups: Table::new(),
    datatypes: Table::new(),
    ops: Table::new(),
    infos: Table::new(),
    errhandlers: Table::new(),
    requests: Table::new(),
    messages: Table::new(),
    wins: Table::new(),
    files: Table::new(),
    sessions: Table::new(),
    keyvals: Table::new(),
});
