//! State of the library itself that the program set up and a renewal replays: user error
//! classes, codes and strings (in the order made, so the same values come back) and the
//! buffer attached for buffered sends.

use super::{RebuildError, Renewable};
use crate::lower;
use crate::lower::calls;
use crate::lower::calls::init::AddError;
use parking_lot::Mutex;
use std::os::raw::c_int;

/// A user error class, code or string, as made by MPI_Add_error_*, with the value the library
/// gave the class or code.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum UserError {
    Class { value: c_int },
    Code { class: c_int, value: c_int },
    String { code: c_int, text: String },
}

impl UserError {
    /// The class or code this makes (None: a string).
    fn made(&self) -> Option<c_int> {
        match *self {
            UserError::Class { value } | UserError::Code { value, .. } => Some(value),
            UserError::String { .. } => None,
        }
    }
}

/// What MPI_Remove_error_* (MPIX_Delete_error_* in MPICH 4.0) removed.
#[derive(Debug, Clone, Copy)]
pub enum Removed {
    Class(c_int),
    Code(c_int),
    String(c_int),
}

/// The user errors the program has, in the order made (what a renewal replays), and the values
/// of the classes and codes this generation of the library made before any was removed: the
/// values a fresh library gives, in order, so a replay reproduces the live ones only when they
/// are those values in that order.
struct UserErrors {
    live: Vec<UserError>,
    fresh: Vec<c_int>,
    removed_any: bool,
}

static USER_ERRORS: Mutex<UserErrors> = Mutex::new(UserErrors { live: Vec::new(), fresh: Vec::new(), removed_any: false });

/// Records a user error class, code or string the library accepted.
pub fn add_user_error(e: UserError) {
    let mut u = USER_ERRORS.lock();
    if let (Some(v), false) = (e.made(), u.removed_any) {
        u.fresh.push(v);
    }
    u.live.push(e);
}

/// Forgets what the library removed: the class, code or string, and the strings of a removed
/// class or code.
pub fn remove_user_error(r: Removed) {
    let mut u = USER_ERRORS.lock();
    u.removed_any = true;
    u.live.retain(|e| match (r, e) {
        (Removed::Class(c), UserError::Class { value }) => *value != c,
        (Removed::Code(c), UserError::Code { value, .. }) => *value != c,
        (Removed::Class(c) | Removed::Code(c) | Removed::String(c), UserError::String { code, .. }) => *code != c,
        _ => true,
    });
}

/// A restarted app-mode process: the user errors of `shim.state`, as if made in that order.
pub fn restore_user_errors(live: Vec<UserError>) {
    let mut u = USER_ERRORS.lock();
    u.fresh = live.iter().filter_map(UserError::made).collect();
    u.live = live;
    u.removed_any = false;
}

pub fn user_errors() -> Vec<UserError> {
    USER_ERRORS.lock().live.clone()
}

/// Why a renewed library would not give the live classes and codes their values again: some
/// were removed and others made since, which a replay in order cannot reproduce.
fn unreproducible(u: &UserErrors) -> Option<String> {
    let made: Vec<c_int> = u.live.iter().filter_map(UserError::made).collect();
    if u.fresh.starts_with(&made) {
        return None;
    }
    Some(format!(
        "user error classes or codes were removed (MPI_Remove_error_*, MPIX_Delete_error_*) and \
         others made since ({} live): a renewed MPI library would not give them the same \
         values, so they cannot be checkpointed yet",
        made.len()
    ))
}

/// The buffer attached for buffered sends (address, size), replayed after a renewal.
static ATTACHED: Mutex<Option<(usize, i64)>> = Mutex::new(None);

pub fn attached_buffer() -> Option<(usize, i64)> {
    *ATTACHED.lock()
}

/// Whether the program has a buffer for buffered sends attached: the process's, or one of a
/// communicator or a session.
pub fn any_buffer_attached() -> bool {
    use crate::core::state::OBJ;
    attached_buffer().is_some()
        || OBJ.comms.snapshot().iter().any(|(_, _, c)| c.buffer.is_some())
        || OBJ.sessions.snapshot().iter().any(|(_, _, s)| s.buffer.is_some())
}

/// Records the buffer the library now has attached (`None`: detached).
pub fn set_attached_buffer(attached: Option<(usize, i64)>) {
    *ATTACHED.lock() = attached;
}

/// A data representation the program registered (`MPI_Register_datarep`): its name, the
/// program's conversion and extent callbacks and extra state (addresses in the program, which a
/// renewal keeps), and whether it came by the large-count variant (`_c`, other callback types).
#[derive(Debug, Clone)]
pub struct Datarep {
    pub name: String,
    pub read: usize,
    pub write: usize,
    pub extent: usize,
    pub extra: usize,
    pub large: bool,
}

static DATAREPS: Mutex<Vec<Datarep>> = Mutex::new(Vec::new());

/// Records a registration the library accepted (registrations last until finalize).
pub fn add_datarep(d: Datarep) {
    DATAREPS.lock().push(d);
}

/// Whether the program registered the data representation `name`.
pub fn datarep_registered(name: &str) -> bool {
    DATAREPS.lock().iter().any(|d| d.name == name)
}

/// Registers the program's data representations with a renewed library, before its files are
/// reopened (their views may name them), in the order the program did.
fn register_datareps() -> Result<(), RebuildError> {
    for d in DATAREPS.lock().iter() {
        let name = std::ffi::CString::new(d.name.as_str()).unwrap_or_default();
        // The program's callbacks and extra state, passed as it passed them the first time
        // (the upper half's memory is the same).
        let rc = calls::init::register_datarep(&name, d.large, d.read, d.write, d.extent, d.extra);
        super::check(rc.unwrap_or(lower::abi::MPI_ERR_OTHER), &format!("registering the data representation {} again", d.name))?;
    }
    Ok(())
}

/// The library's own state around a checkpoint.
pub struct Renew;

impl Renewable for Renew {
    fn refusal(&self) -> Option<String> {
        if crate::core::renew::strategy() == crate::core::renew::Strategy::Sessions {
            if let Some(d) = DATAREPS.lock().first() {
                return Some(format!(
                    "the data representation {} (MPI_Register_datarep) cannot be checkpointed with MPICR_RENEW=sessions: ROMIO registers it only under MPI_Init's world model, which a session does not bring back; use the default renewal (namespace)",
                    d.name
                ));
            }
        }
        unreproducible(&USER_ERRORS.lock())
    }

    /// Buffered messages in flight were delivered by the drain.
    fn forget(&self) {
        crate::core::bsend::forget();
    }

    /// Replays user error classes/codes/strings (each class and code must come back with its
    /// value), attaches the buffered-send buffer again and registers the program's data
    /// representations.
    fn rebuild(&self) -> Result<(), RebuildError> {
        register_datareps()?;
        for e in user_errors() {
            let mut out = 0;
            let rc = match &e {
                UserError::Class { .. } => calls::init::add_error(AddError::Class, &mut out),
                UserError::Code { class, .. } => calls::init::add_error(AddError::Code(*class), &mut out),
                UserError::String { code, text } => {
                    let t = std::ffi::CString::new(text.as_str()).unwrap_or_default();
                    calls::init::add_error(AddError::String(*code, &t), &mut out)
                }
            };
            super::check(rc.unwrap_or(lower::abi::MPI_ERR_OTHER), &format!("replaying {e:?}"))?;
            if let Some(v) = e.made().filter(|&v| v != out) {
                return Err(RebuildError::Replayed { error: e, got: out, want: v });
            }
        }
        // the renewed library made them from fresh, in this order
        let mut u = USER_ERRORS.lock();
        u.fresh = u.live.iter().filter_map(UserError::made).collect();
        u.removed_any = false;
        drop(u);
        if let Some((buf, size)) = attached_buffer() {
            // The program's buffer, still attached from its point of view.
            calls::init::buffer_attach_c(buf, size);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(live: Vec<UserError>, fresh: Vec<c_int>) -> UserErrors {
        UserErrors { live, fresh, removed_any: true }
    }

    #[test]
    fn replays_reproduce_only_fresh_values_in_order() {
        let class = |value| UserError::Class { value };
        let code = |class, value| UserError::Code { class, value };
        // nothing removed, or only the last made: a replay gives the same values
        assert!(unreproducible(&errors(vec![class(1), code(1, 2)], vec![1, 2])).is_none());
        assert!(unreproducible(&errors(vec![class(1)], vec![1, 2])).is_none());
        assert!(unreproducible(&errors(vec![], vec![1, 2])).is_none());
        // every one removed, then made again with the values a fresh library gives
        assert!(unreproducible(&errors(vec![class(1), code(1, 2)], vec![1, 2, 3])).is_none());
        // the first removed: the second would come back with the first's value
        assert!(unreproducible(&errors(vec![class(2)], vec![1, 2])).is_some());
        // made after a removal, beyond what is known of a fresh library
        assert!(unreproducible(&errors(vec![class(1), class(7)], vec![1])).is_some());
    }
}
