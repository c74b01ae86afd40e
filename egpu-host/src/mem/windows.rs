//! The `timeline` set's records turned into what a recording keeps: bandwidth over time windows
//! per kernel, and a uniform sample of the raw records (for pictures of address × time).
//!
//! [`Timeline`] takes the records as they are drained ([`Timeline::drain`], [`Timeline::add`]):
//! it adds each record's bytes to a bin of [`BIN_NS`] of its launch (so the records need not be
//! kept), and keeps at most `keep` of them, a uniform sample of all (reservoir sampling, a fixed
//! seed). [`Timeline::finish`] then cuts each launch into windows of the kernel's window length
//! (`--window`, or [`AUTO_WINDOWS`]-th of the kernel's longest launch, whole bins, at least
//! [`MIN_AUTO_WINDOW_NS`]), from the launch's first record to its last: a window's bytes are its
//! bins' sampled bytes times N (the N each record carries), so a kernel's windows sum to N
//! times the bytes its sampled warps moved.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use egpu_maps::{MapError, RawMap, RingBuf};
use serde::{Deserialize, Serialize};

use super::record::{Recording, kernel_hex};
use super::timeline::{ATOMIC, LOAD, Record, STORE};

/// The bins' width: windows are whole bins.
pub const BIN_NS: u64 = 128;
/// Windows per kernel without `--window`: its longest launch cut in this many.
pub const AUTO_WINDOWS: u64 = 50;
/// The shortest automatic window (`%globaltimer` moves in steps of up to a microsecond).
pub const MIN_AUTO_WINDOW_NS: u64 = 1000;
/// Raw records a recording keeps unless told otherwise (`--max-records`).
pub const KEEP: usize = 100_000;

/// A window of a launch: the bytes its sampled warps moved in it, times the sampling factor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// The kernel's id, in hexadecimal.
    pub kernel: String,
    /// The launch's `%gridid`.
    pub launch: u64,
    /// Its start, device time (`%globaltimer`), in nanoseconds.
    pub start_ns: u64,
    /// Its end (the last window of a launch ends with its last bin).
    pub end_ns: u64,
    /// Bytes, scaled by the sampling factor.
    pub bytes: u64,
}

impl Window {
    /// Its length in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// Its bandwidth, bytes per second (0 for an empty window).
    pub fn bytes_per_second(&self) -> f64 {
        match self.duration_ns() {
            0 => 0.0,
            ns => self.bytes as f64 / (ns as f64 * 1e-9),
        }
    }
}

/// A raw record kept (`"type":"sample"`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// The device clock when the warp's leader recorded it, in nanoseconds.
    pub time_ns: u64,
    /// The SM.
    pub sm: u32,
    /// The leader lane's address.
    pub addr: u64,
    /// Bytes per lane.
    pub size: u32,
    /// Lanes that ran the access together.
    pub lanes: u32,
    /// The class of instruction ([`MemAccessCtx::class`](egpu_ebpf::MemAccessCtx::class)).
    pub class: u32,
    /// `load`, `store` or `atomic`.
    pub access: String,
    /// The kernel's id, in hexadecimal.
    pub kernel: String,
    /// The launch's `%gridid`.
    pub launch: u64,
}

/// What the `timeline` set saw, in the header.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineSummary {
    /// N: one warp in N was sampled (or, with `lines`, one line in N of each warp's).
    pub sample: u64,
    /// Whether the records sampled lines of each warp's rather than warps (`egpu mem run
    /// --sample-by lines`, the records' [`LINES`](super::timeline::LINES) bit).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lines: bool,
    /// Whether the warps were drawn again at each turn of a loop (`--sample-by turns`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub turns: bool,
    /// The window length asked for, in nanoseconds; 0: automatic, per kernel.
    pub window_ns: u64,
    /// Records drained.
    pub records: u64,
    /// Records kept as `sample` lines.
    pub kept: u64,
    /// Records dropped because a ring was full, every ring's.
    pub dropped: u64,
    /// Of those, by SM, its number in decimal (SMs that dropped none left out; a JSON object's
    /// keys are strings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dropped_by_sm: BTreeMap<String, u64>,
}

impl TimelineSummary {
    /// What one in N was sampled of, in words.
    pub fn unit(&self) -> &'static str {
        match (self.lines, self.turns) {
            (true, _) => "lines of each warp's",
            (false, true) => "warps, drawn at each turn of a loop,",
            (false, false) => "warps",
        }
    }
}

/// A launch's bins.
#[derive(Clone, Debug, Default)]
struct Bins {
    first: u64,
    last: u64,
    /// Sampled bytes by bin (time / [`BIN_NS`]).
    bytes: BTreeMap<u64, u64>,
}

/// The records of the `timeline` set, as they are drained.
#[derive(Clone, Debug)]
pub struct Timeline {
    sample: u64,
    keep: usize,
    kept: Vec<Record>,
    records: u64,
    /// A record sampled lines, not warps.
    lines: bool,
    /// By kernel and launch.
    launches: BTreeMap<(u64, u64), Bins>,
    /// The reservoir's generator (xorshift64).
    state: u64,
}

impl Timeline {
    /// An empty timeline of records sampled one warp in `sample` (what the header says; each
    /// record is scaled by the N it carries), keeping at most `keep` raw records.
    pub fn new(sample: u64, keep: usize) -> Timeline {
        Timeline {
            sample: sample.max(1),
            keep,
            kept: Vec::new(),
            records: 0,
            lines: false,
            launches: BTreeMap::new(),
            state: 0x2545_F491_4F6C_DD1D,
        }
    }

    /// Records added so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Adds one record.
    pub fn add(&mut self, r: &Record) {
        self.records += 1;
        self.lines |= r.kind & super::timeline::LINES != 0;
        let bins = self.launches.entry((r.kernel, r.launch)).or_insert_with(|| Bins {
            first: r.time,
            last: r.time,
            bytes: BTreeMap::new(),
        });
        bins.first = bins.first.min(r.time);
        bins.last = bins.last.max(r.time);
        // The record stands for N requests: its bytes times N (N from the record).
        let scaled = r.bytes().checked_shl(r.shift()).unwrap_or(u64::MAX);
        let bin = bins.bytes.entry(r.time / BIN_NS).or_insert(0);
        *bin = bin.saturating_add(scaled);
        // Algorithm R: the n-th record replaces a kept one with probability keep / n.
        if self.kept.len() < self.keep {
            self.kept.push(*r);
        } else if self.keep > 0 {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            let at = self.state % self.records;
            if let Some(slot) = usize::try_from(at).ok().and_then(|i| self.kept.get_mut(i)) {
                *slot = *r;
            }
        }
    }

    /// Consumes the records committed in `ring` (the set's `TIMELINE` map) so far; how many.
    pub fn drain(&mut self, ring: &RawMap) -> Result<u64, MapError> {
        let ring = RingBuf::<Record>::from_raw(ring.clone())?;
        let mut consumer = ring.consumer()?;
        let mut n = 0;
        for r in consumer.drain() {
            self.add(&r);
            n += 1;
        }
        Ok(n)
    }

    /// The windows of every launch, `window_ns` long (`None`: automatic, per kernel), by
    /// kernel and launch, then time.
    pub fn windows(&self, window_ns: Option<u64>) -> Vec<Window> {
        let mut longest: BTreeMap<u64, u64> = BTreeMap::new();
        for (&(kernel, _), b) in &self.launches {
            let span = end_of(b.last) - start_of(b.first);
            let l = longest.entry(kernel).or_insert(0);
            *l = (*l).max(span);
        }
        let mut out = Vec::new();
        for (&(kernel, launch), b) in &self.launches {
            let w = match window_ns {
                Some(w) => w.div_ceil(BIN_NS).max(1) * BIN_NS,
                None => {
                    let span = longest.get(&kernel).copied().unwrap_or(BIN_NS);
                    let w = span.div_ceil(AUTO_WINDOWS).max(MIN_AUTO_WINDOW_NS);
                    w.div_ceil(BIN_NS) * BIN_NS
                }
            };
            let (start, end) = (start_of(b.first), end_of(b.last));
            let mut at = start;
            let hex = kernel_hex(kernel);
            while at < end {
                let to = at.saturating_add(w).min(end);
                let bytes: u64 = b
                    .bytes
                    .range(at / BIN_NS..to.div_ceil(BIN_NS))
                    .fold(0u64, |a, (_, n)| a.saturating_add(*n));
                out.push(Window { kernel: hex.clone(), launch, start_ns: at, end_ns: to, bytes });
                at = to;
            }
        }
        out
    }

    /// [`Timeline::finish`] with the drops counted in `ring`, the set's ring (its shards'
    /// [`RingBuf::shard_drops`]).
    pub fn finish_with_ring(
        &self,
        recording: &mut Recording,
        window_ns: Option<u64>,
        ring: &RawMap,
    ) {
        let drops =
            RingBuf::<Record>::from_raw(ring.clone()).map(|r| r.shard_drops()).unwrap_or_default();
        self.finish(recording, window_ns, &drops, ring.geometry().cpu_shards);
    }

    /// Puts what the timeline holds into `recording`: its windows (`window_ns` long, `None`:
    /// automatic), the records kept (by time), and the header's summary with the drops of the
    /// ring (`drops`, per shard: [`RingBuf::shard_drops`], the first `cpu_shards` the host's).
    pub fn finish(
        &self,
        recording: &mut Recording,
        window_ns: Option<u64>,
        drops: &[u64],
        cpu_shards: u32,
    ) {
        recording.windows = self.windows(window_ns);
        let mut kept = self.kept.clone();
        kept.sort_by_key(|r| (r.time, r.sm, r.addr));
        recording.samples = kept.iter().map(sample).collect();
        let dropped_by_sm: BTreeMap<String, u64> = drops
            .iter()
            .enumerate()
            .skip(cpu_shards as usize)
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| ((s - cpu_shards as usize).to_string(), *n))
            .collect();
        recording.header.timeline = Some(TimelineSummary {
            sample: self.sample,
            lines: self.lines,
            turns: false,
            window_ns: window_ns.unwrap_or(0),
            records: self.records,
            kept: kept.len() as u64,
            dropped: drops.iter().fold(0, |a, n| a.saturating_add(*n)),
            dropped_by_sm,
        });
    }
}

fn start_of(t: u64) -> u64 {
    t / BIN_NS * BIN_NS
}

fn end_of(t: u64) -> u64 {
    (t / BIN_NS).saturating_add(1).saturating_mul(BIN_NS)
}

fn sample(r: &Record) -> Sample {
    let access = match r.access() {
        LOAD => "load",
        STORE => "store",
        ATOMIC => "atomic",
        _ => "unknown",
    };
    Sample {
        time_ns: r.time,
        sm: r.sm,
        addr: r.addr,
        size: r.size,
        lanes: r.lanes,
        class: r.class(),
        access: access.into(),
        kernel: kernel_hex(r.kernel),
        launch: r.launch,
    }
}

/// A kernel's windows in brief: how many, how long, and their bandwidth's least, mean and most
/// (over the windows at least half the kernel's longest: a launch's last window may be a
/// sliver).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowStats {
    /// Windows, every launch's.
    pub windows: usize,
    /// The longest window, in nanoseconds.
    pub window_ns: u64,
    /// The least bandwidth, bytes per second.
    pub min: f64,
    /// The mean: the windows' bytes over their time.
    pub mean: f64,
    /// The most.
    pub max: f64,
    /// Every window's bytes.
    pub bytes: u64,
}

/// The windows of the kernel of id `kernel` (hexadecimal) in brief; `None` without any.
pub fn stats(windows: &[Window], kernel: &str) -> Option<WindowStats> {
    let of: Vec<&Window> = windows.iter().filter(|w| w.kernel == kernel).collect();
    let window_ns = of.iter().map(|w| w.duration_ns()).max()?;
    let full: Vec<&&Window> = of.iter().filter(|w| w.duration_ns() * 2 >= window_ns).collect();
    let bw = full.iter().map(|w| w.bytes_per_second());
    let bytes = of.iter().fold(0u64, |a, w| a.saturating_add(w.bytes));
    let ns = of.iter().fold(0u64, |a, w| a.saturating_add(w.duration_ns()));
    Some(WindowStats {
        windows: of.len(),
        window_ns,
        min: bw.clone().fold(f64::INFINITY, f64::min),
        mean: if ns == 0 { 0.0 } else { bytes as f64 / (ns as f64 * 1e-9) },
        max: bw.fold(0.0, f64::max),
        bytes,
    })
}

/// The table's lines for the timeline: per kernel with windows, their brief; the sampling and
/// the drops.
pub fn render(recording: &Recording) -> String {
    let mut text = String::new();
    let Some(t) = &recording.header.timeline else { return text };
    for k in &recording.kernels {
        let Some(s) = stats(&recording.windows, &k.id) else { continue };
        let rate = |b: f64| format!("{}/s", super::table::bytes(b as u64));
        let _ = writeln!(
            text,
            "  {} windows: {} × {}, min {}, mean {}, max {}",
            cut(&k.name, 40),
            s.windows,
            duration(s.window_ns),
            rate(s.min),
            rate(s.mean),
            rate(s.max)
        );
    }
    let _ = write!(
        text,
        "  timeline: 1 in {} {} sampled, {} records, {} kept",
        t.sample,
        t.unit(),
        t.records,
        t.kept
    );
    if t.dropped > 0 {
        let _ = write!(
            text,
            "; {} dropped, rings full, on {} SMs (the windows miss them)",
            t.dropped,
            t.dropped_by_sm.len()
        );
    }
    text.push('\n');
    text
}

/// A duration as a person reads it (`20 µs`, `1.5 ms`).
fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        _ => format!("{:.2} ms", ns as f64 / 1e6),
    }
}

fn cut(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        return name.to_owned();
    }
    let kept: String = name.chars().take(width - 1).collect();
    format!("{kept}…")
}
