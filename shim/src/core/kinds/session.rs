//! The program's own MPI sessions: refused at checkpoints for now; the entry keeps the
//! program's error handler.

use super::Renewable;
use crate::core::state::OBJ;
use crate::lower::abi::MPI_Errhandler;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionEntry {
    pub errhandler: MPI_Errhandler,
}

/// The session kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    fn refusal(&self) -> Option<String> {
        (!OBJ.sessions.is_empty()).then(|| "the program holds an MPI session (MPI_Session_init), which cannot be checkpointed yet".into())
    }
}
