use egpu::ebpf::LaunchCtx;

#[egpu::probe(host::launch)]
fn probe(ctx: &LaunchCtx) {
    let x = ctx.kernel_id;
    egpu::print!("{}{}{}{}{}{}{}", x, x, x, x, x, x, x);
}

fn main() {}
