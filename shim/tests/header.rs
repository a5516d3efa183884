//! The checked-in C header must be what cbindgen makes of shim/src/face/capi.rs.
use std::path::PathBuf;

#[test]
fn header_is_current() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new().with_config(config).with_src(crate_dir.join("src/face/capi.rs")).generate().expect("cbindgen").write(&mut generated);
    let path = crate_dir.join("../include/mpicr.h");
    if std::env::var_os("MPICR_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(current == generated, "include/mpicr.h is stale: run MPICR_BLESS=1 cargo test -p mpicr-shim --test header");
}
