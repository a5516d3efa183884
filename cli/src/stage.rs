//! Where a rank's dump goes and how it reaches the checkpoint directory.
//!
//! Without `--stage-dir`, CRIU writes into `DIR/epoch-E/rank-N`. With it, CRIU (and the shim's
//! `shim.state`) write into `STAGE/mpicr-JOB/epoch-E/rank-N` on fast node-local storage; the
//! program runs on as soon as the dump is done, and a thread copies the files into the
//! checkpoint directory, checksumming them on the way and again once they are on stable
//! storage there (a mismatch fails the epoch). The keeper reports its rank dumped only then,
//! so the coordinator commits the manifest only once every rank's copy is complete: an epoch
//! whose copy was interrupted has no manifest, and the previous one stays the one to restart.
//! While a copy runs, `DIR/epoch-E/rank-N/STAGED` says so (`mpicr status` shows the epoch as
//! `staged`).
//!
//! Either way the sealing (rank.json, modes, sync, checksums) runs on that thread, off the
//! keeper's event loop: the renewal of the program's MPI library needs the keeper (PMI) and
//! must not wait for it.

use crate::images::{self, CkptDir, RankManifest, RankMeta};
use crate::keeper::Ev;
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// The marker of a rank directory whose copy from the stage directory is in progress.
pub const STAGED: &str = "STAGED";

/// One keeper's way of storing its dumps.
pub struct Store {
    tx: Sender<Ev>,
    /// `STAGE/mpicr-JOB`, with `--stage-dir STAGE`.
    stage: Option<PathBuf>,
    rank: i32,
    /// `--compress`: pages are compressed on their way to the checkpoint directory.
    compress: bool,
    pub tracker: crate::incremental::Tracker,
    /// The dump being sealed on a thread of its own (`seal_in_background`).
    sealing: Option<Sealing>,
    /// A checkpoint-and-continue dump whose sealing waits until every rank of this node has
    /// dumped (`seal_when_node_dumped`).
    held: Option<Held>,
}

struct Held {
    target: Target,
    meta: RankMeta,
    started: Instant,
}

struct Sealing {
    epoch: u64,
    started: Instant,
    thread: std::thread::JoinHandle<Result<RankManifest>>,
}

/// What a checkpoint's dump of this rank needs to know about where it goes.
pub struct Target {
    /// Where CRIU and the shim write.
    pub images: PathBuf,
    /// The rank directory of the epoch in the checkpoint directory.
    pub fin: PathBuf,
}

impl Target {
    /// Removes the images' copy in the stage directory (with its epoch directory once empty);
    /// nothing for a dump written to the checkpoint directory itself.
    fn remove_stage_copy(&self) {
        if self.images != self.fin {
            let _ = fs::remove_dir_all(&self.images);
            let _ = self.images.parent().map(fs::remove_dir);
        }
    }
}

impl Store {
    /// `stage_root`: `--stage-dir`. What an earlier keeper of this rank left in the stage
    /// directory (killed during a copy) is removed.
    pub fn new(tx: Sender<Ev>, args: &crate::args::StoreArgs, job_id: &str, rank: i32, tracker: crate::incremental::Tracker) -> Result<Store> {
        if args.compress {
            crate::compress::check_tool()?;
        }
        let stage = match args.stage_dir.as_deref() {
            None => None,
            Some(root) => {
                let m = fs::metadata(root).with_context(|| format!("--stage-dir {}", root.display()))?;
                if !m.is_dir() {
                    bail!("--stage-dir {} is not a directory", root.display());
                }
                let d = root.join(format!("mpicr-{job_id}"));
                images::private_dir_all(&d)?;
                Some(d)
            }
        };
        let s = Store { tx, stage, rank, compress: args.compress, tracker, sealing: None, held: None };
        s.remove_staged();
        Ok(s)
    }

    /// Where this rank's dump of `epoch` is written. App-mode ranks save into the checkpoint
    /// directory directly (`app`).
    pub fn target(&self, dir: &CkptDir, epoch: u64, app: bool) -> Target {
        let fin = dir.rank_dir(epoch, self.rank);
        let images = match &self.stage {
            Some(s) if !app => s.join(images::epoch_name(epoch)).join(format!("rank-{}", self.rank)),
            _ => fin.clone(),
        };
        Target { images, fin }
    }

    /// `target`, created (private; a stage directory left from an earlier try is emptied).
    pub fn prepare(&self, dir: &CkptDir, epoch: u64, app: bool) -> Result<Target> {
        let t = self.target(dir, epoch, app);
        images::private_dir_all(&t.fin)?;
        if t.images != t.fin {
            if t.images.exists() {
                fs::remove_dir_all(&t.images).with_context(|| format!("removing {}", t.images.display()))?;
            }
            images::private_dir_all(&t.images)?;
        }
        Ok(t)
    }

    /// Where this rank's next dump is started ahead (`Keeper::start_dump_ahead`): beside the
    /// epochs it goes to (the stage directory's, else the checkpoint directory's), so that its
    /// images move into place by renaming, and a relative parent link (`--prev-images-dir`)
    /// means the same from both.
    pub fn ahead_dir(&self, dir: &CkptDir) -> PathBuf {
        let base = match &self.stage {
            Some(s) => s.clone(),
            None => dir.root.clone(),
        };
        base.join(".next-dump").join(format!("rank-{}", self.rank))
    }

    /// Whether dumps go to a stage directory (`--stage-dir`).
    pub fn staged(&self) -> bool {
        self.stage.is_some()
    }

    /// Seals the dump (after a copy from the stage directory) on a thread of its own, which
    /// says `Ev::Sealed` when done; `take_sealed` has its result. One at a time: the caller
    /// takes the previous one first.
    pub fn seal_in_background(&mut self, t: Target, meta: RankMeta, started: Instant) -> Result<()> {
        assert!(self.sealing.is_none(), "a dump is still being sealed");
        let tx = self.tx.clone();
        let epoch = meta.epoch;
        let compress = self.compress;
        let thread = std::thread::Builder::new()
            .name("mpicr-seal".into())
            .spawn(move || {
                let result = seal(&t, &meta, started, compress);
                t.remove_stage_copy();
                let _ = tx.send(Ev::Sealed(epoch));
                result
            })
            .with_context(|| format!("starting the thread that seals rank {}'s images", self.rank))?;
        self.sealing = Some(Sealing { epoch, started, thread });
        Ok(())
    }

    /// Holds the dump until `seal_held`: its checksums and copy would take the CPU that the
    /// dumps of this node's other ranks still need (measured, 4 ranks x 512 MiB on 2 cores:
    /// the last dump ended 290-430 ms after the first). A dump held before is dropped.
    pub fn seal_when_node_dumped(&mut self, target: Target, meta: RankMeta, started: Instant) {
        self.drop_held();
        self.held = Some(Held { target, meta, started });
    }

    /// Seals the held dump of `epoch` (`None`: whichever is held) in the background.
    pub fn seal_held(&mut self, epoch: Option<u64>) -> Result<()> {
        match self.held.take() {
            Some(h) if epoch.is_none_or(|e| e == h.meta.epoch) => self.seal_in_background(h.target, h.meta, h.started),
            other => {
                self.held = other;
                Ok(())
            }
        }
    }

    /// Drops the held dump (its checkpoint ended without it), with its stage directory.
    pub fn drop_held(&mut self) {
        if let Some(h) = self.held.take() {
            h.target.remove_stage_copy();
        }
    }

    /// The epoch whose dump is being sealed, or held to be.
    pub fn sealing_epoch(&self) -> Option<u64> {
        self.sealing.as_ref().map(|s| s.epoch).or(self.held.as_ref().map(|h| h.meta.epoch))
    }

    /// The sealed dump: its epoch, manifest (or why not) and when its dump began; `wait`: waits
    /// for a sealing still running, else only a finished one is taken.
    pub fn take_sealed(&mut self, wait: bool) -> Option<(u64, Result<RankManifest>, Instant)> {
        let s = self.sealing.take_if(|s| wait || s.thread.is_finished())?;
        let info = s.thread.join().unwrap_or_else(|p| Err(anyhow::anyhow!("internal error while sealing the images: {}", crate::keeper::panic_text(&*p))));
        Some((s.epoch, info, s.started))
    }

    /// Removes this rank's leftovers in the stage directory (at start, and when the keeper ends).
    pub fn remove_staged(&self) {
        let Some(s) = &self.stage else { return };
        let Ok(rd) = fs::read_dir(s) else { return };
        for e in rd.flatten() {
            let r = e.path().join(format!("rank-{}", self.rank));
            if r.exists() {
                let _ = fs::remove_dir_all(&r);
            }
            let _ = fs::remove_dir(e.path());
        }
        let _ = fs::remove_dir(s);
    }
}

fn seal(t: &Target, meta: &RankMeta, started: Instant, compress: bool) -> Result<RankManifest> {
    if t.images == t.fin {
        test_seal_delay(meta.epoch);
        return images::seal_rank_dir(&t.fin, meta, started);
    }
    let marker = t.fin.join(STAGED);
    images::write_atomic(&marker, format!("{}\n", t.images.display()).as_bytes())?;
    test_delay(meta.epoch);
    let copied = copy_tree(&t.images, &t.fin, meta, compress)?;
    fs::remove_file(&marker).with_context(|| format!("removing {}", marker.display()))?;
    let m = images::seal_rank_dir(&t.fin, meta, started)?;
    // What reached the checkpoint directory is what was dumped.
    for f in &m.files {
        if let Some((bytes, sum)) = copied.iter().find(|c| c.0 == f.name).map(|c| (c.1, &c.2)) {
            if bytes != f.bytes || *sum != f.blake3 {
                bail!("copying {} from the stage directory: the copy differs from the dump (checksum mismatch)", f.name);
            }
        }
    }
    Ok(m)
}

/// `MPICR_TEST_STAGE_DELAY=EPOCH:SECONDS`: the copy of that epoch waits first (tests interrupt it).
fn test_delay(epoch: u64) {
    let Ok(v) = std::env::var("MPICR_TEST_STAGE_DELAY") else { return };
    let Some((e, s)) = v.split_once(':') else { return };
    if e.parse() == Ok(epoch) {
        std::thread::sleep(Duration::from_secs(s.parse().unwrap_or(0)));
    }
}

/// Test-only: `MPICR_TEST_SEAL_DELAY=EPOCH:MILLISECONDS`: the sealing of that epoch's dump (not
/// staged) waits first, so that the program ends while it runs (a test of the commit race).
fn test_seal_delay(epoch: u64) {
    let Ok(v) = std::env::var("MPICR_TEST_SEAL_DELAY") else { return };
    let Some((e, ms)) = v.split_once(':') else { return };
    if e.parse() == Ok(epoch) {
        std::thread::sleep(Duration::from_millis(ms.parse().unwrap_or(0)));
    }
}

/// Copies every regular file of a stage rank directory (app data excepted: never staged) into
/// the checkpoint directory's, new files 0600 (pages compressed with `compress`); a `parent` link is made again, relative, from
/// `meta.parent_epoch`. Returns `(name, bytes, BLAKE3)` of each file as read from the stage.
fn copy_tree(from: &Path, to: &Path, meta: &RankMeta, compress: bool) -> Result<Vec<(String, u64, String)>> {
    let mut out = Vec::new();
    for e in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let ty = e.file_type()?;
        if ty.is_symlink() && name == "parent" {
            if let Some(p) = meta.parent_epoch {
                let link = to.join("parent");
                let _ = fs::remove_file(&link);
                std::os::unix::fs::symlink(crate::incremental::parent_link(p, meta.rank), &link).with_context(|| format!("linking {}", link.display()))?;
            }
            continue;
        }
        if !ty.is_file() {
            continue;
        }
        if compress && crate::compress::compressible(&name) {
            // Checksummed as compressed, once in the checkpoint directory (`seal_rank_dir`).
            crate::compress::compress(&e.path(), &to.join(format!("{name}{}", crate::compress::SUFFIX)))?;
            continue;
        }
        let dst = to.join(&name);
        let _ = fs::remove_file(&dst);
        let mut src = fs::File::open(e.path()).with_context(|| format!("opening {}", e.path().display()))?;
        let mut w = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(images::FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&dst)
            .with_context(|| format!("creating {}", dst.display()))?;
        let mut h = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = src.read(&mut buf).with_context(|| format!("reading {}", e.path().display()))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            w.write_all(&buf[..n]).with_context(|| format!("writing {}", dst.display()))?;
            total += n as u64;
        }
        out.push((name, total, h.finalize().to_hex().to_string()));
    }
    Ok(out)
}

/// The ranks of an epoch directory whose copy from a stage directory has not ended.
pub fn staged_ranks(epoch_dir: &Path) -> Vec<i32> {
    let Ok(rd) = fs::read_dir(epoch_dir) else { return Vec::new() };
    let mut v: Vec<i32> = rd
        .flatten()
        .filter(|e| e.path().join(STAGED).is_file())
        .filter_map(|e| e.file_name().to_string_lossy().strip_prefix("rank-").and_then(|r| r.parse().ok()))
        .collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::tests::tempdir;

    /// A checkpoint directory and a stage directory under a fresh temporary base, and rank 0's
    /// store of job `job` staging there: (base, checkpoint dir, stage root, store, its events).
    fn staged_store(name: &str, job: &str) -> (PathBuf, CkptDir, PathBuf, Store, std::sync::mpsc::Receiver<Ev>) {
        let base = tempdir(name);
        let dir = CkptDir::new(base.join("ckpt"));
        images::private_dir_all(&dir.root).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stage_root = base.join("shm");
        fs::create_dir(&stage_root).unwrap();
        let args = crate::args::StoreArgs { stage_dir: Some(stage_root.clone()), ..Default::default() };
        let s = Store::new(tx, &args, job, 0, Default::default()).unwrap();
        (base, dir, stage_root, s, rx)
    }

    #[test]
    fn a_staged_dump_is_copied_checksummed_and_removed() {
        let (base, dir, stage_root, mut s, rx) = staged_store("stage", "j1");
        let t = s.prepare(&dir, 3, false).unwrap();
        assert!(t.images.starts_with(&stage_root) && t.fin == dir.rank_dir(3, 0));
        fs::write(t.images.join("pages-1.img"), vec![7u8; 3 << 20]).unwrap();
        fs::write(t.images.join("dump.log"), b"log").unwrap();
        std::os::unix::fs::symlink("../../epoch-000002/rank-0", t.images.join("parent")).unwrap();
        let mut meta = crate::images::tests::rank_meta(3);
        meta.parent_epoch = Some(2);
        assert_eq!(staged_ranks(&dir.epoch_dir(3)), Vec::<i32>::new());
        s.seal_in_background(t, meta, Instant::now()).unwrap();
        let Ev::Sealed(woke) = rx.recv_timeout(Duration::from_secs(30)).unwrap() else { panic!() };
        assert_eq!((woke, s.sealing_epoch()), (3, Some(3)));
        let (epoch, result, _) = s.take_sealed(true).unwrap();
        let m = result.unwrap();
        assert_eq!(epoch, 3);
        let names: Vec<&str> = m.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, vec!["pages-1.img", "rank.json"]);
        assert_eq!(fs::read_link(dir.rank_dir(3, 0).join("parent")).unwrap(), PathBuf::from("../../epoch-000002/rank-0"));
        assert!(!dir.rank_dir(3, 0).join(STAGED).exists());
        assert!(!stage_root.join("mpicr-j1").join("epoch-000003").exists(), "the stage copy is removed");
        s.remove_staged();
        assert!(!stage_root.join("mpicr-j1").exists());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_held_dump_is_sealed_only_when_its_node_has_dumped_and_dropped_with_its_checkpoint() {
        let (base, dir, _stage_root, mut s, rx) = staged_store("held", "j2");
        let held = |s: &mut Store, epoch: u64| {
            let t = s.prepare(&dir, epoch, false).unwrap();
            fs::write(t.images.join("pages-1.img"), vec![epoch as u8; 4096]).unwrap();
            let images = t.images.clone();
            s.seal_when_node_dumped(t, crate::images::tests::rank_meta(epoch), Instant::now());
            images
        };
        // Dropped with its checkpoint: the staged images go, nothing is sealed.
        let first = held(&mut s, 4);
        assert_eq!(s.sealing_epoch(), Some(4), "a held dump keeps the next dump from starting ahead");
        s.seal_held(Some(3)).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "another epoch's word seals nothing");
        s.drop_held();
        assert!(!first.exists() && s.sealing_epoch().is_none());
        // Sealed on its node's word.
        held(&mut s, 5);
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        s.seal_held(Some(5)).unwrap();
        let Ev::Sealed(woke) = rx.recv_timeout(Duration::from_secs(30)).unwrap() else { panic!() };
        let (epoch, result, _) = s.take_sealed(true).unwrap();
        assert_eq!((woke, epoch), (5, 5));
        assert!(result.unwrap().files.iter().any(|f| f.name == "pages-1.img"));
        assert!(dir.rank_dir(5, 0).join("pages-1.img").is_file() && !dir.rank_dir(4, 0).join("pages-1.img").exists());
        s.remove_staged();
        fs::remove_dir_all(&base).unwrap();
    }
}
