//! egpu's text work on PTX: everything about the GPU that needs no driver and no GPU.
//!
//! A probe reaches a kernel as text. This crate reads a module's PTX, translates verified eBPF
//! into PTX, splices it into kernels at their attach points, finds the PTX a cubin keeps, and
//! runs NVIDIA's `ptxas` and `nvcc` as programs. It depends on the eBPF core and the map layout
//! only, so the command line, the preloaded library and tests use it on machines with no CUDA at
//! all; `egpu-device`, the crate users name for GPU work, re-exports every module.
//!
//! | module | what it does |
//! |---|---|
//! | [`ptx`] | reads PTX into pieces that cover its text exactly: functions, statements, and instructions with their guards, opcodes and operands |
//! | [`translate`] | a verified eBPF program as PTX that runs inside a kernel: context reads as special registers, frames in registers, RFC 9669 arithmetic, atomics, and every helper inlined (map helpers included); what the GPU cannot run is a [`translate::TranslateError`] |
//! | [`inject`] | splices translated probes into a module's PTX at kernel entry and exit and before every global (or generic) load and store, leaving the rest of the text as it was |
//! | [`cubin`] | the PTX a cubin (an ELF file) keeps beside its machine code, as Triton's do |
//! | [`image`] | a module image as the driver's loaders take it (PTX text, a cubin, a fat binary), and the PTX it carries |
//! | [`fatbin`] | fat binaries (nvcc's containers of PTX and cubins, plain or compressed with LZ4 or Zstandard): their entries, and the PTX for a device |
//! | [`toolchain`] | `ptxas` (checks PTX, reports registers and spills) and `nvcc` (CUDA C to PTX), found through `EGPU_PTXAS`, `EGPU_NVCC` or `PATH` |
//! | [`testing`] | what tests use to skip with a printed reason where the tools are missing, or fail under `EGPU_REQUIRE_PTXAS=1` |
//!
//! The book's chapter on the GPU backend states every rule the translation and the injector
//! follow.
#![deny(missing_docs)]

pub mod cubin;
pub mod fatbin;
pub mod image;
pub mod inject;
pub mod ptx;
pub mod testing;
pub mod toolchain;
pub mod translate;
