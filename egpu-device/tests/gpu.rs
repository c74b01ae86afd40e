//! Tests on a real GPU. Without one they print why they skip; with `EGPU_REQUIRE_GPU=1` (set on
//! the GPU machine) a missing GPU fails them.

use egpu_device::{GpuStatus, devices, gpu_status, testing::require_gpu};

#[test]
fn the_driver_describes_the_gpu() {
    let Some(gpu) = require_gpu() else { return };
    println!("found {gpu}");
    assert!(gpu.compute_capability >= (7, 0), "{gpu}: egpu targets Volta and later");
    assert!(gpu.sm_count > 0, "{gpu}");
    assert!(gpu.total_memory >= 1 << 30, "{gpu}");
    assert!(gpu.driver_cuda_version() >= (12, 0), "{gpu}");
    assert_eq!(
        gpu.sm_target(),
        format!("sm_{}{}", gpu.compute_capability.0, gpu.compute_capability.1)
    );
    let all = devices().expect("the driver answers twice");
    assert_eq!(all.first(), Some(&gpu));
    assert!(matches!(gpu_status(), GpuStatus::Found(found) if found == all));
}
