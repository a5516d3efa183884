//! Files the program opened with `MPI_MODE_SEQUENTIAL`: the real file is opened without it
//! (`core::kinds::file::real_amode`), so that a checkpoint can read and a renewal can set its
//! shared file pointer (ROMIO refuses both on a sequential file). What the program sees stays
//! that of a sequential file:
//!
//! - under ROMIO (every lower library but Open MPI's), the calls ROMIO refuses on a sequential
//!   file fail here with its class, `MPI_ERR_UNSUPPORTED_OPERATION`, after the checks ROMIO
//!   makes before that one (those failures are left to the real library, which makes them
//!   alike on the non-sequential file); Open MPI's OMPIO refuses none of them;
//! - `MPI_File_set_view` with `MPI_DISPLACEMENT_CURRENT` is resolved here (the byte offset of
//!   the shared file pointer, as ROMIO and OMPIO do), and under ROMIO a sequential file's view
//!   with any other displacement fails as ROMIO's does;
//! - `MPI_File_get_amode` reports the program's mode (`face::api::file`).

use crate::core::kinds::file;
use crate::face::abi::*;
use crate::face::call::ok;
use crate::face::conv;
use std::os::raw::c_int;

const MPI_COMBINER_NAMED: c_int = 1;

/// Whether the program opened `fh` with `MPI_MODE_SEQUENTIAL`, and its mode.
fn program_amode(fh: MPI_File) -> Option<c_int> {
    file::with(conv::vfile(fh), |e| e.amode).filter(|a| a & MPI_MODE_SEQUENTIAL != 0)
}

/// Whether the library underneath refuses file-pointer and explicit-offset calls on a
/// sequential file (ROMIO does; Open MPI's OMPIO does not).
fn romio() -> bool {
    !crate::lower::current().is_open_mpi()
}

/// Whether the library underneath is a ROMIO older than MPICH 5's (MPICH 4 and older; Intel
/// MPI's refuses both, measured with Intel MPI 2021): its `MPI_File_get_position` and
/// `MPI_File_get_byte_offset` pass the refusal to the file's error handler and then return
/// `MPI_SUCCESS`, the offset left unwritten.
fn legacy_romio() -> bool {
    romio() && is_legacy_version(crate::lower::current().library_version())
}

/// MPICH before 5.0 (whose ROMIO's entry points were rewritten then).
fn is_legacy_version(v: &str) -> bool {
    let Some(rest) = v.split("MPICH Version:").nth(1) else { return false };
    let major: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit()).collect();
    major.parse::<u32>().is_ok_and(|m| m < 5)
}

/// `MPI_File_get_position` (`offset` None) and `MPI_File_get_byte_offset` on a sequential file
/// under a legacy ROMIO ([`legacy_romio`]): the refusal goes to the file's error handler and the
/// call returns `MPI_SUCCESS` (Some: what the wrapper returns at once). Called before the gate
/// is entered, as the handler may call MPI.
pub fn refused_but_succeeds(fh: MPI_File, offset: Option<MPI_Offset>, name: &str) -> Option<c_int> {
    if offset.is_some_and(|o| o < 0) || program_amode(fh).is_none() || !legacy_romio() {
        return None;
    }
    // Whatever the handler answers (a fatal one does not return), the call succeeds.
    let _ = crate::face::errors::raise_file(fh, MPI_ERR_UNSUPPORTED_OPERATION, name);
    Some(MPI_SUCCESS)
}

/// A call ROMIO refuses on a sequential file right after checking the handle
/// (`MPI_File_seek`, `_seek_shared`, `_get_position`, `_get_position_shared`, `_set_size`).
pub fn refuse(fh: MPI_File) -> Result<(), c_int> {
    match program_amode(fh) {
        Some(_) if romio() => Err(MPI_ERR_UNSUPPORTED_OPERATION),
        _ => Ok(()),
    }
}

/// `MPI_File_get_byte_offset`: ROMIO checks the offset first.
pub fn refuse_at(fh: MPI_File, offset: MPI_Offset) -> Result<(), c_int> {
    if offset < 0 {
        Ok(())
    } else {
        refuse(fh)
    }
}

/// How a data access call of ROMIO treats a zero-byte access on a sequential file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Zero {
    /// It succeeds before the sequential check (`MPI_File_read`, `_write`, `_read_at`,
    /// `_write_at`).
    Succeeds,
    /// It is refused like any other (the collective and nonblocking ones).
    Refused,
}

/// A data access through the individual file pointer or at an explicit offset (`offset`),
/// `write` or not: refused on a sequential file unless ROMIO would fail earlier (offset,
/// count, datatype, a size not a multiple of the etype's, the access mode) or succeed at once
/// (a zero-byte access, where `zero` says so); those cases go to the library.
pub fn data(
    fh: MPI_File,
    real: MPI_File,
    offset: Option<MPI_Offset>,
    count: impl Into<i64>,
    datatype: MPI_Datatype,
    write: bool,
    zero: Zero,
) -> Result<(), c_int> {
    let Some(amode) = program_amode(fh) else { return Ok(()) };
    let count: i64 = count.into();
    if !romio() || offset.is_some_and(|o| o < 0) || count < 0 {
        return Ok(());
    }
    let f = crate::lower::fns();
    let mut size: MPI_Count = 0;
    // SAFETY: `datatype` is a real handle translated by the caller inside the gate; the
    // library validates it; the out-pointer is a local.
    if f.MPI_Type_size_x.map_or(MPI_ERR_OTHER, |g| unsafe { g(datatype, &mut size) }) != MPI_SUCCESS {
        return Ok(());
    }
    let bytes = count.saturating_mul(size);
    if bytes == 0 && zero == Zero::Succeeds {
        return Ok(());
    }
    if etype_size(real).is_some_and(|e| e > 0 && bytes % e != 0) {
        return Ok(());
    }
    let denied = if write { amode & MPI_MODE_RDONLY != 0 } else { amode & MPI_MODE_WRONLY != 0 };
    if denied {
        return Ok(());
    }
    Err(MPI_ERR_UNSUPPORTED_OPERATION)
}

/// The size of the etype of `real`'s view (None where the library does not say).
fn etype_size(real: MPI_File) -> Option<i64> {
    let f = crate::lower::fns();
    let (mut disp, mut etype, mut filetype) = (0, MPI_DATATYPE_NULL, MPI_DATATYPE_NULL);
    let mut rep = [0 as std::os::raw::c_char; 256];
    // SAFETY: `real` is a live real file (translated inside the gate); out-pointers are locals,
    // the data representation's buffer holds MPI_MAX_DATAREP_STRING (128) characters.
    let rc = f.MPI_File_get_view.map_or(MPI_ERR_OTHER, |g| unsafe { g(real, &mut disp, &mut etype, &mut filetype, rep.as_mut_ptr()) });
    if rc != MPI_SUCCESS {
        return None;
    }
    let mut size: MPI_Count = 0;
    // SAFETY: a datatype the library just returned; the out-pointer is a local.
    let ok = f.MPI_Type_size_x.map_or(MPI_ERR_OTHER, |g| unsafe { g(etype, &mut size) }) == MPI_SUCCESS;
    free_returned(etype);
    free_returned(filetype);
    ok.then_some(size)
}

/// Frees a datatype `MPI_File_get_view` returned, unless it is predefined.
fn free_returned(mut t: MPI_Datatype) {
    let f = crate::lower::fns();
    let (mut ni, mut na, mut nd, mut combiner) = (0, 0, 0, 0);
    // SAFETY: a datatype the library just returned; out-pointers are locals; a derived one is
    // the caller's to free, once.
    unsafe {
        if f.MPI_Type_get_envelope.map_or(MPI_ERR_OTHER, |g| g(t, &mut ni, &mut na, &mut nd, &mut combiner)) == MPI_SUCCESS && combiner != MPI_COMBINER_NAMED {
            f.MPI_Type_free.map(|g| g(&mut t));
        }
    }
}

/// The displacement `MPI_File_set_view` gives the real file: on a sequential file,
/// `MPI_DISPLACEMENT_CURRENT` becomes the byte offset of the shared file pointer, read by every
/// rank between two barriers on the file's communicator (as ROMIO does: every rank's earlier
/// shared-pointer access is counted, and no rank's new view resets the pointer before all have
/// read it); under ROMIO any other displacement becomes `MPI_DISPLACEMENT_CURRENT`, which the
/// non-sequential real file refuses with the class and at the point where ROMIO refuses the
/// original on a sequential file. Elsewhere `disp` is passed on.
pub fn view_disp(fh: MPI_File, real: MPI_File, disp: MPI_Offset) -> Result<MPI_Offset, c_int> {
    if program_amode(fh).is_none() {
        return Ok(disp);
    }
    if disp != MPI_DISPLACEMENT_CURRENT {
        return Ok(if romio() { MPI_DISPLACEMENT_CURRENT } else { disp });
    }
    let f = crate::lower::fns();
    let comm = file::with(conv::vfile(fh), |e| e.comm).map(|c| crate::core::handles::comm(c).raw()).ok_or(MPI_ERR_FILE)?;
    let (mut shared, mut bytes) = (0, 0);
    // SAFETY: `comm` is the file's live real communicator, `real` its live real file (both
    // translated inside the gate); out-pointers are locals.
    unsafe {
        ok(f.MPI_Barrier.map_or(MPI_ERR_OTHER, |g| g(comm)))?;
        ok(f.MPI_File_get_position_shared.map_or(MPI_ERR_OTHER, |g| g(real, &mut shared)))?;
        ok(f.MPI_File_get_byte_offset.map_or(MPI_ERR_OTHER, |g| g(real, shared, &mut bytes)))?;
        ok(f.MPI_Barrier.map_or(MPI_ERR_OTHER, |g| g(comm)))?;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::is_legacy_version;

    #[test]
    fn romio_before_mpich_5_is_legacy() {
        assert!(is_legacy_version("MPICH Version:      4.0.2\nMPICH Release date: ..."));
        assert!(!is_legacy_version("Intel(R) MPI Library 2021.10 for Linux* OS"));
        assert!(!is_legacy_version("MPICH Version:      5.0.2\n"));
        assert!(!is_legacy_version("Open MPI v5.0.8"));
    }
}
