use egpu::ebpf::LaunchCtx;

#[egpu::helper]
fn threads(ctx: &LaunchCtx) -> u64 {
    0
}

fn main() {}
