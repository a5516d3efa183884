//! Hand-written MPI functions (policy buckets `hand` and `create`), one module per area.
//! Conventions: enter the gate for as long as real handles are in use and never across a
//! wait; translate with `conv`; report failures through `errors::raise_*` after leaving the
//! gate, so user error handlers may call MPI.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

#[macro_use]
mod util;
mod attr;
mod coll;
mod comm;
mod datatype;
mod dynamic;
mod errhandler;
mod file;
mod group;
mod info;
mod init;
mod misc;
mod op;
mod p2p;
mod request;
mod rma;
mod session;

pub use attr::*;
pub use coll::*;
pub use comm::*;
pub use datatype::*;
pub use dynamic::*;
pub use errhandler::*;
pub use file::*;
pub use group::*;
pub use info::*;
pub use init::*;
pub use misc::*;
pub use op::*;
pub use p2p::*;
pub use request::*;
pub use rma::*;
pub use session::*;

pub(crate) use util::*;
