//! Functions the program registered with `mpicr_on_resume` (`face::capi`), called on the agent
//! thread after every checkpoint once the job runs again.

use parking_lot::Mutex;
use std::sync::Arc;

/// A callback of the program's, `f(restarted, arg)` (the face wraps the C function and its
/// argument).
pub type ResumeFn = Arc<dyn Fn(bool) + Send + Sync>;

static CALLBACKS: Mutex<Vec<ResumeFn>> = Mutex::new(Vec::new());

/// Registers a callback.
pub fn register(f: ResumeFn) {
    CALLBACKS.lock().push(f);
}

/// Runs the registered callbacks (agent thread, gate open).
pub(crate) fn resumed(restarted: bool) {
    let cbs: Vec<ResumeFn> = CALLBACKS.lock().clone();
    for f in cbs {
        f(restarted);
    }
}
