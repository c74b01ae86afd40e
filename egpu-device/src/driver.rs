//! The CUDA driver layer: finding the driver, listing the GPUs, and turning driver results into
//! typed errors.
//!
//! See the [crate documentation](crate#the-driver-layers) for the raw → checked → safe layering.
//! This module holds the checked layer (`check`, one function through which every `CUresult`
//! passes) and the first safe types on top of it.
//!
//! cudarc loads `libcuda.so.1` lazily and panics when the library or one of its symbols is
//! missing. This module therefore probes the library first and runs every query under
//! [`std::panic::catch_unwind`], so that callers see a [`DriverError`], never a panic. (The
//! default panic hook may still print cudarc's message to stderr before it is caught, and a
//! binary built with `panic = "abort"` cannot catch it at all; the probe keeps both cases to a
//! driver that loads but lacks a symbol.)

use std::ffi::{CStr, c_char, c_int};
use std::fmt;
use std::panic::{self, UnwindSafe};

use cudarc::driver::sys::{self, CUdevice, CUdevice_attribute, CUresult};

/// An error from the CUDA driver layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DriverError {
    /// The CUDA driver library could not be loaded: there is no NVIDIA driver on this machine, or
    /// it is not on the loader path.
    #[error("the CUDA driver library `libcuda.so.1` could not be loaded")]
    LibraryNotFound,

    /// A driver call returned an error.
    #[error("`{call}` failed with {name} ({code})")]
    Call {
        /// The driver function, such as `cuInit`.
        call: &'static str,
        /// The numeric `CUresult`, such as 100.
        code: i32,
        /// The name of the `CUresult`, such as `CUDA_ERROR_NO_DEVICE`, from `cuGetErrorName`
        /// where the driver answers it.
        name: String,
    },

    /// A raw driver handle handed to egpu was null where a live object is needed (the
    /// raw-handle constructors of [`crate::raw`]).
    #[error("a null `{handle}` was given where a live one is needed")]
    NullHandle {
        /// The handle's type, such as `CUcontext`.
        handle: &'static str,
    },

    /// The driver bindings panicked, typically because the loaded driver lacks a symbol; the
    /// panic was caught.
    #[error("the CUDA driver bindings panicked: {message}")]
    BindingsPanicked {
        /// The panic message.
        message: String,
    },

    /// A map's memory is mapped into another GPU already ([`crate::maps::HostMappedMap`]): two
    /// GPUs' atomics on one word of mapped host memory are not atomic with each other, so a map
    /// that kernels on several GPUs update needs a part per GPU
    /// ([`crate::maps::MappedParts`]).
    #[error(
        "the map is mapped into GPU {other} already, and GPU {gpu}'s atomics on its words would \
         not be atomic with GPU {other}'s: give each GPU a part of its own (`MappedParts`)"
    )]
    MappedIntoAnotherGpu {
        /// The GPU (device ordinal) the map was to be mapped into.
        gpu: i32,
        /// The GPU it is mapped into.
        other: i32,
    },
}

impl DriverError {
    /// The `CUresult` code of a failed driver call, or `None` for the other errors.
    pub fn code(&self) -> Option<i32> {
        match self {
            Self::Call { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// One GPU as the CUDA driver describes it.
///
/// Its [`Display`](fmt::Display) is one line, for logs and test output:
/// `NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver CUDA 13.0)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// The device ordinal, as passed to `cuDeviceGet` (0 for the first GPU).
    pub ordinal: i32,
    /// The device name, such as `NVIDIA H200`.
    pub name: String,
    /// The compute capability as (major, minor), such as (9, 0).
    #[doc(alias = "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")]
    #[doc(alias = "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")]
    pub compute_capability: (u32, u32),
    /// The number of streaming multiprocessors.
    #[doc(alias = "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")]
    pub sm_count: u32,
    /// The total device memory in bytes.
    #[doc(alias = "cuDeviceTotalMem")]
    pub total_memory: u64,
    /// The CUDA version the driver supports, encoded as by `cuDriverGetVersion`
    /// (`1000 * major + 10 * minor`, so 13000 is CUDA 13.0).
    #[doc(alias = "cuDriverGetVersion")]
    pub driver_version: u32,
    /// The SMs' rated (peak) clock in kHz (0 where the driver does not say): what `%clock64`
    /// counts, which probes' waits count in.
    #[doc(alias = "CU_DEVICE_ATTRIBUTE_CLOCK_RATE")]
    pub sm_clock_khz: u32,
    /// The peak memory clock in kHz (0 where the driver does not say).
    #[doc(alias = "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE")]
    pub memory_clock_khz: u32,
    /// The global memory bus width in bits (0 where the driver does not say).
    #[doc(alias = "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH")]
    pub memory_bus_bits: u32,
}

impl GpuInfo {
    /// The PTX target name of this GPU's compute capability, such as `sm_90`.
    pub fn sm_target(&self) -> String {
        let (major, minor) = self.compute_capability;
        format!("sm_{major}{minor}")
    }

    /// The CUDA version the driver supports as (major, minor), such as (13, 0).
    pub fn driver_cuda_version(&self) -> (u32, u32) {
        (self.driver_version / 1000, self.driver_version % 1000 / 10)
    }

    /// The peak memory bandwidth in bytes per second: memory clock × bus width × 2 (double
    /// data rate), 0 where the driver does not say.
    pub fn peak_bytes_per_second(&self) -> f64 {
        f64::from(self.memory_clock_khz) * 1e3 * 2.0 * f64::from(self.memory_bus_bits) / 8.0
    }

    /// The total device memory in GiB.
    pub fn total_memory_gib(&self) -> f64 {
        self.total_memory as f64 / f64::from(1u32 << 30)
    }
}

impl fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (cuda_major, cuda_minor) = self.driver_cuda_version();
        write!(
            f,
            "{} ({}, {} SMs, {:.1} GiB, driver CUDA {cuda_major}.{cuda_minor})",
            self.name,
            self.sm_target(),
            self.sm_count,
            self.total_memory_gib(),
        )
    }
}

/// Whether this machine has a usable GPU, as [`gpu_status`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuStatus {
    /// The driver loaded and reported these GPUs (at least one).
    Found(Vec<GpuInfo>),
    /// No usable GPU.
    NotFound {
        /// Why not, in words: no driver library, no device, or the driver call that failed.
        reason: String,
    },
}

impl GpuStatus {
    /// The first GPU, if one was found.
    pub fn first(&self) -> Option<&GpuInfo> {
        match self {
            Self::Found(gpus) => gpus.first(),
            Self::NotFound { .. } => None,
        }
    }
}

impl fmt::Display for GpuStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Found(gpus) => {
                for (i, gpu) in gpus.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "GPU {}: {gpu}", gpu.ordinal)?;
                }
                Ok(())
            }
            Self::NotFound { reason } => write!(f, "no GPU: {reason}"),
        }
    }
}

/// Lists the GPUs that the CUDA driver sees.
///
/// Returns [`DriverError::LibraryNotFound`] when `libcuda.so.1` cannot be loaded, and
/// [`DriverError::Call`] when a driver call fails; on a machine with the driver but no GPU that
/// is `cuInit` failing with `CUDA_ERROR_NO_DEVICE`. It never panics: a panic of the driver
/// bindings (a missing symbol) becomes [`DriverError::BindingsPanicked`].
///
/// It calls `cuInit(0)`, which is cheap after the first time and safe to call from any thread.
#[doc(alias = "cuDeviceGetCount")]
pub fn devices() -> Result<Vec<GpuInfo>, DriverError> {
    guarded(|| {
        if !library_present() {
            return Err(DriverError::LibraryNotFound);
        }
        // SAFETY: `cuInit` takes no pointers; flags must be 0, as passed.
        check("cuInit", unsafe { sys::cuInit(0) })?;

        let mut version: c_int = 0;
        // SAFETY: `version` is a live, writable `c_int` for the duration of the call.
        check("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut version) })?;
        let driver_version = non_negative(version);

        let mut count: c_int = 0;
        // SAFETY: `count` is a live, writable `c_int` for the duration of the call.
        check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) })?;

        (0..count).map(|ordinal| device_info(ordinal, driver_version)).collect()
    })
}

/// What the driver says of GPU `ordinal` (as [`devices`] lists it): for a context already
/// opened, so the library is there and `cuInit` has run.
pub(crate) fn info(ordinal: c_int) -> Result<GpuInfo, DriverError> {
    guarded(move || {
        if !library_present() {
            return Err(DriverError::LibraryNotFound);
        }
        let mut version: c_int = 0;
        // SAFETY: `version` is a live, writable `c_int` for the duration of the call.
        check("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut version) })?;
        device_info(ordinal, non_negative(version))
    })
}

/// Says whether this machine has a usable GPU, and if not, why not.
///
/// Every failure of [`devices`] becomes [`GpuStatus::NotFound`] with a reason meant for people:
/// no driver library, a driver without devices, or the driver call that failed.
pub fn gpu_status() -> GpuStatus {
    status_from(devices())
}

/// Turns the answer of [`devices`] into a [`GpuStatus`].
fn status_from(devices: Result<Vec<GpuInfo>, DriverError>) -> GpuStatus {
    let reason = match devices {
        Ok(gpus) if !gpus.is_empty() => return GpuStatus::Found(gpus),
        Ok(_) => "the CUDA driver loaded but reports no devices".to_owned(),
        Err(DriverError::LibraryNotFound) => {
            "the CUDA driver library `libcuda.so.1` could not be loaded \
             (no NVIDIA driver on this machine)"
                .to_owned()
        }
        Err(error @ DriverError::Call { .. })
            if error.code() == Some(CUresult::CUDA_ERROR_NO_DEVICE as i32) =>
        {
            format!("the CUDA driver is installed but finds no GPU ({error})")
        }
        Err(error) => error.to_string(),
    };
    GpuStatus::NotFound { reason }
}

/// Queries one device. Must run after a successful `cuInit`.
fn device_info(ordinal: c_int, driver_version: u32) -> Result<GpuInfo, DriverError> {
    let mut device: CUdevice = 0;
    // SAFETY: `device` is a live, writable `CUdevice`; an out-of-range ordinal is reported as an
    // error, not undefined behaviour.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal) })?;

    let mut name = [0u8; 256];
    let len = c_int::try_from(name.len()).unwrap_or(c_int::MAX);
    // SAFETY: the driver writes at most `len` bytes, NUL included, into `name`, which is live and
    // `len` bytes long; `device` came from `cuDeviceGet`.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(name.as_mut_ptr().cast::<c_char>(), len, device)
    })?;
    let name = CStr::from_bytes_until_nul(&name)
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(&name).into_owned());

    let mut total_memory: usize = 0;
    // SAFETY: `total_memory` is a live, writable `usize` (the driver's `size_t`); `device` came
    // from `cuDeviceGet`.
    check("cuDeviceTotalMem", unsafe { sys::cuDeviceTotalMem_v2(&mut total_memory, device) })?;

    use CUdevice_attribute::{
        CU_DEVICE_ATTRIBUTE_CLOCK_RATE as SM_CLOCK_KHZ,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR,
        CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH as BUS_BITS,
        CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE as MEMORY_CLOCK_KHZ,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as SM_COUNT,
    };
    Ok(GpuInfo {
        ordinal,
        name: name.trim().to_owned(),
        compute_capability: (attribute(device, MAJOR)?, attribute(device, MINOR)?),
        sm_count: attribute(device, SM_COUNT)?,
        total_memory: u64::try_from(total_memory).unwrap_or(u64::MAX),
        driver_version,
        // Informational: a driver that no longer answers these leaves them unknown (0).
        sm_clock_khz: attribute(device, SM_CLOCK_KHZ).unwrap_or(0),
        memory_clock_khz: attribute(device, MEMORY_CLOCK_KHZ).unwrap_or(0),
        memory_bus_bits: attribute(device, BUS_BITS).unwrap_or(0),
    })
}

/// Reads one integer attribute of a device that came from `cuDeviceGet`.
fn attribute(device: CUdevice, attribute: CUdevice_attribute) -> Result<u32, DriverError> {
    let mut value: c_int = 0;
    // SAFETY: `value` is a live, writable `c_int`; `device` came from `cuDeviceGet`, and
    // `attribute` is a valid enumerator of the driver's attribute type.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut value, attribute, device)
    })?;
    Ok(non_negative(value))
}

/// The checked layer: turns the `CUresult` of the driver call `call` into a typed result.
///
/// The error carries the code and its name, from `cuGetErrorName` when the driver answers it and
/// from the bindings' own enumerator name otherwise.
pub(crate) fn check(call: &'static str, result: CUresult) -> Result<(), DriverError> {
    if result == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    Err(DriverError::Call { call, code: result as i32, name: error_name(result) })
}

/// The name of a `CUresult`, such as `CUDA_ERROR_NO_DEVICE`. Never panics.
pub(crate) fn error_name(result: CUresult) -> String {
    let from_driver = panic::catch_unwind(|| {
        if !library_present() {
            return None;
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: `name` is a live, writable pointer; the driver stores a pointer to a static
        // string in it, or fails for an unknown code.
        let status = unsafe { sys::cuGetErrorName(result, &mut name) };
        if status != CUresult::CUDA_SUCCESS || name.is_null() {
            return None;
        }
        // SAFETY: on success `name` points to a NUL-terminated string with static lifetime,
        // owned by the driver and never freed.
        let name = unsafe { CStr::from_ptr(name) };
        Some(name.to_string_lossy().into_owned())
    });
    from_driver.ok().flatten().unwrap_or_else(|| format!("{result:?}"))
}

/// Whether cudarc can load the driver library, so that its lazy loading will not panic.
pub(crate) fn library_present() -> bool {
    // SAFETY: this `dlopen`s the system's CUDA driver library (and closes it again), which runs
    // the library's initialisers; the driver is made to be loaded this way and no Rust invariant
    // depends on it.
    unsafe { sys::is_culib_present() }
}

/// Runs `f`, turning a panic of the driver bindings into [`DriverError::BindingsPanicked`].
pub(crate) fn guarded<T>(
    f: impl FnOnce() -> Result<T, DriverError> + UnwindSafe,
) -> Result<T, DriverError> {
    panic::catch_unwind(f).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Err(DriverError::BindingsPanicked { message })
    })
}

/// A driver integer that must not be negative, as `u32` (0 if the driver returns garbage).
fn non_negative(value: c_int) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::h200;

    #[test]
    fn gpu_info_display() {
        assert_eq!(h200().to_string(), "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver CUDA 13.0)");
        let older = GpuInfo {
            ordinal: 1,
            name: "NVIDIA GeForce RTX 4090".to_owned(),
            compute_capability: (8, 9),
            sm_count: 128,
            total_memory: 24 << 30,
            driver_version: 12040,
            sm_clock_khz: 0,
            memory_clock_khz: 0,
            memory_bus_bits: 0,
        };
        assert_eq!(
            older.to_string(),
            "NVIDIA GeForce RTX 4090 (sm_89, 128 SMs, 24.0 GiB, driver CUDA 12.4)"
        );
        assert_eq!(older.sm_target(), "sm_89");
        assert_eq!(older.driver_cuda_version(), (12, 4));
        // HBM3e: 3.131 GHz × 2 × 6144 bits; a driver that does not say, 0.
        assert_eq!((h200().peak_bytes_per_second() / 1e9).round(), 4809.0);
        assert_eq!(older.peak_bytes_per_second(), 0.0);
    }

    #[test]
    fn gpu_status_display_and_first() {
        let found = GpuStatus::Found(vec![h200()]);
        assert_eq!(found.first(), Some(&h200()));
        assert_eq!(
            found.to_string(),
            "GPU 0: NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver CUDA 13.0)"
        );
        let not_found = GpuStatus::NotFound { reason: "no driver".to_owned() };
        assert_eq!(not_found.first(), None);
        assert_eq!(not_found.to_string(), "no GPU: no driver");
    }

    #[test]
    fn check_names_the_call_and_the_error() {
        assert_eq!(check("cuInit", CUresult::CUDA_SUCCESS), Ok(()));
        let error = check("cuInit", CUresult::CUDA_ERROR_NO_DEVICE).unwrap_err();
        assert_eq!(
            error,
            DriverError::Call {
                call: "cuInit",
                code: 100,
                name: "CUDA_ERROR_NO_DEVICE".to_owned()
            }
        );
        assert_eq!(error.code(), Some(100));
        assert_eq!(error.to_string(), "`cuInit` failed with CUDA_ERROR_NO_DEVICE (100)");
    }

    #[test]
    fn status_from_every_failure() {
        assert_eq!(status_from(Ok(vec![h200()])), GpuStatus::Found(vec![h200()]));

        let GpuStatus::NotFound { reason } = status_from(Ok(vec![])) else { panic!() };
        assert!(reason.contains("no devices"), "{reason}");

        let GpuStatus::NotFound { reason } = status_from(Err(DriverError::LibraryNotFound)) else {
            panic!()
        };
        assert!(reason.contains("libcuda.so.1"), "{reason}");

        let no_device = DriverError::Call {
            call: "cuInit",
            code: 100,
            name: "CUDA_ERROR_NO_DEVICE".to_owned(),
        };
        let GpuStatus::NotFound { reason } = status_from(Err(no_device)) else { panic!() };
        assert!(reason.contains("finds no GPU"), "{reason}");
        assert!(reason.contains("CUDA_ERROR_NO_DEVICE"), "{reason}");

        let panicked =
            DriverError::BindingsPanicked { message: "Missing symbol cuInit".to_owned() };
        let GpuStatus::NotFound { reason } = status_from(Err(panicked)) else { panic!() };
        assert!(reason.contains("Missing symbol cuInit"), "{reason}");
    }

    #[test]
    fn guarded_turns_a_panic_into_an_error() {
        let result: Result<(), _> = guarded(|| panic!("Missing symbol cuFoo"));
        assert_eq!(
            result,
            Err(DriverError::BindingsPanicked { message: "Missing symbol cuFoo".to_owned() })
        );
        assert_eq!(guarded(|| Ok(7)), Ok(7));
    }

    /// Runs on every machine: without a GPU it must report why, with one it lists it.
    #[test]
    fn gpu_status_does_not_panic_here() {
        match gpu_status() {
            GpuStatus::Found(gpus) => {
                assert!(!gpus.is_empty());
                for gpu in &gpus {
                    println!("found {gpu}");
                }
            }
            GpuStatus::NotFound { reason } => {
                assert!(!reason.is_empty());
                println!("no GPU here: {reason}");
            }
        }
    }
}
