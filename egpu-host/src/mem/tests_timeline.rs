//! The `timeline` set on the CPU VM (sampling, records, drops), its windows, and the
//! recording's new lines.

use std::sync::Mutex;

use egpu_device::inject::{Sample, warp_sampled};
use egpu_ebpf::MemAccessCtx;
use egpu_maps::RingBuf;

use super::timeline::{LOAD, Record, STORE, TIMELINE, timeline};
use super::windows::{self, BIN_NS, Timeline, Window};
use super::{Recording, record, table};

/// The set's maps are statics: one test at a time uses them.
static MAPS: Mutex<()> = Mutex::new(());

fn access(block: u32, warp: u32, addr: u64) -> MemAccessCtx {
    MemAccessCtx {
        kernel_id: 0x77,
        launch_id: 5,
        block: [block, 0, 0],
        warp,
        addr,
        size: 4,
        sm: 3,
        ..MemAccessCtx::default()
    }
}

/// Runs the load probe once for each of `blocks` × `warps` warps with N = `1 << shift`, by
/// warps in the warps the injector's rule samples (as a kernel's copy for them would); the
/// records drained.
fn run_warps(shift: u32, blocks: u32, warps: u32) -> Vec<Record> {
    run(shift, false, blocks, warps)
}

/// [`run_warps`], sampling lines of each warp's with `lines`.
fn run(shift: u32, lines: bool, blocks: u32, warps: u32) -> Vec<Record> {
    let probes = timeline(shift, lines).expect("probes for N");
    let [mut loads, ..] = probes.map(|p| p.vm().expect("a VM"));
    for block in 0..blocks {
        for warp in
            (0..warps).filter(|&w| lines || warp_sampled([block, 0, 0], w, Sample::warps(shift)))
        {
            let mut ctx = access(block, warp, 0x1000 + u64::from(block * 32 + warp) * 4);
            loads.run_ctx(&mut ctx).expect("runs");
        }
    }
    let ring = RingBuf::<Record>::from_raw(TIMELINE.raw().clone()).expect("the ring");
    let mut consumer = ring.consumer().expect("the consumer");
    consumer.drain().collect()
}

#[test]
fn every_warp_is_recorded_at_one_in_one() {
    let _maps = MAPS.lock().unwrap_or_else(|p| p.into_inner());
    let records = run_warps(0, 16, 8);
    assert_eq!(records.len(), 128);
    let r = records[9];
    assert_eq!((r.kernel, r.launch, r.size, r.lanes, r.sm), (0x77, 5, 4, 1, 3));
    assert_eq!((r.class(), r.access(), r.bytes(), r.shift()), (0, LOAD, 4, 0));
    assert_eq!(r.addr, 0x1000 + (32 + 1) * 4, "block 1, warp 1");
    assert!(r.time > 0, "{r:?}");
    // A store is a store; an atomic's class is kept.
    let probes = timeline(3, false).expect("N = 8");
    let [_, mut stores, _] = probes.map(|p| p.vm().expect("a VM"));
    stores.run_ctx(&mut access(0, 0, 8)).expect("runs");
    let ring = RingBuf::<Record>::from_raw(TIMELINE.raw().clone()).expect("the ring");
    let [store] = ring.consumer().expect("consumer").drain().collect::<Vec<_>>()[..] else {
        panic!("one record")
    };
    assert_eq!((store.access(), store.shift()), (STORE, 3));
    assert!(timeline(11, false).is_none() && timeline(11, true).is_none());
    let n = |s: &str| s.parse::<super::Sampling>().map(|s| s.n());
    assert_eq!((n("1"), n("32"), n("1024")), (Ok(1), Ok(32), Ok(1024)));
    for bad in ["0", "3", "2048", "x"] {
        assert!(n(bad).expect_err(bad).to_string().contains("power of two from 1 to 1024"));
    }
}

#[test]
fn one_warp_in_n_is_recorded() {
    let _maps = MAPS.lock().unwrap_or_else(|p| p.into_inner());
    // 4096 warps: 128 blocks of 32 warps (N divides the warps per block: a modulo would pick
    // warp 0 of every block; the hash spreads them).
    let records = run_warps(5, 128, 32);
    let n = records.len();
    assert!((96..=160).contains(&n), "{n} of 4096 warps at 1 in 32 (128 expected)");
    let warps: std::collections::BTreeSet<u64> =
        records.iter().map(|r| (r.addr - 0x1000) / 4 % 32).collect();
    assert!(warps.len() > 16, "sampled warps of a block: {warps:?}");
    let records = run_warps(2, 32, 32);
    assert!((200..=312).contains(&records.len()), "{} of 1024 at 1 in 4", records.len());
    // The probes do not test the warp: in a warp they run in, every request is recorded.
    let [mut loads, ..] = timeline(5, false).expect("N = 32").map(|p| p.vm().expect("a VM"));
    for warp in 0..32 {
        loads.run_ctx(&mut access(0, warp, 0x2000)).expect("runs");
    }
    let ring = RingBuf::<Record>::from_raw(TIMELINE.raw().clone()).expect("the ring");
    assert_eq!(ring.consumer().expect("the consumer").drain().count(), 32);
    // The pack says they run in one warp in 32; the other sets' probes in every warp.
    let sampling = "32".parse::<super::Sampling>().expect("1 in 32");
    let pack = super::pack_sampled(
        &[super::Set::Counts, super::Set::Timeline],
        Default::default(),
        sampling,
    )
    .expect("a pack");
    let samples: Vec<(&str, Sample)> =
        pack.probes().iter().map(|p| (p.name.as_str(), p.sample)).collect();
    assert!(
        samples.iter().all(|&(name, s)| (s == Sample::warps(5)) == name.starts_with("timeline_")),
        "{samples:?}"
    );
    assert!(pack.to_text().contains("\nwarps 32\n"));
    let again = crate::pack::Pack::parse(&pack.to_text()).expect("read back");
    assert!(again.probes().iter().zip(pack.probes()).all(|(a, b)| a.sample == b.sample));
    // By lines, every warp runs them.
    let lines = pack_lines();
    assert!(lines.probes().iter().all(|p| p.sample == Sample::EVERY));
    // By blocks, the same probes, in the warps of one block in 32.
    let blocks = "32".parse::<super::Sampling>().expect("1 in 32").of(super::SampleBy::Blocks);
    let pack =
        super::pack_sampled(&[super::Set::Timeline], Default::default(), blocks).expect("a pack");
    assert!(pack.probes().iter().all(|p| p.sample == Sample::blocks(5)));
    assert!(pack.to_text().contains("\nblocks 32\n"));
    let again = crate::pack::Pack::parse(&pack.to_text()).expect("read back");
    assert!(again.probes().iter().all(|p| p.sample == Sample::blocks(5)));
}

fn pack_lines() -> crate::pack::Pack {
    let sampling = "32".parse::<super::Sampling>().expect("1 in 32").of(super::SampleBy::Lines);
    super::pack_sampled(&[super::Set::Timeline], Default::default(), sampling).expect("a pack")
}

#[test]
fn one_line_in_n_of_every_warp_is_recorded() {
    let _maps = MAPS.lock().unwrap_or_else(|p| p.into_inner());
    // Each warp's lanes here read consecutive floats: its lines, not the warps, are sampled,
    // each about one in 32, whatever the warp.
    let probes = timeline(5, true).expect("probes for N");
    let [mut loads, ..] = probes.map(|p| p.vm().expect("a VM"));
    let (warps, steps) = (64u32, 256u64);
    for warp in 0..warps {
        for step in 0..steps {
            let mut ctx = access(0, warp, 0x10_0000 + step * 128);
            loads.run_ctx(&mut ctx).expect("runs");
        }
    }
    let ring = RingBuf::<Record>::from_raw(TIMELINE.raw().clone()).expect("the ring");
    let records: Vec<Record> = ring.consumer().expect("the consumer").drain().collect();
    let n = records.len() as u64;
    let expected = u64::from(warps) * steps / 32;
    assert!(n * 4 > expected * 3 && n * 4 < expected * 5, "{n} records, {expected} expected");
    let lines: std::collections::BTreeSet<u64> = records.iter().map(|r| r.addr).collect();
    assert!(lines.len() > 200, "lines of many steps: {}", lines.len());
    assert!(records.iter().all(|r| r.kind & super::timeline::LINES != 0 && r.shift() == 5));
    // The recording and its table say so.
    let mut t = Timeline::new(32, 10);
    records.iter().for_each(|r| t.add(r));
    let mut recording = Recording::default();
    t.finish(&mut recording, None, &[0], 1);
    assert!(recording.header.timeline.as_ref().is_some_and(|s| s.lines));
    let table = table::render(&recording);
    assert!(table.contains("1 in 32 lines of each warp's sampled"), "{table}");
    let by = |s: &str| s.parse::<super::SampleBy>();
    assert_eq!(
        (by("warps"), by("lines"), by("blocks"), by("turns")),
        (
            Ok(super::SampleBy::Warps),
            Ok(super::SampleBy::Lines),
            Ok(super::SampleBy::Blocks),
            Ok(super::SampleBy::Turns)
        )
    );
    let why = by("threads").expect_err("no threads").to_string();
    assert!(why.contains("warps, blocks, lines or turns"), "{why}");
    // By turns: the pack says so, and reads back the same.
    let turns = "32".parse::<super::Sampling>().expect("1 in 32").of(super::SampleBy::Turns);
    let pack =
        super::pack_sampled(&[super::Set::Timeline], Default::default(), turns).expect("a pack");
    assert!(pack.probes().iter().all(|p| p.sample == Sample::turns(5)));
    assert!(pack.to_text().contains("\nturns 32\n"));
    let again = crate::pack::Pack::parse(&pack.to_text()).expect("read back");
    assert!(again.probes().iter().all(|p| p.sample == Sample::turns(5)));
}

#[test]
fn a_full_ring_drops_and_counts() {
    let _maps = MAPS.lock().unwrap_or_else(|p| p.into_inner());
    let capacity = super::timeline::RECORDS_PER_SM;
    let ring = RingBuf::<Record>::from_raw(TIMELINE.raw().clone()).expect("the ring");
    let before = ring.shard_drops();
    let records = run_warps(0, capacity / 32 + 1, 32); // 32 more than the ring holds
    assert_eq!(records.len(), capacity as usize);
    let drops = ring.shard_drops();
    assert_eq!(drops.len() as u32, 1 + super::sets::SM_SHARDS);
    assert_eq!(drops[0] - before[0], 32, "{drops:?}");
    // The drops as the recording says them: per SM (the shards after the host's).
    let mut recording = Recording::default();
    let mut device_drops = vec![0u64; drops.len()];
    (device_drops[0], device_drops[4], device_drops[9]) = (2, 7, 1);
    Timeline::new(32, 10).finish(&mut recording, None, &device_drops, 1);
    let t = recording.header.timeline.clone().expect("a summary");
    assert_eq!(t.dropped, 10);
    let by_sm: Vec<(String, u64)> = t.dropped_by_sm.into_iter().collect();
    assert_eq!(by_sm, [("3".to_string(), 7), ("8".to_string(), 1)]);
    let table = table::render(&recording);
    assert!(table.contains("1 in 32 warps sampled, 0 records, 0 kept; 10 dropped"), "{table}");
}

/// A kernel of two phases: 10 µs of 1000 requests of 128 bytes, then 10 µs of 100.
fn two_phases(t: &mut Timeline) {
    let start = 1_000_000;
    for i in 0..1000 {
        t.add(&record(start + i * 10, 0x10, 1, 128));
    }
    for i in 0..100 {
        t.add(&record(start + 10_000 + i * 100, 0x10, 1, 128));
    }
    // Another kernel, another launch.
    t.add(&record(5_000_000, 0x20, 2, 64));
}

/// A request of 32 lanes sampled one warp in 32.
fn record(time: u64, kernel: u64, launch: u64, bytes: u32) -> Record {
    Record { time, kernel, launch, size: bytes / 32, lanes: 32, kind: 5 << 16, ..Record::default() }
}

#[test]
fn windows_sum_to_the_sampled_bytes_and_show_both_phases() {
    let mut t = Timeline::new(32, 50);
    two_phases(&mut t);
    assert_eq!(t.records(), 1101);
    for window in [None, Some(1000), Some(333)] {
        let all = t.windows(window);
        let of = |k: &str| all.iter().filter(|w| w.kernel.ends_with(k)).collect::<Vec<_>>();
        let ten: Vec<&Window> = of("10");
        let sum: u64 = ten.iter().map(|w| w.bytes).sum();
        assert_eq!(sum, 1100 * 128 * 32, "{window:?}");
        assert_eq!(of("20").iter().map(|w| w.bytes).sum::<u64>(), 64 * 32);
        // Windows follow each other from the first record's bin to the last's.
        for pair in ten.windows(2) {
            assert_eq!(pair[0].end_ns, pair[1].start_ns);
        }
        let len = ten[0].duration_ns();
        assert_eq!(len % BIN_NS, 0);
        let stats = windows::stats(&all, &ten[0].kernel).expect("stats");
        assert!(stats.max > 3.0 * stats.min, "{window:?}: {stats:?}");
        assert!(stats.min > 0.0, "{window:?}: {stats:?}");
    }
    // Automatic: a 50th of the 20 µs launch, but at least 1 µs: 1024 ns in whole bins.
    let auto = t.windows(None);
    let w = auto.iter().find(|w| w.kernel.ends_with("10")).expect("a window");
    assert_eq!(w.duration_ns(), 1024);
    let n = auto.iter().filter(|w| w.kernel.ends_with("10")).count();
    assert_eq!(n, 20);
    // At 1 µs (1024 ns), the fast phase's windows hold 102 or 103 of its requests of 4 kB.
    let s = windows::stats(&t.windows(Some(1000)), &auto[0].kernel).expect("stats");
    let most = 103.0 * 128.0 * 32.0 / 1024e-9;
    assert!(s.max <= most + 1.0 && s.max >= most * 102.0 / 103.0 - 1.0, "{s:?}");
}

#[test]
fn the_recording_keeps_windows_and_samples() {
    let mut t = Timeline::new(32, 50);
    two_phases(&mut t);
    let header = record::Header {
        format: record::FORMAT.into(),
        version: record::VERSION,
        ..record::Header::default()
    };
    let mut recording = Recording { header, ..Recording::default() };
    recording.kernels.push(record::Kernel {
        name: "two_phases".into(),
        id: record::kernel_hex(0x10),
        instrumented: true,
        ..record::Kernel::default()
    });
    t.finish(&mut recording, Some(1000), &[0, 0, 3], 1);
    // A uniform sample of 50 of the 1101 records, by time.
    assert_eq!(recording.samples.len(), 50);
    assert!(recording.samples.windows(2).all(|p| p[0].time_ns <= p[1].time_ns));
    let late = recording.samples.iter().filter(|s| s.time_ns > 1_005_000).count();
    assert!(late > 5, "{late} of 50 past the first 5 µs");
    let text = recording.to_jsonl();
    assert!(text.contains("\"type\":\"window\",\"kernel\":\"0000000000000010\",\"launch\":1,"));
    assert!(text.contains("\"type\":\"sample\",\"time_ns\":"));
    assert!(text.contains("\"timeline\":{\"sample\":32,\"window_ns\":1000,\"records\":1101"));
    let again = Recording::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(again, recording);
    let table = table::render(&again);
    assert!(table.contains("two_phases windows: 20 × 1.0 µs, min "), "{table}");
    assert!(table.contains("3 dropped, rings full, on 1 SMs"), "{table}");
    // A bad window line is refused with its line; a line of a kind this egpu does not know
    // (a later egpu's) is skipped.
    let first = text.lines().next().expect("the header");
    let bad = format!("{first}\n{{\"type\":\"window\",\"kernel\":\"10\",\"launch\":\"x\"}}");
    let e = Recording::parse(&bad).expect_err("a bad window").to_string();
    assert!(e.contains("line 2"), "{e}");
    let bad = format!("{first}\n{{\"type\":\"sample\",\"time_ns\":1}}");
    assert!(Recording::parse(&bad).is_err());
    let later = format!("{first}\n{{\"type\":\"heatmap\",\"cells\":[1,2]}}\n");
    assert!(Recording::parse(&later).expect("skipped").windows.is_empty());
}
