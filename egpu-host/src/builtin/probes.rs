//! The built-in probes, in Probe Rust. Each map a probe updates is a `static` here, which gives
//! the probe's map table its entry (kind, key and value sizes, capacity, and the name: the
//! static's, whose lowercase is the map's in [`MAPS`](super::MAPS)); the statics' own memory is
//! never written by the programs: [`Builtin::programs`](super::Builtin::programs) binds each
//! entry, by name, to the process's map of that name, in shared memory. (The twins, the
//! functions as native Rust, update the statics: the tests compare the two.)

use bytemuck::{Pod, Zeroable};
use egpu_ebpf::{AllocCtx, LaunchCtx, MemcpyCtx, ModuleLoadCtx, SyncCtx};
use egpu_macros::{helper, probe};
use egpu_maps::{Array, HashMap};
use egpu_probe::Probe;

use super::devices::DEVICES;
use super::{
    ALLOCATION_SLOTS, BUCKETS, CAPTURED, COPY_SIZE_SLOTS, COPY_SLOTS, DEVICE_SLOTS, KERNELS,
    LIVE_ALLOCATIONS, MODULE_SLOTS, PER_DEVICE_SLOTS, SHAPE_SLOTS, SYNC_SLOTS, SYNC_TIME_SLOTS,
};

/// An element of the `copies`, `allocations`, `syncs` and `modules` arrays: the calls counted
/// and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub(super) struct Tally {
    /// Calls.
    pub(super) count: u64,
    /// Their bytes.
    pub(super) bytes: u64,
}

static LAUNCHES: HashMap<u64, u64> = HashMap::with_capacity(KERNELS);
static COPIES: Array<Tally> = Array::with_len(COPY_SLOTS);
static ALLOCATIONS: Array<Tally> = Array::with_len(ALLOCATION_SLOTS);
static SYNCS: Array<Tally> = Array::with_len(SYNC_SLOTS);
static MODULES: Array<Tally> = Array::with_len(MODULE_SLOTS);
static SHAPES: Array<u64> = Array::with_len(SHAPE_SLOTS);
static COPY_SIZES: Array<u64> = Array::with_len(COPY_SIZE_SLOTS);
static SIZES: HashMap<u64, u64> = HashMap::with_capacity(LIVE_ALLOCATIONS);
static FREED: Array<u64> = Array::with_len(1);
static SYNC_TIMES: Array<u64> = Array::with_len(SYNC_TIME_SLOTS);
static PER_DEVICE: Array<Tally> = Array::with_len(PER_DEVICE_SLOTS);

/// Launches per kernel, those captured into a graph (which run only when the graph is launched)
/// under [`CAPTURED`], graph launches under their kernel id, `u64::MAX`.
#[probe(host::launch, crate = crate::egpu_root)]
fn count_launches(ctx: &LaunchCtx) {
    let kernel = if ctx.flags & LaunchCtx::CAPTURED != 0 { CAPTURED } else { ctx.kernel_id };
    LAUNCHES.fetch_add(&kernel, 1);
}

/// Copies by kind (`MemcpyCtx::kind`, 0–5) and sets at 8 + kind, with their bytes; per device
/// too, copies and sets apart, in `per_device`.
#[probe(host::memcpy, crate = crate::egpu_root)]
fn count_copies(ctx: &MemcpyCtx) {
    let set = if ctx.flags & MemcpyCtx::MEMSET != 0 { 8 } else { 0 };
    let at = ctx.kind + set;
    COPIES.fetch_add_field(at, |t| &t.count, 1);
    COPIES.fetch_add_field(at, |t| &t.bytes, ctx.bytes);
    if ctx.device < DEVICES {
        let on = ctx.device * DEVICE_SLOTS + set / 8;
        PER_DEVICE.fetch_add_field(on, |t| &t.count, 1);
        PER_DEVICE.fetch_add_field(on, |t| &t.bytes, ctx.bytes);
    }
}

/// Allocations (at `kind`) and frees (at 4 + `kind`) that succeeded, with their bytes (a free's
/// are 0: [`track_frees`] finds them); allocations per device too, in `per_device`.
#[probe(host::alloc::exit, crate = crate::egpu_root)]
fn count_allocations(ctx: &AllocCtx) {
    if ctx.result == 0 {
        let at = ctx.op * 4 + ctx.kind;
        ALLOCATIONS.fetch_add_field(at, |t| &t.count, 1);
        ALLOCATIONS.fetch_add_field(at, |t| &t.bytes, ctx.bytes);
        if ctx.op == AllocCtx::ALLOC && ctx.device < DEVICES {
            let on = ctx.device * DEVICE_SLOTS + 2;
            PER_DEVICE.fetch_add_field(on, |t| &t.count, 1);
            PER_DEVICE.fetch_add_field(on, |t| &t.bytes, ctx.bytes);
        }
    }
}

/// Synchronisations by kind (`SyncCtx::kind`); their bytes stay 0.
#[probe(host::sync, crate = crate::egpu_root)]
fn count_syncs(ctx: &SyncCtx) {
    SYNCS.fetch_add_field(ctx.kind, |t| &t.count, 1);
}

/// Module loads that succeeded, with PTX at 1 and others at 0, with their images' bytes.
#[probe(host::module_load::exit, crate = crate::egpu_root)]
fn count_modules(ctx: &ModuleLoadCtx) {
    if ctx.result == 0 {
        MODULES.fetch_add_field(ctx.has_ptx, |t| &t.count, 1);
        MODULES.fetch_add_field(ctx.has_ptx, |t| &t.bytes, ctx.image_bytes);
    }
}

/// The histogram bucket of `value`: its significant bits (0 for 0, 1 for 1, 2 for 2–3, 3 for
/// 4–7, …, 64), found by halving.
#[helper(crate = crate::egpu_root)]
fn bucket(mut value: u64) -> u32 {
    let mut bits = 0u64;
    if value >> 32 != 0 {
        bits += 32;
        value >>= 32;
    }
    if value >> 16 != 0 {
        bits += 16;
        value >>= 16;
    }
    if value >> 8 != 0 {
        bits += 8;
        value >>= 8;
    }
    if value >> 4 != 0 {
        bits += 4;
        value >>= 4;
    }
    if value >> 2 != 0 {
        bits += 2;
        value >>= 2;
    }
    if value >> 1 != 0 {
        bits += 1;
        value >>= 1;
    }
    (bits + value) as u32
}

/// Launch shapes (not graph launches, nor launches captured into graphs): the blocks of the
/// grid into the histogram at 0, their sum at [`BUCKETS`]; the threads of a block into the
/// histogram at `BUCKETS + 1`, their sum at `2 * BUCKETS + 1`. Per device too, in `per_device`:
/// kernel launches and their blocks, the threads of their blocks, and graph launches (a
/// launch's `device` lies past the context's first line: the preloaded library has it found
/// from the launch's function where this probe runs, `HostProbes::resolve_launch_devices`).
#[probe(host::launch, crate = crate::egpu_root)]
fn launch_shapes(ctx: &LaunchCtx) {
    if ctx.flags & LaunchCtx::CAPTURED == 0 {
        if ctx.kernel_id != u64::MAX {
            let blocks = ctx.grid[0] as u64 * ctx.grid[1] as u64 * ctx.grid[2] as u64;
            let threads = ctx.block[0] as u64 * ctx.block[1] as u64 * ctx.block[2] as u64;
            SHAPES.fetch_add(bucket(blocks), 1);
            SHAPES.fetch_add(BUCKETS, blocks);
            SHAPES.fetch_add(BUCKETS + 1 + bucket(threads), 1);
            SHAPES.fetch_add(2 * BUCKETS + 1, threads);
            if ctx.device < DEVICES {
                let on = ctx.device * DEVICE_SLOTS;
                PER_DEVICE.fetch_add_field(on + 3, |t| &t.count, 1);
                PER_DEVICE.fetch_add_field(on + 3, |t| &t.bytes, blocks);
                PER_DEVICE.fetch_add_field(on + 4, |t| &t.bytes, threads);
            }
        } else if ctx.device < DEVICES {
            PER_DEVICE.fetch_add_field(ctx.device * DEVICE_SLOTS + 4, |t| &t.count, 1);
        }
    }
}

/// Copy sizes in bytes, a histogram per kind at `kind * BUCKETS` (sets are left out).
#[probe(host::memcpy, crate = crate::egpu_root)]
fn copy_sizes(ctx: &MemcpyCtx) {
    if ctx.flags & MemcpyCtx::MEMSET == 0 {
        COPY_SIZES.fetch_add(ctx.kind * BUCKETS + bucket(ctx.bytes), 1);
    }
}

/// A successful allocation's size under its address; a successful free of an address found
/// there adds its size to the bytes freed and forgets the address.
#[probe(host::alloc::exit, crate = crate::egpu_root)]
fn track_frees(ctx: &AllocCtx) {
    if ctx.result == 0 {
        if ctx.op == AllocCtx::FREE {
            if let Some(bytes) = SIZES.get(&ctx.ptr) {
                FREED.fetch_add(0, bytes);
                SIZES.remove(&ctx.ptr);
            }
        } else {
            SIZES.insert(&ctx.ptr, &ctx.bytes);
        }
    }
}

/// The time a synchronisation took (host clock, at its entry and exit), into the histogram of
/// its kind (`SyncCtx::kind`) at `kind * (BUCKETS + 1)`, the sum after it. Attached with the
/// kernel times only ([`timing`]).
#[probe(host::sync::exit, crate = crate::egpu_root)]
fn time_syncs(ctx: &SyncCtx) {
    if ctx.kind < SYNC_SLOTS {
        let at = ctx.kind * (BUCKETS + 1);
        SYNC_TIMES.fetch_add(at + bucket(ctx.duration_ns), 1);
        SYNC_TIMES.fetch_add(at + BUCKETS, ctx.duration_ns);
    }
}

/// The probes attached with the kernel times only.
pub(super) fn timing() -> [&'static Probe; 1] {
    [time_syncs::probe()]
}

/// Every built-in probe, in the order [`Builtin::programs`](super::Builtin::programs) gives them.
pub(super) fn all() -> [&'static Probe; 8] {
    [
        count_launches::probe(),
        count_copies::probe(),
        count_allocations::probe(),
        count_syncs::probe(),
        count_modules::probe(),
        launch_shapes::probe(),
        copy_sizes::probe(),
        track_frees::probe(),
    ]
}

#[cfg(test)]
mod tests {
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, HostEvent, MapDef, MapKind, Phase, Program, assemble};
    use egpu_maps::RawMap;
    use egpu_vm::{EngineChoice, Vm};

    use super::*;
    use crate::HostProbes;
    use crate::builtin::{Builtin, BuiltinError};

    /// What a map holds, comparable across maps of one shape: a hash's entries in key order, an
    /// array's elements as `u64` words.
    fn contents(raw: &RawMap) -> Vec<(u64, u64)> {
        let g = raw.geometry();
        if g.kind == MapKind::Hash {
            let mut entries: Vec<_> =
                HashMap::<u64, u64>::from_raw(raw.clone()).expect("a hash").iter().collect();
            entries.sort();
            return entries;
        }
        let words = u64::from(g.value_size / 8);
        let array = Array::<u64>::from_raw(raw.clone());
        let tallies = Array::<Tally>::from_raw(raw.clone());
        (0..g.capacity)
            .flat_map(|i| match (&array, &tallies) {
                (Ok(a), _) => vec![a.get(i).expect("in range")],
                (_, Ok(t)) => {
                    let t = t.get(i).expect("in range");
                    vec![t.count, t.bytes]
                }
                _ => panic!("an array of u64 or of tallies, not {words} words"),
            })
            .enumerate()
            .map(|(i, v)| (i as u64, v))
            .collect()
    }

    #[test]
    fn the_programs_and_their_twins_fill_the_maps_alike() {
        let probes = HostProbes::new();
        let b = Builtin::create(4343, false).expect("maps in process memory");
        for (program, maps) in b.programs().expect("the programs") {
            probes.attach(&program, &maps).expect("attach");
        }
        let launches = [
            LaunchCtx {
                kernel_id: 7,
                grid: [4, 2, 1],
                block: [32, 1, 1],
                device: 1,
                ..Default::default()
            },
            LaunchCtx {
                kernel_id: 7,
                grid: [1 << 20, 1 << 12, 3],
                block: [1024, 1, 1],
                ..Default::default()
            },
            LaunchCtx { kernel_id: 9, flags: LaunchCtx::CAPTURED, ..Default::default() },
            LaunchCtx {
                kernel_id: u64::MAX,
                flags: LaunchCtx::GRAPH,
                device: 1,
                ..Default::default()
            },
            LaunchCtx::default(),
            // On a device past the map's 64: in the totals, not per device.
            LaunchCtx { kernel_id: 9, grid: [1, 1, 1], device: 64, ..Default::default() },
        ];
        for mut ctx in launches {
            probes.fire(Phase::Enter, &mut ctx);
            count_launches(&ctx);
            launch_shapes(&ctx);
        }
        let copies = [
            (1, 4096, 0),
            (1, 5000, MemcpyCtx::ASYNC),
            (2, 0, 0),
            (5, u64::MAX, 0),
            (0, 100, MemcpyCtx::MEMSET),
        ];
        for (i, (kind, bytes, flags)) in copies.into_iter().enumerate() {
            // Devices 0 and 1, and one past the map's 64 (left out of `per_device`).
            let device = if i == 2 { 64 } else { u32::from(i == 1 || i == 4) };
            let mut ctx = MemcpyCtx { kind, bytes, flags, device, ..Default::default() };
            probes.fire(Phase::Enter, &mut ctx);
            count_copies(&ctx);
            copy_sizes(&ctx);
        }
        let allocs = [
            (0x7000, 1 << 20, AllocCtx::ALLOC, AllocCtx::DEVICE, 0),
            (0x8000, 64, AllocCtx::ALLOC, AllocCtx::MANAGED, 0),
            (0x9000, 64, AllocCtx::ALLOC, AllocCtx::HOST_PINNED, 2),
            (0x7000, 0, AllocCtx::FREE, AllocCtx::DEVICE, 0),
            (0x7000, 0, AllocCtx::FREE, AllocCtx::DEVICE, 0),
            (0xa000, 0, AllocCtx::FREE, AllocCtx::HOST_PINNED, 0),
        ];
        for (ptr, bytes, op, kind, result) in allocs {
            let device = u32::from(kind == AllocCtx::MANAGED);
            let mut ctx = AllocCtx { ptr, bytes, op, kind, result, device, ..Default::default() };
            probes.fire(Phase::Exit, &mut ctx);
            count_allocations(&ctx);
            track_frees(&ctx);
        }
        for kind in [SyncCtx::STREAM, SyncCtx::DEVICE, SyncCtx::DEVICE] {
            let mut ctx = SyncCtx { kind, ..Default::default() };
            probes.fire(Phase::Enter, &mut ctx);
            count_syncs(&ctx);
        }
        for (has_ptx, image_bytes, result) in [(1, 2011, 0), (0, 9, 0), (1, 5, 1)] {
            let mut ctx = ModuleLoadCtx { has_ptx, image_bytes, result, ..Default::default() };
            probes.fire(Phase::Exit, &mut ctx);
            count_modules(&ctx);
        }
        assert_eq!(probes.health().faults, 0);
        let statics: [(&str, &RawMap); 10] = [
            ("launches", LAUNCHES.raw()),
            ("copies", COPIES.raw()),
            ("allocations", ALLOCATIONS.raw()),
            ("syncs", SYNCS.raw()),
            ("modules", MODULES.raw()),
            ("shapes", SHAPES.raw()),
            ("copy_sizes", COPY_SIZES.raw()),
            ("sizes", SIZES.raw()),
            ("freed", FREED.raw()),
            ("per_device", PER_DEVICE.raw()),
        ];
        for (name, twin) in statics {
            let map = b.map(name).expect("a built-in map");
            assert_eq!(contents(map), contents(twin), "{name}");
        }
        assert_eq!(contents(FREED.raw()), [(0, 1 << 20)], "one free of an allocation seen");
        // Per device: copies and sets apart, allocations (not frees, not failed ones).
        let device = |index, copies, sets, allocations, launches, graph_launches| {
            super::super::DeviceCounts {
                index,
                copies,
                sets,
                allocations,
                launches,
                graph_launches,
            }
        };
        // Launches per device: not captured ones, with their blocks and block threads summed.
        let want = [
            device(
                0,
                (2, 4096u64.wrapping_add(u64::MAX)),
                (0, 0),
                (1, 1 << 20),
                (2, 3 << 32, 1024),
                0,
            ),
            device(1, (1, 5000), (1, 100), (1, 64), (1, 8, 32), 1),
        ];
        assert_eq!(b.device_counts(), want);
        // As metrics, a series per device, labelled (the devices' labels: none recorded here).
        b.record_device(1, None, "Stand-in GPU 1");
        let metrics = super::super::metrics(std::slice::from_ref(&b), Default::default());
        let series = |name: &str| -> Vec<(String, String, super::super::Value)> {
            let m = metrics.iter().find(|m| m.prometheus == name).expect("the metric");
            let label = |p: &super::super::Point, k: &str| {
                p.attributes.iter().find(|(l, _)| *l == k).map(|(_, v)| v.clone())
            };
            m.points
                .iter()
                .map(|p| {
                    let index = label(p, "gpu_index").expect("a device");
                    (index, label(p, "gpu_name").expect("a name"), p.value.clone())
                })
                .collect()
        };
        let counter = super::super::Value::Counter;
        let copied = series("egpu_cuda_device_memory_copies_bytes_total");
        let want = [("0", "", counter(4095)), ("1", "Stand-in GPU 1", counter(5000))];
        let want = want.map(|(i, n, v)| (i.to_string(), n.to_string(), v));
        assert_eq!(copied, want);
        let allocated = series("egpu_cuda_device_memory_allocations_bytes_total");
        assert_eq!(
            allocated.iter().map(|s| s.2.clone()).collect::<Vec<_>>(),
            [counter(1 << 20), counter(64)]
        );
    }

    /// The context bytes and words the probes read, as the verifier found them: what the
    /// preloaded library fills (no clock, no thread id), as the hand-written probes read.
    #[test]
    fn the_probes_read_only_the_fields_they_use() {
        let probes = HostProbes::new();
        let b = Builtin::create(4344, false).expect("maps in process memory");
        for (program, maps) in b.programs().expect("the programs") {
            probes.attach(&program, &maps).expect("attach");
        }
        for (event, phase, bytes, words) in [
            // kernel_id, flags, grid, block, device (past the first 64 bytes)
            (HostEvent::Launch, Phase::Enter, 68, 0b1_1111_0001),
            // bytes, kind, flags
            (HostEvent::Memcpy, Phase::Enter, 68, 0b1_0100_0100),
            // ptr, bytes, kind and op, device, result
            (HostEvent::Alloc, Phase::Exit, 52, 0b111_0011),
            // kind
            (HostEvent::Sync, Phase::Enter, 28, 0b1000),
            // image_bytes, has_ptx, result
            (HostEvent::ModuleLoad, Phase::Exit, 52, 0b101_0010),
        ] {
            assert_eq!(probes.context_needed(event, phase), bytes, "{event:?} {phase:?}");
            let read = probes.context_words(event, phase);
            assert_eq!(read, words, "{event:?} {phase:?}: {read:#b}");
        }
        let other = [(HostEvent::Launch, Phase::Exit), (HostEvent::Memcpy, Phase::Exit)];
        assert!(other.iter().all(|&(e, p)| !probes.armed(e, p)));
        // With the device found from the function where the probes run, the callers queue the
        // first line only, with the function (word 1) instead of the device.
        assert!(!probes.launch_device_found_by_probes(Phase::Enter));
        probes.resolve_launch_devices(|function| function as u32 + 1);
        assert!(probes.launch_device_found_by_probes(Phase::Enter));
        assert_eq!(probes.context_needed(HostEvent::Launch, Phase::Enter), 64);
        assert_eq!(probes.context_words(HostEvent::Launch, Phase::Enter), 0b1111_0011);
        // Until the callers fill it again.
        probes.launch_devices_from_callers();
        assert!(!probes.launch_device_found_by_probes(Phase::Enter));
        assert_eq!(probes.context_needed(HostEvent::Launch, Phase::Enter), 68);
        assert_eq!(probes.context_words(HostEvent::Launch, Phase::Enter), 0b1_1111_0001);
    }

    /// A launch's device found from its function where the probes run: posted with its first
    /// line only (as the preloaded library queues it), each launch counts on its function's
    /// device, whatever the caller's context says past the line.
    #[test]
    fn launches_count_on_the_device_their_function_says() {
        let probes: &'static HostProbes = Box::leak(Box::new(HostProbes::new()));
        let b = Builtin::create(4346, false).expect("maps in process memory");
        probes.resolve_launch_devices(|function| (function >> 8) as u32);
        for (program, maps) in b.programs().expect("the programs") {
            probes.attach(&program, &maps).expect("attach");
        }
        let poster = probes.poster();
        for (function, n) in [(0x100, 3), (0x200, 5), (0x101, 2)] {
            for _ in 0..n {
                let made = || LaunchCtx {
                    kernel_id: 7,
                    function,
                    grid: [2, 1, 1],
                    block: [64, 1, 1],
                    device: 9,
                    ..Default::default()
                };
                assert!(poster.post_line(Phase::Enter, made), "one line");
            }
        }
        // Fired now, with the whole context: the same.
        let mut ctx =
            LaunchCtx { kernel_id: 7, function: 0x201, grid: [1, 1, 1], ..Default::default() };
        probes.fire(Phase::Enter, &mut ctx);
        probes.flush();
        let launches: Vec<_> = b.device_counts().iter().map(|c| (c.index, c.launches)).collect();
        assert_eq!(launches, [(1, (5, 10, 320)), (2, (6, 11, 320))]);
        assert_eq!(probes.health().faults, 0);
    }

    static NOWHERE: HashMap<u64, u64> = HashMap::with_capacity(8);

    /// Counts into a map no process has.
    #[probe(host::launch, crate = crate::egpu_root)]
    fn count_nowhere(ctx: &LaunchCtx) {
        NOWHERE.fetch_add(&ctx.kernel_id, 1);
    }

    mod other {
        /// A `shapes` one element short of the process's.
        pub(super) static SHAPES: super::Array<u64> =
            super::Array::with_len(super::SHAPE_SLOTS - 1);
    }

    /// Counts into a `shapes` of another size than the process's.
    #[probe(host::launch, crate = crate::egpu_root)]
    fn misshapen(ctx: &LaunchCtx) {
        other::SHAPES.fetch_add(0, ctx.kernel_id);
    }

    #[test]
    fn a_map_table_binds_by_name_and_shape_or_not_at_all() {
        let b = Builtin::create(4345, false).expect("maps in process memory");
        let (_, maps) = b.bind(launch_shapes::probe()).expect("bound");
        assert!(std::ptr::eq(maps[0].memory().0.as_ptr(), b.shapes.memory().0.as_ptr()));
        for probe in [count_nowhere::probe(), misshapen::probe()] {
            let e = b.bind(probe).expect_err("no map of that name and shape");
            assert!(matches!(e, BuiltinError::Unbound { .. }), "{e}");
        }
        let e = b.bind(count_nowhere::probe()).expect_err("unbound").to_string();
        assert_eq!(e, "probe `count_nowhere`: no built-in map matches its map `NOWHERE`");
    }

    /// The Probe Rust launch counter against the hand-written one it replaced: the same counts,
    /// the same context read (the kernel id and the flags), and about as many instructions.
    #[test]
    fn the_launch_counter_counts_as_the_hand_written_one() {
        let def = MapDef {
            name: "launches".into(),
            kind: MapKind::Hash,
            key_size: 8,
            value_size: 8,
            capacity: KERNELS,
        };
        let attach = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
        let text = egpu_test_support::read_workspace_file("tests/probes/count_launches.s");
        let text = assemble(&text).expect("assembles");
        let hand =
            verify(&Program::new(text, vec![def], attach).expect("a program")).expect("verifies");
        let probe = count_launches::probe().verified().expect("builds");
        let made = || RawMap::create(*LAUNCHES.raw().geometry(), &egpu_maps::Placement::Process);
        let (a, b) = (made().expect("a map"), made().expect("a map"));
        let mut vms = [
            Vm::with_maps(probe, std::slice::from_ref(&a), EngineChoice::Auto).expect("loads"),
            Vm::with_maps(&hand, std::slice::from_ref(&b), EngineChoice::Auto).expect("loads"),
        ];
        for i in 0..300u64 {
            let flags = if i % 7 == 0 { LaunchCtx::CAPTURED } else { (i % 3) as u32 * 2 };
            let mut ctx = LaunchCtx { kernel_id: i % 11, flags, ..Default::default() };
            for vm in &mut vms {
                assert_eq!(vm.run_ctx(&mut ctx).expect("runs"), 0);
            }
        }
        assert_eq!(contents(&a), contents(&b));
        assert_eq!(HashMap::<u64, u64>::from_raw(a).expect("a hash").get(&CAPTURED), Some(43));
        assert_eq!(vms[0].context_needed(), vms[1].context_needed());
        let (new, old) = (probe.program().decoded().len(), hand.program().decoded().len());
        assert!(new * 10 <= old * 13, "{new} instructions, by hand {old}");
    }
}
