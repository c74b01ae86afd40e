//! `egpu mem run` and `egpu mem report` on the stand-in driver (`egpu-preload/tests/fixture`):
//! the sets' pack goes into the modules the program loads, each process writes its recording,
//! and the table lists the kernels it launched, those without PTX as not instrumentable.

mod cli_support;
use cli_support::{fails, succeeds};

#[path = "../egpu-preload/tests/support/mod.rs"]
mod support;

use egpu::host::mem::Recording;

/// The recordings in `dir`.
fn recordings(dir: &std::path::Path) -> Vec<Recording> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the folder") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|x| x == "egpumem") {
            let text = std::fs::read_to_string(&path).expect("a recording");
            found.push(Recording::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}")));
        }
    }
    found
}

#[test]
fn mem_run_records_each_process_and_prints_its_table() {
    let dir = support::build("cli-mem");
    let library = support::preload_library();
    let launcher = dir.join("launcher");
    let out = dir.join("mem");
    let args = |extra: &[&std::ffi::OsStr]| {
        let mut a: Vec<std::ffi::OsString> =
            ["mem", "run", "--library"].iter().map(Into::into).collect();
        a.push(library.clone().into());
        a.push("--out".into());
        a.push(out.clone().into());
        a.push("--".into());
        a.push(launcher.clone().into());
        a.extend(extra.iter().map(|s| s.into()));
        a
    };
    // The launcher's kernels come from no module with PTX: launched, not instrumentable.
    let r = succeeds(&args(&[]));
    assert!(r.stderr.contains("egpu: mem sets counts,timing; recordings in"), "{}", r.stderr);
    // The parent and its children (forked, and one made by exec) each wrote one.
    let all = recordings(&out);
    assert_eq!(all.len(), 3, "{all:?}");
    let parent = all
        .iter()
        .find(|rec| rec.kernels.iter().any(|k| k.name == "_Z5kernAPf"))
        .expect("the parent's recording");
    let h = &parent.header;
    assert_eq!((h.format.as_str(), h.version), ("egpu-mem", 1));
    assert_eq!(h.sets, ["counts", "timing"]);
    assert!(h.command.contains("launcher") && h.egpu.starts_with(env!("CARGO_PKG_VERSION")));
    let kern = parent.kernels.iter().find(|k| k.name == "_Z5kernAPf").expect("the kernel");
    assert_eq!((kern.launches, kern.instrumented, kern.traffic), (11, false, None));
    // Its registers and local memory as the driver says (the stand-in: 40 and 16); no cubin, so
    // its machine code's count is unknown.
    assert_eq!((kern.registers, kern.local_bytes, kern.machine_registers), (40, 16, 0));
    assert!(
        r.stdout.contains("_Z5kernAPf") && r.stdout.contains("not instrumentable"),
        "{}",
        r.stdout
    );
    // `egpu mem report` prints the same table from the folder.
    let again = succeeds(&["mem".as_ref(), "report".as_ref(), out.as_os_str()]);
    assert!(r.stdout.ends_with(&again.stdout), "{}\n{}", r.stdout, again.stdout);

    // A module with PTX is loaded instrumented with the sets: the launch's id and the clock.
    let ptx = egpu_test_support::workspace_path("tests/ptx/saxpy.ptx");
    let got = dir.join("got.ptx");
    succeeds(&args(&["module".as_ref(), ptx.as_os_str(), got.as_os_str()]));
    let loaded = std::fs::read_to_string(&got).expect("what the driver got");
    assert!(loaded.contains("%gridid") && loaded.contains("%globaltimer"), "{loaded}");
    // Other sets: their pack in the module, their names and page size in the header.
    let mut pages = args(&["module".as_ref(), ptx.as_os_str(), got.as_os_str()]);
    pages.splice(2..2, ["--sets", "pages,pattern", "--page-size", "64k"].map(Into::into));
    succeeds(&pages);
    let loaded = std::fs::read_to_string(&got).expect("what the driver got");
    assert!(loaded.contains("match.any.sync") && !loaded.contains("%gridid"), "{loaded}");
    let header = recordings(&out).into_iter().next().expect("a recording").header;
    assert_eq!((header.sets, header.page_bytes), (vec!["pattern".into(), "pages".into()], 65536));
    assert!(header.timeline.is_none());
    // The timeline: its ring's records published by the warp's leader; its summary in the header.
    let mut timeline = args(&["module".as_ref(), ptx.as_os_str(), got.as_os_str()]);
    let options = ["--sets", "timeline", "--sample", "4", "--window", "10us", "--kernel", "sax"];
    timeline.splice(2..2, options.map(Into::into));
    let r = succeeds(&timeline);
    let loaded = std::fs::read_to_string(&got).expect("what the driver got");
    assert!(loaded.contains("st.release.gpu.global") && loaded.contains("%smid"), "{loaded}");
    assert!(r.stderr.contains("egpu: mem sets timeline;"), "{}", r.stderr);
    let recording = recordings(&out).into_iter().next().expect("a recording");
    let t = recording.header.timeline.clone().expect("the timeline's summary");
    assert_eq!((t.sample, t.window_ns, t.records, t.dropped), (4, 10_000, 0, 0));
    let table = egpu::host::mem::table::render(&recording);
    let summary = "timeline: 1 in 4 warps, drawn at each turn of a loop, sampled, 0 records";
    assert!(table.contains(summary), "{table}");
    // --kernel: a module none of whose kernels match is loaded as it came.
    let original = std::fs::read_to_string(&ptx).expect("the module");
    let mut none = args(&["module".as_ref(), ptx.as_os_str(), got.as_os_str()]);
    none.splice(2..2, ["--kernel", "^sax$"].map(Into::into));
    succeeds(&none);
    assert_eq!(std::fs::read_to_string(&got).expect("what the driver got"), original);
    none.splice(2..4, ["--kernel", "^saxpy$"].map(Into::into));
    succeeds(&none);
    assert!(std::fs::read_to_string(&got).expect("loaded").contains("%globaltimer"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mem_run_with_kernel_times_gives_kernels_without_probes_a_gpu_time() {
    let dir = support::build("cli-mem-times");
    let library = support::preload_library();
    let out = dir.join("mem");
    let mut args: Vec<std::ffi::OsString> =
        ["mem", "run", "--kernel-times", "--library"].iter().map(Into::into).collect();
    args.extend([library.into(), "--out".into(), out.clone().into(), "--".into()]);
    args.extend([dir.join("launcher").into(), "times".into()]);
    let r = succeeds(&args);
    let all = recordings(&out);
    assert_eq!(all.len(), 1, "{all:?}");
    let rec = &all[0];
    // kernA: 5 launches timed, 4 us each on the stand-in's clock (one more was captured).
    let kern = rec.kernels.iter().find(|k| k.name == "_Z5kernAPf").expect("the kernel");
    assert_eq!((kern.instrumented, kern.event_launches, kern.event_ns), (false, 5, 20_000));
    let events = rec.header.events.expect("the event timing's counts");
    assert_eq!((events.timed, events.captured, events.failed), (8, 1, 0));
    let row = r.stdout.lines().find(|l| l.starts_with("_Z5kernAPf")).expect("its row");
    assert!(row.contains("0.020 ms (events)") && row.contains("not instrumentable"), "{row}");
    assert!(
        r.stdout
            .contains("(events): GPU time from CUDA events around each launch: 8 launches timed"),
        "{}",
        r.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mem_refuses_what_it_cannot_do() {
    fails(&["mem", "run", "--sets", "heatmap", "--", "true"], 2, &["no set is named `heatmap`"]);
    fails(&["mem", "run", "--sample", "3", "--", "true"], 2, &["a power of two from 1 to 1024"]);
    fails(
        &["mem", "run", "--sample-by", "threads", "--", "true"],
        2,
        &["of warps, blocks, lines or turns"],
    );
    fails(&["mem", "run", "--window", "1ns", "--", "true"], 2, &["from 128ns to 60s"]);
    fails(&["mem", "run", "--kernel", "(", "--", "true"], 2, &["--kernel"]);
    fails(
        &["mem", "run", "--page-size", "8k", "--", "true"],
        2,
        &["no page size `8k`: 4k, 64k or 2m"],
    );
    fails(&["mem", "report", "/nonexistent/x.egpumem"], 1, &["/nonexistent/x.egpumem"]);
    let dir = cli_support::TempDir::new("mem-report");
    let bad = dir.file("bad.egpumem", "{\"type\":\"kernel\"}\n");
    fails(&["mem".as_ref(), "report".as_ref(), bad.as_os_str()], 1, &["not an egpu-mem header"]);
}

/// A recording made on the H200 (`mem_check.py`'s `mem_timing.cu`, commit in its header):
/// read back, its figures as the program's own, its table printed by `egpu mem report`.
#[test]
fn an_h200_recording_reads_back_and_prints() {
    let path = egpu_test_support::workspace_path("tests/data/mem/mem_timing-h200.egpumem");
    let text = std::fs::read_to_string(&path).expect("the recording");
    let rec = Recording::parse(&text).expect("a recording of this version");
    assert_eq!((rec.header.device.as_str(), rec.header.sms), ("NVIDIA H200", 132));
    let kernel = |name: &str| rec.kernels.iter().find(|k| k.name == name).expect(name).clone();
    // saxpy over 2^28 floats, 6 launches: 8 bytes read and 4 written per element, 4-byte accesses.
    let saxpy = kernel("_Z5saxpyfPKfPfx");
    let t = saxpy.traffic.expect("counted");
    let n = 6u64 << 28;
    assert_eq!((t.loads, t.loaded, t.stores, t.stored), (2 * n, 8 * n, n, 4 * n));
    assert_eq!((saxpy.launches, saxpy.timed), (6, 6));
    // tiny: 5 launches, and a graph of it replayed 3 times (one grid id, 3 runs).
    let tiny = kernel("_Z4tinyPf");
    assert_eq!((tiny.launches, tiny.timed), (5, 8));
    let tiny_launches: Vec<_> = rec.launches.iter().filter(|l| l.kernel == tiny.id).collect();
    assert_eq!(tiny_launches.iter().map(|l| l.runs).collect::<Vec<_>>(), [1, 1, 1, 1, 1, 3]);
    // A kernel's GPU time is its launches' (a graph node's at each of its runs).
    for k in &rec.kernels {
        let ns: u64 = rec
            .launches
            .iter()
            .filter(|l| l.kernel == k.id)
            .map(|l| l.duration_ns() * l.runs)
            .sum();
        assert_eq!(ns, k.gpu_ns, "{}", k.name);
    }
    let r = succeeds(&["mem".as_ref(), "report".as_ref(), path.as_os_str()]);
    for needle in ["NVIDIA H200", "_Z5saxpyfPKfPfx", "12.88 GB", "6.44 GB", "40 timed"] {
        assert!(r.stdout.contains(needle), "{needle} in\n{}", r.stdout);
    }
    // The same program under the `pattern` set: unit-stride 4-byte loads make 4 sectors per
    // warp's request, the fewest; loads 128 bytes apart, 32.
    let path = egpu_test_support::workspace_path("tests/data/mem/mem_timing-pattern-h200.egpumem");
    let rec = Recording::parse(&std::fs::read_to_string(&path).expect("read")).expect("parses");
    let id = |name: &str| rec.kernels.iter().find(|k| k.name == name).expect(name).id.clone();
    let loads = |name: &str| {
        let id = id(name);
        let sites: Vec<_> = rec
            .sites
            .iter()
            .filter(|s| s.kernel == id && s.access.as_deref() == Some("load"))
            .collect();
        let (requests, sectors, minimum) = sites.iter().fold((0, 0, 0), |(r, s, m), site| {
            (r + site.requests.requests, s + site.requests.sectors, m + site.requests.minimum)
        });
        (sectors / requests, minimum / requests)
    };
    assert_eq!(loads("_Z5saxpyfPKfPfx"), (4, 4));
    assert_eq!(loads("_Z7stridedPKfPf"), (32, 4));
    let r = succeeds(&["mem".as_ref(), "report".as_ref(), path.as_os_str()]);
    assert!(r.stdout.contains("32.0 sectors per request, 12% of them needed"), "{}", r.stdout);
}

#[test]
fn an_h200_timeline_shows_the_two_phases_of_a_kernel() {
    // mem_timing.cu's two-phase kernel alone (`--kernel phases`) under counts,timing,timeline,
    // one warp in 32 sampled, 4000 records kept: it streams memory, then chases pointers.
    let path = egpu_test_support::workspace_path("tests/data/mem/mem_timing-timeline-h200.egpumem");
    let rec = Recording::parse(&std::fs::read_to_string(&path).expect("read")).expect("parses");
    let phases = rec.kernels.iter().find(|k| k.name == "_Z6phasesPKfPfxPKiiPi").expect("phases");
    let windows: Vec<_> = rec.windows.iter().filter(|w| w.kernel == phases.id).collect();
    assert_eq!(windows.len(), 50);
    let bandwidth: Vec<f64> =
        windows.iter().map(|w| w.bytes as f64 / (w.end_ns - w.start_ns) as f64).collect();
    let (fast, slow) = bandwidth.iter().fold((0f64, f64::MAX), |(f, s), &b| (f.max(b), s.min(b)));
    assert!(fast > 3.0 * slow, "two phases: {fast} and {slow} bytes per ns");
    // The windows hold the sampled bytes times the sampling, short of the records dropped.
    let summed: u64 = windows.iter().map(|w| w.bytes).sum();
    let counted = 545_259_520u64 + 269_516_800;
    assert!(summed <= counted && summed as f64 > 0.95 * counted as f64, "{summed} of {counted}");
    assert_eq!(rec.samples.len(), 4000);
    let r = succeeds(&["mem".as_ref(), "report".as_ref(), path.as_os_str()]);
    assert!(r.stdout.contains("windows: 50 ×"), "{}", r.stdout);
}

/// `egpu mem what-if` over the H200 timeline recording: the line that says what the samples are,
/// then the library's what-if of them; by 4 KiB pages a larger working set; a recording without
/// samples refused, saying what to run.
#[test]
fn mem_what_if_runs_the_cache_what_if_over_a_recording_s_samples() {
    use egpu::host::mem::cache::{accesses_of_samples, what_if};
    let path = egpu_test_support::workspace_path("tests/data/mem/mem_timing-timeline-h200.egpumem");
    let rec = Recording::parse(&std::fs::read_to_string(&path).expect("read")).expect("parses");
    let r = succeeds(&["mem".as_ref(), "what-if".as_ref(), path.as_os_str()]);
    let mut lines = r.stdout.lines();
    assert_eq!(
        lines.next(),
        Some(
            "process 731 (/tmp/mc/mem_timing): 4000 sampled requests (1 in 32 warps; 4000 of \
             196986 records kept, 1934 dropped)"
        )
    );
    let want = what_if(&accesses_of_samples(&rec.samples, 1 << 21), 1 << 21);
    assert_eq!(lines.collect::<Vec<_>>().join("\n") + "\n", want.to_string());
    assert_eq!(want.accesses, 4000);
    let small = succeeds(&["mem", "what-if", "--page-size", "4k", path.to_str().expect("utf-8")]);
    let pages = |text: &str| -> u64 {
        let at = text.find("working set ").expect("the working set") + "working set ".len();
        text[at..].split_whitespace().next().expect("a number").parse().expect("pages")
    };
    assert!(pages(&small.stdout) > pages(&r.stdout), "{}\n{}", small.stdout, r.stdout);
    let none = egpu_test_support::workspace_path("tests/data/mem/mem_timing-h200.egpumem");
    fails(
        &["mem".as_ref(), "what-if".as_ref(), none.as_os_str()],
        1,
        &["no timeline samples", "egpu mem run --sets timeline"],
    );
    fails(&["mem", "what-if", "--kernel", "(", "x.egpumem"], 2, &["--kernel"]);
}

/// `egpu mem run --sets allocs` on the stand-in driver: the launcher's device allocations (the
/// driver's, one found through `cuGetProcAddress`, the runtime's) and frees, in order, in its
/// recording; its table lists them. Pinned host memory is not a device allocation.
#[test]
fn mem_run_allocs_records_the_program_s_device_allocations() {
    let dir = support::build("cli-mem-allocs");
    let out = dir.join("mem");
    let library = support::preload_library();
    let launcher = dir.join("launcher");
    // `egpu mem run --sets allocs` of the launcher (with `mode`, if any) into `out`.
    let run_allocs = |out: &std::path::Path, mode: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> =
            ["mem", "run", "--sets", "allocs", "--library"].iter().map(|a| a.as_ref()).collect();
        args.extend([library.as_os_str(), "--out".as_ref(), out.as_os_str(), "--".as_ref()]);
        args.push(launcher.as_os_str());
        args.extend(mode.iter().map(std::ffi::OsStr::new));
        succeeds(&args)
    };
    let r = run_allocs(&out, &[]);
    let all = recordings(&out);
    let parent = all
        .iter()
        .filter(|rec| rec.kernels.iter().any(|k| k.name == "_Z5kernAPf"))
        .max_by_key(|rec| rec.allocations.len())
        .expect("the parent's recording");
    assert_eq!(parent.header.sets, ["allocs"]);
    // cuMemAlloc 4096 (freed), cuMemAlloc by address 1024, cudaMalloc 2048 (freed).
    let want = [(1, 4096, true), (2, 1024, false), (3, 2048, true)];
    let got: Vec<(u64, u64, bool)> =
        parent.allocations.iter().map(|a| (a.id, a.bytes, a.freed)).collect();
    let exact = want.iter().filter(|w| got.contains(w)).count();
    println!("allocations recorded (stand-in driver): {exact}/{} exact", want.len());
    assert_eq!(got, want);
    assert!(parent.allocations.iter().all(|a| a.addr != 0));
    // The launcher's copies: into the first from host memory three times 4096 bytes, 512 and a
    // 2D copy of 256, out of it 100 and 256; 128 from it to the third (the runtime's).
    let copies: Vec<[u64; 3]> =
        (parent.allocations.iter()).map(|a| [a.copied_in, a.copied_out, a.copied_device]).collect();
    assert_eq!(copies, [[3 * 4096 + 512 + 256, 356, 128], [0, 0, 0], [0, 0, 128]]);
    // No kernel reached them (the stand-in's kernels run no probes): the table says so.
    assert!(r.stdout.contains("allocations: 3 made, 0 reached"), "{}", r.stdout);
    let never = "never reached: 1 (4.10 kB, 13.06 kB copied in), 2 (1.02 kB), 3 (2.05 kB)";
    assert!(r.stdout.contains(never), "{}", r.stdout);
    attributed(&parent.allocations);

    // Managed memory steered, in both forms of each call (the launcher checks that each got
    // its own arguments): the allocation is managed, with its prefetches and advice.
    let managed = dir.join("managed");
    run_allocs(&managed, &["managed"]);
    let all = recordings(&managed);
    let rec = all.iter().find(|rec| !rec.allocations.is_empty()).expect("a recording");
    let a = &rec.allocations;
    let got: Vec<_> = (a.iter())
        .map(|a| (a.bytes, a.managed, a.prefetched_to_host, a.prefetched_to_device, &a.advice[..]))
        .collect();
    let advice = ["read mostly".to_owned(), "preferred device 0".to_owned()];
    assert_eq!(got, [(65536, true, 16384, 32768, &advice[..])]);
    println!("managed memory steered (stand-in driver): {got:?}");
    // Its table (the launcher runs no kernel there, so `egpu mem run` printed none). Without
    // CUPTI on the machine, the recording says why there are no driver reports.
    let table = egpu::host::mem::table::render(rec);
    assert!(table.contains("managed memory: 1 allocations"), "{table}");
    assert!(table.contains("advice: read mostly, preferred device 0"), "{table}");
    let reports = &rec.header.um_reports;
    assert!(reports == "collected" || reports.contains("libcupti"), "{reports}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `allocs` set's probes on the CPU VM over the allocations the stand-in driver made (all
/// live, as at a launch), as the preloaded library writes their table: loads, stores and atomics
/// at each one's first byte, its middle, its last and just past it, each attributed to the
/// allocation it falls in (0: none). Prints `allocations attributed (stand-in driver): K/K
/// exact`.
fn attributed(made: &[egpu::host::mem::allocs::AllocationRecord]) {
    use egpu::ebpf::MemAccessCtx;
    use egpu::host::mem::allocs::{self, AllocTable, AllocationRecord};
    use std::collections::BTreeMap;
    let live: Vec<AllocationRecord> =
        made.iter().map(|a| AllocationRecord { freed: false, ..a.clone() }).collect();
    AllocTable::of_records(&live).write().expect("the table written");
    let mut vms: Vec<_> = allocs::probes().iter().map(|p| p.vm().expect("a VM")).collect();
    let id_of = |addr: u64| {
        let holds = |a: &&AllocationRecord| a.addr <= addr && addr < a.addr + a.bytes;
        live.iter().find(holds).map_or(0, |a| a.id)
    };
    let mut want: BTreeMap<u64, [u64; 3]> = BTreeMap::new();
    for a in &live {
        let at = [a.addr, a.addr + a.bytes / 2, a.addr + a.bytes - 4, a.addr + a.bytes];
        for (i, addr) in at.into_iter().enumerate() {
            let direction = (i + a.id as usize) % 3;
            let mut ctx = MemAccessCtx { kernel_id: 31, addr, size: 4, ..Default::default() };
            vms[direction].run_ctx(&mut ctx).expect("runs");
            want.entry(id_of(addr)).or_default()[direction] += 4;
        }
    }
    let got: BTreeMap<u64, [u64; 3]> = (allocs::traffic().into_iter())
        .filter(|(k, _)| k.kernel == 31)
        .map(|(k, t)| (k.alloc, [t.loaded, t.stored, t.atomic]))
        .collect();
    let exact = live.iter().filter(|a| got.get(&a.id) == want.get(&a.id)).count();
    println!("allocations attributed (stand-in driver): {exact}/{} exact", live.len());
    assert_eq!(got, want);
    assert_eq!(exact, 3);
}
