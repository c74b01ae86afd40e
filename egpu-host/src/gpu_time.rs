//! GPU time per call site and per tag (issue 28): the GPU nanoseconds of each timed launch
//! (`EGPU_KERNEL_TIMES`: the CUDA events around it) added, where its events are harvested, to
//! two hash maps in shared memory, `egpu-<pid>-gpu_time_sites` (by `site_id`, 0 for a launch
//! without a site) and `egpu-<pid>-gpu_time_tags` (by `tag_id`, 0 for none), each value a
//! [`GpuTime`] (nanoseconds and launches).
//!
//! Bounded: each map holds [`CAPACITY`] keys; a launch whose key finds its map full is added to
//! the one [`OTHER`] entry (kept free for it), so the totals stay whole and the overflow is
//! counted (its `launches`).
//!
//! As metrics ([`metrics`], beside the built-in ones on `egpu run --metrics` and OTLP): GPU
//! seconds and launches per tag and per call site, each process's [`METRIC_KEYS`] keys of most
//! GPU time labelled by their id and the rest summed under `other`, so a series set stays small
//! whatever a program tags.

use bytemuck::{Pod, Zeroable};
use egpu_maps::{HashMap, MapError, Placement};

use crate::builtin::{Builtin, Kind, Metric, Point, Value};

/// The shared objects' names (see [`crate::builtin::shared_name`]): by site, by tag.
pub const MAPS: [&str; 2] = ["gpu_time_sites", "gpu_time_tags"];

/// Keys each map holds, [`OTHER`] included.
pub const CAPACITY: u32 = 1024;

/// The key of the launches whose own key found its map full.
pub const OTHER: u64 = u64::MAX;

/// A key's GPU time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GpuTime {
    /// GPU nanoseconds, summed.
    pub ns: u64,
    /// Launches timed.
    pub launches: u64,
}

/// A map's entries: key and time, by key.
pub type Entries = Vec<(u64, GpuTime)>;

/// A process's GPU time by site and by tag.
#[derive(Debug)]
pub struct GpuTimes {
    sites: HashMap<u64, GpuTime>,
    tags: HashMap<u64, GpuTime>,
}

impl GpuTimes {
    /// Creates process `pid`'s maps, in shared memory when `shared` (else, or when shared
    /// memory cannot be had, in process memory).
    pub fn create(pid: u32, shared: bool) -> Result<GpuTimes, MapError> {
        fn make(pid: u32, name: &str, shared: bool) -> Result<HashMap<u64, GpuTime>, MapError> {
            let map = 'made: {
                if shared {
                    let name = crate::builtin::shared_name(pid, name);
                    let _ = egpu_maps::unlink_shared(&name);
                    if let Ok(m) = HashMap::create(CAPACITY, Placement::Shared(name.into())) {
                        break 'made m;
                    }
                }
                HashMap::create(CAPACITY, Placement::Process)?
            };
            // The overflow's entry first, so that a full map always has it.
            map.insert(&OTHER, &GpuTime::default())?;
            Ok(map)
        }
        Ok(GpuTimes { sites: make(pid, MAPS[0], shared)?, tags: make(pid, MAPS[1], shared)? })
    }

    /// Opens process `pid`'s maps, in shared memory.
    pub fn open(pid: u32) -> Result<GpuTimes, MapError> {
        let name = |m| crate::builtin::shared_name(pid, m);
        Ok(GpuTimes {
            sites: HashMap::open_shared(&name(MAPS[0]))?,
            tags: HashMap::open_shared(&name(MAPS[1]))?,
        })
    }

    /// Adds one launch of `ns` GPU nanoseconds, at `site` (0: none) under `tag` (0: none).
    pub fn add(&self, site: u64, tag: u64, ns: u64) {
        for (map, key) in [(&self.sites, site), (&self.tags, tag)] {
            let added = |key: u64| {
                map.fetch_add_field(&key, |t| &t.ns, ns)?;
                map.fetch_add_field(&key, |t| &t.launches, 1)
            };
            if added(key).is_err() {
                let _ = added(OTHER);
            }
        }
    }

    /// The entries by site, then by tag, those with launches only.
    pub fn entries(&self) -> (Entries, Entries) {
        let read = |m: &HashMap<u64, GpuTime>| {
            let mut all: Vec<_> = m.iter().filter(|(_, t)| t.launches > 0).collect();
            all.sort_by_key(|&(k, _)| k);
            all
        };
        (read(&self.sites), read(&self.tags))
    }
}

/// Keys per process labelled in the metrics (the rest are summed under `other`).
pub const METRIC_KEYS: usize = 32;

/// The metrics of `processes`' GPU time per tag and per call site, in seconds and launches
/// (see the module documentation); a process without the maps has no series.
pub fn metrics(processes: &[Builtin]) -> Vec<Metric> {
    let metric = |otel, unit, prometheus, help| Metric {
        otel,
        unit,
        prometheus,
        help,
        kind: Kind::Counter,
        points: Vec::new(),
    };
    let mut out = [
        metric(
            "egpu.gpu.time.tag",
            "s",
            "egpu_gpu_time_tag_seconds_total",
            "GPU seconds of the timed kernel launches, by the tag the program set (0: none).",
        ),
        metric(
            "egpu.gpu.launches.tag",
            "{launch}",
            "egpu_gpu_launches_tag_total",
            "Timed kernel launches, by the tag the program set (0: none).",
        ),
        metric(
            "egpu.gpu.time.site",
            "s",
            "egpu_gpu_time_site_seconds_total",
            "GPU seconds of the timed kernel launches, by call site (its id in the report; 0: \
             none).",
        ),
        metric(
            "egpu.gpu.launches.site",
            "{launch}",
            "egpu_gpu_launches_site_total",
            "Timed kernel launches, by call site (its id in the report; 0: none).",
        ),
    ];
    for b in processes {
        let Some(times) = b.gpu_times() else { continue };
        let (sites, tags) = times.entries();
        for (entries, label, at) in [(tags, "tag_id", 0), (sites, "site_id", 2)] {
            for (key, time) in bounded(entries) {
                let attributes = vec![("pid", b.pid.to_string()), (label, key)];
                let seconds = Value::Total(time.ns as f64 / 1e9);
                out[at].points.push(Point { attributes: attributes.clone(), value: seconds });
                let launches = Value::Counter(time.launches);
                out[at + 1].points.push(Point { attributes, value: launches });
            }
        }
    }
    out.into()
}

/// The [`METRIC_KEYS`] entries of most GPU time, labelled by their key, then the rest
/// ([`OTHER`] among them) summed as `other`, when there is any.
fn bounded(mut entries: Entries) -> Vec<(String, GpuTime)> {
    entries.sort_by_key(|&(key, t)| (key == OTHER, std::cmp::Reverse(t.ns), key));
    let mut out: Vec<(String, GpuTime)> = Vec::new();
    let mut other = GpuTime::default();
    for (i, (key, time)) in entries.into_iter().enumerate() {
        if key != OTHER && i < METRIC_KEYS {
            out.push((key.to_string(), time));
        } else {
            other.ns += time.ns;
            other.launches += time.launches;
        }
    }
    if other.launches > 0 {
        out.push(("other".into(), other));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metrics keep each process's 32 keys of most GPU time and sum the rest, the map's
    /// overflow included, as `other`: the totals stay whole.
    #[test]
    fn metrics_are_bounded_and_whole() {
        let mut entries: Entries = (1..=40u64)
            .map(|k| (k, GpuTime { ns: k * 1000, launches: 1 }))
            .chain(std::iter::once((OTHER, GpuTime { ns: 5, launches: 2 })))
            .collect();
        entries.reverse();
        let shown = bounded(entries);
        assert_eq!(shown.len(), METRIC_KEYS + 1);
        assert_eq!(shown[0], ("40".to_string(), GpuTime { ns: 40_000, launches: 1 }));
        assert_eq!(shown[METRIC_KEYS - 1].0, "9");
        let other = GpuTime { ns: (1..=8u64).map(|k| k * 1000).sum::<u64>() + 5, launches: 10 };
        assert_eq!(shown[METRIC_KEYS], ("other".to_string(), other));
        // Few keys: all shown, no `other`.
        let few =
            bounded(vec![(0, GpuTime { ns: 7, launches: 1 }), (3, GpuTime { ns: 9, launches: 2 })]);
        assert_eq!(
            few,
            vec![
                ("3".to_string(), GpuTime { ns: 9, launches: 2 }),
                ("0".into(), GpuTime { ns: 7, launches: 1 })
            ]
        );
    }

    /// A process whose GPU-time maps exist has its series, found once they are made.
    #[test]
    fn metrics_show_a_process_gpu_time() {
        let pid = std::process::id() ^ 0x4000_0000;
        let b = Builtin::create(pid, false).expect("the built-in maps");
        assert!(metrics(std::slice::from_ref(&b)).iter().all(|m| m.points.is_empty()));
        let Ok(times) = GpuTimes::create(pid, true) else {
            println!("skipped: no shared memory here");
            return;
        };
        times.add(11, 7, 2_000_000_000);
        times.add(0, 7, 500_000_000);
        let all = metrics(std::slice::from_ref(&b));
        let by = |name: &str| all.iter().find(|m| m.prometheus == name).expect(name).points.clone();
        let tag = by("egpu_gpu_time_tag_seconds_total");
        assert_eq!(tag.len(), 1);
        assert_eq!(tag[0].attributes, vec![("pid", pid.to_string()), ("tag_id", "7".into())]);
        assert_eq!(tag[0].value, Value::Total(2.5));
        let sites = by("egpu_gpu_launches_site_total");
        let values: Vec<_> =
            sites.iter().map(|p| (p.attributes[1].1.clone(), p.value.clone())).collect();
        assert_eq!(
            values,
            vec![("11".to_string(), Value::Counter(1)), ("0".into(), Value::Counter(1))]
        );
        for name in crate::gpu_time::MAPS {
            let _ = egpu_maps::unlink_shared(&crate::builtin::shared_name(pid, name));
        }
    }

    #[test]
    fn a_full_map_sends_its_launches_to_other() {
        let times = GpuTimes::create(std::process::id(), false).expect("the maps");
        for key in 1..=u64::from(CAPACITY) + 9 {
            times.add(key, 7, 1000);
        }
        let (sites, tags) = times.entries();
        assert_eq!(sites.len(), CAPACITY as usize);
        let other = sites.iter().find(|(k, _)| *k == OTHER).expect("other").1;
        assert_eq!(other, GpuTime { ns: 10 * 1000, launches: 10 });
        let total: u64 = sites.iter().map(|(_, t)| t.ns).sum();
        assert_eq!(total, (u64::from(CAPACITY) + 9) * 1000);
        assert_eq!(tags, vec![(7, GpuTime { ns: total, launches: u64::from(CAPACITY) + 9 })]);
    }
}
