//! The program's own MPI sessions (MPI-4 sessions model). The recipe is the info the program
//! passed to `MPI_Session_init` (its keys and values; the error handler lives in the shim).
//! A renewal opens a new real session with that info on the renewed library; what hangs off
//! a session needs nothing of it there: groups from its process sets are recorded as world
//! ranks (`group`), communicators made from them as world ranks and a job-wide id (`comm`),
//! and both are rebuilt from the renewed library's world like any other. A program of sessions
//! only gets that world underneath at its first session (`face::api::init::bring_up_lower`).

use super::{check, RebuildError, Renewable};
use crate::core::state::OBJ;
use crate::lower;
use crate::lower::abi::*;
use crate::lower::calls;
use crate::lower::handles::RealSession;
use mpicr_virtid::table::Full;
use mpicr_virtid::{VErrhandler, VSession};
use serde::{Deserialize, Serialize};

/// Registers a session the library opened. `Err` when the table is full.
pub fn register(real: RealSession, entry: SessionEntry) -> Result<VSession, Full> {
    OBJ.sessions.insert(real, entry).map(VSession::virtual_at)
}

/// Forgets a session the program finalized.
pub fn forget(v: VSession) {
    if let Some(i) = v.index() {
        OBJ.sessions.remove(i);
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionEntry {
    pub errhandler: VErrhandler,
    /// The keys and values of the info given to `MPI_Session_init`.
    #[serde(default)]
    pub info: Vec<(String, String)>,
    /// The buffer for buffered sends attached to the session (`MPI_Session_attach_buffer`:
    /// address and size), kept by mpicr alone (`core::bsend`), so it needs no renewal.
    #[serde(default)]
    pub buffer: Option<(usize, i64)>,
}

/// A group was made while the lower half had no world model (a session's process set in an
/// app-mode rank, whose sessions do not bring one up): its recipe could not be expressed in
/// world ranks.
static GROUP_WITHOUT_WORLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn note_group_without_world() {
    GROUP_WITHOUT_WORLD.store(true, std::sync::atomic::Ordering::Release);
}

/// Opens a real session with `info`'s entries, errors returned (the shim raises them).
fn open(info: &[(String, String)]) -> Result<RealSession, RebuildError> {
    let real_info = if info.is_empty() { MPI_INFO_NULL } else { super::info::build(info)? };
    let mut s = MPI_SESSION_NULL;
    let rc = calls::init::session_init(real_info, MPI_ERRORS_RETURN, &mut s).unwrap_or(MPI_ERR_OTHER);
    if real_info != MPI_INFO_NULL {
        super::info::free(real_info);
    }
    check(rc, "MPI_Session_init (the program's session)")?;
    Ok(RealSession(s))
}

/// The session kind around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    fn refusal(&self) -> Option<String> {
        if GROUP_WITHOUT_WORLD.load(std::sync::atomic::Ordering::Acquire) {
            return Some("a group the program made from an MPI session's process set while mpicr had no world model underneath (in an app-mode rank), whose world ranks mpicr cannot know, cannot be checkpointed yet".into());
        }
        if OBJ.sessions.is_empty() {
            return None;
        }
        if crate::core::app::enabled() {
            return Some("an MPI session (MPI_Session_init) held by an app-mode rank cannot be checkpointed yet (a restarted app-mode process does not get it back): finalize it before mpicr_safe_point()".into());
        }
        None
    }

    /// Finalizes the program's real sessions of the generation being released. Here and not
    /// in `free_real`: that also runs when the `sessions` renewal ends a generation at the
    /// program's MPI_Finalize, where the program's sessions stay open. Called after every
    /// kind freed its real objects (`renew::release`), so no communicator or group of the
    /// session is left.
    fn forget(&self) {
        for (idx, r, _) in OBJ.sessions.snapshot() {
            let mut r = r.raw();
            // A live real session of the current generation, finalized once.
            let rc = calls::init::session_finalize(&mut r).unwrap_or(MPI_ERR_OTHER);
            if rc != MPI_SUCCESS {
                tracing::debug!(target: "renew", session = idx, error = %lower::error_string(rc), "MPI_Session_finalize at release");
            }
        }
    }

    fn rebuild(&self) -> Result<(), RebuildError> {
        for (idx, _, s) in OBJ.sessions.snapshot() {
            OBJ.sessions.set_real(idx, open(&s.info)?);
        }
        Ok(())
    }
}
