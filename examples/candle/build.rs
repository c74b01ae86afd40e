//! candle-kernels links its mixture-of-experts kernels against the CUDA runtime
//! (`-lcudart`); the runtime of the pinned PyPI wheels (`scripts/cuda-tools`) has only
//! `libcudart.so.13`, so a `libcudart.so` link to it is made here, in OUT_DIR, for the linker.
//! The folder comes from `NVCC` (`…/bin/nvcc`, its runtime in `…/lib`), as `build.sh` sets it.

use std::path::PathBuf;

fn main() {
    println!("cargo::rerun-if-env-changed=NVCC");
    let Some(nvcc) = std::env::var_os("NVCC").map(PathBuf::from) else {
        println!("cargo::warning=NVCC is not set: the linker must find libcudart.so itself");
        return;
    };
    let lib = nvcc.parent().and_then(|bin| bin.parent()).map(|top| top.join("lib"));
    let Some(runtime) = lib.map(|l| l.join("libcudart.so.13")).filter(|r| r.exists()) else {
        println!("cargo::warning=no libcudart.so.13 beside {}", nvcc.display());
        return;
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let link = out.join("libcudart.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&runtime, &link).expect("a link to libcudart.so.13 in OUT_DIR");
    println!("cargo::rustc-link-search=native={}", out.display());
}
