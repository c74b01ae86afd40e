//! `egpu cxl` on the stand-in driver (`egpu-preload/tests/fixture`): the command runs three
//! times, the second time with the far tier's pack, whose maps egpu finds in the process and
//! writes its tier into, the third with the count run's; then the table of each kernel's times.

#[expect(dead_code, reason = "this file makes no temporary folders")]
mod cli_support;

#[path = "../egpu-preload/tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

/// `egpu cxl --far POLICY` over the launcher's `merge` (with `mark` set, the launcher marks the
/// first half of its allocation): its output, errors and the three runs' pids.
fn cxl(policy: &str, mark: bool) -> (String, String, Vec<String>) {
    let dir = support::build(&format!("cli-cxl-{}", policy.replace(':', "-")));
    let ptx = dir.join("saxpy.ptx");
    std::fs::write(&ptx, include_str!("ptx/saxpy.ptx")).expect("a module file");
    let mut command = Command::new(cli_support::egpu());
    command
        .args(["cxl", "--far", policy, "--far-latency", "300ns", "--library"])
        .arg(support::preload_library())
        .arg("--")
        .arg(dir.join("launcher"))
        .arg("merge")
        .arg(&ptx)
        .env("LD_LIBRARY_PATH", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if mark {
        command.env("EGPU_TEST_MARK", "1");
    }
    let mut child = command.spawn().expect("egpu runs");
    let mut stdin = child.stdin.take().expect("its input");
    let mut out = BufReader::new(child.stdout.take().expect("its output"));
    let mut stdout = String::new();
    let mut pids = Vec::new();
    // Each run's launcher launches, says `launched PID`, waits for a line, allocates 64 bytes,
    // synchronises, says `synced` and waits for a line again: each given after a pause, in which
    // egpu's thread finds the emulated run's maps, then its allocation.
    let mut waits = 0;
    while waits < 6 {
        let mut line = String::new();
        if out.read_line(&mut line).expect("a line") == 0 {
            break;
        }
        if let Some(pid) = line.trim().strip_prefix("launched ") {
            pids.push(pid.to_owned());
        }
        if line.starts_with("launched ") || line.trim() == "synced" {
            waits += 1;
            std::thread::sleep(std::time::Duration::from_millis(500));
            stdin.write_all(b"go\n").expect("a line");
        }
        stdout.push_str(&line);
    }
    out.read_to_string(&mut stdout).expect("the rest");
    let mut stderr = String::new();
    child.stderr.take().expect("its errors").read_to_string(&mut stderr).expect("its errors");
    let status = child.wait().expect("egpu");
    assert!(status.success(), "{stdout}\n{stderr}");
    assert_eq!(pids.len(), 3, "{stdout}\n{stderr}");
    (stdout, stderr, pids)
}

#[test]
fn cxl_runs_the_command_three_times_and_writes_each_process_tier() {
    let (stdout, stderr, pids) = cxl("all", false);
    assert!(stderr.contains("egpu: cxl: the baseline run"), "{stderr}");
    assert!(stderr.contains("egpu: cxl: far all, 300 ns away"), "{stderr}");
    // The emulated run's process, found, its tier written, its allocation read.
    let found =
        format!("egpu: cxl: process {}: 1 device allocations, 64 bytes of them far", pids[1]);
    assert!(stderr.contains(&found), "{stderr}");
    assert!(!stderr.contains("could not be written"), "{stderr}");
    // The count run's process: its tier written too, so that it counts what the emulation
    // took for far.
    assert!(stderr.contains("egpu: cxl: the count run"), "{stderr}");
    let counted =
        format!("egpu: cxl: process {}: 1 device allocations, 64 bytes of them far", pids[2]);
    assert!(stderr.contains(&counted), "{stderr}");
    // The launches, timed in both runs (the stand-in's events), with their ratio.
    assert!(stdout.contains("baseline µs") && stdout.contains("far accesses"), "{stdout}");
    // The stand-in runs no kernel: the count run saw no access, and the share is `-`.
    let row = stdout.lines().find(|l| l.contains('×')).expect("a kernel's line");
    assert!(row.trim_end().ends_with(" -"), "{row}");
    assert!(row.split_whitespace().nth(1) == Some("2"), "two launches: {row}\n{stdout}");
}

#[test]
fn cxl_reads_the_ranges_a_program_marks() {
    // The launcher marks the first 32 of its 64 bytes through the preloaded library's
    // `egpu_cxl_mark`: refused in the baseline run (no far tier there), recorded in the
    // emulated and count runs' rings, where egpu reads it and makes those bytes, and only those, far.
    let (stdout, stderr, pids) = cxl("marked", true);
    let marks: Vec<&str> = stdout.lines().filter(|l| l.starts_with("marked ")).collect();
    assert_eq!(marks, ["marked -1", "marked 0", "marked 0"], "{stdout}");
    let found = format!(
        "egpu: cxl: process {}: 1 device allocations, 32 bytes of them far, 1 range marked",
        pids[1]
    );
    assert!(stderr.contains(&found), "{stderr}");
}

#[test]
fn cxl_refuses_a_wrong_policy_or_latency_before_running_anything() {
    let help = cli_support::succeeds(&["cxl", "--help"]);
    assert!(
        help.stdout.contains("--far-latency")
            && help.stdout.contains("nth:N")
            && help.stdout.contains("--bandwidth"),
        "{}",
        help.stdout
    );
    cli_support::fails(&["cxl", "--far", "most", "--", "true"], 2, &["not a far-memory policy"]);
    cli_support::fails(
        &["cxl", "--far-latency", "2ms", "--library", "/nonexistent", "--", "true"],
        1,
        &["over the 1048575 ns one wait may take"],
    );
    cli_support::fails(&["cxl", "--bitmap-pages", "3K", "--", "true"], 1, &["--bitmap-pages 3K"]);
    cli_support::fails(&["cxl", "--bandwidth", "fast", "--", "true"], 2, &["is not a rate"]);
    cli_support::fails(&["cxl", "--bandwidth", "0", "--", "true"], 2, &["is not a rate"]);
}
