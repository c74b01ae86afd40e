use super::*;
use egpu_ebpf::verifier::verify;
use egpu_ebpf::{DeviceEvent, MapDef, MapKind, Program, assemble};
use egpu_maps::HashMap;
use egpu_maps::layout::Geometry;
use egpu_maps::{Array, Placement};

/// The counts of the probes below, as their map tables describe them (the tests bind maps of
/// their own: `counts_map`).
static COUNTS: HashMap<u64, u64> = HashMap::with_capacity(64);

/// Counts launches per kernel id (`LaunchCtx::kernel_id`: the context's first 8 bytes).
#[egpu_macros::probe(host::launch, crate = crate::egpu_root)]
fn count_by_kernel(ctx: &LaunchCtx) {
    COUNTS.fetch_add(&ctx.kernel_id, 1);
}

/// Counts synchronisations per handle (`SyncCtx::handle`), as [`count_by_kernel`] counts kernels.
#[egpu_macros::probe(host::sync, crate = crate::egpu_root)]
fn count_by_handle(ctx: &SyncCtx) {
    COUNTS.fetch_add(&ctx.handle, 1);
}

/// The launch counter, verified (built once).
fn by_kernel() -> Verified {
    count_by_kernel::probe().verified().expect("builds").clone()
}

fn counts_map() -> RawMap {
    let g = Geometry::new(MapKind::Hash, 8, 8, 64, 1, 0).expect("geometry");
    RawMap::create(g, &Placement::Process).expect("a map")
}

fn unverified(text: &str, maps: Vec<MapDef>, attach: AttachPoint) -> Program {
    Program::new(assemble(text).expect("assembles"), maps, attach).expect("a program")
}

fn program(text: &str, maps: Vec<MapDef>, attach: AttachPoint) -> Verified {
    verify(&unverified(text, maps, attach)).expect("verifies")
}

fn launch(kernel_id: u64) -> LaunchCtx {
    LaunchCtx { kernel_id, grid: [1, 1, 1], block: [32, 1, 1], ..Default::default() }
}

#[test]
fn launches_from_many_threads_are_counted_exactly() {
    let probes = HostProbes::new();
    let map = counts_map();
    probes.attach(&by_kernel(), std::slice::from_ref(&map)).expect("attach");
    assert!(probes.armed(HostEvent::Launch, Phase::Enter));
    assert!(!probes.armed(HostEvent::Launch, Phase::Exit));
    assert!(!probes.armed(HostEvent::Memcpy, Phase::Enter));
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 5_000;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let probes = &probes;
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    probes.fire(Phase::Enter, &mut launch(i % 3 + t * 100));
                    // Nothing is attached after the call: no run.
                    probes.fire(Phase::Exit, &mut launch(i % 3));
                }
            });
        }
    });
    let counts = HashMap::<u64, u64>::from_raw(map).expect("a hash map");
    for t in 0..THREADS {
        let expected = [PER_THREAD.div_ceil(3), (PER_THREAD + 1) / 3, PER_THREAD / 3];
        for (k, n) in expected.iter().enumerate() {
            assert_eq!(counts.get(&(k as u64 + t * 100)), Some(*n), "kernel {k} of thread {t}");
        }
    }
    let health = probes.health();
    assert_eq!(health.runs, THREADS * PER_THREAD);
    assert_eq!((health.faults, health.rejected, health.reentered), (0, 0, 0));
}

#[test]
fn detached_probes_stop_and_others_go_on() {
    let probes = HostProbes::new();
    let (first, second) = (counts_map(), counts_map());
    let p = by_kernel();
    let a = probes.attach(&p, std::slice::from_ref(&first)).expect("attach");
    let b = probes.attach(&p, std::slice::from_ref(&second)).expect("attach");
    probes.fire(Phase::Enter, &mut launch(7));
    assert!(probes.detach(a));
    assert!(!probes.detach(a), "detached once");
    probes.fire(Phase::Enter, &mut launch(7));
    let count = |m: &RawMap| HashMap::<u64, u64>::from_raw(m.clone()).expect("a map").get(&7);
    assert_eq!((count(&first), count(&second)), (Some(1), Some(2)));
    assert!(probes.detach(b));
    assert!(!probes.armed(HostEvent::Launch, Phase::Enter));
    probes.fire(Phase::Enter, &mut launch(7));
    assert_eq!(count(&second), Some(2));
    assert_eq!(probes.health().runs, 3);
}

#[test]
fn exit_probes_see_the_result_and_the_time_spent() {
    // Sums `duration_ns` (byte 32) into element 0 and counts failed calls (`result`, byte 76,
    // not 0) in element 1 of an array.
    let text = "
        mov %r6, %r1
        stw [%r10-4], 0
        lddw %r1, map[0]
        mov %r2, %r10
        add %r2, -4
        call 1
        jeq %r0, 0, out
        ldxdw %r1, [%r6+80]
        lock add [%r0+0], %r1
        ldxw %r1, [%r6+72]
        jeq %r1, 0, out
        mov %r1, 1
        lock add [%r0+8], %r1
    out:
        mov %r0, 0
        exit";
    let def = vec![MapDef {
        name: "calls".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 16,
        capacity: 1,
    }];
    let probes = HostProbes::new();
    static TOTALS: Array<[u64; 2]> = Array::with_len(1);
    let exit = AttachPoint::Host(HostEvent::Launch, Phase::Exit);
    probes.attach(&program(text, def.clone(), exit), &[TOTALS.raw().clone()]).expect("attach");
    for (duration_ns, result) in [(100, 0), (250, 1), (50, 0)] {
        let mut ctx = LaunchCtx { duration_ns, result, ..launch(1) };
        probes.fire(Phase::Exit, &mut ctx);
    }
    assert_eq!(TOTALS.get(0).expect("element 0"), [400, 1]);
    // Posted, the context (88 bytes read: two queue slots) reaches the probe whole, through a
    // poster as through the set.
    let posting: &'static HostProbes = Box::leak(Box::new(HostProbes::new()));
    static POSTED: Array<[u64; 2]> = Array::with_len(1);
    posting.attach(&program(text, def.clone(), exit), &[POSTED.raw().clone()]).expect("attach");
    assert_eq!(posting.context_needed(HostEvent::Launch, Phase::Exit), 88);
    let poster = posting.poster();
    for (duration_ns, result) in [(100, 0), (250, 1), (50, 0)] {
        poster.post(Phase::Exit, &LaunchCtx { duration_ns, result, ..launch(1) });
        posting.post(Phase::Exit, &LaunchCtx { duration_ns, result, ..launch(1) });
    }
    posting.flush();
    assert_eq!(POSTED.get(0).expect("element 0"), [800, 2]);
}

#[test]
fn programs_that_cannot_run_are_refused_and_counted() {
    let probes = HostProbes::new();
    let device = program("mov %r0, 0\nexit", vec![], AttachPoint::Device(DeviceEvent::GlobalLoad));
    assert!(matches!(probes.attach(&device, &[]), Err(AttachError::NotHost(_))));
    // Reads past the end of the 128-byte LaunchCtx: the verifier refuses it, so it never reaches
    // a set (`attach` takes a `Verified`).
    let enter = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
    assert!(verify(&unverified("ldxdw %r0, [%r1+128]\nexit", vec![], enter)).is_err());
    // A map of the wrong kind for the table's entry.
    let wrong = Array::<u64>::with_len(64);
    let e = probes.attach(&by_kernel(), &[wrong.raw().clone()]).expect_err("refused");
    assert!(matches!(e, AttachError::Load(_)), "{e}");
    assert_eq!(probes.health().rejected, 2);
    assert!(!probes.armed(HostEvent::Launch, Phase::Enter));
    // Firing with nothing attached runs nothing.
    probes.fire(Phase::Enter, &mut launch(1));
    assert_eq!(probes.health().runs, 0);
}

#[test]
fn each_context_belongs_to_its_event() {
    assert_eq!(<LaunchCtx as HostContext>::EVENT, HostEvent::Launch);
    assert_eq!(<MemcpyCtx as HostContext>::EVENT, HostEvent::Memcpy);
    assert_eq!(<AllocCtx as HostContext>::EVENT, HostEvent::Alloc);
    assert_eq!(<SyncCtx as HostContext>::EVENT, HostEvent::Sync);
    assert_eq!(<ModuleLoadCtx as HostContext>::EVENT, HostEvent::ModuleLoad);
    // Every event and phase has its own counter.
    let events = [
        HostEvent::Launch,
        HostEvent::Memcpy,
        HostEvent::Alloc,
        HostEvent::Sync,
        HostEvent::ModuleLoad,
    ];
    let mut seen: Vec<usize> =
        events.iter().flat_map(|&e| [slot(e, Phase::Enter), slot(e, Phase::Exit)]).collect();
    seen.sort();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}

#[test]
fn posted_events_run_on_the_worker_or_at_a_flush_exactly_once() {
    let probes: &'static HostProbes = Box::leak(Box::new(HostProbes::new()));
    let map = counts_map();
    probes.attach(&by_kernel(), std::slice::from_ref(&map)).expect("attach");
    // More than a queue holds, from each of several threads: some run on the worker, some at
    // the posters when their queue is full, the rest at the flush; each exactly once.
    const THREADS: u64 = 3;
    let per_thread = deferred::SLOTS as u64 * 3 + 17;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for i in 0..per_thread {
                    probes.post(Phase::Enter, &launch(i % 2 + t * 10));
                }
            });
        }
    });
    probes.flush();
    let counts = HashMap::<u64, u64>::from_raw(map).expect("a hash map");
    for t in 0..THREADS {
        assert_eq!(counts.get(&(t * 10)), Some(per_thread.div_ceil(2)), "thread {t}, kernel 0");
        assert_eq!(counts.get(&(t * 10 + 1)), Some(per_thread / 2), "thread {t}, kernel 1");
    }
    assert_eq!(probes.health().runs, THREADS * per_thread);
    // The worker runs what is posted without a flush, shortly.
    probes.post(Phase::Enter, &launch(99));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while counts.get(&99).is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(deferred::SWEEP);
    }
    assert_eq!(counts.get(&99), Some(1), "the worker ran it");
    // Nothing attached at a phase: nothing queued.
    probes.post(Phase::Exit, &launch(98));
    probes.flush();
    assert_eq!(counts.get(&98), None);
    // The queues of threads that are gone go once they are empty, each event run first: the
    // scoped threads' and a hundred more's, each of which posts once and exits; this thread's
    // stays.
    for _ in 0..100 {
        std::thread::spawn(move || probes.post(Phase::Enter, &launch(1000)))
            .join()
            .expect("a thread that posts");
    }
    probes.flush();
    assert_eq!(counts.get(&1000), Some(100), "each exited thread's event ran");
    // (The worker's own sweep, holding the queues meanwhile, may keep one for a sweep more.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while probes.registry.len() > 1 && std::time::Instant::now() < deadline {
        probes.flush();
        std::thread::sleep(deferred::SWEEP);
    }
    assert_eq!(probes.registry.len(), 1, "only this thread's queue is left");
}

#[test]
fn the_words_a_probe_reads_are_known() {
    let probes = HostProbes::new();
    let enter = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
    // kernel_id (word 0) only.
    probes.attach(&by_kernel(), &[counts_map()]).expect("attach");
    assert_eq!(probes.context_words(HostEvent::Launch, Phase::Enter), 0b1);
    assert_eq!(probes.context_needed(HostEvent::Launch, Phase::Enter), 8);
    // grid[0] and grid[1] (bytes 40..48: word 5) and block[2] (bytes 60..64: word 7).
    let grid = "ldxw %r0, [%r1+40]\nldxw %r2, [%r1+44]\nldxw %r3, [%r1+60]\nexit";
    probes.attach(&program(grid, vec![], enter), &[]).expect("attach");
    assert_eq!(probes.context_words(HostEvent::Launch, Phase::Enter), 0b1010_0001);
    assert_eq!(probes.context_needed(HostEvent::Launch, Phase::Enter), 64);
    assert_eq!(probes.context_words(HostEvent::Launch, Phase::Exit), 0);
}

#[test]
fn a_child_forked_while_threads_post_can_use_the_set() {
    let probes = global();
    // The worker thread writes the health mirror after each sweep, under its lock.
    let g = Geometry::new(MapKind::Array, 4, 8, 4, 1, 0).expect("geometry");
    probes.mirror_health(RawMap::create(g, &Placement::Process).expect("a map"));
    let map = counts_map();
    // Counts syncs by handle (SyncCtx::handle, byte 0), as the launch probe counts kernels.
    let by_handle = count_by_handle::probe().verified().expect("builds");
    let id = probes.attach(by_handle, std::slice::from_ref(&map)).expect("attach");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // Attaching and detaching changes the set's generation, so the other threads reload their
        // VMs, reading the attached probes under the set's lock, all the time.
        let churn = &stop;
        s.spawn(move || {
            while !churn.load(Ordering::Relaxed) {
                if let Ok(id) = probes.attach(by_handle, &[counts_map()]) {
                    probes.detach(id);
                }
            }
        });
        for t in 0..3u64 {
            let stop = &stop;
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    probes.post(Phase::Enter, &SyncCtx { handle: t, ..Default::default() });
                    probes.fire(Phase::Enter, &mut SyncCtx { handle: t, ..Default::default() });
                }
            });
        }
        for _ in 0..20 {
            // SAFETY: the child only uses the set (locks, allocation: what fork handlers make
            // safe) and ends with _exit.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // Would hang on a lock some parent thread held at the fork.
                let again = probes.attach(by_handle, std::slice::from_ref(&counts_map()));
                probes.post(Phase::Enter, &SyncCtx { handle: 9, ..Default::default() });
                probes.flush();
                let ok = again.is_ok() && probes.detach(again.unwrap());
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) };
            }
            let mut status = 0;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                // SAFETY: waits for our own child without blocking.
                let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                if r == pid {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    // SAFETY: our own child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    stop.store(true, Ordering::Relaxed);
                    panic!("a child forked while threads posted is stuck");
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        }
        stop.store(true, Ordering::Relaxed);
    });
    probes.detach(id);
}

#[test]
fn the_built_in_probes_fill_the_report_and_the_prometheus_metrics() {
    use super::builtin::{Histogram, MetricsOptions, Value, bucket_bound, metrics, otlp_json};
    let (probes, b) = super::builtin::sample::filled();
    // A failed allocation is not counted; a free of an unknown address releases no bytes.
    let alloc =
        AllocCtx { ptr: 0x7000, bytes: 1 << 20, kind: AllocCtx::DEVICE, ..Default::default() };
    probes.fire(Phase::Exit, &mut AllocCtx { result: 2, ..alloc });
    let free = AllocCtx { ptr: 0x9000, op: AllocCtx::FREE, ..Default::default() };
    probes.fire(Phase::Exit, &mut free.clone());

    let report = b.report(None);
    for line in [
        "launches 4",
        "shapes blocks 1024 threads 1120",
        "copies htod 2 9096",
        "copies dtoh 1 1",
        "sets 1 100",
        "allocations device 1 1048576",
        "frees device 2 0",
        "freed 1048576",
        "syncs stream 1",
        "syncs context 1",
        "modules other 1 0",
    ] {
        assert!(report.lines().any(|l| l == line), "{line:?} in\n{report}");
    }
    assert!(report.contains(" 3 _Z1av\n") && report.contains(" 1 (graph)\n"), "{report}");
    assert!(report.contains(" 1 (captured)\n"), "a launch captured into a graph: {report}");

    // The metrics (which `egpu run` renders in Prometheus's formats: tests/cli_metrics.rs).
    let all = metrics(std::slice::from_ref(&b), MetricsOptions::default());
    let value = |name: &str, labels: &[(&str, &str)]| -> Value {
        let m = all.iter().find(|m| m.prometheus == name).unwrap_or_else(|| panic!("{name}"));
        let p = m.points.iter().find(|p| {
            p.attributes.len() == labels.len() + 1
                && p.attributes[0] == ("pid", "4242".into())
                && labels.iter().zip(&p.attributes[1..]).all(|(l, a)| l.0 == a.0 && l.1 == a.1)
        });
        p.unwrap_or_else(|| panic!("{name} {labels:?} in {m:?}")).value.clone()
    };
    let counter = |name, n| assert_eq!(value(name, &[]), Value::Counter(n), "{name}");
    // Counted per device too: a series per device (all on device 0 here).
    let on_0 = |name, n| assert_eq!(value(name, &[("gpu_index", "0")]), Value::Counter(n));
    on_0("gpu_cuda_kernel_launch_calls_total", 4);
    on_0("gpu_cuda_graph_launch_calls_total", 1);
    counter("egpu_cuda_kernel_captured_calls_total", 1);
    on_0("gpu_cuda_memory_allocations_bytes_total", 1 << 20);
    on_0("gpu_cuda_memset_bytes_total", 100);
    counter("gpu_cuda_memory_free_bytes_total", 1 << 20);
    counter("gpu_cuda_stream_synchronize_calls_total", 1);
    counter("gpu_cuda_device_synchronize_calls_total", 1);
    counter("egpu_modules_not_instrumentable_total", 1);
    let histogram = |name, labels: &[(&str, &str)]| match value(name, labels) {
        Value::Histogram(h) => h,
        other => panic!("{name}: {other:?}"),
    };
    // The count of values up to `le`, as Prometheus's cumulative buckets say it.
    let upto = |h: &Histogram, le: u64| -> u64 {
        h.buckets
            .iter()
            .enumerate()
            .filter(|(i, _)| bucket_bound(*i as u32) <= le)
            .map(|e| e.1)
            .sum()
    };
    // Grids of 8 blocks (4 bits) three times, of 1000 (10 bits) once; none for the graph.
    let grid = histogram("gpu_cuda_kernel_grid_size", &[]);
    assert_eq!((upto(&grid, 7), upto(&grid, 15), upto(&grid, 1023)), (0, 3, 4), "{grid:?}");
    assert_eq!((grid.count, grid.sum, grid.buckets.len()), (4, 1024, 41));
    let block = histogram("gpu_cuda_kernel_block_size", &[]);
    assert_eq!((upto(&block, 2047), block.sum), (4, 1120));
    let htod = histogram("gpu_cuda_memory_copies_bytes", &[("cuda_memcpy_kind", "HostToDevice")]);
    assert_eq!((upto(&htod, 4095), upto(&htod, 8191), htod.sum), (0, 2, 9096));
    let dtoh = histogram("gpu_cuda_memory_copies_bytes", &[("cuda_memcpy_kind", "DeviceToHost")]);
    assert_eq!(dtoh.count, 1);
    let named =
        metrics(std::slice::from_ref(&b), MetricsOptions::default().with_kernel_names(true));
    let calls = &named[0].points;
    assert_eq!(calls[0].attributes[1], ("cuda_kernel_name", "_Z1av".into()), "{calls:?}");
    assert_eq!((&calls[0].value, &calls[1].attributes[1].1), (&Value::Counter(3), &"k\"2".into()));

    // The same metrics as an OTLP/HTTP JSON export request, under the OpenTelemetry names.
    let json = otlp_json(&[b], MetricsOptions::default().with_kernel_names(true), 1, 2);
    for part in [
        "{\"resourceMetrics\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\"",
        "{\"key\":\"process.pid\",\"value\":{\"intValue\":\"4242\"}}",
        "{\"name\":\"gpu.cuda.kernel.launch.calls\",\"unit\":\"{call}\",",
        "\"sum\":{\"aggregationTemporality\":2,\"isMonotonic\":true,",
        "{\"key\":\"cuda.kernel.name\",\"value\":{\"stringValue\":\"k\\\"2\"}}",
        "\"startTimeUnixNano\":\"1\",\"timeUnixNano\":\"2\",\"asInt\":\"3\"}",
        "{\"name\":\"gpu.cuda.graph.launch.calls\",",
        "{\"name\":\"gpu.cuda.kernel.grid.size\",\"unit\":\"{block}\",",
        "\"histogram\":{\"aggregationTemporality\":2,",
        "{\"name\":\"gpu.cuda.memory.copies\",\"unit\":\"By\",",
        "{\"key\":\"cuda.memcpy.kind\",\"value\":{\"stringValue\":\"HostToDevice\"}}",
        "\"count\":\"2\",\"sum\":9096,",
        "{\"name\":\"gpu.cuda.memory.allocations\",\"unit\":\"By\",",
        "{\"name\":\"gpu.cuda.memory.free.bytes\",",
        "{\"name\":\"egpu.probe.runs\",\"unit\":\"1\",",
    ] {
        assert!(json.contains(part), "{part} in\n{json}");
    }
    // Histograms: 41 bounds and 42 counts (the last past every bound), which add up to the count.
    let grid = &json[json.find("gpu.cuda.kernel.grid.size").expect("the grid sizes")..];
    let counts = &grid[grid.find("\"bucketCounts\":[").expect("counts") + 16..];
    let counts: Vec<u64> = counts[..counts.find(']').expect("end")]
        .split(',')
        .map(|n| n.trim_matches('"').parse().expect("a count"))
        .collect();
    let bounds = &grid[grid.find("\"explicitBounds\":[").expect("bounds") + 18..];
    let bounds = bounds[..bounds.find(']').expect("end")].split(',').count();
    assert_eq!((counts.len(), bounds), (42, 41));
    assert_eq!(counts.iter().sum::<u64>(), 4, "four launches: {counts:?}");
    let depth = json.chars().fold(0i64, |d, c| match c {
        '{' | '[' => d + 1,
        '}' | ']' => d - 1,
        _ => d,
    });
    assert_eq!(depth, 0, "balanced");
}

#[test]
fn kernel_and_synchronisation_times_are_histograms_in_seconds() {
    use super::builtin::{MetricsOptions, Value, metrics, otlp_json};
    let (_, b) = super::builtin::sample::filled();
    // The report: per kernel its launches timed, nanoseconds and buckets; the synchronisation.
    let report = b.report(None);
    for line in [" 2 8000 12:2 _Z1av", " 1 1000000 20:1 k\"2", "sync_time context 1 1500"] {
        assert!(report.contains(line), "{line:?} in\n{report}");
    }
    let histogram = |all: &[super::builtin::Metric], name: &str, label: Option<(&str, &str)>| {
        let m = all.iter().find(|m| m.prometheus == name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!((m.unit, m.kind), ("s", super::builtin::Kind::Histogram), "{name}");
        let p =
            m.points.iter().find(|p| label.is_none_or(|l| p.attributes[1] == (l.0, l.1.into())));
        match p.unwrap_or_else(|| panic!("{name} {label:?} in {m:?}")).value.clone() {
            Value::Histogram(h) => h,
            other => panic!("{name}: {other:?}"),
        }
    };
    // Without kernel names: one series per process, every kernel's launches.
    let all = metrics(std::slice::from_ref(&b), MetricsOptions::default());
    let h = histogram(&all, "gpu_cuda_kernel_duration_seconds", None);
    assert_eq!((h.count, h.sum, h.buckets.len()), (3, 1_008_000, 41));
    assert_eq!((h.buckets[12], h.buckets[20], h.buckets.iter().sum::<u64>()), (2, 1, 3));
    assert!((h.scaled_sum() - 1.008e-3).abs() < 1e-12 && (h.bound(12) - 4.095e-6).abs() < 1e-15);
    // With them: a series per kernel.
    let named =
        metrics(std::slice::from_ref(&b), MetricsOptions::default().with_kernel_names(true));
    let a =
        histogram(&named, "gpu_cuda_kernel_duration_seconds", Some(("cuda_kernel_name", "_Z1av")));
    assert_eq!((a.count, a.sum), (2, 8000));
    let sync = histogram(
        &all,
        "gpu_cuda_synchronize_duration_seconds",
        Some(("cuda_synchronize_kind", "Context")),
    );
    assert_eq!((sync.count, sync.sum, sync.buckets[11]), (1, 1500, 1));
    // OTLP: the bounds and the sum in seconds.
    let json = otlp_json(&[b], MetricsOptions::default(), 1, 2);
    let at =
        json.find("{\"name\":\"gpu.cuda.kernel.duration\",\"unit\":\"s\",").expect("the metric");
    let part = &json[at..];
    assert!(part.contains("\"count\":\"3\",\"sum\":0.001008,"), "{part}");
    assert!(part.contains("\"explicitBounds\":[0,1e-9,3e-9,7e-9,"), "{part}");
    assert!(json.contains("{\"name\":\"gpu.cuda.synchronize.duration\",\"unit\":\"s\","), "{json}");
}

#[test]
fn the_age_of_a_maps_device_part_is_reported_and_exported() {
    use super::builtin::{Builtin, MetricsOptions, Value, metrics, otlp_json, user_map_name};
    use egpu_maps::layout::Geometry;
    use egpu_maps::merge::DevicePart;
    use egpu_maps::{MapKind, Placement, RawMap};
    // A process of our own making, with one user map in shared memory.
    let pid = 0x3fff_0000 + (std::process::id() & 0xffff);
    let b = Builtin::create(pid, true).expect("maps in shared memory");
    let g = Geometry::new(MapKind::Array, 4, 8, 2, 1, 0).expect("a geometry");
    let name = user_map_name(pid, "BYTES");
    let raw = RawMap::create(g, &Placement::Shared(name.clone().into())).expect("a shared map");
    let unmerged = b.render_maps(&b.user_maps());
    assert!(!unmerged.contains("device part"), "{unmerged}");
    let age = |b: &Builtin| {
        let all = metrics(std::slice::from_ref(b), MetricsOptions::default());
        all.into_iter().find(|m| m.prometheus == "egpu_map_device_part_age_seconds")
    };
    assert!(age(&b).is_none(), "no device part, no age");
    // A device part merged into it: its age shows.
    let mut part = DevicePart::new(&g).expect("a part");
    let mut snapshot = vec![0u8; part.range().len()];
    snapshot[128..136].copy_from_slice(&7u64.to_le_bytes());
    part.merge(&snapshot, &raw, true).expect("merged");
    let report = b.render_maps(&b.user_maps());
    assert!(report.contains("map BYTES 0 7\ndevice part of BYTES merged "), "{report}");
    let ages = age(&b).expect("the ages");
    let point = &ages.points[0];
    assert_eq!(point.attributes, [("pid", pid.to_string()), ("map", "BYTES".into())]);
    let Value::Gauge(seconds) = point.value else { panic!("a gauge: {ages:?}") };
    assert!((0.0..60.0).contains(&seconds), "{ages:?}");
    let json = otlp_json(std::slice::from_ref(&b), MetricsOptions::default(), 1, 2);
    assert!(json.contains("{\"name\":\"egpu.map.device_part.age\",\"unit\":\"s\","), "{json}");
    assert!(
        json.contains("\"gauge\":{\"dataPoints\":[{\"attributes\":[{\"key\":\"map\""),
        "{json}"
    );
    // A key that is no known kernel's id prints as its number, not as an empty name.
    let hg = Geometry::new(MapKind::Hash, 8, 8, 4, 1, 0).expect("a geometry");
    let hash_name = user_map_name(pid, "BY_KERNEL");
    let hash = RawMap::create(hg, &Placement::Shared(hash_name.clone().into())).expect("a map");
    hash.update(&77u64.to_le_bytes(), &3u64.to_le_bytes(), egpu_maps::UpdateFlags::Any)
        .expect("an entry");
    let report = b.render_maps(&b.user_maps());
    assert!(report.contains("map BY_KERNEL 77 3\n"), "{report}");
    drop((raw, hash));
    let _ = egpu_maps::unlink_shared(&name);
    let _ = egpu_maps::unlink_shared(&hash_name);
    super::builtin::unlink(pid);
}

#[test]
fn a_probe_that_waits_runs_on_the_thread_that_posts() {
    // At a copy: writes the thread it runs on, then waits 200 µs (`egpu_delay_ns`).
    let text = "
        call 14
        stxdw [%r10-16], %r0
        mov %r6, 0
        stxw [%r10-4], %r6
        lddw %r1, map[0]
        mov %r2, %r10
        add %r2, -4
        mov %r3, %r10
        add %r3, -16
        mov %r4, 0
        call 2
        mov %r1, 200000
        mov %r2, 0
        call 65542
        mov %r0, 0
        exit";
    let def = vec![MapDef {
        name: "thread".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 8,
        capacity: 1,
    }];
    static THREAD: Array<u64> = Array::with_len(1);
    let probes: &'static HostProbes = Box::leak(Box::new(HostProbes::new()));
    let enter = AttachPoint::Host(HostEvent::Memcpy, Phase::Enter);
    probes.attach(&program(text, def, enter), &[THREAD.raw().clone()]).expect("attach");
    probes.attach(&by_kernel(), &[counts_map()]).expect("attach");
    assert!(probes.waits(HostEvent::Memcpy, Phase::Enter));
    assert!(
        !probes.waits(HostEvent::Launch, Phase::Enter)
            && !probes.waits(HostEvent::Memcpy, Phase::Exit)
    );
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = u64::from(unsafe { libc::gettid() } as u32);
    let poster = probes.poster();
    let through_set = || probes.post(Phase::Enter, &MemcpyCtx::default());
    let through_poster = || poster.post(Phase::Enter, &MemcpyCtx::default());
    let posts: [&dyn Fn(); 2] = [&through_set, &through_poster];
    for post in posts {
        THREAD.set(0, &0).expect("element 0");
        let start = std::time::Instant::now();
        post();
        // Not queued for the worker: it ran here, and the call waited for it.
        assert!(start.elapsed() >= std::time::Duration::from_micros(200));
        assert_eq!(THREAD.get(0).expect("element 0") & 0xffff_ffff, tid);
    }
    assert_eq!(probes.health().runs, 2);
    // The one-line fast path refuses it: the caller then posts, and the probe runs here.
    assert!(!poster.post_line(Phase::Enter, MemcpyCtx::default));
    assert_eq!(probes.health().runs, 2, "nothing queued");
}
