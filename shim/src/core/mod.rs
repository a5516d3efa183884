//! The core: virtual objects and their tables ([`state`]), one module per kind of object
//! ([`kinds`]), the [`gate`], the checkpoint agent ([`agent`]) and what it runs: the checkpoint
//! ([`checkpoint`]) and the renewal of the lower half ([`renew`]), with the messages the drain
//! took out of the network ([`drained`]).
//!
//! The core knows the virtual handles of `mpicr_virtid` and drives the real library through
//! [`crate::lower`] with the lower half's ABI; it never imports the face (the program's ABI),
//! which calls into it (`shim/tests/layers.rs` checks this).
//!
//! No `unsafe` here: every call into the real library, the kernel or the program goes through
//! a safe function of [`crate::lower`] (`lower::calls`, `lower::memory`, `lower::fds`,
//! `lower::signals`) or a closure the face made. The one exception is the user-op trampolines
//! of [`kinds::op`], callbacks the library calls, which allow `unsafe_code` item by item.
#![deny(unsafe_code)]

pub mod agent;
pub mod app;
pub mod bsend;
pub mod checkpoint;
pub mod drained;
pub mod gate;
pub mod handles;
pub mod kinds;
pub mod renew;
pub mod resume;
pub mod state;
