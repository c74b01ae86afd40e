//! Maps that cannot exist (issue 18, item 7): never a panic of a method that returns a `Result`.
//! The `const` constructors refuse them at compile time (the workspace's UI tests,
//! `tests/ui/item7_*.rs`); every other way in returns a typed `MapError`, tested here.

mod common;

use std::panic;
use std::ptr::NonNull;

use bytemuck::{Pod, Zeroable};
use egpu_maps::layout::{Geometry, MAX_CAPACITY, MAX_ITEM_BYTES};
use egpu_maps::{
    Array, HashMap, MapError, MapKind, PerCpuArray, PerCpuHashMap, Placement, RawMap, RingBuf,
    Shards,
};

use common::{shm_path, unique_name};

/// 73,728 bytes: over the 64 KiB a key, value or record may have.
type Big = [[u64; 1024]; 9];

/// A type aligned to 16 bytes, with no padding.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct Aligned16 {
    words: [u64; 2],
}

#[track_caller]
fn assert_capacity_error<T: std::fmt::Debug>(r: Result<T, MapError>, capacity: u32) {
    match r {
        Err(e @ MapError::Capacity { capacity: c, max }) => {
            assert_eq!((c, max), (capacity, MAX_CAPACITY));
            let message = e.to_string();
            assert!(message.contains(&MAX_CAPACITY.to_string()), "no limit in `{message}`");
            assert!(message.contains(&format!("not {capacity}")), "`{message}`");
        }
        other => panic!("expected MapError::Capacity for {capacity}, got {other:?}"),
    }
}

#[test]
fn item7_capacity_zero_is_an_error_not_a_panic() {
    let process = || Placement::Process;
    assert_capacity_error(HashMap::<u64, u64>::create(0, process()), 0);
    assert_capacity_error(PerCpuHashMap::<u64, u64>::create(0, Shards::PER_CPU, process()), 0);
    assert_capacity_error(Array::<u64>::create(0, process()), 0);
    assert_capacity_error(PerCpuArray::<u64>::create(0, Shards::new(2, 1), process()), 0);
    assert_capacity_error(RingBuf::<u64>::create(0, Shards::ONE, process()), 0);
    assert_capacity_error(RingBuf::<u64>::create(MAX_CAPACITY + 1, Shards::ONE, process()), {
        MAX_CAPACITY + 1
    });
    assert_capacity_error(Array::<u8>::create(u32::MAX, process()), u32::MAX);
    assert_capacity_error(Geometry::new(MapKind::Hash, 8, 8, 0, 1, 0), 0);

    // In shared memory, nothing is created for a map that cannot exist.
    let name = unique_name("item7-capacity");
    let shared = HashMap::<u64, u64>::create(0, Placement::Shared(name.clone().into()));
    assert_capacity_error(shared, 0);
    assert!(!shm_path(&name).exists());
}

#[test]
fn other_maps_that_cannot_exist_report_why() {
    let process = || Placement::Process;
    let geometry = |r: Result<(), MapError>, mentions: &str| match r {
        Err(MapError::Geometry { reason }) => {
            assert!(reason.contains(mentions), "`{reason}` does not mention `{mentions}`")
        }
        other => panic!("expected a Geometry error mentioning `{mentions}`, got {other:?}"),
    };
    geometry(HashMap::<(), u64>::create(4, process()).map(drop), "key cannot be empty");
    geometry(HashMap::<u64, ()>::create(4, process()).map(drop), "cannot be 0");
    geometry(PerCpuArray::<u64>::create(4, Shards::new(0, 0), process()).map(drop), "one shard");
    geometry(PerCpuHashMap::<u64, u64>::create(4, Shards::new(4097, 0), process()).map(drop), {
        "at most"
    });
    geometry(Geometry::new(MapKind::Hash, 8, 8, 4, 1, 1).map(drop), "one shard");
    match HashMap::<u64, u64>::create(4, Placement::Shared("a/b".into())) {
        Err(MapError::Name { name, .. }) => assert_eq!(name, "a/b"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn item7_hand_made_geometries_are_errors_not_maps() {
    let good = Geometry::new(MapKind::Hash, 8, 8, 4, 1, 0).unwrap();
    assert!(good.validate().is_ok());
    let mut zero = good;
    zero.capacity = 0;
    assert_capacity_error(RawMap::create(zero, &Placement::Process), 0);
    assert_capacity_error(zero.validate(), 0);

    // Fields that disagree with what the layout derives: each one is named.
    let cases = [
        ("slots", Geometry { slots: 0, ..good }),
        ("slot stride", Geometry { slot_stride: 8, ..good }),
        ("value offset", Geometry { value_offset: 0, ..good }),
        ("shard stride", Geometry { shard_stride: 1 << 40, ..good }),
        ("total size", Geometry { total_bytes: 128, ..good }),
    ];
    for (field, g) in cases {
        match RawMap::create(g, &Placement::Process) {
            Err(MapError::Geometry { reason }) => {
                assert!(reason.contains(field), "`{reason}` does not name the {field}")
            }
            other => panic!("{field}: {other:?}"),
        }
        let mut words = vec![0u64; good.total_bytes as usize / 8 + 16];
        let ptr = NonNull::new(words.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `words` outlives the call, which fails before using the memory; nothing else
        // uses it.
        let formatted = unsafe { RawMap::format_raw_parts(ptr, words.len() * 8, g) };
        assert!(matches!(formatted, Err(MapError::Geometry { .. })), "{field}: {formatted:?}");
        assert!(words.iter().all(|&w| w == 0), "{field}: the memory was written");
    }
    let part = egpu_maps::merge::DevicePart::new(&Geometry { total_bytes: 1 << 50, ..good });
    assert!(matches!(part, Err(MapError::Geometry { .. })));
}

#[test]
fn item7_records_over_64_kib_are_an_error_not_a_panic() {
    let size = std::mem::size_of::<Big>() as u32;
    let too_large = |r: Result<(), MapError>, what: &str| match r {
        Err(e @ MapError::TooLarge { .. }) => {
            assert!(
                matches!(e, MapError::TooLarge { what: w, size: s, max } if w == what && s == size && max == MAX_ITEM_BYTES),
                "{e:?}"
            );
            assert!(e.to_string().contains("65536"), "no limit in `{e}`");
            assert_eq!(e.errno(), -i64::from(libc::E2BIG));
        }
        other => panic!("expected TooLarge for the {what}, got {other:?}"),
    };
    let process = || Placement::Process;
    too_large(RingBuf::<Big>::create(4, Shards::ONE, process()).map(drop), "record");
    too_large(HashMap::<u64, Big>::create(4, process()).map(drop), "value");
    too_large(HashMap::<Big, u64>::create(4, process()).map(drop), "key");
    too_large(Array::<Big>::create(4, process()).map(drop), "value");
    too_large(PerCpuArray::<Big>::create(4, Shards::ONE, process()).map(drop), "value");
    too_large(Geometry::new(MapKind::RingBuf, 0, size, 4, 1, 0).map(drop), "record");
    // A ring of small records opened as one of big records: their sizes differ.
    let small: RingBuf<u64> = RingBuf::create(4, Shards::ONE, process()).unwrap();
    let opened = RingBuf::<Big>::from_raw(small.raw().clone());
    assert!(matches!(opened, Err(MapError::Mismatch { .. })), "{opened:?}");
    // A record longer than the ring's records, through the raw map.
    let long = small.raw().output(&[0; 16]);
    assert!(matches!(long, Err(MapError::RecordSize { len: 16, size: 8 })), "{long:?}");
}

#[test]
fn item7_types_aligned_over_8_are_an_error() {
    let process = || Placement::Process;
    let alignment = |r: Result<(), MapError>| match r {
        Err(e @ MapError::Alignment { align: 16 }) => {
            assert!(e.to_string().contains("8 bytes at most"), "`{e}`")
        }
        other => panic!("expected an Alignment error, got {other:?}"),
    };
    alignment(HashMap::<Aligned16, u64>::create(4, process()).map(drop));
    alignment(HashMap::<u64, Aligned16>::create(4, process()).map(drop));
    alignment(PerCpuHashMap::<u64, Aligned16>::create(4, Shards::ONE, process()).map(drop));
    alignment(Array::<Aligned16>::create(4, process()).map(drop));
    alignment(RingBuf::<Aligned16>::create(4, Shards::ONE, process()).map(drop));
    // A map whose sizes suit the type, opened with it: refused all the same, since its records
    // lie 8 bytes apart and a reference to one must be aligned to 16.
    let ring: RingBuf<[u64; 2]> = RingBuf::create(4, Shards::ONE, process()).unwrap();
    alignment(RingBuf::<Aligned16>::from_raw(ring.raw().clone()).map(drop));
    let array: Array<[u64; 2]> = Array::create(4, process()).unwrap();
    alignment(Array::<Aligned16>::from_raw(array.raw().clone()).map(drop));
}

#[test]
fn item7_result_methods_return_the_error_of_creating_the_map() {
    // Descriptors whose shared-memory names are taken: creating their memory on first use
    // fails, and every method that returns a `Result` returns that error (they panicked).
    let taken = |what: &str| {
        let name: &'static str = Box::leak(unique_name(&format!("item7-{what}")).into_boxed_str());
        let first = RawMap::create(
            Geometry::new(MapKind::Array, 4, 8, 1, 1, 0).unwrap(),
            &Placement::Shared(name.into()),
        )
        .unwrap();
        (name, first)
    };
    let io = |r: Result<(), MapError>, what: &str| match r {
        Err(e @ MapError::Io { op: "shm_open", .. }) => {
            assert!(e.to_string().contains("File exists"), "{what}: `{e}` has no reason")
        }
        other => panic!("{what}: expected an shm_open error, got {other:?}"),
    };

    let (name, _first) = taken("hash");
    let hash: HashMap<u64, u64> = HashMap::shared(name, 8);
    io(hash.insert(&1, &1), "HashMap::insert");
    io(hash.fetch_add(&1, 1).map(drop), "HashMap::fetch_add");
    io(hash.word::<u64>(&1, 0).map(drop), "HashMap::word");
    io(hash.try_raw().map(drop), "HashMap::try_raw");

    let (name, _first) = taken("per-cpu-hash");
    let per_cpu: PerCpuHashMap<u64, u64> = PerCpuHashMap::shared(name, 8, Shards::ONE);
    io(per_cpu.insert(&1, &1), "PerCpuHashMap::insert");
    io(per_cpu.fetch_add(&1, 1).map(drop), "PerCpuHashMap::fetch_add");

    let (name, _first) = taken("array");
    let array: Array<u64> = Array::shared(name, 4);
    io(array.get(0).map(drop), "Array::get");
    io(array.set(0, &1), "Array::set");
    io(array.fetch_add(0, 1).map(drop), "Array::fetch_add");

    let (name, _first) = taken("per-cpu-array");
    let per_cpu: PerCpuArray<u64> = PerCpuArray::shared(name, 4, Shards::ONE);
    io(per_cpu.get(0).map(drop), "PerCpuArray::get");
    io(per_cpu.sum(0).map(drop), "PerCpuArray::sum");
    io(per_cpu.set(0, &1), "PerCpuArray::set");
    io(per_cpu.fetch_add(0, 1).map(drop), "PerCpuArray::fetch_add");

    let (name, _first) = taken("ring");
    let ring: RingBuf<u64> = RingBuf::shared(name, 4, Shards::ONE);
    io(ring.output(&1), "RingBuf::output");
    io(ring.reserve().map(drop), "RingBuf::reserve");
    io(ring.consumer().map(drop), "RingBuf::consumer");
}

#[test]
fn item7_const_constructors_called_at_run_time_name_the_limit() {
    // In a `static` these are compile errors; called at run time, the constructor itself stops
    // with the same message (a descriptor that can make no map never exists).
    let message = |f: fn()| -> String {
        let payload = panic::catch_unwind(f).expect_err("the constructor accepted it");
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .unwrap_or_else(|| payload.downcast_ref::<String>().cloned().expect("a message"))
    };
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let cases: [(fn(), &str); 6] = [
        (|| drop(HashMap::<u64, u64>::with_capacity(std::hint::black_box(0))), "is 0"),
        (|| drop(Array::<u64>::with_len(std::hint::black_box(0))), "is 0"),
        (|| drop(RingBuf::<u64>::with_capacity(std::hint::black_box(1 << 29))), "over 268435456"),
        (|| drop(PerCpuArray::<u64>::with_shards(1, std::hint::black_box(Shards::new(0, 0)))), {
            "at least one shard"
        }),
        (
            || {
                drop(PerCpuHashMap::<u64, u64>::with_shards(
                    1,
                    std::hint::black_box(Shards::new(1, 5000)),
                ))
            },
            "at most 4096",
        ),
        (|| drop(HashMap::<u64, u64>::shared(std::hint::black_box("a/b"), 1)), "no `/`"),
    ];
    let messages: Vec<String> = cases.iter().map(|(f, _)| message(*f)).collect();
    panic::set_hook(hook);
    for ((_, expected), message) in cases.iter().zip(&messages) {
        assert!(message.starts_with("egpu-maps: "), "`{message}`");
        assert!(message.contains(expected), "`{message}` does not say `{expected}`");
    }
    assert!(messages[2].contains("layout::MAX_CAPACITY"), "`{}`", messages[2]);
}
