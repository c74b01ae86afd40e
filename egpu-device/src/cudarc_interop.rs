//! cudarc interop (feature `cudarc-interop`): a program that drives the GPU through cudarc's
//! safe API keeps doing so, and egpu instruments the modules it loads, keeps the probes' maps
//! in cudarc device memory and counts its launches.
//!
//! | cudarc | egpu | what egpu adds |
//! |---|---|---|
//! | `Arc<CudaContext>` | [`Gpu::from_cudarc`] | a [`Gpu`] over the same context (it holds a clone of the `Arc`), for an [`Instrumenter`], maps and `egpu::host::mem::MemSession` |
//! | `CudaContext::load_module(ptx)` | [`Instrumenter::load_cudarc`] | the PTX instrumented before the driver sees it, both modules loaded through `load_module`: a [`ProbedCudaModule`] with cudarc's [`CudaModule`]s, the injector's sites and coverage, or why it runs uninstrumented |
//! | `CudaModule::load_function` | [`ProbedCudaModule::function`] | the instrumented and the original [`CudaFunction`] |
//! | `stream.launch_builder(&f)`, `.arg(..)`, `.launch(cfg)` | [`ProbedCudaFunction::launch_builder`] → [`ProbedLaunch`] | the same arguments and the same call; the kernel chosen when the builder is made (instrumented, or the original when paused, not sampled, or fallen back); the launch counted |
//! | `CudaSlice<u8>` | [`CudaMapBuffer`] | a probe's map in a cudarc slice, bound for the translation ([`CudaMapBuffer::binding`]), read back into the typed maps ([`CudaMapBuffer::download`]) |
//!
//! The instrumented kernels take exactly the original's parameters: egpu passes nothing per
//! launch (a probe's `launch_id` is the kernel's `%gridid`, and the maps' addresses are
//! constants in the instrumented PTX), so a kernel launched through cudarc's own builder, on
//! [`ProbedCudaFunction::instrumented`], runs instrumented as well; only its launches are not
//! counted (`egpu mem`'s launch column, sampling), which is what [`ProbedLaunch`] adds.
//!
//! PTX from a string (`Ptx::from_src`), a file (`Ptx::from_file`) or NVRTC
//! (`cudarc::nvrtc::compile_ptx`) is instrumented; a cubin (`Ptx::from_binary`) is loaded as it
//! is, with why ([`ProbedCudaModule::fallback`]).
//!
//! Maps are read after the kernels that write them have finished:
//! [`CudaMapBuffer::download`] synchronises the context (every stream) first.
//!
//! ```no_run
//! use std::sync::Arc;
//! use cudarc::driver::{CudaContext, LaunchConfig};
//! use cudarc::nvrtc::Ptx;
//! use egpu_device::cuda::Gpu;
//! use egpu_device::cudarc_interop::CudaMapBuffer;
//! use egpu_device::instrument::Instrumenter;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let (verified, raw, ptx): (egpu_ebpf::verifier::Verified, egpu_maps::RawMap, &str) = todo!();
//! let ctx = CudaContext::new(0)?;
//! let stream = ctx.default_stream();
//! let gpu = Gpu::from_cudarc(&ctx)?;
//! let map = CudaMapBuffer::upload(&gpu, &stream, &raw)?; // the probe's map, in a CudaSlice<u8>
//! let mut instrumenter = Instrumenter::new(&gpu);
//! instrumenter.attach(&verified, &[map.binding()], &[])?;
//! let module = instrumenter.load_cudarc(&ctx, &Ptx::from_src(ptx))?;
//! let scale = module.function("scale")?;
//! let mut x = stream.alloc_zeros::<f32>(1024)?;
//! let mut launch = scale.launch_builder(&stream);
//! launch.arg(&mut x).arg(&2.0f32);
//! // SAFETY: `scale` takes a float pointer to 1024 floats and a float.
//! unsafe { launch.launch(LaunchConfig::for_num_elems(1024))? };
//! map.download()?; // synchronises, then the typed map over `raw` holds the counts
//! # Ok(())
//! # }
//! ```

use std::any::Any;
use std::collections::HashMap;
use std::ffi::CStr;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

pub use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchArgs,
    LaunchConfig, PushKernelArg,
};
pub use cudarc::nvrtc::Ptx;

use cudarc::driver::DevicePtr;
use cudarc::driver::sys::CUevent_flags;
use egpu_maps::RawMap;

use crate::cuda::{DeviceBuffer, Gpu, JitError, KeepAlive};
use crate::driver::{DriverError, error_name};
use crate::inject::{Coverage, Injection};
use crate::instrument::{Fallback, Instrumenter, Ran, out_of_resources};
use crate::maps::DeviceMapBuffer;
use crate::translate::DeviceMap;

/// cudarc's error for the driver call `call`, as egpu's [`DriverError`].
pub fn driver_error(call: &'static str, error: cudarc::driver::DriverError) -> DriverError {
    DriverError::Call { call, code: error.0 as i32, name: error_name(error.0) }
}

/// `CUDA_ERROR_INVALID_CONTEXT` for `call`, when what cudarc gave belongs to a context other
/// than the [`Gpu`]'s.
fn same_context(gpu: &Gpu, context: &CudaContext, call: &'static str) -> Result<(), DriverError> {
    if gpu.raw_context() == context.cu_ctx() {
        return Ok(());
    }
    Err(DriverError::Call {
        call,
        code: 201,
        name: "CUDA_ERROR_INVALID_CONTEXT (the cudarc context is not the egpu `Gpu`'s)".into(),
    })
}

impl Gpu {
    /// A [`Gpu`] over a cudarc context: the same driver context, borrowed (it holds a clone
    /// of the `Arc`, so the context lives at least as long).
    ///
    /// # Errors
    ///
    /// The driver's, when the context cannot be made current or its device found.
    pub fn from_cudarc(context: &Arc<CudaContext>) -> Result<Gpu, DriverError> {
        let keep: Arc<dyn Any + Send + Sync> = context.clone();
        // SAFETY: `keep` holds an `Arc` of the context, which cudarc releases (or destroys)
        // only when its last `Arc` drops: after this `Gpu`, which drops `keep` last.
        unsafe { Gpu::borrowing(context.cu_ctx(), KeepAlive(Some(keep))) }
    }

    /// Whether `context` is this GPU's driver context.
    pub fn is_context_of(&self, context: &CudaContext) -> bool {
        self.raw_context() == context.cu_ctx()
    }
}

/// A probe's map in cudarc device memory: a `CudaSlice<u8>` holding the map's bytes (header
/// and slots, the layout every side shares), which cudarc kernels and copies can take, and
/// the [`DeviceMapBuffer`] over it that binds it for the translation and reads it back.
#[derive(Debug)]
pub struct CudaMapBuffer<'g> {
    // Declared first, so dropped first: it borrows the slice's memory and never frees it.
    map: DeviceMapBuffer<'g>,
    slice: CudaSlice<u8>,
}

impl<'g> CudaMapBuffer<'g> {
    /// Allocates a slice for `raw` on `stream` and copies the map's bytes there.
    ///
    /// # Errors
    ///
    /// `CUDA_ERROR_INVALID_CONTEXT` when `stream` is not of `gpu`'s context; the driver's.
    pub fn upload(
        gpu: &'g Gpu,
        stream: &Arc<CudaStream>,
        raw: &RawMap,
    ) -> Result<CudaMapBuffer<'g>, DriverError> {
        same_context(gpu, stream.context(), "cuMemAlloc")?;
        let len = raw.memory().1;
        let slice = stream.alloc_zeros::<u8>(len).map_err(|e| driver_error("cuMemAlloc", e))?;
        // egpu's copy below is synchronous and on no stream: the allocation's zeroing first.
        stream.synchronize().map_err(|e| driver_error("cuStreamSynchronize", e))?;
        let ptr = {
            let (ptr, _recorded) = slice.device_ptr(stream);
            ptr
        };
        // SAFETY: `ptr` is the slice's memory, `len` bytes of `gpu`'s context, which this value
        // keeps allocated (the slice is dropped after the map); nothing else writes it yet.
        let buffer = unsafe { DeviceBuffer::from_raw(gpu, ptr, len)? };
        let map = DeviceMapBuffer::upload_into(buffer, raw)?;
        Ok(CudaMapBuffer { map, slice })
    }

    /// The slice holding the map, for cudarc kernels and copies.
    pub fn slice(&self) -> &CudaSlice<u8> {
        &self.slice
    }

    /// What the translation needs: the device address and the geometry.
    pub fn binding(&self) -> DeviceMap {
        self.map.binding()
    }

    /// Waits for the context's work (every stream), then copies what the device wrote into
    /// the host map ([`DeviceMapBuffer::download`]), where the typed maps read it.
    pub fn download(&self) -> Result<(), DriverError> {
        let context = self.slice.context();
        context.synchronize().map_err(|e| driver_error("cuCtxSynchronize", e))?;
        self.map.download()
    }

    /// The map's buffer: [`DeviceMapBuffer::upload_device_shards`], `clear`, `counter`.
    pub fn map(&self) -> &DeviceMapBuffer<'g> {
        &self.map
    }
}

/// Which PTX text a cudarc `Ptx` holds.
enum Text {
    /// PTX text, instrumented.
    Ptx(String),
    /// A cubin: loaded as it is.
    Cubin,
}

/// The first bytes of a value's `Debug` form (cudarc's `Ptx` says its kind there only).
struct Prefix(String);

impl fmt::Write for Prefix {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if self.0.len() >= 12 {
                return Err(fmt::Error);
            }
            self.0.push(c);
        }
        Ok(())
    }
}

/// A [`JitError`] for a module that cannot be read (`name` says why), with no log.
fn unreadable(code: i32, name: &str) -> JitError {
    JitError::from(DriverError::Call { call: "cuModuleLoadData", code, name: name.into() })
}

/// The text of `ptx`, without a panic: NVRTC's image, a string, a file's contents.
fn ptx_text(ptx: &Ptx) -> Result<Text, JitError> {
    let text = if let Some(bytes) = ptx.as_bytes() {
        let text = CStr::from_bytes_until_nul(bytes).map_or_else(
            |_| String::from_utf8_lossy(bytes).into_owned(),
            |c| c.to_string_lossy().into_owned(),
        );
        Ok(text)
    } else {
        let mut kind = Prefix(String::new());
        let _ = write!(kind, "{ptx:?}");
        if kind.0.starts_with("Ptx(Binary") {
            return Ok(Text::Cubin);
        }
        // A string's text is there; a file is read (cudarc panics on one it cannot read).
        std::panic::catch_unwind(|| ptx.to_src())
            .map_err(|_| unreadable(301, "CUDA_ERROR_FILE_NOT_FOUND (the PTX file cannot be read)"))
    }?;
    if text.contains('\0') {
        // cudarc would panic making a C string of it.
        return Err(unreadable(218, "CUDA_ERROR_INVALID_PTX (a NUL byte inside the PTX)"));
    }
    Ok(Text::Ptx(text))
}

/// An instrumented module as cudarc loaded it, with what the injector did, or why there is
/// none.
type LoadedCuda = Result<(Arc<CudaModule>, Coverage, Injection), Fallback>;

/// A module a cudarc program loaded through an [`Instrumenter`]
/// ([`Instrumenter::load_cudarc`]): the original and, where there is one, the instrumented
/// module, both cudarc [`CudaModule`]s of the program's context.
pub struct ProbedCudaModule<'i, 'g> {
    instrumenter: &'i Instrumenter<'g>,
    original: Arc<CudaModule>,
    instrumented: LoadedCuda,
    launches: Mutex<HashMap<String, u64>>,
    /// Kernels whose instrumented launch failed for lack of resources, with why.
    failed: Mutex<HashMap<String, Fallback>>,
    warned: AtomicBool,
}

impl fmt::Debug for ProbedCudaModule<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbedCudaModule")
            .field("instrumented", &self.instrumented.is_ok())
            .finish_non_exhaustive()
    }
}

impl<'g> Instrumenter<'g> {
    /// Loads `ptx` into the cudarc context `context` (this instrumenter's GPU's, from
    /// [`Gpu::from_cudarc`]) through `CudaContext::load_module`, as it is and instrumented
    /// with the attached probes. A module that cannot be instrumented (the injector's error,
    /// the JIT's with its log, a cubin) runs as it came, with why
    /// ([`ProbedCudaModule::fallback`]).
    ///
    /// # Errors
    ///
    /// Only when the original does not load: the JIT's error with its log, a PTX file that
    /// cannot be read, PTX with a NUL byte inside, or a context other than this
    /// instrumenter's (`CUDA_ERROR_INVALID_CONTEXT`).
    pub fn load_cudarc<'i>(
        &'i self,
        context: &Arc<CudaContext>,
        ptx: &Ptx,
    ) -> Result<ProbedCudaModule<'i, 'g>, JitError> {
        same_context(self.gpu, context, "cuModuleLoadData")?;
        let text = ptx_text(ptx)?;
        let original = context.load_module(ptx.clone()).map_err(|e| match &text {
            Text::Ptx(text) => self.jit_log(text, e),
            Text::Cubin => JitError::from(driver_error("cuModuleLoadData", e)),
        })?;
        let instrumented = match &text {
            Text::Cubin => Err(Fallback::Inject(
                "a cubin, not PTX text: there is nothing to instrument".into(),
            )),
            Text::Ptx(text) => self.instrument_cudarc(context, text),
        };
        Ok(ProbedCudaModule {
            instrumenter: self,
            original,
            instrumented,
            launches: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            warned: AtomicBool::new(false),
        })
    }

    fn instrument_cudarc(&self, context: &Arc<CudaContext>, ptx: &str) -> LoadedCuda {
        let injected = self.instrument_ptx(ptx).map_err(|e| Fallback::Inject(e.to_string()))?;
        let module = context
            .load_module(Ptx::from_src(injected.ptx.clone()))
            .map_err(|e| Fallback::Load(self.jit_log(&injected.ptx, e)))?;
        Ok((module, injected.coverage(), injected))
    }

    /// cudarc's load error for `ptx`, with the JIT's log: cudarc asks for none, so egpu loads
    /// the text again, asking for it.
    fn jit_log(&self, ptx: &str, error: cudarc::driver::DriverError) -> JitError {
        let error = driver_error("cuModuleLoadData", error);
        match self.gpu.load_ptx(ptx) {
            Err(jit) => JitError { error, log: jit.log },
            Ok(_) => JitError::from(error),
        }
    }
}

impl<'i, 'g> ProbedCudaModule<'i, 'g> {
    /// The module as the program gave it.
    pub fn original(&self) -> &Arc<CudaModule> {
        &self.original
    }

    /// The instrumented module; `None` when it runs uninstrumented.
    pub fn instrumented(&self) -> Option<&Arc<CudaModule>> {
        self.instrumented.as_ref().ok().map(|(module, ..)| module)
    }

    /// How many of the module's global memory instructions the probes observe; `None` when
    /// it runs uninstrumented.
    pub fn coverage(&self) -> Option<&Coverage> {
        self.instrumented.as_ref().ok().map(|(_, coverage, _)| coverage)
    }

    /// What the injector did (the instrumented PTX, kernels, sites); `None` when it runs
    /// uninstrumented.
    pub fn injection(&self) -> Option<&Injection> {
        self.instrumented.as_ref().ok().map(|(_, _, injection)| injection)
    }

    /// Why the module runs uninstrumented, if it does.
    pub fn fallback(&self) -> Option<Fallback> {
        self.instrumented.as_ref().err().cloned()
    }

    /// Why kernel `name` runs uninstrumented, if it does.
    pub fn kernel_fallback(&self, name: &str) -> Option<Fallback> {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed.get(name).cloned().or_else(|| self.fallback())
    }

    /// Kernel `name`: its original and, where the module is instrumented, its instrumented
    /// function.
    ///
    /// # Errors
    ///
    /// `CUDA_ERROR_NOT_FOUND` when the module has no such kernel (or the name holds a NUL).
    pub fn function(&self, name: &str) -> Result<ProbedCudaFunction<'_>, DriverError> {
        if name.contains('\0') {
            return Err(DriverError::Call {
                call: "cuModuleGetFunction",
                code: 500,
                name: "CUDA_ERROR_NOT_FOUND (a NUL byte inside the name)".into(),
            });
        }
        let get = |module: &Arc<CudaModule>| {
            module.load_function(name).map_err(|e| driver_error("cuModuleGetFunction", e))
        };
        let original = get(&self.original)?;
        let instrumented = self.instrumented().map(get).transpose()?;
        Ok(ProbedCudaFunction { site: self, name: name.to_owned(), original, instrumented })
    }
}

/// What a launch asks of the module it comes from.
trait LaunchSite {
    /// Whether kernel `name`'s next launch runs instrumented.
    fn wants(&self, name: &str) -> bool;
    /// Counts a launch of kernel `name`.
    fn launched(&self, name: &str);
    /// Kernel `name` could not launch instrumented: its later launches run the original.
    fn failed(&self, name: &str, error: DriverError);
}

impl LaunchSite for ProbedCudaModule<'_, '_> {
    fn wants(&self, name: &str) -> bool {
        let n = {
            let launches = self.launches.lock().unwrap_or_else(PoisonError::into_inner);
            launches.get(name).copied().unwrap_or(0)
        };
        let wanted = self.instrumenter.wants(n);
        if let (true, Err(why)) = (wanted, &self.instrumented) {
            self.warn_once(why);
        }
        wanted && self.kernel_fallback(name).is_none()
    }

    fn launched(&self, name: &str) {
        self.instrumenter.note_launch(&self.launches, name);
    }

    fn failed(&self, name: &str, error: DriverError) {
        let why = Fallback::Launch { kernel: name.to_owned(), error };
        self.warn_once(&why);
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_owned(), why);
    }
}

impl ProbedCudaModule<'_, '_> {
    fn warn_once(&self, why: &Fallback) {
        if !self.warned.swap(true, Relaxed) {
            eprintln!("egpu: running uninstrumented: {why}");
        }
    }
}

/// A kernel of a [`ProbedCudaModule`]: its instrumented and original cudarc functions.
pub struct ProbedCudaFunction<'m> {
    site: &'m (dyn LaunchSite + 'm),
    name: String,
    original: CudaFunction,
    instrumented: Option<CudaFunction>,
}

impl fmt::Debug for ProbedCudaFunction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbedCudaFunction")
            .field("name", &self.name)
            .field("instrumented", &self.instrumented.is_some())
            .finish_non_exhaustive()
    }
}

impl ProbedCudaFunction<'_> {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The original kernel.
    pub fn original(&self) -> &CudaFunction {
        &self.original
    }

    /// The instrumented kernel, when its module is instrumented. Launched through cudarc's
    /// own builder it runs instrumented, uncounted ([`ProbedCudaFunction::launch_builder`]
    /// counts).
    pub fn instrumented(&self) -> Option<&CudaFunction> {
        self.instrumented.as_ref()
    }

    /// cudarc's launch builder on `stream` for this kernel: instrumented when the probes are
    /// not paused, the launch is sampled and the instrumented kernel is usable, else the
    /// original (chosen now). Arguments and launch are cudarc's, unchanged.
    pub fn launch_builder<'a>(&'a self, stream: &'a CudaStream) -> ProbedLaunch<'a> {
        let ran = match &self.instrumented {
            Some(_) if self.site.wants(&self.name) => Ran::Instrumented,
            _ => Ran::Original,
        };
        let function = match (&self.instrumented, ran) {
            (Some(instrumented), Ran::Instrumented) => instrumented,
            _ => &self.original,
        };
        ProbedLaunch {
            args: stream.launch_builder(function),
            site: self.site,
            name: &self.name,
            ran,
        }
    }
}

/// cudarc's [`LaunchArgs`] for a [`ProbedCudaFunction`]: the same arguments, the same launch,
/// counted for egpu (the launch column of `egpu mem`'s report, sampling).
#[derive(Debug)]
pub struct ProbedLaunch<'a> {
    args: LaunchArgs<'a>,
    site: &'a (dyn LaunchSite + 'a),
    name: &'a str,
    ran: Ran,
}

impl fmt::Debug for dyn LaunchSite + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LaunchSite")
    }
}

impl<'a> ProbedLaunch<'a> {
    /// Adds a kernel argument, as cudarc's [`LaunchArgs::arg`] does (every argument cudarc
    /// takes: scalars by reference, slices, views).
    pub fn arg<T>(&mut self, arg: T) -> &mut Self
    where
        LaunchArgs<'a>: PushKernelArg<T>,
    {
        self.args.arg(arg);
        self
    }

    /// Has [`launch`](Self::launch) return events recorded before and after the kernel, as
    /// cudarc's [`LaunchArgs::record_kernel_launch`].
    pub fn record_kernel_launch(&mut self, flags: CUevent_flags) -> &mut Self {
        self.args.record_kernel_launch(flags);
        self
    }

    /// Which kernel the launch runs.
    pub fn ran(&self) -> Ran {
        self.ran
    }

    /// cudarc's builder itself.
    pub fn args(&mut self) -> &mut LaunchArgs<'a> {
        &mut self.args
    }

    /// Launches the kernel as cudarc's [`LaunchArgs::launch`], and counts the launch. An
    /// instrumented launch that fails for lack of registers returns the error, and the
    /// kernel's later launches run the original ([`ProbedCudaModule::kernel_fallback`]).
    ///
    /// # Safety
    ///
    /// As cudarc's [`LaunchArgs::launch`]: the arguments must be the kernel's, and the kernel
    /// must not access memory beyond them. The instrumented kernel takes the same arguments
    /// and touches nothing more than the original and its probes' maps.
    pub unsafe fn launch(
        &mut self,
        config: LaunchConfig,
    ) -> Result<Option<(CudaEvent, CudaEvent)>, DriverError> {
        // SAFETY: the caller's contract, as cudarc states it.
        match unsafe { self.args.launch(config) } {
            Ok(events) => {
                self.site.launched(self.name);
                Ok(events)
            }
            Err(error) => {
                let error = driver_error("cuLaunchKernel", error);
                if self.ran == Ran::Instrumented && out_of_resources(&error) {
                    self.site.failed(self.name, error.clone());
                }
                Err(error)
            }
        }
    }
}
