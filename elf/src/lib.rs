//! Just enough ELF64 (little-endian) to tell what a dynamic object imports and exports: its
//! `DT_SONAME`, its `DT_NEEDED` entries and its dynamic symbol table. Used by `mpicr restart
//! --mpi-lib` (is the new library of the same face, does it define every MPI function the
//! program imports?) and by the shim as a backstop when a renewal loads another library.
//! `nodelete` lifts `DF_1_NODELETE` from a copy of a library (the shim's lower half).
//! No `unsafe`, no allocation beyond the result; garbage gives an error, never a panic.

use std::collections::BTreeSet;

pub mod nodelete;

const SHT_DYNSYM: u32 = 11;
const SHT_DYNAMIC: u32 = 6;
const ET_DYN: u16 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_SONAME: u64 = 14;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;
const SHN_UNDEF: u16 = 0;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;

/// What the dynamic linker sees of an object.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dynamic {
    /// `e_type == ET_DYN` (a shared library or a PIE).
    pub shared: bool,
    pub soname: Option<String>,
    pub needed: Vec<String>,
    /// `DT_RUNPATH`, else `DT_RPATH` (as the dynamic linker prefers them), unexpanded.
    pub search_path: Vec<String>,
    /// Global or weak symbols the object defines.
    pub defined: BTreeSet<String>,
    /// Symbols it needs from elsewhere.
    pub undefined: BTreeSet<String>,
}

impl Dynamic {
    /// The MPI functions (`MPI_*`, `PMPI_*`) the object imports, sorted.
    pub fn mpi_imports(&self) -> Vec<String> {
        self.undefined.iter().filter(|s| is_mpi_name(s)).cloned().collect()
    }

    /// Of `wanted`, those this object does not define (an `MPI_X` is also satisfied by its
    /// `PMPI_X` and the other way round: libraries may define one as a weak alias of the other).
    pub fn missing<'a>(&self, wanted: impl IntoIterator<Item = &'a String>) -> Vec<String> {
        let mut out: Vec<String> = wanted
            .into_iter()
            .filter(|w| {
                let other = match w.strip_prefix('P') {
                    Some(plain) => plain.to_string(),
                    None => format!("P{w}"),
                };
                !self.defined.contains(w.as_str()) && !self.defined.contains(&other)
            })
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// `MPI_*` or `PMPI_*` (not MPIR_, MPIX_ internals).
pub fn is_mpi_name(s: &str) -> bool {
    s.starts_with("MPI_") || s.starts_with("PMPI_")
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}
fn usize_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64_at(b, at)?).ok()
}

/// A NUL-terminated string at `off` of the string table `[start, start+size)`.
fn str_at(b: &[u8], start: usize, size: usize, off: usize) -> Option<String> {
    let table = b.get(start..start.checked_add(size)?)?;
    let s = table.get(off..)?;
    let end = s.iter().position(|&c| c == 0)?;
    Some(String::from_utf8_lossy(&s[..end]).into_owned())
}

struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: usize,
    entsize: usize,
}

fn sections(b: &[u8]) -> Option<Vec<Section>> {
    let shoff = usize_at(b, 0x28)?;
    let shentsize = usize::from(u16_at(b, 0x3a)?);
    let shnum = usize::from(u16_at(b, 0x3c)?);
    if shentsize < 64 {
        return None;
    }
    let mut v = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        v.push(Section {
            kind: u32_at(b, at + 4)?,
            offset: usize_at(b, at + 0x18)?,
            size: usize_at(b, at + 0x20)?,
            link: usize::try_from(u32_at(b, at + 0x28)?).ok()?,
            entsize: usize_at(b, at + 0x38)?,
        });
    }
    Some(v)
}

/// Why a file is not a dynamic ELF64 little-endian object (the text follows the file's name).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read it: {0}")]
    Read(#[from] std::io::Error),
    #[error("not an ELF file")]
    NotElf,
    #[error("not a 64-bit little-endian ELF file")]
    NotElf64Le,
    #[error("a malformed ELF file")]
    Malformed,
    #[error("an ELF file without dynamic symbols (not a shared library)")]
    NoDynamicSymbols,
}

/// Reads `image` (a whole file). Err says why it is not a dynamic ELF64 little-endian object.
pub fn read(image: &[u8]) -> Result<Dynamic, Error> {
    if image.get(0..4) != Some(b"\x7fELF") {
        return Err(Error::NotElf);
    }
    if image.get(4) != Some(&2) || image.get(5) != Some(&1) {
        return Err(Error::NotElf64Le);
    }
    let bad = || Error::Malformed;
    let mut d = Dynamic { shared: u16_at(image, 0x10).ok_or_else(bad)? == ET_DYN, ..Dynamic::default() };
    let secs = sections(image).ok_or_else(bad)?;
    let mut has_dynsym = false;
    let (mut runpath, mut rpath) = (None, None);
    for s in &secs {
        let Some(strtab) = secs.get(s.link) else { continue };
        match s.kind {
            SHT_DYNSYM => {
                has_dynsym = true;
                let ent = if s.entsize == 0 { 24 } else { s.entsize };
                if ent < 24 {
                    return Err(bad());
                }
                for i in 1..s.size / ent {
                    let at = s.offset.checked_add(i * ent).ok_or_else(bad)?;
                    let name_off = usize::try_from(u32_at(image, at).ok_or_else(bad)?).map_err(|_| bad())?;
                    let info = *image.get(at + 4).ok_or_else(bad)?;
                    let shndx = u16_at(image, at + 6).ok_or_else(bad)?;
                    let bind = info >> 4;
                    if bind != STB_GLOBAL && bind != STB_WEAK {
                        continue;
                    }
                    let Some(name) = str_at(image, strtab.offset, strtab.size, name_off) else { continue };
                    if name.is_empty() {
                        continue;
                    }
                    if shndx == SHN_UNDEF {
                        d.undefined.insert(name);
                    } else {
                        d.defined.insert(name);
                    }
                }
            }
            SHT_DYNAMIC => {
                let mut at = s.offset;
                let end = s.offset.checked_add(s.size).ok_or_else(bad)?;
                while at.checked_add(16).ok_or_else(bad)? <= end {
                    let tag = u64_at(image, at).ok_or_else(bad)?;
                    let val = usize_at(image, at + 8).ok_or_else(bad)?;
                    match tag {
                        DT_NULL => break,
                        DT_NEEDED => d.needed.extend(str_at(image, strtab.offset, strtab.size, val)),
                        DT_SONAME => d.soname = str_at(image, strtab.offset, strtab.size, val),
                        DT_RUNPATH => runpath = str_at(image, strtab.offset, strtab.size, val),
                        DT_RPATH => rpath = str_at(image, strtab.offset, strtab.size, val),
                        _ => {}
                    }
                    at += 16;
                }
            }
            _ => {}
        }
    }
    if !has_dynsym {
        return Err(Error::NoDynamicSymbols);
    }
    d.search_path = runpath.or(rpath).map(|p| p.split(':').filter(|s| !s.is_empty()).map(String::from).collect()).unwrap_or_default();
    Ok(d)
}

/// Reads the file at `path`.
pub fn read_file(path: &std::path::Path) -> Result<Dynamic, Error> {
    let image = std::fs::read(path)?;
    read(&image)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_test_binary_and_libc() {
        let me = read_file(&std::env::current_exe().unwrap()).unwrap();
        assert!(!me.undefined.is_empty());
        assert!(me.mpi_imports().is_empty());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(read(b"").is_err());
        assert!(read(b"\x7fELF\x02\x01").is_err());
        let mut img = vec![0u8; 64];
        img[0..4].copy_from_slice(b"\x7fELF");
        img[4] = 2;
        img[5] = 1;
        img[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        img[0x3a] = 64;
        img[0x3c] = 3;
        assert!(read(&img).is_err());
        for cut in [16, 40, 63] {
            assert!(read(&img[..cut]).is_err());
        }
    }

    #[test]
    fn missing_accepts_either_name() {
        let d = Dynamic { defined: ["MPI_Send", "PMPI_Recv"].iter().map(|s| s.to_string()).collect(), ..Dynamic::default() };
        let want: Vec<String> = ["MPI_Send", "MPI_Recv", "PMPI_Send", "MPI_Comm_idup_with_info"].iter().map(|s| s.to_string()).collect();
        assert_eq!(d.missing(&want), vec!["MPI_Comm_idup_with_info".to_string()]);
    }
}
