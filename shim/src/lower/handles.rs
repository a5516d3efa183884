//! Handles of the real library, one type per kind of object. The core's tables store them
//! typed (`Table<Entry, RealComm>`, ...), so a real communicator cannot be taken for a virtual
//! one or for a real datatype; `raw` gives the lower ABI's value to pass to the library.

use mpicr_virtid::RealHandle;
use std::os::raw::{c_int, c_void};

macro_rules! int_handle {
    ($($name:ident: $what:literal),* $(,)?) => {$(
        #[doc = concat!("A real ", $what, " of the current generation.")]
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(pub c_int);

        impl $name {
            /// The lower ABI's value.
            #[inline(always)]
            pub fn raw(self) -> c_int {
                self.0
            }
        }

        impl RealHandle for $name {
            #[inline(always)]
            fn to_bits(self) -> u64 {
                self.0 as u32 as u64
            }
            #[inline(always)]
            fn from_bits(bits: u64) -> Self {
                $name(bits as u32 as c_int)
            }
        }
    )*};
}

int_handle!(
    RealComm: "communicator",
    RealGroup: "group",
    RealDatatype: "datatype",
    RealOp: "reduction operation",
    RealInfo: "info object",
    RealRequest: "request",
    RealMessage: "matched-probe message",
    RealWin: "window",
    RealSession: "session",
);

/// A real file (a pointer in the MPICH ABI).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RealFile(pub *mut c_void);

impl RealFile {
    /// The lower ABI's value.
    #[inline(always)]
    pub fn raw(self) -> *mut c_void {
        self.0
    }
}

impl RealHandle for RealFile {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        self.0 as u64
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> Self {
        RealFile(bits as *mut c_void)
    }
}

/// Objects that live in the shim only (error handlers, keyvals): no real handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NoReal;

impl RealHandle for NoReal {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        0
    }
    #[inline(always)]
    fn from_bits(_: u64) -> Self {
        NoReal
    }
}
