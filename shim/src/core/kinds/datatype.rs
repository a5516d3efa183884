//! Datatypes: the recipe of each derived type (with the recipes of its inputs embedded, since
//! the program may free those), whether it was committed, its attributes and name; the map from
//! real handles back to virtual ones; and the rebuild with the large-count constructors.

use super::{RebuildError, Renewable};
use crate::core::handles;
use crate::core::state::{Attrs, OBJ};
use crate::lower;
use crate::lower::abi::*;
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
    // SAFETY: every array passed is a live Vec of the length the constructor expects, the input
    // types are live, and `out` is a local.
    let rc = unsafe { classic(recipe, &inputs, &mut out).unwrap_or_else(|| large(recipe, &inputs, &mut out)) };
    if rc == MPI_SUCCESS {
        Ok(out)
    } else {
        Err(rc)
    }
}

const MISSING: c_int = MPI_ERR_UNSUPPORTED_OPERATION;

/// The MPI-3 constructor of a recipe whose counts fit in an int (`None` otherwise): ROMIO in
/// MPICH 4.0.2 cannot flatten a type made by a large-count constructor (its
/// MPI_Type_get_envelope refuses one), so a file view rebuilt that way would fail.
///
/// # Safety
/// `inputs` are live real datatypes, those of `recipe.inputs()` in order.
unsafe fn classic(recipe: &TypeRecipe, inputs: &[c_int], out: &mut c_int) -> Option<c_int> {
    use TypeRecipe::*;
    let f = lower::fns();
    let old = inputs.first().copied().unwrap_or(MPI_DATATYPE_NULL);
    let int = |v: i64| c_int::try_from(v).ok();
    let ints = |v: &[i64]| v.iter().map(|&x| c_int::try_from(x).ok()).collect::<Option<Vec<c_int>>>();
    let aints = |v: &[i64]| v.iter().map(|&x| x as MPI_Aint).collect::<Vec<MPI_Aint>>();
    // SAFETY: every call is as this function requires, with arrays of the lengths passed.
    let rc = unsafe {
        match recipe {
            Contiguous { count, .. } => {
                let c = int(*count)?;
                f.MPI_Type_contiguous.map_or(MISSING, |g| g(c, old, out))
            }
            Vector { count, blocklen, stride, .. } => {
                let (c, b, s) = (int(*count)?, int(*blocklen)?, int(*stride)?);
                f.MPI_Type_vector.map_or(MISSING, |g| g(c, b, s, old, out))
            }
            Hvector { count, blocklen, stride, .. } => {
                let (c, b) = (int(*count)?, int(*blocklen)?);
                f.MPI_Type_create_hvector.map_or(MISSING, |g| g(c, b, *stride as MPI_Aint, old, out))
            }
            Indexed { blocklens, displs, .. } => {
                let (b, d, n) = (ints(blocklens)?, ints(displs)?, int(blocklens.len() as i64)?);
                f.MPI_Type_indexed.map_or(MISSING, |g| g(n, b.as_ptr(), d.as_ptr(), old, out))
            }
            Hindexed { blocklens, displs, .. } => {
                let (b, d, n) = (ints(blocklens)?, aints(displs), int(blocklens.len() as i64)?);
                f.MPI_Type_create_hindexed.map_or(MISSING, |g| g(n, b.as_ptr(), d.as_ptr(), old, out))
            }
            IndexedBlock { blocklen, displs, .. } => {
                let (b, d, n) = (int(*blocklen)?, ints(displs)?, int(displs.len() as i64)?);
                f.MPI_Type_create_indexed_block.map_or(MISSING, |g| g(n, b, d.as_ptr(), old, out))
            }
            HindexedBlock { blocklen, displs, .. } => {
                let (b, d, n) = (int(*blocklen)?, aints(displs), int(displs.len() as i64)?);
                f.MPI_Type_create_hindexed_block.map_or(MISSING, |g| g(n, b, d.as_ptr(), old, out))
            }
            Struct { blocklens, displs, .. } => {
                let (b, d, n) = (ints(blocklens)?, aints(displs), int(blocklens.len() as i64)?);
                f.MPI_Type_create_struct.map_or(MISSING, |g| g(n, b.as_ptr(), d.as_ptr(), inputs.as_ptr(), out))
            }
            Subarray { sizes, subsizes, starts, order, .. } => {
                let (a, b, c) = (ints(sizes)?, ints(subsizes)?, ints(starts)?);
                f.MPI_Type_create_subarray.map_or(MISSING, |g| g(a.len() as c_int, a.as_ptr(), b.as_ptr(), c.as_ptr(), *order, old, out))
            }
            Darray { size, rank, gsizes, distribs, dargs, psizes, order, .. } => {
                let g_ = ints(gsizes)?;
                f.MPI_Type_create_darray
                    .map_or(MISSING, |g| g(*size, *rank, g_.len() as c_int, g_.as_ptr(), distribs.as_ptr(), dargs.as_ptr(), psizes.as_ptr(), *order, old, out))
            }
            Resized { lb, extent, .. } => f.MPI_Type_create_resized.map_or(MISSING, |g| g(old, *lb as MPI_Aint, *extent as MPI_Aint, out)),
            Dup { .. } | Named { .. } => return None,
        }
    };
    Some(rc)
}

/// The large-count constructor of a recipe (or `MPI_Type_dup`).
///
/// # Safety
/// As for [`classic`].
unsafe fn large(recipe: &TypeRecipe, inputs: &[c_int], out: &mut c_int) -> c_int {
    use TypeRecipe::*;
    let f = lower::fns();
    let old = inputs.first().copied().unwrap_or(MPI_DATATYPE_NULL);
    // SAFETY: every call is as this function requires, with arrays of the lengths passed.
    unsafe {
        match recipe {
            Contiguous { count, .. } => f.MPI_Type_contiguous_c.map_or(MISSING, |g| g(*count, old, out)),
            Vector { count, blocklen, stride, .. } => f.MPI_Type_vector_c.map_or(MISSING, |g| g(*count, *blocklen, *stride, old, out)),
            Hvector { count, blocklen, stride, .. } => f.MPI_Type_create_hvector_c.map_or(MISSING, |g| g(*count, *blocklen, *stride, old, out)),
            Indexed { blocklens, displs, .. } => {
                f.MPI_Type_indexed_c.map_or(MISSING, |g| g(blocklens.len() as i64, blocklens.as_ptr(), displs.as_ptr(), old, out))
            }
            Hindexed { blocklens, displs, .. } => {
                f.MPI_Type_create_hindexed_c.map_or(MISSING, |g| g(blocklens.len() as i64, blocklens.as_ptr(), displs.as_ptr(), old, out))
            }
            IndexedBlock { blocklen, displs, .. } => {
                f.MPI_Type_create_indexed_block_c.map_or(MISSING, |g| g(displs.len() as i64, *blocklen, displs.as_ptr(), old, out))
            }
            HindexedBlock { blocklen, displs, .. } => {
                f.MPI_Type_create_hindexed_block_c.map_or(MISSING, |g| g(displs.len() as i64, *blocklen, displs.as_ptr(), old, out))
            }
            Struct { blocklens, displs, .. } => {
                f.MPI_Type_create_struct_c.map_or(MISSING, |g| g(blocklens.len() as i64, blocklens.as_ptr(), displs.as_ptr(), inputs.as_ptr(), out))
            }
            Subarray { sizes, subsizes, starts, order, .. } => {
                f.MPI_Type_create_subarray_c.map_or(MISSING, |g| g(sizes.len() as c_int, sizes.as_ptr(), subsizes.as_ptr(), starts.as_ptr(), *order, old, out))
            }
            Darray { size, rank, gsizes, distribs, dargs, psizes, order, .. } => f.MPI_Type_create_darray_c.map_or(MISSING, |g| {
                g(*size, *rank, gsizes.len() as c_int, gsizes.as_ptr(), distribs.as_ptr(), dargs.as_ptr(), psizes.as_ptr(), *order, old, out)
            }),
            Resized { lb, extent, .. } => f.MPI_Type_create_resized_c.map_or(MISSING, |g| g(old, *lb, *extent, out)),
            Dup { .. } => f.MPI_Type_dup.map_or(MISSING, |g| g(old, out)),
            Named { .. } => MISSING,
        }
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
                // SAFETY: a datatype just built.
                let rc = unsafe { lower::fns().MPI_Type_commit.map_or(MPI_ERR_OTHER, |h| h(&mut real)) };
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
    fn rebuild(&self) -> Result<(), RebuildError> {
        let f = lower::fns();
        for (idx, _, t) in OBJ.datatypes.snapshot() {
            let mut real = build(&t.dt.recipe).map_err(|rc| RebuildError::mpi("rebuilding a datatype", rc))?;
            if t.dt.committed {
                // SAFETY: a datatype just built.
                unsafe { f.MPI_Type_commit.map(|h| h(&mut real)) };
            }
            OBJ.datatypes.set_real(idx, RealDatatype(real));
            remember_real(RealDatatype(real), VDatatype::virtual_at(idx));
        }
        for (_, real, t) in OBJ.datatypes.snapshot() {
            super::comm::restore_name(f.MPI_Type_set_name, real.raw(), t.name);
        }
        Ok(())
    }
}
