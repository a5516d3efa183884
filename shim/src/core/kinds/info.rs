//! Info objects: the recipe is their keys and values, read back from the library just before
//! each release (the program may have changed them through any call).

use super::{check, RebuildError, Renewable};
use crate::core::state::OBJ;
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::object::Kind;
use crate::lower::handles::RealInfo;
use std::os::raw::c_int;

/// The keys and values of a real info object (none for MPI_INFO_NULL).
pub fn entries(real: c_int) -> Vec<(String, String)> {
    if real == MPI_INFO_NULL {
        return Vec::new();
    }
    calls::init::info_entries(real)
}

/// A new real info object holding `entries` (the caller frees it).
pub fn build(entries: &[(String, String)]) -> Result<c_int, RebuildError> {
    let mut real = MPI_INFO_NULL;
    check(calls::init::info_create(&mut real).unwrap_or(MPI_ERR_OTHER), "MPI_Info_create")?;
    for (k, v) in entries {
        let (k, v) = (std::ffi::CString::new(k.as_str()).unwrap_or_default(), std::ffi::CString::new(v.as_str()).unwrap_or_default());
        calls::init::info_set(real, &k, &v);
    }
    Ok(real)
}

/// Frees a real info object made by [`build`].
pub fn free(mut real: c_int) {
    // A live real info of the current generation, freed once.
    calls::object::free(Kind::Info, &mut real);
}

/// The info kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    /// Reads back the keys and values of every info object (their recipe).
    fn snapshot(&self) {
        for (idx, real, _) in OBJ.infos.snapshot() {
            let e = entries(real.raw());
            OBJ.infos.with(idx, |i| i.entries = e);
        }
    }

    fn free_real(&self) {
        for (_, r, _) in OBJ.infos.snapshot() {
            free(r.raw());
        }
    }

    fn rebuild(&self) -> Result<(), RebuildError> {
        for (idx, _, info) in OBJ.infos.snapshot() {
            OBJ.infos.set_real(idx, RealInfo(build(&info.entries)?));
        }
        Ok(())
    }
}
