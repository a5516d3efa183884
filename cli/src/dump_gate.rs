//! A dump whose CRIU starts before the program is ready to be frozen.
//!
//! CRIU spends its first ~30-50 ms probing the kernel (`kerndat`: it creates a network namespace
//! and a veth pair, among others) before it seizes anything, and keeps that work only where
//! `/run` is a tmpfs. Started when the dump is due, that time is part of the program's stop. So
//! the keeper starts `criu dump` as the checkpoint begins, with this binary as its action script:
//! at the `pre-dump` stage (after the probing, before the seize) the script connects to the
//! keeper's gate, an abstract unix socket named in `MPICR_DUMP_GATE`, and waits for one byte.
//! `g` lets CRIU go on; anything else, or the gate closing (the checkpoint called off, the keeper
//! gone), fails the script, and CRIU ends without having touched the program.
//!
//! CRIU runs scripts with no descriptors but the standard ones, so the gate is named, not
//! inherited; the keeper opens it only to a connection from its CRIU's own child.

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Names the gate (an abstract socket) in the environment of `criu dump` and its scripts.
const GATE_ENV: &str = "MPICR_DUMP_GATE";
const ACTION_ENV: &str = "CRTOOLS_SCRIPT_ACTION";
/// How long the script waits at the gate: past it, CRIU is ended by the keeper's own limit.
const SCRIPT_WAIT: Duration = Duration::from_secs(3600);
const GO: u8 = b'g';

/// The keeper's end: a listening abstract socket, closed when dropped.
pub struct Gate {
    listener: UnixListener,
    name: String,
}

/// How `Gate::open` ended when it did not let CRIU go.
#[derive(Debug, thiserror::Error)]
pub enum NotOpened {
    #[error("criu ended before it reached its pre-dump stage")]
    CriuEnded,
    #[error("criu did not reach its pre-dump stage within {0}s")]
    TimedOut(u64),
    #[error("waiting at the dump gate: {0}")]
    Io(#[from] std::io::Error),
}

impl Gate {
    /// A new gate, named after this process and a count of its gates.
    pub fn listen() -> Result<Gate> {
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let name = format!("mpicr-dump-gate.{}.{}", std::process::id(), OPENED.fetch_add(1, Ordering::Relaxed));
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).context("naming the dump gate")?;
        let listener = UnixListener::bind_addr(&addr).with_context(|| format!("opening the dump gate @{name}"))?;
        listener.set_nonblocking(true).context("opening the dump gate")?;
        Ok(Gate { listener, name })
    }

    /// The environment that makes the action script of a `criu dump` wait at this gate.
    pub fn env(&self) -> (String, String) {
        (GATE_ENV.to_string(), self.name.clone())
    }

    /// Lets CRIU `criu` go on from its pre-dump stage, waiting for it to get there (at most
    /// `limit`, and not after it ended: `ended`).
    pub fn open(&self, criu: i32, ended: impl Fn() -> bool, limit: Duration) -> std::result::Result<(), NotOpened> {
        let until = Instant::now() + limit;
        loop {
            match self.listener.accept() {
                Ok((mut s, _)) => {
                    // The name is visible machine-wide: only CRIU's own script is let through.
                    if crate::sys::peer_pid(s.as_fd()).ok().and_then(crate::sys::parent_of) == Some(criu) {
                        s.write_all(&[GO])?;
                        return Ok(());
                    }
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            if ended() {
                return Err(NotOpened::CriuEnded);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NotOpened::TimedOut(limit.as_secs()));
            }
            // Short waits: CRIU's end is seen by polling `ended`.
            crate::sys::poll_readable(&[self.listener.as_fd()], Some(left.min(Duration::from_millis(20))))?;
        }
    }
}

/// When this process is the action script of a gated `criu dump`: its exit status (0 lets CRIU
/// go on). `None` for every other invocation.
pub fn action_from_env(args: &[std::ffi::OsString]) -> Option<i32> {
    if args.len() != 1 {
        return None;
    }
    let name = std::env::var(GATE_ENV).ok()?;
    let action = std::env::var(ACTION_ENV).ok()?;
    if action != "pre-dump" {
        return Some(0);
    }
    match wait_for_go(&name) {
        Ok(true) => Some(0),
        Ok(false) => {
            crate::elog!("mpicr: the checkpoint was called off before the dump");
            Some(1)
        }
        Err(e) => {
            crate::elog!("mpicr: waiting at the dump gate @{name}: {e:#}");
            Some(1)
        }
    }
}

fn wait_for_go(name: &str) -> Result<bool> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    let mut s = UnixStream::connect_addr(&addr).context("connecting")?;
    s.set_read_timeout(Some(SCRIPT_WAIT))?;
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(1) => Ok(b[0] == GO),
        Ok(_) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(false),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            bail!("no word from the keeper within {}s", SCRIPT_WAIT.as_secs())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for CRIU: a child of this process that connects to the gate as the script would.
    fn script(name: &str) -> std::process::Child {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "dump_gate::tests::script_body", "--nocapture"])
            .env("MPICR_TEST_GATE", name)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Run as the child of `script`: waits at the gate, prints what it was told.
    #[test]
    fn script_body() {
        let Ok(name) = std::env::var("MPICR_TEST_GATE") else { return };
        println!("GATE={}", wait_for_go(&name).map(|g| if g { "go" } else { "off" }).unwrap_or("error"));
    }

    fn verdict(c: std::process::Child) -> String {
        let out = c.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| l.strip_prefix("GATE=").map(str::to_string)).unwrap_or_default()
    }

    #[test]
    fn only_the_criu_child_is_let_through() {
        let gate = Gate::listen().unwrap();
        // This process plays CRIU: the script is its child.
        let c = script(&gate.name);
        gate.open(std::process::id() as i32, || false, Duration::from_secs(30)).unwrap();
        assert_eq!(verdict(c), "go");
        // Someone else's script (its parent is not the named CRIU) is not let through.
        let c = script(&gate.name);
        let not = gate.open(1, || false, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(not, NotOpened::TimedOut(_)), "{not}");
        drop(gate);
        assert_eq!(verdict(c), "off");
    }

    #[test]
    fn a_closed_gate_calls_the_dump_off() {
        let gate = Gate::listen().unwrap();
        let c = script(&gate.name);
        drop(gate);
        assert_ne!(verdict(c), "go");
    }

    #[test]
    fn a_criu_that_ended_is_not_waited_for() {
        let gate = Gate::listen().unwrap();
        assert!(matches!(gate.open(std::process::id() as i32, || true, Duration::from_secs(30)), Err(NotOpened::CriuEnded)));
    }
}
