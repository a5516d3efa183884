//! Windows: refused at checkpoints for now (one-sided state is not carried); the entry keeps
//! the program's error handler, attributes and the call that made it.

use super::Renewable;
use crate::core::state::OBJ;
use crate::lower::abi::MPI_Errhandler;
use crate::core::state::Attrs;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WinEntry {
    pub errhandler: MPI_Errhandler,
    pub attrs: Attrs,
    pub made_by: String,
}

/// The win kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    fn refusal(&self) -> Option<String> {
        let (_, _, w) = OBJ.wins.snapshot().into_iter().next()?;
        Some(format!("an MPI window is open ({}): one-sided communication cannot be checkpointed yet; free windows first", w.made_by))
    }
}
