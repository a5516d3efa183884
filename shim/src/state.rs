//! Process-wide tables of virtual objects and what the shim keeps about each.

use crate::abi::*;
use mpicr_virtid::{
    CommRecipe, DatatypeEntry, ErrhandlerRecipe, GroupRecipe, InfoRecipe, KeyvalRecipe, OpRecipe, RequestRecipe, Table,
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
    /// Collectives started on this communicator (for checkpoint alignment).
    pub coll_seq: u64,
    /// Messages sent to / received from each rank (of the remote group, for intercomms).
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
        let peers = recipe.remote_world_ranks.as_ref().map_or(recipe.world_ranks.len(), |r| r.len());
        CommEntry {
            recipe,
            errhandler,
            attrs: Vec::new(),
            coll_seq: 0,
            sent: vec![0; peers],
            recvd: vec![0; peers],
            create_group_seq: 0,
            restorable: true,
            name: None,
        }
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
    pub comms: Table<CommEntry>,
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
    comms: Table::new(),
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
