//! The access-pattern pack (`examples/access_pattern.rs`): on the CPU, where a thread is a warp
//! of one lane, each access is a request of one lane whose sectors are those it spans, the same
//! from the CPU VM and the probes' native twins; and its probes, injected into nvcc's corpus
//! kernels, give PTX that ptxas takes (the warp helpers' `match.any.sync`, vote and
//! `redux.sync` among them).

#[path = "../examples/access_pattern.rs"]
mod access_pattern;

use access_pattern::{Requests, SITES, Site, atomics, loads, stores};
use egpu::device::inject::{DeviceProbe, Kernels, inject};
use egpu::device::translate::DeviceMap;
use egpu::ebpf::MemAccessCtx;

fn access(addr: u64, size: u32, site: u32, class: u32) -> MemAccessCtx {
    MemAccessCtx { addr, size, site, class, kernel_id: 7, ..MemAccessCtx::default() }
}

#[test]
fn a_thread_makes_requests_of_one_lane() {
    let cases = [
        // (addr, size, site, class): 4 aligned bytes, 8 bytes across a sector's end, 16 bytes.
        (64, 4, 0, MemAccessCtx::LOAD_STORE),
        (28, 8, 1, MemAccessCtx::LOAD_STORE),
        (256, 16, 2, MemAccessCtx::ASYNC_COPY),
    ];
    let mut vm = loads::probe().vm().expect("a VM");
    for (addr, size, site, class) in cases {
        let mut ctx = access(addr, size, site, class);
        vm.run_ctx(&mut ctx).expect("runs");
        loads(&ctx); // the native twin: the same again
        let sectors = (addr + size as u64 - 1) / 32 - addr / 32 + 1;
        let got = SITES.get(&Site { kernel: 7, site, class }).expect("a site");
        let want = Requests {
            requests: 2,
            lanes: 2,
            sectors: 2 * sectors,
            minimum: 2 * (size as u64).div_ceil(32),
            bytes: 2 * size as u64,
        };
        assert_eq!(got, want, "{size} bytes at {addr}");
    }
    let mut ctx = access(512, 8, 3, MemAccessCtx::ATOMIC);
    atomics::probe().vm().expect("a VM").run_ctx(&mut ctx).expect("runs");
    let atomic = SITES.get(&Site { kernel: 7, site: 3, class: MemAccessCtx::ATOMIC });
    assert_eq!(atomic.map(|r| (r.requests, r.sectors)), Some((1, 1)));
}

#[test]
fn its_probes_in_corpus_kernels_pass_ptxas() {
    let Some(ptxas) = egpu::device::testing::require_ptxas() else { return };
    let Some(nvcc) = egpu::device::testing::require_nvcc() else { return };
    let probes = [loads::probe(), stores::probe(), atomics::probe()];
    let geometry = *SITES.raw().geometry();
    let bound =
        [DeviceMap { addr: 0x7f00_0000_0000, geometry, live: false, spread: 0, drained: false }];
    let device: Vec<DeviceProbe<'_>> = probes
        .iter()
        .map(|p| DeviceProbe {
            program: p.verified().expect("verified"),
            kernels: Kernels::All,
            maps: &bound,
        })
        .collect();
    let kernels = egpu_test_support::workspace_path("tests/kernels");
    let mut checked = 0;
    for name in ["saxpy", "atomics", "async_copy", "vectors"] {
        let ptx = nvcc.compile_ptx(&kernels.join(format!("{name}.cu")), "sm_90").expect("PTX");
        let injected = inject(&ptx, &device).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(injected.ptx.contains("match.any.sync"), "{name}: the warp's sectors");
        ptxas.check(&injected.ptx, "sm_90").unwrap_or_else(|e| panic!("{name}: {e}"));
        checked += 1;
    }
    println!("access pattern pack: {checked} corpus modules instrumented, ptxas-valid");
}
