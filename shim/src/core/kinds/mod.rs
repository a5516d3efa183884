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
    fn before_renewal(&self) -> Result<(), String> {
        Ok(())
    }
    /// Rebuilds every real object from its recipe on the renewed library.
    fn rebuild(&self) -> Result<(), String> {
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

/// A return code of the real library as a `Result` naming the call.
pub(crate) fn check(rc: std::os::raw::c_int, what: &str) -> Result<(), String> {
    if rc == crate::lower::abi::MPI_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {}", crate::lower::error_string(rc)))
    }
}
