//! Tags in device contexts (issue 28) against the stand-in driver: a device probe keyed on
//! `KernelCtx::tag_id` makes the injector append the launch parameter to the kernel it
//! instruments, and the preloaded library fills it at every launch with the launching thread's
//! tag. The C program `tests/fixture/device_tags.c` sets two tags (and none) around launches in
//! every form, and checks the parameters each launch passed (`device tags exact: N/N
//! launches`), and that launches of functions egpu did not instrument pass the caller's
//! arguments untouched. Then it builds a graph by hand (`tests/fixture/fake_graphs.h`): kernel
//! nodes of the instrumented kernel added and set in every form (`cuGraphAddKernelNode` and
//! `_v2`, `cuGraphAddNode` and `_v2`, the set calls, some found by `cuGetProcAddress`), each
//! replayed at `cuGraphLaunch` with its own parameters and the tag of the thread that made or
//! set it (`graph nodes with the launch parameter: N/N`), a node of a kernel without the
//! parameter given the caller's lists (`graph nodes untouched: 4/4`). The stand-in's device
//! writers, emulating the probe (`FAKE_DEVICE_TAGGED=1`: each adds to the element of its
//! launch's tag), then count each tag's own launches and node replays into the probe's map
//! (`device tag counts exact: 3/3 tags`).

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

/// Threads started, counted in element 0: a probe that does not read the tag.
static COUNTS: Array<u64> = Array::with_len(8);

#[egpu::probe(device::kernel_entry)]
fn counted(_ctx: &KernelCtx) {
    COUNTS.fetch_add(0, 1);
}

/// A pack of `probe` in `dir`: its path.
fn pack_of(dir: &std::path::Path, name: &str, probe: &egpu::probe::Probe) -> std::path::PathBuf {
    let mut pack = egpu::pack::Pack::new();
    pack.add(probe).expect("the probe packs");
    let path = dir.join(format!("{name}.pack"));
    std::fs::write(&path, pack.to_text()).expect("the pack file");
    path
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
    let pack_path = pack_of(&dir, "tags", entered::probe());
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
    assert!(stdout.contains("graph nodes with the launch parameter: 15/15"), "{stdout}\n{stderr}");
    assert!(stdout.contains("graph nodes untouched: 4/4"), "{stdout}\n{stderr}");
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
    // Tag 0xa11ce (element 6): 5 launches and 6 node replays; 0xb0b (3): 4 and 9; no tag (0):
    // one launch of saxpy and 2 node replays, and the three launches and 3 node replays of
    // functions without the parameter (which the writers count at 0).
    let expected = [(0, 4 + 5), (3, 4 + 9), (6, 5 + 6)];
    let expected = expected.map(|(k, launches)| (k, launches * WRITERS * ADDS));
    let exact = expected.iter().filter(|(k, v)| by_tag.get(k) == Some(v)).count();
    println!("device tag counts exact: {exact}/{} tags", expected.len());
    assert_eq!(exact, expected.len(), "{by_tag:?}\n{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the tag parameter adds to a launch, against the stand-in driver: with a probe keyed on
/// the tag (`saxpy` gets the parameter; every launch takes the whole way), launches of `saxpy`
/// (the tag added) and of `other` (instrumented without it, the arguments untouched), in both
/// forms; and, with a probe that reads no tag (no parameter: the trampolines' way), the same
/// launches. Prints median nanoseconds per launch; run it by name (`--ignored`), on a quiet
/// machine.
#[test]
#[ignore = "a measurement, not a check"]
fn what_the_tag_parameter_costs_a_launch() {
    let dir = build("device-tags-cost");
    let exe = program(&dir, "device_tags");
    let ptx = dir.join("tags.ptx");
    std::fs::write(&ptx, module()).expect("a module file");
    let tagged = pack_of(&dir, "tags", entered::probe());
    let plain = pack_of(&dir, "plain", counted::probe());
    let run = |pack: &std::path::Path| {
        let out = Command::new(&exe)
            .arg(&ptx)
            .args(["bench", "20000"])
            .env("LD_PRELOAD", preload_library())
            .env("LD_LIBRARY_PATH", &dir)
            .env("EGPU_PROBES", pack)
            .env("EGPU_KERNELS", "^saxpy$")
            .env("EGPU_SHARED", "0")
            .env("FAKE_MODULES", "1")
            .output()
            .expect("running the program");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    for round in 0..3 {
        println!("round {round}: probe keyed on the tag: {}", run(&tagged));
        println!("round {round}: probe without the tag: {}", run(&plain));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
