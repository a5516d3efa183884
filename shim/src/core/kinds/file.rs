//! Files: what a checkpoint needs to open every MPI file again on a renewed library, with the
//! same view and file pointers.
//!
//! - `MPI_File_open` records the name (made absolute), the access mode and the hints, and opens
//!   the real file on a private duplicate of the program's communicator, registered among the
//!   communicators (`comm`): the file's collectives are counted on it for the checkpoint's
//!   alignment, the communicator kind rebuilds it, and the file's group is there even after the
//!   program freed its own communicator. The real file is opened without
//!   `MPI_MODE_DELETE_ON_CLOSE` (a release closes it): the shim deletes the file at the
//!   program's `MPI_File_close` ([`after_close`]). Nor is it opened with `MPI_MODE_SEQUENTIAL`
//!   ([`real_amode`]): the shared file pointer of a sequential file is carried like any other.
//! - `MPI_File_set_view` and `MPI_File_set_info` record the view (datatype recipes) and the
//!   hints; split collectives are carried by the shim itself (`split`: the library finished the
//!   operation at `*_begin`, as ROMIO does), and nonblocking I/O completes in the drain
//!   (`kinds::request`).
//! - At a checkpoint, after the drain ([`Renew::snapshot`]): `MPI_File_sync`, then the
//!   individual and shared file pointers, the atomicity and the size are read back; the
//!   release closes the real file ([`Renew::free_real`]).
//! - At the renewal the file must still be on disk, at least as large as at the checkpoint
//!   ([`Renew::before_renewal`]: CRIU saves no regular file's bytes); it is opened again without
//!   `MPI_MODE_CREATE`/`MPI_MODE_EXCL`, with the same hints, atomicity and view, and both file
//!   pointers are put back ([`Renew::rebuild`]).
//!
//! Files are walked in the order of their communicators' job-wide ids, the same on every rank:
//! sync, close and open are collective.

use super::datatype::Built;
use super::{check, info, RebuildError, Renewable};
use crate::core::handles;
use crate::core::state::OBJ;
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::object::Kind;
use crate::lower::handles::RealFile;
use mpicr_virtid::table::Full;
use mpicr_virtid::{TypeRef, VComm, VErrhandler, VFile};
use serde::{Deserialize, Serialize};
use std::os::raw::c_int;

/// A file view (`MPI_File_set_view`), its datatypes as recipes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct View {
    pub disp: i64,
    pub etype: TypeRef,
    pub filetype: TypeRef,
    pub datarep: String,
}

/// What a checkpoint read back from the library, after `MPI_File_sync`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Saved {
    pub atomic: bool,
    /// The individual file pointer, in etypes relative to the view.
    pub position: i64,
    /// The shared file pointer (`None` where the library could not read it, e.g. a file in a
    /// directory where ROMIO cannot create its shared-pointer file).
    pub shared: Option<i64>,
    /// Bytes in the file.
    pub size: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileEntry {
    pub errhandler: VErrhandler,
    /// The name as `MPI_File_open` got it, made absolute (a ROMIO prefix such as `ufs:` kept).
    pub name: String,
    /// The access mode the program asked for.
    pub amode: c_int,
    /// The private communicator the real file is opened on (virtual handle), and its job-wide id.
    pub comm: VComm,
    pub gid: u64,
    /// Hints given at the open, and later (`MPI_File_set_info`, `MPI_File_set_view`).
    pub open_hints: Vec<(String, String)>,
    pub later_hints: Vec<(String, String)>,
    pub view: Option<View>,
    /// A split collective begun and not ended: the status its `*_end` reports.
    pub split: Option<[i32; 5]>,
    pub saved: Option<Saved>,
}

impl FileEntry {
    pub fn new(errhandler: VErrhandler, name: &str, amode: c_int, comm: VComm, gid: u64, open_hints: Vec<(String, String)>) -> Self {
        FileEntry { errhandler, name: absolute(name), amode, comm, gid, open_hints, later_hints: Vec::new(), view: None, split: None, saved: None }
    }

    /// The file's path, without ROMIO's file system prefix.
    pub fn path(&self) -> &str {
        split_prefix(&self.name).1
    }
}

/// ROMIO's file system prefix (`ufs:`, `nfs:`, `lustre:`, ...: what comes before a colon that
/// no slash precedes) and the rest of a file name.
fn split_prefix(name: &str) -> (&str, &str) {
    match name.find(':') {
        Some(i) if i > 0 && !name[..i].contains('/') => name.split_at(i + 1),
        _ => ("", name),
    }
}

/// A file name made absolute against the working directory (the program may change it later).
fn absolute(name: &str) -> String {
    let (prefix, path) = split_prefix(name);
    if path.starts_with('/') {
        return name.to_string();
    }
    match std::env::current_dir() {
        Ok(cwd) => format!("{prefix}{}", cwd.join(path).display()),
        Err(_) => name.to_string(),
    }
}

/// The access mode the real file is opened with at the program's `MPI_File_open`: the shim
/// deletes on close itself, and a sequential file is opened as an ordinary one, whose shared
/// file pointer a checkpoint can read and a renewal set (`face::api::file_sequential` keeps
/// the program's view of a sequential file). `MPI_MODE_SEQUENTIAL` with `MPI_MODE_RDWR` is
/// passed on, for the library to refuse.
pub fn real_amode(amode: c_int) -> c_int {
    let seq = if amode & MPI_MODE_RDWR == 0 { MPI_MODE_SEQUENTIAL } else { 0 };
    amode & !(MPI_MODE_DELETE_ON_CLOSE | seq)
}

/// ... and when it is opened again: a renewal must neither truncate nor re-create the file.
fn reopen_amode(amode: c_int) -> c_int {
    real_amode(amode) & !(MPI_MODE_CREATE | MPI_MODE_EXCL)
}

/// Hints given later override earlier ones of the same key.
pub fn merge_hints(into: &mut Vec<(String, String)>, new: Vec<(String, String)>) {
    for (k, v) in new {
        match into.iter_mut().find(|(key, _)| *key == k) {
            Some(e) => e.1 = v,
            None => into.push((k, v)),
        }
    }
}

/// Registers a file the library opened. `Err` when the table is full.
pub fn register(real: RealFile, entry: FileEntry) -> Result<VFile, Full> {
    OBJ.files.insert(real, entry).map(VFile::virtual_at)
}

/// Runs `f` on the entry of an open file (`None` for a foreign, closed or null one).
pub fn with<T>(v: VFile, f: impl FnOnce(&mut FileEntry) -> T) -> Option<T> {
    OBJ.files.with(v.index()?, f)
}

/// Forgets a file the program closed.
pub fn forget(v: VFile) -> Option<FileEntry> {
    OBJ.files.remove(v.index()?)
}

/// The communicator a file's collectives are counted on (`NULL` for a handle that is not an
/// open file's).
pub fn comm_of(v: VFile) -> VComm {
    with(v, |e| e.comm).unwrap_or(VComm::NULL)
}

/// After the program's `MPI_File_close` closed the real file: deletes the file if it was opened
/// with `MPI_MODE_DELETE_ON_CLOSE` (the first rank, as ROMIO does), waits for every rank (so
/// that no rank still has the file open when another is past its close: a checkpoint then finds
/// it open everywhere or nowhere), and frees the private communicator.
pub fn after_close(e: &FileEntry) -> c_int {
    let Some(idx) = handles::comm_index(e.comm) else { return MPI_SUCCESS };
    // The file's communicator, made at its open.
    let mut comm = handles::comm(e.comm).raw();
    let mut rank = -1;
    calls::comm::comm_rank(comm, &mut rank);
    if e.amode & MPI_MODE_DELETE_ON_CLOSE != 0 && rank == 0 {
        if let Ok(name) = std::ffi::CString::new(e.name.as_str()) {
            // As ROMIO's close: a failure to delete is not the close's.
            calls::file::delete(&name, MPI_INFO_NULL);
        }
    }
    let rc = calls::comm::barrier(comm).unwrap_or(MPI_ERR_OTHER);
    calls::object::free(Kind::Comm, &mut comm);
    OBJ.comms.remove(idx);
    rc
}

/// Open files in the order every rank walks them (their communicators' job-wide ids).
fn ordered() -> Vec<(u32, RealFile, FileEntry)> {
    let mut files = OBJ.files.snapshot();
    files.sort_by_key(|(_, _, e)| e.gid);
    files
}

const KNOWN_DATAREPS: [&str; 3] = ["native", "internal", "external32"];

/// The file kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    fn refusal(&self) -> Option<String> {
        let files = OBJ.files.snapshot();
        let (_, _, first) = files.first()?;
        // ROMIO's one-time setup hangs off MPI_COMM_SELF of the world model: that model's
        // MPI_Finalize (the first release) frees its private reduction operation but not the
        // hidden flag that says it is set up, so the session's MPI_File_open aborts in an
        // MPI_Allreduce with MPI_OP_NULL (measured, MPICH 5.0.2).
        if crate::core::renew::strategy() == crate::core::renew::Strategy::Sessions {
            return Some(format!(
                "an MPI file is open ({}): it cannot be checkpointed with MPICR_RENEW=sessions (that renewal keeps the library loaded, and ROMIO, set up once on MPI_Init's world model, cannot open a file again after that model's MPI_Finalize); use the default renewal (namespace)",
                first.name
            ));
        }
        for (_, _, e) in &files {
            // The program's own are registered again before files are reopened (`library`);
            // ROMIO (MPICH, Intel MPI) refuses views in them anyway.
            if let Some(v) = e.view.as_ref().filter(|v| !KNOWN_DATAREPS.contains(&v.datarep.as_str()) && !super::library::datarep_registered(&v.datarep)) {
                return Some(format!(
                    "the MPI file {} cannot be checkpointed: its view is in the data representation {}, which mpicr does not know",
                    e.name, v.datarep
                ));
            }
        }
        None
    }

    /// Every rank has drained (nonblocking I/O completed): the file's bytes go to disk and its
    /// file pointers, atomicity and size are read back.
    fn snapshot(&self) {
        let (t, files) = (std::time::Instant::now(), ordered());
        let n = files.len();
        for (idx, real, e) in files {
            let r = real;
            let mut s = Saved::default();
            let (mut atomic, mut shared) = (0, 0);
            // Collective, in the same order on every rank; erroneous on a read-only file.
            if e.amode & MPI_MODE_RDONLY == 0 {
                calls::file::sync(r);
            }
            calls::file::position(r, &mut s.position);
            if calls::file::position_shared(r, &mut shared).unwrap_or(MPI_ERR_OTHER) == MPI_SUCCESS {
                s.shared = Some(shared);
            }
            calls::file::atomicity(r, &mut atomic);
            calls::file::size(r, &mut s.size);
            s.atomic = atomic != 0;
            OBJ.files.with(idx, |x| x.saved = Some(s));
        }
        if n > 0 {
            tracing::debug!(target: "renew", files = n, us = t.elapsed().as_micros() as u64, "synced the MPI files and read back their pointers");
        }
    }

    /// Closes every real file (collective, in the same order on every rank).
    fn free_real(&self) {
        let (t, files) = (std::time::Instant::now(), ordered());
        let n = files.len();
        for (idx, real, _) in files {
            let mut r = real;
            if r.raw().is_null() {
                continue;
            }
            // A live real file of the current generation, closed once.
            calls::file::close(&mut r);
            OBJ.files.set_real(idx, RealFile(std::ptr::null_mut()));
        }
        if n > 0 {
            tracing::debug!(target: "renew", files = n, us = t.elapsed().as_micros() as u64, "closed the MPI files");
        }
    }

    /// Every file is still on disk, at least as large as at the checkpoint.
    fn before_renewal(&self) -> Result<(), RebuildError> {
        for (_, _, e) in ordered() {
            let (Some(s), path) = (&e.saved, e.path()) else { continue };
            // Only paths of the local file system can be looked at here.
            if !path.starts_with('/') {
                continue;
            }
            match std::fs::metadata(path) {
                Err(err) => return Err(RebuildError::FileGone { path: path.to_string(), size: s.size, err }),
                Ok(m) if (m.len() as i64) < s.size => return Err(RebuildError::FileShrunk { path: path.to_string(), now: m.len(), then: s.size }),
                Ok(_) => {}
            }
        }
        Ok(())
    }

    fn rebuild(&self) -> Result<(), RebuildError> {
        let (t, files) = (std::time::Instant::now(), ordered());
        let n = files.len();
        for (idx, _, e) in files {
            let name = std::ffi::CString::new(e.name.as_str()).map_err(|_| RebuildError::FileNameNul(e.name.clone()))?;
            let hints = info::build(&e.open_hints)?;
            let mut r = RealFile(std::ptr::null_mut());
            // On the communicator rebuilt by the communicator kind.
            let rc = calls::file::open(handles::comm(e.comm).raw(), &name, reopen_amode(e.amode), hints, &mut r).unwrap_or(MPI_ERR_OTHER);
            info::free(hints);
            check(rc, &format!("opening the MPI file {} again", e.name))?;
            OBJ.files.set_real(idx, r);
            restore(r, &e).map_err(|why| RebuildError::File { name: e.name.clone(), source: Box::new(why) })?;
        }
        if n > 0 {
            tracing::debug!(target: "renew", files = n, us = t.elapsed().as_micros() as u64, "opened the MPI files again");
        }
        Ok(())
    }
}

/// Gives a reopened real file what the program had set: atomicity, hints, view, file pointers.
fn restore(r: RealFile, e: &FileEntry) -> Result<(), RebuildError> {
    let s = e.saved.clone().unwrap_or_default();
    let built = |t: &TypeRef| Built::of(t).map_err(|rc| RebuildError::mpi("rebuilding a datatype of its view", rc));
    // `r` is the live real file just opened; the info objects and datatypes are live until
    // freed after their use.
    calls::file::set_errhandler(r, MPI_ERRORS_RETURN);
    if s.atomic {
        check(calls::file::set_atomicity(r, 1).unwrap_or(MPI_ERR_OTHER), "MPI_File_set_atomicity")?;
    }
    if !e.later_hints.is_empty() {
        let hints = info::build(&e.later_hints)?;
        let rc = calls::file::set_info(r, hints).unwrap_or(MPI_ERR_OTHER);
        info::free(hints);
        check(rc, "MPI_File_set_info")?;
    }
    if let Some(v) = &e.view {
        let (et, ft) = (built(&v.etype)?, built(&v.filetype)?);
        let rep = std::ffi::CString::new(v.datarep.as_str()).unwrap_or_default();
        let rc = calls::file::set_view(r, v.disp, et.real, ft.real, &rep, MPI_INFO_NULL).unwrap_or(MPI_ERR_OTHER);
        check(rc, "MPI_File_set_view")?;
    }
    check(calls::file::seek(r, s.position, MPI_SEEK_SET).unwrap_or(MPI_ERR_OTHER), "MPI_File_seek")?;
    // Collective; read alike on every rank after the drain, so all call it or none do.
    if let Some(shared) = s.shared {
        check(calls::file::seek_shared(r, shared, MPI_SEEK_SET).unwrap_or(MPI_ERR_OTHER), "MPI_File_seek_shared")?;
    }
    Ok(())
}
