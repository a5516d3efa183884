//! Info objects: the recipe is their keys and values, read back from the library just before
//! each release (the program may have changed them through any call).

use super::{check, RebuildError, Renewable};
use crate::core::state::OBJ;
use crate::lower;
use crate::lower::abi::*;
use crate::lower::handles::RealInfo;
use std::os::raw::{c_char, c_int};

/// The keys and values of a real info object (none for MPI_INFO_NULL).
pub fn entries(real: c_int) -> Vec<(String, String)> {
    let f = lower::fns();
    let mut entries = Vec::new();
    if real == MPI_INFO_NULL {
        return entries;
    }
    let mut n = 0;
    // SAFETY: a live real info; buffers sized per the MPI limits.
    unsafe {
        f.MPI_Info_get_nkeys.map(|g| g(real, &mut n));
        for k in 0..n {
            let mut key = vec![0 as c_char; MPI_MAX_INFO_KEY + 1];
            f.MPI_Info_get_nthkey.map(|g| g(real, k, key.as_mut_ptr()));
            let mut len: c_int = MPI_MAX_INFO_VAL as c_int + 1;
            let mut val = vec![0 as c_char; MPI_MAX_INFO_VAL + 1];
            let mut flag = 0;
            f.MPI_Info_get_string.map(|g| g(real, key.as_ptr(), &mut len, val.as_mut_ptr(), &mut flag));
            if flag != 0 {
                entries.push((lower::cstr(key.as_ptr()), lower::cstr(val.as_ptr())));
            }
        }
    }
    entries
}

/// A new real info object holding `entries` (the caller frees it).
pub fn build(entries: &[(String, String)]) -> Result<c_int, RebuildError> {
    let f = lower::fns();
    let mut real = MPI_INFO_NULL;
    // SAFETY: out-pointer and NUL-terminated strings.
    unsafe {
        check(f.MPI_Info_create.map_or(MPI_ERR_OTHER, |h| h(&mut real)), "MPI_Info_create")?;
        for (k, v) in entries {
            let (k, v) = (std::ffi::CString::new(k.as_str()).unwrap_or_default(), std::ffi::CString::new(v.as_str()).unwrap_or_default());
            f.MPI_Info_set.map(|h| h(real, k.as_ptr(), v.as_ptr()));
        }
    }
    Ok(real)
}

/// Frees a real info object made by [`build`].
pub fn free(mut real: c_int) {
    // SAFETY: a live real info of the current generation, freed once.
    unsafe { lower::fns().MPI_Info_free.map(|g| g(&mut real)) };
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
