use egpu::ebpf::LaunchCtx;

// serde's spelling, a string, is refused: the path is written as a path.
#[egpu::probe(host::launch, crate = "::egpu")]
fn quoted(ctx: &LaunchCtx) -> u64 {
    ctx.kernel_id
}

#[egpu::helper(crate = 42)]
fn not_a_path(x: u64) -> u64 {
    x + 1
}

fn main() {
    // The probe's stub stands in: no error here.
    let _ = quoted::probe();
}
