//! What interposing `cuLaunchKernel` costs (issue 7's benchmark), on the GPU machine: builds
//! two C programs with the C compiler and runs them under the preloaded library (`EGPU_PRELOAD`,
//! else the one cargo built). `benches/hook_alone.c` first: the interposed function alone, with
//! a stub (`benches/stub_launch.c`) behind it, timed right after a driver launch and again warm,
//! probes paused and running, for whoever looks for where the time goes. Then
//! `benches/launch_overhead.c`, the benchmark itself, which prints, from one process and
//! interleaved repeats, the cost per call of the driver's own `cuLaunchKernel`, of the
//! interposed one with no probe, and with a probe that updates a hash map keyed by kernel, with
//! spreads and ratios.
//!
//! Without a GPU it says why and exits 0, or fails when `EGPU_REQUIRE_GPU=1`.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::process::Command;

fn main() {
    let Some(_gpu) = egpu::testing::require_gpu() else { return };
    let benches = egpu_test_support::workspace_path("egpu-preload/benches");
    let library = support::preload_library();
    let dir = std::env::temp_dir().join(format!("egpu-launch-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let cc = |out: &std::path::Path, source: &str, extra: &[&str]| {
        let built = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(out)
            .arg(benches.join(source))
            .args(extra)
            .output()
            .expect("running cc");
        assert!(built.status.success(), "cc {source}: {}", String::from_utf8_lossy(&built.stderr));
    };
    let stub = dir.join("libstub_launch.so");
    cc(&stub, "stub_launch.c", &["-shared", "-fPIC"]);
    let alone = dir.join("hook_alone");
    cc(&alone, "hook_alone.c", &["-ldl"]);
    let exe = dir.join("launch_overhead");
    cc(&exe, "launch_overhead.c", &["-ldl", "-lm"]);
    let mut hook_alone = Command::new(&alone);
    hook_alone.arg(&stub);
    for mut run in [hook_alone, Command::new(&exe)] {
        let run = run.env("LD_PRELOAD", &library).output().expect("running the bench");
        print!("{}", String::from_utf8_lossy(&run.stdout));
        eprint!("{}", String::from_utf8_lossy(&run.stderr));
        assert!(run.status.success(), "the benchmark failed");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
