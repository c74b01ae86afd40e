//! A probe pack that traces every block of every kernel as it starts: one record per block
//! (the kernel, the launch, the block's linear index, the SM it runs on) into a ring buffer,
//! written on the GPU and drained into the ring in shared memory while the kernels run, where
//! any process reads it (`RingBuf::open_shared("egpu-<pid>-STARTS")`). A host probe counts the
//! blocks each kernel launches and a device probe the blocks it traced, so the records can be
//! checked against them: `TRACED` equals `BLOCKS` for every instrumented kernel, and, with no
//! drops, the summary's `drained` equals the sum of `TRACED`.
//!
//! ```text
//! cargo build --release -p egpu --example block_trace
//! egpu run --probes target/release/examples/libblock_trace.so --summary /tmp/s -- python3 app.py
//! ```

use egpu::ebpf::{KernelCtx, LaunchCtx};
use egpu::maps::{HashMap, RingBuf};

/// A block's start: the kernel id, the launch id, the block's linear index, its SM.
static STARTS: RingBuf<[u64; 4]> = RingBuf::with_capacity(1 << 18);
/// Blocks traced, per kernel, counted on the GPU beside the records.
static TRACED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Blocks launched, per kernel, counted on the host.
static BLOCKS: HashMap<u64, u64> = HashMap::with_capacity(1024);

/// Runs first thing in every thread of every instrumented kernel; the block's first thread
/// writes the record.
#[egpu::probe(device::kernel_entry)]
fn block_start(ctx: &KernelCtx) {
    if ctx.thread[0] == 0 && ctx.thread[1] == 0 && ctx.thread[2] == 0 {
        let rows = ctx.block[2] as u64 * ctx.grid_dim[1] as u64 + ctx.block[1] as u64;
        let linear = rows * ctx.grid_dim[0] as u64 + ctx.block[0] as u64;
        STARTS.output(&[ctx.kernel_id, ctx.launch_id, linear, ctx.sm as u64]);
        TRACED.fetch_add(&ctx.kernel_id, 1);
    }
}

/// Runs at every kernel launch the program makes.
#[egpu::probe(host::launch)]
fn launched(ctx: &LaunchCtx) {
    let blocks = ctx.grid[0] as u64 * ctx.grid[1] as u64 * ctx.grid[2] as u64;
    BLOCKS.fetch_add(&ctx.kernel_id, blocks);
}

egpu::export_probes!(block_start, launched);
