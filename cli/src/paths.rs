//! Where mpicr finds its companions.

use crate::mpilib::Face;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The running mpicr binary, resolved once (`main` asks first): a rebuild or `make install`
/// while a job runs replaces the file, and the kernel then names the running one
/// "PATH (deleted)", from which neither the CRIU beside it nor the binary itself (CRIU's action
/// script) could be found again.
pub fn exe() -> Option<&'static Path> {
    static EXE: OnceLock<Option<PathBuf>> = OnceLock::new();
    EXE.get_or_init(|| std::env::current_exe().ok()?.canonicalize().ok()).as_deref()
}

/// This binary, to run again (the PID namespace's init, CRIU's action script, a restore's
/// watcher), when it can be named and run (a rebuild in its place is run instead).
pub fn runnable_exe() -> Option<PathBuf> {
    exe().filter(|p| crate::sys::is_executable(p)).map(Path::to_path_buf)
}

/// The directory holding the running mpicr binary.
pub fn exe_dir() -> Option<PathBuf> {
    exe()?.parent().map(PathBuf::from)
}

/// Where mpicr's libraries are, relative to its binary: next to it (a build tree,
/// `target/release`), then `../lib` (an install prefix: `PREFIX/bin/mpicr`,
/// `PREFIX/lib/libmpicr.so`).
pub fn lib_dirs() -> Vec<PathBuf> {
    exe_dir().map(|d| vec![d.clone(), d.join("../lib")]).unwrap_or_default()
}

/// mpicr's CRIU in an install prefix: `PREFIX/libexec/mpicr/criu` (`make install` puts it
/// there, with the libraries it runs on).
pub fn installed_criu() -> Option<PathBuf> {
    exe_dir().map(|d| d.join("../libexec/mpicr/criu"))
}

/// mpicr's write-tracking CRIU (`mpicr run --incremental` without soft-dirty bits) in an
/// install prefix: `PREFIX/libexec/mpicr/criu-wt`, when `make install` put one there.
pub fn installed_criu_wt() -> Option<PathBuf> {
    exe_dir().map(|d| d.join("../libexec/mpicr/criu-wt")).filter(|p| crate::sys::is_executable(p))
}

/// An executable `.deps/REL` of the source tree the mpicr binary was built in
/// (`target/release/../../.deps/REL`, or one level further up for a worktree's target), as
/// `make deps` installs the private CRIUs.
pub fn source_tree_dep(rel: &str) -> Option<PathBuf> {
    let dir = exe_dir()?;
    ["../../.deps", "../../../.deps"].iter().map(|d| dir.join(d).join(rel)).find(|c| crate::sys::is_executable(c))
}

/// The libraries mpicr preloads (faces), by file name.
pub const FACE_LIBS: [&str; 3] = ["libmpicr.so", "libmpicr_ompi.so", "libmpicr_abi.so"];

/// Whether `program` is linked to a face library itself (built by `mpicrcc`, or with
/// `-lmpicr`): then it needs no preload, and gets none.
pub fn linked_face(program: &std::path::Path) -> Option<String> {
    let d = mpicr_elf::read_file(program).ok()?;
    d.needed.into_iter().find(|n| FACE_LIBS.contains(&n.as_str()))
}

/// The face library for a program of `face`: `$MPICR_SHIM`, else `libmpicr.so` next to the
/// mpicr binary; for an Open MPI program `libmpicr_ompi.so`, for a standard-ABI program
/// `libmpicr_abi.so`, in the same directory as that.
/// `MPICR_SHIM=none`: no preload, the program carries the agent itself (linked with libmpicr,
/// or a test agent); `Ok(None)`.
pub fn shim(face: Face) -> Result<Option<PathBuf>> {
    let Some(name) = face.shim_name() else { bail!("mpicr has no face for programs of {} yet", face.name()) };
    let package = match face {
        Face::OpenMpi => "mpicr-face-ompi",
        Face::StandardAbi => "mpicr-face-abi",
        Face::Mpich => "mpicr-face-mpich",
    };
    if let Some(p) = std::env::var_os("MPICR_SHIM").filter(|v| !v.is_empty()) {
        if p == "none" {
            return Ok(None);
        }
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("MPICR_SHIM names {}, which does not exist", p.display());
        }
        let p = p.canonicalize().unwrap_or(p);
        if face == Face::Mpich {
            return Ok(Some(p));
        }
        let q = p.with_file_name(name);
        if !q.is_file() {
            bail!("{name} not found next to MPICR_SHIM ({}): the program speaks {}; build it (cargo build --release -p {package})", q.display(), face.name());
        }
        return Ok(Some(q));
    }
    let dirs = lib_dirs();
    if dirs.is_empty() {
        bail!("cannot locate the mpicr binary to find {name} next to it; set MPICR_SHIM");
    }
    match dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
        Some(p) => Ok(Some(p.canonicalize().unwrap_or(p))),
        None => bail!(
            "{name} not found next to mpicr nor in ../lib ({}): build it (cargo build --release -p {package}), set MPICR_SHIM, or run with --no-shim",
            dirs[0].display()
        ),
    }
}
