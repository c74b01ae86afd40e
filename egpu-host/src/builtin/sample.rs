//! A process's built-in maps filled by the built-in probes with a known set of events: the one
//! fixture of the report's and the exporters' tests (here and in `egpu-cli`). Not an API.

use egpu_ebpf::{AllocCtx, LaunchCtx, MemcpyCtx, ModuleLoadCtx, Phase, SyncCtx, kernel_id};

use super::Builtin;
use crate::HostProbes;

/// Made-up pid 4242's maps in process memory, and the set of built-in probes attached to them,
/// after: 3 launches of `_Z1av` (grid 4×2, 32 threads), one of `k"2` (1000 blocks of 1024), a
/// graph launch and a captured one; copies of 4096 and 5000 bytes to the device (the second
/// asynchronous), 1 to the host, a set of 100; an allocation of 1 MiB on the device at 0x7000
/// and its free; a stream and a context synchronisation; a module load without PTX. With the
/// kernel times' probes attached too: the context synchronisation took 1500 ns; and kernel times
/// from CUDA events: `_Z1av` 4000 ns twice, `k"2` 1 ms once.
#[doc(hidden)]
pub fn filled() -> (HostProbes, Builtin) {
    let launch = |kernel_id| LaunchCtx {
        kernel_id,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        ..Default::default()
    };
    let probes = HostProbes::new();
    let b = Builtin::create(4242, false).expect("maps in process memory");
    let timing = b.timing_programs().expect("the timing programs");
    for (program, maps) in b.programs().expect("the programs").into_iter().chain(timing) {
        probes.attach(&program, &maps).expect("attach");
    }
    let (a, k) = (kernel_id("_Z1av"), kernel_id("k\"2"));
    b.record_name(a, "_Z1av");
    b.record_name(k, "k\"2");
    for _ in 0..3 {
        probes.fire(Phase::Enter, &mut LaunchCtx { grid: [4, 2, 1], ..launch(a) });
    }
    probes.fire(
        Phase::Enter,
        &mut LaunchCtx { grid: [1000, 1, 1], block: [1024, 1, 1], ..launch(k) },
    );
    let graph = LaunchCtx { kernel_id: u64::MAX, flags: LaunchCtx::GRAPH, ..Default::default() };
    probes.fire(Phase::Enter, &mut graph.clone());
    probes.fire(Phase::Enter, &mut LaunchCtx { flags: LaunchCtx::CAPTURED, ..launch(a) });
    let copy = |kind, bytes, flags| MemcpyCtx { kind, bytes, flags, ..Default::default() };
    probes.fire(Phase::Enter, &mut copy(MemcpyCtx::HOST_TO_DEVICE, 4096, 0));
    probes.fire(Phase::Enter, &mut copy(MemcpyCtx::HOST_TO_DEVICE, 5000, MemcpyCtx::ASYNC));
    probes.fire(Phase::Enter, &mut copy(MemcpyCtx::DEVICE_TO_HOST, 1, 0));
    probes.fire(Phase::Enter, &mut copy(MemcpyCtx::DEFAULT, 100, MemcpyCtx::MEMSET));
    let alloc =
        AllocCtx { ptr: 0x7000, bytes: 1 << 20, kind: AllocCtx::DEVICE, ..Default::default() };
    probes.fire(Phase::Exit, &mut alloc.clone());
    let free = AllocCtx { ptr: 0x7000, op: AllocCtx::FREE, ..Default::default() };
    probes.fire(Phase::Exit, &mut free.clone());
    probes.fire(Phase::Enter, &mut SyncCtx { kind: SyncCtx::STREAM, ..Default::default() });
    let context = SyncCtx { kind: SyncCtx::CONTEXT, ..Default::default() };
    probes.fire(Phase::Enter, &mut context.clone());
    probes.fire(Phase::Exit, &mut SyncCtx { duration_ns: 1500, ..context });
    for (kernel, ns) in [(a, 4000), (a, 4000), (k, 1_000_000)] {
        b.record_kernel_time(kernel, ns);
    }
    probes.fire(Phase::Exit, &mut ModuleLoadCtx { has_ptx: 0, ..Default::default() });
    (probes, b)
}
