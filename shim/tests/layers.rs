//! The shim is three layers, each importing only the ones below it: the face (the program's
//! ABI: `src/face/`) may use the core and the lower half; the core (`src/core/`) only the lower
//! half; the lower half (`src/lower/`) neither. This test reads every source file of the core
//! and the lower half and fails on any path into a layer above (`crate::face`, `crate::core`,
//! grouped `use crate::{...}` included) and on any crate-root module outside the layers.
use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// The code of a file without its comments (docs may name other layers).
fn code(text: &str) -> String {
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The crate-root modules a piece of code refers to: `crate::X`, `$crate::X` and every name of
/// `crate::{X, Y::Z}`.
fn roots(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            out.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    out
}

/// Every (file, module) pair of `layer` that reaches a crate-root module outside `allowed`.
fn violations(layer: &str, allowed: &[&str]) -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src").join(layer);
    let files = sources(&dir);
    assert!(!files.is_empty(), "no sources under {}", dir.display());
    let mut bad = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for root in roots(&code(&text)) {
            if !allowed.contains(&root.as_str()) {
                bad.push(format!("{} uses crate::{root}", f.strip_prefix(dir.parent().unwrap()).unwrap().display()));
            }
        }
    }
    bad
}

#[test]
fn roots_are_found() {
    let c = code("use crate::core::state::OBJ; // crate::face\nuse crate::{face, lower::abi};\n$crate::gen::x();");
    assert_eq!(roots(&c), ["core", "face", "lower", "gen"]);
}

#[test]
fn the_core_does_not_import_the_face() {
    let bad = violations("core", &["core", "lower"]);
    assert!(bad.is_empty(), "the core imports a layer above it:\n  {}", bad.join("\n  "));
}

#[test]
fn the_lower_half_imports_neither_core_nor_face() {
    let bad = violations("lower", &["lower"]);
    assert!(bad.is_empty(), "the lower half imports a layer above it:\n  {}", bad.join("\n  "));
}

#[test]
fn every_module_is_in_a_layer() {
    let lib = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let lib = code(&lib);
    let mods: Vec<&str> =
        lib.lines().filter_map(|l| l.trim().strip_prefix("pub mod ").or_else(|| l.trim().strip_prefix("mod "))).map(|m| m.trim_end_matches(';')).collect();
    assert_eq!(mods, ["core", "face", "lower"], "lib.rs declares modules outside the three layers");
}
