//! The C ABI from outside Rust: the C example (`examples/c/egpu_example.c`) built with the
//! system's C compiler against the header and the static library, and against the shared one,
//! and run; the Python example (`examples/python/egpu_example.py`) run through ctypes; and a C
//! program that attaches a probe to its CUDA launches through the preloaded library, against
//! egpu-preload's stand-in driver. Each prints what it checked (`--nocapture` shows it).
//!
//! Needs `cc` and `python3` (CI has both): a missing one fails the test, saying so.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The workspace's root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// `target/<profile>/` of this test executable, where `cargo build` puts the libraries, after
/// building the C ABI and the preloaded library there (`cargo test` builds neither's shared
/// library for a test; the build is quick when they are fresh).
fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's path");
        let profile = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<exe>");
        let target = profile.parent().expect("target/");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "--locked", "-p", "egpu-capi", "-p", "egpu-preload"])
            .env("CARGO_TARGET_DIR", target)
            .current_dir(workspace());
        if profile.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let out = build.output().expect("running cargo");
        assert!(out.status.success(), "cargo build:\n{}", String::from_utf8_lossy(&out.stderr));
        for lib in ["libegpu_capi.so", "libegpu_capi.a", "libegpu_preload.so"] {
            assert!(profile.join(lib).exists(), "{lib} is missing after the build");
        }
        profile.to_path_buf()
    })
}

/// A fresh directory for one test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("egpu-capi-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Runs `program`, failing with why when it is not there.
fn run(program: &str, command: &mut Command) -> Output {
    match command.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("`{program}` is not installed: this test needs it (CI has it): {e}")
        }
        Err(e) => panic!("running {program}: {e}"),
    }
}

/// Runs the system's C compiler with `args`, failing with its messages.
fn cc(args: &[&str]) {
    let out = run("cc", Command::new("cc").args(args));
    assert!(out.status.success(), "cc {args:?}:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// What a program printed, after checking it exited 0 and printed `want`; its lines echoed.
fn ran(what: &str, out: Output, want: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.lines().any(|l| l == want), "{what} did not print `{want}`:\n{stdout}");
    println!("{what}:\n{stdout}");
    stdout
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// The flags that compile a C program against the header and egpu.h (the contexts).
fn includes() -> [String; 2] {
    let root = workspace();
    [
        format!("-I{}", path(&root.join("egpu-capi/include"))),
        format!("-I{}", path(&root.join("include"))),
    ]
}

#[test]
fn the_c_example_runs_with_the_static_and_the_shared_library() {
    let lib = built();
    let dir = scratch("c");
    let source = workspace().join("examples/c/egpu_example.c");
    let [inc, egpu_h] = includes();
    // egpu.h declares the helpers for probes as static pointers, unused on the host.
    let flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-variable", "-O1"];
    let static_exe = dir.join("egpu_example_static");
    let archive = lib.join("libegpu_capi.a");
    // What a Rust static library needs of the system (`--print native-static-libs`).
    let system = ["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"];
    let mut args: Vec<&str> = flags.to_vec();
    args.extend([inc.as_str(), egpu_h.as_str(), path(&source), path(&archive), "-o"]);
    args.push(path(&static_exe));
    args.extend(system);
    cc(&args);
    let out = run("the C example", &mut Command::new(&static_exe));
    ran("c example (static)", out, "c example: ok");

    let shared_exe = dir.join("egpu_example_shared");
    let rpath = format!("-Wl,-rpath,{}", path(lib));
    let libdir = format!("-L{}", path(lib));
    let mut args: Vec<&str> = flags.to_vec();
    args.extend([inc.as_str(), egpu_h.as_str(), path(&source), "-o", path(&shared_exe)]);
    args.extend([libdir.as_str(), rpath.as_str(), "-legpu_capi"]);
    cc(&args);
    let out = run("the C example", &mut Command::new(&shared_exe));
    ran("c example (shared)", out, "c example: ok");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_python_example_runs_through_ctypes() {
    let lib = built().join("libegpu_capi.so");
    let script = workspace().join("examples/python/egpu_example.py");
    let out = run("python3", Command::new("python3").arg(&script).arg(&lib));
    ran("python example", out, "python example: ok");
}

#[test]
fn a_probe_attached_through_the_abi_counts_cuda_launches_under_the_preloaded_library() {
    let lib = built();
    let dir = scratch("cuda");
    // egpu-preload's stand-in driver, as libcuda.so.1.
    let driver = workspace().join("egpu-preload/tests/fixture/fake_cuda.c");
    let cuda = dir.join("libcuda.so.1");
    cc(&["-shared", "-fPIC", "-O1", "-o", path(&cuda), path(&driver)]);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixture/cuda_events.c");
    let exe = dir.join("cuda_events");
    let [inc, _] = includes();
    // DT_RPATH, searched before LD_LIBRARY_PATH: the stand-in driver even where a real one is.
    let rpath = format!("-Wl,--disable-new-dtags,-rpath,{}:{}", path(&dir), path(lib));
    let libdir = format!("-L{}", path(lib));
    cc(&[
        "-std=c11",
        "-Wall",
        "-Werror",
        "-O1",
        &inc,
        path(&source),
        "-o",
        path(&exe),
        path(&cuda),
        &libdir,
        "-legpu_capi",
        &rpath,
    ]);
    // Without the preloaded library: unavailable, said so.
    let out = run("the CUDA events program", &mut Command::new(&exe));
    assert!(!out.status.success(), "it ran without the preloaded library");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the preloaded library is not in this process"), "{stderr}");
    let out = run(
        "the CUDA events program",
        Command::new(&exe).env("LD_PRELOAD", lib.join("libegpu_preload.so")),
    );
    ran("cuda events", out, "cuda events: ok");
    let _ = std::fs::remove_dir_all(&dir);
}
