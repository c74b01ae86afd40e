//! The pieces of a slower memory tier's emulation that need no GPU: the delay helper
//! (`egpu_delay_ns`) verified with its bound, run by the CPU VM, translated to a spin on
//! `%globaltimer` and injected into a kernel that `ptxas` accepts.

use egpu::ebpf::MemAccessCtx;
use egpu::ebpf::helpers::MAX_DELAY_NS;
use egpu_device::inject::{DeviceProbe, Kernels, inject};
use egpu_device::testing::require_ptxas;
use egpu_test_support::read_workspace_file;

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

/// A wait the probe computes, capped before the call (in a local: a context field read again
/// in the `else` would not carry the bound).
#[egpu::probe(user)]
fn bounded(ctx: &mut Wait) -> u64 {
    let asked = ctx.ns;
    let ns = if asked > 50_000 { 50_000 } else { asked };
    egpu::helpers::delay_ns(ns)
}

/// A wait the probe computes and does not bound: refused.
#[egpu::probe(user)]
fn unbounded(ctx: &mut Wait) -> u64 {
    egpu::helpers::delay_ns(ctx.ns)
}

#[test]
fn the_delay_helper_is_verified_with_its_bound() {
    assert!(far_load::probe().verified().is_ok());
    bounded::probe().verified().unwrap_or_else(|e| panic!("{e}"));
    let refused = unbounded::probe().verified().expect_err("refused").to_string();
    assert!(refused.contains("egpu_delay_ns") && refused.contains(&MAX_DELAY_NS.to_string()));
    assert!(refused.contains("[unbounded-delay]") && refused.contains("cap it"), "{refused}");
    println!("an unbounded wait: {refused}");
}

#[test]
fn the_cpu_vm_waits_at_least_what_is_asked() {
    let mut vm = bounded::probe().vm().unwrap_or_else(|e| panic!("{e}"));
    for ns in [0, 1_000, 20_000] {
        let mut ctx = Wait { ns };
        let passed = vm.run_ctx(&mut ctx).expect("runs");
        assert!(passed >= ns, "asked {ns} ns, {passed} ns passed");
    }
    // Bounded by the probe: at most 50 µs asked, however much the caller says.
    let mut ctx = Wait { ns: u64::MAX };
    let passed = vm.run_ctx(&mut ctx).expect("runs");
    assert!(passed >= 50_000, "{passed}");
}

#[test]
fn the_delay_helper_translates_to_a_spin_that_ptxas_accepts() {
    let program = far_load::probe().verified().unwrap_or_else(|e| panic!("{e}"));
    let saxpy = read_workspace_file("tests/ptx/saxpy.ptx");
    let probes = [DeviceProbe { program, kernels: Kernels::All, maps: &[] }];
    let ptx = inject(&saxpy, &probes).expect("instruments").ptx;
    // At each of saxpy's two loads: the clock read, then read again until 200 ns have passed.
    assert_eq!(ptx.matches(&format!(", {MAX_DELAY_NS};")).count(), 2, "{ptx}");
    assert_eq!(ptx.matches(", %globaltimer;").count(), 4, "{ptx}");
    let spin = ptx.find("mov.u64 %egpu").expect("a clock read");
    assert!(ptx[spin..].contains("setp.lt.u64"), "{ptx}");
    let Some(ptxas) = require_ptxas() else { return };
    let report = ptxas.check(&ptx, "sm_90").unwrap_or_else(|e| panic!("{e}\n{ptx}"));
    let registers = report.function("saxpy").and_then(|f| f.registers);
    println!("saxpy with a 200 ns wait at each load: ptxas-valid, {registers:?} registers");
}
