//! What interposing `cuLaunchKernel` costs (issue 7's benchmark), on the GPU machine: builds
//! `benches/launch_overhead.c` with the C compiler and runs it under the preloaded library
//! (`EGPU_PRELOAD`, else the one cargo built), which prints, from one process and interleaved
//! repeats, the cost per call of the driver's own `cuLaunchKernel`, of the interposed one with no
//! probe, and with a probe that updates a hash map keyed by kernel, with spreads and ratios.
//!
//! Without a GPU it says why and exits 0, or fails when `EGPU_REQUIRE_GPU=1`.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let Some(_gpu) = egpu::testing::require_gpu() else { return };
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let source = manifest.join("benches/launch_overhead.c");
    let library = support::preload_library();
    let dir = std::env::temp_dir().join(format!("egpu-launch-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let exe = dir.join("launch_overhead");
    let cc = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&source)
        .arg("-ldl")
        .output()
        .expect("running cc");
    assert!(cc.status.success(), "cc: {}", String::from_utf8_lossy(&cc.stderr));
    let run = Command::new(&exe).env("LD_PRELOAD", &library).output().expect("running the bench");
    print!("{}", String::from_utf8_lossy(&run.stdout));
    eprint!("{}", String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "the benchmark failed");
    let _ = std::fs::remove_dir_all(&dir);
}
