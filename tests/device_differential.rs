//! The GPU against the CPU VM, on the same probe and the same events.
//!
//! A probe under test counts the loads of a kernel per 4 KiB page (a hash map) and the bytes
//! loaded per site (an array), inside the kernel on the GPU. Next to it, a recording probe writes
//! every load's address, size and site into a ring buffer in GPU memory. Then the CPU VM replays
//! the recorded events, one by one, through the same probe into host maps of its own, and the
//! GPU's maps must equal the VM's, entry for entry.
//!
//! A second test updates one per-CPU array from host threads and from GPU threads at the same
//! time, each side on its own shards of pinned host memory mapped into the GPU: the totals are
//! exact.
//!
//! A third runs a Probe Rust loop whose body branches (a `bpf_loop` callback in eBPF) in every
//! block of a kernel, and checks it against the probe's native twin.
//!
//! Without a GPU the tests say why and pass; with `EGPU_REQUIRE_GPU=1` they fail instead.

use std::collections::BTreeMap;

use bytemuck::{Pod, Zeroable};
use egpu::device::cuda::{Arg, Gpu};
use egpu::device::inject::{DeviceProbe, Kernels, inject};
use egpu::device::maps::DeviceMapBuffer;
use egpu::device::testing::require_gpu;
use egpu::ebpf::verifier::{Verified, verify};
use egpu::ebpf::{
    AttachPoint, DeviceEvent, KernelCtx, MapDef, MapKind, MemAccessCtx, Program, assemble,
};
use egpu::maps::layout::Geometry;
use egpu::maps::{Array, HashMap, Placement, RawMap, RingBuf};
use egpu::vm::{EngineChoice, Vm};
use egpu_test_support::read_workspace_file;

/// The probe under test: loads per page in map 0, bytes per site in map 1.
const PROBE: &str = "
    mov %r9, %r1
    ldxdw %r6, [%r9+0]
    rsh %r6, 12
    stxdw [%r10-8], %r6
    stdw [%r10-16], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jne %r0, 0, found
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r3, %r10
    add %r3, -16
    mov %r4, 1
    call 2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, sites
found:
    mov %r1, 1
    lock add [%r0+0], %r1
sites:
    ldxw %r6, [%r9+20]
    stxw [%r10-20], %r6
    lddw %r1, map[1]
    mov %r2, %r10
    add %r2, -20
    call 1
    jeq %r0, 0, out
    ldxw %r1, [%r9+16]
    lock add [%r0+0], %r1
out:
    mov %r0, 0
    exit";

/// The recording probe: address, then size | site << 32, to the ring.
const RECORD: &str = include_str!("probes/trace.s");

/// One recorded load.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
struct Event {
    addr: u64,
    size_site: u64,
}

fn def(name: &str, kind: MapKind, key_size: u32, value_size: u32, capacity: u32) -> MapDef {
    MapDef { name: name.into(), kind, key_size, value_size, capacity }
}

fn program(text: &str, maps: Vec<MapDef>, event: DeviceEvent) -> Verified {
    let slots = assemble(text).expect("assembles");
    verify(&Program::new(slots, maps, AttachPoint::Device(event)).expect("a program"))
        .expect("verified")
}

fn entries(raw: &RawMap) -> BTreeMap<u64, u64> {
    HashMap::<u64, u64>::from_raw(raw.clone()).expect("a hash map").iter().collect()
}

#[test]
fn the_gpu_and_the_cpu_vm_fill_the_same_maps_from_the_same_events() {
    let Some(info) = require_gpu() else { return };
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let ptx = read_workspace_file("tests/ptx/saxpy.ptx");
    let n: u32 = 1 << 20;
    let map_defs =
        vec![def("pages", MapKind::Hash, 8, 8, 4096), def("sites", MapKind::Array, 4, 8, 16)];
    let probe = program(PROBE, map_defs.clone(), DeviceEvent::GlobalLoad);
    let record = program(
        RECORD,
        vec![def("events", MapKind::RingBuf, 0, 16, 4 * n)],
        DeviceEvent::GlobalLoad,
    );
    let create = |kind, key, value, capacity| {
        RawMap::create(
            Geometry::new(kind, key, value, capacity, 1, 0).expect("geometry"),
            &Placement::Process,
        )
        .expect("a map")
    };
    let (pages, sites) = (create(MapKind::Hash, 8, 8, 4096), create(MapKind::Array, 4, 8, 16));
    let events = create(MapKind::RingBuf, 0, 16, 4 * n);
    let on_gpu: Vec<DeviceMapBuffer<'_>> = [&pages, &sites, &events]
        .iter()
        .map(|m| DeviceMapBuffer::upload(&gpu, m).expect("upload"))
        .collect();
    let probe_maps = [on_gpu[0].binding(), on_gpu[1].binding()];
    let ring_map = [on_gpu[2].binding()];
    let probes = [
        DeviceProbe { program: &probe, kernels: Kernels::All, maps: &probe_maps },
        DeviceProbe { program: &record, kernels: Kernels::All, maps: &ring_map },
    ];
    let instrumented = inject(&ptx, &probes).expect("instruments");
    let module = gpu.load_ptx(&instrumented.ptx).unwrap_or_else(|e| panic!("{e}"));
    let x = gpu.alloc(n as usize * 4).expect("x");
    let y = gpu.alloc(n as usize * 4).expect("y");
    let args = [Arg::U32(n), Arg::F32(0.5), Arg::Ptr(&x), Arg::Ptr(&y)];
    let kernel = module.kernel("saxpy").expect("saxpy");
    gpu.launch(&kernel, (info.sm_count * 2, 1, 1), (256, 1, 1), &args).expect("launch");
    for m in &on_gpu {
        m.download().expect("download");
    }

    // The CPU VM replays the recorded events through the same probe, into maps of its own.
    let (cpu_pages, cpu_sites) =
        (create(MapKind::Hash, 8, 8, 4096), create(MapKind::Array, 4, 8, 16));
    let mut vm = Vm::with_maps(&probe, &[cpu_pages.clone(), cpu_sites.clone()], EngineChoice::Jit)
        .expect("the VM loads the probe");
    let ring = RingBuf::<Event>::from_raw(events).expect("a ring");
    let mut consumer = ring.consumer().expect("a consumer");
    let mut replayed = 0u64;
    while let Some(e) = consumer.poll() {
        let mut ctx = MemAccessCtx {
            addr: e.addr,
            size: e.size_site as u32,
            site: (e.size_site >> 32) as u32,
            ..MemAccessCtx::default()
        };
        vm.run_ctx(&mut ctx).expect("the probe runs on the CPU");
        replayed += 1;
    }
    assert_eq!(replayed, 2 * u64::from(n), "every load was recorded once");
    assert_eq!(on_gpu[2].counter(0, egpu::maps::layout::shard::REFUSED).unwrap(), 0, "no drops");
    let (gpu_pages, vm_pages) = (entries(&pages), entries(&cpu_pages));
    assert_eq!(gpu_pages.len(), 2 * n as usize / 1024, "one entry per page of x and y");
    assert_eq!(gpu_pages, vm_pages, "the GPU's and the VM's page counts");
    let array =
        |raw: &RawMap| egpu::maps::Array::<u64>::from_raw(raw.clone()).expect("array").to_vec();
    assert_eq!(array(&sites), array(&cpu_sites), "the GPU's and the VM's bytes per site");
    assert_eq!(array(&sites).iter().sum::<u64>(), 8 * u64::from(n), "4 bytes per load");
    println!(
        "{replayed} loads recorded on the GPU and replayed on the CPU VM: {} pages and {} sites \
         identical",
        gpu_pages.len(),
        array(&sites).iter().filter(|&&b| b > 0).count()
    );
}

/// Host threads and GPU threads update one per-CPU array at the same time, in pinned host
/// memory mapped into the GPU: host code on its host shards, the probe on the SMs' shards. Every
/// update is counted.
#[test]
fn host_and_gpu_threads_update_one_map_at_once_exactly() {
    use egpu::device::maps::HostMappedMap;
    use egpu::maps::{PerCpuArray, Shards};

    let Some(info) = require_gpu() else { return };
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let ptx = read_workspace_file("tests/ptx/saxpy.ptx");
    let counts: PerCpuArray<u64> =
        PerCpuArray::create(1, Shards::new(4, info.sm_count), Placement::Process).expect("a map");
    let mapped = HostMappedMap::new(&gpu, counts.raw()).expect("mapped into the GPU");
    let count = include_str!("probes/count.s");
    let stores = program(
        count,
        vec![def("counts", MapKind::PerCpuArray, 4, 8, 1)],
        DeviceEvent::GlobalStore,
    );
    let binding = [mapped.binding()];
    let probes = [DeviceProbe { program: &stores, kernels: Kernels::All, maps: &binding }];
    let module = gpu.load_ptx(&inject(&ptx, &probes).expect("instruments").ptx).expect("loads");
    let kernel = module.kernel("saxpy").expect("saxpy");
    let n: u32 = 1 << 22;
    let x = gpu.alloc(n as usize * 4).expect("x");
    let y = gpu.alloc(n as usize * 4).expect("y");
    let args = [Arg::U32(n), Arg::F32(0.5), Arg::Ptr(&x), Arg::Ptr(&y)];
    let (threads, per_thread, launches) = (4u64, 200_000u64, 10u64);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per_thread {
                    counts.fetch_add(0, 1).expect("a host update");
                }
            });
        }
        for _ in 0..launches {
            gpu.launch(&kernel, (info.sm_count * 4, 1, 1), (256, 1, 1), &args).expect("launch");
        }
    });
    let shards = counts.get(0).expect("index 0");
    let (host, device) = (shards.cpu.iter().sum::<u64>(), shards.sm.iter().sum::<u64>());
    println!(
        "host threads counted {host} updates on {} host shards while {launches} launches counted \
         {device} stores on {} SM shards, in the same mapped memory",
        shards.cpu.len(),
        shards.sm.iter().filter(|&&c| c > 0).count()
    );
    assert_eq!(host, threads * per_thread, "host updates");
    assert_eq!(device, launches * u64::from(n), "device updates");
    assert_eq!(shards.sum(), threads * per_thread + launches * u64::from(n));
}

/// The probes kept in `tests/probes/` (shared by these tests, the GPU tests of egpu-device and
/// the device benchmark) assemble and verify for the device attach points they are used at; this
/// part needs no GPU.
#[test]
fn the_shared_probe_files_verify() {
    let count = include_str!("probes/count.s");
    for kind in [MapKind::Array, MapKind::PerCpuArray] {
        program(count, vec![def("counts", kind, 4, 8, 1)], DeviceEvent::GlobalStore);
    }
    let pages = include_str!("probes/page_count.s");
    program(pages, vec![def("pages", MapKind::Hash, 8, 8, 64)], DeviceEvent::GlobalLoad);
    program(pages, vec![def("pages", MapKind::PerCpuHash, 8, 8, 64)], DeviceEvent::GlobalStore);
    program(RECORD, vec![def("events", MapKind::RingBuf, 0, 16, 64)], DeviceEvent::GlobalLoad);
    let bytes = include_str!("probes/kernel_bytes.s");
    program(bytes, vec![def("bytes", MapKind::Hash, 8, 8, 64)], DeviceEvent::GlobalLoad);
}

/// Blocks of the launch below, and entries of [`BLOCK_STEPS`].
const BLOCKS: u32 = 1024;

/// Collatz steps counted by each block's first thread.
static BLOCK_STEPS: Array<u64> = Array::with_len(BLOCKS);

/// The Collatz loop, whose body branches and updates a map, which Probe Rust makes a
/// `bpf_loop` callback: the first thread of each block counts, step by step in the map, the
/// Collatz steps of a number made from the block's index (up to 350 steps).
#[egpu::probe(device::kernel_entry)]
fn block_collatz(ctx: &KernelCtx) {
    if ctx.thread[0] == 0 && ctx.block[0] < BLOCKS {
        let mut n = (ctx.block[0] as u64 * 7919) % 100_000 + 1;
        #[bound(1000)]
        while n != 1 {
            n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
            BLOCK_STEPS.fetch_add(ctx.block[0], 1);
        }
    }
}

#[test]
fn a_branching_probe_rust_loop_runs_on_the_gpu_as_its_twin() {
    let probe = block_collatz::probe();
    let verified = probe.verified().unwrap_or_else(|e| panic!("{e}"));
    assert!(verified.program().disassemble().contains("call 181"), "a bpf_loop callback");
    // The twin, block by block, gives the counts; then the map is emptied for the GPU.
    for b in 0..BLOCKS {
        block_collatz(&KernelCtx { block: [b, 0, 0], ..KernelCtx::default() });
    }
    let want = BLOCK_STEPS.to_vec();
    for b in 0..BLOCKS {
        BLOCK_STEPS.set(b, &0).expect("in range");
    }
    assert!(want[1..].iter().all(|&s| s > 0), "the twin counted every block but 0 (n = 1)");
    let Some(info) = require_gpu() else { return };

    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let ptx = read_workspace_file("tests/ptx/saxpy.ptx");
    let on_gpu = DeviceMapBuffer::upload(&gpu, BLOCK_STEPS.raw()).expect("upload");
    let maps = [on_gpu.binding()];
    let probes = [DeviceProbe { program: verified, kernels: Kernels::All, maps: &maps }];
    let instrumented = inject(&ptx, &probes).expect("instruments");
    let n = BLOCKS * 256;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let saxpy = |ptx: &str| -> Vec<u8> {
        let module = gpu.load_ptx(ptx).unwrap_or_else(|e| panic!("{e}"));
        let kernel = module.kernel("saxpy").expect("saxpy");
        let (dx, dy) =
            (gpu.alloc(n as usize * 4).expect("x"), gpu.alloc(n as usize * 4).expect("y"));
        dx.write(bytemuck::cast_slice(&x)).expect("x");
        dy.write(&vec![0x3f; n as usize * 4]).expect("y");
        let args = [Arg::U32(n), Arg::F32(0.5), Arg::Ptr(&dx), Arg::Ptr(&dy)];
        gpu.launch(&kernel, (BLOCKS, 1, 1), (256, 1, 1), &args).expect("launch");
        let mut y = vec![0u8; n as usize * 4];
        dy.read(&mut y).expect("y");
        y
    };
    let (bare, probed) = (saxpy(&ptx), saxpy(&instrumented.ptx));
    on_gpu.download().expect("download");
    assert!(bare == probed, "saxpy computes the same with the probe");
    let got = BLOCK_STEPS.to_vec();
    let differ = (0..BLOCKS as usize).filter(|&b| got[b] != want[b]).count();
    println!(
        "collatz on the GPU: {BLOCKS} blocks, {} steps in all, {differ} blocks differ from the \
         twin ({} instructions followed by the verifier)",
        got.iter().sum::<u64>(),
        verified.insns_processed()
    );
    assert_eq!(got, want, "each block's steps, on the GPU and in the twin");
}
