//! Hand-written MPI functions (policy bucket `hand`), one module per area, and the helpers the
//! generated wrappers call (`register_*`, recipes). Conventions: enter the gate for as long as
//! real handles are in use and never across a wait; translate with `conv`; report failures
//! through `errors::raise_*` after leaving the gate, so user error handlers may call MPI
//! (`face::call::run` does all of this for a wrapper body).
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

#[macro_use]
pub(crate) mod util;
pub(crate) mod attr;
pub(crate) mod buffer;
pub(crate) mod coll;
pub(crate) mod comm;
pub(crate) mod datatype;
pub(crate) mod dynamic;
pub(crate) mod errhandler;
pub(crate) mod file;
pub(crate) mod file_sequential;
pub(crate) mod group;
pub(crate) mod info;
pub(crate) mod init;
pub(crate) mod misc;
pub(crate) mod op;
pub(crate) mod p2p;
pub(crate) mod request;
pub(crate) mod rma;
pub(crate) mod session;
pub mod ulfm;

pub use attr::*;
pub use buffer::*;
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
pub use ulfm::*;

pub(crate) use util::*;
