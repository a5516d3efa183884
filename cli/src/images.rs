//! The checkpoint directory (DESIGN.md section 7):
//!
//! ```text
//! DIR/job.json                      the job: id, ranks, program, MPI library, renewal strategy
//! DIR/job.key                       the job's key (hex): signs every manifest (HMAC-SHA256)
//! DIR/coordinator.json              (0600, while the job runs) coordinator address and secret
//! DIR/epoch-000003/MANIFEST.json    written last (atomic rename): ranks, sizes, checksums, timings
//! DIR/epoch-000003/FAILED           why an epoch was abandoned (it has no manifest)
//! DIR/epoch-000003/rank-0/          CRIU images, rank.json (keeper metadata), shim.state, dump.log
//! DIR/epoch-000003/rank-0/parent    (--incremental) -> ../../epoch-000002/rank-0, the parent dump
//! DIR/epoch-000003/rank-0/STAGED    (--stage-dir) while the copy from the stage directory runs
//! DIR/latest -> epoch-000003
//! ```
//! An epoch without a valid manifest does not exist for restart.
//!
//! Security: every directory is 0700 and every file 0600, whatever the umask (the images hold
//! the program's whole memory). A checkpoint directory must belong to the user and must not be
//! writable by group or others; files are written through temporaries created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` under random names, then renamed; a manifest counts only if its
//! signature verifies with `job.key`.

use anyhow::{bail, Context, Result};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const FORMAT: u32 = 1;
/// Mode of every directory mpicr creates in a checkpoint directory (and of the directory itself).
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file in a checkpoint directory.
pub const FILE_MODE: u32 = 0o600;
/// Bytes of the per-job key that signs manifests.
pub const KEY_LEN: usize = 32;
/// Manifests and job files larger than this are refused (a hostile or broken file).
pub const MAX_JSON_BYTES: u64 = 64 << 20;

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
    /// The PMI version (1 or 2) the program speaks on the wire, which a restart's keeper
    /// initialises with its launcher (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmi_version: Option<u32>,
    /// Real MPI library under the shim (from the agents' Hello).
    pub mpi_library: Option<String>,
    /// `sessions` or `namespace` (from the agents' Hello).
    pub renew_strategy: Option<String>,
    pub mpicr_version: String,
}

/// One image file and its checksum, and the per-rank part of a manifest (also what a keeper
/// reports to the coordinator after its dump).
pub use mpicr_proto::coord::{FileSum, RankManifest};

/// Why a manifest is not to be trusted (the rest of a sentence "its manifest is corrupt: ...").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("it is not signed (forged, or written by an older mpicr)")]
    Unsigned,
    #[error("its signature does not match the job's key (forged or modified)")]
    BadSignature,
    #[error("it has {0} ranks")]
    Ranks(i32),
    #[error("it has a bad or repeated entry for rank {0}")]
    BadRank(i32),
    #[error("rank {0} lists an invalid file name {1:?}")]
    BadFileName(i32, String),
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
    /// How long the program was held: request to the last rank's program running again after
    /// its dump (checkpoint-and-continue), or to the end of the dump for --stop.
    pub stop_time_us: u64,
    /// Request to the last rank's MPI library renewed (checkpoint-and-continue): the program's
    /// MPI calls wait at the gate until then, its other work does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_back_us: Option<u64>,
    /// Coordinator phases (microseconds), in protocol order.
    pub timings: Vec<(String, u64)>,
    pub rank_info: Vec<RankManifest>,
    /// HMAC-SHA256 (hex) of the manifest without this field, keyed with `job.key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

impl Manifest {
    fn compute_mac(&self, key: &[u8]) -> Hmac<Sha256> {
        let mut unsigned = self.clone();
        unsigned.mac = None;
        let bytes = serde_json::to_vec(&unsigned).unwrap_or_default();
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        m.update(b"mpicr-manifest-v1\0");
        m.update(&bytes);
        m
    }

    /// Sets `mac` to this manifest's signature with `key`.
    pub fn sign(&mut self, key: &[u8]) {
        self.mac = None;
        self.mac = Some(hex(&self.compute_mac(key).finalize().into_bytes()));
    }

    /// Checks the signature and that the manifest is sane (file names, ranks); the error says why not.
    pub fn verify(&self, key: &[u8]) -> std::result::Result<(), ManifestError> {
        let Some(mac) = &self.mac else {
            return Err(ManifestError::Unsigned);
        };
        let ok = unhex(mac).is_some_and(|m| self.compute_mac(key).verify_slice(&m).is_ok());
        if !ok {
            return Err(ManifestError::BadSignature);
        }
        self.check_sane()
    }

    /// Structural checks that do not need the key.
    pub fn check_sane(&self) -> std::result::Result<(), ManifestError> {
        if self.ranks <= 0 {
            return Err(ManifestError::Ranks(self.ranks));
        }
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.rank_info {
            if r.rank < 0 || r.rank >= self.ranks || !seen.insert(r.rank) {
                return Err(ManifestError::BadRank(r.rank));
            }
            for f in &r.files {
                if !is_listed_name(&f.name) {
                    return Err(ManifestError::BadFileName(r.rank, f.name.clone()));
                }
            }
        }
        Ok(())
    }
}

/// A name of a file directly inside a directory: not empty, no `/`, not `.` or `..`, no NUL.
pub fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
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
    /// Whether `pid` is the init of a PID namespace of the program's own: its processes are
    /// restored in a new namespace, so their ids need not be free on the node.
    #[serde(default)]
    pub pidns: bool,
    /// Where the init of that namespace works (it must exist when the image is restored).
    #[serde(default)]
    pub init_dir: Option<PathBuf>,
    /// The MPI library settings mpicr decides for the program (`pidns::settings_at_run`).
    #[serde(default)]
    pub lower_env: Vec<String>,
    /// Names of the launcher's variables (`PMIX_*`, `OMPI_*`, `PRTE_*`) in the program's
    /// environment: a restart under Open MPI's launcher unsets those the new launcher does not
    /// set (`pmix::stale_launcher_vars`).
    #[serde(default)]
    pub launcher_vars: Vec<String>,
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
    /// An app-mode rank (`mpicr run --mode app`): no CRIU image; how to start it again.
    #[serde(default)]
    pub app: Option<crate::app::AppLaunch>,
    /// An incremental dump: the epoch whose images hold the pages this one did not write
    /// (`parent` links to its rank directory; see `incremental`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_epoch: Option<u64>,
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
    /// A manifest that cannot be read, or whose signature does not verify.
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
    pub fn key_path(&self) -> PathBuf {
        self.root.join("job.key")
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
    /// Where the init of rank `rank`'s PID namespace works (see `pidns::init_args`).
    pub fn init_dir(&self, rank: i32) -> PathBuf {
        self.root.join("init").join(format!("rank-{rank}"))
    }
    pub fn latest_link(&self) -> PathBuf {
        self.root.join("latest")
    }

    /// Errors unless this looks like a checkpoint directory that this user can read.
    pub fn check_exists(&self) -> Result<()> {
        match fs::metadata(&self.root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!("checkpoint directory {} is not a directory", self.root.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("checkpoint directory {} does not exist", self.root.display())
            }
            Err(e) => bail!("cannot read checkpoint directory {}: {e}", self.root.display()),
        }
        match fs::metadata(self.job_path()) {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => bail!("{} is not a checkpoint directory (its job.json is not a file)", self.root.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("{} is not a checkpoint directory (it has no job.json)", self.root.display())
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
                "cannot read the job in {}: permission denied (the directory belongs to uid {}; only its owner can read it)",
                self.root.display(),
                fs::metadata(&self.root).map(|m| m.uid().to_string()).unwrap_or_else(|_| "?".into())
            ),
            Err(e) => bail!("cannot read the job in {}: {e}", self.root.display()),
        }
    }

    /// Makes sure the checkpoint directory is safe to use: it exists (created 0700 when `create`),
    /// it is a directory owned by this user and not writable by group or others (a symbolic link
    /// to it must belong to the user or root). An empty or checkpoint directory readable by others
    /// is tightened to 0700.
    pub fn secure(&self, create: bool) -> Result<()> {
        let root = &self.root;
        let me = crate::sys::euid();
        let lm = match fs::symlink_metadata(root) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(DIR_MODE)
                    .create(root)
                    .with_context(|| format!("creating checkpoint directory {}", root.display()))?;
                fs::symlink_metadata(root).with_context(|| format!("checking checkpoint directory {}", root.display()))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("checkpoint directory {} does not exist", root.display())
            }
            Err(e) => return Err(e).with_context(|| format!("checking checkpoint directory {}", root.display())),
        };
        if lm.file_type().is_symlink() && lm.uid() != me && lm.uid() != 0 {
            bail!("checkpoint directory {} is a symbolic link owned by uid {}, not by you (uid {me}); refusing to use it", root.display(), lm.uid());
        }
        let m = fs::metadata(root).with_context(|| format!("checking checkpoint directory {}", root.display()))?;
        if !m.is_dir() {
            bail!("checkpoint directory {} is not a directory", root.display());
        }
        if m.uid() != me {
            bail!("checkpoint directory {} is owned by uid {}, not by you (uid {me}); refusing to use it", root.display(), m.uid());
        }
        if m.mode() & 0o022 != 0 {
            bail!(
                "checkpoint directory {} is writable by group or others (mode {:04o}); refusing to use it (chmod go-w it, or choose another directory)",
                root.display(),
                m.mode() & 0o7777
            );
        }
        // Tightened when it is a checkpoint directory or empty; a directory of other use chosen
        // for checkpoints (`--ckpt-dir .`) keeps its mode: what mpicr puts in it is private anyway.
        let ours = fs::symlink_metadata(self.job_path()).is_ok()
            || fs::read_dir(root).with_context(|| format!("reading checkpoint directory {}", root.display()))?.next().is_none();
        if m.mode() & 0o7777 != DIR_MODE && ours {
            fs::set_permissions(root, fs::Permissions::from_mode(DIR_MODE))
                .with_context(|| format!("making checkpoint directory {} private (mode 0700)", root.display()))?;
        }
        Ok(())
    }

    /// A new random key for this job, written to `job.key` (0600).
    pub fn new_key(&self) -> Result<Vec<u8>> {
        let mut key = vec![0u8; KEY_LEN];
        crate::sys::random_bytes(&mut key).context("drawing the job key")?;
        write_atomic(&self.key_path(), format!("{}\n", hex(&key)).as_bytes())?;
        Ok(key)
    }

    /// The job's key from `job.key`, which must be a regular file of this user that nobody
    /// else can read.
    pub fn read_key(&self) -> Result<Vec<u8>> {
        let p = self.key_path();
        let f = match fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("{} has no job key (job.key): its manifests cannot be verified (written by an older mpicr?)", self.root.display())
            }
            Err(e) => return Err(e).with_context(|| format!("opening the job key {}", p.display())),
        };
        let m = f.metadata().with_context(|| format!("checking the job key {}", p.display()))?;
        if !m.is_file() {
            bail!("the job key {} is not a regular file", p.display());
        }
        if m.uid() != crate::sys::euid() {
            bail!("the job key {} is owned by uid {}, not by you; refusing it", p.display(), m.uid());
        }
        if m.mode() & 0o077 != 0 {
            bail!("the job key {} is accessible by group or others (mode {:04o}); refusing it", p.display(), m.mode() & 0o7777);
        }
        let mut text = String::new();
        f.take(256).read_to_string(&mut text).with_context(|| format!("reading the job key {}", p.display()))?;
        unhex(text.trim()).filter(|k| k.len() == KEY_LEN).with_context(|| format!("the job key {} is malformed", p.display()))
    }

    pub fn read_job(&self) -> Result<JobInfo> {
        self.check_exists()?;
        read_json(&self.job_path())
    }

    pub fn write_job(&self, job: &JobInfo) -> Result<()> {
        write_json_atomic(&self.job_path(), job)
    }

    /// Every `epoch-*` directory, sorted by epoch.
    pub fn epochs(&self) -> Result<Vec<EpochEntry>> {
        let mut out = Vec::new();
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.root.display())),
        };
        let key = self.read_key();
        for entry in rd {
            let entry = entry?;
            let name = entry.file_name();
            let Some(epoch) = parse_epoch_name(&name.to_string_lossy()) else { continue };
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let state = self.epoch_state(epoch, &key);
            out.push(EpochEntry { epoch, dir: entry.path(), state });
        }
        out.sort_by_key(|e| e.epoch);
        Ok(out)
    }

    fn epoch_state(&self, epoch: u64, key: &Result<Vec<u8>>) -> EpochState {
        let mp = self.manifest_path(epoch);
        match read_bounded(&mp) {
            Ok(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) if m.epoch != epoch => EpochState::Corrupt(format!("it names epoch {} instead of {epoch}", m.epoch)),
                Ok(m) => match key {
                    Err(e) => EpochState::Corrupt(format!("cannot verify it: {e:#}")),
                    Ok(key) => match m.verify(key) {
                        Ok(()) => EpochState::Complete(Box::new(m)),
                        Err(e) => EpochState::Corrupt(e.to_string()),
                    },
                },
                Err(e) => EpochState::Corrupt(e.to_string()),
            },
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => EpochState::Corrupt(format!("cannot read it: {e}")),
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
        let complete: Vec<u64> = epochs.iter().filter(|e| matches!(e.state, EpochState::Complete(_))).map(|e| e.epoch).collect();
        let list = || {
            if complete.is_empty() {
                "there is no complete epoch".to_string()
            } else {
                format!("complete epochs: {}", complete.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))
            }
        };
        let pick = match requested {
            Some(k) => k,
            None => {
                let newest = *complete.last().with_context(|| format!("{} holds no complete epoch to restart from", self.root.display()))?;
                for e in epochs.iter().filter(|e| e.epoch > newest) {
                    if let EpochState::Corrupt(why) = &e.state {
                        crate::elog!(
                            "mpicr: warning: skipping epoch {}: its manifest ({}) is corrupt: {why}; using epoch {newest}",
                            e.epoch,
                            self.manifest_path(e.epoch).display()
                        );
                    }
                }
                newest
            }
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

    /// Writes the manifest of an epoch, signed with `key` (atomically).
    pub fn write_manifest(&self, m: &Manifest, key: &[u8]) -> Result<()> {
        let mut m = m.clone();
        m.sign(key);
        write_json_atomic(&self.manifest_path(m.epoch), &m)
    }

    /// Commits an epoch: everything written so far reaches the disk, then the signed manifest
    /// (atomically); the epoch now exists. `latest` follows; failing to update it only earns a
    /// warning (restart picks epochs by their manifests, not by the link).
    pub fn commit(&self, m: &Manifest, key: &[u8]) -> Result<()> {
        crate::sys::syncfs(&self.epoch_dir(m.epoch)).with_context(|| format!("syncing the images of epoch {}", m.epoch))?;
        self.write_manifest(m, key)?;
        if let Err(e) = self.set_latest(m.epoch) {
            crate::elog!("mpicr: warning: epoch {} is committed, but {e:#}", m.epoch);
        }
        Ok(())
    }

    pub fn set_latest(&self, epoch: u64) -> Result<()> {
        let link = self.latest_link();
        let tmp = self.root.join(format!(".latest.tmp-{}", random_suffix()?));
        std::os::unix::fs::symlink(epoch_name(epoch), &tmp).with_context(|| format!("creating {}", tmp.display()))?;
        if let Err(e) = fs::rename(&tmp, &link) {
            let _ = fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("updating {}", link.display()));
        }
        Ok(())
    }

    /// Marks an epoch as abandoned (it keeps no manifest): its images are removed first (they
    /// may be what filled the disk), then the reason goes to `FAILED`.
    pub fn mark_failed(&self, epoch: u64, reason: &str) {
        self.remove_images(epoch);
        if let Err(e) = write_atomic(&self.epoch_dir(epoch).join("FAILED"), format!("{reason}\n").as_bytes()) {
            crate::elog!("mpicr: warning: cannot record why epoch {epoch} failed: {e:#}");
        }
    }

    /// Removes the rank directories (the images) of an epoch.
    fn remove_images(&self, epoch: u64) {
        let Ok(rd) = fs::read_dir(self.epoch_dir(epoch)) else { return };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("rank-") && e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }

    /// Removes the images left by epochs that never got a manifest (failed, or interrupted by
    /// the end of a job); each keeps its `FAILED` note. Called before a new checkpoint, when no
    /// other checkpoint of this directory can be in progress.
    pub fn prune_incomplete(&self) -> Result<()> {
        for e in self.epochs()? {
            if let EpochState::Incomplete(why) = e.state {
                match why {
                    Some(_) => self.remove_images(e.epoch),
                    None => self.mark_failed(e.epoch, "interrupted: no manifest was written"),
                }
            }
        }
        Ok(())
    }
}

/// Creates `dir` and its missing parents (mode 0700); `dir` itself ends up 0700 whatever the
/// umask. An existing `dir` must be a real directory (not a link) of this user.
pub fn private_dir_all(dir: &Path) -> Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {
            if m.uid() != crate::sys::euid() {
                bail!("{} is owned by uid {}, not by you; refusing to use it", dir.display(), m.uid());
            }
            if m.mode() & 0o7777 == DIR_MODE {
                return Ok(());
            }
        }
        Ok(_) => bail!("{} exists and is not a directory", dir.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        Err(e) => return Err(e).with_context(|| format!("checking {}", dir.display())),
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).with_context(|| format!("setting the mode of {}", dir.display()))
}

/// Makes everything under `dir` private: directories 0700, files 0600 (links are left alone).
/// For what other programs (CRIU, the shim) wrote into an image directory.
pub fn tighten_tree(dir: &Path) -> Result<()> {
    let m = fs::symlink_metadata(dir).with_context(|| format!("checking {}", dir.display()))?;
    if !m.is_dir() {
        return Ok(());
    }
    if m.mode() & 0o7777 != DIR_MODE {
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).with_context(|| format!("setting the mode of {}", dir.display()))?;
    }
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            tighten_tree(&e.path())?;
        } else if t.is_file() {
            let mode = e.metadata()?.mode() & 0o7777;
            if mode != FILE_MODE {
                fs::set_permissions(e.path(), fs::Permissions::from_mode(FILE_MODE)).with_context(|| format!("setting the mode of {}", e.path().display()))?;
            }
        }
    }
    Ok(())
}

fn random_suffix() -> Result<String> {
    let mut r = [0u8; 8];
    crate::sys::random_bytes(&mut r).context("drawing a temporary name")?;
    Ok(hex(&r))
}

/// The contents of a file, refused above [`MAX_JSON_BYTES`].
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let f = fs::File::open(path)?;
    let mut out = Vec::new();
    f.take(MAX_JSON_BYTES + 1).read_to_end(&mut out)?;
    if out.len() as u64 > MAX_JSON_BYTES {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("larger than {} bytes", MAX_JSON_BYTES)));
    }
    Ok(out)
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let bytes = read_bounded(path).with_context(|| format!("reading {}", path.display()))?;
    parse_json(&bytes).with_context(|| format!("{} is corrupt", path.display()))
}

/// Parses JSON bytes from outside (a file of the checkpoint directory).
pub fn parse_json<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T> {
    Ok(serde_json::from_slice(bytes)?)
}

/// Writes `value` as JSON to `path` (mode 0600) through a temporary file and a rename.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Writes `bytes` to `path` (mode 0600 whatever the umask): a temporary of a random name next
/// to it, created with `O_CREAT|O_EXCL|O_NOFOLLOW` (a planted file or link makes it fail instead
/// of being written through), synced, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().context("path without a file name")?.to_string_lossy().into_owned();
    let tmp = dir.join(format!(".{name}.tmp-{}", random_suffix()?));
    let mut created = false;
    let res = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(FILE_MODE).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&tmp)?;
        created = true;
        f.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if res.is_err() && created {
        let _ = fs::remove_file(&tmp);
    }
    res.with_context(|| format!("writing {}", path.display()))
}

/// Moves every entry of directory `from` into `to` (on the same file system), replacing what
/// `to` has of the same name.
pub fn move_entries(from: &Path, to: &Path) -> Result<()> {
    for e in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e.with_context(|| format!("reading {}", from.display()))?;
        let dest = to.join(e.file_name());
        fs::rename(e.path(), &dest).with_context(|| format!("moving {} to {}", e.path().display(), dest.display()))?;
    }
    Ok(())
}

/// Reads a whole file through `update`; returns its length.
fn read_through(path: &Path, mut update: impl FnMut(&[u8])) -> Result<u64> {
    let mut f = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // Large reads: fewer syscalls, and BLAKE3 hashes many 1 KiB chunks of one buffer at once (SIMD).
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        update(&buf[..n]);
    }
    Ok(total)
}

/// SHA-256 of a file: what manifests of mpicr versions before BLAKE3 list.
pub fn sha256_file(path: &Path) -> Result<(u64, String)> {
    let mut h = Sha256::new();
    let total = read_through(path, |b| h.update(b))?;
    Ok((total, hex(&h.finalize())))
}

/// BLAKE3 of a file: the checksum of image files. Cryptographic like SHA-256 (the signed
/// manifest authenticates the images through it) and several times faster per core, which a
/// restart pays before the program runs again.
pub fn blake3_file(path: &Path) -> Result<(u64, String)> {
    let mut h = blake3::Hasher::new();
    let total = read_through(path, |b| {
        h.update(b);
    })?;
    Ok((total, h.finalize().to_hex().to_string()))
}

/// The manifest entry of a file as mpicr writes it now (BLAKE3).
pub fn file_sum(path: &Path, name: String) -> Result<FileSum> {
    let (bytes, blake3) = blake3_file(path)?;
    Ok(FileSum { name, bytes, sha256: String::new(), blake3 })
}

/// Whether a file matches its manifest entry, by the algorithm the entry was written with.
pub fn file_matches(path: &Path, f: &FileSum) -> Result<bool> {
    let (bytes, sum, want) = if !f.blake3.is_empty() {
        let (b, s) = blake3_file(path)?;
        (b, s, &f.blake3)
    } else if !f.sha256.is_empty() {
        let (b, s) = sha256_file(path)?;
        (b, s, &f.sha256)
    } else {
        bail!("the manifest lists no checksum (of a known algorithm) for {}", path.display());
    };
    Ok(bytes == f.bytes && sum == *want)
}

/// Checksums of every file in a rank directory except logs, sorted by name.
/// Completes a rank's directory of an epoch: writes its `rank.json`, makes everything in it
/// private (CRIU and the shim wrote under their own umask) and on stable storage before the
/// coordinator commits the manifest, and returns the rank's manifest entry with the checksums.
pub fn seal_rank_dir(rdir: &Path, meta: &RankMeta, started: std::time::Instant) -> Result<RankManifest> {
    write_json_atomic(&rdir.join("rank.json"), meta)?;
    tighten_tree(rdir)?;
    // The writeback and the checksums (which read the page cache) overlap.
    let (synced, files) = std::thread::scope(|s| {
        let sync = s.spawn(|| crate::sys::syncfs(rdir));
        let files = checksum_dir(rdir);
        (sync.join().unwrap_or_else(|_| Err(std::io::Error::other("the syncing thread panicked"))), files)
    });
    synced.with_context(|| format!("syncing the images in {}", rdir.display()))?;
    let files = files?;
    Ok(RankManifest {
        rank: meta.rank,
        host: meta.host.clone(),
        pid: meta.pid,
        bytes: files.iter().map(|f| f.bytes).sum(),
        files,
        renewals_left: meta.agent_hello.as_ref().and_then(|h| h.renewals_left),
        drained_msgs: 0,
        drained_bytes: 0,
        state_bytes: 0,
        dump_us: started.elapsed().as_micros() as u64,
        agent_timings: vec![],
    })
}

pub fn checksum_dir(dir: &Path) -> Result<Vec<FileSum>> {
    let mut out = Vec::new();
    checksum_into(dir, "", &mut out)?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The data an app-mode program saved (`app/`, any depth) is listed as `app/...` names.
fn checksum_into(dir: &Path, prefix: &str, out: &mut Vec<FileSum>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let t = entry.file_type()?;
        if t.is_dir() && (name == APP_DATA_DIR || !prefix.is_empty()) {
            checksum_into(&entry.path(), &format!("{prefix}{name}/"), out)?;
            continue;
        }
        if !t.is_file() || (prefix.is_empty() && (name.ends_with(".log") || name.starts_with('.'))) {
            continue;
        }
        out.push(file_sum(&entry.path(), format!("{prefix}{name}"))?);
    }
    Ok(())
}

/// The directory of a rank's epoch that an app-mode program saves its data into.
pub const APP_DATA_DIR: &str = "app";

/// A name of the manifest: a plain file name, or a path under `app/` of plain components.
fn is_listed_name(name: &str) -> bool {
    match name.split_once('/') {
        Some((APP_DATA_DIR, rest)) => rest.split('/').all(is_plain_file_name),
        Some(_) => false,
        None => is_plain_file_name(name),
    }
}

/// Checks a rank directory against its manifest entry; the error names the first bad file.
/// Each listed name must be a plain name of a regular file. (A restart defers the page files:
/// `verify_rank_dir_but_pages`.)
#[cfg(test)]
pub fn verify_rank_dir(dir: &Path, expected: &[FileSum]) -> Result<()> {
    let deferred = verify_rank_dir_but_pages(dir, expected)?;
    verify_files(dir, &deferred)
}

/// `verify_rank_dir` for everything CRIU or mpicr parses (image metadata, `rank.json`, the
/// shim's state, compressed pages): checked now. The raw page files (`pages-N.img`), which
/// CRIU only copies into the restored memory, are checked to exist and returned: a restart
/// checksums them while CRIU restores, and lets the program run only once they match.
pub fn verify_rank_dir_but_pages(dir: &Path, expected: &[FileSum]) -> Result<Vec<FileSum>> {
    let mut deferred = Vec::new();
    for f in expected {
        if !is_listed_name(&f.name) {
            bail!("the manifest lists an invalid image file name {:?} for {}", f.name, dir.display());
        }
        let p = dir.join(&f.name);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_file() => {}
            Ok(_) => bail!("image file {} is not a regular file", p.display()),
            Err(_) => bail!("image file {} is missing", p.display()),
        }
        if is_raw_pages(&f.name) {
            deferred.push(f.clone());
        } else {
            verify_files(dir, std::slice::from_ref(f))?;
        }
    }
    Ok(deferred)
}

/// Checksums the listed files of `dir` (checked to be regular files before).
pub fn verify_files(dir: &Path, files: &[FileSum]) -> Result<()> {
    for f in files {
        let p = dir.join(&f.name);
        if !file_matches(&p, f)? {
            bail!("image file {} is corrupt (checksum mismatch)", p.display());
        }
    }
    Ok(())
}

/// CRIU's page contents: `pages-N.img`.
fn is_raw_pages(name: &str) -> bool {
    name.strip_prefix("pages-").and_then(|r| r.strip_suffix(".img")).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
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
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
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
            pmi_version: None,
            mpi_library: None,
            renew_strategy: None,
            mpicr_version: "0".into(),
        }
    }

    /// Rank 0's manifest entry listing `files`, the rest empty.
    pub fn rank_manifest(files: Vec<FileSum>) -> RankManifest {
        RankManifest {
            rank: 0,
            host: "h".into(),
            pid: 1,
            bytes: 0,
            files,
            renewals_left: None,
            drained_msgs: 0,
            drained_bytes: 0,
            state_bytes: 0,
            dump_us: 0,
            agent_timings: vec![],
        }
    }

    pub fn rank_meta(epoch: u64) -> RankMeta {
        RankMeta {
            format: FORMAT,
            job_id: "j1".into(),
            epoch,
            rank: 0,
            size: 1,
            host: "h".into(),
            pid: 1,
            tids: vec![],
            pidns: false,
            init_dir: None,
            lower_env: vec![],
            launcher_vars: vec![],
            sockets: vec![],
            pipes: vec![],
            next_generation: 0,
            agent: false,
            agent_hello: None,
            app: None,
            parent_epoch: None,
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
            mpi_back_us: None,
            timings: vec![],
            rank_info: vec![],
            mac: None,
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
        let key = d.new_key().unwrap();
        d.commit(&manifest(1), &key).unwrap();
        d.commit(&manifest(2), &key).unwrap();
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

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    fn am_root() -> bool {
        crate::sys::euid() == 0
    }

    /// A checkpoint directory with a key and `epochs` signed manifests.
    fn signed(tag: &str, epochs: u64) -> (CkptDir, Vec<u8>) {
        let d = CkptDir::new(tempdir(tag));
        d.write_job(&job()).unwrap();
        let key = d.new_key().unwrap();
        for e in 1..=epochs {
            private_dir_all(&d.rank_dir(e, 0)).unwrap();
            d.commit(&manifest(e), &key).unwrap();
        }
        (d, key)
    }

    #[test]
    fn everything_written_is_private_whatever_the_umask() {
        let root = tempdir("perm").join("ckpt");
        // SAFETY: umask is process-wide; other tests only get wider temporary files.
        let old = unsafe { libc::umask(0) };
        let d = CkptDir::new(&root);
        d.secure(true).unwrap();
        d.write_job(&job()).unwrap();
        let key = d.new_key().unwrap();
        private_dir_all(&d.rank_dir(1, 0)).unwrap();
        fs::write(d.rank_dir(1, 0).join("pages-1.img"), b"memory").unwrap();
        fs::create_dir(d.rank_dir(1, 0).join("sub")).unwrap();
        d.commit(&manifest(1), &key).unwrap();
        private_dir_all(&d.epoch_dir(2)).unwrap();
        d.mark_failed(2, "x");
        // SAFETY: restores the mask saved above.
        unsafe { libc::umask(old) };
        tighten_tree(&d.rank_dir(1, 0)).unwrap();
        assert_eq!(mode(&root), 0o700);
        for p in [d.job_path(), d.key_path(), d.manifest_path(1), d.rank_dir(1, 0).join("pages-1.img"), d.epoch_dir(2).join("FAILED")] {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
        for p in [d.epoch_dir(1), d.rank_dir(1, 0), d.rank_dir(1, 0).join("sub")] {
            assert_eq!(mode(&p), 0o700, "{}", p.display());
        }
        // No temporaries left behind.
        assert!(fs::read_dir(&root).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with('.')));
        fs::remove_dir_all(root.parent().unwrap()).unwrap();
    }

    #[test]
    fn an_existing_readable_directory_is_tightened() {
        let root = tempdir("tight");
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        CkptDir::new(&root).secure(false).unwrap();
        assert_eq!(mode(&root), 0o700);
        // A checkpoint directory too; a directory holding other things keeps its mode.
        let d = CkptDir::new(&root);
        d.write_job(&job()).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o750)).unwrap();
        d.secure(false).unwrap();
        assert_eq!(mode(&root), 0o700);
        fs::remove_file(d.job_path()).unwrap();
        fs::write(root.join("notes.txt"), b"").unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        d.secure(true).unwrap();
        assert_eq!(mode(&root), 0o755);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn unsafe_directories_are_refused() {
        let base = tempdir("unsafe");
        let open = base.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = format!("{:#}", CkptDir::new(&open).secure(false).unwrap_err());
        assert!(e.contains("writable by group or others") && e.contains("open") && !e.contains('\n'), "{e}");
        let missing = base.join("missing");
        let e = format!("{:#}", CkptDir::new(&missing).secure(false).unwrap_err());
        assert!(e.contains("does not exist"), "{e}");
        let file = base.join("file");
        fs::write(&file, b"").unwrap();
        assert!(format!("{:#}", CkptDir::new(&file).secure(true).unwrap_err()).contains("not a directory"));
        if am_root() {
            let theirs = base.join("theirs");
            fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let e = format!("{:#}", CkptDir::new(&theirs).secure(true).unwrap_err());
            assert!(e.contains("owned by uid 65534") && e.contains("theirs"), "{e}");
            // A link planted by another user, even to a directory of ours.
            let mine = base.join("mine");
            fs::create_dir(&mine).unwrap();
            let link = base.join("link");
            std::os::unix::fs::symlink(&mine, &link).unwrap();
            std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
            let e = format!("{:#}", CkptDir::new(&link).secure(false).unwrap_err());
            assert!(e.contains("symbolic link owned by uid 65534"), "{e}");
            // Nor may rank directories inside belong to someone else.
            std::os::unix::fs::chown(&mine, Some(65534), Some(65534)).unwrap();
            assert!(format!("{:#}", private_dir_all(&mine).unwrap_err()).contains("owned by uid 65534"));
        }
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn writes_replace_planted_links_instead_of_following_them() {
        let (d, _) = signed("plant", 0);
        let victim = d.root.join("victim");
        fs::write(&victim, b"precious").unwrap();
        fs::remove_file(d.job_path()).unwrap();
        std::os::unix::fs::symlink(&victim, d.job_path()).unwrap();
        d.write_job(&job()).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(fs::symlink_metadata(d.job_path()).unwrap().is_file());
        // FAILED too (it used to be written with a plain fs::write).
        fs::create_dir_all(d.epoch_dir(4)).unwrap();
        std::os::unix::fs::symlink(&victim, d.epoch_dir(4).join("FAILED")).unwrap();
        d.mark_failed(4, "boom");
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        fs::remove_dir_all(&d.root).unwrap();
    }

    #[test]
    fn forged_or_modified_manifests_are_refused() {
        let (d, key) = signed("forge", 2);
        assert_eq!(d.select_epoch(None).unwrap().epoch, 2);
        // Modified: one field changed, signature kept.
        let text = fs::read_to_string(d.manifest_path(2)).unwrap().replace("\"total_bytes\": 10", "\"total_bytes\": 11");
        fs::write(d.manifest_path(2), text).unwrap();
        let e = format!("{:#}", d.select_epoch(Some(2)).unwrap_err());
        assert!(e.contains("epoch 2") && e.contains("signature does not match"), "{e}");
        // Forged: no signature at all.
        write_json_atomic(&d.manifest_path(2), &manifest(2)).unwrap();
        let e = format!("{:#}", d.select_epoch(Some(2)).unwrap_err());
        assert!(e.contains("not signed"), "{e}");
        // Signed with another key.
        let mut m = manifest(2);
        m.sign(&[9u8; KEY_LEN]);
        write_json_atomic(&d.manifest_path(2), &m).unwrap();
        assert!(format!("{:#}", d.select_epoch(Some(2)).unwrap_err()).contains("signature does not match"));
        // The newest is unusable: the older one is used.
        assert_eq!(d.select_epoch(None).unwrap().epoch, 1);
        // A key others can read is refused, and so is a missing one.
        fs::set_permissions(d.key_path(), fs::Permissions::from_mode(0o644)).unwrap();
        let e = format!("{:#}", d.select_epoch(None).unwrap_err());
        assert!(e.contains("no complete epoch"), "{e}");
        assert!(format!("{:#}", d.read_key().unwrap_err()).contains("accessible by group or others"));
        fs::remove_file(d.key_path()).unwrap();
        assert!(format!("{:#}", d.read_key().unwrap_err()).contains("has no job key"));
        // A correctly signed manifest still verifies with the right key.
        let mut m = manifest(1);
        m.sign(&key);
        m.verify(&key).unwrap();
        fs::remove_dir_all(&d.root).unwrap();
    }

    #[test]
    fn manifest_file_names_must_be_plain() {
        let key = [1u8; KEY_LEN];
        for bad in ["../../etc/passwd", "a/b", "..", ".", "", "x\0y"] {
            let mut m = manifest(1);
            m.rank_info.push(rank_manifest(vec![FileSum { name: bad.into(), bytes: 0, ..Default::default() }]));
            m.sign(&key);
            let e = m.verify(&key).unwrap_err();
            assert!(e.to_string().contains("invalid file name"), "{bad:?}: {e}");
            let dir = tempdir("names");
            let e = format!("{:#}", verify_rank_dir(&dir, &m.rank_info[0].files).unwrap_err());
            assert!(e.contains("invalid image file name"), "{e}");
            fs::remove_dir_all(&dir).unwrap();
        }
        let mut m = manifest(1);
        m.ranks = 0;
        m.sign(&key);
        assert!(m.verify(&key).is_err());
    }

    #[test]
    fn failed_epochs_lose_their_images_and_keep_the_reason() {
        let (d, _) = signed("failed", 1);
        for e in [2, 3] {
            private_dir_all(&d.rank_dir(e, 0)).unwrap();
            fs::write(d.rank_dir(e, 0).join("pages-1.img"), b"big").unwrap();
        }
        d.mark_failed(2, "rank 0: No space left on device");
        assert!(!d.rank_dir(2, 0).exists());
        assert_eq!(fs::read_to_string(d.epoch_dir(2).join("FAILED")).unwrap(), "rank 0: No space left on device\n");
        // Epoch 3 was interrupted (no manifest, no FAILED): pruned before the next checkpoint.
        d.prune_incomplete().unwrap();
        assert!(!d.rank_dir(3, 0).exists());
        assert!(fs::read_to_string(d.epoch_dir(3).join("FAILED")).unwrap().contains("interrupted"));
        // The complete epoch keeps its images.
        assert!(d.rank_dir(1, 0).exists());
        assert_eq!(d.next_epoch().unwrap(), 4);
        fs::remove_dir_all(&d.root).unwrap();
    }

    #[test]
    fn a_latest_link_failure_leaves_the_epoch_complete() {
        let (d, key) = signed("latest", 0);
        // `latest` is a non-empty directory: renaming the new link over it fails.
        fs::create_dir_all(d.latest_link().join("x")).unwrap();
        private_dir_all(&d.epoch_dir(1)).unwrap();
        d.commit(&manifest(1), &key).unwrap();
        assert!(!d.epoch_dir(1).join("FAILED").exists());
        assert_eq!(d.select_epoch(None).unwrap().epoch, 1);
        assert!(fs::read_dir(&d.root).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with(".latest")));
        fs::remove_dir_all(&d.root).unwrap();
    }

    #[test]
    fn checksums_detect_corruption() {
        let root = tempdir("sum");
        fs::write(root.join("pages-1.img"), b"abc").unwrap();
        fs::write(root.join("dump.log"), b"log").unwrap();
        let sums = checksum_dir(&root).unwrap();
        assert_eq!(sums.len(), 1);
        assert_eq!(sums[0].blake3, "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85");
        assert!(sums[0].sha256.is_empty());
        verify_rank_dir(&root, &sums).unwrap();
        // Manifests of earlier versions list SHA-256, which still verifies; no checksum is refused.
        let old = FileSum { sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into(), blake3: String::new(), ..sums[0].clone() };
        verify_rank_dir(&root, std::slice::from_ref(&old)).unwrap();
        let bad_old = FileSum { sha256: "ba".repeat(32), ..old.clone() };
        assert!(verify_rank_dir(&root, &[bad_old]).unwrap_err().to_string().contains("corrupt"));
        let none = FileSum { sha256: String::new(), ..old };
        assert!(format!("{:#}", verify_rank_dir(&root, &[none]).unwrap_err()).contains("no checksum"));
        assert!(is_raw_pages("pages-1.img") && is_raw_pages("pages-12.img"));
        assert!(!is_raw_pages("pages-.img") && !is_raw_pages("pages-1.img.zst") && !is_raw_pages("pagemap-1.img") && !is_raw_pages("pages-x.img"));
        fs::write(root.join("pages-1.img"), b"abd").unwrap();
        assert!(verify_rank_dir(&root, &sums).unwrap_err().to_string().contains("corrupt"));
        fs::remove_dir_all(&root).unwrap();
    }

    /// By hand (prints, asserts nothing timed): `cargo test --release -p mpicr-cli --lib --
    /// --ignored checksum_rates --nocapture`. What each algorithm costs per MiB of image.
    #[test]
    #[ignore]
    fn checksum_rates() {
        let root = tempdir("rates");
        let p = root.join("pages-1.img");
        let data: Vec<u8> = (0..256u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        fs::write(&p, &data).unwrap();
        for (name, f) in [("sha256", sha256_file as fn(&Path) -> Result<(u64, String)>), ("blake3", blake3_file)] {
            let best = (0..3)
                .map(|_| {
                    let t = std::time::Instant::now();
                    f(&p).unwrap();
                    t.elapsed()
                })
                .min()
                .unwrap();
            println!("{name}: 256 MiB in {best:?}: {:.0} MB/s", data.len() as f64 / best.as_secs_f64() / 1e6);
        }
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
