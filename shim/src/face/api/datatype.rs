//! Derived datatypes: each constructor records its recipe (with the recipes of its inputs
//! embedded, since the program may free those), so the type can be built again on a fresh
//! library with the large-count constructors.

use crate::core::gate;
use crate::core::kinds::datatype as kind;
use crate::core::state::OBJ;
use crate::face::abi::*;
use crate::face::api::put;
use crate::face::call::{self, On, ToReal};
use crate::face::{conv, errors};
use crate::lower::handles::RealDatatype;
use mpicr_virtid::{TypeRecipe, TypeRef};
use std::os::raw::c_int;

/// A datatype argument as a self-contained recipe reference.
pub fn typeref(h: MPI_Datatype) -> TypeRef {
    kind::typeref(conv::vdatatype(h))
}

/// Registers a new real derived datatype; the program's handle of it.
pub fn register_type(real: c_int, recipe: TypeRecipe) -> MPI_Datatype {
    match kind::register(RealDatatype(real), recipe) {
        Ok(v) => conv::datatype_abi(v),
        Err(_) => errors::fatal("too many live datatypes"),
    }
}

pub(crate) fn widen<T: Copy + Into<i64>>(v: Vec<T>) -> Vec<i64> {
    v.into_iter().map(Into::into).collect()
}

pub(crate) fn widen_aint(v: Vec<MPI_Aint>) -> Vec<i64> {
    v.into_iter().map(|x| x as i64).collect()
}

pub unsafe fn MPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    let rc = call::run("MPI_Type_dup", On::Default, || {
        let old_r = call::Datatype(oldtype).to_real()?;
        let mut r = MPI_DATATYPE_NULL;
        call::ok(real!(MPI_Type_dup(old_r, &mut r)))?;
        let v = register_type(r, TypeRecipe::Dup { old: typeref(oldtype) });
        // SAFETY: `newtype` is the caller's out-pointer, null or valid for a write as MPI requires
        // (this function's safety contract).
        unsafe { put(newtype, v) };
        Ok(())
    });
    if rc == MPI_SUCCESS {
        // SAFETY: `newtype` is the caller's valid pointer, which `make` has just written.
        let v = unsafe { *newtype };
        let rc = crate::face::api::attr::copy_type_attrs(oldtype, v);
        if rc != MPI_SUCCESS {
            // A failed copy callback: the duplicate is freed again and the program gets
            // MPI_DATATYPE_NULL with the callback's error, as from MPICH.
            crate::face::api::attr::discard_type_attrs(v);
            let mut gone = v;
            // SAFETY: a local handle the shim has just made.
            let _ = unsafe { MPI_Type_free(&mut gone) };
            // SAFETY: `newtype` is the caller's valid pointer, which `make` has just written.
            unsafe { *newtype = MPI_DATATYPE_NULL };
            return errors::raise_default(rc, "MPI_Type_dup");
        }
        // A duplicate of a committed type is committed.
        // SAFETY: `newtype` is the caller's valid pointer, which `make` has just written.
        if let (Some(o), Some(n)) = (conv::vdatatype(oldtype).index(), conv::vdatatype(unsafe { *newtype }).index()) {
            let committed = OBJ.datatypes.with(o, |e| e.dt.committed).unwrap_or(false);
            OBJ.datatypes.with(n, |e| e.dt.committed = committed);
        }
    }
    rc
}

pub unsafe fn MPI_Type_commit(datatype: *mut MPI_Datatype) -> c_int {
    call::run("MPI_Type_commit", On::Default, || {
        if datatype.is_null() {
            return call::ok(real!(MPI_Type_commit(datatype)));
        }
        // SAFETY: `datatype` points to the caller's handle, readable and writable (MPI's contract
        // of this call).
        let v = unsafe { *datatype };
        let mut r = call::Datatype(v).to_real()?;
        call::ok(real!(MPI_Type_commit(&mut r)))?;
        if let Some(i) = conv::vdatatype(v).index() {
            OBJ.datatypes.with(i, |e| e.dt.committed = true);
        }
        Ok(())
    })
}

pub unsafe fn MPI_Type_free(datatype: *mut MPI_Datatype) -> c_int {
    if datatype.is_null() {
        let _g = gate::enter();
        return errors::raise_default(real!(MPI_Type_free(datatype)), "MPI_Type_free");
    }
    // SAFETY: `datatype` points to the caller's handle, readable and writable (MPI's contract of
    // this call).
    let v = unsafe { *datatype };
    let vd = conv::vdatatype(v);
    let idx = vd.index().filter(|&i| OBJ.datatypes.real(i).is_some());
    if idx.is_some() {
        let rc = crate::face::api::attr::delete_all_type_attrs(v);
        if rc != MPI_SUCCESS {
            return errors::raise_default(rc, "MPI_Type_free");
        }
    }
    let g = gate::enter();
    let real0 = crate::core::handles::datatype(vd);
    let mut r = real0.raw();
    let rc = real!(MPI_Type_free(&mut r));
    if rc == MPI_SUCCESS {
        // Pending receives and persistent requests keep its recipe (their handle goes stale).
        if let Some(recipe) = idx.and(kind::recipe(vd)) {
            crate::core::kinds::request::note_type_freed(vd, &recipe);
        }
    }
    drop(g);
    if rc != MPI_SUCCESS {
        return errors::raise_default(rc, "MPI_Type_free");
    }
    if idx.is_some() {
        kind::forget(vd, real0);
    }
    // SAFETY: `datatype` points to the caller's handle, readable and writable (MPI's contract of
    // this call).
    unsafe { *datatype = MPI_DATATYPE_NULL };
    MPI_SUCCESS
}

/// Wraps the datatypes returned by MPI_Type_get_contents: derived ones are new references in
/// the real library and get virtual handles whose recipes come from the queried type's recipe.
fn wrap_contents(of: MPI_Datatype, out: &mut [MPI_Datatype]) {
    let inputs: Vec<TypeRef> = kind::recipe(conv::vdatatype(of)).map(|r| r.inputs().into_iter().cloned().collect()).unwrap_or_default();
    for (k, t) in out.iter_mut().enumerate() {
        // Predefined inputs come back as the library's predefined handles, named as the program
        // names them (MPICH's pair types are not "builtin" handles, so the recipe decides, not
        // the handle's bits).
        let recipe = match inputs.get(k) {
            Some(TypeRef::Derived(r)) => (**r).clone(),
            Some(TypeRef::Predefined(_)) => {
                *t = conv::datatype_of_real(*t);
                continue;
            }
            None if is_builtin(*t) => {
                *t = conv::datatype_of_real(*t);
                continue;
            }
            None => TypeRecipe::Named { combiner: -1, args: vec![] },
        };
        *t = register_type(*t, recipe);
    }
}

pub unsafe fn MPI_Type_get_contents(
    datatype: MPI_Datatype,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    ints: *mut c_int,
    addrs: *mut MPI_Aint,
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
    if rc != MPI_SUCCESS {
        errors::raise_default(rc, "MPI_Type_get_contents")
    } else {
        rc
    }
}

pub unsafe fn MPI_Type_get_contents_c(
    datatype: MPI_Datatype,
    max_integers: MPI_Count,
    max_addresses: MPI_Count,
    max_large_counts: MPI_Count,
    max_datatypes: MPI_Count,
    ints: *mut c_int,
    addrs: *mut MPI_Aint,
    counts: *mut MPI_Count,
    types: *mut MPI_Datatype,
) -> c_int {
    let g = gate::enter();
    let rc = real!(MPI_Type_get_contents_c(conv::datatype(datatype), max_integers, max_addresses, max_large_counts, max_datatypes, ints, addrs, counts, types));
    if rc == MPI_SUCCESS && !types.is_null() && max_datatypes > 0 {
        // SAFETY: `types` is non-null and has room for `max_datatypes > 0` handles (MPI's
        // contract), which the library just filled.
        wrap_contents(datatype, unsafe { std::slice::from_raw_parts_mut(types, max_datatypes as usize) });
    }
    drop(g);
    if rc != MPI_SUCCESS {
        errors::raise_default(rc, "MPI_Type_get_contents_c")
    } else {
        rc
    }
}
