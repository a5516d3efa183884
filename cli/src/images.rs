//! The checkpoint directory (DESIGN.md section 7):
//!
//! ```text
//! DIR/job.json                      the job: id, ranks, program, MPI library, renewal strategy
//! DIR/coordinator.json              (0600, while the job runs) coordinator address and secret
//! DIR/epoch-000003/MANIFEST.json    written last (atomic rename): ranks, sizes, checksums, timings
//! DIR/epoch-000003/FAILED           why an epoch was abandoned (it has no manifest)
//! DIR/epoch-000003/rank-0/          CRIU images, rank.json (keeper metadata), shim.state, dump.log
//! DIR/latest -> epoch-000003
//! ```
//! An epoch without a valid manifest does not exist for restart.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub const FORMAT: u32 = 1;

/// `DIR/job.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub format: u32,
    pub job_id: String,
    pub ranks: i32,
    pub program: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub created_unix: u64,
    /// `mpi` (shim + PMI relay), `no-shim` or `no-mpi` (debugging modes).
    pub mode: String,
    /// The launcher's kvsname at the first run; presented to the program ever after.
    pub kvsname: Option<String>,
    /// Real MPI library under the shim (from the agents' Hello).
    pub mpi_library: Option<String>,
    /// `sessions` or `namespace` (from the agents' Hello).
    pub renew_strategy: Option<String>,
    pub mpicr_version: String,
}

/// One image file and its checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

/// Per-rank part of a manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankManifest {
    pub rank: i32,
    pub host: String,
    pub pid: i32,
    pub bytes: u64,
    pub files: Vec<FileSum>,
    /// Lower-half renewals still possible in the program (None: unbounded or no agent).
    pub renewals_left: Option<u32>,
    pub drained_msgs: u64,
    pub drained_bytes: u64,
    pub state_bytes: u64,
    pub dump_us: u64,
    /// Agent phases (microseconds), in protocol order.
    pub agent_timings: Vec<(String, u64)>,
}

/// `DIR/epoch-NNNNNN/MANIFEST.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub job_id: String,
    pub epoch: u64,
    pub ranks: i32,
    pub created_unix: u64,
    /// Taken by `checkpoint --stop`.
    pub stop: bool,
    pub total_bytes: u64,
    /// How long the program was held (request to resume, or to the end of the dump for --stop).
    pub stop_time_us: u64,
    /// Coordinator phases (microseconds), in protocol order.
    pub timings: Vec<(String, u64)>,
    pub rank_info: Vec<RankManifest>,
}

/// What the keeper needs to restore its rank: `rank-N/rank.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankMeta {
    pub format: u32,
    pub job_id: String,
    pub epoch: u64,
    pub rank: i32,
    pub size: i32,
    pub host: String,
    pub pid: i32,
    /// Every thread id of the program (they must all be free at restore).
    pub tids: Vec<i32>,
    /// Sockets of the program connected to the keeper, declared external at dump.
    pub sockets: Vec<ExternalSocket>,
    /// The program's stdout/stderr pipes (the keeper holds the read ends).
    pub pipes: Vec<ExternalPipe>,
    /// The generation the program's next `init` starts (PMI key prefixes).
    pub next_generation: u32,
    /// Whether an agent speaks the control protocol in this program.
    pub agent: bool,
    /// What the agent said in its `Hello` (a restored agent does not repeat it).
    #[serde(default)]
    pub agent_hello: Option<mpicr_proto::Hello>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalSocket {
    /// Descriptor numbers in the program (one socket may be open under several).
    pub fds: Vec<i32>,
    pub ino: u64,
    /// `ctl` (control socket) or `pmi` (a PMI connection).
    pub role: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalPipe {
    pub fds: Vec<i32>,
    pub ino: u64,
    /// `stdout` or `stderr`.
    pub stream: String,
}

/// An epoch directory as found on disk.
#[derive(Debug)]
pub struct EpochEntry {
    pub epoch: u64,
    pub dir: PathBuf,
    pub state: EpochState,
}

#[derive(Debug)]
pub enum EpochState {
    Complete(Box<Manifest>),
    /// No manifest; the reason from `FAILED` if any (or still being written).
    Incomplete(Option<String>),
    /// A manifest that cannot be read.
    Corrupt(String),
}

pub fn epoch_name(epoch: u64) -> String {
    format!("epoch-{epoch:06}")
}

pub fn parse_epoch_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("epoch-")?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A checkpoint directory.
#[derive(Debug, Clone)]
pub struct CkptDir {
    pub root: PathBuf,
}

impl CkptDir {
    pub fn new(root: impl Into<PathBuf>) -> CkptDir {
        CkptDir { root: root.into() }
    }

    pub fn job_path(&self) -> PathBuf {
        self.root.join("job.json")
    }
    pub fn coordinator_path(&self) -> PathBuf {
        self.root.join("coordinator.json")
    }
    pub fn epoch_dir(&self, epoch: u64) -> PathBuf {
        self.root.join(epoch_name(epoch))
    }
    pub fn rank_dir(&self, epoch: u64, rank: i32) -> PathBuf {
        self.epoch_dir(epoch).join(format!("rank-{rank}"))
    }
    pub fn manifest_path(&self, epoch: u64) -> PathBuf {
        self.epoch_dir(epoch).join("MANIFEST.json")
    }
    pub fn latest_link(&self) -> PathBuf {
        self.root.join("latest")
    }

    /// Errors unless this looks like a checkpoint directory.
    pub fn check_exists(&self) -> Result<()> {
        if !self.root.is_dir() {
            bail!("checkpoint directory {} does not exist", self.root.display());
        }
        if !self.job_path().is_file() {
            bail!("{} is not a checkpoint directory (it has no job.json)", self.root.display());
        }
        Ok(())
    }

    pub fn read_job(&self) -> Result<JobInfo> {
        self.check_exists()?;
        read_json(&self.job_path())
    }

    pub fn write_job(&self, job: &JobInfo) -> Result<()> {
        write_json_atomic(&self.job_path(), job, 0o644)
    }

    /// Every `epoch-*` directory, sorted by epoch.
    pub fn epochs(&self) -> Result<Vec<EpochEntry>> {
        let mut out = Vec::new();
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.root.display())),
        };
        for entry in rd {
            let entry = entry?;
            let name = entry.file_name();
            let Some(epoch) = parse_epoch_name(&name.to_string_lossy()) else { continue };
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let state = self.epoch_state(epoch);
            out.push(EpochEntry { epoch, dir: entry.path(), state });
        }
        out.sort_by_key(|e| e.epoch);
        Ok(out)
    }

    fn epoch_state(&self, epoch: u64) -> EpochState {
        let mp = self.manifest_path(epoch);
        match fs::read(&mp) {
            Ok(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) if m.epoch == epoch => EpochState::Complete(Box::new(m)),
                Ok(m) => EpochState::Corrupt(format!("it names epoch {} instead of {epoch}", m.epoch)),
                Err(e) => EpochState::Corrupt(e.to_string()),
            },
            Err(_) => {
                let why = fs::read_to_string(self.epoch_dir(epoch).join("FAILED")).ok().map(|s| s.trim().to_string());
                EpochState::Incomplete(why)
            }
        }
    }

    /// The number the next checkpoint gets: one past every epoch directory, complete or not.
    pub fn next_epoch(&self) -> Result<u64> {
        Ok(self.epochs()?.last().map_or(1, |e| e.epoch + 1))
    }

    /// Where `latest` points, if it names an epoch.
    pub fn latest(&self) -> Option<u64> {
        let target = fs::read_link(self.latest_link()).ok()?;
        parse_epoch_name(&target.file_name()?.to_string_lossy())
    }

    /// The epoch to restore: `requested`, or the newest complete one.
    pub fn select_epoch(&self, requested: Option<u64>) -> Result<Manifest> {
        self.check_exists()?;
        let epochs = self.epochs()?;
        let complete: Vec<u64> =
            epochs.iter().filter(|e| matches!(e.state, EpochState::Complete(_))).map(|e| e.epoch).collect();
        let list = || {
            if complete.is_empty() {
                "there is no complete epoch".to_string()
            } else {
                format!("complete epochs: {}", complete.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))
            }
        };
        let pick = match requested {
            Some(k) => k,
            None => *complete.last().with_context(|| format!("{} holds no complete epoch to restart from", self.root.display()))?,
        };
        let Some(entry) = epochs.into_iter().find(|e| e.epoch == pick) else {
            bail!("epoch {pick} does not exist in {} ({})", self.root.display(), list());
        };
        match entry.state {
            EpochState::Complete(m) => Ok(*m),
            EpochState::Incomplete(why) => bail!(
                "epoch {pick} is incomplete (no MANIFEST.json{}) and cannot be restored ({})",
                why.map(|w| format!("; it failed: {w}")).unwrap_or_default(),
                list()
            ),
            EpochState::Corrupt(e) => {
                bail!("the manifest of epoch {pick} ({}) is corrupt: {e}", self.manifest_path(pick).display())
            }
        }
    }

    /// Commits an epoch: the manifest (atomically), then `latest`.
    pub fn commit(&self, m: &Manifest) -> Result<()> {
        write_json_atomic(&self.manifest_path(m.epoch), m, 0o644)?;
        self.set_latest(m.epoch)
    }

    pub fn set_latest(&self, epoch: u64) -> Result<()> {
        let link = self.latest_link();
        let tmp = self.root.join(format!(".latest.tmp-{}", std::process::id()));
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(epoch_name(epoch), &tmp).with_context(|| format!("creating {}", tmp.display()))?;
        fs::rename(&tmp, &link).with_context(|| format!("updating {}", link.display()))?;
        Ok(())
    }

    /// Marks an epoch as abandoned (it keeps no manifest).
    pub fn mark_failed(&self, epoch: u64, reason: &str) {
        let _ = fs::write(self.epoch_dir(epoch).join("FAILED"), format!("{reason}\n"));
    }
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is corrupt", path.display()))
}

/// Writes `value` as JSON to `path` through a temporary file and a rename.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T, mode: u32) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes, mode)
}

pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().context("path without a file name")?.to_string_lossy().into_owned();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let res = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res.with_context(|| format!("writing {}", path.display()))
}

pub fn sha256_file(path: &Path) -> Result<(u64, String)> {
    let mut f = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        h.update(&buf[..n]);
    }
    Ok((total, hex(&h.finalize())))
}

/// Checksums of every file in a rank directory except logs, sorted by name.
pub fn checksum_dir(dir: &Path) -> Result<Vec<FileSum>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.file_type()?.is_file() || name.ends_with(".log") || name.starts_with('.') {
            continue;
        }
        let (bytes, sha256) = sha256_file(&entry.path())?;
        out.push(FileSum { name, bytes, sha256 });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Checks a rank directory against its manifest entry; the error names the first bad file.
pub fn verify_rank_dir(dir: &Path, expected: &[FileSum]) -> Result<()> {
    for f in expected {
        let p = dir.join(&f.name);
        if !p.exists() {
            bail!("image file {} is missing", p.display());
        }
        let (bytes, sum) = sha256_file(&p)?;
        if bytes != f.bytes || sum != f.sha256 {
            bail!("image file {} is corrupt (checksum mismatch)", p.display());
        }
    }
    Ok(())
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// `12.3 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn tempdir(tag: &str) -> PathBuf {
        let mut r = [0u8; 6];
        crate::sys::random_bytes(&mut r).unwrap();
        let d = std::env::temp_dir().join(format!("mpicr-test-{tag}-{}", hex(&r)));
        fs::create_dir_all(&d).unwrap();
        d
    }

    pub fn job() -> JobInfo {
        JobInfo {
            format: FORMAT,
            job_id: "j1".into(),
            ranks: 2,
            program: "./a".into(),
            argv: vec!["./a".into()],
            cwd: "/".into(),
            created_unix: 0,
            mode: "mpi".into(),
            kvsname: None,
            mpi_library: None,
            renew_strategy: None,
            mpicr_version: "0".into(),
        }
    }

    pub fn manifest(epoch: u64) -> Manifest {
        Manifest {
            format: FORMAT,
            job_id: "j1".into(),
            epoch,
            ranks: 2,
            created_unix: 0,
            stop: false,
            total_bytes: 10,
            stop_time_us: 5,
            timings: vec![],
            rank_info: vec![],
        }
    }

    #[test]
    fn epoch_names() {
        assert_eq!(epoch_name(3), "epoch-000003");
        assert_eq!(parse_epoch_name("epoch-000003"), Some(3));
        assert_eq!(parse_epoch_name("epoch-"), None);
        assert_eq!(parse_epoch_name("epoch-00x"), None);
        assert_eq!(parse_epoch_name("latest"), None);
    }

    #[test]
    fn selection_skips_incomplete_and_reports_clearly() {
        let d = CkptDir::new(tempdir("sel"));
        assert!(d.select_epoch(None).unwrap_err().to_string().contains("no job.json"));
        d.write_job(&job()).unwrap();
        assert!(d.select_epoch(None).unwrap_err().to_string().contains("no complete epoch"));
        for e in 1..=3 {
            fs::create_dir_all(d.epoch_dir(e)).unwrap();
        }
        d.commit(&manifest(1)).unwrap();
        d.commit(&manifest(2)).unwrap();
        d.mark_failed(3, "rank 1: criu dump failed");
        assert_eq!(d.latest(), Some(2));
        assert_eq!(d.next_epoch().unwrap(), 4);
        assert_eq!(d.select_epoch(None).unwrap().epoch, 2);
        assert_eq!(d.select_epoch(Some(1)).unwrap().epoch, 1);
        let e = d.select_epoch(Some(3)).unwrap_err().to_string();
        assert!(e.contains("incomplete") && e.contains("criu dump failed") && e.contains("1, 2"), "{e}");
        let e = d.select_epoch(Some(9)).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        fs::write(d.manifest_path(2), b"{ not json").unwrap();
        assert_eq!(d.select_epoch(None).unwrap().epoch, 1);
        let e = d.select_epoch(Some(2)).unwrap_err().to_string();
        assert!(e.contains("corrupt"), "{e}");
        fs::remove_dir_all(&d.root).unwrap();
    }

    #[test]
    fn checksums_detect_corruption() {
        let root = tempdir("sum");
        fs::write(root.join("pages-1.img"), b"abc").unwrap();
        fs::write(root.join("dump.log"), b"log").unwrap();
        let sums = checksum_dir(&root).unwrap();
        assert_eq!(sums.len(), 1);
        assert_eq!(sums[0].sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        verify_rank_dir(&root, &sums).unwrap();
        fs::write(root.join("pages-1.img"), b"abd").unwrap();
        assert!(verify_rank_dir(&root, &sums).unwrap_err().to_string().contains("corrupt"));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn hex_round_trip_and_sizes() {
        assert_eq!(unhex(&hex(&[0, 1, 254, 255])), Some(vec![0, 1, 254, 255]));
        assert_eq!(unhex("zz"), None);
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
