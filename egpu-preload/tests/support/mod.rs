//! Finding the preloaded library, shared by the tests and the benchmark.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The preloaded library: `EGPU_PRELOAD` when set (the GPU bundle sets it), else the one in this
/// executable's `target/<profile>/`, which cargo builds (or finds fresh) first: `cargo test`
/// does not build a `cdylib` that nothing links.
pub(crate) fn preload_library() -> PathBuf {
    if let Some(path) = std::env::var_os("EGPU_PRELOAD") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the executable's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<exe>");
    let target_dir = profile_dir.parent().expect("target/");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "-p", "egpu-preload"]).env("CARGO_TARGET_DIR", target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let out = build.output().expect("running cargo");
    assert!(
        out.status.success(),
        "building egpu-preload:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = profile_dir.join("libegpu_preload.so");
    assert!(lib.exists(), "{} is missing after the build", lib.display());
    lib
}
