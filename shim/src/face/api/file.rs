//! MPI-IO: files are virtualised (they are pointers in the MPICH ABI) and carried through
//! checkpoints (`core::kinds::file`): the open records what a renewal needs to open the file
//! again, the view and the hints are recorded as they are set, every collective on a file is
//! counted on the file's own communicator for the checkpoint's alignment, and split collectives
//! are carried by the shim.

use crate::core::gate;
use crate::core::kinds::file::{self, FileEntry, View};
use crate::core::state::OBJ;
use crate::face::abi::*;
use crate::face::api::datatype::typeref;
use crate::face::api::file_sequential::{self as sequential, Zero};
use crate::face::api::request::register_request;
use crate::face::api::{begin_collective, put, put_status};
use crate::face::call::{self, On, ToReal};
use crate::face::{conv, errors};
use mpicr_virtid::{RequestRecipe, VFile};
use std::os::raw::{c_char, c_int, c_void};

pub use crate::face::api::errhandler::file_null_errhandler;

/// Enters the gate for a collective on `fh`, counted on the file's communicator for the
/// checkpoint's alignment (nothing is counted for a handle that is not an open file's: the
/// library reports it).
pub fn begin_file_collective(fh: MPI_File) -> gate::Guard {
    begin_collective(conv::comm_abi(file::comm_of(conv::vfile(fh)))).0
}

pub unsafe fn MPI_File_open(comm: MPI_Comm, filename: *const c_char, amode: c_int, info: MPI_Info, fh: *mut MPI_File) -> c_int {
    let (g, seq) = begin_collective(comm);
    // Failures go to the handler of MPI_FILE_NULL.
    call::run_in(g, "MPI_File_open", On::File(MPI_FILE_NULL), || {
        let (c, i) = (call::Comm(comm).to_real()?, call::Info(info).to_real()?);
        // The file's own communicator (see `core::kinds::file`), collective like the open.
        let mut dup = MPI_COMM_NULL;
        call::ok(real!(MPI_Comm_dup(c, &mut dup)))?;
        let mut r = MPI_FILE_NULL;
        let rc = real!(MPI_File_open(dup, filename, file::real_amode(amode), i, &mut r));
        if rc != MPI_SUCCESS {
            // The communicator duplicated above, freed once.
            let _ = real!(MPI_Comm_free(&mut dup));
            return Err(rc);
        }
        let _ = real!(MPI_File_set_errhandler(r, MPI_ERRORS_RETURN));
        let own = crate::face::api::comm::register_derived(dup, "MPI_File_open", comm, seq);
        let parent = conv::comm_index(comm).and_then(|p| OBJ.comms.with(p, |c| c.restorable)).unwrap_or(true);
        let gid = conv::comm_index(own)
            .and_then(|o| {
                OBJ.comms.with(o, |c| {
                    c.restorable = parent;
                    c.recipe.gid
                })
            })
            .unwrap_or(0);
        // SAFETY: MPI_File_open succeeded, so `filename` is the program's NUL-terminated name.
        let name = unsafe { crate::lower::cstr(filename) };
        let entry = FileEntry::new(conv::verrhandler(file_null_errhandler()), &name, amode, conv::vcomm(own), gid, crate::core::kinds::info::entries(i));
        let v = match file::register(crate::lower::handles::RealFile(r), entry) {
            Ok(v) => conv::file_abi(v),
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
        return errors::raise_file(MPI_FILE_NULL, MPI_ERR_FILE, "MPI_File_close");
    }
    // SAFETY: `fh` points to the caller's handle, readable and writable (MPI's contract of this
    // call).
    let v = unsafe { *fh };
    call::run_in(begin_file_collective(v), "MPI_File_close", On::File(v), || {
        let mut r = call::File(v).to_real()?;
        call::ok(real!(MPI_File_close(&mut r)))?;
        let entry = file::forget(conv::vfile(v));
        // SAFETY: as above.
        unsafe { *fh = MPI_FILE_NULL };
        entry.map_or(Ok(()), |e| call::ok(file::after_close(&e)))
    })
}

/// The program's access mode: the real file lacks MPI_MODE_DELETE_ON_CLOSE, and after a
/// renewal MPI_MODE_CREATE and MPI_MODE_EXCL.
pub unsafe fn MPI_File_get_amode(fh: MPI_File, amode: *mut c_int) -> c_int {
    call::run("MPI_File_get_amode", On::File(fh), || {
        let mut a = 0;
        call::ok(real!(MPI_File_get_amode(call::File(fh).to_real()?, &mut a)))?;
        if let Some(m) = file::with(conv::vfile(fh), |e| e.amode) {
            a = m;
        }
        // SAFETY: `amode` is the caller's out-pointer, null or valid for a write as MPI requires
        // (this function's safety contract).
        unsafe { put(amode, a) };
        Ok(())
    })
}

pub unsafe fn MPI_File_set_view(fh: MPI_File, disp: MPI_Offset, etype: MPI_Datatype, filetype: MPI_Datatype, datarep: *const c_char, info: MPI_Info) -> c_int {
    call::run_in(begin_file_collective(fh), "MPI_File_set_view", On::File(fh), || {
        let (f, e, t, i) = (call::File(fh).to_real()?, call::Datatype(etype).to_real()?, call::Datatype(filetype).to_real()?, call::Info(info).to_real()?);
        // The real file of a sequential one is not sequential: the displacement is resolved here.
        let disp = sequential::view_disp(fh, f, disp)?;
        call::ok(real!(MPI_File_set_view(f, disp, e, t, datarep, i)))?;
        let v = conv::vfile(fh);
        if v.index().is_some() {
            // SAFETY: the call succeeded, so `datarep` is a NUL-terminated string.
            let datarep = unsafe { crate::lower::cstr(datarep) };
            let view = View { disp, etype: typeref(etype), filetype: typeref(filetype), datarep };
            let hints = crate::core::kinds::info::entries(i);
            file::with(v, |x| {
                x.view = Some(view);
                file::merge_hints(&mut x.later_hints, hints);
            });
        }
        Ok(())
    })
}

pub unsafe fn MPI_File_set_info(fh: MPI_File, info: MPI_Info) -> c_int {
    call::run_in(begin_file_collective(fh), "MPI_File_set_info", On::File(fh), || {
        let (f, i) = (call::File(fh).to_real()?, call::Info(info).to_real()?);
        call::ok(real!(MPI_File_set_info(f, i)))?;
        let hints = crate::core::kinds::info::entries(i);
        file::with(conv::vfile(fh), |x| file::merge_hints(&mut x.later_hints, hints));
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
            put(etype, conv::datatype_of_real(e));
            put(filetype, conv::datatype_of_real(f));
        }
        Ok(())
    })
}

/// A file's Fortran handle: its table index plus one (0 is MPI_FILE_NULL's).
pub unsafe fn MPI_File_c2f(file: MPI_File) -> MPI_Fint {
    conv::vfile(file).index().map_or(0, |i| i as MPI_Fint + 1)
}

pub unsafe fn MPI_File_f2c(file: MPI_Fint) -> MPI_File {
    if file <= 0 {
        return MPI_FILE_NULL;
    }
    conv::file_abi(VFile::virtual_at(file as u32 - 1))
}

/// Nonblocking I/O: a request completed in the drain of a checkpoint, in start order (see
/// `core::kinds::request::is_file_io`); the collective ones (`coll`) are counted on the file's
/// communicator.
macro_rules! file_io {
    ($name:ident, $coll:literal, $count:ty, $bt:ty, $access:tt $(, $off:ident)?) => {
        pub unsafe fn $name(fh: MPI_File, $($off: MPI_Offset,)? buf: $bt, count: $count, datatype: MPI_Datatype, request: *mut MPI_Request) -> c_int {
            let g = if $coll { begin_file_collective(fh) } else { gate::enter() };
            call::run_in(g, stringify!($name), On::File(fh), || {
                let (f, t) = (call::File(fh).to_real()?, call::Datatype(datatype).to_real()?);
                file_io!(@check $access, fh, f, count, t $(, $off)?);
                let mut r = MPI_REQUEST_NULL;
                call::ok(real!($name(f, $($off,)? buf, count, t, &mut r)))?;
                let recipe = RequestRecipe::FileIo { function: stringify!($name).into(), seq: crate::core::kinds::request::next_file_io() };
                let v = register_request(r, recipe, MPI_COMM_NULL, false);
                // SAFETY: `request` is the caller's out-pointer, null or valid for a write as MPI
                // requires (this function's safety contract).
                unsafe { put(request, v) };
                Ok(())
            })
        }
    };
    // Through the shared file pointer: allowed on a sequential file.
    (@check shared, $fh:ident, $f:ident, $count:ident, $t:ident) => {};
    // Through the individual file pointer or at an explicit offset: refused on a sequential one.
    (@check $write:literal, $fh:ident, $f:ident, $count:ident, $t:ident $(, $off:ident)?) => {
        sequential::data($fh, $f, file_io!(@offset $($off)?), $count, $t, $write, Zero::Refused)?
    };
    (@offset $off:ident) => { Some($off) };
    (@offset) => { None };
}

file_io!(MPI_File_iread, false, c_int, *mut c_void, false);
file_io!(MPI_File_iread_c, false, MPI_Count, *mut c_void, false);
file_io!(MPI_File_iread_all, true, c_int, *mut c_void, false);
file_io!(MPI_File_iread_all_c, true, MPI_Count, *mut c_void, false);
file_io!(MPI_File_iread_shared, false, c_int, *mut c_void, shared);
file_io!(MPI_File_iread_shared_c, false, MPI_Count, *mut c_void, shared);
file_io!(MPI_File_iread_at, false, c_int, *mut c_void, false, offset);
file_io!(MPI_File_iread_at_c, false, MPI_Count, *mut c_void, false, offset);
file_io!(MPI_File_iread_at_all, true, c_int, *mut c_void, false, offset);
file_io!(MPI_File_iread_at_all_c, true, MPI_Count, *mut c_void, false, offset);
file_io!(MPI_File_iwrite, false, c_int, *const c_void, true);
file_io!(MPI_File_iwrite_c, false, MPI_Count, *const c_void, true);
file_io!(MPI_File_iwrite_all, true, c_int, *const c_void, true);
file_io!(MPI_File_iwrite_all_c, true, MPI_Count, *const c_void, true);
file_io!(MPI_File_iwrite_shared, false, c_int, *const c_void, shared);
file_io!(MPI_File_iwrite_shared_c, false, MPI_Count, *const c_void, shared);
file_io!(MPI_File_iwrite_at, false, c_int, *const c_void, true, offset);
file_io!(MPI_File_iwrite_at_c, false, MPI_Count, *const c_void, true, offset);
file_io!(MPI_File_iwrite_at_all, true, c_int, *const c_void, true, offset);
file_io!(MPI_File_iwrite_at_all_c, true, MPI_Count, *const c_void, true, offset);

/// Split collectives: `*_begin` does the whole operation through the library's blocking
/// collective (as ROMIO itself does) and keeps its status in the file's entry for `*_end`, so
/// that nothing of it is left in the library at a checkpoint.
macro_rules! split_begin {
    ($name:ident, $blocking:ident, $count:ty, $bt:ty, $access:tt $(, $off:ident)?) => {
        pub unsafe fn $name(fh: MPI_File, $($off: MPI_Offset,)? buf: $bt, count: $count, datatype: MPI_Datatype) -> c_int {
            call::run_in(begin_file_collective(fh), stringify!($name), On::File(fh), || {
                let (f, t) = (call::File(fh).to_real()?, call::Datatype(datatype).to_real()?);
                let v = conv::vfile(fh);
                // ROMIO's order: a sequential file's refusal, then another split collective's.
                file_io!(@check $access, fh, f, count, t $(, $off)?);
                // One split collective at a time on a file (ROMIO's class for another one).
                if file::with(v, |e| e.split.is_some()).unwrap_or(false) {
                    return Err(MPI_ERR_IO);
                }
                let mut st = MPI_Status::default();
                call::ok(real!($blocking(f, $($off,)? buf, count, t, &mut st)))?;
                file::with(v, |e| e.split = Some(st.as_array()));
                Ok(())
            })
        }
    };
}

split_begin!(MPI_File_read_all_begin, MPI_File_read_all, c_int, *mut c_void, false);
split_begin!(MPI_File_read_all_begin_c, MPI_File_read_all_c, MPI_Count, *mut c_void, false);
split_begin!(MPI_File_write_all_begin, MPI_File_write_all, c_int, *const c_void, true);
split_begin!(MPI_File_write_all_begin_c, MPI_File_write_all_c, MPI_Count, *const c_void, true);
split_begin!(MPI_File_read_at_all_begin, MPI_File_read_at_all, c_int, *mut c_void, false, offset);
split_begin!(MPI_File_read_at_all_begin_c, MPI_File_read_at_all_c, MPI_Count, *mut c_void, false, offset);
split_begin!(MPI_File_write_at_all_begin, MPI_File_write_at_all, c_int, *const c_void, true, offset);
split_begin!(MPI_File_write_at_all_begin_c, MPI_File_write_at_all_c, MPI_Count, *const c_void, true, offset);
split_begin!(MPI_File_read_ordered_begin, MPI_File_read_ordered, c_int, *mut c_void, shared);
split_begin!(MPI_File_read_ordered_begin_c, MPI_File_read_ordered_c, MPI_Count, *mut c_void, shared);
split_begin!(MPI_File_write_ordered_begin, MPI_File_write_ordered, c_int, *const c_void, shared);
split_begin!(MPI_File_write_ordered_begin_c, MPI_File_write_ordered_c, MPI_Count, *const c_void, shared);

/// `*_end`: the status `*_begin` kept (the buffer is the begin's, already read or written).
macro_rules! split_end {
    ($name:ident, $bt:ty) => {
        pub unsafe fn $name(fh: MPI_File, _buf: $bt, status: *mut MPI_Status) -> c_int {
            call::run(stringify!($name), On::File(fh), || {
                // Not an open file: MPI_ERR_FILE; no split collective begun on it: ROMIO's class.
                let st = file::with(conv::vfile(fh), |e| e.split.take()).ok_or(MPI_ERR_FILE)?.ok_or(MPI_ERR_IO)?;
                // SAFETY: `status` is the caller's: MPI_STATUS_IGNORE or valid for a write (this
                // function's safety contract).
                unsafe { put_status(status, &MPI_Status::from_array(st)) };
                Ok(())
            })
        }
    };
}

split_end!(MPI_File_read_all_end, *mut c_void);
split_end!(MPI_File_write_all_end, *const c_void);
split_end!(MPI_File_read_at_all_end, *mut c_void);
split_end!(MPI_File_write_at_all_end, *const c_void);
split_end!(MPI_File_read_ordered_end, *mut c_void);
split_end!(MPI_File_write_ordered_end, *const c_void);

pub unsafe fn MPI_File_toint(file: MPI_File) -> c_int {
    // SAFETY: the handle is only decoded, never dereferenced.
    unsafe { MPI_File_c2f(file) }
}

pub unsafe fn MPI_File_fromint(file: c_int) -> MPI_File {
    // SAFETY: an integer made into a handle, nothing dereferenced.
    unsafe { MPI_File_f2c(file) }
}
