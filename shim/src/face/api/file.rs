//! MPI-IO: files are virtualised (they are pointers in the MPICH ABI); open files cannot be
//! checkpointed yet (the agent refuses with a clear error).

use crate::face::abi::*;
use crate::face::api::request::register_request;
use crate::face::api::{begin_collective, put};
use crate::core::kinds::file::FileEntry;
use crate::core::state::OBJ;
use crate::face::call::{self, On, ToReal};
use crate::face::{conv, errors};
use mpicr_virtid::RequestRecipe;
use std::os::raw::{c_char, c_int, c_void};

pub use crate::face::api::errhandler::file_null_errhandler;

pub unsafe fn MPI_File_open(comm: MPI_Comm, filename: *const c_char, amode: c_int, info: MPI_Info, fh: *mut MPI_File) -> c_int {
    let (g, _) = begin_collective(comm);
    // Failures go to the handler of MPI_FILE_NULL.
    call::run_in(g, "MPI_File_open", On::File(std::ptr::null_mut()), || {
        let (c, i) = (call::Comm(comm).to_real()?, call::Info(info).to_real()?);
        let mut r: MPI_File = std::ptr::null_mut();
        call::ok(real!(MPI_File_open(c, filename, amode, i, &mut r)))?;
        if let Some(f) = crate::lower::fns().MPI_File_set_errhandler {
            // SAFETY: a live real file and a predefined error handler.
            unsafe { f(r, MPI_ERRORS_RETURN) };
        }
        let v = match OBJ.files.insert(crate::lower::handles::RealFile(r), FileEntry { errhandler: file_null_errhandler() }) {
            Ok(i) => conv::file_handle(i),
            Err(_) => errors::fatal("too many open files"),
        };
        // SAFETY: `fh` is the caller's out-pointer, null or valid for a write as MPI requires
        // (this function's safety contract).
        unsafe { put(fh, v) };
        Ok(())
    })
}

pub unsafe fn MPI_File_close(fh: *mut MPI_File) -> c_int {
    if fh.is_null() {
        return errors::raise_file(std::ptr::null_mut(), MPI_ERR_FILE, "MPI_File_close");
    }
    // SAFETY: `fh` points to the caller's handle, readable and writable (MPI's contract of this
    // call).
    let v = unsafe { *fh };
    call::run("MPI_File_close", On::File(v), || {
        let mut r = call::File(v).to_real()?;
        call::ok(real!(MPI_File_close(&mut r)))?;
        if let Some(i) = conv::file_index(v) {
            OBJ.files.remove(i);
        }
        // SAFETY: as above.
        unsafe { *fh = std::ptr::null_mut() };
        Ok(())
    })
}

pub unsafe fn MPI_File_get_view(fh: MPI_File, disp: *mut MPI_Offset, etype: *mut MPI_Datatype, filetype: *mut MPI_Datatype, datarep: *mut c_char) -> c_int {
    call::run("MPI_File_get_view", On::File(fh), || {
        let (mut e, mut f) = (MPI_DATATYPE_NULL, MPI_DATATYPE_NULL);
        call::ok(real!(MPI_File_get_view(call::File(fh).to_real()?, disp, &mut e, &mut f, datarep)))?;
        // SAFETY: `etype` and `filetype` are the caller's out-pointers, null or valid for a write
        // as MPI requires (this function's safety contract).
        unsafe {
            put(etype, crate::core::kinds::datatype::virtual_of_real(e));
            put(filetype, crate::core::kinds::datatype::virtual_of_real(f));
        }
        Ok(())
    })
}

pub unsafe fn MPI_File_c2f(file: MPI_File) -> MPI_Fint {
    if file.is_null() {
        return 0;
    }
    conv::file_index(file).map_or(0, |i| i as MPI_Fint + 1)
}

pub unsafe fn MPI_File_f2c(file: MPI_Fint) -> MPI_File {
    if file <= 0 {
        return std::ptr::null_mut();
    }
    conv::file_handle(file as u32 - 1)
}

macro_rules! file_io {
    ($name:ident, $count:ty, $bt:ty $(, $off:ident)?) => {
        pub unsafe fn $name(fh: MPI_File, $($off: MPI_Offset,)? buf: $bt, count: $count, datatype: MPI_Datatype, request: *mut MPI_Request) -> c_int {
            call::run(stringify!($name), On::File(fh), || {
                let (f, t) = (call::File(fh).to_real()?, call::Datatype(datatype).to_real()?);
                let mut r = MPI_REQUEST_NULL;
                call::ok(real!($name(f, $($off,)? buf, count, t, &mut r)))?;
                crate::core::kinds::request::note_file_io();
                let v = register_request(r, RequestRecipe::Other { function: stringify!($name).into() }, MPI_COMM_NULL, false);
                // SAFETY: `request` is the caller's out-pointer, null or valid for a write as MPI
                // requires (this function's safety contract).
                unsafe { put(request, v) };
                Ok(())
            })
        }
    };
}

file_io!(MPI_File_iread, c_int, *mut c_void);
file_io!(MPI_File_iread_c, MPI_Count, *mut c_void);
file_io!(MPI_File_iread_all, c_int, *mut c_void);
file_io!(MPI_File_iread_all_c, MPI_Count, *mut c_void);
file_io!(MPI_File_iread_shared, c_int, *mut c_void);
file_io!(MPI_File_iread_shared_c, MPI_Count, *mut c_void);
file_io!(MPI_File_iread_at, c_int, *mut c_void, offset);
file_io!(MPI_File_iread_at_c, MPI_Count, *mut c_void, offset);
file_io!(MPI_File_iread_at_all, c_int, *mut c_void, offset);
file_io!(MPI_File_iread_at_all_c, MPI_Count, *mut c_void, offset);
file_io!(MPI_File_iwrite, c_int, *const c_void);
file_io!(MPI_File_iwrite_c, MPI_Count, *const c_void);
file_io!(MPI_File_iwrite_all, c_int, *const c_void);
file_io!(MPI_File_iwrite_all_c, MPI_Count, *const c_void);
file_io!(MPI_File_iwrite_shared, c_int, *const c_void);
file_io!(MPI_File_iwrite_shared_c, MPI_Count, *const c_void);
file_io!(MPI_File_iwrite_at, c_int, *const c_void, offset);
file_io!(MPI_File_iwrite_at_c, MPI_Count, *const c_void, offset);
file_io!(MPI_File_iwrite_at_all, c_int, *const c_void, offset);
file_io!(MPI_File_iwrite_at_all_c, MPI_Count, *const c_void, offset);

pub unsafe fn MPI_File_toint(file: MPI_File) -> c_int {
    unsafe { MPI_File_c2f(file) }
}

pub unsafe fn MPI_File_fromint(file: c_int) -> MPI_File {
    unsafe { MPI_File_f2c(file) }
}
