//! The real library's ABI: handle types, the status layout and the constants the core and
//! the face use to drive it. Values are MPICH's (`mpi.h` of MPICH 4.0.2; the 5.x wheel keeps the same ABI).
#![allow(non_camel_case_types, non_snake_case, dead_code)]

use std::os::raw::c_int;

pub type MPI_Comm = c_int;
pub type MPI_Group = c_int;
pub type MPI_Datatype = c_int;
pub type MPI_Op = c_int;
pub type MPI_Info = c_int;
pub type MPI_Errhandler = c_int;
pub type MPI_Request = c_int;
pub type MPI_Message = c_int;
pub type MPI_Win = c_int;
pub type MPI_Session = c_int;
/// A pointer in the MPICH ABI (`struct ADIOI_FileD *`).
pub type MPI_File = *mut std::os::raw::c_void;
pub type MPI_Aint = isize;
pub type MPI_Count = i64;
pub type MPI_Offset = i64;
pub type MPI_Fint = c_int;

/// `MPI_Status` of the MPICH ABI.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}
const _: () = assert!(std::mem::size_of::<MPI_Status>() == 20);
const _: () = assert!(std::mem::align_of::<MPI_Status>() == 4);
const _: () = assert!(std::mem::size_of::<MPI_Aint>() == 8);

impl MPI_Status {
    /// Byte count stored in the status (MPICH keeps bytes; bit 0 of the high word is "cancelled").
    pub fn bytes(&self) -> i64 {
        (self.count_lo as u32 as i64) | (((self.count_hi_and_cancelled as u32 >> 1) as i64) << 32)
    }
    pub fn set_bytes(&mut self, n: i64) {
        self.count_lo = n as u32 as i32;
        self.count_hi_and_cancelled = (self.count_hi_and_cancelled & 1) | (((n >> 32) as i32) << 1);
    }
    pub fn as_array(&self) -> [i32; 5] {
        [self.count_lo, self.count_hi_and_cancelled, self.MPI_SOURCE, self.MPI_TAG, self.MPI_ERROR]
    }
    pub fn from_array(a: [i32; 5]) -> Self {
        MPI_Status { count_lo: a[0], count_hi_and_cancelled: a[1], MPI_SOURCE: a[2], MPI_TAG: a[3], MPI_ERROR: a[4] }
    }
}

pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_ROOT: c_int = 7;
pub const MPI_ERR_GROUP: c_int = 8;
pub const MPI_ERR_OP: c_int = 9;
pub const MPI_ERR_ARG: c_int = 12;
pub const MPI_ERR_UNKNOWN: c_int = 13;
pub const MPI_ERR_TRUNCATE: c_int = 14;
pub const MPI_ERR_OTHER: c_int = 15;
pub const MPI_ERR_INTERN: c_int = 16;
pub const MPI_ERR_IN_STATUS: c_int = 17;
pub const MPI_ERR_PENDING: c_int = 18;
pub const MPI_ERR_REQUEST: c_int = 19;
pub const MPI_ERR_FILE: c_int = 27;
pub const MPI_ERR_INFO: c_int = 28;
pub const MPI_ERR_IO: c_int = 32;
pub const MPI_ERR_NO_MEM: c_int = 34;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 44;
pub const MPI_ERR_WIN: c_int = 45;
pub const MPI_ERR_KEYVAL: c_int = 48;
pub const MPI_ERR_SESSION: c_int = 75;

/// MPI_Topo_test's results.
pub const MPI_GRAPH: c_int = 1;
pub const MPI_CART: c_int = 2;
pub const MPI_DIST_GRAPH: c_int = 3;

pub const MPI_COMM_NULL: MPI_Comm = 0x0400_0000;
pub const MPI_COMM_WORLD: MPI_Comm = 0x4400_0000;
pub const MPI_COMM_SELF: MPI_Comm = 0x4400_0001;
pub const MPI_GROUP_NULL: MPI_Group = 0x0800_0000;
pub const MPI_GROUP_EMPTY: MPI_Group = 0x4800_0000;
pub const MPI_DATATYPE_NULL: MPI_Datatype = 0x0c00_0000;
pub const MPI_BYTE: MPI_Datatype = 0x4c00_010d;
pub const MPI_PACKED: MPI_Datatype = 0x4c00_010f;
pub const MPI_INT: MPI_Datatype = 0x4c00_0405;
// The other predefined datatypes of MPICH 4 and 5 (`MPI_INTEGER16`, `MPI_REAL2`,
// `MPI_COMPLEX4`, `MPI_LOGICAL1`..`16` and `MPIX_BFLOAT16` are MPICH 5's; MPICH 4 has no
// `MPI_INTEGER16`), for the map between the core's predefined datatypes and the library's.
pub const MPI_CHAR: MPI_Datatype = 0x4c00_0101;
pub const MPI_SIGNED_CHAR: MPI_Datatype = 0x4c00_0118;
pub const MPI_UNSIGNED_CHAR: MPI_Datatype = 0x4c00_0102;
pub const MPI_WCHAR: MPI_Datatype = 0x4c00_040e;
pub const MPI_SHORT: MPI_Datatype = 0x4c00_0203;
pub const MPI_UNSIGNED_SHORT: MPI_Datatype = 0x4c00_0204;
pub const MPI_UNSIGNED: MPI_Datatype = 0x4c00_0406;
pub const MPI_LONG: MPI_Datatype = 0x4c00_0807;
pub const MPI_UNSIGNED_LONG: MPI_Datatype = 0x4c00_0808;
pub const MPI_FLOAT: MPI_Datatype = 0x4c00_040a;
pub const MPI_DOUBLE: MPI_Datatype = 0x4c00_080b;
pub const MPI_LONG_DOUBLE: MPI_Datatype = 0x4c00_100c;
pub const MPI_LONG_LONG_INT: MPI_Datatype = 0x4c00_0809;
pub const MPI_UNSIGNED_LONG_LONG: MPI_Datatype = 0x4c00_0819;
pub const MPI_LB: MPI_Datatype = 0x4c00_0010;
pub const MPI_UB: MPI_Datatype = 0x4c00_0011;
pub const MPI_FLOAT_INT: MPI_Datatype = 0x8c00_0000u32 as MPI_Datatype;
pub const MPI_DOUBLE_INT: MPI_Datatype = 0x8c00_0001u32 as MPI_Datatype;
pub const MPI_LONG_INT: MPI_Datatype = 0x8c00_0002u32 as MPI_Datatype;
pub const MPI_SHORT_INT: MPI_Datatype = 0x8c00_0003u32 as MPI_Datatype;
pub const MPI_2INT: MPI_Datatype = 0x4c00_0816;
pub const MPI_LONG_DOUBLE_INT: MPI_Datatype = 0x8c00_0004u32 as MPI_Datatype;
pub const MPI_COMPLEX: MPI_Datatype = 0x4c00_081e;
pub const MPI_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_1022;
pub const MPI_LOGICAL: MPI_Datatype = 0x4c00_041d;
pub const MPI_REAL: MPI_Datatype = 0x4c00_041c;
pub const MPI_DOUBLE_PRECISION: MPI_Datatype = 0x4c00_081f;
pub const MPI_INTEGER: MPI_Datatype = 0x4c00_041b;
pub const MPI_2INTEGER: MPI_Datatype = 0x4c00_0820;
pub const MPI_2REAL: MPI_Datatype = 0x4c00_0821;
pub const MPI_2DOUBLE_PRECISION: MPI_Datatype = 0x4c00_1023;
pub const MPI_CHARACTER: MPI_Datatype = 0x4c00_011a;
pub const MPI_REAL4: MPI_Datatype = 0x4c00_0427;
pub const MPI_REAL8: MPI_Datatype = 0x4c00_0829;
pub const MPI_REAL16: MPI_Datatype = 0x4c00_102b;
pub const MPI_COMPLEX8: MPI_Datatype = 0x4c00_0828;
pub const MPI_COMPLEX16: MPI_Datatype = 0x4c00_102a;
pub const MPI_COMPLEX32: MPI_Datatype = 0x4c00_202c;
pub const MPI_INTEGER1: MPI_Datatype = 0x4c00_012d;
pub const MPI_INTEGER2: MPI_Datatype = 0x4c00_022f;
pub const MPI_INTEGER4: MPI_Datatype = 0x4c00_0430;
pub const MPI_INTEGER8: MPI_Datatype = 0x4c00_0831;
pub const MPI_INT8_T: MPI_Datatype = 0x4c00_0137;
pub const MPI_INT16_T: MPI_Datatype = 0x4c00_0238;
pub const MPI_INT32_T: MPI_Datatype = 0x4c00_0439;
pub const MPI_INT64_T: MPI_Datatype = 0x4c00_083a;
pub const MPI_UINT8_T: MPI_Datatype = 0x4c00_013b;
pub const MPI_UINT16_T: MPI_Datatype = 0x4c00_023c;
pub const MPI_UINT32_T: MPI_Datatype = 0x4c00_043d;
pub const MPI_UINT64_T: MPI_Datatype = 0x4c00_083e;
pub const MPI_C_BOOL: MPI_Datatype = 0x4c00_013f;
pub const MPI_C_FLOAT_COMPLEX: MPI_Datatype = 0x4c00_0840;
pub const MPI_C_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_1041;
pub const MPI_C_LONG_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_2042;
pub const MPIX_C_FLOAT16: MPI_Datatype = 0x4c00_0246;
pub const MPI_AINT: MPI_Datatype = 0x4c00_0843;
pub const MPI_OFFSET: MPI_Datatype = 0x4c00_0844;
pub const MPI_COUNT: MPI_Datatype = 0x4c00_0845;
pub const MPI_CXX_BOOL: MPI_Datatype = 0x4c00_0133;
pub const MPI_CXX_FLOAT_COMPLEX: MPI_Datatype = 0x4c00_0834;
pub const MPI_CXX_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_1035;
pub const MPI_CXX_LONG_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_2036;
pub const MPI_REAL2: MPI_Datatype = 0x4c00_0226;
pub const MPI_COMPLEX4: MPI_Datatype = 0x4c00_042e;
pub const MPI_INTEGER16: MPI_Datatype = 0x4c00_1032;
pub const MPI_LOGICAL1: MPI_Datatype = 0x4c00_0147;
pub const MPI_LOGICAL2: MPI_Datatype = 0x4c00_0248;
pub const MPI_LOGICAL4: MPI_Datatype = 0x4c00_0449;
pub const MPI_LOGICAL8: MPI_Datatype = 0x4c00_084a;
pub const MPI_LOGICAL16: MPI_Datatype = 0x4c00_104b;
pub const MPIX_BFLOAT16: MPI_Datatype = 0x4c00_024c;
pub const MPI_OP_NULL: MPI_Op = 0x1800_0000;
pub const MPI_MAX: MPI_Op = 0x5800_0001;
pub const MPI_MIN: MPI_Op = 0x5800_0002;
pub const MPI_SUM: MPI_Op = 0x5800_0003;
pub const MPI_PROD: MPI_Op = 0x5800_0004;
pub const MPI_LAND: MPI_Op = 0x5800_0005;
pub const MPI_BAND: MPI_Op = 0x5800_0006;
pub const MPI_LOR: MPI_Op = 0x5800_0007;
pub const MPI_BOR: MPI_Op = 0x5800_0008;
pub const MPI_LXOR: MPI_Op = 0x5800_0009;
pub const MPI_BXOR: MPI_Op = 0x5800_000a;
pub const MPI_MINLOC: MPI_Op = 0x5800_000b;
pub const MPI_MAXLOC: MPI_Op = 0x5800_000c;
pub const MPI_REPLACE: MPI_Op = 0x5800_000d;
pub const MPI_NO_OP: MPI_Op = 0x5800_000e;
pub const MPI_ERRHANDLER_NULL: MPI_Errhandler = 0x1400_0000;
pub const MPI_ERRORS_ARE_FATAL: MPI_Errhandler = 0x5400_0000;
pub const MPI_ERRORS_RETURN: MPI_Errhandler = 0x5400_0001;
pub const MPI_ERRORS_ABORT: MPI_Errhandler = 0x5400_0003;
pub const MPI_INFO_NULL: MPI_Info = 0x1c00_0000;
pub const MPI_INFO_ENV: MPI_Info = 0x5c00_0001;
pub const MPI_REQUEST_NULL: MPI_Request = 0x2c00_0000;
/// Space a buffered send needs beyond its packed data: MPICH's `mpi.h` says 96, Intel MPI's 88
/// (the same ABI otherwise); the smaller, so that no program sized for either is refused.
pub const MPI_BSEND_OVERHEAD: c_int = 88;
pub const MPI_MESSAGE_NULL: MPI_Message = 0x2c00_0000;
pub const MPI_MESSAGE_NO_PROC: MPI_Message = 0x6c00_0000;
pub const MPI_WIN_NULL: MPI_Win = 0x2000_0000;
pub const MPI_FILE_NULL: MPI_File = std::ptr::null_mut();
pub const MPI_SESSION_NULL: MPI_Session = 0x3800_0000;
pub const MPI_KEYVAL_INVALID: c_int = 0x2400_0000;

pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ANY_TAG: c_int = -1;
pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ROOT: c_int = -3;
pub const MPI_UNDEFINED: c_int = -32766;
pub const MPI_IDENT: c_int = 0;
pub const MPI_CONGRUENT: c_int = 1;

pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;

/// MPI-IO access modes (ROMIO's values, the same in Open MPI) and whence of seeks.
pub const MPI_MODE_CREATE: c_int = 1;
pub const MPI_MODE_RDONLY: c_int = 2;
pub const MPI_MODE_WRONLY: c_int = 4;
pub const MPI_MODE_RDWR: c_int = 8;
pub const MPI_MODE_DELETE_ON_CLOSE: c_int = 16;
pub const MPI_MODE_EXCL: c_int = 64;
pub const MPI_MODE_SEQUENTIAL: c_int = 256;
pub const MPI_SEEK_SET: c_int = 600;
/// `MPI_File_set_view`'s displacement at a sequential file's shared file pointer.
pub const MPI_DISPLACEMENT_CURRENT: MPI_Offset = -54278278;

/// One-sided synchronisation asserts and lock types, and window flavors.
pub const MPI_MODE_NOPRECEDE: c_int = 8192;
pub const MPI_MODE_NOSUCCEED: c_int = 16384;
pub const MPI_LOCK_EXCLUSIVE: c_int = 234;
pub const MPI_LOCK_SHARED: c_int = 235;
pub const MPI_WIN_FLAVOR_CREATE: c_int = 1;
pub const MPI_WIN_FLAVOR_ALLOCATE: c_int = 2;
pub const MPI_WIN_FLAVOR_DYNAMIC: c_int = 3;
pub const MPI_WIN_FLAVOR_SHARED: c_int = 4;
pub const MPI_MAX_OBJECT_NAME: c_int = 128;

pub const MPI_MAX_ERROR_STRING: usize = 512;

pub const MPI_MAX_INFO_KEY: usize = 255;
pub const MPI_MAX_INFO_VAL: usize = 1024;

/// Predefined attribute keys, answered by the real library.
pub const MPI_TAG_UB: c_int = 0x6440_0001;
pub const MPI_HOST: c_int = 0x6440_0003;
pub const MPI_IO: c_int = 0x6440_0005;
pub const MPI_WTIME_IS_GLOBAL: c_int = 0x6440_0007;
pub const MPI_UNIVERSE_SIZE: c_int = 0x6440_0009;
pub const MPI_LASTUSEDCODE: c_int = 0x6440_000b;
pub const MPI_APPNUM: c_int = 0x6440_000d;
pub const MPI_WIN_BASE: c_int = 0x6600_0001;
pub const MPI_WIN_SIZE: c_int = 0x6600_0003;
pub const MPI_WIN_DISP_UNIT: c_int = 0x6600_0005;
pub const MPI_WIN_CREATE_FLAVOR: c_int = 0x6600_0007;
pub const MPI_WIN_MODEL: c_int = 0x6600_0009;

/// Sentinel pointers.
pub const MPI_STATUS_IGNORE: *mut MPI_Status = std::ptr::without_provenance_mut(1);
pub const MPI_STATUSES_IGNORE: *mut MPI_Status = std::ptr::without_provenance_mut(1);
pub const MPI_IN_PLACE: *mut std::os::raw::c_void = -1isize as *mut std::os::raw::c_void;

/// Is `h` one of MPICH's builtin (predefined) handles? (kind bits 01)
pub const fn is_builtin(h: c_int) -> bool {
    (h as u32) >> 30 == 1
}
