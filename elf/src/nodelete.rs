//! Just enough ELF to find and lift `DF_1_NODELETE` in a shared object's dynamic section.
//!
//! glibc never unloads an object flagged NODELETE, and one such object keeps its whole link-map
//! namespace (and that namespace's libc and static TLS) alive for the life of the process.
//! glibc 2.34+ ships `librt.so.1` as a NODELETE stub, and the MPICH 5 wheel's `libmpi.so.12`
//! needs it. A copy with the flag cleared, loaded first into the namespace, satisfies that
//! dependency by its soname and unloads with everything else.

use crate::{u16_at, u32_at, u64_at};

const PT_DYNAMIC: u32 = 2;
const DT_NULL: i64 = 0;
const DT_RPATH: i64 = 15;
const DT_RUNPATH: i64 = 29;
const DT_FLAGS_1: i64 = 0x6fff_fffb;
const DF_1_NODELETE: u64 = 0x8;

/// What the dynamic section of an ELF64 little-endian shared object says about unloading.
#[derive(Debug, PartialEq, Eq)]
pub struct Dynamic {
    /// File offset of the DT_FLAGS_1 value, when there is one.
    flags_1_at: Option<usize>,
    pub nodelete: bool,
    /// The object has DT_RPATH or DT_RUNPATH (a copy loaded from elsewhere could resolve its
    /// own dependencies differently, e.g. through `$ORIGIN`).
    pub has_search_path: bool,
}

/// Reads the dynamic section of `image` (a whole file). `None` for anything that is not an
/// ELF64 little-endian object with a PT_DYNAMIC segment inside the file.
pub fn dynamic(image: &[u8]) -> Option<Dynamic> {
    if image.get(0..4)? != b"\x7fELF" || *image.get(4)? != 2 || *image.get(5)? != 1 {
        return None;
    }
    let phoff = usize::try_from(u64_at(image, 0x20)?).ok()?;
    let phentsize = usize::from(u16_at(image, 0x36)?);
    let phnum = usize::from(u16_at(image, 0x38)?);
    if phentsize < 56 {
        return None;
    }
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(image, ph)? != PT_DYNAMIC {
            continue;
        }
        let off = usize::try_from(u64_at(image, ph + 8)?).ok()?;
        let size = usize::try_from(u64_at(image, ph + 32)?).ok()?;
        let mut d = Dynamic { flags_1_at: None, nodelete: false, has_search_path: false };
        let mut at = off;
        while at.checked_add(16)? <= off.checked_add(size)? {
            let tag = u64_at(image, at)? as i64;
            match tag {
                DT_NULL => break,
                DT_FLAGS_1 => {
                    d.flags_1_at = Some(at + 8);
                    d.nodelete = u64_at(image, at + 8)? & DF_1_NODELETE != 0;
                }
                DT_RPATH | DT_RUNPATH => d.has_search_path = true,
                _ => {}
            }
            at += 16;
        }
        return Some(d);
    }
    None
}

/// A copy of `image` without DF_1_NODELETE, or `None` when the flag is not set.
pub fn without_nodelete(image: &[u8]) -> Option<Vec<u8>> {
    let d = dynamic(image)?;
    let at = d.flags_1_at.filter(|_| d.nodelete)?;
    let mut copy = image.to_vec();
    let flags = u64_at(&copy, at)? & !DF_1_NODELETE;
    copy[at..at + 8].copy_from_slice(&flags.to_le_bytes());
    Some(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 image: header, one PT_DYNAMIC program header, a dynamic section.
    fn image(entries: &[(i64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 0x40 + 56];
        b[0..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let dyn_off = b.len() as u64;
        b[0x40..0x44].copy_from_slice(&PT_DYNAMIC.to_le_bytes());
        b[0x48..0x50].copy_from_slice(&dyn_off.to_le_bytes());
        b[0x60..0x68].copy_from_slice(&((entries.len() as u64 + 1) * 16).to_le_bytes());
        for &(t, v) in entries.iter().chain([(DT_NULL, 0)].iter()) {
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn finds_and_clears_nodelete() {
        let img = image(&[(DT_RUNPATH, 1), (DT_FLAGS_1, DF_1_NODELETE | 1)]);
        let d = dynamic(&img).unwrap();
        assert!(d.nodelete && d.has_search_path);
        let patched = without_nodelete(&img).unwrap();
        let d2 = dynamic(&patched).unwrap();
        assert!(!d2.nodelete);
        assert_eq!(patched.len(), img.len());
        // Only the NODELETE bit changed.
        let at = d.flags_1_at.unwrap();
        assert_eq!(u64_at(&patched, at), Some(1));
        assert_eq!(&patched[..at], &img[..at]);
    }

    #[test]
    fn leaves_other_objects_alone() {
        assert_eq!(without_nodelete(&image(&[(DT_FLAGS_1, 1)])), None);
        assert_eq!(without_nodelete(&image(&[])), None);
        assert!(!dynamic(&image(&[])).unwrap().has_search_path);
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        assert_eq!(dynamic(b"not an elf"), None);
        let mut img = image(&[(DT_FLAGS_1, DF_1_NODELETE)]);
        img.truncate(0x50);
        assert_eq!(dynamic(&img), None);
        let mut huge = image(&[]);
        huge[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(dynamic(&huge), None);
    }
}
