//! Writes an ELF version script so libmpicr.so exports exactly the MPICH ABI (every `MPI_*` and
//! `PMPI_*` name of the signature table, and its data symbols), the PMI entry points and mpicr's
//! own C API.
use std::{env, fs, path::PathBuf};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let names = manifest.join("../../shim/api/exports.txt");
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
}
