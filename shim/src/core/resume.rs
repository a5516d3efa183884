//! Functions the program registered with `mpicr_on_resume` (`face::capi`), called on the agent
//! thread after every checkpoint once the job runs again.

use parking_lot::Mutex;
use std::os::raw::{c_int, c_void};

struct Callback(unsafe extern "C" fn(c_int, *mut c_void), usize);
static CALLBACKS: Mutex<Vec<Callback>> = Mutex::new(Vec::new());

/// Registers `f(restarted, arg)`.
pub fn register(f: unsafe extern "C" fn(c_int, *mut c_void), arg: usize) {
    CALLBACKS.lock().push(Callback(f, arg));
}

/// Runs the registered callbacks (agent thread, gate open).
pub(crate) fn resumed(restarted: bool) {
    let cbs: Vec<(unsafe extern "C" fn(c_int, *mut c_void), usize)> = CALLBACKS.lock().iter().map(|c| (c.0, c.1)).collect();
    for (f, arg) in cbs {
        // SAFETY: a callback the program registered with this signature.
        unsafe { f(restarted as c_int, arg as *mut c_void) };
    }
}
