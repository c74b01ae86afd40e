use bytemuck::{Pod, Zeroable};
use egpu::ebpf::LaunchCtx;
use egpu::maps::HashMap;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Stats {
    count: u64,
    bytes: u64,
}

static STATS: HashMap<u64, Stats> = HashMap::with_capacity(8);

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) {
    if let Some(s) = STATS.get(&ctx.kernel_id) {
        s.count = 1;
    }
}

fn main() {}
