//! Probes using maps on the CPU VM, on both engines: lookups, updates, deletions, ring-buffer
//! output and atomics on map values, from many threads at once (one VM per thread, maps shared),
//! with the values read in place by host code.

use std::thread;

use egpu::ebpf::verifier::{Verified, verify};
use egpu::ebpf::{AttachPoint, MapDef, MapKind, Program, assemble};
use egpu::maps::{Array, HashMap, PerCpuArray, RawMap, RingBuf};
use egpu::vm::{EngineChoice, Vm};

const ENGINES: [EngineChoice; 2] = [EngineChoice::Interpreter, EngineChoice::Auto];

fn def(name: &str, kind: MapKind, key_size: u32, value_size: u32, capacity: u32) -> MapDef {
    MapDef { name: name.into(), kind, key_size, value_size, capacity }
}

fn program(text: &str, maps: Vec<MapDef>, ctx_size: u32) -> Verified {
    let program =
        Program::new(assemble(text).expect("assembles"), maps, AttachPoint::User { ctx_size })
            .expect("valid program");
    verify(&program).expect("verifies")
}

/// `counts[ctx.key] += 1`, inserting the key first when it is absent (the usual counter).
const COUNT: &str = "
    ldxw %r6, [%r1+0]
    stxw [%r10-4], %r6
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jne %r0, 0, found
    stdw [%r10-16], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    mov %r3, %r10
    add %r3, -16
    mov %r4, 1
    call 2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, done
found:
    mov %r1, 1
    lock add [%r0+0], %r1
done:
    mov %r0, 0
    exit";

#[test]
fn counters_from_probes_on_many_threads_are_exact() {
    const THREADS: u32 = 4;
    const RUNS: u32 = 5_000;
    const KEYS: u32 = 16;
    let p = program(COUNT, vec![def("counts", MapKind::Hash, 4, 8, 64)], 4);
    for choice in ENGINES {
        let counts: HashMap<u32, u64> = HashMap::with_capacity(64);
        let raw = counts.raw().clone();
        thread::scope(|s| {
            for t in 0..THREADS {
                let (p, raw) = (&p, raw.clone());
                s.spawn(move || {
                    let mut vm = Vm::with_maps(p, &[raw], choice).expect("loads");
                    for i in 0..RUNS {
                        let mut key = ((i + t) % KEYS).to_le_bytes();
                        assert_eq!(vm.run(&mut key).expect("runs"), 0);
                    }
                });
            }
        });
        assert_eq!(counts.len(), KEYS as usize, "{choice:?}: racing first inserts made one entry");
        let total: u64 = counts.iter().map(|(_, v)| v).sum();
        assert_eq!(total, u64::from(THREADS * RUNS), "{choice:?}");
        for k in 0..KEYS {
            let want = (0..THREADS).flat_map(|t| (0..RUNS).map(move |i| (i + t) % KEYS));
            let want = want.filter(|&key| key == k).count() as u64;
            assert_eq!(counts.get(&k), Some(want), "{choice:?} key {k}");
        }
    }
}

#[test]
fn per_cpu_counters_sum_exactly() {
    const THREADS: u32 = 4;
    const RUNS: u32 = 5_000;
    let text = "
        stw [%r10-4], 0
        lddw %r1, map[0]
        mov %r2, %r10
        add %r2, -4
        call 1
        jeq %r0, 0, done
        mov %r1, 1
        lock add [%r0+0], %r1
    done:
        mov %r0, 0
        exit";
    let p = program(text, vec![def("events", MapKind::PerCpuArray, 4, 8, 1)], 0);
    for choice in ENGINES {
        let events: PerCpuArray<u64> = PerCpuArray::with_len(1);
        let raw = events.raw().clone();
        thread::scope(|s| {
            for _ in 0..THREADS {
                let (p, raw) = (&p, raw.clone());
                s.spawn(move || {
                    let mut vm = Vm::with_maps(p, &[raw], choice).expect("loads");
                    for _ in 0..RUNS {
                        vm.run(&mut []).expect("runs");
                    }
                });
            }
        });
        let shards = events.get(0).unwrap();
        assert_eq!(shards.cpu.len() as u32, egpu::maps::cpu_count());
        assert_eq!(events.sum(0).unwrap(), u64::from(THREADS * RUNS), "{choice:?}: {shards:?}");
    }
}

#[test]
fn updates_and_deletions_return_linux_error_numbers() {
    // ctx: key u32 @0, value u64 @8, flags u64 @16, op u64 @24 (0 update, 1 delete).
    let text = "
        mov %r6, %r1
        ldxw %r2, [%r6+0]
        stxw [%r10-4], %r2
        ldxdw %r2, [%r6+8]
        stxdw [%r10-16], %r2
        ldxdw %r7, [%r6+24]
        lddw %r1, map[0]
        mov %r2, %r10
        add %r2, -4
        jeq %r7, 1, delete
        mov %r3, %r10
        add %r3, -16
        ldxdw %r4, [%r6+16]
        call 2
        exit
    delete:
        call 3
        exit";
    const E2BIG: i64 = -7;
    const ENOENT: i64 = -2;
    const EEXIST: i64 = -17;
    const EINVAL: i64 = -22;
    for kind in [MapKind::Hash, MapKind::Array] {
        let p = program(text, vec![def("m", kind, 4, 8, 2)], 32);
        for choice in ENGINES {
            let mut vm = Vm::with_engine(&p, choice).expect("loads");
            let mut call = |key: u32, value: u64, flags: u64, op: u64| {
                let mut ctx = [0u8; 32];
                ctx[..4].copy_from_slice(&key.to_le_bytes());
                ctx[8..16].copy_from_slice(&value.to_le_bytes());
                ctx[16..24].copy_from_slice(&flags.to_le_bytes());
                ctx[24..].copy_from_slice(&op.to_le_bytes());
                vm.run(&mut ctx).expect("runs") as i64
            };
            let (update, delete) = (0, 1);
            if kind == MapKind::Hash {
                assert_eq!(call(1, 10, 2, update), ENOENT, "BPF_EXIST on a missing key");
                assert_eq!(call(1, 10, 1, update), 0, "BPF_NOEXIST inserts");
                assert_eq!(call(1, 11, 1, update), EEXIST, "BPF_NOEXIST on a present key");
                assert_eq!(call(1, 12, 2, update), 0, "BPF_EXIST replaces");
                assert_eq!(call(2, 20, 0, update), 0);
                assert_eq!(call(3, 30, 0, update), E2BIG, "the map is full");
                assert_eq!(call(2, 21, 0, update), 0, "a full map still updates");
                assert_eq!(call(1, 0, 7, update), EINVAL, "unknown flags");
                assert_eq!(call(1, 0, 0, delete), 0);
                assert_eq!(call(1, 0, 0, delete), ENOENT);
                assert_eq!(call(3, 30, 0, update), 0, "room again");
                let map = HashMap::<u32, u64>::from_raw(vm.maps()[0].clone()).unwrap();
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort();
                assert_eq!(entries, [(2, 21), (3, 30)], "{choice:?}");
            } else {
                assert_eq!(call(1, 10, 0, update), 0);
                assert_eq!(call(1, 10, 1, update), EEXIST, "array elements always exist");
                assert_eq!(call(2, 10, 0, update), E2BIG, "past the end");
                assert_eq!(call(1, 0, 0, delete), EINVAL, "array elements cannot be deleted");
                let map = Array::<u64>::from_raw(vm.maps()[0].clone()).unwrap();
                assert_eq!(map.to_vec(), [0, 10], "{choice:?}");
            }
        }
    }
}

#[test]
fn ring_records_reach_the_consumer_and_a_full_ring_drops() {
    // Sends the 16-byte context as a record and returns the helper's result.
    let text = "
        mov %r2, %r1
        lddw %r1, map[0]
        mov %r3, 16
        mov %r4, 0
        call 130
        exit";
    let p = program(text, vec![def("events", MapKind::RingBuf, 0, 24, 8)], 16);
    for choice in ENGINES {
        let events: RingBuf<[u64; 3]> = RingBuf::with_capacity(8);
        let mut vm = Vm::with_maps(&p, &[events.raw().clone()], choice).expect("loads");
        let mut send = |i: u64| {
            let mut ctx = [0u8; 16];
            ctx[..8].copy_from_slice(&i.to_le_bytes());
            ctx[8..].copy_from_slice(&(!i).to_le_bytes());
            vm.run(&mut ctx).expect("runs") as i64
        };
        for i in 0..8 {
            assert_eq!(send(i), 0);
        }
        assert_eq!(send(8), -11, "{choice:?}: a full ring returns -EAGAIN");
        assert_eq!(events.drops(), 1);
        let mut consumer = events.consumer().unwrap();
        let got: Vec<_> = consumer.drain().collect();
        let want: Vec<_> = (0..8).map(|i| [i, !i, 0]).collect();
        assert_eq!(got, want, "{choice:?}: records in order, zero-padded");
        assert_eq!(send(9), 0, "room again once consumed");
        assert_eq!(consumer.poll(), Some([9, !9, 0]));
    }
}

#[test]
fn a_probe_updates_a_shared_memory_map_another_handle_reads_in_place() {
    let name = format!("egpu-test-vm-{}", std::process::id());
    let counts =
        HashMap::<u32, u64>::create(64, egpu::maps::Placement::Shared(name.clone().into()))
            .unwrap();
    let p = program(COUNT, vec![def("counts", MapKind::Hash, 4, 8, 64)], 4);
    let mut vm = Vm::with_maps(&p, &[counts.raw().clone()], EngineChoice::Auto).unwrap();
    let reader = HashMap::<u32, u64>::open_shared(&name).unwrap();
    for i in 0..100u32 {
        vm.run(&mut (i % 3).to_le_bytes()).unwrap();
        assert_eq!(reader.get(&(i % 3)), Some(u64::from(i / 3 + 1)));
    }
    assert_eq!(RawMap::open_shared(&name).unwrap().len(), 3);
}
