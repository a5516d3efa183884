//! Writes an ELF version script so libmpicr.so exports exactly the MPICH ABI (every `MPI_*` and
//! `PMPI_*` name of the signature table, and its data symbols), the PMI entry points and mpicr's
//! own C API.
include!("../build/version_script.rs");

fn main() {
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    write_version_script(&manifest.join("../../shim/api/exports.txt"), "shim/api/exports.txt", &["mpicr_*", "PMI_*", "PMI2_*"]);
}
