//! Writes an ELF version script so libmpicr.so exports exactly the MPI ABI (every `MPI_*` and
//! `PMPI_*` name of the signature table), the PMI entry points and mpicr's own C API; and builds
//! the lower half's anchor (anchor/anchor.c), which libmpicr.so carries inside itself.
use std::{env, fs, path::PathBuf, process::Command};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let names = manifest.join("api/exports.txt");
    println!("cargo:rerun-if-changed={}", names.display());
    let list = fs::read_to_string(&names).expect("shim/api/exports.txt (run `make gen`)");
    let mut script = String::from("{\n  global:\n");
    for n in list.lines().filter(|l| !l.is_empty()) {
        script.push_str(&format!("    {n};\n"));
    }
    script.push_str("    mpicr_*;\n    PMI_*;\n    PMI2_*;\n  local:\n    *;\n};\n");
    let out = out_dir.join("exports.map");
    fs::write(&out, script).unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", out.display());
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
