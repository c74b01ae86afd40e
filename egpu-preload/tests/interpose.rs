//! The preloaded library in real processes, against a stand-in CUDA driver that this test builds
//! (`tests/fixture/fake_cuda.c`, as `libcuda.so.1`) and a program that knows nothing of egpu
//! (`tests/fixture/launcher.c`), which launches kernels through the driver every way programs
//! do: linked, by `dlsym` (on the driver's handle and on `RTLD_DEFAULT`), by `cuGetProcAddress`
//! and `cuGetProcAddress_v2` (both stream flavours, and a `cuGetProcAddress` found through
//! itself), then in forked children and a re-executed one. Every launch must be counted once,
//! per process, under its kernel's name. Needs a C compiler (`cc`), as building Rust does.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use support::{build, cc, fixture, preload_library, probes_library};

/// What one process's summary says: launches per kernel name (the empty name: no name), the
/// total, and the probe runs.
#[derive(Debug, Default)]
struct Summary {
    launches: u64,
    kernels: BTreeMap<String, u64>,
    runs: u64,
    /// The lines about copies, sets, allocations, frees, synchronisation and modules.
    others: Vec<String>,
    /// The devices used, labelled (`device INDEX UUID NAME`).
    devices: Vec<String>,
}

/// The texts of the summaries `<dir>/<prefix>.<pid>`, by pid.
fn summary_texts(dir: &Path, prefix: &str) -> BTreeMap<u32, String> {
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("the directory") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')) else {
            continue;
        };
        let Ok(pid) = pid.parse() else { continue };
        all.insert(pid, std::fs::read_to_string(&path).expect("a summary"));
    }
    all
}

/// The stand-in driver's device 0 as the summary labels it, without `FAKE_DEVICE_INFO`.
const STAND_IN_DEVICE: &str = "device 0 GPU-65677075-2d73-7461-6e64-2d696e2d0000";

fn summaries(dir: &Path) -> BTreeMap<u32, Summary> {
    let mut all = BTreeMap::new();
    for (pid, text) in summary_texts(dir, "summary") {
        let mut s = Summary::default();
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["launches", n] => s.launches = n.parse().expect("a count"),
                ["kernel", _id, n, name @ ..] => {
                    s.kernels.insert(name.join(" "), n.parse().expect("a count"));
                }
                ["probes", runs, ..] => {
                    s.runs = runs.trim_start_matches("runs=").parse().expect("runs");
                }
                ["device" | "per_device", ..] => s.devices.push(line.to_string()),
                ["pid", _] | ["shapes", ..] => {}
                _ => s.others.push(line.to_string()),
            }
        }
        all.insert(pid, s);
    }
    all
}

#[test]
fn every_launch_is_one_event_in_its_own_process() {
    let dir = build("events");
    let out = Command::new(dir.join("launcher"))
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_SUMMARY", dir.join("summary"))
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The program ran as without the library: the driver saw every launch.
    assert!(stdout.contains("parent driver launches 21 ptsz 1 other calls 28"), "{stdout}");
    assert!(stdout.contains("fork-child driver launches 22"), "{stdout}");
    assert!(stdout.contains("fork2-child driver launches 23"), "{stdout}");
    assert!(stdout.contains("exec-child driver launches 2"), "{stdout}");

    let all = summaries(&dir);
    // The parent, the child that exits normally and the re-executed one; the child that ends
    // by `_exit` writes none.
    assert_eq!(all.len(), 3, "{all:?}");
    let find = |kernel: &str| all.values().find(|s| s.kernels.contains_key(kernel));
    let parent = find("_Z5kernAPf").expect("the parent's summary");
    let expected: BTreeMap<String, u64> = [
        ("_Z5kernAPf", 11),
        ("_Z5kernBPf", 4),
        ("kernC", 4),
        ("(unnamed)", 1),
        ("(graph)", 3),
        ("(captured)", 2),
    ]
    .map(|(k, n)| (k.to_string(), n))
    .into();
    // kernA: 3 linked, 4 + 1 by cuGetProcAddress, 2 by cuLaunchKernelEx (whose own call to
    // cuLaunchKernel inside the driver is not a second event), 1 beside a capture; kernB: 2 + 1
    // by dlsym, 1 by a cuGetProcAddress found through itself; a failed launch; 3 graph launches;
    // 2 launches captured into a graph; kernC: 2 + 1 in threads that exit, and 1 from a
    // thread-specific destructor of the second, which runs after its thread-locals are gone.
    assert_eq!(parent.kernels, expected);
    assert_eq!(parent.launches, 20, "kernel launches run, not graph launches or captured ones");
    let others = [
        "copies htod 5 13056",
        "copies dtoh 2 356",
        "copies dtod 1 128",
        "sets 2 5096",
        "allocations device 3 7168",
        "allocations pinned 1 1024",
        "frees device 2 0",
        "frees pinned 1 0",
        "freed 7168",
        "syncs stream 1",
        "syncs context 3",
        "modules other 1 0",
        "modules ptx 1 44",
    ];
    assert_eq!(parent.others, others, "linked, by dlsym and by cuGetProcAddress (_ptsz too)");
    // The one device, labelled with the UUID the stand-in gives it (and no name: it gives none
    // without FAKE_DEVICE_INFO), and the built-in counts on it: all of them (copies, sets and
    // allocations, each with its bytes, as above; the 20 kernel launches run with their 70
    // blocks and 2209 block threads, as the `shapes` line sums them, and the 3 graph launches).
    let on_device = "per_device 0 copies 8 13540 sets 2 5096 allocations 4 8192 \
                     launches 20 70 2209 graphs 3";
    assert_eq!(parent.devices, [STAND_IN_DEVICE, on_device]);
    // Launches, copies and allocations have two built-in probes each (counts, and sizes); the
    // rest one.
    assert_eq!(parent.runs, 25 * 2 + 10 * 2 + 7 * 2 + 4 + 2, "one run per event and probe");
    // The children count their own launches only, from zero.
    let children: Vec<&Summary> =
        all.values().filter(|s| !s.kernels.contains_key("_Z5kernAPf")).collect();
    let mut counts: Vec<(u64, Vec<&String>)> =
        children.iter().map(|s| (s.launches, s.kernels.keys().collect())).collect();
    counts.sort();
    assert_eq!(counts.len(), 2);
    assert_eq!(counts[0].0, 2, "the re-executed child: {counts:?}");
    assert_eq!(counts[1].0, 6, "the forked child: {counts:?}");
    assert!(counts.iter().all(|(_, k)| k == &[&"kernC".to_string()]), "{counts:?}");
    // Each process removed its shared objects when it exited (the child that ended by `_exit`
    // left its own, which the next process to set up removed).
    let left = egpu::host::builtin::processes();
    assert!(all.keys().all(|pid| !left.contains(pid)), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn forks_during_the_workers_sweeps_never_deadlock() {
    // A fork takes every lock of the probe set in the thread that forks; the worker thread takes
    // some of them while it sweeps. Taken in different orders, a fork during a sweep hung the
    // program about once in 150 forks. 3000 launches, each followed by a fork.
    let dir = build("forks");
    let mut child = Command::new(dir.join("launcher"))
        .args(["forks", "3000"])
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_SHARED", "0")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running the launcher");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the launcher") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the launcher still runs after 60 s of forks (about 2 s without a deadlock)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("its output"), &mut stdout)
        .expect("its output");
    assert!(status.success(), "{stdout}");
    assert!(stdout.contains("forks done, driver launches 3000"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_launch_benchmarks_run_against_the_stand_in_driver() {
    // The benchmark's C programs are built and run on the GPU machine only; here they run against
    // the stand-in driver, so that a change that breaks them shows before a GPU run (their
    // figures mean nothing here).
    let dir = build("benches");
    let d = dir.to_str().expect("a UTF-8 path");
    let source = |name: &str| fixture(&format!("../../benches/{name}")).display().to_string();
    let stub = format!("{d}/libstub_launch.so");
    cc(&["-shared", "-fPIC", "-O2", "-o", &stub, &source("stub_launch.c")]);
    for (program, args, says) in [
        ("hook_alone", vec![stub.as_str()], "again at once (warm):"),
        ("launch_overhead", vec![], "ratio (c) "),
    ] {
        let exe = format!("{d}/{program}");
        cc(&[
            "-O2",
            "-Wall",
            "-Werror",
            "-o",
            &exe,
            &source(&format!("{program}.c")),
            "-ldl",
            "-lm",
        ]);
        let out = Command::new(&exe)
            .args(args)
            .env("LD_PRELOAD", preload_library())
            .env("LD_LIBRARY_PATH", &dir)
            .env("EGPU_SHARED", "0")
            .output()
            .expect("running the benchmark");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{program}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(says), "{program}: {stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_argument_reaches_the_probes_and_the_driver() {
    let dir = build("shapes");
    let out = Command::new(dir.join("launcher"))
        .arg("shapes")
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_SUMMARY", dir.join("summary"))
        .env("EGPU_SHARED", "0")
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The launcher checks what the driver got: the caller's arguments, each in its register or
    // stack slot.
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("shapes done"), "{stdout}");
    let texts: Vec<String> = summary_texts(&dir, "summary").into_values().collect();
    assert_eq!(texts.len(), 1);
    let report = &texts[0];
    // What the probes read: after a first launch of 4 blocks of 128 threads (which makes the
    // thread's poster, so that those after it take the short way), grid 2 x 3 x 5 and block
    // 7 x 11 x 13 (the block's last dimension passed on the stack), then a `cuLaunchKernelEx` of
    // grid 3 x 1 x 2 and block 4 x 5 x 1.
    assert!(report.contains("launches 3\n"), "{report}");
    assert!(report.contains("shapes blocks 40 threads 1149\n"), "{report}");
    assert!(report.contains(" 1 _Z5kernAPf\n") && report.contains(" 1 _Z5kernBPf\n"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_the_library_nothing_changes() {
    let dir = build("plain");
    let out = Command::new(dir.join("launcher"))
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_SUMMARY", dir.join("summary"))
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("parent driver launches 21 ptsz 1 other calls 28"), "{stdout}");
    assert!(summaries(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn another_process_reads_the_counts_while_the_program_runs() {
    use std::io::{BufRead, Write};
    let dir = build("live");
    let mut child = Command::new(dir.join("launcher"))
        .arg("wait")
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running the launcher");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("its output"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a line");
    let pid: u32 = line.trim().strip_prefix("ready ").expect("ready <pid>").parse().expect("a pid");
    assert_eq!(pid, child.id());
    // The library's worker thread runs posted events within a sweep, the launches' among them,
    // while a synchronisation may be counted on the calling thread: wait for both.
    let builtin = egpu::host::builtin::Builtin::open(pid).expect("its maps, by name");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut report = builtin.report(None);
    let on_device = "per_device 0 copies 0 0 sets 0 0 allocations 0 0 launches 5 20 640 graphs 0";
    let done = |r: &str| {
        r.contains("syncs context 1") && r.contains("launches 5\n") && r.contains(on_device)
    };
    while !done(&report) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
        report = builtin.report(None);
    }
    let head = format!("pid {pid}\n{STAND_IN_DEVICE}\n{on_device}\nlaunches 5\n");
    assert!(report.contains(&head), "{report}");
    assert!(report.contains(" 5 _Z5kernAPf\n"), "kernel names are shared too: {report}");
    assert!(egpu::host::builtin::processes().contains(&pid));
    child.stdin.take().expect("its input").write_all(b"go\n").expect("a line");
    assert!(child.wait().expect("the launcher").success());
    // Gone with the process.
    assert!(egpu::host::builtin::Builtin::open(pid).is_err());
    assert!(!egpu::host::builtin::processes().contains(&pid));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_objects_of_processes_that_died_are_removed() {
    // A process of this user that is surely gone: a child that has exited and been reaped.
    let mut child = Command::new("true").spawn().expect("running true");
    let pid = child.id();
    child.wait().expect("true");
    let stale = egpu::host::builtin::Builtin::create(pid, true).expect("maps in shared memory");
    // Forget them, as a process that died would: nothing removes them but the cleaning.
    std::mem::forget(stale);
    assert!(egpu::host::builtin::processes().contains(&pid));
    assert!(egpu::host::builtin::clean_dead() >= 1);
    assert!(!egpu::host::builtin::processes().contains(&pid));
    assert!(egpu::host::builtin::Builtin::open(pid).is_err());
}

/// What the library made of one module load: the launcher's output, what the driver was given,
/// and the process's summary.
fn load_module(dir: &Path, image: &Path, extra: &[(&str, &str)]) -> (String, String, String) {
    load_module_as("module", dir, image, extra)
}

/// [`load_module`], the launcher in `mode` (`module`, or `wrapped`: the image in the runtime's
/// wrapper of a fat binary).
fn load_module_as(
    mode: &str,
    dir: &Path,
    image: &Path,
    extra: &[(&str, &str)],
) -> (String, String, String) {
    let name = image.file_name().and_then(|n| n.to_str()).expect("a file name");
    let got = dir.join(format!("{name}.loaded"));
    let summary = format!("summary-{name}-{mode}-{}", extra.len());
    let out = Command::new(dir.join("launcher"))
        .args([mode.as_ref(), image.as_os_str(), got.as_os_str()])
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", dir)
        .env("EGPU_PROBES", probes_library())
        .env("EGPU_SUMMARY", dir.join(&summary))
        .envs(extra.iter().copied())
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let loaded = std::fs::read_to_string(&got).expect("what the driver was given");
    let summary = summary_texts(dir, &summary).into_values().next().expect("a summary");
    (stdout, loaded, summary)
}

#[test]
fn modules_are_instrumented_with_the_users_device_probes() {
    let dir = build("modules");
    let saxpy = include_str!("../../tests/ptx/saxpy.ptx");
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("a module file");
        path
    };
    let ptx = write("saxpy.ptx", saxpy.as_bytes());
    // As ptxas keeps it in a cubin: each line ended by a NUL byte.
    let kept = saxpy.replace('\n', "\0");
    let cubin = write("saxpy.cubin", &egpu::device::testing::cubin_with_ptx(kept.as_bytes()));
    let narrow =
        write("narrow.ptx", saxpy.replace(".address_size 64", ".address_size 32").as_bytes());

    // PTX text, and a cubin that keeps its PTX: the driver is given the PTX with the probe (the
    // example's `threads`, at kernel entry) injected, the map its device probe uses in "device memory" (one map
    // of the pack, once).
    for image in [&ptx, &cubin] {
        let (stdout, loaded, summary) = load_module(&dir, image, &[]);
        assert!(stdout.contains("module result 0 device maps 1"), "{stdout}");
        assert!(loaded.contains(".entry saxpy") && loaded.contains("egpu"), "{loaded}");
        assert_ne!(loaded, saxpy);
        assert!(summary.contains("modules instrumented: 1, not instrumentable: 0\n"), "{summary}");
        assert!(summary.contains("modules ptx 1 "), "the load is counted as PTX: {summary}");
        // saxpy's two loads and its store, observed (`egpu inject` prints the same count).
        assert!(summary.contains("observed 3 of 3 global memory instructions\n"), "{summary}");
    }
    // PTX egpu cannot instrument is loaded as it came, and the summary says why.
    let (stdout, loaded, summary) = load_module(&dir, &narrow, &[]);
    assert!(stdout.contains("module result 0"), "{stdout}");
    assert!(!loaded.contains("egpu") && loaded.contains(".address_size 32"), "{loaded}");
    let why = "modules instrumented: 0, not instrumentable: 1 (not instrumentable PTX: 1)\n";
    assert!(summary.contains(why), "{summary}");
    assert!(summary.contains("not instrumentable: not instrumentable PTX: "), "{summary}");
    // A driver that refuses the instrumented PTX gets the original, and the program goes on.
    let (stdout, loaded, summary) = load_module(&dir, &ptx, &[("FAKE_REFUSE_PROBES", "1")]);
    assert!(stdout.contains("module result 0"), "{stdout}");
    assert_eq!(loaded, saxpy);
    let why = "not instrumentable: 1 (refused by the driver: 1)\nnot instrumentable: refused by \
               the driver: CUresult ";
    assert!(summary.contains(why), "{summary}");

    // The pack's host probe counts launches per kernel beside the built-in ones.
    let out = Command::new(dir.join("launcher"))
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_PROBES", probes_library())
        .env("EGPU_SUMMARY", dir.join("summary"))
        .output()
        .expect("running the launcher");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let parent = summary_texts(&dir, "summary")
        .into_values()
        .find(|t| t.contains("_Z5kernAPf"))
        .expect("the parent's summary");
    // No module was instrumented: every kernel launched ran as it came, and the summary names
    // them, with their launches (the captured ones not among them).
    let missed = "kernels launched uninstrumented: 4 of 4 (_Z5kernAPf ×11, _Z5kernBPf ×4, kernC ×4";
    assert!(parent.contains(missed), "{parent}");
    // 13: this probe does not look at the flags, so the 2 captured launches count too.
    assert!(parent.contains("map LAUNCHES _Z5kernAPf 13\n"), "{parent}");
    assert!(parent.contains("map LAUNCHES _Z5kernBPf 4\n"), "{parent}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fat_binaries_give_the_ptx_for_the_device() {
    use egpu::device::fatbin::FLAG_LZ4;
    use egpu::device::testing::fatbin_with;
    let dir = build("fatbins");
    let saxpy = include_str!("../../tests/ptx/saxpy.ptx");
    let for_sm = |sm: u32| saxpy.replace(".target sm_90", &format!(".target sm_{sm}"));
    assert!(saxpy.contains(".target sm_90"), "the test's PTX");
    let (p80, p90) = (for_sm(80), for_sm(90));
    let lz4 = lz4_flex::block::compress(p90.as_bytes());
    let cubin = (2, 90, 0, &b"\x7fELF\0\0\0\0"[..], 8);
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("a module file");
        path
    };
    let both = write(
        "both.fatbin",
        &fatbin_with(&[
            cubin,
            (1, 80, 0, p80.as_bytes(), p80.len()),
            (1, 90, FLAG_LZ4, &lz4, p90.len()),
        ]),
    );
    // An sm_90 device: sm_90's PTX, decompressed, instrumented; loaded bare or in the runtime's
    // wrapper, through cuModuleLoadData, cuModuleLoadFatBinary (which takes fat binaries only:
    // the PTX goes to cuModuleLoadData) and cuLibraryLoadData, and from the file, through
    // cuModuleLoad and cuLibraryLoadFromFile, and through the cuModuleLoadData cuGetProcAddress
    // hands out (a function the driver does not export under that name). An sm_86 one: sm_80's.
    let ways = [
        ("module", "90", "sm_90"),
        ("wrapped", "90", "sm_90"),
        ("fatbinary", "90", "sm_90"),
        ("library", "90", "sm_90"),
        ("file", "90", "sm_90"),
        ("libfile", "90", "sm_90"),
        ("procaddress", "90", "sm_90"),
        ("module", "86", "sm_80"),
    ];
    for (mode, sm, target) in ways {
        let (stdout, loaded, summary) = load_module_as(mode, &dir, &both, &[("FAKE_SM", sm)]);
        assert!(stdout.contains("module result 0 device maps 1"), "{stdout}");
        assert!(
            loaded.contains(&format!(".target {target}")) && loaded.contains("egpu"),
            "{loaded}"
        );
        assert!(
            summary.contains("modules instrumented: 1, not instrumentable: 0\n"),
            "{mode} {sm}: {summary}"
        );
    }
    // Cubins only, or a compressed size that lies: loaded as it came, the summary says why.
    let cubins = write("cubins.fatbin", &fatbin_with(&[cubin]));
    let lie = write("lie.fatbin", &fatbin_with(&[(1, 90, FLAG_LZ4, &lz4, p90.len() + 1)]));
    for (image, why) in [
        (&cubins, "(no PTX: 1)\nnot instrumentable: no PTX: a fat binary with no PTX for sm_90"),
        (
            &lie,
            "(unreadable image: 1)\nnot instrumentable: unreadable image: reading the fat binary: a compressed payload is corrupt",
        ),
    ] {
        let (stdout, loaded, summary) = load_module(&dir, image, &[]);
        assert!(stdout.contains("module result 0"), "{stdout}");
        assert_eq!(loaded, "(a fat binary)");
        assert!(summary.contains("modules instrumented: 0, not instrumentable: 1 ("), "{summary}");
        assert!(summary.contains(why), "{summary}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cubin_without_its_ptx_finds_it_in_tritons_cache() {
    let dir = build("caches");
    let saxpy = include_str!("../../tests/ptx/saxpy.ptx");
    // A cubin whose PTX section is renamed: it keeps none.
    let mut cubin = egpu::device::testing::cubin_with_ptx(b"not this");
    let at = cubin.windows(17).position(|w| w == b".nv_debug_ptx_txt").expect("the section name");
    cubin[at + 16] = b'0';
    let image = dir.join("kernel.cubin");
    std::fs::write(&image, &cubin).expect("the image");
    // Triton's cache: <cache>/<hash>/<name>.cubin with <name>.ptx beside it.
    let cache = dir.join("triton-cache");
    let folder = cache.join("7a1e5c0ffee");
    std::fs::create_dir_all(&folder).expect("the cache");
    std::fs::write(folder.join("saxpy.cubin"), &cubin).expect("the cached cubin");
    std::fs::write(folder.join("saxpy.ptx"), saxpy).expect("its PTX");
    let env = [("TRITON_CACHE_DIR", cache.to_str().expect("a UTF-8 path"))];
    let (stdout, loaded, summary) = load_module(&dir, &image, &env);
    assert!(stdout.contains("module result 0 device maps 1"), "{stdout}");
    assert!(loaded.contains(".entry saxpy") && loaded.contains("egpu"), "{loaded}");
    assert!(summary.contains("modules instrumented: 1, not instrumentable: 0\n"), "{summary}");
    // A cached cubin of the same size whose bytes differ is not it: loaded as it came.
    let mut other = cubin.clone();
    *other.last_mut().expect("bytes") ^= 1;
    std::fs::write(folder.join("saxpy.cubin"), &other).expect("another cubin");
    let again = dir.join("again.cubin");
    std::fs::write(&again, &cubin).expect("the image");
    let (_, loaded, summary) = load_module(&dir, &again, &env);
    assert_eq!(loaded, "(an ELF file)");
    let why = "modules instrumented: 0, not instrumentable: 1 (no PTX: 1)\nnot instrumentable: no \
               PTX: a cubin of ";
    assert!(summary.contains(why) && summary.contains("keeps no PTX, none beside it"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A library loaded with no current context (the runtime's eager loading), or on a machine with
/// two devices, waits: loaded as it came, its kernel runs instrumented in the context that
/// launches it, however the program finds it (its kernel handle, cuKernelGetFunction,
/// cuLibraryGetModule), from one module loaded there, which is unloaded with the library; what
/// the program sets on the kernel and the library's globals are the module's.
#[test]
fn a_library_waits_for_the_context_that_runs_its_kernels() {
    let dir = build("libraries");
    let ptx = include_str!("../../tests/ptx/saxpy.ptx").replace("saxpy", "kernC");
    let image = dir.join("library.ptx");
    std::fs::write(&image, &ptx).expect("the library");
    for (current, devices) in [("none", "1"), ("current", "2")] {
        let got = dir.join(format!("loaded-{current}"));
        let summary = format!("summary-eager-{current}");
        let out = Command::new(dir.join("launcher"))
            .args(["eager".as_ref(), image.as_os_str(), got.as_os_str(), current.as_ref()])
            .env("LD_PRELOAD", preload_library())
            .env("LD_LIBRARY_PATH", &dir)
            .env("EGPU_PROBES", probes_library())
            .env("EGPU_SUMMARY", dir.join(&summary))
            .env("FAKE_DEVICES", devices)
            .output()
            .expect("running the launcher");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("eager done"), "{stdout}");
        assert_eq!(stdout.matches("launched kernC\n").count(), 3, "{current}: {stdout}");
        // What the program set on the kernel handle is set on the function it runs, and the
        // library's global is the module's, which that function reads.
        let same = "global at 0x7000; attribute set: kernC 8=65536\n";
        assert!(stdout.contains(same), "{current}: {stdout}");
        // The one module made of the library goes with it.
        assert!(stdout.contains("unloads: 1 modules, 1 libraries\n"), "{stdout}");
        let loaded = std::fs::read_to_string(&got).expect("what the driver was given");
        assert!(loaded.contains(".entry kernC") && loaded.contains("egpu"), "{loaded}");
        let summary = summary_texts(&dir, &summary).into_values().next().expect("a summary");
        let once = "modules instrumented: 1, not instrumentable: 0\n";
        assert!(summary.contains(once), "{current}: {summary}");
        let all = "kernels launched uninstrumented: 0 of 1\n";
        assert!(summary.contains(all), "{current}: {summary}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
