//! Derived datatypes: each constructor records its recipe (with the recipes of its inputs
//! embedded, since the program may free those), so the type can be built again on a fresh
//! library with the large-count constructors.

use crate::lower::handles::RealDatatype;
use crate::face::abi::*;
use crate::face::api::{put, slice};
use crate::core::kinds::datatype::{forget_real, remember_real, TypeEntry};
use crate::core::state::OBJ;
use crate::face::{conv, errors};
use crate::core::gate;
use mpicr_virtid::{DatatypeEntry, Kind, TypeRecipe, TypeRef};
use std::os::raw::c_int;

/// A datatype argument as a self-contained recipe reference.
pub fn typeref(h: MPI_Datatype) -> TypeRef {
    match conv::index(h, Kind::Datatype).and_then(|i| OBJ.datatypes.with(i, |e| e.dt.recipe.clone())) {
        Some(r) => TypeRef::Derived(Box::new(r)),
        None => TypeRef::Predefined(h),
    }
}

/// Registers a new real derived datatype.
pub fn register_type(real: c_int, recipe: TypeRecipe) -> MPI_Datatype {
    let entry = TypeEntry { dt: DatatypeEntry { recipe, committed: false }, attrs: Vec::new(), name: None };
    let v = match OBJ.datatypes.insert(RealDatatype(real), entry) {
        Ok(i) => conv::handle(Kind::Datatype, i),
        Err(_) => errors::fatal("too many live datatypes"),
    };
    remember_real(real, v);
    v
}

/// Creates a datatype with `call`, records `recipe` and hands the handle out.
///
/// # Safety
/// `newtype` must be valid for a write.
unsafe fn make(name: &'static str, newtype: *mut MPI_Datatype, recipe: impl FnOnce() -> TypeRecipe, call: impl FnOnce(&mut c_int) -> c_int) -> c_int {
    let g = gate::enter();
    let mut r = MPI_DATATYPE_NULL;
    let rc = call(&mut r);
    if rc != MPI_SUCCESS {
        drop(g);
        return errors::raise_default(rc, name);
    }
    let v = register_type(r, recipe());
    drop(g);
    // SAFETY: this function's contract.
    unsafe { put(newtype, v) };
    MPI_SUCCESS
}

fn widen<T: Copy + Into<i64>>(v: Vec<T>) -> Vec<i64> {
    v.into_iter().map(Into::into).collect()
}

fn widen_aint(v: Vec<MPI_Aint>) -> Vec<i64> {
    v.into_iter().map(|x| x as i64).collect()
}

pub unsafe fn MPI_Type_contiguous(count: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe {
        make("MPI_Type_contiguous", newtype, || TypeRecipe::Contiguous { count: count as i64, old: typeref(oldtype) }, |n| {
            real!(MPI_Type_contiguous(count, conv::datatype(oldtype), n))
        })
    }
}

pub unsafe fn MPI_Type_contiguous_c(count: MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe {
        make("MPI_Type_contiguous_c", newtype, || TypeRecipe::Contiguous { count, old: typeref(oldtype) }, |n| {
            real!(MPI_Type_contiguous_c(count, conv::datatype(oldtype), n))
        })
    }
}

pub unsafe fn MPI_Type_vector(count: c_int, blocklength: c_int, stride: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    let recipe = || TypeRecipe::Vector { count: count as i64, blocklen: blocklength as i64, stride: stride as i64, old: typeref(oldtype) };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_vector", newtype, recipe, |n| real!(MPI_Type_vector(count, blocklength, stride, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_vector_c(count: MPI_Count, blocklength: MPI_Count, stride: MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    let recipe = || TypeRecipe::Vector { count, blocklen: blocklength, stride, old: typeref(oldtype) };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_vector_c", newtype, recipe, |n| real!(MPI_Type_vector_c(count, blocklength, stride, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_create_hvector(count: c_int, blocklength: c_int, stride: MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    let recipe = || TypeRecipe::Hvector { count: count as i64, blocklen: blocklength as i64, stride: stride as i64, old: typeref(oldtype) };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_hvector", newtype, recipe, |n| real!(MPI_Type_create_hvector(count, blocklength, stride, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_hvector(count: c_int, blocklength: c_int, stride: MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    let recipe = || TypeRecipe::Hvector { count: count as i64, blocklen: blocklength as i64, stride: stride as i64, old: typeref(oldtype) };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_hvector", newtype, recipe, |n| real!(MPI_Type_hvector(count, blocklength, stride, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_create_hvector_c(count: MPI_Count, blocklength: MPI_Count, stride: MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    let recipe = || TypeRecipe::Hvector { count, blocklen: blocklength, stride, old: typeref(oldtype) };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_hvector_c", newtype, recipe, |n| real!(MPI_Type_create_hvector_c(count, blocklength, stride, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_indexed(count: c_int, bl: *const c_int, displs: *const c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: MPI requires each array read here to hold `count` entries (this call's contract).
    let recipe = || unsafe {
        TypeRecipe::Indexed { blocklens: widen(slice(bl, count as i64)), displs: widen(slice(displs, count as i64)), old: typeref(oldtype) }
    };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_indexed", newtype, recipe, |n| real!(MPI_Type_indexed(count, bl, displs, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_indexed_c(count: MPI_Count, bl: *const MPI_Count, displs: *const MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    let recipe = || unsafe { TypeRecipe::Indexed { blocklens: slice(bl, count), displs: slice(displs, count), old: typeref(oldtype) } };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_indexed_c", newtype, recipe, |n| real!(MPI_Type_indexed_c(count, bl, displs, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_create_hindexed(count: c_int, bl: *const c_int, displs: *const MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: MPI requires each array read here to hold `count` entries (this call's contract).
    let recipe = || unsafe {
        TypeRecipe::Hindexed { blocklens: widen(slice(bl, count as i64)), displs: widen_aint(slice(displs, count as i64)), old: typeref(oldtype) }
    };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_hindexed", newtype, recipe, |n| real!(MPI_Type_create_hindexed(count, bl, displs, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_hindexed(count: c_int, bl: *const c_int, displs: *const MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: MPI requires each array read here to hold `count` entries (this call's contract).
    let recipe = || unsafe {
        TypeRecipe::Hindexed { blocklens: widen(slice(bl, count as i64)), displs: widen_aint(slice(displs, count as i64)), old: typeref(oldtype) }
    };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_hindexed", newtype, recipe, |n| real!(MPI_Type_hindexed(count, bl as *mut c_int, displs as *mut MPI_Aint, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_create_hindexed_c(count: MPI_Count, bl: *const MPI_Count, displs: *const MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    let recipe = || unsafe { TypeRecipe::Hindexed { blocklens: slice(bl, count), displs: slice(displs, count), old: typeref(oldtype) } };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_hindexed_c", newtype, recipe, |n| real!(MPI_Type_create_hindexed_c(count, bl, displs, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_create_indexed_block(count: c_int, blocklength: c_int, displs: *const c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    let recipe = || unsafe { TypeRecipe::IndexedBlock { blocklen: blocklength as i64, displs: widen(slice(displs, count as i64)), old: typeref(oldtype) } };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_indexed_block", newtype, recipe, |n| real!(MPI_Type_create_indexed_block(count, blocklength, displs, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_create_indexed_block_c(count: MPI_Count, blocklength: MPI_Count, displs: *const MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    let recipe = || unsafe { TypeRecipe::IndexedBlock { blocklen: blocklength, displs: slice(displs, count), old: typeref(oldtype) } };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_indexed_block_c", newtype, recipe, |n| real!(MPI_Type_create_indexed_block_c(count, blocklength, displs, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_create_hindexed_block(count: c_int, blocklength: c_int, displs: *const MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    let recipe = || unsafe { TypeRecipe::HindexedBlock { blocklen: blocklength as i64, displs: widen_aint(slice(displs, count as i64)), old: typeref(oldtype) } };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_hindexed_block", newtype, recipe, |n| real!(MPI_Type_create_hindexed_block(count, blocklength, displs, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_create_hindexed_block_c(count: MPI_Count, blocklength: MPI_Count, displs: *const MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    let recipe = || unsafe { TypeRecipe::HindexedBlock { blocklen: blocklength, displs: slice(displs, count), old: typeref(oldtype) } };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_hindexed_block_c", newtype, recipe, |n| real!(MPI_Type_create_hindexed_block_c(count, blocklength, displs, conv::datatype(oldtype), n))) }
}

pub unsafe fn MPI_Type_create_struct(count: c_int, bl: *const c_int, displs: *const MPI_Aint, types: *const MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `bl`, `displs` and `types` hold `count` entries and `newtype` is writable: the
    // caller's, as MPI requires of this call, which is `struct_type`'s contract.
    unsafe { struct_type("MPI_Type_create_struct", count, bl, displs, types, newtype) }
}

pub unsafe fn MPI_Type_struct(count: c_int, bl: *const c_int, displs: *const MPI_Aint, types: *const MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `bl`, `displs` and `types` hold `count` entries and `newtype` is writable: the
    // caller's, as MPI requires of this call, which is `struct_type`'s contract.
    unsafe { struct_type("MPI_Type_struct", count, bl, displs, types, newtype) }
}

/// # Safety
/// `bl`, `displs` and `types` must hold `count` entries (or be null with `count <= 0`), and
/// `newtype` must be valid for a write.
unsafe fn struct_type(name: &'static str, count: c_int, bl: *const c_int, displs: *const MPI_Aint, types: *const MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `types` holds `count` datatypes (MPI's contract of this call).
    let tv = unsafe { slice(types, count as i64) };
    // SAFETY: MPI requires each array read here to hold `count` entries (this call's contract).
    let recipe = || unsafe {
        TypeRecipe::Struct {
            blocklens: widen(slice(bl, count as i64)),
            displs: widen_aint(slice(displs, count as i64)),
            types: tv.iter().map(|&t| typeref(t)).collect(),
        }
    };
    // SAFETY: `newtype` is writable (`make`'s contract) and `types` holds `count` handles, which
    // `conv::datatypes` reads: the caller's, as MPI requires of this call.
    unsafe {
        make(name, newtype, recipe, |n| {
            let real_types = conv::datatypes(types, count.max(0) as usize);
            let tp = if types.is_null() { types } else { real_types.as_ptr() };
            real!(MPI_Type_create_struct(count, bl, displs, tp, n))
        })
    }
}

pub unsafe fn MPI_Type_create_struct_c(count: MPI_Count, bl: *const MPI_Count, displs: *const MPI_Count, types: *const MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `types` holds `count` datatypes (MPI's contract of this call).
    let tv = unsafe { slice(types, count) };
    // SAFETY: MPI requires each array read here to hold `count` entries (this call's contract).
    let recipe = || unsafe { TypeRecipe::Struct { blocklens: slice(bl, count), displs: slice(displs, count), types: tv.iter().map(|&t| typeref(t)).collect() } };
    // SAFETY: `newtype` is writable (`make`'s contract) and `types` holds `count` handles, which
    // `conv::datatypes` reads: the caller's, as MPI requires of this call.
    unsafe {
        make("MPI_Type_create_struct_c", newtype, recipe, |n| {
            let real_types = conv::datatypes(types, count.max(0) as usize);
            let tp = if types.is_null() { types } else { real_types.as_ptr() };
            real!(MPI_Type_create_struct_c(count, bl, displs, tp, n))
        })
    }
}

pub unsafe fn MPI_Type_create_subarray(
    ndims: c_int, sizes: *const c_int, subsizes: *const c_int, starts: *const c_int, order: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype,
) -> c_int {
    let n = ndims as i64;
    // SAFETY: MPI requires each array read here to hold `n` entries (this call's contract).
    let recipe = || unsafe {
        TypeRecipe::Subarray { sizes: widen(slice(sizes, n)), subsizes: widen(slice(subsizes, n)), starts: widen(slice(starts, n)), order, old: typeref(oldtype) }
    };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_subarray", newtype, recipe, |t| real!(MPI_Type_create_subarray(ndims, sizes, subsizes, starts, order, conv::datatype(oldtype), t))) }
}

pub unsafe fn MPI_Type_create_subarray_c(
    ndims: c_int, sizes: *const MPI_Count, subsizes: *const MPI_Count, starts: *const MPI_Count, order: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype,
) -> c_int {
    let n = ndims as i64;
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    let recipe = || unsafe { TypeRecipe::Subarray { sizes: slice(sizes, n), subsizes: slice(subsizes, n), starts: slice(starts, n), order, old: typeref(oldtype) } };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_subarray_c", newtype, recipe, |t| real!(MPI_Type_create_subarray_c(ndims, sizes, subsizes, starts, order, conv::datatype(oldtype), t))) }
}

pub unsafe fn MPI_Type_create_darray(
    size: c_int, rank: c_int, ndims: c_int, gsizes: *const c_int, distribs: *const c_int, dargs: *const c_int, psizes: *const c_int,
    order: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype,
) -> c_int {
    let n = ndims as i64;
    // SAFETY: MPI requires each array read here to hold `n` entries (this call's contract).
    let recipe = || unsafe {
        TypeRecipe::Darray {
            size,
            rank,
            gsizes: widen(slice(gsizes, n)),
            distribs: slice(distribs, n),
            dargs: slice(dargs, n),
            psizes: slice(psizes, n),
            order,
            old: typeref(oldtype),
        }
    };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe {
        make("MPI_Type_create_darray", newtype, recipe, |t| {
            real!(MPI_Type_create_darray(size, rank, ndims, gsizes, distribs, dargs, psizes, order, conv::datatype(oldtype), t))
        })
    }
}

pub unsafe fn MPI_Type_create_darray_c(
    size: c_int, rank: c_int, ndims: c_int, gsizes: *const MPI_Count, distribs: *const c_int, dargs: *const c_int, psizes: *const c_int,
    order: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype,
) -> c_int {
    let n = ndims as i64;
    // SAFETY: MPI requires each array read here to hold `n` entries (this call's contract).
    let recipe = || unsafe {
        TypeRecipe::Darray { size, rank, gsizes: slice(gsizes, n), distribs: slice(distribs, n), dargs: slice(dargs, n), psizes: slice(psizes, n), order, old: typeref(oldtype) }
    };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe {
        make("MPI_Type_create_darray_c", newtype, recipe, |t| {
            real!(MPI_Type_create_darray_c(size, rank, ndims, gsizes, distribs, dargs, psizes, order, conv::datatype(oldtype), t))
        })
    }
}

pub unsafe fn MPI_Type_create_resized(oldtype: MPI_Datatype, lb: MPI_Aint, extent: MPI_Aint, newtype: *mut MPI_Datatype) -> c_int {
    let recipe = || TypeRecipe::Resized { lb: lb as i64, extent: extent as i64, old: typeref(oldtype) };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_resized", newtype, recipe, |t| real!(MPI_Type_create_resized(conv::datatype(oldtype), lb, extent, t))) }
}

pub unsafe fn MPI_Type_create_resized_c(oldtype: MPI_Datatype, lb: MPI_Count, extent: MPI_Count, newtype: *mut MPI_Datatype) -> c_int {
    let recipe = || TypeRecipe::Resized { lb, extent, old: typeref(oldtype) };
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    unsafe { make("MPI_Type_create_resized_c", newtype, recipe, |t| real!(MPI_Type_create_resized_c(conv::datatype(oldtype), lb, extent, t))) }
}

pub unsafe fn MPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    // SAFETY: `newtype` is the caller's out-pointer, valid for a write (MPI's contract of this
    // call, `make`'s).
    let rc = unsafe { make("MPI_Type_dup", newtype, || TypeRecipe::Dup { old: typeref(oldtype) }, |t| real!(MPI_Type_dup(conv::datatype(oldtype), t))) };
    if rc == MPI_SUCCESS {
        // SAFETY: `newtype` is the caller's valid pointer, which `make` has just written.
        let rc = crate::face::api::attr::copy_type_attrs(oldtype, unsafe { *newtype });
        if rc != MPI_SUCCESS {
            return errors::raise_default(rc, "MPI_Type_dup");
        }
        // A duplicate of a committed type is committed.
        // SAFETY: `newtype` is the caller's valid pointer, which `make` has just written.
        if let (Some(o), Some(n)) = (conv::index(oldtype, Kind::Datatype), conv::index(unsafe { *newtype }, Kind::Datatype)) {
            let committed = OBJ.datatypes.with(o, |e| e.dt.committed).unwrap_or(false);
            OBJ.datatypes.with(n, |e| e.dt.committed = committed);
        }
    }
    rc
}

/// Fortran 90 parameterised types: MPICH returns cached handles that must not be freed, so
/// they pass through unvirtualised.
pub unsafe fn MPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut MPI_Datatype) -> c_int {
    let _g = gate::enter();
    let rc = real!(MPI_Type_create_f90_real(p, r, newtype));
    drop(_g);
    if rc != MPI_SUCCESS { errors::raise_default(rc, "MPI_Type_create_f90_real") } else { rc }
}

pub unsafe fn MPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut MPI_Datatype) -> c_int {
    let _g = gate::enter();
    let rc = real!(MPI_Type_create_f90_complex(p, r, newtype));
    drop(_g);
    if rc != MPI_SUCCESS { errors::raise_default(rc, "MPI_Type_create_f90_complex") } else { rc }
}

pub unsafe fn MPI_Type_create_f90_integer(r: c_int, newtype: *mut MPI_Datatype) -> c_int {
    let _g = gate::enter();
    let rc = real!(MPI_Type_create_f90_integer(r, newtype));
    drop(_g);
    if rc != MPI_SUCCESS { errors::raise_default(rc, "MPI_Type_create_f90_integer") } else { rc }
}

pub unsafe fn MPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut MPI_Datatype) -> c_int {
    let _g = gate::enter();
    let rc = real!(MPI_Type_match_size(typeclass, size, datatype));
    drop(_g);
    if rc != MPI_SUCCESS { errors::raise_default(rc, "MPI_Type_match_size") } else { rc }
}

pub unsafe fn MPI_Type_commit(datatype: *mut MPI_Datatype) -> c_int {
    let g = gate::enter();
    if datatype.is_null() {
        return errors::raise_default(real!(MPI_Type_commit(datatype)), "MPI_Type_commit");
    }
    // SAFETY: `datatype` points to the caller's handle, readable and writable (MPI's contract of
    // this call).
    let v = unsafe { *datatype };
    let mut r = conv::datatype(v);
    let rc = real!(MPI_Type_commit(&mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Type_commit");
    }
    if let Some(i) = conv::index(v, Kind::Datatype) {
        OBJ.datatypes.with(i, |e| e.dt.committed = true);
    }
    MPI_SUCCESS
}

pub unsafe fn MPI_Type_free(datatype: *mut MPI_Datatype) -> c_int {
    if datatype.is_null() {
        let _g = gate::enter();
        return errors::raise_default(real!(MPI_Type_free(datatype)), "MPI_Type_free");
    }
    // SAFETY: `datatype` points to the caller's handle, readable and writable (MPI's contract of
    // this call).
    let v = unsafe { *datatype };
    let idx = conv::index(v, Kind::Datatype).filter(|&i| OBJ.datatypes.real(i).is_some());
    if idx.is_some() {
        let rc = crate::face::api::attr::delete_all_type_attrs(v);
        if rc != MPI_SUCCESS {
            return errors::raise_default(rc, "MPI_Type_free");
        }
    }
    let g = gate::enter();
    let real0 = conv::datatype(v);
    let mut r = real0;
    let rc = real!(MPI_Type_free(&mut r));
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Type_free");
    }
    if let Some(i) = idx {
        OBJ.datatypes.remove(i);
        forget_real(real0);
    }
    // SAFETY: `datatype` points to the caller's handle, readable and writable (MPI's contract of
    // this call).
    unsafe { *datatype = MPI_DATATYPE_NULL };
    MPI_SUCCESS
}

/// Wraps the datatypes returned by MPI_Type_get_contents: derived ones are new references in
/// the real library and get virtual handles whose recipes come from the queried type's recipe.
fn wrap_contents(of: MPI_Datatype, out: &mut [MPI_Datatype]) {
    let inputs: Vec<TypeRef> = conv::index(of, Kind::Datatype)
        .and_then(|i| OBJ.datatypes.with(i, |e| e.dt.recipe.inputs().into_iter().cloned().collect()))
        .unwrap_or_default();
    for (k, t) in out.iter_mut().enumerate() {
        // Predefined inputs come back as themselves (MPICH's pair types are not "builtin"
        // handles, so the recipe decides, not the handle's bits).
        let recipe = match inputs.get(k) {
            Some(TypeRef::Derived(r)) => (**r).clone(),
            Some(TypeRef::Predefined(_)) => continue,
            None if is_builtin(*t) => continue,
            None => TypeRecipe::Named { combiner: -1, args: vec![] },
        };
        *t = register_type(*t, recipe);
    }
}

pub unsafe fn MPI_Type_get_contents(
    datatype: MPI_Datatype, max_integers: c_int, max_addresses: c_int, max_datatypes: c_int, ints: *mut c_int, addrs: *mut MPI_Aint,
    types: *mut MPI_Datatype,
) -> c_int {
    let g = gate::enter();
    let rc = real!(MPI_Type_get_contents(conv::datatype(datatype), max_integers, max_addresses, max_datatypes, ints, addrs, types));
    if rc == MPI_SUCCESS && !types.is_null() && max_datatypes > 0 {
        // SAFETY: `types` is non-null and has room for `max_datatypes > 0` handles (MPI's
        // contract), which the library just filled.
        wrap_contents(datatype, unsafe { std::slice::from_raw_parts_mut(types, max_datatypes as usize) });
    }
    drop(g);
    if rc != MPI_SUCCESS { errors::raise_default(rc, "MPI_Type_get_contents") } else { rc }
}

pub unsafe fn MPI_Type_get_contents_c(
    datatype: MPI_Datatype, max_integers: MPI_Count, max_addresses: MPI_Count, max_large_counts: MPI_Count, max_datatypes: MPI_Count,
    ints: *mut c_int, addrs: *mut MPI_Aint, counts: *mut MPI_Count, types: *mut MPI_Datatype,
) -> c_int {
    let g = gate::enter();
    let rc = real!(MPI_Type_get_contents_c(conv::datatype(datatype), max_integers, max_addresses, max_large_counts, max_datatypes, ints, addrs, counts, types));
    if rc == MPI_SUCCESS && !types.is_null() && max_datatypes > 0 {
        // SAFETY: `types` is non-null and has room for `max_datatypes > 0` handles (MPI's
        // contract), which the library just filled.
        wrap_contents(datatype, unsafe { std::slice::from_raw_parts_mut(types, max_datatypes as usize) });
    }
    drop(g);
    if rc != MPI_SUCCESS { errors::raise_default(rc, "MPI_Type_get_contents_c") } else { rc }
}
