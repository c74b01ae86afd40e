//! Finding the preloaded library and building the test fixtures, shared by the tests, the
//! benchmark and the `egpu` command's tests.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The preloaded library: `EGPU_PRELOAD` when set (the GPU bundle sets it), else the one in this
/// executable's `target/<profile>/`, which cargo builds (or finds fresh) first: `cargo test`
/// does not build a `cdylib` that nothing links.
pub(crate) fn preload_library() -> PathBuf {
    built("EGPU_PRELOAD", &["-p", "egpu-preload"], "libegpu_preload.so")
}

/// The example crate of probes (`examples/probes.rs`) as a shared library: `EGPU_EXAMPLE_PROBES`
/// when set (the GPU bundle sets it), else built by cargo into this executable's
/// `target/<profile>/examples/`.
#[allow(dead_code)] // not every including test uses it
pub(crate) fn probes_library() -> PathBuf {
    built("EGPU_EXAMPLE_PROBES", &["-p", "egpu", "--example", "probes"], "examples/libprobes.so")
}

/// `$variable` when set, else `artifact` (under this executable's `target/<profile>/`) after
/// `cargo build ARGS` in the same profile.
fn built(variable: &str, args: &[&str], artifact: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(variable) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the executable's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<exe>");
    let target_dir = profile_dir.parent().expect("target/");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build.arg("build").args(args).env("CARGO_TARGET_DIR", target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let out = build.output().expect("running cargo");
    assert!(
        out.status.success(),
        "cargo build {args:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = profile_dir.join(artifact);
    assert!(lib.exists(), "{} is missing after the build", lib.display());
    lib
}

/// A fixture file of egpu-preload's tests, found from the workspace at run time;
/// `../../benches/NAME` for one of egpu-preload's benchmark programs.
pub(crate) fn fixture(name: &str) -> PathBuf {
    egpu_test_support::workspace_path("egpu-preload/tests/fixture").join(name)
}

pub(crate) fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("running cc");
    assert!(out.status.success(), "cc {args:?}:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Builds the fake driver and the launcher into a fresh directory.
pub(crate) fn build(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("egpu-preload-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let d = dir.to_str().expect("a UTF-8 path");
    let driver = fixture("fake_cuda.c");
    let launcher = fixture("launcher.c");
    let lib = format!("{d}/libcuda.so.1");
    cc(&["-shared", "-fPIC", "-O1", "-o", &lib, driver.to_str().expect("a UTF-8 path")]);
    let exe = format!("{d}/launcher");
    // DT_RPATH, not RUNPATH: searched before LD_LIBRARY_PATH, so that the launcher loads the fake
    // driver even where a real libcuda.so.1 is on the loader path.
    let rpath = format!("-Wl,--disable-new-dtags,-rpath,{d}");
    let src = launcher.to_str().expect("a UTF-8 path");
    cc(&["-O1", "-o", &exe, src, &lib, &rpath, "-ldl", "-pthread"]);
    dir
}

/// Builds the fixture program `NAME.c` into `dir` (made by [`build`]), linked against the fake
/// driver there as the launcher is: its path.
#[allow(dead_code)] // not every including test uses it
pub(crate) fn program(dir: &Path, name: &str) -> PathBuf {
    let d = dir.to_str().expect("a UTF-8 path");
    let exe = format!("{d}/{name}");
    let src = fixture(&format!("{name}.c"));
    let rpath = format!("-Wl,--disable-new-dtags,-rpath,{d}");
    let lib = format!("{d}/libcuda.so.1");
    cc(&["-O1", "-o", &exe, src.to_str().expect("a UTF-8 path"), &lib, &rpath, "-ldl"]);
    PathBuf::from(exe)
}
