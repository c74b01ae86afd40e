//! What the `egpu` command line's tests share: the binary, temporary folders, and running it
//! with the exit code and messages checked.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The `egpu` binary: cargo's, else one next to this test binary or a folder above it.
pub(crate) fn egpu() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_egpu"));
    if built.is_file() {
        return built;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut looked = vec![built.display().to_string()];
    let dirs = [exe.parent(), exe.parent().and_then(Path::parent)];
    for dir in dirs.into_iter().flatten() {
        let candidate = dir.join("egpu");
        if candidate.is_file() {
            return candidate;
        }
        looked.push(candidate.display().to_string());
    }
    panic!("the `egpu` binary is not where this test looks for it: {}", looked.join(", "));
}

/// A temporary folder of this test, removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(test: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("egpu-cli-{}-{test}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        TempDir(dir)
    }

    /// Writes `bytes` to `name` in the folder; returns its path.
    pub(crate) fn file(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a run gave: exit code, stdout, stderr.
pub(crate) struct Run {
    /// The exit code (-1 when a signal ended it).
    pub(crate) code: i32,
    /// Standard output.
    pub(crate) stdout: String,
    /// Standard error.
    pub(crate) stderr: String,
}

pub(crate) fn run<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    let output: Output = Command::new(egpu())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", egpu().display()));
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `args`, which must exit with `code` and say each of `needles` on stderr.
#[track_caller]
pub(crate) fn fails<S: AsRef<std::ffi::OsStr>>(args: &[S], code: i32, needles: &[&str]) -> Run {
    let r = run(args);
    let shown: Vec<String> =
        args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    assert_eq!(r.code, code, "egpu {}: exit code; stderr:\n{}", shown.join(" "), r.stderr);
    for needle in needles {
        assert!(
            r.stderr.contains(needle),
            "egpu {}: stderr lacks {needle:?}:\n{}",
            shown.join(" "),
            r.stderr
        );
    }
    r
}

/// Runs `args`, which must succeed; returns the run.
#[track_caller]
pub(crate) fn succeeds<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    let r = run(args);
    let shown: Vec<String> =
        args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    assert_eq!(r.code, 0, "egpu {} failed:\n{}", shown.join(" "), r.stderr);
    r
}

/// The stderr of `egpu run --metrics ...` (`child`, its stderr piped), and the metrics' address,
/// from its first line (`egpu: metrics at http://ADDRESS/metrics`).
#[allow(dead_code)] // not every test binary that includes this module serves metrics
pub(crate) fn metrics_address(
    child: &mut std::process::Child,
) -> (std::io::BufReader<std::process::ChildStderr>, String) {
    use std::io::BufRead;
    let mut err = std::io::BufReader::new(child.stderr.take().expect("its errors"));
    let mut said = String::new();
    err.read_line(&mut said).expect("a line");
    let address = said
        .trim()
        .strip_prefix("egpu: metrics at http://")
        .and_then(|a| a.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("the metrics address: {said}"))
        .to_string();
    (err, address)
}
