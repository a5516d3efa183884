//! Virtual MPI handles.
//!
//! The program only ever sees *virtual* handles (and the ABI's predefined constants). Each
//! handle kind has a [`Table`]: translating a virtual handle to the current real one is an
//! index into an array of atomics, not a hash lookup, so the hot path of every MPI call costs
//! two loads. Each live object also keeps a [`recipe`] that is enough to rebuild it on a fresh
//! MPI library after a restore.
#![deny(unsafe_code)]

pub mod encoding;
pub mod recipe;
pub mod table;

pub use encoding::{Kind, VirtualHandle};
pub use recipe::*;
pub use table::Table;
