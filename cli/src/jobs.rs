//! `mpicr list`: this user's running jobs with a keeper on this node, found in /proc (every
//! keeper is an `mpicr run` or `mpicr restart` process; its checkpoint directory comes from its
//! own command line, environment and working directory, read back through the clap
//! definition), nothing registered anywhere. And `mpicr prune --keep N`.

use crate::args::{Cli, Command, PruneArgs};
use crate::images::{human_bytes, CkptDir, EpochState};
use anyhow::{bail, Result};
use clap::Parser;
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One running keeper on this node.
#[derive(Debug, Clone)]
struct Keeper {
    pid: u32,
    rank: Option<i32>,
    dir: PathBuf,
    restart: bool,
}

/// A job, as `mpicr list` shows it.
#[derive(Debug, Serialize)]
pub struct JobLine {
    pub directory: String,
    pub job_id: Option<String>,
    pub ranks: Option<i32>,
    pub program: Option<String>,
    /// Ranks of the job whose keepers run on this node, and their pids.
    pub local_ranks: Vec<Option<i32>>,
    pub keeper_pids: Vec<u32>,
    /// `running`, `checkpointing N`, `restarting from N`, `starting`, or why it is unknown.
    pub state: String,
    pub coordinator: Option<String>,
}

/// The keeper processes of this user on this node.
fn keepers() -> Vec<Keeper> {
    let me = crate::sys::euid();
    let mine = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == mine || e.metadata().map(|m| m.uid()).ok() != Some(me) {
            continue;
        }
        if let Some(k) = keeper(pid) {
            out.push(k);
        }
    }
    out.sort_by_key(|k| k.pid);
    out
}

/// `pid` as a keeper: its command line parses as `mpicr run|restart ...`.
fn keeper(pid: u32) -> Option<Keeper> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    if comm.trim() != "mpicr" {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv: Vec<OsString> = cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| OsString::from_vec(a.to_vec())).collect();
    let cli = Cli::try_parse_from(&argv).ok()?;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let var = |k: &str| -> Option<OsString> {
        let prefix = format!("{k}=");
        environ.split(|&b| b == 0).find_map(|v| v.strip_prefix(prefix.as_bytes())).filter(|v| !v.is_empty()).map(|v| std::ffi::OsStr::from_bytes(v).to_owned())
    };
    let (dir, restart) = match cli.command {
        Command::Run(a) => (a.ckpt_dir, false),
        Command::Restart(a) => (a.dir.dir, true),
        _ => return None,
    };
    let dir = dir.or_else(|| var(crate::args::CKPT_DIR_ENV).map(PathBuf::from)).unwrap_or_else(|| PathBuf::from(crate::args::DEFAULT_CKPT_DIR));
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
    let dir = cwd.join(dir);
    let dir = dir.canonicalize().unwrap_or(dir);
    let rank = var("PMI_RANK").and_then(|r| r.to_str()?.trim().parse().ok());
    Some(Keeper { pid, rank, dir, restart })
}

pub fn jobs() -> Vec<JobLine> {
    let mut by_dir: BTreeMap<PathBuf, Vec<Keeper>> = BTreeMap::new();
    for k in keepers() {
        by_dir.entry(k.dir.clone()).or_default().push(k);
    }
    let mut out = Vec::new();
    for (dir, ks) in by_dir {
        let cd = CkptDir::new(&dir);
        let job = cd.read_job().ok();
        let live = crate::client::live_status(&cd);
        let (state, coordinator) = match &live {
            None if ks.iter().any(|k| k.restart) => ("restarting".to_string(), None),
            None => ("starting".to_string(), None),
            Some(Err(e)) => (format!("unknown: {e:#}"), None),
            Some(Ok((info, res))) => {
                let at = Some(format!("pid {} on {}:{}", info.pid, info.host, info.port));
                match res {
                    Ok(l) if l.in_progress.is_some() => (format!("checkpointing {}", l.in_progress.unwrap_or(0)), at),
                    Ok(l) if l.restart_pending.is_some() => (format!("restarting from {}", l.restart_pending.unwrap_or(0)), at),
                    Ok(l) => (format!("running ({}/{} ranks connected)", l.registered.len(), l.size), at),
                    Err(e) => (format!("unknown: the coordinator does not answer ({e:#})"), at),
                }
            }
        };
        out.push(JobLine {
            directory: dir.display().to_string(),
            job_id: job.as_ref().map(|j| j.job_id.clone()),
            ranks: job.as_ref().map(|j| j.ranks),
            program: job.as_ref().map(|j| j.argv.join(" ")),
            local_ranks: ks.iter().map(|k| k.rank).collect(),
            keeper_pids: ks.iter().map(|k| k.pid).collect(),
            state,
            coordinator,
        });
    }
    out
}

pub fn list(json: bool) -> Result<()> {
    let jobs = jobs();
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(());
    }
    if jobs.is_empty() {
        crate::outln!("no mpicr job of this user runs on this node");
        return Ok(());
    }
    crate::outln!("{:<16} {:>5} {:<11} {:<32} {:<40} PROGRAM", "JOB", "RANKS", "HERE", "STATE", "DIRECTORY");
    for j in &jobs {
        let mut here: Vec<String> = j.local_ranks.iter().map(|r| r.map_or("?".into(), |r| r.to_string())).collect();
        here.sort();
        crate::outln!(
            "{:<16} {:>5} {:<11} {:<32} {:<40} {}",
            j.job_id.as_deref().unwrap_or("-"),
            j.ranks.map_or("-".into(), |r| r.to_string()),
            here.join(","),
            j.state,
            j.directory,
            j.program.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

/// What `prune` removes: every complete epoch older than the newest `keep` complete ones, and
/// every incomplete or corrupt epoch older than the newest complete one (a newer one may be a
/// checkpoint in progress, and is left alone).
pub fn to_prune(epochs: &[(u64, bool)], keep: u64) -> Vec<u64> {
    let complete: Vec<u64> = epochs.iter().filter(|e| e.1).map(|e| e.0).collect();
    let Some(&newest) = complete.last() else { return Vec::new() };
    let keep = keep.max(1) as usize;
    let kept: Vec<u64> = complete.iter().rev().take(keep).copied().collect();
    epochs.iter().filter(|e| e.0 < newest && !kept.contains(&e.0)).map(|e| e.0).collect()
}

pub fn prune(a: &PruneArgs) -> Result<()> {
    let dir = CkptDir::new(a.dir.resolve());
    dir.check_exists()?;
    // Only in a directory of this user that nobody else can write.
    dir.secure(false)?;
    let epochs = dir.epochs()?;
    let list: Vec<(u64, bool)> = epochs.iter().map(|e| (e.epoch, matches!(e.state, EpochState::Complete(_)))).collect();
    if !list.iter().any(|e| e.1) {
        crate::outln!("{}: no complete epoch, nothing removed", dir.root.display());
        return Ok(());
    }
    let all: Vec<u64> = list.iter().map(|e| e.0).collect();
    let gone = crate::incremental::spare_parents(&dir, &all, to_prune(&list, a.keep));
    let mut freed = 0;
    for e in epochs.iter().filter(|e| gone.contains(&e.epoch)) {
        let size = crate::status::dir_size(&e.dir);
        let what = match &e.state {
            EpochState::Complete(_) => "complete",
            EpochState::Incomplete(_) => "incomplete",
            EpochState::Corrupt(_) => "corrupt",
        };
        if a.dry_run {
            crate::outln!("would remove epoch {} ({what}, {})", e.epoch, human_bytes(size));
        } else {
            remove_epoch(&e.dir)?;
            crate::outln!("removed epoch {} ({what}, {})", e.epoch, human_bytes(size));
        }
        freed += size;
    }
    let kept: Vec<String> = list.iter().filter(|e| !gone.contains(&e.0)).map(|e| e.0.to_string()).collect();
    crate::outln!(
        "{} {} in {} epoch(s); kept epoch(s) {}",
        if a.dry_run { "would free" } else { "freed" },
        human_bytes(freed),
        gone.len(),
        if kept.is_empty() { "none".into() } else { kept.join(", ") }
    );
    Ok(())
}

/// `--keep N` of `run` and `restart`, after each commit: what `prune --keep N` removes, quietly.
pub fn retain(dir: &CkptDir, keep: u64) -> Result<()> {
    let epochs = dir.epochs()?;
    let list: Vec<(u64, bool)> = epochs.iter().map(|e| (e.epoch, matches!(e.state, EpochState::Complete(_)))).collect();
    let all: Vec<u64> = list.iter().map(|e| e.0).collect();
    let gone = crate::incremental::spare_parents(dir, &all, to_prune(&list, keep));
    for e in epochs.iter().filter(|e| gone.contains(&e.epoch)) {
        remove_epoch(&e.dir)?;
    }
    Ok(())
}

/// Removes an epoch directory: its manifest first, so that an interrupted removal leaves an
/// incomplete epoch, never a complete one with images missing.
fn remove_epoch(dir: &Path) -> Result<()> {
    let manifest = dir.join("MANIFEST.json");
    match std::fs::remove_file(&manifest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => bail!("removing {}: {e}", manifest.display()),
    }
    std::fs::remove_dir_all(dir).map_err(|e| anyhow::anyhow!("removing {}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_keeps_the_newest_complete_epochs_and_what_may_be_in_progress() {
        // 1..3 complete, 4 failed, 5 complete, 6 in progress
        let e = [(1, true), (2, true), (3, true), (4, false), (5, true), (6, false)];
        assert_eq!(to_prune(&e, 1), vec![1, 2, 3, 4]);
        assert_eq!(to_prune(&e, 2), vec![1, 2, 4]);
        assert_eq!(to_prune(&e, 10), vec![4]);
        // --keep 0 is refused by the parser; here it still keeps the latest complete epoch.
        assert_eq!(to_prune(&e, 0), vec![1, 2, 3, 4]);
        // nothing complete: nothing removed
        assert!(to_prune(&[(1, false), (2, false)], 1).is_empty());
    }

    #[test]
    fn a_keeper_is_read_back_from_its_command_line() {
        let cli = Cli::try_parse_from(["mpicr", "run", "--ckpt-dir", "ck", "--", "./a.out", "--ckpt-dir", "x"]).unwrap();
        let Command::Run(a) = cli.command else { panic!() };
        assert_eq!(a.ckpt_dir, Some(PathBuf::from("ck")));
        assert!(Cli::try_parse_from(["mpicr", crate::pidns::INIT_ARG, "x"]).is_err());
    }
}
