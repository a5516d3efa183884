//! `mpicr status`: the job, whether it runs, its epochs (complete or not) with sizes and
//! timings, and how many lower-half renewals are left.

use crate::args::format_duration;
use crate::images::{human_bytes, CkptDir, EpochState, JobInfo};
use anyhow::Result;
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Duration;

/// Everything `mpicr status` shows: printed as text, or as JSON (`--json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub directory: String,
    pub job: JobInfo,
    pub running: Running,
    pub epochs: Vec<EpochReport>,
    /// The newest complete epoch: what `mpicr restart` resumes.
    pub restart_epoch: Option<u64>,
    /// Where the `latest` link points.
    pub latest_link: Option<u64>,
    /// Ranks of the epoch a restart resumes (the launcher's `-n`).
    pub restart_ranks: Option<i32>,
    /// Lower-half renewals left after that epoch (`None`: unbounded, or not an MPI job).
    pub renewals_left: Option<u32>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Running {
    No,
    Yes {
        coordinator_pid: u32,
        host: String,
        port: u16,
        ranks_connected: usize,
        size: i32,
        checkpoint_in_progress: Option<u64>,
        restarting_from: Option<u64>,
        /// The lowest over the ranks; `None` unbounded; absent before any agent reported.
        renewals_left: Option<Option<u32>>,
    },
    Unknown {
        why: String,
    },
}

#[derive(Debug, Serialize)]
pub struct EpochReport {
    pub epoch: u64,
    /// `complete`, `incomplete`, `staged` (copy from `--stage-dir` not done) or `corrupt`.
    pub state: &'static str,
    pub bytes: u64,
    pub stop_time_us: Option<u64>,
    /// Request to the last rank's renewed MPI library (checkpoint-and-continue).
    pub mpi_back_us: Option<u64>,
    /// The slowest rank's renewal of its MPI library.
    pub renew_us: Option<u64>,
    pub created_unix: Option<u64>,
    pub stop: bool,
    /// Phase timings (name, microseconds).
    pub timings: Vec<(String, u64)>,
    /// The library the epoch ran on, when a restart changed it.
    pub library: Option<String>,
    pub renewals_left: Option<u32>,
    /// Why it is not complete (`FAILED`, or an unreadable manifest).
    pub note: Option<String>,
}

pub fn report(dir: &CkptDir) -> Result<Report> {
    let job = dir.read_job()?;
    let running = match crate::client::live_status(dir) {
        None => Running::No,
        Some(Err(e)) => Running::Unknown { why: format!("cannot read the job's coordinator file: {e:#}") },
        Some(Ok((info, Ok(live)))) => Running::Yes {
            coordinator_pid: info.pid,
            host: info.host,
            port: info.port,
            ranks_connected: live.registered.len(),
            size: live.size,
            checkpoint_in_progress: live.in_progress,
            restarting_from: live.restart_pending,
            renewals_left: (!live.agents.is_empty()).then(|| live.agents.iter().filter_map(|(_, a)| a.renewals_left).min()),
        },
        Some(Ok((info, Err(e)))) => Running::Unknown { why: format!("coordinator pid {} on {} does not answer ({e:#})", info.pid, info.host) },
    };
    let mut epochs = Vec::new();
    let mut restart = None;
    for e in dir.epochs()? {
        let r = match &e.state {
            EpochState::Complete(m) => {
                // The library this epoch ran on, when a restart changed it (`--mpi-lib`).
                let lib = crate::images::read_json::<crate::images::RankMeta>(&dir.rank_dir(e.epoch, 0).join("rank.json"))
                    .ok()
                    .and_then(|r| r.agent_hello)
                    .map(|h| h.library)
                    .filter(|l| job.mpi_library.as_ref().is_some_and(|j| j != l));
                let renewals_left = m.rank_info.iter().filter_map(|r| r.renewals_left).min();
                restart = Some((e.epoch, m.ranks, renewals_left));
                EpochReport {
                    epoch: e.epoch,
                    state: "complete",
                    bytes: m.total_bytes,
                    stop_time_us: Some(m.stop_time_us),
                    mpi_back_us: m.mpi_back_us,
                    renew_us: m.rank_info.iter().flat_map(|r| r.agent_timings.iter().filter(|(n, _)| n == "renew").map(|&(_, us)| us)).max(),
                    created_unix: Some(m.created_unix),
                    stop: m.stop,
                    timings: m.timings.clone(),
                    library: lib,
                    renewals_left,
                    note: None,
                }
            }
            EpochState::Incomplete(None) if !crate::stage::staged_ranks(&e.dir).is_empty() => {
                let ranks: Vec<String> = crate::stage::staged_ranks(&e.dir).iter().map(i32::to_string).collect();
                let how = if matches!(running, Running::No) { "interrupted" } else { "in progress" };
                unfinished(
                    &e,
                    "staged",
                    format!("dumped to the stage directory; copy of rank(s) {} to the checkpoint directory {how} (not restorable yet)", ranks.join(", ")),
                )
            }
            EpochState::Incomplete(why) => unfinished(
                &e,
                "incomplete",
                match why {
                    Some(w) => format!("failed: {}", w.lines().next().unwrap_or("")),
                    None => "no manifest (in progress, or interrupted)".into(),
                },
            ),
            EpochState::Corrupt(err) => unfinished(&e, "corrupt", format!("manifest unreadable: {err}")),
        };
        epochs.push(r);
    }
    Ok(Report {
        directory: dir.root.display().to_string(),
        running,
        epochs,
        restart_epoch: restart.map(|r| r.0),
        latest_link: dir.latest(),
        restart_ranks: restart.map(|r| r.1),
        renewals_left: restart.and_then(|r| r.2),
        job,
    })
}

/// An epoch without a valid manifest: its size on disk and why.
fn unfinished(e: &crate::images::EpochEntry, state: &'static str, note: String) -> EpochReport {
    EpochReport {
        epoch: e.epoch,
        state,
        bytes: dir_size(&e.dir),
        stop_time_us: None,
        mpi_back_us: None,
        renew_us: None,
        created_unix: None,
        stop: false,
        timings: Vec::new(),
        library: None,
        renewals_left: None,
        note: Some(note),
    }
}

pub fn status(dir: &CkptDir, json: bool) -> Result<()> {
    let r = report(dir)?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        crate::out!("{}", text(&r)?);
    }
    Ok(())
}

fn text(r: &Report) -> Result<String> {
    let job = &r.job;
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "directory:  {}", r.directory)?;
    writeln!(w, "job:        {} ({} rank{}, mode {})", job.job_id, job.ranks, if job.ranks == 1 { "" } else { "s" }, job.mode)?;
    writeln!(w, "program:    {}", job.argv.join(" "))?;
    writeln!(w, "started:    {} in {}", utc(job.created_unix), job.cwd)?;
    match (&job.mpi_library, &job.renew_strategy) {
        (Some(l), Some(s)) => writeln!(w, "library:    {l} (renewal: {s})")?,
        _ => writeln!(w, "library:    (not reported yet)")?,
    }
    match &r.running {
        Running::No => writeln!(w, "running:    no")?,
        Running::Unknown { why } => writeln!(w, "running:    unknown: {why}")?,
        Running::Yes { coordinator_pid, host, port, ranks_connected, size, checkpoint_in_progress, restarting_from, renewals_left } => {
            let mut line = format!("yes: coordinator pid {coordinator_pid} on {host}:{port}, {ranks_connected}/{size} ranks connected");
            if let Some(e) = checkpoint_in_progress {
                let _ = write!(line, ", checkpoint {e} in progress");
            }
            if let Some(e) = restarting_from {
                let _ = write!(line, ", restarting from epoch {e}");
            }
            writeln!(w, "running:    {line}")?;
            match renewals_left {
                Some(Some(min)) => writeln!(w, "renewals:   {min} lower-half renewal(s) left (lowest over the ranks, live)")?,
                Some(None) => writeln!(w, "renewals:   unbounded (live)")?,
                None => {}
            }
        }
    }
    if r.epochs.is_empty() {
        writeln!(w, "epochs:     none")?;
    } else {
        writeln!(w, "epochs:")?;
        writeln!(w, "  {:<7} {:<10} {:>10} {:>10}  {:<23} NOTES", "EPOCH", "STATE", "SIZE", "STOP TIME", "TAKEN (UTC)")?;
        for e in &r.epochs {
            let notes = match &e.note {
                Some(n) => n.clone(),
                None => {
                    let phases: Vec<String> = e.timings.iter().map(|(n, us)| format!("{n} {}", format_duration(Duration::from_micros(*us)))).collect();
                    let mut notes = String::new();
                    if e.stop {
                        notes.push_str("stop; ");
                    }
                    notes.push_str(&phases.join(", "));
                    if let Some(us) = e.mpi_back_us {
                        let _ = write!(notes, "; MPI back at {}", format_duration(Duration::from_micros(us)));
                    }
                    if let Some(us) = e.renew_us {
                        let _ = write!(notes, " (renewal {})", format_duration(Duration::from_micros(us)));
                    }
                    if let Some(l) = &e.library {
                        let _ = write!(notes, "; library {l}");
                    }
                    if let Some(n) = e.renewals_left {
                        let _ = write!(notes, "; {n} renewals left");
                    }
                    notes
                }
            };
            let size = if e.state == "corrupt" { "-".to_string() } else { human_bytes(e.bytes) };
            let stop = e.stop_time_us.map_or("-".to_string(), |us| format_duration(Duration::from_micros(us)));
            let taken = e.created_unix.map_or("-".to_string(), utc);
            writeln!(w, "  {:<7} {:<10} {:>10} {:>10}  {:<23} {}", e.epoch, e.state, size, stop, taken, notes)?;
        }
    }
    match (r.restart_epoch, r.restart_ranks) {
        (Some(epoch), Some(ranks)) => {
            writeln!(w, "restart:    `mpiexec -n {ranks} mpicr restart {}` resumes epoch {epoch}", r.directory)?;
            if let Some(l) = r.latest_link.filter(|&l| l != epoch) {
                writeln!(w, "            (note: the latest link names epoch {l})")?;
            }
            match r.renewals_left {
                Some(n) => writeln!(w, "renewals:   {n} lower-half renewal(s) left after epoch {epoch}")?,
                None if job.mode == "mpi" => writeln!(w, "renewals:   unbounded (as of epoch {epoch})")?,
                None => {}
            }
        }
        _ => writeln!(w, "restart:    nothing to restart from (no complete epoch)")?,
    }
    Ok(out)
}

pub fn dir_size(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

/// `2026-11-29 13:40:01` (UTC) from unix seconds.
pub fn utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, (rem % 3600) / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20");
    }
}
