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
///
/// A second image, `libmpicr_anchor_needs.so`, also needs `PLACEHOLDERS` placeholder libraries
/// whose names (512 bytes each) the lower half overwrites with paths before loading it: the
/// MPI library's, after the NODELETE-free stand-ins of its dependencies. That library and its
/// dependencies are then part of the anchor's search list, the namespace's global scope, where
/// the modules the library opens without RTLD_GLOBAL (the anchor strips it) still find its
/// symbols (Open MPI 4.1's components).
fn build_anchor(manifest: &std::path::Path, out_dir: &std::path::Path) {
    let src = manifest.join("anchor/anchor.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let compile = |args: &[&str], out: &std::path::Path, extra: &[String]| {
        let status = Command::new(&cc)
            .args(args)
            .arg("-o")
            .arg(out)
            .args(extra)
            .status()
            .unwrap_or_else(|e| panic!("running the C compiler `{cc}` for {}: {e}", out.display()));
        assert!(status.success(), "building {} with `{cc}` failed", out.display());
    };
    let flags = ["-shared", "-fPIC", "-O2", "-g", "-fno-builtin", "-fvisibility=hidden", "-Wall", "-Werror"];
    let src_s = src.to_str().expect("UTF-8 source path").to_string();
    compile(&flags, &out_dir.join("libmpicr_anchor.so"), &[src_s.clone(), "-ldl".into()]);
    // The placeholders: empty libraries with long sonames, only there to be named. (Their files
    // have short names: a file name may not have 512 bytes; DT_NEEDED takes the soname.)
    let empty = out_dir.join("placeholder.c");
    std::fs::write(&empty, "/* a placeholder of the lower half's anchor: never loaded */\n").expect("writing placeholder.c");
    let mut needs = vec![src_s, "-Wl,--no-as-needed".into(), format!("-L{}", out_dir.display())];
    for i in 0..PLACEHOLDERS {
        let file = format!("libmpicr_placeholder{i}.so");
        compile(&["-shared", "-fPIC"], &out_dir.join(&file), &[empty.display().to_string(), format!("-Wl,-soname,{}", placeholder_name(i))]);
        needs.push(format!("-l:{file}"));
    }
    needs.push("-ldl".into());
    compile(&flags, &out_dir.join("libmpicr_anchor_needs.so"), &needs);
}

/// Must match `PLACEHOLDERS` in `src/lower/mod.rs`.
const PLACEHOLDERS: usize = 4;

/// Must match `PLACEHOLDER_PREFIX` and `PLACEHOLDER_LEN` in `src/lower/mod.rs`:
/// "mpicr-lower-library-" and the slot's digit, padded with 'x' to 512 bytes.
fn placeholder_name(i: usize) -> String {
    let mut s = format!("mpicr-lower-library-{i}");
    while s.len() < 512 {
        s.push('x');
    }
    s
}
