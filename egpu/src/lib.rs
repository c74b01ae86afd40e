//! egpu: eBPF-style programmability for NVIDIA GPUs.
//!
//! Probes are eBPF programs. The same bytecode runs on the CPU, in an eBPF VM, for host events
//! such as CUDA kernel launches, and inside CUDA kernels, translated to PTX, for device events.
//! Every program is verified once, into a [`Verified`](ebpf::verifier::Verified), which every
//! engine takes. This crate is the facade users depend on: each module is one of egpu's crates.
//!
//! | module | crate | what it holds |
//! |---|---|---|
//! | [`ebpf`] | `egpu-ebpf` | the eBPF core: instructions, programs, helpers, contexts, the verifier, the assembler |
//! | [`maps`] | `egpu-maps` | typed maps with one memory layout for host, VM, GPU and other processes |
//! | [`probe`](mod@probe) | `egpu-probe` | Probe Rust's back end: the IR, the code generator, [`Probe`](probe::Probe); the language is [`#[egpu::probe]`](macro@probe) and [`#[egpu::helper]`](macro@helper), [`print!`] |
//! | [`vm`] | `egpu-vm` | the CPU VM around rbpf: legalisation, engine choice, map binding, runs |
//! | [`host`] | `egpu-host` | host attach points: probes on CUDA API calls, attached to a set and fired by whoever sees the call; the built-in probes and their exporters |
//! | [`pack`] | `egpu-host` | probe packs, carried into the preloaded library; [`export_probes!`] |
//! | [`device`] | `egpu-device` (with `egpu-ptx`) | the GPU side: the driver, device maps, the instrumenter, and the PTX reader, translator and injector |
//! | [`testing`] | `egpu-device` | helpers for tests that need a GPU |
//!
//! ## Start here
//!
//! - A probe in Rust: [`#[egpu::probe]`](macro@probe) on a function that takes its attach
//!   point's context: [`ebpf::LaunchCtx`] for `host::launch`, [`ebpf::KernelCtx`] for
//!   `device::kernel_entry`, [`ebpf::MemAccessCtx`] for `device::global_load` (every attach
//!   point and its context: `egpu list`, or [`ebpf::AttachPoint`]).
//! - Its maps, `static`s shared by probes, host code and other processes:
//!   [`maps::HashMap`], [`maps::Array`], [`maps::PerCpuArray`], [`maps::RingBuf`].
//! - eBPF from elsewhere: [`ebpf::assemble`] or [`ebpf::Program::new`], checked once by
//!   [`ebpf::verifier::verify`]; run on the CPU by [`vm::Vm`], on CUDA API calls by
//!   [`host::HostProbes`], inside kernels by [`device::instrument::Instrumenter`].
//! - Unmodified programs: the `egpu` command (`egpu run --probes PACK -- COMMAND`), with a pack
//!   made by [`export_probes!`].
//!
//! The book (`book/` in the repository) explains each part; the examples are in `examples/`.
#![deny(missing_docs)]

#[doc(inline)]
pub use egpu_device as device;
#[doc(inline)]
pub use egpu_ebpf as ebpf;
#[doc(inline)]
pub use egpu_host as host;
pub use egpu_host::{export_probes, pack};
#[doc(inline)]
pub use egpu_maps as maps;
#[doc(inline)]
pub use egpu_probe as probe;
#[doc(inline)]
pub use egpu_vm as vm;

pub use egpu_macros::{helper, probe};

/// Probe Rust's helpers, as native functions: a probe calls them as `egpu::helpers::ktime_ns()`,
/// and its native twin runs these.
pub mod helpers {
    /// Time in ns: `CLOCK_MONOTONIC` on the CPU (`%globaltimer` on the GPU).
    pub fn ktime_ns() -> u64 {
        egpu_vm::native::ktime_ns()
    }

    /// The CPU the calling thread runs on (the SM, on the GPU).
    pub fn cpu_id() -> u32 {
        egpu_vm::native::cpu_id()
    }

    /// A pseudo-random `u32` from a per-thread generator.
    pub fn prandom_u32() -> u32 {
        egpu_vm::native::prandom_u32()
    }

    /// The lanes of the warp that run the call together: 1 on the CPU, where a thread is a warp
    /// of one lane.
    pub fn warp_lanes() -> u32 {
        egpu_vm::native::warp_lanes()
    }

    /// Whether this lane is the lowest of those running the call together: always, on the CPU.
    pub fn warp_leader() -> bool {
        egpu_vm::native::warp_leader()
    }

    /// The distinct 32-byte sectors that the accesses of `size` bytes at `addr` of the lanes
    /// running the call together touch: on the CPU, those of the one access (at least 1).
    pub fn warp_sectors(addr: u64, size: u32) -> u32 {
        egpu_vm::native::warp_sectors(addr, size)
    }

    /// In the lowest of the lanes running the call together whose `value` is the same, how many
    /// they are, 0 in the others (one lane per group does the group's work): 1 on the CPU.
    pub fn warp_peers(value: u64) -> u32 {
        egpu_vm::native::warp_peers(value)
    }

    /// The bytes between consecutive lanes' addresses when they step evenly, `u64::MAX` when
    /// they do not (`egpu_warp_stride`; 0 on the CPU, a lane alone).
    pub fn warp_stride(addr: u64) -> u64 {
        egpu_vm::native::warp_stride(addr)
    }

    /// Waits `ns` nanoseconds (at most 2^20 − 1, about 1 ms), spinning, and gives the
    /// nanoseconds that passed (`egpu_delay_ns`: what emulating a slower memory tier is made
    /// of).
    pub fn delay_ns(ns: u64) -> u64 {
        egpu_vm::native::delay_ns(ns)
    }

    /// Waits until `ns` nanoseconds (at most 2^20 − 1) have passed since `since`, a value of
    /// [`clock`] the probe read earlier, spinning; the nanoseconds since `since`. A probe that
    /// reads the clock when it starts makes its own work part of its wait: what it delays then
    /// takes `ns` longer than without it.
    pub fn delay_ns_since(since: u64, ns: u64) -> u64 {
        egpu_vm::native::delay_ns_since(since, ns)
    }

    /// The clock waits count on (`egpu_clock`): on the GPU the SM's cycles (`%clock64`) where
    /// the SM's clock is known, else `%globaltimer`; the monotonic clock on the CPU. Only for
    /// [`delay_ns_since`].
    pub fn clock() -> u64 {
        egpu_vm::native::clock()
    }
}

/// Prints from a probe: `egpu::print!("launch {} took {} ns", id, ns)` records the format and up
/// to six integer arguments in the process's print ring, which [`probe::prints`] reads and
/// formats. In native code (a probe's twin) it writes the same records.
#[macro_export]
macro_rules! print {
    ($format:literal $(, $arg:expr)* $(,)?) => {
        $crate::probe::print::print_native(
            $format,
            &[$($crate::__private::print_arg($arg)),*],
        )
    };
}

/// What `#[egpu::probe]`'s generated code uses; not a public API.
#[doc(hidden)]
pub mod __private {
    /// The probe builder.
    pub mod probe {
        pub use egpu_probe::build::*;
    }
    pub use egpu_probe::twin;

    /// A native `print!` argument: its 64-bit value and whether it is signed.
    pub fn print_arg<T: egpu_probe::build::Scalar>(v: T) -> (u64, bool) {
        (v.to_canonical(), T::TY.signed())
    }
}

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

/// The Probe Rust chapter's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../book/src/probe-rust.md")]
struct ProbeRustChapterDoctests;

/// The CPU VM chapter's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../book/src/cpu-vm.md")]
struct CpuVmChapterDoctests;

/// The host probes chapter's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../book/src/host-probes.md")]
struct HostProbesChapterDoctests;

/// The launch sites and context tags chapter's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../book/src/sites-and-tags.md")]
struct SitesAndTagsChapterDoctests;

/// The GPU machine chapter's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../book/src/gpu-machine.md")]
struct GpuMachineChapterDoctests;

/// The GPU backend chapter's examples, compiled as doctests (those that need a GPU are `no_run`).
#[cfg(doctest)]
#[doc = include_str!("../../book/src/gpu-backend.md")]
struct GpuBackendChapterDoctests;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
