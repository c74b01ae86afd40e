use egpu::ebpf::LaunchCtx;

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) -> u64 {
    let mut n = 0u64;
    #[bound(4)]
    loop {
        n += 1;
        break 5;
    }
    n
}

fn main() {}
