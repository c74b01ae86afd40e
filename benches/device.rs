//! The GPU backend's benchmark (issue 6), on the GPU machine: `y = a·x + y` over 2^28 floats
//! with a grid-stride loop, every global load and store probed, each variant as a ratio to the
//! uninstrumented kernel measured in the same process, median of several interleaved runs.
//!
//! Also: the time to instrument and load a ~40 KB module against loading it uninstrumented, both
//! with the driver's JIT cache off; the time to take a fat binary's PTX, instrument and load it
//! against loading the fat binary as it is (the driver picks its cubin: no JIT), as the preloaded
//! library does with nvcc's fat binaries; and the registers and local memory that
//! instrumentation adds.
//!
//! Without a GPU it says why and exits 0, or fails when `EGPU_REQUIRE_GPU=1`.

use std::time::{Duration, Instant};

use egpu::ebpf::verifier::{Verified, verify};
use egpu::ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
use egpu_device::cuda::{Arg, Gpu};
use egpu_device::inject::{DeviceProbe, Kernels, inject};
use egpu_device::maps::DeviceMapBuffer;
use egpu_device::translate::DeviceMap;
use egpu_maps::layout::Geometry;
use egpu_maps::{Placement, RawMap};

const N: u32 = 1 << 28;
const RUNS: usize = 7;

/// The counting probe: one atomic add to entry 0 of map 0 per event.
const COUNT: &str = include_str!("../tests/probes/count.s");

/// Counts accesses per 4 KiB page in a hash map, as Probe Rust's `HashMap::fetch_add` does.
const PAGES: &str = include_str!("../tests/probes/page_count.s");

/// The trace probe: a 16-byte record (address, then size | site << 32) per access to a ring.
const TRACE: &str = include_str!("../tests/probes/trace.s");

/// Pages the benchmark touches (x and y, 2^28 floats each), with room to spare.
const PAGE_CAPACITY: u32 = 1 << 20;

fn program(text: &str, maps: Vec<MapDef>, event: DeviceEvent) -> Verified {
    let program =
        Program::new(assemble(text).expect("assembles"), maps, AttachPoint::Device(event))
            .expect("a program");
    verify(&program).expect("verified")
}

fn counts(kind: MapKind) -> Vec<MapDef> {
    vec![MapDef { name: "counts".into(), kind, key_size: 4, value_size: 8, capacity: 1 }]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // SAFETY: nothing else runs yet; the driver reads this when it initialises, below.
    unsafe { std::env::set_var("CUDA_CACHE_DISABLE", "1") };
    let Some(info) = egpu_device::testing::require_gpu() else { return };
    let gpu = Gpu::open(info.ordinal).expect("the GPU opens");
    let ptx = egpu_test_support::read_workspace_file("tests/ptx/saxpy.ptx");

    let geometry = |kind, sm| match kind {
        MapKind::PerCpuArray => Geometry::new(kind, 4, 8, 1, 0, sm),
        _ => Geometry::new(kind, 4, 8, 1, 1, 0),
    };
    let array = RawMap::create(geometry(MapKind::Array, 0).unwrap(), &Placement::Process).unwrap();
    let per_sm =
        RawMap::create(geometry(MapKind::PerCpuArray, info.sm_count).unwrap(), &Placement::Process)
            .unwrap();
    let pages = RawMap::create(
        Geometry::new(MapKind::Hash, 8, 8, PAGE_CAPACITY, 1, 0).unwrap(),
        &Placement::Process,
    )
    .unwrap();
    let pages_dev = DeviceMapBuffer::upload(&gpu, &pages).unwrap();
    let array_dev = DeviceMapBuffer::upload(&gpu, &array).unwrap();
    let per_sm_dev = DeviceMapBuffer::upload(&gpu, &per_sm).unwrap();
    let empty = [
        program("mov %r0, 0\nexit", vec![], DeviceEvent::GlobalLoad),
        program("mov %r0, 0\nexit", vec![], DeviceEvent::GlobalStore),
    ];
    let count_array = [
        program(COUNT, counts(MapKind::Array), DeviceEvent::GlobalLoad),
        program(COUNT, counts(MapKind::Array), DeviceEvent::GlobalStore),
    ];
    let count_sm = [
        program(COUNT, counts(MapKind::PerCpuArray), DeviceEvent::GlobalLoad),
        program(COUNT, counts(MapKind::PerCpuArray), DeviceEvent::GlobalStore),
    ];
    let page_def = vec![MapDef {
        name: "pages".into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 8,
        capacity: PAGE_CAPACITY,
    }];
    let count_pages = [
        program(PAGES, page_def.clone(), DeviceEvent::GlobalLoad),
        program(PAGES, page_def, DeviceEvent::GlobalStore),
    ];
    // One ring per SM in GPU memory, each large enough for its share of one run.
    let per_sm_records =
        (3 * u64::from(N) / u64::from(info.sm_count) * 2).next_power_of_two() as u32;
    let ring_geometry =
        Geometry::new(MapKind::RingBuf, 0, 16, per_sm_records, 0, info.sm_count).unwrap();
    let ring_dev = DeviceMapBuffer::on_device(&gpu, ring_geometry).expect("the trace rings");
    let ring_def = vec![MapDef {
        name: "trace".into(),
        kind: MapKind::RingBuf,
        key_size: 0,
        value_size: 16,
        capacity: per_sm_records,
    }];
    let trace = [
        program(TRACE, ring_def.clone(), DeviceEvent::GlobalLoad),
        program(TRACE, ring_def, DeviceEvent::GlobalStore),
    ];
    let instrument = |probes: &[Verified; 2], maps: &[DeviceMap]| -> String {
        let probes: Vec<DeviceProbe<'_>> = probes
            .iter()
            .map(|p| DeviceProbe { program: p, kernels: Kernels::All, maps })
            .collect();
        inject(&ptx, &probes).expect("instruments").ptx
    };
    let (array_b, sm_b) = ([array_dev.binding()], [per_sm_dev.binding()]);
    let pages_b = [pages_dev.binding()];
    let ring_b = [ring_dev.binding()];
    let variants: Vec<(&str, String, f64)> = vec![
        ("uninstrumented", ptx.clone(), f64::NAN),
        ("(a) empty probe", instrument(&empty, &[]), 1.05),
        ("(b) count, one Array slot", instrument(&count_array, &array_b), 2.0),
        ("(c) count, per-SM map", instrument(&count_sm, &sm_b), 1.3),
        ("(d) count, HashMap by page", instrument(&count_pages, &pages_b), 3.0),
        ("(e) 16-byte records, RingBuf", instrument(&trace, &ring_b), 8.0),
    ];
    let ring_variant = variants.len() - 1;

    let x = gpu.alloc(N as usize * 4).expect("x");
    let y = gpu.alloc(N as usize * 4).expect("y");
    let modules: Vec<_> = variants
        .iter()
        .map(|(name, text, _)| gpu.load_ptx(text).unwrap_or_else(|e| panic!("{name}: {e}")))
        .collect();
    let kernels: Vec<_> = modules.iter().map(|m| m.kernel("saxpy").expect("saxpy")).collect();
    let grid = (info.sm_count * 8, 1, 1);
    let args = [Arg::U32(N), Arg::F32(1.5), Arg::Ptr(&x), Arg::Ptr(&y)];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
    for (i, k) in kernels.iter().enumerate() {
        if i == ring_variant {
            ring_dev.clear().expect("empty rings");
        }
        gpu.launch(k, grid, (256, 1, 1), &args).expect("warm-up launch");
    }
    for _ in 0..RUNS {
        for (i, k) in kernels.iter().enumerate() {
            if i == ring_variant {
                ring_dev.clear().expect("empty rings");
            }
            let start = Instant::now();
            gpu.launch(k, grid, (256, 1, 1), &args).expect("launch");
            times[i].push(start.elapsed());
        }
    }
    array_dev.download().unwrap();
    per_sm_dev.download().unwrap();
    pages_dev.download().unwrap();
    let base = median(times[0].clone());
    println!("\nsaxpy over 2^28 floats, {} blocks x 256 threads, {RUNS} runs each:", grid.0);
    println!(
        "{:<32} {:>10} {:>8} {:>8} {:>6} {:>8}",
        "variant", "median", "ratio", "target", "regs", "local B"
    );
    let mut failed = Vec::new();
    for (i, (name, _, target)) in variants.iter().enumerate() {
        let t = median(times[i].clone());
        let ratio = t.as_secs_f64() / base.as_secs_f64();
        let (regs, local) = kernels[i].resources().unwrap_or((0, 0));
        let target_s = if target.is_nan() { "-".to_string() } else { format!("<={target}") };
        println!(
            "{name:<32} {:>8.3}ms {ratio:>7.2}x {target_s:>8} {regs:>6} {local:>8}",
            t.as_secs_f64() * 1e3
        );
        if !target.is_nan() && ratio > *target {
            failed.push(format!("{name}: {ratio:.2}x > {target}x"));
        }
    }

    // The counts are exact: 2 loads and 1 store per element, per run (warm-up included).
    let launches = (RUNS + 1) as u64;
    let value = |raw: &RawMap| -> u64 {
        let g = *raw.geometry();
        let (base, _) = raw.memory();
        (0..g.shards())
            // SAFETY: slot 0 of every shard is an 8-byte, 8-aligned value inside the memory.
            .map(|s| unsafe { base.as_ptr().add(g.slot_offset(s, 0)).cast::<u64>().read() })
            .sum()
    };
    assert_eq!(value(&array), 3 * u64::from(N) * launches, "Array count");
    assert_eq!(value(&per_sm), 3 * u64::from(N) * launches, "per-SM count");
    let by_page = egpu_maps::HashMap::<u64, u64>::from_raw(pages.clone()).expect("a hash map");
    let (entries, total) = by_page.iter().fold((0u64, 0u64), |(n, t), (_, v)| (n + 1, t + v));
    assert_eq!(total, 3 * u64::from(N) * launches, "HashMap count");
    assert_eq!(entries, 2 * u64::from(N) * 4 / 4096, "one entry per page of x and y");
    println!(
        "counts exact: {} accesses counted in each map; {entries} pages in the HashMap",
        value(&array)
    );

    // The last run's records: every access, none dropped, over the SMs' rings.
    let mut records = 0;
    let mut dropped = 0;
    for shard in 0..ring_geometry.shards() {
        records += ring_dev.counter(shard, egpu_maps::layout::shard::LEN_OR_HEAD).unwrap();
        dropped += ring_dev.counter(shard, egpu_maps::layout::shard::REFUSED).unwrap();
    }
    assert_eq!((records, dropped), (3 * u64::from(N), 0), "trace records of the last run");
    println!("trace: {records} records of 16 bytes in the last run, {dropped} dropped");

    load_times(&gpu, &ptx, &empty);
    fatbin_load_times(&gpu, &empty, info.compute_capability.0 * 10 + info.compute_capability.1);
    if !failed.is_empty() {
        println!("targets missed: {}", failed.join("; "));
    }
}

/// Instrument-and-load against load, for a ~40 KB module of renamed copies of saxpy.
fn load_times(gpu: &Gpu, saxpy: &str, empty: &[Verified; 2]) {
    let entry = saxpy.find(".visible .entry").expect("an entry");
    let (header, body) = saxpy.split_at(entry);
    let mut module = header.to_string();
    let mut i = 0;
    while module.len() < 40 * 1024 {
        module.push_str(&body.replace("saxpy", &format!("saxpy{i}")));
        i += 1;
    }
    let probes: Vec<DeviceProbe<'_>> = empty
        .iter()
        .map(|p| DeviceProbe { program: p, kernels: Kernels::All, maps: &[] })
        .collect();
    let mut plain = Vec::new();
    let mut instrumented = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        drop(gpu.load_ptx(&module).expect("loads"));
        plain.push(start.elapsed());
        let start = Instant::now();
        let text = inject(&module, &probes).expect("instruments").ptx;
        drop(gpu.load_ptx(&text).expect("loads instrumented"));
        instrumented.push(start.elapsed());
    }
    let (p, q) = (median(plain), median(instrumented));
    println!(
        "load of a {} KB module ({i} kernels), JIT cache off: {:.1} ms; instrument + load: {:.1} ms; ratio {:.2}x (target <=1.5x)",
        module.len() / 1024,
        p.as_secs_f64() * 1e3,
        q.as_secs_f64() * 1e3,
        q.as_secs_f64() / p.as_secs_f64()
    );
}

/// Instrument-and-load of the PTX in nvcc's fat binaries (compressed, as nvcc 13 makes them by
/// default) against loading each fat binary as it is, JIT cache off: what the preloaded library
/// costs a CUDA C program's module loads. nvcc (on PATH, or EGPU_NVCC) makes the fat binaries
/// from tests/kernels; without it, says so.
fn fatbin_load_times(gpu: &Gpu, empty: &[Verified; 2], arch: u32) {
    use egpu::device::fatbin::ptx_for;
    let nvcc = match egpu::device::toolchain::Nvcc::find() {
        Ok(nvcc) => nvcc,
        Err(e) => {
            println!("fat binary load: not measured, no nvcc: {e}");
            return;
        }
    };
    let kernels = egpu_test_support::workspace_path("tests/kernels");
    let mut fatbins = Vec::new();
    for name in ["saxpy", "atomics", "async_copy", "reduce", "vectors", "local_array"] {
        let cu = kernels.join(format!("{name}.cu"));
        match nvcc.compile_fatbin(&cu, &[&format!("-arch=sm_{arch}")]) {
            Ok(bytes) => fatbins.push(bytes),
            Err(e) => println!("fat binary load: {name}.cu: {e}"),
        }
    }
    let probes: Vec<DeviceProbe<'_>> = empty
        .iter()
        .map(|p| DeviceProbe { program: p, kernels: Kernels::All, maps: &[] })
        .collect();
    let (mut plain, mut jit, mut instrumented) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        let start = Instant::now();
        for fatbin in &fatbins {
            drop(gpu.load_image(fatbin).expect("the fat binary loads"));
        }
        plain.push(start.elapsed());
        let start = Instant::now();
        for fatbin in &fatbins {
            let ptx = ptx_for(fatbin, arch).expect("a fat binary").expect("with PTX");
            drop(gpu.load_ptx(&ptx).expect("its PTX loads"));
        }
        jit.push(start.elapsed());
        let start = Instant::now();
        for fatbin in &fatbins {
            let ptx = ptx_for(fatbin, arch).expect("a fat binary").expect("with PTX");
            let text = inject(&ptx, &probes).expect("instruments").ptx;
            drop(gpu.load_ptx(&text).expect("loads instrumented"));
        }
        instrumented.push(start.elapsed());
    }
    let (p, j, q) = (median(plain), median(jit), median(instrumented));
    let bytes: usize = fatbins.iter().map(Vec::len).sum();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "fat binary load ({} of nvcc's, {} KB, compressed), JIT cache off: as they are (their \
         cubins) {:.1} ms; their PTX taken and loaded (JIT) {:.1} ms; taken, instrumented and \
         loaded {:.1} ms; ratio to as they are {:.1}x, to the PTX's JIT {:.2}x",
        fatbins.len(),
        bytes / 1024,
        ms(p),
        ms(j),
        ms(q),
        q.as_secs_f64() / p.as_secs_f64(),
        q.as_secs_f64() / j.as_secs_f64()
    );
}
