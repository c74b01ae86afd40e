use egpu::ebpf::LaunchCtx;

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) -> u64 {
    let mut n = 0u64;
    #[bound(while)]
    loop {
        n += 1;
    }
    n
}

fn main() {}
