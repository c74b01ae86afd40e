//! egpu's main job, in one run: build probes, run them on the CPU, and inside a CUDA kernel.
//!
//! The probe watches kernel launches: it computes the number of threads a launch starts and
//! classifies the launch as small, large or huge. It is eBPF, written here in assembly, as
//! another tracer would hand it over (probes can as well be written in Rust, below); the same
//! bytecode could run inside kernels, translated to PTX. The verifier checks it first, and
//! refuses an unsafe variant of it with an error that shows why. A second probe, written in Rust with
//! `#[egpu::probe]`, counts launches and threads per kernel in hash maps, which this program
//! then reads in place.
//!
//! Then the device part: two more Rust probes, attached to every global load and store of a
//! `y = a·x + y` kernel, count loads per 4 KiB page (modulo 64) in an `Array` and stores per
//! streaming multiprocessor in a `PerCpuArray`. With a GPU, the kernel runs instrumented and this
//! program prints the maps the probes filled inside it (and checks them, and the kernel's
//! results, against an uninstrumented run). Without one it prints the PTX a probe becomes.
//!
//! Run it with `cargo run --release --example quickstart`. It needs no GPU: without one it says
//! so and exits 0.

use std::error::Error;
use std::process::ExitCode;

use egpu::device::GpuStatus;
use egpu::ebpf::MemAccessCtx;
use egpu::ebpf::verifier::verify;
use egpu::ebpf::{AttachPoint, HostEvent, LaunchCtx, Phase, Program, assemble};
use egpu::maps::{Array, HashMap, PerCpuArray, Shards};
use egpu::vm::{EngineChoice, Vm};

/// `r0 = grid.x*grid.y*grid.z * block.x*block.y*block.z`, with its class in the top byte:
/// 0 below 2^16 threads, 1 below 2^20, 2 from 2^20 up.
const PROBE: &str = "
    # r1 points at the LaunchCtx: grid at byte 40, block at byte 52.
    ldxw %r2, [%r1+40]
    ldxw %r3, [%r1+44]
    mul %r2, %r3
    ldxw %r3, [%r1+48]
    mul %r2, %r3
    ldxw %r3, [%r1+52]
    mul %r2, %r3
    ldxw %r3, [%r1+56]
    mul %r2, %r3
    ldxw %r3, [%r1+60]
    mul %r2, %r3
    mov %r0, %r2
    jlt %r2, 0x10000, done
    lddw %r4, 0x0100000000000000
    jlt %r2, 0x100000, tag
    lddw %r4, 0x0200000000000000
tag:
    or %r0, %r4
done:
    exit
";

/// Launches per kernel id, filled by the counting probe.
static LAUNCHES: HashMap<u64, u64> = HashMap::with_capacity(1024);
/// Threads started per kernel id.
static THREADS: HashMap<u64, u64> = HashMap::with_capacity(1024);

/// The counting probe, in Rust: `#[egpu::probe]` compiles it to eBPF (and keeps it callable as
/// native Rust). The map updates are atomic adds on the values in place.
#[egpu::probe(host::launch)]
fn count_launches(ctx: &LaunchCtx) {
    let blocks = ctx.grid[0] as u64 * ctx.grid[1] as u64 * ctx.grid[2] as u64;
    let threads = blocks * ctx.block[0] as u64 * ctx.block[1] as u64 * ctx.block[2] as u64;
    let id = ctx.kernel_id;
    LAUNCHES.fetch_add(&id, 1);
    THREADS.fetch_add(&id, threads);
}

/// Global loads per 4 KiB page, modulo 64, counted inside the kernel.
static PAGE_LOADS: Array<u64> = Array::with_len(64);
/// Global stores per streaming multiprocessor: one shard per SM (and one for the host).
static SM_STORES: PerCpuArray<u64> = PerCpuArray::with_shards(1, Shards::new(1, 256));

/// Runs before every global load of the instrumented kernel, in every thread.
#[egpu::probe(device::global_load)]
fn page_loads(ctx: &MemAccessCtx) {
    PAGE_LOADS.fetch_add(((ctx.addr >> 12) % 64) as u32, 1);
}

/// Runs before every global store.
#[egpu::probe(device::global_store)]
fn sm_stores(_ctx: &MemAccessCtx) {
    SM_STORES.fetch_add(0, 1);
}

/// The kernel the device probes observe (nvcc's PTX of tests/kernels/saxpy.cu).
const SAXPY: &str = include_str!("../tests/ptx/saxpy.ptx");

fn launch(name: &str, grid: [u32; 3], block: [u32; 3]) -> LaunchCtx {
    let kernel_id = egpu::maps::layout::hash_key(name.as_bytes());
    LaunchCtx { kernel_id, grid, block, ..LaunchCtx::default() }
}

fn run() -> Result<(), Box<dyn Error>> {
    println!("egpu quickstart\n");
    let program =
        Program::new(assemble(PROBE)?, vec![], AttachPoint::Host(HostEvent::Launch, Phase::Enter))?;
    println!(
        "probe for {} ({} instructions, context {} bytes):",
        program.attach_point(),
        program.insns().len(),
        program.attach_point().context_size()
    );
    print!("{}", program.disassemble());

    let verified = verify(&program)?;
    println!(
        "\nverified: it reads {} bytes of the context and uses {} bytes of stack ({} instructions \
         followed over all paths)",
        verified.context_bytes(),
        verified.stack_bytes()[0],
        verified.insns_processed()
    );
    // The same probe, but it stores the class into the launch context, which is read-only.
    let unsafe_text =
        PROBE.replace("    or %r0, %r4\n", "    or %r0, %r4\n    stxdw [%r1+32], %r0\n");
    let unsafe_probe = Program::new(assemble(&unsafe_text)?, vec![], program.attach_point())?;
    match verify(&unsafe_probe) {
        Err(e) => println!("a variant that writes the context is refused:\n  {e}"),
        Ok(_) => return Err("the verifier accepted a probe that writes its context".into()),
    }

    // Every engine takes the `Verified` program: it is verified once, whoever runs it.
    let mut jit = Vm::with_engine(&verified, EngineChoice::Jit)?;
    let mut interpreter = Vm::with_engine(&verified, EngineChoice::Interpreter)?;
    println!("\nran on the CPU, in {} and in {}:", jit.engine(), interpreter.engine());
    let launches = [
        ("vector_add", launch("vector_add", [64, 1, 1], [256, 1, 1])),
        ("gemm_tile", launch("gemm_tile", [128, 32, 1], [16, 16, 1])),
        ("conv3d", launch("conv3d", [32, 32, 16], [8, 8, 8])),
    ];
    println!("  {:<12} {:>22} {:>10}  class", "kernel", "grid x block", "threads");
    for (name, mut ctx) in launches {
        let r0 = jit.run_ctx(&mut ctx)?;
        let check = interpreter.run_ctx(&mut ctx)?;
        if r0 != check {
            return Err(format!("the engines disagree on {name}: {r0:#x} and {check:#x}").into());
        }
        let threads = r0 & 0x00ff_ffff_ffff_ffff;
        let expected: u64 = ctx.grid.iter().chain(&ctx.block).map(|&d| u64::from(d)).product();
        if threads != expected {
            return Err(
                format!("{name}: the probe counted {threads} threads, not {expected}").into()
            );
        }
        let class = ["small", "large", "huge"][(r0 >> 56) as usize];
        let shape = format!(
            "{}x{}x{} x {}x{}x{}",
            ctx.grid[0], ctx.grid[1], ctx.grid[2], ctx.block[0], ctx.block[1], ctx.block[2]
        );
        println!("  {name:<12} {shape:>22} {threads:>10}  {class}");
    }

    // The counting probe, written in Rust; its maps are the statics this program reads.
    let probe = count_launches::probe();
    let counter = probe.program()?;
    println!(
        "\n`count_launches`, a Rust function, compiled by #[egpu::probe] into {} eBPF instructions \
         (verified), with {} maps:",
        counter.insns().len(),
        counter.maps().len()
    );
    let mut counting = probe.vm()?;
    let rounds = [3, 2, 1];
    for ((_, ctx), times) in launches.iter().zip(rounds) {
        for _ in 0..times {
            counting.run_ctx(&mut ctx.clone())?;
        }
    }
    println!("  {:<12} {:>18} {:>8} {:>10}", "kernel", "kernel id", "launches", "threads");
    for ((name, ctx), times) in launches.iter().zip(rounds) {
        let count = LAUNCHES.get(&ctx.kernel_id).ok_or("a kernel is missing")?;
        let threads = THREADS.get(&ctx.kernel_id).ok_or("a kernel is missing")?;
        let per_launch: u64 = ctx.grid.iter().chain(&ctx.block).map(|&d| u64::from(d)).product();
        if count != times || threads != times * per_launch {
            return Err(format!("{name}: the maps hold {count} launches, {threads} threads").into());
        }
        println!("  {name:<12} {:>#18x} {count:>8} {threads:>10}", ctx.kernel_id);
    }
    // The same function, run natively (its twin), counts the same way.
    count_launches(&launches[0].1);
    if LAUNCHES.get(&launches[0].1.kernel_id) != Some(rounds[0] + 1) {
        return Err("the native twin did not count like the probe".into());
    }

    println!();
    match egpu::device::gpu_status() {
        GpuStatus::Found(gpus) => {
            for gpu in &gpus {
                println!("GPU found: {gpu}");
            }
            device_part(&gpus[0])?;
        }
        GpuStatus::NotFound { reason } => {
            println!("no GPU found ({reason}); everything above ran on the CPU");
            let probe = page_loads::probe();
            let verified = verify(probe.program()?)?;
            // With no GPU, the map has no device memory: the PTX gets a placeholder address,
            // easy to spot in it, where a GPU run has the address of the map's device copy.
            const PLACEHOLDER: u64 = 1_000_000_000_000;
            let maps: Vec<_> = probe
                .maps()?
                .iter()
                .map(|m| egpu::device::translate::DeviceMap {
                    addr: PLACEHOLDER,
                    geometry: *m.geometry(),
                    live: false,
                    spread: 0,
                    drained: false,
                })
                .collect();
            let ptx = egpu::device::translate::kernel_module_with(&verified, "page_loads", &maps)?;
            println!(
                "\n`page_loads`, a device probe, becomes this PTX (here in a kernel of its own; \
                 `egpu inject` puts it before every global load of a kernel). Its map, \
                 PAGE_LOADS, has no GPU memory on this machine, so the PTX holds a placeholder \
                 for the map's address, {PLACEHOLDER} (the map's words are at offsets from it); \
                 with a GPU, the address of the map's device copy is there:\n\n{ptx}"
            );
        }
    }
    Ok(())
}

/// Runs the saxpy kernel with both device probes attached, and prints what they counted.
fn device_part(info: &egpu::device::GpuInfo) -> Result<(), Box<dyn Error>> {
    use egpu::device::cuda::{Arg, Gpu};
    use egpu::device::instrument::{Instrumenter, Ran};
    use egpu::device::maps::DeviceMapBuffer;

    let gpu = Gpu::open(info.ordinal)?;
    let (loads, stores) = (page_loads::probe(), sm_stores::probe());
    let mut buffers = Vec::new();
    let mut instrumenter = Instrumenter::new(&gpu);
    for probe in [&loads, &stores] {
        let mut bindings = Vec::new();
        for raw in probe.maps()? {
            let buffer = DeviceMapBuffer::upload(&gpu, raw)?;
            bindings.push(buffer.binding());
            buffers.push(buffer);
        }
        // The probe was verified once, when it was built; the instrumenter translates it now.
        instrumenter.attach(probe.verified()?, &bindings, &["saxpy"])?;
    }
    let module = instrumenter.load(SAXPY)?;
    if let Some(why) = module.fallback() {
        return Err(format!("the kernel could not be instrumented: {why}").into());
    }
    let n: u32 = 1 << 22;
    let bytes =
        |f: &dyn Fn(u32) -> f32| -> Vec<u8> { (0..n).flat_map(|i| f(i).to_le_bytes()).collect() };
    let x = gpu.alloc(n as usize * 4)?;
    let y = gpu.alloc(n as usize * 4)?;
    let mut results = Vec::new();
    for instrumented in [false, true] {
        x.write(&bytes(&|i| i as f32))?;
        y.write(&bytes(&|i| (i % 10) as f32))?;
        if instrumented {
            instrumenter.resume()
        } else {
            instrumenter.pause()
        }
        let args = [Arg::U32(n), Arg::F32(2.0), Arg::Ptr(&x), Arg::Ptr(&y)];
        let ran = module.launch("saxpy", (info.sm_count * 4, 1, 1), (256, 1, 1), &args)?;
        if (ran == Ran::Instrumented) != instrumented {
            return Err(format!("launch {} ran {ran:?}", results.len()).into());
        }
        let mut out = vec![0u8; n as usize * 4];
        y.read(&mut out)?;
        results.push(out);
    }
    if results[0] != results[1] {
        return Err("the instrumented kernel computed something else".into());
    }
    for buffer in &buffers {
        buffer.download()?;
    }
    let pages = PAGE_LOADS.to_vec();
    let total: u64 = pages.iter().sum();
    let stores = SM_STORES.get(0)?;
    let busy: Vec<(usize, u64)> =
        stores.sm.iter().copied().enumerate().filter(|&(_, c)| c > 0).collect();
    println!(
        "\nsaxpy over {n} floats, every global load and store probed inside the kernel \
         (results identical to the uninstrumented run):"
    );
    println!("  loads per 4 KiB page, modulo 64 (first 8 buckets of {}):", pages.len());
    for (bucket, count) in pages.iter().enumerate().take(8) {
        println!("    page % 64 = {bucket:<2} {count:>9}");
    }
    println!("  {total} loads in all; stores on {} SMs, {} in all", busy.len(), stores.sum());
    if total != 2 * u64::from(n) || stores.sum() != u64::from(n) {
        return Err(format!("expected {} loads and {n} stores", 2 * n).into());
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart failed: {e}");
            ExitCode::FAILURE
        }
    }
}
