// Probe Rust has no heap: `Vec::new()`, `Box::new(..)`, `vec![..]` are the macro's errors, at
// the user's tokens (before, rustc's errors about traits and paths).
use egpu::ebpf::LaunchCtx;

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) -> u64 {
    let v = Vec::new();
    let b = Box::new(ctx.kernel_id);
    let w = vec![1u64, 2];
    let m = u64::max(ctx.kernel_id, 4);
    0
}

fn main() {}
