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
    STATS.fetch_add_field(&ctx.kernel_id, |s| if true { &s.count } else { &s.bytes }, 1);
}

fn main() {}
