//! When the job must end: `--stop-before DURATION` checkpoints and stops the job that long before
//! its time limit. The limit is `$MPICR_END_TIME` (unix seconds), else the time Slurm says is
//! left to `$SLURM_JOB_ID` (`squeue -h -j ID -o %L`: the controller's own count, so the node's
//! clock and time zone do not matter).

use anyhow::{bail, Context, Result};
use std::time::{Duration, Instant};

pub const END_TIME_ENV: &str = "MPICR_END_TIME";

/// The instant `before` ahead of the job's end (now, if that has passed).
pub fn stop_at(before: Duration) -> Result<Instant> {
    let left = time_left()?;
    Ok(Instant::now() + left.saturating_sub(before))
}

/// Time left until the job's limit.
pub fn time_left() -> Result<Duration> {
    if let Some(v) = std::env::var(END_TIME_ENV).ok().filter(|v| !v.trim().is_empty()) {
        let end: u64 = v.trim().parse().with_context(|| format!("{END_TIME_ENV}={v}: not unix seconds"))?;
        return Ok(Duration::from_secs(end.saturating_sub(crate::images::now_unix())));
    }
    let Some(job) = std::env::var("SLURM_JOB_ID").ok().filter(|v| !v.is_empty()) else {
        bail!("--stop-before: cannot tell when the job ends: not in a Slurm job (no SLURM_JOB_ID) and no {END_TIME_ENV}");
    };
    let out = std::process::Command::new("squeue")
        .args(["-h", "-j", &job, "-o", "%L"])
        .stdin(std::process::Stdio::null())
        .output()
        .context("--stop-before: running squeue for the job's time left")?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() {
        bail!("--stop-before: squeue -j {job} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    match parse_time_left(&text) {
        Some(d) => Ok(d),
        None => bail!("--stop-before: job {job} has no time limit (squeue says {text:?})"),
    }
}

/// squeue's `%L`: `SS`, `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`; `None` for `UNLIMITED`, `NOT_SET`,
/// `INVALID` or anything else.
pub fn parse_time_left(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let parts: Vec<u64> = rest.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let secs = match parts[..] {
        [s] => s,
        [m, s] => m * 60 + s,
        [h, m, s] => h * 3600 + m * 60 + s,
        _ => return None,
    };
    Some(Duration::from_secs(days * 86400 + secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_time_left() {
        assert_eq!(parse_time_left("45"), Some(Duration::from_secs(45)));
        assert_eq!(parse_time_left("1:05"), Some(Duration::from_secs(65)));
        assert_eq!(parse_time_left("2:00:10"), Some(Duration::from_secs(7210)));
        assert_eq!(parse_time_left("1-00:00:01"), Some(Duration::from_secs(86401)));
        assert_eq!(parse_time_left("UNLIMITED"), None);
        assert_eq!(parse_time_left("NOT_SET"), None);
        assert_eq!(parse_time_left(""), None);
    }
}
