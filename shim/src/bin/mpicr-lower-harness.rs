//! Cycles the lower half on its own, without a program, a keeper or a checkpoint: loads the MPI
//! library at PATH into a fresh namespace through the shim's loader, initialises it, runs an
//! allreduce over its world, finalizes it and releases the namespace, GENERATIONS times.
//! Start it under the library's own launcher (`prterun -n 2 mpicr-lower-harness PATH 20`);
//! every rank prints one line per generation (load, init and release times, what the release
//! unmapped, what stayed loaded), and a summary with the counts; it exits 0 when every
//! generation passed.
//!
//! Usage: mpicr-lower-harness [--raw] [--backtrace] [--pause MS] PATH GENERATIONS
//!
//! The library is driven through `lower::fns()`, the MPICH-ABI entry points the core uses (for
//! Open MPI, the ABI adapter `lower::ompi`). `--raw` drives Open MPI through its own symbols
//! instead (its ABI, no adapter): the loader alone. `--backtrace` prints a backtrace on SIGSEGV
//! and on SIGUSR1 (to see where a hung rank is). `--pause MS` waits that long after each
//! release, as a checkpoint's dump does before the renewal.

use mpicr_shim::lower::{self, abi::*};
use std::os::raw::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a generation failed.
#[derive(Debug, thiserror::Error)]
enum HarnessError {
    #[error("{0}")]
    Load(#[from] lower::LoadError),
    /// A call through the MPICH-ABI entry points failed (its code and the library's words).
    #[error("{call} returned {rc}: {reason}")]
    Failed { call: &'static str, rc: c_int, reason: String },
    #[error("{0}: no entry point")]
    NoEntryPoint(&'static str),
    #[error("the allreduce gave {got}, not {want}")]
    Sum { got: c_int, want: c_int },
    #[error("{} has no {name}", .library.display())]
    NoSymbol { library: PathBuf, name: &'static str },
    /// A call through Open MPI's own symbols failed (`--raw`).
    #[error("{call} returned {rc}")]
    RawFailed { call: &'static str, rc: c_int },
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |args: &mut Vec<String>, name: &str| {
        let had = args.iter().any(|a| a == name);
        args.retain(|a| a != name);
        had
    };
    let raw = flag(&mut args, "--raw");
    let pause = match args.iter().position(|a| a == "--pause") {
        Some(i) if i + 1 < args.len() => {
            let ms = args[i + 1].parse::<u64>().unwrap_or_else(|_| {
                eprintln!("mpicr-lower-harness: --pause takes milliseconds, not {}", args[i + 1]);
                std::process::exit(2)
            });
            args.drain(i..i + 2);
            Duration::from_millis(ms)
        }
        _ => Duration::ZERO,
    };
    if flag(&mut args, "--backtrace") {
        install_backtrace();
    }
    let (Some(path), Some(count), 2) = (args.first(), args.get(1), args.len()) else {
        eprintln!("usage: mpicr-lower-harness [--raw] [--backtrace] [--pause MS] PATH GENERATIONS");
        std::process::exit(2);
    };
    let path = PathBuf::from(path);
    let Ok(generations) = count.parse::<u32>() else {
        eprintln!("mpicr-lower-harness: GENERATIONS must be a number, not {count}");
        std::process::exit(2);
    };
    let mut ok = 0;
    let mut rank = -1;
    for g in 1..=generations {
        match cycle(&path, g, raw) {
            Ok(r) => {
                rank = r;
                ok += 1;
                std::thread::sleep(pause);
                if let Some(dir) = std::env::var_os("HARNESS_BARRIER_DIR") {
                    file_barrier(Path::new(&dir), g);
                }
            }
            Err(e) => {
                eprintln!("mpicr-lower-harness: generation {g}: {e}");
                break;
            }
        }
    }
    println!("rank {rank}: {ok}/{generations} generations");
    std::process::exit(if ok == generations { 0 } else { 1 });
}

/// What one generation measured.
struct Times {
    rank: c_int,
    size: c_int,
    init: Duration,
}

/// One generation: load, init, allreduce, finalize, release. Returns this process's rank.
fn cycle(path: &Path, g: u32, raw: bool) -> Result<c_int, HarnessError> {
    let t0 = Instant::now();
    let gen = lower::load_generation(path)?;
    let loaded = t0.elapsed();
    let t = if raw && lower::family(path) == lower::Family::OpenMpi { raw_ompi(gen)? } else { through_fns()? };
    let fences = gen.pmix_fences();
    let t2 = Instant::now();
    let report = lower::release_current();
    let released = t2.elapsed();
    println!(
        "rank {}/{} generation {g} (copy {}): load {:.3} s, init {:.3} s ({fences} PMIx fences), release {:.3} s, {} regions unmapped, pinned: {}",
        t.rank,
        t.size,
        gen.number,
        loaded.as_secs_f64(),
        t.init.as_secs_f64(),
        released.as_secs_f64(),
        report.regions,
        if report.pinned.is_empty() { "none".to_string() } else { report.pinned.join(" ") }
    );
    Ok(t.rank)
}

/// Init, allreduce and finalize through the MPICH-ABI entry points.
fn through_fns() -> Result<Times, HarnessError> {
    let f = lower::fns();
    let call = |call: &'static str, rc: Option<c_int>| -> Result<(), HarnessError> {
        match rc {
            Some(MPI_SUCCESS) => Ok(()),
            Some(rc) => Err(HarnessError::Failed { call, rc, reason: lower::error_string(rc) }),
            None => Err(HarnessError::NoEntryPoint(call)),
        }
    };
    let mut provided = 0;
    let t1 = Instant::now();
    // SAFETY: null argc/argv are allowed; out-pointers are locals.
    call("MPI_Init_thread", unsafe { f.MPI_Init_thread.map(|i| i(std::ptr::null_mut(), std::ptr::null_mut(), MPI_THREAD_SERIALIZED, &mut provided)) })?;
    let init = t1.elapsed();
    let (mut rank, mut size) = (-1, -1);
    // SAFETY: out-pointers are locals.
    call("MPI_Comm_rank", unsafe { f.MPI_Comm_rank.map(|h| h(MPI_COMM_WORLD, &mut rank)) })?;
    // SAFETY: as above.
    call("MPI_Comm_size", unsafe { f.MPI_Comm_size.map(|h| h(MPI_COMM_WORLD, &mut size)) })?;
    let (x, mut sum): (c_int, c_int) = (rank + 1, 0);
    // SAFETY: one int in and one out, of the datatype named.
    call("MPI_Allreduce", unsafe {
        f.MPI_Allreduce.map(|h| h(&x as *const c_int as *const c_void, &mut sum as *mut c_int as *mut c_void, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD))
    })?;
    check_sum(sum, size)?;
    let muted = lower::mute_current_stdio();
    // SAFETY: nothing is pending.
    call("MPI_Finalize", unsafe { f.MPI_Finalize.map(|h| h()) })?;
    drop(muted);
    Ok(Times { rank, size, init })
}

fn check_sum(sum: c_int, size: c_int) -> Result<(), HarnessError> {
    let want = size * (size + 1) / 2;
    if sum == want {
        Ok(())
    } else {
        Err(HarnessError::Sum { got: sum, want })
    }
}

/// The same through Open MPI's own symbols and ABI (pointer handles).
fn raw_ompi(gen: &lower::Generation) -> Result<Times, HarnessError> {
    type P = *mut c_void;
    let sym = |name: &'static str| {
        let p = gen.data(name);
        if p.is_null() {
            Err(HarnessError::NoSymbol { library: gen.path.clone(), name })
        } else {
            Ok(p)
        }
    };
    let check = |call: &'static str, rc: c_int| if rc == 0 { Ok(()) } else { Err(HarnessError::RawFailed { call, rc }) };
    // SAFETY: the functions of Open MPI's mpi.h, with their C signatures.
    let (init, rankf, sizef, allreduce, finalize) = unsafe {
        (
            std::mem::transmute::<P, unsafe extern "C" fn(P, P) -> c_int>(sym("MPI_Init")?),
            std::mem::transmute::<P, unsafe extern "C" fn(P, *mut c_int) -> c_int>(sym("MPI_Comm_rank")?),
            std::mem::transmute::<P, unsafe extern "C" fn(P, *mut c_int) -> c_int>(sym("MPI_Comm_size")?),
            std::mem::transmute::<P, unsafe extern "C" fn(P, P, c_int, P, P, P) -> c_int>(sym("MPI_Allreduce")?),
            std::mem::transmute::<P, unsafe extern "C" fn() -> c_int>(sym("MPI_Finalize")?),
        )
    };
    let (world, int, sum_op) = (sym("ompi_mpi_comm_world")?, sym("ompi_mpi_int")?, sym("ompi_mpi_op_sum")?);
    let t1 = Instant::now();
    // SAFETY: null argc/argv are allowed.
    check("MPI_Init", unsafe { init(std::ptr::null_mut(), std::ptr::null_mut()) })?;
    let init = t1.elapsed();
    let (mut rank, mut size) = (-1, -1);
    // SAFETY: predefined handles (data symbols' addresses) and local out-pointers.
    unsafe {
        check("MPI_Comm_rank", rankf(world, &mut rank))?;
        check("MPI_Comm_size", sizef(world, &mut size))?;
    }
    let (x, mut sum): (c_int, c_int) = (rank + 1, 0);
    // SAFETY: one int in and one out, of the datatype named.
    check("MPI_Allreduce", unsafe { allreduce(&x as *const c_int as P, &mut sum as *mut c_int as P, 1, int, sum_op, world) })?;
    check_sum(sum, size)?;
    let muted = lower::mute_current_stdio();
    // SAFETY: nothing is pending.
    check("MPI_Finalize", unsafe { finalize() })?;
    drop(muted);
    Ok(Times { rank, size, init })
}

extern "C" {
    fn backtrace(buf: *mut *mut c_void, n: c_int) -> c_int;
    fn backtrace_symbols_fd(buf: *const *mut c_void, n: c_int, fd: c_int);
}

/// Prints the faulting address and a backtrace (object + offset per frame: addr2line finds the
/// lines); ends the process unless the signal was SIGUSR1. A diagnostic: not async-signal-safe.
extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo; backtrace writes at most 64 frames into `buf`.
    unsafe {
        eprintln!("mpicr-lower-harness: signal {sig}, address {:?}", (*info).si_addr());
        let mut buf = [std::ptr::null_mut(); 64];
        let n = backtrace(buf.as_mut_ptr(), 64);
        backtrace_symbols_fd(buf.as_ptr(), n, 2);
        if sig != libc::SIGUSR1 {
            libc::_exit(128 + sig);
        }
    }
}

fn install_backtrace() {
    // SAFETY: a zeroed sigaction with a handler of the SA_SIGINFO signature.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
}

/// Experimental: waits until every rank has released generation `g` (files in `dir`).
fn file_barrier(dir: &Path, g: u32) {
    let rank: u32 = std::env::var("PMIX_RANK").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let size: u32 = std::env::var("HARNESS_SIZE").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let _ = std::fs::write(dir.join(format!("{g}-{rank}")), b"");
    while (0..size).any(|r| !dir.join(format!("{g}-{r}")).exists()) {
        std::thread::sleep(Duration::from_millis(10));
    }
}
