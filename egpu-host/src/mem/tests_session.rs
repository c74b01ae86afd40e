//! The in-process session without a GPU: its plan (the sets' pack, each map once, the bindings
//! the instrumenter gets), the header from what the driver says, and a saxpy run through the
//! sets on the CPU VM, with the kernels and sites the injector gives, read back as a recording.

use egpu_device::inject::{DeviceProbe, Kernels, inject};
use egpu_device::testing::h200;
use egpu_ebpf::{AttachPoint, DeviceEvent, KernelCtx, MemAccessCtx, kernel_id};
use egpu_maps::RawMap;
use egpu_vm::{EngineChoice, Vm};

use super::session::{Injected, Plan, site_lines};
use super::{PageSize, Sampling, Set, table};

const SAXPY: &str = include_str!("../../../tests/ptx/saxpy.ptx");

#[test]
fn the_plan_binds_each_map_once() {
    let plan = Plan::new(
        &[Set::Pattern, Set::Counts, Set::Timing, Set::Counts],
        PageSize::Kib4,
        Sampling::DEFAULT,
    )
    .expect("a plan");
    assert_eq!(plan.sets, [Set::Counts, Set::Timing, Set::Pattern]);
    let mut names: Vec<&str> = plan.maps.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["ATOMICS", "ENDS", "READS", "RUNS", "SITES", "STARTS", "WRITES"]);
    // Three counting probes, two timing, three pattern: all on the device.
    assert_eq!(plan.probes.len(), 8);
    assert!(
        plan.probes
            .iter()
            .all(|(_, p, _)| matches!(p.program().attach_point(), AttachPoint::Device(_)))
    );
    // Map i at 0x1000·(i + 1): every probe's binding is the address and layout of its map.
    let addresses: Vec<u64> = (1..=plan.maps.len() as u64).map(|i| i << 12).collect();
    let bindings = plan.bindings(&addresses);
    for ((name, program, indices), bound) in plan.probes.iter().zip(&bindings) {
        assert_eq!(bound.len(), program.program().maps().len(), "{name}");
        for ((def, binding), &i) in program.program().maps().iter().zip(bound).zip(indices) {
            assert_eq!(plan.maps[i].0, def.name, "{name}");
            assert_eq!(binding.addr, addresses[i], "{name}: {}", def.name);
            assert_eq!(binding.geometry, *plan.maps[i].1.geometry(), "{name}: {}", def.name);
            assert!(!binding.live && binding.spread == 0 && !binding.drained, "{name}");
        }
    }
    // The header: what the driver says of the GPU, the sets by name, no pages counted.
    let header = plan.header(Some(&h200()));
    assert_eq!(header.sets, ["counts", "timing", "pattern"]);
    assert_eq!((header.device.as_str(), header.driver.as_str()), ("NVIDIA H200", "13.0"));
    assert_eq!((header.sms, header.page_bytes, header.pid), (132, 0, std::process::id()));
    assert_eq!((header.peak_bytes_per_second / 1e9).round(), 4809.0);
    assert_eq!((header.format.as_str(), header.version), ("egpu-mem", 1));
    let pages =
        Plan::new(&[Set::Pages], PageSize::Kib4, Sampling::DEFAULT).expect("pages").header(None);
    // In process egpu sees no allocation of the program's: the `allocs` set is refused.
    let allocs = Plan::new(&[Set::Counts, Set::Allocs], PageSize::Kib4, Sampling::DEFAULT);
    let e = allocs.expect_err("refused").to_string();
    assert!(e.contains("`allocs` set runs under `egpu mem run` only"), "{e}");
    assert_eq!((pages.page_bytes, pages.device.as_str()), (4096, ""));
    // The timeline's ring: bound as the others, written a claim per record (no host thread
    // drains it while kernels run).
    let plan = Plan::new(&[Set::Counts, Set::Timeline], PageSize::default(), Sampling::DEFAULT)
        .expect("timeline");
    let ring = plan.timeline().expect("the timeline's ring");
    assert_eq!(plan.maps[ring].0, Set::Timeline.map());
    let bindings = plan.bindings(&vec![1 << 12; plan.maps.len()]);
    assert!(bindings.iter().flatten().all(|b| !b.drained && !b.live));
    assert_eq!(plan.header(None).sets, ["counts", "timeline"]);
    assert_eq!(
        Plan::new(&[Set::Counts], PageSize::default(), Sampling::DEFAULT)
            .expect("counts")
            .timeline(),
        None
    );
}

/// Runs the plan's probes on the CPU VM as saxpy over `n` floats would fire them: each thread
/// loads `x[i]` and `y[i]` (sites 0 and 1) and stores `y[i]` (site 2), one block of `n` threads.
fn saxpy_on_the_vm(plan: &Plan, n: u32) {
    let id = kernel_id("saxpy");
    let (x, y) = (0x7000_0000_0000_u64, 0x7100_0000_0000_u64);
    for (name, program, indices) in &plan.probes {
        let maps: Vec<RawMap> = indices.iter().map(|&i| plan.maps[i].1.clone()).collect();
        let mut vm = Vm::with_maps(program, &maps, EngineChoice::Auto).expect(name);
        let AttachPoint::Device(event) = program.program().attach_point() else { continue };
        for thread in 0..n {
            let mut kernel = KernelCtx {
                kernel_id: id,
                launch_id: 1,
                thread: [thread, 0, 0],
                grid_dim: [1, 1, 1],
                block_dim: [n, 1, 1],
                ..KernelCtx::default()
            };
            let access = |site, addr, is_store| MemAccessCtx {
                kernel_id: id,
                addr,
                size: 4,
                site,
                thread: [thread, 0, 0],
                is_store,
                launch_id: 1,
                class: MemAccessCtx::LOAD_STORE,
                ..MemAccessCtx::default()
            };
            let offset = u64::from(thread) * 4;
            let mut runs = |ctx: &mut MemAccessCtx| vm.run_ctx(ctx).expect(name);
            match event {
                DeviceEvent::KernelEntry | DeviceEvent::KernelExit => {
                    vm.run_ctx(&mut kernel).expect(name);
                }
                DeviceEvent::GlobalLoad => {
                    runs(&mut access(0, x + offset, 0));
                    runs(&mut access(1, y + offset, 0));
                }
                DeviceEvent::GlobalStore => {
                    runs(&mut access(2, y + offset, 1));
                }
                _ => {}
            }
        }
    }
}

#[test]
fn saxpy_on_the_vm_gives_the_recording() {
    let plan = Plan::new(
        &[Set::Counts, Set::Timing, Set::Pattern],
        PageSize::default(),
        Sampling::DEFAULT,
    )
    .expect("a plan");
    // The kernels and sites come from what the injector did to the module.
    let addresses: Vec<u64> = (1..=plan.maps.len() as u64).map(|i| i << 32).collect();
    let bindings = plan.bindings(&addresses);
    let probes: Vec<DeviceProbe<'_>> = plan
        .probes
        .iter()
        .zip(&bindings)
        .map(|((_, program, _), maps)| DeviceProbe { program, kernels: Kernels::All, maps })
        .collect();
    let injection = inject(SAXPY, &probes).expect("saxpy instrumented");
    assert_eq!(injection.kernels, ["saxpy"]);
    let sites = site_lines(&injection);
    let lines: Vec<&str> = SAXPY.lines().collect();
    let id = kernel_id("saxpy");
    let expected =
        [(0, "load", "ld.global.nc.f32"), (1, "load", "ld.global.f32"), (2, "store", "st")];
    assert_eq!(sites.len(), expected.len(), "{sites:?}");
    for (&((kernel, site), (line, access)), (index, does, opcode)) in sites.iter().zip(expected) {
        assert_eq!((kernel, site, access), (id, index, does));
        let text = lines[line as usize - 1].trim();
        assert!(text.starts_with(opcode), "site {site} at line {line}: {text}");
    }
    let mut injected = Injected::default();
    injected.add(&injection, &[]);

    let n = 256;
    saxpy_on_the_vm(&plan, n);
    let launched = [("saxpy".to_owned(), 1), ("not_ours".to_owned(), 2)];
    let recording = injected.collect(plan.header(Some(&h200())), &plan.maps, &launched);
    let saxpy = recording.kernels.iter().find(|k| k.name == "saxpy").expect("saxpy");
    assert!(saxpy.instrumented && saxpy.launches == 1, "{saxpy:?}");
    let traffic = saxpy.traffic.expect("counted");
    assert_eq!((traffic.read(), traffic.written(), traffic.atomic), (2 * 4 * 256, 4 * 256, 0));
    assert_eq!((traffic.loads, traffic.stores), (2 * 256, 256));
    // The CPU VM's warp helpers see one lane: each request its own sector, the fewest.
    let pattern = saxpy.pattern.expect("pattern");
    assert_eq!((pattern.requests, pattern.sectors, pattern.efficiency()), (3 * 256, 3 * 256, 1.0));
    assert_eq!(saxpy.timed, 1);
    let [launch] = recording.launches.as_slice() else { panic!("{:?}", recording.launches) };
    assert_eq!((launch.grid, launch.blocks, launch.threads), (1, 1, 256));
    assert_eq!(recording.sites.len(), 3);
    assert!(recording.sites.iter().all(|s| s.line.is_some() && s.access.is_some()));
    let other = recording.kernels.iter().find(|k| k.name == "not_ours").expect("listed");
    assert!(!other.instrumented && other.traffic.is_none() && other.launches == 2);
    let table = table::render(&recording);
    for shown in ["NVIDIA H200, driver 13.0", "saxpy", "100%", "not instrumentable", "3.07 kB"] {
        assert!(table.contains(shown), "{shown} in\n{table}");
    }

    // Probes attached to other kernels: saxpy is named, not instrumented.
    let mut other_kernels = Injected::default();
    other_kernels.add(&injection, &["other".to_owned()]);
    let recording = other_kernels.collect(plan.header(None), &[], &launched);
    let saxpy = recording.kernels.iter().find(|k| k.name == "saxpy").expect("saxpy");
    assert!(!saxpy.instrumented, "{saxpy:?}");
}

#[test]
fn the_timeline_on_the_vm_reaches_the_recording() {
    // Every warp sampled: saxpy's 3 accesses per thread, each thread a warp of one lane there.
    let every = "1".parse::<Sampling>().expect("one in 1");
    let plan = Plan::new(&[Set::Counts, Set::Timeline], PageSize::default(), every).expect("plan");
    let n = 256;
    saxpy_on_the_vm(&plan, n);
    let ring = plan.timeline().expect("the ring");
    let mut timeline = plan.new_timeline();
    let drained = timeline.drain(&plan.maps[ring].1).expect("drained");
    assert_eq!(drained, 3 * u64::from(n));
    // Drained once: a second drain finds nothing.
    assert_eq!(timeline.drain(&plan.maps[ring].1).expect("drained"), 0);
    let launched = [("saxpy".to_owned(), 1)];
    let mut injected = Injected::default();
    let probes: Vec<DeviceProbe<'_>> = Vec::new();
    injected.add(&inject(SAXPY, &probes).expect("saxpy"), &[]);
    let mut recording = injected.collect(plan.header(Some(&h200())), &plan.maps, &launched);
    plan.finish_timeline(&timeline, ring, &mut recording);
    let summary = recording.header.timeline.as_ref().expect("the timeline's summary");
    assert_eq!((summary.records, summary.dropped, summary.sample), (3 * u64::from(n), 0, 1));
    assert!(!recording.windows.is_empty());
    // The windows' bytes are the records': 3 accesses of 4 bytes per thread.
    let bytes: u64 = recording.windows.iter().map(|w| w.bytes).sum();
    assert_eq!(bytes, 3 * 4 * u64::from(n));
    assert_eq!(recording.samples.len() as u64, 3 * u64::from(n));
}
