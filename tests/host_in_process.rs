//! Host probes on egpu's own launches: a Rust program that launches through egpu
//! (`Gpu::launch`) fires the probes attached to `egpu::host::global()`, before and after the
//! driver's call, with the kernel's id, its shape, the result and the time spent. Needs a GPU:
//! without one it says why and passes, or fails when `EGPU_REQUIRE_GPU=1`.

use egpu::device::cuda::{Arg, Gpu};
use egpu::ebpf::verifier::verify;
use egpu::ebpf::{AttachPoint, HostEvent, LaunchCtx, MapDef, MapKind, Phase, Program, assemble};
use egpu::maps::{Array, HashMap};

/// Counts launches per kernel id (map 0), as the preloaded library's built-in probe does; a
/// sibling on exit sums the time spent and counts failures.
fn count() -> String {
    egpu_test_support::read_workspace_file("tests/probes/count_launches.s")
}

#[test]
fn egpu_s_own_launches_fire_the_host_probes() {
    let Some(info) = egpu::testing::require_gpu() else { return };
    static COUNTS: HashMap<u64, u64> = HashMap::with_capacity(64);
    static EXITS: Array<u64> = Array::with_len(2);
    let counts_def = MapDef {
        name: "counts".into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 8,
        capacity: 64,
    };
    let enter = Program::new(
        assemble(&count()).expect("assembles"),
        vec![counts_def],
        AttachPoint::Host(HostEvent::Launch, Phase::Enter),
    )
    .expect("a program");
    let exits_def = MapDef {
        name: "exits".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 8,
        capacity: 2,
    };
    let exit_text = "
        mov %r6, %r1
        stw [%r10-4], 0
        lddw %r1, map[0]
        mov %r2, %r10
        add %r2, -4
        call 1
        jeq %r0, 0, out
        ldxdw %r1, [%r6+DURATION]
        lock add [%r0+0], %r1
        ldxw %r1, [%r6+RESULT]
        jeq %r1, 0, out
        stw [%r10-4], 1
        lddw %r1, map[0]
        mov %r2, %r10
        add %r2, -4
        call 1
        jeq %r0, 0, out
        mov %r1, 1
        lock add [%r0+0], %r1
    out:
        mov %r0, 0
        exit";
    let exit = Program::new(
        assemble(
            &exit_text
                .replace("DURATION", &std::mem::offset_of!(LaunchCtx, duration_ns).to_string())
                .replace("RESULT", &std::mem::offset_of!(LaunchCtx, result).to_string()),
        )
        .expect("assembles"),
        vec![exits_def],
        AttachPoint::Host(HostEvent::Launch, Phase::Exit),
    )
    .expect("a program");
    let probes = egpu::host::global();
    let (enter, exit) = (verify(&enter).expect("verifies"), verify(&exit).expect("verifies"));
    let a = probes.attach(&enter, &[COUNTS.raw().clone()]).expect("attach");
    let b = probes.attach(&exit, &[EXITS.raw().clone()]).expect("attach");

    let gpu = Gpu::open(info.ordinal).expect("the GPU");
    let ptx = egpu_test_support::read_workspace_file("tests/ptx/saxpy.ptx");
    let module = gpu.load_ptx(&ptx).expect("loads");
    let kernel = module.kernel("saxpy").expect("saxpy");
    let n = 1u32 << 16;
    let (x, y) = (gpu.alloc(n as usize * 4).expect("x"), gpu.alloc(n as usize * 4).expect("y"));
    for _ in 0..3 {
        let args = [Arg::U32(n), Arg::F32(2.0), Arg::Ptr(&x), Arg::Ptr(&y)];
        gpu.launch(&kernel, (n / 256, 1, 1), (256, 1, 1), &args).expect("a launch");
    }
    // Synchronous: the counts are there when the launches have returned.
    assert_eq!(COUNTS.get(&egpu::ebpf::kernel_id("saxpy")), Some(3));
    let spent = EXITS.get(0).expect("element 0");
    assert!(spent > 0, "the exit probes saw the time spent");
    assert_eq!(EXITS.get(1).expect("element 1"), 0, "no launch failed");
    println!(
        "3 launches of saxpy through egpu fired the host probes ({spent} ns in cuLaunchKernel)"
    );
    probes.detach(a);
    probes.detach(b);
}
