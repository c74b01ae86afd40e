use egpu::ebpf::LaunchCtx;
use egpu::maps::HashMap;

static COUNTS: HashMap<u64, u64> = HashMap::with_capacity(8);

fn helper(x: u64) -> u64 {
    x + 1
}

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) -> u64 {
    match ctx.grid[0] {
        n if n > 4 => 1,
        _ => 0,
    }
}

fn main() {}
