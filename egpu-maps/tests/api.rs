//! The maps' API, one kind at a time: ring buffers, arrays, odd key and value sizes, `RawMap`
//! as engines use it, and the errors of each operation.

mod common;

use std::collections::HashSet;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;

use egpu_maps::layout::{self, Geometry};
use egpu_maps::{
    Array, HashMap, MapError, MapKind, PerCpuArray, PerCpuHashMap, Placement, RawMap, RingBuf,
    Shards, UpdateFlags,
};

// ---------------------------------------------------------------------------------------------
// Ring buffers.

#[test]
fn ring_records_come_out_in_order_lap_after_lap() {
    let ring: RingBuf<[u64; 2]> = RingBuf::with_capacity(4);
    let mut consumer = ring.consumer().unwrap();
    let mut next = 0u64;
    let mut expected = 0u64;
    for batch in 0..400u64 {
        for _ in 0..1 + batch % 4 {
            ring.output(&[next, !next]).unwrap();
            next += 1;
        }
        for record in consumer.drain() {
            assert_eq!(record, [expected, !expected]);
            expected += 1;
        }
        assert_eq!(expected, next, "batch {batch}");
    }
    assert_eq!((ring.drops(), ring.lost(), ring.pending()), (0, 0, 0));
}

#[test]
fn a_full_ring_drops_new_records_and_counts_them() {
    let ring: RingBuf<u64> = RingBuf::with_capacity(8);
    for i in 0..8 {
        ring.output(&i).unwrap();
    }
    assert_eq!(ring.pending(), 8);
    for i in 8..11 {
        let err = ring.output(&i).unwrap_err();
        assert!(matches!(err, MapError::RingFull));
        assert_eq!(err.errno(), -11, "EAGAIN");
    }
    assert!(matches!(ring.reserve(), Err(MapError::RingFull)));
    assert_eq!(ring.drops(), 4);
    assert_eq!(ring.raw().refused(), 4);
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.drain().collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
    // Room again: the records kept were the old ones, the dropped ones never appear.
    ring.output(&100).unwrap();
    assert_eq!(consumer.poll(), Some(100));
    assert_eq!(consumer.poll(), None);
    assert_eq!(ring.drops(), 4);
}

#[test]
fn reservations_commit_or_discard() {
    let ring: RingBuf<[u64; 3]> = RingBuf::with_capacity(4);
    // Fill every slot once with non-zero data, and consume it.
    for i in 0..4 {
        ring.output(&[i + 1; 3]).unwrap();
    }
    assert_eq!(ring.consumer().unwrap().drain().count(), 4);

    let mut r = ring.reserve().expect("room");
    assert_eq!(*r, [0; 3], "a reservation starts zeroed, whatever the slot held");
    r[1] = 7;
    r.commit();
    let discarded = ring.reserve().expect("room");
    assert!(format!("{discarded:?}").contains("Reserved"));
    drop(discarded);
    let mut r = ring.reserve().expect("room");
    *r = [1, 2, 3];
    // A reservation in flight holds the consumer back at its ticket.
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), Some([0, 7, 0]));
    assert_eq!(consumer.poll(), None, "the reservation is not committed yet");
    r.commit();
    assert_eq!(consumer.poll(), Some([1, 2, 3]));
    assert_eq!(consumer.poll(), None);
    assert_eq!((ring.lost(), ring.drops()), (0, 0), "a discarded record is neither");
}

#[test]
fn short_records_are_zero_padded_and_long_ones_refused() {
    let ring: RingBuf<[u64; 2]> = RingBuf::with_capacity(2);
    let raw = ring.raw();
    let mut consumer = ring.consumer().unwrap();
    for lap in 0..3u64 {
        ring.output(&[u64::MAX, u64::MAX]).unwrap();
        raw.output(&(lap + 5).to_le_bytes()).unwrap();
        assert!(matches!(raw.output(&[9]), Err(MapError::RingFull)), "lap {lap}");
        assert_eq!(consumer.poll(), Some([u64::MAX, u64::MAX]));
        assert_eq!(consumer.poll(), Some([lap + 5, 0]), "the rest of the record is zeroed");
    }
    assert!(matches!(raw.output(&[0; 17]), Err(MapError::RecordSize { len: 17, size: 16 })));
    assert_eq!(MapError::RecordSize { len: 17, size: 16 }.errno(), -7);
}

#[test]
fn one_consumer_at_a_time() {
    let ring: RingBuf<u64> = RingBuf::with_shards(4, Shards::new(2, 2));
    let first = ring.consumer().unwrap();
    match ring.consumer() {
        Err(MapError::ConsumerBusy { pid }) => assert_eq!(pid, std::process::id()),
        other => panic!("{other:?}"),
    }
    drop(first);
    let _second = ring.consumer().unwrap();
}

#[test]
fn many_producers_one_consumer() {
    const PRODUCERS: u64 = 4;
    const RECORDS: u64 = 5_000;
    for shards in [Shards::ONE, Shards::new(3, 0)] {
        let ring: RingBuf<[u64; 2]> = RingBuf::with_shards(256, shards);
        let done = AtomicUsize::new(0);
        let dropped = AtomicU64::new(0);
        let mut received: Vec<[u64; 2]> = Vec::new();
        thread::scope(|s| {
            for p in 0..PRODUCERS {
                let (ring, done, dropped) = (&ring, &done, &dropped);
                s.spawn(move || {
                    for i in 0..RECORDS {
                        if ring.output(&[p, i]).is_err() {
                            dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    done.fetch_add(1, Ordering::Release);
                });
            }
            let mut consumer = ring.consumer().unwrap();
            loop {
                let finished = done.load(Ordering::Acquire) == PRODUCERS as usize;
                let before = received.len();
                received.extend(consumer.drain());
                if finished && received.len() == before {
                    break;
                }
                if received.len() == before {
                    thread::yield_now();
                }
            }
        });
        let dropped = dropped.load(Ordering::Relaxed);
        assert_eq!(ring.drops(), dropped, "{shards:?}");
        assert_eq!(received.len() as u64 + dropped, PRODUCERS * RECORDS, "{shards:?}");
        assert_eq!(received.iter().collect::<HashSet<_>>().len(), received.len(), "duplicates");
        assert_eq!(ring.lost(), 0);
        if shards == Shards::ONE {
            // One ring: each producer's records come out in the order it wrote them.
            let mut last = [None; PRODUCERS as usize];
            for &[p, i] in &received {
                let prev = &mut last[p as usize];
                assert!(prev.is_none_or(|prev| prev < i), "producer {p}: {i} after {prev:?}");
                *prev = Some(i);
            }
        }
    }
}

#[test]
fn rings_without_a_host_shard_refuse_host_producers() {
    let ring: RingBuf<u64> = RingBuf::with_shards(4, Shards::new(0, 2));
    assert!(matches!(ring.output(&1), Err(MapError::NoHostShard)));
    assert!(matches!(ring.reserve(), Err(MapError::NoHostShard)));
    assert_eq!(ring.drops(), 0, "nothing was dropped: there was no ring to put it in");
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), None);
}

/// The 8-byte word at byte offset `off` of a map's memory.
fn map_word(raw: &RawMap, off: usize) -> &AtomicU64 {
    let (base, len) = raw.memory();
    assert!(off.is_multiple_of(8) && off + 8 <= len, "word {off} of {len} bytes");
    // SAFETY: an aligned word inside the map's memory, which `raw` keeps alive; the layout's
    // words are only ever accessed atomically.
    unsafe { AtomicU64::from_ptr(base.as_ptr().add(off).cast()) }
}

/// Writes `records` into ring `shard` as records reach a host map from the GPU without their
/// sequence words (a device group publishes its first slot only): tickets taken by adding to
/// `head`, the ones at or past `tail + capacity` dropped and counted, with `head` brought back
/// to that limit (which `commit_written_records` also repairs), and the records written at
/// their slots, every word of them, with no sequence word.
fn device_output(raw: &RawMap, shard: u32, records: &[Vec<u64>]) {
    let g = *raw.geometry();
    let counter = |off| map_word(raw, g.shard_offset(shard) + off);
    let first = counter(layout::shard::LEN_OR_HEAD).fetch_add(records.len() as u64, SeqCst);
    let limit = counter(layout::shard::TAIL).load(SeqCst) + u64::from(g.capacity);
    for (t, record) in (first..).zip(records) {
        if t >= limit {
            counter(layout::shard::REFUSED).fetch_add(1, SeqCst);
            counter(layout::shard::LEN_OR_HEAD).fetch_min(limit, SeqCst);
            continue;
        }
        let at = g.slot_offset(shard, (t % u64::from(g.capacity)) as u32);
        for w in 0..g.slot_stride as usize / 8 {
            map_word(raw, at + 8 * w).store(record.get(w).copied().unwrap_or(0), SeqCst);
        }
    }
}

/// The state and owner in ring `shard`'s sequence word of `slot`.
fn seq_state(raw: &RawMap, shard: u32, slot: u32) -> (u32, u64, u32) {
    use layout::ring_state as rs;
    let word = map_word(raw, raw.geometry().seq_offset(shard, slot)).load(SeqCst);
    ((word >> 32) as u32, word >> rs::SHIFT & 3, (word & rs::OWNER_MASK) as u32)
}

#[test]
fn records_written_by_device_producers_are_committed_then_consumed_in_order() {
    // Two device rings of eight 12-byte records (16 with padding); the device writes ring 1.
    let g = Geometry::new(MapKind::RingBuf, 0, 12, 8, 0, 2).unwrap();
    let raw = RawMap::create(g, &Placement::Process).unwrap();
    let records: Vec<Vec<u64>> = (0..5).map(|i| vec![i, 0xdead_0000 + i]).collect();
    device_output(&raw, 1, &records);
    let ring: RingBuf<[u32; 3]> = RingBuf::from_raw(raw.clone()).unwrap();
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), None, "not published yet: no sequence word says committed");
    assert_eq!(raw.commit_written_records(1).unwrap(), 5);
    for slot in 0..5 {
        let state = (0, layout::ring_state::COMMITTED, layout::DEVICE_OWNER);
        assert_eq!(seq_state(&raw, 1, slot), state, "slot {slot}");
    }
    assert_eq!(seq_state(&raw, 1, 5), (0, layout::ring_state::FREE, 0));
    assert_eq!(raw.commit_written_records(1).unwrap(), 0, "again: nothing more");
    assert_eq!(raw.commit_written_records(0).unwrap(), 0, "ring 0 has nothing written");
    assert_eq!(ring.pending(), 5);
    let got: Vec<[u32; 3]> = consumer.drain().collect();
    // A record's first 12 bytes: word 0, then the low half of word 1.
    let expected: Vec<[u32; 3]> = (0..5).map(|i| [i, 0, 0xdead_0000 + i]).collect();
    assert_eq!(got, expected);
    assert_eq!((ring.pending(), ring.lost(), ring.drops()), (0, 0, 0));
    assert_eq!(raw.commit_written_records(1).unwrap(), 0, "consumed: nothing to commit");
    assert_eq!(consumer.poll(), None);
}

#[test]
fn device_records_are_committed_in_a_ring_that_wrapped() {
    let ring: RingBuf<u64> = RingBuf::with_capacity(8);
    let raw = ring.raw();
    let mut consumer = ring.consumer().unwrap();
    // Host records first: tail and head at 13, slots in laps 1 and 2.
    for i in 0..13 {
        ring.output(&i).unwrap();
        assert_eq!(consumer.poll(), Some(i));
    }
    // A device takes 11 tickets: 13 to 20 fit, 21 to 23 are dropped.
    device_output(raw, 0, &(13..24).map(|i| vec![i]).collect::<Vec<_>>());
    assert_eq!(ring.drops(), 3);
    assert_eq!(raw.commit_written_records(0).unwrap(), 8);
    assert_eq!(seq_state(raw, 0, 13 % 8), (1, layout::ring_state::COMMITTED, layout::DEVICE_OWNER));
    assert_eq!(seq_state(raw, 0, 20 % 8), (2, layout::ring_state::COMMITTED, layout::DEVICE_OWNER));
    assert_eq!(raw.commit_written_records(0).unwrap(), 0);
    assert!(matches!(ring.output(&99), Err(MapError::RingFull)), "the ring is full");
    assert_eq!(consumer.drain().collect::<Vec<_>>(), (13..21).collect::<Vec<_>>());
    // The ring goes on, for host producers and for the device.
    ring.output(&21).unwrap();
    device_output(raw, 0, &[vec![22], vec![23]]);
    assert_eq!(raw.commit_written_records(0).unwrap(), 2);
    assert_eq!(consumer.drain().collect::<Vec<_>>(), [21, 22, 23]);
    assert_eq!((ring.drops(), ring.lost(), ring.pending()), (4, 0, 0));
}

#[test]
fn committing_device_records_brings_a_runaway_head_back() {
    let ring: RingBuf<u64> = RingBuf::with_capacity(4);
    let raw = ring.raw();
    let head = map_word(raw, raw.geometry().shard_offset(0) + layout::shard::LEN_OR_HEAD);
    // A device that took 1000 tickets, wrote the 4 that fit, and left `head` where it was.
    device_output(raw, 0, &[vec![1], vec![2], vec![3], vec![4]]);
    head.fetch_add(996, SeqCst);
    assert_eq!(raw.commit_written_records(0).unwrap(), 4);
    assert_eq!(head.load(SeqCst), 4, "head is tail + capacity again");
    assert_eq!(ring.pending(), 4);
    assert_eq!(ring.consumer().unwrap().drain().collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(raw.commit_written_records(0).unwrap(), 0);
    assert_eq!(head.load(SeqCst), 4, "head within the limit stays");
}

#[test]
fn committing_device_records_leaves_host_producers_slots_alone() {
    let ring: RingBuf<u64> = RingBuf::with_capacity(8);
    let raw = ring.raw();
    ring.output(&10).unwrap();
    let mut reserved = ring.reserve().unwrap();
    drop(ring.reserve().unwrap()); // discarded
    assert_eq!(raw.commit_written_records(0).unwrap(), 0, "host records only");
    use layout::ring_state::{COMMITTED, DISCARDED, RESERVED};
    let states = || (0..3).map(|slot| seq_state(raw, 0, slot)).collect::<Vec<_>>();
    let pid = std::process::id();
    let host = vec![(0, COMMITTED, 0), (0, RESERVED, pid), (0, DISCARDED, 0)];
    assert_eq!(states(), host);
    device_output(raw, 0, &[vec![13], vec![14], vec![15]]);
    assert_eq!(raw.commit_written_records(0).unwrap(), 3);
    assert_eq!(states(), host, "the host producers' slots are as they were");
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), Some(10));
    assert_eq!(consumer.poll(), None, "the reservation holds the consumer back");
    *reserved = 11;
    reserved.commit();
    assert_eq!(consumer.drain().collect::<Vec<_>>(), [11, 13, 14, 15]);
    assert_eq!((ring.drops(), ring.lost()), (0, 0));
}

#[test]
fn committing_device_records_needs_a_ring_shard() {
    let hash =
        RawMap::create(Geometry::new(MapKind::Hash, 8, 8, 4, 1, 0).unwrap(), &Placement::Process)
            .unwrap();
    let array = RawMap::create(
        Geometry::new(MapKind::PerCpuArray, 4, 8, 4, 1, 2).unwrap(),
        &Placement::Process,
    )
    .unwrap();
    for (map, kind) in [(&hash, MapKind::Hash), (&array, MapKind::PerCpuArray)] {
        match map.commit_written_records(0) {
            Err(MapError::Unsupported { op, kind: k }) => {
                assert_eq!((op, k), ("commit_written_records", kind));
            }
            other => panic!("{kind:?}: {other:?}"),
        }
    }
    let ring = RawMap::create(
        Geometry::new(MapKind::RingBuf, 0, 8, 4, 1, 2).unwrap(),
        &Placement::Process,
    )
    .unwrap();
    for shard in [3, 4, u32::MAX] {
        let err = ring.commit_written_records(shard).unwrap_err();
        assert!(matches!(err, MapError::Shard { shard: s, shards: 3 } if s == shard), "{err:?}");
        assert_eq!(err.errno(), -22, "EINVAL");
        assert!(err.to_string().contains(&format!("shard {shard}")), "{err}");
    }
    for shard in 0..3 {
        assert_eq!(ring.commit_written_records(shard).unwrap(), 0, "an empty ring");
    }
}

// ---------------------------------------------------------------------------------------------
// Arrays, odd sizes, creation errors.

#[test]
fn arrays_start_zeroed_and_round_trip_values() {
    let a: Array<[u16; 5]> = Array::with_len(3);
    assert_eq!(a.to_vec(), [[0; 5]; 3]);
    assert_eq!(a.len(), 3);
    assert!(!a.is_empty());
    a.set(2, &[1, 2, 3, 4, 5]).unwrap();
    a.set(0, &[u16::MAX; 5]).unwrap();
    assert_eq!(a.get(2).unwrap(), [1, 2, 3, 4, 5]);
    assert_eq!(a.to_vec(), [[u16::MAX; 5], [0; 5], [1, 2, 3, 4, 5]]);
    assert!(matches!(a.get(3), Err(MapError::Index { index: 3, len: 3 })));
    assert!(matches!(a.set(u32::MAX, &[0; 5]), Err(MapError::Index { .. })));
    assert_eq!(MapError::Index { index: 3, len: 3 }.errno(), -7);

    let p: PerCpuArray<u32> = PerCpuArray::with_shards(2, Shards::new(2, 1));
    p.set(1, &9).unwrap();
    let v = p.get(1).unwrap();
    assert_eq!(v.cpu.iter().sum::<u32>(), 9);
    assert_eq!(v.sm, [0]);
    assert_eq!(p.sum(1).unwrap(), 9);
    assert!(matches!(p.set(2, &0), Err(MapError::Index { .. })));
}

#[test]
fn odd_key_and_value_sizes() {
    let m: HashMap<[u8; 3], [u8; 13]> = HashMap::with_capacity(300);
    for i in 0..300u32 {
        let k = [i as u8, (i >> 8) as u8, 0xee];
        m.insert(&k, &[i as u8; 13]).unwrap();
    }
    assert_eq!(m.len(), 300);
    for i in 0..300u32 {
        assert_eq!(m.get(&[i as u8, (i >> 8) as u8, 0xee]), Some([i as u8; 13]));
    }
    assert_eq!(m.get(&[0, 0, 0]), None);
    let wide: HashMap<[u64; 5], u16> = HashMap::with_capacity(2);
    wide.insert(&[1, 2, 3, 4, 5], &7).unwrap();
    wide.insert(&[1, 2, 3, 4, 6], &8).unwrap();
    assert_eq!(wide.get(&[1, 2, 3, 4, 5]), Some(7));
    assert_eq!(wide.get(&[1, 2, 3, 4, 6]), Some(8));
    assert_eq!(wide.get(&[1, 2, 3, 4, 7]), None);
}

#[test]
fn per_cpu_maps_without_host_shards_refuse_host_writes() {
    let a: PerCpuArray<u64> = PerCpuArray::with_shards(4, Shards::new(0, 2));
    assert!(matches!(a.set(0, &1), Err(MapError::NoHostShard)));
    assert!(matches!(a.fetch_add(0, 1), Err(MapError::NoHostShard)));
    assert_eq!(a.sum(0).unwrap(), 0);
    let h: PerCpuHashMap<u64, u64> = PerCpuHashMap::with_shards(4, Shards::new(0, 1));
    assert!(matches!(h.insert(&1, &1), Err(MapError::NoHostShard)));
    assert!(matches!(h.fetch_add(&1, 1), Err(MapError::NoHostShard)));
    assert_eq!(h.get(&1), None);
    assert!(h.keys().is_empty());
    let raw = h.raw();
    assert!(matches!(
        raw.update(&1u64.to_le_bytes(), &[0; 8], UpdateFlags::Any),
        Err(MapError::NoHostShard)
    ));
    assert!(matches!(raw.delete(&1u64.to_le_bytes()), Err(MapError::NoHostShard)));
}

// ---------------------------------------------------------------------------------------------
// RawMap, as engines use it.

fn read_u64(ptr: std::ptr::NonNull<u8>) -> u64 {
    // SAFETY: the pointer is an 8-byte aligned value of a live map, read atomically.
    unsafe { std::sync::atomic::AtomicU64::from_ptr(ptr.as_ptr().cast()) }.load(Ordering::SeqCst)
}

#[test]
fn raw_hash_operations() {
    let g = Geometry::new(MapKind::Hash, 8, 8, 4, 1, 0).unwrap();
    let raw = RawMap::create(g, &Placement::Process).unwrap();
    assert_eq!(raw.kind(), MapKind::Hash);
    assert!(raw.is_empty());
    let k = |n: u64| n.to_le_bytes();
    raw.update(&k(1), &k(10), UpdateFlags::Any).unwrap();
    assert!(matches!(raw.update(&k(1), &k(11), UpdateFlags::NoExist), Err(MapError::Exists)));
    assert!(matches!(raw.update(&k(2), &k(20), UpdateFlags::Exist), Err(MapError::NotFound)));
    raw.update(&k(1), &k(12), UpdateFlags::Exist).unwrap();
    let ptr = raw.lookup(&k(1)).unwrap().expect("present");
    assert_eq!(read_u64(ptr), 12);
    raw.update(&k(1), &k(13), UpdateFlags::Any).unwrap();
    assert_eq!(read_u64(ptr), 13, "the pointer is to the value in place");
    assert_eq!(raw.lookup(&k(2)).unwrap(), None);
    assert_eq!(raw.len(), 1);
    raw.delete(&k(1)).unwrap();
    assert!(matches!(raw.delete(&k(1)), Err(MapError::NotFound)));
    assert!(matches!(raw.lookup(&[0; 4]), Err(MapError::Geometry { .. })), "short key");
    assert!(matches!(raw.update(&k(1), &[0; 4], UpdateFlags::Any), Err(MapError::Geometry { .. })));
    assert!(matches!(raw.delete(&[0; 9]), Err(MapError::Geometry { .. })));
    assert!(matches!(raw.output(&[0; 8]), Err(MapError::Unsupported { op: "output", .. })));
    assert_eq!(MapError::Exists.errno(), -17);
    assert_eq!(MapError::NotFound.errno(), -2);
    // The typed view of the same memory agrees.
    let typed: HashMap<u64, u64> = HashMap::from_raw(raw.clone()).unwrap();
    typed.insert(&3, &30).unwrap();
    assert_eq!(read_u64(raw.lookup(&k(3)).unwrap().unwrap()), 30);
    assert!(format!("{raw:?}").contains("Hash"));
}

#[test]
fn raw_array_and_ring_operations() {
    let g = Geometry::new(MapKind::Array, 4, 8, 4, 1, 0).unwrap();
    let raw = RawMap::create(g, &Placement::Process).unwrap();
    let i = |n: u32| n.to_le_bytes();
    assert_eq!(raw.len(), 4, "an array's len is its length");
    raw.update(&i(3), &7u64.to_le_bytes(), UpdateFlags::Any).unwrap();
    raw.update(&i(3), &8u64.to_le_bytes(), UpdateFlags::Exist).unwrap();
    assert!(matches!(raw.update(&i(3), &[0; 8], UpdateFlags::NoExist), Err(MapError::Exists)));
    assert!(matches!(
        raw.update(&i(4), &[0; 8], UpdateFlags::Any),
        Err(MapError::Index { index: 4, len: 4 })
    ));
    assert_eq!(read_u64(raw.lookup(&i(3)).unwrap().unwrap()), 8);
    assert_eq!(raw.lookup(&i(4)).unwrap(), None, "past the end is no element");
    assert!(matches!(
        raw.delete(&i(0)),
        Err(MapError::Unsupported { op: "delete", kind: MapKind::Array })
    ));
    assert_eq!(Array::<u64>::from_raw(raw).unwrap().get(3).unwrap(), 8);

    let g = Geometry::new(MapKind::RingBuf, 0, 8, 4, 1, 0).unwrap();
    let ring = RawMap::create(g, &Placement::Process).unwrap();
    assert!(matches!(ring.lookup(&[]), Err(MapError::Unsupported { op: "lookup", .. })));
    assert!(matches!(
        ring.update(&[], &[0; 8], UpdateFlags::Any),
        Err(MapError::Unsupported { .. })
    ));
    assert!(matches!(ring.delete(&[]), Err(MapError::Unsupported { .. })));
    ring.output(&[1]).unwrap();
    assert_eq!(ring.len(), 1, "a ring's len is what waits for the consumer");
    let typed: RingBuf<u64> = RingBuf::from_raw(ring).unwrap();
    assert_eq!(typed.consumer().unwrap().poll(), Some(1));
    assert_eq!(typed.pending(), 0);
}

#[test]
fn update_flags_follow_linux() {
    assert_eq!(UpdateFlags::from_linux(0).unwrap(), UpdateFlags::Any);
    assert_eq!(UpdateFlags::from_linux(1).unwrap(), UpdateFlags::NoExist);
    assert_eq!(UpdateFlags::from_linux(2).unwrap(), UpdateFlags::Exist);
    for bad in [3, 4, u64::MAX] {
        let err = UpdateFlags::from_linux(bad).unwrap_err();
        assert!(matches!(err, MapError::Flags(f) if f == bad));
        assert_eq!(err.errno(), -22, "EINVAL");
    }
    assert_eq!(UpdateFlags::default(), UpdateFlags::Any);
}

#[test]
fn errors_explain_themselves() {
    let m: HashMap<u64, u64> = HashMap::with_capacity(1);
    m.insert(&1, &1).unwrap();
    let full = m.insert(&2, &2).unwrap_err().to_string();
    assert!(full.contains("full") && full.contains('1'), "{full}");
    let mismatch = HashMap::<u32, u64>::from_raw(m.raw().clone()).unwrap_err().to_string();
    assert!(mismatch.contains("hash") && mismatch.contains("8-byte keys"), "{mismatch}");
    assert!(mismatch.contains("4-byte keys"), "{mismatch}");
}

#[test]
fn fetch_add_field_adds_to_one_field_of_a_struct_value() {
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
    struct Stats {
        count: u64,
        bytes: u64,
        hits: [u32; 2],
    }
    let m: HashMap<u32, Stats> = HashMap::with_capacity(4);
    assert_eq!(m.fetch_add_field(&1, |s| &s.count, 1).unwrap(), 0);
    assert_eq!(m.fetch_add_field(&1, |s| &s.bytes, 4096).unwrap(), 0);
    assert_eq!(m.fetch_add_field(&1, |s| &s.hits[1], 3u32).unwrap(), 0);
    assert_eq!(m.fetch_add_field(&1, |s| &s.count, 1).unwrap(), 1);
    assert_eq!(m.get(&1), Some(Stats { count: 2, bytes: 4096, hits: [0, 3] }));
    let a: Array<Stats> = Array::with_len(2);
    assert_eq!(a.fetch_add_field(1, |s| &s.bytes, 5).unwrap(), 0);
    assert!(matches!(a.fetch_add_field(2, |s| &s.bytes, 5), Err(MapError::Index { .. })));
    // A closure that points outside the value is refused, not followed.
    static OUTSIDE: u64 = 0;
    assert!(matches!(m.fetch_add_field(&1, |_| &OUTSIDE, 1), Err(MapError::Field { .. })));
}
