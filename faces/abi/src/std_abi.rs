//! The standard ABI's own functions (`MPI_Abi_*`), answered by the face: the ABI's version, the
//! sizes of its integer types, and its Fortran facts. Each returns the MPICH face's code (the
//! export converts it).
#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::conv::{self, OHandle};
use crate::gen::tables::{self, abi};
use mpicr_shim::face::gen::{create, passthrough};
use mpicr_virtid::Kind;
use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;

/// The ABI version this face implements (mpi_abi.h's MPI_ABI_VERSION.MPI_ABI_SUBVERSION).
pub unsafe fn MPI_Abi_get_version(major: *mut c_int, minor: *mut c_int) -> c_int {
    // SAFETY: the program's out-parameters (null is skipped).
    unsafe {
        if !major.is_null() {
            *major = abi::MPI_ABI_VERSION;
        }
        if !minor.is_null() {
            *minor = abi::MPI_ABI_SUBVERSION;
        }
    }
    0
}

/// A new info holding `pairs`, as the program's handle.
unsafe fn info_of(pairs: &[(String, String)], out: *mut OHandle) -> c_int {
    let mut info = 0;
    // SAFETY: `info` is a local out-parameter.
    let rc = unsafe { create::MPI_Info_create(&mut info) };
    if rc != 0 {
        return rc;
    }
    for (k, v) in pairs {
        let (k, v) = (CString::new(k.as_str()).unwrap_or_default(), CString::new(v.as_str()).unwrap_or_default());
        // SAFETY: NUL-terminated strings that outlive the call.
        let rc = unsafe { passthrough::MPI_Info_set(info, k.as_ptr(), v.as_ptr()) };
        if rc != 0 {
            return rc;
        }
    }
    if !out.is_null() {
        // SAFETY: the program's out-parameter.
        unsafe { *out = conv::h_out(Kind::Info, info) };
    }
    0
}

/// The sizes of MPI_Aint, MPI_Count and MPI_Offset (all 8 bytes on this ABI's platforms).
pub unsafe fn MPI_Abi_get_info(info: *mut OHandle) -> c_int {
    let sizes = [("mpi_aint_size", 8), ("mpi_count_size", 8), ("mpi_offset_size", 8)];
    // SAFETY: forwarded out-parameter.
    unsafe { info_of(&sizes.map(|(k, v)| (k.to_string(), v.to_string())), info) }
}

/// Fortran's facts as the library underneath has them: the default kinds' sizes, and which
/// optional Fortran datatypes it provides (those the MPICH-ABI library lacks are "false": MPICH
/// 4.0.2 has no MPI_LOGICAL1..16, MPI_REAL2, MPI_COMPLEX4, MPI_INTEGER16, MPICH 5 has them).
pub unsafe fn MPI_Abi_get_fortran_info(info: *mut OHandle) -> c_int {
    let mut pairs: Vec<(String, String)> = [("mpi_logical_size", 4), ("mpi_integer_size", 4), ("mpi_real_size", 4), ("mpi_double_precision_size", 8)]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec();
    for ty in [
        "LOGICAL1",
        "LOGICAL2",
        "LOGICAL4",
        "LOGICAL8",
        "LOGICAL16",
        "INTEGER1",
        "INTEGER2",
        "INTEGER4",
        "INTEGER8",
        "INTEGER16",
        "REAL2",
        "REAL4",
        "REAL8",
        "REAL16",
        "COMPLEX4",
        "COMPLEX8",
        "COMPLEX16",
        "COMPLEX32",
        "DOUBLE_COMPLEX",
    ] {
        let name = format!("MPI_{ty}");
        let here = tables::PREDEFINED.iter().any(|p| p.1 == Kind::Datatype && p.3 == name && mpicr_shim::core::handles::library_has_datatype(p.2));
        pairs.push((format!("mpi_{}_supported", ty.to_lowercase()), if here { "true" } else { "false" }.to_string()));
    }
    // SAFETY: forwarded out-parameter.
    unsafe { info_of(&pairs, info) }
}

/// mpicr carries no Fortran bindings: the info is accepted and changes nothing.
pub unsafe fn MPI_Abi_set_fortran_info(info: OHandle) -> c_int {
    let _ = info;
    0
}

/// The values of Fortran's .TRUE. and .FALSE. the program set (set = 1), else the usual 1 and 0
/// of a 4-byte LOGICAL (set = 1 as well: they are known), as the MPICH 5 wheel answers.
static BOOLEANS: Mutex<Option<Booleans>> = Mutex::new(None);
/// (size of a LOGICAL, .TRUE., .FALSE.).
type Booleans = (usize, Vec<u8>, Vec<u8>);

pub unsafe fn MPI_Abi_set_fortran_booleans(size: c_int, t: *mut c_void, f: *mut c_void) -> c_int {
    if size <= 0 || t.is_null() || f.is_null() {
        return mpicr_shim::face::abi::MPI_ERR_ARG;
    }
    let n = size as usize;
    // SAFETY: the program's values, `size` bytes each.
    let (tv, fv) = unsafe { (std::slice::from_raw_parts(t as *const u8, n).to_vec(), std::slice::from_raw_parts(f as *const u8, n).to_vec()) };
    *BOOLEANS.lock().unwrap_or_else(|e| e.into_inner()) = Some((n, tv, fv));
    0
}

pub unsafe fn MPI_Abi_get_fortran_booleans(size: c_int, t: *mut c_void, f: *mut c_void, is_set: *mut c_int) -> c_int {
    if size <= 0 || t.is_null() || f.is_null() {
        return mpicr_shim::face::abi::MPI_ERR_ARG;
    }
    let n = size as usize;
    let set = BOOLEANS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let (tv, fv) = match set {
        Some((sn, tv, fv)) if sn == n => (tv, fv),
        _ => {
            // 1 and 0 in a little-endian integer of `size` bytes.
            let mut tv = vec![0u8; n];
            tv[0] = 1;
            (tv, vec![0u8; n])
        }
    };
    // SAFETY: the program's buffers of `size` bytes each.
    unsafe {
        std::ptr::copy_nonoverlapping(tv.as_ptr(), t as *mut u8, n);
        std::ptr::copy_nonoverlapping(fv.as_ptr(), f as *mut u8, n);
        if !is_set.is_null() {
            *is_set = 1;
        }
    }
    0
}
