//! `mpicr restart --mpi-lib PATH` (or `MPICR_MPI_LIB`): the MPI library a restarted job's lower
//! half loads. Checked before anything is restored, one line per problem: the file must be an
//! ELF shared library, of the face the program speaks (the MPICH ABI), and define every MPI
//! function the program imports. The agent gets the path as `MPICR_MPI_LIB` in
//! `ToAgent::Resume`'s settings, so this renewal and every later one load it (the shim keeps the
//! variable, and checks the program's imports again itself when the library changes).

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The environment variable the shim reads (`lower::locate`) and the restart's default.
pub const MPI_LIB_ENV: &str = "MPICR_MPI_LIB";

/// The library a restart asks for, and what named it (for messages): the option, else
/// `MPICR_MPI_LIB`, else none (the image's).
pub fn requested(option: Option<PathBuf>) -> Option<(PathBuf, &'static str)> {
    match option {
        Some(p) => Some((p, "--mpi-lib")),
        None => std::env::var_os(MPI_LIB_ENV).filter(|v| !v.is_empty()).map(|v| (PathBuf::from(v), MPI_LIB_ENV)),
    }
}

/// The ABI families ("faces") a library can present to programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    Mpich,
    OpenMpi,
    StandardAbi,
}

impl Face {
    pub fn name(self) -> &'static str {
        match self {
            Face::Mpich => "the MPICH ABI",
            Face::OpenMpi => "Open MPI's ABI",
            Face::StandardAbi => "the MPI-5 standard ABI",
        }
    }
}

/// The environment variable that names the program's ABI when its binary does not say it.
pub const FACE_ENV: &str = "MPICR_FACE";

impl Face {
    /// The face library that runs a program of this ABI under mpicr (next to the `mpicr`
    /// binary); None where mpicr has none.
    pub fn shim_name(self) -> Option<&'static str> {
        match self {
            Face::Mpich => Some("libmpicr.so"),
            Face::OpenMpi => Some("libmpicr_ompi.so"),
            Face::StandardAbi => Some("libmpicr_abi.so"),
        }
    }
}

/// The ABI `program` speaks: `MPICR_FACE` (`mpich`, `ompi`, `abi`), else the one of the MPI
/// library in its `DT_NEEDED` (`libmpi.so.40`: Open MPI's, `libmpi_abi.so.1`: the standard
/// ABI), else the MPICH ABI (also for programs that name no MPI library, such as a Python
/// interpreter that loads mpi4py later). A program linked to an MPI library of another family
/// is refused in one line naming it and the faces mpicr has.
pub fn program_face(program: &Path) -> Result<Face> {
    if let Some(v) = std::env::var_os(FACE_ENV).filter(|v| !v.is_empty()) {
        return match v.to_str() {
            Some("mpich") => Ok(Face::Mpich),
            Some("ompi") => Ok(Face::OpenMpi),
            Some("abi") => Ok(Face::StandardAbi),
            _ => bail!("{FACE_ENV}={}: unknown face (mpich, ompi or abi)", v.to_string_lossy()),
        };
    }
    let Ok(d) = mpicr_elf::read_file(program) else { return Ok(Face::Mpich) };
    face_of_needed(&d.needed).map_err(|UnknownMpiLib(lib)| {
        anyhow::anyhow!(
            "{} is linked to {lib}, an MPI library mpicr has no face for; mpicr runs programs of {} (set {FACE_ENV} if the program really speaks one of them)",
            program.display(),
            KNOWN_FACES
        )
    })
}

/// The faces mpicr has, with the libraries that mark them, for messages.
pub const KNOWN_FACES: &str =
    "the MPICH ABI (libmpich.so.12, libmpi.so.12: MPICH, Intel MPI), Open MPI's (libmpi.so.40) and the MPI-5 standard ABI (libmpi_abi.so.1)";

/// An MPI library (`DT_NEEDED` entry) of a family mpicr has no face for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is an MPI library mpicr has no face for")]
pub struct UnknownMpiLib(pub String);

/// The face a program's `DT_NEEDED` names; Err(the library) for an MPI library of an unknown
/// family (`libmpi.so.N`, `libmpich.so.N`, `libmpi_abi.so.N` of other versions).
pub fn face_of_needed(needed: &[String]) -> Result<Face, UnknownMpiLib> {
    for n in needed {
        let (stem, version) = n.split_once(".so").map(|(s, v)| (s, v.trim_start_matches('.'))).unwrap_or((n.as_str(), ""));
        let major = version.split('.').next().unwrap_or("");
        match (stem, major) {
            ("libmpi", "40") => return Ok(Face::OpenMpi),
            ("libmpi_abi", "1") => return Ok(Face::StandardAbi),
            ("libmpi", "12") | ("libmpich", "12") => return Ok(Face::Mpich),
            ("libmpi" | "libmpich" | "libmpi_abi", _) => return Err(UnknownMpiLib(n.clone())),
            _ => {}
        }
    }
    Ok(Face::Mpich)
}

/// Whether the library at `path` is Intel MPI (it defines Intel's own `I_MPI_Check_image_status`).
pub fn is_intel_mpi(path: &Path) -> bool {
    mpicr_elf::read_file(path).is_ok_and(|d| d.defined.contains("I_MPI_Check_image_status"))
}

/// Refuses, in one line, to restore an image whose process had already renewed its library once
/// when the restored process would renew into Intel MPI: measured with Intel MPI 2021.18 (2
/// ranks, namespace renewal), such a process dies of SIGSEGV in the renewed MPI_Init right after
/// its PMI barrier, every time; images of the first checkpoint of a run (no renewal before it)
/// restart, and a running job renews any number of times.
pub fn check_intel_restore(lib: &Path, epoch: u64, next_generation: u32) -> Result<()> {
    if next_generation > 1 && is_intel_mpi(lib) {
        bail!(
            "epoch {epoch} cannot be restarted on Intel MPI ({}): its processes had renewed the library {} time(s) before it was taken, and Intel MPI crashes when it comes up again in such a restored process (known limit; an epoch taken by the first checkpoint of a run restarts)",
            lib.display(),
            next_generation - 1
        );
    }
    Ok(())
}

/// Which face a library presents, from its soname and the symbols it defines; None: not an MPI
/// library at all.
pub fn face_of(d: &mpicr_elf::Dynamic) -> Option<Face> {
    let soname = d.soname.as_deref().unwrap_or("");
    if soname.starts_with("libmpi.so.40") || d.defined.contains("ompi_mpi_comm_world") {
        return Some(Face::OpenMpi);
    }
    if soname.starts_with("libmpi_abi") {
        return Some(Face::StandardAbi);
    }
    if !d.defined.contains("MPI_Init") && !d.defined.contains("PMPI_Init") {
        return None;
    }
    if soname.starts_with("libmpi.so.12") || soname.starts_with("libmpich.so.12") || d.defined.contains("MPIR_Err_return_comm") {
        return Some(Face::Mpich);
    }
    None
}

/// Checks `lib` for `program` (the job's program, as recorded in job.json): at a restart
/// (`restart`) of a job checkpointed on `old` (the library the agents reported, if known), or at
/// `mpicr run`. `from` names where the path came from (`--mpi-lib`, `MPICR_MPI_LIB`). Returns
/// the path to hand the agents: absolute, since the program's working directory is not the
/// keeper's.
pub fn check(lib: &Path, from: &str, restart: bool, program: &Path, old: Option<&Path>) -> Result<PathBuf> {
    let shown = format!("{from} {}", lib.display());
    let abs = match std::fs::canonicalize(lib) {
        Ok(p) => p,
        Err(e) => bail!("{shown}: {e}"),
    };
    if !abs.is_file() {
        bail!("{shown}: not a regular file");
    }
    let d = mpicr_elf::read_file(&abs).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    if !d.shared {
        bail!("{shown}: not a shared library (ELF type is not ET_DYN)");
    }
    let Some(face) = face_of(&d) else {
        bail!(
            "{shown}: not an MPI library (soname {}, no MPI_Init defined); mpicr restarts MPICH-ABI programs on MPICH-ABI libraries (libmpi.so.12, libmpich.so.12)",
            d.soname.as_deref().unwrap_or("none")
        );
    };
    // The library underneath speaks the MPICH ABI whatever the program's face (an Open MPI
    // program's face translates its calls to it), or is Open MPI itself, driven through the
    // lower half's adapter (`lower/ompi`) for programs of the MPICH or Open MPI face.
    let want = old.and_then(|o| mpicr_elf::read_file(o).ok()).and_then(|od| face_of(&od)).unwrap_or(Face::Mpich);
    let program_face = mpicr_elf::read_file(program).ok().and_then(|p| face_of_needed(&p.needed).ok()).unwrap_or(Face::Mpich);
    // (Its imports are not checked: the adapter fails each function it lacks, naming it.)
    if face == Face::OpenMpi && program_face != Face::StandardAbi && (!restart || want == Face::OpenMpi) {
        return Ok(abs);
    }
    if face != want {
        let soname = d.soname.as_deref().unwrap_or("none");
        if restart {
            bail!(
                "{shown}: it is {} (soname {soname}), but the job was checkpointed on {}: a restart can change the library, not the ABI",
                face.name(),
                want.name()
            );
        }
        bail!(
            "{shown}: it is {} (soname {soname}), but mpicr's lower half runs {} libraries only (an Open MPI program runs on one through libmpicr_ompi.so)",
            face.name(),
            want.name()
        );
    }
    // The program's own MPI imports (a program that reaches MPI through libraries it loads
    // later, e.g. Python's mpi4py, is checked by the shim when the library is loaded).
    if let Ok(p) = mpicr_elf::read_file(program) {
        // A foreign face translates the program's calls: only names the MPICH ABI has reach
        // the library (the standard ABI's MPI_*_toint/fromint and MPI_Abi_* are the face's own).
        let foreign = face_of_needed(&p.needed).is_ok_and(|f| f != Face::Mpich);
        let imports: Vec<String> = p.mpi_imports().into_iter().filter(|n| !(foreign && face_only(n))).collect();
        let missing = d.missing(&imports);
        if !missing.is_empty() {
            bail!("{shown}: it lacks {} the program uses: {}", if missing.len() == 1 { "a function" } else { "functions" }, missing.join(", "));
        }
    }
    Ok(abs)
}

/// Functions a foreign face answers itself, which an MPICH-ABI library does not have.
pub fn face_only(name: &str) -> bool {
    let n = name.strip_prefix('P').unwrap_or(name);
    n.starts_with("MPI_Abi_") || n.ends_with("_toint") || n.ends_with("_fromint")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(soname: &str, defs: &[&str]) -> mpicr_elf::Dynamic {
        mpicr_elf::Dynamic { shared: true, soname: Some(soname.into()), defined: defs.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn faces() {
        assert_eq!(face_of(&lib("libmpich.so.12", &["MPI_Init"])), Some(Face::Mpich));
        assert_eq!(face_of(&lib("libmpi.so.12", &["PMPI_Init"])), Some(Face::Mpich));
        assert_eq!(face_of(&lib("libmpi.so.40", &["MPI_Init", "ompi_mpi_comm_world"])), Some(Face::OpenMpi));
        assert_eq!(face_of(&lib("libmpi_abi.so.0", &["MPI_Init"])), Some(Face::StandardAbi));
        let needed = |v: &[&str]| face_of_needed(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(needed(&["libc.so.6", "libmpi_abi.so.1"]), Ok(Face::StandardAbi));
        assert_eq!(needed(&["libmpi.so.40"]), Ok(Face::OpenMpi));
        assert_eq!(needed(&["libmpich.so.12"]), Ok(Face::Mpich));
        assert_eq!(needed(&["libmpicr.so", "libc.so.6"]), Ok(Face::Mpich));
        assert_eq!(needed(&["libmpi.so.20"]), Err(UnknownMpiLib("libmpi.so.20".to_string())));
        assert!(face_only("PMPI_Comm_toint") && face_only("MPI_Abi_get_info") && !face_only("MPI_Send"));
        assert_eq!(face_of(&lib("libz.so.1", &["deflate"])), None);
    }

    #[test]
    fn missing_file_is_named() {
        let e = check(Path::new("/nonexistent/libmpi.so.12"), "--mpi-lib", true, Path::new("/bin/sh"), None).unwrap_err();
        assert!(e.to_string().starts_with("--mpi-lib /nonexistent/libmpi.so.12: "), "{e}");
    }

    #[test]
    fn a_program_is_not_a_library() {
        let me = std::env::current_exe().unwrap();
        let e = check(&me, "--mpi-lib", true, &me, None).unwrap_err().to_string();
        assert!(e.contains("not a shared library") || e.contains("not an MPI library"), "{e}");
    }
}
