//! `--compress`: the memory pages of a staged dump (`pages-*.img`) reach the checkpoint
//! directory compressed by the `zstd` tool (level 1, every core), as `pages-*.img.zst`; the
//! manifest checksums the compressed files. A restart expands them next to the others in each
//! rank directory of the chain before CRIU reads them, and removes them once it has.
//! No zstd library is available to this build offline: the tool is run, and its absence is
//! said in one line when the job starts.

use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const SUFFIX: &str = ".zst";

/// Errors unless the `zstd` tool runs.
pub fn check_tool() -> Result<()> {
    match Command::new("zstd").arg("--version").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(s) if s.success() => Ok(()),
        _ => bail!("--compress needs the zstd tool on PATH (Debian: apt-get install zstd), which does not run here"),
    }
}

/// Whether a file of a dump is compressed on its way to the checkpoint directory.
pub fn compressible(name: &str) -> bool {
    name.starts_with("pages-") && name.ends_with(".img")
}

fn private_new(p: &Path) -> Result<fs::File> {
    let _ = fs::remove_file(p);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(crate::images::FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
        .with_context(|| format!("creating {}", p.display()))
}

/// `zstd ARGS < from > to` (`to` created private).
fn run(args: &[&str], from: &Path, to: &Path) -> Result<()> {
    let input = fs::File::open(from).with_context(|| format!("opening {}", from.display()))?;
    let out = private_new(to)?;
    let st = Command::new("zstd").args(args).stdin(Stdio::from(input)).stdout(Stdio::from(out)).stderr(Stdio::piped()).output().context("running zstd")?;
    if !st.status.success() {
        let _ = fs::remove_file(to);
        bail!("zstd {} {} failed ({}): {}", args.join(" "), from.display(), st.status, String::from_utf8_lossy(&st.stderr).trim());
    }
    Ok(())
}

/// Compresses `from` into `to` (`pages-N.img.zst`).
pub fn compress(from: &Path, to: &Path) -> Result<()> {
    run(&["-q", "-1", "-T0", "-c"], from, to)
}

/// Expands every `*.img.zst` of these rank directories next to it; returns what it wrote.
pub fn expand(dirs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut made = Vec::new();
    for d in dirs {
        for e in fs::read_dir(d).with_context(|| format!("reading {}", d.display()))?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(plain) = name.strip_suffix(SUFFIX).filter(|p| compressible(p)) else { continue };
            let to = d.join(plain);
            if let Err(err) = run(&["-q", "-d", "-c"], &e.path(), &to) {
                remove(&made);
                return Err(err);
            }
            made.push(to);
        }
    }
    Ok(made)
}

/// Removes what `expand` wrote.
pub fn remove(made: &[PathBuf]) {
    for p in made {
        let _ = fs::remove_file(p);
    }
}

/// The rank directories a restore of `rdir` reads: it and its parents (`incremental`).
pub fn chain_dirs(dir: &crate::images::CkptDir, meta: &crate::images::RankMeta) -> Vec<PathBuf> {
    let mut v = vec![dir.rank_dir(meta.epoch, meta.rank)];
    let mut next = meta.parent_epoch;
    while let Some(p) = next.filter(|_| v.len() < 10_000) {
        let d = dir.rank_dir(p, meta.rank);
        next = crate::images::read_json::<crate::images::RankMeta>(&d.join("rank.json")).ok().and_then(|m| m.parent_epoch).filter(|&q| q < p);
        v.push(d);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_go_and_come_back() {
        if check_tool().is_err() {
            return;
        }
        let d = crate::images::tests::tempdir("zst");
        let data: Vec<u8> = (0..3u32 << 18).map(|i| (i % 251) as u8).collect();
        fs::write(d.join("src"), &data).unwrap();
        compress(&d.join("src"), &d.join("pages-1.img.zst")).unwrap();
        assert!(fs::metadata(d.join("pages-1.img.zst")).unwrap().len() < data.len() as u64 / 4);
        let made = expand(std::slice::from_ref(&d)).unwrap();
        assert_eq!(made, vec![d.join("pages-1.img")]);
        assert_eq!(fs::read(d.join("pages-1.img")).unwrap(), data);
        remove(&made);
        assert!(!d.join("pages-1.img").exists());
        fs::remove_dir_all(&d).unwrap();
    }
}
