//! Lower-half renewal: release the real library before a dump, bring up a fresh one after it
//! (or after a restore), and rebuild every real object from its recipe.
//!
//! Two strategies (DESIGN.md section 3); `namespace` unless `MPICR_RENEW=sessions`:
//! - `sessions` (MPICH 5.x, on request): the library is loaded once. The first generation uses the world
//!   model (MPI_Init), because ROMIO and the reporting of errors on invalid handles need it
//!   (in a sessions-only process MPI_File_open fails and such errors go to the fatal initial
//!   error handler); every renewal opens a new session with communicators for the
//!   `mpi://WORLD` and `mpi://SELF` process sets. Release frees every real object and
//!   finalizes (MPI_Finalize, then MPI_Session_finalize). Unbounded.
//! - `namespace` (every library): each generation is a fresh copy of the library in a link-map
//!   namespace with its own MPI_Init and MPI_Finalize; release unloads the whole namespace and
//!   unmaps what it leaked (see `lower`), so glibc reuses it: unbounded, and nothing of a
//!   released generation stays in the image.

use crate::core::handles;
use crate::core::kinds::comm::{errors_return_on, world_size};
use crate::core::kinds::{FREE_ORDER, RENEWAL_ORDER};
use crate::core::state::{OBJ, SELF_INDEX, WORLD_INDEX};
use crate::lower;
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::calls::init::ProgramArgs;
use crate::lower::calls::object::Kind;
use crate::lower::handles::RealComm;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Strategy {
    Namespace,
    Sessions,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Namespace => "namespace",
            Strategy::Sessions => "sessions",
        }
    }
}

static STRATEGY: std::sync::OnceLock<Strategy> = std::sync::OnceLock::new();

/// The renewal strategy: `MPICR_RENEW`, or the one that works for the library underneath.
pub fn strategy() -> Strategy {
    *STRATEGY.get_or_init(|| match std::env::var("MPICR_RENEW").ok().as_deref() {
        Some("namespace") => Strategy::Namespace,
        Some("sessions") => Strategy::Sessions,
        None | Some("") => detect(),
        Some(other) => lower::fatal(&format!("MPICR_RENEW={other} is not a renewal strategy (use sessions or namespace)")),
    })
}

/// A fresh, disposable copy per generation for every library: unbounded and flat on MPICH
/// 4.0.2 and 5 (docs/lower-half.md). Sessions stay available (`MPICR_RENEW=sessions`, MPICH 5
/// only: MPICH 4.0.2 crashes on a second MPI_Session_init) but measured worse: a rank of a
/// 2-rank MPICH 5.0.2 job died in its 64th renewal, and images grow by ~33 KB per epoch.
fn detect() -> Strategy {
    Strategy::Namespace
}

/// Major version of the MPICH underneath (0 when it is not MPICH).
pub fn mpich_major() -> u32 {
    static MAJOR: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MAJOR.get_or_init(|| {
        lower::current()
            .library_version()
            .split("MPICH Version:")
            .nth(1)
            .and_then(|rest| rest.trim_start().split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|d| d.parse::<u32>().ok())
            .unwrap_or(0)
    })
}

/// Renewals this process can still make; `None`: unbounded (see `lower::renewals_left`).
pub fn renewals_left() -> Option<u32> {
    match strategy() {
        Strategy::Namespace => lower::renewals_left(),
        Strategy::Sessions => None,
    }
}

/// Refuses a checkpoint whose renewal could not succeed, while the library is still running:
/// a renewal needs a link-map namespace with room for a libc in static TLS.
pub fn check_renewal() -> Result<(), RenewError> {
    if strategy() != Strategy::Namespace {
        return Ok(());
    }
    if renewals_left() == Some(0) {
        return Err(RenewError::Limit(limit_message()));
    }
    lower::probe_renewal().map_err(|e| RenewError::WouldFail(e, advice()))
}

/// Why the lower half could not be released or renewed.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    /// No renewal left (`limit_message`).
    #[error("{0}")]
    Limit(String),
    #[error("the MPI library could not be renewed after this checkpoint ({0}); {1}")]
    WouldFail(lower::LoadError, &'static str),
    #[error("finalizing the lower half ({strategy}) failed: {reason}")]
    Finalize { strategy: &'static str, reason: String },
    #[error("the image has {image} ranks but the job has {job}")]
    Size { image: i32, job: i32 },
    #[error("renewing the MPI library failed: {0}")]
    Load(lower::LoadError),
    #[error("socketpair: {0}")]
    Socketpair(std::io::Error),
    #[error("PmiConnect: {0}")]
    PmiConnect(std::io::Error),
    #[error("dup2 onto PMI_FD {fd}: {err}")]
    Dup2 { fd: c_int, err: std::io::Error },
    #[error("initialising the renewed library failed: {0}")]
    Init(String),
    /// The program uses functions the restart's library lacks (their names).
    #[error("{0}")]
    Imports(#[from] lower::MissingImports),
    /// A kind of object could not be rebuilt (its own words).
    #[error("{0}")]
    Rebuild(#[from] crate::core::kinds::RebuildError),
}

/// The session of the current generation (`sessions` strategy).
static SESSION: AtomicI32 = AtomicI32::new(MPI_SESSION_NULL);

/// The real MPI_COMM_WORLD of the current generation.
pub fn real_world() -> c_int {
    OBJ.comms.real(WORLD_INDEX).map_or(MPI_COMM_WORLD, |r| r.raw())
}

/// Initialises the lower half for the program's MPI_Init: returns the real world and self
/// communicators and the thread level provided.
/// `args`: the program's `argc`/`argv` (none at a renewal).
pub fn init_lower(args: ProgramArgs, level: c_int) -> Result<(c_int, c_int, c_int), c_int> {
    lower::log::init();
    remember_level(level);
    match strategy() {
        Strategy::Namespace => {
            let mut provided = 0;
            let rc = calls::init::init_thread(args, level, &mut provided).unwrap_or(MPI_ERR_OTHER);
            if rc != MPI_SUCCESS {
                return Err(rc);
            }
            Ok((MPI_COMM_WORLD, MPI_COMM_SELF, provided))
        }
        Strategy::Sessions if !WORLD_MODEL_USED.swap(true, Ordering::AcqRel) => {
            let mut provided = 0;
            let rc = calls::init::init_thread(args, level, &mut provided).unwrap_or(MPI_ERR_OTHER);
            if rc != MPI_SUCCESS {
                return Err(rc);
            }
            IN_WORLD_MODEL.store(true, Ordering::Release);
            Ok((MPI_COMM_WORLD, MPI_COMM_SELF, provided))
        }
        Strategy::Sessions => {
            handles::SESSIONS_ONLY.store(true, Ordering::Release);
            open_session(level)
        }
    }
}

/// `sessions`: whether the world model was used (only the first generation uses it), and
/// whether the current generation is that one.
static WORLD_MODEL_USED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static IN_WORLD_MODEL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The world model was just finalized: the next session needs a new PMI connection.
static WORLD_MODEL_ENDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `sessions`: a session plus communicators for the world and self process sets.
fn open_session(level: c_int) -> Result<(c_int, c_int, c_int), c_int> {
    let mut info = MPI_INFO_NULL;
    let mut session = MPI_SESSION_NULL;
    let name = |l: c_int| match l {
        0 => "MPI_THREAD_SINGLE",
        1 => "MPI_THREAD_FUNNELED",
        2 => "MPI_THREAD_SERIALIZED",
        _ => "MPI_THREAD_MULTIPLE",
    };
    let key = std::ffi::CString::new("thread_level").unwrap();
    let val = std::ffi::CString::new(name(level)).unwrap();
    let rc = calls::init::info_create(&mut info).unwrap_or(MPI_ERR_OTHER);
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    calls::init::info_set(info, &key, &val);
    let rc = calls::init::session_init(info, MPI_ERRORS_RETURN, &mut session).unwrap_or(MPI_ERR_OTHER);
    calls::object::free(Kind::Info, &mut info);
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    SESSION.store(session, Ordering::Release);
    let comm_of = |pset: &str, tag: &str| -> Result<c_int, c_int> {
        let (p, t) = (std::ffi::CString::new(pset).unwrap(), std::ffi::CString::new(tag).unwrap());
        let (mut g, mut c) = (MPI_GROUP_NULL, MPI_COMM_NULL);
        let rc = calls::init::group_from_session_pset(session, &p, &mut g).unwrap_or(MPI_ERR_OTHER);
        if rc != MPI_SUCCESS {
            return Err(rc);
        }
        let rc = calls::init::comm_create_from_group(g, &t, MPI_INFO_NULL, MPI_ERRORS_RETURN, &mut c).unwrap_or(MPI_ERR_OTHER);
        calls::object::free(Kind::Group, &mut g);
        if rc != MPI_SUCCESS {
            return Err(rc);
        }
        Ok(c)
    };
    let world = comm_of("mpi://WORLD", "org.mpicr.world")?;
    let selfc = comm_of("mpi://SELF", "org.mpicr.self")?;
    Ok((world, selfc, level))
}

/// Ends the lower half for the program's MPI_Finalize.
pub fn finalize_lower() -> c_int {
    // A session must be empty when finalized; the world model's MPI_Finalize cleans up itself
    // (what the program left is the program's, as natively).
    if strategy() == Strategy::Sessions && !IN_WORLD_MODEL.load(Ordering::Acquire) {
        free_real_objects();
    }
    finalize_generation()
}

/// Finalizes the current generation of the library (its world model, or its session).
fn finalize_generation() -> c_int {
    match strategy() {
        Strategy::Namespace => calls::init::finalize().unwrap_or(MPI_ERR_OTHER),
        Strategy::Sessions if IN_WORLD_MODEL.swap(false, Ordering::AcqRel) => {
            // MPI_Finalize ends the PMI connection too (a session's finalize keeps it).
            WORLD_MODEL_ENDED.store(true, Ordering::Release);
            calls::init::finalize().unwrap_or(MPI_ERR_OTHER)
        }
        Strategy::Sessions => {
            let mut s = SESSION.swap(MPI_SESSION_NULL, Ordering::AcqRel);
            calls::init::session_finalize(&mut s).unwrap_or(MPI_ERR_OTHER)
        }
    }
}

/// Frees every real object of the current generation (before finalizing a session).
fn free_real_objects() {
    for kind in FREE_ORDER {
        kind.free_real();
    }
}

pub fn limit_message() -> String {
    let pinned = lower::last_release().map(|r| r.pinned.join(", ")).unwrap_or_default();
    format!(
        "no lower-half renewal left: the MPI library's namespace could not be unloaded ({pinned} stayed loaded) and glibc \
         has no free link-map namespace left; {}",
        advice()
    )
}

fn advice() -> &'static str {
    "checkpoint with --stop and restart the job (a restored process unloads nothing more than it had), \
     and report the library that stays loaded"
}

/// Where the program stands: before MPI_Init (0), between ([`INITIALIZED`]), or after
/// MPI_Finalize ([`FINALIZED`]). The shim answers MPI_Initialized/MPI_Finalized itself: with the
/// `sessions` strategy the real library's world model is never initialised.
pub static STAGE: AtomicI32 = AtomicI32::new(0);
pub const INITIALIZED: c_int = 1;
pub const FINALIZED: c_int = 2;

/// Is the program between MPI_Init and MPI_Finalize (not a program of MPI sessions only)?
pub fn world_initialized() -> bool {
    STAGE.load(Ordering::Acquire) == INITIALIZED
}

/// Has the program called MPI_Finalize?
pub fn program_finalized() -> bool {
    STAGE.load(Ordering::Acquire) == FINALIZED
}

/// Thread level the lower half was first initialised with.
static LEVEL: AtomicI32 = AtomicI32::new(MPI_THREAD_SERIALIZED);

pub fn remember_level(level: c_int) {
    LEVEL.store(level, Ordering::Release);
}

/// Releases the real library: nothing of it (sockets, shared memory) may be in the image.
pub fn release() -> Result<(), RenewError> {
    // Every real object of this generation is freed first: the rebuild makes new ones from the
    // recipes, and whatever is left at the finalize the library reports on the program's stderr
    // (MPICH: "freeing inactive persistent request", yaksa: "N leaked handle pool objects"),
    // which a native run never prints.
    free_real_objects();
    for kind in RENEWAL_ORDER {
        kind.forget();
    }
    // What the discarded copy still prints as it finalizes goes nowhere (see `MutedStdio`).
    let muted = if strategy() == Strategy::Namespace { lower::mute_current_stdio() } else { None };
    let rc = finalize_generation();
    drop(muted);
    if rc != MPI_SUCCESS {
        return Err(RenewError::Finalize { strategy: strategy().name(), reason: lower::error_string(rc) });
    }
    if strategy() == Strategy::Namespace {
        let report = lower::release_current();
        tracing::debug!(target: "renew", report = ?report, "released the lower half");
    }
    unmap_shared_memory();
    Ok(())
}

/// Shared-memory files of the MPI library and its transports (MPICH, UCX, Open MPI's
/// `open_mpi.NNNN`, `sm_segment.*`, 4.1's `vader_segment.*`), and files of Open MPI's launcher
/// session directory (`TMPDIR/ompi.PID/...`, 4.1's `ompi.HOST.UID/...`, `prte.*`, `prtrn.*`: the hwloc topology
/// `hwloc.sm` Open MPI 5 keeps open after MPI_Finalize). That directory is gone when the
/// launcher ends, so a restore could not reopen it; the next generation opens its own.
fn is_library_shm(path: &str) -> bool {
    if let Some(name) = path.strip_prefix("/dev/shm/") {
        return ["mpich", "ucx", "open_mpi.", "sm_segment.", "vader_segment."].iter().any(|p| name.starts_with(p));
    }
    let tmp = std::env::var("TMPDIR").ok().filter(|t| t.starts_with('/')).unwrap_or_else(|| "/tmp".into());
    [tmp.as_str(), "/tmp"].iter().any(|t| {
        path.strip_prefix(*t).and_then(|r| r.strip_prefix('/')).is_some_and(|r| {
            let top = r.split('/').next().unwrap_or("");
            r.contains('/') && ["ompi.", "prte.", "prtrn."].iter().any(|p| top.starts_with(p))
        })
    })
}

/// MPICH 5 leaves its (already unlinked) /dev/shm segments mapped and open after MPI_Finalize
/// (Open MPI 5 its `open_mpi.0000` and the launcher's `hwloc.sm`).
/// In an image they become CRIU "ghost" files that every rank of a node would recreate under
/// the same name at restore, so the released generation's mappings and descriptors are
/// removed: nothing of that generation runs again.
fn unmap_shared_memory() {
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        for e in fds.flatten() {
            let Ok(target) = std::fs::read_link(e.path()) else { continue };
            let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<c_int>().ok()) else { continue };
            if is_library_shm(&target.to_string_lossy()) {
                lower::fds::close_leftover(fd);
            }
        }
    }
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return };
    for line in maps.lines() {
        let mut cols = line.split_whitespace();
        let (Some(range), Some(path)) = (cols.next(), cols.nth(4)) else { continue };
        if !is_library_shm(path) {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        // A mapping of the released library's shared memory, which no code runs on any more.
        lower::memory::unmap(start, end - start);
    }
}

/// Brings up a fresh lower half and rebuilds every object. `size`: the job size the keeper
/// reports (checked against ours after a restart).
pub fn renew(restarted: bool, size: Option<i32>) -> Result<(), RenewError> {
    if let Some(size) = size {
        if restarted && size != world_size() {
            return Err(RenewError::Size { image: world_size(), job: size });
        }
    }
    for kind in RENEWAL_ORDER {
        kind.before_renewal()?;
    }
    let generation = match strategy() {
        Strategy::Namespace => {
            // The same library, or the one a restart named (`mpicr restart --mpi-lib`).
            let path = lower::library_for_renewal();
            let changed = path != lower::current().path;
            let gen = lower::load_generation(&path).map_err(RenewError::Load)?;
            if changed {
                lower::check_program_imports(gen)?;
            }
            gen.number
        }
        Strategy::Sessions => lower::bump_generation(),
    };
    tracing::debug!(target: "renew", generation, restarted, strategy = strategy().name(), "renewing");
    // A fresh library copy needs a fresh PMI connection (MPICH 4.0.2 closes its socket in
    // PMI_Finalize); with sessions the loaded library keeps its PMI socket, which the keeper
    // replaces underneath after a restart.
    if strategy() == Strategy::Namespace || WORLD_MODEL_ENDED.swap(false, Ordering::AcqRel) {
        connect_pmi(generation)?;
    }
    let (world, selfc, _) = init_lower(ProgramArgs::NONE, LEVEL.load(Ordering::Acquire)).map_err(|rc| RenewError::Init(lower::error_string(rc)))?;
    errors_return_on(world);
    errors_return_on(selfc);
    OBJ.comms.set_real(WORLD_INDEX, RealComm(world));
    OBJ.comms.set_real(SELF_INDEX, RealComm(selfc));
    for kind in RENEWAL_ORDER {
        kind.rebuild()?;
    }
    tracing::debug!(target: "renew", generation, "renewed");
    Ok(())
}

/// Gives the renewed library's PMI client a fresh connection to the keeper, at the descriptor
/// number the keeper named in PMI_FD when the program started.
fn connect_pmi(generation: u32) -> Result<(), RenewError> {
    let Some(pmi_fd) = std::env::var("PMI_FD").ok().and_then(|v| v.parse::<c_int>().ok()) else { return Ok(()) };
    if !crate::core::agent::supervised() {
        return Ok(());
    }
    let (ours, keeper_end) = lower::fds::socketpair().map_err(RenewError::Socketpair)?;
    use std::os::fd::{AsFd, AsRawFd};
    crate::core::agent::send_pmi_connect(generation, keeper_end.as_fd()).map_err(RenewError::PmiConnect)?;
    drop(keeper_end);
    if ours.as_raw_fd() == pmi_fd {
        // The number was free (the old library closed it) and socketpair reused it: keep it
        // open there, without close-on-exec, as dup2 would have left it.
        lower::fds::keep_open(ours);
        return Ok(());
    }
    // Onto the number PMI_FD names (dup2 clears CLOEXEC on the copy); `ours` is closed when
    // dropped.
    lower::fds::dup_onto(&ours, pmi_fd).map_err(|err| RenewError::Dup2 { fd: pmi_fd, err })
}

#[cfg(test)]
mod tests {
    #[test]
    fn library_files() {
        use super::is_library_shm as lib;
        assert!(lib("/dev/shm/open_mpi.0000") && lib("/dev/shm/ucx_shm_posix_1") && lib("/dev/shm/sm_segment.vm.0.1.0"));
        assert!(lib("/tmp/ompi.14369/hwloc.sm") && lib("/tmp/prtrn.21502/x"));
        // Open MPI 4.1 (ORTE): vader's segments, the session directory `ompi.HOST.UID`.
        assert!(lib("/dev/shm/vader_segment.vm.1a4f0001.0") && lib("/tmp/ompi.vm.0/pid.27995/pmix_dstor_ds21_27995/dstore_sm.lock"));
        assert!(!lib("/tmp/ompi.14369") && !lib("/tmp/data/ompi.1/x") && !lib("/dev/shm/mine") && !lib("/tmp/out.txt"));
    }
}
