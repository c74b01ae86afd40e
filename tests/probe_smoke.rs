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

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Small {
    a: u64,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Big {
    data: [u64; 32],
}

static BIGS: HashMap<u64, Big> = HashMap::with_capacity(4);

#[egpu::helper]
fn ping(x: u64) -> u64 {
    if x > 0 { pong(x - 1) } else { 0 }
}

#[egpu::helper]
fn pong(x: u64) -> u64 {
    ping(x)
}

/// Helpers that call each other in a cycle cannot be inlined.
#[egpu::probe(user)]
fn cyclic(ctx: &mut Small) -> u64 {
    ping(ctx.a)
}

/// Two 256-byte structs do not fit eBPF's 512-byte stack.
#[egpu::probe(user)]
fn too_much_stack(ctx: &mut Small) {
    let first = Big { data: [0; 32] };
    let second = Big { data: [1; 32] };
    BIGS.insert(&ctx.a, &first);
    BIGS.insert(&ctx.a, &second);
}

#[test]
fn cycles_of_helpers_are_refused_when_the_probe_is_built() {
    let e = cyclic::probe().program().unwrap_err();
    assert_eq!(
        e.to_string(),
        "helper `ping` is inlined more than 16 deep: helpers cannot call each other in a cycle"
    );
}

#[test]
fn a_frame_over_512_bytes_names_the_largest_locals() {
    let e = too_much_stack::probe().program().unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with("the probe needs"), "{text}");
    assert!(text.contains("`first` (256 bytes), `second` (256 bytes)"), "{text}");
}

/// Prints from a probe and from its twin read the same.
#[egpu::probe(user)]
fn printing(ctx: &mut Small) {
    let half = ctx.a / 2;
    egpu::print!("a = {}, half = {:#x}, neg = {}", ctx.a, half, -(ctx.a as i64));
    if ctx.a > 100 {
        egpu::print!("big {{ {} }}", ctx.a);
    }
}

#[test]
fn prints_reach_the_host_formatted() {
    let mut vm = printing::probe().vm().unwrap();
    for a in [7u64, 300] {
        let mut ctx = Small { a };
        vm.run_ctx(&mut ctx).unwrap();
        printing(&mut ctx);
    }
    assert_eq!(
        egpu::probe::prints(),
        [
            "a = 7, half = 0x3, neg = -7",
            "a = 7, half = 0x3, neg = -7",
            "a = 300, half = 0x96, neg = -300",
            "big { 300 }",
            "a = 300, half = 0x96, neg = -300",
            "big { 300 }",
        ]
    );
}

static BLOCKS_PER_SM: egpu::maps::Array<u64> = egpu::maps::Array::with_len(132);

/// A device probe: the context has the thread's ids; counts blocks started per SM.
#[egpu::probe(device::kernel_entry)]
fn blocks_per_sm(ctx: &egpu::ebpf::KernelCtx) {
    if ctx.thread[0] == 0 && ctx.thread[1] == 0 && ctx.thread[2] == 0 {
        BLOCKS_PER_SM.fetch_add(ctx.sm, 1);
    }
}

#[test]
fn device_probes_read_thread_ids_and_run_on_the_cpu_too() {
    let probe = blocks_per_sm::probe();
    assert_eq!(probe.program().unwrap().attach_point().to_string(), "device::kernel_entry");
    let mut vm = probe.vm().unwrap();
    for (sm, thread) in [(3, [0, 0, 0]), (3, [1, 0, 0]), (7, [0, 0, 0]), (3, [0, 0, 0])] {
        let mut ctx = egpu::ebpf::KernelCtx { sm, thread, ..Default::default() };
        vm.run_ctx(&mut ctx).unwrap();
    }
    assert_eq!((BLOCKS_PER_SM.get(3).unwrap(), BLOCKS_PER_SM.get(7).unwrap()), (2, 1));
}
