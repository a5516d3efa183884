//! One module per kind of object: its entry in the tables ([`crate::core::state`]), how its
//! real objects are made from its recipe, what a checkpoint reads back from the library before
//! the release, and how a renewal rebuilds it. Each kind implements [`Renewable`]; the
//! checkpoint (`core::checkpoint`) and the renewal (`core::renew`) only walk the lists below.

pub mod comm;
pub mod create_group;
pub mod datatype;
pub mod errhandler;
pub mod file;
pub mod group;
pub mod info;
pub mod keyval;
pub mod library;
pub mod message;
pub mod op;
pub mod part;
pub mod pcoll;
pub mod request;
pub mod session;
pub mod win;

use std::os::raw::c_int;

/// What every kind of object does around a checkpoint. Every step has a default that does
/// nothing: kinds that live in the shim only (error handlers, keyvals) have no real objects.
pub trait Renewable: Sync {
    /// Why a checkpoint cannot carry this kind's live objects now (asked before aligning,
    /// while nothing has been stopped): the one-line error the user sees.
    fn refusal(&self) -> Option<String> {
        None
    }
    /// Reads back from the real library what the recipes lack (names, info entries), once every
    /// rank drained and just before the release.
    fn snapshot(&self) {}
    /// Drops what the kind caches about the real handles of the generation being released.
    fn forget(&self) {}
    /// Frees the real objects of the current generation: before a release (the library would
    /// report what is left at its finalize, on the program's stderr), and with the `sessions`
    /// strategy before its session is finalized.
    fn free_real(&self) {}
    /// What a renewal needs from outside the process, checked before the library is loaded
    /// (files still on disk after a restart): the one-line error of a renewal that cannot be.
    fn before_renewal(&self) -> Result<(), RebuildError> {
        Ok(())
    }
    /// Rebuilds every real object from its recipe on the renewed library.
    fn rebuild(&self) -> Result<(), RebuildError> {
        Ok(())
    }
}

/// The kinds in rebuild order: a kind's recipes may refer to kinds before it (requests to
/// communicators and datatypes), and communicators come first (rebuilding them is collective).
/// Snapshots and forgetting go in the same order.
pub static RENEWAL_ORDER: &[&dyn Renewable] = &[
    &comm::Renew,
    &group::Renew,
    &datatype::Renew,
    &op::Renew,
    &info::Renew,
    &session::Renew,
    &library::Renew,
    &file::Renew,
    &win::Renew,
    &request::Renew,
    &message::Renew,
    &errhandler::Renew,
    &keyval::Renew,
];

/// The order real objects are freed in: requests before what they use, files and windows
/// before their communicators.
pub static FREE_ORDER: &[&dyn Renewable] =
    &[&request::Renew, &file::Renew, &win::Renew, &comm::Renew, &group::Renew, &datatype::Renew, &op::Renew, &info::Renew];

/// The order checkpoints are refused in (the first refusal is the one reported).
pub static REFUSAL_ORDER: &[&dyn Renewable] = &[&file::Renew, &win::Renew, &session::Renew, &comm::Renew, &request::Renew, &library::Renew];

/// Why a kind's real objects could not be made again on a renewed library (or, at the drain's
/// end, why its pending receives could not be cancelled or its matched messages received): the
/// one line the renewal, the checkpoint or the restart reports.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// A call of the real library failed: what was done, and the library's words for its code
    /// (read when it failed: the library may be gone when the error is shown).
    #[error("{what}: {reason}")]
    Mpi { what: String, reason: String },
    #[error("MPI_Comm_group(MPI_COMM_WORLD) failed")]
    WorldGroup,
    #[error("an intercommunicator without a remote group")]
    NoRemoteGroup,
    #[error("the MPI file {path}, open in the program at the checkpoint ({size} bytes then), cannot be opened again: {err}; put it back as it was at the checkpoint")]
    FileGone { path: String, size: i64, err: std::io::Error },
    #[error("the MPI file {path}, open in the program at the checkpoint, has {now} bytes, fewer than the {then} it had then; put it back as it was at the checkpoint")]
    FileShrunk { path: String, now: u64, then: i64 },
    #[error("the MPI file name {0:?} holds a NUL")]
    FileNameNul(String),
    /// Restoring a reopened file failed.
    #[error("the MPI file {name}: {source}")]
    File { name: String, source: Box<RebuildError> },
    #[error("replaying {error:?}: the renewed library gave {got}, not {want}")]
    Replayed { error: library::UserError, got: c_int, want: c_int },
    #[error("receiving a matched-probe message failed")]
    MatchedProbe,
    #[error("its reduction op was freed")]
    OpFreed,
    #[error("making a persistent collective again ({function}): {source}")]
    Collective { function: String, source: Box<RebuildError> },
    #[error("a pending receive could not be cancelled")]
    CancelReceive,
    #[error("the memory of the window from {made_by} cannot be mapped again at {base:#x} ({len} bytes): {err}")]
    WinMemory { made_by: String, base: usize, len: usize, err: std::io::Error },
    #[error("the shared window from {made_by} cannot be mapped again at {start:#x} ({len} bytes): {err}")]
    SharedReserve { made_by: String, start: usize, len: usize, err: std::io::Error },
    /// Making or restoring a window failed.
    #[error("the window from {made_by}: {source}")]
    Window { made_by: String, source: Box<RebuildError> },
    #[error("its new shared segment cannot be queried")]
    SegmentQuery,
    #[error("its new shared segment has another layout ({len} bytes, this rank's part at {part:#x}) than before ({old_len} bytes)")]
    SegmentLayout { len: usize, part: usize, old_len: usize },
    /// `got`: what mremap returned; `maps`: the lines of /proc/self/maps around the segment.
    #[error("its new shared segment ({start:#x}, {len} bytes) cannot be mapped at {at:#x}: {err} (got {got:#x}; maps: {maps})")]
    SegmentMap { start: usize, len: usize, at: usize, err: std::io::Error, got: usize, maps: String },
}

impl RebuildError {
    /// The real library's return code `rc` of `what`.
    pub(crate) fn mpi(what: impl Into<String>, rc: c_int) -> Self {
        RebuildError::Mpi { what: what.into(), reason: crate::lower::error_string(rc) }
    }
}

/// A return code of the real library as a `Result` naming the call.
pub(crate) fn check(rc: c_int, what: &str) -> Result<(), RebuildError> {
    if rc == crate::lower::abi::MPI_SUCCESS {
        Ok(())
    } else {
        Err(RebuildError::mpi(what, rc))
    }
}

#[cfg(test)]
mod tests {
    use super::RebuildError;

    #[test]
    fn errors_read_as_the_lines_users_see() {
        let inner = RebuildError::Mpi { what: "MPI_Win_fence".into(), reason: "Invalid win".into() };
        let e = RebuildError::Window { made_by: "MPI_Win_allocate".into(), source: Box::new(inner) };
        assert_eq!(e.to_string(), "the window from MPI_Win_allocate: MPI_Win_fence: Invalid win");
        let e = RebuildError::SegmentMap {
            start: 0x7f00_0000_1000,
            len: 4096,
            at: 0x7f00_0000_0000,
            err: std::io::Error::from_raw_os_error(12),
            got: usize::MAX,
            maps: "m".into(),
        };
        let p = usize::MAX as *mut std::ffi::c_void;
        assert_eq!(
            e.to_string(),
            format!(
                "its new shared segment (0x7f0000001000, 4096 bytes) cannot be mapped at 0x7f0000000000: {} (got {p:?}; maps: m)",
                std::io::Error::from_raw_os_error(12)
            )
        );
        let e = RebuildError::FileShrunk { path: "/d/f".into(), now: 3, then: 9 };
        assert_eq!(
            e.to_string(),
            "the MPI file /d/f, open in the program at the checkpoint, has 3 bytes, fewer than the 9 it had then; put it back as it was at the checkpoint"
        );
    }
}
