//! State of the library itself that the program set up and a renewal replays: user error
//! classes, codes and strings (in the order made, so the same values come back) and the
//! buffer attached for buffered sends.

use super::Renewable;
use crate::lower;
use parking_lot::Mutex;
use std::os::raw::{c_int, c_void};

/// A user error class, code or string, as made by MPI_Add_error_*.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum UserError {
    Class,
    Code { class: c_int },
    String { code: c_int, text: String },
}

static USER_ERRORS: Mutex<Vec<UserError>> = Mutex::new(Vec::new());

/// Records a user error class, code or string the library accepted.
pub fn add_user_error(e: UserError) {
    USER_ERRORS.lock().push(e);
}

pub fn user_errors() -> Vec<UserError> {
    USER_ERRORS.lock().clone()
}

/// The buffer attached for buffered sends (address, size), replayed after a renewal.
static ATTACHED: Mutex<Option<(usize, i64)>> = Mutex::new(None);

pub fn attached_buffer() -> Option<(usize, i64)> {
    *ATTACHED.lock()
}

/// Records the buffer the library now has attached (`None`: detached).
pub fn set_attached_buffer(attached: Option<(usize, i64)>) {
    *ATTACHED.lock() = attached;
}

/// The library's own state around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    /// Buffered messages in flight were delivered by the drain.
    fn forget(&self) {
        crate::core::bsend::forget();
    }

    /// Replays user error classes/codes/strings and attaches the buffered-send buffer again.
    fn rebuild(&self) -> Result<(), String> {
        let f = lower::fns();
        for e in user_errors() {
            let mut out = 0;
            // SAFETY: out-pointers are locals; strings are NUL-terminated.
            unsafe {
                match e {
                    UserError::Class => f.MPI_Add_error_class.map(|h| h(&mut out)),
                    UserError::Code { class } => f.MPI_Add_error_code.map(|h| h(class, &mut out)),
                    UserError::String { code, text } => {
                        let t = std::ffi::CString::new(text).unwrap_or_default();
                        f.MPI_Add_error_string.map(|h| h(code, t.as_ptr()))
                    }
                };
            }
        }
        if let Some((buf, size)) = attached_buffer() {
            // SAFETY: the program's buffer, still attached from its point of view.
            unsafe { f.MPI_Buffer_attach_c.map(|h| h(buf as *mut c_void, size)) };
        }
        Ok(())
    }
}
