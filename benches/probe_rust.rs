//! Probe Rust against hand-written eBPF, for five probes, in one run: instructions generated,
//! and ns per run on the JIT of the generated program, of the hand-written one, and of the
//! probe's native twin. `cargo bench -p egpu --bench probe_rust`.

#[allow(dead_code)]
#[path = "../tests/probe_pairs.rs"]
mod probe_pairs;

use std::hint::black_box;
use std::time::Instant;

use egpu::ebpf::{LaunchCtx, Program, assemble};
use egpu::vm::{EngineChoice, Vm};

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
    let ctx = LaunchCtx {
        kernel_id: 0x5eed,
        stream: 3,
        duration_ns: 70_000,
        grid: [4096, 2, 1],
        block: [512, 1, 1],
        ..Default::default()
    };
    type Twin = fn(&LaunchCtx) -> u64;
    let twins: [(&str, Twin); 5] = [
        ("big_launches", |c| {
            probe_pairs::big_launches(c);
            0
        }),
        ("thread_histogram", |c| {
            probe_pairs::thread_histogram(c);
            0
        }),
        ("slow_launches", |c| {
            probe_pairs::slow_launches(c);
            0
        }),
        ("threads_per_kernel", |c| {
            probe_pairs::threads_per_kernel(c);
            0
        }),
        ("classify", probe_pairs::classify),
    ];
    let rounds = 7;
    let iters = 200_000;
    println!("Probe Rust against hand-written eBPF; ns/run on cpu-jit, medians of {rounds} rounds");
    println!(
        "  {:<20} {:>6} {:>6} {:>6}  {:>9} {:>9} {:>6}  {:>9}",
        "probe", "rust", "hand", "ratio", "rust ns", "hand ns", "ratio", "twin ns"
    );
    let (mut worst_insns, mut worst_time) = (0f64, 0f64);
    for (pair, (twin_name, twin)) in probe_pairs::pairs().into_iter().zip(twins) {
        assert_eq!(pair.name, twin_name);
        let probe = (pair.probe)();
        let rust = probe.program().expect("the Rust probe builds");
        let hand = Program::new(
            assemble(pair.asm).expect("the hand-written probe assembles"),
            (pair.maps)(),
            pair.attach.parse().expect("an attach point"),
        )
        .expect("a valid program");
        let mut rust_vm = probe.vm_with(EngineChoice::Jit).expect("the JIT runs it");
        let hand = egpu::ebpf::verifier::verify(&hand).expect("the hand-written probe verifies");
        let mut hand_vm = Vm::with_engine(&hand, EngineChoice::Jit).expect("on the JIT");
        let hand = hand.program();
        let mut c = ctx;
        let rust_ns = measure(rounds, iters, || rust_vm.run_ctx(black_box(&mut c)).unwrap_or(0));
        let mut c = ctx;
        let hand_ns = measure(rounds, iters, || hand_vm.run_ctx(black_box(&mut c)).unwrap_or(0));
        let twin_ns = measure(rounds, iters, || twin(black_box(&ctx)));
        let insn_ratio = rust.insns().len() as f64 / hand.insns().len() as f64;
        let time_ratio = rust_ns / hand_ns;
        worst_insns = worst_insns.max(insn_ratio);
        worst_time = worst_time.max(time_ratio);
        println!(
            "  {:<20} {:>6} {:>6} {:>6.2}  {:>9.1} {:>9.1} {:>6.2}  {:>9.1}",
            pair.name,
            rust.insns().len(),
            hand.insns().len(),
            insn_ratio,
            rust_ns,
            hand_ns,
            time_ratio,
            twin_ns
        );
    }
    println!("ratio instructions (worst of five) vs hand-written: {worst_insns:.2}");
    println!("ratio cpu-jit time (worst of five) vs hand-written: {worst_time:.2}");
}
