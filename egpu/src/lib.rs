//! egpu: eBPF-style programmability for NVIDIA GPUs.
//!
//! Probes are eBPF programs. The same bytecode runs on the CPU, in an eBPF VM, for host events
//! such as CUDA kernel launches, and (in a later step) inside CUDA kernels, translated to PTX.
//! This crate is the facade users depend on.
//!
//! | module | what it holds |
//! |---|---|
//! | [`ebpf`] | the eBPF core: instructions, programs, helpers, contexts, assembler |
//! | [`maps`] | typed maps with one memory layout for host, VM, GPU and other processes |
//! | [`probe`] | Probe Rust's back end: the probe IR and its eBPF code generator |
//! | [`vm`] | the CPU VM around rbpf: legalisation, engine choice, map binding, runs |
//! | [`device`] | the GPU side: the CUDA driver layer (more to come) |
//! | [`testing`] | helpers for tests that need a GPU |
#![deny(missing_docs)]

pub use egpu_device as device;
pub use egpu_ebpf as ebpf;
pub use egpu_maps as maps;

pub mod probe;
pub mod vm;

/// Helpers for tests that need a GPU.
pub mod testing {
    pub use egpu_device::testing::require_gpu;
}

/// The verifier chapter's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../book/src/verifier.md")]
struct VerifierChapterDoctests;

/// The maps chapter's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../book/src/maps.md")]
struct MapsChapterDoctests;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
