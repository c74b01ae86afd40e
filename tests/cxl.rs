//! The pieces of a slower memory tier's emulation that need no GPU: the delay helper
//! (`egpu_delay_ns`) verified with its bound, run by the CPU VM (a wait counted from a clock
//! read earlier, `egpu_clock`), translated to a spin on `%clock64` (or `%globaltimer` where the
//! SM clock is not known) and injected into a kernel that `ptxas` accepts.

use egpu::ebpf::MemAccessCtx;
use egpu::ebpf::helpers::MAX_DELAY_NS;
use egpu_device::inject::{DeviceProbe, InjectOptions, Kernels, inject, inject_with};
use egpu_device::testing::require_ptxas;
use egpu_test_support::{Rng, read_workspace_file};

/// Each access waits 200 ns: the wait a far memory tier adds.
#[egpu::probe(device::global_load)]
fn far_load(_ctx: &MemAccessCtx) {
    let _waited = egpu::helpers::delay_ns(200);
}

/// What a user probe is asked to wait.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Wait {
    ns: u64,
}

/// A wait the probe computes, capped before the call.
#[egpu::probe(user)]
fn bounded(ctx: &mut Wait) -> u64 {
    let asked = ctx.ns;
    let ns = if asked > 50_000 { 50_000 } else { asked };
    egpu::helpers::delay_ns(ns)
}

/// A wait the probe computes and does not cap: Probe Rust's `delay_ns` caps it at the bound.
#[egpu::probe(user)]
fn uncapped(ctx: &mut Wait) -> u64 {
    egpu::helpers::delay_ns(ctx.ns)
}

/// A wait masked to the bound already: Probe Rust passes it on as it is, with no cap.
#[egpu::probe(user)]
fn masked(ctx: &mut Wait) -> u64 {
    egpu::helpers::delay_ns(ctx.ns & MAX_DELAY_NS)
}

/// Two waits of the same length from one clock read: the second ends at once; the nanoseconds
/// from the read to each wait's end, in the halves of the result.
#[egpu::probe(user)]
fn twice(ctx: &mut Wait) -> u64 {
    let start = egpu::helpers::clock();
    let first = egpu::helpers::delay_ns_since(start, ctx.ns);
    let second = egpu::helpers::delay_ns_since(start, ctx.ns);
    (first << 32) | (second & 0xffff_ffff)
}

#[test]
fn the_delay_helper_is_verified_with_its_bound() {
    // An eBPF program must prove the bound (`tests/verifier/bad_delay_unbounded.s`); Probe
    // Rust's `delay_ns` caps the wait, so every probe proves it.
    for probe in [far_load::probe(), bounded::probe(), uncapped::probe(), masked::probe()] {
        probe.verified().unwrap_or_else(|e| panic!("{e}"));
    }
    // A masked wait has its bound: no cap before the call.
    let words = |p: &egpu::probe::Probe| p.verified().expect("verified").program().to_bytes().len();
    assert!(words(masked::probe()) < words(uncapped::probe()), "the masked wait was capped");
    let program =
        egpu::ebpf::assemble("ldxdw %r1, [%r1+0]\nmov %r2, 0\ncall 65542\nmov %r0, 0\nexit")
            .expect("assembles");
    let attach = egpu::ebpf::AttachPoint::User { ctx_size: 8 };
    let program = egpu::ebpf::Program::new(program, vec![], attach).expect("a program");
    let refused = egpu::ebpf::verifier::verify(&program).expect_err("refused").to_string();
    assert!(refused.contains("unbounded-delay") && refused.contains(&MAX_DELAY_NS.to_string()));
    println!("an unbounded wait: {refused}");
}

#[test]
fn the_cpu_vm_waits_at_least_what_is_asked() {
    let mut vm = bounded::probe().vm().unwrap_or_else(|e| panic!("{e}"));
    for ns in [0, 1_000, 20_000] {
        let passed = vm.run_ctx(&mut Wait { ns }).expect("runs");
        assert!(passed >= ns, "asked {ns} ns, {passed} ns passed");
    }
    // Capped by the probe: 50 µs, however much the caller asks.
    let passed = vm.run_ctx(&mut Wait { ns: u64::MAX }).expect("runs");
    assert!(passed >= 50_000, "{passed}");
    // Capped by `delay_ns` itself: 1 ms.
    let mut vm = uncapped::probe().vm().unwrap_or_else(|e| panic!("{e}"));
    let start = std::time::Instant::now();
    let passed = vm.run_ctx(&mut Wait { ns: u64::MAX }).expect("runs");
    assert!(passed >= MAX_DELAY_NS && start.elapsed().as_secs() < 5, "{passed}");
    // Masked, not capped: 2^20 + 5000 ns asked waits 5000.
    let mut vm = masked::probe().vm().unwrap_or_else(|e| panic!("{e}"));
    let passed = vm.run_ctx(&mut Wait { ns: MAX_DELAY_NS + 5_001 }).expect("runs");
    assert!((5_000..MAX_DELAY_NS / 2).contains(&passed), "{passed}");
    // Waits count from the clock read: two of MAX_DELAY_NS from one read take it once.
    let mut vm = twice::probe().vm().unwrap_or_else(|e| panic!("{e}"));
    let start = std::time::Instant::now();
    let both = vm.run_ctx(&mut Wait { ns: MAX_DELAY_NS }).expect("runs");
    let elapsed = start.elapsed();
    let (first, second) = (both >> 32, both & 0xffff_ffff);
    assert!(first >= MAX_DELAY_NS && second >= first, "{first} then {second} ns");
    // The second ended at once (a second wait would end MAX_DELAY_NS later; the margin is for
    // the thread losing its CPU between them, the machine being busy).
    assert!(second - first < MAX_DELAY_NS / 2, "{first} then {second} ns: waited twice");
    println!("two waits of {MAX_DELAY_NS} ns from one clock read: {elapsed:?} in all");
}

#[test]
fn the_delay_helper_translates_to_a_spin_that_ptxas_accepts() {
    let program = far_load::probe().verified().unwrap_or_else(|e| panic!("{e}"));
    let saxpy = read_workspace_file("tests/ptx/saxpy.ptx");
    let probes = [DeviceProbe { program, kernels: Kernels::All, maps: &[] }];
    // At each of saxpy's two loads: the clock read, then read again until 200 ns have passed.
    // Without the SM's clock, on %globaltimer.
    let timer = inject(&saxpy, &probes).expect("instruments").ptx;
    assert_eq!(timer.matches("min.u64 ").count(), 2, "{timer}");
    assert_eq!(timer.matches(", %globaltimer;").count(), 4, "{timer}");
    assert!(!timer.contains("%clock64"), "{timer}");
    // With it (the H200's 1980 MHz), on %clock64: 396 cycles, converted when translating.
    let options = InjectOptions { sm_clock_khz: Some(1_980_000), ..InjectOptions::default() };
    let cycles = inject_with(&saxpy, &probes, &options).expect("instruments").ptx;
    assert_eq!(cycles.matches(", %clock64;").count(), 4, "{cycles}");
    assert!(!cycles.contains("%globaltimer"), "{cycles}");
    for ptx in [&timer, &cycles] {
        let spin = ptx.find("_Z").expect("a spin");
        assert!(ptx[spin..].contains("setp.lt.u64"), "{ptx}");
    }
    let Some(ptxas) = require_ptxas() else { return };
    for (clock, ptx) in [("%globaltimer", &timer), ("%clock64", &cycles)] {
        let report = ptxas.check(ptx, "sm_90").unwrap_or_else(|e| panic!("{e}\n{ptx}"));
        let registers = report.function("saxpy").and_then(|f| f.registers);
        println!(
            "saxpy with a 200 ns wait at each load on {clock}: ptxas-valid, {registers:?} registers"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Tier policies: the probe's lookup on the CPU VM against a resolver written here.

use egpu::host::cxl::{
    Address, Allocation, Lookup, PAGE_HASH, Policy, Request, Tier, far_access, far_access_capped,
    far_resolver, link_queue,
};

/// The tier's maps are the process's: one test at a time writes them.
static TIER_MAPS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether `addr` is far under `policy` over `allocations`, from the policy's definition: the
/// bytes it names, or with a bitmap of `2^shift`-byte pages, every page those bytes touch.
fn reference(policy: &Policy, allocations: &[Allocation], lookup: Lookup, addr: u64) -> bool {
    let ranges: Vec<(u64, u64)> = match policy {
        // With no tracker to read marks from, nothing.
        Policy::None | Policy::Marked => return false,
        Policy::All => return true,
        Policy::Pages(fraction) => {
            let shift = match lookup {
                Lookup::Bitmap { page_shift } => page_shift,
                Lookup::Ranges => 16,
            };
            let hash = (addr >> shift).wrapping_mul(PAGE_HASH);
            return (hash as f64) < fraction * 2f64.powi(64);
        }
        Policy::AtLeast(n) => {
            allocations.iter().filter(|a| a.size >= *n).map(|a| (a.addr, a.addr + a.size)).collect()
        }
        Policy::Nth(ns) => (1u64..)
            .zip(allocations)
            .filter(|(i, _)| ns.contains(i))
            .map(|(_, a)| (a.addr, a.addr + a.size))
            .collect(),
        Policy::Ranges(rs) => rs.clone(),
    };
    match lookup {
        Lookup::Ranges => ranges.iter().any(|&(a, b)| a <= addr && addr < b),
        Lookup::Bitmap { page_shift } => {
            let page = addr >> page_shift << page_shift;
            let end = page + (1 << page_shift);
            ranges.iter().any(|&(a, b)| a < end && page < b)
        }
    }
}

/// A program's allocations: 40 of 4 KiB to 64 MiB, 2 MiB-aligned, some apart and some
/// back to back, in an order unlike their addresses'.
fn program_allocations(rng: &mut Rng) -> Vec<Allocation> {
    let mut at = 0x7f00_0000_0000u64;
    let mut all: Vec<Allocation> = (0..40)
        .map(|_| {
            let size = 4096 << (rng.next_u64() % 15);
            let a = Allocation { addr: at, size };
            at += size.next_multiple_of(1 << 21) + (rng.next_u64() % 3) * (1 << 21);
            a
        })
        .collect();
    for i in (1..all.len()).rev() {
        all.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    all
}

#[test]
fn tier_policies_resolve_as_their_definition_says() {
    let _maps = TIER_MAPS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut rng = Rng::from_env_salted("tier policies", 0x5eed_cafe_f00d_0001);
    let allocations = program_allocations(&mut rng);
    let (lo, hi) = (
        allocations.iter().map(|a| a.addr).min().expect("allocations") - (1 << 22),
        allocations.iter().map(|a| a.addr + a.size).max().expect("allocations") + (1 << 22),
    );
    let marked: Vec<(u64, u64)> = allocations
        .iter()
        .step_by(3)
        .map(|a| (a.addr + a.size / 4, a.addr + a.size / 2 + 1))
        .collect();
    let policies = [
        Policy::None,
        Policy::All,
        Policy::AtLeast(1 << 20),
        Policy::Nth(vec![1, 2, 7, 19, 40]),
        Policy::Ranges(marked),
        Policy::Pages(0.5),
    ];
    let lookups =
        [Lookup::Ranges, Lookup::Bitmap { page_shift: 16 }, Lookup::Bitmap { page_shift: 21 }];
    let mut vm = far_resolver().vm().unwrap_or_else(|e| panic!("{e}"));
    let (mut cases, mut wrong, mut far) = (0u64, Vec::new(), 0u64);
    for policy in &policies {
        for &lookup in &lookups {
            let tier = Tier::resolve(policy, &allocations, lookup, 300).expect("resolves");
            tier.write().expect("written");
            // Random addresses, and the bytes at and around each allocation's ends.
            let mut addrs: Vec<u64> =
                (0..10_000).map(|_| lo + rng.next_u64() % (hi - lo)).collect();
            for a in &allocations {
                addrs.extend([a.addr - 1, a.addr, a.addr + a.size - 1, a.addr + a.size]);
            }
            for addr in addrs {
                let mut ctx = Address { addr };
                let wait = vm.run_ctx(&mut ctx).expect("runs");
                let expected = reference(policy, &allocations, lookup, addr);
                cases += 1;
                far += u64::from(expected);
                if (wait == 300) != expected
                    || (wait != 0 && wait != 300)
                    || tier.is_far(addr) != expected
                {
                    wrong.push(format!(
                        "{policy} {lookup:?} {addr:#x}: waits {wait}, far {expected}"
                    ));
                }
            }
        }
    }
    println!("tier policy cases: {cases}, {} wrong ({far} far)", wrong.len());
    assert!(wrong.is_empty(), "{:#?}", &wrong[..wrong.len().min(20)]);
    assert!(cases >= 6 * 3 * 10_000 && far > cases / 10 && far < cases * 9 / 10);
}

/// The bandwidth cap's token bucket, run by the CPU VM: requests made back to back on one CPU
/// wait for its link in turn, each its bytes' time after the one before.
#[test]
fn far_requests_wait_for_their_link_in_turn() {
    let _maps = TIER_MAPS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // 10^6 bytes per second per SM (here per CPU): 64 bytes take the link 64 µs.
    let tier = Tier::resolve(&Policy::All, &[], Lookup::Ranges, 0).expect("a tier");
    tier.with_bandwidth(1_000_000).write().expect("written");
    let mut vm = link_queue().vm().unwrap_or_else(|e| panic!("{e}"));
    let cost = 64_000i64;
    // A move to another CPU meets an idle link: tried again, up to five times.
    let mut tries = Vec::new();
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(2)); // every link idle again
        let start = std::time::Instant::now();
        let waits: Vec<(i64, i64)> = (0..6)
            .map(|_| {
                let wait = vm.run_ctx(&mut Request { size: 64 }).expect("runs") as i64;
                (start.elapsed().as_nanos() as i64, wait)
            })
            .collect();
        // The first finds the link idle; request k waits until k requests' time after the
        // first: its wait and the time it was made (taken when the call returns, a first call
        // being slower) a request's time apart from the one before.
        let ends: Vec<i64> = waits.iter().map(|&(at, wait)| at + wait).collect();
        let turns = ends.windows(2).skip(1).all(|w| (w[1] - w[0] - cost).abs() < 5_000);
        if waits[0].1 == 0 && (cost / 2..=cost).contains(&waits[1].1) && turns {
            println!("link waits, 64 B at 1 MB/s: {waits:?} (ns since the first, ns waited)");
            Tier::resolve(&Policy::None, &[], Lookup::Ranges, 0).expect("none").write().expect("w");
            return;
        }
        tries.push(waits);
    }
    panic!("the link's waits are not the requests' turns: {tries:?}");
}

/// `ptx` instrumented with `probes`, their maps at made-up addresses, at the H200's clock.
fn instrumented(ptx: &str, probes: &[&egpu::probe::Probe]) -> String {
    use egpu_device::translate::DeviceMap;
    let programs: Vec<_> =
        probes.iter().map(|p| p.verified().unwrap_or_else(|e| panic!("{e}"))).collect();
    let maps: Vec<Vec<DeviceMap>> = probes
        .iter()
        .map(|p| {
            let maps = p.maps().expect("maps");
            (0u64..)
                .zip(maps)
                .map(|(i, m)| DeviceMap {
                    addr: 0x7e00_0000_0000 + i * 0x100_0000,
                    geometry: *m.geometry(),
                    live: true,
                    spread: 0,
                    drained: false,
                })
                .collect()
        })
        .collect();
    let probes: Vec<DeviceProbe<'_>> = programs
        .iter()
        .zip(&maps)
        .map(|(program, maps)| DeviceProbe { program, kernels: Kernels::All, maps })
        .collect();
    let options = InjectOptions { sm_clock_khz: Some(1_980_000), ..InjectOptions::default() };
    inject_with(ptx, &probes, &options).expect("instruments").ptx
}

#[test]
fn the_far_tier_probes_pass_ptxas() {
    let saxpy = read_workspace_file("tests/ptx/saxpy.ptx");
    let probes = far_access();
    let ptx = instrumented(&saxpy, &probes);
    // At each of 3 accesses: the probe's start, and at each of its two waits (where a few
    // ranges are tested in place, where the others are looked up) the wait's own read (which
    // the start replaces) and the spin's, on the SM's clock.
    assert_eq!(ptx.matches(", %clock64;").count(), 15, "two waits at each of 3 accesses: {ptx}");
    assert!(!ptx.contains("%globaltimer"), "{ptx}");
    // The probes' frames live in registers: no pointer into them is passed down (a `bpf_loop`
    // callback's would put them in local memory, 42x on saxpy on the H200).
    assert!(!ptx.contains(".local"), "the far tier's frames in local memory: {ptx}");
    // With the bandwidth cap: the links' clock is `%globaltimer`, one for all SMs.
    let capped = instrumented(&saxpy, &far_access_capped());
    assert_eq!(capped.matches(", %globaltimer;").count(), 3, "one link per access: {capped}");
    assert!(!capped.contains(".local"), "{capped}");
    // The pointer chase of `examples/cxl_chase.rs`: its load and its two stores, and the two
    // stores of each of its clock readers.
    let chase = read_workspace_file("tests/ptx/chase.ptx");
    let chased = instrumented(&chase, &probes);
    let Some(ptxas) = require_ptxas() else { return };
    for (what, ptx) in [("far tier's probes", &ptx), ("capped far tier's probes", &capped)] {
        let report = ptxas.check(ptx, "sm_90").unwrap_or_else(|e| panic!("{e}"));
        let registers = report.function("saxpy").and_then(|f| f.registers);
        println!("saxpy with the {what}: ptxas-valid, {registers:?} registers");
    }
    ptxas.check(&chased, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    // The kernels of `examples/cxl_slowdown.rs` (softmax, layer norm, matmul), by nvcc.
    let Some(nvcc) = egpu_device::testing::require_nvcc() else { return };
    let cu = egpu_test_support::workspace_path("examples/cxl_kernels.cu");
    let kernels = nvcc.compile_ptx(&cu, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    let probed = instrumented(&kernels, &probes);
    let report = ptxas.check(&probed, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    for k in ["softmax_rows", "layernorm_rows", "matmul"] {
        let registers = report.function(k).and_then(|f| f.registers);
        println!("{k} with the far tier's probes: ptxas-valid, {registers:?} registers");
    }
}
