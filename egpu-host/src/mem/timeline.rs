//! The `timeline` set: sampled warp-level requests with the device clock, for bandwidth over
//! time and, later, pictures of address × time.
//!
//! Each access's warp decides whether it is sampled, the same way at every access of the warp:
//! its key is `block.x · 32 + warp` (the warp's index in its block, `MemAccessCtx::warp`) with
//! `block.y` and `block.z` xored into its high bits (`<< 32`, `<< 48`), and the warp is sampled
//! when the upper 32 bits of `key × 0x9E3779B97F4A7C15` (Fibonacci hashing), times N, are below
//! 2³²: one warp in N, spread over the grid whatever its shape (a plain modulo would pick the
//! same warp of every block when N divides the warps per block). N is a power of two from 1 to
//! 1024 ([`Sampling`], `egpu mem run --sample N`), a constant of the probes: a probe per N, as
//! the `pages` set has a probe per page size. (A value read from a map at run time was the
//! other way; Probe Rust reads hash maps only, whose lookup costs more than the constant.)
//! The cost for a warp not sampled is a multiply and a compare. Each record carries log2 N, so
//! its reader scales it without being told.
//!
//! A sampled request is recorded by its leader lane (`warp_leader`): one
//! [`Record`] (the device clock, the SM, the leader's address, the access's size, the lanes
//! that ran it together, class and direction, kernel and launch) into `TIMELINE`, a ring per
//! SM. A full ring drops the record and counts the drop in its shard: per SM. The preloaded
//! library drains the rings while the program runs ([`super::windows::Timeline`]), and adds the
//! records to fine bins, from which the recording's windows are cut.

use bytemuck::{Pod, Zeroable};
use egpu_ebpf::MemAccessCtx;
use egpu_macros::probe;
use egpu_maps::{RingBuf, Shards};
use egpu_probe::Probe;

use super::sets::SM_SHARDS;

/// Records each SM's ring holds (the preloaded library drains the rings every merge,
/// `EGPU_MERGE_MS`; records beyond it are dropped and counted).
pub const RECORDS_PER_SM: u32 = 4096;

/// What [`Record::access`] says: a load.
pub const LOAD: u32 = 0;
/// A store.
pub const STORE: u32 = 1;
/// An atomic.
pub const ATOMIC: u32 = 2;

/// A sampled warp-level request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Record {
    /// The device clock (`%globaltimer`) when the leader recorded it, in nanoseconds.
    pub time: u64,
    /// The leader lane's address.
    pub addr: u64,
    /// The kernel's id.
    pub kernel: u64,
    /// The launch's `%gridid`.
    pub launch: u64,
    /// Bytes each lane accessed.
    pub size: u32,
    /// Lanes that ran the access together.
    pub lanes: u32,
    /// The SM (`%smid`).
    pub sm: u32,
    /// The class of instruction (`MemAccessCtx::class`) in bits 0–7, [`LOAD`], [`STORE`] or
    /// [`ATOMIC`] in bits 8–15, and log2 N, the sampling of the probe that wrote it, in bits
    /// 16–23.
    pub kind: u32,
}

impl Record {
    /// The bytes the request moved: its lanes' accesses.
    pub fn bytes(&self) -> u64 {
        u64::from(self.lanes) * u64::from(self.size)
    }

    /// Its class of instruction.
    pub fn class(&self) -> u32 {
        self.kind & 0xff
    }

    /// [`LOAD`], [`STORE`] or [`ATOMIC`].
    pub fn access(&self) -> u32 {
        (self.kind >> 8) & 0xff
    }

    /// log2 N: the record stands for `1 << shift` warps' requests (at most 63).
    pub fn shift(&self) -> u32 {
        ((self.kind >> 16) & 0xff).min(63)
    }
}

/// The sampled requests, a ring per SM (and one for the host, where the CPU VM writes).
pub(super) static TIMELINE: RingBuf<Record> =
    RingBuf::with_shards(RECORDS_PER_SM, Shards::new(1, SM_SHARDS));

/// The sampling factors there are probes for: N = `1 << shift`, shift up to this.
pub const MAX_SHIFT: u32 = 10;

/// A `timeline` probe at `$event`: a sampled warp's request is recorded, every lane counting
/// the lanes and the leader writing the record (`$access`: [`LOAD`], [`STORE`] or [`ATOMIC`]).
/// The warp of key `block.x · 32 + warp` (`block.y`, `block.z` in its high bits) is sampled,
/// one in N = `1 << $shift`, when the upper 32 bits of the key's Fibonacci hash are below
/// `2³² >> $shift`: computed in the probe (a helper, a local function, was a call per access),
/// from values a thread never changes, which `ptxas` may compute once.
/// The record is written in the probe itself, not in a helper (a local function), so that the
/// ring's tickets come from the batch the kernel keeps for the lane in registers of its own:
/// its stores, and two atomics and a sequence word per 32 records, not per record.
macro_rules! timeline_probe {
    ($name:ident, $event:ident, $access:expr, $shift:literal, $doc:literal) => {
        #[doc = $doc]
        #[probe(device::$event, crate = crate::egpu_root)]
        fn $name(ctx: &MemAccessCtx) {
            let key = ((ctx.block[0] as u64) * 32 + ctx.warp as u64)
                ^ ((ctx.block[1] as u64) << 32)
                ^ ((ctx.block[2] as u64) << 48);
            if (key * 0x9E37_79B9_7F4A_7C15u64) >> 32 < ((1u64 << 32) >> $shift) {
                let lanes = egpu_vm::native::warp_lanes();
                if egpu_vm::native::warp_leader() {
                    let time = egpu_vm::native::ktime_ns();
                    let kind = ctx.class | ($access << 8) | ($shift << 16);
                    TIMELINE.output(&Record {
                        time,
                        addr: ctx.addr,
                        kernel: ctx.kernel_id,
                        launch: ctx.launch_id,
                        size: ctx.size,
                        lanes,
                        sm: ctx.sm,
                        kind,
                    });
                }
            }
        }
    };
}

macro_rules! timeline_probes {
    ($($shift:literal: $loads:ident, $stores:ident, $atomics:ident;)*) => {
        $(
            timeline_probe!($loads, global_load, LOAD, $shift,
                "Every read of global memory, from a sampled warp.");
            timeline_probe!($stores, global_store, STORE, $shift,
                "Every write of global memory but atomics, from a sampled warp.");
            timeline_probe!($atomics, global_atomic, ATOMIC, $shift,
                "Every atomic on global memory, from a sampled warp.");
        )*

        /// The `timeline` probes sampling one warp in `1 << shift` (`shift` up to
        /// [`MAX_SHIFT`]).
        pub(super) fn timeline(shift: u32) -> Option<[&'static Probe; 3]> {
            match shift {
                $($shift => Some([$loads::probe(), $stores::probe(), $atomics::probe()]),)*
                _ => None,
            }
        }
    };
}

timeline_probes! {
    0: timeline_1_loads, timeline_1_stores, timeline_1_atomics;
    1: timeline_2_loads, timeline_2_stores, timeline_2_atomics;
    2: timeline_4_loads, timeline_4_stores, timeline_4_atomics;
    3: timeline_8_loads, timeline_8_stores, timeline_8_atomics;
    4: timeline_16_loads, timeline_16_stores, timeline_16_atomics;
    5: timeline_32_loads, timeline_32_stores, timeline_32_atomics;
    6: timeline_64_loads, timeline_64_stores, timeline_64_atomics;
    7: timeline_128_loads, timeline_128_stores, timeline_128_atomics;
    8: timeline_256_loads, timeline_256_stores, timeline_256_atomics;
    9: timeline_512_loads, timeline_512_stores, timeline_512_atomics;
    10: timeline_1024_loads, timeline_1024_stores, timeline_1024_atomics;
}

/// How often the timeline samples: one warp in N, N a power of two up to `1 << MAX_SHIFT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sampling(u32);

impl Sampling {
    /// One warp in 32: the default.
    pub const DEFAULT: Sampling = Sampling(5);

    /// N.
    pub fn n(self) -> u64 {
        1 << self.0
    }

    /// log2 N.
    pub fn shift(self) -> u32 {
        self.0
    }
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling::DEFAULT
    }
}

/// A sampling factor egpu has no probes for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no sampling `{0}`: one warp in N takes N a power of two from 1 to 1024")]
pub struct UnknownSampling(pub String);

impl std::str::FromStr for Sampling {
    type Err = UnknownSampling;
    fn from_str(s: &str) -> Result<Sampling, UnknownSampling> {
        match s.trim().parse::<u64>() {
            Ok(n) if n.is_power_of_two() && n.trailing_zeros() <= MAX_SHIFT => {
                Ok(Sampling(n.trailing_zeros()))
            }
            _ => Err(UnknownSampling(s.to_owned())),
        }
    }
}
