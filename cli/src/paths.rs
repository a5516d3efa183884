//! Where mpicr finds its companions.

use crate::mpilib::Face;
use anyhow::{bail, Result};
use std::path::PathBuf;

/// The directory holding the running mpicr binary.
pub fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe().ok()?.canonicalize().ok()?.parent().map(PathBuf::from)
}

/// The face library for a program of `face`: `$MPICR_SHIM`, else `libmpicr.so` next to the
/// mpicr binary; for an Open MPI program `libmpicr_ompi.so` in the same directory as that.
/// `MPICR_SHIM=none`: no preload, the program carries the agent itself (linked with libmpicr,
/// or a test agent); `Ok(None)`.
pub fn shim(face: Face) -> Result<Option<PathBuf>> {
    let Some(name) = face.shim_name() else { bail!("mpicr has no face for programs of {} yet", face.name()) };
    let package = if face == Face::OpenMpi { "mpicr-face-ompi" } else { "mpicr-face-mpich" };
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
    let Some(dir) = exe_dir() else { bail!("cannot locate the mpicr binary to find {name} next to it; set MPICR_SHIM") };
    let p = dir.join(name);
    if !p.is_file() {
        bail!(
            "{name} not found next to mpicr ({}): build it (cargo build --release -p {package}), set MPICR_SHIM, or run with --no-shim",
            p.display()
        );
    }
    Ok(Some(p))
}
