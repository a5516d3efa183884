//! Datatypes: the recipe of each derived type (with the recipes of its inputs embedded, since
//! the program may free those), whether it was committed, its attributes and name; the map from
//! real handles back to virtual ones; and the rebuild with the large-count constructors.

use crate::lower::handles::RealDatatype;
use super::Renewable;
use crate::core::handles;
use crate::core::state::{Attrs, OBJ};
use crate::lower;
use crate::lower::abi::*;
use mpicr_virtid::{DatatypeEntry, Kind, TypeRecipe, TypeRef};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::raw::c_int;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TypeEntry {
    pub dt: DatatypeEntry,
    pub attrs: Attrs,
    /// Name (MPI_Type_set_name), read back at checkpoint time.
    pub name: Option<String>,
}

/// Real handle -> virtual handle of derived types (user ops and MPI_File_get_view see reals).
static BY_REAL: Mutex<Option<HashMap<c_int, c_int>>> = Mutex::new(None);

pub fn virtual_of_real(real: c_int) -> c_int {
    if is_builtin(real) {
        return real;
    }
    BY_REAL.lock().as_ref().and_then(|m| m.get(&real).copied()).unwrap_or(real)
}

pub fn remember_real(real: c_int, v: c_int) {
    BY_REAL.lock().get_or_insert_with(HashMap::new).insert(real, v);
}

pub fn forget_real(real: c_int) {
    if let Some(m) = BY_REAL.lock().as_mut() {
        m.remove(&real);
    }
}

/// Builds a datatype from its recipe on the current lower half (after a renewal). Inner types
/// are built and freed on the way.
pub fn build(recipe: &TypeRecipe) -> Result<c_int, c_int> {
    let f = lower::fns();
    let mut temps: Vec<c_int> = Vec::new();
    let input = |t: &TypeRef, temps: &mut Vec<c_int>| -> Result<c_int, c_int> {
        match t {
            TypeRef::Predefined(h) => Ok(handles::datatype(*h)),
            TypeRef::Derived(r) => {
                let h = build(r)?;
                temps.push(h);
                Ok(h)
            }
        }
    };
    let mut out = MPI_DATATYPE_NULL;
    let missing = MPI_ERR_UNSUPPORTED_OPERATION;
    // SAFETY: every array passed is a live Vec of the length the constructor expects.
    let rc = unsafe {
        use TypeRecipe::*;
        match recipe {
            Contiguous { count, old } => f.MPI_Type_contiguous_c.map_or(missing, |g| g(*count, input(old, &mut temps).unwrap_or(0), &mut out)),
            Vector { count, blocklen, stride, old } => {
                f.MPI_Type_vector_c.map_or(missing, |g| g(*count, *blocklen, *stride, input(old, &mut temps).unwrap_or(0), &mut out))
            }
            Hvector { count, blocklen, stride, old } => {
                f.MPI_Type_create_hvector_c.map_or(missing, |g| g(*count, *blocklen, *stride, input(old, &mut temps).unwrap_or(0), &mut out))
            }
            Indexed { blocklens, displs, old } => f.MPI_Type_indexed_c.map_or(missing, |g| {
                g(blocklens.len() as i64, blocklens.as_ptr(), displs.as_ptr(), input(old, &mut temps).unwrap_or(0), &mut out)
            }),
            Hindexed { blocklens, displs, old } => f.MPI_Type_create_hindexed_c.map_or(missing, |g| {
                g(blocklens.len() as i64, blocklens.as_ptr(), displs.as_ptr(), input(old, &mut temps).unwrap_or(0), &mut out)
            }),
            IndexedBlock { blocklen, displs, old } => f.MPI_Type_create_indexed_block_c.map_or(missing, |g| {
                g(displs.len() as i64, *blocklen, displs.as_ptr(), input(old, &mut temps).unwrap_or(0), &mut out)
            }),
            HindexedBlock { blocklen, displs, old } => f.MPI_Type_create_hindexed_block_c.map_or(missing, |g| {
                g(displs.len() as i64, *blocklen, displs.as_ptr(), input(old, &mut temps).unwrap_or(0), &mut out)
            }),
            Struct { blocklens, displs, types } => {
                let mut ts = Vec::with_capacity(types.len());
                for t in types {
                    ts.push(input(t, &mut temps)?);
                }
                f.MPI_Type_create_struct_c.map_or(missing, |g| g(blocklens.len() as i64, blocklens.as_ptr(), displs.as_ptr(), ts.as_ptr(), &mut out))
            }
            Subarray { sizes, subsizes, starts, order, old } => f.MPI_Type_create_subarray_c.map_or(missing, |g| {
                g(sizes.len() as c_int, sizes.as_ptr(), subsizes.as_ptr(), starts.as_ptr(), *order, input(old, &mut temps).unwrap_or(0), &mut out)
            }),
            Darray { size, rank, gsizes, distribs, dargs, psizes, order, old } => f.MPI_Type_create_darray_c.map_or(missing, |g| {
                g(*size, *rank, gsizes.len() as c_int, gsizes.as_ptr(), distribs.as_ptr(), dargs.as_ptr(), psizes.as_ptr(), *order,
                  input(old, &mut temps).unwrap_or(0), &mut out)
            }),
            Resized { lb, extent, old } => f.MPI_Type_create_resized_c.map_or(missing, |g| g(input(old, &mut temps).unwrap_or(0), *lb, *extent, &mut out)),
            Dup { old } => f.MPI_Type_dup.map_or(missing, |g| g(input(old, &mut temps).unwrap_or(0), &mut out)),
            Named { .. } => missing,
        }
    };
    for mut t in temps {
        // SAFETY: temporaries built above.
        unsafe { f.MPI_Type_free.map(|g| g(&mut t)) };
    }
    if rc == MPI_SUCCESS { Ok(out) } else { Err(rc) }
}

/// A datatype a recipe refers to, on the current lower half, for as long as it is in use: a
/// predefined one stands for itself; a derived one is built, committed, and freed on drop.
pub struct Built {
    pub real: c_int,
    owned: bool,
}

impl Built {
    pub fn of(t: &TypeRef) -> Result<Built, c_int> {
        match t {
            TypeRef::Predefined(h) => Ok(Built { real: handles::datatype(*h), owned: false }),
            TypeRef::Derived(r) => {
                let mut real = build(r)?;
                // SAFETY: a datatype just built.
                let rc = unsafe { lower::fns().MPI_Type_commit.map_or(MPI_ERR_OTHER, |h| h(&mut real)) };
                let b = Built { real, owned: true };
                if rc == MPI_SUCCESS { Ok(b) } else { Err(rc) }
            }
        }
    }
}

impl Drop for Built {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: a datatype built by `of`, freed once.
            unsafe { lower::fns().MPI_Type_free.map(|g| g(&mut self.real)) };
        }
    }
}

/// The datatype kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    /// Names are read back (the library keeps them).
    fn snapshot(&self) {
        let f = lower::fns();
        for (idx, real, _) in OBJ.datatypes.snapshot() {
            let n = super::comm::name_of(f.MPI_Type_get_name, real.raw());
            OBJ.datatypes.with(idx, |t| t.name = n);
        }
    }

    /// Real handles of the released generation no longer name anything.
    fn forget(&self) {
        *BY_REAL.lock() = None;
    }

    fn free_real(&self) {
        let f = lower::fns();
        for (_, r, _) in OBJ.datatypes.snapshot() {
            let mut r = r.raw();
            // SAFETY: a live real datatype of the current generation, freed once.
            unsafe { f.MPI_Type_free.map(|g| g(&mut r)) };
        }
    }

    /// Every type is built from its recipe, committed if it was, and named as it was.
    fn rebuild(&self) -> Result<(), String> {
        let f = lower::fns();
        for (idx, _, t) in OBJ.datatypes.snapshot() {
            let mut real = build(&t.dt.recipe).map_err(|rc| format!("rebuilding a datatype: {}", lower::error_string(rc)))?;
            if t.dt.committed {
                // SAFETY: a datatype just built.
                unsafe { f.MPI_Type_commit.map(|h| h(&mut real)) };
            }
            OBJ.datatypes.set_real(idx, RealDatatype(real));
            remember_real(real, handles::handle(Kind::Datatype, idx));
        }
        for (_, real, t) in OBJ.datatypes.snapshot() {
            super::comm::restore_name(f.MPI_Type_set_name, real.raw(), t.name);
        }
        Ok(())
    }
}
