//! Maps under contention: exact totals from many threads, racing inserts of one key, mixed
//! workloads and full maps.

mod common;

use std::collections::HashSet;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use bytemuck::{Pod, Zeroable};
use egpu_maps::{
    Array, HashMap, MapError, PerCpuArray, PerCpuHashMap, Placement, Shards, UpdateFlags, cpu_count,
};
use egpu_test_support::Rng;

const THREADS: usize = 8;
const UPDATES: u64 = 20_000;
const TOTAL: u64 = THREADS as u64 * UPDATES;

/// Runs `f(thread index)` on `THREADS` threads released together, and returns their results
/// in thread order.
fn on_threads<T: Send>(f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (f, start) = (&f, &start);
                s.spawn(move || {
                    start.wait();
                    f(t)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("worker panicked")).collect()
    })
}

// ---------------------------------------------------------------------------------------------
// 1. Exact totals.

#[test]
fn hash_fetch_add_on_one_key_is_exact() {
    let m: HashMap<u64, u64> = HashMap::with_capacity(16);
    let previous: Vec<Vec<u64>> =
        on_threads(|_| (0..UPDATES).map(|_| m.fetch_add(&7, 1).unwrap()).collect());
    assert_eq!(m.get(&7), Some(TOTAL));
    assert_eq!(m.len(), 1, "racing first updates made one entry");
    // Every update saw a different previous value: none was lost or applied twice.
    let mut all: Vec<u64> = previous.concat();
    all.sort_unstable();
    assert!(all.iter().copied().eq(0..TOTAL), "previous values are not 0..{TOTAL}");
}

#[test]
fn hash_fetch_add_on_many_keys_is_exact() {
    let m: HashMap<u64, u64> = HashMap::with_capacity(64);
    on_threads(|t| {
        for i in 0..UPDATES {
            m.fetch_add(&(t as u64), 1).unwrap();
            m.fetch_add(&(100 + i % 16), 1).unwrap();
        }
    });
    for t in 0..THREADS as u64 {
        assert_eq!(m.get(&t), Some(UPDATES), "key {t}");
    }
    for k in 100..116 {
        assert_eq!(m.get(&k), Some(TOTAL / 16), "key {k}");
    }
    assert_eq!(m.len(), THREADS + 16);
    assert_eq!(m.iter().count(), THREADS + 16);
}

#[test]
fn hash_fetch_add_on_u32_values_wraps_and_is_exact() {
    let m: HashMap<u32, u32> = HashMap::with_capacity(4);
    m.insert(&1, &(u32::MAX - 10)).unwrap();
    on_threads(|_| {
        for _ in 0..UPDATES {
            m.fetch_add(&1, 1).unwrap();
            m.fetch_add(&2, 3).unwrap();
        }
    });
    assert_eq!(m.get(&1), Some((u32::MAX - 10).wrapping_add(TOTAL as u32)));
    assert_eq!(m.get(&2), Some(3 * TOTAL as u32));
}

/// A value with several fields, each updated through `HashMap::word`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Stats {
    count: u64,
    bytes: u64,
    seen_by: u32,
    small: u32,
    max: u64,
}

#[test]
fn hash_word_fields_of_a_struct_are_exact() {
    const KEYS: u64 = 4;
    const N: u64 = 10_000;
    let m: HashMap<u64, Stats> = HashMap::with_capacity(8);
    on_threads(|t| {
        for i in 0..N {
            let key = i % KEYS;
            m.word::<u64>(&key, 0).unwrap().fetch_add(1);
            m.word::<u64>(&key, 8).unwrap().fetch_add(i);
            m.word::<u32>(&key, 16).unwrap().fetch_or(1 << t);
            m.word::<u32>(&key, 20).unwrap().fetch_add(1);
            // A maximum, through compare_exchange.
            let max = m.word::<u64>(&key, 24).unwrap();
            let mine = t as u64 * N + i;
            let mut seen = max.load();
            while seen < mine {
                match max.compare_exchange(seen, mine) {
                    Ok(_) => break,
                    Err(now) => seen = now,
                }
            }
        }
    });
    assert_eq!(m.len(), KEYS as usize);
    for key in 0..KEYS {
        let per_thread_bytes: u64 = (0..N).filter(|i| i % KEYS == key).sum();
        let last_i = (0..N).filter(|i| i % KEYS == key).max().unwrap();
        let expected = Stats {
            count: THREADS as u64 * N / KEYS,
            bytes: THREADS as u64 * per_thread_bytes,
            seen_by: (1 << THREADS) - 1,
            small: (THREADS as u64 * N / KEYS) as u32,
            max: (THREADS as u64 - 1) * N + last_i,
        };
        assert_eq!(m.get(&key), Some(expected), "key {key}");
    }
}

#[test]
fn word_rejects_fields_that_are_not_aligned_words_of_the_value() {
    let m: HashMap<u64, Stats> = HashMap::with_capacity(8);
    m.insert(&1, &Stats::default()).unwrap();
    for (offset, size) in [(4, 8), (32, 8), (28, 8), (30, 4), (32, 4), (usize::MAX - 2, 4), (40, 8)]
    {
        let err = if size == 8 {
            m.word::<u64>(&1, offset).map(drop)
        } else {
            m.word::<u32>(&1, offset).map(drop)
        };
        assert!(
            matches!(err, Err(MapError::Field { offset: o, size: s, value_size: 32 }) if o == offset && s == size),
            "offset {offset}, size {size}: {err:?}"
        );
    }
    m.word::<u32>(&1, 28).unwrap().store(5);
    assert_eq!(m.get(&1).unwrap().max, 5u64 << 32);

    let a: Array<[u32; 3]> = Array::with_len(2);
    assert!(matches!(a.word::<u64>(0, 8), Err(MapError::Field { .. })), "8 bytes past 12");
    a.word::<u64>(0, 0).unwrap().store(u64::MAX);
    assert!(matches!(a.word::<u32>(0, 12), Err(MapError::Field { .. })));
    assert!(matches!(a.word::<u32>(2, 0), Err(MapError::Index { index: 2, len: 2 })));
    a.word::<u32>(1, 8).unwrap().fetch_add(9);
    assert_eq!(a.to_vec(), [[u32::MAX, u32::MAX, 0], [0, 0, 9]]);
}

#[test]
fn word_rejects_offsets_near_usize_max() {
    // `field + size` must not overflow: in a release build it wraps to 0, passes the check, and
    // the word handed out lies just before the value.
    let m: HashMap<u64, Stats> = HashMap::with_capacity(8);
    let a: Array<u64> = Array::with_len(1);
    for offset in [usize::MAX - 3, usize::MAX - 7] {
        assert!(matches!(m.word::<u32>(&1, offset), Err(MapError::Field { .. })));
        assert!(matches!(m.word::<u64>(&1, offset), Err(MapError::Field { .. })));
        assert!(matches!(a.word::<u32>(0, offset), Err(MapError::Field { .. })));
        assert!(matches!(a.word::<u64>(0, offset), Err(MapError::Field { .. })));
    }
}

#[test]
fn word_with_a_bad_field_changes_nothing() {
    let m: HashMap<u64, Stats> = HashMap::with_capacity(8);
    assert!(matches!(m.word::<u64>(&1, 4), Err(MapError::Field { .. })));
    assert!(!m.contains_key(&1), "a refused word() call inserted its key");
    assert_eq!(m.len(), 0);
}

#[test]
fn array_fetch_add_is_exact() {
    let a: Array<u64> = Array::with_len(8);
    let b: Array<[u32; 2]> = Array::with_len(2);
    on_threads(|t| {
        for _ in 0..UPDATES {
            a.fetch_add(0, 1).unwrap();
            a.fetch_add(1 + (t % 7) as u32, 2).unwrap();
            b.word::<u32>(1, 4).unwrap().fetch_add(1);
        }
    });
    let values = a.to_vec();
    assert_eq!(values[0], TOTAL);
    let threads_on = |i: usize| (0..THREADS).filter(|t| 1 + t % 7 == i).count() as u64;
    for (i, &v) in values.iter().enumerate().skip(1) {
        assert_eq!(v, 2 * UPDATES * threads_on(i), "index {i}");
    }
    assert_eq!(b.get(1).unwrap(), [0, TOTAL as u32]);
    assert_eq!(b.get(0).unwrap(), [0, 0]);
    assert!(matches!(a.fetch_add(8, 1), Err(MapError::Index { index: 8, len: 8 })));
}

#[test]
fn per_cpu_array_sums_are_exact() {
    // One shard per CPU (the default), and more shards than CPUs with device shards too.
    let default: PerCpuArray<u64> = PerCpuArray::with_len(4);
    let sharded: PerCpuArray<u64> = PerCpuArray::with_shards(4, Shards::new(3, 2));
    on_threads(|t| {
        for i in 0..UPDATES {
            default.fetch_add(0, 1).unwrap();
            default.fetch_add(1 + (i % 3) as u32, t as u64).unwrap();
            sharded.fetch_add(3, 1).unwrap();
        }
    });
    assert_eq!(default.sum(0).unwrap(), TOTAL);
    let thread_sum = (0..THREADS as u64).sum::<u64>();
    let per_index = |i: u64| (0..UPDATES).filter(|k| k % 3 == i).count() as u64 * thread_sum;
    for i in 0..3u32 {
        assert_eq!(default.sum(1 + i).unwrap(), per_index(u64::from(i)), "index {}", 1 + i);
    }
    let shards = default.get(0).unwrap();
    assert_eq!(shards.cpu.len(), cpu_count() as usize);
    assert!(shards.sm.is_empty());

    let s = sharded.get(3).unwrap();
    assert_eq!((s.cpu.len(), s.sm.len()), (3, 2));
    assert_eq!(s.sm, [0, 0], "host threads never write device shards");
    assert_eq!(sharded.sum(3).unwrap(), TOTAL);
    assert_eq!(sharded.sum(0).unwrap(), 0);
    assert!(matches!(sharded.sum(4), Err(MapError::Index { .. })));
}

#[test]
fn per_cpu_hash_sums_are_exact() {
    let m: PerCpuHashMap<u64, u64> = PerCpuHashMap::with_capacity(32);
    on_threads(|t| {
        for _ in 0..UPDATES {
            m.fetch_add(&1, 1).unwrap();
            m.fetch_add(&(10 + t as u64), 1).unwrap();
        }
    });
    assert_eq!(m.sum(&1), Some(TOTAL));
    for t in 0..THREADS as u64 {
        assert_eq!(m.sum(&(10 + t)), Some(UPDATES), "key {}", 10 + t);
    }
    let mut keys = m.keys();
    keys.sort_unstable();
    let expected: Vec<u64> = std::iter::once(1).chain(10..10 + THREADS as u64).collect();
    assert_eq!(keys, expected, "each key once, whatever the shards holding it");
    assert_eq!(m.get(&1).unwrap().cpu.len(), cpu_count() as usize);
    assert_eq!(m.sum(&2), None);
    assert!(m.remove(&1));
    assert_eq!(m.sum(&1), None);
    assert!(!m.remove(&1));
}

// ---------------------------------------------------------------------------------------------
// 2. Racing inserts.

/// The keys of round `round`: fresh, distinct, spread over the whole key space.
fn round_keys(round: u64, n: u64) -> Vec<u64> {
    let mut rng = Rng::from_env("round keys", 0x5eed_0000 + round);
    let keys: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), keys.len());
    keys
}

#[test]
fn racing_inserts_of_one_key_make_one_entry() {
    const ROUNDS: u64 = 150;
    const KEYS: u64 = 16;
    // Room for every racer's provisional count (see `racing_inserts_into_a_map_with_just_enough_room`).
    let m: HashMap<u64, u64> = HashMap::with_capacity(KEYS as u32 + THREADS as u32);
    let value = |t: usize, k: u64| (t as u64) << 56 | (k >> 8);
    let (go, done) = (Barrier::new(THREADS + 1), Barrier::new(THREADS + 1));
    thread::scope(|s| {
        for t in 0..THREADS {
            let (m, go, done) = (&m, &go, &done);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let mut keys = round_keys(round, KEYS);
                    // Each thread goes through the keys in its own order.
                    keys.rotate_left(t % KEYS as usize);
                    go.wait();
                    for &k in &keys {
                        m.insert(&k, &value(t, k)).unwrap();
                    }
                    done.wait();
                }
            });
        }
        for round in 0..ROUNDS {
            let keys = round_keys(round, KEYS);
            go.wait();
            done.wait();
            assert_eq!(m.len(), KEYS as usize, "round {round}");
            let mut seen: Vec<u64> = m.iter().map(|(k, _)| k).collect();
            seen.sort_unstable();
            let mut expected = keys.clone();
            expected.sort_unstable();
            assert_eq!(seen, expected, "round {round}: each key exactly once");
            for &k in &keys {
                let v = m.get(&k).unwrap();
                assert!(
                    v & ((1 << 56) - 1) == k >> 8 && (v >> 56) < THREADS as u64,
                    "round {round}: key {k:#x} holds {v:#x}, which no thread wrote"
                );
            }
            if round % 2 == 0 {
                m.clear();
            } else {
                for &k in &keys {
                    assert!(m.remove(&k));
                }
            }
            assert!(m.is_empty());
        }
    });
}

#[test]
fn racing_first_fetch_adds_count_every_update() {
    const ROUNDS: u64 = 150;
    const KEYS: u64 = 16;
    let m: HashMap<u64, u64> = HashMap::with_capacity(KEYS as u32 + THREADS as u32);
    let (go, done) = (Barrier::new(THREADS + 1), Barrier::new(THREADS + 1));
    thread::scope(|s| {
        for _ in 0..THREADS {
            let (m, go, done) = (&m, &go, &done);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let keys = round_keys(round, KEYS);
                    go.wait();
                    for &k in &keys {
                        m.fetch_add(&k, 1).unwrap();
                    }
                    done.wait();
                }
            });
        }
        for round in 0..ROUNDS {
            go.wait();
            done.wait();
            let keys = round_keys(round, KEYS);
            assert_eq!(m.len(), KEYS as usize, "round {round}");
            assert_eq!(m.iter().count(), KEYS as usize, "round {round}");
            for &k in &keys {
                assert_eq!(m.get(&k), Some(THREADS as u64), "round {round}, key {k:#x}");
            }
            m.clear();
        }
    });
}

#[test]
fn racing_inserts_into_a_map_with_just_enough_room() {
    const ROUNDS: u64 = 1000;
    const KEYS: u64 = 4;
    let m: HashMap<u64, u64> = HashMap::with_capacity(KEYS as u32);
    let (go, done) = (Barrier::new(THREADS + 1), Barrier::new(THREADS + 1));
    let refusals = AtomicU64::new(0);
    thread::scope(|s| {
        for _ in 0..THREADS {
            let (m, go, done, refusals) = (&m, &go, &done, &refusals);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let keys = round_keys(round, KEYS);
                    go.wait();
                    for &k in &keys {
                        if let Err(e) = m.insert(&k, &k) {
                            assert!(matches!(e, MapError::Full { .. }), "{e}");
                            refusals.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    done.wait();
                }
            });
        }
        for _ in 0..ROUNDS {
            go.wait();
            done.wait();
            m.clear();
        }
    });
    assert_eq!(
        refusals.load(Ordering::Relaxed),
        0,
        "inserts of keys that fit ({KEYS} keys, capacity {KEYS}) were refused as Full"
    );
}

#[test]
fn mixed_inserts_and_removes_leave_a_consistent_map() {
    const KEYS: u64 = 48;
    const CAPACITY: u32 = 32;
    const OPS: u64 = 20_000;
    let m: HashMap<u64, u64> = HashMap::with_capacity(CAPACITY);
    // A value names its key (high half) and its writer (low half).
    let value = |k: u64, t: usize| k << 32 | t as u64;
    let full = on_threads(|t| {
        let mut rng = Rng::from_env("mixed workload", 0xa11ce + t as u64);
        let mut full = 0u64;
        for _ in 0..OPS {
            let k = rng.below(KEYS as usize) as u64;
            match rng.below(5) {
                0 | 1 => match m.insert(&k, &value(k, t)) {
                    Ok(()) => {}
                    Err(MapError::Full { capacity: CAPACITY }) => full += 1,
                    Err(e) => panic!("insert: {e}"),
                },
                2 => {
                    m.remove(&k);
                }
                3 => match m.update(&k, &value(k, t), UpdateFlags::Exist) {
                    Ok(()) | Err(MapError::NotFound) => {}
                    Err(e) => panic!("update: {e}"),
                },
                _ => {
                    if let Some(v) = m.get(&k) {
                        assert!((v & 0xffff_ffff) < THREADS as u64, "{v:#x}");
                    }
                }
            }
        }
        full
    });
    let entries: Vec<(u64, u64)> = m.iter().collect();
    assert_eq!(m.len(), entries.len(), "len disagrees with the entries found");
    assert!(entries.len() <= CAPACITY as usize);
    let keys: HashSet<u64> = entries.iter().map(|&(k, _)| k).collect();
    assert_eq!(keys.len(), entries.len(), "a key appears twice");
    for &(k, v) in &entries {
        assert!(k < KEYS);
        // A value a thread wrote. (That it was written for this very key is not checked here:
        // an update racing with a remove and an insert can land in another key's entry, the
        // bug `an_update_never_writes_into_another_keys_entry` shows.)
        assert!(v >> 32 < KEYS && (v & 0xffff_ffff) < THREADS as u64, "key {k} holds {v:#x}");
        assert_eq!(m.get(&k), Some(v));
    }
    assert_eq!(m.refused(), full.iter().sum::<u64>());
    // Quiescent again: the map still works for every key.
    m.clear();
    for k in 0..CAPACITY as u64 {
        m.insert(&k, &value(k, 0)).unwrap();
    }
    assert_eq!(m.len(), CAPACITY as usize);
}

/// Two keys whose probe sequences start at the same slot of a map of `capacity`, so that the
/// second one reuses the slot the first one's removal leaves.
fn colliding_keys(capacity: u32) -> (u64, u64) {
    let g =
        egpu_maps::layout::Geometry::new(egpu_maps::MapKind::Hash, 8, 8, capacity, 1, 0).unwrap();
    let home = |k: u64| egpu_maps::layout::hash_key(&k.to_le_bytes()) as u32 & (g.slots - 1);
    let first = 1u64;
    let second = (2..).find(|&k| home(k) == home(first)).unwrap();
    (first, second)
}

#[test]
fn an_update_never_writes_into_another_keys_entry() {
    const CYCLES: u64 = 200_000;
    let (k1, k2) = colliding_keys(4);
    let m: HashMap<u64, u64> = HashMap::with_capacity(4);
    m.insert(&k1, &k1).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let wrong = thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = m.update(&k1, &k1, UpdateFlags::Exist);
            }
        });
        let mut wrong = 0;
        for _ in 0..CYCLES {
            m.remove(&k1);
            m.insert(&k2, &k2).unwrap();
            if m.get(&k2) != Some(k2) {
                wrong += 1;
            }
            m.remove(&k2);
            m.insert(&k1, &k1).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        wrong
    });
    assert_eq!(wrong, 0, "{wrong} of {CYCLES} reads of key {k2} found key {k1}'s value");
}

// ---------------------------------------------------------------------------------------------
// 3. Full maps.

#[test]
fn a_full_map_keeps_every_entry() {
    const CAP: u32 = 100;
    let m: HashMap<u64, [u64; 2]> = HashMap::with_capacity(CAP);
    let v = |k: u64| [k * 3, !k];
    for k in 0..u64::from(CAP) {
        m.insert(&k, &v(k)).unwrap();
    }
    assert_eq!(m.len(), CAP as usize);
    for k in 1000..1010u64 {
        assert!(matches!(m.insert(&k, &v(k)), Err(MapError::Full { capacity: CAP })));
    }
    assert!(matches!(m.word::<u64>(&2000, 0), Err(MapError::Full { .. })));
    assert!(matches!(m.update(&2001, &v(1), UpdateFlags::NoExist), Err(MapError::Full { .. })));
    assert_eq!(m.refused(), 12);
    assert_eq!(MapError::Full { capacity: CAP }.errno(), -7, "E2BIG");
    assert_eq!(m.len(), CAP as usize);
    for k in 0..u64::from(CAP) {
        assert_eq!(m.get(&k), Some(v(k)), "key {k} after the refusals");
    }
    for k in [1000, 1005, 2000, 2001] {
        assert!(!m.contains_key(&k));
    }
    // Updates of present keys still work on a full map.
    m.insert(&5, &[1, 2]).unwrap();
    m.update(&6, &[3, 4], UpdateFlags::Exist).unwrap();
    assert!(matches!(m.update(&7, &[0, 0], UpdateFlags::NoExist), Err(MapError::Exists)));
    assert!(matches!(m.update(&1000, &[0, 0], UpdateFlags::Exist), Err(MapError::NotFound)));
    m.word::<u64>(&8, 8).unwrap().fetch_add(1);
    assert_eq!(m.get(&5), Some([1, 2]));
    assert_eq!(m.get(&6), Some([3, 4]));
    assert_eq!(m.get(&8), Some([24, !8 + 1]));
    assert_eq!(m.refused(), 12, "updates of present keys are not refusals");
    // Removing one entry makes room for exactly one.
    assert!(m.remove(&50));
    m.insert(&1000, &v(1000)).unwrap();
    assert!(matches!(m.insert(&1001, &v(1001)), Err(MapError::Full { .. })));
    assert_eq!(m.refused(), 13);
    assert_eq!(m.get(&1000), Some(v(1000)));
    assert_eq!(m.get(&50), None);
    assert_eq!(m.len(), CAP as usize);
    assert_eq!(m.iter().count(), CAP as usize);
}

#[test]
fn a_full_per_cpu_shard_refuses_and_keeps_its_entries() {
    let m: PerCpuHashMap<u32, u32> = PerCpuHashMap::with_shards(8, Shards::new(1, 1));
    for k in 0..8 {
        m.insert(&k, &(k + 100)).unwrap();
    }
    assert!(matches!(m.insert(&8, &0), Err(MapError::Full { capacity: 8 })));
    assert!(matches!(m.fetch_add(&9, 1), Err(MapError::Full { capacity: 8 })));
    m.fetch_add(&3, 1).unwrap();
    for k in 0..8 {
        let extra = u32::from(k == 3);
        let got = m.get(&k).unwrap();
        assert_eq!(got.cpu, [k + 100 + extra]);
        assert_eq!(got.sm, [0]);
    }
    assert_eq!(m.raw().refused(), 2);
    assert_eq!(m.raw().len(), 8);
}

#[test]
fn threads_filling_a_map_never_exceed_its_capacity() {
    const CAP: u32 = 500;
    const PER_THREAD: u64 = 200;
    let m: HashMap<u64, u64> = HashMap::with_capacity(CAP);
    let stored = on_threads(|t| {
        let mut stored = Vec::new();
        for i in 0..PER_THREAD {
            let k = (t as u64) << 32 | i;
            match m.insert(&k, &(k ^ 0xff)) {
                Ok(()) => stored.push(k),
                Err(MapError::Full { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        stored
    });
    let stored: Vec<u64> = stored.concat();
    let attempts = THREADS as u64 * PER_THREAD;
    assert_eq!(m.len(), stored.len());
    assert_eq!(m.refused(), attempts - stored.len() as u64);
    for &k in &stored {
        assert_eq!(m.get(&k), Some(k ^ 0xff));
    }
    // A refusal may be spurious while other inserts are counting themselves (see
    // `racing_inserts_into_a_map_with_just_enough_room`), so the map can end a little short of
    // full; it must never exceed it, and what is missing is inserted afterwards.
    assert!(stored.len() <= CAP as usize);
    let missing = CAP as usize - stored.len();
    for i in 0..missing as u64 {
        m.insert(&(u64::MAX - i), &0).unwrap();
    }
    assert!(matches!(m.insert(&(u64::MAX - missing as u64), &0), Err(MapError::Full { .. })));
    assert_eq!(m.len(), CAP as usize);
}

#[test]
fn placement_process_maps_are_independent() {
    let a: HashMap<u64, u64> = HashMap::create(4, Placement::Process).unwrap();
    let b: HashMap<u64, u64> = HashMap::create(4, Placement::default()).unwrap();
    a.insert(&1, &1).unwrap();
    assert_eq!(b.get(&1), None);
    assert!(a.raw().shared_name().is_none());
}

static LAZY: HashMap<u64, u64> = HashMap::with_capacity(64);

#[test]
fn a_static_map_is_created_once_by_racing_first_users() {
    on_threads(|t| {
        for _ in 0..1000 {
            LAZY.fetch_add(&(t as u64 % 2), 1).unwrap();
        }
    });
    assert_eq!(LAZY.get(&0).unwrap() + LAZY.get(&1).unwrap(), THREADS as u64 * 1000);
    assert_eq!(LAZY.len(), 2);
}
