//! The far tier on the GPU, in process (`egpu::host::cxl::CxlSession`): a pointer chase (one
//! thread, each load's address the last load's value, over 64 MiB in a random cycle, so every
//! load waits for memory) timed by `%globaltimer` in the kernel, bare and with its buffer far at
//! Δ = 100, 200, 400 and 800 ns. A far load must take Δ longer than a near one, within 10%
//! (issue 24's validation): Δ is far latency less local latency, and the local latency is the
//! chase's with the probes and nothing far (what the probes cost every load, near or far, is
//! printed apart, and over the bare chase). A far request's wait counts from its probe's start
//! (`egpu_clock`, `egpu_delay_ns`), so the lookup's own time is part of Δ. It also prints
//! `%globaltimer`'s step, the SM clock measured against the rated one (waits count `%clock64`
//! cycles at the rated clock), what the lookup costs a load with the range table and with the
//! bitmap when nothing it asks is far, what the probes cost nvcc's grid-stride saxpy with
//! nothing far and with a far range elsewhere, and the bandwidth saxpy gets with all of its
//! memory far under a bandwidth cap per SM (`CxlSession::capped`, `Tier::with_bandwidth`).
//!
//! ```text
//! cargo run --release -p egpu --example cxl_chase
//! ```
//!
//! Without a GPU it says why it skips and exits 0; with `EGPU_REQUIRE_GPU=1` a missing GPU
//! fails it.

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use egpu::device::cuda::{Arg, DeviceBuffer, Gpu};
use egpu::device::instrument::Ran;
use egpu::host::cxl::{CxlSession, Lookup, Policy, Tier};
use egpu_test_support::Rng;

/// `chase(start, steps, out)`: `steps` dependent loads from `start`; `out[0]` the nanoseconds
/// they took by `%globaltimer`, `out[1]` where they ended (so the loads are not dead).
const CHASE: &str = include_str!("../tests/ptx/chase.ptx");

/// nvcc's grid-stride saxpy.
const SAXPY: &str = include_str!("../tests/ptx/saxpy.ptx");

const SLOTS: usize = 1 << 23;
const STEPS: u64 = 20_000;
const DELTAS: [u64; 4] = [100, 200, 400, 800];
const BITMAP: Lookup = Lookup::Bitmap { page_shift: 16 };

/// The 8-byte words of `out`.
fn words(out: &DeviceBuffer<'_>) -> Result<[u64; 2], Box<dyn Error>> {
    let mut bytes = [0u8; 16];
    out.read(&mut bytes)?;
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    Ok([word(0), word(1)])
}

/// The fewest nanoseconds per load of three chases, by `launch`.
fn per_load(
    launch: &dyn Fn() -> Result<(), Box<dyn Error>>,
    out: &DeviceBuffer<'_>,
) -> Result<f64, Box<dyn Error>> {
    let mut best = u64::MAX;
    for _ in 0..3 {
        launch()?;
        best = best.min(words(out)?[0]);
    }
    Ok(best as f64 / STEPS as f64)
}

fn run() -> Result<bool, Box<dyn Error>> {
    let Some(info) = egpu::device::testing::require_gpu() else {
        println!("cxl_chase: skipped, no GPU");
        return Ok(true);
    };
    println!("cxl_chase on {info}");
    let gpu = Gpu::open(info.ordinal)?;
    // A random cycle through the slots (Sattolo's algorithm): slot i holds slot next[i]'s address.
    let mut rng = Rng::from_env("cxl_chase", 0xc41);
    let mut next: Vec<usize> = (0..SLOTS).collect();
    for i in (1..SLOTS).rev() {
        next.swap(i, rng.below(i));
    }
    let chain = gpu.alloc(SLOTS * 8)?;
    let base = chain.device_ptr();
    let bytes: Vec<u8> = next.iter().flat_map(|&j| (base + 8 * j as u64).to_le_bytes()).collect();
    chain.write(&bytes)?;
    let out = gpu.alloc(16)?;
    let args = [Arg::U64(base), Arg::U64(STEPS), Arg::Ptr(&out)];

    let bare = gpu.load_ptx(CHASE)?;
    let ticks = bare.kernel("ticks")?;
    gpu.launch(&ticks, (1, 1, 1), (1, 1, 1), &[Arg::Ptr(&out)])?;
    let [step, changes] = words(&out)?;
    println!("%globaltimer: smallest step {step} ns ({changes} changes in 10^6 reads)");
    let rate = bare.kernel("rate")?;
    gpu.launch(&rate, (1, 1, 1), (1, 1, 1), &[Arg::Ptr(&out)])?;
    let [cycles, ns] = words(&out)?;
    // Waits count %clock64 cycles at the rated clock: a GPU clocked lower waits longer.
    println!(
        "SM clock: {:.0} MHz measured over 1 ms, {:.0} MHz rated",
        cycles as f64 * 1e3 / ns.max(1) as f64,
        f64::from(info.sm_clock_khz) / 1e3
    );
    let chase = bare.kernel("chase")?;
    let bare_ns = per_load(&|| Ok(gpu.launch(&chase, (1, 1, 1), (1, 1, 1), &args)?), &out)?;
    println!("bare: {bare_ns:.1} ns per load");

    let cxl = CxlSession::new(&gpu, &[])?;
    let module = cxl.load_ptx(CHASE)?;
    let launch = || -> Result<(), Box<dyn Error>> {
        match module.launch("chase", (1, 1, 1), (1, 1, 1), &args)? {
            Ran::Instrumented => Ok(()),
            Ran::Original => Err("the chase ran uninstrumented".into()),
        }
    };
    let far = Policy::Ranges(vec![(base, base + (SLOTS * 8) as u64)]);
    let elsewhere = Policy::Ranges(vec![(out.device_ptr(), out.device_ptr() + 16)]);
    let set = |policy: &Policy, lookup, delta| -> Result<(), Box<dyn Error>> {
        Ok(cxl.set(&Tier::resolve(policy, &[], lookup, delta)?)?)
    };
    set(&Policy::None, Lookup::Ranges, 0)?;
    let none = per_load(&launch, &out)?;
    println!("probes, nothing far: {none:.1} ns per load ({:+.1} ns)", none - bare_ns);
    // What each lookup costs a load that is not far (what near memory pays for the emulation).
    for (name, lookup) in [("range table", Lookup::Ranges), ("bitmap", BITMAP)] {
        set(&elsewhere, lookup, 800)?;
        let near = per_load(&launch, &out)?;
        println!(
            "  {name} looked up, the load not far: {near:.1} ns per load ({:+.1} ns)",
            near - bare_ns
        );
    }
    // The far path with no wait: what a wait of Δ hides, as long as it is shorter.
    set(&far, Lookup::Ranges, 0)?;
    let alone = per_load(&launch, &out)? - none;
    println!("  the far path alone (Δ 0, range table): {alone:.1} ns more per load than near");
    let mut within = 0;
    for delta in DELTAS {
        for (name, lookup) in [("ranges", Lookup::Ranges), ("bitmap", BITMAP)] {
            set(&far, lookup, delta)?;
            let far_ns = per_load(&launch, &out)?;
            // The wait: a far load against a near one under the same probes (Δ = far latency
            // less local latency, the local latency being what the probes leave a load).
            let added = far_ns - none;
            let off = (added - delta as f64) / delta as f64;
            let ok = off.abs() <= 0.10;
            println!(
                "  Δ {delta} ns ({name}): {added:.1} ns more per load than near ({:+.1}%) {}; \
                 {:.1} ns more than bare",
                off * 100.0,
                if ok { "ok" } else { "OFF" },
                far_ns - bare_ns
            );
            within += usize::from(ok && name == "ranges");
        }
    }
    println!("injected latency within 10%: {within}/{} settings", DELTAS.len());

    // Saxpy over 2^26 floats with nothing far: bare, then instrumented (the tables searched).
    let n: u32 = 1 << 26;
    let (x, y) = (gpu.alloc(n as usize * 4)?, gpu.alloc(n as usize * 4)?);
    let sargs = [Arg::U32(n), Arg::F32(2.0), Arg::Ptr(&x), Arg::Ptr(&y)];
    let grid = (info.sm_count * 8, 1, 1);
    let plain = gpu.load_ptx(SAXPY)?;
    let kernel = plain.kernel("saxpy")?;
    let probed = cxl.load_ptx(SAXPY)?;
    let time = |f: &dyn Fn() -> Result<(), Box<dyn Error>>| -> Result<f64, Box<dyn Error>> {
        f()?;
        let start = Instant::now();
        for _ in 0..20 {
            f()?;
        }
        Ok(start.elapsed().as_secs_f64() / 20.0)
    };
    for (what, policy) in [("nothing far", &Policy::None), ("a far range elsewhere", &elsewhere)] {
        set(policy, Lookup::Ranges, 800)?;
        let mut ratios = Vec::new();
        for _ in 0..5 {
            let b = time(&|| Ok(gpu.launch(&kernel, grid, (256, 1, 1), &sargs)?))?;
            let p = time(&|| {
                probed.launch("saxpy", grid, (256, 1, 1), &sargs)?;
                Ok(())
            })?;
            ratios.push(p / b);
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "saxpy 2^26 with the probes, {what}: {:.3}x (median of 5; target <= 1.1)",
            ratios[2]
        );
    }
    // The bandwidth cap: saxpy with all of its memory far at Δ = 0, each SM's far requests at
    // most `rate` bytes per second; the bytes it moves (reads of x and y, writes of y) over its
    // time, against the cap times the SMs.
    let capped = CxlSession::capped(&gpu, &[])?;
    let probed = capped.load_ptx(SAXPY)?;
    let bytes = 3.0 * 4.0 * f64::from(n);
    for rate in [128u64 << 20, 256 << 20, 1 << 30] {
        capped.set(&Tier::resolve(&Policy::All, &[], Lookup::Ranges, 0)?.with_bandwidth(rate))?;
        let t = time(&|| {
            probed.launch("saxpy", grid, (256, 1, 1), &sargs)?;
            Ok(())
        })?;
        let cap = rate as f64 * f64::from(info.sm_count);
        println!(
            "bandwidth cap {} MiB/s per SM ({:.1} GB/s in all): saxpy moved {:.2} GB/s ({:.2} of \
             the cap)",
            rate >> 20,
            cap / 1e9,
            bytes / t / 1e9,
            bytes / t / cap
        );
    }
    Ok(within == DELTAS.len())
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cxl_chase: {e}");
            ExitCode::FAILURE
        }
    }
}
