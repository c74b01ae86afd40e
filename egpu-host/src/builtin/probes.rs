//! The built-in probes, in Probe Rust. Each map a probe updates is a `static` here, which gives
//! the probe's map table its entry (kind, key and value sizes, capacity, and the name: the
//! static's, whose lowercase is the map's in [`MAPS`](super::MAPS)); the statics' own memory is
//! never written by the programs: [`Builtin::programs`](super::Builtin::programs) binds each
//! entry, by name, to the process's map of that name, in shared memory. (The twins, the
//! functions as native Rust, update the statics: the tests compare the two.)

use bytemuck::{Pod, Zeroable};
use egpu_ebpf::{AllocCtx, LaunchCtx, MemcpyCtx, ModuleLoadCtx, SyncCtx};
use egpu_macros::{helper, probe};
use egpu_maps::{Array, HashMap};
use egpu_probe::Probe;

use super::{
    ALLOCATION_SLOTS, BUCKETS, CAPTURED, COPY_SIZE_SLOTS, COPY_SLOTS, KERNELS, LIVE_ALLOCATIONS,
    MODULE_SLOTS, SHAPE_SLOTS, SYNC_SLOTS,
};

/// An element of the `copies`, `allocations`, `syncs` and `modules` arrays: the calls counted
/// and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub(super) struct Tally {
    /// Calls.
    pub(super) count: u64,
    /// Their bytes.
    pub(super) bytes: u64,
}

static LAUNCHES: HashMap<u64, u64> = HashMap::with_capacity(KERNELS);
static COPIES: Array<Tally> = Array::with_len(COPY_SLOTS);
static ALLOCATIONS: Array<Tally> = Array::with_len(ALLOCATION_SLOTS);
static SYNCS: Array<Tally> = Array::with_len(SYNC_SLOTS);
static MODULES: Array<Tally> = Array::with_len(MODULE_SLOTS);
static SHAPES: Array<u64> = Array::with_len(SHAPE_SLOTS);
static COPY_SIZES: Array<u64> = Array::with_len(COPY_SIZE_SLOTS);
static SIZES: HashMap<u64, u64> = HashMap::with_capacity(LIVE_ALLOCATIONS);
static FREED: Array<u64> = Array::with_len(1);

/// Launches per kernel, those captured into a graph (which run only when the graph is launched)
/// under [`CAPTURED`], graph launches under their kernel id, `u64::MAX`.
#[probe(host::launch, crate = crate::egpu_root)]
fn count_launches(ctx: &LaunchCtx) {
    let kernel = if ctx.flags & LaunchCtx::CAPTURED != 0 { CAPTURED } else { ctx.kernel_id };
    LAUNCHES.fetch_add(&kernel, 1);
}

/// Copies by kind (`MemcpyCtx::kind`, 0–5) and sets at 8 + kind, with their bytes.
#[probe(host::memcpy, crate = crate::egpu_root)]
fn count_copies(ctx: &MemcpyCtx) {
    let set = if ctx.flags & MemcpyCtx::MEMSET != 0 { 8 } else { 0 };
    let at = ctx.kind + set;
    COPIES.fetch_add_field(at, |t| &t.count, 1);
    COPIES.fetch_add_field(at, |t| &t.bytes, ctx.bytes);
}

/// Allocations (at `kind`) and frees (at 4 + `kind`) that succeeded, with their bytes (a free's
/// are 0: [`track_frees`] finds them).
#[probe(host::alloc::exit, crate = crate::egpu_root)]
fn count_allocations(ctx: &AllocCtx) {
    if ctx.result == 0 {
        let at = ctx.op * 4 + ctx.kind;
        ALLOCATIONS.fetch_add_field(at, |t| &t.count, 1);
        ALLOCATIONS.fetch_add_field(at, |t| &t.bytes, ctx.bytes);
    }
}

/// Synchronisations by kind (`SyncCtx::kind`); their bytes stay 0.
#[probe(host::sync, crate = crate::egpu_root)]
fn count_syncs(ctx: &SyncCtx) {
    SYNCS.fetch_add_field(ctx.kind, |t| &t.count, 1);
}

/// Module loads that succeeded, with PTX at 1 and others at 0, with their images' bytes.
#[probe(host::module_load::exit, crate = crate::egpu_root)]
fn count_modules(ctx: &ModuleLoadCtx) {
    if ctx.result == 0 {
        MODULES.fetch_add_field(ctx.has_ptx, |t| &t.count, 1);
        MODULES.fetch_add_field(ctx.has_ptx, |t| &t.bytes, ctx.image_bytes);
    }
}

/// The histogram bucket of `value`: its significant bits (0 for 0, 1 for 1, 2 for 2–3, 3 for
/// 4–7, …, 64), found by halving.
#[helper(crate = crate::egpu_root)]
fn bucket(mut value: u64) -> u32 {
    let mut bits = 0u64;
    if value >> 32 != 0 {
        bits += 32;
        value >>= 32;
    }
    if value >> 16 != 0 {
        bits += 16;
        value >>= 16;
    }
    if value >> 8 != 0 {
        bits += 8;
        value >>= 8;
    }
    if value >> 4 != 0 {
        bits += 4;
        value >>= 4;
    }
    if value >> 2 != 0 {
        bits += 2;
        value >>= 2;
    }
    if value >> 1 != 0 {
        bits += 1;
        value >>= 1;
    }
    (bits + value) as u32
}

/// Launch shapes (not graph launches, nor launches captured into graphs): the blocks of the
/// grid into the histogram at 0, their sum at [`BUCKETS`]; the threads of a block into the
/// histogram at `BUCKETS + 1`, their sum at `2 * BUCKETS + 1`.
#[probe(host::launch, crate = crate::egpu_root)]
fn launch_shapes(ctx: &LaunchCtx) {
    if ctx.kernel_id != u64::MAX && ctx.flags & LaunchCtx::CAPTURED == 0 {
        let blocks = ctx.grid[0] as u64 * ctx.grid[1] as u64 * ctx.grid[2] as u64;
        let threads = ctx.block[0] as u64 * ctx.block[1] as u64 * ctx.block[2] as u64;
        SHAPES.fetch_add(bucket(blocks), 1);
        SHAPES.fetch_add(BUCKETS, blocks);
        SHAPES.fetch_add(BUCKETS + 1 + bucket(threads), 1);
        SHAPES.fetch_add(2 * BUCKETS + 1, threads);
    }
}

/// Copy sizes in bytes, a histogram per kind at `kind * BUCKETS` (sets are left out).
#[probe(host::memcpy, crate = crate::egpu_root)]
fn copy_sizes(ctx: &MemcpyCtx) {
    if ctx.flags & MemcpyCtx::MEMSET == 0 {
        COPY_SIZES.fetch_add(ctx.kind * BUCKETS + bucket(ctx.bytes), 1);
    }
}

/// A successful allocation's size under its address; a successful free of an address found
/// there adds its size to the bytes freed and forgets the address.
#[probe(host::alloc::exit, crate = crate::egpu_root)]
fn track_frees(ctx: &AllocCtx) {
    if ctx.result == 0 {
        if ctx.op == AllocCtx::FREE {
            if let Some(bytes) = SIZES.get(&ctx.ptr) {
                FREED.fetch_add(0, bytes);
                SIZES.remove(&ctx.ptr);
            }
        } else {
            SIZES.insert(&ctx.ptr, &ctx.bytes);
        }
    }
}

/// Every built-in probe, in the order [`Builtin::programs`](super::Builtin::programs) gives them.
pub(super) fn all() -> [&'static Probe; 8] {
    [
        count_launches::probe(),
        count_copies::probe(),
        count_allocations::probe(),
        count_syncs::probe(),
        count_modules::probe(),
        launch_shapes::probe(),
        copy_sizes::probe(),
        track_frees::probe(),
    ]
}

/// The built-in launch counter (the probe `count_launches`, in Probe Rust) as the hand-written
/// eBPF assembly it replaced, for programs that assemble their own: counts in map 0, a hash of
/// `u64` counts by kernel id (launches captured into graphs under [`CAPTURED`]): look up and
/// add; when missing, insert 1 (unless another thread just did: then look up again and add).
/// The tests check that it counts as the probe does.
pub const COUNT_LAUNCHES: &str = "
    ldxdw %r6, [%r1+0]
    ldxw %r7, [%r1+32]
    and %r7, 1
    jeq %r7, 0, keyed
    mov %r6, -2
keyed:
    stxdw [%r10-8], %r6
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, missing
    mov %r1, 1
    lock add [%r0+0], %r1
    ja out
missing:
    stdw [%r10-16], 1
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r3, %r10
    add %r3, -16
    mov %r4, 1
    call 2
    jeq %r0, 0, out
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, out
    mov %r1, 1
    lock add [%r0+0], %r1
out:
    mov %r0, 0
    exit";
