//! Attribution of accesses to allocations (`egpu::host::mem::allocs`) on the CPU VM: device
//! allocations and frees fired as host events in process, recorded by the far tier's recorder
//! into a `Tracker`, made into the table the probes search; then loads, stores and atomics of
//! two kernels into every allocation, into freed ones and between them, each run through the
//! probes. Every (kernel, allocation) value is checked against a count made here; prints
//! `allocations attributed (host events in process, CPU VM): K/K exact`.

use std::collections::BTreeMap;

use egpu::ebpf::{AllocCtx, MemAccessCtx, Phase};
use egpu::host::HostProbes;
use egpu::host::cxl::{Lookup, Policy, Tracker, allocation_recorder};
use egpu::host::mem::allocs::{self, AllocKey, AllocTable, AllocTraffic, MAX_ALLOCS};
use egpu::maps::RingBuf;
use egpu_test_support::Rng;

/// A number below `n`.
fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.below(n as usize) as u64
}

#[test]
fn accesses_add_to_the_allocation_they_fall_in() {
    let recorder = allocation_recorder();
    let probes = HostProbes::new();
    let maps = recorder.maps().expect("its maps");
    probes.attach(recorder.verified().expect("verified"), maps).expect("attached");
    let ring = RingBuf::<[u64; 2]>::from_raw(maps[0].clone()).expect("the ring");
    let mut consumer = ring.consumer().expect("the consumer");
    let mut tracker = Tracker::new(Policy::None, Lookup::Ranges, 0).expect("a tracker");
    let mut rng = Rng::from_env("mem_allocs", 0x2545_F491_4F6C_DD1D);

    // 40 device allocations with gaps between them, the 5th and the 17th freed later; a failed
    // allocation and a pinned host one, which are not recorded.
    let mut made: Vec<(u64, u64)> = Vec::new();
    let mut next = 0x7f00_0000_0000u64;
    for _ in 0..40 {
        let size = 1 + below(&mut rng, 1 << 20);
        made.push((next, size));
        let mut ctx =
            AllocCtx { ptr: next, bytes: size, kind: AllocCtx::DEVICE, ..Default::default() };
        probes.fire(Phase::Exit, &mut ctx);
        next += size.next_multiple_of(512) + 512 * below(&mut rng, 4);
    }
    for mut ctx in [
        AllocCtx {
            ptr: 0,
            bytes: 1 << 30,
            kind: AllocCtx::DEVICE,
            result: 2,
            ..Default::default()
        },
        AllocCtx { ptr: 0x9000, bytes: 4096, kind: AllocCtx::HOST_PINNED, ..Default::default() },
    ] {
        probes.fire(Phase::Exit, &mut ctx);
    }
    let freed = [4usize, 16];
    for &i in &freed {
        let mut ctx = AllocCtx {
            ptr: made[i].0,
            op: AllocCtx::FREE,
            kind: AllocCtx::DEVICE,
            ..Default::default()
        };
        probes.fire(Phase::Exit, &mut ctx);
    }
    tracker.record(consumer.drain());
    assert_eq!(tracker.allocations().len(), 40);
    let table = AllocTable::of(tracker.allocations());
    assert_eq!((table.entries().len(), table.left_out), (38, 0));
    table.write().expect("written");

    // The id an address should get, by a scan of what was made.
    let id_of = |addr: u64| {
        (made.iter().enumerate())
            .find(|&(i, &(start, size))| {
                !freed.contains(&i) && start <= addr && addr < start + size
            })
            .map_or(0, |(i, _)| i as u64 + 1)
    };
    let mut want: BTreeMap<(u64, u64), AllocTraffic> = BTreeMap::new();
    let mut vms: Vec<_> = allocs::probes().iter().map(|p| p.vm().expect("a VM")).collect();
    let sizes = [1u32, 2, 4, 8, 16];
    for kernel in [11u64, 12] {
        for &(start, size) in &made {
            // The first byte, the last, random ones, just past the end (a gap or the next one),
            // and for a freed allocation the same (allocation 0).
            let mut addrs = vec![start, start + size - 1, start + size];
            addrs.extend((0..20).map(|_| start + below(&mut rng, size)));
            for addr in addrs {
                let direction = below(&mut rng, 3) as usize;
                let size = sizes[below(&mut rng, 5) as usize];
                let mut ctx = MemAccessCtx { kernel_id: kernel, addr, size, ..Default::default() };
                vms[direction].run_ctx(&mut ctx).expect("runs");
                let t = want.entry((kernel, id_of(addr))).or_default();
                let (n, bytes) = match direction {
                    0 => (&mut t.loads, &mut t.loaded),
                    1 => (&mut t.stores, &mut t.stored),
                    _ => (&mut t.atomics, &mut t.atomic),
                };
                *n += 1;
                *bytes += u64::from(size);
            }
        }
    }
    let got: BTreeMap<(u64, u64), AllocTraffic> = allocs::traffic()
        .into_iter()
        .map(|(AllocKey { kernel, alloc }, t)| ((kernel, alloc), t))
        .collect();
    let exact = want.iter().filter(|(k, t)| got.get(k) == Some(t)).count();
    println!(
        "allocations attributed (host events in process, CPU VM): {exact}/{} exact",
        want.len()
    );
    assert_eq!(got, want);
    // Both kernels reached allocation 0 (gaps, freed allocations) and every live allocation.
    assert_eq!(want.len(), 2 * (38 + 1));

    // A full table: the probes' twelve halvings find every entry, at its edges, and no gap.
    let full = AllocTable::of(&full_allocations());
    full.write().expect("written");
    let mut expected: BTreeMap<u64, u64> = BTreeMap::new();
    for r in full.entries().iter().step_by(7) {
        for addr in [r.start, r.end - 1, r.end, r.start.wrapping_sub(1)] {
            let mut ctx = MemAccessCtx { kernel_id: 99, addr, size: 1, ..Default::default() };
            vms[0].run_ctx(&mut ctx).expect("runs");
            *expected.entry(full.find(addr)).or_default() += 1;
        }
    }
    let found: BTreeMap<u64, u64> = (allocs::traffic().into_iter())
        .filter(|(k, _)| k.kernel == 99)
        .map(|(k, t)| (k.alloc, t.loads))
        .collect();
    assert_eq!(found, expected);
    first_touches_of_managed_memory(&mut vms);
}

/// Managed memory: each 4 KiB page's first launch, kept by the same probes; pages of plain
/// device memory keep none. Launch 5 touches pages 0–3 of the managed allocation, launch 6
/// pages 2–7 (its first touches: 4–7), launch 7 all ten again and the plain allocation.
fn first_touches_of_managed_memory(vms: &mut [egpu::vm::Vm]) {
    use egpu::host::mem::allocs::AllocationRecord;
    use egpu::host::mem::managed::first_touches_here;
    let made = |id, addr, managed| AllocationRecord {
        id,
        addr,
        bytes: 10 << 12,
        managed,
        ..AllocationRecord::default()
    };
    let allocations = [made(1, 0x7a00_0000_0000, true), made(2, 0x7b00_0000_0000, false)];
    AllocTable::of_records(&allocations).write().expect("written");
    let mut runs = 0;
    for (launch, pages, alloc) in [(5u64, 0..4u64, 0), (6, 2..8, 0), (7, 0..10, 0), (7, 0..10, 1)] {
        for page in pages {
            for (i, vm) in vms.iter_mut().enumerate() {
                let addr = allocations[alloc].addr + (page << 12) + 8 * i as u64;
                let mut ctx = MemAccessCtx {
                    kernel_id: 20 + launch,
                    addr,
                    size: 4,
                    launch_id: launch,
                    ..Default::default()
                };
                vm.run_ctx(&mut ctx).expect("runs");
                runs += 1;
            }
        }
    }
    let got: Vec<_> = (first_touches_here(&allocations).into_iter())
        .map(|t| (t.alloc, t.launch, t.pages, t.first, t.last))
        .collect();
    let want = [(1, 5, 4, 0, 3), (1, 6, 4, 4, 7), (1, 7, 2, 8, 9)];
    println!("first touches of managed pages (CPU VM, {runs} accesses): {got:?}");
    assert_eq!(got, want);
}

/// More allocations than the table holds, each of 128 bytes with a gap after it, in an order
/// that is not the addresses'.
fn full_allocations() -> Vec<egpu::host::cxl::Allocation> {
    (0..MAX_ALLOCS as u64 + 5)
        .map(|i| egpu::host::cxl::Allocation { addr: 0x1000 + (i ^ 0x55) * 0x100, size: 0x80 })
        .collect()
}

#[test]
fn a_full_table_keeps_the_latest_sorted() {
    let allocations = full_allocations();
    let table = AllocTable::of(&allocations);
    assert_eq!((table.entries().len(), table.left_out), (MAX_ALLOCS as usize, 5));
    assert!(table.entries().windows(2).all(|w| w[0].end <= w[1].start), "sorted, disjoint");
    assert!(table.entries().iter().all(|r| r.id > 5), "the first five left out");
    // The table's own lookup against a scan, at every entry's edges and in the gaps.
    for r in table.entries() {
        assert_eq!(
            (table.find(r.start), table.find(r.end - 1), table.find(r.end)),
            (r.id, r.id, 0)
        );
    }
    assert_eq!(table.find(0), 0);
    assert_eq!(AllocTable::of(&[]).find(0x1000), 0);
    // From a recording's allocations: the freed one left out, the ids kept.
    use egpu::host::mem::allocs::AllocationRecord;
    let record = |id, addr, freed| AllocationRecord {
        id,
        addr,
        bytes: 0x100,
        freed,
        ..AllocationRecord::default()
    };
    let from = AllocTable::of_records(&[
        record(1, 0x3000, false),
        record(2, 0x1000, true),
        record(3, 0x2000, false),
    ]);
    let ids: Vec<(u64, u64)> = from.entries().iter().map(|r| (r.start, r.id)).collect();
    assert_eq!(ids, [(0x2000, 3), (0x3000, 1)]);
}

/// The probes translate into saxpy with their maps as the preloaded library binds them (the
/// table mirrored in GPU memory, the traffic spread over per-SM copies), and `ptxas` takes the
/// result.
#[test]
fn the_attribution_probes_pass_ptxas() {
    use egpu_device::inject::{DeviceProbe, Kernels, inject};
    use egpu_device::translate::{DeviceMap, adds_only};
    let saxpy = egpu_test_support::read_workspace_file("tests/ptx/saxpy.ptx");
    let probes = allocs::probes();
    let programs: Vec<_> =
        probes.iter().map(|p| p.verified().unwrap_or_else(|e| panic!("{e}"))).collect();
    let maps: Vec<Vec<DeviceMap>> = (probes.iter().zip(&programs))
        .map(|(p, program)| {
            let adds = adds_only(program);
            (0u64..)
                .zip(p.maps().expect("maps"))
                .map(|(i, m)| DeviceMap {
                    addr: 0x7e00_0000_0000 + i * 0x100_0000,
                    geometry: *m.geometry(),
                    live: false,
                    spread: if adds[i as usize] { 16 } else { 0 },
                    drained: false,
                })
                .collect()
        })
        .collect();
    let device: Vec<DeviceProbe<'_>> = (programs.iter().zip(&maps))
        .map(|(program, maps)| DeviceProbe { program, kernels: Kernels::All, maps })
        .collect();
    let ptx = inject(&saxpy, &device).expect("instruments").ptx;
    assert!(!ptx.contains(".local"), "the probes' frames in local memory");
    let Some(ptxas) = egpu_device::testing::require_ptxas() else { return };
    let report = ptxas.check(&ptx, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    let registers = report.function("saxpy").and_then(|f| f.registers);
    println!("saxpy with the attribution probes: ptxas-valid, {registers:?} registers");
    // The GPU check's program (egpu-preload/tests/programs/alloc_traffic.cu), by nvcc: every
    // kernel's accesses observed, and ptxas takes it.
    let Some(nvcc) = egpu_device::testing::require_nvcc() else { return };
    let cu = egpu_test_support::workspace_path("egpu-preload/tests/programs/alloc_traffic.cu");
    let program = nvcc.compile_ptx(&cu, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    let injection = inject(&program, &device).expect("instruments");
    let report = ptxas.check(&injection.ptx, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    for kernel in ["read_once", "read_looped", "fill", "count"] {
        let registers = (report.functions.iter())
            .find(|f| f.name.contains(kernel))
            .and_then(|f| f.registers)
            .unwrap_or_else(|| panic!("{kernel} compiled"));
        println!("alloc_traffic.cu's {kernel} with the attribution probes: {registers} registers");
    }
}
