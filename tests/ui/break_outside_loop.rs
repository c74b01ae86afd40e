use egpu::ebpf::LaunchCtx;

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) -> u64 {
    if ctx.grid[0] > 1 {
        break;
    }
    0
}

fn main() {}
