//! Safety on shared machines (issue 29, item 4): every program egpu starts (`egpu run`, `egpu mem
//! run`; `egpu cxl` runs through `egpu run`'s code) has NVLink multicast off,
//! `NCCL_NVLS_ENABLE=0`, `TORCH_SYMM_MEM_DISABLE_MULTICAST=1` and `NVSHMEM_DISABLE_NVLS=1`,
//! forced over what the user set, with a note on standard error for a value replaced.

use std::process::Command;

#[expect(dead_code, reason = "this file runs egpu its own way")]
mod cli_support;
use cli_support::{TempDir, egpu};

#[path = "../egpu-preload/tests/support/mod.rs"]
#[expect(dead_code, reason = "this file builds no fixtures")]
mod support;

/// The three switches as a shell prints them.
const PRINT: &str = "echo \"nvls=$NCCL_NVLS_ENABLE symm=$TORCH_SYMM_MEM_DISABLE_MULTICAST \
                     nvshmem=$NVSHMEM_DISABLE_NVLS\"";

/// `egpu ARGS... -- sh -c PRINT` with `NCCL_NVLS_ENABLE` set to `nvls` (unset: `None`) in egpu's
/// environment: the command's line and egpu's standard error.
fn switches(args: &[&std::ffi::OsStr], nvls: Option<&str>) -> (String, String) {
    let mut egpu = Command::new(egpu());
    egpu.args(args).args(["--", "sh", "-c", PRINT]);
    egpu.env_remove("TORCH_SYMM_MEM_DISABLE_MULTICAST").env_remove("NVSHMEM_DISABLE_NVLS");
    match nvls {
        Some(v) => egpu.env("NCCL_NVLS_ENABLE", v),
        None => egpu.env_remove("NCCL_NVLS_ENABLE"),
    };
    let out = egpu.output().expect("running egpu");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout.lines().find(|l| l.starts_with("nvls=")).unwrap_or_default().to_owned();
    (line, stderr)
}

#[test]
fn every_command_egpu_starts_has_nvlink_multicast_off() {
    let library = support::preload_library();
    let scratch = TempDir::new("safety");
    let out = scratch.0.join("mem");
    let run: [&std::ffi::OsStr; 3] = ["run".as_ref(), "--library".as_ref(), library.as_os_str()];
    let mem: [&std::ffi::OsStr; 6] = [
        "mem".as_ref(),
        "run".as_ref(),
        "--library".as_ref(),
        library.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ];
    let off = "nvls=0 symm=1 nvshmem=1";
    let note = "NCCL_NVLS_ENABLE=1 replaced by NCCL_NVLS_ENABLE=0";
    for (what, args) in [("run", &run[..]), ("mem run", &mem[..])] {
        // Unset: set, and nothing said.
        let (line, stderr) = switches(args, None);
        assert_eq!(line, off, "egpu {what}: {stderr}");
        assert!(!stderr.contains("replaced by"), "egpu {what}: {stderr}");
        // Set otherwise by the user: forced, and said.
        let (line, stderr) = switches(args, Some("1"));
        assert_eq!(line, off, "egpu {what}: {stderr}");
        assert!(stderr.contains(note), "egpu {what}: {stderr}");
        // Set as egpu would: nothing said.
        let (line, stderr) = switches(args, Some("0"));
        assert_eq!(line, off, "egpu {what}: {stderr}");
        assert!(!stderr.contains("replaced by"), "egpu {what}: {stderr}");
        println!("egpu {what}: {line}");
    }
}
