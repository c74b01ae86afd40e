use egpu::ebpf::LaunchCtx;

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) {
    egpu::print!("kernel {} grid {}", ctx.kernel_id);
}

fn main() {}
