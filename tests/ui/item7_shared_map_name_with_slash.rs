//! A shared map's name is a file name under /dev/shm: one with a `/` does not compile.
use egpu::maps::{PerCpuArray, Shards};

static SHARED: PerCpuArray<u64> = PerCpuArray::shared("egpu/counts", 4, Shards::PER_CPU);

fn main() {
    let _ = SHARED.sum(0);
}
