//! A program is verified once, whichever engines run it: the CPU VM, a host probe set fired from
//! several threads (each loads its own VM), and the injection into a PTX module all take the
//! `Verified` the probe made when it was built. The verifier's own count of its runs
//! (`egpu::ebpf::verifier::runs`, process-wide) is the witness: this file holds one test, so no
//! other test verifies anything in this process meanwhile.

use egpu::device::inject::{DeviceProbe, Kernels, inject};
use egpu::ebpf::verifier::runs;
use egpu::ebpf::{HostEvent, LaunchCtx, MemAccessCtx, Phase};
use egpu::host::HostProbes;
use egpu::maps::HashMap;
use egpu::pack::Pack;

static ON_VM: HashMap<u64, u64> = HashMap::with_capacity(64);
static ON_HOST: HashMap<u64, u64> = HashMap::with_capacity(64);

#[egpu::probe(host::launch)]
fn on_vm(ctx: &LaunchCtx) {
    ON_VM.fetch_add(&ctx.kernel_id, 1);
}

#[egpu::probe(host::launch)]
fn on_host(ctx: &LaunchCtx) {
    ON_HOST.fetch_add(&ctx.kernel_id, ctx.grid[0] as u64);
}

#[egpu::probe(device::global_load)]
fn on_device(ctx: &MemAccessCtx) -> u64 {
    ctx.addr + ctx.size as u64
}

/// Verifications that `f` caused.
fn verifications(f: impl FnOnce()) -> u64 {
    let before = runs();
    f();
    runs() - before
}

#[test]
fn each_probe_is_verified_once_whatever_runs_it() {
    // The CPU VM: built (verified) once, then two VMs and runs.
    let vm = verifications(|| {
        let probe = on_vm::probe();
        for _ in 0..2 {
            let mut vm = probe.vm().expect("a VM");
            vm.run_ctx(&mut LaunchCtx { kernel_id: 3, ..Default::default() }).expect("runs");
        }
    });
    assert_eq!(ON_VM.get(&3), Some(2));

    // A host probe set, fired by four threads: each thread loads its own VM of the probe.
    let host = verifications(|| {
        let probe = on_host::probe();
        let probes = HostProbes::new();
        let maps = probe.maps().expect("its maps");
        let id = probes.attach(probe.verified().expect("verified"), maps).expect("attached");
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let probes = &probes;
                s.spawn(move || {
                    for _ in 0..100 {
                        let mut ctx =
                            LaunchCtx { kernel_id: 9, grid: [t + 1, 1, 1], ..Default::default() };
                        probes.fire(Phase::Enter, &mut ctx);
                    }
                });
            }
        });
        assert!(probes.armed(HostEvent::Launch, Phase::Enter));
        assert_eq!(probes.health().runs, 400);
        assert!(probes.detach(id));
    });
    assert_eq!(ON_HOST.get(&9), Some(100 * (1 + 2 + 3 + 4)));

    // The device: injected into a PTX module at every global load, then into it again.
    let ptx = egpu_test_support::read_workspace_file("tests/ptx/saxpy.ptx");
    let device = verifications(|| {
        let probe = on_device::probe();
        let verified = probe.verified().expect("verified");
        for _ in 0..2 {
            let probes = [DeviceProbe { program: verified, kernels: Kernels::All, maps: &[] }];
            let injected = inject(&ptx, &probes).expect("injected");
            assert_eq!(injected.sites.len(), 2, "saxpy's two global loads");
        }
    });

    // A pack carries the `Verified` it was given; the process that reads it back verifies once.
    let pack = verifications(|| {
        let mut pack = Pack::new();
        pack.add(on_host::probe()).expect("added");
        assert_eq!(pack.probes().len(), 1);
    });
    let read_back = verifications(|| {
        let text = {
            let mut pack = Pack::new();
            pack.add(on_vm::probe()).expect("added");
            pack.to_text()
        };
        Pack::parse(&text).expect("parses");
    });

    println!("verifications per attach: {vm} (vm), {host} (host), {device} (device)");
    assert_eq!((vm, host, device), (1, 1, 1));
    assert_eq!(pack, 0, "the probe was built and verified already");
    assert_eq!(read_back, 1, "a pack read from text is verified once");
}
