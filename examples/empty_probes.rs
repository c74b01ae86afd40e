//! A probe pack whose probes do nothing: one at each of `device::global_load`,
//! `device::global_store` and `device::global_atomic`, each returning at once. The zero-code
//! benchmark (`egpu-preload/tests/programs/bench_preload.py`, the GPU bundle's `bench` set) runs
//! its kernels under it beside the `kernel_bytes` pack (examples/kernel_bytes.rs), to tell what
//! the instrumentation costs by itself (the kernels rewritten, a probe's call at every global
//! memory instruction) from what the probes' work costs (their map updates).
//!
//! ```text
//! cargo build --release -p egpu --example empty_probes
//! egpu run --probes target/release/examples/libempty_probes.so -- python3 app.py
//! ```

use egpu::ebpf::MemAccessCtx;

/// Runs at every read of global memory, and does nothing.
#[egpu::probe(device::global_load)]
fn load(_ctx: &MemAccessCtx) {}

/// Runs at every write of global memory, and does nothing.
#[egpu::probe(device::global_store)]
fn store(_ctx: &MemAccessCtx) {}

/// Runs before every atomic on global memory, and does nothing.
#[egpu::probe(device::global_atomic)]
fn atomic(_ctx: &MemAccessCtx) {}

egpu::export_probes!(load, store, atomic);
