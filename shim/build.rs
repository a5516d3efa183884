//! Builds the lower half's anchor (anchor/anchor.c), which the shim carries inside itself. The
//! exported symbols and their version scripts belong to the face libraries (faces/mpich,
//! faces/ompi).
use std::{env, path::PathBuf, process::Command};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    build_anchor(&manifest, &out_dir);
}

/// The anchor is a C shared object of its own: it is loaded into the MPI library's namespace,
/// where it must not bring Rust's runtime. `-fno-builtin` keeps the compiler from turning the
/// anchor's malloc+memset into a call to calloc (the anchor's own calloc: endless recursion).
fn build_anchor(manifest: &std::path::Path, out_dir: &std::path::Path) {
    let src = manifest.join("anchor/anchor.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let so = out_dir.join("libmpicr_anchor.so");
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-g", "-fno-builtin", "-fvisibility=hidden", "-Wall", "-Werror", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler `{cc}` for {}: {e}", src.display()));
    assert!(status.success(), "building {} with `{cc}` failed", src.display());
}
