//! A cudarc program observed from the inside: saxpy compiled by NVRTC (or, where NVRTC's
//! library is not on the loader path, the PTX nvcc made of the same source,
//! `tests/ptx/saxpy.ptx`), loaded and launched through cudarc's safe API, with a Rust probe on
//! every global load and store counting bytes per kernel (`#[egpu::probe]`), its maps in cudarc
//! slices, and then `egpu mem`'s `counts`, `timing` and `pattern` sets on the same program
//! (`MemSession::load_cudarc`). It prints the maps, the report, the results of the bare and
//! the instrumented kernels compared, the overhead, and a table of checks last.
//!
//! ```text
//! cargo run --release -p egpu --features cudarc-interop --example cudarc_probe
//! ```
//!
//! Without a GPU it says why it skips and exits 0; with `EGPU_REQUIRE_GPU=1` a missing GPU
//! fails it. Any check that fails exits 1.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;

use egpu::device::cuda::Gpu;
use egpu::device::cudarc::driver::sys::CUevent_flags;
use egpu::device::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use egpu::device::cudarc_interop::{
    CudaContext, CudaMapBuffer, CudaSlice, CudaStream, LaunchConfig, ProbedCudaFunction, Ptx,
};
use egpu::device::instrument::{Instrumenter, Ran};
use egpu::ebpf::{MemAccessCtx, kernel_id};
use egpu::host::mem::{MemSession, Set, table};
use egpu::maps::HashMap;

/// Bytes read from global memory, per kernel (by its id), counted inside the kernels.
static LOADED: HashMap<u64, u64> = HashMap::with_capacity(64);
/// Bytes written to global memory, per kernel.
static STORED: HashMap<u64, u64> = HashMap::with_capacity(64);

// ANCHOR: probes
/// Runs before every global load a thread executes, with the bytes it reads.
#[egpu::probe(device::global_load)]
fn loaded(ctx: &MemAccessCtx) {
    LOADED.fetch_add(&ctx.kernel_id, ctx.size as u64);
}

/// Runs before every global store.
#[egpu::probe(device::global_store)]
fn stored(ctx: &MemAccessCtx) {
    STORED.fetch_add(&ctx.kernel_id, ctx.size as u64);
}
// ANCHOR_END: probes

/// The kernel, as CUDA C for NVRTC.
const SAXPY_CU: &str = r#"
extern "C" __global__ void saxpy(int n, float a, const float *__restrict__ x, float *y) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
"#;

/// The same kernel as nvcc compiled it (`tests/kernels/saxpy.cu`).
const SAXPY_PTX: &str = include_str!("../tests/ptx/saxpy.ptx");

/// Bare and instrumented launches timed, each.
const RUNS: usize = 5;

/// saxpy compiled by NVRTC for `arch` (`compute_90`), or the shipped PTX, and which it is.
fn saxpy_ptx(arch: &'static str) -> (Ptx, String) {
    // SAFETY: this `dlopen`s NVRTC's library (and closes it), which runs its initialisers.
    if !unsafe { egpu::device::cudarc::nvrtc::sys::is_culib_present() } {
        return (Ptx::from_src(SAXPY_PTX), "shipped PTX (no NVRTC library found)".into());
    }
    let options = CompileOptions { arch: Some(arch), ..CompileOptions::default() };
    match std::panic::catch_unwind(|| compile_ptx_with_opts(SAXPY_CU, options)) {
        Ok(Ok(ptx)) => (ptx, format!("compiled by NVRTC for {arch}")),
        Ok(Err(e)) => (Ptx::from_src(SAXPY_PTX), format!("shipped PTX (NVRTC failed: {e})")),
        Err(_) => (Ptx::from_src(SAXPY_PTX), "shipped PTX (NVRTC lacks a symbol)".into()),
    }
}

/// The inputs: `x[i] = i % 1000`, `y[i] = i % 10` (small integers: every result exact).
struct Inputs {
    n: u32,
    x: CudaSlice<f32>,
    y: Vec<f32>,
}

/// Launches saxpy once over fresh `y` and returns `y` and the kernel's time in milliseconds
/// (CUDA events around it), with which kernel ran.
fn saxpy(
    f: &ProbedCudaFunction<'_>,
    stream: &Arc<CudaStream>,
    inputs: &Inputs,
    blocks: u32,
) -> Result<(Vec<f32>, f32, Ran), Box<dyn Error>> {
    let mut y = stream.clone_htod(&inputs.y)?;
    let mut launch = f.launch_builder(stream);
    launch.arg(&inputs.n).arg(&2.0f32).arg(&inputs.x).arg(&mut y);
    launch.record_kernel_launch(CUevent_flags::CU_EVENT_DEFAULT);
    let config =
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: saxpy takes (int n, float a, const float *x, float *y), x and y of n floats.
    let events = unsafe { launch.launch(config)? };
    let ran = launch.ran();
    drop(launch);
    let ms = match events {
        Some((start, end)) => start.elapsed_ms(&end)?,
        None => 0.0,
    };
    Ok((stream.clone_dtoh(&y)?, ms, ran))
}

fn run() -> Result<bool, Box<dyn Error>> {
    // Prints why it skips without a GPU; panics under EGPU_REQUIRE_GPU=1.
    let Some(info) = egpu::device::testing::require_gpu() else {
        println!("cudarc_probe: skipped, no GPU");
        return Ok(true);
    };
    println!("cudarc_probe on {info}");
    let (major, minor) = info.compute_capability;
    let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());

    // ANCHOR: interop
    let ctx = CudaContext::new(usize::try_from(info.ordinal)?)?;
    let stream = ctx.default_stream();
    let gpu = Gpu::from_cudarc(&ctx)?; // egpu over cudarc's context
    let (loads, stores) = (loaded::probe(), stored::probe());
    let mut maps = Vec::new();
    let mut instrumenter = Instrumenter::new(&gpu);
    for probe in [&loads, &stores] {
        let mut bindings = Vec::new();
        for raw in probe.maps()? {
            let map = CudaMapBuffer::upload(&gpu, &stream, raw)?; // a CudaSlice<u8>
            bindings.push(map.binding());
            maps.push(map);
        }
        instrumenter.attach(probe.verified()?, &bindings, &["saxpy"])?;
    }
    let (ptx, source) = saxpy_ptx(arch);
    let module = instrumenter.load_cudarc(&ctx, &ptx)?; // both modules through load_module
    let saxpy_fn = module.function("saxpy")?;
    // ANCHOR_END: interop
    println!("saxpy: {source}");
    if let Some(why) = module.fallback() {
        return Err(format!("saxpy could not be instrumented: {why}").into());
    }
    if let Some(coverage) = module.coverage() {
        println!(
            "observed {} of {} global memory instructions",
            coverage.observed, coverage.memory_instructions
        );
    }

    let n: u32 = 1 << 24;
    let inputs = Inputs {
        n,
        x: stream.clone_htod(&(0..n).map(|i| (i % 1000) as f32).collect::<Vec<_>>())?,
        y: (0..n).map(|i| (i % 10) as f32).collect(),
    };
    let blocks = info.sm_count * 8;
    let (mut bare, mut probed) = (Vec::new(), Vec::new());
    let (mut bare_ms, mut probed_ms) = (f32::MAX, f32::MAX);
    for _ in 0..RUNS {
        instrumenter.pause();
        let (y, ms, ran) = saxpy(&saxpy_fn, &stream, &inputs, blocks)?;
        (bare, bare_ms) = (y, bare_ms.min(ms));
        instrumenter.resume();
        let (y, ms2, ran2) = saxpy(&saxpy_fn, &stream, &inputs, blocks)?;
        (probed, probed_ms) = (y, probed_ms.min(ms2));
        if (ran, ran2) != (Ran::Original, Ran::Instrumented) {
            return Err(format!("launches ran {ran:?} and {ran2:?}").into());
        }
    }
    for map in &maps {
        map.download()?; // synchronises, then the statics hold the device's counts
    }
    println!("\nthe probe's maps (bytes per kernel, {RUNS} instrumented launches):");
    for (name, map) in [("LOADED", &LOADED), ("STORED", &STORED)] {
        for (kernel, bytes) in map.iter() {
            let named = if kernel == kernel_id("saxpy") {
                "saxpy".into()
            } else {
                format!("{kernel:016x}")
            };
            println!("  {name:<7} {named:<8} {bytes:>12}");
        }
    }

    // `egpu mem`'s sets on the same program, in process.
    let mem = MemSession::new(&gpu, &[Set::Counts, Set::Timing, Set::Pattern])?;
    let measured = mem.load_cudarc(&ctx, &ptx)?;
    let (y, _, ran) = saxpy(&measured.function("saxpy")?, &stream, &inputs, blocks)?;
    let recording = mem.recording()?;
    println!("\n{}", table::render(&recording));
    let k = recording.kernels.iter().find(|k| k.name == "saxpy").ok_or("no saxpy recorded")?;
    let t = k.traffic.ok_or("saxpy has no counts")?;

    let runs = RUNS as u64;
    let n64 = u64::from(n);
    let id = kernel_id("saxpy");
    let (read, written) = (LOADED.get(&id).unwrap_or(0), STORED.get(&id).unwrap_or(0));
    let identical = bare == probed && y == bare;
    let ratio = f64::from(probed_ms) / f64::from(bare_ms);
    let checks = [
        ("probe: bytes read = runs × 2 × 4 × n", read == runs * 8 * n64, read.to_string()),
        ("probe: bytes written = runs × 4 × n", written == runs * 4 * n64, written.to_string()),
        ("egpu mem: bytes read = 2 × 4 × n", t.read() == 8 * n64, t.read().to_string()),
        ("egpu mem: bytes written = 4 × n", t.written() == 4 * n64, t.written().to_string()),
        (
            "egpu mem: 1 launch, instrumented",
            k.launches == 1 && ran == Ran::Instrumented,
            k.launches.to_string(),
        ),
        ("results identical", identical, (if identical { "yes" } else { "no" }).to_string()),
    ];
    println!("saxpy over {n} floats ({source}), bare {bare_ms:.3} ms, probed {probed_ms:.3} ms");
    println!("results identical: {}", if identical { "yes" } else { "no" });
    println!("overhead: {ratio:.2}x (best of {RUNS} each, CUDA events)");
    let mut failed = 0;
    for (check, ok, found) in &checks {
        println!("{} {check}: {found}", if *ok { "ok  " } else { "FAIL" });
        failed += usize::from(!ok);
    }
    println!("cudarc_probe: {} of {} checks exact", checks.len() - failed, checks.len());
    Ok(failed == 0)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cudarc_probe failed: {e}");
            ExitCode::FAILURE
        }
    }
}
