//! The data behind each picture, from a recording: plain structs that the tests check (binned
//! counts, axis ranges, the launches marked) and that `draw.rs` turns into pictures.
//!
//! Times are made relative to the picture's first event (device time, `%globaltimer`, is
//! nanoseconds since an arbitrary origin), and every function returns `None` when the
//! recording holds nothing to draw, so a picture says why it is empty instead of failing.

use std::collections::{BTreeMap, BTreeSet};

use egpu::host::mem::Recording;

/// The most address ranges the heatmap keeps as rows: the bucket grows (by powers of two)
/// until the touched ones fit.
pub(crate) const MAX_ROWS: usize = 64;
/// The smallest address range of a row, in bytes.
pub(crate) const MIN_BUCKET: u64 = 256;
/// The heatmap's columns: device time cut in this many equal bins.
pub(crate) const TIME_BINS: usize = 100;
/// The most launches the heatmap marks (the first ones, by start).
pub(crate) const MAX_MARKS: usize = 64;
/// Histogram bins per decade of launch duration.
pub(crate) const BINS_PER_DECADE: u32 = 4;

/// A stretch of device time with launches, samples or windows in it, and where it starts on a
/// picture's time axis ([`TimeAxis`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stretch {
    /// Its start, nanoseconds after [`Heatmap::t0_ns`].
    pub(crate) start_ns: u64,
    /// Its end, nanoseconds after [`Heatmap::t0_ns`].
    pub(crate) end_ns: u64,
    /// Where its start is on the axis, in nanoseconds.
    pub(crate) axis_ns: u64,
}

/// An idle stretch longer than this share of the picture's time is cut.
pub(crate) const IDLE_CUT: f64 = 0.05;
/// A cut idle stretch keeps this share of the busy time on the axis.
pub(crate) const CUT_WIDTH: f64 = 0.02;

/// A launch drawn on the heatmap: its kernel and its times, relative to the picture's start.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Mark {
    /// The kernel's name.
    pub(crate) kernel: String,
    /// The launch's grid id.
    pub(crate) grid: u64,
    /// Its start, nanoseconds after [`Heatmap::t0_ns`].
    pub(crate) start_ns: u64,
    /// Its end, nanoseconds after [`Heatmap::t0_ns`].
    pub(crate) end_ns: u64,
}

/// A row of the heatmap: a touched address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    /// Its first byte.
    pub(crate) start: u64,
    /// Whether untouched ranges lie between it and the row before (collapsed, drawn as a line).
    pub(crate) gap_before: bool,
}

/// Address ranges × device time, counted from the `sample` records.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Heatmap {
    /// The bytes of a row's range (a power of two).
    pub(crate) bucket: u64,
    /// The touched ranges, by address.
    pub(crate) rows: Vec<Row>,
    /// The lowest and highest sampled addresses (the last byte of the highest access).
    pub(crate) addr_min: u64,
    /// The highest sampled access's last byte.
    pub(crate) addr_max: u64,
    /// Device time of the picture's left edge, in nanoseconds.
    pub(crate) t0_ns: u64,
    /// The time axis.
    pub(crate) time: TimeAxis,
    /// The samples (warp-level requests) per row and time bin: `counts[row][bin]`.
    pub(crate) counts: Vec<Vec<u64>>,
    /// The launches marked, by start.
    pub(crate) marks: Vec<Mark>,
    /// Launches of the sampled kernels left unmarked past [`MAX_MARKS`].
    pub(crate) unmarked: usize,
}

impl Heatmap {
    /// Every sample counted.
    pub(crate) fn total(&self) -> u64 {
        self.counts.iter().flatten().sum()
    }

    /// The busiest cell's count.
    pub(crate) fn max(&self) -> u64 {
        self.counts.iter().flatten().copied().max().unwrap_or(0)
    }
}

/// A picture's time axis: the busy stretches of device time end to end, the idle stretches
/// between them longer than [`IDLE_CUT`] of the whole cut down to [`CUT_WIDTH`] of the busy time
/// each, so that kernels run far apart (the host copying between them, say) each keep room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TimeAxis {
    /// The busy stretches, in time order; between two, an idle stretch was cut.
    pub(crate) stretches: Vec<Stretch>,
    /// The axis' length, in nanoseconds (at least 1).
    pub(crate) span_ns: u64,
}

impl TimeAxis {
    /// The axis of the busy `spans` (start, end, nanoseconds after the picture's start) of a
    /// picture of `whole` nanoseconds: merged, the idle stretches between them longer than
    /// [`IDLE_CUT`] of `whole` cut to [`CUT_WIDTH`] of the busy time.
    fn new(mut spans: Vec<(u64, u64)>, whole: u64) -> TimeAxis {
        spans.sort_unstable();
        let cut = (whole as f64 * IDLE_CUT) as u64;
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (s, e) in spans {
            match merged.last_mut() {
                Some(last) if s <= last.1.saturating_add(cut) => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let busy: u64 = merged.iter().map(|(s, e)| e - s).sum();
        let width = ((busy as f64 * CUT_WIDTH) as u64).max(1);
        let mut out = Vec::with_capacity(merged.len());
        let mut axis = 0;
        for (s, e) in merged {
            if !out.is_empty() {
                axis += width;
            }
            out.push(Stretch { start_ns: s, end_ns: e, axis_ns: axis });
            axis += e - s;
        }
        TimeAxis { stretches: out, span_ns: axis.max(1) }
    }

    /// Where device time `t` (nanoseconds after the picture's start) is on the axis: in a
    /// stretch, its place there; in a cut, the next stretch's start.
    pub(crate) fn at(&self, t: u64) -> u64 {
        let s = &self.stretches;
        match s.iter().rev().find(|s| s.start_ns <= t) {
            Some(s) if t <= s.end_ns => s.axis_ns + (t - s.start_ns),
            Some(last) => {
                let next = s.iter().find(|n| n.start_ns > t);
                next.map_or(last.axis_ns + (last.end_ns - last.start_ns), |n| n.axis_ns)
            }
            None => 0,
        }
    }

    /// The device time (nanoseconds after the picture's start) at `axis` nanoseconds along the
    /// axis; in a cut, the time at the cut's start.
    pub(crate) fn time(&self, axis: u64) -> u64 {
        let s = self.stretches.iter().rev().find(|s| s.axis_ns <= axis).or(self.stretches.first());
        s.map_or(axis, |s| (s.start_ns + (axis - s.axis_ns.min(axis))).min(s.end_ns))
    }

    /// The cuts: where each starts and ends on the axis, and the idle nanoseconds it stands for.
    pub(crate) fn cuts(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.stretches.windows(2).map(|p| {
            (
                p[0].axis_ns + (p[0].end_ns - p[0].start_ns),
                p[1].axis_ns,
                p[1].start_ns - p[0].end_ns,
            )
        })
    }
}

/// The name of the kernel whose id is `id` (the id itself when the recording lacks it).
pub(crate) fn kernel_name(recording: &Recording, id: &str) -> String {
    recording.kernels.iter().find(|k| k.id == id).map_or_else(|| id.to_owned(), |k| k.name.clone())
}

/// The heatmap of `recording`'s samples; `None` without samples.
pub(crate) fn heatmap(recording: &Recording) -> Option<Heatmap> {
    let samples = &recording.samples;
    if samples.is_empty() {
        return None;
    }
    let addr_min = samples.iter().map(|s| s.addr).min()?;
    let addr_max =
        samples.iter().map(|s| s.addr.saturating_add(u64::from(s.size.max(1)) - 1)).max()?;
    // The smallest bucket whose touched ranges fit in MAX_ROWS rows.
    let mut bucket = MIN_BUCKET;
    let touched = loop {
        let t: BTreeSet<u64> = samples.iter().map(|s| s.addr / bucket).collect();
        if t.len() <= MAX_ROWS || bucket >= 1 << 62 {
            break t;
        }
        bucket *= 2;
    };
    let index: BTreeMap<u64, usize> = touched.iter().enumerate().map(|(i, &b)| (b, i)).collect();
    let mut rows = Vec::with_capacity(touched.len());
    let mut previous: Option<u64> = None;
    for &b in &touched {
        rows.push(Row { start: b * bucket, gap_before: previous.is_some_and(|p| p + 1 != b) });
        previous = Some(b);
    }
    // The launches the samples came from, marked; the time axis covers them and the samples.
    let sampled: BTreeSet<(&str, u64)> =
        samples.iter().map(|s| (s.kernel.as_str(), s.launch)).collect();
    let mut launches: Vec<_> = recording
        .launches
        .iter()
        .filter(|l| sampled.contains(&(l.kernel.as_str(), l.grid)))
        .collect();
    launches.sort_by_key(|l| (l.start_ns, l.grid));
    let unmarked = launches.len().saturating_sub(MAX_MARKS);
    launches.truncate(MAX_MARKS);
    let times = samples.iter().map(|s| s.time_ns);
    let t0_ns = times.clone().chain(launches.iter().map(|l| l.start_ns)).min()?;
    let t1_ns = times.chain(launches.iter().map(|l| l.end_ns.max(l.start_ns))).max()?;
    // The time axis: the launches and the samples, the long idle stretches between them cut.
    let spans = launches
        .iter()
        .map(|l| (l.start_ns - t0_ns, l.end_ns.max(l.start_ns) - t0_ns))
        .chain(samples.iter().map(|s| (s.time_ns - t0_ns, s.time_ns - t0_ns)))
        .collect();
    let time = TimeAxis::new(spans, t1_ns - t0_ns);
    let mut counts = vec![vec![0u64; TIME_BINS]; rows.len()];
    for s in samples {
        let row = index[&(s.addr / bucket)];
        counts[row][time_bin(time.at(s.time_ns - t0_ns), time.span_ns)] += 1;
    }
    let marks = launches
        .iter()
        .map(|l| Mark {
            kernel: kernel_name(recording, &l.kernel),
            grid: l.grid,
            start_ns: l.start_ns - t0_ns,
            end_ns: l.end_ns.max(l.start_ns) - t0_ns,
        })
        .collect();
    Some(Heatmap { bucket, rows, addr_min, addr_max, t0_ns, time, counts, marks, unmarked })
}

/// The time bin of `t` nanoseconds into a span of `span` (the end falls in the last bin).
fn time_bin(t: u64, span: u64) -> usize {
    let bin = (u128::from(t) * TIME_BINS as u128 / u128::from(span)) as usize;
    bin.min(TIME_BINS - 1)
}

/// One kernel's bandwidth over time: a line per launch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    /// The kernel's name.
    pub(crate) kernel: String,
    /// Per launch, its windows' (middle in microseconds along [`Bandwidth::time`], bytes per
    /// second), by time.
    pub(crate) launches: Vec<Vec<(f64, f64)>>,
}

impl Series {
    /// Every window's bandwidth, in bytes per second.
    pub(crate) fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.launches.iter().flatten().map(|&(_, y)| y)
    }
}

/// Bandwidth over time per kernel, from the `window` records.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Bandwidth {
    /// Device time of the left edge, in nanoseconds: the first window's start.
    pub(crate) t0_ns: u64,
    /// The time axis (the windows' stretches, long idle ones cut).
    pub(crate) time: TimeAxis,
    /// The y axis' top, bytes per second: the highest window or the peak, whichever is higher,
    /// and a margin.
    pub(crate) top: f64,
    /// The device's peak, bytes per second (0: unknown, not drawn).
    pub(crate) peak: f64,
    /// The kernels, by name.
    pub(crate) series: Vec<Series>,
}

/// The bandwidth plot of `recording`'s windows; `None` without windows.
pub(crate) fn bandwidth(recording: &Recording) -> Option<Bandwidth> {
    let windows = &recording.windows;
    let t0_ns = windows.iter().map(|w| w.start_ns).min()?;
    let t1_ns = windows.iter().map(|w| w.end_ns.max(w.start_ns)).max()?;
    let spans = windows.iter().map(|w| (w.start_ns - t0_ns, w.end_ns.max(w.start_ns) - t0_ns));
    let time = TimeAxis::new(spans.collect(), t1_ns - t0_ns);
    let us = |ns: u64| time.at(ns - t0_ns) as f64 / 1e3;
    let mut by_kernel: BTreeMap<String, BTreeMap<u64, Vec<(f64, f64)>>> = BTreeMap::new();
    for w in windows {
        let middle = w.start_ns + w.duration_ns() / 2;
        by_kernel
            .entry(kernel_name(recording, &w.kernel))
            .or_default()
            .entry(w.launch)
            .or_default()
            .push((us(middle), w.bytes_per_second()));
    }
    let series: Vec<Series> = by_kernel
        .into_iter()
        .map(|(kernel, launches)| {
            let launches = launches
                .into_values()
                .map(|mut points| {
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    points
                })
                .collect();
            Series { kernel, launches }
        })
        .collect();
    let peak = recording.header.peak_bytes_per_second.max(0.0);
    let highest = series.iter().flat_map(Series::values).fold(0.0, f64::max);
    let top = (highest.max(peak) * 1.1).max(1.0);
    Some(Bandwidth { t0_ns, time, top, peak, series })
}

/// Launch durations per kernel, binned on a log scale.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Durations {
    /// The bins' edges, nanoseconds: bin `i` is `edges[i]..edges[i + 1]` (one more than bins).
    pub(crate) edges: Vec<f64>,
    /// Per kernel (by name), its launches per bin.
    pub(crate) kernels: Vec<(String, Vec<u64>)>,
}

impl Durations {
    /// Every launch counted.
    pub(crate) fn total(&self) -> u64 {
        self.kernels.iter().flat_map(|(_, c)| c).sum()
    }

    /// The highest bin, every kernel's stacked.
    pub(crate) fn tallest(&self) -> u64 {
        (0..self.edges.len().saturating_sub(1))
            .map(|i| self.kernels.iter().map(|(_, c)| c[i]).sum::<u64>())
            .max()
            .unwrap_or(0)
    }
}

/// The histogram of `recording`'s launch durations; `None` without launches.
pub(crate) fn durations(recording: &Recording) -> Option<Durations> {
    let launches = &recording.launches;
    // A launch of 0 ns (clocks that did not move) counts as 1 ns on the log axis.
    let ns = |l: &egpu::host::mem::Launch| l.duration_ns().max(1) as f64;
    let shortest = launches.iter().map(ns).reduce(f64::min)?;
    let longest = launches.iter().map(ns).reduce(f64::max)?;
    let per = f64::from(BINS_PER_DECADE);
    let low = (shortest.log10() * per).floor() as i32;
    let high = ((longest.log10() * per).floor() as i32 + 1).max(low + 1);
    let edges: Vec<f64> = (low..=high).map(|e| 10f64.powf(f64::from(e) / per)).collect();
    let bins = edges.len() - 1;
    let mut kernels: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for l in launches {
        let bin = ((ns(l).log10() * per).floor() as i32 - low).clamp(0, bins as i32 - 1) as usize;
        // A graph node's line counts once (its times are its last replay's).
        kernels.entry(kernel_name(recording, &l.kernel)).or_insert_with(|| vec![0; bins])[bin] += 1;
    }
    Some(Durations { edges, kernels: kernels.into_iter().collect() })
}

/// Sampled requests per SM, per kernel (stacked in the picture).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sms {
    /// The SMs drawn, `0..sms`: the device's count, or more when a sample names a higher SM.
    pub(crate) sms: u32,
    /// Per kernel (by name), its samples per SM: `counts[sm]`, `sms` long.
    pub(crate) kernels: Vec<(String, Vec<u64>)>,
}

impl Sms {
    /// Every sample counted.
    pub(crate) fn total(&self) -> u64 {
        self.kernels.iter().flat_map(|(_, c)| c).sum()
    }

    /// One SM's samples, every kernel's.
    pub(crate) fn per_sm(&self, sm: usize) -> u64 {
        self.kernels.iter().map(|(_, c)| c[sm]).sum()
    }

    /// The busiest SM's samples, every kernel's.
    pub(crate) fn tallest(&self) -> u64 {
        (0..self.sms as usize).map(|sm| self.per_sm(sm)).max().unwrap_or(0)
    }

    /// The SMs without a sample.
    pub(crate) fn idle(&self) -> usize {
        (0..self.sms as usize).filter(|&sm| self.per_sm(sm) == 0).count()
    }
}

/// The samples of `recording` per SM and kernel; `None` without samples.
pub(crate) fn sms(recording: &Recording) -> Option<Sms> {
    let highest = recording.samples.iter().map(|s| s.sm).max()?;
    let sms = recording.header.sms.max(highest + 1);
    let mut kernels: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for s in &recording.samples {
        kernels
            .entry(kernel_name(recording, &s.kernel))
            .or_insert_with(|| vec![0; sms as usize])[s.sm as usize] += 1;
    }
    Some(Sms { sms, kernels: kernels.into_iter().collect() })
}
