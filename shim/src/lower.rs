//! The lower half: the real MPI library, loaded into a link-map namespace of its own.
//!
//! `dlmopen(LM_ID_NEWLM)` keeps the real library's internal calls (it calls many `PMPI_*`
//! through its PLT) inside its own namespace, so they never re-enter the shim. Each generation
//! is *disposable* (docs/lower-half.md): the namespace is entered through the anchor
//! (`shim/anchor/anchor.c`), which keeps the libraries from pinning themselves and records the
//! memory they map, so [`release_current`] unloads every object of the namespace and unmaps what
//! they leaked. glibc then reuses the namespace and its static TLS for the next generation:
//! renewals are unbounded, images do not grow with the number of epochs, and a restored process
//! has the same headroom as a new one. All loading goes through [`load_generation`]; the rest of
//! the shim only sees [`fns`].

mod elf;

use crate::gen::real::RealFns;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Mutex;

/// The anchor, built by build.rs from `shim/anchor/anchor.c` and loaded from a memfd.
static ANCHOR_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libmpicr_anchor.so"));

/// One loaded copy of the real library.
pub struct Generation {
    pub fns: RealFns,
    pub path: PathBuf,
    pub number: u32,
    /// dlmopen handles: the MPI library, the anchor, and NODELETE-free stand-ins (see [`elf`]).
    /// Null in a released generation.
    lib: *mut c_void,
    anchor: *mut c_void,
    /// The anchor's exports; None in a released generation.
    anchor_fns: Option<AnchorFns>,
    stand_ins: Vec<*mut c_void>,
    /// `uselocale` of the namespace's own libc (see [`prepare_thread`]).
    uselocale: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
}

// SAFETY: the raw handles are only used under LOAD_LOCK by `release_current`; the rest is
// immutable after construction.
unsafe impl Sync for Generation {}
// SAFETY: as above.
unsafe impl Send for Generation {}

impl Generation {
    /// Address of a data symbol of the real library (e.g. `MPI_UNWEIGHTED`), or null.
    pub fn data(&self, name: &str) -> *mut c_void {
        if self.lib.is_null() {
            return std::ptr::null_mut();
        }
        let Ok(sym) = CString::new(name) else { return std::ptr::null_mut() };
        // SAFETY: looking up a symbol address in a live handle has no side effects.
        unsafe { libc::dlsym(self.lib, sym.as_ptr()) }
    }

    /// What stands in for a generation after its release: every entry point is absent, so a
    /// stray call gets MPI_ERR_UNSUPPORTED_OPERATION instead of jumping into unmapped code.
    fn released(number: u32, path: PathBuf) -> Generation {
        Generation {
            fns: RealFns::resolve(&|_| std::ptr::null_mut()),
            path,
            number,
            lib: std::ptr::null_mut(),
            anchor: std::ptr::null_mut(),
            anchor_fns: None,
            stand_ins: Vec::new(),
            uselocale: None,
        }
    }
}

static CURRENT: AtomicPtr<Generation> = AtomicPtr::new(std::ptr::null_mut());
/// The record of the generation released before the current one's predecessor is freed when a
/// new one loads: records are few (no growth over thousands of renewals), and a thread that
/// read CURRENT just before a release still finds its record alive for a whole cycle.
static RETIRED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
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
    // SAFETY: a record stays allocated for four generation swaps after it stops being current
    // (see `retire`); callers use it only for the duration of one call.
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
    match locate().and_then(|path| load_locked(&path)) {
        Ok(g) => g,
        Err(e) => crate::errors::fatal(&format!("cannot load the MPI library underneath: {e}")),
    }
}

/// Settings the libraries of a generation need to be unloadable, set in the process
/// environment (which glibc hands to the namespace's libc at load) unless the user chose.
/// UCX's memory hooks patch relocations of every loaded object and pin libucs for good.
fn prepare_environment() {
    for (k, v) in [("UCX_MEM_MMAP_HOOK_MODE", "none")] {
        if std::env::var_os(k).is_none() {
            std::env::set_var(k, v);
        }
    }
}

/// An anonymous in-memory file holding `bytes`, to dlmopen through /proc/self/fd.
fn memfd_with(name: &str, bytes: &[u8]) -> Result<std::fs::File, String> {
    use std::io::Write;
    let cname = CString::new(name).map_err(|_| "memfd name".to_string())?;
    // SAFETY: memfd_create with a valid name; the descriptor is owned by the File below.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    let mut f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    f.write_all(bytes).map_err(|e| format!("writing {name}: {e}"))?;
    Ok(f)
}

fn dlmopen(lmid: libc::Lmid_t, path: &str) -> Result<*mut c_void, String> {
    let c = CString::new(path).map_err(|_| format!("{path}: path has a NUL byte"))?;
    // SAFETY: dlmopen with a valid C string; constructors run in the target namespace.
    let h = unsafe { libc::dlmopen(lmid, c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        Err(format!("dlmopen {path}: {}", dlerror()))
    } else {
        Ok(h)
    }
}

/// Loads an in-memory image through /proc/self/fd. The loader knows it by that path, so the
/// caller keeps the returned file open until everything of the namespace is loaded: a second
/// image under a reused descriptor number would be taken for the first one.
fn dlmopen_bytes(lmid: libc::Lmid_t, name: &str, bytes: &[u8]) -> Result<(*mut c_void, std::fs::File), String> {
    use std::os::fd::AsRawFd;
    let f = memfd_with(name, bytes)?;
    let h = dlmopen(lmid, &format!("/proc/self/fd/{}", f.as_raw_fd()))?;
    Ok((h, f))
}

fn namespace_of(handle: *mut c_void) -> Result<libc::Lmid_t, String> {
    let mut lmid: libc::Lmid_t = 0;
    // SAFETY: a live handle and a valid out-pointer of the type RTLD_DI_LMID writes.
    let rc = unsafe { libc::dlinfo(handle, libc::RTLD_DI_LMID, &mut lmid as *mut libc::Lmid_t as *mut c_void) };
    if rc != 0 {
        return Err(format!("dlinfo: {}", dlerror()));
    }
    Ok(lmid)
}

/// Loads a fresh copy of the library at `path` into a new namespace and makes it current.
pub fn load_generation(path: &Path) -> Result<&'static Generation, String> {
    let _l = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    load_locked(path)
}

fn load_locked(path: &Path) -> Result<&'static Generation, String> {
    prepare_environment();
    mark_base_libc_threaded();
    let path_str = path.to_str().ok_or_else(|| format!("{}: library path is not UTF-8", path.display()))?;
    // Open until the namespace is loaded (see `dlmopen_bytes`); the mappings outlive them.
    let mut images = Vec::new();
    let (anchor, image) = dlmopen_bytes(libc::LM_ID_NEWLM, "mpicr-anchor", ANCHOR_SO)?;
    images.push(image);
    let unload_partial = |handles: &[*mut c_void]| {
        for &h in handles.iter().rev() {
            // SAFETY: handles opened above and used by nothing else.
            unsafe { libc::dlclose(h) };
        }
    };
    let lmid = namespace_of(anchor).inspect_err(|_| unload_partial(&[anchor]))?;
    let anchor_fns = AnchorFns::resolve(anchor).inspect_err(|_| unload_partial(&[anchor]))?;
    anchor_fns.mark_namespace_threaded().inspect_err(|_| unload_partial(&[anchor]))?;
    let mut stand_ins = Vec::new();
    for (name, bytes) in nodelete_stand_ins(path) {
        match dlmopen_bytes(lmid, &name, &bytes) {
            Ok((h, image)) => {
                stand_ins.push(h);
                images.push(image);
            }
            Err(e) => {
                unload_partial(&[&[anchor][..], &stand_ins].concat());
                return Err(e);
            }
        }
    }
    let lib = match dlmopen(lmid, path_str) {
        Ok(h) => h,
        Err(e) => {
            unload_partial(&[&[anchor][..], &stand_ins].concat());
            return Err(e);
        }
    };
    let sym = |name: &str| -> *mut c_void {
        // Names from the generated table are NUL-terminated.
        // SAFETY: symbol lookup in a live handle.
        unsafe { libc::dlsym(lib, name.as_ptr() as *const c_char) }
    };
    let fns = RealFns::resolve(&sym);
    if fns.MPI_Init.is_none() || fns.MPI_Comm_rank.is_none() {
        unload_partial(&[&[anchor][..], &stand_ins, &[lib]].concat());
        return Err(format!("{} does not look like an MPI library (no MPI_Init)", path.display()));
    }
    // SAFETY: `uselocale` of the libc copy in the namespace, with its C signature.
    let uselocale = unsafe {
        std::mem::transmute::<*mut c_void, Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>>(sym("uselocale\0"))
    };
    let number = GENERATIONS.fetch_add(1, Ordering::AcqRel);
    let g: &'static Generation =
        Box::leak(Box::new(Generation {
        fns,
        path: path.to_path_buf(),
        number,
        lib,
        anchor,
        anchor_fns: Some(anchor_fns),
        stand_ins,
        uselocale,
    }));
    let previous = CURRENT.swap(g as *const Generation as *mut Generation, Ordering::AcqRel);
    retire(previous);
    CURRENT_NUMBER.store(number, Ordering::Release);
    prepare_thread();
    Ok(g)
}

/// Makes the program's own libc know that the process has threads, before the library's
/// copy of libc creates any. glibc skips the atomic lock and the futex wake in its mutexes
/// while the libc that owns them has never created a thread, and the loader's locks are the
/// program's libc's mutexes. Threads made only by the copy in the namespace (UCX's progress
/// thread) then wait on a loader lock that the main thread releases without waking them
/// (measured: about one plain `LD_PRELOAD` run in 150 hung in MPI_Finalize, joining that thread).
fn mark_base_libc_threaded() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // A failure to start a thread leaves the flag as it was; nothing else depends on it.
        if let Ok(t) = std::thread::Builder::new().name("mpicr-mark".into()).spawn(|| ()) {
            let _ = t.join();
        }
    });
}

/// The anchor's exports (shim/anchor/anchor.c), looked up once per namespace: the one place
/// that knows their names and signatures.
#[derive(Clone, Copy)]
struct AnchorFns {
    mark_threaded: unsafe extern "C" fn() -> c_int,
    close_all: unsafe extern "C" fn() -> c_int,
    regions: unsafe extern "C" fn(*mut usize, usize) -> usize,
}

impl AnchorFns {
    fn resolve(anchor: *mut c_void) -> Result<AnchorFns, String> {
        let get = |name: &CStr| {
            // SAFETY: symbol lookup in a live handle.
            let p = unsafe { libc::dlsym(anchor, name.as_ptr()) };
            if p.is_null() { Err(format!("the lower half's anchor has no {}", name.to_string_lossy())) } else { Ok(p) }
        };
        // SAFETY: non-null addresses of the anchor's exports, with the signatures anchor.c
        // gives them.
        unsafe {
            Ok(AnchorFns {
                mark_threaded: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(get(
                    c"mpicr_anchor_mark_threaded",
                )?),
                close_all: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(get(
                    c"mpicr_anchor_close_all",
                )?),
                regions: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut usize, usize) -> usize>(get(
                    c"mpicr_anchor_regions",
                )?),
            })
        }
    }

    /// The same as [`mark_base_libc_threaded`] for the namespace's libc: the program's threads
    /// (and the agent) call into it.
    fn mark_namespace_threaded(&self) -> Result<(), String> {
        // SAFETY: creates and joins one thread in the namespace; no lock of ours is held by it.
        match unsafe { (self.mark_threaded)() } {
            0 => Ok(()),
            e => Err(format!("cannot start a thread in the lower half's namespace: {}", std::io::Error::from_raw_os_error(e))),
        }
    }

    /// The mappings the anchor recorded, as (start, end) pairs flattened.
    fn regions(&self) -> Vec<usize> {
        // SAFETY: with a null buffer the anchor only counts.
        let n = unsafe { (self.regions)(std::ptr::null_mut(), 0) };
        let mut regions = vec![0; 2 * (n + 64)];
        // SAFETY: the anchor writes at most `max` pairs, and there is room for n + 64.
        let got = unsafe { (self.regions)(regions.as_mut_ptr(), n + 64) };
        regions.truncate(2 * got.min(n + 64));
        regions
    }
}

/// Keeps `record` (a generation record no longer current) for a while and frees the oldest
/// kept one. Called under LOAD_LOCK, with the gate closed: no thread is inside the library.
fn retire(record: *mut Generation) {
    if record.is_null() {
        return;
    }
    let mut kept = RETIRED.lock().unwrap_or_else(|e| e.into_inner());
    kept.push(record as usize);
    while kept.len() > 4 {
        let oldest = kept.remove(0) as *mut Generation;
        // SAFETY: a record made by Box::leak in this module, no longer current, retired four
        // swaps ago; nothing holds it across a whole checkpoint cycle.
        drop(unsafe { Box::from_raw(oldest) });
    }
}

/// What the last release found.
#[derive(Clone, Debug, Default)]
pub struct ReleaseReport {
    /// Objects of the namespace still loaded after unloading it (they pin the namespace).
    pub pinned: Vec<String>,
    /// Mappings unmapped after unloading, and their bytes.
    pub regions: usize,
    pub bytes: usize,
}

static LAST_RELEASE: Mutex<Option<ReleaseReport>> = Mutex::new(None);

pub fn last_release() -> Option<ReleaseReport> {
    LAST_RELEASE.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Unloads the current generation (its library was finalized) and unmaps everything its
/// libraries mapped. Nothing of it may run again: the generation left current has no entry
/// points until [`load_generation`] brings the next.
pub fn release_current() -> ReleaseReport {
    let _l = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let p = CURRENT.load(Ordering::Acquire);
    if p.is_null() {
        return ReleaseReport::default();
    }
    // SAFETY: see `current`.
    let g = unsafe { &*p };
    if g.lib.is_null() {
        return ReleaseReport::default();
    }
    let placeholder: &'static Generation = Box::leak(Box::new(Generation::released(g.number, g.path.clone())));
    CURRENT.store(placeholder as *const Generation as *mut Generation, Ordering::Release);
    retire(p);
    let objects = namespace_objects(g.anchor);
    // One reference of ours to every object, dropped newest first after the library's own:
    // objects then leave one at a time in reverse load order, each at the end of the static
    // TLS area when it has a block there (libfabric's providers do), which glibc reclaims only
    // from the end. Unloaded in one batch, blocks freed out of order would be lost for good.
    let lmid = namespace_of(g.anchor).ok();
    let refs: Vec<*mut c_void> = objects
        .iter()
        .filter(|(_, name)| !name.is_empty())
        .filter_map(|(_, name)| {
            let c = CString::new(name.as_str()).ok()?;
            // SAFETY: RTLD_NOLOAD only takes a reference to an object already loaded there.
            let h = unsafe { libc::dlmopen(lmid?, c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
            (!h.is_null()).then_some(h)
        })
        .collect();
    // SAFETY: the library was finalized; its handle is closed once, then what it opened and
    // never closed, then the stand-ins and the anchor itself.
    unsafe {
        libc::dlclose(g.lib);
        if let Some(a) = g.anchor_fns {
            (a.close_all)();
        }
    }
    let regions = g.anchor_fns.map(|a| a.regions()).unwrap_or_default();
    // SAFETY: handles opened by `load_generation`, closed once.
    unsafe {
        for &h in g.stand_ins.iter().rev() {
            libc::dlclose(h);
        }
        libc::dlclose(g.anchor);
        for &h in refs.iter().rev() {
            libc::dlclose(h);
        }
    }
    let pinned = still_loaded(&objects);
    let mut report = ReleaseReport { pinned, regions: 0, bytes: 0 };
    if report.pinned.is_empty() {
        for pair in regions.chunks_exact(2) {
            let (start, end) = (pair[0], pair[1]);
            if end > start {
                // SAFETY: a mapping made by or for the unloaded namespace; none of its code
                // is left to use it.
                unsafe { libc::munmap(start as *mut c_void, end - start) };
                report.regions += 1;
                report.bytes += end - start;
            }
        }
    }
    *LAST_RELEASE.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.clone());
    report
}

/// Which of `objects` are still loaded: those whose load address still starts a mapping.
/// (Asking the loader instead, with `dlmopen(lmid, name, RTLD_NOLOAD)`, is not safe: glibc
/// 2.36 signals "invalid target namespace" for a namespace just emptied and leaks its load
/// lock each time, which deadlocks the next thread that needs it.)
fn still_loaded(objects: &[(usize, String)]) -> Vec<String> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return Vec::new() };
    let starts: std::collections::HashSet<usize> = maps
        .lines()
        .filter_map(|l| l.split('-').next().and_then(|a| usize::from_str_radix(a, 16).ok()))
        .collect();
    // The namespace's entry for the dynamic loader is the base namespace's ld.so itself.
    let base: std::collections::HashSet<usize> = loaded_objects().into_iter().map(|(a, _)| a).collect();
    objects
        .iter()
        .filter(|(addr, name)| *addr != 0 && !name.is_empty() && starts.contains(addr) && !base.contains(addr))
        .map(|(_, n)| n.clone())
        .collect()
}

/// The objects of the namespace `handle` lives in: (load address, name).
fn namespace_objects(handle: *mut c_void) -> Vec<(usize, String)> {
    let mut map: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: a live handle; RTLD_DI_LINKMAP writes a `struct link_map *`.
    if unsafe { libc::dlinfo(handle, libc::RTLD_DI_LINKMAP, &mut map as *mut *mut c_void as *mut c_void) } != 0 {
        return Vec::new();
    }
    #[repr(C)]
    struct LinkMap {
        l_addr: usize,
        l_name: *const c_char,
        l_ld: *mut c_void,
        l_next: *mut LinkMap,
        l_prev: *mut LinkMap,
    }
    let mut out = Vec::new();
    let mut m = map as *mut LinkMap;
    // Walk back to the namespace's first object, then forward through all of them.
    // SAFETY: the public head of glibc's `struct link_map`; the chain is stable while we hold
    // LOAD_LOCK and no other thread loads into this namespace.
    unsafe {
        while !m.is_null() && !(*m).l_prev.is_null() {
            m = (*m).l_prev;
        }
        while !m.is_null() {
            let name = if (*m).l_name.is_null() { String::new() } else { CStr::from_ptr((*m).l_name).to_string_lossy().into_owned() };
            out.push(((*m).l_addr, name));
            m = (*m).l_next;
        }
    }
    out
}

/// Every object loaded in the process, in any namespace: (load address, name).
fn loaded_objects() -> Vec<(usize, String)> {
    let mut found: Vec<(usize, String)> = Vec::new();
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: called by dl_iterate_phdr with a valid info pointer and our Vec as data.
        let (info, found) = unsafe { (&*info, &mut *(data as *mut Vec<(usize, String)>)) };
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated string for the duration of the callback.
            unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
        };
        found.push((info.dlpi_addr as usize, name));
        0
    }
    // SAFETY: `each` only touches `found`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut found as *mut Vec<(usize, String)> as *mut c_void) };
    found
}

/// Copies without DF_1_NODELETE of the libraries `lib` needs that carry it (see [`elf`]):
/// (soname, image). Dependencies are resolved by the dynamic loader itself (`ld.so --list`),
/// so the search follows exactly the rules the real load will follow.
/// The query runs once per library path and process (a subprocess in the middle of a renewal,
/// with the program's threads waiting at the gate, is best avoided); the files are read again
/// at each load, so a restart on another node uses that node's copies.
fn nodelete_stand_ins(lib: &Path) -> Vec<(String, Vec<u8>)> {
    static DEPS: Mutex<Option<(PathBuf, Vec<(String, PathBuf)>)>> = Mutex::new(None);
    let mut cached = DEPS.lock().unwrap_or_else(|e| e.into_inner());
    if cached.as_ref().is_none_or(|(p, _)| p != lib) {
        *cached = Some((lib.to_path_buf(), dependencies(lib)));
    }
    let deps = cached.as_ref().map(|(_, d)| d.clone()).unwrap_or_default();
    drop(cached);
    let mut stand_ins = Vec::new();
    for (soname, dep) in deps {
        let Ok(image) = std::fs::read(&dep) else { continue };
        let Some(d) = elf::dynamic(&image) else { continue };
        if !d.nodelete || d.has_search_path {
            // A copy with a search path could resolve its own dependencies differently.
            continue;
        }
        if let Some(copy) = elf::without_nodelete(&image) {
            stand_ins.push((soname, copy));
        }
    }
    stand_ins
}

/// The shared objects `lib` needs, as the dynamic loader resolves them: (soname, path).
fn dependencies(lib: &Path) -> Vec<(String, PathBuf)> {
    let Some(ldso) = dynamic_loader() else { return Vec::new() };
    let out = std::process::Command::new(ldso)
        .arg("--list")
        .arg(lib)
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let Ok(out) = out else { return Vec::new() };
    let mut deps = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "\tlibrt.so.1 => /lib/x86_64-linux-gnu/librt.so.1 (0x...)"
        let Some((soname, rest)) = line.trim().split_once(" => ") else { continue };
        let Some(dep) = rest.rsplit_once(" (").map(|(p, _)| p) else { continue };
        deps.push((soname.to_string(), PathBuf::from(dep)));
    }
    deps
}

/// The dynamic loader of this process (the object whose name is ld-linux*).
fn dynamic_loader() -> Option<PathBuf> {
    loaded_objects()
        .into_iter()
        .map(|(_, n)| PathBuf::from(n))
        .find(|p| p.file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with("ld-linux") || f.starts_with("ld64.so") || f.starts_with("ld-musl")))
}

/// Renewal headroom, measured: `None` while generations unload completely (the next one
/// reuses the namespace: unbounded), else how many more namespaces, each with its own libc
/// in static TLS, the loader can still create now (probed by loading a libc and unloading it).
pub fn renewals_left() -> Option<u32> {
    match last_release() {
        Some(r) if !r.pinned.is_empty() => Some(probe_namespaces(16)),
        _ => None,
    }
}

/// Can the loader create a namespace now? `Err` carries its reason (its own words).
pub fn probe_renewal() -> Result<(), String> {
    let _l = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (h, _image) = dlmopen_bytes(libc::LM_ID_NEWLM, "mpicr-anchor-probe", ANCHOR_SO)?;
    // SAFETY: the probe handle opened above.
    unsafe { libc::dlclose(h) };
    Ok(())
}

/// How many namespaces with a libc can be created at once (up to `max`).
fn probe_namespaces(max: u32) -> u32 {
    let _l = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut held = Vec::new();
    while (held.len() as u32) < max {
        match dlmopen_bytes(libc::LM_ID_NEWLM, "mpicr-anchor-probe", ANCHOR_SO) {
            Ok((h, image)) => held.push((h, image)),
            Err(_) => break,
        }
    }
    let n = held.len() as u32;
    for (h, _image) in held.into_iter().rev() {
        // SAFETY: probe handles opened above.
        unsafe { libc::dlclose(h) };
    }
    n
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
