//! Handle values in the MPICH ABI.
//!
//! MPICH handles are 32-bit ints: bits 31-30 are the handle kind (01 builtin, 10 direct,
//! 11 indirect) and bits 29-26 the object type. Virtual handles use the *indirect* kind with
//! the right object type and bit 25 set, i.e. an indirect block number >= 8192 that MPICH
//! never allocates. So a virtual handle is never equal to a predefined constant, has the object
//! bits a program (or `MPI_Type_get_envelope` et al.) expects, and a stale one handed to the
//! real library is rejected there with the native error class.

/// Object kinds that get virtual handles. The discriminant is MPICH's object-type field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum Kind {
    Comm = 0x1,
    Group = 0x2,
    Datatype = 0x3,
    /// `MPI_File` is a pointer in the MPICH ABI; see [`FILE_TAG`].
    File = 0x4,
    Errhandler = 0x5,
    Op = 0x6,
    Info = 0x7,
    Win = 0x8,
    Keyval = 0x9,
    /// Requests and matched-probe messages share MPICH's request type.
    Request = 0xb,
    Session = 0xe,
    /// Messages (`MPI_Mprobe`) are requests in MPICH's encoding; the table is separate.
    Message = 0xf,
}

impl Kind {
    /// The object-type bits used in encoded handles (messages are encoded as requests).
    const fn type_bits(self) -> u32 {
        match self {
            Kind::Message => Kind::Request as u32,
            k => k as u32,
        }
    }
}

const KIND_SHIFT: u32 = 26;
const KIND_MASK: u32 = 0xF << KIND_SHIFT;
const INDIRECT: u32 = 0xC000_0000;
const VIRTUAL_FLAG: u32 = 1 << 25;
/// Messages get a second flag bit so they never collide with requests of the same index.
const MESSAGE_FLAG: u32 = 1 << 24;
/// Largest index a virtual handle can carry.
pub const MAX_INDEX: u32 = MESSAGE_FLAG - 1;
/// High half of a virtual `MPI_File` pointer value: non-canonical on x86-64, so a stale one
/// faults instead of aliasing memory.
pub const FILE_TAG: u64 = 0xF11E_0000_0000_0000;

/// An encoded virtual handle of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VirtualHandle {
    pub kind: Kind,
    pub index: u32,
}

impl VirtualHandle {
    /// The int the program sees (all kinds but `File`).
    pub const fn to_int(self) -> i32 {
        let extra = if matches!(self.kind, Kind::Message) { MESSAGE_FLAG } else { 0 };
        (INDIRECT | (self.kind.type_bits() << KIND_SHIFT) | VIRTUAL_FLAG | extra | self.index) as i32
    }

    /// The pointer-sized value the program sees for an `MPI_File`.
    pub const fn to_file_ptr(self) -> u64 {
        FILE_TAG | self.index as u64
    }
}

/// Decodes `v` as a virtual handle of `kind`; `None` for predefined, foreign or invented values.
#[inline(always)]
pub fn decode(v: i32, kind: Kind) -> Option<u32> {
    let v = v as u32;
    let want = INDIRECT | (kind.type_bits() << KIND_SHIFT) | VIRTUAL_FLAG;
    let flags = KIND_MASK | INDIRECT | VIRTUAL_FLAG | MESSAGE_FLAG;
    let want = if matches!(kind, Kind::Message) { want | MESSAGE_FLAG } else { want };
    if v & flags == want {
        Some(v & MAX_INDEX)
    } else {
        None
    }
}

/// Decodes a virtual `MPI_File` pointer value.
#[inline(always)]
pub fn decode_file(p: u64) -> Option<u32> {
    if p & 0xFFFF_FFFF_0000_0000 == FILE_TAG && p & 0xFFFF_FFFF <= MAX_INDEX as u64 {
        Some((p & 0xFFFF_FFFF) as u32)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MPI_COMM_WORLD: i32 = 0x4400_0000;
    const MPI_COMM_NULL: i32 = 0x0400_0000;
    const MPI_REQUEST_NULL: i32 = 0x2c00_0000;

    #[test]
    fn round_trip_every_kind() {
        for kind in [
            Kind::Comm,
            Kind::Group,
            Kind::Datatype,
            Kind::Errhandler,
            Kind::Op,
            Kind::Info,
            Kind::Win,
            Kind::Keyval,
            Kind::Request,
            Kind::Session,
            Kind::Message,
        ] {
            for index in [0, 1, 4095, 4096, MAX_INDEX] {
                let h = VirtualHandle { kind, index }.to_int();
                assert_eq!(decode(h, kind), Some(index), "{kind:?} {index}");
            }
        }
    }

    #[test]
    fn kinds_do_not_alias() {
        let req = VirtualHandle { kind: Kind::Request, index: 3 }.to_int();
        assert_eq!(decode(req, Kind::Message), None);
        assert_eq!(decode(req, Kind::Comm), None);
        let msg = VirtualHandle { kind: Kind::Message, index: 3 }.to_int();
        assert_eq!(decode(msg, Kind::Request), None);
    }

    #[test]
    fn predefined_and_invented_values_are_not_virtual() {
        for v in [MPI_COMM_WORLD, MPI_COMM_NULL, 0, -1, 12345, 0x8400_0001u32 as i32] {
            assert_eq!(decode(v, Kind::Comm), None, "{v:#x}");
        }
        assert_eq!(decode(MPI_REQUEST_NULL, Kind::Request), None);
    }

    #[test]
    fn object_bits_match_mpich() {
        // MPICH extracts the object type with (h & 0x3c000000) >> 26.
        let dt = VirtualHandle { kind: Kind::Datatype, index: 9 }.to_int() as u32;
        assert_eq!((dt & 0x3c00_0000) >> 26, 0x3);
        let msg = VirtualHandle { kind: Kind::Message, index: 9 }.to_int() as u32;
        assert_eq!((msg & 0x3c00_0000) >> 26, 0xb);
    }

    #[test]
    fn file_pointers() {
        let p = VirtualHandle { kind: Kind::File, index: 7 }.to_file_ptr();
        assert_eq!(decode_file(p), Some(7));
        assert_eq!(decode_file(0), None);
        assert_eq!(decode_file(0x7fff_1234_5678), None);
    }
}
