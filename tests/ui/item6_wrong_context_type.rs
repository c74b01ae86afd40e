// The attach point decides the context's type: a probe that takes another one is refused at its
// parameter's type, naming the type the attach point passes (before, it compiled and failed when
// run, or ran on the wrong bytes where both contexts have the same size).
use egpu::ebpf::{KernelCtx, LaunchCtx, MemAccessCtx};

type Access = MemAccessCtx;

#[egpu::probe(device::global_load)]
fn loads(ctx: &LaunchCtx) -> u64 {
    ctx.kernel_id
}

// `KernelCtx` and `MemAccessCtx` are both 80 bytes: only the type tells them apart.
#[egpu::probe(device::kernel_entry)]
fn entries(ctx: &MemAccessCtx) -> u64 {
    ctx.addr
}

// Another name for the right type is accepted.
#[egpu::probe(device::global_store)]
fn stores(ctx: &Access) -> u64 {
    ctx.addr
}

#[egpu::probe(host::launch::exit)]
fn launches(ctx: &KernelCtx) -> u64 {
    ctx.launch_id
}

fn main() {}
