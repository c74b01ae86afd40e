//! The merge against emulated device writers: threads that update a map in "device memory" (a
//! map in process memory, by the protocol the GPU's translated probes follow) while a merger
//! takes snapshots of it word by word, as a copy engine does, and merges them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

use super::{DevicePart, Merged};
use crate::layout::Geometry;
use crate::{MapKind, Placement, RawMap};

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

    let ring = map(MapKind::RingBuf, 0, 16, 64, 2, 3);
    let part = DevicePart::new(ring.geometry()).expect("a part");
    assert_eq!(part.range(), ring.geometry().shard_offset(2)..ring.geometry().total_bytes as usize);
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

/// An array's part started from the map's values (global data's first contents): the image
/// holds them, and merges add only what the device changed.
#[test]
fn an_array_part_starts_from_the_map_values() {
    let target = map(MapKind::Array, 4, 16, 1, 1, 0);
    fn word(m: &RawMap, w: usize) -> &AtomicU64 {
        m.region().word(m.geometry().slot_offset(0, 0) + w)
    }
    word(&target, 0).store(100, Relaxed);
    word(&target, 8).store(3, Relaxed);
    let mut part =
        DevicePart::new(target.geometry()).and_then(|p| p.from_values(&target)).expect("a part");
    // The device's memory, made from the image.
    let device = map(MapKind::Array, 4, 16, 1, 1, 0);
    let image = part.image();
    for at in (0..image.len()).step_by(8) {
        let w = u64::from_le_bytes(image[at..at + 8].try_into().expect("8 bytes"));
        device.region().word(at).store(w, Relaxed);
    }
    assert_eq!((word(&device, 0).load(Relaxed), word(&device, 8).load(Relaxed)), (100, 3));
    let unchanged = part.merge(&snapshot(&part, &device), &target, false).expect("merged");
    assert_eq!(unchanged.words, 0);
    word(&device, 0).fetch_add(7, Relaxed);
    part.merge(&snapshot(&part, &device), &target, true).expect("merged");
    assert_eq!((word(&target, 0).load(Relaxed), word(&target, 8).load(Relaxed)), (107, 3));
    let hash = map(MapKind::Hash, 8, 8, 4, 1, 0);
    let refused = DevicePart::new(hash.geometry()).and_then(|p| p.from_values(&hash));
    assert!(refused.is_err());
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

/// Two devices' parts merged into the map and each into its own map too (`merge_into`): the map
/// sums them (and the host's adds), each device's own map holds what that device's part did
/// alone: value growth, entries published and removed, and the array's words grown from the
/// map's first values.
#[test]
fn each_device_s_own_map_holds_its_part_alone() {
    let target = map(MapKind::Hash, 8, 8, 16, 1, 0);
    let own = [map(MapKind::Hash, 8, 8, 16, 1, 0), map(MapKind::Hash, 8, 8, 16, 1, 0)];
    let gpus = [map(MapKind::Hash, 8, 8, 16, 1, 0), map(MapKind::Hash, 8, 8, 16, 1, 0)];
    let mut parts = [0, 1].map(|_| DevicePart::new(target.geometry()).expect("a part"));
    let add = |m: &RawMap, key: u64, n: u64| {
        let table = m.table(0);
        let (i, _) = table.entry(&key.to_le_bytes()).expect("room");
        m.region().word(table.value_offset(i)).fetch_add(n, Relaxed);
    };
    add(&target, 1, 1000); // a host probe's
    add(&gpus[0], 1, 10);
    add(&gpus[0], 2, 20);
    add(&gpus[1], 1, 100);
    add(&gpus[1], 3, 300);
    for d in 0..2 {
        let snap = snapshot(&parts[d], &gpus[d]);
        parts[d].merge_into(&snap, &target, Some(&own[d]), true).expect("merged");
    }
    assert_eq!(entries(&target, 0), BTreeMap::from([(1, 1110), (2, 20), (3, 300)]));
    assert_eq!(entries(&own[0], 0), BTreeMap::from([(1, 10), (2, 20)]));
    assert_eq!(entries(&own[1], 0), BTreeMap::from([(1, 100), (3, 300)]));
    assert!(own[0].device_merged_ns().is_some());
    // Device 0 removes key 2 and adds to key 1: its map follows, device 1's does not move.
    assert!(gpus[0].table(0).remove(&2u64.to_le_bytes()));
    add(&gpus[0], 1, 5);
    let snap = snapshot(&parts[0], &gpus[0]);
    parts[0].merge_into(&snap, &target, Some(&own[0]), true).expect("merged");
    assert_eq!(entries(&target, 0), BTreeMap::from([(1, 1115), (3, 300)]));
    assert_eq!(entries(&own[0], 0), BTreeMap::from([(1, 15)]));
    assert_eq!(entries(&own[1], 0), BTreeMap::from([(1, 100), (3, 300)]));
    // An own map of another geometry is refused.
    let other = map(MapKind::Hash, 8, 8, 32, 1, 0);
    assert!(
        parts[1].merge_into(&snapshot(&parts[1], &gpus[1]), &target, Some(&other), true).is_err()
    );

    // An array whose part starts from the map's values: the own map gets the growth only.
    let array = map(MapKind::Array, 4, 8, 4, 1, 0);
    let ga = *array.geometry();
    array.region().word(ga.slot_offset(0, 1)).store(7, Relaxed);
    let mine = map(MapKind::Array, 4, 8, 4, 1, 0);
    let mut part = DevicePart::new(&ga).expect("a part").from_values(&array).expect("values");
    let mut snap = part.image()[part.range()].to_vec();
    let at = ga.slot_offset(0, 1) - part.range().start;
    snap[at..at + 8].copy_from_slice(&9u64.to_le_bytes());
    part.merge_into(&snap, &array, Some(&mine), true).expect("merged");
    assert_eq!(array.region().word(ga.slot_offset(0, 1)).load(Relaxed), 9);
    assert_eq!(mine.region().word(ga.slot_offset(0, 1)).load(Relaxed), 2);
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

/// A group of records into ring `s` of `device`, as translated probes write one (see the `ring`
/// module): `tail` read, room claimed (taken back, and the records counted as dropped, when the
/// claim ends past `tail + capacity`), tickets taken, records written, then the sequence word of
/// the group's first slot (release). Whether the group was written.
fn device_output(device: &RawMap, s: u32, records: &[[u64; 3]]) -> bool {
    use crate::layout::{ring_state as rs, shard};
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
    let g = *device.geometry();
    let counter = |off: usize| device.region().word(g.shard_offset(s) + off);
    let (n, capacity) = (records.len() as u64, u64::from(g.capacity));
    let tail = counter(shard::TAIL).load(Acquire);
    let claimed = counter(shard::CLAIMED).fetch_add(n, AcqRel);
    if claimed + n > tail + capacity {
        counter(shard::CLAIMED).fetch_sub(n, AcqRel);
        counter(shard::REFUSED).fetch_add(n, Relaxed);
        return false;
    }
    let first = counter(shard::LEN_OR_HEAD).fetch_add(n, AcqRel);
    for (t, record) in (first..).zip(records) {
        let at = g.slot_offset(s, (t % capacity) as u32);
        for (w, &v) in record.iter().enumerate() {
            device.region().word(at + 8 * w).store(v, Relaxed);
        }
    }
    let seq = (first / capacity) << 32 | rs::COMMITTED << rs::SHIFT | n;
    device.region().word(g.seq_offset(s, (first % capacity) as u32)).store(seq, Release);
    true
}

/// Writes the part's moved `tail`s into the device's ring, as the preloaded library does.
fn write_tails(part: &mut DevicePart, device: &RawMap) {
    for (at, tail) in part.tails() {
        device.region().word(at).store(tail, std::sync::atomic::Ordering::Release);
    }
}

/// A ring's groups are drained once seen published twice (or at once when settled), in ticket
/// order, into the map's ring of the same shard; the `tail` handed back makes room on the
/// device; the device's drops, and the map ring's, are counted in the map.
#[test]
fn ring_groups_are_drained_once_seen_twice() {
    use crate::RingBuf;
    let target = map(MapKind::RingBuf, 0, 24, 4, 0, 2);
    let device = map(MapKind::RingBuf, 0, 24, 4, 0, 2);
    let mut part = DevicePart::new(target.geometry()).expect("a part");
    let ring: RingBuf<[u64; 3]> = RingBuf::from_raw(target.clone()).expect("a ring");
    let mut consumer = ring.consumer().expect("the consumer");
    assert!(device_output(&device, 1, &[[1, 1, 1], [2, 2, 2], [3, 3, 3]]));
    let first = part.merge(&snapshot(&part, &device), &target, false).expect("merged");
    assert_eq!((first.records, first.deferred), (0, 1), "seen once: not yet");
    assert_eq!(consumer.poll(), None);
    assert!(part.tails().is_empty(), "nothing drained: no tail moved");
    // The ring is full for a group of two until the tail moves.
    assert!(!device_output(&device, 1, &[[4, 4, 4], [5, 5, 5]]));
    let second = part.merge(&snapshot(&part, &device), &target, false).expect("merged");
    assert_eq!(second.records, 3);
    let got: Vec<[u64; 3]> = consumer.drain().collect();
    assert_eq!(got, [[1, 1, 1], [2, 2, 2], [3, 3, 3]]);
    let g = *target.geometry();
    let tails = part.tails();
    assert_eq!(tails, [(g.shard_offset(1) + crate::layout::shard::TAIL, 3)]);
    assert!(part.tails().is_empty(), "handed out once");
    // Without the tail written back the ring stays full; with it, the group wraps around.
    assert!(!device_output(&device, 1, &[[4, 4, 4], [5, 5, 5]]));
    device.region().word(tails[0].0).store(tails[0].1, Relaxed);
    assert!(device_output(&device, 1, &[[4, 4, 4], [5, 5, 5]]));
    assert!(device_output(&device, 0, &[[9, 9, 9]]));
    let settled = part.merge(&snapshot(&part, &device), &target, true).expect("merged");
    assert_eq!(settled.records, 3);
    let mut got: Vec<[u64; 3]> = consumer.drain().collect();
    got.sort_unstable();
    assert_eq!(got, [[4, 4, 4], [5, 5, 5], [9, 9, 9]]);
    assert_eq!(ring.drops(), 4, "the device's two refused groups");
    // A merge of the same snapshot again drains nothing more.
    let again = part.merge(&snapshot(&part, &device), &target, true).expect("merged");
    assert_eq!(again.records, 0);
}

/// Tickets a device lane took by the batch and did not use, discarded by the sequence word of
/// the first of them (with their number), are passed over: the records after them drain, and
/// the `tail` handed back covers them.
#[test]
fn a_discarded_group_is_passed_over() {
    use crate::RingBuf;
    use crate::layout::{ring_state as rs, shard};
    let target = map(MapKind::RingBuf, 0, 24, 8, 0, 1);
    let device = map(MapKind::RingBuf, 0, 24, 8, 0, 1);
    let mut part = DevicePart::new(target.geometry()).expect("a part");
    let ring: RingBuf<[u64; 3]> = RingBuf::from_raw(target.clone()).expect("a ring");
    let mut consumer = ring.consumer().expect("the consumer");
    let g = *device.geometry();
    // A batch of four tickets: one record written and committed, the three others discarded.
    let counter = |off: usize| device.region().word(g.shard_offset(0) + off);
    counter(shard::CLAIMED).fetch_add(4, Relaxed);
    counter(shard::LEN_OR_HEAD).fetch_add(4, Relaxed);
    for w in 0..3 {
        device.region().word(g.slot_offset(0, 0) + 8 * w).store(7, Relaxed);
    }
    device.region().word(g.seq_offset(0, 0)).store(rs::COMMITTED << rs::SHIFT | 1, Relaxed);
    device.region().word(g.seq_offset(0, 1)).store(rs::DISCARDED << rs::SHIFT | 3, Relaxed);
    assert!(device_output(&device, 0, &[[8, 8, 8]]));
    let seen = part.merge(&snapshot(&part, &device), &target, false).expect("merged");
    assert_eq!(seen.records, 0, "seen once: not yet");
    let merged = part.merge(&snapshot(&part, &device), &target, false).expect("merged");
    assert_eq!(merged.records, 2);
    assert_eq!(consumer.drain().collect::<Vec<[u64; 3]>>(), [[7, 7, 7], [8, 8, 8]]);
    assert_eq!(part.tails(), [(g.shard_offset(0) + shard::TAIL, 5)]);
    assert_eq!(ring.drops(), 0);
}

/// The yardstick for rings: device producers write groups into a small ring while a merger
/// drains snapshots and writes the tails back, and a consumer reads the map's ring, all at once.
/// A producer whose group was dropped (counted) writes it again. Every record written arrives
/// whole and once, each producer's in order, unless the map's ring dropped it (counted).
#[test]
fn concurrent_device_producers_drain_exactly() {
    use crate::RingBuf;
    const PRODUCERS: u64 = 4;
    const GROUPS: u64 = 500;
    const CHECK: u64 = 0x5eed_0f1e_55aa;
    let target = map(MapKind::RingBuf, 0, 24, 64, 1, 0);
    let device = Arc::new(map(MapKind::RingBuf, 0, 24, 64, 1, 0));
    let mut part = DevicePart::new(device.geometry()).expect("a part");
    let done = Arc::new(AtomicU64::new(0));
    let (written, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (device, done) = (Arc::clone(&device), Arc::clone(&done));
            let (written, refused) = (Arc::clone(&written), Arc::clone(&refused));
            std::thread::spawn(move || {
                let mut i = 0;
                for group in 0..GROUPS {
                    let n = 1 + (group + p) % 5;
                    let records: Vec<[u64; 3]> =
                        (i..i + n).map(|i| [p, i, p ^ i ^ CHECK]).collect();
                    while !device_output(&device, 0, &records) {
                        refused.fetch_add(n, Relaxed);
                        std::thread::yield_now();
                    }
                    written.fetch_add(n, Relaxed);
                    i += n;
                }
                done.fetch_add(1, Relaxed);
            })
        })
        .collect();
    let ring: RingBuf<[u64; 3]> = RingBuf::from_raw(target.clone()).expect("a ring");
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let consumer_map = target.clone();
    let consumer = std::thread::spawn(move || {
        let ring: RingBuf<[u64; 3]> = RingBuf::from_raw(consumer_map).expect("a ring");
        let mut consumer = ring.consumer().expect("the consumer");
        let mut received = Vec::new();
        loop {
            let last = stopped.load(Relaxed);
            received.extend(consumer.drain());
            if last {
                return received;
            }
            std::thread::yield_now();
        }
    });
    let (mut drained, mut merges) = (0, 0);
    while done.load(Relaxed) < PRODUCERS {
        drained += part.merge(&snapshot(&part, &device), &target, false).expect("merged").records;
        write_tails(&mut part, &device);
        merges += 1;
    }
    producers.into_iter().for_each(|p| p.join().expect("a producer"));
    drained += part.merge(&snapshot(&part, &device), &target, true).expect("merged").records;
    stop.store(true, Relaxed);
    let received = consumer.join().expect("the consumer");
    let mut next = [0u64; PRODUCERS as usize];
    for &[p, i, check] in &received {
        assert_eq!(check, p ^ i ^ CHECK, "a whole record");
        assert!(i >= next[p as usize], "producer {p}: {i} after {}", next[p as usize]);
        next[p as usize] = i + 1;
    }
    let (written, refused) = (written.load(Relaxed), refused.load(Relaxed));
    assert_eq!(drained, written, "every record written was drained");
    assert_eq!(device_drops(&device), refused, "the device counted its drops");
    let host_drops = ring.drops() - refused;
    assert_eq!(received.len() as u64 + host_drops, written, "received, or dropped by the map");
    assert!(!received.is_empty());
    eprintln!(
        "{} of {written} records received in {merges} merges; the device refused {refused}, \
         the map {host_drops}",
        received.len()
    );
}

fn device_drops(device: &RawMap) -> u64 {
    let at = device.geometry().shard_offset(0) + crate::layout::shard::REFUSED;
    device.region().word(at).load(Relaxed)
}
