use egpu::ebpf::LaunchCtx;
use egpu::maps::HashMap;

static COUNTS: HashMap<u64, u64> = HashMap::with_capacity(8);

fn helper(x: u64) -> u64 {
    x + 1
}

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) -> u64 {
    let a = [1u64, 2, 3];
    let i = ctx.grid[0] as usize & 1;
    a[i]
}

fn main() {}
