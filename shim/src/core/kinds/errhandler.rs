//! Error handlers: the program's handlers live in the shim (`ErrhandlerRecipe`: the user
//! function), real objects always carry MPI_ERRORS_RETURN, so a renewal has nothing to rebuild.

use super::Renewable;
use crate::core::state::OBJ;
use crate::lower::handles::NoReal;
use mpicr_virtid::table::Full;
use mpicr_virtid::{ErrhandlerRecipe, VErrhandler};

/// Registers a program's handler. `Err` when the table is full.
pub fn register(recipe: ErrhandlerRecipe) -> Result<VErrhandler, Full> {
    OBJ.errhandlers.insert(NoReal, recipe).map(VErrhandler::virtual_at)
}

/// Whether `v` names a handler: a predefined one, or one the program made (entries stay when
/// the program frees its handle, since objects may still use them).
pub fn is_valid(v: VErrhandler) -> bool {
    matches!(v, VErrhandler::ERRORS_ARE_FATAL | VErrhandler::ERRORS_RETURN | VErrhandler::ERRORS_ABORT)
        || v.index().is_some_and(|i| OBJ.errhandlers.real(i).is_some())
}

/// The recipe of a handler the program made (`None` for the predefined ones and others).
pub fn recipe(v: VErrhandler) -> Option<ErrhandlerRecipe> {
    v.index().and_then(|i| OBJ.errhandlers.get(i))
}

/// The error-handler kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {}
