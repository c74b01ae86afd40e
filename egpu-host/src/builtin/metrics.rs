//! The built-in maps as metrics, under the names, units and instruments of the OpenTelemetry
//! eBPF instrumentation's CUDA metrics, collected into one list ([`metrics`]): what `egpu run`
//! serves in Prometheus's formats and pushes over OTLP (the exporters live in the `egpu`
//! command, so that no exporter crate enters the preloaded library), and rendered here as an
//! OTLP/HTTP JSON export request ([`otlp_json`]), which needs nothing beyond `std`.
//!
//! Names, units and instruments are OBI's; a series is a process's (`pid`), and, where the
//! built-in probes count per device, a process's device's: kernel launches, graph launches,
//! bytes allocated and bytes set have a series per device the process used, labelled
//! `gpu_index` (OpenTelemetry `gpu.index`, the label `egpu_cuda_device_info` joins the device's
//! UUID and name on), at most 64 per process, plus one with `pid` alone for what no device holds
//! (a process's series sum to its total). The rest (copies by kind, grid and block sizes, frees,
//! synchronisations, kernel durations, launches by kernel name) stay per process, as their maps
//! are.

use std::fmt::Write as _;

use egpu_maps::HashMap;

use super::{BUCKETS, Builtin, CAPTURED, KernelTime, SYNC_SLOTS, Tally};

/// What the Prometheus rendering includes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsOptions {
    /// A `cuda_kernel_name` label on `gpu_cuda_kernel_launch_calls_total`, one series per
    /// kernel: off by default, since a program may launch thousands of kernels.
    pub kernel_names: bool,
}

impl MetricsOptions {
    /// With or without the kernel-name label.
    pub fn with_kernel_names(mut self, on: bool) -> MetricsOptions {
        self.kernel_names = on;
        self
    }
}

/// Histogram buckets rendered: `b` significant bits up to this many (larger values count in
/// `+Inf` only).
const RENDERED_BUCKETS: u32 = 41;

/// The `cuda.memcpy.kind` values, by `MemcpyCtx` kind.
const COPY_KIND_NAMES: [&str; 6] =
    ["Default", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Peer", "HostToHost"];

/// A histogram's points: per-bucket counts (bucket `b` holds values of `b` significant bits,
/// up to 41 buckets, whose upper bounds are [`bucket_bound`]), the sum and the count (values
/// past the last bucket count in the count only).
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// The count of each bucket (not cumulative).
    pub buckets: Vec<u64>,
    /// The sum of the values.
    pub sum: u64,
    /// How many values there were.
    pub count: u64,
    /// How many of the values make one of the metric's unit: 1 for counts and bytes, `1e9`
    /// for nanoseconds shown in seconds. The bounds and the sum are rendered divided by it.
    pub per_unit: f64,
}

impl Histogram {
    /// The upper bound of bucket `b` in the metric's unit: [`bucket_bound`] over
    /// [`per_unit`](Self::per_unit).
    pub fn bound(&self, b: u32) -> f64 {
        bucket_bound(b) as f64 / self.per_unit
    }

    /// The sum in the metric's unit.
    pub fn scaled_sum(&self) -> f64 {
        self.sum as f64 / self.per_unit
    }
}

/// A series' value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A monotonic count since the process started.
    Counter(u64),
    /// A monotonic total since the process started, not a whole number (GPU seconds).
    Total(f64),
    /// A distribution since the process started.
    Histogram(Histogram),
    /// A value now.
    Gauge(f64),
}

/// The instrument of a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic counts and totals ([`Value::Counter`], [`Value::Total`]).
    Counter,
    /// Distributions ([`Value::Histogram`]).
    Histogram,
    /// Values now ([`Value::Gauge`]).
    Gauge,
}

/// One series: its attributes (Prometheus label names, `pid` first; see [`otel_key`]) and
/// value.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Label names and values, `pid` first.
    pub attributes: Vec<(&'static str, String)>,
    /// The value.
    pub value: Value,
}

/// One metric: OpenTelemetry name and unit, its Prometheus name, help, and points.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// The OpenTelemetry name (`gpu.cuda.kernel.launch.calls`).
    pub otel: &'static str,
    /// The OpenTelemetry unit (`{call}`, `By`, `s`, `1`).
    pub unit: &'static str,
    /// The Prometheus name, as its exporter writes it (`gpu_cuda_kernel_launch_calls_total`:
    /// counters end in `_total`, a unit in its word, `_bytes` or `_seconds`, before that).
    pub prometheus: &'static str,
    /// One sentence of what it counts.
    pub help: &'static str,
    /// Its instrument.
    pub kind: Kind,
    /// Its series, one per process (and kernel, copy kind, device or map where labelled).
    pub points: Vec<Point>,
}

/// The OpenTelemetry attribute key of a Prometheus label (`pid` is `process.pid`,
/// `cuda_memcpy_kind` is `cuda.memcpy.kind`).
pub fn otel_key(label: &str) -> String {
    match label {
        "pid" => "process.pid".into(),
        l => l.replace('_', "."),
    }
}

fn pid(b: &Builtin) -> Vec<(&'static str, String)> {
    vec![("pid", b.pid.to_string())]
}

/// Every metric of `processes`' built-in maps, in a fixed order, each with one series per
/// process at least (the device-part ages only where a map has a device part).
pub fn metrics(processes: &[Builtin], options: MetricsOptions) -> Vec<Metric> {
    let launches = |b: &Builtin| -> Vec<(u64, u64)> {
        HashMap::<u64, u64>::from_raw(b.launches.clone())
            .map(|m| m.iter().collect())
            .unwrap_or_default()
    };
    let counter = |otel, unit, prometheus, help, value: &dyn Fn(&Builtin) -> u64| Metric {
        otel,
        unit,
        prometheus,
        help,
        kind: Kind::Counter,
        points: processes
            .iter()
            .map(|b| Point { attributes: pid(b), value: Value::Counter(value(b)) })
            .collect(),
    };
    // A series per process, or per process and device where the built-in probes counted it
    // per device (`by_device`).
    let split = |otel, unit, prometheus, help, total: &dyn Fn(&Builtin) -> u64, of: Count| {
        let points = processes.iter().flat_map(|b| by_device(b, total(b), of)).collect();
        Metric { otel, unit, prometheus, help, kind: Kind::Counter, points }
    };
    let mut metrics = Vec::new();
    let mut calls = split(
        "gpu.cuda.kernel.launch.calls",
        "{call}",
        "gpu_cuda_kernel_launch_calls_total",
        "CUDA kernel launches.",
        &|b| launches(b).iter().filter(|(id, _)| *id < CAPTURED).map(|(_, n)| n).sum(),
        |c| c.launches.0,
    );
    if options.kernel_names {
        calls.points.clear();
        for b in processes {
            let mut named: Vec<(String, u64)> = launches(b)
                .iter()
                .filter(|(id, _)| *id < CAPTURED)
                .map(|&(id, n)| (b.name(id), n))
                .collect();
            named.sort();
            for (name, n) in named {
                let mut attributes = pid(b);
                attributes.push(("cuda_kernel_name", name));
                calls.points.push(Point { attributes, value: Value::Counter(n) });
            }
        }
    }
    metrics.push(calls);
    metrics.push(split(
        "gpu.cuda.graph.launch.calls",
        "{call}",
        "gpu_cuda_graph_launch_calls_total",
        "CUDA graph launches.",
        &|b| launches(b).iter().find(|(id, _)| *id == u64::MAX).map_or(0, |e| e.1),
        |c| c.graph_launches,
    ));
    metrics.push(counter(
        "egpu.cuda.kernel.captured.calls",
        "{call}",
        "egpu_cuda_kernel_captured_calls_total",
        "CUDA kernel launches captured into graphs (not run until the graph is launched).",
        &|b| launches(b).iter().find(|(id, _)| *id == CAPTURED).map_or(0, |e| e.1),
    ));
    let histogram = |b: &Builtin, map: &egpu_maps::RawMap, first: u32, sum: u64, count: u64| {
        let buckets = (0..RENDERED_BUCKETS).map(|i| b.array(map, first + i)).collect();
        Value::Histogram(Histogram { buckets, sum, count, per_unit: 1.0 })
    };
    for (otel, unit, prometheus, offset, help) in [
        (
            "gpu.cuda.kernel.grid.size",
            "{block}",
            "gpu_cuda_kernel_grid_size",
            0,
            "Blocks in the grid of a CUDA kernel launch.",
        ),
        (
            "gpu.cuda.kernel.block.size",
            "{thread}",
            "gpu_cuda_kernel_block_size",
            BUCKETS + 1,
            "Threads in a block of a CUDA kernel launch.",
        ),
    ] {
        let points = processes
            .iter()
            .map(|b| {
                let count: u64 = (0..BUCKETS).map(|i| b.array(&b.shapes, offset + i)).sum();
                let sum = b.array(&b.shapes, offset + BUCKETS);
                Point { attributes: pid(b), value: histogram(b, &b.shapes, offset, sum, count) }
            })
            .collect();
        metrics.push(Metric { otel, unit, prometheus, help, kind: Kind::Histogram, points });
    }
    metrics.push(split(
        "gpu.cuda.memory.allocations",
        "By",
        "gpu_cuda_memory_allocations_bytes_total",
        "Bytes of CUDA memory allocated.",
        &|b| (0..3).map(|k| b.total(&b.allocations, k).bytes).sum(),
        |c| c.allocations.1,
    ));
    let mut copies = Vec::new();
    for b in processes {
        for (kind, kind_name) in COPY_KIND_NAMES.iter().enumerate() {
            let kind = kind as u32;
            let Tally { count, bytes: sum } = b.total(&b.copies, kind);
            if count == 0 {
                continue;
            }
            let mut attributes = pid(b);
            attributes.push(("cuda_memcpy_kind", (*kind_name).into()));
            let value = histogram(b, &b.copy_sizes, kind * BUCKETS, sum, count);
            copies.push(Point { attributes, value });
        }
    }
    metrics.push(Metric {
        otel: "gpu.cuda.memory.copies",
        unit: "By",
        prometheus: "gpu_cuda_memory_copies_bytes",
        help: "Bytes of a CUDA memory copy.",
        kind: Kind::Histogram,
        points: copies,
    });
    metrics.push(counter(
        "gpu.cuda.memory.free.bytes",
        "By",
        "gpu_cuda_memory_free_bytes_total",
        "Bytes of CUDA memory freed (of the allocations seen).",
        &|b| b.array(&b.freed, 0),
    ));
    metrics.push(split(
        "gpu.cuda.memset.bytes",
        "By",
        "gpu_cuda_memset_bytes_total",
        "Bytes set by CUDA memory sets.",
        &|b| (8..16).map(|k| b.total(&b.copies, k).bytes).sum(),
        |c| c.sets.1,
    ));
    let syncs: [(_, _, &[u32], _); 3] = [
        (
            "gpu.cuda.stream.synchronize.calls",
            "gpu_cuda_stream_synchronize_calls_total",
            &[0],
            "CUDA stream synchronisations.",
        ),
        (
            "gpu.cuda.event.synchronize.calls",
            "gpu_cuda_event_synchronize_calls_total",
            &[1],
            "CUDA event synchronisations.",
        ),
        (
            "gpu.cuda.device.synchronize.calls",
            "gpu_cuda_device_synchronize_calls_total",
            &[2, 3],
            "CUDA context and device synchronisations.",
        ),
    ];
    for (otel, prometheus, kinds, help) in syncs {
        metrics.push(counter(otel, "{call}", prometheus, help, &|b| {
            kinds.iter().map(|&k| b.total(&b.syncs, k).count).sum()
        }));
    }
    metrics.push(kernel_durations(processes, options));
    let mut waits = Vec::new();
    for b in processes {
        for (kind, kind_name) in SYNC_KIND_NAMES.iter().enumerate() {
            let first = kind as u32 * (BUCKETS + 1);
            let count: u64 = (0..BUCKETS).map(|i| b.array(&b.sync_times, first + i)).sum();
            if count == 0 {
                continue;
            }
            let sum = b.array(&b.sync_times, first + BUCKETS);
            let Value::Histogram(h) = histogram(b, &b.sync_times, first, sum, count) else {
                continue;
            };
            let mut attributes = pid(b);
            attributes.push(("cuda_synchronize_kind", (*kind_name).into()));
            let value = Value::Histogram(Histogram { per_unit: 1e9, ..h });
            waits.push(Point { attributes, value });
        }
    }
    metrics.push(Metric {
        otel: "gpu.cuda.synchronize.duration",
        unit: "s",
        prometheus: "gpu_cuda_synchronize_duration_seconds",
        help: "Time the host spent in a CUDA synchronisation (opt-in: egpu run --kernel-times).",
        kind: Kind::Histogram,
        points: waits,
    });
    type Health = fn(&Builtin) -> u64;
    let health: [(&str, &str, &str, Health); 5] = [
        ("egpu.probe.runs", "egpu_probe_runs_total", "Runs of egpu's host probes.", |b| {
            b.health().runs
        }),
        (
            "egpu.probe.faults",
            "egpu_probe_faults_total",
            "Runs of egpu's host probes that failed (the call went on).",
            |b| b.health().faults,
        ),
        (
            "egpu.programs.rejected",
            "egpu_programs_rejected_total",
            "Probe programs egpu refused at attach.",
            |b| b.health().rejected,
        ),
        (
            "egpu.records.dropped",
            "egpu_records_dropped_total",
            "Records egpu's probes dropped on full ring buffers.",
            |_| 0,
        ),
        (
            "egpu.modules.not_instrumentable",
            "egpu_modules_not_instrumentable_total",
            "Modules loaded without PTX, which egpu cannot instrument.",
            |b| b.total(&b.modules, 0).count,
        ),
    ];
    for (otel, prometheus, help, value) in health {
        metrics.push(counter(otel, "1", prometheus, help, &value));
    }
    let devices = device_labels(processes);
    if !devices.points.is_empty() {
        metrics.push(devices);
    }
    metrics.extend(per_device(processes).into_iter().filter(|m| !m.points.is_empty()));
    let ages = device_part_ages(processes);
    if !ages.points.is_empty() {
        metrics.push(ages);
    }
    metrics
        .extend(crate::gpu_time::metrics(processes).into_iter().filter(|m| !m.points.is_empty()));
    metrics
}

/// What the built-in probes counted on one device, for one metric.
type Count = fn(&super::DeviceCounts) -> u64;

/// A process's series of a metric the built-in probes count per device too (`of`, from
/// `per_device`), whose process total is `total`: one per device with a count, labelled
/// `gpu_index` (OpenTelemetry `gpu.index`, the device's ordinal, as `egpu_cuda_device_info` has
/// it, which names the device: at most 64 per process), and one labelled with the process alone
/// for what no device holds (the whole total in a process that counted nothing per device, or
/// one older than the per-device counts; what devices past the 64th did), so that the series
/// still sum to the process's total.
fn by_device(b: &Builtin, total: u64, of: Count) -> Vec<Point> {
    let mut points = Vec::new();
    let mut counted = 0u64;
    for c in b.device_counts() {
        let n = of(&c);
        if n > 0 {
            counted = counted.saturating_add(n);
            let mut attributes = pid(b);
            attributes.push(("gpu_index", c.index.to_string()));
            points.push(Point { attributes, value: Value::Counter(n) });
        }
    }
    let rest = total.saturating_sub(counted);
    if rest > 0 || points.is_empty() {
        points.push(Point { attributes: pid(b), value: Value::Counter(rest) });
    }
    points
}

/// The `cuda.synchronize.kind` values, by `SyncCtx` kind.
const SYNC_KIND_NAMES: [&str; SYNC_SLOTS as usize] = ["Stream", "Event", "Context", "Device"];

/// `gpu.cuda.kernel.duration`: the GPU time of kernel launches from CUDA events, a histogram in
/// seconds per process, or per kernel (`cuda_kernel_name`) with the kernel names.
fn kernel_durations(processes: &[Builtin], options: MetricsOptions) -> Metric {
    let value = |t: &KernelTime| {
        let buckets = t.buckets[..RENDERED_BUCKETS as usize].to_vec();
        Value::Histogram(Histogram { buckets, sum: t.sum_ns, count: t.count, per_unit: 1e9 })
    };
    let mut points = Vec::new();
    for b in processes {
        let times = b.kernel_times();
        if options.kernel_names {
            let mut named: Vec<(String, KernelTime)> =
                times.iter().map(|(id, t)| (b.name(*id), *t)).collect();
            named.sort_by(|x, y| x.0.cmp(&y.0));
            for (name, t) in named {
                let mut attributes = pid(b);
                attributes.push(("cuda_kernel_name", name));
                points.push(Point { attributes, value: value(&t) });
            }
        } else if !times.is_empty() {
            let mut all = KernelTime::default();
            for (_, t) in &times {
                all.count = all.count.saturating_add(t.count);
                all.sum_ns = all.sum_ns.saturating_add(t.sum_ns);
                for (a, n) in all.buckets.iter_mut().zip(t.buckets) {
                    *a = a.saturating_add(n);
                }
            }
            points.push(Point { attributes: pid(b), value: value(&all) });
        }
    }
    Metric {
        otel: "gpu.cuda.kernel.duration",
        unit: "s",
        prometheus: "gpu_cuda_kernel_duration_seconds",
        help: "GPU time of a CUDA kernel launch, from CUDA events around it (opt-in: egpu run \
               --kernel-times).",
        kind: Kind::Histogram,
        points,
    }
}

/// `egpu.cuda.device.info`: a gauge of 1 per device each process used, labelled with the
/// device's ordinal, UUID and name (`gpu_index`, `gpu_uuid`, `gpu_name`; OpenTelemetry
/// `gpu.index`, `gpu.uuid`, `gpu.name`), to join the process's series with (on `pid`).
fn device_labels(processes: &[Builtin]) -> Metric {
    let mut points = Vec::new();
    for b in processes {
        for d in b.devices() {
            let attributes = device_attributes(b, d.index);
            points.push(Point { attributes, value: Value::Gauge(1.0) });
        }
    }
    Metric {
        otel: "egpu.cuda.device.info",
        unit: "1",
        prometheus: "egpu_cuda_device_info",
        help: "A CUDA device the process used: its ordinal, UUID and name as labels (value 1).",
        kind: Kind::Gauge,
        points,
    }
}

/// A process's device `index` as labels: `pid`, then `gpu_index`, `gpu_uuid` and `gpu_name` (empty
/// where the driver did not say).
fn device_attributes(b: &Builtin, index: u32) -> Vec<(&'static str, String)> {
    let label = b.devices().into_iter().find(|d| d.index == index).unwrap_or_default();
    let mut attributes = pid(b);
    attributes.push(("gpu_index", index.to_string()));
    attributes.push(("gpu_uuid", label.uuid));
    attributes.push(("gpu_name", label.name));
    attributes
}

/// What the built-in probes counted per device, a series per process and device used, labelled
/// as [`device_labels`]: bytes copied, bytes allocated.
fn per_device(processes: &[Builtin]) -> [Metric; 2] {
    let each: [(&str, &str, &str, &str, Count); 2] = [
        (
            "egpu.cuda.device.memory.copies",
            "By",
            "egpu_cuda_device_memory_copies_bytes_total",
            "Bytes of CUDA memory copies made in a device's contexts.",
            |c| c.copies.1,
        ),
        (
            "egpu.cuda.device.memory.allocations",
            "By",
            "egpu_cuda_device_memory_allocations_bytes_total",
            "Bytes of CUDA memory allocated in a device's contexts.",
            |c| c.allocations.1,
        ),
    ];
    each.map(|(otel, unit, prometheus, help, value)| {
        let mut points = Vec::new();
        for b in processes {
            for c in b.device_counts() {
                let attributes = device_attributes(b, c.index);
                points.push(Point { attributes, value: Value::Counter(value(&c)) });
            }
        }
        Metric { otel, unit, prometheus, help, kind: Kind::Counter, points }
    })
}

/// How old the device part (in GPU memory) of each user map is: the time since it was last
/// merged into the map in shared memory, which `egpu maps` and the metrics read.
fn device_part_ages(processes: &[Builtin]) -> Metric {
    let now = egpu_maps::merge::wall_clock_ns();
    let mut points = Vec::new();
    for b in processes {
        for (name, raw) in b.user_maps() {
            if let Some(merged) = raw.device_merged_ns() {
                let mut attributes = pid(b);
                attributes.push(("map", name));
                let age = now.saturating_sub(merged) as f64 / 1e9;
                points.push(Point { attributes, value: Value::Gauge(age) });
            }
        }
    }
    Metric {
        otel: "egpu.map.device_part.age",
        unit: "s",
        prometheus: "egpu_map_device_part_age_seconds",
        help: "Time since the device part of a user map was last merged into the map.",
        kind: Kind::Gauge,
        points,
    }
}

/// The upper bound of histogram bucket `b`: `2^b - 1` (0 for the first).
pub fn bucket_bound(b: u32) -> u64 {
    if b == 0 { 0 } else { (1u64 << b) - 1 }
}

/// A JSON number: integers as integers (`1023`), other values as Rust writes them (`1.023e-6`).
fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 { format!("{}", x as i64) } else { format!("{x:?}") }
}

/// A JSON string literal.
fn json(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Renders processes' built-in maps as an OTLP/HTTP JSON `ExportMetricsServiceRequest` (for
/// `POST /v1/metrics`): one resource per process (`service.name` egpu, `process.pid`), the
/// metrics under their OpenTelemetry names and units, cumulative, sums monotonic, histograms
/// with explicit bounds `2^b - 1`. `start_ns` and `now_ns` are the points' start and
/// observation times (Unix nanoseconds).
pub fn otlp_json(
    processes: &[Builtin],
    options: MetricsOptions,
    start_ns: u64,
    now_ns: u64,
) -> String {
    let metrics = metrics(processes, options);
    let times = format!("\"startTimeUnixNano\":\"{start_ns}\",\"timeUnixNano\":\"{now_ns}\"");
    let mut resources = Vec::new();
    for b in processes {
        let mut rendered = Vec::new();
        for m in &metrics {
            let mut points = Vec::new();
            for p in m.points.iter().filter(|p| p.attributes[0].1 == b.pid.to_string()) {
                let attributes: Vec<String> = p.attributes[1..]
                    .iter()
                    .map(|(k, v)| {
                        format!(
                            "{{\"key\":{},\"value\":{{\"stringValue\":{}}}}}",
                            json(&otel_key(k)),
                            json(v)
                        )
                    })
                    .collect();
                let attributes = attributes.join(",");
                points.push(match &p.value {
                    Value::Counter(n) => {
                        format!("{{\"attributes\":[{attributes}],{times},\"asInt\":\"{n}\"}}")
                    }
                    Value::Gauge(x) | Value::Total(x) => {
                        format!("{{\"attributes\":[{attributes}],{times},\"asDouble\":{x}}}")
                    }
                    Value::Histogram(h) => {
                        let seen: u64 = h.buckets.iter().sum();
                        let counts: Vec<String> = h
                            .buckets
                            .iter()
                            .chain(std::iter::once(&h.count.saturating_sub(seen)))
                            .map(|n| format!("\"{n}\""))
                            .collect();
                        let bounds: Vec<String> =
                            (0..h.buckets.len() as u32).map(|b| number(h.bound(b))).collect();
                        format!(
                            "{{\"attributes\":[{attributes}],{times},\"count\":\"{}\",\"sum\":{},\
                             \"bucketCounts\":[{}],\"explicitBounds\":[{}]}}",
                            h.count,
                            number(h.scaled_sum()),
                            counts.join(","),
                            bounds.join(",")
                        )
                    }
                });
            }
            if points.is_empty() {
                continue;
            }
            let data = if m.kind == Kind::Histogram {
                format!(
                    "\"histogram\":{{\"aggregationTemporality\":2,\"dataPoints\":[{}]}}",
                    points.join(",")
                )
            } else if m.kind == Kind::Gauge {
                format!("\"gauge\":{{\"dataPoints\":[{}]}}", points.join(","))
            } else {
                format!(
                    "\"sum\":{{\"aggregationTemporality\":2,\"isMonotonic\":true,\"dataPoints\":[{}]}}",
                    points.join(",")
                )
            };
            rendered.push(format!(
                "{{\"name\":{},\"unit\":{},\"description\":{},{data}}}",
                json(m.otel),
                json(m.unit),
                json(m.help)
            ));
        }
        resources.push(format!(
            "{{\"resource\":{{\"attributes\":[{{\"key\":\"service.name\",\"value\":{{\"stringValue\":\"egpu\"}}}},\
             {{\"key\":\"process.pid\",\"value\":{{\"intValue\":\"{}\"}}}}]}},\
             \"scopeMetrics\":[{{\"scope\":{{\"name\":\"egpu\",\"version\":{}}},\"metrics\":[{}]}}]}}",
            b.pid,
            json(env!("CARGO_PKG_VERSION")),
            rendered.join(",")
        ));
    }
    format!("{{\"resourceMetrics\":[{}]}}", resources.join(","))
}
