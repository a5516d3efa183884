//! Virtual MPI handles.
//!
//! The program only ever sees *virtual* handles (and the ABI's predefined constants). Each
//! handle kind has a [`Table`]: translating a virtual handle to the current real one is an
//! index into an array of atomics, not a hash lookup, so the hot path of every MPI call costs
//! two loads. Communicators also carry lock-free [`Counters`] (collectives started, messages
//! sent and received per peer) for the checkpoint's alignment and drain. Each live object also
//! keeps a [`recipe`] that is enough to rebuild it on a fresh
//! MPI library after a restore.
#![deny(unsafe_code)]

pub mod counters;
pub mod encoding;
pub mod handles;
pub mod recipe;
mod slots;
pub mod table;

pub use counters::{CommCounters, Counters, CountsSnapshot};
pub use encoding::{Kind, VirtualHandle};
pub use handles::{VComm, VDatatype, VErrhandler, VFile, VGroup, VInfo, VKeyval, VMessage, VOp, VRequest, VSession, VWin};
pub use recipe::*;
pub use table::{RealHandle, Table};
