//! `egpu mem` from Rust: a program that loads its own PTX through egpu measures its kernels in
//! process, with no preloaded library. It attaches the `counts`, `timing`, `pattern` and
//! `timeline` sets (`egpu::host::mem::MemSession`), loads saxpy (nvcc's PTX of
//! `tests/kernels/saxpy.cu`), runs it over 2^24 floats, reads the recording back and prints the
//! table `egpu mem run` prints. Then it checks the figures against what saxpy must do: bytes
//! read exactly 2 × 4 × n, written exactly 4 × n, every request coalesced (the fewest sectors),
//! a GPU time above 0, and the timeline's windows (one warp in 32 recording, each record
//! standing for 32) within 5% of the bytes counted, none dropped.
//!
//! ```text
//! cargo run --release -p egpu --example mem_report
//! ```
//!
//! Without a GPU it says why it skips and exits 0; with `EGPU_REQUIRE_GPU=1` a missing GPU
//! fails it.

use std::error::Error;
use std::process::ExitCode;

use egpu::device::cuda::{Arg, Gpu};
use egpu::device::instrument::Ran;
use egpu::host::mem::{MemSession, Set, table};

/// The kernel measured: `y[i] = a·x[i] + y[i]`, a grid-stride loop.
const SAXPY: &str = include_str!("../tests/ptx/saxpy.ptx");

fn run() -> Result<(), Box<dyn Error>> {
    // Prints why it skips without a GPU; panics under EGPU_REQUIRE_GPU=1.
    let Some(info) = egpu::device::testing::require_gpu() else {
        println!("mem_report: skipped, no GPU");
        return Ok(());
    };
    println!("mem_report on {info}");
    // ANCHOR: session
    let gpu = Gpu::open(info.ordinal)?;
    let mem = MemSession::new(&gpu, &[Set::Counts, Set::Timing, Set::Pattern, Set::Timeline])?;
    let module = mem.load_ptx(SAXPY)?;
    if let Some(why) = module.fallback() {
        return Err(format!("saxpy could not be instrumented: {why}").into());
    }

    let n: u32 = 1 << 24;
    let floats =
        |f: &dyn Fn(u32) -> f32| -> Vec<u8> { (0..n).flat_map(|i| f(i).to_le_bytes()).collect() };
    let (x, y) = (gpu.alloc(n as usize * 4)?, gpu.alloc(n as usize * 4)?);
    x.write(&floats(&|i| (i % 1000) as f32))?;
    y.write(&floats(&|i| (i % 10) as f32))?;
    // Eight blocks of 256 threads per SM, each thread striding over the array.
    let args = [Arg::U32(n), Arg::F32(2.0), Arg::Ptr(&x), Arg::Ptr(&y)];
    let ran = module.launch("saxpy", (info.sm_count * 8, 1, 1), (256, 1, 1), &args)?;
    if ran != Ran::Instrumented {
        return Err(format!("saxpy ran {ran:?}, not instrumented").into());
    }
    let mut out = vec![0u8; n as usize * 4];
    y.read(&mut out)?;
    // Small integers: every result is exact in f32.
    if out != floats(&|i| 2.0 * (i % 1000) as f32 + (i % 10) as f32) {
        return Err("the instrumented saxpy computed something else".into());
    }

    let recording = mem.recording()?;
    println!("{}", table::render(&recording));
    // ANCHOR_END: session
    let saxpy =
        recording.kernels.iter().find(|k| k.name == "saxpy").ok_or("no saxpy in the recording")?;
    let traffic = saxpy.traffic.ok_or("saxpy has no counts")?;
    let pattern = saxpy.pattern.ok_or("saxpy has no pattern")?;
    let n = u64::from(n);
    let summary = recording.header.timeline.as_ref().ok_or("no timeline")?;
    let windowed: u64 = recording.windows.iter().map(|w| w.bytes).sum();
    let counted = traffic.read() + traffic.written();
    let off = (windowed as f64 / counted as f64 - 1.0).abs();
    let checks = [
        ("bytes read = 2 × 4 × n", traffic.read() == 2 * 4 * n, traffic.read().to_string()),
        ("bytes written = 4 × n", traffic.written() == 4 * n, traffic.written().to_string()),
        (
            "coalescing 100%",
            pattern.minimum == pattern.sectors && pattern.requests > 0,
            format!("{} of {} sectors", pattern.minimum, pattern.sectors),
        ),
        ("GPU time > 0", saxpy.gpu_ns > 0, format!("{} ns", saxpy.gpu_ns)),
        ("launches timed = 1", saxpy.launches == 1 && saxpy.timed == 1, saxpy.timed.to_string()),
        (
            "timeline: records, none dropped",
            summary.records > 0 && summary.dropped == 0,
            format!("{} records, {} dropped", summary.records, summary.dropped),
        ),
        (
            "timeline: windows' bytes within 5% of those counted",
            off <= 0.05,
            format!("{windowed} against {counted} ({:.2}% off)", 100.0 * off),
        ),
    ];
    let mut failed = 0;
    for (check, ok, found) in &checks {
        println!("{} {check}: {found}", if *ok { "ok  " } else { "FAIL" });
        failed += usize::from(!ok);
    }
    if failed > 0 {
        return Err(format!("{failed} of {} checks failed", checks.len()).into());
    }
    println!("mem_report: {} of {} checks exact", checks.len(), checks.len());
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mem_report failed: {e}");
            ExitCode::FAILURE
        }
    }
}
