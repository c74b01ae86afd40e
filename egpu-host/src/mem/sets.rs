//! The device probe sets of `egpu mem`, in Probe Rust. Every map is a `static` here; a set's
//! probes go into a pack ([`super::pack`]) whose maps the preloaded library creates under these
//! names, and [`Recording::collect`](super::Recording::collect) reads them back by name.
//!
//! - `counts`: per kernel (keyed by its id), the accesses each class of instruction made and
//!   their bytes, the fields of a value per direction ([`Reads`], [`Writes`], [`Atomics`]). The
//!   key is the kernel's id at every access, so the kernel looks the value up once per thread,
//!   keeps a sum per field the thread adds to in a register, and adds them when the thread
//!   exits, aggregated across the warp.
//! - `timing`: per launch (at a slot of `%gridid`), the device clock (`%globaltimer`) when the
//!   first thread of block 0 starts, and, per SM, when the first thread of each block ends
//!   (the last store wins). A launch's GPU time is the latest end over the SMs less the start.
//!   A thread tests its index and goes on; the first thread of a block writes one word when it
//!   ends. A CUDA graph's kernel node has one grid id for all its replays: the maps hold its
//!   last replay's times, and how many times it ran.
//! - `pattern`: per kernel, site and class, the warp-level requests, their lanes, the 32-byte
//!   sectors they touched and the fewest they could have, and their stride classes: one
//!   address, unit stride, another stride (and its bytes), or none (a gather) (the warp
//!   helpers; the lowest lane adds). `pages` is in `pages.rs`.

use bytemuck::{Pod, Zeroable};
use egpu_ebpf::{KernelCtx, MemAccessCtx};
use egpu_macros::{helper, probe};
use egpu_maps::{Array, HashMap, PerCpuArray, Shards};

use egpu_probe::Probe;

/// Kernels the `counts` maps hold.
pub const KERNELS: u32 = 1024;
/// Launches the `timing` maps hold: the latest this many (a power of two: a slot is the grid
/// id's low bits).
pub const LAUNCHES: u32 = 4096;
/// Kernel sites the `pattern` map holds.
pub const SITE_KEYS: u32 = 4096;
/// Launches whose runs the `timing` maps count (graph nodes replayed: see `RUNS`).
pub const RUN_KEYS: u32 = 16384;
/// SM shards of the `timing` set's ends: one per SM up to this many (`%smid % SM_SHARDS` above).
pub const SM_SHARDS: u32 = 128;

/// What a kernel read, every launch: one value per kernel, whose fields the probes add to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Reads {
    /// `ld`/`ldu` and bulk copies from global memory, per thread.
    pub loads: u64,
    /// Their bytes.
    pub loaded: u64,
    /// `cp.async` copies, per thread.
    pub asyncs: u64,
    /// The bytes they read (a copy whose `src-size` is 0 reads none).
    pub async_bytes: u64,
    /// Tensor copies from global memory (`cp.async.bulk.tensor`), one per copy.
    pub tensor_loads: u64,
    /// Their boxes' bytes (0 for a tensor map egpu did not see encoded).
    pub tensor_loaded: u64,
}

/// What a kernel wrote, every launch (atomics aside).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Writes {
    /// `st`, bulk copies to global memory and tensor map writes, per thread.
    pub stores: u64,
    /// Their bytes.
    pub stored: u64,
    /// Tensor copies and reductions to global memory.
    pub tensor_stores: u64,
    /// Their boxes' bytes.
    pub tensor_stored: u64,
}

/// A kernel's atomics on global memory, every launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Atomics {
    /// `atom` and `red`, per thread.
    pub atomics: u64,
    /// The bytes of their operands.
    pub atomic: u64,
}

/// Reads per kernel (one map per probe: a probe's zero values for missing keys share its
/// 512-byte stack).
pub(super) static READS: HashMap<u64, Reads> = HashMap::with_capacity(KERNELS);
/// Writes per kernel.
pub(super) static WRITES: HashMap<u64, Writes> = HashMap::with_capacity(KERNELS);
/// Atomics per kernel.
pub(super) static ATOMICS: HashMap<u64, Atomics> = HashMap::with_capacity(KERNELS);

/// Every read of global memory.
#[probe(device::global_load, crate = crate::egpu_root)]
fn count_loads(ctx: &MemAccessCtx) {
    let bytes = ctx.size as u64;
    if ctx.class == MemAccessCtx::TENSOR_COPY {
        READS.fetch_add_field(&ctx.kernel_id, |t| &t.tensor_loads, 1);
        READS.fetch_add_field(&ctx.kernel_id, |t| &t.tensor_loaded, bytes);
    } else if ctx.class == MemAccessCtx::ASYNC_COPY {
        READS.fetch_add_field(&ctx.kernel_id, |t| &t.asyncs, 1);
        READS.fetch_add_field(&ctx.kernel_id, |t| &t.async_bytes, bytes);
    } else {
        READS.fetch_add_field(&ctx.kernel_id, |t| &t.loads, 1);
        READS.fetch_add_field(&ctx.kernel_id, |t| &t.loaded, bytes);
    }
}

/// Every write of global memory but atomics.
#[probe(device::global_store, crate = crate::egpu_root)]
fn count_stores(ctx: &MemAccessCtx) {
    let bytes = ctx.size as u64;
    if ctx.class == MemAccessCtx::TENSOR_COPY {
        WRITES.fetch_add_field(&ctx.kernel_id, |t| &t.tensor_stores, 1);
        WRITES.fetch_add_field(&ctx.kernel_id, |t| &t.tensor_stored, bytes);
    } else {
        WRITES.fetch_add_field(&ctx.kernel_id, |t| &t.stores, 1);
        WRITES.fetch_add_field(&ctx.kernel_id, |t| &t.stored, bytes);
    }
}

/// Every atomic on global memory.
#[probe(device::global_atomic, crate = crate::egpu_root)]
fn count_atomics(ctx: &MemAccessCtx) {
    ATOMICS.fetch_add_field(&ctx.kernel_id, |t| &t.atomics, 1);
    ATOMICS.fetch_add_field(&ctx.kernel_id, |t| &t.atomic, ctx.size as u64);
}

/// A launch's start, written by the first thread of its block 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Start {
    /// The launch's `%gridid`.
    pub grid: u64,
    /// The kernel's id.
    pub kernel: u64,
    /// `%globaltimer` when the thread started, in nanoseconds.
    pub start: u64,
    /// Blocks in the grid.
    pub blocks: u64,
    /// Threads in a block.
    pub threads: u64,
}

/// Launches' starts, at their slot (`%gridid % LAUNCHES`: the latest launches are kept).
pub(super) static STARTS: Array<Start> = Array::with_len(LAUNCHES);
/// Launches' ends at their slot, per SM: when the first thread of the last block to end there
/// ended (a store per block, the last one stays). An SM's value older than the slot's start is
/// an earlier launch's.
pub(super) static ENDS: PerCpuArray<u64> =
    PerCpuArray::with_shards(LAUNCHES, Shards::new(1, SM_SHARDS));
/// Launches by `%gridid`: how many times they ran (a CUDA graph's kernel node keeps its grid id
/// at every replay; the maps then hold its last replay's times). A launch missing here (the
/// map full) ran once.
pub(super) static RUNS: HashMap<u64, u64> = HashMap::with_capacity(RUN_KEYS);

/// The first thread of a launch's block 0 records the launch's start: stores only, which the
/// GPU makes without a branch (a search of `RUNS` here, which only that thread would take, was
/// measured to cost a grid-stride saxpy under `counts,timing` 1.39×: its count is made at the
/// exit). Every other thread tests one index and goes on (`&&` does not evaluate its right side
/// when its left is false).
#[probe(device::kernel_entry, crate = crate::egpu_root)]
fn launch_starts(ctx: &KernelCtx) {
    if ctx.thread[0] == 0
        && (ctx.block[0] | ctx.thread[1] | ctx.thread[2] | ctx.block[1] | ctx.block[2]) == 0
    {
        let blocks = ctx.grid_dim[0] as u64 * ctx.grid_dim[1] as u64 * ctx.grid_dim[2] as u64;
        let threads = ctx.block_dim[0] as u64 * ctx.block_dim[1] as u64 * ctx.block_dim[2] as u64;
        let start = egpu_vm::native::ktime_ns();
        let grid = ctx.launch_id;
        let slot = (grid & (LAUNCHES as u64 - 1)) as u32;
        STARTS.set(slot, &Start { grid, kernel: ctx.kernel_id, start, blocks, threads });
    }
}

/// The first thread of each block records, at the launch's slot in its SM's shard, when it
/// ends; that of block 0 first counts the launch's run (so that the end it records comes after
/// that search: measured, a 7.6 µs kernel's end read before it was 5% early).
#[probe(device::kernel_exit, crate = crate::egpu_root)]
fn block_ends(ctx: &KernelCtx) {
    if ctx.thread[0] == 0 && (ctx.thread[1] | ctx.thread[2]) == 0 {
        if (ctx.block[0] | ctx.block[1] | ctx.block[2]) == 0 {
            RUNS.fetch_add(&ctx.launch_id, 1);
        }
        let slot = (ctx.launch_id & (LAUNCHES as u64 - 1)) as u32;
        ENDS.set(slot, &egpu_vm::native::ktime_ns());
    }
}

/// A site of a kernel: the access's index among the kernel's observed accesses, and its class.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Site {
    /// The kernel's id.
    pub kernel: u64,
    /// The access's index among the kernel's observed accesses (`MemAccessCtx::site`).
    pub site: u32,
    /// Its class (`MemAccessCtx::class`).
    pub class: u32,
}

/// What the warp-level requests at a site did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Requests {
    /// Requests: the accesses of the lanes that ran the site together.
    pub requests: u64,
    /// Lanes taking part, summed over the requests.
    pub lanes: u64,
    /// 32-byte sectors the requests touched.
    pub sectors: u64,
    /// The fewest sectors their bytes could have taken (contiguous and aligned; no more than
    /// the sectors touched, where lanes shared addresses).
    pub minimum: u64,
    /// Bytes the lanes moved.
    pub bytes: u64,
    /// Requests whose lanes all read or wrote one address (or a lane alone).
    pub broadcast: u64,
    /// Requests whose lanes stepped through memory by their access's size (unit stride).
    pub unit: u64,
    /// Requests whose lanes stepped by another stride, the same for all.
    pub strided: u64,
    /// Their strides' bytes, summed (over `strided`: the mean stride).
    pub stride_bytes: u64,
    /// Requests whose lanes' addresses had no one stride (a gather or a scatter).
    pub gather: u64,
}

/// The requests per kernel and site.
pub(super) static SITES: HashMap<Site, Requests> = HashMap::with_capacity(SITE_KEYS);

/// Records the request a lane takes part in: every lane computes the warp's figures (the warp
/// helpers work over the lanes running together), the lowest adds them.
#[helper(crate = crate::egpu_root)]
fn request(kernel: u64, site: u32, class: u32, addr: u64, size: u32) {
    let lanes = egpu_vm::native::warp_lanes();
    let sectors = egpu_vm::native::warp_sectors(addr, size);
    let stride = egpu_vm::native::warp_stride(addr);
    let bytes = lanes as u64 * size as u64;
    // Lanes that share addresses (a broadcast, atomics on one counter) touch fewer sectors
    // than their bytes would take apart: such a request takes the fewest it could.
    let mut minimum = (bytes + 31) / 32;
    if (sectors as u64) < minimum {
        minimum = sectors as u64;
    }
    if egpu_vm::native::warp_leader() {
        let key = Site { kernel, site, class };
        SITES.fetch_add_field(&key, |r| &r.requests, 1);
        SITES.fetch_add_field(&key, |r| &r.lanes, lanes as u64);
        SITES.fetch_add_field(&key, |r| &r.sectors, sectors as u64);
        SITES.fetch_add_field(&key, |r| &r.minimum, minimum);
        SITES.fetch_add_field(&key, |r| &r.bytes, bytes);
        if stride == u64::MAX {
            SITES.fetch_add_field(&key, |r| &r.gather, 1);
        } else if stride == 0 {
            SITES.fetch_add_field(&key, |r| &r.broadcast, 1);
        } else if stride == size as u64 {
            SITES.fetch_add_field(&key, |r| &r.unit, 1);
        } else {
            SITES.fetch_add_field(&key, |r| &r.strided, 1);
            SITES.fetch_add_field(&key, |r| &r.stride_bytes, stride);
        }
    }
}

/// Every read of global memory, as a request of the lanes that make it.
#[probe(device::global_load, crate = crate::egpu_root)]
fn pattern_loads(ctx: &MemAccessCtx) {
    request(ctx.kernel_id, ctx.site, ctx.class, ctx.addr, ctx.size);
}

/// Every write of global memory.
#[probe(device::global_store, crate = crate::egpu_root)]
fn pattern_stores(ctx: &MemAccessCtx) {
    request(ctx.kernel_id, ctx.site, ctx.class, ctx.addr, ctx.size);
}

/// Every atomic on global memory.
#[probe(device::global_atomic, crate = crate::egpu_root)]
fn pattern_atomics(ctx: &MemAccessCtx) {
    request(ctx.kernel_id, ctx.site, ctx.class, ctx.addr, ctx.size);
}

/// The `pattern` probes.
pub(super) fn pattern() -> [&'static Probe; 3] {
    [pattern_loads::probe(), pattern_stores::probe(), pattern_atomics::probe()]
}

/// The `counts` probes.
pub(super) fn counts() -> [&'static Probe; 3] {
    [count_loads::probe(), count_stores::probe(), count_atomics::probe()]
}

/// The `timing` probes.
pub(super) fn timing() -> [&'static Probe; 2] {
    [launch_starts::probe(), block_ends::probe()]
}
