//! Incremental checkpoints (`--incremental`): every dump runs CRIU with `--track-mem`, which
//! clears the kernel's soft-dirty bits of the program's pages; the next dump of the same
//! process names the last one as its parent (`--prev-images-dir`), and writes only the pages
//! dirtied since. CRIU links each rank directory to its parent (`rank-N/parent`, relative:
//! `../../epoch-K/rank-N`) and `rank.json` records `parent_epoch`; a restore follows the chain.
//!
//! Correctness rests on one rule: the parent is the epoch whose dump cleared the bits last, and
//! only while it is complete. A dump that succeeded in an epoch that then failed cleared them
//! too, but its images are gone: the next dump is full. So is the one after a failed dump (CRIU
//! may have cleared the bits before failing: the keeper forgets the parent before each dump), and
//! the first after a restart (the restored memory's bits say nothing about the image it came
//! from).
//!
//! Where the kernel lacks soft-dirty tracking (CONFIG_MEM_SOFT_DIRTY), `criu check --feature
//! mem_dirty_track` says so, and the write tracker takes over (docs/incremental.md): the agent
//! hands its keeper a userfaultfd of the program in asynchronous write-protect mode
//! (`FromAgent::WriteTracker`), and a patched CRIU (`make deps-incremental`, `.deps/criu-wt`)
//! inherits it for every dump (`CRIU_UFFD_WP=PID:FD`): it reads "written since the last dump"
//! where it would read soft-dirty bits, then registers and write-protects the program's private
//! memory again before the program runs. Without that CRIU, or without a tracker from the agent
//! (refused by the kernel, older agent), the keeper says why in one line and dumps in full.

use crate::images::{self, CkptDir, EpochState, RankMeta};
use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Whether CRIU can track dirty memory here (asked once per process).
pub fn dirty_tracking(criu: &Path) -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::process::Command::new(criu)
            .args(["check", "--feature", "mem_dirty_track"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The one line said when `--incremental` cannot be honoured.
pub fn unavailable_line(criu: &Path) -> String {
    format!(
        "mpicr: --incremental: {} reports no memory dirty tracking on this kernel (`criu check --feature mem_dirty_track`; needs CONFIG_MEM_SOFT_DIRTY), and the CRIU for write tracking is not installed (`make deps-incremental`, then `make install`): every checkpoint is a full dump",
        criu.display()
    )
}

/// The CRIU patched for write tracking (`scripts/install-criu-wt.sh`): `$MPICR_CRIU_WT`, else
/// the install prefix's (`PREFIX/libexec/mpicr/criu-wt`), else `.deps/criu-wt/criu` of the
/// source tree the mpicr binary was built in.
pub fn write_tracking_criu() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MPICR_CRIU_WT").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p)).filter(|p| crate::sys::is_executable(p));
    }
    crate::paths::installed_criu_wt().or_else(|| crate::paths::source_tree_dep("criu-wt/criu"))
}

/// Dirty tracking by userfaultfd write-protection: the patched CRIU, and the program's
/// userfaultfd once the agent sent it.
#[derive(Debug)]
pub struct WriteTrack {
    pub criu: PathBuf,
    pub uffd: Option<OwnedFd>,
    /// Why the agent sent none (the keeper said it when it came).
    pub refused: Option<String>,
    /// The missing tracker was reported.
    pub warned: bool,
}

/// What a write-tracked dump adds: the patched CRIU, `CRIU_UFFD_WP` and the descriptor with its
/// number in CRIU.
pub struct TrackedDump {
    pub criu: PathBuf,
    pub env: (String, String),
    pub fd: (OwnedFd, i32),
}

/// What one rank's keeper knows for incremental dumps.
#[derive(Debug, Default)]
pub struct Tracker {
    /// `--incremental` was asked for and CRIU can track memory (soft-dirty bits, or the write
    /// tracker).
    pub on: bool,
    /// The epoch whose dump of this process cleared the dirty bits last.
    pub last_dump: Option<u64>,
    /// Set where the kernel has no soft-dirty bits: the write tracker (see the module's note).
    pub write: Option<WriteTrack>,
}

impl Tracker {
    /// `--incremental` given: on if CRIU can track memory or the write-tracking CRIU is there,
    /// else the one line (rank 0 says it).
    pub fn new(wanted: bool, criu: Option<&Path>, rank: i32) -> Tracker {
        let (Some(c), true) = (criu, wanted) else { return Tracker::default() };
        if dirty_tracking(c) {
            return Tracker { on: true, ..Tracker::default() };
        }
        match write_tracking_criu() {
            Some(criu) => Tracker { on: true, last_dump: None, write: Some(WriteTrack { criu, uffd: None, refused: None, warned: false }) },
            None => {
                if rank == 0 {
                    crate::elog!("{}", unavailable_line(c));
                }
                Tracker::default()
            }
        }
    }

    /// The agent's answer to `WRITE_TRACK_ENV`: a userfaultfd of the program's (new) address
    /// space, or why there is none. Either way nothing is armed yet: the next dump is full.
    pub fn write_tracker(&mut self, uffd: Option<OwnedFd>, error: Option<String>) {
        let Some(w) = self.write.as_mut() else { return };
        self.last_dump = None;
        w.uffd = uffd;
        w.refused = if w.uffd.is_some() { None } else { Some(error.unwrap_or_else(|| "no descriptor came with it".into())) };
    }

    /// Whether this dump can track memory: soft-dirty, or the write tracker with its uffd.
    pub fn active(&self) -> bool {
        self.on && self.write.as_ref().is_none_or(|w| w.uffd.is_some())
    }

    /// Said once before the first full dump for want of a write tracker that never came (a
    /// refusal was said when it came).
    pub fn inactive_reason(&mut self) -> Option<String> {
        let on = self.on;
        let w = self.write.as_mut().filter(|w| on && w.uffd.is_none() && w.refused.is_none() && !w.warned)?;
        w.warned = true;
        Some("--incremental: the program sent no write tracker (an agent older than this mpicr, or a program without the shim): full dumps".into())
    }

    /// The CRIU binary, its environment and inherited descriptor for a dump of the program
    /// `pid` (`None`: the usual CRIU, nothing more). The uffd is installed in CRIU at `fd`.
    pub fn criu_for_dump(&self, pid: i32, fd: i32) -> Result<Option<TrackedDump>> {
        let Some(w) = self.write.as_ref().filter(|_| self.active()) else { return Ok(None) };
        let Some(u) = w.uffd.as_ref() else { return Ok(None) };
        let dup = u.try_clone().context("duplicating the write tracker")?;
        Ok(Some(TrackedDump { criu: w.criu.clone(), env: ("CRIU_UFFD_WP".into(), format!("{pid}:{fd}")), fd: (dup, fd) }))
    }

    /// The parent of this rank's dump of a new epoch: the last dump, while it is complete.
    pub fn parent(&self, dir: &CkptDir, rank: i32) -> Option<u64> {
        let p = self.last_dump.filter(|_| self.active())?;
        let complete = dir.epochs().ok()?.into_iter().any(|e| e.epoch == p && matches!(e.state, EpochState::Complete(_)));
        (complete && dir.rank_dir(p, rank).join("rank.json").is_file()).then_some(p)
    }

    /// CRIU's extra dump options for a dump with this parent (none when off). `staged`: the
    /// dump goes to a stage directory (`--stage-dir`), where the relative link would lead
    /// nowhere: the parent is named by its absolute path (the copy links it relatively again).
    pub fn flags(&self, parent: Option<u64>, rank: i32, staged: Option<&CkptDir>) -> Vec<String> {
        if !self.active() {
            return Vec::new();
        }
        let mut v = vec!["--track-mem".to_string()];
        if let Some(p) = parent {
            v.push("--prev-images-dir".into());
            match staged.map(|d| std::path::absolute(d.rank_dir(p, rank))) {
                Some(Ok(abs)) => v.push(abs.display().to_string()),
                _ => v.push(parent_link(p, rank)),
            }
        }
        v
    }
}

/// The parent link of a rank directory, relative to it (CRIU's `--prev-images-dir` is relative
/// to `-D`): the chain survives a moved checkpoint directory.
pub fn parent_link(parent: u64, rank: i32) -> String {
    format!("../../{}/rank-{rank}", images::epoch_name(parent))
}

/// Every epoch that `epoch`'s ranks need through their parent links (not `epoch` itself).
pub fn ancestors(dir: &CkptDir, epoch: u64) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    let mut todo = vec![epoch];
    while let Some(e) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(dir.epoch_dir(e)) else { continue };
        for r in rd.flatten() {
            if !r.file_name().to_string_lossy().starts_with("rank-") {
                continue;
            }
            let Ok(meta) = images::read_json::<RankMeta>(&r.path().join("rank.json")) else { continue };
            if let Some(p) = meta.parent_epoch.filter(|&p| p < e) {
                if out.insert(p) {
                    todo.push(p);
                }
            }
        }
    }
    out
}

/// `gone` less every epoch an epoch that stays needs (retention never breaks a chain).
pub fn spare_parents(dir: &CkptDir, all: &[u64], gone: Vec<u64>) -> Vec<u64> {
    let mut needed = BTreeSet::new();
    for &e in all.iter().filter(|e| !gone.contains(e)) {
        needed.extend(ancestors(dir, e));
    }
    gone.into_iter().filter(|e| !needed.contains(e)).collect()
}

/// Checks the chain under rank `rank` of an epoch before a restore: every parent epoch is
/// complete, its rank directory matches its manifest, and the `parent` link leads there.
/// The parents' raw page files are only checked to exist and returned, per directory, for the
/// restart to checksum while CRIU restores (as the epoch's own: `images::verify_rank_dir_but_pages`).
pub fn verify_chain(dir: &CkptDir, meta: &RankMeta, rank: i32) -> Result<Vec<(PathBuf, Vec<images::FileSum>)>> {
    let mut child = meta.clone();
    let mut seen = BTreeSet::new();
    let mut pages = Vec::new();
    while let Some(p) = child.parent_epoch {
        if p >= child.epoch || !seen.insert(p) {
            bail!("rank {rank} of epoch {} names parent epoch {p}, which cannot be its parent", child.epoch);
        }
        let link = dir.rank_dir(child.epoch, rank).join("parent");
        let target = std::fs::read_link(&link).with_context(|| format!("epoch {} is incremental, but its link {} is missing", child.epoch, link.display()))?;
        if target != Path::new(&parent_link(p, rank)) {
            bail!("{} leads to {}, not to epoch {p}", link.display(), target.display());
        }
        let m = dir.select_epoch(Some(p)).with_context(|| format!("epoch {} is incremental on epoch {p}, which is needed to restore it", child.epoch))?;
        let entry = m.rank_info.iter().find(|r| r.rank == rank).with_context(|| format!("the manifest of epoch {p} has no entry for rank {rank}"))?;
        let pdir = dir.rank_dir(p, rank);
        let deferred =
            images::verify_rank_dir_but_pages(&pdir, &entry.files).with_context(|| format!("rank {rank} of epoch {p} (parent of epoch {})", child.epoch))?;
        child = images::read_json(&pdir.join("rank.json"))?;
        pages.push((pdir, deferred));
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::tests::{job, tempdir};

    fn meta(epoch: u64, parent: Option<u64>) -> RankMeta {
        RankMeta { parent_epoch: parent, ..images::tests::rank_meta(epoch) }
    }

    /// Epochs 1..=4: 1 full, 2 on 1, 3 on 2, 4 full (a restart); all complete.
    fn chain_dir() -> (CkptDir, Vec<u8>) {
        let d = CkptDir::new(tempdir("chain"));
        d.write_job(&job()).unwrap();
        let key = d.new_key().unwrap();
        for (e, p) in [(1, None), (2, Some(1)), (3, Some(2)), (4, None)] {
            let r = d.rank_dir(e, 0);
            images::private_dir_all(&r).unwrap();
            images::write_json_atomic(&r.join("rank.json"), &meta(e, p)).unwrap();
            std::fs::write(r.join("pages-1.img"), format!("pages {e}")).unwrap();
            if let Some(p) = p {
                std::os::unix::fs::symlink(parent_link(p, 0), r.join("parent")).unwrap();
            }
            let mut m = images::tests::manifest(e);
            m.ranks = 1;
            let files = images::checksum_dir(&r).unwrap();
            m.rank_info.push(crate::images::tests::rank_manifest(files));
            d.commit(&m, &key).unwrap();
        }
        (d, key)
    }

    #[test]
    fn retention_keeps_every_parent_a_kept_epoch_needs() {
        let (d, _) = chain_dir();
        assert_eq!(ancestors(&d, 3), [1, 2].into_iter().collect());
        assert!(ancestors(&d, 4).is_empty());
        // --keep 2 keeps 3 and 4; 3 needs 2 and 1.
        assert_eq!(spare_parents(&d, &[1, 2, 3, 4], vec![1, 2]), Vec::<u64>::new());
        // --keep 1 keeps 4 alone: the chain 1-2-3 may go.
        assert_eq!(spare_parents(&d, &[1, 2, 3, 4], vec![1, 2, 3]), vec![1, 2, 3]);
        std::fs::remove_dir_all(&d.root).unwrap();
    }

    #[test]
    fn a_chain_is_verified_to_its_root() {
        let (d, _) = chain_dir();
        let pages = verify_chain(&d, &meta(3, Some(2)), 0).unwrap();
        let dirs: Vec<PathBuf> = pages.iter().map(|(d, _)| d.clone()).collect();
        assert_eq!(dirs, [d.rank_dir(2, 0), d.rank_dir(1, 0)]);
        assert!(pages.iter().all(|(d, f)| f.len() == 1 && images::verify_files(d, f).is_ok()));
        // A parent's corrupt page file is found by the deferred check, which names the file.
        std::fs::write(d.rank_dir(1, 0).join("pages-1.img"), "changed").unwrap();
        let pages = verify_chain(&d, &meta(3, Some(2)), 0).unwrap();
        let e = format!("{:#}", images::verify_files(&pages[1].0, &pages[1].1).unwrap_err());
        assert!(e.contains("epoch-000001") && e.contains("corrupt"), "{e}");
        // A parent's corrupt metadata breaks the restore of its children at once, with the epoch named.
        std::fs::write(d.rank_dir(1, 0).join("rank.json"), "{}").unwrap();
        let e = format!("{:#}", verify_chain(&d, &meta(3, Some(2)), 0).unwrap_err());
        assert!(e.contains("epoch 1") && e.contains("corrupt"), "{e}");
        // A parent gone.
        std::fs::remove_file(d.manifest_path(2)).unwrap();
        let e = format!("{:#}", verify_chain(&d, &meta(3, Some(2)), 0).unwrap_err());
        assert!(e.contains("incremental on epoch 2") && e.contains("incomplete"), "{e}");
        std::fs::remove_dir_all(&d.root).unwrap();
    }

    #[test]
    fn the_parent_is_the_last_dump_while_it_is_complete() {
        let (d, _) = chain_dir();
        let mut t = Tracker { on: true, last_dump: Some(4), write: None };
        assert_eq!(t.parent(&d, 0), Some(4));
        assert_eq!(t.flags(Some(4), 0, None), vec!["--track-mem", "--prev-images-dir", "../../epoch-000004/rank-0"]);
        assert_eq!(t.flags(None, 0, None), vec!["--track-mem"]);
        let staged = t.flags(Some(4), 0, Some(&d));
        assert!(Path::new(&staged[2]).is_absolute() && staged[2].ends_with("epoch-000004/rank-0"), "{staged:?}");
        // The last dump's epoch failed (no manifest): full dump.
        t.last_dump = Some(5);
        assert_eq!(t.parent(&d, 0), None);
        t.on = false;
        t.last_dump = Some(4);
        assert_eq!(t.parent(&d, 0), None);
        assert!(t.flags(Some(4), 0, None).is_empty());
        std::fs::remove_dir_all(&d.root).unwrap();
    }

    #[test]
    fn the_write_tracker_gates_incremental_dumps() {
        let (d, _) = chain_dir();
        let mut t = Tracker { on: true, last_dump: Some(4), write: Some(WriteTrack { criu: "criu-wt".into(), uffd: None, refused: None, warned: false }) };
        // No tracker yet: full dumps with the usual CRIU, said once.
        assert!(!t.active() && t.parent(&d, 0).is_none() && t.flags(Some(4), 0, None).is_empty());
        assert!(t.criu_for_dump(7, 10).unwrap().is_none());
        assert!(t.inactive_reason().is_some() && t.inactive_reason().is_none());
        // A tracker (any descriptor stands in for it): nothing armed yet, so the next dump is full.
        let fd: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        t.write_tracker(Some(fd), None);
        assert!(t.active() && t.last_dump.is_none());
        assert_eq!(t.flags(None, 0, None), vec!["--track-mem"]);
        let d2 = t.criu_for_dump(7, 10).unwrap().unwrap();
        assert_eq!((d2.criu, d2.env, d2.fd.1), (PathBuf::from("criu-wt"), ("CRIU_UFFD_WP".to_string(), "7:10".to_string()), 10));
        t.last_dump = Some(4);
        assert_eq!(t.parent(&d, 0), Some(4));
        // Refused (e.g. after a restore): full dumps again.
        t.write_tracker(None, Some("userfaultfd: Operation not permitted".into()));
        assert!(!t.active() && t.parent(&d, 0).is_none() && t.inactive_reason().is_none());
        std::fs::remove_dir_all(&d.root).unwrap();
    }
}
