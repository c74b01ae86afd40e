//! The PTX a compiled module keeps: a cubin (an ELF file of GPU code) may carry the PTX it was
//! built from in its `.nv_debug_ptx_txt` section, as Triton's do. egpu instruments that PTX and
//! loads it in the cubin's place.
//!
//! Module images reach the driver as bare pointers (`cuModuleLoadData`), so [`extent`] says how
//! many bytes a cubin spans, reading no more than it has been given: start with the ELF header
//! and give it what it asks for. Nothing here trusts the image: every offset is checked.

/// The ELF magic number.
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// Bytes of an ELF64 header.
pub const HEADER_BYTES: usize = 64;
/// The section that keeps the PTX.
const PTX_SECTION: &[u8] = b".nv_debug_ptx_txt";

/// Why an image is not a cubin egpu can read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CubinError {
    /// It is not a 64-bit little-endian ELF file.
    #[error("not a 64-bit little-endian ELF file")]
    NotElf,
    /// A header or section lies outside the image, or the image is larger than egpu reads.
    #[error("malformed ELF file: {0}")]
    Malformed(&'static str),
    /// The PTX section is not text.
    #[error("the PTX section is not UTF-8 text")]
    NotText,
}

/// How far a cubin goes, from the bytes given so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// Give at least this many bytes (from the start) to learn more.
    NeedMore(usize),
    /// The whole image is this many bytes.
    Total(usize),
}

/// Images larger than this are not read (a cubin is rarely more than tens of MiB).
pub const MAX_BYTES: usize = 1 << 30;

fn u16_at(b: &[u8], at: usize) -> Result<u16, CubinError> {
    let bytes = at
        .checked_add(2)
        .and_then(|end| b.get(at..end))
        .ok_or(CubinError::Malformed("truncated"))?;
    Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, CubinError> {
    let bytes = at
        .checked_add(4)
        .and_then(|end| b.get(at..end))
        .ok_or(CubinError::Malformed("truncated"))?;
    Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
}

fn u64_at(b: &[u8], at: usize) -> Result<usize, CubinError> {
    let bytes = at
        .checked_add(8)
        .and_then(|end| b.get(at..end))
        .ok_or(CubinError::Malformed("truncated"))?;
    usize::try_from(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
        .map_err(|_| CubinError::Malformed("an offset beyond the address space"))
}

/// The section header table: its offset, the size of an entry, and their number.
fn table(b: &[u8]) -> Result<(usize, usize, usize), CubinError> {
    if b.len() < HEADER_BYTES || &b[..4] != ELF_MAGIC || b[4] != 2 || b[5] != 1 {
        return Err(CubinError::NotElf);
    }
    let (offset, size, count) = (u64_at(b, 0x28)?, u16_at(b, 0x3a)? as usize, u16_at(b, 0x3c)?);
    if count > 0 && size < 64 {
        return Err(CubinError::Malformed("section headers smaller than 64 bytes"));
    }
    Ok((offset, size, count as usize))
}

fn checked_end(offset: usize, size: usize) -> Result<usize, CubinError> {
    offset
        .checked_add(size)
        .filter(|&end| end <= MAX_BYTES)
        .ok_or(CubinError::Malformed("a part lies beyond 1 GiB"))
}

/// How many bytes the cubin starting at `b` spans, or how many more to give first. Give it the
/// ELF header ([`HEADER_BYTES`]) first.
pub fn extent(b: &[u8]) -> Result<Extent, CubinError> {
    if b.len() < HEADER_BYTES {
        return Ok(Extent::NeedMore(HEADER_BYTES));
    }
    let (offset, size, count) = table(b)?;
    let table_end = checked_end(offset, size * count)?;
    let program_end =
        checked_end(u64_at(b, 0x20)?, u16_at(b, 0x36)? as usize * u16_at(b, 0x38)? as usize)?;
    if b.len() < table_end {
        return Ok(Extent::NeedMore(table_end));
    }
    let mut end = table_end.max(program_end).max(HEADER_BYTES);
    for i in 0..count {
        let h = offset + i * size;
        const NOBITS: u32 = 8;
        if u32_at(b, h + 4)? == NOBITS {
            continue;
        }
        end = end.max(checked_end(u64_at(b, h + 0x18)?, u64_at(b, h + 0x20)?)?);
    }
    Ok(if b.len() < end { Extent::NeedMore(end) } else { Extent::Total(end) })
}

/// A section of a cubin: its name, type, link and bytes.
struct Section<'b> {
    name: &'b [u8],
    kind: u32,
    link: usize,
    bytes: &'b [u8],
}

/// The cubin's sections (none for a file without a section table), every offset checked.
fn sections(b: &[u8]) -> Result<Vec<Section<'_>>, CubinError> {
    let (offset, size, count) = table(b)?;
    checked_end(offset, size * count)?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let header = |i: usize| offset + i * size;
    const NOBITS: u32 = 8;
    let section = |i: usize| -> Result<&[u8], CubinError> {
        if u32_at(b, header(i) + 4)? == NOBITS {
            return Ok(&[]);
        }
        let (start, len) = (u64_at(b, header(i) + 0x18)?, u64_at(b, header(i) + 0x20)?);
        b.get(start..checked_end(start, len)?)
            .ok_or(CubinError::Malformed("a section beyond the image"))
    };
    let names_index = u16_at(b, 0x3e)? as usize;
    if names_index >= count {
        return Err(CubinError::Malformed("no section names"));
    }
    let names = section(names_index)?;
    (0..count)
        .map(|i| {
            let at = u32_at(b, header(i))? as usize;
            let name = names.get(at..).ok_or(CubinError::Malformed("a name beyond the names"))?;
            Ok(Section {
                name: &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())],
                kind: u32_at(b, header(i) + 4)?,
                link: u32_at(b, header(i) + 0x28)? as usize,
                bytes: section(i)?,
            })
        })
        .collect()
}

/// The PTX kept in the cubin `b` (its `.nv_debug_ptx_txt` section, whose lines ptxas ends with
/// NUL bytes), or `None` when it keeps none.
pub fn embedded_ptx(b: &[u8]) -> Result<Option<String>, CubinError> {
    let Some(kept) = sections(b)?.into_iter().find(|s| s.name == PTX_SECTION) else {
        return Ok(None);
    };
    // ptxas keeps the lines NUL-terminated.
    let text = std::str::from_utf8(kept.bytes).map_err(|_| CubinError::NotText)?;
    let mut text = text.replace('\0', "\n").trim_matches('\n').to_owned();
    text.push('\n');
    Ok(Some(text))
}

/// The registers per thread of each function of the cubin `b`, by name: what `ptxas` allotted,
/// as the `.nv.info` section's `EIATTR_REGCOUNT` attributes record it (format `EIFMT_SVAL`,
/// attribute 0x2f: the function's symbol index, then its count). Attributes of other formats are
/// stepped over; an attribute cut short ends the reading.
pub fn register_counts(b: &[u8]) -> Result<Vec<(String, u32)>, CubinError> {
    const SYMTAB: u32 = 2;
    const SVAL: u8 = 0x04;
    const REGCOUNT: u8 = 0x2f;
    const SYMBOL_BYTES: usize = 24;
    let sections = sections(b)?;
    let (Some(info), Some(symtab)) = (
        sections.iter().find(|s| s.name == b".nv.info"),
        sections.iter().find(|s| s.kind == SYMTAB),
    ) else {
        return Ok(Vec::new());
    };
    let strings = sections.get(symtab.link).map_or(&[][..], |s| s.bytes);
    let symbol = |i: usize| -> Option<String> {
        let at = i.checked_mul(SYMBOL_BYTES)?;
        let name_at = u32_at(symtab.bytes, at).ok()? as usize;
        let name = strings.get(name_at..)?;
        let name = &name[..name.iter().position(|&c| c == 0)?];
        std::str::from_utf8(name).ok().map(str::to_owned)
    };
    let (mut counts, mut at, bytes) = (Vec::new(), 0, info.bytes);
    while let (Some(&format), Some(&attribute)) = (bytes.get(at), bytes.get(at + 1)) {
        if format != SVAL {
            // NVAL, BVAL and HVAL attributes take four bytes.
            at += 4;
            continue;
        }
        let Ok(size) = u16_at(bytes, at + 2) else { break };
        let payload = at + 4;
        if attribute == REGCOUNT && size >= 8 {
            let (Ok(index), Ok(count)) = (u32_at(bytes, payload), u32_at(bytes, payload + 4))
            else {
                break;
            };
            if let Some(name) = symbol(index as usize) {
                counts.push((name, count));
            }
        }
        at = payload + size as usize;
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::cubin_with_ptx as cubin;

    #[test]
    fn the_ptx_of_a_cubin_is_found_and_its_extent_known() {
        let ptx = b".version 8.4\n.target sm_90a\n.address_size 64\n";
        let image = cubin(ptx);
        let text = std::str::from_utf8(ptx).expect("text").to_owned();
        assert_eq!(embedded_ptx(&image), Ok(Some(text)));
        // Given the header, it asks for the section table, then knows the whole.
        assert_eq!(extent(&image[..10]), Ok(Extent::NeedMore(HEADER_BYTES)));
        let Ok(Extent::NeedMore(n)) = extent(&image[..HEADER_BYTES]) else { panic!("more") };
        assert_eq!(n, image.len());
        assert_eq!(extent(&image[..n]), Ok(Extent::Total(image.len())));
        // As ptxas writes it: lines ended by NUL bytes, with NUL bytes ahead.
        let nul = cubin(b"\0\0.version 8.7\0.target sm_90a\0\0.entry k()\0{\0ret;\0}");
        let want = ".version 8.7\n.target sm_90a\n\n.entry k()\n{\nret;\n}\n";
        assert_eq!(embedded_ptx(&nul), Ok(Some(want.to_owned())));
    }

    #[test]
    fn malformed_cubins_are_refused_without_panics() {
        let image = cubin(b".version 8.4\n");
        assert_eq!(
            embedded_ptx(b"not an elf file at all, but long enough to hold a header......."),
            Err(CubinError::NotElf)
        );
        assert_eq!(extent(&[0x7f; 64]), Err(CubinError::NotElf));
        // The section table beyond any size egpu reads.
        let mut far = image.clone();
        far[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(extent(&far), Err(CubinError::Malformed(_))));
        assert!(embedded_ptx(&far).is_err());
        // A section beyond the image.
        let mut beyond = image.clone();
        let table_at = u64::from_le_bytes(image[0x28..0x30].try_into().expect("8")) as usize;
        beyond[table_at + 2 * 64 + 0x18..table_at + 2 * 64 + 0x20]
            .copy_from_slice(&(1u64 << 20).to_le_bytes());
        assert!(matches!(embedded_ptx(&beyond), Err(CubinError::Malformed(_))));
        // Names out of range, a names index out of range, text that is not UTF-8.
        let mut names = image.clone();
        names[table_at + 2 * 64..table_at + 2 * 64 + 4].copy_from_slice(&9999u32.to_le_bytes());
        assert!(matches!(embedded_ptx(&names), Err(CubinError::Malformed(_))));
        let mut index = image.clone();
        index[0x3e..0x40].copy_from_slice(&7u16.to_le_bytes());
        assert!(matches!(embedded_ptx(&index), Err(CubinError::Malformed(_))));
        let binary = cubin(&[0xff, 0xfe, 0x80]);
        assert_eq!(embedded_ptx(&binary), Err(CubinError::NotText));
        // Every truncation of a good image is refused or asks for more, and never panics.
        for len in 0..image.len() {
            let _ = embedded_ptx(&image[..len]);
            assert!(!matches!(extent(&image[..len]), Ok(Extent::Total(n)) if n > len));
        }
        // A cubin without the section keeps no PTX.
        let mut none = image.clone();
        let at = image.windows(17).position(|w| w == PTX_SECTION).expect("the name");
        none[at + 1] = b'X';
        assert_eq!(embedded_ptx(&none), Ok(None));
    }
}
