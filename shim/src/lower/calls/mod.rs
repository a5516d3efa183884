//! Safe calls into the real library, for the core: each wrapper takes handles, plain values,
//! `&mut` out-parameters, slices (whose lengths give the counts the call reads) and C strings,
//! and returns the library's return code, `None` where the library lacks the function (so a
//! caller keeps its own `unwrap_or(MPI_ERR_OTHER)`, `?` or nothing, as it did with the table).
//!
//! The one `unsafe` call is in [`real!`]; each wrapper documents what makes its arguments fit.
//! Grouped by kind: [`init`] (the library's life, sessions, infos, errors), [`comm`]
//! (communicators, groups, topologies, the world exchange), [`win`], [`request`],
//! [`datatype`], [`op`], [`file`]; [`object`] holds what every kind shares (free, names).

// The wrappers mirror MPI's argument lists.
#![allow(clippy::too_many_arguments)]

pub mod coll;
pub mod comm;
pub mod datatype;
pub mod file;
pub mod init;
pub mod object;
pub mod op;
pub mod p2p;
pub mod request;
pub mod win;

/// Calls the real library's `$f` with `$args`: `Some(rc)`, or `None` where the library lacks it.
///
/// Private to the wrappers of this module, whose arguments are handles, values, and pointers
/// made from live references, slices and C strings of the sizes the call reads.
macro_rules! real {
    ($f:ident($($a:expr),* $(,)?)) => {
        // SAFETY: every wrapper of `lower::calls` passes only handles, plain values, and
        // pointers made from live references, slices and NUL-terminated strings, of the sizes
        // the call reads or writes (the counts passed come from the slices' lengths, or the
        // wrapper checks them); the function is the current generation's.
        $crate::lower::fns().$f.map(|g| unsafe { g($($a),*) })
    };
}
pub(crate) use real;
