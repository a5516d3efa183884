//! What every kind of object shares: freeing a handle, reading and setting its name.

use super::real;
use crate::lower::abi::*;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

/// A kind of object freed by `MPI_<Kind>_free(&mut handle)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Comm,
    Group,
    Datatype,
    Op,
    Win,
    Request,
    Info,
}

/// `MPI_<kind>_free` of the handle `h` (set to the null handle by the library).
pub fn free(kind: Kind, h: &mut c_int) -> Option<c_int> {
    match kind {
        Kind::Comm => real!(MPI_Comm_free(h)),
        Kind::Group => real!(MPI_Group_free(h)),
        Kind::Datatype => real!(MPI_Type_free(h)),
        Kind::Op => real!(MPI_Op_free(h)),
        Kind::Win => real!(MPI_Win_free(h)),
        Kind::Request => real!(MPI_Request_free(h)),
        Kind::Info => real!(MPI_Info_free(h)),
    }
}

/// A kind of object with a name (`MPI_<Kind>_get_name`, `_set_name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    Comm,
    Datatype,
    Win,
}

/// The name the program gave the real object `h`; `None` where it is empty (or the library
/// lacks the function).
pub fn name(kind: Named, h: c_int) -> Option<String> {
    // MPI_MAX_OBJECT_NAME (128) and its NUL.
    let mut buf = vec![0 as c_char; MPI_MAX_OBJECT_NAME as usize + 1];
    let mut len = 0;
    let (p, l) = (buf.as_mut_ptr(), &mut len);
    match kind {
        Named::Comm => real!(MPI_Comm_get_name(h, p, l)),
        Named::Datatype => real!(MPI_Type_get_name(h, p, l)),
        Named::Win => real!(MPI_Win_get_name(h, p, l)),
    };
    let s = string_of(&buf);
    (!s.is_empty()).then_some(s)
}

/// `MPI_<kind>_set_name` of the real object `h`.
pub fn set_name(kind: Named, h: c_int, name: &CStr) -> Option<c_int> {
    match kind {
        Named::Comm => real!(MPI_Comm_set_name(h, name.as_ptr())),
        Named::Datatype => real!(MPI_Type_set_name(h, name.as_ptr())),
        Named::Win => real!(MPI_Win_set_name(h, name.as_ptr())),
    }
}

/// The string in `buf` up to its first NUL (all of it where it has none).
pub fn string_of(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
