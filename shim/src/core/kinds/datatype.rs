//! Datatypes: the recipe of each derived type (with the recipes of its inputs embedded, since
//! the program may free those), whether it was committed, its attributes and name; the map from
//! real handles back to virtual ones; and the rebuild with the large-count constructors.

use super::{RebuildError, Renewable};
use crate::core::handles;
use crate::core::state::{Attrs, OBJ};
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::object::{Kind, Named};
use crate::lower::handles::RealDatatype;
use mpicr_virtid::table::Full;
use mpicr_virtid::{DatatypeEntry, TypeRecipe, TypeRef, VDatatype};
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
static BY_REAL: Mutex<Option<HashMap<c_int, VDatatype>>> = Mutex::new(None);

/// The core's datatype of a real one the library handed out: a predefined one is the core's
/// own, a derived one the core made its virtual handle, anything else passes unchanged.
pub fn virtual_of_real(real: RealDatatype) -> VDatatype {
    if let Some(v) = handles::predefined_vdatatype(real.raw()) {
        return v;
    }
    if is_builtin(real.raw()) {
        return VDatatype::from_int(real.raw());
    }
    BY_REAL.lock().as_ref().and_then(|m| m.get(&real.raw()).copied()).unwrap_or(VDatatype::from_int(real.raw()))
}

pub fn remember_real(real: RealDatatype, v: VDatatype) {
    BY_REAL.lock().get_or_insert_with(HashMap::new).insert(real.raw(), v);
}

pub fn forget_real(real: RealDatatype) {
    if let Some(m) = BY_REAL.lock().as_mut() {
        m.remove(&real.raw());
    }
}

/// Registers a derived datatype the library made, with its recipe. `Err` when the table is
/// full.
pub fn register(real: RealDatatype, recipe: TypeRecipe) -> Result<VDatatype, Full> {
    let entry = TypeEntry { dt: DatatypeEntry { recipe, committed: false }, attrs: Vec::new(), name: None };
    let v = OBJ.datatypes.insert(real, entry).map(VDatatype::virtual_at)?;
    remember_real(real, v);
    Ok(v)
}

/// The recipe of a virtual datatype the core keeps (`None` for predefined, foreign and freed
/// ones).
pub fn recipe(v: VDatatype) -> Option<TypeRecipe> {
    v.index().and_then(|i| OBJ.datatypes.with(i, |e| e.dt.recipe.clone()))
}

/// A datatype argument as a self-contained recipe reference.
pub fn typeref(v: VDatatype) -> TypeRef {
    match recipe(v) {
        Some(r) => TypeRef::Derived(Box::new(r)),
        None => TypeRef::Predefined(v),
    }
}

/// Forgets a datatype the program freed (its real one is already freed).
pub fn forget(v: VDatatype, real: RealDatatype) {
    if let Some(i) = v.index() {
        OBJ.datatypes.remove(i);
        forget_real(real);
    }
}

/// Builds a datatype from its recipe on the current lower half (after a renewal). Inner types
/// are built and freed on the way.
pub fn build(recipe: &TypeRecipe) -> Result<c_int, c_int> {
    // The inputs first; derived ones are freed (dropped) once this type is made.
    let mut temps: Vec<Built> = Vec::new();
    let mut inputs = Vec::new();
    for t in recipe.inputs() {
        inputs.push(match t {
            TypeRef::Predefined(h) => handles::datatype(*h).raw(),
            TypeRef::Derived(r) => {
                let b = Built { real: build(r)?, owned: true };
                let h = b.real;
                temps.push(b);
                h
            }
        });
    }
    let mut out = MPI_DATATYPE_NULL;
    let rc = calls::datatype::classic(recipe, &inputs, &mut out).unwrap_or_else(|| calls::datatype::large(recipe, &inputs, &mut out));
    if rc == MPI_SUCCESS {
        Ok(out)
    } else {
        Err(rc)
    }
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
            TypeRef::Predefined(h) => Ok(Built { real: handles::datatype(*h).raw(), owned: false }),
            TypeRef::Derived(r) => {
                let mut real = build(r)?;
                let rc = calls::datatype::commit(&mut real).unwrap_or(MPI_ERR_OTHER);
                let b = Built { real, owned: true };
                if rc == MPI_SUCCESS {
                    Ok(b)
                } else {
                    Err(rc)
                }
            }
        }
    }
}

impl Drop for Built {
    fn drop(&mut self) {
        if self.owned {
            // A datatype built by `of`, freed once.
            calls::object::free(Kind::Datatype, &mut self.real);
        }
    }
}

/// The datatype kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    /// Names are read back (the library keeps them).
    fn snapshot(&self) {
        for (idx, real, _) in OBJ.datatypes.snapshot() {
            let n = super::comm::name_of(Named::Datatype, real.raw());
            OBJ.datatypes.with(idx, |t| t.name = n);
        }
    }

    /// Real handles of the released generation no longer name anything.
    fn forget(&self) {
        *BY_REAL.lock() = None;
    }

    fn free_real(&self) {
        for (_, r, _) in OBJ.datatypes.snapshot() {
            let mut r = r.raw();
            // A live real datatype of the current generation, freed once.
            calls::object::free(Kind::Datatype, &mut r);
        }
    }

    /// Every type is built from its recipe, committed if it was, and named as it was.
    fn rebuild(&self) -> Result<(), RebuildError> {
        for (idx, _, t) in OBJ.datatypes.snapshot() {
            let mut real = build(&t.dt.recipe).map_err(|rc| RebuildError::mpi("rebuilding a datatype", rc))?;
            if t.dt.committed {
                calls::datatype::commit(&mut real);
            }
            OBJ.datatypes.set_real(idx, RealDatatype(real));
            remember_real(RealDatatype(real), VDatatype::virtual_at(idx));
        }
        for (_, real, t) in OBJ.datatypes.snapshot() {
            super::comm::restore_name(Named::Datatype, real.raw(), t.name);
        }
        Ok(())
    }
}
