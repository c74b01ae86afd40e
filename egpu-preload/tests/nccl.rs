//! NCCL interposed (issue 29), against the stand-in driver and a stand-in `libnccl.so.2`
//! (`tests/fixture/fake_nccl.c`): a C launcher (`tests/fixture/nccl.c`) makes a communicator of
//! 4 ranks as rank 1 and known collectives and point-to-point calls, in and out of groups. The
//! summary's `nccl` lines must give every operation's calls and bytes exactly, with the
//! communicator's size and rank, and NCCL must have been asked for the size once (the preloaded
//! library caches it per communicator). Prints `nccl counts exact: K/K operations`.

mod support;

use std::path::Path;
use std::process::Command;

use support::{build, cc, fixture, preload_library};

/// The `nccl OP calls N bytes B ranks R rank r host_ns T` lines of the one summary in `dir`
/// named `prefix.<pid>`, as (op, [calls, bytes, ranks, rank]).
fn nccl_lines(dir: &Path, prefix: &str) -> Vec<(String, [i64; 4])> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the directory") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if !name.starts_with(&format!("{prefix}.")) {
            continue;
        }
        for line in std::fs::read_to_string(&path).expect("a summary").lines() {
            let words: Vec<&str> = line.split(' ').collect();
            if let ["nccl", op, "calls", c, "bytes", b, "ranks", n, "rank", r, "host_ns", _] =
                words.as_slice()
            {
                let v = [c, b, n, r].map(|w| w.parse().expect("a number"));
                lines.push((op.to_string(), v));
            }
        }
    }
    lines
}

#[test]
fn nccl_counts_are_exact_against_the_stand_in() {
    let dir = build("nccl");
    let d = dir.to_str().expect("a UTF-8 path");
    let nccl = format!("{d}/libnccl.so.2");
    cc(&["-shared", "-fPIC", "-O1", "-o", &nccl, fixture("fake_nccl.c").to_str().unwrap()]);
    let exe = format!("{d}/nccl");
    let rpath = format!("-Wl,--disable-new-dtags,-rpath,{d}");
    let cuda = format!("{d}/libcuda.so.1");
    cc(&["-O1", "-o", &exe, fixture("nccl.c").to_str().unwrap(), &nccl, &cuda, &rpath]);
    let out = Command::new(&exe)
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_SUMMARY", dir.join("summary"))
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // One communicator: its size asked of NCCL once.
    let asked = "nccl was asked for a communicator's size 1 times\n";
    assert!(stdout.contains(asked), "{stdout}\n{stderr}");
    let got = nccl_lines(&dir, "summary");
    // What nccl.c does: calls, bytes (count × datatype size), ranks, rank.
    let expected: [(&str, [i64; 4]); 8] = [
        ("allreduce", [5, 3 * 1000 * 4 + 10 * 8 + 8 * 4, 4, 1]),
        ("broadcast", [2, 2 * 256 * 2, 4, 1]),
        ("reducescatter", [1, 64 * 4, 4, 1]),
        ("allgather", [1, 100 * 2, 4, 1]),
        ("send", [3, 2 * 4096 + 5 * 8, 4, 1]),
        ("recv", [2, 2 * 4096, 4, 1]),
        ("groupstart", [2, 0, -1, -1]),
        ("groupend", [2, 0, -1, -1]),
    ];
    let mut exact = 0;
    for (op, counts) in expected {
        match got.iter().find(|(o, _)| o == op) {
            Some((_, v)) if *v == counts => exact += 1,
            other => eprintln!("{op}: {other:?}, not {counts:?}"),
        }
    }
    println!("nccl counts exact: {exact}/{} operations", expected.len());
    assert_eq!(exact, expected.len(), "{got:?}\n{stderr}");
    assert_eq!(got.len(), expected.len(), "{got:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
