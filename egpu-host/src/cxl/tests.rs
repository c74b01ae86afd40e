//! Policies read and resolved (no GPU, no VM: the probes' agreement with these is
//! `tests/cxl.rs`'s).

use super::*;

#[test]
fn policies_are_read_and_written_back() {
    let texts = [
        "none",
        "all",
        "marked",
        "size:1073741824",
        "nth:1,3",
        "pages:0.5",
        "ranges:0x1000-0x2000",
    ];
    for text in texts {
        let p: Policy = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(p.to_string().parse::<Policy>(), Ok(p.clone()), "{text}");
    }
    assert_eq!("size:1G".parse(), Ok(Policy::AtLeast(1 << 30)));
    assert_eq!("nth:2, 5".parse(), Ok(Policy::Nth(vec![2, 5])));
    for bad in ["", "most", "size:", "size:1Q", "nth:0", "pages:1.5", "ranges:9-3", "ranges:1"] {
        let e = bad.parse::<Policy>().expect_err(bad);
        assert!(e.to_string().contains("not a far-memory policy"), "{bad}: {e}");
    }
}

fn allocations() -> Vec<Allocation> {
    vec![
        Allocation { addr: 0x7000_0000, size: 1 << 20 },
        Allocation { addr: 0x7020_0000, size: 3 << 20 },
        Allocation { addr: 0x7010_0000, size: 4096 },
    ]
}

#[test]
fn policies_resolve_to_sorted_merged_ranges_or_a_bitmap() {
    let t = Tier::resolve(&Policy::AtLeast(1 << 20), &allocations(), Lookup::Ranges, 200)
        .expect("resolves");
    assert_eq!(t.config.mode, MODE_RANGES);
    assert_eq!(t.config.delay_ns, 200);
    let r = |start, end| FarRange { start, end };
    assert_eq!(t.ranges, [r(0x7000_0000, 0x7010_0000), r(0x7020_0000, 0x7050_0000)]);
    // Touching ranges merge.
    let t = Tier::resolve(&Policy::Nth(vec![1, 3]), &allocations(), Lookup::Ranges, 0)
        .expect("resolves");
    assert_eq!(t.ranges, [r(0x7000_0000, 0x7010_1000)]);
    // The bitmap rounds them out to whole pages.
    let t =
        Tier::resolve(&Policy::Nth(vec![3]), &allocations(), Lookup::Bitmap { page_shift: 16 }, 0)
            .expect("resolves");
    assert_eq!((t.config.mode, t.config.base, t.config.pages), (MODE_BITMAP, 0x7010_0000, 1));
    assert!(t.is_far(0x7010_ffff) && !t.is_far(0x7011_0000) && !t.is_far(0x700f_ffff));
    // Nothing far: no bitmap at all.
    let t =
        Tier::resolve(&Policy::Nth(vec![9]), &allocations(), Lookup::Bitmap { page_shift: 16 }, 0)
            .expect("resolves");
    assert_eq!(t.config.mode, MODE_NONE);
}

#[test]
fn what_does_not_fit_is_refused_with_what_to_do() {
    let many: Vec<(u64, u64)> = (0..300u64).map(|i| (i * 0x2000, i * 0x2000 + 0x1000)).collect();
    let e = Tier::resolve(&Policy::Ranges(many.clone()), &[], Lookup::Ranges, 0).expect_err("300");
    assert_eq!(e, TierError::TooManyRanges(300));
    assert!(e.to_string().contains("use the bitmap"));
    assert!(
        Tier::resolve(&Policy::Ranges(many), &[], Lookup::Bitmap { page_shift: 12 }, 0).is_ok()
    );
    let wide = Policy::Ranges(vec![(0, 1 << 40)]);
    let e = Tier::resolve(&wide, &[], Lookup::Bitmap { page_shift: 12 }, 0).expect_err("1 TiB");
    assert!(matches!(e, TierError::BitmapTooSmall { .. }), "{e}");
    let e = Tier::resolve(&Policy::All, &[], Lookup::Ranges, MAX_DELAY_NS + 1).expect_err("Δ");
    assert_eq!(e, TierError::Delay(MAX_DELAY_NS + 1));
    let e = Tier::resolve(&Policy::Pages(0.5), &[], Lookup::Bitmap { page_shift: 40 }, 0);
    assert_eq!(e, Err(TierError::PageSize(40)));
}

#[test]
fn a_fraction_of_pages_is_about_that_fraction() {
    let t = Tier::resolve(&Policy::Pages(0.25), &[], Lookup::Bitmap { page_shift: 12 }, 0)
        .expect("resolves");
    let far = (0..100_000u64).filter(|p| t.is_far(p << 12)).count();
    assert!((23_500..26_500).contains(&far), "{far} of 100,000 pages");
    let all = Tier::resolve(&Policy::Pages(1.0), &[], Lookup::Ranges, 0).expect("resolves");
    assert!((0..1000u64).all(|p| all.is_far(p << 16)));
}

#[test]
fn allocations_at_the_top_of_the_address_space_do_not_overflow() {
    let top = [Allocation { addr: u64::MAX - 4095, size: 1 << 20 }];
    for lookup in [Lookup::Ranges, Lookup::Bitmap { page_shift: 12 }] {
        let t = Tier::resolve(&Policy::All, &top, lookup, 0).expect("all");
        assert!(t.is_far(u64::MAX));
        let t = Tier::resolve(&Policy::Nth(vec![1]), &top, lookup, 0).expect("the first");
        assert!(t.is_far(u64::MAX - 1) && !t.is_far(u64::MAX - 4096), "{lookup:?}");
    }
}

#[test]
fn the_pack_carries_the_device_probes_and_the_allocation_recorder() {
    let text = pack().expect("packs").to_text();
    let read = crate::pack::Pack::parse(&text).expect("reads back");
    assert_eq!(read.probes().len(), 4);
    let names: Vec<&str> = read
        .probes()
        .iter()
        .flat_map(|p| p.program.program().maps().iter().map(|d| d.name.as_str()))
        .collect();
    for map in ["TIER", "FAR_RANGES", "FAR_PAGES", "ALLOCS"] {
        assert!(names.contains(&map), "{map} in {names:?}");
    }
    // The device probes only read the tier's maps: the preloaded library mirrors them.
    for p in far_access() {
        let verified = p.verified().expect("verified");
        assert!(egpu_device::translate::reads_only(verified).iter().all(|r| *r), "{}", p.name());
    }
}

#[test]
fn allocations_recorded_by_the_host_probe_resolve_the_policy() {
    use egpu_ebpf::{AllocCtx, HostEvent, Phase};
    let recorder = allocation_recorder();
    let probes = crate::HostProbes::new();
    let maps = recorder.maps().expect("its maps");
    probes.attach(recorder.verified().expect("verified"), maps).expect("attached");
    let ring = egpu_maps::RingBuf::<[u64; 2]>::from_raw(maps[0].clone()).expect("the ring");
    let mut consumer = ring.consumer().expect("the consumer");
    let event = |ptr, bytes, op, kind, result| AllocCtx {
        ptr,
        bytes,
        op,
        kind,
        result,
        ..Default::default()
    };
    let mut tracker =
        Tracker::new(Policy::Nth(vec![2, 3]), Lookup::Ranges, 250).expect("a tracker");
    // Three device allocations, a failed one and a pinned host one (not recorded).
    for mut ctx in [
        event(0x7000_0000, 1 << 20, AllocCtx::ALLOC, AllocCtx::DEVICE, 0),
        event(0x7020_0000, 2 << 20, AllocCtx::ALLOC, AllocCtx::DEVICE, 0),
        event(0x9000_0000, 4096, AllocCtx::ALLOC, AllocCtx::HOST_PINNED, 0),
        event(0, 1 << 30, AllocCtx::ALLOC, AllocCtx::DEVICE, 2),
        event(0x7040_0000, 4096, AllocCtx::ALLOC, AllocCtx::DEVICE, 0),
    ] {
        probes.fire(Phase::Exit, &mut ctx);
    }
    assert!(probes.armed(HostEvent::Alloc, Phase::Exit));
    assert!(tracker.record(consumer.drain()));
    assert_eq!(tracker.allocations().len(), 3);
    let tier = tracker.tier().expect("resolves");
    assert_eq!(tier.config.delay_ns, 250);
    let r = |start, end| FarRange { start, end };
    assert_eq!(tier.ranges, [r(0x7020_0000, 0x7040_1000)], "the 2nd and 3rd, touching, merged");
    // The third freed: its ordinal stays, its bytes go.
    probes.fire(Phase::Exit, &mut event(0x7040_0000, 0, AllocCtx::FREE, AllocCtx::DEVICE, 0));
    assert!(tracker.record(consumer.drain()));
    assert_eq!(tracker.tier().expect("resolves").ranges, [r(0x7020_0000, 0x7040_0000)]);
    // A free of something never allocated changes nothing.
    probes.fire(Phase::Exit, &mut event(0x5000, 0, AllocCtx::FREE, AllocCtx::DEVICE, 0));
    assert!(!tracker.record(consumer.drain()));
}

#[test]
fn ranges_a_program_marks_are_far_under_marked_and_nothing_else() {
    let record = |addr: u64, bytes: u64| {
        let r = marked_record(addr, bytes);
        let word = |i: usize| u64::from_ne_bytes(r[i..i + 8].try_into().expect("8 bytes"));
        [word(0), word(8)]
    };
    let mut marked = Tracker::new(Policy::Marked, Lookup::Ranges, 100).expect("a tracker");
    let mut sized = Tracker::new(Policy::AtLeast(1), Lookup::Ranges, 100).expect("a tracker");
    let records = [[0x7000_0000, 4096], record(0x7000_0000, 1024), record(0x9000, 16)];
    assert!(marked.record(records));
    assert!(sized.record(records));
    // Marks are not allocations, and allocations are not marks.
    assert_eq!((marked.allocations().len(), sized.allocations().len()), (1, 1));
    let tier = marked.tier().expect("resolves");
    let r = |start, end| FarRange { start, end };
    assert_eq!(tier.ranges, [r(0x9000, 0x9010), r(0x7000_0000, 0x7000_0400)]);
    assert_eq!(tier.far_bytes(0x7000_0000, 4096), 1024);
    assert_eq!(sized.tier().expect("resolves").far_bytes(0x7000_0000, 4096), 4096);
    // A mark taken back (0 bytes at its address); again: nothing to take.
    assert!(marked.record([record(0x9000, 0)]));
    assert_eq!(marked.tier().expect("resolves").ranges, [r(0x7000_0000, 0x7000_0400)]);
    assert!(!marked.record([record(0x9000, 0)]));
    // With no tracker, `marked` is nothing far.
    let plain = Tier::resolve(&Policy::Marked, &[], Lookup::Ranges, 100).expect("resolves");
    assert_eq!(plain.config.mode, MODE_NONE);
}

#[test]
fn far_bytes_count_by_range_and_by_page() {
    let allocations = [Allocation { addr: 0x10_0000, size: 0x3_0000 }];
    let ranges = Policy::Ranges(vec![(0x10_8000, 0x11_8000)]);
    let tier = Tier::resolve(&ranges, &allocations, Lookup::Ranges, 1).expect("ranges");
    assert_eq!(tier.far_bytes(0x10_0000, 0x3_0000), 0x1_0000);
    // By 64 KiB pages the range rounds out to two whole pages.
    let bitmap = Lookup::Bitmap { page_shift: 16 };
    let tier = Tier::resolve(&ranges, &allocations, bitmap, 1).expect("a bitmap");
    assert_eq!(tier.far_bytes(0x10_0000, 0x3_0000), 0x2_0000);
    let all = Tier::resolve(&Policy::All, &[], Lookup::Ranges, 1).expect("all");
    assert_eq!(all.far_bytes(5, 77), 77);
    let none = Tier::resolve(&Policy::None, &[], Lookup::Ranges, 1).expect("none");
    assert_eq!(none.far_bytes(5, 77), 0);
}
