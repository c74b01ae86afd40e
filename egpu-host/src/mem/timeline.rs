//! The `timeline` set: sampled warp-level requests with the device clock, for bandwidth over
//! time and, later, pictures of address × time.
//!
//! Which warps record: a warp's key is `block.x · 32 + warp` (the warp's index in its block)
//! with `block.y` and `block.z` xored into its high bits (`<< 32`, `<< 48`), and the warp is
//! sampled when the upper 32 bits of `key × 0x9E3779B97F4A7C15` (Fibonacci hashing), times N,
//! are below 2³²: one warp in N, spread over the grid whatever its shape (a plain modulo would
//! pick the same warp of every block when N divides the warps per block). N is a power of two
//! from 1 to 1024 ([`Sampling`], `egpu mem run --sample N`). The probes do not test it: the
//! pack says they run in one warp in N ([`Pack::add_sampled`](crate::pack::Pack::add_sampled)),
//! and the injector gives each kernel two copies of its body, one for the sampled warps with
//! the probes, one for the others without them (egpu-ptx's `WarpSampling`), so a warp not
//! sampled runs the kernel as it was, with its registers where they are bound. Each record
//! carries log2 N (a probe per N), so its reader scales it without being told. With
//! [`SampleBy::Lines`] (`--sample-by lines`) every warp runs the probes, which test each lane's
//! 128-byte line mixed with the warp's key instead: every warp records about one in N of its
//! requests, and the records say so ([`LINES`]).
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
    /// [`ATOMIC`] in bits 8–15, log2 N, the sampling of the probe that wrote it, in bits
    /// 16–23, and [`LINES`] when it sampled lines rather than warps.
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

/// What [`Record::kind`] says in bit 24: the record's probe sampled lines of each warp's
/// ([`SampleBy::Lines`]), not warps.
pub const LINES: u32 = 1 << 24;

/// The sampling factors there are probes for: N = `1 << shift`, shift up to this.
pub const MAX_SHIFT: u32 = 10;

/// A `timeline` probe at `$event`, sampling warps (`$lines` false) or lines (true): every lane
/// counts the lanes of a recorded request, and the lowest writes the record (`$access`:
/// [`LOAD`], [`STORE`] or [`ATOMIC`]), by warps with `output_warp` (`egpu_ringbuf_output_warp`:
/// one ticket from the batch the kernel keeps for the lane in registers of its own, its stores,
/// and two atomics and a sequence word per 32 records; no group of lanes to gather). The record is
/// written in the probe itself, not in a local function, which could not name those registers.
///
/// By warps, the probe records every request: it runs in one warp in N = `1 << $shift` only,
/// which the pack says ([`Pack::add_sampled`](crate::pack::Pack::add_sampled)): the injector
/// gives a kernel a copy without it for the other warps (egpu-ptx's `WarpSampling`, whose rule
/// picks the warps: the Fibonacci hash of the warp's key), and on the CPU the caller applies the
/// same rule ([`egpu_device::inject::warp_sampled`]).
///
/// By lines, every warp runs it, and it records a request when the upper 32 bits of the
/// Fibonacci hash of the lane's 128-byte line mixed with the warp's key are below `2³² >>
/// $shift` ([`SampleBy::Lines`]): every warp records about one in N of its lines.
macro_rules! timeline_probe {
    ($name:ident, $event:ident, $access:expr, $shift:literal, false, $doc:literal) => {
        #[doc = $doc]
        #[probe(device::$event, crate = crate::egpu_root)]
        fn $name(ctx: &MemAccessCtx) {
            let lanes = egpu_vm::native::warp_lanes();
            let time = egpu_vm::native::ktime_ns();
            let kind = ctx.class | ($access << 8) | ($shift << 16);
            TIMELINE.output_warp(&Record {
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
    };
    ($name:ident, $event:ident, $access:expr, $shift:literal, true, $doc:literal) => {
        #[doc = $doc]
        #[probe(device::$event, crate = crate::egpu_root)]
        fn $name(ctx: &MemAccessCtx) {
            let warp = ((ctx.block[0] as u64) * 32 + ctx.warp as u64)
                ^ ((ctx.block[1] as u64) << 32)
                ^ ((ctx.block[2] as u64) << 48);
            let key = (ctx.addr >> 7) ^ (warp * 0x9E37_79B9_7F4A_7C15u64);
            if (key * 0x9E37_79B9_7F4A_7C15u64) >> 32 < ((1u64 << 32) >> $shift) {
                // The leader alone computes the record here: every warp runs this probe, and
                // the record's registers computed in every lane cost it more (2.14× against
                // 1.91× on the grid-stride saxpy, H200) than `output_warp` saves.
                let lanes = egpu_vm::native::warp_lanes();
                if egpu_vm::native::warp_leader() {
                    let time = egpu_vm::native::ktime_ns();
                    let kind = ctx.class | ($access << 8) | ($shift << 16) | LINES;
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
    ($($shift:literal: $by:tt, $loads:ident, $stores:ident, $atomics:ident;)*) => {
        $(
            timeline_probe!($loads, global_load, LOAD, $shift, $by,
                "Every read of global memory, sampled.");
            timeline_probe!($stores, global_store, STORE, $shift, $by,
                "Every write of global memory but atomics, sampled.");
            timeline_probe!($atomics, global_atomic, ATOMIC, $shift, $by,
                "Every atomic on global memory, sampled.");
        )*

        /// The `timeline` probes sampling one warp (or, with `lines`, one line of each warp's)
        /// in `1 << shift` (`shift` up to [`MAX_SHIFT`]).
        pub(super) fn timeline(shift: u32, lines: bool) -> Option<[&'static Probe; 3]> {
            match (shift, lines) {
                $(($shift, $by) => Some([$loads::probe(), $stores::probe(), $atomics::probe()]),)*
                _ => None,
            }
        }
    };
}

timeline_probes! {
    0: false, timeline_1_loads, timeline_1_stores, timeline_1_atomics;
    1: false, timeline_2_loads, timeline_2_stores, timeline_2_atomics;
    2: false, timeline_4_loads, timeline_4_stores, timeline_4_atomics;
    3: false, timeline_8_loads, timeline_8_stores, timeline_8_atomics;
    4: false, timeline_16_loads, timeline_16_stores, timeline_16_atomics;
    5: false, timeline_32_loads, timeline_32_stores, timeline_32_atomics;
    6: false, timeline_64_loads, timeline_64_stores, timeline_64_atomics;
    7: false, timeline_128_loads, timeline_128_stores, timeline_128_atomics;
    8: false, timeline_256_loads, timeline_256_stores, timeline_256_atomics;
    9: false, timeline_512_loads, timeline_512_stores, timeline_512_atomics;
    10: false, timeline_1024_loads, timeline_1024_stores, timeline_1024_atomics;
    0: true, lines_1_loads, lines_1_stores, lines_1_atomics;
    1: true, lines_2_loads, lines_2_stores, lines_2_atomics;
    2: true, lines_4_loads, lines_4_stores, lines_4_atomics;
    3: true, lines_8_loads, lines_8_stores, lines_8_atomics;
    4: true, lines_16_loads, lines_16_stores, lines_16_atomics;
    5: true, lines_32_loads, lines_32_stores, lines_32_atomics;
    6: true, lines_64_loads, lines_64_stores, lines_64_atomics;
    7: true, lines_128_loads, lines_128_stores, lines_128_atomics;
    8: true, lines_256_loads, lines_256_stores, lines_256_atomics;
    9: true, lines_512_loads, lines_512_stores, lines_512_atomics;
    10: true, lines_1024_loads, lines_1024_stores, lines_1024_atomics;
}

/// What the timeline samples one in N of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SampleBy {
    /// Warps: a sampled warp records every request of its life, the others none (a grid-stride
    /// kernel, or one of few waves, then waits for its sampled warps, which do the most work).
    Warps,
    /// Blocks: one block in N records every request of each of its warps, the others none (one
    /// warp in N still, but whole blocks: warps that wait for each other at the block's barriers
    /// are slowed together, rather than one sampled warp holding back its block).
    Blocks,
    /// Each warp's 128-byte lines: every warp records about one in N of its requests (those of
    /// a lane's line whose hash with the warp's falls in), so the cost is spread over them all.
    Lines,
    /// Warps drawn again at each turn of a loop (`--sample-by turns`): each warp records its
    /// requests in about one turn in N of each of the kernel's loops, so no few warps that
    /// record every request hold back a kernel of few waves (its loop-free kernels are sampled
    /// by warps). The default: on the H200 a torch.compile'd transformer block (its matmuls
    /// in about one wave) took 1.39–1.81× under `timeline` by turns, 1.77–2.91× by warps, and a
    /// grid-stride saxpy 1.12× against 1.41×.
    #[default]
    Turns,
}

impl std::str::FromStr for SampleBy {
    type Err = UnknownSampling;
    fn from_str(s: &str) -> Result<SampleBy, UnknownSampling> {
        match s.trim() {
            "warps" | "warp" => Ok(SampleBy::Warps),
            "lines" | "line" => Ok(SampleBy::Lines),
            "blocks" | "block" => Ok(SampleBy::Blocks),
            "turns" | "turn" => Ok(SampleBy::Turns),
            _ => Err(UnknownSampling(s.to_owned())),
        }
    }
}

/// How often the timeline samples: one warp (or line of each warp's) in N, N a power of two up
/// to `1 << MAX_SHIFT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sampling {
    shift: u32,
    by: SampleBy,
}

impl Sampling {
    /// One warp in 32, drawn at each turn of a loop: the default.
    pub const DEFAULT: Sampling = Sampling { shift: 5, by: SampleBy::Turns };

    /// N.
    pub fn n(self) -> u64 {
        1 << self.shift
    }

    /// log2 N.
    pub fn shift(self) -> u32 {
        self.shift
    }

    /// What it samples one in N of.
    pub fn by(self) -> SampleBy {
        self.by
    }

    /// The same N, of `by`.
    pub fn of(self, by: SampleBy) -> Sampling {
        Sampling { by, ..self }
    }
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling::DEFAULT
    }
}

/// A sampling factor, or what to sample, egpu has no probes for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no sampling `{0}`: one in N takes N a power of two from 1 to 1024, of warps, blocks, lines \
     or turns"
)]
pub struct UnknownSampling(pub String);

impl std::str::FromStr for Sampling {
    type Err = UnknownSampling;
    fn from_str(s: &str) -> Result<Sampling, UnknownSampling> {
        match s.trim().parse::<u64>() {
            Ok(n) if n.is_power_of_two() && n.trailing_zeros() <= MAX_SHIFT => {
                Ok(Sampling { shift: n.trailing_zeros(), by: SampleBy::Warps })
            }
            _ => Err(UnknownSampling(s.to_owned())),
        }
    }
}
