//! `mpicr checkpoint`: asks the running job's coordinator for a checkpoint and prints the result.

use crate::args::{exit, format_duration, CheckpointArgs, Failure};
use crate::coord_wire::{self, ClientRequest, CoordInfo, Hello, LiveStatus, ToClient};
use crate::images::{human_bytes, CkptDir};
use anyhow::{bail, Context, Result};
use std::time::{Duration, Instant};

pub fn checkpoint(args: CheckpointArgs) -> Result<()> {
    let dir = CkptDir::new(args.dir.resolve());
    if !dir.root.exists() {
        return Err(Failure::new(exit::NO_JOB, format!("no job is running on {}: it does not exist", dir.root.display())));
    }
    // coordinator.json says where to connect: only from a directory nobody else controls.
    dir.secure(false)?;
    // The keepers checked their CRIU when the job started; this node's, if it has one, is
    // checked again here so that a lost capability is named before the job is stopped.
    if crate::criu::unprivileged() && crate::criu::Criu::locate().is_ok() {
        crate::criu::preflight()?;
    }
    let info = CoordInfo::read(&dir).map_err(|e| Failure::new(exit::NO_JOB, format!("{e:#}")))?;
    if info.is_stale() {
        return Err(Failure::new(
            exit::NO_JOB,
            format!("no job is running on {}: job {} ended without cleaning up (its coordinator, pid {}, is gone)", dir.root.display(), info.job_id, info.pid),
        ));
    }
    let (mut tx, mut s) = coord_wire::connect(&info, Duration::from_secs(10))
        .map_err(|e| Failure::new(exit::NO_JOB, format!("job {} does not answer (has it ended?): {e:#}", info.job_id)))?;
    let timeout = args.timeout.min(crate::args::MAX_TIMEOUT);
    let started = Instant::now();
    let timeout_ms = timeout.as_millis() as u64;
    coord_wire::send(&mut tx, &Hello::Client(ClientRequest::Checkpoint { stop: args.stop, timeout_ms }))?;
    // The coordinator enforces the timeout itself; allow it time to report.
    s.stream().set_read_timeout(Some(timeout + Duration::from_secs(30)))?;
    let progress = Progress::start(&dir);
    let r = loop {
        let msg = coord_wire::recv::<ToClient>(&mut s);
        if let Ok(Some(ToClient::Started { epoch })) = &msg {
            progress.begun(*epoch);
        }
        if !matches!(msg, Ok(Some(ToClient::Started { .. } | ToClient::Queued(_)))) {
            progress.end();
        }
        match msg {
            Ok(Some(ToClient::Done(r))) => break r,
            Ok(Some(ToClient::Started { epoch })) if args.no_wait => {
                crate::outln!("epoch:         {epoch} (begun; `mpicr status {}` tells how it ends)", dir.root.display());
                return Ok(());
            }
            Ok(Some(ToClient::Queued(why))) if args.no_wait => {
                crate::outln!("queued:        {why}; the checkpoint begins once they are ready");
                return Ok(());
            }
            Ok(Some(ToClient::Started { .. } | ToClient::Queued(_))) => {}
            Ok(Some(ToClient::Error(e))) => {
                let code = if e.contains("timed out") { exit::TIMED_OUT } else { exit::CKPT_FAILED };
                return Err(Failure::new(code, e));
            }
            Ok(Some(other)) => bail!("unexpected answer from the coordinator: {other:?}"),
            Ok(None) => return Err(closed_without_answer(&dir, &info)),
            Err(e) if e.is_timeout() => {
                return Err(Failure::new(exit::TIMED_OUT, format!("no answer from the coordinator within {}", format_duration(args.timeout))))
            }
            Err(e) => return Err(e).context("reading the coordinator's answer"),
        }
    };
    crate::outln!("epoch:         {}", r.epoch);
    crate::outln!("stop time:     {}", format_duration(Duration::from_micros(r.stop_time_us)));
    if let Some(us) = r.mpi_back_us {
        crate::outln!("MPI back:      {} (the renewed MPI library; MPI calls waited until then)", format_duration(Duration::from_micros(us)));
    }
    crate::outln!("bytes written: {} ({})", r.bytes, human_bytes(r.bytes));
    if r.stopped {
        // Open MPI's library underneath restarts under a PMIx launcher only, any other under a
        // PMI one.
        let ompi = dir.read_job().ok().and_then(|j| j.mpi_library).is_some_and(|l| l.contains("libmpi.so.40"));
        let (launcher, or_srun) = if ompi { ("mpirun", "srun --mpi=pmix") } else { ("mpiexec", "srun --mpi=pmi2") };
        let how = format!("restart with `{launcher} -n {} mpicr restart {}` (or {or_srun})", r.ranks, dir.root.display());
        if args.wait {
            wait_job_end(&dir, &info, timeout.saturating_sub(started.elapsed()))?;
            crate::outln!("job ended:     {how}");
        } else {
            crate::outln!("job stopped:   {how}");
        }
    }
    Ok(())
}

/// A progress line on stderr while a checkpoint is written, when stderr is a terminal: the
/// epoch, the time since the request, and what the epoch's directory holds so far (CRIU's
/// images grow there as the ranks dump). Nothing otherwise (logs and scripts stay clean).
struct Progress {
    epoch: std::sync::Arc<std::sync::atomic::AtomicU64>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::cell::RefCell<Option<std::thread::JoinHandle<()>>>,
}

impl Progress {
    fn start(dir: &CkptDir) -> Progress {
        use std::io::IsTerminal;
        use std::sync::atomic::Ordering;
        let p = Progress { epoch: Default::default(), done: Default::default(), thread: Default::default() };
        if !std::io::stderr().is_terminal() {
            return p;
        }
        let (epoch, done, dir) = (p.epoch.clone(), p.done.clone(), dir.clone());
        let t0 = Instant::now();
        let h = std::thread::Builder::new().name("progress".into()).spawn(move || {
            let mut shown = false;
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(250));
                if done.load(Ordering::SeqCst) || t0.elapsed() < Duration::from_secs(1) {
                    continue;
                }
                let line = match epoch.load(Ordering::SeqCst) {
                    0 => format!("mpicr: checkpoint waiting to begin, {}", format_duration(t0.elapsed())),
                    e => {
                        format!("mpicr: checkpoint {e}: {} written, {}", human_bytes(crate::status::dir_size(&dir.epoch_dir(e))), format_duration(t0.elapsed()))
                    }
                };
                crate::elog_raw(&format!("\r\x1b[K{line}"));
                shown = true;
            }
            if shown {
                crate::elog_raw("\r\x1b[K");
            }
        });
        *p.thread.borrow_mut() = h.ok();
        p
    }

    fn begun(&self, epoch: u64) {
        self.epoch.store(epoch, std::sync::atomic::Ordering::SeqCst);
    }

    /// Clears the line (before anything else is printed).
    fn end(&self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(h) = self.thread.borrow_mut().take() {
            let _ = h.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.end();
    }
}

/// The coordinator hung up without answering: the job ended while the request was on its way
/// (a program finishing just then, or a process of the job killed), or the coordinator failed.
/// Which of the two is said (the coordinator of an ended job is gone within moments).
fn closed_without_answer(dir: &CkptDir, info: &CoordInfo) -> anyhow::Error {
    if wait_job_end(dir, info, Duration::from_secs(3)).is_ok() {
        return Failure::new(
            exit::NO_JOB,
            format!(
                "job {} ended while the checkpoint was asked for: the coordinator closed the connection before answering (`mpicr status {}` lists the epochs committed)",
                info.job_id,
                dir.root.display()
            ),
        );
    }
    Failure::new(exit::CKPT_FAILED, "the coordinator closed the connection before answering, and the job still runs")
}

/// Waits (at most `limit`) until the stopped job's coordinator is gone: its `coordinator.json`
/// removed, or (on this host) its process ended.
fn wait_job_end(dir: &CkptDir, info: &CoordInfo, limit: Duration) -> Result<()> {
    let t = Instant::now();
    loop {
        let same = CoordInfo::read(dir).is_ok_and(|now| now.job_id == info.job_id && now.pid == info.pid);
        if !same || info.is_stale() {
            return Ok(());
        }
        if t.elapsed() >= limit {
            return Err(Failure::new(
                exit::TIMED_OUT,
                format!(
                    "epoch committed, but job {} has not ended within the timeout (its coordinator, pid {} on {}, still runs)",
                    info.job_id, info.pid, info.host
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
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
