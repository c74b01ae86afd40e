//! The GPU side of egpu: everything that targets an NVIDIA GPU.
//!
//! egpu runs eBPF-style probes on the CPU and inside CUDA kernels. The host side (the facade crate
//! `egpu`, the eBPF model in `egpu-ebpf`, the maps in `egpu-maps`) never talks to the GPU
//! itself: every contact with the GPU and its driver goes through this crate.
//!
//! # What lives here
//!
//! - [`devices`] lists the GPUs the driver sees, as [`GpuInfo`] values (name, compute capability,
//!   SM count, memory, driver version), and [`gpu_status`] says whether there is a usable GPU,
//!   and if not, why not, in words ([`driver`]);
//! - [`cuda`] owns the driver objects: a GPU's primary context ([`cuda::Gpu`]), modules loaded
//!   from PTX with the JIT's logs, kernels and launches, device memory, host memory pinned and
//!   mapped into the GPU;
//! - from `egpu-ptx`, the text work that needs no driver, re-exported here: [`translate`] turns a verified eBPF program into PTX that runs inside a kernel: context
//!   reads as special registers, frames in registers, RFC 9669 arithmetic, atomics, and the
//!   helpers inlined, map helpers included (arrays, hash maps, their per-CPU kinds, ring
//!   buffers); what the GPU cannot run is a [`translate::TranslateError`];
//! - [`inject`] splices translated probes into a module's PTX at kernel entry and exit and before
//!   every global (or generic) load and store, leaving the rest of the text as it was;
//! - [`instrument`] loads modules through egpu ([`instrument::Instrumenter`]): instrumented and
//!   cached, or the original kernel, with sampling, detaching and a fallback that says why;
//! - [`raw`] takes other wrappers' driver handles (contexts, modules, kernels, streams, device
//!   memory), borrowed, so that any wrapper (cust included) uses the instrumenter and maps;
//!   with the `cudarc-interop` feature, `cudarc_interop` does the same for cudarc's safe API:
//!   modules loaded through `CudaContext::load_module` instrumented, maps in `CudaSlice`s,
//!   launches through cudarc's launch builder;
//! - [`maps`] places maps where probes update them: a copy in GPU memory
//!   ([`maps::DeviceMapBuffer`]), or the host map pinned and mapped into the GPU, read live
//!   ([`maps::HostMappedMap`], one GPU at a time), or a part per GPU merged on the host
//!   ([`maps::MappedParts`]), on the layout every side shares (`egpu_maps::layout`);
//! - [`ptx`] reads PTX into pieces that cover its text exactly: functions, statements, and
//!   instructions with their guards, opcodes and operands;
//! - [`toolchain`] runs NVIDIA's `ptxas` (checks PTX, reports registers and spills) and `nvcc`
//!   (CUDA C to PTX), found through `EGPU_PTXAS`, `EGPU_NVCC` or `PATH`;
//! - [`testing`] holds what tests use to skip with a printed reason where a GPU or the tools are
//!   missing, and to fail instead under `EGPU_REQUIRE_GPU=1` or `EGPU_REQUIRE_PTXAS=1`
//!   ([`testing::require_gpu`], [`testing::require_ptxas`], [`testing::require_nvcc`]).
//!
//! The book's chapter on the GPU backend states every rule the translation and the injector
//! follow.
//!
//! # The driver layers
//!
//! The driver is reached in three layers, as in cudarc. Each layer only calls the one below it,
//! and `unsafe` stays in the lower two.
//!
//! | Layer   | Where                                   | What it does |
//! |---------|-----------------------------------------|--------------|
//! | raw     | `cudarc::driver::sys`                   | The `cu*` entry points of `libcuda.so.1`, loaded with `dlopen` on first use. Every function is `unsafe` and returns a bare `CUresult`. cudarc panics if the library or a symbol is missing. |
//! | checked | `driver::check` (crate-private)         | One function that turns every `CUresult` into `Result<(), DriverError>`, naming the call and the error (`cuGetErrorName`). Calls stay `unsafe` where the driver is; each `unsafe` block is one driver call with its `// SAFETY:` comment. |
//! | safe    | [`devices`], [`gpu_status`], [`GpuInfo`], [`GpuStatus`], [`DriverError`]; the owning types of [`cuda`]: [`Gpu`](cuda::Gpu), [`Module`](cuda::Module), [`Kernel`](cuda::Kernel), [`DeviceBuffer`](cuda::DeviceBuffer), [`HostMapping`](cuda::HostMapping) | Plain Rust values and typed errors. The library is probed first ([`DriverError::LibraryNotFound`]), before any owning type can exist, and the queries and the calls that open a context, load a module, allocate, launch and release run under `catch_unwind`, so a missing driver is an error, never a panic. Each owning type releases its driver object when dropped: `Gpu` its retain of the primary context, `Module` the module, `DeviceBuffer` the memory, `HostMapping` the registration of the host memory; a `Kernel` borrows its module. |
//!
//! All driver access in egpu goes through this crate and these layers, never through `cudarc`
//! directly from another crate. That keeps the `unsafe` in one place, and it leaves one seam
//! where other wrappers' objects enter: contexts, modules, kernels, streams and device pointers
//! of any wrapper through [`raw`], and cudarc's safe types through `cudarc_interop` (feature
//! `cudarc-interop`), both borrowed, never released by egpu.
//!
//! # Without a GPU
//!
//! Development machines and CI have no GPU and often no NVIDIA driver. Nothing in this crate
//! panics there: [`devices`] returns [`DriverError::LibraryNotFound`], and [`gpu_status`] returns
//! [`GpuStatus::NotFound`] with the reason.
//!
//! ```
//! match egpu_device::gpu_status() {
//!     egpu_device::GpuStatus::Found(gpus) => {
//!         for gpu in &gpus {
//!             println!("{gpu}"); // NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver CUDA 13.0)
//!         }
//!     }
//!     egpu_device::GpuStatus::NotFound { reason } => println!("no GPU: {reason}"),
//! }
//! ```
//!
//! GPU tests start with [`testing::require_gpu`]:
//!
//! ```no_run
//! let Some(gpu) = egpu_device::testing::require_gpu() else { return };
//! println!("testing on {gpu}");
//! ```
#![deny(missing_docs)]

pub mod cuda;
#[cfg(feature = "cudarc-interop")]
pub mod cudarc_interop;
pub mod driver;
pub mod hooks;
pub mod instrument;
pub mod maps;
pub mod raw;
pub mod tensor_maps;
pub mod testing;

pub use egpu_ptx::{cubin, fatbin, image, inject, ptx, toolchain, translate};

pub use driver::{DriverError, GpuInfo, GpuStatus, devices, gpu_status};

/// cudarc, the version egpu is built with (feature `cudarc-interop`): name its types through
/// this path, or depend on the same version, so that the contexts and modules are the same types.
#[cfg(feature = "cudarc-interop")]
pub use cudarc;
