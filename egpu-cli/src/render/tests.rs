//! The data behind the pictures, from the recordings of a real H200 (`tests/data/mem/`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use egpu::host::mem::Recording;

use super::data::{self, MAX_ROWS, TIME_BINS};

fn recording(name: &str) -> Recording {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/mem").join(name);
    super::read(&path).unwrap_or_else(|e| panic!("{e}"))
}

const PHASES: &str = "_Z6phasesPKfPfxPKiiPi";

#[test]
fn heatmap_counts_every_sample_over_their_addresses() {
    let r = recording("mem_timing-timeline-h200.egpumem");
    let h = data::heatmap(&r).expect("samples");
    assert_eq!(r.samples.len(), 4000);
    assert_eq!(h.total(), r.samples.len() as u64, "every sample in a cell");
    let lowest = r.samples.iter().map(|s| s.addr).min().unwrap();
    let highest = r.samples.iter().map(|s| s.addr + u64::from(s.size) - 1).max().unwrap();
    assert_eq!((h.addr_min, h.addr_max), (lowest, highest));
    // The rows cover the samples: the first holds the lowest, the last the highest.
    assert!(h.rows[0].start <= lowest && lowest < h.rows[0].start + h.bucket);
    let last = h.rows.last().unwrap();
    assert!(last.start <= highest - (highest % h.bucket) && highest < last.start + h.bucket);
    assert!(!h.rows.is_empty() && h.rows.len() <= MAX_ROWS);
    assert!(h.bucket.is_power_of_two());
    // Only touched ranges are rows: every row holds a sample.
    assert!(h.counts.iter().all(|row| row.len() == TIME_BINS && row.iter().sum::<u64>() > 0));
    let touched: BTreeSet<u64> = r.samples.iter().map(|s| s.addr / h.bucket).collect();
    assert_eq!(touched.len(), h.rows.len());
    // Every sample lies in the time axis; one launch leaves nothing to cut.
    assert!(
        r.samples
            .iter()
            .all(|s| s.time_ns >= h.t0_ns && h.time.at(s.time_ns - h.t0_ns) <= h.time.span_ns)
    );
    assert_eq!(h.time.stretches.len(), 1);
}

#[test]
fn heatmap_marks_the_sampled_launch() {
    let r = recording("mem_timing-timeline-h200.egpumem");
    let h = data::heatmap(&r).expect("samples");
    let launch = r.launches.iter().find(|l| data::kernel_name(&r, &l.kernel) == PHASES).unwrap();
    let marks: Vec<_> = h.marks.iter().filter(|m| m.kernel == PHASES).collect();
    assert_eq!(marks.len(), 1, "{:?}", h.marks);
    assert_eq!(marks[0].grid, launch.grid);
    assert_eq!(marks[0].end_ns - marks[0].start_ns, launch.duration_ns());
    assert!(h.time.at(marks[0].end_ns) <= h.time.span_ns);
    assert_eq!(h.unmarked, 0);
}

#[test]
fn bandwidth_shows_the_two_phases() {
    let r = recording("mem_timing-timeline-h200.egpumem");
    let b = data::bandwidth(&r).expect("windows");
    assert_eq!(b.series.len(), 1);
    let s = &b.series[0];
    assert_eq!(s.kernel, PHASES);
    let values: Vec<f64> = s.values().collect();
    assert_eq!(values.len(), 50);
    let max = values.iter().copied().fold(0.0, f64::max);
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(max > 3.0 * min, "max {max} min {min}");
    assert_eq!(b.peak, r.header.peak_bytes_per_second);
    assert!(b.top >= b.peak && b.top >= max);
    // The x axis covers every window's middle.
    let end_us = b.time.span_ns as f64 / 1e3;
    assert!(s.launches.iter().flatten().all(|&(x, _)| (0.0..=end_us).contains(&x)));
}

#[test]
fn durations_count_every_launch() {
    let r = recording("mem_timing-h200.egpumem");
    let d = data::durations(&r).expect("launches");
    assert_eq!(r.launches.len(), 38);
    assert_eq!(d.total(), r.launches.len() as u64);
    let kernels: BTreeSet<String> =
        r.launches.iter().map(|l| data::kernel_name(&r, &l.kernel)).collect();
    assert_eq!(d.kernels.iter().map(|(k, _)| k.clone()).collect::<BTreeSet<_>>(), kernels);
    // The edges grow and cover every duration.
    assert!(d.edges.windows(2).all(|e| e[0] < e[1]));
    let (low, high) = (d.edges[0], d.edges[d.edges.len() - 1]);
    assert!(r.launches.iter().all(|l| {
        let ns = l.duration_ns().max(1) as f64;
        low <= ns && ns < high
    }));
}

#[test]
fn sms_count_every_sample_on_its_sm() {
    let r = recording("mem_timing-timeline-h200.egpumem");
    let d = data::sms(&r).expect("samples");
    assert_eq!(d.total(), 4000, "the bars sum to the samples");
    assert_eq!(d.sms, r.header.sms);
    assert_eq!(d.sms, 132);
    assert_eq!(d.kernels.len(), 1);
    assert_eq!(d.kernels[0].0, PHASES);
    assert!(d.kernels.iter().all(|(_, c)| c.len() == d.sms as usize));
    // Each SM's bar is its samples, counted here apart.
    for sm in 0..d.sms {
        let n = r.samples.iter().filter(|s| s.sm == sm).count() as u64;
        assert_eq!(d.per_sm(sm as usize), n, "SM {sm}");
    }
    let touched: BTreeSet<u32> = r.samples.iter().map(|s| s.sm).collect();
    assert_eq!(d.idle(), d.sms as usize - touched.len());
    assert!(d.tallest() > 0 && d.tallest() < d.total());
}

#[test]
fn recordings_without_data_give_none_and_say_why() {
    let r = recording("mem_timing-pattern-h200.egpumem");
    assert!(data::heatmap(&r).is_none());
    assert!(data::bandwidth(&r).is_none());
    assert!(data::durations(&r).is_none());
    assert!(data::sms(&r).is_none());
    let missing = super::missing(&r);
    assert!(missing.iter().all(Option::is_some));
    assert!(missing[0].unwrap().contains("--sets timeline"));
    let header = r#"{"type":"header","format":"egpu-mem","version":1,"egpu":"","device":"","driver":"","sms":0,"peak_bytes_per_second":0.0,"pid":1,"command":"","sets":[]}"#;
    let empty = Recording::parse(header).unwrap();
    let dir = std::env::temp_dir().join(format!("egpu-render-empty-{}", std::process::id()));
    super::render(&empty, &dir).unwrap();
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(report.contains("heatmap: no samples: run with --sets timeline"), "{report}");
    assert!(report.contains("sms: no samples: run with --sets timeline"), "{report}");
    for picture in super::PICTURES {
        let svg = std::fs::read_to_string(dir.join(format!("{picture}.svg"))).unwrap();
        assert!(svg.contains("no data"), "{picture}: {svg}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The allocations picture: hottest allocation first, kernels by bytes, allocations no kernel
/// reached kept as empty rows, accesses in no allocation a row of their own; past
/// `MAX_COLUMNS` kernels, the rest summed in one column.
#[test]
fn allocations_rows_hottest_first_with_the_cold_ones_kept() {
    use egpu::host::mem::allocs::{AllocTraffic, AllocUse, AllocationRecord};
    let mut r = recording("mem_timing-pattern-h200.egpumem");
    let made = |id, bytes| AllocationRecord { id, addr: id << 20, bytes, ..Default::default() };
    r.allocations = vec![made(1, 4096), made(2, 8192), made(3, 100)];
    r.allocations[1].copied_in = 8192;
    let used = |kernel: &str, alloc, loaded| AllocUse {
        kernel: kernel.to_owned(),
        alloc,
        traffic: AllocTraffic { loaded, ..Default::default() },
    };
    r.alloc_traffic =
        vec![used("aa", 1, 10), used("bb", 2, 500), used("aa", 2, 5), used("bb", 0, 7)];
    let d = super::allocs::allocations(&r).expect("allocations");
    assert_eq!(d.kernels, ["bb", "aa"]);
    let rows: Vec<(&str, &[u64])> =
        d.rows.iter().map(|r| (r.label.as_str(), &r.bytes[..])).collect();
    assert_eq!(
        rows,
        [
            ("#2 8.19 kB, 8.19 kB copied in", &[500, 5][..]),
            ("#1 4.10 kB", &[0, 10][..]),
            ("in no allocation", &[7, 0][..]),
            ("#3 100 B", &[0, 0][..]),
        ]
    );
    // Many kernels: the columns stop at MAX_COLUMNS, the last summing the rest.
    r.alloc_traffic = (0..40).map(|k| used(&format!("{k:02}"), 1, 100 + k)).collect();
    let d = super::allocs::allocations(&r).expect("allocations");
    assert_eq!(d.kernels.len(), super::allocs::MAX_COLUMNS);
    assert_eq!(d.kernels.last().map(String::as_str), Some("25 other kernels"));
    assert_eq!(d.rows[0].bytes.iter().sum::<u64>(), (0..40).map(|k| 100 + k).sum::<u64>());
    assert!(super::missing(&r)[4].is_none());
}

#[test]
fn html_is_escaped() {
    assert_eq!(super::escape("<a & 'b\">"), "&lt;a &amp; &#39;b&quot;&gt;");
}

const HOT: &str = "_Z3hotPKfPj";
const STRIDED: &str = "_Z7stridedPKfPf";

#[test]
fn a_kernel_alone_keeps_its_own_launches_windows_sites_and_samples() {
    let r = recording("mem_timing-hot-strided-h200.egpumem");
    let all = r.samples.len();
    let hot = super::select(r.clone(), &regex_lite::Regex::new("hot").unwrap());
    assert_eq!(hot.kernels.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), [HOT]);
    let id = &hot.kernels[0].id;
    assert_eq!(hot.launches.len(), 1);
    assert!(hot.launches.iter().all(|l| &l.kernel == id));
    assert!(!hot.windows.is_empty() && hot.windows.iter().all(|w| &w.kernel == id));
    assert!(!hot.sites.is_empty() && hot.sites.iter().all(|s| &s.kernel == id));
    assert!(hot.samples.iter().all(|s| &s.kernel == id));
    let strided = super::select(r, &regex_lite::Regex::new("strided").unwrap());
    assert_eq!(strided.kernels.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), [STRIDED]);
    assert_eq!(hot.samples.len() + strided.samples.len(), all, "each sample is one kernel's");
    // A pattern that finds nothing leaves nothing to draw.
    let none = super::select(strided, &regex_lite::Regex::new("^saxpy$").unwrap());
    assert!(none.kernels.is_empty() && data::heatmap(&none).is_none());
}

/// `hot`: 2^22 atomics on 16 counters while the reads stream through x. The counters' range is
/// the one row lit through the whole launch, and the busiest; each range of x is read over a
/// few time bins only.
#[test]
fn a_hot_page_is_the_row_lit_all_along() {
    let r = recording("mem_timing-hot-strided-h200.egpumem");
    let hot = super::select(r, &regex_lite::Regex::new("hot").unwrap());
    let h = data::heatmap(&hot).expect("samples");
    let lit = |row: &Vec<u64>| row.iter().filter(|&&c| c > 0).count();
    let busiest = (0..h.rows.len()).max_by_key(|&i| h.counts[i].iter().sum::<u64>()).unwrap();
    let counters = hot.samples.iter().find(|s| s.access == "atomic").expect("an atomic").addr;
    let row = &h.rows[busiest];
    assert!(row.start <= counters && counters < row.start + h.bucket, "the counters' row");
    assert!(lit(&h.counts[busiest]) > TIME_BINS / 2, "lit over most of the launch");
    let others: Vec<usize> =
        (0..h.rows.len()).filter(|&i| i != busiest).map(|i| lit(&h.counts[i])).collect();
    assert!(others.iter().all(|&n| n < TIME_BINS / 8), "streamed ranges: {others:?}");
}

/// `strided` reads floats 128 bytes apart: a warp's request spans 4 KiB, and at any moment the
/// warps read over a wider range of x than a unit-stride kernel's would: its requests touch 32
/// sectors where 4 would do (the `pattern` set's site), and its sampled addresses per time bin
/// spread over more rows than `hot`'s reads.
#[test]
fn strided_reads_spread_where_coalesced_ones_stay_together() {
    let r = recording("mem_timing-hot-strided-h200.egpumem");
    let strided = super::select(r.clone(), &regex_lite::Regex::new("strided").unwrap());
    let load = |rec: &Recording| {
        let site = rec.sites.iter().find(|s| s.access.as_deref() == Some("load"));
        site.expect("its load").requests.sectors_per_request()
    };
    assert_eq!(load(&strided), 32.0);
    let hot = super::select(r, &regex_lite::Regex::new("hot").unwrap());
    assert_eq!(load(&hot), 4.0);
    // Reads only: the span of addresses each warp request covers.
    let span = |rec: &Recording| {
        let loads: Vec<u64> =
            rec.samples.iter().filter(|s| s.access == "load").map(|s| s.addr).collect();
        (loads.iter().max().unwrap() - loads.iter().min().unwrap()) / loads.len() as u64
    };
    assert!(span(&strided) > 10 * span(&hot), "{} against {}", span(&strided), span(&hot));
}

/// `strided` and `hot` ran 1.1 ms apart (the host copying `strided`'s output back between them):
/// the axis cuts that idle stretch short, keeps each launch whole, and its ticks name device
/// time.
#[test]
fn a_long_idle_stretch_is_cut_from_the_time_axis() {
    let r = recording("mem_timing-hot-strided-h200.egpumem");
    let h = data::heatmap(&r).expect("samples");
    let [first, second] = h.time.stretches.as_slice() else { panic!("{:?}", h.time.stretches) };
    let idle = second.start_ns - first.end_ns;
    assert!(idle > 1_000_000, "{idle} ns idle");
    let busy = (first.end_ns - first.start_ns) + (second.end_ns - second.start_ns);
    assert_eq!(h.time.span_ns, busy + (busy as f64 * data::CUT_WIDTH) as u64);
    // Each launch is inside one stretch, its length kept on the axis.
    for m in &h.marks {
        let inside =
            h.time.stretches.iter().any(|s| s.start_ns <= m.start_ns && m.end_ns <= s.end_ns);
        assert!(inside, "{m:?}");
        assert_eq!(h.time.at(m.end_ns) - h.time.at(m.start_ns), m.end_ns - m.start_ns);
    }
    // The axis maps back to device time inside the stretches.
    assert_eq!(h.time.time(h.time.at(second.start_ns + 1000)), second.start_ns + 1000);
    assert_eq!(h.time.at(first.end_ns + idle / 2), second.axis_ns, "a cut's time at its end");
    // Every sample in a bin, the bins over the axis.
    assert_eq!(h.total(), r.samples.len() as u64);
    // Samples of the second launch land right of the cut.
    let hot = r.launches.iter().find(|l| data::kernel_name(&r, &l.kernel) == HOT).unwrap();
    let after = (h.time.at(hot.start_ns - h.t0_ns) as f64 / h.time.span_ns as f64
        * TIME_BINS as f64) as usize;
    let row_hot: u64 = h.counts.iter().map(|row| row[after..].iter().sum::<u64>()).sum();
    let in_hot = r.samples.iter().filter(|s| s.time_ns >= hot.start_ns).count() as u64;
    assert_eq!(row_hot, in_hot);
    // The bandwidth plot cuts the same idle stretch from its axis.
    let b = data::bandwidth(&r).expect("windows");
    assert_eq!(b.time.stretches.len(), 2, "{:?}", b.time.stretches);
    let (_, _, cut) = b.time.cuts().next().expect("a cut");
    assert!(cut > 1_000_000, "{cut} ns");
    let end_us = b.time.span_ns as f64 / 1e3;
    assert!(b.series.iter().all(|s| s.values().count() > 0));
    assert!(b.series.iter().flat_map(|s| s.launches.iter().flatten()).all(|&(x, _)| x <= end_us));
}
