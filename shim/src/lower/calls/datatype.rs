//! Datatypes made again from their recipes, by the MPI-3 constructors or the large-count ones.

use crate::lower::abi::*;
use crate::lower::fns;
use mpicr_virtid::TypeRecipe;
use std::os::raw::c_int;

/// Checks that the arrays of `recipe` are as long as its constructor reads, given the count it
/// passes (the first array's length), and that `inputs` has its input types: a recipe the shim
/// recorded always is.
fn fits(recipe: &TypeRecipe, inputs: &[c_int]) {
    use TypeRecipe::*;
    let ok = match recipe {
        Indexed { blocklens, displs, .. } | Hindexed { blocklens, displs, .. } => displs.len() >= blocklens.len(),
        Struct { blocklens, displs, .. } => displs.len() >= blocklens.len() && inputs.len() >= blocklens.len(),
        Subarray { sizes, subsizes, starts, .. } => subsizes.len() >= sizes.len() && starts.len() >= sizes.len(),
        Darray { gsizes, distribs, dargs, psizes, .. } => distribs.len() >= gsizes.len() && dargs.len() >= gsizes.len() && psizes.len() >= gsizes.len(),
        _ => true,
    };
    assert!(ok, "a datatype recipe whose arrays are shorter than its count: {recipe:?}");
}

/// What a constructor the library lacks returns.
const MISSING: c_int = MPI_ERR_UNSUPPORTED_OPERATION;

/// The MPI-3 constructor of a recipe whose counts fit in an int (`None` otherwise): ROMIO in
/// MPICH 4.0.2 cannot flatten a type made by a large-count constructor (its
/// MPI_Type_get_envelope refuses one), so a file view rebuilt that way would fail.
///
/// `inputs` are real datatypes, those of `recipe.inputs()` in order.
pub fn classic(recipe: &TypeRecipe, inputs: &[c_int], out: &mut c_int) -> Option<c_int> {
    use TypeRecipe::*;
    fits(recipe, inputs);
    let f = fns();
    let old = inputs.first().copied().unwrap_or(MPI_DATATYPE_NULL);
    let int = |v: i64| c_int::try_from(v).ok();
    let ints = |v: &[i64]| v.iter().map(|&x| c_int::try_from(x).ok()).collect::<Option<Vec<c_int>>>();
    let aints = |v: &[i64]| v.iter().map(|&x| x as MPI_Aint).collect::<Vec<MPI_Aint>>();
    // SAFETY: every array passed is a live Vec of the length the constructor reads (`fits`, and
    // the conversions keep lengths); `out` is a reference.
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
/// `inputs` as for [`classic`].
pub fn large(recipe: &TypeRecipe, inputs: &[c_int], out: &mut c_int) -> c_int {
    use TypeRecipe::*;
    fits(recipe, inputs);
    let f = fns();
    let old = inputs.first().copied().unwrap_or(MPI_DATATYPE_NULL);
    // SAFETY: as in `classic`.
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

/// `MPI_Type_commit`.
pub fn commit(datatype: &mut MPI_Datatype) -> Option<c_int> {
    super::real!(MPI_Type_commit(datatype))
}

/// `MPI_Type_size_c`.
pub fn size_c(datatype: MPI_Datatype, size: &mut MPI_Count) -> Option<c_int> {
    super::real!(MPI_Type_size_c(datatype, size))
}
