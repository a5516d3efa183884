//! Application-level ranks (`mpicr run --mode app`): the program saves and restores its own
//! data (`mpicr_app_register`), and a checkpoint takes such a rank only where the program says
//! it may (`mpicr_safe_point`). Everything MPI holds is carried by the shim as for a transparent
//! rank (alignment, drain, `shim.state`); instead of a CRIU image the keeper keeps the program's
//! command line, and a restart starts the program afresh: its `MPI_Init` rebuilds every object
//! under its old virtual handle from `shim.state` ([`restore_at_init`]) and calls `restore`.
//!
//! A checkpoint on an app rank aligns as on any rank, and counts the rank aligned only once its
//! program thread parked at a safe point at the targets: while behind a target (a transparent
//! rank ran ahead through a broadcast it could finish alone, or the rank had not reached its
//! safe point yet), the thread runs on to its next safe point, and collectives it needs past the
//! targets wait and are asked for (`Wants`), as on any rank. After the release the parked thread runs `save` into the
//! rank's `app/` directory of the epoch ([`save`]).

use crate::core::checkpoint::{StateFile, STATE_FORMAT};
use crate::core::kinds::{op, RENEWAL_ORDER};
use crate::core::state::{OBJ, SELF_INDEX, WORLD_INDEX};
use crate::core::{agent, drained, renew};
use crate::lower;
use crate::lower::calls::init::ProgramArgs;
use crate::lower::handles::RealComm;
use parking_lot::{Condvar, Mutex};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Set by the keeper for an app-mode program.
pub const APP_MODE_ENV: &str = "MPICR_APP_MODE";
/// Set by the keeper when it restarts an app-mode program: the rank's directory of the epoch.
pub const APP_RESTORE_ENV: &str = "MPICR_APP_RESTORE";

/// The program's save or restore function, called with the data directory (the face wraps the
/// C function and the argument it registered with it).
pub type AppFn = std::sync::Arc<dyn Fn(&std::ffi::CStr) -> c_int + Send + Sync>;

/// Why the program's data could not be saved or restored, or a restarted app-mode rank could
/// not get its objects back: the one line the keeper hears and the program's stderr shows.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("nothing registered to {which} (mpicr_app_register)")]
    NothingRegistered { which: &'static str },
    /// The data directory's path holds a NUL.
    #[error("{0}")]
    DirName(#[from] std::ffi::NulError),
    #[error("the program's {which} function returned {rc} for {}", .dir.display())]
    Returned { which: &'static str, rc: c_int, dir: std::path::PathBuf },
    #[error("creating {}: {err}", .dir.display())]
    CreateDir { dir: std::path::PathBuf, err: std::io::Error },
    #[error("the program's save function did not return within {secs} s")]
    SaveTimeout { secs: u64 },
    /// The program's `restore` failed (or was not registered).
    #[error("restart of app-mode rank {rank} failed: {source}")]
    Restore { rank: i32, source: Box<AppError> },
    #[error("restart of an app-mode rank: {0}")]
    AwaitRestart(#[source] agent::AgentError),
    #[error("app mode needs the namespace renewal (unset MPICR_RENEW)")]
    NotNamespace,
    #[error("reading {}: {err}", .path.display())]
    ReadState { path: std::path::PathBuf, err: std::io::Error },
    #[error("decoding {}: {err}", .path.display())]
    DecodeState { path: std::path::PathBuf, err: postcard::Error },
    #[error("{} has state format {format}, this mpicr reads {}: restart it with the mpicr that wrote it", .path.display(), STATE_FORMAT)]
    StateFormat { path: std::path::PathBuf, format: u32 },
    #[error("the image has {image} ranks but the job has {job}")]
    Size { image: i32, job: i32 },
    #[error("restart of an app-mode rank: {0}")]
    FaceState(#[source] FaceStateError),
    #[error("MPI_Init: {0}")]
    Init(String),
    #[error("{0}")]
    Rebuild(#[from] crate::core::kinds::RebuildError),
}

/// Why a face's part of `shim.state` could not be put back ([`FaceState`]).
#[derive(Debug, thiserror::Error)]
pub enum FaceStateError {
    #[error("the {face}'s part of shim.state is damaged ({len} bytes)")]
    Damaged { face: &'static str, len: usize },
    #[error("the image was written under another MPI face than this program's")]
    OtherFace,
}

/// Is this process an app-mode rank? (Read once: the keeper sets it at the start.)
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var(APP_MODE_ENV).is_ok_and(|v| v == "1"))
}

struct Registered {
    save: AppFn,
    restore: AppFn,
}
static REGISTERED: Mutex<Option<Registered>> = Mutex::new(None);
/// The restart's rank directory, until `restore` ran (it runs at registration when the program
/// registers after `MPI_Init`).
static RESTORE_PENDING: Mutex<Option<String>> = Mutex::new(None);
static RESTARTED: AtomicBool = AtomicBool::new(false);

/// `mpicr_app_register`. Returns the result of `restore` when it ran now (a restarted process
/// that registered after `MPI_Init`), else 0.
pub fn register(save: AppFn, restore: AppFn) -> c_int {
    *REGISTERED.lock() = Some(Registered { save, restore });
    match RESTORE_PENDING.lock().take() {
        Some(dir) => match call_restore(&dir) {
            Ok(()) => 0,
            Err(e) => lower::fatal(&e.to_string()),
        },
        None => 0,
    }
}

pub fn registered() -> bool {
    REGISTERED.lock().is_some()
}

pub fn restarted() -> bool {
    RESTARTED.load(Ordering::Acquire)
}

/// The program's data directory inside a rank directory of an epoch.
pub fn data_dir(rank_dir: &std::path::Path) -> std::path::PathBuf {
    rank_dir.join("app")
}

fn call(which: &'static str, dir: &std::path::Path) -> Result<(), AppError> {
    let f = {
        let r = REGISTERED.lock();
        let Some(r) = r.as_ref() else { return Err(AppError::NothingRegistered { which }) };
        std::sync::Arc::clone(if which == "save" { &r.save } else { &r.restore })
    };
    let c = std::ffi::CString::new(dir.display().to_string())?;
    let rc = f(&c);
    if rc != 0 {
        return Err(AppError::Returned { which, rc, dir: dir.to_path_buf() });
    }
    Ok(())
}

fn call_restore(rank_dir: &str) -> Result<(), AppError> {
    let rank = crate::core::kinds::comm::world_rank();
    call("restore", &data_dir(std::path::Path::new(rank_dir))).map_err(|e| AppError::Restore { rank, source: Box::new(e) })
}

// --- Safe points -------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Park {
    /// No checkpoint wants this rank.
    Idle,
    /// A checkpoint waits for the program to reach a safe point.
    Wanted,
    /// The program thread waits in `mpicr_safe_point`.
    Parked,
}

struct Safe {
    park: Park,
    /// A save the agent asked the parked thread for, and its outcome.
    save_dir: Option<std::path::PathBuf>,
    saved: Option<Result<(), AppError>>,
}
static SAFE: Mutex<Safe> = Mutex::new(Safe { park: Park::Idle, save_dir: None, saved: None });
static SAFE_CHANGED: Condvar = Condvar::new();
/// Fast path of `mpicr_safe_point`: false unless a checkpoint wants this rank.
static WANTED: AtomicBool = AtomicBool::new(false);
/// Calls of `mpicr_safe_point` while a checkpoint wanted this rank (reset by [`want`]): what a
/// safe point that was never reached says of the program (it never came back to one, or came
/// back only behind its targets).
static CALLS_WANTED: AtomicU64 = AtomicU64::new(0);
/// The program is on its way into `MPI_Finalize`: it has no safe point left.
static FINISHING: AtomicBool = AtomicBool::new(false);

/// `mpicr_safe_point`: parks the calling thread while a checkpoint takes this rank. Returns
/// at once when none does, or when this rank must run on to reach its collective targets.
pub fn safe_point() -> c_int {
    if !WANTED.load(Ordering::Acquire) {
        return 0;
    }
    CALLS_WANTED.fetch_add(1, Ordering::Relaxed);
    let mut s = SAFE.lock();
    loop {
        match s.park {
            Park::Idle => return 0,
            Park::Wanted | Park::Parked => {}
        }
        if let Some(dir) = s.save_dir.take() {
            drop(s);
            let r = std::fs::create_dir_all(&dir).map_err(|err| AppError::CreateDir { dir: dir.clone(), err }).and_then(|_| call("save", &dir));
            s = SAFE.lock();
            s.saved = Some(r);
            SAFE_CHANGED.notify_all();
            continue;
        }
        // While aligning, park only at the targets: behind them, the rank runs on.
        let behind = agent::aligning() && crate::core::checkpoint::behind_targets();
        if behind {
            if s.park == Park::Parked {
                s.park = Park::Wanted;
            }
            return 0;
        }
        if s.park != Park::Parked {
            s.park = Park::Parked;
            agent::notify_progress();
        }
        SAFE_CHANGED.wait_for(&mut s, Duration::from_millis(50));
    }
}

/// Wakes a parked thread to look again (targets changed).
pub fn poke() {
    if WANTED.load(Ordering::Acquire) {
        SAFE_CHANGED.notify_all();
    }
}

/// The agent: a checkpoint wants this rank at a safe point.
pub(crate) fn want() {
    let mut s = SAFE.lock();
    s.park = Park::Wanted;
    s.save_dir = None;
    s.saved = None;
    CALLS_WANTED.store(0, Ordering::Relaxed);
    WANTED.store(true, Ordering::Release);
}

/// `MPI_Finalize` (before it waits for its turn as a collective): a checkpoint that waits for
/// this rank's safe point can stop waiting, there is none left.
pub fn finishing() {
    if !enabled() {
        return;
    }
    FINISHING.store(true, Ordering::SeqCst);
    if WANTED.load(Ordering::Acquire) {
        agent::notify_progress();
    }
}

/// Has the program started `MPI_Finalize`?
pub(crate) fn is_finishing() -> bool {
    FINISHING.load(Ordering::SeqCst)
}

/// How many times the program called `mpicr_safe_point` since the checkpoint wanted it.
pub(crate) fn calls_since_wanted() -> u64 {
    CALLS_WANTED.load(Ordering::Relaxed)
}

/// Why an app-mode rank was not taken at a safe point, for the checkpoint's error: `calls`
/// since the checkpoint began (each one behind its collective targets), what its program waits
/// to start past them (`waiting`: made by, number, target), whether it is in `MPI_Finalize`.
pub(crate) fn not_reached(rank: i32, calls: u64, waiting: &[(String, u64, u64)], finishing: bool) -> String {
    let mut why = if finishing {
        format!("app-mode rank {rank} did not reach mpicr_safe_point(): its program ended its loop, the program is finalizing MPI (no safe point is left)")
    } else if calls == 0 {
        format!("app-mode rank {rank} did not reach mpicr_safe_point(): its program did not call it since the checkpoint began")
    } else {
        format!("app-mode rank {rank} did not reach mpicr_safe_point(): its program called it {calls} time(s) since the checkpoint began, behind its collective targets each time")
    };
    // (Finishing, it waits for its MPI_Finalize, counted as a collective: nothing to add.)
    if let Some((made_by, n, target)) = waiting.first().filter(|_| !finishing) {
        why.push_str(&format!("; it waits to start collective {n} on a communicator made by {made_by} (target {target})"));
    }
    why
}

pub(crate) fn parked() -> bool {
    SAFE.lock().park == Park::Parked
}

/// The agent: the checkpoint ended (taken or failed); a parked thread returns.
pub(crate) fn release() {
    let mut s = SAFE.lock();
    s.park = Park::Idle;
    s.save_dir = None;
    WANTED.store(false, Ordering::Release);
    SAFE_CHANGED.notify_all();
}

/// The agent, after the release: the parked thread runs the program's `save` into `dir`.
pub(crate) fn save(dir: std::path::PathBuf, limit: Duration) -> Result<(), AppError> {
    let mut s = SAFE.lock();
    s.save_dir = Some(dir);
    s.saved = None;
    SAFE_CHANGED.notify_all();
    let deadline = std::time::Instant::now() + limit;
    while s.saved.is_none() {
        if SAFE_CHANGED.wait_until(&mut s, deadline).timed_out() && s.saved.is_none() {
            return Err(AppError::SaveTimeout { secs: limit.as_secs() });
        }
    }
    s.saved.take().unwrap_or(Ok(()))
}

// --- Restart -----------------------------------------------------------------------------

/// The rank directory a restarted app-mode process restores from (taken once).
pub fn take_restore_dir() -> Option<String> {
    let d = std::env::var(APP_RESTORE_ENV).ok().filter(|d| !d.is_empty())?;
    std::env::remove_var(APP_RESTORE_ENV);
    Some(d)
}

fn read_state(rank_dir: &str) -> Result<StateFile, AppError> {
    let path = std::path::Path::new(rank_dir).join("shim.state");
    let bytes = std::fs::read(&path).map_err(|err| AppError::ReadState { path: path.clone(), err })?;
    // The format comes first: an older layout is named as such, not as a decoding error.
    let format: u32 = postcard::take_from_bytes(&bytes).map(|(f, _)| f).map_err(|err| AppError::DecodeState { path: path.clone(), err })?;
    if format != STATE_FORMAT {
        return Err(AppError::StateFormat { path, format });
    }
    postcard::from_bytes(&bytes).map_err(|err| AppError::DecodeState { path, err })
}

/// What a face that is not MPICH's keeps of its own for the program's callbacks (the program's
/// functions behind its trampolines): a restarted app-mode process gets its objects back from
/// `shim.state` without the program making them again, so the face's part travels there too.
/// Addresses in it stay valid: app-mode processes run without address-space randomisation.
pub struct FaceState {
    pub save: fn() -> Vec<u8>,
    pub restore: fn(&[u8]) -> Result<(), FaceStateError>,
}
static FACE_STATE: std::sync::OnceLock<FaceState> = std::sync::OnceLock::new();

/// Called once by a foreign face when it is loaded.
pub fn register_face_state(f: FaceState) {
    let _ = FACE_STATE.set(f);
}

/// The face's state for `shim.state` (empty for MPICH's face).
pub fn face_state() -> Vec<u8> {
    FACE_STATE.get().map_or_else(Vec::new, |f| (f.save)())
}

fn restore_face_state(bytes: &[u8]) -> Result<(), FaceStateError> {
    match FACE_STATE.get() {
        Some(f) => (f.restore)(bytes),
        None if bytes.is_empty() => Ok(()),
        None => Err(FaceStateError::OtherFace),
    }
}

fn typed<R: mpicr_virtid::RealHandle, E>(items: Vec<(u32, u64, E)>) -> Vec<(u32, R, E)> {
    items.into_iter().map(|(i, b, e)| (i, R::from_bits(b), e)).collect()
}

/// Puts every table back as the checkpoint left it (real handles are stale until rebuilt).
fn install(s: StateFile) {
    OBJ.comms.restore_all(typed(s.comms));
    OBJ.groups.restore(typed(s.groups));
    OBJ.datatypes.restore(typed(s.datatypes));
    OBJ.ops.restore(typed(s.ops));
    OBJ.infos.restore(typed(s.infos));
    OBJ.requests.restore(typed(s.requests));
    OBJ.keyvals.restore(typed(s.keyvals));
    OBJ.errhandlers.restore(typed(s.errhandlers));
    OBJ.files.restore(typed(s.files));
    OBJ.wins.restore(typed(s.wins));
    op::restore_slots();
    crate::core::kinds::library::restore_user_errors(s.user_errors);
    drained::replace(s.drained);
}

/// `MPI_Init` of a restarted app-mode process: waits for the keeper's word that every rank
/// restored (`Resume`), initialises the library, rebuilds every object of `shim.state` under
/// its old virtual handle, and calls the program's `restore` (now, or at registration).
/// Returns the thread level the library provides. `args`: the program's `argc`/`argv`.
pub fn restore_at_init(rank_dir: &str, args: ProgramArgs, level: c_int) -> Result<c_int, AppError> {
    let size = agent::await_restart().map_err(AppError::AwaitRestart)?;
    if renew::strategy() != renew::Strategy::Namespace {
        return Err(AppError::NotNamespace);
    }
    let state = read_state(rank_dir)?;
    if state.world_size != size {
        return Err(AppError::Size { image: state.world_size, job: size });
    }
    let generation = state.generation;
    restore_face_state(&state.face).map_err(AppError::FaceState)?;
    install(state);
    for kind in RENEWAL_ORDER {
        kind.forget();
    }
    crate::core::kinds::win::map_saved()?;
    for kind in RENEWAL_ORDER {
        kind.before_renewal()?;
    }
    let (world, selfc, provided) = renew::init_lower(args, level).map_err(|rc| AppError::Init(lower::error_string(rc)))?;
    crate::core::kinds::comm::errors_return_on(world);
    crate::core::kinds::comm::errors_return_on(selfc);
    OBJ.comms.set_real(WORLD_INDEX, RealComm(world));
    OBJ.comms.set_real(SELF_INDEX, RealComm(selfc));
    for kind in RENEWAL_ORDER {
        kind.rebuild()?;
    }
    // The launcher's PMI relay numbered this library generation + 1 (as for the restored
    // ranks); the next renewal must announce the one after.
    lower::continue_numbering(generation + 2);
    RESTARTED.store(true, Ordering::Release);
    if registered() {
        call_restore(rank_dir)?;
    } else {
        *RESTORE_PENDING.lock() = Some(rank_dir.to_string());
    }
    Ok(provided)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_safe_point_not_reached_says_where_the_program_was() {
        let never = not_reached(0, 0, &[], false);
        assert!(never.starts_with("app-mode rank 0 did not reach mpicr_safe_point()"), "{never}");
        assert!(never.contains("did not call it since the checkpoint began"), "{never}");
        let behind = not_reached(1, 3, &[("MPI_Comm_split".into(), 17, 16)], false);
        assert!(behind.contains("called it 3 time(s)") && behind.contains("behind its collective targets"), "{behind}");
        assert!(behind.contains("waits to start collective 17 on a communicator made by MPI_Comm_split (target 16)"), "{behind}");
        // A program past its last safe point says so, in the words of a checkpoint that came
        // during MPI_Finalize (the harnesses count both alike).
        let ended = not_reached(0, 5, &[("MPI_Init".into(), 40, 39)], true);
        assert!(ended.contains("ended its loop") && ended.contains("the program is finalizing MPI"), "{ended}");
        assert!(!ended.contains("waits to start"), "{ended}");
    }

    #[test]
    fn errors_read_as_the_lines_users_see() {
        let returned = AppError::Returned { which: "restore", rc: 7, dir: "/e/rank.0/app".into() };
        let e = AppError::Restore { rank: 0, source: Box::new(returned) };
        assert_eq!(e.to_string(), "restart of app-mode rank 0 failed: the program's restore function returned 7 for /e/rank.0/app");
        let e = AppError::StateFormat { path: "/e/shim.state".into(), format: 1 };
        assert_eq!(e.to_string(), format!("/e/shim.state has state format 1, this mpicr reads {STATE_FORMAT}: restart it with the mpicr that wrote it"));
        let e = AppError::FaceState(FaceStateError::Damaged { face: "Open MPI face", len: 12 });
        assert_eq!(e.to_string(), "restart of an app-mode rank: the Open MPI face's part of shim.state is damaged (12 bytes)");
    }

    #[test]
    fn finishing_is_noted_only_for_app_mode_ranks() {
        // Not an app-mode process (no MPICR_APP_MODE in the test's environment).
        finishing();
        assert!(!is_finishing());
    }

    #[test]
    fn calls_are_counted_only_while_wanted() {
        // No checkpoint wants this rank: the fast path counts nothing.
        assert_eq!(safe_point(), 0);
        assert_eq!(calls_since_wanted(), 0);
    }
}
