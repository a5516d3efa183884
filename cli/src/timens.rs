//! A restored rank must not read its peers' start time as 0.
//!
//! CRIU restores a tree dumped from a PID namespace into a time namespace of its own whose
//! CLOCK_BOOTTIME offset keeps the program's clock continuous: the offset is its clock at the
//! dump minus the node's clock at the restore, that is minus D, the time it was away. /proc
//! shows start times through that offset: a restored process reads a process that started S
//! after boot as started S minus D (wrapping to a huge value when negative).
//!
//! UCX (MPICH's netmod) records the start time of every shared-memory peer when it connects,
//! reading `/proc/<peer pid>/stat`, and fails `MPI_Init` with "Endpoint timeout" when it reads
//! 0. A program under `mpicr` is pid 2 in its own PID namespace, and /proc is the node's, so
//! that read is of the node's pid 2 (kthreadd, started S = a fraction of a second after boot).
//! It reads 0 when S minus D falls in [0, one clock tick): a restart about S after the dump
//! (measured: S = 0.26 s here, D = 0.25-0.28 s for a `--stop` then an immediate restart of a
//! mixed app-mode job; 4 restarts in 10 failed). Waiting before the restore until D is past
//! that window costs at most S plus a tick and a margin, and only restarts that quick.

use std::path::Path;
use std::time::Duration;

/// The node's pid whose start time a restored rank reads for every peer in a PID namespace.
const PEER_ALIAS_PID: u32 = 2;
/// Beyond the window: CRIU sets the offset after this check, so D only grows past it.
const MARGIN: Duration = Duration::from_millis(50);
/// A node whose pid 2 started this late is odd; the restart does not wait that long for it.
const MAX_WAIT: Duration = Duration::from_secs(5);

/// Waits, when needed, so that CRIU's restore of the image in `dir` gives the restored tree a
/// boottime offset under which the node's pid 2 does not read as started at 0. Best effort:
/// an image without a time namespace, or a /proc that cannot be read, waits for nothing.
pub fn settle_before_restore(dir: &Path) {
    let Some(dumped) = dumped_boottime(dir) else { return };
    let Some(start) = start_time(PEER_ALIAS_PID) else { return };
    let Some(now) = boottime_now() else { return };
    if let Some(wait) = wait_needed(dumped, now, start, tick()) {
        if wait <= MAX_WAIT {
            tracing::debug!(target: "keeper", ?wait, "waiting before the restore: the node's pid {PEER_ALIAS_PID} could read as started at 0");
            std::thread::sleep(wait);
        }
    }
}

/// How long to wait so that `now - dumped` (D) exceeds the start time `start` (known to the
/// tick: the process started in [start, start + tick)) by a margin; `None` when it already does,
/// or when D is negative (a node that booted after the dump: the offset is positive, no wrap).
fn wait_needed(dumped: Duration, now: Duration, start: Duration, tick: Duration) -> Option<Duration> {
    let away = now.checked_sub(dumped)?;
    let safe = start + tick + MARGIN;
    safe.checked_sub(away).filter(|w| !w.is_zero())
}

fn tick() -> Duration {
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Duration::from_nanos(1_000_000_000 / u64::try_from(hz).ok().filter(|h| *h > 0).unwrap_or(100))
}

/// The start time of `pid` after boot, as this process reads it, to the tick.
fn start_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = start_ticks(&stat)?;
    Some(tick() * u32::try_from(ticks).ok()?)
}

/// Field 22 of a `/proc/PID/stat` line (the name, field 2, may hold spaces and parentheses).
fn start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow the name: the start time is the 20th of them.
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn boottime_now() -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(u64::try_from(ts.tv_sec).ok()?, u32::try_from(ts.tv_nsec).ok()?))
}

/// The tree's CLOCK_BOOTTIME at the dump, from CRIU's `timens-*.img` in `dir`.
fn dumped_boottime(dir: &Path) -> Option<Duration> {
    let img = std::fs::read_dir(dir).ok()?.flatten().find(|e| {
        let n = e.file_name();
        let n = n.to_string_lossy();
        n.starts_with("timens-") && n.ends_with(".img")
    })?;
    parse_timens_boottime(&std::fs::read(img.path()).ok()?)
}

/// A CRIU image: two magic words, then one entry (a 32-bit length and a protobuf
/// `TimensEntry { monotonic = 1, boottime = 2 }`, each a `Timespec { tv_sec = 1, tv_nsec = 2 }`).
fn parse_timens_boottime(img: &[u8]) -> Option<Duration> {
    let len = u32::from_le_bytes(img.get(8..12)?.try_into().ok()?) as usize;
    let entry = img.get(12..12 + len)?;
    let boottime = fields(entry).find(|(n, _)| *n == 2).and_then(|(_, v)| v.bytes())?;
    let (mut sec, mut nsec) = (0, 0);
    for (n, v) in fields(boottime) {
        match (n, v) {
            (1, Value::Varint(s)) => sec = s,
            (2, Value::Varint(ns)) => nsec = u32::try_from(ns).ok()?,
            _ => {}
        }
    }
    Some(Duration::new(sec, nsec))
}

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

impl<'a> Value<'a> {
    fn bytes(self) -> Option<&'a [u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            Value::Varint(_) => None,
        }
    }
}

/// The (field number, value) pairs of a protobuf message of varints and length-delimited
/// fields, up to the first it cannot read.
fn fields(mut buf: &[u8]) -> impl Iterator<Item = (u64, Value<'_>)> {
    std::iter::from_fn(move || {
        let key = varint(&mut buf)?;
        let value = match key & 7 {
            0 => Value::Varint(varint(&mut buf)?),
            2 => {
                let n = usize::try_from(varint(&mut buf)?).ok()?;
                let (v, rest) = (buf.get(..n)?, buf.get(n..)?);
                buf = rest;
                Value::Bytes(v)
            }
            _ => return None,
        };
        Some((key >> 3, value))
    })
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `timens-0.img` CRIU 4.1 wrote here: monotonic 47032.379956675 s, boottime
    /// 47032.379956715 s.
    const IMG: [u8; 36] = [
        0x19, 0x43, 0x56, 0x54, 0x33, 0x44, 0x11, 0x43, 0x18, 0x00, 0x00, 0x00, 0x0a, 0x0a, 0x08, 0xb8, 0xef, 0x02, 0x10, 0xc3, 0xdb, 0x96, 0xb5, 0x01, 0x12,
        0x0a, 0x08, 0xb8, 0xef, 0x02, 0x10, 0xeb, 0xdb, 0x96, 0xb5, 0x01,
    ];

    #[test]
    fn reads_the_boottime_of_a_timens_image() {
        let b = parse_timens_boottime(&IMG).unwrap();
        assert_eq!(b.as_secs(), 47032);
        assert_eq!(b.subsec_nanos(), 379_956_715);
        assert_eq!(parse_timens_boottime(&IMG[..20]), None);
    }

    #[test]
    fn reads_the_start_time_past_an_odd_name() {
        let stat = "2 (a) b) S 0 0 0 0 -1 2129984 0 0 0 0 0 1 0 0 20 0 1 0 26 0 0 18446744073709551615 0";
        assert_eq!(start_ticks(stat), Some(26));
        assert_eq!(start_ticks("2 (kthreadd"), None);
    }

    #[test]
    fn waits_only_when_the_restore_would_land_in_the_window() {
        let ms = Duration::from_millis;
        let (dumped, start, tick) = (Duration::from_secs(1000), ms(260), ms(10));
        // Away 0.255 s: the node's pid 2 would read as started at 0; wait past 0.32 s.
        assert_eq!(wait_needed(dumped, dumped + ms(255), start, tick), Some(ms(65)));
        // Away a second or more: the start time wraps, nothing to wait for.
        assert_eq!(wait_needed(dumped, dumped + ms(1000), start, tick), None);
        assert_eq!(wait_needed(dumped, dumped + start + tick + MARGIN, start, tick), None);
        // A node that booted after the dump: a positive offset.
        assert_eq!(wait_needed(dumped, ms(500), start, tick), None);
    }
}
