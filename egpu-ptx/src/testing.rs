//! Helpers for tests that need NVIDIA's compiler tools (`egpu_device::testing` adds the GPU).
//!
//! Tests that run `ptxas` or `nvcc` start with [`require_ptxas`] and
//! [`require_nvcc`]: without the tool they print `egpu: skipping test that needs ptxas: <reason>`
//! and return; with `EGPU_REQUIRE_PTXAS=1`, which the test command (`scripts/test`) sets after
//! installing both tools, they fail instead.

use crate::toolchain::{Nvcc, Ptxas, ToolError};

/// The environment variable that turns a test skipped for want of `ptxas` or `nvcc` into a
/// failure when set to `1`.
pub const REQUIRE_PTXAS_ENV: &str = "EGPU_REQUIRE_PTXAS";

/// Returns `ptxas` (from `EGPU_PTXAS`, else `PATH`: [`Ptxas::find`], else where
/// `scripts/cuda-tools` installs it in the workspace), or `None` after printing why a test that
/// needs it is skipped.
///
/// ```no_run
/// let Some(ptxas) = egpu_ptx::testing::require_ptxas() else { return };
/// # let _ = ptxas;
/// ```
///
/// # Panics
///
/// When `ptxas` is not found and the environment variable `EGPU_REQUIRE_PTXAS` is `1`. The message
/// says where it was looked for.
#[track_caller]
pub fn require_ptxas() -> Option<Ptxas> {
    let installed = installed_tool("ptxas").map(Ptxas::at);
    require_tool("ptxas", Ptxas::find().or_else(|e| installed.ok_or(e)))
}

/// The tool `name` as `scripts/cuda-tools` installs it, in the workspace's
/// `target/cuda-tools/nvidia/cu13/bin` (the workspace found from `CARGO_MANIFEST_DIR`, which
/// `cargo test` sets): so that tests find the tools after the project's test command installed
/// them, without `EGPU_PTXAS` or `PATH` set by hand.
fn installed_tool(name: &str) -> Option<std::path::PathBuf> {
    let manifest = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    [manifest.join("target"), manifest.join("../target")]
        .iter()
        .map(|t| t.join("cuda-tools/nvidia/cu13/bin").join(name))
        .find(|p| p.is_file())
}

/// Returns `nvcc` (from `EGPU_NVCC`, else `PATH`: [`Nvcc::find`], else where
/// `scripts/cuda-tools` installs it in the workspace), or `None` after printing why a test that
/// needs it is skipped.
///
/// # Panics
///
/// When `nvcc` is not found and the environment variable `EGPU_REQUIRE_PTXAS` is `1` (the one
/// variable covers both tools, which come from the same wheels).
#[track_caller]
pub fn require_nvcc() -> Option<Nvcc> {
    let installed = installed_tool("nvcc").map(Nvcc::at);
    require_tool("nvcc", Nvcc::find().or_else(|e| installed.ok_or(e)))
}

/// Returns `nvdisasm` (from `EGPU_NVDISASM`, else `PATH`, else where `scripts/cuda-tools`
/// installs it in the workspace), or `None` after printing why a test that needs it is skipped;
/// it fails instead under `EGPU_REQUIRE_PTXAS=1`, as [`require_ptxas`] does.
#[track_caller]
pub fn require_nvdisasm() -> Option<std::path::PathBuf> {
    let (path, env) = (std::env::var_os("PATH"), std::env::var_os("EGPU_NVDISASM"));
    let found = crate::toolchain::find_tool("nvdisasm", "EGPU_NVDISASM", env, path);
    require_tool("nvdisasm", found.or_else(|e| installed_tool("nvdisasm").ok_or(e)))
}

/// The SASS of `cubin` as `nvdisasm` (from [`require_nvdisasm`]) prints it.
///
/// # Panics
///
/// When the cubin cannot be written to a temporary file or `nvdisasm` fails on it.
pub fn disassemble(nvdisasm: &std::path::Path, cubin: &[u8]) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let file = std::env::temp_dir().join(format!("egpu-sass-{}-{n}.cubin", std::process::id()));
    std::fs::write(&file, cubin).expect("writing the cubin");
    let output = std::process::Command::new(nvdisasm).arg(&file).output();
    let _ = std::fs::remove_file(&file);
    let output = output.expect("running nvdisasm");
    assert!(output.status.success(), "nvdisasm: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[track_caller]
fn require_tool<T>(tool: &str, found: Result<T, ToolError>) -> Option<T> {
    let required = std::env::var(REQUIRE_PTXAS_ENV).ok();
    decide_tool(tool, found, required.as_deref()).resolve()
}

/// What [`require_ptxas`] and [`require_nvcc`] do, decided from the search's result and the value
/// of `EGPU_REQUIRE_PTXAS` (if set).
fn decide_tool<T>(
    tool: &str,
    found: Result<T, ToolError>,
    require_env: Option<&str>,
) -> Decision<T> {
    match found {
        Ok(t) => Decision::Run(t),
        Err(e) if require_env == Some("1") => Decision::Fail(format!(
            "egpu: {tool} is needed, and {REQUIRE_PTXAS_ENV}=1 is set so tests that need it must \
             not be skipped: {e}"
        )),
        Err(e) => Decision::Skip(format!("egpu: skipping test that needs {tool}: {e}")),
    }
}

/// What a test that needs hardware or a tool does: decided without touching the environment,
/// then carried out by [`Decision::resolve`]. `egpu_device::testing` decides for GPUs the same way.
#[derive(Debug, PartialEq)]
pub enum Decision<T> {
    /// Run the test on this GPU, or with this tool.
    Run(T),
    /// Skip the test, printing this line.
    Skip(String),
    /// Fail the test with this message.
    Fail(String),
}

impl<T> Decision<T> {
    /// The value to run the test with, or `None` after printing why the test is skipped.
    ///
    /// # Panics
    ///
    /// On [`Decision::Fail`], with its message.
    #[track_caller]
    pub fn resolve(self) -> Option<T> {
        match self {
            Decision::Run(t) => Some(t),
            Decision::Skip(line) => {
                eprintln!("{line}");
                None
            }
            Decision::Fail(message) => panic!("{message}"),
        }
    }
}

/// A fat binary container of `entries`, each (kind: 1 PTX, 2 cubin; architecture; flags, such
/// as [`FLAG_LZ4`](crate::fatbin::FLAG_LZ4); payload, compressed if the flags say so; its size
/// uncompressed), laid out as nvcc lays them out (see [`crate::fatbin`]).
pub fn fatbin_with(entries: &[(u16, u32, u64, &[u8], usize)]) -> Vec<u8> {
    use crate::fatbin::{ENTRY_BYTES, FLAG_LZ4, FLAG_ZSTD, MAGIC};
    let mut body = Vec::new();
    for &(kind, arch, flags, payload, size) in entries {
        let padded = payload.len().div_ceil(8) * 8;
        let compressed = if flags & (FLAG_LZ4 | FLAG_ZSTD) != 0 { payload.len() } else { 0 };
        let mut h = vec![0u8; ENTRY_BYTES];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[4..8].copy_from_slice(&(ENTRY_BYTES as u32).to_le_bytes());
        h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
        h[16..20].copy_from_slice(&(compressed as u32).to_le_bytes());
        h[26..28].copy_from_slice(&9u16.to_le_bytes());
        h[28..32].copy_from_slice(&arch.to_le_bytes());
        // 64-bit, Linux, as nvcc marks every entry.
        h[40..48].copy_from_slice(&(flags | 0x11).to_le_bytes());
        h[56..64].copy_from_slice(&(size as u64).to_le_bytes());
        body.extend(h);
        body.extend(payload);
        body.resize(body.len() + padded - payload.len(), 0);
    }
    let mut c = MAGIC.to_le_bytes().to_vec();
    c.extend(1u16.to_le_bytes());
    c.extend(16u16.to_le_bytes());
    c.extend((body.len() as u64).to_le_bytes());
    c.extend(body);
    c
}

/// A minimal cubin (an ELF64 file) that keeps `ptx` in its `.nv_debug_ptx_txt` section, as
/// Triton's do: a null section, the section names, and the PTX (see [`crate::cubin`]).
pub fn cubin_with_ptx(ptx: &[u8]) -> Vec<u8> {
    let names = b"\0.shstrtab\0.nv_debug_ptx_txt\0";
    let mut b = vec![0u8; crate::cubin::HEADER_BYTES];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // 64-bit
    b[5] = 1; // little-endian
    let names_at = b.len();
    b.extend_from_slice(names);
    let ptx_at = b.len();
    b.extend_from_slice(ptx);
    b.push(0);
    while !b.len().is_multiple_of(8) {
        b.push(0);
    }
    let table_at = b.len();
    let mut section = |name: u32, kind: u32, at: usize, len: usize| {
        let mut h = [0u8; 64];
        h[..4].copy_from_slice(&name.to_le_bytes());
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[0x18..0x20].copy_from_slice(&(at as u64).to_le_bytes());
        h[0x20..0x28].copy_from_slice(&(len as u64).to_le_bytes());
        b.extend_from_slice(&h);
    };
    section(0, 0, 0, 0);
    section(1, 3, names_at, names.len());
    section(11, 1, ptx_at, ptx.len() + 1);
    b[0x28..0x30].copy_from_slice(&(table_at as u64).to_le_bytes());
    b[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    b[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
    b[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing(tool: &'static str) -> Result<(), ToolError> {
        Err(ToolError::NotFound { tool, reason: "not on PATH".to_owned() })
    }

    #[test]
    fn a_missing_tool_skips_unless_required() {
        for env in [None, Some(""), Some("0")] {
            assert_eq!(
                decide_tool("ptxas", missing("ptxas"), env),
                Decision::Skip(
                    "egpu: skipping test that needs ptxas: ptxas not found: not on PATH".into()
                ),
                "EGPU_REQUIRE_PTXAS={env:?}"
            );
        }
        let Decision::Fail(message) = decide_tool("nvcc", missing("nvcc"), Some("1")) else {
            panic!("expected a failure")
        };
        assert!(message.contains("EGPU_REQUIRE_PTXAS=1 is set"), "{message}");
        assert!(message.contains("nvcc not found: not on PATH"), "{message}");
        for env in [None, Some("1")] {
            assert_eq!(decide_tool("ptxas", Ok(7), env), Decision::Run(7));
        }
    }
}
