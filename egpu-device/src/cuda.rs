//! The safe layer's owning types: a GPU's context, loaded modules, device memory, launches.
//!
//! Each type owns one driver object and releases it when dropped. Every driver call goes
//! through the checked layer ([`DriverError`]). [`Gpu::open`], which probes the library first,
//! and the calls that load, allocate, launch and release run under the same panic guard as
//! [`devices`](crate::devices), so a missing driver is an error, never a panic. The other calls
//! (making the context current, copies, synchronising, mapping host memory) are reached only
//! through a [`Gpu`], whose driver loaded and initialised; a driver so old that it lacks one of
//! their symbols would still make the bindings panic there.
//!
//! ```no_run
//! use egpu_device::cuda::{Arg, Gpu};
//!
//! let gpu = Gpu::open(0)?;
//! let module = gpu.load_ptx(".version 8.0\n.target sm_90\n.address_size 64\n\
//!     .visible .entry k(.param .u64 out) { .reg .b64 %a; ld.param.u64 %a, [out];\n\
//!     st.global.u32 [%a], 42; ret; }")?;
//! let out = gpu.alloc(4)?;
//! gpu.launch(&module.kernel("k")?, (1, 1, 1), (1, 1, 1), &[Arg::Ptr(&out)])?;
//! let mut bytes = [0u8; 4];
//! out.read(&mut bytes)?;
//! assert_eq!(u32::from_le_bytes(bytes), 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::any::Any;
use std::ffi::{CString, c_uint, c_void};
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::{
    self, CUcontext, CUdevice, CUdeviceptr, CUfunction, CUfunction_attribute, CUjit_option,
    CUmodule, CUstream,
};

use crate::driver::{DriverError, GpuInfo, check, guarded, library_present};

/// One GPU with a context: its primary context, retained while this value lives
/// ([`Gpu::open`]), or a context another library owns, borrowed ([`Gpu::from_raw_context`],
/// and with the `cudarc-interop` feature `Gpu::from_cudarc`).
#[derive(Debug)]
pub struct Gpu {
    pub(crate) ordinal: i32,
    pub(crate) device: CUdevice,
    pub(crate) context: CUcontext,
    /// Whether this value retained the primary context, and releases it when dropped.
    pub(crate) owned: bool,
    /// What keeps a borrowed context alive while this value lives (a cudarc context's `Arc`).
    #[expect(dead_code, reason = "held, never read: dropped with the value")]
    pub(crate) keep: KeepAlive,
}

/// What a [`Gpu`] that borrows its context holds to keep it alive, if anything.
#[derive(Default)]
pub(crate) struct KeepAlive(pub(crate) Option<Arc<dyn Any + Send + Sync>>);

// The value held is never used, only dropped with the `Gpu`: a panic cannot leave it half-made.
impl std::panic::RefUnwindSafe for KeepAlive {}
impl std::panic::UnwindSafe for KeepAlive {}

impl fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "KeepAlive(..)" } else { "KeepAlive(None)" })
    }
}

// SAFETY: a CUDA context may be used from any thread once made current there, which every method
// does first (`bind`); the handle itself is a plain pointer the driver synchronises.
unsafe impl Send for Gpu {}
// SAFETY: as above; the driver's context functions are thread-safe.
unsafe impl Sync for Gpu {}

/// The driver's JIT refused a PTX module: the driver's error, with the JIT's log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error}{}", if log.is_empty() { String::new() } else { format!("\n{log}") })]
pub struct JitError {
    /// The driver's error.
    pub error: DriverError,
    /// The JIT's error log (ptxas's messages, with the offending line numbers).
    pub log: String,
}

impl From<DriverError> for JitError {
    fn from(error: DriverError) -> JitError {
        JitError { error, log: String::new() }
    }
}

/// A loaded module, unloaded when dropped (unless it was borrowed, [`Module::from_raw`], or
/// handed over, [`Module::into_raw`]).
pub struct Module<'g> {
    pub(crate) gpu: &'g Gpu,
    pub(crate) module: CUmodule,
    pub(crate) info_log: String,
    /// Whether this value unloads the module when dropped.
    pub(crate) owned: bool,
}

// SAFETY: a module handle belongs to its context, not to a thread; every use makes the context
// current on the calling thread first, and the driver synchronises its module functions.
unsafe impl Send for Module<'_> {}
// SAFETY: as above; `Module` has no interior state besides the handle and the log.
unsafe impl Sync for Module<'_> {}

impl fmt::Debug for Module<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module").field("info_log", &self.info_log).finish_non_exhaustive()
    }
}

/// A kernel of a loaded module.
#[derive(Debug, Clone, Copy)]
pub struct Kernel<'m> {
    pub(crate) function: CUfunction,
    /// The hash of its mangled name ([`egpu_ebpf::kernel_id`]).
    pub(crate) id: u64,
    pub(crate) _module: std::marker::PhantomData<&'m ()>,
}

/// Device memory, freed when dropped (unless it was borrowed, [`DeviceBuffer::from_raw`]).
#[derive(Debug)]
pub struct DeviceBuffer<'g> {
    pub(crate) gpu: &'g Gpu,
    pub(crate) ptr: CUdeviceptr,
    pub(crate) len: usize,
    /// Whether this value frees the memory when dropped.
    pub(crate) owned: bool,
}

/// Host memory pinned and mapped into the GPU; unregistered when dropped.
#[derive(Debug)]
pub struct HostMapping<'g> {
    gpu: &'g Gpu,
    host: *mut u8,
    device: CUdeviceptr,
}

impl HostMapping<'_> {
    /// The address GPU code uses for the memory.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }
}

impl Drop for HostMapping<'_> {
    fn drop(&mut self) {
        let _ = self.gpu.bind();
        let host = self.host;
        let _ = guarded(|| {
            // SAFETY: `host` was registered by `map_host`, and is unregistered once, here.
            check("cuMemHostUnregister", unsafe { sys::cuMemHostUnregister(host.cast()) })
        });
    }
}

/// One kernel argument.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// A device buffer's address.
    Ptr(&'a DeviceBuffer<'a>),
    /// A 64-bit value (also a raw device address).
    U64(u64),
    /// A 32-bit value.
    U32(u32),
    /// A float.
    F32(f32),
    /// A parameter passed by value, as its bytes: a struct, such as a tensor map
    /// (`CUtensorMap`, 128 bytes) for a `__grid_constant__` parameter.
    Bytes(&'a [u8]),
}

const LOG_BYTES: usize = 1 << 16;

impl Gpu {
    /// Retains the primary context of GPU `ordinal`.
    pub fn open(ordinal: i32) -> Result<Gpu, DriverError> {
        guarded(move || {
            if !library_present() {
                return Err(DriverError::LibraryNotFound);
            }
            // SAFETY: `cuInit` takes no pointers; flags must be 0.
            check("cuInit", unsafe { sys::cuInit(0) })?;
            let mut device: CUdevice = 0;
            // SAFETY: `device` is a live, writable CUdevice.
            check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal) })?;
            let mut context: CUcontext = std::ptr::null_mut();
            // SAFETY: `context` is live and writable; `device` came from `cuDeviceGet`.
            check("cuDevicePrimaryCtxRetain", unsafe {
                sys::cuDevicePrimaryCtxRetain(&mut context, device)
            })?;
            let gpu = Gpu { ordinal, device, context, owned: true, keep: KeepAlive::default() };
            gpu.bind()?;
            Ok(gpu)
        })
    }

    /// What the driver says of this GPU: name, compute capability, SMs, memory, driver version,
    /// memory clock and bus width.
    pub fn info(&self) -> Result<GpuInfo, DriverError> {
        crate::driver::info(self.ordinal)
    }

    /// Makes the context current on the calling thread.
    pub(crate) fn bind(&self) -> Result<(), DriverError> {
        // SAFETY: `context` is the retained primary context, alive while `self` is.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.context) })
    }

    /// Loads a PTX module through `cuModuleLoadDataEx`, with the JIT's logs captured.
    pub fn load_ptx(&self, ptx: &str) -> Result<Module<'_>, JitError> {
        let image = CString::new(ptx).map_err(|_| JitError {
            error: DriverError::Call {
                call: "cuModuleLoadDataEx",
                code: 218,
                name: "CUDA_ERROR_INVALID_PTX (a NUL byte inside the PTX)".into(),
            },
            log: String::new(),
        })?;
        self.load_bytes(image.as_bytes_with_nul())
    }

    /// Loads a module image as the driver takes it, through `cuModuleLoadDataEx`: a cubin or a
    /// fat binary (`fatbin::extent` and `cubin::extent` say whether one is whole), or PTX text
    /// ending in a NUL.
    ///
    /// # Errors
    ///
    /// [`JitError`] when the image is not one of those, whole, or the driver refuses it.
    pub fn load_image(&self, image: &[u8]) -> Result<Module<'_>, JitError> {
        let whole = match image.get(..4) {
            Some(b"\x7fELF") => matches!(
                crate::cubin::extent(image),
                Ok(crate::cubin::Extent::Total(n)) if n <= image.len()
            ),
            Some(m) if m == crate::fatbin::MAGIC.to_le_bytes() => {
                crate::fatbin::extent(image).is_ok_and(|n| n <= image.len())
            }
            _ => image.last() == Some(&0),
        };
        if !whole {
            let error = DriverError::Call {
                call: "cuModuleLoadDataEx",
                code: 200,
                name: "CUDA_ERROR_INVALID_IMAGE (not a whole cubin, fat binary or PTX text)".into(),
            };
            return Err(JitError { error, log: String::new() });
        }
        self.load_bytes(image)
    }

    /// Loads `image`, whole (checked by the caller).
    fn load_bytes(&self, image: &[u8]) -> Result<Module<'_>, JitError> {
        guarded(move || {
            self.bind()?;
            let mut info = vec![0u8; LOG_BYTES];
            let mut error = vec![0u8; LOG_BYTES];
            let mut options = [
                CUjit_option::CU_JIT_INFO_LOG_BUFFER,
                CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
                CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                CUjit_option::CU_JIT_LOG_VERBOSE,
            ];
            // The driver reads scalar option values from the pointer slots themselves.
            let mut values: [*mut c_void; 5] = [
                info.as_mut_ptr().cast(),
                std::ptr::without_provenance_mut(LOG_BYTES),
                error.as_mut_ptr().cast(),
                std::ptr::without_provenance_mut(LOG_BYTES),
                std::ptr::without_provenance_mut(1),
            ];
            let mut module: CUmodule = std::ptr::null_mut();
            // SAFETY: `image` is a whole image (the callers check); `options` and `values` have the same
            // length, given as the count; the log buffers are live and as large as said, and
            // outlive the call; `module` is live and writable.
            let result = unsafe {
                sys::cuModuleLoadDataEx(
                    &mut module,
                    image.as_ptr().cast(),
                    options.len() as c_uint,
                    options.as_mut_ptr(),
                    values.as_mut_ptr(),
                )
            };
            let text = |buf: &[u8]| {
                let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                String::from_utf8_lossy(&buf[..end]).trim().to_owned()
            };
            match check("cuModuleLoadDataEx", result) {
                Ok(()) => Ok(Ok(Module { gpu: self, module, info_log: text(&info), owned: true })),
                Err(e) => Ok(Err(JitError { error: e, log: text(&error) })),
            }
        })?
    }

    /// Allocates `len` bytes of device memory, zeroed.
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer<'_>, DriverError> {
        guarded(move || {
            self.bind()?;
            let mut ptr: CUdeviceptr = 0;
            // SAFETY: `ptr` is live and writable.
            check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) })?;
            let buffer = DeviceBuffer { gpu: self, ptr, len, owned: true };
            // SAFETY: `ptr` is a fresh allocation of at least `len` bytes.
            check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(ptr, 0, len.max(1)) })?;
            Ok(buffer)
        })
    }

    /// Launches `kernel` and waits for it to finish.
    pub fn launch(
        &self,
        kernel: &Kernel<'_>,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[Arg<'_>],
    ) -> Result<(), DriverError> {
        self.launch_on_raw(std::ptr::null_mut(), kernel, grid, block, args)?;
        self.synchronize()
    }

    /// Launches `kernel` on `stream` (a stream of this context, or null: the default stream),
    /// without waiting.
    pub(crate) fn launch_on_raw(
        &self,
        stream: CUstream,
        kernel: &Kernel<'_>,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[Arg<'_>],
    ) -> Result<(), DriverError> {
        let mut values: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::Ptr(b) => b.ptr,
                Arg::U64(v) => v,
                Arg::U32(v) => u64::from(v),
                Arg::F32(v) => u64::from(v.to_bits()),
                Arg::Bytes(_) => 0,
            })
            .collect();
        let (function, id) = (kernel.function, kernel.id);
        guarded(move || {
            self.bind()?;
            // Each parameter's bytes start at its slot; on a little-endian machine the low
            // bytes of the u64 are the 32-bit value. The driver copies a by-value parameter's
            // bytes from where its pointer points.
            let mut params: Vec<*mut c_void> = values
                .iter_mut()
                .zip(args)
                .map(|(v, a)| match a {
                    Arg::Bytes(bytes) => bytes.as_ptr().cast_mut().cast(),
                    _ => (v as *mut u64).cast(),
                })
                .collect();
            let mut outcome = sys::CUresult::CUDA_SUCCESS;
            let call = || {
                // SAFETY: `function` belongs to a module alive for 'm; `params` holds one
                // pointer per kernel parameter, each to a live value of at least the
                // parameter's size; `stream` is null or a stream of this context (the callers'
                // contract).
                outcome = unsafe {
                    sys::cuLaunchKernel(
                        function,
                        grid.0,
                        grid.1,
                        grid.2,
                        block.0,
                        block.1,
                        block.2,
                        0,
                        stream,
                        params.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                };
                outcome as i32
            };
            // Host probes on launches see egpu's own (see `hooks`).
            crate::hooks::launch(id, function as u64, grid, block, call);
            check("cuLaunchKernel", outcome)
        })
    }

    /// Pins `len` bytes of host memory at `ptr` and maps them into the GPU's address space
    /// (`cuMemHostRegister`, portable and device-mapped), until the mapping is dropped.
    ///
    /// # Safety
    /// The memory must stay allocated, and not be unmapped, while the mapping lives: GPU code
    /// may access it until then.
    pub unsafe fn map_host(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<HostMapping<'_>, DriverError> {
        self.bind()?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the caller keeps `len` bytes at `ptr` alive while the mapping lives.
        check("cuMemHostRegister", unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, flags) })?;
        // Unregistered again by its drop if the device pointer cannot be had.
        let mut mapping = HostMapping { gpu: self, host: ptr, device: 0 };
        // SAFETY: `mapping.device` is writable; `ptr` was registered just above.
        check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut mapping.device, ptr.cast(), 0)
        })?;
        Ok(mapping)
    }

    /// Waits for all work of the context.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: no arguments; the context is current.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if !self.owned {
            // A borrowed context: its owner releases it (after `keep`, dropped next).
            return;
        }
        let _ = guarded(|| {
            // SAFETY: releases the retain made in `open`; nothing of this Gpu outlives it
            // (modules and buffers borrow it).
            check("cuDevicePrimaryCtxRelease", unsafe {
                sys::cuDevicePrimaryCtxRelease_v2(self.device)
            })
        });
    }
}

impl<'g> Module<'g> {
    /// The kernel called `name`.
    pub fn kernel(&self, name: &str) -> Result<Kernel<'_>, DriverError> {
        let name = CString::new(name).map_err(|_| DriverError::Call {
            call: "cuModuleGetFunction",
            code: 500,
            name: "CUDA_ERROR_NOT_FOUND (a NUL byte inside the name)".into(),
        })?;
        let id = egpu_ebpf::kernel_id(&name.to_string_lossy());
        guarded(move || {
            let mut function: CUfunction = std::ptr::null_mut();
            // SAFETY: `function` is live and writable; `module` is loaded; `name` is
            // NUL-terminated.
            check("cuModuleGetFunction", unsafe {
                sys::cuModuleGetFunction(&mut function, self.module, name.as_ptr())
            })?;
            Ok(Kernel { function, id, _module: std::marker::PhantomData })
        })
    }

    /// The JIT's information log (registers, spills), verbose.
    pub fn info_log(&self) -> &str {
        &self.info_log
    }
}

impl Kernel<'_> {
    /// Registers per thread and local memory bytes per thread.
    pub fn resources(&self) -> Result<(u32, u32), DriverError> {
        let attribute = |a: CUfunction_attribute| {
            let mut v = 0;
            // SAFETY: `v` is live and writable; `function` is a loaded kernel.
            check("cuFuncGetAttribute", unsafe {
                sys::cuFuncGetAttribute(&mut v, a, self.function)
            })
            .map(|()| u32::try_from(v).unwrap_or(0))
        };
        Ok((
            attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
        ))
    }
}

impl Drop for Module<'_> {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = self.gpu.bind();
        // SAFETY: `module` was loaded by `load_ptx` and its kernels borrow `self`.
        let _ = guarded(|| check("cuModuleUnload", unsafe { sys::cuModuleUnload(self.module) }));
    }
}

impl DeviceBuffer<'_> {
    /// The device address.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn fits(&self, len: usize, call: &'static str) -> Result<(), DriverError> {
        if len > self.len {
            return Err(DriverError::Call {
                call,
                code: 1,
                name: format!(
                    "CUDA_ERROR_INVALID_VALUE ({len} bytes for a buffer of {})",
                    self.len
                ),
            });
        }
        Ok(())
    }

    /// Copies `data` to the start of the buffer.
    pub fn write(&self, data: &[u8]) -> Result<(), DriverError> {
        // SAFETY: `data` is readable for its length.
        unsafe { self.write_raw(data.as_ptr(), data.len()) }
    }

    /// Copies `len` bytes from `src` to the start of the buffer.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes during the call.
    pub unsafe fn write_raw(&self, src: *const u8, len: usize) -> Result<(), DriverError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.write_raw_at(0, src, len) }
    }

    /// Copies `len` bytes from `src` to the buffer at byte `offset`.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes during the call.
    pub unsafe fn write_raw_at(
        &self,
        offset: usize,
        src: *const u8,
        len: usize,
    ) -> Result<(), DriverError> {
        self.fits(offset.saturating_add(len), "cuMemcpyHtoD")?;
        if len == 0 {
            return Ok(());
        }
        self.gpu.bind()?;
        // SAFETY: the buffer holds at least `offset + len` bytes; the caller vouches for `src`.
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(self.ptr + offset as u64, src.cast(), len)
        })
    }

    /// Sets every byte of the buffer to 0.
    pub fn zero(&self) -> Result<(), DriverError> {
        self.gpu.bind()?;
        // SAFETY: the buffer holds `len` bytes (at least one was allocated).
        check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(self.ptr, 0, self.len.max(1)) })
    }

    /// Copies the start of the buffer into `out`.
    pub fn read(&self, out: &mut [u8]) -> Result<(), DriverError> {
        // SAFETY: `out` is writable for its length.
        unsafe { self.read_raw(out.as_mut_ptr(), out.len()) }
    }

    /// Copies the first `len` bytes of the buffer to `dst`.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes during the call.
    pub unsafe fn read_raw(&self, dst: *mut u8, len: usize) -> Result<(), DriverError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.read_raw_at(0, dst, len) }
    }

    /// Copies `len` bytes of the buffer, from byte `offset`, to `dst`.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes during the call.
    pub unsafe fn read_raw_at(
        &self,
        offset: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), DriverError> {
        self.fits(offset.saturating_add(len), "cuMemcpyDtoH")?;
        if len == 0 {
            return Ok(());
        }
        self.gpu.bind()?;
        // SAFETY: the buffer holds at least `offset + len` bytes; the caller vouches for `dst`.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(dst.cast(), self.ptr + offset as u64, len)
        })
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = self.gpu.bind();
        // SAFETY: `ptr` came from `cuMemAlloc` and is freed once.
        let _ = guarded(|| check("cuMemFree", unsafe { sys::cuMemFree_v2(self.ptr) }));
    }
}
