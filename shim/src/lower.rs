//! The lower half: the real MPI library, loaded into a link-map namespace of its own.
//!
//! `dlmopen(LM_ID_NEWLM)` keeps the real library's internal calls (it calls many `PMPI_*`
//! through its PLT) inside its own namespace, so they never re-enter the shim, and lets a
//! renewal load a *fresh copy* after a checkpoint (DESIGN.md section 3). All loading goes
//! through [`load_generation`]; the rest of the shim only sees [`fns`].

use crate::gen::real::RealFns;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Mutex;

/// One loaded copy of the real library.
pub struct Generation {
    pub fns: RealFns,
    pub path: PathBuf,
    pub number: u32,
    lib: libloading::os::unix::Library,
    /// `uselocale` of the namespace's own libc (see [`prepare_thread`]).
    uselocale: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
}

impl Generation {
    /// Address of a data symbol of the real library (e.g. `MPI_UNWEIGHTED`), or null.
    pub fn data(&self, name: &str) -> *mut c_void {
        let mut sym = name.as_bytes().to_vec();
        sym.push(0);
        // SAFETY: looking up a symbol address has no side effects; the value is only read as
        // a pointer-sized datum of the MPICH ABI.
        unsafe { self.lib.get::<*mut c_void>(&sym).map(|s| *s).unwrap_or(std::ptr::null_mut()) }
    }
}

static CURRENT: AtomicPtr<Generation> = AtomicPtr::new(std::ptr::null_mut());
static LOAD_LOCK: Mutex<()> = Mutex::new(());
static GENERATIONS: AtomicU32 = AtomicU32::new(0);

/// The real library's entry points, loading it on first use.
#[inline(always)]
pub fn fns() -> &'static RealFns {
    &current().fns
}

/// The current generation, loading the first one on demand.
#[inline(always)]
pub fn current() -> &'static Generation {
    let p = CURRENT.load(Ordering::Acquire);
    if p.is_null() {
        return load_first();
    }
    // SAFETY: generations are leaked boxes, never freed (a retired namespace may still have
    // code running on other threads' stacks until they leave the gate).
    unsafe { &*p }
}

#[cold]
fn load_first() -> &'static Generation {
    let _l = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let p = CURRENT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: see `current`.
        return unsafe { &*p };
    }
    match locate().and_then(|path| load_generation(&path)) {
        Ok(g) => g,
        Err(e) => crate::errors::fatal(&format!("cannot load the MPI library underneath: {e}")),
    }
}

/// Loads a fresh copy of the library at `path` and makes it current.
pub fn load_generation(path: &Path) -> Result<&'static Generation, String> {
    let cpath = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| "library path has a NUL byte".to_string())?;
    // SAFETY: dlmopen with a valid C string; the library's constructors run in its own namespace.
    let handle = unsafe { libc::dlmopen(libc::LM_ID_NEWLM, cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(format!("dlmopen {}: {}", path.display(), dlerror()));
    }
    // SAFETY: `handle` is a live handle returned by dlmopen above, owned from here on.
    let lib = unsafe { libloading::os::unix::Library::from_raw(handle) };
    let fns = RealFns::resolve(&|name: &str| {
        // SAFETY: symbol lookup only; names are NUL-terminated by the generated table.
        unsafe { lib.get::<*mut c_void>(name.as_bytes()).map(|s| *s).unwrap_or(std::ptr::null_mut()) }
    });
    if fns.MPI_Init.is_none() || fns.MPI_Comm_rank.is_none() {
        return Err(format!("{} does not look like an MPI library (no MPI_Init)", path.display()));
    }
    // SAFETY: `uselocale` of the libc copy the library was linked against in its namespace.
    let uselocale = unsafe { lib.get::<unsafe extern "C" fn(*mut c_void) -> *mut c_void>(b"uselocale\0").ok().map(|s| *s) };
    let number = GENERATIONS.fetch_add(1, Ordering::AcqRel);
    let g: &'static Generation = Box::leak(Box::new(Generation { fns, path: path.to_path_buf(), number, lib, uselocale }));
    CURRENT.store(g as *const Generation as *mut Generation, Ordering::Release);
    CURRENT_NUMBER.store(number, Ordering::Release);
    prepare_thread();
    Ok(g)
}

/// Number of the current generation, for the per-thread check in the gate.
static CURRENT_NUMBER: AtomicU32 = AtomicU32::new(u32::MAX);

thread_local! {
    /// The generation this thread was prepared for.
    static PREPARED: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

/// Makes the calling thread usable by the current generation's libc copy.
///
/// A thread created by the program's libc does not get the locale state of the libc copy
/// inside the namespace: the first `snprintf("%f")` there (UCX formats floats while creating
/// endpoints, e.g. during MPI_Comm_spawn or MPI_Session_init) then faults. Setting the global
/// locale through that copy's `uselocale` initialises it. Cheap after the first call per
/// thread and generation.
#[inline(always)]
pub fn prepare_thread() {
    let gen = CURRENT_NUMBER.load(Ordering::Relaxed);
    if PREPARED.with(|p| p.get()) != gen {
        prepare_thread_slow(gen);
    }
}

#[cold]
fn prepare_thread_slow(gen: u32) {
    PREPARED.with(|p| p.set(gen));
    let p = CURRENT.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: generations are never freed (see `current`).
    let g = unsafe { &*p };
    if let Some(uselocale) = g.uselocale {
        // LC_GLOBAL_LOCALE is ((locale_t) -1) in glibc.
        // SAFETY: uselocale with the global-locale sentinel only sets this thread's locale.
        unsafe { uselocale(-1isize as *mut c_void) };
    }
}

/// How many generations of the library were brought up in this process (copies loaded for
/// `namespace`, sessions opened for `sessions`).
pub fn generations_loaded() -> u32 {
    GENERATIONS.load(Ordering::Acquire)
}

/// Counts a new generation of the same loaded copy (`sessions` strategy) and returns its number.
pub fn bump_generation() -> u32 {
    GENERATIONS.fetch_add(1, Ordering::AcqRel)
}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string owned by libc.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() { "unknown error".into() } else { CStr::from_ptr(e).to_string_lossy().into_owned() }
    }
}

/// The real library: `MPICR_MPI_LIB`, or the MPICH-ABI library the program is linked to.
pub fn locate() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("MPICR_MPI_LIB") {
        return Ok(PathBuf::from(p));
    }
    let mut found: Vec<PathBuf> = Vec::new();
    // SAFETY: dl_iterate_phdr calls `collect` with valid dl_phdr_info pointers; `found` outlives it.
    unsafe { libc::dl_iterate_phdr(Some(collect), &mut found as *mut Vec<PathBuf> as *mut c_void) };
    let pick = |pred: &dyn Fn(&str) -> bool| found.iter().find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(pred)).cloned();
    if let Some(p) = pick(&|n| n.starts_with("libmpich.so") || n.starts_with("libmpi.so.12") || n == "libmpi.so" || n.starts_with("libmpi_intel") || n.starts_with("libmpi.so.12.")) {
        return Ok(p);
    }
    if let Some(p) = pick(&|n| n.starts_with("libmpi.so.40")) {
        return Err(format!("{} is Open MPI, whose ABI libmpicr does not interpose yet (MPICH ABI only)", p.display()));
    }
    if let Some(p) = pick(&|n| n.starts_with("libmpi_abi")) {
        return Err(format!("{} is the MPI-5 standard ABI, which libmpicr does not interpose yet (MPICH ABI only)", p.display()));
    }
    Err("the program is not linked to an MPICH-ABI library (libmpich.so.12 or libmpi.so.12); set MPICR_MPI_LIB".into())
}

unsafe extern "C" fn collect(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: called by dl_iterate_phdr with a valid info pointer and our `Vec` as data.
    let (info, found) = unsafe { (&*info, &mut *(data as *mut Vec<PathBuf>)) };
    if !info.dlpi_name.is_null() {
        // SAFETY: dlpi_name is a NUL-terminated string for the duration of the callback.
        let name = unsafe { CStr::from_ptr(info.dlpi_name as *const c_char) };
        let s = name.to_string_lossy();
        if !s.is_empty() {
            found.push(PathBuf::from(s.into_owned()));
        }
    }
    0
}
