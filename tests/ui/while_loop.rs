use egpu::ebpf::LaunchCtx;
use egpu::maps::HashMap;

static COUNTS: HashMap<u64, u64> = HashMap::with_capacity(8);

fn helper(x: u64) -> u64 {
    x + 1
}

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) -> u64 {
    let mut n = ctx.grid[0];
    while n > 0 {
        n -= 1;
    }
    0
}

fn main() {}
