//! The probe pack of the zero-code benchmark (`egpu-preload/tests/programs/bench_preload.py`,
//! the GPU bundle's `bench` set): six probes that count, per kernel, the threads that start and
//! end, the bytes they read and write in global memory, by class of instruction, the atomics,
//! and the threads the host launches. Built as a shared library, it exports its probes as a pack
//! (`egpu::export_probes!`) for the preloaded library. Its twin without work,
//! `examples/empty_probes.rs`, measures what the instrumentation costs by itself.
//!
//! ```text
//! cargo build --release -p egpu --example kernel_bytes
//! egpu run --probes target/release/examples/libkernel_bytes.so --summary /tmp/s -- python3 app.py
//! ```
//!
//! Every map is a `HashMap<u64, u64>` keyed by the kernel id (the FNV-1a hash of the kernel's
//! name, the same on the host and in the kernels), so the summary and `egpu maps PID` print one
//! line per kernel and map: `map LOADED add_kernel 738197504`. The device probes fire at every
//! instruction that touches global memory, once per thread that executes it (a masked-off lane
//! or a false guard executes none), with the bytes it moves ([`MemAccessCtx::size`]) and its
//! class ([`MemAccessCtx::class`]):
//!
//! - `LOADED`: bytes read by `ld`/`ldu` (a vector access counts all its bytes) and
//!   `cp.async.bulk` into shared memory; `ASYNC`: bytes read by `cp.async` (0 for a copy whose
//!   `src-size` is 0, as Triton's pipeline stages past the loop's end). Every access updates one
//!   map, so a thread's successive updates at a site add to one value, and the kernel combines
//!   them in the thread's registers until it exits (the key, the kernel's id, is the same at
//!   every access).
//! - `STORED`: bytes written by `st`, bulk copies to global memory and tensor map writes
//!   (`tensormap.cp_fenceproxy`, 128 bytes each).
//! - `TENSOR_LOADS`, `TENSOR_STORES`: tensor memory accelerator (TMA) copies,
//!   `cp.async.bulk.tensor`, counted (one per copy, in the thread that issues it), and
//!   `TENSOR_LOADED`, `TENSOR_STORED`, the bytes they move: their tensor map's box, which the
//!   preloaded library learns when the program encodes the map (0 for a map built on the
//!   device; see `egpu::device::inject::tensor_maps`).
//! - `ATOMIC`, `ATOMICS`: the bytes of the operands of `atom` and `red` on global memory
//!   (`device::global_atomic`), and how many there were.
//!
//! A probe branches on the class, a constant at each site, so each site runs only its class's
//! updates.

use egpu::ebpf::{KernelCtx, LaunchCtx, MemAccessCtx};
use egpu::maps::HashMap;

/// Threads that started, per kernel, counted inside the kernels.
static ENTERED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Threads that reached an exit of the kernel, per kernel.
static EXITED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Bytes read from global memory by `ld`/`ldu` and bulk copies, per kernel.
static LOADED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Bytes written to global memory, every class (`st`, bulk copies, tensor maps), per kernel.
static STORED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Bytes read by `cp.async` (class `ASYNC_COPY`), per kernel.
static ASYNC: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Tensor copies from global memory (`cp.async.bulk.tensor` loads), per kernel.
static TENSOR_LOADS: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Bytes they read: their boxes' (0 for a copy whose tensor map egpu did not see encoded).
static TENSOR_LOADED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Tensor copies to global memory (`cp.async.bulk.tensor` stores and reductions), per kernel.
static TENSOR_STORES: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Bytes they write.
static TENSOR_STORED: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Bytes of the operands of atomics on global memory (`atom`, `red`), per kernel.
static ATOMIC: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Atomics on global memory, per kernel.
static ATOMICS: HashMap<u64, u64> = HashMap::with_capacity(1024);
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

/// Runs at every read of global memory a thread executes.
#[egpu::probe(device::global_load)]
fn loaded(ctx: &MemAccessCtx) {
    if ctx.class == MemAccessCtx::TENSOR_COPY {
        TENSOR_LOADS.fetch_add(&ctx.kernel_id, 1);
        TENSOR_LOADED.fetch_add(&ctx.kernel_id, ctx.size as u64);
    } else if ctx.class == MemAccessCtx::ASYNC_COPY {
        ASYNC.fetch_add(&ctx.kernel_id, ctx.size as u64);
    } else {
        LOADED.fetch_add(&ctx.kernel_id, ctx.size as u64);
    }
}

/// Runs at every write of global memory a thread executes (atomics aside).
#[egpu::probe(device::global_store)]
fn stored(ctx: &MemAccessCtx) {
    if ctx.class == MemAccessCtx::TENSOR_COPY {
        TENSOR_STORES.fetch_add(&ctx.kernel_id, 1);
        TENSOR_STORED.fetch_add(&ctx.kernel_id, ctx.size as u64);
    } else {
        STORED.fetch_add(&ctx.kernel_id, ctx.size as u64);
    }
}

/// Runs before every atomic on global memory a thread executes.
#[egpu::probe(device::global_atomic)]
fn atomic(ctx: &MemAccessCtx) {
    ATOMIC.fetch_add(&ctx.kernel_id, ctx.size as u64);
    ATOMICS.fetch_add(&ctx.kernel_id, 1);
}

/// Runs at every kernel launch the program makes.
#[egpu::probe(host::launch)]
fn launched(ctx: &LaunchCtx) {
    let blocks = ctx.grid[0] as u64 * ctx.grid[1] as u64 * ctx.grid[2] as u64;
    let threads = blocks * ctx.block[0] as u64 * ctx.block[1] as u64 * ctx.block[2] as u64;
    LAUNCHED.fetch_add(&ctx.kernel_id, threads);
}

egpu::export_probes!(entered, exited, loaded, stored, atomic, launched);
