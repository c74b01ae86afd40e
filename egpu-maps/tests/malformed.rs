//! Malformed map memory gives typed errors when it is opened, never a fault: regions given by
//! pointer and length, and shared-memory objects written directly under /dev/shm.

mod common;

use std::io::ErrorKind;
use std::ptr::NonNull;

use common::{ShmFile, shm_path, unique_name};
use egpu_maps::layout::{self, Geometry, HEADER_BYTES, MAX_CAPACITY, header};
use egpu_maps::{
    Array, HashMap, MapError, MapKind, PerCpuArray, PerCpuHashMap, Placement, RawMap, RingBuf,
    Shards, UpdateFlags, unlink_shared,
};
use egpu_test_support::Rng;

/// 8-byte aligned memory for a map.
struct Buf(Vec<u64>);

impl Buf {
    fn zeroed(bytes: usize) -> Buf {
        Buf(vec![0; bytes.div_ceil(8)])
    }

    /// A fresh, empty map of `g`, laid out by `format_raw_parts`.
    fn formatted(g: Geometry) -> Buf {
        let mut buf = Buf::zeroed(g.total_bytes as usize);
        buf.bytes().fill(0xa5);
        let len = buf.len();
        // SAFETY: the buffer is valid, 8-byte aligned and `len` bytes long; the map is dropped
        // at once, before anything else touches the buffer.
        let map = unsafe { RawMap::format_raw_parts(buf.ptr(), len, g) }.expect("format");
        assert_eq!(map.geometry(), &g);
        drop(map);
        buf
    }

    /// A copy of the memory of `map`, which nobody may change meanwhile.
    fn copy_of(map: &RawMap) -> Buf {
        let (ptr, len) = map.memory();
        let mut buf = Buf::zeroed(len);
        // SAFETY: `map` keeps its `len` bytes at `ptr` alive and only this thread uses it; the
        // buffer has room for `len` bytes and does not overlap it.
        unsafe { std::ptr::copy_nonoverlapping(ptr.as_ptr(), buf.ptr().as_ptr(), len) };
        buf
    }

    fn len(&self) -> usize {
        self.0.len() * 8
    }

    fn bytes(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.0)
    }

    fn ptr(&mut self) -> NonNull<u8> {
        NonNull::new(self.0.as_mut_ptr().cast()).expect("a Vec's pointer is never null")
    }

    fn put_u32(&mut self, off: usize, v: u32) -> &mut Buf {
        self.bytes()[off..off + 4].copy_from_slice(&v.to_le_bytes());
        self
    }

    fn put_u64(&mut self, off: usize, v: u64) -> &mut Buf {
        self.bytes()[off..off + 8].copy_from_slice(&v.to_le_bytes());
        self
    }

    fn u32_at(&mut self, off: usize) -> u32 {
        u32::from_le_bytes(self.bytes()[off..off + 4].try_into().unwrap())
    }

    fn u64_at(&mut self, off: usize) -> u64 {
        u64::from_le_bytes(self.bytes()[off..off + 8].try_into().unwrap())
    }

    /// Opens the map in the first `len` bytes and hands it to `f`, which must not keep it.
    fn open_len<R>(&mut self, len: usize, f: impl FnOnce(Result<RawMap, MapError>) -> R) -> R {
        assert!(len <= self.len());
        // SAFETY: the buffer is valid for `len` bytes and 8-byte aligned; `f` drops the map
        // before this returns, and nothing else uses the buffer meanwhile.
        f(unsafe { RawMap::from_raw_parts(self.ptr(), len) })
    }

    /// Opens the whole buffer and returns the outcome (the map itself is dropped).
    fn open(&mut self) -> Result<Geometry, MapError> {
        let len = self.len();
        self.open_len(len, |r| r.map(|m| *m.geometry()))
    }
}

fn geometry(kind: MapKind) -> Geometry {
    match kind {
        MapKind::Hash => Geometry::new(kind, 8, 8, 64, 1, 0),
        MapKind::PerCpuHash => Geometry::new(kind, 8, 8, 16, 2, 1),
        MapKind::Array => Geometry::new(kind, 4, 8, 10, 1, 0),
        MapKind::PerCpuArray => Geometry::new(kind, 4, 8, 10, 3, 0),
        MapKind::RingBuf => Geometry::new(kind, 0, 16, 8, 1, 0),
        other => panic!("{other:?}"),
    }
    .expect("a valid geometry")
}

const KINDS: [MapKind; 5] =
    [MapKind::Hash, MapKind::PerCpuHash, MapKind::Array, MapKind::PerCpuArray, MapKind::RingBuf];

#[track_caller]
fn assert_geometry_error(r: Result<Geometry, MapError>, mentions: &str) {
    match r {
        Err(MapError::Geometry { reason }) => {
            assert!(reason.contains(mentions), "`{reason}` does not mention `{mentions}`")
        }
        other => panic!("expected a Geometry error mentioning `{mentions}`, got {other:?}"),
    }
}

#[test]
fn valid_regions_open_with_their_geometry() {
    for kind in KINDS {
        let g = geometry(kind);
        let mut buf = Buf::formatted(g);
        assert_eq!(buf.open().unwrap(), g, "{kind:?}");
        assert_eq!(buf.u32_at(header::CREATOR_PID), std::process::id());
        // Extra bytes after the map are allowed.
        let mut bigger = Buf::zeroed(buf.len() + 64);
        bigger.bytes()[..buf.len()].copy_from_slice(buf.bytes());
        assert_eq!(bigger.open().unwrap(), g);
    }
}

#[test]
fn a_copied_region_opens_as_the_same_map() {
    let m: HashMap<u64, [u32; 3]> = HashMap::create(32, Placement::Process).unwrap();
    for k in 0..20u64 {
        m.insert(&k, &[k as u32, 2, 3]).unwrap();
    }
    m.remove(&4);
    let mut buf = Buf::copy_of(m.raw());
    buf.open_len(buf.len(), |raw| {
        let copy: HashMap<u64, [u32; 3]> = HashMap::from_raw(raw.unwrap()).unwrap();
        assert_eq!(copy.len(), 19);
        assert_eq!(copy.get(&4), None);
        assert_eq!(copy.get(&7), Some([7, 2, 3]));
        copy.insert(&100, &[1, 1, 1]).unwrap();
        assert_eq!(copy.raw().shared_name(), None);
    });
    assert_eq!(m.get(&100), None, "the copy is separate memory");
    assert_eq!(m.len(), 19);
}

#[test]
fn a_bad_magic_is_refused() {
    for kind in KINDS {
        let mut buf = Buf::formatted(geometry(kind));
        buf.bytes()[0] = b'E';
        let found = buf.u64_at(0);
        assert!(matches!(buf.open(), Err(MapError::BadMagic { found: f }) if f == found));
        // All zeros, as unformatted memory reads.
        buf.put_u64(0, 0);
        assert!(matches!(buf.open(), Err(MapError::BadMagic { found: 0 })));
    }
}

#[test]
fn another_layout_version_is_refused() {
    // Version 1 laid ring slots out as sequence word, then record: a reader must not guess.
    for version in [0, 1, layout::VERSION - 1, layout::VERSION + 1, u32::MAX] {
        let mut buf = Buf::formatted(geometry(MapKind::Hash));
        buf.put_u32(header::VERSION, version);
        assert!(
            matches!(buf.open(), Err(MapError::Version { found, expected: layout::VERSION }) if found == version),
            "version {version}"
        );
    }
}

#[test]
fn an_unknown_kind_is_refused() {
    for kind in [0, 3, 4, 7, 9, 26, 28, 1 << 16, u32::MAX] {
        let mut buf = Buf::formatted(geometry(MapKind::Hash));
        buf.put_u32(header::KIND, kind);
        assert!(
            matches!(buf.open(), Err(MapError::UnknownKind { found }) if found == kind),
            "kind {kind}"
        );
    }
}

#[test]
fn changed_sizes_are_refused_or_mismatch_the_types() {
    let g = geometry(MapKind::Hash); // u64 keys, u64 values
    // Sizes whose padding changes the slot stride: the derived fields disagree.
    for (off, size) in [(header::KEY_SIZE, 16), (header::KEY_SIZE, 9), (header::VALUE_SIZE, 12)] {
        let mut buf = Buf::formatted(g);
        buf.put_u32(off, size);
        assert_geometry_error(buf.open(), "slot stride");
    }
    for (off, size, mentions) in
        [(header::KEY_SIZE, 0, "key cannot be empty"), (header::VALUE_SIZE, 0, "cannot be 0")]
    {
        let mut buf = Buf::formatted(g);
        buf.put_u32(off, size);
        assert_geometry_error(buf.open(), mentions);
    }
    for (off, size, what) in [
        (header::KEY_SIZE, layout::MAX_ITEM_BYTES + 1, "key"),
        (header::VALUE_SIZE, u32::MAX, "value"),
    ] {
        let mut buf = Buf::formatted(g);
        buf.put_u32(off, size);
        let e = buf.open().unwrap_err();
        assert!(
            matches!(e, MapError::TooLarge { what: w, size: s, max: layout::MAX_ITEM_BYTES } if w == what && s == size),
            "{e:?}"
        );
    }
    // Sizes with the same padding open, with the sizes written there, and typed opens with the
    // old types are refused.
    let mut buf = Buf::formatted(g);
    buf.put_u32(header::KEY_SIZE, 4);
    buf.open_len(buf.len(), |raw| {
        let raw = raw.unwrap();
        assert_eq!(raw.geometry().key_size, 4);
        assert!(matches!(
            HashMap::<u64, u64>::from_raw(raw.clone()),
            Err(MapError::Mismatch {
                found: MapKind::Hash,
                found_key: 4,
                found_value: 8,
                expected: MapKind::Hash,
                expected_key: 8,
                expected_value: 8
            })
        ));
        let m = HashMap::<u32, u64>::from_raw(raw).unwrap();
        m.insert(&1, &2).unwrap();
        assert_eq!(m.get(&1), Some(2));
    });
    let mut buf = Buf::formatted(g);
    buf.put_u32(header::VALUE_SIZE, 5);
    buf.open_len(buf.len(), |raw| {
        let raw = raw.unwrap();
        assert!(matches!(
            HashMap::<u64, u64>::from_raw(raw.clone()),
            Err(MapError::Mismatch { found_value: 5, expected_value: 8, .. })
        ));
        assert!(HashMap::<u64, [u8; 5]>::from_raw(raw).is_ok());
    });
}

#[test]
fn typed_opens_of_other_kinds_and_types_mismatch() {
    fn check(kind: MapKind, r: Result<(), MapError>, expected: MapKind, what: &str) {
        match r {
            Err(MapError::Mismatch { found, expected: e, .. }) => {
                assert_eq!((found, e), (kind, expected), "{what}");
            }
            other => panic!("{what} on a {kind:?} map: {other:?}"),
        }
    }
    for kind in KINDS {
        let mut buf = Buf::formatted(geometry(kind));
        buf.open_len(buf.len(), |raw| {
            let raw = raw.unwrap();
            let r = raw.clone();
            if kind != MapKind::Hash {
                check(
                    kind,
                    HashMap::<u64, u64>::from_raw(r.clone()).map(drop),
                    MapKind::Hash,
                    "hash",
                );
            }
            if kind != MapKind::PerCpuHash {
                let got = PerCpuHashMap::<u64, u64>::from_raw(r.clone()).map(drop);
                check(kind, got, MapKind::PerCpuHash, "per-CPU hash");
            }
            if kind != MapKind::Array {
                check(kind, Array::<u64>::from_raw(r.clone()).map(drop), MapKind::Array, "array");
            }
            if kind != MapKind::PerCpuArray {
                let got = PerCpuArray::<u64>::from_raw(r.clone()).map(drop);
                check(kind, got, MapKind::PerCpuArray, "per-CPU array");
            }
            if kind != MapKind::RingBuf {
                let got = RingBuf::<[u64; 2]>::from_raw(r.clone()).map(drop);
                check(kind, got, MapKind::RingBuf, "ring buffer");
            }
            // The right kind with other sizes.
            let other_sizes = match kind {
                MapKind::Hash => HashMap::<u32, u64>::from_raw(r).map(drop),
                MapKind::PerCpuHash => PerCpuHashMap::<u64, u32>::from_raw(r).map(drop),
                MapKind::Array => Array::<u32>::from_raw(r).map(drop),
                MapKind::PerCpuArray => PerCpuArray::<[u64; 2]>::from_raw(r).map(drop),
                _ => RingBuf::<u64>::from_raw(r).map(drop),
            };
            check(kind, other_sizes, kind, "other sizes");
            assert!(matches!(raw.expect(kind, 1, 1), Err(MapError::Mismatch { .. })));
        });
    }
    // A hash map header turned per-CPU (one shard, the same layout) opens, as what it says.
    let mut buf = Buf::formatted(geometry(MapKind::Hash));
    buf.put_u32(header::KIND, MapKind::PerCpuHash as u32);
    assert_eq!(buf.open().unwrap().kind, MapKind::PerCpuHash);
}

#[test]
fn capacities_and_shards_that_make_no_map_are_refused() {
    let g = geometry(MapKind::Hash);
    for capacity in [0, MAX_CAPACITY + 1, u32::MAX] {
        let mut buf = Buf::formatted(g);
        buf.put_u32(header::CAPACITY, capacity);
        let e = buf.open().unwrap_err();
        assert!(
            matches!(e, MapError::Capacity { capacity: c, max: MAX_CAPACITY } if c == capacity),
            "{e:?}"
        );
    }
    for (off, v, mentions) in [
        (header::CAPACITY, 65, "slots"),
        (header::CPU_SHARDS, 2, "one shard"),
        (header::SM_SHARDS, 1, "one shard"),
        (header::CPU_SHARDS, 0, "one shard"),
    ] {
        let mut buf = Buf::formatted(g);
        buf.put_u32(off, v);
        assert_geometry_error(buf.open(), mentions);
    }
    // A smaller capacity with the same slots opens (the layout is the same).
    let mut buf = Buf::formatted(g);
    buf.put_u32(header::CAPACITY, 40);
    assert_eq!(buf.open().unwrap().capacity, 40);

    let p = geometry(MapKind::PerCpuArray);
    for (cpu, sm, mentions) in
        [(0, 0, "at least one shard"), (4097, 0, "at most"), (1, u32::MAX, "at most")]
    {
        let mut buf = Buf::formatted(p);
        buf.put_u32(header::CPU_SHARDS, cpu).put_u32(header::SM_SHARDS, sm);
        assert_geometry_error(buf.open(), mentions);
    }
    // Kind-specific key sizes.
    let mut buf = Buf::formatted(geometry(MapKind::Array));
    buf.put_u32(header::KEY_SIZE, 8);
    assert_geometry_error(buf.open(), "u32 index");
    let mut buf = Buf::formatted(geometry(MapKind::RingBuf));
    buf.put_u32(header::KEY_SIZE, 4);
    assert_geometry_error(buf.open(), "no key");
}

#[test]
fn derived_fields_that_disagree_are_refused() {
    for kind in KINDS {
        let g = geometry(kind);
        for (off, wide, field) in [
            (header::SLOTS, false, "slots"),
            (header::SLOT_STRIDE, false, "slot stride"),
            (header::VALUE_OFFSET, false, "value offset"),
            (header::SHARD_STRIDE, true, "shard stride"),
            (header::TOTAL_BYTES, true, "total size"),
        ] {
            for delta in [8u64, 1, u64::MAX] {
                let mut buf = Buf::formatted(g);
                if wide {
                    let v = buf.u64_at(off).wrapping_add(delta);
                    buf.put_u64(off, v);
                } else {
                    let v = buf.u32_at(off).wrapping_add(delta as u32);
                    buf.put_u32(off, v);
                }
                assert_geometry_error(buf.open(), field);
            }
        }
    }
}

#[test]
fn regions_too_short_are_refused() {
    let g = geometry(MapKind::Hash);
    let mut buf = Buf::formatted(g);
    for len in [0, 8, 64, HEADER_BYTES - 8, HEADER_BYTES - 1] {
        assert!(
            buf.open_len(
                len,
                |r| matches!(r, Err(MapError::TooShort { len: l, need: 128 }) if l == len)
            ),
            "{len} bytes"
        );
    }
    let total = g.total_bytes as usize;
    for len in [HEADER_BYTES, HEADER_BYTES + 8, total - 8, total - 1] {
        assert!(
            buf.open_len(len, |r| matches!(r, Err(MapError::TooShort { len: l, need }) if l == len && need == g.total_bytes)),
            "{len} bytes"
        );
    }
    assert!(buf.open_len(total, |r| r.is_ok()));

    // A consistent header of a huge map in a small region: refused, nothing past it read.
    let max = layout::MAX_ITEM_BYTES;
    let biggest = Geometry::new(MapKind::PerCpuHash, max, max, MAX_CAPACITY, 4096, 4096);
    let big = Geometry::new(MapKind::Hash, 8, 8, 1 << 24, 1, 0).unwrap();
    for g in [biggest.unwrap(), big] {
        let mut small = Buf::zeroed(4096);
        small.bytes()[..HEADER_BYTES].copy_from_slice(&g.header_bytes(1));
        assert!(matches!(
            small.open(),
            Err(MapError::TooShort { len: 4096, need }) if need == g.total_bytes
        ));
    }
    // Formatting needs the whole map, too.
    let mut small = Buf::zeroed(g.total_bytes as usize - 8);
    let len = small.len();
    // SAFETY: the buffer is valid and aligned for `len` bytes and outlives the attempt.
    let r = unsafe { RawMap::format_raw_parts(small.ptr(), len, g) };
    assert!(matches!(r, Err(MapError::TooShort { .. })));
    assert!(small.0.iter().all(|&w| w == 0), "a refused format wrote nothing");
}

#[test]
fn unaligned_memory_is_refused() {
    let g = geometry(MapKind::Array);
    let mut buf = Buf::formatted(g);
    let total = g.total_bytes as usize;
    let mut shifted = Buf::zeroed(total + 8);
    shifted.bytes()[4..4 + total].copy_from_slice(&buf.bytes()[..total]);
    for offset in [1, 4] {
        // SAFETY: `offset + total` bytes lie inside the buffer, which outlives the attempts.
        let ptr = unsafe { NonNull::new_unchecked(shifted.ptr().as_ptr().add(offset)) };
        // SAFETY: valid for `total` bytes; refused before any access (and dropped at once).
        let r = unsafe { RawMap::from_raw_parts(ptr, total) };
        assert!(matches!(r, Err(MapError::Geometry { ref reason }) if reason.contains("aligned")));
        // SAFETY: as above.
        let r = unsafe { RawMap::format_raw_parts(ptr, total, g) };
        assert!(matches!(r, Err(MapError::Geometry { ref reason }) if reason.contains("aligned")));
    }
    // An 8-aligned pointer into the middle of a buffer is fine.
    let mut wide = Buf::zeroed(total + 16);
    // SAFETY: 8 bytes in, `total` bytes remain.
    let ptr = unsafe { NonNull::new_unchecked(wide.ptr().as_ptr().add(8)) };
    // SAFETY: valid and aligned for `total` bytes; dropped before the buffer.
    let map = unsafe { RawMap::format_raw_parts(ptr, total, g) }.unwrap();
    let a: Array<u64> = Array::from_raw(map).unwrap();
    a.set(9, &7).unwrap();
    assert_eq!(a.get(9).unwrap(), 7);
    drop(a);
    assert_eq!(buf.open().unwrap(), g);
}

/// Uses an open map a little: every operation must stay in bounds and return.
fn exercise(raw: &RawMap) {
    let g = *raw.geometry();
    let key = vec![7u8; g.key_size as usize];
    let value = vec![1u8; g.value_size as usize];
    match g.kind {
        MapKind::RingBuf => {
            let r = raw.output(&value);
            if g.cpu_shards == 0 {
                assert!(matches!(r, Err(MapError::NoHostShard)));
            } else {
                r.unwrap();
            }
        }
        _ => {
            let r = raw.update(&key, &value, UpdateFlags::Any);
            if g.cpu_shards == 0 {
                assert!(matches!(r, Err(MapError::NoHostShard)), "{r:?}");
                return;
            }
            match g.kind {
                MapKind::Array | MapKind::PerCpuArray if g.capacity <= 0x0707_0707 => {
                    assert!(matches!(r, Err(MapError::Index { .. })), "{r:?}")
                }
                _ => r.unwrap(),
            }
            let _ = raw.lookup(&key).unwrap();
        }
    }
    let _ = (raw.len(), raw.refused());
}

#[test]
fn random_header_corruption_never_faults() {
    const ROUNDS: u64 = 4000;
    let mut rng = Rng::from_env("header corruption", 0xc0ff_ee00);
    let bases: Vec<Buf> = KINDS.iter().map(|&k| Buf::formatted(geometry(k))).collect();
    let (mut opened, mut refused) = (0u32, std::collections::BTreeMap::<String, u32>::new());
    for round in 0..ROUNDS {
        let base = &bases[(round % bases.len() as u64) as usize];
        let mut buf = Buf(base.0.clone());
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(HEADER_BYTES);
            let flip = 1 + rng.below(255) as u8;
            buf.bytes()[at] ^= flip;
        }
        let len = buf.len();
        let outcome = buf.open_len(len, |r| {
            r.map(|raw| {
                assert!(raw.geometry().total_bytes <= len as u64);
                exercise(&raw);
            })
        });
        match outcome {
            Ok(()) => opened += 1,
            Err(e) => {
                let name = format!("{e:?}");
                let variant = name.split([' ', '{', '(']).next().unwrap().to_owned();
                assert!(
                    [
                        "BadMagic",
                        "Version",
                        "UnknownKind",
                        "Geometry",
                        "Capacity",
                        "TooLarge",
                        "TooShort"
                    ]
                    .contains(&variant.as_str()),
                    "round {round}: unexpected error {e}"
                );
                *refused.entry(variant).or_default() += 1;
            }
        }
    }
    // Flips of the creator's half of the header are harmless; every checked field is refused.
    assert!(opened > 100, "only {opened} of {ROUNDS} corrupted headers opened");
    for variant in ["BadMagic", "Version", "UnknownKind", "Geometry"] {
        assert!(refused.get(variant).copied().unwrap_or(0) > 10, "{variant}: {refused:?}");
    }
}

#[test]
fn random_slot_corruption_never_faults_readers() {
    const ROUNDS: u64 = 500;
    let mut rng = Rng::from_env("slot corruption", 0x0bad_5107);
    let g = Geometry::new(MapKind::Hash, 8, 16, 16, 1, 0).unwrap();
    let base = {
        let m: HashMap<u64, [u64; 2]> = HashMap::create(16, Placement::Process).unwrap();
        for k in 0..16u64 {
            m.insert(&k, &[k, k]).unwrap();
        }
        for k in 0..8u64 {
            m.remove(&k);
        }
        assert_eq!(m.raw().geometry(), &g);
        Buf::copy_of(m.raw())
    };
    for _ in 0..ROUNDS {
        let mut buf = Buf(base.0.clone());
        for _ in 0..1 + rng.below(8) {
            let at = HEADER_BYTES + rng.below(buf.len() - HEADER_BYTES);
            buf.bytes()[at] ^= 1 + rng.below(255) as u8;
        }
        let len = buf.len();
        buf.open_len(len, |raw| {
            let m: HashMap<u64, [u64; 2]> = HashMap::from_raw(raw.unwrap()).unwrap();
            // Readers never wait, whatever the slots say.
            for k in 0..20u64 {
                let _ = m.get(&k);
            }
            assert!(m.iter().count() <= g.slots as usize);
            let _ = (m.len(), m.refused());
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Shared memory.

#[test]
fn a_shared_object_written_by_hand_opens() {
    let name = unique_name("by-hand");
    let mut buf = Buf::formatted(geometry(MapKind::Array));
    buf.put_u64(HEADER_BYTES + layout::SHARD_HEADER_BYTES + 8, 42);
    let _file = ShmFile::write(&name, buf.bytes(), 0o600);
    let a: Array<u64> = Array::open_shared(&name).unwrap();
    assert_eq!(a.get(1).unwrap(), 42);
    assert_eq!(a.raw().shared_name(), Some(name.as_str()));
    drop(a);
    assert!(shm_path(&name).exists(), "an opener does not remove the object");
}

#[test]
fn malformed_shared_objects_are_refused() {
    let g = geometry(MapKind::Hash);
    let name = unique_name("malformed");
    let check = |bytes: &[u8], what: &str, ok: &dyn Fn(&MapError) -> bool| {
        let _file = ShmFile::write(&name, bytes, 0o600);
        match RawMap::open_shared(&name) {
            Err(e) if ok(&e) => {}
            other => panic!("{what}: {other:?}"),
        }
    };
    let mut good = Buf::formatted(g);
    let total = g.total_bytes as usize;
    check(&[], "empty", &|e| matches!(e, MapError::NotReady { .. }));
    check(&vec![0; total], "zeros: the creator has not written the magic yet", &|e| {
        matches!(e, MapError::NotReady { .. })
    });
    check(&good.bytes()[..100], "short header", &|e| {
        matches!(e, MapError::TooShort { need: 128, .. })
    });
    check(
        &good.bytes()[..total - 8],
        "truncated",
        &|e| matches!(e, MapError::TooShort { need, .. } if *need == g.total_bytes),
    );
    let mut bad = Buf(good.0.clone());
    bad.bytes()[3] = 0;
    check(bad.bytes(), "magic", &|e| matches!(e, MapError::BadMagic { .. }));
    let mut bad = Buf(good.0.clone());
    bad.put_u32(header::VERSION, 9);
    check(bad.bytes(), "version", &|e| matches!(e, MapError::Version { found: 9, .. }));
    let mut bad = Buf(good.0.clone());
    bad.put_u32(header::KIND, 12);
    check(bad.bytes(), "kind", &|e| matches!(e, MapError::UnknownKind { found: 12 }));
    let mut bad = Buf(good.0.clone());
    bad.put_u32(header::SLOTS, 64);
    check(bad.bytes(), "slots", &|e| matches!(e, MapError::Geometry { .. }));
    check(&vec![0xff; total], "garbage", &|e| matches!(e, MapError::BadMagic { .. }));
    // The same bytes, well formed, open.
    let _file = ShmFile::write(&name, good.bytes(), 0o600);
    assert!(HashMap::<u64, u64>::open_shared(&name).is_ok());
    assert!(matches!(HashMap::<u64, u32>::open_shared(&name), Err(MapError::Mismatch { .. })));
}

#[test]
fn shared_objects_open_to_other_users_are_refused() {
    let mut good = Buf::formatted(geometry(MapKind::Hash));
    for mode in [0o644, 0o660, 0o606, 0o602, 0o610] {
        let name = unique_name(&format!("mode-{mode:o}"));
        let _file = ShmFile::write(&name, good.bytes(), mode);
        match RawMap::open_shared(&name) {
            Err(MapError::Permissions { name: n, reason }) => {
                assert_eq!(n, name);
                assert!(reason.contains(&format!("{mode:o}")), "{reason}");
            }
            other => panic!("mode {mode:o}: {other:?}"),
        }
    }
    // A file only its owner may use is fine, whatever else the owner's bits say.
    let name = unique_name("mode-700");
    let _file = ShmFile::write(&name, good.bytes(), 0o700);
    assert!(RawMap::open_shared(&name).is_ok());
}

#[test]
fn bad_names_are_refused() {
    let long = "n".repeat(201);
    for name in ["", "/", "a/b", "/leading", "trailing/", ".", "..", "nul\0byte", long.as_str()] {
        assert!(matches!(RawMap::open_shared(name), Err(MapError::Name { .. })), "open {name:?}");
        let g = geometry(MapKind::Array);
        let created = RawMap::create(g, &Placement::Shared(name.to_owned().into()));
        assert!(matches!(created, Err(MapError::Name { .. })), "create {name:?}");
        assert!(matches!(unlink_shared(name), Err(MapError::Name { .. })), "unlink {name:?}");
    }
    // Dots inside a name are fine, and so are 200 bytes.
    for name in [unique_name("a..b"), unique_name(".hidden"), format!("{:x<200}", unique_name(""))]
    {
        assert!(name.len() <= 200);
        let m = RawMap::create(geometry(MapKind::Array), &Placement::Shared(name.clone().into()));
        assert!(m.is_ok(), "{name}: {m:?}");
        assert!(shm_path(&name).exists());
        drop(m);
        assert!(!shm_path(&name).exists(), "the creator removes {name} on drop");
    }
}

#[test]
fn missing_and_taken_names_are_io_errors() {
    let name = unique_name("missing");
    match RawMap::open_shared(&name) {
        Err(MapError::Io { op, name: n, source }) => {
            assert_eq!((op, n.as_str()), ("shm_open", name.as_str()));
            assert_eq!(source.kind(), ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(unlink_shared(&name), Err(MapError::Io { .. })));

    let name = unique_name("taken");
    let placement = Placement::Shared(name.clone().into());
    let first: HashMap<u64, u64> = HashMap::create(8, placement.clone()).unwrap();
    first.insert(&1, &10).unwrap();
    match HashMap::<u64, u64>::create(8, placement.clone()) {
        Err(MapError::Io { op: "shm_open", source, .. }) => {
            assert_eq!(source.kind(), ErrorKind::AlreadyExists)
        }
        other => panic!("{other:?}"),
    }
    // The failed create left the first map and its name alone.
    let second: HashMap<u64, u64> = HashMap::open_shared(&name).unwrap();
    assert_eq!(second.get(&1), Some(10));
    second.insert(&2, &20).unwrap();
    assert_eq!(first.get(&2), Some(20));
    drop(second);
    assert!(shm_path(&name).exists(), "an opener does not remove the name");
    drop(first);
    assert!(!shm_path(&name).exists(), "the creator removes the name");
    assert!(matches!(RawMap::open_shared(&name), Err(MapError::Io { .. })));
}

#[test]
fn item11_shared_memory_errors_keep_the_os_reason() {
    use std::error::Error;
    let reason = |errno: i32| std::io::Error::from_raw_os_error(errno).to_string();
    let name = unique_name("item11");
    let missing = RawMap::open_shared(&name).unwrap_err();
    let message = missing.to_string();
    // `shm_open failed for map `…`: No such file or directory (os error 2)`
    assert!(message.starts_with(&format!("shm_open failed for map `{name}`: ")), "`{message}`");
    assert!(message.ends_with(&reason(libc::ENOENT)), "`{message}` drops the reason");
    let source = missing.source().expect("the system's error is the source");
    assert_eq!(source.to_string(), reason(libc::ENOENT));
    let unlink = unlink_shared(&name).unwrap_err().to_string();
    assert!(unlink.contains("shm_unlink") && unlink.ends_with(&reason(libc::ENOENT)), "`{unlink}`");

    let placement = Placement::Shared(name.clone().into());
    let _first: HashMap<u64, u64> = HashMap::create(8, placement.clone()).unwrap();
    let taken = HashMap::<u64, u64>::create(8, placement).unwrap_err().to_string();
    assert!(taken.ends_with(&reason(libc::EEXIST)), "`{taken}` drops the reason");
}

#[test]
fn unlink_shared_removes_a_name_while_maps_stay_usable() {
    let name = unique_name("unlink");
    let ring: RingBuf<u64> =
        RingBuf::create(8, Shards::ONE, Placement::Shared(name.clone().into())).unwrap();
    let other: RingBuf<u64> = RingBuf::open_shared(&name).unwrap();
    unlink_shared(&name).unwrap();
    assert!(!shm_path(&name).exists());
    assert!(matches!(RawMap::open_shared(&name), Err(MapError::Io { .. })));
    // Both handles still share the memory.
    other.output(&5).unwrap();
    assert_eq!(ring.consumer().unwrap().poll(), Some(5));
    // The creator's drop finds the name gone and says nothing.
    drop(ring);
    drop(other);
    // And the name can be used again.
    let again = RawMap::create(geometry(MapKind::Array), &Placement::Shared(name.clone().into()));
    assert!(again.is_ok());
}

#[test]
fn a_shared_static_map_is_created_on_first_use_and_reports_errors() {
    let name: &'static str = Box::leak(unique_name("static").into_boxed_str());
    let m: HashMap<u32, u32> = HashMap::shared(name, 8);
    assert!(!shm_path(name).exists(), "nothing is created before first use");
    m.insert(&1, &1).unwrap();
    assert_eq!(m.raw().shared_name(), Some(name));
    assert!(shm_path(name).exists());
    // A second descriptor of the same name cannot create it again: try_raw says why.
    let clash: HashMap<u32, u32> = HashMap::shared(name, 8);
    assert!(matches!(clash.try_raw(), Err(MapError::Io { .. })));
    let opened: HashMap<u32, u32> = HashMap::open_shared(name).unwrap();
    assert_eq!(opened.get(&1), Some(1));
    drop(opened);
    drop(m);
    assert!(!shm_path(name).exists());
}
