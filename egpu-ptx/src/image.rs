//! A module image as the driver's loaders take it (PTX text, a cubin, or a fat binary), and the
//! PTX it carries: the one dispatch that `egpu inject` and the preloaded library share. Every
//! length is checked against the bytes given.

use crate::cubin::{self, CubinError, Extent};
use crate::fatbin::{self, FatbinError};

/// What PTX an image carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModulePtx {
    /// Its PTX: the text, a cubin's kept PTX, or a fat binary's for the architecture asked for.
    Ptx(String),
    /// A cubin (of `len` bytes, the rest of the bytes given being past its end) that keeps no
    /// PTX.
    CubinWithout {
        /// The cubin's bytes, as its headers say.
        len: usize,
    },
    /// A fat binary with no PTX a device of the architecture runs (cubins only, or PTX for
    /// newer devices).
    FatbinWithout,
}

/// Why an image could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// A cubin that is malformed or cut short.
    #[error(transparent)]
    Cubin(#[from] CubinError),
    /// A fat binary that is malformed, cut short or corrupt.
    #[error(transparent)]
    Fatbin(#[from] FatbinError),
    /// Neither a cubin nor a fat binary, and not UTF-8 text either.
    #[error("neither PTX text, a cubin nor a fat binary")]
    NotText,
}

/// The PTX the image `bytes` carries, a fat binary's for a device of architecture `arch` (`90`
/// for sm_90; `u32::MAX`: the newest). PTX text ends at its first NUL, if it has one.
///
/// # Errors
///
/// [`ImageError`] when the image cannot be read.
pub fn module_ptx(bytes: &[u8], arch: u32) -> Result<ModulePtx, ImageError> {
    if bytes.starts_with(b"\x7fELF") {
        let len = match cubin::extent(bytes)? {
            Extent::Total(n) if n <= bytes.len() => n,
            _ => return Err(CubinError::Malformed("the image is cut short").into()),
        };
        return Ok(match cubin::embedded_ptx(&bytes[..len])? {
            Some(ptx) => ModulePtx::Ptx(ptx),
            None => ModulePtx::CubinWithout { len },
        });
    }
    if bytes.starts_with(&fatbin::MAGIC.to_le_bytes()) {
        return Ok(fatbin::ptx_for(bytes, arch)?.map_or(ModulePtx::FatbinWithout, ModulePtx::Ptx));
    }
    let text = bytes.split(|&b| b == 0).next().unwrap_or_default();
    std::str::from_utf8(text).map(|t| ModulePtx::Ptx(t.to_owned())).map_err(|_| ImageError::NotText)
}

/// The registers per thread of each kernel the image `bytes` holds machine code for (a cubin's,
/// or a fat binary's cubin for architecture `arch`), by name: what the driver would run had egpu
/// not instrumented it ([`cubin::register_counts`]). Empty for PTX text, for a fat binary with
/// no cubin for `arch`, and for an image that cannot be read: it only bounds what an
/// instrumented kernel may take.
pub fn register_counts(bytes: &[u8], arch: u32) -> Vec<(String, u32)> {
    if bytes.starts_with(b"\x7fELF") {
        return cubin::register_counts(bytes).unwrap_or_default();
    }
    if !bytes.starts_with(&fatbin::MAGIC.to_le_bytes()) {
        return Vec::new();
    }
    let entries = fatbin::entries(bytes).unwrap_or_default();
    let cubin = entries.iter().find(|e| e.kind == fatbin::Kind::Cubin && e.arch == arch);
    cubin
        .and_then(|e| e.data().ok())
        .map(|data| cubin::register_counts(&data).unwrap_or_default())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cubin_with_ptx, fatbin_with};

    #[test]
    fn each_kind_of_image_gives_its_ptx_or_says_why_not() {
        let ptx = ".version 8.0\n.target sm_90\n";
        let cubin = cubin_with_ptx(ptx.as_bytes());
        assert!(
            matches!(module_ptx(&cubin, 90), Ok(ModulePtx::Ptx(p)) if p.trim_end() == ptx.trim_end())
        );
        assert!(matches!(module_ptx(&cubin[..cubin.len() - 1], 90), Err(ImageError::Cubin(_))));
        let with_ptx = fatbin_with(&[(1, 90, 0, ptx.as_bytes(), ptx.len())]);
        assert_eq!(module_ptx(&with_ptx, 90), Ok(ModulePtx::Ptx(ptx.into())));
        assert_eq!(module_ptx(&with_ptx, 80), Ok(ModulePtx::FatbinWithout));
        let cubins = fatbin_with(&[(2, 90, 0, b"\x7fELF\0\0\0\0", 8)]);
        assert_eq!(module_ptx(&cubins, 90), Ok(ModulePtx::FatbinWithout));
        assert!(matches!(module_ptx(&with_ptx[..20], 90), Err(ImageError::Fatbin(_))));
        assert_eq!(module_ptx(b"PTX\0after", 90), Ok(ModulePtx::Ptx("PTX".into())));
        assert_eq!(module_ptx(b"\xff\xfe", 90), Err(ImageError::NotText));
        // No machine code, or none readable: no register counts.
        assert!(register_counts(ptx.as_bytes(), 90).is_empty());
        assert!(register_counts(&cubins, 90).is_empty() && register_counts(&cubin, 90).is_empty());
    }
}
