//! Keyvals and attributes: they live in the shim only (copy and delete callbacks run there),
//! so a renewal has nothing to rebuild.

use super::Renewable;
use mpicr_virtid::KeyvalRecipe;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyvalEntry {
    pub recipe: KeyvalRecipe,
    /// Objects still holding an attribute with this key (+1 while the program has not freed it).
    pub refs: u32,
    /// The program freed the keyval: it lives on while attributes use it (their callbacks run,
    /// they can be read and deleted), and freeing it again is no error (MPI 4.1, section 7.7.2;
    /// MPICH counts one free only).
    pub freed: bool,
}

/// The keyval kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {}
