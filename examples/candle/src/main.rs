//! candle observed (issue 27): a small candle model (random weights from a fixed seed, nothing
//! downloaded) with egpu's device probes inside candle's own PTX kernels, counts checked
//! against the shapes, results compared bit for bit, the overhead printed.
//!
//! ```text
//! candle_observed                 in process: candle_kernels' PTX instrumented and launched on
//!                                 candle's tensors; candle's own ops, the same kernels
//!                                 uninstrumented and instrumented, side by side
//! candle_observed --plain [--steps N]
//!                                 candle alone (what `egpu run --probes PACK` observes): the
//!                                 bytes each kernel must move, the output's digest, steps/s
//! candle_observed --ptx DIR       no GPU needed: candle_kernels' modules instrumented with this
//!                                 program's probes, written to DIR and checked by ptxas
//! ```
//!
//! Without a GPU the first two say why they skip and exit 0 (1 under `EGPU_REQUIRE_GPU=1`); a
//! check that fails exits 1. See the book's chapter "Rust GPU programs", section candle.

mod model;
mod observed;

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use candle_core::{Device, Tensor};
use egpu::device::cudarc_interop::CudaMapBuffer;
use egpu::device::inject::{DeviceProbe, InjectOptions, Kernels, inject_with};
use egpu::device::instrument::Instrumenter;
use egpu::device::toolchain::Ptxas;
use egpu::device::translate::DeviceMap;
use egpu::ebpf::{KernelCtx, MemAccessCtx, kernel_id};
use egpu::maps::HashMap;

use model::{CandleOps, Expected, KERNELS, Model, Ops, SHAPE, bits, per_step};
use observed::{Loaded, MODULES, Observed};

type Fallible<T> = Result<T, Box<dyn Error>>;

/// The weights' seed.
const SEED: u64 = 27;
/// Timed rounds in process, and forward passes in each round of each arm.
const ROUNDS: usize = 5;
const STEPS_PER_ROUND: usize = 20;

/// Bytes read from global memory, per kernel (by its id), counted inside candle's kernels.
static LOADED: HashMap<u64, u64> = HashMap::with_capacity(64);
/// Bytes written to global memory, per kernel.
static STORED: HashMap<u64, u64> = HashMap::with_capacity(64);
/// Threads that entered the kernel.
static ENTERED: HashMap<u64, u64> = HashMap::with_capacity(64);

/// Every global load a thread of an instrumented kernel executes: its bytes.
#[egpu::probe(device::global_load)]
fn loaded(ctx: &MemAccessCtx) {
    LOADED.fetch_add(&ctx.kernel_id, ctx.size as u64);
}

/// Every global store.
#[egpu::probe(device::global_store)]
fn stored(ctx: &MemAccessCtx) {
    STORED.fetch_add(&ctx.kernel_id, ctx.size as u64);
}

/// Every thread, as it starts.
#[egpu::probe(device::kernel_entry)]
fn entered(ctx: &KernelCtx) {
    ENTERED.fetch_add(&ctx.kernel_id, 1);
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        None => in_process(),
        Some("--plain") => {
            let steps = match args.get(1).map(String::as_str) {
                None => Ok(100),
                Some("--steps") => args.get(2).and_then(|n| n.parse().ok()).ok_or("--steps N"),
                Some(_) => Err("--plain [--steps N]"),
            };
            match steps {
                Ok(steps) => plain(steps),
                Err(usage) => {
                    eprintln!("usage: candle_observed {usage}");
                    return ExitCode::from(2);
                }
            }
        }
        Some("--ptx") if args.len() == 2 => ptx_only(&args[1]),
        Some(_) => {
            eprintln!("usage: candle_observed [--plain [--steps N] | --ptx DIR]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("candle_observed failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The model's shapes, in a line.
fn describe() -> String {
    let s = SHAPE;
    format!(
        "{} rows, width {}, hidden {}, {} classes, {} layers (seed {SEED})",
        s.rows, s.width, s.hidden, s.classes, s.layers
    )
}

/// What candle_kernels' module `name` is: PTX, its version and target, its kernels.
fn ptx_summary(name: &str, ptx: &str) -> String {
    let field = |key: &str| {
        ptx.lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_owned()))
            .unwrap_or_else(|| "?".into())
    };
    let kernels = ptx.lines().filter(|l| l.contains(".entry ")).count();
    format!(
        "candle_kernels {name}: PTX {}, target {}, {kernels} kernels, {} bytes",
        field(".version"),
        field(".target"),
        ptx.len()
    )
}

/// The GPU, or `None` after saying why there is none (fails under `EGPU_REQUIRE_GPU=1`).
fn gpu_or_skip(mode: &str) -> Option<egpu::device::GpuInfo> {
    let info = egpu::device::testing::require_gpu();
    if info.is_none() {
        println!("candle_observed {mode}: skipped, no GPU");
    }
    info
}

/// candle alone, as `egpu run` observes it: one forward pass to warm up, then `steps` timed.
fn plain(steps: u64) -> Fallible<bool> {
    let Some(info) = gpu_or_skip("--plain") else { return Ok(true) };
    let device = Device::new_cuda(usize::try_from(info.ordinal)?)?;
    let (model, x) = Model::random(&SHAPE, SEED, &device)?;
    println!("candle_observed --plain on {info}: {}; 1 + {steps} forward passes", describe());
    let mut out = model.forward(&CandleOps, &x)?;
    device.synchronize()?;
    let start = Instant::now();
    for _ in 0..steps {
        out = model.forward(&CandleOps, &x)?;
    }
    device.synchronize()?;
    let secs = start.elapsed().as_secs_f64();
    for e in per_step(&SHAPE) {
        let e = e.times(steps + 1);
        println!(
            "expect {} id {} launches {} threads {} loaded {} stored {}",
            e.kernel,
            kernel_id(e.kernel),
            e.launches,
            e.threads,
            e.loaded,
            e.stored
        );
    }
    let (_, digest) = bits(&out)?;
    println!("output digest: {digest:016x}");
    println!("steps/s: {:.1} ({steps} forward passes in {:.3} s)", steps as f64 / secs, secs);
    Ok(true)
}

/// Runs `steps` forward passes with `ops` and waits for them: the last output and the seconds.
fn timed(
    model: &Model,
    ops: &dyn Ops,
    x: &Tensor,
    device: &Device,
    steps: usize,
) -> Fallible<(Tensor, f64)> {
    device.synchronize()?;
    let start = Instant::now();
    let mut out = model.forward(ops, x)?;
    for _ in 1..steps {
        out = model.forward(ops, x)?;
    }
    device.synchronize()?;
    Ok((out, start.elapsed().as_secs_f64()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// In process: candle's kernels instrumented and launched by this program on candle's tensors.
fn in_process() -> Fallible<bool> {
    let Some(info) = gpu_or_skip("in process") else { return Ok(true) };
    println!("candle_observed in process on {info}: {}", describe());
    // ANCHOR: inprocess
    let device = Device::new_cuda(usize::try_from(info.ordinal)?)?;
    let stream = device.as_cuda_device()?.cuda_stream();
    let context = stream.context().clone();
    // egpu over candle's own CUDA context: candle and egpu share one cudarc.
    let gpu = egpu::device::cuda::Gpu::from_cudarc(&context)?;

    let probes = [loaded::probe(), stored::probe(), entered::probe()];
    let mut maps = Vec::new();
    let mut instrumenter = Instrumenter::new(&gpu);
    for probe in &probes {
        let mut bindings = Vec::new();
        for raw in probe.maps()? {
            let map = CudaMapBuffer::upload(&gpu, &stream, raw)?;
            bindings.push(map.binding());
            maps.push(map);
        }
        instrumenter.attach(probe.verified()?, &bindings, &KERNELS)?;
    }
    // ANCHOR_END: inprocess
    for (name, module, _) in MODULES {
        println!("{}", ptx_summary(name, module.ptx()));
    }
    let loaded = Loaded::load(&instrumenter, &context)?;
    for (name, module) in &loaded.modules {
        if let Some(c) = module.coverage() {
            println!(
                "  {name}: observed {} of {} global memory instructions (the probes in {} of them)",
                c.observed,
                c.memory_instructions,
                module.injection().map_or(0, |i| i.sites.len())
            );
        }
    }
    let observed = Observed::new(&loaded)?;
    let (model, x) = Model::random(&SHAPE, SEED, &device)?;

    // The same forward pass three ways: candle's own ops, the kernels launched here
    // uninstrumented, and instrumented.
    let reference = bits(&model.forward(&CandleOps, &x)?)?;
    instrumenter.pause();
    let bare = bits(&model.forward(&observed, &x)?)?;
    instrumenter.resume();
    let probed = bits(&model.forward(&observed, &x)?)?;
    let mut identical = reference == bare && bare == probed;
    let mut probed_steps = 1u64;

    // Side by side: each round runs each arm, in a rotated order.
    let (mut candle_sps, mut bare_sps, mut probed_sps) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for arm in (0..3).map(|i| (i + round) % 3) {
            let (out, secs) = match arm {
                0 => timed(&model, &CandleOps, &x, &device, STEPS_PER_ROUND)?,
                1 => {
                    instrumenter.pause();
                    timed(&model, &observed, &x, &device, STEPS_PER_ROUND)?
                }
                _ => {
                    instrumenter.resume();
                    probed_steps += STEPS_PER_ROUND as u64;
                    timed(&model, &observed, &x, &device, STEPS_PER_ROUND)?
                }
            };
            identical &= bits(&out)? == reference;
            let sps = STEPS_PER_ROUND as f64 / secs;
            [&mut candle_sps, &mut bare_sps, &mut probed_sps][arm].push(sps);
        }
    }
    instrumenter.resume();
    for map in &maps {
        map.download()?; // synchronises; then the statics hold the device's counts
    }

    println!(
        "\nper kernel, over the {probed_steps} instrumented forward passes (observed = expected):"
    );
    println!(
        "  {:<14} {:>9} {:>12} {:>14} {:>14}",
        "kernel", "launches", "threads", "bytes read", "bytes written"
    );
    let mut checks: Vec<(String, bool)> = Vec::new();
    let bare_steps = 1 + (ROUNDS * STEPS_PER_ROUND) as u64;
    for e in per_step(&SHAPE) {
        let want = e.times(probed_steps);
        let id = kernel_id(e.kernel);
        let got = Expected {
            kernel: e.kernel,
            launches: observed.launches.instrumented(e.kernel),
            threads: ENTERED.get(&id).unwrap_or(0),
            loaded: LOADED.get(&id).unwrap_or(0),
            stored: STORED.get(&id).unwrap_or(0),
        };
        println!(
            "  {:<14} {:>9} {:>12} {:>14} {:>14}  {}",
            e.kernel,
            got.launches,
            got.threads,
            got.loaded,
            got.stored,
            if got == want { "exact" } else { "DIFFERS" }
        );
        if got != want {
            println!(
                "  {:<14} {:>9} {:>12} {:>14} {:>14}  expected",
                "", want.launches, want.threads, want.loaded, want.stored
            );
        }
        checks.push((
            format!("{}: launches, threads, bytes read and written", e.kernel),
            got == want,
        ));
        let originals = observed.launches.original(e.kernel);
        checks.push((
            format!("{}: {originals} uninstrumented launches while paused", e.kernel),
            originals == e.launches * bare_steps,
        ));
    }
    let unexpected: Vec<u64> = LOADED
        .iter()
        .map(|(k, _)| k)
        .filter(|k| !KERNELS.iter().any(|n| kernel_id(n) == *k))
        .collect();
    checks.push((
        format!("no other kernel counted ({} found)", unexpected.len()),
        unexpected.is_empty(),
    ));
    checks.push(("results identical (candle, bare, instrumented)".into(), identical));

    let (c, b, p) = (median(candle_sps), median(bare_sps), median(probed_sps));
    println!("\noutput digest: {:016x}", reference.1);
    println!(
        "steps/s (median of {ROUNDS} rounds of {STEPS_PER_ROUND}): candle {c:.1}, bare {b:.1}, instrumented {p:.1}"
    );
    println!("results identical: {}", if identical { "yes" } else { "no" });
    println!(
        "overhead: {:.2}x (instrumented against bare steps/s; bare against candle's own {:.2}x)",
        b / p,
        c / b
    );
    let failed = checks.iter().filter(|(_, ok)| !ok).count();
    for (check, ok) in &checks {
        println!("{} {check}", if *ok { "ok  " } else { "FAIL" });
    }
    println!(
        "candle_observed in process: {} of {} checks exact",
        checks.len() - failed,
        checks.len()
    );
    Ok(failed == 0)
}

/// No GPU: candle_kernels' modules instrumented with the in-process probes (their maps at a
/// made-up device address), written to `dir`, and checked by ptxas for their target where it is
/// found.
fn ptx_only(dir: &str) -> Fallible<bool> {
    std::fs::create_dir_all(dir)?;
    let probes = [loaded::probe(), stored::probe(), entered::probe()];
    let mut bound = Vec::new();
    for (n, probe) in probes.iter().enumerate() {
        let maps: Vec<DeviceMap> = probe
            .maps()?
            .iter()
            .map(|raw| DeviceMap {
                addr: 0x7f00_0000_0000 + 0x100_0000 * n as u64,
                geometry: *raw.geometry(),
                live: false,
                spread: 0,
                drained: false,
            })
            .collect();
        bound.push((probe.verified()?, maps));
    }
    let device_probes: Vec<DeviceProbe<'_>> = bound
        .iter()
        .map(|(program, maps)| DeviceProbe { program, kernels: Kernels::Named(&KERNELS), maps })
        .collect();
    let ptxas = match Ptxas::find() {
        Ok(p) => Some(p),
        Err(e) => {
            println!("ptxas not found ({e}): the PTX is written, not checked");
            None
        }
    };
    let mut ok = true;
    for (name, module, kernels) in MODULES {
        let ptx = module.ptx();
        println!("{}", ptx_summary(name, ptx));
        let injection = inject_with(ptx, &device_probes, &InjectOptions::default())?;
        std::fs::write(format!("{dir}/{name}.ptx"), ptx)?;
        std::fs::write(format!("{dir}/{name}.probed.ptx"), &injection.ptx)?;
        let sites =
            injection.sites.iter().filter(|s| kernels.contains(&s.function.as_str())).count();
        println!(
            "  instrumented: observed {} of {} global memory instructions; {sites} probe sites in {}",
            injection.observed,
            injection.memory_instructions,
            kernels.join(", ")
        );
        if sites == 0 {
            println!("  FAIL: no probe in {}", kernels.join(", "));
            ok = false;
        }
        let Some(ptxas) = &ptxas else { continue };
        // The module's own target (`sm_90a`: cudaforge adds the `a` to compute capability 90).
        let arch = ptx
            .lines()
            .find_map(|l| l.trim().strip_prefix(".target"))
            .and_then(|t| t.split(',').next())
            .map_or("sm_90", str::trim);
        let before = ptxas.check(ptx, arch)?;
        match ptxas.check(&injection.ptx, arch) {
            Ok(after) => {
                for k in kernels {
                    let regs = |r: &egpu::device::toolchain::PtxasReport| {
                        r.function(k)
                            .and_then(|f| f.registers)
                            .map_or("?".into(), |n| n.to_string())
                    };
                    println!(
                        "  ptxas {arch} accepts {k}: {} registers, instrumented {}",
                        regs(&before),
                        regs(&after)
                    );
                }
            }
            Err(e) => {
                println!("  FAIL: ptxas refuses the instrumented {name} module: {e}");
                ok = false;
            }
        }
    }
    println!("candle_observed --ptx: {}", if ok { "ok" } else { "FAILED" });
    Ok(ok)
}
