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
use crate::lower::handles::{NoReal, RealDatatype, RealFile, RealGroup, RealInfo, RealMessage, RealOp, RealRequest, RealSession, RealWin};
use mpicr_virtid::{ErrhandlerRecipe, GroupRecipe, InfoRecipe, Table, VKeyval};
use std::sync::LazyLock;

/// Index of MPI_COMM_WORLD and MPI_COMM_SELF in the communicator table.
pub const WORLD_INDEX: u32 = 0;
pub const SELF_INDEX: u32 = 1;

/// Attribute values cached on an object: (keyval handle, value).
pub type Attrs = Vec<(VKeyval, usize)>;

/// Every table, each storing its kind's real handles typed (`lower::handles`).
pub struct Objects {
    pub comms: Comms,
    pub groups: Table<GroupRecipe, RealGroup>,
    pub datatypes: Table<TypeEntry, RealDatatype>,
    pub ops: Table<OpEntry, RealOp>,
    pub infos: Table<InfoRecipe, RealInfo>,
    pub errhandlers: Table<ErrhandlerRecipe, NoReal>,
    pub requests: Table<RequestEntry, RealRequest>,
    pub messages: Table<MessageEntry, RealMessage>,
    pub wins: Table<WinEntry, RealWin>,
    pub files: Table<FileEntry, RealFile>,
    pub sessions: Table<SessionEntry, RealSession>,
    pub keyvals: Table<KeyvalEntry, NoReal>,
}

/// The lower half's world model is up: initialised by the program's MPI_Init, or by mpicr at
/// the program's first MPI_Session_init (a program of sessions only still gets a world model
/// underneath, which the renewal needs and the program never sees). It ends when the program
/// has neither the world model (MPI_Finalize) nor a session any more.
pub static LOWER_UP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn lower_up() -> bool {
    LOWER_UP.load(std::sync::atomic::Ordering::Acquire)
}

pub static OBJ: LazyLock<Objects> = LazyLock::new(|| Objects {
    comms: Comms::default(),
    groups: Table::new(),
    datatypes: Table::new(),
    ops: Table::new(),
    infos: Table::new(),
    errhandlers: Table::new(),
    requests: Table::with_hint(crate::core::kinds::request::in_library_only),
    messages: Table::new(),
    wins: Table::new(),
    files: Table::new(),
    sessions: Table::new(),
    keyvals: Table::new(),
});
