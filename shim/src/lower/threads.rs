//! Before a generation's namespace is unloaded, the threads still running its code must be
//! gone. MPI_Finalize joins the library's own threads, but not glibc's POSIX AIO helpers: Open
//! MPI's OMPIO writes with `aio_write` (MPI_File_iwrite*), whose helper threads belong to the
//! namespace's own libc and idle a second in `pthread_cond_timedwait` after their last request
//! before they exit. Unmapping their code under them kills the process with SIGSEGV when they
//! wake (a checkpoint's freeze wakes them at once).
//!
//! Threads are told apart by where they are blocked (`/proc/self/task/TID/syscall`'s program
//! counter): one blocked in the namespace's code is waited for until it is gone, or blocked
//! elsewhere. The program's own threads are not in the namespace while the gate is closed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long a release waits for the namespace's threads (glibc's AIO helpers idle 1 s).
const LIMIT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(2);

/// The executable mappings of `objects` (load address, name): those of the mapped file whose
/// first mapping starts at the object's load address. The dynamic loader and the vDSO, shared
/// with the program's namespace, are left out.
pub fn code_ranges(objects: &[(usize, String)], maps: &str) -> Vec<(usize, usize)> {
    struct Line<'a> {
        start: usize,
        end: usize,
        exec: bool,
        inode: &'a str,
    }
    let lines: Vec<Line> = maps
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms, _off, _dev, inode) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let (s, e) = range.split_once('-')?;
            Some(Line { start: usize::from_str_radix(s, 16).ok()?, end: usize::from_str_radix(e, 16).ok()?, exec: perms.contains('x'), inode })
        })
        .collect();
    let mut out = Vec::new();
    for (addr, name) in objects {
        if *addr == 0 || name.is_empty() || name.contains("ld-linux") || name.starts_with("linux-vdso") {
            continue;
        }
        let Some(first) = lines.iter().position(|l| l.start == *addr && l.inode != "0") else { continue };
        let inode = lines[first].inode;
        out.extend(lines[first..].iter().take_while(|l| l.inode == inode).filter(|l| l.exec).map(|l| (l.start, l.end)));
    }
    out
}

/// The program counter of a thread blocked in the kernel (`None`: running, or gone).
fn blocked_pc(tid: &str) -> Option<usize> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
    let pc = s.split_whitespace().last()?;
    usize::from_str_radix(pc.trim_start_matches("0x"), 16).ok()
}

/// Waits (at most `LIMIT`) until no other thread runs or is blocked in `ranges`. Returns the
/// threads still there when it gave up.
pub fn wait_gone(ranges: &[(usize, usize)]) -> Vec<String> {
    if ranges.is_empty() {
        return Vec::new();
    }
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() }.to_string();
    let inside = |pc: usize| ranges.iter().any(|&(s, e)| (s..e).contains(&pc));
    let (start, mut seen) = (Instant::now(), HashSet::new());
    let mut first = true;
    loop {
        let mut waiting = Vec::new();
        for tid in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
            let tid = tid.file_name().to_string_lossy().into_owned();
            if tid == me {
                continue;
            }
            let alive = std::path::Path::new("/proc/self/task").join(&tid).exists();
            match blocked_pc(&tid) {
                Some(pc) if inside(pc) => {
                    seen.insert(tid.clone());
                    waiting.push(tid);
                }
                Some(_) => {
                    seen.remove(&tid);
                }
                // running: still the namespace's if it was last seen blocked there
                None if alive && seen.contains(&tid) => waiting.push(tid),
                None => {}
            }
        }
        if first {
            tracing::debug!(target: "lower", ranges = ranges.len(), waiting = waiting.len(), "threads in the namespace's code");
            first = false;
        }
        if waiting.is_empty() {
            if !seen.is_empty() {
                tracing::debug!(target: "lower", us = start.elapsed().as_micros() as u64, "the namespace's threads are gone");
            }
            return Vec::new();
        }
        if start.elapsed() >= LIMIT {
            return waiting;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::code_ranges;

    #[test]
    fn only_the_objects_executable_mappings_count() {
        let maps = "\
1000-2000 r--p 00000000 08:01 11 /lib/libc.so.6
2000-3000 r-xp 00001000 08:01 11 /lib/libc.so.6
3000-4000 rw-p 00002000 08:01 11 /lib/libc.so.6
5000-6000 r--p 00000000 08:01 11 /lib/libc.so.6
6000-7000 r-xp 00001000 08:01 11 /lib/libc.so.6
7000-8000 rw-p 00000000 00:00 0
8000-9000 r-xp 00000000 08:01 12 /lib/ld-linux-x86-64.so.2
";
        let objects = vec![(0x5000, "/lib/libc.so.6".to_string()), (0x8000, "/lib/ld-linux-x86-64.so.2".to_string()), (0, String::new())];
        assert_eq!(code_ranges(&objects, maps), vec![(0x6000, 0x7000)]);
    }
}
