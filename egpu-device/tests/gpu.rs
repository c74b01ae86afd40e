//! Tests on a real GPU. Without one they print why they skip; with `EGPU_REQUIRE_GPU=1` (set on
//! the GPU machine) a missing GPU fails them.

use egpu_device::{GpuStatus, devices, gpu_status, testing::require_gpu};
use egpu_test_support::{read_workspace_file, workspace_root};

#[test]
fn the_driver_describes_the_gpu() {
    let Some(gpu) = require_gpu() else { return };
    println!("found {gpu}");
    assert!(gpu.compute_capability >= (7, 0), "{gpu}: egpu targets Volta and later");
    assert!(gpu.sm_count > 0, "{gpu}");
    assert!(gpu.total_memory >= 1 << 30, "{gpu}");
    assert!(gpu.driver_cuda_version() >= (12, 0), "{gpu}");
    assert_eq!(
        gpu.sm_target(),
        format!("sm_{}{}", gpu.compute_capability.0, gpu.compute_capability.1)
    );
    let all = devices().expect("the driver answers twice");
    assert_eq!(all.first(), Some(&gpu));
    assert!(matches!(gpu_status(), GpuStatus::Found(found) if found == all));
}

/// Every conformance program runs on the GPU, in a kernel of its own, with the memory in device
/// memory; `r0` must be the expected result.
#[test]
fn conformance_on_the_gpu() {
    use egpu_device::cuda::{Arg, Gpu};
    use egpu_device::translate::kernel_module;
    use egpu_ebpf::conformance::{Expect, Failures, check_listed, suite};
    use egpu_ebpf::verifier::verify;

    let Some(info) = require_gpu() else { return };
    let Some(cases) = suite(&workspace_root()) else { return };
    let cases = cases.expect("a readable suite");
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let mut failed = Failures::new();
    let mut passed = 0;
    for case in &cases {
        let outcome = (|| -> Result<u64, String> {
            let program = case.program()?;
            let verified = verify(&program).map_err(|e| format!("verifier: {e}"))?;
            let ptx = kernel_module(&verified, "conformance").map_err(|e| e.to_string())?;
            let module = gpu.load_ptx(&ptx).map_err(|e| format!("load: {e}"))?;
            let kernel = module.kernel("conformance").map_err(|e| e.to_string())?;
            let mem = gpu.alloc(case.mem.len().max(8)).map_err(|e| e.to_string())?;
            mem.write(&case.mem).map_err(|e| e.to_string())?;
            let out = gpu.alloc(8).map_err(|e| e.to_string())?;
            gpu.launch(&kernel, (1, 1, 1), (1, 1, 1), &[Arg::Ptr(&mem), Arg::Ptr(&out)])
                .map_err(|e| format!("launch: {e}"))?;
            let mut r0 = [0u8; 8];
            out.read(&mut r0).map_err(|e| e.to_string())?;
            Ok(u64::from_le_bytes(r0))
        })();
        let verdict = match (case.expect, outcome) {
            (Expect::Result(want), Ok(got)) if want == got => Ok(()),
            (Expect::Result(want), Ok(got)) => {
                Err(format!("returned {got:#x}, expected {want:#x}"))
            }
            (Expect::Result(_), Err(e)) => Err(e),
            (Expect::Error, Err(_)) => Ok(()),
            (Expect::Error, Ok(got)) => Err(format!("returned {got:#x}, expected an error")),
        };
        match verdict {
            Ok(()) => passed += 1,
            Err(why) => {
                failed.insert(("gpu".to_string(), case.name.clone()), why);
            }
        }
    }
    println!("conformance gpu: {passed}/{}", cases.len());
    for ((_, file), why) in &failed {
        println!("  failed gpu {file}: {why}");
    }
    if let Err(e) = check_listed(&workspace_root(), &["gpu"], &failed) {
        panic!("{e}");
    }
}

/// Programs of the verifier suite that call `bpf_loop` (nested, with early stops, and indexing
/// the caller's stack by the callback's index) run on the GPU, in a kernel of their own, and
/// compute what their loops do.
#[test]
fn bpf_loop_programs_run_on_the_gpu() {
    use egpu_device::cuda::{Arg, Gpu};
    use egpu_device::translate::kernel_module;
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, Program, assemble};

    let Some(info) = require_gpu() else { return };
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let run = |file: &str, ctx: u64| -> u64 {
        let text = read_workspace_file(format!("tests/verifier/{file}"));
        let slots = assemble(&text).expect("assembles");
        let program =
            Program::new(slots, vec![], AttachPoint::User { ctx_size: 8 }).expect("valid");
        let verified = verify(&program).unwrap_or_else(|e| panic!("{file}: {e}"));
        let ptx = kernel_module(&verified, "loops").unwrap_or_else(|e| panic!("{file}: {e}"));
        let module = gpu.load_ptx(&ptx).unwrap_or_else(|e| panic!("{file}: {e}"));
        let kernel = module.kernel("loops").expect("the kernel");
        let (mem, out) = (gpu.alloc(8).expect("ctx"), gpu.alloc(8).expect("r0"));
        mem.write(&ctx.to_le_bytes()).expect("ctx");
        gpu.launch(&kernel, (1, 1, 1), (1, 1, 1), &[Arg::Ptr(&mem), Arg::Ptr(&out)])
            .expect("launch");
        let mut r0 = [0u8; 8];
        out.read(&mut r0).expect("r0");
        u64::from_le_bytes(r0)
    };
    assert_eq!(run("ok_loop_index_within_array.s", 0), (0..8).map(|i| i * i).sum::<u64>());
    let mut checked = 1;
    for w in [0u64, 1, 7, 12, 49, 81, 97, 127] {
        let mut count = 0u64;
        let found = (0..10u64).any(|i| {
            (0..10u64).any(|j| {
                count += 1;
                i * j == w
            })
        });
        assert_eq!(run("ok_loop_nested_search.s", w), count | u64::from(found) << 63, "{w}");
        checked += 1;
    }
    println!("bpf_loop on the GPU: {checked} runs of 2 suite programs computed their loops");
}

/// The saxpy kernel of the corpus, instrumented: one probe counts global loads in an `Array`
/// and another counts stores per SM in a `PerCpuArray`, both in GPU memory. The counts are exact
/// and the kernel computes what it computes uninstrumented.
#[test]
fn device_maps_count_the_accesses_of_saxpy() {
    use egpu_device::cuda::{Arg, Gpu};
    use egpu_device::inject::{DeviceProbe, Kernels, inject};
    use egpu_device::maps::DeviceMapBuffer;
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
    use egpu_maps::layout::Geometry;
    use egpu_maps::{Placement, RawMap};

    let Some(info) = require_gpu() else { return };
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let ptx = read_workspace_file("tests/ptx/saxpy.ptx");
    let count = include_str!("../../tests/probes/count.s");
    let def =
        |kind| MapDef { name: "counts".into(), kind, key_size: 4, value_size: 8, capacity: 1 };
    let probe = |kind, event| {
        let program =
            Program::new(assemble(count).unwrap(), vec![def(kind)], AttachPoint::Device(event))
                .expect("a program");
        verify(&program).expect("verified")
    };
    let loads = probe(MapKind::Array, DeviceEvent::GlobalLoad);
    let stores = probe(MapKind::PerCpuArray, DeviceEvent::GlobalStore);
    let array =
        RawMap::create(Geometry::new(MapKind::Array, 4, 8, 1, 1, 0).unwrap(), &Placement::Process)
            .unwrap();
    let per_sm = RawMap::create(
        Geometry::new(MapKind::PerCpuArray, 4, 8, 1, 0, info.sm_count).unwrap(),
        &Placement::Process,
    )
    .unwrap();
    let array_dev = DeviceMapBuffer::upload(&gpu, &array).unwrap();
    let per_sm_dev = DeviceMapBuffer::upload(&gpu, &per_sm).unwrap();

    let n: u32 = 1 << 20;
    let (array_binding, per_sm_binding) = ([array_dev.binding()], [per_sm_dev.binding()]);
    let injected = inject(
        &ptx,
        &[
            DeviceProbe { program: &loads, kernels: Kernels::All, maps: &array_binding },
            DeviceProbe {
                program: &stores,
                kernels: Kernels::Named(&["saxpy"]),
                maps: &per_sm_binding,
            },
        ],
    )
    .expect("saxpy instruments")
    .ptx;
    let run = |ptx: &str| -> Vec<f32> {
        let module = gpu.load_ptx(ptx).unwrap_or_else(|e| panic!("load: {e}"));
        let kernel = module.kernel("saxpy").unwrap();
        let bytes = |f: &dyn Fn(u32) -> f32| -> Vec<u8> {
            (0..n).flat_map(|i| f(i).to_le_bytes()).collect()
        };
        let x = gpu.alloc(n as usize * 4).unwrap();
        let y = gpu.alloc(n as usize * 4).unwrap();
        x.write(&bytes(&|i| i as f32)).unwrap();
        y.write(&bytes(&|i| (i % 7) as f32)).unwrap();
        let args = [Arg::U32(n), Arg::F32(2.0), Arg::Ptr(&x), Arg::Ptr(&y)];
        gpu.launch(&kernel, (120, 1, 1), (256, 1, 1), &args).expect("launch");
        let mut out = vec![0u8; n as usize * 4];
        y.read(&mut out).unwrap();
        out.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    };
    let plain = run(&ptx);
    let probed = run(&injected);
    assert_eq!(plain, probed, "instrumentation changed the kernel's results");
    array_dev.download().unwrap();
    per_sm_dev.download().unwrap();
    let value = |raw: &RawMap| {
        let p = raw.lookup(&0u32.to_le_bytes()).unwrap().expect("index 0");
        // SAFETY: the value is 8 bytes, 8-aligned, alive while the map is.
        unsafe { p.cast::<u64>().as_ptr().read() }
    };
    let load_count = value(&array);
    println!("saxpy over {n} floats: {load_count} loads counted in an Array");
    assert_eq!(load_count, 2 * u64::from(n));
    let mut stores_total = 0;
    let g = *per_sm.geometry();
    let (base, _) = per_sm.memory();
    let mut busy_sms = 0;
    for s in 0..g.shards() {
        // SAFETY: slot 0 of every shard is 8 bytes, 8-aligned, inside the map's memory.
        let v = unsafe { base.as_ptr().add(g.slot_offset(s, 0)).cast::<u64>().read() };
        stores_total += v;
        busy_sms += u32::from(v > 0);
    }
    println!("{stores_total} stores counted over {busy_sms} SM shards");
    assert_eq!(stores_total, u64::from(n));
    assert!(busy_sms > 1, "the stores of 120 blocks ran on one SM?");
}

/// Loading and launching through an `Instrumenter`: sampling, detaching, the cache, and a probe
/// the GPU cannot run refused when attached.
#[test]
fn instrumenter_samples_detaches_caches_and_refuses_what_cannot_run() {
    use egpu_device::cuda::{Arg, Gpu};
    use egpu_device::instrument::{Instrumenter, Ran};
    use egpu_device::maps::DeviceMapBuffer;
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
    use egpu_maps::layout::Geometry;
    use egpu_maps::{Placement, RawMap};

    let Some(info) = require_gpu() else { return };
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let ptx = read_workspace_file("tests/ptx/saxpy.ptx");
    let count = include_str!("../../tests/probes/count.s");
    let def =
        MapDef { name: "n".into(), kind: MapKind::Array, key_size: 4, value_size: 8, capacity: 1 };
    let program = |text: &str, maps: Vec<MapDef>| {
        let slots = assemble(text).expect("assembles");
        let p = Program::new(slots, maps, AttachPoint::Device(DeviceEvent::GlobalStore)).unwrap();
        verify(&p).expect("verified")
    };
    let map =
        RawMap::create(Geometry::new(MapKind::Array, 4, 8, 1, 1, 0).unwrap(), &Placement::Process)
            .unwrap();
    let device = DeviceMapBuffer::upload(&gpu, &map).unwrap();
    let mut instrumenter = Instrumenter::new(&gpu);
    instrumenter
        .attach(&program(count, vec![def]), &[device.binding()], &["saxpy"])
        .expect("the probe translates");
    let n: u32 = 1 << 16;
    let x = gpu.alloc(n as usize * 4).unwrap();
    let y = gpu.alloc(n as usize * 4).unwrap();
    let args = [Arg::U32(n), Arg::F32(1.0), Arg::Ptr(&x), Arg::Ptr(&y)];
    let module = instrumenter.load(&ptx).expect("loads");
    assert!(module.fallback().is_none(), "{:?}", module.fallback());
    // saxpy's two loads and its store: all observed.
    let coverage = module.coverage().expect("instrumented");
    assert_eq!((coverage.observed, coverage.memory_instructions), (3, 3), "{coverage:?}");
    instrumenter.sample_every(2);
    let ran: Vec<Ran> = (0..4)
        .map(|_| module.launch("saxpy", (64, 1, 1), (256, 1, 1), &args).expect("launch"))
        .collect();
    assert_eq!(ran, [Ran::Instrumented, Ran::Original, Ran::Instrumented, Ran::Original]);
    instrumenter.sample_every(1);
    instrumenter.pause();
    assert_eq!(module.launch("saxpy", (64, 1, 1), (256, 1, 1), &args), Ok(Ran::Original));
    instrumenter.resume();
    assert_eq!(module.launch("saxpy", (64, 1, 1), (256, 1, 1), &args), Ok(Ran::Instrumented));
    device.download().unwrap();
    let stores = {
        let p = map.lookup(&0u32.to_le_bytes()).unwrap().expect("index 0");
        // SAFETY: the value is 8 bytes, 8-aligned, alive while the map is.
        unsafe { p.cast::<u64>().as_ptr().read() }
    };
    assert_eq!(stores, 3 * u64::from(n), "three instrumented launches of {n} stores");
    let again = instrumenter.load(&ptx).expect("loads again");
    assert!(again.fallback().is_none());
    assert_eq!(instrumenter.cached(), 1, "the same module and probes hit the cache");
    println!("sampled 2 of 4 launches, paused and resumed: {stores} stores counted");

    // A probe the GPU cannot run (its ring has no device binding) is refused when attached.
    let ring = MapDef {
        name: "r".into(),
        kind: MapKind::RingBuf,
        key_size: 0,
        value_size: 8,
        capacity: 64,
    };
    let output = "stdw [%r10-8], 7\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -8\nmov %r3, 8\n\
                  mov %r4, 0\ncall 130\nmov %r0, 0\nexit";
    let refused = Instrumenter::new(&gpu).attach(&program(output, vec![ring]), &[], &[]);
    let why = refused.expect_err("refused when attached");
    println!("refused when attached: {why}");
    assert!(why.to_string().contains("no device binding"), "{why}");
}

/// The probe Probe Rust's `HashMap::fetch_add` makes, by page: look up, insert a zero when
/// missing (racing inserts of one page from many threads), look up again, add.
const PAGE_COUNT: &str = include_str!("../../tests/probes/page_count.s");

/// A device hash map counts the loads of saxpy per 4 KiB page exactly: one entry per page,
/// however many threads raced to insert it, each with the count the host computes.
#[test]
fn device_hash_map_counts_pages_exactly() {
    use egpu_device::cuda::{Arg, Gpu};
    use egpu_device::inject::{DeviceProbe, Kernels, inject};
    use egpu_device::maps::DeviceMapBuffer;
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
    use egpu_maps::layout::Geometry;
    use egpu_maps::{Placement, RawMap};
    use std::collections::BTreeMap;

    let Some(info) = require_gpu() else { return };
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let ptx = read_workspace_file("tests/ptx/saxpy.ptx");
    let def = MapDef {
        name: "pages".into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 8,
        capacity: 8192,
    };
    let def_clone = || def.clone();
    let program = Program::new(
        assemble(PAGE_COUNT).expect("assembles"),
        vec![def.clone()],
        AttachPoint::Device(DeviceEvent::GlobalLoad),
    )
    .unwrap();
    let verified = verify(&program).expect("verified");
    let map = RawMap::create(
        Geometry::new(MapKind::Hash, 8, 8, 8192, 1, 0).unwrap(),
        &Placement::Process,
    )
    .unwrap();
    let device = DeviceMapBuffer::upload(&gpu, &map).unwrap();
    // Stores per page in a per-CPU hash map: one table per SM, summed by the reader.
    let per_sm_def = MapDef { kind: MapKind::PerCpuHash, name: "per_sm".into(), ..def_clone() };
    let stores = verify(
        &Program::new(
            assemble(PAGE_COUNT).expect("assembles"),
            vec![per_sm_def],
            AttachPoint::Device(DeviceEvent::GlobalStore),
        )
        .unwrap(),
    )
    .expect("verified");
    let per_sm = RawMap::create(
        Geometry::new(MapKind::PerCpuHash, 8, 8, 8192, 1, info.sm_count).unwrap(),
        &Placement::Process,
    )
    .unwrap();
    let per_sm_device = DeviceMapBuffer::upload(&gpu, &per_sm).unwrap();
    let binding = [device.binding()];
    let per_sm_binding = [per_sm_device.binding()];
    let probes = [
        DeviceProbe { program: &verified, kernels: Kernels::All, maps: &binding },
        DeviceProbe { program: &stores, kernels: Kernels::All, maps: &per_sm_binding },
    ];
    let instrumented = inject(&ptx, &probes).expect("instruments").ptx;
    let module = gpu.load_ptx(&instrumented).unwrap_or_else(|e| panic!("{e}"));
    let kernel = module.kernel("saxpy").unwrap();
    let n: u32 = 3 << 20; // 4 KiB pages hold 1024 floats: n is a multiple
    let x = gpu.alloc(n as usize * 4).unwrap();
    let y = gpu.alloc(n as usize * 4).unwrap();
    let args = [Arg::U32(n), Arg::F32(2.0), Arg::Ptr(&x), Arg::Ptr(&y)];
    gpu.launch(&kernel, (info.sm_count * 4, 1, 1), (256, 1, 1), &args).expect("launch");
    device.download().unwrap();
    let mut expected: BTreeMap<u64, u64> = BTreeMap::new();
    for base in [x.device_ptr(), y.device_ptr()] {
        for i in 0..u64::from(n) {
            *expected.entry((base + 4 * i) >> 12).or_default() += 1;
        }
    }
    for (page, count) in &expected {
        let got = map.lookup(&page.to_le_bytes()).unwrap().map(|p| {
            // SAFETY: values are 8 bytes, 8-aligned, alive while the map is.
            unsafe { p.cast::<u64>().as_ptr().read() }
        });
        assert_eq!(got, Some(*count), "page {page:#x}");
    }
    assert_eq!(map.len(), expected.len() as u64, "one entry per page");
    assert_eq!(map.refused(), 0);
    per_sm_device.download().unwrap();
    let per_sm = egpu_maps::PerCpuHashMap::<u64, u64>::from_raw(per_sm).expect("per-CPU hash");
    let mut store_pages = 0;
    for i in (0..u64::from(n)).step_by(1024) {
        let page = (y.device_ptr() + 4 * i) >> 12;
        assert_eq!(per_sm.sum(&page), Some(1024), "stores to page {page:#x}, over the SMs");
        store_pages += 1;
    }
    println!("{store_pages} pages of stores counted exactly over the SMs' tables");
    println!("{} pages counted exactly in a device hash map ({} loads)", expected.len(), 2 * n);
}

/// An instrumented kernel that needs more registers than a launch allows falls back: the probe
/// (a hash update of 256-byte values keyed by 64 bytes, at kernel entry) brings saxpy from 14
/// to about 80 registers, so 1024 threads per block cannot launch it
/// (`CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`); the original kernel runs instead, the reason is kept,
/// and later launches of that kernel run the original without trying again.
#[test]
fn a_launch_out_of_resources_falls_back_to_the_original_kernel() {
    use egpu_device::cuda::{Arg, Gpu};
    use egpu_device::instrument::{Fallback, Instrumenter, Ran};
    use egpu_device::maps::DeviceMapBuffer;
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
    use egpu_maps::layout::Geometry;

    let Some(info) = require_gpu() else { return };
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let ptx = read_workspace_file("tests/ptx/saxpy.ptx");
    let mut text = String::from("ldxw %r6, [%r1+8]\n");
    for i in 0..8 {
        text.push_str(&format!(
            "mov %r7, %r6\nmul %r7, {}\nstxdw [%r10-{}], %r7\n",
            i * 7 + 3,
            8 * (i + 1)
        ));
    }
    for i in 0..32 {
        text.push_str(&format!(
            "mov %r7, %r6\nxor %r7, {}\nstxdw [%r10-{}], %r7\n",
            i * 13 + 1,
            64 + 8 * (i + 1)
        ));
    }
    text.push_str(
        "lddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -64\nmov %r3, %r10\nadd %r3, -320\nmov %r4, 0\n\
         call 2\nmov %r0, 0\nexit\n",
    );
    let def = MapDef {
        name: "big".into(),
        kind: MapKind::Hash,
        key_size: 64,
        value_size: 256,
        capacity: 4096,
    };
    let program = Program::new(
        assemble(&text).expect("assembles"),
        vec![def],
        AttachPoint::Device(DeviceEvent::KernelEntry),
    )
    .expect("a program");
    let geometry = Geometry::new(MapKind::Hash, 64, 256, 4096, 1, 0).expect("geometry");
    let map = DeviceMapBuffer::on_device(&gpu, geometry).expect("a map on the GPU");
    let mut instrumenter = Instrumenter::new(&gpu);
    instrumenter
        .attach(&verify(&program).expect("verified"), &[map.binding()], &[])
        .expect("the probe translates");
    let module = instrumenter.load(&ptx).expect("loads");
    assert!(module.fallback().is_none(), "the instrumented module loads: {:?}", module.fallback());
    let n: u32 = 1 << 16;
    let x = gpu.alloc(n as usize * 4).expect("x");
    let y = gpu.alloc(n as usize * 4).expect("y");
    let args = [Arg::U32(n), Arg::F32(1.0), Arg::Ptr(&x), Arg::Ptr(&y)];
    let ran = module.launch("saxpy", (2, 1, 1), (1024, 1, 1), &args).expect("a launch");
    assert_eq!(ran, Ran::Original, "1024 threads of the instrumented kernel cannot launch");
    let why = module.kernel_fallback("saxpy").expect("a reason is kept");
    assert!(matches!(&why, Fallback::Launch { error, .. } if error.code() == Some(701)), "{why}");
    println!("falls back: {why}");
    let again = module.launch("saxpy", (8, 1, 1), (256, 1, 1), &args).expect("a launch");
    assert_eq!(again, Ran::Original, "later launches of that kernel run the original");
}

/// A tensor copy's probe gets its box's bytes from the table of tensor maps: the kernel's hash of
/// the map it was passed finds what the host recorded for the map the driver encoded. nvcc's
/// `tests/kernels/tensor_copy.cu` copies a W × H f32 matrix through shared memory by boxes of
/// 64 × 32 (8,192 bytes), one tensor load and one tensor store per block; probes add the bytes
/// of every tensor copy to two array slots. Without the maps recorded, the bytes are 0.
#[test]
fn tensor_copies_find_their_box_bytes_in_the_table() {
    use cudarc::driver::sys;
    use egpu_device::cuda::{Arg, Gpu};
    use egpu_device::inject::tensor_maps::MAP_BYTES;
    use egpu_device::instrument::{Instrumenter, Ran};
    use egpu_device::maps::DeviceMapBuffer;
    use egpu_device::tensor_maps::TensorMaps;
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, MemAccessCtx, Program, assemble};
    use egpu_maps::layout::Geometry;
    use egpu_maps::{Placement, RawMap};
    use std::mem::offset_of;

    let Some(info) = require_gpu() else { return };
    if info.compute_capability < (9, 0) {
        println!("skipped: tensor copies need sm_90, {info} is older");
        return;
    }
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let (w, h) = (1024u32, 512u32);
    let bytes = (w * h * 4) as usize;
    let le = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|f| f.to_le_bytes()).collect() };
    let src_values: Vec<f32> = (0..w * h).map(|i| (i % 977) as f32).collect();
    let src = gpu.alloc(bytes).unwrap();
    src.write(&le(&src_values)).unwrap();
    let dst = gpu.alloc(bytes).unwrap();
    let encode = |buffer: u64| -> [u8; MAP_BYTES] {
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        let (dims, strides) = ([u64::from(w), u64::from(h)], [u64::from(w) * 4]);
        let (boxes, element_strides) = ([64u32, 32], [1u32, 1]);
        // SAFETY: every pointer is to a live array of the rank's length (strides: rank - 1).
        let result = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                2,
                buffer as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_NONE,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        assert_eq!(result, sys::CUresult::CUDA_SUCCESS, "cuTensorMapEncodeTiled");
        let words = map.opaque.iter().flat_map(|w| w.to_le_bytes());
        words.collect::<Vec<u8>>().try_into().expect("128 bytes")
    };
    let (src_map, dst_map) = (encode(src.device_ptr()), encode(dst.device_ptr()));
    let probe_text = format!(
        "ldxw %r7, [%r1+{class}]\njne %r7, {tensor}, out\nldxw %r6, [%r1+{size}]\n\
         stw [%r10-4], 0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -4\ncall 1\n\
         jeq %r0, 0, out\nlock add [%r0+0], %r6\nout:\nmov %r0, 0\nexit",
        class = offset_of!(MemAccessCtx, class),
        size = offset_of!(MemAccessCtx, size),
        tensor = MemAccessCtx::TENSOR_COPY,
    );
    let def = MapDef {
        name: "bytes".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 8,
        capacity: 1,
    };
    let probe = |event| {
        let program = Program::new(
            assemble(&probe_text).expect("assembles"),
            vec![def.clone()],
            AttachPoint::Device(event),
        )
        .expect("a program");
        verify(&program).expect("verified")
    };
    let ptx = read_workspace_file("tests/ptx/tensor_copy.ptx");
    let geometry = Geometry::new(MapKind::Array, 4, 8, 1, 1, 0).unwrap();
    let counts: Vec<RawMap> =
        (0..2).map(|_| RawMap::create(geometry, &Placement::Process).unwrap()).collect();
    let device: Vec<DeviceMapBuffer<'_>> =
        counts.iter().map(|m| DeviceMapBuffer::upload(&gpu, m).unwrap()).collect();
    let maps = TensorMaps::new(&gpu).expect("a table");
    let mut instrumenter = Instrumenter::new(&gpu);
    instrumenter.tensor_maps(&maps);
    for (i, event) in [DeviceEvent::GlobalLoad, DeviceEvent::GlobalStore].into_iter().enumerate() {
        instrumenter.attach(&probe(event), &[device[i].binding()], &[]).expect("attached");
    }
    let module = instrumenter.load(&ptx).expect("loads");
    // Runs the kernel: the bytes loaded and stored by tensor copies, as the probes added them.
    let run = || -> (u64, u64) {
        dst.zero().unwrap();
        for d in &device {
            d.clear().unwrap();
        }
        let args = [Arg::Bytes(&src_map), Arg::Bytes(&dst_map)];
        let grid = (w / 64, h / 32, 1);
        let ran = module.launch("tensor_copy", grid, (128, 1, 1), &args).expect("launch");
        assert_eq!(ran, Ran::Instrumented);
        let mut out = vec![0u8; bytes];
        dst.read(&mut out).unwrap();
        let doubled: Vec<f32> = src_values.iter().map(|v| 2.0 * v).collect();
        assert!(out == le(&doubled), "the copy's result");
        let value = |i: usize| {
            device[i].download().unwrap();
            let p = counts[i].lookup(&0u32.to_le_bytes()).unwrap().expect("slot 0");
            // SAFETY: an 8-byte value, 8-aligned, alive while the map is.
            unsafe { p.cast::<u64>().as_ptr().read() }
        };
        (value(0), value(1))
    };
    assert_eq!(run(), (0, 0), "maps the table does not know: 0");
    for map in [&src_map, &dst_map] {
        maps.record_tiled(map, 7, &[64, 32], &[1, 1]).expect("recorded");
    }
    assert_eq!(maps.bytes_of(&src_map), Some(8192));
    let expected = u64::from(w * h * 4);
    assert_eq!(run(), (expected, expected), "every byte, read and written");
    println!("tensor copies: {expected} bytes read and {expected} written, by their maps' boxes");
}
