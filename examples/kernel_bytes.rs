//! The probe pack of the zero-code benchmark (`egpu-preload/tests/programs/bench_preload.py`,
//! the GPU bundle's `bench` set): five probes that count, per kernel, the threads that start and
//! end, the bytes they load and store, and the threads the host launches. Built as a shared
//! library, it exports its probes as a pack (`egpu::export_probes!`) for the preloaded library.
//!
//! ```text
//! cargo build --release -p egpu --example kernel_bytes
//! egpu run --probes target/release/examples/libkernel_bytes.so --summary /tmp/s -- python3 app.py
//! ```
//!
//! Every map is a `HashMap<u64, u64>` keyed by the kernel id (the FNV-1a hash of the kernel's
//! name, the same on the host and in the kernels), so the summary and `egpu maps PID` print one
//! line per kernel and map: `map LOADED add_kernel 738197504`. What the device probes see is
//! what egpu observes today: every thread's entry and exit, and every `ld`/`st` to global
//! memory a thread executes (a masked-off lane executes none), with its size in bytes (a
//! vector access counts all its bytes); atomics and asynchronous copies (`cp.async`) are not
//! observed.

use egpu::ebpf::{KernelCtx, LaunchCtx, MemAccessCtx};
use egpu::maps::HashMap;

/// Threads that started, per kernel, counted inside the kernels.
static ENTERED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Threads that reached an exit of the kernel, per kernel.
static EXITED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Bytes read from global memory by `ld` instructions, per kernel.
static LOADED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Bytes written to global memory by `st` instructions, per kernel.
static STORED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Threads launched (grid × block), per kernel, counted on the host.
static LAUNCHED: HashMap<u64, u64> = HashMap::with_capacity(1024);

/// Runs first thing in every thread of every instrumented kernel.
#[egpu::probe(device::kernel_entry)]
fn entered(ctx: &KernelCtx) {
    ENTERED.fetch_add(&ctx.kernel_id, 1);
}

/// Runs before every `ret` and `exit` of every instrumented kernel.
#[egpu::probe(device::kernel_exit)]
fn exited(ctx: &KernelCtx) {
    EXITED.fetch_add(&ctx.kernel_id, 1);
}

/// Runs before every global load a thread executes.
#[egpu::probe(device::global_load)]
fn loaded(ctx: &MemAccessCtx) {
    LOADED.fetch_add(&ctx.kernel_id, ctx.size as u64);
}

/// Runs before every global store a thread executes.
#[egpu::probe(device::global_store)]
fn stored(ctx: &MemAccessCtx) {
    STORED.fetch_add(&ctx.kernel_id, ctx.size as u64);
}

/// Runs at every kernel launch the program makes.
#[egpu::probe(host::launch)]
fn launched(ctx: &LaunchCtx) {
    let blocks = ctx.grid[0] as u64 * ctx.grid[1] as u64 * ctx.grid[2] as u64;
    let threads = blocks * ctx.block[0] as u64 * ctx.block[1] as u64 * ctx.block[2] as u64;
    LAUNCHED.fetch_add(&ctx.kernel_id, threads);
}

egpu::export_probes!(entered, exited, loaded, stored, launched);
