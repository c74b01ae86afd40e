//! Five probes written twice: in Probe Rust, and by hand in eBPF assembly, the way an engineer
//! would write them. `tests/probe_golden.rs` keeps the Rust probes' generated code under review,
//! and `benches/probe_rust.rs` sets their instruction counts and run times against the hand
//! written ones. (A module of those two targets, not a test of its own.)

use bytemuck::{Pod, Zeroable};
use egpu::ebpf::{LaunchCtx, MapDef, MapKind};
use egpu::maps::{Array, HashMap, RingBuf};
use egpu::probe::Probe;

/// Launches per kernel, for launches of at least 2^20 threads.
pub(crate) static BIG_LAUNCHES: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Launches by log2 of their thread count.
pub(crate) static THREAD_LOG2: Array<u64> = Array::with_len(64);
/// Slow launches.
pub(crate) static SLOW: RingBuf<Slow> = RingBuf::with_capacity(1024);
/// Threads per kernel.
pub(crate) static THREADS: HashMap<u64, u64> = HashMap::with_capacity(1024);

/// A slow launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub(crate) struct Slow {
    pub(crate) kernel: u64,
    pub(crate) duration_ns: u64,
}

/// Counts launches of at least 2^20 threads (grid.x * block.x) per kernel.
#[egpu::probe(host::launch)]
pub(crate) fn big_launches(ctx: &LaunchCtx) {
    let threads = ctx.grid[0] as u64 * ctx.block[0] as u64;
    if threads >= 1 << 20 {
        let id = ctx.kernel_id;
        BIG_LAUNCHES.fetch_add(&id, 1);
    }
}

/// A histogram of launches by log2 of their thread count.
#[egpu::probe(host::launch)]
pub(crate) fn thread_histogram(ctx: &LaunchCtx) {
    let threads = ctx.grid[0] as u64 * ctx.grid[1] as u64 * ctx.block[0] as u64;
    let mut log2 = 0u32;
    for i in 0..6u32 {
        let shift = 32 >> i;
        if threads >> (log2 + shift) != 0 {
            log2 += shift;
        }
    }
    THREAD_LOG2.fetch_add(log2, 1);
}

/// Launches that took more than 50 µs, to a ring buffer.
#[egpu::probe(host::launch::exit)]
pub(crate) fn slow_launches(ctx: &LaunchCtx) {
    if ctx.duration_ns > 50_000 {
        SLOW.output(&Slow { kernel: ctx.kernel_id, duration_ns: ctx.duration_ns });
    }
}

/// Threads per kernel, all launches.
#[egpu::probe(host::launch)]
pub(crate) fn threads_per_kernel(ctx: &LaunchCtx) {
    let blocks = ctx.grid[0] as u64 * ctx.grid[1] as u64 * ctx.grid[2] as u64;
    let per_block = ctx.block[0] as u64 * ctx.block[1] as u64 * ctx.block[2] as u64;
    let id = ctx.kernel_id;
    THREADS.fetch_add(&id, blocks * per_block);
}

/// Classifies a launch (the result): 0 small, 1 large, 2 huge, with the stream's low bit.
#[egpu::probe(host::launch)]
pub(crate) fn classify(ctx: &LaunchCtx) -> u64 {
    let threads = ctx.grid[0] as u64 * ctx.block[0] as u64;
    let class = if threads < 1 << 16 {
        0
    } else if threads < 1 << 20 {
        1
    } else {
        2
    };
    class << 1 | ctx.stream & 1
}

/// One probe, twice.
pub(crate) struct Pair {
    pub(crate) name: &'static str,
    pub(crate) probe: fn() -> &'static Probe,
    /// The hand-written eBPF.
    pub(crate) asm: &'static str,
    /// The hand-written eBPF's map table.
    pub(crate) maps: fn() -> Vec<MapDef>,
    /// Its attach point.
    pub(crate) attach: &'static str,
}

fn def(name: &str, kind: MapKind, key: u32, value: u32, entries: u32) -> MapDef {
    MapDef { name: name.into(), kind, key_size: key, value_size: value, capacity: entries }
}

/// The five pairs.
pub(crate) fn pairs() -> Vec<Pair> {
    vec![
        Pair {
            name: "big_launches",
            probe: big_launches::probe,
            attach: "host::launch::enter",
            maps: || vec![def("big_launches", MapKind::Hash, 8, 8, 1024)],
            asm: "
                ldxw %r2, [%r1+40]
                ldxw %r3, [%r1+52]
                mul %r2, %r3
                jlt %r2, 0x100000, done
                ldxdw %r2, [%r1+0]
                stxdw [%r10-8], %r2
                lddw %r1, map[0]
                mov %r2, %r10
                add %r2, -8
                call 1
                jne %r0, 0, add
                stdw [%r10-16], 0
                lddw %r1, map[0]
                mov %r2, %r10
                add %r2, -8
                mov %r3, %r10
                add %r3, -16
                mov %r4, 1
                call 2
                lddw %r1, map[0]
                mov %r2, %r10
                add %r2, -8
                call 1
                jeq %r0, 0, done
            add:
                mov %r1, 1
                lock add [%r0+0], %r1
            done:
                mov %r0, 0
                exit",
        },
        Pair {
            name: "thread_histogram",
            probe: thread_histogram::probe,
            attach: "host::launch::enter",
            maps: || vec![def("thread_log2", MapKind::Array, 4, 8, 64)],
            asm: "
                ldxw %r2, [%r1+40]
                ldxw %r3, [%r1+44]
                mul %r2, %r3
                ldxw %r3, [%r1+52]
                mul %r2, %r3
                mov %r4, 0
                mov %r5, 32
            step:
                mov %r3, %r2
                mov %r1, %r4
                add %r1, %r5
                rsh %r3, %r1
                jeq %r3, 0, next
                add %r4, %r5
            next:
                rsh %r5, 1
                jne %r5, 0, step
                stxw [%r10-4], %r4
                lddw %r1, map[0]
                mov %r2, %r10
                add %r2, -4
                call 1
                jeq %r0, 0, done
                mov %r1, 1
                lock add [%r0+0], %r1
            done:
                mov %r0, 0
                exit",
        },
        Pair {
            name: "slow_launches",
            probe: slow_launches::probe,
            attach: "host::launch::exit",
            maps: || vec![def("slow", MapKind::RingBuf, 0, 16, 1024)],
            asm: "
                ldxdw %r2, [%r1+32]
                jle %r2, 50000, done
                stxdw [%r10-8], %r2
                ldxdw %r2, [%r1+0]
                stxdw [%r10-16], %r2
                lddw %r1, map[0]
                mov %r2, %r10
                add %r2, -16
                mov %r3, 16
                mov %r4, 0
                call 130
            done:
                mov %r0, 0
                exit",
        },
        Pair {
            name: "threads_per_kernel",
            probe: threads_per_kernel::probe,
            attach: "host::launch::enter",
            maps: || vec![def("threads", MapKind::Hash, 8, 8, 1024)],
            asm: "
                ldxw %r6, [%r1+40]
                ldxw %r2, [%r1+44]
                mul %r6, %r2
                ldxw %r2, [%r1+48]
                mul %r6, %r2
                ldxw %r2, [%r1+52]
                mul %r6, %r2
                ldxw %r2, [%r1+56]
                mul %r6, %r2
                ldxw %r2, [%r1+60]
                mul %r6, %r2
                ldxdw %r2, [%r1+0]
                stxdw [%r10-8], %r2
                lddw %r1, map[0]
                mov %r2, %r10
                add %r2, -8
                call 1
                jne %r0, 0, add
                stdw [%r10-16], 0
                lddw %r1, map[0]
                mov %r2, %r10
                add %r2, -8
                mov %r3, %r10
                add %r3, -16
                mov %r4, 1
                call 2
                lddw %r1, map[0]
                mov %r2, %r10
                add %r2, -8
                call 1
                jeq %r0, 0, done
            add:
                lock add [%r0+0], %r6
            done:
                mov %r0, 0
                exit",
        },
        Pair {
            name: "classify",
            probe: classify::probe,
            attach: "host::launch::enter",
            maps: Vec::new,
            asm: "
                ldxw %r2, [%r1+40]
                ldxw %r3, [%r1+52]
                mul %r2, %r3
                mov %r0, 0
                jlt %r2, 0x10000, tag
                mov %r0, 2
                jlt %r2, 0x100000, tag
                mov %r0, 4
            tag:
                ldxdw %r2, [%r1+16]
                and %r2, 1
                or %r0, %r2
                exit",
        },
    ]
}
