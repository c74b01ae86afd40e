//! `RawMap`'s byte-level reads: keys, a key's value in every shard, a ring drained.

use egpu_maps::layout::Geometry;
use egpu_maps::{MapError, MapKind, Placement, RawMap, UpdateFlags};

fn map(kind: MapKind, key: u32, value: u32, cpu: u32) -> RawMap {
    let g = Geometry::new(kind, key, value, 16, cpu, 0).expect("a geometry");
    RawMap::create(g, &Placement::Process).expect("a map")
}

#[test]
fn keys_and_values_read_as_bytes() {
    let hash = map(MapKind::Hash, 3, 5, 1);
    for k in [1u8, 7, 9] {
        hash.update(&[k, 0, k], &[k; 5], UpdateFlags::Any).expect("update");
    }
    let mut keys = hash.keys().expect("keys");
    keys.sort();
    assert_eq!(keys, vec![vec![1, 0, 1], vec![7, 0, 7], vec![9, 0, 9]]);
    let mut value = [0u8; 5];
    assert!(hash.read_shards(&[7, 0, 7], &mut value).expect("read"));
    assert_eq!(value, [7; 5]);
    assert!(!hash.read_shards(&[2, 0, 2], &mut value).expect("read"));
    assert!(hash.read_shards(&[7, 0], &mut value).is_err());
    assert!(hash.read_shards(&[7, 0, 7], &mut [0u8; 4]).is_err());

    let per_cpu = map(MapKind::PerCpuArray, 4, 8, 3);
    per_cpu.update(&2u32.to_le_bytes(), &5u64.to_le_bytes(), UpdateFlags::Any).expect("set");
    let mut values = [0u8; 24];
    assert!(per_cpu.read_shards(&2u32.to_le_bytes(), &mut values).expect("read"));
    let sum: u64 = values.chunks(8).map(|c| u64::from_le_bytes(c.try_into().expect("8"))).sum();
    assert_eq!(sum, 5);
    assert!(!per_cpu.read_shards(&16u32.to_le_bytes(), &mut values).expect("read"));
    assert_eq!(per_cpu.keys().expect("indices").len(), 16);
}

#[test]
fn a_ring_drains_whole_records() {
    let ring = map(MapKind::RingBuf, 0, 4, 1);
    for r in 0u32..5 {
        ring.output(&r.to_le_bytes()).expect("output");
    }
    let mut out = [0u8; 12];
    assert_eq!(ring.drain_records(&mut out).expect("read"), 3);
    assert_eq!(out, [0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(ring.drain_records(&mut out).expect("read"), 2);
    assert_eq!(ring.drain_records(&mut out).expect("read"), 0);
    assert!(matches!(ring.keys(), Err(MapError::Unsupported { .. })));
    let hash = map(MapKind::Hash, 4, 4, 1);
    assert!(matches!(hash.drain_records(&mut out), Err(MapError::Unsupported { .. })));
}
