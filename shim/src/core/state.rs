//! Process-wide tables of virtual objects; what the shim keeps about each kind is defined by
//! that kind's module ([`crate::core::kinds`]).

use crate::core::kinds::comm::Comms;
use crate::core::kinds::datatype::TypeEntry;
use crate::core::kinds::file::FileEntry;
use crate::core::kinds::keyval::KeyvalEntry;
use crate::core::kinds::message::MessageEntry;
use crate::core::kinds::op::OpEntry;
use crate::core::kinds::request::RequestEntry;
use crate::core::kinds::session::SessionEntry;
use crate::core::kinds::win::WinEntry;
use mpicr_virtid::{ErrhandlerRecipe, GroupRecipe, InfoRecipe, Table};
use std::os::raw::c_int;
use std::sync::LazyLock;

/// Index of MPI_COMM_WORLD and MPI_COMM_SELF in the communicator table.
pub const WORLD_INDEX: u32 = 0;
pub const SELF_INDEX: u32 = 1;

/// Attribute values cached on an object: (keyval handle, value).
pub type Attrs = Vec<(c_int, usize)>;

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
