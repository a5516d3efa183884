//! Application-level ranks (`mpicr run --mode app`): never dumped by CRIU. The program saves
//! its own data at a safe point (the shim's `core::app`); the keeper records how it was started,
//! and a restart starts it afresh that way, its `MPI_Init` rebuilding the MPI state from the
//! rank's `shim.state` and calling the program's `restore`.

use crate::images::{self, RankManifest, RankMeta};
use crate::spawn::{self, Plan, Spawned, PROGRAM_CTL_FD};
use crate::sys;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// Environment the shim reads: the program is an app-mode rank / the rank directory to restore.
pub const APP_MODE_ENV: &str = "MPICR_APP_MODE";
pub const APP_RESTORE_ENV: &str = "MPICR_APP_RESTORE";

/// How an app-mode program was started (kept in each epoch's `rank.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppLaunch {
    pub program: PathBuf,
    pub argv: Vec<String>,
    /// The keeper's environment when it started the program (before mpicr's own settings).
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
}

impl AppLaunch {
    pub fn capture(program: &Path, argv: &[OsString]) -> Result<AppLaunch> {
        Ok(AppLaunch {
            program: program.to_path_buf(),
            argv: argv.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
            env: std::env::vars_os().map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned())).collect(),
            cwd: std::env::current_dir().context("reading the working directory")?,
        })
    }
}

/// Variables of the launch a restart runs in, not of the one the program first ran in.
fn belongs_to_launch(k: &str) -> bool {
    ["PMI_", "PMIX_", "HYDI_", "HYDRA_", "MPI_LOCAL", "SLURM_", "OMPI_", "PRTE_", "I_MPI_", "MPIR_", "MPICR_"].iter().any(|p| k.starts_with(p))
}

/// The restarted program's environment: the one it first ran with, except what describes the
/// launch (taken from this keeper's environment, the new launch's).
fn restart_env(saved: &[(String, String)]) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = saved.iter().filter(|(k, _)| !belongs_to_launch(k)).map(|(k, v)| (k.clone(), OsString::from(v))).collect();
    env.extend(std::env::vars_os().filter_map(|(k, v)| {
        let k = k.into_string().ok()?;
        belongs_to_launch(&k).then_some((k, v))
    }));
    env
}

/// Writes `rank.json` of an app-mode rank (no CRIU image: the program's data under `app/`,
/// `shim.state` beside it) and checksums the directory.
pub fn record(rdir: &Path, mut meta: RankMeta, launch: &AppLaunch, started: std::time::Instant) -> Result<RankManifest> {
    meta.app = Some(launch.clone());
    images::seal_rank_dir(rdir, &meta, started)
}

/// What a restarted app-mode program is started with.
pub struct Fresh {
    pub spawned: Spawned,
    pub ctl: OwnedFd,
    /// The keeper's end of the first PMI connection (`None` without a launcher).
    pub pmi: Option<OwnedFd>,
}

/// Starts the program of `launch` afresh to restore rank directory `rdir` (absolute).
/// `pidns`: the working directory of the init of a PID namespace for the program (see
/// `keeper::run`: app-mode ranks get one like their CRIU peers).
pub fn start_fresh(
    launch: &AppLaunch,
    rdir: &Path,
    shim: Option<PathBuf>,
    pmi_fd: Option<RawFd>,
    extra: Vec<(String, OsString)>,
    pidns: Option<PathBuf>,
) -> Result<Fresh> {
    let (k_ctl, p_ctl) = sys::socketpair().context("creating the control socketpair")?;
    let mut fds: Vec<(OwnedFd, RawFd)> = vec![(p_ctl, PROGRAM_CTL_FD)];
    let mut set_env = restart_env(&launch.env);
    set_env.push((mpicr_proto::CTL_FD_ENV.into(), PROGRAM_CTL_FD.to_string().into()));
    set_env.push((APP_MODE_ENV.into(), "1".into()));
    set_env.push((APP_RESTORE_ENV.into(), rdir.as_os_str().to_owned()));
    set_env.extend(extra);
    let mut remove_env: Vec<String> = vec!["HYDI_CONTROL_FD".into(), "PMI_PORT".into()];
    let mut pmi = None;
    match pmi_fd {
        Some(n) => {
            let (k, p) = sys::socketpair().context("creating the PMI socketpair")?;
            fds.push((p, n));
            set_env.push(("PMI_FD".into(), n.to_string().into()));
            pmi = Some(k);
        }
        None => remove_env.push("PMI_FD".into()),
    }
    if let Some(shim) = shim {
        let mut v = shim.into_os_string();
        if let Some(old) = launch.env.iter().find(|(k, _)| k == "LD_PRELOAD").map(|(_, v)| v).filter(|v| !v.is_empty()) {
            v.push(":");
            v.push(old);
        }
        set_env.push(("LD_PRELOAD".into(), v));
    }
    set_env.retain(|(k, _)| !remove_env.contains(k));
    // Only what is set here: the keeper's own environment is not the program's.
    let mut clear: Vec<String> = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect();
    clear.retain(|k| !set_env.iter().any(|(s, _)| s == k));
    remove_env.extend(clear);
    let spawned = spawn::spawn(Plan {
        program: launch.program.clone(),
        argv: launch.argv.iter().map(OsString::from).collect(),
        set_env,
        remove_env,
        fds,
        pidns,
        cwd: Some(launch.cwd.clone()),
        no_aslr: true,
    })
    .map_err(anyhow::Error::new)?;
    Ok(Fresh { spawned, ctl: k_ctl, pmi })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_env_takes_the_launch_from_now() {
        std::env::set_var("PMI_RANK", "3");
        let saved = vec![("HOME".to_string(), "/h".to_string()), ("PMI_RANK".to_string(), "1".to_string())];
        let env = restart_env(&saved);
        assert!(env.contains(&("HOME".to_string(), OsString::from("/h"))));
        assert!(env.contains(&("PMI_RANK".to_string(), OsString::from("3"))));
        assert!(!env.contains(&("PMI_RANK".to_string(), OsString::from("1"))));
    }
}
