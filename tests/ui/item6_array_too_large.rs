// An array local lives on eBPF's 512-byte stack: one that cannot fit is the macro's error, naming
// the limit (before, rustc's error that `[u64; 100]` is not `Pod`). `[0u32; 128]` (512 bytes)
// fits, and the 3-element array too.
use egpu::ebpf::LaunchCtx;

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) -> u64 {
    let a = [0u64; 100];
    let b = [0; 600];
    let c = [1u32, 2, 3];
    let d = [0u32; 128];
    0
}

fn main() {}
