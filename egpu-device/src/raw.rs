//! Raw-handle interop: egpu's instrumenter, maps and launches over driver objects that another
//! wrapper owns (cust, cudarc, a C library), with no dependency on that wrapper.
//!
//! Every CUDA wrapper can hand out its raw driver handles (`CUcontext`, `CUmodule`,
//! `CUfunction`, `CUstream`, `CUdeviceptr`); the constructors here take them, **borrowed**: the
//! values they make never release, unload or free what they were given, and the caller keeps
//! the objects alive while egpu's values live (each constructor is an `unsafe fn` whose
//! `# Safety` section says what must hold). In the other direction, egpu's own objects give
//! their handles out ([`Gpu::raw_context`], [`Module::as_raw`], [`Kernel::as_raw`]), and
//! [`Module::into_raw`] hands a module loaded by egpu over to the caller, who unloads it.
//!
//! | handle | into egpu | out of egpu |
//! |---|---|---|
//! | `CUcontext` | [`Gpu::from_raw_context`] | [`Gpu::raw_context`] |
//! | `CUmodule` | [`Module::from_raw`] | [`Module::as_raw`], [`Module::into_raw`] |
//! | `CUfunction` | [`Kernel::from_raw`] | [`Kernel::as_raw`] |
//! | `CUstream` | [`Stream::from_raw`] ([`Stream::default_stream`] for the null one) | [`Stream::as_raw`] |
//! | `CUdeviceptr` | [`DeviceBuffer::from_raw`] (maps: [`DeviceMapBuffer::upload_into`](crate::maps::DeviceMapBuffer::upload_into)) | [`DeviceBuffer::device_ptr`] |
//!
//! A null context, module, function or device pointer is refused with
//! [`DriverError::NullHandle`]; a null stream is CUDA's default stream, as the driver reads it.
//!
//! The usual path for another wrapper: wrap its context ([`Gpu::from_raw_context`]), attach
//! probes to an [`Instrumenter`](crate::instrument::Instrumenter) with their maps in GPU memory
//! ([`DeviceMapBuffer`](crate::maps::DeviceMapBuffer)), then either let egpu load and launch
//! ([`Instrumenter::load`](crate::instrument::Instrumenter::load),
//! [`ProbedModule::launch_on`](crate::instrument::ProbedModule::launch_on) on the wrapper's
//! stream), or take the instrumented PTX
//! ([`Instrumenter::instrument_ptx`](crate::instrument::Instrumenter::instrument_ptx)) and load
//! it with the wrapper's own loader (cust's `Module::from_ptx`), launching it as any kernel of
//! the wrapper: the instrumented kernel takes the same parameters as the original, and nothing
//! is passed to it per launch.
//!
//! ```no_run
//! use egpu_device::cuda::{Arg, Gpu};
//! use egpu_device::raw::Stream;
//! # fn wrapper_context() -> cudarc::driver::sys::CUcontext { std::ptr::null_mut() }
//! # fn wrapper_stream() -> cudarc::driver::sys::CUstream { std::ptr::null_mut() }
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // SAFETY: the wrapper keeps its context and stream alive while `gpu` and `stream` live.
//! let gpu = unsafe { Gpu::from_raw_context(wrapper_context())? };
//! let stream = unsafe { Stream::from_raw(&gpu, wrapper_stream()) };
//! let module = gpu.load_ptx(".version 8.0\n.target sm_90\n.address_size 64\n\
//!     .visible .entry k(.param .u64 out) { .reg .b64 %a; ld.param.u64 %a, [out];\n\
//!     st.global.u32 [%a], 42; ret; }")?;
//! let out = gpu.alloc(4)?;
//! gpu.launch_on(&stream, &module.kernel("k")?, (1, 1, 1), (1, 1, 1), &[Arg::Ptr(&out)])?;
//! stream.synchronize()?;
//! # Ok(())
//! # }
//! ```

use std::ffi::c_int;

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUfunction, CUmodule, CUstream};

use crate::cuda::{Arg, DeviceBuffer, Gpu, KeepAlive, Kernel, Module};
use crate::driver::{DriverError, check, guarded, library_present};

impl Gpu {
    /// A [`Gpu`] over a context another library made (a primary context it retained, or one it
    /// created), borrowed: dropping the value leaves the context as it was. egpu makes the
    /// context current on the calling thread before each of its calls, and leaves it current.
    ///
    /// # Errors
    ///
    /// [`DriverError::NullHandle`] for a null `context`; [`DriverError::LibraryNotFound`]
    /// without a driver; the driver's error when the context cannot be made current or its
    /// device found.
    ///
    /// # Safety
    ///
    /// `context` must be a live context of the CUDA driver this process loaded, and stay
    /// alive (neither destroyed nor, for a primary context, released for the last time) while
    /// the returned value and everything that borrows it (modules, buffers, instrumenters,
    /// maps) live.
    pub unsafe fn from_raw_context(context: CUcontext) -> Result<Gpu, DriverError> {
        // SAFETY: forwarded to the caller.
        unsafe { Gpu::borrowing(context, KeepAlive::default()) }
    }

    /// [`Gpu::from_raw_context`], holding `keep` (what keeps the context alive) while the
    /// value lives.
    ///
    /// # Safety
    ///
    /// As [`Gpu::from_raw_context`], while `keep` is held.
    pub(crate) unsafe fn borrowing(
        context: CUcontext,
        keep: KeepAlive,
    ) -> Result<Gpu, DriverError> {
        if context.is_null() {
            return Err(DriverError::NullHandle { handle: "CUcontext" });
        }
        // A raw pointer is not `UnwindSafe`; the closure only hands it to the driver.
        let handle = std::panic::AssertUnwindSafe(context);
        let (ordinal, device) = guarded(move || {
            let handle = handle;
            if !library_present() {
                return Err(DriverError::LibraryNotFound);
            }
            // SAFETY: the caller vouches that the context is live.
            check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(handle.0) })?;
            let mut device: CUdevice = 0;
            // SAFETY: `device` is live and writable; the context is current.
            check("cuCtxGetDevice", unsafe { sys::cuCtxGetDevice(&mut device) })?;
            Ok((ordinal_of(device)?, device))
        })?;
        Ok(Gpu { ordinal, device, context, owned: false, keep })
    }

    /// The context's raw handle, for another wrapper: still this value's (or its owner's); do
    /// not destroy or release it.
    pub fn raw_context(&self) -> CUcontext {
        self.context
    }

    /// The device ordinal, as `cuDeviceGet` numbers devices.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// Launches `kernel` on `stream`, without waiting: the launch is ordered with the
    /// stream's other work, and [`Stream::synchronize`] (or [`Gpu::synchronize`]) waits for
    /// it. The host probes on launches see it, as they see [`Gpu::launch`]'s.
    pub fn launch_on(
        &self,
        stream: &Stream<'_>,
        kernel: &Kernel<'_>,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[Arg<'_>],
    ) -> Result<(), DriverError> {
        self.launch_on_raw(stream.stream, kernel, grid, block, args)
    }
}

/// The ordinal of `device` (`cuDeviceGet`'s number for it); the driver is initialised.
fn ordinal_of(device: CUdevice) -> Result<i32, DriverError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is live and writable.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) })?;
    for ordinal in 0..count {
        let mut found: CUdevice = 0;
        // SAFETY: `found` is live and writable; `ordinal` is in range.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut found, ordinal) })?;
        if found == device {
            return Ok(ordinal);
        }
    }
    // Drivers number devices by ordinal; a handle not among them is kept as it is.
    Ok(device)
}

impl<'g> Module<'g> {
    /// A module another library loaded into `gpu`'s context, borrowed: dropping the value
    /// does not unload it. Its kernels are found by name as those of egpu's modules
    /// ([`Module::kernel`]).
    ///
    /// # Errors
    ///
    /// [`DriverError::NullHandle`] for a null `module`.
    ///
    /// # Safety
    ///
    /// `module` must be a module loaded in `gpu`'s context, and stay loaded while the returned
    /// value and its kernels live.
    pub unsafe fn from_raw(gpu: &'g Gpu, module: CUmodule) -> Result<Module<'g>, DriverError> {
        if module.is_null() {
            return Err(DriverError::NullHandle { handle: "CUmodule" });
        }
        Ok(Module { gpu, module, info_log: String::new(), owned: false })
    }

    /// The module's raw handle: still this value's to unload (or its owner's).
    pub fn as_raw(&self) -> CUmodule {
        self.module
    }

    /// Hands the module over: the caller now owns the handle and unloads it
    /// (`cuModuleUnload`) when done; egpu no longer will.
    pub fn into_raw(mut self) -> CUmodule {
        self.owned = false;
        self.module
    }
}

impl<'m> Kernel<'m> {
    /// A kernel another library found (`cuModuleGetFunction`), named `name` (its mangled
    /// name, which gives the kernel id probes see as `kernel_id`), for [`Gpu::launch`] and
    /// [`Gpu::launch_on`].
    ///
    /// # Errors
    ///
    /// [`DriverError::NullHandle`] for a null `function`.
    ///
    /// # Safety
    ///
    /// `function` must be a kernel of a module loaded in the context of the [`Gpu`] that
    /// launches it, and its module must stay loaded for `'m`.
    pub unsafe fn from_raw(function: CUfunction, name: &str) -> Result<Kernel<'m>, DriverError> {
        if function.is_null() {
            return Err(DriverError::NullHandle { handle: "CUfunction" });
        }
        let id = egpu_ebpf::kernel_id(name);
        Ok(Kernel { function, id, _module: std::marker::PhantomData })
    }

    /// The kernel's raw handle.
    pub fn as_raw(&self) -> CUfunction {
        self.function
    }

    /// The kernel id probes see (`kernel_id`): the hash of its mangled name.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl<'g> DeviceBuffer<'g> {
    /// `len` bytes of device memory at `ptr` that another library allocated, borrowed:
    /// dropping the value does not free them. For copies and launch arguments, and for maps
    /// placed in memory the caller owns
    /// ([`DeviceMapBuffer::upload_into`](crate::maps::DeviceMapBuffer::upload_into)).
    ///
    /// # Errors
    ///
    /// [`DriverError::NullHandle`] for a null `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must be device memory of `gpu`'s context (or mapped into it) of at least `len`
    /// bytes, allocated while the returned value lives; no other code may write it while egpu
    /// copies to or from it.
    pub unsafe fn from_raw(
        gpu: &'g Gpu,
        ptr: u64,
        len: usize,
    ) -> Result<DeviceBuffer<'g>, DriverError> {
        if ptr == 0 {
            return Err(DriverError::NullHandle { handle: "CUdeviceptr" });
        }
        Ok(DeviceBuffer { gpu, ptr, len, owned: false })
    }
}

/// A stream of a [`Gpu`]'s context, borrowed from the library that made it (or CUDA's default
/// stream): [`Gpu::launch_on`] and
/// [`ProbedModule::launch_on`](crate::instrument::ProbedModule::launch_on) launch on it.
#[derive(Debug, Clone, Copy)]
pub struct Stream<'g> {
    gpu: &'g Gpu,
    stream: CUstream,
}

// SAFETY: a stream handle may be used from any thread; the driver synchronises its use, and
// every call makes the stream's context current first.
unsafe impl Send for Stream<'_> {}
// SAFETY: as above; the value holds nothing but the handles.
unsafe impl Sync for Stream<'_> {}

impl<'g> Stream<'g> {
    /// A stream another library made in `gpu`'s context, borrowed: egpu never destroys it.
    /// A null `stream` is CUDA's default stream of the context (the legacy stream), as the
    /// driver reads a null stream.
    ///
    /// # Safety
    ///
    /// `stream` must be null or a stream of `gpu`'s context that stays alive while the
    /// returned value (or a copy) lives.
    pub unsafe fn from_raw(gpu: &'g Gpu, stream: CUstream) -> Stream<'g> {
        Stream { gpu, stream }
    }

    /// The context's default stream (the null stream).
    pub fn default_stream(gpu: &'g Gpu) -> Stream<'g> {
        Stream { gpu, stream: std::ptr::null_mut() }
    }

    /// The stream's raw handle (null for the default stream).
    pub fn as_raw(&self) -> CUstream {
        self.stream
    }

    /// The GPU whose context the stream belongs to.
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Waits for the work launched on the stream so far.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.gpu.bind()?;
        // SAFETY: the stream is null or live (the constructor's contract); its context is
        // current.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(self.stream) })
    }
}
