//! `mpicr checkpoint`: asks the running job's coordinator for a checkpoint and prints the result.

use crate::args::{format_duration, CheckpointArgs};
use crate::coord_wire::{self, ClientRequest, CoordInfo, Hello, LiveStatus, ToClient};
use crate::images::{human_bytes, CkptDir};
use anyhow::{bail, Context, Result};
use std::time::Duration;

pub fn checkpoint(args: CheckpointArgs) -> Result<()> {
    let dir = CkptDir::new(args.dir.resolve());
    // coordinator.json says where to connect: only from a directory nobody else controls.
    dir.secure(false)?;
    // The keepers checked their CRIU when the job started; this node's, if it has one, is
    // checked again here so that a lost capability is named before the job is stopped.
    if crate::criu::unprivileged() && crate::criu::Criu::locate().is_ok() {
        crate::criu::preflight()?;
    }
    let info = CoordInfo::read(&dir)?;
    if info.is_stale() {
        bail!(
            "no job is running on {}: job {} ended without cleaning up (its coordinator, pid {}, is gone)",
            dir.root.display(),
            info.job_id,
            info.pid
        );
    }
    let (mut tx, mut s) = coord_wire::connect(&info, Duration::from_secs(10))
        .with_context(|| format!("job {} does not answer (has it ended?)", info.job_id))?;
    let timeout = args.timeout.min(crate::args::MAX_TIMEOUT);
    let timeout_ms = timeout.as_millis() as u64;
    coord_wire::send(&mut tx, &Hello::Client(ClientRequest::Checkpoint { stop: args.stop, timeout_ms }))?;
    // The coordinator enforces the timeout itself; allow it time to report.
    s.stream().set_read_timeout(Some(timeout + Duration::from_secs(30)))?;
    match coord_wire::recv::<ToClient>(&mut s) {
        Ok(Some(ToClient::Done(r))) => {
            println!("epoch:         {}", r.epoch);
            println!("stop time:     {}", format_duration(Duration::from_micros(r.stop_time_us)));
            println!("bytes written: {} ({})", r.bytes, human_bytes(r.bytes));
            if r.stopped {
                println!("job stopped:   restart with `mpiexec -n {} mpicr restart {}`", r.ranks, dir.root.display());
            }
            Ok(())
        }
        Ok(Some(ToClient::Error(e))) => bail!("{e}"),
        Ok(Some(other)) => bail!("unexpected answer from the coordinator: {other:?}"),
        Ok(None) => bail!("the coordinator closed the connection before answering (did the job end?)"),
        Err(e) if e.is_timeout() => {
            bail!("no answer from the coordinator within {}", format_duration(args.timeout))
        }
        Err(e) => Err(e).context("reading the coordinator's answer"),
    }
}

/// Live state from a running coordinator, if one answers quickly: `None` when no job runs,
/// `Some(Err)` when `coordinator.json` exists but cannot be read.
pub fn live_status(dir: &CkptDir) -> Option<Result<(CoordInfo, Result<LiveStatus>)>> {
    match std::fs::symlink_metadata(dir.coordinator_path()) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        _ => {}
    }
    let info = match CoordInfo::read(dir) {
        Ok(info) => info,
        Err(e) => return Some(Err(e)),
    };
    if info.is_stale() {
        return None;
    }
    let res = (|| -> Result<LiveStatus> {
        let (mut tx, mut s) = coord_wire::connect(&info, Duration::from_secs(2))?;
        coord_wire::send(&mut tx, &Hello::Client(ClientRequest::Status))?;
        s.stream().set_read_timeout(Some(Duration::from_secs(5)))?;
        match coord_wire::recv::<ToClient>(&mut s)? {
            Some(ToClient::Status(st)) => Ok(st),
            other => bail!("unexpected answer: {other:?}"),
        }
    })();
    Some(Ok((info, res)))
}
