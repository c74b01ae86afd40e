//! The merge against emulated device writers: threads that update a map in "device memory" (a
//! map in process memory, by the protocol the GPU's translated probes follow) while a merger
//! takes snapshots of it word by word, as a copy engine does, and merges them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

use super::{DevicePart, Merged};
use crate::layout::Geometry;
use crate::{MapError, MapKind, Placement, RawMap};

fn map(kind: MapKind, key: u32, value: u32, capacity: u32, cpu: u32, sm: u32) -> RawMap {
    let g = Geometry::new(kind, key, value, capacity, cpu, sm).expect("a geometry");
    RawMap::create(g, &Placement::Process).expect("a map")
}

/// A snapshot of `part`'s device range of `device`, word by word (each word read whole, the
/// words at different times, as a copy engine reads memory that threads are writing).
fn snapshot(part: &DevicePart, device: &RawMap) -> Vec<u8> {
    let range = part.range();
    let mut out = Vec::with_capacity(range.len());
    for at in range.step_by(8) {
        out.extend_from_slice(&device.region().word(at).load(Relaxed).to_le_bytes());
    }
    out
}

/// The contents of a hash map's shard `s`: key → first value word.
fn entries(map: &RawMap, s: u32) -> BTreeMap<u64, u64> {
    let table = map.table(s);
    let mut out = BTreeMap::new();
    for i in 0..table.slots() {
        let mut key = [0u8; 8];
        if table.key_at(i, &mut key) {
            let value = map.region().word(table.value_offset(i)).load(Relaxed);
            out.insert(u64::from_le_bytes(key), value);
        }
    }
    out
}

/// The device part starts as an empty map of the same geometry: the image's header is a valid
/// map header, and its range is the device's shards only.
#[test]
fn a_part_starts_empty_and_covers_the_device_shards() {
    let per_cpu = map(MapKind::PerCpuArray, 4, 8, 16, 3, 5);
    let part = DevicePart::new(per_cpu.geometry()).expect("a part");
    let g = per_cpu.geometry();
    assert_eq!(part.range(), g.shard_offset(3)..g.total_bytes as usize);
    let image = part.image();
    assert_eq!(Geometry::from_header(&image, image.len()).expect("a header"), *g);
    assert!(image[crate::layout::HEADER_BYTES..].iter().all(|&b| b == 0));

    let plain = map(MapKind::Hash, 8, 8, 64, 1, 0);
    let part = DevicePart::new(plain.geometry()).expect("a part");
    assert_eq!(
        part.range(),
        plain.geometry().shard_offset(0)..plain.geometry().total_bytes as usize
    );

    let ring = map(MapKind::RingBuf, 0, 16, 64, 1, 0);
    assert!(matches!(DevicePart::new(ring.geometry()), Err(MapError::Unsupported { .. })));
    let host_only = map(MapKind::PerCpuArray, 4, 8, 16, 2, 0);
    assert!(DevicePart::new(host_only.geometry()).is_err());
}

/// A snapshot of the wrong length, or a map of another geometry, is refused and changes
/// nothing.
#[test]
fn a_wrong_snapshot_or_map_is_refused() {
    let target = map(MapKind::Array, 4, 8, 4, 1, 0);
    let mut part = DevicePart::new(target.geometry()).expect("a part");
    assert!(part.merge(&[0; 8], &target, true).is_err());
    let other = map(MapKind::Array, 4, 8, 8, 1, 0);
    let snap = vec![0; part.range().len()];
    assert!(part.merge(&snap, &other, true).is_err());
    assert_eq!(target.device_merged_ns(), None);
    assert_eq!(part.merge(&snap, &target, true).expect("merged"), Merged::default());
    assert!(target.device_merged_ns().is_some());
}

/// Array words add what they grew: device counters and host counters of one word sum, a gauge
/// this part alone writes is copied, and a merge of an unchanged part changes nothing.
#[test]
fn array_words_add_their_growth() {
    let target = map(MapKind::Array, 4, 16, 4, 1, 0);
    let device = map(MapKind::Array, 4, 16, 4, 1, 0);
    let mut part = DevicePart::new(target.geometry()).expect("a part");
    fn word(m: &RawMap, i: u32, w: usize) -> &AtomicU64 {
        m.region().word(m.geometry().slot_offset(0, i) + w)
    }
    word(&device, 0, 0).store(10, Relaxed);
    word(&device, 3, 8).store(7, Relaxed);
    word(&target, 0, 0).fetch_add(5, Relaxed); // a host probe's count
    let merged = part.merge(&snapshot(&part, &device), &target, false).expect("merged");
    assert_eq!(merged.words, 2);
    assert_eq!((word(&target, 0, 0).load(Relaxed), word(&target, 3, 8).load(Relaxed)), (15, 7));
    // A gauge goes down: the map follows; nothing else moves.
    word(&device, 3, 8).store(2, Relaxed);
    word(&device, 0, 0).fetch_add(1, Relaxed);
    part.merge(&snapshot(&part, &device), &target, false).expect("merged");
    assert_eq!((word(&target, 0, 0).load(Relaxed), word(&target, 3, 8).load(Relaxed)), (16, 2));
    let again = part.merge(&snapshot(&part, &device), &target, false).expect("merged");
    assert_eq!(again.words, 0);
}

/// Per-CPU arrays: only the SM shards are merged, each into its own; the host shards keep
/// what host code wrote.
#[test]
fn per_cpu_parts_merge_the_sm_shards_only() {
    let target = map(MapKind::PerCpuArray, 4, 8, 2, 2, 3);
    let device = map(MapKind::PerCpuArray, 4, 8, 2, 2, 3);
    let mut part = DevicePart::new(target.geometry()).expect("a part");
    let g = *target.geometry();
    let at = |s: u32, i: u32| g.slot_offset(s, i);
    target.region().word(at(0, 1)).store(100, Relaxed);
    device.region().word(at(0, 1)).store(999, Relaxed); // outside the part: never merged
    for s in 2..5 {
        device.region().word(at(s, 1)).store(u64::from(s), Relaxed);
    }
    part.merge(&snapshot(&part, &device), &target, true).expect("merged");
    assert_eq!(target.region().word(at(0, 1)).load(Relaxed), 100);
    for s in 2..5 {
        assert_eq!(target.region().word(at(s, 1)).load(Relaxed), u64::from(s));
    }
}

/// Hash entries: published once seen twice (or at once when settled), removed when the device
/// removes them, published again when the device inserts them again elsewhere; two parts (two
/// GPU contexts) of one map sum.
#[test]
fn hash_entries_are_published_whole_and_removed_with_the_device() {
    let target = map(MapKind::Hash, 8, 8, 16, 1, 0);
    let (a, b) = (map(MapKind::Hash, 8, 8, 16, 1, 0), map(MapKind::Hash, 8, 8, 16, 1, 0));
    let mut part_a = DevicePart::new(target.geometry()).expect("a part");
    let mut part_b = DevicePart::new(target.geometry()).expect("a part");
    let add = |m: &RawMap, key: u64, n: u64| {
        let table = m.table(0);
        let (i, _) = table.entry(&key.to_le_bytes()).expect("room");
        m.region().word(table.value_offset(i)).fetch_add(n, Relaxed);
    };
    add(&a, 1, 10);
    add(&a, 2, 20);
    let first = part_a.merge(&snapshot(&part_a, &a), &target, false).expect("merged");
    assert_eq!((first.published, first.deferred), (0, 2), "seen once: not yet");
    assert!(entries(&target, 0).is_empty());
    add(&a, 1, 1);
    let second = part_a.merge(&snapshot(&part_a, &a), &target, false).expect("merged");
    assert_eq!(second.published, 2);
    assert_eq!(entries(&target, 0), BTreeMap::from([(1, 11), (2, 20)]));

    add(&b, 1, 100);
    add(&b, 3, 300);
    part_b.merge(&snapshot(&part_b, &b), &target, true).expect("settled: at once");
    assert_eq!(entries(&target, 0), BTreeMap::from([(1, 111), (2, 20), (3, 300)]));

    // The device removes key 2 and inserts key 4: the map follows at the next merges.
    assert!(a.table(0).remove(&2u64.to_le_bytes()));
    add(&a, 4, 4);
    let merged = part_a.merge(&snapshot(&part_a, &a), &target, false).expect("merged");
    assert_eq!(merged.removed, 1);
    part_a.merge(&snapshot(&part_a, &a), &target, false).expect("merged");
    assert_eq!(entries(&target, 0), BTreeMap::from([(1, 111), (3, 300), (4, 4)]));
}

/// The yardstick: device threads insert keys and add to them while a merger merges snapshots on
/// its own clock. Every state the map passes through holds only whole entries of keys the
/// writers used, with values no larger than the device's; after the writers stop, one settled
/// merge leaves the exact totals.
#[test]
fn concurrent_device_writers_merge_to_exact_counts() {
    const WRITERS: u64 = 4;
    const KEYS: u64 = 48;
    const ROUNDS: u64 = 400;
    let target = map(MapKind::Hash, 8, 16, 64, 1, 0);
    let device = Arc::new(map(MapKind::Hash, 8, 16, 64, 1, 0));
    let counter = Arc::new(map(MapKind::Array, 4, 8, 1, 1, 0));
    let mut part = DevicePart::new(target.geometry()).expect("a part");
    let done = Arc::new(AtomicBool::new(false));
    let merges = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (device, counter) = (Arc::clone(&device), Arc::clone(&counter));
            let merges = Arc::clone(&merges);
            std::thread::spawn(move || {
                let table = device.table(0);
                for round in 0..ROUNDS {
                    // Halfway, until the merger has merged a few snapshots of writes under way.
                    while round == ROUNDS / 2 && merges.load(Relaxed) < 3 {
                        std::thread::yield_now();
                    }
                    for k in 0..KEYS {
                        // Keys appear over time: writer w starts key k at round k.
                        if round < k {
                            continue;
                        }
                        let key = (k * 0x9e37_79b9 + 1).to_le_bytes();
                        let (i, _) = table.entry(&key).expect("room");
                        let value = table.value_offset(i);
                        device.region().word(value).fetch_add(1, Relaxed);
                        device.region().word(value + 8).fetch_add(w + 1, Relaxed);
                    }
                }
                counter.region().word(counter.geometry().slot_offset(0, 0)).fetch_add(1, Relaxed);
            })
        })
        .collect();
    let finished = Arc::clone(&done);
    let watcher = std::thread::spawn(move || {
        while counter.region().word(counter.geometry().slot_offset(0, 0)).load(Relaxed) < WRITERS {
            std::thread::yield_now();
        }
        finished.store(true, Relaxed);
    });
    let valid: Vec<u64> = (0..KEYS).map(|k| k * 0x9e37_79b9 + 1).collect();
    while !done.load(Relaxed) {
        let merged = part.merge(&snapshot(&part, &device), &target, false).expect("merged");
        merges.fetch_add(1, Relaxed);
        assert_eq!(merged.refused, 0);
        for (key, count) in entries(&target, 0) {
            assert!(valid.contains(&key), "a key no writer used: {key:#x}");
            assert!(count <= WRITERS * ROUNDS, "key {key:#x}: {count}");
        }
    }
    writers.into_iter().for_each(|w| w.join().expect("a writer"));
    watcher.join().expect("the watcher");
    part.merge(&snapshot(&part, &device), &target, true).expect("the last merge");
    let table = target.table(0);
    for (k, key) in valid.iter().enumerate() {
        let (i, _) = table.find(&key.to_le_bytes()).expect("every key");
        let rounds = ROUNDS - k as u64;
        let words = |w: usize| target.region().word(table.value_offset(i) + w).load(Relaxed);
        assert_eq!(words(0), WRITERS * rounds, "key {k}");
        assert_eq!(words(8), (1..=WRITERS).sum::<u64>() * rounds, "key {k}");
    }
    assert_eq!(target.len(), KEYS);
    assert!(merges.load(Relaxed) >= 3);
}

/// A map spread over per-SM copies: each value is the map's own plus the words at its place in
/// every copy; entries live in the map's slots only; other kinds and counts are refused.
#[test]
fn spread_values_sum_the_copies() {
    const COPIES: u32 = 4;
    let target = map(MapKind::Hash, 8, 8, 16, 1, 0);
    let device = map(MapKind::Hash, 8, 8, 16, 1, 0);
    let mut part = DevicePart::spread(target.geometry(), COPIES).expect("a part");
    let g = *target.geometry();
    let slots_bytes = g.slots as usize * g.slot_stride as usize;
    assert_eq!(part.range().end, g.total_bytes as usize + COPIES as usize * slots_bytes);
    assert_eq!(part.image().len(), part.range().end);
    // An entry inserted with 5 (`BPF_NOEXIST`), then adds from four SMs' copies.
    let table = device.table(0);
    let (i, _) = table.entry(&7u64.to_le_bytes()).expect("room");
    device.region().word(table.value_offset(i)).store(5, Relaxed);
    let mut snap = snapshot(&DevicePart::new(&g).expect("a part"), &device);
    snap.resize(part.range().len(), 0);
    let at_value = table.value_offset(i) - g.slot_offset(0, 0);
    let main_len = snap.len() - COPIES as usize * slots_bytes;
    for copy in 0..COPIES as usize {
        let at = main_len + copy * slots_bytes + at_value;
        snap[at..at + 8].copy_from_slice(&(copy as u64 + 1).to_le_bytes());
    }
    part.merge(&snap, &target, true).expect("merged");
    assert_eq!(entries(&target, 0), BTreeMap::from([(7, 5 + 1 + 2 + 3 + 4)]));
    // More adds in one copy: the growth only.
    let at = main_len + at_value;
    snap[at..at + 8].copy_from_slice(&11u64.to_le_bytes());
    part.merge(&snap, &target, false).expect("merged");
    assert_eq!(entries(&target, 0), BTreeMap::from([(7, 25)]));

    // An array: element 2 from the copies alone.
    let array = map(MapKind::Array, 4, 8, 4, 1, 0);
    let mut part = DevicePart::spread(array.geometry(), 2).expect("a part");
    let ga = *array.geometry();
    let mut snap = vec![0u8; part.range().len()];
    let main = ga.total_bytes as usize - ga.shard_offset(0);
    let copy = ga.slots as usize * ga.slot_stride as usize;
    for (c, v) in [(0, 7u64), (1, 8)] {
        let at = main + c * copy + 2 * ga.slot_stride as usize;
        snap[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    part.merge(&snap, &array, false).expect("merged");
    assert_eq!(array.region().word(ga.slot_offset(0, 2)).load(Relaxed), 15);

    assert!(DevicePart::spread(&ga, 3).is_err(), "a power of two");
    let per_cpu = map(MapKind::PerCpuHash, 8, 8, 16, 1, 2);
    assert!(DevicePart::spread(per_cpu.geometry(), 4).is_err(), "already per SM");
}
