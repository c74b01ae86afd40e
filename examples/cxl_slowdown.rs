//! The eGPU paper's CXL.mem figure, in process: how much slower kernels run with all, and with
//! half, of their memory in a far tier Δ = 0, 100, 200, 400 and 800 ns away
//! (`egpu::host::cxl::CxlSession`). Three memory-bound kernels (saxpy over 2^26 floats, a row
//! softmax and a row layer norm over 2^15 rows of 2048 floats) and a compute-bound one (a
//! 16×16-tiled 2048² matrix product), each timed over 10 launches bare, then under each tier.
//! "Half" is the first half of each of the kernel's buffers. Prints a table (the slowdown
//! against the bare kernel; Δ = 0 is what the probes cost with the lookup and no wait) and, with
//! a path argument, writes it as CSV there and draws it beside, as an SVG of the slowdown
//! against Δ (`table.csv`: `table.svg`).
//!
//! ```text
//! cargo run --release -p egpu --example cxl_slowdown [-- table.csv]
//! ```
//!
//! It compiles `examples/cxl_kernels.cu` with nvcc (`EGPU_NVCC`, `PATH`, or
//! `/usr/local/cuda/bin/nvcc`). Without a GPU it says why it skips and exits 0; with
//! `EGPU_REQUIRE_GPU=1` a missing GPU fails it.

use std::error::Error;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use egpu::device::cuda::{Arg, DeviceBuffer, Gpu};
use egpu::device::instrument::{ProbedModule, Ran};
use egpu::device::toolchain::Nvcc;
use egpu::host::cxl::{CxlSession, Lookup, Policy, Tier};

const KERNELS: &str = include_str!("cxl_kernels.cu");
const SAXPY: &str = include_str!("../tests/ptx/saxpy.ptx");
const DELTAS: [u64; 5] = [0, 100, 200, 400, 800];
const LAUNCHES: u32 = 10;

/// A kernel to time: its module's PTX, name, grid, block, buffers and scalar arguments.
struct Case<'b> {
    label: &'static str,
    ptx: &'b str,
    name: &'static str,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    args: Vec<Arg<'b>>,
    buffers: Vec<&'b DeviceBuffer<'b>>,
}

/// Seconds per launch of `launch`, the fewest of three runs of `LAUNCHES`.
fn time(launch: &dyn Fn() -> Result<(), Box<dyn Error>>) -> Result<f64, Box<dyn Error>> {
    launch()?;
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        for _ in 0..LAUNCHES {
            launch()?;
        }
        best = best.min(start.elapsed().as_secs_f64() / f64::from(LAUNCHES));
    }
    Ok(best)
}

fn nvcc() -> Nvcc {
    Nvcc::find().unwrap_or_else(|_| Nvcc::at("/usr/local/cuda/bin/nvcc"))
}

fn run() -> Result<(), Box<dyn Error>> {
    let Some(info) = egpu::device::testing::require_gpu() else {
        println!("cxl_slowdown: skipped, no GPU");
        return Ok(());
    };
    println!("cxl_slowdown on {info}");
    let dir = std::env::temp_dir().join(format!("egpu-cxl-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cu = dir.join("cxl_kernels.cu");
    std::fs::write(&cu, KERNELS)?;
    let kernels = nvcc().compile_ptx(&cu, "sm_90")?;
    let gpu = Gpu::open(info.ordinal)?;

    let (n, rows, cols, side) = (1u32 << 26, 1u32 << 15, 2048u32, 2048u32);
    let floats = |count: u32| gpu.alloc(count as usize * 4);
    let (x, y) = (floats(n)?, floats(n)?);
    let (rin, rout) = (floats(rows * cols)?, floats(rows * cols)?);
    let (a, b, c) = (floats(side * side)?, floats(side * side)?, floats(side * side)?);
    for buffer in [&x, &y, &rin, &a, &b] {
        let bytes: Vec<u8> =
            (0..buffer.len() / 4).flat_map(|i| ((i % 97) as f32 * 0.01).to_le_bytes()).collect();
        buffer.write(&bytes)?;
    }
    // The two row kernels: a block per row of `cols` floats, `rin` to `rout`.
    let row_kernel = |label, name| Case {
        label,
        ptx: &kernels,
        name,
        grid: (rows, 1, 1),
        block: (256, 1, 1),
        args: vec![Arg::Ptr(&rin), Arg::Ptr(&rout), Arg::U32(cols)],
        buffers: vec![&rin, &rout],
    };
    let cases = [
        Case {
            label: "saxpy",
            ptx: SAXPY,
            name: "saxpy",
            grid: (info.sm_count * 8, 1, 1),
            block: (256, 1, 1),
            args: vec![Arg::U32(n), Arg::F32(2.0), Arg::Ptr(&x), Arg::Ptr(&y)],
            buffers: vec![&x, &y],
        },
        row_kernel("softmax", "softmax_rows"),
        row_kernel("layernorm", "layernorm_rows"),
        Case {
            label: "matmul",
            ptx: &kernels,
            name: "matmul",
            grid: (side / 16, side / 16, 1),
            block: (16, 16, 1),
            args: vec![Arg::Ptr(&a), Arg::Ptr(&b), Arg::Ptr(&c), Arg::U32(side)],
            buffers: vec![&a, &b, &c],
        },
    ];

    let cxl = CxlSession::new(&gpu, &[])?;
    let mut table = String::from("kernel,far,delta_ns,ms,bare_ms,slowdown\n");
    let mut lines: Vec<Line> = Vec::new();
    println!("| kernel | far | {} |", DELTAS.map(|d| format!("Δ {d} ns")).join(" | "));
    println!("|---|---|{}", "---|".repeat(DELTAS.len()));
    for case in &cases {
        let plain = gpu.load_ptx(case.ptx)?;
        let kernel = plain.kernel(case.name)?;
        let bare = time(&|| Ok(gpu.launch(&kernel, case.grid, case.block, &case.args)?))?;
        let module: ProbedModule<'_, '_> = cxl.load_ptx(case.ptx)?;
        let probed = || -> Result<(), Box<dyn Error>> {
            match module.launch(case.name, case.grid, case.block, &case.args)? {
                Ran::Instrumented => Ok(()),
                Ran::Original => Err(format!("{} ran uninstrumented", case.name).into()),
            }
        };
        for (far, fraction) in [("all", 1u64), ("half", 2)] {
            let ranges: Vec<(u64, u64)> = case
                .buffers
                .iter()
                .map(|b| (b.device_ptr(), b.device_ptr() + b.len() as u64 / fraction))
                .collect();
            let mut row = format!("| {} | {far} |", case.label);
            let mut line = Line { kernel: case.label, far, slowdown: Vec::new() };
            for delta in DELTAS {
                let tier =
                    Tier::resolve(&Policy::Ranges(ranges.clone()), &[], Lookup::Ranges, delta)?;
                cxl.set(&tier)?;
                let t = time(&probed)?;
                write!(row, " {:.2}× |", t / bare)?;
                line.slowdown.push(t / bare);
                writeln!(
                    table,
                    "{},{far},{delta},{:.4},{:.4},{:.4}",
                    case.label,
                    t * 1e3,
                    bare * 1e3,
                    t / bare
                )?;
            }
            println!("{row}   (bare {:.3} ms)", bare * 1e3);
            lines.push(line);
        }
    }
    if let Some(path) = std::env::args().nth(1) {
        std::fs::write(&path, table)?;
        let svg = std::path::Path::new(&path).with_extension("svg");
        std::fs::write(&svg, plot(&lines, &info.to_string()))?;
        println!("written: {path}, {}", svg.display());
    }
    Ok(())
}

/// One kernel's slowdown at each of `DELTAS`, with all or half of its memory far.
struct Line {
    kernel: &'static str,
    far: &'static str,
    slowdown: Vec<f64>,
}

/// The slowdown against Δ, a line per kernel and tier (solid: all far; dashed: half), as SVG.
fn plot(lines: &[Line], device: &str) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 440.0, 70.0, 170.0, 40.0, 50.0);
    let most = lines.iter().flat_map(|l| l.slowdown.iter().copied()).fold(1.0, f64::max);
    let top_y = (most * 1.1).ceil().max(2.0);
    let last = *DELTAS.last().expect("deltas") as f64;
    let x = |d: u64| left + (w - left - right) * d as f64 / last;
    let y = |v: f64| top + (h - top - bottom) * (1.0 - (v - 1.0) / (top_y - 1.0));
    let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{left}\" y=\"22\" font-size=\"14\">Slowdown against \
         the far tier's Δ ({device})</text>\n"
    );
    for d in DELTAS {
        svg += &format!(
            "<line x1=\"{0}\" y1=\"{top}\" x2=\"{0}\" y2=\"{1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{0}\" y=\"{2}\" text-anchor=\"middle\">{d}</text>\n",
            x(d),
            h - bottom,
            h - bottom + 16.0
        );
    }
    let step = ((top_y - 1.0) / 6.0).ceil().max(1.0);
    let mut v = 1.0;
    while v <= top_y {
        svg += &format!(
            "<line x1=\"{left}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#ddd\"/>\n\
             <text x=\"{2}\" y=\"{3}\" text-anchor=\"end\">{v}×</text>\n",
            y(v),
            w - right,
            left - 6.0,
            y(v) + 4.0
        );
        v += step;
    }
    svg += &format!(
        "<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\">Δ = far − local latency (ns)</text>\n",
        (left + w - right) / 2.0,
        h - 12.0
    );
    let kernels: Vec<&str> = lines.iter().fold(Vec::new(), |mut k, l| {
        if !k.contains(&l.kernel) {
            k.push(l.kernel);
        }
        k
    });
    for (i, l) in lines.iter().enumerate() {
        let k = kernels.iter().position(|&k| k == l.kernel).unwrap_or(0);
        let colour = colours[k % colours.len()];
        let dash = if l.far == "all" { "" } else { " stroke-dasharray=\"6 4\"" };
        let points: Vec<String> =
            DELTAS.iter().zip(&l.slowdown).map(|(&d, &s)| format!("{},{}", x(d), y(s))).collect();
        svg += &format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/>\n",
            points.join(" ")
        );
        let ly = top + 18.0 * i as f64;
        svg += &format!(
            "<line x1=\"{0}\" y1=\"{ly}\" x2=\"{1}\" y2=\"{ly}\" stroke=\"{colour}\" \
             stroke-width=\"2\"{dash}/>\n<text x=\"{2}\" y=\"{3}\">{4}, {5} far</text>\n",
            w - right + 10.0,
            w - right + 34.0,
            w - right + 40.0,
            ly + 4.0,
            l.kernel,
            l.far
        );
    }
    svg + "</svg>\n"
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cxl_slowdown: {e}");
            ExitCode::FAILURE
        }
    }
}
