//! Helpers for tests that need a GPU, or NVIDIA's compiler tools.
//!
//! GPU tests must never pass silently on a machine without a GPU. Start every GPU test with
//! [`require_gpu`]:
//!
//! ```no_run
//! // In a test file: `#[test]` on this function.
//! fn runs_on_the_gpu() {
//!     let Some(gpu) = egpu_device::testing::require_gpu() else { return };
//!     // ... the test proper, on `gpu` ...
//! #   let _ = gpu;
//! }
//! # runs_on_the_gpu();
//! ```
//!
//! Without a GPU the test prints one line to stderr, `egpu: skipping GPU test: <reason>`, and
//! returns (it counts as passed, and `cargo test -- --nocapture` shows why). With
//! `EGPU_REQUIRE_GPU=1` in the environment, as on the GPU machine, a missing GPU fails the test
//! instead.
//!
//! Tests that run `ptxas` or `nvcc` start the same way, with [`require_ptxas`] and
//! [`require_nvcc`]: without the tool they print `egpu: skipping test that needs ptxas: <reason>`
//! and return; with `EGPU_REQUIRE_PTXAS=1`, which the test command (`scripts/test`) sets after
//! installing both tools, they fail instead.

use std::sync::OnceLock;

use crate::driver::{GpuInfo, GpuStatus, gpu_status};
pub use egpu_ptx::testing::{
    Decision, REQUIRE_PTXAS_ENV, cubin_with_ptx, disassemble, fatbin_with, require_nvcc,
    require_nvdisasm, require_ptxas,
};

/// The environment variable that turns a skipped GPU test into a failure when set to `1`.
pub const REQUIRE_GPU_ENV: &str = "EGPU_REQUIRE_GPU";

/// Returns the first GPU, or `None` after printing why a GPU test is skipped.
///
/// The driver is probed once per process; later calls reuse the answer.
///
/// Intended use, at the top of every test that needs a GPU:
///
/// ```no_run
/// let Some(gpu) = egpu_device::testing::require_gpu() else { return };
/// # let _ = gpu;
/// ```
///
/// # Panics
///
/// When no GPU is found and the environment variable `EGPU_REQUIRE_GPU` is `1`. The message names
/// the reason no GPU was found.
#[track_caller]
pub fn require_gpu() -> Option<GpuInfo> {
    static STATUS: OnceLock<GpuStatus> = OnceLock::new();
    let status = STATUS.get_or_init(gpu_status).clone();
    let required = std::env::var(REQUIRE_GPU_ENV).ok();
    decide(status, required.as_deref()).resolve()
}

/// Decides from the GPU status and the value of `EGPU_REQUIRE_GPU` (if set).
fn decide(status: GpuStatus, require_gpu_env: Option<&str>) -> Decision<GpuInfo> {
    let reason = match status {
        GpuStatus::Found(gpus) => match gpus.into_iter().next() {
            Some(gpu) => return Decision::Run(gpu),
            None => "the CUDA driver reports no devices".to_owned(),
        },
        GpuStatus::NotFound { reason } => reason,
    };
    if require_gpu_env == Some("1") {
        Decision::Fail(format!(
            "egpu: no GPU found, and {REQUIRE_GPU_ENV}=1 is set so GPU tests must not be \
             skipped: {reason}"
        ))
    } else {
        Decision::Skip(format!("egpu: skipping GPU test: {reason}"))
    }
}

/// An H200 as the driver describes it (132 SMs, 6144-bit HBM3e at 3.131 GHz, CUDA 13.0), for
/// tests of what is made from a `GpuInfo` without a GPU.
pub fn h200() -> GpuInfo {
    GpuInfo {
        ordinal: 0,
        name: "NVIDIA H200".to_owned(),
        compute_capability: (9, 0),
        sm_count: 132,
        total_memory: 150_110_011_392,
        driver_version: 13000,
        sm_clock_khz: 1_980_000,
        memory_clock_khz: 3_131_000,
        memory_bus_bits: 6144,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> GpuInfo {
        h200()
    }

    fn not_found() -> GpuStatus {
        GpuStatus::NotFound { reason: "no driver here".to_owned() }
    }

    #[test]
    fn skips_with_the_reason_when_not_required() {
        for env in [None, Some(""), Some("0"), Some("yes")] {
            assert_eq!(
                decide(not_found(), env),
                Decision::Skip("egpu: skipping GPU test: no driver here".to_owned()),
                "EGPU_REQUIRE_GPU={env:?}"
            );
        }
    }

    #[test]
    fn fails_with_the_reason_when_required() {
        let Decision::Fail(message) = decide(not_found(), Some("1")) else {
            panic!("expected a failure")
        };
        assert!(message.contains("no driver here"), "{message}");
        assert!(message.contains("EGPU_REQUIRE_GPU=1 is set"), "{message}");
    }

    #[test]
    fn an_empty_device_list_is_not_a_gpu() {
        assert!(matches!(decide(GpuStatus::Found(vec![]), None), Decision::Skip(_)));
        assert!(matches!(decide(GpuStatus::Found(vec![]), Some("1")), Decision::Fail(_)));
    }

    #[test]
    fn runs_on_the_first_gpu_whatever_the_env() {
        let second = GpuInfo { ordinal: 1, ..gpu() };
        for env in [None, Some("0"), Some("1")] {
            assert_eq!(
                decide(GpuStatus::Found(vec![gpu(), second.clone()]), env),
                Decision::Run(gpu())
            );
        }
    }
}
