//! The registers a kernel was compiled to, read from its cubin (`EIATTR_REGCOUNT`), are what
//! `ptxas` reports; an instrumented kernel told them declares `.maxnreg` and `ptxas` keeps it
//! within, so the kernel keeps its blocks per SM.

use std::collections::BTreeMap;

use egpu_device::cubin;
use egpu_device::image;
use egpu_device::inject::{DeviceProbe, InjectOptions, Kernels, inject_with};
use egpu_device::translate::DeviceMap;
use egpu_ebpf::verifier::verify;
use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
use egpu_maps::layout::Geometry;

/// bytes[kernel_id] += size, count[kernel_id] += 1: a sum per field held through the kernel.
const COUNTS: &str = "mov %r9, %r1\nldxdw %r0, [%r9+8]\nstxdw [%r10-8], %r0\nlddw %r1, map[0]\n\
                      mov %r2, %r10\nadd %r2, -8\ncall 1\njeq %r0, 0, out\nmov %r1, 1\n\
                      lock add [%r0], %r1\nldxw %r1, [%r9+16]\nlock add [%r0+8], %r1\nout:\n\
                      mov %r0, 0\nexit";

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
    let programs: Vec<_> = [DeviceEvent::GlobalLoad, DeviceEvent::GlobalStore]
        .into_iter()
        .map(|e| {
            let program = Program::new(
                assemble(COUNTS).expect("assembles"),
                vec![def.clone()],
                AttachPoint::Device(e),
            );
            verify(&program.expect("a program")).expect("verified")
        })
        .collect();
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
