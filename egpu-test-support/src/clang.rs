//! clang for the tests' C probes: found by `EGPU_CLANG` or on `PATH` (`scripts/clang` installs
//! Debian's); a test without it says why it skips, and fails under `EGPU_REQUIRE_CLANG=1`.

use std::path::{Path, PathBuf};

/// clang, or `None` after saying why on stderr (`what`: the test).
///
/// # Panics
///
/// Without clang when `EGPU_REQUIRE_CLANG=1`.
pub fn require_clang(what: &str) -> Option<PathBuf> {
    let found = std::env::var_os("EGPU_CLANG").map(PathBuf::from).or_else(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|d| d.join("clang")).find(|p| p.is_file())
    });
    if found.is_none() {
        let why = "no clang (EGPU_CLANG, or on PATH; scripts/clang installs Debian's)";
        assert!(std::env::var("EGPU_REQUIRE_CLANG").as_deref() != Ok("1"), "{what}: {why}");
        eprintln!("{what}: skipped: {why}");
    }
    found
}

/// `tests/elf/NAME.c` built by `clang` into `out/NAME.o` (`-O2 -g -target bpf`, with the
/// workspace's `include/egpu.h`): the object's path.
///
/// # Panics
///
/// When clang does not run or refuses the source.
pub fn bpf_object(clang: &Path, name: &str, out: &Path) -> PathBuf {
    let source = crate::workspace_path(format!("tests/elf/{name}.c"));
    let object = out.join(format!("{name}.o"));
    let status = std::process::Command::new(clang)
        .args(["-O2", "-g", "-target", "bpf", "-c", "-I"])
        .arg(crate::workspace_path("include"))
        .arg(&source)
        .arg("-o")
        .arg(&object)
        .status()
        .unwrap_or_else(|e| panic!("{}: {e}", clang.display()));
    assert!(status.success(), "clang failed on {}", source.display());
    object
}
