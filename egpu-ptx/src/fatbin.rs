//! Fat binaries: the containers nvcc puts a program's GPU code in (its `.nv_fatbin` section, the
//! images given to `cuModuleLoadFatBinary`, `cuModuleLoadData` and `cuLibraryLoadData`), one
//! entry per target: PTX for a virtual architecture, a cubin for a real one. egpu instruments the
//! PTX of the entry that suits the device and loads it in the container's place.
//!
//! NVIDIA does not document the format. What this reader relies on was read off the fatbins that
//! CUDA 13.0's `nvcc` and `fatbinary` make, plain and compressed in every `--compress-mode`:
//!
//! | bytes | the container's header (16) |
//! |---|---|
//! | 0..4 | magic `0xBA55ED50` |
//! | 4..6, 6..8 | version (1), the header's size (16) |
//! | 8..16 | the bytes of the entries that follow |
//!
//! | bytes | an entry's header (64, or more: its own size says) |
//! |---|---|
//! | 0..2 | kind: 1 PTX, 2 cubin (ELF) |
//! | 4..8 | the header's size; the payload follows it |
//! | 8..16 | the payload's size, padded to 8 bytes; the next entry follows it |
//! | 16..20 | the compressed payload's size (0: not compressed) |
//! | 24..28 | the code's version: minor (2 bytes), major (2 bytes) |
//! | 28..32 | the architecture: `90` for `compute_90` or `sm_90` |
//! | 40..48 | flags: `0x2000` compressed with LZ4 (block format), `0x8000` with Zstandard |
//! | 56..64 | the uncompressed size, when compressed |
//!
//! A program's `.nv_fatbin` section holds several containers back to back ([`entries`] reads
//! them all). PTX entries end with NUL padding, which [`Entry::ptx`] drops.
//!
//! Nothing here trusts the bytes: sizes are checked against what is there, a compressed payload
//! must decompress to exactly the size its header gives, and no entry may claim more than
//! [`MAX_BYTES`] uncompressed. A fatbin that fails any check is a [`FatbinError`], and the
//! module loads as it was, uninstrumented.

use std::borrow::Cow;
use std::io::Read;

use thiserror::Error;

/// The magic number a fat binary container starts with.
pub const MAGIC: u32 = 0xBA55_ED50;
/// Bytes of a container's header.
pub const HEADER_BYTES: usize = 16;
/// Bytes of an entry's header at least.
pub const ENTRY_BYTES: usize = 64;
/// The most bytes a container spans, or an entry holds uncompressed (a program's whole GPU code
/// is far less; a larger claim is a lie).
pub const MAX_BYTES: usize = 1 << 30;

/// The flag of an entry whose payload is compressed with LZ4 (block format).
pub const FLAG_LZ4: u64 = 0x2000;
/// The flag of an entry whose payload is compressed with Zstandard.
pub const FLAG_ZSTD: u64 = 0x8000;

/// Why bytes are not a fat binary egpu can read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FatbinError {
    /// The bytes do not start with a container's magic number.
    #[error("not a fat binary (no magic number 0xba55ed50)")]
    NotFatbin,
    /// A header, or an entry's payload, does not fit in the bytes, or claims too much.
    #[error("malformed fat binary: {0}")]
    Malformed(&'static str),
    /// A compressed payload did not decompress to the size its header gives.
    #[error("a compressed payload is corrupt: {0}")]
    Corrupt(String),
    /// A PTX entry is not text.
    #[error("a PTX entry is not UTF-8 text")]
    NotText,
}

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// PTX, for a virtual architecture (`compute_90`).
    Ptx,
    /// A cubin: machine code for a real architecture (`sm_90`).
    Cubin,
    /// A kind this reader does not know.
    Other(u16),
}

/// How an entry's payload is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Not compressed.
    None,
    /// LZ4, block format (`fatbinary --compress-mode=speed`).
    Lz4,
    /// Zstandard (CUDA 13's default for PTX).
    Zstd,
}

/// One entry of a fat binary, its payload as it is in the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// What it holds.
    pub kind: Kind,
    /// The architecture, as a number: `90` for `compute_90` or `sm_90`.
    pub arch: u32,
    /// The code's version (major, minor): the PTX ISA's for PTX (`9.0`).
    pub version: (u16, u16),
    /// How its payload is compressed.
    pub compression: Compression,
    /// The payload (without the padding after a compressed one).
    pub payload: &'a [u8],
    /// The size of the payload uncompressed.
    pub size: usize,
}

impl Entry<'_> {
    /// The payload, decompressed.
    ///
    /// # Errors
    ///
    /// [`FatbinError::Corrupt`] if it does not decompress to exactly [`Entry::size`] bytes.
    pub fn data(&self) -> Result<Cow<'_, [u8]>, FatbinError> {
        let corrupt = |e: &dyn std::fmt::Display| FatbinError::Corrupt(e.to_string());
        let data = match self.compression {
            Compression::None => return Ok(Cow::Borrowed(self.payload)),
            Compression::Lz4 => {
                // LZ4 expands a byte into at most 255: a larger size is a lie, refused before
                // the decoder allocates it.
                if self.size > self.payload.len().saturating_mul(255).saturating_add(16) {
                    return Err(corrupt(&"a size beyond what LZ4 expands its payload to"));
                }
                lz4_flex::block::decompress(self.payload, self.size).map_err(|e| corrupt(&e))?
            }
            Compression::Zstd => {
                let decoder = ruzstd::decoding::StreamingDecoder::new(self.payload)
                    .map_err(|e| corrupt(&e))?;
                // Grown as it is filled: the header's size may be a lie.
                let mut out = Vec::new();
                // One byte past the size, to tell a payload that runs on from one that fits.
                decoder
                    .take(self.size as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| corrupt(&e))?;
                out
            }
        };
        if data.len() != self.size {
            return Err(FatbinError::Corrupt(format!(
                "{} bytes, where the header says {}",
                data.len(),
                self.size
            )));
        }
        Ok(Cow::Owned(data))
    }

    /// The PTX of a PTX entry, without the NUL padding after it.
    ///
    /// # Errors
    ///
    /// What [`Entry::data`] returns, or [`FatbinError::NotText`].
    pub fn ptx(&self) -> Result<String, FatbinError> {
        let data = self.data()?;
        let end = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let text = std::str::from_utf8(&data[..end]).map_err(|_| FatbinError::NotText)?;
        Ok(text.to_owned())
    }
}

/// The `N` bytes at `at`.
fn bytes_at<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], FatbinError> {
    b.get(at..at.saturating_add(N))
        .and_then(|s| s.try_into().ok())
        .ok_or(FatbinError::Malformed("a header runs past the end"))
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, FatbinError> {
    bytes_at(b, at).map(u16::from_le_bytes)
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, FatbinError> {
    bytes_at(b, at).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, FatbinError> {
    bytes_at(b, at).map(u64::from_le_bytes)
}

fn size_at(b: &[u8], at: usize) -> Result<usize, FatbinError> {
    usize::try_from(u64_at(b, at)?)
        .ok()
        .filter(|&v| v <= MAX_BYTES)
        .ok_or(FatbinError::Malformed("a size beyond 1 GiB"))
}

/// How many bytes the container starting at `b` spans (its header included), from its header
/// alone: give it the first [`HEADER_BYTES`] of an image known only by its address.
///
/// # Errors
///
/// [`FatbinError::NotFatbin`] without the magic number, [`FatbinError::Malformed`] for a header
/// that is cut short or claims more than [`MAX_BYTES`].
pub fn extent(b: &[u8]) -> Result<usize, FatbinError> {
    if u32_at(b, 0).map_err(|_| FatbinError::NotFatbin)? != MAGIC {
        return Err(FatbinError::NotFatbin);
    }
    let header = usize::from(u16_at(b, 6)?);
    if header < HEADER_BYTES {
        return Err(FatbinError::Malformed("a container's header under 16 bytes"));
    }
    header
        .checked_add(size_at(b, 8)?)
        .filter(|&end| end <= MAX_BYTES)
        .ok_or(FatbinError::Malformed("a container beyond 1 GiB"))
}

/// The entries of the containers in `b`, in order: one container, or several back to back (a
/// `.nv_fatbin` section's; zero padding between them is skipped).
///
/// # Errors
///
/// [`FatbinError::NotFatbin`] if `b` does not start with a container; [`FatbinError::Malformed`]
/// if a container or an entry does not fit in `b`, or an entry's sizes contradict each other.
pub fn entries(b: &[u8]) -> Result<Vec<Entry<'_>>, FatbinError> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let rest = &b[at..];
        let end = extent(rest)?;
        let container =
            rest.get(..end).ok_or(FatbinError::Malformed("a container runs past the end"))?;
        read_container(container, &mut out)?;
        at += end;
        // Containers are aligned; what is left after the last is zeros, if anything.
        while b.get(at).is_some_and(|&c| c == 0) {
            at += 1;
        }
        if at >= b.len() {
            return Ok(out);
        }
    }
}

/// The entries of one container, exactly `c`'s bytes.
fn read_container<'a>(c: &'a [u8], out: &mut Vec<Entry<'a>>) -> Result<(), FatbinError> {
    let mut at = usize::from(u16_at(c, 6)?);
    while at < c.len() {
        let e = c.get(at..).ok_or(FatbinError::Malformed("an entry runs past the end"))?;
        let header = u32_at(e, 4)? as usize;
        if header < ENTRY_BYTES || header > e.len() {
            return Err(FatbinError::Malformed("an entry's header size is impossible"));
        }
        let padded = size_at(e, 8)?;
        let payload = e
            .get(header..header.saturating_add(padded))
            .ok_or(FatbinError::Malformed("an entry's payload runs past its container"))?;
        let compressed = u32_at(e, 16)? as usize;
        let flags = u64_at(e, 40)?;
        let compression = match (flags & FLAG_LZ4 != 0, flags & FLAG_ZSTD != 0, compressed) {
            (false, false, _) => Compression::None,
            (true, false, 1..) => Compression::Lz4,
            (false, true, 1..) => Compression::Zstd,
            _ => return Err(FatbinError::Malformed("an entry's compression is contradictory")),
        };
        let (payload, size) = match compression {
            Compression::None => (payload, payload.len()),
            _ => (
                payload
                    .get(..compressed)
                    .ok_or(FatbinError::Malformed("a compressed size beyond the payload"))?,
                size_at(e, 56)?,
            ),
        };
        let kind = match u16_at(e, 0)? {
            1 => Kind::Ptx,
            2 => Kind::Cubin,
            k => Kind::Other(k),
        };
        out.push(Entry {
            kind,
            arch: u32_at(e, 28)?,
            version: (u16_at(e, 26)?, u16_at(e, 24)?),
            compression,
            payload,
            size,
        });
        at += header + padded;
    }
    Ok(())
}

/// The PTX in `b` for a device of architecture `arch` (`90` for sm_90): of the PTX entries for
/// an architecture it runs (not above its own), the newest. `None` when there is none.
///
/// # Errors
///
/// What [`entries`] and [`Entry::ptx`] return.
pub fn ptx_for(b: &[u8], arch: u32) -> Result<Option<String>, FatbinError> {
    let entries = entries(b)?;
    let best =
        entries.iter().filter(|e| e.kind == Kind::Ptx && e.arch <= arch).max_by_key(|e| e.arch);
    best.map(Entry::ptx).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fatbin_with as container;

    #[test]
    fn the_ptx_for_a_device_is_the_newest_it_runs() {
        let ptx = |v: &str| format!(".version 9.0\n.target sm_{v}\n");
        let (p80, p90, p100) = (ptx("80"), ptx("90"), ptx("100"));
        let lz4 = lz4_flex::block::compress(p90.as_bytes());
        let mut fatbin = container(&[
            (1, 80, 0, p80.as_bytes(), p80.len()),
            (2, 90, 0, b"\x7fELF", 4),
            (1, 90, FLAG_LZ4, &lz4, p90.len()),
        ]);
        // A second container, as in a program's section, after zero padding.
        fatbin.resize(fatbin.len().div_ceil(16) * 16 + 8, 0);
        fatbin.extend(container(&[(1, 100, 0, p100.as_bytes(), p100.len())]));
        assert_eq!(entries(&fatbin).map(|e| e.len()), Ok(4));
        assert_eq!(ptx_for(&fatbin, 90), Ok(Some(p90)));
        assert_eq!(ptx_for(&fatbin, 86), Ok(Some(p80)));
        assert_eq!(ptx_for(&fatbin, 120), Ok(Some(p100)));
        assert_eq!(ptx_for(&fatbin, 75), Ok(None));
        let first = container(&[(2, 90, 0, b"\x7fELF", 4)]);
        assert_eq!(extent(&first), Ok(first.len()));
    }

    #[test]
    fn lies_are_refused() {
        let text = b".version 9.0\n";
        let lz4 = lz4_flex::block::compress(text);
        let good = container(&[(1, 90, FLAG_LZ4, &lz4, text.len())]);
        assert!(ptx_for(&good, 90).is_ok());
        // The uncompressed size, too large and too small.
        for size in [text.len() + 1, text.len() - 1, MAX_BYTES + 1] {
            let lie = container(&[(1, 90, FLAG_LZ4, &lz4, size)]);
            assert!(ptx_for(&lie, 90).is_err(), "{size}");
        }
        // Both compressions at once; a container longer than its bytes; a foreign magic.
        assert!(entries(&container(&[(1, 90, FLAG_LZ4 | FLAG_ZSTD, &lz4, 13)])).is_err());
        assert!(entries(&good[..good.len() - 1]).is_err());
        assert_eq!(entries(b"\x7fELF...."), Err(FatbinError::NotFatbin));
        assert_eq!(extent(&good[..3]), Err(FatbinError::NotFatbin));
    }
}
