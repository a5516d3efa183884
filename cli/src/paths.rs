//! Where mpicr finds its companions.

use anyhow::{bail, Result};
use std::path::PathBuf;

/// The directory holding the running mpicr binary.
pub fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe().ok()?.canonicalize().ok()?.parent().map(PathBuf::from)
}

/// `$MPICR_SHIM`, else `libmpicr.so` next to the mpicr binary. `MPICR_SHIM=none`: no preload,
/// the program carries the agent itself (linked with libmpicr, or a test agent); `Ok(None)`.
pub fn shim() -> Result<Option<PathBuf>> {
    if let Some(p) = std::env::var_os("MPICR_SHIM").filter(|v| !v.is_empty()) {
        if p == "none" {
            return Ok(None);
        }
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("MPICR_SHIM names {}, which does not exist", p.display());
        }
        return Ok(Some(p.canonicalize().unwrap_or(p)));
    }
    let Some(dir) = exe_dir() else { bail!("cannot locate the mpicr binary to find libmpicr.so next to it; set MPICR_SHIM") };
    let p = dir.join("libmpicr.so");
    if !p.is_file() {
        bail!(
            "libmpicr.so not found next to mpicr ({}): build it (cargo build --release -p mpicr-face-mpich), set MPICR_SHIM, or run with --no-shim",
            p.display()
        );
    }
    Ok(Some(p))
}
