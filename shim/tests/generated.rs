//! The checked-in generated files (`shim/src/face/gen/`, `shim/src/lower/gen/`,
//! `faces/mpich/src/exports.rs`, `shim/api/exports.txt`, `docs/api-buckets.md`, and the Open MPI
//! face's `faces/ompi/src/gen/` and `faces/ompi/exports.txt`, the standard-ABI face's
//! `faces/abi/src/gen/` and `faces/abi/exports.txt`) must be what `tools/gen_api.py`,
//! `tools/gen_ompi.py` and `tools/gen_abi.py` make of the signature tables and the policy: the generators run into a
//! temporary directory and every file they write, and every file of the `gen/` directories,
//! must match.
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the generator writes code: the face's wrappers and exports, the lower half's table.
const GEN_DIRS: [&str; 4] = ["shim/src/face/gen", "shim/src/lower/gen", "faces/ompi/src/gen", "faces/abi/src/gen"];

/// A scratch directory removed on drop (also when the test fails).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Files under `dir`, as paths relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn generated_files_are_current() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let scratch = Scratch(std::env::temp_dir().join(format!("mpicr-gen-{}-{nanos}", std::process::id())));
    for tool in ["tools/gen_api.py", "tools/gen_ompi.py", "tools/gen_abi.py", "tools/gen_ompi_lower.py"] {
        let out = Command::new("python3")
            .arg(root.join(tool))
            .arg("--out-dir")
            .arg(&scratch.0)
            .output()
            .expect("running python3 (python3 is needed to check the generated files)");
        assert!(out.status.success(), "{tool} failed ({}):\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    let made = files(&scratch.0);
    for dir in GEN_DIRS {
        assert!(made.iter().any(|p| p.starts_with(dir)), "the generator wrote nothing under {dir}: {made:?}");
    }
    let mut stale = Vec::new();
    for rel in &made {
        let fresh = std::fs::read(scratch.0.join(rel)).unwrap();
        if std::fs::read(root.join(rel)).ok().as_deref() != Some(&fresh[..]) {
            stale.push(rel.display().to_string());
        }
    }
    // A file left in a gen/ directory that the generator no longer writes is stale too.
    for dir in GEN_DIRS {
        for rel in files(&root.join(dir)) {
            let rel = Path::new(dir).join(rel);
            if !made.contains(&rel) {
                stale.push(format!("{} (not generated any more)", rel.display()));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "generated files differ from tools/gen_api.py's, tools/gen_ompi.py's and tools/gen_abi.py's output: {}; run `make gen` and commit the result",
        stale.join(", ")
    );
}
