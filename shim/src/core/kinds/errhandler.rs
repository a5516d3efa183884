//! Error handlers: the program's handlers live in the shim (`ErrhandlerRecipe`: the user
//! function), real objects always carry MPI_ERRORS_RETURN, so a renewal has nothing to rebuild.

use super::Renewable;

/// The error-handler kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {}
