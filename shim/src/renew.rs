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

use crate::abi::*;
use crate::api::group::forget_world_group;
use crate::state::{OBJ, SELF_INDEX, WORLD_INDEX};
use crate::{conv, lower};
use mpicr_virtid::{RequestRecipe, SendMode, Topology, TypeRef};
use std::os::raw::{c_int, c_void};
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
        Some(other) => crate::errors::fatal(&format!(
            "MPICR_RENEW={other} is not a renewal strategy (use sessions or namespace)"
        )),
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
        library_version()
            .split("MPICH Version:")
            .nth(1)
            .and_then(|rest| rest.trim_start().split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|d| d.parse::<u32>().ok())
            .unwrap_or(0)
    })
}

/// MPI_Get_library_version of the real library (callable before MPI_Init).
pub fn library_version() -> String {
    let mut buf = vec![0 as std::os::raw::c_char; 8192];
    let mut len = 0;
    // SAFETY: the buffer exceeds MPI_MAX_LIBRARY_VERSION_STRING (8192 in MPICH).
    unsafe { lower::fns().MPI_Get_library_version.map(|f| f(buf.as_mut_ptr(), &mut len)) };
    unsafe { crate::api::cstr(buf.as_ptr()) }
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
pub fn check_renewal() -> Result<(), String> {
    if strategy() != Strategy::Namespace {
        return Ok(());
    }
    if renewals_left() == Some(0) {
        return Err(limit_message());
    }
    lower::probe_renewal().map_err(|e| format!("the MPI library could not be renewed after this checkpoint ({e}); {}", advice()))
}

/// The session of the current generation (`sessions` strategy).
static SESSION: AtomicI32 = AtomicI32::new(MPI_SESSION_NULL);

/// The real MPI_COMM_WORLD of the current generation.
pub fn real_world() -> c_int {
    OBJ.comms.real(WORLD_INDEX).map_or(MPI_COMM_WORLD, |r| r as c_int)
}

/// Initialises the lower half for the program's MPI_Init: returns the real world and self
/// communicators and the thread level provided.
pub fn init_lower(argc: *mut c_int, argv: *mut *mut *mut std::os::raw::c_char, level: c_int) -> Result<(c_int, c_int, c_int), c_int> {
    let f = lower::fns();
    remember_level(level);
    match strategy() {
        Strategy::Namespace => {
            let mut provided = 0;
            // SAFETY: the program's argc/argv, passed through.
            let rc = unsafe { f.MPI_Init_thread.map_or(MPI_ERR_OTHER, |i| i(argc, argv, level, &mut provided)) };
            if rc != MPI_SUCCESS {
                return Err(rc);
            }
            Ok((MPI_COMM_WORLD, MPI_COMM_SELF, provided))
        }
        Strategy::Sessions if !WORLD_MODEL_USED.swap(true, Ordering::AcqRel) => {
            let mut provided = 0;
            // SAFETY: the program's argc/argv, passed through.
            let rc = unsafe { f.MPI_Init_thread.map_or(MPI_ERR_OTHER, |i| i(argc, argv, level, &mut provided)) };
            if rc != MPI_SUCCESS {
                return Err(rc);
            }
            IN_WORLD_MODEL.store(true, Ordering::Release);
            Ok((MPI_COMM_WORLD, MPI_COMM_SELF, provided))
        }
        Strategy::Sessions => {
            conv::SESSIONS_ONLY.store(true, Ordering::Release);
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
    let f = lower::fns();
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
    // SAFETY: out-pointers are locals; strings are NUL-terminated.
    unsafe {
        let rc = f.MPI_Info_create.map_or(MPI_ERR_OTHER, |h| h(&mut info));
        if rc != MPI_SUCCESS {
            return Err(rc);
        }
        f.MPI_Info_set.map(|h| h(info, key.as_ptr(), val.as_ptr()));
        let rc = f.MPI_Session_init.map_or(MPI_ERR_OTHER, |h| h(info, MPI_ERRORS_RETURN, &mut session));
        f.MPI_Info_free.map(|h| h(&mut info));
        if rc != MPI_SUCCESS {
            return Err(rc);
        }
    }
    SESSION.store(session, Ordering::Release);
    let comm_of = |pset: &str, tag: &str| -> Result<c_int, c_int> {
        let (p, t) = (std::ffi::CString::new(pset).unwrap(), std::ffi::CString::new(tag).unwrap());
        let (mut g, mut c) = (MPI_GROUP_NULL, MPI_COMM_NULL);
        // SAFETY: as above.
        unsafe {
            let rc = f.MPI_Group_from_session_pset.map_or(MPI_ERR_OTHER, |h| h(session, p.as_ptr(), &mut g));
            if rc != MPI_SUCCESS {
                return Err(rc);
            }
            let rc = f.MPI_Comm_create_from_group.map_or(MPI_ERR_OTHER, |h| h(g, t.as_ptr(), MPI_INFO_NULL, MPI_ERRORS_RETURN, &mut c));
            f.MPI_Group_free.map(|h| h(&mut g));
            if rc != MPI_SUCCESS {
                return Err(rc);
            }
        }
        Ok(c)
    };
    let world = comm_of("mpi://WORLD", "org.mpicr.world")?;
    let selfc = comm_of("mpi://SELF", "org.mpicr.self")?;
    Ok((world, selfc, level))
}

/// Ends the lower half for the program's MPI_Finalize.
pub fn finalize_lower() -> c_int {
    let f = lower::fns();
    match strategy() {
        // SAFETY: the program finalizes; nothing is pending.
        Strategy::Namespace => unsafe { f.MPI_Finalize.map_or(MPI_ERR_OTHER, |g| g()) },
        Strategy::Sessions if IN_WORLD_MODEL.swap(false, Ordering::AcqRel) => {
            // MPI_Finalize ends the PMI connection too (a session's finalize keeps it).
            WORLD_MODEL_ENDED.store(true, Ordering::Release);
            // SAFETY: as for `namespace`.
            unsafe { f.MPI_Finalize.map_or(MPI_ERR_OTHER, |g| g()) }
        }
        Strategy::Sessions => {
            free_real_objects();
            let mut s = SESSION.swap(MPI_SESSION_NULL, Ordering::AcqRel);
            // SAFETY: the session opened by `open_session`.
            unsafe { f.MPI_Session_finalize.map_or(MPI_ERR_OTHER, |g| g(&mut s)) }
        }
    }
}

/// Frees every real object of the current generation (before finalizing a session).
fn free_real_objects() {
    let f = lower::fns();
    // SAFETY: each handle is a live real object of the current generation, freed once.
    unsafe {
        for (_, r, e) in OBJ.requests.snapshot() {
            let mut r = r as u32 as c_int;
            if e.recipe.is_persistent() && r != MPI_REQUEST_NULL {
                f.MPI_Request_free.map(|g| g(&mut r));
            }
        }
        macro_rules! free_all {
            ($table:ident, $free:ident) => {
                for (_, r, _) in OBJ.$table.snapshot() {
                    let mut r = r as u32 as c_int;
                    f.$free.map(|g| g(&mut r));
                }
            };
        }
        free_all!(comms, MPI_Comm_free);
        free_all!(groups, MPI_Group_free);
        free_all!(datatypes, MPI_Type_free);
        free_all!(ops, MPI_Op_free);
        free_all!(infos, MPI_Info_free);
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

pub fn world_rank() -> i32 {
    OBJ.comms.with(SELF_INDEX, |c| c.recipe.world_ranks.first().copied().unwrap_or(0)).unwrap_or(0)
}

pub fn world_size() -> i32 {
    OBJ.comms.with(WORLD_INDEX, |c| c.recipe.world_ranks.len() as i32).unwrap_or(0)
}

/// Thread level the lower half was first initialised with.
static LEVEL: AtomicI32 = AtomicI32::new(MPI_THREAD_SERIALIZED);

pub fn remember_level(level: c_int) {
    LEVEL.store(level, Ordering::Release);
}

/// Releases the real library: nothing of it (sockets, shared memory) may be in the image.
pub fn release() -> Result<(), String> {
    forget_world_group();
    crate::api::datatype::forget_all_reals();
    let rc = finalize_lower();
    if rc != MPI_SUCCESS {
        return Err(format!("finalizing the lower half ({}) failed: {}", strategy().name(), crate::errors::error_string(rc)));
    }
    if strategy() == Strategy::Namespace {
        lower::release_current();
    }
    unmap_shared_memory();
    Ok(())
}

/// Shared-memory files of the MPI library and its transports (MPICH, UCX).
fn is_library_shm(path: &str) -> bool {
    path.strip_prefix("/dev/shm/").is_some_and(|name| name.starts_with("mpich") || name.starts_with("ucx"))
}

/// MPICH 5 leaves its (already unlinked) /dev/shm segments mapped and open after MPI_Finalize.
/// In an image they become CRIU "ghost" files that every rank of a node would recreate under
/// the same name at restore, so the released generation's mappings and descriptors are
/// removed: nothing of that generation runs again.
fn unmap_shared_memory() {
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        for e in fds.flatten() {
            let Ok(target) = std::fs::read_link(e.path()) else { continue };
            let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<c_int>().ok()) else { continue };
            if is_library_shm(&target.to_string_lossy()) {
                // SAFETY: a descriptor of the released library's shared memory.
                unsafe { libc::close(fd) };
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
        // SAFETY: the range is a mapping of the released library's shared memory, which no
        // code runs on any more.
        unsafe { libc::munmap(start as *mut c_void, end - start) };
    }
}

/// Brings up a fresh lower half and rebuilds every object. `size`: the job size the keeper
/// reports (checked against ours after a restart).
pub fn renew(restarted: bool, size: Option<i32>) -> Result<(), String> {
    if let Some(size) = size {
        if restarted && size != world_size() {
            return Err(format!("the image has {} ranks but the job has {size}", world_size()));
        }
    }
    let generation = match strategy() {
        Strategy::Namespace => {
            let path = lower::current().path.clone();
            lower::load_generation(&path).map_err(|e| format!("renewing the MPI library failed: {e}"))?.number
        }
        Strategy::Sessions => lower::bump_generation(),
    };
    // A fresh library copy needs a fresh PMI connection (MPICH 4.0.2 closes its socket in
    // PMI_Finalize); with sessions the loaded library keeps its PMI socket, which the keeper
    // replaces underneath after a restart.
    if strategy() == Strategy::Namespace || WORLD_MODEL_ENDED.swap(false, Ordering::AcqRel) {
        connect_pmi(generation)?;
    }
    let (world, selfc, _) = init_lower(std::ptr::null_mut(), std::ptr::null_mut(), LEVEL.load(Ordering::Acquire))
        .map_err(|rc| format!("initialising the renewed library failed: {}", crate::errors::error_string(rc)))?;
    crate::api::init::errors_return_on(world);
    crate::api::init::errors_return_on(selfc);
    OBJ.comms.set_real(WORLD_INDEX, world as u32 as u64);
    OBJ.comms.set_real(SELF_INDEX, selfc as u32 as u64);
    rebuild_comms()?;
    rebuild_groups()?;
    rebuild_datatypes()?;
    rebuild_ops()?;
    rebuild_infos()?;
    replay_library_state()?;
    repost_requests()?;
    restore_names();
    Ok(())
}

/// Gives rebuilt communicators and datatypes the names they had.
fn restore_names() {
    let f = lower::fns();
    for (_, real, c) in OBJ.comms.snapshot() {
        if let Some(n) = c.name.and_then(|n| std::ffi::CString::new(n).ok()) {
            // SAFETY: a live real communicator and a NUL-terminated name.
            unsafe { f.MPI_Comm_set_name.map(|g| g(real as u32 as c_int, n.as_ptr())) };
        }
    }
    for (_, real, t) in OBJ.datatypes.snapshot() {
        if let Some(n) = t.name.and_then(|n| std::ffi::CString::new(n).ok()) {
            // SAFETY: as above, for a datatype.
            unsafe { f.MPI_Type_set_name.map(|g| g(real as u32 as c_int, n.as_ptr())) };
        }
    }
}

/// Gives the renewed library's PMI client a fresh connection to the keeper, at the descriptor
/// number the keeper named in PMI_FD when the program started.
fn connect_pmi(generation: u32) -> Result<(), String> {
    let Some(pmi_fd) = std::env::var("PMI_FD").ok().and_then(|v| v.parse::<c_int>().ok()) else { return Ok(()) };
    if !crate::agent::supervised() {
        return Ok(());
    }
    let mut fds = [0 as c_int; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socketpair just made both descriptors, and nothing else owns them.
    let (ours, keeper_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    crate::agent::send_pmi_connect(generation, keeper_end.as_fd()).map_err(|e| format!("PmiConnect: {e}"))?;
    drop(keeper_end);
    if ours.as_raw_fd() == pmi_fd {
        // The number was free (the old library closed it) and socketpair reused it: keep it
        // open there, without close-on-exec, as dup2 would have left it.
        let fd = std::os::fd::IntoRawFd::into_raw_fd(ours);
        // SAFETY: clearing the flags of a descriptor we own.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        return Ok(());
    }
    // SAFETY: dup2 of a descriptor we own onto the number PMI_FD names (it clears CLOEXEC on the
    // copy); `ours` is closed when dropped.
    if unsafe { libc::dup2(ours.as_raw_fd(), pmi_fd) } < 0 {
        return Err(format!("dup2 onto PMI_FD {pmi_fd}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The real group of MPI_COMM_WORLD in the current generation (caller frees).
fn world_group() -> Result<c_int, String> {
    let mut g = MPI_GROUP_NULL;
    // SAFETY: valid out-pointer.
    let rc = unsafe { lower::fns().MPI_Comm_group.map_or(MPI_ERR_OTHER, |f| f(real_world(), &mut g)) };
    if rc != MPI_SUCCESS {
        return Err("MPI_Comm_group(MPI_COMM_WORLD) failed".into());
    }
    Ok(g)
}

fn check(rc: c_int, what: &str) -> Result<(), String> {
    if rc == MPI_SUCCESS { Ok(()) } else { Err(format!("{what}: {}", crate::errors::error_string(rc))) }
}

/// An intracommunicator with exactly `ranks` (world ranks, in order), collective over them.
fn comm_of_ranks(world_group: c_int, ranks: &[i32], tag: c_int) -> Result<c_int, String> {
    let f = lower::fns();
    let (mut g, mut c) = (MPI_GROUP_NULL, MPI_COMM_NULL);
    // SAFETY: arrays are live Vecs; out-pointers are locals.
    unsafe {
        check(f.MPI_Group_incl.map_or(MPI_ERR_OTHER, |h| h(world_group, ranks.len() as c_int, ranks.as_ptr(), &mut g)), "MPI_Group_incl")?;
        check(f.MPI_Comm_create_group.map_or(MPI_ERR_OTHER, |h| h(real_world(), g, tag, &mut c)), "MPI_Comm_create_group")?;
        f.MPI_Group_free.map(|h| h(&mut g));
    }
    Ok(c)
}

/// Communicators are rebuilt in the order of their job-wide ids, the same on every rank, so
/// the collective creations of overlapping groups never wait on each other in a cycle.
fn rebuild_comms() -> Result<(), String> {
    let f = lower::fns();
    let wg = world_group()?;
    let mut comms: Vec<_> = OBJ.comms.snapshot().into_iter().filter(|(i, _, _)| *i != WORLD_INDEX && *i != SELF_INDEX).collect();
    comms.sort_by_key(|(_, _, c)| c.recipe.gid);
    for (idx, _, c) in comms {
        let r = &c.recipe;
        let tag = ((r.gid >> 17) & 0x3fff) as c_int;
        let local = comm_of_ranks(wg, &r.world_ranks, tag)?;
        let mut comm = local;
        if let Some(remote) = &r.remote_world_ranks {
            let mut inter = MPI_COMM_NULL;
            let remote_leader = *remote.first().ok_or("an intercommunicator without a remote group")?;
            // SAFETY: live communicators; out-pointer is a local.
            unsafe {
                check(f.MPI_Intercomm_create.map_or(MPI_ERR_OTHER, |h| h(local, 0, real_world(), remote_leader, tag, &mut inter)), "MPI_Intercomm_create")?;
                f.MPI_Comm_free.map(|h| h(&mut comm));
            }
            comm = inter;
        }
        comm = apply_topology(comm, &r.topology)?;
        OBJ.comms.set_real(idx, comm as u32 as u64);
    }
    // SAFETY: freeing the world group made above.
    unsafe { f.MPI_Group_free.map(|h| h(&mut { wg })) };
    Ok(())
}

fn apply_topology(comm: c_int, t: &Topology) -> Result<c_int, String> {
    let f = lower::fns();
    let mut out = MPI_COMM_NULL;
    // SAFETY: arrays are live Vecs of the lengths passed; out-pointer is a local.
    unsafe {
        match t {
            Topology::None => return Ok(comm),
            Topology::Cart { dims, periods } => check(
                f.MPI_Cart_create.map_or(MPI_ERR_OTHER, |h| h(comm, dims.len() as c_int, dims.as_ptr(), periods.as_ptr(), 0, &mut out)),
                "MPI_Cart_create",
            )?,
            Topology::Graph { index, edges } => check(
                f.MPI_Graph_create.map_or(MPI_ERR_OTHER, |h| h(comm, index.len() as c_int, index.as_ptr(), edges.as_ptr(), 0, &mut out)),
                "MPI_Graph_create",
            )?,
            Topology::DistGraph { sources, source_weights, destinations, dest_weights } => {
                let unweighted = crate::api::misc::real_unweighted() as *const c_int;
                let sw = source_weights.as_ref().map_or(unweighted, |w| w.as_ptr());
                let dw = dest_weights.as_ref().map_or(unweighted, |w| w.as_ptr());
                check(
                    f.MPI_Dist_graph_create_adjacent.map_or(MPI_ERR_OTHER, |h| {
                        h(comm, sources.len() as c_int, sources.as_ptr(), sw, destinations.len() as c_int, destinations.as_ptr(), dw, MPI_INFO_NULL, 0, &mut out)
                    }),
                    "MPI_Dist_graph_create_adjacent",
                )?
            }
        }
        let mut c = comm;
        f.MPI_Comm_free.map(|h| h(&mut c));
    }
    crate::api::init::errors_return_on(out);
    Ok(out)
}

fn rebuild_groups() -> Result<(), String> {
    let f = lower::fns();
    let wg = world_group()?;
    for (idx, _, g) in OBJ.groups.snapshot() {
        let mut out = MPI_GROUP_NULL;
        // SAFETY: live array and out-pointer.
        unsafe {
            check(f.MPI_Group_incl.map_or(MPI_ERR_OTHER, |h| h(wg, g.world_ranks.len() as c_int, g.world_ranks.as_ptr(), &mut out)), "MPI_Group_incl")?;
        }
        OBJ.groups.set_real(idx, out as u32 as u64);
    }
    // SAFETY: freeing the group made above.
    unsafe { f.MPI_Group_free.map(|h| h(&mut { wg })) };
    Ok(())
}

fn rebuild_datatypes() -> Result<(), String> {
    let f = lower::fns();
    for (idx, _, t) in OBJ.datatypes.snapshot() {
        let mut real = crate::api::datatype::build(&t.dt.recipe).map_err(|rc| format!("rebuilding a datatype: {}", crate::errors::error_string(rc)))?;
        if t.dt.committed {
            // SAFETY: a datatype just built.
            unsafe { f.MPI_Type_commit.map(|h| h(&mut real)) };
        }
        OBJ.datatypes.set_real(idx, real as u32 as u64);
        crate::api::datatype::remember_real(real, conv::handle(mpicr_virtid::Kind::Datatype, idx));
    }
    Ok(())
}

fn rebuild_ops() -> Result<(), String> {
    for (idx, _, op) in OBJ.ops.snapshot() {
        let real = crate::api::op::create_real(&op.recipe, op.slot).map_err(|rc| format!("rebuilding an op: {}", crate::errors::error_string(rc)))?;
        OBJ.ops.set_real(idx, real as u32 as u64);
    }
    Ok(())
}

fn rebuild_infos() -> Result<(), String> {
    let f = lower::fns();
    for (idx, _, info) in OBJ.infos.snapshot() {
        let mut real = MPI_INFO_NULL;
        // SAFETY: out-pointer and NUL-terminated strings.
        unsafe {
            check(f.MPI_Info_create.map_or(MPI_ERR_OTHER, |h| h(&mut real)), "MPI_Info_create")?;
            for (k, v) in &info.entries {
                let (k, v) = (std::ffi::CString::new(k.as_str()).unwrap_or_default(), std::ffi::CString::new(v.as_str()).unwrap_or_default());
                f.MPI_Info_set.map(|h| h(real, k.as_ptr(), v.as_ptr()));
            }
        }
        OBJ.infos.set_real(idx, real as u32 as u64);
    }
    Ok(())
}

/// User error classes/codes/strings and the buffered-send buffer.
fn replay_library_state() -> Result<(), String> {
    use crate::api::misc::UserError;
    let f = lower::fns();
    for e in crate::api::misc::user_errors() {
        let mut out = 0;
        // SAFETY: out-pointers are locals; strings are NUL-terminated.
        unsafe {
            match e {
                UserError::Class => f.MPI_Add_error_class.map(|h| h(&mut out)),
                UserError::Code { class } => f.MPI_Add_error_code.map(|h| h(class, &mut out)),
                UserError::String { code, text } => {
                    let t = std::ffi::CString::new(text).unwrap_or_default();
                    f.MPI_Add_error_string.map(|h| h(code, t.as_ptr()))
                }
            };
        }
    }
    if let Some((buf, size)) = crate::api::misc::attached_buffer() {
        // SAFETY: the program's buffer, still attached from its point of view.
        unsafe { f.MPI_Buffer_attach_c.map(|h| h(buf as *mut c_void, size)) };
    }
    Ok(())
}

fn dt(t: &TypeRef) -> c_int {
    match t {
        TypeRef::Predefined(h) => conv::datatype(*h),
        TypeRef::Derived(_) => MPI_DATATYPE_NULL,
    }
}

/// Posts cancelled receives again and re-creates persistent requests.
fn repost_requests() -> Result<(), String> {
    let f = lower::fns();
    for (idx, _, e) in OBJ.requests.snapshot() {
        let mut r = MPI_REQUEST_NULL;
        // SAFETY: the program's buffers and live translated handles.
        let rc = unsafe {
            match &e.recipe {
                RequestRecipe::Recv { args } if e.repost => {
                    if let Some(st) = crate::api::p2p::take_drained_into(args) {
                        OBJ.requests.with(idx, |x| {
                            x.done = Some(st.as_array());
                            x.repost = false;
                        });
                        continue;
                    }
                    f.MPI_Irecv_c.map_or(MPI_ERR_OTHER, |h| h(args.buf as *mut c_void, args.count, dt(&args.datatype), args.peer, args.tag, conv::comm(args.comm), &mut r))
                }
                RequestRecipe::PersistentRecv { args, active } => {
                    let rc = f.MPI_Recv_init_c.map_or(MPI_ERR_OTHER, |h| {
                        h(args.buf as *mut c_void, args.count, dt(&args.datatype), args.peer, args.tag, conv::comm(args.comm), &mut r)
                    });
                    if rc == MPI_SUCCESS && *active && e.repost {
                        if let Some(st) = crate::api::p2p::take_drained_into(args) {
                            OBJ.requests.with(idx, |x| x.done = Some(st.as_array()));
                        } else {
                            f.MPI_Start.map(|h| h(&mut r));
                        }
                    }
                    rc
                }
                RequestRecipe::PersistentSend { mode, args, .. } => {
                    let init = match mode {
                        SendMode::Standard => f.MPI_Send_init_c,
                        SendMode::Buffered => f.MPI_Bsend_init_c,
                        SendMode::Synchronous => f.MPI_Ssend_init_c,
                        SendMode::Ready => f.MPI_Rsend_init_c,
                    };
                    init.map_or(MPI_ERR_OTHER, |h| h(args.buf as *const c_void, args.count, dt(&args.datatype), args.peer, args.tag, conv::comm(args.comm), &mut r))
                }
                _ => MPI_SUCCESS,
            }
        };
        check(rc, "re-posting a request")?;
        OBJ.requests.set_real(idx, r as u32 as u64);
        OBJ.requests.with(idx, |x| x.repost = false);
    }
    Ok(())
}
