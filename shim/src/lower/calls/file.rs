//! MPI-IO files: what a checkpoint reads back of them, and their reopening.
//!
//! A file is a [`RealFile`]: one the library opened (the core's records hold them), or the null
//! file, which ROMIO rejects with `MPI_ERR_FILE` without dereferencing it.

use super::real;
use crate::lower::abi::*;
use crate::lower::handles::RealFile;
use std::ffi::CStr;
use std::os::raw::c_int;

/// `MPI_File_open`.
pub fn open(comm: MPI_Comm, name: &CStr, amode: c_int, info: MPI_Info, file: &mut RealFile) -> Option<c_int> {
    real!(MPI_File_open(comm, name.as_ptr(), amode, info, &mut file.0))
}

/// `MPI_File_close`.
pub fn close(file: &mut RealFile) -> Option<c_int> {
    real!(MPI_File_close(&mut file.0))
}

/// `MPI_File_delete`.
pub fn delete(name: &CStr, info: MPI_Info) -> Option<c_int> {
    real!(MPI_File_delete(name.as_ptr(), info))
}

/// `MPI_File_sync`.
pub fn sync(file: RealFile) -> Option<c_int> {
    real!(MPI_File_sync(file.0))
}

/// `MPI_File_get_position`.
pub fn position(file: RealFile, offset: &mut MPI_Offset) -> Option<c_int> {
    real!(MPI_File_get_position(file.0, offset))
}

/// `MPI_File_get_position_shared`.
pub fn position_shared(file: RealFile, offset: &mut MPI_Offset) -> Option<c_int> {
    real!(MPI_File_get_position_shared(file.0, offset))
}

/// `MPI_File_get_atomicity`.
pub fn atomicity(file: RealFile, flag: &mut c_int) -> Option<c_int> {
    real!(MPI_File_get_atomicity(file.0, flag))
}

/// `MPI_File_get_size`.
pub fn size(file: RealFile, size: &mut MPI_Offset) -> Option<c_int> {
    real!(MPI_File_get_size(file.0, size))
}

/// `MPI_File_set_errhandler`.
pub fn set_errhandler(file: RealFile, errhandler: MPI_Errhandler) -> Option<c_int> {
    real!(MPI_File_set_errhandler(file.0, errhandler))
}

/// `MPI_File_set_atomicity`.
pub fn set_atomicity(file: RealFile, flag: c_int) -> Option<c_int> {
    real!(MPI_File_set_atomicity(file.0, flag))
}

/// `MPI_File_set_info`.
pub fn set_info(file: RealFile, info: MPI_Info) -> Option<c_int> {
    real!(MPI_File_set_info(file.0, info))
}

/// `MPI_File_set_view`.
pub fn set_view(file: RealFile, disp: MPI_Offset, etype: MPI_Datatype, filetype: MPI_Datatype, datarep: &CStr, info: MPI_Info) -> Option<c_int> {
    real!(MPI_File_set_view(file.0, disp, etype, filetype, datarep.as_ptr(), info))
}

/// `MPI_File_seek`.
pub fn seek(file: RealFile, offset: MPI_Offset, whence: c_int) -> Option<c_int> {
    real!(MPI_File_seek(file.0, offset, whence))
}

/// `MPI_File_seek_shared`.
pub fn seek_shared(file: RealFile, offset: MPI_Offset, whence: c_int) -> Option<c_int> {
    real!(MPI_File_seek_shared(file.0, offset, whence))
}
