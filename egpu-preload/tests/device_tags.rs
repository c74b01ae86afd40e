//! Tags in device contexts (issue 28) against the stand-in driver: a device probe keyed on
//! `KernelCtx::tag_id` makes the injector append the launch parameter to the kernel it
//! instruments, and the preloaded library fills it at every launch with the launching thread's
//! tag. The C program `tests/fixture/device_tags.c` sets two tags (and none) around launches in
//! every form, and checks the parameters each launch passed (`device tags exact: N/N
//! launches`), and that launches of functions egpu did not instrument pass the caller's
//! arguments untouched. The stand-in's device writers, emulating the probe
//! (`FAKE_DEVICE_TAGGED=1`: each adds to the element of its launch's tag), then count each tag's
//! own launches into the probe's map (`device tag counts exact: 3/3 tags`).

mod support;

use std::collections::BTreeMap;
use std::process::Command;

use egpu::ebpf::KernelCtx;
use egpu::maps::Array;
use support::{build, preload_library, program};

/// Threads started, by the launch's tag: element `tag_id % 8`.
static BY_TAG: Array<u64> = Array::with_len(8);

#[egpu::probe(device::kernel_entry)]
fn entered(ctx: &KernelCtx) {
    BY_TAG.fetch_add((ctx.tag_id % 8) as u32, 1);
}

/// `saxpy` (parameters of 4, 4, 8 and 8 bytes) and `other`, the same kernel.
fn module() -> String {
    let saxpy = include_str!("../../tests/ptx/saxpy.ptx");
    let at = saxpy.find(".visible .entry").expect("the kernel");
    format!("{saxpy}\n{}", saxpy[at..].replace("saxpy", "other"))
}

#[test]
fn device_probes_read_each_launch_s_tag() {
    const WRITERS: u64 = 2;
    const ADDS: u64 = 100;
    let dir = build("device-tags");
    let exe = program(&dir, "device_tags");
    let ptx = dir.join("tags.ptx");
    std::fs::write(&ptx, module()).expect("a module file");
    let mut pack = egpu::pack::Pack::new();
    pack.add(entered::probe()).expect("the probe packs");
    let pack_path = dir.join("tags.pack");
    std::fs::write(&pack_path, pack.to_text()).expect("the pack file");
    let out = Command::new(&exe)
        .arg(&ptx)
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_PROBES", &pack_path)
        .env("EGPU_KERNELS", "^saxpy$")
        .env("EGPU_SUMMARY", dir.join("summary"))
        .env("FAKE_MODULES", "1")
        .env("FAKE_DEVICE_WRITERS", WRITERS.to_string())
        .env("FAKE_DEVICE_ADDS", ADDS.to_string())
        .env("FAKE_DEVICE_TAGGED", "1")
        .output()
        .expect("running the program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("device tags exact: 10/10 launches"), "{stdout}\n{stderr}");
    assert!(stdout.contains("untouched: 3/3 launches"), "{stdout}\n{stderr}");
    let mut summary = String::new();
    for entry in std::fs::read_dir(&dir).expect("the directory") {
        let path = entry.expect("an entry").path();
        if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("summary.")) {
            summary.push_str(&std::fs::read_to_string(&path).expect("a summary"));
        }
    }
    assert!(summary.contains("modules instrumented: 1, not instrumentable: 0"), "{summary}");
    let mut by_tag = BTreeMap::new();
    for line in summary.lines() {
        if let ["map", "BY_TAG", key, value] = line.split(' ').collect::<Vec<_>>().as_slice() {
            by_tag
                .insert(key.parse::<u64>().expect("a key"), value.parse::<u64>().expect("a value"));
        }
    }
    // Tag 0xa11ce (element 6): 5 launches; 0xb0b (3): 4; no tag (0): one of saxpy, and the
    // three launches of functions without the parameter (which the writers count at 0).
    let expected = [(0, 4), (3, 4), (6, 5)].map(|(k, launches)| (k, launches * WRITERS * ADDS));
    let exact = expected.iter().filter(|(k, v)| by_tag.get(k) == Some(v)).count();
    println!("device tag counts exact: {exact}/{} tags", expected.len());
    assert_eq!(exact, expected.len(), "{by_tag:?}\n{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}
