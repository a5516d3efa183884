//! Virtual handles as the core knows them, one `#[repr(transparent)]` type per kind.
//!
//! A value is one of three things: a table index encoded by [`crate::encoding`] (the value the
//! program holds), one of the core's own predefined objects (constants above the 32-bit range,
//! so no program value can be mistaken for one), or a value nobody made, which the core carries
//! unchanged to the real library so that it is rejected there as in a native run. The face
//! converts the program's ABI integers to these and back; the core never sees an ABI's
//! predefined constants.

use crate::encoding::{decode, Kind, VirtualHandle};
use serde::{Deserialize, Serialize};

/// A communicator.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VComm(i64);

impl VComm {
    /// The world model's communicator of all processes (`MPI_COMM_WORLD` in a face).
    pub const WORLD: VComm = VComm(1 << 32);
    /// The world model's communicator of this process alone (`MPI_COMM_SELF`).
    pub const SELF: VComm = VComm(2 << 32);
    /// No communicator (`MPI_COMM_NULL`).
    pub const NULL: VComm = VComm(3 << 32);

    /// The handle of table index `index` (not for the predefined ones' indices: the core maps
    /// those, `core::handles::comm_handle`).
    pub const fn virtual_at(index: u32) -> VComm {
        VComm(VirtualHandle { kind: Kind::Comm, index }.to_int() as i64)
    }

    /// A virtual handle's value as the program holds it, or a value nobody made.
    pub const fn from_int(v: i32) -> VComm {
        VComm(v as i64)
    }

    /// The value [`from_int`](Self::from_int) took; `None` for the core's predefined handles,
    /// which each face names in its own ABI.
    pub const fn to_int(self) -> Option<i32> {
        if self.0 >= i32::MIN as i64 && self.0 <= i32::MAX as i64 { Some(self.0 as i32) } else { None }
    }

    /// The table index of a virtual handle (`None` for predefined and foreign values).
    #[inline(always)]
    pub fn index(self) -> Option<u32> {
        self.to_int().and_then(|v| decode(v, Kind::Comm))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predefined_communicators_are_no_program_value() {
        for p in [VComm::WORLD, VComm::SELF, VComm::NULL] {
            assert_eq!(p.to_int(), None);
            assert_eq!(p.index(), None);
        }
        for v in [0, -1, i32::MIN, i32::MAX, 0x4400_0000] {
            assert_eq!(VComm::from_int(v).to_int(), Some(v));
            assert_ne!(VComm::from_int(v), VComm::WORLD);
        }
        assert_eq!(VComm::virtual_at(7).index(), Some(7));
        assert_eq!(VComm::from_int(VComm::virtual_at(7).to_int().unwrap()), VComm::virtual_at(7));
    }
}
