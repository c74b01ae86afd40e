//! The sets on the CPU VM, read back into a recording by the names the maps have; the
//! recording's text form; the sets injected into corpus kernels and checked by ptxas.

use egpu_ebpf::{KernelCtx, MemAccessCtx};
use egpu_maps::RawMap;

use super::sets::*;
use super::*;
use super::{Count, PageSize};

fn access(kernel_id: u64, size: u32, class: u32) -> MemAccessCtx {
    MemAccessCtx { kernel_id, size, class, ..MemAccessCtx::default() }
}

fn maps() -> Vec<(String, RawMap)> {
    [
        ("READS", READS.raw()),
        ("WRITES", WRITES.raw()),
        ("ATOMICS", ATOMICS.raw()),
        ("STARTS", STARTS.raw()),
        ("ENDS", ENDS.raw()),
        ("RUNS", RUNS.raw()),
        ("SITES", SITES.raw()),
        ("PAGES", super::pages::PAGES.raw()),
        ("CONTENDED", super::pages::CONTENDED.raw()),
    ]
    .into_iter()
    .map(|(name, raw)| (name.to_string(), raw.clone()))
    .collect()
}

#[test]
fn the_sets_fill_a_recording() {
    let mut vms = counts().map(|p| p.vm().expect("a VM"));
    let (k1, k2) = (0x11, 0x22);
    // (probe: 0 loads, 1 stores, 2 atomics; the access)
    for (probe, mut ctx) in [
        (0, access(k1, 4, MemAccessCtx::LOAD_STORE)),
        (0, access(k1, 16, MemAccessCtx::LOAD_STORE)),
        (0, access(k1, 16, MemAccessCtx::ASYNC_COPY)),
        (0, access(k2, 4096, MemAccessCtx::TENSOR_COPY)),
        (1, access(k1, 8, MemAccessCtx::LOAD_STORE)),
        (1, access(k2, 128, MemAccessCtx::TENSOR_MAP)),
        (2, access(k2, 4, MemAccessCtx::ATOMIC)),
    ] {
        vms[probe].run_ctx(&mut ctx).expect("runs");
    }
    let [mut starts, mut ends] = timing().map(|p| p.vm().expect("a VM"));
    let kernel = |launch_id, block: u32, thread: u32| KernelCtx {
        kernel_id: k1,
        launch_id,
        block: [block, 0, 0],
        thread: [thread, 0, 0],
        grid_dim: [4, 1, 1],
        block_dim: [64, 1, 1],
        ..KernelCtx::default()
    };
    // Launch 9: only block 0's first thread starts it; every block's first thread ends it.
    for (block, thread) in [(1, 0), (0, 5), (0, 0)] {
        starts.run_ctx(&mut kernel(9, block, thread)).expect("runs");
    }
    for block in 0..4 {
        ends.run_ctx(&mut kernel(9, block, 0)).expect("runs");
        ends.run_ctx(&mut kernel(9, block, 1)).expect("runs");
    }
    let header = Header {
        format: record::FORMAT.into(),
        version: record::VERSION,
        page_bytes: 4096,
        ..Header::default()
    };
    let launched = [(k1, 1, "one".to_string()), (0x33, 2, "cublas".to_string())];
    // Site 3 of k1: two one-lane requests of 4 bytes, one within a sector, one across two.
    let [mut pattern_loads, ..] = pattern().map(|p| p.vm().expect("a VM"));
    for addr in [64, 30] {
        let mut ctx = MemAccessCtx { addr, site: 3, ..access(k1, 4, MemAccessCtx::LOAD_STORE) };
        pattern_loads.run_ctx(&mut ctx).expect("runs");
    }
    // Pages of 4 KiB: two accesses in page 5 (one an atomic at 0x5008), one in page 9.
    let [mut page_loads, _, mut page_atomics] =
        super::pages::pages(12).expect("4 KiB").map(|p| p.vm().expect("a VM"));
    for addr in [0x5000, 0x9ff8] {
        let mut ctx = MemAccessCtx { addr, ..access(k1, 8, MemAccessCtx::LOAD_STORE) };
        page_loads.run_ctx(&mut ctx).expect("runs");
    }
    page_atomics
        .run_ctx(&mut MemAccessCtx { addr: 0x500c, ..access(k1, 4, MemAccessCtx::ATOMIC) })
        .expect("runs");
    let seen = Seen {
        launched: &launched,
        instrumented: &|id| id != 0x33,
        name: &|id| format!("kernel {id:x}"),
        site: &|kernel, site| (kernel == k1 && site == 3).then_some((120, "load")),
    };
    let recording = Recording::collect(header, &maps(), &seen);
    let by = |name: &str| recording.kernels.iter().find(|k| k.name == name).expect(name).clone();
    let one = by("one");
    let t = one.traffic.expect("counted");
    assert_eq!(
        (t.loads, t.loaded, t.asyncs, t.async_bytes, t.stores, t.stored),
        (2, 20, 1, 16, 1, 8)
    );
    assert_eq!((t.read(), t.written(), t.total()), (36, 8, 44));
    assert_eq!((one.launches, one.timed), (1, 1));
    let two = by("kernel 22");
    let t = two.traffic.expect("counted");
    assert_eq!(
        (t.tensor_loads, t.tensor_loaded, t.stores, t.stored, t.atomics, t.atomic),
        (1, 4096, 1, 128, 1, 4)
    );
    assert!(two.instrumented && two.launches == 0);
    let cublas = by("cublas");
    assert!(!cublas.instrumented && cublas.traffic.is_none() && cublas.launches == 2);
    let [launch] = recording.launches.as_slice() else { panic!("{:?}", recording.launches) };
    assert_eq!((launch.grid, launch.blocks, launch.threads, launch.runs), (9, 4, 64, 1));
    assert!(launch.end_ns >= launch.start_ns && launch.start_ns > 0, "{launch:?}");
    assert_eq!(one.gpu_ns, launch.duration_ns());
    let [site] = recording.sites.as_slice() else { panic!("{:?}", recording.sites) };
    assert_eq!(
        (site.site, site.line, site.requests.requests, site.requests.sectors),
        (3, Some(120), 2, 3)
    );
    assert_eq!((site.requests.minimum, site.requests.bytes, site.requests.lanes), (2, 8, 2));
    assert_eq!(site.access.as_deref(), Some("load"));
    // On the CPU a request is a lane alone: no stride, one address.
    assert_eq!((site.requests.broadcast, site.requests.unit, site.requests.gather), (2, 0, 0));
    assert_eq!(site.requests.stride(), Some((super::Stride::Broadcast, 1.0)));
    assert_eq!(one.pattern.map(|p| p.efficiency()), Some(2.0 / 3.0));
    let pages = one.pages.clone().expect("pages");
    assert_eq!((pages.distinct, pages.accesses), (2, 3));
    assert_eq!(pages.hottest[0], Count { address: 0x5000, count: 2 });
    assert_eq!(pages.contended, [Count { address: 0x5008, count: 1 }]);

    // The text form gives the same back; the table names every kernel.
    let text = recording.to_jsonl();
    assert!(
        text.starts_with("{\"type\":\"header\",\"format\":\"egpu-mem\",\"version\":1"),
        "{text}"
    );
    assert_eq!(Recording::parse(&text).expect("parses"), recording);
    let table = table::render(&recording);
    assert!(recording.header.refused.is_empty(), "{:?}", recording.header.refused);
    let header = table.lines().nth(1).expect("the header");
    assert!(header.ends_with("B/access coalesced    pages"), "{header}");
    let shown = ["one", "kernel 22", "cublas", "not instrumentable", "36 B", "67%", "PTX line 120"];
    for name in shown.into_iter().chain(["one contends at 0x5008: 1 atomics there"]) {
        assert!(table.contains(name), "{name} in\n{table}");
    }
}

#[test]
fn bad_recordings_are_refused_with_their_reason() {
    let header = "{\"type\":\"header\",\"format\":\"egpu-mem\",\"version\":1,\"egpu\":\"\",\"device\":\"\",\"driver\":\"\",\"sms\":0,\"peak_bytes_per_second\":0.0,\"pid\":1,\"command\":\"\",\"sets\":[]}";
    assert!(Recording::parse(header).is_ok());
    let cases: [(String, &str); 6] = [
        (String::new(), "empty"),
        ("{\"type\":\"kernel\"}".into(), "not an egpu-mem header"),
        (header.replace("\"version\":1", "\"version\":7"), "version 7"),
        (format!("{header}\n{{\"type\":\"launch\",\"grid\":\"x\"}}"), "line 2"),
        (format!("{header}\n{header}"), "a second header"),
        (format!("{header}\nnot json"), "line 2"),
    ];
    for (text, says) in cases {
        let e = Recording::parse(&text).expect_err(&text).to_string();
        assert!(e.contains(says), "{text:?}: {e}");
    }
    // Numbers as large as they come sum to the largest, and print.
    let max = u64::MAX;
    let huge = format!(
        "{header}\n{{\"type\":\"kernel\",\"name\":\"k\",\"id\":\"0a\",\"launches\":{max},\"instrumented\":true,\"traffic\":{{\"loads\":{max},\"loaded\":{max},\"stores\":{max},\"stored\":{max},\"atomics\":{max},\"atomic\":{max},\"asyncs\":{max},\"async\":{max},\"tensor_loads\":0,\"tensor_loaded\":0,\"tensor_stores\":0,\"tensor_stored\":0}},\"timed\":{max},\"gpu_ns\":{max}}}\n{{\"type\":\"kernel\",\"name\":\"j\",\"id\":\"0b\",\"launches\":{max},\"instrumented\":false,\"timed\":{max},\"gpu_ns\":{max}}}\n"
    );
    let table = table::render(&Recording::parse(&huge).expect("parses"));
    assert!(table.contains("18.45 EB") || table.contains("18446744073709551615"), "{table}");
    // Every prefix of a good recording, and every byte changed, is read or refused: no panic.
    let good = format!(
        "{header}\n{{\"type\":\"launch\",\"grid\":3,\"kernel\":\"0a\",\"start_ns\":1,\"end_ns\":5,\"blocks\":1,\"threads\":32}}\n"
    );
    // A launch line without `runs` (a field added within version 1) ran once.
    assert_eq!(Recording::parse(&good).expect("parses").launches[0].runs, 1);
    for cut in 0..good.len() {
        let _ = Recording::parse(&good[..cut]);
    }
    let mut bytes = good.clone().into_bytes();
    for i in 0..bytes.len() {
        let was = bytes[i];
        bytes[i] = b'}';
        let _ = Recording::parse(&String::from_utf8_lossy(&bytes));
        bytes[i] = was;
    }
}

#[test]
fn the_pack_names_each_set_once() {
    let pack = pack(&[Set::Counts, Set::Timing, Set::Counts], PageSize::default()).expect("a pack");
    assert_eq!(pack.probes().len(), 5);
    let again = crate::pack::Pack::parse(&pack.to_text()).expect("read back");
    assert_eq!(again.probes().len(), 5);
    // 14 device probes, and the `allocs` set's three and its host probes at allocations and
    // copies.
    assert_eq!(super::pack(&Set::ALL, PageSize::Mib2).expect("every set").probes().len(), 19);
    assert_eq!(
        ("4k".parse(), "64KiB".parse(), "2m".parse()),
        (Ok(PageSize::Kib4), Ok(PageSize::Kib64), Ok(PageSize::Mib2))
    );
    assert!(
        "8k".parse::<PageSize>().expect_err("no such size").to_string().contains("4k, 64k or 2m")
    );
    assert_eq!("timing".parse::<Set>(), Ok(Set::Timing));
    assert_eq!("timeline".parse::<Set>(), Ok(Set::Timeline));
    let e = "heatmap".parse::<Set>().expect_err("not a set").to_string();
    assert!(e.contains("counts, timing, pattern, pages, timeline"), "{e}");
}

#[test]
fn the_sets_in_corpus_kernels_pass_ptxas() {
    use egpu_device::inject::{DeviceProbe, Kernels, inject};
    use egpu_device::translate::DeviceMap;
    let Some(ptxas) = egpu_device::testing::require_ptxas() else { return };
    let Some(nvcc) = egpu_device::testing::require_nvcc() else { return };
    let kernels = egpu_test_support::workspace_path("tests/kernels");
    let sources: Vec<(&str, String)> = ["saxpy", "atomics", "async_copy", "vectors"]
        .into_iter()
        .map(|name| {
            let cu = kernels.join(format!("{name}.cu"));
            (name, nvcc.compile_ptx(&cu, "sm_90").expect("PTX"))
        })
        .collect();
    // Every set together, and alone the sets whose code differs when alone: `counts` (its adds
    // in registers, the value looked up when a thread exits), `counts,timing` (the default),
    // `pages` (its adds combined per page).
    let all: &[Set] = &Set::ALL;
    let lines = super::Sampling::DEFAULT.of(super::SampleBy::Lines);
    let combinations: [(&[Set], super::Sampling); 5] = [
        (all, super::Sampling::DEFAULT),
        (&[Set::Counts], super::Sampling::DEFAULT),
        (&[Set::Counts, Set::Timing], super::Sampling::DEFAULT),
        (&[Set::Pages], super::Sampling::DEFAULT),
        (&[Set::Timeline], lines),
    ];
    for (sets, sampling) in combinations {
        let pack = super::pack_sampled(sets, PageSize::Kib64, sampling).expect("a pack");
        // The device probes (the `allocs` set has a host probe too).
        let on_device = |p: &&crate::pack::PackedProbe| {
            matches!(p.program.program().attach_point(), egpu_ebpf::AttachPoint::Device(_))
        };
        // As the preloaded library binds them: maps only added to spread over 16 per-SM copies.
        let bound: Vec<Vec<DeviceMap>> = pack
            .probes()
            .iter()
            .filter(on_device)
            .map(|p| {
                let adds = egpu_device::translate::adds_only(&p.program);
                p.maps
                    .iter()
                    .enumerate()
                    .map(|(i, &geometry)| DeviceMap {
                        addr: 0x7f00_0000_0000 + ((i as u64) << 28),
                        geometry,
                        live: false,
                        spread: if adds[i] { 16 } else { 0 },
                        // Rings are drained while kernels run, as the preloaded library binds
                        // them.
                        drained: geometry.kind == egpu_ebpf::MapKind::RingBuf,
                    })
                    .collect()
            })
            .collect();
        let device: Vec<DeviceProbe<'_>> = pack
            .probes()
            .iter()
            .filter(on_device)
            .zip(&bound)
            .map(|(p, maps)| DeviceProbe { program: &p.program, kernels: Kernels::All, maps })
            .collect();
        for (name, ptx) in &sources {
            let what = format!("{name} under {sets:?}");
            let injected = inject(ptx, &device).unwrap_or_else(|e| panic!("{what}: {e}"));
            if sets == all {
                assert!(
                    injected.ptx.contains("%gridid") && injected.ptx.contains("%globaltimer"),
                    "{what}"
                );
                // The timeline's ring records, published by the warp's leader, its tickets
                // taken by the batch (the kernel's registers).
                assert!(injected.ptx.contains("st.release.gpu.global.u64"), "{what}");
                assert!(injected.ptx.contains(".reg .b64 %egpu_rn0, %egpu_re0"), "{what}");
            }
            if sets == [Set::Pages] && *name == "saxpy" {
                // A thread's counts by page in its registers, in a kernel with a loop that
                // declares its block size (nvcc's saxpy does not: not there): a hit adds to the
                // sum of its page with no search and no atomic, the warp going on together when
                // all its lanes hit; the sums reach memory at the exits.
                assert!(!injected.ptx.contains("%egpu_hc0"), "{what}");
                let declared = ptx.replacen(")\n{", ")\n.reqntid 256\n{", 1);
                assert_ne!(&declared, ptx, "{what}: the kernel's body");
                let injected = inject(&declared, &device).unwrap_or_else(|e| panic!("{what}: {e}"));
                for sum in ["%egpu_hc0, %egpu_hc0", "%egpu_hd0, %egpu_hd0"] {
                    assert!(injected.ptx.contains(&format!("add.s64 {sum}, 1;")), "{what}");
                }
                assert!(injected.ptx.contains("vote.sync.all.pred"), "{what}");
                assert!(injected.ptx.contains("$egpu_flush"), "{what}");
                ptxas.check(&injected.ptx, "sm_90").unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            // Every probe's frame in registers (no pointer into it passed down).
            assert!(!injected.ptx.contains(".local"), "{what}: a frame in local memory");
            ptxas.check(&injected.ptx, "sm_90").unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    }
}

#[test]
fn a_full_map_is_said_full() {
    use super::pages::Page;
    use egpu_maps::{HashMap, Placement};
    let pages = HashMap::<Page, u64>::create(1, Placement::Process).expect("a map");
    for page in [1, 2, 3] {
        let _ = pages.insert(&Page { kernel: 5, page }, &1);
    }
    let refused = pages.refused();
    assert!(refused >= 1, "{refused}");
    let seen =
        Seen { launched: &[], instrumented: &|_| true, name: &|_| "k".into(), site: &|_, _| None };
    let maps = [("PAGES".to_string(), pages.raw().clone())];
    let recording =
        Recording::collect(Header { page_bytes: 4096, ..Header::default() }, &maps, &seen);
    assert_eq!(recording.header.refused.get("PAGES"), Some(&refused));
    let table = table::render(&recording);
    assert!(table.contains(&format!("PAGES was full: {refused} entries refused")), "{table}");
    let again = Recording::parse(
        &recording
            .to_jsonl()
            .replace("\"format\":\"\"", "\"format\":\"egpu-mem\"")
            .replace("\"version\":0", "\"version\":1"),
    );
    assert_eq!(again.expect("parses").header.refused, recording.header.refused);
}

#[test]
fn event_times_are_kept_read_back_and_shown() {
    let header = Header {
        format: record::FORMAT.into(),
        version: record::VERSION,
        pid: 7,
        ..Header::default()
    };
    let launched = [(0x0a, 4, "at::native::vectorized".to_owned()), (0x0b, 2, "probed".to_owned())];
    let seen = Seen {
        launched: &launched,
        instrumented: &|id| id == 0x0b,
        name: &|id| format!("kernel {id}"),
        site: &|_, _| None,
    };
    let mut recording = Recording::collect(header, &[], &seen);
    assert!(recording.header.events.is_none());
    // Before: written without the new fields, which older readers never saw.
    let before = recording.to_jsonl();
    assert!(!before.contains("event") && Recording::parse(&before).is_ok(), "{before}");
    let counts = EventTiming { timed: 7, captured: 1, pool_full: 2, failed: 0, lost: 0 };
    // The ATen kernel 4 times, 0.5 ms in all; one kernel no launch was seen of (a graph's).
    let times = [(0x0a, 4, 500_000), (0x0c, 3, 900_000)];
    recording.add_event_times(&times, counts, &seen);
    let aten = &recording.kernels[1];
    assert_eq!(
        (aten.name.as_str(), aten.event_launches, aten.event_ns),
        ("at::native::vectorized", 4, 500_000)
    );
    // Most GPU time first: the kernel only the events timed leads.
    assert_eq!(
        (recording.kernels[0].name.as_str(), recording.kernels[0].gpu_time_ns()),
        ("kernel 12", 900_000)
    );
    assert_eq!(recording.kernels[2].event_launches, 0);
    let text = recording.to_jsonl();
    assert!(text.contains("\"event_launches\":4,\"event_ns\":500000"), "{text}");
    assert!(
        text.contains(
            "\"events\":{\"timed\":7,\"captured\":1,\"pool_full\":2,\"failed\":0,\"lost\":0}"
        ),
        "{text}"
    );
    let again = Recording::parse(&text).expect("parses");
    assert_eq!(again, recording);
    // The table: GPU time from the events, marked so, and what they skipped.
    let table = table::render(&again);
    let row = table.lines().find(|l| l.starts_with("at::native::vectorized")).expect("its row");
    assert!(row.contains("0.500 ms (events)") && row.contains("not instrumentable"), "{row}");
    let probed = table.lines().find(|l| l.starts_with("probed")).expect("its row");
    assert!(!probed.contains("(events)"), "{probed}");
    assert!(table.contains("(events): GPU time from CUDA events around each launch: 7 launches timed, 1.400 ms; 1 not timed in stream captures; 2 not timed with every pair of events in flight"), "{table}");
    // A kernel line with the fields and a header without `events` read as well.
    let old_header = before.lines().next().expect("a header");
    let line = "{\"type\":\"kernel\",\"name\":\"k\",\"id\":\"0a\",\"launches\":1,\"instrumented\":false,\"traffic\":null,\"timed\":0,\"gpu_ns\":0,\"event_launches\":1,\"event_ns\":3}";
    let mixed = Recording::parse(&format!("{old_header}\n{line}\n")).expect("parses");
    assert_eq!((mixed.kernels[0].event_ns, mixed.header.events), (3, None));
    let bad = line.replace("\"event_ns\":3", "\"event_ns\":-3");
    let e = Recording::parse(&format!("{old_header}\n{bad}\n")).expect_err("negative");
    assert!(e.to_string().starts_with("line 2:"), "{e}");
}

#[test]
fn registers_as_loaded_are_kept_read_back_and_shown() {
    let header =
        Header { format: record::FORMAT.into(), version: record::VERSION, ..Header::default() };
    let header = Recording { header, ..Recording::default() }.to_jsonl();
    let kernel = |name: &str, instrumented: bool, extra: &str| {
        format!(
            "{{\"type\":\"kernel\",\"name\":\"{name}\",\"id\":\"0a\",\"launches\":1,\
             \"instrumented\":{instrumented},\"traffic\":null,\"timed\":0,\"gpu_ns\":0{extra}}}\n"
        )
    };
    // Without them, nothing is shown, and they read as unknown.
    let without =
        Recording::parse(&format!("{header}{}", kernel("saxpy", true, ""))).expect("parses");
    assert_eq!((without.kernels[0].registers, without.kernels[0].machine_registers), (0, 0));
    assert!(!table::render(&without).contains("registers per thread"));
    assert!(!without.to_jsonl().contains("registers"));
    let text = format!(
        "{header}{}{}",
        kernel("saxpy", true, ",\"registers\":53,\"local_bytes\":16,\"machine_registers\":30"),
        kernel("library", false, ",\"registers\":128,\"machine_registers\":128")
    );
    let recording = Recording::parse(&text).expect("parses");
    assert_eq!(Recording::parse(&recording.to_jsonl()).expect("again"), recording);
    // Shown for the instrumented kernels that grew or use local memory; not for the library's.
    let table = table::render(&recording);
    let shown: Vec<&str> = table.lines().filter(|l| l.contains("registers per thread")).collect();
    assert_eq!(
        shown,
        ["  saxpy: 53 registers per thread (30 without probes), 16 bytes of local memory"],
        "{table}"
    );
}

#[test]
fn kernels_left_out_by_kernel_are_said_so() {
    let kernel = |name: &str, unselected| Kernel {
        name: name.into(),
        id: "1".into(),
        launches: 2,
        unselected,
        ..Kernel::default()
    };
    let header =
        Header { format: record::FORMAT.into(), version: record::VERSION, ..Header::default() };
    let recording = Recording {
        header,
        kernels: vec![kernel("_Z4left", true), kernel("_Z6nativev", false)],
        ..Recording::default()
    };
    let text = recording.to_jsonl();
    assert!(text.contains("\"unselected\":true") && text.matches("unselected").count() == 1);
    let back = Recording::parse(&text).expect("parses");
    assert_eq!(back, recording);
    let table = table::render(&back);
    let row = |name: &str| table.lines().find(|l| l.starts_with(name)).expect(name).to_owned();
    assert!(row("_Z4left").contains("not selected (--kernel)"), "{table}");
    assert!(row("_Z6nativev").contains("not instrumentable"), "{table}");
}

/// A site's stride class is the one most of its requests had; a recording made before the
/// classes has none.
#[test]
fn a_sites_stride_is_its_requests_commonest() {
    use super::{Coalescing, Stride};
    let c = Coalescing {
        requests: 10,
        unit: 2,
        strided: 7,
        stride_bytes: 7 * 128,
        gather: 1,
        ..Default::default()
    };
    assert_eq!(c.stride(), Some((Stride::Bytes(128.0), 0.7)));
    let g = Coalescing { requests: 4, gather: 3, unit: 1, ..Default::default() };
    assert_eq!(g.stride(), Some((Stride::Gather, 0.75)));
    assert_eq!(Coalescing { requests: 4, ..Default::default() }.stride(), None);
}

/// The `allocs` set's lines read back as written, and the table's section: allocations by bytes
/// reached, the freed one said so, addresses in none apart, those never reached listed.
#[test]
fn allocation_lines_read_back_and_print() {
    use super::allocs::{AllocTraffic, AllocUse, AllocationRecord};
    let made = |id, bytes, freed| AllocationRecord {
        id,
        addr: 0x7000 * id,
        bytes,
        freed,
        copied_in: if id == 3 { 2048 } else { 0 },
        ..AllocationRecord::default()
    };
    let reach = |alloc, loaded, stored| AllocUse {
        kernel: "00000000000000aa".into(),
        alloc,
        traffic: AllocTraffic { loads: 1, loaded, stores: 1, stored, ..AllocTraffic::default() },
    };
    let header = super::Header {
        format: super::record::FORMAT.into(),
        version: super::record::VERSION,
        ..super::Header::default()
    };
    let recording = Recording {
        header,
        allocations: vec![made(1, 4096, true), made(2, 1 << 20, false), made(3, 512, false)],
        alloc_traffic: vec![reach(0, 8, 0), reach(1, 4096, 0), reach(2, 3_000_000, 1_000_000)],
        ..Recording::default()
    };
    let text = recording.to_jsonl();
    assert!(
        text.contains("\"type\":\"allocation\"") && text.contains("\"type\":\"alloc_traffic\"")
    );
    assert_eq!(Recording::parse(&text).expect("reads back"), recording);
    let table = table::render(&recording);
    let rows: Vec<&str> = table.lines().skip_while(|l| !l.starts_with("allocations:")).collect();
    assert_eq!(rows[0], "allocations: 3 made, 2 reached by the kernels' accesses", "{table}");
    let ids: Vec<&str> = rows[2..5].iter().map(|r| r.split_whitespace().next().unwrap()).collect();
    assert_eq!(ids, ["2", "1", "0"], "most bytes first: {table}");
    assert!(rows[3].contains("4.10 kB freed") && rows[4].contains("(none)"), "{table}");
    assert_eq!(rows[5], "  never reached: 3 (512 B, 2.05 kB copied in)", "{table}");
}

#[test]
fn the_devices_used_are_kept_read_back_and_shown() {
    use crate::builtin::DeviceLabel;
    let header = Header {
        format: record::FORMAT.into(),
        version: record::VERSION,
        pid: 9,
        ..Header::default()
    };
    let none = Recording { header: header.clone(), ..Recording::default() };
    // None known: not written, no line.
    assert!(!none.to_jsonl().contains("devices"));
    assert!(!table::render(&none).contains("devices:"));
    let devices = vec![
        DeviceLabel {
            index: 0,
            uuid: "GPU-65677075-2d73-7461-6e64-2d696e2d0000".into(),
            name: "Stand-in GPU".into(),
        },
        DeviceLabel { index: 1, uuid: String::new(), name: String::new() },
    ];
    let two = Recording { header: Header { devices, ..header }, ..Recording::default() };
    let again = Recording::parse(&two.to_jsonl()).expect("parses");
    assert_eq!(again, two);
    let table = table::render(&again);
    let line = "devices: 0 GPU-65677075-2d73-7461-6e64-2d696e2d0000 Stand-in GPU; 1 -\n";
    assert!(table.contains(line), "{table}");
}

/// Issue 29: each device's own copies of the `counts` set's maps give each kernel what it moved
/// there, kept under `devices` (absent with one device), read back and shown under the kernel.
#[test]
fn each_device_s_traffic_is_kept_read_back_and_shown() {
    use egpu_maps::{HashMap, Placement};
    let own = |loaded: u64, stored: u64, atomic: u64| -> Vec<(String, RawMap)> {
        let reads = HashMap::<u64, Reads>::create(8, Placement::Process).expect("a map");
        let writes = HashMap::<u64, Writes>::create(8, Placement::Process).expect("a map");
        let atomics = HashMap::<u64, Atomics>::create(8, Placement::Process).expect("a map");
        let r = Reads { loads: 1, loaded, ..Reads::default() };
        reads.insert(&0x11, &r).expect("room");
        writes.insert(&0x11, &Writes { stores: 1, stored, ..Writes::default() }).expect("room");
        atomics.insert(&0x11, &Atomics { atomics: 1, atomic }).expect("room");
        [("READS", reads.raw()), ("WRITES", writes.raw()), ("ATOMICS", atomics.raw())]
            .into_iter()
            .map(|(n, m)| (n.to_string(), m.clone()))
            .collect()
    };
    let launched = [(0x11, 3, "k".to_string())];
    let seen = Seen {
        launched: &launched,
        instrumented: &|_| true,
        name: &|_| "k".into(),
        site: &|_, _| None,
    };
    let header =
        Header { format: record::FORMAT.into(), version: record::VERSION, ..Header::default() };
    let mut recording = Recording::collect(header, &own(300, 30, 3), &seen);
    assert!(recording.kernels[0].devices.is_empty());
    assert!(!recording.to_jsonl().contains("\"devices\""));
    recording.add_device_traffic(0, &own(100, 10, 1), &seen);
    recording.add_device_traffic(1, &own(200, 20, 2), &seen);
    let k = &recording.kernels[0];
    assert_eq!(k.launches, 3);
    let got: Vec<(u32, u64, u64, u64)> = k
        .devices
        .iter()
        .map(|d| (d.device, d.traffic.loaded, d.traffic.stored, d.traffic.atomic))
        .collect();
    assert_eq!(got, [(0, 100, 10, 1), (1, 200, 20, 2)]);
    let again = Recording::parse(&recording.to_jsonl()).expect("parses");
    assert_eq!(again, recording);
    let table = table::render(&again);
    assert!(table.contains("  on device 1"), "{table}");
    assert!(table.contains("200 B        20 B         2 B"), "{table}");
}
