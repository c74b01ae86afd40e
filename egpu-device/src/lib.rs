//! The GPU side of egpu: everything that targets an NVIDIA GPU.
//!
//! egpu runs eBPF-style probes on the CPU and inside CUDA kernels. The host side (the facade crate
//! `egpu`, the eBPF model in `egpu-ebpf`, the maps in `egpu-maps`) never talks to the GPU
//! itself: every contact with the GPU and its driver goes through this crate.
//!
//! # What lives here
//!
//! Today this crate is the thin CUDA driver layer:
//!
//! - [`devices`] lists the GPUs the driver sees, as [`GpuInfo`] values (name, compute capability,
//!   SM count, memory, driver version);
//! - [`gpu_status`] says whether there is a usable GPU, and if not, why not, in words;
//! - [`testing::require_gpu`] is the one helper that GPU tests use to skip with a printed reason
//!   on a machine without a GPU, and to fail when `EGPU_REQUIRE_GPU=1` is set;
//! - [`ptx`] reads PTX into pieces that cover its text exactly: functions, statements, and
//!   instructions with their guards, opcodes and operands;
//! - [`toolchain`] runs NVIDIA's `ptxas` (checks PTX, reports registers and spills) and `nvcc`
//!   (CUDA C to PTX), found through `EGPU_PTXAS`, `EGPU_NVCC` or `PATH`.
//!
//! To come, in their own modules:
//!
//! - the translation of checked eBPF programs to PTX (a compiler back end: typed indices, a PTX
//!   printer, lowering split by instruction class, a verifier);
//! - the PTX injector, which splices probes into the PTX of a kernel before the driver loads it;
//! - device maps: the device half of `egpu-maps`, in pinned, mapped host memory and in device
//!   memory.
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
//! | safe    | [`devices`], [`gpu_status`], [`GpuInfo`], [`GpuStatus`], [`DriverError`] | Plain Rust values and typed errors. The library is probed first ([`DriverError::LibraryNotFound`]) and every query runs under `catch_unwind`, so a missing driver or symbol is an error, never a panic. RAII types (contexts, modules, pinned memory) will join this layer. |
//!
//! All driver access in egpu goes through this crate and these layers, never through `cudarc`
//! directly from another crate. That keeps the `unsafe` in one place, and it leaves one seam where
//! an interop with the Rust-CUDA project (`cust`) can be added later: contexts, streams and
//! device pointers handed in from `cust` would enter here and nowhere else.
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
pub mod driver;
pub mod inject;
pub mod instrument;
pub mod maps;
pub mod ptx;
pub mod testing;
pub mod toolchain;
pub mod translate;

pub use driver::{DriverError, GpuInfo, GpuStatus, devices, gpu_status};
