//! The registers a kernel was compiled to, read from its cubin (`EIATTR_REGCOUNT`), are what
//! `ptxas` reports; an instrumented kernel told them declares `.maxnreg` and `ptxas` keeps it
//! within, so the kernel keeps its blocks per SM.

use std::collections::BTreeMap;

use egpu_device::cubin;
use egpu_device::image;
use egpu_device::inject::{DeviceProbe, InjectOptions, Kernels, inject_with};
use egpu_device::translate::DeviceMap;
use egpu_ebpf::verifier::{Verified, verify};
use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
use egpu_maps::layout::Geometry;

/// bytes[kernel_id] += size, count[kernel_id] += 1: a sum per field held through the kernel.
const COUNTS: &str = "mov %r9, %r1\nldxdw %r0, [%r9+8]\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\n\
                      mov %r2, %r10\nadd %r2, -8\ncall 1\njeq %r0, 0, out\nmov %r1, 1\n\
                      lock add [%r0], %r1\nldxw %r1, [%r9+16]\nlock add [%r0+8], %r1\nout:\n\
                      mov %r0, 0\nexit";

/// `text` verified at every load and at every store, with map `def`.
fn at_loads_and_stores(text: &str, def: &MapDef) -> Vec<Verified> {
    [DeviceEvent::GlobalLoad, DeviceEvent::GlobalStore]
        .into_iter()
        .map(|e| {
            let insns = assemble(text).expect("assembles");
            let program = Program::new(insns, vec![def.clone()], AttachPoint::Device(e));
            verify(&program.expect("a program")).expect("verified")
        })
        .collect()
}

#[test]
fn registers_read_from_cubins_bound_the_instrumented_kernels() {
    let Some(ptxas) = egpu_device::testing::require_ptxas() else { return };
    let Some(nvcc) = egpu_device::testing::require_nvcc() else { return };
    let kernels = egpu_test_support::workspace_path("tests/kernels");
    let def =
        MapDef { name: "t".into(), kind: MapKind::Hash, key_size: 8, value_size: 16, capacity: 64 };
    let geometry = Geometry::new(MapKind::Hash, 8, 16, 64, 1, 0).expect("a geometry");
    let maps =
        [DeviceMap { addr: 0x7f00_0000_0000, geometry, live: false, spread: 16, drained: false }];
    let programs = at_loads_and_stores(COUNTS, &def);
    let probes: Vec<DeviceProbe<'_>> = programs
        .iter()
        .map(|p| DeviceProbe { program: p, kernels: Kernels::All, maps: &maps })
        .collect();
    let mut bounded = 0;
    for name in ["saxpy", "vectors", "reduce"] {
        let cu = kernels.join(format!("{name}.cu"));
        let ptx = nvcc.compile_ptx(&cu, "sm_90").expect("PTX");
        let (report, cubin) = ptxas.compile(&ptx, "sm_90").expect("ptxas");
        // The cubin's counts are ptxas's, kernel by kernel.
        let counts: BTreeMap<String, u32> =
            cubin::register_counts(&cubin).expect("read").into_iter().collect();
        for f in report.functions.iter().filter(|f| f.entry) {
            assert_eq!(counts.get(&f.name).copied(), f.registers, "{name}: {}", f.name);
        }
        // A fat binary's cubin for sm_90 says the same.
        let fatbin = nvcc.compile_fatbin(&cu, &["-arch=sm_90"]).expect("a fat binary");
        let from_fatbin: BTreeMap<String, u32> =
            image::register_counts(&fatbin, 90).into_iter().collect();
        assert_eq!(
            from_fatbin.keys().collect::<Vec<_>>(),
            counts.keys().collect::<Vec<_>>(),
            "{name}"
        );
        // Instrumented with the counts known: each kernel declares .maxnreg and keeps to it.
        let options = InjectOptions { registers: counts.clone(), ..InjectOptions::default() };
        let injected = inject_with(&ptx, &probes, &options).expect("instruments");
        let after = ptxas.check(&injected.ptx, "sm_90").unwrap_or_else(|e| panic!("{name}: {e}"));
        for f in report.functions.iter().filter(|f| f.entry) {
            let most: u32 = injected
                .ptx
                .lines()
                .find_map(|l| l.trim().strip_prefix(".maxnreg ").and_then(|n| n.parse().ok()))
                .expect(".maxnreg");
            let got = after.function(&f.name).and_then(|g| g.registers).expect("registers");
            assert!(got <= most && most >= counts[&f.name], "{name}: {} {got} > {most}", f.name);
            bounded += 1;
        }
    }
    println!("registers: {bounded} kernels bounded to their blocks per SM");
}

/// A 48-byte record (the access's address, its kernel, the clock) into a ring drained while
/// kernels run, one per warp-level request (`egpu_ringbuf_output_warp`, 0x10005), at every
/// load and store: a `timeline`-like probe.
const RECORD: &str = "mov %r6, %r1\nldxdw %r0, [%r6+0]\nstxdw [%r10-48], %r0\n\
                      ldxdw %r0, [%r6+8]\nstxdw [%r10-40], %r0\ncall 5\nstxdw [%r10-32], %r0\n\
                      stxdw [%r10-24], %r0\nstxdw [%r10-16], %r0\nstxdw [%r10-8], %r0\n\
                      lddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -48\nmov %r3, 48\nmov %r4, 0\n\
                      call 65541\nmov %r0, 0\nexit";

/// [`RECORD`] at every load and store, and its ring, drained while kernels run.
fn recording() -> (Vec<Verified>, [DeviceMap; 1]) {
    let def = MapDef {
        name: "records".into(),
        kind: MapKind::RingBuf,
        key_size: 0,
        value_size: 48,
        capacity: 4096,
    };
    let geometry = Geometry::new(MapKind::RingBuf, 0, 48, 4096, 1, 128).expect("a geometry");
    let ring =
        DeviceMap { addr: 0x7f00_0000_0000, geometry, live: false, spread: 0, drained: true };
    (at_loads_and_stores(RECORD, &def), [ring])
}

#[test]
fn sampled_probes_leave_the_other_warps_copy_as_the_kernel_was() {
    let Some(ptxas) = egpu_device::testing::require_ptxas() else { return };
    let Some(nvcc) = egpu_device::testing::require_nvcc() else { return };
    let Some(nvdisasm) = egpu_device::testing::require_nvdisasm() else { return };
    let (programs, maps) = recording();
    let probes: Vec<DeviceProbe<'_>> = programs
        .iter()
        .map(|p| DeviceProbe { program: p, kernels: Kernels::All, maps: &maps })
        .collect();
    let cu = egpu_test_support::workspace_path("tests/kernels/saxpy.cu");
    let ptx = nvcc.compile_ptx(&cu, "sm_90").expect("PTX");
    let (report, cubin) = ptxas.compile(&ptx, "sm_90").expect("ptxas");
    let counts: BTreeMap<String, u32> =
        cubin::register_counts(&cubin).expect("read").into_iter().collect();
    let bare = report.function("saxpy").and_then(|f| f.registers).expect("saxpy's registers");
    // Every warp recording: more registers than the kernel had.
    let every = inject_with(&ptx, &probes, &InjectOptions::default()).expect("instruments");
    let every = ptxas.check(&every.ptx, "sm_90").expect("compiles");
    let unbound = every.function("saxpy").and_then(|f| f.registers).expect("registers");
    assert!(unbound > bare, "{unbound} <= {bare}");
    // One warp in 32, bound to the kernel's registers' step: the registers kept, and what does
    // not fit spilled in the sampled warps' copy only.
    let options = InjectOptions {
        registers: counts,
        bound_sampled_only: true,
        sampled: Some(egpu_device::inject::WarpSampling {
            probes: vec![0, 1],
            sample: egpu_device::inject::Sample::warps(5),
        }),
        ..InjectOptions::default()
    };
    let injected = inject_with(&ptx, &probes, &options).expect("instruments");
    let text = &injected.ptx;
    let (plain, sampled) = text.split_once("$egpu_sampled:").expect("two copies");
    assert!(!plain.contains("atom.global") && sampled.contains("atom.global"));
    // One record per request by its lowest lane: no group of lanes, no ticket passed.
    assert!(!sampled.contains("shfl.sync"), "a ticket passed between lanes");
    let (after, cubin) = ptxas.compile(text, "sm_90").expect("compiles");
    let got = after.function("saxpy").and_then(|f| f.registers).expect("registers");
    let sass = egpu_device::testing::disassemble(&nvdisasm, &cubin);
    let loads: Vec<usize> = sass
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("LDG.E") && !l.contains("STRONG"))
        .map(|(i, _)| i)
        .collect();
    assert!(loads.len() >= 4 && loads.len().is_multiple_of(2), "{} loads: {sass}", loads.len());
    // The first copy's loads are the first half; no local memory up to its last.
    let plain_end = loads[loads.len() / 2 - 1];
    let local = |l: &&str| l.contains("STL") || l.contains("LDL");
    let spilled_plain = sass.lines().take(plain_end).filter(local).count();
    let spilled = sass.lines().filter(local).count();
    println!(
        "sampled saxpy: {bare} registers bare, {unbound} with every warp recording, {got} with \
         one in 32 bound; local memory instructions {spilled}, {spilled_plain} in the plain copy"
    );
    let most: u32 = (text.lines())
        .find_map(|l| l.trim().strip_prefix(".maxnreg ").and_then(|n| n.parse().ok()))
        .expect(".maxnreg");
    assert!(got <= most, "{got} registers, bound {most}");
    assert_eq!(spilled_plain, 0, "{sass}");
}

/// Drawn again at each turn of a loop, Triton's `wgmma` matmuls keep their `wgmma`s in flight:
/// ptxas serialises none (its C7515 note), and their waits are as many per copy as the
/// kernel's own. Each loop has one head, from which both copies go on.
#[test]
fn turns_keep_wgmma_in_flight() {
    let Some(ptxas) = egpu_device::testing::require_ptxas() else { return };
    let Some(nvdisasm) = egpu_device::testing::require_nvdisasm() else { return };
    let (programs, maps) = recording();
    let probes: Vec<DeviceProbe<'_>> = programs
        .iter()
        .map(|p| DeviceProbe { program: p, kernels: Kernels::All, maps: &maps })
        .collect();
    let options = InjectOptions {
        sampled: Some(egpu_device::inject::WarpSampling {
            probes: vec![0, 1],
            sample: egpu_device::inject::Sample::turns(5),
        }),
        ..InjectOptions::default()
    };
    let waits = |cubin: &[u8]| {
        let sass = egpu_device::testing::disassemble(&nvdisasm, cubin);
        (sass.matches("HGMMA").count(), sass.matches("WARPGROUP.DEPBAR").count())
    };
    for name in ["triton_matmul_tma", "triton_matmul_cp_async"] {
        let path = egpu_test_support::workspace_path(format!("tests/ptx/triton/{name}.ptx"));
        let ptx = std::fs::read_to_string(&path).expect("the corpus");
        let (_, bare) = ptxas.compile(&ptx, "sm_90a").expect("ptxas");
        let injected = inject_with(&ptx, &probes, &options).expect("instruments");
        assert!(injected.ptx.contains("_turns, 2654435769;"), "{name}: not drawn by turns");
        // Their loops start each turn with the warp together: the draw is uniform for ptxas.
        assert!(injected.ptx.contains("_tq, -1;\n\t@%"), "{name}: a divergent draw");
        let (report, cubin) = ptxas.compile(&injected.ptx, "sm_90a").expect("ptxas");
        assert!(!report.stderr.contains("C7515"), "{name}: {}", report.stderr);
        let ((mma, wait), (mma2, wait2)) = (waits(&bare), waits(&cubin));
        println!("{name} by turns: {mma2} wgmma, {wait2} waits (bare: {mma}, {wait})");
        assert!(mma2 == 2 * mma && wait2 <= 2 * wait, "{name}: {mma2} wgmma, {wait2} waits");
    }
}

/// `PAGES.fetch_add(&(kernel id, addr >> 21), 1)` as Probe Rust makes it (the `pages` set's):
/// look up; when missing, insert a zero and look up again; add.
const PAGES: &str = "mov %r9, %r1\nldxdw %r0, [%r9+8]\nstxdw [%r10-16], %r0\n\
    ldxdw %r0, [%r9+0]\nrsh %r0, 21\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\nmov %r2, %r10\n\
    add %r2, -16\ncall 1\njeq %r0, 0, missing\nmov %r1, 1\nlock add [%r0], %r1\nja out\n\
    missing:\nstdw [%r10-24], 0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -16\n\
    mov %r3, %r10\nadd %r3, -24\nmov %r4, 1\ncall 2\nlddw %r1, map[0]\nmov %r2, %r10\n\
    add %r2, -16\ncall 1\njeq %r0, 0, out\nmov %r1, 1\nlock add [%r0], %r1\n\
    out:\nmov %r0, 0\nexit";

/// Deferred misses (`InjectOptions::defer_misses`) in Triton's `cp.async` matmul: every access's
/// count by page keeps its miss for the end of its straight line of code, so no access has a
/// branch, vote or search of its own; each straight line ends with one test of the mask, the
/// probes run again out of line; ptxas compiles it in no more registers than without.
#[test]
fn deferred_misses_leave_the_accesses_without_branches() {
    let Some(ptxas) = egpu_device::testing::require_ptxas() else { return };
    let ptx = std::fs::read_to_string(egpu_test_support::workspace_path(
        "tests/ptx/triton/triton_matmul_cp_async.ptx",
    ))
    .expect("the matmul's PTX");
    let (_, cubin) = ptxas.compile(&ptx, "sm_90a").expect("ptxas");
    let counts: BTreeMap<String, u32> =
        cubin::register_counts(&cubin).expect("read").into_iter().collect();
    let def = MapDef {
        name: "pages".into(),
        kind: MapKind::Hash,
        key_size: 16,
        value_size: 8,
        capacity: 64,
    };
    let geometry = Geometry::new(MapKind::Hash, 16, 8, 64, 1, 0).expect("a geometry");
    let maps =
        [DeviceMap { addr: 0x7f00_0000_0000, geometry, live: false, spread: 0, drained: false }];
    let programs = at_loads_and_stores(PAGES, &def);
    let probes: Vec<DeviceProbe<'_>> = programs
        .iter()
        .map(|p| DeviceProbe { program: p, kernels: Kernels::All, maps: &maps })
        .collect();
    let mut registers = Vec::new();
    let mut texts = Vec::new();
    for defer_misses in [false, true] {
        let options =
            InjectOptions { registers: counts.clone(), defer_misses, ..Default::default() };
        let injected = inject_with(&ptx, &probes, &options).expect("instruments");
        let report = ptxas.check(&injected.ptx, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
        registers.push(report.function("matmul_kernel").and_then(|f| f.registers).expect("regs"));
        texts.push((injected.ptx, injected.sites.len()));
    }
    let ((plain, sites), (deferred, _)) = (&texts[0], &texts[1]);
    // The names egpu declares start with a stem the module does not use (`egpu1x` here: the
    // matmul's PTX names egpu in a comment).
    let stem = deferred
        .split_once("st.local.u64 [%")
        .and_then(|(_, rest)| rest.split_once("_ds+"))
        .map(|(stem, _)| stem.to_owned())
        .expect("a deferred access");
    let kept = deferred.matches(&format!("st.local.u64 [%{stem}_ds+")).count();
    assert_eq!(kept, *sites, "accesses that keep their misses");
    // The kernel's own code, before the stubs: no vote of the lanes at the accesses (those
    // left are the exit's flushes'), and the branches the kernel had plus one test per
    // straight line with a deferred access.
    let (body, stubs) = deferred.split_once(&format!("bra.uni ${stem}_dE")).expect("the stubs");
    let votes = |text: &str| text.matches("vote.sync.all").count();
    assert!(votes(plain) >= votes(body) + kept, "{} votes, {}", votes(plain), votes(body));
    // Conditional branches: an access had two or more of its own (the shortcut, the search);
    // deferred, none, and a straight line one test of the mask.
    let branches =
        |text: &str| text.lines().filter(|l| l.contains("@") && l.contains(" bra")).count();
    let tests = body.matches(&format!("@%{stem}_dq bra ${stem}_dF")).count();
    assert!(tests >= 1 && tests < kept, "{tests} tests for {kept} accesses");
    assert!(
        branches(body) + 2 * kept <= branches(plain),
        "{} conditional branches deferred, {} not",
        branches(body),
        branches(plain)
    );
    assert_eq!(stubs.matches("ld.local.u64").count(), kept, "each access run again once");
    println!(
        "deferred misses: {kept}/{sites} accesses, {tests} tests of the mask; conditional \
         branches outside the stubs {} -> {}; matmul_kernel registers {} -> {}",
        branches(plain),
        branches(body),
        registers[0],
        registers[1]
    );
    assert!(registers[1] <= registers[0], "{registers:?}");
}
