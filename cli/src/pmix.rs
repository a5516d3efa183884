//! Keepers under a PMIx launcher: Open MPI's (`prterun`, `mpirun` of Open MPI 5, 4.1's ORTE
//! `mpirun`) or Slurm's pmix plugin (`srun --mpi=pmix`). The keeper is no PMIx client. Its rank
//! and the job's size come from the launcher's variables, and the keepers meet in the checkpoint
//! directory: rank 0 writes the coordinator's address there under the launcher's namespace name
//! (`PMIX_NAMESPACE`, new for every launch and every srun step), the others wait for it. The
//! program's library talks PMIx to the launcher itself; nothing is relayed.

use crate::coord_wire::CoordInfo;
use crate::images::{self, CkptDir};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the other keepers wait for rank 0's meeting file.
const MEET_TIMEOUT: Duration = Duration::from_secs(60);

/// This rank under a PMIx launcher.
#[derive(Debug, Clone)]
pub struct PmixEnv {
    pub rank: i32,
    pub size: i32,
    pub namespace: String,
    /// Every rank runs on this node (`OMPI_COMM_WORLD_LOCAL_SIZE` = size, or a one-node step).
    pub one_node: bool,
    /// Started by Slurm's pmix plugin (`srun --mpi=pmix`), not by Open MPI's launcher.
    pub slurm: bool,
}

/// Prefixes of the variables that tie a process to its launcher: a restart hands the new
/// launcher's to the agent, so the next generation of Open MPI meets the new `prterun` or srun
/// step (Slurm's own describe the job the program now runs in).
pub const LAUNCHER_PREFIXES: [&str; 4] = ["PMIX_", "OMPI_", "PRTE_", "SLURM_"];

impl PmixEnv {
    /// `None` when `PMIX_RANK` is not set (not started by a PMIx launcher).
    pub fn from_env() -> Result<Option<PmixEnv>> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) over the variables `var` gives.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<PmixEnv>> {
        let get = |k: &str| var(k).filter(|v| !v.is_empty());
        let Some(rank) = get("PMIX_RANK") else { return Ok(None) };
        let num = |k: &str, v: &str| -> Result<i32> { v.trim().parse().with_context(|| format!("{k}={v} is not a number")) };
        let rank = num("PMIX_RANK", &rank)?;
        let namespace = get("PMIX_NAMESPACE").context("PMIX_RANK is set but PMIX_NAMESPACE is not")?;
        // Open MPI's launchers name the size; Slurm's pmix plugin (`srun --mpi=pmix`) leaves it
        // to PMIx and to its own variables of the step.
        let (size, local, slurm) = match get("OMPI_COMM_WORLD_SIZE") {
            Some(size) => {
                let local = get("OMPI_COMM_WORLD_LOCAL_SIZE").and_then(|v| v.trim().parse::<i32>().ok());
                (num("OMPI_COMM_WORLD_SIZE", &size)?, local, false)
            }
            None if get("SLURM_MPI_TYPE").is_some_and(|t| t.starts_with("pmix")) => {
                let size = get("SLURM_STEP_NUM_TASKS").context("srun --mpi=pmix set PMIX_RANK but not SLURM_STEP_NUM_TASKS")?;
                let size = num("SLURM_STEP_NUM_TASKS", &size)?;
                // Every task on this node when the step has one node.
                let nodes = get("SLURM_STEP_NUM_NODES").and_then(|v| v.trim().parse::<i32>().ok());
                (size, (nodes == Some(1)).then_some(size), true)
            }
            None => bail!(
                "started by a PMIx launcher without OMPI_COMM_WORLD_SIZE: mpicr needs the job's size from the launcher (use Open MPI's mpirun/mpiexec, prterun --personality ompi, or srun --mpi=pmix)"
            ),
        };
        if size < 1 || rank < 0 || rank >= size {
            bail!("PMIX_RANK={rank} and a job size of {size} are inconsistent");
        }
        Ok(Some(PmixEnv { rank, size, namespace, one_node: local == Some(size), slurm }))
    }

    /// The launcher, as the user wrote it, for messages.
    pub fn launcher_name(&self) -> &'static str {
        if self.slurm {
            "srun --mpi=pmix"
        } else {
            "Open MPI's launcher"
        }
    }

    /// The launcher's variables of this process, for the agent of a restored program.
    pub fn launcher_env() -> Vec<(String, Option<String>)> {
        std::env::vars().filter(|(k, _)| LAUNCHER_PREFIXES.iter().any(|p| k.starts_with(p))).map(|(k, v)| (k, Some(v))).collect()
    }
}

/// The old launcher's variables (`old`, names from the image) that the new launcher's (`now`)
/// lacks, to be unset in the restored program.
pub fn stale_launcher_vars(old: &[String], now: &[(String, Option<String>)]) -> Vec<(String, Option<String>)> {
    old.iter().filter(|k| LAUNCHER_PREFIXES.iter().any(|p| k.starts_with(p)) && !now.iter().any(|(n, _)| n == *k)).map(|k| (k.clone(), None)).collect()
}

/// Whether this launcher can serve the library a restored program renews into: Open MPI's
/// (`libmpi.so.40`, by file name as the shim's loader tells) talks PMIx, every other library
/// PMI. Checked before anything is restored, so a mismatch is one line, not a renewal that
/// finds no server.
pub fn check_launcher_serves(lib: &Path, pmix: Option<&PmixEnv>) -> Result<()> {
    let open_mpi = lib.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libmpi.so.40"));
    match (open_mpi, pmix) {
        (true, None) => bail!(
            "the job runs on Open MPI ({}), which talks PMIx to its launcher: restart it under a PMIx launcher (srun --mpi=pmix, Open MPI's mpirun), not this PMI one",
            lib.display()
        ),
        (false, Some(p)) => bail!(
            "the job runs on {}, which needs a PMI launcher (mpiexec, srun --mpi=pmi2), but {} serves PMIx only",
            lib.display(),
            p.launcher_name()
        ),
        _ => Ok(()),
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Meeting {
    namespace: String,
    coordinator: String,
}

fn meet_path(dir: &CkptDir) -> PathBuf {
    dir.root.join("pmix-meet.json")
}

/// Rank 0 publishes `info` for this launch; the others wait (bounded) for rank 0's file of
/// their own launch and read it. Stale files of earlier launches name another namespace.
pub fn meet(env: &PmixEnv, dir: &CkptDir, mine: Option<&CoordInfo>) -> Result<CoordInfo> {
    let path = meet_path(dir);
    if let Some(info) = mine {
        images::write_json_atomic(&path, &Meeting { namespace: env.namespace.clone(), coordinator: info.to_pmi_value() })?;
        return Ok(info.clone());
    }
    let start = Instant::now();
    loop {
        if let Ok(m) = images::read_json::<Meeting>(&path) {
            if m.namespace == env.namespace {
                return CoordInfo::from_pmi_value(&m.coordinator);
            }
        }
        if start.elapsed() > MEET_TIMEOUT {
            bail!("rank 0 did not publish its coordinator for launch {} in {} within {} s", env.namespace, path.display(), MEET_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The Open MPI library a program linked to Open MPI runs on underneath when its launcher is
/// Open MPI's: the first `libmpi.so.40` in `LD_LIBRARY_PATH`, then in the program's
/// `DT_RUNPATH`/`DT_RPATH` (`$ORIGIN` expanded), then the launcher's (`OMPI_LIBDIR_LOC`, set by
/// Open MPI 5's `mpirun`), else where the dynamic loader finds it (a distribution's Open MPI in
/// the system's directories, whose `mpirun` sets no `OMPI_LIBDIR_LOC`).
pub fn program_library(program: &Path) -> Option<PathBuf> {
    const NAME: &str = "libmpi.so.40";
    let d = mpicr_elf::read_file(program).ok()?;
    let origin = program.parent().map(|p| p.display().to_string()).unwrap_or_default();
    let own: Vec<PathBuf> = d.search_path.iter().map(|p| PathBuf::from(p.replace("$ORIGIN", &origin).replace("${ORIGIN}", &origin))).collect();
    let env: Vec<PathBuf> =
        std::env::var_os("LD_LIBRARY_PATH").map(|v| std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect()).unwrap_or_default();
    // As for DT_RUNPATH, what linkers write today (an old DT_RPATH would come first).
    let launcher = std::env::var_os("OMPI_LIBDIR_LOC").filter(|v| !v.is_empty()).map(PathBuf::from);
    env.into_iter().chain(own).chain(launcher).map(|d| d.join(NAME)).find(|p| p.is_file()).or_else(|| loader_resolves(program, NAME))
}

/// Where the dynamic loader that runs this process would find `soname` for `program`
/// (`ld.so --list`, which loads nothing of the program's own code).
fn loader_resolves(program: &Path, soname: &str) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let ldso = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| Path::new(p).file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with("ld-linux") || f.starts_with("ld64.so")))?;
    let out = std::process::Command::new(ldso)
        .arg("--list")
        .arg(program)
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    // "\tlibmpi.so.40 => /path/libmpi.so.40 (0x...)"
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (name, rest) = l.trim().split_once(" => ")?;
        let path = PathBuf::from(rest.rsplit_once(" (")?.0);
        (name == soname && path.is_file()).then_some(path)
    })
}

/// Whether the library at `path` is Open MPI's.
pub fn is_open_mpi(path: &Path) -> bool {
    mpicr_elf::read_file(path).is_ok_and(|d| crate::mpilib::face_of(&d) == Some(crate::mpilib::Face::OpenMpi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_launchers_variables_the_new_one_lacks_are_unset() {
        let old: Vec<String> = ["PMIX_RANK", "OMPI_MCA_orte_hnp_uri", "PRTE_LAUNCHED", "UCX_TLS"].map(String::from).to_vec();
        let now = vec![("PMIX_RANK".to_string(), Some("1".to_string())), ("PMIX_NAMESPACE".to_string(), Some("n@1".to_string()))];
        let stale = stale_launcher_vars(&old, &now);
        assert_eq!(stale, vec![("OMPI_MCA_orte_hnp_uri".to_string(), None), ("PRTE_LAUNCHED".to_string(), None)]);
    }

    fn vars(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let v: Vec<(String, String)> = list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| v.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn srun_pmix_gives_the_size_of_its_step() {
        let srun = [("PMIX_RANK", "1"), ("PMIX_NAMESPACE", "slurm.pmix.200.0"), ("SLURM_MPI_TYPE", "pmix"), ("SLURM_STEP_NUM_TASKS", "4")];
        let one = PmixEnv::from_vars(vars(&[&srun[..], &[("SLURM_STEP_NUM_NODES", "1")]].concat())).unwrap().unwrap();
        assert_eq!((one.rank, one.size, one.one_node, one.slurm), (1, 4, true, true));
        assert_eq!(one.launcher_name(), "srun --mpi=pmix");
        let two = PmixEnv::from_vars(vars(&[&srun[..], &[("SLURM_STEP_NUM_NODES", "2")]].concat())).unwrap().unwrap();
        assert!(!two.one_node);
        // Open MPI's own variables win (its mpirun inside an allocation).
        let ompi = PmixEnv::from_vars(vars(&[&srun[..], &[("OMPI_COMM_WORLD_SIZE", "2")]].concat())).unwrap().unwrap();
        assert_eq!((ompi.size, ompi.slurm), (2, false));
        let bare = PmixEnv::from_vars(vars(&[("PMIX_RANK", "0"), ("PMIX_NAMESPACE", "prterun-vm-1@1")])).unwrap_err();
        assert!(bare.to_string().contains("without OMPI_COMM_WORLD_SIZE"), "{bare}");
        assert!(PmixEnv::from_vars(vars(&[("SLURM_MPI_TYPE", "pmi2")])).unwrap().is_none());
    }

    #[test]
    fn a_restart_needs_the_launcher_its_library_talks_to() {
        let ompi = Path::new("/opt/openmpi/lib/libmpi.so.40");
        let mpich = Path::new("/usr/lib/libmpich.so.12");
        let srun = PmixEnv { rank: 0, size: 2, namespace: "slurm.pmix.1.0".into(), one_node: true, slurm: true };
        assert!(check_launcher_serves(ompi, Some(&srun)).is_ok());
        assert!(check_launcher_serves(mpich, None).is_ok());
        let e = check_launcher_serves(ompi, None).unwrap_err().to_string();
        assert!(e.contains("restart it under a PMIx launcher"), "{e}");
        let e = check_launcher_serves(mpich, Some(&srun)).unwrap_err().to_string();
        assert!(e.contains("srun --mpi=pmix serves PMIx only"), "{e}");
    }

    #[test]
    fn ranks_meet_in_the_directory_of_their_own_launch() {
        let root = std::env::temp_dir().join(format!("mpicr-pmix-meet-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let dir = CkptDir::new(root.clone());
        let env = |rank, ns: &str| PmixEnv { rank, size: 2, namespace: ns.into(), one_node: true, slurm: false };
        let info = CoordInfo { job_id: "j1".into(), host: "h".into(), port: 7, secret: "00ff".into(), pid: 3, bind: None };
        // A file of an earlier launch is not this launch's meeting point.
        meet(&env(0, "old@1"), &dir, Some(&info)).unwrap();
        let other = std::thread::spawn({
            let dir = dir.clone();
            move || meet(&env(1, "new@1"), &dir, None)
        });
        std::thread::sleep(Duration::from_millis(200));
        let mut mine = info.clone();
        mine.port = 8;
        meet(&env(0, "new@1"), &dir, Some(&mine)).unwrap();
        assert_eq!(other.join().unwrap().unwrap(), mine);
        let _ = std::fs::remove_dir_all(&root);
    }
}
