//! A crate of probes for unmodified programs: built as a shared library, it exports its probes
//! as a pack (`egpu::export_probes!`), which egpu's preloaded library loads.
//!
//! ```text
//! cargo build --release -p egpu --example probes
//! egpu run --probes target/release/examples/libprobes.so --summary /tmp/s -- python3 train.py
//! ```
//!
//! `threads` runs first thing in every thread of every kernel of every module the program loads
//! with PTX (Triton's, for one), and counts the threads each kernel starts; `launches` counts
//! each kernel's launches on the host. Both maps are in shared memory while the program runs
//! (`egpu maps PID`), and in the summary it writes when it exits (`map THREADS add_kernel 917504`).

use egpu::ebpf::{KernelCtx, LaunchCtx};
use egpu::maps::HashMap;

/// Threads started per kernel (by kernel id), counted inside the kernels.
static THREADS: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Launches per kernel, counted on the host.
static LAUNCHES: HashMap<u64, u64> = HashMap::with_capacity(1024);

/// Runs in every thread of every instrumented kernel, as it starts.
#[egpu::probe(device::kernel_entry)]
fn threads(ctx: &KernelCtx) {
    THREADS.fetch_add(&ctx.kernel_id, 1);
}

/// Runs at every kernel launch the program makes.
#[egpu::probe(host::launch)]
fn launches(ctx: &LaunchCtx) {
    LAUNCHES.fetch_add(&ctx.kernel_id, 1);
}

egpu::export_probes!(threads, launches);
