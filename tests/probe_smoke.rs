use egpu::ebpf::LaunchCtx;
use egpu::maps::HashMap;

static LAUNCHES: HashMap<u64, u64> = HashMap::with_capacity(64);

#[egpu::probe(host::launch)]
fn count_launches(ctx: &LaunchCtx) {
    let threads = ctx.grid[0] as u64 * ctx.block[0] as u64;
    if threads >= 1 << 20 {
        let id = ctx.kernel_id;
        LAUNCHES.fetch_add(&id, 1);
    }
}

#[test]
fn smoke() {
    let probe = count_launches::probe();
    let program = probe.program().unwrap_or_else(|e| panic!("{e}"));
    println!("{}", program.disassemble());
    let mut vm = probe.vm().unwrap();
    let mut ctx =
        LaunchCtx { kernel_id: 7, grid: [1024, 1, 1], block: [1024, 1, 1], ..Default::default() };
    vm.run_ctx(&mut ctx).unwrap();
    vm.run_ctx(&mut ctx).unwrap();
    count_launches(&ctx);
    assert_eq!(LAUNCHES.get(&7), Some(3));
}
