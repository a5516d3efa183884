//! libmpicr: transparent checkpoint/restart for unmodified MPI programs.
//!
//! Three layers, each importing only the ones below it (`tests/layers.rs` checks this):
//! - [`face`]: the program's ABI (MPICH's). Every `MPI_*`/`PMPI_*` symbol is exported by the
//!   face library `libmpicr.so` (crate `faces/mpich`, `exports.rs` generated from
//!   `api/mpich-abi.json`), which calls the implementations here; calls enter through the gate,
//!   translate the program's handles and reach the real library. Open MPI's face
//!   (`libmpicr_ompi.so`, crate `faces/ompi`) translates its ABI to this one.
//! - [`core`]: virtual objects, one module per kind, the gate, and the checkpoint protocol run by
//!   the agent thread: alignment, drain, release and renewal of the lower half.
//! - [`lower`]: the real MPI library, loaded into a disposable link-map namespace, and its ABI.

pub mod core;
pub mod face;
pub mod lower;

/// The panic boundary around every exported function: a panic inside the shim becomes
/// MPI_ERR_INTERN (or the type's default value) instead of unwinding into C.
///
/// `$body` calls the wrapper (an `unsafe fn`) with the export's own arguments: an export is an
/// `unsafe extern "C" fn` with the same MPI signature, so its C caller owes exactly the contract
/// the wrapper needs (pointers valid as MPI requires for that function).
#[macro_export]
macro_rules! ffi_boundary {
    ($name:expr, MPI_File, $body:expr) => {
        // SAFETY: the export's arguments, passed on unchanged, carry the caller's MPI contract (above).
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { $body })) {
            Ok(v) => {
                $crate::face::errors::settle_other();
                v
            }
            Err(_) => {
                $crate::face::errors::internal_panic($name);
                std::ptr::null_mut()
            }
        }
    };
    ($name:expr, c_int, $body:expr) => {
        // SAFETY: the export's arguments, passed on unchanged, carry the caller's MPI contract (above).
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { $body })) {
            Ok(v) => $crate::face::errors::settle(v),
            Err(_) => $crate::face::errors::internal_panic($name),
        }
    };
    ($name:expr, $ret:ty, $body:expr) => {
        // SAFETY: the export's arguments, passed on unchanged, carry the caller's MPI contract (above).
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { $body })) {
            Ok(v) => {
                $crate::face::errors::settle_other();
                v
            }
            Err(_) => {
                $crate::face::errors::internal_panic($name);
                <$ret as Default>::default()
            }
        }
    };
}
