// Included by each face's build.rs: one ELF version script per face library, so that it exports
// exactly the names of its ABI's list (one per line) plus `globals`, and nothing else.

/// Writes the version script for the names listed in `list` (`what` names that file in the
/// panic message) and passes it to the linker of the cdylib.
fn write_version_script(list: &std::path::Path, what: &str, globals: &[&str]) {
    use std::{env, fs, path::PathBuf};
    println!("cargo:rerun-if-changed={}", list.display());
    let names = fs::read_to_string(list).unwrap_or_else(|e| panic!("{what} (run `make gen`): {e}"));
    let mut script = String::from("{\n  global:\n");
    for n in names.lines().filter(|l| !l.is_empty()).chain(globals.iter().copied()) {
        script.push_str(&format!("    {n};\n"));
    }
    script.push_str("  local:\n    *;\n};\n");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("exports.map");
    fs::write(&out, script).unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", out.display());
}
