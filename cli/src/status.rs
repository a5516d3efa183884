//! `mpicr status`: the job, whether it runs, its epochs (complete or not) with sizes and
//! timings, and how many lower-half renewals are left.

use crate::args::format_duration;
use crate::images::{human_bytes, CkptDir, EpochState};
use anyhow::Result;
use std::fmt::Write as _;
use std::time::Duration;

pub fn status(dir: &CkptDir) -> Result<()> {
    let job = dir.read_job()?;
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "directory:  {}", dir.root.display())?;
    writeln!(w, "job:        {} ({} rank{}, mode {})", job.job_id, job.ranks, if job.ranks == 1 { "" } else { "s" }, job.mode)?;
    writeln!(w, "program:    {}", job.argv.join(" "))?;
    writeln!(w, "started:    {} in {}", utc(job.created_unix), job.cwd)?;
    match (&job.mpi_library, &job.renew_strategy) {
        (Some(l), Some(s)) => writeln!(w, "library:    {l} (renewal: {s})")?,
        _ => writeln!(w, "library:    (not reported yet)")?,
    }
    match crate::client::live_status(dir) {
        None => writeln!(w, "running:    no")?,
        Some(Err(e)) => writeln!(w, "running:    unknown: cannot read the job's coordinator file: {e:#}")?,
        Some(Ok((info, Ok(live)))) => {
            let mut line = format!(
                "yes: coordinator pid {} on {}:{}, {}/{} ranks connected",
                info.pid,
                info.host,
                info.port,
                live.registered.len(),
                live.size
            );
            if let Some(e) = live.in_progress {
                let _ = write!(line, ", checkpoint {e} in progress");
            }
            if let Some(e) = live.restart_pending {
                let _ = write!(line, ", restarting from epoch {e}");
            }
            writeln!(w, "running:    {line}")?;
            if let Some(min) = live.agents.iter().filter_map(|(_, a)| a.renewals_left).min() {
                writeln!(w, "renewals:   {min} lower-half renewal(s) left (lowest over the ranks, live)")?;
            } else if !live.agents.is_empty() {
                writeln!(w, "renewals:   unbounded (live)")?;
            }
        }
        Some(Ok((info, Err(e)))) => writeln!(w, "running:    unknown: coordinator pid {} on {} does not answer ({e:#})", info.pid, info.host)?,
    }
    let epochs = dir.epochs()?;
    if epochs.is_empty() {
        writeln!(w, "epochs:     none")?;
    } else {
        writeln!(w, "epochs:")?;
        writeln!(w, "  {:<7} {:<10} {:>10} {:>10}  {:<23} NOTES", "EPOCH", "STATE", "SIZE", "STOP TIME", "TAKEN (UTC)")?;
        for e in &epochs {
            match &e.state {
                EpochState::Complete(m) => {
                    let phases: Vec<String> =
                        m.timings.iter().map(|(n, us)| format!("{n} {}", format_duration(Duration::from_micros(*us)))).collect();
                    let mut notes = String::new();
                    if m.stop {
                        notes.push_str("stop; ");
                    }
                    notes.push_str(&phases.join(", "));
                    // The library this epoch ran on, when a restart changed it (`--mpi-lib`).
                    let lib = crate::images::read_json::<crate::images::RankMeta>(&dir.rank_dir(e.epoch, 0).join("rank.json"))
                        .ok()
                        .and_then(|r| r.agent_hello)
                        .map(|h| h.library);
                    if let Some(l) = lib.filter(|l| job.mpi_library.as_ref().is_some_and(|j| j != l)) {
                        let _ = write!(notes, "; library {l}");
                    }
                    let renew = m.rank_info.iter().filter_map(|r| r.renewals_left).min();
                    if let Some(r) = renew {
                        let _ = write!(notes, "; {r} renewals left");
                    }
                    writeln!(
                        w,
                        "  {:<7} {:<10} {:>10} {:>10}  {:<23} {}",
                        e.epoch,
                        "complete",
                        human_bytes(m.total_bytes),
                        format_duration(Duration::from_micros(m.stop_time_us)),
                        utc(m.created_unix),
                        notes
                    )?;
                }
                EpochState::Incomplete(why) => {
                    let size = dir_size(&e.dir);
                    let note = match why {
                        Some(w) => format!("failed: {}", w.lines().next().unwrap_or("")),
                        None => "no manifest (in progress, or interrupted)".into(),
                    };
                    writeln!(w, "  {:<7} {:<10} {:>10} {:>10}  {:<23} {}", e.epoch, "incomplete", human_bytes(size), "-", "-", note)?;
                }
                EpochState::Corrupt(err) => {
                    writeln!(w, "  {:<7} {:<10} {:>10} {:>10}  {:<23} manifest unreadable: {err}", e.epoch, "corrupt", "-", "-", "-")?;
                }
            }
        }
    }
    let latest_complete = epochs.iter().rev().find(|e| matches!(e.state, EpochState::Complete(_)));
    match (dir.latest(), latest_complete) {
        (_, None) => writeln!(w, "restart:    nothing to restart from (no complete epoch)")?,
        (link, Some(e)) => {
            let EpochState::Complete(m) = &e.state else { unreachable!() };
            writeln!(w, "restart:    `mpiexec -n {} mpicr restart {}` resumes epoch {}", m.ranks, dir.root.display(), e.epoch)?;
            if let Some(l) = link.filter(|&l| l != e.epoch) {
                writeln!(w, "            (note: the latest link names epoch {l})")?;
            }
            match m.rank_info.iter().filter_map(|r| r.renewals_left).min() {
                Some(r) => writeln!(w, "renewals:   {r} lower-half renewal(s) left after epoch {}", e.epoch)?,
                None if job.mode == "mpi" => writeln!(w, "renewals:   unbounded (as of epoch {})", e.epoch)?,
                None => {}
            }
        }
    }
    print!("{out}");
    Ok(())
}

fn dir_size(dir: &std::path::Path) -> u64 {
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
