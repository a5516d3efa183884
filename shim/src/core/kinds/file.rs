//! Files: refused at checkpoints for now (MPI-IO state is not carried); the entry keeps the
//! program's error handler.

use super::Renewable;
use crate::core::state::OBJ;
use crate::lower::abi::MPI_Errhandler;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileEntry {
    pub errhandler: MPI_Errhandler,
}

/// The file kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    fn refusal(&self) -> Option<String> {
        (!OBJ.files.is_empty()).then(|| "an MPI file is open (MPI_File_open): MPI-IO state cannot be checkpointed yet; close files first".into())
    }
}
