//! Restores whose images hold ghost files take turns on a node.
//!
//! A file the program had open or mapped and that was deleted or replaced while the job ran (its
//! binary rebuilt in place, a library reinstalled) is carried in the image as a ghost file
//! (`ghost-file-ID.img`). CRIU's restore recreates it as `PATH.cr.ID.ghost` beside the old path and
//! removes it when done; ranks of a job restoring side by side on a node use the same name, and
//! one removed the file another still needed (measured: `Couldn't unlink remap PATH.cr.1.ghost: No
//! such file or directory`, the restart failed). So such restores hold a node-wide turn, an
//! abstract unix socket of a fixed name that one process at a time can bind (the kernel releases
//! it when the holder closes it or dies); restores without ghost files never wait.

use anyhow::{bail, Context, Result};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::Path;
use std::time::{Duration, Instant};

/// Whether the CRIU image in `dir` holds ghost files.
pub fn in_image(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .is_ok_and(|entries| entries.flatten().any(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("ghost-file-") && n.ends_with(".img"))))
}

/// This node's turn to restore images with ghost files, held until dropped.
pub struct Turn {
    _bound: UnixListener,
}

/// Waits (at most `limit`) for this node's turn; says how long it waited.
pub fn take_turn(limit: Duration) -> Result<(Turn, Duration)> {
    // Per user: another user's restores recreate their files in their own directories.
    let name = format!("mpicr-restore-ghosts.{}", crate::sys::euid());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).context("naming the ghost-file restore turn")?;
    let start = Instant::now();
    loop {
        match UnixListener::bind_addr(&addr) {
            Ok(l) => return Ok((Turn { _bound: l }, start.elapsed())),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if start.elapsed() >= limit {
                    bail!("another restore on this node whose images hold deleted files kept its turn for {}s (@{name})", limit.as_secs());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).with_context(|| format!("taking the ghost-file restore turn @{name}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_taken_one_at_a_time() {
        let d = crate::images::tests::tempdir("ghosts");
        assert!(!in_image(&d));
        std::fs::write(d.join("ghost-file-1.img"), b"").unwrap();
        assert!(in_image(&d));
        let (held, _) = take_turn(Duration::from_secs(5)).unwrap();
        let e = take_turn(Duration::from_millis(30)).err().unwrap();
        assert!(e.to_string().contains("kept its turn"), "{e}");
        let freed = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        assert!(take_turn(Duration::from_secs(5)).is_ok());
        freed.join().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }
}
