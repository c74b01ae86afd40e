//! Two devices (issue 29) against the stand-in driver with `FAKE_DEVICES=2`: a C launcher
//! (`tests/fixture/devices.c`) launches, copies and allocates in contexts on device 0 and
//! device 1, switching with `cuCtxSetCurrent` and making one with `cuCtxCreate`. Host probes
//! count each event per `ctx.device` in maps the summary prints; the counts must be exactly
//! what the launcher did on each device, and the driver asked for a context's device once per
//! context (the preloaded library caches it); a copy between devices carries both. Prints `per-device counts exact: 2/2 devices`.
//! Each device is labelled in the summary with the UUID and name the stand-in gives it, and no
//! multicast object is ever made. A module loaded in a context of each device is instrumented
//! for each, with the maps' device parts of each device its own, merged exactly on the host.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use egpu::ebpf::{AllocCtx, KernelCtx, LaunchCtx, MemcpyCtx};
use egpu::maps::{Array, HashMap};
use support::{build, preload_library, program};

/// Launches, copies and allocations per device.
static LAUNCHES_ON: HashMap<u32, u64> = HashMap::with_capacity(8);
static COPIES_ON: HashMap<u32, u64> = HashMap::with_capacity(8);
static ALLOCATIONS_ON: HashMap<u32, u64> = HashMap::with_capacity(8);
/// Copies between devices, by source device × 16 + destination device.
static PEER_COPIES: HashMap<u32, u64> = HashMap::with_capacity(8);

#[egpu::probe(host::launch)]
fn launched(ctx: &LaunchCtx) {
    LAUNCHES_ON.fetch_add(&ctx.device, 1);
}

#[egpu::probe(host::memcpy)]
fn copied(ctx: &MemcpyCtx) {
    COPIES_ON.fetch_add(&ctx.device, 1);
    if ctx.kind == MemcpyCtx::PEER {
        PEER_COPIES.fetch_add(&(ctx.src_device * 16 + ctx.dst_device), 1);
    }
}

#[egpu::probe(host::alloc)]
fn allocating(ctx: &AllocCtx) {
    if ctx.op == AllocCtx::ALLOC {
        ALLOCATIONS_ON.fetch_add(&ctx.device, 1);
    }
}

/// For the cost of the device: launches per thread id, a field in the same context word.
static LAUNCHES_BY_THREAD: HashMap<u32, u64> = HashMap::with_capacity(8);

#[egpu::probe(host::launch)]
fn launched_by_thread(ctx: &LaunchCtx) {
    LAUNCHES_BY_THREAD.fetch_add(&ctx.host_tid, 1);
}

/// Threads started, counted on the device (element 0): what the stand-in driver's device writers
/// emulate.
static COUNTS: Array<u64> = Array::with_len(4);

#[egpu::probe(device::kernel_entry)]
fn entered(_ctx: &KernelCtx) {
    COUNTS.fetch_add(0, 1);
}

/// Writes a pack of `probes` into `dir` as `NAME.pack`: its path.
fn pack_of(dir: &Path, name: &str, probes: &[&egpu::probe::Probe]) -> PathBuf {
    let mut pack = egpu::pack::Pack::new();
    for probe in probes {
        pack.add(probe).expect("the probe packs");
    }
    let path = dir.join(format!("{name}.pack"));
    std::fs::write(&path, pack.to_text()).expect("the pack file");
    path
}

/// The summaries in `dir` named `prefix.<pid>`, one after the other.
fn summaries(dir: &Path, prefix: &str) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).expect("the directory") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if name.starts_with(&format!("{prefix}.")) {
            text.push_str(&std::fs::read_to_string(&path).expect("a summary"));
        }
    }
    text
}

/// The `map NAME KEY VALUE` lines of the summaries in `dir` named `prefix.<pid>`.
fn maps(dir: &Path, prefix: &str) -> BTreeMap<(String, u32), u64> {
    let mut maps = BTreeMap::new();
    for line in summaries(dir, prefix).lines() {
        if let ["map", map, key, value] = line.split(' ').collect::<Vec<_>>().as_slice() {
            let (Ok(k), Ok(v)) = (key.parse(), value.parse()) else { continue };
            maps.insert((map.to_string(), k), v);
        }
    }
    maps
}

/// The stand-in's devices as the summary labels them: ordinal, UUID (`egpu-stand-in-`, 0 and
/// the ordinal, as `nvidia-smi` writes a UUID) and name.
const LABELS: [&str; 2] = [
    "device 0 GPU-65677075-2d73-7461-6e64-2d696e2d0000 Stand-in GPU\n",
    "device 1 GPU-65677075-2d73-7461-6e64-2d696e2d0001 Stand-in GPU 1\n",
];

#[test]
fn every_event_carries_the_device_of_its_context() {
    let dir = build("devices");
    let exe = program(&dir, "devices");
    let out = Command::new(&exe)
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env(
            "EGPU_PROBES",
            pack_of(&dir, "devices", &[launched::probe(), copied::probe(), allocating::probe()]),
        )
        .env("EGPU_SUMMARY", dir.join("summary"))
        .env("FAKE_DEVICES", "2")
        .env("FAKE_DEVICE_INFO", "1")
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Three contexts (two primary, one made on device 1): asked about once each.
    let asked = "the driver was asked for a context's device 3 times\n";
    assert!(stdout.contains(asked), "{stdout}\n{stderr}");
    // egpu made no multicast object (issue 29, item 4).
    assert!(stdout.contains("multicast objects made: 0\n"), "{stdout}\n{stderr}");
    // Each device labelled once, exactly, in the summary.
    let summary = summaries(&dir, "summary");
    let mut labelled = 0;
    for label in LABELS {
        labelled += usize::from(summary.matches(label).count() == 1);
    }
    println!("device labels exact: {labelled}/{} devices", LABELS.len());
    assert_eq!(labelled, LABELS.len(), "{summary}");
    // The built-in probes' counts per device (no user probe needed): copies (the peer copy made
    // on device 0), sets, allocations, with their bytes; launches, their blocks and their
    // blocks' threads (device 0: 3 launches of 1 block and one of 2 x 3; device 1: 7 of 1),
    // graph launches.
    let built_in = [
        "per_device 0 copies 3 192 sets 0 0 allocations 2 128 launches 4 9 128 graphs 0\n",
        "per_device 1 copies 1 64 sets 0 0 allocations 2 128 launches 7 7 224 graphs 0\n",
    ];
    let exact = built_in.iter().filter(|line| summary.contains(*line)).count();
    println!("built-in per-device counts exact: {exact}/{} devices", built_in.len());
    assert_eq!(exact, built_in.len(), "{summary}");
    let launches = |d: usize| built_in[d].split(" launches ").nth(1).unwrap_or_default();
    let exact = (0..2).filter(|&d| summary.contains(&format!(" launches {}", launches(d)))).count();
    println!("built-in launches per device exact: {exact}/2 devices");
    assert_eq!(exact, 2, "{summary}");
    assert!(summary.contains("\nlaunches 11\n"), "{summary}");
    let maps = maps(&dir, "summary");
    // What devices.c does on each device: launches, copies, allocations.
    let expected = [(0, [4, 3, 2]), (1, [7, 1, 2])];
    let mut exact = 0;
    for (device, counts) in expected {
        let got = ["LAUNCHES_ON", "COPIES_ON", "ALLOCATIONS_ON"]
            .map(|m| maps.get(&(m.to_string(), device)).copied().unwrap_or(0));
        if got == counts {
            exact += 1;
        } else {
            eprintln!("device {device}: launches, copies, allocations {got:?}, not {counts:?}");
        }
    }
    println!("per-device counts exact: {exact}/{} devices", expected.len());
    assert_eq!(exact, expected.len(), "{maps:?}\n{stderr}");
    // The one copy between devices, from device 1 (a context made there) to device 0.
    let peers: Vec<_> = maps.iter().filter(|((m, _), _)| m == "PEER_COPIES").collect();
    assert_eq!(peers, [(&("PEER_COPIES".to_string(), 16), &1)], "{maps:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A library's kernel handle (`CUkernel`, which belongs to no context) launched on both devices:
/// once the process has used two devices and found one, the callers fill each launch's device,
/// so the built-in probes' launches per device stay exact (2 on device 0, 3 on device 1, and
/// a function found on device 1 launched once there), and a user probe's too.
#[test]
fn kernel_handles_launched_on_two_devices_count_per_device() {
    let dir = build("devices-kernels");
    let exe = program(&dir, "devices");
    let out = Command::new(&exe)
        .arg("kernels")
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_PROBES", pack_of(&dir, "kernels", &[launched::probe()]))
        .env("EGPU_SUMMARY", dir.join("summary"))
        .env("FAKE_DEVICES", "2")
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains("kernels done"), "{stdout}\n{stderr}");
    let summary = summaries(&dir, "summary");
    let want = [
        "per_device 0 copies 0 0 sets 0 0 allocations 0 0 launches 2 2 64 graphs 0\n",
        "per_device 1 copies 0 0 sets 0 0 allocations 0 0 launches 4 4 128 graphs 0\n",
    ];
    let exact = want.iter().filter(|line| summary.contains(*line)).count();
    println!("built-in kernel-handle launches per device exact: {exact}/2 devices");
    assert_eq!(exact, 2, "{summary}");
    let maps = maps(&dir, "summary");
    let on = |d: u32| maps.get(&("LAUNCHES_ON".to_string(), d)).copied().unwrap_or(0);
    assert_eq!((on(0), on(1)), (2, 4), "{maps:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A module loaded in a context of each device is instrumented for each: each context gets the
/// maps' device parts of its own, which the stand-in's device writers of that context alone
/// write (as one GPU's atomics never reach another's memory), and the map in shared memory sums
/// them exactly: three launches (one on device 0, two on device 1) of `WRITERS` × `ADDS` adds.
/// The summary says each device's parts and labels each device (`device maps exact: 2/2
/// devices`), and gives each device's own values after the map's, exactly what that device
/// did (`map COUNTS device D 0 V` lines; `per-device map values exact: 2/2 devices`).
#[test]
fn a_module_loaded_on_two_devices_is_instrumented_for_each() {
    const WRITERS: u64 = 4;
    const ADDS: u64 = 5_000;
    let dir = build("devices-modules");
    let exe = program(&dir, "devices");
    let ptx = dir.join("saxpy.ptx");
    std::fs::write(&ptx, include_str!("../../tests/ptx/saxpy.ptx")).expect("a module file");
    let out = Command::new(&exe)
        .arg("modules")
        .arg(&ptx)
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_PROBES", pack_of(&dir, "modules", &[entered::probe()]))
        .env("EGPU_SUMMARY", dir.join("summary"))
        .env("FAKE_DEVICES", "2")
        .env("FAKE_DEVICE_INFO", "1")
        .env("FAKE_DEVICE_WRITERS", WRITERS.to_string())
        .env("FAKE_DEVICE_ADDS", ADDS.to_string())
        .env("FAKE_MODULES", "1")
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains("modules done"), "{stdout}\n{stderr}");
    let summary = summaries(&dir, "summary");
    assert!(summary.contains("modules instrumented: 2, not instrumentable: 0"), "{summary}");
    assert!(summary.contains("kernels launched uninstrumented: 0 of 1\n"), "{summary}");
    assert!(summary.contains("device maps contexts 2 parts 2 "), "{summary}");
    assert!(summary.contains(" failed 0 "), "{summary}");
    let mut exact = 0;
    for (device, label) in LABELS.iter().enumerate() {
        let parts = format!("device maps on device {device} contexts 1 parts 1\n");
        exact += usize::from(summary.contains(&parts) && summary.contains(label));
    }
    eprintln!("{summary}");
    println!("device maps exact: {exact}/2 devices");
    assert_eq!(exact, 2, "{summary}");
    // Both devices' adds, each merged once from its own part.
    let total = 3 * WRITERS * ADDS;
    assert!(summary.contains(&format!("map COUNTS 0 {total}\n")), "{summary}");
    // Each device's own: device D launched D + 1 times.
    let per_device: Vec<String> = summary
        .lines()
        .filter(|l| l.starts_with("map COUNTS device "))
        .map(str::to_owned)
        .collect();
    let expected =
        [0u64, 1].map(|d| format!("map COUNTS device {d} 0 {}", (d + 1) * WRITERS * ADDS));
    let exact = expected.iter().filter(|e| per_device.contains(e)).count();
    println!("per-device map values exact: {exact}/{} devices", expected.len());
    assert_eq!(per_device, expected, "{summary}");
    // The merged line comes first, the devices' after it.
    let merged_at = summary.find("map COUNTS 0 ").expect("the merged line");
    assert!(summary.find("map COUNTS device 0 ").is_some_and(|at| at > merged_at), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// egpu never calls `cuMulticastCreate` (issue 29, item 4): no line of code of egpu's crates
/// (comments aside) names a multicast function of the driver, so none is looked up by name
/// (`dlsym`, `cuGetProcAddress`), bound (cudarc's `sys::cuMulticast*`) or interposed. (cudarc,
/// linked in, binds every driver function lazily, on its first call: egpu calls none of these.)
#[test]
fn egpu_names_no_multicast_function() {
    let root = egpu_test_support::workspace_path(".");
    let mut files = Vec::new();
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("the workspace")
        .filter_map(|e| Some(e.ok()?.path().join("src")))
        .filter(|src| src.is_dir())
        .collect();
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a folder").filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "c" || e == "h") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 100, "{} source files under {}", files.len(), root.display());
    let mut naming = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//") && code.contains("cuMulticast") {
                naming.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(naming.is_empty(), "{naming:#?}");
}

/// What reading `ctx.device` adds to a launch, against the stand-in driver: a probe counting
/// launches per device (the device found from the launch's function where the probes run, so
/// the launch queues one line), against one counting them per thread id (the next field, which
/// the caller fills: two lines). Prints both, per launch; run it by name (`--ignored`), on a
/// quiet machine.
#[test]
#[ignore = "a measurement, not a check"]
fn what_the_device_costs_a_launch() {
    let dir = build("devices-cost");
    let exe = program(&dir, "devices");
    let by_device = pack_of(&dir, "by_device", &[launched::probe()]);
    let by_thread = pack_of(&dir, "by_thread", &[launched_by_thread::probe()]);
    let run = |pack: &Path| {
        let out = Command::new(&exe)
            .args(["bench", "1000000"])
            .env("LD_PRELOAD", preload_library())
            .env("LD_LIBRARY_PATH", &dir)
            .env("EGPU_PROBES", pack)
            .env("EGPU_SHARED", "0")
            .env("FAKE_DEVICES", "2")
            .output()
            .expect("running the launcher");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    for round in 0..3 {
        println!("round {round}: by device {}, by thread {}", run(&by_device), run(&by_thread));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
