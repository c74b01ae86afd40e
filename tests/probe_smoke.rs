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

/// A loop of a million iterations: the verifier follows each one, and its budget runs out.
const TOO_COMPLEX_LOOP: u32 = line!() + 5;
#[egpu::probe(user)]
fn too_complex(ctx: &mut Small) -> u64 {
    let mut x = ctx.a;
    // The loop the refusal must name.
    for i in 0..1_000_000u32 {
        x += i as u64;
    }
    x
}

#[test]
fn a_too_complex_refusal_names_the_rust_line() {
    let e = too_complex::probe().program().unwrap_err();
    let egpu::probe::BuildError::Verify(refusal) = &e else { panic!("not a refusal: {e}") };
    assert_eq!(refusal.error.violation, egpu::ebpf::verifier::Violation::TooComplex, "{e}");
    let text = e.to_string();
    println!("{text}");
    let at = format!("the loop at {}:{TOO_COMPLEX_LOOP}:5 [too-complex]", file!());
    assert!(text.contains(&at), "{text}\nshould contain {at}");
    assert!(text.contains("lower the loop's bound"), "{text}");
    assert!(text.contains("instruction "), "the eBPF instruction is still named: {text}");
}

/// A probe whose statements are on lines of their own, a loop and a helper among them.
const LOCATED_START: u32 = line!();
#[egpu::helper]
fn halve(x: u64) -> u64 {
    let h = x / 2;
    h + 1
}

#[egpu::probe(user)]
fn located(ctx: &mut Small) -> u64 {
    let mut sum = 0u64;
    for i in 0..4u32 {
        sum += halve(ctx.a >> i);
    }
    ctx.a = sum;
    sum
}
const LOCATED_END: u32 = line!();

#[test]
fn the_source_map_locates_every_instruction_in_its_function() {
    let probe = located::probe();
    let program = probe.program().unwrap_or_else(|e| panic!("{e}"));
    let map = probe.source_map().unwrap();
    assert_eq!(map.len(), program.insns().len());
    let (helper_let, loop_line) = (LOCATED_START + 3, LOCATED_START + 10);
    let mut lines = Vec::new();
    for pc in 0..map.len() {
        let at = map.statement(pc).unwrap_or_else(|| panic!("instruction {pc} has no location"));
        assert_eq!(at.file, file!(), "instruction {pc}");
        assert!((LOCATED_START..LOCATED_END).contains(&at.line), "instruction {pc} at {at}");
        if let Some(l) = map.enclosing_loop(pc) {
            assert_eq!((l.line, l.column), (loop_line, 5), "instruction {pc} at {at}");
            let in_body = at.line == helper_let || (loop_line..=loop_line + 1).contains(&at.line);
            assert!(in_body, "instruction {pc} at {at} is in the loop at {l}");
        }
        lines.push(at.line);
    }
    assert_eq!(map.loops().len(), 1, "{:?}", map.loops());
    for line in [helper_let, loop_line, loop_line + 1, loop_line + 3, loop_line + 4] {
        assert!(lines.contains(&line), "no instruction from line {line}: {lines:?}");
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Tally {
    fields: [u64; 12],
}

static TALLIES: HashMap<u64, Tally> = HashMap::with_capacity(4);

/// Adds to every field of a 96-byte value, a `fetch_add_field` each: the inserts of a missing
/// key share one buffer of zeros, so eight of them fit the stack (one each would need 768 bytes).
#[egpu::probe(user)]
fn tally(ctx: &mut Small) -> u64 {
    let k = ctx.a & 3;
    TALLIES.fetch_add_field(&k, |t| &t.fields[0], 1);
    TALLIES.fetch_add_field(&k, |t| &t.fields[1], 2);
    TALLIES.fetch_add_field(&k, |t| &t.fields[2], 3);
    TALLIES.fetch_add_field(&k, |t| &t.fields[3], 4);
    TALLIES.fetch_add_field(&k, |t| &t.fields[4], 5);
    TALLIES.fetch_add_field(&k, |t| &t.fields[5], 6);
    TALLIES.fetch_add_field(&k, |t| &t.fields[6], 7);
    TALLIES.fetch_add_field(&k, |t| &t.fields[11], 12);
    0
}

#[test]
fn inserts_of_zero_values_share_one_buffer() {
    let probe = tally::probe();
    let ir = probe.ir().unwrap_or_else(|e| panic!("{e}"));
    let zeros = ir.bufs.iter().filter(|b| b.name == "zero value").count();
    assert_eq!(zeros, 1, "{:?}", ir.bufs);
    let mut vm = probe.vm().unwrap_or_else(|e| panic!("{e}"));
    let mut ctx = Small { a: 6 };
    vm.run_ctx(&mut ctx).unwrap();
    vm.run_ctx(&mut ctx).unwrap();
    let got = TALLIES.get(&2).expect("inserted").fields;
    assert_eq!(got, [2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 24]);
}

static SLOTS: egpu::maps::Array<u64> = egpu::maps::Array::with_len(4);

/// An array's value by index, in place, and what a lookup past the end gives.
#[egpu::probe(user)]
fn slot(ctx: &mut Small) -> u64 {
    let i = ctx.a as u32;
    if let Ok(v) = SLOTS.get(i) { v * 10 } else { 7 }
}

#[test]
fn an_array_is_looked_up_by_index() {
    for (i, v) in [3u64, 5, 8, 13].iter().enumerate() {
        SLOTS.set(i as u32, v).expect("in range");
    }
    let mut vm = slot::probe().vm().unwrap_or_else(|e| panic!("{e}"));
    for (a, expected) in [(0, 30), (3, 130), (4, 7), (u64::from(u32::MAX), 7)] {
        let mut ctx = Small { a };
        assert_eq!(vm.run_ctx(&mut ctx).expect("runs"), expected, "index {a}");
        // The twin, native Rust, says the same.
        assert_eq!(slot(&mut ctx), expected, "twin, index {a}");
    }
}

/// `w` capped at 10, plus 1: the new `w` is set by each branch of an `if` that reads the `w` it
/// shadows.
#[egpu::helper]
fn capped(w: u64) -> u64 {
    let w = if w > 10 { 10 } else { w };
    w + 1
}

/// A `let` whose `if` reads the variable it shadows, in a probe (in a block too) and in a
/// helper: the branches read the old variable, as in Rust (they read the new one, unset,
/// before: a program the verifier refused, or a helper that did not compile).
#[egpu::probe(user)]
fn shadowing(ctx: &mut Small) -> u64 {
    let w = ctx.a;
    let mut out = capped(w);
    if w > 3 {
        let w = if w > 20 { 20 } else { w };
        out += w * 100;
    }
    let w = if w > 30 { 30 } else { w };
    out + w * 10_000
}

#[test]
fn a_let_reads_the_variable_it_shadows() {
    let mut vm = shadowing::probe().vm().unwrap_or_else(|e| panic!("{e}"));
    for (a, expected) in [(2, 20_003), (7, 70_708), (25, 252_011), (99, 302_011)] {
        let mut ctx = Small { a };
        assert_eq!(vm.run_ctx(&mut ctx).expect("runs"), expected, "{a}");
        assert_eq!(shadowing(&mut ctx), expected, "twin, {a}");
    }
}
