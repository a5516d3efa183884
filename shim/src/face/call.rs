//! The one wrapper skeleton: enter the gate, convert the program's handles, call the real
//! library, leave the gate, and only then report a failure through the right error handler
//! (user handlers may call MPI, and a checkpoint must be able to close the gate meanwhile).
//!
//! ```ignore
//! call::run("MPI_Group_incl", On::Default, || {
//!     let group_r = Group(group).to_real()?;
//!     let mut out = MPI_GROUP_NULL;
//!     call::ok(real!(MPI_Group_incl(group_r, n, ranks, &mut out)))?;
//!     // still inside the gate: register the new object, write the out-parameter
//!     Ok(())
//! })
//! ```
//!
//! The body returns `Err(rc)` for a failed conversion or call; `real!` of a function the real
//! library lacks returns `Err` too, after noting the function so that the error is raised as
//! "not provided" ([`errors::note_missing`]) once the gate is left.

use crate::core::gate;
use crate::face::abi::*;
use crate::face::{conv, errors};
use std::os::raw::c_int;

/// Whose error handler a failure of the call goes to.
#[derive(Clone, Copy)]
pub enum On {
    /// MPI_COMM_WORLD's (errors not tied to an object).
    Default,
    Comm(MPI_Comm),
    Win(MPI_Win),
    File(MPI_File),
    Session(MPI_Session),
}

impl On {
    /// Raises `rc` through this object's error handler (outside the gate).
    #[cold]
    pub fn raise(self, rc: c_int, name: &str) -> c_int {
        match self {
            On::Default => errors::raise_default(rc, name),
            On::Comm(c) => errors::raise_comm(c, rc, name),
            On::Win(w) => errors::raise_win(w, rc, name),
            On::File(f) => errors::raise_file(f, rc, name),
            On::Session(s) => errors::raise_session(s, rc, name),
        }
    }
}

/// Runs `body` inside the gate; a failure is raised through `on`'s handler after leaving it.
#[inline(always)]
pub fn run(name: &str, on: On, body: impl FnOnce() -> Result<(), c_int>) -> c_int {
    run_in(gate::enter(), name, on, body)
}

/// [`run`] inside a gate already entered: `g` from `gate::enter` or, for a collective, from
/// `api::begin_collective` (which also counts the call for checkpoint alignment).
#[inline(always)]
pub fn run_in(g: gate::Guard, name: &str, on: On, body: impl FnOnce() -> Result<(), c_int>) -> c_int {
    let r = body();
    drop(g);
    match r {
        Ok(()) => MPI_SUCCESS,
        Err(rc) => on.raise(rc, name),
    }
}

/// [`run`] for a wrapper with more to do after a successful call, outside the gate:
/// `Err` carries what the wrapper returns after a failure (the error handler's answer).
#[inline(always)]
pub fn try_run(name: &str, on: On, body: impl FnOnce() -> Result<(), c_int>) -> Result<(), c_int> {
    let g = gate::enter();
    let r = body();
    drop(g);
    r.map_err(|rc| on.raise(rc, name))
}

/// A real call's return code as a `Result`, for `?`.
#[inline(always)]
pub fn ok(rc: c_int) -> Result<(), c_int> {
    if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(rc)
    }
}

/// A program handle converted to the real library's, for `?` in a wrapper body.
pub trait ToReal {
    type Real;
    fn to_real(self) -> Result<Self::Real, c_int>;
}

macro_rules! total_kind {
    ($(#[$m:meta])* $ty:ident, $raw:ty, $conv:path) => {
        $(#[$m])*
        pub struct $ty(pub $raw);
        impl ToReal for $ty {
            type Real = $raw;
            #[inline(always)]
            fn to_real(self) -> Result<$raw, c_int> {
                Ok($conv(self.0))
            }
        }
    };
}

total_kind!(/// A communicator passed on (translation is total, see [`conv`]).
    Comm, MPI_Comm, conv::comm);
total_kind!(/// A group.
    Group, MPI_Group, conv::group);
total_kind!(/// A datatype.
    Datatype, MPI_Datatype, conv::datatype);
total_kind!(/// A reduction operation.
    Op, MPI_Op, conv::op);
total_kind!(/// An info object.
    Info, MPI_Info, conv::info);
total_kind!(/// A window passed on.
    Win, MPI_Win, conv::win);
total_kind!(/// A file.
    File, MPI_File, conv::file);
total_kind!(/// A session.
    Session, MPI_Session, conv::session);

/// A communicator the call's errors are reported on: refused with MPI_ERR_COMM where
/// [`conv::comm_checked`] refuses it.
pub struct CheckedComm(pub MPI_Comm);
impl ToReal for CheckedComm {
    type Real = MPI_Comm;
    #[inline(always)]
    fn to_real(self) -> Result<MPI_Comm, c_int> {
        conv::comm_checked(self.0)
    }
}

/// A window the call's errors are reported on (see [`CheckedComm`]).
pub struct CheckedWin(pub MPI_Win);
impl ToReal for CheckedWin {
    type Real = MPI_Win;
    #[inline(always)]
    fn to_real(self) -> Result<MPI_Win, c_int> {
        conv::win_checked(self.0)
    }
}

/// What `real!` returns from a wrapper (or a wrapper's body) when the real library lacks the
/// function: the error code, with the function noted so that it is raised as "not provided"
/// after the gate is left (by the skeleton, the wrapper's own `errors::raise_*`, or the panic
/// boundary of the export).
pub trait FromMissing {
    fn from_missing(name: &'static str) -> Self;
}

impl FromMissing for c_int {
    #[cold]
    fn from_missing(name: &'static str) -> c_int {
        errors::note_missing(name);
        MPI_ERR_UNSUPPORTED_OPERATION
    }
}

impl<T> FromMissing for Result<T, c_int> {
    #[cold]
    fn from_missing(name: &'static str) -> Self {
        errors::note_missing(name);
        Err(MPI_ERR_UNSUPPORTED_OPERATION)
    }
}

#[cold]
pub fn missing<R: FromMissing>(name: &'static str) -> R {
    R::from_missing(name)
}
