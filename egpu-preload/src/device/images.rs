//! The PTX a module image carries, read from the bare pointer the driver is given: PTX text, a
//! cubin that keeps its PTX (`.nv_debug_ptx_txt`, as Triton's do) or whose PTX Triton keeps
//! beside it in its cache ([`super::caches`]), or a fat binary (nvcc's
//! container, maybe compressed), from which the PTX for the current device's architecture is
//! taken. Every length comes from headers checked before more bytes are read.

use std::collections::BTreeMap;
use std::ffi::{CStr, c_int, c_void};
use std::sync::Mutex;

use egpu::device::cubin::{self, Extent};
use egpu::device::fatbin;
use egpu::device::image::{ImageError, ModulePtx, module_ptx, register_counts};

use super::Why;
use super::parts::CTX_GET_DEVICE;
use crate::CuResult;
use crate::real::Hook;

type AttributeFn = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult;
static ATTRIBUTE: Hook<AttributeFn> = Hook::new(c"cuDeviceGetAttribute", std::ptr::null_mut);

/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` and `_MINOR`, `CU_DEVICE_ATTRIBUTE_CLOCK_RATE`
/// (kHz).
const MAJOR: c_int = 75;
const MINOR: c_int = 76;
const CLOCK_RATE: c_int = 13;

/// The magic number of the runtime's wrapper of a fat binary (`__fatBinC_Wrapper_t`: magic,
/// version, then a pointer to the fat binary).
const WRAPPER_MAGIC: u32 = 0x4662_43B1;

/// The PTX `image` carries: its text, a cubin's `.nv_debug_ptx_txt` (or the PTX a cache keeps
/// beside it), or a fat binary's PTX for the current device.
///
/// # Errors
///
/// Why there is none: the image carries no PTX the device runs, or could not be read. The
/// module is then loaded as it came, and the summary says why.
///
/// # Safety
///
/// `image` is a module image as `cuModuleLoadData` takes: a NUL-terminated PTX text, a complete
/// ELF file or fat binary, or the runtime's wrapper of one.
pub(crate) unsafe fn ptx_of(image: *const c_void) -> Result<String, Refusal> {
    // SAFETY: every image has at least 4 bytes (a PTX text's could end sooner: stop at a NUL).
    let head: Vec<u8> = (0..4)
        .map(|i| unsafe { image.cast::<u8>().add(i).read() })
        .take_while(|&b| b != 0)
        .collect();
    let bytes: &[u8] = if head == b"\x7fELF" {
        // SAFETY: a complete ELF file, as the caller says.
        unsafe { cubin_bytes(image) }?
    } else if head == fatbin::MAGIC.to_le_bytes() {
        // SAFETY: a complete fat binary, as the caller says.
        unsafe { fatbin_bytes(image) }?
    } else if head == WRAPPER_MAGIC.to_le_bytes() {
        // SAFETY: the wrapper's third field, 8 bytes in, points to the fat binary.
        let inner = unsafe { image.cast::<u8>().add(8).cast::<*const c_void>().read_unaligned() };
        if inner.is_null() {
            return Err(unreadable("a fat binary wrapper without a fat binary"));
        }
        // SAFETY: the fat binary the wrapper points to, complete.
        unsafe { fatbin_bytes(inner) }?
    } else {
        // SAFETY: not ELF nor a fat binary: PTX text, NUL-terminated.
        unsafe { CStr::from_ptr(image.cast()) }.to_bytes()
    };
    ptx_in(bytes)
}

/// The PTX the image `bytes` carries (as [`ptx_of`]), from a file: every length checked against
/// the bytes there are ([`module_ptx`]).
///
/// # Errors
///
/// As [`ptx_of`]'s.
pub(crate) fn ptx_in(bytes: &[u8]) -> Result<String, Refusal> {
    // Only a fat binary's PTX depends on the device (the driver is asked once per such load).
    let arch = if bytes.starts_with(&fatbin::MAGIC.to_le_bytes()) { device_arch() } else { None };
    remember_registers(bytes, arch);
    match module_ptx(bytes, arch.unwrap_or(u32::MAX)) {
        Ok(ModulePtx::Ptx(ptx)) => Ok(ptx),
        // The PTX Triton keeps beside the same cubin in its cache.
        Ok(ModulePtx::CubinWithout { len }) => {
            super::caches::ptx_beside(&bytes[..len]).ok_or_else(|| {
                let detail = format!(
                    "a cubin of {len} bytes that keeps no PTX, none beside it in Triton's or \
                     Inductor's cache"
                );
                (Why::NoPtx, detail)
            })
        }
        Ok(ModulePtx::FatbinWithout) => Err(match arch {
            Some(arch) => {
                (Why::NoPtx, format!("a fat binary with no PTX for sm_{arch} (cubins only)"))
            }
            None => (Why::NoPtx, "a fat binary with no PTX (cubins only)".into()),
        }),
        Err(ImageError::Cubin(e)) => Err(unreadable(format_args!("reading the cubin: {e}"))),
        Err(ImageError::Fatbin(e)) => Err(unreadable(format_args!("reading the fat binary: {e}"))),
        Err(e) => Err(unreadable(e)),
    }
}

/// The registers per thread of the kernels of the images read, by name, from their machine
/// code: what their instrumented form keeps to (`InjectOptions::registers`), and what the
/// recording of `egpu mem` says they took without probes. The bound is for kernels copied for
/// sampled warps by default, where what does not fit spills in the sampled copy, and for every
/// kernel with `EGPU_MAXNREG=1`: measured on the H200, the `counts` set's sums spilled to local
/// memory in a grid-stride saxpy's loop cost more (2.69× its time) than the blocks per SM they
/// kept (2.01× without).
static REGISTERS: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

/// Whether every instrumented kernel is bound to its machine code's registers.
pub(crate) fn bounded() -> bool {
    std::env::var("EGPU_MAXNREG").is_ok_and(|v| v == "1")
}

/// `EGPU_DEFER_MISSES=1`: counts by page whose page is not cached run at the end of the
/// access's straight line of code, not at the access
/// ([`InjectOptions::defer_misses`](egpu::device::ptx::inject::InjectOptions::defer_misses)).
pub(crate) fn defer_misses() -> bool {
    std::env::var("EGPU_DEFER_MISSES").is_ok_and(|v| v == "1")
}

/// Remembers the registers the kernels of the image `bytes` take (a cubin's, or a fat binary's
/// cubin for `arch`).
fn remember_registers(bytes: &[u8], arch: Option<u32>) {
    let counts = register_counts(bytes, arch.unwrap_or(0));
    if !counts.is_empty() {
        REGISTERS.lock().unwrap_or_else(|p| p.into_inner()).extend(counts);
    }
}

/// The registers per thread of the kernels read so far, by name, from their machine code.
pub(crate) fn machine_registers() -> BTreeMap<String, u32> {
    REGISTERS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Why an image has no PTX to instrument: the kind, and the details.
pub(crate) type Refusal = (Why, String);

fn unreadable(detail: impl std::fmt::Display) -> Refusal {
    (Why::Unreadable, detail.to_string())
}

/// The bytes of the cubin at `image`, as long as its ELF headers say.
///
/// # Safety
///
/// `image` is a complete ELF file, which lives as long as the caller uses the bytes.
unsafe fn cubin_bytes<'a>(image: *const c_void) -> Result<&'a [u8], Refusal> {
    let mut len = cubin::HEADER_BYTES;
    loop {
        // SAFETY: `extent` asked for these bytes, which the ELF file's headers say it has.
        let bytes = unsafe { std::slice::from_raw_parts(image.cast::<u8>(), len) };
        match cubin::extent(bytes)
            .map_err(|e| unreadable(format_args!("reading the cubin: {e}")))?
        {
            Extent::NeedMore(n) if n > len => len = n,
            Extent::NeedMore(_) => return Err(unreadable("reading the cubin: its extent")),
            Extent::Total(n) => {
                // SAFETY: as many bytes as the headers say the file has.
                return Ok(unsafe { std::slice::from_raw_parts(image.cast::<u8>(), n) });
            }
        }
    }
}

/// The bytes of the fat binary at `image`, as long as its header says.
///
/// # Safety
///
/// `image` is a complete fat binary, which lives as long as the caller uses the bytes.
unsafe fn fatbin_bytes<'a>(image: *const c_void) -> Result<&'a [u8], Refusal> {
    // SAFETY: a fat binary starts with its header.
    let header = unsafe { std::slice::from_raw_parts(image.cast::<u8>(), fatbin::HEADER_BYTES) };
    let len = fatbin::extent(header)
        .map_err(|e| unreadable(format_args!("reading the fat binary: {e}")))?;
    // SAFETY: the header says the container spans `len` bytes.
    Ok(unsafe { std::slice::from_raw_parts(image.cast::<u8>(), len) })
}

/// The current context's device's architecture (`90` for sm_90), if the driver says.
fn device_arch() -> Option<u32> {
    let (major, minor) = (device_attribute(MAJOR)?, device_attribute(MINOR)?);
    u32::try_from(major * 10 + minor).ok()
}

/// The current context's device's SMs' rated clock in kHz, if the driver says: probes' waits
/// count `%clock64` cycles by it.
pub(super) fn sm_clock_khz() -> Option<u32> {
    u32::try_from(device_attribute(CLOCK_RATE)?).ok().filter(|&k| k > 0)
}

/// Attribute `which` of the current context's device, if the driver says.
fn device_attribute(which: c_int) -> Option<c_int> {
    let (get_device, attribute) = (CTX_GET_DEVICE.get_or_ask()?, ATTRIBUTE.get_or_ask()?);
    let mut device: c_int = 0;
    // SAFETY: the driver writes one device.
    if unsafe { get_device(&mut device) } != 0 {
        return None;
    }
    let mut value: c_int = 0;
    // SAFETY: the driver writes one value.
    (unsafe { attribute(&mut value, which, device) } == 0).then_some(value)
}

#[cfg(test)]
mod tests {
    use egpu::device::fatbin::FLAG_LZ4;
    use egpu::device::testing::{cubin_with_ptx, fatbin_with};

    use super::*;

    /// A module file cut short anywhere, or with any byte changed, gives the PTX or a reason:
    /// never a panic, never a read past its bytes (the file's length bounds every read).
    #[test]
    fn a_module_file_cut_short_or_changed_gives_a_reason() {
        let ptx =
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n";
        let lz4 = lz4_flex::block::compress(ptx.as_bytes());
        let images = [
            cubin_with_ptx(ptx.as_bytes()),
            fatbin_with(&[(1, 90, FLAG_LZ4, &lz4, ptx.len())]),
            fatbin_with(&[(1, 90, 0, ptx.as_bytes(), ptx.len())]),
        ];
        let (mut refused, mut read) = (0, 0);
        for image in &images {
            assert_eq!(ptx_in(image).as_deref().map(str::trim_end), Ok(ptx.trim_end()));
            for len in 0..image.len() {
                match ptx_in(&image[..len]) {
                    Ok(_) => read += 1,
                    Err(_) => refused += 1,
                }
            }
            for at in 0..image.len() {
                let mut changed = image.clone();
                changed[at] ^= 0x5a;
                // PTX or a reason: what matters is that it returns.
                let _ = ptx_in(&changed);
            }
        }
        // Cut short, a cubin or fat binary is refused (a prefix of no magic reads as text).
        assert!(refused > 0 && read < refused, "{read} read, {refused} refused");
        let (why, detail) = ptx_in(&images[0][..100]).expect_err("a cubin cut short");
        assert_eq!(why, Why::Unreadable, "{detail}");
    }
}
