//! Keyvals and attributes: they live in the shim only (copy and delete callbacks run there),
//! so a renewal has nothing to rebuild.

use super::Renewable;
use crate::core::state::OBJ;
use crate::lower::handles::NoReal;
use mpicr_virtid::table::Full;
use mpicr_virtid::{KeyvalRecipe, VKeyval};
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

/// Registers a keyval the program made (one reference, the program's). `Err` when the table
/// is full.
pub fn register(recipe: KeyvalRecipe) -> Result<VKeyval, Full> {
    OBJ.keyvals.insert(NoReal, KeyvalEntry { recipe, refs: 1, freed: false }).map(VKeyval::virtual_at)
}

/// A live keyval's table index and recipe (`None` for a foreign, predefined or forgotten one).
pub fn lookup(v: VKeyval) -> Option<(u32, KeyvalRecipe)> {
    let i = v.index()?;
    OBJ.keyvals.with(i, |e| (i, e.recipe))
}

/// Drops one reference to the keyval at `i`; the last one forgets it.
pub fn release(i: u32) {
    let gone = OBJ.keyvals.with(i, |e| {
        e.refs = e.refs.saturating_sub(1);
        e.refs == 0
    });
    if gone == Some(true) {
        OBJ.keyvals.remove(i);
    }
}

/// The keyval kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {}
