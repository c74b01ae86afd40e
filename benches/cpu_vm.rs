//! ns per run of a launch probe on each CPU engine, as ratios to native Rust, in one run.
//!
//! The probe (15 instructions, one helper call) computes a launch's thread count from its
//! `LaunchCtx` and samples one launch in 16 with `bpf_get_prandom_u32`. It runs:
//!
//! * as native Rust, the same computation with the same kind of generator;
//! * on rbpf's JIT directly, without egpu (the program needs no legalisation), to show what
//!   egpu's own dispatch adds;
//! * through egpu's JIT and egpu's interpreter.
//!
//! A second probe counts launches per kernel in a hash map (a lookup, then an atomic add on the
//! value in place); it is set against the same update made by native Rust through the map's own
//! API (`HashMap::fetch_add`).
//!
//! Each figure is the median of several rounds. `cargo bench -p egpu --bench cpu_vm`.

use std::cell::Cell;
use std::hint::black_box;
use std::time::Instant;

use egpu::ebpf::verifier::verify;
use egpu::ebpf::{AttachPoint, HostEvent, LaunchCtx, MapDef, MapKind, Phase, Program, assemble};
use egpu::maps::HashMap;
use egpu::vm::{EngineChoice, Vm};
use egpu_test_support::xorshift64star;

const PROBE: &str = "
    ldxw %r2, [%r1+40]
    ldxw %r3, [%r1+44]
    mul %r2, %r3
    ldxw %r3, [%r1+52]
    mul %r2, %r3
    ldxw %r3, [%r1+56]
    mul %r2, %r3
    mov %r6, %r2
    call 7
    and %r0, 15
    jne %r0, 0, skip
    or %r6, 0x40000000
skip:
    mov %r0, %r6
    exit
";

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0x9e37_79b9_7f4a_7c15) };
}

/// The high 32 bits of xorshift64*, the kind of generator `bpf_get_prandom_u32` is.
fn prandom() -> u64 {
    RNG.with(|s| {
        let mut x = s.get();
        let r = xorshift64star(&mut x);
        s.set(x);
        r >> 32
    })
}

fn rbpf_prandom(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    prandom()
}

#[inline(never)]
fn native(ctx: &LaunchCtx) -> u64 {
    let mut threads = u64::from(ctx.grid[0]) * u64::from(ctx.grid[1]);
    threads = threads.wrapping_mul(u64::from(ctx.block[0]));
    threads = threads.wrapping_mul(u64::from(ctx.block[1]));
    if prandom() & 15 == 0 {
        threads |= 0x4000_0000;
    }
    threads
}

/// Median ns per call of `f` over `rounds` rounds of `iters` calls.
fn measure(rounds: usize, iters: u64, mut f: impl FnMut() -> u64) -> f64 {
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let mut acc = 0u64;
            for _ in 0..iters {
                acc = acc.wrapping_add(f());
            }
            black_box(acc);
            start.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[rounds / 2]
}

fn main() {
    let slots = assemble(PROBE).expect("the probe assembles");
    let n = slots.len();
    let program = Program::new(slots, vec![], AttachPoint::Host(HostEvent::Launch, Phase::Enter))
        .expect("valid");
    let mut ctx = LaunchCtx { grid: [128, 32, 1], block: [16, 16, 1], ..Default::default() };

    let verified = verify(&program).expect("verifies");
    let mut jit = Vm::with_engine(&verified, EngineChoice::Jit).expect("JIT");
    let mut interp = Vm::with_engine(&verified, EngineChoice::Interpreter).expect("interpreter");

    let code = program.to_bytes();
    let mut raw = rbpf::EbpfVmRaw::new(Some(&code)).expect("rbpf takes the probe as it is");
    raw.register_helper(7, rbpf_prandom).expect("helper");
    raw.jit_compile().expect("rbpf JIT");

    // Every engine computes the same thread count.
    let want = native(&ctx) & !0x4000_0000;
    let bytes = bytemuck::bytes_of_mut(&mut ctx).to_vec();
    for got in [
        jit.run_ctx(&mut ctx).expect("run"),
        interp.run_ctx(&mut ctx).expect("run"),
        // SAFETY: the probe reads only bytes 40..60 of the 128-byte context.
        unsafe { raw.execute_program_jit(&mut bytes.clone()) }.expect("run"),
    ] {
        assert_eq!(got & !0x4000_0000, want);
    }

    let rounds = 9;
    let native_ns = measure(rounds, 4_000_000, || native(black_box(&ctx)));
    let mut raw_ctx = bytes.clone();
    // SAFETY: as above.
    let rbpf_ns = measure(rounds, 4_000_000, || unsafe {
        raw.execute_program_jit(black_box(&mut raw_ctx)).unwrap_or(0)
    });
    let jit_ns = measure(rounds, 4_000_000, || jit.run_ctx(black_box(&mut ctx)).unwrap_or(0));
    let interp_ns = measure(rounds, 200_000, || interp.run_ctx(black_box(&mut ctx)).unwrap_or(0));

    println!("cpu-vm: launch probe, {n} instructions, 1 helper call; median of {rounds} rounds");
    println!("  {:<22} {:>9} {:>9}", "engine", "ns/run", "vs native");
    for (name, ns) in [
        ("native Rust", native_ns),
        ("rbpf JIT (no egpu)", rbpf_ns),
        ("egpu cpu-jit", jit_ns),
        ("egpu cpu-interpreter", interp_ns),
    ] {
        println!("  {name:<22} {ns:>9.2} {:>8.2}x", ns / native_ns);
    }
    println!("ratio cpu-jit vs native: {:.2}", jit_ns / native_ns);
    println!("ratio cpu-interpreter vs native: {:.2}", interp_ns / native_ns);
    println!("ratio cpu-jit vs rbpf-jit: {:.2}", jit_ns / rbpf_ns);
    map_probe(rounds);
}

/// `counts[kernel_id] += 1` when the kernel is in the map.
const COUNTER: &str = "
    ldxdw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, done
    mov %r1, 1
    lock add [%r0+0], %r1
done:
    mov %r0, 0
    exit
";

fn map_probe(rounds: usize) {
    let counts: HashMap<u64, u64> = HashMap::with_capacity(1024);
    for k in 0..512 {
        counts.insert(&k, &0).expect("room");
    }
    let def = MapDef {
        name: "counts".into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 8,
        capacity: 1024,
    };
    let attach = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
    let program =
        Program::new(assemble(COUNTER).expect("assembles"), vec![def], attach).expect("valid");
    let maps = [counts.raw().clone()];
    let verified = verify(&program).expect("verifies");
    let mut jit = Vm::with_maps(&verified, &maps, EngineChoice::Jit).expect("JIT");
    let mut interp = Vm::with_maps(&verified, &maps, EngineChoice::Interpreter).expect("interp");
    let mut ctx = LaunchCtx { kernel_id: 77, ..Default::default() };
    let native_ns = measure(rounds, 2_000_000, || counts.fetch_add(black_box(&77), 1).unwrap_or(0));
    let jit_ns = measure(rounds, 2_000_000, || jit.run_ctx(black_box(&mut ctx)).unwrap_or(0));
    let interp_ns = measure(rounds, 200_000, || interp.run_ctx(black_box(&mut ctx)).unwrap_or(0));
    assert!(counts.get(&77).expect("present") > 4_000_000, "the probe counted");
    println!(
        "\nmap probe: lookup + atomic add on a hash map of 512 keys; median of {rounds} rounds"
    );
    println!("  {:<28} {:>9} {:>9}", "engine", "ns/run", "vs native");
    for (name, ns) in [
        ("native HashMap::fetch_add", native_ns),
        ("egpu cpu-jit", jit_ns),
        ("egpu cpu-interpreter", interp_ns),
    ] {
        println!("  {name:<28} {ns:>9.2} {:>8.2}x", ns / native_ns);
    }
    println!("ratio map-probe cpu-jit vs native map update: {:.2}", jit_ns / native_ns);
}
