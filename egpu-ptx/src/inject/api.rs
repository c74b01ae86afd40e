//! What the injector is given: the probes and the kernels they attach to, its options, and
//! why it can fail.

use std::collections::BTreeMap;

use egpu_ebpf::AttachPoint;
use egpu_ebpf::verifier::Verified;

use super::WarpSampling;
use super::launch_tags::LaunchParamError;
use crate::ptx::PtxError;
use crate::translate::{DeviceMap, TranslateError};

/// A probe to inject, and the kernels it attaches to.
#[derive(Clone, Copy, Debug)]
pub struct DeviceProbe<'a> {
    /// The verified program; its attach point says where it runs.
    pub program: &'a Verified,
    /// Which kernels: all of them, or those named (by mangled name).
    pub kernels: Kernels<'a>,
    /// The device side of each map of the program's map table, in its order.
    pub maps: &'a [DeviceMap],
}

/// The kernels a probe attaches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels<'a> {
    /// Every kernel of the module.
    All,
    /// The kernels with these (mangled) names.
    Named(&'a [&'a str]),
}

impl Kernels<'_> {
    pub(super) fn selects(&self, name: &str) -> bool {
        match self {
            Kernels::All => true,
            Kernels::Named(names) => names.contains(&name),
        }
    }
}

/// Why a module could not be instrumented.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectError {
    /// The PTX could not be read.
    #[error("reading the PTX: {0}")]
    Ptx(#[from] PtxError),
    /// The module is not 64-bit.
    #[error("the module's `.address_size` is {0}; egpu instruments 64-bit modules only")]
    AddressSize(String),
    /// A probe does not attach to a device event.
    #[error("probe {probe} attaches to {attach}, not to a device event")]
    NotDevice {
        /// The probe's index.
        probe: usize,
        /// Its attach point.
        attach: AttachPoint,
    },
    /// Probes sampled by warps differently ([`WarpSampling::of`]).
    #[error("{0}")]
    Sampling(String),
    /// A kernel could not be given the launch's tag ([`InjectOptions::launch_tags`]).
    #[error("kernel `{kernel}`: no room for the launch's tag: {why}")]
    LaunchParam {
        /// The kernel.
        kernel: String,
        /// Why.
        why: LaunchParamError,
    },
    /// A probe could not be translated.
    #[error("probe {probe}: {error}")]
    Translate {
        /// The probe's index.
        probe: usize,
        /// Why.
        error: TranslateError,
    },
}

/// How to inject, beyond the probes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InjectOptions {
    /// The device address of the table of tensor map boxes of the context the module is for
    /// ([`tensor_maps`](super::tensor_maps)): tensor copies then carry their box's bytes in their `size` (0 where
    /// the table does not know their map, and without a table).
    pub tensor_boxes: Option<u64>,
    /// The registers per thread each kernel was compiled to, by name, when known (the cubin the
    /// program loaded: [`crate::cubin::register_counts`]): the instrumented kernel then declares
    /// `.maxnreg`, the most registers that keep its blocks per SM (`occupancy.rs`). Empty: no
    /// limit.
    pub registers: BTreeMap<String, u32>,
    /// With [`registers`](Self::registers), declare `.maxnreg` only in the kernels that have a
    /// copy for sampled warps (`sampled.rs`), where what does not fit stays in the sampled
    /// copy; false: in every kernel whose registers are known.
    pub bound_sampled_only: bool,
    /// Probes that run in one warp in N only (`sampled.rs`).
    pub sampled: Option<WarpSampling>,
    /// The SM's rated clock in kHz, for waits counted in cycles
    /// ([`Options::sm_clock_khz`](crate::translate::Options::sm_clock_khz)); `None`: on
    /// `%globaltimer`.
    pub sm_clock_khz: Option<u32>,
    /// In kernels that count by page in registers (the `pages` set's lookups), a thread whose
    /// page is in neither cached entry runs the probe where its straight line of code ends,
    /// not at the access (`deferred.rs`): the access's code has no branch.
    pub defer_misses: bool,
    /// Give each kernel whose probes read the contexts' `tag_id` a parameter more, where its
    /// launches pass the launch's tag id (`launch_tags.rs`; the preloaded library does);
    /// false: `tag_id` reads 0 and every kernel keeps its parameters.
    pub launch_tags: bool,
}
